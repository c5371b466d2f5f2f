//! Elementwise and row kernels as AIV core functions: the per-tile
//! schedule of expressions and stages, slot liveness, the size class
//! ([`Plan`]) and the loop over a task's range (flat tiles, whole rows, or
//! long rows in column chunks), with row lengths, row offsets and chunk
//! counts computed from the size arguments at run time.

use super::tile::regs::{self, CHUNK, END, T3, T31, T4, UNIT, VALID, VCOLS};
use super::tile::TileCx;
use super::Extent;
use super::{finish, internal, sanitize, unsupported, DeviceKernel, SizeArgs, Units, MAX_FLAT_W};
use crate::CodegenError;
use std::sync::Arc;
use tilejit_device::isa::emit::{Arg, Gm, ProgramBuilder, Shape};
use tilejit_device::isa::{Pipe, Role};
use tilejit_device::{CoreType, DeviceConfig};
use tilejit_ir::kernel::{Access, BufId, Expr, ExprId, Kernel, Stage};
use tilejit_ir::{DType, ReduceOp};

mod split;
use split::{Split, SPLIT_MAX_ROWS};

/// One step of a tile's work, in order.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(super) enum Event {
    Eval(ExprId),
    Stage(usize),
}

/// The order expressions and stages run in, per tile: before each stage,
/// the expressions it needs that have not run yet (operands before users).
pub(super) fn schedule(k: &Kernel) -> Vec<Event> {
    let mut done = vec![false; k.exprs.len()];
    let mut events = Vec::new();
    for (si, stage) in k.stages.iter().enumerate() {
        let root = match stage {
            Stage::Reduce { value, .. } | Stage::Store { value, .. } => *value,
        };
        // Everything `root` needs, found with a worklist, run in arena order.
        let mut need = vec![false; k.exprs.len()];
        let mut work = vec![root];
        while let Some(e) = work.pop() {
            if need[e.0 as usize] || done[e.0 as usize] {
                continue;
            }
            need[e.0 as usize] = true;
            work.extend(k.expr(e).expr.operands());
        }
        for (i, &n) in need.iter().enumerate() {
            if n {
                done[i] = true;
                events.push(Event::Eval(ExprId(i as u32)));
            }
        }
        events.push(Event::Stage(si));
    }
    events
}

/// One pass over a tile: its events, each expression's last use, and the
/// most slots live at once.
type Pass = (Vec<Event>, Vec<usize>, usize);

/// The size class of a vector kernel: the choice the generator makes from
/// its sizes (everything else is read at run time).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// One dimension, no reduction: flat tiles.
    Flat,
    /// Whole rows in UB; `double` where two buffer sets of the widest row
    /// of the class fit.
    Rows {
        /// Two buffer sets.
        double: bool,
    },
    /// Rows longer than UB, in column chunks.
    Long,
    /// A few long rows, split across tasks (partial + combine).
    Split,
}

/// The plan class of a kernel without a matmul (see [`Plan`]).
pub(crate) fn plan(k: &Kernel, cfg: &DeviceConfig) -> Result<Plan, CodegenError> {
    Ok(layout(k, cfg)?.plan)
}

/// How a vector kernel's tiles sit in UB and run.
pub(super) struct Layout {
    plan: Plan,
    flat: bool,
    /// Rows too long for UB, processed in column chunks.
    long: bool,
    /// Split long rows: the most column chunks a row may have (the
    /// combine's tile width).
    pub(super) max_chunks: usize,
    /// Tile width in elements.
    w: usize,
    /// Tile slots per buffer set.
    peak: usize,
    /// One pass, or one per stage for long rows.
    passes: Vec<Pass>,
    /// Two buffer sets, so loads, vector ops and stores overlap.
    double: bool,
    slot_bytes: usize,
    /// Bytes of one buffer set (where the second starts).
    set_bytes: usize,
    n_params: usize,
}

/// UB bytes of tile slots and element slots.
struct Sizes {
    /// The widest dtype's bytes.
    max_size: usize,
    /// Element slots: one per load (scalar broadcasts), one per stage (row
    /// values / accumulators), one for a chunk's partial reduction.
    elem_bytes: usize,
    ub: usize,
}

impl Sizes {
    fn new(k: &Kernel, cfg: &DeviceConfig) -> Sizes {
        let max_size = k.exprs.iter().map(|n| n.dtype.size_bytes()).max();
        Sizes {
            max_size: max_size.unwrap_or(4).max(1),
            elem_bytes: (k.loads.len() + k.stages.len() + 3) * 32,
            ub: cfg.ub_bytes as usize,
        }
    }

    fn slot(&self, w: usize) -> usize {
        (w * self.max_size).next_multiple_of(32)
    }

    fn fits(&self, w: usize, peak: usize) -> bool {
        peak.max(1) * self.slot(w) + self.elem_bytes <= self.ub
    }

    fn set(&self, w: usize, peak: usize) -> usize {
        (peak * self.slot(w) + self.elem_bytes).next_multiple_of(32)
    }

    /// The widest power-of-two tile (at least 8, at most
    /// [`MAX_FLAT_W`]) for `peak` live slots.
    fn widest(&self, peak: usize) -> usize {
        let mut w = MAX_FLAT_W;
        while w > 8 && !self.fits(w, peak) {
            w /= 2;
        }
        w
    }
}

/// The largest `w` in `1..=u16::MAX` with `ok(w)` (a monotone predicate:
/// true up to some width), if any.
fn largest(ok: impl Fn(usize) -> bool) -> Option<usize> {
    if !ok(1) {
        return None;
    }
    let (mut lo, mut hi) = (1usize, u16::MAX as usize);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}

fn layout(k: &Kernel, cfg: &DeviceConfig) -> Result<Layout, CodegenError> {
    let (flat, cols) = (k.is_flat(), k.cols());
    let sz = Sizes::new(k, cfg);
    let all = schedule(k);
    let (all_last, all_peak) = liveness(k, &all);
    // Long rows: a row that does not fit UB is processed in column chunks,
    // one pass per stage (reductions accumulate over the chunks). The
    // widest row that fits bounds the whole-row class.
    let whole_max = largest(|w| sz.fits(w, all_peak));
    let long = !flat && whole_max.is_none_or(|m| cols.max(1) > m);
    let passes: Vec<Pass> = if long {
        (0..k.stages.len())
            .map(|si| {
                let ev = schedule_stage(k, si);
                let (lu, pk) = liveness(k, &ev);
                (ev, lu, pk)
            })
            .collect()
    } else {
        vec![(all, all_last, all_peak)]
    };
    let peak = passes.iter().map(|p| p.2).max().unwrap_or(1).max(1);
    // Whole rows: the row class's widest row, or where two buffer sets of
    // a narrower one fit and this row does too, that one (double
    // buffered).
    let ub = sz.ub;
    let whole_double = largest(|w| 2 * sz.set(w, peak) <= ub);
    let row_double = whole_double.filter(|&d| cols.max(1) <= d);
    let w = if flat || long {
        sz.widest(peak)
    } else {
        row_double.or(whole_max).unwrap_or(1)
    };
    if !sz.fits(w, peak) {
        return Err(unsupported(
            k,
            format!(
                "{peak} live tiles of {w} elements (more than the {}-byte UB holds)",
                sz.ub
            ),
        ));
    }
    let (w, double) = if flat || long {
        double_buffering(&sz, flat, long, w, peak)
    } else {
        (w, row_double.is_some())
    };
    // A few long rows: split each row's columns across tasks when the
    // combine's tile of one partial per chunk fits UB.
    let max_chunks = largest(|n| (n * 8).next_multiple_of(32) + 64 <= ub).unwrap_or(0);
    let split = long && k.rows() <= SPLIT_MAX_ROWS && cols.div_ceil(w) <= max_chunks;
    let plan = match (flat, long, split) {
        (true, _, _) => Plan::Flat,
        (_, true, true) => Plan::Split,
        (_, true, false) => Plan::Long,
        _ => Plan::Rows { double },
    };
    let n_params = k.exprs.iter().filter_map(|n| match n.expr {
        Expr::Param(p) => Some(p as usize + 1),
        _ => None,
    });
    Ok(Layout {
        plan,
        flat,
        long,
        max_chunks,
        w,
        peak,
        passes,
        double,
        slot_bytes: sz.slot(w),
        set_bytes: sz.set(w, peak),
        n_params: n_params.max().unwrap_or(0),
    })
}

/// Double buffering (flat tiles; whole rows decide in [`layout`]): a
/// second set of slots, so that MTE2 loads tile i+1 while V computes tile
/// i and MTE3 stores tile i-1. A flat kernel halves its tile width, down
/// to 256 elements, to make room. Returns the width and whether to.
fn double_buffering(sz: &Sizes, flat: bool, long: bool, w: usize, peak: usize) -> (usize, bool) {
    if long || !flat {
        (w, false)
    } else {
        let mut d = w;
        while d > 256 && 2 * sz.set(d, peak) > sz.ub {
            d /= 2;
        }
        if 2 * sz.set(d, peak) <= sz.ub {
            (d, true)
        } else {
            (w, false)
        }
    }
}

fn check_store_dtypes(k: &Kernel, buf_dtype: &dyn Fn(BufId) -> DType) -> Result<(), CodegenError> {
    for st in &k.stages {
        if let Stage::Store { access, value } = st {
            if k.expr(*value).dtype != buf_dtype(access.buf) {
                return Err(unsupported(
                    k,
                    "a store whose value dtype differs from its buffer",
                ));
            }
        }
    }
    Ok(())
}

/// `k`'s core functions (one, or per stage plus combines for split
/// rows); `sizes` places the size arguments (those of the kernel before
/// its matmul was taken off, for an epilogue).
pub(super) fn compile_vector(
    k: &Kernel,
    buf_dtype: &dyn Fn(BufId) -> DType,
    cfg: &DeviceConfig,
    sizes: SizeArgs,
) -> Result<Vec<DeviceKernel>, CodegenError> {
    if k.domain.is_empty() {
        return Err(unsupported(k, "a rank-0 domain"));
    }
    let buffers = k.local_buffers();
    check_store_dtypes(k, buf_dtype)?;
    let lay = layout(k, cfg)?;
    let access_list: Vec<&Access> = k.accesses().collect();
    let cx = tile_cx(k, &lay, &buffers, &access_list, sizes)?;
    // A few long rows: split each row's columns across tasks, one function
    // per stage plus a combine function per reduction (partial + combine
    // tasks), so one big reduction uses many cores.
    if lay.plan == Plan::Split {
        let split = Split::new(k, buf_dtype, cfg, &cx, &lay);
        return split.compile();
    }
    let mut b = ProgramBuilder::new(format!("k_{}", sanitize(&k.name)), CoreType::Aiv);
    let decls = declare(&mut b, &buffers, buf_dtype, &[], sizes, lay.n_params);
    b.ldarg(UNIT, decls.lo).ldarg(END, decls.hi);
    load_params(&mut b, &cx, &decls)?;
    let step = if lay.flat { lay.w } else { 1 };
    if lay.double {
        emit_double_buffered(&mut b, &cx, &lay, step)?;
    } else {
        emit_single_buffered(&mut b, &cx, &lay, step)?;
    }
    let (program, asm) = finish(k, b, cfg)?;
    Ok(vec![DeviceKernel {
        name: k.name.clone(),
        program,
        asm,
        buffers,
        core: CoreType::Aiv,
        units: Units::Kernel,
        tile_units: step,
        extra: Arc::new(Vec::new()),
    }])
}

/// The tile context of a kernel laid out as `lay` (first buffer set), once
/// its registers are known to fit.
fn tile_cx<'a>(
    k: &'a Kernel,
    lay: &Layout,
    buffers: &'a [BufId],
    access_list: &'a [&'a Access],
    sizes: SizeArgs,
) -> Result<TileCx<'a>, CodegenError> {
    // r5.. hold the row bases, then the params; r26 up are taken (see
    // `regs`).
    if regs::FIRST_BASE + access_list.len() + lay.n_params > regs::BASES_END {
        return Err(unsupported(
            k,
            format!(
                "{} accesses and {} params (too many registers)",
                access_list.len(),
                lay.n_params
            ),
        ));
    }
    Ok(TileCx {
        k,
        flat: lay.flat,
        long: lay.long,
        shape: Shape::new(1, lay.w),
        // A row kernel over zero columns still computes its row values in
        // column 0, which row-constant stores then write: whole rows
        // compute max(cols, 1) columns.
        vcv: if !lay.flat && !lay.long {
            VCOLS.into()
        } else {
            VALID.into()
        },
        sizes,
        slot_bytes: lay.slot_bytes,
        elem_base: lay.peak * lay.slot_bytes,
        ub_base: 0,
        buffers,
        access_list,
        partials: Vec::new(),
    })
}

/// A vector function's declarations: buffer `i` is GM `b{i}_{buf}`,
/// workspace `j` is GM `w{j}`, then scalar arguments `lo`, `hi` (the
/// task's range), the size arguments `s{i}` ([`SizeArgs`]) and the params
/// `p{i}`.
struct Decls {
    work: Vec<Gm>,
    lo: Arg,
    hi: Arg,
    params: Vec<Arg>,
}

fn declare(
    b: &mut ProgramBuilder,
    buffers: &[BufId],
    buf_dtype: &dyn Fn(BufId) -> DType,
    extra: &[(DType, Extent)],
    sizes: SizeArgs,
    n_params: usize,
) -> Decls {
    for (i, &buf) in buffers.iter().enumerate() {
        b.gm(&format!("b{i}_{}", buf.0), buf_dtype(buf), &[], Role::InOut);
    }
    let work = extra
        .iter()
        .enumerate()
        .map(|(j, &(dt, _))| b.gm(&format!("w{j}"), dt, &[], Role::InOut))
        .collect();
    let (lo, hi) = sizes.declare(b);
    let params = (0..n_params).map(|p| b.arg(&format!("p{p}"), 0)).collect();
    Decls {
        work,
        lo,
        hi,
        params,
    }
}

/// Loads each param into its register.
fn load_params(b: &mut ProgramBuilder, cx: &TileCx<'_>, d: &Decls) -> Result<(), CodegenError> {
    for (p, &arg) in d.params.iter().enumerate() {
        b.ldarg(cx.param_reg(p)?, arg);
    }
    // Flat tiles address from each access's offset (row kernels rebase
    // per row in `emit_row_bases`).
    if cx.flat {
        for a in 0..cx.access_list.len() {
            b.ldarg(cx.base_reg(a)?, cx.sizes.offset(a));
        }
    }
    Ok(())
}

/// Per tile: the valid width (flat) or the row's length and access
/// offsets.
fn emit_prologue(b: &mut ProgramBuilder, cx: &TileCx<'_>, w: usize) -> Result<(), CodegenError> {
    if cx.flat {
        b.sub(VALID, END, UNIT).min(VALID, VALID, w);
        Ok(())
    } else {
        b.ldarg(VALID, cx.cols_arg()).max(VCOLS, VALID, 1);
        emit_row_bases(b, cx)
    }
}

/// Each access's offset of row [`UNIT`]: peel the row index into its
/// multi-index, innermost row dimension first (the outermost digit is
/// what is left), each digit times the access's stride (size arguments).
fn emit_row_bases(b: &mut ProgramBuilder, cx: &TileCx<'_>) -> Result<(), CodegenError> {
    let k = cx.k;
    for a in 0..cx.access_list.len() {
        b.ldarg(cx.base_reg(a)?, cx.sizes.offset(a));
    }
    b.mov(T3, UNIT);
    for d in (0..k.domain.len() - 1).rev() {
        let digit = if d == 0 {
            T3
        } else {
            b.ldarg(T31, cx.sizes.dim(d)).max(T31, T31, 1);
            b.rem(T4, T3, T31).div(T3, T3, T31);
            T4
        };
        for a in 0..cx.access_list.len() {
            let base = cx.base_reg(a)?;
            b.ldarg(T31, cx.sizes.stride(a, d))
                .mul(T31, digit, T31)
                .add(base, base, T31);
        }
    }
    Ok(())
}

/// The valid columns of the chunk at [`CHUNK`]: `min(w, cols - CHUNK)`.
fn emit_chunk_width(b: &mut ProgramBuilder, cx: &TileCx<'_>, w: usize) {
    b.ldarg(VALID, cx.cols_arg())
        .sub(VALID, VALID, CHUNK)
        .min(VALID, VALID, w);
}

fn first_pass<'l>(k: &Kernel, lay: &'l Layout) -> Result<&'l Pass, CodegenError> {
    lay.passes
        .first()
        .ok_or_else(|| internal(k, "a kernel without passes"))
}

/// The tile loop with two buffer sets, tiles alternating between them.
/// Event `b` guards buffer set `b`: MTE3 -> MTE2 says its last store is
/// done (both start free), MTE2 -> V its loads are in, V -> MTE3 its
/// results are ready.
fn emit_double_buffered(
    b: &mut ProgramBuilder,
    cx: &TileCx<'_>,
    lay: &Layout,
    step: usize,
) -> Result<(), CodegenError> {
    let (ev, lu, _) = first_pass(cx.k, lay)?;
    let plan = cx.plan(ev, lu, lay.peak)?;
    let pong = TileCx {
        ub_base: lay.set_bytes,
        partials: Vec::new(),
        ..*cx
    };
    let (top, done) = (b.label(), b.label());
    b.setf(Pipe::Mte3, Pipe::Mte2, 0)
        .setf(Pipe::Mte3, Pipe::Mte2, 1);
    b.bind(top);
    for (e, set) in [(0u8, cx), (1, &pong)] {
        b.bge(UNIT, END, done);
        emit_prologue(b, set, lay.w)?;
        b.waitf(Pipe::Mte3, Pipe::Mte2, e);
        set.emit_tile(b, &plan, e)?;
        b.setf(Pipe::Mte3, Pipe::Mte2, e).add(UNIT, UNIT, step);
    }
    b.jmp(top);
    b.bind(done);
    b.waitf(Pipe::Mte3, Pipe::Mte2, 0)
        .waitf(Pipe::Mte3, Pipe::Mte2, 1)
        .end();
    Ok(())
}

/// The tile loop with one set of slots and a barrier between tiles (long
/// rows, one pass per stage over column chunks, or tiles too big to hold
/// twice).
fn emit_single_buffered(
    b: &mut ProgramBuilder,
    cx: &TileCx<'_>,
    lay: &Layout,
    step: usize,
) -> Result<(), CodegenError> {
    let (top, done) = (b.label(), b.label());
    b.bind(top);
    b.bge(UNIT, END, done);
    emit_prologue(b, cx, lay.w)?;
    if cx.long {
        for (si, pass) in lay.passes.iter().enumerate() {
            emit_long_pass(b, cx, lay, si, pass)?;
        }
    } else {
        let (ev, lu, _) = first_pass(cx.k, lay)?;
        cx.emit_tile(b, &cx.plan(ev, lu, lay.peak)?, 0)?;
        b.barrier();
    }
    b.add(UNIT, UNIT, step).jmp(top);
    b.bind(done);
    b.end();
    Ok(())
}

/// Stage `si` of a long row: a loop over its column chunks, a reduction
/// starting from its identity.
fn emit_long_pass(
    b: &mut ProgramBuilder,
    cx: &TileCx<'_>,
    lay: &Layout,
    si: usize,
    (ev, lu, _): &Pass,
) -> Result<(), CodegenError> {
    let k = cx.k;
    if let Stage::Reduce { op, value } = &k.stages[si] {
        let dt = k.expr(*value).dtype;
        let acc = cx.elem_addr(k.loads.len() + si);
        b.vdup(dt, Shape::new(1, 1), 1, 1, acc, reduce_identity(*op, dt));
    }
    let (chunk, end) = (b.label(), b.label());
    b.movi(CHUNK, 0);
    b.bind(chunk);
    b.ldarg(T31, cx.cols_arg()).bge(CHUNK, T31, end);
    emit_chunk_width(b, cx, lay.w);
    cx.emit_tile(b, &cx.plan(ev, lu, lay.peak)?, 0)?;
    b.barrier().add(CHUNK, CHUNK, lay.w).jmp(chunk);
    b.bind(end);
    Ok(())
}

/// The value a reduction starts from (integers: the float saturated to
/// the dtype's own range, so a max starts at its least value and a min at
/// its greatest, which `vdup` then holds exactly; wrapping `i64::MIN`
/// into an i32, u8 or i8 would give 0).
fn reduce_identity(op: ReduceOp, dt: DType) -> f64 {
    let v = match op {
        ReduceOp::Sum => 0.0,
        ReduceOp::Max => f64::NEG_INFINITY,
        ReduceOp::Min => f64::INFINITY,
        ReduceOp::Prod => 1.0,
    };
    if dt.is_float() {
        v
    } else {
        tilejit_ir::scalar::float_to_int(v, dt) as f64
    }
}

/// The expressions stage `si` needs (all of them, recomputed in its own
/// pass over a long row) followed by the stage.
pub(super) fn schedule_stage(k: &Kernel, si: usize) -> Vec<Event> {
    let root = match &k.stages[si] {
        Stage::Reduce { value, .. } | Stage::Store { value, .. } => *value,
    };
    let mut need = vec![false; k.exprs.len()];
    let mut work = vec![root];
    while let Some(e) = work.pop() {
        if std::mem::replace(&mut need[e.0 as usize], true) {
            continue;
        }
        work.extend(k.expr(e).expr.operands());
    }
    let mut events: Vec<Event> = (0..k.exprs.len())
        .filter(|&i| need[i])
        .map(|i| Event::Eval(ExprId(i as u32)))
        .collect();
    events.push(Event::Stage(si));
    events
}

/// Each expression's last reading event (stored values live to the end:
/// stores run after every vector op), and the most tile slots live at once
/// (loads are issued first, so they live from the start).
pub(super) fn liveness(k: &Kernel, events: &[Event]) -> (Vec<usize>, usize) {
    let mut last_use = vec![0usize; k.exprs.len()];
    for (i, ev) in events.iter().enumerate() {
        let reads: Vec<ExprId> = match *ev {
            Event::Eval(e) => k.expr(e).expr.operands(),
            Event::Stage(s) => match &k.stages[s] {
                Stage::Reduce { value, .. } | Stage::Store { value, .. } => vec![*value],
            },
        };
        for r in reads {
            last_use[r.0 as usize] = i;
        }
    }
    for ev in events {
        if let Event::Stage(s) = ev {
            if let Stage::Store { value, .. } = &k.stages[*s] {
                last_use[value.0 as usize] = events.len();
            }
        }
    }
    let is_load = |e: ExprId| matches!(k.expr(e).expr, Expr::Load(_) | Expr::Gather { .. });
    let mut ends: Vec<usize> = events
        .iter()
        .filter_map(|ev| match *ev {
            Event::Eval(e) if is_load(e) => Some(last_use[e.0 as usize]),
            _ => None,
        })
        .collect();
    let mut live = ends.len();
    let mut peak = live;
    for (i, ev) in events.iter().enumerate() {
        ends.retain(|&e| {
            let keep = e >= i;
            if !keep {
                live -= 1;
            }
            keep
        });
        if let Event::Eval(e) = ev {
            if !is_load(*e) {
                live += 1;
                ends.push(last_use[e.0 as usize].max(i));
            }
        }
        peak = peak.max(live);
    }
    (last_use, peak.max(1))
}
