//! `tilejit-benches`: the workloads W1-W12 as `benches/WORKLOADS.md` defines
//! them (the peers' shapes and formulas, output allocated per call), run by
//! the `bench` binary, which checks each result against the reference
//! interpreter (W10-W12: the peers' torch outputs) before timing it, and
//! the real models (`models`) its examples run. Results: `benches/RESULTS.md`.

use std::time::{Duration, Instant};

pub mod quiet;

/// The workloads' jit functions, shared by the `bench` binary and the
/// criterion benches.
pub mod workloads {
    use tilejit::prelude::*;

    /// W1 and W8: `relu(x*w + b)`.
    #[jit]
    pub fn bias_relu(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
        (x * w + b).relu()
    }

    /// W8 with shape classes: `bias_relu`, traced exactly at the first size,
    /// then once as a class for every later size (automatic dynamic).
    #[jit(dynamic)]
    pub fn bias_relu_dynamic(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
        (x * w + b).relu()
    }

    /// W2: GELU, tanh approximation.
    #[jit]
    pub fn gelu(x: &Tensor) -> Tensor {
        x.gelu()
    }

    /// W3: row softmax.
    #[jit]
    pub fn softmax(x: &Tensor) -> Tensor {
        x.softmax(-1)
    }

    /// W4 and W7: layernorm over the last axis.
    #[jit]
    pub fn layernorm(x: &Tensor, g: &Tensor, b: &Tensor) -> Tensor {
        x.layer_norm(g, b, 1e-5)
    }

    /// W5: `gelu(a@b + bias)`.
    #[jit]
    pub fn matmul_bias_gelu(a: &Tensor, b: &Tensor, bias: &Tensor) -> Tensor {
        (a.matmul(b) + bias).gelu()
    }

    /// W6: `x + y`.
    #[jit]
    pub fn add(x: &Tensor, y: &Tensor) -> Tensor {
        x + y
    }

    /// W9's sizes: one GPT-2-small block, batch 1.
    pub const T9: usize = 256;
    /// Model width.
    pub const D9: usize = 768;
    /// Attention heads.
    pub const H9: usize = 12;
    /// MLP width.
    pub const F9: usize = 3072;
    /// W9's floating-point operations (the matmuls, as `peers.py` counts).
    pub const W9_FLOPS: usize =
        2 * T9 * D9 * D9 * 4 + 2 * 2 * H9 * T9 * T9 * (D9 / H9) + 2 * 2 * T9 * D9 * F9;

    /// `[T, D]` -> `[H, T, D/H]`.
    fn heads(t: &Tensor) -> Tensor {
        t.reshape(&[T9, H9, D9 / H9]).permute(&[1, 0, 2])
    }

    /// W9: one GPT-2-small block as `peers.py` writes it: pre-LN, causal
    /// attention (the mask is an input), tanh-GELU MLP, separate Q/K/V
    /// weights.
    #[jit]
    #[allow(clippy::too_many_arguments)]
    pub fn gpt2_block(
        x: &Tensor,
        g1: &Tensor,
        b1: &Tensor,
        wq: &Tensor,
        bq: &Tensor,
        wk: &Tensor,
        bk: &Tensor,
        wv: &Tensor,
        bv: &Tensor,
        wo: &Tensor,
        bo: &Tensor,
        g2: &Tensor,
        b2: &Tensor,
        wf: &Tensor,
        bf: &Tensor,
        wp: &Tensor,
        bp: &Tensor,
        mask: &Tensor,
    ) -> Tensor {
        let h = x.layer_norm(g1, b1, 1e-5);
        let (q, k, v) = (
            heads(&(h.matmul(wq) + bq)),
            heads(&(h.matmul(wk) + bk)),
            heads(&(h.matmul(wv) + bv)),
        );
        let scale = 1.0 / ((D9 / H9) as f64).sqrt();
        let a = (q.matmul(&k.transpose(-1, -2)) * scale + mask)
            .softmax(-1)
            .matmul(&v);
        let x = x + a.permute(&[1, 0, 2]).reshape(&[T9, D9]).matmul(wo) + bo;
        let h = x.layer_norm(g2, b2, 1e-5);
        &x + (h.matmul(wf) + bf).gelu().matmul(wp) + bp
    }
}

/// Median of timed calls after `warmup` calls: at least `min_reps` calls
/// and at least ~1 s of timed work.
pub fn median_time(warmup: usize, min_reps: usize, mut f: impl FnMut()) -> Duration {
    for _ in 0..warmup {
        f();
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < min_reps || start.elapsed() < Duration::from_secs(1) {
        let t = Instant::now();
        f();
        times.push(t.elapsed());
        if times.len() >= 1000 {
            break;
        }
    }
    times.sort();
    times[times.len() / 2]
}

/// Largest relative difference (over max(1, |want|)) between two vectors.
pub fn max_rel_err(got: &[f64], want: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / w.abs().max(1.0))
        .fold(0.0, f64::max)
}

/// GPT-2's products one shape at a time (the `gemv` and `gemm` binaries):
/// `x @ W`, or `x @ W^T` as the tied lm_head reads it.
pub mod products {
    use super::max_rel_err;
    use tilejit::prelude::*;

    /// GPT-2 124M's products: (name, k, n, whether `W` is read
    /// transposed).
    pub const GPT2: [(&str, usize, usize, bool); 5] = [
        ("qkv 768x2304", 768, 2304, false),
        ("attn proj 768x768", 768, 768, false),
        ("fc 768x3072", 768, 3072, false),
        ("mlp proj 3072x768", 3072, 768, false),
        ("lm_head 768x50257^T", 768, 50257, true),
    ];

    /// Random copies of a `[k, n]` weight (`[n, k]` when `transposed`),
    /// scaled by `1/sqrt(k)`, at least two and together at least `bytes`:
    /// cycled through, each call reads its weight from memory.
    pub fn weight_copies(k: usize, n: usize, transposed: bool, bytes: usize) -> Vec<Tensor> {
        let dims = if transposed { [n, k] } else { [k, n] };
        let copies = bytes.div_ceil(4 * k * n).max(2);
        (0..copies)
            .map(|c| Tensor::randn(&dims, 1000 + c as u64) * (1.0 / (k as f64).sqrt()))
            .collect()
    }

    /// A product as the binaries call it.
    pub type Product = fn(&Tensor, &Tensor) -> tilejit::Result<Tensor>;

    /// `x @ w`.
    #[jit]
    pub fn times(x: &Tensor, w: &Tensor) -> Tensor {
        x.matmul(w)
    }

    /// `x @ w^T`, the weight read transposed in place.
    #[jit]
    pub fn times_transposed(x: &Tensor, w: &Tensor) -> Tensor {
        x.matmul(&w.transpose(0, 1))
    }

    /// `f(x, w)` on the host, checked against the reference interpreter
    /// (relative error below 1e-3; `name` in the panic otherwise).
    pub fn checked(name: &str, f: Product, x: &Tensor, w: &Tensor) {
        let on = |mode| with_mode(mode, || f(x, w)).expect("product runs");
        let values = |t: Tensor| -> Vec<f64> {
            let v = t.to_vec::<f32>().expect("f32");
            v.into_iter().map(f64::from).collect()
        };
        let err = max_rel_err(&values(on(RunMode::Host)), &values(on(RunMode::Reference)));
        assert!(err < 1e-3, "{name}: differs from the reference by {err:e}");
    }
}

/// Real models (W10-W12 and the examples): GPT-2 and ResNet-18 from their
/// HF and torchvision checkpoints.
pub mod models {
    pub mod gpt2;
    pub mod resnet18;
    pub mod workloads;
}
