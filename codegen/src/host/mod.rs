//! The host backend: one kernel -> one native function, through Cranelift.
//!
//! [`compile`] builds the function (`lower.rs`, math in `math.rs`), gives it
//! its own `JITModule` (so evicting a kernel frees its code) and returns a
//! [`KernelCode`] handle. The ISA flags come from `cranelift_native` with
//! `opt_level=speed` and the IR verifier off in release builds (it would
//! dominate compile time); FMA must be present or each vector `fma` would
//! become four libcalls, so without it the code uses `fmul`+`fadd`.
//! [`golden_clif`] is the same lowering for a fixed CPU, whose text the
//! lowering golden tests compare.

mod image;
mod layout;
mod lower;
// The Cephes coefficients in `math` are kept digit for digit as published,
// so they can be checked against the source; rounding them to f32 is intended.
#[allow(clippy::excessive_precision)]
mod math;
mod native;
mod verify;

pub use image::CodeImage;
pub use layout::{storage_bytes, storage_dtype, ArgLayout, CheckedArgs};
pub use native::{
    block_math, conv_f32_nchw, conv_f32_panels, conv_f32_winograd, conv_f32_winograd_images, load,
    matmul_f32_panels, matmul_f32_strided, matmul_f32_strided_col_split, matmul_view_f32,
    matmul_view_f64, sys, winograd_fits, winograd_fits_images, winograd_fits_kept, winograd_form,
    BlockFn, BufArg, GemmView, KernelArgs, KernelCode, KernelElem, PackedPanels, WinogradForm,
    WinogradLayout, WinogradTile, WinogradWeights, MATH_BLOCK,
};

use crate::CodegenError;
use cranelift_codegen::ir::{types, AbiParam, FuncRef, Signature, UserFuncName};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use tilejit_ir::kernel::{BufId, Kernel};
use tilejit_ir::ops::UnaryHost;
use tilejit_ir::{BinaryOp, DType, UnaryOp};

/// Options that change generated code (part of the kernel cache key).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct CodegenOptions {
    /// Cranelift's optimisation level: true = `speed`, false = `none`.
    pub optimize: bool,
    /// Run Cranelift's IR verifier on each function.
    pub verify: bool,
    /// Which helpers vector loops may call to compute exp/log/tanh/sigmoid/
    /// gelu and division by a row-uniform value (in blocks of
    /// [`MATH_BLOCK`]) and to fold row max/min ([`block_math`]). Results
    /// are the same bit for bit whichever is chosen.
    pub block_math: BlockMath,
    /// When f32 outputs are written with non-temporal stores (needs the
    /// helpers: never with [`BlockMath::Off`]); see
    /// [`CodegenOptions::for_kernel`]. Results are the same bit for bit
    /// whichever is chosen.
    pub stream_stores: StreamStores,
}

/// When a kernel's vectorised f32 store stages write their output with
/// non-temporal stores: in blocks of [`MATH_BLOCK`] computed into a stack
/// buffer, then copied out by the `stream` helper ([`BlockFn`]). An
/// ordinary store of a line not in cache first reads the line from
/// memory; a streaming one does not, which saves a third of the memory
/// traffic of `y = f(x)` once the output cannot stay in cache anyway. An
/// output that a later kernel reads back while still in cache would instead
/// have to come from memory, hence the size rule. A store stage whose buffer the kernel also
/// loads never streams.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum StreamStores {
    /// Never.
    Off,
    /// When the kernel's domain, as traced, holds more f32s than
    /// [`stream_min_bytes`]: [`CodegenOptions::for_kernel`] turns this into
    /// `Off` or `Always` before a kernel is compiled or looked up, so a
    /// cached kernel compiled for one size class is not reused for the
    /// other (and small kernels skip the streaming blocks, which make a
    /// compile noticeably slower).
    #[default]
    Large,
    /// At every size.
    Always,
}

impl CodegenOptions {
    /// These options as they apply to `k`: [`StreamStores::Large`]
    /// resolved by `k`'s domain. Compiles and cache lookups use this.
    pub fn for_kernel(self, k: &Kernel) -> CodegenOptions {
        let stream_stores = match self.stream_stores {
            StreamStores::Large => {
                let numel = k.domain.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
                if numel.is_none_or(|n| n.saturating_mul(4) > stream_min_bytes()) {
                    StreamStores::Always
                } else {
                    StreamStores::Off
                }
            }
            s => s,
        };
        CodegenOptions {
            stream_stores,
            ..self
        }
    }
}

/// The output size, in bytes, above which [`StreamStores::Large`] streams:
/// the size of the last-level cache (read once from Linux's sysfs; 32 MiB
/// where it cannot be read). A larger output cannot stay in that cache for
/// its consumer anyway.
pub fn stream_min_bytes() -> usize {
    static MIN: OnceLock<usize> = OnceLock::new();
    *MIN.get_or_init(|| last_level_cache_bytes().unwrap_or(32 << 20))
}

/// The largest cache size sysfs lists for CPU 0 (`index*/size`, such as
/// `32768K`).
fn last_level_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| {
        let text = std::fs::read_to_string(e.ok()?.path().join("size")).ok()?;
        let text = text.trim();
        let (digits, unit) = match text.strip_suffix('K') {
            Some(d) => (d, 1 << 10),
            None => match text.strip_suffix('M') {
                Some(d) => (d, 1 << 20),
                None => (text, 1),
            },
        };
        digits.parse::<usize>().ok()?.checked_mul(unit)
    })
    .max()
}

/// The precompiled math helpers generated code may call ([`block_math`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum BlockMath {
    /// None: all math inline, on Cranelift's four lanes.
    Off,
    /// The 8-lane AVX2 + FMA helpers (an error on a CPU without them).
    Avx2,
    /// The 16-lane AVX-512F helpers (an error on a CPU without them).
    Avx512,
    /// The widest this CPU has: AVX-512F, else AVX2 + FMA, else none.
    #[default]
    Widest,
}

impl Default for CodegenOptions {
    fn default() -> CodegenOptions {
        CodegenOptions {
            optimize: true,
            verify: cfg!(debug_assertions),
            block_math: BlockMath::Widest,
            stream_stores: StreamStores::Large,
        }
    }
}

/// What the host CPU offers the generated code.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct CpuFeatures {
    /// SSE4.1 (`roundps`, `blendvps`).
    pub sse41: bool,
    /// Fused multiply-add (false also when `TILEJIT_NO_FMA` is set, for
    /// tests of the code generated for CPUs without it).
    pub fma: bool,
    /// AVX2 (used by the matmul crate; Cranelift emits only 128-bit vectors).
    pub avx2: bool,
    /// AVX-512F (the 16-lane block helpers).
    pub avx512f: bool,
}

/// The host's features, detected once.
pub fn cpu_features() -> CpuFeatures {
    static F: OnceLock<CpuFeatures> = OnceLock::new();
    *F.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            CpuFeatures {
                sse41: std::arch::is_x86_feature_detected!("sse4.1"),
                fma: std::arch::is_x86_feature_detected!("fma") && !crate::config::config().no_fma,
                avx2: std::arch::is_x86_feature_detected!("avx2"),
                avx512f: std::arch::is_x86_feature_detected!("avx512f"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            CpuFeatures {
                sse41: false,
                fma: true,
                avx2: false,
                avx512f: false,
            }
        }
    })
}

/// The host ISA as Cranelift targets it: the triple and every
/// ISA-specific flag with its value (`has_avx512vl=true`, ...), as
/// `cranelift_native` detects them, plus [`cpu_features`] (which carries
/// `TILEJIT_NO_FMA`). Generated code may use any flag that is on, so
/// this whole text is the CPU component of every host kernel's cache and
/// snapshot key: code is never reused on a CPU that lacks one of them.
pub fn isa_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let flags = match cranelift_native::builder() {
            Ok(b) => match b.finish(settings::Flags::new(settings::builder())) {
                Ok(isa) => {
                    let mut v: Vec<String> =
                        isa.isa_flags().iter().map(|f| f.to_string()).collect();
                    v.sort();
                    format!("{} {}", isa.triple(), v.join(" "))
                }
                Err(e) => format!("no native ISA ({e})"),
            },
            Err(e) => format!("no native ISA ({e})"),
        };
        format!("{flags} {:?}", cpu_features())
    })
}

extern "C" fn tj_round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}
extern "C" fn tj_round_bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

/// f64 to f16/bf16 in one correct rounding (through f32 would round twice).
extern "C" fn tj_round_f16_f64(x: f64) -> f64 {
    tilejit_ir::scalar::f16_from_f64(x).to_f64()
}
extern "C" fn tj_round_bf16_f64(x: f64) -> f64 {
    tilejit_ir::scalar::bf16_from_f64(x).to_f64()
}

/// f64 roundings to f16 and bf16 (by symbol; the op table's libcalls are
/// [`tilejit_ir::ops::libcalls`]).
const F64_FNS: [(&str, extern "C" fn(f64) -> f64); 2] = [
    ("tj_round_f16_f64", tj_round_f16_f64),
    ("tj_round_bf16_f64", tj_round_bf16_f64),
];
/// f32 roundings to f16 and bf16 (one op each, called by symbol).
const F32_FNS: [(&str, extern "C" fn(f32) -> f32); 2] = [
    ("tj_round_f16", tj_round_f16),
    ("tj_round_bf16", tj_round_bf16),
];

/// Every Rust function generated code may call, by symbol, with its
/// address: the one list both [`new_module`] (which registers them for a
/// compile) and [`load`] (which relinks only relocations naming one of
/// them or a block helper) read, so a reload can never refuse a symbol a
/// compile used.
fn libcalls() -> impl Iterator<Item = (&'static str, *const u8)> {
    let ops = tilejit_ir::ops::libcalls().into_iter();
    let f1 = F64_FNS.iter().map(|(s, f)| (*s, *f as *const u8));
    let r = F32_FNS.iter().map(|(s, f)| (*s, *f as *const u8));
    ops.chain(f1).chain(r)
}

fn cl_err(k: &Kernel, e: impl std::fmt::Display) -> CodegenError {
    CodegenError::Cranelift {
        kernel: k.name.clone(),
        message: e.to_string(),
    }
}

/// The ISA for `opts`, built once per process and pair of the options it
/// depends on (`optimize`, `verify`; not the helpers or streaming, so a
/// streaming kernel's compile reuses the ISA the warm-up built): building
/// one (flag parsing, CPU detection) is a tenth of a small kernel's compile.
fn isa_for(k: &Kernel, opts: CodegenOptions) -> Result<OwnedTargetIsa, CodegenError> {
    static ISAS: OnceLock<Mutex<HashMap<(bool, bool), OwnedTargetIsa>>> = OnceLock::new();
    let isas = ISAS.get_or_init(Default::default);
    let key = (opts.optimize, opts.verify);
    if let Some(isa) = isas.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(isa.clone());
    }
    let mut flags = settings::builder();
    let set = |f: &mut settings::Builder, n: &str, v: &str| f.set(n, v).map_err(|e| cl_err(k, e));
    set(
        &mut flags,
        "opt_level",
        if opts.optimize { "speed" } else { "none" },
    )?;
    set(
        &mut flags,
        "enable_verifier",
        if opts.verify { "true" } else { "false" },
    )?;
    set(&mut flags, "is_pic", "false")?;
    set(&mut flags, "use_colocated_libcalls", "false")?;
    // Frames past one page (block buffers, spills) probe each page on
    // entry, so a deep stack hits its guard page instead of stepping over it.
    set(&mut flags, "enable_probestack", "true")?;
    set(&mut flags, "probestack_strategy", "inline")?;
    let isa_builder = cranelift_native::builder().map_err(|e| cl_err(k, e))?;
    let isa = isa_builder
        .finish(settings::Flags::new(flags))
        .map_err(|e| cl_err(k, e))?;
    isas.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, isa.clone());
    Ok(isa)
}

/// A JIT module for `k` that resolves the runtime's functions and `helpers`.
fn new_module(
    k: &Kernel,
    opts: CodegenOptions,
    helpers: &[BlockFn],
) -> Result<JITModule, CodegenError> {
    let isa = isa_for(k, opts)?;
    let mut jb = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
    for (sym, addr) in libcalls() {
        jb.symbol(sym, addr);
    }
    for f in helpers {
        jb.symbol(f.symbol, f.addr);
    }
    Ok(JITModule::new(jb))
}

/// A kernel's code as text, for the kernel cache's `details`.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    /// The Cranelift IR that was compiled.
    pub clif: String,
    /// Cranelift's listing of the machine instructions.
    pub disasm: String,
}

/// `clif` with each imported function's declaration followed by its
/// symbol (`fn9 = u0:10 sig9 ; tj_exp_x8`): Cranelift prints only indices.
fn name_imports(clif: &str, symbols: &[(FuncRef, &str)]) -> String {
    let mut out = String::with_capacity(clif.len() + 32 * symbols.len());
    for line in clif.lines() {
        out.push_str(line);
        let decl = line.trim_start();
        if let Some((_, sym)) = symbols
            .iter()
            .find(|(f, _)| decl.starts_with(&format!("{f} = ")))
        {
            out.push_str(" ; ");
            out.push_str(sym);
        }
        out.push('\n');
    }
    out
}

/// Compiles one kernel. `dtype_of` gives each program buffer's dtype; it
/// is asked once per buffer, and the kernel is checked against the answers
/// (every expression's dtype against its operands, loads and gathers
/// against their buffer's, stores' values against theirs): a kernel they
/// contradict is [`CodegenError::Invalid`], never code that reads or
/// writes other element sizes than its launches check.
pub fn compile(
    k: &Kernel,
    dtype_of: &dyn Fn(BufId) -> DType,
    opts: CodegenOptions,
) -> Result<KernelCode, CodegenError> {
    build(k, dtype_of, opts, false).map(|(code, _)| code)
}

/// Compiles `k` again, as [`compile`] does, for its Cranelift IR and
/// machine-code listing. Compiles skip both (printing them is a sixth of a
/// compile's time), so they are made only when someone asks.
pub fn listing(
    k: &Kernel,
    dtype_of: &dyn Fn(BufId) -> DType,
    opts: CodegenOptions,
) -> Result<Listing, CodegenError> {
    build(k, dtype_of, opts, true).map(|(_, listing)| listing.unwrap_or_default())
}

/// Declares the kernel's function in `module`: four pointer arguments
/// (buffers, args, start, end), the signature every kernel shares.
fn declare_kernel(
    k: &Kernel,
    module: &mut JITModule,
) -> Result<(Signature, cranelift_module::FuncId), CodegenError> {
    let ptr = module.target_config().pointer_type();
    let mut sig = Signature::new(module.isa().default_call_conv());
    for _ in 0..4 {
        sig.params.push(AbiParam::new(ptr));
    }
    // The status: 0, or a gather's axis length + 1 where an index left it.
    sig.returns.push(AbiParam::new(types::I64));
    let id = module
        .declare_anonymous_function(&sig)
        .map_err(|e| cl_err(k, e))?;
    Ok((sig, id))
}

/// The block helpers of the golden target ([`golden_clif`]): the AVX2 set,
/// by op and symbol (where this CPU has AVX2 and FMA, the lowering golden
/// test checks that [`listing`] with [`BlockMath::Avx2`] gives the same
/// text). Never linked.
const GOLDEN_HELPERS: [(&str, &str); 9] = [
    ("exp", "tj_exp_x8"),
    ("log", "tj_log_x8"),
    ("tanh", "tj_tanh_x8"),
    ("sigmoid", "tj_sigmoid_x8"),
    ("gelu", "tj_gelu_x8"),
    ("div", "tj_div_x8"),
    ("max", "tj_max_x8"),
    ("min", "tj_min_x8"),
    ("stream", "tj_stream_x8"),
];

/// The Cranelift IR [`compile`] generates for `k` on a fixed target, for
/// golden tests: an x86-64 CPU with FMA and AVX2 but not AVX-512 (so the
/// 8-lane block helpers), under [`BlockMath::Avx2`] and
/// [`StreamStores::Off`]. The text depends on the kernel and this build
/// alone, never on this machine's CPU: the lowering reads no CPU feature
/// but these, and the ISA flags reach only machine code, which is not made
/// (only the calling convention is the host's: `system_v` on x86-64 Linux).
pub fn golden_clif(k: &Kernel, dtype_of: &dyn Fn(BufId) -> DType) -> Result<String, CodegenError> {
    let helpers = GOLDEN_HELPERS.map(|(op, symbol)| BlockFn {
        op,
        symbol,
        addr: std::ptr::null(),
    });
    let opts = CodegenOptions {
        block_math: BlockMath::Avx2,
        stream_stores: StreamStores::Off,
        ..CodegenOptions::default()
    };
    Ok(lower_fn(k, dtype_of, opts, true, &helpers)?.clif())
}

fn build(
    k: &Kernel,
    dtype_of: &dyn Fn(BufId) -> DType,
    opts: CodegenOptions,
    with_listing: bool,
) -> Result<(KernelCode, Option<Listing>), CodegenError> {
    let cpu = cpu_features();
    if cfg!(target_arch = "x86_64") && !cpu.sse41 {
        return Err(CodegenError::Cpu("SSE4.1"));
    }
    let opts = opts.for_kernel(k);
    let helpers = block_math(opts.block_math)?;
    let helpers: &[BlockFn] = helpers.as_ref().map_or(&[], |h| h.as_slice());
    let lowered = lower_fn(k, dtype_of, opts, cpu.fma, helpers)?;
    let clif = with_listing.then(|| lowered.clif());
    let Lowered {
        mut module,
        id,
        mut ctx,
        layout,
        ..
    } = lowered;
    ctx.set_disasm(with_listing);
    module
        .define_function(id, &mut ctx)
        .map_err(|e| cl_err(k, format!("{e:?}")))?;
    let (code_bytes, disasm) = match ctx.compiled_code() {
        Some(c) => (c.code_buffer().len(), c.vcode.clone().unwrap_or_default()),
        None => (0, String::new()),
    };
    let image = ctx
        .compiled_code()
        .and_then(|c| CodeImage::capture(&module, &ctx.func, id, &c.buffer));
    let listing = clif.map(|clif| Listing { clif, disasm });
    module.finalize_definitions().map_err(|e| cl_err(k, e))?;
    let ptr = module.get_finalized_function(id);
    let mut code = KernelCode::new(module, ptr, layout, k.name.clone(), code_bytes);
    code.image = image.map(std::sync::Arc::new);
    Ok((code, listing))
}

/// A kernel lowered to Cranelift IR, not yet compiled.
struct Lowered {
    /// Its own module, with the imports declared.
    module: JITModule,
    /// The function's id in `module`.
    id: cranelift_module::FuncId,
    /// The function.
    ctx: Context,
    /// Each imported function's symbol, to name it in the listing.
    symbols: Vec<(FuncRef, &'static str)>,
    /// Its arguments' layout.
    layout: ArgLayout,
}

impl Lowered {
    /// The function's text, imports named.
    fn clif(&self) -> String {
        name_imports(&self.ctx.func.display().to_string(), &self.symbols)
    }
}

/// Verifies `k` against `dtype_of` and lowers it to Cranelift IR in a fresh
/// module, for a CPU with FMA or not that offers `helpers`: what
/// [`compile`] and [`golden_clif`] share.
fn lower_fn(
    k: &Kernel,
    dtype_of: &dyn Fn(BufId) -> DType,
    opts: CodegenOptions,
    fma: bool,
    helpers: &[BlockFn],
) -> Result<Lowered, CodegenError> {
    // `dtype_of` answers once per buffer; everything below uses these.
    let buffers = k.local_buffers();
    let dtypes: Vec<DType> = buffers.iter().map(|&b| dtype_of(b)).collect();
    verify::verify(k, &dtypes)?;
    let layout = ArgLayout::of(k, &|b| {
        let i = buffers.iter().position(|&x| x == b);
        i.map_or(DType::Bool, |i| dtypes[i])
    });
    let mut module = new_module(k, opts, helpers)?;
    let (sig, id) = declare_kernel(k, &mut module)?;
    let ptr = module.target_config().pointer_type();
    let mut ctx = Context::new();
    ctx.func.signature = sig;
    ctx.func.name = UserFuncName::user(0, id.as_u32());
    let mut fctx = FunctionBuilderContext::new();
    // Every helper the op table names is declared in the module; the
    // lowering imports into the function only those it calls.
    let mut libs = lower::Libcalls::default();
    let call_conv = module.isa().default_call_conv();
    let mut declare = |sym: &'static str, ty: types::Type, arity: usize| {
        let mut s = Signature::new(call_conv);
        for _ in 0..arity {
            s.params.push(AbiParam::new(ty));
        }
        s.returns.push(AbiParam::new(ty));
        let fid = module
            .declare_function(sym, Linkage::Import, &s)
            .map_err(|e| cl_err(k, e))?;
        libs.declare(sym, fid, s);
        Ok::<_, CodegenError>(())
    };
    // Every libcall the op table names, by symbol, with its arity.
    for (sym, _) in F64_FNS {
        declare(sym, types::F64, 1)?;
    }
    for u in UnaryOp::ALL {
        match u.def().host {
            UnaryHost::Inline(_) => {}
            UnaryHost::Math { f64: c, .. } | UnaryHost::Libcall(c) => {
                declare(c.symbol, types::F64, 1)?;
            }
        }
    }
    for c in BinaryOp::ALL.iter().filter_map(|b| b.def().host.float) {
        declare(c.symbol, types::F64, 2)?;
    }
    for c in BinaryOp::ALL.iter().filter_map(|b| b.def().host.int) {
        declare(c.symbol, types::I64, 2)?;
    }
    for (sym, _) in F32_FNS {
        declare(sym, types::F32, 1)?;
    }
    for f in helpers {
        let mut s = Signature::new(call_conv);
        s.params.push(AbiParam::new(ptr));
        s.params.push(AbiParam::new(ptr));
        s.params.push(AbiParam::new(types::I64));
        s.params.push(AbiParam::new(types::F32));
        s.params.push(AbiParam::new(types::I64));
        s.params.push(AbiParam::new(ptr));
        let fid = module
            .declare_function(f.symbol, Linkage::Import, &s)
            .map_err(|e| cl_err(k, e))?;
        libs.declare_block(f.op, f.symbol, fid, s);
    }
    {
        let b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let buf_dtype = |lb: usize| layout.dtypes[lb];
        let stream = opts.stream_stores == StreamStores::Always;
        lower::Lowerer::new(b, k, &layout, &buf_dtype, fma, stream, &mut libs).lower()?;
    }
    // Each imported function's symbol, to name it in the listing.
    let symbols = libs.imported().to_vec();
    Ok(Lowered {
        module,
        id,
        ctx,
        symbols,
        layout,
    })
}

/// Relinks `image` for `k` into a fresh module: the body of
/// [`load`] (the `unsafe` contract lives there, in the unsafe module).
/// Relocations naming a symbol this build does not provide are an error,
/// not a crash.
pub(crate) fn link_unchecked(
    k: &Kernel,
    dtype_of: &dyn Fn(BufId) -> DType,
    opts: CodegenOptions,
    image: &CodeImage,
) -> Result<KernelCode, CodegenError> {
    let opts = opts.for_kernel(k);
    let layout = ArgLayout::of(k, dtype_of);
    let helpers = block_math(opts.block_math)?;
    let helpers: &[BlockFn] = helpers.as_ref().map_or(&[], |h| h.as_slice());
    let mut module = new_module(k, opts, helpers)?;
    let (sig, id) = declare_kernel(k, &mut module)?;
    let call_conv = sig.call_conv;
    // Built once per load, not walked per relocation.
    let known: std::collections::HashSet<&str> = libcalls()
        .map(|(s, _)| s)
        .chain(helpers.iter().map(|h| h.symbol))
        .collect();
    let mut relocs = Vec::with_capacity(image.relocs.len());
    for r in &image.relocs {
        // cranelift-jit panics on a symbol it cannot resolve.
        if !known.contains(r.symbol.as_str()) {
            return Err(cl_err(
                k,
                format!("unknown symbol {:?} in cached code", r.symbol),
            ));
        }
        // Only the name matters for linking; one signature for all.
        let fid = module
            .declare_function(&r.symbol, Linkage::Import, &Signature::new(call_conv))
            .map_err(|e| cl_err(k, e))?;
        relocs.push(cranelift_module::ModuleReloc {
            offset: r.offset,
            kind: r.kind(),
            name: cranelift_module::ModuleRelocTarget::User {
                namespace: 0,
                index: fid.as_u32(),
            },
            addend: r.addend,
        });
    }
    module
        .define_function_bytes(id, image.align, &image.bytes, &relocs)
        .map_err(|e| cl_err(k, e))?;
    module.finalize_definitions().map_err(|e| cl_err(k, e))?;
    let ptr = module.get_finalized_function(id);
    let mut code = KernelCode::new(module, ptr, layout, k.name.clone(), image.bytes.len());
    code.image = Some(std::sync::Arc::new(image.clone()));
    Ok(code)
}
