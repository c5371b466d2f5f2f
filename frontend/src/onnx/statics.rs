//! Value-keyed inputs (JAX's `static_argnums`, torch.compile's value
//! guards). Some operands must be known while tracing: a Reshape's
//! `shape`, a Slice's `starts`, a reduction's `axes`, a Range's bounds.
//! ONNX graphs often pass them as graph inputs. At load, [`find`] walks the graph backwards from
//! each such operand: a graph input it reaches, directly or through
//! computation (a `Cast`, an `Add`; `Shape` and `Size` stop the walk,
//! since they read only a shape), becomes a *static* input. A call passes
//! a static input's dtype, shape and values as static integer leaves, so
//! they join the handler cache key: the trace reads the input as a
//! concrete tensor (everything computed from it folds), a new value
//! retraces, a repeated one hits the cache, and the other inputs stay
//! traced. A static input holds at most [`MAX_STATIC_ELEMENTS`] values
//! (a larger one is an error naming it and the operand it reaches); the
//! cache keeps the jit function's usual bound of signatures, least
//! recently used evicted. Operands computed from traced data cut the
//! graph instead (`segments.rs`).

use super::model::{Attr, Node};
use super::{onnx_error, IoSpec, ValueKind};
use crate::error::Result;
use crate::tensor::Tensor;
use std::collections::HashMap;
use tilejit_ir::{DType, ErrorKind};

/// The most values a static input may hold: more is a data tensor, whose
/// every new value would be a new program.
pub const MAX_STATIC_ELEMENTS: usize = 4096;

/// The input positions of each op type whose values the build reads.
pub(crate) fn static_operands(op: &str) -> &'static [usize] {
    match op {
        "Reshape" | "Expand" | "Tile" | "Split" | "Squeeze" | "Unsqueeze" | "CumSum"
        | "CumProd" | "Trilu" | "TopK" | "OneHot" | "Upsample" | "CenterCropPad" | "Compress"
        | "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd"
        | "ReduceSumSquare" | "ReduceL1" | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" => &[1],
        "ConstantOfShape" | "NonZero" | "Unique" | "HannWindow" | "HammingWindow"
        | "BlackmanWindow" => &[0],
        "Range" => &[0, 1, 2],
        "Dropout" => &[1, 2],
        "Loop" => &[0, 1],
        "NonMaxSuppression" => &[0, 1, 2, 3, 4],
        "Slice" => &[1, 2, 3, 4],
        "Pad" | "Resize" => &[1, 2, 3],
        "DFT" => &[1, 2],
        "STFT" => &[1, 3],
        "Col2Im" => &[1, 2],
        "AffineGrid" => &[1],
        "MaxUnpool" => &[2],
        "SequenceAt" | "SequenceErase" | "SplitToSequence" => &[1],
        "SequenceInsert" => &[2],
        "MelWeightMatrix" => &[0, 1, 2, 3, 4],
        _ => &[],
    }
}

/// Why an input is static: the node and operand it reaches first.
#[derive(Clone, Debug)]
pub(crate) struct Reason {
    node: String,
    op: String,
    operand: usize,
}

/// For each graph input, `Some(reason)` if it is static.
pub(crate) fn find(nodes: &[Node], inputs: &[IoSpec]) -> Vec<Option<Reason>> {
    // Walk backwards: nodes are in topological order, so every consumer of
    // a value is seen before its producer.
    let mut needed: HashMap<String, Reason> = HashMap::new();
    for n in nodes.iter().rev() {
        let why_out = n
            .outputs
            .iter()
            .find_map(|o| needed.get(o.as_str()).cloned());
        if let Some(why) = why_out {
            // NonZero and the like run eagerly between phases: the walk
            // stops there, as at a Shape.
            let eager = n.domain.is_empty() && super::segments::data_shaped(&n.op);
            if !matches!(n.op.as_str(), "Shape" | "Size") && !eager {
                for i in n.inputs.iter().filter(|i| !i.is_empty()) {
                    needed.entry(i.clone()).or_insert_with(|| why.clone());
                }
            }
        }
        // NonZero and the like over data run eagerly between two traced
        // pieces instead (`segments.rs`): a data tensor is no key.
        if n.domain.is_empty() && !super::segments::data_shaped(&n.op) {
            // An If whose branches give sequences or optionals must take
            // one branch: those cannot be selected elementwise.
            let cond: &[usize] = match n.op == "If" && branches_give_values(n) {
                true => &[0],
                false => &[],
            };
            for &k in static_operands(&n.op).iter().chain(cond) {
                if let Some(i) = n.inputs.get(k).filter(|i| !i.is_empty()) {
                    needed.entry(i.clone()).or_insert_with(|| Reason {
                        node: n.name.clone(),
                        op: n.op.clone(),
                        operand: k,
                    });
                }
            }
        }
    }
    inputs
        .iter()
        .map(|s| needed.get(&s.name).cloned())
        .collect()
}

/// Whether an If's branch declares a sequence or optional output.
fn branches_give_values(n: &Node) -> bool {
    ["then_branch", "else_branch"].iter().any(|b| {
        matches!(n.attrs.get(*b), Some(Attr::Graph(g))
            if g.output_kinds.iter().any(|k| *k != ValueKind::Tensor))
    })
}

/// The dtypes a static input may have, by their code in the leaves.
const CODES: [DType; DType::ALL.len()] = DType::ALL;

/// Checks a static input's declared dims at load: fixed dims over the
/// bound can never run.
pub(crate) fn check_declared(s: &IoSpec, why: &Reason) -> Result<()> {
    if let Some(dims) = &s.dims {
        let fixed: Option<usize> = dims
            .iter()
            .map(|d| match d {
                super::Dim::Fixed(n) => Some(*n),
                super::Dim::Symbol(_) => None,
            })
            .product();
        if let Some(n) = fixed.filter(|&n| n > MAX_STATIC_ELEMENTS) {
            return Err(too_big(s, why, n));
        }
    }
    Ok(())
}

fn too_big(s: &IoSpec, why: &Reason, n: usize) -> crate::error::Error {
    onnx_error(
        &why.node,
        &why.op,
        &s.name,
        ErrorKind::Unsupported,
        format!(
            "input `{}` reaches operand {} of this node, whose values must be known when \
             tracing, so its values key the compiled program; it has {n} elements, over the \
             {MAX_STATIC_ELEMENTS} a value-keyed input may have",
            s.name, why.operand
        ),
    )
}

/// Appends a static input's leaves: dtype code, rank, dims, then each
/// value (a float's `f64` bits, an integer or bool as `i64`).
pub(crate) fn encode(s: &IoSpec, why: &Reason, t: &Tensor, out: &mut Vec<i64>) -> Result<()> {
    if t.numel() > MAX_STATIC_ELEMENTS {
        return Err(too_big(s, why, t.numel()));
    }
    let code = CODES.iter().position(|&d| d == t.dtype()).unwrap_or(0);
    out.push(code as i64);
    out.push(t.rank() as i64);
    out.extend(t.shape().iter().map(|&d| d as i64));
    if t.dtype().is_float() {
        let v = t.cast(DType::F64).to_vec::<f64>()?;
        out.extend(v.iter().map(|x| x.to_bits() as i64));
    } else {
        out.extend(t.cast(DType::I64).to_vec::<i64>()?);
    }
    Ok(())
}

/// Takes one static input back from the front of `leaves`, as a concrete
/// tensor.
pub(crate) fn decode(leaves: &mut std::slice::Iter<'_, i64>) -> Result<Tensor> {
    let mut next = || {
        leaves
            .next()
            .copied()
            .ok_or_else(|| onnx_error("", "", "", ErrorKind::Internal, "static input leaves ended"))
    };
    let dtype = CODES[(next()? as usize).min(CODES.len() - 1)];
    let rank = next()? as usize;
    let dims = (0..rank)
        .map(|_| next().map(|d| d as usize))
        .collect::<Result<Vec<_>>>()?;
    let n: usize = dims.iter().product();
    let raw = (0..n).map(|_| next()).collect::<Result<Vec<_>>>()?;
    let t = match dtype.is_float() {
        true => Tensor::from_vec(
            raw.iter().map(|&b| f64::from_bits(b as u64)).collect(),
            &dims,
        )?,
        false => Tensor::from_vec(raw, &dims)?,
    };
    Ok(t.cast(dtype))
}
