//! Tensor methods that move elements rather than compute them: `slice`,
//! `split`, `cat`, `pad`, `tril`, `triu`, `gather` and `index_select`. A
//! slice is a window of its operand (`Op::Slice`) that fused consumers
//! read in place; a concat (`Op::Concat`) is one buffer its operands'
//! kernels write into, each at its offset; `pad` is a concat with constant
//! blocks; a gather (`Op::Gather`) reads at data-dependent addresses, each
//! index checked by the kernel.

use crate::apply::apply;
use crate::error::Loc;
use crate::scalar::scalar_lit;
use crate::tensor::Tensor;
use crate::trace;
use tilejit_ir::fallible::collect;
use tilejit_ir::{Array, Buffer, Graph, IrError, NodeId, Op, Shape, TensorType};

/// Python's rule for a slice bound: negative counts from the end, then the
/// bound is clamped to `0..=n`.
fn clamp_bound(i: isize, n: usize) -> usize {
    let n = n as isize;
    let i = if i < 0 { i.saturating_add(n) } else { i };
    i.clamp(0, n) as usize
}

/// `x[start..start + len]` along `axis`.
fn window(
    g: &mut Graph,
    x: NodeId,
    axis: usize,
    start: usize,
    len: usize,
) -> Result<NodeId, IrError> {
    let shape = g.ty(x).shape;
    if start == 0 && len == shape[axis] {
        return Ok(x);
    }
    let mut starts = vec![0; shape.rank()];
    starts[axis] = start;
    g.add(Op::Slice(
        x,
        Shape::new(&starts)?,
        shape.with_dim(axis, len),
    ))
}

/// `xs` joined along `axis` as a chain of concats (fusion flattens it into
/// one buffer).
fn join(g: &mut Graph, xs: &[NodeId], axis: usize) -> Result<NodeId, IrError> {
    let mut acc = xs[0];
    for &x in &xs[1..] {
        acc = g.add(Op::Concat(acc, x, axis as u8))?;
    }
    Ok(acc)
}

/// `x` with `pads[d]` elements of `value` (of `x`'s dtype) before and after
/// each dim `d`: per padded dim, a concat of constant blocks around it.
pub(crate) fn pad_with(
    g: &mut Graph,
    mut x: NodeId,
    pads: &[(usize, usize)],
    value: tilejit_ir::Lit,
) -> Result<NodeId, IrError> {
    let dtype = g.ty(x).dtype;
    for (d, &(before, after)) in pads.iter().enumerate() {
        if (before, after) == (0, 0) {
            continue;
        }
        let shape = g.ty(x).shape;
        let mut parts = Vec::with_capacity(3);
        for (n, is_x) in [(before, false), (0, true), (after, false)] {
            if is_x {
                parts.push(x);
            } else if n > 0 {
                let block = TensorType::new(dtype, shape.with_dim(d, n));
                parts.push(g.add(Op::Full { value, ty: block })?);
            }
        }
        x = join(g, &parts, d)?;
    }
    Ok(x)
}

/// The `[.., n, m]` mask of a triangle: `keep(col - row)` per element.
fn triangle(
    name: &'static str,
    t: &Tensor,
    k: isize,
    keep: fn(i128, i128) -> bool,
    location: Loc,
) -> Tensor {
    // Its mask is a constant the size of the last two dims.
    trace::note_shape_arithmetic(name, t, None);
    apply(name, location, &[t], |g, ids| {
        let ty = g.ty(ids[0]);
        let rank = ty.shape.rank();
        if rank < 2 {
            return Err(IrError::Window {
                op: name,
                shape: ty.shape,
                reason: "needs at least 2 dims (rows and columns are the last two)".into(),
            });
        }
        let (n, m) = (ty.shape[rank - 2], ty.shape[rank - 1]);
        let bits = collect((0..n * m).map(|e| keep((e % m) as i128 - (e / m) as i128, k as i128)))?;
        let mask = g.add_constant(Array::new(Shape::new(&[n, m])?, Buffer::Bool(bits))?);
        let mask = g.add(Op::Broadcast(mask, ty.shape))?;
        let zero = g.add(Op::Full {
            value: scalar_lit(0i64, ty.dtype)?,
            ty,
        })?;
        g.add(Op::Select(mask, ids[0], zero))
    })
}

impl Tensor {
    /// The elements `start..end` along `axis`, with Python's slicing rules:
    /// negative bounds count from the end, out-of-range bounds clamp, and
    /// `start >= end` gives an empty dim. Inside a jit function a slice
    /// read by a fused op is a view (an offset into its operand), not a
    /// copy.
    ///
    /// ```
    /// # use tilejit::Tensor;
    /// let x = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0, 4.0], &[5])?;
    /// assert_eq!(x.slice(0, 1, -1).to_vec::<f32>()?, vec![1.0, 2.0, 3.0]);
    /// assert_eq!(x.slice(0, -2, 100).to_vec::<f32>()?, vec![3.0, 4.0]);
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    #[track_caller]
    pub fn slice(&self, axis: isize, start: isize, end: isize) -> Tensor {
        if self.is_traced() {
            let dim = self
                .ty()
                .and_then(|t| t.shape.axis(axis).ok().map(|a| t.shape[a]));
            let inside = |b: isize| usize::try_from(b).is_ok_and(|b| dim.is_some_and(|n| b <= n));
            // A bound from the end or past it is clamped: `n - k`, `min(b, n)`.
            // (Bounds inside need no read: at sizes they do not fit, the
            // instantiated slice fails its type check and traces exactly.)
            if !(inside(start) && inside(end)) {
                trace::note_shape_arithmetic("slice", self, Some(axis));
            }
        }
        apply("slice", Loc::caller(), &[self], |g, ids| {
            let shape = g.ty(ids[0]).shape;
            let a = shape.axis(axis)?;
            let (s, e) = (clamp_bound(start, shape[a]), clamp_bound(end, shape[a]));
            window(g, ids[0], a, s, e.saturating_sub(s))
        })
    }

    /// Cuts `axis` into consecutive pieces of the given sizes, which must
    /// add up to the dim (torch's `split` with a list). Each piece is a
    /// [`Tensor::slice`]; on a bad `sizes` every piece is the error.
    #[track_caller]
    pub fn split(&self, sizes: &[usize], axis: isize) -> Vec<Tensor> {
        let location = Loc::caller();
        // The sizes must add up to the dim: a check on a size.
        trace::note_shape_arithmetic("split", self, Some(axis));
        let check = |g: &mut Graph, x: NodeId| -> Result<usize, IrError> {
            let shape = g.ty(x).shape;
            let a = shape.axis(axis)?;
            let total = sizes.iter().try_fold(0usize, |acc, &s| acc.checked_add(s));
            if total != Some(shape[a]) || (sizes.is_empty() && shape[a] != 0) {
                return Err(IrError::Window {
                    op: "split",
                    shape,
                    reason: format!("sizes {sizes:?} do not add up to dim {a} ({})", shape[a]),
                });
            }
            Ok(a)
        };
        if sizes.is_empty() {
            let e = apply("split", location, &[self], |g, ids| {
                check(g, ids[0]).map(|_| ids[0])
            });
            return if e.check().is_err() {
                vec![e]
            } else {
                Vec::new()
            };
        }
        let mut start = 0;
        sizes
            .iter()
            .map(|&len| {
                let at = start;
                start += len;
                apply("split", location, &[self], |g, ids| {
                    let a = check(g, ids[0])?;
                    window(g, ids[0], a, at, len)
                })
            })
            .collect()
    }

    /// The tensors joined along `axis` (numpy `concatenate`, torch `cat`):
    /// equal dtypes and ranks, equal dims except `axis`. The result is one
    /// buffer that each operand's kernel writes in place.
    ///
    /// ```
    /// # use tilejit::Tensor;
    /// let a = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2])?;
    /// let b = Tensor::from_vec(vec![5i32, 6], &[2, 1])?;
    /// assert_eq!(Tensor::cat(&[&a, &b], 1).to_vec::<i32>()?, vec![1, 2, 5, 3, 4, 6]);
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    #[track_caller]
    pub fn cat(tensors: &[&Tensor], axis: isize) -> Tensor {
        apply("cat", Loc::caller(), tensors, |g, ids| {
            let Some(&first) = ids.first() else {
                return Err(IrError::Arguments("cat of no tensors".into()));
            };
            let a = g.ty(first).shape.axis(axis)?;
            join(g, ids, a)
        })
    }

    /// Constant padding: `pads[d] = (before, after)` elements of `value`
    /// around dim `d`, one pair per dim (numpy `pad` with
    /// `mode="constant"`). `value` must be exact in the tensor's dtype.
    #[track_caller]
    pub fn pad(&self, pads: &[(usize, usize)], value: f64) -> Tensor {
        apply("pad", Loc::caller(), &[self], |g, ids| {
            let x = ids[0];
            let ty = g.ty(x);
            if pads.len() != ty.shape.rank() {
                return Err(IrError::Window {
                    op: "pad",
                    shape: ty.shape,
                    reason: format!(
                        "{} (before, after) pairs given for {} dims",
                        pads.len(),
                        ty.shape.rank()
                    ),
                });
            }
            pad_with(g, x, pads, scalar_lit(value, ty.dtype)?)
        })
    }

    /// numpy `take_along_axis` (torch `gather`): `index` (i32 or i64) has
    /// this tensor's rank and dims except along `axis`, and result element
    /// `[.., j, ..]` is `self[.., index[.., j, ..], ..]`. An index outside
    /// `0..self.shape[axis]` (negative ones too) is an error when the call
    /// runs, on every backend, never a read out of bounds.
    ///
    /// ```
    /// # use tilejit::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![10.0f32, 11.0, 12.0, 20.0, 21.0, 22.0], &[2, 3])?;
    /// let i = Tensor::from_vec(vec![2i64, 0, 1, 1], &[2, 2])?;
    /// assert_eq!(x.gather(1, &i).to_vec::<f32>()?, vec![12.0, 10.0, 21.0, 21.0]);
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    #[track_caller]
    pub fn gather(&self, axis: isize, index: &Tensor) -> Tensor {
        apply("gather", Loc::caller(), &[self, index], |g, ids| {
            let a = g.ty(ids[0]).shape.axis(axis)?;
            g.add(Op::Gather(ids[0], ids[1], a as u8))
        })
    }

    /// The slices at `index` (a 1-D i32 or i64 tensor) along `axis`: the
    /// result has this tensor's shape with `axis` as long as `index`
    /// (torch `index_select`, numpy `take`). An embedding lookup is
    /// `table.index_select(0, &tokens)`. An index outside the axis is an
    /// error when the call runs, never a read out of bounds.
    #[track_caller]
    pub fn index_select(&self, axis: isize, index: &Tensor) -> Tensor {
        apply("index_select", Loc::caller(), &[self, index], |g, ids| {
            let (x, i) = (ids[0], ids[1]);
            let shape = g.ty(x).shape;
            let a = shape.axis(axis)?;
            let ti = g.ty(i);
            if ti.shape.rank() != 1 {
                return Err(IrError::Window {
                    op: "index_select",
                    shape,
                    reason: format!("the index must be 1-D, not {}", ti.shape),
                });
            }
            // The index along `axis`, the same for every other position: a
            // broadcast view, so it is read in place, never copied.
            let mut dims = vec![1; shape.rank()];
            dims[a] = ti.shape[0];
            let i = g.add(Op::Reshape(i, Shape::new(&dims)?))?;
            let i = g.add(Op::Broadcast(i, shape.with_dim(a, ti.shape[0])))?;
            g.add(Op::Gather(x, i, a as u8))
        })
    }

    /// The lower triangle of the last two dims: element `[.., i, j]` is
    /// kept where `j - i <= k` and zero elsewhere (numpy `tril`).
    #[track_caller]
    pub fn tril(&self, k: isize) -> Tensor {
        triangle("tril", self, k, |d, k| d <= k, Loc::caller())
    }

    /// The upper triangle of the last two dims: element `[.., i, j]` is
    /// kept where `j - i >= k` and zero elsewhere (numpy `triu`).
    #[track_caller]
    pub fn triu(&self, k: isize) -> Tensor {
        triangle("triu", self, k, |d, k| d >= k, Loc::caller())
    }
}
