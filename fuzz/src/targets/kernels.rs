//! `kernels`: the kernel program text parser and its print/parse round
//! trip; for programs that verify, the device code generator (whose output
//! must pass the device verifier and survive the binary round trip).

use super::{files, sig, Target};
use tilejit_device::isa::binary::{decode, encode};
use tilejit_device::DeviceConfig;
use tilejit_ir::kernel::{fuse, parse_program, verify_program, KernelProgram};
use tilejit_ir::text::parse;

pub const TARGET: Target = Target {
    name: "kernels",
    about: "kernel text parser, round trip, verifier, device codegen",
    seeds,
    run,
    dict: &[
        "kernels {",
        "kernel",
        "buffer",
        "temp",
        "input",
        "const",
        "output",
        "domain",
        "strides=",
        "load",
        "store",
        "stage",
        "reduce",
        "matmul",
        "param",
        "f32",
        "f16",
        "bf16",
        "f64",
        "i32",
        "i64",
        "bool",
        "b0",
        "b1",
        "b2",
        "%0",
        "%1",
        "sum",
        "max",
        "min",
        "}",
    ],
};

/// Most elements of any buffer a program may declare before codegen is
/// skipped (codegen's work grows with tile counts).
const MAX_NUMEL: usize = 1 << 20;

fn seeds() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = files("tests/golden", ".kernels")
        .into_iter()
        .chain(files("tests/golden/fusion", ".kernels"))
        .map(|(_, b)| b)
        .collect();
    // Every golden graph fused: more programs, printed as the code prints.
    for (_, g) in files("tests/golden", ".graph")
        .into_iter()
        .chain(files("tests/golden/fusion", ".graph"))
    {
        let fused = std::str::from_utf8(&g)
            .ok()
            .and_then(|t| parse(t).ok())
            .and_then(|g| fuse(&g).ok());
        out.extend(fused.map(|kp| kp.to_string().into_bytes()));
    }
    out
}

fn run(input: &[u8]) -> Result<String, String> {
    let Ok(text) = std::str::from_utf8(input) else {
        return Ok("not utf-8".into());
    };
    let kp = match parse_program(text) {
        Ok(kp) => kp,
        Err(e) => return Ok(sig("parse", &e)),
    };
    let printed = kp.to_string();
    let back = parse_program(&printed)
        .map_err(|e| format!("the printed program does not parse: {e}\n{printed}"))?;
    if back != kp {
        return Err(format!(
            "print -> parse gave another program:\n{printed}---\n{back}"
        ));
    }
    if let Err(e) = verify_program(&kp) {
        return Ok(sig("verify", &e));
    }
    codegen(&kp)
}

/// Compiles every kernel for the default device and checks what comes out.
pub(super) fn codegen(kp: &KernelProgram) -> Result<String, String> {
    if kp
        .buffers
        .iter()
        .any(|b| b.ty.shape.checked_numel().is_none_or(|n| n > MAX_NUMEL))
    {
        return Ok("verified, too big for codegen".into());
    }
    let cfg = DeviceConfig::default();
    let dtype_of = |b| kp.buffer(b).ty.dtype;
    let mut n = 0;
    for k in &kp.kernels {
        let dks = match tilejit_codegen::device::compile(k, &dtype_of, &cfg) {
            Ok(d) => d,
            Err(e) => return Ok(sig("codegen", &e)),
        };
        for dk in dks {
            let p = dk.program.program();
            let bytes = encode(p).map_err(|e| format!("generated code does not encode: {e}"))?;
            let back =
                decode(&bytes).map_err(|e| format!("generated code does not decode: {e}"))?;
            if &back != p {
                return Err(format!(
                    "binary round trip changed generated code:\n{}",
                    dk.asm
                ));
            }
            n += 1;
        }
    }
    Ok(format!("compiled to {} core functions", n.min(6)))
}
