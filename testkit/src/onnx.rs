//! Small ONNX models built in Rust for tests (CI has no Python): values,
//! initializers, nodes and attributes as `onnx-protobuf` messages, encoded
//! to the bytes `tilejit::onnx` reads.

use onnx_protobuf::attribute_proto::AttributeType;
use onnx_protobuf::tensor_shape_proto::{dimension, Dimension};
use onnx_protobuf::{
    type_proto, AttributeProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto,
    TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use protobuf::{EnumOrUnknown, MessageField};

pub use onnx_protobuf as proto;
pub use protobuf;

/// `TensorProto.DataType` codes.
pub const FLOAT: i32 = 1;
/// int64.
pub const INT64: i32 = 7;
/// uint16.
pub const UINT16: i32 = 4;
/// int16.
pub const INT16: i32 = 5;
/// uint32.
pub const UINT32: i32 = 12;
/// uint64.
pub const UINT64: i32 = 13;
/// complex64 (unsupported by tilejit).
pub const COMPLEX64: i32 = 14;

/// A dim of a declared value: a size or a symbol.
pub enum D {
    /// A fixed size.
    N(i64),
    /// A symbolic size.
    S(&'static str),
}

/// A declared tensor value (graph input or output).
pub fn value(name: &str, elem: i32, dims: &[D]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| {
            let mut x = Dimension::new();
            x.value = Some(match d {
                D::N(n) => dimension::Value::DimValue(*n),
                D::S(s) => dimension::Value::DimParam(s.to_string()),
            });
            x
        })
        .collect();
    let tt = type_proto::Tensor {
        elem_type: elem,
        shape: MessageField::some(TensorShapeProto {
            dim,
            ..Default::default()
        }),
        ..Default::default()
    };
    ValueInfoProto {
        name: name.into(),
        type_: MessageField::some(TypeProto {
            value: Some(type_proto::Value::TensorType(tt)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An f32 initializer (raw little-endian data).
pub fn f32s(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: FLOAT,
        raw_data: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ..Default::default()
    }
}

/// An int64 initializer (typed field `int64_data`).
pub fn i64s(name: &str, dims: &[i64], data: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: INT64,
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

/// A node.
pub fn node(
    op: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: name.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

fn attr(name: &str, ty: AttributeType) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        type_: EnumOrUnknown::new(ty),
        ..Default::default()
    }
}

/// An int attribute.
pub fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        i: v,
        ..attr(name, AttributeType::INT)
    }
}

/// A float attribute.
pub fn float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        f: v,
        ..attr(name, AttributeType::FLOAT)
    }
}

/// An int-list attribute.
pub fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        ints: v.to_vec(),
        ..attr(name, AttributeType::INTS)
    }
}

/// A string attribute.
pub fn string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        s: v.as_bytes().to_vec(),
        ..attr(name, AttributeType::STRING)
    }
}

/// A tensor attribute (`Constant`'s `value`).
pub fn tensor(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        t: MessageField::some(t),
        ..attr(name, AttributeType::TENSOR)
    }
}

/// A model of one graph at `opset`.
pub fn model(
    opset: i64,
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    initializers: Vec<TensorProto>,
) -> ModelProto {
    ModelProto {
        ir_version: 8,
        producer_name: "tilejit-testkit".into(),
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
            ..Default::default()
        }],
        graph: MessageField::some(GraphProto {
            name: "test".into(),
            node: nodes,
            input: inputs,
            output: outputs,
            initializer: initializers,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The model's bytes.
pub fn encode(m: &ModelProto) -> Vec<u8> {
    m.write_to_bytes().unwrap()
}

/// A string-list attribute (`activations`).
pub fn strings(name: &str, v: &[&str]) -> AttributeProto {
    AttributeProto {
        strings: v.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ..attr(name, AttributeType::STRINGS)
    }
}

/// A graph attribute (`If` branches, `Loop` and `Scan` bodies).
pub fn graph(
    name: &str,
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
) -> AttributeProto {
    AttributeProto {
        g: MessageField::some(GraphProto {
            name: name.into(),
            node: nodes,
            input: inputs,
            output: outputs,
            ..Default::default()
        }),
        ..attr(name, AttributeType::GRAPH)
    }
}

/// A float-list attribute.
pub fn floats(name: &str, v: &[f32]) -> AttributeProto {
    AttributeProto {
        floats: v.to_vec(),
        ..attr(name, AttributeType::FLOATS)
    }
}
