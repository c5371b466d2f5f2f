//! One simulated core: its local memories and the run loop that executes a
//! verified program with exact semantics (`super::exec`) while the cycle
//! model ([`super::cycles`]) times it. A run ends at `end`, or with a fault
//! naming core, program and pc (bad GM access, watchdog, division by zero,
//! a flag wait that could never end).

use super::cycles::{cost, Timeline, Work};
use super::exec::{exec, Ctx, Flow, Trap};
use crate::config::DeviceConfig;
use crate::error::{DeviceError, Result};
use crate::isa::verify::VerifiedProgram;
use crate::isa::{CoreType, Pipe, Space, NUM_REGS};
use crate::mem::{PagedMemory, Span};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use tilejit_ir::DType;

/// A core's identity and local memories.
#[derive(Clone, Debug)]
pub struct CoreState {
    kind: CoreType,
    index: u32,
    mem: [Vec<u8>; 5],
}

impl CoreState {
    /// Core `index` of type `kind`, with the memories `cfg` gives it (zeroed).
    pub fn new(kind: CoreType, index: u32, cfg: &DeviceConfig) -> CoreState {
        let size = |s: Space| -> usize {
            if has_space(kind, s) {
                crate::isa::verify::capacity(cfg, s) as usize
            } else {
                0
            }
        };
        CoreState {
            kind,
            index,
            mem: Space::ALL.map(|s| vec![0u8; size(s)]),
        }
    }

    /// Its type.
    pub fn kind(&self) -> CoreType {
        self.kind
    }

    /// `AIV_3`, `AIC_0`: the name in faults and traces.
    pub fn name(&self) -> String {
        format!("{}_{}", self.kind.name().to_uppercase(), self.index)
    }

    /// A local memory's bytes (for tests and tools).
    pub fn memory(&self, space: Space) -> &[u8] {
        &self.mem[space.index()]
    }
}

/// The arguments of one task: GM spans in the order the program declares
/// its GM arguments, and scalar values in the order of its scalar arguments.
#[derive(Copy, Clone, Debug)]
pub struct TaskArgs<'a> {
    /// GM arguments.
    pub gm: &'a [Span],
    /// Scalar arguments.
    pub scalars: &'a [i64],
    /// When set, the run stops (the launch it belongs to failed, timed
    /// out or was cancelled); checked every [`STOP_CHECK_STEPS`]
    /// instructions.
    pub stop: Option<&'a AtomicBool>,
}

/// How often (in instructions) a run looks at its stop flag: often enough
/// to stop within microseconds, rarely enough to cost nothing.
pub const STOP_CHECK_STEPS: u64 = 1024;

/// The cycle model's account of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreRun {
    /// The core type that ran.
    pub core: CoreType,
    /// Cycles until every pipe drained.
    pub cycles: u64,
    /// Busy cycles per pipe, indexed by [`Pipe::index`].
    pub busy: [u64; 7],
    /// Instructions executed.
    pub instructions: u64,
}

impl CoreRun {
    /// Busy cycles of `pipe`.
    pub fn busy_of(&self, pipe: Pipe) -> u64 {
        self.busy[pipe.index()]
    }

    /// Seconds of device time at `clock_hz`.
    pub fn seconds(&self, clock_hz: f64) -> f64 {
        self.cycles as f64 / clock_hz
    }
}

impl fmt::Display for CoreRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "cycles: {}  instructions: {}",
            self.cycles, self.instructions
        )?;
        for p in Pipe::ALL.into_iter().filter(|p| p.exists_on(self.core)) {
            let b = self.busy_of(p);
            let share = if self.cycles == 0 {
                0.0
            } else {
                100.0 * b as f64 / self.cycles as f64
            };
            writeln!(f, "  {:<5} busy {:>10} cycles ({share:5.1}%)", p.name(), b)?;
        }
        Ok(())
    }
}

/// Runs `prog` on `core` against `gm` with `args`. Local memories keep their
/// contents between runs (as on hardware); registers start at zero.
pub fn run_core(
    prog: &VerifiedProgram,
    core: &mut CoreState,
    gm: &PagedMemory,
    args: TaskArgs<'_>,
    cfg: &DeviceConfig,
) -> Result<CoreRun> {
    let p = prog.program();
    let bad = |msg: String| DeviceError::BadArguments {
        program: p.name.clone(),
        msg,
    };
    if core.kind != p.core {
        return Err(bad(format!(
            "a {} program cannot run on {}",
            p.core.name(),
            core.name()
        )));
    }
    for s in Space::ALL {
        if core.mem[s.index()].len() < prog.limits()[s.index()] as usize && has_space(core.kind, s)
        {
            return Err(bad(format!(
                "verified for {} bytes of {} but {} has {}",
                prog.limits()[s.index()],
                s.name(),
                core.name(),
                core.mem[s.index()].len()
            )));
        }
    }
    if args.gm.len() != p.gm.len() {
        return Err(bad(format!(
            "{} GM arguments given, the program declares {}",
            args.gm.len(),
            p.gm.len()
        )));
    }
    if args.scalars.len() != p.args.len() {
        return Err(bad(format!(
            "{} scalar arguments given, the program declares {}",
            args.scalars.len(),
            p.args.len()
        )));
    }
    for (i, s) in args.gm.iter().enumerate() {
        if s.addr.checked_add(s.len).is_none_or(|e| e > gm.size()) {
            return Err(bad(format!(
                "GM argument {i} ({:?}) lies outside GM ({} bytes)",
                s,
                gm.size()
            )));
        }
    }
    let core_name = core.name();
    let fault = |pc: usize, msg: String| DeviceError::Fault {
        core: core_name.clone(),
        program: p.name.clone(),
        pc,
        msg,
    };
    let mut cx = Ctx {
        regs: [0; NUM_REGS],
        mem: &mut core.mem,
        gm,
        spans: args.gm,
        scalars: args.scalars,
    };
    let mut timeline = Timeline::default();
    let mut pc = 0usize;
    let mut steps = 0u64;
    let mut work_done = 0u64;
    loop {
        let Some(inst) = p.code.get(pc) else {
            return Err(fault(pc, "pc outside the program".into()));
        };
        if steps.is_multiple_of(STOP_CHECK_STEPS)
            && args.stop.is_some_and(|f| f.load(Ordering::Relaxed))
        {
            return Err(fault(
                pc,
                format!("stopped after {steps} instructions: its launch ended"),
            ));
        }
        if work_done > cfg.watchdog_work {
            return Err(fault(
                pc,
                format!(
                    "watchdog: more than {} steps of work (after {steps} instructions)",
                    cfg.watchdog_work
                ),
            ));
        }
        steps += 1;
        let mut work = Work::default();
        let flow = exec(inst, &mut cx, &mut work).map_err(|t| match t {
            Trap::Fault(m) => fault(pc, m),
            Trap::Index { index, len } => DeviceError::IndexOutOfRange {
                core: core_name.clone(),
                program: p.name.clone(),
                pc,
                index,
                len,
            },
        })?;
        work_done += work.steps();
        let f32_cube = inst.dtype() == Some(DType::F32);
        let cycles = cost(inst.info().cost, &work, &cfg.costs, f32_cube);
        timeline
            .account(inst, cycles, &cfg.costs)
            .map_err(|m| fault(pc, m))?;
        match flow {
            Flow::Next => pc += 1,
            Flow::Jump(t) => pc = t,
            Flow::End => break,
        }
    }
    let dangling = timeline.dangling_flags();
    if let Some(&(s, d, e, n)) = dangling.first() {
        return Err(fault(
            pc,
            format!(
                "end with flag ({}, {}, {e}) raised {n} time(s) and never waited on",
                s.name(),
                d.name()
            ),
        ));
    }
    Ok(CoreRun {
        core: core.kind,
        cycles: timeline.total(),
        busy: timeline.busy(),
        instructions: steps,
    })
}

fn has_space(kind: CoreType, s: Space) -> bool {
    match kind {
        CoreType::Aiv => s == Space::Ub,
        CoreType::Aic => s != Space::Ub,
    }
}
