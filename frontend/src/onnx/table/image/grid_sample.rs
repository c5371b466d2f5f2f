//! GridSample (2-D and N-D): the sampling coordinates come from the grid,
//! data, so everything here is traced (ported from the ONNX reference,
//! `op_grid_sample.py`). Per spatial axis the grid's coordinate is
//! denormalised, rounded (nearest) or moved inside the border (border,
//! reflection), then split into taps (1 nearest, 2 linear, 4 cubic) with
//! their weights; each tap's index is clamped into the axis and, for
//! zeros padding, its weight masked to 0 outside it, so no read is ever
//! out of bounds. The taps of every axis combine into flat indices into
//! the image, read by one `gather` each and summed with their weights.

use super::super::{attr_i, attr_s, fail, one, req, Cx};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::{DType, ErrorKind};

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Padding {
    Zeros,
    Border,
    Reflection,
}

fn mode(n: &Node) -> Result<Mode> {
    match attr_s(n, "mode", "linear")? {
        "nearest" => Ok(Mode::Nearest),
        "linear" | "bilinear" => Ok(Mode::Linear),
        "cubic" | "bicubic" => Ok(Mode::Cubic),
        m => Err(fail(
            n,
            "mode",
            ErrorKind::Unsupported,
            format!("`{m}` is not a GridSample mode (nearest, linear, cubic)"),
        )),
    }
}

fn padding(n: &Node) -> Result<Padding> {
    match attr_s(n, "padding_mode", "zeros")? {
        "zeros" => Ok(Padding::Zeros),
        "border" => Ok(Padding::Border),
        "reflection" => Ok(Padding::Reflection),
        m => Err(fail(
            n,
            "padding_mode",
            ErrorKind::Unsupported,
            format!("`{m}` is not a padding mode (zeros, border, reflection)"),
        )),
    }
}

pub(in super::super) fn check_grid_sample(n: &Node, _: &Cx) -> Result<()> {
    mode(n)?;
    padding(n)?;
    if !matches!(attr_i(n, "align_corners", 0)?, 0 | 1) {
        return Err(fail(
            n,
            "align_corners",
            ErrorKind::BadArgument,
            "must be 0 or 1",
        ));
    }
    Ok(())
}

fn scalar(v: f64, like: &Tensor) -> Tensor {
    Tensor::full(&[], v, like.dtype())
}

fn clamp(x: &Tensor, lo: f64, hi: f64) -> Tensor {
    x.maximum(&scalar(lo, x)).minimum(&scalar(hi, x))
}

/// The reference's `_gs_reflect`: `x` reflected by the near border until
/// it lies in `[lo, hi]`.
fn reflect(x: &Tensor, lo: f64, hi: f64) -> Tensor {
    let range = hi - lo;
    if range <= 0.0 {
        return x * 0.0 + lo;
    }
    let fold = |dx: Tensor, near: f64, far: f64, sign: f64| {
        let k = (&dx / range).floor();
        let r = &dx - &k * range;
        let odd = &k - (&k * 0.5).floor() * 2.0;
        let even = odd.lt(&scalar(0.5, &odd));
        Tensor::where_cond(&even, &(&r * sign + near), &(&r * -sign + far))
    };
    let below = fold(x.rsub(lo), lo, hi, 1.0);
    let above = fold(x - hi, hi, lo, -1.0);
    let y = Tensor::where_cond(&x.lt(&scalar(lo, x)), &below, x);
    Tensor::where_cond(&x.gt(&scalar(hi, x)), &above, &y)
}

/// Keys' cubic coefficients (a = -0.75) of the 4 taps around a point at
/// fraction `t` past the second.
fn cubic(t: &Tensor) -> [Tensor; 4] {
    let a = -0.75;
    let far = |x: Tensor| ((&x * a - 5.0 * a) * &x + 8.0 * a) * &x - 4.0 * a;
    let near = |x: Tensor| (&x * (a + 2.0) - (a + 3.0)) * &x * &x + 1.0;
    [
        far(t + 1.0),
        near(t.clone()),
        near(t.rsub(1.0)),
        far(t.rsub(2.0)),
    ]
}

/// One axis's taps: clamped integer indices and weights (masked to 0 for
/// zeros padding outside the axis).
pub(super) fn axis_taps(
    x: &Tensor,
    len: usize,
    mode: Mode,
    pad: Padding,
    border: (f64, f64),
) -> Vec<(Tensor, Tensor)> {
    let hi = len as f64 - 1.0;
    let (starts, weights): (Vec<Tensor>, Vec<Tensor>) = match mode {
        // Rounded already; reflection may leave a fraction, which the
        // reference truncates.
        Mode::Nearest => {
            let t = Tensor::where_cond(&x.lt(&scalar(0.0, x)), &x.ceil(), &x.floor());
            (vec![t], vec![x * 0.0 + 1.0])
        }
        Mode::Linear => {
            let x0 = x.floor();
            let t = x - &x0;
            (vec![x0.clone(), &x0 + 1.0], vec![t.rsub(1.0), t])
        }
        Mode::Cubic => {
            let x0 = x.floor();
            let t = x - &x0;
            (
                vec![&x0 - 1.0, x0.clone(), &x0 + 1.0, &x0 + 2.0],
                cubic(&t).to_vec(),
            )
        }
    };
    starts
        .into_iter()
        .zip(weights)
        .map(|(i, w)| {
            let (i, w) = match pad {
                Padding::Zeros => {
                    let inside = i.ge(&scalar(0.0, &i)).cast(DType::I32)
                        * i.le(&scalar(hi, &i)).cast(DType::I32);
                    (i, w * inside.cast(x.dtype()))
                }
                Padding::Border => (i, w),
                Padding::Reflection => (reflect(&i, border.0, border.1).floor(), w),
            };
            (clamp(&i, 0.0, hi).cast(DType::I64), w)
        })
        .collect()
}

pub(in super::super) fn build_grid_sample(
    n: &Node,
    _: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, grid) = (req(n, ins, 0)?, req(n, ins, 1)?);
    let (mode, pad) = (mode(n)?, padding(n)?);
    let align = attr_i(n, "align_corners", 0)? != 0;
    let r = x.rank();
    let k = r.saturating_sub(2);
    let gs = grid.shape().to_vec();
    if r < 3 || grid.rank() != r || gs[0] != x.shape()[0] || gs[r - 1] != k {
        return Err(fail(
            n,
            "grid",
            ErrorKind::Shape,
            format!(
                "X {:?} needs a grid [N, out.., {k}] of its rank, got {gs:?}",
                x.shape()
            ),
        ));
    }
    if !matches!(
        grid.dtype(),
        DType::F32 | DType::F64 | DType::F16 | DType::BF16
    ) {
        return Err(fail(
            n,
            "grid",
            ErrorKind::DType,
            format!("must be floating point, got {:?}", grid.dtype()),
        ));
    }
    let (batch, channels) = (x.shape()[0], x.shape()[1]);
    let dims = x.shape()[2..].to_vec();
    let outs = gs[1..r - 1].to_vec();
    let points: usize = outs.iter().product();
    let mut y_dims = vec![batch, channels];
    y_dims.extend(&outs);
    if points == 0 || dims.contains(&0) || batch * channels == 0 {
        return one(Tensor::zeros(&y_dims, x.dtype()));
    }
    let g = grid.reshape(&[batch, points, k]);
    // Per spatial axis: its taps (index, weight), each [N, points].
    let mut per_axis = Vec::with_capacity(k);
    for (i, &len) in dims.iter().enumerate() {
        // The grid lists coordinates innermost axis first.
        let c = g
            .slice(2, (k - 1 - i) as isize, (k - i) as isize)
            .reshape(&[batch, points]);
        let d = len as f64;
        let mut v = if align {
            (&c + 1.0) * (0.5 * (d - 1.0))
        } else {
            ((&c + 1.0) * d - 1.0) * 0.5
        };
        if mode == Mode::Nearest {
            v = v.round();
        }
        let border = if align {
            (0.0, d - 1.0)
        } else {
            (-0.5, d - 0.5)
        };
        let outside = v
            .lt(&scalar(border.0, &v))
            .cast(DType::I32)
            .maximum(&v.gt(&scalar(border.1, &v)).cast(DType::I32))
            .cast(DType::Bool);
        v = match pad {
            Padding::Zeros => v,
            Padding::Border => Tensor::where_cond(&outside, &clamp(&v, 0.0, d - 1.0), &v),
            Padding::Reflection => {
                Tensor::where_cond(&outside, &reflect(&v, border.0, border.1), &v)
            }
        };
        per_axis.push(axis_taps(&v, len, mode, pad, border));
    }
    // Every combination of one tap per axis.
    let strides: Vec<i64> = (0..k)
        .map(|i| dims[i + 1..].iter().product::<usize>() as i64)
        .collect();
    let plane: usize = dims.iter().product();
    let flat = x.reshape(&[batch, channels, plane]);
    let taps: usize = per_axis.iter().map(|t| t.len()).product();
    let mut y: Option<Tensor> = None;
    for combo in 0..taps {
        let mut rest = combo;
        let mut idx: Option<Tensor> = None;
        let mut w: Option<Tensor> = None;
        for i in (0..k).rev() {
            let (ti, tw) = &per_axis[i][rest % per_axis[i].len()];
            rest /= per_axis[i].len();
            let part = ti * strides[i];
            idx = Some(match idx {
                Some(a) => a + part,
                None => part,
            });
            w = Some(match w {
                Some(a) => a * tw,
                None => tw.clone(),
            });
        }
        let (Some(idx), Some(w)) = (idx, w) else {
            continue;
        };
        let idx = idx
            .reshape(&[batch, 1, points])
            .broadcast_to(&[batch, channels, points]);
        let v = flat.gather(2, &idx) * w.cast(x.dtype()).reshape(&[batch, 1, points]);
        y = Some(match y {
            Some(a) => a + v,
            None => v,
        });
    }
    match y {
        Some(y) => one(y.reshape(&y_dims)),
        None => Err(fail(n, "X", ErrorKind::Shape, "no spatial axes")),
    }
}

pub(in super::super) fn check_affine_grid(n: &Node, _: &Cx) -> Result<()> {
    if !matches!(attr_i(n, "align_corners", 0)?, 0 | 1) {
        return Err(fail(
            n,
            "align_corners",
            ErrorKind::BadArgument,
            "must be 0 or 1",
        ));
    }
    Ok(())
}

/// AffineGrid: the normalised coordinates of every output point (a
/// constant, innermost axis first, then 1), mapped by the traced `theta`
/// as a sum of products over the homogeneous coordinate.
pub(in super::super) fn build_affine_grid(
    n: &Node,
    _: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let theta = req(n, ins, 0)?;
    let size = super::super::dims_of(n, "size", req(n, ins, 1)?)?;
    let align = attr_i(n, "align_corners", 0)? != 0;
    let k = size.len().saturating_sub(2);
    let ts = theta.shape();
    if !(2..=3).contains(&k) || ts != [size[0], k, k + 1] {
        return Err(fail(
            n,
            "theta",
            ErrorKind::Shape,
            format!("size {size:?} needs theta [N, {k}, {}], got {ts:?}", k + 1),
        ));
    }
    let dims = &size[2..];
    // The constant below holds `points * (k + 1)` coordinates.
    let mut table = dims.to_vec();
    table.push(k + 1);
    let points = super::super::folded_len(n, "size", &table)? / (k + 1);
    let coord = |d: usize, i: usize| -> f64 {
        let d = d as f64;
        if align {
            if d <= 1.0 {
                -1.0
            } else {
                -1.0 + i as f64 * 2.0 / (d - 1.0)
            }
        } else {
            -1.0 + (2 * i + 1) as f64 / d
        }
    };
    let mut base = Vec::with_capacity(points * (k + 1));
    for p in 0..points {
        let mut pos = vec![0; k];
        let mut r = p;
        for i in (0..k).rev() {
            pos[i] = r % dims[i];
            r /= dims[i];
        }
        for i in (0..k).rev() {
            base.push(coord(dims[i], pos[i]));
        }
        base.push(1.0);
    }
    let base = Tensor::from_vec(base, &[1, points, 1, k + 1])?.cast(theta.dtype());
    let grid = (theta.reshape(&[size[0], 1, k, k + 1]) * base).sum(3, false);
    let mut out = vec![size[0]];
    out.extend(dims);
    out.push(k);
    one(grid.reshape(&out))
}
