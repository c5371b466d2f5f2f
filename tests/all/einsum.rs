//! `Tensor::einsum` on Host, Sim and Verify, eager and under `#[jit]`,
//! against a direct Python loop over every index (`tests/all/einsum.rs`'s
//! values were printed by it; no numpy needed):
//!
//! ```python
//! def einsum(eq, *ops):  # ops: (shape, flat row-major data)
//!     lhs, rhs = eq.split('->') if '->' in eq else (eq, None)
//!     # (rhs defaults to the subscripts seen once, sorted)
//!     # for every assignment of every subscript: out[rhs] += prod(op[term])
//! ```
//!
//! The diagonal and `...` cases' values are numpy's `einsum`'s (the same
//! operands; numpy broadcasts `...` as `Tensor::einsum` must).
//!
//! Operands are `arange(n) + off` reshaped, whole numbers, so every sum is
//! exact in f32 and i32.

use tilejit::prelude::*;
use tilejit::ErrorKind;

const MODES: [RunMode; 3] = [RunMode::Host, RunMode::Sim, RunMode::Verify];

fn ar(shape: &[usize], off: f64, d: DType) -> Tensor {
    let n = shape.iter().product();
    (Tensor::arange(n, DType::F64) + off).cast(d).reshape(shape)
}

#[jit]
fn j_attn(q: &Tensor, k: &Tensor) -> Tensor {
    Tensor::einsum("bhqd,bhkd->bhqk", &[q, k])
}

#[test]
fn einsum_matches_a_python_loop_in_every_mode() {
    for d in [DType::F32, DType::I32] {
        let a = ar(&[2, 3], -2.0, d);
        let b = ar(&[3, 2], 1.0, d);
        let c = ar(&[2, 4], 0.0, d);
        let ba = ar(&[2, 2, 3], -5.0, d);
        let bb = ar(&[2, 3, 2], 0.0, d);
        let q = ar(&[1, 2, 3, 2], -3.0, d);
        let k = ar(&[1, 2, 4, 2], 0.0, d);
        let v = ar(&[3], 1.0, d);
        let w = ar(&[4], -1.0, d);
        let sq = ar(&[3, 3], -4.0, d);
        let b3 = ar(&[2, 3, 3], -9.0, d);
        let x = ar(&[2, 1, 2, 3], -6.0, d);
        let y = ar(&[3, 3, 2], -8.0, d);
        let t = ar(&[3, 2, 3], -9.0, d);
        let v2 = ar(&[2, 3], -2.0, d);
        let col = ar(&[3, 1], 1.0, d);
        type Case<'a> = (&'a str, Vec<&'a Tensor>, Vec<usize>, Vec<f64>);
        let cases: Vec<Case> = vec![
            (
                "ij,jk->ik",
                vec![&a, &b],
                vec![2, 2],
                vec![-5., -8., 22., 28.],
            ),
            (
                "bij,bjk->bik",
                vec![&ba, &bb],
                vec![2, 2, 2],
                vec![-20., -32., -2., -5., 52., 58., 124., 139.],
            ),
            (
                "ij->ji",
                vec![&a],
                vec![3, 2],
                vec![-2., 1., -1., 2., 0., 3.],
            ),
            ("ij->", vec![&a], vec![], vec![3.]),
            ("ij->j", vec![&a], vec![3], vec![-1., 1., 3.]),
            ("i,i->", vec![&v, &v], vec![], vec![14.]),
            (
                "i,j->ij",
                vec![&v, &w],
                vec![3, 4],
                vec![-1., 0., 1., 2., -2., 0., 2., 4., -3., 0., 3., 6.],
            ),
            ("ij,jk", vec![&a, &b], vec![2, 2], vec![-5., -8., 22., 28.]),
            (
                "ij, jk ,kl->il",
                vec![&a, &b, &c],
                vec![2, 4],
                vec![-32., -45., -58., -71., 112., 162., 212., 262.],
            ),
            (
                "ij,kj->ik",
                vec![&a, &a],
                vec![2, 2],
                vec![5., -4., -4., 14.],
            ),
            ("ij,ij->i", vec![&a, &a], vec![2], vec![5., 14.]),
            ("ii->i", vec![&sq], vec![3], vec![-4., 0., 4.]),
            ("ii", vec![&sq], vec![], vec![0.]),
            (
                "...ii ->...i",
                vec![&b3],
                vec![2, 3],
                vec![-9., -5., -1., 0., 4., 8.],
            ),
            (
                "...ij,...jk->...ik",
                vec![&x, &y],
                vec![2, 3, 2, 2],
                vec![
                    94., 79., 40., 34., 4., -11., 4., -2., -86., -101., -32., -38., -14., -11.,
                    -68., -56., 4., 7., 4., 16., 22., 25., 76., 88.,
                ],
            ),
            ("i...i", vec![&t], vec![2], vec![-6., 3.]),
            ("bii,bi->b", vec![&b3, &v2], vec![2], vec![23., 32.]),
            (
                "...,...",
                vec![&col, &w],
                vec![3, 4],
                vec![-1., 0., 1., 2., -2., 0., 2., 4., -3., 0., 3., 6.],
            ),
        ];
        let attn = [
            -2., -12., -22., -32., 0., -2., -4., -6., 2., 8., 14., 20., 60., 74., 88., 102., 94.,
            116., 138., 160., 128., 158., 188., 218.,
        ];
        for mode in MODES {
            for (eq, ops, shape, want) in &cases {
                let got = with_mode(mode, || Tensor::einsum(eq, ops));
                assert_eq!(got.shape(), shape, "{eq} {d} {mode:?}");
                assert_eq!(got.dtype(), d);
                let vals = got.cast(DType::F64).to_vec::<f64>().unwrap();
                assert_eq!(&vals, want, "{eq} {d} {mode:?}");
            }
            let got = with_mode(mode, || j_attn(&q, &k)).unwrap();
            assert_eq!(got.shape(), [1, 2, 3, 4]);
            assert_eq!(
                got.cast(DType::F64).to_vec::<f64>().unwrap(),
                attn,
                "{d} {mode:?}"
            );
        }
    }
}

#[test]
fn bad_einsum_equations_name_the_position() {
    let a = ar(&[2, 3], 0.0, DType::F32);
    let b = ar(&[3, 2], 0.0, DType::F32);
    let i = ar(&[3, 2], 0.0, DType::I32);
    let cases: Vec<(u32, Tensor, ErrorKind, &str)> = vec![
        (
            line!(),
            Tensor::einsum("ij,j1->i", &[&a, &b]),
            ErrorKind::BadArgument,
            "unexpected `1` at position 4",
        ),
        (
            line!(),
            Tensor::einsum("...j,jk->k", &[&a, &b]),
            ErrorKind::BadArgument,
            "the operands have `...` dims but the output has no `...`",
        ),
        (
            line!(),
            Tensor::einsum("i..j->ij", &[&a]),
            ErrorKind::BadArgument,
            "a lone `.` at position 1",
        ),
        (
            line!(),
            Tensor::einsum("...i...->i", &[&a]),
            ErrorKind::BadArgument,
            "a second `...` at position 4",
        ),
        (
            line!(),
            Tensor::einsum("...i,...i->...", &[&a, &b]),
            ErrorKind::BadArgument,
            "dim 0 under `...` is 2 in one operand and 3 in operand 1",
        ),
        (
            line!(),
            Tensor::einsum("ij->ij", &[&a, &b]),
            ErrorKind::BadArgument,
            "1 operands, 2 tensors",
        ),
        (
            line!(),
            Tensor::einsum("ij,jkl->ik", &[&a, &b]),
            ErrorKind::BadArgument,
            "operand 1 (at position 3) has 3 subscripts for a rank-2 tensor",
        ),
        (
            line!(),
            Tensor::einsum("ij,kj->ik", &[&a, &b]),
            ErrorKind::BadArgument,
            "subscript `j` is 3 in one operand and 2 in operand 1",
        ),
        (
            line!(),
            Tensor::einsum("ij,jk->iz", &[&a, &b]),
            ErrorKind::BadArgument,
            "output subscript `z` at position 8 is in no operand",
        ),
        (
            line!(),
            Tensor::einsum("ii->i", &[&a]),
            ErrorKind::BadArgument,
            "subscript `i` is 2 in one operand and 3 in operand 0",
        ),
        (
            line!(),
            Tensor::einsum("ij,jk->ik", &[&a, &i]),
            ErrorKind::BadArgument,
            "dtypes f32 and i32",
        ),
    ];
    tilejit_tests::check_error_cases("einsum.rs", cases);
}
