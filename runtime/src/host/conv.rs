//! Convolutions on the host: an `Op::Conv` kernel's matmul, whose left
//! operand is the image read as its windows.

use super::matmul::round_product;
use super::store::{take_owned, Slot, Store};
use super::HostProgram;
use crate::error::RuntimeError;
use rayon::prelude::*;
use tilejit_codegen::host::matmul_f32;
use tilejit_ir::fallible::filled;
use tilejit_ir::{DType, IrError};

impl HostProgram {
    /// A convolution's matmul on the host: the windows copied into rows
    /// (in parallel), then one GEMM of every image's rows by the shared
    /// weights. (The device reads the windows in place.)
    pub(super) fn conv(
        &self,
        slots: &mut [Slot<'_>],
        mm: &tilejit_ir::kernel::MatMul,
        ic: &tilejit_ir::kernel::Im2Col,
        out_dtype: DType,
    ) -> Result<(), RuntimeError> {
        let mismatch = || RuntimeError::from(IrError::Verify("conv operand types".into()));
        let too_big = || RuntimeError::from(IrError::OutOfMemory { bytes: usize::MAX });
        let rows = mm.batch.checked_mul(mm.m).ok_or_else(too_big)?;
        let image = ic.c.checked_mul(ic.h).and_then(|x| x.checked_mul(ic.w));
        let image = image.ok_or_else(too_big)?;
        let mut cols = filled(rows.checked_mul(mm.k).ok_or_else(too_big)?, 0.0f32)?;
        {
            let x = slots[mm.a.0 as usize].f32s().ok_or_else(mismatch)?;
            if x.len() != mm.batch * image {
                return Err(mismatch());
            }
            let win = ic.window;
            let (kh, kw) = (win.kh as usize, win.kw as usize);
            let (s, pad, ow) = (win.stride as usize, win.pad as usize, ic.ow().max(1));
            // Row `r` is window `p` of image `b`: per channel and window
            // row, the image row's slice (the padding stays zero).
            let fill = |(r, row): (usize, &mut [f32])| {
                let (b, p) = (r / mm.m.max(1), r % mm.m.max(1));
                let (y, x0) = (p / ow, p % ow);
                let img = &x[b * image..(b + 1) * image];
                for ci in 0..ic.c {
                    for i in 0..kh {
                        let iy = (y * s + i).wrapping_sub(pad);
                        if iy >= ic.h {
                            continue;
                        }
                        let src = &img[(ci * ic.h + iy) * ic.w..(ci * ic.h + iy + 1) * ic.w];
                        let dst = &mut row[(ci * kh + i) * kw..(ci * kh + i + 1) * kw];
                        for (j, d) in dst.iter_mut().enumerate() {
                            if let Some(v) = src.get((x0 * s + j).wrapping_sub(pad)) {
                                *d = *v;
                            }
                        }
                    }
                }
            };
            if rows * mm.k >= 1 << 16 {
                cols.par_chunks_mut(mm.k.max(1)).enumerate().for_each(fill);
            } else {
                cols.chunks_mut(mm.k.max(1)).enumerate().for_each(fill);
            }
        }
        let threads = if rows * mm.n * mm.k >= 1 << 18 {
            rayon::current_num_threads()
        } else {
            1
        };
        let mut out = take_owned(&mut slots[mm.out.0 as usize])?;
        let w = slots[mm.b.0 as usize].f32s().ok_or_else(mismatch)?;
        let Store::F32(o) = &mut out else {
            return Err(mismatch());
        };
        let r = matmul_f32(&cols, w, o, [1, rows, mm.k, mm.n], threads);
        round_product(o, out_dtype);
        slots[mm.out.0 as usize] = Slot::Owned(out);
        Ok(r?)
    }
}
