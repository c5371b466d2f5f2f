//! `TILEJIT_DUMP=<dir>`: every compile writes what it compiled there.
//!
//! Per program (named after its jit function and signature): the graph as
//! traced and optimised, the fused kernels, and a `.keys` file naming each
//! kernel's cache key and dump files, so a kernel that came from the cache
//! can still be found. Per kernel compile (named `<kernel>-<key>`): its
//! kernel IR, and Cranelift IR and machine code, or device bytecode.
//! Writing never fails a compile: a failure is reported on stderr.

use crate::host::HostProgram;
use tilejit_ir::Graph;

/// Whether `TILEJIT_DUMP` is set.
pub(crate) fn enabled() -> bool {
    crate::config::config().dump_dir.is_some()
}

/// A file name for `name`: `mlp(f32[8,64], int 3)` becomes
/// `mlp-f32_8x64-int3`. ASCII letters, digits, `-` and `_` only, at most
/// 120 characters.
pub(crate) fn file_stem(name: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in name.chars() {
        match c {
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' => out.push(c),
            '[' => {
                depth += 1;
                out.push('_');
            }
            ']' => depth -= 1,
            ',' if depth > 0 => out.push('x'),
            '(' | ',' => out.push('-'),
            _ => {}
        }
    }
    let out = out.trim_matches('-').replace("..", "_");
    out.chars().take(120).collect()
}

/// Writes `files` (suffix, contents) as `<dir>/<stem>.<suffix>`; a failure
/// is reported once per file on stderr and never fails the compile.
pub(crate) fn write(stem: &str, files: &[(&str, &str)]) {
    let Some(dir) = crate::config::config().dump_dir.as_deref() else {
        return;
    };
    let stem = file_stem(stem);
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!(
            "tilejit: TILEJIT_DUMP: cannot create {}: {e}",
            dir.display()
        );
        return;
    }
    for (suffix, text) in files {
        let path = dir.join(format!("{stem}.{suffix}"));
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!(
                "tilejit: TILEJIT_DUMP: cannot write {}: {e}",
                path.display()
            );
        }
    }
}

/// The stem a kernel compile is dumped under.
pub(crate) fn kernel_stem(kernel: &str, key: &str) -> String {
    file_stem(&format!("{kernel}-{key}"))
}

/// One program: its graphs as traced and optimised, its fused kernels (the
/// kernel IR text form), and which dump files hold each kernel's compiled
/// forms. A kernel the cache already held was dumped when it was compiled,
/// maybe by another program: the `.keys` file is how to find it.
pub(crate) fn program(name: &str, traced: &Graph, optimized: &Graph, host: &HostProgram) {
    let kernels = host.kernels();
    let keys: String = kernels
        .kernels
        .iter()
        .zip(host.code())
        .map(|(k, c)| {
            // Files are named by the key's first 16 hex digits, as written.
            let stem = kernel_stem(&k.name, &c.key[..c.key.len().min(16)]);
            format!("{} {} -> {stem}.{{kernel,clif,disasm}}\n", k.name, c.key)
        })
        .collect();
    write(
        name,
        &[
            ("traced.graph", &traced.to_string()),
            ("graph", &optimized.to_string()),
            ("kernels", &kernels.to_string()),
            ("keys", &keys),
        ],
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn file_stems_name_the_function_and_signature() {
        use super::file_stem;
        assert_eq!(
            file_stem("mlp_block(f32[8,64], f32[64], f32 param, int 3)"),
            "mlp_block-f32_8x64-f32_64-f32param-int3"
        );
        assert_eq!(file_stem("../../etc/passwd"), "__etcpasswd");
        assert_eq!(file_stem(&"x".repeat(500)).len(), 120);
    }
}
