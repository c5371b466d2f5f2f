//! Criterion benches per op family, on the host backend (warm caches,
//! outputs from the storage pool): elementwise, transcendental, row
//! reductions, layernorm, matmul with epilogue, dispatch of a tiny op, and
//! a cold kernel compile. Sizes are small enough that `cargo bench` stays
//! quick; the `bench` binary runs the full-size workloads.

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

criterion_group!(benches, elementwise, reductions, matmul, dispatch, compile);
criterion_main!(benches);
