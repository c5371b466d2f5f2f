//! Running a fused program on the simulated accelerator: every kernel
//! compiled to its core functions (one AIV function; a matmul adds an AIC
//! one; a few long rows give one per stage plus combines), each launched
//! as tile tasks spread over its cores, in order, joined by hub nodes (all
//! of one function's tasks -> one hub -> all of the next one's). Host arrays are copied to GM,
//! the launch runs through the device's control and manager threads, and
//! the outputs are copied back.
//!
//! Device code is size-generic (one cache entry serves every shape of a
//! kernel's structure and plan class), so the launcher supplies the
//! shape: each task's scalar arguments are `lo`, `hi`, the kernel's sizes
//! and strides (`tilejit_codegen::device::size_args`) and the params, and
//! task ranges and workspace lengths come from the kernel this program
//! runs (`Units::of`, `Extent::of`).

use crate::error::RuntimeError;
use crate::flight::map_off_pool;
use crate::kernel_cache::{kernel_cache, CachedSimKernel, StoredCode};
use crate::pipeline::{self, Stage, StageTimes};
use crate::resident::DeviceArray;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tilejit_codegen::device::DeviceKernel;
use tilejit_device::{
    CoreType, DeviceApi, DeviceBuffer, DeviceConfig, GmArg, HostCopies, Launch, LaunchHandle,
    LaunchOptions, LaunchReport, Policy, Profile, SimDevice, Task, TaskKind,
};
use tilejit_ir::kernel::{BufKind, KernelProgram, ProgramOutput};
use tilejit_ir::{Array, DType, Graph, IrError, Lit, TensorType};

/// The process-wide simulated device (910B defaults).
pub fn sim_device() -> &'static SimDevice {
    static DEVICE: OnceLock<SimDevice> = OnceLock::new();
    DEVICE.get_or_init(|| match SimDevice::new(DeviceConfig::default()) {
        Ok(d) => d,
        // The default config is valid by construction (tested).
        Err(e) => panic!("default device config rejected: {e}"),
    })
}

thread_local! {
    /// Profiles of Sim launches made on this thread while collecting.
    static COLLECT: std::cell::RefCell<Option<Vec<Profile>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f`, collecting the profile of every Sim launch it makes on this
/// thread (the API form of `TILEJIT_PROFILE`).
///
/// ```
/// use tilejit_runtime::{collect_profiles, Program};
/// let g = tilejit_ir::text::parse(
///     "graph {\n  %0 = input 0 : f32[64,128]\n  %1 = exp %0 : f32[64,128]\n  return %1\n}",
/// )?;
/// let x = tilejit_ir::Array::from_vec(vec![0.5f32; 64 * 128], &[64, 128])?;
/// let program = Program::compile_named(g, "exp_rows(f32[64,128])")?;
/// let (run, profiles) = collect_profiles(|| program.run_sim(&[x], &[], false));
/// run?;
/// assert_eq!(profiles.len(), 1);
/// assert_eq!(profiles[0].name, "exp_rows(f32[64,128])");
/// print!("{}", profiles[0].summary());      // device time, utilisation, pipes
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn collect_profiles<R>(f: impl FnOnce() -> R) -> (R, Vec<Profile>) {
    let outer = COLLECT.with(|c| c.borrow_mut().replace(Vec::new()));
    let r = f();
    let got = COLLECT
        .with(|c| std::mem::replace(&mut *c.borrow_mut(), outer))
        .unwrap_or_default();
    (r, got)
}

/// `TILEJIT_PROFILE=<dir>`: where every Sim launch writes its Chrome trace.
fn profile_dir() -> Option<&'static std::path::Path> {
    crate::config::config().profile_dir.as_deref()
}

/// Writes `profile` as `<dir>/<launch>-<n>.json` (n counts launches in
/// this process). Returns the path.
pub fn write_trace(
    dir: &std::path::Path,
    profile: &Profile,
) -> std::io::Result<std::path::PathBuf> {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    std::fs::create_dir_all(dir)?;
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = crate::dump::file_stem(&profile.name);
    let path = dir.join(format!("{name}-{}-{n}.json", std::process::id()));
    std::fs::write(&path, profile.chrome_trace())?;
    Ok(path)
}

/// The ready-queue policy of jit launches: `set_sim_policy`, else
/// `TILEJIT_SIM_POLICY=fifo|newest-first|fair`, else FIFO.
static POLICY: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(u8::MAX);

/// Sets the scheduler policy of every later Sim launch made by jit calls
/// and eager ops (the device API takes one per launch).
pub fn set_sim_policy(p: Policy) {
    POLICY.store(p as u8, std::sync::atomic::Ordering::Relaxed);
}

/// The policy Sim launches use now.
pub fn sim_policy() -> Policy {
    match POLICY.load(std::sync::atomic::Ordering::Relaxed) {
        0 => Policy::Fifo,
        1 => Policy::NewestFirst,
        2 => Policy::Fair,
        _ => crate::config::config().sim_policy.unwrap_or_default(),
    }
}

/// A program compiled for the simulated device.
#[derive(Debug)]
pub struct SimProgram {
    /// What its profiles are named after (a jit function and signature).
    name: String,
    prog: KernelProgram,
    /// The cache entries the kernels came from (their launch counters).
    cached: Vec<Arc<CachedSimKernel>>,
    kernels: Vec<DeviceKernel>,
    /// Per core function, the units its launch splits (for this program's
    /// shapes).
    units: Vec<usize>,
    /// Per core function, its size arguments (those of its kernel).
    sizes: Vec<Arc<Vec<i64>>>,
    /// Per core function, its workspace set in `workspaces`, if any.
    workspace_of: Vec<Option<usize>>,
    /// The workspace sets, one per kernel that has any (its core functions
    /// share it), as (dtype, elements).
    workspaces: Vec<WorkspaceSet>,
    /// Per core function, whether it has nothing to compute: it gets no
    /// tasks and no hub, and the next kernel follows the previous one.
    idle: Vec<bool>,
    /// Per core function, the index of its kernel in the program.
    kernel_of: Vec<usize>,
    constants: Vec<Array>,
    /// The constants in GM, once a launch has copied them in.
    device_constants: std::sync::Mutex<Option<Arc<Vec<Arc<DeviceBuffer>>>>>,
}

/// Workspace buffers (dtype, elements) shared by a kernel's core functions.
type WorkspaceSet = Vec<(DType, usize)>;

/// What a Sim run returns besides its outputs.
pub type SimRun = (Vec<Array>, LaunchReport);

impl SimProgram {
    /// Fuses `g` and compiles every kernel to bytecode (in parallel, off
    /// the rayon pool: see `flight.rs`).
    pub fn compile(g: &Graph) -> Result<SimProgram, RuntimeError> {
        let mut t = StageTimes::default();
        let prog = pipeline::lower(g, &mut t)?;
        t.run(Stage::CodegenSim, || {
            SimProgram::codegen(prog, pipeline::constants(g), "eager")
        })
    }

    /// The codegen stage: compiles every kernel of `prog` to bytecode (in
    /// parallel, off the rayon pool) through the kernel cache.
    pub(crate) fn codegen(
        prog: KernelProgram,
        constants: Vec<Array>,
        name: &str,
    ) -> Result<SimProgram, RuntimeError> {
        let cfg = sim_device().config();
        let dtype_of = |b: tilejit_ir::kernel::BufId| prog.buffer(b).ty.dtype;
        let cached = map_off_pool(&prog.kernels, |k| {
            kernel_cache().get_or_compile_sim(k, &dtype_of, cfg, name)
        })?;
        SimProgram::assemble(prog, cached, constants, name)
    }

    /// Like [`SimProgram::codegen`], but a kernel the device generator
    /// cannot handle (`CodegenError::SimUnsupported`) gets no core
    /// functions instead of failing the program: the second result says,
    /// per kernel, why it cannot run here (`None`: it can). For placing
    /// kernels across devices.
    pub(crate) fn codegen_partial(
        prog: KernelProgram,
        constants: Vec<Array>,
        name: &str,
    ) -> Result<(SimProgram, Vec<Option<String>>), RuntimeError> {
        let cfg = sim_device().config();
        let dtype_of = |b: tilejit_ir::kernel::BufId| prog.buffer(b).ty.dtype;
        let mut cached = Vec::with_capacity(prog.kernels.len());
        let mut why = Vec::with_capacity(prog.kernels.len());
        for k in &prog.kernels {
            match kernel_cache().get_or_compile_sim(k, &dtype_of, cfg, name) {
                Ok(c) => {
                    cached.push(c);
                    why.push(None);
                }
                Err(RuntimeError::Codegen(
                    e @ tilejit_codegen::CodegenError::SimUnsupported { .. },
                )) => {
                    cached.push(Arc::new(crate::kernel_cache::Cached {
                        code: Vec::new(),
                        launches: Default::default(),
                        hits: Default::default(),
                        key: String::new(),
                    }));
                    why.push(Some(e.to_string()));
                }
                Err(e) => return Err(e),
            }
        }
        Ok((SimProgram::assemble(prog, cached, constants, name)?, why))
    }

    /// A program from a snapshot's parts: each kernel's bytecode is
    /// decoded and verified from `stored` (its payload and the key it was
    /// made under) through the kernel cache, which compiles only a kernel
    /// whose payload is missing or was made under another key.
    pub(crate) fn from_snapshot(
        prog: KernelProgram,
        constants: Vec<Array>,
        name: &str,
        stored: &[Option<StoredCode<'_>>],
        _vouch: &crate::snapshot::CodeVouch,
    ) -> Result<SimProgram, RuntimeError> {
        let cfg = sim_device().config();
        let dtype_of = |b: tilejit_ir::kernel::BufId| prog.buffer(b).ty.dtype;
        let cached = prog
            .kernels
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let stored = stored.get(i).copied().flatten();
                kernel_cache().get_or_load_sim(k, &dtype_of, cfg, name, stored)
            })
            .collect::<Result<Vec<_>, _>>()?;
        SimProgram::assemble(prog, cached, constants, name)
    }

    /// The program over `prog` with each kernel's core functions.
    fn assemble(
        prog: KernelProgram,
        cached: Vec<Arc<CachedSimKernel>>,
        constants: Vec<Array>,
        name: &str,
    ) -> Result<SimProgram, RuntimeError> {
        let mut kernels: Vec<DeviceKernel> = Vec::new();
        let (mut units, mut sizes, mut workspace_of) = (Vec::new(), Vec::new(), Vec::new());
        let mut kernel_of = Vec::new();
        let mut workspaces: Vec<WorkspaceSet> = Vec::new();
        for (ki, (k, c)) in prog.kernels.iter().zip(&cached).enumerate() {
            let args = Arc::new(tilejit_codegen::device::size_args(k));
            // A kernel's core functions share one workspace list.
            let set = c.code.iter().find(|d| !d.extra.is_empty()).map(|d| {
                let set = d.extra.iter().map(|&(dt, e)| (dt, e.of(k))).collect();
                workspaces.push(set);
                workspaces.len() - 1
            });
            // The code numbers GM arguments by local buffer: this kernel's.
            let local = k.local_buffers();
            for d in c.code.iter() {
                kernel_of.push(ki);
                units.push(d.units.of(k));
                sizes.push(args.clone());
                workspace_of.push(set.filter(|_| !d.extra.is_empty()));
                let mut d = d.clone();
                for b in &mut d.buffers {
                    *b = *local.get(b.0 as usize).ok_or_else(|| {
                        IrError::Verify(format!("`{}`: GM argument {} is no buffer", d.name, b.0))
                    })?;
                }
                kernels.push(d);
            }
        }
        // An empty domain, or one whose every buffer is empty (rows of no
        // columns), has nothing to compute.
        let empty = |b: &tilejit_ir::kernel::BufId| prog.buffer(*b).ty.shape.numel() == 0;
        let idle = kernels
            .iter()
            .zip(&units)
            .map(|(k, &n)| n == 0 || (!k.buffers.is_empty() && k.buffers.iter().all(empty)))
            .collect();
        Ok(SimProgram {
            name: name.to_string(),
            prog,
            kernels,
            units,
            sizes,
            idle,
            kernel_of,
            cached,
            workspace_of,
            workspaces,
            constants,
            device_constants: Default::default(),
        })
    }

    /// Per kernel of its program, the kernel cache entry its core
    /// functions came from.
    pub(crate) fn cached(&self) -> &[Arc<CachedSimKernel>] {
        &self.cached
    }

    /// The compiled kernels.
    pub fn kernels(&self) -> &[DeviceKernel] {
        &self.kernels
    }

    /// The kernel cache key of each kernel's entry, in kernel order: equal
    /// for two programs whose kernels share their (size-generic) code.
    pub fn cache_keys(&self) -> Vec<&str> {
        self.cached.iter().map(|c| c.key.as_str()).collect()
    }

    /// The units core function `i` of [`SimProgram::kernels`] splits over
    /// its tasks, for this program's shapes.
    pub fn units(&self, i: usize) -> usize {
        self.units[i]
    }

    /// The scalar arguments of a task of core function `i` covering units
    /// `lo..hi`: the range, its kernel's sizes and strides, the params.
    pub fn task_scalars(&self, i: usize, lo: usize, hi: usize, params: &[i64]) -> Vec<i64> {
        let mut scalars = vec![lo as i64, hi as i64];
        scalars.extend_from_slice(&self.sizes[i]);
        scalars.extend_from_slice(params);
        scalars.truncate(self.kernels[i].program.program().args.len());
        scalars
    }

    /// The GM this program's runs take, sized up front from its buffer
    /// table (each allocation rounded up to 32 bytes).
    pub fn workspace(&self) -> Workspace {
        let p = &self.prog;
        let outputs: Vec<u32> = p
            .outputs
            .iter()
            .filter_map(|o| match o {
                ProgramOutput::Buffer(b, _) => Some(b.0),
                ProgramOutput::Param(..) => None,
            })
            .collect();
        let mut w = Workspace::default();
        for (i, b) in p.buffers.iter().enumerate() {
            let bytes = ((b.ty.shape.numel() * b.ty.dtype.size_bytes()) as u64)
                .max(1)
                .next_multiple_of(32);
            let role = match b.kind {
                BufKind::Input(_) => "input",
                BufKind::Constant(_) => "constant",
                BufKind::Temp if outputs.contains(&(i as u32)) => "output",
                BufKind::Temp => "temp",
            };
            match role {
                "input" => w.input_bytes += bytes,
                "constant" => w.constant_bytes += bytes,
                "output" => w.output_bytes += bytes,
                _ => w.temp_bytes += bytes,
            }
            w.total_bytes += bytes;
            w.buffers.push(WorkspaceBuffer {
                name: format!("b{i}"),
                role,
                ty: b.ty,
                bytes,
            });
        }
        for (g, set) in self.workspaces.iter().enumerate() {
            for (j, &(dt, n)) in set.iter().enumerate() {
                let bytes = ((n * dt.size_bytes()) as u64).max(1).next_multiple_of(32);
                w.temp_bytes += bytes;
                w.total_bytes += bytes;
                // A one-dimensional length always makes a shape.
                if let Ok(shape) = tilejit_ir::Shape::new(&[n]) {
                    w.buffers.push(WorkspaceBuffer {
                        name: format!("w{g}.{j}"),
                        role: "workspace",
                        ty: TensorType::new(dt, shape),
                        bytes,
                    });
                }
            }
        }
        w
    }

    /// Runs on concrete inputs and params; `profile` records a per-task
    /// profile in the report. The same as `launch(..)?.wait()`.
    pub fn run(
        &self,
        inputs: &[Array],
        params: &[Lit],
        profile: bool,
    ) -> Result<SimRun, RuntimeError> {
        self.launch(inputs, params, profile)?.wait()
    }

    /// Runs on inputs that may already live on the device; the outputs
    /// stay there (no copy back). Inputs on the host are copied in.
    pub fn run_resident(
        &self,
        inputs: &[Value],
        params: &[Lit],
    ) -> Result<(Vec<DeviceArray>, LaunchReport), RuntimeError> {
        self.launch_values(inputs, params, false)?.wait_resident()
    }

    /// [`SimProgram::launch_values`] on host arrays.
    pub fn launch(
        &self,
        inputs: &[Array],
        params: &[Lit],
        profile: bool,
    ) -> Result<PendingRun<'_>, RuntimeError> {
        let inputs: Vec<Value> = inputs.iter().cloned().map(Value::Host).collect();
        self.launch_values(&inputs, params, profile)
    }

    /// The device launcher: checks the arguments, allocates the workspace,
    /// copies host inputs to GM (device inputs are used in place) and
    /// submits the launch to the device's stream, returning at once. Wait
    /// on the result for the outputs.
    pub fn launch_values(
        &self,
        inputs: &[Value],
        params: &[Lit],
        profile: bool,
    ) -> Result<PendingRun<'_>, RuntimeError> {
        let p = &self.prog;
        let types = inputs.iter().map(Value::ty);
        tilejit_ir::interp::check_argument_types(&p.inputs, p.params.len(), types, params)?;
        // A cancel token or deadline of the caller's goes with the launch.
        let limits = crate::cancel::current();
        limits.check(&format!("launch `{}`", self.name))?;
        let dev = sim_device();
        let copy_in_start = Instant::now();
        let constants = self.device_constants()?;
        let mut bufs: Vec<Arc<DeviceBuffer>> = Vec::with_capacity(p.buffers.len());
        for b in &p.buffers {
            let bytes = (b.ty.shape.numel() * b.ty.dtype.size_bytes()) as u64;
            // Inputs and constants are written whole (or already there),
            // and temporaries by the kernel that produces them: no
            // zero-fill.
            let buf = match b.kind {
                BufKind::Input(i) => match inputs.get(i as usize) {
                    Some(Value::Host(a)) => Arc::new(crate::resident::upload_buffer(a.buffer())?),
                    Some(Value::Device(d)) => d.buffer().clone(),
                    None => return Err(IrError::Arguments(format!("missing input {i}")).into()),
                },
                BufKind::Constant(c) => constants
                    .get(c as usize)
                    .ok_or_else(|| IrError::Verify(format!("missing constant {c}")))?
                    .clone(),
                BufKind::Temp => Arc::new(dev.allocate_for_overwrite(bytes)?),
            };
            bufs.push(buf);
        }
        let copy_in = copy_in_start.elapsed();
        let scalars: Vec<i64> = params.iter().map(lit_bits).collect();
        let mut extras = Vec::new();
        for set in &self.workspaces {
            let mut v = Vec::with_capacity(set.len());
            for &(dt, n) in set.iter() {
                v.push(Arc::new(dev.allocate((n * dt.size_bytes()) as u64)?));
            }
            extras.push(v);
        }
        let cfg = dev.config();
        let cores = [cfg.aic_cores as usize, cfg.aiv_cores as usize];
        if let Some(hooks) = crate::hooks::active() {
            let report = self.run_observed(&hooks, &bufs, &extras, &scalars, cores, &limits)?;
            return Ok(PendingRun {
                prog: self,
                inputs: inputs.to_vec(),
                params: params.to_vec(),
                bufs,
                handle: Launched::Done(Box::new(report)),
                profile,
                copy_in,
            });
        }
        let launch = self.build_launch(bufs.clone(), extras, &scalars, cores, None);
        let collecting = COLLECT.with(|c| c.borrow().is_some());
        let record = profile || collecting || profile_dir().is_some();
        let name = match (self.name.as_str(), self.prog.kernels.first()) {
            ("eager", Some(k)) => format!("eager {}", k.name),
            (name, _) => name.to_string(),
        };
        for c in &self.cached {
            c.launches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let default_timeout = LaunchOptions::default().timeout;
        let handle = dev.launch(
            launch,
            LaunchOptions {
                profile: record,
                name,
                policy: sim_policy(),
                cancel: limits.launch_flags(),
                timeout: limits.time_left().map_or(default_timeout, |left| {
                    left.clamp(Duration::from_millis(1), default_timeout)
                }),
            },
        );
        Ok(PendingRun {
            prog: self,
            inputs: inputs.to_vec(),
            params: params.to_vec(),
            bufs,
            handle: Launched::Pending(handle),
            profile,
            copy_in,
        })
    }

    /// Runs kernel `ki` alone over `bufs` (every program buffer, in order;
    /// only the kernel's own must hold data), waiting for it: how a
    /// placed program runs the kernels it put on the device.
    pub(crate) fn run_kernel(
        &self,
        ki: usize,
        bufs: &[Arc<DeviceBuffer>],
        params: &[Lit],
    ) -> Result<LaunchReport, RuntimeError> {
        let dev = sim_device();
        let limits = crate::cancel::current();
        let scalars: Vec<i64> = params.iter().map(lit_bits).collect();
        // Workspaces only for the sets this kernel's functions use.
        let used: Vec<usize> = (0..self.kernels.len())
            .filter(|&f| self.kernel_of[f] == ki)
            .filter_map(|f| self.workspace_of[f])
            .collect();
        let mut extras = Vec::with_capacity(self.workspaces.len());
        for (g, set) in self.workspaces.iter().enumerate() {
            let mut v = Vec::with_capacity(set.len());
            for &(dt, n) in set.iter() {
                let bytes = if used.contains(&g) {
                    (n * dt.size_bytes()) as u64
                } else {
                    1
                };
                v.push(Arc::new(dev.allocate(bytes)?));
            }
            extras.push(v);
        }
        let cfg = dev.config();
        let cores = [cfg.aic_cores as usize, cfg.aiv_cores as usize];
        let launch = self.build_launch(bufs.to_vec(), extras, &scalars, cores, Some(ki));
        if let Some(c) = self.cached.get(ki) {
            c.launches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.launch_one(launch, ki, &limits)
    }

    /// Submits a launch of one kernel and waits for it.
    fn launch_one(
        &self,
        launch: Launch,
        ki: usize,
        limits: &crate::cancel::Limits,
    ) -> Result<LaunchReport, RuntimeError> {
        let default_timeout = LaunchOptions::default().timeout;
        let options = LaunchOptions {
            profile: false,
            name: format!("{} kernel {ki}", self.name),
            policy: sim_policy(),
            cancel: limits.launch_flags(),
            timeout: limits.time_left().map_or(default_timeout, |left| {
                left.clamp(Duration::from_millis(1), default_timeout)
            }),
        };
        Ok(sim_device().launch(launch, options).wait()?)
    }

    /// Whether kernel `ki` has device code (a partial program's kernels
    /// the generator could not handle have none).
    pub(crate) fn has_code(&self, ki: usize) -> bool {
        self.kernel_of.contains(&ki)
    }

    /// The kernel program it runs.
    pub(crate) fn program(&self) -> &KernelProgram {
        &self.prog
    }

    /// With kernel observers: one launch per kernel, waited for, with the
    /// kernel's buffers copied back for the observers around it. Returns
    /// the launches' summed report.
    fn run_observed(
        &self,
        hooks: &crate::hooks::Observers,
        bufs: &[Arc<DeviceBuffer>],
        extras: &[Vec<Arc<DeviceBuffer>>],
        scalars: &[i64],
        cores: [usize; 2],
        limits: &crate::cancel::Limits,
    ) -> Result<LaunchReport, RuntimeError> {
        let dev = sim_device();
        let p = &self.prog;
        let values = hooks.reads_values();
        let arrays = |ids: &[tilejit_ir::kernel::BufId]| -> Result<Vec<Array>, RuntimeError> {
            ids.iter()
                .filter(|_| values)
                .map(|b| {
                    let ty = p.buffers[b.0 as usize].ty;
                    let buf = &bufs[b.0 as usize];
                    let data = crate::resident::download_buffer(buf, ty.shape.numel(), ty.dtype)?;
                    Ok(Array::new(ty.shape, data)?)
                })
                .collect()
        };
        let mut total: Option<LaunchReport> = None;
        for (ki, k) in p.kernels.iter().enumerate() {
            let fns = (0..self.kernels.len()).filter(|&f| self.kernel_of[f] == ki);
            if fns.clone().all(|f| self.idle[f]) {
                continue;
            }
            limits.check(&format!("kernel `{}`", k.name))?;
            let inputs = arrays(&k.read_buffers())?;
            let mut event = crate::hooks::KernelRun {
                program: &self.name,
                run: hooks.run,
                index: ki,
                name: &k.name,
                place: crate::hooks::Place::Sim,
                inputs: &inputs,
                outputs: &[],
                elapsed: None,
            };
            hooks.before(&event);
            let launch =
                self.build_launch(bufs.to_vec(), extras.to_vec(), scalars, cores, Some(ki));
            let report = self.launch_one(launch, ki, limits)?;
            let outputs = arrays(&k.stored_buffers())?;
            event.outputs = &outputs;
            event.elapsed = Some(Duration::from_secs_f64(
                report.device_cycles as f64 / dev.config().clock_hz,
            ));
            hooks.after(&event);
            total = Some(match total {
                None => report,
                Some(mut t) => {
                    t.tasks += report.tasks;
                    t.device_cycles += report.device_cycles;
                    t.host_time += report.host_time;
                    for (a, b) in t.pipe_busy.iter_mut().zip(report.pipe_busy) {
                        *a += b;
                    }
                    t
                }
            });
        }
        for c in &self.cached {
            c.launches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        // A program with nothing to compute still reports (an empty launch).
        match total {
            Some(t) => Ok(t),
            None => Ok(dev
                .launch(
                    self.build_launch(Vec::new(), Vec::new(), scalars, cores, Some(usize::MAX)),
                    LaunchOptions::default(),
                )
                .wait()?),
        }
    }

    /// The program's constants in GM, copied in by its first launch and
    /// kept for the next ones (labelled as this program's in memory
    /// reports).
    fn device_constants(&self) -> Result<Arc<Vec<Arc<DeviceBuffer>>>, RuntimeError> {
        let mut held = self
            .device_constants
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(c) = held.as_ref() {
            return Ok(c.clone());
        }
        let label: Arc<str> = format!("constant of {}", self.name).into();
        let mut v = Vec::with_capacity(self.constants.len());
        for a in &self.constants {
            let buf = crate::resident::upload_buffer(a.buffer())?;
            buf.set_label(label.clone());
            v.push(Arc::new(buf));
        }
        let v = Arc::new(v);
        *held = Some(v.clone());
        Ok(v)
    }
}

/// A param as a task's scalar argument (a float by its bits).
fn lit_bits(l: &Lit) -> i64 {
    match *l {
        Lit::Float(f) => f.to_bits() as i64,
        Lit::Int(i) => i,
        Lit::Bool(b) => b as i64,
    }
}

/// A value a Sim launch takes: a host array (copied in) or a device array
/// (used in place).
#[derive(Clone, Debug)]
pub enum Value {
    /// On the host.
    Host(Array),
    /// In the simulated device's GM.
    Device(DeviceArray),
}

impl Value {
    /// Its type.
    pub fn ty(&self) -> TensorType {
        match self {
            Value::Host(a) => a.ty(),
            Value::Device(d) => d.ty(),
        }
    }

    /// The elements on the host (a copy back for a device value).
    pub fn to_host(&self) -> Result<Array, RuntimeError> {
        match self {
            Value::Host(a) => Ok(a.clone()),
            Value::Device(d) => d.download(),
        }
    }
}

/// A submitted launch, or (kernels run one by one for observers) its
/// finished report.
#[derive(Debug)]
enum Launched {
    Pending(LaunchHandle),
    Done(Box<LaunchReport>),
}

impl Launched {
    fn wait(self) -> Result<LaunchReport, RuntimeError> {
        match self {
            Launched::Pending(h) => Ok(h.wait()?),
            Launched::Done(r) => Ok(*r),
        }
    }
}

/// A submitted Sim run (the launch's completion event plus what copying
/// the outputs back needs).
#[derive(Debug)]
pub struct PendingRun<'a> {
    prog: &'a SimProgram,
    inputs: Vec<Value>,
    params: Vec<Lit>,
    bufs: Vec<Arc<DeviceBuffer>>,
    handle: Launched,
    profile: bool,
    /// Host time `launch` spent allocating GM and copying data in.
    copy_in: Duration,
}

impl PendingRun<'_> {
    /// Waits for the launch, then copies the outputs back.
    pub fn wait(self) -> Result<SimRun, RuntimeError> {
        let (p, inputs) = (&self.prog.prog, &self.inputs);
        let report = self.handle.wait()?;
        let copy_out_start = Instant::now();
        let mut outs = Vec::with_capacity(p.outputs.len());
        for o in &p.outputs {
            outs.push(match *o {
                ProgramOutput::Param(i, d) => crate::host::param_output(&self.params, i, d)?,
                ProgramOutput::Buffer(b, ty) => {
                    let decl = p.buffers[b.0 as usize];
                    let arr = match decl.kind {
                        BufKind::Input(i) => inputs[i as usize].to_host()?,
                        BufKind::Constant(c) => self.prog.constants[c as usize].clone(),
                        BufKind::Temp => {
                            let n = decl.ty.shape.numel();
                            let buf = &self.bufs[b.0 as usize];
                            let data = crate::resident::download_buffer(buf, n, decl.ty.dtype)?;
                            Array::new(decl.ty.shape, data)?
                        }
                    };
                    arr.reshaped(ty.shape)?
                }
            });
        }
        let copy_out = copy_out_start.elapsed();
        Ok((
            outs,
            finish_report(self.copy_in, self.profile, report, copy_out),
        ))
    }

    /// Waits for the launch; the outputs stay in GM (a param returned as
    /// an output is copied in).
    pub fn wait_resident(self) -> Result<(Vec<DeviceArray>, LaunchReport), RuntimeError> {
        let p = &self.prog.prog;
        let report = self.handle.wait()?;
        let mut outs = Vec::with_capacity(p.outputs.len());
        for o in &p.outputs {
            outs.push(match *o {
                ProgramOutput::Param(i, d) => {
                    DeviceArray::upload(&crate::host::param_output(&self.params, i, d)?)?
                }
                ProgramOutput::Buffer(b, ty) => {
                    let decl = p.buffers[b.0 as usize];
                    let d = match decl.kind {
                        BufKind::Input(i) => match &self.inputs[i as usize] {
                            Value::Device(d) => d.clone(),
                            Value::Host(_) => {
                                DeviceArray::from_buffer(self.bufs[b.0 as usize].clone(), decl.ty)
                            }
                        },
                        // A constant returned whole gets its own copy: the
                        // program's stays the program's.
                        BufKind::Constant(c) => {
                            DeviceArray::upload(&self.prog.constants[c as usize])?
                        }
                        BufKind::Temp => {
                            DeviceArray::from_buffer(self.bufs[b.0 as usize].clone(), decl.ty)
                        }
                    };
                    d.reshaped(ty.shape)?
                }
            });
        }
        Ok((
            outs,
            finish_report(self.copy_in, self.profile, report, Duration::ZERO),
        ))
    }
}

/// Adds the host copy times to the report's profile, writes and collects
/// it, and drops it unless `keep_profile`.
fn finish_report(
    copy_in: Duration,
    keep_profile: bool,
    mut report: LaunchReport,
    copy_out: Duration,
) -> LaunchReport {
    if let Some(pr) = &mut report.profile {
        pr.host_copies = Some(HostCopies { copy_in, copy_out });
        if let Some(dir) = profile_dir() {
            if let Err(e) = write_trace(dir, pr) {
                eprintln!("tilejit: cannot write a profile to {}: {e}", dir.display());
            }
        }
        COLLECT.with(|c| {
            if let Some(v) = c.borrow_mut().as_mut() {
                v.push(pr.clone());
            }
        });
    }
    if !keep_profile {
        report.profile = None;
    }
    report
}

/// One buffer of a program's device workspace.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkspaceBuffer {
    /// `b<i>`, as the kernel IR names it.
    pub name: String,
    /// `input`, `constant`, `output` or `temp`.
    pub role: &'static str,
    /// Its type.
    pub ty: TensorType,
    /// GM bytes it takes.
    pub bytes: u64,
}

/// The GM a Sim run of a program takes, by buffer and by role.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Workspace {
    /// Every buffer.
    pub buffers: Vec<WorkspaceBuffer>,
    /// Bytes of inputs.
    pub input_bytes: u64,
    /// Bytes of constants.
    pub constant_bytes: u64,
    /// Bytes of outputs.
    pub output_bytes: u64,
    /// Bytes of intermediates.
    pub temp_bytes: u64,
    /// All of it.
    pub total_bytes: u64,
}

impl std::fmt::Display for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "device workspace: {} bytes (inputs {}, constants {}, outputs {}, temporaries {})",
            self.total_bytes,
            self.input_bytes,
            self.constant_bytes,
            self.output_bytes,
            self.temp_bytes
        )?;
        for b in &self.buffers {
            writeln!(
                f,
                "  {:<5} {:<8} {:<24} {:>12} bytes",
                b.name,
                b.role,
                b.ty.to_string(),
                b.bytes
            )?;
        }
        Ok(())
    }
}

impl SimProgram {
    /// Tile tasks per kernel, hubs between kernels.
    fn build_launch(
        &self,
        mut buffers: Vec<Arc<DeviceBuffer>>,
        extras: Vec<Vec<Arc<DeviceBuffer>>>,
        params: &[i64],
        cores: [usize; 2],
        only: Option<usize>,
    ) -> Launch {
        // Workspace buffers go after the program's, one set per group of
        // core functions that share them.
        let mut extra_base = Vec::with_capacity(extras.len());
        for set in extras {
            extra_base.push(buffers.len() as u32);
            buffers.extend(set);
        }
        let mut tasks: Vec<Task> = Vec::new();
        let mut prev_tail: Option<usize> = None; // the hub after the previous kernel
        for (ki, k) in self.kernels.iter().enumerate() {
            if self.idle[ki] || only.is_some_and(|o| self.kernel_of[ki] != o) {
                continue;
            }
            let units = self.units[ki];
            let tiles = units.div_ceil(k.tile_units.max(1));
            let (kind, cores) = match k.core {
                CoreType::Aic => (TaskKind::Aic, cores[0]),
                CoreType::Aiv => (TaskKind::Aiv, cores[1]),
            };
            let ntasks = tiles.min(cores.max(1) * 2).max(1);
            let per = tiles.div_ceil(ntasks) * k.tile_units.max(1);
            let first = tasks.len();
            let mut gm: Vec<GmArg> = k
                .buffers
                .iter()
                .map(|b| GmArg {
                    buffer: b.0,
                    offset: 0,
                    len: buffers[b.0 as usize].len(),
                })
                .collect();
            if let Some(g) = self.workspace_of[ki] {
                for j in 0..k.extra.len() {
                    let b = extra_base[g] + j as u32;
                    gm.push(GmArg {
                        buffer: b,
                        offset: 0,
                        len: buffers[b as usize].len(),
                    });
                }
            }
            let mut lo = 0;
            while lo < units {
                let hi = (lo + per).min(units);
                let scalars = self.task_scalars(ki, lo, hi, params);
                tasks.push(Task {
                    name: format!("{}/{}", k.name, tasks.len() - first),
                    kind,
                    func: Some(ki as u32),
                    gm: gm.clone(),
                    scalars,
                    successors: Vec::new(),
                });
                if hi >= units {
                    break;
                }
                lo = hi;
            }
            if let Some(h) = prev_tail {
                tasks[h].successors = (first as u32..tasks.len() as u32).collect();
            }
            let hub = tasks.len();
            for t in &mut tasks[first..] {
                t.successors.push(hub as u32);
            }
            tasks.push(Task::new(format!("after {}", k.name), TaskKind::Hub, None));
            prev_tail = Some(hub);
        }
        Launch {
            functions: self.kernels.iter().map(|k| k.program.clone()).collect(),
            buffers,
            tasks,
        }
    }
}
