//! `i16`, `u16`, `u32` and `u64` tensors against numpy's values, eager and
//! inside a jit function, on the reference, Host, Sim and Verify:
//! wrapping arithmetic, unsigned compares, max/min and division above the
//! signed range (u64 values above `i64::MAX`, u32 above `i32::MAX`),
//! casts both ways, reductions; then ONNX models using the dtypes.
//!
//! The expected values are numpy 2.x output pasted as literals:
//!
//! ```python
//! a = np.array([2**64-1, 2**63, 5, 0], np.uint64); b = np.array([2, 3, 2**64-2, 7], np.uint64)
//! a + b, a - b, a * b, a // b, a % b, a > b, a < b, np.maximum(a, b), np.minimum(a, b)
//! a >> np.uint64(60), a.astype(np.float64), np.sum(a, dtype=np.uint64), a.max(), a.min()
//! c = np.array([4_000_000_000, 1, 2**32-1, 7], np.uint32); d = np.array([3, 4_000_000_000, 2, 0], np.uint32)
//! c + d, c - d, c * d, c // d, c % d, c > d, np.maximum(c, d), np.minimum(c, d), c.astype(np.float32)
//! x = np.array([-32768, 32767, -1, 300], np.int16); y = np.array([-1, 1, 200, -7], np.int16)
//! x + y, x - y, x * y, -x, np.abs(x), np.maximum(x, y), x % y, x > y
//! p = np.array([65535, 40000, 1, 0], np.uint16); q = np.array([1, 30000, 65535, 3], np.uint16)
//! p + q, p - q, p * q, p > q, np.maximum(p, q), p // q, p % q
//! np.array([-1, -32768], np.int16).astype(np.uint64)  # [2**64-1, 2**64-32768]
//! np.array([4_000_000_000], np.uint32).astype(np.int32)  # [-294967296]
//! ```
//! (numpy gives 0 for `x // 0` and `x % 0` of unsigned integers, with a
//! warning; tilejit gives 0 without one.)

use crate::onnx::onnx_err;
use tilejit::onnx;
use tilejit::prelude::*;
use tilejit::ErrorKind;
use tilejit_testkit::onnx::{self as b, proto::TensorProto, D};

const MODES: [RunMode; 4] = [
    RunMode::Reference,
    RunMode::Host,
    RunMode::Sim,
    RunMode::Verify,
];

type Op2 = fn(&Tensor, &Tensor) -> Tensor;

/// The bits of each element as a u64 (a u64 tensor as it is, any other
/// integer or bool widened as numpy's `astype(np.uint64)` does).
fn bits(t: &Tensor) -> Vec<u64> {
    t.cast(DType::U64).to_vec::<u64>().unwrap()
}

/// Runs `op(a, b)` eagerly and in a jit function in every mode; records
/// each result whose dtype or values (as u64 bits) differ from `want`.
fn check(what: &str, op: Op2, a: &Tensor, b: &Tensor, dtype: DType, want: &[u64]) -> Vec<String> {
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
                    let g = bits(&t);
                    if g != want {
                        failures.push(format!("{at}: {g:?}, want {want:?}"));
                    }
                }
            }
        }
    }
    failures
}

/// As [`check`] for a float result, compared exactly.
fn check_f(what: &str, op: Op2, a: &Tensor, dtype: DType, want: &[f64]) -> Vec<String> {
    let f = jit_fn!(move |a: &Tensor| op(a, a));
    let mut failures = Vec::new();
    for mode in MODES {
        for (how, got) in [
            ("eager", with_mode(mode, || op(a, a)).into_result()),
            ("jit", f.with_mode(mode).call((a,))),
        ] {
            let at = format!("{what} {how} {mode:?}");
            match got {
                Err(e) => failures.push(format!("{at}: {e}")),
                Ok(t) if t.dtype() != dtype => {
                    failures.push(format!("{at}: dtype {:?}, want {dtype:?}", t.dtype()))
                }
                Ok(t) => {
                    let g = t.cast(DType::F64).to_vec::<f64>().unwrap();
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

const U64_MAX: u64 = u64::MAX;
const TOP: u64 = 1 << 63;

fn a_u64() -> Tensor {
    Tensor::from_vec(vec![U64_MAX, TOP, 5, 0], &[4]).unwrap()
}
fn b_u64() -> Tensor {
    Tensor::from_vec(vec![2u64, 3, U64_MAX - 1, 7], &[4]).unwrap()
}

#[test]
fn u64_wraps_and_compares_unsigned_above_i64_max() {
    let (a, b) = (a_u64(), b_u64());
    let u = DType::U64;
    let cases: Vec<(&str, Op2, DType, Vec<u64>)> = vec![
        ("add", |a, b| a + b, u, vec![1, TOP + 3, 3, 7]),
        (
            "sub",
            |a, b| a - b,
            u,
            vec![U64_MAX - 2, TOP - 3, 7, U64_MAX - 6],
        ),
        (
            "mul",
            |a, b| a * b,
            u,
            vec![U64_MAX - 1, TOP, U64_MAX - 9, 0],
        ),
        (
            "div",
            |a, b| a / b,
            u,
            vec![TOP - 1, 3074457345618258602, 0, 0],
        ),
        ("rem", |a, b| a % b, u, vec![1, 2, 5, 0]),
        ("gt", |a, b| a.gt(b), DType::Bool, vec![1, 1, 0, 0]),
        ("lt", |a, b| a.lt(b), DType::Bool, vec![0, 0, 1, 1]),
        (
            "maximum",
            |a, b| a.maximum(b),
            u,
            vec![U64_MAX, TOP, U64_MAX - 1, 7],
        ),
        ("minimum", |a, b| a.minimum(b), u, vec![2, 3, 5, 0]),
        // Nothing is negative: abs and relu keep the value, sign is 0/1.
        ("abs", |a, _| a.abs(), u, vec![U64_MAX, TOP, 5, 0]),
        ("relu", |a, _| a.relu(), u, vec![U64_MAX, TOP, 5, 0]),
        ("sign", |a, _| a.sign(), u, vec![1, 1, 1, 0]),
        // Logical, not arithmetic: the top bit shifts in as 0.
        (
            "shr",
            |a, _| a.shr(&Tensor::full(&[4], 60.0, DType::U64)),
            u,
            vec![15, 8, 0, 0],
        ),
        (
            "where",
            |a, b| Tensor::where_cond(&a.gt(b), a, b),
            u,
            vec![U64_MAX, TOP, U64_MAX - 1, 7],
        ),
        ("max", |a, _| a.max(0, false), u, vec![U64_MAX]),
        ("min", |a, _| a.min(0, false), u, vec![0]),
        ("sum", |a, _| a.sum(0, false), u, vec![TOP + 4]),
        ("argmax", |a, _| a.argmax(0, false), DType::I64, vec![0]),
    ];
    let mut failures = Vec::new();
    for (what, op, dtype, want) in cases {
        failures.extend(check(what, op, &a, &b, dtype, &want));
    }
    assert_none(failures);
}

#[test]
fn u32_wraps_and_compares_unsigned_above_i32_max() {
    let a = Tensor::from_vec(vec![4_000_000_000u32, 1, u32::MAX, 7], &[4]).unwrap();
    let b = Tensor::from_vec(vec![3u32, 4_000_000_000, 2, 0], &[4]).unwrap();
    let u = DType::U32;
    let cases: Vec<(&str, Op2, DType, Vec<u64>)> = vec![
        ("add", |a, b| a + b, u, vec![4000000003, 4000000001, 1, 7]),
        (
            "sub",
            |a, b| a - b,
            u,
            vec![3999999997, 294967297, 4294967293, 7],
        ),
        (
            "mul",
            |a, b| a * b,
            u,
            vec![3410065408, 4000000000, 4294967294, 0],
        ),
        ("div", |a, b| a / b, u, vec![1333333333, 0, 2147483647, 0]),
        ("rem", |a, b| a % b, u, vec![1, 1, 1, 0]),
        ("gt", |a, b| a.gt(b), DType::Bool, vec![1, 0, 1, 1]),
        (
            "maximum",
            |a, b| a.maximum(b),
            u,
            vec![4000000000, 4000000000, 4294967295, 7],
        ),
        ("minimum", |a, b| a.minimum(b), u, vec![3, 1, 2, 0]),
        ("max", |a, _| a.max(0, false), u, vec![4294967295]),
        ("min", |a, _| a.min(0, false), u, vec![1]),
        ("sum", |a, _| a.sum(0, false), u, vec![4000000007]),
        // Same bits as i32.
        (
            "to i32",
            |a, _| a.cast(DType::I32).cast(DType::I64),
            DType::I64,
            vec![(-294967296i64) as u64, 1, U64_MAX, 7],
        ),
    ];
    let mut failures = Vec::new();
    for (what, op, dtype, want) in cases {
        failures.extend(check(what, op, &a, &b, dtype, &want));
    }
    assert_none(failures);
}

#[test]
fn i16_and_u16_wrap_as_numpy() {
    let x = Tensor::from_vec(vec![-32768i16, 32767, -1, 300], &[4]).unwrap();
    let y = Tensor::from_vec(vec![-1i16, 1, 200, -7], &[4]).unwrap();
    let s = |v: i64| v as u64;
    let i = DType::I16;
    let cases: Vec<(&str, Op2, DType, Vec<u64>)> = vec![
        (
            "add",
            |a, b| a + b,
            i,
            vec![s(32767), s(-32768), s(199), s(293)],
        ),
        (
            "sub",
            |a, b| a - b,
            i,
            vec![s(-32767), s(32766), s(-201), s(307)],
        ),
        (
            "mul",
            |a, b| a * b,
            i,
            vec![s(-32768), s(32767), s(-200), s(-2100)],
        ),
        (
            "neg",
            |a, _| -a,
            i,
            vec![s(-32768), s(-32767), s(1), s(-300)],
        ),
        (
            "abs",
            |a, _| a.abs(),
            i,
            vec![s(-32768), s(32767), s(1), s(300)],
        ),
        (
            "maximum",
            |a, b| a.maximum(b),
            i,
            vec![s(-1), s(32767), s(200), s(300)],
        ),
        ("rem", |a, b| a % b, i, vec![0, 0, s(199), s(-1)]),
        ("gt", |a, b| a.gt(b), DType::Bool, vec![0, 1, 0, 1]),
        ("min", |a, _| a.min(0, false), i, vec![s(-32768)]),
    ];
    let mut failures = Vec::new();
    for (what, op, dtype, want) in cases {
        failures.extend(check(what, op, &x, &y, dtype, &want));
    }
    let p = Tensor::from_vec(vec![65535u16, 40000, 1, 0], &[4]).unwrap();
    let q = Tensor::from_vec(vec![1u16, 30000, 65535, 3], &[4]).unwrap();
    let u = DType::U16;
    let cases: Vec<(&str, Op2, DType, Vec<u64>)> = vec![
        ("add", |a, b| a + b, u, vec![0, 4464, 0, 3]),
        ("sub", |a, b| a - b, u, vec![65534, 10000, 2, 65533]),
        ("mul", |a, b| a * b, u, vec![65535, 35840, 65535, 0]),
        ("gt", |a, b| a.gt(b), DType::Bool, vec![1, 1, 0, 0]),
        (
            "maximum",
            |a, b| a.maximum(b),
            u,
            vec![65535, 40000, 65535, 3],
        ),
        ("div", |a, b| a / b, u, vec![65535, 1, 0, 0]),
        ("rem", |a, b| a % b, u, vec![0, 10000, 1, 0]),
        ("max", |a, _| a.max(0, false), u, vec![65535]),
        // 40000 as i16 is -25536.
        (
            "to i16",
            |a, _| a.cast(DType::I16).cast(DType::I64),
            DType::I64,
            vec![U64_MAX, s(-25536), 1, 0],
        ),
    ];
    for (what, op, dtype, want) in cases {
        failures.extend(check(what, op, &p, &q, dtype, &want));
    }
    assert_none(failures);
}

#[test]
fn casts_to_and_from_wide_ints() {
    let mut failures = Vec::new();
    let a = a_u64();
    // u64 -> float reads the bits unsigned: 2^64-1 is 1.8446744073709552e19.
    failures.extend(check_f(
        "u64 to f64",
        |a, _| a.cast(DType::F64),
        &a,
        DType::F64,
        &[18446744073709551615.0, 9223372036854775808.0, 5.0, 0.0],
    ));
    failures.extend(check_f(
        "u64 to f32",
        |a, _| a.cast(DType::F32),
        &a,
        DType::F32,
        &[18446744073709551615.0, 9223372036854775808.0, 5.0, 0.0],
    ));
    let c = Tensor::from_vec(vec![4_000_000_000u32, 1, u32::MAX, 7], &[4]).unwrap();
    failures.extend(check_f(
        "u32 to f32",
        |a, _| a.cast(DType::F32),
        &c,
        DType::F32,
        &[4000000000.0, 1.0, 4294967296.0, 7.0],
    ));
    failures.extend(check_f(
        "u32 to f64",
        |a, _| a.cast(DType::F64),
        &c,
        DType::F64,
        &[4000000000.0, 1.0, 4294967295.0, 7.0],
    ));
    let x = Tensor::from_vec(vec![-32768i16, 32767, -1, 300], &[4]).unwrap();
    failures.extend(check_f(
        "i16 to f32",
        |a, _| a.cast(DType::F32),
        &x,
        DType::F32,
        &[-32768.0, 32767.0, -1.0, 300.0],
    ));
    // Float -> unsigned truncates toward zero and saturates, NaN -> 0
    // (Rust's `as`; numpy leaves out-of-range values undefined). In range
    // numpy agrees: [0.4, 3.9e9, 1.8e19] -> [0, 3900000000, 18e18].
    let f = Tensor::from_vec(vec![0.4f64, 3.9e9, 1.8e19, -1.5, 1e20, f64::NAN], &[6]).unwrap();
    let none = Tensor::zeros(&[], DType::F64);
    failures.extend(check(
        "f64 to u64",
        |a, _| a.cast(DType::U64),
        &f,
        &none,
        DType::U64,
        &[0, 3900000000, 18000000000000000000, 0, U64_MAX, 0],
    ));
    failures.extend(check(
        "f64 to u32",
        |a, _| a.cast(DType::U32),
        &f,
        &none,
        DType::U32,
        &[0, 3900000000, u32::MAX as u64, 0, u32::MAX as u64, 0],
    ));
    let g = Tensor::from_vec(vec![0.4f32, 65535.6, 7e4, -1.5, -4e4, f32::NAN], &[6]).unwrap();
    let none = Tensor::zeros(&[], DType::F32);
    failures.extend(check(
        "f32 to u16",
        |a, _| a.cast(DType::U16),
        &g,
        &none,
        DType::U16,
        &[0, 65535, 65535, 0, 0, 0],
    ));
    failures.extend(check(
        "f32 to i16",
        |a, _| a.cast(DType::I16),
        &g,
        &none,
        DType::I16,
        &[0, 32767, 32767, U64_MAX, (-32768i64) as u64, 0],
    ));
    // Integer -> integer wraps (numpy's astype): -1i16 -> 2^64-1.
    let n = Tensor::from_vec(vec![-1i16, -32768], &[2]).unwrap();
    failures.extend(check(
        "i16 to u64",
        |a, _| a.cast(DType::U64),
        &n,
        &n,
        DType::U64,
        &[U64_MAX, 18446744073709518848],
    ));
    assert_none(failures);
}

#[test]
fn wide_int_text_round_trips_u64_above_i64_max() {
    let f = jit_fn!(|a: &Tensor| a + Tensor::full(&[4], 1.8e19, DType::U64));
    let a = a_u64();
    for mode in MODES {
        let got = f.with_mode(mode).call((&a,)).unwrap();
        // 1.8e19 is exactly 18000000000000000000 as a u64.
        let want: Vec<u64> = [U64_MAX, TOP, 5, 0]
            .iter()
            .map(|x| x.wrapping_add(18000000000000000000))
            .collect();
        assert_eq!(bits(&got), want, "{mode:?}");
    }
}

fn typed(name: &str, code: i32, dims: &[i64], f: impl FnOnce(&mut TensorProto)) -> TensorProto {
    let mut t = TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: code,
        ..Default::default()
    };
    f(&mut t);
    t
}

/// An ONNX `Add` of input `x` and an initializer `w` of dtype `code`.
fn add_model(code: i32, w: TensorProto) -> Vec<u8> {
    b::encode(&b::model(
        17,
        vec![b::node("Add", "add", &["x", "w"], &["y"], vec![])],
        vec![b::value("x", code, &[D::N(3)])],
        vec![b::value("y", code, &[D::N(3)])],
        vec![w],
    ))
}

#[test]
fn onnx_reads_wide_int_initializers_from_every_field() {
    // uint64 in uint64_data, above i64::MAX.
    let w = typed("w", b::UINT64, &[3], |t| {
        t.uint64_data = vec![U64_MAX, TOP, 1]
    });
    let m = onnx::from_bytes(&add_model(b::UINT64, w)).unwrap();
    let x = Tensor::from_vec(vec![1u64, TOP, 2], &[3]).unwrap();
    // uint32 in uint64_data; int16 and uint16 in int32_data; raw bytes.
    let w32 = typed("w", b::UINT32, &[3], |t| {
        t.uint64_data = vec![4_000_000_000, 1, 0]
    });
    let m32 = onnx::from_bytes(&add_model(b::UINT32, w32)).unwrap();
    let x32 = Tensor::from_vec(vec![400_000_000u32, 2, 3], &[3]).unwrap();
    let w16 = typed("w", b::INT16, &[3], |t| t.int32_data = vec![-32768, 5, -1]);
    let m16 = onnx::from_bytes(&add_model(b::INT16, w16)).unwrap();
    let x16 = Tensor::from_vec(vec![-1i16, 6, 1], &[3]).unwrap();
    let wu16 = typed("w", b::UINT16, &[3], |t| {
        t.raw_data = [65535u16, 2, 3]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    });
    let mu16 = onnx::from_bytes(&add_model(b::UINT16, wu16)).unwrap();
    let xu16 = Tensor::from_vec(vec![1u16, 2, 3], &[3]).unwrap();
    for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
        let run = |m: &onnx::OnnxModel, x: &Tensor| {
            let outs = with_mode(mode, || m.run(&[("x", x)])).unwrap();
            outs.into_iter().next().unwrap().1
        };
        let y = run(&m, &x);
        assert_eq!(y.dtype(), DType::U64);
        assert_eq!(bits(&y), vec![0, 0, 3], "{mode:?}");
        let y = run(&m32, &x32);
        assert_eq!(y.dtype(), DType::U32);
        // 4e9 + 4e8 wraps modulo 2^32.
        assert_eq!(bits(&y), vec![105032704, 3, 3], "{mode:?}");
        let y = run(&m16, &x16);
        assert_eq!(y.dtype(), DType::I16);
        assert_eq!(y.to_vec::<i16>().unwrap(), vec![32767, 11, 0], "{mode:?}");
        let y = run(&mu16, &xu16);
        assert_eq!(y.to_vec::<u16>().unwrap(), vec![0, 4, 6], "{mode:?}");
    }
}

#[test]
fn onnx_wide_int_bad_input_is_an_error() {
    // uint64_data holding the wrong count, and an i16 tensor in the
    // wrong field: errors naming the field, never a panic.
    let w = typed("w", b::UINT64, &[3], |t| t.uint64_data = vec![1, 2]);
    let e = onnx::from_bytes(&add_model(b::UINT64, w)).err().unwrap();
    assert!(e.to_string().contains("uint64_data"), "{e}");
    let w = typed("w", b::INT16, &[3], |t| t.int64_data = vec![1, 2, 3]);
    let e = onnx::from_bytes(&add_model(b::INT16, w)).err().unwrap();
    assert!(e.to_string().contains("int32_data"), "{e}");
    // BitCast between sizes is a dtype error on the node.
    let cast = b::node(
        "BitCast",
        "bc",
        &["x"],
        &["y"],
        vec![b::int("to", b::UINT16 as i64)],
    );
    let model = b::encode(&b::model(
        19,
        vec![cast],
        vec![b::value("x", b::UINT32, &[D::N(3)])],
        vec![b::value("y", b::UINT16, &[D::N(3)])],
        vec![],
    ));
    let e = match onnx::from_bytes(&model) {
        Err(e) => e,
        Ok(m) => {
            let x = Tensor::from_vec(vec![1u32, 2, 3], &[3]).unwrap();
            m.run(&[("x", &x)]).err().unwrap()
        }
    };
    assert_eq!(onnx_err(&e).3, ErrorKind::DType, "{e}");
}

#[test]
fn wide_int_dtypes_keep_their_codes_and_files_round_trip() {
    // Appended after i8: the earlier dtypes keep their serialized codes.
    assert_eq!(
        &DType::ALL[7..],
        [
            DType::U8,
            DType::I8,
            DType::I16,
            DType::U16,
            DType::U32,
            DType::U64
        ]
    );
    for (name, d, size) in [
        ("i16", DType::I16, 2),
        ("u16", DType::U16, 2),
        ("u32", DType::U32, 4),
        ("u64", DType::U64, 8),
    ] {
        assert_eq!(DType::from_name(name), Some(d));
        assert_eq!(d.size_bytes(), size);
        assert!(d.is_int());
        assert_eq!(d.is_unsigned(), name.starts_with('u'));
    }
    assert!(a_u64().to_string().contains("18446744073709551615"));
    let dir = tilejit_tests::TempDir::new("wide-ints");
    let p = dir.join("x.npy");
    for t in [
        a_u64(),
        Tensor::from_vec(vec![4_000_000_000u32, 1], &[2]).unwrap(),
        Tensor::from_vec(vec![-32768i16, 7], &[2]).unwrap(),
    ] {
        tilejit::io::write_npy(&p, &t).unwrap();
        let back = tilejit::io::read_npy(&p).unwrap();
        assert_eq!(back.dtype(), t.dtype());
        assert_eq!(bits(&back), bits(&t));
    }
    // `<u2` is tilejit's bf16 bits, so a u16 file reads back as bf16 with
    // the same bits.
    let t = Tensor::from_vec(vec![0x3f80u16], &[1]).unwrap();
    tilejit::io::write_npy(&p, &t).unwrap();
    let back = tilejit::io::read_npy(&p).unwrap();
    assert_eq!(back.dtype(), DType::BF16);
    assert_eq!(back.cast(DType::F32).to_vec::<f32>().unwrap(), vec![1.0]);
}
