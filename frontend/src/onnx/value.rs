//! Values that are not plain tensors: ONNX sequences and optionals. A
//! sequence is a `Vec<Tensor>` whose length is known while tracing (so the
//! trace stays static); an optional holding a value is that value, and an
//! empty one is [`Value::None`]. `SequenceProto` and `OptionalProto` files
//! (the backend tests' `input_0.pb`) are read here with protobuf's wire
//! reader, since `onnx-protobuf` lacks those messages.

use super::model;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use onnx_protobuf::{Message, TensorProto};
use std::path::Path;

/// A graph value: a tensor, a sequence of tensors, or an empty optional
/// (an optional holding a value is that value).
#[derive(Clone, Debug)]
pub enum Value {
    /// A tensor (or an optional holding one).
    Tensor(Tensor),
    /// A sequence of tensors (or an optional holding one).
    Sequence(Vec<Tensor>),
    /// An empty optional.
    None,
}

impl Value {
    /// The tensor, if it is one.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The sequence's tensors, if it is one.
    pub fn as_sequence(&self) -> Option<&[Tensor]> {
        match self {
            Value::Sequence(s) => Some(s),
            _ => None,
        }
    }

    /// What it is, in words (for errors).
    pub(crate) fn what(&self) -> &'static str {
        match self {
            Value::Tensor(_) => "a tensor",
            Value::Sequence(_) => "a sequence",
            Value::None => "an empty optional",
        }
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Value {
        Value::Tensor(t)
    }
}

/// What a graph input or output holds, as the model declares it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ValueKind {
    /// A tensor.
    #[default]
    Tensor,
    /// A sequence of tensors (the dtype and dims are its elements').
    Sequence,
    /// An optional tensor.
    OptionalTensor,
    /// An optional sequence of tensors.
    OptionalSequence,
}

impl ValueKind {
    /// Whether a value fits this kind.
    pub fn admits(self, v: &Value) -> bool {
        matches!(
            (self, v),
            (
                ValueKind::Tensor | ValueKind::OptionalTensor,
                Value::Tensor(_)
            ) | (
                ValueKind::Sequence | ValueKind::OptionalSequence,
                Value::Sequence(_)
            ) | (
                ValueKind::OptionalTensor | ValueKind::OptionalSequence,
                Value::None
            )
        )
    }
}

/// The protobuf field number and payload of each top-level field.
fn fields(bytes: &[u8]) -> std::result::Result<Vec<(u32, Vec<u8>)>, String> {
    use protobuf::rt::WireType;
    let mut s = protobuf::CodedInputStream::from_bytes(bytes);
    let mut out = Vec::new();
    let err = |e: protobuf::Error| e.to_string();
    while let Some(tag) = s.read_raw_tag_or_eof().map_err(err)? {
        let (field, wire) = (tag >> 3, tag & 7);
        match WireType::new(wire) {
            Some(WireType::LengthDelimited) => out.push((field, s.read_bytes().map_err(err)?)),
            Some(WireType::Varint) => {
                let v = s.read_raw_varint64().map_err(err)?;
                out.push((field, v.to_le_bytes().to_vec()));
            }
            Some(w) => s.skip_field(w).map_err(err)?,
            None => return Err(format!("bad wire type {wire}")),
        }
    }
    Ok(out)
}

fn tensor_of(bytes: &[u8]) -> std::result::Result<Tensor, String> {
    let t = TensorProto::parse_from_bytes(bytes).map_err(|e| format!("not a TensorProto: {e}"))?;
    model::decode_tensor(&t, None)
}

/// A `SequenceProto` of tensors.
fn sequence_of(bytes: &[u8]) -> std::result::Result<Vec<Tensor>, String> {
    let mut v = Vec::new();
    for (field, payload) in fields(bytes)? {
        match field {
            3 => v.push(tensor_of(&payload)?),
            4..=7 => return Err("a sequence of non-tensors is not supported".into()),
            _ => {}
        }
    }
    Ok(v)
}

/// Reads a serialized `TensorProto`, `SequenceProto` or `OptionalProto`
/// (which one `kind` says) as a [`Value`].
pub fn read_value_file(path: impl AsRef<Path>, kind: ValueKind) -> Result<Value> {
    let path = path.as_ref();
    let file_error = |m: String| Error::File {
        path: path.into(),
        message: m,
    };
    let bytes = tilejit_ir::fallible::read_file(path).map_err(|e| file_error(e.to_string()))?;
    let v = match kind {
        ValueKind::Tensor => tensor_of(&bytes).map(Value::Tensor),
        ValueKind::Sequence => sequence_of(&bytes).map(Value::Sequence),
        ValueKind::OptionalTensor | ValueKind::OptionalSequence => {
            let mut v = Ok(Value::None);
            for (field, payload) in fields(&bytes).map_err(file_error)? {
                match field {
                    3 => v = tensor_of(&payload).map(Value::Tensor),
                    5 => v = sequence_of(&payload).map(Value::Sequence),
                    4 | 6 | 7 => v = Err("an optional of a non-tensor is not supported".into()),
                    _ => {}
                }
            }
            v
        }
    };
    v.map_err(file_error)
}
