//! `Scalar`: the Rust numbers that may stand beside a tensor in an operator
//! (`f32 f64 i32 i64 u8 i8`). `Tensor op scalar` is one generic impl over this
//! trait, so unsuffixed literals infer (`(var + 1e-5).rsqrt()`,
//! `x * 2.0 - 1.0`). A scalar takes the tensor's dtype; one the dtype cannot
//! hold exactly (2.5 for an i32 tensor) is an error, not a silent truncation.

use tilejit_ir::{DType, IrError, Lit};

mod sealed {
    pub trait Sealed {}
}

/// A Rust number usable as an operand beside a tensor.
pub trait Scalar: Copy + sealed::Sealed {
    /// The value as a literal (float or int).
    fn lit(self) -> Lit;
}

macro_rules! scalar {
    ($t:ty, $conv:expr) => {
        impl sealed::Sealed for $t {}
        impl Scalar for $t {
            fn lit(self) -> Lit {
                ($conv)(self)
            }
        }
    };
}
scalar!(f32, |v: f32| Lit::Float(v as f64));
scalar!(f64, Lit::Float);
scalar!(i32, |v: i32| Lit::Int(v as i64));
scalar!(i64, Lit::Int);
scalar!(u8, |v: u8| Lit::Int(v as i64));
scalar!(i8, |v: i8| Lit::Int(v as i64));

/// Converts a scalar to a literal of `dtype`, rejecting inexact conversions
/// into integer dtypes.
pub(crate) fn scalar_lit<S: Scalar>(s: S, dtype: DType) -> Result<Lit, IrError> {
    let lit = s.lit();
    let v = lit.as_f64();
    match (lit, dtype) {
        (_, DType::Bool) => Ok(Lit::Bool(v != 0.0)),
        (_, d) if d.is_float() => Ok(Lit::from_f64(v, d)),
        (Lit::Int(i), d) if d.wrap_int(i) == i => Ok(Lit::Int(i)),
        // Whole and inside the dtype's range (2^63 itself is not: `as`
        // would saturate it to i64::MAX, which converts back to 2^63).
        (Lit::Float(f), d)
            if f.fract() == 0.0
                && (i64::MIN as f64..-(i64::MIN as f64)).contains(&f)
                && d.wrap_int(f as i64) as f64 == f =>
        {
            Ok(Lit::Int(f as i64))
        }
        (_, d) => Err(IrError::InexactScalar { value: v, dtype: d }),
    }
}
