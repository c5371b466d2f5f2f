//! CenterCropPad and Col2Im: layout ops whose geometry is known at trace
//! time. CenterCropPad is a slice and a zero pad per axis; Col2Im (the
//! inverse of im2col, a scatter-add of blocks) reads, for every image
//! pixel, the column entries that land on it through one constant-index
//! `index_select`, padding missing entries from an appended zero column,
//! and sums them.

use super::super::{attr_ints, axis, fail, folded_len, ints_of, one, req, table_of, usizes, Cx};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::ErrorKind;

pub(in super::super) fn build_center_crop_pad(
    n: &Node,
    _: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let shape = ints_of(n, "shape", req(n, ins, 1)?)?;
    let r = x.rank();
    let axes: Vec<usize> = match attr_ints(n, "axes")? {
        Some(a) => a
            .iter()
            .map(|&a| axis(n, "axes", a, r))
            .collect::<Result<_>>()?,
        None => (0..r).collect(),
    };
    if shape.len() != axes.len() {
        return Err(fail(
            n,
            "shape",
            ErrorKind::Shape,
            format!("{} sizes for {} axes", shape.len(), axes.len()),
        ));
    }
    let want = usizes(n, "shape", shape)?;
    let mut y = x.clone();
    let mut pads = vec![(0, 0); r];
    for (&a, &s) in axes.iter().zip(&want) {
        let dim = x.shape()[a];
        if s < dim {
            let start = (dim - s) / 2;
            y = y.slice(a as isize, start as isize, (start + s) as isize);
        } else if s > dim {
            let before = (s - dim) / 2;
            pads[a] = (before, s - dim - before);
        }
    }
    if pads.iter().any(|&p| p != (0, 0)) {
        y = y.pad(&pads, 0.0);
    }
    one(y)
}

pub(in super::super) fn check_col2im(n: &Node, _: &Cx) -> Result<()> {
    for name in ["dilations", "strides"] {
        if attr_ints(n, name)?.is_some_and(|v| v.iter().any(|&d| d < 1)) {
            return Err(fail(n, name, ErrorKind::BadArgument, "must be positive"));
        }
    }
    if attr_ints(n, "pads")?.is_some_and(|v| v.iter().any(|&d| d < 0)) {
        return Err(fail(
            n,
            "pads",
            ErrorKind::BadArgument,
            "must not be negative",
        ));
    }
    Ok(())
}

pub(in super::super) fn build_col2im(
    n: &Node,
    _: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let image = usizes(
        n,
        "image_shape",
        ints_of(n, "image_shape", req(n, ins, 1)?)?,
    )?;
    let block = usizes(
        n,
        "block_shape",
        ints_of(n, "block_shape", req(n, ins, 2)?)?,
    )?;
    let k = image.len();
    let get = |name: &str, default: usize, len: usize| -> Result<Vec<usize>> {
        match attr_ints(n, name)? {
            Some(v) if v.len() == len => usizes(n, name, v),
            Some(v) => Err(fail(
                n,
                name,
                ErrorKind::BadArgument,
                format!("has {} values, not {len}", v.len()),
            )),
            None => Ok(vec![default; len]),
        }
    };
    let dil = get("dilations", 1, k)?;
    let strides = get("strides", 1, k)?;
    let pads = get("pads", 0, 2 * k)?;
    let bad = |m: String| Err(fail(n, "input", ErrorKind::Shape, m));
    if block.len() != k || k == 0 || x.rank() != 3 || dil.contains(&0) || strides.contains(&0) {
        return bad(format!(
            "input {:?}, image_shape {image:?} and block_shape {block:?} do not fit",
            x.shape()
        ));
    }
    // Every size below is bounded here: the block and the image by the
    // trace-time table limit, the block counts by the input's own dim.
    let kernel = folded_len(n, "block_shape", &block)?;
    let pixels = folded_len(n, "image_shape", &image)?;
    let (batch, rows, len) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    if kernel == 0 || rows % kernel != 0 {
        return bad(format!(
            "input dim 1 ({rows}) is not a multiple of the block size {kernel}"
        ));
    }
    // Blocks along each axis, in i128: the file's pads and dilations may
    // be near i64::MAX.
    let mut counts = Vec::with_capacity(k);
    for i in 0..k {
        let span = dil[i] as i128 * (block[i] as i128 - 1) + 1;
        let total = image[i] as i128 + pads[i] as i128 + pads[i + k] as i128;
        if total < span {
            return bad(format!("block {block:?} does not fit image {image:?}"));
        }
        counts.push((total - span) / strides[i] as i128 + 1);
    }
    let blocks = counts
        .iter()
        .try_fold(1i128, |a, &c| a.checked_mul(c))
        .filter(|&b| b == len as i128);
    if blocks.is_none() {
        return bad(format!(
            "input dim 2 is {len}, but the image holds {counts:?} blocks"
        ));
    }
    // Each count is at least 1 and their product is `len`: each fits.
    let counts: Vec<usize> = counts.iter().map(|&c| c as usize).collect();
    // Every (kernel offset, block) pair is visited below.
    folded_len(n, "input", &[kernel, len])?;
    let channels = rows / kernel;
    // For every pixel, the flat (block offset, block) entries landing on it.
    let mut lists: Vec<Vec<i64>> = table_of(pixels, |_| Vec::new())?;
    for b in 0..kernel {
        let mut off = vec![0; k];
        let mut r = b;
        for i in (0..k).rev() {
            off[i] = r % block[i];
            r /= block[i];
        }
        for l in 0..len {
            let mut pos = vec![0; k];
            let mut r = l;
            for i in (0..k).rev() {
                pos[i] = r % counts[i];
                r /= counts[i];
            }
            let mut flat = 0usize;
            let mut inside = true;
            for i in 0..k {
                let p = pos[i] as i128 * strides[i] as i128 + off[i] as i128 * dil[i] as i128
                    - pads[i] as i128;
                if p < 0 || p >= image[i] as i128 {
                    inside = false;
                    break;
                }
                flat = flat * image[i] + p as usize;
            }
            if inside {
                lists[flat].push((b * len + l) as i64);
            }
        }
    }
    let most = lists.iter().map(|l| l.len()).max().unwrap_or(0);
    let mut out_dims = vec![batch, channels];
    out_dims.extend(&image);
    if most == 0 {
        return one(Tensor::zeros(&out_dims, x.dtype()));
    }
    let zero = (kernel * len) as i64;
    let idx = table_of(folded_len(n, "image_shape", &[pixels, most])?, |e| {
        lists[e / most].get(e % most).copied().unwrap_or(zero)
    })?;
    let cols = x
        .reshape(&[batch, channels, kernel * len])
        .pad(&[(0, 0), (0, 0), (0, 1)], 0.0);
    let picked = cols.index_select(2, &Tensor::from_vec(idx, &[pixels * most])?);
    let y = picked
        .reshape(&[batch, channels, pixels, most])
        .sum(3, false);
    one(y.reshape(&out_dims))
}
