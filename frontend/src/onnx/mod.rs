//! ONNX models in (the `onnx` feature, on by default): [`load`] reads a
//! model file, checks every node against the op table before anything runs
//! (an unsupported op, attribute or dtype is an [`Error::Onnx`] naming the
//! node, the op and the attribute), and returns an [`OnnxModel`], which
//! runs like any jit function: the first call with a new input signature
//! traces the graph into tilejit's IR and compiles it, later calls hit the
//! handler cache; run modes (Host, Sim, Verify), placement and hooks apply
//! unchanged.
//!
//! ```no_run
//! # fn main() -> tilejit::Result<()> {
//! use tilejit::prelude::*;
//! let model = tilejit::onnx::load("resnet18.onnx")?;
//! let x = Tensor::rand(&[1, 3, 224, 224], 0);
//! let outputs = model.run(&[("images", &x)])?;
//! let (name, logits) = &outputs[0];
//! println!("{name}: {:?}", logits.shape());
//! # Ok(()) }
//! ```
//!
//! The protobuf message types come from the `onnx-protobuf` crate
//! (rust-protobuf 3), not a schema copied here. Shape subgraphs (`Shape`,
//! `Gather`, `Concat`, `ConstantOfShape`, `Range` on known values, ...)
//! fold while tracing, since their inputs are concrete tensors, which run
//! eagerly. Symbolic dims (`batch`, `seq`) accept any size; each new input
//! shape is traced once, or with [`LoadOptions::dynamic`] once per shape
//! class (a graph whose shape arithmetic reads a size still traces per
//! size). Initializers are program constants unless
//! [`LoadOptions::weights_as_arguments`] keeps them as arguments (so they
//! can live on a device: [`OnnxModel::map_weights`]).
//!
//! Operands that must be known when tracing but are graph inputs (a
//! Reshape's `shape` fed by the caller) make those inputs value-keyed:
//! their values join the cache key, so a new value retraces and a
//! repeated one hits the cache ([`OnnxModel::static_inputs`],
//! `statics.rs`). When such an operand is computed from traced data, or
//! a NonZero, Compress or Unique (whose output shape is its operand's
//! value) reads traced data, the graph runs in two phases or more
//! (`segments.rs`): it is cut before that node into pieces, each its own
//! jit function ([`OnnxModel::functions`]); NonZero and the like run
//! eagerly between two pieces, and a shape operand enters the next piece
//! value-keyed.
//!
//! ONNX's narrow types (FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2,
//! FLOAT8E5M2FNUZ, FLOAT8E8M0, FLOAT4E2M1, INT4, UINT4, INT2, UINT2) run
//! emulated on a wider carrier dtype with exact values: the float ones on
//! f32, whose values lie on the narrow grid; INT4 and INT2 on i8, UINT4
//! and UINT2 on u8, within their range (`narrow.rs`). Initializers and
//! tensor files of these types decode onto the carrier exactly; `Cast`
//! and `QuantizeLinear` round onto the grid as onnx's reference does; an
//! input declared with such a type takes its carrier dtype, whose values
//! are cast onto the grid (floats round to nearest, saturating; integers
//! wrap), and outputs come back on the carrier.
//!
//! `model.rs` reads the file; `table.rs` is the op table (one row per op
//! type: attributes, load check, build); `subgraph.rs` builds nodes in
//! order, for the graph and for sub-graphs (`If`, `Loop`, `Scan`);
//! `segments.rs` cuts the graph into phases.

mod model;
mod narrow;
mod segments;
mod statics;
mod subgraph;
mod table;
mod value;

use crate::args::{ArgKind, FromLeaves, Leaves};
use crate::error::{Error, Result};
use crate::jit::{param, JitFn};
use crate::tensor::Tensor;
use model::{Node, Parsed};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use table::{Cx, Row};
use tilejit_ir::{DType, ErrorKind};

pub use model::{MAX_OPSET, MIN_OPSET};
pub use statics::MAX_STATIC_ELEMENTS;
pub use value::{read_value_file, Value, ValueKind};

/// A traced graph's panic is a panic in tilejit's importer, not in the
/// caller's code (what `ErrorKind::Panic` says): an internal error that
/// asks for the model.
fn importer_bug(e: Error) -> Error {
    match e.kind() {
        ErrorKind::Panic => onnx_error(
            "",
            "",
            "",
            ErrorKind::Internal,
            format!("a bug in tilejit's ONNX importer (please report it with the model): {e}"),
        ),
        _ => e,
    }
}

pub(crate) fn onnx_error(
    node: &str,
    op: &str,
    attribute: &str,
    kind: ErrorKind,
    message: impl Into<String>,
) -> Error {
    Error::Onnx {
        node: node.into(),
        op: op.into(),
        attribute: attribute.into(),
        kind,
        message: message.into(),
    }
}

/// One dim of a declared input or output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Fixed(usize),
    /// A symbolic size (`batch`, `seq`; `?` when unnamed): any size, the
    /// same wherever one name appears among the inputs.
    Symbol(String),
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Symbol(s) => write!(f, "{s}"),
        }
    }
}

/// A graph input or output as the model declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct IoSpec {
    /// Its name.
    pub name: String,
    /// Its dtype, if declared.
    pub dtype: Option<DType>,
    /// Its dims, if declared.
    pub dims: Option<Vec<Dim>>,
    /// A tensor, a sequence or an optional (for a sequence, `dtype` and
    /// `dims` are its elements').
    pub kind: ValueKind,
}

impl std::fmt::Display for IoSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.name)?;
        match self.kind {
            ValueKind::Tensor => {}
            ValueKind::Sequence => write!(f, "seq ")?,
            ValueKind::OptionalTensor => write!(f, "optional ")?,
            ValueKind::OptionalSequence => write!(f, "optional seq ")?,
        }
        match self.dtype {
            Some(d) => write!(f, "{}", format!("{d:?}").to_lowercase())?,
            None => write!(f, "?")?,
        }
        match &self.dims {
            Some(d) => write!(
                f,
                "[{}]",
                d.iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => write!(f, "[?]"),
        }
    }
}

/// How [`load_with`] treats a model.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// Pass initializers to the compiled program as arguments instead of
    /// baking them in as constants (so [`OnnxModel::map_weights`] can move
    /// them to a device, and programs stay small).
    pub weights_as_arguments: bool,
    /// Trace once per shape class rather than once per size: dims seen
    /// to vary between calls (a symbolic `batch` or `seq`) become size
    /// symbols, as
    /// [`JitFunction::make_dynamic`](crate::JitFunction::make_dynamic)
    /// does, so a new size instantiates the class's graph without running
    /// the importer again. Each exact size still compiles its own program; a graph
    /// whose shape arithmetic reads a size traces per size anyway.
    pub dynamic: bool,
}

/// The checked graph a model's jit function traces.
struct Graph {
    opset: i64,
    nodes: Vec<(Node, &'static Row)>,
    /// The traced pieces, in order (one, the whole graph, unless an
    /// operand the trace must know is computed from data).
    segments: Vec<segments::Segment>,
    /// The graph inputs of a narrow ONNX type: their carrier values are
    /// rounded onto its grid on entry.
    narrow: HashMap<String, narrow::Narrow>,
    /// Initializer names, in the order of the weights argument.
    weight_names: Vec<String>,
    /// Initializers and `Constant` outputs (the constants of the program
    /// when weights are not arguments).
    consts: HashMap<String, Tensor>,
    weights_as_arguments: bool,
}

impl Graph {
    /// The traced body of piece `k`: its nodes built in order.
    /// `inputs` are its traced inputs, in order; `static_leaves` encode the
    /// value-keyed ones.
    fn eval(
        &self,
        k: usize,
        inputs: &[Tensor],
        static_leaves: &[i64],
        weights: Option<&[Tensor]>,
    ) -> Result<Vec<Tensor>> {
        let seg = &self.segments[k];
        let mut env = subgraph::Env::with_capacity(seg.nodes.len() * 2);
        match weights {
            Some(w) => {
                for (name, t) in self.weight_names.iter().zip(w) {
                    env.insert(name.clone(), t.clone());
                }
            }
            None => {
                for name in &self.weight_names {
                    if let Some(t) = self.consts.get(name) {
                        env.insert(name.clone(), t.clone());
                    }
                }
            }
        }
        let (mut traced, mut leaves) = (inputs.iter(), static_leaves.iter());
        let missing =
            |name: &str| onnx_error("", "", name, ErrorKind::Internal, "input not passed");
        for ((name, why), kind) in seg.inputs.iter().zip(&seg.statics).zip(&seg.input_kinds) {
            let v = match (why, kind) {
                (Some(_), _) => Value::Tensor(statics::decode(&mut leaves)?),
                (None, ValueKind::Tensor) => {
                    Value::Tensor(traced.next().cloned().ok_or_else(|| missing(name))?)
                }
                (None, _) => match leaves.next().copied() {
                    Some(LAYOUT_NONE) => Value::None,
                    Some(LAYOUT_TENSOR) => {
                        Value::Tensor(traced.next().cloned().ok_or_else(|| missing(name))?)
                    }
                    Some(len) if len >= 0 => Value::Sequence(
                        (0..len)
                            .map(|_| traced.next().cloned().ok_or_else(|| missing(name)))
                            .collect::<Result<_>>()?,
                    ),
                    _ => return Err(missing(name)),
                },
            };
            let v = match (v, self.narrow.get(name)) {
                (Value::Tensor(t), Some(&n)) => Value::Tensor(table::round_to(&t, n, true, "up")),
                (v, _) => v,
            };
            env.set(name.clone(), v);
        }
        let nodes = self.nodes[seg.nodes.clone()].iter().map(|(n, r)| (n, *r));
        table::with_step_budget(|| subgraph::run_nodes(nodes, &mut env, self.opset, &self.consts))?;
        let mut outs = Vec::with_capacity(seg.outputs.len());
        for (o, kind) in seg.outputs.iter().zip(&seg.output_kinds) {
            let v = env
                .value(o)
                .ok_or_else(|| onnx_error("", "", o, ErrorKind::Internal, "output not computed"))?;
            if !kind.admits(&v) {
                return Err(onnx_error(
                    "",
                    "",
                    o,
                    ErrorKind::BadArgument,
                    format!("this output is {}, but declared {kind:?}", v.what()),
                ));
            }
            let layout = |code: i64| Tensor::from_vec(vec![code], &[]);
            match (kind, v) {
                (ValueKind::Tensor, Value::Tensor(t)) => outs.push(t),
                (_, Value::Tensor(t)) => outs.extend([layout(LAYOUT_TENSOR)?, t]),
                (_, Value::None) => outs.push(layout(LAYOUT_NONE)?),
                (_, Value::Sequence(s)) => {
                    outs.push(layout(s.len() as i64)?);
                    outs.extend(s);
                }
            }
        }
        Ok(outs)
    }

    /// Runs the node a piece ends with eagerly, on concrete values.
    fn eager(&self, i: usize, vals: &mut HashMap<String, Tensor>) -> Result<()> {
        let (node, row) = &self.nodes[i];
        let ins: Vec<Option<Tensor>> = node
            .inputs
            .iter()
            .map(|name| match name.is_empty() {
                true => None,
                false => vals.get(name).or(self.consts.get(name)).cloned(),
            })
            .collect();
        let cx = Cx {
            opset: self.opset,
            consts: &self.consts,
            env: None,
        };
        let outs = table::with_step_budget(|| table::build(row, node, &cx, &ins))
            .map_err(|e| wrap(node, e))?;
        for (name, t) in node.outputs.iter().zip(outs) {
            if let Some(e) = t.error() {
                return Err(wrap(node, e.clone()));
            }
            if !name.is_empty() {
                vals.insert(name.clone(), t);
            }
        }
        Ok(())
    }
}

/// How a sequence or optional graph input or output travels as tensors: a
/// static leaf (inputs) or an i64 scalar output before its tensors
/// (outputs) holds a sequence's length, or one of these.
const LAYOUT_NONE: i64 = -1;
const LAYOUT_TENSOR: i64 = -2;

/// A node's error, naming the node unless it already does.
fn wrap(node: &Node, e: Error) -> Error {
    match e {
        Error::Onnx { .. } => e,
        e => table::fail(node, "", e.kind(), e.to_string()),
    }
}

/// A loaded, checked ONNX model: a jit function over its inputs.
pub struct OnnxModel {
    inputs: Vec<IoSpec>,
    outputs: Vec<IoSpec>,
    opset: i64,
    ir_version: i64,
    producer: String,
    ops: BTreeMap<String, usize>,
    statics: Vec<Option<statics::Reason>>,
    weights: Option<Vec<Tensor>>,
    /// One jit function per traced piece (`segments.rs`).
    funcs: Vec<JitFn<'static, Vec<Tensor>>>,
    graph: Arc<Graph>,
}

/// Reads and checks a model (external data files relative to its
/// directory); initializers become program constants.
pub fn load(path: impl AsRef<Path>) -> Result<OnnxModel> {
    load_with(path, LoadOptions::default())
}

/// [`load`] with options.
pub fn load_with(path: impl AsRef<Path>, options: LoadOptions) -> Result<OnnxModel> {
    let path = path.as_ref();
    let p = parse_file(path)?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    build(p, &name, options)
}

/// Reads and parses a model file, its external data relative to its
/// directory.
fn parse_file(path: &Path) -> Result<Parsed> {
    let bytes = tilejit_ir::fallible::read_file(path).map_err(|e| Error::File {
        path: path.into(),
        message: e.to_string(),
    })?;
    let dir = path.parent().map(|p| match p.as_os_str().is_empty() {
        true => Path::new("."),
        false => p,
    });
    model::parse(&bytes, dir)
}

/// Reads and checks a model from its bytes (it may not use external data).
pub fn from_bytes(bytes: &[u8]) -> Result<OnnxModel> {
    from_bytes_with(bytes, LoadOptions::default())
}

/// [`from_bytes`] with options.
pub fn from_bytes_with(bytes: &[u8], options: LoadOptions) -> Result<OnnxModel> {
    build(model::parse(bytes, None)?, "model", options)
}

/// Load-time values: initializers and `Constant` outputs.
fn constants(p: &Parsed) -> HashMap<String, Tensor> {
    let mut consts: HashMap<String, Tensor> = p.initializers.iter().cloned().collect();
    for n in &p.nodes {
        if n.op == "Constant" && n.domain.is_empty() {
            if let (Some(out), Some(model::Attr::Tensor(t))) =
                (n.outputs.first(), n.attrs.get("value"))
            {
                consts.insert(out.clone(), t.clone());
            }
        }
    }
    consts
}

fn build(p: Parsed, name: &str, options: LoadOptions) -> Result<OnnxModel> {
    let consts = constants(&p);
    let cx = Cx {
        opset: p.opset,
        consts: &consts,
        env: None,
    };
    let mut static_inputs = statics::find(&p.nodes, &p.inputs);
    for (s, why) in p.inputs.iter().zip(static_inputs.iter_mut()) {
        if s.kind != ValueKind::Tensor {
            // A sequence is traced; a node that needs its values fails.
            *why = None;
        }
    }
    for (s, why) in p.inputs.iter().zip(&static_inputs) {
        if let Some(why) = why {
            statics::check_declared(s, why)?;
        }
    }
    let mut nodes = Vec::with_capacity(p.nodes.len());
    let mut ops = BTreeMap::new();
    for n in p.nodes {
        let row = table::check(&n, &cx)?;
        *ops.entry(n.op.clone()).or_insert(0) += 1;
        nodes.push((n, row));
    }
    let weights = options.weights_as_arguments.then(|| {
        p.initializers
            .iter()
            .map(|(_, t)| t.clone())
            .collect::<Vec<_>>()
    });
    let const_names: std::collections::HashSet<&str> = consts.keys().map(String::as_str).collect();
    let plain: Vec<Node> = nodes.iter().map(|(n, _)| n.clone()).collect();
    let segments = segments::plan(&plain, &p.inputs, &static_inputs, &const_names, &p.outputs);
    let graph = Arc::new(Graph {
        opset: p.opset,
        nodes,
        segments,
        narrow: p
            .inputs
            .iter()
            .filter_map(|s| p.narrow.get(&s.name).map(|&t| (s.name.clone(), t)))
            .collect(),
        weight_names: p.initializers.iter().map(|(n, _)| n.clone()).collect(),
        consts,
        weights_as_arguments: options.weights_as_arguments,
    });
    let mut params = vec![param("inputs", ArgKind::Tree)];
    if options.weights_as_arguments {
        params.push(param("weights", ArgKind::Tree));
    }
    params.push(param("statics", ArgKind::Tree));
    let funcs = (0..graph.segments.len())
        .map(|k| {
            let g = Arc::clone(&graph);
            let fname = match k {
                0 => format!("onnx:{name}"),
                k => format!("onnx:{name}#{k}"),
            };
            JitFn::new(&fname, "", &params, move |vals| {
                let mut leaves = Leaves::new(vals);
                let inputs = Vec::<Tensor>::from_leaves(&mut leaves)?;
                let weights = match g.weights_as_arguments {
                    true => Some(Vec::<Tensor>::from_leaves(&mut leaves)?),
                    false => None,
                };
                let static_leaves = Vec::<i64>::from_leaves(&mut leaves)?;
                leaves.finish()?;
                g.eval(k, &inputs, &static_leaves, weights.as_deref())
            })
        })
        .collect::<Vec<JitFn<'static, Vec<Tensor>>>>();
    if options.dynamic {
        for f in &funcs {
            f.make_dynamic();
        }
    }
    Ok(OnnxModel {
        inputs: p.inputs,
        outputs: p.outputs,
        opset: p.opset,
        ir_version: p.ir_version,
        producer: p.producer,
        ops,
        statics: static_inputs,
        weights,
        funcs,
        graph,
    })
}

impl OnnxModel {
    /// The graph inputs (initializers excluded), in order.
    pub fn inputs(&self) -> &[IoSpec] {
        &self.inputs
    }

    /// The graph outputs, in order.
    pub fn outputs(&self) -> &[IoSpec] {
        &self.outputs
    }

    /// The default-domain opset it imports.
    pub fn opset(&self) -> i64 {
        self.opset
    }

    /// The file's IR version.
    pub fn ir_version(&self) -> i64 {
        self.ir_version
    }

    /// The producer's name and version, as the file gives them.
    pub fn producer(&self) -> &str {
        &self.producer
    }

    /// Each op type the graph uses and how many nodes have it.
    pub fn op_counts(&self) -> &BTreeMap<String, usize> {
        &self.ops
    }

    /// The names of the value-keyed inputs: those whose values must be
    /// known when tracing (a Reshape's shape, a Slice's starts), which key
    /// the compiled program instead of being traced (see
    /// [`MAX_STATIC_ELEMENTS`]).
    pub fn static_inputs(&self) -> Vec<&str> {
        self.inputs
            .iter()
            .zip(&self.statics)
            .filter(|(_, w)| w.is_some())
            .map(|(s, _)| s.name.as_str())
            .collect()
    }

    /// The jit function the model runs as (handler cache, stats, mode):
    /// the first of [`functions`](Self::functions).
    pub fn function(&self) -> &JitFn<'static, Vec<Tensor>> {
        &self.funcs[0]
    }

    /// Where the graph is cut into phases (see [`functions`](Self::functions)):
    /// per cut, the node's name and op, and whether it runs eagerly
    /// between two phases (NonZero and the like) or starts the next one.
    /// Empty when the model is one trace.
    pub fn cuts(&self) -> Vec<(String, String, bool)> {
        let segs = &self.graph.segments;
        let mut out = Vec::new();
        for (k, seg) in segs.iter().enumerate() {
            if let Some(i) = seg.eager {
                let n = &self.graph.nodes[i].0;
                out.push((n.name.clone(), n.op.clone(), true));
            }
            let next_starts_at_a_cut = segs.get(k + 1).is_some_and(|next| {
                seg.eager.is_none_or(|e| next.nodes.start != e + 1) && !next.nodes.is_empty()
            });
            if next_starts_at_a_cut {
                let n = &self.graph.nodes[segs[k + 1].nodes.start].0;
                out.push((n.name.clone(), n.op.clone(), false));
            }
        }
        out
    }

    /// One jit function per traced piece: more than one when an operand
    /// the trace must know (NonZero's input, a Reshape's shape) is
    /// computed from data, so the graph runs in phases (see the module
    /// docs).
    pub fn functions(&self) -> &[JitFn<'static, Vec<Tensor>>] {
        &self.funcs
    }

    /// With [`LoadOptions::weights_as_arguments`], replaces each weight by
    /// `f(weight)` (`|w| w.to(&device)` keeps them on a device); without,
    /// an error.
    pub fn map_weights(&mut self, mut f: impl FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        let Some(w) = self.weights.as_mut() else {
            return Err(onnx_error(
                "",
                "",
                "",
                ErrorKind::BadArgument,
                "weights are program constants: load with `weights_as_arguments`",
            ));
        };
        for t in w.iter_mut() {
            *t = f(t)?;
        }
        Ok(())
    }

    /// Runs the model on named inputs, returning `(name, value)` for each
    /// output in the model's order. Every input must be given once, with
    /// the declared dtype and fixed dims; a symbolic dim takes any size,
    /// the same wherever its name appears. Sequence or optional inputs and
    /// outputs need [`OnnxModel::run_values`].
    pub fn run(&self, inputs: &[(&str, &Tensor)]) -> Result<Vec<(String, Tensor)>> {
        let vals: Vec<(&str, Value)> = inputs
            .iter()
            .map(|(n, t)| (*n, Value::Tensor((*t).clone())))
            .collect();
        let refs: Vec<(&str, &Value)> = vals.iter().map(|(n, v)| (*n, v)).collect();
        tensors_only(self.run_values(&refs)?)
    }

    /// Runs the model on inputs in the model's order.
    pub fn run_positional(&self, inputs: &[&Tensor]) -> Result<Vec<(String, Tensor)>> {
        let vals: Vec<Value> = inputs.iter().map(|t| Value::Tensor((*t).clone())).collect();
        let refs: Vec<&Value> = vals.iter().collect();
        tensors_only(self.run_values_positional(&refs)?)
    }

    /// [`OnnxModel::run`] with values: a sequence input is a
    /// [`Value::Sequence`] (its length keys the compiled program, like a
    /// shape), an empty optional [`Value::None`].
    pub fn run_values(&self, inputs: &[(&str, &Value)]) -> Result<Vec<(String, Value)>> {
        for (name, _) in inputs {
            if !self.inputs.iter().any(|s| s.name == *name) {
                return Err(onnx_error(
                    "",
                    "",
                    name,
                    ErrorKind::BadArgument,
                    "the model has no such input",
                ));
            }
        }
        let mut ordered = Vec::with_capacity(self.inputs.len());
        for s in &self.inputs {
            let mut given = inputs.iter().filter(|(n, _)| *n == s.name);
            let Some((_, t)) = given.next() else {
                return Err(onnx_error(
                    "",
                    "",
                    &s.name,
                    ErrorKind::BadArgument,
                    "this input is missing",
                ));
            };
            if given.next().is_some() {
                return Err(onnx_error(
                    "",
                    "",
                    &s.name,
                    ErrorKind::BadArgument,
                    "this input is given twice",
                ));
            }
            ordered.push(*t);
        }
        self.run_values_positional(&ordered)
    }

    /// [`OnnxModel::run_positional`] with values.
    pub fn run_values_positional(&self, inputs: &[&Value]) -> Result<Vec<(String, Value)>> {
        if inputs.len() != self.inputs.len() {
            return Err(onnx_error(
                "",
                "",
                "",
                ErrorKind::BadArgument,
                format!(
                    "the model takes {} inputs, got {}",
                    self.inputs.len(),
                    inputs.len()
                ),
            ));
        }
        let mut symbols: HashMap<&str, usize> = HashMap::new();
        for (s, v) in self.inputs.iter().zip(inputs) {
            if !s.kind.admits(v) {
                return Err(onnx_error(
                    "",
                    "",
                    &s.name,
                    ErrorKind::BadArgument,
                    format!("expected {s}, got {}", v.what()),
                ));
            }
            match v {
                Value::Tensor(t) => check_input(s, t, &mut symbols)?,
                Value::Sequence(ts) => {
                    for t in ts {
                        // Elements may differ in size: symbols per element.
                        check_input(s, t, &mut HashMap::new())?;
                    }
                }
                Value::None => {}
            }
        }
        // Cut into phases (or one piece that ends with an eager node).
        if self.graph.segments.len() > 1 || self.graph.segments[0].eager.is_some() {
            return self.run_phases(inputs);
        }
        let mut traced: Vec<&Tensor> = Vec::with_capacity(inputs.len());
        let mut static_leaves = Vec::new();
        for ((s, why), v) in self.inputs.iter().zip(&self.statics).zip(inputs) {
            match (why, v) {
                (Some(why), Value::Tensor(t)) => statics::encode(s, why, t, &mut static_leaves)?,
                (_, Value::Tensor(t)) if s.kind == ValueKind::Tensor => traced.push(t),
                (_, Value::Tensor(t)) => {
                    static_leaves.push(LAYOUT_TENSOR);
                    traced.push(t);
                }
                (_, Value::Sequence(ts)) => {
                    static_leaves.push(ts.len() as i64);
                    traced.extend(ts);
                }
                (_, Value::None) => static_leaves.push(LAYOUT_NONE),
            }
        }
        let outs = match &self.weights {
            Some(w) => self.funcs[0].call((&traced, w, &static_leaves)),
            None => self.funcs[0].call((&traced, &static_leaves)),
        }
        .map_err(importer_bug)?;
        let mut outs = outs.into_iter();
        let mut got = Vec::with_capacity(self.outputs.len());
        let lost = || onnx_error("", "", "", ErrorKind::Internal, "an output went missing");
        for s in &self.outputs {
            let v = match s.kind {
                ValueKind::Tensor => Value::Tensor(outs.next().ok_or_else(lost)?),
                _ => match outs.next().ok_or_else(lost)?.item::<i64>()? {
                    LAYOUT_NONE => Value::None,
                    LAYOUT_TENSOR => Value::Tensor(outs.next().ok_or_else(lost)?),
                    n => Value::Sequence(
                        (0..n)
                            .map(|_| outs.next().ok_or_else(lost))
                            .collect::<Result<_>>()?,
                    ),
                },
            };
            got.push((s.name.clone(), v));
        }
        Ok(got)
    }
}

impl OnnxModel {
    /// Runs a graph cut into phases (`segments.rs`; tensors only): each
    /// piece's jit function in order, NonZero and the like eagerly between
    /// them, with concrete values carried by name.
    fn run_phases(&self, inputs: &[&Value]) -> Result<Vec<(String, Value)>> {
        let mut vals: HashMap<String, Tensor> = HashMap::with_capacity(inputs.len());
        for (s, v) in self.inputs.iter().zip(inputs) {
            let Value::Tensor(t) = v else {
                return Err(onnx_error(
                    "",
                    "",
                    &s.name,
                    ErrorKind::Internal,
                    "a graph run in phases takes tensors only",
                ));
            };
            vals.insert(s.name.clone(), t.clone());
        }
        for (k, seg) in self.graph.segments.iter().enumerate() {
            if !seg.nodes.is_empty() {
                let mut traced = Vec::with_capacity(seg.inputs.len());
                let mut static_leaves = Vec::new();
                for (name, why) in seg.inputs.iter().zip(&seg.statics) {
                    let t = vals.get(name).ok_or_else(|| {
                        onnx_error("", "", name, ErrorKind::Internal, "value not computed")
                    })?;
                    match why {
                        Some(why) => {
                            let spec = IoSpec {
                                name: name.clone(),
                                dtype: None,
                                dims: None,
                                kind: ValueKind::Tensor,
                            };
                            statics::encode(&spec, why, t, &mut static_leaves)?
                        }
                        None => traced.push(t),
                    }
                }
                let outs = match &self.weights {
                    Some(w) => self.funcs[k].call((&traced, w, &static_leaves)),
                    None => self.funcs[k].call((&traced, &static_leaves)),
                }
                .map_err(importer_bug)?;
                vals.extend(seg.outputs.iter().cloned().zip(outs));
            }
            if let Some(i) = seg.eager {
                self.graph.eager(i, &mut vals)?;
            }
        }
        self.outputs
            .iter()
            .map(|s| {
                let t = vals
                    .get(&s.name)
                    .or(self.graph.consts.get(&s.name))
                    .cloned()
                    .ok_or_else(|| {
                        onnx_error("", "", &s.name, ErrorKind::Internal, "output not computed")
                    })?;
                Ok((s.name.clone(), Value::Tensor(t)))
            })
            .collect()
    }
}

/// Outputs that must all be tensors ([`OnnxModel::run`]).
fn tensors_only(outs: Vec<(String, Value)>) -> Result<Vec<(String, Tensor)>> {
    outs.into_iter()
        .map(|(name, v)| match v {
            Value::Tensor(t) => Ok((name, t)),
            v => Err(onnx_error(
                "",
                "",
                &name,
                ErrorKind::BadArgument,
                format!(
                    "this output is {}: run the model with `run_values`",
                    v.what()
                ),
            )),
        })
        .collect()
}

fn check_input<'a>(s: &'a IoSpec, t: &Tensor, symbols: &mut HashMap<&'a str, usize>) -> Result<()> {
    if let Some(e) = t.error() {
        return Err(e.clone());
    }
    let bad = |kind, m: String| onnx_error("", "", &s.name, kind, m);
    if let Some(d) = s.dtype {
        if t.dtype() != d {
            return Err(bad(
                ErrorKind::DType,
                format!("expected {s}, got {:?}{:?}", t.dtype(), t.shape()),
            ));
        }
    }
    if let Some(dims) = &s.dims {
        if dims.len() != t.rank() {
            return Err(bad(
                ErrorKind::Shape,
                format!("expected {s}, got shape {:?}", t.shape()),
            ));
        }
        for (d, &n) in dims.iter().zip(t.shape()) {
            match d {
                Dim::Fixed(f) if *f != n => {
                    return Err(bad(
                        ErrorKind::Shape,
                        format!("expected {s}, got shape {:?}", t.shape()),
                    ))
                }
                Dim::Symbol(sym) if sym != "?" => {
                    if let Some(&prev) = symbols.get(sym.as_str()) {
                        if prev != n {
                            return Err(bad(
                                ErrorKind::Shape,
                                format!("`{sym}` is {prev} in another input, {n} here"),
                            ));
                        }
                    }
                    symbols.insert(sym, n);
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// One op type of a model and whether tilejit can run it.
#[derive(Clone, Debug)]
pub struct OpSupport {
    /// The op type (with its domain when not the default one).
    pub op: String,
    /// How many nodes use it.
    pub count: usize,
    /// `None` if every node of it passes the load check, else the first
    /// node's error.
    pub problem: Option<String>,
}

/// What a model file holds, read without failing on unsupported ops
/// (`tilejit onnx info`).
#[derive(Clone, Debug)]
pub struct ModelInfo {
    /// The graph inputs.
    pub inputs: Vec<IoSpec>,
    /// The graph outputs.
    pub outputs: Vec<IoSpec>,
    /// The default-domain opset.
    pub opset: i64,
    /// The IR version.
    pub ir_version: i64,
    /// The producer.
    pub producer: String,
    /// How many initializers.
    pub initializers: usize,
    /// Each op type, in name order.
    pub ops: Vec<OpSupport>,
}

/// Reads a model file and reports its inputs, outputs, opset and each op
/// type's support, without failing on an unsupported op.
pub fn info(path: impl AsRef<Path>) -> Result<ModelInfo> {
    let p = parse_file(path.as_ref())?;
    let consts = constants(&p);
    let cx = Cx {
        opset: p.opset,
        consts: &consts,
        env: None,
    };
    let mut ops: BTreeMap<String, OpSupport> = BTreeMap::new();
    for n in &p.nodes {
        let key = if n.domain.is_empty() {
            n.op.clone()
        } else {
            format!("{}.{}", n.domain, n.op)
        };
        let e = ops.entry(key.clone()).or_insert(OpSupport {
            op: key,
            count: 0,
            problem: None,
        });
        e.count += 1;
        if e.problem.is_none() {
            if let Err(err) = table::check(n, &cx) {
                e.problem = Some(err.to_string());
            }
        }
    }
    Ok(ModelInfo {
        inputs: p.inputs,
        outputs: p.outputs,
        opset: p.opset,
        ir_version: p.ir_version,
        producer: p.producer,
        initializers: p.initializers.len(),
        ops: ops.into_values().collect(),
    })
}

/// Reads one serialized `TensorProto` (the `input_0.pb` files of ONNX's
/// backend tests) as a tensor (a narrow type on its carrier dtype).
pub fn read_tensor_file(path: impl AsRef<Path>) -> Result<Tensor> {
    read_tensor_file_typed(path).map(|(t, _)| t)
}

/// [`read_tensor_file`], also giving ONNX's name of the file's element
/// type when it is a narrow one (`FLOAT8E4M3FN`, `INT4`, ...), whose
/// values the tensor holds exactly on its carrier dtype.
pub fn read_tensor_file_typed(path: impl AsRef<Path>) -> Result<(Tensor, Option<&'static str>)> {
    use onnx_protobuf::Message;
    let path = path.as_ref();
    let file_error = |m: String| Error::File {
        path: path.into(),
        message: m,
    };
    let bytes = tilejit_ir::fallible::read_file(path).map_err(|e| file_error(e.to_string()))?;
    let t = onnx_protobuf::TensorProto::parse_from_bytes(&bytes)
        .map_err(|e| file_error(format!("not a TensorProto: {e}")))?;
    let narrow = narrow::Narrow::from_code(t.data_type).map(|n| n.name());
    Ok((model::decode_tensor(&t, None).map_err(file_error)?, narrow))
}

/// Every op type the importer supports, in table order.
pub fn supported_ops() -> Vec<&'static str> {
    table::op_types().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_while_tracing_a_model_is_reported_as_an_importer_bug() {
        let panic = Error::Panic {
            function: "onnx:model".into(),
            signature: "(f32[2])".into(),
            message: "index out of bounds".into(),
        };
        let e = importer_bug(panic);
        assert_eq!(e.kind(), ErrorKind::Internal);
        let text = e.to_string();
        assert!(
            text.contains("ONNX importer") && text.contains("index out of bounds"),
            "{text}"
        );
        let other = onnx_error("n", "Relu", "", ErrorKind::Shape, "no");
        assert_eq!(importer_bug(other).kind(), ErrorKind::Shape);
    }
}
