//! Winograd F(4x4, 3x3) convolutions (Lavin and Gray, 2015) for 3x3
//! windows at stride 1: each 4x4 block of output pixels is
//! `A^T [(G g G^T) . (B^T d B)] A` over its 6x6 input tile `d`, so the
//! products become 36 GEMMs of `tiles x channels` by `channels x
//! outputs`: 36 multiply-adds per 16 outputs and channel pair, against
//! 144 for the direct product. The image is first copied channels-last
//! with its zero padding, so every transform works on 16 channels (or 16
//! outputs) at a time in vector lanes. The weights' transform
//! ([`WinogradWeights`]) is shared by a call's images: made per call, its
//! GEMMs are `gemm`'s, which packs it again, so only GEMMs of enough tiles
//! take the path, an image's ([`winograd_fits`]) or a batch of smaller
//! images' together ([`winograd_fits_images`]); made once and kept (a
//! cache keyed by the weights' storage), it is laid out in panels that a
//! register-tiled kernel reads in place, and any number of tiles fits
//! ([`winograd_fits_kept`]). Only whole blocks of 16 channels and outputs
//! take this path. The transforms are written in AVX-512 or AVX2
//! intrinsics (16 lanes in one register or two) and, for other CPUs, as
//! plain bounds-checked Rust over fixed-size lane arrays. With fewer
//! images than threads, each phase of an image splits over the threads;
//! or, for small weights and tile rows that split evenly, each thread
//! runs every phase on its own band of tile rows, joining once.
//! Rounding: the transforms' constants (1/6, 1/24,
//! sums of up to 36 terms) leave errors of a few 1e-6 of the output's
//! scale, about ten times the direct product's.
//!
//! Kept weights may instead be transformed for F(2x2, 3x3) (4x4 input
//! tiles, 16 products; [`WinogradTile`]), which [`winograd_form`] picks
//! where F(4x4)'s 36 transformed weights per 9 would stream from memory
//! for few tiles: ResNet-18's 7x7 layers at batch 1 read 37.7 MB of them
//! per call, F(2x2) 16.8 MB. The same code runs both: the transforms'
//! loops are generic over the tile's sides, each tile's matrices a static
//! method of a marker type. For calls of at most 32 tiles the kept
//! weights lie in strips of a few outputs ([`WinogradLayout`]) that the
//! products broadcast against sixteen tiles in lanes, so each weight is
//! read from memory once and the stream runs evenly under the products.

// The transforms' loops index the second axis of `[column][row]` arrays.
#![allow(clippy::needless_range_loop)]

use super::conv::with_scratch;
use super::{matmul_f32_strided, GemmView};
use crate::CodegenError;
use rayon::prelude::*;
use std::cell::RefCell;
use std::ops::Range;
use tilejit_ir::graph::Window;
use tilejit_ir::kernel::Im2Col;

/// Lanes: channels or output channels transformed together.
const L: usize = 16;
/// Output pixels per tile side of F(4x4, 3x3).
const M: usize = 4;
/// Input pixels per tile side (`M + 3 - 1`) of F(4x4, 3x3).
const T6: usize = 6;

/// A Winograd tile: F(4x4, 3x3), 36 products per 16 output pixels, or
/// F(2x2, 3x3), 16 per 4. F(2x2) multiplies 1.8x more per pixel but
/// reads 2.25x fewer transformed weights, which pays where the weights
/// stream from memory for few tiles (ResNet's 7x7 layers at batch 1:
/// 37.7 MB per call in F(4x4)); its constants are exact in binary.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum WinogradTile {
    /// F(4x4, 3x3): 6x6 input tiles.
    F4x4,
    /// F(2x2, 3x3): 4x4 input tiles.
    F2x2,
}

impl WinogradTile {
    /// Output pixels per tile side.
    pub fn outputs(self) -> usize {
        match self {
            WinogradTile::F4x4 => M,
            WinogradTile::F2x2 => 2,
        }
    }

    /// Input pixels per tile side.
    fn inputs(self) -> usize {
        self.outputs() + 2
    }

    /// Points of a transformed tile: one product each.
    pub fn points(self) -> usize {
        self.inputs() * self.inputs()
    }
}

/// How kept weights ([`WinogradWeights::kept`]) are laid out for the
/// point products, per point and block of 16 outputs.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum WinogradLayout {
    /// A panel `[c, 16]`: the weights in lanes, six tiles at a time
    /// broadcast against them. For many tiles, each panel read from
    /// memory once and then from cache for the tiles after the first six.
    Panels,
    /// Strips of 6, 6 and 4 outputs, `[c, 6]`, `[c, 6]` and `[c, 4]`:
    /// sixteen tiles in lanes, each weight broadcast against them. For
    /// few tiles: every weight is read once per 16 tiles in the order it
    /// is stored, so its stream from memory runs evenly under the
    /// products, where a panel's first six tiles wait on it and the rest
    /// leave memory idle (ResNet-18's 7x7 layers at batch 1, 16 tiles:
    /// their products took a fifth less time).
    Strips,
}

/// The tile and layout of kept weights ([`winograd_form`]).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct WinogradForm {
    /// The tile transformed for.
    pub tile: WinogradTile,
    /// How each point's blocks of 16 outputs lie.
    pub layout: WinogradLayout,
}

/// Each strip of a block of 16 outputs ([`WinogradLayout::Strips`]): its
/// first output and its width.
const STRIPS: [(usize, usize); 3] = [(0, 6), (6, 6), (12, 4)];

/// The most tiles of a call whose kept weights take strips (two blocks of
/// 16 lanes): beyond it a panel's weights serve many tiles from cache, and
/// strips measured slower (ResNet-18's layers at batch 8, 128 to 1568
/// tiles: 10-40%).
const STRIP_TILES: usize = 32;

/// The fewest tiles per GEMM worth the path: below it the GEMMs have
/// so few rows that `gemm` spends their time packing the weights (a
/// 28x28 image has 49; a 14x14 one, 16, ran slower than the direct
/// kernel).
const MIN_TILES: usize = 49;

thread_local! {
    /// The images channels-last with their zero padding: `[images, hp,
    /// wp, c]`.
    static CHANNELS_LAST: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The transformed input: `[point, tile, c]`, the images' tiles in turn.
    static INPUT: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The products, one per point: `[point, tile, outputs]`.
    static PRODUCTS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// A band's outputs (`bands_on_threads`): `[outputs, band pixels]`.
    static BAND_OUT: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// One point's tiles in lanes for strips (`tiles_in_lanes`): `[tiles
    /// / 16, c, 16]`.
    static TILE_LANES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Whether a convolution of geometry `ic` into `o` output channels runs
/// as Winograd F(4x4, 3x3): a 3x3 window of stride and dilation 1, one
/// group, channels and outputs in whole blocks of 16, and at least
/// 49 tiles per image.
pub fn winograd_fits(ic: &Im2Col, o: usize) -> bool {
    tiles_per_image(ic, o).is_some_and(|t| t >= MIN_TILES)
}

/// Whether `images` images of geometry `ic` run as Winograd F(4x4, 3x3)
/// together ([`conv_f32_winograd_images`]): as [`winograd_fits`], with
/// the 49 tiles counted over all the images (ResNet's 14x14 layers at
/// batch 8: 16 tiles an image, 128 in all).
pub fn winograd_fits_images(ic: &Im2Col, o: usize, images: usize) -> bool {
    tiles_per_image(ic, o).is_some_and(|t| t.saturating_mul(images) >= MIN_TILES)
}

/// Whether a convolution of geometry `ic` into `o` output channels runs
/// as Winograd with [`WinogradWeights::kept`] (either tile): the window
/// and channels of [`winograd_fits`], any number of tiles.
pub fn winograd_fits_kept(ic: &Im2Col, o: usize) -> bool {
    tiles_per_image(ic, o).is_some_and(|t| t > 0)
}

/// The fewest tiles of a call with weights `u`.
fn min_tiles(u: &WinogradWeights) -> usize {
    match u.layout {
        Some(_) => 1,
        None => MIN_TILES,
    }
}

/// The form of kept weights ([`WinogradWeights::kept`]) for a call of
/// `images` images of geometry `ic` into `o` outputs: the tile
/// `winograd_tile` picks, in strips for at most 32 tiles, else in
/// panels ([`WinogradLayout`]).
pub fn winograd_form(ic: &Im2Col, o: usize, images: usize) -> WinogradForm {
    let tile = winograd_tile(ic, o, images);
    let m = tile.outputs();
    let tiles = ic
        .window
        .out(ic.h, ic.w)
        .map_or(0, |(oh, ow)| oh.div_ceil(m) * ow.div_ceil(m) * images);
    let layout = match tiles <= STRIP_TILES {
        true => WinogradLayout::Strips,
        false => WinogradLayout::Panels,
    };
    WinogradForm { tile, layout }
}

/// The tile for kept weights ([`WinogradWeights::kept`]) of an `ic`
/// geometry into `o` outputs, `images` at a time: F(2x2, 3x3) where the
/// transformed weights, streamed from memory once per call, would cost
/// F(4x4) more than its fewer products save. The cost per channel pair
/// is the larger of the products and the weights read, one weight read
/// worth about as much as 13 multiply-adds (90 G multiply-adds and 7 G
/// floats a second on 2 cores); weights of 4 MiB or less are taken to
/// stay in cache.
fn winograd_tile(ic: &Im2Col, o: usize, images: usize) -> WinogradTile {
    let Some((oh, ow)) = ic.window.out(ic.h, ic.w) else {
        return WinogradTile::F4x4;
    };
    let cost = |t: WinogradTile| {
        let m = t.outputs();
        let tiles = oh.div_ceil(m) * ow.div_ceil(m) * images;
        let points = t.points();
        let bytes = points * ic.c * o * 4;
        let read = match bytes > 4 << 20 {
            true => points * weight_read_cost(),
            false => 0,
        };
        (points * tiles).max(read)
    };
    match cost(WinogradTile::F2x2) < cost(WinogradTile::F4x4) {
        true => WinogradTile::F2x2,
        false => WinogradTile::F4x4,
    }
}

/// Multiply-adds one streamed weight read is worth (see [`winograd_tile`]),
/// with AVX2 or AVX-512 alike: on an AVX-512 machine whose FMA rate is
/// AVX2's, twice this (once assumed for AVX-512) picked F(2x2) for
/// ResNet's layer3 at batch 1, 8-11% slower than F(4x4) there.
fn weight_read_cost() -> usize {
    13
}

/// The tiles of one image, when the window and channels fit the path.
fn tiles_per_image(ic: &Im2Col, o: usize) -> Option<usize> {
    let win = &ic.window;
    let (oh, ow) = win.out(ic.h, ic.w)?;
    let fits = (win.kh, win.kw, win.stride, win.dilation, win.groups) == (3, 3, (1, 1), (1, 1), 1)
        && ic.c > 0
        && ic.c.is_multiple_of(L)
        && o > 0
        && o.is_multiple_of(L)
        && oh > 0
        && ow > 0;
    fits.then(|| oh.div_ceil(M) * ow.div_ceil(M))
}

/// A 3x3 convolution's weights transformed for [`conv_f32_winograd`]:
/// `G g G^T` per output and input channel, stored `[point, c, o]` (made
/// per call: [`WinogradWeights::new`]) or per point in blocks of 16
/// outputs as a [`WinogradLayout`] says (made once and kept:
/// [`WinogradWeights::kept`]).
#[derive(Debug)]
pub struct WinogradWeights {
    c: usize,
    o: usize,
    tile: WinogradTile,
    u: Vec<f32>,
    /// How kept weights lie, which their products read in place; `None`
    /// for rows, which `gemm` packs.
    layout: Option<WinogradLayout>,
}

impl WinogradWeights {
    /// Transforms OIHW 3x3 weights read through `wv` (rows: the `o`
    /// output channels, a multiple of 16; columns: `c * 9`, of unit
    /// stride in OIHW weights or any other, as in `[c * 9, o]` rows)
    /// for one call: the point GEMMs are `gemm`'s, which packs them again,
    /// so they fit only images (or batches) of 49 tiles or more
    /// ([`winograd_fits_images`]). An error when the view does not fit `w`
    /// or the sizes disagree.
    pub fn new(w: &[f32], wv: GemmView, c: usize) -> Result<WinogradWeights, CodegenError> {
        WinogradWeights::make(w, wv, c, WinogradTile::F4x4, None)
    }

    /// [`WinogradWeights::new`] for weights transformed once and kept
    /// (a cache keyed by the weights' storage): stored in blocks of 16
    /// outputs that the point products read straight, without packing,
    /// so images of any number of tiles fit ([`winograd_fits_kept`]):
    /// ResNet's 14x14 and 7x7 layers at batch 1, whose few tiles per
    /// GEMM left `gemm` packing the weights most of the time. In `form`
    /// (see [`winograd_form`]); either layout runs any number of tiles.
    pub fn kept(
        w: &[f32],
        wv: GemmView,
        c: usize,
        form: WinogradForm,
    ) -> Result<WinogradWeights, CodegenError> {
        WinogradWeights::make(w, wv, c, form.tile, Some(form.layout))
    }

    fn make(
        w: &[f32],
        wv: GemmView,
        c: usize,
        tile: WinogradTile,
        layout: Option<WinogradLayout>,
    ) -> Result<WinogradWeights, CodegenError> {
        let o = wv.rows;
        let fits = c.checked_mul(9) == Some(wv.cols)
            && o.is_multiple_of(L)
            && wv.end().is_some_and(|e| e <= w.len());
        let len = tile.points().checked_mul(c).and_then(|x| x.checked_mul(o));
        let (true, Some(len)) = (fits, len) else {
            return Err(bad(format!(
                "3x3 weights {wv:?} ({} elements) for {c} channels do not fit",
                w.len()
            )));
        };
        // On huge pages (`zeroed_vec`): kept weights are read on every
        // call, and on 4 KiB pages each 4 KiB of them is a TLB miss.
        let mut u =
            super::sys::zeroed_vec::<f32>(len).ok_or_else(|| CodegenError::OutOfMemory {
                kernel: "conv".into(),
                what: "transformed weights",
                bytes: len.saturating_mul(4),
            })?;
        if len == 0 {
            return Ok(WinogradWeights {
                c,
                o,
                tile,
                u,
                layout,
            });
        }
        // Transformed on every thread, where the fresh zero pages then
        // fault in too (one thread took 17% of a 256-channel layer at
        // batch 8 while the others waited): a part per block of input
        // channels (rows) or of panels, its contiguous piece of each point.
        let threads = rayon::current_num_threads().max(1);
        let parts: Vec<Part> = if let Some(layout) = layout {
            let per = (o / L).div_ceil(threads) * L;
            (0..o)
                .step_by(per)
                .map(|ob0| Part::Blocks {
                    obs: ob0..(ob0 + per).min(o),
                    c,
                    layout,
                })
                .collect()
        } else {
            let per = c.div_ceil(threads);
            (0..c)
                .step_by(per)
                .map(|ci0| Part::Rows {
                    cis: ci0..(ci0 + per).min(c),
                    o,
                })
                .collect()
        };
        let mut pieces: Vec<(Part, Vec<&mut [f32]>)> = parts
            .into_iter()
            .map(|part| (part, Vec::with_capacity(tile.points())))
            .collect();
        for point in u.chunks_mut(c * o) {
            let mut rest = point;
            for (part, segs) in pieces.iter_mut() {
                let (mine, tail) = rest.split_at_mut(part.len());
                segs.push(mine);
                rest = tail;
            }
        }
        pieces
            .into_par_iter()
            .for_each(|(part, mut segs)| match tile {
                WinogradTile::F4x4 => weights4_v(w, wv, &part, &mut segs),
                WinogradTile::F2x2 => weights2_v(w, wv, &part, &mut segs),
            });
        Ok(WinogradWeights {
            c,
            o,
            tile,
            u,
            layout,
        })
    }

    /// Output channels.
    pub fn outputs(&self) -> usize {
        self.o
    }

    /// The tile they were transformed for.
    pub fn tile(&self) -> WinogradTile {
        self.tile
    }

    /// How they lie when kept; `None` when made per call (in rows).
    pub fn layout(&self) -> Option<WinogradLayout> {
        self.layout
    }

    /// The transformed values, as [`WinogradWeights`] lays them out.
    pub fn values(&self) -> &[f32] {
        &self.u
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.u.len() * 4
    }
}

/// The piece of each point one thread transforms.
#[derive(Clone, Debug)]
enum Part {
    /// Input channels `cis` of `[c, o]` rows: `[cis.len(), o]`.
    Rows { cis: Range<usize>, o: usize },
    /// Blocks of 16 outputs `obs` of `c` channels, `[obs.len() / 16, c *
    /// 16]`, each laid out as `layout` says.
    Blocks {
        obs: Range<usize>,
        c: usize,
        layout: WinogradLayout,
    },
}

impl Part {
    /// Elements of the piece, per point.
    fn len(&self) -> usize {
        match self {
            Part::Rows { cis, o } => cis.len() * o,
            Part::Blocks { obs, c, .. } => obs.len() * c,
        }
    }
}

/// One image's convolution by Winograd F(4x4, 3x3): output channels
/// `o0..o0 + ov.rows` (a multiple of 16) of `u` into `out`'s rows (`ov`:
/// those channels by `oh * ow` pixels, unit column stride), from `img`
/// (`[c, h, w]`) of geometry `ic`, which [`winograd_fits`] accepted. Each
/// phase splits over up to `threads` threads. An error when a view does
/// not fit its buffer or the shapes disagree.
pub fn conv_f32_winograd(
    img: &[f32],
    ic: &Im2Col,
    u: &WinogradWeights,
    o0: usize,
    (out, ov): (&mut [f32], GemmView),
    threads: usize,
) -> Result<(), CodegenError> {
    let (c, nb) = (ic.c, ov.rows);
    let (oh, ow) = ic.window.out(ic.h, ic.w).unwrap_or((0, 0));
    let image = c.checked_mul(ic.h).and_then(|x| x.checked_mul(ic.w));
    if tiles_per_image(ic, u.o).is_none_or(|t| t < min_tiles(u))
        || u.c != c
        || image.is_none_or(|n| img.len() < n)
        || !nb.is_multiple_of(L)
        || o0.checked_add(nb).is_none_or(|e| e > u.o)
        || oh.checked_mul(ow) != Some(ov.cols)
        || ov.col_stride != 1
        || (nb > 1 && ov.row_stride < ov.cols)
        || ov.end().is_none_or(|e| e > out.len())
    {
        return Err(bad(format!(
            "image of {} elements ({ic:?}), {}x{} transformed weights from output {o0} \
             -> {ov:?} ({} elements) do not fit",
            img.len(),
            u.c,
            u.o,
            out.len()
        )));
    }
    if nb == 0 {
        return Ok(());
    }
    if let Some(bands) = bands(ic, u, threads) {
        return bands_on_threads(img, ic, u, o0, &bands, (out, ov));
    }
    let plane = ic.h * ic.w;
    transform(img, 1, plane, ic, u, o0, nb, Dest::View(out, ov), threads)
}

/// Weights up to this size are read whole by every thread of a banded
/// call ([`bands`]): they stay in cache (ResNet-18's 64- and 128-channel
/// layers: 0.6 and 2.4 MB), where bigger ones would be streamed once per
/// thread.
const BAND_WEIGHT_BYTES: usize = 4 << 20;

/// A band of an image's output rows, `out_rows`, as a convolution of its
/// own: input rows `rows` of the image, padded by `pad` (top, bottom).
#[derive(Debug)]
struct Band {
    out_rows: Range<usize>,
    rows: Range<usize>,
    pad: (usize, usize),
}

/// One image's call on `threads` threads split into one band of whole
/// tile rows per thread, each run start to end on its thread: no thread
/// waits for another between the phases (ResNet-18's 56x56 layers at
/// batch 1 ran 6-8% faster so, the joins having cost them 20% of one
/// thread's time). Only for weights small enough that every thread
/// reading them all costs nothing ([`BAND_WEIGHT_BYTES`]) and tile rows
/// that split evenly, at least two a band; else `None`.
fn bands(ic: &Im2Col, u: &WinogradWeights, threads: usize) -> Option<Vec<Band>> {
    let (oh, _) = ic.window.out(ic.h, ic.w)?;
    let m = u.tile.outputs();
    let th = oh.div_ceil(m);
    let per = th.div_ceil(threads.max(1));
    // Bands of equal tile rows (ResNet's 28x28 layers, 7 tile rows, would
    // split 4 and 3 and wait on the bigger band).
    if threads < 2 || per < 2 || per * threads != th || u.u.len() * 4 > BAND_WEIGHT_BYTES {
        return None;
    }
    let pt = ic.window.pad[0] as usize;
    let bands: Vec<Band> = (0..th)
        .step_by(per)
        .map(|t0| {
            let out_rows = t0 * m..((t0 + per) * m).min(oh);
            // Padded rows `out_rows.start..out_rows.end + 2`, clipped to
            // the image (padded row `y` is image row `y - pt`).
            let first = out_rows.start.max(pt);
            let end = (out_rows.end + 2).min(ic.h + pt);
            Band {
                pad: (first - out_rows.start, out_rows.end + 2 - end),
                rows: first - pt..end - pt,
                out_rows,
            }
        })
        .collect();
    // Every band reads a row of the image.
    bands.iter().all(|b| !b.rows.is_empty()).then_some(bands)
}

/// Runs `bands` of one checked image's call in parallel, each on one
/// thread, writing its own rows of every output channel.
fn bands_on_threads(
    img: &[f32],
    ic: &Im2Col,
    u: &WinogradWeights,
    o0: usize,
    bands: &[Band],
    (out, ov): (&mut [f32], GemmView),
) -> Result<(), CodegenError> {
    let (oh, ow) = ic.window.out(ic.h, ic.w).unwrap_or((0, 0));
    let (nb, plane) = (ov.rows, ic.h * ic.w);
    // Each band's lines: its rows of every output channel.
    let widths: Vec<usize> = bands.iter().map(|b| b.out_rows.len() * ow).collect();
    let rows = super::view_lines(out, ov.offset, nb, oh * ow, ov.row_stride);
    let pieces: Vec<_> = bands.iter().zip(super::cut_lines(rows, &widths)).collect();
    pieces.into_par_iter().try_for_each(|(b, lines)| {
        let ic_b = Im2Col {
            h: b.rows.len(),
            window: Window {
                pad: [
                    b.pad.0 as u32,
                    ic.window.pad[1],
                    b.pad.1 as u32,
                    ic.window.pad[3],
                ],
                ..ic.window
            },
            ..*ic
        };
        let cols = b.out_rows.len() * ow;
        // The band's rows, one output channel after another, each
        // `cols` long: gathered back into `lines` after.
        with_scratch(&BAND_OUT, nb * cols, |o| {
            let view = GemmView::row_major(nb, cols);
            let first = b.rows.start * ic.w;
            transform(
                &img[first..],
                1,
                plane,
                &ic_b,
                u,
                o0,
                nb,
                Dest::View(o, view),
                1,
            )?;
            for (line, src) in lines.into_iter().zip(o.chunks_exact(cols)) {
                line.copy_from_slice(src);
            }
            Ok(())
        })
    })
}

/// Every image of `imgs` (`[images, c, h, w]`, of geometry `ic`, which
/// [`winograd_fits_images`] accepted) by Winograd F(4x4, 3x3) at once,
/// the tiles of all of them in each of the 36 GEMMs, into `out` (`[images,
/// outputs, oh * ow]`), every phase split over up to `threads` threads.
/// An error when the sizes disagree.
pub fn conv_f32_winograd_images(
    imgs: &[f32],
    ic: &Im2Col,
    u: &WinogradWeights,
    out: &mut [f32],
    threads: usize,
) -> Result<(), CodegenError> {
    let (oh, ow) = ic.window.out(ic.h, ic.w).unwrap_or((0, 0));
    let image = ic.c.checked_mul(ic.h).and_then(|x| x.checked_mul(ic.w));
    let images = image.filter(|&n| n > 0).map_or(0, |n| imgs.len() / n);
    let outputs = images
        .checked_mul(u.o)
        .and_then(|x| x.checked_mul(oh))
        .and_then(|x| x.checked_mul(ow));
    if images == 0
        || tiles_per_image(ic, u.o).is_none_or(|t| t.saturating_mul(images) < min_tiles(u))
        || u.c != ic.c
        || image.and_then(|n| n.checked_mul(images)) != Some(imgs.len())
        || outputs != Some(out.len())
    {
        return Err(bad(format!(
            "{} image elements ({ic:?}), {}x{} transformed weights -> {} output elements \
             do not fit",
            imgs.len(),
            u.c,
            u.o,
            out.len()
        )));
    }
    let plane = ic.h * ic.w;
    transform(
        imgs,
        images,
        plane,
        ic,
        u,
        0,
        u.o,
        Dest::Images(out),
        threads,
    )
}

/// Where a call's outputs go.
enum Dest<'o> {
    /// One image's outputs `o0..o0 + ov.rows`, as `ov`'s rows.
    View(&'o mut [f32], GemmView),
    /// Every image's every output: `[images, outputs, pixels]`.
    Images(&'o mut [f32]),
}

/// The convolution of `images` checked images: transforms, products and
/// the inverse transform, each phase split over up to `threads` parts
/// (padded rows, tiles, points, then blocks of 16 outputs), each part
/// writing slices of its own. An image's channels are `plane` elements
/// apart (`ic.h * ic.w`, or more for a band of a taller image's rows).
#[allow(clippy::too_many_arguments)]
fn transform(
    imgs: &[f32],
    images: usize,
    plane: usize,
    ic: &Im2Col,
    u: &WinogradWeights,
    o0: usize,
    nb: usize,
    dest: Dest<'_>,
    threads: usize,
) -> Result<(), CodegenError> {
    let c = ic.c;
    let (oh, ow) = ic.window.out(ic.h, ic.w).unwrap_or((0, 0));
    let (tile, points) = (u.tile, u.tile.points());
    let m = tile.outputs();
    let (th, tw) = (oh.div_ceil(m), ow.div_ceil(m));
    let per = th * tw;
    let tiles = per * images;
    let (hp, wp) = (m * th + 2, m * tw + 2);
    // An image's elements from its first, and from one image to the next.
    let span = c.saturating_sub(1) * plane + ic.h * ic.w;
    let image = c * plane;
    let g = Tiles {
        tile,
        c,
        h: ic.h,
        w: ic.w,
        pt: ic.window.pad[0] as usize,
        pl: ic.window.pad[1] as usize,
        plane,
        wp,
        tw,
        per,
        tiles,
        xt_image: hp * wp * c,
    };
    let parts = threads.max(1);
    with_scratch(&CHANNELS_LAST, images * hp * wp * c, |xt| {
        // Each image's padded rows in up to `parts` pieces.
        let rows = hp.div_ceil(parts.div_ceil(images).min(hp));
        let pieces = xt.chunks_mut(hp * wp * c).enumerate().flat_map(|(b, xi)| {
            let img = &imgs[b * image..b * image + span];
            xi.chunks_mut(rows * wp * c)
                .enumerate()
                .map(move |(i, x)| (img, i * rows, x))
        });
        each(pieces, parts, |(img, y0, x)| {
            channels_last_v(img, &g, y0, x)
        });
        let xt = &*xt;
        with_scratch(&INPUT, points * tiles * c, |v| {
            let ranges = split(tiles, parts);
            let mut slabs: Vec<Vec<&mut [f32]>> = ranges.iter().map(|_| Vec::new()).collect();
            for mut point in v.chunks_mut(tiles * c) {
                for (r, part) in ranges.iter().zip(&mut slabs) {
                    let (mine, rest) = std::mem::take(&mut point).split_at_mut(r.len() * c);
                    part.push(mine);
                    point = rest;
                }
            }
            each(ranges.into_iter().zip(slabs), parts, |(r, mut slabs)| {
                input_transform_v(xt, &g, r, &mut slabs)
            });
            let v = &*v;
            with_scratch(&PRODUCTS, points * tiles * nb, |m| {
                products(v, u, o0, nb, tiles, m, threads)?;
                let m = &*m;
                let size = (oh, ow);
                match dest {
                    Dest::View(out, ov) => {
                        let blocks = split(nb / L, parts.min(nb / L));
                        let rows = blocks[0].len() * L;
                        let outs = out[ov.offset..].chunks_mut(rows * ov.row_stride);
                        let view = GemmView { offset: 0, ..ov };
                        each(outs.zip(blocks), parts, |(o, b)| {
                            let obs = b.start * L..b.end * L;
                            output_transform_v(m, &g, nb, 0..per, obs, size, (o, view))
                        });
                    }
                    Dest::Images(out) => {
                        // One piece per image and block of 16 outputs.
                        let p = oh * ow;
                        let view = GemmView::row_major(L, p);
                        let blocks = nb / L;
                        each(out.chunks_mut(L * p).enumerate(), parts, |(i, o)| {
                            let (b, ob) = (i / blocks, i % blocks * L);
                            let ts = b * per..(b + 1) * per;
                            output_transform_v(m, &g, nb, ts, ob..ob + L, size, (o, view))
                        });
                    }
                }
                Ok(())
            })
        })
    })
}

/// `0..n` in `parts` ranges of `n.div_ceil(parts)` (the last shorter,
/// none empty unless `n` is 0).
fn split(n: usize, parts: usize) -> Vec<std::ops::Range<usize>> {
    let size = n.div_ceil(parts.max(1)).max(1);
    (0..n.max(1))
        .step_by(size)
        .map(|a| a..(a + size).min(n))
        .collect()
}

/// Runs `f` on each item, on up to `threads` pool threads when more than
/// one.
fn each<T: Send>(items: impl Iterator<Item = T>, threads: usize, f: impl Fn(T) + Sync + Send) {
    if threads > 1 {
        items.collect::<Vec<_>>().into_par_iter().for_each(f)
    } else {
        items.for_each(f)
    }
}

/// The images' tiling. Tiles are numbered image by image, row-major
/// within an image.
struct Tiles {
    tile: WinogradTile,
    c: usize,
    h: usize,
    w: usize,
    /// Top and left padding.
    pt: usize,
    pl: usize,
    /// Elements from one channel's plane of the image to the next (`h *
    /// w`, or more for a band of a taller image's rows).
    plane: usize,
    /// The channels-last copy's row length in pixels.
    wp: usize,
    /// Tiles per row.
    tw: usize,
    /// Tiles per image.
    per: usize,
    /// Tiles of all the images.
    tiles: usize,
    /// Elements of one image's channels-last copy.
    xt_image: usize,
}

impl Tiles {
    /// Where tile `t`'s inputs start in the channels-last copy, and its
    /// top-left output pixel in its image.
    #[inline(always)]
    fn place(&self, t: usize) -> (usize, usize, usize) {
        let (b, lt) = (t / self.per, t % self.per);
        let m = self.tile.outputs();
        (b * self.xt_image, m * (lt / self.tw), m * (lt % self.tw))
    }
}

fn bad(message: String) -> CodegenError {
    CodegenError::Launch {
        kernel: "conv".into(),
        message,
    }
}

/// Defines `$name`, which runs `$body` (a transform over lane arrays,
/// `#[inline(always)]`) compiled for AVX-512 or AVX2 when this CPU has
/// it: the compiler then keeps each lane array in one or two registers.
macro_rules! vectorised {
    ($name:ident = $body:ident($($arg:ident: $ty:ty),*)) => {
        fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,fma")]
                fn wide($($arg: $ty),*) {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                fn pair($($arg: $ty),*) {
                    $body($($arg),*)
                }
                let cpu = crate::host::cpu_features();
                if cpu.avx512f && cpu.fma {
                    // SAFETY: the CPU has AVX-512F and FMA, the features
                    // `wide` is compiled with; its body is safe code.
                    return unsafe { wide($($arg),*) };
                }
                if cpu.avx2 && cpu.fma {
                    // SAFETY: as above, for AVX2 and FMA and `pair`.
                    return unsafe { pair($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}

/// [`weights`] for F(4x4, 3x3).
#[inline(always)]
fn weights4(w: &[f32], wv: GemmView, part: &Part, segs: &mut [&mut [f32]]) {
    weights::<F4, T6, M>(w, wv, part, segs)
}

/// [`weights`] for F(2x2, 3x3).
#[inline(always)]
fn weights2(w: &[f32], wv: GemmView, part: &Part, segs: &mut [&mut [f32]]) {
    weights::<F2, 4, 2>(w, wv, part, segs)
}

/// A tile's transforms along one axis, over lane arrays: `T` inputs
/// and `R` outputs a side. (Static methods, not function values: those
/// are called through shims that are not inlined, and the intrinsics
/// inside then run as calls.)
trait Axis<const T: usize, const R: usize> {
    /// `B^T d`.
    fn bt(d: &[Lanes; T]) -> [Lanes; T];
    /// `A^T m`.
    fn at(m: &[Lanes; T]) -> [Lanes; R];
    /// `G g`.
    fn gt(g: &[Lanes; 3]) -> [Lanes; T];
}

/// F(4x4, 3x3)'s transforms.
struct F4;
/// F(2x2, 3x3)'s transforms.
struct F2;

impl Axis<T6, M> for F4 {
    #[inline(always)]
    fn bt(d: &[Lanes; T6]) -> [Lanes; T6] {
        let [d0, d1, d2, d3, d4, d5] = d;
        [
            lanes(|l| 4.0 * d0[l] - 5.0 * d2[l] + d4[l]),
            lanes(|l| -4.0 * (d1[l] + d2[l]) + d3[l] + d4[l]),
            lanes(|l| 4.0 * (d1[l] - d2[l]) - d3[l] + d4[l]),
            lanes(|l| 2.0 * (d3[l] - d1[l]) - d2[l] + d4[l]),
            lanes(|l| 2.0 * (d1[l] - d3[l]) - d2[l] + d4[l]),
            lanes(|l| 4.0 * d1[l] - 5.0 * d3[l] + d5[l]),
        ]
    }
    #[inline(always)]
    fn at(m: &[Lanes; T6]) -> [Lanes; M] {
        let [m0, m1, m2, m3, m4, m5] = m;
        [
            lanes(|l| m0[l] + m1[l] + m2[l] + m3[l] + m4[l]),
            lanes(|l| m1[l] - m2[l] + 2.0 * (m3[l] - m4[l])),
            lanes(|l| m1[l] + m2[l] + 4.0 * (m3[l] + m4[l])),
            lanes(|l| m1[l] - m2[l] + 8.0 * (m3[l] - m4[l]) + m5[l]),
        ]
    }
    #[inline(always)]
    fn gt(g: &[Lanes; 3]) -> [Lanes; T6] {
        let [g0, g1, g2] = g;
        [
            lanes(|l| g0[l] / 4.0),
            lanes(|l| -(g0[l] + g1[l] + g2[l]) / 6.0),
            lanes(|l| -(g0[l] - g1[l] + g2[l]) / 6.0),
            lanes(|l| g0[l] / 24.0 + g1[l] / 12.0 + g2[l] / 6.0),
            lanes(|l| g0[l] / 24.0 - g1[l] / 12.0 + g2[l] / 6.0),
            *g2,
        ]
    }
}

impl Axis<4, 2> for F2 {
    #[inline(always)]
    fn bt(d: &[Lanes; 4]) -> [Lanes; 4] {
        let [d0, d1, d2, d3] = d;
        [
            lanes(|l| d0[l] - d2[l]),
            lanes(|l| d1[l] + d2[l]),
            lanes(|l| d2[l] - d1[l]),
            lanes(|l| d1[l] - d3[l]),
        ]
    }
    #[inline(always)]
    fn at(m: &[Lanes; 4]) -> [Lanes; 2] {
        let [m0, m1, m2, m3] = m;
        [
            lanes(|l| m0[l] + m1[l] + m2[l]),
            lanes(|l| m1[l] - m2[l] - m3[l]),
        ]
    }
    #[inline(always)]
    fn gt(g: &[Lanes; 3]) -> [Lanes; 4] {
        let [g0, g1, g2] = g;
        [
            *g0,
            lanes(|l| (g0[l] + g1[l] + g2[l]) * 0.5),
            lanes(|l| (g0[l] - g1[l] + g2[l]) * 0.5),
            *g2,
        ]
    }
}

vectorised!(weights4_v = weights4(w: &[f32], wv: GemmView, part: &Part, segs: &mut [&mut [f32]]));
vectorised!(weights2_v = weights2(w: &[f32], wv: GemmView, part: &Part, segs: &mut [&mut [f32]]));
/// The channels-last copy, as [`input_transform_v`].
fn channels_last_v(img: &[f32], g: &Tiles, y0: usize, xt: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if let (Some(isa), true) = (x86::isa(), x86::gathers_fit(g.c * g.plane)) {
        return x86::channels_last(isa, img, g, y0, xt);
    }
    channels_last(img, g, y0, xt)
}

/// The input transform, in AVX-512 or AVX2 intrinsics where the CPU has
/// them (written as lane arrays the compiler left scalar: 0.76 µs a
/// tile).
fn input_transform_v(xt: &[f32], g: &Tiles, tiles: Range<usize>, v: &mut [&mut [f32]]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = x86::isa() {
        return x86::input_transform(isa, xt, g, tiles, v);
    }
    input_transform(xt, g, tiles, v)
}

/// The output transform, as [`input_transform_v`].
fn output_transform_v(
    m: &[f32],
    g: &Tiles,
    nb: usize,
    tiles: Range<usize>,
    obs: Range<usize>,
    size: (usize, usize),
    out: (&mut [f32], GemmView),
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = x86::isa() {
        return x86::output_transform(isa, m, g, nb, tiles, obs, size, out);
    }
    output_transform(m, g, nb, tiles, obs, size, out)
}

type Lanes = [f32; L];

#[inline(always)]
fn lanes(f: impl Fn(usize) -> f32) -> Lanes {
    std::array::from_fn(f)
}

/// `(G g G^T)[point]` for each output and channel of `part`, 16
/// outputs at a time, into `segs[point]` (the part's piece of the point,
/// laid out as [`Part`] says), for the tile of `A`.
#[inline(always)]
fn weights<A: Axis<T, R>, const T: usize, const R: usize>(
    w: &[f32],
    wv: GemmView,
    part: &Part,
    segs: &mut [&mut [f32]],
) {
    let (cis, obs) = match part {
        Part::Rows { cis, o } => (cis.clone(), 0..*o),
        Part::Blocks { obs, c, .. } => (0..*c, obs.clone()),
    };
    for ob in obs.clone().step_by(L) {
        for ci in cis.clone() {
            // g[i][j] for the block's 16 outputs.
            let g: [[Lanes; 3]; 3] = std::array::from_fn(|i| {
                std::array::from_fn(|j| {
                    let tap = (ci * 9 + i * 3 + j) * wv.col_stride;
                    lanes(|l| w[wv.offset + (ob + l) * wv.row_stride + tap])
                })
            });
            // Rows then columns: G g (Tx3), then (G g) G^T (TxT).
            let cols: [[Lanes; T]; 3] =
                std::array::from_fn(|j| A::gt(&[g[0][j], g[1][j], g[2][j]]));
            for a in 0..T {
                let row = A::gt(&[cols[0][a], cols[1][a], cols[2][a]]);
                for (b, v) in row.iter().enumerate() {
                    let seg = &mut *segs[a * T + b];
                    match part {
                        Part::Rows { o, .. } => {
                            let at = (ci - cis.start) * o + ob;
                            seg[at..at + L].copy_from_slice(v)
                        }
                        Part::Blocks { c, layout, .. } => {
                            let block = (ob - obs.start) * c;
                            match layout {
                                WinogradLayout::Panels => {
                                    seg[block + ci * L..][..L].copy_from_slice(v)
                                }
                                WinogradLayout::Strips => {
                                    for (s0, sw) in STRIPS {
                                        let at = block + s0 * c + ci * sw;
                                        seg[at..at + sw].copy_from_slice(&v[s0..s0 + sw]);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The rows of `xt` (a channels-last copy from padded row `y0`, as many
/// rows as it holds) with their zero padding written: `inside(row, iy,
/// width)` then writes the `width` pixels of image row `iy` into each
/// row that has one.
#[inline(always)]
fn padded_rows(
    g: &Tiles,
    y0: usize,
    xt: &mut [f32],
    mut inside: impl FnMut(&mut [f32], usize, usize),
) {
    let (c, wp) = (g.c, g.wp);
    for (y, row) in xt.chunks_exact_mut(wp * c).enumerate() {
        let Some(iy) = (y0 + y).checked_sub(g.pt).filter(|&iy| iy < g.h) else {
            row.fill(0.0);
            continue;
        };
        let within = g.pl * c..((g.pl + g.w) * c).min(row.len());
        row[..within.start].fill(0.0);
        row[within.end..].fill(0.0);
        inside(row, iy, within.len() / c);
    }
}

/// `xt[y, x, c]`: the image channels-last, with its zero padding, from
/// padded row `y0` for as many rows as `xt` holds.
#[inline(always)]
fn channels_last(img: &[f32], g: &Tiles, y0: usize, xt: &mut [f32]) {
    padded_rows(g, y0, xt, |row, iy, width| {
        for ci in 0..g.c {
            let src = &img[ci * g.plane + iy * g.w..][..width];
            for (x, &v) in src.iter().enumerate() {
                row[(g.pl + x) * g.c + ci] = v;
            }
        }
    })
}

/// `v[point][t - tiles.start, c] = (B^T d B)[point]` over the inputs
/// `d` of each tile `t` of `tiles`, 16 channels at a time.
fn input_transform(xt: &[f32], g: &Tiles, tiles: Range<usize>, v: &mut [&mut [f32]]) {
    match g.tile {
        WinogradTile::F4x4 => input_transform_t::<F4, T6, M>(xt, g, tiles, v),
        WinogradTile::F2x2 => input_transform_t::<F2, 4, 2>(xt, g, tiles, v),
    }
}

/// [`input_transform`] for the tile of `A`.
#[inline(always)]
fn input_transform_t<A: Axis<T, R>, const T: usize, const R: usize>(
    xt: &[f32],
    g: &Tiles,
    tiles: Range<usize>,
    v: &mut [&mut [f32]],
) {
    let (c, wp) = (g.c, g.wp);
    for t in tiles.clone() {
        let (base, y0, x0) = g.place(t);
        for cb in (0..c).step_by(L) {
            let d: [[Lanes; T]; T] = std::array::from_fn(|r| {
                std::array::from_fn(|q| {
                    let at = base + ((y0 + r) * wp + x0 + q) * c + cb;
                    let mut x = [0.0; L];
                    x.copy_from_slice(&xt[at..at + L]);
                    x
                })
            });
            // Columns of B^T d, then rows of (B^T d) B.
            let cols: [[Lanes; T]; T] =
                std::array::from_fn(|q| A::bt(&std::array::from_fn(|r| d[r][q])));
            for a in 0..T {
                let row = A::bt(&std::array::from_fn(|q| cols[q][a]));
                for (b, x) in row.iter().enumerate() {
                    let at = (t - tiles.start) * c + cb;
                    v[a * T + b][at..at + L].copy_from_slice(x);
                }
            }
        }
    }
}

/// The 36 GEMMs `m[point] (tiles x nb) = v[point] (tiles x c) @
/// u[point][:, o0..o0 + nb]`, one per thread at a time: `gemm`'s, or
/// for kept weights, [`panel_products_v`] or [`strip_products_v`].
fn products(
    v: &[f32],
    u: &WinogradWeights,
    o0: usize,
    nb: usize,
    tiles: usize,
    m: &mut [f32],
    threads: usize,
) -> Result<(), CodegenError> {
    let c = u.c;
    let one = |(p, mp): (usize, &mut [f32])| {
        if let Some(layout) = u.layout {
            let a = &v[p * tiles * c..(p + 1) * tiles * c];
            let at = p * c * u.o + o0 * c;
            let blocks = &u.u[at..at + nb * c];
            return match layout {
                WinogradLayout::Panels => {
                    panel_products_v(a, c, tiles, blocks, mp);
                    Ok(())
                }
                WinogradLayout::Strips => strip_products_v(a, c, tiles, blocks, mp),
            };
        }
        let av = GemmView {
            offset: p * tiles * c,
            rows: tiles,
            cols: c,
            row_stride: c,
            col_stride: 1,
        };
        let bv = GemmView {
            offset: p * c * u.o + o0,
            rows: c,
            cols: nb,
            row_stride: u.o,
            col_stride: 1,
        };
        let ov = GemmView::row_major(tiles, nb);
        matmul_f32_strided((v, av), (&u.u, bv), (mp, ov), 1)
    };
    if threads > 1 {
        m.par_chunks_mut(tiles * nb).enumerate().try_for_each(one)
    } else {
        m.chunks_mut(tiles * nb).enumerate().try_for_each(one)
    }
}

/// One point's product from weights in panels: `m[t, 16 j + l] = sum_k
/// a[t, k] * panels[j][k][l]` (`a`: `[tiles, c]`; `panels`: `[nb / 16, c,
/// 16]`; `m`: `[tiles, nb]`), six tiles by one panel at a time, in AVX-512
/// or AVX2 where the CPU has them. Each weight is read once per six
/// tiles, in the order it is stored: nothing is packed. (`panels.rs`'s
/// kernel packs the tiles' rows first, which cost ResNet's 56x56 layers
/// 20% here, where the rows are short and the product small.)
fn panel_products_v(a: &[f32], c: usize, tiles: usize, panels: &[f32], m: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = x86::isa() {
        return x86::panel_products(isa, a, c, tiles, panels, m);
    }
    panel_products(a, c, tiles, panels, m)
}

/// One point's product from weights in strips ([`WinogradLayout::Strips`]):
/// `m[t, 16 j + s0 + r] = sum_k a[t, k] * strip[k, r]` for each block `j`
/// of `blocks` (`[nb / 16, c * 16]`) and its strips of outputs `s0..s0 +
/// width` (`strip`: `[c, width]`), sixteen tiles at a time in lanes, in
/// AVX-512 or AVX2 where the CPU has them. The tiles' inputs are first
/// copied into lanes ([`tiles_in_lanes`], `tiles * c` values against the
/// product's `tiles * c * nb`).
fn strip_products_v(
    a: &[f32],
    c: usize,
    tiles: usize,
    blocks: &[f32],
    m: &mut [f32],
) -> Result<(), CodegenError> {
    with_scratch(&TILE_LANES, tiles.div_ceil(L) * c * L, |xs| {
        tiles_in_lanes(a, c, xs);
        let xs = &*xs;
        #[cfg(target_arch = "x86_64")]
        if let Some(isa) = x86::isa() {
            x86::strip_products(isa, xs, c, tiles, blocks, m);
            return Ok(());
        }
        strip_products(xs, c, tiles, blocks, m);
        Ok(())
    })
}

/// `xs[b, k, l] = a[16 b + l, k]` (`a`: `[tiles, c]`, exactly), zero past
/// the last tile.
fn tiles_in_lanes(a: &[f32], c: usize, xs: &mut [f32]) {
    for (b, xb) in xs.chunks_exact_mut(c * L).enumerate() {
        for l in 0..L {
            let t = b * L + l;
            let row = a.get(t * c..(t + 1) * c);
            for (k, x) in xb.iter_mut().skip(l).step_by(L).enumerate() {
                *x = row.map_or(0.0, |row| row[k]);
            }
        }
    }
}

/// [`strip_products_v`] over lane arrays, from the tiles in lanes `xs`.
fn strip_products(xs: &[f32], c: usize, tiles: usize, blocks: &[f32], m: &mut [f32]) {
    let nb = blocks.len() / c.max(1);
    for (j, block) in blocks.chunks_exact(c * L).enumerate() {
        for (s0, sw) in STRIPS {
            let strip = &block[s0 * c..(s0 + sw) * c];
            for (b, xb) in xs.chunks_exact(c * L).enumerate() {
                for r in 0..sw {
                    let mut acc = [0.0f32; L];
                    for (w, x) in strip.chunks_exact(sw).zip(xb.chunks_exact(L)) {
                        for (acc, x) in acc.iter_mut().zip(x) {
                            *acc = w[r].mul_add(*x, *acc);
                        }
                    }
                    for (l, y) in acc.iter().take(tiles - b * L).enumerate() {
                        m[(b * L + l) * nb + j * L + s0 + r] = *y;
                    }
                }
            }
        }
    }
}

/// [`panel_products_v`] over lane arrays.
fn panel_products(a: &[f32], c: usize, tiles: usize, panels: &[f32], m: &mut [f32]) {
    let nb = panels.len() / c.max(1);
    for (j, panel) in panels.chunks_exact(c * L).enumerate() {
        for t in 0..tiles {
            let row = &a[t * c..(t + 1) * c];
            let mut acc = [0.0f32; L];
            for (k, b) in panel.chunks_exact(L).enumerate() {
                for (acc, b) in acc.iter_mut().zip(b) {
                    *acc = row[k].mul_add(*b, *acc);
                }
            }
            m[t * nb + j * L..][..L].copy_from_slice(&acc);
        }
    }
}

/// `out[o - obs.start, y, x]` for the outputs `o` of `obs` (of `nb`, in
/// blocks of 16) from each tile's `A^T m A`, the pixels past the image's
/// edge dropped.
fn output_transform(
    m: &[f32],
    g: &Tiles,
    nb: usize,
    ts: Range<usize>,
    obs: Range<usize>,
    size: (usize, usize),
    out: (&mut [f32], GemmView),
) {
    match g.tile {
        WinogradTile::F4x4 => output_transform_t::<F4, T6, M>(m, g, nb, ts, obs, size, out),
        WinogradTile::F2x2 => output_transform_t::<F2, 4, 2>(m, g, nb, ts, obs, size, out),
    }
}

/// [`output_transform`] for the tile of `A`.
#[inline(always)]
fn output_transform_t<A: Axis<T, R>, const T: usize, const R: usize>(
    m: &[f32],
    g: &Tiles,
    nb: usize,
    ts: Range<usize>,
    obs: Range<usize>,
    (oh, ow): (usize, usize),
    (out, ov): (&mut [f32], GemmView),
) {
    let tiles = g.tiles;
    for t in ts.clone() {
        let (_, y0, x0) = g.place(t);
        for ob in obs.clone().step_by(L) {
            let mt: [[Lanes; T]; T] = std::array::from_fn(|a| {
                std::array::from_fn(|b| {
                    let at = ((a * T + b) * tiles + t) * nb + ob;
                    let mut x = [0.0; L];
                    x.copy_from_slice(&m[at..at + L]);
                    x
                })
            });
            // Columns of A^T m, then rows of (A^T m) A.
            let cols: [[Lanes; R]; T] =
                std::array::from_fn(|b| A::at(&std::array::from_fn(|a| mt[a][b])));
            for i in 0..R.min(oh - y0) {
                let row = A::at(&std::array::from_fn(|b| cols[b][i]));
                for (j, y) in row.iter().enumerate().take(R.min(ow - x0)) {
                    let pixel = (y0 + i) * ow + x0 + j;
                    for (l, &y) in y.iter().enumerate() {
                        out[ov.offset + (ob - obs.start + l) * ov.row_stride + pixel] = y;
                    }
                }
            }
        }
    }
}

/// The transforms in AVX-512 or AVX2 (with FMA): the same sums as the
/// lane-array versions, written once over [`Lanes16`], 16 lanes in one
/// AVX-512 register or two AVX2 ones. Loads and stores go through slices
/// checked to hold their 16 elements; gathers and scatters assert that
/// every lane is inside its slice.
#[cfg(target_arch = "x86_64")]
mod x86 {
    pub(super) use super::super::lanes16::Isa;
    pub(super) use super::super::lanes16::{gathers_fit, isa};
    use super::super::lanes16::{prefetch, versions, Lanes16, Spread};
    use super::{padded_rows, GemmView, Range, Tiles, WinogradTile, F2, F4, L, M, STRIPS, T6};

    /// A tile's transforms along one axis over [`Lanes16`] (see
    /// `super::Axis`).
    trait VAxis<const T: usize, const R: usize> {
        /// `B^T d`.
        fn bt<V: Lanes16>(d: [V; T]) -> [V; T];
        /// `A^T m`.
        fn at<V: Lanes16>(m: [V; T]) -> [V; R];
    }

    impl VAxis<T6, M> for F4 {
        #[inline(always)]
        fn bt<V: Lanes16>(d: [V; T6]) -> [V; T6] {
            let [d0, d1, d2, d3, d4, d5] = d;
            let k = V::splat;
            [
                k(4.0).fmadd(d0, k(-5.0).fmadd(d2, d4)),
                k(-4.0).fmadd(d1.add(d2), d3.add(d4)),
                k(4.0).fmadd(d1.sub(d2), d4.sub(d3)),
                k(2.0).fmadd(d3.sub(d1), d4.sub(d2)),
                k(2.0).fmadd(d1.sub(d3), d4.sub(d2)),
                k(4.0).fmadd(d1, k(-5.0).fmadd(d3, d5)),
            ]
        }
        #[inline(always)]
        fn at<V: Lanes16>(m: [V; T6]) -> [V; M] {
            let [m0, m1, m2, m3, m4, m5] = m;
            let k = V::splat;
            let (s12, d12) = (m1.add(m2), m1.sub(m2));
            let (s34, d34) = (m3.add(m4), m3.sub(m4));
            [
                m0.add(s12).add(s34),
                k(2.0).fmadd(d34, d12),
                k(4.0).fmadd(s34, s12),
                k(8.0).fmadd(d34, d12).add(m5),
            ]
        }
    }

    impl VAxis<4, 2> for F2 {
        #[inline(always)]
        fn bt<V: Lanes16>(d: [V; 4]) -> [V; 4] {
            let [d0, d1, d2, d3] = d;
            [d0.sub(d2), d1.add(d2), d2.sub(d1), d1.sub(d3)]
        }
        #[inline(always)]
        fn at<V: Lanes16>(m: [V; 4]) -> [V; 2] {
            let [m0, m1, m2, m3] = m;
            [m0.add(m1).add(m2), m1.sub(m2).sub(m3)]
        }
    }

    /// `super::channels_last`, 16 channels of a pixel gathered at once.
    #[inline(always)]
    fn channels_last_with<V: Lanes16>(img: &[f32], g: &Tiles, y0: usize, xt: &mut [f32]) {
        let (c, plane) = (g.c, g.plane);
        padded_rows(g, y0, xt, |row, iy, width| {
            for x in 0..width {
                for cb in (0..c).step_by(L) {
                    V::gather(img, cb * plane + iy * g.w + x, plane)
                        .store(row, (g.pl + x) * c + cb);
                }
            }
        })
    }

    /// `super::input_transform`, for tiles of `T` inputs a side.
    #[inline(always)]
    fn input_transform_with<V: Lanes16, A: VAxis<T, R>, const T: usize, const R: usize>(
        xt: &[f32],
        g: &Tiles,
        tiles: Range<usize>,
        v: &mut [&mut [f32]],
    ) {
        let (c, wp) = (g.c, g.wp);
        for t in tiles.clone() {
            let (base, y0, x0) = g.place(t);
            for cb in (0..c).step_by(L) {
                // Columns of B^T d, one input column at a time.
                let mut cols = [[V::splat(0.0); T]; T];
                for (q, col) in cols.iter_mut().enumerate() {
                    let d = std::array::from_fn(|r| {
                        V::load(xt, base + ((y0 + r) * wp + x0 + q) * c + cb)
                    });
                    *col = A::bt(d);
                }
                for a in 0..T {
                    let row = A::bt(std::array::from_fn(|q| cols[q][a]));
                    for (b, x) in row.into_iter().enumerate() {
                        x.store(v[a * T + b], (t - tiles.start) * c + cb);
                    }
                }
            }
        }
    }

    #[inline(always)]
    fn input_transform4_with<V: Lanes16>(
        xt: &[f32],
        g: &Tiles,
        tiles: Range<usize>,
        v: &mut [&mut [f32]],
    ) {
        input_transform_with::<V, F4, T6, M>(xt, g, tiles, v)
    }

    #[inline(always)]
    fn input_transform2_with<V: Lanes16>(
        xt: &[f32],
        g: &Tiles,
        tiles: Range<usize>,
        v: &mut [&mut [f32]],
    ) {
        input_transform_with::<V, F2, 4, 2>(xt, g, tiles, v)
    }

    /// `super::input_transform` for `g`'s tile.
    pub(super) fn input_transform(
        isa: Isa,
        xt: &[f32],
        g: &Tiles,
        tiles: Range<usize>,
        v: &mut [&mut [f32]],
    ) {
        match g.tile {
            WinogradTile::F4x4 => input_transform4(isa, xt, g, tiles, v),
            WinogradTile::F2x2 => input_transform2(isa, xt, g, tiles, v),
        }
    }

    /// `super::output_transform`, looping over blocks of 16 outputs
    /// first: their rows of `out` stay in cache while every tile writes
    /// them.
    #[inline(always)]
    fn output_transform_with<V: Lanes16, A: VAxis<T, R>, const T: usize, const R: usize>(
        m: &[f32],
        g: &Tiles,
        nb: usize,
        ts: Range<usize>,
        obs: Range<usize>,
        (oh, ow): (usize, usize),
        (out, ov): (&mut [f32], GemmView),
    ) {
        let tiles = g.tiles;
        for ob in obs.clone().step_by(L) {
            for t in ts.clone() {
                let (_, y0, x0) = g.place(t);
                let mut cols = [[V::splat(0.0); R]; T];
                for (b, col) in cols.iter_mut().enumerate() {
                    let x =
                        std::array::from_fn(|a| V::load(m, ((a * T + b) * tiles + t) * nb + ob));
                    *col = A::at(x);
                }
                for i in 0..R.min(oh - y0) {
                    let row = A::at(std::array::from_fn(|b| cols[b][i]));
                    for (j, y) in row.into_iter().enumerate().take(R.min(ow - x0)) {
                        let pixel = (y0 + i) * ow + x0 + j;
                        // Lane l goes to output channel ob + l.
                        let first = ov.offset + (ob - obs.start) * ov.row_stride + pixel;
                        y.scatter(out, first, ov.row_stride);
                    }
                }
            }
        }
    }

    #[inline(always)]
    fn output_transform4_with<V: Lanes16>(
        m: &[f32],
        g: &Tiles,
        nb: usize,
        ts: Range<usize>,
        obs: Range<usize>,
        size: (usize, usize),
        out: (&mut [f32], GemmView),
    ) {
        output_transform_with::<V, F4, T6, M>(m, g, nb, ts, obs, size, out)
    }

    #[inline(always)]
    fn output_transform2_with<V: Lanes16>(
        m: &[f32],
        g: &Tiles,
        nb: usize,
        ts: Range<usize>,
        obs: Range<usize>,
        size: (usize, usize),
        out: (&mut [f32], GemmView),
    ) {
        output_transform_with::<V, F2, 4, 2>(m, g, nb, ts, obs, size, out)
    }

    /// `super::output_transform` for `g`'s tile.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn output_transform(
        isa: Isa,
        m: &[f32],
        g: &Tiles,
        nb: usize,
        ts: Range<usize>,
        obs: Range<usize>,
        size: (usize, usize),
        out: (&mut [f32], GemmView),
    ) {
        match g.tile {
            WinogradTile::F4x4 => output_transform4(isa, m, g, nb, ts, obs, size, out),
            WinogradTile::F2x2 => output_transform2(isa, m, g, nb, ts, obs, size, out),
        }
    }

    /// `super::panel_products`, six tiles at a time (their sums in 12
    /// AVX2 or 6 AVX-512 registers).
    #[inline(always)]
    fn panel_products_with<V: Lanes16>(
        a: &[f32],
        c: usize,
        tiles: usize,
        panels: &[f32],
        m: &mut [f32],
    ) {
        let nb = panels.len() / c.max(1);
        let blocks = tiles.div_ceil(6).max(1);
        for (j, panel) in panels.chunks_exact(c * L).enumerate() {
            // The next panel, prefetched a piece per block of tiles, so
            // its stream from memory runs under this panel's products.
            let next = panels
                .get((j + 1) * c * L..(j + 2) * c * L)
                .unwrap_or_default();
            let mut pieces = next.chunks(next.len().div_ceil(blocks).max(1));
            let mut t = 0;
            while t < tiles {
                let rows = (tiles - t).min(6);
                let at = (t, j * L, nb);
                let panel = (panel, pieces.next().unwrap_or_default());
                match rows {
                    1 => tile_rows::<V, 1>(a, c, panel, m, at),
                    2 => tile_rows::<V, 2>(a, c, panel, m, at),
                    3 => tile_rows::<V, 3>(a, c, panel, m, at),
                    4 => tile_rows::<V, 4>(a, c, panel, m, at),
                    5 => tile_rows::<V, 5>(a, c, panel, m, at),
                    _ => tile_rows::<V, 6>(a, c, panel, m, at),
                }
                t += rows;
            }
        }
    }

    /// Tiles `t0..t0 + R` by one panel (`[c, 16]`) into `m[t, col..col +
    /// 16]` (row length `nb`), prefetching `ahead` over the sum.
    #[inline(always)]
    fn tile_rows<V: Lanes16, const R: usize>(
        a: &[f32],
        c: usize,
        (panel, ahead): (&[f32], &[f32]),
        m: &mut [f32],
        (t0, col, nb): (usize, usize, usize),
    ) {
        let rows: [&[f32]; R] = std::array::from_fn(|i| &a[(t0 + i) * c..(t0 + i + 1) * c]);
        let panel = &panel[..c * L];
        let mut acc = [V::splat(0.0); R];
        let mut ahead = Spread::new(ahead, c);
        for k in 0..c {
            ahead.step();
            let b = V::load(panel, k * L);
            for (acc, row) in acc.iter_mut().zip(&rows) {
                *acc = V::splat(row[k]).fmadd(b, *acc);
            }
        }
        for (i, acc) in acc.into_iter().enumerate() {
            acc.store(m, (t0 + i) * nb + col);
        }
    }

    /// `super::strip_products`: each strip by sixteen tiles at a time
    /// (their sums in 12 or 8 AVX2 registers, 6 or 4 AVX-512 ones).
    #[inline(always)]
    fn strip_products_with<V: Lanes16>(
        xs: &[f32],
        c: usize,
        tiles: usize,
        blocks: &[f32],
        m: &mut [f32],
    ) {
        let nb = blocks.len() / c.max(1);
        for j in 0..nb / L {
            for (s0, sw) in STRIPS {
                // The strip and the weights after it, which it prefetches.
                let strip = &blocks[j * L * c + s0 * c..];
                let at = (j * L + s0, nb, tiles);
                match sw {
                    4 => strip_rows::<V, 4>(xs, c, strip, m, at),
                    _ => strip_rows::<V, 6>(xs, c, strip, m, at),
                }
            }
        }
    }

    /// A strip of `R` outputs (`[c, R]`, the start of `ahead`) by every
    /// sixteen tiles of `xs` into `m[t, col..col + R]` (row length `nb`).
    /// The weights are prefetched 4 KiB ahead of their reads: the stream
    /// from memory then keeps pace with the products, where the CPU's own
    /// prefetch left them a fifth slower.
    #[inline(always)]
    fn strip_rows<V: Lanes16, const R: usize>(
        xs: &[f32],
        c: usize,
        ahead: &[f32],
        m: &mut [f32],
        (col, nb, tiles): (usize, usize, usize),
    ) {
        const AHEAD: usize = 1024;
        let strip = &ahead[..c * R];
        for (b, xb) in xs.chunks_exact(c * L).enumerate() {
            let mut acc = [V::splat(0.0); R];
            for (k, (w, x)) in strip.chunks_exact(R).zip(xb.chunks_exact(L)).enumerate() {
                prefetch(ahead, k * R + AHEAD);
                let x = V::load(x, 0);
                for (acc, &w) in acc.iter_mut().zip(w) {
                    *acc = V::splat(w).fmadd(x, *acc);
                }
            }
            let mut sums = [[0.0f32; L]; R];
            for (acc, sums) in acc.into_iter().zip(&mut sums) {
                acc.store(sums, 0);
            }
            for l in 0..L.min(tiles - b * L) {
                let row = &mut m[(b * L + l) * nb + col..][..R];
                for (y, sums) in row.iter_mut().zip(&sums) {
                    *y = sums[l];
                }
            }
        }
    }

    versions!(strip_products = strip_products_with(
        xs: &[f32],
        c: usize,
        tiles: usize,
        blocks: &[f32],
        m: &mut [f32]
    ));
    versions!(panel_products = panel_products_with(
        a: &[f32],
        c: usize,
        tiles: usize,
        panels: &[f32],
        m: &mut [f32]
    ));
    versions!(channels_last = channels_last_with(img: &[f32], g: &Tiles, y0: usize, xt: &mut [f32]));
    versions!(input_transform4 = input_transform4_with(
        xt: &[f32],
        g: &Tiles,
        tiles: Range<usize>,
        v: &mut [&mut [f32]]
    ));
    versions!(input_transform2 = input_transform2_with(
        xt: &[f32],
        g: &Tiles,
        tiles: Range<usize>,
        v: &mut [&mut [f32]]
    ));
    versions!(output_transform4 = output_transform4_with(
        m: &[f32],
        g: &Tiles,
        nb: usize,
        ts: Range<usize>,
        obs: Range<usize>,
        size: (usize, usize),
        out: (&mut [f32], GemmView)
    ));
    versions!(output_transform2 = output_transform2_with(
        m: &[f32],
        g: &Tiles,
        nb: usize,
        ts: Range<usize>,
        obs: Range<usize>,
        size: (usize, usize),
        out: (&mut [f32], GemmView)
    ));
}

#[cfg(test)]
mod tests {
    use super::super::windows::tests::direct;
    use super::*;
    use tilejit_ir::graph::Window;

    /// Every form of kept weights: F(4x4) and F(2x2) in panels, then in
    /// strips.
    const FORMS: [WinogradForm; 4] = {
        use {WinogradLayout::*, WinogradTile::*};
        [
            WinogradForm {
                tile: F4x4,
                layout: Panels,
            },
            WinogradForm {
                tile: F2x2,
                layout: Panels,
            },
            WinogradForm {
                tile: F4x4,
                layout: Strips,
            },
            WinogradForm {
                tile: F2x2,
                layout: Strips,
            },
        ]
    };

    /// OIHW 3x3 weights of `o` outputs and `c` channels, in place.
    fn oihw(o: usize, c: usize) -> GemmView {
        GemmView::row_major(o, c * 9)
    }

    /// Weights laid out `[c * 9, o]` (a graph's own conv weights, not
    /// OIHW transposed) read through a view of column stride `o`
    /// transform to what their OIHW copy does, per call and kept (a
    /// second call's kept weights refused this view before).
    #[test]
    fn weights_of_any_column_stride_transform_alike() {
        let (c, o) = (16, 32);
        let oihw_w: Vec<f32> = (0..o * c * 9)
            .map(|i| ((i * 5) % 11) as f32 - 5.0)
            .collect();
        // The same weights as [c * 9, o] rows.
        let mut rows = vec![0.0; o * c * 9];
        for oc in 0..o {
            for t in 0..c * 9 {
                rows[t * o + oc] = oihw_w[oc * c * 9 + t];
            }
        }
        let strided = GemmView {
            offset: 0,
            rows: o,
            cols: c * 9,
            row_stride: 1,
            col_stride: o,
        };
        let want = WinogradWeights::new(&oihw_w, oihw(o, c), c).expect("OIHW weights");
        let got = WinogradWeights::new(&rows, strided, c).expect("strided weights");
        assert_eq!(got.u, want.u);
        let ic = Im2Col {
            c,
            h: 7,
            w: 7,
            window: Window::square(3, 3, 1, 1),
        };
        let form = winograd_form(&ic, o, 1);
        let want = WinogradWeights::kept(&oihw_w, oihw(o, c), c, form).expect("OIHW weights");
        let got = WinogradWeights::kept(&rows, strided, c, form).expect("strided weights");
        assert_eq!(got.u, want.u);
    }

    /// The weights' transform split over threads gives what one thread
    /// does.
    #[test]
    fn weights_transformed_on_many_threads_match_one_thread() {
        // 5 channels over 2, 3, 5 and 8 threads: parts of 3, 2, 1 and 1
        // channels, the last one short or absent.
        let (c, o) = (5, 32);
        let wt: Vec<f32> = (0..o * c * 9)
            .map(|i| ((i * 7) % 13) as f32 - 6.0)
            .collect();
        let wv = oihw(o, c);
        let on = |threads| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a pool");
            pool.install(|| {
                WinogradWeights::new(&wt, wv, c)
                    .expect("weights that fit")
                    .u
            })
        };
        let one = on(1);
        assert_eq!(one.len(), 36 * c * o);
        // Point (0, 0) is g[0][0] itself (G's first row is [1/4, 0, 0]
        // both ways: a sixteenth of it).
        for oc in 0..o {
            for ci in 0..c {
                assert_eq!(
                    one[ci * o + oc],
                    wt[oc * c * 9 + ci * 9] / 16.0,
                    "{oc} {ci}"
                );
            }
        }
        for threads in [2, 3, 5, 8] {
            assert_eq!(on(threads), one, "{threads} threads");
        }
    }

    /// Images of whole and partial tiles, with and without padding (on
    /// either side), against the definition: the outputs in blocks of a
    /// wider row stride, on one to three threads, the weights in rows
    /// and kept in each tile and layout.
    #[test]
    fn every_tiling_matches_the_definition() {
        let value = |i: usize, s: usize| ((i * 37 + s * 11) % 29) as f32 / 14.0 - 1.0;
        for (c, o, h, w, pad) in [
            (16, 32, 28, 28, [1, 1, 1, 1]),
            (32, 16, 30, 29, [1, 1, 1, 1]),
            (16, 16, 31, 30, [0, 0, 0, 0]),
            (16, 32, 27, 33, [2, 0, 1, 2]),
        ] {
            let ic = Im2Col {
                c,
                h,
                w,
                window: Window {
                    pad,
                    ..Window::square(3, 3, 1, 0)
                },
            };
            assert!(winograd_fits(&ic, o), "{ic:?}");
            let (oh, ow) = ic.window.out(h, w).expect("a window that fits");
            let img: Vec<f32> = (0..c * h * w).map(|i| value(i, 1)).collect();
            let wt: Vec<f32> = (0..o * c * 9).map(|i| value(i, 2) / 4.0).collect();
            let want = direct(&img, &wt, &ic, o);
            let wv = oihw(o, c);
            let rows = WinogradWeights::new(&wt, wv, c).expect("weights that fit");
            let kept = FORMS.map(|f| WinogradWeights::kept(&wt, wv, c, f).expect("weights"));
            let p = oh * ow;
            // One call per block of 16 outputs and one for all of them,
            // with the weights in rows (`gemm`) and kept in each form.
            let calls = [(1, 16), (2, 16), (1, o), (2, o), (3, o)];
            for (u, (threads, block)) in std::iter::once(&rows)
                .chain(&kept)
                .flat_map(|u| calls.map(|call| (u, call)))
            {
                // Row stride p + 3: the gaps must stay untouched.
                let rs = p + 3;
                let mut out = vec![f32::NAN; o * rs];
                for o0 in (0..o).step_by(block) {
                    let ov = GemmView {
                        offset: o0 * rs,
                        rows: block,
                        cols: p,
                        row_stride: rs,
                        col_stride: 1,
                    };
                    conv_f32_winograd(&img, &ic, u, o0, (&mut out, ov), threads)
                        .expect("views that fit");
                }
                let scale = want.iter().fold(0f64, |a, &x| a.max(x.abs()));
                for oc in 0..o {
                    for q in 0..p {
                        let (g, r) = (out[oc * rs + q] as f64, want[oc * p + q]);
                        assert!(
                            (g - r).abs() <= 1e-5 * scale,
                            "{ic:?} o {oc} pixel {q}: {g} vs {r} (scale {scale})"
                        );
                    }
                    assert!(out[oc * rs + p..(oc + 1) * rs].iter().all(|x| x.is_nan()));
                }
            }
        }
    }

    /// Banded calls (which `every_tiling_matches_the_definition` runs on
    /// 2 and 3 threads) cover every output row once, each band reading
    /// only rows of the image and padding no more than the window does;
    /// uneven splits, big weights and one thread do not band.
    #[test]
    fn bands_cover_the_output_once() {
        let (c, o) = (16, 16);
        let wt = vec![0.5f32; o * c * 9];
        let wv = oihw(o, c);
        let u = WinogradWeights::kept(&wt, wv, c, FORMS[0]).expect("weights");
        let ic = |h, pad| Im2Col {
            c,
            h,
            w: 20,
            window: Window {
                pad,
                ..Window::square(3, 3, 1, 0)
            },
        };
        for (h, pad, threads) in [(31, [0; 4], 2), (34, [2, 0, 1, 2], 3), (56, [1; 4], 2)] {
            let ic = ic(h, pad);
            let (oh, _) = ic.window.out(h, 20).expect("fits");
            let bands = bands(&ic, &u, threads).expect("an even split");
            assert_eq!(bands.len(), threads);
            let mut next = 0;
            for b in &bands {
                assert_eq!(b.out_rows.start, next, "{bands:?}");
                next = b.out_rows.end;
                // The band's own convolution has its rows' outputs.
                assert_eq!(b.rows.len() + b.pad.0 + b.pad.1 - 2, b.out_rows.len());
                assert!(
                    b.rows.end <= h && b.pad.0 <= pad[0] as usize && b.pad.1 <= pad[2] as usize
                );
            }
            assert_eq!(next, oh);
        }
        // 7 tile rows on 2 threads; one thread; weights over the bound.
        assert!(bands(&ic(28, [1; 4]), &u, 2).is_none());
        assert!(bands(&ic(56, [1; 4]), &u, 1).is_none());
        let (cb, ob) = (256, 256);
        let big = WinogradWeights::kept(&vec![0.5f32; ob * cb * 9], oihw(ob, cb), cb, FORMS[0])
            .expect("weights");
        let wide = Im2Col {
            c: cb,
            ..ic(56, [1; 4])
        };
        assert!(bands(&wide, &big, 2).is_none());
    }

    /// Small images together (16 tiles each, 64 in all; and 20 each, some
    /// partial), against the definition image by image, on one
    /// thread and several; sizes that disagree are errors. With kept
    /// weights (in each form) any number of tiles fits: 4 tiles of a 7x7
    /// image, a 5x6 image of 2 partial tiles, one 3x3 tile, and for
    /// strips 33 tiles (three blocks of lanes, the last of one tile).
    #[test]
    fn images_together_match_the_definition() {
        let value = |i: usize, s: usize| ((i * 41 + s * 13) % 23) as f32 / 11.0 - 1.0;
        let [f4, f2, s4, s2] = FORMS.map(Some);
        let cases = [
            (4, 16, 32, 14, 14, None),
            (3, 32, 16, 15, 17, None),
            (4, 16, 32, 14, 14, f4),
            (1, 32, 48, 7, 7, f4),
            (2, 16, 16, 5, 6, f4),
            (1, 16, 32, 3, 3, f4),
            (1, 32, 48, 7, 7, f2),
            (2, 16, 16, 5, 6, f2),
            (1, 16, 32, 3, 3, f2),
            (3, 16, 32, 4, 4, f2),
            (4, 16, 32, 14, 14, s4),
            (1, 32, 48, 7, 7, s4),
            (2, 16, 16, 5, 6, s4),
            (1, 16, 32, 3, 3, s2),
            (1, 32, 48, 7, 7, s2),
            (3, 16, 32, 11, 10, s2),
            (1, 16, 32, 6, 22, s2),
        ];
        for (images, c, o, h, w, kept) in cases {
            let ic = Im2Col {
                c,
                h,
                w,
                window: Window::square(3, 3, 1, 1),
            };
            assert!(!winograd_fits(&ic, o), "too few tiles for one image");
            assert!(winograd_fits_kept(&ic, o));
            let enough = winograd_fits_images(&ic, o, images);
            assert!(enough || kept.is_some());
            assert!(!winograd_fits_images(&ic, o, 2));
            let image = c * h * w;
            let imgs: Vec<f32> = (0..images * image).map(|i| value(i, 1)).collect();
            let wt: Vec<f32> = (0..o * c * 9).map(|i| value(i, 2) / 4.0).collect();
            let wv = oihw(o, c);
            let u = match kept {
                Some(form) => WinogradWeights::kept(&wt, wv, c, form),
                None => WinogradWeights::new(&wt, wv, c),
            };
            let u = u.expect("weights that fit");
            let p = h * w;
            if !enough {
                // Weights made per call take too few tiles to `gemm`.
                let rows = WinogradWeights::new(&wt, wv, c).expect("weights that fit");
                let mut out = vec![0.0; images * o * p];
                assert!(conv_f32_winograd_images(&imgs, &ic, &rows, &mut out, 1).is_err());
            }
            for threads in [1, 2, 3] {
                let mut out = vec![f32::NAN; images * o * p];
                conv_f32_winograd_images(&imgs, &ic, &u, &mut out, threads)
                    .expect("sizes that fit");
                for b in 0..images {
                    let want = direct(&imgs[b * image..(b + 1) * image], &wt, &ic, o);
                    let scale = want.iter().fold(0f64, |a, &x| a.max(x.abs()));
                    let got = &out[b * o * p..(b + 1) * o * p];
                    for (i, (&g, &r)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (g as f64 - r).abs() <= 1e-5 * scale,
                            "{ic:?} image {b} element {i}: {g} vs {r} ({threads} threads)"
                        );
                    }
                }
            }
            let mut out = vec![0.0; images * o * p];
            let short = &imgs[..imgs.len() - 1];
            assert!(conv_f32_winograd_images(short, &ic, &u, &mut out, 1).is_err());
            let mut long = vec![0.0; images * o * p + 1];
            assert!(conv_f32_winograd_images(&imgs, &ic, &u, &mut long, 1).is_err());
            if kept.is_none() {
                let two = &imgs[..2 * image];
                let out = &mut out[..2 * o * p];
                assert!(conv_f32_winograd_images(two, &ic, &u, out, 1).is_err());
            }
        }
    }

    /// The AVX-512 and AVX2 transforms (those this CPU runs) against the
    /// lane-array ones, on a padded image of partial tiles, each split
    /// into parts as a multi-threaded call splits it.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_vector_transforms_match_the_lane_array_ones() {
        for tile in [WinogradTile::F4x4, WinogradTile::F2x2] {
            vector_transforms_match(tile);
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn vector_transforms_match(tile: WinogradTile) {
        let (c, h, w, nb): (usize, usize, usize, usize) = (32, 13, 11, 32);
        let r = tile.outputs();
        let (th, tw) = ((h + 2 - 2).div_ceil(r), (w + 2 - 2).div_ceil(r));
        let g = Tiles {
            tile,
            c,
            h,
            w,
            pt: 1,
            pl: 1,
            plane: h * w,
            wp: r * tw + 2,
            tw,
            per: th * tw,
            tiles: th * tw,
            xt_image: (r * th + 2) * (r * tw + 2) * c,
        };
        let value = |i: usize| ((i * 53 + 7) % 31) as f32 / 15.0 - 1.0;
        let img: Vec<f32> = (0..c * h * w).map(value).collect();
        let xt_len = (r * th + 2) * g.wp * c;
        let mut a = vec![f32::NAN; xt_len];
        channels_last(&img, &g, 0, &mut a);
        let v_len = tile.points() * g.tiles * c;
        let mut va = vec![0.0; v_len];
        let mut slabs: Vec<&mut [f32]> = va.chunks_mut(g.tiles * c).collect();
        input_transform(&a, &g, 0..g.tiles, &mut slabs);
        let m: Vec<f32> = (0..tile.points() * g.tiles * nb)
            .map(|i| value(i + 3))
            .collect();
        let (oh, ow) = (h, w);
        let ov = GemmView {
            offset: 2,
            rows: nb,
            cols: oh * ow,
            row_stride: oh * ow + 1,
            col_stride: 1,
        };
        let len = 2 + nb * (oh * ow + 1);
        let mut oa = vec![f32::NAN; len];
        output_transform(&m, &g, nb, 0..g.tiles, 0..nb, (oh, ow), (&mut oa, ov));
        let isas = x86::Isa::all();
        if crate::host::cpu_features().fma {
            assert!(!isas.is_empty(), "an x86-64 CPU with FMA has AVX2");
        }
        for isa in isas {
            // The copy in two parts, the second from padded row 5.
            let mut b = vec![f32::NAN; xt_len];
            let (top, rest) = b.split_at_mut(5 * g.wp * c);
            x86::channels_last(isa, &img, &g, 0, top);
            x86::channels_last(isa, &img, &g, 5, rest);
            assert_eq!(a, b, "{isa:?} {tile:?}");
            // The transform of tiles 3.. only: the first three stay 0.
            let mut vb = vec![0.0; v_len];
            let mut slabs: Vec<&mut [f32]> = vb
                .chunks_mut(g.tiles * c)
                .map(|s| &mut s[3 * c..])
                .collect();
            x86::input_transform(isa, &a, &g, 3..g.tiles, &mut slabs);
            for (i, (x, y)) in va.iter().zip(&vb).enumerate() {
                if (i / c) % g.tiles < 3 {
                    assert_eq!(*y, 0.0);
                    continue;
                }
                assert!(
                    (x - y).abs() <= 1e-5 * (1.0 + x.abs()),
                    "{isa:?} {tile:?}: {x} vs {y}"
                );
            }
            // The output transform in two calls, a block of outputs each.
            let mut ob = vec![f32::NAN; len];
            let (low, high) = ob.split_at_mut(2 + 16 * ov.row_stride);
            let half = GemmView { rows: 16, ..ov };
            x86::output_transform(isa, &m, &g, nb, 0..g.tiles, 0..16, (oh, ow), (low, half));
            let half = GemmView { offset: 0, ..half };
            x86::output_transform(isa, &m, &g, nb, 0..g.tiles, 16..32, (oh, ow), (high, half));
            for (x, y) in oa.iter().zip(&ob) {
                assert!(
                    x.is_nan() && y.is_nan() || (x - y).abs() <= 1e-5 * (1.0 + x.abs()),
                    "{isa:?} {tile:?}: {x} vs {y}"
                );
            }
            // Panel products of 1 to 13 tiles (blocks of six and every
            // remainder) against the lane arrays, which sum in the same
            // order with the same fused multiply-adds: equal bit for bit.
            for tiles in 1..=13 {
                let a: Vec<f32> = (0..tiles * c).map(|i| value(i + 5)).collect();
                let panels: Vec<f32> = (0..nb * c).map(|i| value(i + 9)).collect();
                let mut want = vec![f32::NAN; tiles * nb];
                panel_products(&a, c, tiles, &panels, &mut want);
                let mut got = vec![f32::NAN; tiles * nb];
                x86::panel_products(isa, &a, c, tiles, &panels, &mut got);
                assert_eq!(want, got, "{isa:?}, {tiles} tiles");
            }
            // Strip products of 1 to 40 tiles (whole and partial blocks of
            // 16 lanes), the same way; and against the definition.
            for tiles in (1..=18).chain([31, 32, 33, 40]) {
                let a: Vec<f32> = (0..tiles * c).map(|i| value(i + 5)).collect();
                let strips: Vec<f32> = (0..nb * c).map(|i| value(i + 9)).collect();
                let mut xs = vec![f32::NAN; tiles.div_ceil(L) * c * L];
                tiles_in_lanes(&a, c, &mut xs);
                let mut want = vec![f32::NAN; tiles * nb];
                strip_products(&xs, c, tiles, &strips, &mut want);
                let mut got = vec![f32::NAN; tiles * nb];
                x86::strip_products(isa, &xs, c, tiles, &strips, &mut got);
                assert_eq!(want, got, "{isa:?}, {tiles} tiles");
                for (t, j, s0, sw) in (0..tiles)
                    .flat_map(|t| (0..nb / L).map(move |j| (t, j)))
                    .flat_map(|(t, j)| STRIPS.map(|(s0, sw)| (t, j, s0, sw)))
                {
                    for r in 0..sw {
                        let strip = &strips[j * L * c + s0 * c..];
                        let sum: f64 = (0..c)
                            .map(|k| a[t * c + k] as f64 * strip[k * sw + r] as f64)
                            .sum();
                        let y = got[t * nb + j * L + s0 + r] as f64;
                        assert!((y - sum).abs() <= 1e-5 * (1.0 + sum.abs()), "{y} vs {sum}");
                    }
                }
            }
        }
    }

    /// F(2x2) where F(4x4)'s weights would stream from memory for few
    /// tiles: ResNet's 7x7 layer at batch 1, not at batch 8, nor for
    /// weights that stay in cache or images of many tiles; strips for few
    /// tiles.
    #[test]
    fn the_form_is_chosen_by_the_weights_read() {
        let ic = |c, h| Im2Col {
            c,
            h,
            w: h,
            window: Window::square(3, 3, 1, 1),
        };
        assert_eq!(winograd_tile(&ic(512, 7), 512, 1), WinogradTile::F2x2);
        assert_eq!(winograd_tile(&ic(512, 7), 512, 8), WinogradTile::F4x4);
        assert_eq!(winograd_tile(&ic(64, 7), 64, 1), WinogradTile::F4x4);
        assert_eq!(winograd_tile(&ic(64, 56), 64, 1), WinogradTile::F4x4);
        assert_eq!(winograd_tile(&ic(256, 56), 256, 1), WinogradTile::F4x4);
        // Strips for at most 32 tiles: layer4 at batch 1 (16 tiles of
        // F(2x2)) and 8 (32 of F(4x4)), layer3 at batch 1 (16); not layer3
        // at batch 8 (128) nor layer1 (196).
        let [f4, _, s4, s2] = FORMS;
        assert_eq!(winograd_form(&ic(512, 7), 512, 1), s2);
        assert_eq!(winograd_form(&ic(512, 7), 512, 8), s4);
        assert_eq!(winograd_form(&ic(256, 14), 256, 1), s4);
        assert_eq!(winograd_form(&ic(256, 14), 256, 8), f4);
        assert_eq!(winograd_form(&ic(64, 56), 64, 1), f4);
    }

    #[test]
    fn other_windows_do_not_fit_and_bad_views_are_errors() {
        let ic = |c, h, window| Im2Col { c, h, w: h, window };
        let s = Window::square(3, 3, 1, 1);
        assert!(winograd_fits(&ic(16, 28, s), 16));
        assert!(!winograd_fits(&ic(16, 14, s), 16), "too few tiles");
        assert!(!winograd_fits(&ic(8, 28, s), 16), "channels");
        assert!(!winograd_fits(&ic(16, 28, s), 24), "outputs");
        assert!(!winograd_fits(&ic(16, 28, Window::square(3, 3, 2, 1)), 16));
        assert!(!winograd_fits(&ic(16, 28, Window::square(5, 5, 1, 2)), 16));
        let dilated = Window {
            dilation: (2, 2),
            ..s
        };
        assert!(!winograd_fits(&ic(16, 28, dilated), 16));
        let wv = oihw(16, 16);
        let w = vec![0.5; 16 * 16 * 9];
        assert!(
            WinogradWeights::new(&w[1..], wv, 16).is_err(),
            "short weights"
        );
        assert!(WinogradWeights::new(&w, wv, 8).is_err(), "channels");
        let u = WinogradWeights::new(&w, wv, 16).expect("weights that fit");
        let img = vec![1.0; 16 * 28 * 28];
        let ov = GemmView::row_major(16, 28 * 28);
        let mut out = vec![0.0; 16 * 28 * 28];
        let good = ic(16, 28, s);
        assert!(conv_f32_winograd(&img, &good, &u, 0, (&mut out, ov), 1).is_ok());
        assert!(conv_f32_winograd(&img[1..], &good, &u, 0, (&mut out, ov), 1).is_err());
        assert!(conv_f32_winograd(&img, &good, &u, 16, (&mut out, ov), 1).is_err());
        assert!(conv_f32_winograd(&img, &good, &u, 0, (&mut out[1..], ov), 1).is_err());
        let strided = ic(16, 28, Window::square(3, 3, 2, 1));
        assert!(conv_f32_winograd(&img, &strided, &u, 0, (&mut out, ov), 1).is_err());
        // Every value of a constant image's inside is 9 * 16 * 0.5 * 1.
        assert!(
            out[29..50].iter().all(|&x| (x - 72.0).abs() < 1e-4),
            "{:?}",
            &out[29..50]
        );
    }
}
