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

/// The first lines of every family's graph: input 0 of type `ty` as `%0`,
/// scaled by `salt` into `%2`, so that a test's kernels have a structure
/// of their own (no other test compiles them first). Later nodes start
/// at `%3`.
fn head(ty: &str, salt: f64) -> String {
    format!("%0 = input 0 : {ty}\n%1 = full {salt} : {ty}\n%2 = mul %0, %1 : {ty}\n")
}

/// `relu(x + b)` over `[rows, cols]`, `b` a row vector broadcast down.
fn bias_relu(rows: usize, cols: usize, salt: f64) -> (tilejit_ir::Graph, Vec<Array>) {
    let t = format!("f32[{rows},{cols}]");
    let g = graph(&format!(
        "{}%3 = input 1 : f32[{cols}]\n%4 = broadcast %3 : {t}\n%5 = add %2, %4 : {t}\n\
         %6 = relu %5 : {t}\nreturn %6",
        head(&t, salt)
    ));
    (g, vec![array(&[rows, cols], 1), array(&[cols], 2)])
}

/// `x * salt + 1.25` over a flat `[n]`.
fn flat_axpb(n: usize, salt: f64) -> (tilejit_ir::Graph, Vec<Array>) {
    let t = format!("f32[{n}]");
    let g = graph(&format!(
        "{}%3 = full 1.25 : {t}\n%4 = add %2, %3 : {t}\nreturn %4",
        head(&t, salt)
    ));
    (g, vec![array(&[n], 3)])
}

/// Row softmax over `[rows, cols]`.
fn softmax(rows: usize, cols: usize, salt: f64) -> (tilejit_ir::Graph, Vec<Array>) {
    let (r, c) = (rows, cols);
    let t = format!("f32[{r},{c}]");
    let g = graph(&format!(
        "{}%3 = reduce_max %2 axes=[1] : f32[{r},1]\n\
         %4 = broadcast %3 : {t}\n%5 = sub %2, %4 : {t}\n\
         %6 = exp %5 : {t}\n%7 = reduce_sum %6 axes=[1] : f32[{r},1]\n\
         %8 = broadcast %7 : {t}\n%9 = div %6, %8 : {t}\nreturn %9",
        head(&t, salt)
    ));
    (g, vec![array(&[r, c], 4)])
}

/// A sum over rows (axis 0) of `[rows, cols]`, scaled by 0.5.
fn column_sum(rows: usize, cols: usize, salt: f64) -> (tilejit_ir::Graph, Vec<Array>) {
    let (r, c) = (rows, cols);
    let g = graph(&format!(
        "{}%3 = reduce_sum %2 axes=[0] : f32[1,{c}]\n\
         %4 = full 0.5 : f32[1,{c}]\n%5 = mul %3, %4 : f32[1,{c}]\nreturn %5",
        head(&format!("f32[{r},{c}]"), salt)
    ));
    (g, vec![array(&[r, c], 5)])
}

/// `transpose(x) + y`: `x` is `[cols, rows]`, read with swapped strides.
fn transpose_add(rows: usize, cols: usize, salt: f64) -> (tilejit_ir::Graph, Vec<Array>) {
    let (r, c) = (rows, cols);
    let t = format!("f32[{r},{c}]");
    let g = graph(&format!(
        "{}%3 = input 1 : {t}\n\
         %4 = permute %2 perm=[1,0] : {t}\n%5 = add %4, %3 : {t}\nreturn %5",
        head(&format!("f32[{c},{r}]"), salt)
    ));
    (g, vec![array(&[c, r], 6), array(&[r, c], 7)])
}

/// `relu(a * salt @ b + bias)` in `dt`: the matmul and its epilogue.
fn matmul_bias_relu(
    dt: D,
    (m, k, n): (usize, usize, usize),
    salt: f64,
) -> (tilejit_ir::Graph, Vec<Array>) {
    let t = format!("{dt}[{m},{n}]");
    let g = graph(&format!(
        "{}%3 = input 1 : {dt}[{k},{n}]\n%4 = input 2 : {dt}[{n}]\n\
         %5 = matmul %2, %3 : {t}\n%6 = broadcast %4 : {t}\n\
         %7 = add %5, %6 : {t}\n%8 = relu %7 : {t}\nreturn %8",
        head(&format!("{dt}[{m},{k}]"), salt)
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
        ("flat [300000]", flat_axpb(300_000, 0.375)),
        ("flat [1000]", flat_axpb(1000, 0.375)),
        ("bias_relu [512,1000]", bias_relu(512, 1000, 0.75)),
        ("bias_relu [64,7]", bias_relu(64, 7, 0.75)),
        ("softmax [256,1000]", softmax(256, 1000, 0.75)),
        ("softmax [64,5000]", softmax(64, 5000, 0.75)),
        ("softmax [16,70000] long", softmax(16, 70_000, 0.75)),
        ("softmax [2,70000] split", softmax(2, 70_000, 0.75)),
        ("column_sum [300,500]", column_sum(300, 500, 0.75)),
        ("transpose_add [300,500]", transpose_add(300, 500, 0.75)),
        (
            "matmul f32 [128x200x150]",
            matmul_bias_relu(D::F32, (128, 200, 150), 0.75),
        ),
        (
            "matmul f64 [40x70x300]",
            matmul_bias_relu(D::F64, (40, 70, 300), 0.75),
        ),
    ];
    for (name, (g, args)) in cases {
        let p = Program::compile(g).unwrap();
        let (_, report) = p.run_sim(&args, &[], false).unwrap();
        let busy: u64 = report.pipe_busy.iter().sum();
        // Host wall time of a run (copies, launch, interpreter): median of 5.
        let mut times: Vec<f64> = (0..5)
            .map(|_| {
                let t = std::time::Instant::now();
                p.run_sim(&args, &[], false).unwrap();
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "{name:<28} device_cycles {:>10}  pipe_busy {:>12}  scalar_busy {:>10}  wall_ms {:>8.2}",
            report.device_cycles, busy, report.pipe_busy[0], times[2]
        );
    }
}

/// Compiles `g` as `name`, runs it on Sim and on the reference
/// interpreter and compares every element: equal (NaN matches NaN), or
/// within `tol` relative for matmuls. Returns the kernel cache keys of its
/// Sim kernels and their code.
fn run_and_compare(
    name: &str,
    g: tilejit_ir::Graph,
    args: &[Array],
    tol: f64,
) -> (Vec<String>, Vec<String>) {
    let p = Program::compile_named(g, name).unwrap();
    let (sim, _) = p.run_sim(args, &[], false).unwrap();
    let reference = p.run_reference(args, &[]).unwrap();
    for (s, r) in sim.iter().zip(&reference) {
        assert_eq!(s.ty(), r.ty(), "{name}");
        for (i, (a, b)) in as_f64(s).iter().zip(as_f64(r)).enumerate() {
            let close =
                a == &b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= tol * b.abs().max(1.0);
            assert!(close, "{name}: element {i}: sim {a} vs reference {b}");
        }
    }
    let sp = p.sim().unwrap();
    let keys = sp.cache_keys().into_iter().map(String::from).collect();
    let asm = sp.kernels().iter().map(|k| k.asm.clone()).collect();
    (keys, asm)
}

/// Twenty shapes of `[rows, cols]` (cols up to 4100: whole rows in UB),
/// most not multiples of any tile width. No dimension is 1: a stride of a
/// size-1 dimension may be normalised to another class (as on the host,
/// whose shape classes tell dims of 1 apart).
const ROW_SIZES: [(usize, usize); 20] = [
    (2, 3),
    (3, 7),
    (3, 5),
    (8, 8),
    (17, 33),
    (64, 64),
    (65, 127),
    (100, 1000),
    (7, 4097),
    (2, 3000),
    (128, 129),
    (5, 2),
    (33, 17),
    (9, 250),
    (250, 9),
    (40, 70),
    (2, 2048),
    (12, 513),
    (31, 999),
    (6, 6),
];

/// One program family at every size of `sizes`: each size matches the
/// reference, and every size's program uses the same Sim kernel cache
/// entries with the same code as the first (so the family's kernels
/// compile once; the entries themselves may be evicted meanwhile by
/// tests that shrink the cache, so their keys are compared, not the
/// cache's counters).
fn every_size_compiles_once(
    family: &str,
    sizes: &[(usize, usize)],
    tol: f64,
    make: impl Fn(usize, usize) -> (tilejit_ir::Graph, Vec<Array>),
) {
    let mut first: Option<(Vec<String>, Vec<String>)> = None;
    for &(r, c) in sizes {
        let (g, args) = make(r, c);
        let got = run_and_compare(&format!("sim_sizes::{family}[{r},{c}]"), g, &args, tol);
        match &first {
            None => first = Some(got),
            Some(want) => {
                assert_eq!(got.0, want.0, "{family} [{r},{c}]: other cache entries");
                assert_eq!(got.1, want.1, "{family} [{r},{c}]: other code");
            }
        }
    }
}

#[test]
fn bias_relu_rows_compile_once_for_twenty_sizes() {
    every_size_compiles_once("bias_relu", &ROW_SIZES, 0.0, |r, c| bias_relu(r, c, 0.8125));
}

#[test]
fn flat_kernels_compile_once_for_twenty_sizes() {
    let sizes: Vec<(usize, usize)> = [
        2usize, 3, 7, 8, 31, 100, 255, 256, 257, 1000, 4095, 4096, 4097, 8191, 10_000, 12_345,
        65_537, 100_003, 250_000, 300_001,
    ]
    .iter()
    .map(|&n| (1, n))
    .collect();
    every_size_compiles_once("flat", &sizes, 0.0, |_, n| flat_axpb(n, 0.4375));
}

#[test]
fn softmax_rows_compile_once_for_twenty_sizes() {
    every_size_compiles_once("softmax", &ROW_SIZES, 0.0, |r, c| softmax(r, c, 1.0625));
}

#[test]
fn column_sums_compile_once_for_twenty_sizes() {
    every_size_compiles_once("column_sum", &ROW_SIZES, 0.0, |r, c| {
        column_sum(c, r, 0.9375)
    });
}

#[test]
fn transposes_compile_once_for_twenty_sizes() {
    every_size_compiles_once("transpose_add", &ROW_SIZES, 0.0, |r, c| {
        transpose_add(r, c, 1.1875)
    });
}

/// `(m, k, n)` packed as `(m * 1000 + k, n)` for [`every_size_compiles_once`].
const MATMUL_SIZES: [(usize, usize, usize); 20] = [
    (2, 2, 2),
    (3, 5, 7),
    (64, 64, 64),
    (65, 63, 130),
    (17, 9, 33),
    (128, 200, 150),
    (2, 100, 3),
    (100, 2, 3),
    (7, 129, 65),
    (2, 300, 3),
    (33, 2, 70),
    (5, 64, 129),
    (63, 65, 2),
    (40, 70, 300),
    (9, 9, 9),
    (16, 17, 18),
    (127, 3, 5),
    (2, 2, 257),
    (70, 33, 64),
    (11, 128, 31),
];

#[test]
fn cube_matmuls_with_epilogue_compile_once_for_twenty_sizes() {
    let sizes: Vec<(usize, usize)> = MATMUL_SIZES
        .iter()
        .map(|&(m, k, n)| (m * 1000 + k, n))
        .collect();
    every_size_compiles_once("matmul_f32", &sizes, 1e-5, |mk, n| {
        matmul_bias_relu(D::F32, (mk / 1000, mk % 1000, n), 0.5625)
    });
}

#[test]
fn vector_matmuls_compile_once_for_twenty_sizes() {
    let sizes: Vec<(usize, usize)> = MATMUL_SIZES
        .iter()
        .map(|&(m, k, n)| (m * 1000 + k, n))
        .collect();
    every_size_compiles_once("matmul_i32", &sizes, 0.0, |mk, n| {
        matmul_bias_relu(D::I32, (mk / 1000, mk % 1000, n), 3.0)
    });
}

/// Sizes in different plan classes (whole rows double or single
/// buffered, a few long rows split across tasks, many long rows in column
/// chunks) get different entries, each serving the other sizes of its
/// class, and every size is right.
#[test]
fn plan_classes_get_their_own_entries() {
    let runs = [
        (4usize, 100usize),
        (4, 70_000),
        (12, 70_001),
        (3, 16_000),
        (5, 200),
        (3, 80_000),
        (9, 65_600),
        (5, 20_000),
    ];
    let cfg = tilejit_runtime::sim_device().config();
    let mut seen: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    for (r, c) in runs {
        let (g, args) = softmax(r, c, 1.3125);
        let name = format!("sim_sizes::classes[{r},{c}]");
        let p = Program::compile_named(g.clone(), &name).unwrap();
        // The classes of its kernels; the softmax kernel's last.
        let mut kernels: Vec<_> = p.host().kernels().kernels.iter().collect();
        kernels.sort_by_key(|k| k.has_reduce());
        let class: Vec<String> = kernels
            .iter()
            .map(|k| tilejit_codegen::device::plan_class(k, cfg))
            .collect();
        // Long rows sum per chunk (the reference once): close, not equal.
        let tol = if c > 30_000 { 1e-5 } else { 0.0 };
        let keys = run_and_compare(&name, g, &args, tol).0;
        seen.push((class, keys));
    }
    let classes: Vec<&str> = seen.iter().map(|s| s.0.last().unwrap().as_str()).collect();
    assert_eq!(
        &classes[..4],
        [
            "Rows { double: true }",
            "Split",
            "Long",
            "Rows { double: false }"
        ],
        "{classes:?}"
    );
    // Same class, same entry; other class, other entry.
    for a in &seen {
        for b in &seen {
            assert_eq!(a.0 == b.0, a.1 == b.1, "{a:?} vs {b:?}");
        }
    }
}
