//! `tilejit::onnx` value-keyed inputs (operands that must be known when
//! tracing, given as graph inputs), reductions, scans, `Mod` with
//! `fmod = 1` and `IsInf`: small models run on Host, Sim and Verify
//! against hand-checked or numpy-computed values (each says which).

use super::onnx::{onnx_err, MODES};
use tilejit::onnx::{self, OnnxModel};
use tilejit::{with_mode, ErrorKind, RunMode, Tensor};
use tilejit_testkit::onnx::{self as b, D};

const BOOL: i32 = 9;

fn run1(model: &OnnxModel, inputs: &[&Tensor], mode: RunMode) -> Tensor {
    let outs = with_mode(mode, || model.run_positional(inputs)).unwrap();
    outs.into_iter().next().unwrap().1
}

/// One node `n0` over declared inputs, its output `y` of element type
/// `out` (a macro: the attribute type is the testkit's protobuf message).
macro_rules! one_node {
    ($opset:expr, $op:expr, $inputs:expr, $out:expr, $attrs:expr $(,)?) => {{
        let inputs: &[(&str, i32, Vec<D>)] = $inputs;
        let names: Vec<&str> = inputs.iter().map(|(n, _, _)| *n).collect();
        let bytes = b::encode(&b::model(
            $opset,
            vec![b::node($op, "n0", &names, &["y"], $attrs)],
            inputs.iter().map(|(n, t, d)| b::value(n, *t, d)).collect(),
            vec![b::value("y", $out, &[])],
            vec![],
        ));
        onnx::from_bytes(&bytes).unwrap()
    }};
}

fn f32s(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn i64s(v: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

#[test]
fn a_shape_input_keys_the_cache_by_value() {
    let model = one_node!(
        14,
        "Reshape",
        &[
            ("x", b::FLOAT, vec![D::N(2), D::N(3)]),
            ("shape", b::INT64, vec![D::N(2)]),
        ],
        b::FLOAT,
        vec![],
    );
    assert_eq!(model.static_inputs(), ["shape"]);
    let x = f32s(&[0., 1., 2., 3., 4., 5.], &[2, 3]);
    // Reshape keeps row-major order: the values are x's, the shape the
    // input's value.
    for mode in MODES {
        let y = run1(&model, &[&x, &i64s(&[3, 2])], mode);
        assert_eq!(y.shape(), &[3, 2]);
        assert_eq!(y.to_vec::<f32>().unwrap(), [0., 1., 2., 3., 4., 5.]);
        let y = run1(&model, &[&x, &i64s(&[-1, 1])], mode);
        assert_eq!(y.shape(), &[6, 1]);
    }
    model.function().clear();
    let t0 = model.function().stats().traces;
    let host = |x: &Tensor, s: &[i64]| run1(&model, &[x, &i64s(s)], RunMode::Host);
    host(&x, &[3, 2]);
    // The same value again, and other data: the cache, no trace.
    let x2 = f32s(&[5., 4., 3., 2., 1., 0.], &[2, 3]);
    let y = host(&x2, &[3, 2]);
    assert_eq!(y.to_vec::<f32>().unwrap(), [5., 4., 3., 2., 1., 0.]);
    assert_eq!(model.function().stats().traces - t0, 1);
    // Another value retraces.
    let y = host(&x, &[1, 6]);
    assert_eq!(y.shape(), &[1, 6]);
    assert_eq!(model.function().stats().traces - t0, 2);
    host(&x, &[3, 2]);
    assert_eq!(model.function().stats().traces - t0, 2);
}

#[test]
fn a_static_input_may_reach_its_operand_through_computation() {
    // Range(0, n + 1, 1) where `n` is an input: the Add folds in the trace.
    let bytes = b::encode(&b::model(
        13,
        vec![
            b::node("Add", "plus", &["n", "one"], &["limit"], vec![]),
            b::node("Range", "range", &["zero", "limit", "one"], &["y"], vec![]),
        ],
        vec![b::value("n", b::INT64, &[])],
        vec![b::value("y", b::INT64, &[D::S("len")])],
        vec![b::i64s("zero", &[], &[0]), b::i64s("one", &[], &[1])],
    ));
    let model = onnx::from_bytes(&bytes).unwrap();
    assert_eq!(model.static_inputs(), ["n"]);
    for mode in MODES {
        let n = Tensor::from_vec(vec![3i64], &[]).unwrap();
        let y = run1(&model, &[&n], mode);
        assert_eq!(y.to_vec::<i64>().unwrap(), [0, 1, 2, 3]);
    }
}

#[test]
fn a_static_input_over_the_bound_is_an_error_naming_it() {
    let fixed = |n: usize| {
        let bytes = b::encode(&b::model(
            13,
            vec![b::node("Reshape", "rs", &["x", "shape"], &["y"], vec![])],
            vec![
                b::value("x", b::FLOAT, &[D::S("n")]),
                b::value("shape", b::INT64, &[D::N(n as i64)]),
            ],
            vec![b::value("y", b::FLOAT, &[])],
            vec![],
        ));
        onnx::from_bytes(&bytes)
    };
    let e = fixed(onnx::MAX_STATIC_ELEMENTS + 1).err().unwrap();
    assert_eq!(
        onnx_err(&e),
        ("rs", "Reshape", "shape", ErrorKind::Unsupported),
        "{e}"
    );
    // A symbolic length is checked when called.
    let model = one_node!(
        13,
        "Reshape",
        &[
            ("x", b::FLOAT, vec![D::S("n")]),
            ("shape", b::INT64, vec![D::S("r")]),
        ],
        b::FLOAT,
        vec![],
    );
    let x = f32s(&[1.0], &[1]);
    let big = Tensor::ones(&[onnx::MAX_STATIC_ELEMENTS + 1], tilejit::DType::I64);
    let e = model.run_positional(&[&x, &big]).err().unwrap();
    assert_eq!(
        onnx_err(&e),
        ("n0", "Reshape", "shape", ErrorKind::Unsupported),
        "{e}"
    );
}

/// A reduction over `x` [2, 2] with `axes` as an input.
fn reduction(op: &str, keep: i64) -> OnnxModel {
    one_node!(
        18,
        op,
        &[
            ("x", b::FLOAT, vec![D::N(2), D::N(2)]),
            ("axes", b::INT64, vec![D::S("k")]),
        ],
        b::FLOAT,
        vec![b::int("keepdims", keep)],
    )
}

#[test]
fn reductions_with_axes_inputs() {
    // Hand-checked: L1 and L2 of rows [3, -4] and [0, 1]; LogSum of
    // [1, e - 1] is ln(e) = 1; LogSumExp of [1000, 1000] is
    // 1000 + ln 2 = 1000.6931 (numpy, in f64), of [-inf, -inf] is -inf.
    let x = f32s(&[3.0, -4.0, 0.0, 1.0], &[2, 2]);
    let e1 = std::f32::consts::E - 1.0;
    let big = f32s(
        &[1000.0, 1000.0, f32::NEG_INFINITY, f32::NEG_INFINITY],
        &[2, 2],
    );
    let cases: [(&str, &Tensor, Vec<f32>); 5] = [
        ("ReduceL1", &x, vec![7.0, 1.0]),
        ("ReduceL2", &x, vec![5.0, 1.0]),
        ("ReduceSumSquare", &x, vec![25.0, 1.0]),
        ("ReduceLogSumExp", &big, vec![1_000.693, f32::NEG_INFINITY]),
        (
            "ReduceLogSum",
            &f32s(&[1.0, e1, 1.0, 0.0], &[2, 2]),
            vec![1.0, 0.0],
        ),
    ];
    for (op, x, want) in cases {
        let model = reduction(op, 0);
        for mode in MODES {
            let y = run1(&model, &[x, &i64s(&[-1])], mode);
            assert_eq!(y.shape(), &[2], "{op}");
            let got = y.to_vec::<f32>().unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    g == w || (g - w).abs() <= 1e-4 * w.abs(),
                    "{op} {mode:?}: {got:?}"
                );
            }
        }
    }
    // Empty axes: every axis, keepdims; with noop_with_empty_axes, x.
    let model = reduction("ReduceL1", 1);
    let y = run1(&model, &[&x, &i64s(&[])], RunMode::Sim);
    assert_eq!(
        (y.shape(), y.to_vec::<f32>().unwrap()),
        (&[1usize, 1][..], vec![8.0])
    );
    let model = one_node!(
        18,
        "ReduceSum",
        &[
            ("x", b::FLOAT, vec![D::N(2), D::N(2)]),
            ("axes", b::INT64, vec![D::N(0)])
        ],
        b::FLOAT,
        vec![b::int("noop_with_empty_axes", 1)],
    );
    let y = run1(&model, &[&x, &i64s(&[])], RunMode::Verify);
    assert_eq!(y.to_vec::<f32>().unwrap(), [3.0, -4.0, 0.0, 1.0]);
}

#[test]
fn an_empty_reduced_set_gives_the_identity() {
    // ONNX's empty-set values: sum 0, prod 1, max -inf, min inf.
    let x = Tensor::zeros(&[2, 0], tilejit::DType::F32);
    for (op, want) in [
        ("ReduceSum", 0.0),
        ("ReduceProd", 1.0),
        ("ReduceMax", f32::NEG_INFINITY),
        ("ReduceMin", f32::INFINITY),
    ] {
        let model = one_node!(
            18,
            op,
            &[
                ("x", b::FLOAT, vec![D::N(2), D::N(0)]),
                ("axes", b::INT64, vec![D::N(1)])
            ],
            b::FLOAT,
            vec![],
        );
        for mode in MODES {
            let y = run1(&model, &[&x, &i64s(&[1])], mode);
            assert_eq!(y.shape(), &[2, 1]);
            assert_eq!(y.to_vec::<f32>().unwrap(), [want, want], "{op}");
        }
    }
}

#[test]
fn bad_reduction_axes_name_the_node() {
    let model = reduction("ReduceL2", 1);
    let x = f32s(&[1.0; 4], &[2, 2]);
    let e = model.run_positional(&[&x, &i64s(&[2])]).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::BadArgument);
    assert!(e.to_string().contains("`n0` (ReduceL2), `axes`"), "{e}");
}

#[test]
fn argmax_and_argmin_select_the_last_index() {
    // Hand-checked: the max 3 is at 1 and 2, the min 0 at 0 and 3.
    let x = f32s(&[1.0, 3.0, 3.0, 0.0, 0.0, 2.0, 1.0, 0.0], &[2, 4]);
    for (op, last, want) in [
        ("ArgMax", 1, [2i64, 1]),
        ("ArgMax", 0, [1, 1]),
        ("ArgMin", 1, [3, 3]),
        ("ArgMin", 0, [3, 0]),
    ] {
        let model = one_node!(
            13,
            op,
            &[("x", b::FLOAT, vec![D::N(2), D::N(4)])],
            b::INT64,
            vec![
                b::int("axis", -1),
                b::int("keepdims", 0),
                b::int("select_last_index", last),
            ],
        );
        for mode in MODES {
            let y = run1(&model, &[&x], mode);
            assert_eq!(y.to_vec::<i64>().unwrap(), want, "{op} {last} {mode:?}");
        }
    }
}

#[test]
fn cumsum_and_cumprod_exclusive_and_reverse() {
    // Hand-checked over [1, 2, 3, 4].
    let x = f32s(&[1.0, 2.0, 3.0, 4.0], &[4]);
    let cases = [
        ("CumSum", 0, 0, [1.0, 3.0, 6.0, 10.0]),
        ("CumSum", 1, 0, [0.0, 1.0, 3.0, 6.0]),
        ("CumSum", 0, 1, [10.0, 9.0, 7.0, 4.0]),
        ("CumSum", 1, 1, [9.0, 7.0, 4.0, 0.0]),
        ("CumProd", 0, 0, [1.0, 2.0, 6.0, 24.0]),
        ("CumProd", 1, 1, [24.0, 12.0, 4.0, 1.0]),
    ];
    for (op, exclusive, reverse, want) in cases {
        let model = one_node!(
            14,
            op,
            &[("x", b::FLOAT, vec![D::N(4)]), ("axis", b::INT64, vec![])],
            b::FLOAT,
            vec![b::int("exclusive", exclusive), b::int("reverse", reverse)],
        );
        let axis = Tensor::from_vec(vec![0i64], &[]).unwrap();
        for mode in MODES {
            let y = run1(&model, &[&x, &axis], mode);
            assert_eq!(
                y.to_vec::<f32>().unwrap(),
                want,
                "{op} {exclusive} {reverse}"
            );
        }
    }
    // An axis of two values names the node and the operand.
    let model = one_node!(
        14,
        "CumSum",
        &[
            ("x", b::FLOAT, vec![D::N(4)]),
            ("axis", b::INT64, vec![D::N(2)])
        ],
        b::FLOAT,
        vec![],
    );
    let e = model.run_positional(&[&x, &i64s(&[0, 0])]).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::BadArgument);
    assert!(e.to_string().contains("`n0` (CumSum), `axis`"), "{e}");
}

#[test]
fn mod_with_fmod_has_the_dividends_sign() {
    // numpy.fmod on these f32 values: [-0.1000004, 0.3999996, 0.0, -2.0].
    let x = f32s(&[-4.3, 7.2, 5.0, -2.0], &[4]);
    let y = f32s(&[2.1, -3.4, -2.5, 3.0], &[4]);
    let model = one_node!(
        13,
        "Mod",
        &[
            ("a", b::FLOAT, vec![D::N(4)]),
            ("b", b::FLOAT, vec![D::N(4)])
        ],
        b::FLOAT,
        vec![b::int("fmod", 1)],
    );
    let want = [-0.100_000_38f32, 0.399_999_62, 0.0, -2.0];
    for mode in MODES {
        let got = run1(&model, &[&x, &y], mode).to_vec::<f32>().unwrap();
        assert_eq!(got, want, "{mode:?}");
    }
    // Integers, C's `%`: numpy.fmod([-4, 7, 5, -7], [3, -3, 3, -3]).
    let model = one_node!(
        13,
        "Mod",
        &[
            ("a", b::INT64, vec![D::N(4)]),
            ("b", b::INT64, vec![D::N(4)])
        ],
        b::INT64,
        vec![b::int("fmod", 1)],
    );
    for mode in MODES {
        let got = run1(
            &model,
            &[&i64s(&[-4, 7, 5, -7]), &i64s(&[3, -3, 3, -3])],
            mode,
        );
        assert_eq!(got.to_vec::<i64>().unwrap(), [-1, 1, 2, -1]);
    }
    let bytes = b::encode(&b::model(
        13,
        vec![b::node(
            "Mod",
            "m",
            &["a", "b"],
            &["y"],
            vec![b::int("fmod", 2)],
        )],
        vec![b::value("a", b::FLOAT, &[]), b::value("b", b::FLOAT, &[])],
        vec![b::value("y", b::FLOAT, &[])],
        vec![],
    ));
    let e = onnx::from_bytes(&bytes).err().unwrap();
    assert_eq!(onnx_err(&e), ("m", "Mod", "fmod", ErrorKind::BadArgument));
}

#[test]
fn is_inf_detects_either_sign() {
    let x = f32s(&[f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1.0], &[4]);
    for (pos, neg, want) in [
        (1, 1, [true, true, false, false]),
        (1, 0, [true, false, false, false]),
        (0, 1, [false, true, false, false]),
    ] {
        let model = one_node!(
            10,
            "IsInf",
            &[("x", b::FLOAT, vec![D::N(4)])],
            BOOL,
            vec![
                b::int("detect_positive", pos),
                b::int("detect_negative", neg)
            ],
        );
        for mode in MODES {
            let y = run1(&model, &[&x], mode);
            assert_eq!(y.to_vec::<bool>().unwrap(), want);
        }
    }
}

#[test]
fn non_zero_and_compress_on_graph_inputs() {
    // Hand-checked: the nonzero elements of [[1, 0], [0, 3]] are at
    // (0, 0) and (1, 1); NaN counts as nonzero. Their operands stay
    // traced: they run eagerly between phases (tests/all/onnx_phases.rs).
    let model = one_node!(
        13,
        "NonZero",
        &[("x", b::FLOAT, vec![D::N(2), D::N(2)])],
        b::INT64,
        vec![]
    );
    assert!(model.static_inputs().is_empty());
    for mode in MODES {
        let y = run1(&model, &[&f32s(&[1.0, 0.0, 0.0, f32::NAN], &[2, 2])], mode);
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(y.to_vec::<i64>().unwrap(), [0, 1, 0, 1]);
    }
    // Compress keeps rows 0 and 2 of a [3, 2] input; x stays traced.
    let model = one_node!(
        13,
        "Compress",
        &[
            ("x", b::FLOAT, vec![D::N(3), D::N(2)]),
            ("c", BOOL, vec![D::N(3)]),
        ],
        b::FLOAT,
        vec![b::int("axis", 0)]
    );
    assert!(model.static_inputs().is_empty());
    let x = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
    let c = Tensor::from_vec(vec![true, false, true], &[3]).unwrap();
    for mode in MODES {
        let y = run1(&model, &[&x, &c], mode);
        assert_eq!(y.to_vec::<f32>().unwrap(), [1.0, 2.0, 5.0, 6.0]);
    }
}
