//! ONNX rows: Recurrent and control-flow ops, scatters and top-k. Each
//! family's check and build live in a child module.

use super::{Kind, Row};

mod rnn;

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
];
