//! Compiler warm-up: the first compile in a process runs Cranelift's code
//! cold (its pages, caches and heap) and takes about twice as long as a
//! warm one. The first tensor a program makes therefore starts
//! [`warm_up`] (the frontend calls it from every concrete tensor's
//! constructor; a jit call's trace calls it too): a pool thread compiles a
//! small kernel and drops it, so the real compile that follows finds much
//! of Cranelift warm. The warm-up kernel never enters the kernel cache,
//! logs nothing and changes no result.
//!
//! It starts at the first tensor, not the first trace, because most
//! programs make their inputs first, which gives it time to finish. It runs
//! on a pool thread, not a thread of its own: on 2 cores a third runnable
//! thread time-slices with the first run. Nor is the first real compile
//! handed to the warmed thread: the trace can end before the warm-up does,
//! and the compile would then wait for it.
//! `TILEJIT_WARMUP=0` (or `off`, `false`, `no`) turns it off. It is also
//! skipped when the on-disk kernel cache already holds entries: kernels
//! then mostly load, and a warm-up compile would only compete with the
//! loads for the two cores (a cache of another build's entries costs one
//! colder first compile).

use tilejit_codegen::host::{compile, CodegenOptions};
use tilejit_ir::kernel::{fuse, BufId};
use tilejit_ir::IrError;

/// A row reduction feeding elementwise math, the shape of the kernels jit
/// functions make most (norms, softmax): it runs the lowering's reduction,
/// broadcast and vector-loop paths.
const WARM_UP_GRAPH: &str = "graph {
  %0 = input 0 : f32[8,64]
  %1 = reduce_sum %0 axes=[1] : f32[8,1]
  %2 = broadcast %1 : f32[8,64]
  %3 = sub %0, %2 : f32[8,64]
  %4 = mul %3, %3 : f32[8,64]
  return %4
}";

/// Starts the warm-up once per process (later calls return at once), on the
/// rayon pool, unless `TILEJIT_WARMUP=0`. This starts rayon's global pool:
/// a program that configures it (`ThreadPoolBuilder::build_global`) does so
/// before its first tensor.
#[inline]
pub fn warm_up() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    // Inlined as one load: every new tensor passes here, and a call in
    // the middle of building one spilled it to the stack and back.
    if !STARTED.is_completed() {
        start_warm_up(&STARTED);
    }
}

#[cold]
#[inline(never)]
fn start_warm_up(started: &std::sync::Once) {
    started.call_once(|| {
        if !crate::config::config().warmup {
            return;
        }
        let disk = crate::kernel_cache::disk::DiskCache::from_config();
        if disk.is_some_and(|d| d.has_entries()) {
            return;
        }
        rayon::spawn(|| {
            // A failure only means a colder first compile.
            let _ = compile_warm_up_kernels();
        });
    });
}

/// Compiles the warm-up graph's kernels and drops the code; returns how
/// many it compiled.
fn compile_warm_up_kernels() -> Result<usize, IrError> {
    let graph = tilejit_ir::text::parse(WARM_UP_GRAPH)?;
    let prog = fuse(&graph)?;
    let dtype_of = |b: BufId| prog.buffer(b).ty.dtype;
    let mut compiled = 0;
    for k in &prog.kernels {
        if compile(k, &dtype_of, CodegenOptions::default()).is_ok() {
            compiled += 1;
        }
    }
    Ok(compiled)
}

#[cfg(test)]
mod tests {
    /// The warm-up really compiles (a graph that stopped parsing or fusing
    /// would silently warm nothing).
    #[test]
    fn the_warm_up_kernel_compiles() {
        assert_eq!(super::compile_warm_up_kernels(), Ok(1));
    }
}
