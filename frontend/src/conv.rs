//! Convolution and pooling over NCHW images. A float convolution is one
//! `Op::Conv`: a GEMM whose left operand is the image read as its windows
//! (an implicit im2col; on Sim the cube loads each panel straight from the
//! image with `ldl1c`), its OIHW weights read transposed in place and its
//! NHWC product permuted to NCHW by its kernel's epilogue. Pooling is an
//! `Op::Pool` (a large window two, one per axis), whose kernels read the
//! taps as strided views of the image and skip the padding; bool pooling,
//! windows longer than [`MAX_TAPS`] on an axis and convolutions of other
//! dtypes gather whole windows and then reduce or multiply them.

use crate::apply::apply;
use crate::error::Loc;
use crate::tensor::Tensor;
use tilejit_ir::fallible::with_capacity;
use tilejit_ir::{
    Array, Axes, Buffer, DType, Graph, IrError, Lit, NodeId, Op, Perm, ReduceOp, Shape, Window,
};

/// The options of [`Tensor::conv2d_with`], torch's `conv2d` arguments:
/// `stride`, zero `padding` and `dilation` as `(rows, columns)`, and
/// `groups` (the channels split into that many groups, each output
/// channel reading only its group's inputs; `groups` = channels is a
/// depthwise convolution). `Default` is stride `(1, 1)`, padding `(0, 0)`,
/// dilation `(1, 1)`, one group.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Conv2d {
    /// Step between windows.
    pub stride: (usize, usize),
    /// Zeros added on both sides of the rows and of the columns.
    pub padding: (usize, usize),
    /// Step between a window's taps.
    pub dilation: (usize, usize),
    /// Channel groups.
    pub groups: usize,
}

impl Default for Conv2d {
    fn default() -> Conv2d {
        Conv2d {
            stride: (1, 1),
            padding: (0, 0),
            dilation: (1, 1),
            groups: 1,
        }
    }
}

/// The options of [`Tensor::max_pool2d_with`] and
/// [`Tensor::avg_pool2d_with`], torch's `max_pool2d` / `avg_pool2d`
/// arguments: a `kernel` window moved by `stride` over an image padded by
/// `padding` (at most half the window each way). Max pooling pads with
/// -inf (padding never wins); average pooling counts the padding's zeros
/// when `count_include_pad` (torch's default) and divides by the window's
/// elements inside the image otherwise. [`Pool2d::new`] gives torch's
/// defaults: stride = kernel, no padding, `count_include_pad`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pool2d {
    /// Window height and width.
    pub kernel: (usize, usize),
    /// Step between windows.
    pub stride: (usize, usize),
    /// Padding on both sides of the rows and of the columns.
    pub padding: (usize, usize),
    /// Average pooling: whether the padding counts in the divisor.
    pub count_include_pad: bool,
}

impl Pool2d {
    /// A `kernel` window with torch's defaults (stride = kernel, no
    /// padding, `count_include_pad`).
    pub fn new(kernel: (usize, usize)) -> Pool2d {
        Pool2d {
            kernel,
            stride: kernel,
            padding: (0, 0),
            count_include_pad: true,
        }
    }
}

/// The IR's window for `k` taps under `opts`, or an error naming the
/// value too large for it.
fn window(op: &'static str, (kh, kw): (usize, usize), opts: &Conv2d) -> Result<Window, IrError> {
    let small = |v: usize| {
        u32::try_from(v).map_err(|_| IrError::Window {
            op,
            shape: Shape::SCALAR,
            reason: format!("{v} is too large for a window size, stride, padding or group count"),
        })
    };
    let (ph, pw) = (small(opts.padding.0)?, small(opts.padding.1)?);
    Ok(Window {
        kh: small(kh)?,
        kw: small(kw)?,
        stride: (small(opts.stride.0)?, small(opts.stride.1)?),
        pad: [ph, pw, ph, pw],
        dilation: (small(opts.dilation.0)?, small(opts.dilation.1)?),
        groups: small(opts.groups)?,
    })
}

/// The output size of `win` over image `s`, or an error naming why the
/// window does not fit.
fn fits(op: &'static str, s: Shape, win: &Window) -> Result<(usize, usize), IrError> {
    let zero = [
        ("stride", win.stride),
        ("dilation", win.dilation),
        ("window size", (win.kh, win.kw)),
    ]
    .into_iter()
    .find(|(_, (a, b))| *a == 0 || *b == 0);
    if let Some((what, v)) = zero {
        return Err(IrError::Window {
            op,
            shape: s,
            reason: format!("{what} 0 in {v:?}: each must be at least 1"),
        });
    }
    win.out(s[2], s[3]).ok_or_else(|| IrError::Window {
        op,
        shape: s,
        reason: format!(
            "a {}x{} window with stride {:?}, padding {:?} and dilation {:?} does not fit a \
             {}x{} image (the window, stride and dilation must be non-zero, and the dilated \
             window at most the padded image)",
            win.kh,
            win.kw,
            win.stride,
            (win.pad[0], win.pad[1]),
            win.dilation,
            s[2],
            s[3]
        ),
    })
}

/// `x` (`[n, c, h, w]`) as `[n, c, oh * ow, kh * kw]`: each output
/// position's window under `win`, gathered along the flattened image in
/// place, with `pad` where a tap falls in the padding (a constant mask
/// selects it: no padded copy of the image; the gather and the select
/// are one kernel, the reduction of the windows another).
fn windows(
    g: &mut Graph,
    op: &'static str,
    x: NodeId,
    win: Window,
    pad: Lit,
) -> Result<(NodeId, usize, usize), IrError> {
    let s = g.ty(x).shape;
    let (n, c, h, w) = (s[0], s[1], s[2], s[3]);
    let (oh, ow) = fits(op, s, &win)?;
    let (kh, kw) = (win.kh as usize, win.kw as usize);
    let len = oh * ow * kh * kw;
    let (mut idx, mut inside) = (with_capacity(len)?, with_capacity(len)?);
    for y in 0..oh {
        for xx in 0..ow {
            for i in 0..kh {
                for j in 0..kw {
                    // A tap in the padding reads element 0 and is masked.
                    let at = win.tap((y, xx), (i, j)).filter(|&(r, q)| r < h && q < w);
                    idx.push(at.map_or(0, |(r, q)| (r * w + q) as i64));
                    inside.push(at.is_some());
                }
            }
        }
    }
    let padded = inside.contains(&false);
    let one = Shape::new(&[1, 1, len])?;
    let idx = g.add_constant(Array::new(one, Buffer::I64(idx))?);
    let idx = g.add(Op::Broadcast(idx, Shape::new(&[n, c, len])?))?;
    let flat = g.add(Op::Reshape(x, Shape::new(&[n, c, h * w])?))?;
    let mut cols = g.add(Op::Gather(flat, idx, 2))?;
    if padded {
        let mask = g.add_constant(Array::new(one, Buffer::Bool(inside))?);
        let ty = g.ty(cols);
        let mask = g.add(Op::Broadcast(mask, ty.shape))?;
        let fill = g.add(Op::Full { value: pad, ty })?;
        cols = g.add(Op::Select(mask, cols, fill))?;
    }
    let cols = g.add(Op::Reshape(cols, Shape::new(&[n, c, oh * ow, kh * kw])?))?;
    Ok((cols, oh, ow))
}

/// Windows of at most this many taps pool as one [`Op::Pool`]; larger
/// ones as two, along the columns then the rows (each window's taps
/// inside the image are a range of rows by a range of columns, so the
/// reduction separates exactly), each axis at most this long; longer ones
/// gather their windows and reduce them. (A device kernel holds at most
/// 21 accesses: the taps and the store.)
const MAX_TAPS: usize = 16;

/// `reduce` over each window of `win` on `x` (`[n, c, h, w]`): one or two
/// [`Op::Pool`]s (see [`MAX_TAPS`]), `None` where the window is too long.
fn pool_op(
    g: &mut Graph,
    x: NodeId,
    win: Window,
    reduce: ReduceOp,
) -> Result<Option<NodeId>, IrError> {
    let (kh, kw) = (win.kh as usize, win.kw as usize);
    if kh * kw <= MAX_TAPS {
        return Ok(Some(g.add(Op::Pool(reduce, x, win))?));
    }
    if kh > MAX_TAPS || kw > MAX_TAPS {
        return Ok(None);
    }
    let cols = Window {
        kh: 1,
        stride: (1, win.stride.1),
        pad: [0, win.pad[1], 0, win.pad[3]],
        dilation: (1, win.dilation.1),
        ..win
    };
    let rows = Window {
        kw: 1,
        stride: (win.stride.0, 1),
        pad: [win.pad[0], 0, win.pad[2], 0],
        dilation: (win.dilation.0, 1),
        ..win
    };
    let c = g.add(Op::Pool(reduce, x, cols))?;
    Ok(Some(g.add(Op::Pool(reduce, c, rows))?))
}

/// Checks that `x` is an `[n, c, h, w]` image.
fn image(op: &'static str, g: &Graph, x: NodeId) -> Result<(), IrError> {
    let s = g.ty(x).shape;
    if s.rank() != 4 {
        return Err(IrError::Window {
            op,
            shape: s,
            reason: "expects an NCHW image (rank 4)".into(),
        });
    }
    Ok(())
}

/// The lowest value of `dtype` (-inf for floats): max pooling's padding.
fn lowest(dtype: DType) -> Lit {
    match dtype {
        d if d.is_float() => Lit::from_f64(f64::NEG_INFINITY, d),
        DType::I32 => Lit::Int(i32::MIN as i64),
        DType::I8 => Lit::Int(i8::MIN as i64),
        DType::I16 => Lit::Int(i16::MIN as i64),
        DType::I64 => Lit::Int(i64::MIN),
        DType::Bool => Lit::Bool(false),
        _ => Lit::Int(0),
    }
}

/// A pooling: `reduce` over each window of `opts`, then (average) the
/// division by its element count.
/// A rank error of a 1-D op: its operands must be rank 3.
fn rank_error(op: &'static str, operands: &[&Tensor], at: Loc) -> Tensor {
    let shapes: Vec<&[usize]> = operands.iter().map(|t| t.shape()).collect();
    let msg = format!("{op} takes rank-3 [n, c, l] operands, not {shapes:?}");
    apply(op, at, operands, |_, _| Err(IrError::Arguments(msg)))
}

/// A 1-D pool as the 2-D one on a 1-high image.
#[allow(clippy::too_many_arguments)] // the pool's options, one by one
fn pool1d(
    t: &Tensor,
    op: &'static str,
    kernel: usize,
    stride: usize,
    padding: usize,
    count_include_pad: bool,
    reduce: ReduceOp,
    at: Loc,
) -> Tensor {
    let s = t.shape().to_vec();
    if s.len() != 3 {
        return rank_error(op, &[t], at);
    }
    let opts = Pool2d {
        kernel: (1, kernel),
        stride: (1, stride),
        padding: (0, padding),
        count_include_pad,
    };
    let y = pool(&t.reshape(&[s[0], s[1], 1, s[2]]), op, opts, reduce, at);
    match y.shape() {
        &[n, c, 1, l] => y.reshape(&[n, c, l]),
        _ => y,
    }
}

fn pool(t: &Tensor, op: &'static str, opts: Pool2d, reduce: ReduceOp, location: Loc) -> Tensor {
    // Its output size is `(h + 2*padding - kernel) / stride + 1`.
    crate::trace::note_shape_arithmetic(op, t, None);
    apply(op, location, &[t], |g, ids| {
        image(op, g, ids[0])?;
        let dtype = g.ty(ids[0]).dtype;
        let avg = reduce == ReduceOp::Sum;
        if avg && !dtype.is_float() {
            return Err(IrError::DTypeUnsupported {
                op,
                dtype,
                hint: "average pooling is for floats; cast first",
            });
        }
        let s = g.ty(ids[0]).shape;
        let conv = Conv2d {
            stride: opts.stride,
            padding: opts.padding,
            ..Conv2d::default()
        };
        let win = window(op, opts.kernel, &conv)?;
        let (ph, pw) = opts.padding;
        if 2 * ph > opts.kernel.0 || 2 * pw > opts.kernel.1 {
            return Err(IrError::Window {
                op,
                shape: s,
                reason: format!(
                    "padding {:?} is more than half the {}x{} window (as torch, so every \
                     window holds an element of the image)",
                    opts.padding, opts.kernel.0, opts.kernel.1
                ),
            });
        }
        let pad_value = if avg {
            crate::scalar::scalar_lit(0i64, dtype)?
        } else {
            lowest(dtype)
        };
        let (oh, ow) = fits(op, s, &win)?;
        let pooled = if dtype == DType::Bool {
            None
        } else {
            pool_op(g, ids[0], win, reduce)?
        };
        let (r, oh, ow) = if let Some(p) = pooled {
            (p, oh, ow)
        } else {
            let (cols, oh, ow) = windows(g, op, ids[0], win, pad_value)?;
            (
                g.add(Op::Reduce(reduce, cols, Axes::from_axes(&[3])))?,
                oh,
                ow,
            )
        };
        let mut out = g.add(Op::Reshape(r, Shape::new(&[s[0], s[1], oh, ow])?))?;
        if avg {
            let ty = g.ty(out);
            let count = if opts.count_include_pad || (ph, pw) == (0, 0) {
                g.add(Op::Full {
                    value: crate::scalar::scalar_lit(win.size() as f64, ty.dtype)?,
                    ty,
                })?
            } else {
                // The window's elements inside the image, per position.
                let mut counts = with_capacity(oh * ow)?;
                for y in 0..oh {
                    for xx in 0..ow {
                        let inside = |o: usize, k: usize, st: usize, p: usize, n: usize| {
                            let lo = (o * st).max(p);
                            let hi = (o * st + k).min(p + n);
                            hi.saturating_sub(lo)
                        };
                        let rows = inside(y, opts.kernel.0, opts.stride.0, ph, s[2]);
                        let cols = inside(xx, opts.kernel.1, opts.stride.1, pw, s[3]);
                        counts.push((rows * cols) as f64);
                    }
                }
                let c = g.add_constant(Array::new(
                    Shape::new(&[1, 1, oh, ow])?,
                    Buffer::F64(counts),
                )?);
                let c = g.add(Op::Cast(c, ty.dtype))?;
                g.add(Op::Broadcast(c, ty.shape))?
            };
            out = g.add(Op::Binary(tilejit_ir::BinaryOp::Div, out, count))?;
        }
        Ok(out)
    })
}

/// The convolution of `x` by OIHW weights `w` under `opts`, plus `bias`.
fn conv2d(
    g: &mut Graph,
    x: NodeId,
    w: NodeId,
    bias: Option<NodeId>,
    opts: &Conv2d,
) -> Result<NodeId, IrError> {
    const OP: &str = "conv2d";
    image(OP, g, x)?;
    let (sx, sw) = (g.ty(x).shape, g.ty(w).shape);
    let groups = opts.groups;
    if groups == 0 || !sx[1].is_multiple_of(groups) {
        return Err(IrError::Window {
            op: OP,
            shape: sx,
            reason: format!("{} input channels do not split into {groups} groups", sx[1]),
        });
    }
    let cg = sx[1] / groups;
    if sw.rank() != 4 || sw[1] != cg || !sw[0].is_multiple_of(groups) {
        return Err(IrError::Window {
            op: OP,
            shape: sx,
            reason: format!(
                "weights {sw} must be [out, {cg}, kh, kw] (OIHW: in-channels the image's {} \
                 over {groups} groups, out a multiple of the groups)",
                sx[1]
            ),
        });
    }
    let (n, o, kh, kw) = (sx[0], sw[0], sw[2], sw[3]);
    let win = window(OP, (kh, kw), opts)?;
    let (oh, ow) = fits(OP, sx, &win)?;
    let k = cg.checked_mul(kh).and_then(|x| x.checked_mul(kw));
    let k = k.ok_or_else(|| IrError::Window {
        op: OP,
        shape: sw,
        reason: "the weights' window is too large".into(),
    })?;
    let wm = g.add(Op::Reshape(w, Shape::new(&[o, k])?))?;
    let wt = g.add(Op::Permute(wm, Perm::new(&[1, 0])?))?;
    let dtype = g.ty(x).dtype;
    let y = if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        // One GEMM over the windows, read in place (on Sim, the cube's
        // `ldl1c`): no copy of the windows.
        // The NHWC product permuted to NCHW: bias, residual and ReLU
        // after it fuse into the convolution's kernel, one pass over the
        // product.
        let y = g.add(Op::Conv(x, wt, win))?;
        g.add(Op::Permute(y, Perm::new(&[0, 3, 1, 2])?))?
    } else {
        // Other dtypes (the cube's are floats): the windows gathered,
        // then a matmul.
        if groups != 1 {
            return Err(IrError::DTypeUnsupported {
                op: OP,
                dtype,
                hint: "grouped convolutions are for f32, f16 and bf16; cast first",
            });
        }
        let zero = crate::scalar::scalar_lit(0i64, dtype)?;
        let (cols, ..) = windows(g, OP, x, win, zero)?;
        // [n, c, p, k] -> [n, p, c, k] -> [n*p, c*k]: the rows of one
        // GEMM with the weights as [c*k, o] (no copy per image).
        let cols = g.add(Op::Permute(cols, Perm::new(&[0, 2, 1, 3])?))?;
        let rows = g.add(Op::Reshape(cols, Shape::new(&[n * oh * ow, k])?))?;
        let y = g.add(Op::MatMul(rows, wt))?;
        let y = g.add(Op::Reshape(y, Shape::new(&[n, oh * ow, o])?))?;
        let y = g.add(Op::Permute(y, Perm::new(&[0, 2, 1])?))?;
        g.add(Op::Reshape(y, Shape::new(&[n, o, oh, ow])?))?
    };
    let Some(b) = bias else {
        return Ok(y);
    };
    let tb = g.ty(b);
    if tb.shape.dims() != [o] {
        return Err(IrError::Window {
            op: OP,
            shape: tb.shape,
            reason: format!("the bias must be [{o}] (one per output channel)"),
        });
    }
    if tb.dtype != dtype {
        return Err(IrError::DTypeMismatch {
            lhs: dtype,
            rhs: tb.dtype,
        });
    }
    let b = g.add(Op::Reshape(b, Shape::new(&[1, o, 1, 1])?))?;
    let b = g.add(Op::Broadcast(b, g.ty(y).shape))?;
    g.add(Op::Binary(tilejit_ir::BinaryOp::Add, y, b))
}

impl Tensor {
    /// 2-D convolution (cross-correlation, as torch's `conv2d`) of an NCHW
    /// image with OIHW weights: `stride` and zero `padding` on both
    /// spatial dims, no bias, `out[n, o, y, x] = sum over c, i, j of
    /// weight[o, c, i, j] * input[n, c, y*stride + i - padding, x*stride + j - padding]`.
    /// [`Tensor::conv2d_with`] with `stride` and `padding` both ways.
    #[track_caller]
    pub fn conv2d(&self, weight: &Tensor, stride: usize, padding: usize) -> Tensor {
        self.conv2d_at(
            weight,
            None,
            Conv2d {
                stride: (stride, stride),
                padding: (padding, padding),
                ..Conv2d::default()
            },
            Loc::caller(),
        )
    }

    /// 2-D convolution with torch's options (see [`Conv2d`]): image
    /// `[n, c, h, w]`, weights `[o, c/groups, kh, kw]`, an optional `[o]`
    /// bias added per output channel; `out[n, o, y, x]` is the bias plus
    /// the sum over the group's channels `c` and taps `i, j` of
    /// `weight[o, c, i, j] * input[n, g*c/groups + c, y*sh + i*dh - ph,
    /// x*sw + j*dw - pw]` (zero outside the image), `g` being `o`'s group.
    /// The output is `(h + 2*ph - dh*(kh-1) - 1) / sh + 1` high (so wide).
    /// For f32, f16 and bf16 it is one GEMM over the windows, read in
    /// place (an implicit im2col: on Sim the cube loads each panel
    /// straight from the image with `ldl1c`, one channel group per output
    /// tile). Other dtypes gather the windows (a
    /// constant index of the trace) and multiply them (one group only).
    /// The output size is size arithmetic that shape classes do not read
    /// back, so a dynamic function using it may be traced per size.
    #[track_caller]
    pub fn conv2d_with(&self, weight: &Tensor, bias: Option<&Tensor>, opts: Conv2d) -> Tensor {
        self.conv2d_at(weight, bias, opts, Loc::caller())
    }

    fn conv2d_at(&self, weight: &Tensor, bias: Option<&Tensor>, opts: Conv2d, at: Loc) -> Tensor {
        crate::trace::note_shape_arithmetic("conv2d", self, None);
        crate::trace::note_shape_arithmetic("conv2d", weight, None);
        let mut args = vec![self, weight];
        args.extend(bias);
        apply("conv2d", at, &args, |g, ids| {
            conv2d(g, ids[0], ids[1], ids.get(2).copied(), &opts)
        })
    }

    /// Max pooling over `kernel x kernel` windows of an NCHW image, moved by
    /// `stride` (no padding; windows that would leave the image are
    /// dropped, as torch's default). NaN propagates.
    #[track_caller]
    pub fn max_pool2d(&self, kernel: usize, stride: usize) -> Tensor {
        let opts = Pool2d {
            stride: (stride, stride),
            ..Pool2d::new((kernel, kernel))
        };
        pool(self, "max_pool2d", opts, ReduceOp::Max, Loc::caller())
    }

    /// Max pooling with torch's options (see [`Pool2d`]): the padding
    /// never wins (it is -inf), NaN propagates.
    #[track_caller]
    pub fn max_pool2d_with(&self, opts: Pool2d) -> Tensor {
        pool(self, "max_pool2d", opts, ReduceOp::Max, Loc::caller())
    }

    /// Average pooling over `kernel x kernel` windows of an NCHW image, moved
    /// by `stride` (no padding; float dtypes).
    #[track_caller]
    pub fn avg_pool2d(&self, kernel: usize, stride: usize) -> Tensor {
        let opts = Pool2d {
            stride: (stride, stride),
            ..Pool2d::new((kernel, kernel))
        };
        pool(self, "avg_pool2d", opts, ReduceOp::Sum, Loc::caller())
    }

    /// Average pooling with torch's options (see [`Pool2d`]; float
    /// dtypes).
    #[track_caller]
    pub fn avg_pool2d_with(&self, opts: Pool2d) -> Tensor {
        pool(self, "avg_pool2d", opts, ReduceOp::Sum, Loc::caller())
    }

    /// 1-D convolution (torch `conv1d`, ONNX `Conv` on `[n, c, l]`): image
    /// `[n, c, l]`, weights `[o, c/groups, k]`, an optional `[o]` bias;
    /// `stride`, `padding`, `dilation` and `groups` as [`Conv2d`]'s along
    /// the one axis. It is [`Tensor::conv2d_with`] on a 1-high image,
    /// so it runs wherever that does.
    #[track_caller]
    pub fn conv1d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        stride: usize,
        padding: usize,
        dilation: usize,
        groups: usize,
    ) -> Tensor {
        let at = Loc::caller();
        let (x, w) = (self.shape().to_vec(), weight.shape().to_vec());
        if x.len() != 3 || w.len() != 3 {
            return rank_error("conv1d", &[self, weight], at);
        }
        // One stride both ways (the 1-high image has one row of windows
        // either way) and the padding made explicit: a square window
        // geometry, which Sim's cube path takes.
        let opts = Conv2d {
            stride: (stride, stride),
            padding: (0, 0),
            dilation: (1, dilation),
            groups,
        };
        let mut img = self.reshape(&[x[0], x[1], 1, x[2]]);
        if padding > 0 {
            img = img.pad(&[(0, 0), (0, 0), (0, 0), (padding, padding)], 0.0);
        }
        let y = img.conv2d_at(&weight.reshape(&[w[0], w[1], 1, w[2]]), bias, opts, at);
        match y.shape() {
            &[n, o, 1, l] => y.reshape(&[n, o, l]),
            _ => y,
        }
    }

    /// 1-D max pooling over `[n, c, l]` (torch `max_pool1d`, ONNX
    /// `MaxPool` on one axis): [`Tensor::max_pool2d_with`] on a 1-high
    /// image, the padding (at most half the window) never chosen.
    #[track_caller]
    pub fn max_pool1d(&self, kernel: usize, stride: usize, padding: usize) -> Tensor {
        pool1d(
            self,
            "max_pool1d",
            kernel,
            stride,
            padding,
            true,
            ReduceOp::Max,
            Loc::caller(),
        )
    }

    /// 1-D average pooling over `[n, c, l]` (torch `avg_pool1d`, ONNX
    /// `AveragePool` on one axis), `count_include_pad` as [`Pool2d`]'s.
    #[track_caller]
    pub fn avg_pool1d(
        &self,
        kernel: usize,
        stride: usize,
        padding: usize,
        count_include_pad: bool,
    ) -> Tensor {
        let at = Loc::caller();
        pool1d(
            self,
            "avg_pool1d",
            kernel,
            stride,
            padding,
            count_include_pad,
            ReduceOp::Sum,
            at,
        )
    }
}
