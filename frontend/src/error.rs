//! `Error`, the one error type of tilejit's public API. Every variant maps
//! to an [`ErrorKind`] with a stable numeric [`Error::code`].

use std::fmt;
use std::panic::Location;
use tilejit_ir::{ErrorKind, IrError};
use tilejit_runtime::{ClassProblem, RuntimeError};

/// `std::result::Result` with tilejit's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A source location in the user's code (from `#[track_caller]`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Loc {
    /// File path as the compiler saw it.
    pub file: &'static str,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

impl Loc {
    /// The location of the caller of the current `#[track_caller]` function.
    #[track_caller]
    pub fn caller() -> Loc {
        let l = Location::caller();
        Loc {
            file: l.file(),
            line: l.line(),
            column: l.column(),
        }
    }
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// An error from any part of tilejit.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// An op rejected its operands: wrong shapes, dtypes, axis, ...
    Op {
        /// The op as the user called it (`add`, `matmul`, `from_vec`).
        op: &'static str,
        /// What is wrong.
        source: IrError,
        /// Where the user called it.
        location: Loc,
    },
    /// Running a jit function's compiled program failed (an index out of
    /// range in the data, a device fault, a cancelled call, ...).
    Run {
        /// The jit function.
        function: String,
        /// Where the user called it.
        location: Loc,
        /// What failed.
        source: RuntimeError,
    },
    /// The values of a traced tensor were read inside a jit body; they do not
    /// exist until the compiled program runs.
    TracedValue {
        /// The reading method.
        op: &'static str,
        /// Where.
        location: Loc,
    },
    /// A traced tensor was used outside the trace that made it (it escaped
    /// its jit body, or crossed to another thread).
    ForeignTrace {
        /// The op that received it.
        op: &'static str,
        /// Where.
        location: Loc,
    },
    /// A jit function was called with arguments that do not fit its
    /// parameters.
    Arguments {
        /// The jit function.
        function: String,
        /// What is wrong.
        message: String,
    },
    /// An error raised while tracing a jit function's body.
    Trace {
        /// The jit function.
        function: String,
        /// The signature being traced.
        signature: String,
        /// The first error the body raised.
        source: Box<Error>,
    },
    /// The jit body panicked while being traced.
    Panic {
        /// The jit function.
        function: String,
        /// The signature being traced.
        signature: String,
        /// The panic message.
        message: String,
    },
    /// A frozen jit function ([`JitFunction::freeze`](crate::JitFunction::freeze))
    /// was called with a signature it has no program for.
    Frozen {
        /// The jit function.
        function: String,
        /// The call's signature.
        signature: String,
        /// How it differs from the nearest signature seen (or that none
        /// was).
        nearest: String,
    },
    /// Compiling or running a program failed.
    Runtime(RuntimeError),
    /// A file could not be read or written, or does not hold what it
    /// should (`tilejit::io`).
    File {
        /// The file.
        path: std::path::PathBuf,
        /// What was wrong.
        message: String,
    },
    /// A registry name that is taken, missing or empty, or a typed handle
    /// that does not fit its function ([`crate::registry`]).
    Registry {
        /// The name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The tensors of one call or op live on different devices.
    Devices {
        /// The op or jit function.
        op: String,
        /// Where the user called it.
        location: Loc,
        /// Each tensor argument (its name) and its device, as the
        /// device displays itself (`host`, `sim`, or the remote's).
        arguments: Vec<(String, String)>,
    },
    /// A placed call's kernel cannot run where the placement requires
    /// ([`crate::with_placement`]).
    Placement {
        /// The jit function.
        function: String,
        /// Where the user called it.
        location: Loc,
        /// The kernel.
        kernel: String,
        /// The device it could not run on, as it displays itself.
        device: String,
        /// Why.
        reason: String,
    },
    /// A remote device's server refused or failed a request, or could not
    /// be reached (`tilejit::remote`; the `remote` feature).
    #[cfg(feature = "remote")]
    Remote {
        /// The server's address.
        server: String,
        /// What was asked (`connect`, `to(remote(..))`, `mlp(f32[8])`,
        /// `call `nn.softmax``).
        op: String,
        /// Where the user asked it (`None` for a server's own failure).
        location: Option<Loc>,
        /// The category: the server's for an error it raised (a shape
        /// error there is a shape error here), a device error for a lost
        /// connection.
        kind: ErrorKind,
        /// What went wrong, as the server said it.
        message: String,
    },
    /// An ONNX model that cannot be loaded or run (`tilejit::onnx`; the
    /// `onnx` feature): a damaged file, an unsupported op, attribute or
    /// dtype (found at load, before anything runs), a wrong input.
    #[cfg(feature = "onnx")]
    Onnx {
        /// The node's name (or its index, `#12`), empty for the model
        /// itself (file, inputs, outputs).
        node: String,
        /// The node's op type, empty for the model itself.
        op: String,
        /// The attribute or input at fault, empty if none.
        attribute: String,
        /// The category (`Unsupported` for what tilejit cannot run).
        kind: ErrorKind,
        /// What is wrong.
        message: String,
    },
    /// `RunMode::Verify`: Host and Sim results differ past tolerance.
    Verify {
        /// The jit function.
        function: String,
        /// Which output, which element, the errors.
        message: String,
    },
}

impl Error {
    /// The category.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Op { source, .. } => source.kind(),
            Error::TracedValue { .. }
            | Error::ForeignTrace { .. }
            | Error::Arguments { .. }
            | Error::Frozen { .. }
            | Error::Devices { .. }
            | Error::Registry { .. }
            | Error::File { .. } => ErrorKind::BadArgument,
            Error::Trace { source, .. } => source.kind(),
            Error::Panic { .. } => ErrorKind::Panic,
            Error::Runtime(e) | Error::Run { source: e, .. } => e.kind(),
            Error::Verify { .. } => ErrorKind::Device,
            Error::Placement { .. } => ErrorKind::Unsupported,
            #[cfg(feature = "remote")]
            Error::Remote { kind, .. } => *kind,
            #[cfg(feature = "onnx")]
            Error::Onnx { kind, .. } => *kind,
        }
    }

    /// The stable numeric code of the category: 1 bad argument, 2 shape,
    /// 3 dtype, 4 unsupported, 5 device, 6 internal, 7 panic in user code,
    /// 8 cancelled (a cancel token or a deadline stopped the call).
    pub fn code(&self) -> u32 {
        self.kind().code()
    }

    /// The innermost error (through `Trace` wrappers).
    pub fn root(&self) -> &Error {
        match self {
            Error::Trace { source, .. } => source.root(),
            e => e,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self.kind();
        match self {
            Error::Op { op, source, location } => write!(f, "{kind} in `{op}` at {location}: {source}"),
            Error::TracedValue { op, location } => write!(
                f,
                "{kind}: `{op}` at {location} reads the values of a traced tensor inside a jit function; \
                 values exist only after the compiled function returns (return the tensor instead, or \
                 compute the value outside the jit function)"
            ),
            Error::ForeignTrace { op, location } => write!(
                f,
                "{kind}: `{op}` at {location} got a traced tensor from another trace (a tensor that escaped \
                 its jit function, or was moved to another thread while tracing)"
            ),
            Error::Arguments { function, message } => write!(f, "{kind}: calling `{function}`: {message}"),
            Error::Trace { function, signature, source } => {
                write!(f, "{source}\n  while tracing `{function}` for signature {signature}")
            }
            Error::Panic { function, signature, message } => {
                write!(f, "{kind}: `{function}` panicked while tracing for signature {signature}: {message}")
            }
            Error::Frozen { function, signature, nearest } => {
                write!(f, "{kind}: `{function}` is frozen and has no program for signature {signature} ({nearest})")
            }
            Error::Runtime(e) => write!(f, "{kind}: {e}"),
            Error::Run { function, location, source } => {
                write!(f, "{kind}: {source}\n  while running `{function}` called at {location}")
            }
            Error::File { path, message } => write!(f, "{kind}: {}: {message}", path.display()),
            Error::Registry { name, message } => write!(f, "{kind}: registry name `{name}`: {message}"),
            Error::Placement { function, location, kernel, device, reason } => write!(
                f,
                "{kind}: `{function}` at {location}: kernel `{kernel}` cannot run on {device}: {reason}"
            ),
            Error::Devices { op, location, arguments } => {
                let each: Vec<String> =
                    arguments.iter().map(|(name, d)| format!("{name} on {d}")).collect();
                write!(
                    f,
                    "{kind}: `{op}` at {location} got tensors on different devices: {}; \
                     move them to one with `Tensor::to`",
                    each.join(", ")
                )
            }
            Error::Verify { function, message } => {
                write!(f, "{kind}: `{function}` in verify mode: host and sim differ: {message}")
            }
            #[cfg(feature = "onnx")]
            Error::Onnx { node, op, attribute, message, .. } => {
                write!(f, "{kind}: ONNX")?;
                if !node.is_empty() {
                    write!(f, " node `{node}` ({op})")?;
                }
                if !attribute.is_empty() {
                    write!(f, ", `{attribute}`")?;
                }
                write!(f, ": {message}")
            }
            #[cfg(feature = "remote")]
            Error::Remote { server, op, location, message, .. } => match location {
                Some(at) => write!(f, "{kind}: `{op}` at {at} on the server at {server}: {message}"),
                None => write!(f, "{kind}: `{op}` on the server at {server}: {message}"),
            },
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Op { source, .. } => Some(source),
            Error::Trace { source, .. } => Some(source.as_ref()),
            Error::Runtime(e) | Error::Run { source: e, .. } => Some(e),
            _ => None,
        }
    }
}

impl From<RuntimeError> for Error {
    fn from(e: RuntimeError) -> Error {
        Error::Runtime(e)
    }
}

/// Why a dynamic function traces a shape class per size instead of once
/// for all its sizes
/// ([`JitFunction::shape_classes`](crate::JitFunction::shape_classes)).
#[derive(Clone, Debug, PartialEq)]
pub enum PerSize {
    /// The class has no size symbols (every dim is 0 or 1).
    NoSymbols,
    /// The body reads every size (`shape()`, `numel()`, ..), so every
    /// symbol is pinned.
    ReadsEverySize,
    /// The body read sizes on a thread that does not trace it, where the
    /// watch cannot see which.
    OffThreadRead,
    /// The reads of the two stand-in traces cannot be followed.
    Read {
        /// What the reading met.
        problem: ClassProblem,
        /// The body's first size read, as the log names it.
        first_read: String,
    },
    /// Tracing at stand-in sizes failed (the exact trace did not).
    Standin(Box<Error>),
    /// The two stand-in traces cannot be read as one graph.
    Class(ClassProblem),
    /// More values of the sizes the body reads than a class keeps graphs
    /// for.
    Pinnings {
        /// The most graphs a class keeps.
        most: usize,
    },
}

impl fmt::Display for PerSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PerSize::NoSymbols => f.write_str("no size symbols"),
            PerSize::ReadsEverySize => f.write_str("the body reads every size"),
            PerSize::OffThreadRead => f.write_str("the body read sizes on another thread"),
            PerSize::Read {
                problem,
                first_read,
            } => write!(f, "{problem}; {first_read}"),
            PerSize::Standin(e) => write!(f, "at stand-in sizes: {e}"),
            PerSize::Class(problem) => problem.fmt(f),
            PerSize::Pinnings { most } => {
                write!(f, "more than {most} values of the sizes the body reads")
            }
        }
    }
}

impl std::error::Error for PerSize {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PerSize::Read { problem, .. } | PerSize::Class(problem) => Some(problem),
            PerSize::Standin(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

impl From<ClassProblem> for PerSize {
    fn from(problem: ClassProblem) -> PerSize {
        PerSize::Class(problem)
    }
}
