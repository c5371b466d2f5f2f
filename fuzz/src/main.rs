//! `tilejit-fuzz`: a mutation fuzzer for every input surface of tilejit
//! that reads untrusted bytes: the graph and kernel text parsers, the
//! device bytecode decoder and assembler with the verifier and simulator
//! behind them, `.npy` files, `DeviceConfig` JSON and ONNX files; and,
//! differentially, dynamic shape classes against exact traces and random
//! graphs compiled for Host and Sim against the interpreter. It runs on
//! stable Rust: no sanitizer coverage, so an input's behaviour (how far
//! it got, which error stopped it) stands in for coverage (see
//! [`engine`]).
//!
//! ```text
//! tilejit-fuzz <TARGET|all> [--time 60s] [--seed N] [--corpus DIR]... [--out DIR] [--timeout 10s] [--verbose]
//! tilejit-fuzz <TARGET> --replay FILE
//! tilejit-fuzz list
//! ```
//!
//! (`--help` says more; arguments are parsed with clap, as the `tilejit`
//! CLI's are.)
//!
//! `all --time T` gives each target an equal share of `T`. A panic, a
//! failed round trip or an input that runs past `--timeout` is saved under
//! `--out` (a temporary folder by default) and ends the run with status 1.

mod engine;
mod mutate;
mod rng;
mod targets;

use clap::Parser;
use engine::Options;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Mutation fuzzing of tilejit's parsers, decoder, verifiers and
/// interpreters, seeded from the test corpus.
#[derive(Parser, Debug)]
#[command(
    name = "tilejit-fuzz",
    version,
    after_help = "Examples:\n  tilejit-fuzz all --time 81s --seed 1     (what CI runs)\n  \
                  tilejit-fuzz graph --time 1h --out findings\n  \
                  tilejit-fuzz device --replay findings/device-0123456789abcdef\n  tilejit-fuzz list"
)]
struct Cli {
    /// A target (see `list`), `all`, or `list` to name the targets.
    target: String,
    /// How long to fuzz (`90`, `90s`, `2m`, `1h`); `all` splits it evenly.
    #[arg(long, default_value = "60s", value_parser = duration)]
    time: Duration,
    /// Random seed of the mutations (a finding reproduces with the same seed).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Extra seed inputs: every file in this folder (repeatable).
    #[arg(long)]
    corpus: Vec<PathBuf>,
    /// Where findings are saved [default: a new temporary folder].
    #[arg(long)]
    out: Option<PathBuf>,
    /// The bound on one execution; an input running longer is a finding.
    #[arg(long, default_value = "10s", value_parser = duration)]
    timeout: Duration,
    /// Print every signature seen, with counts, after each target.
    #[arg(long)]
    verbose: bool,
    /// Run one saved input through the target instead of fuzzing.
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
}

/// The address space a fuzzing process gets, in KiB: a model file can ask
/// for any size, and an allocation over this fails (an error tilejit must
/// return) instead of swapping the machine.
const LIMIT_KIB: u64 = 4 << 20;

/// Set in the process that runs under the limit.
const LIMITED: &str = "TILEJIT_FUZZ_LIMITED";

fn main() -> ExitCode {
    if std::env::var_os(LIMITED).is_none() {
        if let Some(code) = rerun_limited() {
            return code;
        }
    }
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("tilejit-fuzz: {msg}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, String> {
    let which = cli.target;
    if which == "list" {
        for t in &targets::ALL {
            println!("{:<8} {}", t.name, t.about);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let opts = Options {
        seed: cli.seed,
        time: cli.time,
        timeout: cli.timeout,
        corpus: cli.corpus,
        verbose: cli.verbose,
        out: cli.out.unwrap_or_else(|| {
            std::env::temp_dir().join(format!("tilejit-fuzz-{}", std::process::id()))
        }),
    };
    if let Some(path) = cli.replay {
        let t = targets::find(&which).ok_or(format!("no target `{which}` to replay with"))?;
        return Ok(match engine::replay(t, &path) {
            Ok(()) => ExitCode::SUCCESS,
            Err(msg) => {
                eprintln!("{msg}");
                ExitCode::FAILURE
            }
        });
    }
    let chosen: Vec<&targets::Target> = if which == "all" {
        targets::ALL.iter().collect()
    } else {
        vec![targets::find(&which).ok_or(format!("no target `{which}` (try `list`)"))?]
    };
    let share = opts.time / chosen.len() as u32;
    let per = Options {
        time: share,
        ..opts
    };
    println!(
        "fuzzing {} target(s), {share:?} each, seed {}; findings go to {}",
        chosen.len(),
        per.seed,
        per.out.display()
    );
    let mut execs = 0;
    for t in chosen {
        execs += engine::fuzz(t, &per);
    }
    println!("no findings ({execs} executions)");
    Ok(ExitCode::SUCCESS)
}

/// Runs this command again under `ulimit -v` (where `sh` has it; without
/// it, unlimited) and returns its status. An abort (an allocation the
/// code did not check, failing at the limit) is a finding whose input was
/// not saved: the same `--seed` replays the run. `None`: no `sh` here.
fn rerun_limited() -> Option<ExitCode> {
    let exe = std::env::current_exe().ok()?;
    let script = format!("ulimit -v {LIMIT_KIB} 2>/dev/null; exec \"$0\" \"$@\"");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(LIMITED, "1")
        .status()
        .ok()?;
    if let Some(code) = status.code() {
        return Some(ExitCode::from(u8::try_from(code).unwrap_or(1)));
    }
    eprintln!(
        "\nFINDING: the fuzzing process died ({status}) under a {} GiB address-space limit: \
         an allocation tilejit did not check? The same arguments replay it.",
        LIMIT_KIB >> 20
    );
    Some(ExitCode::FAILURE)
}

/// `90`, `90s`, `2m` or `1h`.
fn duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num.parse().map_err(|_| format!("bad duration `{s}`"))?;
    let secs = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "ms" => return Ok(Duration::from_millis(n)),
        _ => return Err(format!("bad duration `{s}` (use 90s, 2m, 1h)")),
    };
    Ok(Duration::from_secs(secs))
}
