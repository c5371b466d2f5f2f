//! ONNX rows: Transformer and normalization ops, and losses.

use super::Row;

/// This area's rows.
pub(super) static ROWS: &[Row] = &[];
