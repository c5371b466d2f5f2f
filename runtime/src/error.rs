//! `RuntimeError`, the one error enum of the runtime crate.

use tilejit_ir::{ErrorKind, IrError};

/// Errors from compiling or running programs.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    /// The IR layer rejected something (bad arguments to a program, a
    /// verifier failure after a pass, out of memory).
    #[error(transparent)]
    Ir(#[from] IrError),
    /// Code generation or a native launch failed.
    #[error(transparent)]
    Codegen(#[from] tilejit_codegen::CodegenError),
    /// The simulated device failed (a fault, a bad launch, out of GM).
    #[error(transparent)]
    Device(tilejit_device::DeviceError),
    /// A call waited [`crate::TRACE_WAIT`] for another thread's trace of its
    /// signature, which is still running the jit body: most likely the
    /// body is waiting for this call (a deadlock).
    #[error(
        "waited {waited:?} for another thread's trace of this function for signature {signature}, \
         which is still running the body; a jit body that waits for a thread calling the same \
         function with the same signature deadlocks (call it once before, or trace on one thread)"
    )]
    TraceWait {
        /// The signature being traced.
        signature: String,
        /// How long the call waited.
        waited: std::time::Duration,
    },
    /// A run was stopped by a cancel token or a deadline
    /// ([`crate::cancel`]).
    #[error("{what} {why}")]
    Stopped {
        /// What was running.
        what: String,
        /// `was cancelled` or `ran past its deadline (2s)`.
        why: String,
    },
    /// A snapshot file could not be written, read or used
    /// (`JitFunction::save`, `load`; nothing was linked from it).
    #[error("snapshot {path}: {problem}")]
    Snapshot {
        /// The file.
        path: String,
        /// What was wrong.
        problem: SnapshotProblem,
    },
    /// A compile step panicked; the cache entry was released, not poisoned.
    #[error("{what} panicked: {message}")]
    Panicked {
        /// What was running.
        what: String,
        /// The panic payload, if it was a string.
        message: String,
    },
}

impl RuntimeError {
    /// The error's category.
    pub fn kind(&self) -> ErrorKind {
        match self {
            RuntimeError::Ir(e) => e.kind(),
            RuntimeError::Panicked { .. } => ErrorKind::Internal,
            RuntimeError::Snapshot { .. } => ErrorKind::BadArgument,
            RuntimeError::TraceWait { .. } => ErrorKind::BadArgument,
            RuntimeError::Stopped { .. } => ErrorKind::Cancelled,
            RuntimeError::Device(tilejit_device::DeviceError::Stopped { .. }) => {
                ErrorKind::Cancelled
            }
            RuntimeError::Codegen(tilejit_codegen::CodegenError::Unsupported { .. }) => {
                ErrorKind::Unsupported
            }
            RuntimeError::Codegen(tilejit_codegen::CodegenError::SimUnsupported { .. }) => {
                ErrorKind::Unsupported
            }
            RuntimeError::Codegen(tilejit_codegen::CodegenError::Cpu(_)) => ErrorKind::Device,
            RuntimeError::Device(_) => ErrorKind::Device,
            RuntimeError::Codegen(_) => ErrorKind::Internal,
        }
    }
}

/// What was wrong with a snapshot file ([`RuntimeError::Snapshot`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotProblem {
    /// The file system refused (no such file, a directory, no permission).
    #[error("cannot {action} it: {message}")]
    Io {
        /// `read` or `write`.
        action: &'static str,
        /// The system's message.
        message: String,
    },
    /// The file is not a tilejit snapshot (empty, or another format).
    #[error("not a tilejit snapshot ({0})")]
    Foreign(String),
    /// A snapshot of a format this build does not read.
    #[error("snapshot format version {found}; this build reads version {expected}")]
    Version {
        /// The file's.
        found: u32,
        /// This build's.
        expected: u32,
    },
    /// A snapshot whose bytes are damaged: truncated, a checksum
    /// mismatch, or contents that do not parse.
    #[error("corrupt: {0}")]
    Corrupt(String),
    /// A signature in the snapshot does not fit the loading function's
    /// parameters (another function of the same name).
    #[error("signature {signature} does not fit the parameters of `{function}`")]
    Parameters {
        /// The jit function loading it.
        function: String,
        /// The signature.
        signature: String,
    },
    /// A whole snapshot of another jit function.
    #[error("holds the programs of {saved}, not of {loading}")]
    OtherFunction {
        /// The function it was saved from: module path and name, body
        /// digest (`` `m::f` (body 0123..) ``).
        saved: String,
        /// The function loading it, the same way.
        loading: String,
    },
}

/// Text of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

impl From<tilejit_device::DeviceError> for RuntimeError {
    /// A gather index out of range is the data's fault, the same
    /// `IrError::IndexOutOfRange` (E1) the host reports; every other
    /// device error stays one.
    fn from(e: tilejit_device::DeviceError) -> RuntimeError {
        match e {
            tilejit_device::DeviceError::IndexOutOfRange { index, len, .. } => {
                RuntimeError::Ir(IrError::IndexOutOfRange {
                    op: "gather",
                    index: Some(index),
                    len: len.max(0) as usize,
                })
            }
            e => RuntimeError::Device(e),
        }
    }
}
