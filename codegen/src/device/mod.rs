//! Kernel IR -> bytecode for the simulated accelerator's vector cores.
//!
//! One kernel becomes one AIV core function; a launch runs it as many tile
//! tasks that differ only in their scalar arguments (`lo`, `hi`: the range
//! of units the task covers, then the kernel's sizes and strides, then the
//! program's params). The function loops over its range one tile at a
//! time:
//!
//! - **flat kernels** (one dimension, no reduction) take tiles of `1 x W`
//!   elements, the last one partial (the valid region is `min(W, hi - i)`);
//! - **row kernels** take one row per tile (the whole row in UB, in a
//!   `1 x W` tile where `W` is the widest row of the kernel's class),
//!   computing each access's row offset from the row index with scalar
//!   div/mod by the row dimensions, so reductions are whole-row
//!   `vrsum`/`vrmax`/`vrmin`/`vrprod` over the row's valid columns and row values
//!   broadcast back with `vbrow`.
//!
//! **Size-generic code.** Like host code, device code depends only on the
//! kernel's structure ([`Kernel::device_structure_text`]): every domain size and
//! every stride (outer ones, and inner ones other than 0 and 1) is a
//! scalar argument ([`size_args`], read with `ldarg` once per task or per
//! row, never per element), trip counts and tail tiles are computed from
//! them at run time, and what depends on the sizes outside the code (a
//! launch's units, workspace lengths) is stated as a function of the
//! kernel ([`Units`], [`Extent`]) that the launcher evaluates. The few
//! choices the generator still makes from the sizes form a coarse class
//! ([`plan_class`], part of the kernel cache key): flat; whole rows,
//! double buffered when two sets of the class's widest row fit UB, else
//! single; long rows in column chunks; a few long rows split across tasks.
//! Matmuls have no size class (the cube or vector form follows the dtype).
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
//! registers, scalar arguments or UB than a core has) is
//! [`CodegenError::SimUnsupported`], never a wrong result; a generator
//! that contradicts itself is [`CodegenError::Internal`].

use crate::CodegenError;
use std::sync::Arc;
use tilejit_device::isa::asm::disassemble;
use tilejit_device::isa::emit::{Arg, ProgramBuilder};
use tilejit_device::{CoreType, DeviceConfig, VerifiedProgram};
use tilejit_ir::kernel::{BufId, Kernel};
use tilejit_ir::DType;

mod matmul;
mod tile;
mod vector;

use matmul::{compile_matmul, compile_matmul_vector};
use vector::compile_vector;

/// A kernel compiled for the simulated device. Its code is size-generic:
/// the kernel's sizes and strides are scalar arguments ([`size_args`]), so
/// what depends on them (units, workspace lengths) is stated as a function
/// of the kernel ([`Units`], [`Extent`]) that the launcher evaluates for
/// the shape it runs.
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
    /// GM arguments in order, by local number: `BufId(i)` is the `i`-th
    /// of [`Kernel::local_buffers`] (so that kernels of one structure,
    /// whatever their program's buffer numbering, share the code).
    pub buffers: Vec<BufId>,
    /// Units to split over tasks.
    pub units: Units,
    /// Units one tile covers (a task's range is always a multiple of it).
    pub tile_units: usize,
    /// Workspace buffers (dtype, length) appended to the GM arguments.
    /// The core functions of one kernel share one list (the same `Arc`):
    /// allocate it once per kernel.
    pub extra: Arc<Vec<(DType, Extent)>>,
}

/// What a core function's task ranges split, given the kernel's sizes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Units {
    /// [`Kernel::units`]: elements of a flat kernel, rows otherwise.
    Kernel,
    /// The columns of a row (split long rows: a stage over column ranges).
    Cols,
    /// The rows (split long rows: a combine function).
    Rows,
    /// A cube matmul's 64x64 output tiles, over the batch (and a
    /// convolution's channel groups).
    CubeTiles,
    /// A vector-core matmul's output rows, over the batch.
    MatRows,
}

impl Units {
    /// The number of units for kernel `k` (the kernel the function was
    /// compiled for, or any of the same structure and plan class).
    pub fn of(self, k: &Kernel) -> usize {
        let mm = k.matmul.as_ref();
        let batch = mm.map_or(1, |m| m.batch.max(1));
        match self {
            Units::Kernel => k.units(),
            Units::Cols => k.cols(),
            Units::Rows => k.rows(),
            // A convolution's tiles are per channel group.
            Units::CubeTiles => mm.map_or(0, |m| {
                let groups = m.im2col.map_or(1, |ic| (ic.window.groups as usize).max(1));
                batch * groups * m.m.div_ceil(matmul::TM) * (m.n / groups).div_ceil(matmul::TN)
            }),
            Units::MatRows => mm.map_or(0, |m| batch * m.m),
        }
    }

    /// Its byte in the kernel cache's encoding.
    pub fn to_byte(self) -> u8 {
        self as u8
    }

    /// The units a byte of [`Units::to_byte`] stands for.
    pub fn from_byte(b: u8) -> Option<Units> {
        [
            Units::Kernel,
            Units::Cols,
            Units::Rows,
            Units::CubeTiles,
            Units::MatRows,
        ]
        .get(b as usize)
        .copied()
    }
}

/// A workspace buffer's length in elements, given the kernel's sizes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Extent {
    /// One element per row and column chunk of this width.
    RowChunks(usize),
    /// One element per row.
    Rows,
}

impl Extent {
    /// The length for kernel `k`.
    pub fn of(self, k: &Kernel) -> usize {
        match self {
            Extent::RowChunks(w) => k.rows() * k.cols().div_ceil(w.max(1)),
            Extent::Rows => k.rows(),
        }
    }
}

/// The size arguments every core function of `k` takes after `lo` and
/// `hi` (and before the params): each domain dimension, then each access's
/// strides (accesses in [`Kernel::accesses`] order, one per domain
/// dimension), then each access's offset, then for a matmul its batch, m,
/// k and n, and for a convolution's its image's channels, height and
/// width, for another matmul its operand views (offset and strides of `a`,
/// then of `b`). The launcher
/// passes these for the shape it runs; the code reads them with `ldarg`.
pub fn size_args(k: &Kernel) -> Vec<i64> {
    let mut v: Vec<i64> = k.domain.iter().map(|&d| d as i64).collect();
    for a in k.accesses() {
        v.extend(a.strides.iter().copied());
    }
    v.extend(k.accesses().map(|a| a.offset));
    if let Some(mm) = &k.matmul {
        v.extend([mm.batch, mm.m, mm.k, mm.n].map(|d| d as i64));
        if let Some(ic) = &mm.im2col {
            v.extend([ic.c, ic.h, ic.w].map(|d| d as i64));
        } else {
            for view in [mm.view_a(), mm.view_b()] {
                v.push(view.offset);
                v.extend(view.strides);
            }
        }
    }
    v
}

/// Where each size argument of a kernel sits among a function's scalar
/// arguments (see [`size_args`]).
#[derive(Copy, Clone, Debug)]
pub(crate) struct SizeArgs {
    rank: usize,
    accesses: usize,
    matmul: bool,
    im2col: bool,
}

impl SizeArgs {
    pub(crate) fn new(k: &Kernel) -> SizeArgs {
        SizeArgs {
            rank: k.domain.len(),
            accesses: k.accesses().count(),
            matmul: k.matmul.is_some(),
            im2col: k.matmul.as_ref().is_some_and(|m| m.im2col.is_some()),
        }
    }

    /// How many there are.
    pub(crate) fn len(&self) -> usize {
        let mm = match (self.matmul, self.im2col) {
            (false, _) => 0,
            (true, false) => 12,
            (true, true) => 7,
        };
        self.rank * (1 + self.accesses) + self.accesses + mm
    }

    /// Declares `lo`, `hi` and the size arguments (`s0`..), in order.
    pub(crate) fn declare(&self, b: &mut ProgramBuilder) -> (Arg, Arg) {
        let (lo, hi) = (b.arg("lo", 0), b.arg("hi", 0));
        for i in 0..self.len() {
            b.arg(&format!("s{i}"), 0);
        }
        (lo, hi)
    }

    /// Domain dimension `d`.
    pub(crate) fn dim(&self, d: usize) -> u32 {
        2 + d as u32
    }

    /// Access `a`'s stride along dimension `d`.
    pub(crate) fn stride(&self, a: usize, d: usize) -> u32 {
        (2 + self.rank * (1 + a) + d) as u32
    }

    /// Access `a`'s offset (elements from its buffer's start).
    pub(crate) fn offset(&self, a: usize) -> u32 {
        (2 + self.rank * (1 + self.accesses) + a) as u32
    }

    /// The matmul's batch, m, k, n (`i` = 0..4), then a convolution's
    /// channels, height and width (`i` = 4..7), or a matmul's operand
    /// views: `a`'s offset and batch, row and column strides (4..8), then
    /// `b`'s (8..12).
    pub(crate) fn mm(&self, i: usize) -> u32 {
        (2 + self.rank * (1 + self.accesses) + self.accesses + i) as u32
    }
}

/// The size-dependent choices the generator makes at compile time, as a
/// coarse class: two kernels of one structure and one class share their
/// code. Part of the Sim kernel cache key.
pub fn plan_class(k: &Kernel, cfg: &DeviceConfig) -> String {
    if k.domain.is_empty() {
        return "none".into();
    }
    // A matmul has no class of its own: its epilogue's decides.
    let plan = if k.matmul.is_some() {
        let mut epilogue = k.clone();
        epilogue.matmul = None;
        vector::plan(&epilogue, cfg)
    } else {
        vector::plan(k, cfg)
    };
    match plan {
        Ok(p) => format!("{p:?}"),
        Err(_) => "unsupported".into(),
    }
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
    // lo, hi, the sizes and the params must fit the 256 scalar arguments.
    let n_params = k.exprs.iter().filter_map(|n| match n.expr {
        tilejit_ir::kernel::Expr::Param(p) => Some(p as usize + 1),
        _ => None,
    });
    if 2 + SizeArgs::new(k).len() + n_params.max().unwrap_or(0) > 256 {
        return Err(unsupported(k, "more than 256 scalar arguments"));
    }
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
        out.extend(compile_vector(&epilogue, buf_dtype, cfg, SizeArgs::new(k))?);
    } else {
        out.extend(compile_vector(k, buf_dtype, cfg, SizeArgs::new(k))?);
    }
    let local = k.local_buffers();
    for d in &mut out {
        for b in &mut d.buffers {
            let i = local.iter().position(|x| x == b);
            *b = BufId(
                i.ok_or_else(|| internal(k, "a GM argument that is no local buffer"))? as u32,
            );
        }
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
            offset: 0,
            strides: vec![1],
        };
        let y = Access {
            buf: BufId(1),
            offset: 0,
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
    fn one_program_serves_every_size_of_a_class() {
        let cfg = DeviceConfig::default();
        let at = |n: usize| {
            let mut k = exp_kernel();
            k.domain = vec![n];
            let d = compile(&k, &|_| DType::F32, &cfg).expect("exp compiles");
            (plan_class(&k, &cfg), d[0].asm.clone(), size_args(&k))
        };
        let (small, big) = (at(3), at(70_001));
        assert_eq!(small.0, big.0, "one class");
        assert_eq!(small.1, big.1, "the same code");
        // Sizes, strides, then offsets.
        assert_eq!(
            (small.2, big.2),
            (vec![3, 1, 1, 0, 0], vec![70_001, 1, 1, 0, 0])
        );
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
