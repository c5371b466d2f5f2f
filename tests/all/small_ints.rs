//! `u8` and `i8` tensors against numpy's values, eager and inside a jit
//! function, on the reference, Host, Sim and Verify: wrapping arithmetic,
//! unsigned compares, max/min and division, casts both ways, reductions,
//! layout ops, files; then their bad input. (`every_mode.rs` sweeps every
//! op over both dtypes against the reference as well.)
//!
//! The expected values are numpy 2.4 output pasted as literals:
//!
//! ```python
//! a = np.array([200, 100, 255, 0, 7], np.uint8); b = np.array([100, 200, 1, 3, 0], np.uint8)
//! a + b, a - b, a * b, -a, a > b, np.maximum(a, b), np.minimum(a, b)
//! a // b, a % b        # [2 0 255 0 0], [0 100 0 0 0] (x / 0 and x % 0 give 0, with a warning)
//! x = np.array([-128, 127, -1, 5, -7, 0], np.int8); y = np.array([-1, 1, 2, -2, 2, 0], np.int8)
//! x + y, x - y, x * y, np.abs(x), -x, x % y
//! f = np.array([-1.5, 0.4, 255.6, 300, np.nan, -300, 127.9, -128.9], np.float32)
//! f.astype(np.uint8)   # [255 0 255 44 0 212 127 128]: out of range is undefined in C
//! f.astype(np.int8)    # [-1 0 -1 44 0 -44 127 -128]   (x86 gives these; not a rule)
//! np.sum(a, dtype=np.uint8)   # 50 (np.sum(a) is 562 as uint64)
//! np.prod(a, dtype=np.uint8)  # 0
//! x.astype(np.uint8), a.astype(np.int8), a.astype(np.float32), x.astype(np.float32)
//! np.array([256, -1, 300, 1000], np.int32).astype(np.uint8)   # [0 255 44 232]
//! ```

use tilejit::io;
use tilejit::prelude::*;
use tilejit_tests::TempDir;

const MODES: [RunMode; 4] = [
    RunMode::Reference,
    RunMode::Host,
    RunMode::Sim,
    RunMode::Verify,
];

type Op2 = fn(&Tensor, &Tensor) -> Tensor;

fn a_u8() -> Tensor {
    Tensor::from_vec(vec![200u8, 100, 255, 0, 7], &[5]).unwrap()
}
fn b_u8() -> Tensor {
    Tensor::from_vec(vec![100u8, 200, 1, 3, 0], &[5]).unwrap()
}
fn x_i8() -> Tensor {
    Tensor::from_vec(vec![-128i8, 127, -1, 5, -7, 0], &[6]).unwrap()
}
fn y_i8() -> Tensor {
    Tensor::from_vec(vec![-1i8, 1, 2, -2, 2, 0], &[6]).unwrap()
}

/// Runs `op(a, b)` eagerly and in a jit function in every mode; records
/// each result whose dtype or values differ from `want` (as i64).
fn check(what: &str, op: Op2, a: &Tensor, b: &Tensor, dtype: DType, want: &[i64]) -> Vec<String> {
    let f = jit_fn!(move |a: &Tensor, b: &Tensor| op(a, b));
    let mut failures = Vec::new();
    for mode in MODES {
        for (how, got) in [
            ("eager", with_mode(mode, || op(a, b)).into_result()),
            ("jit", f.with_mode(mode).call((a, b))),
        ] {
            let at = format!("{what} {how} {mode:?}");
            match got {
                Err(e) => failures.push(format!("{at}: {e}")),
                Ok(t) if t.dtype() != dtype => {
                    failures.push(format!("{at}: dtype {:?}, want {dtype:?}", t.dtype()))
                }
                Ok(t) => {
                    let g = t.cast(DType::I64).to_vec::<i64>().unwrap();
                    if g != want {
                        failures.push(format!("{at}: {g:?}, want {want:?}"));
                    }
                }
            }
        }
    }
    failures
}

fn assert_none(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn u8_arithmetic_wraps_and_compares_unsigned_as_numpy() {
    let (a, b) = (a_u8(), b_u8());
    let u = DType::U8;
    let cases: Vec<(&str, Op2, DType, Vec<i64>)> = vec![
        ("add", |a, b| a + b, u, vec![44, 44, 0, 3, 7]),
        ("sub", |a, b| a - b, u, vec![100, 156, 254, 253, 7]),
        ("mul", |a, b| a * b, u, vec![32, 32, 255, 0, 0]),
        ("neg", |a, _| -a, u, vec![56, 156, 1, 0, 249]),
        ("div", |a, b| a / b, u, vec![2, 0, 255, 0, 0]),
        ("rem", |a, b| a % b, u, vec![0, 100, 0, 0, 0]),
        ("gt", |a, b| a.gt(b), DType::Bool, vec![1, 0, 1, 0, 1]),
        ("lt", |a, b| a.lt(b), DType::Bool, vec![0, 1, 0, 1, 0]),
        ("ge", |a, b| a.ge(b), DType::Bool, vec![1, 0, 1, 0, 1]),
        ("maximum", |a, b| a.maximum(b), u, vec![200, 200, 255, 3, 7]),
        ("minimum", |a, b| a.minimum(b), u, vec![100, 100, 1, 0, 0]),
        // Nothing is negative: abs and relu keep every value, sign is 0/1.
        ("abs", |a, _| a.abs(), u, vec![200, 100, 255, 0, 7]),
        ("relu", |a, _| a.relu(), u, vec![200, 100, 255, 0, 7]),
        ("sign", |a, _| a.sign(), u, vec![1, 1, 1, 0, 1]),
        // 200 + 100 wraps to 44 before the compare.
        (
            "sum_gt",
            |a, b| (a + b).gt(a),
            DType::Bool,
            vec![0, 0, 0, 1, 0],
        ),
        (
            "where",
            |a, b| Tensor::where_cond(&a.gt(b), a, b),
            u,
            vec![200, 200, 255, 3, 7],
        ),
        ("scalar", |a, _| a * 2 + 1, u, vec![145, 201, 255, 1, 15]),
        ("pow", |a, _| a.powf(2), u, vec![64, 16, 1, 0, 49]),
    ];
    let mut failures = Vec::new();
    for (what, op, dtype, want) in cases {
        failures.extend(check(what, op, &a, &b, dtype, &want));
    }
    assert_none(failures);
}

#[test]
fn i8_arithmetic_wraps_as_numpy() {
    let (x, y) = (x_i8(), y_i8());
    let i = DType::I8;
    let cases: Vec<(&str, Op2, DType, Vec<i64>)> = vec![
        ("add", |a, b| a + b, i, vec![127, -128, 1, 3, -5, 0]),
        ("sub", |a, b| a - b, i, vec![-127, 126, -3, 7, -9, 0]),
        ("mul", |a, b| a * b, i, vec![-128, 127, -2, -10, -14, 0]),
        ("abs", |a, _| a.abs(), i, vec![-128, 127, 1, 5, 7, 0]),
        ("neg", |a, _| -a, i, vec![-128, -127, 1, -5, 7, 0]),
        // numpy's mod (the divisor's sign); x % 0 == 0.
        ("rem", |a, b| a % b, i, vec![0, 0, 1, -1, 1, 0]),
        // Integer division truncates, as every integer dtype's here
        // (numpy's `//` floors: -1 // 2 == -1); -128 / -1 wraps to -128
        // (numpy too) and x / 0 == 0.
        ("div", |a, b| a / b, i, vec![-128, 127, 0, -2, -3, 0]),
        ("gt", |a, b| a.gt(b), DType::Bool, vec![0, 1, 0, 1, 0, 0]),
        ("maximum", |a, b| a.maximum(b), i, vec![-1, 127, 2, 5, 2, 0]),
        (
            "minimum",
            |a, b| a.minimum(b),
            i,
            vec![-128, 1, -1, -2, -7, 0],
        ),
        ("sign", |a, _| a.sign(), i, vec![-1, 1, -1, 1, -1, 0]),
        ("relu", |a, _| a.relu(), i, vec![0, 127, 0, 5, 0, 0]),
    ];
    let mut failures = Vec::new();
    for (what, op, dtype, want) in cases {
        failures.extend(check(what, op, &x, &y, dtype, &want));
    }
    assert_none(failures);
}

#[test]
fn casts_to_and_from_small_ints() {
    let f = Tensor::from_vec(
        vec![-1.5f32, 0.4, 255.6, 300.0, f32::NAN, -300.0, 127.9, -128.9],
        &[8],
    )
    .unwrap();
    let none = Tensor::zeros(&[], DType::F32);
    let mut failures = Vec::new();
    // Float -> u8/i8 truncates toward zero and saturates, NaN -> 0 (Rust's
    // `as`, as for i32 and i64). numpy's `astype` leaves out-of-range
    // values undefined; on x86 it wraps them through int32:
    // u8 [255 0 255 44 0 212 127 128], i8 [-1 0 -1 44 0 -44 127 -128].
    // They agree where the value is in range: 0.4 -> 0, 127.9 -> 127 (u8
    // and i8), -128.9 -> -128 (i8).
    failures.extend(check(
        "f32 to u8",
        |a, _| a.cast(DType::U8),
        &f,
        &none,
        DType::U8,
        &[0, 0, 255, 255, 0, 0, 127, 0],
    ));
    failures.extend(check(
        "f32 to i8",
        |a, _| a.cast(DType::I8),
        &f,
        &none,
        DType::I8,
        &[-1, 0, 127, 127, 0, -128, 127, -128],
    ));
    failures.extend(check(
        "f64 to u8",
        |a, _| a.cast(DType::F64).cast(DType::U8),
        &f,
        &none,
        DType::U8,
        &[0, 0, 255, 255, 0, 0, 127, 0],
    ));
    // Integers wrap, as numpy's astype.
    let (a, x) = (a_u8(), x_i8());
    failures.extend(check(
        "i8 to u8",
        |a, _| a.cast(DType::U8),
        &x,
        &none,
        DType::U8,
        &[128, 127, 255, 5, 249, 0],
    ));
    failures.extend(check(
        "u8 to i8",
        |a, _| a.cast(DType::I8),
        &a,
        &none,
        DType::I8,
        &[-56, 100, -1, 0, 7],
    ));
    let wide = Tensor::from_vec(vec![256i32, -1, 300, 1000], &[4]).unwrap();
    failures.extend(check(
        "i32 to u8",
        |a, _| a.cast(DType::U8),
        &wide,
        &none,
        DType::U8,
        &[0, 255, 44, 232],
    ));
    failures.extend(check(
        "i64 to i8",
        |a, _| a.cast(DType::I64).cast(DType::I8),
        &wide,
        &none,
        DType::I8,
        &[0, -1, 44, -24],
    ));
    // Widening: u8 zero-extends, i8 sign-extends.
    failures.extend(check(
        "u8 to i32",
        |a, _| a.cast(DType::I32),
        &a,
        &none,
        DType::I32,
        &[200, 100, 255, 0, 7],
    ));
    failures.extend(check(
        "i8 to i64",
        |a, _| a.cast(DType::I64),
        &x,
        &none,
        DType::I64,
        &[-128, 127, -1, 5, -7, 0],
    ));
    failures.extend(check(
        "u8 to bool",
        |a, _| a.cast(DType::Bool),
        &a,
        &none,
        DType::Bool,
        &[1, 1, 1, 0, 1],
    ));
    failures.extend(check(
        "bool to u8",
        |a, b| a.gt(b).cast(DType::U8) * 3,
        &a,
        &b_u8(),
        DType::U8,
        &[3, 0, 3, 0, 3],
    ));
    assert_none(failures);
    // To floats, exactly (f32, f64, f16, bf16 all hold every 8-bit value).
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for mode in MODES {
            let got = with_mode(mode, || a.cast(dt)).cast(DType::F64);
            assert_eq!(
                got.to_vec::<f64>().unwrap(),
                [200.0, 100.0, 255.0, 0.0, 7.0],
                "u8 to {dt:?} {mode:?}"
            );
            let got = with_mode(mode, || x.cast(dt)).cast(DType::F64);
            assert_eq!(
                got.to_vec::<f64>().unwrap(),
                [-128.0, 127.0, -1.0, 5.0, -7.0, 0.0],
                "i8 to {dt:?} {mode:?}"
            );
        }
    }
}

#[test]
fn reductions_keep_the_dtype_and_wrap() {
    let (a, x) = (a_u8(), x_i8());
    let none = Tensor::zeros(&[], DType::F32);
    let mut failures = Vec::new();
    // numpy's np.sum(a, dtype=np.uint8); np.sum(a) would widen to 562.
    for (what, op, t, dtype, want) in [
        (
            "u8 sum",
            (|a, _| a.sum(0, false)) as Op2,
            &a,
            DType::U8,
            vec![50],
        ),
        ("u8 prod", |a, _| a.prod(0, false), &a, DType::U8, vec![0]),
        ("u8 max", |a, _| a.max(0, false), &a, DType::U8, vec![255]),
        ("u8 min", |a, _| a.min(0, false), &a, DType::U8, vec![0]),
        (
            "u8 argmax",
            |a, _| a.argmax(0, false),
            &a,
            DType::I64,
            vec![2],
        ),
        (
            "u8 argmin",
            |a, _| a.argmin(0, false),
            &a,
            DType::I64,
            vec![3],
        ),
        ("i8 sum", |a, _| a.sum(0, false), &x, DType::I8, vec![-4]),
        ("i8 max", |a, _| a.max(0, false), &x, DType::I8, vec![127]),
        ("i8 min", |a, _| a.min(0, false), &x, DType::I8, vec![-128]),
        (
            "i8 argmin",
            |a, _| a.argmin(0, false),
            &x,
            DType::I64,
            vec![0],
        ),
        // Max of all-negative and min of all-large values: the identities
        // are the dtype's own least and greatest values.
        (
            "i8 max neg",
            |a, _| (a.minimum(&(a * 0 - 3))).max(0, false),
            &x,
            DType::I8,
            vec![-3],
        ),
        (
            "u8 min big",
            |a, _| a.maximum(&(a * 0 + 250)).min(0, false),
            &a,
            DType::U8,
            vec![250],
        ),
        (
            "i8 min big",
            |a, _| a.maximum(&(a * 0 + 120)).min(0, false),
            &x,
            DType::I8,
            vec![120],
        ),
        (
            "u8 cumsum",
            |a, _| a.cumsum(0),
            &a,
            DType::U8,
            vec![200, 44, 43, 43, 50],
        ),
        (
            "i8 cumsum",
            |a, _| a.cumsum(0),
            &x,
            DType::I8,
            vec![-128, -1, -2, 3, -4, -4],
        ),
    ] {
        failures.extend(check(what, op, t, &none, dtype, &want));
    }
    assert_none(failures);
}

#[test]
fn i32_max_of_negative_rows_on_sim() {
    // The device's identity for an integer max once wrapped i64::MIN into
    // the dtype (0 for i32): a row of negatives then gave 0.
    let x = Tensor::from_vec(vec![-5i32, -3, -9], &[3]).unwrap();
    for mode in MODES {
        let got = with_mode(mode, || x.max(0, false)).to_vec::<i32>().unwrap();
        assert_eq!(got, [-3], "{mode:?}");
        let got = with_mode(mode, || (&x * -1).min(0, false))
            .to_vec::<i32>()
            .unwrap();
        assert_eq!(got, [3], "{mode:?}");
    }
}
