//! `prod`, `max`/`min` over bools (any/all), `argmax` and `argmin` against
//! numpy's values, eager and inside a jit function, on the reference, Host,
//! Sim and Verify, over each axis of a rank-3 tensor and at sizes 0, 1,
//! odd and large; then their bad input.
//!
//! The expected values are numpy 1.x/2.x output pasted as literals; the
//! inputs are built here with the same formulas (`i = np.arange(30)`):
//!
//! ```python
//! xf = (((i % 7) - 3) * 0.5 + 0.25).reshape(2, 3, 5)        # floats
//! xi = ((i % 7) - 3).reshape(2, 3, 5)                        # integers
//! xb = (((i % 3) == 0) | ((i % 7) == 1)).reshape(2, 3, 5)    # bools
//! xa = ((i * 7) % 11 % 4).reshape(2, 3, 5)                   # ties
//! xn = xa.astype(float); xn[0,0,0] = xn[0,1,3] = xn[1,2,0] = xn[1,2,4] = np.nan
//! [np.prod(xf, axis=a) for a in range(3)]; [np.prod(xi, axis=a) ...]
//! [np.any(xb, axis=a) ...]; [np.all(xb, axis=a) ...]
//! [np.argmax(xa, axis=a) ...]; [np.argmin(xa, axis=a) ...]; same for xn, xb
//! np.prod(np.array([100000, 100000, 3], np.int32), dtype=np.int32)  # -64771072
//! np.prod(np.array([3**20, 3**20, 5], np.int64))       # 5448095074155989157
//! j = np.arange(100_003)
//! big = (1.0 + ((j % 13) - 6) * 1e-4).astype(np.float32)
//! np.prod(big.astype(np.float64))   # 0.990941356382224 (np.prod(big): 0.99096989)
//! v = ((j * 7919) % 100_003).astype(np.float32); np.argmax(v), np.argmin(v)  # 52685, 0
//! ```

use tilejit::prelude::*;

type Op = fn(&Tensor, isize) -> Tensor;

const MODES: [RunMode; 4] = [
    RunMode::Reference,
    RunMode::Host,
    RunMode::Sim,
    RunMode::Verify,
];

fn from_f64(v: &[f64], shape: &[usize], dtype: DType) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap().cast(dtype)
}

fn seq(n: usize, f: impl Fn(usize) -> f64) -> Vec<f64> {
    (0..n).map(f).collect()
}

fn xf(dtype: DType) -> Tensor {
    let v = seq(30, |i| ((i % 7) as f64 - 3.0) * 0.5 + 0.25);
    from_f64(&v, &[2, 3, 5], dtype)
}

fn xi(dtype: DType) -> Tensor {
    from_f64(&seq(30, |i| (i % 7) as f64 - 3.0), &[2, 3, 5], dtype)
}

fn xb() -> Tensor {
    let v = seq(30, |i| (i % 3 == 0 || i % 7 == 1) as u8 as f64);
    from_f64(&v, &[2, 3, 5], DType::Bool)
}

fn xa(dtype: DType, nans: bool) -> Tensor {
    let mut v = seq(30, |i| ((i * 7) % 11 % 4) as f64);
    if nans {
        for i in [0, 8, 25, 29] {
            v[i] = f64::NAN;
        }
    }
    from_f64(&v, &[2, 3, 5], dtype)
}

/// Runs `op(x, axis)` eagerly and in a jit function in every mode, and
/// records in `failures` each result whose dtype, shape or values (within
/// `tol` relative to max(|want|, 1); NaN matches NaN) differ from numpy's.
#[allow(clippy::too_many_arguments)]
fn check(
    what: &str,
    op: Op,
    x: &Tensor,
    axis: isize,
    dtype: DType,
    shape: &[usize],
    want: &[f64],
    tol: f64,
    failures: &mut Vec<String>,
) {
    let f = jit_fn!(move |x: &Tensor, ax: i64| op(x, ax as isize));
    for mode in MODES {
        for (how, got) in [
            ("eager", with_mode(mode, || op(x, axis)).into_result()),
            ("jit", with_mode(mode, || f.call((x, axis as i64)))),
        ] {
            let at = format!("{what} {:?} axis {axis} {how} {mode:?}", x.dtype());
            let got = match got {
                Ok(t) => t,
                Err(e) => {
                    failures.push(format!("{at}: {e}"));
                    continue;
                }
            };
            if got.dtype() != dtype || got.shape() != shape {
                failures.push(format!(
                    "{at}: {:?}{:?}, want {dtype:?}{shape:?}",
                    got.dtype(),
                    got.shape()
                ));
                continue;
            }
            let g = got.cast(DType::F64).to_vec::<f64>().unwrap();
            let bad = g.iter().zip(want).position(|(g, w)| {
                !(g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * w.abs().max(1.0))
            });
            if let Some(i) = bad {
                failures.push(format!("{at}: element {i} is {} want {}", g[i], want[i]));
            }
        }
    }
}

fn assert_none(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The shape of a `[2, 3, 5]` tensor reduced over `axis` without keepdim.
fn without(axis: usize) -> Vec<usize> {
    let mut s = vec![2, 3, 5];
    s.remove(axis);
    s
}

#[test]
fn prod_matches_numpy_over_each_axis_in_every_dtype() {
    let float: [&[f64]; 3] = [
        &[
            0.9375, 0.1875, -0.0625, 0.1875, 0.9375, 2.1875, -2.1875, 0.9375, 0.1875, -0.0625,
            0.1875, 0.9375, 2.1875, -2.1875, 0.9375,
        ],
        &[
            -0.390625, -0.984375, 0.390625, -0.328125, 0.234375, -0.984375, 0.390625, -0.328125,
            0.234375, -0.234375,
        ],
        &[
            -0.0439453125,
            -0.5126953125,
            -0.5126953125,
            0.0439453125,
            -0.1025390625,
            1.5380859375,
        ],
    ];
    let int: [&[f64]; 3] = [
        &[
            6.0, 2.0, 0.0, 0.0, 2.0, 6.0, -9.0, 6.0, 2.0, 0.0, 0.0, 2.0, 6.0, -9.0, 6.0,
        ],
        &[0.0, -6.0, 6.0, 0.0, 3.0, -6.0, 6.0, 0.0, 3.0, 0.0],
        &[0.0, -36.0, 0.0, 0.0, 0.0, 36.0],
    ];
    let prod: Op = |x, a| x.prod(a, false);
    let mut failures = Vec::new();
    for a in 0..3 {
        for d in [DType::F32, DType::F64] {
            check(
                "prod",
                prod,
                &xf(d),
                a as isize,
                d,
                &without(a),
                float[a],
                1e-6,
                &mut failures,
            );
        }
        for d in [DType::I32, DType::I64] {
            check(
                "prod",
                prod,
                &xi(d),
                a as isize,
                d,
                &without(a),
                int[a],
                0.0,
                &mut failures,
            );
        }
    }
    // Negative axis and keepdim.
    let keep: Op = |x, a| x.prod(a, true);
    check(
        "prod keepdim",
        keep,
        &xf(DType::F32),
        -1,
        DType::F32,
        &[2, 3, 1],
        float[2],
        1e-6,
        &mut failures,
    );
    // f16 and bf16: these products are exact in them.
    for d in [DType::F16, DType::BF16] {
        check(
            "prod",
            prod,
            &xf(d),
            1,
            d,
            &without(1),
            float[1],
            1e-2,
            &mut failures,
        );
    }
    assert_none(failures);
}

#[test]
fn prod_of_empty_and_single_element_axes() {
    let prod: Op = |x, a| x.prod(a, false);
    let mut failures = Vec::new();
    for d in [DType::F32, DType::F64, DType::I32, DType::I64] {
        let empty = Tensor::zeros(&[2, 0, 3], d);
        // np.prod(np.zeros((2, 0, 3)), axis=1): ones((2, 3)).
        check(
            "prod empty",
            prod,
            &empty,
            1,
            d,
            &[2, 3],
            &[1.0; 6],
            0.0,
            &mut failures,
        );
        check(
            "prod of empty",
            prod,
            &empty,
            0,
            d,
            &[0, 3],
            &[],
            0.0,
            &mut failures,
        );
        let one = from_f64(&[2.0], &[1, 1, 1], d);
        for a in 0..3 {
            check(
                "prod single",
                prod,
                &one,
                a,
                d,
                &[1, 1],
                &[2.0],
                0.0,
                &mut failures,
            );
        }
    }
    assert_none(failures);
}

#[test]
fn prod_wraps_integers_like_numpy() {
    let prod: Op = |x, a| x.prod(a, false);
    for mode in MODES {
        let x = Tensor::from_vec(vec![100_000i32, 100_000, 3], &[3]).unwrap();
        let got = with_mode(mode, || prod(&x, 0)).to_vec::<i32>().unwrap();
        assert_eq!(got, [-64_771_072], "{mode:?}");
        let x = Tensor::from_vec(vec![3i64.pow(20), 3i64.pow(20), 5], &[3]).unwrap();
        let f = jit_fn!(|x: &Tensor| x.prod(0, false));
        let got = f
            .with_mode(mode)
            .call((&x,))
            .unwrap()
            .to_vec::<i64>()
            .unwrap();
        assert_eq!(got, [5_448_095_074_155_989_157], "{mode:?}");
    }
}

/// A product of 100,003 f32 values near 1, against numpy's f64 product of
/// the same f32 values. Measured relative errors: Host (one f64
/// accumulator, one rounding) 1.1e-8, Sim (f64 per tile, the tiles' f32
/// partials multiplied) 1.7e-7; numpy's own f32 `np.prod` is off by 2.9e-5.
#[test]
fn prod_of_a_long_f32_row_stays_close_to_the_f64_product() {
    let n = 100_003;
    let v: Vec<f32> = (0..n)
        .map(|j| (1.0 + ((j % 13) as f64 - 6.0) * 1e-4) as f32)
        .collect();
    let want = 0.990941356382224f64;
    let prod: Op = |x, a| x.prod(a, false);
    let mut failures = Vec::new();
    for shape in [vec![n], vec![1, n]] {
        let x = Tensor::from_vec(v.clone(), &shape).unwrap();
        let out = &shape[..shape.len() - 1];
        check(
            "long prod",
            prod,
            &x,
            -1,
            DType::F32,
            out,
            &[want],
            1e-6,
            &mut failures,
        );
        for mode in [RunMode::Host, RunMode::Sim] {
            let got = with_mode(mode, || prod(&x, -1)).to_vec::<f32>().unwrap()[0] as f64;
            eprintln!(
                "prod of {n} f32 {shape:?} {mode:?}: relative error {:.2e}",
                (got - want).abs() / want
            );
        }
    }
    // A long column: one accumulator per output element.
    let x = Tensor::from_vec(v.clone(), &[n, 1]).unwrap();
    check(
        "long column prod",
        prod,
        &x,
        0,
        DType::F32,
        &[1],
        &[want],
        1e-6,
        &mut failures,
    );
    assert_none(failures);
}

#[test]
fn max_and_min_of_bools_are_any_and_all() {
    let any: [&[f64]; 3] = [
        &[
            1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0,
        ],
        &[1.0; 10],
        &[1.0; 6],
    ];
    let all: [&[f64]; 3] = [
        &[
            1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0,
        ],
        &[0.0; 10],
        &[0.0; 6],
    ];
    let max: Op = |x, a| x.max(a, false);
    let min: Op = |x, a| x.min(a, false);
    let mut failures = Vec::new();
    let b = xb();
    for a in 0..3 {
        check(
            "any",
            max,
            &b,
            a as isize,
            DType::Bool,
            &without(a),
            any[a],
            0.0,
            &mut failures,
        );
        check(
            "all",
            min,
            &b,
            a as isize,
            DType::Bool,
            &without(a),
            all[a],
            0.0,
            &mut failures,
        );
    }
    // Empty axis: np.any gives False, np.all True.
    let empty = Tensor::zeros(&[2, 0, 3], DType::Bool);
    check(
        "any empty",
        max,
        &empty,
        1,
        DType::Bool,
        &[2, 3],
        &[0.0; 6],
        0.0,
        &mut failures,
    );
    check(
        "all empty",
        min,
        &empty,
        1,
        DType::Bool,
        &[2, 3],
        &[1.0; 6],
        0.0,
        &mut failures,
    );
    let one = Tensor::ones(&[1, 1, 1], DType::Bool);
    check(
        "any single",
        max,
        &one,
        2,
        DType::Bool,
        &[1, 1],
        &[1.0],
        0.0,
        &mut failures,
    );
    // Long: every 1000th of 100,003 false.
    let n = 100_003;
    let bb = from_f64(
        &seq(n, |j| (j % 1000 != 999) as u8 as f64),
        &[n],
        DType::Bool,
    );
    check(
        "all long",
        min,
        &bb,
        0,
        DType::Bool,
        &[],
        &[0.0],
        0.0,
        &mut failures,
    );
    check(
        "any long",
        max,
        &bb,
        0,
        DType::Bool,
        &[],
        &[1.0],
        0.0,
        &mut failures,
    );
    let zeros = Tensor::zeros(&[n], DType::Bool);
    check(
        "any long false",
        max,
        &zeros,
        0,
        DType::Bool,
        &[],
        &[0.0],
        0.0,
        &mut failures,
    );
    assert_none(failures);
}

#[test]
fn argmax_and_argmin_match_numpy_with_ties_and_nans() {
    let argmax: Op = |x, a| x.argmax(a, false);
    let argmin: Op = |x, a| x.argmin(a, false);
    let ties_max: [&[f64]; 3] = [
        &[
            1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0,
        ],
        &[1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 2.0, 1.0, 1.0],
        &[1.0, 0.0, 2.0, 0.0, 3.0, 0.0],
    ];
    let ties_min: [&[f64]; 3] = [
        &[
            0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0,
        ],
        &[0.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0],
        &[0.0, 4.0, 0.0, 2.0, 0.0, 3.0],
    ];
    let nan_max: [&[f64]; 3] = [
        &[
            0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0,
        ],
        &[0.0, 0.0, 0.0, 1.0, 0.0, 2.0, 0.0, 2.0, 1.0, 2.0],
        &[0.0, 3.0, 2.0, 0.0, 3.0, 0.0],
    ];
    let nan_min: [&[f64]; 3] = [
        &[
            0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0,
        ],
        &[0.0, 2.0, 1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 0.0, 2.0],
        &[0.0, 3.0, 0.0, 2.0, 0.0, 0.0],
    ];
    let bool_max: [&[f64]; 3] = [
        &[
            0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0,
        ],
        &[0.0, 0.0, 2.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0],
        &[0.0, 1.0, 2.0, 0.0, 1.0, 2.0],
    ];
    let bool_min: [&[f64]; 3] = [
        &[
            0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        ],
        &[1.0, 2.0, 0.0, 2.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0],
        &[2.0, 0.0, 0.0, 1.0, 0.0, 0.0],
    ];
    let i64_ = DType::I64;
    let mut failures = Vec::new();
    for a in 0..3 {
        let (ax, out) = (a as isize, without(a));
        for d in [DType::F32, DType::F64, DType::I32, DType::I64] {
            let x = xa(d, false);
            check(
                "argmax",
                argmax,
                &x,
                ax,
                i64_,
                &out,
                ties_max[a],
                0.0,
                &mut failures,
            );
            check(
                "argmin",
                argmin,
                &x,
                ax,
                i64_,
                &out,
                ties_min[a],
                0.0,
                &mut failures,
            );
        }
        for d in [DType::F32, DType::F64] {
            let x = xa(d, true);
            check(
                "argmax nan",
                argmax,
                &x,
                ax,
                i64_,
                &out,
                nan_max[a],
                0.0,
                &mut failures,
            );
            check(
                "argmin nan",
                argmin,
                &x,
                ax,
                i64_,
                &out,
                nan_min[a],
                0.0,
                &mut failures,
            );
        }
        check(
            "argmax bool",
            argmax,
            &xb(),
            ax,
            i64_,
            &out,
            bool_max[a],
            0.0,
            &mut failures,
        );
        check(
            "argmin bool",
            argmin,
            &xb(),
            ax,
            i64_,
            &out,
            bool_min[a],
            0.0,
            &mut failures,
        );
    }
    let keep: Op = |x, a| x.argmax(a, true);
    let x = xa(DType::F32, false);
    check(
        "argmax keepdim",
        keep,
        &x,
        -1,
        i64_,
        &[2, 3, 1],
        ties_max[2],
        0.0,
        &mut failures,
    );
    let one = from_f64(&[2.5], &[1, 1, 1], DType::F32);
    check(
        "argmax single",
        argmax,
        &one,
        2,
        i64_,
        &[1, 1],
        &[0.0],
        0.0,
        &mut failures,
    );
    // Empty output (another axis is 0): nothing to compare, no error.
    let empty = Tensor::zeros(&[0, 4], DType::F32);
    check(
        "argmax of nothing",
        argmax,
        &empty,
        1,
        i64_,
        &[0],
        &[],
        0.0,
        &mut failures,
    );
    // A long row of distinct values: its maximum is at 52685, minimum at 0.
    let n = 100_003;
    for d in [DType::F32, DType::I32] {
        let v = from_f64(&seq(n, |j| ((j * 7919) % n) as f64), &[n], d);
        check(
            "argmax long",
            argmax,
            &v,
            0,
            i64_,
            &[],
            &[52685.0],
            0.0,
            &mut failures,
        );
        check(
            "argmin long",
            argmin,
            &v,
            0,
            i64_,
            &[],
            &[0.0],
            0.0,
            &mut failures,
        );
    }
    assert_none(failures);
}

/// Asserts `t` is an error naming `op` and this file's `line`.
#[track_caller]
fn expect_err(t: &Tensor, needles: &[&str], line: u32) {
    let e = t
        .error()
        .unwrap_or_else(|| panic!("expected an error tensor, got {t:?}"));
    let msg = e.to_string();
    for n in needles {
        assert!(msg.contains(n), "message lacks `{n}`: {msg}");
    }
    let at = format!("reductions.rs:{line}:");
    assert!(msg.contains(&at), "message lacks `{at}`: {msg}");
}

#[test]
fn bad_reduction_input_names_the_op_and_the_line() {
    let x = Tensor::zeros(&[2, 0, 3], DType::F32);
    let line = line!() + 1;
    let t = x.argmax(1, false);
    expect_err(&t, &["argmax", "size 0"], line);
    let line = line!() + 1;
    let t = x.argmin(-2, true);
    expect_err(&t, &["argmin", "size 0"], line);
    let line = line!() + 1;
    let t = x.prod(3, false);
    expect_err(&t, &["prod", "axis"], line);
    let line = line!() + 1;
    let t = x.argmax(-4, false);
    expect_err(&t, &["argmax", "axis"], line);
    let line = line!() + 1;
    let t = Tensor::ones(&[2], DType::Bool).max(1, false);
    expect_err(&t, &["max", "axis"], line);
    let line = line!() + 1;
    let t = Tensor::ones(&[2], DType::Bool).prod(0, false);
    expect_err(&t, &["prod", "bool"], line);
    // Inside a jit function: the call fails, naming the op and the body's line.
    let f = jit_fn!(|x: &Tensor| x.argmax(1, false));
    let line = line!() - 1;
    let e = f.call((&x,)).unwrap_err().to_string();
    assert!(e.contains("argmax"), "{e}");
    assert!(e.contains(&format!("reductions.rs:{line}:")), "{e}");
    // Errors are values too in try_ form.
    assert!(x.try_argmax(1, false).is_err());
    assert!(x.try_prod(1, false).is_ok());
}

/// Each new reduction fuses as a reduction does today: into as many
/// kernels as a model built from `sum` and `max` (argmax's two reductions,
/// chained through a broadcast, as softmax's are), on rows and on columns.
#[test]
fn new_reductions_fuse_as_the_existing_ones_do() {
    let cases: [(&str, Op, Op); 4] = [
        (
            "prod",
            |x, a| (x * 0.5 + 1.0).prod(a, false) * 2.0,
            |x, a| (x * 0.5 + 1.0).sum(a, false) * 2.0,
        ),
        (
            "argmax",
            |x, a| (x * 0.5).exp().argmax(a, false),
            |x, a| {
                let y = (x * 0.5).exp();
                (&y - &y.max(a, true)).sum(a, false)
            },
        ),
        (
            "argmin",
            |x, a| x.argmin(a, true),
            |x, a| (x - x.min(a, true)).sum(a, true),
        ),
        (
            "any",
            |x, a| x.gt(&Tensor::zeros(&[], DType::F32)).max(a, false),
            |x, a| {
                x.gt(&Tensor::zeros(&[], DType::F32))
                    .cast(DType::I64)
                    .sum(a, false)
            },
        ),
    ];
    let x = Tensor::randn(&[6, 33], 3);
    let count = |op: Op, axis: i64| {
        let f = jit_fn!(move |x: &Tensor, ax: i64| op(x, ax as isize));
        f.call((&x, axis)).unwrap();
        let handlers = f.handlers();
        let kernels = handlers[0].program.host().kernels();
        (kernels.kernels.len(), kernels.to_string())
    };
    for (name, op, model) in cases {
        for axis in [-1i64, 0] {
            let (got, text) = count(op, axis);
            let (want, _) = count(model, axis);
            eprintln!("{name} axis {axis}: {got} kernels, model {want}");
            assert_eq!(got, want, "{name} axis {axis}:\n{text}");
        }
    }
}

/// Long axes, whose index line is built from row starts and offsets past
/// 4096: the first of two planted maxima (and minima) near the end and
/// across a row boundary of the line, and the first of two NaNs, on
/// every mode, eager and jit.
#[test]
fn argmax_and_argmin_of_long_axes_find_the_first_extreme() {
    let argmax: Op = |x, a| x.argmax(a, false);
    let argmin: Op = |x, a| x.argmin(a, false);
    let mut failures = Vec::new();
    for n in [4096usize, 4097, 50257] {
        // Values in 0..1000; row 0 holds 2000 at n-3 and n-1 and -5 at
        // 257 and 4095; row 1 NaNs at 4000 and n-2.
        let mut v: Vec<f32> = (0..2 * n).map(|i| ((i * 7919) % 1000) as f32).collect();
        for (at, x) in [(n - 3, 2000.0), (n - 1, 2000.0), (257, -5.0), (4095, -5.0)] {
            v[at] = x;
        }
        v[n + 4000] = f32::NAN;
        v[n + n - 2] = f32::NAN;
        let x = Tensor::from_vec(v, &[2, n]).unwrap();
        let what = format!("n={n}");
        let (max, min) = ([(n - 3) as f64, 4000.0], [257.0, 4000.0]);
        check(
            &what,
            argmax,
            &x,
            1,
            DType::I64,
            &[2],
            &max,
            0.0,
            &mut failures,
        );
        check(
            &what,
            argmin,
            &x,
            1,
            DType::I64,
            &[2],
            &min,
            0.0,
            &mut failures,
        );
    }
    assert_none(failures);
}
