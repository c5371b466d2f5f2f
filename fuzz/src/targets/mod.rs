//! The fuzz targets. Each takes raw bytes, runs them through one input
//! surface of tilejit and returns a signature of how far they got (see
//! [`crate::engine`]), or a finding when a check the code promises fails;
//! a panic anywhere is a finding too.

use std::path::{Path, PathBuf};

mod compile;
mod config;
mod device;
mod dynamic;
mod graph;
mod kernels;
mod npy;
mod onnx;

/// One fuzz target.
pub struct Target {
    /// Its name on the command line.
    pub name: &'static str,
    /// What it exercises.
    pub about: &'static str,
    /// Its seed inputs.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Runs one input: a signature, or why the input is a finding.
    pub run: fn(&[u8]) -> Result<String, String>,
    /// Words for the token mutations, beyond those the seeds contain.
    pub dict: &'static [&'static str],
}

/// Every target, in the order `all` runs them.
pub const ALL: [Target; 9] = [
    graph::TARGET,
    kernels::TARGET,
    device::BINARY,
    device::ASM,
    npy::TARGET,
    config::TARGET,
    dynamic::TARGET,
    onnx::TARGET,
    compile::TARGET,
];

/// The target called `name`.
pub fn find(name: &str) -> Option<&'static Target> {
    ALL.iter().find(|t| t.name == name)
}

/// A signature: the stage an input reached and its error message, less a
/// location prefix (`line 3: `, `fault on core AIV_0 in program \`k\` at
/// pc 5: `) and cut at the first quote or digit, so the same error on
/// other lines or names counts as one behaviour.
fn sig(stage: &str, err: &impl ToString) -> String {
    let full = err.to_string();
    let located = |h: &str| {
        ["line ", "decode error at", "fault on core", "program `"]
            .iter()
            .any(|p| h.starts_with(p))
    };
    let mut e = full.as_str();
    for _ in 0..2 {
        match e.split_once(": ") {
            Some((head, rest)) if located(head) => e = rest,
            _ => break,
        }
    }
    let cut: String = e
        .chars()
        .take_while(|c| !matches!(c, '`' | '\'' | '"' | '0'..='9'))
        .take(48)
        .collect();
    format!("{stage}: {}", cut.trim_end())
}

/// The workspace root (seeds are read from its test corpus).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The files under `dir` (relative to the root) whose names end in `ext`,
/// sorted so seeds come in a stable order.
fn files(dir: &str, ext: &str) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(root().join(dir))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(ext))
        .filter_map(|e| {
            let bytes = std::fs::read(e.path()).ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), bytes))
        })
        .collect();
    out.sort();
    out
}

/// Reads a target's input as a stream of random choices (zeros past its
/// end): the `dynamic` and `compile` targets' bodies and graphs.
struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data, pos: 0 }
    }

    fn next(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    /// A choice below `n` (0, reading nothing, when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            self.next() as usize % n
        }
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// Whether every byte has been read.
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
}

/// A 64-bit FNV-1a hash: derives data values from an input, so a replay
/// sees the same values.
fn hash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}
