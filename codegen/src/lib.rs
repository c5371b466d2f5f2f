//! `tilejit-codegen`: kernel IR -> code.
//!
//! - [`host`]: Cranelift native code for the host CPU. [`host::compile`]
//!   turns one [`tilejit_ir::kernel::Kernel`] into a [`host::KernelCode`],
//!   a typed handle whose `call` is safe (it checks every argument against
//!   the kernel's layout before entering native code).
//!
//! - [`device`]: bytecode core functions for the simulated accelerator.
//!   [`device::compile`] turns a kernel into one AIV core function that
//!   serves every tile task of the kernel (tasks differ only in their
//!   ranges and params) and every shape of its structure and plan class
//!   (sizes and strides are scalar arguments too).
//!
//! - [`sys`]: the OS calls (zeroed, huge-page-backed allocation; the
//!   coarse clock).
//!
//! - [`config`]: its one setting, `TILEJIT_NO_FMA`.
//!
//! Invariant: the only `unsafe` in this crate is in `host/native.rs` and its
//! children (`sys` among them), the one module that enters native code (JIT
//! kernels and `gemm`) or the OS (`madvise` for fresh outputs).

pub mod config;
pub mod device;
mod error;
pub mod host;

pub use error::{CodegenError, ImageError};
pub use host::sys;

/// The Cranelift version this build generates host code with (part of
/// every host kernel's content key).
pub const CRANELIFT_VERSION: &str = cranelift_jit::VERSION;
