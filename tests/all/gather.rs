//! `gather` (numpy `take_along_axis`) and `index_select` (numpy `take`):
//! numpy-computed values on every backend, eager and traced; an embedding
//! lookup fused with its consumer; indices out of range are errors that
//! name the op, never reads out of bounds.

use tilejit::prelude::*;
use tilejit::{jit, jit_fn, ErrorKind};

const MODES: [RunMode; 3] = [RunMode::Host, RunMode::Sim, RunMode::Verify];

/// `arange(12).reshape(3, 4) * 1.5`.
fn x34() -> Tensor {
    Tensor::arange(12, DType::F32).reshape(&[3, 4]) * 1.5
}

fn i64s(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

#[jit]
fn along(x: &Tensor, i: &Tensor, j: &Tensor) -> (Tensor, Tensor) {
    (x.gather(0, i), x.gather(-1, j))
}

#[test]
fn gather_matches_numpy_take_along_axis() {
    // numpy: np.take_along_axis(x, i, 0), np.take_along_axis(x, j, 1)
    let i = i64s(&[2, 0, 1, 1, 0, 0, 2, 1], &[2, 4]);
    let j = i64s(&[3, 3, 0, 1, 2, 0], &[3, 2]).cast(DType::I32);
    for mode in MODES {
        with_mode(mode, || {
            let x = x34();
            let (a, b) = along(&x, &i, &j).unwrap();
            let want_a = [12.0, 1.5, 9.0, 10.5, 0.0, 1.5, 15.0, 10.5];
            assert_eq!(a.to_vec::<f32>().unwrap(), want_a, "{mode:?}");
            assert_eq!(b.shape(), [3, 2]);
            let want_b = [4.5, 4.5, 6.0, 7.5, 15.0, 12.0];
            assert_eq!(b.to_vec::<f32>().unwrap(), want_b, "{mode:?}");
            assert_eq!(x.gather(1, &j).to_vec::<f32>().unwrap(), want_b, "eager");
        });
    }
}

#[test]
fn index_select_matches_numpy_take_on_ints() {
    // numpy: np.take(t, [4, 0, 4, 2], axis=0), np.take(t, [3, 1], axis=1)
    for mode in MODES {
        with_mode(mode, || {
            let t = Tensor::arange(20, DType::I32).reshape(&[5, 4]);
            let rows = t.index_select(0, &i64s(&[4, 0, 4, 2], &[4]));
            assert_eq!(
                rows.to_vec::<i32>().unwrap(),
                [16, 17, 18, 19, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11],
                "{mode:?}"
            );
            let cols = t.index_select(1, &i64s(&[3, 1], &[2]).cast(DType::I32));
            assert_eq!(
                cols.to_vec::<i32>().unwrap(),
                [3, 1, 7, 5, 11, 9, 15, 13, 19, 17],
                "{mode:?}"
            );
            let none = t.index_select(0, &i64s(&[], &[0]));
            assert_eq!(none.shape(), [0, 4]);
        });
    }
}

#[jit]
fn embed(table: &Tensor, pos: &Tensor, tokens: &Tensor) -> Tensor {
    table.index_select(0, tokens) + pos
}

#[test]
fn an_embedding_lookup_fuses_with_its_consumer() {
    let (v, t, d) = (50, 7, 33);
    let table = Tensor::randn(&[v, d], 1);
    let pos = Tensor::randn(&[t, d], 2);
    let toks: Vec<i64> = (0..t as i64).map(|k| (k * 17 + 3) % v as i64).collect();
    let tokens = i64s(&toks, &[t]);
    let (tv, pv) = (table.to_vec::<f32>().unwrap(), pos.to_vec::<f32>().unwrap());
    for mode in MODES {
        let got = with_mode(mode, || embed(&table, &pos, &tokens)).unwrap();
        let got = got.to_vec::<f32>().unwrap();
        for (r, &tok) in toks.iter().enumerate() {
            for c in 0..d {
                let want = tv[tok as usize * d + c] + pv[r * d + c];
                assert_eq!(got[r * d + c], want, "{mode:?} row {r} col {c}");
            }
        }
    }
    // One kernel: the index is read in place through a broadcast, and the
    // table row is read at the token's address.
    let h = embed::jit().handlers();
    assert_eq!(h[0].program.host().kernels().kernels.len(), 1);
}

#[jit]
fn pick(x: &Tensor, i: &Tensor) -> Tensor {
    x.index_select(0, i) * 2.0
}

#[test]
fn an_index_out_of_range_is_an_error_on_every_backend() {
    let x = x34();
    for bad in [3i64, -1, i64::MAX] {
        let i = i64s(&[0, bad], &[2]);
        // Eager: the op and this line.
        let line = line!() + 1;
        let e = x.index_select(0, &i);
        let msg = e.to_vec::<f32>().unwrap_err().to_string();
        assert!(msg.contains("out of range"), "{msg}");
        assert!(msg.contains(&format!("gather.rs:{line}:")), "{msg}");
        for mode in MODES {
            let line = line!() + 1;
            let err = with_mode(mode, || pick(&x, &i)).unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.contains("out of range") && msg.contains("length 3"),
                "{mode:?} {bad}: {msg}"
            );
            // The data's fault on every backend: E1, as on the host.
            assert_eq!(err.code(), 1, "{mode:?}: {msg}");
            // The jit function and the line that called it.
            assert!(msg.contains("`pick`"), "{mode:?}: {msg}");
            assert!(
                msg.contains(&format!("gather.rs:{line}:")),
                "{mode:?}: {msg}"
            );
        }
        // The host names the index's kind of mistake, a bad argument.
        let host = with_mode(RunMode::Host, || pick(&x, &i)).unwrap_err();
        assert_eq!(host.kind(), ErrorKind::BadArgument, "{host}");
    }
    // Good indices after bad ones: nothing was left behind.
    let ok = pick(&x, &i64s(&[2, 0], &[2])).unwrap();
    assert_eq!(ok.to_vec::<f32>().unwrap()[..2], [24.0, 27.0]);
}

#[test]
fn bad_gather_arguments_name_the_op_and_line() {
    let x = x34();
    let cases: Vec<(u32, Tensor, ErrorKind, &str)> = vec![
        (line!(), x.gather(0, &x), ErrorKind::DType, "i32 or i64"),
        (
            line!(),
            x.gather(0, &i64s(&[0, 1], &[2])),
            ErrorKind::Shape,
            "rank",
        ),
        (
            line!(),
            x.index_select(0, &i64s(&[0, 1], &[1, 2])),
            ErrorKind::Shape,
            "1-D",
        ),
        (
            line!(),
            x.gather(2, &x.cast(DType::I64)),
            ErrorKind::BadArgument,
            "axis",
        ),
    ];
    tilejit_tests::check_error_cases("gather.rs", cases);
}

#[jit]
fn long_gather(x: &Tensor, i: &Tensor) -> Tensor {
    x.gather(1, i).exp().sum(-1, true)
}

#[test]
fn long_rows_gather_like_the_reference() {
    let (r, n, m) = (3, 20001, 5000);
    let x = Tensor::randn(&[r, n], 4);
    let idx: Vec<i64> = (0..(r * m) as i64).map(|k| (k * 7919) % n as i64).collect();
    let i = i64s(&idx, &[r, m]);
    let want = with_mode(RunMode::Reference, || long_gather(&x, &i)).unwrap();
    let want = want.to_vec::<f32>().unwrap();
    for mode in MODES {
        let got = with_mode(mode, || long_gather(&x, &i)).unwrap();
        for (g, w) in got.to_vec::<f32>().unwrap().iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4 * w.abs(), "{mode:?}: {g} vs {w}");
        }
    }
}

#[jit]
fn pick_next(x: &Tensor, t: &Tensor) -> Tensor {
    x.gather(1, &(t + 1i64).reshape(&[3, 1]))
}

#[test]
fn a_computed_index_through_a_reshape_gathers() {
    // Issue 35: the index `t + 1` reshaped to a column failed to fuse ("%4
    // asked to be materialised twice"). numpy: np.take_along_axis(
    // np.arange(15.).reshape(3, 5), (t + 1).reshape(3, 1), 1).
    let x = Tensor::arange(15, DType::F32).reshape(&[3, 5]);
    let t = i64s(&[0, 1, 3], &[3]);
    let eager = x.gather(1, &(&t + 1i64).reshape(&[3, 1]));
    assert_eq!(eager.to_vec::<f32>().unwrap(), [1.0, 7.0, 14.0]);
    for mode in MODES {
        let got = with_mode(mode, || pick_next(&x, &t)).unwrap();
        assert_eq!(got.shape(), [3, 1], "{mode:?}");
        assert_eq!(got.to_vec::<f32>().unwrap(), [1.0, 7.0, 14.0], "{mode:?}");
    }
}

type Family = fn(&Tensor, &Tensor) -> Tensor;

/// Computed indices reaching a gather through each kind of view, or
/// through a cast, and used more than once. `x` is `arange(15).reshape(3,
/// 5)` in f32, `t` is `[0, 1, 3]` in i64.
fn computed_index_family() -> Vec<(&'static str, Family, Vec<f32>)> {
    vec![
        // (t + 1)[:, None] picks [1, 2, 4] from rows 0..3.
        (
            "reshape",
            |x, t| x.gather(1, &(t + 1i64).reshape(&[3, 1])),
            vec![1.0, 7.0, 14.0],
        ),
        // The same column broadcast along 2 columns.
        (
            "reshape_broadcast",
            |x, t| x.gather(1, &(t + 1i64).reshape(&[3, 1]).broadcast_to(&[3, 2])),
            vec![1.0, 1.0, 7.0, 7.0, 14.0, 14.0],
        ),
        // An i32 index computed by a cast: [0, 2, 6] % 5 = [0, 2, 1].
        (
            "cast",
            |x, t| x.gather(1, &((t * 2i64) % 5i64).cast(DType::I32).reshape(&[3, 1])),
            vec![0.0, 7.0, 11.0],
        ),
        // A row of indices transposed into a column: 4 - t = [4, 3, 1].
        (
            "transpose",
            |x, t| x.gather(1, &(t.rsub(4i64)).reshape(&[1, 3]).transpose(0, 1)),
            vec![4.0, 8.0, 11.0],
        ),
        // A window of a computed index: (t + 1)[1:] = [2, 4] for rows 0, 1.
        (
            "slice",
            |x, t| {
                let i = (t + 1i64).slice(0, 1, 3).reshape(&[2, 1]);
                x.slice(0, 0, 2).gather(1, &i)
            },
            vec![2.0, 9.0],
        ),
        // One computed index read by two gathers and by arithmetic:
        // [1, 7, 14] + 2 * [1, 7, 14] + [1, 2, 4].
        (
            "used_twice",
            |x, t| {
                let i = (t + 1i64).reshape(&[3, 1]);
                x.gather(1, &i) + x.gather(1, &i) * 2.0 + i.cast(DType::F32)
            },
            vec![4.0, 23.0, 46.0],
        ),
        // Computed index_selects: rows (3 - t)[1:] = [2, 0], then columns
        // (2t + 1)[:2] = [1, 3].
        (
            "index_select",
            |x, t| {
                let rows = x.index_select(0, &t.rsub(3i64).slice(0, 1, 3));
                rows.index_select(1, &(t * 2i64 + 1i64).slice(0, 0, 2))
            },
            vec![11.0, 13.0, 1.0, 3.0],
        ),
        // ONNX NegativeLogLikelihoodLoss with ignore_index = 3: the
        // ignored target is replaced by 0 before the gather, its row
        // weighted 0; mean over the rest: -(x[0, 0] + x[1, 1]) / 2 = -3.
        (
            "nll_ignore_index",
            |x, t| {
                let ignored = t.eq(&Tensor::full(&[3], 3.0, DType::I64));
                let safe = Tensor::where_cond(&ignored, &Tensor::zeros(&[3], DType::I64), t);
                let picked = x.gather(1, &safe.reshape(&[3, 1])).reshape(&[3]);
                let w = Tensor::where_cond(
                    &ignored,
                    &Tensor::zeros(&[3], DType::F32),
                    &Tensor::ones(&[3], DType::F32),
                );
                -(picked * &w).sum_all() / w.sum_all()
            },
            vec![-3.0],
        ),
    ]
}

#[test]
fn computed_indices_through_views_and_casts_gather_in_every_mode() {
    let x = Tensor::arange(15, DType::F32).reshape(&[3, 5]);
    let t = i64s(&[0, 1, 3], &[3]);
    for (name, op, want) in computed_index_family() {
        let f = jit_fn!(move |x: &Tensor, t: &Tensor| op(x, t));
        let reference = f.with_mode(RunMode::Reference).call((&x, &t)).unwrap();
        assert_eq!(
            reference.to_vec::<f32>().unwrap(),
            want,
            "{name}: reference"
        );
        assert_eq!(op(&x, &t).to_vec::<f32>().unwrap(), want, "{name}: eager");
        for mode in MODES {
            let got = f.with_mode(mode).call((&x, &t));
            let got = got.unwrap_or_else(|e| panic!("{name} {mode:?}: {e}"));
            assert_eq!(got.shape(), reference.shape(), "{name} {mode:?}");
            assert_eq!(got.to_vec::<f32>().unwrap(), want, "{name} {mode:?}");
        }
    }
}

#[test]
fn an_eager_index_out_of_range_names_the_op_called() {
    // Issue 35: an out-of-range `index_select` said "gather: 3 is out of
    // range", the graph op it is made of.
    let x = x34();
    let bad = i64s(&[0, 3], &[2]);
    for mode in RunMode::ALL {
        with_mode(mode, || {
            let msg = x
                .index_select(0, &bad)
                .to_vec::<f32>()
                .unwrap_err()
                .to_string();
            assert!(
                msg.contains("`index_select`")
                    && msg.contains("index_select: ")
                    && msg.contains("out of range for an axis of length 3"),
                "{mode:?}: {msg}"
            );
            assert!(!msg.contains("gather:"), "{mode:?}: {msg}");
            let col = i64s(&[4, 0, 1], &[3, 1]);
            // Columns have length 4.
            let msg = x.gather(1, &col).to_vec::<f32>().unwrap_err().to_string();
            assert!(
                msg.contains("`gather`") && msg.contains("gather: ") && msg.contains("length 4"),
                "{mode:?}: {msg}"
            );
        });
    }
}

/// ONNX SoftmaxCrossEntropyLoss with `ignore_index = -1` over `[N, C, D]`
/// scores, as the ONNX reference writes it: the gather's index is the
/// target with ignored entries replaced, reshaped to `[N, 1, D]`, and
/// its data a log-softmax (issue 35: these failed to fuse).
#[jit]
fn cross_entropy(x: &Tensor, t: &Tensor) -> Tensor {
    let log_p = x.softmax(1).log();
    let ignored = t.eq(&Tensor::full(&[2, 2], -1.0, DType::I64));
    let safe = Tensor::where_cond(&ignored, &Tensor::zeros(&[2, 2], DType::I64), t);
    let picked = log_p.gather(1, &safe.reshape(&[2, 1, 2])).reshape(&[2, 2]);
    let w = Tensor::where_cond(
        &ignored,
        &Tensor::zeros(&[2, 2], DType::F32),
        &Tensor::ones(&[2, 2], DType::F32),
    );
    -(picked * &w).sum_all() / w.sum_all()
}

#[test]
fn cross_entropy_with_an_ignored_target_in_every_mode() {
    #[rustfmt::skip]
    let x = Tensor::from_vec(
        vec![0.5f32, -1.0, 2.0, 0.25, -0.75, 1.5, 1.0, 0.0, -2.0, 3.0, 0.5, -0.5],
        &[2, 3, 2],
    )
    .unwrap();
    let t = i64s(&[2, -1, 0, 1], &[2, 2]);
    // Python: the mean of -log_softmax(x[n, :, d])[t[n, d]] over the three
    // targets that are not -1.
    let want = 1.1946341857066773;
    let reference = with_mode(RunMode::Reference, || cross_entropy(&x, &t)).unwrap();
    let reference = reference.item::<f32>().unwrap() as f64;
    assert!((reference - want).abs() < 1e-6, "reference {reference}");
    for mode in MODES {
        let got = with_mode(mode, || cross_entropy(&x, &t));
        let got = got
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"))
            .item::<f32>()
            .unwrap();
        assert!((got as f64 - want).abs() < 1e-6, "{mode:?}: {got}");
    }
}

#[jit]
fn select_rows(x: &Tensor, i: &Tensor) -> Tensor {
    x.index_select(0, i).exp()
}

#[jit]
fn select_and_gather(x: &Tensor, i: &Tensor, j: &Tensor) -> Tensor {
    x.index_select(0, i).sum_all() + x.gather(1, j).sum_all()
}

/// Inside a jit function too, an out-of-range index names the op the body
/// called when it is the function's only gathering op; with both, the
/// graph op's name stays (either could have failed).
#[test]
fn a_jit_index_out_of_range_names_the_op_called() {
    let x = x34();
    let bad = i64s(&[0, 3], &[2]);
    for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
        let msg = with_mode(mode, || select_rows(&x, &bad))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("index_select: ") && msg.contains("`select_rows`"),
            "{mode:?}: {msg}"
        );
        assert!(!msg.contains("gather:"), "{mode:?}: {msg}");
        let j = i64s(&[0, 1, 2], &[3, 1]);
        let msg = with_mode(mode, || select_and_gather(&x, &bad, &j))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("out of range"), "{mode:?}: {msg}");
    }
}
