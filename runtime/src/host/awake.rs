//! Keeping the pool's other threads awake through a run. A rayon worker
//! with nothing to do soon sleeps, and on a virtual machine waking it
//! takes about 60 µs (the halted vCPU is rescheduled): a GPT-2 decode
//! step paid that at each of its 49 products, after the few µs of small
//! kernels between them. So while a program runs on the pool, every
//! other worker runs a spinner that takes pool work as it appears (the
//! run's parallel launches) and yields the CPU between looks, until the
//! run ends or it has found nothing for [`MAX_IDLE`].

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a spinner looks for work without finding any before it lets
/// its thread sleep: longer than the gaps between a model's parallel
/// kernels, short enough that a mostly serial run wastes little.
const MAX_IDLE: Duration = Duration::from_millis(2);

thread_local! {
    /// Runs in progress on this thread (nested ones included).
    static RUNS: Cell<usize> = const { Cell::new(0) };
}

/// The spinners of one run: dropping it (the run ended, or unwound) sends
/// them back to sleep.
pub(super) struct Awake {
    done: Arc<AtomicBool>,
}

impl Awake {
    /// Marks this thread as running a program and starts a spinner for
    /// each other pool thread.
    pub(super) fn start() -> Awake {
        RUNS.with(|r| r.set(r.get() + 1));
        let done = Arc::new(AtomicBool::new(false));
        for _ in 1..rayon::current_num_threads() {
            let done = done.clone();
            rayon::spawn(move || spin(&done));
        }
        Awake { done }
    }
}

impl Drop for Awake {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        RUNS.with(|r| r.set(r.get() - 1));
    }
}

/// Whether this thread is inside a program's run (then it only waits in
/// that run's launches, and must not take on other work for long).
pub(super) fn in_run() -> bool {
    RUNS.with(|r| r.get()) > 0
}

/// Takes pool work until `done`, or until none came for [`MAX_IDLE`].
fn spin(done: &AtomicBool) {
    // A thread inside a run (waiting in one of its launches) must not
    // spin for another: the run below it on the stack could not go on
    // until the other run ended, and that one may wait for this one.
    if RUNS.with(|r| r.get()) > 0 {
        return;
    }
    let mut last_work = Instant::now();
    while !done.load(Ordering::Acquire) {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => last_work = Instant::now(),
            Some(rayon::Yield::Idle) if last_work.elapsed() < MAX_IDLE => std::thread::yield_now(),
            _ => return,
        }
    }
}
