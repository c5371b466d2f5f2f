//! The reference interpreter: executes a graph node by node with plain loops.
//! It is the oracle every backend is tested against, so it favours being
//! obviously right over being fast.
//!
//! Semantics, per dtype:
//! - floats are computed in f64 and rounded to the node's dtype after every
//!   op. For `+ - * / sqrt` that is exactly the dtype's IEEE result (f64
//!   holds more than twice the precision of f32/f16/bf16); transcendental
//!   functions come out correctly rounded or within one rounding of it.
//!   Reductions and matmul accumulate in f64 and round once at the end.
//! - integers are computed in i64 and wrapped to the dtype (two's
//!   complement); integer division truncates toward zero and `x / 0 == 0`.
//!   A u8, u16 or u32 value is held zero-extended, so its compares,
//!   max/min, division and mod are unsigned with no special case; a u64
//!   is held as its bit pattern and those ops read it unsigned
//!   (`BinaryOp::int_fn`, `scalar::int_cmp`).
//! - `max`/`min` (elementwise and reductions) propagate NaN, as numpy does.
//! - a reduction over an empty axis gives its identity (sum 0, prod 1);
//!   max and min have none (an `EmptyReduction` error).
//! - casts float -> int truncate toward zero and saturate to the target
//!   dtype (NaN -> 0), as Rust's `as` (`300.0 as u8 == 255`); int -> int
//!   wraps (`-1i32 -> u8 == 255`); anything -> bool is `!= 0` (NaN -> true).

use crate::array::{Array, Buffer};
use crate::dtype::{DType, Lit};
use crate::error::IrError;
pub(crate) use crate::fallible::filled as alloc;
use crate::fallible::{collect, with_capacity};
use crate::graph::{BinaryOp, CmpOp, Graph, NodeId, Op, ReduceOp, UnaryOp};
use crate::scalar;
use crate::shape::{Shape, TensorType, MAX_RANK};

/// Element values of one node while interpreting: floats widened to f64,
/// integers and bools to i64.
#[derive(Clone, Debug)]
pub(crate) enum Vals {
    F(Vec<f64>),
    I(Vec<i64>),
}

/// Runs `g` on concrete `inputs` (one per `Input` node, by index) and scalar
/// `params` (one per `Param` node), returning the graph's outputs.
pub fn run(g: &Graph, inputs: &[Array], params: &[Lit]) -> Result<Vec<Array>, IrError> {
    check_arguments(&g.input_types(), g.param_types().len(), inputs, params)?;
    let last_use = last_uses(g);
    let mut vals: Vec<Option<Vals>> = vec![None; g.len()];
    for id in g.ids() {
        let node = g.node(id);
        let v = eval(g, &node.op, node.ty, &vals, inputs, params)?;
        vals[id.index()] = Some(v);
        // Free operands whose last use this was, so big graphs fit in memory.
        for operand in node.op.operands() {
            if last_use[operand.index()] == Some(id) {
                vals[operand.index()] = None;
            }
        }
    }
    g.outputs
        .iter()
        .map(|&o| {
            let v = vals[o.index()]
                .as_ref()
                .ok_or_else(|| internal("output value freed"))?;
            to_array(g.ty(o), v)
        })
        .collect()
}

pub(crate) fn internal(msg: &str) -> IrError {
    IrError::Verify(format!("interpreter: {msg}"))
}

/// Checks tensor arguments against the input types a program expects (count
/// and dtype + shape of each) and the number of params. Every backend runs
/// this at its boundary.
pub fn check_arguments<A: std::borrow::Borrow<Array>>(
    want: &[TensorType],
    param_count: usize,
    inputs: &[A],
    params: &[Lit],
) -> Result<(), IrError> {
    let types = inputs.iter().map(|a| a.borrow().ty());
    check_argument_types(want, param_count, types, params)
}

/// [`check_arguments`] on the inputs' types (for inputs that are not host
/// arrays, such as tensors in device memory).
#[inline]
pub fn check_argument_types(
    want: &[TensorType],
    param_count: usize,
    inputs: impl ExactSizeIterator<Item = TensorType>,
    params: &[Lit],
) -> Result<(), IrError> {
    if want.len() != inputs.len() {
        return Err(IrError::Arguments(format!(
            "expected {} tensor inputs, got {}",
            want.len(),
            inputs.len()
        )));
    }
    for (i, (w, got)) in want.iter().zip(inputs).enumerate() {
        if *w != got {
            return Err(IrError::Arguments(format!(
                "input {i}: expected {w}, got {got}"
            )));
        }
    }
    if param_count != params.len() {
        return Err(IrError::Arguments(format!(
            "expected {param_count} params, got {}",
            params.len()
        )));
    }
    Ok(())
}

/// For each node, the last node that uses it (outputs are never freed).
pub(crate) fn last_uses(g: &Graph) -> Vec<Option<NodeId>> {
    let mut last = vec![None; g.len()];
    for id in g.ids() {
        for operand in g.node(id).op.operands() {
            last[operand.index()] = Some(id);
        }
    }
    for &o in &g.outputs {
        last[o.index()] = None;
    }
    last
}

/// A buffer's values widened (an f32 input takes twice its bytes here).
fn from_buffer(b: &Buffer) -> Result<Vals, IrError> {
    Ok(match b {
        Buffer::F32(v) => Vals::F(collect(v.iter().map(|&x| x as f64))?),
        Buffer::F64(v) => Vals::F(collect(v.iter().copied())?),
        Buffer::F16(v) => Vals::F(collect(v.iter().map(|x| x.to_f64()))?),
        Buffer::BF16(v) => Vals::F(collect(v.iter().map(|x| x.to_f64()))?),
        Buffer::I32(v) => Vals::I(collect(v.iter().map(|&x| x as i64))?),
        Buffer::I64(v) => Vals::I(collect(v.iter().copied())?),
        Buffer::Bool(v) => Vals::I(collect(v.iter().map(|&x| x as i64))?),
        Buffer::U8(v) => Vals::I(collect(v.iter().map(|&x| x as i64))?),
        Buffer::I8(v) => Vals::I(collect(v.iter().map(|&x| x as i64))?),
        Buffer::I16(v) => Vals::I(collect(v.iter().map(|&x| x as i64))?),
        Buffer::U16(v) => Vals::I(collect(v.iter().map(|&x| x as i64))?),
        Buffer::U32(v) => Vals::I(collect(v.iter().map(|&x| x as i64))?),
        Buffer::U64(v) => Vals::I(collect(v.iter().map(|&x| x as i64))?),
    })
}

fn to_array(ty: TensorType, v: &Vals) -> Result<Array, IrError> {
    let buf = match v {
        Vals::F(x) => Buffer::from_lits(ty.dtype, x.iter().map(|&f| Lit::Float(f)))?,
        Vals::I(x) => Buffer::from_lits(ty.dtype, x.iter().map(|&i| Lit::Int(i)))?,
    };
    Array::new(ty.shape, buf)
}

pub(crate) fn eval(
    g: &Graph,
    op: &Op,
    ty: TensorType,
    vals: &[Option<Vals>],
    inputs: &[Array],
    params: &[Lit],
) -> Result<Vals, IrError> {
    let arg = |id: NodeId| {
        vals[id.index()]
            .as_ref()
            .ok_or_else(|| internal("operand freed too early"))
    };
    let n = ty.shape.numel();
    Ok(match *op {
        Op::Input { index, .. } => from_buffer(
            inputs
                .get(index as usize)
                .ok_or_else(|| IrError::Arguments(format!("no tensor for input {index}")))?
                .buffer(),
        )?,
        Op::Param { index, dtype } => {
            let lit = *params
                .get(index as usize)
                .ok_or_else(|| internal("missing param"))?;
            splat(convert_lit(lit, dtype), 1)?
        }
        Op::Full { value, .. } => splat(value, n)?,
        Op::Constant { index, .. } => from_buffer(
            g.constant(index)
                .ok_or_else(|| internal("missing constant"))?
                .buffer(),
        )?,
        Op::Unary(u, x) => unary(u, ty.dtype, arg(x)?)?,
        Op::Binary(b, x, y) => binary(b, ty.dtype, arg(x)?, arg(y)?)?,
        Op::Compare(c, x, y) => compare(c, g.ty(x).dtype, arg(x)?, arg(y)?)?,
        Op::Select(c, a, b) => select(arg(c)?, arg(a)?, arg(b)?)?,
        Op::Reduce(r, x, axes) => reduce(
            r,
            ty.dtype,
            &g.ty(x).shape,
            &ty.shape,
            |a| axes.contains(a),
            arg(x)?,
        )?,
        Op::MatMul(a, b) => matmul(ty, &g.ty(a).shape, &g.ty(b).shape, arg(a)?, arg(b)?)?,
        Op::Pool(r, x, win) => pool(r, ty.dtype, &g.ty(x).shape, win, arg(x)?)?,
        Op::Conv(x, w, win) => match (arg(x)?, arg(w)?) {
            (Vals::F(xv), Vals::F(wv)) => {
                let (cols, p, k) = im2col(&g.ty(x).shape, win, xv)?;
                let n = g.ty(x).shape[0];
                let o = g.ty(w).shape[1];
                let groups = win.groups as usize;
                let og = o / groups;
                let mut out = alloc(n * p * o, 0.0f64)?;
                for bi in 0..n {
                    for i in 0..p {
                        for j in 0..o {
                            let r = (bi * groups + j / og) * p + i;
                            let row = &cols[r * k..(r + 1) * k];
                            let mut acc = 0.0f64;
                            for (t, &a) in row.iter().enumerate() {
                                acc += a * wv[t * o + j];
                            }
                            out[(bi * p + i) * o + j] = ty.dtype.round_float(acc);
                        }
                    }
                }
                Vals::F(out)
            }
            _ => return Err(internal("conv of integers")),
        },
        Op::Reshape(x, _) | Op::Permute(x, _) | Op::Broadcast(x, _) => {
            move_elements(g, op, ty, arg(x)?)?
        }
        Op::Cast(x, to) => cast(arg(x)?, g.ty(x).dtype, to)?,
        Op::Bitcast(x, to) => bitcast(arg(x)?, g.ty(x).dtype, to)?,
        Op::Slice(x, ..) => move_elements(g, op, ty, arg(x)?)?,
        Op::Concat(a, b, axis) => concat(&g.ty(a).shape, &ty.shape, axis, arg(a)?, arg(b)?)?,
        Op::Gather(x, index, axis) => {
            gather_along(&g.ty(x).shape, &ty.shape, axis, arg(x)?, arg(index)?)?
        }
    })
}

/// `take_along_axis`: the elements of `x` (of shape `src`) that `index`
/// (of shape `out`) picks along `axis`; an index outside the axis is an
/// error (so error bounds move the same way; [`crate::bound`] calls this).
pub(crate) fn gather_along(
    src: &Shape,
    out: &Shape,
    axis: u8,
    x: &Vals,
    index: &Vals,
) -> Result<Vals, IrError> {
    let Vals::I(index) = index else {
        return Err(internal("gather indices in float lanes"));
    };
    let axis = axis as usize;
    let n = src[axis];
    let mut k = 0;
    let mut bad = None;
    let picked = gather(x, out, |o, inp| {
        let v = index[k];
        k += 1;
        inp[..out.rank()].copy_from_slice(&o[..out.rank()]);
        inp[axis] = match usize::try_from(v) {
            Ok(i) if i < n => i,
            _ => {
                bad.get_or_insert(v);
                0
            }
        };
        if n == 0 {
            return 0;
        }
        linear(inp, src)
    });
    match bad {
        Some(v) => Err(IrError::IndexOutOfRange {
            op: "gather",
            index: Some(v),
            len: n,
        }),
        None => picked,
    }
}

/// `a` and `b` joined along `axis` into `out` (so error bounds join the
/// same way; [`crate::bound`] calls this too).
pub(crate) fn concat(
    a_shape: &Shape,
    out: &Shape,
    axis: u8,
    a: &Vals,
    b: &Vals,
) -> Result<Vals, IrError> {
    let axis = axis as usize;
    // Rows of the outer dims; each holds a run of `a` then a run of `b`.
    let inner: usize = out.dims()[axis + 1..].iter().product();
    let (ra, rb) = (a_shape[axis] * inner, (out[axis] - a_shape[axis]) * inner);
    let rows: usize = out.dims()[..axis].iter().product();
    fn join<T: Copy>(
        x: &[T],
        y: &[T],
        rows: usize,
        ra: usize,
        rb: usize,
    ) -> Result<Vec<T>, IrError> {
        let mut v = with_capacity(rows * (ra + rb))?;
        for r in 0..rows {
            v.extend_from_slice(&x[r * ra..(r + 1) * ra]);
            v.extend_from_slice(&y[r * rb..(r + 1) * rb]);
        }
        Ok(v)
    }
    Ok(match (a, b) {
        (Vals::F(x), Vals::F(y)) => Vals::F(join(x, y, rows, ra, rb)?),
        (Vals::I(x), Vals::I(y)) => Vals::I(join(x, y, rows, ra, rb)?),
        _ => return Err(internal("cat of float and integer lanes")),
    })
}

/// The value of a layout op (`Reshape`, `Permute`, `Broadcast`) whose
/// operand holds `x`: the same elements moved. (Error bounds move the same
/// way, so [`crate::bound`] calls this too.)
pub(crate) fn move_elements(g: &Graph, op: &Op, ty: TensorType, x: &Vals) -> Result<Vals, IrError> {
    Ok(match *op {
        Op::Permute(operand, perm) => {
            let src = g.ty(operand).shape;
            let p = perm.as_vec();
            gather(x, &ty.shape, |out, inp| {
                for (d, &pd) in p.iter().enumerate() {
                    inp[pd] = out[d];
                }
                linear(inp, &src)
            })?
        }
        Op::Broadcast(operand, _) => {
            let src = g.ty(operand).shape;
            let off = ty.shape.rank() - src.rank();
            gather(x, &ty.shape, |out, inp| {
                for d in 0..src.rank() {
                    inp[d] = if src[d] == 1 { 0 } else { out[off + d] };
                }
                linear(inp, &src)
            })?
        }
        Op::Slice(operand, start, _) => {
            let src = g.ty(operand).shape;
            gather(x, &ty.shape, |out, inp| {
                for d in 0..src.rank() {
                    inp[d] = out[d] + start[d];
                }
                linear(inp, &src)
            })?
        }
        // A reshape keeps the elements in order: a copy (fallible).
        _ => match x {
            Vals::F(v) => Vals::F(collect(v.iter().copied())?),
            Vals::I(v) => Vals::I(collect(v.iter().copied())?),
        },
    })
}

fn convert_lit(lit: Lit, dtype: DType) -> Lit {
    match lit {
        Lit::Float(f) => Lit::from_f64(f, dtype),
        other => Lit::from_i64(other.as_i64(), dtype),
    }
}

fn splat(value: Lit, n: usize) -> Result<Vals, IrError> {
    Ok(match value {
        Lit::Float(f) => Vals::F(alloc(n, f)?),
        other => Vals::I(alloc(n, other.as_i64())?),
    })
}

/// Row-major linear index of a multi-index.
pub(crate) fn linear(idx: &[usize; MAX_RANK], shape: &Shape) -> usize {
    (0..shape.rank()).fold(0, |acc, d| acc * shape[d] + idx[d])
}

/// Advances a row-major multi-index by one; returns false after the last.
pub(crate) fn next_index(idx: &mut [usize; MAX_RANK], shape: &Shape) -> bool {
    for d in (0..shape.rank()).rev() {
        idx[d] += 1;
        if idx[d] < shape[d] {
            return true;
        }
        idx[d] = 0;
    }
    false
}

/// out[i] = src[source_of(index of i)], for every element of `out_shape`.
pub(crate) fn gather(
    src: &Vals,
    out_shape: &Shape,
    mut source_of: impl FnMut(&[usize; MAX_RANK], &mut [usize; MAX_RANK]) -> usize,
) -> Result<Vals, IrError> {
    let n = out_shape.numel();
    let mut order = with_capacity(n)?;
    if n > 0 {
        let mut idx = [0usize; MAX_RANK];
        let mut inp = [0usize; MAX_RANK];
        loop {
            order.push(source_of(&idx, &mut inp));
            if !next_index(&mut idx, out_shape) {
                break;
            }
        }
    }
    Ok(match src {
        Vals::F(v) => Vals::F(collect(order.iter().map(|&i| v[i]))?),
        Vals::I(v) => Vals::I(collect(order.iter().map(|&i| v[i]))?),
    })
}

fn unary(u: UnaryOp, dtype: DType, x: &Vals) -> Result<Vals, IrError> {
    let def = u.def();
    Ok(match x {
        Vals::F(v) => Vals::F(collect(
            v.iter().map(|&a| dtype.round_float((def.float)(a))),
        )?),
        Vals::I(v) => {
            // Type inference admits integers only where the row has a function.
            let f = u
                .int_fn(dtype)
                .ok_or_else(|| internal(&format!("{} on an integer dtype", u.name())))?;
            Vals::I(collect(v.iter().map(|&a| dtype.wrap_int(f(a))))?)
        }
    })
}

fn binary(b: BinaryOp, dtype: DType, x: &Vals, y: &Vals) -> Result<Vals, IrError> {
    let def = b.def();
    Ok(match (x, y) {
        (Vals::F(p), Vals::F(q)) => {
            let f = def
                .float
                .ok_or_else(|| internal(&format!("{} on a float dtype", b.name())))?;
            Vals::F(collect(
                p.iter().zip(q).map(|(&a, &c)| dtype.round_float(f(a, c))),
            )?)
        }
        (Vals::I(p), Vals::I(q)) => {
            let f = b.int_fn(dtype);
            Vals::I(collect(
                p.iter().zip(q).map(|(&a, &c)| dtype.wrap_int(f(a, c))),
            )?)
        }
        // Type inference guarantees equal dtypes.
        _ => Vals::F(vec![]),
    })
}

fn compare(c: CmpOp, dt: DType, x: &Vals, y: &Vals) -> Result<Vals, IrError> {
    fn cmp<T: PartialOrd>(c: CmpOp, a: T, b: T) -> i64 {
        (c.def().holds)(a.partial_cmp(&b)) as i64
    }
    let holds = c.def().holds;
    Ok(match (x, y) {
        (Vals::F(p), Vals::F(q)) => Vals::I(collect(p.iter().zip(q).map(|(&a, &b)| cmp(c, a, b)))?),
        (Vals::I(p), Vals::I(q)) => Vals::I(collect(
            p.iter()
                .zip(q)
                .map(|(&a, &b)| holds(Some(scalar::int_cmp(dt, a, b))) as i64),
        )?),
        _ => Vals::I(vec![]),
    })
}

fn select(c: &Vals, a: &Vals, b: &Vals) -> Result<Vals, IrError> {
    let Vals::I(c) = c else {
        return Ok(Vals::I(vec![]));
    };
    fn pick<T: Copy>(c: &[i64], p: &[T], q: &[T]) -> Result<Vec<T>, IrError> {
        collect(
            c.iter()
                .zip(p.iter().zip(q))
                .map(|(&k, (&x, &y))| if k != 0 { x } else { y }),
        )
    }
    Ok(match (a, b) {
        (Vals::F(p), Vals::F(q)) => Vals::F(pick(c, p, q)?),
        (Vals::I(p), Vals::I(q)) => Vals::I(pick(c, p, q)?),
        _ => Vals::I(vec![]),
    })
}

fn reduce(
    r: ReduceOp,
    dtype: DType,
    src: &Shape,
    out: &Shape,
    reduced: impl Fn(usize) -> bool,
    x: &Vals,
) -> Result<Vals, IrError> {
    // Output index of each input element: reduced axes collapse to 0.
    let n_out = out.numel();
    let mut target = with_capacity(src.numel())?;
    if src.numel() > 0 {
        let mut idx = [0usize; MAX_RANK];
        loop {
            let mut o = idx;
            for (d, od) in o.iter_mut().enumerate().take(src.rank()) {
                if reduced(d) {
                    *od = 0;
                }
            }
            target.push(linear(&o, out));
            if !next_index(&mut idx, src) {
                break;
            }
        }
    }
    Ok(match x {
        Vals::F(v) => {
            let (init, f) = r.def().float;
            let mut acc = alloc(n_out, init)?;
            for (&t, &e) in target.iter().zip(v) {
                acc[t] = f(acc[t], e);
            }
            Vals::F(collect(acc.into_iter().map(|a| dtype.round_float(a)))?)
        }
        Vals::I(v) => {
            let (init, f) = r.int_for(dtype);
            let mut acc = alloc(n_out, init)?;
            for (&t, &e) in target.iter().zip(v) {
                acc[t] = f(acc[t], e);
            }
            Vals::I(collect(acc.into_iter().map(|a| dtype.wrap_int(a)))?)
        }
    })
}

/// `r` over each window of image `x` (`[n, c, h, w]`, see [`Op::Pool`]):
/// over the taps inside the image only.
pub(crate) fn pool(
    r: ReduceOp,
    dtype: DType,
    sx: &Shape,
    win: crate::graph::Window,
    x: &Vals,
) -> Result<Vals, IrError> {
    let (h, w) = (sx[2], sx[3]);
    let (oh, ow) = win
        .out(h, w)
        .ok_or_else(|| internal("a pool window that does not fit"))?;
    let (kh, kw) = (win.kh as usize, win.kw as usize);
    // The flat indices (within one plane) of each output's inside taps.
    let mut windows = with_capacity(oh * ow)?;
    for y in 0..oh {
        for xx in 0..ow {
            let taps = (0..kh).flat_map(|i| (0..kw).map(move |j| (i, j)));
            let inside = taps
                .filter_map(|t| win.tap((y, xx), t))
                .filter(|&(a, b)| a < h && b < w)
                .map(|(a, b)| a * w + b);
            windows.push(inside.collect::<Vec<usize>>());
        }
    }
    // Each plane's windows folded from `id` by `f`.
    fn fold<T: Copy>(
        v: &[T],
        plane: usize,
        windows: &[Vec<usize>],
        (id, f): (T, fn(T, T) -> T),
    ) -> Result<Vec<T>, IrError> {
        let mut out = with_capacity(v.len() / plane.max(1) * windows.len())?;
        for img in v.chunks_exact(plane.max(1)) {
            out.extend(
                windows
                    .iter()
                    .map(|t| t.iter().fold(id, |a, &i| f(a, img[i]))),
            );
        }
        Ok(out)
    }
    Ok(match x {
        Vals::F(v) => Vals::F(fold(v, h * w, &windows, r.def().float)?),
        Vals::I(v) => {
            let folded = fold(v, h * w, &windows, r.int_for(dtype))?;
            Vals::I(collect(folded.into_iter().map(|a| dtype.wrap_int(a)))?)
        }
    })
}

/// `(batch, m, k, n)` of a matmul of `sa` by `sb` (batch 1 for rank 2).
/// The windows of image `x` (`[n, c, h, w]`) as rows (see [`Op::Conv`]):
/// per image and channel group, `p` rows of `k = c/groups*kh*kw` values
/// (`[n, groups, p, k]`), zero outside the image; with `p` and `k`.
pub(crate) fn im2col(
    sx: &Shape,
    win: crate::graph::Window,
    x: &[f64],
) -> Result<(Vec<f64>, usize, usize), IrError> {
    let (n, c, h, w) = (sx[0], sx[1], sx[2], sx[3]);
    let (oh, ow) = win
        .out(h, w)
        .ok_or_else(|| internal("a conv window that does not fit"))?;
    let (kh, kw, g) = (win.kh as usize, win.kw as usize, win.groups as usize);
    let cg = c / g;
    let too_big = || IrError::OutOfMemory { bytes: usize::MAX };
    let p = oh.checked_mul(ow).ok_or_else(too_big)?;
    let k = cg.checked_mul(kh * kw).ok_or_else(too_big)?;
    let len = n.checked_mul(p).and_then(|x| x.checked_mul(k * g));
    let mut cols = alloc(len.ok_or_else(too_big)?, 0.0f64)?;
    for b in 0..n {
        for gi in 0..g {
            for y in 0..oh {
                for xx in 0..ow {
                    let row = ((b * g + gi) * p + y * ow + xx) * k;
                    for cj in 0..cg {
                        let ci = gi * cg + cj;
                        for i in 0..kh {
                            for j in 0..kw {
                                let Some((iy, ix)) = win.tap((y, xx), (i, j)) else {
                                    continue;
                                };
                                if iy < h && ix < w {
                                    cols[row + (cj * kh + i) * kw + j] =
                                        x[((b * c + ci) * h + iy) * w + ix];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok((cols, p, k))
}

pub(crate) fn matmul_dims(sa: &Shape, sb: &Shape) -> (usize, usize, usize, usize) {
    let r = sa.rank();
    (
        if r == 3 { sa[0] } else { 1 },
        sa[r - 2],
        sa[r - 1],
        sb[r - 1],
    )
}

fn matmul(ty: TensorType, sa: &Shape, sb: &Shape, a: &Vals, b: &Vals) -> Result<Vals, IrError> {
    let (batch, m, k, n) = matmul_dims(sa, sb);
    Ok(match (a, b) {
        (Vals::F(p), Vals::F(q)) => {
            let mut out = alloc(batch * m * n, 0.0f64)?;
            for bi in 0..batch {
                for i in 0..m {
                    for j in 0..n {
                        let mut acc = 0.0f64;
                        for t in 0..k {
                            acc += p[bi * m * k + i * k + t] * q[bi * k * n + t * n + j];
                        }
                        out[bi * m * n + i * n + j] = ty.dtype.round_float(acc);
                    }
                }
            }
            Vals::F(out)
        }
        (Vals::I(p), Vals::I(q)) => {
            let mut out = alloc(batch * m * n, 0i64)?;
            for bi in 0..batch {
                for i in 0..m {
                    for j in 0..n {
                        let mut acc = 0i64;
                        for t in 0..k {
                            acc = acc.wrapping_add(
                                p[bi * m * k + i * k + t].wrapping_mul(q[bi * k * n + t * n + j]),
                            );
                        }
                        out[bi * m * n + i * n + j] = ty.dtype.wrap_int(acc);
                    }
                }
            }
            Vals::I(out)
        }
        _ => return Err(internal("matmul of mixed lanes")),
    })
}

/// Whether `bitcast` reads `from`'s bits as `to`: f32 and i32/u32, f64
/// and i64/u64, either way.
pub(crate) fn bitcast_pair(from: DType, to: DType) -> bool {
    use DType::*;
    matches!(
        (from, to),
        (F32, I32 | U32) | (I32 | U32, F32) | (F64, I64 | U64) | (I64 | U64, F64)
    )
}

/// One element's bits read as another dtype (see [`bitcast_pair`]).
pub(crate) fn bitcast_float(f: f64, to: DType) -> i64 {
    match to {
        DType::I32 => (f as f32).to_bits() as i32 as i64,
        DType::U32 => (f as f32).to_bits() as i64,
        _ => f.to_bits() as i64,
    }
}

/// The inverse of [`bitcast_float`]: an integer's bits as `to`.
pub(crate) fn bitcast_int(i: i64, to: DType) -> f64 {
    match to {
        DType::F32 => f32::from_bits(i as u32) as f64,
        _ => f64::from_bits(i as u64),
    }
}

fn bitcast(x: &Vals, from: DType, to: DType) -> Result<Vals, IrError> {
    if !bitcast_pair(from, to) {
        return Err(internal("bitcast between dtypes of different sizes"));
    }
    Ok(match x {
        Vals::F(v) => Vals::I(collect(v.iter().map(|&f| bitcast_float(f, to)))?),
        Vals::I(v) => Vals::F(collect(v.iter().map(|&i| bitcast_int(i, to)))?),
    })
}

fn cast(x: &Vals, from: DType, to: DType) -> Result<Vals, IrError> {
    Ok(match x {
        Vals::F(v) => match to {
            d if d.is_float() => Vals::F(collect(v.iter().map(|&f| d.round_float(f)))?),
            d => Vals::I(collect(v.iter().map(|&f| scalar::float_to_int(f, d)))?),
        },
        Vals::I(v) => {
            if to.is_float() {
                Vals::F(collect(
                    v.iter().map(|&i| scalar::int_of_to_float(i, from, to)),
                )?)
            } else {
                Vals::I(collect(v.iter().map(|&i| to.wrap_int(i)))?)
            }
        }
    })
}
