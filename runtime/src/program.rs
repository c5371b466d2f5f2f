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
use std::sync::{Arc, Mutex, OnceLock};

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
        let host = HostProgram::compile(&optimized)?;
        if crate::kernel_cache::dump_dir().is_some() {
            dump_program(&traced, &optimized, &host);
        }
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

/// A one-op (or small) eager graph without constants, by value: the key of
/// the eager program caches, so repeating an eager op skips fusing and the
/// kernel cache lookup.
#[derive(Clone, PartialEq, Eq, Hash)]
struct EagerKey {
    nodes: Vec<(tilejit_ir::Op, tilejit_ir::TensorType)>,
    outputs: Vec<tilejit_ir::NodeId>,
}

impl EagerKey {
    fn of(g: &Graph) -> Option<EagerKey> {
        g.constants().is_empty().then(|| EagerKey {
            nodes: g
                .ids()
                .map(|id| (g.node(id).op.clone(), g.ty(id)))
                .collect(),
            outputs: g.outputs.clone(),
        })
    }
}

/// Compiled eager programs, bounded (cleared when full: eager graphs are
/// cheap to rebuild, the bound only keeps memory in check).
struct EagerCache<P> {
    map: Mutex<ahash::AHashMap<EagerKey, Arc<P>>>,
}

const EAGER_CACHE_MAX: usize = 4096;

impl<P> EagerCache<P> {
    fn get_or(
        &self,
        g: &Graph,
        build: impl FnOnce() -> Result<P, RuntimeError>,
    ) -> Result<Arc<P>, RuntimeError> {
        let Some(key) = EagerKey::of(g) else {
            return build().map(Arc::new);
        };
        if let Some(p) = self.map.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok(p.clone());
        }
        let p = Arc::new(build()?);
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= EAGER_CACHE_MAX {
            map.clear();
        }
        map.insert(key, p.clone());
        Ok(p)
    }
}

/// Runs a small graph eagerly (the frontend's ops outside jit): fused and
/// compiled like any program, through the kernel cache, and kept in an
/// eager program cache keyed by the graph itself.
pub fn run_eager(g: &Graph, inputs: &[Array]) -> Result<Vec<Array>, RuntimeError> {
    static CACHE: OnceLock<EagerCache<HostProgram>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| EagerCache {
        map: Mutex::new(Default::default()),
    });
    cache
        .get_or(g, || HostProgram::compile(g))?
        .run(inputs, &[])
}

/// [`run_eager`] on the simulated device.
pub fn run_eager_sim(g: &Graph, inputs: &[Array]) -> Result<Vec<Array>, RuntimeError> {
    static CACHE: OnceLock<EagerCache<SimProgram>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| EagerCache {
        map: Mutex::new(Default::default()),
    });
    Ok(cache
        .get_or(g, || SimProgram::compile(g))?
        .run(inputs, &[], false)?
        .0)
}

/// `TILEJIT_DUMP` for one program: its graphs as traced and optimised,
/// its fused kernels (the kernel IR text form), and which dump files hold
/// each kernel's compiled forms. A kernel the cache already held was
/// dumped when it was compiled, maybe by another program: the `.keys`
/// file is how to find it.
fn dump_program(traced: &Graph, optimized: &Graph, host: &HostProgram) {
    use crate::kernel_cache::{dump, dump_stem};
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let kernels = host.kernels();
    let keys: String = kernels
        .kernels
        .iter()
        .zip(host.code())
        .map(|(k, c)| {
            let stem = dump_stem(&format!("{}-{}", k.name, c.key));
            format!("{} {} -> {stem}.{{kernel,clif,disasm}}\n", k.name, c.key)
        })
        .collect();
    dump(
        &format!("program-{}-{n}", std::process::id()),
        &[
            ("traced.graph", &traced.to_string()),
            ("graph", &optimized.to_string()),
            ("kernels", &kernels.to_string()),
            ("keys", &keys),
        ],
    );
}
