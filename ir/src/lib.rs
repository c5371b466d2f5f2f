//! `tilejit-ir`: the data every other tilejit crate speaks.
//!
//! - [`config`]: the IR's `TILEJIT_*` setting, and the parsers every crate's settings share.
//! - [`dtype`], [`shape`]: element types, shapes (rank <= 8), broadcasting.
//! - [`array`](mod@array): concrete host tensors (`Array`), used by the interpreter and
//!   as constants.
//! - [`pool`]: the caching allocator tensor storage returns to; [`fallible`]:
//!   allocations sized by user input, as errors instead of aborts.
//! - [`graph`]: the graph IR (plain enums, typed ids into an arena, always in
//!   topological order); [`infer`] types each op; [`verify`] checks a graph.
//! - [`passes`]: `simplify` = fold constants -> CSE -> DCE.
//! - [`text`]: the printable, parseable text form.
//! - [`kernel`]: the kernel IR, fusion (graph -> kernels), its text form.
//! - [`scalar`]: scalar semantics (NaN-propagating max, GELU, int division)
//!   shared with every executor that must match the interpreter.
//! - [`interp`]: the reference interpreter, the oracle for every backend.
//!
//! Entry points: build a [`Graph`] with [`Graph::add`], run it with
//! [`interp::run`], optimise it with [`passes::simplify`].

pub mod array;
pub mod bound;
pub mod config;
pub mod dtype;
pub mod error;
pub mod fallible;
pub mod graph;
pub mod infer;
pub mod interp;
pub mod kernel;
pub mod ops;
pub mod passes;
pub mod pool;
pub mod scalar;
pub mod shape;
pub mod text;
pub mod verify;

pub use array::{Array, Buffer, StorageRef};
pub use dtype::{DType, Element, Lit};
pub use error::{ErrorKind, IrError};
pub use graph::{
    Axes, BinaryOp, CmpOp, Graph, Node, NodeId, Op, Perm, ReduceOp, TapRun, UnaryOp, Window,
};
pub use shape::{Shape, TensorType, MAX_RANK};
