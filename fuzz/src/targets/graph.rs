//! `graph`: the graph text parser; for graphs that parse, the print/parse
//! round trip and the verifier; for verified graphs of bounded size, the
//! reference interpreter on random inputs, `simplify` (whose result must
//! compute the same bits), fusion and the kernel program's verifier and
//! text round trip.

use super::{files, hash, sig, Target};
use crate::rng::Rng;
use tilejit_ir::interp;
use tilejit_ir::kernel::{fuse, parse_program, verify_program};
use tilejit_ir::passes::simplify;
use tilejit_ir::text::parse;
use tilejit_ir::verify::verify;
use tilejit_ir::{Array, Buffer, DType, Graph, Lit, Op, TensorType};

pub const TARGET: Target = Target {
    name: "graph",
    about: "graph text parser, round trip, verifier, interpreter, simplify, fuse",
    seeds,
    run,
    dict: &[
        "input",
        "param",
        "full",
        "const",
        "add",
        "sub",
        "mul",
        "div",
        "max",
        "min",
        "pow",
        "matmul",
        "reshape",
        "broadcast",
        "cast",
        "permute",
        "reduce_sum",
        "reduce_max",
        "reduce_min",
        "select",
        "eq",
        "lt",
        "le",
        "ne",
        "exp",
        "log",
        "sqrt",
        "neg",
        "abs",
        "tanh",
        "f32",
        "f64",
        "f16",
        "bf16",
        "i32",
        "i64",
        "bool",
        "axes=",
        "perm=",
        "%0",
        "%1",
        "%2",
        "return",
        "graph {",
        "}",
        "[]",
        "[0]",
        "true",
        "false",
    ],
};

/// Most elements of any node, and most elementary steps of a whole run,
/// that the interpreter is given.
const MAX_NUMEL: usize = 4096;
const MAX_WORK: usize = 1 << 20;

fn seeds() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = files("tests/golden", ".graph")
        .into_iter()
        .chain(files("tests/golden/fusion", ".graph"))
        .map(|(_, b)| b)
        .collect();
    out.push(b"graph {\n  %0 = input 0 : f32[2,3]\n  %1 = param 0 : f32[]\n  %2 = broadcast %1 : f32[2,3]\n  %3 = div %0, %2 : f32[2,3]\n  return %3\n}\n".to_vec());
    // A pooling over a width of 2^32: its edge runs were found position
    // by position, seconds of parsing (a hang the fuzzer found).
    out.push(b"graph {\n  %0 = input 0 : f32[2,3,8,4294967296]\n  %1 = pool_max %0 window=[3, 3, 2, 1] : f32[2,3,4,4]\n  return %1\n}\n".to_vec());
    out.push(b"graph {\n  %0 = input 0 : i32[4]\n  %1 = const [0, -1, 2147483647, -2147483648] : i32[4]\n  %2 = div %0, %1 : i32[4]\n  %3 = cast %2 : f16[4]\n  return %3, %0\n}\n".to_vec());
    out
}

fn run(input: &[u8]) -> Result<String, String> {
    let Ok(text) = std::str::from_utf8(input) else {
        return Ok("not utf-8".into());
    };
    let g = match parse(text) {
        Ok(g) => g,
        Err(e) => return Ok(sig("parse", &e)),
    };
    let printed = g.to_string();
    let again =
        parse(&printed).map_err(|e| format!("the printed graph does not parse: {e}\n{printed}"))?;
    if again.to_string() != printed {
        return Err(format!(
            "print -> parse -> print changed the text:\n{printed}---\n{again}"
        ));
    }
    if let Err(e) = verify(&g) {
        return Ok(sig("verify", &e));
    }
    if work(&g).is_none_or(|w| w > MAX_WORK) {
        return Ok("verified, too big to run".into());
    }
    let mut rng = Rng::new(hash(input));
    let inputs: Vec<Array> = g
        .input_types()
        .into_iter()
        .map(|t| random_array(&mut rng, t))
        .collect::<Result<_, _>>()?;
    let params: Vec<Lit> = g
        .param_types()
        .into_iter()
        .map(|d| random_lit(&mut rng, d))
        .collect();
    let want = match interp::run(&g, &inputs, &params) {
        Ok(v) => v,
        Err(e) => return Ok(sig("interp", &e)),
    };
    let s = simplify(&g, true).map_err(|e| format!("simplify failed on a verified graph: {e}"))?;
    let got = interp::run(&s, &inputs, &params)
        .map_err(|e| format!("the simplified graph does not run: {e}\n{s}"))?;
    if !same_bits(&want, &got) {
        return Err(format!(
            "simplify changed the results\nbefore:\n{g}after:\n{s}"
        ));
    }
    let kp = match fuse(&s) {
        Ok(kp) => kp,
        Err(e) => return Ok(sig("fuse", &e)),
    };
    verify_program(&kp)
        .map_err(|e| format!("fuse made a program that fails verification: {e}\n{kp}"))?;
    let ktext = kp.to_string();
    let back = parse_program(&ktext)
        .map_err(|e| format!("the printed kernel program does not parse: {e}\n{ktext}"))?;
    if back != kp {
        return Err(format!(
            "the fused program reads back different:\n{ktext}---\n{back}"
        ));
    }
    Ok(format!("fused into {} kernels", kp.kernels.len().min(4)))
}

/// Elementary steps the interpreter takes on `g` (about), or `None` when a
/// node has more than [`MAX_NUMEL`] elements.
fn work(g: &Graph) -> Option<usize> {
    let mut total = 0usize;
    for n in g.nodes() {
        let numel = n.ty.shape.checked_numel().filter(|&x| x <= MAX_NUMEL)?;
        let mut w = numel;
        for o in n.op.operands() {
            w += g.ty(o).shape.numel();
        }
        if let Op::MatMul(a, _) = n.op {
            w = w.saturating_mul(g.ty(a).shape.dims().last().copied().unwrap_or(1).max(1));
        }
        total = total.saturating_add(w);
    }
    Some(total)
}

/// A value drawn mostly from the edges: zeros, signs, NaN, infinities,
/// integer extremes.
fn random_lit(rng: &mut Rng, d: DType) -> Lit {
    if d == DType::Bool {
        return Lit::Bool(rng.one_in(2));
    }
    let r = rng.next_u64();
    if d.is_float() {
        let v = *rng.pick(&[
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            3.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e30,
            -1e-30,
            65504.0,
            (r % 2000) as f64 / 100.0 - 10.0,
        ]);
        Lit::from_f64(v, d)
    } else {
        let v = *rng.pick(&[
            0,
            1,
            -1,
            2,
            7,
            // u8 and i8 edges (wrapped into the dtype).
            127,
            128,
            255,
            -128,
            i32::MAX as i64,
            i32::MIN as i64,
            i64::MAX,
            i64::MIN,
            r as i64 % 100,
        ]);
        Lit::from_i64(v, d)
    }
}

fn random_array(rng: &mut Rng, t: TensorType) -> Result<Array, String> {
    let n = t.shape.numel();
    let lits: Vec<Lit> = (0..n).map(|_| random_lit(rng, t.dtype)).collect();
    Buffer::from_lits(t.dtype, lits.into_iter())
        .and_then(|b| Array::new(t.shape, b))
        .map_err(|e| format!("cannot build an input of {t}: {e}"))
}

/// Equal element for element, bit for bit (any NaN equals any NaN).
fn same_bits(a: &[Array], b: &[Array]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.ty() == y.ty()
                && (0..x.buffer().len()).all(|i| match (x.buffer().get(i), y.buffer().get(i)) {
                    (Lit::Float(p), Lit::Float(q)) => {
                        p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan())
                    }
                    (p, q) => p == q,
                })
        })
}
