//! Weights as values: jit parameters that are lists of tensors and
//! `#[derive(JitArgs)]` structs, structs as results, and nested jit calls
//! composed with `?`.

use std::sync::atomic::{AtomicU32, Ordering};
use tilejit::prelude::*;
use tilejit::Error;
use tilejit_tests::{t32, vals};

#[derive(JitArgs)]
struct Dense {
    w: Tensor,
}

#[derive(JitArgs)]
struct Mlp {
    l1: Dense,
    l2: Dense,
    biases: Vec<Tensor>,
    scale: f32,
}

/// Where `mlp` indexes its biases (a wrong length panics there).
static MLP_LINE: AtomicU32 = AtomicU32::new(0);

/// Where `mlp` takes exactly two biases.
static BIAS_LINE: AtomicU32 = AtomicU32::new(0);

#[jit]
fn mlp(x: &Tensor, m: &Mlp) -> Tensor {
    BIAS_LINE.store(line!() + 1, Ordering::Relaxed);
    let [b1, b2] = tilejit::args::exactly(&m.biases)?;
    MLP_LINE.store(line!() + 1, Ordering::Relaxed);
    let h = (x.matmul(&m.l1.w) + b1).relu();
    (h.matmul(&m.l2.w) + b2) * m.scale
}

#[jit]
fn mlp_indexed(x: &Tensor, m: &Mlp) -> Tensor {
    let h = (x.matmul(&m.l1.w) + &m.biases[0]).relu();
    (h.matmul(&m.l2.w) + &m.biases[1]) * m.scale
}

#[jit]
fn mlp_positional(
    x: &Tensor,
    w1: &Tensor,
    b1: &Tensor,
    w2: &Tensor,
    b2: &Tensor,
    scale: f32,
) -> Tensor {
    let h = (x.matmul(w1) + b1).relu();
    (h.matmul(w2) + b2) * scale
}

/// x = [[1, 2]], w1 = [[1, 0, -1], [0.5, 1, 2]], b1 = [0, -3, 1],
/// w2 = [[1, 0], [5, 1], [-0.5, 0.25]], b2 = [1.5, -1], scale 2:
/// x w1 = [2, 2, 3], + b1 = [2, -1, 4], relu [2, 0, 4];
/// h w2 = [2 - 2, 0 + 1] = [0, 1], + b2 = [1.5, 0], * 2 = [3, 0].
fn small() -> (Tensor, Mlp) {
    let x = t32(&[1.0, 2.0], &[1, 2]);
    let m = Mlp {
        l1: Dense {
            w: t32(&[1.0, 0.0, -1.0, 0.5, 1.0, 2.0], &[2, 3]),
        },
        l2: Dense {
            w: t32(&[1.0, 0.0, 5.0, 1.0, -0.5, 0.25], &[3, 2]),
        },
        biases: vec![t32(&[0.0, -3.0, 1.0], &[3]), t32(&[1.5, -1.0], &[2])],
        scale: 2.0,
    };
    (x, m)
}

fn random(rows: usize, d: usize, hidden: usize, out: usize, seed: u64) -> (Tensor, Mlp) {
    let x = Tensor::randn(&[rows, d], seed);
    let m = Mlp {
        l1: Dense {
            w: Tensor::randn(&[d, hidden], seed + 1),
        },
        l2: Dense {
            w: Tensor::randn(&[hidden, out], seed + 2),
        },
        biases: vec![
            Tensor::randn(&[hidden], seed + 3),
            Tensor::randn(&[out], seed + 4),
        ],
        scale: 0.5,
    };
    (x, m)
}

fn positional(x: &Tensor, m: &Mlp) -> Tensor {
    mlp_positional(x, &m.l1.w, &m.biases[0], &m.l2.w, &m.biases[1], m.scale).unwrap()
}

#[test]
fn a_struct_of_weights_gives_the_positional_values_in_every_mode() {
    for mode in [
        RunMode::Host,
        RunMode::Sim,
        RunMode::Verify,
        RunMode::Reference,
    ] {
        with_mode(mode, || {
            let (x, m) = small();
            assert_eq!(vals(&mlp(&x, &m).unwrap()), [3.0, 0.0], "{mode:?}");
            assert_eq!(vals(&positional(&x, &m)), [3.0, 0.0], "{mode:?}");
            // Each struct leads with its key, the list with its length; the
            // f32 field is static (its bits: 2.0 is 0x40000000).
            assert!(mlp::jit().handlers().iter().any(|h| {
                let s = h.signature.to_string();
                s.starts_with("(f32[1,2], struct ")
                    && s.ends_with(", len 2, f32[3], f32[2], int 1073741824)")
                    && s.matches("struct ").count() == 3
            }));
            for (rows, d, hidden, out) in [(1, 1, 1, 1), (5, 7, 9, 4), (33, 17, 65, 3)] {
                let (x, m) = random(rows, d, hidden, out, rows as u64);
                let got = vals(&mlp(&x, &m).unwrap());
                // The same graph either way: the same kernels, bit for bit.
                assert_eq!(got, vals(&positional(&x, &m)), "{mode:?} {rows}x{d}");
                assert_eq!(got.len(), rows * out);
            }
        });
    }
}

#[jit]
fn sum_list(xs: &[Tensor]) -> Tensor {
    let mut acc = xs[0].clone();
    for x in &xs[1..] {
        acc = acc + x;
    }
    acc
}

#[jit]
fn sum_vec(xs: Vec<Tensor>, k: f32) -> Tensor {
    xs.into_iter().reduce(|a, b| a + b).unwrap() * k
}

#[jit]
fn sum_vec_ref(xs: &Vec<Tensor>, n: usize) -> Tensor {
    xs.iter().take(n).fold(xs[0].clone() * 0.0, |a, b| a + b)
}

#[test]
fn a_list_length_is_part_of_the_signature() {
    let one = t32(&[1.0, 2.0], &[2]);
    let list =
        |n: usize| -> Vec<Tensor> { (0..n).map(|i| &one * (i + 1) as f32).collect::<Vec<_>>() };
    let f = sum_list::jit();
    assert_eq!(vals(&sum_list(&list(2)).unwrap()), [3.0, 6.0]);
    assert_eq!(vals(&sum_list(&list(2)).unwrap()), [3.0, 6.0]);
    assert_eq!((f.stats().traces, f.stats().hits), (1, 1));
    // Three elements: a new signature, never the two-element program.
    assert_eq!(vals(&sum_list(&list(3)).unwrap()), [6.0, 12.0]);
    assert_eq!(f.stats().traces, 2);
    // Another element shape: a new signature; a seen one: a hit.
    let wide = vec![
        Tensor::ones(&[3], DType::F32),
        Tensor::ones(&[3], DType::F32),
    ];
    assert_eq!(vals(&sum_list(&wide).unwrap()), [2.0; 3]);
    assert_eq!(vals(&sum_list(&list(3)).unwrap()), [6.0, 12.0]);
    assert_eq!((f.stats().traces, f.stats().hits), (3, 2));
    assert_eq!(f.handlers().len(), 3);
    assert!(
        f.handlers()
            .iter()
            .any(|h| h.signature.to_string() == "(len 3, f32[2], f32[2], f32[2])"),
        "the length leads the list's leaves"
    );

    // `Vec<Tensor>` by value with a float: the float is still a runtime value.
    assert_eq!(vals(&sum_vec(list(2), 2.0).unwrap()), [6.0, 12.0]);
    assert_eq!(vals(&sum_vec(list(2), 0.5).unwrap()), [1.5, 3.0]);
    assert_eq!(sum_vec::jit().stats().traces, 1);
    assert_eq!(vals(&sum_vec_ref(&list(3), 2).unwrap()), [3.0, 6.0]);
    assert_eq!(vals(&sum_vec_ref(&list(3), 3).unwrap()), [6.0, 12.0]);
    assert_eq!(sum_vec_ref::jit().stats().traces, 2);
}

#[derive(JitArgs)]
struct Affine {
    w: Tensor,
    b: Tensor,
    flip: bool,
    times: usize,
    eps: f64,
}

#[jit]
fn affine(x: &Tensor, a: &Affine) -> Tensor {
    let mut y = x.matmul(&a.w) + &a.b + a.eps;
    for _ in 1..a.times {
        y = &y + &y;
    }
    if a.flip {
        -y
    } else {
        y
    }
}

#[test]
fn struct_field_shapes_and_static_fields_key_the_signature() {
    let x = t32(&[1.0, 1.0], &[1, 2]);
    let a = |n: usize, flip, times, eps| Affine {
        w: Tensor::ones(&[2, n], DType::F32),
        b: Tensor::zeros(&[n], DType::F32),
        flip,
        times,
        eps,
    };
    let f = affine::jit();
    assert_eq!(vals(&affine(&x, &a(2, false, 1, 0.0)).unwrap()), [2.0, 2.0]);
    assert_eq!(vals(&affine(&x, &a(2, false, 1, 0.0)).unwrap()), [2.0, 2.0]);
    assert_eq!((f.stats().traces, f.stats().hits), (1, 1));
    // A field's shape, a bool, an int and a float field each retrace.
    assert_eq!(vals(&affine(&x, &a(3, false, 1, 0.0)).unwrap()), [2.0; 3]);
    assert_eq!(vals(&affine(&x, &a(2, true, 1, 0.0)).unwrap()), [-2.0; 2]);
    assert_eq!(vals(&affine(&x, &a(2, false, 3, 0.0)).unwrap()), [8.0; 2]);
    assert_eq!(vals(&affine(&x, &a(2, false, 1, 0.5)).unwrap()), [2.5; 2]);
    assert_eq!(f.stats().traces, 5);
    // Seen values hit.
    assert_eq!(vals(&affine(&x, &a(2, true, 1, 0.0)).unwrap()), [-2.0; 2]);
    assert_eq!(vals(&affine(&x, &a(3, false, 1, 0.0)).unwrap()), [2.0; 3]);
    assert_eq!((f.stats().traces, f.stats().hits), (5, 3));
}

#[derive(JitArgs)]
struct Twin {
    w: Tensor,
    b: Tensor,
}

#[derive(JitArgs)]
struct Other {
    b: Tensor,
    w: Tensor,
}

#[test]
fn structs_with_the_same_leaves_have_different_keys() {
    let (p, q) = (
        Tensor::ones(&[2], DType::F32),
        Tensor::ones(&[2], DType::F32),
    );
    let key = |args: Vec<tilejit::ArgValue>| match args[0] {
        tilejit::ArgValue::Mark(tilejit::args::Mark::Struct(k)) => k,
        _ => panic!("a struct's first leaf is its key"),
    };
    let twin = Twin {
        w: p.clone(),
        b: q.clone(),
    };
    let other = Other { b: q, w: p };
    assert_eq!(twin.args().len(), 3);
    assert_ne!(key(twin.args()), key(other.args()));
}

#[derive(JitArgs)]
struct Moments {
    mean: Tensor,
    spread: Spread,
}

#[derive(JitArgs)]
struct Spread {
    min: Tensor,
    max: Tensor,
}

#[jit]
fn moments(x: &Tensor) -> Moments {
    Moments {
        mean: x.mean(-1, false),
        spread: Spread {
            min: x.min(-1, false),
            max: x.max(-1, false),
        },
    }
}

#[test]
fn a_jit_function_returns_a_struct() {
    let x = t32(&[1.0, 5.0, 3.0, -2.0, 0.0, 8.0], &[2, 3]);
    for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
        with_mode(mode, || {
            let m = moments(&x).unwrap();
            assert_eq!(vals(&m.mean), [3.0, 2.0], "{mode:?}");
            assert_eq!(vals(&m.spread.min), [1.0, -2.0], "{mode:?}");
            assert_eq!(vals(&m.spread.max), [5.0, 8.0], "{mode:?}");
        });
    }
    assert_eq!(moments::jit().handlers().len(), 1);
    // A struct is also a jit_fn! argument and result.
    let f = jit_fn!(|x: &Tensor, s: &Spread| -> Moments {
        Moments {
            mean: x.mean(-1, false),
            spread: Spread {
                min: x.minimum(&s.min),
                max: x.maximum(&s.max),
            },
        }
    });
    let s = Spread {
        min: Tensor::zeros(&[3], DType::F32),
        max: Tensor::zeros(&[3], DType::F32),
    };
    let m = f.call((&x, &s)).unwrap();
    assert_eq!(vals(&m.spread.min), [0.0, 0.0, 0.0, -2.0, 0.0, 0.0]);
    assert_eq!(vals(&m.spread.max), [1.0, 5.0, 3.0, 0.0, 0.0, 8.0]);
}

/// Where `inner_bad` multiplies tensors of mismatched shapes.
static INNER_LINE: AtomicU32 = AtomicU32::new(0);

#[jit]
fn inner(x: &Tensor) -> Tensor {
    x * 2.0
}

#[jit]
fn inner_bad(x: &Tensor, y: &Tensor) -> Tensor {
    INNER_LINE.store(line!() + 1, Ordering::Relaxed);
    x * y
}

#[jit]
fn inner_checked(xs: &[Tensor]) -> Result<Tensor> {
    match xs {
        [a, b] => Ok(a + b),
        _ => Err(Error::Arguments {
            function: "inner_checked".into(),
            message: format!("expected 2 tensors, got {}", xs.len()),
        }),
    }
}

#[jit]
fn outer(x: &Tensor, early: bool) -> Tensor {
    let y = inner(x)?;
    if early {
        return y + 1.0;
    }
    let z = inner(&y)?;
    z + 1.0
}

#[jit]
fn outer_bad(x: &Tensor, y: &Tensor) -> Tensor {
    inner_bad(x, y)? + 1.0
}

#[jit]
fn outer_checked(x: &Tensor, n: usize) -> Tensor {
    let xs = vec![x.clone(); n];
    inner_checked(&xs)? * 3.0
}

#[test]
fn nested_jit_calls_compose_with_question_mark() {
    let x = t32(&[1.0, -2.0], &[2]);
    for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
        with_mode(mode, || {
            assert_eq!(vals(&outer(&x, false).unwrap()), [5.0, -7.0]);
            assert_eq!(vals(&outer(&x, true).unwrap()), [3.0, -3.0]);
            assert_eq!(vals(&outer_checked(&x, 2).unwrap()), [6.0, -12.0]);
        });
    }
    // The nested functions were inlined: only the outer ones compiled.
    assert_eq!(inner::jit().handlers().len(), 0);
    assert_eq!(outer::jit().handlers().len(), 2);

    // An op's error inside the nested function reaches the outer caller,
    // naming the op and its line in the nested body.
    let e = outer_bad(&x, &Tensor::ones(&[3], DType::F32)).unwrap_err();
    let line = INNER_LINE.load(Ordering::Relaxed);
    let msg = e.to_string();
    assert!(msg.contains("outer_bad"), "{msg}");
    assert!(msg.contains(&format!("jit_args.rs:{line}")), "{msg}");
    assert_eq!(e.kind(), tilejit::ErrorKind::Shape, "{msg}");

    // An `Err` the nested body returns flows through `?` to the caller.
    let e = outer_checked(&x, 3).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("expected 2 tensors, got 3"), "{msg}");
    assert!(msg.contains("outer_checked"), "{msg}");
    // Called directly, a body written `-> Result` returns its `Err` too.
    let e = inner_checked(std::slice::from_ref(&x))
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected 2 tensors, got 1"), "{e}");
    assert_eq!(
        vals(&inner_checked(&[x.clone(), x.clone()]).unwrap()),
        [2.0, -4.0]
    );
}

#[test]
fn bad_weights_are_errors_never_panics() {
    let (x, m) = small();
    // A wrong number of biases: `exactly` names the body's line.
    let short = Mlp {
        biases: vec![m.biases[0].clone()],
        ..m
    };
    let e = mlp(&x, &short).unwrap_err();
    let msg = e.to_string();
    assert_eq!(e.kind(), tilejit::ErrorKind::BadArgument, "{msg}");
    assert!(msg.contains("a list of 1 where 2 are needed"), "{msg}");
    let line = BIAS_LINE.load(Ordering::Relaxed);
    assert!(msg.contains(&format!("jit_args.rs:{line}")), "{msg}");
    // Indexing instead panics while tracing, which fails the call (the
    // panic is caught, the cache keeps nothing).
    let e = mlp_indexed(&x, &short).unwrap_err();
    assert_eq!(e.kind(), tilejit::ErrorKind::Panic, "{e}");
    assert!(e.to_string().contains("index out of bounds"), "{e}");
    assert!(e.to_string().contains("mlp_indexed"), "{e}");
    assert_eq!(mlp_indexed::jit().handlers().len(), 0);

    // A weight of the wrong shape: the op's error, at its line in the body.
    let (x, m) = small();
    let bad = Mlp {
        l1: Dense {
            w: Tensor::ones(&[3, 3], DType::F32),
        },
        ..m
    };
    let e = mlp(&x, &bad).unwrap_err();
    let msg = e.to_string();
    assert_eq!(e.kind(), tilejit::ErrorKind::Shape, "{msg}");
    assert!(msg.contains("matmul"), "{msg}");
    let line = MLP_LINE.load(Ordering::Relaxed);
    assert!(msg.contains(&format!("jit_args.rs:{line}")), "{msg}");
    // An error tensor among the weights is the call's error, at the caller.
    let (x, m) = small();
    let err = Mlp {
        l2: Dense {
            w: t32(&[1.0], &[1]).matmul(&t32(&[1.0], &[1])),
        },
        ..m
    };
    assert!(mlp(&x, &err).is_err());
    // The good call still works after the failures.
    let (x, m) = small();
    assert_eq!(vals(&mlp(&x, &m).unwrap()), [3.0, 0.0]);
}

#[derive(JitArgs)]
struct Norm {
    gamma: Tensor,
    beta: Tensor,
}

#[jit(dynamic)]
fn norm_dynamic(x: &Tensor, n: &Norm) -> Tensor {
    let xc = x - x.mean(-1, true);
    &xc * (xc.square().mean(-1, true) + 1e-5).rsqrt() * &n.gamma + &n.beta
}

#[jit]
fn norm_saved(xs: &[Tensor], n: &Norm) -> Tensor {
    (&xs[0] + &xs[1]) * &n.gamma + &n.beta
}

#[test]
fn structs_work_with_dynamic_shapes_and_snapshots() {
    let norm = |d: usize| Norm {
        gamma: Tensor::full(&[d], 2.0, DType::F32),
        beta: Tensor::ones(&[d], DType::F32),
    };
    // [1, 3]: mean 2, centred [-1, 1], variance 1: [-2 + 1, 2 + 1] (to 1e-5).
    for d in [2, 6, 10] {
        let x = Tensor::from_vec([1.0f32, 3.0].repeat(d / 2), &[1, d]).unwrap();
        let y = vals(&norm_dynamic(&x, &norm(d)).unwrap());
        let want: Vec<f32> = [-1.0f32, 3.0].repeat(d / 2);
        for (g, w) in y.iter().zip(&want) {
            assert!((g - w).abs() < 1e-4, "{y:?}");
        }
    }
    // The first size traced exactly, then one class, traced at the two
    // sets of stand-in sizes (the body reads none).
    assert_eq!(norm_dynamic::jit().stats().traces, 3);

    let path = std::env::temp_dir().join(format!("jit-args-{}.tjsnap", std::process::id()));
    let xs = vec![t32(&[1.0, 2.0], &[2]), t32(&[3.0, 4.0], &[2])];
    let f = norm_saved::jit();
    assert_eq!(vals(&norm_saved(&xs, &norm(2)).unwrap()), [9.0, 13.0]);
    f.save(&path).unwrap();
    f.clear();
    assert_eq!(f.load(&path).unwrap(), 1);
    f.freeze();
    assert_eq!(vals(&norm_saved(&xs, &norm(2)).unwrap()), [9.0, 13.0]);
    assert_eq!(f.stats().traces, 1, "the loaded program served the call");
    // A list of another length is a new signature: frozen, an error.
    let three = vec![xs[0].clone(), xs[1].clone(), xs[1].clone()];
    assert!(matches!(
        norm_saved(&three, &norm(2)),
        Err(Error::Frozen { .. })
    ));
    f.unfreeze();
    std::fs::remove_file(&path).ok();
}

#[jit]
fn count_and_sum(xs: &[Tensor], d: Dense) -> (Tensor, Tensor) {
    let n = Tensor::full(&[], xs.len() as f64, DType::F32);
    let s = xs.iter().fold(d.w.clone(), |a, b| a + b);
    (n, s)
}

#[jit]
fn nested_struct_result(x: &Tensor) -> Tensor {
    let m = moments(x)?;
    m.spread.max - m.spread.min
}

#[test]
fn empty_lists_owned_structs_slices_in_closures_and_nested_results() {
    let d = || Dense {
        w: t32(&[1.0, 2.0], &[2]),
    };
    let (n, s) = count_and_sum(&[], d()).unwrap();
    assert_eq!((vals(&n), vals(&s)), (vec![0.0], vec![1.0, 2.0]));
    let xs = [t32(&[1.0, 1.0], &[2]), t32(&[2.0, 2.0], &[2])];
    let (n, s) = count_and_sum(&xs, d()).unwrap();
    assert_eq!((vals(&n), vals(&s)), (vec![2.0], vec![4.0, 5.0]));
    assert_eq!(count_and_sum::jit().handlers().len(), 2);

    let f = jit_fn!(|xs: &[Tensor], k: f32| xs.iter().fold(&xs[0] * 0.0, |a, b| a + b) * k);
    assert_eq!(vals(&f.call((&xs[..], 2.0)).unwrap()), [6.0, 6.0]);
    assert_eq!(vals(&f.call((&xs[..1], 2.0)).unwrap()), [2.0, 2.0]);
    assert_eq!(f.handlers().len(), 2);

    // A struct a nested jit call returns, taken with `?`.
    let x = t32(&[1.0, 5.0, 3.0, -2.0, 0.0, 8.0], &[2, 3]);
    assert_eq!(vals(&nested_struct_result(&x).unwrap()), [4.0, 10.0]);
}
