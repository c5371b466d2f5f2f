//! Matmul kernels on the host: one tile of rows per pool thread with the
//! epilogue run while the rows are in cache, a plain `gemm` otherwise, and
//! wrapping integer matmuls. Convolutions are in `conv`.

use super::store::{take_owned, Slot, Store};
use super::HostProgram;
use crate::error::RuntimeError;
use crate::kernel_cache::CachedKernel;
use rayon::prelude::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tilejit_codegen::host::{
    matmul_f32_panels, matmul_view_f32, matmul_view_f64, BufArg, GemmView, PackedPanels,
};
use tilejit_ir::fallible::filled;
use tilejit_ir::kernel::{Kernel, MatMul, MatView};
use tilejit_ir::{DType, IrError, Lit};

/// Below this many multiply-adds a matmul runs on the calling thread.
pub(super) const PARALLEL_MIN: usize = 1 << 18;

impl HostProgram {
    pub(super) fn matmul(
        &self,
        slots: &mut [Slot<'_>],
        mm: &tilejit_ir::kernel::MatMul,
        out_dtype: DType,
    ) -> Result<(), RuntimeError> {
        if let Some(ic) = &mm.im2col {
            return self.conv(slots, mm, ic, out_dtype);
        }
        let dims = [mm.batch, mm.m, mm.k, mm.n];
        let threads = if mm.m * mm.n * mm.k >= PARALLEL_MIN {
            rayon::current_num_threads()
        } else {
            1
        };
        let mut out = take_owned(&mut slots[mm.out.0 as usize])?;
        let (a, b) = (&slots[mm.a.0 as usize], &slots[mm.b.0 as usize]);
        let mismatch = || RuntimeError::from(IrError::Verify("matmul operand types".into()));
        // Operands are read in place through their views (a transposed
        // weight is never copied).
        let (av, bv) = (mm.view_a(), mm.view_b());
        let r = match &mut out {
            Store::F32(o) => match (a.f32s(), b.f32s()) {
                (Some(x), Some(y)) => {
                    let kept = kept_panels(b, mm)?;
                    let r = match kept.and_then(|p| kept_product(&p, (x, av), mm, o, threads)) {
                        Some(r) => r,
                        None => matmul_view_f32((x, av), (y, bv), o, dims, threads),
                    };
                    round_product(o, out_dtype);
                    r
                }
                _ => return Err(mismatch()),
            },
            Store::F64(o) => match (a.f64s(), b.f64s()) {
                (Some(x), Some(y)) => matmul_view_f64((x, av), (y, bv), o, dims, threads),
                _ => return Err(mismatch()),
            },
            Store::I32(o) => {
                let v = int_matmul((&a.ints()?, av), (&b.ints()?, bv), dims)?;
                o.iter_mut().zip(v).for_each(|(d, s)| *d = s as i32);
                Ok(())
            }
            Store::I64(o) => {
                let v = int_matmul((&a.ints()?, av), (&b.ints()?, bv), dims)?;
                o.iter_mut().zip(v).for_each(|(d, s)| *d = s);
                Ok(())
            }
            Store::U8(o) => {
                let v = int_matmul((&a.ints()?, av), (&b.ints()?, bv), dims)?;
                o.iter_mut().zip(v).for_each(|(d, s)| *d = s as u8);
                Ok(())
            }
            Store::I8(o) => {
                let v = int_matmul((&a.ints()?, av), (&b.ints()?, bv), dims)?;
                o.iter_mut().zip(v).for_each(|(d, s)| *d = s as i8);
                Ok(())
            }
            Store::I16(o) => {
                let v = int_matmul((&a.ints()?, av), (&b.ints()?, bv), dims)?;
                o.iter_mut().zip(v).for_each(|(d, s)| *d = s as i16);
                Ok(())
            }
            Store::U16(o) => {
                let v = int_matmul((&a.ints()?, av), (&b.ints()?, bv), dims)?;
                o.iter_mut().zip(v).for_each(|(d, s)| *d = s as u16);
                Ok(())
            }
            Store::U32(o) => {
                let v = int_matmul((&a.ints()?, av), (&b.ints()?, bv), dims)?;
                o.iter_mut().zip(v).for_each(|(d, s)| *d = s as u32);
                Ok(())
            }
            Store::U64(o) => {
                let v = int_matmul((&a.ints()?, av), (&b.ints()?, bv), dims)?;
                o.iter_mut().zip(v).for_each(|(d, s)| *d = s as u64);
                Ok(())
            }
            Store::Bool(_) => return Err(mismatch()),
        };
        slots[mm.out.0 as usize] = Slot::Owned(out);
        Ok(r?)
    }
}

/// How a row-tiled launch hands one buffer to each tile.
#[derive(Copy, Clone, PartialEq)]
enum TilePart {
    /// The whole buffer (every access broadcasts it across rows).
    Whole,
    /// Rows of this many elements, the tile's own.
    Rows(usize),
}

impl HostProgram {
    /// Runs a matmul kernel as one tile of rows per pool thread: each
    /// tile's product rows come from a single-threaded `gemm` and the
    /// epilogue runs on them at once, while they are still in the core's
    /// cache, instead of a parallel `gemm` over all rows and then a second
    /// parallel pass. Applies to an f32 `[m, k] @ [k, n]` whose epilogue
    /// domain is the product's `[m, n]` and whose stages read every buffer
    /// either broadcast across rows (row stride 0) or row by row (`[n, 1]`
    /// over `m * n` elements, the only way they may write one); returns
    /// false, having done nothing, for anything else.
    pub(super) fn run_row_tiled(
        &self,
        k: &Kernel,
        code: &CachedKernel,
        locals: &[tilejit_ir::kernel::BufId],
        slots: &mut [Slot<'_>],
        mm: &tilejit_ir::kernel::MatMul,
        params: &[Lit],
    ) -> Result<bool, RuntimeError> {
        let threads = rayon::current_num_threads();
        let (m, n) = (mm.m, mm.n);
        let layout = code.code.layout();
        let plain = mm.batch == 1
            && mm.im2col.is_none()
            && k.domain == [m, n]
            && threads >= 2
            && m >= threads
            && m * n * mm.k >= 1 << 18
            && layout.scratch == 0
            && self.prog.buffer(mm.out).ty.dtype == DType::F32;
        // Tiles split buffers by rows, which an offset window would cross.
        let windowed = k.accesses().any(|a| a.offset != 0);
        if !plain || windowed || k.accesses().any(|a| a.buf == mm.a || a.buf == mm.b) {
            return Ok(false);
        }
        // How each local buffer is split: the product by rows, the
        // operands whole (each tile reads its rows of `a` through the
        // view), the rest by how the stages access them.
        let mut parts = Vec::with_capacity(locals.len());
        for &b in locals {
            let part = if b == mm.a || b == mm.b {
                TilePart::Whole
            } else {
                let mut part = if b == mm.out {
                    Some(TilePart::Rows(n))
                } else {
                    None
                };
                let row_sized = self.prog.buffer(b).ty.shape.numel() == m * n;
                let stored = k.stages.iter().any(|s| {
                    matches!(s, tilejit_ir::kernel::Stage::Store { access, .. } if access.buf == b)
                });
                for a in k.accesses().filter(|a| a.buf == b) {
                    let this = match a.strides.as_slice() {
                        [0, _] if !stored => TilePart::Whole,
                        &[s0, 1] if s0 == n as i64 && row_sized => TilePart::Rows(n),
                        _ => return Ok(false),
                    };
                    if part.is_some_and(|p| p != this) {
                        return Ok(false);
                    }
                    part = Some(this);
                }
                part.unwrap_or(TilePart::Whole)
            };
            parts.push(part);
        }
        let Some(out_at) = locals.iter().position(|&b| b == mm.out) else {
            return Ok(false);
        };
        let kept = kept_panels(&slots[mm.b.0 as usize], mm)?;
        let Store::F32(mut product) = take_owned(&mut slots[mm.out.0 as usize])? else {
            return Err(IrError::Verify("matmul product is not f32".into()).into());
        };
        let tile = m.div_ceil(threads);
        let tiles = m.div_ceil(tile);
        // Each tile's buffers: row-split ones as the tile's own rows, whole
        // ones shared read-only; the matmul operands are not accessed.
        let mut per_tile: Vec<Vec<BufArg<'_>>> = (0..tiles)
            .map(|_| (0..locals.len()).map(|_| BufArg::empty()).collect())
            .collect();
        let (mut a, mut bm) = (None, None);
        for (i, slot) in slots.iter_mut().enumerate() {
            if i == mm.a.0 as usize || i == mm.b.0 as usize {
                let slot: &Slot<'_> = slot;
                if i == mm.a.0 as usize {
                    a = slot.f32s();
                }
                if i == mm.b.0 as usize {
                    bm = slot.f32s();
                }
                continue;
            }
            let Some(at) = locals.iter().position(|b| b.0 as usize == i) else {
                continue;
            };
            match parts[at] {
                TilePart::Whole => {
                    let whole = slot.arg_read();
                    for t in per_tile.iter_mut() {
                        t[at] = whole.share().unwrap_or_else(|| BufArg::empty());
                    }
                }
                TilePart::Rows(len) => {
                    let size = layout.elem_bytes[at];
                    let pieces = slot.arg().split(tile * len * size);
                    for (t, piece) in per_tile.iter_mut().zip(pieces) {
                        t[at] = piece;
                    }
                }
            }
        }
        let (Some(a), Some(bm)) = (a, bm) else {
            drop(per_tile);
            slots[mm.out.0 as usize] = Slot::Owned(Store::F32(product));
            return Ok(false);
        };

        let args = layout.args(k, params);
        code.launches.fetch_add(1, Ordering::Relaxed);
        // Each tile reads its rows of `a` in place: the view moved down
        // `tile` rows per tile. Kept panels make the whole product first,
        // split by panels (each thread then streams half the weights, not
        // all of them), and the tiles run only the epilogue.
        let (av, bv) = (mm.view_a(), mm.view_b());
        let whole = match kept.and_then(|p| kept_product(&p, (a, av), mm, &mut product, threads)) {
            Some(Err(e)) => {
                drop(per_tile);
                slots[mm.out.0 as usize] = Slot::Owned(Store::F32(product));
                return Err(e.into());
            }
            Some(Ok(())) => true,
            None => false,
        };
        let result = product
            .par_chunks_mut(tile * n)
            .enumerate()
            .zip(per_tile.into_par_iter())
            .try_for_each(|((t, out), mut bufs)| -> Result<(), RuntimeError> {
                let rows = out.len() / n;
                let mut at = av;
                at.offset += (t * tile) as i64 * av.strides[1];
                if !whole {
                    matmul_view_f32((a, at), (bm, bv), out, [1, rows, mm.k, n], 1)?;
                }
                bufs[out_at] = BufArg::write(out);
                let mut args = args.clone();
                args[0] = rows as i64;
                Ok(code.code.call(&mut bufs, &args, 0, rows)?)
            });
        slots[mm.out.0 as usize] = Slot::Owned(Store::F32(product));
        result.map(|()| true)
    }
}

/// The right operand packed in panels and kept in the weight cache, when
/// it is an argument or a constant (`slot` borrows it), the product is one
/// f32 `[m, k] @ [k, n]` of more rows than the streaming `gemv` path
/// takes, and the view has no negative stride.
fn kept_panels(slot: &Slot<'_>, mm: &MatMul) -> Result<Option<Arc<PackedPanels>>, RuntimeError> {
    let Some(array) = slot.array() else {
        return Ok(None);
    };
    let bound = crate::config::config().weight_cache_bytes;
    if mm.batch != 1 || mm.m <= 4 || array.dtype() != DType::F32 || bound == 0 {
        return Ok(None);
    }
    let Some(bv) = gemm_view(mm.view_b(), mm.k, mm.n) else {
        return Ok(None);
    };
    crate::weight_cache().panels(array, bv, bound)
}

/// The product `[m, n]` (contiguous, into `out`) of `a` and kept panels
/// `p`, on `threads` threads; `None` when `a`'s view has a negative stride
/// (the caller then runs `gemm`).
fn kept_product(
    p: &PackedPanels,
    (a, av): (&[f32], MatView),
    mm: &MatMul,
    out: &mut [f32],
    threads: usize,
) -> Option<Result<(), tilejit_codegen::CodegenError>> {
    let ga = gemm_view(av, mm.m, mm.k)?;
    let ov = GemmView::row_major(mm.m, mm.n);
    Some(matmul_f32_panels((a, ga), p, (out, ov), threads))
}

/// A `rows x cols` matrix view of batch 0 as a `GemmView`, when its
/// offset and strides are not negative.
fn gemm_view(v: MatView, rows: usize, cols: usize) -> Option<GemmView> {
    Some(GemmView {
        offset: usize::try_from(v.offset).ok()?,
        rows,
        cols,
        row_stride: usize::try_from(v.strides[1]).ok()?,
        col_stride: usize::try_from(v.strides[2]).ok()?,
    })
}

/// Wrapping integer matmul (ints are not the fast path), each operand read
/// through its view; a view that leaves its buffer is an error.
fn int_matmul(
    (a, av): (&[i64], MatView),
    (b, bv): (&[i64], MatView),
    [batch, m, k, n]: [usize; 4],
) -> Result<Vec<i64>, IrError> {
    if !av.fits([batch, m, k], a.len()) || !bv.fits([batch, k, n], b.len()) {
        return Err(IrError::Verify(
            "matmul operand view leaves its buffer".into(),
        ));
    }
    let at = |v: MatView, i: usize, r: usize, c: usize| {
        let [bs, rs, cs] = v.strides;
        (v.offset + i as i64 * bs + r as i64 * rs + c as i64 * cs) as usize
    };
    let mut out = filled(batch * m * n, 0i64)?;
    for bi in 0..batch {
        for i in 0..m {
            for p in 0..k {
                let x = a[at(av, bi, i, p)];
                for j in 0..n {
                    let o = &mut out[bi * m * n + i * n + j];
                    *o = o.wrapping_add(x.wrapping_mul(b[at(bv, bi, p, j)]));
                }
            }
        }
    }
    Ok(out)
}

/// An f16/bf16 product (computed in f32) rounds like every other op's
/// result.
pub(super) fn round_product(o: &mut [f32], dtype: DType) {
    match dtype {
        DType::F16 => o
            .iter_mut()
            .for_each(|v| *v = half::f16::from_f32(*v).to_f32()),
        DType::BF16 => o
            .iter_mut()
            .for_each(|v| *v = half::bf16::from_f32(*v).to_f32()),
        _ => {}
    }
}
