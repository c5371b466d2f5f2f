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

/// Two kernels (the softmax feeds a matmul), so the first call compiles
/// them in parallel.
#[jit]
fn softmax_then_matmul(a: &Tensor, b: &Tensor, tanhs: usize) -> Tensor {
    let mut y = a.softmax(-1);
    for _ in 0..tanhs {
        y = y.tanh();
    }
    y.matmul(b)
}

/// Jit calls made from inside rayon jobs (user code that is itself data
/// parallel), many of them the first call of their signature at once, each
/// signature compiling new kernels. A thread leading a first call's build
/// must not pick up, while it builds, a job that waits for that same build
/// (see `runtime/src/flight.rs`). A smoke test: the interleaving that hung
/// needs an idle worker to steal the build's own compile job, which this
/// test could not make happen on demand even before the fix; the test
/// below checks the guard deterministically.
#[test]
fn first_calls_from_rayon_jobs_finish() {
    use rayon::prelude::*;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for n in 1..=12usize {
            let a = Tensor::randn(&[n, 24], n as u64);
            let b = Tensor::randn(&[24, 5], 99);
            let mut y = a.softmax(-1);
            for _ in 0..n {
                y = y.tanh();
            }
            let want = vals(&y.matmul(&b));
            let all_ok = (0..32)
                .into_par_iter()
                .all(|_| softmax_then_matmul(&a, &b, n).is_ok_and(|y| vals(&y) == want));
            if tx.send((n, all_ok)).is_err() {
                return;
            }
        }
    });
    for n in 1..=12usize {
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok((m, ok)) => assert!(ok && m == n, "shape {m}: wrong result"),
            Err(e) => panic!("shape {n}: no answer within 60 s ({e}): the first calls deadlocked"),
        }
    }
}

/// A build that asks its own cache for its own key on its own thread
/// (what a rayon job picked up while the build waits on a parallel map
/// can do) gets a value built apart instead of waiting for itself forever;
/// the outer build's value is the one cached.
#[test]
fn a_build_that_asks_for_its_own_key_does_not_wait_for_itself() {
    use tilejit_runtime::{HandlerCache, RuntimeError, Signature};
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let cache: HandlerCache<i32, RuntimeError> = HandlerCache::new();
        let key = Signature::default();
        let outer = cache.get_or_build(&key, || {
            let inner = cache.get_or_build(&key, || Ok(7))?;
            Ok(*inner + 1)
        });
        let cached = cache.get(&key).map(|v| *v);
        let _ = tx.send((outer.map(|v| *v), cached, cache.stats().builds));
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(30));
    let (outer, cached, builds) = got.expect("the build waited for itself");
    assert_eq!((outer, cached, builds), (Ok(8), Some(8), 2));
}

/// A body that spawns a thread calling the same function with the same
/// signature, and joins it, once never returned: the thread waited for the
/// trace that waited for the thread. The thread's call now fails after
/// `TRACE_WAIT` with an error that says so, and the outer call returns the
/// right values. (A watchdog fails the test instead of hanging the suite.)
#[tilejit::jit]
fn calls_itself_on_a_thread(x: &Tensor) -> Tensor {
    let inner = std::thread::scope(|s| {
        s.spawn(|| calls_itself_on_a_thread(&Tensor::ones(&[3], DType::F32)).map(|_| ()))
            .join()
    });
    if let Ok(r) = inner {
        *INNER_RESULT.lock().unwrap() = Some(r.map_err(|e| e.to_string()));
    }
    x * 2.0
}

/// What the thread's call returned.
static INNER_RESULT: std::sync::Mutex<Option<Result<(), String>>> = std::sync::Mutex::new(None);

#[test]
fn a_body_that_joins_a_thread_calling_its_own_signature_returns() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let y = calls_itself_on_a_thread(&Tensor::ones(&[3], DType::F32));
        let _ = tx.send(y.and_then(|y| y.to_vec::<f32>()));
    });
    let limit = tilejit_runtime::TRACE_WAIT * 10;
    let got = rx
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("no return within {limit:?}: deadlocked"));
    assert_eq!(got.unwrap(), [2.0, 2.0, 2.0]);
    let inner = INNER_RESULT
        .lock()
        .unwrap()
        .clone()
        .expect("the thread ran");
    let e = inner.unwrap_err();
    assert!(e.contains("deadlocks") && e.contains("f32[3]"), "{e}");
}

/// Three products big enough to spread over the pool's threads: a call
/// from outside the pool runs on it, with the other workers kept awake.
#[jit]
fn three_products(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).tanh().matmul(w).tanh().matmul(w)
}

/// Many threads calling a program that moves onto the pool (each run
/// keeping the other workers spinning for it), some from inside rayon
/// jobs, all at once: every call finishes with the answer one thread gets
/// alone, under a watchdog in case runs waiting on each other hang.
#[test]
fn concurrent_runs_on_the_pool_all_finish() {
    use rayon::prelude::*;
    let x = Tensor::randn(&[128, 256], 6);
    let w = Tensor::randn(&[256, 256], 7) * (1.0 / 16.0);
    let want = vals(&three_products(&x, &w).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    for t in 0..6 {
        let (x, w, want, tx) = (x.clone(), w.clone(), want.clone(), tx.clone());
        std::thread::spawn(move || {
            let ok = if t % 2 == 0 {
                (0..10).all(|_| three_products(&x, &w).is_ok_and(|y| vals(&y) == want))
            } else {
                (0..10)
                    .into_par_iter()
                    .all(|_| three_products(&x, &w).is_ok_and(|y| vals(&y) == want))
            };
            let _ = tx.send((t, ok));
        });
    }
    for _ in 0..6 {
        match rx.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok((t, ok)) => assert!(ok, "thread {t}: a wrong result"),
            Err(e) => panic!("no answer within 120 s ({e}): runs on the pool deadlocked"),
        }
    }
}
