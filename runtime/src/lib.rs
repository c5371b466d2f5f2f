//! `tilejit-runtime`: compiled programs and the caches that hold them.
//!
//! - [`Program`]: a traced graph, verified and optimised, ready to run.
//! - [`HandlerCache`]: a jit function's signature -> program cache with
//!   single-flight builds and miss explanation.
//! - [`Signature`]: the key.

mod error;
mod handler_cache;
mod program;
mod signature;

pub use error::{panic_message, RuntimeError};
pub use handler_cache::{CacheEntry, HandlerCache, HandlerStats};
pub use program::Program;
pub use signature::{ArgSig, Signature};
pub use tilejit_device::Target;
