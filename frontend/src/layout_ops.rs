//! Tensor methods that move elements rather than compute them: `slice`,
//! `split`, `cat`, `pad`, `slice_assign`, `tril`, `triu`, `gather` and
//! `index_select`. A
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
use tilejit_ir::{
    Array, Axes, BinaryOp, Buffer, CmpOp, DType, Graph, IrError, Lit, NodeId, Op, ReduceOp, Shape,
    TensorType,
};

/// Python's rule for a slice bound: negative counts from the end, then the
/// bound is clamped to `0..=n`.
fn clamp_bound(i: isize, n: usize) -> usize {
    let n = n as isize;
    let i = if i < 0 { i.saturating_add(n) } else { i };
    i.clamp(0, n) as usize
}

/// The first index and the count of ONNX `Slice` along a dim of `n` with
/// a nonzero `step`: bounds count from the end when negative and clamp to
/// `[0, n]` (stepping up) or `[-1, n - 1]` (stepping down), so
/// `isize::MAX` and `isize::MIN` reach either end.
fn step_range(start: isize, end: isize, step: isize, n: usize) -> (usize, usize) {
    let (n, step) = (n as i128, step as i128);
    let from_end = |b: isize| {
        let b = b as i128;
        if b < 0 {
            b + n
        } else {
            b
        }
    };
    let (s, e) = if step > 0 {
        (from_end(start).clamp(0, n), from_end(end).clamp(0, n))
    } else {
        (
            from_end(start).clamp(-1, n - 1),
            from_end(end).clamp(-1, n - 1),
        )
    };
    let span = if step > 0 { e - s } else { s - e };
    let count = if span > 0 {
        (span + step.abs() - 1) / step.abs()
    } else {
        0
    };
    (s.max(0) as usize, count as usize)
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

/// Where [`Tensor::slice_assign`] writes: a `usize` known when tracing,
/// or a rank-0 integer tensor read when the call runs.
#[derive(Clone, Copy, Debug)]
pub enum SliceStart<'a> {
    /// A start known when tracing: a wrong one is an error at the line.
    At(usize),
    /// A rank-0 (or one-element) integer tensor: one graph serves every
    /// value, and a value that puts the source out of range is an error
    /// when the call runs.
    Tensor(&'a Tensor),
}

impl From<usize> for SliceStart<'_> {
    fn from(v: usize) -> Self {
        SliceStart::At(v)
    }
}

impl<'a> From<&'a Tensor> for SliceStart<'a> {
    fn from(t: &'a Tensor) -> Self {
        SliceStart::Tensor(t)
    }
}

/// The axis of `slice_assign(axis, _, src)` on `x`, after checking that
/// `src` fits `x` but for its length along it (at most `x`'s).
fn assign_axis(g: &Graph, x: NodeId, src: NodeId, axis: isize) -> Result<usize, IrError> {
    let (tx, ts) = (g.ty(x), g.ty(src));
    let a = tx.shape.axis(axis)?;
    let bad = |reason: String| IrError::Window {
        op: "slice_assign",
        shape: tx.shape,
        reason,
    };
    if tx.dtype != ts.dtype {
        return Err(IrError::DTypeMismatch {
            lhs: tx.dtype,
            rhs: ts.dtype,
        });
    }
    let fits = ts.shape.rank() == tx.shape.rank()
        && (0..tx.shape.rank()).all(|d| d == a || ts.shape[d] == tx.shape[d])
        && ts.shape[a] <= tx.shape[a];
    if !fits {
        return Err(bad(format!(
            "the source {} must have its dims but along dim {a}, and at most {} there",
            ts.shape, tx.shape[a]
        )));
    }
    Ok(a)
}

/// `x` with `src` at the run-time position `start` (an integer scalar
/// node) along `a`, as one elementwise pass over `x`: position `i` takes
/// `src[i - start]` inside the window, `x[i]` outside. A start that puts
/// the window out of `x` makes every index out of range for `src`, so the
/// gather fails the call (negative: `start`; too far: `start + len`).
fn assign_at(
    g: &mut Graph,
    x: NodeId,
    src: NodeId,
    start: NodeId,
    a: usize,
) -> Result<NodeId, IrError> {
    let shape = g.ty(x).shape;
    let (n, len) = (shape[a], g.ty(src).shape[a]);
    let st = g.ty(start);
    if st.shape.numel() != 1 || !st.dtype.is_int() {
        return Err(IrError::Window {
            op: "slice_assign",
            shape: st.shape,
            reason: format!("the start must be one integer, not {}", st),
        });
    }
    // The index and the mask vary along `a` only: computed at
    // `[1, .., n, .., 1]` and read through broadcast views, so the one
    // pass over `x` reads `n` of each, not a tensor of them.
    let ones = Shape::new(&vec![1; shape.rank()])?;
    let mut dims = vec![1; shape.rank()];
    dims[a] = n;
    let line = Shape::new(&dims)?;
    let i64s = TensorType::new(DType::I64, line);
    let mut s = start;
    if st.dtype != DType::I64 {
        s = g.add(Op::Cast(s, DType::I64))?;
    }
    let s = g.add(Op::Reshape(s, ones))?;
    let s = g.add(Op::Broadcast(s, line))?;
    let iota = collect((0..n).map(|i| i as i64))?;
    let iota = g.add_constant(Array::new(line, Buffer::I64(iota))?);
    let full = |g: &mut Graph, value: Lit, ty: TensorType| g.add(Op::Full { value, ty });
    let bools = TensorType::new(DType::Bool, line);
    let zero = full(g, Lit::Int(0), i64s)?;
    let lenf = full(g, Lit::Int(len as i64), i64s)?;
    let last = full(g, Lit::Int((n - len) as i64), i64s)?;
    let yes = full(g, Lit::Bool(true), bools)?;
    let no = full(g, Lit::Bool(false), bools)?;
    // i - start, and whether it is in 0..len.
    let rel = g.add(Op::Binary(BinaryOp::Sub, iota, s))?;
    let ge = g.add(Op::Compare(CmpOp::Ge, rel, zero))?;
    let lt = g.add(Op::Compare(CmpOp::Lt, rel, lenf))?;
    let inside = g.add(Op::Select(ge, lt, no))?;
    // start < 0 or start > n - len: every position gathers out of range.
    let neg = g.add(Op::Compare(CmpOp::Lt, s, zero))?;
    let far = g.add(Op::Compare(CmpOp::Gt, s, last))?;
    let bad = g.add(Op::Select(neg, yes, far))?;
    let end = g.add(Op::Binary(BinaryOp::Add, s, lenf))?;
    let wrong = g.add(Op::Select(neg, s, end))?;
    let idx = g.add(Op::Select(inside, rel, zero))?;
    let idx = g.add(Op::Select(bad, wrong, idx))?;
    let take = g.add(Op::Select(bad, yes, inside))?;
    if len == 1 {
        return assign_row(g, (x, src), (idx, take), a);
    }
    let idx = g.add(Op::Broadcast(idx, shape))?;
    let take = g.add(Op::Broadcast(take, shape))?;
    let from_src = g.add(Op::Gather(src, idx, a as u8))?;
    g.add(Op::Select(take, from_src, x))
}

/// [`assign_at`] of a source one long along `a` (a decode step's new KV
/// row), given the index line `idx` and the take line `take`: inside the
/// window every element takes `src`'s one row broadcast along `a`, so the
/// pass over `x` selects between two loads, with no gather. The range
/// check gathers `idx` from a line of ones one long (a bad start fails it
/// as above) and, reduced to one value, gates the take line, which is f32
/// and computed once (fusion keeps a line broadcast to a much larger
/// domain in a buffer): the pass compares and selects floats.
fn assign_row(
    g: &mut Graph,
    (x, src): (NodeId, NodeId),
    (idx, take): (NodeId, NodeId),
    a: usize,
) -> Result<NodeId, IrError> {
    let shape = g.ty(x).shape;
    let line = g.ty(idx).shape;
    let one = line.with_dim(a, 1);
    let ones = g.add_constant(Array::new(one, Buffer::F32(vec![1.0]))?);
    let hit = g.add(Op::Gather(ones, idx, a as u8))?;
    let ok = g.add(Op::Reduce(ReduceOp::Min, hit, Axes::from_axes(&[a])))?;
    let ok = g.add(Op::Broadcast(ok, line))?;
    let zero = g.add(Op::Full {
        value: Lit::Float(0.0),
        ty: TensorType::new(DType::F32, line),
    })?;
    let take = g.add(Op::Select(take, ok, zero))?;
    let take = g.add(Op::Broadcast(take, shape))?;
    let half = g.add(Op::Full {
        value: Lit::Float(0.5),
        ty: TensorType::new(DType::F32, shape),
    })?;
    let take = g.add(Op::Compare(CmpOp::Gt, take, half))?;
    let row = g.add(Op::Broadcast(src, shape))?;
    g.add(Op::Select(take, row, x))
}

/// `first + k * step` for `k` in `0..count` (i64 `[count]`): one constant
/// up to [`crate::ops::index_line`]'s limit, past it that line scaled and
/// moved in the graph, so a long stepped slice (a declared dim of 2^30
/// in an ONNX file) holds about `sqrt(count)` constant values, not 8 GB.
fn stepped_line(g: &mut Graph, first: usize, step: isize, count: usize) -> Result<NodeId, IrError> {
    if count <= crate::ops::INDEX_LINE_CONSTANT {
        let index: Vec<i64> = (0..count as i64)
            .map(|k| first as i64 + k * step as i64)
            .collect();
        return Ok(g.add_constant(Array::from_vec(index, &[count])?));
    }
    let line = crate::ops::index_line(g, count, DType::I64)?;
    let ty = g.ty(line);
    let lit = |g: &mut Graph, v: i64| {
        g.add(Op::Full {
            value: tilejit_ir::Lit::Int(v),
            ty,
        })
    };
    let (s, f) = (lit(g, step as i64)?, lit(g, first as i64)?);
    let scaled = g.add(Op::Binary(tilejit_ir::BinaryOp::Mul, line, s))?;
    g.add(Op::Binary(tilejit_ir::BinaryOp::Add, scaled, f))
}

impl Tensor {
    /// This tensor with `src` written at `start..start + len` along
    /// `axis` (`len` is `src`'s length there; its other dims are this
    /// tensor's): torch's `x[.., start:start + len, ..] = src` as a value,
    /// ggml's `set_rows`. Nothing is written in place: the result is a new
    /// tensor, made in one pass over this one.
    ///
    /// `start` is a `usize`, or a rank-0 integer tensor read when the call
    /// runs, so one graph serves every position (a fixed-capacity KV cache
    /// updated at the decode position). A `usize` start past the end is an
    /// error at this line; a tensor start that puts `src` out of range
    /// (negative, or past `dim - len`) fails the call when it runs
    /// (`IndexOutOfRange`, naming `slice_assign`), never writes out of
    /// bounds. Both read `axis`'s size (a guard under `#[jit(dynamic)]`).
    ///
    /// ```
    /// # use tilejit::Tensor;
    /// let cache = Tensor::from_vec(vec![0.0f32; 6], &[3, 2])?;
    /// let row = Tensor::from_vec(vec![7.0f32, 8.0], &[1, 2])?;
    /// let at = Tensor::from_vec(vec![2i64], &[])?;
    /// assert_eq!(cache.slice_assign(0, 1, &row).to_vec::<f32>()?, [0., 0., 7., 8., 0., 0.]);
    /// assert_eq!(cache.slice_assign(0, &at, &row).to_vec::<f32>()?, [0., 0., 0., 0., 7., 8.]);
    /// assert!(cache.slice_assign(0, 3, &row).check().is_err());
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    #[track_caller]
    pub fn slice_assign<'a>(
        &self,
        axis: isize,
        start: impl Into<SliceStart<'a>>,
        src: &Tensor,
    ) -> Tensor {
        let location = Loc::caller();
        // The window must fit the axis: a check on its size.
        trace::note_shape_arithmetic("slice_assign", self, Some(axis));
        match start.into() {
            SliceStart::At(start) => apply("slice_assign", location, &[self, src], |g, ids| {
                let (x, s) = (ids[0], ids[1]);
                let a = assign_axis(g, x, s, axis)?;
                let (n, len) = (g.ty(x).shape[a], g.ty(s).shape[a]);
                if start.checked_add(len).is_none_or(|end| end > n) {
                    return Err(IrError::Window {
                        op: "slice_assign",
                        shape: g.ty(x).shape,
                        reason: format!(
                            "a source {len} long at {start} does not fit dim {a} ({n} long)"
                        ),
                    });
                }
                if len == 0 {
                    return Ok(x);
                }
                // Before, the source, after: one buffer each part writes.
                let before = window(g, x, a, 0, start)?;
                let after = window(g, x, a, start + len, n - start - len)?;
                let parts: Vec<NodeId> = [(before, start), (s, len), (after, n - start - len)]
                    .iter()
                    .filter(|&&(_, l)| l > 0)
                    .map(|&(p, _)| p)
                    .collect();
                join(g, &parts, a)
            }),
            SliceStart::Tensor(at) => {
                apply("slice_assign", location, &[self, src, at], |g, ids| {
                    let (x, s) = (ids[0], ids[1]);
                    let a = assign_axis(g, x, s, axis)?;
                    if g.ty(s).shape[a] == 0 {
                        return Ok(x);
                    }
                    assign_at(g, x, s, ids[2], a)
                })
            }
        }
    }

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

    /// Every `step`-th element of `start..end` along `axis`, ONNX `Slice`
    /// (numpy `x[start:end:step]`): a negative step walks down from
    /// `start`; negative bounds count from the end; bounds clamp to the dim
    /// (to `[0, n]` stepping up, `[-1, n - 1]` stepping down), so
    /// `isize::MAX`/`isize::MIN` as `end` run to either end. A step of 1 is
    /// [`Tensor::slice`] (a view); other steps read through a constant
    /// index (a gather). A step of 0 is an error.
    ///
    /// ```
    /// # use tilejit::Tensor;
    /// let x = Tensor::from_vec(vec![0i32, 1, 2, 3, 4, 5, 6], &[7])?;
    /// assert_eq!(x.slice_step(0, 1, 6, 2).to_vec::<i32>()?, vec![1, 3, 5]);
    /// assert_eq!(x.slice_step(0, -1, isize::MIN, -3).to_vec::<i32>()?, vec![6, 3, 0]);
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    #[track_caller]
    pub fn slice_step(&self, axis: isize, start: isize, end: isize, step: isize) -> Tensor {
        if self.is_traced() {
            // The count and the first index depend on the dim.
            trace::note_shape_arithmetic("slice_step", self, Some(axis));
        }
        apply("slice_step", Loc::caller(), &[self], |g, ids| {
            let x = ids[0];
            let shape = g.ty(x).shape;
            let a = shape.axis(axis)?;
            if step == 0 {
                return Err(IrError::Window {
                    op: "slice_step",
                    shape,
                    reason: format!("step 0 along dim {a}"),
                });
            }
            let (first, count) = step_range(start, end, step, shape[a]);
            if step == 1 || count <= 1 {
                return window(g, x, a, first, count);
            }
            let index = stepped_line(g, first, step, count)?;
            let mut dims = vec![1; shape.rank()];
            dims[a] = count;
            let i = g.add(Op::Reshape(index, Shape::new(&dims)?))?;
            let i = g.add(Op::Broadcast(i, shape.with_dim(a, count)))?;
            g.add(Op::Gather(x, i, a as u8))
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
