//! The simulated core: exact semantics of every instruction (`exec` on
//! [`values`]), the cycle model ([`cycles`]) and the run loop ([`core`]).

pub mod core;
pub mod cycles;
pub(crate) mod exec;
pub mod values;

pub use self::core::{run_core, CoreRun, CoreState, TaskArgs};
