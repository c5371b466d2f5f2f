//! Elementwise and row kernels as AIV core functions: the per-tile
//! schedule of expressions and stages, slot liveness, and the loop over a
//! task's range (flat tiles, whole rows, or long rows in column chunks).

use super::tile::TileCx;
use super::{assemble_verified, float_text, sanitize, unsupported, DeviceKernel, MAX_FLAT_W};
use crate::CodegenError;
use std::fmt::Write;
use std::sync::Arc;
use tilejit_device::{CoreType, DeviceConfig};
use tilejit_ir::kernel::{Access, BufId, Expr, ExprId, Kernel, Stage};
use tilejit_ir::{DType, ReduceOp};

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

pub(super) fn compile_vector(
    k: &Kernel,
    buf_dtype: &dyn Fn(BufId) -> DType,
    cfg: &DeviceConfig,
) -> Result<Vec<DeviceKernel>, CodegenError> {
    if k.domain.is_empty() {
        return Err(unsupported(k, "a rank-0 domain"));
    }
    let flat = k.is_flat();
    let cols = k.cols();
    let buffers = k.local_buffers();
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
    let max_size = k
        .exprs
        .iter()
        .map(|n| n.dtype.size_bytes())
        .max()
        .unwrap_or(4)
        .max(1);
    let ub = cfg.ub_bytes as usize;
    // Element slots: one per load (scalar broadcasts), one per stage (row
    // values / accumulators), one for a chunk's partial reduction.
    let n_elem = k.loads.len() + k.stages.len() + 3;
    let elem_bytes = n_elem * 32;
    let slot_bytes_for = |w: usize| (w * max_size).next_multiple_of(32);
    let fits = |w: usize, peak: usize| peak.max(1) * slot_bytes_for(w) + elem_bytes <= ub;
    let widest = |peak: usize| {
        let mut w = MAX_FLAT_W.min(cols.max(1)).next_power_of_two().max(8);
        while w > 8 && !fits(w, peak) {
            w /= 2;
        }
        w
    };
    let all = schedule(k);
    let (all_last, all_peak) = liveness(k, &all);
    // Long rows: a row that does not fit UB is processed in column chunks,
    // one pass per stage (reductions accumulate over the chunks).
    let whole_row_fits = cols <= u16::MAX as usize && fits(cols.max(1), all_peak);
    let long = !flat && !whole_row_fits;
    let passes: Vec<(Vec<Event>, Vec<usize>, usize)> = if long {
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
    let w = if flat || long {
        widest(peak)
    } else {
        cols.max(1)
    };
    if !fits(w, peak) {
        return Err(unsupported(
            k,
            format!("{peak} live tiles of {w} elements (more than the {ub}-byte UB holds)"),
        ));
    }
    // Double buffering (whole tiles only): a second set of slots, so that
    // MTE2 loads tile i+1 while V computes tile i and MTE3 stores tile
    // i-1. A flat kernel halves its tile width, down to 256 elements, to
    // make room; a row kernel double-buffers when two rows fit.
    let set_bytes = |w: usize| (peak * slot_bytes_for(w) + elem_bytes).next_multiple_of(32);
    let (w, double) = if long {
        (w, false)
    } else if flat {
        let mut d = w;
        while d > 256 && 2 * set_bytes(d) > ub {
            d /= 2;
        }
        if 2 * set_bytes(d) <= ub {
            (d, true)
        } else {
            (w, false)
        }
    } else {
        (w, 2 * set_bytes(w) <= ub)
    };
    let slot_bytes = slot_bytes_for(w);
    let params = k.exprs.iter().filter_map(|n| match n.expr {
        Expr::Param(p) => Some(p as usize + 1),
        _ => None,
    });
    let n_params = params.max().unwrap_or(0);
    let access_list: Vec<&Access> = k.accesses().collect();
    // r0: unit, r1: end, r2: valid columns, r3/r4: scratch, r5..: row bases,
    // then params; r27 reserved, r28: a long row's chunk offset, r31: scratch.
    if 5 + access_list.len() + n_params > 27 {
        return Err(unsupported(
            k,
            format!(
                "{} accesses and {n_params} params (too many registers)",
                access_list.len()
            ),
        ));
    }
    let cx = TileCx {
        k,
        flat,
        long,
        shape: format!("1x{w}"),
        // A row kernel over zero columns still computes its row values in
        // column 0, which row-constant stores then write.
        vcv: if !flat && cols == 0 { "1" } else { "r2" },
        slot_bytes,
        elem_base: peak * slot_bytes,
        ub_base: 0,
        buffers: &buffers,
        access_list: &access_list,
        partials: Vec::new(),
    };
    // A few long rows: split each row's columns across tasks, one function
    // per stage plus a combine function per reduction (partial + combine
    // tasks), so one big reduction uses many cores.
    let n_chunks = cols.div_ceil(w);
    if long && k.rows() <= SPLIT_MAX_ROWS && (n_chunks * 8).next_multiple_of(32) + 64 <= ub {
        return compile_split(k, buf_dtype, cfg, &cx, &passes, peak, w, n_params);
    }

    // ---- emit ----
    let mut s = String::new();
    let name = format!("k_{}", sanitize(&k.name));
    let _ = writeln!(s, ".kernel {name} aiv");
    for (i, &b) in buffers.iter().enumerate() {
        let _ = writeln!(s, ".gm b{i}_{} {} [] inout", b.0, buf_dtype(b));
    }
    let _ = writeln!(s, ".arg lo 0\n.arg hi 0");
    for p in 0..n_params {
        let _ = writeln!(s, ".arg p{p} 0");
    }
    let _ = writeln!(s, "    ldarg r0, 0\n    ldarg r1, 1");
    for p in 0..n_params {
        let _ = writeln!(s, "    ldarg r{}, {}", cx.param_reg(p), 2 + p);
    }
    // Per tile: the valid width (flat) or the row's access offsets.
    let mut prologue = String::new();
    if flat {
        let _ = writeln!(prologue, "    sub r2, r1, r0\n    min r2, r2, {w}");
    } else {
        let _ = writeln!(prologue, "    movi r2, {cols}");
        // Row offsets: peel the row index into its multi-index, innermost
        // row dimension first.
        for a in 0..access_list.len() {
            let _ = writeln!(prologue, "    movi r{}, 0", cx.base_reg(a));
        }
        let _ = writeln!(prologue, "    mov r3, r0");
        let rank = k.domain.len();
        for d in (0..rank - 1).rev() {
            let dim = k.domain[d].max(1);
            let _ = writeln!(prologue, "    rem r4, r3, {dim}\n    div r3, r3, {dim}");
            for (a, acc) in access_list.iter().enumerate() {
                let st = acc.strides[d];
                if st != 0 {
                    let _ = writeln!(
                        prologue,
                        "    mul r31, r4, {st}\n    add r{0}, r{0}, r31",
                        cx.base_reg(a)
                    );
                }
            }
        }
    }
    let step = if flat { w } else { 1 };
    if double {
        let (ev, lu, _) = &passes[0];
        let pong = TileCx {
            ub_base: set_bytes(w),
            shape: cx.shape.clone(),
            partials: Vec::new(),
            ..cx
        };
        // Event b guards buffer set b: MTE3 -> MTE2 says its last store
        // is done (both start free), MTE2 -> V its loads are in, V -> MTE3
        // its results are ready.
        s.push_str("    setf mte3, mte2, 0\n    setf mte3, mte2, 1\nloop:\n");
        for (b, set) in [&cx, &pong].into_iter().enumerate() {
            let (loads, v_ops, stores) = set.emit(ev, lu, peak)?;
            let _ = write!(
                s,
                "    bge r0, r1, done\n{prologue}    waitf mte3, mte2, {b}\n{loads}\
                 \x20   setf mte2, v, {b}\n    waitf mte2, v, {b}\n{v_ops}\
                 \x20   setf v, mte3, {b}\n    waitf v, mte3, {b}\n{stores}\
                 \x20   setf mte3, mte2, {b}\n    add r0, r0, {step}\n"
            );
        }
        s.push_str(
            "    jmp loop\ndone:\n    waitf mte3, mte2, 0\n    waitf mte3, mte2, 1\n    end\n",
        );
    } else {
        emit_single_buffered(&mut s, &cx, &passes, &prologue, (peak, w, step))?;
    }
    let program = assemble_verified(k, &s, cfg)?;
    Ok(vec![DeviceKernel {
        name: k.name.clone(),
        program,
        asm: s,
        buffers,
        core: CoreType::Aiv,
        units: k.units(),
        tile_units: step,
        extra: Arc::new(Vec::new()),
    }])
}

/// The tile loop with one set of slots and a barrier between tiles (long
/// rows, one pass per stage over column chunks, or tiles too big to hold
/// twice).
fn emit_single_buffered(
    s: &mut String,
    cx: &TileCx<'_>,
    passes: &[(Vec<Event>, Vec<usize>, usize)],
    prologue: &str,
    (peak, w, step): (usize, usize, usize),
) -> Result<(), CodegenError> {
    let k = cx.k;
    let cols = k.cols();
    let _ = write!(s, "loop:\n    bge r0, r1, done\n{prologue}");
    let sync = |s: &mut String, body: (String, String, String)| {
        s.push_str(&body.0);
        s.push_str("    setf mte2, v, 0\n    waitf mte2, v, 0\n");
        s.push_str(&body.1);
        s.push_str("    setf v, mte3, 0\n    waitf v, mte3, 0\n");
        s.push_str(&body.2);
        s.push_str("    barrier\n");
    };
    if cx.long {
        for (si, (ev, lu, _)) in passes.iter().enumerate() {
            if let Stage::Reduce { op, value } = &k.stages[si] {
                let dt = k.expr(*value).dtype;
                let identity = match op {
                    ReduceOp::Sum => 0.0,
                    ReduceOp::Max => f64::NEG_INFINITY,
                    ReduceOp::Min => f64::INFINITY,
                };
                let identity = if dt.is_float() {
                    float_text(identity)
                } else {
                    float_text(identity.clamp(i64::MIN as f64, i64::MAX as f64))
                };
                let _ = writeln!(
                    s,
                    "    vdup {dt}, 1x1, 1, 1, @0x{:x}, {identity}",
                    cx.elem_addr(k.loads.len() + si)
                );
            }
            let _ = writeln!(s, "    movi r28, 0\nc{si}:\n    bge r28, {cols}, e{si}");
            let _ = writeln!(
                s,
                "    movi r2, {cols}\n    sub r2, r2, r28\n    min r2, r2, {w}"
            );
            sync(s, cx.emit(ev, lu, peak)?);
            let _ = writeln!(s, "    add r28, r28, {w}\n    jmp c{si}\ne{si}:");
        }
    } else {
        let (ev, lu, _) = &passes[0];
        sync(s, cx.emit(ev, lu, peak)?);
    }
    let _ = writeln!(s, "    add r0, r0, {step}\n    jmp loop\ndone:\n    end");
    Ok(())
}

/// Long rows fewer than this are split across tasks.
const SPLIT_MAX_ROWS: usize = 8;

/// Partial + combine tasks for a kernel with a few long rows. Workspace:
/// per reduction `j`, GM `w{2j}` holds one partial per (row, chunk) and
/// `w{2j+1}` one finished value per row. Stage `s` becomes a function over
/// a column range (all rows, chunk by chunk, reading earlier row values
/// from GM); each reduction adds a combine function over rows that folds
/// its partials. The runtime chains them in order.
#[allow(clippy::too_many_arguments)]
fn compile_split(
    k: &Kernel,
    buf_dtype: &dyn Fn(BufId) -> DType,
    cfg: &DeviceConfig,
    base: &TileCx<'_>,
    passes: &[(Vec<Event>, Vec<usize>, usize)],
    peak: usize,
    w: usize,
    n_params: usize,
) -> Result<Vec<DeviceKernel>, CodegenError> {
    let (rows, cols) = (k.rows(), k.cols());
    let n_chunks = cols.div_ceil(w);
    let reduces: Vec<(usize, DType, ReduceOp)> = k
        .stages
        .iter()
        .enumerate()
        .filter_map(|(si, st)| match st {
            Stage::Reduce { op, value } => Some((si, k.expr(*value).dtype, *op)),
            Stage::Store { .. } => None,
        })
        .collect();
    let ridx = |si: usize| reduces.iter().position(|r| r.0 == si);
    let extra: Arc<Vec<(DType, usize)>> = Arc::new(
        reduces
            .iter()
            .flat_map(|&(_, dt, _)| [(dt, rows * n_chunks), (dt, rows)])
            .collect(),
    );
    let header = |s: &mut String, name: &str| {
        let _ = writeln!(s, ".kernel {name} aiv");
        for (i, &b) in base.buffers.iter().enumerate() {
            let _ = writeln!(s, ".gm b{i}_{} {} [] inout", b.0, buf_dtype(b));
        }
        for (j, (dt, _)) in extra.iter().enumerate() {
            let _ = writeln!(s, ".gm w{j} {dt} [] inout");
        }
        let _ = writeln!(s, ".arg lo 0\n.arg hi 0");
        for p in 0..n_params {
            let _ = writeln!(s, ".arg p{p} 0");
        }
    };
    let finish = |s: String,
                  name: String,
                  units: usize,
                  tile_units: usize|
     -> Result<DeviceKernel, CodegenError> {
        let program = assemble_verified(k, &s, cfg)?;
        Ok(DeviceKernel {
            name,
            program,
            asm: s,
            buffers: base.buffers.to_vec(),
            core: CoreType::Aiv,
            units,
            tile_units,
            extra: extra.clone(),
        })
    };
    let mut out = Vec::new();
    for (si, (ev, lu, _)) in passes.iter().enumerate() {
        let cx = TileCx {
            partials: (0..k.stages.len())
                .map(|s| {
                    (s == si)
                        .then(|| ridx(s).map(|j| format!("w{}", 2 * j)))
                        .flatten()
                })
                .collect(),
            shape: base.shape.clone(),
            ..*base
        };
        let mut s = String::new();
        header(&mut s, &format!("k_{}_s{si}", sanitize(&k.name)));
        let _ = writeln!(s, "    ldarg r29, 0\n    ldarg r30, 1");
        for p in 0..n_params {
            let _ = writeln!(s, "    ldarg r{}, {}", cx.param_reg(p), 2 + p);
        }
        let _ = writeln!(s, "    movi r0, 0\nrows:\n    bge r0, {rows}, done");
        for a in 0..base.access_list.len() {
            let _ = writeln!(s, "    movi r{}, 0", cx.base_reg(a));
        }
        let _ = writeln!(s, "    mov r3, r0");
        for d in (0..k.domain.len() - 1).rev() {
            let dim = k.domain[d].max(1);
            let _ = writeln!(s, "    rem r4, r3, {dim}\n    div r3, r3, {dim}");
            for (a, acc) in base.access_list.iter().enumerate() {
                let st = acc.strides[d];
                if st != 0 {
                    let _ = writeln!(
                        s,
                        "    mul r31, r4, {st}\n    add r{0}, r{0}, r31",
                        cx.base_reg(a)
                    );
                }
            }
        }
        // Earlier reductions' finished row values, from the combine tasks.
        for &(sj, dt, _) in reduces.iter().filter(|r| r.0 < si) {
            let j = ridx(sj).unwrap_or(0);
            let _ = writeln!(
                s,
                "    ld {dt}, 1x1, 1, 1, @0x{:x}, w{}, r0, 0",
                cx.elem_addr(k.loads.len() + sj),
                2 * j + 1
            );
        }
        let _ = writeln!(s, "    mov r28, r29\nchunks:\n    bge r28, r30, rowdone");
        let _ = writeln!(
            s,
            "    movi r2, {cols}\n    sub r2, r2, r28\n    min r2, r2, {w}"
        );
        let _ = writeln!(
            s,
            "    div r26, r28, {w}\n    mul r27, r0, {n_chunks}\n    add r26, r26, r27"
        );
        let (loads, v_ops, stores) = cx.emit(ev, lu, peak)?;
        s.push_str(&loads);
        s.push_str("    setf mte2, v, 0\n    waitf mte2, v, 0\n");
        s.push_str(&v_ops);
        s.push_str("    setf v, mte3, 0\n    waitf v, mte3, 0\n");
        s.push_str(&stores);
        let _ = writeln!(s, "    barrier\n    add r28, r28, {w}\n    jmp chunks\nrowdone:\n    add r0, r0, 1\n    jmp rows\ndone:\n    end");
        out.push(finish(s, format!("{}/stage{si}", k.name), cols, w)?);
        if let Some(j) = ridx(si) {
            let (_, dt, op) = reduces[j];
            let rop = match op {
                ReduceOp::Sum => "vrsum",
                ReduceOp::Max => "vrmax",
                ReduceOp::Min => "vrmin",
            };
            let tmp = (n_chunks * dt.size_bytes()).next_multiple_of(32);
            let mut s = String::new();
            header(&mut s, &format!("k_{}_c{si}", sanitize(&k.name)));
            let _ = writeln!(s, "    ldarg r0, 0\n    ldarg r1, 1\nloop:\n    bge r0, r1, done\n    mul r3, r0, {n_chunks}");
            let _ = writeln!(
                s,
                "    ld {dt}, 1x{n_chunks}, 1, {n_chunks}, @0x0, w{}, r3, 0",
                2 * j
            );
            let _ = writeln!(s, "    setf mte2, v, 0\n    waitf mte2, v, 0\n    {rop} {dt}, 1x{n_chunks}, 1, {n_chunks}, @0x{tmp:x}, @0x0");
            let _ = writeln!(s, "    setf v, mte3, 0\n    waitf v, mte3, 0\n    st {dt}, 1x1, 1, 1, w{}, r0, 0, @0x{tmp:x}", 2 * j + 1);
            let _ = writeln!(
                s,
                "    barrier\n    add r0, r0, 1\n    jmp loop\ndone:\n    end"
            );
            out.push(finish(s, format!("{}/combine{si}", k.name), rows, 1)?);
        }
    }
    Ok(out)
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
    let is_load = |e: ExprId| matches!(k.expr(e).expr, Expr::Load(_));
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
