//! Recurrent-state rows of opset 27, as onnx's reference computes them:
//! CausalConvWithState (a depthwise causal conv1d over the past state and
//! the input, one shifted multiply-add per tap) and LinearAttention (the
//! linear, gated, delta and gated-delta state updates, unrolled over time
//! in f32, with grouped query heads reading their KV head's state).

use super::{attr_f, attr_i, attr_s, fail, live, opt, req, Cx, Kind, Row};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::{DType, ErrorKind};

pub(super) static ROWS: &[Row] = &[
    Row {
        op: "CausalConvWithState",
        attrs: &["activation"],
        check: check_conv,
        kind: Kind::Node(build_conv),
    },
    Row {
        op: "LinearAttention",
        attrs: &[
            "update_rule",
            "scale",
            "q_num_heads",
            "kv_num_heads",
            "chunk_size",
        ],
        check: check_attention,
        kind: Kind::Node(build_attention),
    },
];

fn check_conv(n: &Node, _: &Cx) -> Result<()> {
    match attr_s(n, "activation", "none")? {
        "none" | "silu" | "swish" => Ok(()),
        a => Err(fail(
            n,
            "activation",
            ErrorKind::Unsupported,
            format!("activation `{a}` (none, silu or swish)"),
        )),
    }
}

fn shape_err(n: &Node, what: &str, m: String) -> crate::error::Error {
    fail(n, what, ErrorKind::Shape, m)
}

fn build_conv(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let (x, w) = (req(n, ins, 0)?, req(n, ins, 1)?);
    if x.rank() != 3 || w.rank() != 3 {
        return Err(shape_err(
            n,
            "input",
            format!(
                "input must be (batch, channels, length) and weight (channels, 1, k), got {:?} and {:?}",
                x.shape(),
                w.shape()
            ),
        ));
    }
    let (b, c, l) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let k = w.shape()[2];
    if w.shape()[0] != c || w.shape()[1] != 1 || k == 0 {
        return Err(shape_err(
            n,
            "weight",
            format!("must be ({c}, 1, k), got {:?}", w.shape()),
        ));
    }
    super::unrolled(n, "weight", "kernel taps", k)?;
    let dt = x.dtype();
    let xf = x.cast(DType::F32);
    let padded = match opt(ins, 3) {
        Some(p) => {
            if p.shape() != [b, c, k - 1] {
                return Err(shape_err(
                    n,
                    "past_state",
                    format!("must be [{b}, {c}, {}], got {:?}", k - 1, p.shape()),
                ));
            }
            match k {
                1 => xf.clone(),
                _ => Tensor::cat(&[&p.cast(DType::F32), &xf], 2),
            }
        }
        None => xf.pad(&[(0, 0), (0, 0), (k - 1, 0)], 0.0),
    };
    let wf = w.cast(DType::F32);
    let mut y: Option<Tensor> = None;
    for j in 0..k {
        let tap = padded.slice(2, j as isize, (j + l) as isize)
            * wf.slice(2, j as isize, j as isize + 1).reshape(&[1, c, 1]);
        y = Some(match y {
            Some(y) => y + tap,
            None => tap,
        });
    }
    let mut y = y.expect("k >= 1");
    if let Some(bias) = opt(ins, 2) {
        y = y + bias.cast(DType::F32).reshape(&[1, c, 1]);
    }
    // The reference rounds the conv to the input dtype before the SiLU.
    let mut y = y.cast(dt);
    if attr_s(n, "activation", "none")? != "none" {
        let yf = y.cast(DType::F32);
        y = (&yf * &yf.sigmoid()).cast(dt);
    }
    let state = padded.slice(2, l as isize, (l + k - 1) as isize);
    let state_dt = opt(ins, 3).map_or(dt, |p| p.dtype());
    Ok(vec![y, state.cast(state_dt)])
}

fn check_attention(n: &Node, _: &Cx) -> Result<()> {
    match attr_s(n, "update_rule", "gated_delta")? {
        "linear" | "gated" | "delta" | "gated_delta" => {}
        r => {
            return Err(fail(
                n,
                "update_rule",
                ErrorKind::Unsupported,
                format!("update rule `{r}` (linear, gated, delta or gated_delta)"),
            ))
        }
    }
    let (q, kv) = (attr_i(n, "q_num_heads", 0)?, attr_i(n, "kv_num_heads", 0)?);
    if q <= 0 || kv <= 0 || q % kv != 0 {
        return Err(fail(
            n,
            "q_num_heads",
            ErrorKind::BadArgument,
            format!("q_num_heads ({q}) must be a positive multiple of kv_num_heads ({kv})"),
        ));
    }
    Ok(())
}

/// `(B, T, H*D)` -> `(B, H, T, D)`.
fn heads(n: &Node, what: &str, x: &Tensor, h: usize) -> Result<Tensor> {
    let s = x.shape();
    if x.rank() != 3 || !s[2].is_multiple_of(h) {
        return Err(shape_err(
            n,
            what,
            format!("must be (B, T, H*D) with H = {h}, got {s:?}"),
        ));
    }
    Ok(x.cast(DType::F32)
        .reshape(&[s[0], s[1], h, s[2] / h])
        .permute(&[0, 2, 1, 3]))
}

/// `(B, H, m, k) @ (B, H, k, n)` as one batched matmul.
fn bmm(a: &Tensor, b: &Tensor) -> Tensor {
    let (sa, sb) = (a.shape(), b.shape());
    let bh = sa[0] * sa[1];
    a.reshape(&[bh, sa[2], sa[3]])
        .matmul(&b.reshape(&[bh, sb[2], sb[3]]))
        .reshape(&[sa[0], sa[1], sa[2], sb[3]])
}

fn build_attention(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let rule = attr_s(n, "update_rule", "gated_delta")?;
    let gating = matches!(rule, "gated" | "gated_delta");
    let delta = matches!(rule, "delta" | "gated_delta");
    let hq = attr_i(n, "q_num_heads", 0)? as usize;
    let hkv = attr_i(n, "kv_num_heads", 0)? as usize;
    let (query, key, value) = (req(n, ins, 0)?, req(n, ins, 1)?, req(n, ins, 2)?);
    let (decay, beta) = (opt(ins, 4), opt(ins, 5));
    for (name, given, wanted) in [
        ("decay", decay.is_some(), gating),
        ("beta", beta.is_some(), delta),
    ] {
        if given != wanted {
            let m = match wanted {
                true => format!("update rule `{rule}` requires {name}"),
                false => format!("update rule `{rule}` forbids {name}"),
            };
            return Err(fail(n, name, ErrorKind::BadArgument, m));
        }
    }
    let q4 = heads(n, "query", query, hq)?;
    let k4 = heads(n, "key", key, hkv)?;
    let v4 = heads(n, "value", value, hkv)?;
    let (b, t) = (query.shape()[0], query.shape()[1]);
    let (dk, dv) = (q4.shape()[3], v4.shape()[3]);
    if t == 0 {
        return Err(shape_err(n, "query", "a sequence of length 0".into()));
    }
    let t = super::unrolled(n, "query", "time steps", t)?;
    if k4.shape() != [b, hkv, t, dk] || v4.shape()[..3] != [b, hkv, t] {
        return Err(shape_err(
            n,
            "key",
            format!(
                "query {:?}, key {:?} and value {:?} disagree",
                query.shape(),
                key.shape(),
                value.shape()
            ),
        ));
    }
    let decay4 = match decay {
        None => None,
        Some(d) => {
            let last = d.shape().last().copied().unwrap_or(0);
            if d.rank() != 3 || d.shape()[..2] != [b, t] || (last != hkv && last != hkv * dk) {
                return Err(shape_err(
                    n,
                    "decay",
                    format!(
                        "must be ({b}, {t}, {hkv} or {}), got {:?}",
                        hkv * dk,
                        d.shape()
                    ),
                ));
            }
            Some(heads(n, "decay", d, hkv)?)
        }
    };
    let beta4 = match beta {
        None => None,
        Some(be) => {
            let last = be.shape().last().copied().unwrap_or(0);
            if be.rank() != 3 || be.shape()[..2] != [b, t] || (last != hkv && last != 1) {
                return Err(shape_err(
                    n,
                    "beta",
                    format!("must be ({b}, {t}, {hkv} or 1), got {:?}", be.shape()),
                ));
            }
            Some(heads(n, "beta", be, last)?)
        }
    };
    let (state, state_dt) = match opt(ins, 3) {
        Some(p) => {
            if p.shape() != [b, hkv, dk, dv] {
                return Err(shape_err(
                    n,
                    "past_state",
                    format!("must be [{b}, {hkv}, {dk}, {dv}], got {:?}", p.shape()),
                ));
            }
            (p.cast(DType::F32), p.dtype())
        }
        None => (Tensor::zeros(&[b, hkv, dk, dv], DType::F32), query.dtype()),
    };
    // A state past the size limits is an error tensor, without the axes
    // `bmm` reads.
    let mut state = live(state)?;
    let scale = match attr_f(n, "scale", 0.0)? {
        0.0 => 1.0 / (dk as f64).sqrt(),
        s => s as f64,
    };
    let group = hq / hkv;
    let at = |x: &Tensor, i: usize| x.slice(2, i as isize, i as isize + 1);
    let mut outs = Vec::with_capacity(t);
    for i in 0..t {
        let (q_t, k_t) = (at(&q4, i), at(&k4, i));
        let mut v_t = at(&v4, i);
        if let Some(d) = &decay4 {
            // (B, H, 1, 1 or dk) -> (B, H, 1 or dk, 1): broadcast over dv.
            state = &state * &at(d, i).transpose(2, 3).exp();
        }
        if let Some(be) = &beta4 {
            let retrieved = bmm(&k_t, &state);
            v_t = at(be, i) * (v_t - retrieved);
        }
        state = &state + &bmm(&k_t.transpose(2, 3), &v_t);
        let read = match group {
            1 => state.clone(),
            g => state
                .reshape(&[b, hkv, 1, dk * dv])
                .broadcast_to(&[b, hkv, g, dk * dv])
                .reshape(&[b, hq, dk, dv]),
        };
        outs.push(bmm(&q_t, &read) * scale);
    }
    let refs: Vec<&Tensor> = outs.iter().collect();
    let o = match refs.len() {
        1 => outs[0].clone(),
        _ => Tensor::cat(&refs, 2),
    };
    let y = o
        .permute(&[0, 2, 1, 3])
        .reshape(&[b, t, hq * dv])
        .cast(query.dtype());
    Ok(vec![y, state.cast(state_dt)])
}
