//! `tilejit::onnx` graph breaks: a NonZero over traced data, and a bound
//! computed from data, cut the graph into pieces run one after another
//! (`segments.rs`). Values are hand-checked; every mode runs.

use super::onnx::{onnx_err, MODES};
use tilejit::onnx::{self, OnnxModel};
use tilejit::{with_mode, ErrorKind, RunMode, Tensor};
use tilejit_testkit::onnx::{self as b, D};

/// `x` [100, 100] with positives at `hits` and -1 elsewhere.
fn sparse(hits: &[(usize, usize)]) -> Tensor {
    let mut v = vec![-1.0f32; 100 * 100];
    for &(r, c) in hits {
        v[r * 100 + c] = 0.5;
    }
    Tensor::from_vec(v, &[100, 100]).unwrap()
}

/// `y = 2 * float(transpose(NonZero(Relu(x))))`: traced work on both sides
/// of the NonZero.
fn non_zero_model() -> OnnxModel {
    let bytes = b::encode(&b::model(
        13,
        vec![
            b::node("Relu", "relu", &["x"], &["h"], vec![]),
            b::node("NonZero", "nz", &["h"], &["idx"], vec![]),
            b::node("Transpose", "tr", &["idx"], &["t"], vec![]),
            b::node("Cast", "cast", &["t"], &["tf"], vec![b::int("to", 1)]),
            b::node("Mul", "mul", &["tf", "two"], &["y"], vec![]),
        ],
        vec![b::value("x", b::FLOAT, &[D::N(100), D::N(100)])],
        vec![b::value("y", b::FLOAT, &[D::S("k"), D::N(2)])],
        vec![b::f32s("two", &[], &[2.0])],
    ));
    onnx::from_bytes(&bytes).unwrap()
}

fn run(model: &OnnxModel, inputs: &[&Tensor], mode: RunMode) -> Vec<Tensor> {
    with_mode(mode, || model.run_positional(inputs))
        .unwrap()
        .into_iter()
        .map(|(_, t)| t)
        .collect()
}

#[test]
fn non_zero_of_traced_data_runs_in_two_phases() {
    let model = non_zero_model();
    // x stays traced: no value of it keys a program.
    assert!(model.static_inputs().is_empty());
    assert_eq!(model.functions().len(), 2);
    assert_eq!(model.cuts(), [("nz".into(), "NonZero".into(), true)]);
    for mode in MODES {
        let y = &run(&model, &[&sparse(&[(3, 7), (50, 0), (99, 99)])], mode)[0];
        assert_eq!(y.shape(), &[3, 2], "{mode:?}");
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            [6.0, 14.0, 100.0, 0.0, 198.0, 198.0]
        );
        // Four hits: a new count, the same x shape.
        let y = &run(&model, &[&sparse(&[(0, 0), (0, 1), (1, 0), (2, 2)])], mode)[0];
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            [0.0, 0.0, 0.0, 2.0, 2.0, 0.0, 4.0, 4.0]
        );
        // No hits at all: an empty result, not an error.
        let y = &run(&model, &[&sparse(&[])], mode)[0];
        assert_eq!(y.shape(), &[0, 2]);
    }
}

#[test]
fn a_new_count_retraces_only_the_phase_after_it() {
    let model = non_zero_model();
    let [first, second] = model.functions() else {
        panic!("expected two phases")
    };
    let traces = |f: &tilejit::JitFn<'static, Vec<Tensor>>| f.stats().traces;
    run(&model, &[&sparse(&[(1, 1), (2, 2), (3, 3)])], RunMode::Host);
    assert_eq!((traces(first), traces(second)), (1, 1));
    // Other values, the same count: both phases hit their caches.
    run(&model, &[&sparse(&[(5, 1), (6, 2), (7, 3)])], RunMode::Host);
    assert_eq!((traces(first), traces(second)), (1, 1));
    // A new count: only the second phase traces again.
    run(&model, &[&sparse(&[(5, 1)])], RunMode::Host);
    assert_eq!((traces(first), traces(second)), (1, 2));
}

#[test]
fn a_bound_computed_from_data_is_value_keyed_in_the_next_phase() {
    // r = Range(0, max(NonZero(Relu(x))) + 1, 1): Range's limit is data,
    // so the graph is cut before Range as well as at NonZero.
    let bytes = b::encode(&b::model(
        13,
        vec![
            b::node("Relu", "relu", &["x"], &["h"], vec![]),
            b::node("NonZero", "nz", &["h"], &["idx"], vec![]),
            b::node(
                "ReduceMax",
                "max",
                &["idx"],
                &["m"],
                vec![b::int("keepdims", 0)],
            ),
            b::node("Add", "add", &["m", "one"], &["lim"], vec![]),
            b::node("Range", "range", &["zero", "lim", "one"], &["r"], vec![]),
        ],
        vec![b::value("x", b::FLOAT, &[D::N(4), D::N(5)])],
        vec![
            b::value("r", b::INT64, &[D::S("n")]),
            b::value("idx", b::INT64, &[D::N(2), D::S("k")]),
        ],
        vec![b::i64s("zero", &[], &[0]), b::i64s("one", &[], &[1])],
    ));
    let model = onnx::from_bytes(&bytes).unwrap();
    assert_eq!(model.functions().len(), 3);
    let cuts: Vec<(String, String, bool)> = vec![
        ("nz".into(), "NonZero".into(), true),
        ("range".into(), "Range".into(), false),
    ];
    assert_eq!(model.cuts(), cuts);
    let mut x = vec![-1.0f32; 20];
    x[5 + 3] = 1.0; // (1, 3)
    x[2 * 5] = 2.0; // (2, 0)
    let x = Tensor::from_vec(x, &[4, 5]).unwrap();
    for mode in MODES {
        let outs = run(&model, &[&x], mode);
        assert_eq!(outs[0].to_vec::<i64>().unwrap(), [0, 1, 2, 3], "{mode:?}");
        assert_eq!(outs[1].to_vec::<i64>().unwrap(), [1, 2, 3, 0]);
    }
}

#[test]
fn a_phase_input_of_the_wrong_dtype_is_still_refused_up_front() {
    let model = non_zero_model();
    let x = Tensor::from_vec(vec![1i64; 100 * 100], &[100, 100]).unwrap();
    let e = model.run_positional(&[&x]).err().unwrap();
    assert_eq!(onnx_err(&e).2, "x");
    assert_eq!(onnx_err(&e).3, ErrorKind::DType);
}

/// NonMaxSuppression over boxes computed in the trace (`boxes + shift`),
/// so it runs eagerly at a cut.
fn nms_model() -> OnnxModel {
    let bytes = b::encode(&b::model(
        13,
        vec![
            b::node("Add", "shift", &["boxes_in", "zero"], &["boxes"], vec![]),
            b::node(
                "NonMaxSuppression",
                "nms",
                &["boxes", "scores", "max", "iou", "min_score"],
                &["sel"],
                vec![],
            ),
        ],
        vec![
            // Symbolic, so a misshapen input reaches the node's own check.
            b::value("boxes_in", b::FLOAT, &[D::S("b"), D::S("n"), D::S("four")]),
            b::value("scores", b::FLOAT, &[D::S("b"), D::S("c"), D::S("n")]),
        ],
        vec![b::value("sel", b::INT64, &[D::S("k"), D::N(3)])],
        vec![
            b::f32s("zero", &[], &[0.0]),
            b::i64s("max", &[1], &[3]),
            b::f32s("iou", &[1], &[0.5]),
            b::f32s("min_score", &[1], &[0.0]),
        ],
    ));
    onnx::from_bytes(&bytes).unwrap()
}

#[test]
fn non_max_suppression_runs_at_a_cut() {
    // ONNX's own suppress-by-IoU example: boxes 0-2 overlap (0.9 wins
    // over 0.75 and 0.6), 3-4 overlap (0.95 wins), 5 stands alone; three
    // at most: boxes 3, 0, 5.
    let model = nms_model();
    assert_eq!(model.functions().len(), 1);
    let boxes: Vec<f32> = vec![
        0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, -0.1, 1.0, 0.9, 0.0, 10.0, 1.0, 11.0, 0.0,
        10.1, 1.0, 11.1, 0.0, 100.0, 1.0, 101.0,
    ];
    let boxes = Tensor::from_vec(boxes, &[1, 6, 4]).unwrap();
    let scores = Tensor::from_vec(vec![0.9f32, 0.75, 0.6, 0.95, 0.5, 0.3], &[1, 1, 6]).unwrap();
    for mode in MODES {
        let sel = &run(&model, &[&boxes, &scores], mode)[0];
        assert_eq!(sel.shape(), &[3, 3], "{mode:?}");
        assert_eq!(sel.to_vec::<i64>().unwrap(), [0, 0, 3, 0, 0, 0, 0, 0, 5]);
    }
}

#[test]
fn non_max_suppression_of_misshapen_boxes_names_the_node() {
    let model = nms_model();
    let boxes = Tensor::from_vec(vec![0.0f32; 6 * 3], &[1, 6, 3]).unwrap();
    let scores = Tensor::from_vec(vec![0.5f32; 6], &[1, 1, 6]).unwrap();
    let e = model.run_positional(&[&boxes, &scores]).err().unwrap();
    assert_eq!(
        onnx_err(&e),
        ("nms", "NonMaxSuppression", "boxes", ErrorKind::Shape),
        "{e}"
    );
}

#[test]
fn non_max_suppression_of_no_boxes_skips_its_empty_classes() {
    // No boxes in 2^29 batches of 2^29 classes: nothing is picked. The
    // loop over batches and classes ran 2^58 empty rounds before.
    let model = nms_model();
    let huge = 1usize << 29;
    let boxes = Tensor::zeros(&[huge, 0, 4], tilejit::DType::F32);
    let scores = Tensor::zeros(&[huge, huge, 0], tilejit::DType::F32);
    let sel = model
        .run_positional(&[&boxes, &scores])
        .expect("no boxes, no picks")
        .remove(0)
        .1;
    assert_eq!(sel.shape(), [0, 3]);
}

#[test]
fn a_dynamic_model_traces_once_per_shape_class() {
    // y = relu(x @ w + bias), w all 0.5: row i of x = i + 1 everywhere
    // gives (i + 1) * 2 + bias, hand-checked.
    let bytes = b::encode(&b::model(
        13,
        vec![
            b::node("MatMul", "mm", &["x", "w"], &["h"], vec![]),
            b::node("Add", "add", &["h", "bias"], &["h2"], vec![]),
            b::node("Relu", "relu", &["h2"], &["y"], vec![]),
        ],
        vec![b::value("x", b::FLOAT, &[D::S("batch"), D::N(4)])],
        vec![b::value("y", b::FLOAT, &[D::S("batch"), D::N(3)])],
        vec![
            b::f32s("w", &[4, 3], &[0.5; 12]),
            b::f32s("bias", &[3], &[1.0, -3.0, 0.0]),
        ],
    ));
    let options = onnx::LoadOptions {
        dynamic: true,
        ..Default::default()
    };
    let x = |n: usize| {
        let v: Vec<f32> = (0..n * 4).map(|i| (i / 4 + 1) as f32).collect();
        Tensor::from_vec(v, &[n, 4]).unwrap()
    };
    let want = |n: usize| -> Vec<f32> {
        (0..n)
            .flat_map(|i| {
                let s = (i + 1) as f32 * 2.0;
                [s + 1.0, (s - 3.0).max(0.0), s]
            })
            .collect()
    };
    for mode in MODES {
        let model = onnx::from_bytes_with(&bytes, options).unwrap();
        for n in [2usize, 3, 5, 7] {
            let y = &run(&model, &[&x(n)], mode)[0];
            assert_eq!(y.shape(), &[n, 3], "{mode:?}");
            assert_eq!(y.to_vec::<f32>().unwrap(), want(n), "{mode:?} n={n}");
        }
        if mode == RunMode::Host {
            // The first size exactly, then one class traced at two
            // stand-in sizes; 5 and 7 instantiate it without tracing.
            let f = model.function();
            assert_eq!((f.stats().traces, f.stats().builds), (3, 4));
            assert_eq!(f.shape_classes().len(), 1);
            assert!(f.shape_classes()[0].1.is_ok());
        }
    }
}

/// `Unique(Relu(x))`, all four outputs, over traced data: a cut.
fn unique_model(sorted: i64, axis: Option<i64>, dims: &[D]) -> OnnxModel {
    let mut attrs = vec![b::int("sorted", sorted)];
    if let Some(a) = axis {
        attrs.push(b::int("axis", a));
    }
    let bytes = b::encode(&b::model(
        13,
        vec![
            b::node("Relu", "relu", &["x"], &["h"], vec![]),
            b::node("Unique", "u", &["h"], &["y", "i", "inv", "c"], attrs),
        ],
        vec![b::value("x", b::FLOAT, dims)],
        vec![
            b::value("y", b::FLOAT, &[]),
            b::value("i", b::INT64, &[]),
            b::value("inv", b::INT64, &[]),
            b::value("c", b::INT64, &[]),
        ],
        vec![],
    ));
    onnx::from_bytes(&bytes).unwrap()
}

#[test]
fn unique_of_empty_slices_finds_one_group() {
    // 2^20 columns of no elements each: all equal, so one group holding
    // every column (the per-column tables are no longer built).
    let cols = 1usize << 20;
    let model = unique_model(1, Some(1), &[D::N(0), D::N(cols as i64)]);
    let x = Tensor::zeros(&[0, cols], tilejit::DType::F32);
    let outs = model.run(&[("x", &x)]).expect("runs");
    assert_eq!(outs[0].1.shape(), [0, 1]);
    assert_eq!(outs[1].1.to_vec::<i64>().expect("indices"), [0]);
    let inverse = outs[2].1.to_vec::<i64>().expect("inverse");
    assert_eq!(inverse.len(), cols);
    assert!(inverse.iter().all(|&g| g == 0));
    assert_eq!(outs[3].1.to_vec::<i64>().expect("counts"), [cols as i64]);
}

#[test]
fn unique_of_traced_data_runs_at_a_cut() {
    // ONNX's examples for [2, 1, 1, 3, 4, 3]: first-seen order, then
    // sorted.
    let x = Tensor::from_vec(vec![2.0f32, 1.0, 1.0, 3.0, 4.0, 3.0], &[6]).unwrap();
    let ints = |t: &Tensor| t.to_vec::<i64>().unwrap();
    for mode in MODES {
        let outs = run(&unique_model(0, None, &[D::N(6)]), &[&x], mode);
        assert_eq!(
            outs[0].to_vec::<f32>().unwrap(),
            [2.0, 1.0, 3.0, 4.0],
            "{mode:?}"
        );
        assert_eq!(ints(&outs[1]), [0, 1, 3, 4]);
        assert_eq!(ints(&outs[2]), [0, 1, 1, 2, 3, 2]);
        assert_eq!(ints(&outs[3]), [1, 2, 2, 1]);
        let outs = run(&unique_model(1, None, &[D::N(6)]), &[&x], mode);
        assert_eq!(outs[0].to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(ints(&outs[1]), [1, 0, 3, 4]);
        assert_eq!(ints(&outs[2]), [1, 0, 0, 2, 3, 2]);
        assert_eq!(ints(&outs[3]), [2, 1, 2, 1]);
    }
    // Rows of [[1, 0, 0], [1, 0, 0], [2, 3, 4]] along axis 0.
    let x = Tensor::from_vec(
        vec![1.0f32, 0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 3.0, 4.0],
        &[3, 3],
    )
    .unwrap();
    let model = unique_model(1, Some(0), &[D::N(3), D::N(3)]);
    for mode in MODES {
        let outs = run(&model, &[&x], mode);
        assert_eq!(outs[0].shape(), &[2, 3], "{mode:?}");
        assert_eq!(
            outs[0].to_vec::<f32>().unwrap(),
            [1.0, 0.0, 0.0, 2.0, 3.0, 4.0]
        );
        assert_eq!(ints(&outs[1]), [0, 2]);
        assert_eq!(ints(&outs[2]), [0, 0, 1]);
        assert_eq!(ints(&outs[3]), [2, 1]);
    }
}

#[test]
fn unique_with_a_bad_sorted_value_is_refused_at_load() {
    let bytes = b::encode(&b::model(
        13,
        vec![b::node(
            "Unique",
            "u",
            &["x"],
            &["y"],
            vec![b::int("sorted", 2)],
        )],
        vec![b::value("x", b::FLOAT, &[D::N(3)])],
        vec![b::value("y", b::FLOAT, &[])],
        vec![],
    ));
    let e = onnx::from_bytes(&bytes).err().unwrap();
    assert_eq!(
        onnx_err(&e),
        ("u", "Unique", "sorted", ErrorKind::BadArgument)
    );
}
