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
//!   ranges and params).
//!
//! Invariant: the only `unsafe` in this crate is in `host/native.rs`, the one
//! module that enters native code (JIT kernels and `gemm`) or the OS
//! (`madvise` for fresh outputs).

pub mod device;
mod error;
pub mod host;

pub use error::CodegenError;
