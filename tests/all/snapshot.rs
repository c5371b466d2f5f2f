//! Snapshots (`JitFunction::save`, `load`, `load_code`) across real
//! processes: this test binary saves a jit function's programs, then runs
//! itself as a child (`child` below, selected by `TILEJIT_SNAP_CHILD`),
//! which loads the file (safely, or with the unsafe `load_code` under
//! `TILEJIT_SNAP_TRUST=code`), freezes the function and calls every
//! saved signature on Host and Sim. The child prints how many signatures
//! it loaded, how many times the body ran (traces), its kernel cache
//! counters and a digest of the output bits, for the parent to compare.
//! Damaged, foreign and misplaced files are clean errors; the safe load
//! never runs stored code, however it was altered; a manifest rewritten
//! to another CPU or build makes `load_code` recompile from the graphs.

use sha2::{Digest, Sha256};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use tilejit::prelude::*;
use tilejit::{kernel_cache, Error};
use tilejit_runtime::{RuntimeError, SnapshotProblem};
use tilejit_tests::TempDir;

const CHILD_VAR: &str = "TILEJIT_SNAP_CHILD";
const FILE_VAR: &str = "TILEJIT_SNAP_FILE";
/// `code`: the child loads with `load_code`, else with `load`.
const TRUST_VAR: &str = "TILEJIT_SNAP_TRUST";

/// Body runs of `snap_block`: it runs only while tracing.
static TRACES: AtomicUsize = AtomicUsize::new(0);

/// A matmul, a float parameter, a static bool and a constant (a
/// non-splat tensor made in the body).
#[jit]
fn snap_block(x: &Tensor, w: &Tensor, k: f32, relu: bool) -> Tensor {
    TRACES.fetch_add(1, Ordering::SeqCst);
    let bias = Tensor::from_vec(vec![0.25f32, -0.5, 0.125, 1.0], &[4]).unwrap();
    let h = x.matmul(w) * k + bias;
    let h = if relu { h.relu() } else { h };
    h.softmax(-1)
}

/// A second function, for a snapshot loaded into the wrong one.
#[jit]
fn snap_other(x: &Tensor, w: &Tensor, k: f32, relu: bool) -> Tensor {
    let h = x.matmul(w) * k;
    if relu {
        h.relu()
    } else {
        h
    }
}

/// A deterministic ramp of awkward values.
fn ramp(dims: &[usize], seed: usize) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 37 + seed * 11) % 101) as f32 / 13.0 - 3.5)
        .collect();
    Tensor::from_vec(v, dims).unwrap()
}

/// The calls both processes make: three signatures (two shapes, both
/// values of the static bool).
fn calls() -> Vec<(Tensor, Tensor, f32, bool)> {
    vec![
        (ramp(&[8, 16], 1), ramp(&[16, 4], 2), 0.5, true),
        (ramp(&[8, 16], 3), ramp(&[16, 4], 4), -1.5, false),
        (ramp(&[2, 3], 5), ramp(&[3, 4], 6), 2.0, true),
    ]
}

/// A digest of every call's output bits on Host, then on Sim.
fn digest() -> (u64, u64) {
    let mut out = [0u64; 2];
    for (i, mode) in [RunMode::Host, RunMode::Sim].into_iter().enumerate() {
        let mut h = DefaultHasher::new();
        for (x, w, k, relu) in calls() {
            let y = with_mode(mode, || snap_block(&x, &w, k, relu)).unwrap();
            let bits: Vec<u32> = y
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect();
            bits.hash(&mut h);
        }
        out[i] = h.finish();
    }
    (out[0], out[1])
}

/// The child: loads the snapshot `TILEJIT_SNAP_FILE` names, freezes the
/// function (a miss would be an error, not a trace) and reports.
#[test]
fn child() {
    let Some(file) = std::env::var_os(FILE_VAR) else {
        return; // only meaningful as a child process
    };
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
    }
    let f = snap_block::jit();
    let load = if std::env::var_os(TRUST_VAR).is_some_and(|v| v == "code") {
        // SAFETY: the parent test saved this file itself, in a private
        // temp directory, from this very binary, and altered at most its
        // manifest.
        #[allow(unsafe_code)]
        unsafe {
            f.load_code(&file).unwrap()
        }
    } else {
        f.load_snapshot(&file).unwrap()
    };
    f.freeze();
    let (host, sim) = digest();
    let s = kernel_cache().stats();
    println!(
        "SNAPCHILD {} {} {} {} {} {} {} {} {}",
        load.signatures,
        TRACES.load(Ordering::SeqCst),
        f.stats().builds,
        s.compiles,
        s.snapshot_loads,
        s.disk_hits,
        host,
        sim,
        load.recompiled.unwrap_or_default()
    );
}

/// What a child reports.
#[derive(Debug)]
struct Report {
    loaded: usize,
    traces: usize,
    builds: u64,
    compiles: u64,
    snapshot_loads: u64,
    disk_hits: u64,
    host: u64,
    sim: u64,
    recompiled: String,
    /// Its stderr, with `TILEJIT_LOG=cache` on.
    log: String,
}

/// How a child loads and which disk cache it has.
#[derive(Clone, Copy)]
enum Trust<'a> {
    /// `load_code`, disk cache off.
    Code,
    /// `load`, the disk cache at this directory (or off).
    Graphs(Option<&'a Path>),
}

/// Runs the child on `file` with `load_code` and the disk cache off.
fn run_child(file: &Path) -> Report {
    run_child_with(file, Trust::Code)
}

/// Runs the child on `file` with `TILEJIT_LOG=cache`; fails unless it
/// succeeded and reported.
fn run_child_with(file: &Path, trust: Trust<'_>) -> Report {
    let cache = match trust {
        Trust::Graphs(Some(dir)) => dir.as_os_str().to_owned(),
        _ => "off".into(),
    };
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "snapshot::child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, "1")
        .env(FILE_VAR, file)
        .env(
            TRUST_VAR,
            if matches!(trust, Trust::Code) {
                "code"
            } else {
                "graphs"
            },
        )
        .env("TILEJIT_CACHE_DIR", cache)
        .env("TILEJIT_WARMUP", "off")
        .env("TILEJIT_LOG", "cache")
        .env_remove("TILEJIT_RUN_MODE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let line = tilejit_tests::child_report(&out, "SNAPCHILD ");
    let mut v = line.splitn(9, ' ');
    let mut next = || v.next().unwrap_or("").to_string();
    Report {
        loaded: next().parse().unwrap(),
        traces: next().parse().unwrap(),
        builds: next().parse().unwrap(),
        compiles: next().parse().unwrap(),
        snapshot_loads: next().parse().unwrap(),
        disk_hits: next().parse().unwrap(),
        host: next().parse().unwrap(),
        sim: next().parse().unwrap(),
        recompiled: next(),
        log: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn temp_dir(tag: &str) -> TempDir {
    TempDir::new(&format!("snap-{tag}"))
}

/// Runs every call in this process (tracing what it must) and saves the
/// function's programs to `path`; returns the output digests.
fn save_here(path: &Path) -> (u64, u64) {
    let bits = digest();
    snap_block::jit().save(path).unwrap();
    bits
}

/// The snapshot file's parts: manifest text, body, as the runtime's
/// module docs lay them out (magic 8, version 4, u64 len + manifest,
/// u64 len + body, SHA-256).
fn split(bytes: &[u8]) -> (String, Vec<u8>) {
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let m = u64_at(12);
    let manifest = String::from_utf8(bytes[20..20 + m].to_vec()).unwrap();
    let b = u64_at(20 + m);
    let body = bytes[28 + m..28 + m + b].to_vec();
    assert_eq!(28 + m + b + 32, bytes.len());
    (manifest, body)
}

/// A whole file from a manifest and a body, with a correct checksum.
fn join(head: &[u8], manifest: &str, body: &[u8]) -> Vec<u8> {
    let mut out = head[..12].to_vec();
    out.extend((manifest.len() as u64).to_le_bytes());
    out.extend(manifest.as_bytes());
    out.extend((body.len() as u64).to_le_bytes());
    out.extend(body);
    let sum = Sha256::digest(&out);
    out.extend(sum);
    out
}

/// `file` with its manifest line `field: ...` replaced by `field: value`
/// and its checksum recomputed: a snapshot from another machine or build.
fn rewrite_manifest(file: &Path, field: &str, value: &str, to: &Path) {
    let bytes = std::fs::read(file).unwrap();
    let (manifest, body) = split(&bytes);
    let prefix = format!("{field}: ");
    assert!(
        manifest.lines().any(|l| l.starts_with(&prefix)),
        "{manifest}"
    );
    let manifest: String = manifest
        .lines()
        .map(|l| {
            if l.starts_with(&prefix) {
                format!("{prefix}{value}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(to, join(&bytes, &manifest, &body)).unwrap();
}

/// A snapshot saved here reloads with `load_code` in a fresh process with
/// the disk cache off: every signature loaded, no trace, no build, no
/// compile (every kernel linked from the file), the same bits on Host and
/// Sim.
#[test]
fn a_snapshot_reloads_in_a_fresh_process_with_no_trace_and_no_compile() {
    let dir = temp_dir("reload");
    let file = dir.join("block.tjsnap");
    let (host, sim) = save_here(&file);
    let r = run_child(&file);
    assert_eq!(
        (r.loaded, r.traces, r.builds, r.compiles),
        (3, 0, 0, 0),
        "{r:?}"
    );
    assert!(r.snapshot_loads >= 3, "{r:?}");
    assert_eq!((r.host, r.sim), (host, sim), "{r:?}");
    assert!(r.recompiled.is_empty(), "{r:?}");
    assert!(!r.log.contains("snapshot"), "{r:?}");
    // No temp file is left beside it.
    let names: Vec<_> = std::fs::read_dir(&*dir).unwrap().flatten().collect();
    assert_eq!(names.len(), 1);
}

/// A manifest naming other CPU features, or another tilejit build, makes
/// the child recompile from the stored graphs: still no trace, the same
/// bits, and the reason says what differed.
#[test]
fn a_snapshot_for_another_cpu_or_build_recompiles_from_its_ir() {
    let dir = temp_dir("foreign-cpu");
    let file = dir.join("block.tjsnap");
    let (host, sim) = save_here(&file);
    for (field, value, why) in [
        ("cpu", "z80 imaginary", "CPU `z80 imaginary`"),
        ("tilejit", "0.0.0+elsewhere", "tilejit 0.0.0+elsewhere"),
    ] {
        let other = dir.join(format!("{field}.tjsnap"));
        rewrite_manifest(&file, field, value, &other);
        let r = run_child(&other);
        assert_eq!((r.loaded, r.traces, r.builds), (3, 0, 0), "{r:?}");
        assert!(r.compiles > 0 && r.snapshot_loads == 0, "{r:?}");
        assert_eq!((r.host, r.sim), (host, sim), "{r:?}");
        assert!(
            r.recompiled.contains(why) && r.recompiled.contains("recompiled"),
            "{r:?}"
        );
        // `TILEJIT_LOG=cache` says it too, naming the file.
        let line = format!("[tilejit] snapshot {}: {}", other.display(), r.recompiled);
        assert!(r.log.contains(&line), "{r:?}");
    }
}

/// A manifest naming another device config keeps the host code (linked,
/// not compiled) and drops the Sim bytecode, which compiles on first use
/// from the loaded kernels and constants: the same bits, and the reason.
#[test]
fn a_snapshot_for_another_device_config_compiles_only_sim_code() {
    let dir = temp_dir("foreign-device");
    let file = dir.join("block.tjsnap");
    let (host, sim) = save_here(&file);
    let other = dir.join("device.tjsnap");
    rewrite_manifest(&file, "device-config", "0123456789abcdef", &other);
    let r = run_child(&other);
    assert_eq!((r.loaded, r.traces, r.builds), (3, 0, 0), "{r:?}");
    assert!(r.snapshot_loads > 0 && r.compiles > 0, "{r:?}");
    assert_eq!((r.host, r.sim), (host, sim), "{r:?}");
    assert!(
        r.recompiled.contains("device config 0123456789abcdef"),
        "{r:?}"
    );
}

/// The error a load of `path` into `snap_block` gives; the handler cache
/// is left as it was.
fn load_error(path: &Path) -> String {
    let f = snap_block::jit();
    let before = f.handlers().len();
    let e = f.load(path).unwrap_err();
    assert_eq!(
        f.handlers().len(),
        before,
        "a failed load changed the cache"
    );
    assert!(
        matches!(e, Error::Runtime(RuntimeError::Snapshot { .. })),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    msg
}

/// Damaged, empty and foreign files are errors naming the file and the
/// problem, never a panic, and load nothing.
#[test]
fn damaged_or_foreign_files_are_clean_errors() {
    let dir = temp_dir("damaged");
    let file = dir.join("block.tjsnap");
    save_here(&file);
    let good = std::fs::read(&file).unwrap();
    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 0x10;
    let mut version = good.clone();
    version[8] = 99;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("flipped", flipped, "checksum mismatch"),
        (
            "truncated",
            good[..good.len() * 2 / 3].to_vec(),
            "truncated",
        ),
        ("header-only", good[..16].to_vec(), "truncated"),
        ("empty", Vec::new(), "empty"),
        (
            "random",
            (0..4096u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect(),
            "not a tilejit snapshot",
        ),
        (
            "cache-file",
            b"TJKC\x01\x00\x00\x00 a disk cache entry".to_vec(),
            "TJSNAP",
        ),
        ("version", version, "format version 99"),
    ];
    for (name, bytes, want) in cases {
        let path = dir.join(format!("{name}.tjsnap"));
        std::fs::write(&path, bytes).unwrap();
        let msg = load_error(&path);
        assert!(msg.contains(want), "{name}: {msg}");
    }
    // Every one-byte change is an error, never a panic (sampled).
    for i in (0..good.len()).step_by(good.len() / 50 + 1) {
        let mut b = good.clone();
        b[i] ^= 0xff;
        let path = dir.join("sampled.tjsnap");
        std::fs::write(&path, b).unwrap();
        load_error(&path);
    }
    // A well-formed file whose manifest disagrees with its body.
    let (manifest, body) = split(&good);
    let lying = manifest.replacen("(f32[", "(f64[", 1);
    let path = dir.join("lying.tjsnap");
    std::fs::write(&path, join(&good, &lying, &body)).unwrap();
    assert!(load_error(&path).contains("manifest lists"));
}

/// A snapshot is for the function that saved it: another function's
/// load is an error that names both.
#[test]
fn a_snapshot_loads_only_into_its_own_function() {
    let dir = temp_dir("other-fn");
    let file = dir.join("block.tjsnap");
    save_here(&file);
    let e = snap_other::jit().load(&file).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Runtime(RuntimeError::Snapshot {
                problem: SnapshotProblem::OtherFunction { .. },
                ..
            })
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("snapshot::snap_block`") && msg.contains("snapshot::snap_other`"),
        "{msg}"
    );
    assert!(snap_other::jit().handlers().is_empty());
    // Same name, module and body, other parameters: refused before
    // anything is compiled.
    let impostor = tilejit::JitFunction::with_identity(
        "snap_block",
        module_path!(),
        snap_block::jit().body_digest(),
        "elsewhere",
        &[tilejit::__private::param(
            "x",
            tilejit::args::ArgKind::Tensor,
        )],
    );
    let e = impostor.load(&file).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Runtime(RuntimeError::Snapshot {
                problem: SnapshotProblem::Parameters { .. },
                ..
            })
        ),
        "{e:?}"
    );
    assert!(impostor.handlers().is_empty());
}

/// A missing file, a directory and an unwritable destination are errors
/// naming the path and what the system said.
#[test]
fn bad_paths_are_clean_errors() {
    digest(); // every signature traced, so the cache's size holds still
    let dir = temp_dir("paths");
    let missing = dir.join("missing.tjsnap");
    assert!(load_error(&missing).contains("cannot read"));
    assert!(load_error(&dir).contains("cannot read"));
    let nowhere = dir.join("no-such-dir").join("x.tjsnap");
    let e = snap_block::jit().save(&nowhere).unwrap_err().to_string();
    assert!(
        e.contains("cannot write") && e.contains(&nowhere.display().to_string()),
        "{e}"
    );
    // Nothing is left behind, not even a temp file.
    assert!(!dir.join("no-such-dir").exists());
}

/// In one process: `load` returns how many signatures the file holds and
/// fills a cleared cache, a frozen function then serves them, and loading
/// the same file twice adds nothing.
#[test]
fn load_fills_the_handler_cache_and_a_frozen_function_serves_it() {
    let x = ramp(&[4, 5], 9);
    let f = jit_fn!(|x: &Tensor, n: i64| -> Tensor { x.exp() * (n as f32) + x.sum(-1, true) });
    let want: Vec<Vec<f32>> = (1..=3)
        .map(|n| f.call((&x, n)).unwrap().to_vec::<f32>().unwrap())
        .collect();
    let dir = temp_dir("same-process");
    let file = dir.join("f.tjsnap");
    f.save(&file).unwrap();
    f.clear();
    assert!(f.handlers().is_empty());
    let before = f.stats().builds;
    assert_eq!(f.load(&file).unwrap(), 3);
    assert_eq!(f.load(&file).unwrap(), 3, "a second load replaces nothing");
    assert_eq!(f.handlers().len(), 3);
    f.freeze();
    for (n, want) in (1..=3).zip(&want) {
        assert_eq!(&f.call((&x, n)).unwrap().to_vec::<f32>().unwrap(), want);
    }
    assert_eq!(f.stats().builds, before, "no build after a load");
    assert!(
        f.call((&x, 4)).is_err(),
        "frozen: an unsaved signature fails"
    );
}

/// Two jit functions named `f`, in two modules: the case.
mod first {
    use tilejit::prelude::*;
    #[jit]
    pub fn f(x: &Tensor) -> Tensor {
        x * 2.0
    }
}

/// See [`first`].
mod second {
    use tilejit::prelude::*;
    #[jit]
    pub fn f(x: &Tensor) -> Tensor {
        x + 100.0
    }
}

/// A function is its module path, name and body: `first::f`'s snapshot
/// loaded into `second::f` is an error naming both (it once returned
/// `Ok(1)` and made `second::f` answer 2 instead of 101), and
/// `second::f` keeps computing its own body.
#[test]
fn a_snapshot_of_a_same_named_function_elsewhere_is_refused() {
    let x = Tensor::ones(&[4], DType::F32);
    assert_eq!(first::f(&x).unwrap().to_vec::<f32>().unwrap(), [2.0; 4]);
    let dir = temp_dir("same-name");
    let file = dir.join("f.tjsnap");
    first::f::jit().save(&file).unwrap();
    let e = second::f::jit().load(&file).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Runtime(RuntimeError::Snapshot {
                problem: SnapshotProblem::OtherFunction { .. },
                ..
            })
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("snapshot::first::f`") && msg.contains("snapshot::second::f`"),
        "{msg}"
    );
    assert!(
        msg.contains(first::f::jit().body_digest()) && msg.contains(second::f::jit().body_digest()),
        "{msg}"
    );
    assert_ne!(
        first::f::jit().body_digest(),
        second::f::jit().body_digest()
    );
    assert!(second::f::jit().handlers().is_empty());
    assert_eq!(second::f(&x).unwrap().to_vec::<f32>().unwrap(), [101.0; 4]);
    // Its own function takes it.
    first::f::jit().clear();
    assert_eq!(first::f::jit().load(&file).unwrap(), 1);
}

/// `jit_fn!` closures carry a module path and body digest too: two
/// closures' snapshots do not load into each other.
#[test]
fn jit_fn_snapshots_load_only_into_the_same_closure() {
    let x = ramp(&[4], 1);
    let double = jit_fn!(|x: &Tensor| -> Tensor { x * 2.0 });
    let shift = jit_fn!(|x: &Tensor| -> Tensor { x + 100.0 });
    double.call(&x).unwrap();
    let dir = temp_dir("jit-fn");
    let file = dir.join("f.tjsnap");
    double.save(&file).unwrap();
    assert!(shift.load(&file).is_err());
    assert!(!double.body_digest().is_empty());
    assert_eq!(double.load(&file).unwrap(), 1);
}

/// The child loads with `load` (graphs only) and the disk cache at a
/// fresh directory: the first compiles every kernel from the stored
/// graphs (no trace, nothing linked from the file), the second finds them
/// all in that disk cache and compiles none; the bits equal the saving
/// process's, on Host and Sim.
#[test]
fn the_safe_load_compiles_the_graphs_then_finds_them_on_disk() {
    let dir = temp_dir("safe");
    let file = dir.join("block.tjsnap");
    let (host, sim) = save_here(&file);
    let cache = TempDir::new("snap-safe-cache");
    let first = run_child_with(&file, Trust::Graphs(Some(&cache)));
    assert_eq!(
        (first.loaded, first.traces, first.builds),
        (3, 0, 0),
        "{first:?}"
    );
    assert!(first.compiles > 0 && first.snapshot_loads == 0, "{first:?}");
    assert_eq!((first.host, first.sim), (host, sim), "{first:?}");
    assert!(first.recompiled.is_empty(), "{first:?}");
    let second = run_child_with(&file, Trust::Graphs(Some(&cache)));
    assert_eq!(
        (
            second.loaded,
            second.traces,
            second.builds,
            second.compiles,
            second.snapshot_loads
        ),
        (3, 0, 0, 0, 0),
        "{second:?}"
    );
    assert!(second.disk_hits >= first.compiles, "{second:?}");
    assert_eq!((second.host, second.sim), (host, sim), "{second:?}");
}

/// `file` with every stored kernel payload (host machine code and Sim
/// bytecode) overwritten by `0xcc` (x86's `int3`: a trap if ever run),
/// and the checksum made again: a forged file that passes every
/// integrity check. Payloads are found as the body lays them out: a
/// length-prefixed 64-hex-digit key, the flag 1, a length-prefixed
/// payload.
fn forge_code(file: &Path, to: &Path) -> usize {
    let bytes = std::fs::read(file).unwrap();
    let (manifest, mut body) = split(&bytes);
    let mut forged = 0;
    let mut i = 0;
    while i + 8 + 64 + 1 + 8 <= body.len() {
        let len = u64::from_le_bytes(body[i..i + 8].try_into().unwrap());
        let key = &body[i + 8..i + 8 + 64];
        if len == 64 && key.iter().all(u8::is_ascii_hexdigit) && body[i + 72] == 1 {
            let at = i + 73;
            let n = u64::from_le_bytes(body[at..at + 8].try_into().unwrap()) as usize;
            body[at + 8..at + 8 + n].fill(0xcc);
            forged += 1;
            i = at + 8 + n;
        } else {
            i += 1;
        }
    }
    std::fs::write(to, join(&bytes, &manifest, &body)).unwrap();
    forged
}

/// Stored code altered and resealed (every payload a trap) is never run
/// by the safe `load`: the child loads every signature, computes the
/// saving process's bits on Host and Sim, links nothing from the file
/// and does not crash. (`load_code` would run it: that is its contract.)
#[test]
fn the_safe_load_never_runs_resealed_stored_code() {
    let dir = temp_dir("forged");
    let file = dir.join("block.tjsnap");
    let (host, sim) = save_here(&file);
    let forged = dir.join("forged.tjsnap");
    let n = forge_code(&file, &forged);
    assert!(n >= 6, "{n} payloads found");
    // Every integrity check still passes: it is a well-formed file.
    tilejit_runtime::snapshot::read_manifest(&forged).unwrap();
    let r = run_child_with(&forged, Trust::Graphs(None));
    assert_eq!(
        (r.loaded, r.traces, r.builds, r.snapshot_loads),
        (3, 0, 0, 0),
        "{r:?}"
    );
    assert_eq!((r.host, r.sim), (host, sim), "{r:?}");
}

/// The workspace denies `unsafe_code`; outside `codegen/src/host/native.rs`
/// and its children it is allowed only at the audited spots that carry
/// the trust in machine code from disk (ARCHITECTURE.md, "Unsafe code"),
/// and in this file's child, which calls `load_code` on its own file. A
/// new `allow(unsafe_code)` elsewhere fails here until it is audited and
/// listed.
#[test]
fn unsafe_code_is_allowed_only_at_the_audited_spots() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    stack.push(p);
                }
                continue;
            }
            if !name.ends_with(".rs") {
                continue;
            }
            let rel = p
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if rel == "codegen/src/host/native.rs" || rel.starts_with("codegen/src/host/native/") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let n = text.matches("allow(unsafe_code)").count();
            if n > 0 && rel != "tests/all/snapshot.rs" {
                found.push((rel, n));
            }
        }
    }
    found.sort();
    let audited = [
        // `load_code`'s declaration and its forwarding (one per item),
        // plus its doctest's crate attribute.
        ("frontend/src/jit/snapshot.rs".to_string(), 3),
        // `link_vouched`: the runtime's one call of `host::load`.
        ("runtime/src/kernel_cache/host.rs".to_string(), 1),
        // `snapshot::load_code`'s declaration.
        ("runtime/src/snapshot.rs".to_string(), 1),
    ];
    assert_eq!(found, audited);
}
