//! Size-generic device code: one compiled Sim kernel serves every shape of
//! the same structure and plan class, so running a program at many sizes
//! compiles each of its kernels once, and every size still matches the
//! reference interpreter.

use crate::host_backend::as_f64;
use tilejit_ir::{Array, DType as D};
use tilejit_runtime::Program;

/// A graph from its text body (`%0 = ...` lines and `return`).
fn graph(body: &str) -> tilejit_ir::Graph {
    tilejit_ir::text::parse(&format!("graph {{\n{body}\n}}")).unwrap()
}

/// `n` deterministic f32 values in about [-5, 5) (seeded by `seed`).
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((((i + seed) * 7919 + seed * 31) % 1000) as f32) / 100.0 - 5.0)
        .collect()
}

fn array(shape: &[usize], seed: usize) -> Array {
    let n = shape.iter().product();
    Array::from_vec(values(n, seed), shape).unwrap()
}

/// `relu(x + b)` over `[rows, cols]`, `b` a row vector broadcast down.
fn bias_relu(rows: usize, cols: usize) -> (tilejit_ir::Graph, Vec<Array>) {
    let g = graph(&format!(
        "%0 = input 0 : f32[{rows},{cols}]\n%1 = input 1 : f32[{cols}]\n\
         %2 = broadcast %1 : f32[{rows},{cols}]\n%3 = add %0, %2 : f32[{rows},{cols}]\n\
         %4 = relu %3 : f32[{rows},{cols}]\nreturn %4"
    ));
    (g, vec![array(&[rows, cols], 1), array(&[cols], 2)])
}

/// `x * 0.375 + 1.25` over a flat `[n]`.
fn flat_axpb(n: usize) -> (tilejit_ir::Graph, Vec<Array>) {
    let g = graph(&format!(
        "%0 = input 0 : f32[{n}]\n%1 = full 0.375 : f32[{n}]\n%2 = mul %0, %1 : f32[{n}]\n\
         %3 = full 1.25 : f32[{n}]\n%4 = add %2, %3 : f32[{n}]\nreturn %4"
    ));
    (g, vec![array(&[n], 3)])
}

/// Row softmax over `[rows, cols]`.
fn softmax(rows: usize, cols: usize) -> (tilejit_ir::Graph, Vec<Array>) {
    let (r, c) = (rows, cols);
    let g = graph(&format!(
        "%0 = input 0 : f32[{r},{c}]\n%1 = reduce_max %0 axes=[1] : f32[{r},1]\n\
         %2 = broadcast %1 : f32[{r},{c}]\n%3 = sub %0, %2 : f32[{r},{c}]\n\
         %4 = exp %3 : f32[{r},{c}]\n%5 = reduce_sum %4 axes=[1] : f32[{r},1]\n\
         %6 = broadcast %5 : f32[{r},{c}]\n%7 = div %4, %6 : f32[{r},{c}]\nreturn %7"
    ));
    (g, vec![array(&[r, c], 4)])
}

/// A sum over rows (axis 0) of `[rows, cols]`, scaled by 0.5.
fn column_sum(rows: usize, cols: usize) -> (tilejit_ir::Graph, Vec<Array>) {
    let (r, c) = (rows, cols);
    let g = graph(&format!(
        "%0 = input 0 : f32[{r},{c}]\n%1 = reduce_sum %0 axes=[0] : f32[1,{c}]\n\
         %2 = full 0.5 : f32[1,{c}]\n%3 = mul %1, %2 : f32[1,{c}]\nreturn %3"
    ));
    (g, vec![array(&[r, c], 5)])
}

/// `transpose(x) + y`: `x` is `[cols, rows]`, read with swapped strides.
fn transpose_add(rows: usize, cols: usize) -> (tilejit_ir::Graph, Vec<Array>) {
    let (r, c) = (rows, cols);
    let g = graph(&format!(
        "%0 = input 0 : f32[{c},{r}]\n%1 = input 1 : f32[{r},{c}]\n\
         %2 = permute %0 perm=[1,0] : f32[{r},{c}]\n%3 = add %2, %1 : f32[{r},{c}]\nreturn %3"
    ));
    (g, vec![array(&[c, r], 6), array(&[r, c], 7)])
}

/// `relu(a @ b + bias)` in `dt`: the matmul and its epilogue.
fn matmul_bias_relu(dt: D, m: usize, k: usize, n: usize) -> (tilejit_ir::Graph, Vec<Array>) {
    let g = graph(&format!(
        "%0 = input 0 : {dt}[{m},{k}]\n%1 = input 1 : {dt}[{k},{n}]\n%2 = input 2 : {dt}[{n}]\n\
         %3 = matmul %0, %1 : {dt}[{m},{n}]\n%4 = broadcast %2 : {dt}[{m},{n}]\n\
         %5 = add %3, %4 : {dt}[{m},{n}]\n%6 = relu %5 : {dt}[{m},{n}]\nreturn %6"
    ));
    let cast = |a: Array| {
        let v: Vec<f64> = as_f64(&a).iter().map(|x| (x * 4.0).round() / 4.0).collect();
        let shape: Vec<usize> = a.shape().dims().to_vec();
        match dt {
            D::F64 => Array::from_vec(v, &shape).unwrap(),
            D::I32 => Array::from_vec(v.iter().map(|&x| x as i32).collect(), &shape).unwrap(),
            _ => Array::from_vec(v.iter().map(|&x| x as f32).collect(), &shape).unwrap(),
        }
    };
    let args = vec![
        cast(array(&[m, k], 8)),
        cast(array(&[k, n], 9)),
        cast(array(&[n], 10)),
    ];
    (g, args)
}

/// Simulated device cycles and pipe-busy totals of representative
/// workloads, for comparing code generator changes (`cargo test -p
/// tilejit-tests --test all sim_cycle_figures -- --ignored --nocapture`).
#[test]
#[ignore = "prints figures"]
fn sim_cycle_figures() {
    let cases: Vec<(&str, (tilejit_ir::Graph, Vec<Array>))> = vec![
        ("flat [300000]", flat_axpb(300_000)),
        ("flat [1000]", flat_axpb(1000)),
        ("bias_relu [512,1000]", bias_relu(512, 1000)),
        ("bias_relu [64,7]", bias_relu(64, 7)),
        ("softmax [256,1000]", softmax(256, 1000)),
        ("softmax [64,5000]", softmax(64, 5000)),
        ("softmax [16,70000] long", softmax(16, 70_000)),
        ("softmax [2,70000] split", softmax(2, 70_000)),
        ("column_sum [300,500]", column_sum(300, 500)),
        ("transpose_add [300,500]", transpose_add(300, 500)),
        (
            "matmul f32 [128x200x150]",
            matmul_bias_relu(D::F32, 128, 200, 150),
        ),
        ("matmul f64 [40x70x300]", matmul_bias_relu(D::F64, 40, 70, 300)),
    ];
    for (name, (g, args)) in cases {
        let p = Program::compile(g).unwrap();
        let (_, report) = p.run_sim(&args, &[], false).unwrap();
        let busy: u64 = report.pipe_busy.iter().sum();
        println!(
            "{name:<28} device_cycles {:>10}  pipe_busy {:>12}  scalar_busy {:>10}",
            report.device_cycles, busy, report.pipe_busy[0]
        );
    }
}

