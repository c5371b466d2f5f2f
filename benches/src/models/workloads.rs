//! W10-W12: GPT-2 124M decode and prefill, ResNet-18 at batch 1 and 8, on
//! the very weights and inputs the peers run (`peers.py --prepare` writes
//! them to `$PEERS_CACHE`, else `/tmp/peers-cache`). Each result is first
//! checked against the peers' eager-torch reference; a mismatch exits
//! with code 1, and an absent model cache is said and skipped.

use super::gpt2::{self, Gpt2};
use super::resnet18::{self, ResNet18};
use crate::median_time;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tilejit::prelude::*;

/// Where a workload's result goes: `emit(workload, field, value, extra)`,
/// with `extra` more JSON fields, each starting with `, `.
pub type Emit<'a> = &'a dyn Fn(&str, &str, f64, String);

/// The peers' model cache directory of `model`, if it holds the weights.
fn cache(workload: &str, model: &str) -> Option<PathBuf> {
    let root =
        std::env::var_os("PEERS_CACHE").map_or_else(|| "/tmp/peers-cache".into(), PathBuf::from);
    let dir = root.join(model);
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "{workload}: skipped: no model cache at {} (make it with `peers.py --prepare`, or set PEERS_CACHE)",
            dir.display()
        );
        None
    }
}

/// Exits with code 1 after saying why.
fn fail(workload: &str, why: impl std::fmt::Display) -> ! {
    eprintln!("{workload}: {why}");
    std::process::exit(1)
}

fn ok<T>(workload: &str, r: tilejit::Result<T>) -> T {
    r.unwrap_or_else(|e| fail(workload, e))
}

fn npy(workload: &str, dir: &Path, name: &str) -> Tensor {
    ok(workload, tilejit::io::read_npy(dir.join(name)))
}

/// The peers' check: `allclose(got, want, rtol=1e-4, atol=1e-4 *
/// max|want|)`; returns `max|got - want| / max|want|`.
fn allclose(workload: &str, got: &Tensor, want: &Tensor) -> f64 {
    let (g, w) = (
        ok(workload, got.to_vec::<f32>()),
        ok(workload, want.to_vec::<f32>()),
    );
    if g.len() != w.len() {
        fail(
            workload,
            format!("{} values, the reference has {}", g.len(), w.len()),
        );
    }
    let peak = w.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs()));
    let mut worst = 0f64;
    for (i, (&g, &w)) in g.iter().zip(&w).enumerate() {
        let (g, w) = (f64::from(g), f64::from(w));
        let d = (g - w).abs();
        if d.is_nan() || d > 1e-4 * peak + 1e-4 * w.abs() {
            fail(
                workload,
                format!("element {i} is {g}, the reference {w}: not allclose"),
            );
        }
        worst = worst.max(d);
    }
    worst / peak
}

/// GPT-2 124M from the cache.
fn gpt2_model(workload: &str, dir: &Path) -> Gpt2 {
    ok(workload, Gpt2::load(&dir.join("model.safetensors"), 12))
}

/// W10: a 16-token prompt pass, then 32 greedy steps with the KV cache;
/// tokens per second over the 32 steps (median of whole generations).
pub fn w10(emit: Emit) {
    let Some(dir) = cache("W10", "gpt2") else {
        return;
    };
    let m = gpt2_model("W10", &dir);
    let tokens = ok("W10", npy("W10", &dir, "tokens128.npy").to_vec::<i64>());
    let want = ok(
        "W10",
        npy("W10", &dir, "ref_decode_tokens.npy").to_vec::<i64>(),
    );
    let prompt = &tokens[..16];
    // One generation: (tokens, prompt pass time, the 32 steps' time).
    let generate = || {
        let t = Instant::now();
        let mut dec = ok("W10", gpt2::Decoder::new(&m, prompt, 16 + 32));
        let prompt_s = t.elapsed();
        let mut out = vec![dec.last()];
        let t = Instant::now();
        for _ in 0..32 {
            out.push(ok("W10", dec.step()));
        }
        (out, prompt_s, t.elapsed())
    };
    let t = Instant::now();
    let (got, _, _) = generate();
    let first = t.elapsed().as_secs_f64();
    if got != want {
        fail(
            "W10",
            format!("greedy tokens {got:?}, the reference {want:?}"),
        );
    }
    let mut runs: Vec<(Duration, Duration)> = Vec::new();
    let start = Instant::now();
    let _ = generate();
    while runs.len() < 3 || start.elapsed() < Duration::from_secs(1) {
        let (again, prompt_s, steps) = generate();
        if again != want {
            fail("W10", "greedy tokens changed between runs");
        }
        runs.push((steps, prompt_s));
    }
    runs.sort();
    let (steps, prompt_s) = runs[runs.len() / 2];
    emit(
        "W10",
        "tokens_per_s",
        32.0 / steps.as_secs_f64(),
        format!(
            ", \"steps_s\": {:.6}, \"prompt_s\": {:.6}, \"first_call_s\": {first:.3}",
            steps.as_secs_f64(),
            prompt_s.as_secs_f64()
        ),
    );
}

/// W11: the logits of all 128 positions, `[1, 128, 50257]`.
pub fn w11(emit: Emit) {
    let Some(dir) = cache("W11", "gpt2") else {
        return;
    };
    let m = gpt2_model("W11", &dir);
    let tokens = ok(
        "W11",
        npy("W11", &dir, "tokens128.npy")
            .reshape(&[128])
            .into_result(),
    );
    let want = npy("W11", &dir, "ref_prefill128_logits.npy");
    let t = Instant::now();
    let got = ok("W11", gpt2::forward(&m, &tokens));
    let first = t.elapsed().as_secs_f64();
    let err = allclose("W11", &got, &want);
    let s = median_time(1, 5, || drop(gpt2::forward(&m, &tokens))).as_secs_f64();
    emit(
        "W11",
        "median_s",
        s,
        format!(", \"err\": {err:.3e}, \"first_call_s\": {first:.3}"),
    );
}

/// W12b1 and W12b8: ResNet-18 on 224x224 images, at each batch size of
/// `batches` (1 and 8: the reference outputs the peers wrote).
pub fn w12(emit: Emit, batches: &[usize]) {
    let Some(dir) = cache("W12", "resnet18") else {
        return;
    };
    let m = ok("W12", ResNet18::load(&dir.join("model.safetensors")));
    let images = npy("W12", &dir, "images8.npy");
    for &n in batches {
        let name = &format!("W12b{n}");
        let x = ok(name, images.slice(0, 0, n as isize).into_result());
        let want = npy(name, &dir, &format!("ref_b{n}.npy"));
        let t = Instant::now();
        let got = ok(name, resnet18::forward(&m, &x));
        let first = t.elapsed().as_secs_f64();
        let err = allclose(name, &got, &want);
        let s = median_time(2, 7, || drop(resnet18::forward(&m, &x))).as_secs_f64();
        emit(
            name,
            "median_s",
            s,
            format!(
                ", \"images_per_s\": {:.3}, \"err\": {err:.3e}, \"first_call_s\": {first:.3}",
                n as f64 / s
            ),
        );
    }
}
