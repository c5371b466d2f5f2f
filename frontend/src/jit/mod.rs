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
//!
//! The module's files, one job each: this one holds the types and their
//! small accessors; `call` looks a signature up, traces and compiles a
//! miss and dispatches the run (host, placed, device); `dynamic` learns
//! and looks up shape classes; `debug` serves calls inside
//! `tilejit::debug` scopes; `snapshot` saves and loads handler caches.

mod call;
mod debug;
mod dynamic;
mod snapshot;

pub use snapshot::SnapshotLoad;

use crate::args::{ArgKind, ArgValue, JitArgs, JitOutput, ParamSpec, TraceValue};
use crate::error::{Error, Result};
use crate::mode::RunMode;
use crate::placement::KernelPlacement;
use crate::tensor::Tensor;
use debug::DebugCache;
use dynamic::ClassEntry;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tilejit_runtime::{HandlerCache, HandlerStats, Program, ShapeClass, Signature};

/// A traced body: receives the arguments as trace values, returns outputs.
#[doc(hidden)]
pub type Body<'b> = dyn Fn(&[TraceValue]) -> Result<Vec<Tensor>> + Send + Sync + 'b;

/// A `#[jit]` function's body as a plain function.
#[doc(hidden)]
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
/// f.freeze();                                  // from now on, a new signature is an error
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
    /// Key the handler cache's traces on shape classes: 0 no, else
    /// [`dynamic::AUTOMATIC`] (`make_dynamic`) or [`dynamic::ALL`]
    /// (`make_dynamic_all`).
    dynamic: AtomicU8,
    /// Under automatic dynamic, per structure (a signature less its
    /// sizes), the dims seen and which have varied.
    seen: Mutex<HashMap<tilejit_runtime::Structure, tilejit_runtime::SeenDims>>,
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
    #[doc(hidden)]
    pub fn new(name: &str, location: &str, params: &[ParamSpec]) -> JitFunction {
        JitFunction::with_identity(name, "", "", location, params)
    }

    /// Declares a jit function defined in `module` (`module_path!()`)
    /// whose signature and body have digest `body_digest` (the macros
    /// call this): a snapshot loads only into a function with the same
    /// module path, name and body digest.
    #[doc(hidden)]
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
            dynamic: AtomicU8::new(0),
            seen: Mutex::new(HashMap::new()),
            classes: Mutex::new(HashMap::new()),
            debug: OnceLock::new(),
            gather_ops: Mutex::new(Vec::new()),
        }
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

    /// Stops tracing: while frozen, a call whose signature has no
    /// compiled program is an error ([`Error::Frozen`], naming the nearest
    /// signature seen) instead of a new trace and compile. For serving
    /// code whose shapes must all have been warmed up: an unexpected shape
    /// fails loudly rather than paying a compile in the middle of traffic.
    /// A frozen dynamic function still compiles new sizes of shape classes
    /// it has traced (no trace runs). [`unfreeze`](Self::unfreeze) undoes it.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::Relaxed);
    }

    /// Resumes tracing after [`freeze`](Self::freeze) (the default state).
    pub fn unfreeze(&self) {
        self.frozen.store(false, Ordering::Relaxed);
    }

    /// Whether the function is frozen ([`freeze`](Self::freeze)).
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
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Why a call with these arguments would trace again: the arguments that
    /// differ from the nearest cached signature; `None` if it would hit.
    pub fn explain_miss(&self, args: &[ArgValue]) -> Result<Option<String>> {
        Ok(self.cache.explain_miss(&self.signature(args)?))
    }
}

/// About how long a signature's line in a function's `Display` may be:
/// a model's weights as arguments are thousands of characters whole.
const SIGNATURE_CHARS: usize = 160;

/// `sig` as errors, log lines and program names show it: abbreviated like
/// `Display`'s lines, since a model's whole signature is kilobytes.
pub(crate) fn short(sig: &tilejit_runtime::Signature) -> String {
    sig.abbreviated(SIGNATURE_CHARS)
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
            match self.dynamic.load(Ordering::Relaxed) {
                0 => "",
                dynamic::ALL => ", dynamic (every dim)",
                _ => ", dynamic",
            },
            if self.is_frozen() { ", frozen" } else { "" }
        )?;
        for (class, state) in self.class_states() {
            writeln!(f, "  class {class}: {state}")?;
        }
        for h in &handlers {
            writeln!(
                f,
                "  {}  hits {}  compile {:.3} ms  nodes {} -> {}",
                h.signature.abbreviated(SIGNATURE_CHARS),
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
    #[doc(hidden)]
    pub fn new<F>(name: &str, location: &str, params: &[ParamSpec], body: F) -> Self
    where
        F: Fn(&[TraceValue]) -> Result<Out> + Send + Sync + 'f,
    {
        JitFn::with_identity(name, "", "", location, params, body)
    }

    /// Wraps a body defined in `module` whose tokens have digest
    /// `body_digest` (the `jit_fn!` macro calls this; see
    /// [`JitFunction::with_identity`]).
    #[doc(hidden)]
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

/// A declared parameter, for the macros' expansions.
#[doc(hidden)]
pub fn param(name: &'static str, kind: ArgKind) -> ParamSpec {
    ParamSpec { name, kind }
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
