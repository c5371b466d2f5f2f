//! The math ops of issue 22 (`sin cos erf floor ceil round sign pow powf %`)
//! at hand-picked points, edge cases included (NaN, ±inf, ±0, halves for
//! `round`, negative divisors for `%`, large sin/cos arguments), on Host,
//! Sim and Verify, eager and under `#[jit]`, against numpy.
//!
//! The expected values were printed by numpy 2.4 (f64 functions of the f32
//! inputs rounded to f32 where numpy's f32 kernels may differ by an ulp;
//! Python's `math.erf`, numpy having none):
//!
//! ```python
//! import numpy as np, math
//! f32 = np.float32
//! X = np.array([0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.7, -3.7, 1e-30,
//!               12345.678, -98765.43, 1e6, 3.0e7, np.nan, np.inf, -np.inf], dtype=f32)
//! x64 = X.astype(np.float64)
//! SIN = np.sin(x64).astype(f32); COS = np.cos(x64).astype(f32)
//! ERF = np.array([math.erf(v) if not np.isnan(v) else np.nan for v in x64]).astype(f32)
//! FLOOR, CEIL, ROUND, SIGN = np.floor(X), np.ceil(X), np.round(X), np.sign(X)
//! A = np.array([2, -2, -8, 0, -0.0, 0, 1, np.nan, -1, 10, 0.5, np.inf, -np.inf, 2], dtype=f32)
//! B = np.array([10, 3, 1/3, -1, -3, 0, np.nan, 0, np.inf, -2, 0.5, -1, 3, 200], dtype=f32)
//! POW = np.power(A.astype(np.float64), B.astype(np.float64)).astype(f32)
//! MA = np.array([5.5, -5.5, 5.5, -5.5, 0, -0.0, 1, np.inf, np.nan, 1, -1, 1, -1e-30, 7], dtype=f32)
//! MB = np.array([2, 2, -2, -2, -3, 3, 0, 2, 2, np.inf, np.inf, -np.inf, 1, np.nan], dtype=f32)
//! MOD = np.mod(MA, MB)
//! IA = np.array([5, -5, 5, -5, 7, 0, -2**31, 2**31 - 1, -7, 6], dtype=np.int32)
//! IB = np.array([3, 3, -3, -3, 0, 0, -1, 2, 7, -4], dtype=np.int32)
//! IMOD = np.mod(IA, IB)  # x % 0 is 0 (with a warning)
//! PA = np.array([2, -2, 3, -3, 0, 0, 1, 7, -1, 2], dtype=np.int32)
//! PB = np.array([10, 3, 40, 5, 0, 3, 100, 0, 7, 31], dtype=np.int32)
//! IPOW = np.power(PA, PB)  # wrapping
//! SMOD = np.mod(X[:9], f32(-2.0)); SPOW = np.power(X[:9].astype(np.float64), 2.0).astype(f32)
//! ```

#![allow(
    clippy::excessive_precision,
    reason = "numpy printed the f32 values as exact f64 decimals"
)]

use tilejit::prelude::*;
use tilejit::ErrorKind;
use tilejit_tests::t32;

const X: [f32; 17] = [
    0.0,
    -0.0,
    0.5,
    -0.5,
    1.5,
    2.5,
    -2.5,
    3.700000047683716,
    -3.700000047683716,
    1.0000000031710769e-30,
    12345.677734375,
    -98765.4296875,
    1000000.0,
    30000000.0,
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
];
const SIN: [f32; 17] = [
    0.0,
    -0.0,
    0.4794255495071411,
    -0.4794255495071411,
    0.9974949955940247,
    0.5984721183776855,
    -0.5984721183776855,
    -0.5298361778259277,
    0.5298361778259277,
    1.0000000031710769e-30,
    -0.7042698860168457,
    -0.03983340412378311,
    -0.349993497133255,
    0.9641302824020386,
    f32::NAN,
    f32::NAN,
    f32::NAN,
];
const COS: [f32; 17] = [
    1.0,
    1.0,
    0.8775825500488281,
    0.8775825500488281,
    0.07073719799518585,
    -0.8011435866355896,
    -0.8011435866355896,
    -0.8481000065803528,
    -0.8481000065803528,
    1.0,
    0.7099323272705078,
    0.9992063641548157,
    0.9367521405220032,
    -0.26542940735816956,
    f32::NAN,
    f32::NAN,
    f32::NAN,
];
const ERF: [f32; 17] = [
    0.0,
    -0.0,
    0.5204998850822449,
    -0.5204998850822449,
    0.9661051630973816,
    0.9995930194854736,
    -0.9995930194854736,
    0.9999998211860657,
    -0.9999998211860657,
    1.1283791266481092e-30,
    1.0,
    -1.0,
    1.0,
    1.0,
    f32::NAN,
    1.0,
    -1.0,
];
const INF: f32 = f32::INFINITY;
const NINF: f32 = f32::NEG_INFINITY;
const NAN: f32 = f32::NAN;
const FLOOR: [f32; 17] = [
    0.0, -0.0, 0.0, -1.0, 1.0, 2.0, -3.0, 3.0, -4.0, 0.0, 12345.0, -98766.0, 1e6, 3e7, NAN, INF,
    NINF,
];
const CEIL: [f32; 17] = [
    0.0, -0.0, 1.0, -0.0, 2.0, 3.0, -2.0, 4.0, -3.0, 1.0, 12346.0, -98765.0, 1e6, 3e7, NAN, INF,
    NINF,
];
const ROUND: [f32; 17] = [
    0.0, -0.0, 0.0, -0.0, 2.0, 2.0, -2.0, 4.0, -4.0, 0.0, 12346.0, -98765.0, 1e6, 3e7, NAN, INF,
    NINF,
];
const SIGN: [f32; 17] = [
    0.0, 0.0, 1.0, -1.0, 1.0, 1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0, 1.0, 1.0, NAN, 1.0, -1.0,
];
const PA: [f32; 14] = [
    2.0, -2.0, -8.0, 0.0, -0.0, 0.0, 1.0, NAN, -1.0, 10.0, 0.5, INF, NINF, 2.0,
];
const PB: [f32; 14] = [
    10.0,
    3.0,
    0.3333333432674408,
    -1.0,
    -3.0,
    0.0,
    NAN,
    0.0,
    INF,
    -2.0,
    0.5,
    -1.0,
    3.0,
    200.0,
];
const POW: [f32; 14] = [
    1024.0,
    -8.0,
    NAN,
    INF,
    NINF,
    1.0,
    1.0,
    1.0,
    1.0,
    0.009999999776482582,
    0.7071067690849304,
    0.0,
    NINF,
    INF,
];
const MA: [f32; 14] = [
    5.5,
    -5.5,
    5.5,
    -5.5,
    0.0,
    -0.0,
    1.0,
    INF,
    NAN,
    1.0,
    -1.0,
    1.0,
    -1.0000000031710769e-30,
    7.0,
];
const MB: [f32; 14] = [
    2.0, 2.0, -2.0, -2.0, -3.0, 3.0, 0.0, 2.0, 2.0, INF, INF, NINF, 1.0, NAN,
];
const MOD: [f32; 14] = [
    1.5, 0.5, -0.5, -1.5, -0.0, 0.0, NAN, NAN, NAN, 1.0, INF, NINF, 1.0, NAN,
];
const SMOD: [f32; 9] = [
    -0.0,
    -0.0,
    -1.5,
    -0.5,
    -0.5,
    -1.5,
    -0.5,
    -0.2999999523162842,
    -1.7000000476837158,
];
const SPOW: [f32; 9] = [
    0.0,
    0.0,
    0.25,
    0.25,
    2.25,
    6.25,
    6.25,
    13.690000534057617,
    13.690000534057617,
];

const MODES: [RunMode; 3] = [RunMode::Host, RunMode::Sim, RunMode::Verify];

#[jit]
fn j_sin(x: &Tensor) -> Tensor {
    x.sin()
}
#[jit]
fn j_cos(x: &Tensor) -> Tensor {
    x.cos()
}
#[jit]
fn j_erf(x: &Tensor) -> Tensor {
    x.erf()
}
#[jit]
fn j_floor(x: &Tensor) -> Tensor {
    x.floor()
}
#[jit]
fn j_ceil(x: &Tensor) -> Tensor {
    x.ceil()
}
#[jit]
fn j_round(x: &Tensor) -> Tensor {
    x.round()
}
#[jit]
fn j_sign(x: &Tensor) -> Tensor {
    x.sign()
}
#[jit]
fn j_pow(x: &Tensor, y: &Tensor) -> Tensor {
    x.pow(y)
}
#[jit]
fn j_rem(x: &Tensor, y: &Tensor) -> Tensor {
    x % y
}
#[jit]
fn j_scalars(x: &Tensor) -> (Tensor, Tensor) {
    (x % -2.0, x.powf(2.0))
}

/// f32 values in a total order, for ulp distances.
fn ord(v: f32) -> i64 {
    let b = v.to_bits() as i32;
    (if b < 0 { i32::MIN - b } else { b }) as i64
}

/// `got` equals `want` bit for bit (NaN for NaN, the sign of zero
/// included), or within `ulps` for the approximated functions.
#[track_caller]
fn check(what: &str, got: &Tensor, want: &[f32], ulps: i64) {
    let g = got
        .to_vec::<f32>()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(g.len(), want.len(), "{what}");
    for (i, (&g, &w)) in g.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else {
            g.to_bits() == w.to_bits() || (ulps > 0 && (ord(g) - ord(w)).abs() <= ulps)
        };
        assert!(ok, "{what}: element {i} = {g:e}, numpy gives {w:e}");
    }
}

type Unary = (
    &'static str,
    fn(&Tensor) -> Tensor,
    fn(&Tensor) -> tilejit::Result<Tensor>,
    &'static [f32; 17],
    i64,
);

#[test]
fn unary_math_matches_numpy_in_every_mode() {
    let cases: [Unary; 7] = [
        ("sin", |x| x.sin(), j_sin, &SIN, 1),
        ("cos", |x| x.cos(), j_cos, &COS, 1),
        ("erf", |x| x.erf(), j_erf, &ERF, 1),
        ("floor", |x| x.floor(), j_floor, &FLOOR, 0),
        ("ceil", |x| x.ceil(), j_ceil, &CEIL, 0),
        ("round", |x| x.round(), j_round, &ROUND, 0),
        ("sign", |x| x.sign(), j_sign, &SIGN, 0),
    ];
    let x = t32(&X, &[X.len()]);
    for (name, eager, jitted, want, ulps) in cases {
        for mode in MODES {
            let e = with_mode(mode, || eager(&x));
            check(&format!("{name} eager {mode:?}"), &e, want, ulps);
            let j = with_mode(mode, || jitted(&x)).unwrap_or_else(|e| panic!("{e}"));
            check(&format!("{name} jit {mode:?}"), &j, want, ulps);
        }
    }
}

/// Inputs of the inverse trig ops: hand-known points, domain edges.
const TX: [f32; 11] = [
    1.0,
    0.5,
    -0.5,
    0.0,
    -0.0,
    0.9,
    2.0,
    -2.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
];

/// `atan(1) = pi/4`, `asin(0.5) = pi/6`, `acos(0.5) = pi/3`, `acosh(1) =
/// 0`, `atanh(0.5) = ln(3)/2`, and numpy's NaN outside each domain
/// (Python's `math` functions of the f32 inputs, rounded to f32).
#[rustfmt::skip]
const TRIG: [(&str, [f32; 11]); 6] = [
    ("atan", [0.7853981852531433, 0.46364760398864746, -0.46364760398864746, 0.0, -0.0, 0.7328150868415833, 1.1071487665176392, -1.1071487665176392, 1.5707963705062866, -1.5707963705062866, f32::NAN]),
    ("asin", [1.5707963705062866, 0.5235987901687622, -0.5235987901687622, 0.0, -0.0, 1.1197694540023804, f32::NAN, f32::NAN, f32::NAN, f32::NAN, f32::NAN]),
    ("acos", [0.0, 1.0471975803375244, 2.094395160675049, 1.5707963705062866, 1.5707963705062866, 0.4510268568992615, f32::NAN, f32::NAN, f32::NAN, f32::NAN, f32::NAN]),
    ("asinh", [0.8813735842704773, 0.4812118113040924, -0.4812118113040924, 0.0, -0.0, 0.8088669180870056, 1.4436354637145996, -1.4436354637145996, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]),
    ("acosh", [0.0, f32::NAN, f32::NAN, f32::NAN, f32::NAN, f32::NAN, 1.316957950592041, f32::NAN, f32::INFINITY, f32::NAN, f32::NAN]),
    ("atanh", [f32::INFINITY, 0.5493061542510986, -0.5493061542510986, 0.0, -0.0, 1.4722193479537964, f32::NAN, f32::NAN, f32::NAN, f32::NAN, f32::NAN]),
];

#[jit]
fn j_trig(x: &Tensor) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) {
    (
        x.atan(),
        x.asin(),
        x.acos(),
        x.asinh(),
        x.acosh(),
        x.atanh(),
    )
}

#[test]
fn inverse_trig_matches_numpy_in_every_mode() {
    let x = t32(&TX, &[TX.len()]);
    let eager: [fn(&Tensor) -> Tensor; 6] = [
        |x| x.atan(),
        |x| x.asin(),
        |x| x.acos(),
        |x| x.asinh(),
        |x| x.acosh(),
        |x| x.atanh(),
    ];
    for mode in MODES {
        let j = with_mode(mode, || j_trig(&x)).unwrap_or_else(|e| panic!("{e}"));
        let jitted = [j.0, j.1, j.2, j.3, j.4, j.5];
        for (((name, want), f), j) in TRIG.iter().zip(eager).zip(&jitted) {
            // One rounding of the f64 function: at most 1 ulp from numpy's.
            check(
                &format!("{name} eager {mode:?}"),
                &with_mode(mode, || f(&x)),
                want,
                1,
            );
            check(&format!("{name} jit {mode:?}"), j, want, 1);
        }
    }
    // Float-only, as the table's row says.
    let i = Tensor::from_vec(vec![1i32, 2], &[2]).unwrap();
    assert!(i.atan().to_vec::<i32>().is_err());
}

#[test]
fn pow_and_mod_match_numpy_in_every_mode() {
    let (a, b) = (t32(&PA, &[PA.len()]), t32(&PB, &[PB.len()]));
    let (ma, mb) = (t32(&MA, &[MA.len()]), t32(&MB, &[MB.len()]));
    let x = t32(&X[..9], &[9]);
    for mode in MODES {
        check(
            &format!("pow eager {mode:?}"),
            &with_mode(mode, || a.pow(&b)),
            &POW,
            0,
        );
        let j = with_mode(mode, || j_pow(&a, &b)).unwrap();
        check(&format!("pow jit {mode:?}"), &j, &POW, 0);
        check(
            &format!("mod eager {mode:?}"),
            &with_mode(mode, || &ma % &mb),
            &MOD,
            0,
        );
        let j = with_mode(mode, || j_rem(&ma, &mb)).unwrap();
        check(&format!("mod jit {mode:?}"), &j, &MOD, 0);
        let m = with_mode(mode, || x.remainder(&Tensor::full(&[], -2.0, DType::F32)));
        check(&format!("remainder eager {mode:?}"), &m, &SMOD, 0);
        let (m, p) = with_mode(mode, || j_scalars(&x)).unwrap();
        check(&format!("% scalar jit {mode:?}"), &m, &SMOD, 0);
        check(&format!("powf jit {mode:?}"), &p, &SPOW, 0);
    }
}

#[test]
fn integer_math_matches_numpy_in_every_mode() {
    let i = |v: &[i32]| Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap();
    let (ia, ib) = (
        i(&[5, -5, 5, -5, 7, 0, i32::MIN, i32::MAX, -7, 6]),
        i(&[3, 3, -3, -3, 0, 0, -1, 2, 7, -4]),
    );
    let imod = [2, 1, -1, -2, 0, 0, 0, 1, 0, -2];
    let (pa, pb) = (
        i(&[2, -2, 3, -3, 0, 0, 1, 7, -1, 2]),
        i(&[10, 3, 40, 5, 0, 3, 100, 0, 7, 31]),
    );
    let ipow = [1024, -8, 689956897, -243, 1, 0, 1, 1, -1, i32::MIN];
    // Negative exponents (numpy raises): the integer part of 1/x^|y|,
    // the documented value (not numpy's).
    let (na, nb) = (
        i(&[1, -1, -1, 2, -2, 0, 5]),
        i(&[-3, -3, -4, -1, -1, -1, -2]),
    );
    let npow = [1, -1, 1, 0, 0, 0, 0];
    let s = i(&[-7, 0, 9, i32::MIN, i32::MAX]);
    for mode in MODES {
        let got = |t: Tensor| {
            t.to_vec::<i32>()
                .unwrap_or_else(|e| panic!("{mode:?}: {e}"))
        };
        assert_eq!(got(with_mode(mode, || &ia % &ib)), imod, "mod {mode:?}");
        assert_eq!(
            got(with_mode(mode, || j_rem(&ia, &ib)).unwrap()),
            imod,
            "mod jit {mode:?}"
        );
        assert_eq!(got(with_mode(mode, || pa.pow(&pb))), ipow, "pow {mode:?}");
        assert_eq!(
            got(with_mode(mode, || j_pow(&pa, &pb)).unwrap()),
            ipow,
            "pow jit {mode:?}"
        );
        assert_eq!(
            got(with_mode(mode, || na.pow(&nb))),
            npow,
            "pow < 0 {mode:?}"
        );
        // floor, ceil, round: the identity on integers (numpy keeps the
        // dtype); sign: -1, 0, 1.
        for f in [j_floor, j_ceil, j_round] {
            assert_eq!(
                got(with_mode(mode, || f(&s)).unwrap()),
                [-7, 0, 9, i32::MIN, i32::MAX]
            );
        }
        assert_eq!(
            got(with_mode(mode, || s.sign())),
            [-1, 0, 1, -1, 1],
            "sign {mode:?}"
        );
        assert_eq!(
            got(with_mode(mode, || j_sign(&s)).unwrap()),
            [-1, 0, 1, -1, 1]
        );
    }
}

/// The line of this file holding `needle` (1-based).
fn line_of(needle: &str) -> u32 {
    let src = include_str!("math_ops.rs");
    src.lines()
        .position(|l| l.contains(needle))
        .expect("needle in source") as u32
        + 1
}

#[track_caller]
fn expect_err(e: &tilejit::Error, kind: ErrorKind, op: &str, line: u32) {
    let msg = e.to_string();
    assert_eq!(e.kind(), kind, "{msg}");
    assert!(
        msg.contains(&format!("`{op}`")),
        "message lacks `{op}`: {msg}"
    );
    let at = format!("math_ops.rs:{line}:");
    assert!(msg.contains(&at), "message lacks `{at}`: {msg}");
}

#[test]
fn float_only_math_on_integers_and_any_math_on_bool_are_errors() {
    let xi = Tensor::from_vec(vec![1i32, 2, 3], &[3]).unwrap();
    let xb = Tensor::from_vec(vec![true, false], &[2]).unwrap();
    let cases = [
        (xi.sin(), "sin", line!()),
        (xi.cos(), "cos", line!()),
        (xi.erf(), "erf", line!()),
        (xb.floor(), "floor", line!()),
        (xb.sign(), "sign", line!()),
        (xb.pow(&xb), "pow", line!()),
        (&xb % &xb, "rem", line!()),
        (xb.powf(2), "pow", line!()),
    ];
    for (t, op, line) in cases {
        let e = t
            .error()
            .unwrap_or_else(|| panic!("{op}: expected an error"));
        expect_err(e, ErrorKind::DType, op, line);
    }
    // Inside a jit body: the error names the body's line.
    let e = j_sin(&xi).unwrap_err();
    expect_err(&e, ErrorKind::DType, "sin", line_of("    x.sin()"));
    let e = j_rem(&xb, &xb).unwrap_err();
    expect_err(&e, ErrorKind::DType, "rem", line_of("    x % y"));
}
