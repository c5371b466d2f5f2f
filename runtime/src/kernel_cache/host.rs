//! Host entries: Cranelift native code, keyed by the kernel's structure
//! (sizes and strides other than 0 and 1 are runtime arguments), the
//! codegen options as they apply to it, and the CPU features.
//!
//! On disk an entry is its machine code with relocations by symbol name
//! (`tilejit_codegen::host::CodeImage`), relinked on load against this
//! process's helpers. The file is trusted as the build's own output once
//! its checksum and every key component (tilejit build, Cranelift
//! version, CPU features, options, kernel structure) match.

use super::key::KeyParts;
use super::{Backend, CachedKernel, Compiled, Inner, KernelCache, KernelDetails, Part, StoredCode};
use crate::error::RuntimeError;
use std::sync::Arc;
use tilejit_codegen::host::{
    compile, cpu_features, listing, load, CodeImage, CodegenOptions, CpuFeatures, KernelCode,
};
use tilejit_device::Target;
use tilejit_ir::kernel::{BufId, Kernel};
use tilejit_ir::DType;

/// The host target.
pub(crate) struct HostBackend;

/// Everything a host entry's code depends on.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct HostIdentity {
    pub(super) structure: String,
    pub(super) opts: CodegenOptions,
    pub(super) cpu: CpuFeatures,
}

impl HostIdentity {
    /// `k`'s identity under `opts` as they apply to it (its size class:
    /// [`CodegenOptions::for_kernel`]), so the key tells a streaming compile
    /// from an ordinary one.
    pub(super) fn new(k: &Kernel, dtype_of: &dyn Fn(BufId) -> DType, opts: CodegenOptions) -> Self {
        HostIdentity {
            structure: k.structure_text(dtype_of),
            opts: opts.for_kernel(k),
            cpu: cpu_features(),
        }
    }
}

impl Backend for HostBackend {
    type Identity = HostIdentity;
    type Code = KernelCode;
    const TARGET: Target = Target::Host;

    fn key_parts(id: &HostIdentity) -> KeyParts {
        KeyParts::new("host")
            .with("kernel", id.structure.clone())
            .with("codegen-options", format!("{:?}", id.opts))
            .with("cpu", format!("{:?}", id.cpu))
    }

    fn code_bytes(code: &KernelCode) -> usize {
        code.code_bytes
    }

    fn part(inner: &mut Inner) -> &mut Part<Self> {
        &mut inner.host
    }

    fn encode(code: &KernelCode) -> Option<Vec<u8>> {
        code.image().map(CodeImage::to_bytes)
    }
}

/// A compiled kernel's input, kept for `details` (its texts are made on
/// demand: printing them on every compile would slow every compile).
struct Source {
    kernel: Kernel,
    dtypes: Vec<(BufId, DType)>,
    opts: CodegenOptions,
}

impl Source {
    fn dtype_of(&self, b: BufId) -> DType {
        self.dtypes
            .iter()
            .find(|(id, _)| *id == b)
            .map_or(DType::F32, |(_, d)| *d)
    }

    /// Kernel IR, Cranelift IR and machine-code listing (compiled again).
    fn details(&self) -> KernelDetails {
        let (clif, disasm) = match listing(&self.kernel, &|b| self.dtype_of(b), self.opts) {
            Ok(l) => (l.clif, l.disasm),
            Err(e) => (format!("; listing failed: {e}"), String::new()),
        };
        KernelDetails {
            kernel_ir: self.kernel.text(),
            clif,
            disasm,
        }
    }
}

impl KernelCache {
    /// The compiled kernel for `k` under `opts`, compiling it on a miss
    /// (`program` names who asked first, for the entry list). Threads that
    /// miss the same kernel while it compiles share that one compile.
    pub fn get_or_compile(
        &self,
        k: &Kernel,
        dtype_of: &dyn Fn(BufId) -> DType,
        opts: CodegenOptions,
        program: &str,
    ) -> Result<Arc<CachedKernel>, RuntimeError> {
        self.get_or_load(k, dtype_of, opts, program, None)
    }

    /// [`KernelCache::get_or_compile`], but a miss first links `stored`
    /// (a snapshot's code image for `k`) if it was made under this
    /// kernel's key here: a snapshot load, not a compile.
    pub(crate) fn get_or_load(
        &self,
        k: &Kernel,
        dtype_of: &dyn Fn(BufId) -> DType,
        opts: CodegenOptions,
        program: &str,
        stored: Option<StoredCode<'_>>,
    ) -> Result<Arc<CachedKernel>, RuntimeError> {
        let identity = HostIdentity::new(k, dtype_of, opts);
        let opts = identity.opts;
        let from_disk = |bytes: &[u8], key| {
            let image = CodeImage::from_bytes(bytes)?;
            let code = load(k, dtype_of, opts, &image).map_err(|e| e.to_string())?;
            Ok(compiled(k, dtype_of, opts, code, key))
        };
        let load = Some(&from_disk as super::Loader<'_, KernelCode>);
        self.get::<HostBackend>(k, program, identity, load, stored, |identity, key| {
            let code = compile(k, dtype_of, identity.opts)?;
            Ok(compiled(k, dtype_of, identity.opts, code, key))
        })
    }
}

/// A host entry's code with its signature and details; writes its
/// `TILEJIT_DUMP` files under `key` (loaded from disk or compiled alike).
fn compiled(
    k: &Kernel,
    dtype_of: &dyn Fn(BufId) -> DType,
    opts: CodegenOptions,
    code: KernelCode,
    key: super::ContentKey,
) -> Compiled<KernelCode> {
    let source = Arc::new(Source {
        kernel: k.clone(),
        dtypes: k
            .local_buffers()
            .into_iter()
            .map(|b| (b, dtype_of(b)))
            .collect(),
        opts,
    });
    if crate::dump::enabled() {
        let d = source.details();
        crate::dump::write(
            &crate::dump::kernel_stem(&k.name, &key.short()),
            &[
                ("kernel", &d.kernel_ir),
                ("clif", &d.clif),
                ("disasm", &d.disasm),
            ],
        );
    }
    let signature = format!(
        "domain={:?} {}",
        k.domain,
        k.accesses()
            .map(|a| dtype_of(a.buf).to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    Compiled {
        code,
        signature,
        details: Arc::new(move || source.details()),
    }
}
