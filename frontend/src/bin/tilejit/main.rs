//! The `tilejit` command-line tool. `tilejit demo` (the default) runs the
//! quickstart model and prints results, timings and the handler caches;
//! `asm`, `disasm` and `sim` are the simulated accelerator's tools
//! ([`device_cli`]).

mod device_cli;

use std::process::ExitCode;
use std::time::Instant;
use tilejit::prelude::*;

const USAGE: &str = "usage: tilejit [demo | asm | disasm | sim | help | version]

  demo      run the quickstart model (layernorm -> matmul -> gelu -> matmul -> residual,
            then softmax) twice, and print results, timings and the handler caches
  asm FILE.s -o FILE.bin
            assemble (and verify) a simulated-core program
  disasm FILE.bin
            print a bytecode program as assembly (it assembles back to the same bytes)
  sim FILE(.s|.bin) [--core aiv|aic] [--input NAME=FILE.npy]... [--output NAME=FILE.npy]...
            [--arg NAME=VALUE]... [--seed N] [--config DEVICE.json]
            run one program on one simulated core and print cycles per pipe; inputs
            not given are filled deterministically from the seed
  help      this text
  version   print the version";

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

    println!(
        "tilejit {} quickstart: x f32[{rows},{d}], hidden {hidden}",
        env!("CARGO_PKG_VERSION")
    );
    println!("(backend: native host code compiled with Cranelift)\n");
    for call in [
        "first call (trace + compile + run)",
        "second call (handler cache hit)",
    ] {
        let t = Instant::now();
        let y = mlp_block(&x, &gamma, &beta, &w1, &w2)?;
        let probs = attention_probs(&y, &y, 1.0 / (d as f32).sqrt())?;
        let dt = t.elapsed();
        let row_sums = probs.sum(-1, false);
        println!("{call}: {:.2} ms", dt.as_secs_f64() * 1e3);
        println!("  y[0, :6]    = {}", first_cells(&y, 6)?);
        println!(
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
    println!(
        "\non the simulated device (RunMode::Sim): {:.1} ms of host time, max |host - sim| = {max_diff:.2e}",
        t.elapsed().as_secs_f64() * 1e3
    );
    let dir = tilejit::config()
        .profile_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("tilejit-demo-profile"));
    for p in &profiles {
        print!("{}", p.summary());
        match tilejit::write_trace(&dir, p) {
            Ok(path) => println!("  trace (open in Perfetto): {}", path.display()),
            Err(e) => println!("  (could not write the trace to {}: {e})", dir.display()),
        }
    }
    println!("\n{}", mlp_block::jit());
    println!("{}", attention_probs::jit());
    if let Some(h) = mlp_block::jit().handlers().first() {
        println!(
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str).unwrap_or("demo") {
        "demo" => match demo() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        },
        cmd @ ("asm" | "disasm" | "sim") => {
            let rest = &args[1..];
            let result = match cmd {
                "asm" => device_cli::asm_cmd(rest),
                "disasm" => device_cli::disasm_cmd(rest),
                _ => device_cli::sim_cmd(rest),
            };
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {}", e.msg);
                    if e.code == 2 {
                        eprintln!("\n{USAGE}");
                    }
                    ExitCode::from(e.code)
                }
            }
        }
        "help" | "-h" | "--help" => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        "version" | "-V" | "--version" => {
            println!("tilejit {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("error: unknown command `{other}`\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
