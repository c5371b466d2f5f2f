//! ONNX rows: Reductions, scans and the ops whose shape operands are graph inputs.

use super::Row;

/// This area's rows.
pub(super) static ROWS: &[Row] = &[];
