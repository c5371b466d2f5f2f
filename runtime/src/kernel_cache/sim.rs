//! Sim entries: device bytecode. Device code bakes sizes and strides in,
//! so the key is the kernel's whole text, its buffers' dtypes and the
//! device config.

use super::key::KeyParts;
use super::{Backend, CachedSimKernel, Compiled, Inner, KernelCache, KernelDetails, Part};
use crate::error::RuntimeError;
use std::sync::Arc;
use tilejit_codegen::device::DeviceKernel;
use tilejit_device::{DeviceConfig, Target};
use tilejit_ir::kernel::{BufId, Kernel};
use tilejit_ir::DType;

/// The simulated-device target.
pub(crate) struct SimBackend;

/// Everything a sim entry's code depends on.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SimIdentity {
    text: String,
    dtypes: Vec<DType>,
    config: String,
}

impl Backend for SimBackend {
    type Identity = SimIdentity;
    type Code = Vec<DeviceKernel>;
    const TARGET: Target = Target::Sim;

    fn key_parts(id: &SimIdentity) -> KeyParts {
        KeyParts::new("sim")
            .with("kernel", id.text.clone())
            .with("dtypes", format!("{:?}", id.dtypes))
            .with("device-config", id.config.clone())
    }

    fn code_bytes(code: &Vec<DeviceKernel>) -> usize {
        code.iter()
            .map(|k| k.program.program().code.len() * 16)
            .sum()
    }

    fn part(inner: &mut Inner) -> &mut Part<Self> {
        &mut inner.sim
    }
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
        let identity = SimIdentity {
            text: k.text(),
            dtypes: k.local_buffers().into_iter().map(dtype_of).collect(),
            config: cfg.to_json(),
        };
        self.get::<SimBackend>(k, program, identity, |identity, key| {
            let kernels = tilejit_codegen::device::compile(k, dtype_of, cfg)?;
            if crate::dump::enabled() {
                let asm: Vec<&str> = kernels.iter().map(|d| d.asm.as_str()).collect();
                crate::dump::write(
                    &crate::dump::kernel_stem(&k.name, &key.short()),
                    &[("kernel", &identity.text), ("s", &asm.join("\n"))],
                );
            }
            let kernel_ir = identity.text.clone();
            let disasm = kernels
                .iter()
                .map(|d| d.asm.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            Ok(Compiled {
                code: kernels,
                signature: format!("domain={:?}", k.domain),
                details: Arc::new(move || KernelDetails {
                    kernel_ir: kernel_ir.clone(),
                    clif: String::new(),
                    disasm: disasm.clone(),
                }),
            })
        })
    }
}
