//! ONNX normalizations written out as reductions (onnx's reference formulas):
//! `RMSNormalization`, `LayerNormalization` when its `Mean` and
//! `InvStdDev` outputs are asked for, `InstanceNormalization`,
//! `GroupNormalization`, `LpNormalization`, `MeanVarianceNormalization`,
//! plus `RotaryEmbedding`.

use super::super::{
    attr_f, attr_i, attr_ints, axis, fail, live, opt, req, Cx, Node, Result, Tensor,
};
use tilejit_ir::{DType, ErrorKind};

/// `x` as `[outer, inner]` split at `a`. A failed `x` (an op before
/// refused its dtype) has no dims to split: its error passes on.
fn rows(x: &Tensor, a: usize) -> Tensor {
    if a > x.shape().len() {
        return x.clone();
    }
    let outer: usize = x.shape()[..a].iter().product();
    let inner: usize = x.shape()[a..].iter().product();
    x.reshape(&[outer, inner])
}

/// The shape of a statistic: `x`'s dims before `a`, then ones.
fn stat_shape(x: &Tensor, a: usize) -> Vec<usize> {
    let mut s = x.shape().to_vec();
    for d in &mut s[a..] {
        *d = 1;
    }
    s
}

pub(crate) fn build_rms(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = live(req(n, ins, 0)?.clone())?;
    let a = axis(n, "axis", attr_i(n, "axis", -1)?, x.rank())?;
    let eps = attr_f(n, "epsilon", 1e-5)? as f64;
    let ms = rows(&x.square(), a)
        .mean(1, true)
        .reshape(&stat_shape(&x, a));
    let y = &x * &(ms + eps).sqrt().recip();
    Ok(vec![&y * req(n, ins, 1)?])
}

/// LayerNormalization with its statistics (`Mean`, `InvStdDev`), in the
/// reference's order of operations.
pub(crate) fn layer_norm_with_stats(n: &Node, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = live(req(n, ins, 0)?.clone())?;
    let a = axis(n, "axis", attr_i(n, "axis", -1)?, x.rank())?;
    let eps = attr_f(n, "epsilon", 1e-5)? as f64;
    let m = rows(&x, a);
    let mean = m.mean(1, true);
    let diff = &m - &mean;
    let var = diff.square().mean(1, true);
    let inv = (var + eps).sqrt().recip();
    let mut y = (&diff * &inv).reshape(x.shape()) * req(n, ins, 1)?;
    if let Some(b) = opt(ins, 2) {
        y = &y + b;
    }
    let s = stat_shape(&x, a);
    Ok(vec![y, mean.reshape(&s), inv.reshape(&s)])
}

/// `(x - mean) / sqrt(var + eps)` over `axes` (kept as size 1).
fn standardize(x: &Tensor, axes: &[usize], eps: f64) -> Tensor {
    let mean = axes
        .iter()
        .fold(x.clone(), |t, &a| t.mean(a as isize, true));
    let diff = x - &mean;
    let var = axes
        .iter()
        .fold(diff.square(), |t, &a| t.mean(a as isize, true));
    &diff / &(var + eps).sqrt()
}

/// `[C]` as `[1, C, 1, ..]` against `x`.
fn per_channel(t: &Tensor, x: &Tensor) -> Tensor {
    let mut s = vec![1; x.rank()];
    s[1] = t.numel();
    t.reshape(&s)
}

fn need_rank(n: &Node, x: &Tensor, min: usize) -> Result<()> {
    if x.rank() < min {
        return Err(fail(
            n,
            "input",
            ErrorKind::Shape,
            format!("needs rank {min} or more, got shape {:?}", x.shape()),
        ));
    }
    Ok(())
}

pub(crate) fn build_instance(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = live(req(n, ins, 0)?.clone())?;
    need_rank(n, &x, 3)?;
    let eps = attr_f(n, "epsilon", 1e-5)? as f64;
    let axes: Vec<usize> = (2..x.rank()).collect();
    let y = standardize(&x, &axes, eps);
    let (s, b) = (req(n, ins, 1)?, req(n, ins, 2)?);
    Ok(vec![&(&y * &per_channel(s, &x)) + &per_channel(b, &x)])
}

pub(crate) fn build_group(n: &Node, cx: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = live(req(n, ins, 0)?.clone())?;
    need_rank(n, &x, 3)?;
    let eps = attr_f(n, "epsilon", 1e-5)? as f64;
    let g = attr_i(n, "num_groups", 0)?;
    let c = x.shape()[1];
    if g <= 0 || !c.is_multiple_of(g as usize) {
        return Err(fail(
            n,
            "num_groups",
            ErrorKind::BadArgument,
            format!("{g} groups do not divide {c} channels"),
        ));
    }
    let g = g as usize;
    let rest: usize = x.shape()[2..].iter().product();
    let grouped = x.reshape(&[x.shape()[0], g, c / g * rest]);
    let y = standardize(&grouped, &[2], eps).reshape(x.shape());
    let (s, b) = (req(n, ins, 1)?, req(n, ins, 2)?);
    // Opset 18 scales per group, 21 per channel.
    let (s, b) = if cx.opset < 21 && s.numel() == g && g != c {
        let widen = |t: &Tensor| t.reshape(&[g, 1]).broadcast_to(&[g, c / g]).reshape(&[c]);
        (widen(s), widen(b))
    } else {
        (s.clone(), b.clone())
    };
    Ok(vec![&(&y * &per_channel(&s, &x)) + &per_channel(&b, &x)])
}

pub(crate) fn build_lp(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let a = axis(n, "axis", attr_i(n, "axis", -1)?, x.rank())? as isize;
    let norm = match attr_i(n, "p", 2)? {
        1 => x.abs().sum(a, true),
        _ => x.square().sum(a, true).sqrt(),
    };
    // A zero norm gives zeros, not NaN, as in onnx's reference.
    let z = Tensor::full(&[], 0.0, x.dtype());
    Ok(vec![Tensor::where_cond(&norm.eq(&z), &z, &(x / &norm))])
}

pub(crate) fn check_lp(n: &Node, _: &Cx) -> Result<()> {
    match attr_i(n, "p", 2)? {
        1 | 2 => Ok(()),
        p => Err(fail(
            n,
            "p",
            ErrorKind::Unsupported,
            format!("p = {p}; only 1 and 2"),
        )),
    }
}

pub(crate) fn build_mvn(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = live(req(n, ins, 0)?.clone())?;
    let axes = attr_ints(n, "axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    let axes = axes
        .iter()
        .map(|&a| axis(n, "axes", a, x.rank()))
        .collect::<Result<Vec<_>>>()?;
    // The function body: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9).
    let mean = axes
        .iter()
        .fold(x.clone(), |t, &a| t.mean(a as isize, true));
    let sq = axes
        .iter()
        .fold(x.square(), |t, &a| t.mean(a as isize, true));
    let std = (&sq - &mean.square()).sqrt();
    Ok(vec![&(&x - &mean) / &(std + 1e-9)])
}

pub(crate) fn build_lrn(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = live(req(n, ins, 0)?.clone())?;
    need_rank(n, &x, 3)?;
    let size = attr_i(n, "size", 0)?;
    if size <= 0 {
        return Err(fail(n, "size", ErrorKind::BadArgument, "must be positive"));
    }
    let (alpha, beta, bias) = (
        attr_f(n, "alpha", 1e-4)? as f64,
        attr_f(n, "beta", 0.75)? as f64,
        attr_f(n, "bias", 1.0)? as f64,
    );
    let c = x.shape()[1];
    let size = size as usize;
    // Channels c - floor((size-1)/2) ..= c + ceil((size-1)/2), zero padded.
    let (lo, hi) = ((size - 1) / 2, (size - 1).div_ceil(2));
    // A tap more than c - 1 channels away reads only padding, so a huge
    // `size` costs no more taps than 2c - 1.
    let reach = c.saturating_sub(1);
    let (lo, hi) = (lo.min(reach), hi.min(reach));
    super::super::unrolled(n, "size", "channel taps", lo + hi + 1)?;
    let mut pads = vec![(0, 0); x.rank()];
    pads[1] = (lo, hi);
    let sq = x.square().pad(&pads, 0.0);
    let mut sum = sq.slice(1, 0, c as isize);
    for i in 1..lo + hi + 1 {
        sum = &sum + &sq.slice(1, i as isize, (i + c) as isize);
    }
    let denom = (sum * (alpha / size as f64) + bias).powf(beta);
    Ok(vec![&x / &denom])
}

pub(crate) fn build_rotary(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = live(req(n, ins, 0)?.clone())?;
    let (cos, sin) = (req(n, ins, 1)?, req(n, ins, 2)?);
    let rank = x.rank();
    // [b, s, heads, d] from either layout.
    let x4 = match rank {
        4 => x.permute(&[0, 2, 1, 3]),
        3 => {
            let h = attr_i(n, "num_heads", 0)?;
            let s = x.shape();
            if h <= 0 || !s[2].is_multiple_of(h as usize) {
                return Err(fail(
                    n,
                    "num_heads",
                    ErrorKind::BadArgument,
                    format!("{h} heads do not divide a hidden size of {}", s[2]),
                ));
            }
            x.reshape(&[s[0], s[1], h as usize, s[2] / h as usize])
        }
        r => {
            return Err(fail(
                n,
                "X",
                ErrorKind::Shape,
                format!("needs rank 3 or 4, got {r}"),
            ))
        }
    };
    let x4 = live(x4)?;
    let head = x4.shape()[3];
    let dim = match attr_i(n, "rotary_embedding_dim", 0)? {
        0 => head,
        d if d > 0 && d as usize <= head && d % 2 == 0 => d as usize,
        d => {
            return Err(fail(
                n,
                "rotary_embedding_dim",
                ErrorKind::BadArgument,
                format!("{d} must be even and at most the head size {head}"),
            ))
        }
    };
    let half = dim / 2;
    if cos.rank() == 0 || sin.rank() == 0 {
        return Err(fail(
            n,
            "cos_cache",
            ErrorKind::Shape,
            format!(
                "the caches must have a last dim of rotary_embedding_dim / 2 = {half}, got {:?} and {:?}",
                cos.shape(),
                sin.shape()
            ),
        ));
    }
    let (cos, sin) = match opt(ins, 3) {
        Some(p) => {
            let p = p.cast(DType::I64);
            let pick = |c: &Tensor| {
                c.index_select(0, &p.reshape(&[p.numel()]))
                    .reshape(&[p.shape(), &[c.shape()[c.rank() - 1]]].concat())
            };
            (pick(cos), pick(sin))
        }
        None => (cos.clone(), sin.clone()),
    };
    let (cos, sin) = (live(cos)?, live(sin)?);
    if cos.shape().last() != Some(&half) || sin.shape().last() != Some(&half) {
        return Err(fail(
            n,
            "cos_cache",
            ErrorKind::Shape,
            format!("the caches' last dim must be rotary_embedding_dim / 2 = {half}"),
        ));
    }
    let (b, s) = (x4.shape()[0], x4.shape()[1]);
    let cs = [&cos.shape()[..cos.rank() - 1], &[1, half]].concat();
    let (cos, sin) = (cos.reshape(&cs), sin.reshape(&cs));
    let rot = x4.slice(3, 0, dim as isize);
    let interleaved = attr_i(n, "interleaved", 0)? != 0;
    let (x1, x2) = if interleaved {
        (
            rot.slice_step(3, 0, dim as isize, 2),
            rot.slice_step(3, 1, dim as isize, 2),
        )
    } else {
        (
            rot.slice(3, 0, half as isize),
            rot.slice(3, half as isize, dim as isize),
        )
    };
    let real = &(&cos * &x1) - &(&sin * &x2);
    let imag = &(&sin * &x1) + &(&cos * &x2);
    let rot = if interleaved {
        let sh = [b, s, x4.shape()[2], half, 1];
        Tensor::cat(&[&real.reshape(&sh), &imag.reshape(&sh)], 4).reshape(&[
            b,
            s,
            x4.shape()[2],
            dim,
        ])
    } else {
        Tensor::cat(&[&real, &imag], 3)
    };
    let y = if dim < head {
        Tensor::cat(&[&rot, &x4.slice(3, dim as isize, head as isize)], 3)
    } else {
        rot
    };
    Ok(vec![match rank {
        4 => y.permute(&[0, 2, 1, 3]),
        _ => y.reshape(x.shape()),
    }])
}
