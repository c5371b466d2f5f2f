//! The fuzzing loop. Without coverage instrumentation (stable Rust has no
//! sanitizer coverage), behaviour stands in for coverage: each execution
//! returns a signature (how far the input got and its error message with
//! the numbers taken out), and an input with a signature not seen before
//! joins the corpus, so inputs that get further are mutated further.
//!
//! A finding is a panic, a target's own check failing (a round trip that
//! does not hold), or an input running past the time bound, which a
//! watchdog thread notices. The input is saved and the process exits
//! non-zero with the command that replays it.

use crate::mutate::Mutator;
use crate::rng::Rng;
use crate::targets::Target;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How one run went.
pub struct Options {
    /// Random seed of the mutations.
    pub seed: u64,
    /// How long to fuzz.
    pub time: Duration,
    /// The bound on one execution; longer is a finding (a hang).
    pub timeout: Duration,
    /// Extra seed inputs (every file in these folders).
    pub corpus: Vec<PathBuf>,
    /// Where findings go.
    pub out: PathBuf,
    /// Print every signature seen, with counts, after each target.
    pub verbose: bool,
}

/// The corpus cap: new signatures beyond it are no longer kept.
const MAX_CORPUS: usize = 4096;

/// Signatures of inputs the first stage (the parser) rejected.
const SHALLOW: [&str; 5] = ["parse", "decode", "assemble", "read", "not utf-8"];

/// What the watchdog watches: the input running now and since when.
struct Current {
    target: &'static str,
    input: Vec<u8>,
    since: Instant,
}

fn current() -> &'static Mutex<Option<Current>> {
    static CURRENT: OnceLock<Mutex<Option<Current>>> = OnceLock::new();
    CURRENT.get_or_init(|| Mutex::new(None))
}

/// The last panic's message and place, captured by a quiet hook so that
/// expected `catch_unwind`s do not flood stderr.
fn last_panic() -> &'static Mutex<String> {
    static LAST: OnceLock<Mutex<String>> = OnceLock::new();
    LAST.get_or_init(|| Mutex::new(String::new()))
}

fn install_quiet_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = info.payload().downcast_ref::<String>() {
            s.clone()
        } else {
            "(non-string panic payload)".to_string()
        };
        let place = info
            .location()
            .map(|l| format!(" at {}:{}:{}", l.file(), l.line(), l.column()))
            .unwrap_or_default();
        *last_panic().lock().unwrap_or_else(|p| p.into_inner()) = format!("{msg}{place}");
    }));
}

fn start_watchdog(timeout: Duration, out: PathBuf) {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(100));
            let cur = current().lock().unwrap_or_else(|p| p.into_inner());
            if let Some(c) = cur.as_ref() {
                if c.since.elapsed() > timeout {
                    let why = format!("ran past the {timeout:?} bound (a hang)");
                    report(c.target, &c.input, &why, &out);
                    std::process::exit(1);
                }
            }
        });
    });
}

/// Saves a finding and prints how to replay it.
fn report(target: &str, input: &[u8], why: &str, out: &Path) {
    let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let path = out.join(format!("{target}-{hash:016x}"));
    let saved = std::fs::create_dir_all(out).and_then(|_| std::fs::write(&path, input));
    eprintln!("\nFINDING in target `{target}`: {why}");
    match saved {
        Ok(()) => eprintln!(
            "input saved to {}\nreplay: cargo run -p tilejit-fuzz -- {target} --replay {}",
            path.display(),
            path.display()
        ),
        Err(e) => eprintln!("could not save the input to {}: {e}", path.display()),
    }
    let preview = String::from_utf8_lossy(&input[..input.len().min(2000)]);
    eprintln!("input ({} bytes):\n{preview}", input.len());
}

/// Runs one input under `catch_unwind` and the watchdog: its signature, or
/// why it is a finding.
fn execute(target: &Target, input: &[u8]) -> Result<String, String> {
    *current().lock().unwrap_or_else(|p| p.into_inner()) = Some(Current {
        target: target.name,
        input: input.to_vec(),
        since: Instant::now(),
    });
    let r = catch_unwind(AssertUnwindSafe(|| (target.run)(input)));
    *current().lock().unwrap_or_else(|p| p.into_inner()) = None;
    match r {
        Ok(Ok(sig)) => Ok(sig),
        Ok(Err(finding)) => Err(finding),
        Err(_) => {
            let msg = last_panic()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            Err(format!("panic: {msg}"))
        }
    }
}

/// The seeds: the target's own plus every file under `opts.corpus`.
fn seeds(target: &Target, opts: &Options) -> Vec<Vec<u8>> {
    let mut seeds = (target.seeds)();
    for dir in &opts.corpus {
        let Ok(entries) = std::fs::read_dir(dir) else {
            eprintln!("warning: cannot read corpus folder {}", dir.display());
            continue;
        };
        for e in entries.flatten() {
            if let Ok(bytes) = std::fs::read(e.path()) {
                seeds.push(bytes);
            }
        }
    }
    if seeds.is_empty() {
        seeds.push(Vec::new());
    }
    seeds
}

/// Fuzzes `target` for `opts.time`. Returns how many inputs ran, or exits
/// the process with status 1 at the first finding.
pub fn fuzz(target: &Target, opts: &Options) -> u64 {
    install_quiet_hook();
    start_watchdog(opts.timeout, opts.out.clone());
    let start = Instant::now();
    let mut corpus = seeds(target, opts);
    let mutator = Mutator::new(&corpus, target.dict);
    let mut rng = Rng::new(opts.seed ^ fnv(target.name));
    let mut seen = HashMap::new();
    let mut execs = 0u64;
    // Every seed runs unmutated first: a seed that fails is a finding too.
    for s in corpus.clone() {
        match execute(target, &s) {
            Ok(sig) => *seen.entry(sig).or_insert(0u64) += 1,
            Err(why) => finding(target, &s, &why, opts),
        }
        execs += 1;
    }
    let seed_count = corpus.len();
    // Inputs that got past the parser, mutated half the time: without
    // coverage, this is what keeps the fuzzer exploring the deeper stages.
    let mut deep: Vec<usize> = (0..corpus.len()).collect();
    while start.elapsed() < opts.time {
        for _ in 0..16 {
            let parent = if rng.one_in(2) {
                &corpus[deep[rng.below(deep.len())]]
            } else {
                &corpus[rng.below(corpus.len())]
            };
            let input = mutator.mutate(&mut rng, parent, &corpus);
            match execute(target, &input) {
                Ok(sig) => {
                    let n = seen.entry(sig.clone()).or_insert(0u64);
                    if *n == 0 && corpus.len() < MAX_CORPUS {
                        if !SHALLOW.iter().any(|s| sig.starts_with(s)) {
                            deep.push(corpus.len());
                        }
                        corpus.push(input);
                    }
                    *n += 1;
                }
                Err(why) => finding(target, &input, &why, opts),
            }
            execs += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{:<8} {:>9} execs in {:>5.1} s ({:>7.0}/s), corpus {} ({} seeds), {} signatures",
        target.name,
        execs,
        secs,
        execs as f64 / secs.max(1e-9),
        corpus.len(),
        seed_count,
        seen.len()
    );
    if opts.verbose {
        let mut sigs: Vec<_> = seen.into_iter().collect();
        sigs.sort_by_key(|s| std::cmp::Reverse(s.1));
        for (sig, n) in sigs {
            println!("  {n:>9}  {sig}");
        }
    }
    execs
}

fn finding(target: &Target, input: &[u8], why: &str, opts: &Options) -> ! {
    report(target.name, input, why, &opts.out);
    std::process::exit(1);
}

/// Runs one saved input with the default panic hook, so a panic shows its
/// backtrace (`RUST_BACKTRACE=1`) and fails the process.
pub fn replay(target: &Target, path: &Path) -> Result<(), String> {
    let input = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let t = Instant::now();
    let r = (target.run)(&input);
    println!("ran in {:?}", t.elapsed());
    match r {
        Ok(sig) => {
            println!("no finding; signature: {sig}");
            Ok(())
        }
        Err(why) => Err(format!("finding: {why}")),
    }
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}
