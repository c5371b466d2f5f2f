//! Element types: the `DType` tag, the `Element` trait that ties a Rust type to
//! its tag, and `Lit`, a scalar literal that carries its value exactly.

use crate::array::Buffer;
use half::{bf16, f16};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::hash::{Hash, Hasher};

/// The element type of a tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
    /// IEEE binary16.
    F16,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    BF16,
    /// Signed 32-bit integer, wrapping arithmetic.
    I32,
    /// Signed 64-bit integer, wrapping arithmetic.
    I64,
    /// Boolean, stored one byte per element.
    Bool,
    /// Unsigned 8-bit integer, wrapping arithmetic (appended after `Bool`
    /// so the earlier variants keep their codes).
    U8,
    /// Signed 8-bit integer, wrapping arithmetic.
    I8,
    /// Signed 16-bit integer, wrapping arithmetic (appended after `I8`).
    I16,
    /// Unsigned 16-bit integer, wrapping arithmetic.
    U16,
    /// Unsigned 32-bit integer, wrapping arithmetic.
    U32,
    /// Unsigned 64-bit integer, wrapping arithmetic. Held in an `i64` (and
    /// a [`Lit::Int`]) as its bit pattern: values above `i64::MAX` look
    /// negative there, so every op that reads the value (compare, divide,
    /// max/min, shift right, cast to float) reads it as `u64`.
    U64,
}

impl DType {
    /// Every dtype, in a fixed order (for tests and tables).
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::I16,
        DType::U16,
        DType::U32,
        DType::U64,
    ];

    /// Size of one element in bytes.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::Bool | DType::U8 | DType::I8 => 1,
        }
    }

    /// True for the four floating-point dtypes.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// True for the eight integer dtypes (`i32 i64 u8 i8 i16 u16 u32 u64`).
    pub const fn is_int(self) -> bool {
        matches!(
            self,
            DType::I32
                | DType::I64
                | DType::U8
                | DType::I8
                | DType::I16
                | DType::U16
                | DType::U32
                | DType::U64
        )
    }

    /// True for the unsigned integer dtypes (`u8 u16 u32 u64`): their
    /// compares, `max`/`min`, division and right shift are unsigned.
    pub const fn is_unsigned(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// The short name used in the text form and in messages (`f32`, `bool`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
        }
    }

    /// Parses a name printed by [`DType::name`].
    pub fn from_name(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Rounds an `f64` to the nearest value of this (float) dtype, returned as
    /// `f64`. The reference interpreter computes floats in f64 and rounds after
    /// every op, which gives exactly the dtype's result for `+ - * / sqrt`
    /// (f64 has more than twice the precision of every narrower float type).
    pub fn round_float(self, v: f64) -> f64 {
        match self {
            DType::F32 => v as f32 as f64,
            DType::F16 => crate::scalar::f16_from_f64(v).to_f64(),
            DType::BF16 => crate::scalar::bf16_from_f64(v).to_f64(),
            _ => v,
        }
    }

    /// Wraps an `i64` into this integer dtype's range (two's complement;
    /// `u8` to `0..=255`, `u32` to `0..2^32`; a `u64` keeps its 64 bits).
    pub fn wrap_int(self, v: i64) -> i64 {
        match self {
            DType::I32 => v as i32 as i64,
            DType::U8 => v as u8 as i64,
            DType::I8 => v as i8 as i64,
            DType::I16 => v as i16 as i64,
            DType::U16 => v as u16 as i64,
            DType::U32 => v as u32 as i64,
            DType::Bool => (v != 0) as i64,
            _ => v,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that can be a tensor element: `f32 f64 f16 bf16 i32 i64 bool
/// u8 i8 i16 u16 u32 u64`.
/// Sealed: the set of dtypes is closed.
pub trait Element: Copy + Send + Sync + PartialEq + fmt::Debug + 'static + sealed::Sealed {
    /// The dtype tag of this element type.
    const DTYPE: DType;
    /// The value as a literal of this dtype.
    fn to_lit(self) -> Lit;
    /// Converts a literal of this element's dtype back (used by the reader).
    fn from_lit(lit: Lit) -> Self;
    /// Wraps a vector in the matching [`Buffer`] variant.
    fn into_buffer(v: Vec<Self>) -> Buffer;
    /// Borrows the elements if the buffer holds this type.
    fn slice(b: &Buffer) -> Option<&[Self]>;
}

macro_rules! buffer_methods {
    ($v:ident) => {
        fn into_buffer(v: Vec<Self>) -> Buffer {
            Buffer::$v(v)
        }
        fn slice(b: &Buffer) -> Option<&[Self]> {
            match b {
                Buffer::$v(v) => Some(v),
                _ => None,
            }
        }
    };
}

macro_rules! float_element {
    ($t:ty, $v:ident, $d:expr, $to:expr, $from:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
            fn to_lit(self) -> Lit {
                Lit::Float(($to)(self))
            }
            fn from_lit(lit: Lit) -> Self {
                ($from)(lit.as_f64())
            }
            buffer_methods!($v);
        }
    };
}
float_element!(f32, F32, DType::F32, |v: f32| v as f64, |v: f64| v as f32);
float_element!(f64, F64, DType::F64, |v: f64| v, |v: f64| v);
float_element!(
    f16,
    F16,
    DType::F16,
    |v: f16| v.to_f64(),
    crate::scalar::f16_from_f64
);
float_element!(
    bf16,
    BF16,
    DType::BF16,
    |v: bf16| v.to_f64(),
    crate::scalar::bf16_from_f64
);

impl sealed::Sealed for i32 {}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
    fn to_lit(self) -> Lit {
        Lit::Int(self as i64)
    }
    fn from_lit(lit: Lit) -> Self {
        lit.as_i64() as i32
    }
    buffer_methods!(I32);
}
impl sealed::Sealed for i64 {}
impl Element for i64 {
    const DTYPE: DType = DType::I64;
    fn to_lit(self) -> Lit {
        Lit::Int(self)
    }
    fn from_lit(lit: Lit) -> Self {
        lit.as_i64()
    }
    buffer_methods!(I64);
}
impl sealed::Sealed for u8 {}
impl Element for u8 {
    const DTYPE: DType = DType::U8;
    fn to_lit(self) -> Lit {
        Lit::Int(self as i64)
    }
    fn from_lit(lit: Lit) -> Self {
        lit.as_i64() as u8
    }
    buffer_methods!(U8);
}
impl sealed::Sealed for i8 {}
impl Element for i8 {
    const DTYPE: DType = DType::I8;
    fn to_lit(self) -> Lit {
        Lit::Int(self as i64)
    }
    fn from_lit(lit: Lit) -> Self {
        lit.as_i64() as i8
    }
    buffer_methods!(I8);
}
macro_rules! int_element {
    ($t:ty, $v:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$v;
            fn to_lit(self) -> Lit {
                // u64: the bit pattern (see `DType::U64`).
                Lit::Int(self as i64)
            }
            fn from_lit(lit: Lit) -> Self {
                lit.as_i64() as $t
            }
            buffer_methods!($v);
        }
    };
}
int_element!(i16, I16);
int_element!(u16, U16);
int_element!(u32, U32);
int_element!(u64, U64);
impl sealed::Sealed for bool {}
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn to_lit(self) -> Lit {
        Lit::Bool(self)
    }
    fn from_lit(lit: Lit) -> Self {
        lit.as_i64() != 0
    }
    buffer_methods!(Bool);
}

/// A scalar literal. Floats compare and hash by bit pattern so that graphs
/// holding `NaN` or `-0.0` literals can still be hash-consed exactly.
#[derive(Copy, Clone, Debug, Serialize, Deserialize)]
pub enum Lit {
    /// A float literal (any float dtype; already rounded to it).
    Float(f64),
    /// An integer literal (any integer dtype; already wrapped to it).
    Int(i64),
    /// A boolean literal.
    Bool(bool),
}

impl Lit {
    /// The value as f64 (ints convert, bools are 0/1).
    pub fn as_f64(self) -> f64 {
        match self {
            Lit::Float(v) => v,
            Lit::Int(v) => v as f64,
            Lit::Bool(b) => b as u8 as f64,
        }
    }

    /// The value as i64 (floats truncate toward zero, saturating; NaN is 0).
    pub fn as_i64(self) -> i64 {
        match self {
            Lit::Float(v) => v as i64,
            Lit::Int(v) => v,
            Lit::Bool(b) => b as i64,
        }
    }

    /// Converts `v` to a literal of `dtype`: rounded to a float dtype, or
    /// converted to an integer one as a cast converts it (toward zero,
    /// saturating at the dtype's bounds, NaN to 0).
    pub fn from_f64(v: f64, dtype: DType) -> Lit {
        match dtype {
            DType::Bool => Lit::Bool(v != 0.0),
            // The cast's rule: truncate toward zero, saturate, NaN -> 0.
            d if d.is_int() => Lit::Int(crate::scalar::float_to_int(v, d)),
            d => Lit::Float(d.round_float(v)),
        }
    }

    /// Converts an integer to a literal of `dtype`.
    pub fn from_i64(v: i64, dtype: DType) -> Lit {
        match dtype {
            DType::Bool => Lit::Bool(v != 0),
            d if d.is_int() => Lit::Int(d.wrap_int(v)),
            d => Lit::Float(d.round_float(v as f64)),
        }
    }

    /// True if this literal is of the right kind for `dtype`.
    pub fn fits(self, dtype: DType) -> bool {
        match self {
            Lit::Float(v) => {
                dtype.is_float() && (v.is_nan() || dtype.round_float(v).to_bits() == v.to_bits())
            }
            Lit::Int(v) => dtype.is_int() && dtype.wrap_int(v) == v,
            Lit::Bool(_) => dtype == DType::Bool,
        }
    }
}

impl PartialEq for Lit {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Lit::Float(a), Lit::Float(b)) => a.to_bits() == b.to_bits(),
            (Lit::Int(a), Lit::Int(b)) => a == b,
            (Lit::Bool(a), Lit::Bool(b)) => a == b,
            _ => false,
        }
    }
}
impl Eq for Lit {}
impl Hash for Lit {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Lit::Float(v) => (0u8, v.to_bits()).hash(state),
            Lit::Int(v) => (1u8, *v).hash(state),
            Lit::Bool(v) => (2u8, *v).hash(state),
        }
    }
}

impl fmt::Display for Lit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // `{:?}` prints the shortest string that parses back to the same f64.
            Lit::Float(v) => write!(f, "{v:?}"),
            Lit::Int(v) => write!(f, "{v}"),
            Lit::Bool(v) => write!(f, "{v}"),
        }
    }
}
