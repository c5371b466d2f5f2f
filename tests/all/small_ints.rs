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

/// A tensor of `a`'s shape and dtype holding `v` everywhere.
fn like(a: &Tensor, v: f64) -> Tensor {
    Tensor::full(a.shape(), v, a.dtype())
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
            |a, _| (a.minimum(&like(a, -3.0))).max(0, false),
            &x,
            DType::I8,
            vec![-3],
        ),
        (
            "u8 min big",
            |a, _| a.maximum(&like(a, 250.0)).min(0, false),
            &a,
            DType::U8,
            vec![250],
        ),
        (
            "i8 min big",
            |a, _| a.maximum(&like(a, 120.0)).min(0, false),
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

/// `n` u8 values `(i * 37 + 11) % 256` and i8 values of the same bits.
fn ramp(n: usize) -> (Vec<u8>, Vec<i8>) {
    let u: Vec<u8> = (0..n).map(|i| ((i * 37 + 11) % 256) as u8).collect();
    let s = u.iter().map(|&v| v as i8).collect();
    (u, s)
}

#[test]
fn sizes_zero_one_odd_and_large_match_hand_computed_values() {
    let mut failures = Vec::new();
    for n in [0usize, 1, 7, 783, 20001] {
        let (u, s) = ramp(n);
        let (tu, ts) = (
            Tensor::from_vec(u.clone(), &[n]).unwrap(),
            Tensor::from_vec(s.clone(), &[n]).unwrap(),
        );
        // Elementwise: u8 `x * 3 + 5`, wrapping; i8 `max(x, -x)`, with
        // abs(-128) == -128.
        let want_u: Vec<i64> = u
            .iter()
            .map(|&v| v.wrapping_mul(3).wrapping_add(5) as i64)
            .collect();
        let want_s: Vec<i64> = s.iter().map(|&v| v.max(v.wrapping_neg()) as i64).collect();
        let none = Tensor::zeros(&[], DType::F32);
        failures.extend(check(
            &format!("u8 x*3+5 [{n}]"),
            |a, _| a * 3 + 5,
            &tu,
            &none,
            DType::U8,
            &want_u,
        ));
        failures.extend(check(
            &format!("i8 max(x,-x) [{n}]"),
            |a, _| a.maximum(&-a),
            &ts,
            &none,
            DType::I8,
            &want_s,
        ));
        // u8 compare against 128, counted in i32.
        let count = u.iter().filter(|&&v| v > 128).count() as i64;
        failures.extend(check(
            &format!("u8 count > 128 [{n}]"),
            |a, _| a.gt(&like(a, 128.0)).cast(DType::I32).sum(0, false),
            &tu,
            &none,
            DType::I32,
            &[count],
        ));
        // Reductions over the whole row: wrapping sums, max/min.
        let sum_u = u.iter().fold(0u8, |a, &v| a.wrapping_add(v)) as i64;
        let sum_s = s.iter().fold(0i8, |a, &v| a.wrapping_add(v)) as i64;
        failures.extend(check(
            &format!("u8 sum [{n}]"),
            |a, _| a.sum(0, false),
            &tu,
            &none,
            DType::U8,
            &[sum_u],
        ));
        failures.extend(check(
            &format!("i8 sum [{n}]"),
            |a, _| a.sum(0, false),
            &ts,
            &none,
            DType::I8,
            &[sum_s],
        ));
        if n > 0 {
            let (mx, mn) = (
                *u.iter().max().unwrap() as i64,
                *u.iter().min().unwrap() as i64,
            );
            failures.extend(check(
                &format!("u8 max [{n}]"),
                |a, _| a.max(0, false),
                &tu,
                &none,
                DType::U8,
                &[mx],
            ));
            failures.extend(check(
                &format!("u8 min [{n}]"),
                |a, _| a.min(0, false),
                &tu,
                &none,
                DType::U8,
                &[mn],
            ));
            let (mx, mn) = (
                *s.iter().max().unwrap() as i64,
                *s.iter().min().unwrap() as i64,
            );
            failures.extend(check(
                &format!("i8 max [{n}]"),
                |a, _| a.max(0, false),
                &ts,
                &none,
                DType::I8,
                &[mx],
            ));
            failures.extend(check(
                &format!("i8 min [{n}]"),
                |a, _| a.min(0, false),
                &ts,
                &none,
                DType::I8,
                &[mn],
            ));
            // All-negative and all-large rows: the identities.
            let neg: Vec<i64> = vec![s.iter().map(|&v| v.min(-3)).max().unwrap() as i64];
            failures.extend(check(
                &format!("i8 max of negatives [{n}]"),
                |a, _| a.minimum(&like(a, -3.0)).max(0, false),
                &ts,
                &none,
                DType::I8,
                &neg,
            ));
            let big = vec![u.iter().map(|&v| v.max(250)).min().unwrap() as i64];
            failures.extend(check(
                &format!("u8 min of large [{n}]"),
                |a, _| a.maximum(&like(a, 250.0)).min(0, false),
                &tu,
                &none,
                DType::U8,
                &big,
            ));
            let wide: Vec<i32> = s.iter().map(|&v| v as i32 - 1000).collect();
            let want = vec![*wide.iter().max().unwrap() as i64];
            failures.extend(check(
                &format!("i32 max of negatives [{n}]"),
                |a, _| a.max(0, false),
                &Tensor::from_vec(wide, &[n]).unwrap(),
                &none,
                DType::I32,
                &want,
            ));
            let am = u
                .iter()
                .enumerate()
                .max_by_key(|&(i, &v)| (v, std::cmp::Reverse(i)))
                .unwrap()
                .0 as i64;
            failures.extend(check(
                &format!("u8 argmax [{n}]"),
                |a, _| a.argmax(0, false),
                &tu,
                &none,
                DType::I64,
                &[am],
            ));
        }
        // Layout: reverse through index_select, cat, pad with 7.
        let rev: Vec<i64> = u.iter().rev().map(|&v| v as i64).collect();
        failures.extend(check(
            &format!("u8 reversed [{n}]"),
            |a, _| {
                let n = a.numel();
                a.index_select(0, &(Tensor::arange(n, DType::I64) * -1 + (n as f64 - 1.0)))
            },
            &tu,
            &none,
            DType::U8,
            &rev,
        ));
        let mut cat: Vec<i64> = s.iter().map(|&v| v as i64).collect();
        cat.extend(s.iter().map(|&v| v.wrapping_add(1) as i64));
        failures.extend(check(
            &format!("i8 cat [{n}]"),
            |a, _| Tensor::cat(&[a, &(a + 1)], 0),
            &ts,
            &none,
            DType::I8,
            &cat,
        ));
        let mut pad = vec![7i64];
        pad.extend(u.iter().map(|&v| v as i64));
        pad.extend([7, 7]);
        failures.extend(check(
            &format!("u8 pad [{n}]"),
            |a, _| a.pad(&[(1, 2)], 7.0),
            &tu,
            &none,
            DType::U8,
            &pad,
        ));
        let sl: Vec<i64> = s.iter().skip(1).map(|&v| v as i64).collect();
        failures.extend(check(
            &format!("i8 slice [{n}]"),
            |a, _| a.slice(0, 1, isize::MAX),
            &ts,
            &none,
            DType::I8,
            &sl,
        ));
    }
    assert_none(failures);
}

#[test]
fn matmul_wraps_in_the_dtype() {
    // [[200, 100], [3, 255]] @ [[2, 1], [1, 3]] = [[500, 500], [261, 768]]
    // mod 256 = [[244, 244], [5, 0]]; as i8 the same bits.
    let a = Tensor::from_vec(vec![200u8, 100, 3, 255], &[2, 2]).unwrap();
    let b = Tensor::from_vec(vec![2u8, 1, 1, 3], &[2, 2]).unwrap();
    let mut failures = check(
        "u8 matmul",
        |a, b| a.matmul(b),
        &a,
        &b,
        DType::U8,
        &[244, 244, 5, 0],
    );
    let (a8, b8) = (a.cast(DType::I8), b.cast(DType::I8));
    failures.extend(check(
        "i8 matmul",
        |a, b| a.matmul(b),
        &a8,
        &b8,
        DType::I8,
        &[-12, -12, 5, 0],
    ));
    assert_none(failures);
}

#[test]
fn npy_and_safetensors_round_trip_and_read_numpy_bytes() {
    let dir = TempDir::new("small-ints");
    let (a, x) = (a_u8(), x_i8());
    // Round trips.
    let p = dir.join("a.npy");
    io::write_npy(&p, &a).unwrap();
    let back = io::read_npy(&p).unwrap();
    assert_eq!(back.dtype(), DType::U8);
    assert_eq!(back.to_vec::<u8>().unwrap(), [200, 100, 255, 0, 7]);
    // numpy writes u8 as `|u1`, i8 as `|i1`: read the header as written.
    let bytes = std::fs::read(&p).unwrap();
    let header = String::from_utf8_lossy(&bytes[10..]);
    assert!(header.contains("'descr': '|u1'"), "{header}");
    let p = dir.join("x.npy");
    io::write_npy(&p, &x).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    assert!(String::from_utf8_lossy(&bytes[10..]).contains("'descr': '|i1'"));
    let back = io::read_npy(&p).unwrap();
    assert_eq!(back.dtype(), DType::I8);
    assert_eq!(back.to_vec::<i8>().unwrap(), [-128, 127, -1, 5, -7, 0]);
    // A file as numpy 2.4 writes it: np.save(f, np.array([[1, 255], [128, 0]], np.uint8)).
    let mut h = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }".to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut file = b"\x93NUMPY\x01\x00".to_vec();
    file.extend((h.len() as u16).to_le_bytes());
    file.extend(h.as_bytes());
    file.extend([1u8, 255, 128, 0]);
    let p = dir.join("numpy.npy");
    std::fs::write(&p, file).unwrap();
    let t = io::read_npy(&p).unwrap();
    assert_eq!((t.dtype(), t.shape()), (DType::U8, &[2usize, 2][..]));
    assert_eq!(t.to_vec::<u8>().unwrap(), [1, 255, 128, 0]);
    // safetensors: the `U8` and `I8` dtypes.
    let p = dir.join("t.safetensors");
    io::save_safetensors(&p, &[("a", &a), ("x", &x)]).unwrap();
    let m = io::load_safetensors(&p).unwrap();
    assert_eq!(m["a"].dtype(), DType::U8);
    assert_eq!(m["a"].to_vec::<u8>().unwrap(), [200, 100, 255, 0, 7]);
    assert_eq!(m["x"].dtype(), DType::I8);
    assert_eq!(m["x"].to_vec::<i8>().unwrap(), [-128, 127, -1, 5, -7, 0]);
    let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).to_string();
    assert!(
        text.contains("\"dtype\":\"U8\"") && text.contains("\"dtype\":\"I8\""),
        "{text}"
    );
}

#[test]
fn display_and_elements() {
    let text = a_u8().to_string();
    assert!(text.contains("200") && text.contains("255"), "{text}");
    assert_eq!(DType::from_name("u8"), Some(DType::U8));
    assert_eq!(DType::from_name("i8"), Some(DType::I8));
    assert_eq!((DType::U8.size_bytes(), DType::I8.size_bytes()), (1, 1));
    assert!(DType::U8.is_int() && DType::U8.is_unsigned() && !DType::I8.is_unsigned());
    // The earlier dtypes keep their places (serialized codes).
    assert_eq!(DType::ALL[6], DType::Bool);
    assert_eq!(&DType::ALL[7..9], [DType::U8, DType::I8]);
    // Asking for the wrong element type is an error, not a reinterpretation.
    assert!(a_u8().to_vec::<i8>().is_err());
    assert!(x_i8().to_vec::<u8>().is_err());
}

#[test]
fn bad_input_is_an_error_naming_the_op_and_line() {
    let (a, x) = (a_u8(), x_i8());
    let line = line!() + 1;
    let e = (&a + &x).into_result().unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("small_ints.rs") && msg.contains(&line.to_string()),
        "{msg}"
    );
    // Scalars the dtype cannot hold.
    for (what, t) in [
        ("u8 - 1 below 0", &a - (-1)),
        ("u8 + 300", &a + 300),
        ("u8 * 0.5", &a * 0.5),
        ("i8 + 128", &x + 128),
    ] {
        let e = t.into_result().unwrap_err();
        assert!(e.to_string().contains("small_ints.rs"), "{what}: {e}");
    }
    // Float-only ops, and small-int gather indices.
    for (what, t) in [
        ("exp", a.exp()),
        ("sqrt", x.sqrt()),
        (
            "gather index u8",
            x.gather(0, &Tensor::zeros(&[6], DType::U8)),
        ),
        (
            "index_select i8",
            x.index_select(0, &Tensor::zeros(&[2], DType::I8)),
        ),
    ] {
        let e = t.into_result().unwrap_err();
        assert!(e.to_string().contains("small_ints.rs"), "{what}: {e}");
    }
    // In a jit function too.
    let f = jit_fn!(|a: &Tensor| a.log());
    for mode in MODES {
        let e = f.with_mode(mode).call((&a,)).unwrap_err();
        assert!(e.to_string().contains("log"), "{mode:?}: {e}");
    }
}

#[test]
fn long_rows_of_a_two_stage_kernel_start_from_the_dtype_identity() {
    // A long row whose max feeds a second stage is reduced chunk by chunk
    // on Sim from the identity: the dtype's least value for max (it once
    // wrapped i64::MIN into i32, u8 and i8 alike, giving 0), its greatest
    // for min.
    // Nine rows (more than are split across tasks), each wider than the
    // default 192 KiB UB: 240 KB of i32, 200 KB of i8 or u8.
    let rows = 9;
    let mut failures = Vec::new();
    let none = Tensor::zeros(&[], DType::F32);
    let n = 60_001;
    let wide: Vec<i32> = (0..rows * n)
        .map(|i| -1000 - ((i * 7919) % 5000) as i32)
        .collect();
    let mx: Vec<i32> = wide.chunks(n).map(|r| *r.iter().max().unwrap()).collect();
    let want: Vec<i64> = wide
        .iter()
        .enumerate()
        .map(|(i, &v)| (v - mx[i / n]) as i64)
        .collect();
    let t = Tensor::from_vec(wide, &[rows, n]).unwrap();
    failures.extend(check(
        "i32 x - max",
        |a, _| a - a.max(-1, true),
        &t,
        &none,
        DType::I32,
        &want,
    ));
    let n = 200_003;
    let s: Vec<i8> = (0..rows * n).map(|i| -3 - ((i * 37) % 100) as i8).collect();
    let mx: Vec<i8> = s.chunks(n).map(|r| *r.iter().max().unwrap()).collect();
    let want: Vec<i64> = s
        .iter()
        .enumerate()
        .map(|(i, &v)| v.wrapping_sub(mx[i / n]) as i64)
        .collect();
    let t = Tensor::from_vec(s, &[rows, n]).unwrap();
    failures.extend(check(
        "i8 x - max",
        |a, _| a - a.max(-1, true),
        &t,
        &none,
        DType::I8,
        &want,
    ));
    let u: Vec<u8> = (0..rows * n).map(|i| 200 + ((i * 37) % 50) as u8).collect();
    let mn: Vec<u8> = u.chunks(n).map(|r| *r.iter().min().unwrap()).collect();
    let want: Vec<i64> = u
        .iter()
        .enumerate()
        .map(|(i, &v)| (v - mn[i / n]) as i64)
        .collect();
    let t = Tensor::from_vec(u, &[rows, n]).unwrap();
    failures.extend(check(
        "u8 x - min",
        |a, _| a - a.min(-1, true),
        &t,
        &none,
        DType::U8,
        &want,
    ));
    assert_none(failures);
}

/// A u8 constant made in the body (a non-splat tensor), wrapping math and
/// an unsigned compare, for the snapshot round trip.
#[jit]
fn u8_snap(x: &Tensor) -> Tensor {
    let k = Tensor::from_vec(vec![200u8, 1, 128, 255, 0], &[5]).unwrap();
    let y = x * 3u8 + &k;
    Tensor::where_cond(&y.gt(x), &y, &(x - 1u8))
}

#[test]
fn snapshots_keep_u8_constants_and_programs() {
    let dir = TempDir::new("small-ints-snap");
    let path = dir.join("u8.tjsnap");
    let x = a_u8();
    // y = x*3 + k, wrapping: [32, 45, 125, 255, 21]; y > x (unsigned) is
    // [F, F, F, T, T], else x - 1 (0 - 1 would wrap to 255).
    let want = [199u8, 99, 254, 255, 21];
    for mode in [RunMode::Host, RunMode::Sim] {
        let got = with_mode(mode, || u8_snap(&x)).unwrap();
        assert_eq!(got.to_vec::<u8>().unwrap(), want, "{mode:?}");
    }
    u8_snap::jit().save(&path).unwrap();
    u8_snap::jit().clear();
    assert_eq!(u8_snap::jit().load(&path).unwrap(), 1);
    u8_snap::jit().freeze();
    for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
        let got = with_mode(mode, || u8_snap(&x)).unwrap();
        assert_eq!(got.to_vec::<u8>().unwrap(), want, "loaded {mode:?}");
    }
    u8_snap::jit().unfreeze();
    // Scalars of the tensor's own Rust type on either side.
    assert_eq!(
        (3u8 * &x - 1u8).to_vec::<u8>().unwrap(),
        [87, 43, 252, 255, 20]
    );
    assert_eq!(
        (&x_i8() * 2i8 + 1i8).to_vec::<i8>().unwrap(),
        [1, -1, -1, 11, -13, 1]
    );
}

#[test]
fn constructors_saturate_floats_and_wrap_ranges() {
    // np.arange(300, dtype=np.uint8)[250:260] = [250 ... 255 0 1 2 3].
    let a = Tensor::arange(300, DType::U8).to_vec::<u8>().unwrap();
    assert_eq!(a[250..260], [250, 251, 252, 253, 254, 255, 0, 1, 2, 3]);
    let a = Tensor::arange(130, DType::I8).to_vec::<i8>().unwrap();
    assert_eq!(a[126..130], [126, 127, -128, -127]);
    // A float value converts as a cast (numpy's np.full raises instead).
    assert_eq!(
        Tensor::full(&[2], 300.0, DType::U8).to_vec::<u8>().unwrap(),
        [255, 255]
    );
    assert_eq!(
        Tensor::full(&[1], -7.9, DType::I8).to_vec::<i8>().unwrap(),
        [-7]
    );
    assert_eq!(
        Tensor::full(&[1], -1.0, DType::U8).to_vec::<u8>().unwrap(),
        [0]
    );
    assert!(Tensor::ones(&[0], DType::U8)
        .to_vec::<u8>()
        .unwrap()
        .is_empty());
}

#[test]
fn mean_widens_and_images_run_in_every_mode() {
    // np.mean(np.array([200, 100, 255, 0, 7], np.uint8)) = 112.4 (float64),
    // np.mean(np.array([-128, 127, -1, 5, -7, 0], np.int8)) = -0.6666666666666666.
    for mode in MODES {
        let m = with_mode(mode, || a_u8().mean(0, false));
        assert_eq!(m.dtype(), DType::F64, "{mode:?}");
        assert_eq!(m.to_vec::<f64>().unwrap(), [112.4], "{mode:?}");
        let m = with_mode(mode, || x_i8().mean(0, false));
        assert_eq!(
            m.to_vec::<f64>().unwrap(),
            [-0.6666666666666666],
            "{mode:?}"
        );
    }
    // A u8 image [1, 1, 4, 4] of 0..16 * 17: max_pool2d(2, 2) by hand is
    // [[5, 7], [13, 15]] * 17; conv2d with a [1, 1, 2, 2] kernel of ones
    // wraps its window sums (e.g. (0 + 1 + 4 + 5) * 17 = 170, (10 + 11 +
    // 14 + 15) * 17 = 850 -> 850 - 768 = 82).
    let img: Vec<u8> = (0..16).map(|i| i * 17).collect();
    let x = Tensor::from_vec(img, &[1, 1, 4, 4]).unwrap();
    let w = Tensor::ones(&[1, 1, 2, 2], DType::U8);
    let none = Tensor::zeros(&[], DType::F32);
    let mut failures = check(
        "u8 max_pool2d",
        |a, _| a.max_pool2d(2, 2),
        &x,
        &none,
        DType::U8,
        &[85, 119, 221, 255],
    );
    let sums = [0u32, 2, 8, 10].map(|i| ((i + (i + 1) + (i + 4) + (i + 5)) * 17 % 256) as i64);
    failures.extend(check(
        "u8 conv2d",
        |a, w| a.conv2d(w, 2, 0),
        &x,
        &w,
        DType::U8,
        &sums,
    ));
    assert_none(failures);
}

#[test]
fn device_resident_u8_and_i8_tensors_round_trip() {
    let sim = tilejit::Device::sim();
    let (a, x) = (a_u8(), x_i8());
    let da = a.to(&sim).unwrap();
    let dx = x.to(&sim).unwrap();
    // Eager ops run where the data is; back on the host the values are
    // numpy's: a + a wraps, i8 max over the row is 127.
    let sum = (&da + &da).to(&tilejit::Device::host()).unwrap();
    assert_eq!(sum.to_vec::<u8>().unwrap(), [144, 200, 254, 0, 14]);
    let m = dx.max(0, false).to(&tilejit::Device::host()).unwrap();
    assert_eq!(m.to_vec::<i8>().unwrap(), [127]);
    assert_eq!(
        dx.to(&tilejit::Device::host())
            .unwrap()
            .to_vec::<i8>()
            .unwrap(),
        [-128, 127, -1, 5, -7, 0]
    );
}

#[test]
fn float_params_take_the_tensor_dtype_as_a_cast() {
    // A float argument is a weak rank-0 param: beside a u8 tensor it
    // converts as a cast (truncated, saturated), per call, without a
    // retrace: 2.9 -> 2, 300.0 -> 255, -4.0 -> 0.
    let f = jit_fn!(|a: &Tensor, k: f32| a * k);
    let a = a_u8();
    for mode in MODES {
        for (k, want) in [
            (2.9f32, [144u8, 200, 254, 0, 14]),
            (300.0, [56, 156, 1, 0, 249]),
            (-4.0, [0, 0, 0, 0, 0]),
        ] {
            let got = f.with_mode(mode).call((&a, k)).unwrap();
            assert_eq!(got.dtype(), DType::U8, "{mode:?} {k}");
            assert_eq!(got.to_vec::<u8>().unwrap(), want, "{mode:?} {k}");
        }
    }
}
