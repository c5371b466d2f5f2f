//! ONNX rows: Transformer and normalization ops, and losses. The larger
//! builds live in the child modules: `attention.rs`, `loss.rs`, `norm.rs`.

use super::{Kind, Row};

mod attention;

/// This area's rows.
pub(super) static ROWS: &[Row] = &[Row {
    op: "Attention",
    attrs: attention::ATTRS,
    check: attention::check,
    kind: Kind::Node(attention::build),
}];
