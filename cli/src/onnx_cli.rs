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
    /// An input as NAME=FILE.npy (repeat for each input).
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    inputs: Vec<String>,
    /// Where to write `<output>.npy` files (none written without it).
    #[arg(long)]
    output_dir: Option<PathBuf>,
    /// Run mode: host, sim or verify (default: TILEJIT_RUN_MODE, else host).
    #[arg(long)]
    mode: Option<String>,
    /// Print the first call's time (trace + compile + run) and a second,
    /// cached call's, and the Sim profile in sim mode.
    #[arg(long)]
    profile: bool,
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
}

/// Runs `tilejit run`.
pub fn run_cmd(a: &RunArgs) -> Result<(), CliError> {
    let mode = match a.mode.as_deref() {
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
    };
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
    }
}
