//! `tilejit-device`: the device model. For now it holds only the identity of
//! the targets tilejit knows; the `DeviceApi` trait, the host device and the
//! simulated Ascend-style accelerator (memory regions, AIC/AIV cores, the
//! bytecode ISA, its interpreter, cycle model and scheduler threads) arrive
//! with the simulated-accelerator issue. Invariant: this crate never sees a
//! graph; it depends on `tilejit-ir` for scalar types only.

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
