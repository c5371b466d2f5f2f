//! HannWindow, HammingWindow and BlackmanWindow: the size is known when
//! tracing, so the window is a constant computed here in f64.

use super::super::{attr_i, dims_of, fail, one, req, table_of, Cx};
use crate::error::Result;
use crate::onnx::model::{dtype_of, Node};
use crate::tensor::Tensor;
use std::f64::consts::PI;
use tilejit_ir::ErrorKind;

pub(in super::super) fn check_window(n: &Node, _: &Cx) -> Result<()> {
    dtype_of(attr_i(n, "output_datatype", 1)? as i32)
        .map_err(|m| fail(n, "output_datatype", ErrorKind::Unsupported, m))?;
    Ok(())
}

fn window(n: &Node, ins: &[Option<Tensor>], f: fn(f64) -> f64) -> Result<Vec<Tensor>> {
    let size = dims_of(n, "size", req(n, ins, 0)?)?;
    let &[len] = size.as_slice() else {
        return Err(fail(n, "size", ErrorKind::Shape, "must be one integer"));
    };
    let periodic = attr_i(n, "periodic", 1)? != 0;
    let span = if periodic {
        len as f64
    } else {
        len as f64 - 1.0
    };
    let to = dtype_of(attr_i(n, "output_datatype", 1)? as i32)
        .map_err(|m| fail(n, "output_datatype", ErrorKind::Unsupported, m))?;
    // The phase 2*pi*i/span of sample i (a one-sample symmetric window is 1).
    let w = table_of(len, |i| {
        if span > 0.0 {
            f(2.0 * PI * i as f64 / span)
        } else {
            1.0
        }
    })?;
    one(Tensor::from_vec(w, &[len])?.cast(to))
}

pub(in super::super) fn build_hann(
    n: &Node,
    _: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    window(n, ins, |t| 0.5 - 0.5 * t.cos())
}

pub(in super::super) fn build_hamming(
    n: &Node,
    _: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    window(n, ins, |t| 25.0 / 46.0 - (1.0 - 25.0 / 46.0) * t.cos())
}

pub(in super::super) fn build_blackman(
    n: &Node,
    _: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    window(n, ins, |t| 0.42 - 0.5 * t.cos() + 0.08 * (2.0 * t).cos())
}
