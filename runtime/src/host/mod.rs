//! Running a fused program on the host: buffers, kernel launches in order,
//! each split into ranges over the rayon pool (tiny kernels stay on the
//! calling thread, where dispatch costs less than the work), matmuls through
//! `gemm`, f16/bf16 held as f32 between the program's boundaries (each
//! op's result rounded to its type).
//!
//! The module's files, one job each: this one holds the program type and
//! its codegen (kernels compiled through the cache, assembled with their
//! checked arguments); `store` the typed buffers of a run and the pool
//! they come from; `run` the general run loop and kernel launches;
//! `plan` the short way for one small kernel; `read_ahead` a product's
//! weights read ahead while the serial kernels before it run; `matmul`
//! matmul and tiled matmul kernels; `conv` convolution kernels.

mod awake;
mod conv;
mod matmul;
mod plan;
mod read_ahead;
mod run;
mod store;

pub(crate) use run::param_output;
pub(crate) use store::{recycle, Slot, Store};

use crate::error::RuntimeError;
use crate::flight::map_off_pool;
use crate::kernel_cache::{kernel_cache, CachedKernel, StoredCode};
use crate::pipeline::{self, Stage, StageTimes};
use plan::Tiny;
use std::sync::Arc;
use tilejit_codegen::host::{CheckedArgs, CodegenOptions};
use tilejit_ir::kernel::KernelProgram;
use tilejit_ir::{Array, Graph};

/// Below this many domain elements a kernel runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 16;

/// A program compiled for the host.
#[derive(Debug)]
pub struct HostProgram {
    /// What kernel observers see it as (a jit function and signature).
    name: String,
    prog: KernelProgram,
    code: Vec<Arc<CachedKernel>>,
    /// Per kernel, this program's buffers in the kernel's local order (the
    /// cached code may have been compiled for another program's buffers).
    locals: Vec<Vec<tilejit_ir::kernel::BufId>>,
    /// Per kernel, its scalar arguments (sizes, strides) when it takes no
    /// params: computed and bounds-checked once, not per call.
    fixed_args: Vec<Option<CheckedArgs>>,
    /// Per kernel, whether it writes no element (an empty output, or rows
    /// of no columns): then it has nothing to do, however many units it
    /// spans, and is not launched.
    idle: Vec<bool>,
    constants: Vec<Array>,
    /// The short way through a one-kernel program, when it has one.
    tiny: Option<Tiny>,
    /// Whether a run from outside the rayon pool moves onto it: the
    /// program launches several kernels over the pool's threads.
    on_pool: bool,
    /// Per kernel, whether it spreads over the pool ([`runs_in_parallel`]).
    parallel: Vec<bool>,
    /// Per kernel, the weight an idle worker reads ahead when it starts
    /// ([`read_ahead::plan`]).
    ahead: Vec<Option<tilejit_ir::kernel::BufId>>,
}

impl HostProgram {
    /// Fuses `g` and compiles every kernel (in parallel) through the cache.
    pub fn compile(g: &Graph) -> Result<HostProgram, RuntimeError> {
        HostProgram::compile_with(g, CodegenOptions::default())
    }

    /// [`HostProgram::compile`] with explicit code generation options (the
    /// cache keeps kernels of different options apart).
    pub fn compile_with(g: &Graph, opts: CodegenOptions) -> Result<HostProgram, RuntimeError> {
        let mut t = StageTimes::default();
        let prog = pipeline::lower(g, &mut t)?;
        t.run(Stage::CodegenHost, || {
            HostProgram::codegen(prog, pipeline::constants(g), opts, "eager")
        })
    }

    /// The codegen stage: compiles every kernel of `prog` (in parallel)
    /// through the kernel cache.
    pub(crate) fn codegen(
        prog: KernelProgram,
        constants: Vec<Array>,
        opts: CodegenOptions,
        name: &str,
    ) -> Result<HostProgram, RuntimeError> {
        start_thread_pool_for(&prog);
        let dtype_of = |b: tilejit_ir::kernel::BufId| prog.buffer(b).ty.dtype;
        let code = map_off_pool(&prog.kernels, |k| {
            kernel_cache().get_or_compile(k, &dtype_of, opts, name)
        })?;
        HostProgram::assemble(prog, code, constants, name)
    }

    /// A program from a snapshot's parts: each kernel's code is linked
    /// from `stored` (its image and the key it was made under) through the
    /// kernel cache, which compiles only a kernel whose image is missing
    /// or was made under another key. No fusion runs. Only
    /// `snapshot::load_code` calls this (`_vouch`).
    pub(crate) fn from_snapshot(
        prog: KernelProgram,
        constants: Vec<Array>,
        name: &str,
        stored: &[Option<StoredCode<'_>>],
        _vouch: &crate::snapshot::CodeVouch,
    ) -> Result<HostProgram, RuntimeError> {
        start_thread_pool_for(&prog);
        let dtype_of = |b: tilejit_ir::kernel::BufId| prog.buffer(b).ty.dtype;
        let code = prog
            .kernels
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let stored = stored.get(i).copied().flatten();
                kernel_cache().get_or_load(k, &dtype_of, Default::default(), name, stored)
            })
            .collect::<Result<Vec<_>, _>>()?;
        HostProgram::assemble(prog, code, constants, name)
    }

    /// The program over `prog` with each kernel's compiled code.
    fn assemble(
        prog: KernelProgram,
        code: Vec<Arc<CachedKernel>>,
        constants: Vec<Array>,
        name: &str,
    ) -> Result<HostProgram, RuntimeError> {
        let locals = prog.kernels.iter().map(|k| k.local_buffers()).collect();
        // Kernels without params see the same args on every call: check
        // their bounds once here, leaving only buffer sizes per call.
        let fixed_args = prog
            .kernels
            .iter()
            .zip(&code)
            .map(|(k, c)| {
                let layout = c.code.layout();
                if layout.params > 0 {
                    return Ok(None);
                }
                c.code.check_args(layout.args(k, &[])).map(Some)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let numel = |b: tilejit_ir::kernel::BufId| prog.buffer(b).ty.shape.numel();
        let idle = prog
            .kernels
            .iter()
            .map(|k| {
                let stores = k.stages.iter().filter_map(|s| match s {
                    tilejit_ir::kernel::Stage::Store { access, .. } => Some(access.buf),
                    _ => None,
                });
                stores
                    .chain(k.matmul.as_ref().map(|m| m.out))
                    .map(numel)
                    .sum::<usize>()
                    == 0
            })
            .collect::<Vec<_>>();
        let tiny = Tiny::plan(&prog, &code, &fixed_args, &idle);
        let parallel: Vec<bool> = prog.kernels.iter().map(runs_in_parallel).collect();
        let ahead = read_ahead::plan(&prog, &parallel, &idle);
        let on_pool =
            parallel.iter().filter(|&&p| p).count() >= 2 && rayon::current_num_threads() > 1;
        Ok(HostProgram {
            on_pool,
            name: name.to_string(),
            prog,
            code,
            locals,
            fixed_args,
            idle,
            constants,
            tiny,
            parallel,
            ahead,
        })
    }

    /// The fused program.
    pub fn kernels(&self) -> &KernelProgram {
        &self.prog
    }

    /// The compiled kernels, in program order.
    pub fn code(&self) -> &[Arc<CachedKernel>] {
        &self.code
    }

    /// The constants its kernels read, by index.
    pub fn constants(&self) -> &[Array] {
        &self.constants
    }
}

/// Whether kernel `k` may spread over the pool's threads (as `launch`
/// and the matmul paths decide, by its size).
fn runs_in_parallel(k: &tilejit_ir::kernel::Kernel) -> bool {
    let work = k.domain.iter().product::<usize>();
    work >= PARALLEL_MIN
        || k.matmul
            .as_ref()
            .is_some_and(|m| m.im2col.is_some() || m.m * m.n * m.k >= matmul::PARALLEL_MIN)
}

/// Starts rayon's threads (once per process) without waiting for them, so
/// they come up while Cranelift compiles rather than inside the first
/// parallel launch (a fresh process's first call is measurably faster).
fn start_thread_pool() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| rayon::spawn(|| ()));
}

/// Starts rayon's threads if some kernel of `prog` is big enough to run
/// in parallel (before its compile, so they come up meanwhile).
fn start_thread_pool_for(prog: &KernelProgram) {
    if prog
        .kernels
        .iter()
        .any(|k| k.domain.iter().product::<usize>() >= PARALLEL_MIN)
    {
        start_thread_pool();
    }
}
