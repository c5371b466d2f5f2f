//! `dynamic`: a differential fuzzer of dynamic shape classes. The input
//! bytes are read as a random body (see [`Body`]): ops that pass sizes on,
//! ops that compute on them, size reads (`shape`, `dim`, `numel`) feeding
//! scalars, branches and slices, literals and constants at multiples of
//! the stand-in sizes, a captured tensor and an int argument. The body is
//! compiled twice, as a dynamic function (automatic or every dim a symbol,
//! by the input's length) and as an exact one, and called
//! at several sizes on Host or Sim; the rule under test is that a dynamic
//! function never returns what the exact trace would not: the same
//! error kind, or the same shape and the same bits.

use super::{Bytes, Target};
use std::sync::Arc;
// The body is built at run time, not by `jit_fn!`: it takes the
// expansions' plumbing on purpose.
use tilejit::__private::{param, ArgKind, TraceValue};
use tilejit::{DType, JitFn, RunMode, Tensor};

pub const TARGET: Target = Target {
    name: "dynamic",
    about: "random bodies, dynamic against exact, bit for bit (Host and Sim)",
    seeds,
    run,
    dict: &[],
};

/// Values a body may use as literals: the stand-ins of both sets and their
/// neighbours and multiples, and ordinary numbers.
const DANGER: [f64; 14] = [
    1031.0,
    2062.0,
    3093.0,
    2053.0,
    1549.0,
    2579.0,
    1030.0,
    1032.0,
    4124.0,
    0.5,
    2.0,
    3.0,
    -1031.0,
    1031.0 * 2053.0,
];

/// Sizes a body may give `zeros`, `slice` bounds or `broadcast_to`.
const DANGER_SIZES: [usize; 8] = [1031, 1549, 2053, 3, 2, 1, 1030, 6];

/// Slice bounds: from the start, from the end, past it.
const BOUNDS: [isize; 9] = [0, 1, 2, -1, -2, 3, 1031, 1549, 100];

/// One step of a body: an op on earlier values (by index, modulo their
/// count), with its choices.
#[derive(Clone, Copy, Debug)]
enum Step {
    Unary(u8, usize),
    Binary(u8, usize, usize),
    AddScalar(usize, f64),
    MulFull(usize, f64),
    ZerosOf(usize, usize),
    Captured(usize),
    IntArg(usize),
    /// A size read (`how`: shape, dim or numel) used as `use_`.
    Read {
        x: usize,
        axis: u8,
        how: u8,
        use_: u8,
    },
    Flatten(usize),
    Reduce(u8, usize, u8, bool),
    Slice(usize, u8, isize, isize),
    Cat(usize, usize, u8),
    Pad(usize, u8, usize, usize),
    SplitFirst(usize, u8),
    Arg(usize, u8, bool),
    Cumsum(usize, u8),
    Tril(usize, isize),
    Broadcast(usize, usize),
    Transpose(usize, u8, u8),
    Pool(usize, u8),
    /// A conv with `[2, c, 2, 2]` weights, `c` read with `dim(1)`.
    Conv(usize, u8, u8),
    /// `slice_assign` of the value's first slice along an axis, at a
    /// start (a `usize`, or a rank-0 tensor, -1 and past the end too).
    Assign(usize, u8, u8),
}

/// A random body and the sizes it is called at.
#[derive(Clone, Debug)]
struct Body {
    /// Per input (x, y), per dim: a symbol `0..3`, or 3 for a fixed 1.
    dims: [Vec<u8>; 2],
    steps: Vec<Step>,
    captured: f64,
    int_arg: i64,
    /// Per call, the value of each symbol.
    sizes: Vec<[usize; 3]>,
    sim: bool,
}

fn decode(input: &[u8]) -> Body {
    let mut b = Bytes::new(input);
    // x of rank 1 to 4 (pools want 4), y of rank 1 or 2: small enough
    // that broadcasts of flattened values stay cheap.
    let mut dims = [Vec::new(), Vec::new()];
    for (d, max_rank) in dims.iter_mut().zip([4, 2]) {
        let rank = 1 + b.below(max_rank);
        *d = (0..rank).map(|_| b.below(4) as u8).collect();
    }
    let captured = b.pick(&DANGER);
    let int_arg = b.pick(&[1031i64, 3, 2053, 7, 1549]);
    let n = 1 + b.below(7);
    let mut steps = Vec::with_capacity(n);
    for _ in 0..n {
        let (x, y) = (b.below(16), b.below(16));
        let axis = b.next();
        steps.push(match b.below(22) {
            0 => Step::Unary(b.next(), x),
            1 => Step::Binary(b.next(), x, y),
            2 => Step::AddScalar(x, b.pick(&DANGER)),
            3 => Step::MulFull(x, b.pick(&DANGER)),
            4 => Step::ZerosOf(x, b.pick(&DANGER_SIZES)),
            5 => Step::Captured(x),
            6 => Step::IntArg(x),
            7 | 8 => Step::Read {
                x,
                axis,
                how: b.next(),
                use_: b.next(),
            },
            9 => Step::Flatten(x),
            10 => Step::Reduce(b.next(), x, axis, b.next().is_multiple_of(2)),
            11 => Step::Slice(x, axis, b.pick(&BOUNDS), b.pick(&BOUNDS)),
            12 => Step::Cat(x, y, axis),
            13 => Step::Pad(x, axis, b.below(3), b.below(3)),
            14 => Step::SplitFirst(x, axis),
            15 => Step::Arg(x, axis, b.next().is_multiple_of(2)),
            16 => Step::Cumsum(x, axis),
            17 => Step::Tril(x, b.pick(&[0isize, -1, 1, 1031])),
            18 => match b.below(2) {
                0 => Step::Broadcast(x, b.pick(&DANGER_SIZES)),
                _ => Step::Transpose(x, axis, b.next()),
            },
            19 => Step::Pool(x, b.next()),
            20 => Step::Conv(x, b.next(), b.next()),
            _ => Step::Assign(x, axis, b.next()),
        });
    }
    let calls = 2 + b.below(3);
    // Small sizes, equal ones now and then (another class).
    let sizes = (0..calls).map(|_| [0; 3].map(|_| 2 + b.below(4))).collect();
    let sim = b.below(4) == 0;
    Body {
        dims,
        steps,
        captured,
        int_arg,
        sizes,
        sim,
    }
}

/// Axis `a` of a rank-`r` tensor (0 for a scalar).
fn axis(a: u8, r: usize) -> isize {
    (a as usize % r.max(1)) as isize
}

/// Runs the body's steps on `x`, `y` (traced or not): the last value, as
/// f32. A step that makes no sense at a rank is skipped, the same way at
/// every size; an op's error is an error tensor and flows on.
fn interpret(
    body: &Body,
    x: &Tensor,
    y: &Tensor,
    k: i64,
    captured: &Tensor,
) -> tilejit::Result<Tensor> {
    let mut vals: Vec<Tensor> = vec![x.clone(), y.clone()];
    for &step in &body.steps {
        let v = |i: usize| vals[i % vals.len()].clone();
        let out = match step {
            Step::Unary(op, i) => match op % 4 {
                0 => v(i).exp(),
                1 => -&v(i),
                2 => v(i).relu(),
                _ => v(i).tanh(),
            },
            Step::Binary(op, i, j) => match op % 3 {
                0 => &v(i) + &v(j),
                1 => &v(i) * &v(j),
                _ => v(i).maximum(&v(j)),
            },
            Step::AddScalar(i, c) => &v(i) + &Tensor::scalar(c, DType::F32),
            Step::MulFull(i, c) => &v(i) * &Tensor::full(&[1], c, DType::F32),
            Step::ZerosOf(i, n) => v(i).sum_all() + Tensor::zeros(&[n], DType::F32),
            Step::Captured(i) => &v(i) * captured,
            Step::IntArg(i) => &v(i) + &Tensor::scalar(k as f64, DType::F32),
            Step::Read {
                x,
                axis: a,
                how,
                use_,
            } => {
                let t = v(x);
                let r = t.rank();
                let n = match how % 3 {
                    0 => t.shape().get(axis(a, r) as usize).copied().unwrap_or(1),
                    1 => t.dim(axis(a, r)).unwrap_or(1),
                    _ => t.numel(),
                };
                match use_ % 6 {
                    0 => &t * (n as f64),
                    1 => &t * ((n * (n % 2)) as f64),
                    2 => {
                        if n > 4 {
                            t.exp()
                        } else {
                            -&t
                        }
                    }
                    3 => &t * (1.0 / n as f64),
                    4 => t.slice(axis(a, r), 0, (n / 2) as isize),
                    _ => t.sum_all() + Tensor::zeros(&[n % 7 + 1], DType::F32),
                }
            }
            Step::Flatten(i) => v(i).flatten(0, -1),
            Step::Reduce(op, i, a, keep) => {
                let t = v(i);
                let a = axis(a, t.rank());
                match op % 3 {
                    0 => t.sum(a, keep),
                    1 => t.mean(a, keep),
                    _ => t.max(a, keep),
                }
            }
            Step::Slice(i, a, s, e) => {
                let t = v(i);
                t.slice(axis(a, t.rank()), s, e)
            }
            Step::Cat(i, j, a) => {
                let (t, u) = (v(i), v(j));
                Tensor::cat(&[&t, &u], axis(a, t.rank()))
            }
            Step::Pad(i, a, before, after) => {
                let t = v(i);
                let mut pads = vec![(0, 0); t.rank()];
                if let Some(p) = pads.get_mut(axis(a, t.rank()) as usize) {
                    *p = (before, after);
                }
                t.pad(&pads, 0.0)
            }
            Step::SplitFirst(i, a) => {
                let t = v(i);
                let a = axis(a, t.rank());
                match t.dim(a) {
                    Ok(d) if d > 1 => t.split(&[1, d - 1], a)[1].clone(),
                    _ => t,
                }
            }
            Step::Arg(i, a, keep) => {
                let t = v(i);
                t.argmax(axis(a, t.rank()), keep).cast(DType::F32)
            }
            Step::Cumsum(i, a) => {
                let t = v(i);
                t.cumsum(axis(a, t.rank()))
            }
            Step::Assign(i, a, at) => {
                let t = v(i);
                let a = axis(a, t.rank());
                let src = t.slice(a, 0, 1) * 2.0;
                match at % 2 {
                    0 => t.slice_assign(a, (at / 2 % 4) as usize, &src),
                    _ => {
                        let start = Tensor::from_vec(vec![(at / 2 % 6) as i64 - 1], &[])?;
                        t.slice_assign(a, &start, &src)
                    }
                }
            }
            Step::Tril(i, k) => v(i).tril(k),
            Step::Broadcast(i, n) => v(i).sum_all().broadcast_to(&[n]),
            Step::Transpose(i, a, b) => {
                let t = v(i);
                let r = t.rank();
                t.transpose(axis(a, r), axis(b, r))
            }
            Step::Pool(i, how) => {
                let t = v(i);
                match (t.rank(), how % 2) {
                    (4, 0) => t.max_pool2d(2, 1),
                    (4, _) => t.avg_pool2d(2, 2),
                    _ => t,
                }
            }
            Step::Conv(i, stride, pad) => {
                let t = v(i);
                match (t.rank(), t.dim(1)) {
                    (4, Ok(c)) => t.conv2d(
                        &Tensor::full(&[2, c, 2, 2], 0.5, DType::F32),
                        1 + stride as usize % 2,
                        pad as usize % 2,
                    ),
                    _ => t,
                }
            }
        };
        vals.push(out.cast(DType::F32));
    }
    vals.pop().unwrap_or_else(|| x.clone()).into_result()
}

/// Bodies of every step kind, one after another, and a few mixes.
fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for kind in 0u8..21 {
        for v in 0u8..3 {
            // dims (x rank 2: n0, n1; y rank 2: n1, 1), captured, int arg,
            // one step of `kind`, 3 calls.
            let mut s = vec![1, 0, 1, 1, 1, 3, v, v, 0];
            s.extend([v, v + 1, v * 3, kind, v, v + 2, v, v]);
            s.extend([1, 5, 3, 7, 2, 9, 4, 6, 8, v]);
            out.push(s);
        }
    }
    out.push((0u8..64).map(|i| i.wrapping_mul(37)).collect());
    out.push(
        (0u8..64)
            .map(|i| i.wrapping_mul(101).wrapping_add(7))
            .collect(),
    );
    out
}

fn run(input: &[u8]) -> Result<String, String> {
    let body = Arc::new(decode(input));
    let captured = Tensor::full(&[1], body.captured, DType::F32);
    let params = [
        param("x", ArgKind::Tensor),
        param("y", ArgKind::Tensor),
        param("k", ArgKind::Int),
    ];
    let make = |name: &str| {
        let (body, captured) = (body.clone(), captured.clone());
        JitFn::new(
            name,
            "fuzz",
            &params,
            move |args: &[TraceValue]| match args {
                [TraceValue::Tensor(x), TraceValue::Tensor(y), TraceValue::Int(k)] => {
                    interpret(&body, x, y, *k, &captured)
                }
                _ => Err(tilejit::Error::Arguments {
                    function: "fuzz".into(),
                    message: "expected (x, y, k)".into(),
                }),
            },
        )
    };
    let dynamic: JitFn<'_, Tensor> = make("dynamic");
    // Both kinds of dynamic: automatic (a dim a symbol once it varied)
    // and every dim a symbol from the first call.
    match input.len() % 2 {
        0 => dynamic.make_dynamic(),
        _ => dynamic.make_dynamic_all(),
    }
    let exact: JitFn<'_, Tensor> = make("exact");
    let mode = if body.sim {
        RunMode::Sim
    } else {
        RunMode::Host
    };
    let mut outcome = String::new();
    for (call, sizes) in body.sizes.iter().enumerate() {
        let shape = |d: &[u8]| -> Vec<usize> {
            d.iter()
                .map(|&s| if s == 3 { 1 } else { sizes[s as usize] })
                .collect()
        };
        let (sx, sy) = (shape(&body.dims[0]), shape(&body.dims[1]));
        if sx.iter().product::<usize>() > 1 << 16 || sy.iter().product::<usize>() > 1 << 16 {
            continue;
        }
        let x = Tensor::randn(&sx, call as u64);
        let y = Tensor::randn(&sy, 100 + call as u64);
        let d = tilejit::with_mode(mode, || dynamic.call((&x, &y, body.int_arg)));
        let e = tilejit::with_mode(mode, || exact.call((&x, &y, body.int_arg)));
        let at = || format!("call {call} at x{sx:?} y{sy:?} on {mode:?}: {body:?}");
        match (d, e) {
            (Ok(d), Ok(e)) => {
                let (dv, ev) = (d.to_vec::<f32>(), e.to_vec::<f32>());
                let bits = |v: &tilejit::Result<Vec<f32>>| {
                    v.as_ref()
                        .ok()
                        .map(|v| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>())
                };
                if d.shape() != e.shape() || bits(&dv) != bits(&ev) {
                    return Err(format!(
                        "dynamic gave {:?} {:?}, exact {:?} {:?}; {}",
                        d.shape(),
                        dv.map(|v| v.into_iter().take(8).collect::<Vec<_>>()),
                        e.shape(),
                        ev.map(|v| v.into_iter().take(8).collect::<Vec<_>>()),
                        at()
                    ));
                }
                outcome.push('o');
            }
            (Err(d), Err(e)) if d.kind() == e.kind() => outcome.push('e'),
            (Ok(_), Err(e)) => {
                return Err(format!("dynamic succeeded, exact failed ({e}); {}", at()))
            }
            (Err(d), Ok(_)) => {
                return Err(format!("dynamic failed ({d}), exact succeeded; {}", at()))
            }
            (Err(d), Err(e)) => {
                return Err(format!(
                    "dynamic failed with ({d}), exact with ({e}); {}",
                    at()
                ))
            }
        }
    }
    let class = match dynamic.shape_classes().first() {
        None => "no class".to_string(),
        Some((_, Ok(()))) => "generic".to_string(),
        Some((_, Err(why))) => super::sig("per size", why),
    };
    Ok(format!("{class} {outcome}"))
}
