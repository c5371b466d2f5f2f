//! Scalar semantics shared by every executor that claims to match the
//! reference interpreter (the interpreter itself and the simulated device's
//! vector unit): one definition of the functions whose edge cases matter
//! (NaN propagation, integer division by zero, the GELU constant, casts).

use crate::dtype::DType;

/// `sqrt(2/pi)` as the GELU tanh approximation writes it.
pub const GELU_C: f64 = 0.7978845608;

/// GELU, tanh approximation: `0.5x(1+tanh(u))`, `u =
/// sqrt(2/pi)(x+0.044715x^3)`, computed as the identity `x/(1+e^-2u)`:
/// `1 + tanh(u)` cancels to 0 in f64 too once `u < -19` (x < -7.2), where
/// the f32 result is still about `2x e^2u` (down to subnormals at x =
/// -10.6).
pub fn gelu(x: f64) -> f64 {
    x / (1.0 + (-2.0 * GELU_C * (x + 0.044715 * x * x * x)).exp())
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

/// The error function (`libm`'s, a port of FreeBSD's `erf`: under 1 ulp).
pub fn erf(x: f64) -> f64 {
    libm::erf(x)
}

/// numpy's `sign`: -1, 0 or 1; `sign(-0.0) = 0.0`, NaN stays NaN.
pub fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else if x == 0.0 {
        0.0
    } else {
        x
    }
}

/// numpy's float `mod`: `fmod(a, b)` moved into the divisor's sign by
/// adding `b` (so `-1 mod inf = inf`, as numpy gives), a zero result takes
/// `b`'s sign, and `a mod 0` is NaN.
pub fn float_mod(a: f64, b: f64) -> f64 {
    let m = a % b;
    if b == 0.0 {
        m
    } else if m != 0.0 {
        if (b < 0.0) != (m < 0.0) {
            m + b
        } else {
            m
        }
    } else {
        0.0f64.copysign(b)
    }
}

/// numpy's integer `mod`: the result has the divisor's sign, `x mod 0 =
/// 0` (numpy's value, with a warning there) and `MIN mod -1 = 0`.
pub fn int_mod(a: i64, b: i64) -> i64 {
    if b == 0 {
        return 0;
    }
    let r = a.wrapping_rem(b);
    if r != 0 && (r < 0) != (b < 0) {
        r + b
    } else {
        r
    }
}

/// `a << b` on an integer held in an i64 (the caller wraps to the dtype):
/// a count that is negative or at least 64 shifts every bit out, as one at
/// least the dtype's width does after wrapping (numpy's `left_shift`).
pub fn int_shl(a: i64, b: i64) -> i64 {
    if (0..64).contains(&b) {
        a.wrapping_shl(b as u32)
    } else {
        0
    }
}

/// `a >> b`, arithmetic on the i64 (logical for unsigned dtypes, whose
/// values are never negative): a count outside `0..64` leaves the sign
/// fill, 0 or -1 (numpy's `right_shift`).
pub fn int_shr(a: i64, b: i64) -> i64 {
    if (0..64).contains(&b) {
        a >> b
    } else {
        a >> 63
    }
}

/// Integer power by repeated squaring, wrapping. numpy raises on a
/// negative exponent; here `a^b` for `b < 0` is the integer part of
/// `1/a^|b|`: 1 for `a = 1`, `(-1)^b` for `a = -1`, and 0 otherwise
/// (including `a = 0`).
pub fn int_pow(a: i64, b: i64) -> i64 {
    if b < 0 {
        return match a {
            1 => 1,
            -1 => {
                if b & 1 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    let (mut base, mut e, mut r) = (a, b as u64, 1i64);
    while e != 0 {
        if e & 1 == 1 {
            r = r.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        e >>= 1;
    }
    r
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
        DType::U8 => f as u8 as i64,
        DType::I8 => f as i8 as i64,
        DType::I16 => f as i16 as i64,
        DType::U16 => f as u16 as i64,
        DType::U32 => f as u32 as i64,
        // The bit pattern of the saturated u64 (see `DType::U64`).
        DType::U64 => f as u64 as i64,
        _ => f as i64,
    }
}

/// An integer converted to a float dtype (through f64, then rounded).
/// `i` is read as a signed value; a `u64` source goes through
/// [`int_of_to_float`].
pub fn int_to_float(i: i64, to: DType) -> f64 {
    to.round_float(i as f64)
}

/// An integer of dtype `from` converted to a float dtype: as
/// [`int_to_float`], except that a `u64` reads its bits unsigned.
pub fn int_of_to_float(i: i64, from: DType, to: DType) -> f64 {
    if from == DType::U64 {
        to.round_float(i as u64 as f64)
    } else {
        to.round_float(i as f64)
    }
}

/// The integer value of `i` (of dtype `dt`) as an f64: a `u64` reads
/// its bits unsigned.
pub fn int_as_f64(i: i64, dt: DType) -> f64 {
    if dt == DType::U64 {
        i as u64 as f64
    } else {
        i as f64
    }
}

/// Orders two integers of dtype `dt` (held in i64s): `u64` unsigned,
/// every other dtype signed (the narrower unsigned ones are held
/// zero-extended, so signed order is theirs).
pub fn int_cmp(dt: DType, a: i64, b: i64) -> std::cmp::Ordering {
    if dt == DType::U64 {
        (a as u64).cmp(&(b as u64))
    } else {
        a.cmp(&b)
    }
}

/// `u64` division on bit patterns: `x / 0 == 0`.
pub fn u64_div(a: i64, b: i64) -> i64 {
    (a as u64).checked_div(b as u64).unwrap_or(0) as i64
}

/// `u64` remainder on bit patterns (numpy's `mod`; no sign to fix):
/// `x mod 0 == 0`.
pub fn u64_rem(a: i64, b: i64) -> i64 {
    (a as u64).checked_rem(b as u64).unwrap_or(0) as i64
}

/// `u64` maximum on bit patterns.
pub fn u64_max(a: i64, b: i64) -> i64 {
    (a as u64).max(b as u64) as i64
}

/// `u64` minimum on bit patterns.
pub fn u64_min(a: i64, b: i64) -> i64 {
    (a as u64).min(b as u64) as i64
}

/// `u64` logical right shift: a count of 64 or more (as unsigned) gives 0.
pub fn u64_shr(a: i64, b: i64) -> i64 {
    match u32::try_from(b as u64) {
        Ok(s) if s < 64 => ((a as u64) >> s) as i64,
        _ => 0,
    }
}

/// `u64` left shift: a count of 64 or more (as unsigned) gives 0.
pub fn u64_shl(a: i64, b: i64) -> i64 {
    match u32::try_from(b as u64) {
        Ok(s) if s < 64 => ((a as u64) << s) as i64,
        _ => 0,
    }
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
