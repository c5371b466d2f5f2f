//! Allocations sized by user input (shapes, lengths), made fallible: a size
//! the system cannot provide is [`IrError::OutOfMemory`] naming the bytes,
//! never the process abort of `vec!` or `collect`.

use crate::error::IrError;

/// The error for `n` elements of `T` that could not be allocated.
pub fn oom<T>(n: usize) -> IrError {
    IrError::OutOfMemory {
        bytes: n.saturating_mul(std::mem::size_of::<T>()),
    }
}

/// An empty vector with room for exactly `n` elements.
pub fn with_capacity<T>(n: usize) -> Result<Vec<T>, IrError> {
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| oom::<T>(n))?;
    Ok(out)
}

/// `n` copies of `v`.
pub fn filled<T: Clone>(n: usize, v: T) -> Result<Vec<T>, IrError> {
    let mut out = with_capacity(n)?;
    out.resize(n, v);
    Ok(out)
}

/// The items of `it`, reserved at once from its exact length.
pub fn collect<T>(it: impl ExactSizeIterator<Item = T>) -> Result<Vec<T>, IrError> {
    let mut out = with_capacity(it.len())?;
    out.extend(it);
    Ok(out)
}
