//! Kernel IR -> bytecode for the simulated accelerator's vector cores.
//!
//! One kernel becomes one AIV core function; a launch runs it as many tile
//! tasks that differ only in their scalar arguments (`lo`, `hi`: the range
//! of units the task covers, then the program's params). The function
//! loops over its range one tile at a time:
//!
//! - **flat kernels** (one dimension, no reduction) take tiles of `1 x W`
//!   elements, the last one partial (the valid region is `min(W, hi - i)`);
//! - **row kernels** take one row per tile (`1 x C`, the whole row in UB),
//!   computing each access's row offset from the row index with scalar
//!   div/mod, so reductions are whole-row `vrsum`/`vrmax`/`vrmin` and row
//!   values broadcast back with `vbrow`.
//!
//! Each tile: every load (MTE2), a flag to V, the expression DAG and stages
//! in order on V (each expression computed once, into a UB slot reused
//! after its last use), a flag to MTE3, the stores, and a barrier before
//! the next tile reuses the slots. Values are computed in each node's own
//! dtype with the reference interpreter's rounding, so results match it.
//!
//! Loads with an inner stride other than 0 or 1 (transposes, strided
//! views) use the element-strided `ldx`. A matmul kernel becomes two core
//! functions: AIC tasks over 64x64 output tiles (GM -> L1 -> L0A/L0B ->
//! cube, K accumulated in L0C, fixpipe to the product buffer), then the
//! elementwise epilogue as AIV tasks reading the product from GM.
//!
//! A row too long for UB is processed in column chunks, one pass per
//! stage: a reduction accumulates its chunks' partials (so its sum rounds
//! per chunk, not once), and later stages see the finished row values.
//!
//! Matmuls in f64 or integers (which the cube does not take) run on the
//! vector cores, row by row.
//!
//! Not yet: stores with inner strides other than 0 or 1, one long row
//! split across several tasks (partial + combine tasks). They are reported
//! as [`CodegenError::SimUnsupported`].

use crate::CodegenError;
use std::fmt::Write;
use tilejit_device::isa::{asm, pitch};
use tilejit_device::{CoreType, DeviceConfig, VerifiedProgram};
use tilejit_ir::kernel::{Access, BufId, Expr, ExprId, Kernel, Stage};
use tilejit_ir::{BinaryOp, CmpOp, DType, Lit, ReduceOp, UnaryOp};

/// A kernel compiled for the simulated device.
#[derive(Clone, Debug)]
pub struct DeviceKernel {
    /// The kernel's name.
    pub name: String,
    /// The core type its tasks run on.
    pub core: CoreType,
    /// The core function.
    pub program: VerifiedProgram,
    /// Its assembly text (what the kernel cache shows).
    pub asm: String,
    /// GM arguments in order: the kernel's local buffers.
    pub buffers: Vec<BufId>,
    /// Units to split over tasks (elements for flat kernels, rows otherwise).
    pub units: usize,
    /// Units one tile covers (a task's range is best a multiple of it).
    pub tile_units: usize,
}

/// Largest tile width of a flat kernel.
const MAX_FLAT_W: usize = 4096;

fn unsupported(k: &Kernel, what: impl Into<String>) -> CodegenError {
    CodegenError::SimUnsupported {
        kernel: k.name.clone(),
        what: what.into(),
    }
}

/// One step of a tile's work, in order.
#[derive(Copy, Clone, Debug, PartialEq)]
enum Event {
    Eval(ExprId),
    Stage(usize),
}

/// The order expressions and stages run in, per tile: before each stage,
/// the expressions it needs that have not run yet (operands before users).
fn schedule(k: &Kernel) -> Vec<Event> {
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

/// Text of a float literal the assembler reads back exactly.
fn float_text(v: f64) -> String {
    let t = format!("{v:?}");
    if !v.is_nan() && t.parse::<f64>().map(f64::to_bits) == Ok(v.to_bits()) {
        t
    } else {
        format!("bits:0x{:016x}", v.to_bits())
    }
}

/// Compiles one kernel. `buf_dtype` gives each buffer's element type.
pub fn compile(
    k: &Kernel,
    buf_dtype: &dyn Fn(BufId) -> DType,
    cfg: &DeviceConfig,
) -> Result<Vec<DeviceKernel>, CodegenError> {
    let mut out = Vec::new();
    if let Some(mm) = &k.matmul {
        let dt = buf_dtype(mm.a);
        out.push(if matches!(dt, DType::F32 | DType::F16 | DType::BF16) {
            compile_matmul(k, mm, buf_dtype, cfg)?
        } else {
            compile_matmul_vector(k, mm, buf_dtype, cfg)?
        });
        // The epilogue reads the product from GM like any other buffer.
        let mut epilogue = k.clone();
        epilogue.matmul = None;
        out.push(compile_vector(&epilogue, buf_dtype, cfg)?);
    } else {
        out.push(compile_vector(k, buf_dtype, cfg)?);
    }
    Ok(out)
}

/// The cube's tile: `TM x TK` by `TK x TN` per multiply-accumulate.
const TM: usize = 64;
const TK: usize = 64;
const TN: usize = 64;

/// A matmul as AIC tasks over output tiles: each tile loads A and B panels
/// into L1 per K step, moves them to L0A/L0B, multiplies into L0C (the
/// first K step overwrites, later ones accumulate) and the fixpipe writes
/// the tile to the product buffer. Loads zero-fill past the matrix edge, so
/// K, M and N tails need no special code.
fn compile_matmul(
    k: &Kernel,
    mm: &tilejit_ir::kernel::MatMul,
    buf_dtype: &dyn Fn(BufId) -> DType,
    cfg: &DeviceConfig,
) -> Result<DeviceKernel, CodegenError> {
    let dt = buf_dtype(mm.a);
    if !matches!(dt, DType::F32 | DType::F16 | DType::BF16) || buf_dtype(mm.b) != dt {
        return Err(unsupported(
            k,
            format!("a {dt} matmul (the cube takes f32, f16, bf16)"),
        ));
    }
    let out_dt = buf_dtype(mm.out);
    let (b, m, kk, n) = (mm.batch.max(1), mm.m, mm.k, mm.n);
    let (mt, nt, kt) = (m.div_ceil(TM), n.div_ceil(TN), kk.div_ceil(TK));
    let tiles = b * mt * nt;
    let a_bytes = (TM as u64) * pitch(TK as u64, dt);
    let mut s = String::new();
    let name = format!("mm_{}", sanitize(&k.name));
    let _ = writeln!(s, ".kernel {name} aic");
    let _ = writeln!(
        s,
        ".gm a {dt} [] in\n.gm b {dt} [] in\n.gm c {out_dt} [] out"
    );
    let _ = writeln!(s, ".arg lo 0\n.arg hi 0");
    // r0 tile index, r1 end; r2 batch, r3 m-tile, r4 n-tile; r5/r6 valid
    // rows/cols of the output tile; r7 k step; r8 valid k; r9/r10/r11 GM
    // offsets of A, B, C; r12 scratch.
    let _ = writeln!(
        s,
        "    ldarg r0, 0\n    ldarg r1, 1\nloop:\n    bge r0, r1, done"
    );
    let _ = writeln!(
        s,
        "    rem r4, r0, {nt}\n    div r12, r0, {nt}\n    rem r3, r12, {mt}\n    div r2, r12, {mt}"
    );
    let _ = writeln!(
        s,
        "    mul r5, r3, -{TM}\n    add r5, r5, {m}\n    min r5, r5, {TM}"
    );
    let _ = writeln!(
        s,
        "    mul r6, r4, -{TN}\n    add r6, r6, {n}\n    min r6, r6, {TN}"
    );
    // Offsets of the output tile's first element.
    let _ = writeln!(s, "    mul r11, r2, {}\n    mul r12, r3, {}\n    add r11, r11, r12\n    mul r12, r4, {TN}\n    add r11, r11, r12", m * n, TM * n);
    let k_step = |acc: u8, s: &mut String| {
        // Valid K of this step: min(TK, k - r7*TK).
        let _ = writeln!(
            s,
            "    mul r8, r7, -{TK}\n    add r8, r8, {kk}\n    min r8, r8, {TK}"
        );
        let _ = writeln!(s, "    mul r9, r2, {}\n    mul r12, r3, {}\n    add r9, r9, r12\n    mul r12, r7, {TK}\n    add r9, r9, r12", m * kk, TM * kk);
        let _ = writeln!(s, "    mul r10, r2, {}\n    mul r12, r7, {}\n    add r10, r10, r12\n    mul r12, r4, {TN}\n    add r10, r10, r12", kk * n, TK * n);
        let _ = writeln!(s, "    ldl1 {dt}, {TM}x{TK}, r5, r8, @0x0, a, r9, {kk}");
        let _ = writeln!(
            s,
            "    ldl1 {dt}, {TK}x{TN}, r8, r6, @0x{a_bytes:x}, b, r10, {n}"
        );
        let _ = writeln!(s, "    setf mte2, mte1, 0\n    waitf mte2, mte1, 0");
        let _ = writeln!(s, "    mvl0a {dt}, {TM}x{TK}, @0x0, @0x0\n    mvl0b {dt}, {TK}x{TN}, @0x0, @0x{a_bytes:x}");
        let _ = writeln!(s, "    setf mte1, m, 0\n    waitf mte1, m, 0");
        let _ = writeln!(s, "    mmad {dt}, {TM}x{TK}x{TN}, @0x0, @0x0, @0x0, {acc}");
        // The next step's loads reuse L1 and L0: wait for the cube.
        let _ = writeln!(s, "    barrier\n    add r7, r7, 1");
    };
    let _ = writeln!(s, "    movi r7, 0");
    k_step(0, &mut s);
    let _ = writeln!(s, "kloop:\n    bge r7, {kt}, kdone");
    k_step(1, &mut s);
    let _ = writeln!(s, "    jmp kloop\nkdone:");
    let _ = writeln!(s, "    setf m, fixp, 0\n    waitf m, fixp, 0");
    let _ = writeln!(
        s,
        "    fixp {out_dt}, {TM}x{TN}, r5, r6, c, r11, {n}, @0x0, 0"
    );
    let _ = writeln!(
        s,
        "    barrier\n    add r0, r0, 1\n    jmp loop\ndone:\n    end"
    );
    let bad = |e: tilejit_device::DeviceError| CodegenError::Bytecode {
        kernel: k.name.clone(),
        error: format!("{e}\n{s}"),
    };
    let program = asm::assemble(&s).map_err(bad)?;
    let program = tilejit_device::verify(program, cfg).map_err(bad)?;
    Ok(DeviceKernel {
        name: format!("{}/matmul", k.name),
        core: CoreType::Aic,
        program,
        asm: s,
        buffers: vec![mm.a, mm.b, mm.out],
        units: tiles,
        tile_units: 1,
    })
}

/// A matmul in a dtype the cube does not take (f64, i32, i64) on the
/// vector cores: each task computes whole output rows, a chunk of columns
/// at a time, as `sum_p a[i,p] * b[p, cols]` (a scalar broadcast, a
/// multiply and an add per step, in the dtype: the reference's order and
/// rounding, so results are exact).
fn compile_matmul_vector(
    k: &Kernel,
    mm: &tilejit_ir::kernel::MatMul,
    buf_dtype: &dyn Fn(BufId) -> DType,
    cfg: &DeviceConfig,
) -> Result<DeviceKernel, CodegenError> {
    let dt = buf_dtype(mm.a);
    if !matches!(dt, DType::F64 | DType::I32 | DType::I64)
        || buf_dtype(mm.b) != dt
        || buf_dtype(mm.out) != dt
    {
        return Err(unsupported(k, format!("a {dt} matmul")));
    }
    let (b, m, kk, n) = (mm.batch.max(1), mm.m, mm.k, mm.n);
    // Three tiles (accumulator, B row, product) and one element slot.
    let ub = cfg.ub_bytes as usize;
    let mut w = 2048usize.min(n.max(1)).next_power_of_two().max(8);
    while w > 8 && 3 * (w * 8).next_multiple_of(32) + 32 > ub {
        w /= 2;
    }
    let tile = (w * dt.size_bytes()).next_multiple_of(32);
    let (acc, brow, prod, elem) = (0, tile, 2 * tile, 3 * tile);
    let t = format!("{dt}, 1x{w}, 1, r9");
    let mut s = String::new();
    let _ = writeln!(s, ".kernel mmv_{} aiv", sanitize(&k.name));
    let _ = writeln!(
        s,
        ".gm a {dt} [] in\n.gm b {dt} [] in\n.gm c {dt} [] out\n.arg lo 0\n.arg hi 0"
    );
    let _ = writeln!(
        s,
        "    ldarg r0, 0\n    ldarg r1, 1\nloop:\n    bge r0, r1, done"
    );
    // r0: output row over batch*m; r4: A row offset; r6: B batch offset;
    // r7: C row offset; r8: column chunk; r9: valid columns; r10: k index.
    let _ = writeln!(s, "    div r2, r0, {m}\n    rem r3, r0, {m}");
    let _ = writeln!(
        s,
        "    mul r4, r2, {}\n    mul r5, r3, {kk}\n    add r4, r4, r5",
        m * kk
    );
    let _ = writeln!(
        s,
        "    mul r6, r2, {}\n    mul r7, r0, {n}\n    movi r8, 0",
        kk * n
    );
    let _ = writeln!(
        s,
        "nloop:\n    bge r8, {n}, ndone\n    movi r9, {n}\n    sub r9, r9, r8\n    min r9, r9, {w}"
    );
    let _ = writeln!(s, "    vdup {t}, @0x{acc:x}, 0.0\n    movi r10, 0");
    let _ = writeln!(s, "kloop:\n    bge r10, {kk}, kdone\n    add r11, r4, r10");
    let _ = writeln!(s, "    ld {dt}, 1x1, 1, 1, @0x{elem:x}, a, r11, 0");
    let _ = writeln!(
        s,
        "    mul r12, r10, {n}\n    add r12, r12, r6\n    add r12, r12, r8"
    );
    let _ = writeln!(s, "    ld {t}, @0x{brow:x}, b, r12, 0");
    let _ = writeln!(s, "    setf mte2, v, 0\n    waitf mte2, v, 0");
    let _ = writeln!(s, "    vbcast {t}, @0x{prod:x}, @0x{elem:x}");
    let _ = writeln!(s, "    vmul {t}, @0x{prod:x}, @0x{prod:x}, @0x{brow:x}");
    let _ = writeln!(s, "    vadd {t}, @0x{acc:x}, @0x{acc:x}, @0x{prod:x}");
    let _ = writeln!(s, "    barrier\n    add r10, r10, 1\n    jmp kloop\nkdone:");
    let _ = writeln!(
        s,
        "    add r13, r7, r8\n    setf v, mte3, 0\n    waitf v, mte3, 0"
    );
    let _ = writeln!(
        s,
        "    st {t}, c, r13, 0, @0x{acc:x}\n    barrier\n    add r8, r8, {w}\n    jmp nloop"
    );
    let _ = writeln!(s, "ndone:\n    add r0, r0, 1\n    jmp loop\ndone:\n    end");
    let bad = |e: tilejit_device::DeviceError| CodegenError::Bytecode {
        kernel: k.name.clone(),
        error: format!("{e}\n{s}"),
    };
    let program = tilejit_device::verify(asm::assemble(&s).map_err(bad)?, cfg).map_err(bad)?;
    Ok(DeviceKernel {
        name: format!("{}/matmul", k.name),
        core: CoreType::Aiv,
        program,
        asm: s,
        buffers: vec![mm.a, mm.b, mm.out],
        units: b * m,
        tile_units: 1,
    })
}

fn compile_vector(
    k: &Kernel,
    buf_dtype: &dyn Fn(BufId) -> DType,
    cfg: &DeviceConfig,
) -> Result<DeviceKernel, CodegenError> {
    if k.domain.is_empty() {
        return Err(unsupported(k, "a rank-0 domain"));
    }
    let flat = k.is_flat();
    let cols = k.cols();
    let buffers = k.local_buffers();
    for st in &k.stages {
        if let Stage::Store { access, .. } = st {
            let inner = access.inner_stride();
            if !(inner == 0 || inner == 1) {
                return Err(unsupported(k, format!("a store with inner stride {inner}")));
            }
        }
    }
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
        buffers: &buffers,
        access_list: &access_list,
    };

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
    let _ = writeln!(s, "loop:\n    bge r0, r1, done");
    if flat {
        let _ = writeln!(s, "    sub r2, r1, r0\n    min r2, r2, {w}");
    } else {
        let _ = writeln!(s, "    movi r2, {cols}");
        // Row offsets: peel the row index into its multi-index, innermost
        // row dimension first.
        for a in 0..access_list.len() {
            let _ = writeln!(s, "    movi r{}, 0", cx.base_reg(a));
        }
        let _ = writeln!(s, "    mov r3, r0");
        let rank = k.domain.len();
        for d in (0..rank - 1).rev() {
            let dim = k.domain[d].max(1);
            let _ = writeln!(s, "    rem r4, r3, {dim}\n    div r3, r3, {dim}");
            for (a, acc) in access_list.iter().enumerate() {
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
    }
    let sync = |s: &mut String, body: (String, String, String)| {
        s.push_str(&body.0);
        s.push_str("    setf mte2, v, 0\n    waitf mte2, v, 0\n");
        s.push_str(&body.1);
        s.push_str("    setf v, mte3, 0\n    waitf v, mte3, 0\n");
        s.push_str(&body.2);
        s.push_str("    barrier\n");
    };
    if long {
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
            sync(&mut s, cx.emit(ev, lu, peak)?);
            let _ = writeln!(s, "    add r28, r28, {w}\n    jmp c{si}\ne{si}:");
        }
    } else {
        let (ev, lu, _) = &passes[0];
        sync(&mut s, cx.emit(ev, lu, peak)?);
    }
    let step = if flat { w } else { 1 };
    let _ = writeln!(s, "    add r0, r0, {step}\n    jmp loop\ndone:\n    end");
    let bad = |e: tilejit_device::DeviceError| CodegenError::Bytecode {
        kernel: k.name.clone(),
        error: format!("{e}\n{s}"),
    };
    let program = asm::assemble(&s).map_err(bad)?;
    let program = tilejit_device::verify(program, cfg).map_err(bad)?;
    Ok(DeviceKernel {
        name: k.name.clone(),
        program,
        asm: s,
        buffers,
        core: CoreType::Aiv,
        units: k.units(),
        tile_units: step,
    })
}

/// The expressions stage `si` needs (all of them, recomputed in its own
/// pass over a long row) followed by the stage.
fn schedule_stage(k: &Kernel, si: usize) -> Vec<Event> {
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
fn liveness(k: &Kernel, events: &[Event]) -> (Vec<usize>, usize) {
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

/// What emitting one tile's instructions needs to know.
struct TileCx<'a> {
    k: &'a Kernel,
    flat: bool,
    long: bool,
    shape: String,
    vcv: &'static str,
    slot_bytes: usize,
    elem_base: usize,
    buffers: &'a [BufId],
    access_list: &'a [&'a Access],
}

impl TileCx<'_> {
    fn base_reg(&self, a: usize) -> usize {
        5 + a
    }

    fn param_reg(&self, p: usize) -> usize {
        5 + self.access_list.len() + p
    }

    fn elem_addr(&self, i: usize) -> usize {
        self.elem_base + i * 32
    }

    fn gm_of(&self, b: BufId) -> usize {
        self.buffers.iter().position(|&x| x == b).unwrap_or(0)
    }

    /// The GM element offset operand of access `a` at this tile, with the
    /// instructions (into `pre`) that compute it into `scratch`.
    fn offset(&self, a: usize, inner: i64, scratch: &str, pre: &mut String) -> String {
        let base = format!("r{}", self.base_reg(a));
        match (self.flat, self.long, inner) {
            (true, _, 0) => "0".into(),
            (true, _, 1) => "r0".into(),
            (true, _, s) => {
                let _ = writeln!(pre, "    mul {scratch}, r0, {s}");
                scratch.into()
            }
            (false, false, _) | (false, true, 0) => base,
            (false, true, 1) => {
                let _ = writeln!(pre, "    add {scratch}, {base}, r28");
                scratch.into()
            }
            (false, true, s) => {
                let _ = writeln!(
                    pre,
                    "    mul {scratch}, r28, {s}\n    add {scratch}, {scratch}, {base}"
                );
                scratch.into()
            }
        }
    }

    /// One tile's loads, vector ops and stores for `events`.
    fn emit(
        &self,
        events: &[Event],
        last_use: &[usize],
        slots: usize,
    ) -> Result<(String, String, String), CodegenError> {
        let k = self.k;
        let (shape, vcv) = (&self.shape, self.vcv);
        let is_load = |e: ExprId| matches!(k.expr(e).expr, Expr::Load(_));
        let mut slot_of: Vec<Option<usize>> = vec![None; k.exprs.len()];
        let mut free: Vec<usize> = (0..slots).rev().collect();
        let mut expiring: Vec<(usize, usize)> = Vec::new(); // (last use, slot)
        let slot_addr = |sl: usize| sl * self.slot_bytes;
        let (mut loads, mut v_ops, mut stores) = (String::new(), String::new(), String::new());
        let assign = |e: ExprId,
                      i: usize,
                      free: &mut Vec<usize>,
                      expiring: &mut Vec<(usize, usize)>|
         -> Option<usize> {
            let sl = free.pop()?;
            expiring.push((last_use[e.0 as usize].max(i), sl));
            Some(sl)
        };
        // Loads first: their slots are assigned up front so they can be
        // issued together at the start of the tile.
        for ev in events {
            if let Event::Eval(e) = *ev {
                if is_load(e) {
                    let sl = assign(e, 0, &mut free, &mut expiring)
                        .ok_or_else(|| unsupported(k, "more loads than UB slots"))?;
                    slot_of[e.0 as usize] = Some(sl);
                }
            }
        }
        for (i, ev) in events.iter().enumerate() {
            expiring.retain(|&(end, sl)| {
                if end < i {
                    free.push(sl);
                    false
                } else {
                    true
                }
            });
            match *ev {
                Event::Eval(e) => {
                    let node = k.expr(e);
                    let dt = node.dtype;
                    let sl = match slot_of[e.0 as usize] {
                        Some(sl) => sl,
                        None => {
                            let sl = assign(e, i, &mut free, &mut expiring)
                                .ok_or_else(|| unsupported(k, "an expression DAG wider than UB"))?;
                            slot_of[e.0 as usize] = Some(sl);
                            sl
                        }
                    };
                    let dst = slot_addr(sl);
                    let hdr = format!("{dt}, {shape}, 1, {vcv}, @0x{dst:x}");
                    let src = |x: ExprId| slot_addr(slot_of[x.0 as usize].unwrap_or(0));
                    match node.expr {
                        Expr::Load(l) => {
                            let acc = &k.loads[l as usize];
                            let gm = self.gm_of(acc.buf);
                            let inner = acc.inner_stride();
                            let off = self.offset(l as usize, inner, "r3", &mut loads);
                            if inner == 1 {
                                let _ =
                                    writeln!(loads, "    ld {hdr}, b{gm}_{}, {off}, 0", acc.buf.0);
                            } else if inner != 0 {
                                // A transposed or strided view: element-strided load.
                                let _ = writeln!(
                                    loads,
                                    "    ldx {hdr}, b{gm}_{}, {off}, 0, {inner}",
                                    acc.buf.0
                                );
                            } else {
                                let ea = self.elem_addr(l as usize);
                                let _ = writeln!(
                                    loads,
                                    "    ld {dt}, 1x1, 1, 1, @0x{ea:x}, b{gm}_{}, {off}, 0",
                                    acc.buf.0
                                );
                                let _ = writeln!(v_ops, "    vbcast {hdr}, @0x{ea:x}");
                            }
                        }
                        Expr::Param(p) => {
                            let _ =
                                writeln!(v_ops, "    vdupr {hdr}, r{}", self.param_reg(p as usize));
                        }
                        Expr::Lit(l) => {
                            let v = match l {
                                Lit::Float(f) => f,
                                other => other.as_f64(),
                            };
                            let _ = writeln!(v_ops, "    vdup {hdr}, {}", float_text(v));
                        }
                        Expr::Unary(u, a) => {
                            let _ = writeln!(v_ops, "    {} {hdr}, @0x{:x}", unary_op(u), src(a));
                        }
                        Expr::Binary(b, x, y) => {
                            let _ = writeln!(
                                v_ops,
                                "    {} {hdr}, @0x{:x}, @0x{:x}",
                                binary_op(b),
                                src(x),
                                src(y)
                            );
                        }
                        Expr::Compare(c, x, y) => {
                            let cond = match c {
                                CmpOp::Lt => "lt",
                                CmpOp::Gt => "gt",
                                CmpOp::Le => "le",
                                CmpOp::Ge => "ge",
                                CmpOp::Eq => "eq",
                            };
                            let xdt = k.expr(x).dtype;
                            let _ = writeln!(v_ops, "    vcmp {xdt}, {shape}, 1, {vcv}, {cond}, @0x{dst:x}, @0x{:x}, @0x{:x}", src(x), src(y));
                        }
                        Expr::Select(c, x, y) => {
                            let _ = writeln!(
                                v_ops,
                                "    vsel {hdr}, @0x{:x}, @0x{:x}, @0x{:x}",
                                src(c),
                                src(x),
                                src(y)
                            );
                        }
                        Expr::Cast(x) => {
                            let from = k.expr(x).dtype;
                            let _ = writeln!(
                                v_ops,
                                "    vcast {dt}, {from}, {shape}, 1, {vcv}, @0x{dst:x}, @0x{:x}",
                                src(x)
                            );
                        }
                        Expr::Row(st) => {
                            let _ = writeln!(
                                v_ops,
                                "    vbrow {hdr}, @0x{:x}",
                                self.elem_addr(k.loads.len() + st as usize)
                            );
                        }
                    }
                }
                Event::Stage(si) => {
                    match &k.stages[si] {
                        Stage::Reduce { op, value } => {
                            let dt = k.expr(*value).dtype;
                            let (rop, combine) = match op {
                                ReduceOp::Sum => ("vrsum", "vadd"),
                                ReduceOp::Max => ("vrmax", "vmax"),
                                ReduceOp::Min => ("vrmin", "vmin"),
                            };
                            let sl = slot_addr(slot_of[value.0 as usize].unwrap_or(0));
                            let acc = self.elem_addr(k.loads.len() + si);
                            if self.long {
                                // This chunk's partial, folded into the row's accumulator.
                                let tmp = self.elem_addr(k.loads.len() + k.stages.len());
                                let _ = writeln!(
                                    v_ops,
                                    "    {rop} {dt}, {shape}, 1, r2, @0x{tmp:x}, @0x{sl:x}"
                                );
                                let _ = writeln!(v_ops, "    {combine} {dt}, 1x1, 1, 1, @0x{acc:x}, @0x{acc:x}, @0x{tmp:x}");
                            } else {
                                let _ = writeln!(
                                    v_ops,
                                    "    {rop} {dt}, {shape}, 1, r2, @0x{acc:x}, @0x{sl:x}"
                                );
                            }
                        }
                        Stage::Store { access, value } => {
                            let dt = k.expr(*value).dtype;
                            let sl = slot_addr(slot_of[value.0 as usize].unwrap_or(0));
                            let gm = self.gm_of(access.buf);
                            let a = self
                                .access_list
                                .iter()
                                .position(|x| std::ptr::eq(*x, access))
                                .unwrap_or(0);
                            let inner = access.inner_stride();
                            let off = self.offset(a, inner, "r4", &mut stores);
                            let vc = if inner == 1 { "r2" } else { "1" };
                            let _ = writeln!(
                                stores,
                                "    st {dt}, {shape}, 1, {vc}, b{gm}_{}, {off}, 0, @0x{sl:x}",
                                access.buf.0
                            );
                        }
                    }
                }
            }
        }
        Ok((loads, v_ops, stores))
    }
}

fn unary_op(u: UnaryOp) -> &'static str {
    match u {
        UnaryOp::Neg => "vneg",
        UnaryOp::Abs => "vabs",
        UnaryOp::Square => "vsquare",
        UnaryOp::Relu => "vrelu",
        UnaryOp::Exp => "vexp",
        UnaryOp::Log => "vlog",
        UnaryOp::Sqrt => "vsqrt",
        UnaryOp::Rsqrt => "vrsqrt",
        UnaryOp::Recip => "vrecip",
        UnaryOp::Tanh => "vtanh",
        UnaryOp::Sigmoid => "vsigmoid",
        UnaryOp::Gelu => "vgelu",
    }
}

fn binary_op(b: BinaryOp) -> &'static str {
    match b {
        BinaryOp::Add => "vadd",
        BinaryOp::Sub => "vsub",
        BinaryOp::Mul => "vmul",
        BinaryOp::Div => "vdiv",
        BinaryOp::Max => "vmax",
        BinaryOp::Min => "vmin",
    }
}

fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    s
}

/// Bytes a tile row of `w` elements of `dt` takes (for tests and tools).
pub fn row_bytes(w: usize, dt: DType) -> u64 {
    pitch(w as u64, dt)
}
