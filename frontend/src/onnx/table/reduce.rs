//! ONNX rows: reductions (with `axes` as an attribute or an input,
//! `keepdims`, `noop_with_empty_axes`, empty reduced sets), ArgMax/ArgMin
//! (`select_last_index`), the scans CumSum and CumProd (`exclusive`,
//! `reverse`), Mod (both `fmod` values) and IsInf; and NonZero and
//! Compress, whose output shapes are their operands' values: those are
//! read concrete, at trace time when known then, else eagerly at a graph
//! break (`segments.rs`).

use super::{attr_i, axis, fail, ints_of, ints_param, one, req, Cx, Kind, Row};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::{DType, ErrorKind};

/// The attributes every reduction reads.
const REDUCE_ATTRS: &[&str] = &["axes", "keepdims", "noop_with_empty_axes"];

macro_rules! reduction {
    ($op:literal, $f:expr) => {
        Row {
            op: $op,
            attrs: REDUCE_ATTRS,
            check: no_check,
            kind: Kind::Node(|n, _, ins| reduce(n, ins, $f)),
        }
    };
}

/// This area's rows.
pub(super) static ROWS: &[Row] = &[
    reduction!("ReduceSum", Reduction::Sum),
    reduction!("ReduceMean", Reduction::Mean),
    reduction!("ReduceMax", Reduction::Max),
    reduction!("ReduceMin", Reduction::Min),
    reduction!("ReduceProd", Reduction::Prod),
    reduction!("ReduceSumSquare", Reduction::SumSquare),
    reduction!("ReduceL1", Reduction::L1),
    reduction!("ReduceL2", Reduction::L2),
    reduction!("ReduceLogSum", Reduction::LogSum),
    reduction!("ReduceLogSumExp", Reduction::LogSumExp),
    Row {
        op: "ArgMax",
        attrs: &["axis", "keepdims", "select_last_index"],
        check: no_check,
        kind: Kind::Node(|n, _, ins| arg(n, ins, true)),
    },
    Row {
        op: "ArgMin",
        attrs: &["axis", "keepdims", "select_last_index"],
        check: no_check,
        kind: Kind::Node(|n, _, ins| arg(n, ins, false)),
    },
    Row {
        op: "CumSum",
        attrs: &["exclusive", "reverse"],
        check: no_check,
        kind: Kind::Node(|n, _, ins| scan(n, ins, false)),
    },
    Row {
        op: "CumProd",
        attrs: &["exclusive", "reverse"],
        check: no_check,
        kind: Kind::Node(|n, _, ins| scan(n, ins, true)),
    },
    Row {
        op: "Mod",
        attrs: &["fmod"],
        check: check_mod,
        kind: Kind::Node(build_mod),
    },
    Row {
        op: "NonZero",
        attrs: &[],
        check: no_check,
        kind: Kind::Node(build_non_zero),
    },
    Row {
        op: "Compress",
        attrs: &["axis"],
        check: no_check,
        kind: Kind::Node(build_compress),
    },
    Row {
        op: "IsInf",
        attrs: &["detect_negative", "detect_positive"],
        check: no_check,
        kind: Kind::Node(build_is_inf),
    },
];

fn no_check(_: &Node, _: &Cx) -> Result<()> {
    Ok(())
}

/// What a reduction computes over its reduced set.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reduction {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    SumSquare,
    L1,
    L2,
    LogSum,
    LogSumExp,
}

impl Reduction {
    /// The value over an empty set (ONNX's: the identity of the fold).
    fn empty(self) -> f64 {
        match self {
            Reduction::Sum | Reduction::SumSquare | Reduction::L1 | Reduction::L2 => 0.0,
            Reduction::Prod => 1.0,
            Reduction::Max | Reduction::LogSum | Reduction::LogSumExp => f64::NEG_INFINITY,
            Reduction::Min => f64::INFINITY,
            Reduction::Mean => f64::NAN,
        }
    }
}

/// `f` over each axis in turn, keeping dims.
fn over(x: &Tensor, axes: &[usize], f: impl Fn(&Tensor, isize) -> Tensor) -> Tensor {
    axes.iter().fold(x.clone(), |y, &a| f(&y, a as isize))
}

fn reduce(n: &Node, ins: &[Option<Tensor>], r: Reduction) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let keep = attr_i(n, "keepdims", 1)? != 0;
    let axes = match ints_param(n, ins, 1, "axes")? {
        Some(a) if !a.is_empty() => {
            let mut v = a
                .iter()
                .map(|&a| axis(n, "axes", a, x.rank()))
                .collect::<Result<Vec<_>>>()?;
            v.sort_unstable();
            v.dedup();
            v
        }
        // An empty list with the flag reduces nothing: the input, as is.
        _ if attr_i(n, "noop_with_empty_axes", 0)? != 0 => return one(x.clone()),
        _ => (0..x.rank()).collect(),
    };
    let kept: Vec<usize> = (0..x.rank())
        .map(|a| match axes.contains(&a) {
            true => 1,
            false => x.shape()[a],
        })
        .collect();
    let y = if axes.iter().any(|&a| x.shape()[a] == 0) {
        let v = match (x.dtype(), r) {
            // Any and all of nothing.
            (DType::Bool, Reduction::Max) => 0.0,
            (DType::Bool, Reduction::Min) => 1.0,
            _ => r.empty(),
        };
        if !x.dtype().is_float() && !v.is_finite() {
            return Err(fail(
                n,
                "axes",
                ErrorKind::BadArgument,
                "an integer reduction over an empty set has no value",
            ));
        }
        Tensor::full(&kept, v, x.dtype())
    } else {
        // Bool max/min are any/all: reduce as integers.
        let xb = match x.dtype() {
            DType::Bool => x.cast(DType::I32),
            _ => x.clone(),
        };
        let y = match r {
            Reduction::Sum => over(&xb, &axes, |t, a| t.sum(a, true)),
            Reduction::Mean => over(&xb, &axes, |t, a| t.mean(a, true)),
            Reduction::Max => over(&xb, &axes, |t, a| t.max(a, true)),
            Reduction::Min => over(&xb, &axes, |t, a| t.min(a, true)),
            Reduction::Prod => over(&xb, &axes, |t, a| t.prod(a, true)),
            Reduction::SumSquare => over(&xb.square(), &axes, |t, a| t.sum(a, true)),
            Reduction::L1 => over(&xb.abs(), &axes, |t, a| t.sum(a, true)),
            Reduction::L2 => over(&xb.square(), &axes, |t, a| t.sum(a, true)).sqrt(),
            Reduction::LogSum => over(&xb, &axes, |t, a| t.sum(a, true)).log(),
            Reduction::LogSumExp => {
                // max + log(sum(exp(x - max))), the max replaced by 0 where
                // it is not finite (all -inf, or an inf or NaN in the set),
                // so those give the naive formula's -inf, inf or NaN.
                let m = over(&xb, &axes, |t, a| t.max(a, true));
                let finite = m.abs().lt(&Tensor::full(&[], f64::INFINITY, m.dtype()));
                let m = Tensor::where_cond(&finite, &m, &Tensor::full(&[], 0.0, m.dtype()));
                let s = over(&(&xb - &m).exp(), &axes, |t, a| t.sum(a, true));
                s.log() + m
            }
        };
        match x.dtype() {
            DType::Bool => y.cast(DType::Bool),
            _ => y,
        }
    };
    if keep {
        return one(y);
    }
    let dims: Vec<usize> = (0..x.rank())
        .filter(|a| !axes.contains(a))
        .map(|a| x.shape()[a])
        .collect();
    one(y.reshape(&dims))
}

/// Reverses `x` along `a`.
fn flip(x: &Tensor, a: usize) -> Tensor {
    x.slice_step(a as isize, -1, isize::MIN, -1)
}

fn arg(n: &Node, ins: &[Option<Tensor>], max: bool) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let a = axis(n, "axis", attr_i(n, "axis", 0)?, x.rank())?;
    let keep = attr_i(n, "keepdims", 1)? != 0;
    let f = |t: &Tensor| match max {
        true => t.argmax(a as isize, keep),
        false => t.argmin(a as isize, keep),
    };
    if attr_i(n, "select_last_index", 0)? == 0 {
        return one(f(x));
    }
    // The last index on ties is the first of the reversed axis, counted
    // from the end.
    let last = x.shape().get(a).copied().unwrap_or(1) as i64 - 1;
    one(f(&flip(x, a)).rsub(last))
}

fn scan(n: &Node, ins: &[Option<Tensor>], prod: bool) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let a = match ints_of(n, "axis", req(n, ins, 1)?)?.as_slice() {
        [a] => axis(n, "axis", *a, x.rank())?,
        v => {
            return Err(fail(
                n,
                "axis",
                ErrorKind::BadArgument,
                format!("must hold one value, got {}", v.len()),
            ))
        }
    };
    let reverse = attr_i(n, "reverse", 0)? != 0;
    let exclusive = attr_i(n, "exclusive", 0)? != 0;
    let len = x.shape()[a];
    if prod {
        // One traced multiply per element of the axis.
        super::unrolled(n, "axis", "running products", len)?;
    }
    let mut y = if reverse { flip(x, a) } else { x.clone() };
    if exclusive && len > 0 {
        // Shift one place along the axis, the fold's identity first.
        let mut pads = vec![(0, 0); x.rank()];
        pads[a] = (1, 0);
        y = y
            .slice(a as isize, 0, len as isize - 1)
            .pad(&pads, if prod { 1.0 } else { 0.0 });
    }
    y = match prod {
        false => y.cumsum(a as isize),
        true => cumprod(&y, a),
    };
    one(if reverse { flip(&y, a) } else { y })
}

/// The running product along `a`, one multiply per element of the axis
/// (there is no product scan op; ONNX's CumProd axes are short).
fn cumprod(x: &Tensor, a: usize) -> Tensor {
    let len = x.shape()[a];
    if len <= 1 {
        return x.clone();
    }
    let mut parts = Vec::with_capacity(len);
    let mut acc = x.slice(a as isize, 0, 1);
    parts.push(acc.clone());
    for i in 1..len {
        acc = &acc * &x.slice(a as isize, i as isize, i as isize + 1);
        parts.push(acc.clone());
    }
    let refs: Vec<&Tensor> = parts.iter().collect();
    Tensor::cat(&refs, a as isize)
}

fn check_mod(n: &Node, _: &Cx) -> Result<()> {
    match attr_i(n, "fmod", 0)? {
        0 | 1 => Ok(()),
        v => Err(fail(
            n,
            "fmod",
            ErrorKind::BadArgument,
            format!("must be 0 or 1, got {v}"),
        )),
    }
}

fn build_mod(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let (x, y) = (req(n, ins, 0)?, req(n, ins, 1)?);
    if attr_i(n, "fmod", 0)? == 0 {
        return one(x.remainder(y));
    }
    // C's fmod has the dividend's sign: the floored mod of the magnitudes
    // (exact: both are nonnegative, so no sign fix-up is added), then x's
    // sign. A zero result keeps x's sign, as fmod's does.
    let r = x.abs().remainder(&y.abs());
    let neg = x.lt(&Tensor::full(&[], 0.0, x.dtype()));
    let signed = match x.dtype().is_float() {
        // `-r` of a zero is -0; sign(-0.0) tests are not needed.
        true => Tensor::where_cond(&neg.bitwise_or(&x_is_neg_zero(x)), &-&r, &r),
        false => Tensor::where_cond(&neg, &-&r, &r),
    };
    one(signed)
}

/// Where `x` is -0.0 (whose fmod is -0.0).
fn x_is_neg_zero(x: &Tensor) -> Tensor {
    // 1 / -0 is -inf.
    let z = Tensor::full(&[], 0.0, x.dtype());
    x.eq(&z).bitwise_and(&x.recip().lt(&z))
}

fn build_is_inf(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let pos = attr_i(n, "detect_positive", 1)? != 0;
    let neg = attr_i(n, "detect_negative", 1)? != 0;
    if !x.dtype().is_float() {
        return one(Tensor::full(x.shape(), 0.0, DType::Bool));
    }
    let inf = |v: f64| x.eq(&Tensor::full(&[], v, x.dtype()));
    one(match (pos, neg) {
        (true, true) => inf(f64::INFINITY).bitwise_or(&inf(f64::NEG_INFINITY)),
        (true, false) => inf(f64::INFINITY),
        (false, true) => inf(f64::NEG_INFINITY),
        (false, false) => Tensor::full(x.shape(), 0.0, DType::Bool),
    })
}

/// The values of an operand that sets an output shape, which must be
/// known when tracing.
pub(super) fn known(n: &Node, what: &str, t: &Tensor) -> Result<Vec<f64>> {
    if t.is_traced() {
        return Err(fail(
            n,
            what,
            ErrorKind::Unsupported,
            "sets the output shape, so it must be known when tracing (a constant, a \
             graph input, or a value at a graph break), but it is computed from traced data \
             inside a sub-graph",
        ));
    }
    t.cast(DType::F64).to_vec::<f64>()
}

fn build_non_zero(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let v = known(n, "X", x)?;
    let rank = x.rank();
    // Row-major positions of the nonzero elements (NaN is nonzero), as
    // one row of indices per dim.
    let hits: Vec<usize> = (0..v.len()).filter(|&i| v[i] != 0.0).collect();
    let mut out = vec![0i64; rank * hits.len()];
    for (j, &flat) in hits.iter().enumerate() {
        let mut rest = flat;
        for d in (0..rank).rev() {
            let size = x.shape()[d];
            out[d * hits.len() + j] = (rest % size) as i64;
            rest /= size;
        }
    }
    one(Tensor::from_vec(out, &[rank, hits.len()])?)
}

fn build_compress(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let cond = known(n, "condition", req(n, ins, 1)?)?;
    let (x, a) = match n.attrs.contains_key("axis") {
        true => (x.clone(), axis(n, "axis", attr_i(n, "axis", 0)?, x.rank())?),
        false => (x.reshape(&[x.numel()]), 0),
    };
    let len = x.shape()[a];
    if cond.len() > len {
        return Err(fail(
            n,
            "condition",
            ErrorKind::BadArgument,
            format!("has {} values, over the axis length {len}", cond.len()),
        ));
    }
    let keep: Vec<i64> = (0..cond.len())
        .filter(|&i| cond[i] != 0.0)
        .map(|i| i as i64)
        .collect();
    let k = keep.len();
    one(x.index_select(a as isize, &Tensor::from_vec(keep, &[k])?))
}
