//! Matmul operands read in place through strided views: transposed,
//! permuted (attention head splits), sliced and batch-broadcast operands
//! agree with the reference interpreter on Host, Sim and Verify in f32,
//! f64 and i32, at odd and zero sizes; and a call moves no copy of a
//! weight (bytes written per call, counted with kernel hooks).

use std::sync::{Arc, Mutex};
use tilejit::prelude::*;
use tilejit::{with_hooks, Hooks};

type Case2 = fn(&Tensor, &Tensor) -> Tensor;

fn as_f64(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).to_vec::<f64>().unwrap()
}

/// Normal values in `dtype`; integers as small ones (-8..8).
fn data(shape: &[usize], seed: u64, dtype: DType) -> Tensor {
    let x = Tensor::randn(shape, seed);
    match dtype {
        DType::F32 => x,
        DType::F64 => x.cast(DType::F64),
        _ => (x * 3.0).cast(dtype),
    }
}

/// Runs `f` on Reference, then Host, Sim and Verify; records mismatches
/// (relative 1e-4 for f32, exact otherwise) and errors in `failures`.
fn agree(what: &str, failures: &mut Vec<String>, f: impl Fn(RunMode) -> tilejit::Result<Tensor>) {
    let want = match f(RunMode::Reference) {
        Ok(t) => t,
        Err(e) => return failures.push(format!("{what}: reference: {e}")),
    };
    let tol = if want.dtype() == DType::F32 {
        1e-4
    } else {
        1e-12
    };
    for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
        let got = match f(mode) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{what} {mode:?}: {e}"));
                continue;
            }
        };
        if got.shape() != want.shape() {
            failures.push(format!(
                "{what} {mode:?}: shape {:?} vs {:?}",
                got.shape(),
                want.shape()
            ));
            continue;
        }
        let (g, w) = (as_f64(&got), as_f64(&want));
        if let Some(i) = g
            .iter()
            .zip(&w)
            .position(|(g, w)| (g - w).abs() > tol * w.abs().max(1.0))
        {
            failures.push(format!(
                "{what} {mode:?}: element {i}: {} vs {}",
                g[i], w[i]
            ));
        }
    }
}

fn assert_none(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// (m, k, n): odd sizes, ones and zeros.
const SIZES: [(usize, usize, usize); 7] = [
    (1, 64, 96),
    (7, 33, 5),
    (1, 1, 1),
    (33, 7, 1),
    (0, 3, 4),
    (3, 0, 5),
    (5, 4, 0),
];

const DTYPES: [DType; 3] = [DType::F32, DType::F64, DType::I32];

#[test]
fn transposed_and_sliced_operands_agree_in_every_mode() {
    // (name, op, a's shape, b's shape) from (m, k, n).
    type Shapes = fn(usize, usize, usize) -> (Vec<usize>, Vec<usize>);
    let cases: [(&str, Case2, Shapes); 6] = [
        // The tied lm_head: `h @ wte^T`.
        (
            "a @ b^T",
            |a, b| a.matmul(&b.transpose(0, 1)),
            |m, k, n| (vec![m, k], vec![n, k]),
        ),
        (
            "a^T @ b",
            |a, b| a.transpose(0, 1).matmul(b),
            |m, k, n| (vec![k, m], vec![k, n]),
        ),
        // Both transposed, with an epilogue fused after the product.
        (
            "(a^T @ b^T) * 2 + 1",
            |a, b| a.transpose(0, 1).matmul(&b.transpose(0, 1)) * 2 + 1,
            |m, k, n| (vec![k, m], vec![n, k]),
        ),
        // Windows: a's columns 1..k+1, b's rows 2..k+2 and columns 1..n+1.
        (
            "a[:, 1:k+1] @ b[2:k+2, 1:n+1]",
            |a, b| {
                let k = a.shape()[1] - 3;
                let n = b.shape()[1] - 2;
                let a = a.slice(1, 1, k as isize + 1);
                a.matmul(&b.slice(0, 2, k as isize + 2).slice(1, 1, n as isize + 1))
            },
            |m, k, n| (vec![m, k + 3], vec![k + 4, n + 2]),
        ),
        // The leading rows of a bigger buffer: offset 0, contiguous, yet
        // not the whole buffer (a GRU's first direction of `initial_h`).
        (
            "a[:m] @ b",
            |a, b| {
                let m = a.shape()[0] - 2;
                a.slice(0, 0, m as isize).matmul(b)
            },
            |m, k, n| (vec![m + 2, k], vec![k, n]),
        ),
        // Rows of a window of a transposed matrix.
        (
            "a^T[1:m+1] @ b",
            |a, b| {
                let m = a.shape()[1] - 2;
                a.transpose(0, 1).slice(0, 1, m as isize + 1).matmul(b)
            },
            |m, k, n| (vec![k, m + 2], vec![k, n]),
        ),
    ];
    let mut failures = Vec::new();
    for (name, op, shapes) in cases {
        let f = jit_fn!(move |a: &Tensor, b: &Tensor| op(a, b));
        for dt in DTYPES {
            for (i, &(m, k, n)) in SIZES.iter().enumerate() {
                let (sa, sb) = shapes(m, k, n);
                let (a, b) = (data(&sa, 2 * i as u64, dt), data(&sb, 2 * i as u64 + 1, dt));
                let what = format!("{name} {dt} m={m} k={k} n={n}");
                agree(&what, &mut failures, |mode| {
                    f.with_mode(mode).call((&a, &b))
                });
            }
        }
    }
    assert_none(failures);
}

#[test]
fn batched_permuted_and_broadcast_operands_agree_in_every_mode() {
    type Shapes = fn(usize, usize, usize, usize) -> (Vec<usize>, Vec<usize>);
    let cases: [(&str, Case2, Shapes); 4] = [
        // A shared weight broadcast along the batch (stride 0).
        (
            "[B,m,k] @ [k,n]",
            |a, b| a.matmul(b),
            |bt, m, k, n| (vec![bt, m, k], vec![k, n]),
        ),
        (
            "[m,k] @ [B,n,k]^T",
            |a, b| a.matmul(&b.transpose(1, 2)),
            |bt, m, k, n| (vec![m, k], vec![bt, n, k]),
        ),
        // Attention's `k.transpose(-1, -2)` on batched heads.
        (
            "[B,m,k] @ [B,n,k]^T",
            |a, b| a.matmul(&b.transpose(-1, -2)),
            |bt, m, k, n| (vec![bt, m, k], vec![bt, n, k]),
        ),
        // Head splits: `[T, B*d]` seen as `[B, T, d]`.
        (
            "split(a) @ split(b)^T",
            |a, b| {
                let split = |x: &Tensor, t: usize, h: usize, d: usize| {
                    x.reshape(&[t, h, d]).permute(&[1, 0, 2])
                };
                let (s, a2, b2) = (a.shape(), a.shape()[1], b.shape()[1]);
                let h = 3;
                split(a, s[0], h, a2 / h).matmul(&split(b, b.shape()[0], h, b2 / h).transpose(1, 2))
            },
            |bt, m, k, n| {
                let _ = bt;
                (vec![m, 3 * k], vec![n, 3 * k])
            },
        ),
    ];
    let mut failures = Vec::new();
    for (name, op, shapes) in cases {
        let f = jit_fn!(move |a: &Tensor, b: &Tensor| op(a, b));
        for dt in DTYPES {
            for bt in [1, 3] {
                for (i, &(m, k, n)) in SIZES.iter().enumerate() {
                    let (sa, sb) = shapes(bt, m, k, n);
                    let (a, b) = (data(&sa, 7 + i as u64, dt), data(&sb, 40 + i as u64, dt));
                    let what = format!("{name} {dt} B={bt} m={m} k={k} n={n}");
                    agree(&what, &mut failures, |mode| {
                        f.with_mode(mode).call((&a, &b))
                    });
                }
            }
        }
    }
    assert_none(failures);
}

/// (m, k, n) for products of a few rows (the matrix-vector path): k and n
/// off the vector width, a single column, and sizes large enough that the
/// columns split over threads.
const ROW_SIZES: [(usize, usize, usize); 8] = [
    (1, 37, 53),
    (2, 19, 35),
    (4, 67, 17),
    (3, 5, 1),
    (1, 1, 7),
    (1, 515, 1027),
    (3, 300, 301),
    (1, 9, 0),
];

#[test]
fn few_row_products_agree_in_every_mode() {
    type Shapes = fn(usize, usize, usize) -> (Vec<usize>, Vec<usize>);
    let cases: [(&str, Case2, Shapes); 5] = [
        (
            "a @ b",
            |a, b| a.matmul(b),
            |m, k, n| (vec![m, k], vec![k, n]),
        ),
        (
            "a @ b^T",
            |a, b| a.matmul(&b.transpose(0, 1)),
            |m, k, n| (vec![m, k], vec![n, k]),
        ),
        // A transposed row, and an epilogue after the product.
        (
            "(a^T @ b) * 2 + 1",
            |a, b| a.transpose(0, 1).matmul(b) * 2 + 1,
            |m, k, n| (vec![k, m], vec![k, n]),
        ),
        (
            "[3,m,k] @ [3,n,k]^T",
            |a, b| a.matmul(&b.transpose(-1, -2)),
            |m, k, n| (vec![3, m, k], vec![3, n, k]),
        ),
        (
            "[2,m,k] @ [k,n]",
            |a, b| a.matmul(b),
            |m, k, n| (vec![2, m, k], vec![k, n]),
        ),
    ];
    let mut failures = Vec::new();
    for (name, op, shapes) in cases {
        let f = jit_fn!(move |a: &Tensor, b: &Tensor| op(a, b));
        for dt in [DType::F32, DType::F64] {
            for (i, &(m, k, n)) in ROW_SIZES.iter().enumerate() {
                let (sa, sb) = shapes(m, k, n);
                let (a, b) = (data(&sa, 60 + i as u64, dt), data(&sb, 80 + i as u64, dt));
                let what = format!("{name} {dt} m={m} k={k} n={n}");
                agree(&what, &mut failures, |mode| {
                    f.with_mode(mode).call((&a, &b))
                });
            }
        }
    }
    assert_none(failures);
}

/// Causal-free multi-head attention on weight-projected q, k, v, split
/// into `H` heads and merged back, the way `gpt2_block` writes it.
const H: usize = 4;

fn attention(x: &Tensor, wq: &Tensor, wk: &Tensor, wv: &Tensor, softmax: bool) -> Tensor {
    let (t, c) = (x.shape()[0], x.shape()[1]);
    let d = c / H;
    let split = |y: Tensor| y.reshape(&[t, H, d]).permute(&[1, 0, 2]);
    let (q, k, v) = (
        split(x.matmul(wq)),
        split(x.matmul(wk)),
        split(x.matmul(wv)),
    );
    let s = q.matmul(&k.transpose(-1, -2));
    let p = if softmax { (s * 0.125).softmax(-1) } else { s };
    p.matmul(&v).permute(&[1, 0, 2]).reshape(&[t, c])
}

#[test]
fn attention_head_splits_agree_in_every_mode() {
    let float =
        jit_fn!(|x: &Tensor, wq: &Tensor, wk: &Tensor, wv: &Tensor| attention(x, wq, wk, wv, true));
    let plain = jit_fn!(
        |x: &Tensor, wq: &Tensor, wk: &Tensor, wv: &Tensor| attention(x, wq, wk, wv, false)
    );
    let mut failures = Vec::new();
    for dt in DTYPES {
        for (t, c) in [(1, 8), (7, 12), (33, 4), (0, 8)] {
            let x = data(&[t, c], 1, dt);
            let scale = |w: Tensor| if dt == DType::I32 { w } else { w * 0.3 };
            let w: Vec<Tensor> = (0..3).map(|i| scale(data(&[c, c], 2 + i, dt))).collect();
            // A softmax over zero keys has no identity: no softmax there.
            let f = if dt == DType::I32 || t == 0 {
                &plain
            } else {
                &float
            };
            agree(
                &format!("attention {dt} T={t} C={c}"),
                &mut failures,
                |mode| f.with_mode(mode).call((&x, &w[0], &w[1], &w[2])),
            );
        }
    }
    assert_none(failures);
}

/// Bytes every kernel of one call writes (the values hooks see after each
/// kernel), and the call's result.
fn bytes_written(mode: RunMode, call: impl FnOnce() -> tilejit::Result<Tensor>) -> (usize, Tensor) {
    let total = Arc::new(Mutex::new(0usize));
    let sum = total.clone();
    let hooks = Hooks::new().after(move |e| {
        let bytes: usize = e
            .outputs()
            .iter()
            .map(|t| t.numel() * t.dtype().size_bytes())
            .sum();
        *sum.lock().unwrap() += bytes;
    });
    let out = with_mode(mode, || with_hooks(&hooks, call)).unwrap();
    let n = *total.lock().unwrap();
    (n, out)
}

#[test]
fn tied_lm_head_copies_no_weight_per_call() {
    // h [1, 64] @ wte[512, 64]^T: the weight (128 KiB) is read in place.
    let wte = Tensor::randn(&[512, 64], 3);
    let weight_bytes = 512 * 64 * 4;
    let as_input = jit_fn!(|h: &Tensor, wte: &Tensor| h.matmul(&wte.transpose(0, 1)));
    let captured = {
        let wte = wte.clone();
        jit_fn!(move |h: &Tensor| h.matmul(&wte.transpose(0, 1)))
    };
    let h = Tensor::randn(&[1, 64], 4);
    let want = as_input
        .with_mode(RunMode::Reference)
        .call((&h, &wte))
        .unwrap();
    let want = as_f64(&want);
    for mode in [RunMode::Host, RunMode::Sim] {
        // The first call traces (a captured tensor's transpose then runs
        // once, eagerly, into the traced program's constant) and compiles;
        // later calls are the steady state measured here.
        with_mode(mode, || {
            as_input.call((&h, &wte)).unwrap();
            captured.call((&h,)).unwrap();
        });
        for _ in 0..2 {
            for (how, (written, out)) in [
                ("input", bytes_written(mode, || as_input.call((&h, &wte)))),
                ("captured", bytes_written(mode, || captured.call((&h,)))),
            ] {
                let out_bytes = 512 * 4;
                assert!(
                    written == out_bytes,
                    "{mode:?} {how}: {written} bytes written for a {out_bytes}-byte logits row"
                );
                assert!(written < weight_bytes);
                for (g, w) in as_f64(&out).iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                        "{mode:?} {how}: {g} vs {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn attention_head_splits_copy_no_weight_or_view_per_call() {
    // T = 2 tokens of C = 64 channels in 4 heads: each weight is 16 KiB,
    // each activation 512 bytes.
    let (t, c) = (2usize, 64usize);
    let f =
        jit_fn!(|x: &Tensor, wq: &Tensor, wk: &Tensor, wv: &Tensor| attention(x, wq, wk, wv, true));
    let x = Tensor::randn(&[t, c], 5);
    let w: Vec<Tensor> = (0..3)
        .map(|i| Tensor::randn(&[c, c], 6 + i) * 0.2)
        .collect();
    let want = as_f64(
        &f.with_mode(RunMode::Reference)
            .call((&x, &w[0], &w[1], &w[2]))
            .unwrap(),
    );
    // What must be written: q, k and v (3 x [T, C]), the scores and their
    // softmax (2 x [H, T, T]), the heads' outputs and the merged result
    // (2 x [T, C]). A copy of a head split or of k^T would add [T, C].
    let needed = (3 * t * c + 2 * H * t * t + 2 * t * c) * 4;
    for mode in [RunMode::Host, RunMode::Sim] {
        for _ in 0..2 {
            let (written, out) = bytes_written(mode, || f.call((&x, &w[0], &w[1], &w[2])));
            assert!(
                written <= needed,
                "{mode:?}: {written} bytes written, at most {needed} needed"
            );
            assert!(written < c * c * 4, "{mode:?}: a weight's worth written");
            for (g, w) in as_f64(&out).iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                    "{mode:?}: {g} vs {w}"
                );
            }
        }
    }
}

/// `x @ w` by the definition, in f64 (`w` read through `w_at(p, j)`).
fn product_def(
    x: &[f32],
    w_at: impl Fn(usize, usize) -> f32,
    m: usize,
    k: usize,
    n: usize,
) -> Vec<f64> {
    (0..m * n)
        .map(|e| {
            let (i, j) = (e / n, e % n);
            (0..k)
                .map(|p| x[i * k + p] as f64 * w_at(p, j) as f64)
                .sum()
        })
        .collect()
}

/// A matmul whose right operand is an argument packs it in panels once
/// it has seen it twice and keeps them in the weight cache: a third call
/// is a hit, a weight
/// read transposed (a tied lm_head) is packed through its view, a partial
/// last panel (40 columns) and rows that are not a whole block (9) give
/// the definition's values on Host. Once a weight is dropped its entry
/// goes, and new weights give their own product, never the old panels.
#[test]
fn kept_panels_serve_later_calls_and_go_with_their_storage() {
    let cache = tilejit::weight_cache();
    let (m, k, n) = (9, 64, 40);
    let x = Tensor::randn(&[m, k], 901);
    let xs = x.to_vec::<f32>().unwrap();
    let close = |got: &Tensor, want: &[f64], what: &str| {
        let got = got.to_vec::<f32>().unwrap();
        for (g, w) in got.iter().zip(want) {
            assert!(
                (*g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "{what}: {g} vs {w}"
            );
        }
    };
    let w = Tensor::randn(&[k, n], 902);
    let ws = w.to_vec::<f32>().unwrap();
    let want = product_def(&xs, |p, j| ws[p * n + j], m, k, n);
    let before = cache.stats();
    // Noted, packed, then found.
    for call in ["first", "second", "third"] {
        close(&with_mode(RunMode::Host, || x.matmul(&w)), &want, call);
    }
    assert!(cache.stats().hits > before.hits, "{:?}", cache.stats());
    // A tied lm_head: the [n, k] embedding read transposed.
    let wte = Tensor::randn(&[n, k], 903);
    let es = wte.to_vec::<f32>().unwrap();
    let want_t = product_def(&xs, |p, j| es[j * k + p], m, k, n);
    for _ in 0..3 {
        close(
            &with_mode(RunMode::Host, || x.matmul(&wte.transpose(0, 1))),
            &want_t,
            "tied",
        );
    }
    // New weights after the old ones are gone.
    let freed = cache.stats().freed;
    drop(w);
    let w2 = Tensor::randn(&[k, n], 904);
    let ws2 = w2.to_vec::<f32>().unwrap();
    let want2 = product_def(&xs, |p, j| ws2[p * n + j], m, k, n);
    close(
        &with_mode(RunMode::Host, || x.matmul(&w2)),
        &want2,
        "new weights",
    );
    assert!(cache.stats().freed > freed, "{:?}", cache.stats());
}

/// Threads multiplying by the same weights at once (their first, second
/// and later sightings racing, the panels packed perhaps twice and kept
/// once) all get the definition's product, transposed weights too.
#[test]
fn kept_panels_from_many_threads_at_once_match_the_definition() {
    let (m, k, n) = (13, 48, 72);
    let w = Tensor::randn(&[k, n], 911);
    let wt = Tensor::randn(&[n, k], 912);
    let (ws, wts) = (w.to_vec::<f32>().unwrap(), wt.to_vec::<f32>().unwrap());
    std::thread::scope(|s| {
        for t in 0..6u64 {
            let (w, wt, ws, wts) = (&w, &wt, &ws, &wts);
            s.spawn(move || {
                for call in 0..4u64 {
                    let x = Tensor::randn(&[m, k], 920 + 10 * t + call);
                    let xs = x.to_vec::<f32>().unwrap();
                    let (y, want) = if (t + call) % 2 == 0 {
                        let want = product_def(&xs, |p, j| ws[p * n + j], m, k, n);
                        (with_mode(RunMode::Host, || x.matmul(w)), want)
                    } else {
                        let want = product_def(&xs, |p, j| wts[j * k + p], m, k, n);
                        (
                            with_mode(RunMode::Host, || x.matmul(&wt.transpose(0, 1))),
                            want,
                        )
                    };
                    let got = y.to_vec::<f32>().unwrap();
                    for (g, w) in got.iter().zip(&want) {
                        assert!(
                            (*g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()),
                            "{g} vs {w}"
                        );
                    }
                }
            });
        }
    });
}
