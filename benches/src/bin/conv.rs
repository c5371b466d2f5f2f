//! ResNet-18's convolutions (torchvision, 224x224, f32) one layer at a
//! time on the host: `conv [--batch N]` prints, per distinct layer, the
//! median ms per call (conv plus its output permute, as the network runs
//! it), GFLOP/s and the share of the 2-core FMA peak, then the network's
//! conv total (each layer times its count). `--layer C,O,H,K,S` times one
//! other layer instead (C in and O out channels, an HxH image, a KxK
//! window at stride S: 7,2 3,1 3,2 1,1 or 1,2). Last, the stem's padded
//! max pool (3x3, stride 2, padding 1, on 64 channels of 112x112) and the
//! GB/s it reads. `--peak GFLOPS` sets the peak the shares are of.
//! Results are checked against the reference interpreter once per layer.

use tilejit::prelude::*;
use tilejit_benches::{max_rel_err, median_time};

/// The fp32 FMA peak on 2 threads that `% of peak` divides by, unless
/// `--peak GFLOPS` says otherwise: with AVX-512 the ~270 GFLOP/s of
/// `shared/peers/limits.md`, else the ~206 GFLOP/s `fma.c`'s AVX2 part
/// measured on the AVX2-only machine of `benches/RESULTS.md`.
fn default_peak() -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        return 270.0;
    }
    206.0
}

#[jit]
fn c7s2p3(x: &Tensor, w: &Tensor) -> Tensor {
    x.conv2d(w, 2, 3)
}
#[jit]
fn c3s1p1(x: &Tensor, w: &Tensor) -> Tensor {
    x.conv2d(w, 1, 1)
}
#[jit]
fn c3s2p1(x: &Tensor, w: &Tensor) -> Tensor {
    x.conv2d(w, 2, 1)
}
#[jit]
fn c1s1p0(x: &Tensor, w: &Tensor) -> Tensor {
    x.conv2d(w, 1, 0)
}
#[jit]
fn c1s2p0(x: &Tensor, w: &Tensor) -> Tensor {
    x.conv2d(w, 2, 0)
}
#[jit]
fn stem_pool(x: &Tensor) -> Tensor {
    x.max_pool2d_with(Pool2d {
        stride: (2, 2),
        padding: (1, 1),
        ..Pool2d::new((3, 3))
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let batch = args
        .iter()
        .position(|a| a == "--batch")
        .and_then(|i| args.get(i + 1))
        .and_then(|b| b.parse().ok())
        .unwrap_or(1usize);
    let peak = args
        .iter()
        .position(|a| a == "--peak")
        .and_then(|i| args.get(i + 1))
        .map(|p| {
            p.parse()
                .unwrap_or_else(|_| panic!("--peak takes GFLOP/s, not {p}"))
        })
        .unwrap_or_else(default_peak);
    // (name, c, o, h, k, stride, count in the network)
    let custom = args
        .iter()
        .position(|a| a == "--layer")
        .and_then(|i| args.get(i + 1))
        .map(|l| {
            let v: Vec<usize> = l.split(',').filter_map(|x| x.parse().ok()).collect();
            match v[..] {
                [c, o, h, k, s] if [(7, 2), (3, 1), (3, 2), (1, 1), (1, 2)].contains(&(k, s)) => {
                    (c, o, h, k, s)
                }
                _ => panic!("--layer takes C,O,H,K,S with K,S one of 7,2 3,1 3,2 1,1 1,2; not {l}"),
            }
        });
    let mut layers: Vec<(&str, usize, usize, usize, usize, usize, usize)> = vec![
        ("conv1 7x7/2", 3, 64, 224, 7, 2, 1),
        ("layer1 3x3", 64, 64, 56, 3, 1, 4),
        ("layer2 3x3/2", 64, 128, 56, 3, 2, 1),
        ("layer2 3x3", 128, 128, 28, 3, 1, 3),
        ("layer2 down 1x1/2", 64, 128, 56, 1, 2, 1),
        ("layer3 3x3/2", 128, 256, 28, 3, 2, 1),
        ("layer3 3x3", 256, 256, 14, 3, 1, 3),
        ("layer3 down 1x1/2", 128, 256, 28, 1, 2, 1),
        ("layer4 3x3/2", 256, 512, 14, 3, 2, 1),
        ("layer4 3x3", 512, 512, 7, 3, 1, 3),
        ("layer4 down 1x1/2", 256, 512, 14, 1, 2, 1),
    ];
    if let Some((c, o, h, k, s)) = custom {
        layers = vec![("--layer", c, o, h, k, s, 1)];
    }
    let (mut total_s, mut total_flop) = (0.0, 0.0);
    println!("batch {batch}");
    for (i, &(name, c, o, h, k, s, count)) in layers.iter().enumerate() {
        let f: fn(&Tensor, &Tensor) -> tilejit::Result<Tensor> = match (k, s) {
            (7, _) => c7s2p3,
            (3, 1) => c3s1p1,
            (3, _) => c3s2p1,
            (1, 1) => c1s1p0,
            _ => c1s2p0,
        };
        let x = Tensor::randn(&[batch, c, h, h], 2 * i as u64);
        let w = Tensor::randn(&[o, c, k, k], 2 * i as u64 + 1) * (1.0 / (c * k * k) as f64).sqrt();
        let call = || with_mode(RunMode::Host, || f(&x, &w)).expect("conv runs");
        let y = call();
        let oh = y.shape()[2];
        let want = with_mode(RunMode::Reference, || f(&x, &w)).expect("reference");
        let (g, r) = (
            y.to_vec::<f32>().expect("f32"),
            want.to_vec::<f32>().expect("f32"),
        );
        let g: Vec<f64> = g.into_iter().map(f64::from).collect();
        let r: Vec<f64> = r.into_iter().map(f64::from).collect();
        let err = max_rel_err(&g, &r);
        assert!(err < 1e-3, "{name}: differs from the reference by {err:e}");
        let t = median_time(2, 5, || drop(call())).as_secs_f64();
        let flop = 2.0 * (batch * o * oh * oh * c * k * k) as f64;
        let gf = flop / t / 1e9;
        println!(
            "{name:<20} x{count}  {:8.3} ms  {gf:6.1} GFLOP/s  {:4.1}% of peak",
            t * 1e3,
            100.0 * gf / peak
        );
        total_s += t * count as f64;
        total_flop += flop * count as f64;
    }
    let gf = total_flop / total_s / 1e9;
    println!(
        "all convs            {:8.3} ms  {gf:6.1} GFLOP/s  {:4.1}% of peak",
        total_s * 1e3,
        100.0 * gf / peak
    );
    if custom.is_none() {
        let x = Tensor::randn(&[batch, 64, 112, 112], 99);
        let call = || with_mode(RunMode::Host, || stem_pool(&x)).expect("pool runs");
        let got = call().to_vec::<f32>().expect("f32");
        let want = with_mode(RunMode::Reference, || stem_pool(&x)).expect("reference");
        assert_eq!(got, want.to_vec::<f32>().expect("f32"), "stem pool");
        let t = median_time(2, 9, || drop(call())).as_secs_f64();
        let bytes = (x.numel() + got.len()) as f64 * 4.0;
        println!(
            "stem max pool 3x3/2  {:8.3} ms  {:6.1} GB/s read and written",
            t * 1e3,
            bytes / t / 1e9
        );
    }
}
