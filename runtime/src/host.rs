//! Running a fused program on the host: buffers, kernel launches in order,
//! each split into ranges over the rayon pool (tiny kernels stay on the
//! calling thread, where dispatch costs less than the work), matmuls through
//! `gemm`, f16/bf16 held as f32 between the program's boundaries (each
//! op's result rounded to its type).

use crate::alloc::class_vec;
use crate::error::RuntimeError;
use crate::flight::map_off_pool;
use crate::hooks::{KernelRun, Place};
use crate::kernel_cache::{kernel_cache, CachedKernel, StoredCode};
use crate::pipeline::{self, Stage, StageTimes};
use crate::placed::Mixed;
use rayon::prelude::*;
use smallvec::SmallVec;
use std::borrow::Borrow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tilejit_codegen::host::{
    matmul_f32, matmul_f64, storage_bytes, BufArg, CheckedArgs, CodegenOptions, KernelArgs,
};
use tilejit_codegen::CodegenError;
use tilejit_ir::fallible::{collect, filled};
use tilejit_ir::kernel::{BufKind, Kernel, KernelProgram, ProgramOutput};
use tilejit_ir::pool::pool;
use tilejit_ir::{interp, Array, Buffer, DType, Graph, IrError, Lit};

/// Below this many domain elements a kernel runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 16;

/// A program compiled for the host.
#[derive(Debug)]
pub struct HostProgram {
    /// What kernel observers see it as (a jit function and signature).
    name: String,
    prog: KernelProgram,
    code: Vec<Arc<CachedKernel>>,
    /// Per kernel, this program's buffers in the kernel's local order (the
    /// cached code may have been compiled for another program's buffers).
    locals: Vec<Vec<tilejit_ir::kernel::BufId>>,
    /// Per kernel, its scalar arguments (sizes, strides) when it takes no
    /// params: computed and bounds-checked once, not per call.
    fixed_args: Vec<Option<CheckedArgs>>,
    /// Per kernel, whether it writes no element (an empty output, or rows
    /// of no columns): then it has nothing to do, however many units it
    /// spans, and is not launched.
    idle: Vec<bool>,
    constants: Vec<Array>,
    /// The short way through a one-kernel program, when it has one.
    tiny: Option<Tiny>,
}

/// How a one-kernel program runs without the general loop: on the calling
/// thread, its arguments checked once at compile time, inputs lent straight
/// from the arrays, one fresh output. Why: a warm `x + y` on 16 elements
/// (W6) spent most of its time in the general path's slots, output list
/// and per-kernel branches, not in the kernel.
#[derive(Debug)]
struct Tiny {
    /// Per kernel-local buffer, the input it is (`None`: the output).
    locals: SmallVec<[Option<u32>; 4]>,
    /// Where the output sits among the locals.
    out_at: usize,
    /// The kernel's launch units, and the output's element count.
    units: usize,
    numel: usize,
    /// The output buffer's dtype.
    out_dtype: DType,
    /// The shape the program returns it as (a reshape is free).
    ret: tilejit_ir::Shape,
}

impl Tiny {
    /// The plan for `prog`, if it is one small kernel that reads only
    /// inputs (no halves, which convert) and writes the one output.
    fn plan(
        prog: &KernelProgram,
        code: &[Arc<CachedKernel>],
        fixed_args: &[Option<CheckedArgs>],
        idle: &[bool],
    ) -> Option<Tiny> {
        let ([k], [code], [Some(_)], [false]) = (&prog.kernels[..], code, fixed_args, idle) else {
            return None;
        };
        let [ProgramOutput::Buffer(out, ret)] = prog.outputs[..] else {
            return None;
        };
        let half = |d: DType| matches!(d, DType::F16 | DType::BF16);
        let decl = prog.buffer(out);
        let small = k.domain.iter().product::<usize>() < PARALLEL_MIN;
        if k.matmul.is_some()
            || code.code.layout().scratch != 0
            || !prog.params.is_empty()
            || !small
            || !matches!(decl.kind, BufKind::Temp)
            || half(decl.ty.dtype)
            || prog.inputs.iter().any(|t| half(t.dtype))
        {
            return None;
        }
        let mut locals = SmallVec::new();
        let mut out_at = None;
        for b in k.local_buffers() {
            match prog.buffer(b).kind {
                BufKind::Input(i) if (i as usize) < prog.inputs.len() => locals.push(Some(i)),
                BufKind::Temp if b == out => {
                    out_at = Some(locals.len());
                    locals.push(None);
                }
                _ => return None,
            }
        }
        Some(Tiny {
            locals,
            out_at: out_at?,
            units: k.units(),
            numel: decl.ty.shape.numel(),
            out_dtype: decl.ty.dtype,
            ret: ret.shape,
        })
    }
}

/// Typed storage the program owns during a run.
pub(crate) enum Store {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    U8(Vec<u8>),
    I8(Vec<i8>),
}

impl Store {
    /// The storage as a buffer of its own element type (f32 stays f32).
    #[inline]
    fn into_buffer(self) -> Buffer {
        match self {
            Store::F32(v) => Buffer::F32(v),
            Store::F64(v) => Buffer::F64(v),
            Store::I32(v) => Buffer::I32(v),
            Store::I64(v) => Buffer::I64(v),
            Store::Bool(v) => Buffer::Bool(v),
            Store::U8(v) => Buffer::U8(v),
            Store::I8(v) => Buffer::I8(v),
        }
    }

    /// A buffer's elements as storage (f16/bf16 widened to f32, as the
    /// host computes them).
    pub(crate) fn from_buffer(b: Buffer) -> Result<Store, IrError> {
        Ok(match b {
            Buffer::F32(v) => Store::F32(v),
            Buffer::F64(v) => Store::F64(v),
            Buffer::I32(v) => Store::I32(v),
            Buffer::I64(v) => Store::I64(v),
            Buffer::Bool(v) => Store::Bool(v),
            Buffer::U8(v) => Store::U8(v),
            Buffer::I8(v) => Store::I8(v),
            Buffer::F16(v) => Store::F32(collect(v.iter().map(|x| x.to_f32()))?),
            Buffer::BF16(v) => Store::F32(collect(v.iter().map(|x| x.to_f32()))?),
        })
    }

    /// A copy (fallible: the size is the user's).
    fn try_clone(&self) -> Result<Store, IrError> {
        Ok(match self {
            Store::F32(v) => Store::F32(collect(v.iter().copied())?),
            Store::F64(v) => Store::F64(collect(v.iter().copied())?),
            Store::I32(v) => Store::I32(collect(v.iter().copied())?),
            Store::I64(v) => Store::I64(collect(v.iter().copied())?),
            Store::Bool(v) => Store::Bool(collect(v.iter().copied())?),
            Store::U8(v) => Store::U8(collect(v.iter().copied())?),
            Store::I8(v) => Store::I8(collect(v.iter().copied())?),
        })
    }
}

/// Storage for `n` elements that kernels will overwrite completely: a
/// buffer from the caching pool when one of that type and size class is
/// free, else fresh zeroed memory (calloc: the OS maps zero pages lazily,
/// so the page faults happen in the parallel kernel, not in a serial
/// memset here) filling its class, for later reuse.
fn output_store(dtype: DType, n: usize) -> Result<Store, IrError> {
    try_output_store(dtype, n).ok_or_else(|| IrError::OutOfMemory {
        bytes: n.saturating_mul(storage_bytes(dtype)),
    })
}

/// [`output_store`], `None` when out of memory: an `IrError` is 176
/// bytes, which the short path would otherwise copy about on success.
/// Always inlined: returned through memory, the store was written in
/// halves and read back whole, a stall on every call (W6).
#[inline(always)]
fn try_output_store(dtype: DType, n: usize) -> Option<Store> {
    let held = match dtype {
        DType::F32 | DType::F16 | DType::BF16 => DType::F32,
        d => d,
    };
    // Small buffers are kept per thread, bigger ones in the shared pool.
    let pooled = n.saturating_mul(held.size_bytes()) >= tilejit_ir::pool::MIN_POOLED_BYTES;
    let reused = if pooled {
        pool().take(held, n)
    } else {
        tilejit_ir::pool::take_small(held, n)
    };
    if let Some(b) = reused {
        match b {
            Buffer::F32(v) => return Some(Store::F32(v)),
            Buffer::F64(v) => return Some(Store::F64(v)),
            Buffer::I32(v) => return Some(Store::I32(v)),
            Buffer::I64(v) => return Some(Store::I64(v)),
            Buffer::Bool(v) => return Some(Store::Bool(v)),
            Buffer::U8(v) => return Some(Store::U8(v)),
            Buffer::I8(v) => return Some(Store::I8(v)),
            _ => {}
        }
    }
    Some(match held {
        DType::F64 => Store::F64(class_vec(held, n)?),
        DType::I32 => Store::I32(class_vec(held, n)?),
        DType::I64 => Store::I64(class_vec(held, n)?),
        DType::Bool => Store::Bool(class_vec(held, n)?),
        DType::U8 => Store::U8(class_vec(held, n)?),
        DType::I8 => Store::I8(class_vec(held, n)?),
        _ => Store::F32(class_vec(held, n)?),
    })
}

/// Starts rayon's threads (once per process) without waiting for them, so
/// they come up while Cranelift compiles rather than inside the first
/// parallel launch (a fresh process's first call is measurably faster).
fn start_thread_pool() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| rayon::spawn(|| ()));
}

/// Starts rayon's threads if some kernel of `prog` is big enough to run
/// in parallel (before its compile, so they come up meanwhile).
fn start_thread_pool_for(prog: &KernelProgram) {
    if prog
        .kernels
        .iter()
        .any(|k| k.domain.iter().product::<usize>() >= PARALLEL_MIN)
    {
        start_thread_pool();
    }
}

/// Gives the storage of a run's temporaries back to the pool.
pub(crate) fn recycle<'a>(slots: impl IntoIterator<Item = Slot<'a>>) {
    for slot in slots {
        // A taken output leaves an empty store behind: nothing to give.
        if let Slot::Owned(store) = slot {
            if matches!(&store, Store::Bool(v) if v.capacity() == 0) {
                continue;
            }
            pool().give(store.into_buffer());
        }
    }
}

/// A buffer during a run: borrowed from an argument, or owned.
pub(crate) enum Slot<'a> {
    Borrowed(&'a Buffer),
    Owned(Store),
}

impl Slot<'_> {
    /// The slot as a kernel argument: writable when the program owns it.
    #[inline]
    fn arg(&mut self) -> BufArg<'_> {
        match self {
            Slot::Borrowed(b) => buffer_arg(b),
            Slot::Owned(s) => store_arg(s),
        }
    }

    /// The slot as a read-only kernel argument.
    #[inline]
    fn arg_read(&self) -> BufArg<'_> {
        match self {
            // f16/bf16 arguments are converted to owned f32 up front.
            Slot::Borrowed(b) => buffer_arg(b),
            Slot::Owned(Store::F32(v)) => BufArg::read(v),
            Slot::Owned(Store::F64(v)) => BufArg::read(v),
            Slot::Owned(Store::I32(v)) => BufArg::read(v),
            Slot::Owned(Store::I64(v)) => BufArg::read(v),
            Slot::Owned(Store::Bool(v)) => BufArg::read(v),
            Slot::Owned(Store::U8(v)) => BufArg::read(v),
            Slot::Owned(Store::I8(v)) => BufArg::read(v),
        }
    }

    fn f32s(&self) -> Option<&[f32]> {
        match self {
            Slot::Borrowed(Buffer::F32(v)) | Slot::Owned(Store::F32(v)) => Some(v),
            _ => None,
        }
    }

    fn f64s(&self) -> Option<&[f64]> {
        match self {
            Slot::Borrowed(Buffer::F64(v)) | Slot::Owned(Store::F64(v)) => Some(v),
            _ => None,
        }
    }

    /// Values as i64 (integer matmul only).
    fn ints(&self) -> Result<Vec<i64>, IrError> {
        match self {
            Slot::Borrowed(Buffer::I32(v)) | Slot::Owned(Store::I32(v)) => {
                collect(v.iter().map(|&x| x as i64))
            }
            Slot::Borrowed(Buffer::I64(v)) | Slot::Owned(Store::I64(v)) => {
                collect(v.iter().copied())
            }
            Slot::Borrowed(Buffer::U8(v)) | Slot::Owned(Store::U8(v)) => {
                collect(v.iter().map(|&x| x as i64))
            }
            Slot::Borrowed(Buffer::I8(v)) | Slot::Owned(Store::I8(v)) => {
                collect(v.iter().map(|&x| x as i64))
            }
            _ => Ok(Vec::new()),
        }
    }
}

/// Moves an owned store out of its slot (leaving an empty one).
fn take_owned(slot: &mut Slot<'_>) -> Result<Store, RuntimeError> {
    match std::mem::replace(slot, Slot::Owned(Store::Bool(Vec::new()))) {
        Slot::Owned(s) => Ok(s),
        Slot::Borrowed(_) => {
            Err(IrError::Verify("a kernel result is a borrowed buffer".into()).into())
        }
    }
}

/// An argument as a slot: borrowed, or for f16/bf16 widened to f32.
fn slot_for(buf: &Buffer) -> Result<Slot<'_>, IrError> {
    Ok(match buf {
        Buffer::F16(v) => Slot::Owned(Store::F32(collect(v.iter().map(|x| x.to_f32()))?)),
        Buffer::BF16(v) => Slot::Owned(Store::F32(collect(v.iter().map(|x| x.to_f32()))?)),
        b => Slot::Borrowed(b),
    })
}

/// A short-path error, boxed (cold: built only when a call fails).
#[cold]
fn tiny_error(e: IrError) -> Box<RuntimeError> {
    Box::new(e.into())
}

/// A result's storage as a buffer of its dtype (f16/bf16 narrowed from f32).
fn to_buffer(store: Store, dtype: DType) -> Result<Buffer, IrError> {
    Ok(match (store, dtype) {
        (Store::F32(v), DType::F16) => {
            let b = Buffer::F16(collect(v.iter().map(|&x| half::f16::from_f32(x)))?);
            recycle([Slot::Owned(Store::F32(v))]);
            b
        }
        (Store::F32(v), DType::BF16) => {
            let b = Buffer::BF16(collect(v.iter().map(|&x| half::bf16::from_f32(x)))?);
            recycle([Slot::Owned(Store::F32(v))]);
            b
        }
        (store, _) => store.into_buffer(),
    })
}

impl HostProgram {
    /// Fuses `g` and compiles every kernel (in parallel) through the cache.
    pub fn compile(g: &Graph) -> Result<HostProgram, RuntimeError> {
        HostProgram::compile_with(g, CodegenOptions::default())
    }

    /// [`HostProgram::compile`] with explicit code generation options (the
    /// cache keeps kernels of different options apart).
    pub fn compile_with(g: &Graph, opts: CodegenOptions) -> Result<HostProgram, RuntimeError> {
        let mut t = StageTimes::default();
        let prog = pipeline::lower(g, &mut t)?;
        t.run(Stage::CodegenHost, || {
            HostProgram::codegen(prog, pipeline::constants(g), opts, "eager")
        })
    }

    /// The codegen stage: compiles every kernel of `prog` (in parallel)
    /// through the kernel cache.
    pub(crate) fn codegen(
        prog: KernelProgram,
        constants: Vec<Array>,
        opts: CodegenOptions,
        name: &str,
    ) -> Result<HostProgram, RuntimeError> {
        start_thread_pool_for(&prog);
        let dtype_of = |b: tilejit_ir::kernel::BufId| prog.buffer(b).ty.dtype;
        let code = map_off_pool(&prog.kernels, |k| {
            kernel_cache().get_or_compile(k, &dtype_of, opts, name)
        })?;
        HostProgram::assemble(prog, code, constants, name)
    }

    /// A program from a snapshot's parts: each kernel's code is linked
    /// from `stored` (its image and the key it was made under) through the
    /// kernel cache, which compiles only a kernel whose image is missing
    /// or was made under another key. No fusion runs. Only
    /// `snapshot::load_code` calls this (`_vouch`).
    pub(crate) fn from_snapshot(
        prog: KernelProgram,
        constants: Vec<Array>,
        name: &str,
        stored: &[Option<StoredCode<'_>>],
        _vouch: &crate::snapshot::CodeVouch,
    ) -> Result<HostProgram, RuntimeError> {
        start_thread_pool_for(&prog);
        let dtype_of = |b: tilejit_ir::kernel::BufId| prog.buffer(b).ty.dtype;
        let code = prog
            .kernels
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let stored = stored.get(i).copied().flatten();
                kernel_cache().get_or_load(k, &dtype_of, Default::default(), name, stored)
            })
            .collect::<Result<Vec<_>, _>>()?;
        HostProgram::assemble(prog, code, constants, name)
    }

    /// The program over `prog` with each kernel's compiled code.
    fn assemble(
        prog: KernelProgram,
        code: Vec<Arc<CachedKernel>>,
        constants: Vec<Array>,
        name: &str,
    ) -> Result<HostProgram, RuntimeError> {
        let locals = prog.kernels.iter().map(|k| k.local_buffers()).collect();
        // Kernels without params see the same args on every call: check
        // their bounds once here, leaving only buffer sizes per call.
        let fixed_args = prog
            .kernels
            .iter()
            .zip(&code)
            .map(|(k, c)| {
                let layout = c.code.layout();
                if layout.params > 0 {
                    return Ok(None);
                }
                c.code.check_args(layout.args(k, &[])).map(Some)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let numel = |b: tilejit_ir::kernel::BufId| prog.buffer(b).ty.shape.numel();
        let idle = prog
            .kernels
            .iter()
            .map(|k| {
                let stores = k.stages.iter().filter_map(|s| match s {
                    tilejit_ir::kernel::Stage::Store { access, .. } => Some(access.buf),
                    _ => None,
                });
                stores
                    .chain(k.matmul.as_ref().map(|m| m.out))
                    .map(numel)
                    .sum::<usize>()
                    == 0
            })
            .collect::<Vec<_>>();
        let tiny = Tiny::plan(&prog, &code, &fixed_args, &idle);
        Ok(HostProgram {
            name: name.to_string(),
            prog,
            code,
            locals,
            fixed_args,
            idle,
            constants,
            tiny,
        })
    }

    /// The fused program.
    pub fn kernels(&self) -> &KernelProgram {
        &self.prog
    }

    /// The compiled kernels, in program order.
    pub fn code(&self) -> &[Arc<CachedKernel>] {
        &self.code
    }

    /// The constants its kernels read, by index.
    pub fn constants(&self) -> &[Array] {
        &self.constants
    }

    /// Runs on concrete inputs (arrays or references to them) and param
    /// values (checked first).
    pub fn run<A: Borrow<Array>>(
        &self,
        inputs: &[A],
        params: &[Lit],
    ) -> Result<Vec<Array>, RuntimeError> {
        self.run_with(inputs, params, None)
    }

    /// Runs a program of one small kernel and one output on concrete
    /// inputs (it takes no params) the short way: `None` when the program
    /// is not such a one, or when kernel observers or stop limits are
    /// active (they need the general path), else what
    /// [`HostProgram::run`] would return, as one array.
    #[inline]
    pub fn run_one(&self, inputs: &[&Array]) -> Option<Result<Array, Box<RuntimeError>>> {
        let t = self.tiny.as_ref()?;
        if crate::hooks::any() || crate::cancel::any() {
            return None;
        }
        Some(self.run_tiny(t, inputs))
    }

    /// The short way (see [`run_one`](Self::run_one)). Its rare errors are
    /// boxed and built out of line: a `Result` with a 176-byte error inline
    /// was copied whole (`memcpy`) between calls on every success.
    fn run_tiny(&self, t: &Tiny, inputs: &[&Array]) -> Result<Array, Box<RuntimeError>> {
        let want = &self.prog.inputs;
        if inputs.len() != want.len() || !inputs.iter().zip(want).all(|(a, w)| a.has_type(w)) {
            if let Err(e) = interp::check_arguments(want, 0, inputs, &[]) {
                return Err(Box::new(e.into()));
            }
        }
        let code = &self.code[0];
        let Some(fixed) = self.fixed_args[0].as_ref() else {
            return Err(tiny_error(IrError::Verify(
                "a tiny plan without checked args".into(),
            )));
        };
        let Some(mut out) = try_output_store(t.out_dtype, t.numel) else {
            return Err(tiny_error(IrError::OutOfMemory {
                bytes: t.numel.saturating_mul(storage_bytes(t.out_dtype)),
            }));
        };
        {
            let mut bufs: SmallVec<[BufArg<'_>; 8]> = SmallVec::new();
            for l in &t.locals {
                bufs.push(match l {
                    // `Tiny::plan` kept indices below the program's input
                    // count, which `inputs` was checked to have above.
                    Some(i) => buffer_arg(inputs[*i as usize].buffer()),
                    None => BufArg::empty(),
                });
            }
            bufs[t.out_at] = store_arg(&mut out);
            code.launches.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = code.code.call_checked(&mut bufs, fixed, 0, t.units) {
                return Err(Box::new(kernel_error(e.into(), None)));
            }
        }
        // `Tiny::plan` takes no halves: the storage is the output's buffer.
        match Array::from_exact(t.ret, out.into_buffer()) {
            Ok(a) => Ok(a),
            Err(e) => Err(tiny_error(*e)),
        }
    }

    /// [`HostProgram::run`], with some kernels placed on the Sim device
    /// when `mixed` says so.
    pub(crate) fn run_with<A: Borrow<Array>>(
        &self,
        inputs: &[A],
        params: &[Lit],
        mut mixed: Option<&mut Mixed<'_>>,
    ) -> Result<Vec<Array>, RuntimeError> {
        let p = &self.prog;
        interp::check_arguments(&p.inputs, p.params.len(), inputs, params)?;
        // On the stack for the usual handful of buffers: a heap vector per
        // call is a measurable share of a small call's dispatch cost.
        // (`new`, not `with_capacity`: that one is built aside and copied in.)
        let mut slots: SmallVec<[Slot<'_>; 8]> = SmallVec::new();
        for b in &p.buffers {
            let buf = match b.kind {
                BufKind::Input(i) => inputs
                    .get(i as usize)
                    .ok_or_else(|| IrError::Arguments(format!("missing input {i}")))?
                    .borrow()
                    .buffer(),
                BufKind::Constant(c) => self
                    .constants
                    .get(c as usize)
                    .ok_or_else(|| IrError::Verify(format!("missing constant {c}")))?
                    .buffer(),
                BufKind::Temp => {
                    slots.push(Slot::Owned(output_store(b.ty.dtype, b.ty.shape.numel())?));
                    continue;
                }
            };
            // Only halves are converted: the common slot is built without
            // a `Result` (176 bytes with an `IrError`) in between.
            slots.push(match buf {
                Buffer::F16(_) | Buffer::BF16(_) => slot_for(buf)?,
                b => Slot::Borrowed(b),
            });
        }
        // What may stop this run: usually nothing, and then no check costs.
        let limits = crate::cancel::current();
        let stop_check = || limits.stopped().is_some();
        let stop: Option<&(dyn Fn() -> bool + Sync)> = (!limits.is_none()).then_some(&stop_check);
        // Kernel observers (`with_hooks`, TILEJIT_LOG=time): usually none.
        let hooks = crate::hooks::active();
        for (i, k) in p.kernels.iter().enumerate() {
            if self.idle[i] {
                continue;
            }
            if stop.is_some() {
                limits.check(&format!("kernel `{}`", k.name))?;
            }
            let on_sim = mixed.as_ref().is_some_and(|m| m.on_sim(i));
            let Some(h) = &hooks else {
                match mixed.as_deref_mut() {
                    None => self.run_kernel(i, &mut slots, params, &limits, stop)?,
                    Some(m) => m.run_kernel(self, i, &mut slots, params, &limits, stop)?,
                }
                continue;
            };
            // Observed: the kernel's values are read on the host.
            if let Some(m) = mixed.as_deref_mut() {
                m.pull_to_host(self, &k.read_buffers(), &mut slots)?;
            }
            let inputs = self.slot_arrays(&slots, &k.read_buffers())?;
            let mut event = KernelRun {
                program: &self.name,
                run: h.run,
                index: i,
                name: &k.name,
                place: if on_sim { Place::Sim } else { Place::Host },
                inputs: &inputs,
                outputs: &[],
                elapsed: None,
            };
            h.before(&event);
            let start = Instant::now();
            match mixed.as_deref_mut() {
                None => self.run_kernel(i, &mut slots, params, &limits, stop)?,
                Some(m) => {
                    m.run_kernel(self, i, &mut slots, params, &limits, stop)?;
                    m.pull_to_host(self, &k.stored_buffers(), &mut slots)?;
                }
            }
            let elapsed = start.elapsed();
            let outputs = self.slot_arrays(&slots, &k.stored_buffers())?;
            event.outputs = &outputs;
            event.elapsed = Some(elapsed);
            h.after(&event);
        }
        if let Some(m) = mixed {
            m.outputs_to_host(self, &mut slots)?;
        }
        // Buffers already turned into arrays, for outputs that repeat one
        // (recorded only when a later output could ask: usually never).
        let mut done: Vec<(usize, Array)> = Vec::new();
        let mut outs = Vec::with_capacity(p.outputs.len());
        for (oi, o) in p.outputs.iter().enumerate() {
            outs.push(match *o {
                ProgramOutput::Param(i, d) => param_output(params, i, d)?,
                ProgramOutput::Buffer(b, ty) => {
                    let bi = b.0 as usize;
                    let seen = done.iter().find(|(b, _)| *b == bi).map(|(_, a)| a.clone());
                    let arr = match (&p.buffers[bi].kind, seen) {
                        (_, Some(a)) => a,
                        (BufKind::Input(i), _) => inputs[*i as usize].borrow().clone(),
                        (BufKind::Constant(c), _) => self.constants[*c as usize].clone(),
                        (BufKind::Temp, None) => {
                            let store = take_owned(&mut slots[bi])?;
                            let decl = p.buffers[bi].ty;
                            let a = Array::new(decl.shape, to_buffer(store, decl.dtype)?)?;
                            if oi + 1 < p.outputs.len() {
                                done.push((bi, a.clone()));
                            }
                            a
                        }
                    };
                    if *arr.shape() == ty.shape {
                        arr
                    } else {
                        arr.reshaped(ty.shape)?
                    }
                }
            });
        }
        // Drained, not moved: moving the SmallVec is a 256-byte memcpy.
        recycle(slots.drain(..));
        Ok(outs)
    }

    /// Runs kernel `i` over `slots`.
    #[inline(always)]
    pub(crate) fn run_kernel(
        &self,
        i: usize,
        slots: &mut [Slot<'_>],
        params: &[Lit],
        limits: &crate::cancel::Limits,
        stop: Option<&(dyn Fn() -> bool + Sync)>,
    ) -> Result<(), RuntimeError> {
        let (k, code, locals) = (&self.prog.kernels[i], &self.code[i], &self.locals[i]);
        let fixed = self.fixed_args[i].as_ref();
        self.run_parts(k, code, locals, fixed, slots, params, limits, stop)
    }

    /// Runs kernel `k` (its code, buffers and checked arguments) over
    /// `slots`. Inlined: as a call of its own it cost W6 about 40
    /// instructions per call (callgrind).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn run_parts(
        &self,
        k: &Kernel,
        code: &CachedKernel,
        locals: &[tilejit_ir::kernel::BufId],
        fixed: Option<&CheckedArgs>,
        slots: &mut [Slot<'_>],
        params: &[Lit],
        limits: &crate::cancel::Limits,
        stop: Option<&(dyn Fn() -> bool + Sync)>,
    ) -> Result<(), RuntimeError> {
        if let Some(mm) = &k.matmul {
            if self.run_row_tiled(k, code, locals, slots, mm, params)? {
                return Ok(());
            }
            self.matmul(slots, mm, self.prog.buffers[mm.out.0 as usize].ty.dtype)?;
        }
        let per_call;
        let args = match fixed {
            Some(a) => KernelArgs::Checked(a),
            None => {
                per_call = code.code.layout().args(k, params);
                KernelArgs::Raw(&per_call)
            }
        };
        launch(k, code, locals, slots, args, stop).map_err(|e| kernel_error(e, Some(limits)))
    }

    /// Copies of the buffers `ids` as arrays of their declared types (for
    /// kernel observers and copies to the device).
    pub(crate) fn slot_arrays(
        &self,
        slots: &[Slot<'_>],
        ids: &[tilejit_ir::kernel::BufId],
    ) -> Result<Vec<Array>, RuntimeError> {
        ids.iter()
            .map(|b| {
                let ty = self.prog.buffers[b.0 as usize].ty;
                let data = match &slots[b.0 as usize] {
                    Slot::Borrowed(buf) => (*buf).clone(),
                    Slot::Owned(store) => to_buffer(store.try_clone()?, ty.dtype)?,
                };
                Ok(Array::new(ty.shape, data)?)
            })
            .collect()
    }

    /// A convolution's matmul on the host: the windows copied into rows
    /// (in parallel), then one GEMM of every image's rows by the shared
    /// weights. (The device reads the windows in place.)
    fn conv(
        &self,
        slots: &mut [Slot<'_>],
        mm: &tilejit_ir::kernel::MatMul,
        ic: &tilejit_ir::kernel::Im2Col,
        out_dtype: DType,
    ) -> Result<(), RuntimeError> {
        let mismatch = || RuntimeError::from(IrError::Verify("conv operand types".into()));
        let too_big = || RuntimeError::from(IrError::OutOfMemory { bytes: usize::MAX });
        let rows = mm.batch.checked_mul(mm.m).ok_or_else(too_big)?;
        let image = ic.c.checked_mul(ic.h).and_then(|x| x.checked_mul(ic.w));
        let image = image.ok_or_else(too_big)?;
        let mut cols = filled(rows.checked_mul(mm.k).ok_or_else(too_big)?, 0.0f32)?;
        {
            let x = slots[mm.a.0 as usize].f32s().ok_or_else(mismatch)?;
            if x.len() != mm.batch * image {
                return Err(mismatch());
            }
            let win = ic.window;
            let (kh, kw) = (win.kh as usize, win.kw as usize);
            let (s, pad, ow) = (win.stride as usize, win.pad as usize, ic.ow().max(1));
            // Row `r` is window `p` of image `b`: per channel and window
            // row, the image row's slice (the padding stays zero).
            let fill = |(r, row): (usize, &mut [f32])| {
                let (b, p) = (r / mm.m.max(1), r % mm.m.max(1));
                let (y, x0) = (p / ow, p % ow);
                let img = &x[b * image..(b + 1) * image];
                for ci in 0..ic.c {
                    for i in 0..kh {
                        let iy = (y * s + i).wrapping_sub(pad);
                        if iy >= ic.h {
                            continue;
                        }
                        let src = &img[(ci * ic.h + iy) * ic.w..(ci * ic.h + iy + 1) * ic.w];
                        let dst = &mut row[(ci * kh + i) * kw..(ci * kh + i + 1) * kw];
                        for (j, d) in dst.iter_mut().enumerate() {
                            if let Some(v) = src.get((x0 * s + j).wrapping_sub(pad)) {
                                *d = *v;
                            }
                        }
                    }
                }
            };
            if rows * mm.k >= 1 << 16 {
                cols.par_chunks_mut(mm.k.max(1)).enumerate().for_each(fill);
            } else {
                cols.chunks_mut(mm.k.max(1)).enumerate().for_each(fill);
            }
        }
        let threads = if rows * mm.n * mm.k >= 1 << 18 {
            rayon::current_num_threads()
        } else {
            1
        };
        let mut out = take_owned(&mut slots[mm.out.0 as usize])?;
        let w = slots[mm.b.0 as usize].f32s().ok_or_else(mismatch)?;
        let Store::F32(o) = &mut out else {
            return Err(mismatch());
        };
        let r = matmul_f32(&cols, w, o, [1, rows, mm.k, mm.n], threads);
        round_product(o, out_dtype);
        slots[mm.out.0 as usize] = Slot::Owned(out);
        Ok(r?)
    }

    fn matmul(
        &self,
        slots: &mut [Slot<'_>],
        mm: &tilejit_ir::kernel::MatMul,
        out_dtype: DType,
    ) -> Result<(), RuntimeError> {
        if let Some(ic) = &mm.im2col {
            return self.conv(slots, mm, ic, out_dtype);
        }
        let dims = [mm.batch, mm.m, mm.k, mm.n];
        let threads = if mm.m * mm.n * mm.k >= 1 << 18 {
            rayon::current_num_threads()
        } else {
            1
        };
        let mut out = take_owned(&mut slots[mm.out.0 as usize])?;
        let (a, b) = (&slots[mm.a.0 as usize], &slots[mm.b.0 as usize]);
        let mismatch = || RuntimeError::from(IrError::Verify("matmul operand types".into()));
        let r = match &mut out {
            Store::F32(o) => match (a.f32s(), b.f32s()) {
                (Some(x), Some(y)) => {
                    let r = matmul_f32(x, y, o, dims, threads);
                    round_product(o, out_dtype);
                    r
                }
                _ => return Err(mismatch()),
            },
            Store::F64(o) => match (a.f64s(), b.f64s()) {
                (Some(x), Some(y)) => matmul_f64(x, y, o, dims, threads),
                _ => return Err(mismatch()),
            },
            Store::I32(o) => {
                let v = int_matmul(&a.ints()?, &b.ints()?, dims)?;
                o.iter_mut().zip(v).for_each(|(d, s)| *d = s as i32);
                Ok(())
            }
            Store::I64(o) => {
                let v = int_matmul(&a.ints()?, &b.ints()?, dims)?;
                o.iter_mut().zip(v).for_each(|(d, s)| *d = s);
                Ok(())
            }
            Store::U8(o) => {
                let v = int_matmul(&a.ints()?, &b.ints()?, dims)?;
                o.iter_mut().zip(v).for_each(|(d, s)| *d = s as u8);
                Ok(())
            }
            Store::I8(o) => {
                let v = int_matmul(&a.ints()?, &b.ints()?, dims)?;
                o.iter_mut().zip(v).for_each(|(d, s)| *d = s as i8);
                Ok(())
            }
            Store::Bool(_) => return Err(mismatch()),
        };
        slots[mm.out.0 as usize] = Slot::Owned(out);
        Ok(r?)
    }
}

/// How a row-tiled launch hands one buffer to each tile.
#[derive(Copy, Clone, PartialEq)]
enum TilePart {
    /// The whole buffer (every access broadcasts it across rows).
    Whole,
    /// Rows of this many elements, the tile's own.
    Rows(usize),
}

impl HostProgram {
    /// Runs a matmul kernel as one tile of rows per pool thread: each
    /// tile's product rows come from a single-threaded `gemm` and the
    /// epilogue runs on them at once, while they are still in the core's
    /// cache, instead of a parallel `gemm` over all rows and then a second
    /// parallel pass. Applies to an f32 `[m, k] @ [k, n]` whose epilogue
    /// domain is the product's `[m, n]` and whose stages read every buffer
    /// either broadcast across rows (row stride 0) or row by row (`[n, 1]`
    /// over `m * n` elements, the only way they may write one); returns
    /// false, having done nothing, for anything else.
    fn run_row_tiled(
        &self,
        k: &Kernel,
        code: &CachedKernel,
        locals: &[tilejit_ir::kernel::BufId],
        slots: &mut [Slot<'_>],
        mm: &tilejit_ir::kernel::MatMul,
        params: &[Lit],
    ) -> Result<bool, RuntimeError> {
        let threads = rayon::current_num_threads();
        let (m, n) = (mm.m, mm.n);
        let layout = code.code.layout();
        let plain = mm.batch == 1
            && mm.im2col.is_none()
            && k.domain == [m, n]
            && threads >= 2
            && m >= threads
            && m * n * mm.k >= 1 << 18
            && layout.scratch == 0
            && self.prog.buffer(mm.out).ty.dtype == DType::F32;
        // Tiles split buffers by rows, which an offset window would cross.
        let windowed = k.accesses().any(|a| a.offset != 0);
        if !plain || windowed || k.accesses().any(|a| a.buf == mm.a || a.buf == mm.b) {
            return Ok(false);
        }
        // How each local buffer is split: `a` and the product by rows,
        // `b` whole, the rest by how the stages access them.
        let mut parts = Vec::with_capacity(locals.len());
        for &b in locals {
            let part = if b == mm.a {
                TilePart::Rows(mm.k)
            } else if b == mm.b {
                TilePart::Whole
            } else {
                let mut part = if b == mm.out {
                    Some(TilePart::Rows(n))
                } else {
                    None
                };
                let row_sized = self.prog.buffer(b).ty.shape.numel() == m * n;
                let stored = k.stages.iter().any(|s| {
                    matches!(s, tilejit_ir::kernel::Stage::Store { access, .. } if access.buf == b)
                });
                for a in k.accesses().filter(|a| a.buf == b) {
                    let this = match a.strides.as_slice() {
                        [0, _] if !stored => TilePart::Whole,
                        &[s0, 1] if s0 == n as i64 && row_sized => TilePart::Rows(n),
                        _ => return Ok(false),
                    };
                    if part.is_some_and(|p| p != this) {
                        return Ok(false);
                    }
                    part = Some(this);
                }
                part.unwrap_or(TilePart::Whole)
            };
            parts.push(part);
        }
        let Some(out_at) = locals.iter().position(|&b| b == mm.out) else {
            return Ok(false);
        };
        let Store::F32(mut product) = take_owned(&mut slots[mm.out.0 as usize])? else {
            return Err(IrError::Verify("matmul product is not f32".into()).into());
        };
        let tile = m.div_ceil(threads);
        let tiles = m.div_ceil(tile);
        // Each tile's buffers: row-split ones as the tile's own rows, whole
        // ones shared read-only; the matmul operands are not accessed.
        let mut per_tile: Vec<Vec<BufArg<'_>>> = (0..tiles)
            .map(|_| (0..locals.len()).map(|_| BufArg::empty()).collect())
            .collect();
        let (mut a, mut bm) = (None, None);
        for (i, slot) in slots.iter_mut().enumerate() {
            if i == mm.a.0 as usize || i == mm.b.0 as usize {
                let slot: &Slot<'_> = slot;
                if i == mm.a.0 as usize {
                    a = slot.f32s();
                }
                if i == mm.b.0 as usize {
                    bm = slot.f32s();
                }
                continue;
            }
            let Some(at) = locals.iter().position(|b| b.0 as usize == i) else {
                continue;
            };
            match parts[at] {
                TilePart::Whole => {
                    let whole = slot.arg_read();
                    for t in per_tile.iter_mut() {
                        t[at] = whole.share().unwrap_or_else(|| BufArg::empty());
                    }
                }
                TilePart::Rows(len) => {
                    let size = layout.elem_bytes[at];
                    let pieces = slot.arg().split(tile * len * size);
                    for (t, piece) in per_tile.iter_mut().zip(pieces) {
                        t[at] = piece;
                    }
                }
            }
        }
        let (Some(a), Some(bm)) = (a, bm) else {
            drop(per_tile);
            slots[mm.out.0 as usize] = Slot::Owned(Store::F32(product));
            return Ok(false);
        };
        let args = layout.args(k, params);
        code.launches.fetch_add(1, Ordering::Relaxed);
        let result = product
            .par_chunks_mut(tile * n)
            .zip(a.par_chunks(tile * mm.k))
            .zip(per_tile.into_par_iter())
            .try_for_each(|((out, a), mut bufs)| -> Result<(), RuntimeError> {
                let rows = out.len() / n;
                matmul_f32(a, bm, out, [1, rows, mm.k, n], 1)?;
                bufs[out_at] = BufArg::write(out);
                let mut args = args.clone();
                args[0] = rows as i64;
                Ok(code.code.call(&mut bufs, &args, 0, rows)?)
            });
        slots[mm.out.0 as usize] = Slot::Owned(Store::F32(product));
        result.map(|()| true)
    }
}

/// Wrapping integer matmul (ints are not the fast path).
fn int_matmul(a: &[i64], b: &[i64], [batch, m, k, n]: [usize; 4]) -> Result<Vec<i64>, IrError> {
    let mut out = filled(batch * m * n, 0i64)?;
    for bi in 0..batch {
        for i in 0..m {
            for p in 0..k {
                let x = a[bi * m * k + i * k + p];
                for j in 0..n {
                    let o = &mut out[bi * m * n + i * n + j];
                    *o = o.wrapping_add(x.wrapping_mul(b[bi * k * n + p * n + j]));
                }
            }
        }
    }
    Ok(out)
}

/// The kernel arguments of `locals`, in that order (storage the program
/// owns writable, arguments read-only).
fn kernel_bufs<'s>(
    slots: &'s mut [Slot<'_>],
    locals: &[tilejit_ir::kernel::BufId],
    bufs: &mut SmallVec<[BufArg<'s>; 8]>,
) {
    // Filled in place: a returned SmallVec is a memcpy per kernel, a
    // measurable share of a tiny call.
    bufs.clear();
    bufs.extend(locals.iter().map(|_| BufArg::empty()));
    for (i, slot) in slots.iter_mut().enumerate() {
        if let Some(at) = locals.iter().position(|b| b.0 as usize == i) {
            bufs[at] = slot.arg();
        }
    }
}

/// An f16/bf16 product (computed in f32) rounds like every other op's
/// result.
fn round_product(o: &mut [f32], dtype: DType) {
    match dtype {
        DType::F16 => o
            .iter_mut()
            .for_each(|v| *v = half::f16::from_f32(*v).to_f32()),
        DType::BF16 => o
            .iter_mut()
            .for_each(|v| *v = half::bf16::from_f32(*v).to_f32()),
        _ => {}
    }
}

/// A failed launch as the user sees it: a stop says which limit stopped
/// it; a gather's index outside its axis is the data's fault (E1), not
/// the kernel's.
fn kernel_error(e: RuntimeError, limits: Option<&crate::cancel::Limits>) -> RuntimeError {
    match e {
        RuntimeError::Codegen(CodegenError::Stopped { kernel }) => {
            match limits.map(|l| l.check(&format!("kernel `{kernel}`"))) {
                Some(Err(stopped)) => stopped,
                _ => RuntimeError::Stopped {
                    what: format!("kernel `{kernel}`"),
                    why: "was stopped".into(),
                },
            }
        }
        RuntimeError::Codegen(CodegenError::IndexOutOfRange { len, .. }) => {
            IrError::IndexOutOfRange {
                op: "gather",
                index: None,
                len: len.max(0) as usize,
            }
            .into()
        }
        e => e,
    }
}

/// An input buffer as a read-only kernel argument (f16/bf16, which the
/// host computes as f32, never reach here: see [`Tiny::plan`]).
#[inline]
fn buffer_arg(b: &Buffer) -> BufArg<'_> {
    match b {
        Buffer::F32(v) => BufArg::read(v),
        Buffer::F64(v) => BufArg::read(v),
        Buffer::I32(v) => BufArg::read(v),
        Buffer::I64(v) => BufArg::read(v),
        Buffer::Bool(v) => BufArg::read(v),
        Buffer::U8(v) => BufArg::read(v),
        Buffer::I8(v) => BufArg::read(v),
        Buffer::F16(_) | Buffer::BF16(_) => BufArg::empty(),
    }
}

/// Owned storage as a writable kernel argument.
#[inline]
fn store_arg(s: &mut Store) -> BufArg<'_> {
    match s {
        Store::F32(v) => BufArg::write(v),
        Store::F64(v) => BufArg::write(v),
        Store::I32(v) => BufArg::write(v),
        Store::I64(v) => BufArg::write(v),
        Store::Bool(v) => BufArg::write(v),
        Store::U8(v) => BufArg::write(v),
        Store::I8(v) => BufArg::write(v),
    }
}

/// Runs one kernel over its whole domain: in chunks over the rayon pool,
/// or on the calling thread when it is small.
fn launch(
    k: &Kernel,
    code: &CachedKernel,
    locals: &[tilejit_ir::kernel::BufId],
    slots: &mut [Slot<'_>],
    args: KernelArgs<'_>,
    stop: Option<&(dyn Fn() -> bool + Sync)>,
) -> Result<(), RuntimeError> {
    let units = k.units();
    code.launches.fetch_add(1, Ordering::Relaxed);
    if units == 0 {
        return Ok(());
    }
    let mut bufs = SmallVec::new();
    kernel_bufs(slots, locals, &mut bufs);
    let work: usize = k.domain.iter().product();
    // Small kernels stay on this thread (and never ask rayon anything).
    let threads = if work < PARALLEL_MIN || units < 2 {
        1
    } else {
        rayon::current_num_threads()
    };
    let chunk = if threads < 2 {
        units
    } else {
        let size = units.div_ceil((threads * 4).min(units));
        if k.is_flat() {
            size.div_ceil(16) * 16
        } else {
            size
        }
    };
    Ok(code.code.launch(&mut bufs, args, units, chunk, stop)?)
}

/// A program output that is one of its params, as a rank-0 array of `d`.
pub(crate) fn param_output(params: &[Lit], i: u32, d: DType) -> Result<Array, IrError> {
    let lit = params.get(i as usize).copied().unwrap_or(Lit::Int(0));
    let lit = match lit {
        Lit::Float(f) => Lit::from_f64(f, d),
        other => Lit::from_i64(other.as_i64(), d),
    };
    Array::full(tilejit_ir::TensorType::scalar(d), lit)
}
