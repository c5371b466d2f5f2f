//! Forward error bounds: for each output element of a graph, how far any
//! correct floating-point evaluation of it may lie from the exact result.
//! Verify mode compares Host and Sim against these (two correct backends
//! differ by at most twice the bound), so its tolerance follows the
//! computation instead of the result, which cancels in sums.
//!
//! The rules, per element (`u` is the dtype's unit roundoff: 2^-24 for
//! f32, 2^-53 for f64, 2^-11 for f16, 2^-8 for bf16; `E` an operand's
//! bound, `v` the result):
//! - inputs, params, literals and constants are exact: `E = 0`;
//! - sums and matmuls over `K` terms: the operands' bounds carried through,
//!   plus `γ_K · Σ|terms|` with `γ_K = K·u / (1 - K·u)` (Higham, *Accuracy
//!   and Stability of Numerical Algorithms*, §3.1), whatever the order of
//!   accumulation;
//! - a rounding is `u·|v| + η`, `η` half the dtype's smallest subnormal
//!   (results that underflow lose absolute, not relative, accuracy);
//! - `+ - *`: first-order propagation plus one rounding (`u·|v|`); `/`:
//!   exact propagation plus two roundings (a backend may multiply by a
//!   reciprocal);
//! - monotone functions (`exp log sqrt rsqrt recip tanh sigmoid`): the
//!   function's change over `[x - E, x + E]` plus
//!   [`TRANSCENDENTAL_ULPS`] roundings; gelu: its Lipschitz constant times
//!   `E` plus [`GELU_ULPS`] and `u·|x|` (its `1 + tanh` cancels for
//!   `x << 0`; backends approximate these functions);
//! - sin, cos (slope at most 1), erf: as the monotone functions;
//!   floor, ceil, round: exact, or `E + 1` for an inexact operand (a
//!   step); sign: exact, or 2 where the operand's bound spans 0;
//! - pow: [`TRANSCENDENTAL_ULPS`] roundings of exact operands, the change
//!   over the corners of the operands' intervals for a positive base, else
//!   unbounded; mod: one rounding of exact operands, else `2(|y| + E_y)`
//!   (the result lies in `(-|y|, |y|)`);
//! - products over `K` terms: `Π(|x|+E) - Π|x|` carried, plus
//!   `γ_2K · Π(|x|+E)` for the roundings;
//! - max/min, relu, neg, abs, layout ops: the operand's bound moves with it;
//! - a comparison whose operands are within their bounds of each other may
//!   flip: `select` on it is then bounded by the distance between its
//!   branches; a float-to-int cast by `ceil(E)`.
//!
//! A bound is infinite where it cannot be stated (a division by an operand
//! that its own error could make zero, `K·u ≥ 1`); Verify then does not
//! check that element.

use crate::array::Array;
use crate::dtype::{DType, Lit};
use crate::error::IrError;
use crate::graph::{BinaryOp, CmpOp, Graph, Op, ReduceOp, UnaryOp};
use crate::interp::{self, Vals};
use crate::ops::{Domain, UnaryBound};
use crate::shape::{Shape, TensorType, MAX_RANK};

/// Roundings allowed for `exp log tanh sigmoid rsqrt recip` (the host's
/// inline math is within 2 ulp; the budget leaves room for other
/// implementations).
pub const TRANSCENDENTAL_ULPS: f64 = 16.0;

/// Roundings allowed for gelu, whose `exp` of about `x^3` amplifies its own
/// rounding (the host's is within 13 ulp on [-3, 0)).
pub const GELU_ULPS: f64 = 32.0;

/// The largest slope of the tanh-approximated gelu (at `x ≈ 1.5`), so
/// `|gelu(x + e) - gelu(x)| <= GELU_LIPSCHITZ * |e|`.
pub const GELU_LIPSCHITZ: f64 = 1.13;

/// The unit roundoff of a dtype (0 for integers and bool, which are exact).
pub fn unit_roundoff(d: DType) -> f64 {
    match d {
        DType::F64 => f64::EPSILON / 2.0,
        DType::F32 => f32::EPSILON as f64 / 2.0,
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        _ => 0.0,
    }
}

/// Half the smallest subnormal of a dtype (0 for integers and bool): the
/// absolute error a rounding into the subnormal range may add to the
/// relative `u·|v|` (Higham's `fl(x op y) = (x op y)(1 + δ) + η`).
pub fn underflow_unit(d: DType) -> f64 {
    match d {
        DType::F64 => 2f64.powi(-1075),
        DType::F32 => 2f64.powi(-150),
        DType::F16 => 2f64.powi(-25),
        DType::BF16 => 2f64.powi(-134),
        _ => 0.0,
    }
}

/// `γ_K = K·u / (1 - K·u)`: the relative error bound of a sum of `K`
/// terms in any order; infinite when `K·u >= 1`.
pub fn gamma(k: usize, u: f64) -> f64 {
    let ku = k as f64 * u;
    if ku < 1.0 {
        ku / (1.0 - ku)
    } else {
        f64::INFINITY
    }
}

/// The error bound of every element of each output of `g` run on `inputs`
/// and `params` (in the outputs' order and layout). Runs the reference
/// interpreter for the values the bounds depend on.
pub fn error_bounds(g: &Graph, inputs: &[Array], params: &[Lit]) -> Result<Vec<Vec<f64>>, IrError> {
    interp::check_arguments(&g.input_types(), g.param_types().len(), inputs, params)?;
    let last_use = interp::last_uses(g);
    let mut vals: Vec<Option<Vals>> = vec![None; g.len()];
    let mut bounds: Vec<Option<Vec<f64>>> = vec![None; g.len()];
    for id in g.ids() {
        let node = g.node(id);
        let v = interp::eval(g, &node.op, node.ty, &vals, inputs, params)?;
        let e = node_bound(g, &node.op, node.ty, &v, &vals, &bounds)?;
        vals[id.index()] = Some(v);
        bounds[id.index()] = Some(e);
        for operand in node.op.operands() {
            if last_use[operand.index()] == Some(id) {
                vals[operand.index()] = None;
                bounds[operand.index()] = None;
            }
        }
    }
    g.outputs
        .iter()
        .map(|&o| {
            bounds[o.index()]
                .clone()
                .ok_or_else(|| interp::internal("output bound freed"))
        })
        .collect()
}

/// Element values as f64, whatever their lane.
fn floats(v: &Vals) -> Vec<f64> {
    match v {
        Vals::F(x) => x.clone(),
        Vals::I(x) => x.iter().map(|&i| i as f64).collect(),
    }
}

fn node_bound(
    g: &Graph,
    op: &Op,
    ty: TensorType,
    out: &Vals,
    vals: &[Option<Vals>],
    bounds: &[Option<Vec<f64>>],
) -> Result<Vec<f64>, IrError> {
    let operand = |id: crate::graph::NodeId| -> Result<(Vec<f64>, &[f64]), IrError> {
        let v = vals[id.index()]
            .as_ref()
            .ok_or_else(|| interp::internal("operand freed too early"))?;
        let e = bounds[id.index()]
            .as_deref()
            .ok_or_else(|| interp::internal("operand bound freed too early"))?;
        Ok((floats(v), e))
    };
    let u = unit_roundoff(ty.dtype);
    let eta = underflow_unit(ty.dtype);
    let v = floats(out);
    let n = ty.shape.numel();
    Ok(match *op {
        Op::Input { .. } | Op::Param { .. } | Op::Full { .. } | Op::Constant { .. } => {
            interp::alloc(n, 0.0)?
        }
        Op::Unary(f, x) => {
            let (xv, xe) = operand(x)?;
            (0..n)
                .map(|i| unary(f, xv[i], xe[i], v[i], u, eta))
                .collect()
        }
        Op::Binary(b, x, y) => {
            let ((xv, xe), (yv, ye)) = (operand(x)?, operand(y)?);
            (0..n)
                .map(|i| binary(b, (xv[i], xe[i]), (yv[i], ye[i]), v[i], u, eta))
                .collect()
        }
        Op::Compare(c, x, y) => {
            let ((xv, xe), (yv, ye)) = (operand(x)?, operand(y)?);
            (0..n)
                .map(|i| may_flip(c, xv[i], yv[i], xe[i] + ye[i]))
                .collect()
        }
        Op::Select(c, a, b) => {
            let ((cv, ce), (av, ae), (bv, be)) = (operand(c)?, operand(a)?, operand(b)?);
            (0..n)
                .map(|i| match (ce[i] > 0.0, cv[i] != 0.0) {
                    (true, _) => ae[i].max(be[i]) + (av[i] - bv[i]).abs(),
                    (false, true) => ae[i],
                    (false, false) => be[i],
                })
                .collect()
        }
        Op::Reduce(r, x, axes) => {
            let (xv, xe) = operand(x)?;
            reduce(
                r,
                &g.ty(x).shape,
                &ty.shape,
                |a| axes.contains(a),
                &xv,
                xe,
                &v,
                u,
            )?
        }
        Op::MatMul(a, b) => {
            let ((av, ae), (bv, be)) = (operand(a)?, operand(b)?);
            matmul(&g.ty(a).shape, &g.ty(b).shape, (&av, ae), (&bv, be), &v, u)?
        }
        Op::Conv(x, w, win) => {
            let ((xv, xe), (wv, we)) = (operand(x)?, operand(w)?);
            conv(
                &g.ty(x).shape,
                g.ty(w).shape[1],
                win,
                (&xv, xe),
                (&wv, we),
                &v,
                u,
            )?
        }
        Op::Pool(r, x, win) => {
            let (xv, xe) = operand(x)?;
            let sx = g.ty(x).shape;
            // Over each window: max and min carry the largest of its
            // bounds; a sum is one reduction of at most `kh*kw` terms.
            let over = |r: ReduceOp, vals: Vec<f64>| {
                moved(interp::pool(r, DType::F64, &sx, win, &Vals::F(vals))?)
            };
            match r {
                ReduceOp::Sum => {
                    let carried = over(ReduceOp::Sum, xe.to_vec())?;
                    let magnitude = over(ReduceOp::Sum, xv.iter().map(|x| x.abs()).collect())?;
                    let g = gamma(win.size(), u);
                    (0..n)
                        .map(|t| carried[t] + g * magnitude[t] + u * v[t].abs())
                        .collect()
                }
                _ => over(ReduceOp::Max, xe.to_vec())?,
            }
        }
        Op::Gather(x, index, axis) => {
            let ((_, xe), (iv, _)) = (operand(x)?, operand(index)?);
            let index = Vals::I(iv.iter().map(|&v| v as i64).collect());
            let picked = interp::gather_along(
                &g.ty(x).shape,
                &ty.shape,
                axis,
                &Vals::F(xe.to_vec()),
                &index,
            )?;
            moved(picked)?
        }
        Op::Concat(a, b, axis) => {
            let ((_, ae), (_, be)) = (operand(a)?, operand(b)?);
            let joined = interp::concat(
                &g.ty(a).shape,
                &ty.shape,
                axis,
                &Vals::F(ae.to_vec()),
                &Vals::F(be.to_vec()),
            )?;
            moved(joined)?
        }
        Op::Reshape(x, _) | Op::Permute(x, _) | Op::Broadcast(x, _) | Op::Slice(x, ..) => {
            let (_, xe) = operand(x)?;
            moved(interp::move_elements(g, op, ty, &Vals::F(xe.to_vec()))?)?
        }
        // Bits reinterpreted: exact of an exact operand, else unbounded.
        Op::Bitcast(x, _) => {
            let (_, xe) = operand(x)?;
            xe.iter()
                .map(|&e| if e == 0.0 { 0.0 } else { f64::INFINITY })
                .collect()
        }
        Op::Cast(x, to) => {
            let (_, xe) = operand(x)?;
            cast(g.ty(x).dtype, to, xe, &v, u)
        }
    })
}

/// A convolution's bound: that of the GEMM it is, im2col's rows (values
/// and bounds alike) times the weights `[k, o]`, once per image and
/// channel group (group `i` takes the weights' columns `i*o/g..`).
fn conv(
    sx: &Shape,
    o: usize,
    win: crate::graph::Window,
    (xv, xe): (&[f64], &[f64]),
    (wv, we): (&[f64], &[f64]),
    v: &[f64],
    u: f64,
) -> Result<Vec<f64>, IrError> {
    let (cols, p, k) = interp::im2col(sx, win, xv)?;
    let (ecols, ..) = interp::im2col(sx, win, xe)?;
    let (n, g) = (sx[0], win.groups as usize);
    let og = o / g;
    // Per image and group: the weights' columns of the group, and the
    // group's columns of `v` (`[n, p, o]` as `[n, g, p, og]`).
    let cap = |len: usize| crate::fallible::with_capacity(len);
    let weights = |w: &[f64]| -> Result<Vec<f64>, IrError> {
        let mut r = cap(n.saturating_mul(w.len()))?;
        for _ in 0..n {
            for gi in 0..g {
                for t in 0..k {
                    r.extend_from_slice(&w[t * o + gi * og..t * o + (gi + 1) * og]);
                }
            }
        }
        Ok(r)
    };
    let mut vg = cap(v.len())?;
    for b in 0..n {
        for gi in 0..g {
            for i in 0..p {
                let at = (b * p + i) * o + gi * og;
                vg.extend_from_slice(&v[at..at + og]);
            }
        }
    }
    let (sa, sb) = (Shape::new(&[n * g, p, k])?, Shape::new(&[n * g, k, og])?);
    let e = matmul(
        &sa,
        &sb,
        (&cols, &ecols),
        (&weights(wv)?, &weights(we)?),
        &vg,
        u,
    )?;
    let mut out = interp::alloc(v.len(), 0.0f64)?;
    for b in 0..n {
        for gi in 0..g {
            for i in 0..p {
                let at = (b * p + i) * o + gi * og;
                let from = ((b * g + gi) * p + i) * og;
                out[at..at + og].copy_from_slice(&e[from..from + og]);
            }
        }
    }
    Ok(out)
}

/// A cast's bound from its operand's `xe`.
fn cast(from: DType, to: DType, xe: &[f64], v: &[f64], u: f64) -> Vec<f64> {
    (0..xe.len())
        .map(|i| {
            let e = xe[i];
            if to == DType::Bool {
                // Any change can turn a zero into a non-zero.
                if e > 0.0 {
                    1.0
                } else {
                    0.0
                }
            } else if from.is_float() && !to.is_float() {
                e.ceil()
            } else {
                e + u * v[i].abs()
            }
        })
        .collect()
}

/// Bounds moved like values (`Vals::F` in, so `Vals::F` out).
fn moved(v: Vals) -> Result<Vec<f64>, IrError> {
    match v {
        Vals::F(e) => Ok(e),
        Vals::I(_) => Err(interp::internal("bounds moved to integer lanes")),
    }
}

/// The bound of `f(x)` with `|x - exact| <= e` and result `v`.
fn unary(f: UnaryOp, x: f64, e: f64, v: f64, u: f64, eta: f64) -> f64 {
    // The change of a monotone `g` over [x - e, x + e]; an endpoint outside
    // its domain (or a pole inside) makes it unbounded.
    let over = |g: fn(f64) -> f64, lo_ok: bool| -> f64 {
        if e == 0.0 {
            return 0.0;
        }
        if !lo_ok {
            return f64::INFINITY;
        }
        let gx = g(x);
        // A NaN endpoint (outside the domain) is unbounded: `max` would
        // drop it.
        let (lo, hi) = ((g(x - e) - gx).abs(), (g(x + e) - gx).abs());
        if lo.is_nan() || hi.is_nan() {
            f64::INFINITY
        } else {
            lo.max(hi)
        }
    };
    let rounding = |ulps: f64| ulps * (u * v.abs() + eta);
    match f.def().bound {
        UnaryBound::Carried => e,
        UnaryBound::Square => 2.0 * x.abs() * e + e * e + rounding(1.0),
        UnaryBound::Sqrt => {
            // sqrt(x + e) - sqrt(x) <= sqrt(e): finite even at 0.
            let slope = if x > e {
                over(f64::sqrt, true)
            } else {
                e.sqrt()
            };
            slope + rounding(1.0)
        }
        UnaryBound::Monotone { f, domain, ulps } => {
            let ok = match domain {
                Domain::All => true,
                Domain::Positive => x - e > 0.0,
                Domain::NoPole => x - e > 0.0 || x + e < 0.0,
            };
            over(f, ok) + rounding(ulps)
        }
        UnaryBound::Lipschitz {
            slope,
            ulps,
            cancels,
        } => {
            let b = slope * e + rounding(ulps);
            if cancels {
                b + u * x.abs()
            } else {
                b
            }
        }
        // Exact, but a step: an inexact operand may move it by one more.
        UnaryBound::Step if e > 0.0 => e + 1.0,
        UnaryBound::Step => 0.0,
        UnaryBound::Sign if x.abs() <= e => 2.0,
        UnaryBound::Sign => 0.0,
    }
}

/// The bound of `x op y` with the operands' values and bounds, result `v`.
fn binary(b: BinaryOp, (x, ex): (f64, f64), (y, ey): (f64, f64), v: f64, u: f64, eta: f64) -> f64 {
    let r = u * v.abs() + eta;
    match b {
        BinaryOp::Add | BinaryOp::Sub => ex + ey + r,
        BinaryOp::Mul => y.abs() * ex + x.abs() * ey + ex * ey + r,
        BinaryOp::Div => {
            let floor = y.abs() - ey;
            if u == 0.0 && (ex > 0.0 || ey > 0.0) {
                // Integer division of inexact operands: no useful bound.
                f64::INFINITY
            } else if ey == 0.0 && ex == 0.0 {
                2.0 * r
            } else if floor > 0.0 {
                (ex + v.abs() * ey) / floor + 2.0 * r
            } else {
                f64::INFINITY
            }
        }
        BinaryOp::Max | BinaryOp::Min => ex.max(ey),
        BinaryOp::Pow => {
            if ex == 0.0 && ey == 0.0 {
                TRANSCENDENTAL_ULPS * r
            } else if u > 0.0 && x - ex > 0.0 {
                // Monotone in each operand for x > 0: the corners bound it.
                let mut d: f64 = 0.0;
                for xc in [x - ex, x + ex] {
                    for yc in [y - ey, y + ey] {
                        d = d.max((xc.powf(yc) - v).abs());
                    }
                }
                if d.is_nan() {
                    f64::INFINITY
                } else {
                    d + TRANSCENDENTAL_ULPS * r
                }
            } else {
                f64::INFINITY
            }
        }
        BinaryOp::Rem => {
            if ex == 0.0 && ey == 0.0 {
                // fmod is exact; moving it into the divisor's sign rounds.
                r
            } else if u > 0.0 {
                // A step at every multiple of `y`: anywhere in `(-|y|, |y|)`.
                2.0 * (y.abs() + ey) + r
            } else {
                f64::INFINITY
            }
        }
        // Integers only: exact on exact operands, anything otherwise.
        BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr => {
            if ex == 0.0 && ey == 0.0 {
                0.0
            } else {
                f64::INFINITY
            }
        }
    }
}

/// 1 where the comparison's outcome can differ between correct
/// evaluations (its operands are within `e` of each other), else 0.
fn may_flip(c: CmpOp, x: f64, y: f64, e: f64) -> f64 {
    let _ = c; // every comparison flips only across the same boundary
    if e > 0.0 && (x - y).abs() <= e {
        1.0
    } else {
        0.0
    }
}

#[allow(clippy::too_many_arguments)]
fn reduce(
    r: ReduceOp,
    src: &Shape,
    out: &Shape,
    reduced: impl Fn(usize) -> bool,
    x: &[f64],
    e: &[f64],
    v: &[f64],
    u: f64,
) -> Result<Vec<f64>, IrError> {
    let n_out = out.numel();
    let k = src.numel().checked_div(n_out).unwrap_or(0);
    let mut carried = interp::alloc(n_out, 0.0f64)?;
    let mut magnitude = interp::alloc(n_out, 0.0f64)?;
    // A product's `Π(|x| + E)` and `Π|x|`, for its carried error.
    let prod = r == ReduceOp::Prod;
    let mut hi = interp::alloc(if prod { n_out } else { 0 }, 1.0f64)?;
    let mut lo = interp::alloc(if prod { n_out } else { 0 }, 1.0f64)?;
    if src.numel() > 0 {
        let mut idx = [0usize; MAX_RANK];
        let mut i = 0;
        loop {
            let mut o = idx;
            for (d, od) in o.iter_mut().enumerate().take(src.rank()) {
                if reduced(d) {
                    *od = 0;
                }
            }
            let t = interp::linear(&o, out);
            match r {
                ReduceOp::Sum => {
                    carried[t] += e[i];
                    magnitude[t] += x[i].abs();
                }
                ReduceOp::Max | ReduceOp::Min => carried[t] = carried[t].max(e[i]),
                ReduceOp::Prod => {
                    hi[t] *= x[i].abs() + e[i];
                    lo[t] *= x[i].abs();
                }
            }
            i += 1;
            if !interp::next_index(&mut idx, src) {
                break;
            }
        }
    }
    Ok(match r {
        ReduceOp::Sum => {
            let g = gamma(k, u);
            (0..n_out)
                .map(|t| carried[t] + g * magnitude[t] + u * v[t].abs())
                .collect()
        }
        ReduceOp::Max | ReduceOp::Min => carried,
        // The operands' errors move the exact product by at most
        // `Π(|x|+E) - Π|x|`; its `K - 1` roundings (in any order) by
        // `γ_K·Π|x|`, computed here with the bound's own slack (`γ_2K`).
        ReduceOp::Prod => {
            let g = gamma(2 * k.max(1), u);
            (0..n_out)
                .map(|t| {
                    // Equal (integers, exact operands, both infinite): nothing carried.
                    let carried = if hi[t] == lo[t] { 0.0 } else { hi[t] - lo[t] };
                    let rounding = if u == 0.0 { 0.0 } else { g * hi[t] };
                    carried + rounding + u * v[t].abs()
                })
                .collect()
        }
    })
}

/// `|A|·E_B + E_A·|B| + γ_K·|A|·|B|`, plus the final rounding.
fn matmul(
    sa: &Shape,
    sb: &Shape,
    (a, ea): (&[f64], &[f64]),
    (b, eb): (&[f64], &[f64]),
    v: &[f64],
    u: f64,
) -> Result<Vec<f64>, IrError> {
    let (batch, m, k, n) = interp::matmul_dims(sa, sb);
    let g = gamma(k, u);
    let exact = ea.iter().all(|&e| e == 0.0) && eb.iter().all(|&e| e == 0.0);
    let mut out = interp::alloc(batch * m * n, 0.0f64)?;
    for bi in 0..batch {
        for i in 0..m {
            let row = bi * m * k + i * k;
            for j in 0..n {
                let (mut magnitude, mut carried) = (0.0f64, 0.0f64);
                for t in 0..k {
                    let (p, q) = (row + t, bi * k * n + t * n + j);
                    magnitude += (a[p] * b[q]).abs();
                    if !exact {
                        carried += a[p].abs() * eb[q] + ea[p] * b[q].abs() + ea[p] * eb[q];
                    }
                }
                let o = bi * m * n + i * n + j;
                out[o] = carried + g * magnitude + u * v[o].abs();
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::text;

    fn bounds_of(src: &str, inputs: &[Array]) -> Vec<Vec<f64>> {
        let g = text::parse(src).unwrap();
        error_bounds(&g, inputs, &[]).unwrap()
    }

    #[test]
    fn a_sum_is_bounded_by_its_length_times_its_magnitude() {
        // [1, -1, 2^-10, 3]: Σ|x| = 5 + 2^-10, K = 4, result 3 + 2^-10.
        let x = Array::from_vec(vec![1.0f32, -1.0, 1.0 / 1024.0, 3.0], &[4]).unwrap();
        let b = bounds_of(
            "graph {\n  %0 = input 0 : f32[4]\n  %1 = reduce_sum %0 axes=[0] : f32[1]\n  return %1\n}\n",
            &[x],
        );
        let u = 2f64.powi(-24);
        let want = gamma(4, u) * (5.0 + 1.0 / 1024.0) + u * (3.0 + 1.0 / 1024.0);
        assert!(
            (b[0][0] - want).abs() <= 1e-6 * want,
            "{} vs {want}",
            b[0][0]
        );
    }

    #[test]
    fn exact_elementwise_ops_cost_one_rounding_and_exp_carries_its_slope() {
        let x = Array::from_vec(vec![2.0f32, -4.0], &[2]).unwrap();
        let b = bounds_of(
            "graph {\n  %0 = input 0 : f32[2]\n  %1 = mul %0, %0 : f32[2]\n  %2 = exp %1 : f32[2]\n  return %1, %2\n}\n",
            &[x],
        );
        let u = 2f64.powi(-24);
        assert_eq!(b[0], vec![4.0 * u, 16.0 * u]);
        // exp(x * x) with x*x off by at most 4u: e^4 * 4u (first order), plus 16 roundings.
        let want = 4f64.exp() * (4.0 * u) + TRANSCENDENTAL_ULPS * u * 4f64.exp();
        assert!(
            (b[1][0] - want).abs() <= 1e-5 * want,
            "{} vs {want}",
            b[1][0]
        );
    }

    #[test]
    fn inverse_trig_carries_its_slope_and_is_unbounded_past_its_domain() {
        // x*x = [0.25, 1]: off by u/4 and u; asin's slope at 0.25 is
        // 1/sqrt(1 - 1/16), and 1 + u lies outside asin's domain.
        let x = Array::from_vec(vec![0.5f32, 1.0], &[2]).unwrap();
        let b = bounds_of(
            "graph {\n  %0 = input 0 : f32[2]\n  %1 = mul %0, %0 : f32[2]\n  %2 = asin %1 : f32[2]\n  %3 = atan %0 : f32[2]\n  return %2, %3\n}\n",
            &[x],
        );
        let u = 2f64.powi(-24);
        let (v, e) = (0.25f64.asin(), 0.25 * u);
        let want = e / (1.0 - 0.0625f64).sqrt() + TRANSCENDENTAL_ULPS * u * v;
        assert!(
            (b[0][0] - want).abs() <= 1e-5 * want,
            "{} vs {want}",
            b[0][0]
        );
        assert_eq!(b[0][1], f64::INFINITY);
        // Exact operands: only the roundings (atan(1) = pi/4).
        let want = TRANSCENDENTAL_ULPS * u * std::f64::consts::FRAC_PI_4;
        assert!(
            (b[1][1] - want).abs() <= 1e-6 * want,
            "{} vs {want}",
            b[1][1]
        );
    }

    #[test]
    fn division_by_a_value_its_error_could_zero_is_unbounded() {
        // 1 + -1 sums to 0, with a bound of γ_2 · 2 > 0: 1/0 is unbounded.
        let x = Array::from_vec(vec![1.0f32, -1.0], &[2]).unwrap();
        let b = bounds_of(
            "graph {\n  %0 = input 0 : f32[2]\n  %1 = reduce_sum %0 axes=[0] : f32[1]\n  %2 = full 1.0 : f32[1]\n  %3 = div %2, %1 : f32[1]\n  return %3\n}\n",
            &[x],
        );
        assert!(b[0][0].is_infinite());
    }
}
