//! The `nn` layers against values computed here in f64 loops, and the
//! real-model code of the benches (`benches/src/models`: GPT-2 and
//! ResNet-18) at tiny sizes: on Host, Sim and Verify against the reference
//! interpreter, the KV-cache decode against full recomputation, and the
//! folded batch norms against the unfolded net.

#[allow(dead_code, unreachable_pub)]
#[path = "../../benches/src/models/gpt2.rs"]
mod gpt2;
#[allow(dead_code, unreachable_pub)]
#[path = "../../benches/src/models/resnet18.rs"]
mod resnet18;

use tilejit::prelude::*;
use tilejit_tests::{assert_close, check_error_cases, f64s, vals, TempDir};

const MODES: [RunMode; 3] = [RunMode::Host, RunMode::Sim, RunMode::Verify];

/// Seeded values as f64 (the inputs of both sides of a comparison).
fn randn(shape: &[usize], seed: u64) -> (Tensor, Vec<f64>) {
    let t = Tensor::randn(shape, seed);
    let v = f64s(&vals(&t));
    (t, v)
}

#[jit]
fn linear_bias(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    x.linear(w, Some(b))
}

#[jit]
fn linear_3d(x: &Tensor, w: &Tensor) -> Tensor {
    x.linear(w, None)
}

#[test]
fn linear_is_x_times_w_transposed_plus_b() {
    let (x, xv) = randn(&[3, 5], 1);
    let (w, wv) = randn(&[4, 5], 2);
    let (b, bv) = randn(&[4], 3);
    let mut want = vec![0.0; 12];
    for r in 0..3 {
        for o in 0..4 {
            want[r * 4 + o] = bv[o] + (0..5).map(|k| xv[r * 5 + k] * wv[o * 5 + k]).sum::<f64>();
        }
    }
    let x3 = x.reshape(&[1, 3, 5]);
    for mode in MODES {
        let y = with_mode(mode, || linear_bias(&x, &w, &b)).unwrap();
        assert_eq!(y.shape(), [3, 4]);
        assert_close(&vals(&y), &want, 1e-5);
        let y = with_mode(mode, || linear_3d(&x3, &w)).unwrap();
        assert_eq!(y.shape(), [1, 3, 4]);
        let no_bias: Vec<f64> = want
            .iter()
            .enumerate()
            .map(|(i, v)| v - bv[i % 4])
            .collect();
        assert_close(&vals(&y), &no_bias, 1e-5);
    }
}

#[jit]
fn bn(x: &Tensor, mean: &Tensor, var: &Tensor, g: &Tensor, b: &Tensor) -> Tensor {
    x.batch_norm(mean, var, Some(g), Some(b), 1e-3)
}

#[test]
fn batch_norm_normalises_each_channel() {
    let (x, xv) = randn(&[2, 3, 2, 2], 4);
    let (mean, mv) = randn(&[3], 5);
    let var = Tensor::from_vec(vec![0.5f32, 1.0, 4.0], &[3]).unwrap();
    let vv = [0.5, 1.0, 4.0];
    let (g, gv) = randn(&[3], 6);
    let (b, bv) = randn(&[3], 7);
    let want: Vec<f64> = (0..24)
        .map(|i| {
            let c = (i / 4) % 3;
            (xv[i] - mv[c]) / (vv[c] + 1e-3f64).sqrt() * gv[c] + bv[c]
        })
        .collect();
    for mode in MODES {
        let y = with_mode(mode, || bn(&x, &mean, &var, &g, &b)).unwrap();
        assert_close(&vals(&y), &want, 1e-5);
    }
}

#[jit]
fn pools(x: &Tensor) -> (Tensor, Tensor) {
    (x.adaptive_avg_pool2d(1, 1), x.adaptive_avg_pool2d(2, 3))
}

#[test]
fn adaptive_avg_pool2d_follows_torchs_windows() {
    // 5 rows into 2 ([0, 3), [2, 5)), 7 columns into 3 ([0, 3), [2, 5), [4, 7)).
    let (x, xv) = randn(&[2, 3, 5, 7], 8);
    let window_mean = |img: usize, r: std::ops::Range<usize>, c: std::ops::Range<usize>| {
        let n = (r.len() * c.len()) as f64;
        r.flat_map(|i| c.clone().map(move |j| (i, j)))
            .map(|(i, j)| xv[img * 35 + i * 7 + j])
            .sum::<f64>()
            / n
    };
    let global: Vec<f64> = (0..6).map(|img| window_mean(img, 0..5, 0..7)).collect();
    let mut windows = Vec::new();
    for img in 0..6 {
        for r in [0..3, 2..5] {
            for c in [0..3, 2..5, 4..7] {
                windows.push(window_mean(img, r.clone(), c));
            }
        }
    }
    for mode in MODES {
        let (a, b) = with_mode(mode, || pools(&x)).unwrap();
        assert_eq!(
            (a.shape(), b.shape()),
            ([2, 3, 1, 1].as_slice(), [2, 3, 2, 3].as_slice())
        );
        assert_close(&vals(&a), &global, 1e-5);
        assert_close(&vals(&b), &windows, 1e-5);
    }
}

#[test]
fn a_folded_batch_norm_equals_the_convolution_then_the_norm() {
    let x = Tensor::randn(&[2, 3, 9, 9], 9);
    let w = Tensor::randn(&[4, 3, 3, 3], 10);
    let cb = Tensor::randn(&[4], 11);
    let mean = Tensor::randn(&[4], 12);
    let var = Tensor::randn(&[4], 13).abs() + 0.5;
    let (g, b) = (Tensor::randn(&[4], 14), Tensor::randn(&[4], 15));
    let (fw, fb) = tilejit::nn::fold_batch_norm(&w, Some(&cb), &mean, &var, &g, &b, 1e-5).unwrap();
    let want = with_mode(RunMode::Reference, || {
        (x.conv2d(&w, 2, 1) + cb.reshape(&[4, 1, 1]))
            .batch_norm(&mean, &var, Some(&g), Some(&b), 1e-5)
            .into_result()
    })
    .unwrap();
    let got = (x.conv2d(&fw, 2, 1) + fb.reshape(&[4, 1, 1]))
        .into_result()
        .unwrap();
    assert_close(&vals(&got), &f64s(&vals(&want)), 1e-4);
}

#[test]
fn nn_layers_reject_bad_shapes_naming_the_callers_line() {
    let x = Tensor::ones(&[2, 3], DType::F32);
    let img = Tensor::ones(&[1, 2, 4, 4], DType::F32);
    let v2 = Tensor::ones(&[2], DType::F32);
    let v3 = Tensor::ones(&[3], DType::F32);
    use tilejit::ErrorKind::Shape;
    check_error_cases(
        file!(),
        vec![
            (line!(), x.linear(&v3, None), Shape, "must be [out, in]"),
            (
                line!(),
                x.linear(&Tensor::ones(&[4, 2], DType::F32), None),
                Shape,
                "[.., 2]",
            ),
            (
                line!(),
                x.linear(&x, Some(&v3)),
                Shape,
                "bias [3] must be [2]",
            ),
            (
                line!(),
                img.batch_norm(&v3, &v2, None, None, 1e-5),
                Shape,
                "running mean",
            ),
            (
                line!(),
                v2.batch_norm(&v2, &v2, None, None, 1e-5),
                Shape,
                "rank 2 or more",
            ),
            (
                line!(),
                img.batch_norm(&v2, &v2, None, Some(&v3), 1e-5),
                Shape,
                "bias",
            ),
            (line!(), x.adaptive_avg_pool2d(1, 1), Shape, "NCHW"),
            (line!(), img.adaptive_avg_pool2d(0, 1), Shape, "non-empty"),
        ],
    );
    let w = Tensor::ones(&[2, 3, 1, 1], DType::F32);
    let e = tilejit::nn::fold_batch_norm(&w, None, &v2, &v3, &v2, &v2, 1e-5).unwrap_err();
    assert!(e.to_string().contains("running var [3] must be [2]"), "{e}");
    assert!(e.to_string().contains(file!()), "{e}");
}

const TINY_GPT: gpt2::Config = gpt2::Config {
    layers: 2,
    heads: 4,
    d: 64,
    ctx: 32,
    vocab: 97,
};

/// The tiny GPT-2, written to a safetensors file in HF's layout and
/// loaded back.
fn tiny_gpt() -> gpt2::Gpt2 {
    let dir = TempDir::new("models-gpt2");
    let path = dir.join("model.safetensors");
    let ckpt = gpt2::random_checkpoint(TINY_GPT, 42);
    let named: Vec<(&str, &Tensor)> = ckpt.iter().map(|(n, t)| (n.as_str(), t)).collect();
    tilejit::io::save_safetensors(&path, &named).unwrap();
    let m = gpt2::Gpt2::load(&path, TINY_GPT.heads).unwrap();
    assert_eq!(m.config(), TINY_GPT);
    m
}

#[test]
fn tiny_gpt2_logits_match_the_reference_interpreter() {
    let m = tiny_gpt();
    let ids = Tensor::from_vec(vec![5i64, 90, 17, 0, 33, 64, 2], &[7]).unwrap();
    let want = with_mode(RunMode::Reference, || gpt2::forward(&m, &ids)).unwrap();
    assert_eq!(want.shape(), [7, 97]);
    let want = f64s(&vals(&want));
    for mode in MODES {
        let got = with_mode(mode, || gpt2::forward(&m, &ids)).unwrap();
        assert_close(&vals(&got), &want, 1e-4);
    }
}

#[test]
fn tiny_gpt2_cached_decoding_equals_full_recomputation() {
    let m = tiny_gpt();
    let prompt = [3i64, 14, 15, 92, 65];
    let cap = 9;
    for mode in [RunMode::Host, RunMode::Sim] {
        with_mode(mode, || {
            let ids = Tensor::from_vec(prompt.to_vec(), &[prompt.len()]).unwrap();
            let (mut logits, mut k, mut v) = gpt2::prefill(&m, &ids, cap).unwrap();
            assert_eq!(k.shape(), [2, 4, cap, 16]);
            let mut tokens = prompt.to_vec();
            while tokens.len() < cap {
                // The full forward's last row is the cached pass's logits.
                let all = Tensor::from_vec(tokens.clone(), &[tokens.len()]).unwrap();
                let t = tokens.len() as isize;
                let full = gpt2::forward(&m, &all).unwrap().slice(0, t - 1, t);
                assert_close(&vals(&logits), &f64s(&vals(&full)), 1e-4);
                let next = logits.argmax(-1, false).to_vec::<i64>().unwrap()[0];
                tokens.push(next);
                let tok = Tensor::from_vec(vec![next], &[1]).unwrap();
                let pos = Tensor::from_vec(vec![t as i64], &[1]).unwrap();
                (logits, k, v) = gpt2::decode_step(&m, &tok, &pos, &k, &v).unwrap();
            }
            // One program for every step: the position is a runtime value.
            assert_eq!(gpt2::decode_step::jit().handlers().len(), 1);
            let steps = gpt2::greedy_step::jit().handlers().len();
            // `generate`: the prompt pass's token, then one per step.
            tokens.push(logits.argmax(-1, false).to_vec::<i64>().unwrap()[0]);
            let n = tokens.len() - prompt.len();
            assert_eq!(
                gpt2::generate(&m, &prompt, n).unwrap(),
                tokens[prompt.len()..]
            );
            // One more program at most for all of `generate`'s steps.
            assert!(gpt2::greedy_step::jit().handlers().len() <= steps + 1);
        });
    }
}

#[test]
fn a_bad_gpt2_checkpoint_is_a_clean_error() {
    let mut ckpt = gpt2::random_checkpoint(TINY_GPT, 1);
    let e = gpt2::Gpt2::from_checkpoint(ckpt.clone(), 5).err().unwrap();
    assert!(
        e.to_string().contains("5 heads do not divide the width 64"),
        "{e}"
    );
    ckpt.remove("transformer.h.1.mlp.c_fc.bias");
    let e = gpt2::Gpt2::from_checkpoint(ckpt.clone(), 4).err().unwrap();
    assert!(e.to_string().contains("h.1.mlp.c_fc.bias"), "{e}");
    ckpt.insert(
        "transformer.h.1.mlp.c_fc.bias".into(),
        Tensor::ones(&[7], DType::F32),
    );
    let e = gpt2::Gpt2::from_checkpoint(ckpt, 4).err().unwrap();
    assert!(e.to_string().contains("expected [256]"), "{e}");
    // The embeddings and final norm are checked too (a review found a
    // scalar `wpe` passed the load and panicked in `config()`).
    for (name, shape) in [
        ("transformer.wpe.weight", &[][..]),
        ("transformer.wpe.weight", &[32, 65][..]),
        ("transformer.ln_f.bias", &[63][..]),
        ("transformer.wte.weight", &[5, 64, 1][..]),
    ] {
        let mut ckpt = gpt2::random_checkpoint(TINY_GPT, 1);
        ckpt.insert(name.into(), Tensor::ones(shape, DType::F32));
        let e = gpt2::Gpt2::from_checkpoint(ckpt, 4).err().unwrap();
        let short = name.trim_start_matches("transformer.");
        assert!(
            e.to_string().contains(&format!("{short} is")),
            "{name}: {e}"
        );
    }
    let m = tiny_gpt();
    assert!(
        gpt2::Decoder::new(&m, &[1, 2, 3], 40).is_err(),
        "a cache past the context"
    );
}

#[test]
fn tiny_resnet18_matches_the_reference_and_the_unfolded_net() {
    let ckpt = resnet18::random_checkpoint(4, 10, 7);
    let m = resnet18::ResNet18::from_checkpoint(ckpt.clone()).unwrap();
    let x = Tensor::randn(&[2, 3, 32, 32], 99);
    let want = with_mode(RunMode::Reference, || resnet18::forward(&m, &x)).unwrap();
    assert_eq!(want.shape(), [2, 10]);
    let want = f64s(&vals(&want));
    for mode in MODES {
        let got = with_mode(mode, || resnet18::forward(&m, &x)).unwrap();
        assert_close(&vals(&got), &want, 1e-4);
    }
    // The same net with its batch norms applied, not folded.
    let unfolded = with_mode(RunMode::Reference, || {
        let p = |n: &str| &ckpt[n];
        let conv_bn = |x: &Tensor, conv: &str, bn: &str, stride, pad| {
            x.conv2d(p(&format!("{conv}.weight")), stride, pad)
                .batch_norm(
                    p(&format!("{bn}.running_mean")),
                    p(&format!("{bn}.running_var")),
                    Some(p(&format!("{bn}.weight"))),
                    Some(p(&format!("{bn}.bias"))),
                    1e-5,
                )
        };
        let x = conv_bn(&x, "conv1", "bn1", 2, 3).relu();
        let mut x = x
            .pad(&[(0, 0), (0, 0), (1, 1), (1, 1)], f64::NEG_INFINITY)
            .max_pool2d(3, 2);
        for stage in 1..=4 {
            for j in 0..2 {
                let l = format!("layer{stage}.{j}");
                let s = if j == 0 && stage > 1 { 2 } else { 1 };
                let h = conv_bn(&x, &format!("{l}.conv1"), &format!("{l}.bn1"), s, 1).relu();
                let h = conv_bn(&h, &format!("{l}.conv2"), &format!("{l}.bn2"), 1, 1);
                let skip = if s == 2 {
                    let (d0, d1) = (format!("{l}.downsample.0"), format!("{l}.downsample.1"));
                    conv_bn(&x, &d0, &d1, 2, 0)
                } else {
                    x.clone()
                };
                x = (h + skip).relu();
            }
        }
        x.mean(-1, false)
            .mean(-1, false)
            .matmul(&p("fc.weight").transpose(0, 1))
            + p("fc.bias")
    });
    assert_close(&vals(&unfolded), &want, 1e-4);
}

#[test]
fn a_resnet18_checkpoint_without_a_tensor_is_a_clean_error() {
    let mut ckpt = resnet18::random_checkpoint(2, 3, 1);
    ckpt.remove("layer3.0.downsample.1.running_var");
    let e = resnet18::ResNet18::from_checkpoint(ckpt).err().unwrap();
    assert!(
        e.to_string().contains("layer3.0.downsample.1.running_var"),
        "{e}"
    );
}
