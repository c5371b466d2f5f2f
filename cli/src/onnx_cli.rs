//! `tilejit run model.onnx --input NAME=FILE.npy ...`: runs an ONNX model
//! (`tilejit::onnx`) and writes each output as `DIR/<name>.npy`; `tilejit
//! onnx info model.onnx` lists its inputs, outputs, opset and each op
//! type's support. A symbolic input dim takes the file's size.

use crate::device_cli::CliError;
use crate::outln;
use std::path::PathBuf;
use std::time::Instant;
use tilejit::onnx;
use tilejit::{RunMode, Tensor};

fn fail(e: impl ToString) -> CliError {
    CliError {
        code: 1,
        msg: e.to_string(),
    }
}

/// `tilejit run`'s arguments.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The model file (`.onnx`; external data beside it).
    model: PathBuf,
    /// An input as NAME=FILE.npy (repeat for each input). An input of a
    /// narrow ONNX type (float8, float4, int4, int2, ...) takes its carrier
    /// dtype: f32 for the float ones, i8 for INT4/INT2, u8 for UINT4/UINT2.
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    inputs: Vec<String>,
    /// Where to write `<output>.npy` files (none written without it). An
    /// output of a narrow ONNX type is written in its carrier dtype (f32,
    /// i8 or u8), holding its exact values.
    #[arg(long)]
    output_dir: Option<PathBuf>,
    /// Run mode: host, sim or verify (default: TILEJIT_RUN_MODE, else host).
    #[arg(long)]
    mode: Option<String>,
    /// Print the first call's time (trace + compile + run) and a second,
    /// cached call's, and the Sim profile in sim mode.
    #[arg(long)]
    profile: bool,
    /// After the first call, time this many cached calls and print their
    /// median and fastest (the way to benchmark a model file).
    #[arg(long, value_name = "N")]
    repeat: Option<usize>,
}

/// `tilejit onnx`'s commands.
#[derive(clap::Subcommand)]
pub enum OnnxCommand {
    /// List a model's inputs, outputs, opset, and each op type with its
    /// support status.
    #[command(after_help = "Example:\n  tilejit onnx info model.onnx")]
    Info {
        /// The model file.
        model: PathBuf,
    },
    /// Run ONNX backend node tests (a directory of `test_*/model.onnx` and
    /// `test_data_set_*/{input,output}_*.pb`, as `tools/onnx_node_tests.py`
    /// writes them) with the runner's tolerance (rtol 1e-3, 2**-6 for
    /// bfloat16; atol 1e-7; outputs of a narrow type such as float8 or int4
    /// exactly, on their carrier dtype) and print passed / failed /
    /// skipped, with a reason for each skip and failure.
    #[command(
        after_help = "Example:\n  python3 tools/onnx_node_tests.py target/onnx-node\n  tilejit onnx node-tests target/onnx-node"
    )]
    NodeTests {
        /// The directory holding one folder per test.
        dir: PathBuf,
        /// Only tests whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        /// Run mode: host, sim or verify (default: TILEJIT_RUN_MODE, else host).
        #[arg(long)]
        mode: Option<String>,
        /// A list of tests that must pass, one name a line (`#` starts a
        /// comment; `! NAME` marks a known failure, `!sim NAME` a test
        /// the simulated device cannot run yet, `NAME atol=X` a test
        /// compared with absolute tolerance X): exit 1 when a listed test
        /// does not pass or an unlisted one fails.
        #[arg(long, value_name = "FILE")]
        expect: Option<PathBuf>,
        /// Write the names of the tests that passed to FILE (to refresh
        /// an `--expect` list after the op set grows).
        #[arg(long, value_name = "FILE")]
        write_passed: Option<PathBuf>,
    },
}

/// `--mode`'s value.
fn parse_mode(mode: Option<&str>) -> Result<Option<RunMode>, CliError> {
    Ok(match mode {
        None => None,
        Some("host") => Some(RunMode::Host),
        Some("sim") => Some(RunMode::Sim),
        Some("verify") => Some(RunMode::Verify),
        Some(m) => {
            return Err(CliError {
                code: 2,
                msg: format!("--mode {m}: expected host, sim or verify"),
            })
        }
    })
}

/// Runs `tilejit run`.
pub fn run_cmd(a: &RunArgs) -> Result<(), CliError> {
    let mode = parse_mode(a.mode.as_deref())?;
    let model = onnx::load(&a.model).map_err(fail)?;
    let mut named: Vec<(String, Tensor)> = Vec::new();
    for spec in &a.inputs {
        let Some((name, file)) = spec.split_once('=') else {
            return Err(CliError {
                code: 2,
                msg: format!("--input {spec}: expected NAME=FILE.npy"),
            });
        };
        named.push((name.to_string(), tilejit::io::read_npy(file).map_err(fail)?));
    }
    let refs: Vec<(&str, &Tensor)> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let call = || match mode {
        Some(m) => tilejit::with_mode(m, || model.run(&refs)),
        None => model.run(&refs),
    };
    let t = Instant::now();
    let (outs, profiles) = tilejit::collect_profiles(call);
    let outs = outs.map_err(fail)?;
    let first = t.elapsed();
    if a.profile {
        let t = Instant::now();
        call().map_err(fail)?;
        outln!(
            "first call (trace + compile + run): {:.1} ms; second call: {:.2} ms",
            first.as_secs_f64() * 1e3,
            t.elapsed().as_secs_f64() * 1e3
        );
        for p in &profiles {
            crate::out!("{}", p.summary());
        }
    }
    if let Some(n) = a.repeat.filter(|&n| n > 0) {
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            call().map_err(fail)?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        outln!(
            "{n} cached calls: median {:.3} ms, fastest {:.3} ms",
            times[n / 2],
            times[0]
        );
    }
    if let Some(dir) = &a.output_dir {
        std::fs::create_dir_all(dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
    }
    for (name, t) in &outs {
        let dtype = format!("{:?}", t.dtype()).to_lowercase();
        match &a.output_dir {
            Some(dir) => {
                // An output name is a file name here: keep it inside DIR.
                let safe: String = name
                    .chars()
                    .map(|c| {
                        if c.is_alphanumeric() || "-_.".contains(c) {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                let path = dir.join(format!("{safe}.npy"));
                tilejit::io::write_npy(&path, t).map_err(fail)?;
                outln!("{name}: {dtype}{:?} -> {}", t.shape(), path.display());
            }
            None => outln!("{name}: {dtype}{:?}", t.shape()),
        }
    }
    Ok(())
}

/// Runs a `tilejit onnx` command.
pub fn onnx_cmd(c: &OnnxCommand) -> Result<(), CliError> {
    match c {
        OnnxCommand::Info { model } => {
            let info = onnx::info(model).map_err(fail)?;
            outln!(
                "opset {} (IR version {}), producer {}",
                info.opset,
                info.ir_version,
                info.producer
            );
            outln!("inputs:");
            for i in &info.inputs {
                outln!("  {i}");
            }
            outln!("outputs:");
            for o in &info.outputs {
                outln!("  {o}");
            }
            outln!("initializers: {}", info.initializers);
            if let Ok(m) = onnx::load(model) {
                let cuts = m.cuts();
                match cuts.is_empty() {
                    true => outln!("phases: 1 (one trace)"),
                    false => outln!(
                        "phases: {} (cut at {})",
                        m.functions().len(),
                        cuts.iter()
                            .map(|(n, op, eager)| match eager {
                                true => format!("{n} ({op}, run eagerly)"),
                                false => format!("{n} ({op}, its operands value-keyed)"),
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }
            }
            let bad = info.ops.iter().filter(|o| o.problem.is_some()).count();
            outln!("ops ({} types, {bad} unsupported):", info.ops.len());
            for o in &info.ops {
                match &o.problem {
                    None => outln!("  {:<24} {:>5}  supported", o.op, o.count),
                    Some(p) => outln!("  {:<24} {:>5}  UNSUPPORTED: {p}", o.op, o.count),
                }
            }
            Ok(())
        }
        OnnxCommand::NodeTests {
            dir,
            filter,
            mode,
            expect,
            write_passed,
        } => node_tests(
            dir,
            filter.as_deref(),
            parse_mode(mode.as_deref())?,
            expect.as_deref(),
            write_passed.as_deref(),
        ),
    }
}

/// How one node test ended.
enum Outcome {
    Pass,
    Skip(String),
    Fail(String),
}

/// An `--expect` file: the tests that must pass, the known failures, and
/// the tests given a wider absolute tolerance (`NAME atol=X`, as onnx's
/// runner takes a per-test `atol`). In `sim` (a mode that runs the
/// simulated device), `!sim` lines leave the list.
struct Expect {
    pass: Vec<String>,
    known: Vec<String>,
    atol: Vec<(String, f64)>,
}

fn read_expect(path: &std::path::Path, sim: bool) -> Result<Expect, CliError> {
    let text = tilejit_ir::fallible::read_file(path)
        .and_then(|b| String::from_utf8(b).map_err(std::io::Error::other))
        .map_err(|e| fail(format!("{}: {e}", path.display())))?;
    let mut e = Expect {
        pass: vec![],
        known: vec![],
        atol: vec![],
    };
    let mut not_on_sim = vec![];
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        let first = |rest: &str| rest.split_whitespace().next().map(String::from);
        if let Some(rest) = line.strip_prefix("!sim") {
            not_on_sim.extend(first(rest));
        } else if let Some(rest) = line.strip_prefix('!') {
            e.known.extend(first(rest));
        } else if let Some((name, tol)) = line.split_once(char::is_whitespace) {
            let atol = tol
                .trim()
                .strip_prefix("atol=")
                .and_then(|x| x.parse::<f64>().ok())
                .filter(|x| x.is_finite() && *x >= 0.0);
            let Some(atol) = atol else {
                return Err(fail(format!(
                    "{}:{}: `{tol}`: expected `atol=NUMBER` after the test name",
                    path.display(),
                    n + 1
                )));
            };
            e.atol.push((name.to_string(), atol));
            e.pass.push(name.to_string());
        } else if !line.is_empty() {
            e.pass.push(line.to_string());
        }
    }
    if sim {
        e.pass.retain(|n| !not_on_sim.contains(n));
    }
    Ok(e)
}

fn node_tests(
    dir: &std::path::Path,
    filter: Option<&str>,
    mode: Option<RunMode>,
    expect: Option<&std::path::Path>,
    write_passed: Option<&std::path::Path>,
) -> Result<(), CliError> {
    let sim = matches!(
        mode.or(tilejit::config().run_mode),
        Some(RunMode::Sim | RunMode::Verify)
    );
    let Expect {
        pass: must_pass,
        known: known_failures,
        atol,
    } = match expect {
        Some(p) => read_expect(p, sim)?,
        None => Expect {
            pass: vec![],
            known: vec![],
            atol: vec![],
        },
    };
    let mut passed_names: Vec<String> = vec![];
    let mut unexpected: Vec<String> = vec![];
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| fail(format!("{}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").is_file())
        .filter(|p| filter.is_none_or(|f| p.to_string_lossy().contains(f)))
        .collect();
    names.sort();
    let (mut pass, mut skip, mut failed) = (0, 0, 0);
    let outcomes = run_node_tests(&names, mode, &atol);
    for (name, outcome) in outcomes {
        if !matches!(outcome, Outcome::Pass) && must_pass.contains(&name) {
            unexpected.push(format!("{name} is listed to pass"));
        }
        if matches!(outcome, Outcome::Fail(_))
            && expect.is_some()
            && !known_failures.contains(&name)
        {
            unexpected.push(format!("{name} failed"));
        }
        match outcome {
            Outcome::Pass => {
                pass += 1;
                passed_names.push(name);
            }
            Outcome::Skip(why) => {
                skip += 1;
                outln!("skipped {name}: {}", why.lines().next().unwrap_or(""));
            }
            Outcome::Fail(why) => {
                failed += 1;
                outln!("FAILED {name}: {}", why.lines().next().unwrap_or(""));
            }
        }
    }
    outln!(
        "{} node tests: {pass} passed, {failed} failed, {skip} skipped",
        names.len()
    );
    if let Some(p) = write_passed {
        let text: String = passed_names.iter().map(|n| format!("{n}\n")).collect();
        std::fs::write(p, text).map_err(|e| fail(format!("{}: {e}", p.display())))?;
    }
    if let Some(p) = expect {
        let missing: Vec<&String> = must_pass
            .iter()
            .filter(|n| filter.is_none_or(|f| n.contains(f)))
            .filter(|n| !names.iter().any(|t| t.ends_with(n.as_str())))
            .collect();
        unexpected.extend(missing.iter().map(|n| format!("{n} is listed but absent")));
        if !unexpected.is_empty() {
            return Err(fail(format!(
                "{} against {}:\n  {}",
                unexpected.len(),
                p.display(),
                unexpected.join("\n  ")
            )));
        }
        outln!("as {} expects", p.display());
    }
    Ok(())
}

/// Runs each test directory's model (a panic fails that test, not the
/// run) on every core, a test at a time per thread: most node tests are a
/// few small kernels, so one thread would leave the others idle. Results
/// come back in `names`' order.
fn run_node_tests(
    names: &[PathBuf],
    mode: Option<RunMode>,
    atol: &[(String, f64)],
) -> Vec<(String, Outcome)> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let name_of = |t: &PathBuf| {
        t.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    // Each worker returns what it ran, by index.
    let worker = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(t) = names.get(i) else { break done };
            let name = name_of(t);
            let atol = atol.iter().find(|(n, _)| *n == name).map_or(1e-7, |a| a.1);
            let run = || match mode {
                Some(m) => tilejit::with_mode(m, || one_node_test(t, atol)),
                None => one_node_test(t, atol),
            };
            let outcome =
                std::panic::catch_unwind(run).unwrap_or_else(|_| Outcome::Fail("panicked".into()));
            done.push((i, (name, outcome)));
        }
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut done: Vec<(usize, (String, Outcome))> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads).map(|_| s.spawn(worker)).collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    // A worker that died outside a test would leave gaps: those fail.
    let mut done = done.into_iter().peekable();
    (0..names.len())
        .map(|i| match done.next_if(|(j, _)| *j == i) {
            Some((_, r)) => r,
            None => (name_of(&names[i]), Outcome::Fail("did not run".into())),
        })
        .collect()
}

fn one_node_test(dir: &std::path::Path, atol: f64) -> Outcome {
    let model = match onnx::load(dir.join("model.onnx")) {
        Ok(m) => m,
        Err(e) if e.kind() == tilejit::ErrorKind::Unsupported => {
            return Outcome::Skip(e.to_string())
        }
        Err(e) => return Outcome::Fail(format!("load: {e}")),
    };
    let mut sets: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    sets.sort();
    for set in sets {
        // Each file is a TensorProto, SequenceProto or OptionalProto, as
        // the model declares that input or output; a tensor of a narrow
        // type (float8, int4) compares exactly, on its carrier.
        let read =
            |prefix: &str, specs: &[onnx::IoSpec]| -> Result<Vec<(onnx::Value, bool)>, String> {
                let mut v = vec![];
                loop {
                    let path = set.join(format!("{prefix}_{}.pb", v.len()));
                    if !path.exists() {
                        return Ok(v);
                    }
                    let kind = specs.get(v.len()).map(|s| s.kind).unwrap_or_default();
                    let value = match kind {
                        onnx::ValueKind::Tensor => onnx::read_tensor_file_typed(&path)
                            .map(|(t, narrow)| (onnx::Value::Tensor(t), narrow.is_some())),
                        kind => onnx::read_value_file(&path, kind).map(|v| (v, false)),
                    };
                    match value {
                        Ok(t) => v.push(t),
                        Err(_) => return Err(format!("{prefix}_{}.pb is unreadable", v.len())),
                    }
                }
            };
        let (inputs, want) = match (
            read("input", model.inputs()),
            read("output", model.outputs()),
        ) {
            (Ok(i), Ok(o)) => (i, o),
            (Err(e), _) | (_, Err(e)) => return Outcome::Skip(e),
        };
        if inputs.len() != model.inputs().len() {
            // The generator could not write every input (a dtype numpy lacks).
            return Outcome::Skip(format!(
                "{} input files for {} inputs",
                inputs.len(),
                model.inputs().len()
            ));
        }
        let refs: Vec<&onnx::Value> = inputs.iter().map(|(v, _)| v).collect();
        let got = match model.run_values_positional(&refs) {
            Ok(g) => g,
            Err(e) if e.kind() == tilejit::ErrorKind::Unsupported => {
                return Outcome::Skip(e.to_string())
            }
            Err(e) => return Outcome::Fail(e.to_string()),
        };
        if got.len() != want.len() {
            return Outcome::Fail(format!("{} outputs, expected {}", got.len(), want.len()));
        }
        for ((name, g), (w, exact)) in got.iter().zip(&want) {
            if let Err(e) = compare_value(g, w, *exact, atol) {
                return Outcome::Fail(format!("output {name}: {e}"));
            }
        }
    }
    Outcome::Pass
}

/// [`compare`] per tensor of a sequence or optional.
fn compare_value(
    got: &onnx::Value,
    want: &onnx::Value,
    exact: bool,
    atol: f64,
) -> Result<(), String> {
    use onnx::Value as V;
    match (got, want) {
        (V::Tensor(g), V::Tensor(w)) => compare(g, w, exact, atol),
        (V::Sequence(g), V::Sequence(w)) if g.len() == w.len() => {
            for (i, (g, w)) in g.iter().zip(w).enumerate() {
                compare(g, w, false, atol).map_err(|e| format!("sequence element {i}: {e}"))?;
            }
            Ok(())
        }
        (V::None, V::None) => Ok(()),
        (g, w) => Err(format!("got {}, expected {}", describe(g), describe(w))),
    }
}

fn describe(v: &onnx::Value) -> String {
    match v {
        onnx::Value::Tensor(t) => format!("a tensor {:?}{:?}", t.dtype(), t.shape()),
        onnx::Value::Sequence(s) => format!("a sequence of {}", s.len()),
        onnx::Value::None => "an empty optional".into(),
    }
}

/// numpy's `assert_allclose(got, want, rtol=1e-3, atol)` (atol 1e-7 unless
/// the expect file widens it for the test), NaNs equal,
/// after the runner's dtype and shape checks. As onnx's runner does, a
/// bfloat16 output gets `rtol = 2**-6` (two bf16 ulps): the expected values
/// come from numpy, which rounds to bf16 after every step. `exact` (a
/// narrow ONNX type, on its carrier dtype): equal values, with the sign of
/// zero.
fn compare(got: &Tensor, want: &Tensor, exact: bool, atol: f64) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!(
            "got {:?}{:?}, expected {:?}{:?}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    if !got.dtype().is_float() {
        // Integers (u64 above 2^53 included) and bools compare exactly.
        let (g, w) = (
            got.to_array().map_err(|e| e.to_string())?,
            want.to_array().map_err(|e| e.to_string())?,
        );
        let (g, w) = (g.buffer(), w.buffer());
        return match (0..g.len()).find(|&i| g.get(i) != w.get(i)) {
            Some(i) => {
                let text = |l| tilejit_ir::text::lit_text(l, got.dtype());
                Err(format!(
                    "element {i}: {} vs {}",
                    text(g.get(i)),
                    text(w.get(i))
                ))
            }
            None => Ok(()),
        };
    }
    let g = got
        .cast(tilejit::DType::F64)
        .to_vec::<f64>()
        .map_err(|e| e.to_string())?;
    let w = want
        .cast(tilejit::DType::F64)
        .to_vec::<f64>()
        .map_err(|e| e.to_string())?;
    let rtol = match want.dtype() {
        tilejit::DType::BF16 => 2f64.powi(-6),
        _ => 1e-3,
    };
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = match exact {
            true => (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits(),
            false => (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= atol + rtol * b.abs(),
        };
        if !ok {
            return Err(format!("element {i}: {a} vs {b}"));
        }
    }
    Ok(())
}
