//! The bad-input table: every case gives an error (never a panic) whose
//! kind/code is right and whose message names the op, the shapes and the
//! caller's source line.

use tilejit::prelude::*;
use tilejit::{Error, ErrorKind};
use tilejit_tests::t32;

/// Asserts `t` carries an error of `kind` whose message holds every needle
/// and points at this file on `line`.
#[track_caller]
fn expect_err(t: &Tensor, kind: ErrorKind, needles: &[&str], line: u32) -> Error {
    let e = t
        .error()
        .unwrap_or_else(|| panic!("expected an error tensor, got {t:?}"))
        .clone();
    check(&e, kind, needles, line);
    e
}

#[track_caller]
fn check(e: &Error, kind: ErrorKind, needles: &[&str], line: u32) {
    let msg = e.to_string();
    assert_eq!(e.kind(), kind, "wrong kind for: {msg}");
    assert_eq!(e.code(), kind.code());
    for n in needles {
        assert!(msg.contains(n), "message lacks `{n}`: {msg}");
    }
    let at = format!("bad_input.rs:{line}:");
    assert!(
        msg.contains(&at),
        "message lacks the caller location `{at}`: {msg}"
    );
}

#[test]
fn non_broadcastable_shapes() {
    let a = Tensor::ones(&[3, 4], DType::F32);
    let b = Tensor::ones(&[5], DType::F32);
    let line = line!() + 1;
    let c = &a + &b;
    expect_err(
        &c,
        ErrorKind::Shape,
        &["`add`", "[3,4]", "[5]", "broadcast"],
        line,
    );
    assert_eq!(ErrorKind::Shape.code(), 2);
    // The error flows through later ops unchanged and reaches `to_vec`.
    let d = (c * 2.0).exp().sum(0, false);
    let e = d.to_vec::<f32>().unwrap_err();
    check(&e, ErrorKind::Shape, &["`add`"], line);
    // The fallible form returns it directly.
    let line = line!() + 1;
    let e = a.try_add(&b).unwrap_err();
    check(&e, ErrorKind::Shape, &["[3,4]"], line);
}

#[test]
fn matmul_inner_dimension_mismatch() {
    let a = Tensor::ones(&[2, 3], DType::F32);
    let b = Tensor::ones(&[4, 5], DType::F32);
    let line = line!() + 1;
    let c = a.matmul(&b);
    expect_err(
        &c,
        ErrorKind::Shape,
        &["`matmul`", "f32[2,3]", "f32[4,5]", "inner"],
        line,
    );
    let line = line!() + 1;
    let c = a.matmul(&Tensor::ones(&[3], DType::F32));
    expect_err(&c, ErrorKind::Shape, &["`matmul`"], line);
}

#[test]
fn axis_out_of_range() {
    let a = Tensor::ones(&[2, 3], DType::F32);
    let line = line!() + 1;
    let s = a.sum(2, false);
    expect_err(
        &s,
        ErrorKind::BadArgument,
        &["`sum`", "axis 2", "rank 2"],
        line,
    );
    let line = line!() + 1;
    let s = a.softmax(-3);
    expect_err(&s, ErrorKind::BadArgument, &["axis -3"], line);
    let line = line!() + 1;
    let s = a.transpose(0, 5);
    expect_err(&s, ErrorKind::BadArgument, &["`transpose`", "axis 5"], line);
}

#[test]
fn reshape_to_a_different_count() {
    let a = Tensor::ones(&[2, 3], DType::F32);
    let line = line!() + 1;
    let r = a.reshape(&[4, 2]);
    expect_err(
        &r,
        ErrorKind::Shape,
        &["`reshape`", "[2,3]", "6 elements", "[4,2]", "8 elements"],
        line,
    );
    let line = line!() + 1;
    let r = a.broadcast_to(&[3, 3]);
    expect_err(
        &r,
        ErrorKind::Shape,
        &["`broadcast_to`", "[2,3]", "[3,3]"],
        line,
    );
}

#[test]
fn from_vec_with_the_wrong_length() {
    let line = line!() + 1;
    let e = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[2, 2]).unwrap_err();
    check(
        &e,
        ErrorKind::BadArgument,
        &["`from_vec`", "3 elements", "[2,2]", "holds 4"],
        line,
    );
    let line = line!() + 1;
    let e = Tensor::from_vec(vec![1.0f32], &[1, 1, 1, 1, 1, 1, 1, 1, 1]).unwrap_err();
    check(&e, ErrorKind::Shape, &["rank 9"], line);
}

#[test]
fn shape_whose_byte_size_overflows() {
    let line = line!() + 1;
    let t = Tensor::zeros(&[usize::MAX / 2, 3], DType::F32);
    expect_err(
        &t,
        ErrorKind::BadArgument,
        &["`full`", "isize::MAX bytes"],
        line,
    );
    let line = line!() + 1;
    let t = Tensor::ones(&[1 << 40, 1 << 40], DType::F64);
    expect_err(&t, ErrorKind::BadArgument, &["isize::MAX"], line);
    let line = line!() + 1;
    let t = Tensor::ones(&[2], DType::F32).broadcast_to(&[usize::MAX, 2]);
    expect_err(&t, ErrorKind::BadArgument, &["`broadcast_to`"], line);
}

#[test]
fn huge_but_valid_allocation_fails_cleanly() {
    // 2^44 f32 elements (64 TiB) is a valid shape but cannot be allocated here.
    let line = line!() + 1;
    let t = Tensor::zeros(&[1 << 44], DType::F32);
    expect_err(&t, ErrorKind::Device, &["out of host memory"], line);
}

#[test]
fn mixed_dtypes_suggest_a_cast() {
    let a = Tensor::ones(&[2], DType::F32);
    let b = Tensor::ones(&[2], DType::F64);
    let line = line!() + 1;
    let c = &a * &b;
    expect_err(
        &c,
        ErrorKind::DType,
        &["`mul`", "f32", "f64", ".cast("],
        line,
    );
    assert_eq!(c.error().map(Error::code), Some(3));
    let line = line!() + 1;
    let e = a.to_vec::<f64>().unwrap_err();
    check(&e, ErrorKind::DType, &["`to_vec`", "f32", "f64"], line);
    let line = line!() + 1;
    let t = Tensor::ones(&[2], DType::I32) * 2.5;
    expect_err(&t, ErrorKind::DType, &["2.5", "i32"], line);
    let line = line!() + 1;
    let t = Tensor::ones(&[2], DType::Bool) + Tensor::ones(&[2], DType::Bool);
    expect_err(&t, ErrorKind::DType, &["bool"], line);
    let m = Tensor::ones(&[2, 2], DType::Bool);
    let line = line!() + 1;
    let t = m.matmul(&m);
    expect_err(&t, ErrorKind::DType, &["matmul", "bool", "cast"], line);
    let line = line!() + 1;
    let t = Tensor::where_cond(&a, &a, &a);
    expect_err(&t, ErrorKind::DType, &["`where`", "bool"], line);
    let line = line!() + 1;
    let t = Tensor::arange(3, DType::I32).exp();
    expect_err(&t, ErrorKind::DType, &["`exp`", "i32", "cast"], line);
}

#[test]
fn max_min_over_a_zero_size_axis() {
    let e = Tensor::zeros(&[3, 0], DType::F32);
    let line = line!() + 1;
    let m = e.max(1, false);
    expect_err(&m, ErrorKind::Shape, &["`max`", "size 0", "[3,0]"], line);
    let line = line!() + 1;
    let m = e.min(-1, true);
    expect_err(&m, ErrorKind::Shape, &["`min`"], line);
    let line = line!() + 1;
    let m = e.softmax(-1);
    expect_err(&m, ErrorKind::Shape, &["`max`"], line);
}

#[test]
fn item_of_a_multi_element_tensor() {
    let line = line!() + 1;
    let e = Tensor::ones(&[2], DType::F32).item::<f32>().unwrap_err();
    check(&e, ErrorKind::BadArgument, &["`item`"], line);
}

#[jit]
fn reads_values(x: &Tensor) -> Tensor {
    let _ = x.to_vec::<f32>(); // ignoring the error does not hide it
    x * 2.0
}

#[jit]
fn bad_broadcast_inside(x: &Tensor, y: &Tensor) -> Tensor {
    let z = x + y;
    z.exp()
}

#[jit]
fn dead_error_inside(x: &Tensor) -> Tensor {
    let _unused = x.reshape(&[7, 7]);
    x * 2.0
}

#[test]
fn reading_a_traced_tensor_is_an_error() {
    let x = Tensor::ones(&[2], DType::F32);
    let e = reads_values(&x).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e.root(), Error::TracedValue { .. }), "{msg}");
    assert_eq!(e.kind(), ErrorKind::BadArgument);
    assert!(
        msg.contains("`to_vec`") && msg.contains("traced tensor") && msg.contains("reads_values"),
        "{msg}"
    );
    assert!(msg.contains("bad_input.rs:"), "{msg}");
    assert!(
        reads_values::jit().handlers().is_empty(),
        "a failed trace must not be cached"
    );
}

/// The 1-based line of the first line of this file that contains `needle`.
fn line_of(needle: &str) -> u32 {
    let src = include_str!("bad_input.rs");
    src.lines()
        .position(|l| l.contains(needle))
        .expect("needle in source") as u32
        + 1
}

#[test]
fn errors_inside_jit_bodies_name_the_users_line() {
    let line = line_of("let z = x + y;");
    let e = bad_broadcast_inside(
        &Tensor::ones(&[3, 4], DType::F32),
        &Tensor::ones(&[5], DType::F32),
    )
    .unwrap_err();
    check(
        &e,
        ErrorKind::Shape,
        &[
            "`add`",
            "[3,4]",
            "[5]",
            "bad_broadcast_inside",
            "(f32[3,4], f32[5])",
        ],
        line,
    );
    // An error in dead code still fails the call: nothing is lost.
    let e = dead_error_inside(&Tensor::ones(&[4], DType::F32)).unwrap_err();
    assert!(e.to_string().contains("`reshape`"), "{e}");
    // The same function still works for shapes that fit.
    let ok = bad_broadcast_inside(
        &Tensor::ones(&[3, 4], DType::F32),
        &Tensor::ones(&[4], DType::F32),
    )
    .unwrap();
    assert_eq!(ok.shape(), &[3, 4]);
}

#[test]
fn jit_argument_mismatches_are_errors() {
    let f = jit_fn!(|a: &Tensor, k: f32| a * k);
    let a = Tensor::ones(&[2], DType::F32);
    let e = f.call((&a,)).unwrap_err();
    assert!(e.to_string().contains("expected 2 arguments, got 1"), "{e}");
    let e = f.call((&a, &a)).unwrap_err();
    assert!(e.to_string().contains("argument 1 (`k`)"), "{e}");
    // An error tensor passed as an argument surfaces as that error.
    let bad = Tensor::ones(&[2], DType::F32).reshape(&[3]);
    let e = f.call((&bad, 1.0f32)).unwrap_err();
    assert!(e.to_string().contains("`reshape`"), "{e}");
}

#[test]
fn error_codes_are_stable() {
    let codes: Vec<u32> = [
        ErrorKind::BadArgument,
        ErrorKind::Shape,
        ErrorKind::DType,
        ErrorKind::Unsupported,
        ErrorKind::Device,
        ErrorKind::Internal,
        ErrorKind::Panic,
    ]
    .iter()
    .map(|k| k.code())
    .collect();
    assert_eq!(codes, vec![1, 2, 3, 4, 5, 6, 7]);
    let e = t32(&[1.0], &[1]).reshape(&[2]).error().cloned().unwrap();
    assert!(
        e.to_string().starts_with("shape error [E2] in `reshape`"),
        "{e}"
    );
}

/// A float becomes an integer by one rule everywhere, the cast's: toward
/// zero, saturating at the dtype's bounds, NaN to 0. `full` and `scalar`
/// once wrapped instead (3e9 as i32 gave -1294967296).
#[test]
fn floats_become_integers_as_a_cast_makes_them() {
    let cases: [(f64, DType, i64); 9] = [
        (3e9, DType::I32, i32::MAX as i64),
        (-3e9, DType::I32, i32::MIN as i64),
        (f64::INFINITY, DType::I32, i32::MAX as i64),
        (f64::NEG_INFINITY, DType::I64, i64::MIN),
        (1e10, DType::I32, i32::MAX as i64),
        (1e30, DType::I64, i64::MAX),
        (f64::NAN, DType::I32, 0),
        (-2.75, DType::I32, -2),
        (2.75, DType::I64, 2),
    ];
    for (v, d, want) in cases {
        let full = Tensor::full(&[2], v, d);
        let scalar = Tensor::scalar(v, d);
        let cast = Tensor::full(&[2], v, DType::F64).cast(d);
        let as_i64 = |t: &Tensor| -> Vec<i64> {
            match d {
                DType::I32 => t
                    .to_vec::<i32>()
                    .unwrap()
                    .into_iter()
                    .map(i64::from)
                    .collect(),
                _ => t.to_vec::<i64>().unwrap(),
            }
        };
        assert_eq!(as_i64(&full), [want, want], "full({v}, {d})");
        assert_eq!(as_i64(&scalar), [want], "scalar({v}, {d})");
        assert_eq!(as_i64(&cast), [want, want], "cast({v}) to {d}");
    }
}

/// A float scalar meeting an integer tensor must be a whole number the
/// dtype holds exactly; 2^63 is not an i64 (it once became i64::MAX).
#[test]
fn a_scalar_just_past_i64_is_inexact() {
    let x = Tensor::arange(3, DType::I64);
    let two_63 = -(i64::MIN as f64);
    let (t, line) = (&x + two_63, line!());
    let e = expect_err(
        &t,
        ErrorKind::DType,
        &["not exactly representable as i64"],
        line,
    );
    assert_eq!(e.code(), 3);
    let ok = &x + (-two_63);
    assert_eq!(ok.to_vec::<i64>().unwrap()[0], i64::MIN);
    let (t, line) = (&Tensor::arange(2, DType::I32) + 3e9, line!());
    expect_err(&t, ErrorKind::DType, &["i32"], line);
}

/// A panic in a jit body is the user's code failing: its own kind (E7),
/// not a bad argument (E1, as it once was).
#[test]
fn a_panicking_jit_body_is_e7() {
    let f = tilejit::jit_fn!(|x: &Tensor| -> Tensor {
        if x.shape()[0] == 2 {
            panic!("the body gave up");
        }
        x.clone()
    });
    let e = f.call(Tensor::ones(&[2], DType::F32)).unwrap_err();
    assert_eq!((e.kind(), e.code()), (ErrorKind::Panic, 7), "{e}");
    let msg = e.to_string();
    assert!(
        msg.starts_with("panic in user code [E7]") && msg.contains("the body gave up"),
        "{msg}"
    );
}

/// A device failure while running an eager op on Sim (here: GM, 8 GiB by
/// default, cannot hold a 10 GB output of two small inputs) is a device
/// error (E5) with the device's message; it was flattened into E6.
#[test]
fn a_device_failure_in_an_eager_op_is_e5() {
    let x = Tensor::zeros(&[50_000, 1], DType::F32);
    let y = Tensor::zeros(&[1, 50_000], DType::F32);
    let (t, line) = (with_mode(RunMode::Sim, || &x + &y), line!());
    let e = expect_err(&t, ErrorKind::Device, &["out of memory in GM"], line);
    assert_eq!(e.code(), 5);
}

/// An allocation sized by a shape that the host cannot give (2^40
/// elements) is an error naming its bytes (E5), not the abort `memory
/// allocation of N bytes failed`; the process goes on.
#[test]
fn arange_too_big_to_allocate_is_e5() {
    let line = line!() + 1;
    let t = Tensor::arange(1 << 40, DType::F32);
    expect_err(
        &t,
        ErrorKind::Device,
        &[
            "`arange`",
            "out of host memory allocating 4398046511104 bytes",
        ],
        line,
    );
    let t = Tensor::arange(3, DType::F32);
    assert_eq!(t.to_vec::<f32>().unwrap(), [0.0, 1.0, 2.0]);
}

/// A 2^40-element result is E5 on every backend: host storage (an f16
/// result, an integer matmul), GM, or the interpreter's own vectors.
#[test]
fn a_huge_result_is_e5_on_every_backend() {
    let h = Tensor::ones(&[1], DType::F16);
    let (a, b) = (
        Tensor::ones(&[1 << 20, 1], DType::I32),
        Tensor::ones(&[1, 1 << 20], DType::I32),
    );
    for mode in [RunMode::Host, RunMode::Sim, RunMode::Reference] {
        let (t, line) = (with_mode(mode, || h.broadcast_to(&[1 << 40])), line!());
        expect_err(&t, ErrorKind::Device, &["out of", "bytes"], line);
        let (t, line) = (with_mode(mode, || a.matmul(&b)), line!());
        expect_err(&t, ErrorKind::Device, &["out of", "bytes"], line);
    }
    assert_eq!(h.to_vec::<half::f16>().unwrap().len(), 1);
}

#[jit]
fn sum_of_a_huge_broadcast(x: &Tensor) -> Tensor {
    x.broadcast_to(&[1 << 20, 1 << 20]).sum_all()
}

/// Only an intermediate is huge (2^40 elements, summed to one): the
/// interpreter, which holds every node's values, fails the call with E5.
#[test]
fn a_huge_intermediate_in_the_interpreter_is_e5() {
    let x = Tensor::ones(&[1], DType::F32);
    let e = with_mode(RunMode::Reference, || sum_of_a_huge_broadcast(&x)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Device, "{e}");
    assert!(
        e.to_string().contains("out of host memory allocating"),
        "{e}"
    );
    assert!(e.to_string().contains("bytes"), "{e}");
}

/// Issue 35: `[usize::MAX, 0]` was accepted (it has no elements), but its
/// `sum(0)` and a double transpose failed with E6 "bad launch: negative
/// dim -1" (kernels index with i64). As in numpy, the product of a shape's
/// nonzero dims times the element size must fit in `isize::MAX` bytes,
/// zeros or not: the shape is refused when it is made, naming the op.
#[test]
fn a_zero_size_shape_with_a_dim_past_isize_is_refused_when_made() {
    let line = line!() + 1;
    let t = Tensor::zeros(&[usize::MAX, 0], DType::F32);
    expect_err(
        &t,
        ErrorKind::BadArgument,
        &["`full`", "isize::MAX bytes"],
        line,
    );
    let line = line!() + 1;
    let t = Tensor::from_vec(Vec::<f32>::new(), &[0, 1 << 62, 2]);
    let e = t.unwrap_err();
    check(&e, ErrorKind::BadArgument, &["isize::MAX bytes"], line);
    let z = Tensor::zeros(&[0, 3], DType::F32);
    let line = line!() + 1;
    let t = z.reshape(&[0, usize::MAX]);
    expect_err(
        &t,
        ErrorKind::BadArgument,
        &["`reshape`", "isize::MAX"],
        line,
    );
}

/// The largest f32 dim such a shape may have.
const BIG: usize = isize::MAX as usize / 4;

type BigOp = (&'static str, fn(&Tensor) -> Tensor, Vec<usize>);

fn big_ops() -> Vec<BigOp> {
    vec![
        ("sum(0)", |x| x.sum(0, false), vec![0]),
        ("sum(0) keep", |x| x.sum(0, true) + 1.0, vec![1, 0]),
        ("transpose", |x| x.transpose(0, 1), vec![0, BIG]),
        (
            "double transpose",
            |x| x.transpose(0, 1).transpose(0, 1),
            vec![BIG, 0],
        ),
        (
            "reshape",
            |x| x.reshape(&[0, BIG, 1]) * 2.0,
            vec![0, BIG, 1],
        ),
        (
            "matmul over a huge K",
            |x| x.transpose(0, 1).matmul(x),
            vec![0, 0],
        ),
        ("exp then max(0)", |x| x.exp().max(0, false), vec![0]),
    ]
}

#[test]
fn zero_size_tensors_with_a_huge_dim_work_in_every_mode() {
    let x = Tensor::zeros(&[BIG, 0], DType::F32);
    assert_eq!(x.shape(), [BIG, 0]);
    for (name, op, want) in big_ops() {
        let f = tilejit::jit_fn!(move |x: &Tensor| op(x));
        let eager = op(&x);
        assert_eq!(eager.shape(), want, "{name} eager: {:?}", eager.error());
        for mode in RunMode::ALL {
            let got = f.with_mode(mode).call((&x,));
            let got = got.unwrap_or_else(|e| panic!("{name} {mode:?}: {e}"));
            assert_eq!(got.shape(), want, "{name} {mode:?}");
            assert_eq!(got.to_vec::<f32>().unwrap(), [0f32; 0], "{name} {mode:?}");
            let eager = with_mode(mode, || op(&x));
            assert_eq!(
                eager.to_vec::<f32>().unwrap(),
                [0f32; 0],
                "{name} {mode:?} eager"
            );
        }
    }
}

/// A result of `BIG` elements or more is a clean error: one too large to
/// describe (E1), or to allocate (E5).
#[test]
fn huge_results_of_zero_size_tensors_are_clean_errors() {
    let x = Tensor::zeros(&[BIG, 0], DType::F32);
    let line = line!() + 1;
    let t = x.matmul(&Tensor::zeros(&[0, 3], DType::F32));
    expect_err(
        &t,
        ErrorKind::BadArgument,
        &["`matmul`", "isize::MAX"],
        line,
    );
    let line = line!() + 1;
    let t = x.sum(1, false);
    expect_err(&t, ErrorKind::Device, &["`sum`", "out of"], line);
}
