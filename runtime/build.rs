//! Computes `TILEJIT_BUILD_ID`: a digest of the sources that decide what
//! code a kernel compiles to (the IR, both code generators, the device
//! ISA), so content keys change whenever tilejit's code generation can
//! have changed, not only when its version does. Outside this workspace
//! (a packaged crate) the sources are not beside it and the id is the
//! version alone.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["ir/src", "codegen/src", "device/src"] {
        let d = root.join(dir);
        println!("cargo:rerun-if-changed={}", d.display());
        rust_files(&d, &mut files);
    }
    files.sort();
    // Not a security digest: it only has to differ between builds.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in &files {
        f.strip_prefix(&root).unwrap_or(f).hash(&mut h);
        std::fs::read(f).unwrap_or_default().hash(&mut h);
    }
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let id = if files.is_empty() {
        version
    } else {
        format!("{version}+{:016x}", h.finish())
    };
    println!("cargo:rustc-env=TILEJIT_BUILD_ID={id}");
}
