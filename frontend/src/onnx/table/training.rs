//! The `ai.onnx.preview.training` optimizer rows (Adagrad, Adam, Momentum
//! with its Nesterov mode), as onnx's reference computes them: one update
//! per (X, G, state...) group of inputs, sharing the rate R and the step
//! count T, outputs grouped the same way. Looked up only for that domain.

use super::{attr_f, attr_s, fail, req, Cx, Kind, Row};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::{DType, ErrorKind};

/// The ops' domain.
pub(super) const DOMAIN: &str = "ai.onnx.preview.training";

pub(super) static ROWS: &[Row] = &[
    Row {
        op: "Adagrad",
        attrs: &["decay_factor", "epsilon", "norm_coefficient"],
        check: |n, _| groups(n, n.inputs.len(), 3).map(|_| ()),
        kind: Kind::Node(build_adagrad),
    },
    Row {
        op: "Adam",
        attrs: &[
            "alpha",
            "beta",
            "epsilon",
            "norm_coefficient",
            "norm_coefficient_post",
        ],
        check: |n, _| groups(n, n.inputs.len(), 4).map(|_| ()),
        kind: Kind::Node(build_adam),
    },
    Row {
        op: "Momentum",
        attrs: &["alpha", "beta", "mode", "norm_coefficient"],
        check: check_momentum,
        kind: Kind::Node(build_momentum),
    },
];

/// How many tensors the optimizer updates: (inputs - 2) / per.
fn groups(n: &Node, inputs: usize, per: usize) -> Result<usize> {
    let k = inputs.saturating_sub(2);
    if k == 0 || !k.is_multiple_of(per) {
        return Err(fail(
            n,
            "inputs",
            ErrorKind::BadArgument,
            format!("takes R, T and {per} inputs per optimized tensor, got {inputs} inputs"),
        ));
    }
    Ok(k / per)
}

fn required(n: &Node, name: &str) -> Result<f64> {
    if !n.attrs.contains_key(name) {
        return Err(fail(
            n,
            name,
            ErrorKind::BadArgument,
            "this attribute is required",
        ));
    }
    Ok(attr_f(n, name, 0.0)? as f64)
}

fn check_momentum(n: &Node, _: &Cx) -> Result<()> {
    groups(n, n.inputs.len(), 3)?;
    for a in ["alpha", "beta", "norm_coefficient"] {
        required(n, a)?;
    }
    match attr_s(n, "mode", "")? {
        "standard" | "nesterov" => Ok(()),
        m => Err(fail(
            n,
            "mode",
            ErrorKind::BadArgument,
            format!("mode `{m}` (standard or nesterov)"),
        )),
    }
}

/// R as an f32 scalar and T's value (an f32 scalar) and whether T > 0.
fn rate_and_step(n: &Node, ins: &[Option<Tensor>]) -> Result<(Tensor, Tensor, Tensor)> {
    let r = req(n, ins, 0)?.cast(DType::F32).reshape(&[]);
    let t = req(n, ins, 1)?.cast(DType::F32).reshape(&[]);
    let positive = t.gt(&Tensor::scalar(0.0, DType::F32));
    Ok((r, t, positive))
}

fn build_adagrad(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let k = groups(n, ins.len(), 3)?;
    let (r, t, _) = rate_and_step(n, ins)?;
    let decay = attr_f(n, "decay_factor", 0.0)? as f64;
    let eps = attr_f(n, "epsilon", 0.0)? as f64;
    let norm = attr_f(n, "norm_coefficient", 0.0)? as f64;
    let rate = &r / &((&t * decay) + 1.0);
    let (mut xs, mut hs) = (Vec::with_capacity(k), Vec::with_capacity(k));
    for i in 0..k {
        let (x, g, h) = (
            req(n, ins, 2 + i)?,
            req(n, ins, 2 + k + i)?,
            req(n, ins, 2 + 2 * k + i)?,
        );
        let g = &(x * norm) + g;
        let h_new = h + &(&g * &g);
        let x_new = x - &(&(&rate * &g) / &(h_new.sqrt() + eps));
        xs.push(x_new.cast(x.dtype()));
        hs.push(h_new.cast(h.dtype()));
    }
    xs.extend(hs);
    Ok(xs)
}

fn build_adam(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let k = groups(n, ins.len(), 4)?;
    let (r, t, positive) = rate_and_step(n, ins)?;
    let alpha = attr_f(n, "alpha", 0.9)? as f64;
    let beta = attr_f(n, "beta", 0.999)? as f64;
    let eps = attr_f(n, "epsilon", 0.0)? as f64;
    let norm = attr_f(n, "norm_coefficient", 0.0)? as f64;
    let post = attr_f(n, "norm_coefficient_post", 0.0)? as f64;
    // r sqrt(1 - beta^t) / (1 - alpha^t) once t > 0.
    let pow = |base: f64| Tensor::scalar(base, DType::F32).pow(&t);
    let corrected = &(&r * &pow(beta).rsub(1.0).sqrt()) / &pow(alpha).rsub(1.0);
    let rate = Tensor::where_cond(&positive, &corrected, &r);
    let (mut xs, mut vs, mut hs) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..k {
        let (x, g, v, h) = (
            req(n, ins, 2 + i)?,
            req(n, ins, 2 + k + i)?,
            req(n, ins, 2 + 2 * k + i)?,
            req(n, ins, 2 + 3 * k + i)?,
        );
        let g = &(x * norm) + g;
        let v_new = &(v * alpha) + &(&g * (1.0 - alpha));
        let h_new = &(h * beta) + &(&(&g * &g) * (1.0 - beta));
        let x_new = x - &(&rate * &(&v_new / &(h_new.sqrt() + eps)));
        xs.push((x_new * (1.0 - post)).cast(DType::F32));
        vs.push(v_new.cast(DType::F32));
        hs.push(h_new.cast(DType::F32));
    }
    xs.extend(vs);
    xs.extend(hs);
    Ok(xs)
}

fn build_momentum(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let k = groups(n, ins.len(), 3)?;
    let (r, _, positive) = rate_and_step(n, ins)?;
    let (alpha, beta, norm) = (
        required(n, "alpha")?,
        required(n, "beta")?,
        required(n, "norm_coefficient")?,
    );
    let nesterov = attr_s(n, "mode", "")? == "nesterov";
    // The gradient's coefficient is 1 at the first step (T = 0).
    let b = Tensor::where_cond(
        &positive,
        &Tensor::scalar(beta, DType::F32),
        &Tensor::scalar(1.0, DType::F32),
    );
    let (mut xs, mut vs) = (Vec::with_capacity(k), Vec::with_capacity(k));
    for i in 0..k {
        let (x, g, v) = (
            req(n, ins, 2 + i)?,
            req(n, ins, 2 + k + i)?,
            req(n, ins, 2 + 2 * k + i)?,
        );
        let g = &(x * norm) + g;
        let v_new = &(v * alpha) + &(&b * &g);
        let step = match nesterov {
            true => &g + &(&v_new * alpha),
            false => v_new.clone(),
        };
        let x_new = x - &(&r * &step);
        xs.push(x_new.cast(x.dtype()));
        vs.push(v_new.cast(v.dtype()));
    }
    xs.extend(vs);
    Ok(xs)
}
