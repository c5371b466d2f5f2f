//! `tilejit-device`: the device model.
//!
//! - [`api`]: the `DeviceApi` trait, `HostDevice`, `SimDevice`.
//! - [`config`]: `DeviceConfig`, every number of the model (JSON in/out).
//! - [`mem`]: memory regions with a real allocator; RAII chunks.
//! - [`isa`]: the AIC/AIV bytecode ISA, defined by one table
//!   ([`isa::table`]): binary encoding, text assembler/disassembler,
//!   verifier, generated reference (`ISA.md`).
//! - [`npy`]: `.npy` files in and out (the CLI's inputs and outputs).
//! - [`sched`]: launches of task graphs: the control thread, manager
//!   threads, ready queues and policies, profiles.
//! - [`sim`]: one simulated core: interpreter with exact semantics and the
//!   cycle model.
//!
//! Invariant: this crate never sees a graph; it depends on `tilejit-ir` for
//! scalar types and scalar semantics only.

pub mod api;
pub mod config;
pub mod error;
pub mod isa;
pub mod mem;
pub mod npy;
pub mod sched;
pub mod sim;

pub use api::{DeviceApi, DeviceBuffer, DeviceInfo, HostDevice, SimDevice};
pub use config::{CostTable, DeviceConfig};
pub use error::DeviceError;
pub use isa::verify::{verify, VerifiedProgram};
pub use isa::{CoreType, Inst, Opcode, Operand, Pipe, Program, Space};
pub use mem::GmElem;
pub use sched::{
    GmArg, HostCopies, Launch, LaunchHandle, LaunchOptions, LaunchReport, Policy, Profile, Task,
    TaskKind, MAX_LAUNCH_TIMEOUT,
};
pub use sim::{CoreRun, CoreState, TaskArgs};

use std::fmt;

/// A place where compiled code runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// The reference interpreter on the host (the oracle).
    Reference,
    /// Native host code.
    Host,
    /// The simulated accelerator.
    Sim,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Target::Reference => "reference",
            Target::Host => "host",
            Target::Sim => "sim",
        })
    }
}
