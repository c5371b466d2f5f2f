//! MaxPool, AveragePool and LpPool in general: 1-D to 3-D windows,
//! `ceil_mode`, dilations, any padding, MaxPool's indices output. The
//! cases the native 2-D pools handle (no ceil mode or dilation, padding
//! they accept) still go to `Pool2d`; the rest pads once, then reduces
//! one spatial axis at a time (a box window's max and sum are separable):
//! per axis, each tap is a strided slice of the padded input, combined
//! elementwise. Averages divide by a per-position count computed here at
//! trace time. MaxPool's indices track the first maximum over every tap
//! of the whole window (row-major order, as the reference walks it), with
//! the input index of each tap a constant.

use super::super::{
    attr_i, attr_ints, fail, mem, one, pool_kernel, req, table_of, usizes, window, Cx, Window,
};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::fallible;
use tilejit_ir::{DType, ErrorKind};

/// Which reduction a pool row runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in super::super) enum Pool {
    Max,
    Avg,
    Lp,
}

/// Load check shared by MaxPool, AveragePool and LpPool.
pub(in super::super) fn check_pool(n: &Node, _: &Cx) -> Result<()> {
    let k = attr_ints(n, "kernel_shape")?
        .ok_or_else(|| fail(n, "kernel_shape", ErrorKind::BadArgument, "is required"))?;
    if !(1..=3).contains(&k.len()) {
        return Err(fail(
            n,
            "kernel_shape",
            ErrorKind::Unsupported,
            format!("{}-D pools are not supported (1-D to 3-D are)", k.len()),
        ));
    }
    let kernel = usizes(n, "kernel_shape", k)?;
    if kernel.contains(&0) {
        return Err(fail(
            n,
            "kernel_shape",
            ErrorKind::BadArgument,
            "kernel sizes must be positive",
        ));
    }
    if !matches!(attr_i(n, "ceil_mode", 0)?, 0 | 1) {
        return Err(fail(
            n,
            "ceil_mode",
            ErrorKind::BadArgument,
            "must be 0 or 1",
        ));
    }
    if !matches!(attr_i(n, "storage_order", 0)?, 0 | 1) {
        return Err(fail(
            n,
            "storage_order",
            ErrorKind::BadArgument,
            "must be 0 (row-major) or 1 (column-major)",
        ));
    }
    if n.op == "LpPool" && attr_i(n, "p", 2)? < 1 {
        return Err(fail(n, "p", ErrorKind::BadArgument, "must be at least 1"));
    }
    window(n, kernel, None).map(|_| ())
}

/// One spatial axis of a pool: sizes and where taps fall in the padded
/// input.
struct Axis {
    input: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pads: (usize, usize),
    out: usize,
}

impl Axis {
    /// Padded position of tap `t` of output `o`.
    fn pos(&self, o: usize, t: usize) -> usize {
        o * self.stride + t * self.dilation
    }

    /// Taps of output `o` an average divides by: inside the input, or
    /// inside the declared padding too.
    fn count(&self, o: usize, include_pad: bool) -> usize {
        (0..self.kernel)
            .filter(|&t| {
                let p = self.pos(o, t);
                if include_pad {
                    p < self.pads.0 + self.input + self.pads.1
                } else {
                    p >= self.pads.0 && p < self.pads.0 + self.input
                }
            })
            .count()
    }
}

fn axes(n: &Node, win: &Window, image: &[usize], ceil: bool) -> Result<Vec<Axis>> {
    (0..image.len())
        .map(|i| {
            let (k, s, d) = (win.kernel[i], win.strides[i], win.dilations[i]);
            let (pb, pe) = win.pads[i];
            // Numbers from the file: checked, each overflow an error.
            let span = k.saturating_sub(1).checked_mul(d).and_then(|s| s.checked_add(1));
            let Some(total) = image[i].checked_add(pb).and_then(|t| t.checked_add(pe)) else {
                return Err(fail(
                    n,
                    "pads",
                    ErrorKind::BadArgument,
                    format!("the padded length of spatial axis {i} overflows"),
                ));
            };
            let Some(span) = span.filter(|&s| s <= total) else {
                let span = match span {
                    Some(s) => s.to_string(),
                    None => "past usize".into(),
                };
                return Err(fail(
                    n,
                    "kernel_shape",
                    ErrorKind::Shape,
                    format!(
                        "a window of span {span} is larger than the padded input ({total}) along spatial axis {i}"
                    ),
                ));
            };
            let mut out = if ceil {
                (total - span).div_ceil(s) + 1
            } else {
                (total - span) / s + 1
            };
            // The last window must start inside the input or its leading pad.
            if ceil && (out - 1) * s >= image[i] + pb {
                out -= 1;
            }
            Ok(Axis {
                input: image[i],
                kernel: k,
                stride: s,
                dilation: d,
                pads: (pb, pe),
                out,
            })
        })
        .collect()
}

/// The smallest value of a dtype (what max pooling pads with).
fn lowest(dtype: DType) -> f64 {
    match dtype {
        DType::U8 | DType::Bool => 0.0,
        DType::I8 => i8::MIN as f64,
        DType::I32 => i32::MIN as f64,
        DType::I64 => i64::MIN as f64,
        _ => f64::NEG_INFINITY,
    }
}

/// Tap `t` along spatial axis `i` of a padded tensor: every output
/// position's input at that tap.
fn tap(x: &Tensor, i: usize, ax: &Axis, t: usize) -> Tensor {
    let first = ax.pos(0, t);
    let end = ax.pos(ax.out - 1, t) + 1;
    if ax.stride == 1 || ax.out == 1 {
        return x.slice(2 + i as isize, first as isize, end as isize);
    }
    x.slice_step(
        2 + i as isize,
        first as isize,
        end as isize,
        ax.stride as isize,
    )
}

/// Whether the native `Pool2d` path (the table's `build_pool_2d`) covers
/// this node.
fn native(n: &Node, pool: Pool, spatial: usize, win: &Window) -> Result<bool> {
    if pool == Pool::Lp
        || spatial > 2
        || attr_i(n, "ceil_mode", 0)? != 0
        || win.dilations.iter().any(|&d| d != 1)
        || n.outputs.get(1).is_some_and(|o| !o.is_empty())
    {
        return Ok(false);
    }
    let fits = win
        .pads
        .iter()
        .zip(&win.kernel)
        .all(|((a, b), k)| a == b && 2 * a <= *k);
    Ok(fits || pool == Pool::Max || attr_i(n, "count_include_pad", 0)? != 0)
}

pub(in super::super) fn build_pool(
    n: &Node,
    cx: &Cx,
    ins: &[Option<Tensor>],
    pool: Pool,
) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let kernel = pool_kernel(n, x)?;
    let spatial = kernel.len();
    let image = x.shape()[2..].to_vec();
    let win = window(n, kernel, Some(&image))?;
    if native(n, pool, spatial, &win)? {
        return super::super::build_pool_2d(n, cx, ins, pool == Pool::Max);
    }
    if image.contains(&0) {
        return Err(fail(
            n,
            "X",
            ErrorKind::Shape,
            format!("an empty spatial dim in {:?}", x.shape()),
        ));
    }
    let ceil = attr_i(n, "ceil_mode", 0)? != 0;
    let axes = axes(n, &win, &image, ceil)?;
    // One traced slice per tap, axis by axis.
    let taps = axes.iter().fold(0usize, |s, a| s.saturating_add(a.kernel));
    super::super::unrolled(n, "kernel_shape", "pool taps", taps)?;
    // Pad once: the declared pads, plus what the last (ceil mode) window
    // reaches past them.
    let mut pads = vec![(0, 0); 2];
    for ax in &axes {
        let need = ax.pos(ax.out - 1, ax.kernel - 1) + 1;
        let have = ax.pads.0 + ax.input + ax.pads.1;
        pads.push((ax.pads.0, ax.pads.1 + need.saturating_sub(have)));
    }
    let fill = if pool == Pool::Max {
        lowest(x.dtype())
    } else {
        0.0
    };
    let padded = if pads.iter().all(|&p| p == (0, 0)) {
        x.clone()
    } else {
        x.pad(&pads, fill)
    };
    if pool == Pool::Max && n.outputs.get(1).is_some_and(|o| !o.is_empty()) {
        let order = attr_i(n, "storage_order", 0)?;
        let (y, idx) = max_with_indices(n, x.shape(), &padded, &axes, order != 0)?;
        return Ok(vec![y, idx]);
    }
    let p = attr_i(n, "p", 2)?;
    let mut y = match pool {
        Pool::Lp => padded.abs().powf(p as f64),
        _ => padded,
    };
    for (i, ax) in axes.iter().enumerate() {
        let mut acc = tap(&y, i, ax, 0);
        for t in 1..ax.kernel {
            let v = tap(&y, i, ax, t);
            acc = match pool {
                Pool::Max => acc.maximum(&v),
                _ => acc + v,
            };
        }
        y = acc;
    }
    match pool {
        Pool::Max => one(y),
        Pool::Lp => one(y.powf(1.0 / p as f64)),
        Pool::Avg => {
            let include = attr_i(n, "count_include_pad", 0)? != 0;
            let counts = outer(&axes, |ax, o| ax.count(o, include) as f64)?;
            let mut dims = vec![1, 1];
            dims.extend(axes.iter().map(|a| a.out));
            let counts = Tensor::from_vec(counts, &dims)?.cast(y.dtype());
            one(y / counts)
        }
    }
}

/// `f` per axis, multiplied over every output position (row-major). The
/// table is as large as the output, whose dims the file declares: its
/// memory is asked for, never assumed.
fn outer(axes: &[Axis], f: impl Fn(&Axis, usize) -> f64) -> Result<Vec<f64>> {
    let mut v = vec![1.0];
    for ax in axes {
        let per = table_of(ax.out, |o| f(ax, o))?;
        let len = v.len().saturating_mul(per.len());
        let mut next = mem(fallible::with_capacity(len))?;
        next.extend(v.iter().flat_map(|a| per.iter().map(move |b| a * b)));
        v = next;
    }
    Ok(v)
}

/// Max pooling over every tap of the window, with the flat input index
/// (row-major over N, C and the spatial dims, or column-major over the
/// spatial dims when `col_major`) of the first maximum: the taps stacked
/// on a new axis, its `argmax` (first on ties) picking from a constant
/// table of each tap's input index.
fn max_with_indices(
    n: &Node,
    shape: &[usize],
    padded: &Tensor,
    axes: &[Axis],
    col_major: bool,
) -> Result<(Tensor, Tensor)> {
    let (batch, channels) = (shape[0], shape[1]);
    let plane: usize = shape[2..].iter().product();
    // Stride of each spatial axis in the index.
    let strides: Vec<usize> = (0..axes.len())
        .map(|i| {
            if col_major {
                shape[2..2 + i].iter().product()
            } else {
                shape[3 + i..].iter().product()
            }
        })
        .collect();
    let outs: Vec<usize> = axes.iter().map(|a| a.out).collect();
    // Products of the file's kernel and pads: checked, as the table below
    // (taps by outputs) is then reserved fallibly.
    let kernels: Vec<usize> = axes.iter().map(|a| a.kernel).collect();
    let product = tilejit_ir::shape::checked_product;
    let (Some(count), Some(taps)) = (product(&outs), product(&kernels)) else {
        return Err(fail(
            n,
            "kernel_shape",
            ErrorKind::Shape,
            format!("the window or the output {outs:?} has more elements than a usize holds"),
        ));
    };
    if taps == 0 || count == 0 {
        return Err(fail(
            n,
            "kernel_shape",
            ErrorKind::Shape,
            "an empty window or output",
        ));
    }
    super::super::unrolled(n, "kernel_shape", "window taps", taps)?;
    let mut values = Vec::with_capacity(taps);
    let mut table = mem(fallible::with_capacity(taps.saturating_mul(count)))?;
    for flat in 0..taps {
        // The tap's offset per axis, the last axis fastest.
        let mut ts = vec![0; axes.len()];
        let mut r = flat;
        for i in (0..axes.len()).rev() {
            ts[i] = r % axes[i].kernel;
            r /= axes[i].kernel;
        }
        let mut v = padded.clone();
        for (i, ax) in axes.iter().enumerate() {
            v = tap(&v, i, ax, ts[i]);
        }
        let mut with_tap = vec![batch, channels, 1];
        with_tap.extend(&outs);
        values.push(v.reshape(&with_tap));
        // Input index per output position (padding: any in-range index,
        // since its value never wins).
        let mut idx = mem(fallible::filled(count, 0i64))?;
        let mut stride_out = 1;
        for (i, ax) in axes.iter().enumerate().rev() {
            for (j, e) in idx.iter_mut().enumerate() {
                let o = (j / stride_out) % ax.out;
                let p = ax.pos(o, ts[i]) as i64 - ax.pads.0 as i64;
                *e += p.clamp(0, ax.input as i64 - 1) * strides[i] as i64;
            }
            stride_out *= ax.out;
        }
        table.extend(idx);
    }
    let refs: Vec<&Tensor> = values.iter().collect();
    let stacked = if refs.len() == 1 {
        values[0].clone()
    } else {
        Tensor::cat(&refs, 2)
    };
    let mut full = vec![batch, channels];
    full.extend(&outs);
    let y = stacked.max(2, false);
    let pick = stacked.argmax(2, true);
    let mut table_dims = vec![1, 1, taps];
    table_dims.extend(&outs);
    let mut all = vec![batch, channels, taps];
    all.extend(&outs);
    let table = Tensor::from_vec(table, &table_dims)?.broadcast_to(&all);
    let local = table.gather(2, &pick).reshape(&full);
    let base = table_of(batch * channels, |b| (b * plane) as i64)?;
    let mut base_dims = vec![batch, channels];
    base_dims.extend(std::iter::repeat_n(1, axes.len()));
    let base = Tensor::from_vec(base, &base_dims)?;
    Ok((y, local + base))
}
