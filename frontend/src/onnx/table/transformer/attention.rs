//! ONNX `Attention` (opsets 23-25) as public ops: head splits, the key and
//! value caches, one additive bias from the mask, causal frontier, sliding
//! window and padding, then softcap, a softmax that maps a fully masked
//! row to zeros, and the product with the values. It follows onnx's
//! reference (`onnx/reference/ops/op_attention.py`) step for step, which
//! is what the backend node tests were generated with.

use super::super::{attr_f, attr_i, fail, live, matmul_nd, opt, req, Cx, Node, Result, Tensor};
use crate::onnx::model::dtype_of;
use tilejit_ir::{DType, ErrorKind};

pub(crate) const ATTRS: &[&str] = &[
    "is_causal",
    "kv_num_heads",
    "q_num_heads",
    "qk_matmul_output_mode",
    "scale",
    "softcap",
    "softmax_precision",
    "left_window_size",
    "right_window_size",
];

fn given(n: &Node, i: usize) -> bool {
    n.inputs.get(i).is_some_and(|s| !s.is_empty())
}

pub(crate) fn check(n: &Node, _: &Cx) -> Result<()> {
    let mode = attr_i(n, "qk_matmul_output_mode", 0)?;
    if !(0..=3).contains(&mode) {
        return Err(fail(
            n,
            "qk_matmul_output_mode",
            ErrorKind::BadArgument,
            format!("{mode} is not one of 0, 1, 2, 3"),
        ));
    }
    let p = attr_i(n, "softmax_precision", 0)?;
    if !matches!(p, 0 | 1 | 10 | 11 | 16) {
        return Err(fail(
            n,
            "softmax_precision",
            ErrorKind::Unsupported,
            format!("{p} is not float, float16, double or bfloat16"),
        ));
    }
    for w in ["left_window_size", "right_window_size"] {
        if attr_i(n, w, -1)? < -1 {
            return Err(fail(n, w, ErrorKind::BadArgument, "must be -1 or more"));
        }
    }
    if given(n, 4) != given(n, 5) {
        return Err(fail(
            n,
            "past_key",
            ErrorKind::BadArgument,
            "past_key and past_value must be given together",
        ));
    }
    if given(n, 6) && given(n, 4) {
        return Err(fail(
            n,
            "nonpad_kv_seqlen",
            ErrorKind::BadArgument,
            "cannot be combined with past_key and past_value",
        ));
    }
    Ok(())
}

/// `[b, s, heads * d]` as `[b, heads, s, d]`.
fn split_heads(n: &Node, x: &Tensor, heads: i64, what: &str) -> Result<Tensor> {
    let s = x.shape();
    if heads <= 0 {
        return Err(fail(
            n,
            what,
            ErrorKind::BadArgument,
            "must be a positive head count for 3-D Q, K and V",
        ));
    }
    if !s[2].is_multiple_of(heads as usize) {
        return Err(fail(
            n,
            what,
            ErrorKind::BadArgument,
            format!("{heads} heads do not divide a hidden size of {}", s[2]),
        ));
    }
    let h = heads as usize;
    Ok(x.reshape(&[s[0], s[1], h, s[2] / h]).permute(&[0, 2, 1, 3]))
}

/// The additive bias `allowed ? 0 : -inf` in `dtype`.
fn bias_of(allowed: &Tensor, dtype: DType) -> Tensor {
    Tensor::where_cond(
        allowed,
        &Tensor::full(&[], 0.0, dtype),
        &Tensor::full(&[], f64::NEG_INFINITY, dtype),
    )
}

/// Where `q` starts among the keys: a scalar (past length or 0) or one per
/// batch (`nonpad_kv_seqlen - q_len`), shaped to broadcast as `[b, 1, 1, 1]`.
enum Offset {
    Fixed(i64),
    PerBatch(Tensor),
}

/// `(p - j)` for query `i` (absolute `p = offset + i`) and key `j`: `[q, kv]`
/// or `[b, 1, q, kv]`, i64.
fn distance(offset: &Offset, q: usize, kv: usize) -> Tensor {
    let i = Tensor::arange(q, DType::I64).reshape(&[q, 1]);
    let j = Tensor::arange(kv, DType::I64).reshape(&[1, kv]);
    match offset {
        Offset::Fixed(o) => &(&i + *o) - &j,
        Offset::PerBatch(o) => &(&i.reshape(&[1, 1, q, 1]) + o) - &j,
    }
}

pub(crate) fn build(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let (q, k, v) = (req(n, ins, 0)?, req(n, ins, 1)?, req(n, ins, 2)?);
    let dt = q.dtype();
    let rank = q.rank();
    if !(rank == 3 || rank == 4) || k.rank() != rank || v.rank() != rank {
        return Err(fail(
            n,
            "Q",
            ErrorKind::Shape,
            format!(
                "Q, K and V must all be 3-D or all 4-D, got ranks {}, {}, {}",
                rank,
                k.rank(),
                v.rank()
            ),
        ));
    }
    let (qh, kvh) = (attr_i(n, "q_num_heads", 0)?, attr_i(n, "kv_num_heads", 0)?);
    let (q, k, v) = if rank == 3 {
        (
            split_heads(n, q, qh, "q_num_heads")?,
            split_heads(n, k, kvh, "kv_num_heads")?,
            split_heads(n, v, kvh, "kv_num_heads")?,
        )
    } else {
        (q.clone(), k.clone(), v.clone())
    };
    let (b, heads, q_len, d) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
    let scale = match attr_f(n, "scale", 0.0)? {
        s if s != 0.0 => s as f64,
        _ => 1.0 / (d as f64).sqrt(),
    };
    // Q and K each scaled by sqrt(scale), the scale rounded to Q's dtype.
    let root = Tensor::full(&[], scale.sqrt(), dt);

    let (past_k, past_v) = (opt(ins, 4), opt(ins, 5));
    let (k, v) = match (past_k, past_v) {
        (Some(pk), Some(pv)) => (Tensor::cat(&[pk, &k], 2), Tensor::cat(&[pv, &v], 2)),
        _ => (k, v),
    };
    let (k, v) = (live(k)?, live(v)?);
    let (present_k, present_v) = (k.clone(), v.clone());
    let kv_len = k.shape()[2];
    let nonpad = opt(ins, 6);
    let offset = match (past_k, nonpad) {
        (Some(pk), _) => Offset::Fixed(pk.shape()[2] as i64),
        (None, Some(np)) => {
            Offset::PerBatch((&np.cast(DType::I64) - q_len as i64).reshape(&[b, 1, 1, 1]))
        }
        (None, None) => Offset::Fixed(0),
    };

    // The additive bias, broadcasting to [b, heads, q, kv].
    let mut bias: Option<Tensor> = None;
    if let Some(m) = opt(ins, 3) {
        let mut m = if m.dtype() == DType::Bool {
            bias_of(m, dt)
        } else {
            m.cast(dt)
        };
        // Shorter than the keys, it is padded along its last axis.
        if m.rank() == 0 {
            return Err(fail(
                n,
                "attn_mask",
                ErrorKind::Shape,
                "a scalar mask has no key axis (it is [.., q, kv])",
            ));
        }
        let short = kv_len.saturating_sub(m.shape().last().copied().unwrap_or(0));
        if short > 0 {
            let mut pads = vec![(0, 0); m.rank()];
            pads[m.rank() - 1] = (0, short);
            m = m.pad(&pads, f64::NEG_INFINITY);
        }
        bias = Some(m);
    }
    let zeros = || Tensor::zeros(&[q_len, kv_len], dt);
    let add = |bias: Option<Tensor>, t: Tensor| match bias {
        Some(b) => &b + &t,
        None => &zeros() + &t,
    };
    if attr_i(n, "is_causal", 0)? != 0 {
        let allowed = distance(&offset, q_len, kv_len).ge(&Tensor::full(&[], 0.0, DType::I64));
        bias = Some(add(bias, bias_of(&allowed, dt)));
    }
    let (left, right) = (
        attr_i(n, "left_window_size", -1)?,
        attr_i(n, "right_window_size", -1)?,
    );
    if left >= 0 || right >= 0 {
        let diff = distance(&offset, q_len, kv_len);
        let mut allowed: Option<Tensor> = None;
        let both = |a: Option<Tensor>, c: Tensor| match a {
            Some(a) => (&a.cast(DType::I32) * &c.cast(DType::I32)).cast(DType::Bool),
            None => c,
        };
        if left >= 0 {
            allowed = Some(both(
                allowed,
                diff.le(&Tensor::full(&[], left as f64, DType::I64)),
            ));
        }
        if right >= 0 {
            allowed = Some(both(
                allowed,
                (-&diff).le(&Tensor::full(&[], right as f64, DType::I64)),
            ));
        }
        if let Some(a) = allowed {
            bias = Some(add(bias, bias_of(&a, dt)));
        }
    }
    if let Some(np) = nonpad {
        let j = Tensor::arange(kv_len, DType::I64).reshape(&[1, kv_len]);
        let valid = j.lt(&np.cast(DType::I64).reshape(&[b, 1]));
        bias = Some(add(bias, bias_of(&valid, dt).reshape(&[b, 1, 1, kv_len])));
    }
    let bias = bias.map(live).transpose()?;

    // Grouped queries: each K/V head repeated for its group, in place.
    let kv_heads = k.shape()[1];
    let (k, v) = if kv_heads != heads && kv_heads > 0 && heads.is_multiple_of(kv_heads) {
        let rep = heads / kv_heads;
        let repeat = |t: &Tensor| {
            let s = t.shape().to_vec();
            t.reshape(&[s[0], s[1], 1, s[2], s[3]])
                .broadcast_to(&[s[0], s[1], rep, s[2], s[3]])
                .reshape(&[s[0], s[1] * rep, s[2], s[3]])
        };
        (repeat(&k), repeat(&v))
    } else {
        (k.clone(), v.clone())
    };
    if k.shape()[1] != heads || k.shape()[3] != d {
        return Err(fail(
            n,
            "K",
            ErrorKind::Shape,
            format!(
                "{} key heads of size {} do not match {heads} query heads of size {d}",
                kv_heads,
                k.shape()[3]
            ),
        ));
    }
    let qs = &q * &root;
    let ks = &k * &root;
    let mut qk = matmul_nd(n, &qs, &ks.transpose(2, 3))?;
    let softcap = attr_f(n, "softcap", 0.0)? as f64;
    if softcap > 0.0 {
        qk = (&qk / softcap).tanh() * softcap;
    }
    let with_bias = match &bias {
        Some(b) => &qk + b,
        None => qk.clone(),
    };
    let mode = attr_i(n, "qk_matmul_output_mode", 0)?;
    let prec = match attr_i(n, "softmax_precision", 0)? {
        0 => dt,
        p => dtype_of(p as i32)
            .map_err(|m| fail(n, "softmax_precision", ErrorKind::Unsupported, m))?,
    };
    let mut probs = safe_softmax(&with_bias.cast(prec));
    if let Some(b) = &bias {
        // A row whose bias is all -inf attends nothing: zeros, not NaN.
        let masked = b
            .max(-1, true)
            .eq(&Tensor::full(&[], f64::NEG_INFINITY, dt));
        probs = Tensor::where_cond(&masked, &Tensor::full(&[], 0.0, prec), &probs);
    }
    let qk_out = match mode {
        2 => with_bias,
        3 => probs.cast(dt),
        _ => qk,
    };
    let probs = probs.cast(dt);
    let mut y = matmul_nd(n, &probs, &v)?;
    if rank == 3 {
        let y4 = live(y)?;
        let s = y4.shape().to_vec();
        y = y4
            .permute(&[0, 2, 1, 3])
            .reshape(&[s[0], s[2], s[1] * s[3]]);
    }
    Ok(vec![y, present_k, present_v, qk_out])
}

/// Softmax over the last axis whose all -inf rows give zeros, not NaN.
fn safe_softmax(x: &Tensor) -> Tensor {
    let dt = x.dtype();
    let m = x.max(-1, true);
    let inf = m.eq(&Tensor::full(&[], f64::NEG_INFINITY, dt));
    let m = Tensor::where_cond(&inf, &Tensor::full(&[], 0.0, dt), &m);
    let e = (x - &m).exp();
    let s = e.sum(-1, true);
    let s = Tensor::where_cond(
        &s.eq(&Tensor::full(&[], 0.0, dt)),
        &Tensor::full(&[], 1.0, dt),
        &s,
    );
    &e / &s
}
