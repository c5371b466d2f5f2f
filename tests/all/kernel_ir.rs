//! The kernel IR: fusion of the golden graphs (softmax and layernorm are one
//! kernel each, matmul takes its epilogue), print -> parse -> print round
//! trips, the verifier, and golden files (`BLESS=1`), among them the fusion
//! filetests: each `golden/fusion/NAME.graph` fused is `NAME.kernels`.

use tilejit_ir::kernel::{fuse, parse_program, verify_program, KernelProgram};
use tilejit_ir::text::parse;
use tilejit_tests::{check_golden, golden_dir, golden_mismatch};

fn fused(graph_text: &str) -> KernelProgram {
    let g = parse(graph_text).unwrap();
    let p = fuse(&g).unwrap();
    verify_program(&p).unwrap();
    let text = p.to_string();
    let back = parse_program(&text).unwrap();
    assert_eq!(back.to_string(), text, "kernel text must round-trip");
    assert_eq!(back, p);
    p
}

/// Every `golden/fusion/*.graph` (graph text, `#` comments say what fusion
/// should do) fuses to the program in the `.kernels` file beside it; a new
/// case is a new `.graph` file and `BLESS=1 cargo test -p tilejit-tests
/// fusion_filetests`, then a read of the `.kernels` it writes.
#[test]
fn fusion_filetests() {
    let dir = golden_dir().join("fusion");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let mut cases = 0;
    let mut failures = Vec::new();
    for path in &paths {
        match path.extension().and_then(|e| e.to_str()) {
            Some("graph") => {
                let text = std::fs::read_to_string(path).unwrap();
                let graph = parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let program = fused(&graph.to_string());
                let expected = path.with_extension("kernels");
                failures.extend(golden_mismatch(&expected, &program.to_string()));
                cases += 1;
            }
            Some("kernels") => assert!(
                path.with_extension("graph").exists(),
                "{} has no .graph input",
                path.display()
            ),
            _ => panic!("unexpected file {} in {}", path.display(), dir.display()),
        }
    }
    assert!(cases >= 8, "only {cases} fusion cases in {}", dir.display());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn golden_graph(name: &str) -> String {
    std::fs::read_to_string(golden_dir().join(name)).unwrap()
}

#[test]
fn softmax_is_one_kernel_with_scratch() {
    let p = fused(&golden_graph("softmax.simplified.graph"));
    assert_eq!(p.kernels.len(), 1, "{p}");
    let k = &p.kernels[0];
    assert_eq!(k.domain, vec![4, 8]);
    assert_eq!(k.scratch.len(), 1, "exp(x - max) is computed once: {p}");
    check_golden("softmax.kernels", &p.to_string());
}

#[test]
fn layernorm_is_one_kernel() {
    let p = fused(&golden_graph("layernorm.simplified.graph"));
    assert_eq!(p.kernels.len(), 1, "{p}");
    assert_eq!(p.kernels[0].stages.len(), 3, "{p}");
    check_golden("layernorm.kernels", &p.to_string());
}

#[test]
fn elementwise_chain_is_one_flat_kernel() {
    let p = fused(
        "graph {
  %0 = input 0 : f32[4,8]
  %1 = input 1 : f32[8]
  %2 = broadcast %1 : f32[4,8]
  %3 = mul %0, %2 : f32[4,8]
  %4 = input 2 : f32[4,8]
  %5 = add %3, %4 : f32[4,8]
  %6 = relu %5 : f32[4,8]
  return %6
}",
    );
    assert_eq!(p.kernels.len(), 1);
    assert_eq!(p.kernels[0].name, "fused_mul_add_relu");
    assert_eq!(p.kernels[0].domain, vec![4, 8], "the bias keeps two dims");
    let q = fused(
        "graph {
  %0 = input 0 : f32[4,8]
  %1 = input 1 : f32[4,8]
  %2 = add %0, %1 : f32[4,8]
  return %2
}",
    );
    assert_eq!(
        q.kernels[0].domain,
        vec![32],
        "same-shape operands collapse to one loop"
    );
}

#[test]
fn matmul_takes_its_epilogue() {
    let p = fused(
        "graph {
  %0 = input 0 : f32[16,32]
  %1 = input 1 : f32[32,8]
  %2 = input 2 : f32[8]
  %3 = matmul %0, %1 : f32[16,8]
  %4 = broadcast %2 : f32[16,8]
  %5 = add %3, %4 : f32[16,8]
  %6 = gelu %5 : f32[16,8]
  return %6
}",
    );
    assert_eq!(p.kernels.len(), 1, "{p}");
    assert!(p.kernels[0].matmul.is_some());
    assert_eq!(p.kernels[0].name, "fused_matmul_add_gelu");
    check_golden("matmul_bias_gelu.kernels", &p.to_string());
}

#[test]
fn expensive_value_with_users_in_two_kernels_is_materialised() {
    let p = fused(
        "graph {
  %0 = input 0 : f32[4,8]
  %1 = exp %0 : f32[4,8]
  %2 = reduce_sum %1 axes=[0] : f32[1,8]
  %3 = reduce_max %1 axes=[1] : f32[4,1]
  return %2, %3
}",
    );
    let exps: usize = p
        .kernels
        .iter()
        .map(|k| k.ops.iter().filter(|o| **o == "exp").count())
        .sum();
    assert_eq!(exps, 1, "exp computed once: {p}");
}

#[test]
fn parse_errors_name_the_line() {
    let e = parse_program("kernels {\n  buffer b0 = wat : f32[2]\n}").unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
    let e = parse_program(
        "kernels {\n  buffer b0 = input 0 : f32[2]\n  kernel k domain=[2] ops=[] {\n    %0 = add %0, %1 : f32\n  }\n}",
    )
    .unwrap_err();
    assert!(e.to_string().contains("before it is defined"), "{e}");
}

/// Kernel text whose scratch lines repeat or come out of expression order
/// does not parse: it printed back differently (a repeated `scratch %3`
/// line was printed once), and scratch order is the argument layout.
#[test]
fn repeated_or_reordered_scratch_lines_do_not_parse() {
    let p = fused(&golden_graph("softmax.simplified.graph"));
    let text = p.to_string();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("scratch %"))
        .expect("softmax has a scratch value")
        .to_string();
    let doubled = text.replacen(&line, &format!("{line}\n{line}"), 1);
    let e = parse_program(&doubled).unwrap_err().to_string();
    assert!(e.contains("repeats or comes out of order"), "{e}");
    // Every program that does parse prints back to its own text.
    let back = parse_program(&text).unwrap();
    assert_eq!(back.to_string(), text);
}

/// A graph of thousands of elementwise steps (an unrolled ONNX Loop) is
/// cut into kernels of at most `MAX_KERNEL_NODES` inlined ops each, so no
/// kernel takes Cranelift seconds to compile; unit reshapes between the
/// steps (an Unsqueeze per trip) do not hide the count.
#[test]
fn a_long_elementwise_chain_is_cut_into_bounded_kernels() {
    use tilejit_ir::kernel::MAX_KERNEL_NODES;
    let steps = 3000;
    let mut text = String::from("graph {\n  %0 = input 0 : f32[4,8]\n");
    let mut last = 0;
    for i in 0..steps {
        let n = last + 1;
        if i % 7 == 3 {
            text += &format!("  %{n} = reshape %{last} : f32[4,1,8]\n");
            text += &format!("  %{} = reshape %{n} : f32[4,8]\n", n + 1);
            text += &format!("  %{} = mul %{}, %{} : f32[4,8]\n", n + 2, n + 1, n + 1);
            last = n + 2;
        } else {
            text += &format!("  %{n} = sqrt %{last} : f32[4,8]\n");
            last = n;
        }
    }
    text += &format!("  return %{last}\n}}");
    let p = fused(&text);
    let ops: usize = p.kernels.iter().map(|k| k.ops.len()).sum();
    assert!(p.kernels.len() >= 8, "{} kernels", p.kernels.len());
    for k in &p.kernels {
        assert!(
            k.ops.len() <= MAX_KERNEL_NODES as usize + 1,
            "a kernel of {} ops",
            k.ops.len()
        );
    }
    assert!(ops >= steps, "every step is computed: {ops} ops");
}
