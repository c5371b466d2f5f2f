//! Reading an ONNX file into checked parts: the protobuf is parsed by
//! `onnx-protobuf`'s message types, then every tensor is decoded (external
//! data read from files beside the model, each range checked against the
//! file), attributes are converted into [`Attr`]s, and the graph is checked
//! to be in topological order. Nothing here panics on a hostile file: every
//! length, offset and count is checked before it is used.

use super::narrow::{self, Narrow};
use super::{onnx_error, Dim, IoSpec, ValueKind};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use onnx_protobuf::{
    tensor_proto, type_proto, GraphProto, Message, ModelProto, TensorProto, ValueInfoProto,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path};
use tilejit_ir::{Array, Buffer, DType, ErrorKind, Shape};

/// The newest default-domain opset this importer reads (onnx 1.23's).
pub const MAX_OPSET: i64 = 28;
/// The oldest default-domain opset this importer reads.
pub const MIN_OPSET: i64 = 7;

/// A node attribute, converted from `AttributeProto`.
#[derive(Clone, Debug)]
pub(crate) enum Attr {
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Str(String),
    Strs(Vec<String>),
    Tensor(Tensor),
    /// A sub-graph (`If` branches, `Loop` and `Scan` bodies).
    Graph(std::sync::Arc<SubGraph>),
    /// A type (`Optional`'s `type`, which only that row reads: values
    /// carry their own types while tracing).
    Type,
    /// A kind this importer does not read (graphs, sparse tensors, type
    /// protos, tensor lists): an error if a row asks for it.
    Other(&'static str),
}

/// One node, with its attributes decoded.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    /// Its name, or `#index` when the file gives none.
    pub name: String,
    pub op: String,
    pub domain: String,
    /// Input names; an empty name is an absent optional input.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub attrs: BTreeMap<String, Attr>,
    /// Per input, its narrow ONNX type when it has one (`narrow.rs`).
    pub narrow_in: Vec<Option<Narrow>>,
}

/// A graph attribute's graph, decoded.
#[derive(Debug)]
pub(crate) struct SubGraph {
    pub inputs: Vec<IoSpec>,
    pub outputs: Vec<String>,
    /// What each output declares it holds (a tensor when undeclared).
    pub output_kinds: Vec<ValueKind>,
    pub initializers: Vec<(String, Tensor)>,
    pub nodes: Vec<Node>,
}

/// A parsed, decoded model (not yet checked against the op table).
pub(crate) struct Parsed {
    pub opset: i64,
    pub ir_version: i64,
    pub producer: String,
    pub inputs: Vec<IoSpec>,
    pub outputs: Vec<IoSpec>,
    pub initializers: Vec<(String, Tensor)>,
    pub nodes: Vec<Node>,
    /// The values of a narrow ONNX type, carried on a wider dtype.
    pub narrow: HashMap<String, Narrow>,
}

fn model_error(kind: ErrorKind, message: impl Into<String>) -> Error {
    onnx_error("", "", "", kind, message)
}

/// The tilejit dtype of an ONNX `TensorProto.DataType` code, or why not.
pub(crate) fn dtype_of(code: i32) -> std::result::Result<DType, String> {
    // The codes of onnx.proto's `TensorProto.DataType`.
    let name = match code {
        1 => return Ok(DType::F32),
        2 => return Ok(DType::U8),
        3 => return Ok(DType::I8),
        6 => return Ok(DType::I32),
        7 => return Ok(DType::I64),
        9 => return Ok(DType::Bool),
        10 => return Ok(DType::F16),
        11 => return Ok(DType::F64),
        16 => return Ok(DType::BF16),
        4 => return Ok(DType::U16),
        5 => return Ok(DType::I16),
        12 => return Ok(DType::U32),
        13 => return Ok(DType::U64),
        8 => "string",
        14 => "complex64",
        15 => "complex128",
        17..=26 => "a float8/4-bit/2-bit type",
        _ => return Err(format!("dtype code {code} is unknown")),
    };
    Err(format!(
        "dtype {name} is not supported (tilejit has f32, f64, f16, bf16, i32, i64, bool, u8, i8, \
         i16, u16, u32, u64)"
    ))
}

/// Parses and decodes a model; `dir` is where external data files live
/// (`None`: a model from bytes, which may not name any).
pub(crate) fn parse(bytes: &[u8], dir: Option<&Path>) -> Result<Parsed> {
    let model = ModelProto::parse_from_bytes(bytes).map_err(|e| {
        model_error(
            ErrorKind::BadArgument,
            format!("not a readable ONNX model (protobuf: {e})"),
        )
    })?;
    let mut opset = None;
    for o in &model.opset_import {
        if o.domain.is_empty() || o.domain == "ai.onnx" {
            opset = Some(o.version);
        }
    }
    // A model of other domains' nodes only (the training optimizers) may
    // import no default-domain opset; its nodes never read it.
    let only_other_domains = model.graph.as_ref().is_some_and(|g| {
        !g.node.is_empty()
            && g.node
                .iter()
                .all(|n| !(n.domain.is_empty() || n.domain == "ai.onnx"))
    });
    if opset.is_none() && only_other_domains {
        opset = Some(MAX_OPSET);
    }
    // IR version 3 files may list no opset: that means opset 1, too old.
    let opset = opset.ok_or_else(|| {
        model_error(
            ErrorKind::Unsupported,
            "the model imports no default-domain opset",
        )
    })?;
    if !(MIN_OPSET..=MAX_OPSET).contains(&opset) {
        return Err(model_error(
            ErrorKind::Unsupported,
            format!("opset {opset} is outside the supported {MIN_OPSET}..={MAX_OPSET}"),
        ));
    }
    let Some(graph) = model.graph.as_ref() else {
        return Err(model_error(
            ErrorKind::BadArgument,
            "the model has no graph",
        ));
    };
    let mut initializers = Vec::with_capacity(graph.initializer.len());
    let mut init_names = HashSet::new();
    for t in &graph.initializer {
        let tensor = decode_tensor(t, dir).map_err(|m| {
            onnx_error(
                "",
                "",
                &format!("initializer {}", t.name),
                ErrorKind::BadArgument,
                m,
            )
        })?;
        if !init_names.insert(t.name.clone()) {
            return Err(model_error(
                ErrorKind::BadArgument,
                format!("initializer `{}` is given twice", t.name),
            ));
        }
        initializers.push((t.name.clone(), tensor));
    }
    if !graph.sparse_initializer.is_empty() {
        return Err(model_error(
            ErrorKind::Unsupported,
            "sparse initializers are not supported",
        ));
    }
    // Before IR version 4 initializers were listed among the inputs too.
    let inputs = graph
        .input
        .iter()
        .filter(|v| !init_names.contains(&v.name))
        .map(io_spec)
        .collect::<Result<Vec<_>>>()?;
    let outputs = graph
        .output
        .iter()
        .map(io_spec)
        .collect::<Result<Vec<_>>>()?;
    let (nodes, narrow) = parse_nodes(graph, dir)?;
    let parsed = Parsed {
        opset,
        ir_version: model.ir_version,
        producer: format!("{} {}", model.producer_name, model.producer_version)
            .trim()
            .to_string(),
        inputs,
        outputs,
        initializers,
        nodes,
        narrow,
    };
    check_topology(&parsed)?;
    Ok(parsed)
}

/// A graph's nodes, attributes decoded (sub-graphs recursively), and its
/// values of narrow types.
fn parse_nodes(
    graph: &GraphProto,
    dir: Option<&Path>,
) -> Result<(Vec<Node>, HashMap<String, Narrow>)> {
    let mut nodes = Vec::with_capacity(graph.node.len());
    for (i, n) in graph.node.iter().enumerate() {
        let name = if n.name.is_empty() {
            format!("#{i}")
        } else {
            n.name.clone()
        };
        let mut attrs = BTreeMap::new();
        for a in &n.attribute {
            let v = decode_attr(a, dir)
                .map_err(|m| onnx_error(&name, &n.op_type, &a.name, ErrorKind::BadArgument, m))?;
            attrs.insert(a.name.clone(), v);
        }
        nodes.push(Node {
            name,
            op: n.op_type.clone(),
            domain: n.domain.clone(),
            inputs: n.input.clone(),
            outputs: n.output.clone(),
            attrs,
            narrow_in: Vec::new(),
        });
    }
    let (types, per_node) = narrow::infer(graph, &nodes);
    for (n, t) in nodes.iter_mut().zip(per_node) {
        n.narrow_in = t;
    }
    Ok((nodes, types))
}

/// A graph-valued attribute (the body of `If`, `Loop`, `Scan`): it reads
/// outer-scope values by name besides its own inputs.
fn parse_subgraph(g: &GraphProto, dir: Option<&Path>) -> std::result::Result<SubGraph, String> {
    let mut initializers = Vec::with_capacity(g.initializer.len());
    for t in &g.initializer {
        initializers.push((t.name.clone(), decode_tensor(t, dir)?));
    }
    let inputs = g
        .input
        .iter()
        .map(io_spec)
        .collect::<Result<Vec<_>>>()
        .map_err(|e| e.to_string())?;
    let outputs = g.output.iter().map(|v| v.name.clone()).collect();
    let output_kinds = g
        .output
        .iter()
        .map(|v| io_spec(v).map(|s| s.kind).unwrap_or_default())
        .collect();
    let (nodes, _) = parse_nodes(g, dir).map_err(|e| e.to_string())?;
    Ok(SubGraph {
        inputs,
        outputs,
        output_kinds,
        initializers,
        nodes,
    })
}

/// Every node's inputs are defined before it (graph inputs, initializers,
/// earlier nodes' outputs), no name is defined twice, and every graph
/// output is defined.
fn check_topology(p: &Parsed) -> Result<()> {
    let mut defined: HashSet<&str> = HashSet::new();
    for s in &p.inputs {
        if !defined.insert(&s.name) {
            return Err(model_error(
                ErrorKind::BadArgument,
                format!("input `{}` is declared twice", s.name),
            ));
        }
    }
    for (name, _) in &p.initializers {
        defined.insert(name);
    }
    for n in &p.nodes {
        for i in n.inputs.iter().filter(|i| !i.is_empty()) {
            if !defined.contains(i.as_str()) {
                return Err(onnx_error(
                    &n.name,
                    &n.op,
                    i,
                    ErrorKind::BadArgument,
                    "this input is not a graph input, an initializer or an earlier node's output \
                     (a missing value, or nodes out of topological order)",
                ));
            }
        }
        for o in n.outputs.iter().filter(|o| !o.is_empty()) {
            if !defined.insert(o) {
                return Err(onnx_error(
                    &n.name,
                    &n.op,
                    o,
                    ErrorKind::BadArgument,
                    "this output name is defined twice",
                ));
            }
        }
    }
    for o in &p.outputs {
        if !defined.contains(o.name.as_str()) {
            return Err(model_error(
                ErrorKind::BadArgument,
                format!("graph output `{}` is never computed", o.name),
            ));
        }
    }
    Ok(())
}

fn io_spec(v: &ValueInfoProto) -> Result<IoSpec> {
    let mut spec = IoSpec {
        name: v.name.clone(),
        dtype: None,
        dims: None,
        kind: ValueKind::Tensor,
    };
    let Some(t) = v.type_.as_ref() else {
        return Ok(spec);
    };
    let not_tensor = || {
        model_error(
            ErrorKind::Unsupported,
            format!(
                "value `{}` is not a tensor, a sequence of tensors or an optional of either \
                 (maps and sparse tensors are not supported)",
                v.name
            ),
        )
    };
    // The element type of a sequence, or `None` when it is not tensors.
    let seq_elem = |t: &onnx_protobuf::TypeProto| match &t.value {
        Some(type_proto::Value::SequenceType(s)) => match s.elem_type.as_ref() {
            None => Some(None),
            Some(e) => match &e.value {
                Some(type_proto::Value::TensorType(tt)) => Some(Some(tt.clone())),
                None => Some(None),
                _ => None,
            },
        },
        _ => None,
    };
    let tensor = match &t.value {
        Some(type_proto::Value::TensorType(tt)) => Some(tt.clone()),
        None => return Ok(spec),
        Some(type_proto::Value::SequenceType(_)) => {
            spec.kind = ValueKind::Sequence;
            seq_elem(t).ok_or_else(not_tensor)?
        }
        Some(type_proto::Value::OptionalType(o)) => match o.elem_type.as_ref() {
            None => {
                spec.kind = ValueKind::OptionalTensor;
                None
            }
            Some(e) => match &e.value {
                Some(type_proto::Value::TensorType(tt)) => {
                    spec.kind = ValueKind::OptionalTensor;
                    Some(tt.clone())
                }
                Some(type_proto::Value::SequenceType(_)) => {
                    spec.kind = ValueKind::OptionalSequence;
                    seq_elem(e).ok_or_else(not_tensor)?
                }
                _ => return Err(not_tensor()),
            },
        },
        Some(_) => return Err(not_tensor()),
    };
    let Some(tt) = tensor else {
        return Ok(spec);
    };
    if let Some(t) = Narrow::from_code(tt.elem_type) {
        spec.dtype = Some(t.carrier());
    } else if tt.elem_type != 0 {
        spec.dtype = Some(dtype_of(tt.elem_type).map_err(|m| {
            model_error(ErrorKind::Unsupported, format!("value `{}`: {m}", v.name))
        })?);
    }
    if let Some(shape) = tt.shape.as_ref() {
        use onnx_protobuf::tensor_shape_proto::dimension::Value as V;
        let dims = shape
            .dim
            .iter()
            .map(|d| match &d.value {
                Some(V::DimValue(n)) if *n >= 0 => Dim::Fixed(*n as usize),
                Some(V::DimParam(s)) if !s.is_empty() => Dim::Symbol(s.clone()),
                _ => Dim::Symbol("?".into()),
            })
            .collect();
        spec.dims = Some(dims);
    }
    Ok(spec)
}

fn decode_attr(
    a: &onnx_protobuf::AttributeProto,
    dir: Option<&Path>,
) -> std::result::Result<Attr, String> {
    use onnx_protobuf::attribute_proto::AttributeType as T;
    Ok(match a.type_.enum_value().ok() {
        Some(T::INT) => Attr::Int(a.i),
        Some(T::FLOAT) => Attr::Float(a.f),
        Some(T::INTS) => Attr::Ints(a.ints.clone()),
        Some(T::FLOATS) => Attr::Floats(a.floats.clone()),
        Some(T::STRING) => Attr::Str(String::from_utf8_lossy(&a.s).into_owned()),
        Some(T::TENSOR) => match a.t.as_ref() {
            Some(t) => Attr::Tensor(decode_tensor(t, dir)?),
            None => return Err("a tensor attribute without a tensor".into()),
        },
        Some(T::GRAPH) => match a.g.as_ref() {
            Some(g) => Attr::Graph(std::sync::Arc::new(parse_subgraph(g, dir)?)),
            None => return Err("a graph attribute without a graph".into()),
        },
        Some(T::GRAPHS) => Attr::Other("a graph list"),
        Some(T::STRINGS) => Attr::Strs(
            a.strings
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect(),
        ),
        Some(T::TENSORS) => Attr::Other("a tensor list"),
        Some(T::SPARSE_TENSOR) | Some(T::SPARSE_TENSORS) => Attr::Other("a sparse tensor"),
        Some(T::TYPE_PROTO) => Attr::Type,
        Some(T::TYPE_PROTOS) => Attr::Other("a type list"),
        Some(T::UNDEFINED) | None => {
            if !a.ref_attr_name.is_empty() {
                Attr::Other("a reference to a function's attribute")
            } else {
                return Err(format!("attribute type {} is unknown", a.type_.value()));
            }
        }
    })
}

/// Decodes one `TensorProto` (raw, typed fields or external data).
pub(crate) fn decode_tensor(
    t: &TensorProto,
    dir: Option<&Path>,
) -> std::result::Result<Tensor, String> {
    let narrow = Narrow::from_code(t.data_type);
    let dtype = match narrow {
        Some(n) => n.carrier(),
        None => dtype_of(t.data_type)?,
    };
    let mut dims = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        dims.push(usize::try_from(d).map_err(|_| format!("dimension {d} is negative"))?);
    }
    let shape = Shape::new(&dims).map_err(|e| e.to_string())?;
    let numel = shape.numel();
    let size = dtype.size_bytes();
    let nbytes = match narrow {
        Some(n) => n.stored_bytes(numel),
        None => numel
            .checked_mul(size)
            .ok_or("the tensor's size overflows")?,
    };
    let external = t.data_location.enum_value() == Ok(tensor_proto::DataLocation::EXTERNAL);
    let bytes: Vec<u8> = if external {
        read_external(t, dir, nbytes)?
    } else if !t.raw_data.is_empty() || numel == 0 {
        if t.raw_data.len() != nbytes {
            let what = narrow.map_or(String::new(), |n| format!("{} ", n.name()));
            return Err(format!(
                "{what}raw data holds {} bytes, the shape needs {nbytes}",
                t.raw_data.len()
            ));
        }
        t.raw_data.clone()
    } else if let Some(n) = narrow {
        // One element (float8) or one packed byte (4-bit, 2-bit) per int32.
        let stored: Vec<u8> = t.int32_data.iter().map(|&v| v as u8).collect();
        n.decode(&stored, numel)?
    } else {
        typed_bytes(t, dtype, numel)?
    };
    let bytes = match narrow {
        Some(n) if external || !t.raw_data.is_empty() => n.decode(&bytes, numel)?,
        _ => bytes,
    };
    let buffer = Buffer::from_le_bytes(dtype, &bytes).map_err(|e| e.to_string())?;
    let array = Array::new(shape, buffer).map_err(|e| e.to_string())?;
    Ok(Tensor::concrete(array))
}

/// The little-endian bytes of a tensor stored in its typed fields.
fn typed_bytes(
    t: &TensorProto,
    dtype: DType,
    numel: usize,
) -> std::result::Result<Vec<u8>, String> {
    let count = |n: usize, field: &str| {
        if n == numel {
            Ok(())
        } else {
            Err(format!(
                "`{field}` holds {n} values, the shape needs {numel}"
            ))
        }
    };
    Ok(match dtype {
        DType::F32 => {
            count(t.float_data.len(), "float_data")?;
            t.float_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::F64 => {
            count(t.double_data.len(), "double_data")?;
            t.double_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::I64 => {
            count(t.int64_data.len(), "int64_data")?;
            t.int64_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::I32 => {
            count(t.int32_data.len(), "int32_data")?;
            t.int32_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        // Narrow types and halves sit one per int32 (halves as their bits).
        DType::U8 | DType::I8 | DType::Bool => {
            count(t.int32_data.len(), "int32_data")?;
            t.int32_data.iter().map(|&v| v as u8).collect()
        }
        DType::I16 | DType::U16 => {
            count(t.int32_data.len(), "int32_data")?;
            t.int32_data
                .iter()
                .flat_map(|&v| (v as u16).to_le_bytes())
                .collect()
        }
        // uint32 and uint64 sit one per uint64.
        DType::U32 => {
            count(t.uint64_data.len(), "uint64_data")?;
            t.uint64_data
                .iter()
                .flat_map(|&v| (v as u32).to_le_bytes())
                .collect()
        }
        DType::U64 => {
            count(t.uint64_data.len(), "uint64_data")?;
            t.uint64_data.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        DType::F16 | DType::BF16 => {
            count(t.int32_data.len(), "int32_data")?;
            t.int32_data
                .iter()
                .flat_map(|&v| (v as u16).to_le_bytes())
                .collect()
        }
    })
}

/// Reads an external tensor's bytes: `location` relative to the model's
/// directory (no absolute path, no `..`), `offset` and `length` checked
/// against the file and the shape.
fn read_external(
    t: &TensorProto,
    dir: Option<&Path>,
    nbytes: usize,
) -> std::result::Result<Vec<u8>, String> {
    let (mut location, mut offset, mut length) = (None, 0u64, None);
    for e in &t.external_data {
        let num = || {
            e.value
                .parse::<u64>()
                .map_err(|_| format!("external data `{}` = `{}` is no number", e.key, e.value))
        };
        match e.key.as_str() {
            "location" => location = Some(e.value.clone()),
            "offset" => offset = num()?,
            "length" => length = Some(num()?),
            "checksum" => {}
            k => return Err(format!("external data key `{k}` is unknown")),
        }
    }
    let location = location.ok_or("external data without a `location`")?;
    let Some(dir) = dir else {
        return Err(format!(
            "external data `{location}`: a model read from bytes has no directory to read it from"
        ));
    };
    let rel = Path::new(&location);
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!("external data location `{location}` must be a relative path inside the model's directory"));
    }
    if let Some(l) = length {
        if l != nbytes as u64 {
            return Err(format!(
                "external data length {l} differs from the {nbytes} bytes the shape needs"
            ));
        }
    }
    let path = dir.join(rel);
    let mut f = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file_len = f
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    let end = offset
        .checked_add(nbytes as u64)
        .ok_or("external data offset overflows")?;
    if end > file_len {
        return Err(format!(
            "external data {}: bytes {offset}..{end} lie past its end ({file_len} bytes)",
            path.display()
        ));
    }
    f.seek(SeekFrom::Start(offset))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(nbytes)
        .map_err(|_| format!("cannot allocate {nbytes} bytes"))?;
    f.take(nbytes as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() != nbytes {
        return Err(format!(
            "{}: read {} of {nbytes} bytes",
            path.display(),
            bytes.len()
        ));
    }
    Ok(bytes)
}
