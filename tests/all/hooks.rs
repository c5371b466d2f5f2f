//! Debug hooks around every kernel (`with_hooks`): order, values and
//! devices on host and Sim, eager ops, scoping to the thread and the
//! closure, nesting, and hooks that compute on tensors themselves.

use std::sync::{Arc, Mutex};
use tilejit::prelude::*;
use tilejit::{with_hooks, Device, Hooks, KernelEvent};

/// A row softmax then a matmul: at least two kernels.
#[jit]
fn attend(q: &Tensor, v: &Tensor) -> Tensor {
    q.softmax(-1).matmul(v)
}

/// Every event, tagged `before`/`after`.
type Log = Arc<Mutex<Vec<(&'static str, KernelEvent)>>>;

fn recording() -> (Hooks, Log) {
    let log: Log = Arc::default();
    let (b, a) = (log.clone(), log.clone());
    let hooks = Hooks::new()
        .before(move |e| b.lock().unwrap().push(("before", e.clone())))
        .after(move |e| a.lock().unwrap().push(("after", e.clone())));
    (hooks, log)
}

fn kernel_count(f: &tilejit::JitFunction) -> usize {
    f.handlers()[0].program.host().kernels().kernels.len()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

/// Checks the log of one call of `attend` against its arguments and
/// result: before/after pairs in kernel order, inputs of the first kernel
/// are the call's `q`, the last kernel's output is the result.
fn check_call(log: &[(&str, KernelEvent)], q: &Tensor, result: &Tensor, n: usize, device: &Device) {
    assert_eq!(log.len(), 2 * n, "{log:?}");
    for (i, pair) in log.chunks(2).enumerate() {
        let (b, a) = (&pair[0], &pair[1]);
        assert_eq!((b.0, a.0), ("before", "after"));
        assert_eq!((b.1.index(), a.1.index()), (i, i));
        assert_eq!(b.1.name(), a.1.name());
        assert_eq!(a.1.device(), *device);
        assert!(b.1.outputs().is_empty() && b.1.elapsed().is_none());
        assert!(a.1.elapsed().is_some());
        assert!(!a.1.outputs().is_empty());
        assert!(a.1.program().starts_with("attend("), "{}", a.1.program());
    }
    let first = &log[0].1;
    assert!(
        first.inputs().iter().any(|t| bits(t) == bits(q)),
        "{first:?}"
    );
    let last = &log[2 * n - 1].1;
    assert!(
        last.outputs().iter().any(|t| bits(t) == bits(result)),
        "{last:?}"
    );
    // Each kernel's inputs were some earlier kernel's outputs or arguments:
    // the second kernel reads what the first wrote.
    let wrote = bits(&log[1].1.outputs()[0]);
    assert!(log[2].1.inputs().iter().any(|t| bits(t) == wrote));
}

#[test]
fn hooks_see_every_kernel_in_order_on_host_and_sim() {
    let q = Tensor::randn(&[5, 7], 1);
    let v = Tensor::randn(&[7, 3], 2);
    let _ = attend(&q, &v).unwrap();
    let n = kernel_count(attend::jit());
    assert!(n >= 2, "{n} kernels");
    for mode in [RunMode::Host, RunMode::Sim] {
        let (hooks, log) = recording();
        let y = with_mode(mode, || with_hooks(&hooks, || attend(&q, &v).unwrap()));
        let device = if mode == RunMode::Host {
            Device::host()
        } else {
            Device::sim()
        };
        check_call(&log.lock().unwrap(), &q, &y, n, &device);
    }
    // Device tensors: the call runs on Sim, hooks see it there.
    let (qd, vd) = (q.to(&Device::sim()).unwrap(), v.to(&Device::sim()).unwrap());
    let (hooks, log) = recording();
    let y = with_hooks(&hooks, || attend(&qd, &vd).unwrap());
    assert_eq!(y.device(), Device::sim());
    check_call(&log.lock().unwrap(), &q, &y, n, &Device::sim());
}

#[test]
fn hooks_see_eager_ops_and_nothing_outside_their_scope() {
    let (hooks, log) = recording();
    let x = Tensor::from_vec(vec![1.0f32, 4.0, 9.0], &[3]).unwrap();
    // On the host only: in Verify mode an op runs twice, and hooks see both.
    let y = with_mode(RunMode::Host, || with_hooks(&hooks, || x.sqrt()));
    assert_eq!(y.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0]);
    {
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 2);
        assert_eq!(log[1].1.program(), "eager");
        assert_eq!(
            log[1].1.inputs()[0].to_vec::<f32>().unwrap(),
            [1.0, 4.0, 9.0]
        );
        assert_eq!(
            log[1].1.outputs()[0].to_vec::<f32>().unwrap(),
            [1.0, 2.0, 3.0]
        );
    }
    // Outside the closure, and on other threads during it: nothing.
    let _ = x.exp();
    let q = Tensor::randn(&[4, 4], 3);
    with_hooks(&hooks, || {
        std::thread::scope(|s| {
            s.spawn(|| attend(&q, &q).unwrap());
        });
    });
    assert_eq!(log.lock().unwrap().len(), 2);
}

#[test]
fn nested_hooks_run_outer_first_and_hooks_may_compute_on_tensors() {
    let order = Arc::new(Mutex::new(Vec::new()));
    let (o1, o2) = (order.clone(), order.clone());
    // The outer hook computes with tensors itself: those kernels are not
    // observed, so the hook does not recurse.
    let outer = Hooks::new().after(move |e| {
        let total = e.outputs()[0].sum(-1, false).item::<f32>().unwrap();
        o1.lock().unwrap().push(format!("outer {total}"));
    });
    let inner = Hooks::new().after(move |_| o2.lock().unwrap().push("inner".to_string()));
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    with_mode(RunMode::Host, || {
        with_hooks(&outer, || with_hooks(&inner, || &x + &x))
    });
    assert_eq!(*order.lock().unwrap(), ["outer 6", "inner"]);
    // A panic in the closure leaves no hooks behind.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        with_hooks(&outer, || panic!("boom"))
    }));
    assert!(r.is_err());
    let _ = &x * &x;
    assert_eq!(order.lock().unwrap().len(), 2);
}

const CHILD_VAR: &str = "TILEJIT_HOOKS_CHILD";

/// As a child with `TILEJIT_LOG=time` and `TILEJIT_DUMP_VALUES` set: one
/// call on host and one on Sim, then the result's bits.
#[test]
fn env_child() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return; // only meaningful as a child process
    }
    let q = Tensor::from_vec(vec![0.5f32, -1.0, 2.0, 0.0], &[2, 2]).unwrap();
    let y = attend(&q, &q).unwrap();
    let ys = with_mode(RunMode::Sim, || attend(&q, &q).unwrap());
    assert_eq!(bits(&y).len(), 4);
    println!("HOOKSCHILD {:?} {:?}", bits(&y), bits(&ys));
}

#[test]
fn log_time_and_dump_values_cover_every_kernel_run() {
    let dir = tilejit_tests::TempDir::new("dump-values");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "hooks::env_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, "1")
        .env_remove("TILEJIT_RUN_MODE")
        .env("TILEJIT_LOG", "time")
        .env("TILEJIT_DUMP_VALUES", &*dir)
        .env("TILEJIT_WARMUP", "off")
        .output()
        .unwrap();
    let report = tilejit_tests::child_report(&out, "HOOKSCHILD ");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let times: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("[tilejit] time "))
        .collect();
    let host = times.iter().filter(|l| l.contains(" on host: ")).count();
    let sim = times.iter().filter(|l| l.contains(" on sim: ")).count();
    assert!(host >= 2 && host == sim, "{stderr}");
    // One file per kernel output per run; the last kernel's output of each
    // run is the call's result.
    let mut files: Vec<_> = std::fs::read_dir(&*dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 2 * host, "{files:?}");
    let results: Vec<Vec<u32>> = files
        .iter()
        .map(|p| bits(&tilejit::io::read_npy(p).unwrap()))
        .filter(|b| b.len() == 4)
        .collect();
    for want in report.split("] [") {
        let want: Vec<u32> = want
            .trim_matches(|c| c == '[' || c == ']')
            .split(", ")
            .map(|v| v.parse().unwrap())
            .collect();
        assert!(results.contains(&want), "{want:?} not dumped: {files:?}");
    }
}

/// Records what each kernel run showed it: (inputs, outputs, timed).
struct Seen {
    values: bool,
    runs: Mutex<Vec<(usize, usize, bool)>>,
}

impl tilejit_runtime::hooks::KernelObserver for Seen {
    fn before(&self, _: &tilejit_runtime::hooks::KernelRun<'_>) {}
    fn after(&self, r: &tilejit_runtime::hooks::KernelRun<'_>) {
        let run = (r.inputs.len(), r.outputs.len(), r.elapsed.is_some());
        self.runs.lock().unwrap().push(run);
    }
    fn reads_values(&self) -> bool {
        self.values
    }
}

/// An observer that reads no values (what `TILEJIT_LOG=time` is) gets
/// its times and no copies, on Host and on Sim; one that reads them, with
/// another beside it that does not, gets every kernel's buffers.
#[test]
fn observers_that_read_no_values_get_no_copies() {
    let q = Tensor::from_vec(vec![0.5f32, -1.0, 2.0, 0.0], &[2, 2]).unwrap();
    for mode in [RunMode::Host, RunMode::Sim] {
        let quiet = Arc::new(Seen {
            values: false,
            runs: Mutex::new(Vec::new()),
        });
        with_mode(mode, || {
            tilejit_runtime::hooks::with_observer(quiet.clone(), || attend(&q, &q).unwrap())
        });
        let runs = quiet.runs.lock().unwrap().clone();
        assert!(!runs.is_empty(), "{mode:?}");
        assert!(
            runs.iter().all(|&r| r == (0, 0, true)),
            "{mode:?}: {runs:?}"
        );
        let (reader, other) = (
            Arc::new(Seen {
                values: true,
                runs: Mutex::new(Vec::new()),
            }),
            Arc::new(Seen {
                values: false,
                runs: Mutex::new(Vec::new()),
            }),
        );
        with_mode(mode, || {
            tilejit_runtime::hooks::with_observer(reader.clone(), || {
                tilejit_runtime::hooks::with_observer(other.clone(), || attend(&q, &q).unwrap())
            })
        });
        let runs = reader.runs.lock().unwrap().clone();
        assert!(
            !runs.is_empty() && runs.iter().all(|&(i, o, t)| i > 0 && o > 0 && t),
            "{mode:?}: {runs:?}"
        );
    }
}

/// Two products big enough to spread over the pool's threads.
#[jit]
fn two_products(x: &Tensor) -> Tensor {
    x.matmul(x).tanh().matmul(x)
}

#[test]
fn a_run_moved_onto_the_pool_keeps_its_callers_hooks() {
    let x = Tensor::randn(&[256, 256], 4) * (1.0 / 16.0);
    let want = with_mode(RunMode::Reference, || two_products(&x).unwrap());
    let n = {
        let _ = with_mode(RunMode::Host, || two_products(&x).unwrap());
        kernel_count(two_products::jit())
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    // The hook computes on tensors too: those runs are not observed.
    let hooks = Hooks::new().after(move |e| {
        let total = e.outputs()[0].sum(-1, false).sum(-1, false);
        let total = total.item::<f32>().unwrap();
        s.lock()
            .unwrap()
            .push((e.index(), total, std::thread::current().id()));
    });
    let caller = std::thread::current().id();
    let y = with_mode(RunMode::Host, || {
        with_hooks(&hooks, || two_products(&x).unwrap())
    });
    let (got, w) = (y.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    for (g, w) in got.iter().zip(&w) {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} vs {w}");
    }
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        (0..n).collect::<Vec<_>>()
    );
    let last: f32 = w.iter().sum();
    assert!((seen[n - 1].1 - last).abs() <= 1e-3 * (1.0 + last.abs()));
    // With two pool threads or more the run moved, hooks and all.
    if rayon::current_num_threads() > 1 {
        assert!(seen.iter().all(|s| s.2 != caller));
    }
}
