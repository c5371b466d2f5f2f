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
//! after its last use), a flag to MTE3, the stores. Where UB holds two sets
//! of slots, tiles alternate between them (double buffering): a tile's
//! loads wait only for the stores of the tile two back (an MTE3 -> MTE2
//! flag per set), so MTE2, V and MTE3 work on three tiles at once; else a
//! barrier separates tiles. Values are computed in each node's own
//! dtype with the reference interpreter's rounding, so results match it.
//!
//! Loads and stores with an inner stride other than 0 or 1 (transposes,
//! strided views) use the element-strided `ldx` and `stx`. A matmul kernel becomes two core
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
//! When there are only a few long rows (8 or fewer), each stage's column
//! range is split across tasks instead: reductions write one partial per
//! chunk to a GM workspace and a combine function per reduction folds them
//! per row (partial + combine tasks), so one big reduction uses many cores.
//!
//! Programs are built with the device's typed
//! [`ProgramBuilder`] (one method per opcode) and verified; their text comes from the
//! disassembler. What the generator cannot express (a kernel needing more
//! registers or UB than a core has) is [`CodegenError::SimUnsupported`],
//! never a wrong result; a generator that contradicts itself is
//! [`CodegenError::Internal`].

use crate::CodegenError;
use std::sync::Arc;
use tilejit_device::isa::asm::disassemble;
use tilejit_device::isa::emit::ProgramBuilder;
use tilejit_device::{CoreType, DeviceConfig, VerifiedProgram};
use tilejit_ir::kernel::{BufId, Kernel};
use tilejit_ir::DType;

mod matmul;
mod tile;
mod vector;

use matmul::{compile_matmul, compile_matmul_vector};
use vector::compile_vector;

/// A kernel compiled for the simulated device.
#[derive(Clone, Debug)]
pub struct DeviceKernel {
    /// The kernel's name.
    pub name: String,
    /// The core type its tasks run on.
    pub core: CoreType,
    /// The core function.
    pub program: VerifiedProgram,
    /// Its assembly text, from the disassembler (what the kernel cache
    /// shows).
    pub asm: String,
    /// GM arguments in order: the kernel's local buffers.
    pub buffers: Vec<BufId>,
    /// Units to split over tasks (elements for flat kernels, rows otherwise).
    pub units: usize,
    /// Units one tile covers (a task's range is always a multiple of it).
    pub tile_units: usize,
    /// Workspace buffers (dtype, elements) appended to the GM arguments.
    /// The core functions of one kernel share one list (the same `Arc`):
    /// allocate it once per kernel.
    pub extra: Arc<Vec<(DType, usize)>>,
}

/// Largest tile width of a flat kernel.
pub(crate) const MAX_FLAT_W: usize = 4096;

pub(crate) fn unsupported(k: &Kernel, what: impl Into<String>) -> CodegenError {
    CodegenError::SimUnsupported {
        kernel: k.name.clone(),
        what: what.into(),
    }
}

/// A contradiction inside the generator (a tilejit bug), never a wrong
/// program.
pub(crate) fn internal(k: &Kernel, what: impl Into<String>) -> CodegenError {
    CodegenError::Internal {
        kernel: k.name.clone(),
        what: what.into(),
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
        out.extend(compile_vector(&epilogue, buf_dtype, cfg)?);
    } else {
        out.extend(compile_vector(k, buf_dtype, cfg)?);
    }
    Ok(out)
}

/// Finishes and verifies a generated program; returns it with its
/// disassembly (the dump text). The verifier runs on every generated
/// program: a rejection is a code generator bug, reported with the text.
pub(crate) fn finish(
    k: &Kernel,
    b: ProgramBuilder,
    cfg: &DeviceConfig,
) -> Result<(VerifiedProgram, String), CodegenError> {
    let program = b.finish().map_err(|e| internal(k, e.to_string()))?;
    let asm = disassemble(&program);
    let program = tilejit_device::verify(program, cfg).map_err(|e| CodegenError::Bytecode {
        kernel: k.name.clone(),
        error: format!("{e}\n{asm}"),
    })?;
    Ok((program, asm))
}

pub(crate) fn sanitize(name: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use tilejit_device::isa::asm::assemble;
    use tilejit_ir::kernel::{Access, Expr, ExprId, ExprNode, Stage};
    use tilejit_ir::UnaryOp;

    /// `y = exp(x)` over 100 f32 elements.
    fn exp_kernel() -> Kernel {
        let x = Access {
            buf: BufId(0),
            strides: vec![1],
        };
        let y = Access {
            buf: BufId(1),
            strides: vec![1],
        };
        let node = |expr| ExprNode {
            expr,
            dtype: DType::F32,
        };
        Kernel {
            name: "exp".into(),
            domain: vec![100],
            loads: vec![x],
            exprs: vec![
                node(Expr::Load(0)),
                node(Expr::Unary(UnaryOp::Exp, ExprId(0))),
            ],
            scratch: Vec::new(),
            stages: vec![Stage::Store {
                access: y,
                value: ExprId(1),
            }],
            matmul: None,
            ops: vec!["exp"],
        }
    }

    #[test]
    fn dump_text_is_the_programs_disassembly() {
        let kernels = compile(&exp_kernel(), &|_| DType::F32, &DeviceConfig::default())
            .expect("exp compiles");
        for d in &kernels {
            let back = assemble(&d.asm).expect("the dump text assembles");
            assert_eq!(&back, d.program.program(), "{}", d.asm);
        }
    }

    #[test]
    fn a_builder_error_is_internal_and_names_the_kernel() {
        let mut b = ProgramBuilder::new("k_exp", CoreType::Aiv);
        let never = b.label();
        b.jmp(never);
        let err = finish(&exp_kernel(), b, &DeviceConfig::default())
            .expect_err("an unbound label is an error");
        assert!(
            matches!(&err, CodegenError::Internal { kernel, .. } if kernel == "exp"),
            "{err:?}"
        );
        assert!(err.to_string().contains("never bound"), "{err}");
    }

    #[test]
    fn a_verifier_rejection_is_bytecode_with_the_text() {
        let mut b = ProgramBuilder::new("k_exp", CoreType::Aiv);
        b.nop();
        let err = finish(&exp_kernel(), b, &DeviceConfig::default())
            .expect_err("a program that runs off its end is rejected");
        let CodegenError::Bytecode { error, .. } = &err else {
            panic!("{err:?}")
        };
        assert!(error.contains(".kernel k_exp aiv\n    nop"), "{error}");
    }
}
