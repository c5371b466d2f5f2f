//! Direct NCHW convolution for f32 on AVX-512 with FMA: an implicit
//! GEMM `out[o, p] = sum_q w[o, q] * window(p, q)` over strips of output
//! pixels. The weights are packed once per call (`[k, tile rows]` per
//! block of output channels). The image is copied once with its zero
//! padding (at a column stride of 2 to 4, each row stored as its column
//! phases), and a strip's window values are runs of its rows: read in
//! place by the micro-kernel when the tile's width divides the output
//! rows (U-Net's 128, 64, 32), else copied into an L2-sized `[k, strip]`
//! panel; other strides, and windows narrower than their stride, pack
//! tap by tap. A register-tiled
//! micro-kernel then runs every block of channels over the strip. A
//! column matrix of the whole image and the `gemm` crate's second packing
//! of it (a write and two reads of `k x p` floats per call, which bind
//! convolutions with few channels to memory bandwidth) never exist. A
//! call with more weights than window values (late layers: few pixels,
//! many channels) declines: packing its weights would cost what `gemm`
//! spends on the whole product. Only the micro-kernel's vector loads and
//! stores are unsafe, on fixed-size arrays, and calls into code compiled
//! for AVX-512. An image of few channels (a network's input) goes to the
//! stride-phase kernel (`phases.rs`, AVX2 or AVX-512) before this one:
//! ResNet's stem ran there in 1.5-1.6 ms against 2.4-3.0 ms here, and a
//! 3-channel 3x3/1 layer in 0.8-1.0 against 1.0-1.1 ms. Where both
//! decline, the caller's `gemm` path runs. An AVX2 version of this kernel
//! reached 45-57% of the AVX2 FMA peak here, and was never measured
//! against `gemm` on an AVX2-only CPU.

use super::GemmView;
use crate::CodegenError;
use rayon::prelude::*;
use std::cell::RefCell;
use tilejit_ir::kernel::Im2Col;

thread_local! {
    /// The image with its zero padding, for a direct (stride 1) call.
    static PADDED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The weights, packed once per call.
    static WEIGHTS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The strip one worker packs (none when strips are read in place).
    static STRIP: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// A strip of output pixels: (first pixel, pixels).
type Strip = (usize, usize);

/// A thread's share: its strips, the first one's pixel, and every output
/// row's columns from that pixel on.
type Piece<'s, 'o> = (&'s [Strip], usize, Vec<&'o mut [f32]>);

/// The most output channels of a tile.
const MAX_MR: usize = 16;

/// The most output pixels of a tile.
const MAX_NR: usize = 48;

/// The largest column stride whose windows are read from a padded image
/// stored by column phases (one extra column per row at most per phase);
/// larger ones pack tap by tap.
const MAX_PHASED: usize = 4;

/// A register tile: `NV` zmm vectors of output pixels by `MR` output
/// channels (`NV * MR` accumulators).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Tile {
    Z3x8,
    Z2x12,
    Z1x16,
}

impl Tile {
    /// Output pixels (columns) and channels (rows) of the tile.
    fn shape(self) -> (usize, usize) {
        match self {
            Tile::Z3x8 => (48, 8),
            Tile::Z2x12 => (32, 12),
            Tile::Z1x16 => (16, 16),
        }
    }

    /// The tiles this CPU runs, widest first: all with AVX-512F and FMA,
    /// none otherwise.
    fn supported() -> &'static [Tile] {
        let f = crate::host::cpu_features();
        if f.avx512f && f.fma {
            &[Tile::Z3x8, Tile::Z2x12, Tile::Z1x16]
        } else {
            &[]
        }
    }

    /// The tile with the least padded work for `p` pixels and `o` output
    /// channels among those this CPU runs, or `None` without AVX-512F and
    /// FMA.
    fn choose(p: usize, o: usize) -> Option<Tile> {
        let tiles = Tile::supported();
        // The widest (fewest loads, and packing per strip) whose padded
        // work is within 1/8 of the least.
        let work = |t: &Tile| {
            let (nr, mr) = t.shape();
            p.div_ceil(nr) * nr * o.div_ceil(mr) * mr
        };
        let least = tiles.iter().map(work).min()?;
        tiles.iter().copied().find(|t| work(t) * 8 <= least * 9)
    }
}

/// Where a strip's window values are packed from: the zero-padded image
/// at stride 1 (its row length and each window value's offset), or the
/// image itself, tap by tap.
enum Source<'a> {
    Padded {
        padded: &'a [f32],
        wp: usize,
        offsets: &'a [usize],
    },
    Taps(&'a [f32]),
}

/// Packs the strip of output pixels `p0..p0 + valid` into `strip`,
/// compiled for AVX-512 so the copies move whole zmm vectors (a closure
/// handed to a `#[target_feature]` function is compiled without the
/// features: the stride-2 picks ran as SSE there). Only reached with a
/// [`Tile`], so on a CPU that has AVX-512F.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn pack(
    _: Tile,
    src: &Source<'_>,
    g: &Geometry,
    p0: usize,
    valid: usize,
    nr: usize,
    strip: &mut [f32],
) {
    #[inline(always)]
    fn body(src: &Source<'_>, g: &Geometry, p0: usize, valid: usize, nr: usize, strip: &mut [f32]) {
        match *src {
            Source::Padded {
                padded,
                wp,
                offsets,
            } => pack_direct(padded, g, wp, offsets, p0, valid, nr, strip),
            Source::Taps(img) => pack_strip(img, g, p0, valid, nr, strip),
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        fn z(
            src: &Source<'_>,
            g: &Geometry,
            p0: usize,
            valid: usize,
            nr: usize,
            strip: &mut [f32],
        ) {
            body(src, g, p0, valid, nr, strip)
        }
        // SAFETY: a `Tile` exists only where `Tile::supported` found
        // AVX-512F.
        unsafe { z(src, g, p0, valid, nr, strip) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    body(src, g, p0, valid, nr, strip)
}

/// One image's window geometry for one channel group, as `usize`s.
#[derive(Clone, Debug)]
struct Geometry {
    /// Where the group's channels start in the image.
    base: usize,
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    pt: usize,
    pl: usize,
    ow: usize,
    /// Window values per output pixel (`channels * kh * kw`).
    k: usize,
    /// Per tap column `j`: the output columns `xa..xb` whose tap reads
    /// inside the image (`x * sw + j * dw - pl` in `0..w`).
    cols: Vec<(usize, usize)>,
}

/// Computes one image's convolution for one channel group, NCHW: `out`'s
/// rows (`ov`: output channels by output pixels, unit column stride) from
/// the image `img` (`[c, h, w]`, all groups), `ic` its geometry, and the
/// group's weights `w` (`wv`: output channels by `k = c/groups * kh * kw`,
/// unit column stride: OIHW rows in place). An image of few channels goes
/// to the stride-phase kernel (`phases.rs`: pixels in vector lanes); else
/// this kernel splits its strips of pixels over up to `threads` threads,
/// unless it declines (a CPU without AVX-512F and FMA, a view of another
/// column stride, more weights than window values). Returns false, having
/// done nothing, when both decline (`gemm` does those better); an error
/// when a view does not fit its buffer or the shapes disagree.
pub fn conv_f32_nchw(
    img: &[f32],
    ic: &Im2Col,
    group: usize,
    (w, wv): (&[f32], GemmView),
    (out, ov): (&mut [f32], GemmView),
    threads: usize,
) -> Result<bool, CodegenError> {
    if super::phases::conv_f32_phases(img, ic, group, (w, wv), (&mut *out, ov), threads)? {
        return Ok(true);
    }
    let tile = Tile::choose(ov.cols, ov.rows);
    conv_with(tile, img, ic, group, (w, wv), (out, ov), threads)
}

/// [`conv_f32_nchw`] on `tile` (one this CPU runs; `None`: decline).
fn conv_with(
    tile: Option<Tile>,
    img: &[f32],
    ic: &Im2Col,
    group: usize,
    (w, wv): (&[f32], GemmView),
    (out, ov): (&mut [f32], GemmView),
    threads: usize,
) -> Result<bool, CodegenError> {
    check_views(img, ic, group, (w, wv), (&*out, ov))?;
    let win = ic.window;
    let cg = ic.group_channels();
    let ow = win.out(ic.h, ic.w).map_or(0, |(_, ow)| ow);
    let Some(tile) = tile.filter(|_| wv.col_stride == 1 && ov.col_stride == 1) else {
        return Ok(false);
    };
    let (o, p, k) = (ov.rows, ov.cols, wv.cols);
    if o == 0 || p == 0 {
        return Ok(true);
    }
    let g = Geometry {
        base: group * cg * ic.h * ic.w,
        h: ic.h,
        w: ic.w,
        kh: win.kh as usize,
        kw: win.kw as usize,
        sh: win.stride.0 as usize,
        sw: win.stride.1 as usize,
        dh: win.dilation.0 as usize,
        dw: win.dilation.1 as usize,
        pt: win.pad[0] as usize,
        pl: win.pad[1] as usize,
        ow,
        k,
        cols: Vec::new(),
    };
    let cols = (0..g.kw)
        .map(|j| {
            let shift = j * g.dw;
            let xa = g.pl.saturating_sub(shift).div_ceil(g.sw);
            let xb = if g.w + g.pl > shift {
                (g.w + g.pl - shift - 1) / g.sw + 1
            } else {
                0
            };
            (xa, xb)
        })
        .collect();
    let g = Geometry { cols, ..g };
    // The weights' rows, each exactly `k` long.
    let rows: Vec<&[f32]> = (0..o)
        .map(|r| &w[wv.offset + r * wv.row_stride..][..k])
        .collect();
    // The output rows, each `p` long.
    let mut outs = super::view_lines(out, ov.offset, o, p, ov.row_stride);
    // Each tap's values for a run of output columns are a run of a
    // (zero-padded) image row: at stride 1 directly, at column stride `sw`
    // once each padded row is stored as its `sw` column phases
    // ([`Phases`]), as output column `x`'s tap `j` reads column `x * sw +
    // j * dw`, in phase `j * dw % sw` at `x + j * dw / sw`. When a tile's width
    // divides the output rows, every strip lies in one row and the
    // micro-kernel reads those runs in place (a tile that pads the
    // channels at most 1/8 more is worth it); otherwise each strip's
    // values are packed. Padding that would make the copy much bigger
    // than the image (huge pads under a huge row stride), strides past
    // `MAX_PHASED` and windows narrower than their strides pack tap by
    // tap instead.
    let (hp, wp) = (
        ic.h + g.pt + win.pad[2] as usize,
        ic.w + g.pl + win.pad[3] as usize,
    );
    let phased = phased_stride((g.kh, g.dh, g.sh), (g.kw, g.dw, g.sw));
    let ph = Phases::new(wp, if phased { g.sw } else { 1 });
    let wps = ph.row();
    let padded_len = cg.checked_mul(hp).and_then(|n| n.checked_mul(wps));
    let direct =
        (g.sw == 1 || phased) && padded_len.is_some_and(|n| n <= 4 * cg * ic.h * ic.w + (1 << 16));
    let pad_o = |t: Tile| o.div_ceil(t.shape().1) * t.shape().1;
    let in_place = Tile::supported()
        .iter()
        .copied()
        .find(|&t| direct && ow.is_multiple_of(t.shape().0) && pad_o(t) * 8 <= pad_o(tile) * 9);
    let tile = in_place.unwrap_or(tile);
    let (nr, mr) = tile.shape();
    let cstrips = o.div_ceil(mr);
    if cstrips * mr > p.div_ceil(nr) * nr {
        // More weights than window values (late layers: few pixels, many
        // channels): packing the weights would cost about what `gemm`
        // spends on the whole product.
        return Ok(false);
    }
    // Strips of `nr` output pixels: (first pixel, pixels).
    let strips: Vec<Strip> = (0..p).step_by(nr).map(|p0| (p0, nr.min(p - p0))).collect();
    // Per window value `q`: its offset in the padded image from a strip's
    // index (channel, tap row, tap column).
    let offsets: Vec<usize> = if direct {
        (0..k)
            .map(|q| {
                let (ci, i, j) = (q / (g.kh * g.kw), q / g.kw % g.kh, q % g.kw);
                (ci * hp + i * g.dh) * wps + ph.at(j * g.dw)
            })
            .collect()
    } else {
        Vec::new()
    };
    // A packed strip's rows.
    let packed_rows: Vec<usize> = (0..k).map(|q| q * nr).collect();
    let padded_len = padded_len.filter(|_| direct).unwrap_or(0);
    let par = threads > 1 && strips.len() > 1;
    with_scratch(&PADDED, padded_len, |padded| {
        if direct {
            let channels = g.k / (g.kh * g.kw);
            let group = &img[g.base..g.base + channels * g.h * g.w];
            let planes = if par { threads } else { 1 };
            pad_planes(
                group,
                (g.h, g.w),
                (g.pt, g.pl),
                (hp, wp),
                g.sw,
                padded,
                planes,
            );
        }
        let padded = &*padded;
        let source = match direct {
            true => Source::Padded {
                padded,
                wp: wps,
                offsets: &offsets,
            },
            false => Source::Taps(img),
        };
        with_scratch(&WEIGHTS, cstrips * k * mr, |apack| {
            let fill = |(c, a): (usize, &mut [f32])| pack_weights(&rows, c * mr, mr, a);
            if par {
                apack.par_chunks_mut(k * mr).enumerate().for_each(fill);
            } else {
                apack.chunks_mut(k * mr).enumerate().for_each(fill);
            }
            let apack = &*apack;
            // Strips `list` into `outs`, whose column 0 is pixel `col0`.
            let work = |list: &[Strip], col0: usize, outs: &mut [&mut [f32]]| {
                let scratch = if in_place.is_some() { 0 } else { k * nr };
                with_scratch(&STRIP, scratch, |strip| {
                    for &(p0, valid) in list {
                        let b = if in_place.is_some() {
                            (padded, p0 / ow * g.sh * wps + p0 % ow, offsets.as_slice())
                        } else {
                            pack(tile, &source, &g, p0, valid, nr, strip);
                            (&*strip, 0, packed_rows.as_slice())
                        };
                        for (c, a) in apack.chunks_exact(k * mr).enumerate() {
                            run_tile(tile, a, b, &mut outs[c * mr..], p0 - col0, valid);
                        }
                    }
                    Ok(())
                })
            };
            if !par {
                return work(&strips, 0, &mut outs);
            }
            // Pieces of whole strips, each with every output row's columns
            // of its strips.
            let per = strips.len().div_ceil(strips.len().min(4 * threads));
            let widths: Vec<usize> = strips
                .chunks(per)
                .map(|list| list.iter().map(|s| s.1).sum())
                .collect();
            let pieces = super::cut_lines(outs, &widths);
            let split: Vec<Piece<'_, '_>> = strips
                .chunks(per)
                .zip(pieces)
                .map(|(list, piece)| (list, list[0].0, piece))
                .collect();
            split
                .into_par_iter()
                .try_for_each(|(list, col0, mut piece)| work(list, col0, &mut piece))
        })
    })?;
    Ok(true)
}

/// Checks one channel group's convolution (see [`conv_f32_nchw`]): the
/// group exists, the image holds its elements, the weights' columns are
/// the group's window values, and both views fit their buffers, the
/// output's rows apart.
pub(super) fn check_views(
    img: &[f32],
    ic: &Im2Col,
    group: usize,
    (w, wv): (&[f32], GemmView),
    (out, ov): (&[f32], GemmView),
) -> Result<(), CodegenError> {
    let win = ic.window;
    let groups = (win.groups as usize).max(1);
    let (oh, ow) = win.out(ic.h, ic.w).unwrap_or((0, 0));
    let inside = |v: &GemmView, len: usize| v.end().is_some_and(|e| e <= len);
    let image = ic.c.checked_mul(ic.h).and_then(|x| x.checked_mul(ic.w));
    if group >= groups
        || image.is_none_or(|n| img.len() < n)
        || ic.group_channels().checked_mul(win.size()) != Some(wv.cols)
        || wv.rows != ov.rows
        || oh.checked_mul(ow) != Some(ov.cols)
        || !inside(&wv, w.len())
        || !inside(&ov, out.len())
        || (ov.rows > 1 && ov.row_stride < ov.cols)
    {
        return Err(CodegenError::Launch {
            kernel: "conv".into(),
            message: format!(
                "image of {} elements ({ic:?}, group {group}), weights {wv:?} ({} elements) \
                 -> {ov:?} ({} elements) do not fit",
                img.len(),
                w.len(),
                out.len()
            ),
        });
    }
    Ok(())
}

/// Copies the `h x w` planes of `img` into `padded` (`[planes, hp, wp]`),
/// each at `top` rows and `left` columns from its plane's corner, zeros
/// around it, writing each element once.
pub(super) fn pad_image(
    img: &[f32],
    (h, w): (usize, usize),
    (top, left): (usize, usize),
    (hp, wp): (usize, usize),
    padded: &mut [f32],
) {
    let planes = padded
        .chunks_exact_mut(hp * wp)
        .zip(img.chunks_exact(h * w));
    for (plane, src) in planes {
        for (py, row) in plane.chunks_exact_mut(wp).enumerate() {
            match py.checked_sub(top).filter(|&y| y < h) {
                Some(y) => {
                    row[..left].fill(0.0);
                    row[left..left + w].copy_from_slice(&src[y * w..(y + 1) * w]);
                    row[left + w..].fill(0.0);
                }
                None => row.fill(0.0),
            }
        }
    }
}

/// Whether a window of `(taps, dilation, stride)` by rows and columns
/// reads a padded image stored by column phases ([`pad_image_phased`]):
/// a column stride from 2 to [`MAX_PHASED`] that the window's span covers
/// on both axes. A narrower window (a 1x1 at stride 2) reads a fraction
/// of the image, which the phased copy would move whole.
pub(super) fn phased_stride(
    (kh, dh, sh): (usize, usize, usize),
    (kw, dw, sw): (usize, usize, usize),
) -> bool {
    let covers = |k: usize, d: usize, s: usize| (k.max(1) - 1).saturating_mul(d) + 1 >= s;
    (2..=MAX_PHASED).contains(&sw) && covers(kw, dw, sw) && covers(kh, dh, sh)
}

/// How a padded row of `wp` columns is stored as its `sw` column phases,
/// one after another: `len` columns each (zero past the row), padded
/// column `c` at [`Phases::at`]. One phase is the row as it is.
#[derive(Clone, Copy, Debug)]
pub(super) struct Phases {
    sw: usize,
    len: usize,
}

impl Phases {
    pub(super) fn new(wp: usize, sw: usize) -> Phases {
        let sw = sw.max(1);
        Phases {
            sw,
            len: wp.div_ceil(sw),
        }
    }

    /// The stored row's length.
    pub(super) fn row(self) -> usize {
        self.sw * self.len
    }

    /// Where padded column `c` is stored in its row.
    pub(super) fn at(self, c: usize) -> usize {
        c % self.sw * self.len + c / self.sw
    }
}

/// [`pad_image`] with each padded row stored as its `sw` column phases
/// ([`Phases`]): `padded` is `[planes, hp, Phases::row]`. At `sw` 1 this
/// is [`pad_image`].
pub(super) fn pad_image_phased(
    img: &[f32],
    (h, w): (usize, usize),
    (top, left): (usize, usize),
    (hp, wp): (usize, usize),
    sw: usize,
    padded: &mut [f32],
) {
    if sw <= 1 {
        return pad_image(img, (h, w), (top, left), (hp, wp), padded);
    }
    let ph = Phases::new(wp, sw);
    // Each row padded in a staging row first (zeros past `wp` too), then
    // dealt out to its phases, which the compiler vectorises at stride 2.
    let mut staged = vec![0.0f32; ph.row()];
    let planes = padded
        .chunks_exact_mut(hp * ph.row())
        .zip(img.chunks_exact(h * w));
    for (plane, src) in planes {
        for (py, row) in plane.chunks_exact_mut(ph.row()).enumerate() {
            let Some(y) = py.checked_sub(top).filter(|&y| y < h) else {
                row.fill(0.0);
                continue;
            };
            staged[left..left + w].copy_from_slice(&src[y * w..(y + 1) * w]);
            if sw == 2 {
                let (even, odd) = row.split_at_mut(ph.len);
                let pairs = even.iter_mut().zip(odd).zip(staged.chunks_exact(2));
                for ((e, o), pair) in pairs {
                    (*e, *o) = (pair[0], pair[1]);
                }
                continue;
            }
            for (c, v) in staged.iter().enumerate() {
                row[ph.at(c)] = *v;
            }
        }
    }
}

/// [`pad_image_phased`] split by channel planes over up to `parts`
/// threads: one image's copy is otherwise a serial step before the
/// threads share its strips.
pub(super) fn pad_planes(
    img: &[f32],
    (h, w): (usize, usize),
    (top, left): (usize, usize),
    (hp, wp): (usize, usize),
    sw: usize,
    padded: &mut [f32],
    parts: usize,
) {
    let (plane, image) = (hp * Phases::new(wp, sw).row(), h * w);
    let planes = img.len().checked_div(image).unwrap_or(0);
    let per = planes.div_ceil(parts.max(1)).max(1);
    if parts <= 1 || planes <= 1 || plane == 0 {
        return pad_image_phased(img, (h, w), (top, left), (hp, wp), sw, padded);
    }
    padded
        .par_chunks_mut(per * plane)
        .zip(img.par_chunks(per * image))
        .for_each(|(dst, src)| pad_image_phased(src, (h, w), (top, left), (hp, wp), sw, dst));
}

/// Runs `f` on this thread's scratch `key` grown to `len` floats (a fresh
/// buffer when a caller up the stack holds it); no memory is an error.
pub(super) fn with_scratch<R>(
    key: &'static std::thread::LocalKey<RefCell<Vec<f32>>>,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> Result<R, CodegenError>,
) -> Result<R, CodegenError> {
    let grow = |v: &mut Vec<f32>| {
        let have = v.len();
        if have < len {
            v.try_reserve_exact(len - have)
                .map_err(|_| CodegenError::OutOfMemory {
                    kernel: "conv".into(),
                    what: "packed operands",
                    bytes: len.saturating_mul(4),
                })?;
            v.resize(len, 0.0);
        }
        Ok::<(), CodegenError>(())
    };
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            grow(&mut v)?;
            f(&mut v[..len])
        }
        Err(_) => {
            let mut v = Vec::new();
            grow(&mut v)?;
            f(&mut v)
        }
    })
}

/// Packs output channels `c0..c0 + mr` of the weights into `a` (`[k, mr]`:
/// the tile's `mr` weights of window value `q` side by side), zeros for
/// channels past the end.
fn pack_weights(rows: &[&[f32]], c0: usize, mr: usize, a: &mut [f32]) {
    const Q: usize = 16;
    let k = a.len() / mr;
    let mut blk = [[0.0f32; Q]; MAX_MR];
    let whole = k / Q * Q;
    for (qc, dst) in a[..whole * mr].chunks_exact_mut(Q * mr).enumerate() {
        for (r, b) in blk.iter_mut().enumerate().take(mr) {
            match rows.get(c0 + r) {
                Some(row) => b.copy_from_slice(&row[qc * Q..qc * Q + Q]),
                None => *b = [0.0; Q],
            }
        }
        for (qq, d) in dst.chunks_exact_mut(mr).enumerate() {
            for (r, d) in d.iter_mut().enumerate() {
                *d = blk[r][qq];
            }
        }
    }
    for (q, d) in (whole..k).zip(a[whole * mr..].chunks_exact_mut(mr)) {
        for (r, d) in d.iter_mut().enumerate() {
            *d = rows.get(c0 + r).map_or(0.0, |row| row[q]);
        }
    }
}

/// Packs the window values of output pixels `p0..p0 + valid` into
/// `strip` (`[k, nr]`, zeros past `valid` and in the padding).
#[inline(always)]
fn pack_strip(img: &[f32], g: &Geometry, p0: usize, valid: usize, nr: usize, strip: &mut [f32]) {
    // The strip's runs within one output row: (first pixel, row, column,
    // length); at most one per pixel.
    let mut runs = [(0usize, 0usize, 0usize, 0usize); MAX_NR];
    let mut count = 0;
    let mut t = 0;
    while t < valid {
        let (y, x0) = ((p0 + t) / g.ow, (p0 + t) % g.ow);
        let len = (g.ow - x0).min(valid - t);
        runs[count] = (t, y, x0, len);
        count += 1;
        t += len;
    }
    let runs = &runs[..count];
    let (mut ci, mut i, mut j) = (0, 0, 0);
    for row in strip.chunks_exact_mut(nr).take(g.k) {
        if valid < nr {
            row[valid..].fill(0.0);
        }
        let (shift, (xa, xb)) = (j * g.dw, g.cols[j]);
        for &(t, y, x0, len) in runs {
            let dst = &mut row[t..t + len];
            let Some(iy) = (y * g.sh + i * g.dh)
                .checked_sub(g.pt)
                .filter(|&iy| iy < g.h)
            else {
                dst.fill(0.0);
                continue;
            };
            let start = g.base + (ci * g.h + iy) * g.w;
            let src = &img[start..start + g.w];
            let ua = xa.saturating_sub(x0).min(len);
            let ub = xb.saturating_sub(x0).clamp(ua, len);
            if ua > 0 {
                dst[..ua].fill(0.0);
            }
            if ub < len {
                dst[ub..].fill(0.0);
            }
            if ub > ua {
                let s0 = (x0 + ua) * g.sw + shift - g.pl;
                if g.sw == 1 {
                    copy_run(&mut dst[ua..ub], &src[s0..s0 + (ub - ua)]);
                } else if g.sw == 2 {
                    // Pairs, so the compiler vectorises the even-lane pick
                    // (the scalar strided copy was a fifth of a 3x3/2
                    // layer's time); the last value has no pair.
                    let (run, last) = dst[ua..ub].split_at_mut(ub - ua - 1);
                    let pairs = src[s0..s0 + 2 * run.len()].chunks_exact(2);
                    for (d, s) in run.iter_mut().zip(pairs) {
                        *d = s[0];
                    }
                    last[0] = src[s0 + 2 * run.len()];
                } else {
                    for (d, s) in dst[ua..ub].iter_mut().zip(src[s0..].iter().step_by(g.sw)) {
                        *d = *s;
                    }
                }
            }
        }
        // The next window value: tap column, then row, then channel.
        j += 1;
        if j == g.kw {
            j = 0;
            i += 1;
            if i == g.kh {
                i = 0;
                ci += 1;
            }
        }
    }
}

/// `dst.copy_from_slice(src)` in fixed-size pieces: the runs are short
/// (at most a strip), where a call to `memcpy` costs more than the copy.
#[inline(always)]
fn copy_run(dst: &mut [f32], src: &[f32]) {
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (d, s) in (&mut d).zip(&mut s) {
        let d: &mut [f32; 8] = d.try_into().expect("8 floats");
        *d = s.try_into().expect("8 floats");
    }
    let (d, s) = (d.into_remainder(), s.remainder());
    let mut at = 0;
    if d.len() - at >= 4 {
        let dd: &mut [f32; 4] = (&mut d[at..at + 4]).try_into().expect("4 floats");
        *dd = s[at..at + 4].try_into().expect("4 floats");
        at += 4;
    }
    while at < d.len() {
        d[at] = s[at];
        at += 1;
    }
}

/// One tile: the packed weights `a` (`[k, mr]`) times the window values
/// `b` (value `q`'s `nr` floats at `base + offsets[q]`: a packed strip, or
/// runs of the padded image), its rows written to `outs[r][col..col +
/// valid]` for the rows `outs` has.
fn run_tile(
    tile: Tile,
    a: &[f32],
    b: (&[f32], usize, &[usize]),
    outs: &mut [&mut [f32]],
    col: usize,
    valid: usize,
) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut store = |r: usize, vals: &[f32]| {
            if let Some(row) = outs.get_mut(r) {
                copy_run(&mut row[col..col + valid], &vals[..valid]);
            }
        };
        // SAFETY: a `Tile` exists only where `Tile::supported` found
        // AVX-512F and FMA, the instructions the kernels are compiled with.
        unsafe {
            match tile {
                Tile::Z3x8 => x86::z::<3, 8>(a, b, &mut store),
                Tile::Z2x12 => x86::z::<2, 12>(a, b, &mut store),
                Tile::Z1x16 => x86::z::<1, 16>(a, b, &mut store),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (tile, a, b, outs, col, valid);
        unreachable!("Tile::choose gives no tile off x86-64");
    }
}

/// Packs the strip of output pixels `p0..p0 + valid` from the padded
/// image (`[c, hp, wp]`, `wp` its rows' length, stored by column phases
/// unless at stride 1): row `q` of `strip` is, per run
/// of the strip within one output row, window value `q`'s run of a padded
/// image row, at `offsets[q]` past the run's first tap; zeros past `valid`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn pack_direct(
    padded: &[f32],
    g: &Geometry,
    wp: usize,
    offsets: &[usize],
    p0: usize,
    valid: usize,
    nr: usize,
    strip: &mut [f32],
) {
    // The runs: (first pixel, the padded image's index of its first
    // tap, length).
    let mut runs = [(0usize, 0usize, 0usize); MAX_NR];
    let mut count = 0;
    let mut t = 0;
    while t < valid {
        let (y, x0) = ((p0 + t) / g.ow, (p0 + t) % g.ow);
        let len = (g.ow - x0).min(valid - t);
        runs[count] = (t, y * g.sh * wp + x0, len);
        count += 1;
        t += len;
    }
    let runs = &runs[..count];
    for (row, &o) in strip.chunks_exact_mut(nr).zip(offsets) {
        for &(t, pos, len) in runs {
            copy_run(&mut row[t..t + len], &padded[pos + o..pos + o + len]);
        }
        if valid < nr {
            row[valid..].fill(0.0);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `NV` zmm vectors of pixels by `MR` channels: for every window value
    /// `q`, the `NV * 16` values at `b[base + offsets[q]..]` times each
    /// channel's weight `a[q][r]`, summed in order of `q`; then `store(r,
    /// row r's NV * 16 sums)`.
    #[target_feature(enable = "avx512f,fma")]
    pub(super) fn z<const NV: usize, const MR: usize>(
        a: &[f32],
        (b, base, offsets): (&[f32], usize, &[usize]),
        store: &mut impl FnMut(usize, &[f32]),
    ) {
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        for (aq, &o) in a.chunks_exact(MR).zip(offsets) {
            let aq: &[f32; MR] = aq.try_into().expect("MR weights");
            let bq = &b[base + o..base + o + NV * 16];
            let mut b = [_mm512_setzero_ps(); NV];
            for (v, lanes) in b.iter_mut().zip(bq.chunks_exact(16)) {
                let lanes: &[f32; 16] = lanes.try_into().expect("16 lanes");
                // SAFETY: `lanes` holds the 16 floats the load reads.
                *v = unsafe { _mm512_loadu_ps(lanes.as_ptr()) };
            }
            for (acc, &w) in acc.iter_mut().zip(aq) {
                let a = _mm512_set1_ps(w);
                for (acc, b) in acc.iter_mut().zip(b) {
                    *acc = _mm512_fmadd_ps(a, b, *acc);
                }
            }
        }
        let mut vals = [[0.0f32; 16]; NV];
        for (r, acc) in acc.iter().enumerate() {
            for (dst, v) in vals.iter_mut().zip(acc) {
                // SAFETY: `dst` holds the 16 floats the store writes.
                unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), *v) };
            }
            store(r, vals.as_flattened());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilejit_ir::graph::Window;

    thread_local! {
        static HUGE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    }

    /// Every padded column lands in its phase at `c % sw * wq + c / sw`,
    /// the padding and the slots past a row's end zero: widths, pads and
    /// strides 1 to 4 against `pad_image` read column by column.
    #[test]
    fn phased_rows_hold_each_padded_column_in_its_phase() {
        for (c, h, w, top, left, bottom, right) in [
            (2, 3, 7, 1, 1, 1, 1),
            (1, 4, 8, 0, 0, 0, 0),
            (3, 2, 5, 2, 3, 0, 2),
            (1, 1, 1, 1, 4, 1, 0),
        ] {
            let img = values(c * h * w, 7);
            let (hp, wp) = (h + top + bottom, w + left + right);
            let mut plain = vec![f32::NAN; c * hp * wp];
            pad_image(&img, (h, w), (top, left), (hp, wp), &mut plain);
            for sw in 1..=4 {
                let wq = wp.div_ceil(sw);
                let mut phased = vec![f32::NAN; c * hp * sw * wq];
                pad_image_phased(&img, (h, w), (top, left), (hp, wp), sw, &mut phased);
                for (r, row) in phased.chunks_exact(sw * wq).enumerate() {
                    for (at, v) in row.iter().enumerate() {
                        let col = at % wq * sw + at / wq;
                        let want = match col < wp {
                            true => plain[r * wp + col],
                            false => 0.0,
                        };
                        assert_eq!(v.to_bits(), want.to_bits(), "{c}x{h}x{w} sw {sw} row {r}");
                    }
                }
            }
        }
    }

    /// Scratch the machine cannot give is an out-of-memory error, which
    /// names its size, never an internal one.
    #[test]
    fn scratch_too_large_is_out_of_memory() {
        let len = usize::MAX / 8;
        let e = with_scratch(&HUGE, len, |_| Ok(())).err();
        match e {
            Some(CodegenError::OutOfMemory { what, bytes, .. }) => {
                assert_eq!((what, bytes), ("packed operands", len * 4));
            }
            other => panic!("{other:?}"),
        }
        assert!(with_scratch(&HUGE, 8, |s| Ok(s.len())).is_ok_and(|n| n == 8));
    }

    /// Deterministic values in [-1, 1).
    fn values(len: usize, seed: u64) -> Vec<f32> {
        let v = super::super::strided_tests::values(len, seed);
        v.into_iter().map(|x| x as f32).collect()
    }

    /// Group `g`'s output channels `[o, p]` by the definition, in f64.
    fn definition(img: &[f32], ic: &Im2Col, g: usize, w: &[f32], o: usize) -> Vec<f64> {
        let win = ic.window;
        let (oh, ow) = win.out(ic.h, ic.w).expect("a window that fits");
        let (cg, kh, kw) = (ic.group_channels(), win.kh as usize, win.kw as usize);
        let k = cg * kh * kw;
        let mut out = vec![0.0f64; o * oh * ow];
        for oc in 0..o {
            for y in 0..oh {
                for x in 0..ow {
                    let mut acc = 0.0f64;
                    for ci in 0..cg {
                        for i in 0..kh {
                            for j in 0..kw {
                                let iy = (y * win.stride.0 as usize + i * win.dilation.0 as usize)
                                    .checked_sub(win.pad[0] as usize);
                                let ix = (x * win.stride.1 as usize + j * win.dilation.1 as usize)
                                    .checked_sub(win.pad[1] as usize);
                                if let (Some(iy), Some(ix)) = (iy, ix) {
                                    if iy < ic.h && ix < ic.w {
                                        let v = img[((g * cg + ci) * ic.h + iy) * ic.w + ix];
                                        let q = (ci * kh + i) * kw + j;
                                        acc += v as f64 * w[oc * k + q] as f64;
                                    }
                                }
                            }
                        }
                    }
                    out[oc * oh * ow + y * ow + x] = acc;
                }
            }
        }
        out
    }

    /// (channels, h, w, out channels, window): strides 1 to 5 (the
    /// in-place and the packed strips), asymmetric padding, dilation,
    /// groups, pixel counts off every strip width and channel counts off
    /// every tile height.
    fn cases() -> Vec<(usize, usize, usize, usize, Window)> {
        let win = |kh, kw, s: (u32, u32), pad, d, groups| Window {
            kh,
            kw,
            stride: s,
            pad,
            dilation: d,
            groups,
        };
        vec![
            (3, 9, 11, 5, win(3, 3, (1, 1), [1, 1, 1, 1], (1, 1), 1)),
            (4, 17, 13, 19, win(3, 3, (1, 1), [0, 2, 1, 0], (1, 1), 1)),
            (2, 30, 31, 7, win(5, 3, (1, 1), [2, 1, 2, 1], (2, 1), 1)),
            (6, 12, 12, 8, win(3, 3, (1, 1), [1, 1, 1, 1], (1, 1), 2)),
            (3, 23, 21, 9, win(7, 7, (2, 2), [3, 3, 3, 3], (1, 1), 1)),
            (4, 14, 15, 24, win(1, 1, (2, 2), [0, 0, 0, 0], (1, 1), 1)),
            (5, 16, 9, 13, win(3, 2, (2, 1), [1, 0, 1, 1], (1, 2), 1)),
            (1, 1, 1, 3, win(1, 1, (1, 1), [0, 0, 0, 0], (1, 1), 1)),
            // Output rows of 48, 32 and 16: strips read the image in place.
            (3, 5, 48, 8, win(3, 3, (1, 1), [1, 1, 1, 1], (1, 1), 1)),
            (4, 7, 34, 12, win(3, 3, (2, 1), [0, 1, 2, 1], (1, 2), 1)),
            (4, 6, 16, 9, win(3, 3, (1, 1), [1, 1, 1, 1], (1, 1), 2)),
            // Column strides 2 to 4 read a padded image stored by column
            // phases (rows of 16 outputs at stride 2: in place), with
            // dilation and uneven padding; 5, and a 1x1 at 2, pack tap by
            // tap.
            (3, 9, 32, 10, win(3, 3, (2, 2), [1, 1, 1, 1], (1, 1), 1)),
            (2, 11, 23, 6, win(3, 3, (3, 3), [2, 1, 0, 2], (1, 2), 1)),
            (3, 10, 29, 5, win(5, 5, (4, 4), [2, 2, 2, 2], (1, 1), 1)),
            (2, 9, 30, 4, win(3, 3, (5, 5), [1, 1, 1, 1], (1, 1), 1)),
            // Rows of padding far bigger than the image under a row stride
            // as big: packed tap by tap (every window's rows in the padding).
            (
                2,
                5,
                5,
                3,
                win(3, 3, (u32::MAX, 1), [1 << 31, 1, 1 << 31, 1], (1, 1), 1),
            ),
        ]
    }

    #[test]
    fn every_tile_matches_the_definition_on_one_and_two_threads() {
        if Tile::supported().is_empty() {
            return; // no AVX-512F and FMA: the `gemm` path runs instead
        }
        for (n, &(c, h, w, o, window)) in cases().iter().enumerate() {
            let ic = Im2Col { c, h, w, window };
            let groups = window.groups as usize;
            let k = ic.group_channels() * window.size();
            let (oh, ow) = window.out(h, w).expect("fits");
            let p = oh * ow;
            let img = values(c * h * w, 1 + n as u64);
            let wts = values(o * groups * k, 100 + n as u64);
            for g in 0..groups {
                let gw = &wts[g * o * k..(g + 1) * o * k];
                let want = definition(&img, &ic, g, gw, o);
                let wv = GemmView {
                    offset: g * o * k,
                    rows: o,
                    cols: k,
                    row_stride: k,
                    col_stride: 1,
                };
                // Output rows with a gap after each, inside a bigger buffer.
                let ov = GemmView {
                    offset: 3,
                    rows: o,
                    cols: p,
                    row_stride: p + 2,
                    col_stride: 1,
                };
                for &tile in Tile::supported() {
                    for threads in [1, 2] {
                        let mut out = vec![f32::NAN; 3 + o * (p + 2)];
                        let ran = conv_with(
                            Some(tile),
                            &img,
                            &ic,
                            g,
                            (&wts, wv),
                            (&mut out, ov),
                            threads,
                        )
                        .expect("views fit");
                        if !ran {
                            continue; // more weights than window values: `gemm`'s
                        }
                        for oc in 0..o {
                            for px in 0..p {
                                let (got, want) = (out[3 + oc * (p + 2) + px], want[oc * p + px]);
                                let tol = 1e-5 * (1.0 + want.abs()) * (k as f64).sqrt();
                                assert!(
                                    (got as f64 - want).abs() <= tol,
                                    "case {n} group {g} {tile:?} {threads} threads: \
                                     [{oc}, {px}] = {got}, want {want}"
                                );
                            }
                            // The gaps between rows are not written.
                            if oc + 1 < o {
                                assert!(out[3 + oc * (p + 2) + p].is_nan());
                            }
                        }
                        assert!(out[..3].iter().all(|v| v.is_nan()));
                    }
                }
            }
        }
    }

    #[test]
    fn views_that_do_not_fit_are_errors_and_other_strides_decline() {
        let window = Window::square(3, 3, 1, 1);
        let ic = Im2Col {
            c: 2,
            h: 5,
            w: 5,
            window,
        };
        let (img, w) = (values(50, 1), values(4 * 18, 2));
        let wv = GemmView::row_major(4, 18);
        let ov = GemmView::row_major(4, 25);
        let mut out = vec![0.0; 100];
        let run = |img: &[f32], w: &[f32], wv, out: &mut [f32], ov, group| {
            conv_f32_nchw(img, &ic, group, (w, wv), (out, ov), 2)
        };
        assert!(
            run(&img[..49], &w, wv, &mut out, ov, 0).is_err(),
            "short image"
        );
        assert!(
            run(&img, &w[..71], wv, &mut out, ov, 0).is_err(),
            "short weights"
        );
        assert!(
            run(&img, &w, wv, &mut out[..99], ov, 0).is_err(),
            "short output"
        );
        assert!(run(&img, &w, wv, &mut out, ov, 1).is_err(), "no group 1");
        let overlapping = GemmView {
            row_stride: 24,
            ..ov
        };
        assert!(
            run(&img, &w, wv, &mut out, overlapping, 0).is_err(),
            "rows overlap"
        );
        let wrong_k = GemmView { cols: 17, ..wv };
        assert!(run(&img, &w, wrong_k, &mut out, ov, 0).is_err(), "k is 18");
        let transposed = GemmView {
            rows: 4,
            cols: 18,
            row_stride: 1,
            col_stride: 4,
            offset: 0,
        };
        assert!(!run(&img, &w, transposed, &mut out, ov, 0).expect("fits"));
    }
}
