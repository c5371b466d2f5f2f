//! GPT-2's decode products one shape at a time on the host: `gemv`
//! prints, per shape, the median µs per call of `x @ W` (a row times a
//! weight, or times a transposed weight as the tied lm_head reads it) and
//! the weight bytes read per second. The weights cycle through copies
//! that together exceed the last-level cache, as a real model's do, so
//! every call reads its weight from memory. Results are checked against
//! the reference interpreter once per shape.

use std::time::Instant;
use tilejit::prelude::*;
use tilejit_benches::products::{checked, times, times_transposed, weight_copies, Product, GPT2};

/// Bytes of weight copies cycled through per shape (above the 260 MB L3
/// this machine reports).
const CYCLE_BYTES: usize = 640 << 20;

fn main() {
    let gap = std::env::var("GAP_US")
        .ok()
        .and_then(|g| g.parse().ok())
        .map(std::time::Duration::from_micros);
    for (i, &(name, k, n, transposed)) in GPT2.iter().enumerate() {
        let f: Product = if transposed { times_transposed } else { times };
        let x = Tensor::randn(&[1, k], 3 * i as u64);
        let ws = weight_copies(k, n, transposed, CYCLE_BYTES);
        let copies = ws.len();
        checked(name, f, &x, &ws[0]);
        let call = |w: &Tensor| with_mode(RunMode::Host, || f(&x, w)).expect("product runs");
        let mut runs = Vec::new();
        let start = Instant::now();
        let mut c = 0;
        while runs.len() < 3 * copies || start.elapsed().as_secs_f64() < 1.0 {
            if let Some(gap) = gap {
                std::thread::sleep(gap);
            }
            let t = Instant::now();
            drop(call(&ws[c % copies]));
            runs.push(t.elapsed().as_secs_f64());
            c += 1;
        }
        runs.sort_by(f64::total_cmp);
        let t = runs[runs.len() / 2];
        println!(
            "{name:<22} {:9.1} µs  {:5.1} GB/s",
            t * 1e6,
            (4 * k * n) as f64 / t / 1e9
        );
    }
}
