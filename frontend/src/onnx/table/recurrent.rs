//! ONNX rows: Recurrent and control-flow ops, scatters and top-k. Each
//! family's check and build live in a child module.

use super::{Kind, Row};

mod control;
mod rnn;
mod scatter;
mod select;

/// This area's rows.
pub(super) static ROWS: &[Row] = &[
    Row {
        op: "RNN",
        attrs: rnn::ATTRS,
        check: rnn::check,
        kind: Kind::Node(rnn::build),
    },
    Row {
        op: "GRU",
        attrs: rnn::ATTRS,
        check: rnn::check,
        kind: Kind::Node(rnn::build),
    },
    Row {
        op: "LSTM",
        attrs: rnn::ATTRS,
        check: rnn::check,
        kind: Kind::Node(rnn::build),
    },
    Row {
        op: "If",
        attrs: &["then_branch", "else_branch"],
        check: control::check_if,
        kind: Kind::Values(control::build_if),
    },
    Row {
        op: "Loop",
        attrs: &["body"],
        check: control::check_loop,
        kind: Kind::Values(control::build_loop),
    },
    Row {
        op: "Scan",
        attrs: &[
            "body",
            "num_scan_inputs",
            "scan_input_axes",
            "scan_input_directions",
            "scan_output_axes",
            "scan_output_directions",
        ],
        check: control::check_scan,
        kind: Kind::Node(control::build_scan),
    },
    Row {
        op: "ScatterElements",
        attrs: &["axis", "reduction"],
        check: scatter::check,
        kind: Kind::Node(scatter::build_elements),
    },
    Row {
        op: "Scatter",
        attrs: &["axis"],
        check: scatter::check,
        kind: Kind::Node(scatter::build_elements),
    },
    Row {
        op: "ScatterND",
        attrs: &["reduction"],
        check: scatter::check,
        kind: Kind::Node(scatter::build_nd),
    },
    Row {
        op: "TopK",
        attrs: &["axis", "largest", "sorted", "k"],
        check: select::check_topk,
        kind: Kind::Node(select::build_topk),
    },
    Row {
        op: "OneHot",
        attrs: &["axis"],
        check: super::no_check,
        kind: Kind::Node(select::build_one_hot),
    },
    Row {
        op: "EyeLike",
        attrs: &["dtype", "k"],
        check: select::check_eye_like,
        kind: Kind::Node(select::build_eye_like),
    },
];
