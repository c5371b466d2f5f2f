//! Rearrangements: DepthToSpace and SpaceToDepth (reshape, permute,
//! reshape) and Pad's `edge`, `reflect` and `wrap` modes (a constant
//! source index per padded axis, taken with `index_select`).

use super::super::{attr_i, attr_s, fail, one, req, Cx};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::{DType, ErrorKind};

pub(in super::super) fn check_blocks(n: &Node, _: &Cx) -> Result<()> {
    if attr_i(n, "blocksize", 0)? < 1 {
        return Err(fail(
            n,
            "blocksize",
            ErrorKind::BadArgument,
            "is required and must be positive",
        ));
    }
    match attr_s(n, "mode", "DCR")? {
        "DCR" | "CRD" => Ok(()),
        m => Err(fail(
            n,
            "mode",
            ErrorKind::Unsupported,
            format!("`{m}` is not a mode (DCR or CRD)"),
        )),
    }
}

/// The image's `[n, c, h, w]`, after checking it is 4-D.
fn nchw(n: &Node, x: &Tensor) -> Result<[usize; 4]> {
    match x.shape() {
        &[a, b, c, d] => Ok([a, b, c, d]),
        s => Err(fail(
            n,
            "input",
            ErrorKind::Shape,
            format!("needs an [N, C, H, W] image, got {s:?}"),
        )),
    }
}

pub(in super::super) fn build_depth_to_space(
    n: &Node,
    _: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let [nb, c, h, w] = nchw(n, x)?;
    let b = attr_i(n, "blocksize", 1)? as usize;
    // A block of more than usize::MAX channels divides none.
    let Some(c2) = b.checked_mul(b).filter(|&bb| c % bb == 0).map(|bb| c / bb) else {
        return Err(fail(
            n,
            "blocksize",
            ErrorKind::Shape,
            format!("{c} channels do not split into {b}x{b} blocks"),
        ));
    };
    let (split, perm) = match attr_s(n, "mode", "DCR")? {
        "CRD" => ([nb, c2, b, b, h, w], [0, 1, 4, 2, 5, 3]),
        _ => ([nb, b, b, c2, h, w], [0, 3, 4, 1, 5, 2]),
    };
    one(x
        .reshape(&split)
        .permute(&perm)
        .reshape(&[nb, c2, h * b, w * b]))
}

pub(in super::super) fn build_space_to_depth(
    n: &Node,
    _: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let [nb, c, h, w] = nchw(n, x)?;
    let b = attr_i(n, "blocksize", 1)? as usize;
    if h % b != 0 || w % b != 0 {
        return Err(fail(
            n,
            "blocksize",
            ErrorKind::Shape,
            format!("a {h}x{w} image does not split into {b}x{b} blocks"),
        ));
    }
    let perm = match attr_s(n, "mode", "DCR")? {
        "CRD" => [0, 1, 3, 5, 2, 4],
        _ => [0, 3, 5, 1, 2, 4],
    };
    // Past usize only for an empty image and a huge blocksize.
    let Some(c3) = c.checked_mul(b).and_then(|x| x.checked_mul(b)) else {
        return Err(fail(
            n,
            "blocksize",
            ErrorKind::Shape,
            format!("{c} channels in {b}x{b} blocks overflow"),
        ));
    };
    one(x
        .reshape(&[nb, c, h / b, b, w / b, b])
        .permute(&perm)
        .reshape(&[nb, c3, h / b, w / b]))
}

/// Pad in `edge`, `reflect` or `wrap` mode: `pads[a]` = (begin, end).
pub(in super::super) fn pad_indexed(
    n: &Node,
    x: &Tensor,
    pads: &[(i64, i64)],
    mode: &str,
) -> Result<Tensor> {
    let mut y = x.clone();
    for (a, &(pb, pe)) in pads.iter().enumerate() {
        if pb == 0 && pe == 0 {
            continue;
        }
        let len = x.shape()[a] as i64;
        if len == 0 || (mode == "reflect" && (pb >= len || pe >= len)) {
            return Err(fail(
                n,
                "pads",
                ErrorKind::BadArgument,
                format!("{mode} padding of ({pb}, {pe}) on axis {a} of length {len}"),
            ));
        }
        // A padded length the file sets, held to the trace-time limit.
        let out = len.saturating_add(pb).saturating_add(pe);
        if out > super::super::MAX_FOLDED as i64 {
            return Err(fail(
                n,
                "pads",
                ErrorKind::BadArgument,
                format!("pads ({pb}, {pe}) make axis {a} {out} long; tilejit pads an axis to at most {}", super::super::MAX_FOLDED),
            ));
        }
        let index = pad_index(out.max(0) as usize, len, pb, mode);
        y = y.index_select(a as isize, &index);
    }
    Ok(y)
}

/// [`pad_indexed`]'s source index for each of `out` positions, computed
/// from an index line (about `sqrt(out)` constant values) rather than
/// stored: a table of `out` i64s was 134 MB for a fuzzed 16.8M-long axis,
/// built while tracing and then copied to the device.
fn pad_index(out: usize, len: i64, pb: i64, mode: &str) -> Tensor {
    let line = crate::apply::apply("pad", crate::error::Loc::caller(), &[], |g, _| {
        crate::ops::index_line(g, out, DType::I64)
    });
    let at = |v: i64| Tensor::full(&[], v as f64, DType::I64);
    let i = &line - &at(pb);
    match mode {
        "edge" => i.maximum(&at(0)).minimum(&at(len - 1)),
        // `remainder` takes the divisor's sign: rem_euclid for len > 0.
        "wrap" => i.remainder(&at(len)),
        _ if len == 1 => Tensor::zeros(&[out], DType::I64),
        _ => {
            // Mirror without repeating the edge: period 2(len-1).
            let period = at(2 * (len - 1));
            let p = i.remainder(&period);
            Tensor::where_cond(&p.lt(&at(len)), &p, &(&period - &p))
        }
    }
}
