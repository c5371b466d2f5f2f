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
            // As `IrError::OutOfMemory`: the host's memory, not a bug.
            RuntimeError::Codegen(tilejit_codegen::CodegenError::OutOfMemory { .. }) => {
                ErrorKind::Device
            }
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

/// Why a shape class's two stand-in traces cannot be read as one graph
/// (the class is then traced per size), or why a class's graph does not
/// serve some sizes (they are traced exactly): see `ShapeClass` and
/// `GenericGraph`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ClassProblem {
    /// More size symbols than stand-in sizes exist for.
    #[error("{symbols} size symbols (at most {most})")]
    TooManySymbols {
        /// The class's symbols.
        symbols: usize,
        /// The most a class may have.
        most: usize,
    },
    /// A pin list of another length than the class's symbols.
    #[error("{pins} pins for {symbols} symbols")]
    Pins {
        /// The pins given.
        pins: usize,
        /// The class's symbols.
        symbols: usize,
    },
    /// A size the body read is computed from sizes in a way the reading
    /// cannot follow.
    #[error("the body reads a size computed from sizes ({at_a} at stand-ins A, {at_b} at B)")]
    ComputedRead {
        /// The value read at stand-ins A.
        at_a: usize,
        /// The value read at stand-ins B.
        at_b: usize,
    },
    /// The body reads sizes a different number of times at A and B.
    #[error("the body reads sizes a different number of times at other sizes")]
    ReadCount,
    /// The two traces have different numbers of nodes, outputs or params.
    #[error("the body builds {at_a} nodes at stand-in sizes A and {at_b} at B")]
    NodeCount {
        /// Nodes at stand-ins A.
        at_a: usize,
        /// Nodes at stand-ins B.
        at_b: usize,
    },
    /// One node differs between the two traces other than by sizes the
    /// reading follows.
    #[error("node {node} (`{op}`): {difference} between stand-in sizes")]
    NodeDiffers {
        /// The node's index.
        node: usize,
        /// Its op, as the IR text names it.
        op: &'static str,
        /// How it differs.
        difference: NodeDifference,
    },
    /// Sizes whose pinned symbols have other values than the graph's.
    #[error("sizes {sizes:?} do not fit the pinned sizes {pinned:?}")]
    Unfit {
        /// The sizes asked for.
        sizes: Vec<usize>,
        /// The graph's pinned symbols.
        pinned: Vec<Option<usize>>,
    },
    /// A node's size overflows at these sizes.
    #[error("node {node}: a size overflows at sizes {sizes:?}")]
    SizeOverflow {
        /// The node's index.
        node: usize,
        /// The sizes asked for.
        sizes: Vec<usize>,
    },
    /// A value computed from sizes overflows at these sizes.
    #[error("a size value overflows at sizes {sizes:?}")]
    ValueOverflow {
        /// The sizes asked for.
        sizes: Vec<usize>,
    },
    /// A size value past `i64`.
    #[error("size value {value} overflows")]
    ValueTooBig {
        /// The value.
        value: usize,
    },
    /// A size value its literal's dtype cannot hold (an exact trace's
    /// scalar would fail the same way).
    #[error("size value {value} does not fit {dtype}")]
    ValueDtype {
        /// The value.
        value: i64,
        /// The literal's dtype.
        dtype: tilejit_ir::DType,
    },
    /// A conv or pool window size past `u32`.
    #[error("window size {value} overflows")]
    WindowOverflow {
        /// The size.
        value: usize,
    },
    /// A conv or pool window given other than its 4 or 11 sizes.
    #[error("a conv or pool window has 4 or 11 sizes")]
    ConvWindow,
    /// The traced graph lacks a constant a node names.
    #[error("constant {index} missing")]
    MissingConstant {
        /// The constant's index.
        index: u32,
    },
    /// A node rebuilt at these sizes does not type-check.
    #[error("node {node}: {source}")]
    Node {
        /// The node's index.
        node: usize,
        /// What the graph refused.
        source: IrError,
    },
    /// A shape or signature at these sizes is invalid.
    #[error(transparent)]
    Ir(#[from] IrError),
}

/// How a node differs between a class's two stand-in traces
/// ([`ClassProblem::NodeDiffers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeDifference {
    /// Another op, or the same op with other non-size attributes.
    #[error("the op differs")]
    Op,
    /// One of its sizes is computed from sizes in a way the reading
    /// cannot follow.
    #[error("a size is computed from sizes in a way it cannot follow")]
    Size,
    /// A `full`'s value is computed from sizes in a way the reading
    /// cannot follow.
    #[error("a value is computed from sizes in a way it cannot follow")]
    Value,
    /// A constant tensor's contents or shape depend on a size.
    #[error("a constant tensor is made from a size")]
    Constant,
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
