//! Lowering golden tests, as Cranelift's filetests: each kernel program's
//! Cranelift IR (`golden/lower/NAME.clif`, for the fixed target of
//! [`tilejit_codegen::host::golden_clif`], so no CPU feature of this
//! machine shows) and its simulated-device assembly (`NAME.asm`, every
//! core function as the disassembler prints it, under the default device
//! config). The programs are every `golden/fusion/NAME.kernels` and every
//! `golden/lower/NAME.graph` fused (its program golden in `NAME.kernels`
//! beside it). `BLESS=1 cargo test -p tilejit-tests lowering_golden`
//! rewrites them; a change in lowering is then a diff to review.

use std::path::{Path, PathBuf};
use tilejit_codegen::device;
use tilejit_codegen::host::{golden_clif, listing, BlockMath, CodegenOptions, StreamStores};
use tilejit_device::isa::asm::assemble;
use tilejit_device::DeviceConfig;
use tilejit_ir::kernel::{fuse, parse_program, verify_program, BufId, KernelProgram};
use tilejit_ir::DType;
use tilejit_tests::{golden_dir, golden_mismatch};

/// How to rewrite the goldens, for the files' headers.
const BLESS: &str = "BLESS=1 cargo test -p tilejit-tests lowering_golden";

/// One kernel program to lower: its name (the golden files' stem), where
/// it came from, and the program.
struct Case {
    name: String,
    source: String,
    program: KernelProgram,
}

/// The files of `dir` with extension `ext`, sorted.
fn inputs(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    paths.sort();
    paths
}

/// Every program the goldens cover; `failures` collects mismatching
/// `golden/lower/*.kernels` files.
fn cases(failures: &mut Vec<String>) -> Vec<Case> {
    let mut cases = Vec::new();
    for path in inputs(&golden_dir().join("fusion"), "kernels") {
        let text = std::fs::read_to_string(&path).unwrap();
        let program = parse_program(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        verify_program(&program).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        cases.push(Case {
            name: stem(&path),
            source: format!("fusion/{}.kernels", stem(&path)),
            program,
        });
    }
    let lower = golden_dir().join("lower");
    for path in inputs(&lower, "graph") {
        let text = std::fs::read_to_string(&path).unwrap();
        let graph =
            tilejit_ir::text::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let program = fuse(&graph).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        verify_program(&program).unwrap();
        failures.extend(golden_mismatch(
            &path.with_extension("kernels"),
            &program.to_string(),
        ));
        let name = stem(&path);
        assert!(
            cases.iter().all(|c| c.name != name),
            "{} has the name of a fusion filetest",
            path.display()
        );
        cases.push(Case {
            source: format!("lower/{name}.graph"),
            name,
            program,
        });
    }
    cases
}

fn stem(path: &Path) -> String {
    path.file_stem().unwrap().to_string_lossy().into_owned()
}

fn dtype_of(p: &KernelProgram) -> impl Fn(BufId) -> DType + '_ {
    |b| p.buffers[b.0 as usize].ty.dtype
}

/// The `.clif` golden of a program: each kernel's function, or the error
/// lowering it gave.
fn clif_text(case: &Case) -> String {
    let mut out = format!(
        "; {} lowered to Cranelift IR by host::golden_clif (x86-64, FMA, the AVX2\n\
         ; block helpers, no streaming stores). To rewrite: {BLESS}\n",
        case.source
    );
    for (i, k) in case.program.kernels.iter().enumerate() {
        out.push_str(&format!("\n; kernel {i}: {}\n", k.name));
        match golden_clif(k, &dtype_of(&case.program)) {
            Ok(clif) => out.push_str(&clif),
            Err(e) => out.push_str(&format!("; error: {e}\n")),
        }
    }
    out
}

/// The `.asm` golden of a program: each kernel's core functions with what
/// the launcher is told about them, or the error compiling it gave; and
/// the programs, in order, for the round trip.
fn asm_text(case: &Case) -> (String, Vec<tilejit_device::isa::Program>) {
    let mut out = format!(
        "; {} compiled for the simulated device (device::compile, default config).\n\
         ; To rewrite: {BLESS}\n",
        case.source
    );
    let mut programs = Vec::new();
    let cfg = DeviceConfig::default();
    for (i, k) in case.program.kernels.iter().enumerate() {
        out.push_str(&format!(
            "\n; kernel {i}: {} (class {})\n",
            k.name,
            device::plan_class(k, &cfg)
        ));
        match device::compile(k, &dtype_of(&case.program), &cfg) {
            Ok(fns) => {
                for (j, d) in fns.iter().enumerate() {
                    let bufs: Vec<String> = d.buffers.iter().map(|b| format!("b{}", b.0)).collect();
                    out.push_str(&format!(
                        "; core function {j}: units {:?}, tile {}, buffers [{}], workspace {:?}\n",
                        d.units,
                        d.tile_units,
                        bufs.join(","),
                        d.extra
                    ));
                    out.push_str(&d.asm);
                    programs.push(d.program.program().clone());
                }
            }
            Err(e) => out.push_str(&format!("; error: {e}\n")),
        }
    }
    (out, programs)
}

/// Splits an `.asm` golden into its programs' texts (each from its
/// `.kernel` line to the next).
fn asm_programs(text: &str) -> Vec<String> {
    let mut chunks: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.starts_with(".kernel ") {
            chunks.push(String::new());
        }
        if let Some(c) = chunks.last_mut() {
            c.push_str(line);
            c.push('\n');
        }
    }
    chunks
}

/// Every program's `.clif` and `.asm` golden matches, every `.asm` golden
/// assembles back to the programs the device generator made, and nothing
/// in `golden/lower` is stale.
#[test]
fn lowering_goldens() {
    let mut failures = Vec::new();
    let cases = cases(&mut failures);
    assert!(cases.len() >= 15, "only {} lowering cases", cases.len());
    let dir = golden_dir().join("lower");
    for case in &cases {
        let clif = clif_text(case);
        failures.extend(golden_mismatch(
            &dir.join(format!("{}.clif", case.name)),
            &clif,
        ));
        let (asm, programs) = asm_text(case);
        let asm_path = dir.join(format!("{}.asm", case.name));
        failures.extend(golden_mismatch(&asm_path, &asm));
        // The golden as it stands on disk reads back to these programs.
        let Ok(on_disk) = std::fs::read_to_string(&asm_path) else {
            continue;
        };
        let texts = asm_programs(&on_disk);
        if texts.len() != programs.len() {
            failures.push(format!(
                "{}: {} programs, the generator made {}",
                asm_path.display(),
                texts.len(),
                programs.len()
            ));
            continue;
        }
        for (text, program) in texts.iter().zip(&programs) {
            match assemble(text) {
                Ok(p) if &p == program => {}
                Ok(_) => failures.push(format!(
                    "{}: `{}` assembles to another program",
                    asm_path.display(),
                    text.lines().next().unwrap_or_default()
                )),
                Err(e) => failures.push(format!("{}: {e}", asm_path.display())),
            }
        }
    }
    // A golden whose program is gone would otherwise stay, unchecked.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let known = cases.iter().any(|c| c.name == stem(&path));
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let ours = matches!(ext, "clif" | "asm" | "graph" | "kernels");
        assert!(
            known && ours,
            "{} is no lowering golden of a current case",
            path.display()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The golden target is a real one: on a CPU with AVX2 and FMA, what
/// [`listing`] compiles with the AVX2 helpers and no streaming stores is
/// the golden CLIF, so the goldens show the code such machines run.
#[test]
fn golden_clif_is_what_an_avx2_cpu_compiles() {
    let f = tilejit_codegen::host::cpu_features();
    if !(f.avx2 && f.fma) {
        eprintln!("skipped: this CPU lacks AVX2 or FMA");
        return;
    }
    let opts = CodegenOptions {
        block_math: BlockMath::Avx2,
        stream_stores: StreamStores::Off,
        ..CodegenOptions::default()
    };
    let mut failures = Vec::new();
    let cases = cases(&mut failures);
    // Helpers (tanh, exp, row max and sum), f64 libcalls, casts, gathers.
    let picked = [
        "elementwise_chain",
        "softmax",
        "f64_math",
        "casts",
        "gather_embedding",
    ];
    for name in picked {
        let case = cases.iter().find(|c| c.name == name).unwrap();
        for k in &case.program.kernels {
            let dt = dtype_of(&case.program);
            let compiled = listing(k, &dt, opts).unwrap().clif;
            assert_eq!(compiled, golden_clif(k, &dt).unwrap(), "{name}: {}", k.name);
        }
    }
}
