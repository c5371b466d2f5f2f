//! tilejit: a JIT kernel compiler and dispatcher for tensor programs.
//!
//! ```
//! use tilejit::prelude::*;
//!
//! #[jit]
//! fn scale_add(x: &Tensor, y: &Tensor, k: f32) -> Tensor {
//!     x * k + y
//! }
//!
//! # fn main() -> tilejit::Result<()> {
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
//! let y = Tensor::ones(&[3], DType::F32);
//! let z = scale_add(&x, &y, 2.0)?;            // traces, compiles, runs
//! assert_eq!(z.to_vec::<f32>()?, vec![3.0, 5.0, 7.0]);
//! let z = scale_add(&x, &y, 3.0)?;            // same signature: no retrace
//! assert_eq!(z.to_vec::<f32>()?, vec![4.0, 7.0, 10.0]);
//! assert_eq!(scale_add::jit().handlers().len(), 1);
//! # Ok(()) }
//! ```
//!
//! Modules: [`tensor`] (the `Tensor` type), `ops`/`operators` (its methods
//! and operators), [`jit`](mod@jit) (jit functions and their handler caches),
//! [`args`] (how values cross a jit boundary), [`nn`] (layers with torch's
//! weight layouts), [`error`], [`debug`] (every
//! intermediate value, where the first NaN came from, step-to).
//!
//! Layers, bottom up (a module uses only its own layer and lower ones,
//! with no cycle): `error`, `scalar`, `random`, `mode` → `trace` →
//! `tensor` → `args`, `debug`, `display`, `io` → `device` → `placement`,
//! `hooks` → `apply` → `ops`, `operators`, `conv`, `layout_ops`, `scan` →
//! `nn` → `jit` → `registry`; `remote` (remote devices' client and server) is
//! called from `tensor`, `device`, `apply`, `jit` and `registry`, and uses
//! `tensor`, `args`, `device` and `registry`.
//!
//! Inside a `#[jit]` body, `f32`/`f64` parameters are rank-0 `&Tensor`s (runtime
//! parameters: changing them never retraces) that adopt the dtype of the
//! tensors they meet; integer and bool parameters are plain static values.
//! Tensors captured from outside (by a `jit_fn!` closure, or made inside the
//! body with `Tensor::ones` etc.) become constants of the traced program.
//!
//! Weights are values ([`JitArgs`]), and a jit function called inside
//! another's body is inlined and composes with `?`: the body's value is
//! wrapped in `Ok`, so it is still written `-> Tensor`. An `Err` (or an
//! op's error in the nested body, with its line) fails the outer call.
//!
//! ```
//! use tilejit::prelude::*;
//!
//! #[derive(JitArgs)]
//! struct Block { w: Tensor, biases: Vec<Tensor> }
//!
//! #[jit]
//! fn dense(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor { x.matmul(w) + b }
//!
//! #[jit]
//! fn block(x: &Tensor, p: &Block) -> Tensor {
//!     let mut h = x.clone();
//!     for b in &p.biases {
//!         h = dense(&h, &p.w, b)?.relu();
//!     }
//!     h
//! }
//!
//! # fn main() -> tilejit::Result<()> {
//! let p = Block {
//!     w: Tensor::from_vec(vec![1.0f32, 0.0, 0.0, -1.0], &[2, 2])?,
//!     biases: vec![Tensor::ones(&[2], DType::F32), Tensor::zeros(&[2], DType::F32)],
//! };
//! let x = Tensor::from_vec(vec![2.0f32, -3.0], &[1, 2])?;
//! // [2, -3] -> [2, 3] + 1 = [3, 4] -> [3, -4] relu [3, 0]
//! assert_eq!(block(&x, &p)?.to_vec::<f32>()?, [3.0, 0.0]);
//! // A weight of the wrong shape: an error naming the nested op, not a panic.
//! let bad = Block { w: Tensor::ones(&[3, 3], DType::F32), ..p };
//! assert!(block(&x, &bad).unwrap_err().to_string().contains("matmul"));
//! # Ok(()) }
//! ```

mod apply;
pub mod args;
pub mod config;
mod conv;
pub mod debug;
pub mod device;
mod display;
mod einsum;
pub mod error;
pub mod hooks;
pub mod io;
pub mod jit;
mod layout_ops;
pub mod mode;
pub mod nn;
#[cfg(feature = "onnx")]
pub mod onnx;
mod operators;
mod ops;
pub mod placement;
mod random;
pub mod registry;
#[cfg(feature = "remote")]
pub mod remote;
mod scalar;
mod scan;
pub mod tensor;
mod trace;

pub use args::{ArgValue, JitArg, JitArgs, JitOutput};
pub use config::{config, Config};
pub use conv::{Conv2d, Pool2d};
pub use device::{count_transfers, transfer_stats, Device, MemoryReport, TransferStats};
pub use error::{Error, Loc, PerSize, Result};
pub use hooks::{with_hooks, Hooks, KernelEvent};
pub use jit::{HandlerInfo, JitFn, JitFunction, SnapshotLoad, WithMode};
pub use layout_ops::SliceStart;
pub use mode::{with_mode, OutputDiff, RunMode};
pub use placement::{with_placement, KernelPlacement, Placement, PlacementReport};
pub use scalar::Scalar;
pub use tensor::Tensor;
pub use tilejit_ir::{DType, Element, ErrorKind};
pub use tilejit_macros::{jit, jit_fn, JitArgs};
pub use tilejit_runtime::cancel::{with_cancel, with_deadline, CancelToken};
pub use tilejit_runtime::device::Profile;
pub use tilejit_runtime::{collect_profiles, write_trace};
pub use tilejit_runtime::{
    kernel_cache, weight_cache, HandlerStats, KernelCache, KernelCacheStats, KernelDetails,
    KernelEntry, Signature, WeightCache, WeightCacheStats,
};

pub use tilejit_ir::pool::{BufferPool, PoolStats};

/// The process-wide pool that recycles dead tensors' storage: `stats()`,
/// `empty()` (give every held buffer back to the system), `trim(bytes)`
/// and `set_capacity(bytes)` (`TILEJIT_POOL_BYTES`, 256 MiB by default).
///
/// ```
/// let before = tilejit::storage_pool().stats();
/// tilejit::storage_pool().empty();
/// assert_eq!(tilejit::storage_pool().stats().bytes, 0);
/// assert!(tilejit::storage_pool().stats().hits >= before.hits);
/// ```
pub fn storage_pool() -> &'static BufferPool {
    tilejit_ir::pool::pool()
}

/// The IR and runtime crates, for looking under the hood (tests, tools):
/// no part of the API, and may change in any release.
#[doc(hidden)]
pub mod internals {
    pub use tilejit_ir as ir;
    pub use tilejit_runtime as runtime;
}

/// What the `#[jit]`, `jit_fn!` and `#[derive(JitArgs)]` expansions name,
/// so they never depend on what the crate root exports: no part of the
/// API, and may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::args::{
        ArgKind, ArgValue, FromLeaves, FromTrace, JitArg, JitArgs, JitOutput, Leaves, Mark,
        Outputs, ParamSpec, StaticFloat, TraceValue,
    };
    pub use crate::error::{Error, Result};
    pub use crate::jit::{param, Body, JitFn, JitFunction, PackedBody};
    pub use crate::mode::RunMode;
    pub use crate::tensor::Tensor;
}

/// `use tilejit::prelude::*;` brings what a jit program needs.
pub mod prelude {
    pub use crate::{
        jit, jit_fn, with_mode, Conv2d, DType, Element, JitArgs, Pool2d, Result, RunMode, Scalar,
        Tensor,
    };
}

/// The README's examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The caching guide's examples, run as doctests too.
#[cfg(doctest)]
#[doc = include_str!("../../docs/caching.md")]
pub struct CachingDoctests;

/// The devices guide's examples (one starts a server: `remote` only).
#[cfg(all(doctest, feature = "remote"))]
#[doc = include_str!("../../docs/devices.md")]
pub struct DevicesDoctests;

/// The debugging guide's examples, run as doctests too.
#[cfg(doctest)]
#[doc = include_str!("../../docs/debugging.md")]
pub struct DebuggingDoctests;
