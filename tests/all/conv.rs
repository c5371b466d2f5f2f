//! `conv2d`, `max_pool2d`, `avg_pool2d` on NCHW images: numpy-computed
//! values and a direct loop written here, on every backend, eager and
//! traced; bad shapes named with the caller's line.

use tilejit::prelude::*;
use tilejit::{jit, DType, ErrorKind};
use tilejit_tests::assert_close;

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
    // One kernel: the GEMM reading the OIHW weights transposed in place
    // and writing NCHW (the output's permute reads the product as its
    // epilogue).
    assert_eq!(kp.kernels.len(), 1, "{kp}");
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

#[jit]
fn grouped_dilated(x: &Tensor, w: &Tensor) -> Tensor {
    x.conv2d_with(w, None, grouped_dilated_opts()).relu()
}

/// Half-precision convolutions with per-axis strides, dilation, groups
/// (depthwise too) on Sim's cube: against the reference interpreter in
/// the same dtype (one rounding of the result apart at most), on every
/// backend; the Sim kernel loads its panels with `ldl1c`.
#[test]
fn half_convs_with_general_windows_match_the_reference() {
    let c = |s, p, d, g| Conv2d {
        stride: s,
        padding: p,
        dilation: d,
        groups: g,
    };
    for (i, (xs, ws, o)) in [
        ([2, 4, 9, 8], [6, 2, 3, 3], c((2, 1), (1, 2), (2, 1), 2)),
        ([1, 6, 10, 7], [6, 1, 3, 2], c((1, 2), (2, 0), (1, 2), 6)),
        ([2, 3, 11, 9], [5, 3, 2, 3], c((3, 2), (0, 1), (2, 2), 1)),
    ]
    .into_iter()
    .enumerate()
    {
        let (x, w) = (
            Tensor::randn(&xs, 300 + i as u64),
            Tensor::randn(&ws, 310 + i as u64),
        );
        for dt in [DType::F16, DType::BF16] {
            let (xh, wh) = (x.cast(dt), w.cast(dt));
            let f = || xh.conv2d_with(&wh, None, o).cast(DType::F32);
            let want = f32s(&with_mode(RunMode::Reference, f));
            let want: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
            check_modes(&format!("{dt} {xs:?} {ws:?} {o:?}"), &want, 1e-2, f);
        }
    }
    let (x, w) = (
        Tensor::randn(&[2, 4, 9, 8], 320),
        Tensor::randn(&[6, 2, 3, 3], 321),
    );
    let want = conv_def(&x, &w, None, grouped_dilated_opts());
    let want: Vec<f64> = want.into_iter().map(|v| v.max(0.0)).collect();
    check_modes("grouped_dilated", &want, 1e-4, || {
        grouped_dilated(&x, &w).unwrap()
    });
    let h = &grouped_dilated::jit().handlers()[0];
    let sim = h.program.sim().unwrap();
    assert!(
        sim.kernels().iter().any(|k| k.asm.contains("ldl1c")),
        "{:?}",
        sim.kernels().iter().map(|k| &k.asm).collect::<Vec<_>>()
    );
}

fn grouped_dilated_opts() -> Conv2d {
    Conv2d {
        stride: (2, 1),
        padding: (1, 2),
        dilation: (2, 1),
        groups: 2,
    }
}

/// Runs `f` on Host, Sim and Verify against `want` (within `tol`,
/// relative): every window (strides, padding, dilation, groups) runs on
/// Sim's cube too.
fn check_modes(what: &str, want: &[f64], tol: f64, f: impl Fn() -> Tensor) {
    for mode in MODES {
        let got = with_mode(mode, &f)
            .to_vec::<f32>()
            .unwrap_or_else(|e| panic!("{what} {mode:?}: {e}"));
        assert_eq!(got.len(), want.len(), "{what} {mode:?}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (f64::from(*g) - w).abs() <= tol * w.abs().max(1.0),
                "{what} {mode:?} element {i}: {g} vs {w}"
            );
        }
    }
}

fn ints(v: &[i32], shape: &[usize]) -> Tensor {
    let v = v.iter().map(|&x| x as f32).collect();
    Tensor::from_vec(v, shape).unwrap()
}

#[test]
fn a_tap_wholly_past_a_narrow_image_reads_zeros() {
    // Width 5, padding 2, dilation 4: the one output column's taps sit
    // at columns -2, 2 and 6, so only the middle one reads the image
    // (the fuzzer's ONNX Conv: the third tap's row was sliced from 6 of
    // 5 and panicked). By hand: out[y] = 2 * x[y, 2] = 2 * (5y + 2).
    let x = Tensor::arange(15, DType::F32).reshape(&[1, 1, 3, 5]);
    let w = ints(&[1, 2, 3], &[1, 1, 1, 3]);
    let opts = Conv2d {
        stride: (1, 1),
        padding: (0, 2),
        dilation: (1, 4),
        groups: 1,
    };
    check_modes("tap past the edge", &[4.0, 14.0, 24.0], 0.0, || {
        x.conv2d_with(&w, None, opts)
    });
}

#[test]
fn conv2d_with_matches_torch_on_hand_checked_images() {
    // Computed in Python from torch's conv2d definition (/tmp ref script:
    // out[f, y, z] = bias[f] + sum x[g*cg + c, y*sh + i*dh - ph,
    // z*sw + j*dw - pw] * w[f, c, i, j]), checked by hand at (0, 0).
    // Per-axis stride (2, 1), padding (1, 2), dilation (2, 1), a bias.
    let x = Tensor::arange(60, DType::F32).reshape(&[1, 2, 5, 6]);
    let w = ints(
        &[1, -1, 2, 0, 1, 1, 0, 2, -1, 1, 1, 0, 1, 0, 0, 1, -2, 1],
        &[3, 2, 1, 3],
    );
    let bias = Tensor::from_vec(vec![0.5f32, -1.0, 2.0], &[3]).unwrap();
    let opts = Conv2d {
        stride: (2, 1),
        padding: (1, 2),
        dilation: (2, 1),
        groups: 1,
    };
    #[rustfmt::skip]
    let want = [
        0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 48.5, 81.5, 90.5, 94.5, 98.5, 102.5, 40.5, 11.5,
        84.5, 117.5, 138.5, 142.5, 146.5, 150.5, 52.5, 23.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5,
        -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -7.0, 40.0, 78.0, 81.0, 84.0, 87.0, 102.0,
        40.0, -19.0, 64.0, 114.0, 117.0, 120.0, 123.0, 150.0, 52.0, -1.0, -1.0, -1.0, -1.0, -1.0,
        -1.0, -1.0, -1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 38.0, -33.0, 8.0, 9.0, 10.0, 11.0,
        -30.0, 54.0, 50.0, -45.0, 20.0, 21.0, 22.0, 23.0, -30.0, 78.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0,
        2.0, 2.0,
    ];
    let y = with_mode(RunMode::Host, || x.conv2d_with(&w, Some(&bias), opts));
    assert_eq!(y.shape(), [1, 3, 4, 8]);
    check_modes("strided dilated", &want, 0.0, || {
        x.conv2d_with(&w, Some(&bias), opts)
    });
    // Depthwise (groups = channels = 3), a 2x2 window per channel.
    let x = Tensor::arange(48, DType::F32).reshape(&[1, 3, 4, 4]);
    let w = ints(&[1, 2, 3, 4, 0, 1, -1, 0, 2, 0, 0, -1], &[3, 1, 2, 2]);
    let want = [
        34.0, 44.0, 54.0, 74.0, 84.0, 94.0, 114.0, 124.0, 134.0, -3.0, -3.0, -3.0, -3.0, -3.0,
        -3.0, -3.0, -3.0, -3.0, 27.0, 28.0, 29.0, 31.0, 32.0, 33.0, 35.0, 36.0, 37.0,
    ];
    let dw = Conv2d {
        groups: 3,
        ..Conv2d::default()
    };
    check_modes("depthwise", &want, 0.0, || x.conv2d_with(&w, None, dw));
    // Two groups of two channels, padding 1.
    let x = Tensor::arange(36, DType::F32).reshape(&[1, 4, 3, 3]);
    #[rustfmt::skip]
    let w = ints(&[
        1, 0, 0, 1, 2, 0, 0, 1, -1, 1, 0, 0, 0, 0, 1, 1,
        0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 3, 4, 0, 0, 0, -1,
    ], &[4, 2, 2, 2]);
    #[rustfmt::skip]
    let want = [
        9.0, 11.0, 13.0, 0.0, 15.0, 35.0, 40.0, 24.0, 21.0, 50.0, 55.0, 33.0, 0.0, 36.0, 39.0,
        42.0, 9.0, 19.0, 21.0, 11.0, 12.0, 26.0, 28.0, 12.0, 18.0, 32.0, 34.0, 12.0, 6.0, 1.0, 1.0,
        -8.0, 45.0, 74.0, 77.0, 29.0, 78.0, 138.0, 143.0, 61.0, 87.0, 153.0, 158.0, 67.0, 33.0,
        67.0, 69.0, 35.0, 45.0, 102.0, 108.0, 60.0, 90.0, 176.0, 185.0, 89.0, 105.0, 203.0, 212.0,
        101.0, 48.0, 74.0, 77.0, 26.0,
    ];
    let g2 = Conv2d {
        padding: (1, 1),
        groups: 2,
        ..Conv2d::default()
    };
    check_modes("two groups", &want, 0.0, || x.conv2d_with(&w, None, g2));
}

/// The definition of torch's conv2d in f64, with every option.
fn conv_def(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, o: Conv2d) -> Vec<f64> {
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    let (xv, wv) = (f32s(x), f32s(w));
    let bv = bias.map(f32s);
    let (n, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (f, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    let ((sh, sw), (ph, pw), (dh, dw)) = (o.stride, o.padding, o.dilation);
    let oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
    let ow = (wd + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
    let og = f / o.groups;
    let mut out = Vec::new();
    for b in 0..n {
        for fo in 0..f {
            for y in 0..oh {
                for z in 0..ow {
                    let mut acc = bv.as_ref().map_or(0.0, |v| f64::from(v[fo]));
                    for cj in 0..cg {
                        let ci = fo / og * cg + cj;
                        for i in 0..kh {
                            for j in 0..kw {
                                let (r, q) = (y * sh + i * dh, z * sw + j * dw);
                                if r < ph || q < pw || r - ph >= h || q - pw >= wd {
                                    continue;
                                }
                                let xi = ((b * c + ci) * h + r - ph) * wd + q - pw;
                                let wi = ((fo * cg + cj) * kh + i) * kw + j;
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
fn conv_bn_relu(x: &Tensor, w: &Tensor, b: &Tensor, scale: &Tensor) -> Tensor {
    let o = Conv2d {
        stride: (2, 2),
        padding: (1, 1),
        ..Conv2d::default()
    };
    (x.conv2d_with(w, Some(b), o) * scale).relu()
}

#[test]
fn conv2d_with_matches_the_definition_and_the_reference() {
    let c = |s, p, d, g| Conv2d {
        stride: s,
        padding: p,
        dilation: d,
        groups: g,
    };
    // Odd sizes; 1x1 (read in place on the host), strided, dilated,
    // grouped and depthwise windows; images over several threads' work.
    for (i, (xs, ws, o)) in [
        ([2, 6, 9, 7], [4, 6, 1, 1], c((1, 1), (0, 0), (1, 1), 1)),
        ([1, 6, 9, 7], [6, 3, 1, 1], c((2, 1), (0, 1), (1, 1), 2)),
        ([3, 4, 13, 11], [8, 2, 3, 3], c((1, 2), (2, 1), (2, 3), 2)),
        ([2, 5, 12, 10], [5, 1, 3, 3], c((1, 1), (1, 1), (1, 1), 5)),
        ([1, 3, 23, 31], [16, 3, 7, 5], c((2, 3), (3, 2), (1, 1), 1)),
        (
            [4, 16, 14, 14],
            [32, 16, 3, 3],
            c((2, 2), (1, 1), (1, 1), 1),
        ),
        ([2, 3, 8, 8], [2, 3, 2, 2], c((3, 3), (1, 1), (1, 1), 1)),
        // Two groups of 80 output channels (two n-tiles each, one
        // ragged) over k = 72 (two K steps) on Sim's cube.
        ([2, 16, 9, 9], [160, 8, 3, 3], c((2, 1), (1, 0), (1, 2), 2)),
    ]
    .into_iter()
    .enumerate()
    {
        let x = Tensor::randn(&xs, 20 + i as u64);
        let w = Tensor::randn(&ws, 40 + i as u64);
        let bias = Tensor::randn(&[ws[0]], 60 + i as u64);
        let want = conv_def(&x, &w, Some(&bias), o);
        check_modes(&format!("{xs:?} {ws:?} {o:?}"), &want, 1e-4, || {
            x.conv2d_with(&w, Some(&bias), o)
        });
        let r = with_mode(RunMode::Reference, || x.conv2d_with(&w, Some(&bias), o));
        assert_close(&f32s(&r), &want, 1e-4);
    }
    // Traced, with a folded batch norm's scale and a ReLU after it:
    // against the reference interpreter.
    let (x, w) = (
        Tensor::randn(&[2, 8, 15, 15], 70),
        Tensor::randn(&[12, 8, 3, 3], 71),
    );
    let (b, scale) = (Tensor::randn(&[12], 72), Tensor::randn(&[1, 12, 1, 1], 73));
    let want = f32s(&with_mode(RunMode::Reference, || conv_bn_relu(&x, &w, &b, &scale)).unwrap());
    let want: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
    check_modes("conv_bn_relu", &want, 1e-4, || {
        conv_bn_relu(&x, &w, &b, &scale).unwrap()
    });
}

#[test]
fn padded_pools_match_torch() {
    // Computed in Python from torch's definitions, checked by hand at
    // (0, 0): max over the window's elements inside the image (padding
    // never wins), average over all 9 (count_include_pad) or those
    // inside.
    let neg = (-Tensor::arange(25, DType::F32)).reshape(&[1, 1, 5, 5]);
    let x = Tensor::arange(25, DType::F32).reshape(&[1, 1, 5, 5]);
    let p = Pool2d {
        stride: (2, 2),
        padding: (1, 1),
        ..Pool2d::new((3, 3))
    };
    let max = [0.0, -1.0, -3.0, -5.0, -6.0, -8.0, -15.0, -16.0, -18.0];
    check_modes("max", &max, 0.0, || neg.max_pool2d_with(p));
    let avg = [
        4.0 / 3.0,
        3.0,
        8.0 / 3.0,
        7.0,
        12.0,
        9.0,
        8.0,
        13.0,
        28.0 / 3.0,
    ];
    check_modes("avg", &avg, 1e-6, || x.avg_pool2d_with(p));
    let avgx = [3.0, 4.5, 6.0, 10.5, 12.0, 13.5, 18.0, 19.5, 21.0];
    let q = Pool2d {
        count_include_pad: false,
        ..p
    };
    check_modes("avg excluding pad", &avgx, 1e-6, || x.avg_pool2d_with(q));
    // A 2x3 window, stride (1, 2), padding (1, 1), on a 4x6 image.
    let r = Tensor::arange(24, DType::F32).reshape(&[1, 1, 4, 6]);
    let pr = Pool2d {
        kernel: (2, 3),
        stride: (1, 2),
        padding: (1, 1),
        count_include_pad: true,
    };
    let want = [
        1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0, 17.0, 19.0, 21.0, 23.0, 19.0, 21.0, 23.0,
    ];
    check_modes("max 2x3", &want, 0.0, || r.max_pool2d_with(pr));
    // Ints pad with the dtype's lowest value.
    for mode in MODES {
        let i = (-Tensor::arange(25, DType::I32)).reshape(&[1, 1, 5, 5]);
        let got = with_mode(mode, || i.max_pool2d_with(p)).to_vec::<i32>();
        assert_eq!(got.unwrap(), [0, -1, -3, -5, -6, -8, -15, -16, -18]);
    }
    // ResNet's stem pool (3x3, stride 2, padding 1) against the reference.
    let x = Tensor::randn(&[2, 3, 17, 16], 80);
    let want = f32s(&with_mode(RunMode::Reference, || x.max_pool2d_with(p)));
    let want: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
    check_modes("stem pool", &want, 0.0, || x.max_pool2d_with(p));
}

#[test]
fn bad_conv2d_with_and_pool_options_are_clear_errors() {
    let x = Tensor::zeros(&[1, 4, 6, 6], DType::F32);
    let w = |s: &[usize]| Tensor::zeros(s, DType::F32);
    let g = |groups| Conv2d {
        groups,
        ..Conv2d::default()
    };
    let cases: Vec<(u32, Tensor, ErrorKind, &str)> = vec![
        (
            line!(),
            x.conv2d_with(&w(&[6, 2, 3, 3]), None, g(3)),
            ErrorKind::Shape,
            "do not split into 3 groups",
        ),
        (
            line!(),
            x.conv2d_with(&w(&[6, 4, 3, 3]), None, g(2)),
            ErrorKind::Shape,
            "[out, 2, kh, kw]",
        ),
        (
            line!(),
            x.conv2d_with(&w(&[3, 2, 3, 3]), None, g(2)),
            ErrorKind::Shape,
            "multiple of the groups",
        ),
        (
            line!(),
            x.conv2d_with(&w(&[6, 4, 3, 3]), None, g(0)),
            ErrorKind::Shape,
            "0 groups",
        ),
        (
            line!(),
            x.conv2d_with(
                &w(&[2, 4, 3, 3]),
                None,
                Conv2d {
                    dilation: (3, 1),
                    ..Conv2d::default()
                },
            ),
            ErrorKind::Shape,
            "does not fit",
        ),
        (
            line!(),
            x.conv2d_with(
                &w(&[2, 4, 3, 3]),
                None,
                Conv2d {
                    stride: (1, 0),
                    ..Conv2d::default()
                },
            ),
            ErrorKind::Shape,
            "stride 0",
        ),
        (
            line!(),
            x.conv2d_with(
                &w(&[2, 4, 3, 3]),
                None,
                Conv2d {
                    dilation: (0, 1),
                    ..Conv2d::default()
                },
            ),
            ErrorKind::Shape,
            "dilation 0",
        ),
        (
            line!(),
            x.conv2d_with(&w(&[2, 4, 3, 3]), Some(&w(&[3])), Conv2d::default()),
            ErrorKind::Shape,
            "bias must be [2]",
        ),
        (
            line!(),
            x.conv2d_with(
                &w(&[2, 4, 3, 3]),
                Some(&Tensor::zeros(&[2], DType::F16)),
                Conv2d::default(),
            ),
            ErrorKind::DType,
            "f16",
        ),
        (
            line!(),
            x.cast(DType::I32)
                .conv2d_with(&w(&[4, 2, 1, 1]).cast(DType::I32), None, g(2)),
            ErrorKind::DType,
            "grouped",
        ),
        (
            line!(),
            x.max_pool2d_with(Pool2d {
                padding: (2, 0),
                ..Pool2d::new((3, 3))
            }),
            ErrorKind::Shape,
            "more than half",
        ),
        (
            line!(),
            x.avg_pool2d_with(Pool2d::new((7, 2))),
            ErrorKind::Shape,
            "does not fit",
        ),
        (
            line!(),
            x.max_pool2d_with(Pool2d {
                stride: (0, 1),
                ..Pool2d::new((2, 2))
            }),
            ErrorKind::Shape,
            "stride 0",
        ),
    ];
    tilejit_tests::check_error_cases("conv.rs", cases);
}

#[jit]
fn stem_pool(x: &Tensor) -> Tensor {
    x.max_pool2d_with(Pool2d {
        stride: (2, 2),
        padding: (1, 1),
        ..Pool2d::new((3, 3))
    })
}

#[test]
fn a_padded_pool_reads_the_image_in_place() {
    let x = Tensor::randn(&[2, 4, 13, 12], 90);
    let want = f32s(&with_mode(RunMode::Reference, || stem_pool(&x)).unwrap());
    let want: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
    check_modes("stem_pool", &want, 0.0, || stem_pool(&x).unwrap());
    let h = &stem_pool::jit().handlers()[0];
    let kp = h.program.host().kernels();
    // One max kernel per region of outputs whose windows leave the image
    // on the same sides (rows: the first, the middle five, the last;
    // columns: the first, the rest), each reading the taps inside the
    // image straight from the input: no padded copy of the image
    // (2*4*15*14), no windows, no gathered indices or masks.
    assert_eq!(kp.kernels.len(), 3 * 2, "{kp}");
    for k in &kp.kernels {
        assert_eq!(k.ops, ["pool_max"], "{kp}");
        assert!(k.loads.iter().all(|a| a.buf.0 == 0), "{kp}");
    }
    assert_eq!(kp.buffers.len(), 2, "the image and the output: {kp}");
    let taps: usize = kp.kernels.iter().map(|k| k.loads.len()).sum();
    // Corner 4 taps, top row 6, left column 6, inside 9; the last row's
    // windows hold two rows of the image (13 rows, stride 2).
    assert_eq!(taps, 4 + 6 + 6 + 9 + 4 + 6, "{kp}");
}

#[jit]
fn conv_block(
    x: &Tensor,
    w1: &Tensor,
    b1: &Tensor,
    w2: &Tensor,
    b2: &Tensor,
    wd: &Tensor,
) -> Tensor {
    // A ResNet basic block with a strided 1x1 shortcut: the residual is
    // another convolution's output.
    let o = w1.shape()[0];
    let stride2 = Conv2d {
        stride: (2, 2),
        padding: (1, 1),
        ..Conv2d::default()
    };
    let h = x.conv2d_with(w1, Some(b1), stride2).relu();
    let h = h.conv2d(w2, 1, 1) + b2.reshape(&[o, 1, 1]);
    (h + x.conv2d(wd, 2, 0)).relu()
}

#[jit]
fn avg_pool_excluding_pad(x: &Tensor) -> Tensor {
    x.avg_pool2d_with(Pool2d {
        stride: (1, 2),
        padding: (1, 0),
        count_include_pad: false,
        ..Pool2d::new((3, 2))
    })
}

/// The host kernels of `f`'s only compiled program.
fn host_kernels(f: &tilejit::JitFunction) -> tilejit_ir::kernel::KernelProgram {
    let h = f.handlers();
    assert_eq!(h.len(), 1, "one program");
    h[0].program.host().kernels().clone()
}

#[test]
fn a_basic_block_is_its_convolutions_reading_weights_in_place() {
    // Odd sizes, batch 1 and 3: bias, ReLU and the residual (another
    // convolution's output) run in the convolutions' own kernels, and
    // every convolution reads its OIHW weights where they are (no kernel
    // copies them transposed). Values against the reference interpreter.
    for n in [1, 3] {
        let x = Tensor::randn(&[n, 6, 9, 11], 90);
        let w1 = Tensor::randn(&[10, 6, 3, 3], 91) * 0.3;
        let b1 = Tensor::randn(&[10], 92);
        let w2 = Tensor::randn(&[10, 10, 3, 3], 93) * 0.3;
        let b2 = Tensor::randn(&[10], 94);
        let wd = Tensor::randn(&[10, 6, 1, 1], 95);
        let run = || conv_block(&x, &w1, &b1, &w2, &b2, &wd).unwrap();
        let want = f32s(&with_mode(RunMode::Reference, run));
        let want: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
        check_modes("conv_block", &want, 1e-4, run);
        conv_block::jit().clear();
        with_mode(RunMode::Host, run);
        let p = host_kernels(conv_block::jit());
        let convs: Vec<_> = p.kernels.iter().filter_map(|k| k.matmul.as_ref()).collect();
        assert_eq!(convs.len(), 3, "{p}");
        assert_eq!(p.kernels.len(), 3, "only the convolutions: {p}");
        for mm in convs {
            assert!(mm.im2col.is_some(), "{p}");
            let kind = p.buffers[mm.b.0 as usize].kind;
            assert!(
                matches!(kind, tilejit_ir::kernel::BufKind::Input(_)),
                "weights read in place: {p}"
            );
        }
    }
}

#[test]
fn an_average_pool_excluding_padding_is_one_pass() {
    // Odd sizes, batch 3, stride (1, 2), padding on rows only; values
    // against the reference interpreter on every backend.
    let x = Tensor::randn(&[3, 5, 13, 10], 96);
    let want = f32s(&with_mode(RunMode::Reference, || {
        avg_pool_excluding_pad(&x).unwrap()
    }));
    let want: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
    check_modes("avg pool", &want, 1e-6, || {
        avg_pool_excluding_pad(&x).unwrap()
    });
    avg_pool_excluding_pad::jit().clear();
    with_mode(RunMode::Host, || avg_pool_excluding_pad(&x).unwrap());
    let p = host_kernels(avg_pool_excluding_pad::jit());
    // The pooled sums, one kernel per region of rows (the first, the
    // middle, the last: their windows hold 2, 3 and 2 rows of the image),
    // then their division by the counts inside.
    let ops: Vec<_> = p.kernels.iter().map(|k| k.ops.clone()).collect();
    assert_eq!(ops[..3], [["pool_sum"], ["pool_sum"], ["pool_sum"]], "{p}");
    assert_eq!(p.kernels.len(), 4, "{p}");
}

#[jit]
fn j_conv1d(x: &Tensor, w: &Tensor) -> Tensor {
    x.conv1d(w, None, 2, 1, 1, 1)
}

#[test]
fn conv1d_and_pool1d_match_a_python_loop_in_every_mode() {
    // Python loops over every output and tap (zero padding; pools skip
    // the padding, averages divide by the window or by the taps inside).
    let x = Tensor::arange(10, DType::F32).reshape(&[1, 2, 5]);
    let w = (Tensor::arange(12, DType::F32) - 6.0).reshape(&[3, 2, 2]);
    let w2 = (Tensor::arange(6, DType::F32) - 2.0).reshape(&[2, 1, 3]);
    let f = |t: Tensor| t.to_vec::<f32>().unwrap();
    for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
        let y = with_mode(mode, || j_conv1d(&x, &w)).unwrap();
        assert_eq!(y.shape(), [1, 3, 3]);
        assert_eq!(
            f(y),
            [-15., -61., -97., 5., 3., -1., 25., 67., 95.],
            "{mode:?}"
        );
        if mode == RunMode::Host {
            // Dilated and grouped: Sim's conv takes neither yet.
            let y = with_mode(mode, || x.conv1d(&w2, None, 1, 2, 2, 2));
            assert_eq!(y.shape(), [1, 2, 5]);
            assert_eq!(
                f(y),
                [0., -1., -2., -5., -8., 31., 36., 46., 22., 25.],
                "{mode:?}"
            );
        }
        let y = with_mode(mode, || x.max_pool1d(2, 2, 1));
        assert_eq!(y.shape(), [1, 2, 3]);
        assert_eq!(f(y), [0., 2., 4., 5., 7., 9.], "{mode:?}");
        let y = f(with_mode(mode, || x.avg_pool1d(3, 1, 1, false)));
        let want = [0.5, 1.0, 2.0, 3.0, 3.5, 5.5, 6.0, 7.0, 8.0, 8.5];
        assert!(
            y.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{y:?} {mode:?}"
        );
        let y = f(with_mode(mode, || x.avg_pool1d(3, 1, 1, true)));
        let want = [
            1.0 / 3.0,
            1.0,
            2.0,
            3.0,
            7.0 / 3.0,
            11.0 / 3.0,
            6.0,
            7.0,
            8.0,
            17.0 / 3.0,
        ];
        assert!(
            y.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{y:?} {mode:?}"
        );
    }
    let e = x.reshape(&[2, 5]).conv1d(&w, None, 1, 0, 1, 1);
    let e = e.error().expect("a rank error");
    assert_eq!(e.kind(), tilejit::ErrorKind::BadArgument);
    assert!(e.to_string().contains("conv1d takes rank-3"), "{e}");
    let e = x.reshape(&[10]).max_pool1d(2, 2, 0);
    assert!(e
        .error()
        .expect("a rank error")
        .to_string()
        .contains("max_pool1d"));
}

/// Convolutions big enough to split their output pixels over the pool's
/// threads (batch 1: one GEMM per block of pixels), windowed and 1x1,
/// grouped and not, with a ragged last block: values against the
/// reference interpreter on every backend.
#[test]
fn a_batch_one_conv_split_over_threads_matches_the_reference() {
    let x = Tensor::randn(&[1, 8, 41, 39], 97);
    for (w, opts) in [
        (
            Tensor::randn(&[16, 8, 3, 3], 98),
            Conv2d {
                padding: (1, 1),
                ..Conv2d::default()
            },
        ),
        (Tensor::randn(&[24, 8, 1, 1], 99), Conv2d::default()),
        (
            Tensor::randn(&[16, 4, 3, 3], 100),
            Conv2d {
                padding: (1, 2),
                groups: 2,
                ..Conv2d::default()
            },
        ),
    ] {
        let b = Tensor::randn(&[w.shape()[0]], 101);
        let f = || x.conv2d_with(&w, Some(&b), opts).relu();
        let want = f32s(&with_mode(RunMode::Reference, f));
        let want: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
        check_modes("split conv", &want, 1e-4, f);
    }
}

/// Runs `f` on a rayon pool of `threads` threads (the host splits a
/// convolution by images or channel blocks by the pool it runs on).
fn on_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

/// Convolutions whose product is written NCHW (`MatMul::nchw`) with their
/// bias added in the same kernel: pixel counts that are no multiple of a
/// tile, channel counts no multiple of a register block, k from 1 to 576,
/// stride 2, 7x7 with padding 3, 1x1 of stride 2, groups, dilation,
/// batch 1 and 3, several channel blocks per image, on 1 and 2 threads
/// (2 threads and batch 3 run image by image, each block's epilogue at
/// once; batch 1 on 2 threads runs one GEMM then the epilogue): values
/// against the f64 definition on every backend.
#[test]
fn nchw_convs_match_the_definition_on_one_and_two_threads() {
    let c = |s, p, d, g| Conv2d {
        stride: s,
        padding: p,
        dilation: d,
        groups: g,
    };
    let plain = Conv2d::default();
    let cases = [
        ([3, 5, 11, 13], [7, 5, 3, 3], c((1, 1), (1, 1), (1, 1), 1)),
        ([1, 3, 23, 21], [9, 3, 7, 7], c((2, 2), (3, 3), (1, 1), 1)),
        ([3, 3, 23, 21], [9, 3, 7, 7], c((2, 2), (3, 3), (1, 1), 1)),
        ([3, 8, 9, 9], [6, 8, 1, 1], c((2, 2), (0, 0), (1, 1), 1)),
        ([3, 6, 10, 9], [8, 3, 3, 3], c((1, 1), (1, 1), (1, 1), 2)),
        ([1, 4, 12, 12], [4, 4, 3, 3], c((1, 1), (2, 2), (2, 2), 1)),
        ([3, 4, 12, 12], [4, 4, 3, 3], c((1, 1), (2, 2), (2, 2), 1)),
        ([2, 64, 6, 7], [10, 64, 3, 3], c((1, 1), (1, 1), (1, 1), 1)),
        ([3, 1, 8, 8], [5, 1, 1, 1], plain),
        ([3, 3, 32, 32], [48, 3, 3, 3], c((1, 1), (1, 1), (1, 1), 1)),
        // 48 channels of 150x150 pixels, over the 4 MiB a block aims at:
        // two blocks of 24 per image.
        (
            [2, 1, 150, 150],
            [48, 1, 3, 3],
            c((1, 1), (1, 1), (1, 1), 1),
        ),
        ([3, 6, 32, 32], [48, 3, 3, 3], c((1, 1), (1, 1), (1, 1), 2)),
        // More channels than pixels (the direct kernel declines) over two
        // blocks of 1024 per image: one build of the window rows for both.
        (
            [2, 1, 25, 25],
            [2048, 1, 3, 3],
            c((1, 1), (1, 1), (1, 1), 1),
        ),
    ];
    for (i, (xs, ws, o)) in cases.into_iter().enumerate() {
        let x = Tensor::randn(&xs, 200 + i as u64);
        let w = Tensor::randn(&ws, 220 + i as u64);
        let bias = Tensor::randn(&[ws[0]], 240 + i as u64);
        let want = conv_def(&x, &w, Some(&bias), o);
        for threads in [1, 2] {
            on_threads(threads, || {
                check_modes(
                    &format!("{xs:?} {ws:?} {o:?} on {threads} threads"),
                    &want,
                    1e-4,
                    || x.conv2d_with(&w, Some(&bias), o),
                )
            });
        }
    }
}

/// 3x3 convolutions at stride 1 over blocks of 16 channels and at least
/// 49 tiles of 4x4 pixels, which run as Winograd F(4x4, 3x3) where each
/// image has a thread of its own (batch 3, or one thread): with bias, with
/// partial tiles at the right and bottom edges, padded or not, against
/// the f64 definition on every backend. Weights are scaled as a network's
/// are (by 1/sqrt(c * 9)), so outputs are near 1: Winograd's rounding is
/// a few 1e-6 of the output's scale, not of each element.
#[test]
fn winograd_convs_match_the_definition() {
    let c = |p| Conv2d {
        padding: p,
        ..Conv2d::default()
    };
    // The last three have too few tiles an image (16, 20) to run alone:
    // their images run together, with the bias as the epilogue or none.
    let cases = [
        ([3, 16, 28, 30], [32, 16, 3, 3], c((1, 1)), true),
        ([1, 32, 30, 27], [16, 32, 3, 3], c((0, 0)), true),
        ([4, 16, 14, 14], [32, 16, 3, 3], c((1, 1)), true),
        ([4, 16, 14, 14], [32, 16, 3, 3], c((1, 1)), false),
        ([3, 32, 15, 17], [16, 32, 3, 3], c((1, 1)), true),
    ];
    for (i, (xs, ws, o, with_bias)) in cases.into_iter().enumerate() {
        let x = Tensor::randn(&xs, 400 + i as u64);
        let w = Tensor::randn(&ws, 420 + i as u64) * (1.0 / (9.0 * ws[1] as f64).sqrt());
        let bias = with_bias.then(|| Tensor::randn(&[ws[0]], 440 + i as u64));
        let want = conv_def(&x, &w, bias.as_ref(), o);
        for threads in [1, 2] {
            on_threads(threads, || {
                check_modes(
                    &format!("{xs:?} {ws:?} {o:?} bias {with_bias} on {threads} threads"),
                    &want,
                    5e-5,
                    || x.conv2d_with(&w, bias.as_ref(), o),
                )
            });
        }
    }
}

#[jit]
fn conv3x3(x: &Tensor, w: &Tensor) -> Tensor {
    x.conv2d(w, 1, 1)
}

/// Images of few tiles (ResNet's 7x7 and 14x14 at batch 1, a 5x6 one of
/// partial tiles) run as Winograd only with weights kept in the weight
/// cache: the first call (a first sighting) runs direct, later ones as
/// Winograd (F(2x2) for the biggest weights), found in the cache; each against the f64 definition in every
/// mode, on one and two threads. Once a weight tensor is dropped its
/// entry goes, and new weights (perhaps at the same address) give their
/// own result, never the old transform.
#[test]
fn kept_winograd_weights_serve_later_calls_and_go_with_their_storage() {
    let cache = tilejit::weight_cache();
    for (i, (xs, ws)) in [
        ([1, 32, 7, 7], [48, 32, 3, 3]),
        ([1, 16, 14, 14], [32, 16, 3, 3]),
        ([2, 16, 5, 6], [16, 16, 3, 3]),
        // Weights that F(4x4) would stream from memory for 4 tiles
        // (4.5 MB): kept as F(2x2).
        ([1, 176, 7, 7], [176, 176, 3, 3]),
    ]
    .into_iter()
    .enumerate()
    {
        let x = Tensor::randn(&xs, 460 + i as u64);
        let scale = 1.0 / (9.0 * ws[1] as f64).sqrt();
        let w = Tensor::randn(&ws, 470 + i as u64) * scale;
        let same = Conv2d {
            padding: (1, 1),
            ..Conv2d::default()
        };
        let want = conv_def(&x, &w, None, same);
        for threads in [1, 2] {
            on_threads(threads, || {
                check_modes(&format!("{xs:?} {ws:?}"), &want, 5e-5, || {
                    conv3x3(&x, &w).expect("conv")
                });
            });
        }
        let before = cache.stats();
        let y = conv3x3(&x, &w).expect("conv");
        assert_close(&f32s(&y), &want, 5e-5);
        assert!(cache.stats().hits > before.hits, "{:?}", cache.stats());
        // New weights after the old ones are gone: their own result.
        let freed = cache.stats().freed;
        drop(w);
        let w2 = Tensor::randn(&ws, 480 + i as u64) * scale;
        let want2 = conv_def(&x, &w2, None, same);
        let y = conv3x3(&x, &w2).expect("conv");
        assert_close(&f32s(&y), &want2, 5e-5);
        assert!(cache.stats().freed > freed, "{:?}", cache.stats());
    }
}

#[jit]
fn conv_bias_relu(x: &Tensor, w: &Tensor, b: &Tensor, s: usize, p: usize) -> Tensor {
    let o = Conv2d {
        stride: (s, s),
        padding: (p, p),
        ..Conv2d::default()
    };
    x.conv2d_with(w, Some(b), o).relu()
}

/// Convolutions of more outputs than pixels outside Winograd (ResNet's
/// late stride-2 3x3 layers) read their windows in place against
/// weights kept packed in the weight cache from the second call on:
/// against the f64 definition in every mode, one image at a time and two
/// (the tiled path, the bias and ReLU run on each image's block), on one
/// and two threads. New weights after the old are dropped give their own
/// result.
#[test]
fn kept_conv_panels_serve_later_calls_and_go_with_their_storage() {
    let cache = tilejit::weight_cache();
    for (i, (xs, ws, s, p)) in [
        ([1, 24, 7, 7], [48, 24, 3, 3], 2, 1),
        ([2, 16, 6, 5], [40, 16, 2, 2], 2, 0),
        ([2, 8, 5, 5], [33, 8, 3, 3], 1, 1),
        ([2, 3, 9, 9], [32, 3, 5, 5], 2, 2),
    ]
    .into_iter()
    .enumerate()
    {
        let x = Tensor::randn(&xs, 560 + i as u64);
        let scale = 1.0 / ((ws[1] * ws[2] * ws[3]) as f64).sqrt();
        let w = Tensor::randn(&ws, 570 + i as u64) * scale;
        let b = Tensor::randn(&[ws[0]], 580 + i as u64);
        let o = Conv2d {
            stride: (s, s),
            padding: (p, p),
            ..Conv2d::default()
        };
        let relu = |v: Vec<f64>| v.into_iter().map(|x| x.max(0.0)).collect::<Vec<_>>();
        let want = relu(conv_def(&x, &w, Some(&b), o));
        for threads in [1, 2] {
            on_threads(threads, || {
                check_modes(&format!("{xs:?} {ws:?}"), &want, 5e-5, || {
                    conv_bias_relu(&x, &w, &b, s, p).expect("conv")
                });
            });
        }
        let before = cache.stats();
        let y = conv_bias_relu(&x, &w, &b, s, p).expect("conv");
        assert_close(&f32s(&y), &want, 5e-5);
        assert!(
            cache.stats().hits > before.hits,
            "case {i}: {:?}",
            cache.stats()
        );
        let freed = cache.stats().freed;
        drop(w);
        let w2 = Tensor::randn(&ws, 590 + i as u64) * scale;
        let want2 = relu(conv_def(&x, &w2, Some(&b), o));
        let y = conv_bias_relu(&x, &w2, &b, s, p).expect("conv");
        assert_close(&f32s(&y), &want2, 5e-5);
        assert!(cache.stats().freed > freed, "{:?}", cache.stats());
    }
}

/// Convolutions from several user threads at once, and from inside a
/// rayon pool whose workers each run one (the host's direct kernel packs
/// into per-thread scratch, and a worker that waits inside a parallel
/// conv may be handed another conv's work): every result against the f64
/// definition.
#[test]
fn convs_from_many_threads_at_once_match_the_definition() {
    let shapes: Vec<([usize; 4], [usize; 4], Conv2d)> = (0..6)
        .map(|i| {
            let s = 1 + i % 2;
            let o = Conv2d {
                stride: (s, s),
                padding: (1, 1),
                ..Conv2d::default()
            };
            (
                [1, 3 + i, 40 + 5 * i, 37 + 3 * i],
                [8 + 4 * i, 3 + i, 3, 3],
                o,
            )
        })
        .collect();
    let cases: Vec<(Tensor, Tensor, Tensor, Conv2d, Vec<f64>)> = shapes
        .into_iter()
        .enumerate()
        .map(|(i, (xs, ws, o))| {
            let x = Tensor::randn(&xs, 300 + i as u64);
            let w = Tensor::randn(&ws, 320 + i as u64);
            let b = Tensor::randn(&[ws[0]], 340 + i as u64);
            let want = conv_def(&x, &w, Some(&b), o);
            (x, w, b, o, want)
        })
        .collect();
    let check = |(x, w, b, o, want): &(Tensor, Tensor, Tensor, Conv2d, Vec<f64>)| {
        for _ in 0..3 {
            assert_close(&f32s(&x.conv2d_with(w, Some(b), *o)), want, 1e-4);
        }
    };
    std::thread::scope(|s| {
        for case in &cases {
            s.spawn(|| check(case));
        }
    });
    on_threads(2, || {
        use rayon::prelude::*;
        (0..4 * cases.len())
            .into_par_iter()
            .for_each(|i| check(&cases[i % cases.len()]));
    });
}

/// [`conv_block`] again, a jit function of its own (tests run at once,
/// and each clears and inspects its function's programs).
#[jit]
fn nchw_block(
    x: &Tensor,
    w1: &Tensor,
    b1: &Tensor,
    w2: &Tensor,
    b2: &Tensor,
    wd: &Tensor,
) -> Tensor {
    let o = w1.shape()[0];
    let stride2 = Conv2d {
        stride: (2, 2),
        padding: (1, 1),
        ..Conv2d::default()
    };
    let h = x.conv2d_with(w1, Some(b1), stride2).relu();
    let h = h.conv2d(w2, 1, 1) + b2.reshape(&[o, 1, 1]);
    (h + x.conv2d(wd, 2, 0)).relu()
}

/// A ResNet basic block (bias, ReLU and a residual that is another
/// convolution's output, all in the convolutions' kernels) with every
/// product written NCHW, the shortcut's too, at batch 1 and 3 on 1 and 2 threads: values
/// against the reference interpreter on every backend.
#[test]
fn a_basic_block_writes_its_products_nchw_on_one_and_two_threads() {
    for n in [1, 3] {
        let x = Tensor::randn(&[n, 6, 17, 15], 260);
        let w1 = Tensor::randn(&[10, 6, 3, 3], 261) * 0.3;
        let b1 = Tensor::randn(&[10], 262);
        let w2 = Tensor::randn(&[10, 10, 3, 3], 263) * 0.3;
        let b2 = Tensor::randn(&[10], 264);
        let wd = Tensor::randn(&[10, 6, 1, 1], 265);
        let run = || nchw_block(&x, &w1, &b1, &w2, &b2, &wd).unwrap();
        let want = f32s(&with_mode(RunMode::Reference, run));
        let want: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
        for threads in [1, 2] {
            on_threads(threads, || check_modes("conv_block", &want, 1e-4, run));
        }
        nchw_block::jit().clear();
        with_mode(RunMode::Host, run);
        let p = host_kernels(nchw_block::jit());
        // Every product is written NCHW: the two with an epilogue, which
        // reads it contiguously, and the shortcut, a kernel of its own
        // that the last one's epilogue reads contiguously too.
        let outs: Vec<_> = p.kernels.iter().filter_map(|k| k.matmul.as_ref()).collect();
        assert_eq!(outs.len(), p.kernels.len(), "only convolutions: {p}");
        assert!(outs.iter().all(|mm| mm.nchw), "{p}");
        let reads: Vec<_> = p.kernels.iter().flat_map(|k| &k.loads).collect();
        let products = reads
            .iter()
            .filter(|l| outs.iter().any(|mm| mm.out == l.buf));
        let strides: Vec<_> = products.map(|l| l.strides.last()).collect();
        assert_eq!(strides, [Some(&1); 3], "{p}");
    }
}

/// torch's pooling by its definition, in f64: max (padding never wins) or
/// average (over the whole window, or over its elements inside the image)
/// of `x` (`[n, c, h, w]`) under `o`.
fn pool_def(x: &Tensor, o: Pool2d, max: bool) -> Vec<f64> {
    let s = x.shape().to_vec();
    let v = f32s(x);
    let (kh, kw) = o.kernel;
    let (sh, sw) = o.stride;
    let (ph, pw) = o.padding;
    let oh = (s[2] + 2 * ph - kh) / sh + 1;
    let ow = (s[3] + 2 * pw - kw) / sw + 1;
    let mut out = Vec::new();
    for plane in 0..s[0] * s[1] {
        for y in 0..oh {
            for xx in 0..ow {
                let (mut acc, mut inside) = (if max { f64::NEG_INFINITY } else { 0.0 }, 0);
                for i in 0..kh {
                    for j in 0..kw {
                        let (r, q) = (
                            (y * sh + i) as isize - ph as isize,
                            (xx * sw + j) as isize - pw as isize,
                        );
                        if r < 0 || q < 0 || r as usize >= s[2] || q as usize >= s[3] {
                            continue;
                        }
                        let e = f64::from(v[(plane * s[2] + r as usize) * s[3] + q as usize]);
                        acc = if max { acc.max(e) } else { acc + e };
                        inside += 1;
                    }
                }
                let count = if o.count_include_pad { kh * kw } else { inside };
                out.push(if max { acc } else { acc / count as f64 });
            }
        }
    }
    out
}

#[jit]
fn wide_max_pool(x: &Tensor) -> Tensor {
    x.max_pool2d_with(Pool2d {
        stride: (2, 1),
        padding: (2, 1),
        ..Pool2d::new((5, 3))
    })
}

#[test]
fn wide_and_long_pools_match_the_definition_in_every_mode() {
    let x = Tensor::randn(&[2, 3, 11, 9], 97);
    // 5x3 (15 taps): one pool, one kernel per region of windows that
    // leave the image on the same sides.
    let o = Pool2d {
        stride: (2, 1),
        padding: (2, 1),
        ..Pool2d::new((5, 3))
    };
    check_modes("max 5x3", &pool_def(&x, o, true), 0.0, || {
        wide_max_pool(&x).unwrap()
    });
    let p = host_kernels(wide_max_pool::jit());
    assert!(p.kernels.iter().all(|k| k.ops == ["pool_max"]), "{p}");
    // 5x5 (25 taps): along the columns, then the rows.
    for (o, tol) in [
        (
            Pool2d {
                stride: (2, 1),
                padding: (2, 1),
                ..Pool2d::new((5, 5))
            },
            0.0,
        ),
        (
            Pool2d {
                stride: (1, 3),
                padding: (1, 2),
                ..Pool2d::new((4, 5))
            },
            0.0,
        ),
    ] {
        check_modes("max 5x5", &pool_def(&x, o, true), tol, || {
            x.max_pool2d_with(o)
        });
        for count_include_pad in [true, false] {
            let o = Pool2d {
                count_include_pad,
                ..o
            };
            let want = pool_def(&x, o, false);
            check_modes("avg 5x5", &want, 1e-6, || x.avg_pool2d_with(o));
        }
    }
    // A row 20 long (past 16 on one axis): the windows, gathered.
    let o = Pool2d {
        stride: (1, 2),
        padding: (0, 3),
        ..Pool2d::new((1, 20))
    };
    let long = Tensor::randn(&[2, 3, 4, 30], 98);
    check_modes("max 1x20", &pool_def(&long, o, true), 0.0, || {
        long.max_pool2d_with(o)
    });
    let want = pool_def(&long, o, false);
    check_modes("avg 1x20", &want, 1e-6, || long.avg_pool2d_with(o));
    // No images: no kernels run, an empty result.
    let none = Tensor::zeros(&[0, 2, 6, 6], DType::F32);
    for mode in MODES {
        let y = with_mode(mode, || none.max_pool2d_with(o5())).to_vec::<f32>();
        assert_eq!(y.unwrap(), Vec::<f32>::new(), "{mode:?}");
    }
    // Integers, 5x5: the lowest i32 never wins.
    let i = (Tensor::randn(&[1, 2, 7, 8], 99) * 100.0).cast(DType::I32);
    let want: Vec<i32> = pool_def(&i.cast(DType::F32), o5(), true)
        .iter()
        .map(|&v| v as i32)
        .collect();
    for mode in MODES {
        let got = with_mode(mode, || i.max_pool2d_with(o5()))
            .to_vec::<i32>()
            .unwrap();
        assert_eq!(got, want, "{mode:?}");
    }
}

fn o5() -> Pool2d {
    Pool2d {
        stride: (1, 2),
        padding: (2, 2),
        ..Pool2d::new((5, 5))
    }
}
