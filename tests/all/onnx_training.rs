//! `tilejit::onnx` training-domain optimizers (`table/training.rs`) in a
//! model importing only `ai.onnx.preview.training`, on Host, Sim and
//! Verify, checked by hand, and their bad attributes.

use super::onnx::{close, onnx_err, MODES};
use tilejit::onnx;
use tilejit::{with_mode, ErrorKind, Tensor};
use tilejit_testkit::onnx::{self as b, D};

fn momentum(attrs: Vec<b::proto::AttributeProto>) -> tilejit::Result<onnx::OnnxModel> {
    let mut node = b::node(
        "Momentum",
        "mom",
        &["r", "t", "x", "g", "v"],
        &["x2", "v2"],
        attrs,
    );
    node.domain = "ai.onnx.preview.training".into();
    let f = |n: &str| b::value(n, b::FLOAT, &[D::N(1)]);
    let mut m = b::model(
        1,
        vec![node],
        vec![
            b::value("r", b::FLOAT, &[]),
            b::value("t", b::INT64, &[]),
            f("x"),
            f("g"),
            f("v"),
        ],
        vec![f("x2"), f("v2")],
        vec![],
    );
    m.opset_import[0].domain = "ai.onnx.preview.training".into();
    onnx::from_bytes(&b::encode(&m))
}

/// x = 1, g = 2, v = 0.5, r = 0.1, alpha 0.9, beta 0.5: at t = 0 the
/// gradient counts fully, v' = 0.45 + 2 = 2.45, x' = 1 - 0.245 = 0.755;
/// at t = 1, v' = 0.45 + 1 = 1.45, x' = 0.855; Nesterov at t = 1 steps by
/// g + alpha v' = 3.305, x' = 0.6695.
#[test]
fn momentum_by_hand_in_a_training_only_model() {
    let attrs = |mode: &str| {
        vec![
            b::float("alpha", 0.9),
            b::float("beta", 0.5),
            b::float("norm_coefficient", 0.0),
            b::string("mode", mode),
        ]
    };
    let one = |v: f32| Tensor::from_vec(vec![v], &[1]).unwrap();
    let r = Tensor::from_vec(vec![0.1f32], &[]).unwrap();
    let (x, g, v) = (one(1.0), one(2.0), one(0.5));
    for (mode, step, want_x, want_v) in [
        ("standard", 0i64, 0.755, 2.45),
        ("standard", 1, 0.855, 1.45),
        ("nesterov", 1, 0.6695, 1.45),
    ] {
        let m = momentum(attrs(mode)).unwrap();
        let t = Tensor::from_vec(vec![step], &[]).unwrap();
        for run in MODES {
            let outs = with_mode(run, || {
                m.run(&[("r", &r), ("t", &t), ("x", &x), ("g", &g), ("v", &v)])
            })
            .unwrap();
            close(&outs[0].1.to_vec::<f32>().unwrap(), &[want_x]);
            close(&outs[1].1.to_vec::<f32>().unwrap(), &[want_v]);
        }
    }
    let e = momentum(vec![b::float("alpha", 0.9)])
        .err()
        .expect("load must fail");
    assert_eq!(
        onnx_err(&e),
        ("mom", "Momentum", "beta", ErrorKind::BadArgument)
    );
    let mut bad = attrs("heavy");
    bad.truncate(4);
    let e = momentum(bad).err().expect("load must fail");
    assert_eq!(
        onnx_err(&e),
        ("mom", "Momentum", "mode", ErrorKind::BadArgument)
    );
}

/// Training-mode BatchNormalization over `x` = [[1, 2], [3, 6]] (N = 2, C
/// = 2), scale [1, 0.5], bias [0, 1], epsilon 0, momentum 0.5, input mean
/// [0, 10] and variance [1, 2]. Channel 0 holds {1, 3}: mean 2, population
/// variance 1, so Y = x - 2; channel 1 holds {2, 6}: mean 4, variance 4, so
/// Y = (x - 4) / 2 * 0.5 + 1. Running mean [0, 10] * 0.5 + [2, 4] * 0.5 =
/// [1, 7]; running variance [1, 2] * 0.5 + [1, 4] * 0.5 = [1, 3].
#[test]
fn batch_norm_in_training_mode_uses_the_batch_and_updates_the_running_stats() {
    let model = |x_dims: &[D]| {
        let node = b::node(
            "BatchNormalization",
            "bn",
            &["x", "s", "b", "m", "v"],
            &["y", "rm", "rv"],
            vec![
                b::int("training_mode", 1),
                b::float("epsilon", 0.0),
                b::float("momentum", 0.5),
            ],
        );
        let c = |n: &str| b::value(n, b::FLOAT, &[D::N(2)]);
        let m = b::model(
            15,
            vec![node],
            vec![
                b::value("x", b::FLOAT, x_dims),
                c("s"),
                c("b"),
                c("m"),
                c("v"),
            ],
            vec![b::value("y", b::FLOAT, x_dims), c("rm"), c("rv")],
            vec![],
        );
        onnx::from_bytes(&b::encode(&m))
    };
    let m = model(&[D::N(2), D::N(2)]).unwrap();
    let t = |v: &[f32], s: &[usize]| Tensor::from_vec(v.to_vec(), s).unwrap();
    let (x, s, bias) = (
        t(&[1., 2., 3., 6.], &[2, 2]),
        t(&[1., 0.5], &[2]),
        t(&[0., 1.], &[2]),
    );
    let (mean, var) = (t(&[0., 10.], &[2]), t(&[1., 2.], &[2]));
    let ins = [
        ("x", &x),
        ("s", &s),
        ("b", &bias),
        ("m", &mean),
        ("v", &var),
    ];
    for mode in MODES {
        let out = with_mode(mode, || m.run(&ins)).unwrap();
        let got = |i: usize| out[i].1.to_vec::<f32>().unwrap();
        close(&got(0), &[-1.0, 0.5, 1.0, 1.5]);
        close(&got(1), &[1.0, 7.0]);
        close(&got(2), &[1.0, 3.0]);
    }
    // No channel axis: an error naming the node.
    let m = model(&[D::N(2)]).unwrap();
    let x1 = t(&[1., 2.], &[2]);
    let e = m
        .run(&[
            ("x", &x1),
            ("s", &s),
            ("b", &bias),
            ("m", &mean),
            ("v", &var),
        ])
        .unwrap_err();
    assert_eq!(onnx_err(&e).0, "bn");
}

/// Dropout passes its input through, with a mask of all true, in
/// inference and in training with ratio 0 (`t` and `r` graph inputs, keyed
/// by value); training with another ratio drops values at random, which
/// tilejit refuses: at load when the values are constants, else when run.
#[test]
fn dropout_keeps_values_and_refuses_random_drops() {
    let model = |inits: Vec<b::proto::TensorProto>| {
        let node = b::node("Dropout", "drop", &["x", "r", "t"], &["y", "mask"], vec![]);
        let mut inputs = vec![b::value("x", b::FLOAT, &[D::N(2), D::N(3)])];
        if inits.is_empty() {
            inputs.push(b::value("r", b::FLOAT, &[]));
            inputs.push(b::value("t", 9, &[]));
        }
        let m = b::model(
            13,
            vec![node],
            inputs,
            vec![
                b::value("y", b::FLOAT, &[D::N(2), D::N(3)]),
                b::value("mask", 9, &[D::N(2), D::N(3)]),
            ],
            inits,
        );
        onnx::from_bytes(&b::encode(&m))
    };
    let m = model(vec![]).unwrap();
    let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.0, 0.5, 0.0, -7.0], &[2, 3]).unwrap();
    let scalar = |v: f32| Tensor::from_vec(vec![v], &[]).unwrap();
    let flag = |v: bool| Tensor::from_vec(vec![v], &[]).unwrap();
    for (r, t) in [(0.5, false), (0.0, true)] {
        let (r, t) = (scalar(r), flag(t));
        for mode in MODES {
            let out = with_mode(mode, || m.run(&[("x", &x), ("r", &r), ("t", &t)])).unwrap();
            assert_eq!(
                out[0].1.to_vec::<f32>().unwrap(),
                x.to_vec::<f32>().unwrap()
            );
            assert_eq!(out[1].1.to_vec::<bool>().unwrap(), vec![true; 6]);
        }
    }
    let e = m
        .run(&[("x", &x), ("r", &scalar(0.25)), ("t", &flag(true))])
        .unwrap_err();
    let (node, _, attr, kind) = onnx_err(&e);
    assert_eq!(
        (node, attr, kind),
        ("drop", "training_mode", ErrorKind::Unsupported)
    );
    assert!(e.to_string().contains("ratio 0.25"), "{e}");
    // The same as constants fails at load.
    let bool_true = b::proto::TensorProto {
        name: "t".into(),
        data_type: 9,
        int32_data: vec![1],
        ..Default::default()
    };
    let e = model(vec![b::f32s("r", &[], &[0.25]), bool_true])
        .err()
        .expect("refused at load");
    assert_eq!(onnx_err(&e).2, "training_mode");
}
