//! Kernel observers (Icraft XRT's pre/post callbacks and setLogTime):
//! code that runs before and after every kernel a program launches, with
//! the kernel's input and output values.
//!
//! Observers are scoped to a thread ([`with_observer`]), plus two the
//! environment turns on for the whole process: `TILEJIT_LOG=time` (a
//! line per kernel run with its time) and `TILEJIT_DUMP_VALUES=<dir>`
//! (every kernel run's outputs as `.npy`). With none active, a program
//! run pays one thread-local read and one atomic load (`active`). With some,
//! host programs run kernel by kernel as always and hand each kernel's
//! buffers over as arrays; Sim programs launch one kernel at a time and
//! copy its buffers back for the observers (counted as transfers).

use std::cell::RefCell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tilejit_ir::Array;

/// Where a kernel ran.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// Native code on the host.
    Host,
    /// Bytecode on the simulated device.
    Sim,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Place::Host => "host",
            Place::Sim => "sim",
        })
    }
}

/// One kernel run, as observers see it.
#[derive(Debug)]
pub struct KernelRun<'a> {
    /// The program (a jit function and signature, or `eager`).
    pub program: &'a str,
    /// Numbers the program runs observed in this process, so the kernels
    /// of one call share it.
    pub run: u64,
    /// The kernel's position in its program.
    pub index: usize,
    /// The kernel's name (`fused_sub_exp`).
    pub name: &'a str,
    /// Where it ran.
    pub place: Place,
    /// The buffers it reads, in the kernel's order.
    pub inputs: &'a [Array],
    /// The buffers it writes (empty before it runs). A kernel that writes
    /// one operand of a concat shows the whole concat buffer.
    pub outputs: &'a [Array],
    /// How long it took, after it ran: host wall time, or on Sim the
    /// device time of the cycle model.
    pub elapsed: Option<Duration>,
}

/// Code called around kernel runs.
pub trait KernelObserver: Send + Sync {
    /// Before a kernel runs (`outputs` empty, `elapsed` `None`).
    fn before(&self, run: &KernelRun<'_>);
    /// After it ran.
    fn after(&self, run: &KernelRun<'_>);
    /// Whether it reads `inputs` and `outputs`: when no observer of a run
    /// does, they stay empty and nothing is copied (a time log of a model
    /// would otherwise copy every weight each kernel reads, per kernel).
    fn reads_values(&self) -> bool {
        true
    }
}

thread_local! {
    static SCOPED: RefCell<Vec<Arc<dyn KernelObserver>>> = const { RefCell::new(Vec::new()) };
    /// Set while an observer runs: kernels it launches itself (a hook that
    /// computes on tensors) are not observed, so hooks never recurse.
    static INSIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether `SCOPED` has any observer: the one read of the common case.
    static ANY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with observation suspended on this thread.
fn suspended(f: impl FnOnce()) {
    struct Resume(bool);
    impl Drop for Resume {
        fn drop(&mut self) {
            INSIDE.with(|i| i.set(self.0));
        }
    }
    let _resume = Resume(INSIDE.with(|i| i.replace(true)));
    f();
}

/// Runs `f` with `observer` called around every kernel launched on this
/// thread inside it (after any enclosing scope's observers).
pub fn with_observer<R>(observer: Arc<dyn KernelObserver>, f: impl FnOnce() -> R) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            let left = SCOPED.with(|s| {
                let mut s = s.borrow_mut();
                s.pop();
                !s.is_empty()
            });
            ANY.with(|a| a.set(left));
        }
    }
    SCOPED.with(|s| s.borrow_mut().push(observer));
    ANY.with(|a| a.set(true));
    let _pop = Pop;
    f()
}

/// The observers of this thread now, or `None` (the common case: one
/// thread-local read and one atomic load, inlined into the run loop).
#[inline(always)]
pub(crate) fn active() -> Option<Observers> {
    if !any() {
        return None;
    }
    active_slow()
}

/// Whether any observer may be active (a cheap first check).
#[inline(always)]
pub(crate) fn any() -> bool {
    ANY.with(|a| a.get()) || env_on()
}

/// Whether the environment asked for observers, cached in an atomic so
/// the check is a load.
#[inline(always)]
fn env_on() -> bool {
    static ON: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    match ON.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let on = !env_observers().is_empty();
            ON.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
    }
}

#[cold]
fn active_slow() -> Option<Observers> {
    if INSIDE.with(|i| i.get()) {
        return None;
    }
    let env = env_observers();
    let scoped = SCOPED.with(|s| {
        let s = s.borrow();
        (!s.is_empty()).then(|| s.clone())
    });
    if scoped.is_none() && env.is_empty() {
        return None;
    }
    let mut all: Vec<Arc<dyn KernelObserver>> = env.to_vec();
    all.extend(scoped.unwrap_or_default());
    static RUNS: AtomicU64 = AtomicU64::new(0);
    Some(Observers {
        run: RUNS.fetch_add(1, Ordering::Relaxed),
        all,
    })
}

/// The observers of one program run.
pub(crate) struct Observers {
    pub(crate) run: u64,
    all: Vec<Arc<dyn KernelObserver>>,
}

impl Observers {
    /// Whether any observer reads the kernels' values.
    pub(crate) fn reads_values(&self) -> bool {
        self.all.iter().any(|o| o.reads_values())
    }

    pub(crate) fn before(&self, run: &KernelRun<'_>) {
        suspended(|| self.all.iter().for_each(|o| o.before(run)));
    }

    pub(crate) fn after(&self, run: &KernelRun<'_>) {
        suspended(|| self.all.iter().for_each(|o| o.after(run)));
    }
}

/// The observers `TILEJIT_LOG=time` and `TILEJIT_DUMP_VALUES` ask for.
fn env_observers() -> &'static [Arc<dyn KernelObserver>] {
    static ENV: std::sync::OnceLock<Vec<Arc<dyn KernelObserver>>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        let cfg = crate::config::config();
        let mut v: Vec<Arc<dyn KernelObserver>> = Vec::new();
        if cfg.log.time {
            v.push(Arc::new(TimeLog));
        }
        if let Some(dir) = &cfg.dump_values_dir {
            v.push(Arc::new(DumpValues {
                dir: dir.clone(),
                warned: std::sync::atomic::AtomicBool::new(false),
            }));
        }
        v
    })
}

/// `TILEJIT_LOG=time`: one stderr line per kernel run.
struct TimeLog;

impl KernelObserver for TimeLog {
    fn before(&self, _: &KernelRun<'_>) {}

    fn reads_values(&self) -> bool {
        false
    }

    fn after(&self, r: &KernelRun<'_>) {
        eprintln!(
            "[tilejit] time `{}` run {} kernel {} `{}` on {}: {:?}",
            r.program,
            r.run,
            r.index,
            r.name,
            r.place,
            r.elapsed.unwrap_or_default()
        );
    }
}

/// `TILEJIT_DUMP_VALUES=<dir>`: every kernel run's outputs as `.npy`,
/// named `<program>-<pid>-<run>-k<index>-<kernel>-<output>.npy`.
struct DumpValues {
    dir: std::path::PathBuf,
    warned: std::sync::atomic::AtomicBool,
}

impl KernelObserver for DumpValues {
    fn before(&self, _: &KernelRun<'_>) {}

    fn after(&self, r: &KernelRun<'_>) {
        let stem = format!(
            "{}-{}-{}-k{}-{}",
            crate::dump::file_stem(r.program),
            std::process::id(),
            r.run,
            r.index,
            crate::dump::file_stem(r.name)
        );
        for (j, a) in r.outputs.iter().enumerate() {
            let path = self.dir.join(format!("{stem}-{j}.npy"));
            if let Err(e) = write_npy(&path, a) {
                // One warning per process: a full disk must not flood stderr.
                if !self.warned.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "tilejit: TILEJIT_DUMP_VALUES cannot write {}: {e}",
                        path.display()
                    );
                }
            }
        }
    }
}

/// Writes `a` to `path` as `.npy` (creating the directory).
pub(crate) fn write_npy(path: &Path, a: &Array) -> Result<(), String> {
    use tilejit_device::npy;
    let data = a.buffer().to_le_bytes().map_err(|e| e.to_string())?;
    let n = npy::NpyArray {
        dtype: a.dtype(),
        shape: a.shape().dims().iter().map(|&d| d as u64).collect(),
        data,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
    }
    crate::persist::publish(path, &npy::write(&n)).map_err(|e| e.to_string())
}
