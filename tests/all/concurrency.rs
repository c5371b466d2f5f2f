//! Shared objects used from many threads at once: tensors, eager ops, jit
//! functions with different signatures, and cache clearing mid-flight.

use std::sync::Arc;
use tilejit::prelude::*;
use tilejit_tests::vals;

#[jit]
fn shared_fn(x: &Tensor, k: f32) -> Tensor {
    (x * k).relu().sum(-1, false)
}

#[test]
fn many_threads_many_signatures_with_clears() {
    let threads = 8;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..40usize {
                    let n = 1 + (t + i) % 5; // 5 distinct shapes shared across threads
                    let x = Tensor::arange(n * 3, DType::F32).reshape(&[n, 3]);
                    let k = (i % 3) as f32 - 1.0;
                    let y = vals(&shared_fn(&x, k).unwrap());
                    let want: Vec<f32> = (0..n)
                        .map(|r| (0..3).map(|c| ((r * 3 + c) as f32 * k).max(0.0)).sum())
                        .collect();
                    assert_eq!(y, want, "thread {t} iter {i}");
                    if t == 0 && i % 10 == 9 {
                        shared_fn::jit().clear();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread panicked");
    }
    assert!(shared_fn::jit().handlers().len() <= 5);
}

#[test]
fn eager_ops_on_shared_tensors_from_threads() {
    let a = Arc::new(Tensor::randn(&[64, 64], 5));
    let want = vals(&a.matmul(&a).tanh());
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let a = a.clone();
            std::thread::spawn(move || vals(&a.matmul(&a).tanh()))
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), want);
    }
}

#[test]
fn one_jit_fn_shared_by_reference_across_scoped_threads() {
    let f = jit_fn!(|x: &Tensor, y: &Tensor| x.maximum(y) - x.minimum(y));
    let x = Tensor::randn(&[10], 1);
    let y = Tensor::randn(&[10], 2);
    let want: Vec<f32> = vals(&x)
        .iter()
        .zip(vals(&y))
        .map(|(a, b)| (a - b).abs())
        .collect();
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| {
                for _ in 0..20 {
                    assert_eq!(vals(&f.call((&x, &y)).unwrap()), want);
                }
            });
        }
    });
    assert_eq!(f.stats().builds, 1);
    assert_eq!(f.stats().hits + f.stats().misses, 120);
}
