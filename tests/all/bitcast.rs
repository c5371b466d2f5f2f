//! `Tensor::bitcast` (and ONNX `BitCast` on traced tensors) in every run
//! mode, eager and under `#[jit]`, against IEEE 754 bit patterns written
//! out by hand: 1.0f32 is 0x3f80_0000, -2.0 is 0xc000_0000, -0.0 the sign
//! bit alone, infinity an all-ones exponent, the smallest subnormal 1,
//! f32::MAX 0x7f7f_ffff, the quiet NaN 0x7fc0_0000; 1.0f64 is
//! 0x3ff0_0000_0000_0000 and -2.5 is 0xc004_0000_0000_0000.

use crate::onnx::onnx_err;
use tilejit::onnx;
use tilejit::prelude::*;
use tilejit::ErrorKind;
use tilejit_testkit::onnx::{self as b, D};

/// ONNX's element type codes for int32 and float16.
const INT32: i32 = 6;
const FLOAT16: i32 = 10;

const MODES: [RunMode; 4] = [
    RunMode::Host,
    RunMode::Sim,
    RunMode::Verify,
    RunMode::Reference,
];

const F32S: [f32; 9] = [
    1.0,
    -2.0,
    0.0,
    -0.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    1e-45,
    f32::MAX,
    f32::NAN,
];
const BITS32: [u32; 9] = [
    0x3f80_0000,
    0xc000_0000,
    0,
    0x8000_0000,
    0x7f80_0000,
    0xff80_0000,
    1,
    0x7f7f_ffff,
    0x7fc0_0000,
];

#[jit]
fn j_scaled_bits(x: &Tensor) -> Tensor {
    // Fused with arithmetic on both sides: 2.0 is 0x4000_0000, plus one.
    (x * 2.0).bitcast(DType::I32) + 1i32
}

#[test]
fn bitcast_moves_bits_unchanged_in_every_mode() {
    let x = Tensor::from_vec(F32S.to_vec(), &[3, 3]).unwrap();
    let as_i32: Vec<i32> = BITS32.iter().map(|&b| b as i32).collect();
    let i = Tensor::from_vec(as_i32.clone(), &[9]).unwrap();
    let u = Tensor::from_vec(BITS32.to_vec(), &[9]).unwrap();
    let d = Tensor::from_vec(vec![1.0f64, -2.5, -0.0, f64::INFINITY], &[4]).unwrap();
    let d_bits: [i64; 4] = [
        0x3ff0_0000_0000_0000,
        0xc004_0000_0000_0000u64 as i64,
        i64::MIN,
        0x7ff0_0000_0000_0000,
    ];
    for mode in MODES {
        let got = with_mode(mode, || x.bitcast(DType::I32));
        assert_eq!(got.shape(), [3, 3]);
        assert_eq!(got.to_vec::<i32>().unwrap(), as_i32, "{mode:?}");
        let got = with_mode(mode, || u.bitcast(DType::F32))
            .to_vec::<f32>()
            .unwrap();
        let back: Vec<u32> = got.iter().map(|f| f.to_bits()).collect();
        assert_eq!(back, BITS32, "{mode:?}");
        let got = with_mode(mode, || i.bitcast(DType::F32))
            .to_vec::<f32>()
            .unwrap();
        let back: Vec<u32> = got.iter().map(|f| f.to_bits()).collect();
        assert_eq!(back, BITS32, "{mode:?}");
        let got = with_mode(mode, || d.bitcast(DType::I64));
        assert_eq!(got.to_vec::<i64>().unwrap(), d_bits, "{mode:?}");
        let got = with_mode(mode, || j_scaled_bits(&x.slice(0, 0, 1))).unwrap();
        // 2.0 = 0x4000_0000, -4.0 = 0xc080_0000, 0.0 = 0; each plus one.
        assert_eq!(
            got.to_vec::<i32>().unwrap(),
            [0x4000_0001, 0xc080_0001u32 as i32, 1],
            "{mode:?}"
        );
    }
    // Dtypes of different sizes, or pairs without a bit op, are errors.
    let e = x.bitcast(DType::I64);
    assert_eq!(
        e.error().map(|e| e.kind()),
        Some(ErrorKind::BadArgument),
        "{e:?}"
    );
    let e = x.bitcast(DType::F64);
    assert!(e.error().is_some());
}

/// ONNX BitCast of a graph input (traced): f32 to int32 and back to f32.
#[test]
fn onnx_bitcast_of_a_traced_tensor() {
    let model = |from: i32, to: i32| {
        b::encode(&b::model(
            26,
            vec![b::node(
                "BitCast",
                "bc",
                &["x"],
                &["y"],
                vec![b::int("to", to as i64)],
            )],
            vec![b::value("x", from, &[D::N(9)])],
            vec![b::value("y", to, &[D::N(9)])],
            vec![],
        ))
    };
    let to_int = onnx::from_bytes(&model(b::FLOAT, INT32)).unwrap();
    let to_float = onnx::from_bytes(&model(INT32, b::FLOAT)).unwrap();
    let x = Tensor::from_vec(F32S.to_vec(), &[9]).unwrap();
    let as_i32: Vec<i32> = BITS32.iter().map(|&b| b as i32).collect();
    let i = Tensor::from_vec(as_i32.clone(), &[9]).unwrap();
    for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
        let y = with_mode(mode, || to_int.run(&[("x", &x)])).unwrap();
        assert_eq!(y[0].1.to_vec::<i32>().unwrap(), as_i32, "{mode:?}");
        let y = with_mode(mode, || to_float.run(&[("x", &i)])).unwrap();
        let back: Vec<u32> = y[0]
            .1
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|f| f.to_bits())
            .collect();
        assert_eq!(back, BITS32, "{mode:?}");
    }
    // float16 -> int16 of a traced tensor has no bit op: an error naming
    // the node.
    let half = onnx::from_bytes(&model(FLOAT16, b::INT16)).unwrap();
    let h = Tensor::from_vec(vec![1.0f32; 9], &[9])
        .unwrap()
        .cast(DType::F16);
    let e = half
        .run(&[("x", &h)])
        .expect_err("f16 bits of a traced tensor");
    assert_eq!(
        onnx_err(&e),
        ("bc", "BitCast", "input", ErrorKind::Unsupported),
        "{e}"
    );
}
