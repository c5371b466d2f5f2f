//! The only module of tilejit that enters native code outside safe Rust:
//! JIT-compiled kernels (the typed handle [`KernelCode`]) and the `gemm`
//! crate's matrix multiply ([`matmul_view_f32`], [`matmul_f32_strided`], ...; child `gemv`
//! runs products of a few rows, child `conv` NCHW convolutions as a direct implicit GEMM), and (child
//! [`sys`]) the OS calls that allocate fresh buffers onto huge pages
//! ([`sys::zeroed_vec`]) and read the coarse clock. Its children `avx2` and `avx512` hold the
//! 8- and 16-lane math helpers ([`block_math`], their math written once in
//! `lanes`) that generated code calls on its own block buffers and on row
//! ranges its launch's bounds check covers. Each entry point
//! checks every pointer and size against what the callee will touch first,
//! so safe callers cannot make native code read or write out of bounds.
#![allow(unsafe_code)]

use tilejit_ir::kernel::MatView;

pub use conv::conv_f32_nchw;
pub use panels::{matmul_f32_panels, PackedPanels};
pub use windows::conv_f32_panels;
pub use winograd::{
    conv_f32_winograd, conv_f32_winograd_images, winograd_fits, winograd_fits_images,
    winograd_fits_kept, winograd_form, WinogradForm, WinogradLayout, WinogradTile, WinogradWeights,
};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod conv;
mod gemv;
#[cfg(target_arch = "x86_64")]
mod lanes;
#[cfg(target_arch = "x86_64")]
mod lanes16;
mod panels;
mod phases;
pub mod sys;
mod windows;
mod winograd;

use super::layout::{ArgLayout, CheckedArgs};
use super::BlockMath;
use crate::CodegenError;
use cranelift_jit::JITModule;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use tilejit_ir::DType;

/// Elements per block buffer that generated code hands to a [`block_math`]
/// helper (also the block of a blocked f32 sum, so a sum's helper math runs
/// once per sum block).
pub const MATH_BLOCK: usize = 1024;

/// One [`block_math`] helper: `fn(src: *const f32, dst: *mut f32, n: i64,
/// s: f32, pf: i64, sum: *mut f32)` writes `op(src[i] + s)` to `dst[i]` for
/// `i < n` for the unary ops (`s = -0.0` adds nothing, as `x + -0.0 == x`),
/// `src[i] / s` for `div` (`src == dst` works in place), prefetching the
/// bytes `pf` past what it reads when `pf != 0` (generated code passes the
/// distance to the next row when this pass re-reads a row an earlier pass
/// brought in: the next row then streams in while this one computes), and,
/// when `sum` is not null, writes to `sum[0..16]` the lane sums from +0.0
/// of its results' whole groups of 16 (lane `l` adding results `16m + l` in
/// order, as the inline f32 sum's four 4-lane accumulators do); `max` and
/// `min` fold `src[0..n]` (`n` a multiple of 16) from the identity `s` into
/// the sixteen lanes of the inline fold's four 4-lane accumulators, written
/// to `dst[0..16]` (lanes that saw a NaN are NaN), and ignore `pf` and
/// `sum`; `stream` copies `src[0..n]` to `dst`, the whole cache lines of
/// `dst` with non-temporal stores, and fences (see [`super::StreamStores`]).
#[derive(Copy, Clone, Debug)]
pub struct BlockFn {
    /// The op's name: `exp`, `log`, `tanh`, `sigmoid`, `gelu`, `div`,
    /// `max`, `min` or `stream`.
    pub op: &'static str,
    /// The symbol generated code imports it by.
    pub symbol: &'static str,
    /// Its address.
    pub addr: *const u8,
}

/// A block helper's signature (see [`BlockFn`]).
#[cfg(target_arch = "x86_64")]
type HelperFn = unsafe extern "C" fn(*const f32, *mut f32, i64, f32, i64, *mut f32);

/// The helpers `choice` names: versions of the inline f32 math and of
/// division by a scalar on 8 (AVX2 + FMA) or 16 (AVX-512F) lanes,
/// bit-identical to the inline code; `None` for [`BlockMath::Off`], or for
/// [`BlockMath::Widest`] on a CPU with neither. Naming a width this CPU
/// lacks is an error. Generated code calls them on at most [`MATH_BLOCK`]
/// elements of its own stack buffers, or of a row of its buffers that it
/// would load or store itself (a range the launch's bounds check covers),
/// which is what makes the calls sound.
pub fn block_math(choice: BlockMath) -> Result<Option<[BlockFn; 9]>, CodegenError> {
    #[cfg(target_arch = "x86_64")]
    {
        let f = super::cpu_features();
        // Both widths repeat the inline math built with FMA.
        let (avx2, avx512) = (f.avx2 && f.fma, f.avx512f && f.fma);
        let set = |helpers: [(&'static str, &'static str, HelperFn); 9]| {
            helpers.map(|(op, symbol, f)| BlockFn {
                op,
                symbol,
                addr: f as *const u8,
            })
        };
        let (x8, x16) = (|| set(avx2::HELPERS), || set(avx512::HELPERS));
        match choice {
            BlockMath::Off => Ok(None),
            BlockMath::Avx2 if avx2 => Ok(Some(x8())),
            BlockMath::Avx2 => Err(CodegenError::Cpu("AVX2 and FMA")),
            BlockMath::Avx512 if avx512 => Ok(Some(x16())),
            BlockMath::Avx512 => Err(CodegenError::Cpu("AVX-512F and FMA")),
            BlockMath::Widest if avx512 => Ok(Some(x16())),
            BlockMath::Widest if avx2 => Ok(Some(x8())),
            BlockMath::Widest => Ok(None),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    match choice {
        BlockMath::Off | BlockMath::Widest => Ok(None),
        BlockMath::Avx2 => Err(CodegenError::Cpu("AVX2 and FMA")),
        BlockMath::Avx512 => Err(CodegenError::Cpu("AVX-512F and FMA")),
    }
}

/// `fn(bufs, args, start, end)`: the native calling convention of a kernel.
/// Unsafe to call: only after [`ArgLayout`]'s bounds check passed.
type KernelFn = unsafe extern "C" fn(*const *mut u8, *const i64, i64, i64) -> i64;

/// Element types kernel storage may hold: plain numbers whose every bit
/// pattern is a value, and `bool`, which generated code writes only as 0
/// or 1. Each is the storage of one [`DType`] ([`KernelElem::DTYPE`]):
/// `f32` also holds f16 and bf16 values, and `u64` (scratch rows and u64
/// tensors) counts as `i64`. A launch refuses a buffer whose type is not the one the kernel's
/// code was generated for.
pub trait KernelElem: Copy + Send + Sync + sealed::Sealed {
    /// The dtype whose storage this type is.
    const DTYPE: DType;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! kernel_elems {
    ($($t:ty => $d:ident),*) => {
        $( impl sealed::Sealed for $t {} impl KernelElem for $t { const DTYPE: DType = DType::$d; } )*
    };
}
kernel_elems!(
    f32 => F32, f64 => F64, i32 => I32, i64 => I64, u8 => U8, i8 => I8, u64 => I64, bool => Bool,
    i16 => I16, u16 => U16, u32 => U32
);

/// One buffer handed to a kernel: a borrowed slice, read-only or writable,
/// with its element type ([`KernelElem::DTYPE`]). Only the constructors
/// make one, so its address, size and type always describe live storage
/// the caller lent for `'a`; every call checks that size against what the
/// kernel reaches, and that type and the address's alignment against what
/// its code reads and writes, which keeps native code inside the storage
/// and writing only valid values (0 or 1 into a `bool`).
///
/// ```
/// use tilejit_codegen::host::BufArg;
/// let mut out = vec![0f32; 8];
/// let input = [1f32; 8];
/// let bufs = [BufArg::read(&input), BufArg::write(&mut out)];
/// assert_eq!((bufs[0].bytes(), bufs[1].writable()), (32, true));
/// ```
///
/// Safe code cannot make one from an address:
///
/// ```compile_fail
/// let b = tilejit_codegen::host::BufArg { ptr: 0x1000, bytes: 1 << 40, writable: true };
/// ```
///
/// nor lend the same storage writable twice:
///
/// ```compile_fail
/// use tilejit_codegen::host::BufArg;
/// let mut v = vec![0f32; 4];
/// let (a, b) = (BufArg::write(&mut v), BufArg::write(&mut v));
/// drop((a, b));
/// ```
#[derive(Debug)]
pub struct BufArg<'a> {
    ptr: *mut u8,
    bytes: usize,
    writable: bool,
    /// The element type; `None` only for [`BufArg::empty`].
    dtype: Option<DType>,
    _borrow: PhantomData<&'a mut [u8]>,
}

// SAFETY: a `BufArg` is a `&[T]` or `&mut [T]` of a `KernelElem` (all
// `Send + Sync`) in another form; native code is only entered through
// `&mut [BufArg]`, so a writable one is used by one call at a time except
// inside `KernelCode::launch`, which splits it into disjoint unit ranges.
unsafe impl Send for BufArg<'_> {}
// SAFETY: `&BufArg` only reads its size and flag, or (`share`) makes a
// read-only copy of a read-only buffer.
unsafe impl Sync for BufArg<'_> {}

impl<'a> BufArg<'a> {
    /// Storage the kernel only reads.
    #[inline]
    pub fn read<T: KernelElem>(v: &'a [T]) -> BufArg<'a> {
        BufArg {
            ptr: v.as_ptr().cast_mut().cast(),
            bytes: std::mem::size_of_val(v),
            writable: false,
            dtype: Some(T::DTYPE),
            _borrow: PhantomData,
        }
    }

    /// Storage the kernel may write.
    #[inline]
    pub fn write<T: KernelElem>(v: &'a mut [T]) -> BufArg<'a> {
        BufArg {
            ptr: v.as_mut_ptr().cast(),
            bytes: std::mem::size_of_val(v),
            writable: true,
            dtype: Some(T::DTYPE),
            _borrow: PhantomData,
        }
    }

    /// No storage: zero bytes, read-only (for a buffer the kernel does not
    /// touch).
    #[inline]
    pub fn empty() -> BufArg<'static> {
        BufArg {
            ptr: std::ptr::NonNull::<u64>::dangling().as_ptr().cast(),
            bytes: 0,
            writable: false,
            dtype: None,
            _borrow: PhantomData,
        }
    }

    /// Its size in bytes.
    #[inline]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the kernel may write it.
    #[inline]
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// The dtype whose storage it is (`f32` for f16 and bf16 too; `None`
    /// for [`BufArg::empty`], which fits any buffer the call does not
    /// reach).
    #[inline]
    pub fn dtype(&self) -> Option<DType> {
        self.dtype
    }

    /// Its address (for the alignment check).
    #[inline]
    pub(crate) fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// Another handle to a read-only buffer (`None` for a writable one,
    /// which only one call at a time may hold).
    pub fn share(&self) -> Option<BufArg<'a>> {
        (!self.writable).then_some(BufArg { ..*self })
    }

    /// Splits the buffer into consecutive pieces of `piece` bytes (the last
    /// one shorter), each lent for as long as the whole was: the row tiles
    /// of a buffer that several calls fill in parallel. A piece keeps the
    /// element type; one that does not start on an element boundary is
    /// refused by the calls it is lent to.
    pub fn split(self, piece: usize) -> Vec<BufArg<'a>> {
        let piece = piece.max(1);
        (0..self.bytes)
            .step_by(piece)
            .map(|at| BufArg {
                // SAFETY: `at < self.bytes`, so the offset stays inside the
                // borrowed storage.
                ptr: unsafe { self.ptr.add(at) },
                bytes: piece.min(self.bytes - at),
                ..self
            })
            .collect()
    }
}

/// A kernel's `args`: checked once ahead ([`KernelCode::check_args`]), or
/// raw (checked on every call).
#[derive(Copy, Clone, Debug)]
pub enum KernelArgs<'a> {
    /// Checked once; per call only buffer sizes are compared.
    Checked(&'a CheckedArgs),
    /// Checked on every call.
    Raw(&'a [i64]),
}

/// Relinks machine code that [`super::compile`] made for `k` against this
/// process's helper functions: how the disk cache and
/// `JitFunction::load_code` skip a compile. Only relocations to the
/// helpers a compile may call are accepted; anything else is an error.
///
/// # Safety
///
/// The bytes are run as they are: nothing can check what machine code
/// does. The caller must know that `image` is the unchanged output of
/// [`super::compile`] for this very `k`, `dtype_of` and `opts`, by this
/// build of tilejit (same Cranelift) for this CPU's ISA flags: code
/// written by anyone else, damaged (a checksum only proves the bytes
/// were not changed by accident, not who wrote them), or made for
/// another kernel or CPU may read and write out of bounds, crash, hang
/// or compute wrong results. The runtime vouches for its disk cache this
/// way (a directory owned by this user and writable by no one else, each
/// file matched to every key component), and for a snapshot only when
/// its user calls the unsafe `load_code`.
pub unsafe fn load(
    k: &tilejit_ir::kernel::Kernel,
    dtype_of: &dyn Fn(tilejit_ir::kernel::BufId) -> tilejit_ir::DType,
    opts: super::CodegenOptions,
    image: &super::CodeImage,
) -> Result<KernelCode, CodegenError> {
    super::link_unchecked(k, dtype_of, opts, image)
}

/// Compiled native code for one kernel structure.
pub struct KernelCode {
    func: KernelFn,
    /// Unique in the process: tags the [`CheckedArgs`] checked for it.
    id: u64,
    /// Owns the code pages; freed on drop.
    module: Mutex<Option<JITModule>>,
    /// Layout of the arguments, and what every access may touch.
    layout: ArgLayout,
    /// The kernel's name (for errors).
    pub name: String,
    /// Size of the machine code in bytes.
    pub code_bytes: usize,
    /// The code as the disk cache stores it, if it can be relinked.
    pub(crate) image: Option<Arc<super::CodeImage>>,
}

// SAFETY: the code pages are immutable once finalised and the function is
// reentrant (it keeps no state outside its arguments), so calling it from
// several threads at once is sound. The module is only touched again in
// `Drop`, behind a mutex.
unsafe impl Send for KernelCode {}
// SAFETY: as above: `&KernelCode` only ever calls immutable, reentrant code.
unsafe impl Sync for KernelCode {}

impl KernelCode {
    pub(crate) fn new(
        module: JITModule,
        ptr: *const u8,
        layout: ArgLayout,
        name: String,
        code_bytes: usize,
    ) -> KernelCode {
        // SAFETY: `ptr` is the finalised address of a function that codegen
        // declared with exactly the signature of `KernelFn` (four pointer-size
        // integers, SystemV / "C" calling convention, no return value):
        // compiled now, or relinked by `load` from bytes whose caller
        // vouched, under `load`'s unsafe contract, that the same build
        // compiled them for this kernel and CPU.
        let func = unsafe { std::mem::transmute::<*const u8, KernelFn>(ptr) };
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        KernelCode {
            func,
            id: IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            module: Mutex::new(Some(module)),
            layout,
            name,
            code_bytes,
            image: None,
        }
    }

    /// The machine code and its relocations by symbol, for the disk
    /// cache (`None` if some relocation cannot be relinked by name).
    pub fn image(&self) -> Option<&super::CodeImage> {
        self.image.as_deref()
    }

    /// Layout of the arguments, and what every access may touch.
    #[inline]
    pub fn layout(&self) -> &ArgLayout {
        &self.layout
    }

    /// Checks `args` ([`ArgLayout::args`]) once for every launch range,
    /// for [`Self::call_checked`] and [`KernelArgs::Checked`] calls of this
    /// code (and no other: the result is tagged).
    pub fn check_args(&self, args: Vec<i64>) -> Result<CheckedArgs, CodegenError> {
        self.layout
            .check_args(args, self.id)
            .map_err(|m| self.bad(m))
    }

    fn bad(&self, message: String) -> CodegenError {
        CodegenError::Launch {
            kernel: self.name.clone(),
            message,
        }
    }

    /// Runs the kernel over launch units `start..end` (elements of a flat
    /// kernel, rows otherwise). `bufs` are the kernel's buffers in layout
    /// order followed by its scratch buffers; `args` is built by
    /// [`ArgLayout::args`]. Every access the kernel can make over
    /// `start..end` is checked to stay inside its buffer first.
    pub fn call(
        &self,
        bufs: &mut [BufArg<'_>],
        args: &[i64],
        start: usize,
        end: usize,
    ) -> Result<(), CodegenError> {
        self.check(bufs, KernelArgs::Raw(args), start, end)?;
        self.enter(bufs, args, start, end)
    }

    /// [`Self::call`] with arguments checked once ahead
    /// ([`Self::check_args`]): per call only the buffer sizes are
    /// compared, which matters for tiny kernels called often.
    pub fn call_checked(
        &self,
        bufs: &mut [BufArg<'_>],
        args: &CheckedArgs,
        start: usize,
        end: usize,
    ) -> Result<(), CodegenError> {
        self.check(bufs, KernelArgs::Checked(args), start, end)?;
        self.enter(bufs, args.args(), start, end)
    }

    fn check(
        &self,
        bufs: &[BufArg<'_>],
        args: KernelArgs<'_>,
        start: usize,
        end: usize,
    ) -> Result<(), CodegenError> {
        match args {
            KernelArgs::Checked(a) if a.code != self.id => {
                Err("arguments checked for another kernel's code".to_string())
            }
            KernelArgs::Checked(a) => self.layout.check_checked(bufs, a, start, end),
            KernelArgs::Raw(a) => self.layout.check(bufs, a, start, end),
        }
        .map_err(|m| self.bad(m))
    }

    /// Runs the kernel over all its `units` (`bufs` without scratch: each
    /// call gets scratch rows of its own), split into calls of `chunk`
    /// units that run in parallel on the rayon pool when there are several
    /// and no two units write the same element (else as one call). When
    /// `stop` is given, it is asked before each of those parallel calls;
    /// once it says true no further call starts and the launch fails with
    /// [`CodegenError::Stopped`].
    ///
    /// Everything is checked once, for the whole launch, before it is
    /// chunked, allocates or runs (the counts of buffers and args, whose
    /// code checked `args`, the domain, `units` against it, every buffer's
    /// size, type and alignment): a refused launch writes nothing.
    #[inline]
    pub fn launch(
        &self,
        bufs: &mut [BufArg<'_>],
        args: KernelArgs<'_>,
        units: usize,
        chunk: usize,
        stop: Option<&(dyn Fn() -> bool + Sync)>,
    ) -> Result<(), CodegenError> {
        let raw = match args {
            KernelArgs::Checked(a) => a.args(),
            KernelArgs::Raw(a) => a,
        };
        let Some(cols) = self.check_launch(bufs, args, units)? else {
            return Ok(()); // no units: nothing to run
        };
        let scratch = self.layout.scratch;
        let chunk = chunk.max(1);
        if scratch == 0 && units <= chunk {
            // The common small call: one range, no scratch rows.
            return self.enter(bufs, raw, 0, units);
        }
        // Each call's scratch rows: `scratch` rows of `cols` 8-byte slots.
        let row_bytes = cols
            .checked_mul(8)
            .filter(|b| {
                b.checked_mul(scratch)
                    .is_some_and(|t| t <= isize::MAX as usize)
            })
            .ok_or_else(|| self.bad(format!("{scratch} scratch rows of {cols} slots overflow")))?;
        let call = |bufs: &[BufArg<'_>], start: usize, end: usize| {
            if scratch == 0 {
                return self.enter(bufs, raw, start, end);
            }
            let mut rows: Vec<Vec<u64>> = Vec::with_capacity(scratch);
            for _ in 0..scratch {
                let mut row = Vec::new();
                if row.try_reserve_exact(cols).is_err() {
                    return Err(CodegenError::OutOfMemory {
                        kernel: self.name.clone(),
                        what: "a scratch row",
                        bytes: row_bytes,
                    });
                }
                row.resize(cols, 0u64);
                rows.push(row);
            }
            let mut all: Vec<BufArg<'_>> = bufs.iter().map(|b| BufArg { ..*b }).collect();
            all.extend(rows.iter_mut().map(|r| BufArg::write(r)));
            // Rows of `cols` slots fit the check `check_launch` ran.
            self.enter(&all, raw, start, end)
        };
        // Small calls (the common case) ask nothing more than their check.
        if units <= chunk || !self.layout.writes_disjoint_units(raw) {
            return call(bufs, 0, units);
        }
        let shared = SharedBufs(bufs);
        use rayon::prelude::*;
        (0..units.div_ceil(chunk))
            .into_par_iter()
            .try_for_each(|i| {
                if stop.is_some_and(|f| f()) {
                    return Err(CodegenError::Stopped {
                        kernel: self.name.clone(),
                    });
                }
                // SAFETY: each call covers its own range of units, and
                // `writes_disjoint_units` proved that the elements any two
                // units write are distinct, so these copies of the writable
                // buffers are never written at the same place by two calls;
                // read-only ones are never written. `bufs` stays borrowed
                // until all calls end.
                let mine = unsafe { shared.copies() };
                let start = i * chunk;
                call(&mine, start, start.saturating_add(chunk).min(units))
            })
    }

    /// Checks a launch of units `0..units` with `bufs` (no scratch rows)
    /// once: every range inside it then stays inside every buffer (a flat
    /// access reaches furthest at the last unit; a row access's reach does
    /// not depend on the range). The row length, or `None` for no units.
    fn check_launch(
        &self,
        bufs: &[BufArg<'_>],
        args: KernelArgs<'_>,
        units: usize,
    ) -> Result<Option<usize>, CodegenError> {
        let n = self.layout.buffers.len();
        match args {
            KernelArgs::Checked(a) if a.code != self.id => {
                Err("arguments checked for another kernel's code".to_string())
            }
            KernelArgs::Checked(a) if bufs.len() != a.buffer_count() => Err(format!(
                "{} buffers given, {} expected",
                bufs.len(),
                a.buffer_count()
            )),
            KernelArgs::Checked(a) => self.layout.check_checked_main(bufs, a, 0, units),
            KernelArgs::Raw(a) => self
                .layout
                .check_counts(bufs.len(), n, a.len())
                .and_then(|()| self.layout.check_main(bufs, a, 0, units)),
        }
        .map_err(|m| self.bad(m))
    }

    /// Enters the native code; only after one of the bounds checks passed.
    fn enter(
        &self,
        bufs: &[BufArg<'_>],
        args: &[i64],
        start: usize,
        end: usize,
    ) -> Result<(), CodegenError> {
        if start >= end {
            return Ok(());
        }
        // Most kernels take a handful of buffers: keep their pointers on the
        // stack (a heap vector costs more than a small kernel's work).
        let mut small = [std::ptr::null_mut::<u8>(); 16];
        let heap: Vec<*mut u8>;
        let ptrs: &[*mut u8] = if bufs.len() <= small.len() {
            for (p, b) in small.iter_mut().zip(bufs) {
                *p = b.ptr;
            }
            &small[..bufs.len()]
        } else {
            heap = bufs.iter().map(|b| b.ptr).collect();
            &heap
        };
        // SAFETY: every caller ran a bounds check first: `check` proved for
        // these `args` and start..end, `check_checked` for a superset range
        // (every unit of the domain) of the same `args`, and `launch`'s
        // `check_launch` for `0..units`, a superset of each of its calls'
        // ranges, that every load and store the kernel performs (computed
        // from the dims and strides in `args`) lies within its buffer, that
        // each buffer holds the element type the code uses for it at an
        // address aligned to it (so bools read are 0 or 1, and the code
        // stores only 0 or 1 into them), that written buffers are
        // writable, and that scratch buffers hold a full row (`launch` makes
        // its own). Each `BufArg` borrows its storage for longer than this
        // call.
        let status = unsafe { (self.func)(ptrs.as_ptr(), args.as_ptr(), start as i64, end as i64) };
        // Nonzero: a gather stopped at an index outside its axis (the
        // status is that axis's length plus one).
        match status {
            0 => Ok(()),
            s => Err(CodegenError::IndexOutOfRange {
                kernel: self.name.clone(),
                len: s - 1,
            }),
        }
    }
}

/// The buffers of a parallel launch, shared by its calls.
struct SharedBufs<'s, 'a>(&'s [BufArg<'a>]);

// SAFETY: see `KernelCode::launch`: the calls write disjoint elements.
unsafe impl Sync for SharedBufs<'_, '_> {}

impl<'a> SharedBufs<'_, 'a> {
    /// Copies of every handle, writable ones included.
    ///
    /// # Safety
    /// The calls given these copies must not write an element another call
    /// reads or writes.
    unsafe fn copies(&self) -> Vec<BufArg<'a>> {
        self.0.iter().map(|b| BufArg { ..*b }).collect()
    }
}

impl Drop for KernelCode {
    fn drop(&mut self) {
        if let Ok(mut m) = self.module.lock() {
            if let Some(module) = m.take() {
                // SAFETY: `self` is being dropped, so no `call` can be running
                // or start later: nothing refers to the code any more.
                unsafe { module.free_memory() };
            }
        }
    }
}

impl std::fmt::Debug for KernelCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelCode")
            .field("name", &self.name)
            .field("code_bytes", &self.code_bytes)
            .finish()
    }
}

/// `count` lines of `len` elements, one every `step` from `at` in `out`,
/// as slices of their own: the rows of a view of unit column stride, or
/// the columns of one of unit row stride. The caller has checked that they
/// fit, and for more than one that `step >= len`.
fn view_lines(
    out: &mut [f32],
    at: usize,
    count: usize,
    len: usize,
    step: usize,
) -> Vec<&mut [f32]> {
    let mut lines = Vec::with_capacity(count);
    if count == 0 {
        return lines;
    }
    let mut rest = &mut out[at..];
    for x in 0..count {
        let (line, tail) = std::mem::take(&mut rest).split_at_mut(len);
        lines.push(line);
        if x + 1 < count {
            rest = &mut tail[step - len..];
        }
    }
    lines
}

/// Each of `lines` cut into consecutive pieces `widths` long (what is left
/// of a line dropped): per piece, its part of every line, for a task of
/// its own.
fn cut_lines<'o>(lines: Vec<&'o mut [f32]>, widths: &[usize]) -> Vec<Vec<&'o mut [f32]>> {
    let mut pieces: Vec<Vec<&mut [f32]>> = widths
        .iter()
        .map(|_| Vec::with_capacity(lines.len()))
        .collect();
    for mut line in lines {
        for (piece, &w) in pieces.iter_mut().zip(widths) {
            let (mine, rest) = std::mem::take(&mut line).split_at_mut(w);
            piece.push(mine);
            line = rest;
        }
    }
    pieces
}

/// A matrix inside a slice: element `(i, j)` of a `rows x cols` matrix is
/// `offset + i*row_stride + j*col_stride` (any order: a column-major or
/// transposed operand, a column block of a wider matrix).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct GemmView {
    /// The index of element `(0, 0)`.
    pub offset: usize,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Step between rows.
    pub row_stride: usize,
    /// Step between columns.
    pub col_stride: usize,
}

impl GemmView {
    /// A dense row-major `rows x cols` matrix from the slice's start.
    pub fn row_major(rows: usize, cols: usize) -> GemmView {
        GemmView {
            offset: 0,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The same elements as the transposed matrix (`cols x rows`).
    pub fn transposed(self) -> GemmView {
        GemmView {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// The last element's index plus one (0 when empty), or `None` on
    /// overflow.
    fn end(&self) -> Option<usize> {
        if self.rows == 0 || self.cols == 0 {
            return Some(0);
        }
        let last_r = (self.rows - 1).checked_mul(self.row_stride)?;
        let last_c = (self.cols - 1).checked_mul(self.col_stride)?;
        self.offset
            .checked_add(last_r)?
            .checked_add(last_c)?
            .checked_add(1)
    }

    /// The row and column strides as `gemm` takes them, for a view
    /// [`Self::end`] found inside a slice: a dim of one element (or none)
    /// steps 0, as its stride bounds nothing and may not fit `isize`;
    /// every other stride times its dim's last index is below the
    /// slice's length, so it fits.
    fn gemm_strides(&self) -> (isize, isize) {
        let step = |n: usize, s: usize| if n > 1 { s as isize } else { 0 };
        (
            step(self.rows, self.row_stride),
            step(self.cols, self.col_stride),
        )
    }

    /// Whether distinct elements are distinct indices (rows of columns
    /// laid side by side, or columns of rows), as a written matrix needs.
    fn injective(&self) -> bool {
        let (r, c) = (self.rows, self.cols);
        r <= 1 && (c <= 1 || self.col_stride > 0)
            || c <= 1 && self.row_stride > 0
            || self.col_stride > 0
                && c.checked_mul(self.col_stride)
                    .is_some_and(|x| x <= self.row_stride)
            || self.row_stride > 0
                && r.checked_mul(self.row_stride)
                    .is_some_and(|x| x <= self.col_stride)
    }
}

/// `out = a @ b` for f32 matrices read and written through [`GemmView`]s
/// (`a`: m x k, `b`: k x n, `out`: m x n), through `gemm` on up to
/// `threads` threads. Every view is checked to lie inside its slice and
/// the output's to name each element once, so no layout reaches outside.
pub fn matmul_f32_strided(
    (a, av): (&[f32], GemmView),
    (b, bv): (&[f32], GemmView),
    (out, ov): (&mut [f32], GemmView),
    threads: usize,
) -> Result<(), CodegenError> {
    let inside = |v: &GemmView, len: usize| v.end().is_some_and(|e| e <= len);
    if av.rows != ov.rows
        || av.cols != bv.rows
        || bv.cols != ov.cols
        || !inside(&av, a.len())
        || !inside(&bv, b.len())
        || !inside(&ov, out.len())
        || !ov.injective()
    {
        return Err(CodegenError::Launch {
            kernel: "matmul".into(),
            message: format!(
                "strided operands {av:?} ({} elements) @ {bv:?} ({}) -> {ov:?} ({}) \
                 do not fit",
                a.len(),
                b.len(),
                out.len()
            ),
        });
    }
    let (m, k, n) = (av.rows, av.cols, bv.cols);
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                out[ov.offset + i * ov.row_stride + j * ov.col_stride] = 0.0;
            }
        }
        return Ok(());
    }
    let ptr = |s: &[f32], v: &GemmView| s[v.offset..].as_ptr();
    let ((ors, ocs), (ars, acs), (brs, bcs)) =
        (ov.gemm_strides(), av.gemm_strides(), bv.gemm_strides());
    let o = out[ov.offset..].as_mut_ptr();
    // SAFETY: each view's every element lies inside its slice (`inside`,
    // with overflow-checked arithmetic; `gemm_strides` are those of the
    // checked reach, 0 for a dim of one element); the output view names
    // each element once (`injective`), so no two gemm threads write one
    // element; `out` is a unique borrow and k > 0.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            o,
            ocs,
            ors,
            false,
            ptr(a, &av),
            acs,
            ars,
            ptr(b, &bv),
            bcs,
            brs,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            par(threads),
        )
    }
    Ok(())
}

/// The operands' and the output's first elements, lent to the threads of
/// one column-split GEMM.
struct ColsPtrs {
    a: *const f32,
    b: *const f32,
    out: *mut f32,
}

// SAFETY: only `matmul_f32_strided_col_split` makes one, from checked
// views over borrowed slices that outlive its threads, which read `a` and
// `b` and write disjoint column blocks of one injective output view.
unsafe impl Send for ColsPtrs {}
// SAFETY: as for `Send`: the threads never write the same element.
unsafe impl Sync for ColsPtrs {}

/// [`matmul_f32_strided`] with the output's columns split into one block
/// per thread, each a one-thread GEMM (packing all of `a` and its own
/// columns of `b`): for a short, wide product such as one image's
/// convolution `W[n, k] @ cols[k, p]`, where `gemm`'s own threading
/// scales poorly. The same checks come first: every view inside its
/// slice, the output's naming each element once.
pub fn matmul_f32_strided_col_split(
    (a, av): (&[f32], GemmView),
    (b, bv): (&[f32], GemmView),
    (out, ov): (&mut [f32], GemmView),
    threads: usize,
) -> Result<(), CodegenError> {
    let (m, k, n) = (av.rows, av.cols, bv.cols);
    if threads < 2 || n < 2 * threads || m == 0 || k == 0 {
        return matmul_f32_strided((a, av), (b, bv), (out, ov), threads);
    }
    // The one-call form's checks.
    let inside = |v: &GemmView, len: usize| v.end().is_some_and(|e| e <= len);
    if av.rows != ov.rows
        || av.cols != bv.rows
        || bv.cols != ov.cols
        || !inside(&av, a.len())
        || !inside(&bv, b.len())
        || !inside(&ov, out.len())
        || !ov.injective()
    {
        // The one-call form reports the misfit.
        return matmul_f32_strided((a, av), (b, bv), (out, ov), 1);
    }
    let cols = n.div_ceil(threads);
    let ((ors, ocs), (ars, acs), (brs, bcs)) =
        (ov.gemm_strides(), av.gemm_strides(), bv.gemm_strides());
    let p = ColsPtrs {
        a: a[av.offset..].as_ptr(),
        b: b[bv.offset..].as_ptr(),
        out: out[ov.offset..].as_mut_ptr(),
    };
    use rayon::prelude::*;
    (0..n.div_ceil(cols)).into_par_iter().for_each(|t| {
        let j0 = t * cols;
        let nj = cols.min(n - j0);
        let p = &p;
        // SAFETY: every view lies inside its slice (checked above, with
        // overflow-checked arithmetic; `gemm_strides` are those of the
        // checked reach, 0 for a dim of one element), so columns `j0..j0 + nj` of `b` and
        // `out` do too; the output view names each element once, so the
        // threads' column blocks are disjoint and no two write one
        // element; `out` stays uniquely borrowed until every thread ends;
        // k > 0.
        unsafe {
            gemm::gemm(
                m,
                nj,
                k,
                p.out.add(j0 * ov.col_stride),
                ocs,
                ors,
                false,
                p.a,
                acs,
                ars,
                p.b.add(j0 * bv.col_stride),
                bcs,
                brs,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        }
    });
    Ok(())
}

/// `out[b] = a[b] @ bm[b]` for `batch` f32 matrices (`a`: m x k, `bm`:
/// k x n, `out`: m x n) through `gemm` on up to `threads` threads, each
/// operand read in place through a view (offset and batch/row/column
/// strides, which may be 0 or negative; `MatView::contiguous` for a
/// row-major one): a
/// transposed weight or an attention head is never copied. `out` is
/// contiguous `[batch, m, n]`. Every element either view reaches must lie
/// inside its slice, or nothing is computed.
pub fn matmul_view_f32(
    a: (&[f32], MatView),
    bm: (&[f32], MatView),
    out: &mut [f32],
    dims: [usize; 4],
    threads: usize,
) -> Result<(), CodegenError> {
    matmul((a.0, bm.0), [a.1, bm.1], out, dims, threads, 0.0, 1.0)
}

/// The f64 version of [`matmul_view_f32`].
pub fn matmul_view_f64(
    a: (&[f64], MatView),
    bm: (&[f64], MatView),
    out: &mut [f64],
    dims: [usize; 4],
    threads: usize,
) -> Result<(), CodegenError> {
    matmul((a.0, bm.0), [a.1, bm.1], out, dims, threads, 0.0, 1.0)
}

/// `gemm` computes `dst = alpha*dst + beta*lhs@rhs`; we pass alpha = 0,
/// beta = 1 and `read_dst = false`.
fn matmul<T: gemv::Elem>(
    (a, bm): (&[T], &[T]),
    [av, bv]: [MatView; 2],
    out: &mut [T],
    dims: [usize; 4],
    threads: usize,
    zero: T,
    one: T,
) -> Result<(), CodegenError> {
    let [batch, m, k, n] = dims;
    check_views((a.len(), av), (bm.len(), bv), out.len(), dims)?;
    if m * n == 0 {
        return Ok(());
    }
    // A row or a few: stream the weight once (gemm packs it first).
    if k > 0 && gemv::try_gemv((a, av), (bm, bv), out, dims, threads) {
        return Ok(());
    }
    let views = Views { a, av, bm, bv };
    // Enough matrices to go round: one per thread at a time, each on one
    // thread (an attention's heads: splitting each small product over the
    // threads cost more in synchronisation than it gained).
    if batch >= threads && threads > 1 {
        use rayon::prelude::*;
        out.par_chunks_mut(m * n)
            .enumerate()
            .for_each(|(i, o)| one_matmul(&views, o, [i, m, k, n], 1, zero, one));
        return Ok(());
    }
    for (i, o) in out.chunks_mut(m * n).enumerate() {
        one_matmul(&views, o, [i, m, k, n], threads, zero, one);
    }
    Ok(())
}

/// Both operands of a product checked by [`check_views`].
struct Views<'a, T> {
    a: &'a [T],
    av: MatView,
    bm: &'a [T],
    bv: MatView,
}

/// Matrix `i` of a batch checked by [`check_views`]: `o` (its m x n
/// output, m and n not 0) = a's i-th m x k matrix @ bm's i-th k x n
/// matrix, each read through its view.
fn one_matmul<T: Copy + 'static>(
    v: &Views<'_, T>,
    o: &mut [T],
    [i, m, k, n]: [usize; 4],
    threads: usize,
    zero: T,
    one: T,
) {
    assert_eq!(o.len(), m * n, "an output matrix of m x n");
    if k == 0 {
        // Nothing is read: the product of empty sums.
        o.fill(zero);
        return;
    }
    // Element (i, 0, 0) of each operand: inside its slice, since
    // `check_views` proved every element of the batch's reach is.
    let first = |view: MatView, len: usize| {
        let at = view.offset + i as i64 * view.strides[0];
        assert!(at >= 0 && (at as usize) < len, "a checked view");
        at as usize
    };
    let (a0, b0) = (first(v.av, v.a.len()), first(v.bv, v.bm.len()));
    let (a, bm) = (&v.a[a0..], &v.bm[b0..]);
    let [_, ars, acs] = v.av.strides.map(|s| s as isize);
    let [_, brs, bcs] = v.bv.strides.map(|s| s as isize);
    // SAFETY: `check_views` proved that for this batch (i < batch) every
    // element offset + i*bs + r*rs + c*cs (r < rows, c < cols) of each
    // view lies inside its slice; `a` and `bm` start at element (i, 0, 0)
    // of the slices, so every address gemm forms from them and the
    // strides (which may be 0 or negative) is inside the slices. `o` is a
    // unique borrow of exactly m*n elements, written row-major. `gemm`
    // dispatches on `T` and supports f32 and f64, the only callers.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            o.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            acs,
            ars,
            bm.as_ptr(),
            bcs,
            brs,
            zero,
            one,
            false,
            false,
            false,
            par(threads),
        )
    }
}

fn par(threads: usize) -> gemm::Parallelism {
    if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    }
}

/// Checks the output holds `batch * m * n` elements and that every
/// element each view reaches for `[batch, m, k]` / `[batch, k, n]` is
/// inside its slice, before any pointer is formed.
fn check_views(
    (a, av): (usize, MatView),
    (b, bv): (usize, MatView),
    out: usize,
    [batch, m, k, n]: [usize; 4],
) -> Result<(), CodegenError> {
    let bad = |message: String| {
        Err(CodegenError::Launch {
            kernel: "matmul".into(),
            message,
        })
    };
    if batch.checked_mul(m).and_then(|x| x.checked_mul(n)) != Some(out) {
        return bad(format!(
            "an output of {out} elements does not fit {batch}x[{m}x{n}]"
        ));
    }
    for (name, len, v, dims) in [("a", a, av, [batch, m, k]), ("b", b, bv, [batch, k, n])] {
        if !v.fits(dims, len) {
            return bad(format!(
                "operand {name} viewed at offset {} with strides {:?} over {dims:?} \
                 leaves its {len} elements",
                v.offset, v.strides
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod strided_tests {
    use super::*;

    /// Deterministic values in [-1, 1).
    pub(super) fn values(len: usize, seed: u64) -> Vec<f64> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
            })
            .collect()
    }

    /// The product by its definition, in f64, element by element.
    fn naive(
        a: &[f64],
        av: MatView,
        b: &[f64],
        bv: MatView,
        [bt, m, k, n]: [usize; 4],
    ) -> Vec<f64> {
        let at = |v: MatView, i: usize, r: usize, c: usize| {
            (v.offset + i as i64 * v.strides[0] + r as i64 * v.strides[1] + c as i64 * v.strides[2])
                as usize
        };
        let mut out = Vec::new();
        for i in 0..bt {
            for r in 0..m {
                for c in 0..n {
                    out.push(
                        (0..k)
                            .map(|p| a[at(av, i, r, p)] * b[at(bv, i, p, c)])
                            .sum(),
                    );
                }
            }
        }
        out
    }

    #[test]
    fn few_row_products_through_views_match_their_definition() {
        let view = |offset: i64, strides: [i64; 3]| MatView { offset, strides };
        // (dims, a's view, b's view, a's and b's lengths).
        type Case = ([usize; 4], MatView, MatView, usize, usize);
        let (k, n) = (37, 1029);
        let cases: [Case; 7] = [
            // x @ W, W's rows padded by 3.
            (
                [1, 1, k, n],
                view(0, [0, 0, 1]),
                view(0, [0, n as i64 + 3, 1]),
                k,
                k * (n + 3),
            ),
            // W's rows read last to first (negative row stride).
            (
                [1, 1, k, n],
                view(0, [0, 0, 1]),
                view(((k - 1) * n) as i64, [0, -(n as i64), 1]),
                k,
                k * n,
            ),
            // x @ W^T: column j of the view is row j of a [n, k] matrix.
            (
                [1, 1, k, n],
                view(0, [0, 0, 1]),
                view(0, [0, 1, k as i64]),
                k,
                n * k,
            ),
            // A transposed x (column stride 3), three rows, W^T.
            (
                [1, 3, k, n],
                view(0, [0, 1, 3]),
                view(0, [0, 1, k as i64]),
                3 * k,
                n * k,
            ),
            // Batches of 4 rows, W shared (batch stride 0).
            (
                [2, 4, k, n],
                view(0, [(4 * k) as i64, k as i64, 1]),
                view(0, [0, n as i64, 1]),
                8 * k,
                k * n,
            ),
            // Batched W^T heads, sizes off the lane width.
            (
                [3, 2, 5, 19],
                view(0, [10, 5, 1]),
                view(0, [95, 1, 5]),
                30,
                285,
            ),
            // One column, one inner element.
            ([1, 1, 1, 1], view(0, [0, 0, 1]), view(0, [0, 1, 1]), 1, 1),
        ];
        for (i, (dims, av, bv, la, lb)) in cases.into_iter().enumerate() {
            let (a, b) = (values(la, 2 * i as u64 + 1), values(lb, 2 * i as u64 + 2));
            let want = naive(&a, av, &b, bv, dims);
            for threads in [1, 2, 3] {
                let (a32, b32): (Vec<f32>, Vec<f32>) = (
                    a.iter().map(|&x| x as f32).collect(),
                    b.iter().map(|&x| x as f32).collect(),
                );
                let mut o32 = vec![f32::NAN; want.len()];
                matmul_view_f32((&a32, av), (&b32, bv), &mut o32, dims, threads).expect("fits");
                let mut o64 = vec![f64::NAN; want.len()];
                matmul_view_f64((&a, av), (&b, bv), &mut o64, dims, threads).expect("fits");
                for (j, w) in want.iter().enumerate() {
                    assert!(
                        (o32[j] as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
                        "case {i} t{threads} [{j}] f32 {} vs {w}",
                        o32[j]
                    );
                    assert!(
                        (o64[j] - w).abs() <= 1e-12 * (1.0 + w.abs()),
                        "case {i} t{threads} [{j}] f64 {} vs {w}",
                        o64[j]
                    );
                }
            }
        }
        // A view one element past its slice is refused, not read.
        let (a, b) = (vec![1.0f32; k], vec![1.0f32; k * n]);
        let mut o = vec![0.0f32; n];
        let past = view(1, [0, n as i64, 1]);
        assert!(matmul_view_f32(
            (&a, view(0, [0, 0, 1])),
            (&b, past),
            &mut o,
            [1, 1, k, n],
            2
        )
        .is_err());
    }

    #[test]
    fn strided_views_multiply_and_bad_views_are_refused() {
        // a: 3x2 stored column-major; b: a 2x1 column; by hand:
        // [1 4; 2 5; 3 6] @ [1; 10] = [41; 52; 63].
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [1.0f32, 10.0];
        let mut o = [0.0f32; 3];
        let v = |rows, cols, row_stride, col_stride| GemmView {
            offset: 0,
            rows,
            cols,
            row_stride,
            col_stride,
        };
        let (av, bv, ov) = (v(3, 2, 1, 3), v(2, 1, 1, 1), v(3, 1, 1, 1));
        matmul_f32_strided((&a, av), (&b, bv), (&mut o, ov), 1).expect("in bounds");
        assert_eq!(o, [41.0, 52.0, 63.0]);
        // Past the end of `a`; an output naming one element twice.
        let long = v(3, 2, 1, 4);
        assert!(matmul_f32_strided((&a, long), (&b, bv), (&mut o, ov), 1).is_err());
        let mut o2 = [0.0f32; 6];
        let (bv2, twice) = (v(2, 2, 2, 1), v(3, 2, 1, 0));
        assert!(matmul_f32_strided((&a, av), (&[0.0; 4], bv2), (&mut o2, twice), 1).is_err());
        // A dim of one element bounds nothing, so its stride may be any
        // value: `gemm` is given 0 for it, never a stride cast past
        // `isize` (a review's finding). [3] @ [2] -> [6], and a 2x1 @ 1x2
        // outer product [1; 2] @ [3 4] = [3 4; 6 8], on 1 and 2 threads.
        let huge = v(1, 1, usize::MAX, 1 << 63);
        let mut one = [0.0f32];
        matmul_f32_strided((&[3.0], huge), (&[2.0], huge), (&mut one, huge), 1)
            .expect("a 1x1 product");
        assert_eq!(one, [6.0]);
        let col = v(2, 1, 1, usize::MAX);
        let row = v(1, 2, usize::MAX, 1);
        for threads in [1, 2] {
            let mut outer = [0.0f32; 4];
            let ov = v(2, 2, 2, 1);
            matmul_f32_strided(
                (&[1.0, 2.0], col),
                (&[3.0, 4.0], row),
                (&mut outer, ov),
                threads,
            )
            .expect("in bounds");
            assert_eq!(outer, [3.0, 4.0, 6.0, 8.0]);
            let mut wide = [0.0f32; 8];
            let (row4, ov4) = (v(1, 4, usize::MAX, 1), v(2, 4, 4, 1));
            let b4 = [1.0f32, 2.0, 3.0, 4.0];
            matmul_f32_strided_col_split(
                (&[1.0, 2.0], col),
                (&b4, row4),
                (&mut wide, ov4),
                threads,
            )
            .expect("in bounds");
            assert_eq!(wide, [1.0, 2.0, 3.0, 4.0, 2.0, 4.0, 6.0, 8.0]);
        }
    }
}
