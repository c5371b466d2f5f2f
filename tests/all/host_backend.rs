//! The host backend against the oracle: random fused graphs, every op at odd
//! sizes (1, 3, 50, 783, 4096), the inline math's accuracy over >= 1M points
//! per function, and the kernel cache (sharing across shapes and functions,
//! eviction, threads).

use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use tilejit::prelude::*;
use tilejit_ir::{
    Array, Axes, BinaryOp, DType as D, Graph, Lit, Op, ReduceOp, Shape, TensorType, UnaryOp,
};
use tilejit_runtime::{kernel_cache, Program};
use tilejit_tests::graphs::{build, dims, inputs, inputs_with};

pub(crate) fn as_f64(a: &Array) -> Vec<f64> {
    let b = a.buffer();
    (0..b.len()).map(|i| b.get(i).as_f64()).collect()
}

/// Equal up to `tol` relative to max(1, |want|); NaN matches NaN, inf matches
/// the same inf.
fn close(got: &[f64], want: &[f64], tol: f64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("length {} vs {}", got.len(), want.len()));
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * w.abs().max(1.0);
        if !ok {
            return Err(format!("element {i}: host {g} vs reference {w}"));
        }
    }
    Ok(())
}

fn check_program(g: Graph, args: &[Array], params: &[Lit], tol: f64) -> Result<(), String> {
    let text = g.to_string();
    let p = Program::compile(g).map_err(|e| format!("{e}\n{text}"))?;
    let host = p.run(args, params).map_err(|e| e.to_string())?;
    let reference = p.run_reference(args, params).map_err(|e| e.to_string())?;
    for (h, r) in host.iter().zip(&reference) {
        if h.ty() != r.ty() {
            return Err(format!("type {} vs {}", h.ty(), r.ty()));
        }
        close(&as_f64(h), &as_f64(r), tol)
            .map_err(|e| format!("{e}\n{}\n{}", p.optimized(), p.host().kernels()))?;
    }
    Ok(())
}

proptest! {
    // A fixed seed keeps CI deterministic; the cases still cover random
    // graphs, shapes 1..50 and NaN/inf/-0 inputs.
    #![proptest_config(ProptestConfig {
        cases: 250,
        rng_seed: RngSeed::Fixed(0x7115_3e17),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn host_matches_reference_on_random_graphs(
        rows in dims(),
        cols in dims(),
        instrs in proptest::collection::vec((any::<u8>(), any::<u16>(), any::<u16>(), any::<u8>()), 1..20),
        seed in any::<u64>(),
        param in prop_oneof![Just(1.0f64), Just(0.0), Just(-2.5)],
    ) {
        let g = build(rows, cols, &instrs);
        let args = inputs(rows, cols, seed);
        check_program(g, &args, &[Lit::Float(param)], 2e-3).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 120,
        rng_seed: RngSeed::Fixed(0x0f16_bf16),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The same random graphs in f16, bf16 and f64: every op's result
    /// rounds to its type on the host as in the reference.
    #[test]
    fn host_matches_reference_on_random_low_and_double_precision_graphs(
        dt in prop_oneof![Just(D::F16), Just(D::BF16), Just(D::F64)],
        rows in dims(),
        cols in dims(),
        instrs in proptest::collection::vec((any::<u8>(), any::<u16>(), any::<u16>(), any::<u8>()), 1..20),
        seed in any::<u64>(),
        param in prop_oneof![Just(1.0f64), Just(0.0), Just(-2.5)],
    ) {
        let g = tilejit_tests::graphs::build_typed(dt, rows, cols, &instrs);
        let args = tilejit_tests::graphs::inputs_typed(dt, rows, cols, seed);
        let tol = if dt == D::F64 { 1e-9 } else { 2e-2 };
        check_program(g, &args, &[Lit::Float(param)], tol).map_err(TestCaseError::fail)?;
    }

    /// The same random graphs in u8 and i8, exactly: wrapping, unsigned
    /// u8 compares and max/min (the param a literal of the dtype).
    #[test]
    fn host_matches_reference_on_random_small_int_graphs(
        dt in prop_oneof![Just(D::U8), Just(D::I8)],
        rows in dims(),
        cols in dims(),
        instrs in proptest::collection::vec((any::<u8>(), any::<u16>(), any::<u16>(), any::<u8>()), 1..20),
        seed in any::<u64>(),
        param in prop_oneof![Just(1.0f64), Just(0.0), Just(-2.5), Just(200.0)],
    ) {
        let g = tilejit_tests::graphs::build_typed(dt, rows, cols, &instrs);
        let args = tilejit_tests::graphs::inputs_typed(dt, rows, cols, seed);
        check_program(g, &args, &[Lit::from_f64(param, dt)], 0.0).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 40,
        rng_seed: RngSeed::Fixed(0x1096_0002),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random graphs over long rows: blocked sums, row scratch and
    /// multi-threaded row splits at sizes the small graphs never reach.
    #[test]
    fn host_matches_reference_on_random_graphs_with_long_rows(
        rows in prop_oneof![Just(1usize), Just(3), Just(9)],
        cols in prop_oneof![Just(20000usize), Just(70001)],
        instrs in proptest::collection::vec((any::<u8>(), any::<u16>(), any::<u16>(), any::<u8>()), 1..14),
        seed in any::<u64>(),
    ) {
        // No matmuls: their K would be the row length.
        let instrs: Vec<_> = instrs.into_iter().filter(|i| i.0 % 12 != 11).collect();
        let g = build(rows, cols, &instrs);
        // Half the cases without NaN/inf: rows this long almost surely hold
        // one, and a row reduction over it is NaN whatever the kernel does.
        let args = inputs_with(rows, cols, seed, seed % 2 == 0);
        check_program(g, &args, &[Lit::Float(1.0)], 1e-5).map_err(TestCaseError::fail)?;
    }
}

pub(crate) fn ty(d: D, dims: &[usize]) -> TensorType {
    TensorType::new(d, Shape::new(dims).unwrap())
}

/// `u(x)` for one input `x: d[n]`.
pub(crate) fn unary_graph(u: UnaryOp, d: D, n: usize) -> Graph {
    let mut g = Graph::new();
    let x = g
        .add(Op::Input {
            index: 0,
            ty: ty(d, &[n]),
        })
        .unwrap();
    let y = g.add(Op::Unary(u, x)).unwrap();
    g.outputs.push(y);
    g
}

/// `n` values of `d` in a mixed range (shared with the Sim backend's tests;
/// `salt` shifts the pattern so two inputs differ).
pub(crate) fn ramp(n: usize, d: D, salt: usize) -> Array {
    let v: Vec<f64> = (0..n)
        .map(|i| (((i + salt) * 7919) % 1000) as f64 / 250.0 - 2.0)
        .collect();
    match d {
        D::F64 => Array::from_vec(v, &[n]).unwrap(),
        D::I32 => Array::from_vec(v.iter().map(|&x| (x * 10.0) as i32).collect(), &[n]).unwrap(),
        D::I64 => Array::from_vec(v.iter().map(|&x| (x * 10.0) as i64).collect(), &[n]).unwrap(),
        // -128..128 wrapped: u8 values on both sides of 128, i8 of 0.
        D::U8 => {
            Array::from_vec(v.iter().map(|&x| (x * 64.0) as i64 as u8).collect(), &[n]).unwrap()
        }
        D::I8 => {
            Array::from_vec(v.iter().map(|&x| (x * 64.0) as i64 as i8).collect(), &[n]).unwrap()
        }
        D::F16 => {
            Array::from_vec(v.iter().map(|&x| half::f16::from_f64(x)).collect(), &[n]).unwrap()
        }
        D::BF16 => {
            Array::from_vec(v.iter().map(|&x| half::bf16::from_f64(x)).collect(), &[n]).unwrap()
        }
        _ => Array::from_vec(v.iter().map(|&x| x as f32).collect(), &[n]).unwrap(),
    }
}

/// The unary ops defined on `d`, as the op table says (all of them on
/// floats, the exact ones on integers).
pub(crate) fn unary_ops(d: D) -> Vec<UnaryOp> {
    UnaryOp::ALL.into_iter().filter(|u| u.accepts(d)).collect()
}

#[test]
fn every_op_at_odd_sizes_on_every_float_and_int_dtype() {
    for n in [1usize, 3, 50, 783, 4096] {
        for d in [D::F32, D::F64, D::F16, D::I32, D::I64, D::U8, D::I8] {
            let tol = if d == D::F16 { 2e-2 } else { 1e-5 };
            for u in unary_ops(d) {
                check_program(unary_graph(u, d, n), &[ramp(n, d, 0)], &[], tol)
                    .unwrap_or_else(|e| panic!("{u:?} {d} n={n}: {e}"));
            }
            for b in tilejit_ir::BinaryOp::ALL
                .into_iter()
                .filter(|b| b.accepts(d))
            {
                let mut g = Graph::new();
                let x = g
                    .add(Op::Input {
                        index: 0,
                        ty: ty(d, &[n]),
                    })
                    .unwrap();
                let r = g.add(Op::Reshape(x, Shape::new(&[n, 1]).unwrap())).unwrap();
                let t = g
                    .add(Op::Broadcast(r, Shape::new(&[n, 3]).unwrap()))
                    .unwrap();
                let c = g
                    .add(Op::Full {
                        value: Lit::from_f64(0.0, d),
                        ty: ty(d, &[n, 3]),
                    })
                    .unwrap();
                let y = g.add(Op::Binary(b, t, c)).unwrap();
                let s = g
                    .add(Op::Reduce(ReduceOp::Sum, y, Axes::from_axes(&[0])))
                    .unwrap();
                let m = g
                    .add(Op::Reduce(ReduceOp::Max, t, Axes::from_axes(&[1])))
                    .unwrap();
                g.outputs.extend([y, s, m]);
                check_program(
                    g,
                    &[ramp(n, d, 0)],
                    &[],
                    if d.is_float() { 1e-3 } else { 0.0 },
                )
                .unwrap_or_else(|e| panic!("{b:?} {d} n={n}: {e}"));
            }
        }
    }
}

/// Row max/min (and softmax, which starts with a max), and elementwise
/// maximum/minimum, where a NaN sits in
/// each position of the vector part and of the scalar tail, on rows of only
/// -inf, only +inf and mixed signed zeros, against the reference: the
/// vector loop folds with maxps/minps and tracks NaN lanes separately.
#[test]
fn row_max_min_keep_nan_inf_and_zeros() {
    let cols = 37; // two unrolled vector steps of 16 and a 5-element tail
    let mut rows: Vec<Vec<f32>> = Vec::new();
    for at in 0..cols {
        let mut r: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin() * 10.0).collect();
        r[at] = f32::NAN;
        rows.push(r);
    }
    rows.push(vec![f32::NEG_INFINITY; cols]);
    rows.push(vec![f32::INFINITY; cols]);
    rows.push(
        (0..cols)
            .map(|i| if i % 2 == 0 { 0.0 } else { -0.0 })
            .collect(),
    );
    rows.push(
        (0..cols)
            .map(|i| if i == 20 { f32::INFINITY } else { -(i as f32) })
            .collect(),
    );
    rows.push(
        (0..cols)
            .map(|i| if i == 35 { -1e30 } else { i as f32 })
            .collect(),
    );
    let n = rows.len();
    let data: Vec<f32> = rows.concat();
    // Elementwise maximum/minimum against the same values reversed, so NaN,
    // infinities and zeros meet every kind of partner in vector lanes.
    let rev: Vec<f32> = data.iter().rev().copied().collect();
    for op in [BinaryOp::Max, BinaryOp::Min] {
        let mut g = Graph::new();
        let a = g
            .add(Op::Input {
                index: 0,
                ty: ty(D::F32, &[n * cols]),
            })
            .unwrap();
        let b = g
            .add(Op::Input {
                index: 1,
                ty: ty(D::F32, &[n * cols]),
            })
            .unwrap();
        let r = g.add(Op::Binary(op, a, b)).unwrap();
        g.outputs.push(r);
        let args = [
            Array::from_vec(data.clone(), &[n * cols]).unwrap(),
            Array::from_vec(rev.clone(), &[n * cols]).unwrap(),
        ];
        check_program(g, &args, &[], 0.0).unwrap_or_else(|e| panic!("{op:?}: {e}"));
    }
    let t = Tensor::from_vec(data.clone(), &[n, cols]).unwrap();
    let x = Array::from_vec(data, &[n, cols]).unwrap();
    for op in [ReduceOp::Max, ReduceOp::Min] {
        let mut g = Graph::new();
        let i = g
            .add(Op::Input {
                index: 0,
                ty: ty(D::F32, &[n, cols]),
            })
            .unwrap();
        let r = g.add(Op::Reduce(op, i, Axes::from_axes(&[1]))).unwrap();
        g.outputs.push(r);
        check_program(g, std::slice::from_ref(&x), &[], 0.0)
            .unwrap_or_else(|e| panic!("{op:?}: {e}"));
    }
    let f = jit_fn!(|x: &Tensor| x.softmax(-1));
    let got = f.call(&t).unwrap();
    let want = f.handlers()[0]
        .program
        .run_reference(std::slice::from_ref(&x), &[])
        .unwrap();
    close(&as_f64(&got.to_array().unwrap()), &as_f64(&want[0]), 1e-6).unwrap();
}

#[test]
fn softmax_layernorm_matmul_at_odd_sizes() {
    for n in [1usize, 3, 50, 783] {
        let x = Tensor::randn(&[3, n], 1);
        let w = Tensor::randn(&[n, 5], 2);
        let g = Tensor::randn(&[n], 3);
        let b = Tensor::randn(&[n], 4);
        let f = jit_fn!(|x: &Tensor, w: &Tensor, g: &Tensor, b: &Tensor| {
            let s = x.softmax(-1);
            let l = x.layer_norm(g, b, 1e-5);
            ((&s + &l).matmul(w) + 1.0).gelu()
        });
        let got = f.call((&x, &w, &g, &b)).unwrap();
        let h = &f.handlers()[0];
        let want = h
            .program
            .run_reference(
                &[
                    x.to_array().unwrap(),
                    w.to_array().unwrap(),
                    g.to_array().unwrap(),
                    b.to_array().unwrap(),
                ],
                &[],
            )
            .unwrap();
        close(&as_f64(&got.to_array().unwrap()), &as_f64(&want[0]), 1e-4).unwrap();
    }
}

/// Max ulp distance between f32 results and the f64 function rounded to f32,
/// over `n` evenly spread points of [lo, hi].
fn ulp_sweep(u: UnaryOp, lo: f64, hi: f64, n: usize, f: fn(f64) -> f64) -> u32 {
    let xs: Vec<f32> = (0..n)
        .map(|i| (lo + (hi - lo) * i as f64 / n as f64) as f32)
        .collect();
    ulp_max(u, xs, f)
}

/// The largest ulp distance of `u` on the host from `f` rounded to f32.
fn ulp_max(u: UnaryOp, xs: Vec<f32>, f: fn(f64) -> f64) -> u32 {
    let n = xs.len();
    let p = Program::compile(unary_graph(u, D::F32, n)).unwrap();
    let out = p
        .run(&[Array::from_vec(xs.clone(), &[n]).unwrap()], &[])
        .unwrap();
    let got = out[0].as_slice::<f32>().unwrap();
    let ord = |v: f32| {
        let b = v.to_bits() as i32;
        if b < 0 {
            i32::MIN - b
        } else {
            b
        }
    };
    xs.iter()
        .zip(got)
        .map(|(&x, &g)| {
            let want = f(x as f64) as f32;
            (ord(g) as i64 - ord(want) as i64).unsigned_abs() as u32
        })
        .max()
        .unwrap()
}

#[test]
fn inline_math_is_accurate_over_a_million_points() {
    const N: usize = 1 << 20;
    let exp = ulp_sweep(UnaryOp::Exp, -87.0, 88.0, N, f64::exp);
    let log = ulp_sweep(UnaryOp::Log, 1e-30, 1e30, N, f64::ln);
    let log01 = ulp_sweep(UnaryOp::Log, 0.01, 10.0, N, f64::ln);
    let tanh = ulp_sweep(UnaryOp::Tanh, -10.0, 10.0, N, f64::tanh);
    let sig = ulp_sweep(UnaryOp::Sigmoid, -80.0, 80.0, N, |x| {
        1.0 / (1.0 + (-x).exp())
    });
    // gelu far into the positive tail, where its exp argument is clamped
    // (against the cancellation-free form of the same function). Its
    // negative tail is ill-conditioned: the f32 rounding of the exp
    // argument u ~ x^3 is amplified by |u|, so [-3, 0) allows more (13
    // measured).
    let gelu_f = |x: f64| x / (1.0 + (-2.0 * 0.7978845608 * (x + 0.044715 * x * x * x)).exp());
    let gelu = ulp_sweep(UnaryOp::Gelu, 0.0, 300.0, N, gelu_f);
    let gelu_neg = ulp_sweep(UnaryOp::Gelu, -3.0, 0.0, N, gelu_f);
    eprintln!(
        "max ulp: exp {exp}, log {log} / {log01}, tanh {tanh}, sigmoid {sig}, gelu {gelu} / {gelu_neg}"
    );
    assert!(
        exp <= 2 && log <= 4 && log01 <= 4 && tanh <= 4 && sig <= 4 && gelu <= 4 && gelu_neg <= 32,
        "exp {exp}, log {log}/{log01}, tanh {tanh}, sigmoid {sig}, gelu {gelu}/{gelu_neg}"
    );
}

/// sin and cos (the Cody-Waite reduction: exact `j pi/2` parts with FMA)
/// near 0, to 1e4 and to the end of the polynomial range (131072), then
/// past it where lanes take f64 calls; erf across both of its forms. The
/// figures are stated in `Tensor::sin`, `cos` and `erf`'s docs.
#[test]
fn sin_cos_erf_are_accurate_over_a_million_points() {
    const N: usize = 1 << 20;
    let mut report = String::new();
    let mut worst = 0;
    for (lo, hi) in [
        (-10.0, 10.0),
        (-1e4, 1e4),
        (-131072.0, 131072.0),
        (-1e6, 1e6),
    ] {
        let s = ulp_sweep(UnaryOp::Sin, lo, hi, N, f64::sin);
        let c = ulp_sweep(UnaryOp::Cos, lo, hi, N, f64::cos);
        report += &format!("sin {s} / cos {c} on [{lo}, {hi}]; ");
        worst = worst.max(s).max(c);
    }
    // The f32 values nearest each multiple of pi/2 up to 2^17 (and their
    // neighbours), where the reduced argument is tiny and its error shows.
    let xs: Vec<f32> = (1..83_000)
        .flat_map(|k| {
            let x = (k as f64 * std::f64::consts::FRAC_PI_2) as f32;
            let b = x.to_bits();
            [f32::from_bits(b - 1), x, f32::from_bits(b + 1)]
        })
        .collect();
    let near = ulp_max(UnaryOp::Sin, xs.clone(), f64::sin);
    let near_c = ulp_max(UnaryOp::Cos, xs, f64::cos);
    let erf = ulp_sweep(UnaryOp::Erf, -5.0, 5.0, N, tilejit_ir::scalar::erf);
    let erf_small = ulp_sweep(UnaryOp::Erf, -1e-3, 1e-3, N, tilejit_ir::scalar::erf);
    eprintln!("max ulp: {report}sin near k pi/2 {near}, cos {near_c}, erf {erf} / {erf_small}");
    assert!(
        worst <= 2 && near <= 2 && near_c <= 2 && erf <= 2 && erf_small <= 2,
        "{report}sin near k pi/2 {near}, cos {near_c}, erf {erf} / {erf_small}"
    );
}

/// The FMA-less sin/cos (five-part reduction, to 8192; f64 calls past it)
/// in a child process that generates code as for a CPU without FMA.
#[test]
fn sin_cos_without_fma_are_accurate() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "host_backend::no_fma_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TILEJIT_NO_FMA", "1")
        .env("TILEJIT_CACHE_DIR", "off")
        .env_remove("TILEJIT_RUN_MODE")
        .output()
        .unwrap();
    let line = tilejit_tests::child_report(&out, "NOFMA ");
    eprintln!("without FMA, max ulp: {line}");
}

/// [`sin_cos_without_fma_are_accurate`]'s child: does nothing unless
/// `TILEJIT_NO_FMA` is set.
#[test]
fn no_fma_child() {
    if std::env::var_os("TILEJIT_NO_FMA").is_none() {
        return;
    }
    assert!(!tilejit_codegen::host::cpu_features().fma);
    const N: usize = 1 << 20;
    let s = ulp_sweep(UnaryOp::Sin, -8192.0, 8192.0, N, f64::sin);
    let c = ulp_sweep(UnaryOp::Cos, -8192.0, 8192.0, N, f64::cos);
    let s_big = ulp_sweep(UnaryOp::Sin, -1e5, 1e5, N, f64::sin);
    let xs: Vec<f32> = (1..5216)
        .flat_map(|k| {
            let x = (k as f64 * std::f64::consts::FRAC_PI_2) as f32;
            let b = x.to_bits();
            [f32::from_bits(b - 1), x, f32::from_bits(b + 1)]
        })
        .collect();
    let near = ulp_max(UnaryOp::Sin, xs.clone(), f64::sin);
    let near_c = ulp_max(UnaryOp::Cos, xs, f64::cos);
    println!("NOFMA sin {s} / cos {c} on [-8192, 8192], sin {s_big} on [-1e5, 1e5], near k pi/2 sin {near} / cos {near_c}");
    assert!(s <= 2 && c <= 2 && s_big <= 2 && near <= 2 && near_c <= 2);
}

#[test]
fn special_values_follow_ieee() {
    let x = Tensor::from_vec(
        vec![
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            0.0,
            100.0,
            -120.0,
        ],
        &[7],
    )
    .unwrap();
    let e = x.exp().to_vec::<f32>().unwrap();
    assert!(
        e[0].is_nan()
            && e[1] == f32::INFINITY
            && e[2] == 0.0
            && e[3] == 1.0
            && e[5] == f32::INFINITY
            && e[6] == 0.0,
        "{e:?}"
    );
    let l = x.log().to_vec::<f32>().unwrap();
    assert!(
        l[0].is_nan() && l[1] == f32::INFINITY && l[2].is_nan() && l[3] == f32::NEG_INFINITY,
        "{l:?}"
    );
    let t = x.tanh().to_vec::<f32>().unwrap();
    assert!(
        t[0].is_nan() && t[1] == 1.0 && t[2] == -1.0 && t[3] == 0.0 && t[3].is_sign_negative(),
        "{t:?}"
    );
    let r = x.relu().to_vec::<f32>().unwrap();
    assert!(
        r[0].is_nan() && r[2] == 0.0 && r[3] == 0.0 && r[3].is_sign_positive(),
        "{r:?}"
    );
}

/// The inline math at its edges (NaN, infinities, signed zeros, where exp
/// overflows or underflows, where gelu/sigmoid/tanh saturate) against the
/// reference interpreter's f64 math: within 4 ulp, both NaN, or within
/// 1e-30 in a saturating tail (the reference evaluates gelu as written,
/// `0.5x(1 + tanh(u))`, which cancels to -0 at x = -9.5 where the true value
/// and ours are -6.7e-33; sigmoid's true value at -88.5 is subnormal).
#[test]
fn inline_math_edges_match_the_reference() {
    let xs: Vec<f32> = vec![
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        0.625,
        -0.625,
        9.5,
        -9.5,
        20.0,
        -20.0,
        44.0,
        -44.0,
        87.0,
        -87.0,
        -87.5,
        88.0,
        88.38,
        88.5,
        88.72,
        88.8,
        -88.5,
        -103.0,
        -150.0,
        1e30,
        -1e30,
    ];
    let n = xs.len();
    let input = Array::from_vec(xs.clone(), &[n]).unwrap();
    for u in [
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Gelu,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Erf,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Sign,
    ] {
        let p = Program::compile(unary_graph(u, D::F32, n)).unwrap();
        let got = p.run(std::slice::from_ref(&input), &[]).unwrap();
        let want = p.run_reference(std::slice::from_ref(&input), &[]).unwrap();
        let (got, want) = (
            got[0].as_slice::<f32>().unwrap(),
            want[0].as_slice::<f32>().unwrap(),
        );
        // gelu's tail is e^(2u) of an f32-rounded `2u` (up to ~104 there):
        // about one ulp per unit of |2u| (`exp_range.rs` states it).
        let limit = if u == UnaryOp::Gelu { 256 } else { 4 };
        for ((x, g), w) in xs.iter().zip(got).zip(want) {
            let ulps = (g.to_bits() as i64 - w.to_bits() as i64).unsigned_abs();
            let ok = (g.is_nan() && w.is_nan())
                || g == w
                || (g.is_sign_negative() == w.is_sign_negative() && ulps <= limit)
                // Subnormal results: a few steps of 2^-149 (issue 35: a
                // looser 1e-30 here let sigmoid's 0 below x = -88.7 pass).
                || (g - w).abs() <= 4.0 * f32::from_bits(1);
            assert!(ok, "{u:?}({x}) = {g:e}, reference {w:e}");
        }
    }
}

#[tilejit::jit]
fn bias_relu_shapes(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    (x * w + b).relu() - 0.123456
}

#[test]
fn a_new_shape_reuses_the_compiled_kernel() {
    // Host kernels and their launch counts are what this test is about,
    // whatever TILEJIT_RUN_MODE says.
    let _host = tilejit::mode::scoped_host();
    for n in (1..=20).map(|i| i * 1000) {
        let x = Tensor::randn(&[n], n as u64);
        let y = bias_relu_shapes(&x, &x, &x).unwrap();
        assert_eq!(y.shape(), &[n]);
    }
    let handlers = bias_relu_shapes::jit().handlers();
    assert_eq!(handlers.len(), 20, "one program per shape");
    let keys: Vec<String> = handlers
        .iter()
        .map(|h| h.program.host().code()[0].key.clone())
        .collect();
    assert!(
        keys.iter().all(|k| *k == keys[0]),
        "one kernel for 20 shapes: {keys:?}"
    );
    let e = kernel_cache()
        .entries()
        .into_iter()
        .find(|e| e.key == keys[0]);
    if let Some(e) = e {
        assert_eq!(e.name, "fused_mul_add_relu_sub");
        assert!(e.launches >= 20 && e.hits >= 19, "{e:?}");
        let d = kernel_cache().details(&e.key).unwrap();
        assert!(
            d.kernel_ir.contains("relu") && d.clif.contains("function") && !d.disasm.is_empty()
        );
    }
}

#[test]
fn evicted_kernels_keep_working_and_are_counted() {
    let f = jit_fn!(|a: &Tensor| (a * 3.25).exp() + 0.987654);
    let x = Tensor::randn(&[64], 9);
    let first = f.call((&x,)).unwrap().to_vec::<f32>().unwrap();
    let before = kernel_cache().stats().evictions;
    kernel_cache().set_capacity(0, 0);
    assert!(kernel_cache().stats().evictions > before);
    kernel_cache().set_capacity(4096, 256 << 20);
    // The program still holds its kernel.
    assert_eq!(f.call((&x,)).unwrap().to_vec::<f32>().unwrap(), first);
    let table = kernel_cache().to_string();
    assert!(table.starts_with("kernel cache:"), "{table}");
}

/// Code generation options are part of a kernel's cache key: each option
/// set compiles its own entry (never a stale one made under other options),
/// the same set finds the same entry, and every variant computes the same
/// values. The key holds the options as they apply to the kernel: at this
/// size `StreamStores::Large` is `Off`, one entry for both. (The CPU's
/// features are in the key too: the kernel cache's unit test
/// `an_entry_for_other_cpu_features_is_not_reused` forges an entry made
/// for other features.)
#[test]
fn codegen_options_are_part_of_the_kernel_key() {
    use tilejit_runtime::{BlockMath, CodegenOptions, HostProgram, StreamStores};
    // A kernel no other test builds (its literal is this test's own).
    let g = tilejit_ir::text::parse(
        "graph {
  %0 = input 0 : f32[3,37]
  %1 = full 0.314159 : f32[3,37]
  %2 = mul %0, %1 : f32[3,37]
  %3 = tanh %2 : f32[3,37]
  return %3
}",
    )
    .unwrap();
    let prog = tilejit_ir::kernel::fuse(&g).unwrap();
    let dtype_of = |b: tilejit_ir::kernel::BufId| prog.buffers[b.0 as usize].ty.dtype;
    let variants = [
        CodegenOptions::default(),
        CodegenOptions {
            optimize: false,
            ..CodegenOptions::default()
        },
        CodegenOptions {
            block_math: BlockMath::Off,
            ..CodegenOptions::default()
        },
        CodegenOptions {
            stream_stores: StreamStores::Always,
            ..CodegenOptions::default()
        },
    ];
    let key = |opts| {
        kernel_cache()
            .get_or_compile(&prog.kernels[0], &dtype_of, opts, "test")
            .unwrap()
            .key
            .clone()
    };
    let keys: Vec<String> = variants.iter().map(|&o| key(o)).collect();
    for (i, a) in keys.iter().enumerate() {
        assert!(!keys[i + 1..].contains(a), "{keys:?}");
    }
    assert_eq!(key(variants[0]), keys[0], "same options, same entry");
    let off = CodegenOptions {
        stream_stores: StreamStores::Off,
        ..CodegenOptions::default()
    };
    assert_eq!(key(off), keys[0], "Large is Off at this size");
    let x = Tensor::randn(&[3, 37], 31).to_array().unwrap();
    let want = Program::compile(g.clone())
        .unwrap()
        .run_reference(std::slice::from_ref(&x), &[])
        .unwrap();
    for opts in variants {
        let got = HostProgram::compile_with(&g, opts)
            .unwrap()
            .run(std::slice::from_ref(&x), &[])
            .unwrap();
        let (got, want) = (
            got[0].as_slice::<f32>().unwrap(),
            want[0].as_slice::<f32>().unwrap(),
        );
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-6, "{opts:?}: {g} vs {w}");
        }
    }
}

#[test]
fn many_threads_compile_and_run_the_same_kernels() {
    let x = Tensor::randn(&[300, 70], 5);
    let want: Vec<f32> = x.softmax(-1).to_vec().unwrap();
    std::thread::scope(|s| {
        for i in 0..8 {
            let (x, want) = (&x, &want);
            s.spawn(move || {
                let f = jit_fn!(|a: &Tensor| a.softmax(-1));
                for _ in 0..5 {
                    let got: Vec<f32> = f.call((x,)).unwrap().to_vec().unwrap();
                    assert_eq!(&got, want, "thread {i}");
                }
            });
        }
    });
}

/// The one unsafe entry point refuses every call that could touch memory
/// outside its buffers, on both the per-call check and the check done once
/// for fixed arguments.
#[test]
fn kernel_calls_are_bounds_checked() {
    use tilejit_codegen::host::{compile, BufArg, CodegenOptions};
    // y = x * z over [3, 5] with x broadcast from [5]: accesses with a zero
    // stride and with full ones.
    let mut g = Graph::new();
    let x = g
        .add(Op::Input {
            index: 0,
            ty: ty(D::F32, &[5]),
        })
        .unwrap();
    let b = g
        .add(Op::Broadcast(x, Shape::new(&[3, 5]).unwrap()))
        .unwrap();
    let z = g
        .add(Op::Input {
            index: 1,
            ty: ty(D::F32, &[3, 5]),
        })
        .unwrap();
    let y = g.add(Op::Binary(tilejit_ir::BinaryOp::Mul, b, z)).unwrap();
    g.outputs.push(y);
    let prog = tilejit_ir::kernel::fuse(&g).unwrap();
    assert_eq!(prog.kernels.len(), 1, "{prog:?}");
    let k = &prog.kernels[0];
    let dtype_of = |b: tilejit_ir::kernel::BufId| prog.buffers[b.0 as usize].ty.dtype;
    let code = compile(k, &dtype_of, CodegenOptions::default()).unwrap();
    let layout = code.layout();
    let args = layout.args(k, &[]);
    let checked = code.check_args(args.clone()).unwrap();
    let units = k.units();
    // Local buffers: sized from their declarations.
    let mut store: Vec<Vec<f32>> = k
        .local_buffers()
        .iter()
        .map(|&b| {
            let n = prog.buffers[b.0 as usize].ty.shape.numel();
            (0..n).map(|i| i as f32).collect()
        })
        .collect();
    let written: Vec<bool> = layout.written.clone();
    // Calls the kernel both ways (checked per call, and with arguments
    // checked once) on buffers lent from `store` as a safe caller must:
    // the first `len[i]` elements of buffer i, writable where `writable[i]`.
    let calls = |store: &mut [Vec<f32>], len: &[usize], writable: &[bool], start, end| {
        let mut bufs: Vec<BufArg<'_>> = store
            .iter_mut()
            .zip(len.iter().zip(writable))
            .map(|(v, (&n, &w))| {
                if w {
                    BufArg::write(&mut v[..n])
                } else {
                    BufArg::read(&v[..n])
                }
            })
            .collect();
        [
            code.call(&mut bufs, &args, start, end),
            code.call_checked(&mut bufs, &checked, start, end),
        ]
        .map(|r| r.map_err(|e| e.to_string()))
    };
    let full: Vec<usize> = store.iter().map(Vec::len).collect();
    // Correct calls run, both ways.
    for r in calls(&mut store, &full, &written, 0, units) {
        r.unwrap();
    }
    let out = written.iter().position(|&w| w).unwrap();
    let xi = store.iter().position(|v| v.len() == 5).unwrap();
    let zi = (0..store.len()).find(|&i| i != out && i != xi).unwrap();
    for i in 0..15 {
        assert_eq!(store[out][i], store[xi][i % 5] * store[zi][i]);
    }
    // Each bad call is refused before any native code runs, by both checks.
    let mut expect_err = |len: &[usize], writable: &[bool], start, end, what: &str| {
        for r in calls(&mut store, len, writable, start, end) {
            let m = r.unwrap_err();
            assert!(m.contains(what), "{m} (wanted {what})");
        }
    };
    for (i, w) in written.iter().enumerate() {
        let mut short = full.clone();
        short[i] -= 1;
        expect_err(&short, &written, 0, units, "reaches");
        if *w {
            let mut ro = written.clone();
            ro[i] = false;
            expect_err(&full, &ro, 0, units, "not writable");
        }
    }
    expect_err(&full[..full.len() - 1], &written, 0, units, "buffers given");
    expect_err(&full, &written, 0, units + 1, "exceeds");
    // A range that touches nothing needs nothing.
    let none = vec![0; full.len()];
    for (start, end) in [(1, 1), (2, 2)] {
        for r in calls(&mut store, &none, &written, start, end) {
            r.unwrap();
        }
    }
    // Negative strides and dims are refused by both checks.
    let mut neg = args.clone();
    neg[0] = -1;
    assert!(code.check_args(neg).is_err());
    // Arguments checked for one kernel's code are refused by another's,
    // even one compiled from the same kernel.
    let other = compile(k, &dtype_of, CodegenOptions::default()).unwrap();
    let mut bufs: Vec<BufArg<'_>> = store.iter_mut().map(|v| BufArg::write(v)).collect();
    let e = other
        .call_checked(&mut bufs, &checked, 0, units)
        .unwrap_err()
        .to_string();
    assert!(e.contains("another kernel"), "{e}");
}

/// What safe code can build cannot reach outside its storage: a buffer is
/// only ever a borrowed slice, a piece of one is a piece of that slice,
/// and a parallel launch refuses (runs as one call) a store that two units
/// would both write.
#[test]
fn safe_kernel_arguments_stay_inside_their_storage() {
    use tilejit_codegen::host::{compile, BufArg, CodegenOptions, KernelArgs};
    // y = x - sum(x, row) over [4, 8]: a row kernel.
    let mut g = Graph::new();
    let x = g
        .add(Op::Input {
            index: 0,
            ty: ty(D::F32, &[4, 8]),
        })
        .unwrap();
    let r = g
        .add(Op::Reduce(ReduceOp::Sum, x, Axes::from_axes(&[1])))
        .unwrap();
    let r = g
        .add(Op::Broadcast(r, Shape::new(&[4, 8]).unwrap()))
        .unwrap();
    let e = g.add(Op::Binary(tilejit_ir::BinaryOp::Sub, x, r)).unwrap();
    g.outputs.push(e);
    let prog = tilejit_ir::kernel::fuse(&g).unwrap();
    let k = &prog.kernels[0];
    let dtype_of = |b: tilejit_ir::kernel::BufId| prog.buffers[b.0 as usize].ty.dtype;
    let code = compile(k, &dtype_of, CodegenOptions::default()).unwrap();
    let args = code.layout().args(k, &[]);
    let input: Vec<f32> = (0..32).map(|i| i as f32 / 8.0).collect();
    // Pieces of a buffer tile it exactly and are no bigger than asked.
    let mut whole = vec![0f32; 32];
    let pieces = BufArg::write(&mut whole).split(40);
    let sizes: Vec<usize> = pieces.iter().map(BufArg::bytes).collect();
    assert_eq!(sizes, [40, 40, 40, 8]);
    assert!(pieces.iter().all(|p| p.writable() && p.share().is_none()));
    // A launch split into chunks of one unit computes what one call does,
    // and an output one element short is refused before anything runs.
    let mut out = vec![f32::NAN; 32];
    let mut bufs = [BufArg::read(&input), BufArg::write(&mut out)];
    code.launch(&mut bufs, KernelArgs::Raw(&args), k.units(), 1, None)
        .unwrap();
    for (i, o) in out.iter().enumerate() {
        let row: f32 = input[i / 8 * 8..][..8].iter().sum();
        assert_eq!(*o, input[i] - row, "element {i}");
    }
    let mut short = vec![7f32; 31];
    let mut bufs = [BufArg::read(&input), BufArg::write(&mut short)];
    let e = code
        .launch(&mut bufs, KernelArgs::Raw(&args), k.units(), 1, None)
        .unwrap_err();
    assert!(e.to_string().contains("reaches"), "{e}");
    assert!(short.iter().all(|&v| v == 7.0), "nothing ran");
    // A stop that says true before the chunks start: none of them runs.
    let mut untouched = vec![7f32; 32];
    let mut bufs = [BufArg::read(&input), BufArg::write(&mut untouched)];
    let stop = || true;
    let e = code
        .launch(&mut bufs, KernelArgs::Raw(&args), k.units(), 1, Some(&stop))
        .unwrap_err();
    assert!(e.to_string().contains("was stopped"), "{e}");
    assert!(untouched.iter().all(|&v| v == 7.0), "nothing ran");
    // Units that would write the same elements (a zero row stride on the
    // store) are not split: a parallel launch would race on them.
    let layout = code.layout();
    assert!(layout.writes_disjoint_units(&args));
    let mut same_rows = args.clone();
    let store_stride = layout.stride_slot(layout.loads);
    same_rows[store_stride] = 0;
    assert!(!layout.writes_disjoint_units(&same_rows));
    let mut overlapping = args.clone();
    overlapping[store_stride] = 4; // rows of 8 columns, 4 apart
    assert!(!layout.writes_disjoint_units(&overlapping));
}

/// A kernel that loads and stores one buffer at inner stride 2, rows
/// interleaved (row stride 1): each unit writes only its own elements,
/// but the vector load of stride 2 reads two overlapping runs, whose odd
/// lanes are the other row's. Its units must not run at once (a review
/// found they did: a data race, though the stray lanes were discarded);
/// the launch still computes each row's sum into its own elements.
#[test]
fn stride_two_loads_of_a_written_buffer_are_not_split_across_threads() {
    use tilejit_codegen::host::{compile, BufArg, CodegenOptions, KernelArgs};
    use tilejit_ir::kernel::{Access, BufId, Expr, ExprId, ExprNode, Kernel, Stage};
    let acc = Access {
        buf: BufId(0),
        strides: vec![1, 2],
        offset: 0,
    };
    let k = Kernel {
        name: "interleaved_sums".into(),
        domain: vec![2, 1024],
        loads: vec![acc.clone()],
        exprs: vec![
            ExprNode {
                expr: Expr::Load(0),
                dtype: D::F32,
            },
            ExprNode {
                expr: Expr::Row(0),
                dtype: D::F32,
            },
        ],
        scratch: vec![],
        matmul: None,
        ops: vec![],
        stages: vec![
            Stage::Reduce {
                op: ReduceOp::Sum,
                value: ExprId(0),
            },
            Stage::Store {
                access: acc,
                value: ExprId(1),
            },
        ],
    };
    let code = compile(&k, &|_| D::F32, CodegenOptions::default()).unwrap();
    let args = code.layout().args(&k, &[]);
    assert!(!code.layout().writes_disjoint_units(&args));
    // Row r is elements r, r + 2, ...: the evens hold 1, the odds 2.
    let mut x: Vec<f32> = (0..2048).map(|i| (i % 2 + 1) as f32).collect();
    code.launch(
        &mut [BufArg::write(&mut x)],
        KernelArgs::Raw(&args),
        2,
        1,
        None,
    )
    .unwrap();
    // Each row's store sees its own sum (its reduce ran before the store).
    assert!(x.iter().step_by(2).all(|&v| v == 1024.0), "row 0");
    assert!(x.iter().skip(1).step_by(2).all(|&v| v == 2048.0), "row 1");
}

/// Big enough matmuls run as one row tile per pool thread, the epilogue
/// right after each tile's product: odd row counts (uneven last tile),
/// epilogues reading a bias (broadcast over rows) and a residual (row by
/// row), one at exactly the size where tiling starts, and one with a
/// per-row operand (which falls back to the untiled launch), all against
/// the reference.
#[test]
fn row_tiled_matmul_epilogues_match_the_reference() {
    for (m, k, n) in [
        (3usize, 300usize, 300usize),
        (67, 131, 97),
        (64, 64, 64),
        (2, 1024, 129),
    ] {
        let a = Tensor::randn(&[m, k], 1);
        let w = Tensor::randn(&[k, n], 2);
        let bias = Tensor::randn(&[n], 3);
        let res = Tensor::randn(&[m, n], 4);
        let col = Tensor::randn(&[m, 1], 5);
        let f = jit_fn!(|a: &Tensor, w: &Tensor, bias: &Tensor, res: &Tensor| {
            (a.matmul(w) + bias).gelu() + res
        });
        let g = jit_fn!(|a: &Tensor, w: &Tensor, col: &Tensor| (a.matmul(w) * col).relu());
        let arrays = |ts: &[&Tensor]| ts.iter().map(|t| t.to_array().unwrap()).collect::<Vec<_>>();
        let got = f.call((&a, &w, &bias, &res)).unwrap();
        let want = f.handlers()[0]
            .program
            .run_reference(&arrays(&[&a, &w, &bias, &res]), &[])
            .unwrap();
        close(&as_f64(&got.to_array().unwrap()), &as_f64(&want[0]), 1e-4)
            .unwrap_or_else(|e| panic!("[{m},{k}]@[{k},{n}] + bias, gelu, + residual: {e}"));
        let got = g.call((&a, &w, &col)).unwrap();
        let want = g.handlers()[0]
            .program
            .run_reference(&arrays(&[&a, &w, &col]), &[])
            .unwrap();
        close(&as_f64(&got.to_array().unwrap()), &as_f64(&want[0]), 1e-4)
            .unwrap_or_else(|e| panic!("[{m},{k}]@[{k},{n}] * per-row column: {e}"));
    }
}

/// A graph's own conv weights, `[c * 9, o]` rows (not OIHW read
/// transposed, as the frontends lay them), as an argument: Winograd reads
/// them through a view whose taps are `o` apart, per call (a 28x28 image)
/// and kept from the second call on (a 7x7 one), where the transform
/// refused that view: the first call of one, the second of the other,
/// failed (found by the `compile` fuzz target).
#[test]
fn winograd_takes_a_graph_s_own_weight_layout() {
    for hw in [28, 7] {
        let text = format!(
            "graph {{\n  %0 = input 0 : f32[1,16,{hw},{hw}]\n  %1 = input 1 : f32[144,32]\n  \
             %2 = conv %0, %1 window=[3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1] : f32[1,{hw},{hw},32]\n  \
             %3 = permute %2 perm=[0, 3, 1, 2] : f32[1,32,{hw},{hw}]\n  return %3\n}}\n"
        );
        let g = tilejit_ir::text::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let value = |i: usize, s: usize| ((i * 37 + s * 11) % 29) as f32 / 14.0 - 1.0;
        let x: Vec<f32> = (0..16 * hw * hw).map(|i| value(i, 1)).collect();
        let w: Vec<f32> = (0..144 * 32).map(|i| value(i, 2) / 12.0).collect();
        let args = [
            Array::from_vec(x, &[1, 16, hw, hw]).unwrap(),
            Array::from_vec(w, &[144, 32]).unwrap(),
        ];
        let p = Program::compile(g).unwrap();
        let want = p.run_reference(&args, &[]).unwrap();
        for call in 0..3 {
            let got = p
                .run(&args, &[])
                .unwrap_or_else(|e| panic!("{hw}x{hw}, call {call}: {e}"));
            close(&as_f64(&got[0]), &as_f64(&want[0]), 1e-5)
                .unwrap_or_else(|e| panic!("{hw}x{hw}, call {call}: {e}"));
        }
    }
}
