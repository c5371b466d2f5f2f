//! MaxUnpool: `y.flat[indices[j]] = x.flat[j]`, the last write winning, as
//! the ONNX reference scatters. The indices are data, so the scatter is a
//! traced one-hot composition: for every output element, the largest `j`
//! whose index names it (a comparison against every index), then one
//! `index_select` of `x` there, zero where none does. It is quadratic in
//! the sizes, so large unpools are an error naming the node.

use super::super::{attr_ints, dims_of, fail, one, opt, req, usizes, Cx};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::{DType, ErrorKind};

/// The most (output elements x input elements) comparisons an unpool may
/// trace.
const MAX_PAIRS: usize = 1 << 24;

pub(in super::super) fn check_max_unpool(n: &Node, _: &Cx) -> Result<()> {
    let k = attr_ints(n, "kernel_shape")?
        .ok_or_else(|| fail(n, "kernel_shape", ErrorKind::BadArgument, "is required"))?;
    let k = usizes(n, "kernel_shape", k)?;
    if k.is_empty() || k.contains(&0) {
        return Err(fail(
            n,
            "kernel_shape",
            ErrorKind::BadArgument,
            "needs positive sizes",
        ));
    }
    for (name, len) in [("strides", k.len()), ("pads", 2 * k.len())] {
        if let Some(v) = attr_ints(n, name)? {
            let v = usizes(n, name, v)?;
            if v.len() != len || (name == "strides" && v.contains(&0)) {
                return Err(fail(
                    n,
                    name,
                    ErrorKind::BadArgument,
                    format!("needs {len} values (strides positive)"),
                ));
            }
        }
    }
    Ok(())
}

pub(in super::super) fn build_max_unpool(
    n: &Node,
    cx: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    check_max_unpool(n, cx)?;
    let (x, idx) = (req(n, ins, 0)?, req(n, ins, 1)?);
    let kernel = usizes(
        n,
        "kernel_shape",
        attr_ints(n, "kernel_shape")?.unwrap_or_default(),
    )?;
    let k = kernel.len();
    let strides = match attr_ints(n, "strides")? {
        Some(s) => usizes(n, "strides", s)?,
        None => vec![1; k],
    };
    let pads = match attr_ints(n, "pads")? {
        Some(p) => usizes(n, "pads", p)?,
        None => vec![0; 2 * k],
    };
    if x.rank() != k + 2 || idx.shape() != x.shape() {
        return Err(fail(
            n,
            "X",
            ErrorKind::Shape,
            format!(
                "X {:?} and I {:?} must match, of rank {}",
                x.shape(),
                idx.shape(),
                k + 2
            ),
        ));
    }
    let mut inferred = x.shape()[..2].to_vec();
    for i in 0..k {
        let grown = (x.shape()[2 + i].max(1) - 1)
            .checked_mul(strides[i])
            .and_then(|g| g.checked_add(kernel[i]));
        let Some(grown) = grown else {
            return Err(fail(
                n,
                "strides",
                ErrorKind::BadArgument,
                format!(
                    "the unpooled length of axis {i} overflows (stride {}, kernel {})",
                    strides[i], kernel[i]
                ),
            ));
        };
        let cut = pads[i].checked_add(pads[i + k]);
        let Some(len) = cut.and_then(|c| grown.checked_sub(c)) else {
            return Err(fail(
                n,
                "pads",
                ErrorKind::Shape,
                "pads larger than the unpooled size",
            ));
        };
        inferred.push(len);
    }
    let target = match opt(ins, 2) {
        Some(s) => dims_of(n, "output_shape", s)?,
        None => inferred.clone(),
    };
    if target.len() != inferred.len() || target.iter().zip(&inferred).any(|(t, i)| t < i) {
        return Err(fail(
            n,
            "output_shape",
            ErrorKind::Shape,
            format!("{target:?} is smaller than the unpooled {inferred:?}"),
        ));
    }
    let outs = tilejit_ir::shape::checked_product(&inferred).unwrap_or(usize::MAX);
    let ins_n = x.numel();
    if outs.saturating_mul(ins_n) > MAX_PAIRS {
        return Err(fail(
            n,
            "X",
            ErrorKind::Unsupported,
            format!("an unpool of {ins_n} into {outs} elements is too large (at most {MAX_PAIRS} pairs)"),
        ));
    }
    if outs == 0 || ins_n == 0 {
        return one(Tensor::zeros(&target, x.dtype()));
    }
    let positions = Tensor::from_vec((0..outs as i64).collect::<Vec<_>>(), &[outs, 1])?;
    let js = Tensor::from_vec((0..ins_n as i64).collect::<Vec<_>>(), &[1, ins_n])?;
    let hits = idx.cast(DType::I64).reshape(&[1, ins_n]).eq(&positions);
    let none = Tensor::full(&[], -1.0, DType::I64);
    let last = Tensor::where_cond(&hits, &js, &none).max(1, false);
    let found = last.ge(&Tensor::full(&[], 0.0, DType::I64));
    let at = last.maximum(&Tensor::full(&[], 0.0, DType::I64));
    let vals = x.reshape(&[ins_n]).index_select(0, &at);
    let zero = Tensor::full(&[], 0.0, x.dtype());
    let y = Tensor::where_cond(&found, &vals, &zero).reshape(&inferred);
    if target == inferred {
        return one(y);
    }
    let pad: Vec<(usize, usize)> = target
        .iter()
        .zip(&inferred)
        .map(|(t, i)| (0, t - i))
        .collect();
    one(y.pad(&pad, 0.0))
}
