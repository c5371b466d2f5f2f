//! Unpadded convolutions of 1 to 3 spatial axes on `conv2d_with`: 1-D as
//! a one-high image, 3-D as a sum over the depth taps of 2-D convolutions
//! of depth slices folded into the batch.

use super::super::fail;
use crate::conv::Conv2d;
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::ErrorKind;

/// `x` `[n, c, s..]` by weights `[o, c/groups, k..]`, no padding. `x`
/// may be the error tensor of a pad or crop before it, and each 2-D conv
/// may fail (channels, a window past the image): their errors are
/// returned before any of their axes is read.
pub(in super::super) fn conv_nd(
    n: &Node,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    strides: &[usize],
    dil: &[usize],
    groups: usize,
) -> Result<Tensor> {
    let opts = |i: usize, j: usize| Conv2d {
        stride: (strides[i], strides[j]),
        padding: (0, 0),
        dilation: (dil[i], dil[j]),
        groups,
    };
    let (x, w) = (x.check()?, w.check()?);
    match strides.len() {
        1 => {
            let (xs, ws) = (x.shape(), w.shape());
            let x2 = x.reshape(&[xs[0], xs[1], 1, xs[2]]);
            let w2 = w.reshape(&[ws[0], ws[1], 1, ws[2]]);
            let o = Conv2d {
                stride: (1, strides[0]),
                padding: (0, 0),
                dilation: (1, dil[0]),
                groups,
            };
            let y = x2.conv2d_with(&w2, bias, o);
            let s = y.check()?.shape().to_vec();
            Ok(y.reshape(&[s[0], s[1], s[3]]))
        }
        2 => Ok(x.conv2d_with(w, bias, opts(0, 1))),
        3 => {
            let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
            let span = ws[2]
                .checked_sub(1)
                .and_then(|s| s.checked_mul(dil[0]))
                .and_then(|s| s.checked_add(1));
            let Some(span) = span.filter(|&s| s <= xs[2]) else {
                return Err(fail(
                    n,
                    "X",
                    ErrorKind::Shape,
                    format!(
                        "depth {} is shorter than the kernel's {} taps at dilation {}",
                        xs[2], ws[2], dil[0]
                    ),
                ));
            };
            let depth = (xs[2] - span) / strides[0] + 1;
            super::super::unrolled(n, "W", "depth taps", ws[2])?;
            let mut acc: Option<Tensor> = None;
            for t in 0..ws[2] {
                let start = t * dil[0];
                // Depth slices t*dil, t*dil + stride, ..: [n, c, depth, h, w].
                let xs_t = x.slice_step(
                    2,
                    start as isize,
                    (start + (depth - 1) * strides[0] + 1) as isize,
                    strides[0] as isize,
                );
                let folded =
                    xs_t.permute(&[0, 2, 1, 3, 4])
                        .reshape(&[xs[0] * depth, xs[1], xs[3], xs[4]]);
                let wt = w
                    .slice(2, t as isize, t as isize + 1)
                    .reshape(&[ws[0], ws[1], ws[3], ws[4]]);
                let y = folded.conv2d_with(&wt, None, opts(1, 2));
                acc = Some(match acc {
                    None => y,
                    Some(a) => a + y,
                });
            }
            let y = acc.expect("a kernel has at least one tap");
            let s = y.check()?.shape().to_vec();
            let mut y = y
                .reshape(&[xs[0], depth, s[1], s[2], s[3]])
                .permute(&[0, 2, 1, 3, 4]);
            if let Some(b) = bias {
                y = y + b.reshape(&[ws[0], 1, 1, 1]);
            }
            Ok(y)
        }
        k => Err(fail(
            n,
            "kernel_shape",
            ErrorKind::Unsupported,
            format!("{k}-D convolutions are not supported (1-D to 3-D are)"),
        )),
    }
}
