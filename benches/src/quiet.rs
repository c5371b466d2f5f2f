//! Waiting for a quiet machine before a workload, by the rule the peers'
//! runner (`peers.py --quiet-wait`) applies: a 2 s window in which other
//! processes use under a quarter of a core and steal is under 10%, read
//! from `/proc/stat`'s aggregate line while this process sleeps. Without
//! it, W12b1 started as onnxruntime's process exited came out 10-20%
//! slower on the 2-core VM (16.6-18.9 ms against 14.8-16.5 ms, alternated).

use std::time::{Duration, Instant};

/// The load seen in the last window.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Cores kept busy by others.
    pub busy_cores: f64,
    /// The share of time the hypervisor took.
    pub steal: f64,
}

impl Load {
    /// Whether the window was quiet by the peers' rule.
    pub fn quiet(self) -> bool {
        self.busy_cores < 0.25 && self.steal < 0.10
    }
}

/// `/proc/stat`'s aggregate jiffies: user, nice, system, idle, iowait,
/// irq, softirq, steal (fewer on old kernels: missing ones read 0).
fn jiffies() -> Option<[u64; 8]> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let mut j = [0u64; 8];
    for (slot, field) in j.iter_mut().zip(line.split_whitespace().skip(1)) {
        *slot = field.parse().ok()?;
    }
    Some(j)
}

/// The load over one `window` of sleep, if `/proc/stat` can be read.
fn measure(window: Duration) -> Option<Load> {
    let a = jiffies()?;
    std::thread::sleep(window);
    let b = jiffies()?;
    let d: Vec<f64> = a
        .iter()
        .zip(&b)
        .map(|(a, b)| b.saturating_sub(*a) as f64)
        .collect();
    let total: f64 = d.iter().sum::<f64>().max(1.0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    Some(Load {
        busy_cores: (total - d[3] - d[4] - d[7]) / total * cores,
        steal: d[7] / total,
    })
}

/// Waits, at most `max`, for a quiet 2 s window; the last window's load,
/// or `None` where `/proc/stat` cannot be read (not Linux).
pub fn wait_quiet(max: Duration) -> Option<Load> {
    let end = Instant::now() + max;
    loop {
        let load = measure(Duration::from_secs(2))?;
        if load.quiet() || Instant::now() >= end {
            return Some(load);
        }
    }
}
