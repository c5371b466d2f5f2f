//! Blocked inner loops: f32 exp/log/tanh/sigmoid/gelu, and division by a
//! row-uniform value, through the 8- or 16-lane helpers (`native::block_math`)
//! instead of inline 4-lane code (`vdivps` does 8 lanes at the 4-lane rate).
//!
//! A vector stage loop whose value needs such ops runs in blocks of
//! `MATH_BLOCK` elements (an f32 sum's blocks, whose accumulators are made
//! after the block's helper calls: calls clobber every vector register).
//! Per block, for each op in operand-first order, a loop computes the op's
//! operand into a stack buffer and one helper call computes the op; then
//! the stage's own loop runs, reading those values from their buffers
//! (`eval` treats them as known, like filled scratch, so their operands are
//! not emitted again).
//!
//! Shortcuts, each a loop fewer: the helper reads its operand in place when
//! it is a contiguous f32 load or a filled row-scratch value, or (unary
//! ops) such a load plus or minus a row-uniform value (`exp(x - max)`: the
//! unary helpers add their scalar first, -0.0 when there is none, as
//! `x + -0.0 == x` for every x); a value kept in row scratch is written
//! straight there; and a store stage whose value is the op itself has the
//! helper write the output (`y = exp(x)` is one call per block, no loop).
//! Only values that vary along the row qualify: a row-uniform one is a
//! single scalar op Cranelift hoists. A helper re-reading a load's row in
//! place prefetches the next row (`prefetch_distance`), a row max/min
//! over memory folds through a helper (`fold_helper`), and the helper
//! computing an f32 sum's own value also adds it up into the sum's sixteen
//! accumulator lanes as it goes (`block_sum_lanes`: softmax's
//! `sum(exp(x - max))` needs no second pass over the block).
//!
//! A store stage that streams its output (`CodegenOptions::stream_stores`)
//! runs in the same blocks even without helper ops: each block is computed
//! into a stack buffer and the `stream` helper copies it out past the
//! caches (`stream_start`, `stream_finish`).
//!
//! The helpers compute exactly what the inline code does, so blocking
//! changes speed, not results.

use super::{unsupported, Inner, Lowerer, Mode, ACCS, LANES};
use crate::host::native::MATH_BLOCK;
use crate::CodegenError;
use cranelift_codegen::ir::{types, InstBuilder, StackSlotData, StackSlotKind, Value};
use std::collections::HashMap;
use tilejit_ir::kernel::{Expr, ExprId, Stage};
use tilejit_ir::ops::{MathFn, UnaryHost};
use tilejit_ir::{BinaryOp, DType, ReduceOp, UnaryOp};

/// Ops per stage loop that go through block buffers (the rest stay
/// inline): bounds the block buffers at 16 KiB, 20 KiB with a streaming
/// store's buffer (frames are probed page by page).
const MAX_BUFFERS: usize = 4;

/// An op a helper computes: the op's expression, its (vector) operand,
/// the helper's op name (its `Libcalls` block helper), and for a division the row-uniform divisor (the helper's
/// scalar argument, which for the unary helpers is the bias).
pub(super) type HelperOp = (ExprId, ExprId, &'static str, Option<ExprId>);

/// Where a helper reads its operand in place.
#[derive(Copy, Clone)]
enum Source {
    /// Through load access `n` (a contiguous f32 row).
    Load(usize),
    /// Row scratch slot `n` (filled by an earlier stage).
    Scratch(usize),
}

/// The block a blocked loop is emitting.
pub(super) struct Block {
    /// Values a helper has computed for this block, each with its buffer's
    /// base rebased to the row (`base + 4j` is element `j`; in row scratch
    /// that base is the scratch row itself).
    ready: Vec<(ExprId, Value)>,
    /// Where the helper of the block's root left the sixteen lane sums of
    /// its whole groups of 16 (see [`Lowerer::helper_phase`]'s `sum`), for
    /// the f32 sum reducing that root.
    sum_lanes: Option<Value>,
}

/// The helper name of a unary op that has one.
fn helper_name(u: UnaryOp) -> Option<&'static str> {
    let UnaryHost::Math { f32, .. } = u.def().host else {
        return None;
    };
    match f32 {
        MathFn::Exp => Some("exp"),
        MathFn::Log => Some("log"),
        MathFn::Tanh => Some("tanh"),
        MathFn::Sigmoid => Some("sigmoid"),
        MathFn::Gelu => Some("gelu"),
        MathFn::Sin | MathFn::Cos | MathFn::Erf => None,
    }
}

impl Lowerer<'_, '_> {
    /// The row-rebased base of the buffer holding `e` in the current block,
    /// if a helper computed it.
    pub(super) fn block_value(&self, e: ExprId) -> Option<Value> {
        let block = self.block.as_ref()?;
        block.ready.iter().find(|(x, _)| *x == e).map(|&(_, p)| p)
    }

    /// `buf - 4 start`: a buffer holding elements `start..` rebased so that
    /// element `j` sits at `base + 4j`, addressed like any row access.
    fn rebase(&mut self, buf: Value, start: Value) -> Value {
        let off = self.b.ins().ishl_imm_s(start, 2);
        self.b.ins().isub(buf, off)
    }

    /// Address of element `j` of a rebased block buffer.
    fn block_addr(&mut self, base: Value, j: Value) -> Value {
        let off = self.b.ins().ishl_imm_s(j, 2);
        self.b.ins().iadd(base, off)
    }

    /// Loads element `j` (four from `j` in vector mode) of a rebased block
    /// buffer.
    pub(super) fn load_block_value(&mut self, base: Value, j: Value, mode: Mode) -> Value {
        let p = self.block_addr(base, j);
        let ty = match mode {
            Mode::Scalar => types::F32,
            Mode::Vector => types::F32X4,
        };
        self.b.ins().load(ty, Self::flags(), p, 0)
    }

    /// The f32 ops a helper can compute for a loop over `root` (vector
    /// loops only, outside any open block), operands first (expression ids
    /// are topological), at most [`MAX_BUFFERS`].
    pub(super) fn block_ops(&self, root: ExprId, vector: bool) -> Vec<HelperOp> {
        if !vector || self.block.is_some() || !self.libs.has_blocks() {
            return Vec::new();
        }
        let k = self.k;
        let filled = |e: ExprId| self.filled[e.0 as usize];
        super::reachable_until(k, root, filled)
            .into_iter()
            .filter(|&e| !filled(e))
            .filter_map(|e| match k.expr(e).expr {
                // A value the same all along the row is one scalar op that
                // Cranelift hoists; a helper would compute it per element.
                _ if k.expr(e).dtype != DType::F32 || !self.varies(e) => None,
                Expr::Unary(u, x) => {
                    let op = helper_name(u).filter(|op| self.libs.has_block(op))?;
                    Some((e, x, op, None))
                }
                // Division is 8 lanes per `vdivps` at the 4-lane rate.
                Expr::Binary(BinaryOp::Div, x, d) if !self.varies(d) => {
                    self.libs.has_block("div").then_some((e, x, "div", Some(d)))
                }
                _ => None,
            })
            .take(MAX_BUFFERS)
            .collect()
    }

    /// Whether access `a` reads or writes contiguous f32 elements, so a
    /// helper can work on the buffer's row directly.
    fn contiguous_f32(&self, a: usize) -> bool {
        matches!(self.accesses[a].inner, Inner::One)
            && (self.dtype_of_buf)(self.layout.access_buf[a]) == DType::F32
    }

    /// Whether `e` can differ along the row: it depends on a load that
    /// moves along the inner dim or on a row-scratch value. A value that
    /// cannot is evaluated once per block, as a scalar.
    fn varies(&self, e: ExprId) -> bool {
        super::reachable(self.k, e)
            .into_iter()
            .any(|x| match self.k.expr(x).expr {
                Expr::Load(l) | Expr::Gather { load: l, .. } => {
                    !matches!(self.accesses[l as usize].inner, Inner::Zero)
                }
                _ => self.k.scratch.contains(&x),
            })
    }

    /// How a helper can read operand `x` straight from memory: `x` is a
    /// contiguous f32 load or a filled row-scratch value, or (`with_bias`)
    /// such a load plus or minus a value the same all along the row
    /// (returned too, with true for minus: `x - s` is exactly `x + (-s)`,
    /// and addition commutes).
    fn direct_source(
        &self,
        x: ExprId,
        with_bias: bool,
    ) -> Option<(Source, Option<(ExprId, bool)>)> {
        let k = self.k;
        let plain = |e: ExprId| match k.expr(e).expr {
            Expr::Load(l) if self.contiguous_f32(l as usize) => Some(Source::Load(l as usize)),
            _ if k.expr(e).dtype == DType::F32 && self.filled[e.0 as usize] => {
                let slot = k.scratch.iter().position(|&s| s == e)?;
                Some(Source::Scratch(slot))
            }
            _ => None,
        };
        if let Some(src) = plain(x) {
            return Some((src, None));
        }
        if !with_bias || k.expr(x).dtype != DType::F32 {
            return None;
        }
        let uniform = |e: ExprId| !self.varies(e);
        match k.expr(x).expr {
            Expr::Binary(BinaryOp::Add, a, b) if uniform(b) => Some((plain(a)?, Some((b, false)))),
            Expr::Binary(BinaryOp::Add, a, b) if uniform(a) => Some((plain(b)?, Some((a, false)))),
            Expr::Binary(BinaryOp::Sub, a, b) if uniform(b) => Some((plain(a)?, Some((b, true)))),
            _ => None,
        }
    }

    /// Opens the block `start..end` (at most `MATH_BLOCK` long): for each
    /// op, its operand into a buffer (unless the helper can read it in
    /// place) and one helper call; `eval` then reads the results until
    /// `self.block` is cleared. With `direct_store`, the last op (the
    /// stage's value) is written straight through that access. With `sum`
    /// (an f32 sum of `root`), the helper computing `root` also adds up its
    /// results lane by lane as the sum's vector loop would, so that loop
    /// need not run ([`Lowerer::block_sum_lanes`]).
    pub(super) fn helper_phase(
        &mut self,
        ops: &[HelperOp],
        root: ExprId,
        direct_store: Option<usize>,
        sum: bool,
        start: Value,
        end: Value,
    ) -> Result<(), CodegenError> {
        while self.block_slots.len() < ops.len() {
            let bytes = (MATH_BLOCK * 4) as u32;
            let slot = StackSlotData::new(StackSlotKind::ExplicitSlot, bytes, 5);
            let slot = self.b.create_sized_stack_slot(slot);
            self.block_slots.push(slot);
        }
        self.block = Some(Block {
            ready: Vec::new(),
            sum_lanes: None,
        });
        let zero = self.iconst(0);
        let n = self.b.ins().isub(end, start);
        for (i, &(e, x, op, divisor)) in ops.iter().enumerate() {
            let buf = self.b.ins().stack_addr(self.ptr, self.block_slots[i], 0);
            let base = self.rebase(buf, start);
            // The scalar argument: the divisor, or the bias (-0.0: none).
            let mut scalar = match divisor {
                Some(d) => self.eval(d, zero, Mode::Scalar, &mut HashMap::new(), false)?,
                None => self.b.ins().f32const(-0.0),
            };
            let mut prefetch = zero;
            let src = match self.direct_source(x, divisor.is_none()) {
                Some((src, add)) => {
                    if let Some((v, negate)) = add {
                        let v = self.eval(v, zero, Mode::Scalar, &mut HashMap::new(), false)?;
                        scalar = if negate { self.b.ins().fneg(v) } else { v };
                    }
                    match src {
                        Source::Load(l) => {
                            prefetch = self.prefetch_distance(l);
                            self.addr(l, start)
                        }
                        Source::Scratch(slot) => self.scratch_addr(slot, x, start),
                    }
                }
                None => {
                    self.inner_loop(start, end, true, 4, &mut |s, j, mode| {
                        let mut cache = HashMap::new();
                        let v = s.eval(x, j, mode, &mut cache, true)?;
                        let p = s.block_addr(base, j);
                        s.b.ins().store(Self::flags(), v, p, 0);
                        Ok(())
                    })?;
                    buf
                }
            };
            // A value kept in row scratch goes straight there.
            let slot = self.k.scratch.iter().position(|&x| x == e);
            let (dst, kept) = match (direct_store, slot) {
                (Some(a), _) if e == root => (self.addr(a, start), base),
                (_, Some(slot)) => (self.scratch_addr(slot, e, start), self.scratch[slot]),
                _ => (buf, base),
            };
            let lanes = (sum && e == root).then(|| self.lanes_slot());
            let sum_arg = lanes.unwrap_or(zero);
            let f = self
                .block_fn(op)
                .ok_or_else(|| unsupported(self.k, format!("block helper {op}")))?;
            self.b
                .ins()
                .call(f, &[src, dst, n, scalar, prefetch, sum_arg]);
            if let Some(block) = self.block.as_mut() {
                block.ready.push((e, kept));
                block.sum_lanes = block.sum_lanes.or(lanes);
            }
        }
        Ok(())
    }

    /// How far ahead a helper reading load access `l` in place prefetches:
    /// to the next row when an earlier stage of this row already read `l`
    /// (this pass finds the row in cache and computes, so the next row can
    /// stream in meanwhile), else not at
    /// all (a first pass is the stream the hardware prefetcher follows).
    fn prefetch_distance(&mut self, l: usize) -> Value {
        let k = self.k;
        let reread = k.stages[..self.stage].iter().any(|stage| {
            let value = match stage {
                Stage::Reduce { value, .. } | Stage::Store { value, .. } => *value,
            };
            super::reachable(k, value)
                .into_iter()
                .any(|e| matches!(k.expr(e).expr, Expr::Load(x) if x as usize == l))
        });
        match (reread, self.accesses[l].row_step) {
            (true, Some(step)) => step,
            _ => self.iconst(0),
        }
    }

    /// For a max/min of `value` over `j0..j1` whose f32 row is already in
    /// memory (a contiguous load, filled row scratch, or this block's
    /// helper buffer): calls the fold helper on the part the unrolled
    /// vector loop would cover, and returns where the scalar tail starts
    /// and the address of the sixteen accumulator lanes the helper wrote.
    pub(super) fn fold_helper(
        &mut self,
        op: ReduceOp,
        value: ExprId,
        j0: Value,
        j1: Value,
        ident: Value,
    ) -> Result<Option<(Value, Value)>, CodegenError> {
        let name = match op {
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Sum | ReduceOp::Prod => return Ok(None),
        };
        if !self.libs.has_block(name) || self.k.expr(value).dtype != DType::F32 {
            return Ok(None);
        }
        let src = match (self.block_value(value), self.direct_source(value, false)) {
            (Some(base), _) => self.block_addr(base, j0),
            (None, Some((Source::Load(l), _))) => self.addr(l, j0),
            (None, Some((Source::Scratch(slot), _))) => self.scratch_addr(slot, value, j0),
            (None, None) => return Ok(None),
        };
        let tail = self.lanes_tail(j0, j1);
        let n = self.b.ins().isub(tail, j0);
        let lanes = self.lanes_slot();
        let null = self.iconst(0);
        let f = self
            .block_fn(name)
            .ok_or_else(|| unsupported(self.k, format!("block helper {name}")))?;
        self.b.ins().call(f, &[src, lanes, n, ident, null, null]);
        Ok(Some((tail, lanes)))
    }

    /// For an f32 sum over `j0..j1` of the value whose helper in the open
    /// block added up its results ([`Lowerer::helper_phase`] with `sum`):
    /// where the scalar tail starts and the address of the sixteen
    /// accumulator lanes, as [`Lowerer::fold_helper`] returns them.
    pub(super) fn block_sum_lanes(&mut self, j0: Value, j1: Value) -> Option<(Value, Value)> {
        let lanes = self.block.as_mut()?.sum_lanes.take()?;
        Some((self.lanes_tail(j0, j1), lanes))
    }

    /// Where the scalar tail of a reduce loop over `j0..j1` starts: past the
    /// whole unrolled steps, whose accumulators (ACCS * LANES = 16 lanes,
    /// checked where ACCS is defined) a helper fills instead.
    fn lanes_tail(&mut self, j0: Value, j1: Value) -> Value {
        let step = ACCS as i64 * LANES;
        let n = self.b.ins().isub(j1, j0);
        let n = self.b.ins().band_imm_s(n, !(step - 1));
        self.b.ins().iadd(j0, n)
    }

    /// The address of the kernel's stack buffer for the sixteen lanes of a
    /// reduction's accumulators (ACCS * LANES = 16, checked where ACCS is
    /// defined), which the fold and sum helpers fill.
    fn lanes_slot(&mut self) -> Value {
        let slot = *self.lanes_slot.get_or_insert_with(|| {
            let bytes = (ACCS as i64 * LANES) as u32 * 4;
            let data = StackSlotData::new(StackSlotKind::ExplicitSlot, bytes, 6);
            self.b.create_sized_stack_slot(data)
        });
        self.b.ins().stack_addr(self.ptr, slot, 0)
    }

    /// `inner_loop` over `j0..j1` for a stage whose per-point value is
    /// `root` (stored through access `store`, or reduced), in blocks when
    /// helpers can compute some of its math or the store may stream.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn blocked_loop(
        &mut self,
        root: ExprId,
        store: Option<usize>,
        j0: Value,
        j1: Value,
        vector: bool,
        unroll: i64,
        body: &mut dyn FnMut(&mut Self, Value, Mode) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        let ops = self.block_ops(root, vector);
        let stream = store.filter(|&a| vector && self.can_stream(a));
        if ops.is_empty() && stream.is_none() {
            return self.inner_loop(j0, j1, vector, unroll, body);
        }
        // The helper of the stage's own value writes the output itself, and
        // the stage needs no loop of its own.
        let direct_store = store.filter(|&a| {
            ops.last().is_some_and(|&(e, ..)| e == root)
                && !self.k.scratch.contains(&root)
                && self.contiguous_f32(a)
        });
        let step = MATH_BLOCK as i64;
        let jb = self.b.declare_var(self.ptr);
        self.b.def_var(jb, j0);
        self.counted_loop(jb, j1, step, &mut |s, start| {
            let end = s.b.ins().iadd_imm_s(start, step);
            let end = s.b.ins().smin(end, j1);
            let streaming = stream.map(|a| s.stream_start(a, start));
            if !ops.is_empty() {
                s.helper_phase(&ops, root, direct_store, false, start, end)?;
            }
            let done = match direct_store {
                Some(_) => Ok(()),
                None => s.inner_loop(start, end, vector, unroll, body),
            };
            if let Some(streaming) = streaming {
                s.stream_finish(streaming, start, end);
            }
            s.block = None;
            done
        })
    }

    /// Whether store access `a` streams its output: the options ask for it
    /// (and the helpers include `stream`), the access writes contiguous
    /// f32s, and no load of this kernel reads its buffer (a later stage or
    /// row would otherwise read lines still on their way to memory, and
    /// from memory rather than cache).
    fn can_stream(&self, a: usize) -> bool {
        let lb = self.layout.access_buf[a];
        self.stream
            && self.contiguous_f32(a)
            && !self.layout.access_buf[..self.k.loads.len()].contains(&lb)
    }

    /// Opens a streaming block at `start` for store access `a`: the
    /// access's base points into the stack buffer (rebased so element `j`
    /// of the block lands at `4 (j - start)`), so the stage's stores and a
    /// helper's direct store fill the buffer.
    fn stream_start(&mut self, a: usize, start: Value) -> Streaming {
        let slot = *self.stream_slot.get_or_insert_with(|| {
            let data = StackSlotData::new(StackSlotKind::ExplicitSlot, (MATH_BLOCK * 4) as u32, 5);
            self.b.create_sized_stack_slot(data)
        });
        let buf = self.b.ins().stack_addr(self.ptr, slot, 0);
        let var = self.accesses[a].base;
        let row = self.b.use_var(var);
        let rebased = self.rebase(buf, start);
        self.b.def_var(var, rebased);
        Streaming { a, row, buf }
    }

    /// Closes a streaming block `start..end`: restores the access's base
    /// and has the `stream` helper copy the buffer to the output (the
    /// kernel fences once, before it returns).
    fn stream_finish(&mut self, st: Streaming, start: Value, end: Value) {
        self.b.def_var(self.accesses[st.a].base, st.row);
        let f = self
            .block_fn("stream")
            .expect("a stage streams only when the stream helper is declared");
        let off = self.b.ins().ishl_imm_s(start, 2);
        let dst = self.b.ins().iadd(st.row, off);
        let n = self.b.ins().isub(end, start);
        let (s, zero) = (self.b.ins().f32const(0.0), self.iconst(0));
        self.b.ins().call(f, &[st.buf, dst, n, s, zero, zero]);
    }
}

/// A streaming block [`Lowerer::stream_start`] opened: the store access,
/// its row base and the stack buffer.
struct Streaming {
    a: usize,
    row: Value,
    buf: Value,
}
