//! `device` and `asm`: a core program from bytes (the binary decoder) or
//! from text (the assembler); then the binary and text round trips, the
//! verifier, and for verified programs a run on a fresh simulated device
//! with small GM buffers and a small watchdog budget.

use super::{files, hash, sig, Target};
use crate::rng::Rng;
use tilejit_device::isa::asm::{assemble, disassemble};
use tilejit_device::isa::binary::{decode, encode};
use tilejit_device::{DeviceApi, DeviceBuffer, DeviceConfig, Program, SimDevice};
use tilejit_ir::kernel::{fuse, parse_program, KernelProgram};

pub const BINARY: Target = Target {
    name: "device",
    about:
        "bytecode decoder, encode/decode and disassemble/assemble round trips, verifier, simulator",
    seeds: binary_seeds,
    run: run_binary,
    dict: &[],
};

pub const ASM: Target = Target {
    name: "asm",
    about: "assembler, the same round trips, verifier, simulator",
    seeds: asm_seeds,
    run: run_asm,
    dict: &[
        ".kernel",
        ".gm",
        ".arg",
        "aiv",
        "aic",
        "in",
        "out",
        "inout",
        "r0",
        "r1",
        "r15",
        "@0x0",
        "@0x7fffffe0",
        "movi",
        "ldarg",
        "add",
        "sub",
        "mul",
        "div",
        "min",
        "max",
        "shl",
        "shr",
        "blt",
        "bge",
        "beq",
        "bne",
        "jmp",
        "end",
        "ld",
        "st",
        "vadd",
        "vmul",
        "vdiv",
        "vunary",
        "exp",
        "vcast",
        "setf",
        "waitf",
        "mte2",
        "mte3",
        "v",
        "m",
        "fix",
        "f32",
        "f16",
        "bf16",
        "i32",
        "i64",
        "bool",
        "f64",
        "1x1",
        "16x16",
        "65535x65535",
    ],
};

/// The watchdog budget of a fuzzed run: ~60k instructions, so a runaway
/// loop ends in milliseconds.
const WATCHDOG_WORK: u64 = 1_000_000;
/// The most bytes of GM one argument gets (its declared size if smaller).
const MAX_ARG_BYTES: u64 = 64 << 10;

/// The shipped examples and the code the device code generator emits for
/// every golden kernel program, assembled.
fn programs() -> Vec<Program> {
    let mut out: Vec<Program> = files("device/examples", ".s")
        .into_iter()
        .filter_map(|(_, b)| assemble(std::str::from_utf8(&b).ok()?).ok())
        .collect();
    let mut kps: Vec<KernelProgram> = files("tests/golden/fusion", ".kernels")
        .into_iter()
        .chain(files("tests/golden", ".kernels"))
        .filter_map(|(_, b)| parse_program(std::str::from_utf8(&b).ok()?).ok())
        .collect();
    kps.extend(
        files("tests/golden", ".graph")
            .into_iter()
            .filter_map(|(_, b)| {
                fuse(&tilejit_ir::text::parse(std::str::from_utf8(&b).ok()?).ok()?).ok()
            }),
    );
    let cfg = DeviceConfig::default();
    for kp in &kps {
        let dtype_of = |b| kp.buffer(b).ty.dtype;
        for k in &kp.kernels {
            if let Ok(dks) = tilejit_codegen::device::compile(k, &dtype_of, &cfg) {
                out.extend(dks.into_iter().map(|d| d.program.program().clone()));
            }
        }
    }
    out
}

fn binary_seeds() -> Vec<Vec<u8>> {
    programs().iter().filter_map(|p| encode(p).ok()).collect()
}

fn asm_seeds() -> Vec<Vec<u8>> {
    programs()
        .iter()
        .map(|p| disassemble(p).into_bytes())
        .collect()
}

fn run_binary(input: &[u8]) -> Result<String, String> {
    match decode(input) {
        Ok(p) => check(&p, input),
        Err(e) => Ok(sig("decode", &e)),
    }
}

fn run_asm(input: &[u8]) -> Result<String, String> {
    let Ok(text) = std::str::from_utf8(input) else {
        return Ok("not utf-8".into());
    };
    match assemble(text) {
        Ok(p) => check(&p, input),
        Err(e) => Ok(sig("assemble", &e)),
    }
}

/// The round trips, the verifier, then a run.
fn check(p: &Program, input: &[u8]) -> Result<String, String> {
    let text = disassemble(p);
    let back =
        assemble(&text).map_err(|e| format!("the disassembly does not assemble: {e}\n{text}"))?;
    if &back != p {
        return Err(format!(
            "disassemble -> assemble gave another program:\n{text}---\n{}",
            disassemble(&back)
        ));
    }
    match encode(p) {
        Ok(bytes) => {
            let back =
                decode(&bytes).map_err(|e| format!("an encoded program does not decode: {e}"))?;
            if &back != p {
                return Err(format!("encode -> decode gave another program:\n{text}"));
            }
        }
        // Only names, counts or operands the format cannot hold may fail.
        Err(e) => return Ok(sig("encode", &e)),
    }
    let cfg = DeviceConfig {
        gm_bytes: 16 << 20,
        watchdog_work: WATCHDOG_WORK,
        ..DeviceConfig::default()
    };
    run_on(cfg, p.clone(), hash(input))
}

/// Verifies `p` for a fresh device made from `cfg` and runs it on core 0
/// with GM buffers of pseudo-random bytes.
pub(super) fn run_on(cfg: DeviceConfig, p: Program, seed: u64) -> Result<String, String> {
    let dev = match SimDevice::new(cfg) {
        Ok(d) => d,
        Err(e) => return Ok(sig("device", &e)),
    };
    let v = match dev.verify(p.clone()) {
        Ok(v) => v,
        Err(e) => return Ok(sig("verify", &e)),
    };
    let mut rng = Rng::new(seed);
    let mut bufs: Vec<DeviceBuffer> = Vec::new();
    for g in &p.gm {
        let bytes = g.bytes().unwrap_or(u64::MAX).min(MAX_ARG_BYTES);
        let b = match dev.allocate(bytes) {
            Ok(b) => b,
            Err(e) => return Ok(sig("allocate", &e)),
        };
        // Small values mostly, so loops driven by loaded data end.
        let data: Vec<u8> = (0..bytes).map(|_| (rng.next_u64() % 7) as u8).collect();
        dev.copy_from_host(&data, &b, 0)
            .map_err(|e| format!("copy into a fresh buffer failed: {e}"))?;
        bufs.push(b);
    }
    let scalars: Vec<i64> = p.args.iter().map(|a| a.value).collect();
    let refs: Vec<&DeviceBuffer> = bufs.iter().collect();
    match dev.run(&v, 0, &refs, &scalars) {
        Ok(r) => Ok(format!("ran {} instructions", r.instructions.min(16))),
        Err(e) => Ok(sig("run", &e)),
    }
}
