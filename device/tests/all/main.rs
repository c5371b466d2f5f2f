//! tilejit-device's integration tests, in one binary so they link once:
//! the ISA's forms and verifier (`isa`), memory and the `DeviceApi` (`mem`),
//! task-graph launches (`sched`) and the simulated core (`sim`).
//!
//! They depend on this crate and `tilejit-ir` only; the few helpers they
//! share (examples, a seeded generator, golden files, f64 references) are
//! below rather than in `tilejit-tests`, which depends on this crate.

#![allow(clippy::unwrap_used)] // tests assert by unwrapping

mod isa;
mod mem;
mod sched;
mod sim;

use std::path::{Path, PathBuf};
use tilejit_device::isa::asm;
use tilejit_device::Program;

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

/// A xorshift generator: random programs and task graphs that a seed
/// reproduces.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)] // not an iterator: it never ends
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Compares `actual` with the file at `path`; `BLESS=1` rewrites the file.
#[track_caller]
pub fn check_golden_file(path: &Path, actual: &str) {
    if std::env::var_os("BLESS").is_some_and(|v| v == "1") {
        std::fs::write(path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_default();
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .map_or_else(|| "line counts".to_string(), |i| format!("line {}", i + 1));
        panic!(
            "{} differs from what is generated (first at {line});\n\
             if the change is intended, run `BLESS=1 cargo test -p tilejit-device isa_md`",
            path.display()
        );
    }
}

/// Row-major f64 references, written from the ops' definitions.
pub mod reference {
    /// `[m,k] x [k,n]`.
    pub fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|t| a[i * k + t] * b[t * n + j]).sum();
            }
        }
        out
    }

    /// Row softmax of `[rows, cols]`.
    pub fn softmax(x: &[f64], cols: usize) -> Vec<f64> {
        x.chunks(cols)
            .flat_map(|row| {
                let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = row.iter().map(|v| (v - m).exp()).collect();
                let s: f64 = e.iter().sum();
                e.into_iter().map(move |v| v / s)
            })
            .collect()
    }
}
