//! The `tilejit` command-line tool (clap): `tilejit demo` (the default)
//! runs the quickstart model and prints results, timings and the handler
//! caches; `asm`, `disasm` and `sim` are the simulated accelerator's tools
//! ([`device_cli`]); `snapshot info` prints a snapshot's manifest
//! ([`snapshot_cli`]); `serve` hosts a device for remote clients
//! ([`serve_cli`]). `--help` works everywhere.

mod device_cli;
mod onnx_cli;
mod serve_cli;
mod snapshot_cli;

use clap::{Parser, Subcommand};
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Instant;
use tilejit::prelude::*;

/// Writes to stdout; a reader that went away (`tilejit sim ... | head`)
/// ends the program quietly, as other command-line tools do, instead of
/// a panic.
fn say(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// `print!` through [`say`].
macro_rules! out {
    ($($t:tt)*) => { $crate::say(format_args!($($t)*)) };
}

/// `println!` through [`say`].
macro_rules! outln {
    () => { $crate::say(format_args!("\n")) };
    ($($t:tt)*) => { $crate::say(format_args!("{}\n", format_args!($($t)*))) };
}
pub(crate) use {out, outln};

/// A JIT kernel compiler and dispatcher for tensor programs: the quickstart
/// demo, and the simulated accelerator's assembler, disassembler and
/// single-core simulator.
#[derive(Parser)]
#[command(
    name = "tilejit",
    version,
    propagate_version = true,
    after_help = format!("{AFTER_HELP}\nEnvironment: TILEJIT_RUN_MODE, TILEJIT_LOG, TILEJIT_DUMP, TILEJIT_PROFILE, ... (`--help` lists them)."),
    after_long_help = long_help()
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

const AFTER_HELP: &str = "With no command, runs `demo`.\n\nExit codes: 0 success, 1 failure (bad file, fault, verifier rejection), 2 bad usage.";

/// `--help`'s closing text: every `TILEJIT_*` variable, from the list
/// the library composes of each crate's own, so it cannot go stale.
fn long_help() -> String {
    let vars = tilejit::config::variables();
    let width = vars.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut text =
        format!("{AFTER_HELP}\n\nEnvironment (read once; README.md says what each does):");
    for (name, values) in vars {
        text.push_str(&format!("\n  {name:width$}  {values}"));
    }
    text
}

#[derive(Subcommand)]
enum Command {
    /// Run the quickstart model (layernorm -> matmul -> gelu -> matmul ->
    /// residual, then softmax) twice on the host and once on the simulated
    /// device, and print results, timings and the handler caches.
    #[command(
        after_help = "Examples:\n  tilejit demo\n  TILEJIT_RUN_MODE=verify TILEJIT_LOG=timing tilejit demo"
    )]
    Demo,
    /// Assemble (and verify) a simulated-core program.
    #[command(
        after_help = "Example:\n  tilejit asm device/examples/softmax_rows.s -o softmax.bin"
    )]
    Asm(device_cli::AsmArgs),
    /// Print a bytecode program as assembly (it assembles back to the same
    /// bytes).
    #[command(after_help = "Example:\n  tilejit disasm softmax.bin")]
    Disasm(device_cli::DisasmArgs),
    /// Run one program on one simulated core and print the cycles each pipe
    /// was busy; inputs not given are filled deterministically from the seed.
    #[command(
        after_help = "Examples:\n  tilejit sim device/examples/vadd_double_buffered.s --core aiv\n  tilejit sim softmax.bin --input x=x.npy --output y=y.npy --seed 7"
    )]
    Sim(device_cli::SimArgs),
    /// Inspect a snapshot file (`JitFunction::save`).
    #[command(subcommand)]
    Snapshot(snapshot_cli::SnapshotCommand),
    /// Host one device for remote clients over gRPC (`Device::remote`).
    #[command(
        after_help = "Examples:\n  tilejit serve --listen :7070 --token-file token.txt\n  TILEJIT_LOG=remote tilejit serve --listen 0.0.0.0:7070 --device sim --token-file token.txt"
    )]
    Serve(serve_cli::ServeArgs),
    /// Run an ONNX model on .npy inputs and write its outputs as .npy.
    #[command(
        after_help = "Examples:\n  tilejit run model.onnx --input images=x.npy --output-dir out\n  tilejit run model.onnx --input input_ids=tokens.npy --mode sim --profile"
    )]
    Run(onnx_cli::RunArgs),
    /// Inspect ONNX models.
    #[command(subcommand)]
    Onnx(onnx_cli::OnnxCommand),
}

/// One transformer-style MLP block: pre-norm, up-projection, GELU,
/// down-projection, residual.
#[jit]
fn mlp_block(x: &Tensor, gamma: &Tensor, beta: &Tensor, w1: &Tensor, w2: &Tensor) -> Tensor {
    let h = x.layer_norm(gamma, beta, 1e-5);
    let h = h.matmul(w1).gelu();
    x + h.matmul(w2)
}

#[jit]
fn attention_probs(q: &Tensor, k: &Tensor, scale: f32) -> Tensor {
    (q.matmul(&k.transpose(0, 1)) * scale).softmax(-1)
}

fn demo() -> tilejit::Result<()> {
    let (rows, d, hidden) = (64, 256, 1024);
    let x = Tensor::randn(&[rows, d], 1);
    let gamma = Tensor::ones(&[d], DType::F32);
    let beta = Tensor::zeros(&[d], DType::F32);
    let w1 = Tensor::randn(&[d, hidden], 2) * (1.0 / (d as f32).sqrt());
    let w2 = Tensor::randn(&[hidden, d], 3) * (1.0 / (hidden as f32).sqrt());

    outln!(
        "tilejit {} quickstart: x f32[{rows},{d}], hidden {hidden}",
        env!("CARGO_PKG_VERSION")
    );
    outln!("(backend: native host code compiled with Cranelift)\n");
    for call in [
        "first call (trace + compile + run)",
        "second call (handler cache hit)",
    ] {
        let t = Instant::now();
        let y = mlp_block(&x, &gamma, &beta, &w1, &w2)?;
        let probs = attention_probs(&y, &y, 1.0 / (d as f32).sqrt())?;
        let dt = t.elapsed();
        let row_sums = probs.sum(-1, false);
        outln!("{call}: {:.2} ms", dt.as_secs_f64() * 1e3);
        outln!("  y[0, :6]    = {}", first_cells(&y, 6)?);
        outln!(
            "  probs rows sum to 1: min {:.6}, max {:.6}",
            min_max(&row_sums)?.0,
            min_max(&row_sums)?.1
        );
    }
    // A changed float parameter is a runtime value: no retrace.
    let _ = attention_probs(&x, &x, 0.5)?;

    // The same model on the simulated accelerator: every kernel compiled to
    // AIC/AIV bytecode and run as tile tasks by the device's scheduler.
    let t = Instant::now();
    let (sim, profiles) = tilejit::collect_profiles(|| {
        with_mode(RunMode::Sim, || -> tilejit::Result<Tensor> {
            let y = mlp_block(&x, &gamma, &beta, &w1, &w2)?;
            attention_probs(&y, &y, 1.0 / (d as f32).sqrt())
        })
    });
    let sim = sim?;
    let host = attention_probs(
        &mlp_block(&x, &gamma, &beta, &w1, &w2)?,
        &mlp_block(&x, &gamma, &beta, &w1, &w2)?,
        1.0 / (d as f32).sqrt(),
    )?;
    let (hv, sv) = (host.to_vec::<f32>()?, sim.to_vec::<f32>()?);
    let max_diff = hv
        .iter()
        .zip(&sv)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    outln!(
        "\non the simulated device (RunMode::Sim): {:.1} ms of host time, max |host - sim| = {max_diff:.2e}",
        t.elapsed().as_secs_f64() * 1e3
    );
    let dir = tilejit::config()
        .runtime
        .profile_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("tilejit-demo-profile"));
    for p in &profiles {
        out!("{}", p.summary());
        match tilejit::write_trace(&dir, p) {
            Ok(path) => outln!("  trace (open in Perfetto): {}", path.display()),
            Err(e) => outln!("  (could not write the trace to {}: {e})", dir.display()),
        }
    }
    outln!("\n{}", mlp_block::jit());
    outln!("{}", attention_probs::jit());
    if let Some(h) = mlp_block::jit().handlers().first() {
        outln!(
            "optimised graph of mlp_block for {}:\n{}",
            h.signature,
            h.graph_text()
        );
    }
    Ok(())
}

fn first_cells(t: &Tensor, n: usize) -> tilejit::Result<String> {
    let v = t.to_vec::<f32>()?;
    Ok(v.iter()
        .take(n)
        .map(|x| format!("{x:+.4}"))
        .collect::<Vec<_>>()
        .join(" "))
}

fn min_max(t: &Tensor) -> tilejit::Result<(f32, f32)> {
    let v = t.to_vec::<f32>()?;
    Ok(v.iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        }))
}

fn main() -> ExitCode {
    // Help and version print to stdout and exit 0; usage errors exit 2.
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Demo) {
        Command::Demo => demo().map_err(|e| device_cli::CliError {
            code: 1,
            msg: e.to_string(),
        }),
        Command::Asm(a) => device_cli::asm_cmd(&a),
        Command::Disasm(a) => device_cli::disasm_cmd(&a),
        Command::Sim(a) => device_cli::sim_cmd(&a),
        Command::Snapshot(c) => snapshot_cli::snapshot_cmd(&c),
        Command::Serve(a) => serve_cli::serve_cmd(&a),
        Command::Run(a) => onnx_cli::run_cmd(&a),
        Command::Onnx(c) => onnx_cli::onnx_cmd(&c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.msg);
            ExitCode::from(e.code)
        }
    }
}
