//! CenterCropPad and Col2Im: layout ops whose geometry is known at trace
//! time. CenterCropPad is a slice and a zero pad per axis; Col2Im (the
//! inverse of im2col, a scatter-add of blocks) reads, for every image
//! pixel, the column entries that land on it through one constant-index
//! `index_select`, padding missing entries from an appended zero column,
//! and sums them.

use super::super::{attr_ints, axis, fail, ints_of, mem, one, req, usizes, Cx};
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
    let kernel: usize = block.iter().product();
    let (batch, rows, len) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    if kernel == 0 || rows % kernel != 0 {
        return bad(format!(
            "input dim 1 ({rows}) is not a multiple of the block size {kernel}"
        ));
    }
    // Blocks along each axis.
    let mut counts = Vec::with_capacity(k);
    for i in 0..k {
        let span = dil[i] * (block[i] - 1) + 1;
        let total = image[i] + pads[i] + pads[i + k];
        if total < span || block[i] == 0 {
            return bad(format!("block {block:?} does not fit image {image:?}"));
        }
        counts.push((total - span) / strides[i] + 1);
    }
    if counts.iter().product::<usize>() != len {
        return bad(format!(
            "input dim 2 is {len}, but the image holds {counts:?} blocks"
        ));
    }
    let channels = rows / kernel;
    let pixels: usize = image.iter().product();
    // For every pixel, the flat (block offset, block) entries landing on it.
    let mut lists: Vec<Vec<i64>> = mem(tilejit_ir::fallible::filled(pixels, Vec::new()))?;
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
                let p = (pos[i] * strides[i] + off[i] * dil[i]) as i64 - pads[i] as i64;
                if p < 0 || p >= image[i] as i64 {
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
    let idx: Vec<i64> = lists
        .iter()
        .flat_map(|l| (0..most).map(move |j| l.get(j).copied().unwrap_or(zero)))
        .collect();
    let cols = x
        .reshape(&[batch, channels, kernel * len])
        .pad(&[(0, 0), (0, 0), (0, 1)], 0.0);
    let picked = cols.index_select(2, &Tensor::from_vec(idx, &[pixels * most])?);
    let y = picked
        .reshape(&[batch, channels, pixels, most])
        .sum(3, false);
    one(y.reshape(&out_dims))
}
