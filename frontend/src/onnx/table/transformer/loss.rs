//! ONNX `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss`: the
//! target class's value picked along axis 1 with `gather`, class weights
//! with `index_select`, ignored targets weighted 0, then the reduction.
//! The mean divides by the summed weights of the targets kept, as the spec
//! and onnx's reference do.

use super::super::{attr_s, fail, live, opt, req, Cx, Node, Result, Tensor};
use crate::onnx::model::Attr;
use tilejit_ir::{DType, ErrorKind};

pub(crate) const ATTRS: &[&str] = &["reduction", "ignore_index"];

pub(crate) fn check(n: &Node, _: &Cx) -> Result<()> {
    match attr_s(n, "reduction", "mean")? {
        "none" | "sum" | "mean" => Ok(()),
        r => Err(fail(
            n,
            "reduction",
            ErrorKind::Unsupported,
            format!("`{r}` is not one of `none`, `sum`, `mean`"),
        )),
    }
}

fn ignore_index(n: &Node) -> Result<Option<i64>> {
    match n.attrs.get("ignore_index") {
        None => Ok(None),
        Some(Attr::Int(v)) => Ok(Some(*v)),
        Some(_) => Err(fail(
            n,
            "ignore_index",
            ErrorKind::BadArgument,
            "must be an integer",
        )),
    }
}

/// The loss of log-probabilities `logp` `[N, C, d..]` at `target` `[N, d..]`.
fn nll(n: &Node, logp: &Tensor, target: &Tensor, weight: Option<&Tensor>) -> Result<Tensor> {
    let s = logp.shape().to_vec();
    if s.len() < 2 {
        return Err(fail(
            n,
            "input",
            ErrorKind::Shape,
            format!("needs rank 2 or more ([N, C, d..]), got {s:?}"),
        ));
    }
    let want = [&s[..1], &s[2..]].concat();
    if target.shape() != want.as_slice() {
        return Err(fail(
            n,
            "target",
            ErrorKind::Shape,
            format!(
                "input {s:?} needs a target of shape [N, d..] = {want:?}, got {:?}",
                target.shape()
            ),
        ));
    }
    let dt = logp.dtype();
    let t = target.cast(DType::I64);
    let ii = ignore_index(n)?;
    let keep = ii.map(|ii| {
        t.eq(&Tensor::full(&[], ii as f64, DType::I64))
            .cast(DType::I32)
            .rsub(1i32)
            .cast(DType::Bool)
    });
    // Ignored targets may lie outside the classes: read class 0 there.
    let t = match &keep {
        Some(k) => Tensor::where_cond(k, &t, &Tensor::full(&[], 0.0, DType::I64)),
        None => t,
    };
    let mut index_shape = s.clone();
    index_shape[1] = 1;
    let picked = logp
        .gather(1, &t.reshape(&index_shape))
        .reshape(target.shape());
    let zero = Tensor::full(&[], 0.0, dt);
    let mut w = weight.map(|w| {
        w.index_select(0, &t.reshape(&[t.numel()]))
            .reshape(target.shape())
    });
    if let Some(k) = &keep {
        let base = w.unwrap_or_else(|| Tensor::full(&[], 1.0, dt).broadcast_to(target.shape()));
        w = Some(Tensor::where_cond(k, &base, &zero));
    }
    let loss = match &w {
        Some(w) => -&picked * w,
        None => -&picked,
    };
    Ok(match attr_s(n, "reduction", "mean")? {
        "none" => loss,
        "sum" => loss.sum_all(),
        _ => match &w {
            Some(w) => &loss.sum_all() / &w.sum_all(),
            None => loss.sum_all() / loss.numel().max(1) as f64,
        },
    })
}

pub(crate) fn build_nll(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    Ok(vec![nll(n, x, req(n, ins, 1)?, opt(ins, 2))?])
}

pub(crate) fn build_sce(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = live(req(n, ins, 0)?.clone())?;
    if x.rank() < 2 {
        return Err(fail(
            n,
            "scores",
            ErrorKind::Shape,
            format!("needs shape [N, C, d..], got {:?}", x.shape()),
        ));
    }
    let shifted = &x - &x.max(1, true);
    let logp = &shifted - &shifted.exp().sum(1, true).log();
    let loss = nll(n, &logp, req(n, ins, 1)?, opt(ins, 2))?;
    Ok(vec![loss, logp])
}
