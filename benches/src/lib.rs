//! `tilejit-benches`: the workloads W1-W8 as `benches/WORKLOADS.md` defines
//! them (the peers' shapes and formulas, output allocated per call), run by
//! the `bench` binary, which checks each result against the reference
//! interpreter before timing it. Results: `benches/RESULTS.md`.

use std::time::{Duration, Instant};

/// The workloads' jit functions, shared by the `bench` binary and the
/// criterion benches.
pub mod workloads {
    use tilejit::prelude::*;

    /// W1 and W8: `relu(x*w + b)`.
    #[jit]
    pub fn bias_relu(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
        (x * w + b).relu()
    }

    /// W8 with shape classes: `bias_relu`, traced once for all sizes.
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
