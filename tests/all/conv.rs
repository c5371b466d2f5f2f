//! `conv2d`, `max_pool2d`, `avg_pool2d` on NCHW images: numpy-computed
//! values and a direct loop written here, on every backend, eager and
//! traced; bad shapes named with the caller's line.

use tilejit::prelude::*;
use tilejit::{jit, DType, ErrorKind};

const MODES: [RunMode; 3] = [RunMode::Host, RunMode::Sim, RunMode::Verify];

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn conv_and_pool_match_numpy_on_a_small_image() {
    // numpy (x = arange(40).reshape(2, 1, 4, 5), w = [[1, 2], [3, 4]]):
    // np.pad(x, 1) then each 2x2 window at stride 2 times w, summed; and
    // the max of each 2x2 window at stride 2 of x.
    let conv = [
        0.0, 11.0, 25.0, 50.0, 101.0, 121.0, 30.0, 50.0, 56.0, 80.0, 151.0, 165.0, 170.0, 301.0,
        321.0, 70.0, 110.0, 116.0,
    ];
    let pool = [6.0, 8.0, 16.0, 18.0, 26.0, 28.0, 36.0, 38.0];
    for mode in MODES {
        with_mode(mode, || {
            let x = Tensor::arange(40, DType::F32).reshape(&[2, 1, 4, 5]);
            let w = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[1, 1, 2, 2]).unwrap();
            let y = x.conv2d(&w, 2, 1);
            assert_eq!(y.shape(), [2, 1, 3, 3]);
            assert_eq!(f32s(&y), conv, "{mode:?}");
            assert_eq!(f32s(&x.max_pool2d(2, 2)), pool, "{mode:?}");
            let avg = f32s(&x.avg_pool2d(2, 2));
            assert_eq!(avg[0], (0.0 + 1.0 + 5.0 + 6.0) / 4.0, "{mode:?}");
        });
    }
}

/// `out[n, o, y, x] = sum w[o, c, i, j] * in[n, c, y*s + i - p, x*s + j - p]`,
/// in f64, straight from the definition.
fn conv_loops(x: &Tensor, w: &Tensor, s: usize, p: usize) -> Vec<f64> {
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    let (xv, wv) = (f32s(x), f32s(w));
    let (n, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (o, kh, kw) = (ws[0], ws[2], ws[3]);
    let oh = (h + 2 * p - kh) / s + 1;
    let ow = (wd + 2 * p - kw) / s + 1;
    let mut out = Vec::new();
    for b in 0..n {
        for f in 0..o {
            for y in 0..oh {
                for z in 0..ow {
                    let mut acc = 0.0f64;
                    for ch in 0..c {
                        for i in 0..kh {
                            for j in 0..kw {
                                let (r, q) = (y * s + i, z * s + j);
                                if r < p || q < p || r - p >= h || q - p >= wd {
                                    continue;
                                }
                                let xi = ((b * c + ch) * h + r - p) * wd + q - p;
                                let wi = ((f * c + ch) * kh + i) * kw + j;
                                acc += f64::from(xv[xi]) * f64::from(wv[wi]);
                            }
                        }
                    }
                    out.push(acc);
                }
            }
        }
    }
    out
}

#[jit]
fn conv_relu_pool(x: &Tensor, w: &Tensor) -> Tensor {
    x.conv2d(w, 1, 1).relu().max_pool2d(2, 2)
}

#[test]
fn conv2d_matches_the_definition_at_several_shapes() {
    for (shape, wshape, s, p) in [
        ([2, 3, 9, 7], [4, 3, 3, 3], 1, 1),
        ([1, 2, 8, 8], [5, 2, 3, 2], 2, 0),
        ([3, 1, 5, 6], [2, 1, 5, 6], 1, 0),
        ([1, 4, 11, 10], [3, 4, 1, 1], 3, 2),
    ] {
        let x = Tensor::randn(&shape, 1);
        let w = Tensor::randn(&wshape, 2);
        let want = conv_loops(&x, &w, s, p);
        for mode in MODES {
            let got = with_mode(mode, || x.conv2d(&w, s, p));
            let got = f32s(&got);
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*g) - w).abs() <= 1e-4 * w.abs().max(1.0),
                    "{mode:?} {shape:?} element {i}: {g} vs {w}"
                );
            }
        }
    }
    // Fused into a jit function with a pool after it, against the reference.
    let (x, w) = (
        Tensor::randn(&[2, 3, 10, 10], 3),
        Tensor::randn(&[4, 3, 3, 3], 4),
    );
    let want = f32s(&with_mode(RunMode::Reference, || conv_relu_pool(&x, &w)).unwrap());
    for mode in MODES {
        let got = f32s(&with_mode(mode, || conv_relu_pool(&x, &w)).unwrap());
        assert_eq!(got.len(), 2 * 4 * 5 * 5);
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                "{mode:?}: {g} vs {w}"
            );
        }
    }
}

#[test]
fn pooling_propagates_nan_and_works_on_ints() {
    for mode in MODES {
        with_mode(mode, || {
            let mut v: Vec<f32> = (0..16).map(|i| i as f32).collect();
            v[5] = f32::NAN;
            let x = Tensor::from_vec(v, &[1, 1, 4, 4]).unwrap();
            let m = f32s(&x.max_pool2d(2, 2));
            assert!(
                m[0].is_nan() && m[1] == 7.0 && m[3] == 15.0,
                "{mode:?} {m:?}"
            );
            let i = Tensor::arange(16, DType::I32).reshape(&[1, 1, 4, 4]);
            let mi = i.max_pool2d(3, 1).to_vec::<i32>().unwrap();
            assert_eq!(mi, [10, 11, 14, 15], "{mode:?}");
        });
    }
}

#[test]
fn bad_conv_arguments_name_the_op_and_line() {
    let x = Tensor::zeros(&[1, 2, 4, 4], DType::F32);
    let cases: Vec<(u32, Tensor, ErrorKind, &str)> = vec![
        (
            line!(),
            x.conv2d(&Tensor::zeros(&[3, 1, 2, 2], DType::F32), 1, 0),
            ErrorKind::Shape,
            "OIHW",
        ),
        (
            line!(),
            x.conv2d(&Tensor::zeros(&[3, 2, 7, 2], DType::F32), 1, 1),
            ErrorKind::Shape,
            "does not fit",
        ),
        (
            line!(),
            x.conv2d(&Tensor::zeros(&[3, 2, 2, 2], DType::F32), 0, 0),
            ErrorKind::Shape,
            "stride 0",
        ),
        // Empty weights whose window does not fit a u32 (a window of 2^66
        // would not even be a valid shape: issue 35).
        (
            line!(),
            x.conv2d(&Tensor::zeros(&[0, 2, 1 << 33, 1 << 20], DType::F32), 1, 0),
            ErrorKind::Shape,
            "too large",
        ),
        (line!(), x.max_pool2d(2, 0), ErrorKind::Shape, "stride"),
        (
            line!(),
            x.reshape(&[2, 16]).max_pool2d(2, 2),
            ErrorKind::Shape,
            "NCHW",
        ),
        (
            line!(),
            x.cast(DType::I32).avg_pool2d(2, 2),
            ErrorKind::DType,
            "avg_pool2d",
        ),
    ];
    tilejit_tests::check_error_cases("conv.rs", cases);
}

#[jit]
fn conv_only(x: &Tensor, w: &Tensor) -> Tensor {
    x.conv2d(w, 1, 1)
}

#[test]
fn a_float_conv_is_one_gemm_over_windows_read_in_place() {
    // Several 64x64 output tiles, two K steps and two N tiles on Sim's
    // cube: m = 20*20 windows, k = 8*3*3 = 72, n = 70 filters.
    let x = Tensor::randn(&[2, 8, 20, 20], 5);
    let w = Tensor::randn(&[70, 8, 3, 3], 6);
    let want = conv_loops(&x, &w, 1, 1);
    for mode in MODES {
        let got = f32s(&with_mode(mode, || conv_only(&x, &w)).unwrap());
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (f64::from(*g) - w).abs() <= 1e-4 * w.abs().max(1.0),
                "{mode:?} element {i}: {g} vs {w}"
            );
        }
    }
    let h = &conv_only::jit().handlers()[0];
    let kp = h.program.host().kernels();
    // One matmul reads the image as its windows; nothing gathers them, and
    // no buffer is as big as the windows (2 * 400 * 72 values).
    assert!(
        kp.kernels
            .iter()
            .any(|k| k.matmul.as_ref().is_some_and(|m| m.im2col.is_some())),
        "{kp}"
    );
    assert!(
        kp.kernels.iter().all(|k| !k.ops.contains(&"gather")),
        "{kp}"
    );
    assert!(kp.buffers.iter().all(|b| b.ty.shape.numel() < 2 * 400 * 72));
    // Two kernels: the weights' transpose, and the GEMM writing NCHW (the
    // output's permute reads the product as its epilogue).
    assert_eq!(kp.kernels.len(), 2, "{kp}");
    // On Sim the cube loads each panel from the image (Load3D).
    let sim = h.program.sim().unwrap();
    assert!(sim.kernels().iter().any(|k| k.asm.contains("ldl1c")));
}

#[test]
fn half_convs_and_dynamic_convs_match_the_reference() {
    let (x, w) = (
        Tensor::randn(&[1, 3, 7, 9], 7),
        Tensor::randn(&[4, 3, 3, 3], 8),
    );
    for dt in [DType::F16, DType::BF16] {
        let (xh, wh) = (x.cast(dt), w.cast(dt));
        let want = with_mode(RunMode::Reference, || xh.conv2d(&wh, 2, 1).cast(DType::F32));
        let want = f32s(&want);
        for mode in MODES {
            let got = f32s(&with_mode(mode, || xh.conv2d(&wh, 2, 1).cast(DType::F32)));
            for (g, r) in got.iter().zip(&want) {
                // One rounding of the result apart at most.
                assert!(
                    (g - r).abs() <= 1e-2 * r.abs().max(1.0),
                    "{dt} {mode:?}: {g} vs {r}"
                );
            }
        }
    }
    // A dynamic function over images of four sizes: right at each (the
    // output size, `(h + 2p - kh) / s + 1`, is arithmetic shape classes
    // do not read back, so a class may be traced per size; never wrong).
    #[jit(dynamic)]
    fn conv_dyn(x: &Tensor, w: &Tensor) -> Tensor {
        x.conv2d(w, 1, 0).relu()
    }
    for (i, hw) in [(6, 5), (9, 9), (12, 7), (17, 11)].into_iter().enumerate() {
        let x = Tensor::randn(&[2, 3, hw.0, hw.1], 10 + i as u64);
        let want: Vec<f64> = conv_loops(&x, &w, 1, 0)
            .into_iter()
            .map(|v| v.max(0.0))
            .collect();
        for mode in MODES {
            let got = f32s(&with_mode(mode, || conv_dyn(&x, &w)).unwrap());
            for (g, r) in got.iter().zip(&want) {
                assert!((f64::from(*g) - r).abs() <= 1e-4 * r.abs().max(1.0));
            }
        }
    }
}
