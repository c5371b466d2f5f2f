//! Host entries: Cranelift native code, keyed by the kernel's structure
//! (sizes and strides other than 0 and 1 are runtime arguments), the
//! codegen options as they apply to it, and the CPU features.
//!
//! On disk an entry is its machine code with relocations by symbol name
//! (`tilejit_codegen::host::CodeImage`), relinked on load against this
//! process's helpers. Linking is `unsafe` (`tilejit_codegen::host::load`):
//! [`link_vouched`] is the one place that does it, for the two sources
//! that can vouch for the bytes (see its safety comment).

use super::key::KeyParts;
use super::{
    Backend, CachedKernel, Compiled, Inner, KernelCache, KernelDetails, Part, StoredCode, Vouched,
};
use crate::error::RuntimeError;
use std::sync::Arc;
use tilejit_codegen::host::{compile, isa_text, listing, CodeImage, CodegenOptions, KernelCode};
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
    /// The full ISA: triple, every Cranelift ISA flag and the CPU
    /// features codegen reads ([`isa_text`]), so code never runs on a CPU
    /// lacking a flag it was compiled with.
    pub(super) isa: &'static str,
}

impl HostIdentity {
    /// `k`'s identity under `opts` as they apply to it (its size class:
    /// [`CodegenOptions::for_kernel`]), so the key tells a streaming compile
    /// from an ordinary one.
    pub(super) fn new(k: &Kernel, dtype_of: &dyn Fn(BufId) -> DType, opts: CodegenOptions) -> Self {
        HostIdentity {
            structure: k.structure_text(dtype_of),
            opts: opts.for_kernel(k),
            isa: isa_text(),
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
            .with("cpu", id.isa)
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
        let from_disk = |bytes: Vouched<'_>, key| {
            let code = link_vouched(k, dtype_of, opts, bytes)?;
            Ok(compiled(k, dtype_of, opts, code, key))
        };
        let load = Some(&from_disk as super::Loader<'_, KernelCode>);
        self.get::<HostBackend>(k, program, identity, load, stored, |identity, key| {
            let code = compile(k, dtype_of, identity.opts)?;
            Ok(compiled(k, dtype_of, identity.opts, code, key))
        })
    }
}

/// Links machine code someone vouched for: the one call of the `unsafe`
/// `tilejit_codegen::host::load` in the runtime.
#[allow(unsafe_code)]
fn link_vouched(
    k: &Kernel,
    dtype_of: &dyn Fn(BufId) -> DType,
    opts: CodegenOptions,
    bytes: Vouched<'_>,
) -> Result<KernelCode, String> {
    let image = CodeImage::from_bytes(bytes.0).map_err(|e| e.to_string())?;
    // SAFETY: `load` needs `image` to be this build's own compile of `k`
    // under `opts` for this CPU. A `Vouched` is made in two places only
    // (its field is private to `kernel_cache`): `KernelCache::load_from_disk`,
    // for a file of this user's disk cache, whose directory
    // `disk::check_dir` accepted (an absolute path, owned by this user,
    // writable by no one else, so only this user's tilejit processes write
    // it) and whose checksum and every key component (tilejit build,
    // Cranelift, the full ISA flags, options, the kernel's structure)
    // match; and `KernelCache::load_from_snapshot`, for a snapshot's code,
    // which reaches the cache only through `snapshot::load_code`, whose
    // caller took on this same contract in an `unsafe` block.
    unsafe { tilejit_codegen::host::load(k, dtype_of, opts, &image) }.map_err(|e| e.to_string())
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
