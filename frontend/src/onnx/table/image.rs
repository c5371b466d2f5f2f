//! ONNX rows: Image ops: resizing, transposed and 3-D convolutions, pools and rearrangements.

use super::Row;

/// This area's rows.
pub(super) static ROWS: &[Row] = &[];
