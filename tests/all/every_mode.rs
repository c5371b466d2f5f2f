//! One user-level test body run in every mode: each public tensor op,
//! inside a jit function, at odd and zero-size shapes and in every dtype it
//! accepts, on Host, Sim and Verify, against the same call on the
//! reference interpreter. `TILEJIT_BIG_SHAPES=1` runs the op sweep over
//! large shapes instead (about a minute in debug; f32 dot products of
//! 140,000 terms then differ from the exact f64 result by ~1e-5, past this
//! file's tolerance).

use tilejit::prelude::*;

type Op = fn(&Tensor, &Tensor) -> Tensor;

/// Binary and unary ops of the public API; unary ones ignore `b`.
fn ops() -> Vec<(&'static str, Op, bool)> {
    // (name, op, float-only)
    vec![
        ("add", |a, b| a + b, false),
        ("sub", |a, b| a - b, false),
        ("mul", |a, b| a * b, false),
        ("div", |a, b| a / b, true),
        // Integers too: casts of small normals hold many zeros (x / 0 is 0).
        ("div_any", |a, b| a / b + a / 2.0, false),
        ("scalar_mix", |a, _| 2.0 * a - 1.0 + a * 0.5, false),
        ("rsub_rdiv", |a, _| (1.0 - a) + (a + 3.0).rdiv(2.0), true),
        ("neg", |a, _| -a, false),
        ("exp", |a, _| a.exp(), true),
        ("log", |a, _| a.abs().log(), true),
        ("sqrt", |a, _| a.abs().sqrt(), true),
        ("rsqrt", |a, _| (a.abs() + 0.5).rsqrt(), true),
        ("tanh", |a, _| a.tanh(), true),
        ("sigmoid", |a, _| a.sigmoid(), true),
        ("relu", |a, _| a.relu(), false),
        ("gelu", |a, _| a.gelu(), true),
        ("abs", |a, _| a.abs(), false),
        ("recip", |a, _| (a.abs() + 1.0).recip(), true),
        ("square", |a, _| a.square(), false),
        // Large arguments too (|x| up to ~1e4, f16 included).
        ("sin_cos", |a, _| a.sin() + (a * 1000.0).cos(), true),
        ("erf", |a, _| a.erf(), true),
        (
            "floor_ceil_round",
            |a, _| a.floor() + a.ceil() * 2.0 + (a * 0.5).round() * 4.0,
            false,
        ),
        ("sign", |a, _| a.sign(), false),
        // Inverse trig: NaN outside the domains (|x| > 1, x < 1) included.
        ("atan_asinh", |a, _| a.atan() + a.asinh(), true),
        (
            "asin_acos",
            |a, _| (a * 0.3).asin() + (a * 0.3).acos(),
            true,
        ),
        ("acosh_atanh", |a, _| a.acosh() + (a * 0.3).atanh(), true),
        // Negative bases with non-integer exponents give NaN in floats.
        ("pow", |a, b| a.pow(b), false),
        ("powf", |a, _| a.powf(2) + a.abs().powf(3), false),
        // Integers: divisors of 0 (x % 0 is 0); floats: negative divisors.
        ("rem", |a, b| a % b, false),
        ("rem_scalar", |a, _| a % 3 + a % -2, false),
        ("maximum", |a, b| a.maximum(b), false),
        ("minimum", |a, b| a.minimum(b), false),
        ("compare", |a, b| Tensor::where_cond(&a.lt(b), a, b), false),
        (
            "le_ge_eq",
            |a, b| Tensor::where_cond(&a.le(b), &a.ge(b).cast(a.dtype()), &a.eq(b).cast(a.dtype())),
            false,
        ),
        ("gt_cast", |a, b| a.gt(b).cast(DType::F32) * 2.0, false),
        ("sum_last", |a, _| a.sum(-1, false), false),
        ("sum_first_keep", |a, _| a.sum(0, true), false),
        ("max_last", |a, _| a.max(-1, true), false),
        ("min_first", |a, _| a.min(0, false), false),
        // Factors near 1, so long rows stay finite.
        ("prod_last", |a, _| (a * 0.01 + 1.0).prod(-1, false), true),
        ("prod_first_keep", |a, _| a.prod(0, true), false),
        ("argmax_last", |a, _| a.argmax(-1, false), false),
        (
            "argmin_first",
            |a, b| a.argmin(0, true) + b.argmax(0, true),
            false,
        ),
        (
            "any_all",
            |a, b| {
                let p = a.gt(b);
                let all = p.min(0, true).cast(DType::I32).sum(-1, false);
                p.max(-1, false).cast(DType::I32) + all
            },
            false,
        ),
        ("mean_last", |a, _| a.mean(-1, false), true),
        ("sum_all", |a, _| a.sum_all(), false),
        ("softmax", |a, _| a.softmax(-1), true),
        ("softmax_first", |a, _| a.softmax(0), true),
        ("transpose", |a, _| a.transpose(0, -1) + 1.0, false),
        ("reshape", |a, _| a.reshape(&[a.numel()]) * 3.0, false),
        ("bcast_row", |a, b| a + b.sum(0, true), false),
        (
            "cast_round_trip",
            |a, _| {
                (a * 1.001).cast(DType::F16).cast(a.dtype())
                    + (a * 1.001).cast(DType::BF16).cast(a.dtype())
            },
            false,
        ),
        (
            "cast_int",
            |a, _| (a * 2.5).cast(DType::I32).cast(a.dtype()),
            false,
        ),
        // An outer product for small inputs (a 4096^2 output would only be slow).
        (
            "matmul",
            |a, b| {
                let n = a.numel().min(64);
                a.reshape(&[a.numel(), 1])
                    .sum(0, true)
                    .broadcast_to(&[n, 1])
                    .matmul(&b.reshape(&[1, b.numel()]))
            },
            false,
        ),
        (
            "matmul_t",
            |a, b| {
                let n = a.numel();
                a.reshape(&[1, n])
                    .matmul(&b.reshape(&[1, n]).transpose(0, 1))
            },
            false,
        ),
        ("sum_exp", |a, _| (a * 0.1).exp().sum(-1, false), true),
        ("mean_all", |a, _| a.mean(0, false).sum_all(), true),
        (
            "bmm",
            |a, b| {
                let n = a.numel();
                (a.reshape(&[1, 1, n]) * 0.5)
                    .matmul(&b.reshape(&[1, n, 1]))
                    .reshape(&[1])
                    + 1.0
            },
            false,
        ),
        ("slice_last", |a, _| a.slice(-1, 1, -1), false),
        (
            "slice_step_reversed",
            |a, b| {
                a.slice_step(-1, -1, isize::MIN, -2) + b.slice_step(0, 1, isize::MAX, 3).sum_all()
            },
            false,
        ),
        (
            "slice_views_fused",
            |a, b| a.slice(0, 0, 2) * 2.0 + b.slice(0, -2, isize::MAX),
            false,
        ),
        ("cat_first", |a, b| Tensor::cat(&[a, b, a], 0), false),
        (
            "cat_fused_last",
            |a, b| Tensor::cat(&[&(a + b), b], -1) * 2.0,
            false,
        ),
        (
            "split_swap",
            |a, _| {
                let n = a.shape().first().copied().unwrap_or(0);
                let p = a.split(&[n / 2, n - n / 2], 0);
                Tensor::cat(&[&p[1], &p[0]], 0)
            },
            false,
        ),
        (
            "pad",
            |a, _| a.pad(&vec![(1, 2); a.shape().len()], 0.0),
            false,
        ),
        ("tril", |a, _| a.tril(0), false),
        (
            "index_select_reversed",
            |a, _| {
                // A computed index (materialised first), reversing dim 0.
                let n = a.shape().first().copied().unwrap_or(0);
                let rev = Tensor::arange(n, DType::I64) * -1 + (n as f64 - 1.0);
                a.index_select(0, &rev)
            },
            false,
        ),
        (
            "gather_last",
            |a, _| {
                // Each row read from its end: an index per element.
                let s = a.shape().to_vec();
                let n = s.last().copied().unwrap_or(0);
                let idx = (Tensor::arange(n, DType::I32) * -1 + (n as f64 - 1.0)).broadcast_to(&s);
                a.gather(-1, &idx)
            },
            false,
        ),
        ("triu_minus_tril", |a, _| a.triu(1) - a.tril(-1), false),
        (
            "conv2d",
            |a, _| {
                // Floats: one GEMM over windows read in place; other
                // dtypes: gathered windows. Padding 1 around a 1-row image.
                let w = Tensor::arange(6, DType::F32)
                    .cast(a.dtype())
                    .reshape(&[2, 1, 1, 3]);
                a.reshape(&[1, 1, 1, a.numel()]).conv2d(&w, 1, 1)
            },
            false,
        ),
        (
            "layer_norm",
            |a, _| {
                let c = a.shape()[a.shape().len() - 1];
                a.layer_norm(
                    &Tensor::ones(&[c], a.dtype()),
                    &Tensor::zeros(&[c], a.dtype()),
                    1e-5,
                )
            },
            true,
        ),
    ]
}

fn shapes() -> Vec<Vec<usize>> {
    if std::env::var_os("TILEJIT_BIG_SHAPES").is_some() {
        return vec![
            vec![65537],
            vec![3, 20000],
            vec![20000, 3],
            vec![2, 70001],
            vec![9, 4097],
        ];
    }
    vec![
        vec![1],
        vec![3],
        vec![50],
        vec![783],
        vec![4096],
        vec![3, 5],
        vec![7, 50],
        vec![2, 3, 33],
        // Long rows: chunked and split reductions, blocked host sums, a
        // 60,000-long dot product on the cube.
        vec![3, 20000],
        vec![0],
        vec![0, 5],
        vec![4, 0],
        vec![1, 1, 1, 1, 1, 1, 1, 2],
        vec![],
    ]
}

fn input(shape: &[usize], dtype: DType, seed: u64) -> Tensor {
    let x = Tensor::randn(shape, seed) * 3.0;
    match dtype {
        DType::F32 => x,
        DType::Bool => x.gt(&Tensor::zeros(&[], DType::F32)),
        _ => x.cast(dtype),
    }
}

fn as_f64(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).to_vec::<f64>().unwrap()
}

#[test]
fn every_op_agrees_with_the_reference_in_every_mode() {
    let mut failures = Vec::new();
    let (mut compared, mut rejected) = (0usize, 0usize);
    for (name, op, float_only) in ops() {
        let f = jit_fn!(move |a: &Tensor, b: &Tensor| op(a, b));
        for dtype in DType::ALL {
            if float_only && !dtype.is_float() {
                continue;
            }
            for shape in shapes() {
                let (a, b) = (input(&shape, dtype, 1), input(&shape, dtype, 2));
                let want = match f.with_mode(RunMode::Reference).call((&a, &b)) {
                    Ok(t) => t,
                    Err(e) => {
                        // Only the user's mistakes may fail (shape, dtype,
                        // argument errors, a panicking body), never tilejit
                        // itself.
                        if !matches!(e.code(), 1..=3 | 7) {
                            failures.push(format!("{name} {dtype:?} {shape:?}: {e}"));
                        }
                        for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
                            if f.with_mode(mode).call((&a, &b)).is_ok() {
                                failures.push(format!("{name} {dtype:?} {shape:?} {mode:?}: ok where the reference fails with {e}"));
                            }
                        }
                        rejected += 1;
                        continue;
                    }
                };
                compared += 1;
                for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
                    match f.with_mode(mode).call((&a, &b)) {
                        Ok(got) => {
                            if let Some(m) = mismatch(&got, &want) {
                                failures.push(format!("{name} {dtype:?} {shape:?} {mode:?}: {m}"));
                            }
                        }
                        Err(e) => {
                            failures.push(format!("{name} {dtype:?} {shape:?} {mode:?}: {e}"))
                        }
                    }
                }
            }
        }
    }
    // Guards against a sweep that quietly stops comparing (bool is rejected
    // by every arithmetic op, layout ops need rank >= 1 or 2; u8 and i8
    // reject scalars they cannot hold, as `a * 0.5` or u8 `a % -2`, and so
    // do u16, u32 and u64). With thirteen dtypes: 8491 compared, 1659
    // rejected (nine: 5867 and 1119; seven: 4783 and 887).
    assert!(
        std::env::var_os("TILEJIT_BIG_SHAPES").is_some() || compared > 6400 && rejected < 1900,
        "compared {compared}, rejected {rejected}"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// `None` when `got` matches `want`: the same shape, and every element
/// equal, both NaN, or within the dtype's tolerance relative to
/// max(|want|, 1). Else what differs first.
fn mismatch(got: &Tensor, want: &Tensor) -> Option<String> {
    if got.shape() != want.shape() {
        return Some(format!("shape {:?} vs {:?}", got.shape(), want.shape()));
    }
    let tol = match want.dtype() {
        DType::F16 | DType::BF16 => 1e-2,
        DType::F32 => 2e-5,
        _ => 1e-12,
    };
    let (g, w) = (as_f64(got), as_f64(want));
    let i = g.iter().zip(&w).position(|(g, w)| {
        !(g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * w.abs().max(1.0))
    })?;
    Some(format!("element {i}: {} vs {}", g[i], w[i]))
}

/// Runs `f` on Reference, then on Host, Sim and Verify, and records any
/// disagreement (or an error where the reference has none) in `failures`.
fn agree<F>(what: &str, failures: &mut Vec<String>, f: F)
where
    F: Fn(RunMode) -> tilejit::Result<Tensor>,
{
    let want = match f(RunMode::Reference) {
        Ok(t) => t,
        Err(e) => {
            failures.push(format!("{what}: reference: {e}"));
            return;
        }
    };
    for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
        match f(mode) {
            Ok(got) => {
                if let Some(m) = mismatch(&got, &want) {
                    failures.push(format!("{what} {mode:?}: {m}"));
                }
            }
            Err(e) => failures.push(format!("{what} {mode:?}: {e}")),
        }
    }
}

#[test]
fn broadcasts_axes_params_and_long_rows_agree_in_every_mode() {
    let mut failures = Vec::new();
    let bin = jit_fn!(|a: &Tensor, b: &Tensor, k: f32| Tensor::where_cond(
        &a.gt(b),
        &(a * k - b),
        &(b * a).exp()
    ));
    for (sa, sb) in [
        (vec![3, 1], vec![1, 4]),
        (vec![5], vec![2, 5]),
        (vec![], vec![7, 3]),
        (vec![2, 1, 3], vec![4, 1]),
        (vec![1], vec![783]),
        (vec![6, 1, 1, 2], vec![1, 5, 3, 1]),
        (vec![0, 1], vec![1, 3]),
        (vec![33, 1], vec![33, 257]),
    ] {
        let (a, b) = (Tensor::randn(&sa, 5), Tensor::randn(&sb, 6));
        agree(
            &format!("where/broadcast {sa:?} {sb:?}"),
            &mut failures,
            |m| bin.with_mode(m).call((&a, &b, 0.75f32)),
        );
    }
    let axes = jit_fn!(|x: &Tensor, ax: i64| {
        let ax = ax as isize;
        let s = x.softmax(ax);
        s * x.sum(ax, true) + x.max(ax, true) - x.mean(ax, true) + x.min(ax, true).abs()
    });
    for shape in [
        vec![4, 5, 6],
        vec![2, 3, 4, 5],
        vec![1, 300, 3],
        vec![50, 1, 9],
    ] {
        let x = Tensor::randn(&shape, 7);
        for ax in -(shape.len() as i64)..shape.len() as i64 {
            agree(&format!("axis {ax} of {shape:?}"), &mut failures, |m| {
                axes.with_mode(m).call((&x, ax))
            });
        }
    }
    let perm = jit_fn!(|x: &Tensor| {
        let t = x.transpose(0, 2);
        let n = t.numel();
        (t.reshape(&[n]) * 2.0)
            .reshape(&[x.shape()[2], x.shape()[1] * x.shape()[0]])
            .sum(-1, false)
    });
    for shape in [vec![3, 4, 5], vec![1, 7, 33], vec![17, 2, 1]] {
        let x = Tensor::randn(&shape, 8);
        agree(
            &format!("transpose+reshape {shape:?}"),
            &mut failures,
            |m| perm.with_mode(m).call((&x,)),
        );
    }
    // Few long rows: reductions split over tasks with a combine step.
    let rows = jit_fn!(|x: &Tensor| x.softmax(-1) * 3.0 + x.sum(-1, true) / x.max(-1, true).abs());
    for shape in [
        vec![1, 100_003],
        vec![3, 70_000],
        vec![9, 20_001],
        vec![200_000],
    ] {
        let x = Tensor::randn(&shape, 9);
        agree(&format!("long rows {shape:?}"), &mut failures, |m| {
            rows.with_mode(m).call((&x,))
        });
    }
    let bmm = jit_fn!(|a: &Tensor, b: &Tensor, bias: &Tensor| (a.matmul(b) + bias).relu() * 2.0);
    for (sa, sb) in [
        (vec![3, 5, 7], vec![7, 4]),
        (vec![2, 65, 3], vec![2, 3, 70]),
        (vec![1, 1], vec![1, 1]),
        (vec![130, 1], vec![1, 2]),
    ] {
        let (a, b) = (Tensor::randn(&sa, 10), Tensor::randn(&sb, 11));
        let bias = Tensor::randn(&[sb[sb.len() - 1]], 12);
        agree(&format!("matmul {sa:?} @ {sb:?}"), &mut failures, |m| {
            bmm.with_mode(m).call((&a, &b, &bias))
        });
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn odd_outputs_agree_in_every_mode() {
    let w = Tensor::randn(&[3, 4], 20);
    let captured = jit_fn!(move |x: &Tensor| x * &w + Tensor::arange(4, DType::F32));
    let x = Tensor::randn(&[3, 4], 21);
    let mut failures = Vec::new();
    agree("captured constants", &mut failures, |m| {
        captured.with_mode(m).call((&x,))
    });
    let ident = jit_fn!(|x: &Tensor| x.clone());
    agree("identity", &mut failures, |m| {
        ident.with_mode(m).call((&x,))
    });
    let reshape_only = jit_fn!(|x: &Tensor| x.reshape(&[4, 3]).transpose(0, 1));
    agree("reshape+transpose only", &mut failures, |m| {
        reshape_only.with_mode(m).call((&x,))
    });
    let param_out = jit_fn!(|_x: &Tensor, k: f32| k * 2.0 + 1.0);
    agree("param output", &mut failures, |m| {
        param_out.with_mode(m).call((&x, 1.5f32))
    });
    let cast_out = jit_fn!(|x: &Tensor| x.cast(DType::F16));
    agree("cast only", &mut failures, |m| {
        cast_out.with_mode(m).call((&x,))
    });
    let bcast_out = jit_fn!(|x: &Tensor| x.sum(0, true).broadcast_to(&[5, 3, 4]));
    agree("broadcast output", &mut failures, |m| {
        bcast_out.with_mode(m).call((&x,))
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    let many = jit_fn!(|x: &Tensor, k: f32| {
        let y = x.exp();
        (y.clone(), y.sum_all() * k, x.clone(), y, x.max(-1, false))
    });
    let runs: Vec<_> = [
        RunMode::Reference,
        RunMode::Host,
        RunMode::Sim,
        RunMode::Verify,
    ]
    .into_iter()
    .map(|m| many.with_mode(m).call((&x, 0.5f32)).unwrap())
    .collect();
    let flat = |r: &(Tensor, Tensor, Tensor, Tensor, Tensor)| {
        [&r.0, &r.1, &r.2, &r.3, &r.4].map(|t| (t.shape().to_vec(), as_f64(t)))
    };
    let want = flat(&runs[0]);
    for r in &runs[1..] {
        for (got, want) in flat(r).iter().zip(&want) {
            assert_eq!(got.0, want.0);
            for (g, w) in got.1.iter().zip(&want.1) {
                assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{g} vs {w}");
            }
        }
    }
}
