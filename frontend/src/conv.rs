//! Convolution and pooling over NCHW images. A float convolution is one
//! `Op::Conv`: a GEMM whose left operand is the image read as its windows
//! (an implicit im2col; on Sim the cube loads each panel straight from the
//! image with `ldl1c`). Pooling, and convolutions of other dtypes, gather
//! each window's elements (with the window offsets a constant index
//! computed at trace time) and then reduce or multiply them.

use crate::apply::apply;
use crate::error::Loc;
use crate::tensor::Tensor;
use tilejit_ir::fallible::with_capacity;
use tilejit_ir::{
    Array, Axes, Buffer, DType, Graph, IrError, NodeId, Op, Perm, ReduceOp, Shape, Window,
};

/// A window size, stride or padding as the IR holds it.
fn small(v: usize) -> Result<u32, IrError> {
    u32::try_from(v).map_err(|_| IrError::Window {
        op: "conv2d",
        shape: Shape::SCALAR,
        reason: format!("{v} is too large for a window size, stride or padding"),
    })
}

/// The output size of a window of `k` moved by `stride` over `n` elements.
fn out_len(n: usize, k: usize, stride: usize) -> usize {
    (n - k) / stride + 1
}

/// `x` (`[n, c, h, w]`, already padded) as `[n, c, oh * ow, kh * kw]`: each
/// output position's window, gathered along the flattened image.
fn windows(
    g: &mut Graph,
    op: &'static str,
    x: NodeId,
    (kh, kw): (usize, usize),
    stride: usize,
) -> Result<(NodeId, usize, usize), IrError> {
    let s = g.ty(x).shape;
    let (n, c, h, w) = (s[0], s[1], s[2], s[3]);
    if stride == 0 || kh == 0 || kw == 0 || kh > h || kw > w {
        return Err(IrError::Window {
            op,
            shape: s,
            reason: format!(
                "a {kh}x{kw} window with stride {stride} does not fit a {h}x{w} image \
                 (the window must be non-empty and fit, the stride at least 1)"
            ),
        });
    }
    let (oh, ow) = (out_len(h, kh, stride), out_len(w, kw, stride));
    let len = oh * ow * kh * kw;
    let mut idx = with_capacity(len)?;
    for y in 0..oh {
        for xx in 0..ow {
            for i in 0..kh {
                for j in 0..kw {
                    idx.push(((y * stride + i) * w + xx * stride + j) as i64);
                }
            }
        }
    }
    let idx = g.add_constant(Array::new(Shape::new(&[1, 1, len])?, Buffer::I64(idx))?);
    let idx = g.add(Op::Broadcast(idx, Shape::new(&[n, c, len])?))?;
    let flat = g.add(Op::Reshape(x, Shape::new(&[n, c, h * w])?))?;
    let cols = g.add(Op::Gather(flat, idx, 2))?;
    let cols = g.add(Op::Reshape(cols, Shape::new(&[n, c, oh * ow, kh * kw])?))?;
    Ok((cols, oh, ow))
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

/// A pooling: `reduce` over each `kernel x kernel` window, then `scale`.
fn pool(
    t: &Tensor,
    op: &'static str,
    kernel: usize,
    stride: usize,
    reduce: ReduceOp,
    location: Loc,
) -> Tensor {
    // Its output size is `(h - kernel) / stride + 1`.
    crate::trace::note_shape_arithmetic(op, t, None);
    apply(op, location, &[t], |g, ids| {
        image(op, g, ids[0])?;
        let dtype = g.ty(ids[0]).dtype;
        if op == "avg_pool2d" && !dtype.is_float() {
            return Err(IrError::DTypeUnsupported {
                op,
                dtype,
                hint: "average pooling is for floats; cast first",
            });
        }
        let s = g.ty(ids[0]).shape;
        let (cols, oh, ow) = windows(g, op, ids[0], (kernel, kernel), stride)?;
        let r = g.add(Op::Reduce(reduce, cols, Axes::from_axes(&[3])))?;
        let mut out = g.add(Op::Reshape(r, Shape::new(&[s[0], s[1], oh, ow])?))?;
        if op == "avg_pool2d" {
            let ty = g.ty(out);
            let k = g.add(Op::Full {
                value: crate::scalar::scalar_lit((kernel * kernel) as f64, ty.dtype)?,
                ty,
            })?;
            out = g.add(Op::Binary(tilejit_ir::BinaryOp::Div, out, k))?;
        }
        Ok(out)
    })
}

impl Tensor {
    /// 2-D convolution (cross-correlation, as torch's `conv2d`) of an NCHW
    /// image with OIHW weights: `stride` and zero `padding` on both
    /// spatial dims, no bias, `out[n, o, y, x] = sum over c, i, j of
    /// weight[o, c, i, j] * input[n, c, y*stride + i - padding, x*stride + j - padding]`.
    /// For f32, f16 and bf16 it is one GEMM over the windows, read in place
    /// (an implicit im2col: on Sim the cube unit loads each panel straight
    /// from the image with `ldl1c`). Other dtypes gather the windows (a
    /// constant index of the trace) and multiply them. Its output size,
    /// `(h + 2 * padding - kh) / stride + 1`, is size arithmetic that
    /// shape classes do not read back, so a dynamic function using it may
    /// be traced per size.
    #[track_caller]
    pub fn conv2d(&self, weight: &Tensor, stride: usize, padding: usize) -> Tensor {
        crate::trace::note_shape_arithmetic("conv2d", self, None);
        crate::trace::note_shape_arithmetic("conv2d", weight, None);
        apply("conv2d", Loc::caller(), &[self, weight], |g, ids| {
            let (x, w) = (ids[0], ids[1]);
            image("conv2d", g, x)?;
            let (sx, sw) = (g.ty(x).shape, g.ty(w).shape);
            if sw.rank() != 4 || sw[1] != sx[1] {
                return Err(IrError::Window {
                    op: "conv2d",
                    shape: sx,
                    reason: format!(
                        "weights {sw} must be [out, {}, kh, kw] (OIHW, in-channels as the image's)",
                        sx[1]
                    ),
                });
            }
            let (n, c, o, kh, kw) = (sx[0], sx[1], sw[0], sw[2], sw[3]);
            let k = c.checked_mul(kh).and_then(|x| x.checked_mul(kw));
            let k = k.ok_or_else(|| IrError::Window {
                op: "conv2d",
                shape: sw,
                reason: "the weights' window is too large".into(),
            })?;
            let wm = g.add(Op::Reshape(w, Shape::new(&[o, k])?))?;
            let wt = g.add(Op::Permute(wm, Perm::new(&[1, 0])?))?;
            if matches!(g.ty(x).dtype, DType::F32 | DType::F16 | DType::BF16) {
                // One GEMM over the windows, read in place (on Sim, the
                // cube's `ldl1c`): no copy of the windows.
                let win = Window {
                    kh: small(kh)?,
                    kw: small(kw)?,
                    stride: small(stride)?,
                    pad: small(padding)?,
                };
                let (oh, ow) = win.out(sx[2], sx[3]).ok_or_else(|| IrError::Window {
                    op: "conv2d",
                    shape: sx,
                    reason: format!(
                        "a {kh}x{kw} window with stride {stride} and padding {padding} does not \
                         fit a {}x{} image (the window must be non-empty and fit, the stride \
                         at least 1)",
                        sx[2], sx[3]
                    ),
                })?;
                let y = g.add(Op::Conv(x, wt, win))?;
                let y = g.add(Op::Permute(y, Perm::new(&[0, 2, 1])?))?;
                return g.add(Op::Reshape(y, Shape::new(&[n, o, oh, ow])?));
            }
            // Other dtypes (the cube's are floats): the windows gathered,
            // then a matmul.
            let zero = crate::scalar::scalar_lit(0i64, g.ty(x).dtype)?;
            let p = (padding, padding);
            let xp = crate::layout_ops::pad_with(g, x, &[(0, 0), (0, 0), p, p], zero)?;
            let (cols, oh, ow) = windows(g, "conv2d", xp, (kh, kw), stride)?;
            // [n, c, p, k] -> [n, p, c, k] -> [n*p, c*k]: the rows of one
            // GEMM with the weights as [c*k, o] (no copy per image).
            let cols = g.add(Op::Permute(cols, Perm::new(&[0, 2, 1, 3])?))?;
            let rows = g.add(Op::Reshape(cols, Shape::new(&[n * oh * ow, k])?))?;
            let y = g.add(Op::MatMul(rows, wt))?;
            let y = g.add(Op::Reshape(y, Shape::new(&[n, oh * ow, o])?))?;
            let y = g.add(Op::Permute(y, Perm::new(&[0, 2, 1])?))?;
            g.add(Op::Reshape(y, Shape::new(&[n, o, oh, ow])?))
        })
    }

    /// Max pooling over `kernel x kernel` windows of an NCHW image, moved by
    /// `stride` (no padding; windows that would leave the image are
    /// dropped, as torch's default). NaN propagates.
    #[track_caller]
    pub fn max_pool2d(&self, kernel: usize, stride: usize) -> Tensor {
        pool(
            self,
            "max_pool2d",
            kernel,
            stride,
            ReduceOp::Max,
            Loc::caller(),
        )
    }

    /// Average pooling over `kernel x kernel` windows of an NCHW image, moved
    /// by `stride` (no padding; float dtypes).
    #[track_caller]
    pub fn avg_pool2d(&self, kernel: usize, stride: usize) -> Tensor {
        pool(
            self,
            "avg_pool2d",
            kernel,
            stride,
            ReduceOp::Sum,
            Loc::caller(),
        )
    }
}
