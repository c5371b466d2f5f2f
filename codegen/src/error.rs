//! `CodegenError`, the one error enum of this crate.

use thiserror::Error;

/// What can go wrong turning a kernel into code.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum CodegenError {
    /// The kernel uses something this backend does not implement.
    #[error("kernel `{kernel}`: {what} is not supported by the host backend")]
    Unsupported {
        /// The kernel's name.
        kernel: String,
        /// What is missing.
        what: String,
    },
    /// Cranelift rejected the generated function (a tilejit bug).
    #[error("kernel `{kernel}`: cranelift: {message}")]
    Cranelift {
        /// The kernel's name.
        kernel: String,
        /// Cranelift's message.
        message: String,
    },
    /// The CPU lacks a feature the generated code needs.
    #[error("this CPU lacks {0}, which the host backend needs")]
    Cpu(&'static str),
    /// A launch passed arguments that do not fit the compiled kernel.
    #[error("kernel `{kernel}`: bad launch: {message}")]
    Launch {
        /// The kernel's name.
        kernel: String,
        /// What did not fit.
        message: String,
    },
}
