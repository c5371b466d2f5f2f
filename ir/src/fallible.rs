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

/// A regular file's bytes, its size reserved fallibly. Anything else (a
/// directory, a FIFO, a device such as `/dev/zero`) is refused before a
/// byte is read: such a file has no size to reserve, and may never end.
pub fn read_file(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        let what = match meta.is_dir() {
            true => "is a directory, not a regular file",
            false => "is not a regular file",
        };
        return Err(Error::new(ErrorKind::InvalidInput, what));
    }
    let len = usize::try_from(meta.len()).unwrap_or(usize::MAX);
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(len).map_err(|_| {
        Error::new(
            ErrorKind::OutOfMemory,
            format!("{len} bytes could not be allocated"),
        )
    })?;
    // `take` bounds a file that grows while it is read to its size then
    // plus one byte, which `read_to_end` may still need to see the end.
    file.take(meta.len().saturating_add(1))
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    /// A regular file reads whole; a directory and a device are refused.
    #[test]
    fn only_regular_files_are_read() {
        let dir = std::env::temp_dir().join(format!("tilejit-fallible-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("f");
        std::fs::write(&file, b"abc").expect("write");
        assert_eq!(super::read_file(&file).expect("read"), b"abc");
        let e = super::read_file(&dir).expect_err("a directory");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        if cfg!(target_os = "linux") {
            let e = super::read_file(std::path::Path::new("/dev/zero")).expect_err("a device");
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
