//! `tilejit::onnx` sequences and optionals (`table/sequence.rs`): graph
//! inputs and outputs of those kinds through `run_values`, the sequence
//! ops, and their bad inputs, on Host, Sim and Verify. Expected values are
//! rearrangements of the inputs `vals(n, seed)`, checked by hand.

use super::onnx::{close, onnx_err, vals, MODES};
use tilejit::onnx::{self, Value};
use tilejit::{with_mode, ErrorKind, Tensor};
use tilejit_testkit::onnx::{self as b, D};

use b::proto::{type_proto, TypeProto, ValueInfoProto};
use b::protobuf::MessageField;

/// A declared sequence (`optional` false) or optional (true) of f32
/// tensors of any shape.
fn wrapped(name: &str, optional: bool, of_seq: bool) -> ValueInfoProto {
    let mut t = b::value(name, b::FLOAT, &[]).type_.unwrap();
    if let Some(type_proto::Value::TensorType(tt)) = t.value.as_mut() {
        tt.shape = MessageField::none(); // any shape
    }
    let seq = |elem: TypeProto| TypeProto {
        value: Some(type_proto::Value::SequenceType(type_proto::Sequence {
            elem_type: MessageField::some(elem),
            ..Default::default()
        })),
        ..Default::default()
    };
    let inner = if of_seq { seq(t) } else { t };
    let ty = match optional {
        true => TypeProto {
            value: Some(type_proto::Value::OptionalType(type_proto::Optional {
                elem_type: MessageField::some(inner),
                ..Default::default()
            })),
            ..Default::default()
        },
        false => inner,
    };
    ValueInfoProto {
        name: name.into(),
        type_: MessageField::some(ty),
        ..Default::default()
    }
}

fn seq_value(name: &str) -> ValueInfoProto {
    wrapped(name, false, true)
}

fn load(
    nodes: Vec<b::proto::NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    inits: Vec<b::proto::TensorProto>,
) -> tilejit::Result<onnx::OnnxModel> {
    onnx::from_bytes(&b::encode(&b::model(17, nodes, inputs, outputs, inits)))
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// SplitToSequence, SequenceErase, SequenceAt, SequenceLength and
/// ConcatFromSequence, with a sequence output.
#[test]
fn split_erase_at_length_concat() {
    let m = load(
        vec![
            b::node(
                "SplitToSequence",
                "split",
                &["x"],
                &["s"],
                vec![b::int("axis", 1), b::int("keepdims", 0)],
            ),
            b::node("SequenceErase", "erase", &["s", "zero"], &["s2"], vec![]),
            b::node("SequenceAt", "at", &["s2", "minus1"], &["t"], vec![]),
            b::node("SequenceLength", "len", &["s2"], &["n"], vec![]),
            b::node(
                "ConcatFromSequence",
                "stack",
                &["s2"],
                &["y"],
                vec![b::int("axis", 0), b::int("new_axis", 1)],
            ),
        ],
        vec![b::value("x", b::FLOAT, &[D::N(2), D::N(3)])],
        vec![
            b::value("t", b::FLOAT, &[]),
            b::value("n", b::INT64, &[]),
            b::value("y", b::FLOAT, &[]),
            seq_value("s2"),
        ],
        vec![b::i64s("zero", &[], &[0]), b::i64s("minus1", &[], &[-1])],
    )
    .unwrap();
    let xv = vals(6, 0.0);
    let x = Tensor::from_vec(xv.clone(), &[2, 3]).unwrap();
    // x is [[x0 x1 x2] [x3 x4 x5]]: columns [x0 x3], [x1 x4], [x2 x5];
    // erasing the first leaves columns 1 and 2.
    let col = |k: usize| vec![xv[k] as f64, xv[3 + k] as f64];
    for mode in MODES {
        let outs = with_mode(mode, || m.run_values(&[("x", &Value::Tensor(x.clone()))])).unwrap();
        let t = outs[0].1.as_tensor().unwrap();
        assert_eq!(t.shape(), &[2], "{mode:?}");
        close(&f32s(t), &col(2));
        let n = outs[1].1.as_tensor().unwrap();
        assert_eq!(n.to_vec::<i64>().unwrap(), vec![2]);
        let y = outs[2].1.as_tensor().unwrap();
        assert_eq!(y.shape(), &[2, 2]);
        close(&f32s(y), &[col(1), col(2)].concat());
        let s = outs[3].1.as_sequence().unwrap();
        assert_eq!(s.len(), 2);
        close(&f32s(&s[0]), &col(1));
        close(&f32s(&s[1]), &col(2));
    }
    // A model with a sequence output runs only through `run_values`.
    let e = m.run(&[("x", &x)]).unwrap_err();
    assert_eq!(onnx_err(&e).3, ErrorKind::BadArgument);
}

/// A sequence input of any length (each length one trace), SequenceMap
/// squaring each element, SequenceInsert at the front.
#[test]
fn sequence_inputs_map_and_insert() {
    let body = b::graph(
        "body",
        vec![b::node("Mul", "sq", &["e", "e"], &["o"], vec![])],
        vec![b::value("e", b::FLOAT, &[])],
        vec![b::value("o", b::FLOAT, &[])],
    );
    let m = load(
        vec![
            b::node("SequenceMap", "map", &["xs"], &["sq"], vec![body]),
            b::node(
                "SequenceInsert",
                "ins",
                &["sq", "h", "zero"],
                &["ys"],
                vec![],
            ),
        ],
        vec![seq_value("xs"), b::value("h", b::FLOAT, &[D::N(1)])],
        vec![seq_value("ys")],
        vec![b::i64s("zero", &[], &[0])],
    )
    .unwrap();
    let h = Tensor::from_vec(vec![7.0f32], &[1]).unwrap();
    for len in [2usize, 3] {
        let xs: Vec<Tensor> = (0..len)
            .map(|k| Tensor::from_vec(vals(k + 1, k as f64), &[k + 1]).unwrap())
            .collect();
        for mode in MODES {
            let xs = Value::Sequence(xs.clone());
            let h = Value::Tensor(h.clone());
            let outs = with_mode(mode, || m.run_values(&[("xs", &xs), ("h", &h)])).unwrap();
            let ys = outs[0].1.as_sequence().unwrap();
            assert_eq!(ys.len(), len + 1, "{mode:?}");
            close(&f32s(&ys[0]), &[7.0]);
            for k in 0..len {
                let want: Vec<f64> = vals(k + 1, k as f64)
                    .iter()
                    .map(|&v| v as f64 * v as f64)
                    .collect();
                close(&f32s(&ys[k + 1]), &want);
            }
        }
    }
    assert_eq!(m.function().handlers().len(), 2);
}

/// SequenceMap traces its body once per element: a sequence of one more
/// than the 2^16 steps the importer unrolls is an E4 naming the node, on
/// every mode, before the body is traced.
#[test]
fn sequence_map_past_the_unrolling_limit_is_unsupported() {
    let body = b::graph(
        "body",
        vec![b::node("Neg", "neg", &["e"], &["o"], vec![])],
        vec![b::value("e", b::FLOAT, &[])],
        vec![b::value("o", b::FLOAT, &[])],
    );
    let node = b::node("SequenceMap", "map", &["xs"], &["ys"], vec![body]);
    let m = load(
        vec![node],
        vec![seq_value("xs")],
        vec![seq_value("ys")],
        vec![],
    )
    .unwrap();
    let one = Tensor::from_vec(vec![1.0f32], &[1]).unwrap();
    let xs = Value::Sequence(vec![one; (1 << 16) + 1]);
    for mode in MODES {
        let e = with_mode(mode, || m.run_values(&[("xs", &xs)])).expect_err("past the limit");
        let want = (
            "map",
            "SequenceMap",
            "input_sequence",
            ErrorKind::Unsupported,
        );
        assert_eq!(onnx_err(&e), want, "{mode:?}");
    }
}

/// An optional input: OptionalHasElement on a value and on an empty one,
/// Optional wrapping and OptionalGetElement unwrapping.
#[test]
fn optionals_have_and_get_elements() {
    let m = load(
        vec![
            b::node("OptionalHasElement", "has", &["o"], &["h"], vec![]),
            b::node("Optional", "wrap", &["x"], &["w"], vec![]),
            b::node("OptionalGetElement", "get", &["w"], &["y"], vec![]),
        ],
        vec![
            wrapped("o", true, false),
            b::value("x", b::FLOAT, &[D::N(3)]),
        ],
        vec![
            b::value("h", 9, &[]),
            b::value("y", b::FLOAT, &[]),
            wrapped("w", true, false),
        ],
        vec![],
    )
    .unwrap();
    let xv = vals(3, 1.0);
    let x = Value::Tensor(Tensor::from_vec(xv.clone(), &[3]).unwrap());
    let want: Vec<f64> = xv.iter().map(|&v| v as f64).collect();
    for mode in MODES {
        for (o, has) in [(Value::None, false), (x.clone(), true)] {
            let outs = with_mode(mode, || m.run_values(&[("o", &o), ("x", &x)])).unwrap();
            let h = outs[0].1.as_tensor().unwrap();
            assert_eq!(h.to_vec::<bool>().unwrap(), vec![has], "{mode:?}");
            close(&f32s(outs[1].1.as_tensor().unwrap()), &want);
            close(&f32s(outs[2].1.as_tensor().unwrap()), &want);
        }
    }
    // A sequence where an optional tensor is declared.
    let e = m
        .run_values(&[("o", &Value::Sequence(vec![])), ("x", &x)])
        .unwrap_err();
    assert_eq!(onnx_err(&e), ("", "", "o", ErrorKind::BadArgument));
}

/// Out-of-range positions, empty optionals and sequences fed to tensor
/// ops are errors naming the node; unknown attributes fail at load.
#[test]
fn bad_sequence_values_are_errors_naming_the_node() {
    let x = Value::Tensor(Tensor::from_vec(vals(4, 0.0), &[4]).unwrap());
    let at = |pos: i64| {
        load(
            vec![
                b::node("SequenceConstruct", "mk", &["x", "x"], &["s"], vec![]),
                b::node("SequenceAt", "at", &["s", "p"], &["y"], vec![]),
            ],
            vec![b::value("x", b::FLOAT, &[D::N(4)])],
            vec![b::value("y", b::FLOAT, &[])],
            vec![b::i64s("p", &[], &[pos])],
        )
        .unwrap()
    };
    for pos in [-2, 1] {
        assert!(at(pos).run_values(&[("x", &x)]).is_ok());
    }
    for pos in [2, -3] {
        let e = at(pos).run_values(&[("x", &x)]).unwrap_err();
        assert_eq!(
            onnx_err(&e),
            ("at", "SequenceAt", "position", ErrorKind::BadArgument)
        );
    }
    // An empty optional unwrapped.
    let m = load(
        vec![b::node("OptionalGetElement", "get", &["o"], &["y"], vec![])],
        vec![wrapped("o", true, false)],
        vec![b::value("y", b::FLOAT, &[])],
        vec![],
    )
    .unwrap();
    let e = m.run_values(&[("o", &Value::None)]).unwrap_err();
    assert_eq!(
        onnx_err(&e),
        ("get", "OptionalGetElement", "input", ErrorKind::BadArgument)
    );
    // A sequence where a tensor op wants a tensor.
    let m = load(
        vec![b::node("Relu", "relu", &["xs"], &["y"], vec![])],
        vec![seq_value("xs")],
        vec![b::value("y", b::FLOAT, &[])],
        vec![],
    )
    .unwrap();
    let e = m
        .run_values(&[("xs", &Value::Sequence(vec![]))])
        .unwrap_err();
    assert_eq!(onnx_err(&e), ("relu", "Relu", "xs", ErrorKind::BadArgument));
    // A tensor where a sequence input is declared.
    let e = m.run_values(&[("xs", &x)]).unwrap_err();
    assert_eq!(onnx_err(&e), ("", "", "xs", ErrorKind::BadArgument));
    // SplitToSequence lengths whose sum overflows i64 (a fuzz finding:
    // the sum panicked), and lengths that miss the axis.
    for lens in [vec![i64::MAX, 1, 1], vec![1, 1], vec![2, -1, 3]] {
        let m = load(
            vec![b::node(
                "SplitToSequence",
                "split",
                &["x", "l"],
                &["s"],
                vec![],
            )],
            vec![b::value("x", b::FLOAT, &[D::N(4)])],
            vec![seq_value("s")],
            vec![b::i64s("l", &[lens.len() as i64], &lens)],
        )
        .unwrap();
        for mode in MODES {
            let e = with_mode(mode, || m.run_values(&[("x", &x)])).unwrap_err();
            assert_eq!(
                onnx_err(&e),
                ("split", "SplitToSequence", "split", ErrorKind::BadArgument),
                "{lens:?} on {mode:?}"
            );
        }
    }
    // One piece per element of an axis past the unrolling limit, with no
    // `split` and with a split length of 1.
    let over = (1usize << 16) + 1;
    let long = Value::Tensor(Tensor::zeros(&[over], tilejit::DType::F32));
    for (ins, inits) in [
        (vec!["x"], vec![]),
        (vec!["x", "l"], vec![b::i64s("l", &[], &[1])]),
    ] {
        let m = load(
            vec![b::node("SplitToSequence", "split", &ins, &["s"], vec![])],
            vec![b::value("x", b::FLOAT, &[D::N(over as i64)])],
            vec![seq_value("s")],
            inits,
        )
        .expect("loads");
        let e = m
            .run_values(&[("x", &long)])
            .expect_err("over the unrolling limit");
        let attr = if ins.len() == 1 { "axis" } else { "split" };
        assert_eq!(
            onnx_err(&e),
            ("split", "SplitToSequence", attr, ErrorKind::Unsupported),
            "{e}"
        );
    }
    // An attribute SequenceAt does not have.
    let e = load(
        vec![b::node(
            "SequenceAt",
            "at",
            &["xs", "p"],
            &["y"],
            vec![b::int("axis", 0)],
        )],
        vec![seq_value("xs")],
        vec![b::value("y", b::FLOAT, &[])],
        vec![b::i64s("p", &[], &[0])],
    )
    .err()
    .expect("load must fail");
    assert_eq!(
        onnx_err(&e),
        ("at", "SequenceAt", "axis", ErrorKind::Unsupported)
    );
}

/// x = [[0 1] [2 3] [4 5]] (time, batch), lengths [3 1]: batch 0 reversed
/// whole ([0 2 4] -> [4 2 0]), batch 1 left alone (its length is 1).
#[test]
fn reverse_sequence_by_hand() {
    let m = load(
        vec![b::node(
            "ReverseSequence",
            "rev",
            &["x", "lens"],
            &["y"],
            vec![b::int("time_axis", 0), b::int("batch_axis", 1)],
        )],
        vec![
            b::value("x", b::FLOAT, &[D::N(3), D::N(2)]),
            b::value("lens", b::INT64, &[D::S("b")]),
        ],
        vec![b::value("y", b::FLOAT, &[])],
        vec![],
    )
    .unwrap();
    let x = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0], &[3, 2]).unwrap();
    let lens = Tensor::from_vec(vec![3i64, 1], &[2]).unwrap();
    for mode in MODES {
        let outs = with_mode(mode, || m.run(&[("x", &x), ("lens", &lens)])).unwrap();
        close(&f32s(&outs[0].1), &[4.0, 1.0, 2.0, 3.0, 0.0, 5.0]);
    }
    let bad = Tensor::from_vec(vec![3i64, 1, 1], &[3]).unwrap();
    let e = m.run(&[("x", &x), ("lens", &bad)]).unwrap_err();
    assert_eq!(
        onnx_err(&e),
        ("rev", "ReverseSequence", "sequence_lens", ErrorKind::Shape)
    );
}
