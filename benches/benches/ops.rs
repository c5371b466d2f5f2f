//! Criterion benches per op family, on the host backend (warm caches,
//! outputs from the storage pool): elementwise, transcendental, row
//! reductions, layernorm, matmul with epilogue, dispatch of a tiny op, a
//! cold kernel compile, and gelu/softmax with the AVX-512 and AVX2 block
//! helpers and without (`block_math`, the same kernels each way, for the
//! ratio). Sizes are small enough that `cargo bench` stays quick; the
//! `bench` binary runs the full-size workloads.

#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tilejit::prelude::*;
use tilejit_benches::workloads::*;

fn elementwise(c: &mut Criterion) {
    let mut g = c.benchmark_group("elementwise");
    for n in [4096usize, 1 << 20] {
        let (x, w, b) = (
            Tensor::randn(&[n], 1),
            Tensor::randn(&[n], 2),
            Tensor::randn(&[n], 3),
        );
        g.throughput(Throughput::Bytes(16 * n as u64));
        g.bench_with_input(BenchmarkId::new("bias_relu", n), &n, |bch, _| {
            bch.iter(|| bias_relu(&x, &w, &b))
        });
        let xg = Tensor::randn(&[n], 4);
        g.throughput(Throughput::Bytes(8 * n as u64));
        g.bench_with_input(BenchmarkId::new("gelu_tanh", n), &n, |bch, _| {
            bch.iter(|| gelu(&xg))
        });
    }
    g.finish();
}

fn reductions(c: &mut Criterion) {
    let mut g = c.benchmark_group("rows");
    for (r, cols) in [(64usize, 1024usize), (1024, 1024)] {
        let x = Tensor::randn(&[r, cols], 5);
        let (gm, bt) = (Tensor::randn(&[cols], 6), Tensor::randn(&[cols], 7));
        g.throughput(Throughput::Bytes(8 * (r * cols) as u64));
        g.bench_with_input(
            BenchmarkId::new("softmax", format!("{r}x{cols}")),
            &r,
            |bch, _| bch.iter(|| softmax(&x)),
        );
        g.bench_with_input(
            BenchmarkId::new("layernorm", format!("{r}x{cols}")),
            &r,
            |bch, _| bch.iter(|| layernorm(&x, &gm, &bt)),
        );
    }
    g.finish();
}

fn matmul(c: &mut Criterion) {
    let mut g = c.benchmark_group("matmul");
    for n in [64usize, 256] {
        let (a, b, bias) = (
            Tensor::randn(&[n, n], 8),
            Tensor::randn(&[n, n], 9),
            Tensor::randn(&[n], 10),
        );
        g.throughput(Throughput::Elements(2 * (n * n * n) as u64));
        g.bench_with_input(BenchmarkId::new("gelu(a@b+bias)", n), &n, |bch, _| {
            bch.iter(|| matmul_bias_gelu(&a, &b, &bias))
        });
    }
    g.finish();
}

fn dispatch(c: &mut Criterion) {
    let (x, y) = (Tensor::randn(&[16], 11), Tensor::randn(&[16], 12));
    c.bench_function("dispatch/add_16", |bch| {
        bch.iter(|| add(black_box(&x), black_box(&y)))
    });
}

/// The same fused kernels compiled with each helper width this CPU has and
/// without (`CodegenOptions::block_math`; they give the same bits), side by
/// side.
fn block_math(c: &mut Criterion) {
    use tilejit_ir::text;
    use tilejit_runtime::{BlockMath, CodegenOptions, HostProgram};
    let mut g = c.benchmark_group("block_math");
    let gelu = "graph {
  %0 = input 0 : f32[1048576]
  %1 = gelu %0 : f32[1048576]
  return %1
}";
    let softmax = "graph {
  %0 = input 0 : f32[1024,1024]
  %1 = reduce_max %0 axes=[1] : f32[1024,1]
  %2 = broadcast %1 : f32[1024,1024]
  %3 = sub %0, %2 : f32[1024,1024]
  %4 = exp %3 : f32[1024,1024]
  %5 = reduce_sum %4 axes=[1] : f32[1024,1]
  %6 = broadcast %5 : f32[1024,1024]
  %7 = div %4, %6 : f32[1024,1024]
  return %7
}";
    for (name, src, shape) in [
        ("gelu", gelu, vec![1 << 20]),
        ("softmax", softmax, vec![1024, 1024]),
    ] {
        let graph = text::parse(src).expect("bench graph parses");
        let x = Tensor::randn(&shape, 14).to_array().expect("a host tensor");
        g.throughput(Throughput::Bytes(8 << 20));
        for (way, block_math) in [
            ("avx512", BlockMath::Avx512),
            ("avx2", BlockMath::Avx2),
            ("inline", BlockMath::Off),
        ] {
            let opts = CodegenOptions {
                block_math,
                ..CodegenOptions::default()
            };
            // A width this CPU lacks is a compile error: skip it.
            let Ok(p) = HostProgram::compile_with(&graph, opts) else {
                continue;
            };
            g.bench_with_input(BenchmarkId::new(name, way), &way, |bch, _| {
                bch.iter(|| p.run(std::slice::from_ref(&x), &[]))
            });
        }
    }
    g.finish();
}

fn compile(c: &mut Criterion) {
    // A new closure per iteration: trace + simplify + fuse + one kernel
    // compile (the kernel cache is cleared so the compile is real).
    let x = Tensor::randn(&[1000], 13);
    c.bench_function("compile/fresh_elementwise", |bch| {
        bch.iter(|| {
            tilejit::kernel_cache().clear();
            let f = jit_fn!(|a: &Tensor| (a * 2.0 + 1.0).tanh());
            f.call(&x)
        })
    });
}

criterion_group!(
    benches,
    elementwise,
    reductions,
    matmul,
    dispatch,
    compile,
    block_math
);
criterion_main!(benches);
