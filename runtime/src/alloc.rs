//! Host memory for tensors: fresh zeroed buffers, fallible (an impossible
//! size is an error, not an abort) and, from 1 MiB up, advised onto huge
//! pages where the OS allows, as numpy does for its arrays of 4 MiB and up
//! (`tilejit_codegen::sys::zeroed_vec`, which from 16 MiB up also pads
//! the allocation so that all of it can be).
//! A streaming kernel over 4 KiB pages takes a TLB miss every 4 KiB and a
//! fault per page on first touch, so inputs on 2 MiB pages make the
//! memory-bound workloads faster. Kernel outputs (through the caching
//! pool first), `full`/`zeros`/`ones` and the random tensors come from
//! here; not yet `arange`, `from_vec` (the caller's vector) or f16/bf16
//! results, which are converted out of f32 storage into plain vectors.

use rayon::prelude::*;
use tilejit_codegen::sys::zeroed_vec;
use tilejit_ir::pool::pool;
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

/// `n` zero elements of `dtype`, fresh (never from the pool, whose buffers
/// hold old values).
fn zeroed_buffer(dtype: DType, n: usize) -> Result<Buffer, IrError> {
    let oom = || oom(dtype, n);
    Ok(match dtype {
        DType::F32 => Buffer::F32(zeroed_vec(n).ok_or_else(oom)?),
        DType::F64 => Buffer::F64(zeroed_vec(n).ok_or_else(oom)?),
        DType::F16 => Buffer::F16(zeroed_vec(n).ok_or_else(oom)?),
        DType::BF16 => Buffer::BF16(zeroed_vec(n).ok_or_else(oom)?),
        DType::I32 => Buffer::I32(zeroed_vec(n).ok_or_else(oom)?),
        DType::I64 => Buffer::I64(zeroed_vec(n).ok_or_else(oom)?),
        DType::Bool => Buffer::Bool(zeroed_vec(n).ok_or_else(oom)?),
    })
}

/// `n` elements of `dtype`, each `value` converted to `dtype` (as
/// [`Buffer::fill`] converts it), in fresh memory: the storage behind
/// `Tensor::full`, `zeros` and `ones`.
pub fn filled_buffer(dtype: DType, n: usize, value: Lit) -> Result<Buffer, IrError> {
    let mut b = zeroed_buffer(dtype, n)?;
    // Zeros leave the fresh pages untouched until a kernel writes them.
    let zero = match value {
        Lit::Float(v) => v.to_bits() == 0,
        Lit::Int(v) => v == 0,
        Lit::Bool(v) => !v,
    };
    if !zero {
        b.fill(value);
    }
    Ok(b)
}

/// `n` f32 elements, element `i` being `f(i)`, in fresh memory: the
/// storage behind the random tensors. Filled in parallel over the rayon
/// pool from 64K elements (each element depends only on its
/// index, so the values are the same either way).
pub fn f32_buffer_from_fn(n: usize, f: impl Fn(u64) -> f32 + Sync) -> Result<Buffer, IrError> {
    let mut v = zeroed_vec(n).ok_or_else(|| oom(DType::F32, n))?;
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
