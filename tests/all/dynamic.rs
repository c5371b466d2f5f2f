//! Dynamic jit functions: every dim a symbol (`#[jit(dynamic = all)]`,
//! `make_dynamic_all`), and, at the end, automatic dynamic
//! (`#[jit(dynamic)]`: a dim is a symbol once seen to vary). One trace per
//! shape class, instantiated for each new size. Every size is checked
//! against the same body traced exactly (the path every other test
//! covers) and against numbers computed here, on Host and Sim; the body
//! counts its own runs, so "one trace" is measured, not taken from the
//! code under test.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tilejit::prelude::*;
use tilejit::PerSize;
use tilejit_tests::reference;

static BIAS_RELU_RUNS: AtomicUsize = AtomicUsize::new(0);

#[jit(dynamic = all)]
fn bias_relu(x: &Tensor, b: &Tensor) -> Tensor {
    BIAS_RELU_RUNS.fetch_add(1, Ordering::Relaxed);
    (x + b).relu()
}

#[jit]
fn bias_relu_exact(x: &Tensor, b: &Tensor) -> Tensor {
    (x + b).relu()
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// The handler of the signature with a `[rows,cols]` tensor.
fn handler(f: &tilejit::JitFunction, rows: usize, cols: usize) -> tilejit::jit::HandlerInfo {
    let dims = format!("[{rows},{cols}]");
    f.handlers()
        .into_iter()
        .find(|h| h.signature.to_string().contains(&dims))
        .unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    f32s(t).iter().map(|v| v.to_bits()).collect()
}

/// Twenty sizes of one class: two body runs (at the two sets of stand-in
/// sizes; the body reads no size, so nothing is pinned), one compiled host kernel
/// shared by every size, every result equal to the exact trace's bits and
/// to `max(x + b, 0)` computed here.
#[test]
fn twenty_sizes_trace_once_and_share_one_kernel() {
    let f = bias_relu::jit();
    assert!(f.is_dynamic());
    let mut first_code = None;
    for i in 1..=20 {
        let (rows, cols) = (i + 1, 50 * i + 3);
        let x = Tensor::randn(&[rows, cols], i as u64);
        let b = Tensor::randn(&[cols], 100 + i as u64);
        let y = bias_relu(&x, &b).unwrap();
        assert_eq!(bits(&y), bits(&bias_relu_exact(&x, &b).unwrap()));
        let (xv, bv) = (f32s(&x), f32s(&b));
        let want: Vec<f32> = (0..rows * cols)
            .map(|k| (xv[k] + bv[k % cols]).max(0.0))
            .collect();
        assert_eq!(f32s(&y), want);
        let h = handler(f, rows, cols);
        let code: Vec<_> = h.program.host().code().to_vec();
        match &first_code {
            None => first_code = Some(code),
            Some(c) => {
                assert_eq!(c.len(), code.len());
                assert!(c.iter().zip(&code).all(|(a, b)| Arc::ptr_eq(a, b)));
            }
        }
    }
    assert_eq!(BIAS_RELU_RUNS.load(Ordering::Relaxed), 2);
    let s = f.stats();
    assert_eq!((s.traces, s.builds), (2, 20));
    let classes = f.shape_classes();
    assert_eq!(classes.len(), 1);
    assert_eq!(classes[0].0.to_string(), "(f32[n0,n1], f32[n1])");
    assert_eq!(classes[0].1, Ok(()));
    assert!(f
        .to_string()
        .contains("class (f32[n0,n1], f32[n1]): generic"));
}

static NORM_RUNS: AtomicUsize = AtomicUsize::new(0);

/// `layer_norm` divides by the row length (a size used as a value) and
/// `flatten` reshapes to a product of sizes (without reading them).
#[jit(dynamic = all)]
fn norm_flat(x: &Tensor, g: &Tensor, b: &Tensor) -> Tensor {
    NORM_RUNS.fetch_add(1, Ordering::Relaxed);
    x.layer_norm(g, b, 1e-5).flatten(0, -1)
}

#[test]
fn a_size_used_as_a_value_and_a_product_of_sizes_stay_generic_on_host_and_sim() {
    let f = norm_flat::jit();
    for (i, (rows, cols)) in [(3, 8), (5, 33), (2, 100), (7, 257), (4, 64)]
        .into_iter()
        .enumerate()
    {
        let x = Tensor::randn(&[rows, cols], i as u64);
        let g = Tensor::randn(&[cols], 10 + i as u64);
        let b = Tensor::randn(&[cols], 20 + i as u64);
        let to64 = |t: &Tensor| f32s(t).iter().map(|&v| v as f64).collect::<Vec<_>>();
        let want = reference::layer_norm(&to64(&x), &to64(&g), &to64(&b), cols, 1e-5);
        for mode in [RunMode::Host, RunMode::Sim] {
            let y = with_mode(mode, || norm_flat(&x, &g, &b)).unwrap();
            assert_eq!(y.shape(), [rows * cols]);
            for (k, (a, w)) in f32s(&y).iter().zip(&want).enumerate() {
                assert!(
                    (*a as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "{mode:?} [{rows},{cols}] element {k}: {a} vs {w}"
                );
            }
        }
    }
    assert_eq!(NORM_RUNS.load(Ordering::Relaxed), 2);
    assert_eq!(f.stats().traces, 2);
    // The divisor is a param, so every size runs the same host kernels.
    let handlers = f.handlers();
    let code0 = handlers[0].program.host().code().to_vec();
    for h in &handlers[1..] {
        let code = h.program.host().code();
        assert!(code0.iter().zip(code).all(|(a, b)| Arc::ptr_eq(a, b)));
    }
}

#[jit(dynamic = all)]
fn add2(x: &Tensor, y: &Tensor) -> Tensor {
    x + y
}

#[jit]
fn add2_exact(x: &Tensor, y: &Tensor) -> Tensor {
    x + y
}

/// Sizes that break a class's relations are another class, whose exact
/// trace fails as any exact trace does; dims of 1 are a class of their own.
#[test]
fn sizes_that_break_the_class_get_the_exact_error() {
    let a = Tensor::ones(&[10], DType::F32);
    let b = Tensor::ones(&[11], DType::F32);
    let dynamic = add2(&a, &b).unwrap_err();
    let exact = add2_exact(&a, &b).unwrap_err();
    assert_eq!(dynamic.kind(), exact.kind());
    assert!(dynamic.to_string().contains("f32[10]"), "{dynamic}");
    assert!(
        dynamic.to_string().contains("do not broadcast"),
        "{dynamic}"
    );
    // [10] + [10], [11] + [11]: one class; [1] + [1]: another.
    for n in [10, 11, 1] {
        let x = Tensor::full(&[n], 2.0, DType::F32);
        assert_eq!(f32s(&add2(&x, &x).unwrap()), vec![4.0; n]);
    }
    let classes: Vec<String> = add2::jit()
        .shape_classes()
        .iter()
        .map(|(c, _)| c.to_string())
        .collect();
    // A class whose first trace fails is not kept: the next call of it
    // traces again, as an exact function would.
    assert_eq!(classes, ["(f32[1], f32[1])", "(f32[n0], f32[n0])"]);
}

static HALVES_RUNS: AtomicUsize = AtomicUsize::new(0);

/// `n / 2` cannot be read back from a trace (the stand-in is prime), so
/// this function is traced per size, correctly, and says why.
#[jit(dynamic = all)]
fn halves(x: &Tensor) -> Tensor {
    HALVES_RUNS.fetch_add(1, Ordering::Relaxed);
    let n = x.shape()[0];
    x.reshape(&[n / 2, 2]).sum(1, false)
}

#[test]
fn a_body_that_is_not_size_generic_is_traced_per_size() {
    let f = halves::jit();
    for n in [4usize, 6, 8] {
        let x = Tensor::arange(n, DType::F32);
        let y = halves(&x).unwrap();
        let want: Vec<f32> = (0..n / 2).map(|i| (4 * i + 1) as f32).collect();
        assert_eq!(f32s(&y), want);
    }
    // One stand-in trace, which reads the only size, then one exact trace
    // per size.
    assert_eq!(HALVES_RUNS.load(Ordering::Relaxed), 4);
    assert_eq!(f.stats().traces, 4);
    let classes = f.shape_classes();
    assert_eq!(classes.len(), 1);
    assert_eq!(classes[0].1, Err(PerSize::ReadsEverySize));
    // The log and `Display` word it as before the reason was typed.
    assert!(f
        .to_string()
        .contains("traced per size (the body reads every size)"));
}

#[jit(dynamic = all)]
fn scaled(x: &Tensor) -> Tensor {
    let n = x.shape()[0] as f32;
    x * (1.0 / n)
}

/// A value computed from a size (here `1/n`) cannot be redone at other
/// sizes: the size read is a guard, and as it is the only one, the class
/// is traced per size, never with the stand-in's value.
#[test]
fn a_value_computed_from_a_size_is_never_baked_in() {
    for n in [4usize, 5, 8] {
        let x = Tensor::ones(&[n], DType::F32);
        let y = scaled(&x).unwrap();
        assert_eq!(f32s(&y), vec![1.0 / n as f32; n]);
    }
    let classes = scaled::jit().shape_classes();
    assert_eq!(classes[0].1, Err(PerSize::ReadsEverySize));
}

/// Each value plus the mean of them all (`x` of `[a, b, c, 1]`), after
/// reading `y`'s element count (a guard on `y`'s first dim, `x`'s too).
fn plus_mean_body(x: &Tensor, y: &Tensor) -> Tensor {
    let _guard = y * (y.numel() as f64);
    (&x.flatten(0, -1) + x).mean(3, true)
}

#[jit(dynamic)]
fn plus_mean(x: &Tensor, y: &Tensor) -> Tensor {
    plus_mean_body(x, y)
}

#[jit(dynamic = all)]
fn plus_mean_all(x: &Tensor, y: &Tensor) -> Tensor {
    plus_mean_body(x, y)
}

/// The fuzzer's (`dynamic`, seed 151): each value plus the mean of them
/// all, whose divisor, the product of three sizes, is an f32 `full`.
/// Automatic dynamic, with a guard pinning the first size, traced the
/// class at `[5, 1031, 2053, 1]` and read the rounded divisors back as
/// the product plus the rounding's offset: every call of the class then
/// divided by its size plus one. Now each call matches the definition, on
/// Host and Sim, in both dynamic modes.
#[test]
fn a_size_rounded_in_its_float_literal_is_not_read_back() {
    let calls = [[2usize, 5, 5], [2, 3, 4], [5, 2, 3], [5, 3, 3]];
    for (name, f) in [
        ("auto", plus_mean as fn(&Tensor, &Tensor) -> _),
        ("all", plus_mean_all),
    ] {
        for (i, [a, b, c]) in calls.into_iter().enumerate() {
            let x = Tensor::randn(&[a, b, c, 1], 30 + i as u64);
            let y = Tensor::randn(&[a, 1], 40 + i as u64);
            let values: Vec<f64> = f32s(&x).iter().map(|&v| v as f64).collect();
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            for mode in [RunMode::Host, RunMode::Sim] {
                let got = f32s(&with_mode(mode, || f(&x, &y)).unwrap());
                assert_eq!(got.len(), values.len(), "{name} {mode:?} call {i}");
                for (g, v) in got.iter().zip(&values) {
                    let want = v + mean;
                    assert!(
                        (*g as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{name} {mode:?} call {i} {:?}: {g} vs {want}",
                        [a, b, c]
                    );
                }
            }
        }
    }
    // The class whose stand-in divisors stay below 2^24 is generic; the
    // two whose divisors rounded are traced per size.
    let states: Vec<_> = plus_mean::jit().shape_classes();
    let generic = states.iter().filter(|(_, s)| s.is_ok()).count();
    assert_eq!((states.len(), generic), (3, 1), "{states:?}");
}

#[jit(dynamic = all)]
fn frozen_double(x: &Tensor) -> Tensor {
    x * 2.0
}

/// A frozen dynamic function serves new sizes of classes it traced; a new
/// class is still `Frozen`.
#[test]
fn frozen_serves_new_sizes_of_known_classes() {
    let f = frozen_double::jit();
    frozen_double(&Tensor::ones(&[3, 4], DType::F32)).unwrap();
    f.freeze();
    let y = frozen_double(&Tensor::ones(&[5, 6], DType::F32)).unwrap();
    assert_eq!(f32s(&y), vec![2.0; 30]);
    let e = frozen_double(&Tensor::ones(&[5], DType::F32)).unwrap_err();
    assert!(matches!(e, tilejit::Error::Frozen { .. }), "{e}");
    f.unfreeze();
    assert_eq!(f.stats().traces, 2);
}

static THREADED_RUNS: AtomicUsize = AtomicUsize::new(0);

#[jit(dynamic = all)]
fn threaded(x: &Tensor) -> Tensor {
    THREADED_RUNS.fetch_add(1, Ordering::Relaxed);
    (x * x).sum(-1, false)
}

/// Eight threads, each with its own sizes of one class, all at once:
/// every result right, one class, at most two traces per thread (threads
/// that meet an untraced class may each trace it at both stand-in sets).
#[test]
fn threads_with_different_sizes_of_one_class() {
    std::thread::scope(|s| {
        for t in 0..8usize {
            s.spawn(move || {
                for r in 0..10usize {
                    let (rows, cols) = (2 + t, 3 + r * 7 + t);
                    let x = Tensor::full(&[rows, cols], 3.0, DType::F32);
                    let y = threaded(&x).unwrap();
                    assert_eq!(f32s(&y), vec![9.0 * cols as f32; rows]);
                }
            });
        }
    });
    let f = threaded::jit();
    assert_eq!(f.shape_classes().len(), 1);
    assert!(THREADED_RUNS.load(Ordering::Relaxed) <= 16);
    assert_eq!(f.stats().builds, 80);
}

static SAVED_RUNS: AtomicUsize = AtomicUsize::new(0);

#[jit(dynamic = all)]
fn saved_norm(x: &Tensor, g: &Tensor, b: &Tensor) -> Tensor {
    SAVED_RUNS.fetch_add(1, Ordering::Relaxed);
    x.layer_norm(g, b, 1e-5)
}

/// A dynamic function's programs carry their size params (`mean`'s
/// divisor) through a snapshot: reloaded, every size runs with no trace
/// and the same bits.
#[test]
fn a_snapshot_of_a_dynamic_function_keeps_its_size_params() {
    let f = saved_norm::jit();
    let sizes = [(3usize, 8usize), (5, 33), (2, 100)];
    let args: Vec<[Tensor; 3]> = sizes
        .iter()
        .enumerate()
        .map(|(i, &(r, c))| {
            [
                Tensor::randn(&[r, c], i as u64),
                Tensor::randn(&[c], 10 + i as u64),
                Tensor::randn(&[c], 20 + i as u64),
            ]
        })
        .collect();
    let before: Vec<Vec<u32>> = args
        .iter()
        .map(|[x, g, b]| bits(&saved_norm(x, g, b).unwrap()))
        .collect();
    assert_eq!(SAVED_RUNS.load(Ordering::Relaxed), 2);
    let path = std::env::temp_dir().join(format!("tilejit-dyn-snap-{}.tjs", std::process::id()));
    f.save(&path).unwrap();
    f.clear();
    assert_eq!(f.load(&path).unwrap(), 3);
    let _ = std::fs::remove_file(&path);
    for ([x, g, b], want) in args.iter().zip(&before) {
        assert_eq!(&bits(&saved_norm(x, g, b).unwrap()), want);
    }
    assert_eq!(SAVED_RUNS.load(Ordering::Relaxed), 2);
}

/// Bodies that compute values or sizes from sizes in ways factoring cannot
/// read back, each called at several sizes of one class: every result
/// equals the same body traced exactly (what the review of the first
/// version found it got wrong).
mod size_arithmetic {
    use super::*;

    macro_rules! both {
        ($name:ident, $exact:ident, |$x:ident| $body:expr) => {
            #[jit(dynamic = all)]
            fn $name($x: &Tensor) -> Tensor {
                $body
            }
            #[jit]
            fn $exact($x: &Tensor) -> Tensor {
                $body
            }
        };
    }

    // A float numel: rounded in f32 at the stand-ins' product.
    both!(mean_all, mean_all_exact, |x| x.sum_all()
        / (x.shape().iter().product::<usize>() as f64));
    both!(minus_one, minus_one_exact, |x| x
        * ((x.shape()[0] - 1) as f64));
    both!(half, half_exact, |x| x * ((x.shape()[0] / 2) as f64));
    both!(over, over_exact, |x| x * (2.0 / x.shape()[1] as f64));
    both!(consts, consts_exact, |x| x + Tensor::arange(4, DType::F32)
        / x.shape()[0] as f64);
    both!(padded, padded_exact, |x| x.sum_all()
        + Tensor::zeros(&[x.shape()[0] + 1], DType::F32));

    #[test]
    fn every_size_matches_the_exact_trace() {
        type F = fn(&Tensor) -> tilejit::Result<Tensor>;
        let pairs: [(&str, F, F); 6] = [
            ("mean_all", mean_all, mean_all_exact),
            ("minus_one", minus_one, minus_one_exact),
            ("half", half, half_exact),
            ("over", over, over_exact),
            ("consts", consts, consts_exact),
            ("padded", padded, padded_exact),
        ];
        for (name, dynamic, exact) in pairs {
            for (i, (r, c)) in [(6, 4), (10, 4), (8, 4), (12, 4)].into_iter().enumerate() {
                let x = Tensor::randn(&[r, c], i as u64);
                let (d, e) = (dynamic(&x).unwrap(), exact(&x).unwrap());
                assert_eq!(d.shape(), e.shape(), "{name} [{r},{c}]");
                assert_eq!(bits(&d), bits(&e), "{name} [{r},{c}]");
            }
        }
        // The ones that read back as sizes stay generic; the rest fall back.
        let generic = |f: &tilejit::JitFunction| f.shape_classes()[0].1.is_ok();
        assert!(!generic(minus_one::jit()));
        assert!(!generic(half::jit()));
        assert!(!generic(over::jit()));
        assert!(!generic(consts::jit()));
        assert!(!generic(padded::jit()));
    }

    // Bodies that read no size but whose numbers a single stand-in trace
    // would misread: a literal equal to a stand-in (1031, the first of
    // set A), a bound counted from the end (`n1 - 1`). And a bf16 `mean`,
    // whose divisor bf16 would round at the stand-in.
    both!(literal_value, literal_value_exact, |x| x * 1031.0);
    both!(literal_size, literal_size_exact, |x| x
        .sum_all()
        .broadcast_to(&[1031]));
    both!(from_end, from_end_exact, |x| x.slice(1, 1, -1).exp());
    both!(bf16_mean, bf16_mean_exact, |x| x
        .cast(DType::BF16)
        .mean(-1, false)
        .cast(DType::F32));
    // f16 rounds 4123 to 4124, four stand-ins; what the graph holds counts.
    both!(f16_literal, f16_literal_exact, |x| (x.cast(DType::F16)
        * 4123.0)
        .cast(DType::F32));
    // Sizes read where the watch cannot see them: on another thread; and
    // as text (`Display` reads the whole shape).
    both!(off_thread, off_thread_exact, |x| {
        let n = std::thread::scope(|s| s.spawn(|| x.shape()[1]).join().unwrap());
        x * ((n - 1) as f64)
    });
    both!(as_text, as_text_exact, |x| x
        * (format!("{x}").len() as f64));

    /// Each body at three sizes of one class matches its exact twin bit for
    /// bit; what the class became (generic, or per size and why) and how
    /// many traces that took are as designed.
    #[test]
    fn literals_stay_constants_and_reads_become_guards() {
        type F = fn(&Tensor) -> tilejit::Result<Tensor>;
        // (function, dynamic, exact, Err(reason) if per size, traces)
        type Case<'a> = (&'a tilejit::JitFunction, F, F, Result<(), PerSize>, u64);
        let cases: [Case; 7] = [
            // Generic: the two stand-in traces, then none.
            (
                literal_value::jit(),
                literal_value,
                literal_value_exact,
                Ok(()),
                2,
            ),
            (
                literal_size::jit(),
                literal_size,
                literal_size_exact,
                Ok(()),
                2,
            ),
            (bf16_mean::jit(), bf16_mean, bf16_mean_exact, Ok(()), 2),
            (
                f16_literal::jit(),
                f16_literal,
                f16_literal_exact,
                Ok(()),
                2,
            ),
            // `slice` from the end reads dim 1 only: rows stay free. The
            // first size pins it (3 traces), each new width learns again (2).
            (from_end::jit(), from_end, from_end_exact, Ok(()), 7),
            // Per size: one stand-in trace, then one exact trace per size.
            (
                off_thread::jit(),
                off_thread,
                off_thread_exact,
                Err(PerSize::OffThreadRead),
                4,
            ),
            (
                as_text::jit(),
                as_text,
                as_text_exact,
                Err(PerSize::ReadsEverySize),
                4,
            ),
        ];
        for (f, dynamic, exact, class, traces) in cases {
            let name = f.name();
            for (i, c) in [5usize, 9, 6].into_iter().enumerate() {
                let x = Tensor::randn(&[3, c], 60 + i as u64);
                let (d, e) = (dynamic(&x).unwrap(), exact(&x).unwrap());
                assert_eq!(d.shape(), e.shape(), "{name} [3,{c}]");
                assert_eq!(bits(&d), bits(&e), "{name} [3,{c}]");
            }
            assert_eq!(f.shape_classes()[0].1, class, "{name}");
            assert_eq!(f.stats().traces, traces, "{name}");
        }
        assert!(
            from_end::jit().to_string().contains(
                "class (f32[n0,n1]): generic but for n1 (read by the body; 3 value(s) seen)"
            ),
            "{}",
            from_end::jit()
        );
        // Rows of `from_end` are free: a new row count at a known width
        // runs no trace.
        let x = Tensor::randn(&[7, 9], 99);
        assert_eq!(
            bits(&from_end(&x).unwrap()),
            bits(&from_end_exact(&x).unwrap())
        );
        assert_eq!(from_end::jit().stats().traces, 7);
        // A hand check of the first two: 1031 stays 1031 at every size.
        let x = Tensor::ones(&[3, 4], DType::F32);
        assert_eq!(f32s(&literal_value(&x).unwrap()), vec![1031.0; 12]);
        assert_eq!(literal_size(&x).unwrap().shape(), [1031]);
    }
}

/// The cases issue 35 found wrong on the first call: a constant holding
/// one repeated value (folded to a `full`) whose value or shape equals a
/// stand-in size, a captured tensor, an int argument, and a body that
/// reads a size and branches on its parity. Each is checked against its
/// exact twin bit for bit at several sizes, on Host and Sim, and against
/// numbers computed here.
mod never_wrong {
    use super::*;

    #[jit(dynamic = all)]
    fn add_const(x: &Tensor) -> Tensor {
        x + &Tensor::scalar(1031.0, DType::F32)
    }
    #[jit]
    fn add_const_exact(x: &Tensor) -> Tensor {
        x + &Tensor::scalar(1031.0, DType::F32)
    }
    #[jit(dynamic = all)]
    fn mul_full(x: &Tensor) -> Tensor {
        x * &Tensor::full(&[1], 2062.0, DType::F32)
    }
    #[jit]
    fn mul_full_exact(x: &Tensor) -> Tensor {
        x * &Tensor::full(&[1], 2062.0, DType::F32)
    }
    #[jit(dynamic = all)]
    fn zeros_1031(x: &Tensor) -> Tensor {
        x.sum_all() + Tensor::zeros(&[1031], DType::F32)
    }
    #[jit]
    fn zeros_1031_exact(x: &Tensor) -> Tensor {
        x.sum_all() + Tensor::zeros(&[1031], DType::F32)
    }
    #[jit(dynamic = all)]
    fn pick_1031(x: &Tensor) -> Tensor {
        x.gather(1, &Tensor::full(&[1, 1], 1031.0, DType::I64))
    }
    #[jit]
    fn pick_1031_exact(x: &Tensor) -> Tensor {
        x.gather(1, &Tensor::full(&[1, 1], 1031.0, DType::I64))
    }
    #[jit(dynamic = all)]
    fn scalar_arg(x: &Tensor, k: i64) -> Tensor {
        x + &Tensor::scalar(k as f64, DType::F32)
    }
    #[jit]
    fn scalar_arg_exact(x: &Tensor, k: i64) -> Tensor {
        x + &Tensor::scalar(k as f64, DType::F32)
    }
    #[jit(dynamic = all)]
    fn parity(x: &Tensor) -> Tensor {
        let n = x.shape()[1];
        x * ((n * (n % 2)) as f64)
    }
    #[jit]
    fn parity_exact(x: &Tensor) -> Tensor {
        let n = x.shape()[1];
        x * ((n * (n % 2)) as f64)
    }
    #[jit(dynamic = all)]
    fn parity_dim(x: &Tensor) -> tilejit::Result<Tensor> {
        let n = x.dim(1)?;
        Ok(x * ((n * (n % 2)) as f64))
    }

    /// `f(x)` in `mode`, compared bit for bit with `exact(x)` there.
    fn same(
        name: &str,
        f: impl Fn(&Tensor) -> tilejit::Result<Tensor>,
        exact: impl Fn(&Tensor) -> tilejit::Result<Tensor>,
        x: &Tensor,
    ) -> Tensor {
        let mut out = None;
        for mode in [RunMode::Host, RunMode::Sim] {
            let d = with_mode(mode, || f(x)).unwrap();
            let e = with_mode(mode, || exact(x)).unwrap();
            assert_eq!(d.shape(), e.shape(), "{name} {mode:?} {:?}", x.shape());
            assert_eq!(bits(&d), bits(&e), "{name} {mode:?} {:?}", x.shape());
            out = Some(d);
        }
        out.unwrap()
    }

    #[test]
    fn constants_equal_to_a_standin_are_constants() {
        for (r, c) in [(3, 5), (2, 8), (4, 1100)] {
            let x = Tensor::randn(&[r, c], (r * c) as u64);
            let xv = f32s(&x);
            let y = same("add_const", add_const, add_const_exact, &x);
            assert_eq!(f32s(&y), xv.iter().map(|v| v + 1031.0).collect::<Vec<_>>());
            let y = same("mul_full", mul_full, mul_full_exact, &x);
            assert_eq!(f32s(&y), xv.iter().map(|v| v * 2062.0).collect::<Vec<_>>());
            let y = same("zeros_1031", zeros_1031, zeros_1031_exact, &x);
            assert_eq!(y.shape(), [1031]);
            let y = same(
                "scalar_arg",
                |x| scalar_arg(x, 1031),
                |x| scalar_arg_exact(x, 1031),
                &x,
            );
            assert_eq!(f32s(&y), xv.iter().map(|v| v + 1031.0).collect::<Vec<_>>());
        }
        for f in [
            add_const::jit(),
            mul_full::jit(),
            zeros_1031::jit(),
            scalar_arg::jit(),
        ] {
            assert_eq!(f.shape_classes()[0].1, Ok(()), "{}", f.name());
            assert_eq!(f.stats().traces, 2, "{}", f.name());
        }
    }

    /// An index filled with 1031 picks column 1031 at every width past it,
    /// and is an index error (as the exact trace's) below it.
    #[test]
    fn an_index_equal_to_a_standin_stays_an_index() {
        for c in [1500usize, 1200, 2000] {
            let x = Tensor::randn(&[1, c], c as u64);
            let y = same("pick_1031", pick_1031, pick_1031_exact, &x);
            assert_eq!(f32s(&y), vec![f32s(&x)[1031]]);
        }
        let x = Tensor::randn(&[1, 600], 6);
        let (d, e) = (pick_1031(&x).unwrap_err(), pick_1031_exact(&x).unwrap_err());
        assert_eq!(d.kind(), e.kind());
    }

    /// A closure capturing a tensor of 3093 (3 x 1031).
    #[test]
    fn a_captured_tensor_is_a_constant() {
        let c = Tensor::full(&[1], 3093.0, DType::F32);
        let dynamic = jit_fn!(|x: &Tensor| x * &c);
        dynamic.make_dynamic_all();
        let exact = jit_fn!(|x: &Tensor| x * &c);
        for (r, n) in [(3, 5), (2, 8), (5, 7)] {
            let x = Tensor::randn(&[r, n], n as u64);
            let y = same("captured", |x| dynamic.call(x), |x| exact.call(x), &x);
            let want: Vec<f32> = f32s(&x).iter().map(|v| v * 3093.0).collect();
            assert_eq!(f32s(&y), want);
        }
        assert_eq!(dynamic.stats().traces, 2);
    }

    /// `x * (n * (n % 2))`: first at odd widths, then even ones, where
    /// the answer is 0. The read pins every size of `x`, or with `dim`
    /// only the width, so rows stay free.
    #[test]
    fn a_size_read_is_a_guard_not_a_guess() {
        for (r, c) in [(3, 5), (3, 7), (2, 8), (4, 6), (5, 9)] {
            let x = Tensor::randn(&[r, c], (r + c) as u64);
            let want: Vec<f32> = f32s(&x).iter().map(|v| v * (c * (c % 2)) as f32).collect();
            let y = same("parity", parity, parity_exact, &x);
            assert_eq!(f32s(&y), want, "[{r},{c}]");
            let y = same("parity_dim", parity_dim, parity_exact, &x);
            assert_eq!(f32s(&y), want, "[{r},{c}]");
        }
        assert_eq!(
            parity::jit().shape_classes()[0].1,
            Err(PerSize::ReadsEverySize)
        );
        // `dim(1)` pins the width only: a new row count at width 8 is free.
        assert_eq!(parity_dim::jit().shape_classes()[0].1, Ok(()));
        let traces = parity_dim::jit().stats().traces;
        let x = Tensor::randn(&[9, 8], 1);
        same("parity_dim", parity_dim, parity_exact, &x);
        assert_eq!(parity_dim::jit().stats().traces, traces);
    }
}

static SIM_RUNS: AtomicUsize = AtomicUsize::new(0);

#[jit(dynamic = all, mode = sim)]
fn sim_softmax_bias(x: &Tensor, b: &Tensor) -> Tensor {
    SIM_RUNS.fetch_add(1, Ordering::Relaxed);
    (x + b).softmax(-1)
}

/// On the simulated device too, twenty sizes of a class trace only when
/// the class is new, and every size runs the same device kernels (equal
/// cache keys: size-generic bytecode), each result checked against a
/// softmax computed here.
#[test]
fn twenty_sizes_share_device_kernels_on_sim() {
    let f = sim_softmax_bias::jit();
    let mut keys: Option<Vec<String>> = None;
    for i in 0..20usize {
        let (rows, cols) = (2 + i % 5, 30 + 37 * i);
        let x = Tensor::randn(&[rows, cols], i as u64);
        let b = Tensor::randn(&[cols], 50 + i as u64);
        let y = sim_softmax_bias(&x, &b).unwrap();
        let (xv, bv) = (f32s(&x), f32s(&b));
        let z: Vec<f64> = (0..rows * cols)
            .map(|k| xv[k] as f64 + bv[k % cols] as f64)
            .collect();
        let want = reference::softmax(&z, cols);
        for (k, (a, w)) in f32s(&y).iter().zip(&want).enumerate() {
            assert!(
                (*a as f64 - w).abs() <= 1e-5 + 1e-4 * w.abs(),
                "[{rows},{cols}] {k}: {a} vs {w}"
            );
        }
        let h = handler(f, rows, cols);
        let sim = h.program.sim().unwrap();
        let k: Vec<String> = sim.cache_keys().iter().map(|s| s.to_string()).collect();
        match &keys {
            None => keys = Some(k),
            Some(first) => assert_eq!(first, &k, "[{rows},{cols}]"),
        }
    }
    assert_eq!(SIM_RUNS.load(Ordering::Relaxed), 2);
}

static CUT_RUNS: AtomicUsize = AtomicUsize::new(0);

/// A cat of two `[t, d]` inputs cut back at `d`: reading `d` with `dim`
/// pins it, and `t` stays free, so new lengths at a known `d` need no
/// trace.
#[jit(dynamic = all)]
fn cut_back(x: &Tensor, y: &Tensor) -> tilejit::Result<Tensor> {
    CUT_RUNS.fetch_add(1, Ordering::Relaxed);
    let d = y.dim(1)?;
    let p = Tensor::cat(&[x, y], 1).exp().split(&[d, d], 1);
    Ok(Tensor::cat(&[&(&p[1] - &p[0]), &p[0]], 1))
}

#[jit]
fn cut_back_exact(x: &Tensor, y: &Tensor) -> Tensor {
    let d = y.shape()[1];
    let p = Tensor::cat(&[x, y], 1).exp().split(&[d, d], 1);
    Tensor::cat(&[&(&p[1] - &p[0]), &p[0]], 1)
}

/// Q, K and V cut from one `[t, 3d]` projection: the body reads the whole
/// shape, so this class is traced per size, and says why.
#[jit(dynamic = all)]
fn qkv_scores(x: &Tensor) -> Tensor {
    let d = x.shape()[1] / 3;
    let p = x.split(&[d, d, d], 1);
    Tensor::cat(&[&p[0].matmul(&p[1].transpose(0, 1)), &p[2]], 1)
}

#[jit]
fn qkv_scores_exact(x: &Tensor) -> Tensor {
    let d = x.shape()[1] / 3;
    let p = x.split(&[d, d, d], 1);
    Tensor::cat(&[&p[0].matmul(&p[1].transpose(0, 1)), &p[2]], 1)
}

#[test]
fn slices_and_concats_by_a_symbol_stay_generic() {
    for (i, (t, d)) in [(4, 5), (7, 3), (9, 8), (2, 11)].into_iter().enumerate() {
        let x = Tensor::randn(&[t, d], 40 + i as u64);
        let y = Tensor::randn(&[t, d], 50 + i as u64);
        for mode in [RunMode::Host, RunMode::Sim] {
            let got = with_mode(mode, || cut_back(&x, &y)).unwrap();
            assert_eq!(got.shape(), [t, 2 * d]);
            let want = with_mode(mode, || cut_back_exact(&x, &y)).unwrap();
            assert_eq!(bits(&got), bits(&want), "{mode:?} t={t} d={d}");
        }
        // exp(y) - exp(x), computed here.
        let (xv, yv, g) = (f32s(&x), f32s(&y), f32s(&cut_back(&x, &y).unwrap()));
        for r in 0..t {
            for c in 0..d {
                let want = yv[r * d + c].exp() - xv[r * d + c].exp();
                assert!((g[r * 2 * d + c] - want).abs() <= 1e-5 * want.abs().max(1.0));
            }
        }
    }
    assert_eq!(cut_back::jit().shape_classes()[0].1, Ok(()));
    // The first `d`: a trace that reads it, then both stand-in sets with
    // it pinned (3); each new `d` learns again (2 each).
    assert_eq!(CUT_RUNS.load(Ordering::Relaxed), 9);
    // A new `t` at a known `d`: no trace.
    let (x, y) = (Tensor::randn(&[6, 5], 1), Tensor::randn(&[6, 5], 2));
    assert_eq!(
        bits(&cut_back(&x, &y).unwrap()),
        bits(&cut_back_exact(&x, &y).unwrap())
    );
    assert_eq!(CUT_RUNS.load(Ordering::Relaxed), 9);
}

#[test]
fn a_third_of_a_dim_is_traced_per_size_with_its_reason() {
    for (t, d) in [(4, 5), (3, 2)] {
        let x = Tensor::randn(&[t, 3 * d], t as u64);
        let got = qkv_scores(&x).unwrap();
        assert_eq!(bits(&got), bits(&qkv_scores_exact(&x).unwrap()));
    }
    let classes = qkv_scores::jit().shape_classes();
    assert_eq!(classes[0].1, Err(PerSize::ReadsEverySize));
}

// ---- Automatic dynamic (`#[jit(dynamic)]`), slice_assign and a KV-cache
// decode in one trace.

static AUTO_RUNS: AtomicUsize = AtomicUsize::new(0);

/// A weight-projected tensor split in three (as a QKV projection is).
#[jit(dynamic)]
fn qkv_sum(x: &Tensor, w: &Tensor) -> Tensor {
    AUTO_RUNS.fetch_add(1, Ordering::Relaxed);
    let d = w.dim(0)?;
    let p = x.matmul(w);
    let parts = p.split(&[d, d, d], -1);
    let [q, k, v] = tilejit::args::exactly(&parts)?;
    q * 2.0 + k - v
}

/// The first call is an exact trace; a second length makes only the row
/// dim a symbol (the weight's dims stay fixed, so `split(&[d, d, d])`
/// traces), and every later length is instantiated with no trace.
/// Values are checked against the reference interpreter, on Host and Sim.
#[test]
fn automatic_dynamic_makes_only_varying_dims_symbols_and_split_of_weights_traces() {
    let d = 6;
    let w = Tensor::randn(&[d, 3 * d], 7);
    let f = qkv_sum::jit();
    for (i, t) in [3usize, 5, 9, 12, 17, 4, 30].into_iter().enumerate() {
        let x = Tensor::randn(&[t, d], 100 + t as u64);
        let want = tilejit::with_mode(RunMode::Reference, || qkv_sum(&x, &w)).unwrap();
        let want: Vec<f64> = f32s(&want).into_iter().map(f64::from).collect();
        for mode in [RunMode::Host, RunMode::Sim] {
            let got = tilejit::with_mode(mode, || qkv_sum(&x, &w)).unwrap();
            tilejit_tests::assert_close(&f32s(&got), &want, 1e-5);
        }
        // 1 exact trace, then the class's two stand-in traces, then none.
        let traces = f.stats().traces;
        assert_eq!(traces, if i == 0 { 1 } else { 3 }, "after length {t}");
    }
    let classes = f.shape_classes();
    assert_eq!(classes.len(), 1);
    assert_eq!(classes[0].0.to_string(), "(f32[n0,6], f32[6,18])");
    assert!(classes[0].1.is_ok());
}

#[jit(dynamic)]
fn pick(x: &Tensor) -> Tensor {
    x.softmax(-1).argmax(-1, false) + x.argmin(-1, false)
}

/// `argmax`/`argmin` over a fixed axis keep a class with a varying row
/// count generic (one class, no per-size reason, no pins).
#[test]
fn argmax_over_a_fixed_axis_stays_generic() {
    let f = pick::jit();
    for t in [2usize, 3, 7, 11, 20] {
        let x = Tensor::randn(&[t, 13], t as u64);
        let want = tilejit::with_mode(RunMode::Reference, || pick(&x)).unwrap();
        let got = pick(&x).unwrap();
        assert_eq!(got.to_vec::<i64>().unwrap(), want.to_vec::<i64>().unwrap());
    }
    assert_eq!(f.stats().traces, 3);
    let s = f.to_string();
    assert!(s.contains("class (f32[n0,13]): generic"), "{s}");
    // With every dim a symbol, the axis argmax reduces over is a guard
    // (its index dtype depends on it): pinned, never per size.
    let g = pick_all::jit();
    for t in [2usize, 3, 7] {
        let x = Tensor::randn(&[t, 13], t as u64);
        let want = tilejit::with_mode(RunMode::Reference, || pick_all(&x)).unwrap();
        assert_eq!(
            pick_all(&x).unwrap().to_vec::<i64>().unwrap(),
            want.to_vec::<i64>().unwrap()
        );
    }
    let s = g.to_string();
    assert!(s.contains("dynamic (every dim)"), "{s}");
    assert!(s.contains("class (f32[n0,n1]): generic but for n1"), "{s}");
}

#[jit(dynamic = all)]
fn pick_all(x: &Tensor) -> Tensor {
    x.softmax(-1).argmax(-1, false) + x.argmin(-1, false)
}

#[jit(dynamic)]
fn grow(cache: &Tensor, row: &Tensor) -> (Tensor, Tensor) {
    // A cache grown by `cat` is `n + 1` long; a reduction broadcast back
    // over it carries that size.
    let c = Tensor::cat(&[cache, row], 0);
    let s = c.softmax(0);
    (c, s)
}

/// `cat` along the growing dim gives `n + 1`, which reads back over the
/// stand-ins: one class, generic.
#[test]
fn a_cache_grown_by_cat_is_one_graph() {
    let f = grow::jit();
    let row = Tensor::randn(&[1, 4], 1);
    for n in [2usize, 3, 5, 8, 13, 21] {
        let cache = Tensor::randn(&[n, 4], n as u64);
        let (c, s) = grow(&cache, &row).unwrap();
        let (wc, ws) = tilejit::with_mode(RunMode::Reference, || grow(&cache, &row)).unwrap();
        assert_eq!(c.shape(), [n + 1, 4]);
        assert_eq!(bits(&c), bits(&wc));
        let ws: Vec<f64> = f32s(&ws).into_iter().map(f64::from).collect();
        tilejit_tests::assert_close(&f32s(&s), &ws, 1e-6);
    }
    assert_eq!(f.stats().traces, 3);
    assert!(f.shape_classes()[0].1.is_ok());
}

#[jit]
fn assign_at(x: &Tensor, at: &Tensor, src: &Tensor) -> Tensor {
    x.slice_assign(1, at, src) * 2.0
}

#[jit]
fn assign_static(x: &Tensor, src: &Tensor) -> Tensor {
    x.slice_assign(-1, 2, src) + 1.0
}

/// `slice_assign` at a run-time position: one trace for every position,
/// on Host and Sim, against values computed here; a position that puts
/// the source out of range fails the call on every backend.
#[test]
fn slice_assign_at_a_tensor_position_is_one_graph_and_checks_its_range() {
    let x = Tensor::randn(&[2, 7, 3], 3);
    let src = Tensor::randn(&[2, 2, 3], 4);
    let (xv, sv) = (f32s(&x), f32s(&src));
    for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
        for at in 0..=5i64 {
            let pos = Tensor::from_vec(vec![at], &[]).unwrap();
            let got = tilejit::with_mode(mode, || assign_at(&x, &pos, &src)).unwrap();
            let mut want = xv.clone();
            for b in 0..2 {
                for j in 0..2 {
                    for c in 0..3 {
                        want[(b * 7 + at as usize + j) * 3 + c] = sv[(b * 2 + j) * 3 + c];
                    }
                }
            }
            let want: Vec<f32> = want.iter().map(|v| v * 2.0).collect();
            assert_eq!(f32s(&got), want, "{mode:?} at {at}");
        }
        for at in [-1i64, 6, 100] {
            let pos = Tensor::from_vec(vec![at], &[]).unwrap();
            let e = tilejit::with_mode(mode, || assign_at(&x, &pos, &src)).unwrap_err();
            assert_eq!(
                e.kind(),
                tilejit::ErrorKind::BadArgument,
                "{mode:?} {at}: {e}"
            );
            assert!(e.to_string().contains("slice_assign"), "{e}");
        }
    }
    assert_eq!(assign_at::jit().stats().traces, 1);
    // A static start: a slice-and-cat, checked at trace time.
    let y = Tensor::randn(&[3, 6], 5);
    let s2 = Tensor::randn(&[3, 3], 6);
    let got = assign_static(&y, &s2).unwrap();
    let want = tilejit::with_mode(RunMode::Reference, || assign_static(&y, &s2)).unwrap();
    assert_eq!(bits(&got), bits(&want));
    let (yv, s2v) = (f32s(&y), f32s(&s2));
    for r in 0..3 {
        for c in 0..6 {
            let v = if (2..5).contains(&c) {
                s2v[r * 3 + c - 2]
            } else {
                yv[r * 6 + c]
            };
            assert_eq!(f32s(&got)[r * 6 + c], v + 1.0);
        }
    }
}

#[jit]
fn assign_row_at(x: &Tensor, at: &Tensor, src: &Tensor) -> Tensor {
    x.slice_assign(1, at, src)
}

/// `slice_assign` of one row at a run-time position (a decode step's KV
/// row: a select of loads with a separate range check, no gather over the
/// cache), f32 and i64, on Host, Sim and Verify against values computed
/// here, at every position of the axis and past both of its ends; then
/// eagerly. A bad position fails the call on every backend.
#[test]
fn slice_assign_of_one_row_at_a_tensor_position_matches_on_every_backend() {
    let x = Tensor::randn(&[3, 5, 4], 7);
    let src = Tensor::randn(&[3, 1, 4], 8);
    let (xv, sv) = (f32s(&x), f32s(&src));
    let xi = Tensor::from_vec((0..60i64).collect::<Vec<_>>(), &[3, 5, 4]).unwrap();
    let si = Tensor::from_vec((100..112i64).collect::<Vec<_>>(), &[3, 1, 4]).unwrap();
    let want_at = |at: usize, xs: &[f64], ss: &[f64]| -> Vec<f64> {
        let mut w = xs.to_vec();
        for b in 0..3 {
            for c in 0..4 {
                w[(b * 5 + at) * 4 + c] = ss[b * 4 + c];
            }
        }
        w
    };
    let f64s = |v: &[f32]| v.iter().map(|&v| v as f64).collect::<Vec<_>>();
    let (xi64, si64): (Vec<f64>, Vec<f64>) = (
        (0..60).map(f64::from).collect(),
        (100..112).map(f64::from).collect(),
    );
    for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
        for at in 0..5i64 {
            let pos = Tensor::from_vec(vec![at], &[]).unwrap();
            let got = tilejit::with_mode(mode, || assign_row_at(&x, &pos, &src)).unwrap();
            let want = want_at(at as usize, &f64s(&xv), &f64s(&sv));
            assert_eq!(f64s(&f32s(&got)), want, "{mode:?} f32 at {at}");
            let got = tilejit::with_mode(mode, || assign_row_at(&xi, &pos, &si)).unwrap();
            let got: Vec<f64> = got
                .to_vec::<i64>()
                .unwrap()
                .iter()
                .map(|&v| v as f64)
                .collect();
            assert_eq!(
                got,
                want_at(at as usize, &xi64, &si64),
                "{mode:?} i64 at {at}"
            );
        }
        for at in [-1i64, 5, 100, i64::MIN] {
            let pos = Tensor::from_vec(vec![at], &[]).unwrap();
            let e = tilejit::with_mode(mode, || assign_row_at(&x, &pos, &src)).unwrap_err();
            assert_eq!(
                e.kind(),
                tilejit::ErrorKind::BadArgument,
                "{mode:?} {at}: {e}"
            );
            assert!(e.to_string().contains("slice_assign"), "{e}");
        }
    }
    assert_eq!(
        assign_row_at::jit().stats().traces,
        2,
        "one trace per dtype"
    );
    let pos = Tensor::from_vec(vec![4i64], &[]).unwrap();
    let eager = x.slice_assign(1, &pos, &src);
    assert_eq!(f64s(&f32s(&eager)), want_at(4, &f64s(&xv), &f64s(&sv)));
    assert!(x
        .slice_assign(1, &Tensor::from_vec(vec![5i64], &[]).unwrap(), &src)
        .check()
        .is_err());
}

/// Bad `slice_assign`s: errors naming the line, never a panic.
#[test]
fn slice_assign_bad_input_is_an_error_at_the_line() {
    let x = Tensor::zeros(&[4, 3], DType::F32);
    let row = Tensor::zeros(&[1, 3], DType::F32);
    let pos = Tensor::from_vec(vec![1i64, 2], &[2]).unwrap();
    let fpos = Tensor::scalar(1.0, DType::F32);
    use tilejit::ErrorKind::{DType as D, Shape as S};
    let cases = vec![
        (line!(), x.slice_assign(0, 4, &row), S, "does not fit dim 0"),
        (
            line!(),
            x.slice_assign(0, 0, &Tensor::zeros(&[1, 2], DType::F32)),
            S,
            "must have its dims",
        ),
        (
            line!(),
            x.slice_assign(0, 0, &Tensor::zeros(&[5, 3], DType::F32)),
            S,
            "at most 4",
        ),
        (
            line!(),
            x.slice_assign(0, 0, &Tensor::zeros(&[1, 3], DType::F64)),
            D,
            "",
        ),
        (line!(), x.slice_assign(0, &pos, &row), S, "one integer"),
        (line!(), x.slice_assign(0, &fpos, &row), S, "one integer"),
        (
            line!(),
            x.slice_assign(2, 0, &row),
            tilejit::ErrorKind::BadArgument,
            "axis 2",
        ),
    ];
    tilejit_tests::check_error_cases(file!(), cases);
}

// A small GPT decoded one token per call, with a per-layer K/V cache.
const D: usize = 16;
const HEADS: usize = 4;
const HD: usize = D / HEADS;
const VOCAB: usize = 23;
const CAP: usize = 16;

#[derive(JitArgs)]
struct Block {
    ln1: Vec<Tensor>,
    wqkv: Tensor,
    bqkv: Tensor,
    wo: Tensor,
    bo: Tensor,
    ln2: Vec<Tensor>,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

#[derive(JitArgs)]
struct Gpt {
    wte: Tensor,
    wpe: Tensor,
    blocks: Vec<Block>,
    lnf: Vec<Tensor>,
    head: Tensor,
}

fn gpt(seed: u64) -> Gpt {
    let r = |shape: &[usize], k: u64| Tensor::randn(shape, seed * 1000 + k) * 0.3;
    let ln = |k: u64| {
        vec![
            Tensor::ones(&[D], DType::F32) + r(&[D], k) * 0.1,
            r(&[D], k + 1),
        ]
    };
    let block = |b: u64| Block {
        ln1: ln(b * 20),
        wqkv: r(&[D, 3 * D], b * 20 + 2),
        bqkv: r(&[3 * D], b * 20 + 3),
        wo: r(&[D, D], b * 20 + 4),
        bo: r(&[D], b * 20 + 5),
        ln2: ln(b * 20 + 6),
        w1: r(&[D, 4 * D], b * 20 + 8),
        b1: r(&[4 * D], b * 20 + 9),
        w2: r(&[4 * D, D], b * 20 + 10),
        b2: r(&[D], b * 20 + 11),
    };
    Gpt {
        wte: r(&[VOCAB, D], 1),
        wpe: r(&[CAP, D], 2),
        blocks: vec![block(1), block(2)],
        lnf: ln(3),
        head: r(&[D, VOCAB], 5),
    }
}

/// `x [t, D]` through a block's MLP half, residual added.
fn mlp(b: &Block, x: &Tensor) -> Tensor {
    let h = x.layer_norm(&b.ln2[0], &b.ln2[1], 1e-5);
    x + (h.matmul(&b.w1) + &b.b1).gelu().matmul(&b.w2) + &b.b2
}

/// q, k, v of `x [t, D]`, each `[HEADS, t, HD]`.
fn qkv(b: &Block, x: &Tensor, t: usize) -> Vec<Tensor> {
    let h = x.layer_norm(&b.ln1[0], &b.ln1[1], 1e-5);
    (h.matmul(&b.wqkv) + &b.bqkv)
        .split(&[D, D, D], -1)
        .iter()
        .map(|p| p.reshape(&[t, HEADS, HD]).transpose(0, 1))
        .collect()
}

/// Attention output `[HEADS, t, HD]` back to `[t, D]`, projected, plus `x`.
fn attend_out(b: &Block, x: &Tensor, o: &Tensor, t: usize) -> Tensor {
    x + o.transpose(0, 1).reshape(&[t, D]).matmul(&b.wo) + &b.bo
}

fn scores(q: &Tensor, k: &Tensor) -> Tensor {
    q.matmul(&k.transpose(1, 2)) * (1.0 / (HD as f64).sqrt())
}

/// The whole prefix at once, causal mask: the model without a cache.
#[jit]
fn full_logits(tokens: &Tensor, m: &Gpt) -> Tensor {
    let t = tokens.dim(0)?;
    let mut x = m.wte.index_select(0, tokens) + m.wpe.slice(0, 0, t as isize);
    let causal = Tensor::ones(&[t, t], DType::F32)
        .tril(0)
        .gt(&Tensor::scalar(0.5, DType::F32));
    let neg = Tensor::full(&[HEADS, t, t], -1e9, DType::F32);
    for b in &m.blocks {
        let parts = qkv(b, &x, t);
        let [q, k, v] = tilejit::args::exactly(&parts)?;
        let s = Tensor::where_cond(&causal.broadcast_to(&[HEADS, t, t]), &scores(q, k), &neg);
        x = mlp(b, &attend_out(b, &x, &s.softmax(-1).matmul(v), t));
    }
    x.layer_norm(&m.lnf[0], &m.lnf[1], 1e-5).matmul(&m.head)
}

/// One decode step with caches grown by `cat` (`[HEADS, t, HD]` each):
/// the logits `[1, VOCAB]`, then each layer's new K and V.
#[jit(dynamic)]
fn grow_step(tok: &Tensor, pos: &Tensor, m: &Gpt, ks: &[Tensor], vs: &[Tensor]) -> Vec<Tensor> {
    let mut x = m.wte.index_select(0, tok) + m.wpe.index_select(0, pos);
    let mut out = vec![Tensor::scalar(0.0, DType::F32)];
    for (l, b) in m.blocks.iter().enumerate() {
        let parts = qkv(b, &x, 1);
        let [q, k, v] = tilejit::args::exactly(&parts)?;
        let k = Tensor::cat(&[&ks[l], k], 1);
        let v = Tensor::cat(&[&vs[l], v], 1);
        x = mlp(
            b,
            &attend_out(b, &x, &scores(q, &k).softmax(-1).matmul(&v), 1),
        );
        out.extend([k, v]);
    }
    out[0] = x.layer_norm(&m.lnf[0], &m.lnf[1], 1e-5).matmul(&m.head);
    out
}

/// One decode step with fixed-capacity caches (`[HEADS, CAP, HD]`)
/// written at `pos` (rank 0) by `slice_assign`, positions past it masked:
/// no size varies, so every position is one graph.
#[jit]
fn cap_step(tok: &Tensor, pos: &Tensor, m: &Gpt, ks: &[Tensor], vs: &[Tensor]) -> Vec<Tensor> {
    let at = pos.reshape(&[1]);
    let mut x = m.wte.index_select(0, tok) + m.wpe.index_select(0, &at);
    let seen = Tensor::arange(CAP, DType::I64)
        .le(pos)
        .reshape(&[1, 1, CAP]);
    let seen = seen.broadcast_to(&[HEADS, 1, CAP]);
    let neg = Tensor::full(&[HEADS, 1, CAP], -1e9, DType::F32);
    let mut out = vec![Tensor::scalar(0.0, DType::F32)];
    for (l, b) in m.blocks.iter().enumerate() {
        let parts = qkv(b, &x, 1);
        let [q, k, v] = tilejit::args::exactly(&parts)?;
        let k = ks[l].slice_assign(1, pos, k);
        let v = vs[l].slice_assign(1, pos, v);
        let s = Tensor::where_cond(&seen, &scores(q, &k), &neg);
        x = mlp(b, &attend_out(b, &x, &s.softmax(-1).matmul(&v), 1));
        out.extend([k, v]);
    }
    out[0] = x.layer_norm(&m.lnf[0], &m.lnf[1], 1e-5).matmul(&m.head);
    out
}

const TOKENS: [i64; 12] = [3, 17, 5, 22, 0, 9, 9, 14, 1, 20, 7, 11];

/// The last row of the model's logits over `TOKENS[..=p]`, recomputed
/// whole on the reference interpreter.
fn reference_logits(m: &Gpt, p: usize) -> Vec<f64> {
    let tokens = Tensor::from_vec(TOKENS[..=p].to_vec(), &[p + 1]).unwrap();
    let all = tilejit::with_mode(RunMode::Reference, || full_logits(&tokens, m)).unwrap();
    f32s(&all)[p * VOCAB..]
        .iter()
        .map(|&v| f64::from(v))
        .collect()
}

/// KV-cache decode, growing caches under automatic dynamic: only the
/// cache length becomes a symbol. Twelve steps from an empty cache, on
/// Host and Sim, each step's logits against the whole prefix recomputed
/// on the reference interpreter. Lengths 0 and 1 are specialised and the
/// class is learnt at length 2 (4 traces); the nine steps after trace
/// nothing.
#[test]
fn kv_decode_with_a_growing_cache_is_one_trace_for_every_later_step() {
    let m = gpt(1);
    let f = grow_step::jit();
    let want: Vec<Vec<f64>> = (0..TOKENS.len()).map(|p| reference_logits(&m, p)).collect();
    for mode in [RunMode::Host, RunMode::Sim] {
        let empty = Tensor::zeros(&[HEADS, 0, HD], DType::F32);
        let (mut ks, mut vs) = (
            vec![empty.clone(), empty.clone()],
            vec![empty.clone(), empty],
        );
        for (p, &tok) in TOKENS.iter().enumerate() {
            let tok = Tensor::from_vec(vec![tok], &[1]).unwrap();
            let pos = Tensor::from_vec(vec![p as i64], &[1]).unwrap();
            let out = tilejit::with_mode(mode, || grow_step(&tok, &pos, &m, &ks, &vs)).unwrap();
            tilejit_tests::assert_close(&f32s(&out[0]), &want[p], 1e-4);
            ks = vec![out[1].clone(), out[3].clone()];
            vs = vec![out[2].clone(), out[4].clone()];
            assert_eq!(ks[0].shape(), [HEADS, p + 1, HD]);
            if p >= 2 {
                assert_eq!(f.stats().traces, 4, "{mode:?} step {p}");
            }
        }
    }
    let classes = f.shape_classes();
    let generic: Vec<_> = classes.iter().filter(|(c, _)| c.symbols() == 1).collect();
    assert_eq!(generic.len(), 1, "{f}");
    assert!(generic[0].1.is_ok(), "{f}");
    assert!(generic[0].0.to_string().contains("f32[4,n0,4]"), "{f}");
}

/// KV-cache decode, fixed-capacity caches written by `slice_assign` at a
/// position tensor: ONE trace for all twelve steps, on Host and Sim, each
/// step's logits against the whole prefix on the reference interpreter.
/// The function's `Display` abbreviates its signature (weights included).
#[test]
fn kv_decode_with_a_fixed_cache_and_slice_assign_is_one_trace() {
    let m = gpt(2);
    let f = cap_step::jit();
    let want: Vec<Vec<f64>> = (0..TOKENS.len()).map(|p| reference_logits(&m, p)).collect();
    for mode in [RunMode::Host, RunMode::Sim] {
        let zero = Tensor::zeros(&[HEADS, CAP, HD], DType::F32);
        let (mut ks, mut vs) = (vec![zero.clone(), zero.clone()], vec![zero.clone(), zero]);
        for (p, &tok) in TOKENS.iter().enumerate() {
            let tok = Tensor::from_vec(vec![tok], &[1]).unwrap();
            let pos = Tensor::from_vec(vec![p as i64], &[]).unwrap();
            let out = tilejit::with_mode(mode, || cap_step(&tok, &pos, &m, &ks, &vs)).unwrap();
            tilejit_tests::assert_close(&f32s(&out[0]), &want[p], 1e-4);
            ks = vec![out[1].clone(), out[3].clone()];
            vs = vec![out[2].clone(), out[4].clone()];
        }
    }
    assert_eq!(f.stats().traces, 1);
    let shown = f.to_string();
    let line = shown.lines().nth(1).unwrap();
    assert!(line.len() < 260 && line.contains('×'), "{shown}");
}

#[jit]
fn several(x: &Tensor, n: i64) -> (Tensor, Vec<Tensor>) {
    let parts = (1..=n).map(|k| x * k as f64).collect();
    (x.sum_all(), parts)
}

#[jit]
fn listed(xs: &[Tensor]) -> Vec<Tensor> {
    xs.iter().map(|x| x + 1.0).collect()
}

/// A jit function may return a `Vec<Tensor>`, or a tensor and a list.
#[test]
fn a_jit_function_returns_a_list_of_tensors() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let (s, parts) = several(&x, 3).unwrap();
    assert_eq!(f32s(&s), [3.0]);
    assert_eq!(parts.len(), 3);
    assert_eq!(f32s(&parts[2]), [3.0, 6.0]);
    let ys = listed(&[x.clone(), x * 2.0]).unwrap();
    assert_eq!(
        ys.iter().map(f32s).collect::<Vec<_>>(),
        [vec![2.0, 3.0], vec![3.0, 5.0]]
    );
}

#[jit]
fn listed_wide(xs: &[Tensor]) -> Vec<Tensor> {
    xs.iter().map(|x| x * 2.0).collect()
}

/// Errors, log lines and program names abbreviate a signature of many
/// weights as `Display` does, instead of printing kilobytes of it.
#[test]
fn a_frozen_miss_and_the_program_name_abbreviate_the_signature() {
    let ws: Vec<Tensor> = (0..40).map(|_| Tensor::ones(&[768], DType::F32)).collect();
    let _ = listed_wide(&ws).unwrap();
    let f = listed_wide::jit();
    let name = f.handlers()[0].program.name().to_string();
    assert!(name.len() < 200 && name.contains('×'), "{name}");
    f.freeze();
    let other: Vec<Tensor> = (0..40).map(|_| Tensor::ones(&[769], DType::F32)).collect();
    let err = listed_wide(&other).unwrap_err().to_string();
    f.unfreeze();
    assert!(
        err.contains("frozen") && err.len() < 600,
        "{} chars: {err}",
        err.len()
    );
}
