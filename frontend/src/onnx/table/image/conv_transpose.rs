//! ConvTranspose (1-D to 3-D). Without overlap (kernel = stride, no
//! dilation, one group: a U-Net's 2x upsampling) it is one GEMM whose
//! taps are interleaved into the output; otherwise a convolution of the
//! input spread out by the strides with the flipped, transposed weights.
//! Either way the full result is then cropped or zero-extended to the
//! window the pads, output_padding and output_shape select.

use super::super::{
    attr_i, attr_ints, attr_s, conv_rank, fail, one, opt, req, table_of, usizes, Cx,
};
use super::conv_nd::conv_nd;
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::ErrorKind;

pub(in super::super) fn check_conv_transpose(n: &Node, cx: &Cx) -> Result<()> {
    conv_rank(n, cx, "transposed convolutions")?;
    match attr_s(n, "auto_pad", "NOTSET")? {
        "NOTSET" | "VALID" | "SAME_UPPER" | "SAME_LOWER" => {}
        a => {
            return Err(fail(
                n,
                "auto_pad",
                ErrorKind::BadArgument,
                format!("`{a}` is not an auto_pad mode"),
            ))
        }
    }
    if attr_i(n, "group", 1)? < 1 {
        return Err(fail(n, "group", ErrorKind::BadArgument, "must be positive"));
    }
    Ok(())
}

fn per_axis(n: &Node, name: &str, k: usize, default: usize) -> Result<Vec<usize>> {
    match attr_ints(n, name)? {
        Some(v) if v.len() == k => usizes(n, name, v),
        Some(v) => Err(fail(
            n,
            name,
            ErrorKind::BadArgument,
            format!("has {} values for {k} spatial axes", v.len()),
        )),
        None => Ok(vec![default; k]),
    }
}

pub(in super::super) fn build_conv_transpose(
    n: &Node,
    _: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let (x, w) = (req(n, ins, 0)?, req(n, ins, 1)?);
    let k = w.rank().saturating_sub(2);
    if !(1..=3).contains(&k) || x.rank() != w.rank() {
        return Err(fail(
            n,
            "W",
            ErrorKind::Shape,
            format!(
                "weights {:?} for input {:?}: both must be [N, C, 1 to 3 spatial dims]",
                w.shape(),
                x.shape()
            ),
        ));
    }
    let groups = attr_i(n, "group", 1)? as usize;
    let (ci, co_g) = (w.shape()[0], w.shape()[1]);
    if x.shape()[1] != ci || ci % groups != 0 {
        return Err(fail(
            n,
            "W",
            ErrorKind::Shape,
            format!(
                "weights [C_in = {ci}, ..] for {} input channels in {groups} groups",
                x.shape()[1]
            ),
        ));
    }
    let kernel = w.shape()[2..].to_vec();
    let strides = per_axis(n, "strides", k, 1)?;
    let dil = per_axis(n, "dilations", k, 1)?;
    let out_pad = per_axis(n, "output_padding", k, 0)?;
    if strides.contains(&0) || dil.contains(&0) {
        return Err(fail(
            n,
            "strides",
            ErrorKind::BadArgument,
            "strides and dilations must be positive",
        ));
    }
    let img = &x.shape()[2..];
    if img.contains(&0) || kernel.contains(&0) {
        return Err(fail(
            n,
            "X",
            ErrorKind::Shape,
            format!("an empty spatial dim: image {img:?}, kernel {kernel:?}"),
        ));
    }
    // Lengths from the file's attributes: too large is an error, never an
    // overflow.
    let too_large = || {
        fail(
            n,
            "strides",
            ErrorKind::BadArgument,
            "the output's lengths overflow (strides, dilations, pads or output_shape too large)",
        )
    };
    // The full result's length per axis, before pads and output_padding.
    let full: Vec<i64> = (0..k)
        .map(|i| {
            let spread = strides[i].checked_mul(img[i] - 1)?;
            let reach = (kernel[i] - 1).checked_mul(dil[i])?;
            i64::try_from(spread.checked_add(reach)?.checked_add(1)?).ok()
        })
        .collect::<Option<_>>()
        .ok_or_else(too_large)?;
    let out_shape = match attr_ints(n, "output_shape")? {
        // output_shape may list the spatial dims only, or every dim.
        Some(s) if s.len() == k + 2 => Some(s[2..].to_vec()),
        Some(s) if s.len() == k => Some(s),
        Some(s) => {
            return Err(fail(
                n,
                "output_shape",
                ErrorKind::BadArgument,
                format!("has {} values for {k} spatial axes", s.len()),
            ))
        }
        None => None,
    };
    let auto = attr_s(n, "auto_pad", "NOTSET")?;
    // Per axis: the full result's index of output 0, and the output length.
    let window: Vec<(i64, i64)> = match (auto, attr_ints(n, "pads")?) {
        ("SAME_UPPER" | "SAME_LOWER", None) => (0..k)
            .map(|i| {
                let len = match &out_shape {
                    Some(s) => s[i],
                    None => i64::try_from(img[i].checked_mul(strides[i])?).ok()?,
                };
                let total = full[i]
                    .checked_add(i64::try_from(out_pad[i]).ok()?)?
                    .checked_sub(len)?;
                let begin = if auto == "SAME_UPPER" {
                    total.div_euclid(2)
                } else {
                    total - total.div_euclid(2)
                };
                Some((begin, len))
            })
            .collect::<Option<_>>()
            .ok_or_else(too_large)?,
        (_, pads) => {
            let pads = match pads {
                Some(p) if p.len() == 2 * k => p,
                Some(p) => {
                    return Err(fail(
                        n,
                        "pads",
                        ErrorKind::BadArgument,
                        format!("has {} values for {k} spatial axes", p.len()),
                    ))
                }
                None => vec![0; 2 * k],
            };
            (0..k)
                .map(|i| {
                    let len = match &out_shape {
                        Some(s) => s[i],
                        None => full[i]
                            .checked_add(i64::try_from(out_pad[i]).ok()?)?
                            .checked_sub(pads[i])?
                            .checked_sub(pads[i + k])?,
                    };
                    Some((pads[i], len))
                })
                .collect::<Option<_>>()
                .ok_or_else(too_large)?
        }
    };
    if window.iter().any(|&(_, len)| len < 1) {
        return Err(fail(
            n,
            "pads",
            ErrorKind::BadArgument,
            format!("the output would be empty: (start, length) per axis {window:?}"),
        ));
    }
    let overlap_free = groups == 1 && dil.iter().all(|&d| d == 1) && kernel == strides;
    let y = if overlap_free {
        gemm_interleave(x, w)
    } else {
        spread_conv(n, x, w, groups, &strides, &dil, &window)?
    };
    let mut y = y;
    // The spread convolution already produced exactly the window.
    if overlap_free {
        for (i, &(b, len)) in window.iter().enumerate() {
            y = shift(n, &y, i + 2, b, len)?;
        }
    }
    if let Some(b) = opt(ins, 2) {
        let mut s = vec![1; k + 2];
        s[1] = co_g * groups;
        y = y + b.reshape(&s);
    }
    one(y)
}

/// `out[o] = t[o + begin]` along `axis` for `o < len`, zero past `t`;
/// the error of an op that failed (a size past the limits: its error
/// tensor has no axes to index).
fn shift(n: &Node, t: &Tensor, axis: usize, begin: i64, len: i64) -> Result<Tensor> {
    let mut y = t.check()?.clone();
    let mut pads = vec![(0, 0); t.rank()];
    if begin < 0 {
        let Some(before) = begin.checked_neg() else {
            return Err(fail(
                n,
                "pads",
                ErrorKind::BadArgument,
                format!("a window starting at {begin}"),
            ));
        };
        pads[axis].0 = before as usize;
        y = y.pad(&pads, 0.0);
        pads[axis].0 = 0;
    } else if begin > 0 {
        y = y.slice(axis as isize, begin as isize, y.shape()[axis] as isize);
    }
    let cur = y.check()?.shape()[axis] as i64;
    if cur < len {
        pads[axis].1 = (len - cur) as usize;
        y = y.pad(&pads, 0.0);
    } else if cur > len {
        y = y.slice(axis as isize, 0, len as isize);
    }
    Ok(y)
}

/// Kernel = stride: each input pixel owns its own output block, so the
/// result is `x^T W` with the taps moved beside their pixels.
fn gemm_interleave(x: &Tensor, w: &Tensor) -> Tensor {
    let (nb, ci, img) = (x.shape()[0], x.shape()[1], x.shape()[2..].to_vec());
    let (co, kernel) = (w.shape()[1], w.shape()[2..].to_vec());
    let k = img.len();
    let pixels: usize = img.iter().product();
    let taps: usize = kernel.iter().product();
    let mut perm = vec![0];
    perm.extend(2..k + 2);
    perm.push(1);
    let rows = x.permute(&perm).reshape(&[nb * pixels, ci]);
    let y = rows.matmul(&w.reshape(&[ci, co * taps]));
    // [n, s1.., co, k1..] -> [n, co, s1, k1, s2, k2, ..].
    let mut dims = vec![nb];
    dims.extend(&img);
    dims.push(co);
    dims.extend(&kernel);
    let mut perm = vec![0, k + 1];
    for i in 0..k {
        perm.push(1 + i);
        perm.push(k + 2 + i);
    }
    let mut out = vec![nb, co];
    out.extend((0..k).map(|i| img[i] * kernel[i]));
    y.reshape(&dims).permute(&perm).reshape(&out)
}

/// The general case: spread the input by the strides, pad (or crop) it so
/// a stride-1 convolution with the flipped, transposed weights yields
/// exactly the output window.
fn spread_conv(
    n: &Node,
    x: &Tensor,
    w: &Tensor,
    groups: usize,
    strides: &[usize],
    dil: &[usize],
    window: &[(i64, i64)],
) -> Result<Tensor> {
    let k = strides.len();
    let (ci, co_g, kernel) = (w.shape()[0], w.shape()[1], w.shape()[2..].to_vec());
    // [C_in, C_out/g, k..] -> [C_out, C_in/g, k..], each tap mirrored.
    let mut ws = vec![groups, ci / groups, co_g];
    ws.extend(&kernel);
    let mut perm = vec![0, 2, 1];
    perm.extend(3..k + 3);
    let mut wt_shape = vec![groups * co_g, ci / groups];
    wt_shape.extend(&kernel);
    let mut wt = w.reshape(&ws).permute(&perm).reshape(&wt_shape);
    for (i, &kk) in kernel.iter().enumerate() {
        let rev = Tensor::from_vec(table_of(kk, |i| (kk - 1 - i) as i64)?, &[kk])?;
        wt = wt.index_select((i + 2) as isize, &rev);
    }
    let mut xd = x.clone();
    for i in 0..k {
        let (a, s) = (i + 2, strides[i]);
        // An op past the limits left an error tensor, without axes.
        let len = xd.check()?.shape()[a];
        // One element spreads to itself, whatever the stride.
        if s > 1 && len > 1 {
            // Interleave s-1 zeros after each element, then drop the last.
            let mut sh = xd.shape().to_vec();
            sh.insert(a + 1, 1);
            let mut pads = vec![(0, 0); sh.len()];
            pads[a + 1] = (0, s - 1);
            let mut merged = xd.shape().to_vec();
            merged[a] = len * s;
            xd = xd.reshape(&sh).pad(&pads, 0.0).reshape(&merged).slice(
                a as isize,
                0,
                (s * (len - 1) + 1) as isize,
            );
        }
        // Full index j reads spread input j - span..=j: output o is full
        // o + begin, so the spread input starts at begin - span.
        // (`build_conv_transpose` checked this product.)
        let span = ((kernel[i] - 1) * dil[i]) as i64;
        let (begin, len) = window[i];
        let (Some(from), Some(len)) = (begin.checked_sub(span), len.checked_add(span)) else {
            return Err(fail(
                n,
                "pads",
                ErrorKind::BadArgument,
                format!("a window of {len} from {begin} on axis {i} overflows"),
            ));
        };
        xd = shift(n, &xd, a, from, len)?;
    }
    conv_nd(n, &xd, &wt, None, &vec![1; k], dil, groups)
}
