//! tilejit-device's integration tests, in one binary so they link once:
//! the ISA's forms and verifier (`isa`), memory and the `DeviceApi` (`mem`),
//! task-graph launches (`sched`) and the simulated core (`sim`).
//!
//! They depend on this crate, `tilejit-ir` and `tilejit-testkit` (the
//! seeded generator, golden files and f64 references `tilejit-tests` uses
//! too); the shipped examples are below.

#![allow(clippy::unwrap_used)] // tests assert by unwrapping

mod isa;
mod mem;
mod sched;
mod sim;

use std::path::{Path, PathBuf};
use tilejit_device::isa::asm;
use tilejit_device::Program;
pub use tilejit_testkit::{check_golden_file, reference, Rng};

/// The shipped assembly examples, `device/examples/`.
pub fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// An example assembled, panicking with its name on an error.
pub fn example(name: &str) -> Program {
    let text = std::fs::read_to_string(example_dir().join(name)).unwrap();
    asm::assemble(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every file in [`example_dir`].
pub const EXAMPLES: [&str; 4] = [
    "vadd_double_buffered.s",
    "vadd_single_buffered.s",
    "softmax_rows.s",
    "matmul_relu_f16.s",
];
