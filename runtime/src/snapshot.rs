//! Snapshots: every compiled program of one jit function in one file, so
//! a later process serves those signatures with no trace and no compile
//! (`JitFunction::save`, `JitFunction::load`; `tilejit snapshot info`
//! prints the manifest).
//!
//! A file is, little endian:
//!
//! ```text
//! "TJSNAP\0\0" u32:format-version
//! u64:len manifest       UTF-8 text (Manifest's Display), read first
//! u64:len body           the programs (below)
//! [u8; 32]               SHA-256 of every byte before it
//! ```
//!
//! The body holds per signature: the signature (`Signature::encode`), the
//! program's name, its traced and optimised graphs and its kernel program
//! as text, its constants as raw bits, each kernel's host code image
//! (`CodeImage`, with the content key it was compiled under) and, when the
//! program's Sim form compiled, each kernel's device bytecode (the disk
//! cache's payloads: `kernel_cache::{host, sim}`). `save` compiles the Sim
//! form first, so a snapshot is complete unless the device cannot run a
//! kernel (then Sim compiles on first use, as without a snapshot).
//!
//! Loading checks first the container (magic, version, length,
//! checksum) and the manifest (it parses, names this function, by module
//! path, name and body digest, and lists the body's signatures).
//!
//! Trust. A checksum proves a file was not damaged by accident, not who
//! wrote it, and machine code cannot be checked: a crafted snapshot's
//! code could do anything. So there are two loads:
//!
//! - [`load`] (safe) uses only the stored graphs: each program's traced
//!   graph is verified and compiled here, its kernels found in the kernel
//!   cache or this machine's own disk cache (which only this user's
//!   processes write) or compiled. No stored code or bytecode is used.
//! - [`load_code`] (`unsafe`) also links the stored host machine code and
//!   Sim bytecode, when the file was made by this build (tilejit build id,
//!   Cranelift version) for this machine's ISA flags: each kernel through
//!   the kernel cache (`snapshot_loads` counts them; a kernel whose key
//!   differs here is compiled instead); Sim bytecode is decoded and
//!   verified again, as from the disk cache, and skipped when made for
//!   another device config. If it was not, every program is recompiled
//!   from its traced graph and the reason is returned and logged under
//!   `TILEJIT_LOG=cache`. Its caller vouches that the file is this build's
//!   own, unchanged output.
//!
//! Neither load traces. A damaged or foreign file is a
//! [`RuntimeError::Snapshot`], never a panic.

use crate::error::{RuntimeError, SnapshotProblem};
use crate::host::HostProgram;
use crate::kernel_cache::key::BUILD_ID;
use crate::kernel_cache::{Backend, HostBackend, SimBackend, StoredCode};
use crate::persist::{publish, Reader, Writer};
use crate::signature::{decode_type, encode_type, Signature};
use crate::sim::SimProgram;
use crate::Program;
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tilejit_ir::kernel::BufKind;
use tilejit_ir::{Array, Buffer, DType, Lit};

/// File magic.
const MAGIC: &[u8; 8] = b"TJSNAP\0\0";
/// Bumped when the layout or a payload encoding changes (2: the manifest
/// names the function's module path and body digest).
pub const FORMAT_VERSION: u32 = 2;
/// The manifest's first line.
const TITLE: &str = "tilejit snapshot";

/// What a snapshot says about itself, checked before any code is linked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The layout version ([`FORMAT_VERSION`] when written by this build).
    pub format: u32,
    /// tilejit's version and build id (its code generators' digest).
    pub tilejit: String,
    /// The Cranelift version.
    pub cranelift: String,
    /// The architecture and CPU features the host code was compiled for.
    pub cpu: String,
    /// A digest of the simulated device's config the bytecode targets.
    pub device_config: String,
    /// The jit function: its module path and name (`my_crate::model::f`).
    pub function: String,
    /// A digest of the function's body (its tokens, as `#[jit]` saw them),
    /// so a snapshot of another function of the same name is refused.
    pub body: String,
    /// One line per signature.
    pub entries: Vec<ManifestEntry>,
}

/// One signature in a [`Manifest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestEntry {
    /// The signature, as `Signature`'s `Display` prints it.
    pub signature: String,
    /// Kernels of its program.
    pub kernels: usize,
    /// Of those, how many have host code stored.
    pub host_code: usize,
    /// Whether its device bytecode is stored.
    pub sim: bool,
}

/// The ISA host code depends on, as text: the triple and every
/// Cranelift ISA flag (`tilejit_codegen::host::isa_text`).
fn cpu_text() -> String {
    tilejit_codegen::host::isa_text().to_string()
}

/// The first 16 hex digits of the default device config's SHA-256.
fn device_config_digest() -> String {
    let json = tilejit_device::DeviceConfig::default().to_json();
    Sha256::digest(json.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Manifest {
    /// This build's and machine's values, for `function` with body
    /// digest `body`, no entries.
    fn here(function: &str, body: &str) -> Manifest {
        Manifest {
            format: FORMAT_VERSION,
            tilejit: BUILD_ID.to_string(),
            cranelift: tilejit_codegen::CRANELIFT_VERSION.to_string(),
            cpu: cpu_text(),
            device_config: device_config_digest(),
            function: function.to_string(),
            body: body.to_string(),
            entries: Vec::new(),
        }
    }

    /// Why this snapshot's host code cannot be linked here (another build,
    /// another Cranelift, other CPU features), or `None` if it can.
    pub fn host_mismatch(&self) -> Option<String> {
        let here = Manifest::here(&self.function, &self.body);
        let mut why = Vec::new();
        if self.tilejit != here.tilejit {
            why.push(format!(
                "it was made by tilejit {} and this is {}",
                self.tilejit, here.tilejit
            ));
        }
        if self.cranelift != here.cranelift {
            why.push(format!(
                "it was made with Cranelift {} and this is {}",
                self.cranelift, here.cranelift
            ));
        }
        if self.cpu != here.cpu {
            why.push(format!(
                "it was made for CPU `{}` and this machine is `{}`",
                self.cpu, here.cpu
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// Why its device bytecode cannot be used here (another device config),
    /// or `None`.
    pub fn sim_mismatch(&self) -> Option<String> {
        let here = device_config_digest();
        (self.device_config != here).then(|| {
            format!(
                "its device bytecode targets device config {} and this one is {here}",
                self.device_config
            )
        })
    }

    /// Parses the text [`Manifest`]'s `Display` writes.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let mut lines = text.lines();
        if lines.next() != Some(TITLE) {
            return Err(format!("the manifest does not start with `{TITLE}`"));
        }
        let mut field = |name: &str| -> Result<String, String> {
            let line = lines
                .next()
                .ok_or_else(|| format!("the manifest ends before `{name}`"))?;
            line.strip_prefix(name)
                .and_then(|r| r.strip_prefix(": "))
                .map(str::to_string)
                .ok_or_else(|| format!("expected `{name}: ...` in the manifest, found `{line}`"))
        };
        let number = |name: &str, v: String| {
            v.parse::<usize>()
                .map_err(|_| format!("bad `{name}` in the manifest: `{v}`"))
        };
        let format = number("format", field("format")?)?;
        let tilejit = field("tilejit")?;
        let cranelift = field("cranelift")?;
        let cpu = field("cpu")?;
        let device_config = field("device-config")?;
        let function = field("function")?;
        let body = field("body")?;
        let n = number("signatures", field("signatures")?)?;
        let mut entries = Vec::new();
        for line in lines {
            entries.push(parse_entry(line)?);
        }
        if entries.len() != n {
            return Err(format!(
                "the manifest announces {n} signatures and lists {}",
                entries.len()
            ));
        }
        Ok(Manifest {
            format: u32::try_from(format).map_err(|_| "bad format number")?,
            tilejit,
            cranelift,
            cpu,
            device_config,
            function,
            body,
            entries,
        })
    }
}

/// `  kernels=2 host-code=2 sim=yes (f32[8], f32 param)`.
fn parse_entry(line: &str) -> Result<ManifestEntry, String> {
    let bad = || format!("bad signature line in the manifest: `{line}`");
    let mut parts = line.trim_start().splitn(4, ' ');
    let mut attr = |name: &str| {
        parts
            .next()
            .and_then(|p| p.strip_prefix(name))
            .and_then(|p| p.strip_prefix('='))
            .map(str::to_string)
            .ok_or_else(bad)
    };
    let kernels = attr("kernels")?.parse().map_err(|_| bad())?;
    let host_code = attr("host-code")?.parse().map_err(|_| bad())?;
    let sim = match attr("sim")?.as_str() {
        "yes" => true,
        "no" => false,
        _ => return Err(bad()),
    };
    let signature = parts.next().ok_or_else(bad)?.to_string();
    Ok(ManifestEntry {
        signature,
        kernels,
        host_code,
        sim,
    })
}

impl fmt::Display for Manifest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{TITLE}")?;
        writeln!(f, "format: {}", self.format)?;
        writeln!(f, "tilejit: {}", self.tilejit)?;
        writeln!(f, "cranelift: {}", self.cranelift)?;
        writeln!(f, "cpu: {}", self.cpu)?;
        writeln!(f, "device-config: {}", self.device_config)?;
        writeln!(f, "function: {}", self.function)?;
        writeln!(f, "body: {}", self.body)?;
        writeln!(f, "signatures: {}", self.entries.len())?;
        for e in &self.entries {
            writeln!(
                f,
                "  kernels={} host-code={} sim={} {}",
                e.kernels,
                e.host_code,
                if e.sim { "yes" } else { "no" },
                e.signature
            )?;
        }
        Ok(())
    }
}

/// What [`load`] built.
#[derive(Debug)]
pub struct Loaded {
    /// One program per signature, in the file's order.
    pub programs: Vec<(Signature, Program)>,
    /// Why (some) code was not linked but compiled again from the
    /// snapshot's IR, if it was.
    pub recompiled: Option<String>,
}

/// A [`RuntimeError::Snapshot`] for `path`.
fn fail(path: &Path, problem: SnapshotProblem) -> RuntimeError {
    RuntimeError::Snapshot {
        path: path.display().to_string(),
        problem,
    }
}

/// One signature's stored program, as read.
struct Stored<'a> {
    signature: Signature,
    name: &'a str,
    traced: &'a str,
    optimized: &'a str,
    kernels: &'a str,
    size_params: Vec<Lit>,
    constants: Vec<Array>,
    host: Vec<Option<StoredCode<'a>>>,
    sim: Option<Vec<Option<StoredCode<'a>>>>,
}

/// A stored kernel's key and payload, if any.
fn write_code(w: &mut Writer, key: &str, payload: Option<Vec<u8>>) {
    w.str(key);
    match payload {
        Some(p) => {
            w.u8(1);
            w.bytes(&p);
        }
        None => w.u8(0),
    }
}

fn read_code<'a>(r: &mut Reader<'a>) -> Result<Option<StoredCode<'a>>, String> {
    let key = r.str()?;
    if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("bad kernel key `{key}`"));
    }
    Ok(match r.u8()? {
        0 => None,
        1 => Some(StoredCode {
            key,
            bytes: r.bytes()?,
        }),
        b => return Err(format!("bad code flag {b}")),
    })
}

/// Bytes per element of a constant in the file.
/// A dynamic program's size param: a tag, then the value's 8 bytes.
fn write_lit(w: &mut Writer, l: Lit) {
    let (tag, bits) = match l {
        Lit::Float(f) => (0, f.to_bits()),
        Lit::Int(i) => (1, i as u64),
        Lit::Bool(b) => (2, b as u64),
    };
    w.u8(tag);
    w.u64(bits);
}

fn read_lit(r: &mut Reader<'_>) -> Result<Lit, String> {
    let tag = r.u8()?;
    let bits = r.u64()?;
    Ok(match tag {
        0 => Lit::Float(f64::from_bits(bits)),
        1 => Lit::Int(bits as i64),
        2 if bits <= 1 => Lit::Bool(bits == 1),
        _ => return Err(format!("bad size param tag {tag}")),
    })
}

fn elem_bytes(d: DType) -> usize {
    d.size_bytes()
}

/// A constant: its type, then every element's bits.
fn write_constant(w: &mut Writer, a: &Array) {
    encode_type(w, a.ty());
    match a.buffer() {
        Buffer::F32(v) => v.iter().for_each(|x| w.u32(x.to_bits())),
        Buffer::F64(v) => v.iter().for_each(|x| w.u64(x.to_bits())),
        Buffer::F16(v) => v.iter().for_each(|x| w.u16(x.to_bits())),
        Buffer::BF16(v) => v.iter().for_each(|x| w.u16(x.to_bits())),
        Buffer::I32(v) => v.iter().for_each(|x| w.u32(*x as u32)),
        Buffer::I64(v) => v.iter().for_each(|x| w.u64(*x as u64)),
        Buffer::Bool(v) => v.iter().for_each(|x| w.u8(*x as u8)),
        Buffer::U8(v) => v.iter().for_each(|x| w.u8(*x)),
        Buffer::I8(v) => v.iter().for_each(|x| w.u8(*x as u8)),
        Buffer::I16(v) => v.iter().for_each(|x| w.u16(*x as u16)),
        Buffer::U16(v) => v.iter().for_each(|x| w.u16(*x)),
        Buffer::U32(v) => v.iter().for_each(|x| w.u32(*x)),
        Buffer::U64(v) => v.iter().for_each(|x| w.u64(*x)),
    }
}

/// `n` elements read by `f`.
fn elems<T>(
    n: usize,
    e: &mut Reader<'_>,
    f: impl Fn(&mut Reader<'_>) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    (0..n).map(|_| f(e)).collect()
}

fn read_constant(r: &mut Reader<'_>) -> Result<Array, String> {
    let ty = decode_type(r)?;
    let n = ty
        .shape
        .checked_numel()
        .ok_or("a constant's size overflows")?;
    let bytes = n
        .checked_mul(elem_bytes(ty.dtype))
        .ok_or("a constant's size overflows")?;
    // Taken first: a bad length cannot make us allocate past the file.
    let data = r.take(bytes)?;
    let mut e = Reader::new(data);
    let e = &mut e;
    let buffer = match ty.dtype {
        DType::F32 => Buffer::F32(elems(n, e, |e| Ok(f32::from_bits(e.u32()?)))?),
        DType::F64 => Buffer::F64(elems(n, e, |e| Ok(f64::from_bits(e.u64()?)))?),
        DType::F16 => Buffer::F16(elems(n, e, |e| Ok(half::f16::from_bits(e.u16()?)))?),
        DType::BF16 => Buffer::BF16(elems(n, e, |e| Ok(half::bf16::from_bits(e.u16()?)))?),
        DType::I32 => Buffer::I32(elems(n, e, |e| Ok(e.u32()? as i32))?),
        DType::I64 => Buffer::I64(elems(n, e, |e| Ok(e.u64()? as i64))?),
        DType::Bool => Buffer::Bool(elems(n, e, |e| match e.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("bad bool byte {b}")),
        })?),
        DType::U8 => Buffer::U8(elems(n, e, |e| e.u8())?),
        DType::I8 => Buffer::I8(elems(n, e, |e| Ok(e.u8()? as i8))?),
        DType::I16 => Buffer::I16(elems(n, e, |e| Ok(e.u16()? as i16))?),
        DType::U16 => Buffer::U16(elems(n, e, |e| e.u16())?),
        DType::U32 => Buffer::U32(elems(n, e, |e| e.u32())?),
        DType::U64 => Buffer::U64(elems(n, e, |e| e.u64())?),
    };
    Array::new(ty.shape, buffer).map_err(|e| e.to_string())
}

/// Writes `programs` of jit function `function` (module path and name)
/// whose body digest is `body` to `path` (replaced atomically). Compiles
/// each program's Sim form first if it has none yet; a program the device
/// cannot run is saved without it.
pub fn save(
    path: &Path,
    function: &str,
    body: &str,
    programs: &[(Signature, Arc<Program>)],
) -> Result<(), RuntimeError> {
    let mut manifest = Manifest::here(function, body);
    let mut w = Writer::default();
    w.count(programs.len());
    for (sig, p) in programs {
        let sim = p.sim().ok();
        let host = p.host();
        w.bytes(&sig.encode());
        w.str(p.name());
        w.str(&p.traced().to_string());
        w.str(&p.optimized().to_string());
        w.str(&host.kernels().to_string());
        w.count(p.size_params().len());
        for l in p.size_params() {
            write_lit(&mut w, *l);
        }
        w.count(host.constants().len());
        for c in host.constants() {
            write_constant(&mut w, c);
        }
        w.count(host.code().len());
        let mut host_code = 0;
        for c in host.code() {
            let payload = HostBackend::encode(&c.code);
            host_code += usize::from(payload.is_some());
            write_code(&mut w, &c.key, payload);
        }
        match &sim {
            Some(s) => {
                w.u8(1);
                w.count(s.cached().len());
                for c in s.cached() {
                    write_code(&mut w, &c.key, SimBackend::encode(&c.code));
                }
            }
            None => w.u8(0),
        }
        manifest.entries.push(ManifestEntry {
            signature: sig.to_string(),
            kernels: host.code().len(),
            host_code,
            sim: sim.is_some(),
        });
    }
    let bytes = container(&manifest.to_string(), &w.out);
    publish(path, &bytes).map_err(|e| {
        fail(
            path,
            SnapshotProblem::Io {
                action: "write",
                message: e.to_string(),
            },
        )
    })
}

/// A whole file: header, manifest, body, checksum.
fn container(manifest: &str, body: &[u8]) -> Vec<u8> {
    let mut w = Writer::default();
    w.out.extend_from_slice(MAGIC);
    w.u32(FORMAT_VERSION);
    w.str(manifest);
    w.bytes(body);
    let sum = Sha256::digest(&w.out);
    w.out.extend_from_slice(&sum);
    w.out
}

/// The manifest text and body of a file's bytes, or what is wrong.
fn open(bytes: &[u8]) -> Result<(&str, &[u8]), SnapshotProblem> {
    let corrupt = |m: String| SnapshotProblem::Corrupt(m);
    if bytes.is_empty() {
        return Err(SnapshotProblem::Foreign("the file is empty".into()));
    }
    let head = &bytes[..bytes.len().min(MAGIC.len())];
    if head != &MAGIC[..head.len()] {
        return Err(SnapshotProblem::Foreign(
            "it does not start with the `TJSNAP` magic".into(),
        ));
    }
    if bytes.len() < MAGIC.len() + 4 + 8 + 8 + 32 {
        return Err(corrupt(format!("truncated to {} bytes", bytes.len())));
    }
    let mut r = Reader::new(bytes);
    r.pos = MAGIC.len();
    let version = r.u32().map_err(corrupt)?;
    if version != FORMAT_VERSION {
        return Err(SnapshotProblem::Version {
            found: version,
            expected: FORMAT_VERSION,
        });
    }
    let (content, sum) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(content).as_slice() != sum {
        return Err(corrupt(
            "checksum mismatch (the file is truncated or damaged)".into(),
        ));
    }
    let mut r = Reader::new(content);
    r.pos = MAGIC.len() + 4;
    let manifest = r.str().map_err(corrupt)?;
    let body = r.bytes().map_err(corrupt)?;
    if !r.done() {
        return Err(corrupt("trailing bytes after the body".into()));
    }
    Ok((manifest, body))
}

/// Reads a file, mapping an I/O failure to its problem.
fn read(path: &Path) -> Result<Vec<u8>, RuntimeError> {
    tilejit_ir::fallible::read_file(path).map_err(|e| {
        fail(
            path,
            SnapshotProblem::Io {
                action: "read",
                message: e.to_string(),
            },
        )
    })
}

/// The manifest of the snapshot at `path` (the whole file checked).
pub fn read_manifest(path: &Path) -> Result<Manifest, RuntimeError> {
    let bytes = read(path)?;
    let (text, _) = open(&bytes).map_err(|p| fail(path, p))?;
    Manifest::parse(text).map_err(|m| fail(path, SnapshotProblem::Corrupt(m)))
}

/// Parses the body's entries and checks them against the manifest.
fn parse_body<'a>(body: &'a [u8], manifest: &Manifest) -> Result<Vec<Stored<'a>>, String> {
    let mut r = Reader::new(body);
    let n = r.count(8)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut sr = Reader::new(r.bytes()?);
        let signature = Signature::decode(&mut sr)?;
        if !sr.done() {
            return Err("trailing bytes after a signature".into());
        }
        let name = r.str()?;
        let traced = r.str()?;
        let optimized = r.str()?;
        let kernels = r.str()?;
        let np = r.count(9)?;
        let size_params = (0..np)
            .map(|_| read_lit(&mut r))
            .collect::<Result<_, _>>()?;
        let nc = r.count(2)?;
        let constants = (0..nc)
            .map(|_| read_constant(&mut r))
            .collect::<Result<_, _>>()?;
        let nk = r.count(9)?;
        let host = (0..nk)
            .map(|_| read_code(&mut r))
            .collect::<Result<_, _>>()?;
        let sim = match r.u8()? {
            0 => None,
            1 => {
                let ns = r.count(9)?;
                Some(
                    (0..ns)
                        .map(|_| read_code(&mut r))
                        .collect::<Result<_, _>>()?,
                )
            }
            b => return Err(format!("bad sim flag {b}")),
        };
        out.push(Stored {
            signature,
            name,
            traced,
            optimized,
            kernels,
            size_params,
            constants,
            host,
            sim,
        });
    }
    if !r.done() {
        return Err("trailing bytes after the last program".into());
    }
    let listed: Vec<&str> = manifest
        .entries
        .iter()
        .map(|e| e.signature.as_str())
        .collect();
    let held: Vec<String> = out.iter().map(|s| s.signature.to_string()).collect();
    if listed != held {
        return Err(format!(
            "the manifest lists signatures {listed:?} but the file holds {held:?}"
        ));
    }
    Ok(out)
}

/// Proof that a caller took on [`load_code`]'s contract: made only
/// there (its field is private to this module), and asked for by
/// everything that links a snapshot's code.
pub(crate) struct CodeVouch(());

/// The programs of the snapshot at `path`, which must have been saved
/// from jit function `function` (module path and name) with body digest
/// `body`, each of whose signatures must satisfy `fits` (its parameters).
/// Safe: uses only the stored graphs. Each program is compiled here from
/// its traced graph (verified first), its kernels coming from the kernel
/// cache, this machine's disk cache or a compile; the stored machine code
/// and bytecode are never used. [`Loaded::recompiled`] is `None`.
pub fn load(
    path: &Path,
    function: &str,
    body: &str,
    fits: &dyn Fn(&Signature) -> bool,
) -> Result<Loaded, RuntimeError> {
    load_with(path, function, body, fits, None)
}

/// [`load`], but links the stored host machine code (and Sim bytecode,
/// verified again) when the file was made by this build for this CPU's
/// ISA flags, so not even the kernels compile; else recompiles from the
/// traced graphs and says why in [`Loaded::recompiled`].
///
/// # Safety
///
/// The machine code runs as it is, and no check can tell what it does:
/// the caller must know the file is the unchanged output of [`save`] by a
/// process it trusts (this build, this machine or one like it), for
/// instance because it wrote the file itself somewhere no one else can
/// write. The checksum only proves the bytes were not damaged by
/// accident: a crafted or altered file, resealed, may read or write any
/// memory, crash, hang or compute wrong results.
#[allow(unsafe_code)] // declares the contract; nothing unsafe runs here
pub unsafe fn load_code(
    path: &Path,
    function: &str,
    body: &str,
    fits: &dyn Fn(&Signature) -> bool,
) -> Result<Loaded, RuntimeError> {
    load_with(path, function, body, fits, Some(CodeVouch(())))
}

/// [`load`] or, with `vouch`, [`load_code`].
fn load_with(
    path: &Path,
    function: &str,
    body: &str,
    fits: &dyn Fn(&Signature) -> bool,
    vouch: Option<CodeVouch>,
) -> Result<Loaded, RuntimeError> {
    let start = Instant::now();
    let corrupt = |m: String| fail(path, SnapshotProblem::Corrupt(m));
    let bytes = read(path)?;
    let (text, stored_body) = open(&bytes).map_err(|p| fail(path, p))?;
    let manifest = Manifest::parse(text).map_err(corrupt)?;
    if manifest.format != FORMAT_VERSION {
        return Err(corrupt(format!(
            "the manifest says format {} but the header {FORMAT_VERSION}",
            manifest.format
        )));
    }
    if manifest.function != function || manifest.body != body {
        return Err(fail(
            path,
            SnapshotProblem::OtherFunction {
                saved: format!("`{}` (body {})", manifest.function, manifest.body),
                loading: format!("`{function}` (body {body})"),
            },
        ));
    }
    let stored = parse_body(stored_body, &manifest).map_err(corrupt)?;
    if let Some(s) = stored.iter().find(|s| !fits(&s.signature)) {
        return Err(fail(
            path,
            SnapshotProblem::Parameters {
                function: function.to_string(),
                signature: s.signature.to_string(),
            },
        ));
    }
    let Some(vouch) = vouch else {
        let mut programs = Vec::with_capacity(stored.len());
        for s in stored {
            let traced = tilejit_ir::text::parse(s.traced)
                .map_err(|e| corrupt(format!("the traced graph of {}: {e}", s.signature)))?;
            let p = Program::compile_named(traced, s.name)?.with_size_params(s.size_params);
            programs.push((s.signature, p));
        }
        return Ok(Loaded {
            programs,
            recompiled: None,
        });
    };
    let host_mismatch = manifest.host_mismatch();
    let sim_mismatch = manifest.sim_mismatch();
    let recompiled = match (&host_mismatch, &sim_mismatch) {
        (Some(h), _) => Some(format!("{h}: every program was recompiled from its IR")),
        (None, Some(s)) => Some(format!("{s}: Sim code compiles on first use")),
        (None, None) => None,
    };
    if let Some(why) = &recompiled {
        if crate::config::config().log.cache {
            eprintln!("[tilejit] snapshot {}: {why}", path.display());
        }
    }
    let mut programs = Vec::with_capacity(stored.len());
    for s in stored {
        let parse = |what: &str, text: &str| {
            tilejit_ir::text::parse(text)
                .map_err(|e| corrupt(format!("the {what} graph of {}: {e}", s.signature)))
        };
        let traced = parse("traced", s.traced)?;
        if host_mismatch.is_some() {
            let p = Program::compile_named(traced, s.name)?.with_size_params(s.size_params);
            programs.push((s.signature, p));
            continue;
        }
        let optimized = parse("optimised", s.optimized)?;
        let kernels = tilejit_ir::kernel::parse_program(s.kernels)
            .and_then(|k| tilejit_ir::kernel::verify_program(&k).map(|()| k))
            .map_err(|e| corrupt(format!("the kernels of {}: {e}", s.signature)))?;
        let constants_fit = kernels.buffers.iter().all(|b| match b.kind {
            BufKind::Constant(i) => s.constants.get(i as usize).is_some_and(|c| c.ty() == b.ty),
            _ => true,
        });
        if kernels.kernels.len() != s.host.len()
            || s.sim.as_ref().is_some_and(|v| v.len() != s.host.len())
            || !constants_fit
        {
            return Err(corrupt(format!(
                "the code or constants of {} do not match its kernels",
                s.signature
            )));
        }
        // A Sim form that fails to build fails again on first use, as
        // without a snapshot.
        let sim = match (&s.sim, &sim_mismatch) {
            (Some(code), None) => SimProgram::from_snapshot(
                kernels.clone(),
                s.constants.clone(),
                s.name,
                code,
                &vouch,
            )
            .ok(),
            _ => None,
        };
        let host = HostProgram::from_snapshot(kernels, s.constants, s.name, &s.host, &vouch)?;
        let program = Program::from_parts(s.name, traced, optimized, host, sim, start.elapsed())
            .with_size_params(s.size_params);
        programs.push((s.signature, program));
    }
    Ok(Loaded {
        programs,
        recompiled,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests assert by unwrapping
mod tests {
    use super::*;

    #[test]
    fn a_manifest_prints_and_parses_back() {
        let mut m = Manifest::here("m::f", "0123456789abcdef");
        m.entries.push(ManifestEntry {
            signature: "(f32[8,8], f32 param, int 3)".into(),
            kernels: 2,
            host_code: 1,
            sim: true,
        });
        assert_eq!(Manifest::parse(&m.to_string()).unwrap(), m);
        assert!(m.host_mismatch().is_none() && m.sim_mismatch().is_none());
        let mut other = m.clone();
        other.cpu = "riscv64".into();
        assert!(other.host_mismatch().unwrap().contains("riscv64"));
        let text = m.to_string();
        for n in 0..text.lines().count() {
            let cut: Vec<&str> = text.lines().take(n).collect();
            assert!(Manifest::parse(&cut.join("\n")).is_err(), "{n} lines");
        }
    }

    #[test]
    fn constants_keep_their_bits() {
        let nan = f32::from_bits(0x7fc0_1234);
        let arrays = [
            Array::from_vec(vec![1.5f32, -0.0, nan], &[3]).unwrap(),
            Array::from_vec(vec![1e300f64, -2.0], &[2, 1]).unwrap(),
            Array::from_vec(vec![i64::MIN, 7], &[2]).unwrap(),
            Array::from_vec(vec![true, false], &[1, 2]).unwrap(),
        ];
        for a in arrays {
            let mut w = Writer::default();
            write_constant(&mut w, &a);
            let mut r = Reader::new(&w.out);
            let b = read_constant(&mut r).unwrap();
            assert!(r.done());
            assert_eq!(a.ty(), b.ty());
            let bits = |x: &Array| {
                let mut w = Writer::default();
                write_constant(&mut w, x);
                w.out
            };
            assert_eq!(bits(&a), bits(&b));
            for n in 0..w.out.len() {
                assert!(read_constant(&mut Reader::new(&w.out[..n])).is_err());
            }
        }
    }

    /// Every one-byte change of a real snapshot's body, checksum fixed
    /// up (a crafted file), parses or fails with a message, never panics:
    /// the body, its signatures, constants and texts are untrusted input.
    #[test]
    fn crafted_bodies_never_panic_the_parser() {
        let g = tilejit_ir::text::parse(
            "graph {\n  %0 = input 0 : f32[4,3]\n  %1 = param 0 : f32[]\n  \
             %2 = const [1.0, 2.0, 3.0] : f32[3]\n  %3 = broadcast %2 : f32[4,3]\n  \
             %4 = broadcast %1 : f32[4,3]\n  %5 = mul %0, %4 : f32[4,3]\n  \
             %6 = add %5, %3 : f32[4,3]\n  %7 = reduce_sum %6 axes=[1] : f32[4,1]\n  \
             return %7\n}",
        )
        .unwrap();
        let p = Arc::new(Program::compile_named(g, "crafted").unwrap());
        let sig = Signature {
            args: vec![
                crate::ArgSig::Tensor(p.traced().input_types()[0]),
                crate::ArgSig::Float(DType::F32),
            ],
        };
        let path = std::env::temp_dir().join(format!(
            "tilejit-crafted-{}-{:?}.tjsnap",
            std::process::id(),
            std::thread::current().id()
        ));
        save(&path, "crafted", "00", &[(sig, p)]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let (text, body) = open(&bytes).unwrap();
        let manifest = Manifest::parse(text).unwrap();
        let parse_all = |body: &[u8]| -> Result<(), String> {
            for s in parse_body(body, &manifest)? {
                tilejit_ir::text::parse(s.traced).map_err(|e| e.to_string())?;
                tilejit_ir::text::parse(s.optimized).map_err(|e| e.to_string())?;
                tilejit_ir::kernel::parse_program(s.kernels).map_err(|e| e.to_string())?;
            }
            Ok(())
        };
        parse_all(body).unwrap();
        for i in 0..body.len() {
            for bit in [0x01, 0x80] {
                let mut b = body.to_vec();
                b[i] ^= bit;
                let _ = parse_all(&b);
            }
        }
        for n in 0..body.len() {
            assert!(parse_all(&body[..n]).is_err(), "prefix {n}");
        }
    }

    #[test]
    fn damaged_containers_name_their_problem() {
        let good = container("m", b"body");
        assert_eq!(open(&good).unwrap(), ("m", &b"body"[..]));
        let problem = |b: &[u8]| open(b).unwrap_err().to_string();
        assert!(problem(b"").contains("empty"));
        assert!(problem(b"PK\x03\x04 a zip file").contains("magic"));
        assert!(problem(&good[..10]).contains("truncated"));
        assert!(problem(&good[..good.len() - 1]).contains("checksum"));
        let mut flipped = good.clone();
        flipped[14] ^= 1;
        assert!(problem(&flipped).contains("checksum"));
        let mut version = good.clone();
        version[8] = 9;
        assert!(problem(&version).contains("version 9"));
    }
}
