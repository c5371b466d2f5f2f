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
