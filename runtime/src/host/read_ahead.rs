//! Reading a product's weights ahead, while the kernels before it run on
//! one thread. A decode step streams ~500 MB of weights through products
//! of one row, each split over the pool; between two of them run small
//! kernels (attention over the cache, layer norms) on the calling thread
//! alone, ~60 µs a layer in GPT-2, while the memory bus and the other
//! workers, spinning for work (`awake`), idle. So when such a stretch
//! starts, an idle worker reads the next product's weight from its start,
//! and pulls it into the caches, until that product launches: the
//! product then finds its first rows on chip (onnxruntime's and
//! llama.cpp's decoders get the same overlap from a prefetching thread).
//!
//! Only reads: the weight is an argument or constant the run holds (the
//! job keeps its own handle), and a stop flag ends the job at the next
//! parallel launch, so it never holds a worker the product needs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tilejit_ir::kernel::{BufId, BufKind, KernelProgram};
use tilejit_ir::Array;

/// Weights smaller than this are not read ahead: the product itself
/// reads them in a few µs.
const MIN_BYTES: usize = 1 << 20;

/// At most this much of a weight is read ahead: the stretches before
/// GPT-2's products last tens of µs, and more would only evict what the
/// product reads first.
const MAX_BYTES: usize = 4 << 20;

/// The f32 elements one stop check covers (16 KiB).
const STEP: usize = 4096;

/// Per kernel, the weight to read ahead when that kernel starts: the
/// first kernel of a serial stretch names the weight of the one-row
/// product that ends it.
///
/// Idle kernels (which the run skips) neither start nor end a stretch.
pub(super) fn plan(prog: &KernelProgram, parallel: &[bool], idle: &[bool]) -> Vec<Option<BufId>> {
    let mut ahead = vec![None; prog.kernels.len()];
    let mut stretch_start = None;
    for (j, k) in prog.kernels.iter().enumerate() {
        if idle[j] {
            continue;
        }
        if !parallel[j] {
            stretch_start.get_or_insert(j);
            continue;
        }
        let weight = k.matmul.as_ref().filter(|m| {
            let b = prog.buffer(m.b);
            m.batch == 1
                && m.m <= 4
                && m.im2col.is_none()
                && b.ty.dtype == tilejit_ir::DType::F32
                && matches!(b.kind, BufKind::Input(_) | BufKind::Constant(_))
                && b.ty.shape.numel().saturating_mul(4) >= MIN_BYTES
        });
        if let (Some(m), Some(first)) = (weight, stretch_start) {
            ahead[first] = Some(m.b);
        }
        stretch_start = None;
    }
    ahead
}

/// A read-ahead in flight: stopping it (or dropping it) ends the job at
/// its next check.
pub(super) struct ReadAhead {
    stop: Arc<AtomicBool>,
}

impl ReadAhead {
    /// Starts reading `weight` on the pool (an idle worker takes it).
    pub(super) fn start(weight: &Array) -> ReadAhead {
        let stop = Arc::new(AtomicBool::new(false));
        let (job_stop, weight) = (stop.clone(), weight.clone());
        rayon::spawn(move || {
            read(&weight, &job_stop);
        });
        ReadAhead { stop }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Touches one element per cache line of `weight` from its start, up to
/// [`MAX_BYTES`], until `stop`; returns how many it touched.
fn read(weight: &Array, stop: &AtomicBool) -> usize {
    // A thread waiting in some run's launch picked this up (another run's
    // read, never stopped by this one): it has better things to do.
    if super::awake::in_run() {
        return 0;
    }
    let Ok(values) = weight.as_slice::<f32>() else {
        return 0;
    };
    let values = &values[..values.len().min(MAX_BYTES / 4)];
    let (mut acc, mut touched) = (0u32, 0);
    for piece in values.chunks(STEP) {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        // Independent loads, one per 64-byte line: the core keeps many in
        // flight, and the hardware prefetcher runs ahead of them.
        acc = piece.iter().step_by(16).fold(acc, |a, v| a ^ v.to_bits());
        touched += piece.len().div_ceil(16);
    }
    std::hint::black_box(acc);
    touched
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decode-style layer: a layer norm's reductions (serial kernels),
    /// then a one-row product with a 1.5 MiB weight (parallel), then a
    /// second product right after it, with no serial stretch between.
    const LAYER: &str = "graph {
  %0 = input 0 : f32[1,768]
  %1 = input 1 : f32[768,512]
  %2 = input 2 : f32[512,768]
  %3 = reduce_sum %0 axes=[1] : f32[1,1]
  %4 = broadcast %3 : f32[1,768]
  %5 = sub %0, %4 : f32[1,768]
  %6 = matmul %5, %1 : f32[1,512]
  %7 = matmul %6, %2 : f32[1,768]
  return %7
}";

    fn planned(text: &str) -> (KernelProgram, Vec<bool>, Vec<Option<BufId>>) {
        let g = tilejit_ir::text::parse(text).expect("parses");
        let prog = tilejit_ir::kernel::fuse(&g).expect("fuses");
        let parallel: Vec<bool> = prog
            .kernels
            .iter()
            .map(super::super::runs_in_parallel)
            .collect();
        let idle = vec![false; prog.kernels.len()];
        let ahead = plan(&prog, &parallel, &idle);
        (prog, parallel, ahead)
    }

    #[test]
    fn the_stretch_before_a_product_reads_its_weight() {
        let (prog, parallel, ahead) = planned(LAYER);
        let products: Vec<usize> = (0..prog.kernels.len()).filter(|&i| parallel[i]).collect();
        assert_eq!(products.len(), 2, "{prog:?}");
        let first = products[0];
        assert!(first > 0, "a serial kernel comes first");
        let weight = prog.kernels[first].matmul.as_ref().expect("a product").b;
        assert!(matches!(prog.buffer(weight).kind, BufKind::Input(1)));
        // Only the stretch's first kernel starts a read; the second
        // product follows the first with nothing between to overlap.
        let starts: Vec<(usize, BufId)> = ahead
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.map(|b| (i, b)))
            .collect();
        assert_eq!(starts, [(0, weight)]);
    }

    #[test]
    fn a_stretch_starts_at_its_first_kernel_that_runs() {
        // A softmax (two serial kernels) before the products.
        let softmax = "graph {
  %0 = input 0 : f32[1,768]
  %1 = input 1 : f32[768,512]
  %2 = reduce_max %0 axes=[1] : f32[1,1]
  %3 = broadcast %2 : f32[1,768]
  %4 = sub %0, %3 : f32[1,768]
  %5 = exp %4 : f32[1,768]
  %6 = reduce_sum %5 axes=[1] : f32[1,1]
  %7 = broadcast %6 : f32[1,768]
  %8 = div %5, %7 : f32[1,768]
  %9 = matmul %8, %1 : f32[1,512]
  return %9
}";
        let (prog, parallel, ahead) = planned(softmax);
        assert_eq!(parallel, [false, false, true], "{prog:?}");
        let weight = ahead[0].expect("read at the stretch's start");
        let mut idle = vec![false; 3];
        idle[0] = true;
        assert_eq!(plan(&prog, &parallel, &idle), [None, Some(weight), None]);
        idle[1] = true;
        assert_eq!(plan(&prog, &parallel, &idle), [None, None, None]);
    }

    #[test]
    fn runs_that_read_ahead_match_the_interpreter() {
        let g = tilejit_ir::text::parse(LAYER).expect("parses");
        let values = |n: usize, seed: f32| -> Vec<f32> {
            (0..n).map(|i| (i as f32 * 0.37 + seed).sin()).collect()
        };
        let inputs = [
            Array::from_vec(values(768, 0.1), &[1, 768]).expect("x"),
            Array::from_vec(values(768 * 512, 0.2), &[768, 512]).expect("w1"),
            Array::from_vec(values(512 * 768, 0.3), &[512, 768]).expect("w2"),
        ];
        let want = tilejit_ir::interp::run(&g, &inputs, &[]).expect("interprets");
        let want = want[0].as_slice::<f32>().expect("f32").to_vec();
        let prog = crate::HostProgram::compile(&g).expect("compiles");
        let check = |got: Vec<Array>| {
            let got = got[0].as_slice::<f32>().expect("f32");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() <= 1e-3 * (1.0 + w.abs()), "{i}: {g} vs {w}");
            }
        };
        // From outside the pool (the run starts its spinners, which take
        // the reads), many times over; then inside a caller's one-thread
        // pool, where nothing would take a read.
        for _ in 0..50 {
            check(prog.run(&inputs, &[]).expect("runs"));
        }
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a pool");
        one.install(|| check(prog.run(&inputs, &[]).expect("runs in a pool")));
    }

    #[test]
    fn a_read_stops_at_its_limit_its_flag_or_a_run() {
        let w = Array::from_vec(vec![1.0f32; 2 << 20], &[2 << 20]).expect("w");
        // One element per 64-byte line of the first 4 MiB.
        assert_eq!(read(&w, &AtomicBool::new(false)), (MAX_BYTES / 4) / 16);
        assert_eq!(read(&w, &AtomicBool::new(true)), 0);
        // Inside a run, a thread waiting in a launch declines the work.
        let _run = super::super::awake::Awake::start();
        assert_eq!(read(&w, &AtomicBool::new(false)), 0);
    }

    #[test]
    fn small_weights_and_many_rows_are_not_read_ahead() {
        // 256 rows: a product that reuses each weight row, not a stream.
        let rows = LAYER.replace("f32[1,", "f32[256,");
        // Four rows (still a stream) over a 384 KiB weight, which the
        // product reads in a few µs.
        let small = LAYER
            .replace("f32[1,", "f32[4,")
            .replace("f32[768,512]", "f32[768,128]")
            .replace("f32[4,512]", "f32[4,128]")
            .replace("f32[512,768]", "f32[128,768]");
        for text in [rows, small] {
            let (_, parallel, ahead) = planned(&text);
            assert!(parallel.iter().any(|&p| p), "the products spread");
            assert!(ahead.iter().all(Option::is_none), "{text}");
        }
    }
}
