//! `DeviceError`, the one error enum of this crate. Every variant names what
//! went wrong and where (region, program, pc, core), so a message alone is
//! enough to find the cause.

use thiserror::Error;

/// Everything that can go wrong on a device, from allocation to a fault in a
/// running core program.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum DeviceError {
    /// An allocation did not fit.
    #[error(
        "out of memory in {region}: requested {requested} bytes, {free} bytes free in total, \
         largest free block {largest_free} bytes{}",
        live_list(.largest_live)
    )]
    OutOfMemory {
        /// The region that was asked (`GM`, `host`).
        region: String,
        /// The bytes asked for (before alignment).
        requested: u64,
        /// The free bytes in the region.
        free: u64,
        /// The largest contiguous free block.
        largest_free: u64,
        /// The biggest live chunks (up to three), each as `bytes at offset
        /// (owner)`: what holds the memory.
        largest_live: Vec<String>,
    },
    /// The host could not allocate the pages behind simulated memory.
    #[error("{0}")]
    HostMemory(#[from] crate::mem::PageAllocError),
    /// A copy or access outside a buffer.
    #[error("{what}: bytes {offset}..{end} are outside a buffer of {size} bytes")]
    OutOfBounds {
        /// What was being done.
        what: String,
        /// First byte.
        offset: u64,
        /// One past the last byte.
        end: u64,
        /// The buffer's size.
        size: u64,
    },
    /// A buffer was passed to a device that did not allocate it.
    #[error("buffer belongs to device `{owner}`, not to `{device}`")]
    WrongDevice {
        /// The device that allocated the buffer.
        owner: String,
        /// The device it was passed to.
        device: String,
    },
    /// A binary program could not be decoded.
    #[error("decode error at byte {offset}: {msg}")]
    Decode {
        /// Byte offset in the input.
        offset: usize,
        /// What was wrong.
        msg: String,
    },
    /// A text program could not be assembled.
    #[error("line {line}: {msg}")]
    Asm {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        msg: String,
    },
    /// A [`ProgramBuilder`](crate::isa::emit::ProgramBuilder) was given
    /// something the program cannot hold (a code generator bug).
    #[error("program `{program}` could not be built: {msg}")]
    Build {
        /// The program's name.
        program: String,
        /// What was wrong.
        msg: String,
    },
    /// The verifier rejected a program before it ran.
    #[error("program `{program}` rejected{}: {msg}", pc.map(|p| format!(" at pc {p}")).unwrap_or_default())]
    Verify {
        /// The program's name.
        program: String,
        /// The offending instruction, if one.
        pc: Option<usize>,
        /// What was wrong.
        msg: String,
    },
    /// A running program faulted.
    #[error("fault on core {core} in program `{program}` at pc {pc}: {msg}")]
    Fault {
        /// The core (`AIV_3`, `AIC_0`).
        core: String,
        /// The program's name.
        program: String,
        /// The faulting instruction.
        pc: usize,
        /// What went wrong.
        msg: String,
    },
    /// A gather (`ldg`) read an index outside its axis: the data's fault,
    /// not the program's.
    #[error(
        "gather index {index} is out of range for an axis of length {len} \
         (core {core}, program `{program}`, pc {pc})"
    )]
    IndexOutOfRange {
        /// The core.
        core: String,
        /// The program's name.
        program: String,
        /// The `ldg` instruction.
        pc: usize,
        /// The index read.
        index: i64,
        /// The axis length.
        len: i64,
    },
    /// A device configuration is invalid or could not be read.
    #[error("device config: {0}")]
    Config(String),
    /// A launch ran past its timeout, or its caller cancelled it; the
    /// device stays usable.
    #[error("launch `{program}` {why} with {done} of {total} tasks done")]
    Stopped {
        /// The launch's name.
        program: String,
        /// `ran past its 2s timeout` or `was cancelled`.
        why: String,
        /// Tasks finished before it stopped.
        done: usize,
        /// Tasks in the launch.
        total: usize,
    },
    /// Arguments given to a launch do not match the program.
    #[error("bad launch arguments for `{program}`: {msg}")]
    BadArguments {
        /// The program's name.
        program: String,
        /// What was wrong.
        msg: String,
    },
}

/// Shorthand for this crate's results.
pub type Result<T, E = DeviceError> = std::result::Result<T, E>;

/// `; largest live chunks: a, b` (empty when none).
fn live_list(chunks: &[String]) -> String {
    match chunks {
        [] => String::new(),
        _ => format!("; largest live chunks: {}", chunks.join(", ")),
    }
}
