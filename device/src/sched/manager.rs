//! A manager thread's work during one launch, and the launch's shared
//! state: ready counts, the ready queues (one per core type), the done
//! count, the first fault. A manager loops over its own cores: a core with
//! no task takes its pending task or one from the queue (and, unless the
//! policy is fair and another manager is idle, a pending one behind it),
//! gets it through its task register, runs it, and on finish the task's
//! successors' ready counts drop; tasks that reach zero are queued (hubs
//! resolve on the spot, through a worklist).

use super::control::CoreRegs;
use super::profile::TaskRecord;
use super::{Launch, LaunchOptions, LaunchReport, Policy, Profile, TaskKind, FINISH};
use crate::api::SimInner;
use crate::config::DeviceConfig;
use crate::error::{DeviceError, Result};
use crate::isa::CoreType;
use crate::mem::Span;
use crate::sim::{run_core, TaskArgs};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn qi(kind: CoreType) -> usize {
    match kind {
        CoreType::Aic => 0,
        CoreType::Aiv => 1,
    }
}

/// One launch while it runs.
pub(crate) struct LaunchState {
    launch: Launch,
    opts: LaunchOptions,
    spans: Vec<Span>,
    remaining: Vec<AtomicU32>,
    /// Virtual cycle at which each task's last predecessor finished.
    ready_at: Vec<AtomicU64>,
    queues: [Mutex<VecDeque<u32>>; 2],
    queued: [AtomicUsize; 2],
    done: AtomicUsize,
    abort: AtomicBool,
    error: Mutex<Option<DeviceError>>,
    /// Managers park here when they find nothing to do.
    wake: Mutex<()>,
    wake_cv: Condvar,
    parked: AtomicUsize,
    /// The control thread waits here for the end.
    end: Mutex<()>,
    end_cv: Condvar,
    max_end: AtomicU64,
    pipe_busy: [AtomicU64; 7],
    records: Mutex<Vec<TaskRecord>>,
    dispatch_cycles: u64,
    /// AIC cores, AIV cores, clock: the profile's lanes and time base.
    lanes: (u32, u32, f64),
    start: Instant,
    finished_at: Mutex<Option<Instant>>,
}

impl LaunchState {
    pub(crate) fn new(
        launch: Launch,
        opts: LaunchOptions,
        spans: Vec<Span>,
        ready: Vec<u32>,
        cfg: &DeviceConfig,
        start: Instant,
    ) -> LaunchState {
        let n = launch.tasks.len();
        LaunchState {
            remaining: ready.into_iter().map(AtomicU32::new).collect(),
            ready_at: (0..n).map(|_| AtomicU64::new(0)).collect(),
            queues: [Mutex::new(VecDeque::new()), Mutex::new(VecDeque::new())],
            queued: [AtomicUsize::new(0), AtomicUsize::new(0)],
            done: AtomicUsize::new(0),
            abort: AtomicBool::new(false),
            error: Mutex::new(None),
            wake: Mutex::new(()),
            wake_cv: Condvar::new(),
            parked: AtomicUsize::new(0),
            end: Mutex::new(()),
            end_cv: Condvar::new(),
            max_end: AtomicU64::new(0),
            pipe_busy: Default::default(),
            records: Mutex::new(Vec::new()),
            dispatch_cycles: cfg.dispatch_cycles,
            lanes: (cfg.aic_cores, cfg.aiv_cores, cfg.clock_hz),
            start,
            finished_at: Mutex::new(None),
            launch,
            opts,
            spans,
        }
    }

    /// Every task done, or the launch failed.
    pub(crate) fn finished(&self) -> bool {
        self.abort.load(Ordering::Acquire)
            || self.done.load(Ordering::Acquire) == self.launch.tasks.len()
    }

    /// Exec: queue (or resolve, for hubs) every task with no predecessor.
    pub(crate) fn push_roots(&self) {
        let roots: Vec<u32> = (0..self.launch.tasks.len() as u32)
            .filter(|&t| self.remaining[t as usize].load(Ordering::Relaxed) == 0)
            .collect();
        self.make_ready(&roots);
        self.check_end();
    }

    /// Queues tasks that just became ready; hubs complete at once.
    fn make_ready(&self, tasks: &[u32]) {
        let mut batch: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
        let mut hubs: Vec<u32> = Vec::new();
        for &t in tasks {
            match self.launch.tasks[t as usize].kind {
                TaskKind::Hub => hubs.push(t),
                TaskKind::Aic => batch[0].push(t),
                TaskKind::Aiv => batch[1].push(t),
            }
        }
        // Hubs finish when they become ready: a worklist, not recursion.
        while let Some(h) = hubs.pop() {
            let at = self.ready_at[h as usize].load(Ordering::Acquire);
            self.max_end.fetch_max(at, Ordering::Relaxed);
            for &s in &self.launch.tasks[h as usize].successors {
                self.ready_at[s as usize].fetch_max(at, Ordering::AcqRel);
                if self.remaining[s as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                    match self.launch.tasks[s as usize].kind {
                        TaskKind::Hub => hubs.push(s),
                        TaskKind::Aic => batch[0].push(s),
                        TaskKind::Aiv => batch[1].push(s),
                    }
                }
            }
            self.done.fetch_add(1, Ordering::AcqRel);
        }
        let mut pushed = false;
        for (i, b) in batch.iter().enumerate() {
            if !b.is_empty() {
                lock(&self.queues[i]).extend(b.iter().copied());
                self.queued[i].fetch_add(b.len(), Ordering::Release);
                pushed = true;
            }
        }
        if pushed && self.parked.load(Ordering::Acquire) > 0 {
            let _g = lock(&self.wake);
            self.wake_cv.notify_all();
        }
    }

    fn pop(&self, kind: CoreType) -> Option<u32> {
        let i = qi(kind);
        if self.queued[i].load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut q = lock(&self.queues[i]);
        let t = match self.opts.policy {
            Policy::NewestFirst => q.pop_back(),
            Policy::Fifo | Policy::Fair => q.pop_front(),
        }?;
        self.queued[i].fetch_sub(1, Ordering::Release);
        Some(t)
    }

    /// A task finished at virtual cycle `end`: release its successors.
    fn complete(&self, t: u32, end: u64, ready: &mut Vec<u32>) {
        ready.clear();
        for &s in &self.launch.tasks[t as usize].successors {
            self.ready_at[s as usize].fetch_max(end, Ordering::AcqRel);
            if self.remaining[s as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                ready.push(s);
            }
        }
        // Successors are queued before this task counts as done, so the
        // launch cannot look finished while work is still being queued.
        self.make_ready(ready);
        self.done.fetch_add(1, Ordering::AcqRel);
        self.check_end();
    }

    fn check_end(&self) {
        if self.finished() {
            lock(&self.finished_at).get_or_insert_with(Instant::now);
            let _g = lock(&self.end);
            self.end_cv.notify_all();
            let _g = lock(&self.wake);
            self.wake_cv.notify_all();
        }
    }

    fn fail(&self, e: DeviceError) {
        lock(&self.error).get_or_insert(e);
        self.abort.store(true, Ordering::Release);
        self.check_end();
    }

    /// Sync: blocks until every task is done, a task faulted, the launch's
    /// timeout passed or its cancel flag was set (both fail it; running
    /// cores see the failure and stop).
    pub(crate) fn wait_finished(&self) {
        // `validate` bounded the timeout, so this cannot overflow.
        let deadline = self.start + self.opts.timeout;
        let mut g = lock(&self.end);
        while !self.finished() {
            let now = Instant::now();
            let cancelled = self.opts.cancel.iter().any(|c| c.load(Ordering::Acquire));
            if now >= deadline || cancelled {
                drop(g);
                self.fail(DeviceError::Stopped {
                    program: self.opts.name.clone(),
                    why: if cancelled {
                        "was cancelled".into()
                    } else {
                        format!("ran past its {:?} timeout", self.opts.timeout)
                    },
                    done: self.done.load(Ordering::Acquire),
                    total: self.launch.tasks.len(),
                });
                return;
            }
            // Short naps so a cancel is seen within milliseconds.
            let wait = (deadline - now).min(Duration::from_millis(10));
            g = self
                .end_cv
                .wait_timeout(g, wait)
                .map(|r| r.0)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Wakes every parked manager (at the end, so they return).
    pub(crate) fn wake_all(&self) {
        let _g = lock(&self.wake);
        self.wake_cv.notify_all();
    }

    /// Sleeps until there may be work (or the launch ended).
    fn park(&self, kinds: [bool; 2]) {
        let g = lock(&self.wake);
        let has_work = |i: usize| kinds[i] && self.queued[i].load(Ordering::Acquire) > 0;
        if self.finished() || has_work(0) || has_work(1) {
            return;
        }
        self.parked.fetch_add(1, Ordering::AcqRel);
        // The timeout is a safety net; wakeups come from `make_ready`.
        let _ = self.wake_cv.wait_timeout(g, Duration::from_millis(20));
        self.parked.fetch_sub(1, Ordering::AcqRel);
    }

    /// The launch's result once it has ended.
    pub(crate) fn report(&self, managers: usize) -> Result<LaunchReport> {
        if let Some(e) = lock(&self.error).take() {
            return Err(e);
        }
        let host_time =
            lock(&self.finished_at).map_or_else(|| self.start.elapsed(), |t| t - self.start);
        let profile = self.opts.profile.then(|| Profile {
            name: self.opts.name.clone(),
            records: std::mem::take(&mut *lock(&self.records)),
            task_names: self.launch.tasks.iter().map(|t| t.name.clone()).collect(),
            successors: self
                .launch
                .tasks
                .iter()
                .map(|t| t.successors.clone())
                .collect(),
            managers,
            aic_cores: self.lanes.0,
            aiv_cores: self.lanes.1,
            clock_hz: self.lanes.2,
            pipe_busy: std::array::from_fn(|i| self.pipe_busy[i].load(Ordering::Relaxed)),
            device_cycles: self.max_end.load(Ordering::Acquire),
            host_time,
            host_copies: None,
        });
        Ok(LaunchReport {
            tasks: self.launch.tasks.len(),
            policy: self.opts.policy,
            managers,
            device_cycles: self.max_end.load(Ordering::Acquire),
            pipe_busy: std::array::from_fn(|i| self.pipe_busy[i].load(Ordering::Relaxed)),
            host_time,
            profile,
        })
    }
}

/// Manager `m`'s loop over its cores for one launch.
pub(crate) fn run(
    st: &LaunchState,
    inner: &SimInner,
    regs: &[CoreRegs],
    cores: &[(CoreType, u32)],
    m: usize,
) {
    let aic = inner.config.aic_cores as usize;
    let kinds = [
        cores.iter().any(|c| c.0 == CoreType::Aic),
        cores.iter().any(|c| c.0 == CoreType::Aiv),
    ];
    let mut clock = vec![0u64; cores.len()];
    let mut pending: Vec<Option<u32>> = vec![None; cores.len()];
    let mut ready = Vec::new();
    let mut local_records = Vec::new();
    while !st.finished() {
        let mut progressed = false;
        for (ci, &(kind, idx)) in cores.iter().enumerate() {
            let Some(t) = pending[ci].take().or_else(|| st.pop(kind)) else {
                continue;
            };
            // The pending slot: the next task, handed over while this one
            // runs; the fair policy leaves it to idle managers instead.
            if !(st.opts.policy == Policy::Fair && st.parked.load(Ordering::Acquire) > 0) {
                pending[ci] = st.pop(kind);
            }
            let reg = &regs[if kind == CoreType::Aic {
                idx as usize
            } else {
                aic + idx as usize
            }];
            if let Err(e) = run_task(
                st,
                inner,
                reg,
                kind,
                idx,
                t,
                &mut clock[ci],
                m,
                &mut local_records,
            ) {
                st.fail(e);
                break;
            }
            st.complete(t, clock[ci], &mut ready);
            progressed = true;
            if st.finished() {
                break;
            }
        }
        if !progressed {
            st.park(kinds);
        }
    }
    if !local_records.is_empty() {
        lock(&st.records).append(&mut local_records);
    }
}

/// Hands task `t` to core `(kind, idx)` through its registers, simulates
/// the core running it, and advances the core's virtual clock.
#[allow(clippy::too_many_arguments)]
fn run_task(
    st: &LaunchState,
    inner: &SimInner,
    reg: &CoreRegs,
    kind: CoreType,
    idx: u32,
    t: u32,
    clock: &mut u64,
    m: usize,
    records: &mut Vec<TaskRecord>,
) -> Result<()> {
    let host_start = st.opts.profile.then(|| st.start.elapsed());
    let task = &st.launch.tasks[t as usize];
    // Manager -> core: the task register holds id + 1.
    reg.task.store(t as u64 + 1, Ordering::Release);
    // Core: acknowledge with the id, run, finish with id | FINISH.
    let id = reg.task.load(Ordering::Acquire) - 1;
    reg.status.store(id, Ordering::Release);
    let (cycles, busy) = match task.func {
        None => (0, [0u64; 7]),
        Some(f) => {
            let prog = &st.launch.functions[f as usize];
            let spans: Vec<Span> = task
                .gm
                .iter()
                .map(|g| Span {
                    addr: st.spans[g.buffer as usize].addr + g.offset,
                    len: g.len,
                })
                .collect();
            let core = inner
                .core(kind, idx)
                .ok_or_else(|| DeviceError::BadArguments {
                    program: st.opts.name.clone(),
                    msg: format!("core {}_{idx} does not exist", kind.name().to_uppercase()),
                })?;
            let mut core = lock(core);
            let run = run_core(
                prog,
                &mut core,
                inner.gm(),
                TaskArgs {
                    gm: &spans,
                    scalars: &task.scalars,
                    stop: Some(&st.abort),
                },
                &inner.config,
            )
            .map_err(|e| name_task(e, t, &task.name))?;
            (run.cycles, run.busy)
        }
    };
    reg.status.store(id | FINISH, Ordering::Release);
    // Manager: sees the finish bit for this id and frees the register.
    let status = reg.status.load(Ordering::Acquire);
    if status != (t as u64 | FINISH) {
        return Err(DeviceError::BadArguments {
            program: st.opts.name.clone(),
            msg: format!(
                "core {}_{idx} finished {status:#x}, expected task {t}",
                kind.name().to_uppercase()
            ),
        });
    }
    reg.task.store(0, Ordering::Release);
    let ready_at = st.ready_at[t as usize].load(Ordering::Acquire);
    let start = (*clock).max(ready_at + st.dispatch_cycles);
    *clock = start + cycles;
    st.max_end.fetch_max(*clock, Ordering::Relaxed);
    for (p, b) in busy.iter().enumerate() {
        if *b > 0 {
            st.pipe_busy[p].fetch_add(*b, Ordering::Relaxed);
        }
    }
    if let Some(h0) = host_start {
        records.push(TaskRecord {
            task: t,
            core: kind,
            core_index: idx,
            ready: ready_at,
            start,
            end: *clock,
            manager: m,
            host_start: h0,
            host_end: st.start.elapsed(),
            busy,
        });
    }
    Ok(())
}

/// Adds the task to a fault's message: the error names core, program, pc
/// and now the task.
fn name_task(e: DeviceError, t: u32, name: &str) -> DeviceError {
    match e {
        DeviceError::Fault {
            core,
            program,
            pc,
            msg,
        } => DeviceError::Fault {
            core,
            program,
            pc,
            msg: format!("task {t} `{name}`: {msg}"),
        },
        DeviceError::BadArguments { program, msg } => DeviceError::BadArguments {
            program,
            msg: format!("task {t} `{name}`: {msg}"),
        },
        e => e,
    }
}
