//! Single flight: callers that miss the same key while its value is being
//! built wait for that one build and share its result, success or error,
//! instead of each building it. The handler cache shares a signature's
//! trace this way, the kernel cache a kernel's compile.
//!
//! A build runs under [`catching`], so one that panics still finishes its
//! flight (with [`RuntimeError::Panicked`]) and no waiter blocks forever.

use crate::error::{panic_message, RuntimeError};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};

/// One build in progress, and its result once it has finished.
pub(crate) struct Flight<T> {
    result: Mutex<Option<T>>,
    done: Condvar,
}

impl<T: Clone> Flight<T> {
    /// A build that has just started.
    pub(crate) fn start() -> Arc<Flight<T>> {
        Arc::new(Flight {
            result: Mutex::new(None),
            done: Condvar::new(),
        })
    }

    /// Publishes the build's result and wakes every waiter.
    pub(crate) fn finish(&self, result: T) {
        // The lock guards one `Option` write, so a poisoned guard (a
        // waiter that panicked) holds nothing half-done.
        *self.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
        self.done.notify_all();
    }

    /// Blocks until the build has finished; its result.
    pub(crate) fn wait(&self) -> T {
        let mut guard = self.result.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = guard.as_ref() {
                return r.clone();
            }
            guard = self.done.wait(guard).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Runs `build`, turning a panic into [`RuntimeError::Panicked`] that says
/// `what` was running: a bug in a build must not leave a flight unfinished
/// or take the caller's thread down.
pub(crate) fn catching<T, E: From<RuntimeError>>(
    what: impl FnOnce() -> String,
    build: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    catch_unwind(AssertUnwindSafe(build)).unwrap_or_else(|payload| {
        Err(E::from(RuntimeError::Panicked {
            what: what(),
            message: panic_message(payload.as_ref()),
        }))
    })
}
