//! `slice`, `split`, `cat`, `pad`, `tril`, `triu`: numpy-computed values on
//! every backend, eager and traced; slices read in place and concats
//! written in place; bad input named with the caller's line.

use tilejit::prelude::*;
use tilejit::{jit, ErrorKind};

const MODES: [RunMode; 3] = [RunMode::Host, RunMode::Sim, RunMode::Verify];

/// `arange(12).reshape(3, 4)` as f32.
fn x34() -> Tensor {
    Tensor::arange(12, DType::F32).reshape(&[3, 4])
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap_or_else(|e| panic!("{e}"))
}

/// Equal within `rel` of each element's size (sums round differently per
/// backend); names only the first difference.
#[track_caller]
fn assert_near(got: &Tensor, want: &Tensor, rel: f32, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    let (g, w) = (f32s(got), f32s(want));
    if let Some(i) = (0..g.len()).find(|&i| (g[i] - w[i]).abs() > rel * w[i].abs().max(1.0)) {
        panic!(
            "{what}: element {i} is {} where the reference has {}",
            g[i], w[i]
        );
    }
}

#[jit]
fn windows(x: &Tensor) -> (Tensor, Tensor, Tensor) {
    (
        x.slice(1, 1, 3),
        x.slice(0, -2, 100).slice(1, -100, 2),
        x.slice(1, 3, 1),
    )
}

#[test]
fn slice_follows_python_rules_on_every_backend() {
    // numpy: x[:, 1:3], x[-2:, -100:2], x[:, 3:1]
    for mode in MODES {
        with_mode(mode, || {
            let x = x34();
            let (a, b, c) = windows(&x).unwrap();
            assert_eq!(f32s(&a), [1.0, 2.0, 5.0, 6.0, 9.0, 10.0], "{mode:?}");
            assert_eq!(f32s(&b), [4.0, 5.0, 8.0, 9.0], "{mode:?}");
            assert_eq!((c.shape(), f32s(&c).len()), (&[3usize, 0][..], 0));
            // Eager, the same values.
            assert_eq!(f32s(&x.slice(-1, 1, 3)), [1.0, 2.0, 5.0, 6.0, 9.0, 10.0]);
        });
    }
}

#[jit]
fn stepped(x: &Tensor) -> (Tensor, Tensor, Tensor) {
    (
        x.slice_step(1, 3, 0, -2),
        x.slice_step(0, isize::MAX, isize::MIN, -2),
        x.slice_step(-1, 0, isize::MAX, 3) * 2.0,
    )
}

#[test]
fn slice_step_follows_onnx_slice_on_every_backend() {
    // Python's `list(range(7))[start:end:step]`, whose clamping is ONNX
    // Slice's (INT_MAX / INT_MIN ends run to either end).
    const M: isize = isize::MAX;
    type Case = ((isize, isize, isize), &'static [i32]);
    let cases: [Case; 12] = [
        ((1, 6, 2), &[1, 3, 5]),
        ((-1, isize::MIN, -3), &[6, 3, 0]),
        ((5, 1, -1), &[5, 4, 3, 2]),
        ((-1, isize::MIN, -1), &[6, 5, 4, 3, 2, 1, 0]),
        ((10, -10, -2), &[6, 4, 2, 0]),
        ((0, M, 3), &[0, 3, 6]),
        ((3, 3, 2), &[]),
        ((-100, 100, 4), &[0, 4]),
        ((2, 0, 1), &[]),
        ((6, -8, -1), &[6, 5, 4, 3, 2, 1, 0]),
        ((0, 7, 1), &[0, 1, 2, 3, 4, 5, 6]),
        ((-2, isize::MIN, -2), &[5, 3, 1]),
    ];
    let v = Tensor::arange(7, DType::I32);
    for mode in MODES {
        for ((s, e, st), want) in cases {
            let got = with_mode(mode, || v.slice_step(0, s, e, st));
            assert_eq!(
                got.to_vec::<i32>().unwrap(),
                want,
                "[{s}:{e}:{st}] {mode:?}"
            );
        }
        // numpy on arange(12).reshape(3, 4): x[:, 3:0:-2], x[::-2], x[:, ::3] * 2
        let (a, b, c) = with_mode(mode, || stepped(&x34())).unwrap();
        assert_eq!(a.shape(), [3, 2]);
        assert_eq!(f32s(&a), [3.0, 1.0, 7.0, 5.0, 11.0, 9.0], "{mode:?}");
        assert_eq!(
            f32s(&b),
            [8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0],
            "{mode:?}"
        );
        assert_eq!(f32s(&c), [0.0, 6.0, 8.0, 14.0, 16.0, 22.0], "{mode:?}");
    }
}

#[jit]
fn long_steps(x: &Tensor) -> (Tensor, Tensor) {
    (
        x.slice_step(0, -1, isize::MIN, -3),
        x.slice_step(0, 5, isize::MAX, 2),
    )
}

#[test]
fn long_stepped_slices_build_their_index_in_the_graph() {
    // Past 4096 indices the line is row starts plus offsets, scaled and
    // moved: a declared dim of 2^30 made an 8 GB constant while tracing.
    let n = 20_000i32;
    let x = Tensor::arange(n as usize, DType::I32);
    let down: Vec<i32> = (0..n).rev().step_by(3).collect();
    let up: Vec<i32> = (5..n).step_by(2).collect();
    for mode in MODES {
        let (a, b) = with_mode(mode, || long_steps(&x)).unwrap();
        assert_eq!(a.to_vec::<i32>().unwrap(), down, "{mode:?}");
        assert_eq!(b.to_vec::<i32>().unwrap(), up, "{mode:?}");
        let eager = with_mode(mode, || x.slice_step(0, -1, isize::MIN, -3));
        assert_eq!(eager.to_vec::<i32>().unwrap(), down, "{mode:?} eager");
    }
    let h = long_steps::jit().handlers();
    let consts = &h[0].program.host().kernels().buffers;
    let largest = consts
        .iter()
        .filter(|b| matches!(b.kind, tilejit::internals::ir::kernel::BufKind::Constant(_)))
        .map(|b| b.ty.shape.numel())
        .max();
    assert!(largest.is_some_and(|n| n <= 256), "{largest:?}");
}

#[jit]
fn qk(x: &Tensor) -> Tensor {
    let d = x.shape()[1] / 2;
    let (q, k) = (
        x.slice(1, 0, d as isize),
        x.slice(1, d as isize, 2 * d as isize),
    );
    (&q * &k).sum(-1, false)
}

#[test]
fn fused_slices_are_views_not_copies() {
    let x = Tensor::randn(&[5, 6], 3);
    let want = with_mode(RunMode::Reference, || qk(&x)).unwrap();
    for mode in MODES {
        let got = with_mode(mode, || qk(&x)).unwrap();
        assert_near(&got, &want, 1e-6, &format!("{mode:?}"));
    }
    let h = qk::jit().handlers();
    let kernels = &h[0].program.host().kernels().kernels;
    assert_eq!(kernels.len(), 1, "one kernel reads both halves of x");
    let loads: Vec<i64> = kernels[0].loads.iter().map(|a| a.offset).collect();
    assert_eq!(loads, [0, 3], "k is x at offset 3");
}

#[jit]
fn joined(x: &Tensor) -> Tensor {
    Tensor::cat(&[&(x.slice(1, 0, 1) * 10.0), x, &x.slice(1, 3, 4)], 1)
}

#[test]
fn cat_writes_each_operand_into_one_buffer() {
    // numpy: np.concatenate([x[:, :1] * 10, x, x[:, 3:]], axis=1)
    let want = [
        0.0, 0.0, 1.0, 2.0, 3.0, 3.0, 40.0, 4.0, 5.0, 6.0, 7.0, 7.0, 80.0, 8.0, 9.0, 10.0, 11.0,
        11.0,
    ];
    for mode in MODES {
        with_mode(mode, || {
            let x = x34();
            assert_eq!(f32s(&joined(&x).unwrap()), want, "{mode:?}");
            let eager = Tensor::cat(&[&(x.slice(1, 0, 1) * 10.0), &x, &x.slice(1, 3, 4)], 1);
            assert_eq!(f32s(&eager), want, "{mode:?} eager");
        });
    }
    let h = joined::jit().handlers();
    let p = h[0].program.host().kernels();
    // The nested binary concats are one buffer written by three kernels.
    assert_eq!(p.kernels.len(), 3, "{p}");
    let stores: Vec<i64> = p
        .kernels
        .iter()
        .flat_map(|k| k.stages.iter())
        .filter_map(|s| match s {
            tilejit::internals::ir::kernel::Stage::Store { access, .. } => Some(access.offset),
            _ => None,
        })
        .collect();
    assert_eq!(stores, [0, 1, 5], "{p}");
}

/// The kernels that store into output `i`'s buffer, in order: each one's
/// name and first element written.
fn output_writers(p: &tilejit::internals::ir::kernel::KernelProgram, i: usize) -> Vec<(&str, i64)> {
    use tilejit::internals::ir::kernel::{ProgramOutput, Stage};
    let ProgramOutput::Buffer(out, _) = p.outputs[i] else {
        panic!("output {i} has no buffer: {p}")
    };
    p.kernels
        .iter()
        .flat_map(|k| k.stages.iter().map(move |s| (k, s)))
        .filter_map(|(k, s)| match s {
            Stage::Store { access, .. } if access.buf == out => {
                Some((k.name.as_str(), access.offset))
            }
            _ => None,
        })
        .collect()
}

/// Two layers of a KV cache (`[2, 2, 4, 3]`: layers, heads, positions,
/// width) updated at a runtime position, each read by attention's
/// `q k^T` and returned concatenated, as a decode step does.
#[jit]
fn cached_scores(q: &Tensor, cache: &Tensor, new: &Tensor, pos: &Tensor) -> (Tensor, Tensor) {
    let (mut scores, mut layers) = (Vec::new(), Vec::new());
    for l in 0..2 {
        let c = cache.slice(0, l, l + 1).reshape(&[2, 4, 3]);
        let k = c.slice_assign(1, pos, &(new * (l + 1) as f64));
        scores.push(q.matmul(&k.transpose(-1, -2)));
        layers.push(k.reshape(&[1, 2, 4, 3]));
    }
    let cat = |v: &[Tensor]| Tensor::cat(&v.iter().collect::<Vec<_>>(), 0);
    (cat(&scores), cat(&layers))
}

#[test]
fn a_concat_operand_read_elsewhere_is_written_in_its_window() {
    let q = Tensor::randn(&[2, 1, 3], 5);
    let cache = Tensor::randn(&[2, 2, 4, 3], 6);
    let new = Tensor::randn(&[2, 1, 3], 7);
    let pos = Tensor::from_vec(vec![2i64], &[]).unwrap();
    // By hand: the cache with position 2 of layer l replaced by
    // `new * (l + 1)`.
    let (c, n) = (f32s(&cache), f32s(&new));
    let mut want_cache = c.clone();
    for l in 0..2 {
        for h in 0..2 {
            for j in 0..3 {
                want_cache[((l * 2 + h) * 4 + 2) * 3 + j] = n[h * 3 + j] * (l + 1) as f32;
            }
        }
    }
    let (want_scores, _) =
        with_mode(RunMode::Reference, || cached_scores(&q, &cache, &new, &pos)).unwrap();
    for mode in MODES {
        let (scores, cache2) = with_mode(mode, || cached_scores(&q, &cache, &new, &pos)).unwrap();
        assert_eq!(f32s(&cache2), want_cache, "{mode:?}");
        assert_near(&scores, &want_scores, 1e-6, &format!("{mode:?}"));
    }
    // Each updated layer is written once, into its window of the
    // returned cache, where its `q k^T` reads it: no kernel copies it.
    // (The scores' concat copies: a product keeps a buffer of its own.)
    let h = cached_scores::jit().handlers();
    let p = h[0].program.host().kernels();
    let writers = output_writers(p, 1);
    let tilejit::internals::ir::kernel::ProgramOutput::Buffer(out, _) = p.outputs[1] else {
        panic!("{p}")
    };
    // Layer 0's `new * 1` simplifies away.
    assert_eq!(writers, [("select", 0), ("fused_mul_select", 24)], "{p}");
    let views: Vec<i64> = p
        .kernels
        .iter()
        .filter_map(|k| k.matmul.as_ref())
        .filter(|m| m.b == out)
        .map(|m| m.b_view.map_or(0, |v| v.offset))
        .collect();
    assert_eq!(views, [0, 24], "{p}");
}

/// Three values each read by another kind of kernel and concatenated:
/// a pool and a gather read two of them where they lie in the concat's
/// buffer; a convolution reads whole buffers, so the third keeps its own
/// and is copied.
#[jit]
fn windows_read(x: &Tensor, w: &Tensor, idx: &Tensor) -> (Tensor, Tensor, Tensor, Tensor) {
    let (a, b, c) = (x.exp(), -x, x.abs().sqrt());
    (
        a.max_pool2d(2, 2),
        b.index_select(2, idx),
        c.conv2d(w, 1, 1),
        Tensor::cat(&[&c, &a, &b], 0),
    )
}

#[test]
fn pools_gathers_and_convs_read_concat_operands_right() {
    let x = Tensor::randn(&[1, 2, 4, 4], 8);
    let w = Tensor::randn(&[3, 2, 3, 3], 9);
    let idx = Tensor::from_vec(vec![3i64, 0, 2], &[3]).unwrap();
    let want = with_mode(RunMode::Reference, || windows_read(&x, &w, &idx)).unwrap();
    for mode in MODES {
        let got = with_mode(mode, || windows_read(&x, &w, &idx)).unwrap();
        assert_near(&got.0, &want.0, 1e-6, &format!("{mode:?} pool"));
        assert_near(&got.1, &want.1, 1e-6, &format!("{mode:?} gather"));
        assert_near(&got.2, &want.2, 1e-5, &format!("{mode:?} conv"));
        assert_near(&got.3, &want.3, 1e-6, &format!("{mode:?} cat"));
    }
    let h = windows_read::jit().handlers();
    let p = h[0].program.host().kernels();
    let writers = output_writers(p, 3);
    assert_eq!(
        writers,
        [("exp", 32), ("neg", 64), ("fused_cat_sqrt", 0)],
        "{p}"
    );
}

#[test]
fn cat_and_split_round_trip_integers_and_bools() {
    for mode in MODES {
        with_mode(mode, || {
            let x = Tensor::arange(10, DType::I64).reshape(&[2, 5]);
            let parts = x.split(&[2, 0, 3], 1);
            assert_eq!(parts.len(), 3);
            assert_eq!(parts[0].to_vec::<i64>().unwrap(), [0, 1, 5, 6]);
            assert_eq!(parts[1].shape(), [2, 0]);
            assert_eq!(parts[2].to_vec::<i64>().unwrap(), [2, 3, 4, 7, 8, 9]);
            let back = Tensor::cat(&[&parts[2], &parts[1], &parts[0]], -1);
            assert_eq!(
                back.to_vec::<i64>().unwrap(),
                [2, 3, 4, 0, 1, 7, 8, 9, 5, 6]
            );
            let b = x.gt(&Tensor::full(&[], 4.0, DType::I64));
            let bb = Tensor::cat(&[&b, &b], 0);
            assert_eq!(bb.shape(), [4, 5]);
            assert_eq!(bb.cast(DType::I32).sum_all().item::<i32>().unwrap(), 10);
        });
    }
}

#[test]
fn pad_matches_numpy() {
    // numpy: np.pad(np.arange(6, dtype=np.int32).reshape(2, 3), ((1, 0), (2, 1)), constant_values=7)
    let want = [7, 7, 7, 7, 7, 7, 7, 7, 0, 1, 2, 7, 7, 7, 3, 4, 5, 7];
    for mode in MODES {
        with_mode(mode, || {
            let x = Tensor::arange(6, DType::I32).reshape(&[2, 3]);
            let p = x.pad(&[(1, 0), (2, 1)], 7.0);
            assert_eq!(p.shape(), [3, 6]);
            assert_eq!(p.to_vec::<i32>().unwrap(), want, "{mode:?}");
            let f = Tensor::ones(&[1], DType::F32).pad(&[(0, 0)], -2.5);
            assert_eq!(f32s(&f), [1.0]);
            let e = Tensor::zeros(&[0], DType::F32).pad(&[(2, 1)], -2.5);
            assert_eq!(f32s(&e), [-2.5, -2.5, -2.5]);
        });
    }
}

#[test]
fn tril_and_triu_match_numpy() {
    // numpy: np.tril(x, 1), np.triu(x, -1), np.tril(x, -5)
    let tril1 = [0.0, 1.0, 0.0, 0.0, 4.0, 5.0, 6.0, 0.0, 8.0, 9.0, 10.0, 11.0];
    let triu_1 = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 0.0, 9.0, 10.0, 11.0];
    for mode in MODES {
        with_mode(mode, || {
            let x = x34();
            assert_eq!(f32s(&x.tril(1)), tril1, "{mode:?}");
            assert_eq!(f32s(&x.triu(-1)), triu_1, "{mode:?}");
            assert_eq!(f32s(&x.tril(-5)), [0.0; 12], "{mode:?}");
            // Batched: the mask repeats over leading dims.
            let b = Tensor::cat(&[&x.reshape(&[1, 3, 4]), &x.reshape(&[1, 3, 4])], 0);
            let t = f32s(&b.tril(1));
            assert_eq!((&t[..12], &t[12..]), (&tril1[..], &tril1[..]));
        });
    }
}

#[test]
fn bad_layout_arguments_name_the_op_and_line() {
    let x = x34();
    let cases: Vec<(u32, Tensor, ErrorKind, &str)> = vec![
        (line!(), x.slice(2, 0, 1), ErrorKind::BadArgument, "`slice`"),
        (
            line!(),
            x.slice_step(1, 0, 4, 0),
            ErrorKind::Shape,
            "step 0 along dim 1",
        ),
        (
            line!(),
            x.slice_step(-3, 0, 4, 2),
            ErrorKind::BadArgument,
            "`slice_step`",
        ),
        (
            line!(),
            x.split(&[1, 1], 0).remove(0),
            ErrorKind::Shape,
            "do not add up",
        ),
        (
            line!(),
            Tensor::cat(&[&x, &Tensor::ones(&[2, 3], DType::F32)], 0),
            ErrorKind::Shape,
            "differs in dim 1",
        ),
        (
            line!(),
            Tensor::cat(&[&x, &x.cast(DType::I32)], 0),
            ErrorKind::DType,
            "mixed dtypes",
        ),
        (
            line!(),
            Tensor::cat(&[], 0),
            ErrorKind::BadArgument,
            "no tensors",
        ),
        (
            line!(),
            Tensor::cat(&[&x, &x.reshape(&[12])], 0),
            ErrorKind::Shape,
            "rank",
        ),
        (line!(), x.pad(&[(1, 1)], 0.0), ErrorKind::Shape, "pairs"),
        (
            line!(),
            Tensor::arange(3, DType::I32).pad(&[(1, 1)], 0.5),
            ErrorKind::DType,
            "not exactly representable",
        ),
        (
            line!(),
            Tensor::arange(3, DType::F32).tril(0),
            ErrorKind::Shape,
            "`tril`",
        ),
    ];
    tilejit_tests::check_error_cases("layout_ops.rs", cases);
}

#[jit]
fn long_rows(x: &Tensor) -> Tensor {
    let n = x.shape()[1] as isize;
    let halves = Tensor::cat(&[&x.slice(1, n / 2, n), &x.slice(1, 0, n / 2)], 1);
    (halves.exp() + x).pad(&[(1, 1), (0, 3)], 0.0).triu(-2)
}

#[test]
fn large_windows_agree_with_the_reference() {
    let x = Tensor::randn(&[3, 20001], 9);
    let want = with_mode(RunMode::Reference, || long_rows(&x)).unwrap();
    for mode in MODES {
        let got = with_mode(mode, || long_rows(&x)).unwrap();
        assert_eq!(got.shape(), [5, 20004]);
        assert_near(&got, &want, 1e-6, &format!("{mode:?}"));
    }
}
