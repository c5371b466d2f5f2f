//! Single flight: callers that miss the same key while its value is being
//! built wait for that one build and share its result, success or error,
//! instead of each building it. The handler cache shares a signature's
//! trace this way, the kernel cache a kernel's compile.
//!
//! A build runs under [`catching`], so one that panics still finishes its
//! flight (with [`RuntimeError::Panicked`]) and no waiter blocks forever.
//!
//! Nor may a build wait for itself. A rayon worker that waits for a
//! parallel map runs other pool jobs meanwhile; if the map is part of a
//! build (a first call's compile), one of those jobs can be a call that
//! misses the same key, and it would wait, on the thread the build needs
//! to go on, for a build that can then never finish. So builds map in
//! parallel only off the pool ([`map_off_pool`]), and a caller on the
//! thread that leads a flight does not wait for it ([`Flight::led_here`]):
//! it builds on its own. And a build still running the user's code (a jit
//! body, which may wait for the caller) is waited for only so long
//! ([`Flight::wait_user_code_for`]).

use crate::error::{panic_message, RuntimeError};
use rayon::prelude::*;
use std::collections::HashMap;
use std::hash::Hash;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;

/// One build in progress, and its result once it has finished.
pub(crate) struct Flight<T> {
    result: Mutex<Option<T>>,
    done: Condvar,
    leader: ThreadId,
    /// True while the build runs the user's code (a jit body's trace),
    /// which may wait for anything; false once only tilejit's code runs.
    in_user_code: Arc<AtomicBool>,
}

thread_local! {
    /// The user-code flags of the flights this thread leads, innermost last.
    static LEADING: std::cell::RefCell<Vec<Arc<AtomicBool>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Marks the innermost flight this thread leads as past the user's code
/// (a jit trace has ended; compiling follows): callers waiting for it then
/// wait as long as the compile takes.
pub fn user_code_done() {
    LEADING.with(|l| {
        if let Some(f) = l.borrow().last() {
            f.store(false, Ordering::Relaxed);
        }
    });
}

/// While alive, `flag` is the innermost flight this thread leads.
pub(crate) struct Leading;

impl Leading {
    pub(crate) fn enter<T>(flight: &Option<Arc<Flight<T>>>) -> Leading {
        let flag = flight.as_ref().map_or_else(
            || Arc::new(AtomicBool::new(true)),
            |f| f.in_user_code.clone(),
        );
        LEADING.with(|l| l.borrow_mut().push(flag));
        Leading
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        LEADING.with(|l| l.borrow_mut().pop());
    }
}

impl<T: Clone> Flight<T> {
    /// A build that has just started on this thread.
    pub(crate) fn start() -> Arc<Flight<T>> {
        Arc::new(Flight {
            result: Mutex::new(None),
            done: Condvar::new(),
            leader: std::thread::current().id(),
            in_user_code: Arc::new(AtomicBool::new(true)),
        })
    }

    /// True on the thread that runs the build: a wait there could never
    /// end (see the module doc).
    pub(crate) fn led_here(&self) -> bool {
        self.leader == std::thread::current().id()
    }

    /// Publishes the build's result and wakes every waiter.
    pub(crate) fn finish(&self, result: T) {
        // The lock guards one `Option` write, so a poisoned guard (a
        // waiter that panicked) holds nothing half-done.
        *self.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
        self.done.notify_all();
    }

    /// Blocks until the build has finished; its result, or `None` when the
    /// build has spent `limit` in the user's code and is still there (it
    /// may be waiting for this caller: see [`user_code_done`]).
    pub(crate) fn wait_user_code_for(&self, limit: std::time::Duration) -> Option<T> {
        let deadline = std::time::Instant::now() + limit;
        let mut guard = self.result.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = guard.as_ref() {
                return Some(r.clone());
            }
            let now = std::time::Instant::now();
            if now >= deadline && self.in_user_code.load(Ordering::Relaxed) {
                return None;
            }
            // Past the deadline but compiling: look again now and then.
            let nap = deadline
                .checked_duration_since(now)
                .unwrap_or(std::time::Duration::from_millis(50));
            guard = self
                .done
                .wait_timeout(guard, nap)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
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

/// A cache's builds in flight, by key, each with the identity it builds
/// (the kernel cache keys by a hash, so two identities can share a key;
/// the handler cache's key is its identity, `()` here). The owner keeps it
/// under the same lock as its entries.
pub(crate) struct Flights<K, I, T> {
    map: HashMap<K, (I, Arc<Flight<T>>)>,
}

/// What a caller that missed does: wait for the build in flight, or lead
/// one. `Lead(None)` builds alone, sharing nothing: another identity holds
/// the key, or the build in flight is this thread's own, suspended further
/// up its stack (see the module doc).
pub(crate) enum Join<T> {
    Wait(Arc<Flight<T>>),
    Lead(Option<Arc<Flight<T>>>),
}

impl<K, I, T> Default for Flights<K, I, T> {
    fn default() -> Self {
        Flights {
            map: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Clone, I: Clone + PartialEq, T: Clone> Flights<K, I, T> {
    /// Joins the build of `identity` in flight under `key`, or registers
    /// this caller's. Called under the owner's lock, so one caller leads.
    pub(crate) fn join(&mut self, key: &K, identity: &I) -> Join<T> {
        match self.map.get(key) {
            Some((i, f)) if i == identity && !f.led_here() => Join::Wait(f.clone()),
            Some(_) => Join::Lead(None),
            None => {
                let f = Flight::start();
                self.map.insert(key.clone(), (identity.clone(), f.clone()));
                Join::Lead(Some(f))
            }
        }
    }

    /// Ends a leader's flight with `result` and returns it. Called under
    /// the owner's lock once the entry, if any, is in place, so no caller
    /// finds neither the entry nor the flight.
    pub(crate) fn land(&mut self, key: &K, lead: Option<Arc<Flight<T>>>, result: T) -> T {
        if let Some(f) = lead {
            if self.map.get(key).is_some_and(|(_, g)| Arc::ptr_eq(g, &f)) {
                self.map.remove(key);
            }
            f.finish(result.clone());
        }
        result
    }

    /// True when nothing is in flight.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
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

/// `f` over `items`, in order: on the rayon pool when called from outside
/// it and there is more than one item, else one after another on this
/// thread, which then runs no other pool job meanwhile (see the module
/// doc). Stops at the first error.
pub(crate) fn map_off_pool<T: Sync, R: Send, E: Send>(
    items: &[T],
    f: impl Fn(&T) -> Result<R, E> + Sync + Send,
) -> Result<Vec<R>, E> {
    if items.len() > 1 && rayon::current_thread_index().is_none() {
        items.par_iter().map(f).collect()
    } else {
        items.iter().map(f).collect()
    }
}
