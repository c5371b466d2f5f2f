//! The workload table: `bench --json [--only W1,W3] [--quiet-wait S]`
//! prints one JSON object per workload. Every workload's result is checked
//! against the reference interpreter first; a mismatch aborts with exit
//! code 1. `--quiet-wait S` waits up to S seconds before each workload for
//! a quiet machine, as the peers' runner does (`quiet.rs`).

use std::time::Instant;
use tilejit::prelude::*;
use tilejit_benches::models::workloads as models;
use tilejit_benches::workloads::*;
use tilejit_benches::{max_rel_err, median_time};

const N: usize = 16 * 1024 * 1024;

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f32>()
        .unwrap_or_default()
        .into_iter()
        .map(f64::from)
        .collect()
}

/// Checks the last call of `f` against the reference interpreter.
fn check(name: &str, f: &tilejit::JitFunction, args: &[&Tensor], got: &Tensor, tol: f64) {
    let h = f.handlers();
    let Some(h) = h.last() else {
        eprintln!("{name}: no program");
        std::process::exit(1);
    };
    let arrays: Vec<_> = args
        .iter()
        .map(|t| t.to_array().expect("concrete"))
        .collect();
    let want = match h.program.run_reference(&arrays, &[]) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{name}: reference failed: {e}");
            std::process::exit(1);
        }
    };
    let b = want[0].buffer();
    let want: Vec<f64> = (0..b.len()).map(|i| b.get(i).as_f64()).collect();
    let err = max_rel_err(&f64s(got), &want);
    if err > tol {
        eprintln!("{name}: result differs from the reference by {err:e}");
        std::process::exit(1);
    }
}

/// Calls once, checks the result against the reference, then returns the
/// median seconds per call (the output is dropped each call, as the peers do).
fn hot(
    name: &str,
    f: &tilejit::JitFunction,
    args: &[&Tensor],
    tol: f64,
    call: impl Fn() -> tilejit::Result<Tensor>,
) -> f64 {
    match call() {
        Ok(y) => check(name, f, args, &y, tol),
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::exit(1);
        }
    }
    median_time(2, 7, || drop(call())).as_secs_f64()
}

/// The `gbps` JSON field for `bytes` moved in `s` seconds.
fn gbps(bytes: f64, s: f64) -> String {
    format!(", \"gbps\": {:.3}", bytes / s / 1e9)
}

/// Where a workload's result goes: `emit(workload, field, value, extra)`,
/// with `extra` more JSON fields, each starting with `, `.
type Emit<'a> = &'a dyn Fn(&str, &str, f64, String);

/// A workload: its name, whether a run without `--only` includes it, and
/// its body.
type Workload = (&'static str, bool, fn(Emit));

/// Every workload, in run order.
const WORKLOADS: [Workload; 17] = [
    ("W1", true, w1),
    ("W2", true, w2),
    ("W3", true, w3),
    ("W4", true, w4),
    ("W5", true, w5),
    ("W9", true, w9),
    ("W6", true, w6),
    ("W7", true, w7),
    ("W8", true, w8),
    ("W10", true, models::w10),
    ("W11", true, models::w11),
    ("W12", true, |emit| models::w12(emit, &[1, 8])),
    ("S1", false, s1),
    ("S2", false, s2),
    ("E1", false, e1),
    ("R1", false, |emit| remote("R1", emit)),
    ("R2", false, |emit| remote("R2", emit)),
];

fn main() {
    // Compile times are measured cold unless a workload says otherwise:
    // the on-disk kernel cache is off here and in every child (W7 warm
    // gives its children a directory of their own). Set before any thread.
    if std::env::var_os("TILEJIT_CACHE_DIR").is_none() {
        std::env::set_var("TILEJIT_CACHE_DIR", "off");
    }
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--w7-child") {
        // W7 in a fresh process: trace + compile + run of a new layernorm.
        let x = Tensor::randn(&[8192, 1024], 1);
        let (g, b) = (Tensor::randn(&[1024], 2), Tensor::randn(&[1024], 3));
        let t = Instant::now();
        let y = layernorm(&x, &g, &b).expect("w7");
        let first = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let _ = layernorm(&x, &g, &b).expect("w7");
        let second = t.elapsed().as_secs_f64();
        check("W7", layernorm::jit(), &[&x, &g, &b], &y, 1e-4);
        println!("{first} {second}");
        return;
    }
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.split(',').map(str::to_string).collect());
    let json = args.iter().any(|a| a == "--json");
    let quiet_wait = match args.iter().position(|a| a == "--quiet-wait") {
        None => None,
        Some(i) => match args.get(i + 1).and_then(|s| s.parse::<f64>().ok()) {
            Some(s) if s.is_finite() && s >= 0.0 => Some(std::time::Duration::from_secs_f64(s)),
            _ => {
                eprintln!("--quiet-wait takes a number of seconds");
                std::process::exit(2);
            }
        },
    };
    let settle = |name: &str| {
        let Some(max) = quiet_wait else { return };
        match tilejit_benches::quiet::wait_quiet(max) {
            Some(load) if !load.quiet() => eprintln!(
                "{name}: no quiet window in {max:?} ({:.2} cores busy, {:.0}% steal)",
                load.busy_cores,
                load.steal * 100.0
            ),
            _ => {}
        }
    };
    let emit = |w: &str, field: &str, v: f64, extra: String| {
        if json {
            println!("{{\"workload\": \"{w}\", \"{field}\": {v:.6}{extra}}}");
        } else {
            println!("{w}: {field} = {v:.6}{extra}");
        }
    };
    // `--only W12b1` (or `W12b8`) runs that batch alone; `W12` both.
    let w12_batches: Vec<usize> = [("W12b1", 1), ("W12b8", 8)]
        .into_iter()
        .filter(|(b, _)| only.as_ref().is_some_and(|o| o.iter().any(|x| x == b)))
        .map(|(_, n)| n)
        .collect();
    for (name, default, run) in WORKLOADS {
        let named = only.as_ref().map(|o| o.iter().any(|x| x == name));
        if named.unwrap_or(default) {
            settle(name);
            run(&emit);
        } else if name == "W12" && !w12_batches.is_empty() {
            settle(name);
            models::w12(&emit, &w12_batches);
        }
    }
}

/// W1: `relu(x * w + b)` on 16M floats.
fn w1(emit: Emit) {
    let (x, w, b) = (
        Tensor::randn(&[N], 1),
        Tensor::randn(&[N], 2),
        Tensor::randn(&[N], 3),
    );
    let s = hot("W1", bias_relu::jit(), &[&x, &w, &b], 1e-6, || {
        bias_relu(&x, &w, &b)
    });
    emit("W1", "median_s", s, gbps(16.0 * N as f64, s));
}

/// W2: tanh-approximated gelu on 16M floats.
fn w2(emit: Emit) {
    let x = Tensor::randn(&[N], 4);
    let s = hot("W2", gelu::jit(), &[&x], 1e-5, || gelu(&x));
    emit("W2", "median_s", s, gbps(8.0 * N as f64, s));
}

/// W3: a row softmax of `[4096, 4096]`.
fn w3(emit: Emit) {
    let x = Tensor::randn(&[4096, 4096], 5);
    let s = hot("W3", softmax::jit(), &[&x], 1e-5, || softmax(&x));
    emit("W3", "median_s", s, gbps(8.0 * N as f64, s));
}

/// W4: layernorm of `[8192, 1024]`.
fn w4(emit: Emit) {
    let x = Tensor::randn(&[8192, 1024], 6);
    let (g, b) = (Tensor::randn(&[1024], 7), Tensor::randn(&[1024], 8));
    let s = hot("W4", layernorm::jit(), &[&x, &g, &b], 1e-4, || {
        layernorm(&x, &g, &b)
    });
    emit("W4", "median_s", s, gbps(8.0 * 8192.0 * 1024.0, s));
}

/// W5: `gelu(a @ b + bias)` at 1024^3.
fn w5(emit: Emit) {
    let (a, b) = (
        Tensor::randn(&[1024, 1024], 9),
        Tensor::randn(&[1024, 1024], 10),
    );
    let bias = Tensor::randn(&[1024], 11);
    let s = hot(
        "W5",
        matmul_bias_gelu::jit(),
        &[&a, &b, &bias],
        1e-3,
        || matmul_bias_gelu(&a, &b, &bias),
    );
    let gflops = 2.0 * 1024f64.powi(3) / s / 1e9;
    emit("W5", "median_s", s, format!(", \"gflops\": {gflops:.3}"));
}

/// W9: one GPT-2-small block (the peers' `w9_inputs`).
fn w9(emit: Emit) {
    // `peers.py`'s `w9_inputs`: weights scaled by 1/sqrt(fan-in), gains
    // 1 + 0.1 * randn, biases 0.1 * randn; the causal mask -1e9 above
    // the diagonal.
    let (sd, sf) = (1.0 / (D9 as f64).sqrt(), 1.0 / (F9 as f64).sqrt());
    let w = |shape: &[usize], scale: f64, seed: u64| Tensor::randn(shape, seed) * scale;
    let v = |n: usize, seed: u64| Tensor::randn(&[n], seed) * 0.1;
    let gain = |n: usize, seed: u64| Tensor::randn(&[n], seed) * 0.1 + 1.0;
    let x = Tensor::randn(&[T9, D9], 20);
    let (g1, b1, g2, b2) = (gain(D9, 21), v(D9, 22), gain(D9, 35), v(D9, 36));
    let (wq, wk, wv, wo) = (
        w(&[D9, D9], sd, 23),
        w(&[D9, D9], sd, 24),
        w(&[D9, D9], sd, 25),
        w(&[D9, D9], sd, 26),
    );
    let (bq, bk, bv, bo) = (v(D9, 27), v(D9, 28), v(D9, 29), v(D9, 30));
    let (wf, bf) = (w(&[D9, F9], sd, 31), v(F9, 32));
    let (wp, bp) = (w(&[F9, D9], sf, 33), v(D9, 34));
    let mask = Tensor::ones(&[T9, T9], DType::F32).triu(1) * -1e9;
    let args = [
        &x, &g1, &b1, &wq, &bq, &wk, &bk, &wv, &bv, &wo, &bo, &g2, &b2, &wf, &bf, &wp, &bp, &mask,
    ];
    let call = || {
        gpt2_block(
            &x, &g1, &b1, &wq, &bq, &wk, &bk, &wv, &bv, &wo, &bo, &g2, &b2, &wf, &bf, &wp, &bp,
            &mask,
        )
    };
    let s = hot("W9", gpt2_block::jit(), &args, 2e-3, call);
    let kernels = gpt2_block::jit()
        .handlers()
        .last()
        .map_or(0, |h| h.program.host().kernels().kernels.len());
    emit(
        "W9",
        "median_s",
        s,
        format!(
            ", \"gflops\": {:.3}, \"kernels\": {kernels}",
            W9_FLOPS as f64 / s / 1e9
        ),
    );
}

/// W6: dispatch cost of a jit `x + y` on `[16]`.
fn w6(emit: Emit) {
    let (x, y) = (Tensor::randn(&[16], 12), Tensor::randn(&[16], 13));
    let z = add(&x, &y).expect("W6");
    check("W6", add::jit(), &[&x, &y], &z, 0.0);
    const CALLS: usize = 100_000;
    let s = median_time(1, 5, || {
        for _ in 0..CALLS {
            drop(add(&x, &y));
        }
    })
    .as_secs_f64();
    emit("W6", "ns_per_call", s / CALLS as f64 * 1e9, String::new());
}

/// W7: the first call of a new layernorm in a fresh process.
fn w7(emit: Emit) {
    // W7: cold (no disk cache), then "W7w" with a warm disk cache (a
    // priming child fills a fresh directory, five more are timed).
    let w7_dirs: &[Option<std::path::PathBuf>] = &[
        None,
        Some(std::env::temp_dir().join(format!("tilejit-w7-{}", std::process::id()))),
    ];
    for dir in w7_dirs.iter() {
        let exe = std::env::current_exe().expect("own path");
        let child = || {
            let mut c = std::process::Command::new(&exe);
            c.arg("--w7-child");
            if let Some(d) = dir {
                c.env("TILEJIT_CACHE_DIR", d);
            }
            c
        };
        if dir.is_some() {
            let ok = child().output().is_ok_and(|o| o.status.success());
            assert!(ok, "W7w: priming child failed");
        }
        let mut firsts = Vec::new();
        let mut seconds = Vec::new();
        for _ in 0..5 {
            let out = child().output().expect("spawn");
            if !out.status.success() {
                eprintln!("W7 child failed: {}", String::from_utf8_lossy(&out.stderr));
                std::process::exit(1);
            }
            let text = String::from_utf8_lossy(&out.stdout);
            let v: Vec<f64> = text
                .split_whitespace()
                .filter_map(|t| t.parse().ok())
                .collect();
            firsts.push(v[0]);
            seconds.push(v[1]);
        }
        // The second call runs the same kernels into a fresh output, so
        // first - second is the first call's own cost (trace, compile or
        // load) without the output's first touch, which both pay.
        let overhead: Vec<f64> = {
            let mut v: Vec<f64> = firsts.iter().zip(&seconds).map(|(f, s)| f - s).collect();
            v.sort_by(f64::total_cmp);
            v
        };
        firsts.sort_by(f64::total_cmp);
        seconds.sort_by(f64::total_cmp);
        emit(
            if dir.is_some() { "W7w" } else { "W7" },
            "first_call_s",
            firsts[2],
            format!(
                ", \"second_call_s\": {:.6}, \"first_minus_second_s\": {:.6}",
                seconds[2], overhead[2]
            ),
        );
        if let Some(d) = dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// W8: 20 sizes of bias_relu, exact and dynamic.
fn w8(emit: Emit) {
    // Warm the compiler on an unrelated function first, as the peers do.
    let _ = gelu(&Tensor::randn(&[10], 1));
    let inputs: Vec<[Tensor; 3]> = (1..=20)
        .map(|i| {
            let n = i * 1000;
            [
                Tensor::randn(&[n], 1),
                Tensor::randn(&[n], 2),
                Tensor::randn(&[n], 3),
            ]
        })
        .collect();
    // As in a fresh process: nothing of bias_relu compiled yet (W1, run
    // before in this process, compiled the same shape-generic kernel).
    bias_relu::jit().clear();
    tilejit::kernel_cache().clear();
    let before = tilejit::kernel_cache().stats().compiles;
    let t = Instant::now();
    for [x, w, b] in &inputs {
        drop(bias_relu(x, w, b));
    }
    let total = t.elapsed().as_secs_f64();
    let compiles = tilejit::kernel_cache().stats().compiles - before;
    let traces = bias_relu::jit().stats().traces;
    emit(
        "W8",
        "total_s",
        total,
        format!(", \"kernel_compiles\": {compiles}, \"traces\": {traces}"),
    );
    // The same 20 calls to a dynamic function: an exact trace for the first
    // size, then the class's traces serve every later one.
    let f = bias_relu_dynamic::jit();
    f.clear();
    tilejit::kernel_cache().clear();
    let before = tilejit::kernel_cache().stats().compiles;
    let t = Instant::now();
    for [x, w, b] in &inputs {
        drop(bias_relu_dynamic(x, w, b));
    }
    let total = t.elapsed().as_secs_f64();
    let compiles = tilejit::kernel_cache().stats().compiles - before;
    // Every size must equal the exact-shape trace's result, bit for bit.
    for [x, w, b] in &inputs {
        let bits = |t: tilejit::Result<Tensor>| t.and_then(|t| t.to_vec::<f32>()).ok();
        let (d, e) = (bits(bias_relu_dynamic(x, w, b)), bits(bias_relu(x, w, b)));
        if d.is_none() || d != e {
            eprintln!("W8d: differs from the exact trace at {:?}", x.shape());
            std::process::exit(1);
        }
    }
    emit(
        "W8d",
        "total_s",
        total,
        format!(
            ", \"kernel_compiles\": {compiles}, \"traces\": {}",
            f.stats().traces
        ),
    );
}

/// S1: the simulated device's scheduler throughput.
fn s1(emit: Emit) {
    // S1 (not a peers workload): scheduler throughput on a wide DAG of
    // 10^6 no-op core tasks between two hubs, through the managers.
    use tilejit_runtime::device::{Launch, LaunchOptions, SimDevice, Task, TaskKind};
    let dev = SimDevice::new(Default::default()).expect("device");
    const TASKS: usize = 1_000_000;
    let make = || {
        let mut tasks = Vec::with_capacity(TASKS + 2);
        let mut root = Task::new("root", TaskKind::Hub, None);
        root.successors = (1..=TASKS as u32).collect();
        tasks.push(root);
        for i in 0..TASKS {
            let kind = if i % 3 == 0 {
                TaskKind::Aic
            } else {
                TaskKind::Aiv
            };
            let mut t = Task::new(String::new(), kind, None);
            t.successors = vec![TASKS as u32 + 1];
            tasks.push(t);
        }
        tasks.push(Task::new("sink", TaskKind::Hub, None));
        Launch {
            tasks,
            ..Launch::default()
        }
    };
    let mut times = Vec::new();
    let mut managers = 0;
    for _ in 0..3 {
        let r = dev
            .launch(make(), LaunchOptions::default())
            .wait()
            .expect("S1");
        assert_eq!(r.tasks, TASKS + 2, "S1 lost tasks");
        managers = r.managers;
        times.push(r.host_time.as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let s = times[1];
    emit(
        "S1",
        "tasks_per_s",
        TASKS as f64 / s,
        format!(
            ", \"us_per_task\": {:.4}, \"tasks\": {TASKS}, \"managers\": {managers}",
            s / TASKS as f64 * 1e6
        ),
    );
}

/// S2: W1 on the simulated device against the host.
fn s2(emit: Emit) {
    // S2 (not a peers workload): W1 on the simulated device (inputs
    // copied to GM, tile tasks on the 48 AIV cores, outputs copied
    // back), against W1 on the host in the same run.
    let (x, w, b) = (
        Tensor::randn(&[N], 1),
        Tensor::randn(&[N], 2),
        Tensor::randn(&[N], 3),
    );
    let host = median_time(1, 3, || drop(bias_relu(&x, &w, &b))).as_secs_f64();
    let want = bias_relu(&x, &w, &b)
        .expect("S2 host")
        .to_vec::<f32>()
        .expect("f32");
    let got = with_mode(RunMode::Sim, || bias_relu(&x, &w, &b))
        .expect("S2 sim")
        .to_vec::<f32>()
        .expect("f32");
    assert_eq!(got, want, "S2: sim and host differ");
    let sim = median_time(0, 3, || {
        drop(with_mode(RunMode::Sim, || bias_relu(&x, &w, &b)))
    })
    .as_secs_f64();
    // Where a run's host time goes, from its profile: copying in, the
    // launch itself (control thread's init to the last task's end: the
    // interpreter's share), copying out. Medians of 3 runs each.
    let mut phases: Vec<[f64; 3]> = (0..3)
        .map(|_| {
            let (out, profiles) =
                tilejit::collect_profiles(|| with_mode(RunMode::Sim, || bias_relu(&x, &w, &b)));
            drop(out);
            let p = &profiles[0];
            let c = p.host_copies.unwrap_or_default();
            [
                c.copy_in.as_secs_f64(),
                p.host_time.as_secs_f64(),
                c.copy_out.as_secs_f64(),
            ]
        })
        .collect();
    let mid = |i: usize, v: &mut Vec<[f64; 3]>| {
        v.sort_by(|a, b| a[i].total_cmp(&b[i]));
        v[1][i]
    };
    let (copy_in, launch, copy_out) = (
        mid(0, &mut phases),
        mid(1, &mut phases),
        mid(2, &mut phases),
    );
    emit(
        "S2",
        "median_s",
        sim,
        format!(
            "{}, \"host_median_s\": {host:.6}, \"sim_vs_host\": {:.4}, \"copy_in_s\": {copy_in:.6}, \"launch_s\": {launch:.6}, \"copy_out_s\": {copy_out:.6}, \"launch_vs_host\": {:.4}",
            gbps(16.0 * N as f64, sim),
            host / sim,
            host / launch
        ),
    );
}

/// E1: an eager `x + y` on `[16]`.
fn e1(emit: Emit) {
    // E1 (not a peers workload): an eager `x + y` on [16], per call.
    let (x, y) = (Tensor::randn(&[16], 12), Tensor::randn(&[16], 13));
    const CALLS: usize = 20_000;
    let s = median_time(1, 5, || {
        for _ in 0..CALLS {
            drop(&x + &y);
        }
    })
    .as_secs_f64();
    emit("E1", "ns_per_call", s / CALLS as f64 * 1e9, String::new());
}

/// R1 or R2 (not peers workloads): a remote device on an in-process
/// `tilejit serve` over loopback TCP. R1: a small jit call on remote
/// tensors (`x + y` on `[16]`, the result left remote) against a bare
/// unary round trip (`Device::ping`). R2: 64 MiB up and down, against raw
/// TCP over loopback in the same run.
fn remote(which: &str, emit: Emit) {
    use tilejit::remote::{ServeOptions, Server};
    let server = Server::start(ServeOptions {
        token: "bench".into(),
        ..ServeOptions::default()
    })
    .expect("start a server");
    let d = tilejit::Device::remote(&server.addr().to_string(), "bench").expect("connect");
    if which == "R1" {
        let (x, y) = (Tensor::randn(&[16], 12), Tensor::randn(&[16], 13));
        let (xr, yr) = (x.to(&d).expect("up"), y.to(&d).expect("up"));
        let want = add(&x, &y).expect("host").to_vec::<f32>().expect("f32");
        let got = add(&xr, &yr).expect("remote").to_vec::<f32>().expect("f32");
        assert_eq!(got, want, "R1: remote and host differ");
        const CALLS: usize = 300;
        let call = median_time(1, 5, || {
            for _ in 0..CALLS {
                drop(add(&xr, &yr).expect("R1"));
            }
        })
        .as_secs_f64()
            / CALLS as f64;
        let ping = median_time(1, 5, || {
            for _ in 0..CALLS {
                d.ping().expect("ping");
            }
        })
        .as_secs_f64()
            / CALLS as f64;
        emit(
            "R1",
            "us_per_call",
            call * 1e6,
            format!(
                ", \"ping_us\": {:.2}, \"vs_ping\": {:.3}",
                ping * 1e6,
                call / ping
            ),
        );
    }
    if which == "R2" {
        let n = 16 << 20;
        let bytes = 4.0 * n as f64;
        let x = Tensor::randn(&[n], 5);
        let want = x.to_vec::<f32>().expect("f32");
        let up = median_time(0, 3, || drop(x.to(&d).expect("upload"))).as_secs_f64();
        let xr = x.to(&d).expect("upload");
        let back = xr.to_vec::<f32>().expect("download");
        assert!(back == want, "R2: 64 MiB came back different");
        let host = tilejit::Device::host();
        let down = median_time(0, 3, || drop(xr.to(&host).expect("download"))).as_secs_f64();
        let tcp = median_time(0, 3, || loopback_copy(4 * n)).as_secs_f64();
        emit(
            "R2",
            "up_gbps",
            bytes / up / 1e9,
            format!(
                ", \"down_gbps\": {:.3}, \"tcp_gbps\": {:.3}, \"up_vs_tcp\": {:.3}, \"down_vs_tcp\": {:.3}",
                bytes / down / 1e9,
                bytes / tcp / 1e9,
                tcp / up,
                tcp / down
            ),
        );
    }
}

/// `len` bytes written through a loopback TCP socket and read on another
/// thread: the transport's own ceiling.
fn loopback_copy(len: usize) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0;
        while got < len {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => got += k,
            }
        }
        got
    });
    let data = vec![7u8; len];
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.write_all(&data).expect("write");
    drop(s);
    assert_eq!(reader.join().expect("reader"), len);
}
