//! safetensors weights files (the `io` feature): named tensors through
//! the format's own crate, with the parent module's file errors and atomic writes.

use super::{file_error, read_file, tensor_from_bytes, write_file};
use crate::error::Result;
use crate::tensor::Tensor;
use safetensors::tensor::{Dtype as StDtype, TensorView};
use safetensors::SafeTensors;
use std::collections::BTreeMap;
use std::path::Path;
use tilejit_ir::DType;

fn from_st_dtype(d: StDtype) -> Option<DType> {
    Some(match d {
        StDtype::F32 => DType::F32,
        StDtype::F64 => DType::F64,
        StDtype::F16 => DType::F16,
        StDtype::BF16 => DType::BF16,
        StDtype::I32 => DType::I32,
        StDtype::I64 => DType::I64,
        StDtype::BOOL => DType::Bool,
        StDtype::U8 => DType::U8,
        StDtype::I8 => DType::I8,
        StDtype::I16 => DType::I16,
        StDtype::U16 => DType::U16,
        StDtype::U32 => DType::U32,
        StDtype::U64 => DType::U64,
        _ => return None,
    })
}

fn to_st_dtype(d: DType) -> StDtype {
    match d {
        DType::F32 => StDtype::F32,
        DType::F64 => StDtype::F64,
        DType::F16 => StDtype::F16,
        DType::BF16 => StDtype::BF16,
        DType::I32 => StDtype::I32,
        DType::I64 => StDtype::I64,
        DType::Bool => StDtype::BOOL,
        DType::U8 => StDtype::U8,
        DType::I8 => StDtype::I8,
        DType::I16 => StDtype::I16,
        DType::U16 => StDtype::U16,
        DType::U32 => StDtype::U32,
        DType::U64 => StDtype::U64,
    }
}

/// Loads every tensor of a safetensors file, by name. The file is read
/// whole and each tensor copied into its own storage. Needs the `io`
/// feature (on by default).
#[track_caller]
pub fn load_safetensors(path: impl AsRef<Path>) -> Result<BTreeMap<String, Tensor>> {
    let path = path.as_ref();
    let bytes = read_file(path)?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| file_error(path, e.to_string()))?;
    let mut out = BTreeMap::new();
    for (name, view) in file.tensors() {
        let dtype = from_st_dtype(view.dtype()).ok_or_else(|| {
            file_error(
                path,
                format!(
                    "tensor `{name}` has dtype {:?}, which tilejit does not have",
                    view.dtype()
                ),
            )
        })?;
        let t = tensor_from_bytes(dtype, view.shape(), view.data())
            .map_err(|e| file_error(path, format!("tensor `{name}`: {e}")))?;
        out.insert(name, t);
    }
    Ok(out)
}

/// Saves named tensors as a safetensors file. Names must be distinct.
/// Needs the `io` feature (on by default).
#[track_caller]
pub fn save_safetensors(path: impl AsRef<Path>, tensors: &[(&str, &Tensor)]) -> Result<()> {
    let path = path.as_ref();
    let mut data = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        if data
            .iter()
            .any(|(n, ..): &(&str, DType, Vec<usize>, Vec<u8>)| n == name)
        {
            return Err(file_error(
                path,
                format!("tensor name `{name}` given twice"),
            ));
        }
        let a = t.to_array()?;
        let bytes = a
            .buffer()
            .to_le_bytes()
            .map_err(|e| file_error(path, e.to_string()))?;
        data.push((*name, a.dtype(), a.shape().dims().to_vec(), bytes));
    }
    let views = data
        .iter()
        .map(|(n, d, dims, bytes)| {
            TensorView::new(to_st_dtype(*d), dims.clone(), bytes)
                .map(|v| (*n, v))
                .map_err(|e| file_error(path, format!("tensor `{n}`: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let bytes = safetensors::serialize(views, None).map_err(|e| file_error(path, e.to_string()))?;
    write_file(path, &bytes)
}
