//! `tilejit-runtime`: compiled programs and the caches that hold them.
//!
//! - [`Program`]: a traced graph, verified and optimised, ready to run.
//! - [`HandlerCache`]: a jit function's signature -> program cache with
//!   single-flight builds and miss explanation.
//! - [`Signature`]: the key; [`ShapeClass`]: a dynamic function's key,
//!   with [`GenericGraph`], a checked trace instantiated for many sizes.
//! - [`HostProgram`]: a program fused into kernels and compiled to native
//!   code; [`kernel_cache`]: the global cache of compiled kernels.
//! - [`SimProgram`]: the same kernels compiled to bytecode and launched as
//!   tile tasks on the simulated accelerator ([`sim_device`]).
//! - [`snapshot`]: a jit function's programs saved to one file and
//!   loaded back without tracing or compiling.
//! - [`config`]: the runtime's `TILEJIT_*` settings (dumps, profiles,
//!   the Sim policy, warm-up, the disk cache, its `TILEJIT_LOG` parts).

mod alloc;
pub mod cancel;
pub mod config;
mod dump;
mod error;
mod flight;
mod handler_cache;
pub mod hooks;
mod host;
mod kernel_cache;
mod persist;
pub mod pipeline;
mod placed;
mod program;
mod resident;
mod shape_class;
mod signature;
mod sim;
pub mod snapshot;
mod warmup;
mod weight_cache;

pub use alloc::{f32_buffer_from_fn, filled_buffer};
pub use error::{panic_message, ClassProblem, NodeDifference, RuntimeError, SnapshotProblem};
pub use flight::user_code_done;
pub use handler_cache::{
    CacheEntry, HandlerCache, HandlerStats, DEFAULT_MAX_SIGNATURES, TRACE_WAIT,
};
pub use host::HostProgram;
pub use kernel_cache::{
    kernel_cache, Cached, CachedKernel, CachedSimKernel, KernelCache, KernelCacheStats,
    KernelDetails, KernelEntry,
};
pub use program::{run_eager, run_eager_resident, run_eager_sim, Program};
pub use resident::{
    count_to_device, count_to_host, count_transfers, transfer_stats, DeviceArray, TransferStats,
};
pub use shape_class::{
    probes, ClassArg, ClassDim, GenericGraph, SeenDims, ShapeClass, Standin, Structure,
};
pub use signature::{ArgSig, Mark, Signature};
pub use sim::{
    collect_profiles, set_sim_policy, sim_device, sim_policy, write_trace, PendingRun, SimProgram,
    SimRun, Value, Workspace, WorkspaceBuffer,
};
pub use tilejit_codegen::host::{BlockMath, CodegenOptions, StreamStores};
pub use tilejit_codegen::CodegenError;
/// The device model (device API, simulated accelerator, ISA), re-exported
/// for tools such as the `tilejit` CLI.
pub use tilejit_device as device;
pub use tilejit_device::Target;
pub use warmup::warm_up;
pub use weight_cache::{weight_cache, WeightCache, WeightCacheStats};
