//! `tilejit-fuzz`: a mutation fuzzer for every input surface of tilejit
//! that reads untrusted bytes: the graph and kernel text parsers, the
//! device bytecode decoder and assembler with the verifier and simulator
//! behind them, `.npy` files and `DeviceConfig` JSON. It runs on stable
//! Rust: no sanitizer coverage, so an input's behaviour (how far it got,
//! which error stopped it) stands in for coverage (see [`engine`]).
//!
//! ```text
//! tilejit-fuzz <TARGET|all> [--time 60s] [--seed N] [--corpus DIR]... [--out DIR] [--timeout 10s] [--verbose]
//! tilejit-fuzz <TARGET> --replay FILE
//! tilejit-fuzz list
//! ```
//!
//! `all --time T` gives each target an equal share of `T`. A panic, a
//! failed round trip or an input that runs past `--timeout` is saved under
//! `--out` (a temporary folder by default) and ends the run with status 1.

mod engine;
mod mutate;
mod rng;
mod targets;

use engine::Options;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: tilejit-fuzz <TARGET|all> [--time 60s] [--seed N] [--corpus DIR]... [--out DIR] [--timeout 10s] [--verbose]
       tilejit-fuzz <TARGET> --replay FILE
       tilejit-fuzz list";

fn main() -> ExitCode {
    match cli(std::env::args().skip(1).collect()) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("tilejit-fuzz: {msg}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn cli(args: Vec<String>) -> Result<ExitCode, String> {
    let mut it = args.into_iter();
    let which = it.next().ok_or("no target given")?;
    if which == "list" {
        for t in &targets::ALL {
            println!("{:<8} {}", t.name, t.about);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut opts = Options {
        seed: 0,
        time: Duration::from_secs(60),
        timeout: Duration::from_secs(10),
        corpus: Vec::new(),
        verbose: false,
        out: std::env::temp_dir().join(format!("tilejit-fuzz-{}", std::process::id())),
    };
    let mut replay = None;
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--time" => opts.time = duration(&value()?)?,
            "--timeout" => opts.timeout = duration(&value()?)?,
            "--seed" => {
                let v = value()?;
                opts.seed = v.parse().map_err(|_| format!("bad seed `{v}`"))?;
            }
            "--corpus" => opts.corpus.push(PathBuf::from(value()?)),
            "--out" => opts.out = PathBuf::from(value()?),
            "--verbose" => opts.verbose = true,
            "--replay" => replay = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    if let Some(path) = replay {
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
