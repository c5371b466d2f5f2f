//! `onnx`: model files as an attacker writes them. The input is the bytes
//! of a `.onnx` file (seeds: small models over many op-table rows, built
//! with `tilejit_testkit::onnx`); byte mutations of the protobuf change
//! dims, attribute values, dtype codes, opsets and constants in place. A
//! model that loads is run once on inputs of its declared shapes (a
//! symbolic dim as 2, values from the input's hash), on Host, or on Sim
//! for one input in four, under a 2 s deadline. Every outcome must be `Ok`
//! or an error: a panic, or loading and tracing past the time bound, is a
//! finding, and an abort ends the run (the fuzzer runs under an
//! address-space limit, so an allocation the code does not check aborts
//! rather than swapping).

use super::{hash, sig, Target};
use tilejit::onnx::{self, Dim, ValueKind};
use tilejit::{DType, ErrorKind, RunMode, Tensor};
use tilejit_testkit::onnx::{self as b, proto::NodeProto, D};

pub const TARGET: Target = Target {
    name: "onnx",
    about: "ONNX model files: load, then run on Host or Sim",
    seeds,
    run,
    dict: &[
        "Conv",
        "MatMul",
        "Gemm",
        "Reshape",
        "Transpose",
        "Slice",
        "Gather",
        "Concat",
        "Split",
        "Expand",
        "Tile",
        "Pad",
        "Resize",
        "TopK",
        "NonZero",
        "Range",
        "Loop",
        "If",
        "Einsum",
        "Cast",
        "Where",
        "axis",
        "axes",
        "perm",
        "pads",
        "strides",
        "group",
        "kernel_shape",
    ],
};

/// How long one model may run.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// The most elements an input the run makes may have; a model declaring
/// more is loaded but not run.
const MAX_INPUT: usize = 1 << 14;

fn run(input: &[u8]) -> Result<String, String> {
    let edited;
    let bytes = match input.split_first() {
        Some((&EDITS, rest)) => {
            edited = edit(rest);
            &edited[..]
        }
        _ => input,
    };
    // `TILEJIT_FUZZ_ONNX_DUMP=F` with `--replay`: the model file an edit
    // list made, to read with other tools.
    if let Some(path) = std::env::var_os("TILEJIT_FUZZ_ONNX_DUMP") {
        std::fs::write(path, bytes).map_err(|e| format!("dump: {e}"))?;
    }
    let model = match onnx::from_bytes(bytes) {
        Ok(m) => m,
        Err(e) if matches!(e.kind(), ErrorKind::Panic | ErrorKind::Internal) => {
            return Err(format!("load: {e}"))
        }
        Err(e) => return Ok(onnx_sig("load", &e)),
    };
    let h = hash(input);
    let mut inputs = Vec::new();
    for (i, spec) in model.inputs().iter().enumerate() {
        if spec.kind != ValueKind::Tensor {
            return Ok("loaded: a sequence or optional input".into());
        }
        let dims: Vec<usize> = match &spec.dims {
            Some(d) => d
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => *n,
                    Dim::Symbol(_) => 2,
                })
                .collect(),
            None => vec![2],
        };
        let n = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let Some(n) = n.filter(|&n| n <= MAX_INPUT) else {
            return Ok("loaded: inputs too big to run".into());
        };
        // Small values, so that index and count inputs are often in range.
        let seed = h.wrapping_add(i as u64);
        let vals: Vec<f32> = (0..n)
            .map(|j| ((seed.wrapping_mul(j as u64 + 7) >> 13) % 7) as f32 - 2.0)
            .collect();
        let t = Tensor::from_vec(vals, &dims).map_err(|e| format!("input {i}: {e}"))?;
        inputs.push(t.cast(spec.dtype.unwrap_or(DType::F32)));
    }
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let mode = if h.is_multiple_of(4) {
        RunMode::Sim
    } else {
        RunMode::Host
    };
    // A file may ask for any amount of honest work; the deadline ends it
    // (and checks that a deadline stops an ONNX run). Tracing and loading
    // are not under it: work there must be bounded by the checks.
    let limited = || tilejit::with_deadline(DEADLINE, || model.run_positional(&refs));
    match tilejit::with_mode(mode, limited) {
        Ok(out) => Ok(format!("ran: {} outputs", out.len())),
        // The traced body is tilejit's importer, not a user's code: its
        // panic (caught by the call) or an internal error is a bug.
        Err(e) if matches!(e.kind(), ErrorKind::Panic | ErrorKind::Internal) => {
            Err(format!("run on {mode:?}: {e}"))
        }
        Err(e) => Ok(onnx_sig("run", &e)),
    }
}

/// Attribute and input names a signature keeps (others are value names).
const ATTRIBUTES: [&str; 34] = [
    "axis",
    "axes",
    "perm",
    "pads",
    "strides",
    "group",
    "kernel_shape",
    "dilations",
    "scales",
    "sizes",
    "shape",
    "k",
    "K",
    "mode",
    "to",
    "value",
    "equation",
    "split",
    "starts",
    "ends",
    "steps",
    "inputs",
    "keepdims",
    "epsilon",
    "transA",
    "transB",
    "repeats",
    "depth",
    "upper",
    "reverse",
    "roi",
    "indices",
    "outputs",
    "ceil_mode",
];

/// A signature that tells ONNX errors apart by op, attribute and message
/// (the common one would cut them all at the kind's code).
fn onnx_sig(stage: &str, e: &tilejit::Error) -> String {
    match e.root() {
        tilejit::Error::Onnx {
            op,
            attribute,
            message,
            ..
        } => {
            // Mutated names would make every input new: only known ops
            // and plain attribute names tell behaviours apart.
            let op = if onnx::supported_ops().contains(&op.as_str()) {
                op.as_str()
            } else {
                "?"
            };
            let attribute = if ATTRIBUTES.contains(&attribute.as_str()) {
                attribute.as_str()
            } else {
                "?"
            };
            sig(&format!("{stage} {op}.{attribute}"), message)
        }
        other => {
            let full = other.to_string();
            let msg = full.split_once("]: ").map_or(full.as_str(), |(_, m)| m);
            sig(stage, &msg)
        }
    }
}

fn fixed(dims: &[i64]) -> Vec<D> {
    dims.iter().map(|&d| D::N(d)).collect()
}

fn ramp(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i as f32 * 0.37).sin()).collect()
}

/// One seed: `nodes` from `x` (f32, `dims`) to `y`, with initializers.
fn seed(
    opset: i64,
    nodes: Vec<NodeProto>,
    dims: &[D],
    init: Vec<b::proto::TensorProto>,
) -> Vec<u8> {
    b::encode(&b::model(
        opset,
        nodes,
        vec![b::value("x", b::FLOAT, dims)],
        vec![any_shape("y")],
        init,
    ))
}

/// An f32 graph output whose shape the model leaves open.
fn any_shape(name: &str) -> b::proto::ValueInfoProto {
    let mut v = b::value(name, b::FLOAT, &[]);
    if let Some(b::proto::type_proto::Value::TensorType(t)) =
        v.type_.as_mut().and_then(|t| t.value.as_mut())
    {
        t.shape.clear();
    }
    v
}

/// An input starting with this byte is a base model's index and a list of
/// edits (see [`edit`]), not a file: byte mutations of a protobuf mostly
/// break its framing, edits reach the importer's checks with values an
/// attacker would pick.
const EDITS: u8 = b'E';

/// Integers an edit writes into attributes, initializers and dims.
const INTERESTING: [i64; 18] = [
    0,
    1,
    -1,
    2,
    -2,
    3,
    7,
    64,
    -64,
    4096,
    4097,
    1 << 31,
    -(1 << 31),
    1 << 40,
    i32::MAX as i64,
    i64::MAX,
    i64::MIN,
    -7,
];

/// Floats an edit writes.
const INTERESTING_F: [f32; 10] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    1e-30,
    1e30,
    f32::INFINITY,
    f32::NAN,
    4294967296.0,
];

/// Reads the input as a stream of choices (zeros past its end).
struct Choices<'a>(&'a [u8], usize);

impl Choices<'_> {
    fn next(&mut self) -> usize {
        let b = self.0.get(self.1).copied().unwrap_or(0);
        self.1 += 1;
        b as usize
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    fn more(&self) -> bool {
        self.1 < self.0.len()
    }
}

/// The base model `choices[0]` (a seed, decoded) with the edits the rest
/// of the bytes choose, encoded again.
fn edit(choices: &[u8]) -> Vec<u8> {
    use b::protobuf::Message;
    static BASES: std::sync::OnceLock<Vec<b::proto::ModelProto>> = std::sync::OnceLock::new();
    let bases = BASES.get_or_init(|| {
        files()
            .iter()
            .filter_map(|s| b::proto::ModelProto::parse_from_bytes(s).ok())
            .collect()
    });
    let mut c = Choices(choices, 0);
    let Some(mut m) = bases.get(c.below(bases.len())).cloned() else {
        return Vec::new();
    };
    let ops = onnx::supported_ops();
    let Some(g) = m.graph.as_mut() else {
        return Vec::new();
    };
    for _ in 0..8 {
        if !c.more() {
            break;
        }
        let what = c.next();
        let nn = g.node.len();
        match what % 8 {
            // An attribute's int, one of its ints, or its float.
            0..=2 => {
                let Some(node) = g.node.get_mut(c.below(nn)) else {
                    continue;
                };
                let na = node.attribute.len();
                let Some(a) = node.attribute.get_mut(c.below(na)) else {
                    continue;
                };
                match what % 8 {
                    0 => a.i = INTERESTING[c.below(INTERESTING.len())],
                    1 if !a.ints.is_empty() => {
                        let k = c.below(a.ints.len());
                        a.ints[k] = INTERESTING[c.below(INTERESTING.len())];
                    }
                    1 => a.ints.push(INTERESTING[c.below(INTERESTING.len())]),
                    _ => a.f = INTERESTING_F[c.below(INTERESTING_F.len())],
                }
            }
            // An initializer's value (its data stays consistent).
            3 => {
                let ni = g.initializer.len();
                let Some(t) = g.initializer.get_mut(c.below(ni)) else {
                    continue;
                };
                if !t.int64_data.is_empty() {
                    let k = c.below(t.int64_data.len());
                    t.int64_data[k] = INTERESTING[c.below(INTERESTING.len())];
                } else if t.raw_data.len() >= 4 {
                    let k = c.below(t.raw_data.len() / 4) * 4;
                    let f = INTERESTING_F[c.below(INTERESTING_F.len())];
                    t.raw_data[k..k + 4].copy_from_slice(&f.to_le_bytes());
                }
            }
            // An initializer's shape, its data cut or grown to match.
            4 => {
                let ni = g.initializer.len();
                let Some(t) = g.initializer.get_mut(c.below(ni)) else {
                    continue;
                };
                let rank = c.below(4);
                t.dims = (0..rank).map(|_| c.below(5) as i64).collect();
                let n = t.dims.iter().product::<i64>() as usize;
                if !t.int64_data.is_empty() {
                    t.int64_data.resize(n, 1);
                } else if !t.raw_data.is_empty() {
                    t.raw_data.resize(n * 4, 0);
                }
            }
            // A node becomes another op of the table.
            5 => {
                if let Some(node) = g.node.get_mut(c.below(nn)) {
                    node.op_type = ops[c.below(ops.len())].to_string();
                }
            }
            // A node reads another value, or an absent one.
            6 => {
                let names: Vec<String> = g
                    .node
                    .iter()
                    .flat_map(|n| n.output.iter().cloned())
                    .chain(g.initializer.iter().map(|t| t.name.clone()))
                    .chain([String::new(), "x".into()])
                    .collect();
                let pick = names[c.below(names.len())].clone();
                if let Some(node) = g.node.get_mut(c.below(nn)) {
                    let ni = node.input.len();
                    match node.input.get_mut(c.below(ni + 1)) {
                        Some(slot) => *slot = pick,
                        None => node.input.push(pick),
                    }
                }
            }
            // The graph input's dims.
            _ => {
                let Some(v) = g.input.first_mut() else {
                    continue;
                };
                let rank = c.below(5);
                *v = b::value(
                    &v.name.clone(),
                    b::FLOAT,
                    &(0..rank)
                        .map(|_| match c.below(6) {
                            5 => D::S("n"),
                            d => D::N(d as i64),
                        })
                        .collect::<Vec<_>>(),
                );
            }
        }
    }
    m.write_to_bytes().unwrap_or_default()
}

/// Small models over the rows an exported network uses, plus the ones
/// whose attributes or constant inputs decide shapes (as files), and each
/// as the base of an edit list (none, and two of the first edits).
fn seeds() -> Vec<Vec<u8>> {
    let files = files();
    let mut out = files.clone();
    for i in 0..files.len() as u8 {
        out.push(vec![EDITS, i]);
        out.push(vec![EDITS, i, 0, 0, 0, 3, 1, 1, 0, 2, 5, 4, 0, 9]);
    }
    // Seed 7 found it: a conv whose packed operands would take 309 GB
    // failed as an internal error; it is an out-of-memory one.
    out.push(vec![
        0x45, 0x00, 0x00, 0x74, 0x65, 0x1a, 0x65, 0x19, 0xa0, 0x61, 0x74, 0x65, 0x72, 0x0a, 0x1a,
    ]);
    out
}

/// The seed models, encoded.
fn files() -> Vec<Vec<u8>> {
    let n = |op: &str, ins: &[&str], outs: &[&str], attrs| b::node(op, op, ins, outs, attrs);
    let x4 = fixed(&[1, 2, 5, 5]);
    let mut out = vec![
        // A CNN stem: conv, relu, pool, flatten, gemm.
        seed(
            17,
            vec![
                n(
                    "Conv",
                    &["x", "w", "cb"],
                    &["c"],
                    vec![
                        b::ints("pads", &[1, 1, 1, 1]),
                        b::ints("strides", &[1, 1]),
                        b::ints("dilations", &[1, 1]),
                        b::int("group", 1),
                    ],
                ),
                n("Relu", &["c"], &["r"], vec![]),
                n(
                    "MaxPool",
                    &["r"],
                    &["p"],
                    vec![
                        b::ints("kernel_shape", &[2, 2]),
                        b::ints("strides", &[2, 2]),
                        b::ints("pads", &[0, 0, 1, 1]),
                    ],
                ),
                n("Flatten", &["p"], &["f"], vec![b::int("axis", 1)]),
                n(
                    "Gemm",
                    &["f", "gw", "gb"],
                    &["y"],
                    vec![b::int("transB", 1)],
                ),
            ],
            &x4,
            vec![
                b::f32s("w", &[3, 2, 3, 3], &ramp(54)),
                b::f32s("cb", &[3], &[0.1, 0.2, 0.3]),
                b::f32s("gw", &[4, 27], &ramp(108)),
                b::f32s("gb", &[4], &ramp(4)),
            ],
        ),
        // Attention-like: matmul, add, softmax, layer norm.
        seed(
            17,
            vec![
                n("MatMul", &["x", "m"], &["a"], vec![]),
                n("Add", &["a", "bias"], &["s"], vec![]),
                n("Softmax", &["s"], &["p"], vec![b::int("axis", -1)]),
                n(
                    "LayerNormalization",
                    &["p", "g", "bias"],
                    &["y"],
                    vec![b::int("axis", -1), b::float("epsilon", 1e-5)],
                ),
            ],
            &[D::S("batch"), D::N(3), D::N(4)],
            vec![
                b::f32s("m", &[4, 4], &ramp(16)),
                b::f32s("bias", &[4], &ramp(4)),
                b::f32s("g", &[4], &[1.0; 4]),
            ],
        ),
        // Shape plumbing from constant inputs.
        seed(
            17,
            vec![
                n("Reshape", &["x", "shape"], &["r"], vec![]),
                n("Transpose", &["r"], &["t"], vec![b::ints("perm", &[1, 0])]),
                n(
                    "Slice",
                    &["t", "starts", "ends", "axes", "steps"],
                    &["s"],
                    vec![],
                ),
                n("Gather", &["s", "idx"], &["g"], vec![b::int("axis", 0)]),
                n("Concat", &["g", "g"], &["c"], vec![b::int("axis", 1)]),
                n(
                    "Split",
                    &["c", "split"],
                    &["y", "z"],
                    vec![b::int("axis", 1)],
                ),
            ],
            &fixed(&[2, 6]),
            vec![
                b::i64s("shape", &[2], &[-1, 4]),
                b::i64s("starts", &[2], &[0, 3]),
                b::i64s("ends", &[2], &[4, -4]),
                b::i64s("axes", &[2], &[0, 1]),
                b::i64s("steps", &[2], &[1, -1]),
                b::i64s("idx", &[2], &[1, -1]),
                b::i64s("split", &[2], &[1, 5]),
            ],
        ),
        // Sizes from constants: expand, tile, constant-of-shape, pad.
        seed(
            17,
            vec![
                n("Expand", &["x", "eshape"], &["e"], vec![]),
                n("Tile", &["e", "reps"], &["t"], vec![]),
                n(
                    "ConstantOfShape",
                    &["cshape"],
                    &["k"],
                    vec![b::tensor("value", b::f32s("", &[1], &[0.5]))],
                ),
                n("Add", &["t", "k"], &["a"], vec![]),
                n(
                    "Pad",
                    &["a", "pads", "pv"],
                    &["y"],
                    vec![b::string("mode", "reflect")],
                ),
            ],
            &fixed(&[1, 3]),
            vec![
                b::i64s("eshape", &[2], &[2, 3]),
                b::i64s("reps", &[2], &[2, 1]),
                b::i64s("cshape", &[2], &[4, 3]),
                b::i64s("pads", &[4], &[1, 0, 1, 2]),
                b::f32s("pv", &[], &[0.0]),
            ],
        ),
        // Resize by scales, then reductions with axes as an input.
        seed(
            18,
            vec![
                n(
                    "Resize",
                    &["x", "", "scales"],
                    &["r"],
                    vec![
                        b::string("mode", "linear"),
                        b::string("coordinate_transformation_mode", "half_pixel"),
                    ],
                ),
                n(
                    "ReduceSum",
                    &["r", "raxes"],
                    &["s"],
                    vec![b::int("keepdims", 0)],
                ),
                n("CumSum", &["s", "cax"], &["y"], vec![b::int("reverse", 1)]),
            ],
            &x4,
            vec![
                b::f32s("scales", &[4], &[1.0, 1.0, 2.0, 1.5]),
                b::i64s("raxes", &[1], &[1]),
                b::i64s("cax", &[], &[-1]),
            ],
        ),
        // Data-dependent shapes and counts: TopK, NonZero, Range.
        seed(
            17,
            vec![
                n("TopK", &["x", "k"], &["v", "i"], vec![b::int("axis", -1)]),
                n("NonZero", &["i"], &["nz"], vec![]),
                n("ReduceMax", &["nz"], &["m"], vec![b::int("keepdims", 0)]),
                n("Range", &["zero", "m", "one"], &["rg"], vec![]),
                n("Cast", &["rg"], &["rf"], vec![b::int("to", 1)]),
                n("ReduceSum", &["v"], &["vs"], vec![b::int("keepdims", 0)]),
                n("Add", &["rf", "vs"], &["y"], vec![]),
            ],
            &fixed(&[2, 5]),
            vec![
                b::i64s("k", &[1], &[3]),
                b::i64s("zero", &[], &[0]),
                b::i64s("one", &[], &[1]),
            ],
        ),
        // Gathers and scatters with constant indices.
        seed(
            17,
            vec![
                n(
                    "GatherElements",
                    &["x", "gi"],
                    &["g"],
                    vec![b::int("axis", 1)],
                ),
                n("ScatterND", &["g", "si", "su"], &["s"], vec![]),
                n("GatherND", &["s", "ni"], &["y"], vec![]),
            ],
            &fixed(&[2, 3]),
            vec![
                b::i64s("gi", &[2, 2], &[0, 2, 1, -1]),
                b::i64s("si", &[1, 2], &[1, 0]),
                b::f32s("su", &[1], &[9.0]),
                b::i64s("ni", &[2, 1], &[1, 0]),
            ],
        ),
        // Einsum, Trilu, OneHot, Where over a comparison.
        seed(
            17,
            vec![
                n(
                    "Einsum",
                    &["x", "x"],
                    &["e"],
                    vec![b::string("equation", "ij,kj->ik")],
                ),
                n("Trilu", &["e", "kd"], &["t"], vec![b::int("upper", 0)]),
                n(
                    "OneHot",
                    &["oi", "depth", "ov"],
                    &["o"],
                    vec![b::int("axis", -1)],
                ),
                n("Greater", &["t", "half"], &["c"], vec![]),
                n("Where", &["c", "t", "o"], &["y"], vec![]),
            ],
            &fixed(&[3, 3]),
            vec![
                b::i64s("kd", &[], &[0]),
                b::i64s("oi", &[3], &[0, 2, -1]),
                b::i64s("depth", &[], &[3]),
                b::f32s("ov", &[2], &[0.0, 1.0]),
                b::f32s("half", &[], &[0.5]),
            ],
        ),
        // Quantization round trip.
        seed(
            17,
            vec![
                n("QuantizeLinear", &["x", "sc", "zp"], &["q"], vec![]),
                n("DequantizeLinear", &["q", "sc", "zp"], &["y"], vec![]),
            ],
            &fixed(&[2, 3]),
            vec![b::f32s("sc", &[], &[0.05]), {
                let mut t = b::i64s("zp", &[], &[3]);
                t.data_type = 2; // uint8
                t.int64_data.clear();
                t.int32_data = vec![3];
                t
            }],
        ),
    ];
    // Control flow: If on a comparison, Loop with a constant trip count.
    let then_g = b::graph(
        "then_branch",
        vec![n("Neg", &["x"], &["tn"], vec![])],
        vec![],
        vec![b::value("tn", b::FLOAT, &fixed(&[2, 2]))],
    );
    let else_g = b::graph(
        "else_branch",
        vec![n("Abs", &["x"], &["ea"], vec![])],
        vec![],
        vec![b::value("ea", b::FLOAT, &fixed(&[2, 2]))],
    );
    let body = b::graph(
        "body",
        vec![
            n("Identity", &["cond_in"], &["cond_out"], vec![]),
            n("Mul", &["acc", "two"], &["acc_out"], vec![]),
        ],
        vec![
            b::value("iter", b::INT64, &[]),
            b::value("cond_in", 9, &[]),
            b::value("acc", b::FLOAT, &fixed(&[2, 2])),
        ],
        vec![
            b::value("cond_out", 9, &[]),
            b::value("acc_out", b::FLOAT, &fixed(&[2, 2])),
        ],
    );
    let mut cond = b::i64s("cond", &[], &[]);
    cond.data_type = 9;
    cond.int64_data.clear();
    cond.int32_data = vec![1];
    out.push(seed(
        17,
        vec![
            n("ReduceSum", &["x"], &["s"], vec![b::int("keepdims", 0)]),
            n("Greater", &["s", "zero"], &["c"], vec![]),
            n("If", &["c"], &["i"], vec![then_g, else_g]),
            n("Loop", &["trips", "cond", "i"], &["y"], vec![body]),
        ],
        &fixed(&[2, 2]),
        vec![
            b::f32s("zero", &[], &[0.0]),
            b::f32s("two", &[], &[2.0]),
            b::i64s("trips", &[], &[3]),
            cond,
        ],
    ));
    out
}
