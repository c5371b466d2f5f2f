//! `tilejit-benches`: the workloads W1-W8 of `shared/design.md`, defined as
//! `../shared/peers/README.md` defines them (same shapes, same formulas,
//! output allocated per call), run by the `bench` binary, which checks each
//! result against the reference interpreter before timing it.

use std::time::{Duration, Instant};

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
