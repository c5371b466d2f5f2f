//! Tensors to and from files: NumPy's `.npy` (one array) and, with the
//! `io` feature (on by default), safetensors (named weights, through the
//! format's own crate).
//!
//! Every failure is an [`Error::File`] naming the file and what was
//! wrong: a missing or unreadable file, a malformed or truncated one, a
//! dtype tilejit does not have. Writes go to a temporary file beside the
//! target and are renamed over it, so a reader never sees half a file.
//!
//! ```
//! # #[cfg(feature = "io")] {
//! use tilejit::prelude::*;
//! use tilejit::io;
//!
//! let dir = std::env::temp_dir().join(format!("tilejit-io-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let w = Tensor::arange(6, DType::F32).reshape(&[2, 3]);
//! io::save_safetensors(dir.join("model.safetensors"), &[("w", &w)])?;
//! let weights = io::load_safetensors(dir.join("model.safetensors"))?;
//! assert_eq!(weights["w"].to_vec::<f32>()?, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
//! io::write_npy(dir.join("w.npy"), &w)?;
//! assert_eq!(io::read_npy(dir.join("w.npy"))?.shape(), [2, 3]);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # }
//! # Ok::<(), tilejit::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::path::Path;
use tilejit_ir::{Array, Buffer, DType, Shape};
use tilejit_runtime::device::npy::{self, NpyArray};

#[cfg(feature = "io")]
mod weights;
#[cfg(feature = "io")]
pub use weights::{load_safetensors, save_safetensors};

fn file_error(path: &Path, message: impl Into<String>) -> Error {
    Error::File {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    tilejit_ir::fallible::read_file(path).map_err(|e| file_error(path, e.to_string()))
}

/// Writes `bytes` whole or not at all: a temporary file in the same
/// directory, synced, then renamed over `path`.
fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let name = path
        .file_name()
        .ok_or_else(|| file_error(path, "names no file"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    // Unique per process and write, so concurrent writers never share one.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tmp_name.push(format!(".{}.{n}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        file_error(path, e.to_string())
    })
}

/// A tensor from its dtype, dims and little-endian bytes.
fn tensor_from_bytes(
    dtype: DType,
    dims: &[usize],
    bytes: &[u8],
) -> std::result::Result<Tensor, String> {
    let shape = Shape::new(dims).map_err(|e| e.to_string())?;
    let buffer = Buffer::from_le_bytes(dtype, bytes).map_err(|e| e.to_string())?;
    let array = Array::new(shape, buffer).map_err(|e| e.to_string())?;
    Ok(Tensor::concrete(array))
}

/// Reads a `.npy` file (format 1-3, C order, little endian; f32, f64, f16,
/// i32, i64, bool, u8 (`|u1`), i8 (`|i1`), i16 (`<i2`), u32 (`<u4`), u64
/// (`<u8`)). NumPy has no bf16, so tilejit writes bf16 as its raw bits
/// under descr `<u2` and reads `<u2` back as bf16: a NumPy uint16 array
/// (and a u16 tensor tilejit wrote) loads as bf16 bits.
#[track_caller]
pub fn read_npy(path: impl AsRef<Path>) -> Result<Tensor> {
    let path = path.as_ref();
    let a = npy::read(&read_file(path)?).map_err(|e| file_error(path, e))?;
    let dims: Vec<usize> = a
        .shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| file_error(path, "a dimension does not fit this machine"))?;
    tensor_from_bytes(a.dtype, &dims, &a.data).map_err(|e| file_error(path, e))
}

/// Writes a tensor as a `.npy` file (bf16, which NumPy lacks, as its raw
/// bits with descr `<u2`).
#[track_caller]
pub fn write_npy(path: impl AsRef<Path>, tensor: &Tensor) -> Result<()> {
    let path = path.as_ref();
    let array = tensor.to_array()?;
    let data = array
        .buffer()
        .to_le_bytes()
        .map_err(|e| file_error(path, e.to_string()))?;
    let a = NpyArray {
        dtype: array.dtype(),
        shape: array.shape().dims().iter().map(|&d| d as u64).collect(),
        data,
    };
    write_file(path, &npy::write(&a))
}
