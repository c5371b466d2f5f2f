//! The tracing context. While a jit function's body is being traced, the
//! calling thread holds a `TraceState`: the graph being recorded and the
//! first error any op raised. Traced tensors carry the id of the trace that
//! made them, so a tensor that escapes its trace is caught, not misread.
//!
//! The state is thread-local on purpose: tracing runs the user's body on the
//! calling thread, and a traced `Tensor` holds only ids, which keeps
//! `Tensor: Send + Sync` without locks on the op path.

use crate::error::{Error, Loc};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use tilejit_ir::Graph;

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
