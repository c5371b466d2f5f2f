//! Dynamic jit functions (`#[jit(dynamic)]`, `make_dynamic`): one trace per
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

#[jit(dynamic)]
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
#[jit(dynamic)]
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

#[jit(dynamic)]
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
#[jit(dynamic)]
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

#[jit(dynamic)]
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

#[jit(dynamic)]
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

#[jit(dynamic)]
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

#[jit(dynamic)]
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
            #[jit(dynamic)]
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

    #[jit(dynamic)]
    fn add_const(x: &Tensor) -> Tensor {
        x + &Tensor::scalar(1031.0, DType::F32)
    }
    #[jit]
    fn add_const_exact(x: &Tensor) -> Tensor {
        x + &Tensor::scalar(1031.0, DType::F32)
    }
    #[jit(dynamic)]
    fn mul_full(x: &Tensor) -> Tensor {
        x * &Tensor::full(&[1], 2062.0, DType::F32)
    }
    #[jit]
    fn mul_full_exact(x: &Tensor) -> Tensor {
        x * &Tensor::full(&[1], 2062.0, DType::F32)
    }
    #[jit(dynamic)]
    fn zeros_1031(x: &Tensor) -> Tensor {
        x.sum_all() + Tensor::zeros(&[1031], DType::F32)
    }
    #[jit]
    fn zeros_1031_exact(x: &Tensor) -> Tensor {
        x.sum_all() + Tensor::zeros(&[1031], DType::F32)
    }
    #[jit(dynamic)]
    fn pick_1031(x: &Tensor) -> Tensor {
        x.gather(1, &Tensor::full(&[1, 1], 1031.0, DType::I64))
    }
    #[jit]
    fn pick_1031_exact(x: &Tensor) -> Tensor {
        x.gather(1, &Tensor::full(&[1, 1], 1031.0, DType::I64))
    }
    #[jit(dynamic)]
    fn scalar_arg(x: &Tensor, k: i64) -> Tensor {
        x + &Tensor::scalar(k as f64, DType::F32)
    }
    #[jit]
    fn scalar_arg_exact(x: &Tensor, k: i64) -> Tensor {
        x + &Tensor::scalar(k as f64, DType::F32)
    }
    #[jit(dynamic)]
    fn parity(x: &Tensor) -> Tensor {
        let n = x.shape()[1];
        x * ((n * (n % 2)) as f64)
    }
    #[jit]
    fn parity_exact(x: &Tensor) -> Tensor {
        let n = x.shape()[1];
        x * ((n * (n % 2)) as f64)
    }
    #[jit(dynamic)]
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
        dynamic.make_dynamic();
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

#[jit(dynamic, mode = sim)]
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
#[jit(dynamic)]
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
#[jit(dynamic)]
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
