//! What bounds a server's work: byte caps per tensor, per session and
//! over all sessions (reserved before data streams in), graph sizes
//! checked before a compile, blocking work kept off the async threads,
//! request deadlines and cancellation when a client goes away, and
//! memory given back to the OS after large frees.

use super::log;
use super::session::State;
use crate::remote::wire;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tilejit_ir::Graph;
use tilejit_runtime::cancel::{self, CancelToken};
use tonic::Status;

/// Bytes counted in [`State::held`] for an upload or results not yet
/// filed in a session; given back on drop unless filed.
pub(super) struct Reserved {
    pub(super) state: Arc<State>,
    pub(super) bytes: u64,
}

impl Reserved {
    /// Counts `bytes` more in this reservation, or says why not (and
    /// keeps what it held).
    pub(super) fn grow(&mut self, bytes: u64) -> std::result::Result<(), Status> {
        let max = self.state.options.max_total_bytes;
        self.state
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                h.checked_add(bytes).filter(|n| *n <= max)
            })
            .map_err(|held| {
                Status::resource_exhausted(format!(
                    "the server holds {held} bytes of tensors over all sessions; {bytes} more is over its limit of {max} bytes"
                ))
            })?;
        self.bytes += bytes;
        Ok(())
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.state.release(self.bytes);
    }
}

impl State {
    /// Counts `bytes` more against the server-wide budget, or says why not.
    pub(super) fn reserve(self: &Arc<Self>, bytes: u64) -> std::result::Result<Reserved, Status> {
        let mut r = Reserved {
            state: self.clone(),
            bytes: 0,
        };
        r.grow(bytes)?;
        Ok(r)
    }

    /// Gives `bytes` back to the server-wide budget (tensors freed).
    pub(super) fn release(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Room for `bytes` more in `session`, or why not.
    pub(super) fn check_room(&self, session: u64, bytes: u64) -> std::result::Result<(), Status> {
        if bytes > self.options.max_tensor_bytes {
            return Err(Status::resource_exhausted(format!(
                "a tensor of {bytes} bytes is over the server's limit of {} bytes",
                self.options.max_tensor_bytes
            )));
        }
        let held = self.sessions().get(&session).map_or(0, |s| s.bytes);
        if held.saturating_add(bytes) > self.options.max_session_bytes {
            return Err(Status::resource_exhausted(format!(
                "the session holds {held} bytes; {bytes} more is over the server's limit of {} bytes per session",
                self.options.max_session_bytes
            )));
        }
        Ok(())
    }
}

/// Runs blocking work off the async threads; a panic in it is an internal
/// error for this call, never the server's end.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::result::Result<T, Status> + Send + 'static,
) -> std::result::Result<T, Status> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(wire::with_kind(
            Status::internal(format!("the server's work panicked: {e}")),
            tilejit_ir::ErrorKind::Panic,
        ))
    })
}

/// Frees below this are left to the allocator (and the pool) as they are.
const GIVE_BACK_FROM: u64 = 1 << 20;

/// After tensors of `bytes` were freed: gives the storage pool's buffers
/// and the C allocator's free pages back to the OS (off the async
/// threads), so a long-running server comes back near its baseline
/// instead of keeping the peak of its biggest tensor. Small frees skip
/// it: the pool's buffers are what make back-to-back launches fast.
pub(super) fn give_back_memory(bytes: u64) {
    // At most one give-back queued: a burst of frees trims once or twice,
    // not once per free.
    static QUEUED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if bytes < GIVE_BACK_FROM || QUEUED.swap(true, Ordering::AcqRel) {
        return;
    }
    tokio::task::spawn_blocking(|| {
        QUEUED.store(false, Ordering::Release);
        tilejit_ir::pool::pool().empty();
        tilejit_codegen::sys::release_free_memory();
    });
}

/// Cancels its token when dropped: held by a request's future, so the
/// work it started stops once tonic drops the future (the client reset
/// the stream or went away, or the request ran past its deadline).
struct StopOnDrop(CancelToken);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Runs `f` (a launch or call) off the async threads, under the server's
/// request deadline and a token cancelled when the caller's future is
/// dropped: its program runs stop between kernels (host) or within a few
/// thousand instructions (Sim). A stopped run counts in `stopped`.
pub(super) async fn stoppable<T: Send + 'static>(
    state: &Arc<State>,
    what: &'static str,
    f: impl FnOnce() -> std::result::Result<T, Status> + Send + 'static,
) -> std::result::Result<T, Status> {
    let token = CancelToken::new();
    let guard = StopOnDrop(token.clone());
    let state = state.clone();
    let deadline = state.options.request_timeout;
    let r = blocking(move || {
        cancel::with_cancel(&token, || {
            cancel::with_deadline(deadline, || {
                let r = f();
                if r.is_err() {
                    if let Some(why) = cancel::current().stopped() {
                        state.stopped.fetch_add(1, Ordering::Relaxed);
                        log(format_args!("a {what} stopped: it {why}"));
                        let status = if token.is_cancelled() {
                            Status::cancelled(format!("the {what} {why}: its client went away"))
                        } else {
                            Status::deadline_exceeded(format!(
                                "the {what} {why}: the server's request timeout"
                            ))
                        };
                        return Err(wire::with_kind(status, tilejit_ir::ErrorKind::Cancelled));
                    }
                }
                r
            })
        })
    })
    .await;
    drop(guard);
    r
}

/// The bytes one run of `program` allocates: its temporary buffers, the
/// outputs among them. A launch reserves them before it runs, so the
/// working sets of concurrent launches stay within the server-wide
/// budget, not only the results they keep (each value alone is within
/// the tensor limit, but a program may hold many).
pub(super) fn working_bytes(program: &tilejit_runtime::Program) -> u64 {
    program
        .host()
        .kernels()
        .buffers
        .iter()
        .filter(|b| b.kind == tilejit_ir::kernel::BufKind::Temp)
        .map(|b| (b.ty.shape.numel() as u64).saturating_mul(b.ty.dtype.size_bytes() as u64))
        .fold(0u64, u64::saturating_add)
}

/// Checks a client's graph before it is compiled: every value's size is
/// within the server's tensor limit (the verifier checks the rest).
pub(super) fn check_graph(g: &Graph, max_bytes: u64) -> std::result::Result<(), String> {
    for id in g.ids() {
        let ty = g.ty(id);
        let bytes = ty
            .shape
            .checked_numel()
            .and_then(|n| n.checked_mul(ty.dtype.size_bytes()));
        if bytes.is_none_or(|b| b as u64 > max_bytes) {
            return Err(format!(
                "value {} ({ty}) is over the server's limit of {max_bytes} bytes",
                id.index()
            ));
        }
    }
    Ok(())
}
