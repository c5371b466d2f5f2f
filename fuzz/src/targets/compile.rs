//! `compile`: a differential fuzzer of fusion and both code generators.
//! The input bytes are read as choices that build a random well-typed
//! graph (elementwise ops, reductions, layout ops, slices, concats,
//! gathers, products, convolutions and poolings over the float and int
//! dtypes and bool, on tensor inputs and a scalar param);
//! it is compiled, run on Host and, by the input, on Sim, and each output
//! is checked against the reference interpreter on the same inputs.
//!
//! Float values are small integers and each node carries a bound on its
//! magnitude, kept under 2^22: every sum is then exact in f32 whatever
//! order a kernel takes, so a node computed by exact steps must match
//! the interpreter exactly. A convolution may run Winograd's transforms,
//! which round: it and what depends on it are held to an error bound
//! carried through each op, and only ops continuous in their float
//! operands follow it (no compare, cast or rounding reads it). Integer
//! ops wrap, which is exact; an index out of range must be an error on
//! every backend, as it is in the interpreter.

use super::{hash, Bytes, Target};
use crate::rng::Rng;
use tilejit::internals::runtime::Program;
use tilejit_ir::bound::{unit_roundoff, GELU_LIPSCHITZ};
use tilejit_ir::passes::dce;
use tilejit_ir::{
    interp, Array, Axes, BinaryOp, Buffer, CmpOp, DType, Graph, Lit, NodeId, Op, Perm, ReduceOp,
    Shape, TensorType, UnaryOp, Window,
};

pub const TARGET: Target = Target {
    name: "compile",
    about: "random graphs compiled for Host and Sim, against the reference interpreter",
    seeds,
    run,
    dict: &[],
};

/// Most ops a graph is built from.
const MAX_OPS: usize = 24;
/// Most elements of any node; of a big graph's, past where the host
/// splits a kernel's rows over its threads (2^16).
const MAX_NUMEL: usize = 1 << 14;
const MAX_NUMEL_BIG: usize = 1 << 18;
/// Most multiply-adds of one product or convolution.
const MAX_WORK: usize = 1 << 21;
/// Float magnitudes stay at or under this, by dtype: sums of integers
/// stay exact (a dtype holds every integer up to `1 / u`, its unit
/// roundoff: 2^11 in f16, 2^8 in bf16; f32 and f64 stop at 2^22).
fn exact_up_to(d: DType) -> f64 {
    (1.0 / unit_roundoff(d)).min((1u64 << 22) as f64)
}

/// Whether values bounded by `bound` stay exact in `d`.
fn within(bound: f64, d: DType) -> bool {
    bound.is_finite() && bound <= exact_up_to(d)
}
/// The relative error a convolution may carry (Winograd's transforms).
const CONV_ERR: f64 = 1e-4;
/// The error of the host's and Sim's math functions, relative to the
/// result's bound (a few ulp of f32).
const MATH_ERR: f64 = 1e-6;

/// An ulp of `d`'s values relative to their magnitude: how far two
/// roundings of nearly equal values may land apart.
fn rounding(d: DType) -> f64 {
    2.0 * unit_roundoff(d)
}

/// A node and what is known of its values.
#[derive(Clone, Copy, Debug)]
struct Val {
    id: NodeId,
    /// Floats: every step exact (integers within [`exact_up_to`]). Ints and
    /// bools are always exact.
    exact: bool,
    /// A bound on the magnitude of its values (ints: `INFINITY` once they
    /// may wrap).
    bound: f64,
    /// A bound on its error against the interpreter (0 when exact).
    err: f64,
}

/// The graph under construction with its values, inputs and constants.
struct Builder {
    g: Graph,
    vals: Vec<Val>,
    inputs: Vec<Array>,
    /// The values of the scalar params, by index.
    params: Vec<Lit>,
    /// Most elements of a node ([`MAX_NUMEL`], or [`MAX_NUMEL_BIG`]).
    max_numel: usize,
    rng: Rng,
}

impl Builder {
    fn ty(&self, v: Val) -> TensorType {
        self.g.ty(v.id)
    }

    /// Adds `op`, keeping it when it type-checks and its size and bound
    /// stay within the limits.
    fn add(&mut self, op: Op, exact: bool, bound: f64, err: f64) -> Option<Val> {
        let id = self.g.add(op).ok()?;
        let ty = self.g.ty(id);
        let float = ty.dtype.is_float();
        if ty.shape.numel() > self.max_numel || (float && !within(bound, ty.dtype)) {
            // Left in the graph unused: dead code is pruned before fusion.
            return None;
        }
        let v = Val {
            id,
            exact: !float || exact,
            bound,
            // Inexact values may round apart at each op.
            err: match float && !exact {
                true => err + bound * rounding(ty.dtype),
                false => 0.0,
            },
        };
        self.vals.push(v);
        Some(v)
    }

    /// A new tensor input of `ty` with small integer values (ints
    /// sometimes from the edges).
    fn input(&mut self, ty: TensorType) -> Option<Val> {
        let index = self.inputs.len() as u32;
        let n = ty.shape.numel();
        if n > self.max_numel {
            return None;
        }
        let wild = ty.dtype.is_int() && self.rng.one_in(3);
        let mut bound = 4.0;
        let lits: Vec<Lit> = (0..n)
            .map(|_| match ty.dtype {
                DType::Bool => Lit::Bool(self.rng.one_in(2)),
                d if d.is_float() => Lit::from_f64(self.rng.below(9) as f64 - 4.0, d),
                d if wild => {
                    bound = f64::INFINITY;
                    let v = *self
                        .rng
                        .pick(&[0, 1, -1, 7, i32::MAX as i64, i32::MIN as i64]);
                    Lit::from_i64(v, d)
                }
                d => Lit::from_i64(self.rng.below(9) as i64 - 4, d),
            })
            .collect();
        let array = Buffer::from_lits(ty.dtype, lits.into_iter())
            .and_then(|b| Array::new(ty.shape, b))
            .ok()?;
        let v = self.add(Op::Input { index, ty }, true, bound, 0.0)?;
        self.inputs.push(array);
        Some(v)
    }

    /// A constant of `ty` whose values are `f(i)`.
    fn constant(&mut self, ty: TensorType, f: impl Fn(usize) -> i64) -> Option<Val> {
        let n = ty.shape.numel();
        // Its own bound: an index may be used as a value too.
        let bound = (0..n).map(|i| f(i).unsigned_abs()).max().unwrap_or(0) as f64;
        let lits = (0..n).map(|i| Lit::from_i64(f(i), ty.dtype));
        let array = Buffer::from_lits(ty.dtype, lits)
            .and_then(|b| Array::new(ty.shape, b))
            .ok()?;
        let id = self.g.add_constant(array);
        let v = Val {
            id,
            exact: true,
            bound,
            err: 0.0,
        };
        self.vals.push(v);
        Some(v)
    }

    /// `x` and `y` broadcast to their common shape.
    fn broadcast_pair(&mut self, x: Val, y: Val) -> Option<(Val, Val)> {
        let s = Shape::broadcast(&self.ty(x).shape, &self.ty(y).shape).ok()?;
        let mut to = |v: Val| -> Option<Val> {
            if self.ty(v).shape == s {
                return Some(v);
            }
            self.add(Op::Broadcast(v.id, s), v.exact, v.bound, v.err)
        };
        Some((to(x)?, to(y)?))
    }

    /// `v` as `dtype`, when the cast is exact on its values.
    fn cast(&mut self, v: Val, dtype: DType) -> Option<Val> {
        let from = self.ty(v).dtype;
        if from == dtype {
            return Some(v);
        }
        if !v.exact || (dtype.is_float() && !within(v.bound, dtype)) {
            return None;
        }
        // A float saturates into an int's range, keeping its bound; an
        // int may wrap into a narrower or unsigned one, past any bound.
        let signed = matches!(dtype, DType::I8 | DType::I16 | DType::I32 | DType::I64);
        let bound = match dtype {
            DType::Bool => 1.0,
            _ if !from.is_int() || !dtype.is_int() => v.bound,
            _ if signed && v.bound <= 127.0 => v.bound,
            _ => f64::INFINITY,
        };
        self.add(Op::Cast(v.id, dtype), true, bound, 0.0)
    }
}

/// Builds the graph the bytes describe; `None` when they describe none.
fn build(b: &mut Bytes<'_>, seed: u64) -> Option<Builder> {
    let mut s = Builder {
        g: Graph::new(),
        vals: Vec::new(),
        inputs: Vec::new(),
        params: Vec::new(),
        max_numel: MAX_NUMEL,
        rng: Rng::new(seed),
    };
    // One graph in eight is big: its kernels run on several threads.
    let big = b.below(8) == 0;
    if big {
        s.max_numel = MAX_NUMEL_BIG;
    }
    // Sometimes a scalar param, whose value the kernels take at run time.
    if b.below(2) == 0 {
        let dtype = b.pick(&[DType::F32, DType::I32]);
        let value = Lit::from_i64(s.rng.below(9) as i64 - 4, dtype);
        s.add(Op::Param { index: 0, dtype }, true, 4.0, 0.0)?;
        s.params.push(value);
    }
    // One or two plain inputs, and sometimes an image.
    for _ in 0..1 + b.below(2) {
        let rank = 1 + b.below(4);
        let dims: Vec<usize> = match big {
            true => (0..rank).map(|_| b.pick(&[1, 2, 7, 33, 64, 130])).collect(),
            false => (0..rank).map(|_| 1 + b.below(6)).collect(),
        };
        let dtype = b.pick(&[DType::F32, DType::F32, DType::F32, DType::I32]);
        s.input(TensorType::new(dtype, Shape::new(&dims).ok()?))?;
    }
    if b.below(2) == 0 {
        let n = 1 + b.below(2);
        let c = b.pick(&[1, 2, 3, 4, 8, 16]);
        let h = b.pick(&[1, 3, 5, 7, 8, 12, 16, 28]);
        let w = b.pick(&[1, 2, 5, 7, 8, 13, 16, 28]);
        s.input(TensorType::new(DType::F32, Shape::new(&[n, c, h, w]).ok()?));
    }
    for _ in 0..MAX_OPS {
        if b.done() {
            break;
        }
        let kind = b.below(17);
        let x = s.vals[b.below(s.vals.len())];
        let y = s.vals[b.below(s.vals.len())];
        step(&mut s, b, kind, x, y);
    }
    let last = *s.vals.last()?;
    let mut outputs = vec![last.id];
    let other = s.vals[b.below(s.vals.len())];
    if other.id != last.id && b.below(2) == 0 {
        outputs.push(other.id);
    }
    s.g.outputs = outputs;
    Some(s)
}

/// One op of kind `kind` on `x` (and `y`), when it type-checks.
fn step(s: &mut Builder, b: &mut Bytes<'_>, kind: usize, x: Val, y: Val) -> Option<Val> {
    let tx = s.ty(x);
    let rank = tx.shape.rank();
    match kind {
        // Elementwise binary ops, on the operands' common shape.
        0 | 1 => {
            let y = s.cast(y, tx.dtype)?;
            let (x, y) = s.broadcast_pair(x, y)?;
            let ints = [
                BinaryOp::Add,
                BinaryOp::Sub,
                BinaryOp::Mul,
                BinaryOp::Max,
                BinaryOp::Min,
                BinaryOp::BitAnd,
                BinaryOp::BitXor,
                BinaryOp::Div,
                BinaryOp::Rem,
                BinaryOp::Shl,
            ];
            let op = match tx.dtype {
                DType::Bool => b.pick(&[BinaryOp::BitAnd, BinaryOp::BitOr, BinaryOp::BitXor]),
                DType::I32 => b.pick(&ints),
                _ => b.pick(&ints[..5]),
            };
            let (bx, by) = (x.bound, y.bound);
            let bound = match op {
                BinaryOp::Add | BinaryOp::Sub => bx + by,
                BinaryOp::Mul => bx * by,
                BinaryOp::Max | BinaryOp::Min | BinaryOp::Rem => bx.max(by),
                BinaryOp::Div => bx,
                _ => f64::INFINITY,
            };
            let err = match op {
                BinaryOp::Mul => bx * y.err + by * x.err + x.err * y.err,
                BinaryOp::Max | BinaryOp::Min => x.err.max(y.err),
                _ => x.err + y.err,
            };
            s.add(Op::Binary(op, x.id, y.id), x.exact && y.exact, bound, err)
        }
        // Unary ops; the steps (floor .. sign) only of exact values.
        2 => {
            let ops = [
                UnaryOp::Neg,
                UnaryOp::Abs,
                UnaryOp::Relu,
                UnaryOp::Square,
                UnaryOp::Floor,
                UnaryOp::Ceil,
                UnaryOp::Round,
                UnaryOp::Sign,
            ];
            let op = b.pick(&ops);
            let step = matches!(
                op,
                UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Sign
            );
            if tx.dtype == DType::Bool || (step && (!x.exact || !tx.dtype.is_float())) {
                return None;
            }
            let (bound, err) = match op {
                UnaryOp::Square => (x.bound * x.bound, 2.0 * x.bound * x.err + x.err * x.err),
                UnaryOp::Sign => (1.0, 0.0),
                _ => (x.bound, x.err),
            };
            s.add(Op::Unary(op, x.id), x.exact, bound, err)
        }
        // A literal operand.
        3 => {
            if tx.dtype == DType::Bool {
                return None;
            }
            let lit = b.pick(&[0i64, 1, -1, 2, 3, -4]);
            let value = Lit::from_i64(lit, tx.dtype);
            let c = s.add(Op::Full { value, ty: tx }, true, lit.abs() as f64, 0.0)?;
            let op = b.pick(&[BinaryOp::Add, BinaryOp::Mul, BinaryOp::Max, BinaryOp::Sub]);
            let l = lit.abs() as f64;
            let (bound, err) = match op {
                BinaryOp::Mul => (x.bound * l, x.err * l),
                BinaryOp::Max => (x.bound.max(l), x.err),
                _ => (x.bound + l, x.err),
            };
            match b.below(2) {
                0 => s.add(Op::Binary(op, x.id, c.id), x.exact, bound, err),
                _ => s.add(Op::Binary(op, c.id, x.id), x.exact, bound, err),
            }
        }
        // Reductions over one axis.
        4 => {
            if rank == 0 || tx.dtype == DType::Bool {
                return None;
            }
            let axis = b.below(rank);
            let n = tx.shape[axis] as f64;
            let r = b.pick(&[ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod]);
            let (bound, err) = match r {
                ReduceOp::Sum => (n * x.bound, n * x.err),
                ReduceOp::Prod if x.exact => (x.bound.powf(n), 0.0),
                ReduceOp::Prod => return None,
                _ => (x.bound, x.err),
            };
            let axes = Axes::from_axes(&[axis]);
            s.add(Op::Reduce(r, x.id, axes), x.exact, bound, err)
        }
        // A compare of exact values choosing between two others.
        5 => {
            if !x.exact || !y.exact || tx.dtype == DType::Bool {
                return None;
            }
            let y = s.cast(y, tx.dtype)?;
            let (x, y) = s.broadcast_pair(x, y)?;
            let op = b.pick(&[CmpOp::Lt, CmpOp::Le, CmpOp::Eq, CmpOp::Gt, CmpOp::Ge]);
            let c = s.add(Op::Compare(op, x.id, y.id), true, 1.0, 0.0)?;
            let (p, q) = match b.below(2) {
                0 => (x, y),
                _ => (y, x),
            };
            let exact = p.exact && q.exact;
            s.add(
                Op::Select(c.id, p.id, q.id),
                exact,
                p.bound.max(q.bound),
                p.err.max(q.err),
            )
        }
        // Reshapes: flattened, or one dim split or two merged.
        6 => {
            let dims = tx.shape.dims().to_vec();
            let new: Vec<usize> = match b.below(3) {
                0 => vec![dims.iter().product()],
                1 if rank >= 2 => {
                    let d = b.below(rank - 1);
                    let mut v = dims.clone();
                    let merged = v[d] * v[d + 1];
                    v.splice(d..d + 2, [merged]);
                    v
                }
                _ if (1..4).contains(&rank) => {
                    let d = b.below(rank);
                    let f = (2..=dims[d])
                        .find(|&f| dims[d].is_multiple_of(f))
                        .unwrap_or(1);
                    let mut v = dims.clone();
                    v.splice(d..d + 1, [f, dims[d] / f]);
                    v
                }
                _ => return None,
            };
            let shape = Shape::new(&new).ok()?;
            s.add(Op::Reshape(x.id, shape), x.exact, x.bound, x.err)
        }
        // A permutation of the axes.
        7 => {
            let mut perm: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                perm.swap(i, b.below(i + 1));
            }
            let perm = Perm::new(&perm).ok()?;
            s.add(Op::Permute(x.id, perm), x.exact, x.bound, x.err)
        }
        // A window of the operand.
        8 => {
            let dims = tx.shape.dims();
            let start: Vec<usize> = dims.iter().map(|&d| b.below(d)).collect();
            let shape: Vec<usize> = dims
                .iter()
                .zip(&start)
                .map(|(&d, &st)| 1 + b.below(d - st))
                .collect();
            let op = Op::Slice(x.id, Shape::new(&start).ok()?, Shape::new(&shape).ok()?);
            s.add(op, x.exact, x.bound, x.err)
        }
        // Joined along an axis with itself or a window of itself.
        9 => {
            if rank == 0 {
                return None;
            }
            let axis = b.below(rank);
            let other = match b.below(2) {
                0 => x,
                _ => {
                    let d = tx.shape[axis];
                    let mut start = vec![0; rank];
                    start[axis] = b.below(d);
                    let mut shape = tx.shape.dims().to_vec();
                    shape[axis] = d - start[axis];
                    let op = Op::Slice(x.id, Shape::new(&start).ok()?, Shape::new(&shape).ok()?);
                    s.add(op, x.exact, x.bound, x.err)?
                }
            };
            let (p, q) = match b.below(2) {
                0 => (x, other),
                _ => (other, x),
            };
            s.add(Op::Concat(p.id, q.id, axis as u8), x.exact, x.bound, x.err)
        }
        // Casts between any dtypes.
        10 => {
            let to = b.pick(&DType::ALL);
            s.cast(x, to)
        }
        // Products: `x` `[.., m, k]` by a new weight, a constant or `y`.
        11 => {
            if !(2..=3).contains(&rank) || !tx.dtype.is_float() {
                return None;
            }
            let (m, k) = (tx.shape[rank - 2], tx.shape[rank - 1]);
            let batch = if rank == 3 { tx.shape[0] } else { 1 };
            let n = b.pick(&[1, 2, 5, 16, 17, 33]);
            if batch * m * k * n > MAX_WORK {
                return None;
            }
            let mut wdims = tx.shape.dims().to_vec();
            wdims[rank - 2] = k;
            wdims[rank - 1] = n;
            let wty = TensorType::new(tx.dtype, Shape::new(&wdims).ok()?);
            let w = match b.below(3) {
                0 => s.input(wty)?,
                1 => s.constant(wty, |i| (i as i64 * 7 % 9) - 4)?,
                // `y` transposed, when its shape fits.
                _ => {
                    let ty_ = s.ty(y);
                    let mut perm: Vec<usize> = (0..ty_.shape.rank()).collect();
                    let r = perm.len();
                    if r < 2 {
                        return None;
                    }
                    perm.swap(r - 1, r - 2);
                    let y = s.cast(y, tx.dtype)?;
                    let t = Op::Permute(y.id, Perm::new(&perm).ok()?);
                    s.add(t, y.exact, y.bound, y.err)?
                }
            };
            let kk = k as f64;
            let bound = kk * x.bound * w.bound;
            let err = kk * (x.bound * w.err + w.bound * x.err + x.err * w.err);
            s.add(Op::MatMul(x.id, w.id), x.exact && w.exact, bound, err)
        }
        // A convolution of an image by new or constant weights.
        12 | 13 => {
            if rank != 4 || !tx.dtype.is_float() {
                return None;
            }
            let c = tx.shape[1];
            let (kh, kw) = (b.pick(&[1, 1, 3, 3, 2, 5, 7]), b.pick(&[1, 3, 3, 2, 5, 7]));
            let stride = (b.pick(&[1, 1, 1, 2, 2, 3, 4]), b.pick(&[1, 1, 2, 2, 3]));
            let dilation = (b.pick(&[1, 1, 1, 2]), b.pick(&[1, 1, 1, 2]));
            let pad = [0; 4].map(|_| b.below(kh.max(kw) as usize) as u32);
            let o: usize = b.pick(&[1, 2, 4, 8, 16, 32, 64]);
            let groups = *[1, 2, 4, c]
                .iter()
                .filter(|&&g| c.is_multiple_of(g) && o.is_multiple_of(g))
                .nth(b.below(2))
                .unwrap_or(&1);
            let win = Window {
                kh,
                kw,
                stride,
                pad,
                dilation,
                groups: groups as u32,
            };
            let taps = (c / groups) * (kh * kw) as usize;
            let (oh, ow) = win.out(tx.shape[2], tx.shape[3])?;
            if tx.shape[0] * oh * ow * o * taps > MAX_WORK {
                return None;
            }
            let wty = TensorType::new(tx.dtype, Shape::new(&[taps, o]).ok()?);
            let w = match b.below(2) {
                0 => s.input(wty)?,
                _ => s.constant(wty, |i| (i as i64 * 5 % 7) - 3)?,
            };
            let t = taps as f64;
            let bound = t * x.bound * w.bound;
            let err = t * (x.bound * w.err + w.bound * x.err) + CONV_ERR * bound;
            let conv = s.add(Op::Conv(x.id, w.id, win), false, bound, err)?;
            if kind == 13 {
                // To NCHW, as the frontend lays it out.
                let perm = Perm::new(&[0, 3, 1, 2]).ok()?;
                return s.add(Op::Permute(conv.id, perm), false, bound, err);
            }
            Some(conv)
        }
        // Pooling.
        14 => {
            if rank != 4 || tx.dtype == DType::Bool {
                return None;
            }
            let k = b.pick(&[1, 2, 3, 3, 5]);
            let (kh, kw) = (k, b.pick(&[k, k, 1, 2, 3]));
            let stride = (b.pick(&[1, 1, 2, 2, 3]), b.pick(&[1, 2, 2, 3]));
            let pad = [0; 4].map(|_| b.below(kh.min(kw) as usize) as u32);
            let win = Window {
                kh,
                kw,
                stride,
                pad,
                dilation: (b.pick(&[1, 1, 1, 2]), b.pick(&[1, 1, 1, 2])),
                groups: 1,
            };
            let r = b.pick(&[ReduceOp::Max, ReduceOp::Max, ReduceOp::Min, ReduceOp::Sum]);
            let t = (kh * kw) as f64;
            let (bound, err) = match r {
                ReduceOp::Sum => (t * x.bound, t * x.err),
                _ => (x.bound, x.err),
            };
            s.add(Op::Pool(r, x.id, win), x.exact, bound, err)
        }
        // Smooth functions, whose host code is its own approximation:
        // inexact, held to an error bound (`MATH_ERR` of the result's
        // bound, and the operand's error times the function's slope).
        16 => {
            if !tx.dtype.is_float() {
                return None;
            }
            let op = b.pick(&[
                UnaryOp::Exp,
                UnaryOp::Tanh,
                UnaryOp::Sigmoid,
                UnaryOp::Gelu,
                UnaryOp::Sin,
                UnaryOp::Cos,
                UnaryOp::Sqrt,
            ]);
            let (x, bx) = match op {
                // Of |x|, its domain.
                UnaryOp::Sqrt => (
                    s.add(Op::Unary(UnaryOp::Abs, x.id), x.exact, x.bound, x.err)?,
                    x.bound,
                ),
                UnaryOp::Exp if x.bound > 12.0 => return None,
                // Their documented accuracy reaches |x| = 10^6.
                UnaryOp::Sin | UnaryOp::Cos if x.bound > 1e6 => return None,
                _ => (x, x.bound),
            };
            let (bound, carried) = match op {
                UnaryOp::Exp => (bx.exp(), bx.exp() * x.err),
                UnaryOp::Tanh | UnaryOp::Sin | UnaryOp::Cos => (1.0, x.err),
                UnaryOp::Sigmoid => (1.0, 0.25 * x.err),
                UnaryOp::Gelu => (bx, GELU_LIPSCHITZ * x.err),
                // Not Lipschitz at 0: sqrt(a) - sqrt(b) <= sqrt(|a - b|).
                _ => (bx.sqrt(), x.err.sqrt()),
            };
            s.add(
                Op::Unary(op, x.id),
                false,
                bound,
                carried + MATH_ERR * bound,
            )
        }
        // A gather by a constant index, rarely one out of range.
        _ => {
            if rank == 0 {
                return None;
            }
            let axis = b.below(rank);
            let d = tx.shape[axis] as i64;
            let mut dims = tx.shape.dims().to_vec();
            dims[axis] = 1 + b.below(5);
            let ity = TensorType::new(b.pick(&[DType::I32, DType::I64]), Shape::new(&dims).ok()?);
            let wild = b.below(16) == 0;
            let salt = b.next() as i64;
            let index = s.constant(ity, |i| match wild {
                true => d + (i as i64 % 2) * (-2 * d - 1),
                false => (i as i64 * 3 + salt) % d.max(1),
            })?;
            s.add(
                Op::Gather(x.id, index.id, axis as u8),
                x.exact,
                x.bound,
                x.err,
            )
        }
    }
}

fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    // Each kind of op at the front of a few random tails.
    for kind in 0u8..17 {
        for salt in 0u8..3 {
            let mut s = vec![salt, 2, 3, 4, salt, 0, 1, 2, 3, 1, 4, 2];
            for i in 0u8..6 {
                s.extend([kind, salt.wrapping_mul(i), i, 1, 2, salt, i, 3]);
            }
            out.push(s);
        }
    }
    out.push((0u8..128).map(|i| i.wrapping_mul(37)).collect());
    out.push(
        (0u8..128)
            .map(|i| i.wrapping_mul(101).wrapping_add(7))
            .collect(),
    );
    out
}

fn run(input: &[u8]) -> Result<String, String> {
    let mut bytes = Bytes::new(input);
    let sim = input.len() % 2 == 1;
    let Some(s) = build(&mut bytes, hash(input)) else {
        return Ok("no graph".into());
    };
    let outs: Vec<Val> =
        s.g.outputs
            .iter()
            .map(|&id| {
                *s.vals
                    .iter()
                    .find(|v| v.id == id)
                    .expect("an output is a value")
            })
            .collect();
    // What no output reads is left out, as the compiler leaves it: a
    // gather out of range there is no error of the program.
    let g = dce(&s.g);
    let want = interp::run(&g, &s.inputs, &s.params);
    let program = match (Program::compile(g.clone()), &want) {
        (Ok(p), _) => p,
        // A constant index out of range is refused as it folds.
        (Err(_), Err(_)) => return Ok("an error on both".into()),
        (Err(e), Ok(_)) => {
            return Err(format!(
                "a graph that runs does not compile: {e}\n{}",
                shown(&g)
            ))
        }
    };
    let host = program.run(&s.inputs, &s.params);
    // Run again: weights seen twice are packed and kept, which other
    // kernels read.
    let again = program.run(&s.inputs, &s.params);
    let want = match (want, host) {
        (Err(_), Err(_)) => return Ok("an error on both".into()),
        (Err(e), Ok(_)) => {
            return Err(format!(
                "the interpreter fails ({e}) and Host returns values\n{}",
                shown(&g)
            ))
        }
        (Ok(_), Err(e)) => {
            return Err(format!(
                "Host fails ({e}) where the interpreter runs\n{}",
                shown(&g)
            ))
        }
        (Ok(want), Ok(host)) => {
            compare(&want, &host, &outs).map_err(|e| format!("Host: {e}\n{}", shown(&g)))?;
            let again =
                again.map_err(|e| format!("Host fails when run again ({e})\n{}", shown(&g)))?;
            compare(&want, &again, &outs)
                .map_err(|e| format!("Host, run again: {e}\n{}", shown(&g)))?;
            want
        }
    };
    if sim {
        match program.run_sim(&s.inputs, &s.params, false) {
            Ok((outputs, _)) => {
                compare(&want, &outputs, &outs).map_err(|e| format!("Sim: {e}\n{}", shown(&g)))?;
            }
            Err(e) => return Ok(super::sig("sim", &e)),
        }
    }
    // The signature: how it was checked and which of the ops with code
    // of their own it holds.
    let names = g.op_names();
    let ops: Vec<&str> = SHAPED
        .into_iter()
        .filter(|p| names.iter().any(|n| n.starts_with(p)))
        .collect();
    let threads = g.nodes().iter().any(|n| n.ty.shape.numel() >= 1 << 16);
    Ok(format!(
        "{} on {}{}: {}",
        match outs.iter().all(|v| v.exact) {
            true => "exact",
            false => "bounded",
        },
        if sim { "Host and Sim" } else { "Host" },
        if threads { ", big" } else { "" },
        ops.join(" ")
    ))
}

/// Ops whose kernels are shaped apart from the elementwise ones.
const SHAPED: [&str; 8] = [
    "matmul", "conv", "pool", "gather", "cat", "slice", "reduce", "permute",
];

/// Each output against the interpreter's: the same type; ints, bools and
/// exact floats equal (a zero's sign aside, NaN to NaN), other floats
/// equal (an infinity both overflow to) or within their error bound.
fn compare(want: &[Array], got: &[Array], outs: &[Val]) -> Result<(), String> {
    if want.len() != got.len() {
        return Err(format!("{} outputs, want {}", got.len(), want.len()));
    }
    for (o, ((w, g), v)) in want.iter().zip(got).zip(outs).enumerate() {
        if w.ty() != g.ty() {
            return Err(format!("output {o} is {}, want {}", g.ty(), w.ty()));
        }
        for i in 0..w.buffer().len() {
            let (p, q) = (w.buffer().get(i), g.buffer().get(i));
            let ok = match (p, q) {
                (Lit::Float(p), Lit::Float(q)) => {
                    p == q
                        || (p.is_nan() && q.is_nan())
                        || (!v.exact && (p - q).abs() <= v.err + 1e-6 * v.bound)
                }
                (p, q) => p == q,
            };
            if !ok {
                return Err(format!(
                    "output {o} ({}) element {i} is {q}, want {p} (bound {}, error bound {})",
                    w.ty(),
                    v.bound,
                    v.err
                ));
            }
        }
    }
    Ok(())
}

/// The graph's text with each line cut at 160 characters (a constant's
/// values would fill screens).
fn shown(g: &Graph) -> String {
    g.to_string()
        .lines()
        .map(|l| match l.char_indices().nth(160) {
            Some((at, _)) => format!("{} ...\n", &l[..at]),
            None => format!("{l}\n"),
        })
        .collect()
}
