//! Tracing and the handler cache: what retraces and what does not, nested
//! jit functions, tuple results, inspection, and single-flight compilation
//! under real threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use tilejit::prelude::*;
use tilejit::Error;
use tilejit_tests::{assert_close, f64s, reference, t32, vals};

static SCALE_TRACES: AtomicUsize = AtomicUsize::new(0);

#[jit]
fn scale_shift(x: &Tensor, k: f32, shift: i32) -> Tensor {
    SCALE_TRACES.fetch_add(1, Ordering::SeqCst); // runs only while tracing
    x * k + shift
}

#[test]
fn float_args_do_not_retrace_shapes_and_ints_do() {
    let x = t32(&[1.0, 2.0], &[2]);
    let before = SCALE_TRACES.load(Ordering::SeqCst);
    assert_eq!(vals(&scale_shift(&x, 2.0, 1).unwrap()), vec![3.0, 5.0]);
    assert_eq!(vals(&scale_shift(&x, 3.0, 1).unwrap()), vec![4.0, 7.0]);
    assert_eq!(vals(&scale_shift(&x, -0.5, 1).unwrap()), vec![0.5, 0.0]);
    assert_eq!(
        SCALE_TRACES.load(Ordering::SeqCst) - before,
        1,
        "a changed f32 must not retrace"
    );
    // A new shape retraces.
    let y = t32(&[1.0, 2.0, 3.0], &[3]);
    assert_eq!(vals(&scale_shift(&y, 2.0, 1).unwrap()), vec![3.0, 5.0, 7.0]);
    assert_eq!(
        SCALE_TRACES.load(Ordering::SeqCst) - before,
        2,
        "a changed shape must retrace"
    );
    // A new integer value retraces (it is static).
    assert_eq!(vals(&scale_shift(&x, 2.0, 5).unwrap()), vec![7.0, 9.0]);
    assert_eq!(
        SCALE_TRACES.load(Ordering::SeqCst) - before,
        3,
        "a changed int must retrace"
    );
    // A new dtype retraces.
    let xd = Tensor::from_vec(vec![1.0f64, 2.0], &[2]).unwrap();
    let r = scale_shift(&xd, 2.0, 1).unwrap();
    assert_eq!(
        r.dtype(),
        DType::F64,
        "the f32 parameter adopts the tensor's dtype"
    );
    assert_eq!(r.to_vec::<f64>().unwrap(), vec![3.0, 5.0]);
    assert_eq!(SCALE_TRACES.load(Ordering::SeqCst) - before, 4);
    // Inspection: signatures with hits, graph text.
    let handlers = scale_shift::jit().handlers();
    let sig = "(f32[2], f32 param, int 1)";
    let h = handlers
        .iter()
        .find(|h| h.signature.to_string() == sig)
        .expect("signature listed");
    assert_eq!(h.hits, 2);
    assert!(
        h.graph_text().contains("param 0 : f32[]"),
        "{}",
        h.graph_text()
    );
    assert!(scale_shift::jit().to_string().contains(sig));
    let miss = scale_shift::jit()
        .explain_miss(&[
            tilejit::JitArg::to_arg(&t32(&[1.0; 4], &[4])),
            tilejit::JitArg::to_arg(&1.0f32),
            tilejit::JitArg::to_arg(&1i32),
        ])
        .unwrap()
        .expect("would miss");
    assert!(
        miss.contains("args[0]: f32[4] vs nearest seen f32["),
        "{miss}"
    );
}

#[test]
fn handler_cache_clear_and_stats() {
    let f = jit_fn!(|a: &Tensor, b: &Tensor| (a * b).sum(-1, false));
    let a = Tensor::rand(&[3, 4], 1);
    let b = Tensor::rand(&[3, 4], 2);
    let want: Vec<f64> = {
        let (av, bv) = (vals(&a), vals(&b));
        (0..3)
            .map(|r| {
                (0..4)
                    .map(|c| av[r * 4 + c] as f64 * bv[r * 4 + c] as f64)
                    .sum()
            })
            .collect()
    };
    for _ in 0..3 {
        assert_close(&vals(&f.call((&a, &b)).unwrap()), &want, 1e-6);
    }
    let s = f.stats();
    assert_eq!((s.hits, s.misses, s.builds), (2, 1, 1));
    assert_eq!(f.handlers().len(), 1);
    // A hit stamps `last_used` from the coarse clock (a few ms of
    // resolution): it lands between times read just before and after.
    std::thread::sleep(std::time::Duration::from_millis(30));
    let before = std::time::Instant::now();
    f.call((&a, &b)).unwrap();
    let after = std::time::Instant::now();
    let used = f.handlers()[0].last_used;
    let slack = std::time::Duration::from_millis(20);
    assert!(
        used + slack >= before && used <= after + slack,
        "{used:?} vs {before:?}..{after:?}"
    );
    assert_eq!(f.explain_miss((&a, &b)).unwrap(), None);
    f.clear();
    assert!(f.handlers().is_empty());
    assert_close(&vals(&f.call((&a, &b)).unwrap()), &want, 1e-6);
    assert_eq!(f.stats().builds, 2);
    assert_eq!(f.handlers()[0].traced_text().matches("input").count(), 2);
}

#[jit]
fn layernorm(x: &Tensor, gamma: &Tensor, beta: &Tensor) -> Tensor {
    let mean = x.mean(-1, true);
    let xc = x - &mean;
    let var = (&xc * &xc).mean(-1, true);
    &xc * (var + 1e-5).rsqrt() * gamma + beta
}

#[jit]
fn block(x: &Tensor, g: &Tensor, b: &Tensor, w: &Tensor) -> Tensor {
    let h = layernorm(x, g, b).unwrap_or_else(|e| panic!("{e}"));
    x + h.matmul(w).gelu()
}

#[test]
fn design_example_layernorm_matches_reference() {
    for &(rows, cols) in &[(1usize, 3usize), (5, 50), (2, 783)] {
        let x = Tensor::randn(&[rows, cols], 3);
        let g = Tensor::rand(&[cols], 4);
        let b = Tensor::randn(&[cols], 5);
        let want = reference::layer_norm(
            &f64s(&vals(&x)),
            &f64s(&vals(&g)),
            &f64s(&vals(&b)),
            cols,
            1e-5,
        );
        assert_close(&vals(&layernorm(&x, &g, &b).unwrap()), &want, 1e-4);
    }
}

#[test]
fn nested_jit_functions_are_inlined() {
    let (rows, d) = (4, 8);
    let x = Tensor::randn(&[rows, d], 1);
    let g = Tensor::ones(&[d], DType::F32);
    let b = Tensor::zeros(&[d], DType::F32);
    let w = Tensor::randn(&[d, d], 2);
    let y = block(&x, &g, &b, &w).unwrap();
    // Reference: composed by hand from the f64 helpers.
    let xv = f64s(&vals(&x));
    let h = reference::layer_norm(&xv, &vec![1.0; d], &vec![0.0; d], d, 1e-5);
    let m = reference::matmul(&h, &f64s(&vals(&w)), rows, d, d);
    let want: Vec<f64> = xv
        .iter()
        .zip(&m)
        .map(|(x, v)| x + reference::gelu(*v))
        .collect();
    assert_close(&vals(&y), &want, 1e-4);
    // The inner function was traced into the outer one, not compiled alone.
    let outer = block::jit().handlers();
    assert_eq!(outer.len(), 1);
    assert!(
        outer[0].traced_text().contains("rsqrt"),
        "layernorm inlined into block"
    );
    assert!(outer[0].traced_text().contains("matmul"));
}

#[jit]
fn two_outputs(x: &Tensor, flip: bool) -> (Tensor, Tensor) {
    if flip {
        (x.max(-1, false), x.min(-1, false))
    } else {
        (x.min(-1, false), x.max(-1, false))
    }
}

#[test]
fn tuple_results_and_bool_static_args() {
    let x = t32(&[3.0, -1.0, 2.0, 7.0], &[2, 2]);
    let (lo, hi) = two_outputs(&x, false).unwrap();
    assert_eq!((vals(&lo), vals(&hi)), (vec![-1.0, 2.0], vec![3.0, 7.0]));
    let (hi2, lo2) = two_outputs(&x, true).unwrap();
    assert_eq!((vals(&lo2), vals(&hi2)), (vec![-1.0, 2.0], vec![3.0, 7.0]));
    assert_eq!(two_outputs::jit().handlers().len(), 2);
}

#[test]
fn closures_capture_tensors_as_constants() {
    let w = t32(&[1.0, 10.0, 100.0], &[3]);
    let f = jit_fn!(|x: &Tensor| x * &w + 1.0);
    assert_eq!(
        vals(&f.call(t32(&[1.0, 2.0, 3.0], &[3])).unwrap()),
        vec![2.0, 21.0, 301.0]
    );
    assert_eq!(
        vals(&w),
        vec![1.0, 10.0, 100.0],
        "the capture is borrowed, not moved"
    );
    assert!(f.handlers()[0]
        .graph_text()
        .contains("const [1.0, 10.0, 100.0]"));
    let g = jit_fn!(move |x: &Tensor, k: f64| -> Tensor { (x * k).exp() });
    let y = g.call((&Tensor::zeros(&[2], DType::F64), 5.0)).unwrap();
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![1.0, 1.0]);
}

#[test]
fn tensors_made_inside_a_body_are_constants() {
    let f = jit_fn!(|x: &Tensor| x + Tensor::arange(3, DType::F32));
    assert_eq!(
        vals(&f.call(Tensor::ones(&[2, 3], DType::F32)).unwrap()),
        vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    );
}

#[test]
fn params_can_be_outputs_and_scalars_mix_with_them() {
    let f = jit_fn!(|x: &Tensor, k: f32| (x.sum_all() * k, k * 2.0 + 1.0));
    let (s, k2) = f.call((&t32(&[1.0, 2.0], &[2]), 3.0f32)).unwrap();
    assert_eq!(s.item::<f32>().unwrap(), 9.0);
    assert_eq!(k2.item::<f32>().unwrap(), 7.0);
}

#[test]
fn escaped_traced_tensors_are_caught() {
    use std::sync::Mutex;
    let stash: Mutex<Option<Tensor>> = Mutex::new(None);
    let f = jit_fn!(|x: &Tensor| {
        *stash.lock().unwrap() = Some(x.clone());
        x * 2.0
    });
    f.call(Tensor::ones(&[2], DType::F32)).unwrap();
    let escaped = stash.lock().unwrap().clone().unwrap();
    assert!(escaped.is_traced());
    let e = (&escaped + 1.0).error().cloned().expect("error");
    assert!(matches!(e, Error::ForeignTrace { .. }), "{e}");
    assert!(escaped.to_vec::<f32>().is_err());
    let g = jit_fn!(|x: &Tensor| x * 3.0);
    let e = g.call(&escaped).unwrap_err();
    assert!(e.to_string().contains("another trace"), "{e}");
}

static FLIGHT_TRACES: AtomicUsize = AtomicUsize::new(0);

#[jit]
fn slow_to_trace(x: &Tensor) -> Tensor {
    FLIGHT_TRACES.fetch_add(1, Ordering::SeqCst);
    std::thread::sleep(std::time::Duration::from_millis(50)); // widen the race window
    x.exp() + 1.0
}

#[test]
fn single_flight_many_threads_one_trace() {
    let threads = 8;
    let barrier = Arc::new(Barrier::new(threads));
    let x = Tensor::zeros(&[16], DType::F32);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (barrier, x) = (barrier.clone(), x.clone());
            std::thread::spawn(move || {
                barrier.wait();
                vals(&slow_to_trace(&x).unwrap())
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), vec![2.0; 16]);
    }
    assert_eq!(
        FLIGHT_TRACES.load(Ordering::SeqCst),
        1,
        "exactly one trace for one signature"
    );
    let s = slow_to_trace::jit().stats();
    assert_eq!(s.builds, 1);
    assert_eq!(s.hits + s.misses, threads as u64);
}

static FAILING_TRACES: AtomicUsize = AtomicUsize::new(0);

#[jit]
fn fails_to_trace(x: &Tensor, panic_instead: bool) -> Tensor {
    FAILING_TRACES.fetch_add(1, Ordering::SeqCst);
    std::thread::sleep(std::time::Duration::from_millis(30));
    if panic_instead {
        panic!("user bug in the body");
    }
    x.reshape(&[1000])
}

#[test]
fn failed_and_panicking_traces_release_waiters_and_cache_nothing() {
    for panic_instead in [false, true] {
        let threads = 6;
        let barrier = Arc::new(Barrier::new(threads));
        let start = FAILING_TRACES.load(Ordering::SeqCst);
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    fails_to_trace(&Tensor::ones(&[3], DType::F32), panic_instead).unwrap_err()
                })
            })
            .collect();
        for h in handles {
            let e = h.join().expect("no panic escapes a jit call");
            let msg = e.to_string();
            if panic_instead {
                assert!(
                    matches!(e, Error::Panic { .. }) && msg.contains("user bug in the body"),
                    "{msg}"
                );
            } else {
                assert!(msg.contains("`reshape`"), "{msg}");
            }
        }
        let traces = FAILING_TRACES.load(Ordering::SeqCst) - start;
        assert!((1..=threads).contains(&traces));
        assert!(
            fails_to_trace::jit().handlers().is_empty(),
            "no poisoned entry"
        );
        // The next call traces again (and fails again, cleanly).
        assert!(fails_to_trace(&Tensor::ones(&[3], DType::F32), panic_instead).is_err());
        assert_eq!(FAILING_TRACES.load(Ordering::SeqCst) - start, traces + 1);
    }
}

#[test]
fn jit_matches_eager_on_a_composite() {
    let f = jit_fn!(|x: &Tensor, w: &Tensor, b: &Tensor| (x.matmul(w) + b).gelu().softmax(-1));
    let x = Tensor::randn(&[3, 5], 1);
    let w = Tensor::randn(&[5, 4], 2);
    let b = Tensor::randn(&[4], 3);
    let eager = (x.matmul(&w) + &b).gelu().softmax(-1);
    let jitted = f.call((&x, &w, &b)).unwrap();
    assert_eq!(vals(&jitted), vals(&eager), "same oracle, same bits");
    let m = reference::matmul(&f64s(&vals(&x)), &f64s(&vals(&w)), 3, 5, 4);
    let bv = f64s(&vals(&b));
    let pre: Vec<f64> = m
        .iter()
        .enumerate()
        .map(|(i, v)| reference::gelu(v + bv[i % 4]))
        .collect();
    assert_close(&vals(&jitted), &reference::softmax(&pre, 4), 1e-5);
}

/// A frozen function serves the signatures it has and refuses new ones
/// with an error that names the nearest one seen, tracing nothing; thawed,
/// it traces again.
#[test]
fn frozen_functions_refuse_new_signatures() {
    let f = jit_fn!(|x: &Tensor| x * 2.0 + 1.0);
    f.freeze();
    let e = f.call((&t32(&[1.0], &[1]),)).unwrap_err();
    assert!(e.to_string().contains("nothing compiled yet"), "{e}");
    f.unfreeze();
    let four = t32(&[1.0, 2.0, 3.0, 4.0], &[4]);
    assert_eq!(vals(&f.call((&four,)).unwrap()), [3.0, 5.0, 7.0, 9.0]);
    f.freeze();
    assert!(f.is_frozen());
    assert_eq!(vals(&f.call((&four,)).unwrap()), [3.0, 5.0, 7.0, 9.0]);
    let five = t32(&[0.0; 5], &[5]);
    let e = f.call((&five,)).unwrap_err();
    assert!(matches!(e, Error::Frozen { .. }), "{e:?}");
    assert_eq!(e.code(), 1);
    let text = e.to_string();
    assert!(
        text.contains("is frozen") && text.contains("args[0]: f32[5] vs nearest seen f32[4]"),
        "{text}"
    );
    assert_eq!((f.stats().builds, f.handlers().len()), (1, 1));
    assert!(f.to_string().contains(", frozen"), "{f}");
    f.unfreeze();
    assert_eq!(vals(&f.call((&five,)).unwrap()), [1.0; 5]);
    assert_eq!(f.stats().builds, 2);
}

/// The handler cache keeps at most its capacity of signatures, dropping
/// the least recently used (counted); a dropped signature retraces on its
/// next call and still computes the right values.
#[test]
fn handler_cache_evicts_least_recently_used_signatures() {
    let f = jit_fn!(|x: &Tensor| x.exp() - 1.0);
    f.set_capacity(2);
    let x = |n: usize| Tensor::arange(n, DType::F32);
    let want = |n: usize| -> Vec<f32> { (0..n).map(|i| (i as f32).exp() - 1.0).collect() };
    // Hits stamp the coarse clock (a few ms): space the calls out so the
    // recency order is unambiguous.
    let pause = || std::thread::sleep(std::time::Duration::from_millis(25));
    for n in [1, 2, 1, 3] {
        assert_close(&vals(&f.call((&x(n),)).unwrap()), &f64s(&want(n)), 1e-6);
        pause();
    }
    let seen: Vec<String> = f
        .handlers()
        .iter()
        .map(|h| h.signature.to_string())
        .collect();
    assert_eq!(
        seen,
        ["(f32[1])", "(f32[3])"],
        "[2] was used least recently"
    );
    let s = f.stats();
    assert_eq!((s.builds, s.evictions, s.hits), (3, 1, 1));
    assert_close(&vals(&f.call((&x(2),)).unwrap()), &f64s(&want(2)), 1e-6);
    assert_eq!((f.stats().builds, f.stats().evictions), (4, 2));
    f.set_capacity(1);
    assert_eq!(f.handlers().len(), 1);
    assert!(f.to_string().contains("3 evicted"), "{f}");
}

/// Sixteen outputs.
type Sixteen = (
    Tensor,
    Tensor,
    Tensor,
    Tensor,
    Tensor,
    Tensor,
    Tensor,
    Tensor,
    Tensor,
    Tensor,
    Tensor,
    Tensor,
    Tensor,
    Tensor,
    Tensor,
    Tensor,
);

/// `jit_fn!` takes sixteen arguments (mixed kinds) and returns sixteen
/// outputs, each checked against the value computed here.
#[test]
fn jit_fn_takes_and_returns_sixteen() {
    let f = jit_fn!(|a: &Tensor,
                     b: &Tensor,
                     c: &Tensor,
                     d: &Tensor,
                     e: &Tensor,
                     f: &Tensor,
                     g: &Tensor,
                     h: &Tensor,
                     i: &Tensor,
                     j: &Tensor,
                     k: &Tensor,
                     l: &Tensor,
                     m: &Tensor,
                     n: &Tensor,
                     s: f32,
                     p: i64|
     -> Sixteen {
        let all = [a, b, c, d, e, f, g, h, i, j, k, l, m, n];
        let sum = all
            .iter()
            .fold(Tensor::zeros(&[2], DType::F32), |acc, t| acc + *t);
        let scaled = &sum * s;
        let shifted = &sum + p as f64;
        (
            sum.clone(),
            scaled,
            shifted,
            a * 1.0,
            b * 1.0,
            c * 1.0,
            d * 1.0,
            e * 1.0,
            f * 1.0,
            g * 1.0,
            h * 1.0,
            i * 1.0,
            j * 1.0,
            k * 1.0,
            l * 1.0,
            m + n,
        )
    });
    let ts: Vec<Tensor> = (0..14)
        .map(|i| Tensor::full(&[2], i as f64, DType::F32))
        .collect();
    let out = f
        .call((
            &ts[0], &ts[1], &ts[2], &ts[3], &ts[4], &ts[5], &ts[6], &ts[7], &ts[8], &ts[9],
            &ts[10], &ts[11], &ts[12], &ts[13], 0.5f32, 3i64,
        ))
        .unwrap();
    assert_eq!(out.0.to_vec::<f32>().unwrap(), [91.0; 2]); // 0 + 1 + ... + 13
    assert_eq!(out.1.to_vec::<f32>().unwrap(), [45.5; 2]);
    assert_eq!(out.2.to_vec::<f32>().unwrap(), [94.0; 2]);
    assert_eq!(out.8.to_vec::<f32>().unwrap(), [5.0; 2]);
    assert_eq!(out.15.to_vec::<f32>().unwrap(), [25.0; 2]);
}

/// A body of 4000 dependent elementwise steps (what an unrolled loop
/// traces) compiles in bounded kernels and computes what the same steps
/// give in plain f32 Rust, on Host and on Sim.
#[test]
fn a_body_of_thousands_of_steps_runs_on_every_backend() {
    const STEPS: usize = 4000;
    let f = tilejit::jit_fn!(|x: &Tensor| {
        let mut y = x.clone();
        for i in 0..STEPS {
            y = if i % 2 == 0 { &y * 1.0005 } else { &y + 0.25 };
        }
        y
    });
    let input = [-3.0f32, 0.0, 0.25, 8.0, 100.0, -1e3];
    let want: Vec<f64> = input
        .iter()
        .map(|&v| {
            let mut y = v;
            for i in 0..STEPS {
                y = if i % 2 == 0 { y * 1.0005 } else { y + 0.25 };
            }
            y as f64
        })
        .collect();
    let x = t32(&input, &[2, 3]);
    for mode in [RunMode::Host, RunMode::Sim] {
        let got = f.with_mode(mode).call((&x,)).unwrap();
        assert_close(&vals(&got), &want, 1e-4);
    }
}
