//! DeformConv (2-D): a convolution whose every tap reads the image at its
//! position plus a learned, traced offset, bilinearly with zeros outside
//! (as the ONNX reference samples it, through GridSample's linear, zeros
//! padding, align_corners taps). The sampled columns (times the mask) are
//! gathered per offset group, then each group is one batched matmul with
//! its weights.

use super::super::{attr_i, attr_ints, fail, one, opt, req, usizes, Cx};
use super::grid_sample::{axis_taps, Mode, Padding};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::ErrorKind;

pub(in super::super) fn check_deform_conv(n: &Node, _: &Cx) -> Result<()> {
    if let Some(k) = attr_ints(n, "kernel_shape")? {
        if k.len() != 2 {
            return Err(fail(
                n,
                "kernel_shape",
                ErrorKind::Unsupported,
                format!(
                    "{}-D deformable convolutions are not supported (2-D is)",
                    k.len()
                ),
            ));
        }
    }
    for name in ["group", "offset_group"] {
        if attr_i(n, name, 1)? < 1 {
            return Err(fail(n, name, ErrorKind::BadArgument, "must be positive"));
        }
    }
    for (name, len) in [("dilations", 2), ("strides", 2), ("pads", 4)] {
        if let Some(v) = attr_ints(n, name)? {
            let v = usizes(n, name, v)?;
            if v.len() != len || (name != "pads" && v.contains(&0)) {
                return Err(fail(
                    n,
                    name,
                    ErrorKind::BadArgument,
                    format!("needs {len} values (positive strides and dilations)"),
                ));
            }
        }
    }
    Ok(())
}

pub(in super::super) fn build_deform_conv(
    n: &Node,
    cx: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    check_deform_conv(n, cx)?;
    let (x, w, off) = (req(n, ins, 0)?, req(n, ins, 1)?, req(n, ins, 2)?);
    let list = |name: &str, default: usize, len: usize| -> Result<Vec<usize>> {
        Ok(match attr_ints(n, name)? {
            Some(v) => usizes(n, name, v)?,
            None => vec![default; len],
        })
    };
    let (strides, dil, pads) = (
        list("strides", 1, 2)?,
        list("dilations", 1, 2)?,
        list("pads", 0, 4)?,
    );
    let group = attr_i(n, "group", 1)? as usize;
    let og = attr_i(n, "offset_group", 1)? as usize;
    let shape_err = |m: String| Err(fail(n, "X", ErrorKind::Shape, m));
    if x.rank() != 4 || w.rank() != 4 || off.rank() != 4 {
        return shape_err(format!(
            "X {:?}, W {:?} and offset {:?} must be 4-D",
            x.shape(),
            w.shape(),
            off.shape()
        ));
    }
    let (batch, c, h, wd) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let (oc, cg, kh, kw) = (w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]);
    let (oh, ow) = (off.shape()[2], off.shape()[3]);
    let t = super::super::folded_len(n, "W", &[kh, kw])?;
    // Numbers from the file: an overflow is a mismatch, never a wrap.
    let span = |i: usize, k: usize, len: usize| -> Option<usize> {
        let reach = k.checked_sub(1)?.checked_mul(dil[i])?.checked_add(1)?;
        len.checked_add(pads[i])?
            .checked_add(pads[i + 2])?
            .checked_sub(reach)
            .map(|r| r / strides[i] + 1)
    };
    if Some(c) != cg.checked_mul(group)
        || oc % group != 0
        || c % og != 0
        || kh == 0
        || kw == 0
        || off.shape()[0] != batch
        || Some(off.shape()[1]) != og.checked_mul(t).and_then(|x| x.checked_mul(2))
        || span(0, kh, h) != Some(oh)
        || span(1, kw, wd) != Some(ow)
    {
        return shape_err(format!(
            "X {:?}, W {:?}, offset {:?} do not fit group {group}, offset_group {og}",
            x.shape(),
            w.shape(),
            off.shape()
        ));
    }
    // One traced product per group, checked before anything is built.
    super::super::unrolled(n, "group", "groups", group)?;
    let p = super::super::folded_len(n, "offset", &[oh, ow])?;
    let mut y_dims = vec![batch, oc, oh, ow];
    if batch == 0 || p == 0 || oc == 0 {
        return one(Tensor::zeros(&y_dims, x.dtype()));
    }
    super::super::folded_len(n, "offset", &[t, p])?;
    let off = off.cast(x.dtype()).reshape(&[batch, og, t, 2, p]);
    // Each tap's position before its offset, [1, 1, t, p].
    let base = |axis: usize| -> Result<Tensor> {
        let mut v = Vec::with_capacity(t * p);
        for k in 0..t {
            let tap = if axis == 0 { k / kw } else { k % kw };
            for q in 0..p {
                let o = if axis == 0 { q / ow } else { q % ow };
                v.push((o * strides[axis] + tap * dil[axis]) as f64 - pads[axis] as f64);
            }
        }
        Ok(Tensor::from_vec(v, &[1, 1, t, p])?.cast(x.dtype()))
    };
    let ys = off.slice(3, 0, 1).reshape(&[batch, og, t, p]) + base(0)?;
    let xs = off.slice(3, 1, 2).reshape(&[batch, og, t, p]) + base(1)?;
    let border = (0.0, 0.0);
    let ytaps = axis_taps(&ys, h, Mode::Linear, Padding::Zeros, border);
    let xtaps = axis_taps(&xs, wd, Mode::Linear, Padding::Zeros, border);
    let per = c / og;
    let img = x.reshape(&[batch, og, per, h * wd]);
    let mut cols: Option<Tensor> = None;
    for (yi, yw) in &ytaps {
        for (xi, xw) in &xtaps {
            let pos = (yi * wd as i64 + xi)
                .reshape(&[batch, og, 1, t * p])
                .broadcast_to(&[batch, og, per, t * p]);
            let wt = (yw * xw).reshape(&[batch, og, 1, t * p]);
            let v = img.gather(3, &pos) * wt;
            cols = Some(match cols {
                Some(a) => a + v,
                None => v,
            });
        }
    }
    let Some(mut cols) = cols else {
        return shape_err("no taps".into());
    };
    if let Some(mask) = opt(ins, 4) {
        if mask.shape() != [batch, og * t, oh, ow] {
            return Err(fail(
                n,
                "mask",
                ErrorKind::Shape,
                format!("{:?}, not [{batch}, {}, {oh}, {ow}]", mask.shape(), og * t),
            ));
        }
        cols = cols * mask.cast(x.dtype()).reshape(&[batch, og, 1, t * p]);
    }
    let cols = cols.reshape(&[batch, c * t, p]);
    let ocg = oc / group;
    let mut outs = Vec::with_capacity(group);
    for g in 0..group {
        let cg_t = (cg * t) as isize;
        let part = cols.slice(1, g as isize * cg_t, (g as isize + 1) * cg_t);
        let wg = w
            .slice(0, (g * ocg) as isize, ((g + 1) * ocg) as isize)
            .reshape(&[1, ocg, cg * t])
            .broadcast_to(&[batch, ocg, cg * t]);
        outs.push(wg.matmul(&part));
    }
    let mut y = if outs.len() == 1 {
        outs.remove(0)
    } else {
        Tensor::cat(&outs.iter().collect::<Vec<_>>(), 1)
    };
    if let Some(b) = opt(ins, 3) {
        if b.numel() != oc {
            return Err(fail(
                n,
                "B",
                ErrorKind::Shape,
                format!("{:?}, not [{oc}]", b.shape()),
            ));
        }
        y = y + b.cast(x.dtype()).reshape(&[1, oc, 1]);
    }
    y_dims.truncate(4);
    one(y.reshape(&y_dims))
}
