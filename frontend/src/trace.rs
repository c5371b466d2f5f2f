//! The tracing context. While a jit function's body is being traced, the
//! calling thread holds a `TraceState`: the graph being recorded and the
//! first error any op raised. Traced tensors carry the id of the trace that
//! made them, so a tensor that escapes its trace is caught, not misread.
//!
//! The state is thread-local on purpose: tracing runs the user's body on the
//! calling thread, and a traced `Tensor` holds only ids, which keeps
//! `Tensor: Send + Sync` without locks on the op path.
//!
//! While a dynamic function traces a new shape class at stand-in sizes, a
//! second thread-local, the [`ProbeGuard`]'s watch, notes the first thing
//! the body does that the stand-in reading cannot be trusted with: a size
//! read by the body, a literal that is a multiple of a stand-in, or a
//! library op that computes or branches on a size. A trace with none is
//! used at every size of the class as it stands; one with any is first
//! checked against a trace at the call's own sizes. Size reads on another
//! thread (a body's scoped threads) are counted process-wide instead, and
//! a watch that saw the count move is unsure too.

use crate::error::{Error, Loc};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use tilejit_ir::{Graph, Lit};

pub(crate) struct TraceState {
    pub id: u64,
    pub graph: Graph,
    pub first_error: Option<Error>,
    /// Per node, the user's line that added it: kept only by the traces
    /// `tilejit::debug` makes (`None` on every other trace, so the
    /// normal trace path pays one branch per op).
    pub locs: Option<Vec<Loc>>,
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
        CURRENT.with(|c| {
            *c.borrow_mut() = Some(TraceState {
                id,
                graph: Graph::new(),
                first_error: None,
                locs: locations.then(Vec::new),
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

/// The watch of a trace at stand-in sizes: the class's symbol count, and
/// the first reason its reading needs a check (`None` while it needs none).
struct Probe {
    symbols: usize,
    unsure: Option<String>,
}

thread_local! {
    static PROBE: RefCell<Option<Probe>> = const { RefCell::new(None) };
}

/// Size reads of traced tensors made on a thread that is not tracing them
/// (a body's scoped threads): the thread-local watch cannot see those, so
/// a watch compares this count at its start and finish.
static OFF_THREAD_READS: AtomicU64 = AtomicU64::new(0);

/// Watches a trace at the stand-in sizes of `symbols` symbols (see the
/// module docs); dropped unfinished, it stops watching.
pub(crate) struct ProbeGuard {
    outer: Option<Probe>,
    off_thread_reads: u64,
    finished: bool,
}

impl ProbeGuard {
    pub fn start(symbols: usize) -> ProbeGuard {
        let probe = Probe {
            symbols,
            unsure: None,
        };
        ProbeGuard {
            outer: PROBE.with(|p| p.borrow_mut().replace(probe)),
            off_thread_reads: OFF_THREAD_READS.load(Ordering::SeqCst),
            finished: false,
        }
    }

    /// Stops watching: why the trace needs a check, or `None`.
    pub fn finish(mut self) -> Option<String> {
        self.finished = true;
        let outer = self.outer.take();
        let unsure = PROBE
            .with(|p| std::mem::replace(&mut *p.borrow_mut(), outer))
            .and_then(|p| p.unsure);
        let off_thread = OFF_THREAD_READS.load(Ordering::SeqCst) != self.off_thread_reads;
        unsure.or_else(|| off_thread.then(|| "the body read sizes on another thread".into()))
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

/// Notes why the watched trace needs a check, if one is watched (the
/// first reason is kept). `why` gets the class's symbol count and says
/// `None` when there is nothing to note.
fn note(why: impl FnOnce(usize) -> Option<String>) {
    PROBE.with(|p| {
        if let Some(p) = p.borrow_mut().as_mut() {
            if p.unsure.is_none() {
                p.unsure = why(p.symbols);
            }
        }
    })
}

/// The body read the sizes of a tensor of trace `trace` (`what`, at
/// `location`): what it computes from them is out of sight.
pub(crate) fn note_size_read(trace: u64, what: &str, location: Option<Loc>) {
    // On the thread tracing it (its state borrowed: inside an op there).
    let here = CURRENT.with(|c| {
        c.try_borrow()
            .map_or(true, |s| s.as_ref().is_some_and(|s| s.id == trace))
    });
    if !here {
        OFF_THREAD_READS.fetch_add(1, Ordering::SeqCst);
        return;
    }
    note(|_| {
        Some(match location {
            Some(at) => format!("the body reads sizes (`{what}` at {at})"),
            None => format!("the body reads sizes (`{what}`)"),
        })
    });
}

/// `op` was given these sizes: one that is a multiple of a stand-in
/// would read back as a size.
pub(crate) fn note_sizes(op: &str, sizes: impl IntoIterator<Item = usize>) {
    note(|symbols| {
        sizes
            .into_iter()
            .find(|&d| tilejit_runtime::reads_as_size(d, symbols))
            .map(|d| format!("`{op}` is given {d}, a multiple of a stand-in size"))
    });
}

/// A value given to the graph: one that is a multiple of a stand-in would
/// read back as a size.
pub(crate) fn note_value(value: Lit) {
    note(|symbols| {
        tilejit_runtime::value_reads_as_size(value, symbols)
            .then(|| format!("the scalar {value} is a multiple of a stand-in size"))
    });
}

/// Library op `op` computes or branches on a size in a way the stand-in
/// reading cannot follow (`n - k`, a clamp, a sum check, an index dtype).
pub(crate) fn note_size_arithmetic(op: &str) {
    note(|_| Some(format!("`{op}` computes on sizes")));
}
