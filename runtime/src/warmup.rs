//! Compiler warm-up: the first compile in a process runs Cranelift's code
//! cold (its pages, caches and heap), which made W7's layernorm compile in
//! 1.31-1.36 ms against ~0.6 ms once warm. The first tensor a program
//! makes therefore starts [`warm_up`] (the frontend calls it from every
//! concrete tensor's constructor; a jit call's trace calls it too): a pool
//! thread compiles a small kernel and drops it, so the real compile that
//! follows finds much of Cranelift warm. The warm-up kernel never enters
//! the kernel cache, logs nothing and changes no result.
//!
//! Measured on W7 (alternating fresh processes, three rounds of 25-30
//! each way): the layernorm compile 1.31-1.36 -> 1.07-1.11 ms, the first
//! call's median 5.27 -> 5.00, 5.08 -> 4.81 and 5.60 -> 5.44 ms. A dedicated thread instead of a
//! pool thread made it slower (4.88 -> 5.87 ms): on 2 cores a third
//! runnable thread time-slices with the first run. Handing the first real
//! compile to the warmed thread made that compile 0.8-0.9 ms but the first
//! call slower (5.82 -> 7.10 ms): the trace ends before the warm-up
//! compile does, so the real compile waited for it. Starting at the first
//! tensor instead of the first trace (W7 makes its inputs first, as most
//! programs do) gives the warm-up time to finish: over 30 alternating fresh
//! processes the first call's median went 4.26 -> 4.03 ms (trace + compile
//! 1.44 -> 1.30 ms), and W6's per-call time did not move (one atomic load).
//! `TILEJIT_WARMUP=0` (or `off`, `false`, `no`) turns it off.

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
pub fn warm_up() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        if !warm_up_wanted(std::env::var("TILEJIT_WARMUP").ok().as_deref()) {
            return;
        }
        rayon::spawn(|| {
            // A failure only means a colder first compile.
            let _ = compile_warm_up_kernels();
        });
    });
}

/// Whether `TILEJIT_WARMUP` (unset, or its value) leaves the warm-up on:
/// `0`, `off`, `false` and `no` turn it off, `1`, `on`, `true` and `yes`
/// (and unset) leave it on; anything else is reported on stderr and
/// leaves it on.
fn warm_up_wanted(v: Option<&str>) -> bool {
    let Some(v) = v else { return true };
    match v.trim().to_ascii_lowercase().as_str() {
        "0" | "off" | "false" | "no" => false,
        "1" | "on" | "true" | "yes" => true,
        _ => {
            eprintln!("tilejit: ignoring TILEJIT_WARMUP={v:?} (expected 0 or 1)");
            true
        }
    }
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

    /// Off by any usual spelling of off, on by default and by any usual
    /// spelling of on; an unreadable value leaves the default.
    #[test]
    fn tilejit_warmup_values() {
        use super::warm_up_wanted as wanted;
        assert!(wanted(None));
        for off in ["0", "off", "FALSE", " no "] {
            assert!(!wanted(Some(off)), "{off:?}");
        }
        for on in ["1", "on", "True", "yes", "2", "maybe"] {
            assert!(wanted(Some(on)), "{on:?}");
        }
    }
}
