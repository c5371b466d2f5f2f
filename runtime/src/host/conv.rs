//! Convolutions on the host: an `Op::Conv` kernel's matmul, whose left
//! operand is the image read as its windows. Per image and channel group
//! one strided GEMM (with fewer images than threads, one per block of
//! output pixels per thread): a 1x1 window of stride 1 without padding reads the
//! image itself (`[c, h*w]` is the transposed column matrix); any other
//! window is copied, one image at a time, into a per-thread scratch of
//! `[k, oh*ow]` rows (each a run of an image row: contiguous copies for
//! stride 1), which stays in cache instead of a whole-batch im2col.

use super::matmul::round_product;
use super::store::{take_owned, Slot, Store};
use super::HostProgram;
use crate::error::RuntimeError;
use rayon::prelude::*;
use std::cell::RefCell;
use tilejit_codegen::host::{matmul_f32_strided, GemmView};
use tilejit_ir::kernel::{Im2Col, MatMul};
use tilejit_ir::{DType, IrError};

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
        let one = |(b, ob): (usize, &mut [f32]), inner: usize| {
            conv_image(&x[b * image..(b + 1) * image], w, ob, mm, ic, inner)
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

/// One image's convolution: `out` (`[m, n]`) from `img` (`[c, h, w]`) and
/// the weights `w` (`[k, n]`, or `[n, k]` read transposed), one GEMM per
/// channel group, its output rows split into a block per thread when
/// `threads` > 1.
fn conv_image(
    img: &[f32],
    w: &[f32],
    out: &mut [f32],
    mm: &MatMul,
    ic: &Im2Col,
    threads: usize,
) -> Result<(), RuntimeError> {
    let win = ic.window;
    let groups = (win.groups as usize).max(1);
    let (p, k, n) = (mm.m, mm.k, mm.n);
    let (ng, cg, plane) = (n / groups, ic.group_channels(), ic.h * ic.w);
    let direct = win.size() == 1 && win.stride == (1, 1) && win.pad == [0; 4];
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
        if direct {
            // The group's channels `[cg, h*w]` are the column matrix,
            // transposed: row `p` (a pixel) steps 1, column (a channel)
            // steps a plane.
            let av = GemmView {
                offset: gi * cg * plane,
                rows: p,
                cols: k,
                row_stride: 1,
                col_stride: plane,
            };
            gemm(img, av, out, gi)?;
            continue;
        }
        SCRATCH.with(|s| -> Result<(), RuntimeError> {
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
            // `cols` is `[k, p]`: the column matrix transposed.
            let av = GemmView {
                offset: 0,
                rows: p,
                cols: k,
                row_stride: 1,
                col_stride: p,
            };
            gemm(cols, av, out, gi)
        })?;
    }
    Ok(())
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
        let first = x0 * sw + shift - pl;
        if sw == 1 {
            out[x0..x1].copy_from_slice(&src[first..first + (x1 - x0)]);
        } else {
            for (d, s) in out[x0..x1].iter_mut().zip(src[first..].iter().step_by(sw)) {
                *d = *s;
            }
        }
    }
}
