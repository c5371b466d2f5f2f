//! `tilejit asm`, `tilejit disasm` and `tilejit sim`: the simulated
//! accelerator's tools. Usage errors exit with 2, everything else that
//! fails (unreadable or malformed files, verifier rejections, faults,
//! out-of-memory) with 1; no input makes the tool panic or hang.

use crate::{out, outln};
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
    tilejit_ir::fallible::read_file(path.as_ref())
        .map_err(|e| fail(format!("cannot read {path}: {e}")))
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

/// `tilejit asm`'s arguments.
#[derive(clap::Args)]
pub struct AsmArgs {
    /// The assembly file.
    input: String,
    /// Where to write the bytecode.
    #[arg(short = 'o', long = "output", value_name = "FILE.bin")]
    output: String,
}

/// `tilejit asm FILE.s -o FILE.bin`
pub fn asm_cmd(a: &AsmArgs) -> Result<(), CliError> {
    let (input, output) = (&a.input, &a.output);
    let bytes = read_file(input)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| fail(format!("{input}: not UTF-8 text")))?;
    let program = asm::assemble(text).map_err(|e| fail(format!("{input}: {e}")))?;
    tilejit_runtime::device::verify(program.clone(), &DeviceConfig::default())
        .map_err(|e| fail(format!("{input}: {e}")))?;
    let bin = binary::encode(&program).map_err(|e| fail(format!("{input}: {e}")))?;
    write_file(output, &bin)?;
    eprintln!(
        "{input}: {} instructions, {} bytes -> {output}",
        program.code.len(),
        bin.len()
    );
    Ok(())
}

/// `tilejit disasm`'s arguments.
#[derive(clap::Args)]
pub struct DisasmArgs {
    /// The bytecode file.
    input: String,
}

/// `tilejit disasm FILE.bin`
pub fn disasm_cmd(a: &DisasmArgs) -> Result<(), CliError> {
    let bytes = read_file(&a.input)?;
    let program = binary::decode(&bytes).map_err(|e| fail(format!("{}: {e}", a.input)))?;
    out!("{}", asm::disassemble(&program));
    Ok(())
}

/// `tilejit sim`'s arguments.
#[derive(clap::Args)]
pub struct SimArgs {
    /// The program: assembly text or bytecode.
    file: String,
    /// The core type it must be for.
    #[arg(long, value_name = "aiv|aic", value_parser = parse_core)]
    core: Option<CoreType>,
    /// Read a GM argument from a .npy file (repeatable).
    #[arg(long = "input", value_name = "NAME=FILE.npy", value_parser = parse_pair)]
    inputs: Vec<(String, String)>,
    /// Write a GM argument to a .npy file after the run (repeatable).
    #[arg(long = "output", value_name = "NAME=FILE.npy", value_parser = parse_pair)]
    outputs: Vec<(String, String)>,
    /// Set a scalar argument (repeatable).
    #[arg(long = "arg", value_name = "NAME=VALUE", value_parser = parse_scalar)]
    scalars: Vec<(String, i64)>,
    /// Seed of the inputs not given.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A device configuration (JSON) instead of the default one.
    #[arg(long, value_name = "DEVICE.json")]
    config: Option<String>,
}

fn parse_core(s: &str) -> Result<CoreType, String> {
    CoreType::from_name(s).ok_or_else(|| format!("expected aiv or aic, not `{s}`"))
}

fn parse_pair(s: &str) -> Result<(String, String), String> {
    let (n, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=VALUE, not `{s}`"))?;
    Ok((n.to_string(), v.to_string()))
}

fn parse_scalar(s: &str) -> Result<(String, i64), String> {
    let (n, v) = parse_pair(s)?;
    let v = v
        .parse::<i64>()
        .map_err(|_| format!("{n}={v}: not an integer"))?;
    Ok((n, v))
}

/// `tilejit sim FILE [--core aiv|aic] [--input NAME=FILE.npy]... [--output NAME=FILE.npy]...
/// [--arg NAME=VALUE]... [--seed N] [--config FILE.json]`
pub fn sim_cmd(a: &SimArgs) -> Result<(), CliError> {
    let config = load_config(a.config.as_deref())?;
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
    let buffers = gm_buffers(&device, &program, a)?;
    let scalars = scalar_values(&program, a)?;
    let refs: Vec<&DeviceBuffer> = buffers.iter().collect();
    let run = device
        .run(&verified, 0, &refs, &scalars)
        .map_err(|e| fail(e.to_string()))?;
    let cfg = device.config();
    outln!(
        "program {} on {}_0",
        program.name,
        program.core.name().to_uppercase()
    );
    out!("{run}");
    outln!(
        "device time: {:.3} us at {:.2} GHz",
        run.seconds(cfg.clock_hz) * 1e6,
        cfg.clock_hz / 1e9
    );
    for (decl, buf) in program.gm.iter().zip(&buffers) {
        if decl.role != Role::In {
            outln!("{}", summary(&device, buf, decl)?);
        }
        if let Some((_, path)) = a.outputs.iter().find(|(n, _)| *n == decl.name) {
            write_output(&device, buf, decl, path)?;
        }
    }
    Ok(())
}

/// The device configuration read from `path`, else the default one.
fn load_config(path: Option<&str>) -> Result<DeviceConfig, CliError> {
    match path {
        Some(path) => {
            let text = String::from_utf8(read_file(path)?)
                .map_err(|_| fail(format!("{path}: not UTF-8")))?;
            DeviceConfig::from_json(&text).map_err(|e| fail(format!("{path}: {e}")))
        }
        None => Ok(DeviceConfig::default()),
    }
}

/// Allocates every GM argument of `program`, filled from its `--input`
/// file, else (unless it is an output only) from the seeded generator.
fn gm_buffers(
    device: &SimDevice,
    program: &Program,
    a: &SimArgs,
) -> Result<Vec<DeviceBuffer>, CliError> {
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
        match given {
            Some((_, path)) => {
                let mut arr =
                    npy::read(&read_file(path)?).map_err(|e| fail(format!("{path}: {e}")))?;
                // `<u2` reads as bf16 bits; for a u16 argument it is u16.
                if arr.dtype == DType::BF16 && decl.dtype == DType::U16 {
                    arr.dtype = DType::U16;
                }
                if arr.dtype != decl.dtype || arr.data.len() as u64 != bytes {
                    return Err(fail(format!(
                        "{path}: {}{:?} does not fit GM argument `{}` ({}{:?})",
                        arr.dtype, arr.shape, decl.name, decl.dtype, decl.shape
                    )));
                }
                device
                    .copy_from_host(&arr.data, &buf, 0)
                    .map_err(|e| fail(format!("GM argument `{}`: {e}", decl.name)))?;
            }
            None if decl.role != Role::Out => {
                fill(device, &buf, decl, a.seed.wrapping_add(i as u64))?
            }
            None => {}
        }
        buffers.push(buf);
    }
    Ok(buffers)
}

/// The scalar arguments: each declared default, overridden by `--arg`.
fn scalar_values(program: &Program, a: &SimArgs) -> Result<Vec<i64>, CliError> {
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
    Ok(scalars)
}

/// Copies GM argument `decl` back from the device into the .npy file `path`.
fn write_output(
    device: &SimDevice,
    buf: &DeviceBuffer,
    decl: &GmDecl,
    path: &str,
) -> Result<(), CliError> {
    let bytes = decl.bytes().unwrap_or(0);
    let mut data = Vec::new();
    data.try_reserve_exact(bytes as usize).map_err(|_| {
        fail(format!(
            "GM argument `{}`: out of host memory allocating {bytes} bytes",
            decl.name
        ))
    })?;
    data.resize(bytes as usize, 0);
    device
        .copy_to_host(buf, 0, &mut data)
        .map_err(|e| fail(e.to_string()))?;
    let arr = NpyArray {
        dtype: decl.dtype,
        shape: decl.shape.clone(),
        data,
    };
    write_file(path, &npy::write(&arr))
}

/// Elements generated, copied or summed at a time, so the host memory a
/// GM argument takes beyond GM's own pages stays small however big it is.
const CHUNK_ELEMS: usize = 1 << 16;

/// Writes deterministic contents into an input nobody gave: a SplitMix64
/// stream per argument; floats uniform in [-1, 1), integers in [-8, 8),
/// bools 0/1.
fn fill(device: &SimDevice, buf: &DeviceBuffer, decl: &GmDecl, seed: u64) -> Result<(), CliError> {
    let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let n = decl.numel().unwrap_or(0) as usize;
    let size = decl.dtype.size_bytes();
    let mut bytes = vec![0u8; CHUNK_ELEMS * size];
    let mut done = 0;
    while done < n {
        let k = (n - done).min(CHUNK_ELEMS);
        let vals = if decl.dtype.is_float() {
            Vals::F(
                (0..k)
                    .map(|_| (next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0)
                    .collect(),
            )
        } else if decl.dtype == DType::Bool {
            Vals::I((0..k).map(|_| (next() & 1) as i64).collect())
        } else {
            Vals::I((0..k).map(|_| (next() % 16) as i64 - 8).collect())
        };
        // The device's own encoder rounds each value to the dtype.
        let chunk = &mut bytes[..k * size];
        values::encode_from(&vals, 0, decl.dtype, chunk);
        device
            .copy_from_host(chunk, buf, (done * size) as u64)
            .map_err(|e| fail(format!("GM argument `{}`: {e}", decl.name)))?;
        done += k;
    }
    Ok(())
}

/// `name f32[16,1000]: v0 v1 ... (sum S)` for an output, read from GM a
/// chunk at a time.
fn summary(device: &SimDevice, buf: &DeviceBuffer, decl: &GmDecl) -> Result<String, CliError> {
    let n = decl.numel().unwrap_or(0) as usize;
    let size = decl.dtype.size_bytes();
    let mut bytes = vec![0u8; CHUNK_ELEMS * size];
    // From -0.0, as `Iterator::sum` starts: the same bits for any values.
    let (mut first, mut sum) = (Vec::new(), -0.0f64);
    let mut done = 0;
    while done < n {
        let k = (n - done).min(CHUNK_ELEMS);
        let chunk = &mut bytes[..k * size];
        device
            .copy_to_host(buf, (done * size) as u64, chunk)
            .map_err(|e| fail(e.to_string()))?;
        let mut vals = values::empty(decl.dtype, k);
        values::decode_into(chunk, decl.dtype, &mut vals);
        for i in 0..vals.len() {
            let v = vals.get_f(i);
            if first.len() < 6 {
                first.push(v);
            }
            sum += v;
        }
        done += k;
    }
    let dims: Vec<String> = decl.shape.iter().map(u64::to_string).collect();
    let mut s = format!("{} {}[{}]:", decl.name, decl.dtype, dims.join(","));
    for v in &first {
        let _ = write!(s, " {v:.6}");
    }
    if n > 6 {
        s.push_str(" ...");
    }
    let _ = write!(s, " (sum {sum:.6})");
    Ok(s)
}
