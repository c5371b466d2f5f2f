//! ONNX rows: Transformer and normalization ops, losses, and the small
//! activations. The larger builds live in the child modules:
//! `attention.rs`, `loss.rs`, `norm.rs` (normalizations, rotary embedding).

use super::{attr_f, attr_i, axis, live, no_check, req, zero_like, Cx, Kind, Node, Result, Row};
use crate::tensor::Tensor;
use tilejit_ir::DType;

mod attention;
mod loss;
pub(super) mod norm;

/// This area's rows.
pub(super) static ROWS: &[Row] = &[
    Row {
        op: "Attention",
        attrs: attention::ATTRS,
        check: attention::check,
        kind: Kind::Node(attention::build),
    },
    Row {
        op: "NegativeLogLikelihoodLoss",
        attrs: loss::ATTRS,
        check: loss::check,
        kind: Kind::Node(loss::build_nll),
    },
    Row {
        op: "SoftmaxCrossEntropyLoss",
        attrs: loss::ATTRS,
        check: loss::check,
        kind: Kind::Node(loss::build_sce),
    },
    node!(
        "RMSNormalization",
        ["axis", "epsilon", "stash_type"],
        check_stash,
        norm::build_rms
    ),
    node!(
        "InstanceNormalization",
        ["epsilon"],
        no_check,
        norm::build_instance
    ),
    node!(
        "GroupNormalization",
        ["epsilon", "num_groups", "stash_type"],
        check_stash,
        norm::build_group
    ),
    node!(
        "LpNormalization",
        ["axis", "p"],
        norm::check_lp,
        norm::build_lp
    ),
    node!(
        "MeanVarianceNormalization",
        ["axes"],
        no_check,
        norm::build_mvn
    ),
    node!(
        "LRN",
        ["alpha", "beta", "bias", "size"],
        no_check,
        norm::build_lrn
    ),
    node!(
        "RotaryEmbedding",
        ["interleaved", "num_heads", "rotary_embedding_dim"],
        no_check,
        norm::build_rotary
    ),
    node!("Hardmax", ["axis"], no_check, build_hardmax),
    node!("Swish", ["alpha"], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        Ok(vec![swish(x, attr_f(n, "alpha", 1.0)? as f64)])
    }),
    node!("SwiGLU", ["alpha"], no_check, |n, _, ins| {
        let (a, b) = (req(n, ins, 0)?, req(n, ins, 1)?);
        if a.shape() != b.shape() {
            return Err(super::fail(
                n,
                "B",
                tilejit_ir::ErrorKind::Shape,
                format!(
                    "A {:?} and B {:?} must have one shape",
                    a.shape(),
                    b.shape()
                ),
            ));
        }
        Ok(vec![&swish(a, attr_f(n, "alpha", 1.0)? as f64) * b])
    }),
    node!("Celu", ["alpha"], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let alpha = attr_f(n, "alpha", 1.0)? as f64;
        let z = zero_like(x);
        // In f32 for half dtypes: the reference's expm1 rounds only once.
        let wide = match x.dtype() {
            DType::F16 | DType::BF16 => x.cast(DType::F32),
            _ => x.clone(),
        };
        let neg = (((&wide / alpha).exp() - 1.0) * alpha).cast(x.dtype());
        Ok(vec![&x.maximum(&z) + &neg.minimum(&z)])
    }),
    node!("Mish", [], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        Ok(vec![x * &(x.exp() + 1.0).log().tanh()])
    }),
    node!("ThresholdedRelu", ["alpha"], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let alpha = Tensor::full(&[], attr_f(n, "alpha", 1.0)? as f64, x.dtype());
        Ok(vec![Tensor::where_cond(&x.gt(&alpha), x, &zero_like(x))])
    }),
    node!("Shrink", ["bias", "lambd"], no_check, |n, _, ins| {
        let x = req(n, ins, 0)?;
        let (bias, lambd) = (
            attr_f(n, "bias", 0.0)? as f64,
            attr_f(n, "lambd", 0.5)? as f64,
        );
        let full = |v: f64| Tensor::full(&[], v, x.dtype());
        let hi = Tensor::where_cond(&x.gt(&full(lambd)), &(x - bias), &zero_like(x));
        Ok(vec![Tensor::where_cond(
            &x.lt(&full(-lambd)),
            &(x + bias),
            &hi,
        )])
    }),
];

fn check_stash(n: &Node, _: &Cx) -> Result<()> {
    match attr_i(n, "stash_type", 1)? {
        1 => Ok(()),
        s => Err(super::fail(
            n,
            "stash_type",
            tilejit_ir::ErrorKind::Unsupported,
            format!("stash_type {s}; only 1 (float) is supported"),
        )),
    }
}

/// `x * sigmoid(alpha x)`.
fn swish(x: &Tensor, alpha: f64) -> Tensor {
    x * &(x * alpha).sigmoid()
}

/// One-hot of the first maximum along the axis (before opset 13, of the
/// input coerced to 2-D at the axis).
fn build_hardmax(n: &Node, cx: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = live(req(n, ins, 0)?.clone())?;
    let default = if cx.opset < 13 { 1 } else { -1 };
    let a = axis(n, "axis", attr_i(n, "axis", default)?, x.rank())?;
    let (t, a) = if cx.opset < 13 {
        let outer: usize = x.shape()[..a].iter().product();
        let inner: usize = x.shape()[a..].iter().product();
        (x.reshape(&[outer, inner]), 1)
    } else {
        (x.clone(), a)
    };
    let len = t.shape()[a];
    let mut s = vec![1; t.rank()];
    s[a] = len;
    let idx = Tensor::arange(len, DType::I64).reshape(&s);
    let hot = idx.eq(&t.argmax(a as isize, true).cast(DType::I64));
    Ok(vec![hot.cast(x.dtype()).reshape(x.shape())])
}
