//! Matmul kernels: AIC tasks over output tiles for the cube's dtypes, and
//! a row-by-row vector-core form for f64 and integers.

use super::{assemble_verified, sanitize, unsupported, DeviceKernel};
use crate::CodegenError;
use std::fmt::Write;
use tilejit_device::isa::pitch;
use tilejit_device::{CoreType, DeviceConfig};
use tilejit_ir::kernel::{BufId, Kernel};
use tilejit_ir::DType;

/// The cube's tile: `TM x TK` by `TK x TN` per multiply-accumulate.
const TM: usize = 64;
const TK: usize = 64;
const TN: usize = 64;

/// A matmul as AIC tasks over output tiles: each tile loads A and B panels
/// into L1 per K step, moves them to L0A/L0B, multiplies into L0C (the
/// first K step overwrites, later ones accumulate) and the fixpipe writes
/// the tile to the product buffer. Loads zero-fill past the matrix edge, so
/// K, M and N tails need no special code.
pub(super) fn compile_matmul(
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
    // An empty output (m or n = 0) has no tiles and so no tasks; the
    // divisors only have to be legal. With k = 0 the one K step multiplies
    // zero-filled panels, so the product is zeros.
    let (dmt, dnt) = (mt.max(1), nt.max(1));
    let _ = writeln!(
        s,
        "    rem r4, r0, {dnt}\n    div r12, r0, {dnt}\n    rem r3, r12, {dmt}\n    div r2, r12, {dmt}"
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
    let program = assemble_verified(k, &s, cfg)?;
    Ok(DeviceKernel {
        name: format!("{}/matmul", k.name),
        core: CoreType::Aic,
        program,
        asm: s,
        buffers: vec![mm.a, mm.b, mm.out],
        units: tiles,
        tile_units: 1,
        extra: std::sync::Arc::new(Vec::new()),
    })
}

/// A matmul in a dtype the cube does not take (f64, i32, i64) on the
/// vector cores: each task computes whole output rows, a chunk of columns
/// at a time, as `sum_p a[i,p] * b[p, cols]` (a scalar broadcast, a
/// multiply and an add per step, in the dtype: the reference's order and
/// rounding, so results are exact).
pub(super) fn compile_matmul_vector(
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
    // With m = 0 there are no tasks; the divisor only has to be legal.
    let _ = writeln!(
        s,
        "    div r2, r0, {}\n    rem r3, r0, {}",
        m.max(1),
        m.max(1)
    );
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
    let program = assemble_verified(k, &s, cfg)?;
    Ok(DeviceKernel {
        name: format!("{}/matmul", k.name),
        core: CoreType::Aiv,
        program,
        asm: s,
        buffers: vec![mm.a, mm.b, mm.out],
        units: b * m,
        tile_units: 1,
        extra: std::sync::Arc::new(Vec::new()),
    })
}
