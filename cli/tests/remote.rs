//! Remote devices against real `tilejit serve` processes on 127.0.0.1.
//! Every server is started with `--exit-with-stdin`, so it stops when its
//! test (or the whole test process) goes, and is killed when its guard
//! drops.

#![allow(clippy::unwrap_used)] // tests assert by unwrapping

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tilejit::prelude::*;
use tilejit::{ArgValue, Device, ErrorKind};

/// A running server: its address and token; killed on drop.
struct Served {
    child: Child,
    addr: String,
    token: String,
}

impl Served {
    fn start(device: &str, extra: &[&str]) -> Served {
        Served::start_with(device, extra, Stdio::inherit(), None)
    }

    /// With stderr sent to `stderr`, and `TILEJIT_LOG` set to `log`.
    fn start_with(device: &str, extra: &[&str], stderr: Stdio, log: Option<&str>) -> Served {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tilejit"));
        if let Some(log) = log {
            cmd.env("TILEJIT_LOG", log);
        }
        let mut child = cmd
            .args([
                "serve",
                "--listen",
                ":0",
                "--device",
                device,
                "--exit-with-stdin",
            ])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start tilejit serve");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = lines.next().expect("a first line").expect("utf-8");
        let addr = first
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("first line: {first}"))
            .to_string();
        let second = lines.next().expect("a token line").expect("utf-8");
        let token = second
            .strip_prefix("token ")
            .expect("token line")
            .to_string();
        Served { child, addr, token }
    }

    fn device(&self) -> Device {
        Device::remote(&self.addr, &self.token).expect("connect")
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` until it holds or `limit` passes.
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .expect("values")
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

#[jit]
fn block(x: &Tensor, w: &Tensor, k: f32) -> Tensor {
    let h = x.matmul(w).gelu() * k;
    (x + &h).softmax(-1)
}

/// Chained jit calls and eager ops on a host server: the results stay
/// remote, and equal the same calls on this host bit for bit (the server
/// compiles the same graphs with the same code generator).
#[test]
fn chained_remote_calls_equal_host_results() {
    let server = Served::start("host", &[]);
    let remote = server.device();
    for (m, n) in [(1, 1), (3, 17), (64, 130)] {
        let x = Tensor::randn(&[m, n], 1);
        let w = Tensor::randn(&[n, n], 2) * 0.1;
        let want = {
            let y = block(&x, &w, 0.5).unwrap();
            let z = block(&y, &w, 2.0).unwrap();
            (&z * 3.0).exp() - &y
        };
        let ((xr, wr), up) =
            tilejit::count_transfers(|| (x.to(&remote).unwrap(), w.to(&remote).unwrap()));
        assert_eq!(up.to_device_bytes, 4 * (m * n + n * n) as u64);
        // Chained calls copy nothing (the literal 3.0 is part of its op's
        // graph, which goes by key).
        let (got, moved) = tilejit::count_transfers(|| {
            let y = block(&xr, &wr, 0.5).unwrap();
            let z = block(&y, &wr, 2.0).unwrap();
            (&z * 3.0).exp() - &y
        });
        assert_eq!((moved.to_device_bytes, moved.to_host_bytes), (0, 0));
        assert_eq!(got.device(), remote);
        assert_eq!(got.shape(), [m, n]);
        assert_eq!(bits(&got), bits(&want), "at {m}x{n}");
    }
    // A program seen before goes by key: no text sent, nothing compiled.
    let before = remote.server_stats().unwrap().unwrap();
    let x = Tensor::randn(&[3, 17], 9).to(&remote).unwrap();
    let w = Tensor::randn(&[17, 17], 8).to(&remote).unwrap();
    block(&x, &w, 7.0).unwrap();
    let after = remote.server_stats().unwrap().unwrap();
    assert_eq!(after.program_loads, before.program_loads, "{after:?}");
    assert_eq!(after.launches, before.launches + 1, "{after:?}");
    // Mixing devices is the usual error, naming both.
    let host = Tensor::ones(&[3, 17], DType::F32);
    let err = (&host + &Tensor::ones(&[3, 17], DType::F32).to(&remote).unwrap())
        .check()
        .unwrap_err()
        .clone();
    assert!(matches!(err, tilejit::Error::Devices { .. }), "{err}");
}

#[jit(dynamic)]
fn centered(x: &Tensor) -> Tensor {
    x - x.mean(-1, true)
}

/// A dynamic function's programs take the sizes they use as parameters
/// (`mean`'s divisor); those travel with each launch, so every size of a
/// class computes what the host does.
#[test]
fn dynamic_functions_run_remote_at_every_size() {
    let server = Served::start("host", &[]);
    let remote = server.device();
    for n in [5, 7, 9, 33] {
        let x = Tensor::randn(&[3, n], n as u64);
        let got = centered(&x.to(&remote).unwrap()).unwrap();
        assert_eq!(bits(&got), bits(&centered(&x).unwrap()), "n = {n}");
    }
}

/// A Sim server runs the same programs on its simulated device: equal, bit
/// for bit, to this process's own Sim runs.
#[test]
fn a_sim_server_matches_local_sim_runs() {
    let server = Served::start("sim", &[]);
    let remote = server.device();
    assert!(remote.to_string().ends_with(", sim)"), "{remote}");
    let x = Tensor::randn(&[8, 32], 3);
    let w = Tensor::randn(&[32, 32], 4) * 0.2;
    let want = with_mode(RunMode::Sim, || block(&x, &w, 0.5).unwrap());
    let got = block(&x.to(&remote).unwrap(), &w.to(&remote).unwrap(), 0.5).unwrap();
    assert_eq!(bits(&got), bits(&want));
}

/// 64 MiB goes up and comes back bit-exact, streamed in chunks well under
/// gRPC's message limit.
#[test]
fn a_64_mib_tensor_round_trips_bit_exact() {
    let server = Served::start("host", &[]);
    let remote = server.device();
    let n = 16 << 20;
    let data: Vec<f32> = (0..n)
        .map(|i| f32::from_bits((i as u32).wrapping_mul(2654435761)))
        .collect();
    let x = Tensor::from_vec(data.clone(), &[n]).unwrap();
    let start = Instant::now();
    let r = x.to(&remote).unwrap();
    let back = r.to(&Device::host()).unwrap();
    let secs = start.elapsed().as_secs_f64();
    let got: Vec<u32> = back
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    let want: Vec<u32> = data.iter().map(|v| v.to_bits()).collect();
    assert!(got == want, "64 MiB came back different");
    eprintln!(
        "64 MiB up and down in {secs:.2} s ({:.2} GB/s)",
        2.0 * 67.1e6 / secs / 1e9
    );
    let stats = remote.server_stats().unwrap().unwrap();
    assert_eq!(stats.tensor_bytes, 64 << 20);
    drop(r);
    assert!(eventually(Duration::from_secs(5), || {
        remote.server_stats().unwrap().unwrap().tensors == 0
    }));
}

/// The server's registry by name: the builtins, argument errors that name
/// the function, unknown names.
#[test]
fn registry_functions_are_callable_by_name() {
    let server = Served::start("host", &[]);
    let remote = server.device();
    let names = remote.functions().unwrap();
    for n in ["nn.softmax", "nn.gelu", "math.matmul", "math.add"] {
        assert!(names.iter().any(|m| m == n), "{names:?}");
    }
    let x = Tensor::randn(&[4, 9], 5);
    let xr = x.to(&remote).unwrap();
    let out = remote.call("nn.softmax", &[ArgValue::Tensor(&xr)]).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].device(), remote);
    assert_eq!(bits(&out[0]), bits(&x.softmax(-1)));
    // A host tensor goes along by value.
    let out = remote
        .call(
            "math.matmul",
            &[ArgValue::Tensor(&xr), ArgValue::Tensor(&x.transpose(0, 1))],
        )
        .unwrap();
    assert_eq!(bits(&out[0]), bits(&x.matmul(&x.transpose(0, 1))));
    let err = remote.call("nn.softmax", &[]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadArgument);
    assert!(err.to_string().contains("nn.softmax"), "{err}");
    // Twenty 64 KiB host tensors (1.25 MiB) go as values only while the
    // request stays under its bound, the rest uploaded: the server gets
    // the call and answers its arity error, not a transport one.
    let big = Tensor::ones(&[16 << 10], DType::F32);
    let many: Vec<ArgValue> = (0..20).map(|_| ArgValue::Tensor(&big)).collect();
    let err = remote.call("math.add", &many).unwrap_err();
    assert!(err.to_string().contains("two tensors, got 20"), "{err}");
    let err = remote
        .call("no.such", &[ArgValue::Tensor(&xr)])
        .unwrap_err();
    assert!(err.to_string().contains("no.such"), "{err}");
}

/// `TILEJIT_LOG=remote` makes the server say what happens: sessions
/// opened and closed, programs compiled, refused and failed requests.
#[test]
fn the_server_logs_under_tilejit_log_remote() {
    let mut server = Served::start_with("host", &[], Stdio::piped(), Some("remote"));
    {
        let remote = server.device();
        let x = Tensor::ones(&[3], DType::F32).to(&remote).unwrap();
        assert_eq!((&x * 2.0).to_vec::<f32>().unwrap(), [2.0; 3]);
        assert!(remote.call("no.such", &[]).is_err());
        assert!(Device::remote(&server.addr, "wrong").is_err());
    }
    // The close goes out as the device drops; give it a moment.
    let stats = server.device();
    assert!(eventually(Duration::from_secs(5), || {
        stats.server_stats().unwrap().unwrap().sessions == 1
    }));
    drop(stats);
    let _ = server.child.kill();
    let mut log = String::new();
    let mut err = server.child.stderr.take().unwrap();
    err.read_to_string(&mut log).unwrap();
    assert!(!log.contains("launch failed"), "{log}");
    for line in [
        "session 1 opened by 127.0.0.1:",
        "session 1 closed: ",
        "compiled in",
        "call failed: InvalidArgument: bad argument [E1]: registry name `no.such`",
        "refused a call without the right token",
    ] {
        assert!(log.contains(line), "no `{line}` in:\n{log}");
    }
}

/// A wrong token is refused, saying no more than that.
#[test]
fn a_wrong_token_is_refused() {
    let server = Served::start("host", &[]);
    let err = Device::remote(&server.addr, "not-the-token").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadArgument);
    assert!(err.to_string().contains("refused the token"), "{err}");
    // The right one still works.
    let remote = server.device();
    let x = Tensor::ones(&[2], DType::F32).to(&remote).unwrap();
    assert_eq!((&x + &x).to_vec::<f32>().unwrap(), [2.0, 2.0]);
}

/// Garbage on the socket (not HTTP/2, then a valid preface with junk
/// frames) does not take the server down.
#[test]
fn garbage_bytes_do_not_take_the_server_down() {
    let server = Served::start("host", &[]);
    let junk: [&[u8]; 3] = [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        &[0xff; 4096],
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x40\x07\xff\x00\x00\x00\x01garbage-frame",
    ];
    for j in junk {
        let mut s = std::net::TcpStream::connect(&server.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(j);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    let remote = server.device();
    let x = Tensor::ones(&[3], DType::F32).to(&remote).unwrap();
    assert_eq!((&x * 2.0).to_vec::<f32>().unwrap(), [2.0; 3]);
}

/// A client killed in the middle of an upload: the server keeps serving,
/// and the dead client's session and tensors are freed after the session
/// timeout.
#[test]
fn a_client_killed_mid_transfer_leaks_nothing() {
    if let Ok(target) = std::env::var("TILEJIT_REMOTE_CHILD") {
        // The child: upload big tensors until killed.
        let (addr, token) = target.split_once(' ').expect("addr token");
        let remote = Device::remote(addr, token).expect("connect");
        let x = Tensor::ones(&[16 << 20], DType::F32);
        let mut kept = Vec::new();
        // Bounded: killed long before, or failing once its server goes.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            kept.push(x.to(&remote).expect("upload"));
            if kept.len() > 3 {
                kept.remove(0);
            }
        }
        return;
    }
    let server = Served::start("host", &["--session-timeout", "1"]);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_client_killed_mid_transfer_leaks_nothing",
            "--nocapture",
        ])
        .env(
            "TILEJIT_REMOTE_CHILD",
            format!("{} {}", server.addr, server.token),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let remote = server.device();
    assert!(
        eventually(Duration::from_secs(20), || {
            remote.server_stats().unwrap().unwrap().tensor_bytes >= 64 << 20
        }),
        "the child never uploaded"
    );
    std::thread::sleep(Duration::from_millis(150));
    child.kill().unwrap();
    child.wait().unwrap();
    // Only our own session is left, holding nothing.
    assert!(
        eventually(Duration::from_secs(10), || {
            let s = remote.server_stats().unwrap().unwrap();
            s.sessions == 1 && s.tensors == 0 && s.tensor_bytes == 0
        }),
        "{:?}",
        remote.server_stats()
    );
    let x = Tensor::ones(&[4], DType::F32).to(&remote).unwrap();
    assert_eq!((&x + 1.0).to_vec::<f32>().unwrap(), [2.0; 4]);
}

/// A server killed, or frozen, mid-call: the call fails within seconds
/// (liveness, not a timeout scaled to the work), never hangs.
#[test]
fn a_dead_or_frozen_server_is_an_error_within_seconds() {
    for how in ["KILL", "STOP"] {
        let server = Served::start("host", &[]);
        let remote = server.device();
        let x = Tensor::ones(&[16 << 20], DType::F32);
        let pid = server.pid();
        let worker = std::thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(60) {
                if let Err(e) = x.to(&remote).and_then(|r| r.to_vec::<f32>()) {
                    return Some(e);
                }
            }
            None
        });
        std::thread::sleep(Duration::from_millis(300));
        let signalled = Instant::now();
        let status = Command::new("kill")
            .args([&format!("-{how}"), &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let err = worker.join().unwrap().expect("the calls never failed");
        let waited = signalled.elapsed();
        assert!(waited < Duration::from_secs(10), "{how}: {waited:?}");
        assert_eq!(err.kind(), ErrorKind::Device, "{how}: {err}");
        if how == "STOP" {
            let _ = Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        }
    }
    // A listener that accepts and then says nothing (not a server, or one
    // frozen before it answers): an error within seconds, not a hang.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let hold = std::thread::spawn(move || silent.accept().map(|(s, _)| s));
    let start = Instant::now();
    let err = Device::remote(&addr, "t").unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(err.kind(), ErrorKind::Device, "{err}");
    drop(hold.join());
    // Nobody listening: an error, quickly.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let start = Instant::now();
    let err = Device::remote(&format!("127.0.0.1:{port}"), "t").unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(err.kind(), ErrorKind::Device, "{err}");
}

/// One remote device shared by eight threads, each chaining calls on its
/// own tensors and on a shared weight: every result is the host's.
#[test]
fn many_threads_share_one_remote_device() {
    let server = Served::start("host", &[]);
    let remote = server.device();
    let w = Tensor::randn(&[24, 24], 3) * 0.2;
    let wr = w.to(&remote).unwrap();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let (w, wr, remote) = (&w, &wr, &remote);
            s.spawn(move || {
                for i in 0..5u64 {
                    let x = Tensor::randn(&[6, 24], 100 * t + i);
                    let want = block(&block(&x, w, 0.5).unwrap(), w, 1.5).unwrap();
                    let xr = x.to(remote).unwrap();
                    let got = block(&block(&xr, wr, 0.5).unwrap(), wr, 1.5).unwrap();
                    assert_eq!(bits(&got), bits(&want), "thread {t} call {i}");
                }
            });
        }
    });
    let stats = remote.server_stats().unwrap().unwrap();
    assert!(stats.launches >= 80, "{stats:?}");
}

/// Two servers behind one pool: independent calls from several threads
/// go to both, and every result is right.
#[test]
fn a_pool_spreads_calls_over_two_servers() {
    let (a, b) = (Served::start("host", &[]), Served::start("sim", &[]));
    let pool = tilejit::remote::DevicePool::new(vec![a.device(), b.device()]).unwrap();
    let w = Tensor::randn(&[16, 16], 7) * 0.25;
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (pool, w) = (&pool, &w);
            s.spawn(move || {
                for i in 0..4u64 {
                    let x = Tensor::randn(&[8, 16], 10 * t + i);
                    let want = block(&x, w, 0.5).unwrap().to_vec::<f32>().unwrap();
                    let got = pool
                        .run(|d| block(&x.to(d)?, &w.to(d)?, 0.5)?.to_vec::<f32>())
                        .unwrap();
                    for (g, w) in got.iter().zip(&want) {
                        assert!((g - w).abs() <= 1e-5 * w.abs().max(1e-3), "{g} vs {w}");
                    }
                }
            });
        }
    });
    let jobs = pool.jobs();
    assert_eq!(jobs.iter().sum::<u64>(), 16);
    assert!(jobs.iter().all(|&j| j > 0), "{jobs:?}");
    for d in pool.devices() {
        assert!(d.server_stats().unwrap().unwrap().launches > 0);
    }
}

/// The server's resident memory, in bytes (Linux: `/proc/PID/statm`).
fn rss(pid: u32) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// A long-running server gives the memory of a freed tensor back: after
/// a 1 GiB upload, a download and its free (and a 64 MiB launch result
/// freed), the server's RSS comes back to within a small margin of what
/// it was before.
#[test]
#[cfg(target_os = "linux")]
fn a_server_gives_back_the_memory_of_freed_tensors() {
    let server = Served::start("host", &[]);
    let remote = server.device();
    // Warm up: a session, a small upload and download, a program.
    let small = Tensor::ones(&[1 << 10], DType::F32).to(&remote).unwrap();
    assert_eq!((&small * 2.0).to_vec::<f32>().unwrap()[0], 2.0);
    drop(small);
    assert!(eventually(Duration::from_secs(5), || {
        remote.server_stats().unwrap().unwrap().tensors == 0
    }));
    std::thread::sleep(Duration::from_millis(200));
    let before = rss(server.pid());
    {
        let x = Tensor::ones(&[256 << 20], DType::F32);
        let r = x.to(&remote).unwrap();
        drop(x);
        let back = r.to_vec::<f32>().unwrap();
        assert_eq!((back.len(), back[12345]), (256 << 20, 1.0));
        let peak = rss(server.pid());
        eprintln!("server RSS with 1 GiB held: {} MiB", peak >> 20);
        // And a launch's 64 MiB result (whose storage, freed, would go
        // to the storage pool).
        let m = Tensor::ones(&[16 << 20], DType::F32).to(&remote).unwrap();
        let y = &m + 1.0;
        assert_eq!(y.to_vec::<f32>().unwrap()[7], 2.0);
    }
    assert!(eventually(Duration::from_secs(10), || {
        remote.server_stats().unwrap().unwrap().tensors == 0
    }));
    let mut after = rss(server.pid());
    eventually(Duration::from_secs(3), || {
        after = rss(server.pid());
        after < before + (16 << 20)
    });
    eprintln!(
        "server RSS before 1 GiB up, down and freed: {} MiB; after: {} MiB",
        before >> 20,
        after >> 20
    );
    assert!(
        after < before + (16 << 20),
        "the server kept {} MiB",
        (after - before) >> 20
    );
}

/// TLS on loopback: `tilejit serve --tls-cert --tls-key` with a
/// certificate made for the test (rcgen), reached at `https://localhost`
/// with that certificate as the CA: a round trip. A client in clear, or
/// one that trusts another certificate, gets nothing from it.
#[test]
fn a_tls_server_round_trips_with_a_generated_certificate() {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_pem = made.cert.pem();
    let dir = std::env::temp_dir().join(format!("tilejit-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert_file, key_file) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_file, &cert_pem).unwrap();
    std::fs::write(&key_file, made.key_pair.serialize_pem()).unwrap();
    let server = Served::start(
        "host",
        &[
            "--tls-cert",
            cert_file.to_str().unwrap(),
            "--tls-key",
            key_file.to_str().unwrap(),
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    let port = server.addr.rsplit(':').next().unwrap();
    let https = format!("https://localhost:{port}");
    let trusting = tilejit::remote::RemoteOptions {
        ca_cert_pem: Some(cert_pem.into_bytes()),
        ..Default::default()
    };
    let remote = Device::remote_with(&https, &server.token, &trusting).unwrap();
    let x = Tensor::randn(&[3, 5], 1);
    let got = (&x.to(&remote).unwrap() * 2.0).to_vec::<f32>().unwrap();
    assert_eq!(got, (&x * 2.0).to_vec::<f32>().unwrap());
    // In clear to the TLS server: no session.
    assert!(Device::remote(&server.addr, &server.token).is_err());
    // Trusting another certificate: the handshake fails.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let wrong = tilejit::remote::RemoteOptions {
        ca_cert_pem: Some(other.cert.pem().into_bytes()),
        ..Default::default()
    };
    let err = Device::remote_with(&https, &server.token, &wrong).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Device, "{err}");
    // https with no CA is refused before connecting.
    let err = Device::remote(&https, &server.token).unwrap_err();
    assert!(err.to_string().contains("CA certificate"), "{err}");
}

/// The token never goes in clear to an address that is not loopback:
/// `Device::remote` refuses before connecting, unless allowed; loopback,
/// by name or number, is fine.
#[test]
fn the_token_is_not_sent_in_clear_beyond_loopback() {
    for addr in [
        "192.0.2.1:7070",
        "http://192.0.2.1:7070",
        "[2001:db8::1]:7070",
    ] {
        let start = Instant::now();
        let err = Device::remote(addr, "t").unwrap_err();
        assert!(
            err.to_string()
                .contains("refusing to send the token in clear"),
            "{addr}: {err}"
        );
        assert!(start.elapsed() < Duration::from_secs(1));
    }
    let server = Served::start("host", &[]);
    let port = server.addr.rsplit(':').next().unwrap();
    for addr in [
        format!("localhost:{port}"),
        format!("http://127.0.0.1:{port}"),
    ] {
        let remote = Device::remote(&addr, &server.token).unwrap();
        let x = Tensor::ones(&[2], DType::F32).to(&remote).unwrap();
        assert_eq!((&x + &x).to_vec::<f32>().unwrap(), [2.0, 2.0]);
    }
}
