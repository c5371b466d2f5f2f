//! `tilejit asm`, `tilejit disasm` and `tilejit sim`: the simulated
//! accelerator's tools. Usage errors exit with 2, everything else that
//! fails (unreadable or malformed files, verifier rejections, faults,
//! out-of-memory) with 1; no input makes the tool panic or hang.

use std::fmt::Write as _;
use tilejit_ir::DType;
use tilejit_runtime::device::isa::{asm, binary, GmDecl, Role};
use tilejit_runtime::device::npy::{self, NpyArray};
use tilejit_runtime::device::sim::values::{self, Vals};
use tilejit_runtime::device::DeviceBuffer;
use tilejit_runtime::device::{CoreType, DeviceApi, DeviceConfig, Program, SimDevice};

/// A failure with its exit code.
pub struct CliError {
    pub code: u8,
    pub msg: String,
}

fn usage(msg: impl Into<String>) -> CliError {
    CliError {
        code: 2,
        msg: msg.into(),
    }
}

fn fail(msg: impl Into<String>) -> CliError {
    CliError {
        code: 1,
        msg: msg.into(),
    }
}

fn read_file(path: &str) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|e| fail(format!("cannot read {path}: {e}")))
}

fn write_file(path: &str, bytes: &[u8]) -> Result<(), CliError> {
    std::fs::write(path, bytes).map_err(|e| fail(format!("cannot write {path}: {e}")))
}

/// Reads a program from text assembly or binary bytecode (told apart by
/// the binary's magic).
fn load_program(path: &str) -> Result<Program, CliError> {
    let bytes = read_file(path)?;
    if bytes.starts_with(binary::MAGIC) {
        binary::decode(&bytes).map_err(|e| fail(format!("{path}: {e}")))
    } else {
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| fail(format!("{path}: neither bytecode nor UTF-8 assembly text")))?;
        asm::assemble(text).map_err(|e| fail(format!("{path}: {e}")))
    }
}

/// `tilejit asm FILE.s -o FILE.bin`
pub fn asm_cmd(args: &[String]) -> Result<(), CliError> {
    let (mut input, mut output) = (None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => output = Some(it.next().ok_or_else(|| usage("-o needs a file"))?.clone()),
            s if s.starts_with('-') => return Err(usage(format!("unknown option `{s}`"))),
            s if input.is_none() => input = Some(s.to_string()),
            s => return Err(usage(format!("unexpected argument `{s}`"))),
        }
    }
    let input = input.ok_or_else(|| usage("asm needs an input file"))?;
    let output = output.ok_or_else(|| usage("asm needs -o OUTPUT"))?;
    let bytes = read_file(&input)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| fail(format!("{input}: not UTF-8 text")))?;
    let program = asm::assemble(text).map_err(|e| fail(format!("{input}: {e}")))?;
    tilejit_runtime::device::verify(program.clone(), &DeviceConfig::default())
        .map_err(|e| fail(format!("{input}: {e}")))?;
    let bin = binary::encode(&program).map_err(|e| fail(format!("{input}: {e}")))?;
    write_file(&output, &bin)?;
    eprintln!(
        "{input}: {} instructions, {} bytes -> {output}",
        program.code.len(),
        bin.len()
    );
    Ok(())
}

/// `tilejit disasm FILE.bin`
pub fn disasm_cmd(args: &[String]) -> Result<(), CliError> {
    let [input] = args else {
        return Err(usage("disasm takes one file"));
    };
    let bytes = read_file(input)?;
    let program = binary::decode(&bytes).map_err(|e| fail(format!("{input}: {e}")))?;
    print!("{}", asm::disassemble(&program));
    Ok(())
}

struct SimArgs {
    file: String,
    core: Option<CoreType>,
    inputs: Vec<(String, String)>,
    outputs: Vec<(String, String)>,
    scalars: Vec<(String, i64)>,
    seed: u64,
    config: Option<String>,
}

fn parse_sim_args(args: &[String]) -> Result<SimArgs, CliError> {
    let mut s = SimArgs {
        file: String::new(),
        core: None,
        inputs: vec![],
        outputs: vec![],
        scalars: vec![],
        seed: 0,
        config: None,
    };
    let mut it = args.iter();
    let pair = |v: Option<&String>, opt: &str| -> Result<(String, String), CliError> {
        let v = v.ok_or_else(|| usage(format!("{opt} needs NAME=VALUE")))?;
        let (n, f) = v
            .split_once('=')
            .ok_or_else(|| usage(format!("{opt} {v}: expected NAME=VALUE")))?;
        Ok((n.to_string(), f.to_string()))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--core" => {
                let c = it.next().ok_or_else(|| usage("--core needs aiv or aic"))?;
                s.core = Some(
                    CoreType::from_name(c)
                        .ok_or_else(|| usage(format!("--core {c}: expected aiv or aic")))?,
                );
            }
            "--input" => s.inputs.push(pair(it.next(), "--input")?),
            "--output" => s.outputs.push(pair(it.next(), "--output")?),
            "--arg" => {
                let (n, v) = pair(it.next(), "--arg")?;
                let v = v
                    .parse::<i64>()
                    .map_err(|_| usage(format!("--arg {n}={v}: not an integer")))?;
                s.scalars.push((n, v));
            }
            "--seed" => {
                let v = it.next().ok_or_else(|| usage("--seed needs a number"))?;
                s.seed = v
                    .parse()
                    .map_err(|_| usage(format!("--seed {v}: not a number")))?;
            }
            "--config" => {
                s.config = Some(
                    it.next()
                        .ok_or_else(|| usage("--config needs a file"))?
                        .clone(),
                )
            }
            f if f.starts_with('-') => return Err(usage(format!("unknown option `{f}`"))),
            f if s.file.is_empty() => s.file = f.to_string(),
            f => return Err(usage(format!("unexpected argument `{f}`"))),
        }
    }
    if s.file.is_empty() {
        return Err(usage("sim needs a program file"));
    }
    Ok(s)
}

/// `tilejit sim FILE [--core aiv|aic] [--input NAME=FILE.npy]... [--output NAME=FILE.npy]...
/// [--arg NAME=VALUE]... [--seed N] [--config FILE.json]`
pub fn sim_cmd(args: &[String]) -> Result<(), CliError> {
    let a = parse_sim_args(args)?;
    let config = match &a.config {
        Some(path) => {
            let text = String::from_utf8(read_file(path)?)
                .map_err(|_| fail(format!("{path}: not UTF-8")))?;
            DeviceConfig::from_json(&text).map_err(|e| fail(format!("{path}: {e}")))?
        }
        None => DeviceConfig::default(),
    };
    let program = load_program(&a.file)?;
    if let Some(core) = a.core {
        if core != program.core {
            return Err(usage(format!(
                "--core {}: program `{}` is for {} cores",
                core.name(),
                program.name,
                program.core.name()
            )));
        }
    }
    let device = SimDevice::new(config).map_err(|e| fail(e.to_string()))?;
    let verified = device
        .verify(program.clone())
        .map_err(|e| fail(e.to_string()))?;
    for (name, _) in a.inputs.iter().chain(&a.outputs) {
        if !program.gm.iter().any(|g| &g.name == name) {
            return Err(usage(format!(
                "`{name}` is not a GM argument of `{}`",
                program.name
            )));
        }
    }
    let mut buffers = Vec::with_capacity(program.gm.len());
    for (i, decl) in program.gm.iter().enumerate() {
        let bytes = decl.bytes().ok_or_else(|| {
            fail(format!(
                "GM argument `{}`: shape {:?} overflows",
                decl.name, decl.shape
            ))
        })?;
        let buf = device
            .allocate(bytes)
            .map_err(|e| fail(format!("GM argument `{}`: {e}", decl.name)))?;
        let given = a.inputs.iter().find(|(n, _)| *n == decl.name);
        let data = match given {
            Some((_, path)) => {
                let arr = npy::read(&read_file(path)?).map_err(|e| fail(format!("{path}: {e}")))?;
                if arr.dtype != decl.dtype || arr.data.len() as u64 != bytes {
                    return Err(fail(format!(
                        "{path}: {}{:?} does not fit GM argument `{}` ({}{:?})",
                        arr.dtype, arr.shape, decl.name, decl.dtype, decl.shape
                    )));
                }
                Some(arr.data)
            }
            None if decl.role != Role::Out => Some(fill(decl, a.seed.wrapping_add(i as u64))),
            None => None,
        };
        if let Some(d) = data {
            device
                .copy_from_host(&d, &buf, 0)
                .map_err(|e| fail(e.to_string()))?;
        }
        buffers.push(buf);
    }
    let mut scalars: Vec<i64> = program.args.iter().map(|d| d.value).collect();
    for (name, v) in &a.scalars {
        let i = program
            .args
            .iter()
            .position(|d| &d.name == name)
            .ok_or_else(|| {
                usage(format!(
                    "`{name}` is not a scalar argument of `{}`",
                    program.name
                ))
            })?;
        scalars[i] = *v;
    }
    let refs: Vec<&DeviceBuffer> = buffers.iter().collect();
    let run = device
        .run(&verified, 0, &refs, &scalars)
        .map_err(|e| fail(e.to_string()))?;
    let cfg = device.config();
    println!(
        "program {} on {}_0",
        program.name,
        program.core.name().to_uppercase()
    );
    print!("{run}");
    println!(
        "device time: {:.3} us at {:.2} GHz",
        run.seconds(cfg.clock_hz) * 1e6,
        cfg.clock_hz / 1e9
    );
    for (decl, buf) in program.gm.iter().zip(&buffers) {
        let bytes = decl.bytes().unwrap_or(0);
        let mut data = vec![0u8; bytes as usize];
        device
            .copy_to_host(buf, 0, &mut data)
            .map_err(|e| fail(e.to_string()))?;
        if decl.role != Role::In {
            println!("{}", summary(decl, &data));
        }
        if let Some((_, path)) = a.outputs.iter().find(|(n, _)| *n == decl.name) {
            let arr = NpyArray {
                dtype: decl.dtype,
                shape: decl.shape.clone(),
                data,
            };
            write_file(path, &npy::write(&arr))?;
        }
    }
    Ok(())
}

/// Deterministic contents for an input nobody gave: a SplitMix64 stream
/// per argument; floats uniform in [-1, 1), integers in [-8, 8), bools 0/1.
fn fill(decl: &GmDecl, seed: u64) -> Vec<u8> {
    let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let n = decl.numel().unwrap_or(0) as usize;
    let vals = if decl.dtype.is_float() {
        Vals::F(
            (0..n)
                .map(|_| (next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0)
                .collect(),
        )
    } else if decl.dtype == DType::Bool {
        Vals::I((0..n).map(|_| (next() & 1) as i64).collect())
    } else {
        Vals::I((0..n).map(|_| (next() % 16) as i64 - 8).collect())
    };
    // The device's own encoder rounds each value to the dtype.
    let mut out = vec![0u8; n * decl.dtype.size_bytes()];
    values::encode_from(&vals, 0, decl.dtype, &mut out);
    out
}

/// `name f32[16,1000]: v0 v1 ... (sum S)` for an output.
fn summary(decl: &GmDecl, data: &[u8]) -> String {
    let mut vals = values::empty(decl.dtype, data.len() / decl.dtype.size_bytes());
    values::decode_into(data, decl.dtype, &mut vals);
    let vals: Vec<f64> = (0..vals.len()).map(|i| vals.get_f(i)).collect();
    let dims: Vec<String> = decl.shape.iter().map(u64::to_string).collect();
    let mut s = format!("{} {}[{}]:", decl.name, decl.dtype, dims.join(","));
    for v in vals.iter().take(6) {
        let _ = write!(s, " {v:.6}");
    }
    if vals.len() > 6 {
        s.push_str(" ...");
    }
    let _ = write!(s, " (sum {:.6})", vals.iter().sum::<f64>());
    s
}
