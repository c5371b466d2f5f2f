//! The GPT example (`frontend/examples/gpt.rs`) against the same model
//! written here from scratch in f64 loops over the weights file it writes:
//! the logits of a prompt on Host, Sim and Verify, and greedy decoding.

#[allow(dead_code, unreachable_pub)]
#[path = "../../frontend/examples/gpt.rs"]
mod example;

use example::{CTX, D, FF, HEADS, LAYERS, VOCAB};
use std::collections::BTreeMap;
use tilejit::prelude::*;
use tilejit_tests::TempDir;

/// The weights as f64, by name.
fn weights(path: &std::path::Path) -> BTreeMap<String, Vec<f64>> {
    tilejit::io::load_safetensors(path)
        .unwrap()
        .into_iter()
        .map(|(k, t)| {
            (
                k,
                t.to_vec::<f32>()
                    .unwrap()
                    .into_iter()
                    .map(f64::from)
                    .collect(),
            )
        })
        .collect()
}

/// `x [t, n] @ w [n, m] + b`.
fn linear(x: &[f64], t: usize, n: usize, w: &[f64], b: &[f64]) -> Vec<f64> {
    let m = b.len();
    let mut y = vec![0.0; t * m];
    for r in 0..t {
        for c in 0..m {
            let mut s = b[c];
            for k in 0..n {
                s += x[r * n + k] * w[k * m + c];
            }
            y[r * m + c] = s;
        }
    }
    y
}

fn layer_norm(x: &[f64], n: usize, g: &[f64], b: &[f64]) -> Vec<f64> {
    x.chunks(n)
        .flat_map(|row| {
            let mean = row.iter().sum::<f64>() / n as f64;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
            let inv = 1.0 / (var + 1e-5).sqrt();
            (0..n).map(move |i| (row[i] - mean) * inv * g[i] + b[i])
        })
        .collect()
}

/// erf by its Taylor series (|x| < 3 here), to about 1e-15.
fn erf(x: f64) -> f64 {
    if x.abs() > 5.0 {
        return x.signum();
    }
    let (mut term, mut sum, mut k) = (x, x, 0.0f64);
    while term.abs() > 1e-17 * sum.abs().max(1e-300) {
        k += 1.0;
        term *= -x * x / k;
        sum += term / (2.0 * k + 1.0);
        if k > 200.0 {
            break;
        }
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

/// The model's logits `[t, VOCAB]` for `tokens`, from the definition.
fn reference(w: &BTreeMap<String, Vec<f64>>, tokens: &[i64]) -> Vec<f64> {
    let t = tokens.len();
    let (dh, get) = (D / HEADS, |n: &str| &w[n]);
    let mut x = vec![0.0; t * D];
    for (r, &tok) in tokens.iter().enumerate() {
        for c in 0..D {
            x[r * D + c] = get("wte")[tok as usize * D + c] + get("wpe")[r * D + c];
        }
    }
    for l in 0..LAYERS {
        let p = |n: &str| get(&format!("h.{l}.{n}")).clone();
        let h = layer_norm(&x, D, &p("ln1_g"), &p("ln1_b"));
        let q = linear(&h, t, D, &p("wq"), &p("bq"));
        let k = linear(&h, t, D, &p("wk"), &p("bk"));
        let v = linear(&h, t, D, &p("wv"), &p("bv"));
        let mut a = vec![0.0; t * D];
        for hd in 0..HEADS {
            for i in 0..t {
                // Causal: position i attends to 0..=i.
                let s: Vec<f64> = (0..=i)
                    .map(|j| {
                        (0..dh)
                            .map(|e| q[i * D + hd * dh + e] * k[j * D + hd * dh + e])
                            .sum::<f64>()
                            / (dh as f64).sqrt()
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = s.iter().map(|v| (v - m).exp()).sum();
                for e in 0..dh {
                    a[i * D + hd * dh + e] = (0..=i)
                        .map(|j| (s[j] - m).exp() / z * v[j * D + hd * dh + e])
                        .sum();
                }
            }
        }
        let o = linear(&a, t, D, &p("wo"), &p("bo"));
        x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
        let h = layer_norm(&x, D, &p("ln2_g"), &p("ln2_b"));
        let f: Vec<f64> = linear(&h, t, D, &p("w1"), &p("b1"))
            .into_iter()
            .map(|u| 0.5 * u * (1.0 + erf(u / 2f64.sqrt())))
            .collect();
        let o = linear(&f, t, FF, &p("w2"), &p("b2"));
        x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
    }
    let h = layer_norm(&x, D, get("lnf_g"), get("lnf_b"));
    // Tied: the token embedding, transposed.
    let mut out = vec![0.0; t * VOCAB];
    for r in 0..t {
        for c in 0..VOCAB {
            out[r * VOCAB + c] = (0..D).map(|k| h[r * D + k] * get("wte")[c * D + k]).sum();
        }
    }
    out
}

fn argmax(row: &[f64]) -> i64 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as i64
}

#[test]
fn the_gpt_example_matches_a_model_written_from_scratch() {
    let dir = TempDir::new("gpt");
    let path = dir.join("weights.safetensors");
    example::write_weights(&path, 7).unwrap();
    let w = weights(&path);
    let model = example::load(&path).unwrap();
    let prompt = [5i64, 17, 2, 88, 40, 41, 3];
    let want = reference(&w, &prompt);
    for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
        let ids = Tensor::from_vec(prompt.to_vec(), &[prompt.len()]).unwrap();
        let got = with_mode(mode, || example::forward(&model, &ids)).unwrap();
        assert_eq!(got.shape(), [prompt.len(), VOCAB]);
        let got = got.to_vec::<f32>().unwrap();
        for (i, (g, r)) in got.iter().zip(&want).enumerate() {
            assert!(
                (f64::from(*g) - r).abs() <= 1e-3 * r.abs().max(1.0),
                "{mode:?} logit {i}: {g} vs {r}"
            );
        }
    }
    // Greedy decoding, by the reference's own argmax each step.
    let mut tokens = prompt.to_vec();
    for _ in 0..6 {
        let l = reference(&w, &tokens);
        let last = &l[(tokens.len() - 1) * VOCAB..];
        tokens.push(argmax(last));
    }
    assert!(tokens.len() <= CTX);
    let got = example::generate(&model, &prompt, 6).unwrap();
    assert_eq!(got, tokens[prompt.len()..], "greedy tokens");
    let sim = with_mode(RunMode::Sim, || example::generate(&model, &prompt, 6)).unwrap();
    assert_eq!(sim, got, "greedy tokens on Sim");
}

/// The same model on a remote device (a server on loopback): weights
/// uploaded once, every forward pass a program shipped by content key,
/// the argmax and slice eager ops run there too. Logits equal the host's
/// bit for bit (the server compiles the same graphs), so the greedy
/// tokens are the same.
#[cfg(feature = "remote")]
#[test]
fn the_gpt_example_decodes_the_same_on_a_remote_device() {
    use tilejit::remote::{ServeOptions, Server};
    let dir = TempDir::new("gpt-remote");
    let path = dir.join("weights.safetensors");
    example::write_weights(&path, 11).unwrap();
    let model = example::load(&path).unwrap();
    let server = Server::start(ServeOptions {
        token: "gpt".into(),
        ..ServeOptions::default()
    })
    .unwrap();
    let remote = tilejit::Device::remote(&server.addr().to_string(), "gpt").unwrap();
    let (on_server, up) = tilejit::count_transfers(|| model.to(&remote).unwrap());
    let n: usize = example::weight_shapes()
        .iter()
        .map(|(_, s)| s.iter().product::<usize>())
        .sum();
    assert_eq!(up.to_device_bytes, 4 * n as u64, "every weight once");
    let prompt = [9i64, 30, 1, 77, 12];
    let ids = Tensor::from_vec(prompt.to_vec(), &[prompt.len()]).unwrap();
    let host = with_mode(RunMode::Host, || example::forward(&model, &ids)).unwrap();
    let got = example::forward(&on_server, &ids.to(&remote).unwrap()).unwrap();
    assert_eq!(got.device(), remote);
    let bits = |t: &Tensor| -> Vec<u32> {
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    };
    assert_eq!(bits(&got), bits(&host));
    let want = with_mode(RunMode::Host, || example::generate(&model, &prompt, 5)).unwrap();
    let (tokens, moved) = tilejit::count_transfers(|| example::generate(&on_server, &prompt, 5));
    assert_eq!(tokens.unwrap(), want, "greedy tokens on the server");
    // Per step: the ids up (8 bytes a token), one i64 back.
    assert_eq!(moved.to_host_bytes, 5 * 8);
}

#[test]
fn a_weights_file_without_a_tensor_is_a_clean_error() {
    let dir = TempDir::new("gpt-bad");
    let path = dir.join("partial.safetensors");
    let one = Tensor::zeros(&[2], DType::F32);
    tilejit::io::save_safetensors(&path, &[("wte", &one)]).unwrap();
    let err = example::load(&path).err().expect("missing tensors");
    assert!(err.to_string().contains("no tensor"), "{err}");
}
