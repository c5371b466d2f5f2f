//! The control thread and the device's stream: launches are submitted from
//! any thread, queued in order, and run one at a time: init (validate the
//! graph, bind buffers, ready counts), exec (push root-ready tasks, start
//! the managers), sync (wait for every task, a fault or the timeout), then
//! the launch's handle completes. Manager threads are started once and
//! parked between launches.

use super::manager::{self, LaunchState};
use super::{Launch, LaunchHandle, LaunchOptions, LaunchReport};
use crate::api::SimInner;
use crate::error::{DeviceError, Result};
use crate::isa::verify::capacity;
use crate::isa::{CoreType, Space};
use std::sync::atomic::AtomicU64;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

/// A core's task register and status register (design.md §4).
#[derive(Debug, Default)]
pub(crate) struct CoreRegs {
    /// 0 when idle; `id + 1` when the manager has handed it task `id`.
    pub task: AtomicU64,
    /// `id` once the core acknowledged, `id | FINISH` once done.
    pub status: AtomicU64,
}

enum Job {
    Launch(
        Box<Launch>,
        LaunchOptions,
        mpsc::Sender<Result<LaunchReport>>,
    ),
    Sync(mpsc::Sender<()>),
}

/// The device's scheduler: its stream and threads.
#[derive(Debug)]
pub(crate) struct Scheduler {
    stream: Mutex<mpsc::Sender<Job>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Job::Launch(..) => "Launch",
            Job::Sync(_) => "Sync",
        })
    }
}

impl Scheduler {
    /// Starts the control thread (which starts the managers).
    pub(crate) fn start(inner: Arc<SimInner>) -> Scheduler {
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = thread::Builder::new()
            .name("tilejit-control".into())
            .spawn(move || control_loop(inner, rx));
        if let Err(e) = spawned {
            // Without a control thread every launch reports this error.
            let (dead_tx, dead_rx) = mpsc::channel::<Job>();
            drop(dead_rx);
            eprintln!("tilejit: cannot start the device scheduler: {e}");
            return Scheduler {
                stream: Mutex::new(dead_tx),
            };
        }
        Scheduler {
            stream: Mutex::new(tx),
        }
    }

    fn send(&self, job: Job) -> bool {
        let tx = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        tx.send(job).is_ok()
    }

    /// Queues a launch.
    pub(crate) fn submit(&self, launch: Launch, options: LaunchOptions) -> LaunchHandle {
        let (tx, rx) = mpsc::channel();
        // A failed send drops `tx`, so waiting on the handle reports it.
        self.send(Job::Launch(Box::new(launch), options, tx));
        LaunchHandle::new(rx)
    }

    /// Waits until every launch queued before this call has completed.
    pub(crate) fn synchronize(&self) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        if !self.send(Job::Sync(tx)) || rx.recv().is_err() {
            return Err(DeviceError::BadArguments {
                program: "synchronize".into(),
                msg: "the device's scheduler is not running".into(),
            });
        }
        Ok(())
    }
}

/// One manager thread's mailbox and its fixed slice of cores.
struct ManagerHandle {
    tx: mpsc::Sender<Arc<LaunchState>>,
}

fn control_loop(inner: Arc<SimInner>, rx: mpsc::Receiver<Job>) {
    let cfg = &inner.config;
    let blocks = cfg.blocks().max(1);
    // A manager is a host thread that runs its cores' tasks itself, so
    // more managers than host cores would only time-slice.
    let host_cores = thread::available_parallelism().map_or(1, |n| n.get());
    let k = (blocks.div_ceil(8).clamp(1, cfg.max_managers) as usize).min(host_cores);
    let regs: Arc<Vec<CoreRegs>> = Arc::new(
        (0..cfg.aic_cores + cfg.aiv_cores)
            .map(|_| CoreRegs::default())
            .collect(),
    );
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let mut managers = Vec::with_capacity(k);
    for m in 0..k {
        let cores = slice_of(m, k, cfg.aic_cores, cfg.aiv_cores);
        let (tx, mrx) = mpsc::channel::<Arc<LaunchState>>();
        let (inner, regs, done_tx) = (inner.clone(), regs.clone(), done_tx.clone());
        let spawned = thread::Builder::new()
            .name(format!("tilejit-manager-{m}"))
            .spawn(move || {
                while let Ok(st) = mrx.recv() {
                    manager::run(&st, &inner, &regs, &cores, m);
                    // Let go of the launch (its buffers) before saying
                    // done, so memory is free when the launch's waiter wakes.
                    drop(st);
                    if done_tx.send(()).is_err() {
                        break;
                    }
                }
            });
        if spawned.is_ok() {
            managers.push(ManagerHandle { tx });
        }
    }
    while let Ok(job) = rx.recv() {
        match job {
            Job::Sync(reply) => {
                let _ = reply.send(());
            }
            Job::Launch(launch, opts, reply) => {
                let result = run_launch(&inner, *launch, opts, &managers, &done_rx);
                let _ = reply.send(result);
            }
        }
    }
}

/// Manager `m` of `k`: a contiguous slice of the AIC cores and of the AIV
/// cores, as (type, index) pairs.
fn slice_of(m: usize, k: usize, aic: u32, aiv: u32) -> Vec<(CoreType, u32)> {
    let part = |n: u32| {
        let per = (n as usize).div_ceil(k);
        let lo = (m * per).min(n as usize) as u32;
        let hi = ((m + 1) * per).min(n as usize) as u32;
        lo..hi
    };
    let mut v: Vec<(CoreType, u32)> = part(aic).map(|i| (CoreType::Aic, i)).collect();
    v.extend(part(aiv).map(|i| (CoreType::Aiv, i)));
    v
}

fn bad(opts: &LaunchOptions, msg: String) -> DeviceError {
    DeviceError::BadArguments {
        program: opts.name.clone(),
        msg,
    }
}

/// Init: a bounded timeout, every index in range, argument counts matching the functions,
/// GM ranges inside their buffers, functions fitting this device's cores,
/// and no dependency cycle. Returns each task's ready count.
fn validate(inner: &SimInner, launch: &Launch, opts: &LaunchOptions) -> Result<Vec<u32>> {
    let n = launch.tasks.len();
    if n >= super::FINISH as usize {
        return Err(bad(opts, format!("{n} tasks: at most 2^31 - 1 per launch")));
    }
    if opts.timeout.is_zero() || opts.timeout > super::MAX_LAUNCH_TIMEOUT {
        return Err(bad(
            opts,
            format!(
                "timeout {:?}: must be more than 0 and at most {:?}",
                opts.timeout,
                super::MAX_LAUNCH_TIMEOUT
            ),
        ));
    }
    let cfg = &inner.config;
    for (i, f) in launch.functions.iter().enumerate() {
        for s in Space::ALL {
            if f.limits()[s.index()] > capacity(cfg, s) {
                return Err(bad(
                    opts,
                    format!(
                        "function {i} was verified for a bigger {} than this device has",
                        s.name()
                    ),
                ));
            }
        }
    }
    let spans = launch
        .buffers
        .iter()
        .map(|b| inner.span_of(b))
        .collect::<Result<Vec<_>>>()?;
    let mut indegree = vec![0u32; n];
    for (t, task) in launch.tasks.iter().enumerate() {
        let at = |msg: String| bad(opts, format!("task {t} `{}`: {msg}", task.name));
        match (task.kind.core(), task.func) {
            (None, Some(_)) => return Err(at("a hub has no function".into())),
            (Some(core), Some(f)) => {
                let prog = launch
                    .functions
                    .get(f as usize)
                    .ok_or_else(|| at(format!("function {f} does not exist")))?;
                let p = prog.program();
                if p.core != core {
                    return Err(at(format!(
                        "function `{}` is for {} cores",
                        p.name,
                        p.core.name()
                    )));
                }
                if task.gm.len() != p.gm.len() || task.scalars.len() != p.args.len() {
                    return Err(at(format!(
                        "{} GM and {} scalar arguments given, `{}` declares {} and {}",
                        task.gm.len(),
                        task.scalars.len(),
                        p.name,
                        p.gm.len(),
                        p.args.len()
                    )));
                }
            }
            _ => {}
        }
        if let Some(core) = task.kind.core() {
            let have = match core {
                CoreType::Aic => cfg.aic_cores,
                CoreType::Aiv => cfg.aiv_cores,
            };
            if have == 0 {
                return Err(at(format!("the device has no {} cores", core.name())));
            }
        }
        for g in &task.gm {
            let span = spans
                .get(g.buffer as usize)
                .ok_or_else(|| at(format!("buffer {} does not exist", g.buffer)))?;
            if g.offset.checked_add(g.len).is_none_or(|e| e > span.len) {
                return Err(at(format!(
                    "GM range {}+{} is outside buffer {} ({} bytes)",
                    g.offset, g.len, g.buffer, span.len
                )));
            }
        }
        for &s in &task.successors {
            if s as usize >= n || s as usize == t {
                return Err(at(format!(
                    "successor {s} is not another task of the launch"
                )));
            }
            indegree[s as usize] += 1;
        }
    }
    // Kahn's algorithm: every task must become ready.
    let mut left = indegree.clone();
    let mut work: Vec<usize> = (0..n).filter(|&t| left[t] == 0).collect();
    let mut seen = 0;
    while let Some(t) = work.pop() {
        seen += 1;
        for &s in &launch.tasks[t].successors {
            left[s as usize] -= 1;
            if left[s as usize] == 0 {
                work.push(s as usize);
            }
        }
    }
    if seen != n {
        return Err(bad(
            opts,
            format!(
                "{} tasks are on a dependency cycle and would never run",
                n - seen
            ),
        ));
    }
    Ok(indegree)
}

fn run_launch(
    inner: &Arc<SimInner>,
    launch: Launch,
    opts: LaunchOptions,
    managers: &[ManagerHandle],
    done_rx: &mpsc::Receiver<()>,
) -> Result<LaunchReport> {
    let start = Instant::now();
    let ready = validate(inner, &launch, &opts)?;
    if managers.is_empty() {
        return Err(bad(&opts, "no manager thread could be started".into()));
    }
    let spans = launch
        .buffers
        .iter()
        .map(|b| inner.span_of(b))
        .collect::<Result<Vec<_>>>()?;
    let st = Arc::new(LaunchState::new(
        launch,
        opts,
        spans,
        ready,
        &inner.config,
        start,
    ));
    // Exec: the root-ready tasks.
    st.push_roots();
    if !st.finished() {
        for m in managers {
            // Each manager reports back on `done_rx` whatever happens.
            let _ = m.tx.send(st.clone());
        }
        st.wait_finished();
        st.wake_all();
        for _ in managers {
            let _ = done_rx.recv();
        }
    }
    st.report(managers.len())
}
