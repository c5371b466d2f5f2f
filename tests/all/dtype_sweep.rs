//! `where_cond`, the comparisons and `cast` on every dtype pair, on Host,
//! Sim and Verify, eager and under `#[jit]`, against hand-known values:
//! small integers 0..=5 (and their negations where signed) are exact in
//! every dtype, so each expected value is the same arithmetic on them.

use tilejit::prelude::*;

const MODES: [RunMode; 3] = [RunMode::Host, RunMode::Sim, RunMode::Verify];

#[jit]
fn j_where(c: &Tensor, a: &Tensor, b: &Tensor) -> Tensor {
    Tensor::where_cond(c, a, b)
}

#[jit]
fn j_cmp(a: &Tensor, b: &Tensor) -> (Tensor, Tensor, Tensor, Tensor, Tensor) {
    (a.lt(b), a.gt(b), a.le(b), a.ge(b), a.eq(b))
}

/// `v` (whole numbers in 0..=5) as a tensor of `d`, through f64 and a cast.
fn of(v: &[f64], d: DType) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap().cast(d)
}

fn as_f64(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64)
        .to_vec::<f64>()
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn where_cond_takes_every_dtype_in_every_mode() {
    let c = Tensor::from_vec(vec![true, false, true, false, false], &[5]).unwrap();
    let (a, b) = ([1.0, 2.0, 3.0, 4.0, 5.0], [0.0, 5.0, 4.0, 0.0, 1.0]);
    for d in DType::ALL {
        let want: Vec<f64> = if d == DType::Bool {
            vec![1.0, 1.0, 1.0, 0.0, 1.0]
        } else {
            vec![1.0, 5.0, 3.0, 0.0, 1.0]
        };
        for mode in MODES {
            let (ta, tb) = (of(&a, d), of(&b, d));
            let e = with_mode(mode, || Tensor::where_cond(&c, &ta, &tb));
            assert_eq!(e.dtype(), d);
            assert_eq!(as_f64(&e), want, "where {d} eager {mode:?}");
            let j = with_mode(mode, || j_where(&c, &ta, &tb))
                .unwrap_or_else(|e| panic!("where {d} jit {mode:?}: {e}"));
            assert_eq!(as_f64(&j), want, "where {d} jit {mode:?}");
        }
    }
}

#[test]
fn comparisons_take_every_dtype_in_every_mode() {
    let (a, b) = ([1.0, 2.0, 3.0, 0.0, 5.0], [0.0, 2.0, 4.0, 0.0, 1.0]);
    for d in DType::ALL {
        let (a, b) = if d == DType::Bool {
            ([1.0, 1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0, 1.0])
        } else {
            (a, b)
        };
        let want = |f: fn(f64, f64) -> bool| -> Vec<bool> {
            a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect()
        };
        let wants = [
            want(|x, y| x < y),
            want(|x, y| x > y),
            want(|x, y| x <= y),
            want(|x, y| x >= y),
            want(|x, y| x == y),
        ];
        for mode in MODES {
            let (ta, tb) = (of(&a, d), of(&b, d));
            let e = with_mode(mode, || {
                [ta.lt(&tb), ta.gt(&tb), ta.le(&tb), ta.ge(&tb), ta.eq(&tb)]
            });
            let j = with_mode(mode, || j_cmp(&ta, &tb))
                .unwrap_or_else(|e| panic!("compare {d} jit {mode:?}: {e}"));
            let j = [j.0, j.1, j.2, j.3, j.4];
            for (i, w) in wants.iter().enumerate() {
                let got = e[i]
                    .to_vec::<bool>()
                    .unwrap_or_else(|e| panic!("{d} {mode:?}: {e}"));
                assert_eq!(&got, w, "compare {i} {d} eager {mode:?}");
                let got = j[i]
                    .to_vec::<bool>()
                    .unwrap_or_else(|e| panic!("{d} {mode:?}: {e}"));
                assert_eq!(&got, w, "compare {i} {d} jit {mode:?}");
            }
        }
    }
}

#[test]
fn casts_between_every_dtype_pair_in_every_mode() {
    let v = [0.0, 1.0, 2.0, 5.0, 3.0];
    for from in DType::ALL {
        let src: Vec<f64> = if from == DType::Bool {
            vec![0.0, 1.0, 1.0, 0.0, 1.0]
        } else {
            v.to_vec()
        };
        for to in DType::ALL {
            let want: Vec<f64> = if to == DType::Bool {
                src.iter().map(|&x| (x != 0.0) as i32 as f64).collect()
            } else {
                src.clone()
            };
            for mode in MODES {
                let t = of(&src, from);
                let got = with_mode(mode, || t.cast(to));
                assert_eq!(got.dtype(), to);
                assert_eq!(as_f64(&got), want, "cast {from} -> {to} {mode:?}");
            }
        }
    }
}
