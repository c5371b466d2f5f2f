//! Host memory for tensors: fresh zeroed buffers, fallible (an impossible
//! size is an error, not an abort), as long as the caching pool's size
//! class (so that, once dead, they serve nearby lengths too) and, from
//! 1 MiB up, advised onto huge
//! pages where the OS allows, as numpy does for its arrays of 4 MiB and up
//! (`tilejit_codegen::sys::zeroed_vec`, which from 16 MiB up also pads
//! the allocation so that all of it can be).
//! A streaming kernel over 4 KiB pages takes a TLB miss every 4 KiB and a
//! fault per page on first touch, so inputs on 2 MiB pages make the
//! memory-bound workloads faster. Kernel outputs, `full`/`zeros`/`ones`
//! and the random tensors come from here; not `arange`, `from_vec` (the
//! caller's vector) or f16/bf16 results, which are converted out of f32
//! storage into plain vectors. Whatever overwrites every element (kernel
//! outputs, random tensors, a nonzero `full`) takes a dead buffer from the
//! caching pool first: storage that only ever went into the pool would
//! fill it with buffers nobody takes back.

use rayon::prelude::*;
use tilejit_codegen::sys::{zeroed_vec, ZeroBits};
use tilejit_ir::pool::{class_len, pool};
use tilejit_ir::{Buffer, DType, IrError, Lit};

/// The error for `n` elements of `dtype` that could not be allocated.
fn oom(dtype: DType, n: usize) -> IrError {
    IrError::OutOfMemory {
        bytes: n.saturating_mul(dtype.size_bytes()),
    }
}

/// A buffer of `n` elements of `dtype` that the caller will overwrite
/// completely: from the caching pool when one is free, else fresh.
pub(crate) fn output_buffer(dtype: DType, n: usize) -> Result<Buffer, IrError> {
    if let Some(b) = pool().take(dtype, n) {
        return Ok(b);
    }
    zeroed_buffer(dtype, n)
}

/// `n` zero elements stored as `dtype` (whose size is `T`'s), fresh, in
/// an allocation as long as their pool size class. Untouched capacity
/// costs no memory: the OS maps calloc's big pages on first write.
pub(crate) fn class_vec<T: ZeroBits>(dtype: DType, n: usize) -> Option<Vec<T>> {
    let mut v = zeroed_vec(class_len(dtype, n))?;
    v.truncate(n);
    Some(v)
}

/// `n` zero elements of `dtype`, fresh (never from the pool, whose buffers
/// hold old values).
fn zeroed_buffer(dtype: DType, n: usize) -> Result<Buffer, IrError> {
    let oom = || oom(dtype, n);
    Ok(match dtype {
        DType::F32 => Buffer::F32(class_vec(dtype, n).ok_or_else(oom)?),
        DType::F64 => Buffer::F64(class_vec(dtype, n).ok_or_else(oom)?),
        DType::F16 => Buffer::F16(class_vec(dtype, n).ok_or_else(oom)?),
        DType::BF16 => Buffer::BF16(class_vec(dtype, n).ok_or_else(oom)?),
        DType::I32 => Buffer::I32(class_vec(dtype, n).ok_or_else(oom)?),
        DType::I64 => Buffer::I64(class_vec(dtype, n).ok_or_else(oom)?),
        DType::Bool => Buffer::Bool(class_vec(dtype, n).ok_or_else(oom)?),
        DType::U8 => Buffer::U8(class_vec(dtype, n).ok_or_else(oom)?),
        DType::I8 => Buffer::I8(class_vec(dtype, n).ok_or_else(oom)?),
        DType::I16 => Buffer::I16(class_vec(dtype, n).ok_or_else(oom)?),
        DType::U16 => Buffer::U16(class_vec(dtype, n).ok_or_else(oom)?),
        DType::U32 => Buffer::U32(class_vec(dtype, n).ok_or_else(oom)?),
        DType::U64 => Buffer::U64(class_vec(dtype, n).ok_or_else(oom)?),
    })
}

/// `n` elements of `dtype`, each `value` converted to `dtype` (as
/// [`Buffer::fill`] converts it): the storage behind `Tensor::full`,
/// `zeros` and `ones`.
pub fn filled_buffer(dtype: DType, n: usize, value: Lit) -> Result<Buffer, IrError> {
    let zero = match value {
        Lit::Float(v) => v.to_bits() == 0,
        Lit::Int(v) => v == 0,
        Lit::Bool(v) => !v,
    };
    // Zeros in fresh memory leave its pages untouched until a kernel
    // writes them; any other value is written everywhere anyway.
    if zero {
        return zeroed_buffer(dtype, n);
    }
    let mut b = output_buffer(dtype, n)?;
    b.fill(value);
    Ok(b)
}

/// `n` f32 elements, element `i` being `f(i)`: the storage behind the
/// random tensors. Filled in parallel over the rayon
/// pool from 64K elements (each element depends only on its
/// index, so the values are the same either way).
pub fn f32_buffer_from_fn(n: usize, f: impl Fn(u64) -> f32 + Sync) -> Result<Buffer, IrError> {
    let Buffer::F32(mut v) = output_buffer(DType::F32, n)? else {
        return Err(IrError::Verify("f32 storage of another dtype".into()));
    };
    let fill = |(c, xs): (usize, &mut [f32])| {
        for (i, x) in xs.iter_mut().enumerate() {
            *x = f((c * PAR_FILL_CHUNK + i) as u64);
        }
    };
    if n < PAR_FILL_MIN {
        v.chunks_mut(PAR_FILL_CHUNK).enumerate().for_each(fill);
    } else {
        v.par_chunks_mut(PAR_FILL_CHUNK).enumerate().for_each(fill);
    }
    Ok(Buffer::F32(v))
}

/// Elements from which [`f32_buffer_from_fn`] fills in parallel: a random
/// element costs ~10 ns (a log and a cosine), so 64K of them are worth
/// waking the pool for.
const PAR_FILL_MIN: usize = 1 << 16;

/// Elements per parallel fill task.
const PAR_FILL_CHUNK: usize = 1 << 14;
