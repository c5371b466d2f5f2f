//! `tilejit::onnx` transformer rows: Attention, the losses, normalizations,
//! rotary embedding and small activations, each model run on Host, Sim and
//! Verify against values from onnx's own `ReferenceEvaluator` (onnx
//! 1.23.2; the script built the same models with `onnx.helper` from the
//! same inputs, `vals(n, seed) = sin(0.37 i + seed) * 0.9` as f32), and bad
//! attributes, which must be load errors naming the node and attribute.

use super::onnx::{onnx_err, vals, MODES};
use tilejit::onnx::{self, OnnxModel};
use tilejit::{with_mode, Error, ErrorKind, Tensor};
use tilejit_testkit::onnx::{self as b, D};

const BOOL: i32 = 9;

fn t(data: Vec<f32>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(data, shape).unwrap()
}

fn dims(shape: &[usize]) -> Vec<D> {
    shape.iter().map(|&d| D::N(d as i64)).collect()
}

/// A model of `nodes` over the named inputs (dtype code, shape) with
/// undeclared float outputs.
fn model(
    opset: i64,
    nodes: Vec<b::proto::NodeProto>,
    inputs: &[(&str, i32, &[usize])],
    outputs: &[&str],
) -> OnnxModel {
    let ins = inputs
        .iter()
        .map(|(n, e, s)| b::value(n, *e, &dims(s)))
        .collect();
    let outs = outputs.iter().map(|o| b::value(o, b::FLOAT, &[])).collect();
    let bytes = b::encode(&b::model(opset, nodes, ins, outs, vec![]));
    onnx::from_bytes(&bytes).unwrap()
}

/// Runs in every mode and checks each output's shape and values.
fn check(m: &OnnxModel, inputs: &[(&str, &Tensor)], want: &[(&[usize], &[f64])]) {
    for mode in MODES {
        let outs = with_mode(mode, || m.run(inputs)).unwrap();
        assert_eq!(outs.len(), want.len());
        for ((name, got), (shape, w)) in outs.iter().zip(want) {
            assert_eq!(got.shape(), *shape, "{mode:?} {name}");
            let g = got.to_vec::<f32>().unwrap();
            for (i, (&g, &w)) in g.iter().zip(w.iter()).enumerate() {
                assert!(
                    (g as f64 - w).abs() <= 1e-5 + 1e-4 * w.abs(),
                    "{mode:?} {name}[{i}]: {g} vs {w}"
                );
            }
        }
    }
}

fn load_err(nodes: Vec<b::proto::NodeProto>, opset: i64) -> Error {
    let ins = vec![b::value("x", b::FLOAT, &dims(&[2, 3]))];
    let outs = vec![b::value("y", b::FLOAT, &[])];
    let bytes = b::encode(&b::model(opset, nodes, ins, outs, vec![]));
    onnx::from_bytes(&bytes).err().expect("must fail at load")
}

#[test]
fn attention_gqa_causal_with_cache_and_softcap_matches_onnx_reference() {
    let m = model(
        23,
        vec![b::node(
            "Attention",
            "attn",
            &["q", "k", "v", "", "pk", "pv"],
            &["y", "kp", "vp", "qk"],
            vec![
                b::int("q_num_heads", 2),
                b::int("kv_num_heads", 1),
                b::int("is_causal", 1),
                b::float("softcap", 2.0),
                b::int("qk_matmul_output_mode", 3),
            ],
        )],
        &[
            ("q", b::FLOAT, &[1, 2, 4]),
            ("k", b::FLOAT, &[1, 2, 2]),
            ("v", b::FLOAT, &[1, 2, 2]),
            ("pk", b::FLOAT, &[1, 1, 1, 2]),
            ("pv", b::FLOAT, &[1, 1, 1, 2]),
        ],
        &["y", "kp", "vp", "qk"],
    );
    let q = t(vals(8, 0.1), &[1, 2, 4]);
    let k = t(vals(4, 0.2), &[1, 2, 2]);
    let v = t(vals(4, 0.3), &[1, 2, 2]);
    let pk = t(vals(2, 0.4), &[1, 1, 1, 2]);
    let pv = t(vals(2, 0.5), &[1, 1, 1, 2]);
    // Causal with one past key: query 0 sees keys 0-1, query 1 keys 0-2
    // (the zeros in `qk`, the mode-3 probabilities).
    check(
        &m,
        &[("q", &q), ("k", &k), ("v", &v), ("pk", &pk), ("pv", &pv)],
        &[
            (
                &[1, 2, 4],
                &[
                    0.3508395, 0.6250394, 0.3552016, 0.6284394, 0.5372164, 0.7409278, 0.5225269,
                    0.7316052,
                ],
            ),
            (
                &[1, 1, 3, 2],
                &[
                    0.3504765, 0.6265217, 0.1788024, 0.4856688, 0.7268023, 0.8695664,
                ],
            ),
            (
                &[1, 1, 3, 2],
                &[
                    0.431483, 0.6878961, 0.2659682, 0.5588874, 0.7761638, 0.8883901,
                ],
            ),
            (
                &[1, 2, 2, 3],
                &[
                    0.5127718, 0.4872282, 0.0, 0.3101543, 0.2588088, 0.4310368, 0.5391267,
                    0.4608733, 0.0, 0.3175912, 0.2825765, 0.3998323,
                ],
            ),
        ],
    );
}

/// One Attention node over q `[1, 1, 2, 2]`, k and v `[1, 1, 3, 2]` and
/// a mask of `elem` and `dims`, with q, k and v's values.
fn attention_with_mask(elem: i32, dims: &[usize]) -> (OnnxModel, Tensor, Tensor, Tensor) {
    let m = model(
        23,
        vec![b::node(
            "Attention",
            "attn",
            &["q", "k", "v", "m"],
            &["y"],
            vec![],
        )],
        &[
            ("q", b::FLOAT, &[1, 1, 2, 2]),
            ("k", b::FLOAT, &[1, 1, 3, 2]),
            ("v", b::FLOAT, &[1, 1, 3, 2]),
            ("m", elem, dims),
        ],
        &["y"],
    );
    let q = t(vals(4, 0.1), &[1, 1, 2, 2]);
    let k = t(vals(6, 0.2), &[1, 1, 3, 2]);
    let v = t(vals(6, 0.3), &[1, 1, 3, 2]);
    (m, q, k, v)
}

#[test]
fn attention_short_bool_mask_zeroes_a_fully_masked_row() {
    let (m, q, k, v) = attention_with_mask(BOOL, &[2, 2]);
    // The mask is one key short (padded with false): query 0 sees key 0
    // only, so its row is value row 0; query 1 sees nothing: zeros.
    let mask = Tensor::from_vec(vec![true, false, false, false], &[2, 2]).unwrap();
    check(
        &m,
        &[("q", &q), ("k", &k), ("v", &v), ("m", &mask)],
        &[(&[1, 1, 2, 2], &[0.2659682, 0.5588874, 0.0, 0.0])],
    );
}

#[test]
fn losses_match_onnx_reference() {
    let sce = model(
        24,
        vec![b::node(
            "SoftmaxCrossEntropyLoss",
            "sce",
            &["x", "t", "w"],
            &["l", "lp"],
            vec![b::int("ignore_index", -1)],
        )],
        &[
            ("x", b::FLOAT, &[2, 3, 2]),
            ("t", b::INT64, &[2, 2]),
            ("w", b::FLOAT, &[3]),
        ],
        &["l", "lp"],
    );
    let x = t(vals(12, 0.6), &[2, 3, 2]);
    // Target -1 is ignored (outside the classes: it must not be read).
    let tg = Tensor::from_vec(vec![2i64, -1, 0, 1], &[2, 2]).unwrap();
    let w = t(vec![0.5, 1.0, 2.0], &[3]);
    check(
        &sce,
        &[("x", &x), ("t", &tg), ("w", &w)],
        &[
            (&[], &[1.051539]),
            (
                &[2, 3, 2],
                &[
                    -1.325693, -1.100464, -0.9577353, -0.9515675, -1.048052, -1.268873, -0.6161863,
                    -0.6814319, -1.266332, -1.276191, -1.725206, -1.537074,
                ],
            ),
        ],
    );
    let nll = model(
        24,
        vec![b::node(
            "NegativeLogLikelihoodLoss",
            "nll",
            &["x", "t"],
            &["l"],
            vec![b::string("reduction", "none")],
        )],
        &[("x", b::FLOAT, &[2, 3]), ("t", b::INT64, &[2])],
        &["l"],
    );
    // -x[i, t[i]]: hand-checkable from vals(6, 0.7) at 1 and 5.
    let x = t(vals(6, 0.7), &[2, 3]);
    let tg = Tensor::from_vec(vec![1i64, 2], &[2]).unwrap();
    check(
        &nll,
        &[("x", &x), ("t", &tg)],
        &[(&[2], &[-0.7894804, -0.5019153])],
    );
}

#[test]
fn normalizations_match_onnx_reference() {
    let m = model(
        24,
        vec![
            b::node(
                "RMSNormalization",
                "rms",
                &["x", "s"],
                &["r"],
                vec![b::int("axis", 1)],
            ),
            b::node(
                "LayerNormalization",
                "ln",
                &["x", "s", "b"],
                &["y", "mean", "inv"],
                vec![b::int("axis", 1)],
            ),
        ],
        &[
            ("x", b::FLOAT, &[2, 3]),
            ("s", b::FLOAT, &[3]),
            ("b", b::FLOAT, &[3]),
        ],
        &["r", "y", "mean", "inv"],
    );
    let x = t(vals(6, 0.8), &[2, 3]);
    let s = t(vec![1.0, 0.5, 2.0], &[3]);
    let bias = t(vec![0.1, 0.2, 0.3], &[3]);
    check(
        &m,
        &[("x", &x), ("s", &s), ("b", &bias)],
        &[
            (
                &[2, 3],
                &[0.8085449, 0.5188972, 2.253167, 1.25716, 0.5058401, 1.258548],
            ),
            (
                &[2, 3],
                &[
                    -1.260889, 0.3746349, 2.323238, 1.226635, 0.2883168, -2.306537,
                ],
            ),
            (&[2, 1], &[0.7912897, 0.6521794]),
            (&[2, 1], &[9.342319, 5.732386]),
        ],
    );
    let g = model(
        21,
        vec![b::node(
            "GroupNormalization",
            "gn",
            &["x", "s", "b"],
            &["y"],
            vec![b::int("num_groups", 2)],
        )],
        &[
            ("x", b::FLOAT, &[1, 4, 2]),
            ("s", b::FLOAT, &[4]),
            ("b", b::FLOAT, &[4]),
        ],
        &["y"],
    );
    let x = t(vals(8, 1.1), &[1, 4, 2]);
    let s = t(vec![1.0, 2.0, 3.0, 4.0], &[4]);
    let bias = t(vec![0.0, 1.0, 0.0, 1.0], &[4]);
    check(
        &g,
        &[("x", &x), ("s", &s), ("b", &bias)],
        &[(
            &[1, 4, 2],
            &[
                -0.2959627, 1.10161, 2.369359, -1.980652, 4.002102, 1.40156, -0.8598573, -4.345025,
            ],
        )],
    );
}

#[test]
fn interleaved_rotary_embedding_with_position_ids_matches_onnx_reference() {
    let m = model(
        24,
        vec![b::node(
            "RotaryEmbedding",
            "rope",
            &["x", "c", "s", "p"],
            &["y"],
            vec![b::int("interleaved", 1)],
        )],
        &[
            ("x", b::FLOAT, &[1, 1, 2, 4]),
            ("c", b::FLOAT, &[3, 2]),
            ("s", b::FLOAT, &[3, 2]),
            ("p", b::INT64, &[1, 2]),
        ],
        &["y"],
    );
    let x = t(vals(8, 0.9), &[1, 1, 2, 4]);
    let angles = vals(6, 1.0);
    let c = t(angles.iter().map(|a| a.cos()).collect(), &[3, 2]);
    let s = t(angles.iter().map(|a| a.sin()).collect(), &[3, 2]);
    let p = Tensor::from_vec(vec![2i64, 0], &[1, 2]).unwrap();
    check(
        &m,
        &[("x", &x), ("c", &c), ("s", &s), ("p", &p)],
        &[(
            &[1, 1, 2, 4],
            &[
                0.1484927, 1.101754, 0.6595482, 1.017185, 0.2153416, 0.6762703, 0.2495453,
                -0.1803168,
            ],
        )],
    );
}

#[test]
fn small_activations_match_onnx_reference() {
    let m = model(
        24,
        vec![
            b::node("Hardmax", "hm", &["h"], &["a"], vec![]),
            b::node(
                "Shrink",
                "sh",
                &["x"],
                &["b"],
                vec![b::float("bias", 0.1), b::float("lambd", 0.5)],
            ),
            b::node("Celu", "ce", &["x"], &["c"], vec![b::float("alpha", 2.0)]),
            b::node("Swish", "sw", &["x"], &["d"], vec![b::float("alpha", 1.5)]),
            b::node("Mish", "mi", &["x"], &["e"], vec![]),
            b::node(
                "ThresholdedRelu",
                "tr",
                &["x"],
                &["f"],
                vec![b::float("alpha", 0.25)],
            ),
        ],
        &[("h", b::FLOAT, &[2, 3]), ("x", b::FLOAT, &[6])],
        &["a", "b", "c", "d", "e", "f"],
    );
    // Hardmax's tie in row 0 goes to the first maximum.
    let h = t(vec![1.0, 3.0, 3.0, 2.0, 1.0, 0.0], &[2, 3]);
    let x = t(vec![-2.0, -0.6, -0.2, 0.0, 0.3, 1.5], &[6]);
    check(
        &m,
        &[("h", &h), ("x", &x)],
        &[
            (&[2, 3], &[0.0, 1.0, 0.0, 1.0, 0.0, 0.0]),
            (&[6], &[-1.9, -0.5, 0.0, 0.0, 0.0, 1.4]),
            (&[6], &[-1.264241, -0.5183636, -0.1903252, 0.0, 0.3, 1.5]),
            (
                &[6],
                &[
                    -0.09485175,
                    -0.1734303,
                    -0.0851115,
                    0.0,
                    0.1831918,
                    1.356976,
                ],
            ),
            (
                &[6],
                &[-0.2525015, -0.246936, -0.1071448, 0.0, 0.2080014, 1.403378],
            ),
            (&[6], &[0.0, 0.0, 0.0, 0.0, 0.3, 1.5]),
        ],
    );
}

#[test]
fn bad_attributes_are_load_errors_naming_node_and_attribute() {
    let cases = [
        (
            b::node(
                "Attention",
                "attn",
                &["x", "x", "x"],
                &["y"],
                vec![b::int("qk_matmul_output_mode", 5)],
            ),
            "qk_matmul_output_mode",
            ErrorKind::BadArgument,
        ),
        (
            b::node(
                "Attention",
                "attn",
                &["x", "x", "x", "", "x"],
                &["y"],
                vec![],
            ),
            "past_key",
            ErrorKind::BadArgument,
        ),
        (
            b::node(
                "SoftmaxCrossEntropyLoss",
                "sce",
                &["x", "x"],
                &["y"],
                vec![b::string("reduction", "avg")],
            ),
            "reduction",
            ErrorKind::Unsupported,
        ),
        (
            b::node(
                "RMSNormalization",
                "rms",
                &["x", "x"],
                &["y"],
                vec![b::int("stash_type", 0)],
            ),
            "stash_type",
            ErrorKind::Unsupported,
        ),
        (
            b::node(
                "LpNormalization",
                "lp",
                &["x"],
                &["y"],
                vec![b::int("p", 3)],
            ),
            "p",
            ErrorKind::Unsupported,
        ),
    ];
    for (node, attr, kind) in cases {
        let name = node.name.clone();
        let e = load_err(vec![node], 24);
        let (n, _, a, k) = onnx_err(&e);
        assert_eq!((n, a, k), (name.as_str(), attr, kind), "{e}");
    }
}

#[test]
fn rms_normalization_of_bools_is_a_dtype_error() {
    // The fuzzer's: squaring refused the dtype, and the failed square
    // (no dims) was split into rows, a panic while tracing.
    const BOOL: i32 = 9; // ONNX's TensorProto.BOOL
    let m = model(
        23,
        vec![b::node(
            "RMSNormalization",
            "rms",
            &["x", "x"],
            &["y"],
            vec![],
        )],
        &[("x", BOOL, &[3, 3])],
        &["y"],
    );
    let x = Tensor::from_vec(vec![true; 9], &[3, 3]).unwrap();
    let Err(e) = m.run(&[("x", &x)]) else {
        panic!("RMSNormalization of bools must fail")
    };
    assert_eq!(e.kind(), ErrorKind::DType, "{e}");
}

#[test]
fn attention_without_head_counts_on_3d_inputs_names_the_node() {
    let m = model(
        23,
        vec![b::node(
            "Attention",
            "attn3",
            &["q", "q", "q"],
            &["y"],
            vec![],
        )],
        &[("q", b::FLOAT, &[1, 2, 4])],
        &["y"],
    );
    let q = t(vals(8, 0.1), &[1, 2, 4]);
    let Err(e) = m.run(&[("q", &q)]) else {
        panic!("no head counts must fail")
    };
    // A trace-time error: the call's error carries the node's.
    assert_eq!(e.kind(), ErrorKind::BadArgument, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("node `attn3` (Attention), `q_num_heads`")
            && text.contains("positive head count"),
        "{text}"
    );
}

/// Scalar cos and sin caches (a fuzzer's file) are a shape error naming
/// the node, with or without position ids; they once underflowed the
/// caches' rank while tracing.
#[test]
fn scalar_rotary_caches_are_shape_errors() {
    let x = t(vals(8, 0.9), &[1, 1, 2, 4]);
    let c = t(vec![0.5], &[]);
    let p = Tensor::from_vec(vec![0i64, 0], &[1, 2]).expect("ids");
    for with_ids in [false, true] {
        let ins: &[&str] = if with_ids {
            &["x", "c", "c", "p"]
        } else {
            &["x", "c", "c"]
        };
        let mut inputs: Vec<(&str, i32, &[usize])> =
            vec![("x", b::FLOAT, &[1, 1, 2, 4]), ("c", b::FLOAT, &[])];
        if with_ids {
            inputs.push(("p", b::INT64, &[1, 2]));
        }
        let m = model(
            24,
            vec![b::node("RotaryEmbedding", "rope", ins, &["y"], vec![])],
            &inputs,
            &["y"],
        );
        let mut feed = vec![("x", &x), ("c", &c)];
        if with_ids {
            feed.push(("p", &p));
        }
        for mode in MODES {
            let e = with_mode(mode, || m.run(&feed)).expect_err("scalar caches");
            assert_eq!(e.kind(), ErrorKind::Shape, "{mode:?}: {e}");
            assert!(
                e.to_string()
                    .contains("node `rope` (RotaryEmbedding), `cos_cache`"),
                "{e}"
            );
        }
    }
}

/// A scalar attention mask has no key axis to pad: a shape error naming
/// it, where the padding indexed axis -1 of a rank-0 tensor and panicked.
#[test]
fn scalar_attention_mask_is_a_shape_error() {
    let (m, q, k, v) = attention_with_mask(b::FLOAT, &[]);
    let mask = t(vec![0.0], &[]);
    for mode in MODES {
        let feed = [("q", &q), ("k", &k), ("v", &v), ("m", &mask)];
        let e = with_mode(mode, || m.run(&feed)).expect_err("a scalar mask");
        assert_eq!(e.kind(), ErrorKind::Shape, "{mode:?}: {e}");
        assert!(
            e.to_string()
                .contains("node `attn` (Attention), `attn_mask`"),
            "{e}"
        );
    }
}

/// LRN whose `size` passes every channel: each window holds all the
/// channels, so `y = x / (bias + alpha / size * sum_c x^2)^beta`,
/// computed here. A tap per unit of `size` made a million-tap trace.
#[test]
fn lrn_wider_than_the_channels_sums_them_all() {
    let size = 1_000_001i64;
    let (alpha, beta, bias) = (2.0e6f32, 0.75f32, 1.5f32);
    let node = b::node(
        "LRN",
        "lrn",
        &["x"],
        &["y"],
        vec![
            b::int("size", size),
            b::float("alpha", alpha),
            b::float("beta", beta),
            b::float("bias", bias),
        ],
    );
    let m = model(13, vec![node], &[("x", b::FLOAT, &[1, 3, 2])], &["y"]);
    let x = vals(6, 0.7);
    let want: Vec<f64> = (0..6)
        .map(|i| {
            let p = i % 2;
            let sum: f64 = (0..3).map(|c| (x[c * 2 + p] as f64).powi(2)).sum();
            let d = bias as f64 + alpha as f64 / size as f64 * sum;
            x[i] as f64 / d.powf(beta as f64)
        })
        .collect();
    let xt = t(x, &[1, 3, 2]);
    check(&m, &[("x", &xt)], &[(&[1, 3, 2], &want)]);
}
