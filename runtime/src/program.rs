//! `Program`: what a jit function's handler cache holds for one signature.
//! Compiling = verify the traced graph, run the pass pipeline, verify again.
//! Running executes the optimised graph; until the host backend lands, on the
//! reference interpreter.

use crate::error::RuntimeError;
use std::time::{Duration, Instant};
use tilejit_device::Target;
use tilejit_ir::passes::simplify;
use tilejit_ir::verify::verify;
use tilejit_ir::{interp, Array, Graph, Lit};

/// A compiled program.
#[derive(Debug)]
pub struct Program {
    traced: Graph,
    optimized: Graph,
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
        Ok(Program {
            traced,
            optimized,
            compile_time: start.elapsed(),
        })
    }

    /// Runs the program on concrete inputs and parameter values.
    pub fn run(&self, inputs: &[Array], params: &[Lit]) -> Result<Vec<Array>, RuntimeError> {
        Ok(interp::run(&self.optimized, inputs, params)?)
    }

    /// The graph as traced, before any pass.
    pub fn traced(&self) -> &Graph {
        &self.traced
    }

    /// The graph after the pass pipeline (what runs).
    pub fn optimized(&self) -> &Graph {
        &self.optimized
    }

    /// Time spent verifying and optimising.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// Where it runs.
    pub fn target(&self) -> Target {
        Target::Reference
    }
}
