//! Tensor methods: elementwise math, comparisons, reductions, matmul, shape
//! ops, casts, and the compositions `softmax` and `layer_norm`. Each method
//! describes its op as nodes added to a graph and hands them to
//! [`apply`](crate::apply::apply), which records them (inside a jit trace)
//! or runs them (eager).

use crate::apply::apply;
use crate::error::{Loc, Result};
use crate::scalar::{scalar_lit, Scalar};
use crate::tensor::Tensor;
use crate::trace;
use tilejit_ir::{
    Axes, BinaryOp, CmpOp, DType, Graph, IrError, Lit, NodeId, Op, Perm, ReduceOp, Shape, UnaryOp,
};

/// Casts a weakly typed operand to the other operand's dtype.
fn promote(
    g: &mut Graph,
    x: NodeId,
    y: NodeId,
    wx: bool,
    wy: bool,
) -> Result<(NodeId, NodeId), IrError> {
    let (dx, dy) = (g.ty(x).dtype, g.ty(y).dtype);
    Ok(match (dx == dy, wx, wy) {
        (false, true, false) => (g.add(Op::Cast(x, dy))?, y),
        (false, false, true) => (x, g.add(Op::Cast(y, dx))?),
        _ => (x, y),
    })
}

/// `x` broadcast to `shape` (no node if it already has it).
pub(crate) fn bcast(g: &mut Graph, x: NodeId, shape: Shape) -> Result<NodeId, IrError> {
    if g.ty(x).shape == shape {
        Ok(x)
    } else {
        g.add(Op::Broadcast(x, shape))
    }
}

/// Broadcasts two operands to their common shape (numpy rules).
fn bcast2(g: &mut Graph, x: NodeId, y: NodeId) -> Result<(NodeId, NodeId), IrError> {
    let shape = Shape::broadcast(&g.ty(x).shape, &g.ty(y).shape)?;
    Ok((bcast(g, x, shape)?, bcast(g, y, shape)?))
}

fn unary(t: &Tensor, u: UnaryOp, location: Loc) -> Tensor {
    apply(u.name(), location, &[t], |g, ids| {
        g.add(Op::Unary(u, ids[0]))
    })
}

pub(crate) fn binary(a: &Tensor, b: &Tensor, op: BinaryOp, location: Loc) -> Tensor {
    let (wa, wb) = (a.weak, b.weak);
    apply(op.name(), location, &[a, b], |g, ids| {
        let (x, y) = promote(g, ids[0], ids[1], wa, wb)?;
        let (x, y) = bcast2(g, x, y)?;
        g.add(Op::Binary(op, x, y))
    })
}

/// A bitwise op of the table with broadcasting; bool operands go through
/// `u8` (0 and 1, exact both ways), so on bool it is the logical op.
fn bitwise(a: &Tensor, b: &Tensor, op: BinaryOp, location: Loc) -> Tensor {
    let (wa, wb) = (a.weak, b.weak);
    apply(op.name(), location, &[a, b], |g, ids| {
        let (x, y) = promote(g, ids[0], ids[1], wa, wb)?;
        let (x, y) = bcast2(g, x, y)?;
        if g.ty(x).dtype == DType::Bool && g.ty(y).dtype == DType::Bool {
            let (x, y) = (
                g.add(Op::Cast(x, DType::U8))?,
                g.add(Op::Cast(y, DType::U8))?,
            );
            let r = g.add(Op::Binary(op, x, y))?;
            return g.add(Op::Cast(r, DType::Bool));
        }
        g.add(Op::Binary(op, x, y))
    })
}

/// `t op s` (or `s op t` when `scalar_left`), the scalar taking `t`'s dtype.
pub(crate) fn binary_scalar<S: Scalar>(
    t: &Tensor,
    s: S,
    op: BinaryOp,
    scalar_left: bool,
    location: Loc,
) -> Tensor {
    apply(op.name(), location, &[t], |g, ids| {
        let x = ids[0];
        let ty = g.ty(x);
        let c = g.add(Op::Full {
            value: scalar_lit(s, ty.dtype)?,
            ty,
        })?;
        let (l, r) = if scalar_left { (c, x) } else { (x, c) };
        g.add(Op::Binary(op, l, r))
    })
}

fn compare(a: &Tensor, b: &Tensor, op: CmpOp, name: &'static str, location: Loc) -> Tensor {
    let (wa, wb) = (a.weak, b.weak);
    apply(name, location, &[a, b], |g, ids| {
        let (x, y) = promote(g, ids[0], ids[1], wa, wb)?;
        let (x, y) = bcast2(g, x, y)?;
        g.add(Op::Compare(op, x, y))
    })
}

/// Reduces over one axis; drops it unless `keepdim`.
fn reduce(
    t: &Tensor,
    r: ReduceOp,
    axis: isize,
    keepdim: bool,
    name: &'static str,
    location: Loc,
) -> Tensor {
    apply(name, location, &[t], |g, ids| {
        let ty = g.ty(ids[0]);
        let a = ty.shape.axis(axis)?;
        let red = match r {
            ReduceOp::Max | ReduceOp::Min if ty.dtype == DType::Bool => {
                bool_any_all(g, ids[0], a, r == ReduceOp::Max)?
            }
            _ => g.add(Op::Reduce(r, ids[0], Axes::from_axes(&[a])))?,
        };
        drop_axis(g, red, ty.shape, a, keepdim)
    })
}

/// `red` (reduced over axis `a` of `shape`, kept with size 1) reshaped
/// without that axis unless `keepdim`.
fn drop_axis(
    g: &mut Graph,
    red: NodeId,
    shape: Shape,
    a: usize,
    keepdim: bool,
) -> Result<NodeId, IrError> {
    if keepdim {
        return Ok(red);
    }
    let dims: Vec<usize> = shape
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != a)
        .map(|(_, &d)| d)
        .collect();
    g.add(Op::Reshape(red, Shape::new(&dims)?))
}

/// numpy's `any` (`max` of bools) or `all` (`min`) of the bool `x` over
/// axis `a`, kept with size 1: whether the count of true (for `any`) or
/// false (`all`) elements is above 0. The count is an f32 sum of 0s and
/// 1s (the vectorized sum; a positive count never rounds to 0). An empty
/// axis gives `false` for `any` and `true` for `all`, as numpy's do.
fn bool_any_all(g: &mut Graph, x: NodeId, a: usize, any: bool) -> Result<NodeId, IrError> {
    let ty = g.ty(x);
    let mut ones = g.add(Op::Cast(x, DType::F32))?;
    if !any {
        let one = g.add(Op::Full {
            value: tilejit_ir::Lit::Float(1.0),
            ty: tilejit_ir::TensorType::new(DType::F32, ty.shape),
        })?;
        ones = g.add(Op::Binary(BinaryOp::Sub, one, ones))?;
    }
    let count = g.add(Op::Reduce(ReduceOp::Sum, ones, Axes::from_axes(&[a])))?;
    let zero = g.add(Op::Full {
        value: tilejit_ir::Lit::Float(0.0),
        ty: g.ty(count),
    })?;
    let cmp = if any { CmpOp::Gt } else { CmpOp::Eq };
    g.add(Op::Compare(cmp, count, zero))
}

/// Indices whose line is longer than this are built from two shorter ones.
pub(crate) const INDEX_LINE_CONSTANT: usize = 4096;

/// `0..n` as a line of `dt` (F32 below 2^24, else I64). Up to
/// [`INDEX_LINE_CONSTANT`] it is one constant; past it, row starts
/// `[r, 1]` plus offsets `[1, w]` (`w` about `sqrt(n)`), flattened and cut
/// to `n`: a 50257-long argmax then holds about 450 constant values, not
/// 50257, so an eager argmax stays in the eager program cache (which keys
/// small constants by value) instead of being fused again on every call.
pub(crate) fn index_line(g: &mut Graph, n: usize, dt: DType) -> Result<NodeId, IrError> {
    let line = |g: &mut Graph, values: Vec<i64>, dims: &[usize]| -> Result<NodeId, IrError> {
        let array = match dt {
            DType::F32 => tilejit_ir::Array::from_vec(
                values.into_iter().map(|v| v as f32).collect::<Vec<f32>>(),
                dims,
            )?,
            _ => tilejit_ir::Array::from_vec(values, dims)?,
        };
        Ok(g.add_constant(array))
    };
    if n <= INDEX_LINE_CONSTANT {
        return line(g, (0..n as i64).collect(), &[n]);
    }
    let w = n.isqrt().next_power_of_two();
    let r = n.div_ceil(w);
    let starts = line(g, (0..r as i64).map(|j| j * w as i64).collect(), &[r, 1])?;
    let offsets = line(g, (0..w as i64).collect(), &[1, w])?;
    let grid = tilejit_ir::Shape::new(&[r, w])?;
    let starts = g.add(Op::Broadcast(starts, grid))?;
    let offsets = g.add(Op::Broadcast(offsets, grid))?;
    let all = g.add(Op::Binary(BinaryOp::Add, starts, offsets))?;
    let flat = g.add(Op::Reshape(all, tilejit_ir::Shape::new(&[r * w])?))?;
    g.add(Op::Slice(
        flat,
        tilejit_ir::Shape::new(&[0])?,
        tilejit_ir::Shape::new(&[n])?,
    ))
}

/// The index (i64) of the first maximum (`max`) or minimum of `x` along
/// `axis`, a NaN's index if the lane has one (numpy's `argmax`/`argmin`).
/// Built from two fusable reductions: the extreme `m` (NaN-propagating),
/// then the least index `i` whose element equals `m` or is NaN (elements
/// that are not candidates count as the axis length). Indices are f32
/// (exact below 2^24, and their min vectorizes) unless the axis is longer.
fn arg_extreme(
    t: &Tensor,
    max: bool,
    axis: isize,
    keepdim: bool,
    name: &'static str,
    location: Loc,
) -> Tensor {
    // The index dtype depends on the axis length.
    trace::note_shape_arithmetic(name, t, Some(axis));
    apply(name, location, &[t], |g, ids| {
        let mut x = ids[0];
        let ty = g.ty(x);
        let a = ty.shape.axis(axis)?;
        let n = ty.shape[a];
        if n == 0 {
            return Err(IrError::EmptyReduction {
                op: name,
                axis: a,
                shape: ty.shape,
            });
        }
        if ty.dtype == DType::Bool {
            x = g.add(Op::Cast(x, DType::I32))?;
        }
        let shape = ty.shape;
        let one_axis = Axes::from_axes(&[a]);
        let r = if max { ReduceOp::Max } else { ReduceOp::Min };
        let m = g.add(Op::Reduce(r, x, one_axis))?;
        let m = g.add(Op::Broadcast(m, shape))?;
        let mut cand = g.add(Op::Compare(CmpOp::Eq, x, m))?;
        if g.ty(x).dtype.is_float() {
            // A NaN is unequal to itself; if the lane has one, `m` is NaN
            // and only the NaNs are candidates.
            let not_nan = g.add(Op::Compare(CmpOp::Eq, x, x))?;
            let yes = g.add(Op::Full {
                value: tilejit_ir::Lit::Bool(true),
                ty: tilejit_ir::TensorType::new(DType::Bool, shape),
            })?;
            cand = g.add(Op::Select(not_nan, cand, yes))?;
        }
        let mut dims = vec![1usize; shape.rank()];
        dims[a] = n;
        // f32 holds every index below 2^24 exactly.
        let float = n <= 1 << 24;
        let dt = if float { DType::F32 } else { DType::I64 };
        let none = match float {
            true => tilejit_ir::Lit::Float(n as f64),
            false => tilejit_ir::Lit::Int(n as i64),
        };
        let iota = index_line(g, n, dt)?;
        let iota = g.add(Op::Reshape(iota, tilejit_ir::Shape::new(&dims)?))?;
        let iota = bcast(g, iota, shape)?;
        let none = g.add(Op::Full {
            value: none,
            ty: tilejit_ir::TensorType::new(dt, shape),
        })?;
        let idx = g.add(Op::Select(cand, iota, none))?;
        let mut first = g.add(Op::Reduce(ReduceOp::Min, idx, one_axis))?;
        if dt != DType::I64 {
            first = g.add(Op::Cast(first, DType::I64))?;
        }
        drop_axis(g, first, shape, a, keepdim)
    })
}

impl Tensor {
    /// `e^x`.
    #[track_caller]
    pub fn exp(&self) -> Tensor {
        unary(self, UnaryOp::Exp, Loc::caller())
    }
    /// Natural logarithm.
    #[track_caller]
    pub fn log(&self) -> Tensor {
        unary(self, UnaryOp::Log, Loc::caller())
    }
    /// Square root.
    #[track_caller]
    pub fn sqrt(&self) -> Tensor {
        unary(self, UnaryOp::Sqrt, Loc::caller())
    }
    /// `1/sqrt(x)`.
    #[track_caller]
    pub fn rsqrt(&self) -> Tensor {
        unary(self, UnaryOp::Rsqrt, Loc::caller())
    }
    /// Hyperbolic tangent.
    #[track_caller]
    pub fn tanh(&self) -> Tensor {
        unary(self, UnaryOp::Tanh, Loc::caller())
    }
    /// `1/(1+e^-x)`.
    #[track_caller]
    pub fn sigmoid(&self) -> Tensor {
        unary(self, UnaryOp::Sigmoid, Loc::caller())
    }
    /// `max(x, 0)` (NaN stays NaN).
    #[track_caller]
    pub fn relu(&self) -> Tensor {
        unary(self, UnaryOp::Relu, Loc::caller())
    }
    /// GELU, tanh approximation: `0.5x(1+tanh(0.7978845608(x+0.044715x^3)))`.
    #[track_caller]
    pub fn gelu(&self) -> Tensor {
        unary(self, UnaryOp::Gelu, Loc::caller())
    }
    /// Sine (radians), float dtypes only. On the host, f32 (and f16/bf16,
    /// computed in f32 and rounded) reduces `|x|` by pi/2 in three parts
    /// (Cody-Waite; with FMA the first product is exact) and evaluates
    /// Cephes' polynomials on `[-pi/4, pi/4]`; past `|x| = 131072` (8192
    /// without FMA) it calls f64 `sin` instead, so large arguments stay
    /// correct. Measured max error against f64 `sin` rounded to f32 (test
    /// `sin_cos_erf_are_accurate_over_a_million_points`, 2^20 points per
    /// range, with FMA): 1 ulp on [-10, 10], [-1e4, 1e4], [-131072, 131072]
    /// and [-1e6, 1e6], and 1 ulp at the f32 values nearest each multiple
    /// of pi/2 below 131072 (where the result is tiny). Without FMA the
    /// reduction uses five few-bit parts of pi/2: measured (test
    /// `sin_cos_without_fma_are_accurate`, `TILEJIT_NO_FMA`) max 2 ulp for
    /// sin and cos on [-8192, 8192] and sin on [-1e5, 1e5], 1 ulp near the
    /// multiples of pi/2 below 8192. f64 calls
    /// Rust's `sin`. `sin(±inf)` and `sin(NaN)` are NaN; `sin(-0) = -0`.
    #[track_caller]
    pub fn sin(&self) -> Tensor {
        unary(self, UnaryOp::Sin, Loc::caller())
    }
    /// Cosine (radians), float dtypes only, computed as [`Tensor::sin`]
    /// (one quadrant on). Measured max error, as there: 1 ulp on [-10, 10],
    /// 2 ulp on [-1e4, 1e4], 1 ulp on [-131072, 131072] and [-1e6, 1e6] and
    /// near the multiples of pi/2. `cos(±inf)` and `cos(NaN)` are NaN.
    #[track_caller]
    pub fn cos(&self) -> Tensor {
        unary(self, UnaryOp::Cos, Loc::caller())
    }
    /// The error function `2/sqrt(pi) * integral_0^x e^(-t^2) dt`, float
    /// dtypes only. On the host, f32 uses `x + x P(x^2)` for `|x| < 1` and
    /// `1 - e^(-x^2) Q(|x|)` above (exactly 1 from `|x| = 3.92`), two
    /// least-squares polynomial fits: measured max error against f64 `erf`
    /// rounded to f32, 2^20 points on [-5, 5] and on [-1e-3, 1e-3], 1 ulp.
    /// f64 calls `libm::erf` (the reference's). `erf(±inf) = ±1`,
    /// `erf(-0) = -0`, NaN stays NaN.
    #[track_caller]
    pub fn erf(&self) -> Tensor {
        unary(self, UnaryOp::Erf, Loc::caller())
    }
    /// The largest integer `<= x` (exact; integer tensors are unchanged, as
    /// numpy's `floor` on integers).
    #[track_caller]
    pub fn floor(&self) -> Tensor {
        unary(self, UnaryOp::Floor, Loc::caller())
    }
    /// The smallest integer `>= x` (exact; integer tensors are unchanged).
    #[track_caller]
    pub fn ceil(&self) -> Tensor {
        unary(self, UnaryOp::Ceil, Loc::caller())
    }
    /// The nearest integer, halves to even as numpy's `round` (`0.5 -> 0`,
    /// `1.5 -> 2`, `-2.5 -> -2`; the sign of zero kept: `-0.5 -> -0`).
    /// Integer tensors are unchanged.
    #[track_caller]
    pub fn round(&self) -> Tensor {
        unary(self, UnaryOp::Round, Loc::caller())
    }
    /// -1, 0 or 1 by the sign of `x`, as numpy's `sign`: `sign(-0.0) =
    /// 0.0`, NaN stays NaN, `sign(±inf) = ±1`. Also on integers.
    #[track_caller]
    pub fn sign(&self) -> Tensor {
        unary(self, UnaryOp::Sign, Loc::caller())
    }
    /// Arctangent in radians, float dtypes only (`atan(±inf) = ±pi/2`).
    /// Computed in f64 and rounded once to the dtype, on every backend.
    #[track_caller]
    pub fn atan(&self) -> Tensor {
        unary(self, UnaryOp::Atan, Loc::caller())
    }
    /// Arcsine in radians, float dtypes only; NaN outside `[-1, 1]`, as
    /// numpy. Computed in f64 and rounded once to the dtype.
    #[track_caller]
    pub fn asin(&self) -> Tensor {
        unary(self, UnaryOp::Asin, Loc::caller())
    }
    /// Arccosine in radians, float dtypes only; NaN outside `[-1, 1]`, as
    /// numpy. Computed in f64 and rounded once to the dtype.
    #[track_caller]
    pub fn acos(&self) -> Tensor {
        unary(self, UnaryOp::Acos, Loc::caller())
    }
    /// Inverse hyperbolic sine, float dtypes only. Computed in f64 and
    /// rounded once to the dtype.
    #[track_caller]
    pub fn asinh(&self) -> Tensor {
        unary(self, UnaryOp::Asinh, Loc::caller())
    }
    /// Inverse hyperbolic cosine, float dtypes only; NaN below 1, as numpy.
    /// Computed in f64 and rounded once to the dtype.
    #[track_caller]
    pub fn acosh(&self) -> Tensor {
        unary(self, UnaryOp::Acosh, Loc::caller())
    }
    /// Inverse hyperbolic tangent, float dtypes only: `±inf` at `±1`, NaN
    /// beyond, as numpy. Computed in f64 and rounded once to the dtype.
    #[track_caller]
    pub fn atanh(&self) -> Tensor {
        unary(self, UnaryOp::Atanh, Loc::caller())
    }
    /// `x^y` elementwise, with broadcasting. Floats: IEEE/C `pow`, as
    /// numpy's `power` (a negative base with an integer exponent gives the
    /// signed result, with a non-integer one NaN; `pow(x, 0) = 1` even for
    /// NaN; `pow(±0, y < 0) = inf` or `-inf` for odd `y` at -0); the host
    /// computes f32 as f64 `powf` rounded to f32, within 0.5 ulp and equal
    /// to the reference. Integers: wrapping repeated squaring; numpy raises
    /// for a negative exponent, here `x^y` for `y < 0` is the integer part
    /// of `1/x^|y|`: 1 for `x = 1`, ±1 for `x = -1`, and 0 otherwise
    /// (`0^-1 = 0` too).
    #[track_caller]
    pub fn pow(&self, other: &Tensor) -> Tensor {
        binary(self, other, BinaryOp::Pow, Loc::caller())
    }
    /// `x^s` with a scalar exponent taking `x`'s dtype; see [`Tensor::pow`].
    #[track_caller]
    pub fn powf<S: Scalar>(&self, s: S) -> Tensor {
        binary_scalar(self, s, BinaryOp::Pow, false, Loc::caller())
    }
    /// `x mod y` with broadcasting, numpy's `mod` (also the `%` operator):
    /// the result has the divisor's sign (`-5 % 3 = 1`, `5 % -3 = -1`).
    /// Integers: `x % 0 = 0` (numpy's value, which it returns with a
    /// warning), `MIN % -1 = 0`. Floats: `fmod` moved into `y`'s sign by
    /// adding `y` (so `-1 % inf = inf` and `1 % -inf = -inf`, as numpy),
    /// a zero result has `y`'s sign, `x % 0`, `inf % y` and NaN give NaN.
    /// Exact except where adding `y` rounds.
    #[track_caller]
    pub fn remainder(&self, other: &Tensor) -> Tensor {
        binary(self, other, BinaryOp::Rem, Loc::caller())
    }
    /// Bitwise and with broadcasting (ONNX `BitwiseAnd`; on bool, the
    /// logical `And`). Integer and bool dtypes; floats are an error.
    #[track_caller]
    pub fn bitwise_and(&self, other: &Tensor) -> Tensor {
        bitwise(self, other, BinaryOp::BitAnd, Loc::caller())
    }
    /// Bitwise or with broadcasting (ONNX `BitwiseOr`; on bool, `Or`).
    /// Integer and bool dtypes.
    #[track_caller]
    pub fn bitwise_or(&self, other: &Tensor) -> Tensor {
        bitwise(self, other, BinaryOp::BitOr, Loc::caller())
    }
    /// Bitwise exclusive or with broadcasting (ONNX `BitwiseXor`; on bool,
    /// `Xor`). Integer and bool dtypes.
    #[track_caller]
    pub fn bitwise_xor(&self, other: &Tensor) -> Tensor {
        bitwise(self, other, BinaryOp::BitXor, Loc::caller())
    }
    /// Bitwise complement (ONNX `BitwiseNot`; on bool, `Not`): `x ^ !0`,
    /// so `!5 = -6` on signed and `255 - x` on `u8`. Integer and bool dtypes.
    #[track_caller]
    pub fn bitwise_not(&self) -> Tensor {
        apply("bitwise_not", Loc::caller(), &[self], |g, ids| {
            let x = ids[0];
            let ty = g.ty(x);
            if ty.dtype == DType::Bool {
                let u = g.add(Op::Cast(x, DType::U8))?;
                let one = g.add(Op::Full {
                    value: Lit::from_i64(1, DType::U8),
                    ty: g.ty(u),
                })?;
                let r = g.add(Op::Binary(BinaryOp::BitXor, u, one))?;
                return g.add(Op::Cast(r, DType::Bool));
            }
            if !ty.dtype.is_int() {
                return Err(IrError::DTypeUnsupported {
                    op: "bitwise_not",
                    dtype: ty.dtype,
                    hint: "cast to an integer dtype first",
                });
            }
            let ones = g.add(Op::Full {
                value: Lit::from_i64(-1, ty.dtype),
                ty,
            })?;
            g.add(Op::Binary(BinaryOp::BitXor, x, ones))
        })
    }
    /// `x << y` with broadcasting (ONNX `BitShift` left), integer dtypes:
    /// bits shifted past the width are lost, and a count that is negative
    /// or at least the bit width gives 0 (numpy's `left_shift`).
    #[track_caller]
    pub fn shl(&self, other: &Tensor) -> Tensor {
        binary(self, other, BinaryOp::Shl, Loc::caller())
    }
    /// `x >> y` with broadcasting (ONNX `BitShift` right), integer dtypes:
    /// logical on `u8`, arithmetic (sign-filling) on signed dtypes; a count
    /// that is negative or at least the bit width gives 0, or -1 for a
    /// negative `x` (numpy's `right_shift`).
    #[track_caller]
    pub fn shr(&self, other: &Tensor) -> Tensor {
        binary(self, other, BinaryOp::Shr, Loc::caller())
    }
    /// `|x|`.
    #[track_caller]
    pub fn abs(&self) -> Tensor {
        unary(self, UnaryOp::Abs, Loc::caller())
    }
    /// `1/x`.
    #[track_caller]
    pub fn recip(&self) -> Tensor {
        unary(self, UnaryOp::Recip, Loc::caller())
    }
    /// `x*x`.
    #[track_caller]
    pub fn square(&self) -> Tensor {
        unary(self, UnaryOp::Square, Loc::caller())
    }
    /// `s - x`: the method form of a scalar on the left, for when a method
    /// is called on the result (`(1.0 - &x).exp()` needs a suffixed literal,
    /// `x.rsub(1.0).exp()` does not).
    #[track_caller]
    pub fn rsub<S: Scalar>(&self, s: S) -> Tensor {
        binary_scalar(self, s, BinaryOp::Sub, true, Loc::caller())
    }
    /// `s / x`; see [`Tensor::rsub`].
    #[track_caller]
    pub fn rdiv<S: Scalar>(&self, s: S) -> Tensor {
        binary_scalar(self, s, BinaryOp::Div, true, Loc::caller())
    }

    /// Elementwise maximum with broadcasting; NaN-propagating.
    #[track_caller]
    pub fn maximum(&self, other: &Tensor) -> Tensor {
        binary(self, other, BinaryOp::Max, Loc::caller())
    }
    /// Elementwise minimum with broadcasting; NaN-propagating.
    #[track_caller]
    pub fn minimum(&self, other: &Tensor) -> Tensor {
        binary(self, other, BinaryOp::Min, Loc::caller())
    }
    /// `self < other`, elementwise, as a bool tensor.
    #[track_caller]
    pub fn lt(&self, other: &Tensor) -> Tensor {
        compare(self, other, CmpOp::Lt, "lt", Loc::caller())
    }
    /// `self > other`.
    #[track_caller]
    pub fn gt(&self, other: &Tensor) -> Tensor {
        compare(self, other, CmpOp::Gt, "gt", Loc::caller())
    }
    /// `self <= other`.
    #[track_caller]
    pub fn le(&self, other: &Tensor) -> Tensor {
        compare(self, other, CmpOp::Le, "le", Loc::caller())
    }
    /// `self >= other`.
    #[track_caller]
    pub fn ge(&self, other: &Tensor) -> Tensor {
        compare(self, other, CmpOp::Ge, "ge", Loc::caller())
    }
    /// `self == other` (NaN is unequal to everything).
    #[track_caller]
    pub fn eq(&self, other: &Tensor) -> Tensor {
        compare(self, other, CmpOp::Eq, "eq", Loc::caller())
    }

    /// `cond ? a : b` elementwise, all three broadcast together; `cond` is bool.
    #[track_caller]
    pub fn where_cond(cond: &Tensor, a: &Tensor, b: &Tensor) -> Tensor {
        let (wa, wb) = (a.weak, b.weak);
        apply("where", Loc::caller(), &[cond, a, b], |g, ids| {
            let (x, y) = promote(g, ids[1], ids[2], wa, wb)?;
            let shape = Shape::broadcast(&g.ty(ids[0]).shape, &g.ty(x).shape)?;
            let shape = Shape::broadcast(&shape, &g.ty(y).shape)?;
            let c = bcast(g, ids[0], shape)?;
            let (x, y) = (bcast(g, x, shape)?, bcast(g, y, shape)?);
            g.add(Op::Select(c, x, y))
        })
    }

    /// Sum over `axis` (negative counts from the end); 0 over an empty axis.
    #[track_caller]
    pub fn sum(&self, axis: isize, keepdim: bool) -> Tensor {
        reduce(self, ReduceOp::Sum, axis, keepdim, "sum", Loc::caller())
    }
    /// Maximum over `axis`, NaN-propagating; an error over an empty axis
    /// (no identity). Over a bool tensor it is numpy's `any` (`false` over
    /// an empty axis).
    #[track_caller]
    pub fn max(&self, axis: isize, keepdim: bool) -> Tensor {
        reduce(self, ReduceOp::Max, axis, keepdim, "max", Loc::caller())
    }
    /// Minimum over `axis`, NaN-propagating; an error over an empty axis.
    /// Over a bool tensor it is numpy's `all` (`true` over an empty axis).
    #[track_caller]
    pub fn min(&self, axis: isize, keepdim: bool) -> Tensor {
        reduce(self, ReduceOp::Min, axis, keepdim, "min", Loc::caller())
    }
    /// Product over `axis` (negative counts from the end); 1 over an empty
    /// axis; integers wrap in their dtype (numpy's `prod` would widen i32
    /// to i64 first). Not defined on bool (cast first). Host multiplies
    /// f32 (and f16/bf16) factors in f64 and rounds once; Sim does per
    /// tile and multiplies the tiles' f32 partials. Measured over 100,003
    /// f32 factors near 1: Host 1.1e-8 relative to the exact product, Sim
    /// 1.7e-7, numpy's own f32 `prod` 2.9e-5.
    #[track_caller]
    pub fn prod(&self, axis: isize, keepdim: bool) -> Tensor {
        reduce(self, ReduceOp::Prod, axis, keepdim, "prod", Loc::caller())
    }
    /// Index (an i64 tensor) of the maximum along `axis`, as numpy's
    /// `argmax`: the first index on ties, the first NaN's index if the
    /// lane holds a NaN, `true` before `false` for bools; an error over an
    /// empty axis.
    #[track_caller]
    pub fn argmax(&self, axis: isize, keepdim: bool) -> Tensor {
        arg_extreme(self, true, axis, keepdim, "argmax", Loc::caller())
    }
    /// Index (an i64 tensor) of the minimum along `axis`, as numpy's
    /// `argmin`: the first index on ties, the first NaN's index if the
    /// lane holds a NaN; an error over an empty axis.
    #[track_caller]
    pub fn argmin(&self, axis: isize, keepdim: bool) -> Tensor {
        arg_extreme(self, false, axis, keepdim, "argmin", Loc::caller())
    }
    /// Mean over `axis`: NaN over an empty axis; integer tensors give f64 (as numpy).
    #[track_caller]
    pub fn mean(&self, axis: isize, keepdim: bool) -> Tensor {
        apply("mean", Loc::caller(), &[self], |g, ids| {
            let mut x = ids[0];
            if !g.ty(x).dtype.is_float() {
                x = g.add(Op::Cast(x, DType::F64))?;
            }
            let shape = g.ty(x).shape;
            let a = shape.axis(axis)?;
            let sum = g.add(Op::Reduce(ReduceOp::Sum, x, Axes::from_axes(&[a])))?;
            let ty = g.ty(sum);
            // f16 and bf16 round most sizes: the divisor is an f64 cast
            // to them (one rounding, as before), so it holds the size
            // exactly and a dynamic trace reads it back. (Through f32 it
            // rounded twice past 2^24.)
            let wide = match ty.dtype {
                DType::F16 | DType::BF16 => DType::F64,
                d => d,
            };
            let value = tilejit_ir::Lit::from_f64(shape[a] as f64, wide);
            let mut n = g.add(Op::Full {
                value,
                ty: tilejit_ir::TensorType::new(wide, ty.shape),
            })?;
            if wide != ty.dtype {
                n = g.add(Op::Cast(n, ty.dtype))?;
            }
            let mean = g.add(Op::Binary(BinaryOp::Div, sum, n))?;
            if keepdim {
                return Ok(mean);
            }
            let dims: Vec<usize> = shape
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != a)
                .map(|(_, &d)| d)
                .collect();
            g.add(Op::Reshape(mean, Shape::new(&dims)?))
        })
    }
    /// Sum of every element, as a rank-0 tensor.
    #[track_caller]
    pub fn sum_all(&self) -> Tensor {
        apply("sum_all", Loc::caller(), &[self], |g, ids| {
            let rank = g.ty(ids[0]).shape.rank();
            let all: Vec<usize> = (0..rank).collect();
            let r = g.add(Op::Reduce(ReduceOp::Sum, ids[0], Axes::from_axes(&all)))?;
            g.add(Op::Reshape(r, Shape::SCALAR))
        })
    }

    /// Matrix product: `[m,k]@[k,n]`, batched `[b,m,k]@[b,k,n]`, or a 3-D
    /// operand with a 2-D one (the 2-D one is broadcast over the batch).
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Tensor {
        apply("matmul", Loc::caller(), &[self, other], |g, ids| {
            let (mut x, mut y) = (ids[0], ids[1]);
            let (sx, sy) = (g.ty(x).shape, g.ty(y).shape);
            if sx.rank() == 3 && sy.rank() == 2 {
                y = g.add(Op::Broadcast(y, Shape::new(&[sx[0], sy[0], sy[1]])?))?;
            } else if sx.rank() == 2 && sy.rank() == 3 {
                x = g.add(Op::Broadcast(x, Shape::new(&[sy[0], sx[0], sx[1]])?))?;
            }
            g.add(Op::MatMul(x, y))
        })
    }

    /// The same elements in a new shape with the same element count.
    #[track_caller]
    pub fn reshape(&self, shape: &[usize]) -> Tensor {
        apply("reshape", Loc::caller(), &[self], |g, ids| {
            g.add(Op::Reshape(ids[0], Shape::new(shape)?))
        })
    }

    /// Dims `start..=end` merged into one (torch's `flatten`; negative
    /// axes count from the end; a scalar becomes `[1]`). The merged size is
    /// computed from the operand's type, so in a dynamic function it reads
    /// no size, where `reshape(&[a * b])` needs the sizes read first.
    ///
    /// ```
    /// # use tilejit::{DType, Tensor};
    /// let x = Tensor::zeros(&[2, 3, 4], DType::F32);
    /// assert_eq!(x.flatten(0, -1).shape(), [24]);
    /// assert_eq!(x.flatten(1, 2).shape(), [2, 12]);
    /// assert!(x.flatten(2, 1).check().is_err());
    /// ```
    #[track_caller]
    pub fn flatten(&self, start: isize, end: isize) -> Tensor {
        apply("flatten", Loc::caller(), &[self], |g, ids| {
            let shape = g.ty(ids[0]).shape;
            if shape.rank() == 0 {
                return g.add(Op::Reshape(ids[0], Shape::new(&[1])?));
            }
            let (a, b) = (shape.axis(start)?, shape.axis(end)?);
            if a > b {
                return Err(IrError::Window {
                    op: "flatten",
                    shape,
                    reason: format!("start dim {a} comes after end dim {b}"),
                });
            }
            let dims = shape.dims();
            let merged = dims[a..=b].iter().product::<usize>();
            let mut out: Vec<usize> = dims[..a].to_vec();
            out.push(merged);
            out.extend_from_slice(&dims[b + 1..]);
            g.add(Op::Reshape(ids[0], Shape::new(&out)?))
        })
    }

    /// Swaps axes `a` and `b` (negative counts from the end).
    #[track_caller]
    pub fn transpose(&self, a: isize, b: isize) -> Tensor {
        apply("transpose", Loc::caller(), &[self], |g, ids| {
            let shape = g.ty(ids[0]).shape;
            let (a, b) = (shape.axis(a)?, shape.axis(b)?);
            let mut perm: Vec<usize> = (0..shape.rank()).collect();
            perm.swap(a, b);
            g.add(Op::Permute(ids[0], Perm::new(&perm)?))
        })
    }

    /// Reorders all axes: result dim `i` is dim `perm[i]` of `self`.
    #[track_caller]
    pub fn permute(&self, perm: &[usize]) -> Tensor {
        apply("permute", Loc::caller(), &[self], |g, ids| {
            g.add(Op::Permute(ids[0], Perm::new(perm)?))
        })
    }

    /// numpy `broadcast_to`.
    #[track_caller]
    pub fn broadcast_to(&self, shape: &[usize]) -> Tensor {
        apply("broadcast_to", Loc::caller(), &[self], |g, ids| {
            g.add(Op::Broadcast(ids[0], Shape::new(shape)?))
        })
    }

    /// Converts elements to `dtype` (floats to ints truncate toward zero and
    /// saturate, NaN -> 0; anything to bool is `!= 0`).
    #[track_caller]
    pub fn cast(&self, dtype: DType) -> Tensor {
        if self.ty().is_some_and(|t| t.dtype == dtype) {
            return self.clone();
        }
        apply("cast", Loc::caller(), &[self], |g, ids| {
            g.add(Op::Cast(ids[0], dtype))
        })
    }

    /// Each element's bits read as `dtype` (numpy `view`, ONNX `BitCast`):
    /// between f32 and i32/u32, or f64 and i64/u64; other pairs are an
    /// error. Host and Sim move the bits unchanged.
    ///
    /// ```
    /// # use tilejit::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, -2.0], &[2])?;
    /// let bits = x.bitcast(DType::I32).to_vec::<i32>()?;
    /// assert_eq!(bits, vec![0x3f80_0000, 0xc000_0000u32 as i32]);
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    #[track_caller]
    pub fn bitcast(&self, dtype: DType) -> Tensor {
        if self.ty().is_some_and(|t| t.dtype == dtype) {
            return self.clone();
        }
        apply("bitcast", Loc::caller(), &[self], |g, ids| {
            g.add(Op::Bitcast(ids[0], dtype))
        })
    }

    /// Softmax along `axis`: `exp(x - max) / sum(exp(x - max))`.
    #[track_caller]
    pub fn softmax(&self, axis: isize) -> Tensor {
        let m = self.max(axis, true);
        let e = (self - &m).exp();
        let s = e.sum(axis, true);
        &e / &s
    }

    /// Layer normalisation over the last axis:
    /// `(x - mean) / sqrt(var + eps) * gamma + beta` (biased variance).
    #[track_caller]
    pub fn layer_norm(&self, gamma: &Tensor, beta: &Tensor, eps: f64) -> Tensor {
        let mean = self.mean(-1, true);
        let xc = self - &mean;
        let var = (&xc * &xc).mean(-1, true);
        &xc * &(var + eps).rsqrt() * gamma + beta
    }

    /// `Ok(self)` unless this is an error tensor (consuming form of [`Tensor::check`]).
    pub fn into_result(self) -> Result<Tensor> {
        self.check()?;
        Ok(self)
    }
}

macro_rules! try_forms {
    ($($(#[$doc:meta])* $try:ident => $name:ident($($arg:ident: $ty:ty),*);)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                #[track_caller]
                pub fn $try(&self, $($arg: $ty),*) -> Result<Tensor> {
                    self.$name($($arg),*).into_result()
                }
            )*
        }
    };
}

try_forms! {
    /// Fallible `self + other`.
    try_add => add_t(other: &Tensor);
    /// Fallible `self - other`.
    try_sub => sub_t(other: &Tensor);
    /// Fallible `self * other`.
    try_mul => mul_t(other: &Tensor);
    /// Fallible `self / other`.
    try_div => div_t(other: &Tensor);
    /// Fallible [`Tensor::maximum`].
    try_maximum => maximum(other: &Tensor);
    /// Fallible [`Tensor::minimum`].
    try_minimum => minimum(other: &Tensor);
    /// Fallible [`Tensor::matmul`].
    try_matmul => matmul(other: &Tensor);
    /// Fallible [`Tensor::reshape`].
    try_reshape => reshape(shape: &[usize]);
    /// Fallible [`Tensor::transpose`].
    try_transpose => transpose(a: isize, b: isize);
    /// Fallible [`Tensor::broadcast_to`].
    try_broadcast_to => broadcast_to(shape: &[usize]);
    /// Fallible [`Tensor::sum`].
    try_sum => sum(axis: isize, keepdim: bool);
    /// Fallible [`Tensor::max`].
    try_max => max(axis: isize, keepdim: bool);
    /// Fallible [`Tensor::min`].
    try_min => min(axis: isize, keepdim: bool);
    /// Fallible [`Tensor::prod`].
    try_prod => prod(axis: isize, keepdim: bool);
    /// Fallible [`Tensor::argmax`].
    try_argmax => argmax(axis: isize, keepdim: bool);
    /// Fallible [`Tensor::argmin`].
    try_argmin => argmin(axis: isize, keepdim: bool);
    /// Fallible [`Tensor::mean`].
    try_mean => mean(axis: isize, keepdim: bool);
    /// Fallible [`Tensor::softmax`].
    try_softmax => softmax(axis: isize);
    /// Fallible [`Tensor::lt`].
    try_lt => lt(other: &Tensor);
}

impl Tensor {
    #[track_caller]
    fn add_t(&self, other: &Tensor) -> Tensor {
        binary(self, other, BinaryOp::Add, Loc::caller())
    }
    #[track_caller]
    fn sub_t(&self, other: &Tensor) -> Tensor {
        binary(self, other, BinaryOp::Sub, Loc::caller())
    }
    #[track_caller]
    fn mul_t(&self, other: &Tensor) -> Tensor {
        binary(self, other, BinaryOp::Mul, Loc::caller())
    }
    #[track_caller]
    fn div_t(&self, other: &Tensor) -> Tensor {
        binary(self, other, BinaryOp::Div, Loc::caller())
    }
}
