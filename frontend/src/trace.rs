//! The tracing context. While a jit function's body is being traced, the
//! calling thread holds a `TraceState`: the graph being recorded and the
//! first error any op raised. Traced tensors carry the id of the trace that
//! made them, so a tensor that escapes its trace is caught, not misread.
//!
//! The state is thread-local on purpose: tracing runs the user's body on the
//! calling thread, and a traced `Tensor` holds only ids, which keeps
//! `Tensor: Send + Sync` without locks on the op path.
//!
//! While a dynamic function traces a shape class at stand-in sizes, a
//! second thread-local, the [`ProbeGuard`]'s watch, records every size the
//! body reads (`shape()`, `numel()`, `Display`) and every size a library
//! op computes or branches on (a clamp, a split, an index dtype), in
//! order: the symbols behind them are pinned to the call's values
//! (`tilejit_runtime::ShapeClass::pins_for_reads`). Size reads on another
//! thread (a body's scoped threads) are recorded process-wide by trace id
//! instead, and a watch whose traces were read that way pins every symbol.

use crate::error::{Error, Loc};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use tilejit_ir::Graph;

pub(crate) struct TraceState {
    pub id: u64,
    pub graph: Graph,
    pub first_error: Option<Error>,
    /// Per node, the user's line that added it: kept only by the traces
    /// `tilejit::debug` makes (`None` on every other trace, so the
    /// normal trace path pays one branch per op).
    pub locs: Option<Vec<Loc>>,
    /// The ops the user called that added gathers (`gather`,
    /// `index_select`): an index error at run time names them.
    pub gathers: Vec<&'static str>,
}

thread_local! {
    static CURRENT: RefCell<Option<TraceState>> = const { RefCell::new(None) };
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// True while this thread is tracing a jit body.
#[inline]
pub(crate) fn active() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
}

/// Runs `f` on the active trace, if any. `f` must not call back into user
/// code (the state stays borrowed).
pub(crate) fn with<R>(f: impl FnOnce(Option<&mut TraceState>) -> R) -> R {
    CURRENT.with(|c| f(c.borrow_mut().as_mut()))
}

/// Records an error in the active trace so the jit call fails even if the
/// body drops the error tensor.
pub(crate) fn record_error(e: &Error) {
    with(|t| {
        if let Some(t) = t {
            t.first_error.get_or_insert_with(|| e.clone());
        }
    })
}

/// Reports a read of a traced tensor's values and records it in the trace.
pub(crate) fn traced_value_error(op: &'static str, location: Loc) -> Error {
    let e = Error::TracedValue { op, location };
    record_error(&e);
    e
}

/// Ends the trace when dropped, so a panicking body leaves no state behind.
pub(crate) struct TraceGuard {
    finished: bool,
}

impl TraceGuard {
    /// Starts a trace on this thread and returns its id and guard; with
    /// `locations`, the trace records each node's source line
    /// ([`TraceState::locs`]).
    pub fn start(locations: bool) -> (u64, TraceGuard) {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        // A watch on this thread watches this trace's off-thread reads.
        PROBE.with(|p| {
            if let Some(p) = p.borrow_mut().as_mut() {
                p.traces.push(id);
            }
        });
        CURRENT.with(|c| {
            *c.borrow_mut() = Some(TraceState {
                id,
                graph: Graph::new(),
                first_error: None,
                locs: locations.then(Vec::new),
                gathers: Vec::new(),
            })
        });
        (id, TraceGuard { finished: false })
    }

    /// Ends the trace and returns what it recorded.
    pub fn finish(mut self) -> Option<TraceState> {
        self.finished = true;
        CURRENT.with(|c| c.borrow_mut().take())
    }
}

impl Drop for TraceGuard {
    fn drop(&mut self) {
        if !self.finished {
            CURRENT.with(|c| c.borrow_mut().take());
        }
    }
}

/// The watch of a trace at stand-in sizes: every size read, in order,
/// and why the first one was read (for the log).
#[derive(Default)]
struct Probe {
    reads: Vec<usize>,
    why: Option<String>,
    /// Stand-ins (0 for none) a read may factor over to doom the trace:
    /// one that does pins a symbol, so the trace is thrown away and the
    /// ops after it need not be built (at stand-in sizes, a pool or a
    /// mask can be costly).
    doom_on: Vec<usize>,
    doomed: bool,
    /// The traces started under this watch.
    traces: Vec<u64>,
}

thread_local! {
    static PROBE: RefCell<Option<Probe>> = const { RefCell::new(None) };
}

/// The traces whose tensors had their sizes read on a thread that is not
/// tracing them (a body's scoped threads): the thread-local watch cannot
/// see those reads, so a watch looks its traces up here when it finishes.
/// Bounded: the oldest ids go first (such reads are rare).
static OFF_THREAD_READS: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// How many trace ids [`OFF_THREAD_READS`] keeps.
const OFF_THREAD_KEPT: usize = 1024;

/// What a watched trace read.
#[derive(Debug, Default)]
pub(crate) struct Reads {
    /// Every size value read, in order.
    pub values: Vec<usize>,
    /// A read the watch could not see the values of (another thread).
    pub unseen: bool,
    /// Why the first read happened, for the log.
    pub why: Option<String>,
}

/// Watches a trace at stand-in sizes (see the module docs); dropped
/// unfinished, it stops watching.
pub(crate) struct ProbeGuard {
    outer: Option<Probe>,
    finished: bool,
}

impl ProbeGuard {
    /// Starts watching; a read of a size with a factor among `doom_on`
    /// (non-zero entries) stops the trace's later ops ([`doomed`]).
    pub fn start(doom_on: Vec<usize>) -> ProbeGuard {
        let probe = Probe {
            doom_on,
            ..Probe::default()
        };
        ProbeGuard {
            outer: PROBE.with(|p| p.borrow_mut().replace(probe)),
            finished: false,
        }
    }

    /// Stops watching: what the trace read.
    pub fn finish(mut self) -> Reads {
        self.finished = true;
        let outer = self.outer.take();
        let probe = PROBE
            .with(|p| std::mem::replace(&mut *p.borrow_mut(), outer))
            .unwrap_or_default();
        let unseen = {
            let mut off = OFF_THREAD_READS.lock().unwrap_or_else(|p| p.into_inner());
            let seen = off.iter().any(|t| probe.traces.contains(t));
            off.retain(|t| !probe.traces.contains(t));
            seen
        };
        Reads {
            values: probe.reads,
            unseen,
            why: match unseen {
                true => Some("the body read sizes on another thread".into()),
                false => probe.why,
            },
        }
    }
}

impl Drop for ProbeGuard {
    fn drop(&mut self) {
        if !self.finished {
            let outer = self.outer.take();
            PROBE.with(|p| *p.borrow_mut() = outer);
        }
    }
}

/// Records sizes read in the watched trace, if one is watched.
fn note(dims: &[usize], why: impl FnOnce() -> String) {
    PROBE.with(|p| {
        if let Some(p) = p.borrow_mut().as_mut() {
            p.reads.extend_from_slice(dims);
            p.doomed |= dims.iter().any(|&d| {
                p.doom_on
                    .iter()
                    .any(|&s| s > 1 && d > 1 && d.is_multiple_of(s))
            });
            if p.why.is_none() {
                p.why = Some(why());
            }
        }
    })
}

/// Whether the watched trace on this thread is doomed: it read a size
/// that pins a symbol, so it will be traced again and its later ops are
/// not built.
pub(crate) fn doomed() -> bool {
    PROBE.with(|p| p.borrow().as_ref().is_some_and(|p| p.doomed))
}

/// The body read the sizes `dims` of a tensor of trace `trace` (`what`,
/// at `location`).
pub(crate) fn note_size_read(trace: u64, what: &str, dims: &[usize], location: Option<Loc>) {
    // On the thread tracing it (its state borrowed: inside an op there).
    let here = CURRENT.with(|c| {
        c.try_borrow()
            .map_or(true, |s| s.as_ref().is_some_and(|s| s.id == trace))
    });
    if !here {
        let mut off = OFF_THREAD_READS.lock().unwrap_or_else(|p| p.into_inner());
        if off.len() >= OFF_THREAD_KEPT {
            off.remove(0);
        }
        off.push(trace);
        return;
    }
    note(dims, || match location {
        Some(at) => format!("the body reads sizes (`{what}` at {at})"),
        None => format!("the body reads sizes (`{what}`)"),
    });
}

/// Library op `op` computes or branches on the sizes `dims` (`n - k`, a
/// clamp, a sum check, an index dtype): they are read as the body's own
/// reads are.
pub(crate) fn note_size_arithmetic(op: &str, dims: &[usize]) {
    note(dims, || format!("`{op}` computes on sizes"));
}

/// A value whose sizes a library op may compute on: its type while it is
/// traced. (`Tensor` implements it; a trait so that this module, below
/// `tensor`, need not name the type.)
pub(crate) trait Traced {
    /// The traced type, or `None` when the value is not traced.
    fn traced_type(&self) -> Option<tilejit_ir::TensorType>;
}

/// [`note_size_arithmetic`] on traced tensor `t`'s dim `axis`, or on all
/// its dims when `axis` is `None` or not one of them.
pub(crate) fn note_shape_arithmetic(op: &str, t: &impl Traced, axis: Option<isize>) {
    if let Some(ty) = t.traced_type() {
        let dims = ty.shape.dims();
        match axis.and_then(|a| ty.shape.axis(a).ok()) {
            Some(a) => note_size_arithmetic(op, &dims[a..=a]),
            None => note_size_arithmetic(op, dims),
        }
    }
}
