//! Partial + combine tasks: a kernel with a few long rows splits each
//! stage's columns across tasks, so one big reduction uses many cores.

use super::{declare, emit_chunk_width, emit_row_bases, load_params, Decls, Layout, Pass};
use crate::device::tile::regs::{CHUNK, COL_HI, COL_LO, END, PARTIAL, T27, T3, T31, T4, UNIT};
use crate::device::tile::{reduce_row, TileCx};
use crate::device::{finish, internal, sanitize, DeviceKernel, Extent, Units};
use crate::CodegenError;
use std::sync::Arc;
use tilejit_device::isa::emit::{Addr, Gm, ProgramBuilder, Shape};
use tilejit_device::isa::Pipe;
use tilejit_device::{CoreType, DeviceConfig};
use tilejit_ir::kernel::{BufId, Kernel, Stage};
use tilejit_ir::{DType, ReduceOp};

/// Long rows fewer than this are split across tasks.
pub(super) const SPLIT_MAX_ROWS: usize = 8;

/// Partial + combine tasks for a kernel with a few long rows. Workspace:
/// per reduction `j`, GM `w{2j}` holds one partial per (row, chunk) and
/// `w{2j+1}` one finished value per row. Stage `s` becomes a function over
/// a column range (all rows, chunk by chunk, reading earlier row values
/// from GM); each reduction adds a combine function over rows that folds
/// its partials. The runtime chains them in order. Row count, row length
/// and so the chunk count are size arguments; a row may have up to
/// `Layout::max_chunks` chunks.
pub(super) struct Split<'a> {
    k: &'a Kernel,
    buf_dtype: &'a dyn Fn(BufId) -> DType,
    cfg: &'a DeviceConfig,
    base: &'a TileCx<'a>,
    lay: &'a Layout,
    /// The reductions: stage, dtype, op.
    reduces: Vec<(usize, DType, ReduceOp)>,
    extra: Arc<Vec<(DType, Extent)>>,
}

impl<'a> Split<'a> {
    pub(super) fn new(
        k: &'a Kernel,
        buf_dtype: &'a dyn Fn(BufId) -> DType,
        cfg: &'a DeviceConfig,
        base: &'a TileCx<'a>,
        lay: &'a Layout,
    ) -> Split<'a> {
        let reduces: Vec<(usize, DType, ReduceOp)> = k
            .stages
            .iter()
            .enumerate()
            .filter_map(|(si, st)| match st {
                Stage::Reduce { op, value } => Some((si, k.expr(*value).dtype, *op)),
                Stage::Store { .. } => None,
            })
            .collect();
        let extra = reduces
            .iter()
            .flat_map(|&(_, dt, _)| [(dt, Extent::RowChunks(lay.w)), (dt, Extent::Rows)])
            .collect();
        Split {
            k,
            buf_dtype,
            cfg,
            base,
            lay,
            reduces,
            extra: Arc::new(extra),
        }
    }

    pub(super) fn compile(&self) -> Result<Vec<DeviceKernel>, CodegenError> {
        let mut out = Vec::new();
        for (si, pass) in self.lay.passes.iter().enumerate() {
            out.push(self.stage(si, pass)?);
            if let Some(j) = self.ridx(si) {
                out.push(self.combine(si, j)?);
            }
        }
        Ok(out)
    }

    /// Stage `si`'s index among the reductions.
    fn ridx(&self, si: usize) -> Option<usize> {
        self.reduces.iter().position(|r| r.0 == si)
    }

    fn declare(&self, b: &mut ProgramBuilder) -> Decls {
        let n_params = self.lay.n_params;
        let sizes = self.base.sizes;
        declare(
            b,
            self.base.buffers,
            self.buf_dtype,
            &self.extra,
            sizes,
            n_params,
        )
    }

    /// Workspace `i` (reduction `j`'s partials are `2j`, its row values
    /// `2j + 1`).
    fn work(&self, d: &Decls, i: usize) -> Result<Gm, CodegenError> {
        let missing = || internal(self.k, format!("workspace w{i} is not declared"));
        d.work.get(i).copied().ok_or_else(missing)
    }

    /// Stage `si` over a range of columns of every row, its reduction's
    /// chunk partials to GM.
    fn stage(&self, si: usize, (ev, lu, _): &Pass) -> Result<DeviceKernel, CodegenError> {
        let (k, lay) = (self.k, self.lay);
        let mut b = ProgramBuilder::new(format!("k_{}_s{si}", sanitize(&k.name)), CoreType::Aiv);
        let d = self.declare(&mut b);
        let mut partials = vec![None; k.stages.len()];
        if let Some(j) = self.ridx(si) {
            partials[si] = Some(self.work(&d, 2 * j)?);
        }
        let cx = TileCx {
            partials,
            ..*self.base
        };
        b.ldarg(COL_LO, d.lo).ldarg(COL_HI, d.hi);
        load_params(&mut b, &cx, &d)?;
        let (rows, done, chunks, row_done) = (b.label(), b.label(), b.label(), b.label());
        // END: the row count, the product of the row dimensions.
        b.movi(END, 1);
        for d in 0..k.domain.len() - 1 {
            b.ldarg(T31, cx.sizes.dim(d)).mul(END, END, T31);
        }
        b.movi(UNIT, 0);
        b.bind(rows);
        b.bge(UNIT, END, done);
        emit_row_bases(&mut b, &cx)?;
        // Earlier reductions' finished row values, from the combine tasks.
        for &(sj, dt, _) in self.reduces.iter().filter(|r| r.0 < si) {
            let j = self
                .ridx(sj)
                .ok_or_else(|| internal(k, "a reduction not listed"))?;
            let row_value = cx.elem_addr(k.loads.len() + sj);
            let src = self.work(&d, 2 * j + 1)?;
            b.ld(dt, Shape::new(1, 1), 1, 1, row_value, src, UNIT, 0);
        }
        b.mov(CHUNK, COL_LO);
        b.bind(chunks);
        b.bge(CHUNK, COL_HI, row_done);
        emit_chunk_width(&mut b, &cx, lay.w);
        // The partial's index: row * chunks per row + this chunk.
        b.ldarg(T27, cx.cols_arg())
            .add(T27, T27, lay.w - 1)
            .div(T27, T27, lay.w)
            .mul(T27, UNIT, T27);
        b.div(PARTIAL, CHUNK, lay.w).add(PARTIAL, PARTIAL, T27);
        cx.emit_tile(&mut b, &cx.plan(ev, lu, lay.peak)?, 0)?;
        b.barrier().add(CHUNK, CHUNK, lay.w).jmp(chunks);
        b.bind(row_done);
        b.add(UNIT, UNIT, 1).jmp(rows);
        b.bind(done);
        b.end();
        self.finish(b, format!("{}/stage{si}", k.name), Units::Cols, lay.w)
    }

    /// Folds reduction `j` (stage `si`)'s chunk partials into one value
    /// per row.
    fn combine(&self, si: usize, j: usize) -> Result<DeviceKernel, CodegenError> {
        let k = self.k;
        let (_, dt, op) = self.reduces[j];
        let (n, w) = (self.lay.max_chunks, self.lay.w);
        let tmp = Addr::from((n * dt.size_bytes()).next_multiple_of(32));
        let mut b = ProgramBuilder::new(format!("k_{}_c{si}", sanitize(&k.name)), CoreType::Aiv);
        let d = self.declare(&mut b);
        let (partials, row_values) = (self.work(&d, 2 * j)?, self.work(&d, 2 * j + 1)?);
        let (top, done) = (b.label(), b.label());
        b.ldarg(UNIT, d.lo).ldarg(END, d.hi);
        // T4: the row's chunk count.
        b.ldarg(T4, self.base.cols_arg())
            .add(T4, T4, w - 1)
            .div(T4, T4, w);
        b.bind(top);
        b.bge(UNIT, END, done).mul(T3, UNIT, T4);
        let (row, zero) = (Shape::new(1, n), Addr::new(0));
        b.ld(dt, row, 1, T4, zero, partials, T3, 0);
        b.setf(Pipe::Mte2, Pipe::V, 0).waitf(Pipe::Mte2, Pipe::V, 0);
        reduce_row(&mut b, op, dt, row, T4.into(), tmp, zero);
        b.setf(Pipe::V, Pipe::Mte3, 0).waitf(Pipe::V, Pipe::Mte3, 0);
        b.st(dt, Shape::new(1, 1), 1, 1, row_values, UNIT, 0, tmp);
        b.barrier().add(UNIT, UNIT, 1).jmp(top);
        b.bind(done);
        b.end();
        self.finish(b, format!("{}/combine{si}", k.name), Units::Rows, 1)
    }

    fn finish(
        &self,
        b: ProgramBuilder,
        name: String,
        units: Units,
        tile_units: usize,
    ) -> Result<DeviceKernel, CodegenError> {
        let (program, asm) = finish(self.k, b, self.cfg)?;
        Ok(DeviceKernel {
            name,
            program,
            asm,
            buffers: self.base.buffers.to_vec(),
            core: CoreType::Aiv,
            units,
            tile_units,
            extra: self.extra.clone(),
        })
    }
}
