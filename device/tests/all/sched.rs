//! Launching task graphs on the simulated device: real kernels split into
//! tile tasks over sub-ranges of buffers, random DAGs of up to 10^5 tasks
//! (AIC, AIV and hub nodes) under every policy with each task run exactly
//! once after all its predecessors, faults that fail one launch and not the
//! next, bad graphs rejected at init, many host threads launching at once,
//! the launch watchdog, and the profile's Chrome trace.

use crate::{example, Rng};
use std::sync::Arc;
use std::time::Duration;
use tilejit_device::isa::asm;
use tilejit_device::{
    DeviceApi, DeviceBuffer, DeviceConfig, DeviceError, GmArg, Launch, LaunchOptions, LaunchReport,
    Policy, SimDevice, Task, TaskKind,
};

fn device() -> SimDevice {
    SimDevice::new(DeviceConfig::default()).unwrap()
}

fn f32_buffer(dev: &SimDevice, v: &[f32]) -> Arc<DeviceBuffer> {
    let b = dev.allocate((v.len() * 4) as u64).unwrap();
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    dev.copy_from_host(&bytes, &b, 0).unwrap();
    Arc::new(b)
}

fn read_f32(dev: &SimDevice, b: &DeviceBuffer, n: usize) -> Vec<f32> {
    let mut bytes = vec![0u8; n * 4];
    dev.copy_to_host(b, 0, &mut bytes).unwrap();
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn opts(policy: Policy, profile: bool) -> LaunchOptions {
    LaunchOptions {
        policy,
        profile,
        ..LaunchOptions::default()
    }
}

/// z = x + y over 300,001 elements as 37 tile tasks of the double-buffered
/// vadd kernel, each on its own GM sub-range, spread over the AIV cores.
#[test]
fn a_kernel_split_into_tile_tasks_computes_the_whole_result() {
    let dev = device();
    let n = 300_001usize;
    let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.001).sin()).collect();
    let y: Vec<f32> = (0..n).map(|i| (i % 97) as f32 - 48.0).collect();
    let (bx, by, bz) = (
        f32_buffer(&dev, &x),
        f32_buffer(&dev, &y),
        f32_buffer(&dev, &vec![0.0; n]),
    );
    let f = dev.verify(example("vadd_double_buffered.s")).unwrap();
    let tile = 8192usize;
    let tasks: Vec<Task> = (0..n.div_ceil(tile))
        .map(|t| {
            let (lo, len) = (t * tile, tile.min(n - t * tile));
            let arg = |b: u32| GmArg {
                buffer: b,
                offset: (lo * 4) as u64,
                len: (len * 4) as u64,
            };
            Task {
                gm: vec![arg(0), arg(1), arg(2)],
                scalars: vec![len as i64],
                ..Task::new(format!("vadd/{t}"), TaskKind::Aiv, Some(0))
            }
        })
        .collect();
    let ntasks = tasks.len();
    let launch = Launch {
        functions: vec![f],
        buffers: vec![bx, by, bz.clone()],
        tasks,
    };
    let report = dev.launch(launch, opts(Policy::Fifo, true)).wait().unwrap();
    assert_eq!(report.tasks, ntasks);
    let z = read_f32(&dev, &bz, n);
    for i in 0..n {
        assert_eq!(z[i], x[i] + y[i], "z[{i}]");
    }
    // Tasks spread over cores in parallel: device time is well under the sum.
    let profile = report.profile.unwrap();
    let sum: u64 = profile.records.iter().map(|r| r.end - r.start).sum();
    assert!(
        report.device_cycles * 4 < sum,
        "{} vs {sum}",
        report.device_cycles
    );
    let cores: std::collections::HashSet<u32> =
        profile.records.iter().map(|r| r.core_index).collect();
    assert!(cores.len() > 8, "{cores:?}");
}

/// A random DAG: each task's successors are later tasks, so it is acyclic;
/// fan-in and fan-out vary; kinds are mixed AIC / AIV / hub.
fn random_dag(n: usize, seed: u64) -> Vec<Task> {
    let mut r = Rng(seed | 1);
    let mut tasks: Vec<Task> = (0..n)
        .map(|i| {
            let kind = match r.next() % 10 {
                0 | 1 => TaskKind::Hub,
                2..=4 => TaskKind::Aic,
                _ => TaskKind::Aiv,
            };
            Task::new(format!("t{i}"), kind, None)
        })
        .collect();
    for (i, task) in tasks.iter_mut().enumerate() {
        let fan = (r.next() % 4) as usize;
        for _ in 0..fan {
            let span = 1 + (r.next() % 64) as usize;
            let s = i + 1 + (r.next() as usize % span);
            if s < n && !task.successors.contains(&(s as u32)) {
                task.successors.push(s as u32);
            }
        }
    }
    tasks
}

/// Every core task ran exactly once, after every predecessor (through hubs
/// too) had finished, in virtual and in host time.
fn check_order(tasks: &[Task], report: &LaunchReport, dispatch: u64) {
    let p = report.profile.as_ref().unwrap();
    let n = tasks.len();
    let mut rec = vec![None; n];
    for r in &p.records {
        assert!(rec[r.task as usize].is_none(), "task {} ran twice", r.task);
        rec[r.task as usize] = Some(r.clone());
    }
    // Finish time of each task in topological (index) order; hubs finish
    // when their last predecessor does.
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, t) in tasks.iter().enumerate() {
        for &s in &t.successors {
            preds[s as usize].push(i);
        }
    }
    let mut end = vec![0u64; n];
    let mut host_end = vec![Duration::ZERO; n];
    for i in 0..n {
        let ready = preds[i].iter().map(|&q| end[q]).max().unwrap_or(0);
        let host_ready = preds[i]
            .iter()
            .map(|&q| host_end[q])
            .max()
            .unwrap_or(Duration::ZERO);
        match (&tasks[i].kind, &rec[i]) {
            (TaskKind::Hub, None) => {
                end[i] = ready;
                host_end[i] = host_ready;
            }
            (TaskKind::Hub, Some(_)) => panic!("hub {i} ran on a core"),
            (_, None) => panic!("task {i} never ran"),
            (_, Some(r)) => {
                assert_eq!(r.ready, ready, "task {i}: ready cycle");
                assert!(
                    r.start >= ready + dispatch,
                    "task {i} started before its inputs"
                );
                assert!(
                    r.host_start >= host_ready,
                    "task {i} was picked up before a predecessor finished"
                );
                end[i] = r.end;
                host_end[i] = r.host_end;
            }
        }
    }
    assert_eq!(report.device_cycles, end.iter().copied().max().unwrap_or(0));
}

#[test]
fn random_dags_run_every_task_once_in_dependency_order_under_each_policy() {
    let dev = device();
    for (i, policy) in [Policy::Fifo, Policy::NewestFirst, Policy::Fair]
        .into_iter()
        .enumerate()
    {
        for (n, seed) in [(1usize, 1u64), (50, 2), (5_000, 3), (100_000, 4)] {
            let tasks = random_dag(n, seed + i as u64 * 100);
            let launch = Launch {
                tasks: tasks.clone(),
                ..Launch::default()
            };
            let report = dev.launch(launch, opts(policy, true)).wait().unwrap();
            assert_eq!(report.tasks, n);
            check_order(&tasks, &report, dev.config().dispatch_cycles);
        }
    }
}

#[test]
fn a_faulting_task_fails_its_launch_and_the_next_launch_runs() {
    let dev = device();
    let bad = dev
        .verify(asm::assemble(".kernel oob aiv\n.gm x f32 [8] inout\n    ld f32, 1x64, 1, 64, @0x0, x, 0, 0\n    end\n").unwrap())
        .unwrap();
    let x = f32_buffer(&dev, &[1.0; 8]);
    let mut tasks = random_dag(200, 9);
    for t in tasks.iter_mut() {
        if t.kind == TaskKind::Aic {
            t.kind = TaskKind::Aiv;
        }
    }
    let victim = tasks.iter().position(|t| t.kind == TaskKind::Aiv).unwrap();
    tasks[victim].func = Some(0);
    tasks[victim].gm = vec![GmArg {
        buffer: 0,
        offset: 0,
        len: 32,
    }];
    let launch = Launch {
        functions: vec![bad],
        buffers: vec![x],
        tasks,
    };
    let err = dev
        .launch(launch, opts(Policy::Fifo, false))
        .wait()
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, DeviceError::Fault { .. }), "{msg}");
    assert!(
        msg.contains("in program `oob` at pc 0")
            && msg.contains(&format!("task {victim} `t{victim}`"))
            && msg.contains("core AIV_"),
        "{msg}"
    );
    // The device takes the next launch.
    let tasks = random_dag(1000, 10);
    let report = dev
        .launch(
            Launch {
                tasks,
                ..Launch::default()
            },
            opts(Policy::Fair, false),
        )
        .wait()
        .unwrap();
    assert_eq!(report.tasks, 1000);
}

#[test]
fn bad_graphs_are_rejected_at_init() {
    let dev = device();
    let f = dev.verify(example("vadd_double_buffered.s")).unwrap();
    let x = f32_buffer(&dev, &[0.0; 16]);
    let cases: Vec<(Launch, &str)> = vec![
        (
            Launch {
                tasks: vec![
                    Task {
                        successors: vec![1],
                        ..Task::new("a", TaskKind::Aiv, None)
                    },
                    Task {
                        successors: vec![0],
                        ..Task::new("b", TaskKind::Hub, None)
                    },
                ],
                ..Launch::default()
            },
            "2 tasks are on a dependency cycle",
        ),
        (
            Launch {
                tasks: vec![Task {
                    successors: vec![5],
                    ..Task::new("a", TaskKind::Aiv, None)
                }],
                ..Launch::default()
            },
            "successor 5 is not another task",
        ),
        (
            Launch {
                tasks: vec![Task::new("a", TaskKind::Aiv, Some(0))],
                ..Launch::default()
            },
            "function 0 does not exist",
        ),
        (
            Launch {
                functions: vec![f.clone()],
                tasks: vec![Task::new("a", TaskKind::Aic, Some(0))],
                ..Launch::default()
            },
            "is for aiv cores",
        ),
        (
            Launch {
                functions: vec![f.clone()],
                tasks: vec![Task::new("a", TaskKind::Aiv, Some(0))],
                ..Launch::default()
            },
            "0 GM and 0 scalar arguments given",
        ),
        (
            Launch {
                functions: vec![f.clone()],
                buffers: vec![x.clone()],
                tasks: vec![Task {
                    gm: vec![
                        GmArg {
                            buffer: 0,
                            offset: 32,
                            len: 64
                        };
                        3
                    ],
                    scalars: vec![1],
                    ..Task::new("a", TaskKind::Aiv, Some(0))
                }],
            },
            "GM range 32+64 is outside buffer 0 (64 bytes)",
        ),
        (
            Launch {
                tasks: vec![Task::new("h", TaskKind::Hub, Some(0))],
                functions: vec![f],
                ..Launch::default()
            },
            "a hub has no function",
        ),
    ];
    for (launch, want) in cases {
        let msg = dev
            .launch(launch, LaunchOptions::default())
            .wait()
            .unwrap_err()
            .to_string();
        assert!(msg.contains(want), "expected `{want}` in: {msg}");
    }
    let other = device();
    let foreign = Arc::new(other.allocate(64).unwrap());
    let err = dev
        .launch(
            Launch {
                buffers: vec![foreign],
                ..Launch::default()
            },
            LaunchOptions::default(),
        )
        .wait()
        .unwrap_err();
    assert!(matches!(err, DeviceError::WrongDevice { .. }), "{err}");
    // An empty launch is fine.
    assert_eq!(
        dev.launch(Launch::default(), LaunchOptions::default())
            .wait()
            .unwrap()
            .tasks,
        0
    );
}

#[test]
fn many_threads_launching_on_one_device_lose_nothing() {
    let dev = Arc::new(device());
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let dev = dev.clone();
            std::thread::spawn(move || {
                let handles: Vec<_> = (0..10u64)
                    .map(|i| {
                        let n = 100 + (t * 10 + i) as usize * 13;
                        (
                            n,
                            dev.launch(
                                Launch {
                                    tasks: random_dag(n, t * 1000 + i),
                                    ..Launch::default()
                                },
                                LaunchOptions::default(),
                            ),
                        )
                    })
                    .collect();
                for (n, h) in handles {
                    assert_eq!(h.wait().unwrap().tasks, n);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    dev.synchronize().unwrap();
}

#[test]
fn the_launch_watchdog_turns_a_long_launch_into_an_error() {
    let dev = device();
    let spin = dev
        .verify(asm::assemble(".kernel spin aiv\n    movi r0, 0\nl:\n    add r0, r0, 1\n    blt r0, 2000000, l\n    end\n").unwrap())
        .unwrap();
    let tasks: Vec<Task> = (0..64)
        .map(|i| Task::new(format!("spin/{i}"), TaskKind::Aiv, Some(0)))
        .collect();
    let o = LaunchOptions {
        timeout: Duration::from_millis(30),
        name: "slow".into(),
        ..LaunchOptions::default()
    };
    let msg = dev
        .launch(
            Launch {
                functions: vec![spin],
                tasks,
                ..Launch::default()
            },
            o,
        )
        .wait()
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("ran past its 30ms timeout") && msg.contains("of 64 tasks done"),
        "{msg}"
    );
    assert_eq!(
        dev.launch(
            Launch {
                tasks: random_dag(10, 1),
                ..Launch::default()
            },
            LaunchOptions::default()
        )
        .wait()
        .unwrap()
        .tasks,
        10
    );
}

/// A launch of endless loops on a device whose core watchdog would let
/// each run for ~15 minutes: the timeout (or a cancel) stops the running
/// cores, not only the wait, and the device runs the next launch.
#[test]
fn timeouts_and_cancels_stop_running_tasks_and_the_device_goes_on() {
    let dev = SimDevice::new(DeviceConfig {
        watchdog_work: tilejit_device::config::MAX_WATCHDOG_WORK,
        ..DeviceConfig::default()
    })
    .unwrap();
    let spin = dev
        .verify(asm::assemble(".kernel spin aiv\nl:\n    jmp l\n").unwrap())
        .unwrap();
    let endless = || Launch {
        functions: vec![spin.clone()],
        tasks: (0..4)
            .map(|i| Task::new(format!("spin/{i}"), TaskKind::Aiv, Some(0)))
            .collect(),
        ..Launch::default()
    };
    let t0 = std::time::Instant::now();
    let err = dev
        .launch(
            endless(),
            LaunchOptions {
                timeout: Duration::from_millis(100),
                name: "endless".into(),
                ..LaunchOptions::default()
            },
        )
        .wait()
        .unwrap_err();
    assert!(
        matches!(
            &err,
            DeviceError::Stopped {
                done: 0,
                total: 4,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("ran past its 100ms timeout"),
        "{err}"
    );
    // Before running tasks were stopped, this wait lasted as long as the
    // core watchdog allowed (minutes); a generous bound, not a timing.
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handle = dev.launch(
        endless(),
        LaunchOptions {
            timeout: tilejit_device::MAX_LAUNCH_TIMEOUT,
            cancel: vec![cancel.clone()],
            name: "cancelled".into(),
            ..LaunchOptions::default()
        },
    );
    std::thread::sleep(Duration::from_millis(50));
    cancel.store(true, std::sync::atomic::Ordering::Release);
    let err = handle.wait().unwrap_err();
    assert!(
        err.to_string().contains("`cancelled` was cancelled"),
        "{err}"
    );
    let report = dev
        .launch(
            Launch {
                tasks: random_dag(10, 2),
                ..Launch::default()
            },
            LaunchOptions::default(),
        )
        .wait()
        .unwrap();
    assert_eq!(report.tasks, 10);
}

#[test]
fn unbounded_timeouts_and_watchdogs_are_refused() {
    let dev = device();
    for timeout in [
        Duration::ZERO,
        Duration::MAX,
        tilejit_device::MAX_LAUNCH_TIMEOUT * 2,
    ] {
        let err = dev
            .launch(
                Launch {
                    tasks: random_dag(3, 3),
                    ..Launch::default()
                },
                LaunchOptions {
                    timeout,
                    ..LaunchOptions::default()
                },
            )
            .wait()
            .unwrap_err();
        assert!(err.to_string().contains("timeout"), "{err}");
    }
    let err = SimDevice::new(DeviceConfig {
        watchdog_work: u64::MAX,
        ..DeviceConfig::default()
    })
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("watchdog_work = 18446744073709551615"),
        "{err}"
    );
}

#[test]
fn the_profile_is_a_chrome_trace_with_a_lane_per_core() {
    let dev = device();
    let tasks = random_dag(3000, 77);
    let cores = tasks.iter().filter(|t| t.kind != TaskKind::Hub).count();
    let report = dev
        .launch(
            Launch {
                tasks,
                ..Launch::default()
            },
            opts(Policy::NewestFirst, true),
        )
        .wait()
        .unwrap();
    let profile = report.profile.unwrap();
    let trace: serde_json::Value = serde_json::from_str(&profile.chrome_trace()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let lanes: Vec<String> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == 0)
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(lanes.len(), 72);
    for i in 0..24 {
        assert!(lanes.contains(&format!("AIC_{i}")));
    }
    for i in 0..48 {
        assert!(lanes.contains(&format!("AIV_{i}")));
    }
    let spans = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == 0)
        .count();
    assert_eq!(spans, cores);
    assert!(
        events.iter().any(|e| e["ph"] == "s") && events.iter().any(|e| e["ph"] == "f"),
        "dependency arrows"
    );
    assert!(events.iter().any(|e| e["ph"] == "C"), "ready counter");
    assert!(
        events.iter().any(|e| e["ph"] == "X" && e["pid"] == 1),
        "manager lanes"
    );
    let summary = profile.summary();
    assert!(
        summary.contains("3000 tasks")
            && summary.contains("cores used")
            && summary.contains("waited")
            || summary.contains("core wait"),
        "{summary}"
    );
}
