//! Scalar semantics shared by every executor that claims to match the
//! reference interpreter (the interpreter itself and the simulated device's
//! vector unit): one definition of the functions whose edge cases matter
//! (NaN propagation, integer division by zero, the GELU constant, casts).

use crate::dtype::DType;

/// `sqrt(2/pi)` as the GELU tanh approximation writes it.
pub const GELU_C: f64 = 0.7978845608;

/// GELU, tanh approximation: `0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))`.
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (GELU_C * (x + 0.044715 * x * x * x)).tanh())
}

/// `1/(1+e^-x)`.
pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `max(x, 0)`, NaN-propagating.
pub fn relu(x: f64) -> f64 {
    if x.is_nan() || x > 0.0 {
        x
    } else {
        0.0
    }
}

/// Maximum that propagates NaN (numpy's `maximum`).
pub fn max_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Minimum that propagates NaN (numpy's `minimum`).
pub fn min_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// Integer division truncating toward zero, with `x / 0 == 0` and
/// `i64::MIN / -1` wrapping.
pub fn int_div(a: i64, b: i64) -> i64 {
    if b == 0 {
        0
    } else {
        a.wrapping_div(b)
    }
}

/// A float converted to an integer or bool dtype: `!= 0` for bool (NaN is
/// true); otherwise truncation toward zero, saturating, NaN -> 0 (Rust's
/// `as`).
pub fn float_to_int(f: f64, to: DType) -> i64 {
    match to {
        DType::Bool => (f != 0.0) as i64,
        DType::I32 => f as i32 as i64,
        _ => f as i64,
    }
}

/// An integer converted to a float dtype (through f64, then rounded).
pub fn int_to_float(i: i64, to: DType) -> f64 {
    to.round_float(i as f64)
}

/// `v` rounded to f32 "to odd": truncated toward zero, with the last bit
/// set when anything was dropped. Rounding that value to nearest-even in
/// any format at least two bits narrower gives the same result as
/// rounding `v` directly (no double-rounding error).
fn f32_round_to_odd(v: f64) -> f32 {
    let f = v as f32;
    if !v.is_finite() || f as f64 == v {
        return f;
    }
    // `f` is nonzero and of `v`'s sign; stepping its bits down moves it
    // toward zero (from infinity to the largest finite value).
    let t = if (f as f64).abs() > v.abs() {
        f32::from_bits(f.to_bits() - 1)
    } else {
        f
    };
    f32::from_bits(t.to_bits() | 1)
}

/// `v` correctly rounded (to nearest, ties to even) to f16. `half`'s own
/// `f16::from_f64` (2.7.1) misrounds values just above a tie (half-rs
/// issue #151).
pub fn f16_from_f64(v: f64) -> half::f16 {
    half::f16::from_f32(f32_round_to_odd(v))
}

/// `v` correctly rounded to bf16 (`half`'s `bf16::from_f64` misrounds
/// some values, even f32-exact ones, as [`f16_from_f64`] explains).
pub fn bf16_from_f64(v: f64) -> half::bf16 {
    half::bf16::from_f32(f32_round_to_odd(v))
}
