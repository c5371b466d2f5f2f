//! `tilejit::onnx` DFT and STFT (`table/signal.rs`), CausalConvWithState
//! and LinearAttention (`table/ssm.rs`) on Host, Sim and Verify, on cases
//! small enough to check by hand (in the comments), and their bad inputs.

use super::onnx::{close, onnx_err, MODES};
use tilejit::onnx;
use tilejit::{with_mode, ErrorKind, Tensor};
use tilejit_testkit::onnx::{self as b, D};

/// One node over f32 inputs `(name, dims)`, outputs `ys`, at `opset`.
fn one(
    opset: i64,
    node: b::proto::NodeProto,
    xs: &[(&str, &[i64])],
    ys: &[&str],
    inits: Vec<b::proto::TensorProto>,
) -> tilejit::Result<onnx::OnnxModel> {
    let ins = xs
        .iter()
        .map(|(n, d)| {
            let dims: Vec<D> = d.iter().map(|&d| D::N(d)).collect();
            b::value(n, b::FLOAT, &dims)
        })
        .collect();
    let outs = ys.iter().map(|n| b::value(n, b::FLOAT, &[])).collect();
    onnx::from_bytes(&b::encode(&b::model(opset, vec![node], ins, outs, inits)))
}

/// A model of one LinearAttention node `la` (opset 27) over `q`, `k` and
/// `v`, each of `dims`, with one query and one key-value head, the update
/// rule `rule`, outputs `outs` and any more attributes `more`.
fn linear_attention(
    rule: &str,
    dims: &[i64],
    outs: &[&str],
    more: Vec<b::proto::AttributeProto>,
) -> tilejit::Result<onnx::OnnxModel> {
    let mut attrs = vec![
        b::string("update_rule", rule),
        b::int("q_num_heads", 1),
        b::int("kv_num_heads", 1),
    ];
    attrs.extend(more);
    let node = b::node("LinearAttention", "la", &["q", "k", "v"], outs, attrs);
    let ins = [("q", dims), ("k", dims), ("v", dims)];
    one(27, node, &ins, outs, vec![])
}

fn t(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

/// Runs on every mode; checks each output's shape and values.
fn check(m: &onnx::OnnxModel, ins: &[(&str, &Tensor)], want: &[(&[usize], &[f64])]) {
    for mode in MODES {
        let outs = with_mode(mode, || m.run(ins)).unwrap();
        for ((_, y), (shape, vals)) in outs.iter().zip(want) {
            assert_eq!(y.shape(), *shape, "{mode:?}");
            close(&y.to_vec::<f32>().unwrap(), vals);
        }
    }
}

/// fft([1 2 3 4]) = [10, -2+2i, -2, -2-2i]; rfft keeps the first three;
/// ifft and irfft take them back to [1 2 3 4].
#[test]
fn dft_forward_onesided_and_inverse() {
    let x = t(&[1.0, 2.0, 3.0, 4.0], &[1, 4, 1]);
    let fwd = |onesided: i64| {
        let node = b::node(
            "DFT",
            "dft",
            &["x"],
            &["y"],
            vec![b::int("onesided", onesided)],
        );
        one(20, node, &[("x", &[1, 4, 1])], &["y"], vec![]).unwrap()
    };
    let full = [10.0, 0.0, -2.0, 2.0, -2.0, 0.0, -2.0, -2.0];
    check(&fwd(0), &[("x", &x)], &[(&[1, 4, 2], &full)]);
    check(&fwd(1), &[("x", &x)], &[(&[1, 3, 2], &full[..6])]);
    let spectrum = t(&full.map(|v| v as f32), &[1, 4, 2]);
    let inv = b::node("DFT", "idft", &["x"], &["y"], vec![b::int("inverse", 1)]);
    let m = one(20, inv, &[("x", &[1, 4, 2])], &["y"], vec![]).unwrap();
    let back = [1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 4.0, 0.0];
    check(&m, &[("x", &spectrum)], &[(&[1, 4, 2], &back)]);
    let half = t(
        &full[..6].iter().map(|&v| v as f32).collect::<Vec<_>>(),
        &[1, 3, 2],
    );
    let irfft = b::node(
        "DFT",
        "irfft",
        &["x"],
        &["y"],
        vec![b::int("inverse", 1), b::int("onesided", 1)],
    );
    let m = one(20, irfft, &[("x", &[1, 3, 2])], &["y"], vec![]).unwrap();
    check(&m, &[("x", &half)], &[(&[1, 4, 1], &[1.0, 2.0, 3.0, 4.0])]);
}

/// STFT of [1 2 3 4 5] with frames of 2 every 2 steps, window [1 1]:
/// frames [1 2] and [3 4], whose one-sided DFTs are [3, -1] and [7, -1].
#[test]
fn stft_frames_and_windows() {
    let node = b::node("STFT", "stft", &["x", "step", "w"], &["y"], vec![]);
    let m = one(
        17,
        node,
        &[("x", &[1, 5, 1])],
        &["y"],
        vec![b::i64s("step", &[], &[2]), b::f32s("w", &[2], &[1.0, 1.0])],
    )
    .unwrap();
    let x = t(&[1.0, 2.0, 3.0, 4.0, 5.0], &[1, 5, 1]);
    let want = [3.0, 0.0, -1.0, 0.0, 7.0, 0.0, -1.0, 0.0];
    check(&m, &[("x", &x)], &[(&[1, 2, 2, 2], &want)]);
}

/// Input [1 2 3], weight [0.5 2], past state [4]: the padded row is
/// [4 1 2 3], so y_t = 0.5 p_t + 2 p_(t+1) = [4, 4.5, 7], and the state
/// left is [3]; with SiLU, y * sigmoid(y).
#[test]
fn causal_conv_with_state_by_hand() {
    let x = t(&[1.0, 2.0, 3.0], &[1, 1, 3]);
    let w = t(&[0.5, 2.0], &[1, 1, 2]);
    let p = t(&[4.0], &[1, 1, 1]);
    let silu = |v: f64| v / (1.0 + (-v).exp());
    for (act, y) in [
        ("none", [4.0, 4.5, 7.0]),
        ("silu", [silu(4.0), silu(4.5), silu(7.0)]),
    ] {
        let node = b::node(
            "CausalConvWithState",
            "ccs",
            &["x", "w", "", "p"],
            &["y", "s"],
            vec![b::string("activation", act)],
        );
        let m = one(
            27,
            node,
            &[("x", &[1, 1, 3]), ("w", &[1, 1, 2]), ("p", &[1, 1, 1])],
            &["y", "s"],
            vec![],
        )
        .unwrap();
        check(
            &m,
            &[("x", &x), ("w", &w), ("p", &p)],
            &[(&[1, 1, 3], &y), (&[1, 1, 1], &[3.0])],
        );
    }
}

/// The linear rule with one head of width 1: S += k v, o = q S. With
/// q = [1 2], k = [1 1], v = [3 4] and scale 1: S = 3 then 7, o = [3, 14].
#[test]
fn linear_attention_by_hand() {
    let scale = vec![b::float("scale", 1.0)];
    let m = linear_attention("linear", &[1, 2, 1], &["o", "s"], scale).unwrap();
    let (q, k, v) = (
        t(&[1.0, 2.0], &[1, 2, 1]),
        t(&[1.0, 1.0], &[1, 2, 1]),
        t(&[3.0, 4.0], &[1, 2, 1]),
    );
    check(
        &m,
        &[("q", &q), ("k", &k), ("v", &v)],
        &[(&[1, 2, 1], &[3.0, 14.0]), (&[1, 1, 1, 1], &[7.0])],
    );
}

#[test]
fn bad_signal_and_state_nodes_are_errors_naming_them() {
    // The DFT axis may not be the real/imaginary one.
    let node = b::node("DFT", "dft", &["x", "", "a"], &["y"], vec![]);
    let m = one(
        20,
        node,
        &[("x", &[1, 4, 1])],
        &["y"],
        vec![b::i64s("a", &[], &[2])],
    )
    .unwrap();
    let e = m.run(&[("x", &t(&[0.0; 4], &[1, 4, 1]))]).unwrap_err();
    assert_eq!(onnx_err(&e), ("dft", "DFT", "axis", ErrorKind::BadArgument));
    // A gated rule without its decay.
    let m = linear_attention("gated", &[1, 1, 1], &["o"], vec![]).unwrap();
    let one_t = t(&[1.0], &[1, 1, 1]);
    let e = m
        .run(&[("q", &one_t), ("k", &one_t), ("v", &one_t)])
        .unwrap_err();
    assert_eq!(
        onnx_err(&e),
        ("la", "LinearAttention", "decay", ErrorKind::BadArgument)
    );
    // Heads that do not group, and an unknown activation, fail at load.
    let node = b::node(
        "LinearAttention",
        "la",
        &["q", "k", "v"],
        &["o"],
        vec![b::int("q_num_heads", 3), b::int("kv_num_heads", 2)],
    );
    let dims: &[i64] = &[1, 1, 1];
    let e = one(
        27,
        node,
        &[("q", dims), ("k", dims), ("v", dims)],
        &["o"],
        vec![],
    )
    .err()
    .expect("load must fail");
    assert_eq!(
        onnx_err(&e),
        (
            "la",
            "LinearAttention",
            "q_num_heads",
            ErrorKind::BadArgument
        )
    );
    let node = b::node(
        "CausalConvWithState",
        "ccs",
        &["x", "w"],
        &["y"],
        vec![b::string("activation", "relu")],
    );
    let e = one(
        27,
        node,
        &[("x", &[1, 1, 3]), ("w", &[1, 1, 2])],
        &["y"],
        vec![],
    )
    .err()
    .expect("load must fail");
    assert_eq!(
        onnx_err(&e),
        (
            "ccs",
            "CausalConvWithState",
            "activation",
            ErrorKind::Unsupported
        )
    );
}

/// CausalConvWithState over more taps, and LinearAttention over more time
/// steps, than the 2^16 steps the importer unrolls (one traced op or more
/// per step): each an E4 naming the node and the input that sets the
/// count, on every mode, before a step is traced.
#[test]
fn state_nodes_past_the_unrolling_limit_are_unsupported() {
    let over = (1usize << 16) + 1;
    let fails = |m: tilejit::Result<onnx::OnnxModel>, ins: &[(&str, &Tensor)], want| {
        for mode in MODES {
            match &m {
                Err(e) => assert_eq!(onnx_err(e), want, "at load"),
                Ok(m) => {
                    let e = with_mode(mode, || m.run(ins)).expect_err("past the limit");
                    assert_eq!(onnx_err(&e), want, "{mode:?}");
                }
            }
        }
    };
    let node = b::node("CausalConvWithState", "ccs", &["x", "w"], &["y"], vec![]);
    let dims: [(&str, &[i64]); 2] = [("x", &[1, 1, 1]), ("w", &[1, 1, over as i64])];
    let m = one(27, node, &dims, &["y"], vec![]);
    let (x, w) = (t(&[1.0], &[1, 1, 1]), t(&vec![0.5; over], &[1, 1, over]));
    let want = (
        "ccs",
        "CausalConvWithState",
        "weight",
        ErrorKind::Unsupported,
    );
    fails(m, &[("x", &x), ("w", &w)], want);
    let m = linear_attention("linear", &[1, over as i64, 1], &["o"], vec![]);
    let q = t(&vec![0.25; over], &[1, over, 1]);
    let want = ("la", "LinearAttention", "query", ErrorKind::Unsupported);
    fails(m, &[("q", &q), ("k", &q), ("v", &q)], want);
}
