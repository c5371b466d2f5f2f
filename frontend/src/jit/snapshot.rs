//! Saving a function's handler cache to a snapshot file and filling it
//! from one (the formats live in `tilejit_runtime::snapshot`).

use super::JitFunction;
use crate::args::ArgKind;
use crate::error::Result;
use std::path::Path;
use std::sync::Arc;
use tilejit_runtime::{ArgSig, Program, Signature};

/// What [`JitFunction::load_snapshot`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotLoad {
    /// Signatures the snapshot held, all now in the handler cache.
    pub signatures: usize,
    /// Why [`JitFunction::load_code`] compiled code again from the
    /// snapshot's graphs instead of linking it (another tilejit build,
    /// another CPU, another device config for Sim code), if it did.
    /// Always `None` from the safe `load`, which never links stored code.
    pub recompiled: Option<String>,
}

impl JitFunction {
    /// Writes every signature this function holds (graphs, kernels, host
    /// code, Sim bytecode, constants) to one snapshot file at `path`,
    /// replaced atomically. Compiles each program's Sim form first if a
    /// Sim run has not, so the snapshot serves Sim calls too.
    ///
    /// ```
    /// use tilejit::prelude::*;
    ///
    /// #[jit]
    /// fn double(x: &Tensor) -> Tensor { x * 2.0 }
    ///
    /// let path = std::env::temp_dir().join(format!("double-{}.tjsnap", std::process::id()));
    /// double(&Tensor::ones(&[4], DType::F32))?;
    /// double::jit().save(&path)?;
    /// double::jit().clear();
    /// assert_eq!(double::jit().load(&path)?, 1);    // no trace; kernels still cached
    /// double::jit().freeze();
    /// assert_eq!(double(&Tensor::ones(&[4], DType::F32))?.to_vec::<f32>()?, [2.0; 4]);
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let programs: Vec<(Signature, Arc<Program>)> = self
            .cache
            .entries()
            .into_iter()
            .map(|e| (e.signature, e.value))
            .collect();
        tilejit_runtime::snapshot::save(
            path.as_ref(),
            &self.qualified_name(),
            &self.body_digest,
            &programs,
        )?;
        Ok(())
    }

    /// Fills the handler cache from a snapshot [`save`](Self::save)
    /// wrote for this function (same module path, name and body; another
    /// function's is an error naming both): returns how many signatures it
    /// holds, each of which now runs with no trace.
    ///
    /// Safe whatever the file holds: only its graphs are used. Each is
    /// verified and compiled here, its kernels taken from the kernel cache
    /// or this machine's own disk cache when they are there (then nothing
    /// compiles) and compiled otherwise. The stored machine code is never
    /// run; [`load_code`](Self::load_code) links it, for files you trust.
    /// A missing, damaged or foreign file is an error and changes nothing.
    pub fn load(&self, path: impl AsRef<Path>) -> Result<usize> {
        Ok(self.load_snapshot(path)?.signatures)
    }

    /// [`load`](Self::load), saying what it did.
    pub fn load_snapshot(&self, path: impl AsRef<Path>) -> Result<SnapshotLoad> {
        self.load_with(path.as_ref(), false)
    }

    /// [`load`](Self::load), but also links the snapshot's stored host
    /// machine code (and Sim bytecode, verified again), so not even the
    /// kernels compile, with the disk cache off too. A snapshot from
    /// another tilejit build or for another CPU (any Cranelift ISA flag
    /// differing) is recompiled from its graphs instead, and
    /// [`SnapshotLoad::recompiled`] says why.
    ///
    /// # Safety
    ///
    /// The machine code is run as it is; nothing can check what it does.
    /// Call this only on a file you know to be the unchanged output of
    /// [`save`](Self::save) by a tilejit you trust, for instance one your
    /// own deployment wrote where no one else can write. The checksum
    /// only proves the file was not damaged by accident: an altered file
    /// with its checksum made again may read or write any memory, crash,
    /// hang or compute wrong results.
    ///
    /// ```
    /// # #![allow(unsafe_code)]
    /// use tilejit::prelude::*;
    ///
    /// #[jit]
    /// fn triple(x: &Tensor) -> Tensor { x * 3.0 }
    ///
    /// // A file this program writes itself, in a directory only it can write.
    /// let dir = std::env::temp_dir().join(format!("triple-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).ok();
    /// let path = dir.join("triple.tjsnap");
    /// triple(&Tensor::ones(&[4], DType::F32))?;
    /// triple::jit().save(&path)?;
    /// triple::jit().clear();
    /// // SAFETY: written just above by this very build, unchanged since.
    /// let loaded = unsafe { triple::jit().load_code(&path)? };
    /// assert_eq!((loaded.signatures, loaded.recompiled), (1, None));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    #[allow(unsafe_code)] // declares the contract and forwards it
    pub unsafe fn load_code(&self, path: impl AsRef<Path>) -> Result<SnapshotLoad> {
        self.load_with(path.as_ref(), true)
    }

    /// [`load_snapshot`](Self::load_snapshot), or with `code`,
    /// [`load_code`](Self::load_code) (whose caller vouched for the file).
    #[allow(unsafe_code)] // `code` is true only from `load_code`
    fn load_with(&self, path: &Path, code: bool) -> Result<SnapshotLoad> {
        let trees = self.params.iter().any(|p| p.kind == ArgKind::Tree);
        let fits = |sig: &Signature| {
            // Leaves of lists and structs are checked by the body that
            // rebuilds them (lengths and structure keys are in the signature).
            trees
                || (sig.args.len() == self.params.len()
                    && sig.args.iter().zip(&self.params).all(|(a, p)| {
                        matches!(
                            (a, p.kind),
                            (ArgSig::Tensor(_), ArgKind::Tensor)
                                | (ArgSig::Float(_), ArgKind::Float)
                                | (ArgSig::Int(_), ArgKind::Int)
                                | (ArgSig::Bool(_), ArgKind::Bool)
                        )
                    }))
        };
        let (name, body) = (self.qualified_name(), self.body_digest.as_str());
        let loaded = if code {
            // SAFETY: only `load_code` passes `code`, and its caller took
            // on the same contract for this file.
            unsafe { tilejit_runtime::snapshot::load_code(path, &name, body, &fits)? }
        } else {
            tilejit_runtime::snapshot::load(path, &name, body, &fits)?
        };
        let signatures = loaded.programs.len();
        for (sig, program) in loaded.programs {
            let took = program.compile_time();
            self.cache.insert(sig, program, took);
        }
        Ok(SnapshotLoad {
            signatures,
            recompiled: loaded.recompiled,
        })
    }
}
