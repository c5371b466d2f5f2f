//! Type inference: the result type of an op from its operands' types. This is
//! the single definition of which operands each op accepts; the graph
//! builder, the parser and the verifier all go through it.

use crate::dtype::DType;
use crate::error::IrError;
use crate::graph::{Axes, Graph, Op, ReduceOp, UnaryOp};
use crate::shape::{Shape, TensorType};

/// The result type of `op` in `g`, or why the op is ill-typed.
/// Operand ids must already exist in `g`.
pub fn infer(g: &Graph, op: &Op) -> Result<TensorType, IrError> {
    for operand in op.operands() {
        if operand.index() >= g.len() {
            return Err(IrError::Verify(format!(
                "operand {operand} does not exist yet"
            )));
        }
    }
    let ty = |id| g.ty(id);
    let out = match *op {
        Op::Input { ty, .. } => checked(ty)?,
        Op::Param { dtype, .. } => TensorType::scalar(dtype),
        Op::Full { value, ty } => full_type(value, ty)?,
        Op::Constant { index, ty } => constant_type(g, index, ty)?,
        Op::Unary(u, x) => {
            let t = ty(x);
            unary_dtype_ok(u, t.dtype)?;
            t
        }
        Op::Binary(b, x, y) => {
            let (tx, ty_) = (ty(x), ty(y));
            same_type("binary operands", tx, ty_)?;
            if !b.accepts(tx.dtype) {
                return Err(IrError::DTypeUnsupported {
                    op: b.name(),
                    dtype: tx.dtype,
                    hint: if tx.dtype == DType::Bool {
                        "cast to a numeric dtype first"
                    } else {
                        "cast to an integer dtype first"
                    },
                });
            }
            tx
        }
        Op::Compare(_, x, y) => {
            let (tx, ty_) = (ty(x), ty(y));
            same_type("compare operands", tx, ty_)?;
            TensorType::new(DType::Bool, tx.shape)
        }
        Op::Select(c, a, b) => select_type(ty(c), ty(a), ty(b))?,
        Op::Reduce(r, x, axes) => reduce_type(r, ty(x), axes)?,
        Op::MatMul(x, y) => matmul_type(ty(x), ty(y))?,
        Op::Conv(x, w, win) => conv_type(ty(x), ty(w), win)?,
        Op::Pool(r, x, win) => pool_type(r, ty(x), win)?,
        Op::Reshape(x, shape) => {
            let t = ty(x);
            if shape.numel() != t.shape.numel() {
                return Err(IrError::Reshape {
                    from: t.shape,
                    to: shape,
                });
            }
            checked(TensorType::new(t.dtype, shape))?
        }
        Op::Permute(x, perm) => {
            let t = ty(x);
            if perm.len() != t.shape.rank() {
                return Err(IrError::Permutation {
                    perm: perm.as_vec(),
                    rank: t.shape.rank(),
                });
            }
            let dims: Vec<usize> = perm.as_vec().iter().map(|&p| t.shape[p]).collect();
            TensorType::new(t.dtype, Shape::new(&dims)?)
        }
        Op::Broadcast(x, shape) => {
            let t = ty(x);
            if !t.shape.broadcasts_to(&shape) {
                return Err(IrError::BroadcastTo {
                    from: t.shape,
                    to: shape,
                });
            }
            checked(TensorType::new(t.dtype, shape))?
        }
        Op::Cast(x, dtype) => TensorType::new(dtype, ty(x).shape),
        Op::Bitcast(x, dtype) => {
            let from = ty(x).dtype;
            if !crate::interp::bitcast_pair(from, dtype) {
                return Err(IrError::Arguments(format!(
                    "bitcast {from} -> {dtype}: only between f32 and i32/u32, or f64 and i64/u64"
                )));
            }
            TensorType::new(dtype, ty(x).shape)
        }
        Op::Slice(x, start, shape) => slice_type(ty(x), start, shape)?,
        Op::Concat(x, y, axis) => concat_type(ty(x), ty(y), axis)?,
        Op::Gather(x, index, axis) => gather_type(ty(x), ty(index), axis)?,
    };
    Ok(out)
}

fn full_type(value: crate::dtype::Lit, ty: TensorType) -> Result<TensorType, IrError> {
    if !value.fits(ty.dtype) {
        return Err(IrError::Verify(format!(
            "literal {value} does not fit {}",
            ty.dtype
        )));
    }
    checked(ty)
}

fn constant_type(g: &Graph, index: u32, ty: TensorType) -> Result<TensorType, IrError> {
    match g.constant(index) {
        Some(c) if c.ty() == ty => Ok(ty),
        Some(c) => Err(IrError::Verify(format!(
            "constant {index} is {}, node says {ty}",
            c.ty()
        ))),
        None => Err(IrError::Verify(format!("constant {index} does not exist"))),
    }
}

fn select_type(tc: TensorType, ta: TensorType, tb: TensorType) -> Result<TensorType, IrError> {
    if tc.dtype != DType::Bool {
        return Err(IrError::DTypeUnsupported {
            op: "where",
            dtype: tc.dtype,
            hint: "the condition must be a bool tensor (from lt/gt/le/ge/eq or .cast(DType::Bool))",
        });
    }
    same_type("where branches", ta, tb)?;
    if tc.shape != ta.shape {
        return Err(IrError::ShapeMismatch {
            what: "where condition and branches",
            lhs: tc.shape,
            rhs: ta.shape,
        });
    }
    Ok(ta)
}

fn reduce_type(r: ReduceOp, t: TensorType, axes: Axes) -> Result<TensorType, IrError> {
    let mut shape = t.shape;
    for a in axes.iter() {
        if a >= t.shape.rank() {
            return Err(IrError::Axis {
                axis: a as isize,
                rank: t.shape.rank(),
            });
        }
        if t.shape[a] == 0 && !r.def().empty_ok {
            return Err(IrError::EmptyReduction {
                op: r.name(),
                axis: a,
                shape: t.shape,
            });
        }
        shape = shape.with_dim(a, 1);
    }
    if t.dtype == DType::Bool {
        return Err(IrError::DTypeUnsupported {
            op: r.name(),
            dtype: DType::Bool,
            hint: "cast to i64 or f32 first",
        });
    }
    Ok(TensorType::new(t.dtype, shape))
}

fn slice_type(t: TensorType, start: Shape, shape: Shape) -> Result<TensorType, IrError> {
    let bad = |reason: String| IrError::Window {
        op: "slice",
        shape: t.shape,
        reason,
    };
    if start.rank() != t.shape.rank() || shape.rank() != t.shape.rank() {
        return Err(bad(format!(
            "the window {start} + {shape} must have the operand's rank {}",
            t.shape.rank()
        )));
    }
    for d in 0..t.shape.rank() {
        if start[d]
            .checked_add(shape[d])
            .is_none_or(|end| end > t.shape[d])
        {
            return Err(bad(format!(
                "dim {d}: elements {}..{} are outside 0..{}",
                start[d],
                start[d].saturating_add(shape[d]),
                t.shape[d]
            )));
        }
    }
    Ok(TensorType::new(t.dtype, shape))
}

fn concat_type(tx: TensorType, ty_: TensorType, axis: u8) -> Result<TensorType, IrError> {
    same_type_dtype(tx, ty_)?;
    let axis = axis as usize;
    let bad = |reason: String| IrError::Window {
        op: "cat",
        shape: tx.shape,
        reason,
    };
    if axis >= tx.shape.rank() {
        return Err(IrError::Axis {
            axis: axis as isize,
            rank: tx.shape.rank(),
        });
    }
    if tx.shape.rank() != ty_.shape.rank() {
        return Err(bad(format!(
            "{} has rank {}, not {}",
            ty_.shape,
            ty_.shape.rank(),
            tx.shape.rank()
        )));
    }
    if let Some(d) = (0..tx.shape.rank()).find(|&d| d != axis && tx.shape[d] != ty_.shape[d]) {
        return Err(bad(format!(
            "{} differs in dim {d} ({} vs {}); only the cat axis {axis} may differ",
            ty_.shape, ty_.shape[d], tx.shape[d]
        )));
    }
    let n = tx.shape[axis]
        .checked_add(ty_.shape[axis])
        .ok_or_else(|| bad("the joined dim overflows".into()))?;
    checked(TensorType::new(tx.dtype, tx.shape.with_dim(axis, n)))
}

fn gather_type(tx: TensorType, ti: TensorType, axis: u8) -> Result<TensorType, IrError> {
    let axis = axis as usize;
    if !matches!(ti.dtype, DType::I32 | DType::I64) {
        return Err(IrError::DTypeUnsupported {
            op: "gather",
            dtype: ti.dtype,
            hint: "indices must be i32 or i64; cast them first",
        });
    }
    if axis >= tx.shape.rank() {
        return Err(IrError::Axis {
            axis: axis as isize,
            rank: tx.shape.rank(),
        });
    }
    let fits = ti.shape.rank() == tx.shape.rank()
        && (0..tx.shape.rank()).all(|d| d == axis || ti.shape[d] == tx.shape[d]);
    if !fits {
        return Err(IrError::Window {
            op: "gather",
            shape: tx.shape,
            reason: format!(
                "the index {} must have the operand's rank and dims except axis {axis}",
                ti.shape
            ),
        });
    }
    if tx.shape[axis] == 0 && ti.shape.numel() > 0 {
        return Err(IrError::Window {
            op: "gather",
            shape: tx.shape,
            reason: format!("axis {axis} is empty, so no index is in range"),
        });
    }
    Ok(TensorType::new(tx.dtype, ti.shape))
}

fn checked(t: TensorType) -> Result<TensorType, IrError> {
    t.shape.byte_size(t.dtype)?;
    Ok(t)
}

fn same_type_dtype(a: TensorType, b: TensorType) -> Result<(), IrError> {
    if a.dtype != b.dtype {
        return Err(IrError::DTypeMismatch {
            lhs: a.dtype,
            rhs: b.dtype,
        });
    }
    Ok(())
}

fn same_type(what: &'static str, a: TensorType, b: TensorType) -> Result<(), IrError> {
    if a.dtype != b.dtype {
        return Err(IrError::DTypeMismatch {
            lhs: a.dtype,
            rhs: b.dtype,
        });
    }
    if a.shape != b.shape {
        return Err(IrError::ShapeMismatch {
            what,
            lhs: a.shape,
            rhs: b.shape,
        });
    }
    Ok(())
}

fn unary_dtype_ok(u: UnaryOp, d: DType) -> Result<(), IrError> {
    if u.accepts(d) {
        return Ok(());
    }
    Err(IrError::DTypeUnsupported {
        op: u.name(),
        dtype: d,
        hint: if d == DType::Bool {
            "cast to a numeric dtype first"
        } else {
            "cast to a float dtype first"
        },
    })
}

/// `[n, c, h, w]` by `[c*kh*kw, o]` gives `[n, oh, ow, o]` (see [`Op::Conv`]).
fn conv_type(
    x: TensorType,
    w: TensorType,
    win: crate::graph::Window,
) -> Result<TensorType, IrError> {
    if x.dtype != w.dtype {
        return Err(IrError::DTypeMismatch {
            lhs: x.dtype,
            rhs: w.dtype,
        });
    }
    if !matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(IrError::DTypeUnsupported {
            op: "conv",
            dtype: x.dtype,
            hint: "the implicit-GEMM convolution takes f32, f16 or bf16",
        });
    }
    let bad = |reason: String| IrError::Window {
        op: "conv",
        shape: x.shape,
        reason,
    };
    if x.shape.rank() != 4 {
        return Err(bad("expects an NCHW image (rank 4)".into()));
    }
    let (n, c, h, wd) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let (oh, ow) = win.out(h, wd).ok_or_else(|| {
        bad(format!(
            "a {}x{} window with stride {:?}, padding {:?} (top, left, bottom, right), \
             dilation {:?} and {} groups does not fit a {h}x{wd} image",
            win.kh, win.kw, win.stride, win.pad, win.dilation, win.groups
        ))
    })?;
    let g = win.groups as usize;
    if !c.is_multiple_of(g) {
        return Err(bad(format!("{c} channels do not split into {g} groups")));
    }
    let k = (c / g).checked_mul(win.size());
    if w.shape.rank() != 2 || Some(w.shape[0]) != k || !w.shape[1].is_multiple_of(g) {
        return Err(bad(format!(
            "weights {} must be [{}*{}*{}, out] with out a multiple of {g} groups",
            w.shape,
            c / g,
            win.kh,
            win.kw
        )));
    }
    checked(TensorType::new(
        x.dtype,
        Shape::new(&[n, oh, ow, w.shape[1]])?,
    ))
}

/// `[n, c, h, w]` pooled by `r` over `win` gives `[n, c, oh, ow]` (see
/// [`Op::Pool`]).
fn pool_type(
    r: crate::graph::ReduceOp,
    x: TensorType,
    win: crate::graph::Window,
) -> Result<TensorType, IrError> {
    let Some(op) = r.def().pool else {
        return Err(IrError::Verify(format!(
            "pool: {} does not pool (max, min and sum do)",
            r.name()
        )));
    };
    if x.dtype == DType::Bool {
        return Err(IrError::DTypeUnsupported {
            op,
            dtype: x.dtype,
            hint: "cast to a numeric dtype first",
        });
    }
    let bad = |reason: String| IrError::Window {
        op,
        shape: x.shape,
        reason,
    };
    if x.shape.rank() != 4 {
        return Err(bad("expects an NCHW image (rank 4)".into()));
    }
    if win.groups != 1 {
        return Err(bad(format!(
            "a pooling window has one group, not {}",
            win.groups
        )));
    }
    let (n, c, h, wd) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let fits = |(oh, ow)| {
        win.tap_runs(0, h)?;
        win.tap_runs(1, wd)?;
        Some((oh, ow))
    };
    let (oh, ow) = win.out(h, wd).and_then(fits).ok_or_else(|| {
        bad(format!(
            "a {}x{} window with stride {:?}, padding {:?} (top, left, bottom, right) and \
             dilation {:?} does not fit a {h}x{wd} image, has a window wholly in the padding, \
             or more than {} distinct windows at the edges of one axis",
            win.kh,
            win.kw,
            win.stride,
            win.pad,
            win.dilation,
            crate::graph::MAX_TAP_RUNS
        ))
    })?;
    checked(TensorType::new(x.dtype, Shape::new(&[n, c, oh, ow])?))
}

fn matmul_type(a: TensorType, b: TensorType) -> Result<TensorType, IrError> {
    let err = |reason| {
        Err(IrError::MatMul {
            lhs: a,
            rhs: b,
            reason,
        })
    };
    if a.dtype != b.dtype {
        return Err(IrError::DTypeMismatch {
            lhs: a.dtype,
            rhs: b.dtype,
        });
    }
    if a.dtype == DType::Bool {
        return Err(IrError::DTypeUnsupported {
            op: "matmul",
            dtype: DType::Bool,
            hint: "cast to a numeric dtype first",
        });
    }
    let (ra, rb) = (a.shape.rank(), b.shape.rank());
    if ra != rb || !(ra == 2 || ra == 3) {
        return err("operands must both be 2-D, or both 3-D with equal batch");
    }
    let (sa, sb) = (&a.shape, &b.shape);
    if sa[ra - 1] != sb[rb - 2] {
        return err("inner dimensions differ (lhs last dim must equal rhs second-to-last)");
    }
    if ra == 3 && sa[0] != sb[0] {
        return err("batch dimensions differ");
    }
    let mut dims: Vec<usize> = sa[..ra - 1].to_vec();
    dims.push(sb[rb - 1]);
    checked(TensorType::new(a.dtype, Shape::new(&dims)?))
}
