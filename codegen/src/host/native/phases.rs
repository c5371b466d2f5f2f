//! Convolutions of few window values per pixel (ResNet's stem: 3 channels
//! by a 7x7 window at stride 2, 147 values) with output pixels in vector
//! lanes. The padded image is split once per call into its stride phases:
//! at strides `(sh, sw)` each channel becomes `sh * sw` planes, plane `(a,
//! b)` holding the pixels `(sh * i + a, sw * j + b)`. A strided window is
//! then a stride-1 one over the phases, so a tap's values for 16
//! neighbouring output pixels of a row are 16 neighbouring elements of one
//! plane's row, loaded in place. A register tile of 6 output channels by
//! 16 pixels (12 AVX2 registers) or by 32 (12 AVX-512 registers: 16 pixels
//! in 6 ran the stem at 1.6-2.3 ms, 32 at 1.5-1.6) sums over the window values,
//! the weights packed per call as `[values, 6]` per block of 6 outputs.
//! `gemm`'s path writes every window value of every pixel (`k x pixels`
//! floats: 7.4 MB for the stem, against the image's 0.6 MB) and then packs
//! them again; here neither exists. It takes an image of at most
//! [`MAX_CHANNELS`] channels (a network's input) and [`MAX_K`] window
//! values per pixel: with more channels a tile's loads spread over more
//! planes than L1 holds (16- and 24-channel 3x3/2 layers ran up to 1.7x
//! slower here than through `gemm`, 64 channels 1.6x).

use super::conv::{check_views, with_scratch};
use super::GemmView;
use crate::CodegenError;
use rayon::prelude::*;
use std::cell::RefCell;
use std::ops::Range;
use tilejit_ir::kernel::Im2Col;

thread_local! {
    /// The image's stride phases: `[channels, sh * sw, hq, wq]`.
    static PHASES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The weights, packed per call: `[blocks, k, 6]`.
    static WEIGHTS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Output pixels per tile: one `Lanes16`.
const L: usize = 16;

/// Output channels per tile.
const MR: usize = 6;

/// The most window values per pixel (channels times taps) taken here: at
/// 256 a tile's packed weights (6 KiB) and its pixels' rows stay in L1.
const MAX_K: usize = 256;

/// The most input channels (per group) taken here.
const MAX_CHANNELS: usize = 4;

/// The most stride phases (`sh * sw`) taken here: a stem's stride 2 makes
/// 4; past a few, each phase holds little more than a window's taps.
const MAX_PHASES: usize = 16;

/// The phase planes' shape, and where each window value is read from.
struct Phases {
    /// Rows of a plane: the output rows plus the window's reach below.
    hq: usize,
    /// Elements of a plane's row: the output row rounded up to whole
    /// tiles, plus the window's reach to the right (so that a tile's loads
    /// never leave the row).
    wq: usize,
    /// Output columns.
    ow: usize,
    /// Per window value `q` (OIHW order: channel, tap row, tap column):
    /// its element in the phases for output pixel `(0, 0)`.
    offsets: Vec<usize>,
}

/// One image's convolution for one channel group, NCHW, with pixels in
/// lanes: the arguments are [`conv_f32_nchw`](super::conv_f32_nchw)'s,
/// which tries this before its own kernel. Returns false, having
/// done nothing, where it does not apply: a CPU without AVX2 and FMA,
/// dilated or 1x1 windows, more than 4 channels or 256 window values per
/// pixel, more outputs than pixels, or views whose columns are not
/// contiguous. An error when a view does not fit its buffer or the shapes
/// disagree.
pub(super) fn conv_f32_phases(
    img: &[f32],
    ic: &Im2Col,
    group: usize,
    (w, wv): (&[f32], GemmView),
    (out, ov): (&mut [f32], GemmView),
    threads: usize,
) -> Result<bool, CodegenError> {
    check_views(img, ic, group, (w, wv), (&*out, ov))?;
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = super::lanes16::isa() {
        return conv_on(isa, img, ic, group, (w, wv), (out, ov), threads);
    }
    Ok(false)
}

#[cfg(target_arch = "x86_64")]
fn conv_on(
    isa: super::lanes16::Isa,
    img: &[f32],
    ic: &Im2Col,
    group: usize,
    (w, wv): (&[f32], GemmView),
    (out, ov): (&mut [f32], GemmView),
    threads: usize,
) -> Result<bool, CodegenError> {
    let win = ic.window;
    let (k, o, cg) = (wv.cols, ov.rows, ic.group_channels());
    let (oh, ow) = win.out(ic.h, ic.w).unwrap_or((0, 0));
    // Phase planes per channel: strides past a window's reach (a fuzzed
    // 2^31) would make as many planes as the image has pixels, or more.
    let phase_count = win.stride.0 as usize * win.stride.1 as usize;
    // With more outputs than pixels, or a 1x1 window (whose window values
    // are a subsample of the image), `gemm` does better: ResNet-18's 1x1/2
    // layers ran 2-4x slower here.
    if win.dilation != (1, 1)
        || k > MAX_K
        || cg > MAX_CHANNELS
        || phase_count > MAX_PHASES
        || win.size() < 2
        || o > oh * ow
        || wv.col_stride != 1
        || ov.col_stride != 1
    {
        return Ok(false);
    }
    if o == 0 || oh * ow == 0 {
        return Ok(true);
    }
    let plane = ic.h * ic.w;
    let group_img = &img[group * cg * plane..(group + 1) * cg * plane];
    let g = phases(ic, oh, ow);
    let planes = cg * phase_count;
    let Some(len) = planes.checked_mul(g.hq).and_then(|n| n.checked_mul(g.wq)) else {
        return Ok(false);
    };
    let blocks = o.div_ceil(MR);
    // Pieces of output rows, a few per thread.
    let per = oh.div_ceil((4 * threads).min(oh)).max(1);
    let par = threads > 1 && oh > per;
    with_scratch(&PHASES, len, |x| {
        let fill = |(pi, dst): (usize, &mut [f32])| split_plane(group_img, ic, pi, &g, dst);
        if par {
            x.par_chunks_mut(g.hq * g.wq).enumerate().for_each(fill);
        } else {
            x.chunks_mut(g.hq * g.wq).enumerate().for_each(fill);
        }
        let x = &*x;
        with_scratch(&WEIGHTS, blocks * k * MR, |wp| {
            for (b, dst) in wp.chunks_exact_mut(k * MR).enumerate() {
                for (q, row) in dst.chunks_exact_mut(MR).enumerate() {
                    for (r, v) in row.iter_mut().enumerate() {
                        let oc = b * MR + r;
                        *v = if oc < o {
                            w[wv.offset + oc * wv.row_stride + q]
                        } else {
                            0.0
                        };
                    }
                }
            }
            let wp = &*wp;
            // Each piece: its rows `y0..y1` of every output channel.
            let ys: Vec<Range<usize>> = (0..oh)
                .step_by(per)
                .map(|y0| y0..(y0 + per).min(oh))
                .collect();
            let widths: Vec<usize> = ys.iter().map(|r| r.len() * ow).collect();
            let rows = super::view_lines(out, ov.offset, o, oh * ow, ov.row_stride);
            let pieces: Vec<_> = ys
                .into_iter()
                .zip(super::cut_lines(rows, &widths))
                .collect();
            let run = |(ys, mut lines): (Range<usize>, Vec<&mut [f32]>)| {
                x86::phase_rows(isa, x, &g, wp, ys, &mut lines)
            };
            if par {
                pieces.into_par_iter().for_each(run);
            } else {
                pieces.into_iter().for_each(run);
            }
            Ok(())
        })
    })?;
    Ok(true)
}

/// The phase planes of `ic`'s window for an `oh x ow` output.
fn phases(ic: &Im2Col, oh: usize, ow: usize) -> Phases {
    let win = ic.window;
    let (kh, kw) = (win.kh as usize, win.kw as usize);
    let (sh, sw) = (win.stride.0 as usize, win.stride.1 as usize);
    let hq = oh + (kh - 1) / sh;
    let wq = ow.next_multiple_of(L) + (kw - 1) / sw;
    let offsets = (0..ic.group_channels() * kh * kw)
        .map(|q| {
            let (c, i, j) = (q / (kh * kw), q / kw % kh, q % kw);
            let pi = (c * sh + i % sh) * sw + j % sw;
            (pi * hq + i / sh) * wq + j / sw
        })
        .collect();
    Phases {
        hq,
        wq,
        ow,
        offsets,
    }
}

/// Plane `pi` (channel `pi / (sh * sw)`, phase `(a, b)`) of the group's
/// image `img` into `dst` (`[hq, wq]`): element `(i, j)` is the padded
/// image's `(sh * i + a, sw * j + b)`, zero outside the image.
fn split_plane(img: &[f32], ic: &Im2Col, pi: usize, g: &Phases, dst: &mut [f32]) {
    let win = ic.window;
    let (sh, sw) = (win.stride.0 as usize, win.stride.1 as usize);
    let (pt, pl) = (win.pad[0] as usize, win.pad[1] as usize);
    let (c, a, b) = (pi / (sh * sw), pi / sw % sh, pi % sw);
    let src = &img[c * ic.h * ic.w..(c + 1) * ic.h * ic.w];
    // Columns `j` whose pixel `sw * j + b - pl` is inside the image.
    let j0 = pl.saturating_sub(b).div_ceil(sw).min(g.wq);
    let j1 = (ic.w + pl).saturating_sub(b).div_ceil(sw).clamp(j0, g.wq);
    for (i, row) in dst.chunks_exact_mut(g.wq).enumerate() {
        let y = (sh * i + a).checked_sub(pt).filter(|&y| y < ic.h);
        match y {
            Some(y) if j1 > j0 => {
                row[..j0].fill(0.0);
                let first = sw * j0 + b - pl;
                let line = &src[y * ic.w + first..(y + 1) * ic.w];
                for (d, s) in row[j0..j1].iter_mut().zip(line.iter().step_by(sw)) {
                    *d = *s;
                }
                row[j1..].fill(0.0);
            }
            _ => row.fill(0.0),
        }
    }
}

/// The tiles in AVX-512 or AVX2 (with FMA), written once over
/// [`Lanes16`](super::lanes16::Lanes16).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::lanes16::{versions, Lanes16};
    use super::{Phases, L, MR};
    use std::ops::Range;

    /// Output rows `ys` of every output channel (`lines[c]`: channel `c`'s
    /// rows `ys`, `ow` apart) from the phases `x` and the packed weights
    /// `wp` (`[blocks, k, 6]`), tile by tile: two 16-pixel vectors per
    /// tile where a value is one register (12 accumulators, as AVX2's
    /// one 16-pixel vector of two registers has), else one.
    #[inline(always)]
    fn phase_rows_with<V: Lanes16>(
        x: &[f32],
        g: &Phases,
        wp: &[f32],
        ys: Range<usize>,
        lines: &mut [&mut [f32]],
    ) {
        let tiles = g.ow.div_ceil(L);
        for y in ys.clone() {
            let mut t = 0;
            while t < tiles {
                let at = TileAt {
                    y,
                    first: ys.start,
                    x0: t * L,
                };
                if V::REGISTERS == 1 && t + 1 < tiles {
                    tile::<V, 2>(x, g, wp, at, lines);
                    t += 2;
                } else {
                    tile::<V, 1>(x, g, wp, at, lines);
                    t += 1;
                }
            }
        }
    }

    /// Where a tile sits: output row `y` (the piece's rows start at
    /// `first`), output columns from `x0`.
    #[derive(Copy, Clone)]
    struct TileAt {
        y: usize,
        first: usize,
        x0: usize,
    }

    /// The tile of `NV` vectors of pixels at `at`, for every block of 6
    /// output channels.
    #[inline(always)]
    fn tile<V: Lanes16, const NV: usize>(
        x: &[f32],
        g: &Phases,
        wp: &[f32],
        at: TileAt,
        lines: &mut [&mut [f32]],
    ) {
        let (k, ow, o) = (g.offsets.len(), g.ow, lines.len());
        let base = at.y * g.wq + at.x0;
        let row = (at.y - at.first) * ow + at.x0;
        for (b, wb) in wp.chunks_exact(k * MR).enumerate() {
            let mut acc = [[V::splat(0.0); MR]; NV];
            for (&off, w6) in g.offsets.iter().zip(wb.chunks_exact(MR)) {
                for (n, acc) in acc.iter_mut().enumerate() {
                    let v = V::load(x, off + base + n * L);
                    for (acc, &w) in acc.iter_mut().zip(w6) {
                        *acc = V::splat(w).fmadd(v, *acc);
                    }
                }
            }
            let rows = MR.min(o - b * MR);
            for (n, acc) in acc.iter().enumerate() {
                let (col, valid) = (row + n * L, (ow - at.x0 - n * L).min(L));
                for (acc, line) in acc.iter().zip(&mut lines[b * MR..b * MR + rows]) {
                    if valid == L {
                        acc.store(line, col);
                    } else {
                        let mut t = [0.0; L];
                        acc.store(&mut t, 0);
                        line[col..col + valid].copy_from_slice(&t[..valid]);
                    }
                }
            }
        }
    }

    versions!(phase_rows = phase_rows_with(
        x: &[f32],
        g: &Phases,
        wp: &[f32],
        ys: Range<usize>,
        lines: &mut [&mut [f32]]
    ));
}

#[cfg(test)]
mod tests {
    use super::super::windows::tests::direct;
    use super::*;
    use tilejit_ir::graph::Window;

    /// A fuzz finding: strides (2^31, 2) overflowed the count of phase
    /// planes (`sh * sw` in u32). Strides that make more phases than
    /// [`MAX_PHASES`] are declined, to the kernels that read the windows
    /// in place; those within it are taken.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn strides_of_many_phases_are_declined() {
        for (stride, taken) in [
            ((1 << 31, 2), false),
            ((u32::MAX, u32::MAX), false),
            ((4, 4), true),
        ] {
            let ic = Im2Col {
                c: 2,
                h: 5,
                w: 5,
                window: Window {
                    kh: 3,
                    kw: 3,
                    stride,
                    pad: [1, 1, 1, 1],
                    dilation: (1, 1),
                    groups: 1,
                },
            };
            let (oh, ow) = ic.window.out(5, 5).expect("fits");
            let (img, wts) = (vec![1.0f32; 50], vec![1.0f32; 18]);
            let wv = GemmView {
                offset: 0,
                rows: 1,
                cols: 18,
                row_stride: 18,
                col_stride: 1,
            };
            let ov = GemmView {
                offset: 0,
                rows: 1,
                cols: oh * ow,
                row_stride: oh * ow,
                col_stride: 1,
            };
            for &isa in super::super::lanes16::Isa::all().iter() {
                let mut out = vec![0.0f32; oh * ow];
                let done = conv_on(isa, &img, &ic, 0, (&wts, wv), (&mut out, ov), 1).expect("fits");
                assert_eq!(done, taken, "strides {stride:?} on {isa:?}");
            }
        }
    }

    /// Strides one to three (both ways and mixed), asymmetric and no
    /// padding, output rows off and on whole tiles, channel counts off the
    /// tile's 6, groups, on one and three threads, into rows with gaps that
    /// stay untouched: against the definition, on each vector width.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn phases_match_the_definition() {
        let value = |i: usize, s: usize| ((i * 37 + s * 11) % 29) as f32 / 13.0 - 1.0;
        let cases = [
            // (c, o, h, w, kh, kw, stride, pad, groups)
            (3, 64, 30, 34, 7, 7, (2, 2), [3, 3, 3, 3], 1),
            (3, 13, 23, 21, 7, 7, (2, 2), [3, 3, 3, 3], 1),
            (1, 7, 9, 40, 3, 3, (2, 2), [1, 0, 0, 1], 1),
            (4, 6, 12, 11, 3, 5, (1, 3), [0, 2, 1, 0], 1),
            (2, 5, 17, 16, 3, 3, (1, 1), [1, 1, 1, 1], 1),
            (4, 12, 10, 19, 2, 2, (2, 2), [0, 0, 0, 0], 2),
            (3, 8, 11, 37, 5, 4, (3, 2), [2, 1, 2, 2], 1),
            // Seven tiles of 16 pixels, the last of 4: pairs, then one.
            (2, 5, 9, 100, 3, 3, (1, 1), [1, 1, 1, 1], 1),
        ];
        for (n, &(c, o, h, w, kh, kw, stride, pad, groups)) in cases.iter().enumerate() {
            let ic = Im2Col {
                c,
                h,
                w,
                window: Window {
                    kh,
                    kw,
                    stride,
                    pad,
                    dilation: (1, 1),
                    groups,
                },
            };
            let (oh, ow) = ic.window.out(h, w).expect("fits");
            let (cg, og) = (c / groups as usize, o / groups as usize);
            let k = cg * (kh * kw) as usize;
            let img: Vec<f32> = (0..c * h * w).map(|i| value(i, n)).collect();
            let wts: Vec<f32> = (0..o * k).map(|i| value(i, n + 7)).collect();
            let isas = super::super::lanes16::Isa::all();
            for (isa, threads) in isas.iter().flat_map(|&i| [(i, 1), (i, 3)]) {
                // Output rows `gap` apart, the gaps holding a marker.
                let gap = oh * ow + 5;
                let mut out = vec![7.5f32; o * gap];
                for gi in 0..groups as usize {
                    let wv = GemmView {
                        offset: gi * og * k,
                        rows: og,
                        cols: k,
                        row_stride: k,
                        col_stride: 1,
                    };
                    let ov = GemmView {
                        offset: gi * og * gap,
                        rows: og,
                        cols: oh * ow,
                        row_stride: gap,
                        col_stride: 1,
                    };
                    check_views(&img, &ic, gi, (&wts, wv), (&out, ov)).expect("views fit");
                    let done = conv_on(isa, &img, &ic, gi, (&wts, wv), (&mut out, ov), threads)
                        .expect("views fit");
                    assert!(done, "case {n}: declined");
                }
                for gi in 0..groups as usize {
                    let one = Im2Col {
                        c: cg,
                        window: Window {
                            groups: 1,
                            ..ic.window
                        },
                        ..ic
                    };
                    let gimg = &img[gi * cg * h * w..(gi + 1) * cg * h * w];
                    let gw = &wts[gi * og * k..(gi + 1) * og * k];
                    let want = direct(gimg, gw, &one, og);
                    for oc in 0..og {
                        let row = &out[(gi * og + oc) * gap..][..gap];
                        let want = &want[oc * oh * ow..][..oh * ow];
                        for (p, (&got, &want)) in row.iter().zip(want).enumerate() {
                            assert!(
                                (got as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()),
                                "case {n}, {isa:?}, {threads} threads, output {oc} of group \
                                 {gi}, pixel {p}: {got} against {want}"
                            );
                        }
                        assert!(row[oh * ow..].iter().all(|&v| v == 7.5), "case {n}: a gap");
                    }
                }
            }
        }
    }

    /// Dilated windows, too many channels and more outputs than pixels
    /// decline; views that do not fit are errors.
    #[test]
    fn other_convs_decline_and_bad_views_are_errors() {
        let ic = |c, side, dilation| Im2Col {
            c,
            h: 20,
            w: 20,
            window: Window {
                dilation,
                ..Window::square(side, side, 2, 1)
            },
        };
        let run = |ic: &Im2Col, o: usize, short: usize| {
            let k = ic.c * ic.window.size();
            let (oh, ow) = ic.window.out(20, 20).expect("fits");
            let len = o * oh * ow - short;
            let img = vec![1.0; ic.c * 400];
            let wts = vec![1.0; o * k];
            let mut out = vec![0.0; len];
            let wv = GemmView::row_major(o, k);
            let ov = GemmView::row_major(o, oh * ow);
            conv_f32_phases(&img, ic, 0, (&wts, wv), (&mut out, ov), 1)
        };
        assert!(!run(&ic(2, 3, (2, 2)), 4, 0).expect("fits"));
        assert!(!run(&ic(5, 3, (1, 1)), 4, 0).expect("fits"));
        assert!(!run(&ic(3, 10, (1, 1)), 4, 0).expect("fits"));
        assert!(!run(&ic(2, 3, (1, 1)), 101, 0).expect("fits"));
        let err = run(&ic(2, 3, (1, 1)), 4, 1).expect_err("an output short of one element");
        assert!(err.to_string().contains("do not fit"), "{err}");
    }
}
