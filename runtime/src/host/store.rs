//! A run's buffers: the typed storage a program owns ([`Store`], f16/bf16
//! held as f32), each buffer's slot (borrowed argument or owned store),
//! storage taken from and given back to the pool.

use crate::alloc::class_vec;
use crate::error::RuntimeError;
use tilejit_codegen::host::{storage_bytes, BufArg};
use tilejit_ir::fallible::collect;
use tilejit_ir::pool::pool;
use tilejit_ir::{Array, Buffer, DType, IrError};

/// Typed storage the program owns during a run.
pub(crate) enum Store {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    U8(Vec<u8>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
}

impl Store {
    /// The storage as a buffer of its own element type (f32 stays f32).
    #[inline]
    pub(super) fn into_buffer(self) -> Buffer {
        match self {
            Store::F32(v) => Buffer::F32(v),
            Store::F64(v) => Buffer::F64(v),
            Store::I32(v) => Buffer::I32(v),
            Store::I64(v) => Buffer::I64(v),
            Store::Bool(v) => Buffer::Bool(v),
            Store::U8(v) => Buffer::U8(v),
            Store::I8(v) => Buffer::I8(v),
            Store::I16(v) => Buffer::I16(v),
            Store::U16(v) => Buffer::U16(v),
            Store::U32(v) => Buffer::U32(v),
            Store::U64(v) => Buffer::U64(v),
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
            Buffer::I16(v) => Store::I16(v),
            Buffer::U16(v) => Store::U16(v),
            Buffer::U32(v) => Store::U32(v),
            Buffer::U64(v) => Store::U64(v),
            Buffer::F16(v) => Store::F32(collect(v.iter().map(|x| x.to_f32()))?),
            Buffer::BF16(v) => Store::F32(collect(v.iter().map(|x| x.to_f32()))?),
        })
    }

    /// A copy (fallible: the size is the user's).
    pub(super) fn try_clone(&self) -> Result<Store, IrError> {
        Ok(match self {
            Store::F32(v) => Store::F32(collect(v.iter().copied())?),
            Store::F64(v) => Store::F64(collect(v.iter().copied())?),
            Store::I32(v) => Store::I32(collect(v.iter().copied())?),
            Store::I64(v) => Store::I64(collect(v.iter().copied())?),
            Store::Bool(v) => Store::Bool(collect(v.iter().copied())?),
            Store::U8(v) => Store::U8(collect(v.iter().copied())?),
            Store::I8(v) => Store::I8(collect(v.iter().copied())?),
            Store::I16(v) => Store::I16(collect(v.iter().copied())?),
            Store::U16(v) => Store::U16(collect(v.iter().copied())?),
            Store::U32(v) => Store::U32(collect(v.iter().copied())?),
            Store::U64(v) => Store::U64(collect(v.iter().copied())?),
        })
    }
}

/// Storage for `n` elements that kernels will overwrite completely: a
/// buffer from the caching pool when one of that type and size class is
/// free, else fresh zeroed memory (calloc: the OS maps zero pages lazily,
/// so the page faults happen in the parallel kernel, not in a serial
/// memset here) filling its class, for later reuse.
pub(super) fn output_store(dtype: DType, n: usize) -> Result<Store, IrError> {
    try_output_store(dtype, n).ok_or_else(|| IrError::OutOfMemory {
        bytes: n.saturating_mul(storage_bytes(dtype)),
    })
}

/// [`output_store`], `None` when out of memory: an `IrError` is 176
/// bytes, which the short path would otherwise copy about on success.
/// Always inlined: returned through memory, the store was written in
/// halves and read back whole, a stall on every call (W6).
#[inline(always)]
pub(super) fn try_output_store(dtype: DType, n: usize) -> Option<Store> {
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
            Buffer::I16(v) => return Some(Store::I16(v)),
            Buffer::U16(v) => return Some(Store::U16(v)),
            Buffer::U32(v) => return Some(Store::U32(v)),
            Buffer::U64(v) => return Some(Store::U64(v)),
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
        DType::I16 => Store::I16(class_vec(held, n)?),
        DType::U16 => Store::U16(class_vec(held, n)?),
        DType::U32 => Store::U32(class_vec(held, n)?),
        DType::U64 => Store::U64(class_vec(held, n)?),
        _ => Store::F32(class_vec(held, n)?),
    })
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

/// A buffer during a run: borrowed from an argument or constant (the
/// array, whose storage names it for the weight cache), or owned.
pub(crate) enum Slot<'a> {
    Borrowed(&'a Array),
    Owned(Store),
}

impl Slot<'_> {
    /// The slot as a kernel argument: writable when the program owns it.
    #[inline]
    pub(super) fn arg(&mut self) -> BufArg<'_> {
        match self {
            Slot::Borrowed(a) => buffer_arg(a.buffer()),
            Slot::Owned(s) => store_arg(s),
        }
    }

    /// The slot as a read-only kernel argument.
    #[inline]
    pub(super) fn arg_read(&self) -> BufArg<'_> {
        match self {
            // f16/bf16 arguments are converted to owned f32 up front.
            Slot::Borrowed(a) => buffer_arg(a.buffer()),
            Slot::Owned(Store::F32(v)) => BufArg::read(v),
            Slot::Owned(Store::F64(v)) => BufArg::read(v),
            Slot::Owned(Store::I32(v)) => BufArg::read(v),
            Slot::Owned(Store::I64(v)) => BufArg::read(v),
            Slot::Owned(Store::Bool(v)) => BufArg::read(v),
            Slot::Owned(Store::U8(v)) => BufArg::read(v),
            Slot::Owned(Store::I8(v)) => BufArg::read(v),
            Slot::Owned(Store::I16(v)) => BufArg::read(v),
            Slot::Owned(Store::U16(v)) => BufArg::read(v),
            Slot::Owned(Store::U32(v)) => BufArg::read(v),
            Slot::Owned(Store::U64(v)) => BufArg::read(v),
        }
    }

    pub(super) fn f32s(&self) -> Option<&[f32]> {
        match self {
            Slot::Borrowed(a) => match a.buffer() {
                Buffer::F32(v) => Some(v),
                _ => None,
            },
            Slot::Owned(Store::F32(v)) => Some(v),
            _ => None,
        }
    }

    pub(super) fn f64s(&self) -> Option<&[f64]> {
        match self {
            Slot::Borrowed(a) => match a.buffer() {
                Buffer::F64(v) => Some(v),
                _ => None,
            },
            Slot::Owned(Store::F64(v)) => Some(v),
            _ => None,
        }
    }

    /// The argument or constant a borrowed slot holds.
    pub(super) fn array(&self) -> Option<&Array> {
        match self {
            Slot::Borrowed(a) => Some(a),
            Slot::Owned(_) => None,
        }
    }

    /// Values as i64 (integer matmul only).
    pub(super) fn ints(&self) -> Result<Vec<i64>, IrError> {
        fn widen<T: Copy>(v: &[T], f: impl Fn(T) -> i64) -> Result<Vec<i64>, IrError> {
            collect(v.iter().map(|&x| f(x)))
        }
        match self {
            Slot::Borrowed(a) => match a.buffer() {
                Buffer::I32(v) => widen(v, i64::from),
                Buffer::I64(v) => widen(v, |x| x),
                Buffer::U8(v) => widen(v, i64::from),
                Buffer::I8(v) => widen(v, i64::from),
                Buffer::I16(v) => widen(v, i64::from),
                Buffer::U16(v) => widen(v, i64::from),
                Buffer::U32(v) => widen(v, i64::from),
                Buffer::U64(v) => widen(v, |x| x as i64),
                _ => Ok(Vec::new()),
            },
            Slot::Owned(s) => match s {
                Store::I32(v) => widen(v, i64::from),
                Store::I64(v) => widen(v, |x| x),
                Store::U8(v) => widen(v, i64::from),
                Store::I8(v) => widen(v, i64::from),
                Store::I16(v) => widen(v, i64::from),
                Store::U16(v) => widen(v, i64::from),
                Store::U32(v) => widen(v, i64::from),
                Store::U64(v) => widen(v, |x| x as i64),
                _ => Ok(Vec::new()),
            },
        }
    }
}

/// Moves an owned store out of its slot (leaving an empty one).
pub(super) fn take_owned(slot: &mut Slot<'_>) -> Result<Store, RuntimeError> {
    match std::mem::replace(slot, Slot::Owned(Store::Bool(Vec::new()))) {
        Slot::Owned(s) => Ok(s),
        Slot::Borrowed(_) => {
            Err(IrError::Verify("a kernel result is a borrowed buffer".into()).into())
        }
    }
}

/// An argument as a slot: borrowed, or for f16/bf16 widened to f32.
pub(super) fn slot_for(a: &Array) -> Result<Slot<'_>, IrError> {
    Ok(match a.buffer() {
        Buffer::F16(v) => Slot::Owned(Store::F32(collect(v.iter().map(|x| x.to_f32()))?)),
        Buffer::BF16(v) => Slot::Owned(Store::F32(collect(v.iter().map(|x| x.to_f32()))?)),
        _ => Slot::Borrowed(a),
    })
}

/// A result's storage as a buffer of its dtype (f16/bf16 narrowed from f32).
pub(super) fn to_buffer(store: Store, dtype: DType) -> Result<Buffer, IrError> {
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

/// An input buffer as a read-only kernel argument (f16/bf16, which the
/// host computes as f32, never reach here: see
/// [`Tiny::plan`](super::plan::Tiny::plan)).
#[inline]
pub(super) fn buffer_arg(b: &Buffer) -> BufArg<'_> {
    match b {
        Buffer::F32(v) => BufArg::read(v),
        Buffer::F64(v) => BufArg::read(v),
        Buffer::I32(v) => BufArg::read(v),
        Buffer::I64(v) => BufArg::read(v),
        Buffer::Bool(v) => BufArg::read(v),
        Buffer::U8(v) => BufArg::read(v),
        Buffer::I8(v) => BufArg::read(v),
        Buffer::I16(v) => BufArg::read(v),
        Buffer::U16(v) => BufArg::read(v),
        Buffer::U32(v) => BufArg::read(v),
        Buffer::U64(v) => BufArg::read(v),
        Buffer::F16(_) | Buffer::BF16(_) => BufArg::empty(),
    }
}

/// Owned storage as a writable kernel argument.
#[inline]
pub(super) fn store_arg(s: &mut Store) -> BufArg<'_> {
    match s {
        Store::F32(v) => BufArg::write(v),
        Store::F64(v) => BufArg::write(v),
        Store::I32(v) => BufArg::write(v),
        Store::I64(v) => BufArg::write(v),
        Store::Bool(v) => BufArg::write(v),
        Store::U8(v) => BufArg::write(v),
        Store::I8(v) => BufArg::write(v),
        Store::I16(v) => BufArg::write(v),
        Store::U16(v) => BufArg::write(v),
        Store::U32(v) => BufArg::write(v),
        Store::U64(v) => BufArg::write(v),
    }
}
