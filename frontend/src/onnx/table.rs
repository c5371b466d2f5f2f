//! The ONNX op table: one row per supported op type, naming the attributes
//! it reads, a check run at load (attribute values, constant inputs) and a
//! build run while tracing, which maps the node onto tilejit's public ops.
//! An op type without a row, or an attribute a row does not list, is an
//! error at load. Values only known at trace time (a shape computed from
//! data) are errors naming the node then, never approximated.

use super::model::{dtype_of, Attr, Node};
use super::onnx_error;
use super::value::Value;
use crate::conv::{Conv2d, Pool2d};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::collections::HashMap;
use tilejit_ir::{DType, ErrorKind};

/// What a check or build sees besides the node.
pub(crate) struct Cx<'a> {
    /// The model's default-domain opset.
    pub opset: i64,
    /// Values known at load: initializers and `Constant` outputs.
    pub consts: &'a HashMap<String, Tensor>,
    /// While tracing, the values built so far (what a sub-graph sees of
    /// its outer scope); `None` at load.
    pub env: Option<&'a super::subgraph::Env>,
}

type Check = fn(&Node, &Cx) -> Result<()>;
type Build = fn(&Node, &Cx, &[Option<Tensor>]) -> Result<Vec<Tensor>>;
/// A build over values that may be sequences or optionals.
pub(crate) type BuildValues = fn(&Node, &Cx, &[Option<Value>]) -> Result<Vec<Value>>;

/// How a row builds its node.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// One input, one output, elementwise.
    Unary(fn(&Tensor) -> Tensor),
    /// Two inputs (numpy broadcasting), one output.
    Binary(fn(&Tensor, &Tensor) -> Tensor),
    /// Anything else.
    Node(Build),
    /// A node that reads or makes sequences or optionals (`table/sequence.rs`).
    Values(BuildValues),
}

/// One supported op type.
pub(crate) struct Row {
    /// The op type.
    pub op: &'static str,
    /// The attributes it reads; any other is an error at load.
    pub attrs: &'static [&'static str],
    /// The load-time check of attribute values and constant inputs.
    pub check: Check,
    /// The trace-time build.
    pub kind: Kind,
}

fn no_check(_: &Node, _: &Cx) -> Result<()> {
    Ok(())
}

macro_rules! unary {
    ($op:literal, $f:expr) => {
        Row {
            op: $op,
            attrs: &[],
            check: no_check,
            kind: Kind::Unary($f),
        }
    };
}
macro_rules! binary {
    ($op:literal, $f:expr) => {
        Row {
            op: $op,
            attrs: &[],
            check: no_check,
            kind: Kind::Binary($f),
        }
    };
}
macro_rules! node {
    ($op:literal, [$($a:literal),*], $check:expr, $build:expr) => {
        Row { op: $op, attrs: &[$($a),*], check: $check, kind: Kind::Node($build) }
    };
}

// Rows by area, each a child module so it reads this file's helpers.
mod image;
mod linalg;
mod nms;
mod quant;
mod recurrent;
mod reduce;
mod sequence;
mod signal;
mod ssm;
mod training;
mod transformer;
mod unique;
mod unroll;

pub(crate) use unroll::{charge, unroll_limit, unrolled, with_step_budget};

pub(super) use quant::round_to;

/// Every supported op type: the core rows, then each area's.
static TABLES: &[&[Row]] = &[
    TABLE,
    image::ROWS,
    linalg::ROWS,
    nms::ROWS,
    quant::ROWS,
    recurrent::ROWS,
    reduce::ROWS,
    sequence::ROWS,
    signal::ROWS,
    ssm::ROWS,
    transformer::ROWS,
    unique::ROWS,
];

/// The core op types: elementwise, shape, matmul, conv and pool rows.
static TABLE: &[Row] = &[
    unary!("Relu", |x| x.relu()),
    unary!("Sigmoid", |x| x.sigmoid()),
    unary!("Tanh", |x| x.tanh()),
    unary!("Exp", |x| x.exp()),
    unary!("Log", |x| x.log()),
    unary!("Sqrt", |x| x.sqrt()),
    unary!("Neg", |x| -x),
    unary!("Abs", |x| x.abs()),
    unary!("Reciprocal", |x| x.recip()),
    unary!("Floor", |x| x.floor()),
    unary!("Ceil", |x| x.ceil()),
    unary!("Round", |x| x.round()),
    unary!("Sign", |x| x.sign()),
    unary!("Sin", |x| x.sin()),
    unary!("Cos", |x| x.cos()),
    unary!("Tan", |x| x.sin() / x.cos()),
    unary!("Erf", |x| x.erf()),
    unary!("Atan", |x| x.atan()),
    unary!("Asin", |x| x.asin()),
    unary!("Acos", |x| x.acos()),
    unary!("Asinh", |x| x.asinh()),
    unary!("Acosh", |x| x.acosh()),
    unary!("Atanh", |x| x.atanh()),
    unary!("Sinh", |x| (x.exp() - (-x).exp()) * 0.5),
    unary!("Cosh", |x| (x.exp() + (-x).exp()) * 0.5),
    unary!("Softsign", |x| x / (x.abs() + 1.0)),
    unary!("Softplus", |x| (x.exp() + 1.0).log()),
    unary!("Not", |x| x.cast(DType::I32).rsub(1i32).cast(DType::Bool)),
    unary!("IsNaN", |x| x
        .eq(x)
        .cast(DType::I32)
        .rsub(1i32)
        .cast(DType::Bool)),
    binary!("Add", |a, b| a + b),
    binary!("Sub", |a, b| a - b),
    binary!("Mul", |a, b| a * b),
    binary!("Div", |a, b| a / b),
    binary!("Pow", |a, b| a.pow(&b.cast(a.dtype()))),
    binary!("Equal", |a, b| a.eq(b)),
    binary!("Less", |a, b| a.lt(b)),
    binary!("Greater", |a, b| a.gt(b)),
    binary!("LessOrEqual", |a, b| a.le(b)),
    binary!("GreaterOrEqual", |a, b| a.ge(b)),
    binary!("And", |a, b| (a.cast(DType::I32) * b.cast(DType::I32))
        .cast(DType::Bool)),
    binary!("Or", |a, b| a
        .cast(DType::I32)
        .maximum(&b.cast(DType::I32))
        .cast(DType::Bool)),
    binary!("Xor", |a, b| a
        .cast(DType::I32)
        .eq(&b.cast(DType::I32))
        .cast(DType::I32)
        .rsub(1i32)
        .cast(DType::Bool)),
    binary!("PRelu", |x, s| Tensor::where_cond(
        &x.lt(&zero_like(x)),
        &(x * s),
        x
    )),
    binary!("BitwiseAnd", |a, b| a.bitwise_and(b)),
    binary!("BitwiseOr", |a, b| a.bitwise_or(b)),
    binary!("BitwiseXor", |a, b| a.bitwise_xor(b)),
    unary!("BitwiseNot", |x| x.bitwise_not()),
    node!("BitShift", ["direction"], check_bit_shift, |n, _, ins| {
        let (x, by) = (req(n, ins, 0)?, req(n, ins, 1)?);
        match attr_s(n, "direction", "")? {
            "LEFT" => one(x.shl(by)),
            _ => one(x.shr(by)),
        }
    }),
    node!("Einsum", ["equation"], check_einsum, |n, _, ins| {
        let ops: Vec<&Tensor> = ins.iter().flatten().collect();
        one(Tensor::einsum(attr_s(n, "equation", "")?, &ops))
    }),
    node!("Max", [], no_check, |_, _, ins| fold(ins, |a, b| a
        .maximum(b))),
    node!("Min", [], no_check, |_, _, ins| fold(ins, |a, b| a
        .minimum(b))),
    node!("Sum", [], no_check, |_, _, ins| fold(ins, |a, b| a + b)),
    node!("Mean", [], no_check, |_, _, ins| {
        let n = ins.len() as f64;
        Ok(vec![fold(ins, |a, b| a + b)?.remove(0) / n])
    }),
    node!("Where", [], no_check, |n, _, ins| {
        one(Tensor::where_cond(
            req(n, ins, 0)?,
            req(n, ins, 1)?,
            req(n, ins, 2)?,
        ))
    }),
    node!("LeakyRelu", ["alpha"], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let alpha = attr_f(n, "alpha", 0.01)? as f64;
        one(Tensor::where_cond(&x.lt(&zero_like(x)), &(x * alpha), x))
    }),
    node!("Elu", ["alpha"], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let alpha = attr_f(n, "alpha", 1.0)? as f64;
        one(Tensor::where_cond(
            &x.lt(&zero_like(x)),
            &((x.exp() - 1.0) * alpha),
            x,
        ))
    }),
    node!("Selu", ["alpha", "gamma"], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let alpha = attr_f(n, "alpha", 1.673_263_2)? as f64;
        let gamma = attr_f(n, "gamma", 1.050_701)? as f64;
        let neg = (x.exp() * alpha - alpha) * gamma;
        one(Tensor::where_cond(&x.le(&zero_like(x)), &neg, &(x * gamma)))
    }),
    node!("HardSigmoid", ["alpha", "beta"], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let (a, b) = (
            attr_f(n, "alpha", 0.2)? as f64,
            attr_f(n, "beta", 0.5)? as f64,
        );
        one(clamp(&(x * a + b), Some(0.0), Some(1.0)))
    }),
    node!("HardSwish", [], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        one(x * clamp(&(x * (1.0 / 6.0) + 0.5), Some(0.0), Some(1.0)))
    }),
    node!("Gelu", ["approximate"], check_gelu, |n, _, ins| {
        let x = req(n, ins, 0)?;
        if attr_s(n, "approximate", "none")? == "tanh" {
            return one(x.gelu());
        }
        one(x * ((x * std::f64::consts::FRAC_1_SQRT_2).erf() + 1.0) * 0.5)
    }),
    node!("Clip", ["min", "max"], no_check, build_clip),
    node!(
        "Cast",
        ["to", "saturate", "round_mode"],
        quant::check_cast,
        quant::build_cast
    ),
    node!(
        "CastLike",
        ["saturate", "round_mode"],
        quant::check_cast_like,
        quant::build_cast_like
    ),
    node!("BitCast", ["to"], check_cast, build_bitcast),
    node!("Dropout", ["seed", "ratio"], check_dropout, build_dropout),
    node!("MatMul", [], no_check, |n, _, ins| one(matmul_nd(
        n,
        req(n, ins, 0)?,
        req(n, ins, 1)?
    )?)),
    node!(
        "Gemm",
        ["alpha", "beta", "transA", "transB", "broadcast"],
        no_check,
        build_gemm
    ),
    node!(
        "Conv",
        [
            "auto_pad",
            "dilations",
            "group",
            "kernel_shape",
            "pads",
            "strides"
        ],
        check_conv,
        build_conv
    ),
    node!(
        "MaxPool",
        [
            "auto_pad",
            "ceil_mode",
            "dilations",
            "kernel_shape",
            "pads",
            "storage_order",
            "strides"
        ],
        image::check_pool,
        |n, cx, ins| image::build_pool(n, cx, ins, image::Pool::Max)
    ),
    node!(
        "AveragePool",
        [
            "auto_pad",
            "ceil_mode",
            "count_include_pad",
            "dilations",
            "kernel_shape",
            "pads",
            "strides"
        ],
        image::check_pool,
        |n, cx, ins| image::build_pool(n, cx, ins, image::Pool::Avg)
    ),
    node!("GlobalAveragePool", [], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let mut y = x.clone();
        for a in 2..x.rank() {
            y = y.mean(a as isize, true);
        }
        one(y)
    }),
    node!("GlobalMaxPool", [], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let mut y = x.clone();
        for a in 2..x.rank() {
            y = y.max(a as isize, true);
        }
        one(y)
    }),
    node!(
        "BatchNormalization",
        ["epsilon", "momentum", "training_mode", "spatial", "is_test"],
        check_bn,
        build_bn
    ),
    node!(
        "LayerNormalization",
        ["axis", "epsilon", "stash_type"],
        check_ln,
        build_layer_norm
    ),
    node!("Softmax", ["axis"], no_check, |n, cx, ins| build_softmax(
        n, cx, ins, false
    )),
    node!(
        "LogSoftmax",
        ["axis"],
        no_check,
        |n, cx, ins| build_softmax(n, cx, ins, true)
    ),
    node!("Flatten", ["axis"], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        // Flatten's axis lies in [-rank, rank]: -1 is rank - 1.
        let raw = attr_i(n, "axis", 1)?;
        let raw = if raw < 0 { raw + x.rank() as i64 } else { raw };
        let a = axis(n, "axis", raw, x.rank() + 1)?;
        let (outer, inner) = (
            x.shape()[..a].iter().product(),
            x.shape()[a..].iter().product(),
        );
        one(x.reshape(&[outer, inner]))
    }),
    node!("Reshape", ["allowzero", "shape"], no_check, build_reshape),
    node!("Transpose", ["perm"], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let perm = match attr_ints(n, "perm")? {
            Some(p) => p
                .iter()
                .map(|&a| axis(n, "perm", a, x.rank()))
                .collect::<Result<Vec<_>>>()?,
            None => (0..x.rank()).rev().collect(),
        };
        one(x.permute(&perm))
    }),
    node!("Squeeze", ["axes"], no_check, build_squeeze),
    node!("Unsqueeze", ["axes"], no_check, build_unsqueeze),
    node!("Concat", ["axis"], no_check, |n, _, ins| {
        let xs: Vec<&Tensor> = ins.iter().flatten().collect();
        let first = xs
            .first()
            .ok_or_else(|| fail(n, "inputs", ErrorKind::BadArgument, "no inputs"))?;
        let a = axis(n, "axis", attr_i(n, "axis", 0)?, first.rank())?;
        if let Some(t) = xs.iter().find(|t| t.rank() != first.rank()) {
            return Err(fail(
                n,
                "inputs",
                ErrorKind::Shape,
                format!("operands of rank {} and {}", first.rank(), t.rank()),
            ));
        }
        // Empty operands (a shape list of length 0) add nothing.
        let xs: Vec<&Tensor> = match xs.iter().any(|t| t.shape()[a] > 0) {
            true => xs.into_iter().filter(|t| t.shape()[a] > 0).collect(),
            false => xs,
        };
        if xs.len() == 1 {
            return one(xs[0].clone());
        }
        one(Tensor::cat(&xs, a as isize))
    }),
    node!(
        "Split",
        ["axis", "split", "num_outputs"],
        no_check,
        build_split
    ),
    node!(
        "Slice",
        ["starts", "ends", "axes"],
        check_slice,
        build_slice
    ),
    node!("Gather", ["axis"], no_check, build_gather),
    node!("GatherElements", ["axis"], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let a = axis(n, "axis", attr_i(n, "axis", 0)?, x.rank())?;
        one(x.gather(a as isize, &from_end(req(n, ins, 1)?, x.shape()[a] as i64)))
    }),
    node!("GatherND", ["batch_dims"], check_gather_nd, build_gather_nd),
    node!("Shape", ["start", "end"], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let r = x.rank() as i64;
        let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
        let (s, e) = (clampi(attr_i(n, "start", 0)?), clampi(attr_i(n, "end", r)?));
        let dims: Vec<i64> = x.shape()[s..e.max(s)].iter().map(|&d| d as i64).collect();
        let len = dims.len();
        one(Tensor::from_vec(dims, &[len])?)
    }),
    node!("Size", [], no_check, |n, _, ins| one(Tensor::from_vec(
        vec![req(n, ins, 0)?.numel() as i64],
        &[]
    )?)),
    node!(
        "Constant",
        [
            "value",
            "value_float",
            "value_floats",
            "value_int",
            "value_ints"
        ],
        check_constant,
        |n, _, _| one(constant_value(n)?)
    ),
    node!("ConstantOfShape", ["value"], no_check, |n, _, ins| {
        let shape = dims_of(n, "input", req(n, ins, 0)?)?;
        let (value, dtype) = match n.attrs.get("value") {
            Some(Attr::Tensor(t)) if t.numel() == 1 => {
                (t.cast(DType::F64).reshape(&[]).item::<f64>()?, t.dtype())
            }
            Some(_) => {
                return Err(fail(
                    n,
                    "value",
                    ErrorKind::BadArgument,
                    "must be a one-element tensor",
                ))
            }
            None => (0.0, DType::F32),
        };
        one(Tensor::full(&shape, value, dtype))
    }),
    node!("Range", [], no_check, build_range),
    node!("Expand", [], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let shape = ints_of(n, "shape", req(n, ins, 1)?)?;
        let target = broadcast_shape(n, x.shape(), &shape)?;
        one(x.broadcast_to(&target))
    }),
    node!("Tile", [], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let reps = ints_of(n, "repeats", req(n, ins, 1)?)?;
        if reps.len() != x.rank() || reps.iter().any(|&r| r < 1) {
            return Err(fail(
                n,
                "repeats",
                ErrorKind::BadArgument,
                "one positive count per axis",
            ));
        }
        // Each axis as a broadcast along a new axis before it, merged:
        // one view, whatever the count (a cat of `r` copies was `r` refs).
        let mut y = x.clone();
        for (a, &r) in reps.iter().enumerate() {
            if r > 1 {
                y = live(y)?;
                let s = y.shape().to_vec();
                let r = usize::try_from(r).unwrap_or(usize::MAX);
                let merged = s[a].checked_mul(r).filter(|&m| m <= isize::MAX as usize);
                let Some(merged) = merged else {
                    return Err(fail(
                        n,
                        "repeats",
                        ErrorKind::BadArgument,
                        format!("{r} copies of axis {a} (of {}) overflow a size", s[a]),
                    ));
                };
                let (mut unit, mut wide, mut out) = (s.clone(), s.clone(), s);
                unit.insert(a, 1);
                wide.insert(a, r);
                out[a] = merged;
                y = y.reshape(&unit).broadcast_to(&wide).reshape(&out);
            }
        }
        one(y)
    }),
    node!("Trilu", ["upper"], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let k = match opt(ins, 1) {
            Some(k) => ints_of(n, "k", k)?.first().copied().unwrap_or(0) as isize,
            None => 0,
        };
        one(if attr_i(n, "upper", 1)? != 0 {
            x.triu(k)
        } else {
            x.tril(k)
        })
    }),
    node!("Pad", ["mode", "pads", "value"], check_pad, build_pad),
];

/// Every supported op type's name.
pub(crate) fn op_types() -> impl Iterator<Item = &'static str> {
    TABLES.iter().flat_map(|t| t.iter()).map(|r| r.op)
}

/// The row of an op type in the default domain (or the training one).
pub(crate) fn row(node: &Node) -> Option<&'static Row> {
    if node.domain == training::DOMAIN {
        return training::ROWS.iter().find(|r| r.op == node.op);
    }
    if !(node.domain.is_empty() || node.domain == "ai.onnx") {
        return None;
    }
    TABLES
        .iter()
        .flat_map(|t| t.iter())
        .find(|r| r.op == node.op)
}

/// Checks a node at load: a row exists, every attribute is one it reads,
/// and its own check passes.
pub(crate) fn check(node: &Node, cx: &Cx) -> Result<&'static Row> {
    let Some(r) = row(node) else {
        let domain = if node.domain.is_empty() {
            String::new()
        } else {
            format!(" of domain `{}`", node.domain)
        };
        return Err(fail(
            node,
            "",
            ErrorKind::Unsupported,
            format!("op `{}`{domain} is not supported", node.op),
        ));
    };
    for (name, value) in &node.attrs {
        if !r.attrs.contains(&name.as_str()) {
            return Err(fail(
                node,
                name,
                ErrorKind::Unsupported,
                "this attribute is not supported",
            ));
        }
        let unread = match value {
            Attr::Other(what) => Some(*what),
            // Only Optional reads a type (values carry theirs).
            Attr::Type if node.op != "Optional" => Some("a type"),
            _ => None,
        };
        if let Some(what) = unread {
            return Err(fail(
                node,
                name,
                ErrorKind::Unsupported,
                format!("{what} attribute is not supported"),
            ));
        }
    }
    let want = match r.kind {
        Kind::Unary(_) => Some(1),
        Kind::Binary(_) => Some(2),
        Kind::Node(_) | Kind::Values(_) => None,
    };
    if let Some(k) = want {
        if node.inputs.len() != k || node.inputs.iter().any(|i| i.is_empty()) {
            return Err(fail(
                node,
                "inputs",
                ErrorKind::BadArgument,
                format!("takes {k} input(s), got {}", node.inputs.len()),
            ));
        }
    }
    (r.check)(node, cx)?;
    Ok(r)
}

/// Builds a node's outputs while tracing.
pub(crate) fn build(r: &Row, node: &Node, cx: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    match r.kind {
        Kind::Unary(f) => one(f(req(node, ins, 0)?)),
        Kind::Binary(f) => one(f(req(node, ins, 0)?, req(node, ins, 1)?)),
        Kind::Node(b) => b(node, cx, ins),
        Kind::Values(_) => Err(fail(
            node,
            "",
            ErrorKind::Internal,
            "a sequence row built as a tensor row",
        )),
    }
}

// ---- helpers ----

/// A trace-time table's allocation (`tilejit_ir::fallible`), sized by
/// dims or values the file declares, as this crate's error: its memory is
/// asked for, never assumed.
pub(crate) fn mem<T>(r: std::result::Result<T, tilejit_ir::IrError>) -> Result<T> {
    r.map_err(|e| tilejit_runtime::RuntimeError::from(e).into())
}

/// `f(0), .., f(n - 1)` as a trace-time table, allocated through
/// [`mem`]: `n` is a dim or size the file declares.
pub(crate) fn table_of<T>(n: usize, f: impl Fn(usize) -> T) -> Result<Vec<T>> {
    mem(tilejit_ir::fallible::collect((0..n).map(f)))
}

/// The length of a trace-time table of `dims` (multiplied) that numbers
/// in the file set: an error naming `attr` when the product overflows or
/// passes [`MAX_FOLDED`], so no such table is ever asked of the allocator.
pub(crate) fn folded_len(n: &Node, attr: &str, dims: &[usize]) -> Result<usize> {
    tilejit_ir::shape::checked_product(dims)
        .filter(|&len| len <= MAX_FOLDED)
        .ok_or_else(|| {
            fail(
                n,
                attr,
                ErrorKind::BadArgument,
                format!(
                    "makes a table of {dims:?} values at trace time; tilejit builds at most {MAX_FOLDED}"
                ),
            )
        })
}

pub(crate) fn fail(n: &Node, attr: &str, kind: ErrorKind, message: impl Into<String>) -> Error {
    onnx_error(&n.name, &n.op, attr, kind, message)
}

/// The tensor, or its error: shape arithmetic must not read an error
/// tensor's placeholder shape.
fn live(t: Tensor) -> Result<Tensor> {
    match t.error() {
        Some(e) => Err(e.clone()),
        None => Ok(t),
    }
}

fn one(t: Tensor) -> Result<Vec<Tensor>> {
    Ok(vec![t])
}

fn req<'a>(n: &Node, ins: &'a [Option<Tensor>], i: usize) -> Result<&'a Tensor> {
    ins.get(i).and_then(|t| t.as_ref()).ok_or_else(|| {
        fail(
            n,
            &format!("input {i}"),
            ErrorKind::BadArgument,
            "this input is required",
        )
    })
}

fn opt(ins: &[Option<Tensor>], i: usize) -> Option<&Tensor> {
    ins.get(i).and_then(|t| t.as_ref())
}

fn zero_like(x: &Tensor) -> Tensor {
    Tensor::full(&[], 0.0, x.dtype())
}

fn clamp(x: &Tensor, lo: Option<f64>, hi: Option<f64>) -> Tensor {
    let mut y = x.clone();
    if let Some(lo) = lo {
        y = y.maximum(&Tensor::full(&[], lo, x.dtype()));
    }
    if let Some(hi) = hi {
        y = y.minimum(&Tensor::full(&[], hi, x.dtype()));
    }
    y
}

fn fold(ins: &[Option<Tensor>], f: fn(&Tensor, &Tensor) -> Tensor) -> Result<Vec<Tensor>> {
    let mut xs = ins.iter().flatten();
    let first = xs
        .next()
        .cloned()
        .unwrap_or_else(|| Tensor::scalar(0.0, DType::F32));
    one(xs.fold(first, |acc, x| f(&acc, x)))
}

fn attr_i(n: &Node, name: &str, default: i64) -> Result<i64> {
    match n.attrs.get(name) {
        None => Ok(default),
        Some(Attr::Int(v)) => Ok(*v),
        Some(_) => Err(fail(n, name, ErrorKind::BadArgument, "must be an integer")),
    }
}

fn attr_f(n: &Node, name: &str, default: f32) -> Result<f32> {
    match n.attrs.get(name) {
        None => Ok(default),
        Some(Attr::Float(v)) => Ok(*v),
        Some(_) => Err(fail(n, name, ErrorKind::BadArgument, "must be a float")),
    }
}

fn attr_s<'a>(n: &'a Node, name: &str, default: &'a str) -> Result<&'a str> {
    match n.attrs.get(name) {
        None => Ok(default),
        Some(Attr::Str(v)) => Ok(v),
        Some(_) => Err(fail(n, name, ErrorKind::BadArgument, "must be a string")),
    }
}

fn attr_ints(n: &Node, name: &str) -> Result<Option<Vec<i64>>> {
    match n.attrs.get(name) {
        None => Ok(None),
        Some(Attr::Ints(v)) => Ok(Some(v.clone())),
        Some(_) => Err(fail(
            n,
            name,
            ErrorKind::BadArgument,
            "must be a list of integers",
        )),
    }
}

/// A normalised axis (negative counts from the end).
fn axis(n: &Node, what: &str, a: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let v = if a < 0 { a + r } else { a };
    // A scalar has no axis: callers index the shape with the result.
    if (0..r).contains(&v) {
        Ok(v as usize)
    } else {
        Err(fail(
            n,
            what,
            ErrorKind::BadArgument,
            format!("axis {a} is outside rank {rank}"),
        ))
    }
}

/// The values of an integer tensor known at trace time (from shapes,
/// initializers or constants); a value computed from the data is an error.
fn ints_of(n: &Node, what: &str, t: &Tensor) -> Result<Vec<i64>> {
    if t.is_traced() {
        return Err(fail(
            n,
            what,
            ErrorKind::Unsupported,
            "must be known when tracing (a constant, or computed from shapes), but it depends on the data",
        ));
    }
    if !t.dtype().is_int() {
        return Err(fail(
            n,
            what,
            ErrorKind::DType,
            format!("must be integers, got {:?}", t.dtype()),
        ));
    }
    t.cast(DType::I64).to_vec::<i64>()
}

fn floats_of(n: &Node, what: &str, t: &Tensor) -> Result<Vec<f64>> {
    if t.is_traced() {
        return Err(fail(
            n,
            what,
            ErrorKind::Unsupported,
            "must be known when tracing, but it depends on the data",
        ));
    }
    t.cast(DType::F64).to_vec::<f64>()
}

fn dims_of(n: &Node, what: &str, t: &Tensor) -> Result<Vec<usize>> {
    ints_of(n, what, t)?
        .into_iter()
        .map(|d| {
            usize::try_from(d).map_err(|_| {
                fail(
                    n,
                    what,
                    ErrorKind::BadArgument,
                    format!("dimension {d} is negative"),
                )
            })
        })
        .collect()
}

/// An int list given as an attribute (older opsets) or as input `i`.
fn ints_param(n: &Node, ins: &[Option<Tensor>], i: usize, name: &str) -> Result<Option<Vec<i64>>> {
    if let Some(v) = attr_ints(n, name)? {
        return Ok(Some(v));
    }
    opt(ins, i).map(|t| ints_of(n, name, t)).transpose()
}

/// The same at load, from initializers and constants (`None`: not known).
fn const_ints(n: &Node, cx: &Cx, i: usize, name: &str) -> Result<Option<Vec<i64>>> {
    if let Some(v) = attr_ints(n, name)? {
        return Ok(Some(v));
    }
    match n.inputs.get(i).and_then(|name| cx.consts.get(name)) {
        Some(t) => Ok(Some(ints_of(n, name, t)?)),
        None => Ok(None),
    }
}

fn broadcast_shape(n: &Node, a: &[usize], b: &[i64]) -> Result<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let x = if i + a.len() >= r {
            a[i + a.len() - r] as i64
        } else {
            1
        };
        let y = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            1
        };
        out[i] = match (x, y) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(fail(
                    n,
                    "shape",
                    ErrorKind::Shape,
                    format!("{a:?} does not broadcast to {b:?}"),
                ))
            }
        } as usize;
    }
    Ok(out)
}

// ---- checks ----

fn check_gelu(n: &Node, _: &Cx) -> Result<()> {
    match attr_s(n, "approximate", "none")? {
        "none" | "tanh" => Ok(()),
        s => Err(fail(
            n,
            "approximate",
            ErrorKind::BadArgument,
            format!("`{s}` is neither `none` nor `tanh`"),
        )),
    }
}

/// BitCast: the same bits read as another dtype of the same size. Between
/// integers (and bool to u8) that is a wrapping cast; f32 <-> i32/u32 and
/// f64 <-> i64/u64 of a traced tensor are `Tensor::bitcast`; any other
/// float's bits only in a tensor known when tracing.
fn build_bitcast(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let to = dtype_of(attr_i(n, "to", 1)? as i32)
        .map_err(|m| fail(n, "to", ErrorKind::Unsupported, m))?;
    let from = x.dtype();
    if from.size_bytes() != to.size_bytes() {
        return Err(fail(
            n,
            "to",
            ErrorKind::DType,
            format!("BitCast needs dtypes of one size, not {from} and {to}"),
        ));
    }
    let int_like = |d: DType| d.is_int() || d == DType::Bool;
    if from == to {
        return one(x.clone());
    }
    if int_like(from) && to.is_int() {
        return one(x.cast(to));
    }
    let core = matches!(
        (from, to),
        (DType::F32, DType::I32 | DType::U32)
            | (DType::I32 | DType::U32, DType::F32)
            | (DType::F64, DType::I64 | DType::U64)
            | (DType::I64 | DType::U64, DType::F64)
    );
    if x.is_traced() {
        if core {
            return one(x.bitcast(to));
        }
        return Err(fail(
            n,
            "input",
            ErrorKind::Unsupported,
            format!(
                "BitCast {from} -> {to} of a traced tensor (integer <-> integer, f32 <-> i32/u32 \
                 and f64 <-> i64/u64 are supported)"
            ),
        ));
    }
    let a = x.to_array()?;
    let bytes = a
        .buffer()
        .to_le_bytes()
        .map_err(|e| fail(n, "input", ErrorKind::BadArgument, e.to_string()))?;
    let buffer = tilejit_ir::Buffer::from_le_bytes(to, &bytes)
        .map_err(|e| fail(n, "input", ErrorKind::BadArgument, e.to_string()))?;
    let array = tilejit_ir::Array::new(*a.shape(), buffer)
        .map_err(|e| fail(n, "input", ErrorKind::BadArgument, e.to_string()))?;
    one(Tensor::concrete(array))
}

fn check_cast(n: &Node, _: &Cx) -> Result<()> {
    dtype_of(attr_i(n, "to", 1)? as i32).map_err(|m| fail(n, "to", ErrorKind::Unsupported, m))?;
    Ok(())
}

fn check_dropout(n: &Node, cx: &Cx) -> Result<()> {
    // Known at load (constants): a training run that drops values fails
    // here; graph inputs are value-keyed and checked when tracing.
    let known = |i: usize| n.inputs.get(i).and_then(|t| cx.consts.get(t));
    require_no_drops(n, known(1), known(2))
}

/// Fails unless a Dropout with this `ratio` and `training_mode` (each
/// absent, or a known value) passes its input through: inference, or
/// training with a ratio of 0. Training with another ratio drops values at random
/// (onnx's reference draws them from numpy's generator): unsupported.
fn require_no_drops(n: &Node, ratio: Option<&Tensor>, training: Option<&Tensor>) -> Result<()> {
    let training = match training {
        Some(t) => floats_of(n, "training_mode", t)?.iter().any(|&v| v != 0.0),
        None => false,
    };
    let ratio = match ratio {
        Some(r) => floats_of(n, "ratio", r)?.first().copied().unwrap_or(0.5),
        None => attr_f(n, "ratio", 0.5)? as f64,
    };
    if training && ratio != 0.0 {
        return Err(fail(
            n,
            "training_mode",
            ErrorKind::Unsupported,
            format!("training mode with ratio {ratio} drops values at random"),
        ));
    }
    Ok(())
}

/// Dropout that keeps every value: the input, and a mask of all true
/// (bool from opset 10, the input's type before).
fn build_dropout(n: &Node, cx: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let opt = |i: usize| ins.get(i).and_then(|t| t.as_ref());
    require_no_drops(n, opt(1), opt(2))?;
    let mut out = vec![x.clone()];
    if n.outputs.get(1).is_some_and(|o| !o.is_empty()) {
        let dtype = if cx.opset < 10 {
            x.dtype()
        } else {
            DType::Bool
        };
        out.push(Tensor::ones(x.shape(), dtype));
    }
    Ok(out)
}

fn check_bn(n: &Node, _: &Cx) -> Result<()> {
    let training = attr_i(n, "training_mode", 0)? != 0;
    let extra = n.outputs.iter().skip(1).filter(|o| !o.is_empty()).count();
    // Training mode (opset 14 on) has the running mean and variance as
    // outputs 1 and 2; before 14 extra outputs also held saved statistics.
    if (training && n.outputs.len() > 3) || (!training && extra > 0) {
        return Err(fail(
            n,
            "training_mode",
            ErrorKind::Unsupported,
            "outputs beyond Y need training_mode = 1 and at most the running mean and variance",
        ));
    }
    Ok(())
}

/// BatchNormalization: inference with the given statistics, or (training
/// mode) with the batch's own mean and population variance over every
/// axis but 1, plus the running statistics `input * momentum + batch * (1
/// - momentum)`, as onnx's reference computes them.
fn build_bn(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let eps = attr_f(n, "epsilon", 1e-5)? as f64;
    let (scale, bias) = (req(n, ins, 1)?, req(n, ins, 2)?);
    let (mean, var) = (req(n, ins, 3)?, req(n, ins, 4)?);
    if attr_i(n, "training_mode", 0)? == 0 {
        return one(x.batch_norm(mean, var, Some(scale), Some(bias), eps));
    }
    if x.rank() < 2 {
        return Err(fail(
            n,
            "X",
            ErrorKind::Shape,
            "training mode needs a channel axis (rank 2 or more)",
        ));
    }
    let momentum = attr_f(n, "momentum", 0.9)? as f64;
    let c = x.shape()[1];
    let perm: Vec<usize> = std::iter::once(1)
        .chain((0..x.rank()).filter(|&a| a != 1))
        .collect();
    let rows = x.permute(&perm).reshape(&[c, x.numel() / c.max(1)]);
    let batch_mean = rows.mean(-1, true);
    let centered = &rows - &batch_mean;
    let batch_var = (&centered * &centered).mean(-1, false);
    let batch_mean = batch_mean.reshape(&[c]);
    let y = x.batch_norm(&batch_mean, &batch_var, Some(scale), Some(bias), eps);
    let running = |input: &Tensor, batch: &Tensor| input * momentum + batch * (1.0 - momentum);
    let mut out = vec![y, running(mean, &batch_mean), running(var, &batch_var)];
    out.truncate(n.outputs.len().max(1));
    Ok(out)
}

fn check_ln(n: &Node, _: &Cx) -> Result<()> {
    match attr_i(n, "stash_type", 1)? {
        1 => Ok(()),
        s => Err(fail(
            n,
            "stash_type",
            ErrorKind::Unsupported,
            format!("stash_type {s}; only 1 (float) is supported"),
        )),
    }
}

fn check_constant(n: &Node, _: &Cx) -> Result<()> {
    constant_value(n).map(|_| ())
}

fn constant_value(n: &Node) -> Result<Tensor> {
    let (name, v) = n.attrs.iter().next().ok_or_else(|| {
        fail(
            n,
            "value",
            ErrorKind::BadArgument,
            "a Constant needs a value",
        )
    })?;
    let bad = || {
        fail(
            n,
            name,
            ErrorKind::BadArgument,
            "the attribute has the wrong type",
        )
    };
    Ok(match (name.as_str(), v) {
        ("value", Attr::Tensor(t)) => t.clone(),
        ("value_float", Attr::Float(f)) => Tensor::from_vec(vec![*f], &[])?,
        ("value_floats", Attr::Floats(f)) => Tensor::from_vec(f.clone(), &[f.len()])?,
        ("value_int", Attr::Int(i)) => Tensor::from_vec(vec![*i], &[])?,
        ("value_ints", Attr::Ints(i)) => Tensor::from_vec(i.clone(), &[i.len()])?,
        _ => return Err(bad()),
    })
}

fn check_pad(n: &Node, _: &Cx) -> Result<()> {
    match attr_s(n, "mode", "constant")? {
        "constant" | "edge" | "reflect" | "wrap" => Ok(()),
        m => Err(fail(
            n,
            "mode",
            ErrorKind::Unsupported,
            format!("mode `{m}` is not a Pad mode (constant, edge, reflect, wrap)"),
        )),
    }
}

fn check_bit_shift(n: &Node, _: &Cx) -> Result<()> {
    match attr_s(n, "direction", "")? {
        "LEFT" | "RIGHT" => Ok(()),
        d => Err(fail(
            n,
            "direction",
            ErrorKind::BadArgument,
            format!("is `{d}`, not LEFT or RIGHT"),
        )),
    }
}

fn check_einsum(n: &Node, _: &Cx) -> Result<()> {
    // The rest (subscripts against ranks) is `Tensor::einsum`'s, at trace.
    if attr_s(n, "equation", "")?.trim().is_empty() {
        return Err(fail(n, "equation", ErrorKind::BadArgument, "is required"));
    }
    Ok(())
}

fn check_slice(n: &Node, cx: &Cx) -> Result<()> {
    if let Some(steps) = const_ints(n, cx, 4, "steps")? {
        if steps.contains(&0) {
            return Err(fail(n, "steps", ErrorKind::BadArgument, "a step of 0"));
        }
    }
    Ok(())
}

/// Spatial window attributes shared by Conv and the pools.
struct Window {
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    /// (begin, end) per spatial axis.
    pads: Vec<(usize, usize)>,
}

fn usizes(n: &Node, name: &str, v: Vec<i64>) -> Result<Vec<usize>> {
    v.into_iter()
        .map(|x| {
            usize::try_from(x)
                .map_err(|_| fail(n, name, ErrorKind::BadArgument, format!("{x} is negative")))
        })
        .collect()
}

/// Reads the window attributes for `spatial` axes of sizes `image`
/// (`None` at load, when sizes are unknown: `SAME_*` is resolved later).
fn window(n: &Node, kernel: Vec<usize>, image: Option<&[usize]>) -> Result<Window> {
    let k = kernel.len();
    let get = |name: &str, default: usize| -> Result<Vec<usize>> {
        match attr_ints(n, name)? {
            Some(v) if v.len() == k => usizes(n, name, v),
            Some(v) => Err(fail(
                n,
                name,
                ErrorKind::BadArgument,
                format!("has {} values for {k} spatial axes", v.len()),
            )),
            None => Ok(vec![default; k]),
        }
    };
    let strides = get("strides", 1)?;
    let dilations = get("dilations", 1)?;
    if strides.contains(&0) || dilations.contains(&0) {
        return Err(fail(
            n,
            "strides",
            ErrorKind::BadArgument,
            "strides and dilations must be positive",
        ));
    }
    let auto = attr_s(n, "auto_pad", "NOTSET")?;
    let pads = match auto {
        "NOTSET" => match attr_ints(n, "pads")? {
            Some(p) if p.len() == 2 * k => {
                let p = usizes(n, "pads", p)?;
                (0..k).map(|i| (p[i], p[i + k])).collect()
            }
            Some(p) => {
                return Err(fail(
                    n,
                    "pads",
                    ErrorKind::BadArgument,
                    format!("has {} values for {k} spatial axes", p.len()),
                ))
            }
            None => vec![(0, 0); k],
        },
        "VALID" => vec![(0, 0); k],
        "SAME_UPPER" | "SAME_LOWER" => match image {
            None => vec![(0, 0); k],
            Some(img) => (0..k)
                .map(|i| {
                    // Numbers from the file (an empty kernel or image, a
                    // huge dilation): saturated, a pad the op then refuses.
                    let out = img[i].div_ceil(strides[i]);
                    let span = kernel[i]
                        .saturating_sub(1)
                        .saturating_mul(dilations[i])
                        .saturating_add(1);
                    let total = out
                        .saturating_sub(1)
                        .saturating_mul(strides[i])
                        .saturating_add(span)
                        .saturating_sub(img[i]);
                    let small = total / 2;
                    if auto == "SAME_UPPER" {
                        (small, total - small)
                    } else {
                        (total - small, small)
                    }
                })
                .collect(),
        },
        a => {
            return Err(fail(
                n,
                "auto_pad",
                ErrorKind::BadArgument,
                format!("`{a}` is not an auto_pad mode"),
            ))
        }
    };
    Ok(Window {
        kernel,
        strides,
        dilations,
        pads,
    })
}

/// A conv's spatial rank (from `kernel_shape`, else constant weights,
/// else 2), which must be 1 to 3; `what` names the op in the error.
fn conv_rank(n: &Node, cx: &Cx, what: &str) -> Result<usize> {
    let k = match attr_ints(n, "kernel_shape")? {
        Some(k) => k.len(),
        None => match n.inputs.get(1).and_then(|w| cx.consts.get(w)) {
            Some(w) => w.rank().saturating_sub(2),
            None => 2,
        },
    };
    if !(1..=3).contains(&k) {
        return Err(fail(
            n,
            "kernel_shape",
            ErrorKind::Unsupported,
            format!("{k}-D {what} are not supported (1-D to 3-D are)"),
        ));
    }
    Ok(k)
}

fn check_conv(n: &Node, cx: &Cx) -> Result<()> {
    let k = conv_rank(n, cx, "convolutions")?;
    window(n, vec![1; k], None).map(|_| ())
}

// ---- builds ----

fn build_clip(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let (mut y, attr_lo, attr_hi) = (x.clone(), n.attrs.get("min"), n.attrs.get("max"));
    if attr_lo.is_some() || attr_hi.is_some() {
        let lo = attr_f(n, "min", f32::MIN)? as f64;
        let hi = attr_f(n, "max", f32::MAX)? as f64;
        return one(clamp(x, Some(lo), Some(hi)));
    }
    if let Some(lo) = opt(ins, 1) {
        y = y.maximum(&lo.cast(x.dtype()));
    }
    if let Some(hi) = opt(ins, 2) {
        y = y.minimum(&hi.cast(x.dtype()));
    }
    one(y)
}

/// ONNX MatMul (numpy `matmul`): 1-D operands, broadcast batch dims.
fn matmul_nd(n: &Node, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (ra, rb) = (a.rank(), b.rank());
    if ra == 0 || rb == 0 {
        return Err(fail(
            n,
            "inputs",
            ErrorKind::Shape,
            "MatMul needs operands of rank 1 or more",
        ));
    }
    if ra == 1 && rb == 1 {
        return Ok((a * b).sum(0, false));
    }
    if ra == 1 {
        let y = live(matmul_nd(n, &a.reshape(&[1, a.shape()[0]]), b)?)?;
        let mut s = y.shape().to_vec();
        s.remove(s.len() - 2);
        return Ok(y.reshape(&s));
    }
    if rb == 1 {
        let y = live(matmul_nd(n, a, &b.reshape(&[b.shape()[0], 1]))?)?;
        let s = &y.shape()[..y.rank() - 1];
        return Ok(y.reshape(s));
    }
    let same_batch = ra == 3 && rb == 3 && a.shape()[0] == b.shape()[0];
    if (rb == 2 && (ra == 2 || ra == 3)) || same_batch {
        return Ok(a.matmul(b));
    }
    let (m, k) = (a.shape()[ra - 2], a.shape()[ra - 1]);
    let nn = b.shape()[rb - 1];
    let batch_a: Vec<i64> = a.shape()[..ra - 2].iter().map(|&d| d as i64).collect();
    let batch = broadcast_shape(n, &b.shape()[..rb - 2], &batch_a)?;
    let bsz: usize = batch.iter().product();
    let with = |batch: &[usize], x: usize, y: usize| [batch, &[x, y]].concat();
    let a3 = a.broadcast_to(&with(&batch, m, k)).reshape(&[bsz, m, k]);
    let y = if rb == 2 {
        a3.matmul(b)
    } else {
        let kb = b.shape()[rb - 2];
        a3.matmul(
            &b.broadcast_to(&with(&batch, kb, nn))
                .reshape(&[bsz, kb, nn]),
        )
    };
    Ok(y.reshape(&with(&batch, m, nn)))
}

fn build_gemm(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let mut a = req(n, ins, 0)?.clone();
    let mut b = req(n, ins, 1)?.clone();
    if attr_i(n, "transA", 0)? != 0 {
        a = a.transpose(0, 1);
    }
    if attr_i(n, "transB", 0)? != 0 {
        b = b.transpose(0, 1);
    }
    let (alpha, beta) = (
        attr_f(n, "alpha", 1.0)? as f64,
        attr_f(n, "beta", 1.0)? as f64,
    );
    let mut y = a.matmul(&b);
    if alpha != 1.0 {
        y = y * alpha;
    }
    if let Some(c) = opt(ins, 2) {
        y = if beta == 1.0 { y + c } else { y + c * beta };
    }
    one(y)
}

/// Pads spatial axes (from axis 2) by `pads` with `value`, where a
/// window's own padding cannot (uneven, or beyond what the op allows).
fn pad_spatial(x: &Tensor, pads: &[(usize, usize)], value: f64) -> Tensor {
    let mut all = vec![(0, 0); 2];
    all.extend_from_slice(pads);
    x.pad(&all, value)
}

fn build_conv(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let (x, w) = (req(n, ins, 0)?, req(n, ins, 1)?);
    let spatial = w.rank().saturating_sub(2);
    if !(1..=3).contains(&spatial) || x.rank() != w.rank() {
        return Err(fail(
            n,
            "W",
            ErrorKind::Unsupported,
            format!(
                "weights of rank {} (1-D to 3-D convs are supported)",
                w.rank()
            ),
        ));
    }
    let kernel = w.shape()[2..].to_vec();
    let win = window(n, kernel, Some(&x.shape()[2..]))?;
    let groups = usize::try_from(attr_i(n, "group", 1)?)
        .map_err(|_| fail(n, "group", ErrorKind::BadArgument, "negative"))?;
    if spatial == 3 {
        let x = pad_spatial(x, &win.pads, 0.0);
        let b = opt(ins, 2);
        return one(image::conv_nd(
            n,
            &x,
            w,
            b,
            &win.strides,
            &win.dilations,
            groups,
        )?);
    }
    // 1-D: one row of a 2-D image.
    let (x, w, win) = if spatial == 1 {
        let xs = x.shape();
        let ws = w.shape();
        let x2 = x.reshape(&[xs[0], xs[1], 1, xs[2]]);
        let w2 = w.reshape(&[ws[0], ws[1], 1, ws[2]]);
        let win2 = Window {
            kernel: vec![1, win.kernel[0]],
            strides: vec![1, win.strides[0]],
            dilations: vec![1, win.dilations[0]],
            pads: vec![(0, 0), win.pads[0]],
        };
        (x2, w2, win2)
    } else {
        (x.clone(), w.clone(), win)
    };
    let even = win.pads.iter().all(|(a, b)| a == b);
    let (x, padding) = if even {
        (x, (win.pads[0].0, win.pads[1].0))
    } else {
        (pad_spatial(&x, &win.pads, 0.0), (0, 0))
    };
    let opts = Conv2d {
        stride: (win.strides[0], win.strides[1]),
        padding,
        dilation: (win.dilations[0], win.dilations[1]),
        groups,
    };
    let y = x.conv2d_with(&w, opt(ins, 2), opts);
    if spatial == 1 {
        // A conv that failed (channels, a window past the image) has no
        // axes to drop.
        let s = y.check()?.shape().to_vec();
        return one(y.reshape(&[s[0], s[1], s[3]]));
    }
    one(y)
}

/// A pool's `kernel_shape`, checked against the input's rank (N, C and
/// one dim per kernel axis).
pub(super) fn pool_kernel(n: &Node, x: &Tensor) -> Result<Vec<usize>> {
    let kernel = usizes(
        n,
        "kernel_shape",
        attr_ints(n, "kernel_shape")?.unwrap_or_default(),
    )?;
    if x.rank() != kernel.len() + 2 {
        return Err(fail(
            n,
            "X",
            ErrorKind::Shape,
            format!("rank {} for a {}-D pool", x.rank(), kernel.len()),
        ));
    }
    Ok(kernel)
}

/// The 2-D (and 1-D) pools `Pool2d` runs natively; `image/pool_nd.rs`
/// sends the rest elsewhere.
fn build_pool_2d(n: &Node, _: &Cx, ins: &[Option<Tensor>], max: bool) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let kernel = pool_kernel(n, x)?;
    let spatial = kernel.len();
    let win = window(n, kernel, Some(&x.shape()[2..]))?;
    let (x, win) = if spatial == 1 {
        let xs = x.shape();
        let win2 = Window {
            kernel: vec![1, win.kernel[0]],
            strides: vec![1, win.strides[0]],
            dilations: vec![1, 1],
            pads: vec![(0, 0), win.pads[0]],
        };
        (x.reshape(&[xs[0], xs[1], 1, xs[2]]), win2)
    } else {
        (x.clone(), win)
    };
    let count_include_pad = attr_i(n, "count_include_pad", 0)? != 0;
    // Pool2d pads evenly, at most half the window; max pooling can pad
    // with -inf first instead (padding never wins).
    let fits = win
        .pads
        .iter()
        .zip(&win.kernel)
        .all(|((a, b), k)| a == b && 2 * a <= *k);
    let (x, padding) = if fits {
        (x, (win.pads[0].0, win.pads[1].0))
    } else if max {
        (pad_spatial(&x, &win.pads, f64::NEG_INFINITY), (0, 0))
    } else if count_include_pad {
        (pad_spatial(&x, &win.pads, 0.0), (0, 0))
    } else {
        return Err(fail(
            n,
            "pads",
            ErrorKind::Unsupported,
            "uneven or wide padding with count_include_pad = 0",
        ));
    };
    let opts = Pool2d {
        kernel: (win.kernel[0], win.kernel[1]),
        stride: (win.strides[0], win.strides[1]),
        padding,
        count_include_pad,
    };
    let y = if max {
        x.max_pool2d_with(opts)
    } else {
        x.avg_pool2d_with(opts)
    };
    if spatial == 1 {
        let s = y.check()?.shape().to_vec();
        return one(y.reshape(&[s[0], s[1], s[3]]));
    }
    one(y)
}

fn build_layer_norm(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    // The statistics outputs need the explicit form.
    if n.outputs.iter().skip(1).any(|o| !o.is_empty()) {
        return transformer::norm::layer_norm_with_stats(n, ins);
    }
    let x = req(n, ins, 0)?;
    let gamma = req(n, ins, 1)?;
    let a = axis(n, "axis", attr_i(n, "axis", -1)?, x.rank())?;
    let eps = attr_f(n, "epsilon", 1e-5)? as f64;
    let inner: usize = x.shape()[a..].iter().product();
    let beta = match opt(ins, 2) {
        Some(b) => b.reshape(&[inner]),
        None => Tensor::zeros(&[inner], x.dtype()),
    };
    let gamma = gamma.reshape(&[inner]);
    if a + 1 == x.rank() {
        return one(x.layer_norm(&gamma, &beta, eps));
    }
    let outer = &x.shape()[..a];
    let flat = x.reshape(&[outer, &[inner]].concat());
    one(flat.layer_norm(&gamma, &beta, eps).reshape(x.shape()))
}

fn build_softmax(n: &Node, cx: &Cx, ins: &[Option<Tensor>], log: bool) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let default = if cx.opset < 13 { 1 } else { -1 };
    let a = axis(n, "axis", attr_i(n, "axis", default)?, x.rank())?;
    let f = |t: &Tensor, a: isize| {
        if log {
            let s = t - t.max(a, true);
            &s - s.exp().sum(a, true).log()
        } else {
            t.softmax(a)
        }
    };
    // Before opset 13 the input is coerced to 2-D at `axis`.
    if cx.opset < 13 && a + 1 != x.rank() {
        let (outer, inner): (usize, usize) = (
            x.shape()[..a].iter().product(),
            x.shape()[a..].iter().product(),
        );
        return one(f(&x.reshape(&[outer, inner]), 1).reshape(x.shape()));
    }
    one(f(x, a as isize))
}

fn build_reshape(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let spec = match attr_ints(n, "shape")? {
        Some(s) => s,
        None => ints_of(n, "shape", req(n, ins, 1)?)?,
    };
    let allowzero = attr_i(n, "allowzero", 0)? != 0;
    let mut dims = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &d) in spec.iter().enumerate() {
        dims.push(match d {
            -1 if infer.is_none() => {
                infer = Some(i);
                1
            }
            0 if !allowzero => *x
                .shape()
                .get(i)
                .ok_or_else(|| fail(n, "shape", ErrorKind::Shape, "a 0 past the input's rank"))?,
            d if d >= 0 => d as usize,
            _ => {
                return Err(fail(
                    n,
                    "shape",
                    ErrorKind::Shape,
                    format!("bad shape {spec:?}"),
                ))
            }
        });
    }
    if let Some(i) = infer {
        // Checked: the dims come from the file and may overflow.
        let known = tilejit_ir::shape::checked_product(&dims);
        let Some(known) = known.filter(|&k| k != 0 && x.numel() % k == 0) else {
            return Err(fail(
                n,
                "shape",
                ErrorKind::Shape,
                format!("{:?} cannot take the shape {spec:?}", x.shape()),
            ));
        };
        dims[i] = x.numel() / known;
    }
    one(x.reshape(&dims))
}

fn build_squeeze(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let axes = match ints_param(n, ins, 1, "axes")? {
        Some(a) => a
            .iter()
            .map(|&a| axis(n, "axes", a, x.rank()))
            .collect::<Result<Vec<_>>>()?,
        None => (0..x.rank()).filter(|&a| x.shape()[a] == 1).collect(),
    };
    let dims: Vec<usize> = (0..x.rank())
        .filter(|a| !axes.contains(a))
        .map(|a| x.shape()[a])
        .collect();
    one(x.reshape(&dims))
}

fn build_unsqueeze(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let axes = ints_param(n, ins, 1, "axes")?
        .ok_or_else(|| fail(n, "axes", ErrorKind::BadArgument, "is required"))?;
    let r = x.rank() + axes.len();
    let mut axes = axes
        .iter()
        .map(|&a| axis(n, "axes", a, r))
        .collect::<Result<Vec<_>>>()?;
    axes.sort_unstable();
    let mut dims = x.shape().to_vec();
    for a in axes {
        dims.insert(a.min(dims.len()), 1);
    }
    one(x.reshape(&dims))
}

fn build_split(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let a = axis(n, "axis", attr_i(n, "axis", 0)?, x.rank())?;
    let len = x.shape()[a];
    let outs = n.outputs.len();
    let sizes = match ints_param(n, ins, 1, "split")? {
        Some(s) => usizes(n, "split", s)?,
        None => {
            let k = usize::try_from(attr_i(n, "num_outputs", outs as i64)?)
                .unwrap_or(0)
                .max(1);
            pieces_for_outputs(n, "num_outputs", k, outs)?;
            let each = len.div_ceil(k);
            (0..k)
                .map(|i| each.min(len.saturating_sub(i * each)))
                .collect()
        }
    };
    pieces_for_outputs(n, "split", sizes.len(), outs)?;
    one_many(x.split(&sizes, a as isize))
}

/// A Split's piece count, which may not pass its outputs': each piece is
/// a traced slice, and a count the file sets could be 2^40.
fn pieces_for_outputs(n: &Node, attr: &str, pieces: usize, outs: usize) -> Result<()> {
    if pieces > outs {
        return Err(fail(
            n,
            attr,
            ErrorKind::BadArgument,
            format!("{pieces} pieces for {outs} outputs"),
        ));
    }
    Ok(())
}

fn one_many(v: Vec<Tensor>) -> Result<Vec<Tensor>> {
    Ok(v)
}

fn build_slice(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let starts = ints_param(n, ins, 1, "starts")?
        .ok_or_else(|| fail(n, "starts", ErrorKind::BadArgument, "is required"))?;
    let ends = ints_param(n, ins, 2, "ends")?
        .ok_or_else(|| fail(n, "ends", ErrorKind::BadArgument, "is required"))?;
    let axes = match ints_param(n, ins, 3, "axes")? {
        Some(a) => a,
        None => (0..starts.len() as i64).collect(),
    };
    let steps = match opt(ins, 4).map(|t| ints_of(n, "steps", t)).transpose()? {
        Some(v) => v,
        None => vec![1; starts.len()],
    };
    if steps.contains(&0) {
        return Err(fail(n, "steps", ErrorKind::BadArgument, "a step of 0"));
    }
    if starts.len() != ends.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(fail(
            n,
            "starts",
            ErrorKind::BadArgument,
            "starts, ends, axes and steps differ in length",
        ));
    }
    let mut y = x.clone();
    let big = |v: i64| v.clamp(isize::MIN as i64 / 2, isize::MAX as i64 / 2) as isize;
    // An axis at most once (ONNX leaves a repeat undefined; onnxruntime
    // refuses it), so a file's list traces at most one slice per axis.
    let mut seen = vec![false; x.rank()];
    for (((&s, &e), &a), &step) in starts.iter().zip(&ends).zip(&axes).zip(&steps) {
        let a = axis(n, "axes", a, x.rank())?;
        if std::mem::replace(&mut seen[a], true) {
            let m = format!("axis {a} is repeated");
            return Err(fail(n, "axes", ErrorKind::BadArgument, m));
        }
        if step != 1 {
            // ONNX's clamping for other steps is `slice_step`'s own.
            y = y.slice_step(a as isize, big(s), big(e), big(step));
            continue;
        }
        let len = x.shape()[a] as isize;
        // Python's rules, as `slice` has them; an empty range stays empty.
        let norm = |v: isize| if v < 0 { (v + len).max(0) } else { v.min(len) };
        let (s, e) = (norm(big(s)), norm(big(e)));
        if s == 0 && e == len {
            continue;
        }
        y = y.slice(a as isize, s, e.max(s));
    }
    one(y)
}

fn build_gather(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let idx = req(n, ins, 1)?;
    let a = axis(n, "axis", attr_i(n, "axis", 0)?, x.rank())?;
    let len = x.shape()[a] as i64;
    // Known indices may be negative (from the end): normalise them here.
    let flat = if idx.is_traced() {
        from_end(&idx.reshape(&[idx.numel()]), len)
    } else {
        let v: Vec<i64> = ints_of(n, "indices", idx)?
            .into_iter()
            .map(|i| if i < 0 { i + len } else { i })
            .collect();
        let k = v.len();
        Tensor::from_vec(v, &[k])?
    };
    let y = x.index_select(a as isize, &flat);
    let mut dims = x.shape()[..a].to_vec();
    dims.extend_from_slice(idx.shape());
    dims.extend_from_slice(&x.shape()[a + 1..]);
    one(y.reshape(&dims))
}

/// Traced indices that may count from the end (`-1` is the last).
fn from_end(idx: &Tensor, len: i64) -> Tensor {
    let idx = idx.cast(DType::I64);
    Tensor::where_cond(&idx.lt(&zero_like(&idx)), &(&idx + len), &idx)
}

/// The most values a table builds at trace time from numbers in the file
/// (a Range, say): 2^26, 512 MiB of f64, past what real graphs fold.
pub(crate) const MAX_FOLDED: usize = 1 << 26;

fn build_range(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let start = req(n, ins, 0)?;
    let dtype = start.dtype();
    let s = floats_of(n, "start", start)?;
    let l = floats_of(n, "limit", req(n, ins, 1)?)?;
    let d = floats_of(n, "delta", req(n, ins, 2)?)?;
    let (s, l, d) = match (s.as_slice(), l.as_slice(), d.as_slice()) {
        ([s], [l], [d]) if *d != 0.0 => (*s, *l, *d),
        _ => {
            return Err(fail(
                n,
                "delta",
                ErrorKind::BadArgument,
                "start, limit and delta must be scalars, delta nonzero",
            ))
        }
    };
    let count = ((l - s) / d).ceil().max(0.0);
    // The values are built here: a count from a hostile file is refused
    // before any is (the run would hold the same elements anyway).
    if count > MAX_FOLDED as f64 {
        return Err(fail(
            n,
            "limit",
            ErrorKind::BadArgument,
            format!("makes {count} values; tilejit builds a Range of at most {MAX_FOLDED}"),
        ));
    }
    let count = count as usize;
    let v: Vec<f64> = (0..count).map(|i| s + i as f64 * d).collect();
    one(Tensor::from_vec(v, &[count])?.cast(dtype))
}

fn build_pad(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let r = x.rank();
    let pads = ints_param(n, ins, 1, "pads")?
        .ok_or_else(|| fail(n, "pads", ErrorKind::BadArgument, "is required"))?;
    let value = match (n.attrs.get("value"), opt(ins, 2)) {
        (Some(_), _) => attr_f(n, "value", 0.0)? as f64,
        (None, Some(v)) => *floats_of(n, "constant_value", v)?.first().unwrap_or(&0.0),
        (None, None) => 0.0,
    };
    let axes = match opt(ins, 3) {
        Some(a) => ints_of(n, "axes", a)?
            .iter()
            .map(|&a| axis(n, "axes", a, r))
            .collect::<Result<Vec<_>>>()?,
        None => (0..r).collect(),
    };
    let k = axes.len();
    if pads.len() != 2 * k || pads.iter().any(|&p| p < 0) {
        return Err(fail(
            n,
            "pads",
            ErrorKind::Unsupported,
            "needs 2 non-negative pads per axis (negative pads are not supported)",
        ));
    }
    let mode = attr_s(n, "mode", "constant")?;
    if mode != "constant" {
        let mut all = vec![(0, 0); r];
        for (i, &a) in axes.iter().enumerate() {
            all[a] = (pads[i], pads[i + k]);
        }
        return one(image::pad_indexed(n, x, &all, mode)?);
    }
    let mut all = vec![(0, 0); r];
    for (i, &a) in axes.iter().enumerate() {
        all[a] = (pads[i] as usize, pads[i + k] as usize);
    }
    one(x.pad(&all, value))
}

fn check_gather_nd(n: &Node, _: &Cx) -> Result<()> {
    match attr_i(n, "batch_dims", 0)? {
        b if b >= 0 => Ok(()),
        b => Err(fail(
            n,
            "batch_dims",
            ErrorKind::BadArgument,
            format!("batch_dims {b} is negative"),
        )),
    }
}

/// GatherND as one `index_select` over the leading `batch_dims + k` dims
/// flattened, at the linear index `batch * prod(lead) + sum(idx[.., i] *
/// stride_i)`. Each index counts from the end when negative and is
/// checked to lie in its axis (known ones here, naming the node; traced
/// ones by a bounds-checked gather from `0..len`, `IndexOutOfRange` at
/// the run), so no index can reach a neighbouring row.
fn build_gather_nd(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let idx = req(n, ins, 1)?;
    let b = attr_i(n, "batch_dims", 0)?.max(0) as usize;
    let k = *idx
        .shape()
        .last()
        .ok_or_else(|| fail(n, "indices", ErrorKind::Shape, "indices of rank 0"))?;
    if b >= idx.rank() || b >= x.rank() {
        return Err(fail(
            n,
            "batch_dims",
            ErrorKind::Shape,
            format!(
                "batch_dims {b} for data of rank {} and indices of rank {}",
                x.rank(),
                idx.rank()
            ),
        ));
    }
    if x.shape()[..b] != idx.shape()[..b] {
        return Err(fail(
            n,
            "indices",
            ErrorKind::Shape,
            format!(
                "the batch dims of data {:?} and indices {:?} differ",
                &x.shape()[..b],
                &idx.shape()[..b]
            ),
        ));
    }
    if k == 0 || b + k > x.rank() {
        return Err(fail(
            n,
            "indices",
            ErrorKind::Shape,
            format!(
                "index length {k} after {b} batch dims for data of rank {}",
                x.rank()
            ),
        ));
    }
    let batch = &x.shape()[..b];
    let lead = &x.shape()[b..b + k];
    let rest = &x.shape()[b + k..];
    let nb: usize = batch.iter().product();
    let outer: Vec<usize> = idx.shape()[b..idx.rank() - 1].to_vec();
    let per: usize = outer.iter().product();
    let count = nb * per;
    // Known indices are normalised and checked here; traced ones below.
    let idx = if idx.is_traced() {
        idx.cast(DType::I64)
    } else {
        let v = ints_of(n, "indices", idx)?;
        let mut w = Vec::with_capacity(v.len());
        for (j, &i) in v.iter().enumerate() {
            let len = lead[j % k] as i64;
            if i < -len || i >= len {
                return Err(fail(
                    n,
                    "indices",
                    ErrorKind::BadArgument,
                    format!("index {i} is outside -{len}..{len}"),
                ));
            }
            w.push(if i < 0 { i + len } else { i });
        }
        Tensor::from_vec(w, idx.shape())?
    };
    let traced = idx.is_traced();
    let idx = idx.reshape(&[count, k]);
    let mut linear = Tensor::zeros(&[count, 1], DType::I64);
    let mut stride = 1i64;
    for i in (0..k).rev() {
        let mut col = idx.slice(1, i as isize, i as isize + 1);
        if traced {
            let len = lead[i] as i64;
            let neg = col.lt(&Tensor::zeros(&[], DType::I64));
            col = Tensor::where_cond(&neg, &(&col + len), &col);
            col = Tensor::arange(lead[i], DType::I64)
                .index_select(0, &col.reshape(&[count]))
                .reshape(&[count, 1]);
        }
        linear = linear + col * stride;
        stride *= lead[i] as i64;
    }
    if b > 0 {
        let at = Tensor::arange(nb, DType::I64)
            .reshape(&[nb, 1])
            .broadcast_to(&[nb, per])
            .reshape(&[count, 1]);
        linear = linear + at * stride;
    }
    let flat = x.reshape(&[[nb * lead.iter().product::<usize>()].as_slice(), rest].concat());
    let y = flat.index_select(0, &linear.reshape(&[count]));
    one(y.reshape(&[batch, outer.as_slice(), rest].concat()))
}
