//! Jit functions. A [`JitFunction`] owns one handler cache (signature ->
//! compiled program). A call computes the signature of its arguments; on a
//! hit it runs the cached program; on a miss it traces the body once
//! (single-flight across threads), compiles, caches and runs. Called while
//! another body is being traced, it does not compile: the body is inlined
//! into the caller's trace.
//!
//! `#[jit] fn f` keeps its `JitFunction` in a static reachable as
//! `f::jit()`; `jit_fn!` returns a [`JitFn`], which derefs to its
//! `JitFunction`.
//!
//! [`JitFunction::save`] writes its programs to a snapshot file and
//! [`JitFunction::load`] fills the handler cache from one
//! (`tilejit_runtime::snapshot`), so a later process serves those
//! signatures without tracing: `load` compiles the stored graphs (or
//! finds their kernels in this machine's disk cache), and the `unsafe`
//! [`JitFunction::load_code`] links the stored machine code of a file
//! the caller trusts.

use crate::args::{ArgKind, ArgValue, JitArgs, JitOutput, Outputs, ParamSpec, TraceValue};
use crate::error::{Error, Loc, Result};
use crate::mode::RunMode;
use crate::placement::{KernelPlacement, Placement};
use crate::tensor::{Repr, Tensor};
use crate::trace::{self, TraceGuard};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tilejit_ir::{Array, Graph, Lit, Op};
use tilejit_runtime::{
    panic_message, ArgSig, GenericGraph, HandlerCache, HandlerStats, Mark, Program, ShapeClass,
    Signature, Standin,
};

/// A traced body: receives the arguments as trace values, returns outputs.
pub type Body<'b> = dyn Fn(&[TraceValue]) -> Result<Vec<Tensor>> + Send + Sync + 'b;

/// A `#[jit]` function's body as a plain function.
pub type PackedBody = fn(&[TraceValue]) -> Result<Vec<Tensor>>;

/// A jit-compiled function's identity and handler cache: one compiled
/// program per signature (dtype and shape of each tensor argument, values
/// of integer and bool arguments). `#[jit] fn f` reaches it as `f::jit()`.
///
/// ```
/// use tilejit::prelude::*;
///
/// #[jit]
/// fn scale_add(x: &Tensor, k: f32) -> Tensor { x * k + 1.0 }
///
/// let x = Tensor::ones(&[4], DType::F32);
/// scale_add(&x, 2.0)?;                         // traces and compiles
/// let y = scale_add(&x, 3.0)?;                 // a float is a runtime value: a hit
/// assert_eq!(y.to_vec::<f32>()?, [4.0; 4]);
/// scale_add(&Tensor::ones(&[8], DType::F32), 2.0)?; // a new shape: a second program
/// let f = scale_add::jit();
/// assert_eq!((f.stats().builds, f.stats().hits, f.handlers().len()), (2, 1, 2));
/// f.freeze(true);                              // from now on, a new signature is an error
/// assert!(scale_add(&Tensor::ones(&[5], DType::F32), 2.0).is_err());
/// # Ok::<(), tilejit::Error>(())
/// ```
pub struct JitFunction {
    name: String,
    /// The module it is defined in (`module_path!()`), or empty.
    module: String,
    /// A digest of its signature and body as tokens (from `#[jit]` or
    /// `jit_fn!`), or empty: with `module`, what a snapshot must match.
    body_digest: String,
    location: String,
    params: Vec<ParamSpec>,
    cache: HandlerCache<Program, Error>,
    /// The function's own run mode (`#[jit(mode = ..)]`, `set_mode`).
    /// 0 when unset, else `mode::mode_to_byte`: read on every call, so an
    /// atomic rather than a lock.
    mode: AtomicU8,
    /// What the last call in Verify mode measured.
    last_verify: Mutex<Option<Vec<crate::mode::OutputDiff>>>,
    /// Where the kernels of the last placed call ran.
    last_placement: Mutex<Option<Vec<KernelPlacement>>>,
    /// The body, for calls by argument list (`#[jit]` sets it).
    body: Option<PackedBody>,
    /// No new traces: a call with an unseen signature is an error.
    frozen: AtomicBool,
    /// Key the handler cache's traces on shape classes (`set_dynamic`).
    dynamic: AtomicBool,
    /// Per shape class seen while dynamic: its generic trace, or why it
    /// is traced per size.
    classes: Mutex<HashMap<ShapeClass, ClassEntry>>,
    /// Debug traces and programs (`tilejit::debug`), made on the first
    /// call inside a debug scope.
    debug: OnceLock<DebugCache>,
    /// The ops the body called that gather (`gather`, `index_select`), so
    /// an index out of range names the one the user called.
    gather_ops: Mutex<Vec<&'static str>>,
}

/// A function's debug traces (per signature) and how many debug programs
/// it compiled.
#[derive(Default)]
struct DebugCache {
    traces: HandlerCache<DebugTrace, Error>,
    compiles: std::sync::atomic::AtomicU64,
}

/// A signature's trace made for `tilejit::debug`, with each computed
/// node's op and line, and its debug programs by how many computed nodes
/// they materialise (all of them, with the real outputs first, or a
/// `step_to` prefix).
struct DebugTrace {
    graph: Graph,
    computed: Vec<tilejit_ir::NodeId>,
    locs: Vec<String>,
    programs: Mutex<HashMap<usize, DebugProgram>>,
}

/// One debug program, built once (its cell is filled outside the map's lock).
type DebugProgram = Arc<OnceLock<std::result::Result<Arc<Program>, Error>>>;

/// Debug programs a trace keeps (cleared when full).
const MAX_DEBUG_PROGRAMS: usize = 64;

/// What a function's debug calls cost (`tilejit::debug`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DebugStats {
    /// Traces made for debug scopes (one per signature).
    pub traces: u64,
    /// Debug programs compiled (one per signature, plus one per distinct
    /// `step_to` stop inside a call).
    pub compiles: u64,
}

/// What a function knows of one shape class: its graphs, each serving
/// the sizes that fit its pinned symbols, or why it is traced per size.
#[derive(Default)]
struct ClassEntry {
    graphs: Vec<Arc<GenericGraph>>,
    per_size: Option<String>,
}

/// Shape classes a function remembers (cleared when full: a class costs
/// two traces to relearn).
const MAX_CLASSES: usize = 256;

/// Graphs a class keeps for different values of its pinned symbols; past
/// this the class is traced per size.
const MAX_PINNINGS: usize = 64;

/// Where a dynamic call's graph comes from.
enum ClassLookup {
    /// A graph of the class fits these sizes.
    Fits(Arc<GenericGraph>),
    /// The class is traced per size.
    PerSize,
    /// None fits: learn one, pinning at least these symbols.
    Learn(Vec<Option<usize>>),
}

/// What [`JitFunction::load_snapshot`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotLoad {
    /// Signatures the snapshot held, all now in the handler cache.
    pub signatures: usize,
    /// Why [`JitFunction::load_code`] compiled code again from the
    /// snapshot's graphs instead of linking it (another tilejit build,
    /// another CPU, another device config for Sim code), if it did.
    /// Always `None` from the safe `load`, which never links stored code.
    pub recompiled: Option<String>,
}

/// One handler-cache entry, for inspection.
#[derive(Clone)]
pub struct HandlerInfo {
    /// The signature it serves.
    pub signature: Signature,
    /// Calls it served after the first.
    pub hits: u64,
    /// Trace + compile time.
    pub compile_time: Duration,
    /// When it was last used.
    pub last_used: Instant,
    /// The compiled program.
    pub program: Arc<Program>,
}

impl HandlerInfo {
    /// The graph that runs (after simplification), in the IR text form.
    pub fn graph_text(&self) -> String {
        self.program.optimized().to_string()
    }
    /// The graph as traced, before any pass.
    pub fn traced_text(&self) -> String {
        self.program.traced().to_string()
    }
}

impl JitFunction {
    /// Declares a jit function with no module path or body digest: its
    /// snapshots are told apart from others' by name only (see
    /// [`with_identity`](Self::with_identity)).
    pub fn new(name: &str, location: &str, params: &[ParamSpec]) -> JitFunction {
        JitFunction::with_identity(name, "", "", location, params)
    }

    /// Declares a jit function defined in `module` (`module_path!()`)
    /// whose signature and body have digest `body_digest` (the macros
    /// call this): a snapshot loads only into a function with the same
    /// module path, name and body digest.
    pub fn with_identity(
        name: &str,
        module: &str,
        body_digest: &str,
        location: &str,
        params: &[ParamSpec],
    ) -> JitFunction {
        JitFunction {
            name: name.to_string(),
            module: module.to_string(),
            body_digest: body_digest.to_string(),
            location: location.to_string(),
            params: params.to_vec(),
            cache: HandlerCache::new(),
            mode: AtomicU8::new(0),
            last_verify: Mutex::new(None),
            last_placement: Mutex::new(None),
            body: None,
            frozen: AtomicBool::new(false),
            dynamic: AtomicBool::new(false),
            classes: Mutex::new(HashMap::new()),
            debug: OnceLock::new(),
            gather_ops: Mutex::new(Vec::new()),
        }
    }

    /// Keys traces on shape classes (`true`) or exact sizes (`false`, the
    /// default). While dynamic, a call with unseen sizes of a seen
    /// [`ShapeClass`] (same dtypes and ranks, same dims 0 or 1, same dims
    /// equal to each other) does not trace: the class's trace is
    /// instantiated at the new sizes and compiled, and its kernels come
    /// from the kernel cache. A new class is traced twice, at two sets of
    /// stand-in sizes, and the two graphs read side by side: what differs
    /// is a size (see [`ShapeClass`]). A dynamic function never returns
    /// what an exact trace would not: sizes the body reads (`shape()`,
    /// `numel()`) or an op computes on (`slice` from the end, `split`,
    /// `conv2d`, ..) are guards, their symbols pinned to the call's values,
    /// so the graph serves only sizes that agree on them.
    /// What cannot be generic is traced per size, and `TILEJIT_LOG=trace`
    /// and [`shape_classes`](Self::shape_classes) say why. A frozen
    /// dynamic function still compiles new sizes of the classes it knows.
    /// `#[jit(dynamic)]` sets it at definition.
    ///
    /// ```
    /// use tilejit::prelude::*;
    ///
    /// #[jit(dynamic, mode = host)]
    /// fn bias_relu(x: &Tensor, b: &Tensor) -> Tensor { (x + b).relu() }
    ///
    /// for n in [8, 16, 24] {
    ///     bias_relu(&Tensor::ones(&[4, n], DType::F32), &Tensor::ones(&[n], DType::F32))?;
    /// }
    /// let f = bias_relu::jit();
    /// // Two traces (at stand-in sizes: the body reads none); later sizes never.
    /// assert_eq!((f.stats().traces, f.stats().builds), (2, 3));
    /// // Every dim other than 0 and 1 is a size symbol; equal dims share one.
    /// assert_eq!(f.shape_classes()[0].0.to_string(), "(f32[n0,n1], f32[n1])");
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    ///
    /// `dynamic` takes no value:
    ///
    /// ```compile_fail
    /// use tilejit::prelude::*;
    /// #[jit(dynamic = true)]
    /// fn f(x: &Tensor) -> Tensor { x + 1.0 }
    /// ```
    pub fn set_dynamic(&self, dynamic: bool) {
        self.dynamic.store(dynamic, Ordering::Relaxed);
    }

    /// Whether [`set_dynamic`](Self::set_dynamic) is on.
    pub fn is_dynamic(&self) -> bool {
        self.dynamic.load(Ordering::Relaxed)
    }

    /// The shape classes a dynamic function has traced, each with `Ok` if
    /// its trace serves all its sizes or the reason it is traced per size.
    pub fn shape_classes(&self) -> Vec<(ShapeClass, std::result::Result<(), String>)> {
        let classes = self.classes.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<_> = classes
            .iter()
            .map(|(c, e)| {
                (
                    c.clone(),
                    match &e.per_size {
                        Some(why) => Err(why.clone()),
                        None => Ok(()),
                    },
                )
            })
            .collect();
        out.sort_by_key(|(c, _)| c.to_string());
        out
    }

    /// Where each kernel of the last call made under a placement
    /// ([`crate::with_placement`]) ran and why (`None` before any); show
    /// it with [`crate::PlacementReport`].
    pub fn last_placement(&self) -> Option<Vec<KernelPlacement>> {
        self.last_placement
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The differences the last Verify-mode call measured between Host and
    /// Sim (or, placed, the placed run), per output (max abs/rel error,
    /// ulps), if one passed.
    pub fn last_verify(&self) -> Option<Vec<crate::mode::OutputDiff>> {
        self.last_verify
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sets the function's own run mode (`None`: the environment's, else
    /// Host). A per-call mode ([`crate::with_mode`]) still wins.
    pub fn set_mode(&self, mode: Option<RunMode>) {
        self.mode
            .store(mode.map_or(0, crate::mode::mode_to_byte), Ordering::Relaxed);
    }

    /// The mode a call made now would run in.
    pub fn effective_mode(&self) -> RunMode {
        crate::mode::scoped()
            .or(crate::mode::mode_from_byte(
                self.mode.load(Ordering::Relaxed),
            ))
            .or_else(crate::mode::env_mode)
            .unwrap_or_default()
    }

    /// The function's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its module path and name (`my_crate::model::f`), as a snapshot's
    /// manifest names it; the bare name without a module.
    pub fn qualified_name(&self) -> String {
        if self.module.is_empty() {
            self.name.clone()
        } else {
            format!("{}::{}", self.module, self.name)
        }
    }

    /// The digest of its signature and body as tokens (empty when made by
    /// [`new`](Self::new)).
    pub fn body_digest(&self) -> &str {
        &self.body_digest
    }

    /// Where it is defined (`file:line`).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The declared parameters.
    pub fn params(&self) -> &[ParamSpec] {
        &self.params
    }

    fn check_args(&self, args: &[ArgValue]) -> Result<()> {
        let bad = |message: String| Error::Arguments {
            function: self.name.clone(),
            message,
        };
        // A list or struct parameter is several leaves, as many as its
        // value has: the macro flattens them, and its lengths and
        // structure keys are leaves of the signature.
        if self.params.iter().any(|p| p.kind == ArgKind::Tree) {
            return Ok(());
        }
        if args.len() != self.params.len() {
            return Err(bad(format!(
                "expected {} arguments, got {}",
                self.params.len(),
                args.len()
            )));
        }
        for (i, (p, a)) in self.params.iter().zip(args).enumerate() {
            if p.kind != a.kind() {
                return Err(bad(format!(
                    "argument {i} (`{}`) expects {:?}, got {:?}",
                    p.name,
                    p.kind,
                    a.kind()
                )));
            }
        }
        Ok(())
    }

    /// The signature of a call's arguments.
    #[track_caller]
    pub fn signature(&self, args: &[ArgValue]) -> Result<Signature> {
        let location = Loc::caller();
        self.check_args(args)?;
        let mut sig = Vec::with_capacity(args.len());
        for a in args {
            sig.push(match *a {
                ArgValue::Tensor(t) => match &t.repr {
                    Repr::Concrete(arr) => ArgSig::Tensor(arr.ty()),
                    Repr::Sim(d) => ArgSig::Tensor(d.ty()),
                    #[cfg(feature = "remote")]
                    Repr::Remote(r) => ArgSig::Tensor(r.ty),
                    Repr::Error(e) => return Err((**e).clone()),
                    Repr::Traced { .. } => {
                        return Err(Error::ForeignTrace {
                            op: "jit call",
                            location,
                        })
                    }
                },
                ArgValue::Float(_, d) => ArgSig::Float(d),
                ArgValue::Int(v) => ArgSig::Int(v),
                ArgValue::Bool(v) => ArgSig::Bool(v),
                ArgValue::Mark(m) => ArgSig::Mark(m),
            });
        }
        Ok(Signature { args: sig })
    }

    /// Gives the function its body, so [`JitFunction::call_packed`] (and
    /// the registry) can call it by argument list; `#[jit]` does this.
    pub fn set_body(&mut self, body: PackedBody) {
        self.body = Some(body);
    }

    /// Calls the function on an argument list (checked against its
    /// parameters), returning its outputs as tensors: how the registry
    /// calls a jit function by name.
    #[track_caller]
    pub fn call_packed(&self, args: &[ArgValue]) -> Result<Vec<Tensor>> {
        let Some(body) = self.body else {
            return Err(Error::Arguments {
                function: self.name.clone(),
                message: "it has no body to call by argument list (only `#[jit]` functions do)"
                    .into(),
            });
        };
        self.call(args, &body).map(|outs| outs.collect())
    }

    /// Calls the function: cache lookup, trace + compile on a miss, run.
    #[track_caller]
    pub fn call(&self, args: &[ArgValue], body: &Body) -> Result<Outputs> {
        if trace::active() {
            return self.inline(args, body);
        }
        if crate::debug::active() {
            return self.call_debug(args, body, Loc::caller());
        }
        // Fast path: the same signature as the last hit, checked against the
        // arguments without building a signature.
        let program = match self.cache.get_last(|sig| signature_matches(sig, args)) {
            Some(p) => p,
            None => {
                let sig = self.signature(args)?;
                if self.frozen.load(Ordering::Relaxed) || crate::config::config().log.trace {
                    self.before_miss(&sig)?;
                }
                self.cache
                    .get_or_build(&sig, || self.trace_and_compile(&sig, args, body))?
            }
        };
        let mode = self.effective_mode();
        // The short way for a one-kernel program on host tensors (W6).
        if mode == RunMode::Host && crate::placement::current().is_none() {
            if let Some(Some(out)) = with_host_inputs(args, |a| program.run_one(a)) {
                return match out {
                    Ok(a) => Ok(Outputs::one(a)),
                    Err(e) => Err(self.run_error(Loc::caller(), *e)),
                };
            }
        }
        // References, not clones: an `Array` is 88 bytes and an atomic
        // count, a share of a tiny call's cost (W6).
        let mut inputs: SmallVec<[&Array; 4]> = SmallVec::new();
        let mut params: SmallVec<[Lit; 4]> = SmallVec::new();
        let mut on_device = false;
        for a in args {
            match *a {
                ArgValue::Tensor(t) => match &t.repr {
                    Repr::Concrete(arr) => inputs.push(arr),
                    _ => on_device = true,
                },
                ArgValue::Float(v, d) => params.push(Lit::from_f64(v, d)),
                ArgValue::Int(_) | ArgValue::Bool(_) | ArgValue::Mark(_) => {}
            }
        }
        params.extend_from_slice(program.size_params());
        // `#[track_caller]` does not reach into closures: take it here (a
        // pointer copy); the error itself is only built when a run fails.
        let location = Loc::caller();
        let ran = |e: tilejit_runtime::RuntimeError| self.run_error(location, e);
        if let Some(placement) = crate::placement::current() {
            return self.call_placed(&program, args, &params, &placement, mode, location);
        }
        if on_device {
            return self.call_on_device(&program, args, &params, location);
        }
        if mode == RunMode::Host {
            let outs = program.run(&inputs, &params).map_err(ran)?;
            return Ok(Outputs::from_arrays(outs));
        }
        let inputs: SmallVec<[Array; 4]> = inputs.into_iter().cloned().collect();
        let outs = self.run_in(mode, &program, &inputs, &params, location, true)?;
        Ok(Outputs::from_arrays(outs))
    }

    /// A run of this function failing at the user's `location`. A gather
    /// index out of range names the op the body called when only one of
    /// its ops gathers (`index_select` is a gather in the graph).
    fn run_error(&self, location: Loc, mut source: tilejit_runtime::RuntimeError) -> Error {
        if let tilejit_runtime::RuntimeError::Ir(tilejit_ir::IrError::IndexOutOfRange {
            op, ..
        }) = &mut source
        {
            if let [only] = self.gather_ops.lock().unwrap_or_else(|p| p.into_inner())[..] {
                *op = only;
            }
        }
        Error::Run {
            function: self.name.clone(),
            location,
            source,
        }
    }

    /// Runs `program` in `mode`; in Verify mode the measured differences
    /// become [`last_verify`](Self::last_verify) when `keep_verify`.
    fn run_in(
        &self,
        mode: RunMode,
        program: &Program,
        inputs: &[Array],
        params: &[Lit],
        location: Loc,
        keep_verify: bool,
    ) -> Result<Vec<Array>> {
        let ran = |e: tilejit_runtime::RuntimeError| self.run_error(location, e);
        Ok(match mode {
            RunMode::Host => program.run(inputs, params).map_err(ran)?,
            RunMode::Reference => program.run_reference(inputs, params).map_err(ran)?,
            RunMode::Sim => program.run_sim(inputs, params, false).map_err(ran)?.0,
            RunMode::Verify => {
                let host = program.run(inputs, params).map_err(ran)?;
                let (sim, _) = program.run_sim(inputs, params, false).map_err(ran)?;
                let diffs = crate::mode::compare(
                    &self.name,
                    program.optimized(),
                    inputs,
                    params,
                    &host,
                    &sim,
                )?;
                crate::mode::log_verify(&self.name, &diffs);
                if keep_verify {
                    *self.last_verify.lock().unwrap_or_else(|p| p.into_inner()) = Some(diffs);
                }
                host
            }
        })
    }

    /// What [`DebugStats`] the calls inside `tilejit::debug` scopes have
    /// cost this function so far (its [`stats`](Self::stats) count only
    /// normal calls).
    pub fn debug_stats(&self) -> DebugStats {
        self.debug
            .get()
            .map_or(DebugStats::default(), |d| DebugStats {
                traces: d.traces.stats().traces,
                compiles: d.compiles.load(Ordering::Relaxed),
            })
    }

    /// A call inside a `tilejit::debug` scope: the signature's debug trace
    /// (traced once, with each node's line), its debug program for as many
    /// computed nodes as the scope lets run, compiled once, run in the
    /// call's mode; each computed value is recorded in the scope.
    fn call_debug(&self, args: &[ArgValue], body: &Body, location: Loc) -> Result<Outputs> {
        let sig = self.signature(args)?;
        let cache = self.debug.get_or_init(DebugCache::default);
        let entry = cache
            .traces
            .get_or_build(&sig, || self.debug_trace(&sig, args, body))?;
        let all = entry.computed.len();
        let take = crate::debug::budget().map_or(all, |b| b.min(all));
        let stopped = take < all;
        let stop_error = || Error::Run {
            function: self.name.clone(),
            location,
            source: tilejit_runtime::RuntimeError::Stopped {
                what: format!("`{}`", self.name),
                why: format!(
                    "was {}; its ops past the stop did not run",
                    crate::debug::stopped_message()
                ),
            },
        };
        if stopped && take == 0 {
            return Err(stop_error());
        }
        let cell = {
            let mut programs = entry.programs.lock().unwrap_or_else(|p| p.into_inner());
            if programs.len() >= MAX_DEBUG_PROGRAMS && !programs.contains_key(&take) {
                programs.clear();
            }
            programs.entry(take).or_default().clone()
        };
        let program = cell
            .get_or_init(|| {
                let mut graph = entry.graph.clone();
                if stopped {
                    graph.outputs.clear();
                }
                graph.outputs.extend_from_slice(&entry.computed[..take]);
                cache.compiles.fetch_add(1, Ordering::Relaxed);
                Program::compile_named(graph, &format!("{}{sig} debug {take}/{all}", self.name))
                    .map(Arc::new)
                    .map_err(|e| Error::Trace {
                        function: self.name.clone(),
                        signature: sig.to_string(),
                        source: Box::new(Error::Runtime(e)),
                    })
            })
            .clone()?;
        let mut inputs: Vec<Array> = Vec::new();
        let mut params: Vec<Lit> = Vec::new();
        let mut on_device = false;
        for a in args {
            match *a {
                ArgValue::Tensor(t) => match &t.repr {
                    Repr::Concrete(arr) => inputs.push(arr.clone()),
                    _ => on_device = true,
                },
                ArgValue::Float(v, d) => params.push(Lit::from_f64(v, d)),
                ArgValue::Int(_) | ArgValue::Bool(_) | ArgValue::Mark(_) => {}
            }
        }
        // Under a placement the debug program is placed like any other;
        // with device arguments it runs where they live, and its values
        // stay there too (reading one copies it back).
        let mut outs: Vec<Tensor> = if let Some(placement) = crate::placement::current() {
            let mode = self.effective_mode();
            self.call_placed(&program, args, &params, &placement, mode, location)?
                .collect()
        } else if on_device {
            self.run_on_device(&program, args, &params, location)?
        } else {
            self.run_in(
                self.effective_mode(),
                &program,
                &inputs,
                &params,
                location,
                false,
            )?
            .into_iter()
            .map(Tensor::concrete)
            .collect()
        };
        let real = if stopped {
            0
        } else {
            entry.graph.outputs.len()
        };
        for (i, value) in outs.drain(real..).enumerate() {
            let id = entry.computed[i];
            crate::debug::record(
                tilejit_ir::text::op_name(&entry.graph.node(id).op),
                &entry.locs[i],
                value,
                Some(&self.name),
            );
        }
        if stopped {
            return Err(stop_error());
        }
        Ok(Outputs::from_tensor_vec(outs))
    }

    /// A call under a placement: each kernel on the first device that can
    /// run it, values copied between devices where they cross, results on
    /// the placement's first device. Verify mode compares the placed run
    /// with the host's.
    fn call_placed(
        &self,
        program: &Program,
        args: &[ArgValue],
        params: &[Lit],
        placement: &Placement,
        mode: RunMode,
        location: Loc,
    ) -> Result<Outputs> {
        let ran = |source| self.run_error(location, source);
        let mut inputs = Vec::new();
        for a in args {
            if let ArgValue::Tensor(t) = *a {
                inputs.push(t.array("jit call")?);
            }
        }
        if mode == RunMode::Reference {
            let outs = program.run_reference(&inputs, params).map_err(ran)?;
            return Ok(Outputs::from_arrays(outs));
        }
        let (on_sim, report) = crate::placement::plan(placement, program, &self.name, location)?;
        let home = placement.home();
        let outs = program
            .run_placed(&inputs, params, &on_sim, home == crate::Device::sim())
            .map_err(ran)?;
        if mode == RunMode::Verify {
            let placed = outs
                .iter()
                .map(tilejit_runtime::Value::to_host)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(ran)?;
            let host = program.run(&inputs, params).map_err(ran)?;
            let diffs = crate::mode::compare(
                &self.name,
                program.optimized(),
                &inputs,
                params,
                &host,
                &placed,
            )?;
            crate::mode::log_verify(&self.name, &diffs);
            *self.last_verify.lock().unwrap_or_else(|p| p.into_inner()) = Some(diffs);
        }
        *self
            .last_placement
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(report);
        let tensors = outs
            .into_iter()
            .map(|v| match v {
                tilejit_runtime::Value::Host(a) => Tensor::concrete(a).to(&home),
                tilejit_runtime::Value::Device(d) => {
                    Ok(crate::device::sim_tensors(vec![d]).remove(0))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Outputs::from_tensor_vec(tensors))
    }

    /// A call with tensor arguments in device memory: they must all be on
    /// one device (rank-0 host tensors may join), where the program runs
    /// and its results stay.
    fn call_on_device(
        &self,
        program: &Program,
        args: &[ArgValue],
        params: &[Lit],
        location: Loc,
    ) -> Result<Outputs> {
        self.run_on_device(program, args, params, location)
            .map(Outputs::from_tensor_vec)
    }

    /// Runs `program` where its device arguments live (see
    /// [`call_on_device`](Self::call_on_device)): its outputs, on that device.
    fn run_on_device(
        &self,
        program: &Program,
        args: &[ArgValue],
        params: &[Lit],
        location: Loc,
    ) -> Result<Vec<Tensor>> {
        let tensors = args.iter().enumerate().filter_map(|(i, a)| match *a {
            ArgValue::Tensor(t) => {
                let name = self
                    .params
                    .get(i)
                    .map_or_else(|| format!("argument {i}"), |p| format!("`{}`", p.name));
                Some((name, t))
            }
            _ => None,
        });
        #[cfg_attr(not(feature = "remote"), allow(unused_variables))]
        let device = crate::device::common_device(&self.name, location, tensors.clone())?;
        #[cfg(feature = "remote")]
        if let Some(conn) = device.conn() {
            let inputs: Vec<&Tensor> = tensors.map(|(_, t)| t).collect();
            return conn
                .launch(
                    program.name(),
                    program.traced(),
                    crate::remote::program_key(program),
                    &inputs,
                    params,
                )
                .map_err(|s| crate::remote::error(&conn.addr, self.name.clone(), location, s));
        }
        let inputs = tensors
            .map(|(_, t)| match &t.repr {
                Repr::Sim(d) => Ok(tilejit_runtime::Value::Device(d.clone())),
                Repr::Concrete(a) => Ok(tilejit_runtime::Value::Host(a.clone())),
                // The signature lets only concrete tensors through.
                _ => Err(Error::ForeignTrace {
                    op: "jit call",
                    location,
                }),
            })
            .collect::<Result<Vec<_>>>()?;
        let outs = program
            .run_resident(&inputs, params)
            .map_err(|source| self.run_error(location, source))?;
        Ok(crate::device::sim_tensors(outs))
    }

    /// Traces `sig` for a debug scope, with each node's line.
    fn debug_trace(&self, sig: &Signature, args: &[ArgValue], body: &Body) -> Result<DebugTrace> {
        tilejit_runtime::warm_up();
        let debug = self.debug.get_or_init(DebugCache::default);
        debug.traces.note_trace();
        let (graph, locs) = self.trace_with(sig, args, body, true)?;
        let locs = locs.unwrap_or_default();
        let computed = crate::debug::computed_nodes(&graph);
        let locs = computed
            .iter()
            .map(|id| {
                locs.get(id.index())
                    .map_or_else(|| self.location.clone(), ToString::to_string)
            })
            .collect();
        Ok(DebugTrace {
            graph,
            computed,
            locs,
            programs: Mutex::new(HashMap::new()),
        })
    }

    /// For a call about to look `sig` up: if it has no ready program, an
    /// error when frozen, and a line under `TILEJIT_LOG=trace` saying why
    /// it traces. (Off the fast path: only when either is on.)
    fn before_miss(&self, sig: &Signature) -> Result<()> {
        let Some(why) = self.cache.explain_miss(sig) else {
            return Ok(());
        };
        // New sizes of a class with a generic trace need no trace: frozen
        // or not, they compile (from cached kernels).
        if self.is_dynamic() {
            let (class, sizes) = ShapeClass::of(sig);
            if let ClassLookup::Fits(_) = self.lookup_class(&class, &sizes) {
                return Ok(());
            }
        }
        if self.frozen.load(Ordering::Relaxed) {
            return Err(Error::Frozen {
                function: self.name.clone(),
                signature: sig.to_string(),
                nearest: why,
            });
        }
        eprintln!("[tilejit] tracing `{}` for {sig}: {why}", self.name);
        Ok(())
    }

    /// Stops (or, with `false`, resumes) tracing: while frozen, a call
    /// whose signature has no compiled program is an error
    /// ([`Error::Frozen`], naming the nearest signature seen) instead of a
    /// new trace and compile. For serving code whose shapes must all have
    /// been warmed up: an unexpected shape fails loudly rather than paying
    /// a compile in the middle of traffic. A frozen dynamic function still
    /// compiles new sizes of shape classes it has traced (no trace runs).
    pub fn freeze(&self, frozen: bool) {
        self.frozen.store(frozen, Ordering::Relaxed);
    }

    /// Whether [`freeze`](Self::freeze) is on.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::Relaxed)
    }

    /// Bounds the handler cache to `signatures` compiled programs (default
    /// [`tilejit_runtime::DEFAULT_MAX_SIGNATURES`]), evicting the least
    /// recently used at once if over; `stats().evictions` counts them. An
    /// evicted signature retraces on its next call (its kernels usually
    /// come back from the kernel cache).
    pub fn set_capacity(&self, signatures: usize) {
        self.cache.set_capacity(signatures);
    }

    /// Called inside another trace: run the body on the caller's values.
    fn inline(&self, args: &[ArgValue], body: &Body) -> Result<Outputs> {
        self.check_args(args)?;
        let values: Vec<TraceValue> = args
            .iter()
            .map(|a| match *a {
                ArgValue::Tensor(t) => TraceValue::Tensor(t.clone()),
                ArgValue::Float(v, d) => {
                    let mut t = Tensor::scalar(v, d);
                    t.weak = true;
                    TraceValue::Tensor(t)
                }
                ArgValue::Int(v) => TraceValue::Int(v),
                ArgValue::Bool(v) => TraceValue::Bool(v),
                ArgValue::Mark(m) => mark_value(m),
            })
            .collect();
        body(&values).map(Outputs::from_tensor_vec)
    }

    fn trace_and_compile(
        &self,
        sig: &Signature,
        args: &[ArgValue],
        body: &Body,
    ) -> Result<Program> {
        // The first trace in a process starts warming the compiler on an
        // idle core, so the compile after the trace runs warmer.
        tilejit_runtime::warm_up();
        let (graph, size_params) = match self.is_dynamic() {
            true => self.dynamic_graph(sig, args, body)?,
            false => (self.trace(sig, args, body)?, Vec::new()),
        };
        Program::compile_named(graph, &format!("{}{sig}", self.name))
            .map(|p| p.with_size_params(size_params))
            .map_err(|e| Error::Trace {
                function: self.name.clone(),
                signature: sig.to_string(),
                source: Box::new(Error::Runtime(e)),
            })
    }

    /// A dynamic function's graph for `sig`, with the values of the params
    /// it added for sizes: a graph of its class that fits `sig`'s sizes,
    /// instantiated, when there is one or one can be learnt
    /// ([`learn_class`](Self::learn_class)); else an exact trace (why is
    /// logged under `TILEJIT_LOG=trace`).
    fn dynamic_graph(
        &self,
        sig: &Signature,
        args: &[ArgValue],
        body: &Body,
    ) -> Result<(Graph, Vec<Lit>)> {
        let (class, sizes) = ShapeClass::of(sig);
        let log = crate::config::config().log.trace;
        let say = |what: &str| {
            if log {
                eprintln!("[tilejit] `{}`: {sig}: {what}", self.name);
            }
        };
        // Frozen: whatever would trace below is an error instead (the
        // class may have been dropped since `before_miss` looked).
        let no_trace = || -> Result<()> {
            match self.is_frozen() {
                true => Err(Error::Frozen {
                    function: self.name.clone(),
                    signature: sig.to_string(),
                    nearest: format!("class {class} has no generic trace for these sizes"),
                }),
                false => Ok(()),
            }
        };
        let graph = match self.lookup_class(&class, &sizes) {
            ClassLookup::Fits(g) => {
                // No user code runs for this build: callers waiting on it
                // wait for the compile, not `TRACE_WAIT`.
                tilejit_runtime::user_code_done();
                Some(g)
            }
            ClassLookup::PerSize => None,
            ClassLookup::Learn(pinned) => {
                no_trace()?;
                let learnt = match self.learn_class(&class, &sizes, pinned, args, body) {
                    Ok(g) => Ok(g),
                    // A class whose exact trace fails too is not kept: the
                    // next call of it traces again, as an exact function's.
                    Err(why) => Err((why, self.trace(sig, args, body)?)),
                };
                let mut classes = self.classes.lock().unwrap_or_else(|p| p.into_inner());
                if classes.len() >= MAX_CLASSES && !classes.contains_key(&class) {
                    classes.clear();
                }
                let entry = classes.entry(class.clone()).or_default();
                match learnt {
                    Ok(g) => {
                        let g = Arc::new(g);
                        say(&format!("class {class} traced{}", pins_note(g.pinned())));
                        if entry.graphs.len() >= MAX_PINNINGS {
                            entry.per_size = Some(format!(
                                "more than {MAX_PINNINGS} values of the sizes the body reads"
                            ));
                        } else {
                            entry.graphs.push(g.clone());
                        }
                        Some(g)
                    }
                    Err((why, exact)) => {
                        say(&format!("class {class} is traced per size: {why}"));
                        entry.per_size.get_or_insert(why);
                        return Ok((exact, Vec::new()));
                    }
                }
            }
        };
        if let Some(g) = graph {
            match g.instantiate(&sizes) {
                Ok(instance) => {
                    say(&format!("a size of class {class}: instantiated"));
                    return Ok(instance);
                }
                Err(why) => say(&format!(
                    "traced exactly: sizes do not fit the class: {why}"
                )),
            }
        }
        no_trace()?;
        Ok((self.trace(sig, args, body)?, Vec::new()))
    }

    /// Which graph of `class` serves these sizes, if any.
    fn lookup_class(&self, class: &ShapeClass, sizes: &[usize]) -> ClassLookup {
        let classes = self.classes.lock().unwrap_or_else(|p| p.into_inner());
        let Some(entry) = classes.get(class) else {
            return ClassLookup::Learn(vec![None; class.symbols()]);
        };
        if let Some(g) = entry.graphs.iter().find(|g| g.fits(sizes)) {
            return ClassLookup::Fits(g.clone());
        }
        if entry.per_size.is_some() {
            return ClassLookup::PerSize;
        }
        // The symbols other sizes had to pin are read at these too: start
        // with them pinned at these sizes' values.
        let mut pinned = vec![None; class.symbols()];
        for g in &entry.graphs {
            for ((p, g), &s) in pinned.iter_mut().zip(g.pinned()).zip(sizes) {
                if g.is_some() {
                    *p = Some(s);
                }
            }
        }
        ClassLookup::Learn(pinned)
    }

    /// Learns `class`'s graph for `sizes`: traces at stand-in sets A and B
    /// with `pinned` symbols at their values, pins the symbols behind any
    /// size the traces read ([`ShapeClass::pins_for_reads`]) and traces
    /// again, until the reads pin nothing new; then the two traces must
    /// read as one graph ([`GenericGraph::new`]). `Err` says why the class
    /// is traced per size (every symbol read, or a size computed in a way
    /// the reading cannot follow).
    fn learn_class(
        &self,
        class: &ShapeClass,
        sizes: &[usize],
        mut pinned: Vec<Option<usize>>,
        args: &[ArgValue],
        body: &Body,
    ) -> std::result::Result<GenericGraph, String> {
        let watched = |set: Standin, pinned: &[Option<usize>]| {
            let sig = class.standin_signature(set, pinned)?;
            // Trace A is abandoned at a read that pins a symbol (it is
            // redone with the pin); trace B runs whole.
            let doom_on = match set {
                Standin::A => class.free_standins(set, pinned),
                Standin::B => Vec::new(),
            };
            let watch = trace::ProbeGuard::start(doom_on);
            let traced = self.trace(&sig, args, body);
            Ok::<_, String>((traced, watch.finish()))
        };
        loop {
            if !class_has_free_symbol(&pinned) {
                return Err(match class.symbols() {
                    0 => "no size symbols".into(),
                    _ => "the body reads every size".into(),
                });
            }
            let (a, reads_a) = watched(Standin::A, &pinned)?;
            if reads_a.unseen {
                return Err(reads_a.why.unwrap_or_default());
            }
            // Sizes read that are plainly symbols are pinned at once.
            let plain = class.pins_in_reads(&pinned, &reads_a.values);
            if !plain.is_empty() {
                for s in plain {
                    pinned[s as usize] = Some(sizes[s as usize]);
                }
                continue;
            }
            let (b, reads_b) = watched(Standin::B, &pinned)?;
            if reads_b.unseen {
                return Err(reads_b.why.unwrap_or_default());
            }
            let why = || reads_a.why.clone().unwrap_or_default();
            let new = class
                .pins_for_reads(&pinned, &reads_a.values, &reads_b.values)
                .map_err(|e| format!("{e}; {}", why()))?;
            if !new.is_empty() {
                for s in new {
                    pinned[s as usize] = Some(sizes[s as usize]);
                }
                continue;
            }
            let a = a.map_err(|e| format!("at stand-in sizes: {e}"))?;
            let b = b.map_err(|e| format!("at stand-in sizes: {e}"))?;
            return GenericGraph::new(class, &pinned, a, &b);
        }
    }

    /// Runs the body on traced arguments of `sig`'s types: the graph it
    /// records, with its outputs.
    fn trace(&self, sig: &Signature, args: &[ArgValue], body: &Body) -> Result<Graph> {
        self.cache.note_trace();
        self.trace_with(sig, args, body, false).map(|(g, _)| g)
    }

    /// [`trace`](Self::trace), counting nothing; with `locations`, also
    /// each node's source line.
    fn trace_with(
        &self,
        sig: &Signature,
        args: &[ArgValue],
        body: &Body,
        locations: bool,
    ) -> Result<(Graph, Option<Vec<Loc>>)> {
        let wrap = |source: Error| Error::Trace {
            function: self.name.clone(),
            signature: sig.to_string(),
            source: Box::new(source),
        };
        let (id, guard) = TraceGuard::start(locations);
        let values = trace::with(|state| -> Result<Vec<TraceValue>> {
            let state = state.ok_or_else(|| {
                wrap(Error::ForeignTrace {
                    op: "trace start",
                    location: Loc::caller(),
                })
            })?;
            let (mut n_inputs, mut n_params) = (0u32, 0u32);
            let mut values = Vec::with_capacity(args.len());
            for (a, s) in args.iter().zip(&sig.args) {
                values.push(match (*a, *s) {
                    (ArgValue::Tensor(_), ArgSig::Tensor(ty)) => {
                        let node = state
                            .graph
                            .add(Op::Input {
                                index: n_inputs,
                                ty,
                            })
                            .map_err(|e| wrap(Error::Runtime(e.into())))?;
                        n_inputs += 1;
                        TraceValue::Tensor(Tensor {
                            repr: Repr::Traced {
                                trace: id,
                                node,
                                ty,
                            },
                            weak: false,
                        })
                    }
                    (ArgValue::Float(_, dtype), _) => {
                        let node = state
                            .graph
                            .add(Op::Param {
                                index: n_params,
                                dtype,
                            })
                            .map_err(|e| wrap(Error::Runtime(e.into())))?;
                        n_params += 1;
                        let ty = state.graph.ty(node);
                        TraceValue::Tensor(Tensor {
                            repr: Repr::Traced {
                                trace: id,
                                node,
                                ty,
                            },
                            weak: true,
                        })
                    }
                    (ArgValue::Int(v), _) => TraceValue::Int(v),
                    (ArgValue::Bool(v), _) => TraceValue::Bool(v),
                    (ArgValue::Mark(m), _) => mark_value(m),
                    (ArgValue::Tensor(_), _) => {
                        return Err(wrap(Error::Arguments {
                            function: self.name.clone(),
                            message: "signature mismatch".into(),
                        }))
                    }
                });
            }
            Ok(values)
        })?;
        let result = catch_unwind(AssertUnwindSafe(|| body(&values)));
        drop(values);
        let state = guard.finish();
        if let Some(st) = &state {
            let mut ops = self.gather_ops.lock().unwrap_or_else(|p| p.into_inner());
            for op in &st.gathers {
                if !ops.contains(op) {
                    ops.push(op);
                }
            }
        }
        // The user's code is done: callers waiting for this build now wait
        // for the compile, however long it takes.
        tilejit_runtime::user_code_done();
        let outputs = match result {
            Err(payload) => {
                return Err(Error::Panic {
                    function: self.name.clone(),
                    signature: sig.to_string(),
                    message: panic_message(payload.as_ref()),
                })
            }
            Ok(Err(e)) => return Err(wrap(e)),
            Ok(Ok(outputs)) => outputs,
        };
        let mut state = state.ok_or_else(|| {
            wrap(Error::ForeignTrace {
                op: "trace end",
                location: Loc::caller(),
            })
        })?;
        if let Some(e) = state.first_error.take() {
            return Err(wrap(e));
        }
        for t in &outputs {
            let node = match &t.repr {
                Repr::Traced { trace, node, .. } if *trace == id => *node,
                Repr::Traced { .. } => {
                    return Err(wrap(Error::ForeignTrace {
                        op: "return",
                        location: Loc::caller(),
                    }))
                }
                Repr::Concrete(a) => state.graph.add_constant(a.clone()),
                Repr::Sim(_) => state.graph.add_constant(t.array("return").map_err(wrap)?),
                #[cfg(feature = "remote")]
                Repr::Remote(_) => state.graph.add_constant(t.array("return").map_err(wrap)?),
                Repr::Error(e) => return Err(wrap((**e).clone())),
            };
            state.graph.outputs.push(node);
        }
        Ok((state.graph, state.locs))
    }

    /// The handler cache's entries, sorted by signature.
    pub fn handlers(&self) -> Vec<HandlerInfo> {
        self.cache
            .entries()
            .into_iter()
            .map(|e| HandlerInfo {
                compile_time: e.build_time,
                signature: e.signature,
                hits: e.hits,
                last_used: e.last_used,
                program: e.value,
            })
            .collect()
    }

    /// Writes every signature this function holds (graphs, kernels, host
    /// code, Sim bytecode, constants) to one snapshot file at `path`,
    /// replaced atomically. Compiles each program's Sim form first if a
    /// Sim run has not, so the snapshot serves Sim calls too.
    ///
    /// ```
    /// use tilejit::prelude::*;
    ///
    /// #[jit]
    /// fn double(x: &Tensor) -> Tensor { x * 2.0 }
    ///
    /// let path = std::env::temp_dir().join(format!("double-{}.tjsnap", std::process::id()));
    /// double(&Tensor::ones(&[4], DType::F32))?;
    /// double::jit().save(&path)?;
    /// double::jit().clear();
    /// assert_eq!(double::jit().load(&path)?, 1);    // no trace; kernels still cached
    /// double::jit().freeze(true);
    /// assert_eq!(double(&Tensor::ones(&[4], DType::F32))?.to_vec::<f32>()?, [2.0; 4]);
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let programs: Vec<(Signature, Arc<Program>)> = self
            .cache
            .entries()
            .into_iter()
            .map(|e| (e.signature, e.value))
            .collect();
        tilejit_runtime::snapshot::save(
            path.as_ref(),
            &self.qualified_name(),
            &self.body_digest,
            &programs,
        )?;
        Ok(())
    }

    /// Fills the handler cache from a snapshot [`save`](Self::save)
    /// wrote for this function (same module path, name and body; another
    /// function's is an error naming both): returns how many signatures it
    /// holds, each of which now runs with no trace.
    ///
    /// Safe whatever the file holds: only its graphs are used. Each is
    /// verified and compiled here, its kernels taken from the kernel cache
    /// or this machine's own disk cache when they are there (then nothing
    /// compiles) and compiled otherwise. The stored machine code is never
    /// run; [`load_code`](Self::load_code) links it, for files you trust.
    /// A missing, damaged or foreign file is an error and changes nothing.
    pub fn load(&self, path: impl AsRef<Path>) -> Result<usize> {
        Ok(self.load_snapshot(path)?.signatures)
    }

    /// [`load`](Self::load), saying what it did.
    pub fn load_snapshot(&self, path: impl AsRef<Path>) -> Result<SnapshotLoad> {
        self.load_with(path.as_ref(), false)
    }

    /// [`load`](Self::load), but also links the snapshot's stored host
    /// machine code (and Sim bytecode, verified again), so not even the
    /// kernels compile, with the disk cache off too. A snapshot from
    /// another tilejit build or for another CPU (any Cranelift ISA flag
    /// differing) is recompiled from its graphs instead, and
    /// [`SnapshotLoad::recompiled`] says why.
    ///
    /// # Safety
    ///
    /// The machine code is run as it is; nothing can check what it does.
    /// Call this only on a file you know to be the unchanged output of
    /// [`save`](Self::save) by a tilejit you trust, for instance one your
    /// own deployment wrote where no one else can write. The checksum
    /// only proves the file was not damaged by accident: an altered file
    /// with its checksum made again may read or write any memory, crash,
    /// hang or compute wrong results.
    ///
    /// ```
    /// # #![allow(unsafe_code)]
    /// use tilejit::prelude::*;
    ///
    /// #[jit]
    /// fn triple(x: &Tensor) -> Tensor { x * 3.0 }
    ///
    /// // A file this program writes itself, in a directory only it can write.
    /// let dir = std::env::temp_dir().join(format!("triple-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).ok();
    /// let path = dir.join("triple.tjsnap");
    /// triple(&Tensor::ones(&[4], DType::F32))?;
    /// triple::jit().save(&path)?;
    /// triple::jit().clear();
    /// // SAFETY: written just above by this very build, unchanged since.
    /// let loaded = unsafe { triple::jit().load_code(&path)? };
    /// assert_eq!((loaded.signatures, loaded.recompiled), (1, None));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    #[allow(unsafe_code)] // declares the contract and forwards it
    pub unsafe fn load_code(&self, path: impl AsRef<Path>) -> Result<SnapshotLoad> {
        self.load_with(path.as_ref(), true)
    }

    /// [`load_snapshot`](Self::load_snapshot), or with `code`,
    /// [`load_code`](Self::load_code) (whose caller vouched for the file).
    #[allow(unsafe_code)] // `code` is true only from `load_code`
    fn load_with(&self, path: &Path, code: bool) -> Result<SnapshotLoad> {
        let trees = self.params.iter().any(|p| p.kind == ArgKind::Tree);
        let fits = |sig: &Signature| {
            // Leaves of lists and structs are checked by the body that
            // rebuilds them (lengths and structure keys are in the signature).
            trees
                || (sig.args.len() == self.params.len()
                    && sig.args.iter().zip(&self.params).all(|(a, p)| {
                        matches!(
                            (a, p.kind),
                            (ArgSig::Tensor(_), ArgKind::Tensor)
                                | (ArgSig::Float(_), ArgKind::Float)
                                | (ArgSig::Int(_), ArgKind::Int)
                                | (ArgSig::Bool(_), ArgKind::Bool)
                        )
                    }))
        };
        let (name, body) = (self.qualified_name(), self.body_digest.as_str());
        let loaded = if code {
            // SAFETY: only `load_code` passes `code`, and its caller took
            // on the same contract for this file.
            unsafe { tilejit_runtime::snapshot::load_code(path, &name, body, &fits)? }
        } else {
            tilejit_runtime::snapshot::load(path, &name, body, &fits)?
        };
        let signatures = loaded.programs.len();
        for (sig, program) in loaded.programs {
            let took = program.compile_time();
            self.cache.insert(sig, program, took);
        }
        Ok(SnapshotLoad {
            signatures,
            recompiled: loaded.recompiled,
        })
    }

    /// Hit/miss/build counters.
    pub fn stats(&self) -> HandlerStats {
        self.cache.stats()
    }

    /// Empties the handler cache and forgets the shape classes and debug
    /// traces (the next call of each signature retraces).
    pub fn clear(&self) {
        self.cache.clear();
        if let Some(d) = self.debug.get() {
            d.traces.clear();
        }
        self.classes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Why a call with these arguments would trace again: the arguments that
    /// differ from the nearest cached signature; `None` if it would hit.
    pub fn explain_miss(&self, args: &[ArgValue]) -> Result<Option<String>> {
        Ok(self.cache.explain_miss(&self.signature(args)?))
    }
}

impl fmt::Display for JitFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.stats();
        let handlers = self.handlers();
        writeln!(
            f,
            "jit function `{}` ({}): {} signature(s), {} hit(s), {} miss(es), {} build(s), {} trace(s), {} failed, {} evicted{}{}",
            self.name,
            self.location,
            handlers.len(),
            s.hits,
            s.misses,
            s.builds,
            s.traces,
            s.failures,
            s.evictions,
            if self.is_dynamic() { ", dynamic" } else { "" },
            if self.is_frozen() { ", frozen" } else { "" }
        )?;
        let mut classes: Vec<(String, String)> = {
            let classes = self.classes.lock().unwrap_or_else(|p| p.into_inner());
            classes
                .iter()
                .map(|(class, e)| {
                    // Which symbols the graphs pin (the guards), and how
                    // many values of them were seen.
                    let pinned: Vec<String> = e
                        .graphs
                        .first()
                        .map(|g| g.pinned())
                        .unwrap_or_default()
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| p.is_some())
                        .map(|(i, _)| format!("n{i}"))
                        .collect();
                    let state = match (&e.per_size, pinned.is_empty()) {
                        (Some(why), _) => format!("traced per size ({why})"),
                        (None, true) => "generic".to_string(),
                        (None, false) => format!(
                            "generic but for {} (read by the body; {} value(s) seen)",
                            pinned.join(", "),
                            e.graphs.len()
                        ),
                    };
                    (class.to_string(), state)
                })
                .collect()
        };
        classes.sort();
        for (class, state) in classes {
            writeln!(f, "  class {class}: {state}")?;
        }
        for h in &handlers {
            writeln!(
                f,
                "  {}  hits {}  compile {:.3} ms  nodes {} -> {}",
                h.signature,
                h.hits,
                h.compile_time.as_secs_f64() * 1e3,
                h.program.traced().len(),
                h.program.optimized().len()
            )?;
        }
        Ok(())
    }
}

/// A jit-compiled closure (from `jit_fn!`). Derefs to its [`JitFunction`]
/// for inspection (`handlers()`, `clear()`, ...).
pub struct JitFn<'f, Out> {
    func: JitFunction,
    body: Box<Body<'f>>,
    _out: PhantomData<fn() -> Out>,
}

impl<'f, Out: JitOutput> JitFn<'f, Out> {
    /// Wraps a body, with no module path or body digest.
    pub fn new<F>(name: &str, location: &str, params: &[ParamSpec], body: F) -> Self
    where
        F: Fn(&[TraceValue]) -> Result<Out> + Send + Sync + 'f,
    {
        JitFn::with_identity(name, "", "", location, params, body)
    }

    /// Wraps a body defined in `module` whose tokens have digest
    /// `body_digest` (the `jit_fn!` macro calls this; see
    /// [`JitFunction::with_identity`]).
    pub fn with_identity<F>(
        name: &str,
        module: &str,
        body_digest: &str,
        location: &str,
        params: &[ParamSpec],
        body: F,
    ) -> Self
    where
        F: Fn(&[TraceValue]) -> Result<Out> + Send + Sync + 'f,
    {
        JitFn {
            func: JitFunction::with_identity(name, module, body_digest, location, params),
            body: Box::new(move |v| body(v).map(JitOutput::into_tensors)),
            _out: PhantomData,
        }
    }

    /// Calls it with a tuple of arguments (`f.call((&a, &b))`, or `f.call(&a)`).
    #[track_caller]
    pub fn call<A: JitArgs>(&self, args: A) -> Result<Out> {
        let outs = self.func.call(&args.args(), &*self.body)?;
        Out::from_tensors(outs)
    }

    /// This function with a run mode for the calls made through the result
    /// (`f.with_mode(RunMode::Sim).call((&a, &b))`).
    pub fn with_mode(&self, mode: RunMode) -> WithMode<'_, 'f, Out> {
        WithMode { f: self, mode }
    }

    /// Why a call with these arguments would trace again (see [`JitFunction::explain_miss`]).
    pub fn explain_miss<A: JitArgs>(&self, args: A) -> Result<Option<String>> {
        self.func.explain_miss(&args.args())
    }
}

impl<Out> std::ops::Deref for JitFn<'_, Out> {
    type Target = JitFunction;
    fn deref(&self) -> &JitFunction {
        &self.func
    }
}

impl<Out> fmt::Display for JitFn<'_, Out> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.func.fmt(f)
    }
}

/// Kinds of a declared parameter list (used by the macros' generated code).
pub fn param(name: &'static str, kind: ArgKind) -> ParamSpec {
    ParamSpec { name, kind }
}

/// A list's length or a struct's key as the body reads it (an integer).
fn mark_value(m: Mark) -> TraceValue {
    match m {
        Mark::Len(n) => TraceValue::Int(n as i64),
        Mark::Struct(k) => TraceValue::Int(k as i64),
    }
}

/// Calls `f` on the host arrays of `args` when every argument is a host
/// tensor or a trace-time constant (no float params), at most eight of
/// them; `None` otherwise. On the stack: no vector for a tiny call.
#[inline]
fn with_host_inputs<'a, R>(args: &[ArgValue<'a>], f: impl FnOnce(&[&'a Array]) -> R) -> Option<R> {
    const MOST: usize = 8;
    fn concrete<'a>(a: &ArgValue<'a>) -> Option<Option<&'a Array>> {
        match *a {
            ArgValue::Tensor(t) => match &t.repr {
                Repr::Concrete(arr) => Some(Some(arr)),
                _ => None,
            },
            ArgValue::Float(..) => None,
            ArgValue::Int(_) | ArgValue::Bool(_) | ArgValue::Mark(_) => Some(None),
        }
    }
    let Some(first) = args.iter().find_map(|a| concrete(a).flatten()) else {
        // No tensor at all, or the first tensor is not on the host.
        return args
            .iter()
            .all(|a| matches!(concrete(a), Some(None)))
            .then(|| f(&[]));
    };
    let mut arrays = [first; MOST];
    let mut n = 0;
    for a in args {
        if let Some(arr) = concrete(a)? {
            *arrays.get_mut(n)? = arr;
            n += 1;
        }
    }
    Some(f(&arrays[..n]))
}

/// True when `args` have exactly the signature `sig` (concrete tensors of
/// its types, the same static values, floats of its dtypes).
fn signature_matches(sig: &Signature, args: &[ArgValue]) -> bool {
    sig.args.len() == args.len()
        && sig.args.iter().zip(args).all(|(s, a)| match (s, a) {
            // Host tensors only: device calls (milliseconds) take the
            // slower lookup, which keeps this check as small as W6 needs.
            (ArgSig::Tensor(t), ArgValue::Tensor(x)) => {
                matches!(&x.repr, Repr::Concrete(arr) if arr.has_type(t))
            }
            (ArgSig::Float(d), ArgValue::Float(_, e)) => d == e,
            (ArgSig::Int(v), ArgValue::Int(w)) => v == w,
            (ArgSig::Bool(v), ArgValue::Bool(w)) => v == w,
            (ArgSig::Mark(m), ArgValue::Mark(n)) => m == n,
            _ => false,
        })
}

/// A [`JitFn`] whose calls run in a chosen mode.
pub struct WithMode<'a, 'f, Out> {
    f: &'a JitFn<'f, Out>,
    mode: RunMode,
}

impl<Out: JitOutput> WithMode<'_, '_, Out> {
    /// Calls the function in this mode.
    #[track_caller]
    pub fn call<A: JitArgs>(&self, args: A) -> Result<Out> {
        let _scope = crate::mode::Scope::enter(self.mode);
        let outs = self.f.func.call(&args.args(), &*self.f.body)?;
        Out::from_tensors(outs)
    }
}

/// Whether some symbol is still free (not pinned).
fn class_has_free_symbol(pinned: &[Option<usize>]) -> bool {
    pinned.iter().any(Option::is_none)
}

/// `", pinned n1 = 5"` for a graph's pinned symbols (for the log).
fn pins_note(pinned: &[Option<usize>]) -> String {
    let pins: Vec<String> = pinned
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.map(|v| format!("n{i} = {v}")))
        .collect();
    match pins.is_empty() {
        true => ": later sizes need no trace".into(),
        false => format!(
            ", pinned {}: later sizes with those need no trace",
            pins.join(", ")
        ),
    }
}
