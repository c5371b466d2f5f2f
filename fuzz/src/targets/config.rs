//! `config`: `DeviceConfig` JSON: parse and validate, the JSON round trip,
//! then a device built from the config runs a small vector program, and the
//! device code generator compiles a softmax kernel for it.

use super::{device::run_on, files, hash, sig, Target};
use tilejit_device::isa::asm::assemble;
use tilejit_device::DeviceConfig;
use tilejit_ir::kernel::{fuse, KernelProgram};
use tilejit_ir::text::parse;

pub const TARGET: Target = Target {
    name: "config",
    about: "DeviceConfig JSON: parse, validate, round trip, build a device, run, codegen",
    seeds,
    run,
    dict: &[
        "\"name\"",
        "\"aic_cores\"",
        "\"aiv_cores\"",
        "\"clock_hz\"",
        "\"gm_bytes\"",
        "\"ub_bytes\"",
        "\"l1_bytes\"",
        "\"watchdog_work\"",
        "\"max_managers\"",
        "\"dispatch_cycles\"",
        "\"costs\"",
        "null",
        "true",
        "{}",
        "[]",
        "\"\"",
    ],
};

/// A vector add over 64 elements, with flags between the pipes.
const PROGRAM: &str = "\
.kernel vadd aiv
.gm x f32 [64] in
.gm z f32 [64] out
    movi r0, 64
    ld f32, 1x64, 1, r0, @0x0, x, 0, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vadd f32, 1x64, 1, r0, @0x100, @0x0, @0x0
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x64, 1, r0, z, 0, 0, @0x100
    end
";

fn seeds() -> Vec<Vec<u8>> {
    let d = DeviceConfig::default();
    let small = DeviceConfig {
        name: "tiny".into(),
        aic_cores: 1,
        aiv_cores: 2,
        gm_bytes: 4096,
        ub_bytes: 32,
        l1_bytes: 32,
        l0a_bytes: 32,
        l0b_bytes: 32,
        l0c_bytes: 32,
        watchdog_work: 1,
        max_managers: 1,
        ..d.clone()
    };
    let big = DeviceConfig {
        aic_cores: 4096,
        aiv_cores: 4096,
        gm_bytes: 1 << 44,
        ub_bytes: 64 << 20,
        max_managers: 64,
        clock_hz: 1e-300,
        ..d.clone()
    };
    let mut out: Vec<Vec<u8>> = [d, small, big]
        .iter()
        .map(|c| c.to_json().into_bytes())
        .collect();
    // Compact JSON too: the parser must not depend on the printer's layout.
    out.extend(files("device/tests", ".json").into_iter().map(|(_, b)| b));
    out.push(
        DeviceConfig::default()
            .to_json()
            .split_whitespace()
            .collect::<String>()
            .into_bytes(),
    );
    out
}

fn run(input: &[u8]) -> Result<String, String> {
    let Ok(text) = std::str::from_utf8(input) else {
        return Ok("not utf-8".into());
    };
    let cfg = match DeviceConfig::from_json(text) {
        Ok(c) => c,
        Err(e) => return Ok(sig("parse", &e)),
    };
    let json = cfg.to_json();
    let back = DeviceConfig::from_json(&json)
        .map_err(|e| format!("a valid config's JSON does not read back: {e}\n{json}"))?;
    if back != cfg {
        return Err(format!("to_json -> from_json changed the config:\n{json}"));
    }
    codegen(&cfg)?;
    let p = assemble(PROGRAM).map_err(|e| format!("the built-in program: {e}"))?;
    // A config may allow billions of steps; a fuzzed run gets few.
    let run_cfg = DeviceConfig {
        watchdog_work: cfg.watchdog_work.min(1_000_000),
        ..cfg
    };
    run_on(run_cfg, p, hash(input))
}

/// Compiles a fused softmax for the config's memories: tile sizes come
/// from them, so odd sizes must give code or an error, never a panic.
fn codegen(cfg: &DeviceConfig) -> Result<(), String> {
    const SOFTMAX: &str = "graph {
  %0 = input 0 : f32[4,40]
  %1 = reduce_max %0 axes=[1] : f32[4,1]
  %2 = broadcast %1 : f32[4,40]
  %3 = sub %0, %2 : f32[4,40]
  %4 = exp %3 : f32[4,40]
  %5 = reduce_sum %4 axes=[1] : f32[4,1]
  %6 = broadcast %5 : f32[4,40]
  %7 = div %4, %6 : f32[4,40]
  return %7
}
";
    let kp: KernelProgram = parse(SOFTMAX)
        .and_then(|g| fuse(&g))
        .map_err(|e| format!("the built-in graph: {e}"))?;
    let dtype_of = |b| kp.buffer(b).ty.dtype;
    for k in &kp.kernels {
        // Refusing a config is fine; only a panic is a finding.
        let _ = tilejit_codegen::device::compile(k, &dtype_of, cfg);
    }
    Ok(())
}
