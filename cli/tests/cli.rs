//! The `tilejit` binary's device tools, run as a user runs them: every
//! shipped example through `sim` (outputs saved with `--output` and checked
//! here), `asm` -> `disasm` -> `asm` giving identical bytes, and hostile
//! input that must end with exit code 1 or 2 and a message, never a panic
//! (101), a signal or a hang; and `snapshot info` on a snapshot saved here.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tilejit_runtime::device::npy;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tilejit"))
}

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../device/examples")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tilejit-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn f32s(path: &Path) -> Vec<f32> {
    let a = npy::read(&std::fs::read(path).unwrap()).unwrap();
    a.data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn sim_runs_every_example_and_its_outputs_are_right() {
    // Double-buffered vector add: z == x + y exactly.
    let (x, y, z) = (tmp("x.npy"), tmp("y.npy"), tmp("z.npy"));
    let o = run(bin()
        .args([
            "sim",
            examples().join("vadd_double_buffered.s").to_str().unwrap(),
            "--core",
            "aiv",
        ])
        .args([
            "--output",
            &format!("x={}", x.display()),
            "--output",
            &format!("y={}", y.display()),
            "--output",
            &format!("z={}", z.display()),
        ]));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for pipe in ["mte2", "mte3", " v ", "cycles:"] {
        assert!(out.contains(pipe), "{out}");
    }
    let (xs, ys, zs) = (f32s(&x), f32s(&y), f32s(&z));
    assert_eq!(zs.len(), 100_000);
    assert!(xs.iter().any(|&v| v != 0.0), "inputs were filled");
    for i in 0..zs.len() {
        assert_eq!(zs[i], xs[i] + ys[i], "z[{i}]");
    }

    // Softmax rows: each of the 16 rows sums to 1 and matches exp(x-max)/sum.
    let (sx, sy) = (tmp("sx.npy"), tmp("sy.npy"));
    let o = run(bin()
        .args(["sim", examples().join("softmax_rows.s").to_str().unwrap()])
        .args([
            "--output",
            &format!("x={}", sx.display()),
            "--output",
            &format!("y={}", sy.display()),
        ]));
    assert!(o.status.success(), "{}", stderr(&o));
    let (xv, yv) = (f32s(&sx), f32s(&sy));
    for r in 0..16 {
        let row = &xv[r * 1000..(r + 1) * 1000];
        let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
        let s: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum();
        for c in 0..1000 {
            let want = (row[c] as f64 - m).exp() / s;
            let got = yv[r * 1000 + c] as f64;
            assert!(
                (got - want).abs() <= 1e-6 * want + 1e-9,
                "y[{r},{c}] = {got}, expected {want}"
            );
        }
    }

    // Matmul with relu, given inputs from files: identity @ b = relu(b).
    let (a, b, c) = (tmp("a.npy"), tmp("b.npy"), tmp("c.npy"));
    let eye: Vec<u8> = (0..4096)
        .flat_map(|i| half::f16::from_f32(if i / 64 == i % 64 { 1.0 } else { 0.0 }).to_le_bytes())
        .collect();
    let bv: Vec<f32> = (0..4096)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 8.0)
        .collect();
    let bb: Vec<u8> = bv
        .iter()
        .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
        .collect();
    for (path, data) in [(&a, eye), (&b, bb)] {
        let arr = npy::NpyArray {
            dtype: tilejit_ir::DType::F16,
            shape: vec![64, 64],
            data,
        };
        std::fs::write(path, npy::write(&arr)).unwrap();
    }
    let o = run(bin()
        .args([
            "sim",
            examples().join("matmul_relu_f16.s").to_str().unwrap(),
            "--core",
            "aic",
        ])
        .args([
            "--input",
            &format!("a={}", a.display()),
            "--input",
            &format!("b={}", b.display()),
            "--output",
            &format!("c={}", c.display()),
        ]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("fixp"), "{}", stdout(&o));
    let cv = f32s(&c);
    for i in 0..4096 {
        assert_eq!(
            cv[i],
            half::f16::from_f32(bv[i]).to_f32().max(0.0),
            "c[{i}]"
        );
    }
}

#[test]
fn asm_disasm_asm_gives_identical_bytes() {
    for name in [
        "vadd_double_buffered.s",
        "vadd_single_buffered.s",
        "softmax_rows.s",
        "matmul_relu_f16.s",
    ] {
        let (b1, s2, b2) = (
            tmp(&format!("{name}.1.bin")),
            tmp(&format!("{name}.2.s")),
            tmp(&format!("{name}.2.bin")),
        );
        let o = run(bin().args([
            "asm",
            examples().join(name).to_str().unwrap(),
            "-o",
            b1.to_str().unwrap(),
        ]));
        assert!(o.status.success(), "{}", stderr(&o));
        let o = run(bin().args(["disasm", b1.to_str().unwrap()]));
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::write(&s2, &o.stdout).unwrap();
        let o = run(bin().args(["asm", s2.to_str().unwrap(), "-o", b2.to_str().unwrap()]));
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(
            std::fs::read(&b1).unwrap(),
            std::fs::read(&b2).unwrap(),
            "{name}"
        );
        // The binary runs as the text does.
        let o = run(bin().args(["sim", b1.to_str().unwrap()]));
        assert!(o.status.success(), "{}", stderr(&o));
    }
}

#[test]
fn hostile_input_exits_1_or_2_with_a_message() {
    let junk = tmp("junk.bin");
    std::fs::write(&junk, [0x54, 0x4a, 0x42, 0x43, 1, 0, 1, 200, 0xff]).unwrap();
    let text = tmp("bad.s");
    std::fs::write(
        &text,
        ".kernel k aiv\n    vadd f32, 8x8, 8, 8, @0x30000, @0x0, @0x0\n    end\n",
    )
    .unwrap();
    let spin = tmp("spin.s");
    std::fs::write(&spin, ".kernel k aiv\nl:\n    jmp l\n").unwrap();
    let tiny = tmp("tiny.json");
    let cfg = tilejit_runtime::device::DeviceConfig {
        watchdog_work: 1000,
        ..Default::default()
    };
    std::fs::write(&tiny, cfg.to_json()).unwrap();
    // A watchdog this large once let `tilejit sim` hang for good.
    let endless = tmp("endless.json");
    let cfg = tilejit_runtime::device::DeviceConfig {
        watchdog_work: u64::MAX,
        ..Default::default()
    };
    std::fs::write(&endless, cfg.to_json()).unwrap();
    let badnpy = tmp("bad.npy");
    std::fs::write(&badnpy, b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'").unwrap();
    let vadd = examples().join("vadd_double_buffered.s");
    let v = vadd.to_str().unwrap();
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            vec!["sim".into(), junk.display().to_string()],
            1,
            "decode error",
        ),
        (
            vec!["disasm".into(), junk.display().to_string()],
            1,
            "decode error",
        ),
        (
            vec!["disasm".into(), "/nonexistent/x.bin".into()],
            1,
            "cannot read",
        ),
        // A device that never ends is refused before a byte is read.
        (
            vec!["disasm".into(), "/dev/zero".into()],
            1,
            "not a regular file",
        ),
        (
            vec!["sim".into(), text.display().to_string()],
            1,
            "beyond its 196608 bytes",
        ),
        (
            vec![
                "asm".into(),
                text.display().to_string(),
                "-o".into(),
                tmp("o.bin").display().to_string(),
            ],
            1,
            "rejected",
        ),
        (
            vec![
                "sim".into(),
                spin.display().to_string(),
                "--config".into(),
                tiny.display().to_string(),
            ],
            1,
            "watchdog",
        ),
        (
            vec![
                "sim".into(),
                spin.display().to_string(),
                "--config".into(),
                endless.display().to_string(),
            ],
            1,
            "watchdog_work = 18446744073709551615: must be 1..=1000000000000",
        ),
        (
            vec!["sim".into(), v.into(), "--core".into(), "aic".into()],
            2,
            "is for aiv cores",
        ),
        (
            vec![
                "sim".into(),
                v.into(),
                "--input".into(),
                format!("x={}", badnpy.display()),
            ],
            1,
            "bad.npy",
        ),
        (
            vec![
                "sim".into(),
                v.into(),
                "--input".into(),
                format!("w={}", badnpy.display()),
            ],
            2,
            "`w` is not a GM argument",
        ),
        (
            vec!["sim".into(), v.into(), "--arg".into(), "n=lots".into()],
            2,
            "not an integer",
        ),
        (
            vec!["sim".into(), v.into(), "--arg".into(), "n=200000".into()],
            1,
            "goes outside",
        ),
        (
            vec!["sim".into(), v.into(), "--frobnicate".into()],
            2,
            "unexpected argument '--frobnicate'",
        ),
        (vec!["asm".into(), v.into()], 2, "--output <FILE.bin>"),
        (
            vec!["sim".into(), "--config".into(), tiny.display().to_string()],
            2,
            "required arguments were not provided:\n  <FILE>",
        ),
    ];
    let cases = cases.into_iter().chain([
        (vec!["frobnicate".into()], 2, "unrecognized subcommand"),
        (
            vec!["sim".into(), v.into(), "--core".into(), "gpu".into()],
            2,
            "expected aiv or aic",
        ),
    ]);
    for (args, code, want) in cases {
        let o = run(bin().args(&args));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: expected `{want}` in: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// The quickstart in Verify mode (every jit call runs on Host and Sim and
/// compares), with `TILEJIT_PROFILE` writing one Chrome trace per Sim
/// launch, each with a lane for every one of the 72 cores,
/// `TILEJIT_DUMP` writing what every compile compiled, and `TILEJIT_LOG`
/// logging compiles, traces and Verify calls (and reporting a part it does
/// not know).
#[test]
fn quickstart_passes_in_verify_mode_and_writes_traces() {
    let dir = tmp("profiles");
    let _ = std::fs::remove_dir_all(&dir);
    let dump = tmp("dump");
    let _ = std::fs::remove_dir_all(&dump);
    let o = run(bin()
        .arg("demo")
        .env("TILEJIT_RUN_MODE", "verify")
        .env("TILEJIT_PROFILE", &dir)
        .env("TILEJIT_DUMP", &dump)
        .env("TILEJIT_LOG", "compile, verify,trace,timing,bogus")
        // Compiles to log and dump: not kernels other tests left on disk.
        .env("TILEJIT_CACHE_DIR", "off"));
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("on the simulated device"),
        "{}",
        stdout(&o)
    );
    // TILEJIT_LOG: its two parts log, and a part it does not know is
    // reported once.
    let err = stderr(&o);
    assert!(err.contains("[tilejit] compiled "), "{err}");
    assert!(err.contains("[tilejit] verify `"), "{err}");
    assert!(
        err.contains("[tilejit] tracing `mlp_block` for (f32[64,256]"),
        "{err}"
    );
    // `timing`: each compile's stages, named after the function and signature.
    let timing = err
        .lines()
        .find(|l| l.starts_with("tilejit: timing mlp_block(f32[64,256]"))
        .unwrap_or_else(|| panic!("no timing line for mlp_block in {err}"));
    for stage in [
        "verify",
        "simplify",
        "fuse",
        "verify-kernels",
        "codegen-host",
        "total",
    ] {
        assert!(timing.contains(stage), "{timing}");
    }
    assert!(
        err.contains("tilejit: timing attention_probs(") && err.contains(" on sim: codegen-sim "),
        "{err}"
    );
    assert_eq!(
        err.matches("ignoring \"bogus\" in TILEJIT_LOG").count(),
        1,
        "{err}"
    );
    let traces: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(traces.len() >= 2, "{traces:?}");
    // Traces of jit calls are named after the function and its signature.
    let file_names: Vec<String> = traces
        .iter()
        .map(|t| t.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for f in ["mlp_block-f32_64x256-", "attention_probs-"] {
        assert!(
            file_names.iter().any(|n| n.starts_with(f)),
            "no trace named {f}* in {file_names:?}"
        );
    }
    for t in traces {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&t).unwrap()).unwrap();
        let lanes = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == 0)
            .count();
        assert_eq!(lanes, 72, "{}", t.display());
    }
    // TILEJIT_DUMP: every program's graphs, every kernel's IR, Cranelift IR,
    // machine code and device assembly.
    let names: Vec<String> = std::fs::read_dir(&dump)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for suffix in [
        ".traced.graph",
        ".graph",
        ".kernels",
        ".keys",
        ".kernel",
        ".clif",
        ".disasm",
        ".s",
    ] {
        assert!(
            names.iter().any(|n| n.ends_with(suffix)),
            "no {suffix} in {names:?}"
        );
    }
    // Programs are named after their function and signature.
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("mlp_block-f32_64x256-") && n.ends_with(".graph")),
        "{names:?}"
    );
    // Every kernel a program's `.keys` file names was dumped under the
    // stem it gives, whichever program compiled it.
    for keys in names.iter().filter(|n| n.ends_with(".keys")) {
        let text = std::fs::read_to_string(dump.join(keys)).unwrap();
        assert!(!text.is_empty(), "{keys}");
        for line in text.lines() {
            let stem = line.rsplit_once("-> ").unwrap().1;
            let stem = stem.trim_end_matches(".{kernel,clif,disasm}");
            for suffix in ["kernel", "clif", "disasm"] {
                let file = format!("{stem}.{suffix}");
                assert!(names.contains(&file), "{keys}: {line}: no {file}");
            }
        }
    }
    let s_file = names.iter().find(|n| n.ends_with(".s")).unwrap();
    let text = std::fs::read_to_string(dump.join(s_file)).unwrap();
    assert!(text.starts_with(".kernel "), "{text}");
}

/// `--help` and `--version` work everywhere, print to stdout and exit 0;
/// `demo --help` shows help instead of running the demo; each subcommand's
/// help names its options and gives an example.
#[test]
fn help_and_version_everywhere() {
    for (args, want) in [
        (vec!["--help"], "Usage: tilejit [COMMAND]"),
        (vec!["help"], "Commands:"),
        (vec!["demo", "--help"], "Usage: tilejit demo"),
        (
            vec!["asm", "--help"],
            "tilejit asm device/examples/softmax_rows.s -o",
        ),
        (vec!["disasm", "-h"], "Usage: tilejit disasm <INPUT>"),
        (vec!["sim", "--help"], "--input <NAME=FILE.npy>"),
        (vec!["help", "sim"], "Examples:"),
        (
            vec!["snapshot", "info", "--help"],
            "tilejit snapshot info model.tjsnap",
        ),
        (vec!["--version"], "tilejit 0.1.0"),
        (vec!["sim", "--version"], "tilejit-sim 0.1.0"),
    ] {
        let o = run(bin().args(&args));
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert!(
            stdout(&o).contains(want),
            "{args:?}: no `{want}` in {}",
            stdout(&o)
        );
        assert!(
            !stdout(&o).contains("quickstart: x f32"),
            "{args:?} ran the demo"
        );
    }
}

/// `--help` lists every variable the library reads, with its values;
/// `-h` stays short.
#[test]
fn long_help_lists_every_environment_variable() {
    let long = stdout(&run(bin().arg("--help")));
    for name in [
        "TILEJIT_RUN_MODE",
        "TILEJIT_LOG",
        "TILEJIT_DUMP",
        "TILEJIT_DUMP_VALUES",
        "TILEJIT_PROFILE",
        "TILEJIT_SIM_POLICY",
        "TILEJIT_WARMUP",
        "TILEJIT_CACHE_DIR",
        "TILEJIT_CACHE_BYTES",
        "TILEJIT_NO_FMA",
        "TILEJIT_POOL_BYTES",
    ] {
        assert!(long.contains(&format!("\n  {name} ")), "{name} in {long}");
    }
    // The CLI has the remote feature, so the server's log part is listed.
    assert!(long.contains("cache, time, remote\n"), "{long}");
    let short = stdout(&run(bin().arg("-h")));
    assert!(!short.contains("TILEJIT_POOL_BYTES"), "{short}");
    assert!(short.contains("`--help` lists them"), "{short}");
}

/// A reader that goes away (`tilejit sim ... | head`) ends the tool quietly
/// with success, never a panic.
#[test]
fn a_closed_stdout_is_not_a_panic() {
    use std::process::Stdio;
    let vadd = examples().join("vadd_double_buffered.s");
    for args in [
        vec!["sim".to_string(), vadd.display().to_string()],
        vec!["demo".to_string()],
    ] {
        let mut child = bin()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end before the tool writes its first line.
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// Filling a GM argument bigger than the host can hold (4 GiB under a
/// 512 MiB address-space limit) ends with exit code 1 and a message naming
/// the bytes, not an abort (`memory allocation of N bytes failed`): the
/// tool streams the argument into GM in chunks, and GM's pages come from
/// fallible allocations.
#[cfg(target_os = "linux")]
#[test]
fn a_gm_argument_the_host_cannot_hold_is_an_error() {
    let big = tmp("big.s");
    std::fs::write(
        &big,
        ".kernel big aiv\n.gm x f32 [1073741824] in\n    end\n",
    )
    .unwrap();
    let o = run(Command::new("sh")
        .args(["-c", "ulimit -v 524288 && exec \"$0\" sim \"$1\""])
        .arg(env!("CARGO_BIN_EXE_tilejit"))
        .arg(&big));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("GM argument `x`: out of host memory allocating 262144 bytes"),
        "{err}"
    );
}

/// A snapshot's manifest, saved from a jit function here.
#[tilejit::jit]
fn cli_snap(x: &tilejit::Tensor, k: f32) -> tilejit::Tensor {
    x * k + 1.0
}

/// `tilejit snapshot info` prints the manifest of a snapshot this build
/// saved (format, build, CPU, function, each signature) and that its code
/// links here; a file that is not a snapshot, or a missing one, exits
/// with 1 and a message naming it.
#[test]
fn snapshot_info_prints_the_manifest() {
    use tilejit::{DType, Tensor};
    cli_snap(&Tensor::ones(&[4], DType::F32), 2.0).unwrap();
    cli_snap(&Tensor::ones(&[2, 3], DType::F32), 2.0).unwrap();
    let file = tmp("cli_snap.tjsnap");
    cli_snap::jit().save(&file).unwrap();
    let o = run(bin().args(["snapshot", "info", file.to_str().unwrap()]));
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for want in [
        "tilejit snapshot\nformat: 2\n",
        "\ntilejit: ",
        "\ncpu: ",
        "\nfunction: cli::cli_snap\nbody: ",
        "\nsignatures: 2\n",
        "sim=yes (f32[2,3], f32 param)\n",
        "sim=yes (f32[4], f32 param)\n",
        "host code: links on this build and machine",
    ] {
        assert!(out.contains(want), "{want:?} in:\n{out}");
    }
    let garbage = tmp("garbage.tjsnap");
    std::fs::write(&garbage, b"definitely not a snapshot").unwrap();
    for bad in [garbage.clone(), tmp("missing.tjsnap")] {
        let o = run(bin().args(["snapshot", "info", bad.to_str().unwrap()]));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&bad.display().to_string()) && !err.contains("panicked"),
            "{err}"
        );
    }
    let _ = std::fs::remove_file(file);
    let _ = std::fs::remove_file(garbage);
}

/// `tilejit serve` refuses what it cannot use, with a message naming it:
/// a missing or empty token file, an address that is not one.
#[test]
fn serve_refuses_bad_options() {
    let empty = tmp("empty-token");
    std::fs::write(&empty, "  \n").unwrap();
    for (args, says) in [
        (
            vec!["--token-file", "/nonexistent/token"],
            "/nonexistent/token",
        ),
        (vec!["--token-file", empty.to_str().unwrap()], "is empty"),
        (vec!["--token-file", "/dev/zero"], "not a regular file"),
        (
            vec!["--tls-cert", "/dev/zero", "--tls-key", "/dev/zero"],
            "not a regular file",
        ),
        (vec!["--listen", "not-an-address"], "not an address"),
    ] {
        let o = run(Command::new(env!("CARGO_BIN_EXE_tilejit"))
            .arg("serve")
            .args(&args));
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}
