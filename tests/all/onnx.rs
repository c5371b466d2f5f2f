//! `tilejit::onnx`: small models built with `tilejit_testkit::onnx`, run
//! on Host, Sim and Verify against f64 references written here, and bad
//! files and inputs, which must be errors naming what is wrong.

use tilejit::onnx::{self, LoadOptions};
use tilejit::{with_mode, DType, Error, ErrorKind, RunMode, Tensor};
use tilejit_testkit::onnx::{self as b, D};
use tilejit_testkit::TempDir;

pub(crate) const MODES: [RunMode; 3] = [RunMode::Host, RunMode::Sim, RunMode::Verify];

pub(crate) fn vals(n: usize, seed: f64) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f64 * 0.37 + seed).sin() * 0.9) as f32)
        .collect()
}

pub(crate) fn close(got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= 1e-5 + 1e-4 * w.abs(),
            "element {i}: {g} vs {w}"
        );
    }
}

fn run1(model: &onnx::OnnxModel, inputs: &[(&str, &Tensor)], mode: RunMode) -> Tensor {
    let outs = with_mode(mode, || model.run(inputs)).unwrap();
    outs.into_iter().next().unwrap().1
}

/// An ONNX error's node, op, attribute and kind (through a trace error).
pub(crate) fn onnx_err(e: &Error) -> (&str, &str, &str, ErrorKind) {
    match e {
        Error::Onnx {
            node,
            op,
            attribute,
            kind,
            ..
        } => (node, op, attribute, *kind),
        Error::Trace { source, .. } => onnx_err(source),
        e => panic!("not an ONNX error: {e}"),
    }
}

/// MatMul + Add + Relu, then Gemm (transB) + bias: x [2,3] -> [2,2].
fn mlp() -> Vec<u8> {
    let (w1, b1, w2, b2) = (vals(12, 0.1), vals(4, 0.2), vals(8, 0.3), vals(2, 0.4));
    b::encode(&b::model(
        13,
        vec![
            b::node("MatMul", "mm", &["x", "w1"], &["h0"], vec![]),
            b::node("Add", "add", &["h0", "b1"], &["h1"], vec![]),
            b::node("Relu", "relu", &["h1"], &["h"], vec![]),
            b::node(
                "Gemm",
                "fc",
                &["h", "w2", "b2"],
                &["y"],
                vec![b::int("transB", 1), b::float("alpha", 0.5)],
            ),
        ],
        vec![b::value("x", b::FLOAT, &[D::S("batch"), D::N(3)])],
        vec![b::value("y", b::FLOAT, &[D::S("batch"), D::N(2)])],
        vec![
            b::f32s("w1", &[3, 4], &w1),
            b::f32s("b1", &[4], &b1),
            b::f32s("w2", &[2, 4], &w2),
            b::f32s("b2", &[2], &b2),
        ],
    ))
}

fn mlp_reference(x: &[f32], rows: usize) -> Vec<f64> {
    let (w1, b1, w2, b2) = (vals(12, 0.1), vals(4, 0.2), vals(8, 0.3), vals(2, 0.4));
    let mut y = vec![0.0; rows * 2];
    for r in 0..rows {
        let h: Vec<f64> = (0..4)
            .map(|j| {
                let s: f64 = (0..3)
                    .map(|k| x[r * 3 + k] as f64 * w1[k * 4 + j] as f64)
                    .sum();
                (s + b1[j] as f64).max(0.0)
            })
            .collect();
        for o in 0..2 {
            let s: f64 = (0..4).map(|j| h[j] * w2[o * 4 + j] as f64).sum();
            y[r * 2 + o] = 0.5 * s + b2[o] as f64;
        }
    }
    y
}

#[test]
fn mlp_matches_reference_on_every_mode() {
    let model = onnx::from_bytes(&mlp()).unwrap();
    assert_eq!(model.inputs()[0].to_string(), "x: f32[batch, 3]");
    let xv = vals(6, 1.0);
    let x = Tensor::from_vec(xv.clone(), &[2, 3]).unwrap();
    for mode in MODES {
        let y = run1(&model, &[("x", &x)], mode);
        assert_eq!(y.shape(), &[2, 2]);
        close(&y.to_vec::<f32>().unwrap(), &mlp_reference(&xv, 2));
    }
    // A symbolic batch takes another size: one more trace.
    let xv = vals(15, 2.0);
    let x = Tensor::from_vec(xv.clone(), &[5, 3]).unwrap();
    let y = model.run_positional(&[&x]).unwrap();
    assert_eq!(y[0].0, "y");
    close(&y[0].1.to_vec::<f32>().unwrap(), &mlp_reference(&xv, 5));
}

#[test]
fn second_call_hits_the_handler_cache_and_weights_can_be_arguments() {
    let model = onnx::from_bytes(&mlp()).unwrap();
    let xv = vals(6, 3.0);
    let x = Tensor::from_vec(xv.clone(), &[2, 3]).unwrap();
    run1(&model, &[("x", &x)], RunMode::Host);
    let y = run1(&model, &[("x", &x)], RunMode::Host);
    let stats = model.function().stats();
    assert_eq!((stats.builds, stats.hits), (1, 1));
    close(&y.to_vec::<f32>().unwrap(), &mlp_reference(&xv, 2));

    let mut model = onnx::from_bytes_with(
        &mlp(),
        LoadOptions {
            weights_as_arguments: true,
            ..Default::default()
        },
    )
    .unwrap();
    model.map_weights(|w| Ok(w.clone())).unwrap();
    for mode in MODES {
        let y = run1(&model, &[("x", &x)], mode);
        close(&y.to_vec::<f32>().unwrap(), &mlp_reference(&xv, 2));
    }
    // The program takes the weights as arguments: no constant holds them.
    let text = model.function().handlers()[0].graph_text();
    assert!(text.matches("input").count() >= 5, "{text}");
}

/// Conv (3x3, pad 1, bias) + BatchNormalization + Relu + MaxPool 2x2.
#[test]
fn conv_bn_relu_maxpool_matches_reference() {
    let (c, o, h) = (2usize, 3usize, 5usize);
    let (w, bias) = (vals(o * c * 9, 0.5), vals(o, 0.6));
    let (scale, shift, mean) = (vals(o, 0.7), vals(o, 0.8), vals(o, 0.9));
    let var: Vec<f32> = vals(o, 1.1).iter().map(|v| v.abs() + 0.5).collect();
    let bytes = b::encode(&b::model(
        11,
        vec![
            b::node(
                "Conv",
                "conv",
                &["x", "w", "bias"],
                &["c"],
                vec![
                    b::ints("pads", &[1, 1, 1, 1]),
                    b::ints("kernel_shape", &[3, 3]),
                ],
            ),
            b::node(
                "BatchNormalization",
                "bn",
                &["c", "scale", "shift", "mean", "var"],
                &["n"],
                vec![b::float("epsilon", 1e-5)],
            ),
            b::node("Relu", "relu", &["n"], &["r"], vec![]),
            b::node(
                "MaxPool",
                "pool",
                &["r"],
                &["y"],
                vec![
                    b::ints("kernel_shape", &[2, 2]),
                    b::ints("strides", &[2, 2]),
                ],
            ),
        ],
        vec![b::value(
            "x",
            b::FLOAT,
            &[D::N(1), D::N(2), D::N(5), D::N(5)],
        )],
        vec![b::value("y", b::FLOAT, &[])],
        vec![
            b::f32s("w", &[3, 2, 3, 3], &w),
            b::f32s("bias", &[3], &bias),
            b::f32s("scale", &[3], &scale),
            b::f32s("shift", &[3], &shift),
            b::f32s("mean", &[3], &mean),
            b::f32s("var", &[3], &var),
        ],
    ));
    let xv = vals(c * h * h, 1.3);
    // The reference: direct convolution with zero padding, then the rest.
    let mut r = vec![0.0f64; o * h * h];
    for oc in 0..o {
        for i in 0..h {
            for j in 0..h {
                let mut s = bias[oc] as f64;
                for ic in 0..c {
                    for di in 0..3 {
                        for dj in 0..3 {
                            let (y, x) =
                                (i as isize + di as isize - 1, j as isize + dj as isize - 1);
                            if (0..h as isize).contains(&y) && (0..h as isize).contains(&x) {
                                s += xv[ic * h * h + y as usize * h + x as usize] as f64
                                    * w[((oc * c + ic) * 3 + di) * 3 + dj] as f64;
                            }
                        }
                    }
                }
                let n = (s - mean[oc] as f64) / (var[oc] as f64 + 1e-5).sqrt() * scale[oc] as f64
                    + shift[oc] as f64;
                r[oc * h * h + i * h + j] = n.max(0.0);
            }
        }
    }
    let mut want = vec![];
    for oc in 0..o {
        for i in 0..2 {
            for j in 0..2 {
                let m = [(0, 0), (0, 1), (1, 0), (1, 1)]
                    .iter()
                    .map(|(a, b)| r[oc * h * h + (2 * i + a) * h + 2 * j + b])
                    .fold(f64::MIN, f64::max);
                want.push(m);
            }
        }
    }
    let model = onnx::from_bytes(&bytes).unwrap();
    let x = Tensor::from_vec(xv, &[1, 2, 5, 5]).unwrap();
    for mode in MODES {
        let y = run1(&model, &[("x", &x)], mode);
        assert_eq!(y.shape(), &[1, 3, 2, 2]);
        close(&y.to_vec::<f32>().unwrap(), &want);
    }
}

/// Shape -> Gather -> Unsqueeze -> Concat -> Reshape: folded while tracing.
#[test]
fn reshape_by_a_shape_subgraph() {
    let bytes = b::encode(&b::model(
        13,
        vec![
            b::node("Shape", "shape", &["x"], &["s"], vec![]),
            b::node(
                "Gather",
                "first",
                &["s", "zero"],
                &["n"],
                vec![b::int("axis", 0)],
            ),
            b::node("Unsqueeze", "unsq", &["n", "zero1"], &["n1"], vec![]),
            b::node(
                "Concat",
                "cat",
                &["n1", "minus1"],
                &["target"],
                vec![b::int("axis", 0)],
            ),
            b::node("Reshape", "reshape", &["x", "target"], &["r"], vec![]),
            b::node("Mul", "twice", &["r", "two"], &["y"], vec![]),
        ],
        vec![b::value("x", b::FLOAT, &[D::S("n"), D::N(2), D::N(3)])],
        vec![b::value("y", b::FLOAT, &[D::S("n"), D::N(6)])],
        vec![
            b::i64s("zero", &[], &[0]),
            b::i64s("zero1", &[1], &[0]),
            b::i64s("minus1", &[1], &[-1]),
            b::f32s("two", &[], &[2.0]),
        ],
    ));
    let model = onnx::from_bytes(&bytes).unwrap();
    let xv = vals(24, 0.0);
    let x = Tensor::from_vec(xv.clone(), &[4, 2, 3]).unwrap();
    for mode in MODES {
        let y = run1(&model, &[("x", &x)], mode);
        assert_eq!(y.shape(), &[4, 6]);
        let want: Vec<f64> = xv.iter().map(|&v| 2.0 * v as f64).collect();
        close(&y.to_vec::<f32>().unwrap(), &want);
    }
}

/// Layer norm as torch exports it before opset 17 (ReduceMean, Sub, Pow,
/// Sqrt, Div, Mul, Add), then Softmax over the last axis.
#[test]
fn decomposed_layer_norm_then_softmax() {
    let (g, bt) = (vals(4, 0.3), vals(4, 0.4));
    let bytes = b::encode(&b::model(
        13,
        vec![
            b::node(
                "ReduceMean",
                "mean",
                &["x"],
                &["m"],
                vec![b::ints("axes", &[-1])],
            ),
            b::node("Sub", "center", &["x", "m"], &["d"], vec![]),
            b::node("Pow", "sq", &["d", "two"], &["d2"], vec![]),
            b::node(
                "ReduceMean",
                "var",
                &["d2"],
                &["v"],
                vec![b::ints("axes", &[-1])],
            ),
            b::node("Add", "eps", &["v", "epsilon"], &["ve"], vec![]),
            b::node("Sqrt", "std", &["ve"], &["s"], vec![]),
            b::node("Div", "norm", &["d", "s"], &["n"], vec![]),
            b::node("Mul", "gamma", &["n", "g"], &["ng"], vec![]),
            b::node("Add", "beta", &["ng", "bt"], &["l"], vec![]),
            b::node(
                "Softmax",
                "softmax",
                &["l"],
                &["y"],
                vec![b::int("axis", -1)],
            ),
        ],
        vec![b::value("x", b::FLOAT, &[D::N(3), D::N(4)])],
        vec![b::value("y", b::FLOAT, &[D::N(3), D::N(4)])],
        vec![
            b::f32s("two", &[], &[2.0]),
            b::f32s("epsilon", &[], &[1e-5]),
            b::f32s("g", &[4], &g),
            b::f32s("bt", &[4], &bt),
        ],
    ));
    let xv = vals(12, 0.7);
    let x64: Vec<f64> = xv.iter().map(|&v| v as f64).collect();
    let g64: Vec<f64> = g.iter().map(|&v| v as f64).collect();
    let b64: Vec<f64> = bt.iter().map(|&v| v as f64).collect();
    let ln = tilejit_testkit::reference::layer_norm(&x64, &g64, &b64, 4, 1e-5);
    let want = tilejit_testkit::reference::softmax(&ln, 4);
    let model = onnx::from_bytes(&bytes).unwrap();
    let x = Tensor::from_vec(xv, &[3, 4]).unwrap();
    for mode in MODES {
        close(
            &run1(&model, &[("x", &x)], mode).to_vec::<f32>().unwrap(),
            &want,
        );
    }
}

fn external_model(offset: &str, location: &str) -> Vec<u8> {
    let mut w = b::f32s("w", &[2, 2], &[]);
    w.raw_data.clear();
    w.data_location = protobuf_external();
    for (k, v) in [("location", location), ("offset", offset), ("length", "16")] {
        w.external_data.push(b::proto::StringStringEntryProto {
            key: k.into(),
            value: v.into(),
            ..Default::default()
        });
    }
    b::encode(&b::model(
        13,
        vec![b::node("MatMul", "mm", &["x", "w"], &["y"], vec![])],
        vec![b::value("x", b::FLOAT, &[D::N(1), D::N(2)])],
        vec![b::value("y", b::FLOAT, &[D::N(1), D::N(2)])],
        vec![w],
    ))
}

fn protobuf_external() -> b::protobuf::EnumOrUnknown<b::proto::tensor_proto::DataLocation> {
    b::protobuf::EnumOrUnknown::new(b::proto::tensor_proto::DataLocation::EXTERNAL)
}

#[test]
fn external_data_is_read_and_checked() {
    let dir = TempDir::new("onnx-external");
    // 8 bytes of padding, then [[1, 2], [3, 4]].
    let mut data = vec![0u8; 8];
    data.extend([1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(dir.join("model.onnx.data"), &data).unwrap();
    let path = dir.join("model.onnx");
    std::fs::write(&path, external_model("8", "model.onnx.data")).unwrap();
    let model = onnx::load(&path).unwrap();
    let x = Tensor::from_vec(vec![1.0f32, 1.0], &[1, 2]).unwrap();
    assert_eq!(
        run1(&model, &[("x", &x)], RunMode::Host)
            .to_vec::<f32>()
            .unwrap(),
        [4.0, 6.0]
    );

    // Past the file's end, an overflowing offset, a path out of the
    // directory, a missing file, and no directory at all: errors.
    for (offset, location, says) in [
        ("16", "model.onnx.data", "past its end"),
        ("18446744073709551615", "model.onnx.data", "overflows"),
        ("0", "../model.onnx.data", "relative path"),
        ("0", "/etc/passwd", "relative path"),
        ("0", "absent.data", "absent.data"),
    ] {
        std::fs::write(&path, external_model(offset, location)).unwrap();
        let e = onnx::load(&path).err().unwrap();
        assert!(e.to_string().contains(says), "{e}");
        assert_eq!(onnx_err(&e).2, "initializer w");
    }
    let e = onnx::from_bytes(&external_model("8", "model.onnx.data"))
        .err()
        .unwrap();
    assert!(e.to_string().contains("no directory"), "{e}");
}

#[test]
fn damaged_files_are_errors() {
    let bytes = mlp();
    for cut in [1, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
        let e = onnx::from_bytes(&bytes[..cut]).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::BadArgument, "{e}");
    }
    assert!(onnx::from_bytes(b"not a model at all").is_err());
    let e = onnx::load("/nonexistent/model.onnx").err().unwrap();
    assert!(matches!(e, Error::File { .. }), "{e}");
    // A raw-data length that does not fit the shape.
    let mut m = b::model(
        13,
        vec![b::node("Relu", "r", &["w"], &["y"], vec![])],
        vec![],
        vec![b::value("y", b::FLOAT, &[])],
        vec![b::f32s("w", &[3], &[1.0, 2.0])],
    );
    let e = onnx::from_bytes(&b::encode(&m)).err().unwrap();
    assert!(e.to_string().contains("raw data holds 8 bytes"), "{e}");
    // An opset older than 7.
    m.opset_import[0].version = 6;
    let e = onnx::from_bytes(&b::encode(&m)).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
}

fn one_node(node: b::proto::NodeProto, inits: Vec<b::proto::TensorProto>) -> Vec<u8> {
    b::encode(&b::model(
        13,
        vec![node],
        vec![b::value(
            "x",
            b::FLOAT,
            &[D::N(1), D::N(1), D::N(4), D::N(4)],
        )],
        vec![b::value("y", b::FLOAT, &[])],
        inits,
    ))
}

#[test]
fn unsupported_ops_attributes_and_dtypes_fail_at_load_naming_them() {
    let e = onnx::from_bytes(&one_node(
        b::node("FancyOp", "mystery", &["x"], &["y"], vec![]),
        vec![],
    ))
    .err()
    .unwrap();
    assert_eq!(
        onnx_err(&e),
        ("mystery", "FancyOp", "", ErrorKind::Unsupported)
    );
    assert!(e.to_string().contains("node `mystery` (FancyOp)"), "{e}");

    let e = onnx::from_bytes(&one_node(
        b::node("Relu", "r", &["x"], &["y"], vec![b::int("bogus", 1)]),
        vec![],
    ))
    .err()
    .unwrap();
    assert_eq!(onnx_err(&e), ("r", "Relu", "bogus", ErrorKind::Unsupported));

    let pad = b::node(
        "Pad",
        "pad",
        &["x", "p"],
        &["y"],
        vec![b::string("mode", "mirror")],
    );
    let e = onnx::from_bytes(&one_node(pad, vec![b::i64s("p", &[8], &[0; 8])]))
        .err()
        .unwrap();
    assert_eq!(onnx_err(&e), ("pad", "Pad", "mode", ErrorKind::Unsupported));

    let pool = b::node(
        "MaxPool",
        "p",
        &["x"],
        &["y"],
        vec![b::ints("kernel_shape", &[2, 2]), b::int("ceil_mode", 2)],
    );
    let e = onnx::from_bytes(&one_node(pool, vec![])).err().unwrap();
    assert_eq!(
        onnx_err(&e),
        ("p", "MaxPool", "ceil_mode", ErrorKind::BadArgument)
    );

    let cast = b::node(
        "Cast",
        "c",
        &["x"],
        &["y"],
        vec![b::int("to", b::COMPLEX64 as i64)],
    );
    let e = onnx::from_bytes(&one_node(cast, vec![])).err().unwrap();
    assert_eq!(onnx_err(&e), ("c", "Cast", "to", ErrorKind::Unsupported));
    assert!(e.to_string().contains("complex64"), "{e}");

    // `info` reads the model anyway and says which ops fail.
    let dir = TempDir::new("onnx-info");
    let path = dir.join("m.onnx");
    std::fs::write(
        &path,
        one_node(
            b::node("FancyOp", "mystery", &["x"], &["y"], vec![]),
            vec![],
        ),
    )
    .unwrap();
    let info = onnx::info(&path).unwrap();
    assert_eq!(info.opset, 13);
    assert_eq!(info.ops.len(), 1);
    assert!(info.ops[0].problem.as_deref().unwrap().contains("FancyOp"));
}

#[test]
fn a_missing_value_fails_at_load_naming_node_and_input() {
    let bytes = one_node(
        b::node("Add", "sum", &["x", "nowhere"], &["y"], vec![]),
        vec![],
    );
    let e = onnx::from_bytes(&bytes).err().unwrap();
    assert_eq!(
        onnx_err(&e),
        ("sum", "Add", "nowhere", ErrorKind::BadArgument)
    );
}

#[test]
fn wrong_inputs_at_run_are_errors() {
    let model = onnx::from_bytes(&mlp()).unwrap();
    let good = Tensor::ones(&[2, 3], DType::F32);
    type Case<'a> = (Vec<(&'a str, Tensor)>, &'a str, ErrorKind);
    let cases: Vec<Case> = vec![
        (vec![], "x", ErrorKind::BadArgument),
        (
            vec![("x", good.clone()), ("z", good.clone())],
            "z",
            ErrorKind::BadArgument,
        ),
        (
            vec![("x", Tensor::ones(&[2, 4], DType::F32))],
            "x",
            ErrorKind::Shape,
        ),
        (
            vec![("x", Tensor::ones(&[2, 3, 1], DType::F32))],
            "x",
            ErrorKind::Shape,
        ),
        (
            vec![("x", Tensor::ones(&[2, 3], DType::F64))],
            "x",
            ErrorKind::DType,
        ),
    ];
    for (inputs, attr, kind) in cases {
        let refs: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
        let e = model.run(&refs).err().unwrap();
        let (_, _, a, k) = onnx_err(&e);
        assert_eq!((a, k), (attr, kind), "{e}");
    }
    assert!(model.run_positional(&[]).is_err());
}

/// GatherND (batch_dims 0) with traced and with known indices, against
/// values read off by hand.
#[test]
fn gather_nd_matches_hand_values() {
    let bytes = b::encode(&b::model(
        13,
        vec![
            b::node("GatherND", "g1", &["x", "idx"], &["y"], vec![]),
            b::node("GatherND", "g2", &["x", "known"], &["z"], vec![]),
        ],
        vec![
            b::value("x", b::FLOAT, &[D::N(2), D::N(2), D::N(2)]),
            b::value("idx", b::INT64, &[D::N(2), D::N(2)]),
        ],
        vec![b::value("y", b::FLOAT, &[]), b::value("z", b::FLOAT, &[])],
        vec![b::i64s("known", &[1, 3], &[1, -1, 0])],
    ));
    let model = onnx::from_bytes(&bytes).unwrap();
    let x = Tensor::from_vec((0..8).map(|v| v as f32).collect(), &[2, 2, 2]).unwrap();
    let idx = Tensor::from_vec(vec![0i64, 1, 1, 0], &[2, 2]).unwrap();
    for mode in MODES {
        let outs = with_mode(mode, || model.run(&[("x", &x), ("idx", &idx)])).unwrap();
        // x[0, 1, :] = [2, 3], x[1, 0, :] = [4, 5]; x[1, 1, 0] = 6.
        assert_eq!(outs[0].1.shape(), &[2, 2]);
        assert_eq!(outs[0].1.to_vec::<f32>().unwrap(), [2.0, 3.0, 4.0, 5.0]);
        assert_eq!(outs[1].1.to_vec::<f32>().unwrap(), [6.0]);
    }
}

/// Slice with steps (negative too), Einsum, the bitwise ops and BitShift
/// map onto `slice_step`, `einsum` and the bitwise rows: hand values on
/// every backend; a step of 0 refused at load, a repeated axis (`1` and
/// `-1` of a rank-2 input) when the slice is traced.
#[test]
fn stepped_slices_einsum_and_bitwise_ops_match_hand_values() {
    let slice = |axes: &[i64], steps: &[i64]| {
        b::encode(&b::model(
            13,
            vec![
                b::node("Slice", "s", &["x", "st", "en", "ax", "sp"], &["y"], vec![]),
                b::node(
                    "Einsum",
                    "e",
                    &["x", "x"],
                    &["z"],
                    vec![b::string("equation", "ij,kj->ik")],
                ),
                b::node("BitwiseXor", "bx", &["i", "j"], &["xor"], vec![]),
                b::node(
                    "BitShift",
                    "bs",
                    &["i", "j"],
                    &["shl"],
                    vec![b::string("direction", "LEFT")],
                ),
            ],
            vec![
                b::value("x", b::FLOAT, &[D::N(2), D::N(5)]),
                b::value("i", b::INT64, &[D::N(3)]),
                b::value("j", b::INT64, &[D::N(3)]),
            ],
            vec![
                b::value("y", b::FLOAT, &[]),
                b::value("z", b::FLOAT, &[]),
                b::value("xor", b::INT64, &[]),
                b::value("shl", b::INT64, &[]),
            ],
            vec![
                b::i64s("st", &[2], &[-1, -1]),
                b::i64s("en", &[2], &[i64::MIN, i64::MIN]),
                b::i64s("ax", &[2], axes),
                b::i64s("sp", &[2], steps),
            ],
        ))
    };
    let model = onnx::from_bytes(&slice(&[0, 1], &[-1, -2])).unwrap();
    let x = Tensor::from_vec((0..10).map(|v| v as f32).collect(), &[2, 5]).unwrap();
    let i = Tensor::from_vec(vec![5i64, 12, -1], &[3]).unwrap();
    let j = Tensor::from_vec(vec![3i64, 10, 2], &[3]).unwrap();
    for mode in MODES {
        let outs = with_mode(mode, || model.run(&[("x", &x), ("i", &i), ("j", &j)])).unwrap();
        // x[::-1, ::-2] = [[9, 7, 5], [4, 2, 0]].
        assert_eq!(outs[0].1.shape(), &[2, 3]);
        assert_eq!(
            outs[0].1.to_vec::<f32>().unwrap(),
            [9.0, 7.0, 5.0, 4.0, 2.0, 0.0]
        );
        // x @ x^T: rows 0..5 and 5..10.
        assert_eq!(
            outs[1].1.to_vec::<f32>().unwrap(),
            [30.0, 80.0, 80.0, 255.0]
        );
        assert_eq!(outs[2].1.to_vec::<i64>().unwrap(), [6, 6, -3]);
        assert_eq!(outs[3].1.to_vec::<i64>().unwrap(), [40, 12288, -4]);
    }
    let err = onnx::from_bytes(&slice(&[0, 1], &[1, 0]))
        .err()
        .expect("a step of 0");
    let (node, op, attr, kind) = onnx_err(&err);
    assert_eq!(
        (node, op, attr, kind),
        ("s", "Slice", "steps", ErrorKind::BadArgument),
        "{err}"
    );
    let repeated = onnx::from_bytes(&slice(&[1, -1], &[1, 1])).unwrap();
    for mode in MODES {
        let run = || repeated.run(&[("x", &x), ("i", &i), ("j", &j)]);
        let err = with_mode(mode, run).expect_err("a repeated axis");
        let want = ("s", "Slice", "axes", ErrorKind::BadArgument);
        assert_eq!(onnx_err(&err), want, "{mode:?}: {err}");
        assert!(err.to_string().contains("axis 1 is repeated"), "{err}");
    }
    // Einsum's ellipsis and diagonals: [[1, 2], [3, 4]]'s diagonal is
    // [1, 4]; an output subscript in no operand fails the run.
    let einsum = |eq: &str| {
        b::encode(&b::model(
            13,
            vec![b::node(
                "Einsum",
                "e",
                &["x"],
                &["y"],
                vec![b::string("equation", eq)],
            )],
            vec![b::value("x", b::FLOAT, &[D::N(2), D::N(2)])],
            vec![b::value("y", b::FLOAT, &[])],
            vec![],
        ))
    };
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    for eq in ["...ii->...i", "ii->i", "i...->...i"] {
        let model = onnx::from_bytes(&einsum(eq)).unwrap();
        for mode in MODES {
            let outs = with_mode(mode, || model.run(&[("x", &x)])).unwrap();
            let want: &[f32] = match eq {
                "i...->...i" => &[1.0, 3.0, 2.0, 4.0],
                _ => &[1.0, 4.0],
            };
            assert_eq!(outs[0].1.to_vec::<f32>().unwrap(), want, "{eq} {mode:?}");
        }
    }
    let model = onnx::from_bytes(&einsum("ij->k")).unwrap();
    let err = model.run(&[("x", &x)]).expect_err("a bad equation");
    assert_eq!(err.kind(), ErrorKind::BadArgument, "{err}");
    assert!(err.to_string().contains("output subscript `k`"), "{err}");
}

/// What the `onnx` fuzz target found: a hostile file makes a clear error,
/// never a panic or a hang. A Resize scale of 2^32 (tap tables built at
/// trace time, one entry per output position) is refused naming `scales`;
/// an axis on a scalar (GatherElements, the shape then indexed with it) is
/// refused naming `axis`; an Einsum over bools (the sums refuse the dtype,
/// whose error tensor then met the subscript arithmetic) is an error
/// naming bool.
#[test]
fn hostile_sizes_axes_and_dtypes_are_errors_not_panics() {
    let resize = b::encode(&b::model(
        18,
        vec![b::node(
            "Resize",
            "up",
            &["x", "", "scales"],
            &["y"],
            vec![],
        )],
        vec![b::value(
            "x",
            b::FLOAT,
            &[D::N(1), D::N(2), D::N(5), D::N(5)],
        )],
        vec![b::value("y", b::FLOAT, &[])],
        vec![b::f32s("scales", &[4], &[1.0, 4294967296.0, 2.0, 1.5])],
    ));
    let gather = b::encode(&b::model(
        13,
        vec![b::node("GatherElements", "g", &["x", "i"], &["y"], vec![])],
        vec![b::value("x", b::FLOAT, &[])],
        vec![b::value("y", b::FLOAT, &[])],
        vec![b::i64s("i", &[], &[0])],
    ));
    let x4 = Tensor::ones(&[1, 2, 5, 5], DType::F32);
    let scalar = Tensor::ones(&[], DType::F32);
    for mode in MODES {
        for (bytes, x, attr) in [(&resize, &x4, "scales"), (&gather, &scalar, "axis")] {
            let m = onnx::from_bytes(bytes).unwrap();
            let e = with_mode(mode, || m.run(&[("x", x)])).unwrap_err();
            let (_, _, a, k) = onnx_err(&e);
            assert_eq!((a, k), (attr, ErrorKind::BadArgument), "{mode:?}: {e}");
        }
    }
    let t = Tensor::from_vec(vec![true, false, true, true], &[2, 2]).unwrap();
    for eq in ["ij,kj->ik", "ij,kj->k", "ij,jk"] {
        let e = Tensor::einsum(eq, &[&t, &t]).to_vec::<bool>().unwrap_err();
        assert!(e.to_string().contains("bool"), "{eq}: {e}");
        assert!(
            matches!(e.kind(), ErrorKind::DType | ErrorKind::Shape),
            "{eq}: {e}"
        );
    }
}

/// More of what the `onnx` fuzz target found (seeds 43 and 47): a Reshape
/// with a -1 beside dims whose product overflows was a multiply overflow
/// while tracing, now a shape error naming `shape`; a HannWindow of 2^40
/// samples, and an EyeLike of 2^40 elements, aborted the process in an
/// infallible allocation of their trace-time constants, now an
/// out-of-memory error (E5).
#[test]
fn overflowing_reshapes_and_huge_windows_are_errors() {
    let reshape = b::encode(&b::model(
        14,
        vec![b::node("Reshape", "rs", &["x", "shape"], &["y"], vec![])],
        vec![b::value("x", b::FLOAT, &[D::N(2), D::N(6)])],
        vec![b::value("y", b::FLOAT, &[])],
        vec![b::i64s("shape", &[3], &[-1, 1 << 40, 1 << 40])],
    ));
    let window = b::encode(&b::model(
        17,
        vec![b::node("HannWindow", "hann", &["n"], &["y"], vec![])],
        vec![b::value("x", b::FLOAT, &[D::N(2), D::N(6)])],
        vec![b::value("y", b::FLOAT, &[])],
        vec![b::i64s("n", &[], &[1 << 40])],
    ));
    // EyeLike of an expanded [2^20, 2^20]: its constant of 2^40 values.
    let eye = b::encode(&b::model(
        17,
        vec![
            b::node("Expand", "big", &["x1", "shape"], &["e"], vec![]),
            b::node("EyeLike", "eye", &["e"], &["y"], vec![]),
        ],
        vec![b::value("x", b::FLOAT, &[D::N(2), D::N(6)])],
        vec![b::value("y", b::FLOAT, &[])],
        vec![
            b::f32s("x1", &[1, 1], &[1.0]),
            b::i64s("shape", &[2], &[1 << 20, 1 << 20]),
        ],
    ));
    let x = Tensor::ones(&[2, 6], DType::F32);
    for mode in MODES {
        let m = onnx::from_bytes(&eye).unwrap();
        let e = with_mode(mode, || m.run(&[("x", &x)])).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Device, "{mode:?}: {e}");
        let m = onnx::from_bytes(&reshape).unwrap();
        let e = with_mode(mode, || m.run(&[("x", &x)])).unwrap_err();
        assert_eq!(
            onnx_err(&e),
            ("rs", "Reshape", "shape", ErrorKind::Shape),
            "{mode:?}: {e}"
        );
        let m = onnx::from_bytes(&window).unwrap();
        let e = with_mode(mode, || m.run(&[("x", &x)])).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Device, "{mode:?}: {e}");
        assert!(e.to_string().contains("memory"), "{mode:?}: {e}");
    }
}

/// A path that is no regular file (a device that never ends) is refused
/// before a byte is read, by every loader (a review found they read with
/// no bound: `/dev/zero` grew memory until the process died).
#[cfg(target_os = "linux")]
#[test]
fn special_files_are_refused_by_every_loader() {
    let dev = std::path::Path::new("/dev/zero");
    let says = |e: tilejit::Error| {
        assert!(e.to_string().contains("not a regular file"), "{e}");
    };
    says(onnx::load(dev).err().expect("onnx::load"));
    says(tilejit::io::read_npy(dev).expect_err("read_npy"));
    says(tilejit::io::load_safetensors(dev).expect_err("load_safetensors"));
    says(tilejit::onnx::read_tensor_file(dev).expect_err("read_tensor_file"));
}

/// Trace-time tables sized by numbers in the file (a DFT's matrices,
/// MelWeightMatrix, RoiAlign's sample steps, AffineGrid's points,
/// Col2Im's pixel index, Resize's taps) are
/// bounded and their sizes checked: a size of 2^40, or one whose product
/// overflows, is an error naming the node, never an abort or a panic.
#[test]
fn huge_trace_time_tables_are_errors() {
    let big = 1i64 << 20;
    let x = Tensor::ones(&[1, 1, 4, 4], DType::F32);
    let xin = || {
        vec![b::value(
            "x",
            b::FLOAT,
            &[D::N(1), D::N(1), D::N(4), D::N(4)],
        )]
    };
    let out = || vec![b::value("y", b::FLOAT, &[])];
    let roi_align = |oh: i64, ow: i64, ratio: i64| {
        b::encode(&b::model(
            16,
            vec![b::node(
                "RoiAlign",
                "ra",
                &["x", "rois", "bi"],
                &["y"],
                vec![
                    b::int("output_height", oh),
                    b::int("output_width", ow),
                    b::int("sampling_ratio", ratio),
                ],
            )],
            xin(),
            out(),
            vec![
                b::f32s("rois", &[1, 4], &[0.0, 0.0, 3.0, 3.0]),
                b::i64s("bi", &[1], &[0]),
            ],
        ))
    };
    let affine_grid = |side: i64| {
        b::encode(&b::model(
            20,
            vec![
                b::node("AffineGrid", "ag", &["theta", "size"], &["g"], vec![]),
                b::node("Add", "add", &["x", "g"], &["y"], vec![]),
            ],
            xin(),
            out(),
            vec![
                b::f32s("theta", &[1, 2, 3], &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0]),
                b::i64s("size", &[4], &[1, 1, side, side]),
            ],
        ))
    };
    // One 1x1 block strided over the whole image: a [1, 1, 1] input.
    let col2im = |side: i64, pad: i64| {
        b::encode(&b::model(
            18,
            vec![
                b::node(
                    "Col2Im",
                    "ci",
                    &["c", "img", "blk"],
                    &["z"],
                    vec![
                        b::ints("strides", &[side, side]),
                        b::ints("pads", &[pad, pad, pad, pad]),
                    ],
                ),
                b::node("Add", "add", &["x", "z"], &["y"], vec![]),
            ],
            xin(),
            out(),
            vec![
                b::f32s("c", &[1, 1, 1], &[1.0]),
                b::i64s("img", &[2], &[side, side]),
                b::i64s("blk", &[2], &[1, 1]),
            ],
        ))
    };
    let resize = b::encode(&b::model(
        13,
        vec![b::node(
            "Resize",
            "rz",
            &["x", "", "", "sizes"],
            &["y"],
            vec![],
        )],
        xin(),
        out(),
        vec![b::i64s("sizes", &[4], &[1, 1, big * big, 4])],
    ));
    // A DFT's cos and sin matrices are dft_length squared.
    let dft = b::encode(&b::model(
        20,
        vec![b::node("DFT", "dft", &["sig", "len"], &["y"], vec![])],
        xin(),
        out(),
        vec![
            b::f32s("sig", &[1, 4, 1], &[1.0, 2.0, 3.0, 4.0]),
            b::i64s("len", &[], &[big]),
        ],
    ));
    let mel = b::encode(&b::model(
        17,
        vec![b::node(
            "MelWeightMatrix",
            "mel",
            &["bins", "dft_len", "rate", "lo", "hi"],
            &["y"],
            vec![],
        )],
        xin(),
        out(),
        vec![
            b::i64s("bins", &[], &[big * big]),
            b::i64s("dft_len", &[], &[1024]),
            b::i64s("rate", &[], &[16000]),
            b::f32s("lo", &[], &[0.0]),
            b::f32s("hi", &[], &[8000.0]),
        ],
    ));
    // A window of 2^64 taps, inside padding as large.
    let pool = b::encode(&b::model(
        18,
        vec![b::node(
            "MaxPool",
            "mp",
            &["x"],
            &["y"],
            vec![
                b::ints("kernel_shape", &[1 << 32, 1 << 32]),
                b::ints("pads", &[1 << 32, 1 << 32, 1 << 32, 1 << 32]),
            ],
        )],
        xin(),
        out(),
        vec![],
    ));
    let cases: Vec<(&str, &str, Vec<u8>)> = vec![
        ("mp", "MaxPool", pool),
        ("dft", "DFT", dft),
        ("mel", "MelWeightMatrix", mel),
        ("ra", "RoiAlign", roi_align(big * big, 2, 2)),
        ("ra", "RoiAlign", roi_align(1 << 40, 1 << 40, 1 << 30)),
        ("ag", "AffineGrid", affine_grid(big)),
        ("ag", "AffineGrid", affine_grid(1 << 40)),
        ("ci", "Col2Im", col2im(big, 0)),
        ("ci", "Col2Im", col2im(1 << 32, 0)),
        // Pads near i64::MAX: the padded extent is past a usize.
        ("ci", "Col2Im", col2im(4, i64::MAX - 1)),
        ("rz", "Resize", resize),
    ];
    for mode in MODES {
        for (node, op, bytes) in &cases {
            let m = onnx::from_bytes(bytes).expect(op);
            let e = with_mode(mode, || m.run(&[("x", &x)])).expect_err(op);
            let (got_node, got_op, _, _) = onnx_err(&e);
            assert_eq!((got_node, got_op), (*node, *op), "{mode:?}: {e}");
        }
    }
}
