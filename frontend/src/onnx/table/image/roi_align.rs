//! RoiAlign with a fixed `sampling_ratio` (the samples per bin; 0, a
//! count that depends on each roi's size, would make the shape depend on
//! data and is an error at load). The rois are data, so the sample
//! coordinates are traced, per axis as the ONNX reference
//! (`op_roi_align.py`) computes them: samples outside `[-1, size]` weigh
//! 0, the rest are clamped into the image, and the 4 bilinear corners are
//! read with one `gather` each from the roi's image (an `index_select` by
//! batch index, which is an error when it runs on a bad index).

use super::super::{attr_f, attr_i, attr_s, fail, folded_len, one, req, table_of, Cx};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::{DType, ErrorKind};

pub(in super::super) fn check_roi_align(n: &Node, _: &Cx) -> Result<()> {
    match attr_s(n, "mode", "avg")? {
        "avg" | "max" => {}
        m => {
            return Err(fail(
                n,
                "mode",
                ErrorKind::Unsupported,
                format!("`{m}` is not avg or max"),
            ))
        }
    }
    match attr_s(n, "coordinate_transformation_mode", "half_pixel")? {
        "half_pixel" | "output_half_pixel" => {}
        m => {
            return Err(fail(
                n,
                "coordinate_transformation_mode",
                ErrorKind::Unsupported,
                format!("`{m}` is not half_pixel or output_half_pixel"),
            ))
        }
    }
    if attr_i(n, "sampling_ratio", 0)? < 1 {
        return Err(fail(
            n,
            "sampling_ratio",
            ErrorKind::Unsupported,
            "only a fixed sampling ratio (>= 1) is supported: 0 makes the sample count depend on the rois",
        ));
    }
    for name in ["output_height", "output_width"] {
        if attr_i(n, name, 1)? < 1 {
            return Err(fail(n, name, ErrorKind::BadArgument, "must be positive"));
        }
    }
    Ok(())
}

fn scalar(v: f64, like: &Tensor) -> Tensor {
    Tensor::full(&[], v, like.dtype())
}

/// One axis of the samples, `[R, out * ratio]` coordinates: the low and
/// high corner indices (i64), the low corner's weight, and whether the
/// sample lies inside `[-1, size]`.
fn corners(y: &Tensor, size: usize) -> (Tensor, Tensor, Tensor, Tensor) {
    let top = size as f64 - 1.0;
    let inside = y
        .ge(&scalar(-1.0, y))
        .cast(DType::I32)
        .minimum(&y.le(&scalar(size as f64, y)).cast(DType::I32));
    let yc = y.maximum(&scalar(0.0, y));
    let low = yc.floor();
    let clip = low.ge(&scalar(top, &low));
    let topt = scalar(top, &low);
    let lo = Tensor::where_cond(&clip, &topt, &low);
    let hi = Tensor::where_cond(&clip, &topt, &(&low + 1.0));
    let v = Tensor::where_cond(&clip, &topt, &yc);
    let frac = &v - &lo;
    let bound = |t: &Tensor| t.minimum(&topt).maximum(&scalar(0.0, t)).cast(DType::I64);
    (bound(&lo), bound(&hi), frac, inside)
}

pub(in super::super) fn build_roi_align(
    n: &Node,
    cx: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    check_roi_align(n, cx)?;
    let (x, rois, batch) = (req(n, ins, 0)?, req(n, ins, 1)?, req(n, ins, 2)?);
    let (oh, ow) = (
        attr_i(n, "output_height", 1)? as usize,
        attr_i(n, "output_width", 1)? as usize,
    );
    let sr = attr_i(n, "sampling_ratio", 0)? as usize;
    let scale = attr_f(n, "spatial_scale", 1.0)? as f64;
    let half = attr_s(n, "coordinate_transformation_mode", "half_pixel")? == "half_pixel";
    let max = attr_s(n, "mode", "avg")? == "max";
    let r = batch.numel();
    if x.rank() != 4 || rois.shape() != [r, 4] || batch.rank() != 1 {
        return Err(fail(
            n,
            "rois",
            ErrorKind::Shape,
            format!(
                "X {:?} needs rois [R, 4] and batch_indices [R], got {:?} and {:?}",
                x.shape(),
                rois.shape(),
                batch.shape()
            ),
        ));
    }
    let (c, h, w) = (x.shape()[1], x.shape()[2], x.shape()[3]);
    if r == 0 || h == 0 || w == 0 {
        return one(Tensor::zeros(&[r, c, oh, ow], x.dtype()));
    }
    let rois = rois.cast(x.dtype());
    let offset = if half { 0.5 } else { 0.0 };
    let col = |i: isize| &rois.slice(1, i, i + 1) * scale - offset;
    let (x0, y0, x1, y1) = (col(0), col(1), col(2), col(3));
    let mut rw = &x1 - &x0;
    let mut rh = &y1 - &y0;
    if !half {
        rw = rw.maximum(&scalar(1.0, &rw));
        rh = rh.maximum(&scalar(1.0, &rh));
    }
    // Sample `p * ratio + i` of an axis sits at start + (p + (i + 0.5) /
    // ratio) * bin.
    let steps = |out: usize, attr: &str| -> Result<Tensor> {
        let len = folded_len(n, attr, &[out, sr])?;
        let v = table_of(len, |k| {
            (k / sr) as f64 + ((k % sr) as f64 + 0.5) / sr as f64
        })?;
        Ok(Tensor::from_vec(v, &[1, len])?.cast(x.dtype()))
    };
    let ys = &y0 + steps(oh, "output_height")? * (&rh / oh as f64);
    let xs = &x0 + steps(ow, "output_width")? * (&rw / ow as f64);
    let (ylo, yhi, ly, yin) = corners(&ys, h);
    let (xlo, xhi, lx, xin) = corners(&xs, w);
    let (ph, pw) = (oh * sr, ow * sr);
    let col_y = |t: &Tensor| t.reshape(&[r, ph, 1]);
    let row_x = |t: &Tensor| t.reshape(&[r, 1, pw]);
    let inside = (col_y(&yin) * row_x(&xin)).cast(x.dtype());
    let (hy, hx) = (ly.rsub(1.0), lx.rsub(1.0));
    let img = x
        .index_select(0, &batch.cast(DType::I64))
        .reshape(&[r, c, h * w]);
    let points = ph * pw;
    let taps = [
        (&ylo, &xlo, &hy, &hx),
        (&ylo, &xhi, &hy, &lx),
        (&yhi, &xlo, &ly, &hx),
        (&yhi, &xhi, &ly, &lx),
    ];
    let mut acc: Option<Tensor> = None;
    for (yi, xi, wy, wx) in taps {
        let pos = (col_y(yi) * w as i64 + row_x(xi))
            .reshape(&[r, 1, points])
            .broadcast_to(&[r, c, points]);
        let wt = (col_y(wy) * row_x(wx) * &inside).reshape(&[r, 1, points]);
        let v = img.gather(2, &pos) * wt;
        acc = Some(match acc {
            None => v,
            Some(a) if max => a.maximum(&v),
            Some(a) => a + v,
        });
    }
    let Some(acc) = acc else {
        return Err(fail(n, "X", ErrorKind::Shape, "no taps"));
    };
    let s = acc.reshape(&[r, c, oh, sr, ow, sr]);
    let y = if max {
        s.max(5, false).max(3, false)
    } else {
        s.sum(5, false).sum(3, false) / (sr * sr) as f64
    };
    one(y)
}
