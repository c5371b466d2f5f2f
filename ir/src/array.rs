//! `Array`: a concrete, row-major, contiguous tensor value on the host. Its
//! storage (`Buffer`) is typed and shared by `Arc`, so clones are cheap.

use crate::dtype::{DType, Element, Lit};
use crate::error::IrError;
use crate::fallible::{collect, filled as try_filled};
use crate::shape::{Shape, TensorType};
use half::{bf16, f16};
use std::sync::{Arc, Weak};

/// Typed element storage.
#[derive(Clone, Debug, PartialEq)]
pub enum Buffer {
    /// f32 elements.
    F32(Vec<f32>),
    /// f64 elements.
    F64(Vec<f64>),
    /// f16 elements.
    F16(Vec<f16>),
    /// bf16 elements.
    BF16(Vec<bf16>),
    /// i32 elements.
    I32(Vec<i32>),
    /// i64 elements.
    I64(Vec<i64>),
    /// bool elements.
    Bool(Vec<bool>),
    /// u8 elements.
    U8(Vec<u8>),
    /// i8 elements.
    I8(Vec<i8>),
    /// i16 elements.
    I16(Vec<i16>),
    /// u16 elements.
    U16(Vec<u16>),
    /// u32 elements.
    U32(Vec<u32>),
    /// u64 elements.
    U64(Vec<u64>),
}

impl Buffer {
    /// Elements of `dtype` from their little-endian bytes (bool: one byte,
    /// 0 or 1). An error if the length is not a whole number of elements,
    /// a bool byte is neither 0 nor 1, or memory runs out.
    pub fn from_le_bytes(dtype: DType, bytes: &[u8]) -> Result<Buffer, IrError> {
        let mut out = Buffer::with_capacity(dtype, bytes.len() / dtype.size_bytes())?;
        out.extend_from_le_bytes(bytes)?;
        Ok(out)
    }

    /// An empty buffer of `dtype` with room for `n` elements.
    pub fn with_capacity(dtype: DType, n: usize) -> Result<Buffer, IrError> {
        use crate::fallible::with_capacity as cap;
        Ok(match dtype {
            DType::F32 => Buffer::F32(cap(n)?),
            DType::F64 => Buffer::F64(cap(n)?),
            DType::F16 => Buffer::F16(cap(n)?),
            DType::BF16 => Buffer::BF16(cap(n)?),
            DType::I32 => Buffer::I32(cap(n)?),
            DType::I64 => Buffer::I64(cap(n)?),
            DType::Bool => Buffer::Bool(cap(n)?),
            DType::U8 => Buffer::U8(cap(n)?),
            DType::I8 => Buffer::I8(cap(n)?),
            DType::I16 => Buffer::I16(cap(n)?),
            DType::U16 => Buffer::U16(cap(n)?),
            DType::U32 => Buffer::U32(cap(n)?),
            DType::U64 => Buffer::U64(cap(n)?),
        })
    }

    /// Appends elements from their little-endian bytes (as
    /// [`from_le_bytes`](Self::from_le_bytes) reads them), so data that
    /// arrives in pieces is decoded once, into its final buffer.
    pub fn extend_from_le_bytes(&mut self, bytes: &[u8]) -> Result<(), IrError> {
        let dtype = self.dtype();
        let size = dtype.size_bytes();
        if !bytes.len().is_multiple_of(size) {
            return Err(IrError::Arguments(format!(
                "{} bytes are not a whole number of {dtype} elements",
                bytes.len()
            )));
        }
        let n = bytes.len() / size;
        macro_rules! words {
            ($v:expr, $t:ty, $n:literal) => {{
                $v.try_reserve(n)
                    .map_err(|_| crate::fallible::oom::<$t>(n))?;
                $v.extend(bytes.chunks_exact($n).map(|c| {
                    let mut w = [0u8; $n];
                    w.copy_from_slice(c);
                    <$t>::from_le_bytes(w)
                }));
            }};
        }
        match self {
            Buffer::F32(v) => words!(v, f32, 4),
            Buffer::F64(v) => words!(v, f64, 8),
            Buffer::F16(v) => words!(v, f16, 2),
            Buffer::BF16(v) => words!(v, bf16, 2),
            Buffer::I32(v) => words!(v, i32, 4),
            Buffer::I64(v) => words!(v, i64, 8),
            Buffer::I16(v) => words!(v, i16, 2),
            Buffer::U16(v) => words!(v, u16, 2),
            Buffer::U32(v) => words!(v, u32, 4),
            Buffer::U64(v) => words!(v, u64, 8),
            Buffer::U8(v) => {
                v.try_reserve(n)
                    .map_err(|_| crate::fallible::oom::<u8>(n))?;
                v.extend_from_slice(bytes);
            }
            Buffer::I8(v) => {
                v.try_reserve(n)
                    .map_err(|_| crate::fallible::oom::<i8>(n))?;
                v.extend(bytes.iter().map(|&b| b as i8));
            }
            Buffer::Bool(v) => {
                if let Some(i) = bytes.iter().position(|&b| b > 1) {
                    return Err(IrError::Arguments(format!(
                        "bool element {} is byte {}, not 0 or 1",
                        v.len() + i,
                        bytes[i]
                    )));
                }
                v.try_reserve(n)
                    .map_err(|_| crate::fallible::oom::<bool>(n))?;
                v.extend(bytes.iter().map(|&b| b == 1));
            }
        }
        Ok(())
    }

    /// The elements as little-endian bytes (bool: one byte, 0 or 1).
    pub fn to_le_bytes(&self) -> Result<Vec<u8>, IrError> {
        self.le_bytes_of(0..self.len())
    }

    /// Elements `range` as little-endian bytes: a piece of a buffer sent in
    /// chunks, with no copy of the whole. An error if the range is out of
    /// bounds or memory runs out.
    pub fn le_bytes_of(&self, range: std::ops::Range<usize>) -> Result<Vec<u8>, IrError> {
        if range.start > range.end || range.end > self.len() {
            return Err(IrError::Arguments(format!(
                "elements {range:?} of a buffer of {}",
                self.len()
            )));
        }
        let size = self.dtype().size_bytes();
        let mut out = crate::fallible::with_capacity::<u8>(range.len().saturating_mul(size))?;
        let r = range;
        // Written into a zeroed buffer a word at a time: this form
        // vectorises (a per-element `extend` runs at a byte a cycle, the
        // bottleneck of a streamed tensor copy).
        macro_rules! words {
            ($v:expr, $n:literal) => {{
                out.resize(r.len() * $n, 0);
                for (dst, x) in out.chunks_exact_mut($n).zip(&$v[r]) {
                    dst.copy_from_slice(&x.to_le_bytes());
                }
            }};
        }
        match self {
            Buffer::F32(v) => words!(v, 4),
            Buffer::F64(v) => words!(v, 8),
            Buffer::F16(v) => words!(v, 2),
            Buffer::BF16(v) => words!(v, 2),
            Buffer::I32(v) => words!(v, 4),
            Buffer::I64(v) => words!(v, 8),
            Buffer::I16(v) => words!(v, 2),
            Buffer::U16(v) => words!(v, 2),
            Buffer::U32(v) => words!(v, 4),
            Buffer::U64(v) => words!(v, 8),
            Buffer::Bool(v) => out.extend(v[r].iter().map(|&b| b as u8)),
            Buffer::U8(v) => out.extend_from_slice(&v[r]),
            Buffer::I8(v) => out.extend(v[r].iter().map(|&b| b as u8)),
        }
        Ok(out)
    }

    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            Buffer::F32(_) => DType::F32,
            Buffer::F64(_) => DType::F64,
            Buffer::F16(_) => DType::F16,
            Buffer::BF16(_) => DType::BF16,
            Buffer::I32(_) => DType::I32,
            Buffer::I64(_) => DType::I64,
            Buffer::Bool(_) => DType::Bool,
            Buffer::U8(_) => DType::U8,
            Buffer::I8(_) => DType::I8,
            Buffer::I16(_) => DType::I16,
            Buffer::U16(_) => DType::U16,
            Buffer::U32(_) => DType::U32,
            Buffer::U64(_) => DType::U64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Buffer::F32(v) => v.len(),
            Buffer::F64(v) => v.len(),
            Buffer::F16(v) => v.len(),
            Buffer::BF16(v) => v.len(),
            Buffer::I32(v) => v.len(),
            Buffer::I64(v) => v.len(),
            Buffer::Bool(v) => v.len(),
            Buffer::U8(v) => v.len(),
            Buffer::I8(v) => v.len(),
            Buffer::I16(v) => v.len(),
            Buffer::U16(v) => v.len(),
            Buffer::U32(v) => v.len(),
            Buffer::U64(v) => v.len(),
        }
    }

    /// Bytes of storage held: the vector's capacity, which can exceed its
    /// length (fresh big buffers are padded to whole huge pages).
    pub fn allocated_bytes(&self) -> usize {
        self.capacity() * self.dtype().size_bytes()
    }

    /// How many elements its allocation holds.
    #[inline]
    pub fn capacity(&self) -> usize {
        match self {
            Buffer::F32(v) => v.capacity(),
            Buffer::F64(v) => v.capacity(),
            Buffer::F16(v) => v.capacity(),
            Buffer::BF16(v) => v.capacity(),
            Buffer::I32(v) => v.capacity(),
            Buffer::I64(v) => v.capacity(),
            Buffer::Bool(v) => v.capacity(),
            Buffer::U8(v) => v.capacity(),
            Buffer::I8(v) => v.capacity(),
            Buffer::I16(v) => v.capacity(),
            Buffer::U16(v) => v.capacity(),
            Buffer::U32(v) => v.capacity(),
            Buffer::U64(v) => v.capacity(),
        }
    }

    /// True if there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `n` elements all equal to `lit` (converted to `dtype`).
    pub fn filled(dtype: DType, n: usize, lit: Lit) -> Result<Buffer, IrError> {
        let mut b = match dtype {
            DType::F32 => Buffer::F32(try_filled(n, 0.0)?),
            DType::F64 => Buffer::F64(try_filled(n, 0.0)?),
            DType::F16 => Buffer::F16(try_filled(n, f16::ZERO)?),
            DType::BF16 => Buffer::BF16(try_filled(n, bf16::ZERO)?),
            DType::I32 => Buffer::I32(try_filled(n, 0)?),
            DType::I64 => Buffer::I64(try_filled(n, 0)?),
            DType::Bool => Buffer::Bool(try_filled(n, false)?),
            DType::U8 => Buffer::U8(try_filled(n, 0)?),
            DType::I8 => Buffer::I8(try_filled(n, 0)?),
            DType::I16 => Buffer::I16(try_filled(n, 0)?),
            DType::U16 => Buffer::U16(try_filled(n, 0)?),
            DType::U32 => Buffer::U32(try_filled(n, 0)?),
            DType::U64 => Buffer::U64(try_filled(n, 0)?),
        };
        b.fill(lit);
        Ok(b)
    }

    /// Sets every element to `lit` converted to the buffer's dtype (ints
    /// truncate floats; the narrower and unsigned integers saturate a float
    /// into their range, as a cast does, and wrap an integer; bools are
    /// "not zero").
    pub fn fill(&mut self, lit: Lit) {
        let f = lit.as_f64();
        match self {
            Buffer::F32(v) => v.fill(f as f32),
            Buffer::F64(v) => v.fill(f),
            Buffer::F16(v) => v.fill(crate::scalar::f16_from_f64(f)),
            Buffer::BF16(v) => v.fill(crate::scalar::bf16_from_f64(f)),
            Buffer::I32(v) => v.fill(lit.as_i64() as i32),
            Buffer::I64(v) => v.fill(lit.as_i64()),
            Buffer::Bool(v) => v.fill(lit.as_i64() != 0),
            Buffer::U8(v) => v.fill(small_int(lit, DType::U8) as u8),
            Buffer::I8(v) => v.fill(small_int(lit, DType::I8) as i8),
            Buffer::I16(v) => v.fill(small_int(lit, DType::I16) as i16),
            Buffer::U16(v) => v.fill(small_int(lit, DType::U16) as u16),
            Buffer::U32(v) => v.fill(small_int(lit, DType::U32) as u32),
            Buffer::U64(v) => v.fill(small_int(lit, DType::U64) as u64),
        }
    }

    /// Element `i` as a literal of the buffer's dtype.
    pub fn get(&self, i: usize) -> Lit {
        match self {
            Buffer::F32(v) => v[i].to_lit(),
            Buffer::F64(v) => v[i].to_lit(),
            Buffer::F16(v) => v[i].to_lit(),
            Buffer::BF16(v) => v[i].to_lit(),
            Buffer::I32(v) => v[i].to_lit(),
            Buffer::I64(v) => v[i].to_lit(),
            Buffer::Bool(v) => v[i].to_lit(),
            Buffer::U8(v) => v[i].to_lit(),
            Buffer::I8(v) => v[i].to_lit(),
            Buffer::I16(v) => v[i].to_lit(),
            Buffer::U16(v) => v[i].to_lit(),
            Buffer::U32(v) => v[i].to_lit(),
            Buffer::U64(v) => v[i].to_lit(),
        }
    }

    /// Builds a buffer of `dtype` from literals (each converted to `dtype`);
    /// fails only if the memory cannot be had.
    pub fn from_lits(
        dtype: DType,
        lits: impl ExactSizeIterator<Item = Lit>,
    ) -> Result<Buffer, IrError> {
        use crate::scalar::{bf16_from_f64, f16_from_f64};
        Ok(match dtype {
            DType::F32 => Buffer::F32(collect(lits.map(|l| l.as_f64() as f32))?),
            DType::F64 => Buffer::F64(collect(lits.map(|l| l.as_f64()))?),
            DType::F16 => Buffer::F16(collect(lits.map(|l| f16_from_f64(l.as_f64())))?),
            DType::BF16 => Buffer::BF16(collect(lits.map(|l| bf16_from_f64(l.as_f64())))?),
            DType::I32 => Buffer::I32(collect(lits.map(|l| l.as_i64() as i32))?),
            DType::I64 => Buffer::I64(collect(lits.map(|l| l.as_i64()))?),
            DType::Bool => Buffer::Bool(collect(lits.map(|l| l.as_i64() != 0))?),
            DType::U8 => Buffer::U8(collect(lits.map(|l| small_int(l, DType::U8) as u8))?),
            DType::I8 => Buffer::I8(collect(lits.map(|l| small_int(l, DType::I8) as i8))?),
            DType::I16 => Buffer::I16(collect(lits.map(|l| small_int(l, DType::I16) as i16))?),
            DType::U16 => Buffer::U16(collect(lits.map(|l| small_int(l, DType::U16) as u16))?),
            DType::U32 => Buffer::U32(collect(lits.map(|l| small_int(l, DType::U32) as u32))?),
            DType::U64 => Buffer::U64(collect(lits.map(|l| small_int(l, DType::U64) as u64))?),
        })
    }
}

/// A literal as a value of a narrow or unsigned integer dtype (a `u64`
/// as its bit pattern): a float converts as a cast does
/// (truncated, saturating, NaN to 0), an integer wraps.
fn small_int(lit: Lit, dtype: DType) -> i64 {
    match lit {
        Lit::Float(f) => crate::scalar::float_to_int(f, dtype),
        other => dtype.wrap_int(other.as_i64()),
    }
}

/// A concrete tensor value: type plus shared storage whose length always
/// equals the shape's element count.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    ty: TensorType,
    data: Arc<Storage>,
}

/// An array's storage: gives its buffer to the [`crate::pool`] when the
/// last array sharing it is dropped.
#[derive(Debug, PartialEq)]
struct Storage(Buffer);

/// A weak handle to an array's storage ([`Array::storage_ref`]): it
/// keeps the storage's address from being reused, never its values.
#[derive(Clone, Debug)]
pub struct StorageRef(Weak<Storage>);

impl StorageRef {
    /// Whether some array still holds the storage.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }

    /// Whether `array` holds this storage (always false once it is gone).
    pub fn names(&self, array: &Array) -> bool {
        self.is_alive() && std::ptr::eq(self.0.as_ptr(), Arc::as_ptr(&array.data))
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        let buf = std::mem::replace(&mut self.0, Buffer::Bool(Vec::new()));
        // Small buffers stay with this thread, not the shared pool (which
        // would refuse them).
        if buf.allocated_bytes() >= crate::pool::MIN_POOLED_BYTES {
            crate::pool::pool().give(buf);
        } else {
            crate::pool::give_small(buf);
        }
    }
}

impl Array {
    /// Wraps a buffer; fails if its length does not match `shape`.
    pub fn new(shape: Shape, data: Buffer) -> Result<Array, IrError> {
        let dtype = data.dtype();
        // A buffer that exists holds its bytes: a matching nonzero length
        // needs no size check (every output of every call comes through
        // here). An empty one still does: its other dims must fit too.
        if !data.is_empty() && shape.checked_numel() == Some(data.len()) {
            return Ok(Array {
                ty: TensorType::new(dtype, shape),
                data: Arc::new(Storage(data)),
            });
        }
        shape.byte_size(dtype)?;
        if data.len() != shape.numel() {
            return Err(IrError::Length {
                shape,
                expected: shape.numel(),
                found: data.len(),
            });
        }
        Ok(Array {
            ty: TensorType::new(dtype, shape),
            data: Arc::new(Storage(data)),
        })
    }

    /// [`Array::new`] with its rare error boxed, for hot paths: a
    /// `Result<Array, IrError>` is twice an array's size and is copied
    /// about whole.
    #[inline]
    pub fn from_exact(shape: Shape, data: Buffer) -> Result<Array, Box<IrError>> {
        if shape.checked_numel() == Some(data.len()) {
            return Ok(Array {
                ty: TensorType::new(data.dtype(), shape),
                data: Arc::new(Storage(data)),
            });
        }
        Array::new(shape, data).map_err(Box::new)
    }

    /// From a vector of elements.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Array, IrError> {
        Array::new(Shape::new(shape)?, T::into_buffer(data))
    }

    /// A tensor filled with one value.
    pub fn full(ty: TensorType, value: Lit) -> Result<Array, IrError> {
        let n = ty.shape.byte_size(ty.dtype).map(|_| ty.shape.numel())?;
        Array::new(ty.shape, Buffer::filled(ty.dtype, n, value)?)
    }

    /// The type (dtype + shape).
    pub fn ty(&self) -> TensorType {
        self.ty
    }

    /// Whether its type is `ty` (compared in place: a dispatch asks this
    /// of every argument, and a `TensorType` is 72 bytes to copy).
    #[inline]
    pub fn has_type(&self, ty: &TensorType) -> bool {
        self.ty == *ty
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.ty.shape
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.ty.dtype
    }

    /// The storage.
    pub fn buffer(&self) -> &Buffer {
        &self.data.0
    }

    /// Borrows the elements as `T`; fails if the dtype differs.
    pub fn as_slice<T: Element>(&self) -> Result<&[T], IrError> {
        T::slice(&self.data.0).ok_or(IrError::WrongElement {
            actual: self.dtype(),
            asked: T::DTYPE,
        })
    }

    /// The same data under another shape of equal element count.
    pub fn reshaped(&self, shape: Shape) -> Result<Array, IrError> {
        if shape.numel() != self.ty.shape.numel() {
            return Err(IrError::Reshape {
                from: self.ty.shape,
                to: shape,
            });
        }
        Ok(Array {
            ty: TensorType::new(self.dtype(), shape),
            data: self.data.clone(),
        })
    }

    /// A weak handle naming this array's storage, for caches of values
    /// derived from it (transformed weights): storage is never written
    /// after it is made, and while the handle is held no other storage
    /// can take its address.
    pub fn storage_ref(&self) -> StorageRef {
        StorageRef(Arc::downgrade(&self.data))
    }

    /// Where this array's storage lives: equal for arrays that share it
    /// (reshapes, clones), and the key [`StorageRef::names`] confirms.
    pub fn storage_addr(&self) -> usize {
        Arc::as_ptr(&self.data) as usize
    }

    /// If every element is the same (bitwise for floats), that element.
    pub fn splat_value(&self) -> Option<Lit> {
        let n = self.data.0.len();
        if n == 0 {
            return None;
        }
        let first = self.data.0.get(0);
        (1..n).all(|i| self.data.0.get(i) == first).then_some(first)
    }
}
