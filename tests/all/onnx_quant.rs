//! `tilejit::onnx`'s narrow types (float8, float4, e8m0, int4, int2 on
//! f32/i8/u8 carriers) and quantization rows, on Host, Sim and Verify,
//! against values from onnx 1.23.2's reference implementation (with
//! ml_dtypes 0.6.0), and their bad inputs.

use super::onnx::{close, onnx_err, vals, MODES};
use tilejit::onnx;
use tilejit::{with_mode, DType, ErrorKind, Tensor};
use tilejit_testkit::onnx::{self as b, D};

const FLOAT8E4M3FN: i32 = 17;
const FLOAT8E4M3FNUZ: i32 = 18;
const FLOAT8E5M2: i32 = 19;
const FLOAT8E5M2FNUZ: i32 = 20;
const UINT4: i32 = 21;
const INT4: i32 = 22;
const FLOAT4E2M1: i32 = 23;
const FLOAT8E8M0: i32 = 24;
const UINT2: i32 = 25;
const INT2: i32 = 26;
const UINT8: i32 = 2;
const INT8: i32 = 3;

/// A model of `nodes` with inputs `(name, elem, dims)` and one output `y`.
fn model(
    nodes: Vec<b::proto::NodeProto>,
    inputs: &[(&str, i32, &[i64])],
    inits: Vec<b::proto::TensorProto>,
) -> onnx::OnnxModel {
    try_model(nodes, inputs, inits).unwrap()
}

fn try_model(
    nodes: Vec<b::proto::NodeProto>,
    inputs: &[(&str, i32, &[i64])],
    inits: Vec<b::proto::TensorProto>,
) -> tilejit::Result<onnx::OnnxModel> {
    let ins = inputs
        .iter()
        .map(|(n, e, d)| {
            let dims: Vec<D> = d.iter().map(|&v| D::N(v)).collect();
            b::value(n, *e, &dims)
        })
        .collect();
    onnx::from_bytes(&b::encode(&b::model(
        25,
        nodes,
        ins,
        vec![b::value("y", 0, &[])],
        inits,
    )))
}

/// An initializer of `elem` from its stored bytes (`raw_data`).
fn raw(name: &str, elem: i32, dims: &[i64], bytes: &[u8]) -> b::proto::TensorProto {
    b::proto::TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: elem,
        raw_data: bytes.to_vec(),
        ..Default::default()
    }
}

fn run_y(m: &onnx::OnnxModel, inputs: &[(&str, &Tensor)], mode: tilejit::RunMode) -> Tensor {
    let outs = with_mode(mode, || m.run(inputs)).unwrap();
    outs.into_iter().next().unwrap().1
}

/// Equal values, the sign of zero included, NaN equal to NaN.
fn same_bits(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g.to_bits() == (w as f32).to_bits();
        assert!(ok, "{what}: element {i}: {g} vs {w}");
    }
}

const X: [f32; 16] = [
    0.0,
    -0.0,
    0.3,
    -1.7,
    2.5,
    3.5,
    17.0,
    -300.0,
    500.0,
    1e-7,
    -1e-3,
    60000.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    0.0625,
];
const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;

/// onnx's `cast_to(X, to, saturate)`, per type and saturate.
#[allow(clippy::type_complexity)]
const FLOAT_CASTS: &[(i32, i64, [f64; 16])] = &[
    (
        FLOAT8E4M3FN,
        1,
        [
            0.0,
            -0.0,
            0.3125,
            -1.75,
            2.5,
            3.5,
            16.0,
            -288.0,
            448.0,
            0.0,
            -0.001953125,
            448.0,
            448.0,
            -448.0,
            NAN,
            0.0625,
        ],
    ),
    (
        FLOAT8E4M3FN,
        0,
        [
            0.0,
            -0.0,
            0.3125,
            -1.75,
            2.5,
            3.5,
            16.0,
            -288.0,
            NAN,
            0.0,
            -0.001953125,
            NAN,
            NAN,
            NAN,
            NAN,
            0.0625,
        ],
    ),
    (
        FLOAT8E4M3FNUZ,
        1,
        [
            0.0,
            0.0,
            0.3125,
            -1.75,
            2.5,
            3.5,
            16.0,
            -240.0,
            240.0,
            0.0,
            -0.0009765625,
            240.0,
            240.0,
            -240.0,
            NAN,
            0.0625,
        ],
    ),
    (
        FLOAT8E4M3FNUZ,
        0,
        [
            0.0,
            0.0,
            0.3125,
            -1.75,
            2.5,
            3.5,
            16.0,
            NAN,
            NAN,
            0.0,
            -0.0009765625,
            NAN,
            NAN,
            NAN,
            NAN,
            0.0625,
        ],
    ),
    (
        FLOAT8E5M2,
        1,
        [
            0.0,
            -0.0,
            0.3125,
            -1.75,
            2.5,
            3.5,
            16.0,
            -320.0,
            512.0,
            0.0,
            -0.0009765625,
            57344.0,
            57344.0,
            -57344.0,
            NAN,
            0.0625,
        ],
    ),
    (
        FLOAT8E5M2,
        0,
        [
            0.0,
            -0.0,
            0.3125,
            -1.75,
            2.5,
            3.5,
            16.0,
            -320.0,
            512.0,
            0.0,
            -0.0009765625,
            57344.0,
            INF,
            -INF,
            NAN,
            0.0625,
        ],
    ),
    (
        FLOAT8E5M2FNUZ,
        1,
        [
            0.0,
            0.0,
            0.3125,
            -1.75,
            2.5,
            3.5,
            16.0,
            -320.0,
            512.0,
            0.0,
            -0.0009765625,
            57344.0,
            57344.0,
            -57344.0,
            NAN,
            0.0625,
        ],
    ),
    (
        FLOAT8E5M2FNUZ,
        0,
        [
            0.0,
            0.0,
            0.3125,
            -1.75,
            2.5,
            3.5,
            16.0,
            -320.0,
            512.0,
            0.0,
            -0.0009765625,
            57344.0,
            NAN,
            NAN,
            NAN,
            0.0625,
        ],
    ),
    (
        FLOAT4E2M1,
        1,
        [
            0.0, -0.0, 0.5, -1.5, 2.0, 4.0, 6.0, -6.0, 6.0, 0.0, -0.0, 6.0, 6.0, -6.0, -0.0, 0.0,
        ],
    ),
    (
        FLOAT4E2M1,
        0,
        [
            0.0, -0.0, 0.5, -1.5, 2.0, 4.0, 6.0, -6.0, 6.0, 0.0, -0.0, 6.0, 6.0, -6.0, -0.0, 0.0,
        ],
    ),
];

#[test]
fn cast_to_float8_and_float4_rounds_like_onnx() {
    let x = Tensor::from_vec(X.to_vec(), &[16]).unwrap();
    for (to, sat, want) in FLOAT_CASTS {
        let node = b::node(
            "Cast",
            "c",
            &["x"],
            &["y"],
            vec![b::int("to", *to as i64), b::int("saturate", *sat)],
        );
        let m = model(vec![node], &[("x", b::FLOAT, &[16])], vec![]);
        for mode in MODES {
            let y = run_y(&m, &[("x", &x)], mode);
            assert_eq!(y.dtype(), DType::F32);
            same_bits(
                &y.to_vec::<f32>().unwrap(),
                want,
                &format!("{to} sat={sat} {mode:?}"),
            );
        }
    }
}

#[test]
fn cast_to_e8m0_by_round_mode() {
    let xe: Vec<f32> = vec![
        0.0,
        0.3,
        0.75,
        1.0,
        1.5,
        3.0,
        5.0,
        1e-40,
        3e38,
        -6.0,
        f32::INFINITY,
        f32::NAN,
    ];
    let tiny = 5.877471754111438e-39;
    let min_normal = 1.1754943508222875e-38;
    let big = 1.7014118346046923e38;
    let cases: &[(&str, i64, [f64; 12])] = &[
        (
            "up",
            1,
            [
                tiny, 0.5, 1.0, 1.0, 2.0, 4.0, 8.0, min_normal, big, 8.0, NAN, NAN,
            ],
        ),
        (
            "up",
            0,
            [
                tiny, 0.5, 1.0, 1.0, 2.0, 4.0, 8.0, min_normal, NAN, 8.0, NAN, NAN,
            ],
        ),
        (
            "down",
            1,
            [
                tiny, 0.25, 0.5, 1.0, 1.0, 2.0, 4.0, tiny, big, 4.0, NAN, NAN,
            ],
        ),
        (
            "nearest",
            1,
            [
                tiny, 0.25, 1.0, 1.0, 2.0, 4.0, 4.0, tiny, big, 8.0, NAN, NAN,
            ],
        ),
        (
            "nearest",
            0,
            [
                tiny, 0.25, 1.0, 1.0, 2.0, 4.0, 4.0, tiny, NAN, 8.0, NAN, NAN,
            ],
        ),
    ];
    let x = Tensor::from_vec(xe, &[12]).unwrap();
    for (round, sat, want) in cases {
        let node = b::node(
            "Cast",
            "c",
            &["x"],
            &["y"],
            vec![
                b::int("to", FLOAT8E8M0 as i64),
                b::int("saturate", *sat),
                b::string("round_mode", round),
            ],
        );
        let m = model(vec![node], &[("x", b::FLOAT, &[12])], vec![]);
        for mode in MODES {
            let y = run_y(&m, &[("x", &x)], mode);
            same_bits(
                &y.to_vec::<f32>().unwrap(),
                want,
                &format!("{round} {sat} {mode:?}"),
            );
        }
    }
}

#[test]
fn cast_to_int4_and_int2_truncates_and_wraps() {
    let xi = vec![-9.7f32, -8.0, -2.5, -0.5, 0.9, 3.99, 7.5, 8.0, 15.2, 100.0];
    let x = Tensor::from_vec(xi, &[10]).unwrap();
    let cases: &[(i32, DType, [i64; 10])] = &[
        (INT4, DType::I8, [7, -8, -2, 0, 0, 3, 7, -8, -1, 4]),
        (UINT4, DType::U8, [7, 8, 14, 0, 0, 3, 7, 8, 15, 4]),
        (INT2, DType::I8, [-1, 0, -2, 0, 0, -1, -1, 0, -1, 0]),
        (UINT2, DType::U8, [3, 0, 2, 0, 0, 3, 3, 0, 3, 0]),
    ];
    for (to, carrier, want) in cases {
        let node = b::node("Cast", "c", &["x"], &["y"], vec![b::int("to", *to as i64)]);
        let m = model(vec![node], &[("x", b::FLOAT, &[10])], vec![]);
        for mode in MODES {
            let y = run_y(&m, &[("x", &x)], mode);
            assert_eq!(y.dtype(), *carrier, "{to}");
            let got = y.cast(DType::I64).to_vec::<i64>().unwrap();
            assert_eq!(got, want.to_vec(), "{to} {mode:?}");
        }
    }
}

/// Packed INT4 in `raw_data` and FLOAT8E4M3FN in `int32_data` decode onto
/// their carriers exactly.
#[test]
fn narrow_initializers_decode() {
    // int4 [-8, 7, -1, 0, 3] packs to 0x78 0x0F 0x03 (onnx's from_array).
    let w4 = raw("w4", INT4, &[5], &[0x78, 0x0F, 0x03]);
    let w8 = b::proto::TensorProto {
        name: "w8".into(),
        dims: vec![4],
        data_type: FLOAT8E4M3FN,
        int32_data: vec![0x38, 0x7E, 0xFE, 0x01],
        ..Default::default()
    };
    let nodes = vec![
        b::node("Cast", "c4", &["w4"], &["f4"], vec![b::int("to", 1)]),
        b::node(
            "ReduceSum",
            "r",
            &["f4"],
            &["s4"],
            vec![b::int("keepdims", 0)],
        ),
        b::node("Add", "a", &["w8", "s4"], &["y0"], vec![]),
        b::node("Add", "a2", &["y0", "x"], &["y"], vec![]),
    ];
    let m = model(nodes, &[("x", b::FLOAT, &[4])], vec![w4, w8]);
    let x = Tensor::zeros(&[4], DType::F32);
    // sum(int4) = 1; e4m3fn 0x38 0x7E 0xFE 0x01 = 1, 448, -448, 2^-9.
    for mode in MODES {
        let y = run_y(&m, &[("x", &x)], mode);
        same_bits(
            &y.to_vec::<f32>().unwrap(),
            &[2.0, 449.0, -447.0, 1.001953125],
            &format!("{mode:?}"),
        );
    }
}

/// An INT4 graph input takes i8 values, wrapped onto int4 as a Cast would.
#[test]
fn narrow_input_takes_its_carrier() {
    let node = b::node("DequantizeLinear", "dq", &["x", "s", "z"], &["y"], vec![]);
    let inits = vec![b::f32s("s", &[], &[0.5]), raw("z", INT4, &[], &[0x01])];
    let m = model(vec![node], &[("x", INT4, &[4])], inits);
    assert_eq!(m.inputs()[0].dtype, Some(DType::I8));
    let x = Tensor::from_vec(vec![-9i8, 7, 8, 3], &[4]).unwrap();
    // wrapped: [7, 7, -8, 3]; (x - 1) * 0.5.
    for mode in MODES {
        let y = run_y(&m, &[("x", &x)], mode);
        close(&y.to_vec::<f32>().unwrap(), &[3.0, 3.0, -4.5, 1.0]);
    }
    let wrong = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    let e = m.run(&[("x", &wrong)]).unwrap_err();
    let (_, _, attr, kind) = onnx_err(&e);
    assert_eq!((attr, kind), ("x", ErrorKind::DType), "{e}");
}

/// `vals(12, 0) * 3` as f32: 0, 0.97636163, 1.8205774, 2.4183865, 2.6888783,
/// 2.5954432, 2.1507268, 1.4149197, 0.48760992, -0.5056956, -1.4305576,
/// -2.1618004.
fn xq() -> Tensor {
    let v: Vec<f32> = vals(12, 0.0).iter().map(|v| v * 3.0).collect();
    Tensor::from_vec(v, &[3, 4]).unwrap()
}

#[test]
fn quantize_per_axis_uint8() {
    let node = b::node(
        "QuantizeLinear",
        "q",
        &["x", "s", "z"],
        &["y"],
        vec![b::int("axis", 0)],
    );
    let inits = vec![
        b::f32s("s", &[3], &[0.02, 0.05, 0.1]),
        raw("z", UINT8, &[3], &[128, 10, 250]),
    ];
    let m = model(vec![node], &[("x", b::FLOAT, &[3, 4])], inits);
    for mode in MODES {
        let y = run_y(&m, &[("x", &xq())], mode);
        assert_eq!(y.dtype(), DType::U8);
        assert_eq!(
            y.to_vec::<u8>().unwrap(),
            [128, 177, 219, 249, 64, 62, 53, 38, 255, 245, 236, 228],
            "{mode:?}"
        );
    }
}

/// Blocked INT4 quantization and back (block 2 along axis 1).
#[test]
fn quantize_and_dequantize_blocked_int4() {
    let scales = [0.2f32, 0.4, 0.3, 0.5, 0.25, 0.1];
    // int4 zero points [[1, -2], [0, 3], [-1, 2]] packed low nibble first.
    let zp = [0xE1u8, 0x30, 0x2F];
    let q = b::node(
        "QuantizeLinear",
        "q",
        &["x", "s", "z"],
        &["q0"],
        vec![b::int("axis", 1), b::int("block_size", 2)],
    );
    let dq = b::node(
        "DequantizeLinear",
        "dq",
        &["q0", "s", "z"],
        &["y"],
        vec![b::int("axis", 1), b::int("block_size", 2)],
    );
    let inits = || vec![b::f32s("s", &[3, 2], &scales), raw("z", INT4, &[3, 2], &zp)];
    let mut q_only = q.clone();
    q_only.output = vec!["y".into()];
    let mq = model(vec![q_only], &[("x", b::FLOAT, &[3, 4])], inits());
    let mqd = model(vec![q, dq], &[("x", b::FLOAT, &[3, 4])], inits());
    for mode in MODES {
        let y = run_y(&mq, &[("x", &xq())], mode);
        assert_eq!(y.dtype(), DType::I8);
        assert_eq!(
            y.to_vec::<i8>().unwrap(),
            [1, 6, 3, 4, 7, 7, 7, 6, 1, -3, -8, -8],
            "{mode:?}"
        );
        let y = run_y(&mqd, &[("x", &xq())], mode);
        close(
            &y.to_vec::<f32>().unwrap(),
            &[
                0.0, 1.0, 2.0, 2.4, 2.1, 2.1, 2.0, 1.5, 0.5, -0.5, -1.0, -1.0,
            ],
        );
    }
}

#[test]
fn quantize_to_float8_without_saturation() {
    let node = b::node(
        "QuantizeLinear",
        "q",
        &["x", "s"],
        &["y"],
        vec![
            b::int("output_dtype", FLOAT8E4M3FN as i64),
            b::int("saturate", 0),
        ],
    );
    let m = model(
        vec![node],
        &[("x", b::FLOAT, &[3, 4])],
        vec![b::f32s("s", &[], &[0.003])],
    );
    let want = [
        0.0, 320.0, NAN, NAN, NAN, NAN, NAN, NAN, 160.0, -176.0, NAN, NAN,
    ];
    for mode in MODES {
        let y = run_y(&m, &[("x", &xq())], mode);
        same_bits(&y.to_vec::<f32>().unwrap(), &want, &format!("{mode:?}"));
    }
}

#[test]
fn dynamic_quantize_linear() {
    let node = b::node(
        "DynamicQuantizeLinear",
        "d",
        &["x"],
        &["y", "s", "z"],
        vec![],
    );
    let bytes = b::encode(&b::model(
        11,
        vec![node],
        vec![b::value("x", b::FLOAT, &[D::N(6)])],
        vec![
            b::value("y", 0, &[]),
            b::value("s", 0, &[]),
            b::value("z", 0, &[]),
        ],
        vec![],
    ));
    let m = onnx::from_bytes(&bytes).unwrap();
    let x = Tensor::from_vec(vec![-1.5f32, 0.2, 3.7, 2.1, -0.4, 0.0], &[6]).unwrap();
    for mode in MODES {
        let outs = with_mode(mode, || m.run(&[("x", &x)])).unwrap();
        assert_eq!(outs[0].1.to_vec::<u8>().unwrap(), [0, 84, 255, 177, 54, 74]);
        close(&outs[1].1.to_vec::<f32>().unwrap(), &[0.020392155274748802]);
        assert_eq!(outs[2].1.to_vec::<u8>().unwrap(), [74]);
    }
}

#[test]
fn integer_matmuls() {
    let mmi = b::node(
        "MatMulInteger",
        "m",
        &["a", "b", "az", "bz"],
        &["y"],
        vec![],
    );
    let m = model(
        vec![mmi],
        &[("a", UINT8, &[4, 3]), ("b", UINT8, &[3, 2])],
        vec![
            raw("az", UINT8, &[], &[12]),
            raw("bz", UINT8, &[2], &[0, 1]),
        ],
    );
    let a = Tensor::from_vec(vec![11u8, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0], &[4, 3]).unwrap();
    let bm = Tensor::from_vec(vec![1u8, 4, 2, 5, 3, 6], &[3, 2]).unwrap();
    for mode in MODES {
        let y = run_y(&m, &[("a", &a), ("b", &bm)], mode);
        assert_eq!(y.dtype(), DType::I32);
        assert_eq!(
            y.to_vec::<i32>().unwrap(),
            [-38, -68, -44, -80, -50, -92, -56, -104]
        );
    }
    let ql = b::node(
        "QLinearMatMul",
        "q",
        &["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
        &["y"],
        vec![],
    );
    let inits = vec![
        b::f32s("as", &[], &[0.05]),
        raw("az", INT8, &[], &[(-3i8) as u8]),
        b::f32s("bs", &[], &[0.02]),
        raw("bz", INT8, &[], &[4]),
        b::f32s("ys", &[], &[0.3]),
        raw("yz", INT8, &[], &[(-10i8) as u8]),
    ];
    let m = model(
        vec![ql],
        &[("a", INT8, &[2, 3]), ("b", INT8, &[3, 2])],
        inits,
    );
    let a = Tensor::from_vec(vec![-20i8, 5, 100, 7, -128, 64], &[2, 3]).unwrap();
    let bm = Tensor::from_vec(vec![3i8, -7, 127, 0, -5, 9], &[3, 2]).unwrap();
    for mode in MODES {
        let y = run_y(&m, &[("a", &a), ("b", &bm)], mode);
        assert_eq!(y.to_vec::<i8>().unwrap(), [-10, -8, -63, -8], "{mode:?}");
    }
}

#[test]
fn conv_integer_pads_with_the_zero_point_removed() {
    let node = b::node(
        "ConvInteger",
        "c",
        &["x", "w", "xz"],
        &["y"],
        vec![b::ints("pads", &[1, 1, 1, 1])],
    );
    let m = model(
        vec![node],
        &[("x", UINT8, &[1, 1, 4, 4])],
        vec![
            raw("w", UINT8, &[1, 1, 2, 2], &[1, 2, 0, 3]),
            raw("xz", UINT8, &[], &[5]),
        ],
    );
    let x = Tensor::from_vec((1..=16u8).collect::<Vec<_>>(), &[1, 1, 4, 4]).unwrap();
    let want = [
        -12, -9, -6, -3, 0, -8, -7, -1, 5, -1, 12, 17, 23, 29, 3, 32, 41, 47, 53, 7, 16, 26, 29,
        32, 11,
    ];
    for mode in MODES {
        let y = run_y(&m, &[("x", &x)], mode);
        assert_eq!(y.shape(), [1, 1, 5, 5]);
        assert_eq!(y.to_vec::<i32>().unwrap(), want, "{mode:?}");
    }
}

#[test]
fn bad_quantization_inputs_are_errors_naming_the_node() {
    let x = xq();
    let run_err = |node: b::proto::NodeProto, inits: Vec<b::proto::TensorProto>| {
        let m = model(vec![node], &[("x", b::FLOAT, &[3, 4])], inits);
        m.run(&[("x", &x)]).unwrap_err()
    };
    // A zero point of another shape than the scale.
    let e = run_err(
        b::node(
            "QuantizeLinear",
            "q",
            &["x", "s", "z"],
            &["y"],
            vec![b::int("axis", 0)],
        ),
        vec![
            b::f32s("s", &[3], &[1.0, 1.0, 1.0]),
            raw("z", UINT8, &[2], &[0, 0]),
        ],
    );
    let (node, _, _, kind) = onnx_err(&e);
    assert_eq!((node, kind), ("q", ErrorKind::Shape), "{e}");
    // A per-axis scale of the wrong length.
    let e = run_err(
        b::node(
            "QuantizeLinear",
            "q",
            &["x", "s"],
            &["y"],
            vec![b::int("axis", 1)],
        ),
        vec![b::f32s("s", &[3], &[1.0, 1.0, 1.0])],
    );
    let (node, _, attr, kind) = onnx_err(&e);
    assert_eq!(
        (node, attr, kind),
        ("q", "y_scale", ErrorKind::Shape),
        "{e}"
    );
    // Blocks that do not cover the axis.
    let e = run_err(
        b::node(
            "QuantizeLinear",
            "q",
            &["x", "s"],
            &["y"],
            vec![b::int("axis", 1), b::int("block_size", 2)],
        ),
        vec![b::f32s("s", &[3, 3], &[1.0; 9])],
    );
    assert_eq!(onnx_err(&e).3, ErrorKind::Shape, "{e}");
    // A float zero point is no quantized type.
    let e = run_err(
        b::node("QuantizeLinear", "q", &["x", "s", "z"], &["y"], vec![]),
        vec![b::f32s("s", &[], &[1.0]), b::f32s("z", &[], &[0.0])],
    );
    assert_eq!(onnx_err(&e).3, ErrorKind::DType, "{e}");
    // DequantizeLinear's zero point of another type than x.
    let node = b::node("DequantizeLinear", "dq", &["x", "s", "z"], &["y"], vec![]);
    let m = model(
        vec![node],
        &[("x", UINT8, &[2])],
        vec![b::f32s("s", &[], &[1.0]), raw("z", INT8, &[], &[0])],
    );
    let xu = Tensor::from_vec(vec![1u8, 2], &[2]).unwrap();
    let e = m.run(&[("x", &xu)]).unwrap_err();
    let (node, _, attr, kind) = onnx_err(&e);
    assert_eq!(
        (node, attr, kind),
        ("dq", "x_zero_point", ErrorKind::DType),
        "{e}"
    );
    // A float8 zero point that is not zero.
    let node = b::node("DequantizeLinear", "dq8", &["x", "s", "z"], &["y"], vec![]);
    let z8 = b::proto::TensorProto {
        name: "z".into(),
        data_type: FLOAT8E4M3FN,
        int32_data: vec![0x38],
        ..Default::default()
    };
    let m = model(
        vec![node],
        &[("x", FLOAT8E4M3FN, &[2])],
        vec![b::f32s("s", &[], &[1.0]), z8],
    );
    let x8 = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let e = m.run(&[("x", &x8)]).unwrap_err();
    let (node, _, attr, kind) = onnx_err(&e);
    assert_eq!(
        (node, attr, kind),
        ("dq8", "x_zero_point", ErrorKind::BadArgument),
        "{e}"
    );
    // Packed data too short for its shape.
    let node = b::node("Cast", "c", &["w"], &["y"], vec![b::int("to", 1)]);
    let e = try_model(vec![node], &[], vec![raw("w", INT4, &[5], &[0x78])])
        .err()
        .expect("load must fail");
    assert_eq!(onnx_err(&e).3, ErrorKind::BadArgument, "{e}");
    assert!(e.to_string().contains("INT4"), "{e}");
}

/// QLinearConv whose conv fails (a kernel wider than the image) with a
/// bias of no values: the conv's error, naming the node. The bias check
/// reads the product's channel axis, so it must never see a failed
/// product's (missing) axes.
#[test]
fn qlinear_conv_that_fails_with_an_empty_bias_is_an_error() {
    let node = b::node(
        "QLinearConv",
        "qc",
        &["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"],
        &["y"],
        vec![],
    );
    let inits = vec![
        b::f32s("xs", &[], &[0.5]),
        raw("xz", UINT8, &[], &[1]),
        raw("w", UINT8, &[1, 1, 5, 5], &[3; 25]),
        b::f32s("ws", &[], &[0.25]),
        raw("wz", UINT8, &[], &[2]),
        b::f32s("ys", &[], &[1.0]),
        raw("yz", UINT8, &[], &[0]),
        raw("bias", 6, &[0], &[]),
    ];
    let m = try_model(vec![node], &[("x", UINT8, &[1, 1, 3, 3])], inits);
    let x = Tensor::from_vec(vec![4u8; 9], &[1, 1, 3, 3]).expect("x");
    for mode in MODES {
        let e = match &m {
            Err(e) => e.clone(),
            Ok(m) => with_mode(mode, || m.run(&[("x", &x)])).expect_err("5x5 over 3x3"),
        };
        assert!(
            !matches!(e.kind(), ErrorKind::Panic | ErrorKind::Internal),
            "{mode:?}: {e}"
        );
        assert!(e.to_string().contains("`qc`"), "{e}");
    }
}
