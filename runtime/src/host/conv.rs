//! Convolutions on the host: an `Op::Conv` kernel's matmul, whose left
//! operand is the image read as its windows. Per image and channel group
//! one strided GEMM (with fewer images than threads, one per block of
//! output pixels per thread): a 1x1 window of stride 1 without padding reads the
//! image itself (`[c, h*w]` is the transposed column matrix); any other
//! window is copied, one image at a time, into a per-thread scratch of
//! `[k, oh*ow]` rows (each a run of an image row: contiguous copies for
//! stride 1), which stays in cache instead of a whole-batch im2col. An
//! NCHW product goes to codegen's direct kernels first (`conv_f32_nchw`:
//! strips of windows on AVX-512, or for an image of few channels its
//! stride phases); where they decline, the GEMM.

use super::matmul::round_product;
use super::store::{take_owned, Slot, Store};
use super::HostProgram;
use crate::error::RuntimeError;
use crate::kernel_cache::CachedKernel;
use rayon::prelude::*;
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tilejit_codegen::host::{
    conv_f32_nchw, conv_f32_panels, conv_f32_winograd, conv_f32_winograd_images,
    matmul_f32_strided, matmul_f32_strided_col_split, winograd_fits, winograd_fits_images,
    winograd_fits_kept, winograd_form, BufArg, GemmView, PackedPanels, WinogradWeights,
};
use tilejit_ir::kernel::{BufId, Im2Col, Kernel, MatMul};
use tilejit_ir::{Array, DType, IrError, Lit};

thread_local! {
    /// The window rows of the image being multiplied, reused between
    /// calls (a fresh buffer per call costs its page faults).
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Below this many multiply-adds a convolution runs on one thread.
const PARALLEL_MACS: usize = 1 << 18;

impl HostProgram {
    /// A convolution's matmul on the host (see the module doc): in
    /// parallel over images when there are enough to go round, else over
    /// blocks of output pixels, one one-thread GEMM per block.
    pub(super) fn conv(
        &self,
        slots: &mut [Slot<'_>],
        mm: &MatMul,
        ic: &Im2Col,
        out_dtype: DType,
    ) -> Result<(), RuntimeError> {
        let mismatch = || RuntimeError::from(IrError::Verify("conv operand types".into()));
        let too_big = || RuntimeError::from(IrError::OutOfMemory { bytes: usize::MAX });
        let image = ic.c.checked_mul(ic.h).and_then(|x| x.checked_mul(ic.w));
        let image = image.ok_or_else(too_big)?;
        let groups = (ic.window.groups as usize).max(1);
        if !ic.c.is_multiple_of(groups)
            || !mm.n.is_multiple_of(groups)
            || mm.k != ic.group_channels() * ic.window.size()
        {
            return Err(mismatch());
        }
        let macs = mm.batch.saturating_mul(mm.m).saturating_mul(mm.k);
        let threads = if macs.saturating_mul(mm.n) >= PARALLEL_MACS {
            rayon::current_num_threads()
        } else {
            1
        };
        let mut out = take_owned(&mut slots[mm.out.0 as usize])?;
        let x = slots[mm.a.0 as usize].f32s().ok_or_else(mismatch)?;
        let w = slots[mm.b.0 as usize].f32s().ok_or_else(mismatch)?;
        let Store::F32(o) = &mut out else {
            return Err(mismatch());
        };
        let per_out = mm.m.checked_mul(mm.n).ok_or_else(too_big)?;
        if x.len() != mm.batch.saturating_mul(image)
            || w.len() != mm.k.saturating_mul(mm.n)
            || o.len() != mm.batch.saturating_mul(per_out)
        {
            return Err(mismatch());
        }
        // Winograd where the geometry fits, an image's phases split over
        // the threads when there are fewer images than threads; images
        // too small on their own run together.
        let wino = winograd_weights(w, slots[mm.b.0 as usize].array(), mm, ic)?;
        if let Some(u) = wino.as_ref().filter(|_| !winograd_fits(ic, mm.n)) {
            let r = conv_f32_winograd_images(x, ic, u, o, threads);
            round_product(o, out_dtype);
            slots[mm.out.0 as usize] = Slot::Owned(out);
            return Ok(r?);
        }
        let panels = match wino {
            None => conv_panels(slots[mm.b.0 as usize].array(), mm, ic)?,
            Some(_) => None,
        };
        let one = |(b, ob): (usize, &mut [f32]), inner: usize| {
            let img = &x[b * image..(b + 1) * image];
            if let Some(u) = &wino {
                let ov = GemmView::row_major(mm.n, mm.m);
                return Ok(conv_f32_winograd(img, ic, u, 0, (ob, ov), inner)?);
            }
            conv_image(img, (w, panels.as_deref()), ob, mm, ic, inner)
        };
        let r = if per_out == 0 {
            Ok(())
        } else if threads > 1 && mm.batch >= threads {
            o.par_chunks_mut(per_out)
                .enumerate()
                .try_for_each(|bo| one(bo, 1))
        } else {
            o.chunks_mut(per_out)
                .enumerate()
                .try_for_each(|bo| one(bo, threads))
        };
        round_product(o, out_dtype);
        slots[mm.out.0 as usize] = Slot::Owned(out);
        r
    }
}

/// The weights of an NCHW convolution that runs as Winograd (3x3 at
/// stride 1, channels and outputs in blocks of 16): kept in the weight
/// cache when they are an argument or constant (`array`), which any image
/// size takes, in the form `winograd_form` picks for the call's images
/// (F(2x2) for few tiles of many weights, strips for few tiles); else
/// transformed to F(4x4) for this call when the images have enough
/// tiles, alone or together (`winograd_fits_images`).
fn winograd_weights(
    w: &[f32],
    array: Option<&Array>,
    mm: &MatMul,
    ic: &Im2Col,
) -> Result<Option<Arc<WinogradWeights>>, RuntimeError> {
    let config = crate::config::config();
    if !config.winograd || !mm.nchw || mm.m == 0 || !winograd_fits_kept(ic, mm.n) {
        return Ok(None);
    }
    let view = weights_view(mm, 0, mm.n);
    if let Some(array) = array {
        let bound = config.weight_cache_bytes;
        let form = winograd_form(ic, mm.n, mm.batch);
        if let Some(u) = crate::weight_cache().winograd(array, view, ic.c, form, bound)? {
            return Ok(Some(u));
        }
    }
    if !winograd_fits_images(ic, mm.n, mm.batch) {
        return Ok(None);
    }
    Ok(Some(Arc::new(WinogradWeights::new(w, view, ic.c)?)))
}

/// The weights of an NCHW convolution of one group outside Winograd,
/// kept in the weight cache packed as `[k, n]` panels when they are an
/// f32 argument or constant (`array`): the windows are then read in
/// place (`conv_f32_panels`) instead of built and packed for `gemm`.
fn conv_panels(
    array: Option<&Array>,
    mm: &MatMul,
    ic: &Im2Col,
) -> Result<Option<Arc<PackedPanels>>, RuntimeError> {
    let bound = crate::config::config().weight_cache_bytes;
    let Some(array) = array.filter(|a| a.dtype() == DType::F32) else {
        return Ok(None);
    };
    // With more pixels than outputs `gemm` does better: most of what it
    // packs per call is then window rows, which this path gathers too
    // (ResNet-18's stem ran 25% and layer2's stride-2 layer 10% slower
    // here); with more outputs than pixels it packs more weights than
    // windows per call (layer3's and layer4's stride-2 3x3 layers ran
    // 10-16% faster here). 1x1 windows keep `gemm`: their few taps per
    // channel left layer3's 1x1/2 40% slower at batch 8.
    let taps = ic.window.size();
    if !mm.nchw || ic.window.groups != 1 || bound == 0 || mm.m == 0 || mm.n < mm.m || taps < 2 {
        return Ok(None);
    }
    let bv = weights_view(mm, 0, mm.n).transposed();
    crate::weight_cache().panels(array, bv, bound)
}

/// One image's convolution: `out` (`[m, n]`) from `img` (`[c, h, w]`) and
/// the weights `w` (`[k, n]`, or `[n, k]` read transposed), one GEMM per
/// channel group, its output rows split into a block per thread when
/// `threads` > 1.
fn conv_image(
    img: &[f32],
    (w, panels): (&[f32], Option<&PackedPanels>),
    out: &mut [f32],
    mm: &MatMul,
    ic: &Im2Col,
    threads: usize,
) -> Result<(), RuntimeError> {
    let win = ic.window;
    let groups = (win.groups as usize).max(1);
    let (p, k, n) = (mm.m, mm.k, mm.n);
    let ng = n / groups;
    if mm.nchw {
        for gi in 0..groups {
            let av = weights_view(mm, gi * ng, ng);
            let ov = GemmView {
                offset: gi * ng * p,
                rows: ng,
                cols: p,
                row_stride: p,
                col_stride: 1,
            };
            if conv_f32_nchw(img, ic, gi, (w, av), (out, ov), threads)? {
                continue;
            }
            if let Some(p) = panels {
                conv_f32_panels(img, ic, p, (out, ov), threads)?;
                continue;
            }
            with_cols(img, mm, ic, gi, threads, |b, bv| {
                matmul_f32_strided_col_split((w, av), (b, bv), (out, ov), threads)
                    .map_err(RuntimeError::from)
            })?;
        }
        return Ok(());
    }
    let gemm = |a: &[f32], av: GemmView, out: &mut [f32], gi: usize| {
        // The weights in place: `[k, n]`, or an `[n, k]` buffer read
        // transposed (verified: no other view reaches here).
        let [_, rs, cs] = mm.view_b().strides.map(|s| s.unsigned_abs() as usize);
        let bv = GemmView {
            offset: gi * ng * cs,
            rows: k,
            cols: ng,
            row_stride: rs,
            col_stride: cs,
        };
        let ov = |rows| GemmView {
            offset: gi * ng,
            rows,
            cols: ng,
            row_stride: n,
            col_stride: 1,
        };
        if threads < 2 || p < 2 * threads || n == 0 {
            return matmul_f32_strided((a, av), (w, bv), (out, ov(p)), threads)
                .map_err(RuntimeError::from);
        }
        // One block of output rows (pixels) per thread, each a one-thread
        // GEMM: `gemm`'s own threading barely scaled with the weights read
        // transposed (ResNet-18 at batch 1 was no faster on 2 threads).
        let rows = p.div_ceil(threads);
        out.par_chunks_mut(rows * n)
            .enumerate()
            .try_for_each(|(i, o)| {
                let r = o.len() / n;
                let ab = GemmView {
                    offset: av.offset + i * rows * av.row_stride,
                    rows: r,
                    ..av
                };
                matmul_f32_strided((a, ab), (w, bv), (o, ov(r)), 1)
            })
            .map_err(RuntimeError::from)
    };
    for gi in 0..groups {
        // The column matrix `[k, p]` read transposed: the left operand
        // `[p, k]` of the NHWC product.
        with_cols(img, mm, ic, gi, threads, |cols, bv| {
            gemm(cols, bv.transposed(), out, gi)
        })?;
    }
    Ok(())
}

/// Rows `ch0..ch0 + rows` of the weights as the `[n, k]` left operand of
/// an NCHW product: OIHW weights in place (`b_view` transposed) are
/// row-major; a contiguous `[k, n]` buffer is read column-major.
fn weights_view(mm: &MatMul, ch0: usize, rows: usize) -> GemmView {
    let [_, rs, cs] = mm.view_b().strides.map(|s| s.unsigned_abs() as usize);
    GemmView {
        offset: ch0 * cs,
        rows,
        cols: mm.k,
        row_stride: cs,
        col_stride: rs,
    }
}

/// Calls `f` with group `gi`'s column matrix `[k, p]` of image `img` as
/// a right operand: the image itself for a 1x1 window of stride 1
/// without padding (`[c, h*w]`), else its window rows copied into this
/// thread's scratch (built on `threads` threads).
fn with_cols<R>(
    img: &[f32],
    mm: &MatMul,
    ic: &Im2Col,
    gi: usize,
    threads: usize,
    f: impl FnOnce(&[f32], GemmView) -> Result<R, RuntimeError>,
) -> Result<R, RuntimeError> {
    let win = ic.window;
    let (p, k) = (mm.m, mm.k);
    let (cg, plane) = (ic.group_channels(), ic.h * ic.w);
    if win.size() == 1 && win.stride == (1, 1) && win.pad == [0; 4] {
        let bv = GemmView {
            offset: gi * cg * plane,
            rows: k,
            cols: p,
            row_stride: plane,
            col_stride: 1,
        };
        return f(img, bv);
    }
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let len = k.saturating_mul(p);
        if s.len() < len {
            let more = len - s.len();
            s.try_reserve_exact(more)
                .map_err(|_| IrError::OutOfMemory { bytes: len * 4 })?;
            s.resize(len, 0.0);
        }
        let cols = &mut s[..len];
        let group = &img[gi * cg * plane..(gi + 1) * cg * plane];
        if threads > 1 && len >= PARALLEL_MACS {
            cols.par_chunks_mut(p.max(1))
                .enumerate()
                .for_each(|(q, row)| window_row(group, ic, q, row));
        } else {
            cols.chunks_mut(p.max(1))
                .enumerate()
                .for_each(|(q, row)| window_row(group, ic, q, row));
        }
        let bv = GemmView::row_major(k, p);
        f(cols, bv)
    })
}

/// Row `q` (channel, tap row, tap column) of the transposed column
/// matrix of one group's channels `img`: the tap's value at every output
/// position, zero in the padding.
fn window_row(img: &[f32], ic: &Im2Col, q: usize, row: &mut [f32]) {
    let win = ic.window;
    let (kh, kw) = (win.kh as usize, win.kw as usize);
    let (ci, i, j) = (q / (kh * kw), q / kw % kh, q % kw);
    let ow = ic.ow().max(1);
    let (sw, dw, pl) = (
        win.stride.1 as usize,
        win.dilation.1 as usize,
        win.pad[1] as usize,
    );
    // Output columns `x0..x1` read inside the image: `x*sw + j*dw - pl`
    // in `0..w`.
    let shift = j * dw;
    let x0 = pl.saturating_sub(shift).div_ceil(sw).min(ow);
    let x1 = if ic.w + pl > shift {
        ((ic.w + pl - shift - 1) / sw + 1).min(ow)
    } else {
        0
    }
    .max(x0);
    for (y, out) in row.chunks_mut(ow).enumerate() {
        let (sh, dh) = (win.stride.0 as usize, win.dilation.0 as usize);
        let src = (y * sh + i * dh)
            .checked_sub(win.pad[0] as usize)
            .filter(|&iy| iy < ic.h)
            .map(|iy| &img[(ci * ic.h + iy) * ic.w..(ci * ic.h + iy + 1) * ic.w]);
        let Some(src) = src else {
            out.fill(0.0);
            continue;
        };
        out[..x0].fill(0.0);
        out[x1..].fill(0.0);
        // No column reads inside the image (a tap past a narrow image's
        // edge): where the first would read is past the row.
        if x1 == x0 {
            continue;
        }
        let first = x0 * sw + shift - pl;
        if sw == 1 {
            out[x0..x1].copy_from_slice(&src[first..first + (x1 - x0)]);
        } else if sw == 2 && x1 > x0 {
            // Every other element, as pairs (which vectorizes as two loads
            // and a shuffle, where `step_by` went element by element); the
            // last one alone, its pair possibly past the row.
            let n = x1 - x0 - 1;
            let pairs = src[first..first + 2 * n].chunks_exact(2);
            for (d, pair) in out[x0..x1 - 1].iter_mut().zip(pairs) {
                *d = pair[0];
            }
            out[x1 - 1] = src[first + 2 * n];
        } else {
            for (d, s) in out[x0..x1].iter_mut().zip(src[first..].iter().step_by(sw)) {
                *d = *s;
            }
        }
    }
}

/// Output bytes a block of channels aims at. Each block is its own GEMM,
/// which packs the window rows again: at 128 KiB (an L2's worth) ResNet-18
/// at batch 8 ran 1.5x slower than one block per image; 4 MiB (the L3's
/// share) keeps every ResNet-18 image one block.
const BLOCK_BYTES: usize = 4 << 20;

impl HostProgram {
    /// Runs an NCHW convolution kernel (`MatMul::nchw`) image by image,
    /// the images in parallel: per image and channel group the window
    /// rows are built once, then per block of output channels a one-thread
    /// GEMM writes the block's rows and the epilogue runs on them at once,
    /// while they are in cache, instead of a GEMM over everything and then
    /// a second pass. Applies when there are at least as many images as
    /// threads, the product is f32, the epilogue's domain is the product's
    /// `[batch, n, p]` (or `[n, p]` for one image) and every buffer it
    /// writes it writes like the product (contiguous, offset 0); returns
    /// false, having done nothing, otherwise.
    pub(super) fn run_conv_tiled(
        &self,
        k: &Kernel,
        code: &CachedKernel,
        locals: &[BufId],
        slots: &mut [Slot<'_>],
        mm: &MatMul,
        params: &[Lit],
    ) -> Result<bool, RuntimeError> {
        let (Some(ic), true) = (&mm.im2col, mm.nchw) else {
            return Ok(false);
        };
        let threads = rayon::current_num_threads();
        let (batch, n, m) = (mm.batch, mm.n, mm.m);
        let layout = code.code.layout();
        let lead = match k.domain.as_slice() {
            [b, c, p] if (*b, *c, *p) == (batch, n, m) => 1,
            [c, p] if batch == 1 && (*c, *p) == (n, m) => 0,
            _ => return Ok(false),
        };
        let groups = (ic.window.groups as usize).max(1);
        let fits = batch >= threads
            && n > 0
            && m > 0
            && n.is_multiple_of(groups)
            && layout.scratch == 0
            && self.prog.buffer(mm.out).ty.dtype == DType::F32
            && !k.accesses().any(|a| a.buf == mm.a || a.buf == mm.b);
        if !fits {
            return Ok(false);
        }
        // Buffers written (and the product) are split into the blocks'
        // own rows; every other one is lent whole, its accesses moved to
        // the block by their offsets.
        let plane = (n * m) as i64;
        let rows_strides: Vec<i64> = if lead == 1 {
            vec![plane, m as i64, 1]
        } else {
            vec![m as i64, 1]
        };
        let mut split = Vec::with_capacity(locals.len());
        for &b in locals {
            let stored = b == mm.out
                || k.stages.iter().any(|s| {
                    matches!(s, tilejit_ir::kernel::Stage::Store { access, .. } if access.buf == b)
                });
            if stored {
                let sized = self.prog.buffer(b).ty.shape.numel() == batch * n * m;
                let rows = k
                    .accesses()
                    .filter(|a| a.buf == b)
                    .all(|a| a.offset == 0 && a.strides == rows_strides);
                if !sized || !rows {
                    return Ok(false);
                }
            }
            split.push(stored);
        }
        let Some(out_at) = locals.iter().position(|&b| b == mm.out) else {
            return Ok(false);
        };
        let mismatch = || RuntimeError::from(IrError::Verify("conv operand types".into()));
        let ng = n / groups;
        // Blocks of `nb` channels (dividing a group's) of about
        // `BLOCK_BYTES` of product.
        let target = (BLOCK_BYTES / 4 / m).clamp(1, ng);
        let mut parts = ng.div_ceil(target);
        while !ng.is_multiple_of(parts) {
            parts += 1;
        }
        let nb = ng / parts;
        let image = ic.c * ic.h * ic.w;
        let Store::F32(mut product) = take_owned(&mut slots[mm.out.0 as usize])? else {
            return Err(mismatch());
        };
        // Each image's pieces: written buffers as that image's blocks,
        // the others whole.
        let mut per_image: Vec<Vec<Vec<BufArg<'_>>>> = (0..batch)
            .map(|_| {
                (0..n / nb)
                    .map(|_| (0..locals.len()).map(|_| BufArg::empty()).collect())
                    .collect()
            })
            .collect();
        let (mut x, mut w, mut w_array) = (None, None, None);
        for (i, slot) in slots.iter_mut().enumerate() {
            if i == mm.a.0 as usize || i == mm.b.0 as usize {
                let slot: &Slot<'_> = slot;
                if i == mm.a.0 as usize {
                    x = slot.f32s();
                }
                if i == mm.b.0 as usize {
                    w = slot.f32s();
                    w_array = slot.array();
                }
                continue;
            }
            let Some(at) = locals.iter().position(|b| b.0 as usize == i) else {
                continue;
            };
            if split[at] {
                let size = layout.elem_bytes[at];
                let mut pieces = slot.arg().split(nb * m * size).into_iter();
                for blk in per_image.iter_mut().flatten() {
                    blk[at] = pieces.next().unwrap_or_else(|| BufArg::empty());
                }
            } else {
                let whole = slot.arg_read();
                for blk in per_image.iter_mut().flatten() {
                    blk[at] = whole.share().unwrap_or_else(|| BufArg::empty());
                }
            }
        }
        let (Some(x), Some(w)) = (x, w) else {
            drop(per_image);
            slots[mm.out.0 as usize] = Slot::Owned(Store::F32(product));
            return Ok(false);
        };
        if x.len() != batch * image || w.len() != mm.k * n || product.len() != batch * n * m {
            drop(per_image);
            slots[mm.out.0 as usize] = Slot::Owned(Store::F32(product));
            return Err(mismatch());
        }
        // Winograd image by image when the blocks are whole blocks of 16
        // outputs; images too small alone run it together, whatever the
        // blocks.
        let together = !winograd_fits(ic, n);
        let wino = match together || nb.is_multiple_of(16) {
            true => winograd_weights(w, w_array, mm, ic)?,
            false => None,
        };
        // Kept panels when each image is one block of all the outputs.
        let panels = match (&wino, parts == 1) {
            (None, true) => conv_panels(w_array, mm, ic)?,
            _ => None,
        };
        let base = layout.args(k, params);
        code.launches.fetch_add(1, Ordering::Relaxed);
        let accesses: Vec<(bool, Vec<i64>)> = k
            .accesses()
            .map(|a| {
                let at = locals.iter().position(|&b| b == a.buf);
                (at.is_some_and(|at| split[at]), a.strides.clone())
            })
            .collect();
        // The epilogue on block `ch0..ch0 + nb` of image `bi`, its product
        // `o` just written and in cache.
        let epilogue = same_lifetime(|bi, ch0, o, mut bufs| {
            bufs[out_at] = BufArg::write(o);
            let mut args = base.clone();
            if lead == 1 {
                args[0] = 1;
            }
            args[lead] = nb as i64;
            for (ai, (rows, st)) in accesses.iter().enumerate() {
                if !rows {
                    let shift = lead as i64 * bi as i64 * st[0] + ch0 as i64 * st[lead];
                    args[layout.offset_slot(ai)] += shift;
                }
            }
            code.code.call(&mut bufs, &args, 0, nb)
        });
        let ov = GemmView::row_major(nb, m);
        // Images too small for Winograd alone run it together, then the
        // epilogue runs block by block.
        if let Some(u) = wino.as_ref().filter(|_| together) {
            let result = conv_f32_winograd_images(x, ic, u, &mut product, threads)
                .map_err(RuntimeError::from)
                .and_then(|()| {
                    product
                        .par_chunks_mut(n * m)
                        .zip(per_image.into_par_iter())
                        .enumerate()
                        .try_for_each(|(bi, (out, blocks))| {
                            let blocks = blocks.into_iter().zip(out.chunks_mut(nb * m));
                            for (j, (bufs, o)) in blocks.enumerate() {
                                epilogue(bi, j * nb, o, bufs)?;
                            }
                            Ok(())
                        })
                });
            slots[mm.out.0 as usize] = Slot::Owned(Store::F32(product));
            return result.map(|()| true);
        }
        let result = product
            .par_chunks_mut(n * m)
            .zip(per_image.into_par_iter())
            .enumerate()
            .try_for_each(|(bi, (out, blocks))| -> Result<(), RuntimeError> {
                let img = &x[bi * image..(bi + 1) * image];
                let mut blocks = blocks.into_iter().zip(out.chunks_mut(nb * m));
                for gi in 0..groups {
                    // Blocks the direct kernel declines (all of a group's
                    // or none: they share their shape) share one build of
                    // the window rows.
                    let mut declined = Vec::new();
                    for j in 0..parts {
                        let ch0 = gi * ng + j * nb;
                        let (bufs, o) = blocks.next().ok_or_else(mismatch)?;
                        let av = weights_view(mm, ch0, nb);
                        if let Some(u) = &wino {
                            conv_f32_winograd(img, ic, u, ch0, (&mut *o, ov), 1)?;
                            epilogue(bi, ch0, o, bufs)?;
                        } else if declined.is_empty()
                            && conv_f32_nchw(img, ic, gi, (w, av), (&mut *o, ov), 1)?
                        {
                            epilogue(bi, ch0, o, bufs)?;
                        } else if let Some(p) = panels.as_deref() {
                            conv_f32_panels(img, ic, p, (&mut *o, ov), 1)?;
                            epilogue(bi, ch0, o, bufs)?;
                        } else {
                            declined.push((ch0, av, o, bufs));
                        }
                    }
                    if !declined.is_empty() {
                        with_cols(img, mm, ic, gi, 1, |cols, bv| {
                            for (ch0, av, o, bufs) in declined {
                                matmul_f32_strided((w, av), (cols, bv), (&mut *o, ov), 1)?;
                                epilogue(bi, ch0, o, bufs)?;
                            }
                            Ok(())
                        })?;
                    }
                }
                Ok(())
            });
        slots[mm.out.0 as usize] = Slot::Owned(Store::F32(product));
        result.map(|()| true)
    }
}

/// Types a block's epilogue closure: the product block it writes and the
/// buffers it lends it share one lifetime.
fn same_lifetime<F, R>(f: F) -> F
where
    F: for<'a> Fn(usize, usize, &'a mut [f32], Vec<BufArg<'a>>) -> R,
{
    f
}
