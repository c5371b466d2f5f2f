//! `cumsum`: numpy-computed values along each axis in several dtypes, on
//! every backend, eager and traced; long rows against an f64 running sum
//! computed here; bad input named with the caller's line.

use tilejit::prelude::*;
use tilejit::{jit, ErrorKind};

const MODES: [RunMode; 3] = [RunMode::Host, RunMode::Sim, RunMode::Verify];

#[test]
fn cumsum_matches_numpy_along_each_axis() {
    // numpy: np.cumsum(np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5, axis=1)
    let want = [
        -7.5, -6.5, -5.5, -4.5, -11.0, -9.0, -7.0, -5.0, -10.5, -7.5, -4.5, -1.5, 4.5, 5.5, 6.5,
        7.5, 13.0, 15.0, 17.0, 19.0, 25.5, 28.5, 31.5, 34.5,
    ];
    for mode in MODES {
        with_mode(mode, || {
            let x = Tensor::arange(24, DType::F32).reshape(&[2, 3, 4]) - 7.5;
            assert_eq!(x.cumsum(1).to_vec::<f32>().unwrap(), want, "{mode:?}");
            // Other axes and dtypes against the same running sums.
            for dt in [DType::F64, DType::I32, DType::I64] {
                let xi = (Tensor::arange(24, DType::F32).reshape(&[2, 3, 4]) - 7.0).cast(dt);
                for axis in [0isize, 2, -1] {
                    let got = xi.cumsum(axis).cast(DType::F64).to_vec::<f64>().unwrap();
                    let a = xi.shape().len() - 1 - (2 - axis.rem_euclid(3) as usize);
                    let v = xi.cast(DType::F64).to_vec::<f64>().unwrap();
                    let (shape, mut want) = ([2usize, 3, 4], v.clone());
                    let stride: usize = shape[a + 1..].iter().product();
                    for i in 0..24 {
                        if !(i / stride).is_multiple_of(shape[a]) {
                            want[i] = want[i - stride] + v[i];
                        }
                    }
                    assert_eq!(got, want, "{mode:?} {dt:?} axis {axis}");
                }
            }
            // numpy: np.cumsum(np.array([2**31 - 1, 1, 5], np.int32), dtype=np.int32)
            let w = Tensor::from_vec(vec![i32::MAX, 1, 5], &[3]).unwrap();
            assert_eq!(
                w.cumsum(0).to_vec::<i32>().unwrap(),
                [2147483647, -2147483648, -2147483643],
                "{mode:?}"
            );
            let e = Tensor::zeros(&[0, 3], DType::F32).cumsum(0);
            assert_eq!(e.shape(), [0, 3]);
        });
    }
}

#[jit]
fn running(x: &Tensor) -> Tensor {
    x.cumsum(-1) * 0.5
}

/// The worst error of an f32 cumsum over `n` values against the running
/// sum in f64, relative to the largest partial sum.
fn worst_error(got: &[f32], x: &[f32]) -> f64 {
    let (mut acc, mut worst, mut size) = (0.0f64, 0.0f64, 0.0f64);
    for (g, v) in got.iter().zip(x) {
        acc += f64::from(*v);
        size = size.max(acc.abs());
        worst = worst.max((f64::from(*g) - acc).abs());
    }
    worst / size.max(1.0)
}

#[test]
fn long_rows_stay_close_to_the_f64_running_sum() {
    // 1e6 values of one sign (the hard case for a running f32 sum).
    let n = 1_000_003;
    let x = Tensor::rand(&[n], 5);
    let xv = x.to_vec::<f32>().unwrap();
    for mode in [RunMode::Host, RunMode::Sim] {
        let got = with_mode(mode, || x.cumsum(0)).to_vec::<f32>().unwrap();
        let err = worst_error(&got, &xv);
        // Measured: 1.3e-7 on Host, 1.2e-7 on Sim.
        assert!(err < 1e-6, "{mode:?}: relative error {err:e}");
    }
    // A naive f32 running sum over the same values, for comparison.
    let mut acc = 0.0f32;
    let naive: Vec<f32> = xv
        .iter()
        .map(|v| {
            acc += v;
            acc
        })
        .collect();
    // Measured: 1.9e-5.
    assert!(worst_error(&naive, &xv) > 1e-5);
    // Traced and fused with a scale, rows of odd length.
    let y = Tensor::randn(&[3, 4099], 6);
    let want = with_mode(RunMode::Reference, || running(&y)).unwrap();
    for mode in MODES {
        let got = with_mode(mode, || running(&y)).unwrap();
        let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
        for (a, b) in g.iter().zip(&w) {
            assert!(
                (a - b).abs() <= 1e-4 * b.abs().max(10.0),
                "{mode:?}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn bad_cumsum_arguments_name_the_op_and_line() {
    let line = line!() + 1;
    let e = Tensor::ones(&[3], DType::Bool).cumsum(0);
    let err = e.error().unwrap();
    assert_eq!(err.kind(), ErrorKind::DType);
    assert!(
        err.to_string().contains(&format!("scan.rs:{line}:")),
        "{err}"
    );
    let line = line!() + 1;
    let e = Tensor::ones(&[3], DType::F32).cumsum(1);
    let err = e.error().unwrap();
    assert_eq!(err.kind(), ErrorKind::BadArgument);
    assert!(err.to_string().contains("`cumsum`"), "{err}");
    assert!(
        err.to_string().contains(&format!("scan.rs:{line}:")),
        "{err}"
    );
}
