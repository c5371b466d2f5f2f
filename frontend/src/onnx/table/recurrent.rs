//! ONNX rows: Recurrent and control-flow ops, scatters and top-k.

use super::Row;

/// This area's rows.
pub(super) static ROWS: &[Row] = &[];
