//! The only module of tilejit that enters native code outside safe Rust:
//! JIT-compiled kernels (the typed handle [`KernelCode`]) and the `gemm`
//! crate's matrix multiply ([`matmul_f32`], [`matmul_f64`]), and (child
//! `os`) the OS calls that allocate fresh buffers onto huge pages
//! ([`zeroed_vec`]) and read the coarse clock. Its children `avx2` and `avx512` hold the
//! 8- and 16-lane math helpers ([`block_math`], their math written once in
//! `lanes`) that generated code calls on its own block buffers and on row
//! ranges its launch's bounds check covers. Each entry point
//! checks every pointer and size against what the callee will touch first,
//! so safe callers cannot make native code read or write out of bounds.
#![allow(unsafe_code)]

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod lanes;
mod os;

pub use os::{coarse_clock_ns, huge_page_len, zeroed_vec, ZeroBits};

use super::layout::{ArgLayout, CheckedArgs};
use super::BlockMath;
use crate::CodegenError;
use cranelift_jit::JITModule;
use std::sync::Mutex;

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
type KernelFn = extern "C" fn(*const *mut u8, *const i64, i64, i64);

/// One buffer handed to a kernel: base address and length in bytes. The
/// address is a plain integer so launch descriptions can cross threads; the
/// caller keeps the storage alive and unaliased for the call.
#[derive(Copy, Clone, Debug)]
pub struct BufArg {
    /// Start of the storage.
    pub ptr: usize,
    /// Its size in bytes.
    pub bytes: usize,
    /// True if the kernel may write it.
    pub writable: bool,
}

/// Compiled native code for one kernel structure.
pub struct KernelCode {
    func: KernelFn,
    /// Owns the code pages; freed on drop.
    module: Mutex<Option<JITModule>>,
    /// Layout of the arguments, and what every access may touch.
    pub layout: ArgLayout,
    /// The kernel's name (for errors).
    pub name: String,
    /// Size of the machine code in bytes.
    pub code_bytes: usize,
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
        // integers, SystemV / "C" calling convention, no return value).
        let func = unsafe { std::mem::transmute::<*const u8, KernelFn>(ptr) };
        KernelCode {
            func,
            module: Mutex::new(Some(module)),
            layout,
            name,
            code_bytes,
        }
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
        bufs: &[BufArg],
        args: &[i64],
        start: usize,
        end: usize,
    ) -> Result<(), CodegenError> {
        self.layout
            .check(bufs, args, start, end)
            .map_err(|m| self.bad(m))?;
        self.enter(bufs, args, start, end);
        Ok(())
    }

    /// [`Self::call`] with arguments checked once ahead
    /// ([`ArgLayout::check_args`]): per call only the buffer sizes are
    /// compared, which matters for tiny kernels called often.
    pub fn call_checked(
        &self,
        bufs: &[BufArg],
        args: &CheckedArgs,
        start: usize,
        end: usize,
    ) -> Result<(), CodegenError> {
        self.layout
            .check_checked(bufs, args, start, end)
            .map_err(|m| self.bad(m))?;
        self.enter(bufs, args.args(), start, end);
        Ok(())
    }

    /// Enters the native code; only after one of the bounds checks passed.
    fn enter(&self, bufs: &[BufArg], args: &[i64], start: usize, end: usize) {
        if start >= end {
            return;
        }
        // Most kernels take a handful of buffers: keep their pointers on the
        // stack (a heap vector costs more than a small kernel's work).
        let mut small = [std::ptr::null_mut::<u8>(); 16];
        let heap: Vec<*mut u8>;
        let ptrs: &[*mut u8] = if bufs.len() <= small.len() {
            for (p, b) in small.iter_mut().zip(bufs) {
                *p = b.ptr as *mut u8;
            }
            &small[..bufs.len()]
        } else {
            heap = bufs.iter().map(|b| b.ptr as *mut u8).collect();
            &heap
        };
        // SAFETY: both callers ran a bounds check first: `check` proved for
        // these `args` and start..end, and `check_checked` for a superset
        // range (every unit of the domain) of the same `args`, that every
        // load and store the kernel performs (computed from the dims and
        // strides in `args`) lies within its buffer, that written buffers
        // are writable, and that scratch buffers hold a full row. The
        // pointers stay valid for the call because the caller borrows them.
        (self.func)(ptrs.as_ptr(), args.as_ptr(), start as i64, end as i64);
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

/// `out[b] = a[b] @ bm[b]` for `batch` row-major f32 matrices (`a`: m x k,
/// `bm`: k x n, `out`: m x n), through `gemm` on up to `threads` threads.
pub fn matmul_f32(
    a: &[f32],
    bm: &[f32],
    out: &mut [f32],
    dims: [usize; 4],
    threads: usize,
) -> Result<(), CodegenError> {
    matmul(a, bm, out, dims, threads, 0.0, 1.0)
}

/// The f64 version of [`matmul_f32`].
pub fn matmul_f64(
    a: &[f64],
    bm: &[f64],
    out: &mut [f64],
    dims: [usize; 4],
    threads: usize,
) -> Result<(), CodegenError> {
    matmul(a, bm, out, dims, threads, 0.0, 1.0)
}

/// `gemm` computes `dst = alpha*dst + beta*lhs@rhs`; we pass alpha = 0,
/// beta = 1 and `read_dst = false`.
fn matmul<T: Copy + 'static>(
    a: &[T],
    bm: &[T],
    out: &mut [T],
    dims: [usize; 4],
    threads: usize,
    zero: T,
    one: T,
) -> Result<(), CodegenError> {
    let [batch, m, k, n] = dims;
    check_matmul(a.len(), bm.len(), out.len(), dims)?;
    for i in 0..batch {
        let (a, bm) = (
            &a[i * m * k..(i + 1) * m * k],
            &bm[i * k * n..(i + 1) * k * n],
        );
        let o = &mut out[i * m * n..(i + 1) * m * n];
        // SAFETY: `check_matmul` proved the slices hold exactly m*k, k*n and
        // m*n elements; the strides below (row-major, column stride 1) keep
        // every access inside them; `o` is a unique borrow. `gemm` dispatches
        // on `T` and supports f32 and f64, the only callers.
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
                1,
                k as isize,
                bm.as_ptr(),
                1,
                n as isize,
                zero,
                one,
                false,
                false,
                false,
                par(threads),
            )
        }
    }
    Ok(())
}

fn par(threads: usize) -> gemm::Parallelism {
    if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    }
}

fn check_matmul(
    a: usize,
    b: usize,
    out: usize,
    [batch, m, k, n]: [usize; 4],
) -> Result<(), CodegenError> {
    let want = |x: usize, y: usize| batch.checked_mul(x).and_then(|v| v.checked_mul(y));
    if want(m, k) != Some(a) || want(k, n) != Some(b) || want(m, n) != Some(out) {
        return Err(CodegenError::Launch {
            kernel: "matmul".into(),
            message: format!(
                "operands of {a}, {b} and {out} elements do not fit {batch}x[{m}x{k}]@[{k}x{n}]"
            ),
        });
    }
    Ok(())
}
