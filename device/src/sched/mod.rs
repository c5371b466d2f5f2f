//! Running task graphs on the simulated device, as PyPTO's device runtime
//! does: a launch is a DAG of core tasks (plus dependency-only hub nodes);
//! one **control thread** takes launches from the device's stream in order
//! (init: check and bind the graph and its ready counts; exec: push the
//! root-ready tasks; sync: wait for the managers; then complete the
//! launch's handle), and **K manager threads** (`ceil(blocks/8)`, capped
//! by `DeviceConfig::max_managers` and the host's cores) each own a fixed slice of the AIC and
//! AIV cores. Managers take ready tasks from one queue per core type, hand
//! a task to a core through its task register (`id+1`, acknowledged with
//! `id`, finished with `id | 0x8000_0000`), simulate the core inline
//! (interpreter + cycle model), and on finish drop the ready counts of the
//! task's successors, queueing those that reach zero; hubs resolve inline.
//! Idle threads park on condition variables; nothing spins.
//!
//! Virtual device time: a task starts at `max(core free, last predecessor
//! finished + dispatch_cycles)` and lasts its cycle-model cycles, so the
//! profile shows a schedule the hardware could have run; which core takes
//! which task depends on host timing.

mod control;
mod manager;
mod policy;
pub mod profile;

pub(crate) use control::Scheduler;

use crate::api::DeviceBuffer;
use crate::error::{DeviceError, Result};
use crate::isa::verify::VerifiedProgram;
use crate::isa::CoreType;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

pub use profile::{HostCopies, Profile};

pub use policy::Policy;

/// Where a task runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TaskKind {
    /// A cube core.
    Aic,
    /// A vector core.
    Aiv,
    /// No core: a dependency-only node, resolved inline when ready.
    Hub,
}

impl TaskKind {
    /// The core type, if the task runs on a core.
    pub fn core(self) -> Option<CoreType> {
        match self {
            TaskKind::Aic => Some(CoreType::Aic),
            TaskKind::Aiv => Some(CoreType::Aiv),
            TaskKind::Hub => None,
        }
    }
}

/// A task's view of one GM argument: bytes `offset..offset+len` of one of
/// the launch's buffers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct GmArg {
    /// Index into [`Launch::buffers`].
    pub buffer: u32,
    /// First byte in the buffer.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// One node of a launch's graph.
#[derive(Clone, Debug)]
pub struct Task {
    /// For profiles: `kernel/tile`.
    pub name: String,
    /// Where it runs.
    pub kind: TaskKind,
    /// Index into [`Launch::functions`]; `None` is a core task that does
    /// nothing (it still takes a core slot).
    pub func: Option<u32>,
    /// GM arguments, in the function's declaration order.
    pub gm: Vec<GmArg>,
    /// Scalar arguments, in the function's declaration order.
    pub scalars: Vec<i64>,
    /// Tasks that wait for this one.
    pub successors: Vec<u32>,
}

impl Task {
    /// A task with no arguments and no successors.
    pub fn new(name: impl Into<String>, kind: TaskKind, func: Option<u32>) -> Task {
        Task {
            name: name.into(),
            kind,
            func,
            gm: Vec::new(),
            scalars: Vec::new(),
            successors: Vec::new(),
        }
    }
}

/// Everything one launch runs: core functions, the buffers its tasks
/// address (kept alive until the launch completes), and the task graph
/// (PyPTO's `CoreFunctionTopo`: core type, successors, and ready counts
/// derived from them).
#[derive(Clone, Debug, Default)]
pub struct Launch {
    /// Compiled core functions (bytecode), shared by many tasks.
    pub functions: Vec<VerifiedProgram>,
    /// Device buffers the tasks' GM arguments point into.
    pub buffers: Vec<Arc<DeviceBuffer>>,
    /// The graph.
    pub tasks: Vec<Task>,
}

/// The longest [`LaunchOptions::timeout`] a launch may ask for.
pub const MAX_LAUNCH_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// How to run one launch.
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    /// Ready-queue policy.
    pub policy: Policy,
    /// Record a per-task profile (Chrome trace).
    pub profile: bool,
    /// A launch still running after this fails with
    /// [`DeviceError::Stopped`]: its running tasks stop within a few
    /// thousand instructions and the device goes on with the next launch.
    /// At most [`MAX_LAUNCH_TIMEOUT`].
    pub timeout: Duration,
    /// Flags that stop the launch early (the same way as a timeout) when
    /// any one is set.
    pub cancel: Vec<Arc<AtomicBool>>,
    /// For messages and traces.
    pub name: String,
}

impl Default for LaunchOptions {
    fn default() -> Self {
        LaunchOptions {
            policy: Policy::Fifo,
            profile: false,
            timeout: Duration::from_secs(120),
            cancel: Vec::new(),
            name: "launch".into(),
        }
    }
}

/// What a finished launch did.
#[derive(Clone, Debug)]
pub struct LaunchReport {
    /// Tasks run (hubs included).
    pub tasks: usize,
    /// The ready-queue policy it ran under.
    pub policy: Policy,
    /// Manager threads used.
    pub managers: usize,
    /// Virtual device time, cycles: the last task's end.
    pub device_cycles: u64,
    /// Busy cycles per pipe, summed over cores.
    pub pipe_busy: [u64; 7],
    /// Host time from the control thread's init to the last finish.
    pub host_time: Duration,
    /// The per-task profile, when asked for.
    pub profile: Option<Profile>,
}

/// The launch's completion event.
#[derive(Debug)]
pub struct LaunchHandle {
    rx: mpsc::Receiver<Result<LaunchReport>>,
}

impl LaunchHandle {
    pub(crate) fn new(rx: mpsc::Receiver<Result<LaunchReport>>) -> LaunchHandle {
        LaunchHandle { rx }
    }

    /// Blocks until the launch completes.
    pub fn wait(self) -> Result<LaunchReport> {
        self.rx.recv().unwrap_or_else(|_| {
            Err(DeviceError::BadArguments {
                program: "launch".into(),
                msg: "the device's scheduler stopped before completing the launch".into(),
            })
        })
    }
}

/// The finish bit of a core's status register.
pub const FINISH: u64 = 0x8000_0000;
