//! GPT-2's prefill products one shape at a time on the host: `gemm`
//! prints, per shape, the median ms per call of `x @ W` for 128 tokens
//! (`x` `[128, k]`, `W` a kept weight, or a transposed one as the tied
//! lm_head reads it) and its rate in GFLOP/s. The weights cycle through
//! copies that together exceed the last-level cache, each seen twice
//! before timing (the weight cache packs it then). Results are checked
//! against the reference interpreter once per shape. `SHAPES` picks
//! shapes by name prefix (`SHAPES=qkv,fc`); `RAYON_NUM_THREADS=1` times
//! one thread.

use std::time::Instant;
use tilejit::prelude::*;
use tilejit_benches::products::{checked, times, times_transposed, weight_copies, Product, GPT2};

/// Bytes of weight copies cycled through per shape: twice the L3 this
/// machine reports, so that each call reads its weight from memory as a
/// model's layers do.
const CYCLE_BYTES: usize = 64 << 20;

fn main() {
    let pick: Option<Vec<String>> = std::env::var("SHAPES")
        .ok()
        .map(|s| s.split(',').map(str::to_owned).collect());
    let m = 128;
    for (i, &(name, k, n, transposed)) in GPT2.iter().enumerate() {
        if let Some(p) = &pick {
            if !p.iter().any(|p| name.starts_with(p.as_str())) {
                continue;
            }
        }
        let f: Product = if transposed { times_transposed } else { times };
        let x = Tensor::randn(&[m, k], 3 * i as u64);
        let ws = weight_copies(k, n, transposed, CYCLE_BYTES);
        let copies = ws.len();
        checked(name, f, &x, &ws[0]);
        let call = |w: &Tensor| with_mode(RunMode::Host, || f(&x, w)).expect("product runs");
        // Each copy's second sighting packs it into kept panels.
        for w in ws.iter().chain(&ws) {
            drop(call(w));
        }
        let mut runs = Vec::new();
        let start = Instant::now();
        let mut c = 0;
        while runs.len() < 2 * copies || start.elapsed().as_secs_f64() < 1.0 {
            let t = Instant::now();
            drop(call(&ws[c % copies]));
            c += 1;
            runs.push(t.elapsed().as_secs_f64());
        }
        runs.sort_by(f64::total_cmp);
        let t = runs[runs.len() / 2];
        println!(
            "{name:<22} {:8.3} ms  {:6.1} GFLOP/s",
            t * 1e3,
            (2 * m * k * n) as f64 / t / 1e9
        );
    }
}
