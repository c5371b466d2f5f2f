//! Sim entries: device bytecode. Device code is size-generic like host
//! code (sizes and strides are scalar arguments of its tasks), so the key
//! is the kernel's structure ([`Kernel::device_structure_text`]), its buffers'
//! dtypes, the device config and the plan class
//! ([`tilejit_codegen::device::plan_class`]: the few choices the
//! generator still makes from the sizes, such as whole rows in UB or
//! column chunks). Every shape of one structure and class shares one
//! entry.
//!
//! On disk an entry is its core functions' bytecode (`isa::binary`) plus
//! the launch metadata `DeviceKernel` carries; loading decodes and runs
//! the verifier again, so a file can never run an unverified program.

use super::key::{ContentKey, KeyParts};
use super::{
    Backend, CachedSimKernel, Compiled, Inner, KernelCache, KernelDetails, Part, StoredCode,
};
use crate::error::RuntimeError;
use crate::persist::Reader;
use std::sync::Arc;
use tilejit_codegen::device::{DeviceKernel, Extent, Units};
use tilejit_device::isa::{asm::disassemble, binary};
use tilejit_device::{CoreType, DeviceConfig, Target};
use tilejit_ir::kernel::{BufId, Kernel};
use tilejit_ir::DType;

/// The simulated-device target.
pub(crate) struct SimBackend;

/// Everything a sim entry's code depends on.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SimIdentity {
    structure: String,
    dtypes: Vec<DType>,
    config: String,
    plan: String,
}

impl Backend for SimBackend {
    type Identity = SimIdentity;
    type Code = Vec<DeviceKernel>;
    const TARGET: Target = Target::Sim;

    fn key_parts(id: &SimIdentity) -> KeyParts {
        KeyParts::new("sim")
            .with("kernel", id.structure.clone())
            .with("dtypes", format!("{:?}", id.dtypes))
            .with("device-config", id.config.clone())
            .with("plan", id.plan.clone())
    }

    fn code_bytes(code: &Vec<DeviceKernel>) -> usize {
        code.iter()
            .map(|k| k.program.program().code.len() * 16)
            .sum()
    }

    fn part(inner: &mut Inner) -> &mut Part<Self> {
        &mut inner.sim
    }

    fn encode(code: &Vec<DeviceKernel>) -> Option<Vec<u8>> {
        encode(code)
    }
}

/// A sim entry's payload, little endian:
///
/// ```text
/// u32:n_extra { u8:dtype u8:extent u64:width }   workspace, shared by all functions
/// u32:n_kernels {
///   u32:len name  u8:core  u32:n { u32:buffer }  u8:units  u64:tile_units
///   u32:len bytecode
/// }
/// ```
///
/// An extent byte is 0 for one element per row and chunk of `width`
/// columns, 1 for one per row (`width` 0); units are `Units::to_byte`.
///
/// ```text
/// ```
///
/// `None` if the functions do not share one workspace list (the launcher
/// relies on that sharing; empty lists need not be shared) or a program
/// cannot be encoded.
pub(super) fn encode(code: &[DeviceKernel]) -> Option<Vec<u8>> {
    let extra = &code.first()?.extra;
    // Empty lists need no sharing (the launcher skips them): a matmul's
    // AIC and AIV functions each have their own.
    let shared = code.iter().all(|k| Arc::ptr_eq(&k.extra, extra))
        || code.iter().all(|k| k.extra.is_empty());
    if !shared {
        return None;
    }
    let mut out = Vec::new();
    let u32_of = |n: usize| u32::try_from(n).ok().map(u32::to_le_bytes);
    out.extend(u32_of(extra.len())?);
    for (dtype, extent) in extra.iter() {
        out.push(DType::ALL.iter().position(|d| d == dtype)? as u8);
        let (tag, width) = match *extent {
            Extent::RowChunks(w) => (0u8, w),
            Extent::Rows => (1, 0),
        };
        out.push(tag);
        out.extend((width as u64).to_le_bytes());
    }
    out.extend(u32_of(code.len())?);
    for k in code {
        out.extend(u32_of(k.name.len())?);
        out.extend(k.name.as_bytes());
        out.push(core_byte(k.core));
        out.extend(u32_of(k.buffers.len())?);
        for b in &k.buffers {
            out.extend(b.0.to_le_bytes());
        }
        out.push(k.units.to_byte());
        out.extend((k.tile_units as u64).to_le_bytes());
        let program = binary::encode(k.program.program()).ok()?;
        out.extend(u32_of(program.len())?);
        out.extend(program);
    }
    Some(out)
}

fn core_byte(core: CoreType) -> u8 {
    match core {
        CoreType::Aic => 0,
        CoreType::Aiv => 1,
    }
}

/// The core functions of a payload, decoded and verified for `cfg` as
/// untrusted input: any flaw is an `Err` naming it.
pub(super) fn decode(bytes: &[u8], cfg: &DeviceConfig) -> Result<Vec<DeviceKernel>, String> {
    let mut r = Reader::new(bytes);
    let to_usize = |v: u64| usize::try_from(v).map_err(|_| format!("{v} does not fit usize"));
    let n = r.count(10)?;
    let mut extra = Vec::with_capacity(n);
    for _ in 0..n {
        let b = r.u8()?;
        let dtype = *DType::ALL
            .get(b as usize)
            .ok_or_else(|| format!("bad dtype byte {b}"))?;
        let tag = r.u8()?;
        let width = to_usize(r.u64()?)?;
        let extent = match (tag, width) {
            (0, w) if w > 0 => Extent::RowChunks(w),
            (1, 0) => Extent::Rows,
            _ => return Err(format!("bad workspace extent {tag} {width}")),
        };
        extra.push((dtype, extent));
    }
    let extra = Arc::new(extra);
    let n = r.count(22)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.u32()? as usize;
        let name = std::str::from_utf8(r.take(len)?)
            .map_err(|_| "a kernel name is not UTF-8")?
            .to_string();
        let core = r.u8()?;
        let nb = r.count(4)?;
        let buffers = (0..nb)
            .map(|_| r.u32().map(BufId))
            .collect::<Result<Vec<_>, _>>()?;
        let b = r.u8()?;
        let units = Units::from_byte(b).ok_or_else(|| format!("bad units byte {b}"))?;
        let tile_units = to_usize(r.u64()?)?;
        let len = r.u32()? as usize;
        let program = binary::decode(r.take(len)?).map_err(|e| e.to_string())?;
        if core_byte(program.core) != core {
            return Err(format!("`{name}`: core type differs from its program's"));
        }
        if tile_units == 0 {
            return Err(format!("`{name}`: zero units per tile"));
        }
        let asm = disassemble(&program);
        let program = tilejit_device::verify(program, cfg).map_err(|e| e.to_string())?;
        out.push(DeviceKernel {
            name,
            core: program.program().core,
            program,
            asm,
            buffers,
            units,
            tile_units,
            extra: extra.clone(),
        });
    }
    if !r.done() || out.is_empty() {
        return Err("trailing bytes or no core function".into());
    }
    Ok(out)
}

/// What `details` shows for sim code.
fn details_of(kernel_ir: String, kernels: &[DeviceKernel]) -> super::DetailsFn {
    let disasm = kernels
        .iter()
        .map(|d| d.asm.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    Arc::new(move || KernelDetails {
        kernel_ir: kernel_ir.clone(),
        clif: String::new(),
        disasm: disasm.clone(),
    })
}

impl KernelCache {
    /// The bytecode core functions of `k` for the simulated device,
    /// compiling on a miss (`program` names who asked first).
    pub fn get_or_compile_sim(
        &self,
        k: &Kernel,
        dtype_of: &dyn Fn(BufId) -> DType,
        cfg: &DeviceConfig,
        program: &str,
    ) -> Result<Arc<CachedSimKernel>, RuntimeError> {
        self.get_or_load_sim(k, dtype_of, cfg, program, None)
    }

    /// [`KernelCache::get_or_compile_sim`], but a miss first decodes and
    /// verifies `stored` (a snapshot's bytecode for `k`) if it was made
    /// under this kernel's key here.
    pub(crate) fn get_or_load_sim(
        &self,
        k: &Kernel,
        dtype_of: &dyn Fn(BufId) -> DType,
        cfg: &DeviceConfig,
        program: &str,
        stored: Option<StoredCode<'_>>,
    ) -> Result<Arc<CachedSimKernel>, RuntimeError> {
        let identity = SimIdentity {
            structure: k.device_structure_text(dtype_of),
            dtypes: k.local_buffers().into_iter().map(dtype_of).collect(),
            config: cfg.to_json(),
            plan: tilejit_codegen::device::plan_class(k, cfg),
        };
        let signature = format!("domain={:?}", k.domain);
        let text = k.text();
        let dump = |kernels: &[DeviceKernel], key: ContentKey| {
            if crate::dump::enabled() {
                let asm: Vec<&str> = kernels.iter().map(|d| d.asm.as_str()).collect();
                crate::dump::write(
                    &crate::dump::kernel_stem(&k.name, &key.short()),
                    &[("kernel", &text), ("s", &asm.join("\n"))],
                );
            }
        };
        let load = |bytes: super::Vouched<'_>, key: ContentKey| {
            let kernels = decode(bytes.0, cfg)?;
            dump(&kernels, key);
            Ok(Compiled {
                details: details_of(k.text(), &kernels),
                code: kernels,
                signature: signature.clone(),
            })
        };
        let load = Some(&load as super::Loader<'_, Vec<DeviceKernel>>);
        self.get::<SimBackend>(k, program, identity, load, stored, |_, key| {
            let kernels = tilejit_codegen::device::compile(k, dtype_of, cfg)?;
            dump(&kernels, key);
            Ok(Compiled {
                details: details_of(k.text(), &kernels),
                code: kernels,
                signature: signature.clone(),
            })
        })
    }
}
