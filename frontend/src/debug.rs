//! Looking inside a computation: every value its ops make, where the first
//! NaN came from, and running it only up to an op (Icraft XRT's
//! `setDumpOutputs` and `stepTo`, JAX's `debug_nans`).
//!
//! [`intermediates`] runs a closure in a *debug scope* and returns, beside
//! its result, an [`Intermediate`] for every value an op computed inside:
//! the graph op that made it (`"log"`), the user's line that called it
//! (`file:line:col`) and the value itself. Eager ops are recorded as they
//! run; a jit call is traced again with each node's line recorded, and
//! compiled as a *debug program* whose outputs are every computed node
//! beside the real results, so fusion materialises each one. The debug
//! program is cached in its [`JitFunction`](crate::JitFunction) apart from
//! the handler cache, per signature (a second call in a scope neither
//! traces nor compiles: [`JitFunction::debug_stats`](crate::JitFunction::debug_stats)),
//! and runs in the call's run mode (Host, Sim, Verify or Reference). The
//! function's normal programs are never touched.
//!
//! ```
//! use tilejit::prelude::*;
//! use tilejit::debug;
//!
//! #[jit]
//! fn f(x: &Tensor, y: &Tensor) -> Tensor {
//!     (x - 1.0).log() * y
//! }
//!
//! let x = Tensor::from_vec(vec![2.0f32, 0.5, 3.0], &[3])?;
//! let y = Tensor::ones(&[3], DType::F32);
//! let (z, values) = debug::intermediates(|| f(&x, &y));
//! assert!(z?.to_vec::<f32>()?[1].is_nan());
//! let ops: Vec<&str> = values.iter().map(|v| v.op.as_str()).collect();
//! assert_eq!(ops, ["sub", "log", "mul"]);
//! // log(0.5 - 1) is where the NaN was made, on `f`'s line above.
//! let bad = debug::first_nonfinite(&values).unwrap();
//! assert_eq!(bad.op, "log");
//! assert_eq!(bad.function.as_deref(), Some("f"));
//! // Run only the first op: later ops do not run, and say why.
//! let first = debug::step_to(1, || f(&x, &y));
//! assert_eq!(first.len(), 1);
//! assert_eq!(first[0].value.to_vec::<f32>()?, [1.0, -0.5, 2.0]);
//! # Ok::<(), tilejit::Error>(())
//! ```
//!
//! What counts as a value: the result of every graph node an op adds
//! (a composite op such as `softmax` adds several, all on its line), but
//! not a call's inputs, float parameters or constants. An op whose graph
//! is folded away (`x * 1.0`) still has its value. Ops inside a nested jit
//! call carry their own lines; an eager op run while a jit body is being
//! traced makes a constant of that trace and is not recorded. Tensors made
//! from data (`from_vec`, `ones`, `randn`) are not ops.
//!
//! Scopes are per thread and nest: a value is recorded in every scope open
//! on the thread, each numbering it in its own order, and a panic inside
//! the closure closes its scope. Outside any scope a jit call or eager op
//! pays one thread-local flag read.

use crate::error::Loc;
use crate::tensor::Tensor;
use std::cell::{Cell, RefCell};
use std::fmt;
use tilejit_ir::{ErrorKind, Graph, IrError, NodeId, Op};

/// What a jit function's debug calls cost
/// ([`JitFunction::debug_stats`](crate::JitFunction::debug_stats)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DebugStats {
    /// Traces made for debug scopes (one per signature).
    pub traces: u64,
    /// Debug programs compiled (one per signature, plus one per distinct
    /// `step_to` stop inside a call).
    pub compiles: u64,
}

/// One value an op computed inside [`intermediates`] or [`step_to`].
#[derive(Clone, Debug)]
pub struct Intermediate {
    /// The graph op that made it, as the IR text names it (`"log"`,
    /// `"mul"`, `"reduce_sum"`, `"broadcast"`).
    pub op: String,
    /// The user's `file:line:col` of the call that added the op.
    pub location: String,
    /// The value (concrete, on the host).
    pub value: Tensor,
    /// The jit function whose program computed it (the outermost one, for
    /// an inlined call); `None` for an eager op.
    pub function: Option<String>,
    /// Its position among all values recorded in the scope, from 0.
    pub index: usize,
}

impl Intermediate {
    /// How many elements are NaN or ±inf (0 for integer and bool values).
    pub fn nonfinite_count(&self) -> usize {
        // A device value is read back (a copy).
        let Ok(a) = self.value.array("nonfinite_count") else {
            return 0;
        };
        if !a.dtype().is_float() {
            return 0;
        }
        let b = a.buffer();
        (0..b.len())
            .filter(|&j| !b.get(j).as_f64().is_finite())
            .count()
    }
}

impl fmt::Display for Intermediate {
    /// One line: `#2 log f32[3] at src/main.rs:7:9 in `f``, then how many
    /// elements are not finite, if any.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ty = match self.value.ty() {
            Some(t) => t.to_string(),
            None => "error".to_string(),
        };
        write!(f, "#{} {} {ty} at {}", self.index, self.op, self.location)?;
        if let Some(func) = &self.function {
            write!(f, " in `{func}`")?;
        }
        match self.nonfinite_count() {
            0 => Ok(()),
            n => write!(f, ": {n} non-finite"),
        }
    }
}

/// Runs `f` with every value an op computes inside it kept, and returns
/// `f`'s result with those values in the order they were made (see the
/// [module docs](self)). Jit calls inside run a separately cached debug
/// program in their usual run mode; the functions' normal programs are
/// untouched.
pub fn intermediates<R>(f: impl FnOnce() -> R) -> (R, Vec<Intermediate>) {
    let scope = ScopeGuard::enter(None);
    let r = f();
    (r, scope.finish())
}

/// Runs `f` until `ops` values have been computed, and returns those
/// values (fewer if `f` makes fewer): `step_to(n, f)` is the first `n` of
/// what [`intermediates`] would record, so `step_to(0, f)` runs no op.
/// Past the stop nothing runs: a later eager op gives an error tensor and
/// a later jit call an `Err`, both of kind [`ErrorKind::Cancelled`] and
/// saying `step_to` stopped them, and a jit call that crosses the stop
/// compiles and runs only the part of its graph before it. `f`'s own
/// result (usually that error) is dropped.
///
/// ```
/// use tilejit::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f32, 4.0], &[2])?;
/// let mut out = None;
/// let values = tilejit::debug::step_to(1, || {
///     let y = x.sqrt();            // op 0: runs
///     out = Some(y.exp());         // op 1: stopped
/// });
/// assert_eq!(values.len(), 1);
/// assert_eq!(values[0].value.to_vec::<f32>()?, [1.0, 2.0]);
/// let err = out.unwrap().check().unwrap_err();
/// assert_eq!(err.kind(), tilejit::ErrorKind::Cancelled);
/// assert!(err.to_string().contains("step_to"));
/// # Ok::<(), tilejit::Error>(())
/// ```
pub fn step_to<R>(ops: usize, f: impl FnOnce() -> R) -> Vec<Intermediate> {
    let scope = ScopeGuard::enter(Some(ops));
    drop(f());
    scope.finish()
}

/// The first value (in `values`' order) with a NaN or infinite element:
/// where the first non-finite number was made. An op that only passes on
/// a NaN it was given (from an input that held one) is found too: check
/// its operands.
pub fn first_nonfinite(values: &[Intermediate]) -> Option<&Intermediate> {
    values.iter().find(|v| v.nonfinite_count() > 0)
}

/// One open scope: its stop (a [`step_to`]'s count) and what it recorded.
struct Scope {
    stop: Option<usize>,
    records: Vec<Intermediate>,
}

thread_local! {
    /// True while any scope is open on this thread: the one check the
    /// normal paths make.
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static SCOPES: RefCell<Vec<Scope>> = const { RefCell::new(Vec::new()) };
}

/// True while a debug scope is open on this thread.
#[inline]
pub(crate) fn active() -> bool {
    ACTIVE.with(Cell::get)
}

/// Closes its scope when dropped, also when the closure panics.
struct ScopeGuard {
    depth: usize,
}

impl ScopeGuard {
    fn enter(stop: Option<usize>) -> ScopeGuard {
        let depth = SCOPES.with(|s| {
            let mut s = s.borrow_mut();
            s.push(Scope {
                stop,
                records: Vec::new(),
            });
            s.len()
        });
        ACTIVE.with(|a| a.set(true));
        ScopeGuard { depth }
    }

    /// Closes the scope and returns what it recorded.
    fn finish(self) -> Vec<Intermediate> {
        SCOPES.with(|s| {
            let mut s = s.borrow_mut();
            let mut records = Vec::new();
            if s.len() >= self.depth {
                records = std::mem::take(&mut s[self.depth - 1].records);
            }
            records
        })
        // `self` drops here and pops the scope.
    }
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        SCOPES.with(|s| {
            let mut s = s.borrow_mut();
            s.truncate(self.depth - 1);
            ACTIVE.with(|a| a.set(!s.is_empty()));
        });
    }
}

/// How many more values may be computed before a [`step_to`] stop, or
/// `None` without one.
pub(crate) fn budget() -> Option<usize> {
    SCOPES.with(|s| {
        s.borrow()
            .iter()
            .filter_map(|sc| sc.stop.map(|n| n.saturating_sub(sc.records.len())))
            .min()
    })
}

/// Records one value in every open scope.
pub(crate) fn record(op: &str, location: &str, value: Tensor, function: Option<&str>) {
    SCOPES.with(|s| {
        for sc in s.borrow_mut().iter_mut() {
            let index = sc.records.len();
            sc.records.push(Intermediate {
                op: op.to_string(),
                location: location.to_string(),
                value: value.clone(),
                function: function.map(str::to_string),
                index,
            });
        }
    })
}

/// Why work past a stop did not run.
pub(crate) fn stopped_message() -> String {
    let stop = SCOPES.with(|s| {
        s.borrow()
            .iter()
            .filter_map(|sc| sc.stop.map(|n| (n.saturating_sub(sc.records.len()), n)))
            .min()
            .map(|(_, n)| n)
    });
    match stop {
        Some(n) => format!("stopped by `tilejit::debug::step_to` after {n} op(s)"),
        None => "stopped by `tilejit::debug::step_to`".to_string(),
    }
}

/// True for a node that computes a value (not an input, param or constant).
pub(crate) fn is_computed(op: &Op) -> bool {
    !matches!(
        op,
        Op::Input { .. } | Op::Param { .. } | Op::Full { .. } | Op::Constant { .. }
    )
}

/// The computed nodes of `g`, in order.
pub(crate) fn computed_nodes(g: &Graph) -> Vec<NodeId> {
    g.ids().filter(|&id| is_computed(&g.node(id).op)).collect()
}

/// An eager op's graph (one output) run inside a scope by `run` (which
/// gives a tensor per output of the graph it is handed): every computed
/// node is an output too and is recorded; past a stop only the nodes
/// before it run and the op's result is the stop error.
pub(crate) fn run_eager<E: From<IrError>>(
    location: Loc,
    mut g: Graph,
    run: impl FnOnce(&Graph) -> Result<Vec<Tensor>, E>,
) -> Result<Tensor, E> {
    let computed = computed_nodes(&g);
    let take = budget().map_or(computed.len(), |b| b.min(computed.len()));
    let stopped = take < computed.len();
    let real = usize::from(!stopped);
    if stopped {
        g.outputs.clear();
    }
    g.outputs.extend_from_slice(&computed[..take]);
    let mut outs = if g.outputs.is_empty() {
        Vec::new()
    } else {
        run(&g)?
    };
    if outs.len() != g.outputs.len() {
        return Err(IrError::Verify(format!(
            "a debug run gave {} values for {} outputs",
            outs.len(),
            g.outputs.len()
        ))
        .into());
    }
    let loc = location.to_string();
    for (id, value) in computed.iter().zip(outs.drain(real..)) {
        record(
            tilejit_ir::text::op_name(&g.node(*id).op),
            &loc,
            value,
            None,
        );
    }
    if stopped {
        return Err(IrError::Backend {
            kind: ErrorKind::Cancelled,
            message: format!("{}; this op did not run", stopped_message()),
        }
        .into());
    }
    outs.pop()
        .ok_or_else(|| IrError::Verify("eager op produced no output".into()).into())
}
