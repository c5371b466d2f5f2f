//! Convolutions whose weights are kept packed in panels
//! ([`PackedPanels`]): `out^T [pixels, outputs] = windows [pixels, k] @
//! w^T [k, outputs]`, the windows read in place from the image through a
//! row offset per output pixel and a column offset per tap
//! ([`Lhs::Windows`]); the image is copied once per call when the window
//! has padding or a column stride it covers (then by column phases). No
//! column matrix is built and the weights are not packed per call, where
//! `gemm`'s path writes the window rows (`k x pixels` floats) and then
//! packs them and the weights again. The product is `panels.rs`'s kernel,
//! which gathers six pixels' windows at a time and writes the output
//! through its columns (an NCHW image's channel rows). The gather costs
//! about what `gemm` spends on window rows, so the path pays where the
//! weights outnumber the windows (late layers); the runtime keeps `gemm`
//! for the others.

use super::conv::{pad_planes, phased_stride, with_scratch, Phases};
use super::panels::{matmul_f32_panels_from, Lhs, PackedPanels};
use super::GemmView;
use crate::CodegenError;
use std::cell::RefCell;
use tilejit_ir::kernel::Im2Col;

thread_local! {
    /// One image with its zero padding: `[c, hp, wp]`, its rows stored by
    /// column phases at a stride its windows cover.
    static PADDED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// One image's convolution of one channel group (`ic.window.groups` must
/// be 1): `out`'s rows (`ov`: the output channels by `oh * ow` pixels, unit
/// column stride) from `img` (`[c, h, w]`) of geometry `ic` and the
/// weights `w` packed as `[c * kh * kw, outputs]`, on up to `threads`
/// threads. An error when the shapes disagree or a view does not fit.
pub fn conv_f32_panels(
    img: &[f32],
    ic: &Im2Col,
    w: &PackedPanels,
    (out, ov): (&mut [f32], GemmView),
    threads: usize,
) -> Result<(), CodegenError> {
    let win = ic.window;
    let (kh, kw) = (win.kh as usize, win.kw as usize);
    let (oh, ow) = win.out(ic.h, ic.w).unwrap_or((0, 0));
    let [pt, pl, pb, pr] = win.pad.map(|p| p as usize);
    let (hp, wp) = (ic.h + pt + pb, ic.w + pl + pr);
    let k = ic.c.checked_mul(kh).and_then(|x| x.checked_mul(kw));
    let image = ic.c.checked_mul(ic.h).and_then(|x| x.checked_mul(ic.w));
    let padded = ic.c.checked_mul(hp).and_then(|x| x.checked_mul(wp));
    let (Some(image), Some(padded)) = (image, padded) else {
        return Err(bad(format!("{ic:?} is too big")));
    };
    if win.groups != 1
        || k != Some(w.shape().0)
        || ov.rows != w.shape().1
        || oh.checked_mul(ow) != Some(ov.cols)
        || ov.col_stride != 1
        || img.len() < image
    {
        return Err(bad(format!(
            "image of {} elements ({ic:?}), packed weights {:?} -> {ov:?} do not fit",
            img.len(),
            w.shape()
        )));
    }
    // The output as `[pixels, outputs]` through its columns.
    let ot = ov.transposed();
    let (sh, sw) = (win.stride.0 as usize, win.stride.1 as usize);
    let (dh, dw) = (win.dilation.0 as usize, win.dilation.1 as usize);
    // At a column stride the window covers, the image is copied stored by
    // column phases (`pad_image_phased`): six neighbouring pixels' values
    // of a tap are then six neighbouring floats, which the kernel's
    // gather copies as one run.
    let phased = phased_stride((kh, dh, sh), (kw, dw, sw));
    let ph = Phases::new(wp, if phased { sw } else { 1 });
    let (wps, step) = (ph.row(), if phased { 1 } else { sw });
    let rows: Vec<usize> = (0..oh * ow)
        .map(|p| (p / ow * sh) * wps + p % ow * step)
        .collect();
    let cols: Vec<usize> = (0..k.unwrap_or(0))
        .map(|q| {
            let (ci, i, j) = (q / (kh * kw), q / kw % kh, q % kw);
            (ci * hp + i * dh) * wps + ph.at(j * dw)
        })
        .collect();
    let mut product = |x: &[f32]| {
        let windows = Lhs::Windows {
            x,
            rows: &rows,
            cols: &cols,
        };
        matmul_f32_panels_from(windows, w, (&mut *out, ot), threads)
    };
    if win.pad == [0; 4] && !phased {
        return product(&img[..image]);
    }
    let len = match phased {
        true => ic.c.checked_mul(hp).and_then(|x| x.checked_mul(wps)),
        false => Some(padded),
    };
    let len = len.ok_or_else(|| bad(format!("{ic:?} is too big")))?;
    with_scratch(&PADDED, len, |x| {
        let sw = if phased { sw } else { 1 };
        pad_planes(
            &img[..image],
            (ic.h, ic.w),
            (pt, pl),
            (hp, wp),
            sw,
            x,
            threads,
        );
        product(x)
    })
}

fn bad(message: String) -> CodegenError {
    CodegenError::Launch {
        kernel: "conv".into(),
        message,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use tilejit_ir::graph::Window;

    /// The definition, summed in f64: `[o, oh * ow]` from OIHW weights
    /// (one group).
    pub(in super::super) fn direct(img: &[f32], w: &[f32], ic: &Im2Col, o: usize) -> Vec<f64> {
        let (oh, ow) = ic.window.out(ic.h, ic.w).expect("a window that fits");
        let k = ic.c * ic.window.size();
        let mut out = vec![0.0; o * oh * ow];
        for oc in 0..o {
            for p in 0..oh * ow {
                out[oc * oh * ow + p] = (0..k)
                    .filter_map(|q| ic.element(p, q, 0).map(|e| (q, e)))
                    .map(|(q, e)| img[e] as f64 * w[oc * k + q] as f64)
                    .sum();
            }
        }
        out
    }

    /// Strides, dilation, asymmetric and no padding (the image read in
    /// place), partial panels, on one to three threads, into rows with
    /// gaps that stay untouched: against the definition.
    #[test]
    fn windows_in_place_match_the_definition() {
        let value = |i: usize, s: usize| ((i * 41 + s * 13) % 23) as f32 / 11.0 - 1.0;
        let cases = [
            // (c, o, h, w, kh, stride, dilation, pad)
            (3, 40, 23, 21, 7, (2, 2), 1, [3, 3, 3, 3]),
            (5, 16, 9, 11, 3, (2, 2), 1, [1, 1, 1, 1]),
            (4, 33, 8, 8, 3, (1, 1), 2, [2, 0, 1, 2]),
            (6, 20, 7, 9, 1, (2, 2), 1, [0, 0, 0, 0]),
            (2, 17, 6, 5, 3, (1, 1), 1, [0, 0, 0, 0]),
            (3, 18, 10, 13, 3, (1, 3), 1, [1, 2, 0, 1]),
            (3, 18, 13, 10, 3, (3, 1), 1, [0, 0, 0, 0]),
            // Stride 2 without padding (the image copied by column phases
            // all the same), dilated; stride 4 under a 5-wide window.
            (4, 12, 11, 14, 3, (2, 2), 2, [0, 0, 0, 0]),
            (2, 9, 9, 30, 5, (4, 4), 1, [2, 1, 2, 2]),
        ];
        for (c, o, h, w, kh, stride, d, pad) in cases {
            let ic = Im2Col {
                c,
                h,
                w,
                window: Window {
                    pad,
                    stride,
                    dilation: (d, d),
                    ..Window::square(kh, kh, 1, 0)
                },
            };
            let (oh, ow) = ic.window.out(h, w).expect("a window that fits");
            let (p, k) = (oh * ow, c * kh as usize * kh as usize);
            let img: Vec<f32> = (0..c * h * w).map(|i| value(i, 1)).collect();
            let wt: Vec<f32> = (0..o * k).map(|i| value(i, 2)).collect();
            let want = direct(&img, &wt, &ic, o);
            // OIHW read transposed: `[k, o]`.
            let bv = GemmView {
                offset: 0,
                rows: k,
                cols: o,
                row_stride: 1,
                col_stride: k,
            };
            let packed = PackedPanels::new(&wt, bv).expect("fits");
            for threads in [1, 2, 3] {
                let rs = p + 2;
                let mut out = vec![f32::NAN; o * rs];
                let ov = GemmView {
                    offset: 0,
                    rows: o,
                    cols: p,
                    row_stride: rs,
                    col_stride: 1,
                };
                conv_f32_panels(&img, &ic, &packed, (&mut out, ov), threads).expect("fits");
                for oc in 0..o {
                    for q in 0..p {
                        let (g, r) = (out[oc * rs + q] as f64, want[oc * p + q]);
                        assert!(
                            (g - r).abs() <= 1e-5 * (1.0 + r.abs()),
                            "{ic:?} o {oc} pixel {q}: {g} vs {r} ({threads} threads)"
                        );
                    }
                    assert!(out[oc * rs + p..(oc + 1) * rs].iter().all(|x| x.is_nan()));
                }
            }
        }
    }

    /// Shapes that disagree are errors, never a read out of bounds.
    #[test]
    fn shapes_that_disagree_are_errors() {
        let ic = Im2Col {
            c: 2,
            h: 5,
            w: 5,
            window: Window::square(3, 3, 1, 1),
        };
        let wt = vec![0.5; 4 * 18];
        let bv = |k| GemmView {
            offset: 0,
            rows: k,
            cols: 4,
            row_stride: 1,
            col_stride: k,
        };
        let packed = PackedPanels::new(&wt, bv(18)).expect("fits");
        let img = vec![1.0; 50];
        let ov = GemmView::row_major(4, 25);
        let mut out = vec![0.0; 100];
        assert!(conv_f32_panels(&img, &ic, &packed, (&mut out, ov), 1).is_ok());
        // The middle of a constant image: 18 taps of 0.5.
        assert_eq!(out[6], 9.0);
        assert!(conv_f32_panels(&img[1..], &ic, &packed, (&mut out, ov), 1).is_err());
        assert!(conv_f32_panels(&img, &ic, &packed, (&mut out[1..], ov), 1).is_err());
        let wide = GemmView { cols: 24, ..ov };
        assert!(conv_f32_panels(&img, &ic, &packed, (&mut out, wide), 1).is_err());
        let short = PackedPanels::new(&wt, bv(9)).expect("fits");
        assert!(conv_f32_panels(&img, &ic, &short, (&mut out, ov), 1).is_err());
        let grouped = Im2Col {
            window: Window {
                groups: 2,
                ..ic.window
            },
            ..ic
        };
        assert!(conv_f32_panels(&img, &grouped, &packed, (&mut out, ov), 1).is_err());
    }
}
