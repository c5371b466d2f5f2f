//! The on-disk kernel cache across real processes: this test binary runs
//! itself as children (`child` below, selected by `TILEJIT_DISK_CHILD`),
//! each with `TILEJIT_CACHE_DIR` at a fresh temp directory, since the
//! configuration is read once per process. A child compiles and runs a
//! few graphs on the host and the simulated device, checks every output
//! against the reference interpreter, and prints its cache counters and a digest of
//! the output bits for the parent to compare.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use tilejit_device::Target;
use tilejit_ir::{Array, Shape};
use tilejit_runtime::{kernel_cache, Program};
use tilejit_tests::TempDir;

const CHILD_VAR: &str = "TILEJIT_DISK_CHILD";

/// Graphs whose kernels the device compiles (one reduce-free, two with
/// row reductions).
const GRAPHS: [&str; 3] = [
    include_str!("../golden/fusion/softmax_rows.graph"),
    include_str!("../golden/fusion/layernorm.graph"),
    include_str!("../golden/fusion/elementwise_chain.graph"),
];

/// What a child reports.
#[derive(Debug, PartialEq, Eq)]
struct Report {
    bits: u64,
    sim_entries: u64,
    host_entries: u64,
    compiles: u64,
    disk_hits: u64,
    disk_misses: u64,
    disk_writes: u64,
    disk_rejected: u64,
}

impl Report {
    /// Kernels in the cache, host and Sim.
    fn entries(&self) -> u64 {
        self.sim_entries + self.host_entries
    }
}

/// Inputs of `ty`'s shape: a deterministic ramp of awkward values.
fn input(shape: &Shape, seed: usize) -> Array {
    let n = shape.numel();
    let data: Vec<f32> = (0..n)
        .map(|i| ((i * 37 + seed * 11) % 101) as f32 / 13.0 - 3.5)
        .collect();
    Array::from_vec(data, shape.dims()).unwrap()
}

/// The child's work: runs every graph on Host and Sim, checks them
/// against the reference, prints the report line.
#[test]
fn child() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return; // only meaningful as a child process
    }
    let mut h = DefaultHasher::new();
    for text in GRAPHS {
        let g = tilejit_ir::text::parse(text).unwrap();
        let inputs: Vec<Array> = g
            .input_types()
            .iter()
            .enumerate()
            .map(|(i, ty)| input(&ty.shape, i))
            .collect();
        let p = Program::compile(g).unwrap();
        let (sim, _) = p.run_sim(&inputs, &[], false).unwrap();
        let reference = p.run_reference(&inputs, &[]).unwrap();
        let host = p.run(&inputs, &[]).unwrap();
        let bits = |a: &Array| {
            let v = a.as_slice::<f32>().unwrap();
            v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        };
        for ((s, r), h_out) in sim.iter().zip(&reference).zip(&host) {
            assert_eq!(bits(s), bits(r), "sim differs from the reference");
            // Host math may round differently from the reference: close,
            // and the digest holds its exact bits for the parent to compare
            // across processes.
            for (x, y) in h_out
                .as_slice::<f32>()
                .unwrap()
                .iter()
                .zip(r.as_slice::<f32>().unwrap())
            {
                assert!(
                    (x - y).abs() <= 1e-4 * y.abs().max(1.0),
                    "host {x} vs reference {y}"
                );
            }
            bits(s).hash(&mut h);
            bits(h_out).hash(&mut h);
        }
    }
    let cache = kernel_cache();
    let count = |t: Target| cache.entries().iter().filter(|e| e.target == t).count() as u64;
    let s = cache.stats();
    println!(
        "DISKCHILD {} {} {} {} {} {} {} {}",
        h.finish(),
        count(Target::Sim),
        count(Target::Host),
        s.compiles,
        s.disk_hits,
        s.disk_misses,
        s.disk_writes,
        s.disk_rejected
    );
}

fn temp_dir(tag: &str) -> TempDir {
    TempDir::new(&format!("disk-{tag}"))
}

/// Starts a child with the disk cache at `cache_dir` (a path, or `off`).
fn spawn(cache_dir: &Path) -> Child {
    command(cache_dir).spawn().unwrap()
}

/// The child's command, for callers that set more of its environment.
fn command(cache_dir: &Path) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "disk_cache::child",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_VAR, "1")
    .env("TILEJIT_CACHE_DIR", cache_dir)
    .env("TILEJIT_WARMUP", "off")
    .env_remove("TILEJIT_LOG")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c
}

/// Waits for a child; fails unless it succeeded and reported.
fn finish(child: Child) -> Report {
    let out = child.wait_with_output().unwrap();
    let line = tilejit_tests::child_report(&out, "DISKCHILD ");
    let v: Vec<u64> = line
        .split_whitespace()
        .take(8)
        .map(|x| x.parse().unwrap())
        .collect();
    Report {
        bits: v[0],
        sim_entries: v[1],
        host_entries: v[2],
        compiles: v[3],
        disk_hits: v[4],
        disk_misses: v[5],
        disk_writes: v[6],
        disk_rejected: v[7],
    }
}

fn run_child(cache_dir: &Path) -> Report {
    finish(spawn(cache_dir))
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// A cold process writes every kernel, host and Sim; a second one loads
/// them all, compiles nothing, and computes the same bits.
#[test]
fn a_second_process_compiles_nothing() {
    let dir = temp_dir("second");
    let first = run_child(&dir);
    let n = first.entries();
    assert!(first.sim_entries > 0 && first.host_entries > 0, "{first:?}");
    assert_eq!(
        (
            first.compiles,
            first.disk_hits,
            first.disk_misses,
            first.disk_writes
        ),
        (n, 0, n, n),
        "{first:?}"
    );
    assert_eq!(files(&dir).len() as u64, n);
    let second = run_child(&dir);
    assert_eq!(second.bits, first.bits);
    assert_eq!(
        (
            second.compiles,
            second.disk_hits,
            second.disk_misses,
            second.disk_writes
        ),
        (0, n, 0, 0),
        "{second:?}"
    );
}

/// Every cache file damaged in one of three ways: the child still gets
/// the right results (it checks them against the reference), counts each
/// file rejected, and replaces it, so the next child hits every one.
#[test]
fn corrupt_files_are_rejected_recompiled_and_replaced() {
    let dir = temp_dir("corrupt");
    let first = run_child(&dir);
    let paths = files(&dir);
    assert!(paths.len() >= 3, "{paths:?}");
    for (i, p) in paths.iter().enumerate() {
        let bytes = std::fs::read(p).unwrap();
        let damaged = match i % 3 {
            0 => bytes[..bytes.len() / 2].to_vec(),
            1 => {
                let mut b = bytes.clone();
                b[bytes.len() / 3] ^= 0x40;
                b
            }
            _ => b"this is not a kernel".repeat(7),
        };
        std::fs::write(p, damaged).unwrap();
    }
    let damaged = run_child(&dir);
    assert_eq!(damaged.bits, first.bits);
    assert_eq!(
        (
            damaged.disk_hits,
            damaged.disk_rejected,
            damaged.disk_writes
        ),
        (0, paths.len() as u64, paths.len() as u64),
        "{damaged:?}"
    );
    let healed = run_child(&dir);
    assert_eq!(healed.bits, first.bits);
    assert_eq!(
        (healed.disk_hits, healed.disk_rejected, healed.compiles),
        (paths.len() as u64, 0, 0),
        "{healed:?}"
    );
}

/// Four processes on one empty cache at once: all succeed with the same
/// bits, no temp file survives, and the cache they leave serves a fifth
/// process entirely.
#[test]
fn four_racing_processes_leave_a_usable_cache() {
    let dir = temp_dir("race");
    let children: Vec<Child> = (0..4).map(|_| spawn(&dir)).collect();
    let reports: Vec<Report> = children.into_iter().map(finish).collect();
    for r in &reports[1..] {
        assert_eq!(r.bits, reports[0].bits);
    }
    let names = files(&dir);
    assert!(
        names
            .iter()
            .all(|p| p.extension().is_some_and(|e| e == "tjk")),
        "{names:?}"
    );
    assert_eq!(names.len() as u64, reports[0].entries());
    let after = run_child(&dir);
    assert_eq!(after.bits, reports[0].bits);
    assert_eq!(
        (after.disk_hits, after.disk_misses, after.compiles),
        (after.entries(), 0, 0),
        "{after:?}"
    );
}

/// `TILEJIT_CACHE_DIR=off`: nothing is read or written, not even in the
/// default location (HOME and XDG_CACHE_HOME point at an empty directory).
#[test]
fn off_writes_nothing() {
    let home = temp_dir("off");
    let home_dir = home.to_str().unwrap().to_string();
    // `TILEJIT_CACHE_DIR=off`, and a real directory with a zero byte bound.
    for (dir, bytes) in [("off", "1G"), (home_dir.as_str(), "0")] {
        let child = command(Path::new(dir))
            .env("TILEJIT_CACHE_BYTES", bytes)
            .env("HOME", &*home)
            .env("XDG_CACHE_HOME", &*home)
            .spawn()
            .unwrap();
        let r = finish(child);
        assert!(r.sim_entries > 0);
        assert_eq!(
            (r.disk_hits, r.disk_misses, r.disk_writes, r.disk_rejected),
            (0, 0, 0, 0),
            "{dir} {bytes}: {r:?}"
        );
        assert!(files(&home).is_empty(), "{:?}", files(&home));
    }
}

/// The suite itself never uses the user's cache directory: the
/// workspace's `.cargo/config.toml` sets `TILEJIT_CACHE_DIR=off` for
/// every process cargo runs unless the environment already sets it (CI
/// sets a temp dir).
#[test]
fn the_suite_never_uses_the_users_cache_directory() {
    assert!(
        std::env::var_os("TILEJIT_CACHE_DIR").is_some(),
        "run the suite through cargo (its .cargo/config.toml sets TILEJIT_CACHE_DIR), \
         or set TILEJIT_CACHE_DIR yourself"
    );
    if let (Some(dir), Some(home)) = (
        &tilejit_runtime::config::config().cache_dir,
        std::env::var_os("HOME"),
    ) {
        assert!(!dir.starts_with(Path::new(&home).join(".cache")), "{dir:?}");
    }
}

/// A cache directory the process must not trust is refused, as ssh
/// refuses `~/.ssh`: a relative `TILEJIT_CACHE_DIR`, a directory
/// writable by its group or by anyone. The child says why on stderr,
/// once, runs with the disk cache off (its results still checked), and
/// neither reads the entries a trusting process left there nor writes.
#[cfg(unix)]
#[test]
fn an_untrusted_cache_directory_is_refused_with_its_reason() {
    use std::os::unix::fs::PermissionsExt;
    let run = |dir: &Path, cwd: &Path| {
        let out = command(dir).current_dir(cwd).output().unwrap();
        let line = tilejit_tests::child_report(&out, "DISKCHILD ");
        let v: Vec<u64> = line
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        (v, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    // Relative: refused before anything is created under the cwd.
    let cwd = temp_dir("relative");
    let (v, err) = run(Path::new("rel-cache"), &cwd);
    assert_eq!(&v[4..8], [0, 0, 0, 0], "{err}");
    assert!(
        err.contains("disk cache off") && err.contains("relative path"),
        "{err}"
    );
    assert_eq!(err.matches("disk cache off").count(), 1, "{err}");
    assert!(files(&cwd).is_empty(), "{:?}", files(&cwd));
    // A trusted directory, filled, then opened to the group or anyone.
    let dir = temp_dir("modes");
    let filled = run_child(&dir);
    let n = files(&dir).len();
    assert!(n > 0 && filled.disk_writes as usize == n);
    for mode in [0o770, 0o777] {
        std::fs::set_permissions(&*dir, std::fs::Permissions::from_mode(mode)).unwrap();
        let (v, err) = run(&dir, &dir);
        assert_eq!(&v[4..8], [0, 0, 0, 0], "{mode:o}: {err}");
        assert_eq!(v[0], filled.bits);
        assert!(
            err.contains("disk cache off") && err.contains(&format!("mode {mode:04o}")),
            "{err}"
        );
        assert_eq!(files(&dir).len(), n);
    }
    std::fs::set_permissions(&*dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(
        run_child(&dir).compiles,
        0,
        "trusted again, it serves every kernel"
    );
}
