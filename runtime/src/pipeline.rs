//! The compile pipeline, as the list of its stages:
//!
//! ```text
//! traced graph --verify--> --simplify--> --verify--> optimised graph
//!              --fuse--> kernels --verify-kernels--> --codegen-host--> HostProgram
//!                                                    --codegen-sim-->  SimProgram (on first Sim run)
//! ```
//!
//! [`optimize`] and [`lower`] are the shared front half; each backend adds
//! its codegen stage. Every stage runs under a [`StageTimes`], whose stage
//! names are what `TILEJIT_LOG=timing` prints. The graph verifier runs before and after `simplify`; the
//! pass-by-pass and kernel verifiers run in debug builds and tests, where
//! a pass bug should fail loudly.

use crate::error::RuntimeError;
use std::fmt;
use std::time::{Duration, Instant};
use tilejit_ir::kernel::{fuse, verify_program, KernelProgram};
use tilejit_ir::passes::simplify;
use tilejit_ir::verify::verify;
use tilejit_ir::Graph;

/// One stage of the pipeline.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The graph verifier (on the traced graph, and again after `simplify`).
    Verify,
    /// `fold constants -> CSE -> DCE`.
    Simplify,
    /// Graph -> kernel IR.
    Fuse,
    /// The kernel IR verifier (debug builds and tests).
    VerifyKernels,
    /// Kernels -> Cranelift native code (through the kernel cache).
    CodegenHost,
    /// Kernels -> device bytecode (through the kernel cache).
    CodegenSim,
}

impl Stage {
    /// The stage's name in logs and dumps.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Verify => "verify",
            Stage::Simplify => "simplify",
            Stage::Fuse => "fuse",
            Stage::VerifyKernels => "verify-kernels",
            Stage::CodegenHost => "codegen-host",
            Stage::CodegenSim => "codegen-sim",
        }
    }
}

/// How long each stage of one compile took, in the order they ran.
#[derive(Clone, Debug, Default)]
pub struct StageTimes {
    /// Stages and their times (a stage that ran twice appears twice).
    pub stages: Vec<(Stage, Duration)>,
}

impl StageTimes {
    /// Runs `f` as `stage`, recording its time.
    pub fn run<T>(&mut self, stage: Stage, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let r = f();
        self.stages.push((stage, start.elapsed()));
        r
    }

    /// The time of all stages together.
    pub fn total(&self) -> Duration {
        self.stages.iter().map(|(_, d)| *d).sum()
    }

    /// With `TILEJIT_LOG=timing`, one stderr line for the compile of `what`.
    pub fn log(&self, what: &str) {
        if crate::config::config().log.timing {
            eprintln!("tilejit: timing {what}: {self}");
        }
    }
}

impl fmt::Display for StageTimes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (s, d)) in self.stages.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} {:.3} ms", s.name(), d.as_secs_f64() * 1e3)?;
        }
        write!(f, " (total {:.3} ms)", self.total().as_secs_f64() * 1e3)
    }
}

/// The constants a graph's nodes refer to, in index order: what a compiled
/// program keeps beside its kernels.
pub(crate) fn constants(g: &Graph) -> Vec<tilejit_ir::Array> {
    g.constants().iter().map(|c| c.0.clone()).collect()
}

/// Traced graph -> optimised graph: verify, simplify, verify.
pub fn optimize(traced: &Graph, t: &mut StageTimes) -> Result<Graph, RuntimeError> {
    t.run(Stage::Verify, || verify(traced))?;
    let optimized = t.run(Stage::Simplify, || simplify(traced, cfg!(debug_assertions)))?;
    t.run(Stage::Verify, || verify(&optimized))?;
    Ok(optimized)
}

/// Optimised graph -> kernels: fuse, then (debug builds) verify the kernels.
pub fn lower(graph: &Graph, t: &mut StageTimes) -> Result<KernelProgram, RuntimeError> {
    let kernels = t.run(Stage::Fuse, || fuse(graph))?;
    if cfg!(debug_assertions) {
        t.run(Stage::VerifyKernels, || verify_program(&kernels))?;
    }
    Ok(kernels)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stages run in pipeline order, and a verifier error in the input
    /// stops the pipeline at the first stage.
    #[test]
    fn stages_run_in_order() {
        let g = tilejit_ir::text::parse(
            "graph {\n  %0 = input 0 : f32[4,8]\n  %1 = exp %0 : f32[4,8]\n  return %1\n}",
        )
        .expect("parses");
        let mut t = StageTimes::default();
        let opt = optimize(&g, &mut t).expect("optimises");
        lower(&opt, &mut t).expect("lowers");
        let names: Vec<&str> = t.stages.iter().map(|(s, _)| s.name()).collect();
        // The kernel verifier runs in debug builds only.
        let mut want = vec!["verify", "simplify", "verify", "fuse"];
        if cfg!(debug_assertions) {
            want.push("verify-kernels");
        }
        assert_eq!(names, want);
        let text = t.to_string();
        assert!(
            text.starts_with("verify ") && text.contains("total"),
            "{text}"
        );
    }
}
