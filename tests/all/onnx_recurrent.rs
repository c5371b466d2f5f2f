//! `tilejit::onnx` recurrent and control-flow rows (RNN, GRU, LSTM, If,
//! Loop, Scan) on Host, Sim and Verify. The RNN-family expectations were
//! computed by onnxruntime 1.x (GRU, RNN: it honours `sequence_lens` and
//! `clip`) and onnx 1.23's `ReferenceEvaluator` (LSTM with `layout` 1) on
//! the same inputs (`vals` below, as numpy float32); the control-flow
//! ones are worked by hand in the comments.

use super::onnx::{onnx_err, MODES};
use tilejit::onnx;
use tilejit::{with_mode, ErrorKind, Tensor};
use tilejit_testkit::onnx::{self as b, D};

const INT32: i32 = 6;
const BOOL: i32 = 9;

fn vals(n: usize, seed: f64, shape: &[usize]) -> Tensor {
    let v: Vec<f32> = (0..n)
        .map(|i| ((i as f64 * 0.37 + seed).sin() * 0.9) as f32)
        .collect();
    Tensor::from_vec(v, shape).unwrap()
}

fn close(what: &str, got: &Tensor, shape: &[usize], want: &[f32]) {
    assert_eq!(got.shape(), shape, "{what}");
    let got = got.to_vec::<f32>().unwrap();
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 2e-6 + 1e-5 * w.abs(),
            "{what} element {i}: {g} vs {w}"
        );
    }
}

fn fv(name: &str, dims: &[i64]) -> b::proto::ValueInfoProto {
    let d: Vec<D> = dims.iter().map(|&n| D::N(n)).collect();
    b::value(name, b::FLOAT, &d)
}

/// One node over graph inputs, at opset 14.
fn model(node: b::proto::NodeProto, ins: Vec<b::proto::ValueInfoProto>, outs: &[&str]) -> Vec<u8> {
    let outs = outs.iter().map(|o| b::value(o, b::FLOAT, &[])).collect();
    b::encode(&b::model(14, vec![node], ins, outs, vec![]))
}

fn run_all(bytes: &[u8], feeds: &[(&str, &Tensor)]) -> Vec<Vec<Tensor>> {
    let m = onnx::from_bytes(bytes).unwrap();
    MODES
        .iter()
        .map(|&mode| {
            let outs = with_mode(mode, || m.run(feeds)).unwrap();
            outs.into_iter().map(|(_, t)| t).collect()
        })
        .collect()
}

#[test]
fn gru_bidirectional_with_sequence_lens_matches_onnxruntime() {
    let (t, bt, i, h) = (3, 2, 2, 3);
    let node = b::node(
        "GRU",
        "gru",
        &["x", "w", "r", "b", "lens", "h0"],
        &["y", "yh"],
        vec![
            b::string("direction", "bidirectional"),
            b::int("linear_before_reset", 1),
            b::int("hidden_size", h as i64),
        ],
    );
    let ins = vec![
        fv("x", &[3, 2, 2]),
        fv("w", &[2, 9, 2]),
        fv("r", &[2, 9, 3]),
        fv("b", &[2, 18]),
        b::value("lens", INT32, &[D::N(2)]),
        fv("h0", &[2, 2, 3]),
    ];
    let x = vals(t * bt * i, 0.1, &[t, bt, i]);
    let w = vals(2 * 3 * h * i, 0.2, &[2, 3 * h, i]);
    let r = vals(2 * 3 * h * h, 0.3, &[2, 3 * h, h]);
    let bias = vals(2 * 6 * h, 0.4, &[2, 6 * h]);
    let lens = Tensor::from_vec(vec![3i32, 1], &[2]).unwrap();
    let h0 = vals(2 * bt * h, 0.5, &[2, bt, h]);
    let feeds = [
        ("x", &x),
        ("w", &w),
        ("r", &r),
        ("b", &bias),
        ("lens", &lens),
        ("h0", &h0),
    ];
    for outs in run_all(&model(node, ins, &["y", "yh"]), &feeds) {
        close(
            "Y",
            &outs[0],
            &[3, 2, 2, 3],
            &[
                0.401195,
                0.6163558,
                0.5130079,
                0.6743206,
                0.769919,
                0.5365595,
                -0.04127405,
                -0.1416198,
                -0.1242694,
                -0.5749207,
                -0.7593268,
                -0.6325184,
                0.1812121,
                0.5299355,
                0.413902,
                0.0,
                0.0,
                0.0,
                -0.01252063,
                -0.1584713,
                -0.1552596,
                0.0,
                0.0,
                0.0,
                0.3705304,
                0.4972725,
                0.1231204,
                0.0,
                0.0,
                0.0,
                0.2708501,
                -0.05640011,
                -0.2789185,
                0.0,
                0.0,
                0.0,
            ],
        );
        close(
            "Y_h",
            &outs[1],
            &[2, 2, 3],
            &[
                0.3705304,
                0.4972725,
                0.1231204,
                0.6743206,
                0.769919,
                0.5365595,
                -0.04127405,
                -0.1416198,
                -0.1242694,
                -0.5749207,
                -0.7593268,
                -0.6325184,
            ],
        );
    }
}

#[test]
fn lstm_reverse_peepholes_batch_first_matches_the_onnx_reference() {
    let (t, bt, i, h) = (3, 2, 2, 3);
    let node = b::node(
        "LSTM",
        "lstm",
        &["x", "w", "r", "b", "", "h0", "c0", "p"],
        &["y", "yh", "yc"],
        vec![
            b::string("direction", "reverse"),
            b::int("layout", 1),
            b::int("hidden_size", h as i64),
        ],
    );
    let ins = vec![
        fv("x", &[2, 3, 2]),
        fv("w", &[1, 12, 2]),
        fv("r", &[1, 12, 3]),
        fv("b", &[1, 24]),
        fv("h0", &[2, 1, 3]),
        fv("c0", &[2, 1, 3]),
        fv("p", &[1, 9]),
    ];
    let x = vals(bt * t * i, 0.6, &[bt, t, i]);
    let w = vals(4 * h * i, 0.7, &[1, 4 * h, i]);
    let r = vals(4 * h * h, 0.8, &[1, 4 * h, h]);
    let bias = vals(8 * h, 0.9, &[1, 8 * h]);
    let h0 = vals(bt * h, 1.0, &[bt, 1, h]);
    let c0 = vals(bt * h, 1.1, &[bt, 1, h]);
    let p = vals(3 * h, 1.2, &[1, 3 * h]);
    let feeds = [
        ("x", &x),
        ("w", &w),
        ("r", &r),
        ("b", &bias),
        ("h0", &h0),
        ("c0", &c0),
        ("p", &p),
    ];
    for outs in run_all(&model(node, ins, &["y", "yh", "yc"]), &feeds) {
        close(
            "Y",
            &outs[0],
            &[2, 3, 1, 3],
            &[
                0.199509,
                0.3135591,
                0.2425004,
                0.3102822,
                0.4143607,
                0.2847237,
                -0.02661855,
                0.1644455,
                0.5175283,
                0.1122419,
                -0.2555206,
                -0.4512542,
                -0.1056063,
                -0.3206739,
                -0.4271458,
                0.02402588,
                -0.1514469,
                -0.1628056,
            ],
        );
        close(
            "Y_h",
            &outs[1],
            &[2, 1, 3],
            &[
                0.199509, 0.3135591, 0.2425004, 0.1122419, -0.2555206, -0.4512542,
            ],
        );
        close(
            "Y_c",
            &outs[2],
            &[2, 1, 3],
            &[
                0.3541361, 0.7034467, 0.4401663, 0.1305553, -0.3435645, -1.011965,
            ],
        );
    }
}

#[test]
fn rnn_leaky_relu_with_alpha_and_clip_matches_onnxruntime() {
    let (t, bt, i, h) = (3, 2, 2, 3);
    let node = b::node(
        "RNN",
        "rnn",
        &["x", "w", "r"],
        &["y", "yh"],
        vec![
            b::strings("activations", &["LeakyRelu"]),
            b::floats("activation_alpha", &[0.1]),
            b::float("clip", 0.5),
            b::int("hidden_size", h as i64),
        ],
    );
    let ins = vec![
        fv("x", &[3, 2, 2]),
        fv("w", &[1, 3, 2]),
        fv("r", &[1, 3, 3]),
    ];
    let x = vals(t * bt * i, 1.3, &[t, bt, i]);
    let w = vals(h * i, 1.4, &[1, h, i]);
    let r = vals(h * h, 1.5, &[1, h, h]);
    for outs in run_all(
        &model(node, ins, &["y", "yh"]),
        &[("x", &x), ("w", &w), ("r", &r)],
    ) {
        close(
            "Y",
            &outs[0],
            &[3, 1, 2, 3],
            &[
                0.5,
                0.5,
                0.1146406,
                0.5,
                0.5,
                0.1282956,
                0.5,
                0.5,
                -0.05,
                0.1342658,
                -0.03008818,
                -0.05,
                -0.05,
                -0.05,
                -0.05,
                -0.05,
                -0.05,
                -0.01320013,
            ],
        );
        close(
            "Y_h",
            &outs[1],
            &[1, 2, 3],
            &[-0.05, -0.05, -0.05, -0.05, -0.05, -0.01320013],
        );
    }
}

#[test]
fn bad_recurrent_attributes_fail_at_load_naming_them() {
    let ins = || {
        vec![
            fv("x", &[3, 2, 2]),
            fv("w", &[1, 3, 2]),
            fv("r", &[1, 3, 3]),
        ]
    };
    let bogus = b::node(
        "RNN",
        "cell",
        &["x", "w", "r"],
        &["y"],
        vec![b::strings("activations", &["Bogus"])],
    );
    let e = onnx::from_bytes(&model(bogus, ins(), &["y"]))
        .err()
        .unwrap();
    assert_eq!(
        onnx_err(&e),
        ("cell", "RNN", "activations", ErrorKind::Unsupported),
        "{e}"
    );
    let sideways = b::node(
        "RNN",
        "cell",
        &["x", "w", "r"],
        &["y"],
        vec![b::string("direction", "sideways")],
    );
    let e = onnx::from_bytes(&model(sideways, ins(), &["y"]))
        .err()
        .unwrap();
    assert_eq!(
        onnx_err(&e),
        ("cell", "RNN", "direction", ErrorKind::BadArgument),
        "{e}"
    );
    // A GRU-only attribute on an LSTM.
    let lstm = b::node(
        "LSTM",
        "cell",
        &["x", "w", "r"],
        &["y"],
        vec![b::int("linear_before_reset", 1)],
    );
    let e = onnx::from_bytes(&model(lstm, ins(), &["y"])).err().unwrap();
    assert_eq!(
        onnx_err(&e),
        (
            "cell",
            "LSTM",
            "linear_before_reset",
            ErrorKind::Unsupported
        ),
        "{e}"
    );
}

fn constant(out: &str, v: &[f32]) -> b::proto::NodeProto {
    let t = b::f32s("", &[v.len() as i64], v);
    b::node("Constant", out, &[], &[out], vec![b::tensor("value", t)])
}

/// If over a cond graph input: then x + 1, else x * 2, or (`mismatch`)
/// an else branch of another shape.
fn if_model(mismatch: bool) -> Vec<u8> {
    let then_g = b::graph(
        "then_branch",
        vec![
            constant("one", &[1.0]),
            b::node("Add", "add", &["x", "one"], &["t"], vec![]),
        ],
        vec![],
        vec![fv("t", &[3])],
    );
    let else_nodes = match mismatch {
        false => vec![
            constant("two", &[2.0]),
            b::node("Mul", "mul", &["x", "two"], &["e"], vec![]),
        ],
        true => vec![constant("e", &[7.0])],
    };
    let else_g = b::graph("else_branch", else_nodes, vec![], vec![fv("e", &[3])]);
    let node = b::node("If", "choose", &["c"], &["y"], vec![then_g, else_g]);
    let ins = vec![fv("x", &[3]), b::value("c", BOOL, &[])];
    model(node, ins, &["y"])
}

#[test]
fn if_on_a_traced_condition_selects_the_taken_branch() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
    for (c, want) in [(true, [2.0, 3.0, 4.0]), (false, [2.0, 4.0, 6.0])] {
        let c = Tensor::from_vec(vec![c], &[]).unwrap();
        for outs in run_all(&if_model(false), &[("x", &x), ("c", &c)]) {
            close("If", &outs[0], &[3], &want);
        }
    }
    // Branches of different shapes cannot be selected elementwise.
    let m = onnx::from_bytes(&if_model(true)).unwrap();
    let c = Tensor::from_vec(vec![true], &[]).unwrap();
    let e = m.run(&[("x", &x), ("c", &c)]).err().unwrap();
    assert_eq!(
        onnx_err(&e),
        ("choose", "If", "cond", ErrorKind::Unsupported),
        "{e}"
    );
}

/// Loop: M trips (an initializer, or a graph input when `traced_m`),
/// carrying y (from 0) += x each trip and scanning y * iteration.
fn loop_model(traced_m: bool) -> Vec<u8> {
    let body = b::graph(
        "body",
        vec![
            b::node("Identity", "keep", &["cond_in"], &["cond_out"], vec![]),
            b::node("Add", "add", &["y_in", "x"], &["y_out"], vec![]),
            b::node("Cast", "cast", &["iter"], &["i"], vec![b::int("to", 1)]),
            b::node("Mul", "mul", &["y_out", "i"], &["scan"], vec![]),
        ],
        vec![
            b::value("iter", b::INT64, &[]),
            b::value("cond_in", BOOL, &[]),
            fv("y_in", &[1]),
        ],
        vec![
            b::value("cond_out", BOOL, &[]),
            fv("y_out", &[1]),
            fv("scan", &[1]),
        ],
    );
    let node = b::node("Loop", "unroll", &["m", "", "y0"], &["y", "ys"], vec![body]);
    let mut ins = vec![fv("x", &[1]), fv("y0", &[1])];
    let mut inits = vec![];
    match traced_m {
        true => ins.push(b::value("m", b::INT64, &[])),
        false => inits.push(b::i64s("m", &[], &[3])),
    }
    let outs = vec![b::value("y", b::FLOAT, &[]), b::value("ys", b::FLOAT, &[])];
    b::encode(&b::model(14, vec![node], ins, outs, inits))
}

#[test]
fn loop_with_a_known_trip_count_unrolls_and_stacks_scan_outputs() {
    // x = 2, y0 = 0: y goes 2, 4, 6; the scans are y * i = 0, 4, 12.
    let x = Tensor::from_vec(vec![2.0f32], &[1]).unwrap();
    let y0 = Tensor::from_vec(vec![0.0f32], &[1]).unwrap();
    for outs in run_all(&loop_model(false), &[("x", &x), ("y0", &y0)]) {
        close("y", &outs[0], &[1], &[6.0]);
        close("scan", &outs[1], &[3, 1], &[0.0, 4.0, 12.0]);
    }
    // M as a graph input is value-keyed: each trip count is one program.
    let m = onnx::from_bytes(&loop_model(true)).unwrap();
    assert_eq!(m.static_inputs(), ["m"]);
    let trips = Tensor::from_vec(vec![2i64], &[]).unwrap();
    let outs = m.run(&[("x", &x), ("y0", &y0), ("m", &trips)]).unwrap();
    close("y", &outs[0].1, &[1], &[4.0]);
    close("scan", &outs[1].1, &[2, 1], &[0.0, 4.0]);
}

/// A Loop named `name` of `m` trips (no condition input) that carries
/// `from` to `to`; its body passes the state (`{name}_y` to `{name}_z`)
/// through `inner`, or an Identity.
fn counted_loop(
    name: &str,
    m: &str,
    (from, to): (&str, &str),
    inner: Option<b::proto::NodeProto>,
) -> b::proto::NodeProto {
    let (y, z) = (format!("{name}_y"), format!("{name}_z"));
    let pass = inner.unwrap_or_else(|| b::node("Identity", "carry", &[&y], &[&z], vec![]));
    let body = b::graph(
        "body",
        vec![
            b::node("Identity", "keep", &["cond_in"], &["cond_out"], vec![]),
            pass,
        ],
        vec![
            b::value("iter", b::INT64, &[]),
            b::value("cond_in", BOOL, &[]),
            fv(&y, &[1]),
        ],
        vec![b::value("cond_out", BOOL, &[]), fv(&z, &[1])],
    );
    b::node("Loop", name, &[m, "", from], &[to], vec![body])
}

#[test]
fn loops_past_the_unrolling_limits_fail_before_they_run_long() {
    let y0 = Tensor::from_vec(vec![1.0f32], &[1]).expect("y0");
    let run = |outer: b::proto::NodeProto, trips: &[(&str, i64)]| {
        let inits = trips.iter().map(|&(n, m)| b::i64s(n, &[], &[m])).collect();
        let bytes = b::encode(&b::model(
            14,
            vec![outer],
            vec![fv("y_in", &[1])],
            vec![b::value("y_out", b::FLOAT, &[])],
            inits,
        ));
        match onnx::from_bytes(&bytes) {
            Err(e) => e,
            Ok(m) => m.run(&[("y_in", &y0)]).expect_err("past a limit"),
        }
    };
    // A counted loop one trip past 2^16: refused before its first trip.
    let top = ("y_in", "y_out");
    let e = run(
        counted_loop("outer", "m", top, None),
        &[("m", (1 << 16) + 1)],
    );
    assert_eq!(
        onnx_err(&e),
        ("outer", "Loop", "M", ErrorKind::Unsupported),
        "{e}"
    );
    // Loops of 2^16 trips, each within its own limit, nested: the trace's
    // budget of 2^18 unrolled steps ends them in the fifth outer trip
    // (2^32 bodies before).
    let inner = counted_loop("inner", "k", ("outer_y", "outer_z"), None);
    let outer = counted_loop("outer", "m", top, Some(inner));
    let e = run(outer, &[("m", 1 << 16), ("k", 1 << 16)]);
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert!(e.to_string().contains("unrolled steps in all"), "{e}");
}

#[test]
fn scan_in_reverse_carries_state_and_stacks_outputs() {
    // s from [0, 0] adds the rows of xs last first: [5, 6], [8, 10], [9, 12].
    let body = b::graph(
        "body",
        vec![
            b::node("Add", "add", &["s_in", "x_t"], &["s_out"], vec![]),
            b::node("Identity", "out", &["s_out"], &["o"], vec![]),
        ],
        vec![fv("s_in", &[2]), fv("x_t", &[2])],
        vec![fv("s_out", &[2]), fv("o", &[2])],
    );
    let node = b::node(
        "Scan",
        "scan",
        &["s0", "xs"],
        &["s", "os"],
        vec![
            body,
            b::int("num_scan_inputs", 1),
            b::ints("scan_input_directions", &[1]),
        ],
    );
    let bytes = model(node, vec![fv("s0", &[2]), fv("xs", &[3, 2])], &["s", "os"]);
    let s0 = Tensor::from_vec(vec![0.0f32, 0.0], &[2]).unwrap();
    let xs = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]).unwrap();
    for outs in run_all(&bytes, &[("s0", &s0), ("xs", &xs)]) {
        close("state", &outs[0], &[2], &[9.0, 12.0]);
        close("scan", &outs[1], &[3, 2], &[5.0, 6.0, 8.0, 10.0, 9.0, 12.0]);
    }
}

/// A Scan whose body gives fewer outputs than the node has state
/// variables: an error naming the body, where taking the states from the
/// body's outputs indexed past them and panicked.
#[test]
fn scan_body_short_of_its_states_is_an_error() {
    // Two states and one scan input; the body takes all three and gives
    // one output.
    let body = b::graph(
        "body",
        vec![b::node("Add", "add", &["a_in", "x_t"], &["a_out"], vec![])],
        vec![fv("a_in", &[2]), fv("b_in", &[2]), fv("x_t", &[2])],
        vec![fv("a_out", &[2])],
    );
    let node = b::node(
        "Scan",
        "scan",
        &["a0", "b0", "xs"],
        &["a", "b"],
        vec![body, b::int("num_scan_inputs", 1)],
    );
    let ins = vec![fv("a0", &[2]), fv("b0", &[2]), fv("xs", &[3, 2])];
    let bytes = model(node, ins, &["a", "b"]);
    let s0 = Tensor::from_vec(vec![0.0f32, 0.0], &[2]).expect("s0");
    let xs = Tensor::from_vec(vec![1.0f32; 6], &[3, 2]).expect("xs");
    let e = match onnx::from_bytes(&bytes) {
        Err(e) => e,
        Ok(m) => m
            .run(&[("a0", &s0), ("b0", &s0), ("xs", &xs)])
            .expect_err("two states, one body output"),
    };
    assert_eq!(
        onnx_err(&e),
        ("scan", "Scan", "body", ErrorKind::BadArgument),
        "{e}"
    );
}

#[test]
fn unrolling_past_the_limit_is_an_error_naming_the_node() {
    // Each of these traces one step per unit of a dim or value the file
    // sets; one past 2^16 must fail at once, not hang the import on a
    // trace of millions of ops (TopK was uncapped before).
    let over = (1usize << 16) + 1;
    let xs = Tensor::zeros(&[over, 1, 1], tilejit::DType::F32);
    let row = Tensor::zeros(&[1, over], tilejit::DType::F32);
    let first = |bytes: &[u8], feeds: &[(&str, &Tensor)]| match onnx::from_bytes(bytes) {
        Err(e) => e,
        Ok(m) => m.run(feeds).expect_err("over the unrolling limit"),
    };
    let top = b::node("TopK", "top", &["x", "k"], &["v", "i"], vec![]);
    let k = vec![b::i64s("k", &[1], &[over as i64])];
    let e = first(
        &with_inits(top, &[1, over as i64], k, &["v", "i"]),
        &[("x", &row)],
    );
    assert_eq!(
        onnx_err(&e),
        ("top", "TopK", "K", ErrorKind::Unsupported),
        "{e}"
    );
    let body = b::graph(
        "body",
        vec![b::node("Add", "add", &["s_in", "x_t"], &["s_out"], vec![])],
        vec![fv("s_in", &[1, 1]), fv("x_t", &[1, 1])],
        vec![fv("s_out", &[1, 1])],
    );
    let scan = b::node(
        "Scan",
        "scan",
        &["s0", "xs"],
        &["s"],
        vec![body, b::int("num_scan_inputs", 1)],
    );
    let s0 = Tensor::zeros(&[1, 1], tilejit::DType::F32);
    let ins = vec![fv("s0", &[1, 1]), fv("xs", &[over as i64, 1, 1])];
    let e = first(&model(scan, ins, &["s"]), &[("s0", &s0), ("xs", &xs)]);
    assert_eq!(
        onnx_err(&e),
        ("scan", "Scan", "scan_input_axes", ErrorKind::Unsupported),
        "{e}"
    );
    let rnn = b::node(
        "RNN",
        "cell",
        &["x", "w", "r"],
        &["y"],
        vec![b::int("hidden_size", 1)],
    );
    let (w, r) = (
        Tensor::zeros(&[1, 1, 1], tilejit::DType::F32),
        Tensor::zeros(&[1, 1, 1], tilejit::DType::F32),
    );
    let ins = vec![
        fv("x", &[over as i64, 1, 1]),
        fv("w", &[1, 1, 1]),
        fv("r", &[1, 1, 1]),
    ];
    let e = first(
        &model(rnn, ins, &["y"]),
        &[("x", &xs), ("w", &w), ("r", &r)],
    );
    assert_eq!(
        onnx_err(&e),
        ("cell", "RNN", "X", ErrorKind::Unsupported),
        "{e}"
    );
}

/// One node over input `x` and initializers, opset 18, outputs as named.
fn with_inits(
    node: b::proto::NodeProto,
    x: &[i64],
    inits: Vec<b::proto::TensorProto>,
    outs: &[&str],
) -> Vec<u8> {
    let outs = outs.iter().map(|o| b::value(o, 0, &[])).collect();
    b::encode(&b::model(18, vec![node], vec![fv("x", x)], outs, inits))
}

#[test]
fn scatters_reduce_duplicates_and_refuse_indices_out_of_range() {
    // ONNX's duplicate-indices example: 2 + 1.1 + 2.1 = 5.2.
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0], &[1, 5]).unwrap();
    let elems = |i: i64| {
        let node = b::node(
            "ScatterElements",
            "scat",
            &["x", "i", "u"],
            &["y"],
            vec![b::int("axis", 1), b::string("reduction", "add")],
        );
        let inits = vec![
            b::i64s("i", &[1, 2], &[1, i]),
            b::f32s("u", &[1, 2], &[1.1, 2.1]),
        ];
        with_inits(node, &[1, 5], inits, &["y"])
    };
    for outs in run_all(&elems(1), &[("x", &x)]) {
        close("add", &outs[0], &[1, 5], &[1.0, 5.2, 3.0, 4.0, 5.0]);
    }
    let m = onnx::from_bytes(&elems(5)).unwrap();
    let e = m.run(&[("x", &x)]).err().unwrap();
    assert_eq!(
        onnx_err(&e),
        ("scat", "ScatterElements", "indices", ErrorKind::BadArgument),
        "{e}"
    );
    // ScatterND max: position 1 takes max(5, 9, 4), position 3 max(7, 2).
    let node = b::node(
        "ScatterND",
        "nd",
        &["x", "i", "u"],
        &["y"],
        vec![b::string("reduction", "max")],
    );
    let inits = vec![
        b::i64s("i", &[3, 1], &[1, 3, -3]),
        b::f32s("u", &[3], &[9.0, 2.0, 4.0]),
    ];
    let x = Tensor::from_vec(vec![1.0f32, 5.0, 3.0, 7.0], &[4]).unwrap();
    for outs in run_all(&with_inits(node, &[4], inits, &["y"]), &[("x", &x)]) {
        close("max", &outs[0], &[4], &[1.0, 9.0, 3.0, 7.0]);
    }
}

#[test]
fn top_k_breaks_ties_toward_the_lower_index() {
    // [3, 1, 3, 2]: the two largest are 3 at 0 then 3 at 2; the two
    // smallest 1 at 1 then 2 at 3.
    let x = Tensor::from_vec(vec![3.0f32, 1.0, 3.0, 2.0], &[1, 4]).unwrap();
    for (largest, vals, idx) in [(1, [3.0, 3.0], [0i64, 2]), (0, [1.0, 2.0], [1, 3])] {
        let node = b::node(
            "TopK",
            "top",
            &["x", "k"],
            &["v", "i"],
            vec![b::int("largest", largest), b::int("axis", -1)],
        );
        let bytes = with_inits(node, &[1, 4], vec![b::i64s("k", &[1], &[2])], &["v", "i"]);
        for outs in run_all(&bytes, &[("x", &x)]) {
            close("values", &outs[0], &[1, 2], &vals);
            assert_eq!(outs[1].to_vec::<i64>().unwrap(), idx);
        }
    }
}
