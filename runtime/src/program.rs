//! `Program`: what a jit function's handler cache holds for one signature.
//! Compiling = verify the traced graph, run the pass pipeline, verify again,
//! fuse into kernels and compile them to native code (through the kernel
//! cache). Running launches the kernels; `run_reference` runs the optimised
//! graph on the reference interpreter instead (the oracle).

use crate::error::RuntimeError;
use std::time::{Duration, Instant};
use tilejit_device::Target;
use tilejit_ir::passes::simplify;
use tilejit_ir::verify::verify;
use tilejit_ir::{interp, Array, Graph, Lit};

use crate::host::HostProgram;
use crate::sim::{SimProgram, SimRun};
use std::sync::{Arc, OnceLock};

/// A compiled program.
#[derive(Debug)]
pub struct Program {
    traced: Graph,
    optimized: Graph,
    host: HostProgram,
    /// The bytecode form, compiled on the first Sim run.
    sim: OnceLock<Result<Arc<SimProgram>, RuntimeError>>,
    compile_time: Duration,
}

impl Program {
    /// Verifies and optimises a traced graph.
    pub fn compile(traced: Graph) -> Result<Program, RuntimeError> {
        let start = Instant::now();
        verify(&traced)?;
        // The verifier between passes is cheap next to tracing; keep it on
        // in debug builds and tests, where a pass bug should fail loudly.
        let optimized = simplify(&traced, cfg!(debug_assertions))?;
        verify(&optimized)?;
        if crate::kernel_cache::dump_dir().is_some() {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            crate::kernel_cache::dump(
                &format!("program-{}-{n}", std::process::id()),
                &[
                    ("traced.graph", &traced.to_string()),
                    ("graph", &optimized.to_string()),
                ],
            );
        }
        let host = HostProgram::compile(&optimized)?;
        Ok(Program {
            traced,
            optimized,
            host,
            sim: OnceLock::new(),
            compile_time: start.elapsed(),
        })
    }

    /// Runs the program's native kernels on concrete inputs and parameter
    /// values.
    pub fn run(&self, inputs: &[Array], params: &[Lit]) -> Result<Vec<Array>, RuntimeError> {
        self.host.run(inputs, params)
    }

    /// The program compiled for the simulated device (on first use; the
    /// result, error included, is kept).
    pub fn sim(&self) -> Result<Arc<SimProgram>, RuntimeError> {
        self.sim
            .get_or_init(|| SimProgram::compile(&self.optimized).map(Arc::new))
            .clone()
    }

    /// Runs on the simulated accelerator: inputs copied to GM, kernels
    /// launched as tile tasks, outputs copied back.
    pub fn run_sim(
        &self,
        inputs: &[Array],
        params: &[Lit],
        profile: bool,
    ) -> Result<SimRun, RuntimeError> {
        self.sim()?.run(inputs, params, profile)
    }

    /// Runs the optimised graph on the reference interpreter.
    pub fn run_reference(
        &self,
        inputs: &[Array],
        params: &[Lit],
    ) -> Result<Vec<Array>, RuntimeError> {
        Ok(interp::run(&self.optimized, inputs, params)?)
    }

    /// The fused, compiled form.
    pub fn host(&self) -> &HostProgram {
        &self.host
    }

    /// The graph as traced, before any pass.
    pub fn traced(&self) -> &Graph {
        &self.traced
    }

    /// The graph after the pass pipeline (what runs).
    pub fn optimized(&self) -> &Graph {
        &self.optimized
    }

    /// Time spent verifying, optimising, fusing and compiling (kernels found
    /// in the kernel cache cost a lookup).
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// Where it runs.
    pub fn target(&self) -> Target {
        Target::Host
    }
}

/// Runs a graph eagerly: fused and compiled (kernels come from the kernel
/// cache, so a repeated op costs a lookup, not a compile), without the
/// simplify passes (an eager graph is one op on inputs).
pub fn run_eager(g: &Graph, inputs: &[Array]) -> Result<Vec<Array>, RuntimeError> {
    HostProgram::compile(g)?.run(inputs, &[])
}

/// [`run_eager`] on the simulated device.
pub fn run_eager_sim(g: &Graph, inputs: &[Array]) -> Result<Vec<Array>, RuntimeError> {
    Ok(SimProgram::compile(g)?.run(inputs, &[], false)?.0)
}
