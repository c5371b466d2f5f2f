//! `IrError`, the one error enum of this crate, and `ErrorKind`, the stable
//! numeric categories that every tilejit error maps onto.

use crate::dtype::DType;
use crate::shape::{Shape, TensorType};
use std::fmt;

/// The category of an error, with a stable numeric code (in the spirit of
/// Icraft XRT's error codes). Codes never change meaning between releases.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A value the caller passed is invalid (length, axis, argument count...).
    BadArgument,
    /// Shapes do not fit the operation.
    Shape,
    /// Dtypes do not fit the operation.
    DType,
    /// The operation is valid but not supported (yet) in this configuration.
    Unsupported,
    /// A device (host memory, simulated accelerator) failed.
    Device,
    /// A bug in tilejit: please report it.
    Internal,
    /// The user's own code panicked (a jit body, a registered function).
    Panic,
    /// The call was cancelled or ran past its deadline.
    Cancelled,
}

impl ErrorKind {
    /// The stable numeric code.
    pub const fn code(self) -> u32 {
        match self {
            ErrorKind::BadArgument => 1,
            ErrorKind::Shape => 2,
            ErrorKind::DType => 3,
            ErrorKind::Unsupported => 4,
            ErrorKind::Device => 5,
            ErrorKind::Internal => 6,
            ErrorKind::Panic => 7,
            ErrorKind::Cancelled => 8,
        }
    }

    /// A short lowercase name ("shape error").
    pub const fn name(self) -> &'static str {
        match self {
            ErrorKind::BadArgument => "bad argument",
            ErrorKind::Shape => "shape error",
            ErrorKind::DType => "dtype error",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Device => "device error",
            ErrorKind::Internal => "internal error",
            ErrorKind::Panic => "panic in user code",
            ErrorKind::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [E{}]", self.name(), self.code())
    }
}

/// Everything that can go wrong in the IR layer: type inference of an op,
/// array construction, parsing the text form, verification.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum IrError {
    /// Two shapes do not broadcast together.
    #[error("shapes {lhs} and {rhs} do not broadcast (numpy rules: align at the right, each pair of dims equal or 1)")]
    Broadcast {
        /// Left operand shape.
        lhs: Shape,
        /// Right operand shape.
        rhs: Shape,
    },
    /// `broadcast_to` target incompatible with the source shape.
    #[error("cannot broadcast {from} to {to} (each source dim must equal the target's or be 1)")]
    BroadcastTo {
        /// Source shape.
        from: Shape,
        /// Requested target shape.
        to: Shape,
    },
    /// Operands of an op that needs equal shapes differ.
    #[error("{what}: shapes {lhs} and {rhs} differ")]
    ShapeMismatch {
        /// Which operands.
        what: &'static str,
        /// First shape.
        lhs: Shape,
        /// Second shape.
        rhs: Shape,
    },
    /// matmul operands do not fit.
    #[error("matmul of {lhs} and {rhs}: {reason}")]
    MatMul {
        /// Left operand type.
        lhs: TensorType,
        /// Right operand type.
        rhs: TensorType,
        /// What is wrong.
        reason: &'static str,
    },
    /// Axis outside `-rank..rank`.
    #[error("axis {axis} is out of range for rank {rank} (valid: {lo}..{rank})", lo = -(*rank as isize))]
    Axis {
        /// The axis as given.
        axis: isize,
        /// The tensor's rank.
        rank: usize,
    },
    /// The same axis given twice.
    #[error("axis {axis} given twice")]
    DuplicateAxis {
        /// The normalised axis.
        axis: usize,
    },
    /// Reshape to a different element count.
    #[error("cannot reshape {from} ({from_n} elements) to {to} ({to_n} elements)", from_n = from.numel(), to_n = to.numel())]
    Reshape {
        /// Source shape.
        from: Shape,
        /// Requested shape.
        to: Shape,
    },
    /// A slice window that leaves its operand, or concat operands that do
    /// not join.
    #[error("{op} of {shape}: {reason}")]
    Window {
        /// The op (`slice`, `cat`).
        op: &'static str,
        /// The (first) operand's shape.
        shape: Shape,
        /// What is wrong.
        reason: String,
    },
    /// A data-dependent index outside the axis it indexes.
    #[error("{op}: {} is out of range for an axis of length {len}", index_text(.index))]
    IndexOutOfRange {
        /// The op (`gather`, `index_select`).
        op: &'static str,
        /// The index found, where the backend reports it.
        index: Option<i64>,
        /// The axis length.
        len: usize,
    },
    /// A permutation that is not one.
    #[error("{perm:?} is not a permutation of 0..{rank}")]
    Permutation {
        /// The permutation given.
        perm: Vec<usize>,
        /// Rank of the operand.
        rank: usize,
    },
    /// Operands of different dtypes.
    #[error("mixed dtypes {lhs} and {rhs}; cast one side first, e.g. `.cast(DType::{upper})`", upper = format!("{lhs:?}"))]
    DTypeMismatch {
        /// Left dtype.
        lhs: DType,
        /// Right dtype.
        rhs: DType,
    },
    /// The op does not accept this dtype.
    #[error("{op} does not accept {dtype} operands; {hint}")]
    DTypeUnsupported {
        /// The op.
        op: &'static str,
        /// The offending dtype.
        dtype: DType,
        /// What to do instead.
        hint: &'static str,
    },
    /// A scalar that the tensor's dtype cannot hold exactly.
    #[error("scalar {value} is not exactly representable as {dtype}; cast the tensor to a float dtype first")]
    InexactScalar {
        /// The scalar as given.
        value: f64,
        /// The tensor's dtype.
        dtype: DType,
    },
    /// max/min over an axis of size zero (no identity element).
    #[error("{op} over axis {axis} of size 0 in {shape}: a zero-size reduction has no identity (sum gives 0, prod 1, mean NaN)")]
    EmptyReduction {
        /// The reduction.
        op: &'static str,
        /// Normalised axis.
        axis: usize,
        /// Operand shape.
        shape: Shape,
    },
    /// Byte size of a shape overflows the address space.
    #[error("a {dtype} tensor of shape {shape} would need more than isize::MAX bytes")]
    TooLarge {
        /// The shape.
        shape: Shape,
        /// The dtype.
        dtype: DType,
    },
    /// A traced graph past [`crate::graph::MAX_NODES`] nodes.
    #[error("the traced program passed {max} ops (does a loop unroll without end?)")]
    GraphTooLarge {
        /// The limit.
        max: usize,
    },
    /// Rank above [`crate::shape::MAX_RANK`].
    #[error("rank {rank} exceeds the maximum rank of {max}", max = crate::shape::MAX_RANK)]
    RankTooLarge {
        /// The rank asked for.
        rank: usize,
    },
    /// Data length does not match the shape.
    #[error("got {found} elements for shape {shape}, which holds {expected}")]
    Length {
        /// The shape.
        shape: Shape,
        /// Elements the shape holds.
        expected: usize,
        /// Elements given.
        found: usize,
    },
    /// Asked for the data as the wrong element type.
    #[error("tensor holds {actual} elements, asked for {asked}; use `.cast(DType::{upper})` first", upper = format!("{asked:?}"))]
    WrongElement {
        /// The tensor's dtype.
        actual: DType,
        /// The dtype asked for.
        asked: DType,
    },
    /// Host memory could not be allocated.
    #[error("out of host memory allocating {bytes} bytes")]
    OutOfMemory {
        /// Bytes requested.
        bytes: usize,
    },
    /// A graph's inputs or params were given with the wrong count or types.
    #[error("graph argument mismatch: {0}")]
    Arguments(String),
    /// The text form could not be parsed.
    #[error("line {line}: {message}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The verifier rejected a graph (a tilejit bug when it comes from a pass).
    #[error("verifier: {0}")]
    Verify(String),
    /// A backend (the host code, the simulated device) failed running an
    /// eager op; `kind` is the backend error's own category.
    #[error("{message}")]
    Backend {
        /// The backend error's category (a device fault is `Device`).
        kind: ErrorKind,
        /// Its message.
        message: String,
    },
}

/// `index 7`, or `an index` where the backend does not say which.
fn index_text(index: &Option<i64>) -> String {
    match index {
        Some(i) => format!("index {i}"),
        None => "an index".into(),
    }
}

impl IrError {
    /// The error's category.
    pub fn kind(&self) -> ErrorKind {
        use IrError::*;
        match self {
            Broadcast { .. } | BroadcastTo { .. } | ShapeMismatch { .. } | MatMul { .. } => {
                ErrorKind::Shape
            }
            Reshape { .. } | EmptyReduction { .. } | RankTooLarge { .. } | Window { .. } => {
                ErrorKind::Shape
            }
            Axis { .. }
            | DuplicateAxis { .. }
            | Permutation { .. }
            | Length { .. }
            | IndexOutOfRange { .. } => ErrorKind::BadArgument,
            TooLarge { .. } | Arguments(_) | Parse { .. } => ErrorKind::BadArgument,
            DTypeMismatch { .. }
            | DTypeUnsupported { .. }
            | InexactScalar { .. }
            | WrongElement { .. } => ErrorKind::DType,
            OutOfMemory { .. } => ErrorKind::Device,
            GraphTooLarge { .. } => ErrorKind::Unsupported,
            Verify(_) => ErrorKind::Internal,
            Backend { kind, .. } => *kind,
        }
    }
}
