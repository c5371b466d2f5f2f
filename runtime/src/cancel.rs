//! Stopping long calls: a [`CancelToken`] that another thread sets, or a
//! deadline, in effect for every program run a closure makes on this
//! thread ([`with_cancel`], [`with_deadline`]; nested scopes combine, the
//! earliest deadline wins).
//!
//! Where a stop is seen: a host program looks before each kernel and
//! between the chunks a parallel kernel is split into (a chunk, like a
//! single-threaded kernel, runs to its end); a Sim launch hands the token
//! and the time left to the device, whose running tasks stop within a few
//! thousand instructions. A stopped run fails with
//! [`RuntimeError::Stopped`] (error code 8): nothing it computed is
//! returned, its inputs are untouched, and later runs are unaffected.
//! Tracing and compiling are not interrupted.

use crate::error::RuntimeError;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A flag to stop the calls made under [`with_cancel`] from another
/// thread. Clones share the flag.
///
/// ```
/// use tilejit_runtime::cancel::{with_cancel, CancelToken};
/// let token = CancelToken::new();
/// let watcher = token.clone();
/// std::thread::spawn(move || watcher.cancel()).join().unwrap();
/// assert!(token.is_cancelled());
/// // Every program run inside would now fail with `RuntimeError::Stopped`.
/// with_cancel(&token, || {});
/// ```
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Stops the calls running under this token (and any later ones).
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// The shared flag, for a device launch.
    pub(crate) fn flag(&self) -> Arc<AtomicBool> {
        self.0.clone()
    }
}

/// What may stop the runs made on this thread now.
#[derive(Clone, Debug, Default)]
pub struct Limits {
    tokens: Vec<CancelToken>,
    deadline: Option<(Instant, Duration)>,
}

thread_local! {
    static LIMITS: RefCell<Limits> = RefCell::default();
}

/// Restores the previous limits on drop (also when unwinding).
struct Scope(Option<Limits>);

impl Scope {
    fn enter(change: impl FnOnce(&mut Limits)) -> Scope {
        LIMITS.with(|l| {
            let mut l = l.borrow_mut();
            let before = l.clone();
            change(&mut l);
            Scope(Some(before))
        })
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some(before) = self.0.take() {
            LIMITS.with(|l| *l.borrow_mut() = before);
        }
    }
}

/// Runs `f`; every program run it makes on this thread stops with
/// [`RuntimeError::Stopped`] once `token` is cancelled.
pub fn with_cancel<R>(token: &CancelToken, f: impl FnOnce() -> R) -> R {
    let _scope = Scope::enter(|l| l.tokens.push(token.clone()));
    f()
}

/// Runs `f`; every program run it makes on this thread stops with
/// [`RuntimeError::Stopped`] once `after` has passed (from now).
pub fn with_deadline<R>(after: Duration, f: impl FnOnce() -> R) -> R {
    // A deadline too far to represent is no deadline.
    let at = Instant::now().checked_add(after);
    let _scope = Scope::enter(|l| {
        if let Some(at) = at {
            if l.deadline.is_none_or(|(d, _)| at < d) {
                l.deadline = Some((at, after));
            }
        }
    });
    f()
}

/// Runs `f` under `limits`, another thread's: a run moved to a pool
/// thread keeps its caller's limits, for the runs its observers make too.
pub(crate) fn with_limits<R>(limits: Limits, f: impl FnOnce() -> R) -> R {
    if limits.is_none() && !any() {
        return f();
    }
    let _scope = Scope::enter(|l| *l = limits);
    f()
}

/// The limits in effect on this thread.
pub fn current() -> Limits {
    LIMITS.with(|l| l.borrow().clone())
}

/// Whether any limit may stop a run on this thread (without cloning them).
#[inline]
pub(crate) fn any() -> bool {
    LIMITS.with(|l| !l.borrow().is_none())
}

impl Limits {
    /// True when nothing can stop a run (the usual case: no checks needed).
    pub fn is_none(&self) -> bool {
        self.tokens.is_empty() && self.deadline.is_none()
    }

    /// Why a run must stop now, if it must.
    pub fn stopped(&self) -> Option<String> {
        if self.tokens.iter().any(CancelToken::is_cancelled) {
            return Some("was cancelled".into());
        }
        match self.deadline {
            Some((at, after)) if Instant::now() >= at => {
                Some(format!("ran past its deadline ({after:?})"))
            }
            _ => None,
        }
    }

    /// `Err(Stopped)` if a run must stop now.
    pub fn check(&self, what: &str) -> Result<(), RuntimeError> {
        match self.stopped() {
            None => Ok(()),
            Some(why) => Err(RuntimeError::Stopped {
                what: what.to_string(),
                why,
            }),
        }
    }

    /// Time left before the deadline, if one is set.
    pub fn time_left(&self) -> Option<Duration> {
        self.deadline
            .map(|(at, _)| at.saturating_duration_since(Instant::now()))
    }

    /// The tokens' flags, for a device launch (any one set stops it).
    pub(crate) fn launch_flags(&self) -> Vec<Arc<AtomicBool>> {
        self.tokens.iter().map(CancelToken::flag).collect()
    }
}
