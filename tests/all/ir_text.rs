//! The graph IR's text form: print -> parse -> print round trips, parse
//! errors, golden files of traced and simplified graphs (`BLESS=1`).

use tilejit::prelude::*;
use tilejit_ir::passes::simplify;
use tilejit_ir::text::parse;
use tilejit_ir::verify::verify;
use tilejit_ir::{interp, Array, Graph};
use tilejit_tests::check_golden;

const EVERY_OP: &str = "\
graph {
  %0 = input 0 : f32[2,3]
  %1 = input 1 : f32[3]
  %2 = param 0 : f32[]
  %3 = full 1e-5 : f32[2,3]
  %4 = const [1.0, -0.5, NaN] : f32[3]
  %5 = broadcast %1 : f32[2,3]
  %6 = add %0, %5 : f32[2,3]
  %7 = sub %6, %3 : f32[2,3]
  %8 = mul %7, %7 : f32[2,3]
  %9 = div %8, %3 : f32[2,3]
  %10 = max %9, %0 : f32[2,3]
  %11 = min %10, %0 : f32[2,3]
  %12 = neg %11 : f32[2,3]
  %13 = abs %12 : f32[2,3]
  %14 = square %13 : f32[2,3]
  %15 = relu %14 : f32[2,3]
  %16 = exp %15 : f32[2,3]
  %17 = log %16 : f32[2,3]
  %18 = sqrt %17 : f32[2,3]
  %19 = rsqrt %18 : f32[2,3]
  %20 = recip %19 : f32[2,3]
  %21 = tanh %20 : f32[2,3]
  %22 = sigmoid %21 : f32[2,3]
  %23 = gelu %22 : f32[2,3]
  %24 = lt %23, %0 : bool[2,3]
  %25 = gt %23, %0 : bool[2,3]
  %26 = le %23, %0 : bool[2,3]
  %27 = ge %23, %0 : bool[2,3]
  %28 = eq %23, %0 : bool[2,3]
  %29 = select %24, %23, %0 : f32[2,3]
  %30 = reduce_sum %29 axes=[1] : f32[2,1]
  %31 = reduce_max %29 axes=[0, 1] : f32[1,1]
  %32 = reduce_min %29 axes=[0] : f32[1,3]
  %33 = permute %29 perm=[1, 0] : f32[3,2]
  %34 = matmul %29, %33 : f32[2,2]
  %35 = reshape %29 : f32[6]
  %36 = cast %35 : f16[6]
  %37 = cast %36 : i64[6]
  %38 = full 7 : i64[6]
  %39 = full true : bool[6]
  %40 = broadcast %2 : f32[3]
  %41 = add %4, %40 : f32[3]
  %42 = slice %29 start=[1, 1] : f32[1,2]
  %43 = cat %29, %0 axis=0 : f32[4,3]
  %44 = cast %0 : i32[2,3]
  %45 = gather %43, %44 axis=0 : f32[2,3]
  %46 = sin %23 : f32[2,3]
  %47 = cos %46 : f32[2,3]
  %48 = erf %47 : f32[2,3]
  %49 = floor %48 : f32[2,3]
  %50 = ceil %49 : f32[2,3]
  %51 = round %50 : f32[2,3]
  %52 = sign %51 : f32[2,3]
  %53 = pow %52, %0 : f32[2,3]
  %54 = rem %53, %0 : f32[2,3]
  %55 = reduce_prod %29 axes=[1] : f32[2,1]
  %56 = reshape %0 : f32[1,1,2,3]
  %57 = reshape %1 : f32[3,1]
  %58 = conv %56, %57 window=[1, 3, 1, 1] : f32[1,4,3,1]
  %59 = atan %23 : f32[2,3]
  %60 = asin %59 : f32[2,3]
  %61 = acos %60 : f32[2,3]
  %62 = asinh %61 : f32[2,3]
  %63 = acosh %62 : f32[2,3]
  %64 = atanh %63 : f32[2,3]
  %65 = and %44, %44 : i32[2,3]
  %66 = or %65, %44 : i32[2,3]
  %67 = xor %66, %44 : i32[2,3]
  %68 = shl %67, %44 : i32[2,3]
  %69 = shr %68, %44 : i32[2,3]
  %70 = pool_max %56 window=[1, 2, 1, 0] : f32[1,1,2,2]
  %71 = pool_sum %56 window=[2, 2, 1, 1, 1, 1, 0, 0, 1, 1, 1] : f32[1,1,2,3]
  %72 = pool_min %56 window=[2, 2, 1, 0] : f32[1,1,1,2]
  return %34, %37, %41, %30, %31, %32, %25, %26, %27, %28, %38, %39, %42, %43, %45, %54, %55, %58, %64, %69, %70, %71, %72
}
";

#[test]
fn every_op_round_trips() {
    let g = parse(EVERY_OP).unwrap_or_else(|e| panic!("{e}"));
    verify(&g).unwrap();
    let printed = g.to_string();
    assert_eq!(
        printed, EVERY_OP,
        "the canonical form prints back identically"
    );
    let again = parse(&printed).unwrap().to_string();
    assert_eq!(again, printed);
}

#[test]
fn literals_round_trip_exactly() {
    let text = "graph {\n  %0 = full 0.1 : f32[]\n  %1 = full 0.1 : f64[]\n  %2 = full 0.0999755859375 : f16[]\n  %3 = full -0.0 : bf16[]\n  %4 = full -9223372036854775808 : i64[]\n  %5 = full inf : f32[]\n  return %0, %1, %2, %3, %4, %5\n}\n";
    let g = parse(text).unwrap();
    let out = interp::run(&g, &[], &[]).unwrap();
    assert_eq!(out[0].as_slice::<f32>().unwrap(), &[0.1f32]);
    assert_eq!(out[1].as_slice::<f64>().unwrap(), &[0.1f64]);
    assert_eq!(
        out[2].as_slice::<half::f16>().unwrap(),
        &[half::f16::from_f64(0.1)]
    );
    assert!(out[3].as_slice::<half::bf16>().unwrap()[0].is_sign_negative());
    assert_eq!(out[4].as_slice::<i64>().unwrap(), &[i64::MIN]);
    assert_eq!(parse(&g.to_string()).unwrap().to_string(), g.to_string());
}

#[test]
fn parse_errors_name_the_line() {
    let cases = [
        ("graph {\n  %0 = input 0 : f32[2]\n  %1 = frobnicate %0 : f32[2]\n  return %1\n}\n", 3, "unknown op"),
        ("graph {\n  %0 = input 0 : f32[2]\n  %1 = add %0, %9 : f32[2]\n  return %1\n}\n", 3, "unknown node `%9`"),
        ("graph {\n  %0 = input 0 : f32[2]\n  %1 = exp %0 : f32[3]\n  return %1\n}\n", 3, "declared type f32[3]"),
        ("graph {\n  %0 = input 0 : f32[2]\n  %1 = input 1 : f64[2]\n  %2 = add %0, %1 : f32[2]\n  return %2\n}\n", 4, "mixed dtypes"),
        ("graph {\n  %0 = input 0 : q7[2]\n  return %0\n}\n", 2, "unknown dtype"),
        ("graph {\n  %0 = full 1.5 : i32[]\n  return %0\n}\n", 2, "bad i32 literal"),
        ("graph {\n  %0 = input 0 : f32[2]\n", 3, "unexpected end"),
        ("%0 = input 0 : f32[2]\n", 1, "expected `graph {`"),
        ("graph {\n  %0 = const [1.0] : f32[2]\n  return %0\n}\n", 2, "1 elements for shape [2]"),
        ("graph {\n  %0 = input 0 : f32[2]\n  %0 = input 1 : f32[2]\n  return %0\n}\n", 3, "duplicate"),
    ];
    for (text, line, needle) in cases {
        let e = parse(text).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("line {line}:")) && msg.contains(needle),
            "want line {line} `{needle}`, got: {msg}"
        );
    }
}

#[test]
fn verifier_rejects_what_a_broken_pass_could_produce() {
    use tilejit_ir::{DType, Node, NodeId, Op, Shape, TensorType, UnaryOp};
    let ty = TensorType::new(DType::F32, Shape::new(&[2]).unwrap());
    let mut g = Graph::new();
    g.push_unchecked(Node {
        op: Op::Unary(UnaryOp::Exp, NodeId(1)),
        ty,
    });
    g.push_unchecked(Node {
        op: Op::Input { index: 0, ty },
        ty,
    });
    assert!(verify(&g)
        .unwrap_err()
        .to_string()
        .contains("not defined before its use"));
    let mut g = Graph::new();
    g.push_unchecked(Node {
        op: Op::Input { index: 1, ty },
        ty,
    });
    assert!(verify(&g)
        .unwrap_err()
        .to_string()
        .contains("input indices [1] are not 0..1"));
    let mut g = Graph::new();
    let x = g.push_unchecked(Node {
        op: Op::Input { index: 0, ty },
        ty,
    });
    g.push_unchecked(Node {
        op: Op::Unary(UnaryOp::Exp, x),
        ty: TensorType::new(DType::F64, ty.shape),
    });
    g.outputs.push(NodeId(7));
    let msg = verify(&g).unwrap_err().to_string();
    assert!(
        msg.contains("stored type f64[2] but the op gives f32[2]")
            && msg.contains("output %7 does not exist"),
        "{msg}"
    );
}

#[jit]
fn softmax_rows(x: &Tensor) -> Tensor {
    x.softmax(-1)
}

#[jit]
fn layernorm_golden(x: &Tensor, gamma: &Tensor, beta: &Tensor) -> Tensor {
    x.layer_norm(gamma, beta, 1e-5)
}

#[test]
fn golden_traced_and_simplified_graphs() {
    softmax_rows(&Tensor::ones(&[4, 8], DType::F32)).unwrap();
    let h = &softmax_rows::jit().handlers()[0];
    check_golden("softmax.traced.graph", &h.traced_text());
    check_golden("softmax.simplified.graph", &h.graph_text());
    let (g, b) = (
        Tensor::ones(&[16], DType::F32),
        Tensor::zeros(&[16], DType::F32),
    );
    layernorm_golden(&Tensor::ones(&[8, 16], DType::F32), &g, &b).unwrap();
    let h = &layernorm_golden::jit().handlers()[0];
    check_golden("layernorm.traced.graph", &h.traced_text());
    check_golden("layernorm.simplified.graph", &h.graph_text());
}

#[test]
fn golden_simplify_cases() {
    // Folding, identities, CSE and DCE on a graph written by hand.
    let text = "\
graph {
  %0 = input 0 : f32[4]
  %1 = full 2.0 : f32[]
  %2 = full 3.0 : f32[]
  %3 = mul %1, %2 : f32[]
  %4 = broadcast %3 : f32[4]
  %5 = full 1.0 : f32[4]
  %6 = mul %0, %5 : f32[4]
  %7 = exp %6 : f32[4]
  %8 = exp %0 : f32[4]
  %9 = add %7, %8 : f32[4]
  %10 = add %9, %4 : f32[4]
  %11 = reshape %10 : f32[2,2]
  %12 = reshape %11 : f32[4]
  %13 = neg %0 : f32[4]
  %14 = neg %13 : f32[4]
  %15 = const [1.0, 2.0] : f32[2]
  %16 = const [3.0, 4.0] : f32[2]
  %17 = add %15, %16 : f32[2]
  %18 = tanh %0 : f32[4]
  return %12, %14, %17
}
";
    let g = parse(text).unwrap();
    let s = simplify(&g, true).unwrap();
    check_golden("simplify_cases.graph", &s.to_string());
    let x = Array::from_vec(vec![0.5f32, -1.0, f32::NAN, 3.0], &[4]).unwrap();
    let before = interp::run(&g, std::slice::from_ref(&x), &[]).unwrap();
    let after = interp::run(&s, &[x], &[]).unwrap();
    assert_eq!(format!("{before:?}"), format!("{after:?}"));
}

/// Text is user input: a graph the verifier would reject does not parse
/// (an input index past the inputs once parsed and then made the
/// interpreter index out of bounds), and the interpreter itself returns an
/// error for such a graph built by hand.
#[test]
fn text_the_verifier_rejects_does_not_parse() {
    let gapped = "graph {
  %0 = input 0 : f32[2,3]
  %1 = input 5 : f32[2,3]
  %2 = add %0, %1 : f32[2,3]
  return %2
}";
    let e = tilejit_ir::text::parse(gapped).unwrap_err().to_string();
    assert!(e.contains("input indices [0, 5] are not 0..2"), "{e}");
    let mistyped = "graph {
  %0 = input 0 : f32[2,3]
  %1 = exp %0 : f64[2,3]
  return %1
}";
    let e = tilejit_ir::text::parse(mistyped).unwrap_err().to_string();
    assert!(e.contains("line 3") && e.contains("f64[2,3]"), "{e}");
    // Built by hand, the same graph is an interpreter error, not a panic.
    let mut g = tilejit_ir::Graph::new();
    let ty = tilejit_ir::TensorType::new(
        tilejit_ir::DType::F32,
        tilejit_ir::Shape::new(&[2]).unwrap(),
    );
    let a = g.add(tilejit_ir::Op::Input { index: 0, ty }).unwrap();
    let b = g.add(tilejit_ir::Op::Input { index: 5, ty }).unwrap();
    let s = g
        .add(tilejit_ir::Op::Binary(tilejit_ir::BinaryOp::Add, a, b))
        .unwrap();
    g.outputs.push(s);
    let x = tilejit_ir::Array::from_vec(vec![1f32, 2.0], &[2]).unwrap();
    let r = tilejit_ir::interp::run(&g, &[x.clone(), x], &[]);
    assert!(r.is_err(), "{r:?}");
}
