//! Emitting one tile's instructions: loads (MTE2), the expression DAG and
//! stages on the vector unit, stores (MTE3), with UB slots assigned by
//! liveness. [`TileCx::plan`] assigns the slots; [`TileCx::emit_tile`]
//! pushes the three streams with the flags between them.

use super::vector::Event;
use super::{internal, unsupported, SizeArgs};
use crate::CodegenError;
use tilejit_device::isa::emit::{Addr, Gm, ProgramBuilder, Reg, Shape, Val};
use tilejit_device::isa::{Cond, Pipe};
use tilejit_ir::kernel::{Access, BufId, Expr, ExprId, Kernel, Stage};
use tilejit_ir::{BinaryOp, CmpOp, DType, Lit, ReduceOp, UnaryOp};

/// The registers of a vector kernel. r5.. hold the accesses' row offsets
/// (flat kernels: their fixed offsets; [`TileCx::base_reg`]), then the
/// params ([`TileCx::param_reg`]).
pub(super) mod regs {
    use tilejit_device::isa::emit::Reg;

    /// The unit (element or row) the tile starts at.
    pub(in crate::device) const UNIT: Reg = Reg::fixed(0);
    /// One past the task's last unit.
    pub(in crate::device) const END: Reg = Reg::fixed(1);
    /// The tile's valid columns.
    pub(in crate::device) const VALID: Reg = Reg::fixed(2);
    /// Scratch: loads' GM offsets, the row index being peeled.
    pub(in crate::device) const T3: Reg = Reg::fixed(3);
    /// Scratch: stores' GM offsets, one row index digit.
    pub(in crate::device) const T4: Reg = Reg::fixed(4);
    /// The first access's row offset.
    pub(in crate::device) const FIRST_BASE: usize = 5;
    /// Registers below this are free for bases and params.
    pub(in crate::device) const BASES_END: usize = 27;
    /// Split long rows: the index of this chunk's partial in its workspace.
    pub(in crate::device) const PARTIAL: Reg = Reg::fixed(26);
    /// Scratch (split long rows).
    pub(in crate::device) const T27: Reg = Reg::fixed(27);
    /// Whole rows: the columns vector ops compute, `max(cols, 1)` (the
    /// same register as [`T27`], which only split rows use).
    pub(in crate::device) const VCOLS: Reg = Reg::fixed(27);
    /// A long row's chunk offset (its first column).
    pub(in crate::device) const CHUNK: Reg = Reg::fixed(28);
    /// Split long rows: the task's first column.
    pub(in crate::device) const COL_LO: Reg = Reg::fixed(29);
    /// Split long rows: one past the task's last column.
    pub(in crate::device) const COL_HI: Reg = Reg::fixed(30);
    /// Scratch: a row offset term.
    pub(in crate::device) const T31: Reg = Reg::fixed(31);
}

use regs::{CHUNK, PARTIAL, T3, T31, T4, UNIT, VALID};

/// What emitting one tile's instructions needs to know.
pub(super) struct TileCx<'a> {
    pub(super) k: &'a Kernel,
    pub(super) flat: bool,
    pub(super) long: bool,
    pub(super) shape: Shape,
    /// The valid columns vector ops compute (loads and reductions use
    /// [`VALID`]).
    pub(super) vcv: Val,
    pub(super) slot_bytes: usize,
    pub(super) elem_base: usize,
    /// Where this buffer set starts in UB (the second set of a double-
    /// buffered kernel sits after the first).
    pub(super) ub_base: usize,
    /// The kernel's buffers; buffer `i` is GM argument `i`.
    pub(super) buffers: &'a [BufId],
    pub(super) access_list: &'a [&'a Access],
    /// Split long rows: per stage, the GM argument its chunk partials go
    /// to ([`PARTIAL`] holds the partial's index).
    pub(super) partials: Vec<Option<Gm>>,
    /// Where the sizes and strides sit among the scalar arguments.
    pub(super) sizes: SizeArgs,
}

/// One tile's UB slot per expression, for one list of events.
pub(super) struct TilePlan<'e> {
    events: &'e [Event],
    slot_of: Vec<Option<usize>>,
}

/// UB slots by liveness: a slot is free again after its value's last use.
struct SlotAlloc<'u> {
    last_use: &'u [usize],
    slot_of: Vec<Option<usize>>,
    free: Vec<usize>,
    /// (last use, slot) of the slots in use.
    expiring: Vec<(usize, usize)>,
}

impl SlotAlloc<'_> {
    /// A slot for `e`, computed at event `i`; `None` when all are taken.
    fn assign(&mut self, e: ExprId, i: usize) -> Option<usize> {
        let sl = self.free.pop()?;
        self.expiring.push((self.last_use[e.0 as usize].max(i), sl));
        self.slot_of[e.0 as usize] = Some(sl);
        Some(sl)
    }

    /// Frees the slots whose last use is before event `i`.
    fn expire_before(&mut self, i: usize) {
        let free = &mut self.free;
        self.expiring.retain(|&(end, sl)| {
            if end < i {
                free.push(sl);
                false
            } else {
                true
            }
        });
    }
}

impl TileCx<'_> {
    fn reg(&self, index: usize) -> Result<Reg, CodegenError> {
        Reg::new(index).ok_or_else(|| internal(self.k, format!("no register r{index}")))
    }

    /// The scalar argument holding the row length (the inner dimension).
    pub(super) fn cols_arg(&self) -> u32 {
        self.sizes.dim(self.k.domain.len() - 1)
    }

    /// The scalar argument holding access `a`'s inner stride.
    fn inner_arg(&self, a: usize) -> u32 {
        self.sizes.stride(a, self.k.domain.len() - 1)
    }

    /// Access `a`'s inner stride (a size argument) into [`T31`], for an
    /// element-strided `ldx`/`stx`.
    fn cstride(&self, b: &mut ProgramBuilder, a: usize) -> Val {
        b.ldarg(T31, self.inner_arg(a));
        T31.into()
    }

    /// The register holding access `a`'s row offset.
    pub(super) fn base_reg(&self, a: usize) -> Result<Reg, CodegenError> {
        self.reg(regs::FIRST_BASE + a)
    }

    /// The register holding param `p`.
    pub(super) fn param_reg(&self, p: usize) -> Result<Reg, CodegenError> {
        self.reg(regs::FIRST_BASE + self.access_list.len() + p)
    }

    /// Element slot `i` (a scalar load, a stage's row value, a partial).
    pub(super) fn elem_addr(&self, i: usize) -> Addr {
        Addr::from(self.ub_base + self.elem_base + i * 32)
    }

    fn slot_addr(&self, slot: usize) -> Addr {
        Addr::from(self.ub_base + slot * self.slot_bytes)
    }

    /// Where expression `e` lives in this tile.
    fn src(&self, plan: &TilePlan<'_>, e: ExprId) -> Result<Addr, CodegenError> {
        match plan.slot_of.get(e.0 as usize) {
            Some(Some(sl)) => Ok(self.slot_addr(*sl)),
            _ => Err(internal(
                self.k,
                format!("expression {} has no UB slot", e.0),
            )),
        }
    }

    fn gm_of(&self, b: &ProgramBuilder, buf: BufId) -> Result<Gm, CodegenError> {
        self.buffers
            .iter()
            .position(|&x| x == buf)
            .and_then(|i| b.gm_at(i))
            .ok_or_else(|| internal(self.k, format!("buffer {} is not a GM argument", buf.0)))
    }

    /// Assigns each expression of `events` a UB slot (one of `slots`),
    /// reusing a slot after its last use; loads get theirs first, since
    /// they are all issued at the start of the tile.
    pub(super) fn plan<'e>(
        &self,
        events: &'e [Event],
        last_use: &[usize],
        slots: usize,
    ) -> Result<TilePlan<'e>, CodegenError> {
        let k = self.k;
        // Gathers are MTE2 reads too, issued with the loads.
        let is_load = |e: ExprId| matches!(k.expr(e).expr, Expr::Load(_) | Expr::Gather { .. });
        let mut alloc = SlotAlloc {
            last_use,
            slot_of: vec![None; k.exprs.len()],
            free: (0..slots).rev().collect(),
            expiring: Vec::new(),
        };
        for ev in events {
            if let Event::Eval(e) = *ev {
                if is_load(e) {
                    alloc
                        .assign(e, 0)
                        .ok_or_else(|| unsupported(k, "more loads than UB slots"))?;
                }
            }
        }
        for (i, ev) in events.iter().enumerate() {
            alloc.expire_before(i);
            if let Event::Eval(e) = *ev {
                if alloc.slot_of[e.0 as usize].is_none() {
                    alloc
                        .assign(e, i)
                        .ok_or_else(|| unsupported(k, "an expression DAG wider than UB"))?;
                }
            }
        }
        let slot_of = alloc.slot_of;
        Ok(TilePlan { events, slot_of })
    }

    /// One tile: its loads, a flag (event `ev`) to V, its vector ops, a
    /// flag to MTE3, its stores.
    pub(super) fn emit_tile(
        &self,
        b: &mut ProgramBuilder,
        plan: &TilePlan<'_>,
        ev: u8,
    ) -> Result<(), CodegenError> {
        self.emit_loads(b, plan)?;
        b.setf(Pipe::Mte2, Pipe::V, ev)
            .waitf(Pipe::Mte2, Pipe::V, ev);
        self.emit_vector(b, plan)?;
        b.setf(Pipe::V, Pipe::Mte3, ev)
            .waitf(Pipe::V, Pipe::Mte3, ev);
        self.emit_stores(b, plan)
    }

    /// The GM element offset operand of access `a` at this tile, with the
    /// instructions that compute it into `scratch` (an inner stride other
    /// than 0 and 1 is a size argument).
    fn offset(
        &self,
        b: &mut ProgramBuilder,
        a: usize,
        inner: i64,
        scratch: Reg,
    ) -> Result<Val, CodegenError> {
        Ok(match (self.flat, self.long, inner) {
            (true, _, 0) => self.base_reg(a)?.into(),
            (true, _, 1) => {
                b.add(scratch, self.base_reg(a)?, UNIT);
                scratch.into()
            }
            (true, _, _) => {
                b.ldarg(scratch, self.inner_arg(a))
                    .mul(scratch, UNIT, scratch)
                    .add(scratch, scratch, self.base_reg(a)?);
                scratch.into()
            }
            (false, false, _) | (false, true, 0) => self.base_reg(a)?.into(),
            (false, true, 1) => {
                b.add(scratch, self.base_reg(a)?, CHUNK);
                scratch.into()
            }
            (false, true, _) => {
                b.ldarg(scratch, self.inner_arg(a))
                    .mul(scratch, CHUNK, scratch)
                    .add(scratch, scratch, self.base_reg(a)?);
                scratch.into()
            }
        })
    }

    /// The loads (MTE2): a tile per load, or one element for a load that
    /// is constant along the row (broadcast by [`Self::emit_vector`]).
    fn emit_loads(&self, b: &mut ProgramBuilder, plan: &TilePlan<'_>) -> Result<(), CodegenError> {
        let k = self.k;
        for ev in plan.events {
            let Event::Eval(e) = *ev else { continue };
            let node = k.expr(e);
            if let Expr::Gather { .. } = node.expr {
                self.emit_gather(b, plan, e)?;
                continue;
            }
            let Expr::Load(l) = node.expr else { continue };
            let (dt, dst) = (node.dtype, self.src(plan, e)?);
            let acc = &k.loads[l as usize];
            let gm = self.gm_of(b, acc.buf)?;
            let inner = acc.inner_stride();
            let off = self.offset(b, l as usize, inner, T3)?;
            // Loads read only the valid columns (none in a zero-column
            // row), whatever width V computes.
            match inner {
                1 => b.ld(dt, self.shape, 1, VALID, dst, gm, off, 0),
                // A transposed or strided view: element-strided load.
                s if s != 0 => {
                    let cs = self.cstride(b, l as usize);
                    b.ldx(dt, self.shape, 1, VALID, dst, gm, off, 0, cs)
                }
                _ => {
                    let one = Shape::new(1, 1);
                    b.ld(dt, one, 1, 1, self.elem_addr(l as usize), gm, off, 0)
                }
            };
        }
        Ok(())
    }

    /// A gather (MTE2, after its index's load in the same pipe): `ldg`
    /// reads each column's element at its index, which the instruction
    /// checks against the axis length (a fault, never a stray read).
    fn emit_gather(
        &self,
        b: &mut ProgramBuilder,
        plan: &TilePlan<'_>,
        e: ExprId,
    ) -> Result<(), CodegenError> {
        let k = self.k;
        let node = k.expr(e);
        let Expr::Gather {
            load,
            index,
            stride,
            len,
        } = node.expr
        else {
            return Err(internal(k, "emit_gather of a non-gather"));
        };
        let Expr::Load(il) = k.expr(index).expr else {
            return Err(internal(k, "a gather index that is not a load"));
        };
        let (dt, dst) = (node.dtype, self.src(plan, e)?);
        let acc = &k.loads[load as usize];
        let gm = self.gm_of(b, acc.buf)?;
        let inner = acc.inner_stride();
        let off = self.offset(b, load as usize, inner, T3)?;
        let cs: Val = match inner {
            0 | 1 => Val::from(inner),
            _ => self.cstride(b, load as usize),
        };
        // An index constant along the row sits in its load's element slot.
        let (idx, istride) = if k.loads[il as usize].inner_stride() == 0 {
            (self.elem_addr(il as usize), 0)
        } else {
            (self.src(plan, index)?, 1)
        };
        let it = k.expr(index).dtype;
        b.ldg(
            dt, self.shape, 1, VALID, dst, gm, off, cs, it, idx, istride, stride, len,
        );
        Ok(())
    }

    /// The vector ops (V): each expression in event order, then each
    /// reduction's row reduce.
    fn emit_vector(&self, b: &mut ProgramBuilder, plan: &TilePlan<'_>) -> Result<(), CodegenError> {
        for ev in plan.events {
            match *ev {
                Event::Eval(e) => self.emit_expr(b, plan, e)?,
                Event::Stage(si) => {
                    if let Stage::Reduce { op, value } = &self.k.stages[si] {
                        self.emit_reduce(b, plan, si, *op, *value)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Expression `e` into its slot.
    fn emit_expr(
        &self,
        b: &mut ProgramBuilder,
        plan: &TilePlan<'_>,
        e: ExprId,
    ) -> Result<(), CodegenError> {
        let k = self.k;
        let node = k.expr(e);
        let (dt, sh, vcv) = (node.dtype, self.shape, self.vcv);
        let dst = self.src(plan, e)?;
        match node.expr {
            // Read by `ldg` on MTE2.
            Expr::Gather { .. } => {}
            Expr::Load(l) => {
                if k.loads[l as usize].inner_stride() == 0 {
                    b.vbcast(dt, sh, 1, VALID, dst, self.elem_addr(l as usize));
                }
            }
            Expr::Param(p) => {
                b.vdupr(dt, sh, 1, vcv, dst, self.param_reg(p as usize)?);
            }
            Expr::Lit(l) => {
                let v = match l {
                    Lit::Float(f) => f,
                    other => other.as_f64(),
                };
                b.vdup(dt, sh, 1, vcv, dst, v);
            }
            Expr::Unary(u, a) => unary(b, u, dt, sh, vcv, dst, self.src(plan, a)?),
            Expr::Binary(op, x, y) => {
                let (x, y) = (self.src(plan, x)?, self.src(plan, y)?);
                binary(b, op, dt, sh, 1.into(), vcv, dst, x, y);
            }
            Expr::Compare(c, x, y) => {
                let xdt = k.expr(x).dtype;
                let (x, y) = (self.src(plan, x)?, self.src(plan, y)?);
                b.vcmp(xdt, sh, 1, vcv, cond(c), dst, x, y);
            }
            Expr::Select(c, x, y) => {
                let (c, x, y) = (self.src(plan, c)?, self.src(plan, x)?, self.src(plan, y)?);
                b.vsel(dt, sh, 1, vcv, dst, c, x, y);
            }
            Expr::Cast(x) => {
                let from = k.expr(x).dtype;
                b.vcast(dt, from, sh, 1, vcv, dst, self.src(plan, x)?);
            }
            // UB holds bytes: a move as the operand's dtype leaves its bits
            // for this node's dtype (of the same size) to read.
            Expr::Bitcast(x) => {
                let from = k.expr(x).dtype;
                b.vmov(from, sh, 1, vcv, dst, self.src(plan, x)?);
            }
            Expr::Row(st) => {
                let row = self.elem_addr(k.loads.len() + st as usize);
                b.vbrow(dt, sh, 1, vcv, dst, row);
            }
        }
        Ok(())
    }

    /// Stage `si`, reducing `value`'s row: into the stage's element slot,
    /// or as this chunk's partial (folded into the slot for long rows, or
    /// stored to GM by [`Self::emit_stores`] for split rows).
    fn emit_reduce(
        &self,
        b: &mut ProgramBuilder,
        plan: &TilePlan<'_>,
        si: usize,
        op: ReduceOp,
        value: ExprId,
    ) -> Result<(), CodegenError> {
        let k = self.k;
        let dt = k.expr(value).dtype;
        let src = self.src(plan, value)?;
        let acc = self.elem_addr(k.loads.len() + si);
        let tmp = self.elem_addr(k.loads.len() + k.stages.len());
        let split = matches!(self.partials.get(si), Some(Some(_)));
        if split {
            reduce_row(b, op, dt, self.shape, VALID.into(), tmp, src);
        } else if self.long {
            reduce_row(b, op, dt, self.shape, VALID.into(), tmp, src);
            let one = Shape::new(1, 1);
            binary(b, combine(op), dt, one, 1.into(), 1.into(), acc, acc, tmp);
        } else {
            reduce_row(b, op, dt, self.shape, VALID.into(), acc, src);
        }
        Ok(())
    }

    /// The stores (MTE3): split rows' partials and the store stages.
    fn emit_stores(&self, b: &mut ProgramBuilder, plan: &TilePlan<'_>) -> Result<(), CodegenError> {
        let k = self.k;
        for ev in plan.events {
            let Event::Stage(si) = *ev else { continue };
            match &k.stages[si] {
                Stage::Reduce { value, .. } => {
                    if let Some(Some(gm)) = self.partials.get(si) {
                        let dt = k.expr(*value).dtype;
                        let tmp = self.elem_addr(k.loads.len() + k.stages.len());
                        b.st(dt, Shape::new(1, 1), 1, 1, *gm, PARTIAL, 0, tmp);
                    }
                }
                Stage::Store { access, value } => self.emit_store(b, plan, access, *value)?,
            }
        }
        Ok(())
    }

    /// A store stage: `value` to `access` at this tile.
    fn emit_store(
        &self,
        b: &mut ProgramBuilder,
        plan: &TilePlan<'_>,
        access: &Access,
        value: ExprId,
    ) -> Result<(), CodegenError> {
        let dt = self.k.expr(value).dtype;
        let src = self.src(plan, value)?;
        let gm = self.gm_of(b, access.buf)?;
        let a = self
            .access_list
            .iter()
            .position(|x| std::ptr::eq(*x, access))
            .ok_or_else(|| internal(self.k, "a store whose access is not listed"))?;
        let inner = access.inner_stride();
        let off = self.offset(b, a, inner, T4)?;
        match inner {
            0 => b.st(dt, self.shape, 1, 1, gm, off, 0, src),
            1 => b.st(dt, self.shape, 1, VALID, gm, off, 0, src),
            // A transposed or strided destination.
            _ => {
                let cs = self.cstride(b, a);
                b.stx(dt, self.shape, 1, VALID, gm, off, 0, cs, src)
            }
        };
        Ok(())
    }
}

fn cond(c: CmpOp) -> Cond {
    match c {
        CmpOp::Lt => Cond::Lt,
        CmpOp::Gt => Cond::Gt,
        CmpOp::Le => Cond::Le,
        CmpOp::Ge => Cond::Ge,
        CmpOp::Eq => Cond::Eq,
    }
}

/// `dst = u(a)` over the valid `1 x vcols` region.
fn unary(b: &mut ProgramBuilder, u: UnaryOp, dt: DType, sh: Shape, vcols: Val, dst: Addr, a: Addr) {
    b.vunary(dt, sh, 1, vcols, dst, a, u);
}

/// `dst = op(x, y)` over the valid `vrows x vcols` region.
#[allow(clippy::too_many_arguments)]
pub(super) fn binary(
    b: &mut ProgramBuilder,
    op: BinaryOp,
    dt: DType,
    sh: Shape,
    vrows: Val,
    vcols: Val,
    dst: Addr,
    x: Addr,
    y: Addr,
) {
    match op {
        BinaryOp::Add => b.vadd(dt, sh, vrows, vcols, dst, x, y),
        BinaryOp::Sub => b.vsub(dt, sh, vrows, vcols, dst, x, y),
        BinaryOp::Mul => b.vmul(dt, sh, vrows, vcols, dst, x, y),
        BinaryOp::Div => b.vdiv(dt, sh, vrows, vcols, dst, x, y),
        BinaryOp::Max => b.vmax(dt, sh, vrows, vcols, dst, x, y),
        BinaryOp::Min => b.vmin(dt, sh, vrows, vcols, dst, x, y),
        BinaryOp::Pow => b.vpow(dt, sh, vrows, vcols, dst, x, y),
        BinaryOp::Rem => b.vrem(dt, sh, vrows, vcols, dst, x, y),
        BinaryOp::BitAnd => b.vand(dt, sh, vrows, vcols, dst, x, y),
        BinaryOp::BitOr => b.vor(dt, sh, vrows, vcols, dst, x, y),
        BinaryOp::BitXor => b.vxor(dt, sh, vrows, vcols, dst, x, y),
        BinaryOp::Shl => b.vshl(dt, sh, vrows, vcols, dst, x, y),
        BinaryOp::Shr => b.vshr(dt, sh, vrows, vcols, dst, x, y),
    };
}

/// The binary op that folds two partials of a reduction.
fn combine(op: ReduceOp) -> BinaryOp {
    match op {
        ReduceOp::Sum => BinaryOp::Add,
        ReduceOp::Max => BinaryOp::Max,
        ReduceOp::Min => BinaryOp::Min,
        ReduceOp::Prod => BinaryOp::Mul,
    }
}

/// `dst[0] = op` over the valid columns of the one-row tile `src`.
pub(super) fn reduce_row(
    b: &mut ProgramBuilder,
    op: ReduceOp,
    dt: DType,
    sh: Shape,
    vcols: Val,
    dst: Addr,
    src: Addr,
) {
    match op {
        ReduceOp::Sum => b.vrsum(dt, sh, 1, vcols, dst, src),
        ReduceOp::Max => b.vrmax(dt, sh, 1, vcols, dst, src),
        ReduceOp::Min => b.vrmin(dt, sh, 1, vcols, dst, src),
        ReduceOp::Prod => b.vrprod(dt, sh, 1, vcols, dst, src),
    };
}
