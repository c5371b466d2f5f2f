//! The verifier: rejects, before anything runs, every program the
//! interpreter could not run safely or that is certainly wrong: operands of
//! the wrong kind, an instruction on the wrong core type, dtypes an opcode
//! does not take, local buffers outside their memory or misaligned, valid
//! regions larger than their tile, jumps out of the program, unbalanced
//! flags, unknown GM or scalar arguments, falling off the end. What depends
//! on data (register values, GM offsets) is checked at run time and faults
//! with the pc. [`VerifiedProgram`] is the only thing the interpreter runs.

use super::{Foot, Inst, Kind, Opcode, Operand, Pipe, PipeSel, Program, Space, NUM_EVENTS};
use crate::config::DeviceConfig;
use crate::error::{DeviceError, Result};
use std::collections::HashMap;
use std::sync::Arc;
use tilejit_ir::DType;

/// A program that passed [`verify`] against the memory sizes in `limits`.
#[derive(Clone, Debug)]
pub struct VerifiedProgram {
    program: Arc<Program>,
    limits: [u32; 5],
}

impl VerifiedProgram {
    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The local memory sizes it was verified against, per [`Space`].
    pub fn limits(&self) -> [u32; 5] {
        self.limits
    }
}

/// Local memory capacity of `space` in `cfg`.
pub fn capacity(cfg: &DeviceConfig, space: Space) -> u32 {
    match space {
        Space::Ub => cfg.ub_bytes,
        Space::L1 => cfg.l1_bytes,
        Space::L0a => cfg.l0a_bytes,
        Space::L0b => cfg.l0b_bytes,
        Space::L0c => cfg.l0c_bytes,
    }
}

/// Verifies `p` for a device configured as `cfg`.
pub fn verify(p: Program, cfg: &DeviceConfig) -> Result<VerifiedProgram> {
    let reject = |pc: Option<usize>, msg: String| DeviceError::Verify {
        program: p.name.clone(),
        pc,
        msg,
    };
    if !super::is_ident(&p.name) {
        return Err(reject(
            None,
            format!("`{}` is not a valid program name", p.name.escape_debug()),
        ));
    }
    if p.gm.len() > 255 || p.args.len() > 255 {
        return Err(reject(None, "more than 255 GM or scalar arguments".into()));
    }
    let Some(last) = p.code.last() else {
        return Err(reject(None, "the program is empty".into()));
    };
    if !matches!(last.op, Opcode::End | Opcode::Jmp) {
        return Err(reject(
            Some(p.code.len() - 1),
            "the last instruction must be `end` or `jmp` (execution would run off the end)".into(),
        ));
    }
    let mut flags: HashMap<(Pipe, Pipe, u8), i64> = HashMap::new();
    for (pc, inst) in p.code.iter().enumerate() {
        check_inst(&p, inst, cfg, &mut flags).map_err(|m| reject(Some(pc), m))?;
    }
    let mut unbalanced: Vec<_> = flags.into_iter().filter(|&(_, n)| n != 0).collect();
    unbalanced.sort_by_key(|&((s, d, e), _)| (s.index(), d.index(), e));
    if let Some(((s, d, e), n)) = unbalanced.first() {
        let (more, what) = if *n > 0 { (*n, "setf") } else { (-n, "waitf") };
        return Err(reject(
            None,
            format!(
                "unbalanced flags: ({}, {}, {e}) has {more} more `{what}` than its partner",
                s.name(),
                d.name()
            ),
        ));
    }
    let limits = Space::ALL.map(|s| capacity(cfg, s));
    Ok(VerifiedProgram {
        program: Arc::new(p),
        limits,
    })
}

fn check_inst(
    p: &Program,
    inst: &Inst,
    cfg: &DeviceConfig,
    flags: &mut HashMap<(Pipe, Pipe, u8), i64>,
) -> std::result::Result<(), String> {
    let info = inst.info();
    let mn = info.mnemonic;
    if inst.args.len() != info.operands.len() {
        return Err(format!(
            "`{mn}` takes {} operands, has {}",
            info.operands.len(),
            inst.args.len()
        ));
    }
    if !info.cores.has(p.core) {
        return Err(format!("`{mn}` does not exist on {} cores", p.core.name()));
    }
    for (&(name, kind), arg) in info.operands.iter().zip(&inst.args) {
        if !arg.fits(kind) {
            return Err(format!(
                "operand `{name}` of `{mn}` must be {kind:?}, is {arg:?}"
            ));
        }
    }
    check_dtypes(inst)?;
    let (rows, cols) = inst.shape().unwrap_or((1, 1));
    if rows == 0 || cols == 0 {
        return Err(format!("`{mn}`: empty tile shape {rows}x{cols}"));
    }
    if let Some((m, k, n)) = inst.mkn() {
        if m == 0 || k == 0 || n == 0 {
            return Err(format!("`{mn}`: empty matmul shape {m}x{k}x{n}"));
        }
    }
    for (&(name, kind), arg) in info.operands.iter().zip(&inst.args) {
        match (kind, *arg) {
            (Kind::Mem(space, foot), Operand::Addr(a)) => {
                check_mem(inst, name, space, foot, a, cfg)?
            }
            (Kind::Val, Operand::Imm(v)) => {
                let limit = match name {
                    "vrows" => Some(rows),
                    "vcols" => Some(cols),
                    _ => None,
                };
                if v < 0 && matches!(name, "vrows" | "vcols" | "offset" | "stride" | "cstride") {
                    return Err(format!("`{mn}`: `{name}` = {v} is negative"));
                }
                if let Some(limit) = limit {
                    if v as u64 > limit {
                        return Err(format!("`{mn}`: `{name}` = {v} exceeds the tile's {limit}"));
                    }
                }
                if matches!(inst.op, Opcode::Div | Opcode::Rem) && v == 0 {
                    return Err(format!("`{mn}` by the constant 0"));
                }
                if matches!(inst.op, Opcode::Shl | Opcode::Shr) && !(0..64).contains(&v) {
                    return Err(format!("`{mn}` by {v}: shifts must be 0..64"));
                }
            }
            (Kind::Gm, Operand::Gm(g)) if g as usize >= p.gm.len() => {
                return Err(format!(
                    "`{mn}`: GM argument {g} is not declared ({} declared)",
                    p.gm.len()
                ));
            }
            (Kind::Label, Operand::Label(t)) if t as usize >= p.code.len() => {
                return Err(format!(
                    "`{mn}` jumps to {t}, outside the program (0..{})",
                    p.code.len()
                ));
            }
            (Kind::Pipe, Operand::Pipe(pipe)) if !pipe.exists_on(p.core) => {
                return Err(format!(
                    "`{mn}`: a {} core has no pipe `{}`",
                    p.core.name(),
                    pipe.name()
                ));
            }
            (Kind::Event, Operand::Event(e)) if e >= NUM_EVENTS => {
                return Err(format!("`{mn}`: event {e} out of range 0..{NUM_EVENTS}"));
            }
            (Kind::Imm, Operand::Imm(v)) => match (inst.op, name) {
                (Opcode::Ldarg, _) if v < 0 || v as usize >= p.args.len() => {
                    return Err(format!(
                        "`ldarg`: scalar argument {v} is not declared ({} declared)",
                        p.args.len()
                    ));
                }
                (Opcode::Mmad, "acc") | (Opcode::Fixp | Opcode::Fixpx, "relu")
                    if !(0..=1).contains(&v) =>
                {
                    return Err(format!("`{mn}`: `{name}` must be 0 or 1, is {v}"));
                }
                _ => {}
            },
            _ => {}
        }
    }
    if let PipeSel::Operand(_) = info.pipe {
        let (src, dst, ev) = (inst.pipe(0), inst.pipe(1), inst.event(2));
        if src == dst {
            return Err(format!("`{mn}` between a pipe and itself ({})", src.name()));
        }
        *flags.entry((src, dst, ev)).or_insert(0) += if inst.op == Opcode::Setf { 1 } else { -1 };
    }
    Ok(())
}

fn check_mem(
    inst: &Inst,
    name: &str,
    space: Space,
    foot: Foot,
    addr: u32,
    cfg: &DeviceConfig,
) -> std::result::Result<(), String> {
    let mn = inst.op.mnemonic();
    if !addr.is_multiple_of(32) {
        return Err(format!(
            "`{mn}`: `{name}` at {} 0x{addr:x} is not 32-byte aligned",
            space.name()
        ));
    }
    let bytes = inst.footprint(foot);
    let cap = capacity(cfg, space) as u64;
    if addr as u64 + bytes > cap {
        return Err(format!(
            "`{mn}`: `{name}` covers {} bytes 0x{addr:x}..0x{:x}, beyond its {cap} bytes",
            space.name(),
            addr as u64 + bytes
        ));
    }
    Ok(())
}

fn check_dtypes(inst: &Inst) -> std::result::Result<(), String> {
    use Opcode::*;
    let Some(dt) = inst.dtype() else {
        return Ok(());
    };
    let mn = match inst.unary(6) {
        Some(u) if inst.op == Vunary => format!("vunary {}", u.name()),
        _ => inst.op.mnemonic().to_string(),
    };
    let ok = match inst.op {
        // The op table's dtype rule.
        Vunary => inst.unary(6).is_some_and(|u| u.accepts(dt)),
        Vadd | Vsub | Vmul | Vdiv | Vmax | Vmin | Vpow | Vrem | Vadds | Vmuls | Vmaxs | Vmins
        | Vrsum | Vrmax | Vrmin | Vrprod => dt != DType::Bool,
        // The op table's rows without float semantics.
        Vand | Vor | Vxor | Vshl | Vshr => dt.is_int(),
        Mmad | Mvl0a | Mvl0b | Ldl1c => matches!(dt, DType::F16 | DType::BF16 | DType::F32),
        Fixp | Fixpx => matches!(dt, DType::F16 | DType::BF16 | DType::F32),
        Ldg => matches!(inst.dtype2(), Some(DType::I32 | DType::I64)),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("`{mn}` does not take dtype {dt}"))
    }
}
