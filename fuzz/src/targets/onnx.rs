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
    let model = match onnx::from_bytes(input) {
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

/// Small models over the rows an exported network uses, plus the ones
/// whose attributes or constant inputs decide shapes.
fn seeds() -> Vec<Vec<u8>> {
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
