//! `Program`: what a jit function's handler cache holds for one signature:
//! the traced graph run through the compile pipeline ([`crate::pipeline`])
//! to native code, and to bytecode on its first Sim run. `run_reference`
//! runs the optimised graph on the reference interpreter (the oracle).

use crate::error::RuntimeError;
use crate::pipeline::{self, Stage, StageTimes};
use std::time::{Duration, Instant};
use tilejit_device::Target;
use tilejit_ir::kernel::ProgramOutput;
use tilejit_ir::{interp, Array, Graph, Lit};

use crate::host::HostProgram;
use crate::resident::DeviceArray;
use crate::sim::{SimProgram, SimRun, Value};
use std::sync::{Arc, Mutex, OnceLock};

/// A compiled program.
#[derive(Debug)]
pub struct Program {
    name: String,
    traced: Graph,
    optimized: Graph,
    host: HostProgram,
    /// The bytecode form, compiled on the first Sim run.
    sim: OnceLock<Result<Arc<SimProgram>, RuntimeError>>,
    /// The bytecode of the kernels the device can run, and per kernel why
    /// it cannot (placement), compiled on the first placed run.
    partial: OnceLock<Result<Arc<PartialSim>, RuntimeError>>,
    compile_time: Duration,
    stage_times: StageTimes,
    /// Values of the graph's last params, which stand for sizes
    /// ([`Program::with_size_params`]).
    size_params: Vec<Lit>,
    /// SHA-256 of the traced graph's text, made on first use.
    digest: OnceLock<[u8; 32]>,
}

impl Program {
    /// Runs a traced graph through the compile pipeline, as `program`.
    pub fn compile(traced: Graph) -> Result<Program, RuntimeError> {
        Program::compile_named(traced, "program")
    }

    /// Runs a traced graph through the compile pipeline. `name` (a jit
    /// function and its signature, say `mlp(f32[8,64])`) names the program
    /// in logs, dump files and Sim profiles.
    pub fn compile_named(traced: Graph, name: &str) -> Result<Program, RuntimeError> {
        let start = Instant::now();
        let mut t = StageTimes::default();
        let optimized = pipeline::optimize(&traced, &mut t)?;
        let kernels = pipeline::lower(&optimized, &mut t)?;
        let host = t.run(Stage::CodegenHost, || {
            HostProgram::codegen(
                kernels,
                pipeline::constants(&optimized),
                Default::default(),
                name,
            )
        })?;
        t.log(name);
        if crate::dump::enabled() {
            crate::dump::program(name, &traced, &optimized, &host);
        }
        Ok(Program {
            name: name.to_string(),
            traced,
            optimized,
            host,
            sim: OnceLock::new(),
            partial: OnceLock::new(),
            compile_time: start.elapsed(),
            stage_times: t,
            size_params: Vec::new(),
            digest: OnceLock::new(),
        })
    }

    /// Records the values of the graph's last params: a dynamic function's
    /// instantiated graph takes sizes it used as values (`mean`'s divisor)
    /// as params, so its kernels do not change with them. Callers append
    /// [`size_params`](Self::size_params) to the call's own params.
    pub fn with_size_params(mut self, values: Vec<Lit>) -> Program {
        self.size_params = values;
        self
    }

    /// The values of the params that stand for sizes (usually none).
    pub fn size_params(&self) -> &[Lit] {
        &self.size_params
    }

    /// A program from parts made elsewhere (a snapshot's): runs no pass
    /// and no codegen. `sim`, if given, is its Sim form (else compiled on
    /// the first Sim run); `load_time` stands for its compile time.
    pub(crate) fn from_parts(
        name: &str,
        traced: Graph,
        optimized: Graph,
        host: HostProgram,
        sim: Option<SimProgram>,
        load_time: Duration,
    ) -> Program {
        let cell = OnceLock::new();
        if let Some(sim) = sim {
            let _ = cell.set(Ok(Arc::new(sim)));
        }
        Program {
            name: name.to_string(),
            traced,
            optimized,
            host,
            sim: cell,
            partial: OnceLock::new(),
            compile_time: load_time,
            stage_times: StageTimes::default(),
            size_params: Vec::new(),
            digest: OnceLock::new(),
        }
    }

    /// SHA-256 of the traced graph's text form (which holds its
    /// constants): what a remote device keys the program on. Computed once.
    pub fn text_digest(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        *self
            .digest
            .get_or_init(|| Sha256::digest(self.traced.to_string().as_bytes()).into())
    }

    /// The name it was compiled under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How long each stage of its compile took (the Sim codegen, which runs
    /// on first use, is logged on its own).
    pub fn stage_times(&self) -> &StageTimes {
        &self.stage_times
    }

    /// [`HostProgram::run_one`]: a one-kernel program the short way, or
    /// `None` (then call [`Program::run`]).
    #[inline]
    pub fn run_one(&self, inputs: &[&Array]) -> Option<Result<Array, Box<RuntimeError>>> {
        self.host.run_one(inputs)
    }

    /// Runs the program's native kernels on concrete inputs and parameter
    /// values.
    pub fn run<A: std::borrow::Borrow<Array> + Sync>(
        &self,
        inputs: &[A],
        params: &[Lit],
    ) -> Result<Vec<Array>, RuntimeError> {
        self.host.run(inputs, params)
    }

    /// The program compiled for the simulated device (on first use; the
    /// result, error included, is kept).
    pub fn sim(&self) -> Result<Arc<SimProgram>, RuntimeError> {
        self.sim
            .get_or_init(|| {
                let mut t = StageTimes::default();
                let sim = t.run(Stage::CodegenSim, || {
                    // The host program's constants: the ones its kernel
                    // program's indices refer to (a snapshot's optimised
                    // graph was parsed back and may number them apart).
                    let kernels = self.host.kernels().clone();
                    SimProgram::codegen(kernels, self.host.constants().to_vec(), &self.name)
                });
                t.log(&format!("{} on sim", self.name));
                sim.map(Arc::new)
            })
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

    /// Runs on the simulated device on values that may live there already
    /// (host values are copied in); the outputs stay in device memory.
    pub fn run_resident(
        &self,
        inputs: &[Value],
        params: &[Lit],
    ) -> Result<Vec<DeviceArray>, RuntimeError> {
        Ok(self.sim()?.run_resident(inputs, params)?.0)
    }

    /// Per kernel, why the Sim device cannot run it (`None`: it can): the
    /// device generator's `SimUnsupported` message.
    pub fn sim_support(&self) -> Result<Vec<Option<String>>, RuntimeError> {
        Ok(self.partial()?.why.clone())
    }

    fn partial(&self) -> Result<Arc<PartialSim>, RuntimeError> {
        self.partial
            .get_or_init(|| {
                let kernels = self.host.kernels().clone();
                let (sim, why) = SimProgram::codegen_partial(
                    kernels,
                    self.host.constants().to_vec(),
                    &self.name,
                )?;
                Ok(Arc::new(PartialSim { sim, why }))
            })
            .clone()
    }

    /// Runs on host inputs with kernel `i` on the Sim device where
    /// `on_sim[i]` and on the host otherwise, copying each value across
    /// only where a kernel on the other side reads it. Outputs come back
    /// to the host, except, with `keep_on_sim`, those made on the device,
    /// which stay there. A kernel placed on Sim that the device cannot run
    /// is an error naming it.
    pub fn run_placed(
        &self,
        inputs: &[Array],
        params: &[Lit],
        on_sim: &[bool],
        keep_on_sim: bool,
    ) -> Result<Vec<Value>, RuntimeError> {
        if !on_sim.iter().any(|&s| s) {
            let outs = self.host.run(inputs, params)?;
            return Ok(outs.into_iter().map(Value::Host).collect());
        }
        let partial = self.partial()?;
        for (i, why) in partial.why.iter().enumerate() {
            if let (true, Some(why)) = (on_sim.get(i).copied().unwrap_or(false), why) {
                return Err(tilejit_ir::IrError::Verify(format!(
                    "kernel {i} is placed on sim, which cannot run it: {why}"
                ))
                .into());
            }
        }
        debug_assert!((0..on_sim.len()).all(|i| !on_sim[i] || partial.sim.has_code(i)));
        let mut mixed = crate::placed::Mixed::new(&partial.sim, on_sim, keep_on_sim);
        let outs = self.host.run_with(inputs, params, Some(&mut mixed))?;
        // Outputs left in GM replace the (unwritten) host arrays of them.
        let p = self.host.kernels();
        let mut values = Vec::with_capacity(outs.len());
        for (o, a) in p.outputs.iter().zip(outs) {
            let kept = match *o {
                ProgramOutput::Buffer(b, ty) => mixed
                    .kept
                    .iter()
                    .find(|(k, _)| *k == b.0 as usize)
                    .map(|(_, buf)| {
                        let decl = p.buffers[b.0 as usize].ty;
                        DeviceArray::from_buffer(buf.clone(), decl).reshaped(ty.shape)
                    }),
                ProgramOutput::Param(..) => None,
            };
            values.push(match kept {
                Some(d) => Value::Device(d?),
                None => Value::Host(a),
            });
        }
        Ok(values)
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

/// A program's Sim form with only the kernels the device can run.
#[derive(Debug)]
struct PartialSim {
    sim: SimProgram,
    /// Per kernel, why the device cannot run it.
    why: Vec<Option<String>>,
}

/// A one-op (or small) eager graph by value, its constants included when
/// they hold at most [`EAGER_KEY_ELEMENTS`] elements in all (an argmax's
/// index line, a triangle mask): the key of the eager program caches, so
/// repeating an eager op skips fusing and the kernel cache lookup.
#[derive(Clone, PartialEq, Eq, Hash)]
struct EagerKey {
    nodes: Vec<(tilejit_ir::Op, tilejit_ir::TensorType)>,
    outputs: Vec<tilejit_ir::NodeId>,
    /// Each constant's type and little-endian bytes, in table order.
    constants: Vec<(tilejit_ir::TensorType, Vec<u8>)>,
}

/// The most constant elements an eager graph may hold and still be kept:
/// past it, hashing and holding the values would cost what they save.
const EAGER_KEY_ELEMENTS: usize = 4096;

impl EagerKey {
    fn of(g: &Graph) -> Option<EagerKey> {
        let elements: usize = g.constants().iter().map(|c| c.0.ty().shape.numel()).sum();
        if elements > EAGER_KEY_ELEMENTS {
            return None;
        }
        let constants = g
            .constants()
            .iter()
            .map(|c| Some((c.0.ty(), c.0.buffer().to_le_bytes().ok()?)))
            .collect::<Option<Vec<_>>>()?;
        Some(EagerKey {
            nodes: g
                .ids()
                .map(|id| (g.node(id).op.clone(), g.ty(id)))
                .collect(),
            outputs: g.outputs.clone(),
            constants,
        })
    }
}

/// Compiled eager programs, bounded (cleared when full: eager graphs are
/// cheap to rebuild, the bound only keeps memory in check).
struct EagerCache<P> {
    /// The programs, and the bytes of constants their keys hold.
    map: Mutex<(ahash::AHashMap<EagerKey, Arc<P>>, usize)>,
}

const EAGER_CACHE_MAX: usize = 4096;

/// The most constant bytes the keys may hold together.
const EAGER_CACHE_BYTES: usize = 16 << 20;

impl<P> EagerCache<P> {
    fn new() -> EagerCache<P> {
        EagerCache {
            map: Mutex::new(Default::default()),
        }
    }

    fn get_or(
        &self,
        g: &Graph,
        build: impl FnOnce() -> Result<P, RuntimeError>,
    ) -> Result<Arc<P>, RuntimeError> {
        let Some(key) = EagerKey::of(g) else {
            return build().map(Arc::new);
        };
        if let Some(p) = self
            .map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .get(&key)
        {
            return Ok(p.clone());
        }
        let p = Arc::new(build()?);
        let bytes: usize = key.constants.iter().map(|c| c.1.len()).sum();
        let mut held = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let (map, held_bytes) = &mut *held;
        if map.len() >= EAGER_CACHE_MAX || *held_bytes + bytes > EAGER_CACHE_BYTES {
            map.clear();
            *held_bytes = 0;
        }
        if map.insert(key, p.clone()).is_none() {
            *held_bytes += bytes;
        }
        Ok(p)
    }
}

/// Runs a small graph eagerly (the frontend's ops outside jit): fused and
/// compiled like any program, through the kernel cache, and kept in an
/// eager program cache keyed by the graph itself.
pub fn run_eager(g: &Graph, inputs: &[Array]) -> Result<Vec<Array>, RuntimeError> {
    static CACHE: OnceLock<EagerCache<HostProgram>> = OnceLock::new();
    CACHE
        .get_or_init(EagerCache::new)
        .get_or(g, || HostProgram::compile(g))?
        .run(inputs, &[])
}

/// The eager programs compiled for the simulated device.
fn eager_sim(g: &Graph) -> Result<Arc<SimProgram>, RuntimeError> {
    static CACHE: OnceLock<EagerCache<SimProgram>> = OnceLock::new();
    CACHE
        .get_or_init(EagerCache::new)
        .get_or(g, || SimProgram::compile(g))
}

/// [`run_eager`] on the simulated device.
pub fn run_eager_sim(g: &Graph, inputs: &[Array]) -> Result<Vec<Array>, RuntimeError> {
    Ok(eager_sim(g)?.run(inputs, &[], false)?.0)
}

/// [`run_eager`] on the simulated device, on values that may live there
/// already; the outputs stay in device memory.
pub fn run_eager_resident(g: &Graph, inputs: &[Value]) -> Result<Vec<DeviceArray>, RuntimeError> {
    Ok(eager_sim(g)?.run_resident(inputs, &[])?.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use tilejit_ir::{BinaryOp, DType, Op, Shape, TensorType};

    /// `x + c` for an f32 input and constant of `c`'s length.
    fn plus_constant(c: Vec<f32>) -> Result<Graph, tilejit_ir::IrError> {
        let mut g = Graph::new();
        let ty = TensorType::new(DType::F32, Shape::new(&[c.len()])?);
        let x = g.add(Op::Input { index: 0, ty })?;
        let k = g.add_constant(Array::from_vec(c, &[ty.shape[0]])?);
        let y = g.add(Op::Binary(BinaryOp::Add, x, k))?;
        g.outputs = vec![y];
        Ok(g)
    }

    /// Graphs with small constants are kept by their values: the same
    /// values built again hit, other values (one bit apart) miss, and
    /// constants past the bound are never kept.
    #[test]
    fn eager_graphs_with_small_constants_are_kept_by_value() -> Result<(), tilejit_ir::IrError> {
        let cache: EagerCache<u32> = EagerCache::new();
        let builds = Cell::new(0);
        let get = |g: &Graph| {
            cache
                .get_or(g, || {
                    builds.set(builds.get() + 1);
                    Ok(builds.get())
                })
                .map(|p| *p)
        };
        let a = get(&plus_constant(vec![1.0, 2.0, 3.0])?);
        let b = get(&plus_constant(vec![1.0, 2.0, 3.0])?);
        let c = get(&plus_constant(vec![1.0, -0.0, 3.0])?);
        let d = get(&plus_constant(vec![1.0, 0.0, 3.0])?);
        assert_eq!(
            (a.ok(), b.ok(), c.ok(), d.ok()),
            (Some(1), Some(1), Some(2), Some(3))
        );
        let big: Vec<f32> = (0..=EAGER_KEY_ELEMENTS).map(|i| i as f32).collect();
        let e = get(&plus_constant(big.clone())?);
        let f = get(&plus_constant(big)?);
        assert_eq!((e.ok(), f.ok()), (Some(4), Some(5)));
        Ok(())
    }
}
