//! Element values of a tile region while an instruction works on it: floats
//! widened to f64, integers and bools to i64, exactly as the reference
//! interpreter holds them, so every vector instruction computes the
//! interpreter's result (an op in f64, rounded to the dtype after it).

use half::{bf16, f16};
use tilejit_ir::{scalar, DType};

/// The valid region of a tile, row-major and compact.
#[derive(Clone, Debug, PartialEq)]
pub enum Vals {
    /// Float dtypes.
    F(Vec<f64>),
    /// Integer and bool dtypes.
    I(Vec<i64>),
}

/// Decodes `n` elements of `dt` from `bytes` onto the end of `out`.
pub fn decode_into(bytes: &[u8], dt: DType, out: &mut Vals) {
    match out {
        Vals::F(v) => match dt {
            DType::F32 => v.extend(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64),
            ),
            DType::F64 => v.extend(bytes.chunks_exact(8).map(|c| f64::from_le_bytes(arr8(c)))),
            DType::F16 => v.extend(
                bytes
                    .chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64()),
            ),
            DType::BF16 => v.extend(
                bytes
                    .chunks_exact(2)
                    .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f64()),
            ),
            _ => {}
        },
        Vals::I(v) => match dt {
            DType::I32 => v.extend(
                bytes
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64),
            ),
            DType::I64 => v.extend(bytes.chunks_exact(8).map(|c| i64::from_le_bytes(arr8(c)))),
            DType::Bool => v.extend(bytes.iter().map(|&b| (b != 0) as i64)),
            DType::U8 => v.extend(bytes.iter().map(|&b| b as i64)),
            DType::I8 => v.extend(bytes.iter().map(|&b| b as i8 as i64)),
            DType::I16 => v.extend(
                bytes
                    .chunks_exact(2)
                    .map(|c| i16::from_le_bytes([c[0], c[1]]) as i64),
            ),
            DType::U16 => v.extend(
                bytes
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]) as i64),
            ),
            DType::U32 => v.extend(
                bytes
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64),
            ),
            // The bit pattern, as the interpreter holds a u64.
            DType::U64 => v.extend(bytes.chunks_exact(8).map(|c| i64::from_le_bytes(arr8(c)))),
            _ => {}
        },
    }
}

fn arr8(c: &[u8]) -> [u8; 8] {
    let mut a = [0u8; 8];
    a.copy_from_slice(c);
    a
}

/// Encodes `vals[from..from + n]` as `dt` into `bytes` (which holds exactly
/// `n` elements). Floats round to `dt` here; integers wrap.
pub fn encode_from(vals: &Vals, from: usize, dt: DType, bytes: &mut [u8]) {
    let size = dt.size_bytes();
    let n = bytes.len() / size;
    // The dtype is matched once per row, not per element: this loop is the
    // simulator's inner loop for every vector instruction's result.
    match (vals, dt) {
        (Vals::F(v), DType::F32) => {
            for (c, &x) in bytes.chunks_exact_mut(4).zip(&v[from..from + n]) {
                c.copy_from_slice(&(x as f32).to_le_bytes());
            }
        }
        (Vals::F(v), DType::F64) => {
            for (c, &x) in bytes.chunks_exact_mut(8).zip(&v[from..from + n]) {
                c.copy_from_slice(&x.to_le_bytes());
            }
        }
        (Vals::F(v), DType::F16 | DType::BF16) => {
            for (c, &x) in bytes.chunks_exact_mut(2).zip(&v[from..from + n]) {
                encode_float(x, dt, c);
            }
        }
        (Vals::F(v), _) => {
            for (c, &x) in bytes.chunks_exact_mut(size).zip(&v[from..from + n]) {
                // A float value stored into an integer tile converts as a cast.
                encode_int(scalar::float_to_int(x, dt), dt, c);
            }
        }
        (Vals::I(v), DType::I32) => {
            for (c, &x) in bytes.chunks_exact_mut(4).zip(&v[from..from + n]) {
                c.copy_from_slice(&(x as i32).to_le_bytes());
            }
        }
        (Vals::I(v), _) => {
            for (c, &x) in bytes.chunks_exact_mut(size).zip(&v[from..from + n]) {
                if dt.is_float() {
                    encode_float(scalar::int_to_float(x, dt), dt, c);
                } else {
                    encode_int(x, dt, c);
                }
            }
        }
    }
}

fn encode_float(x: f64, dt: DType, c: &mut [u8]) {
    match dt {
        DType::F32 => c.copy_from_slice(&(x as f32).to_le_bytes()),
        DType::F16 => c.copy_from_slice(&scalar::f16_from_f64(x).to_le_bytes()),
        DType::BF16 => c.copy_from_slice(&scalar::bf16_from_f64(x).to_le_bytes()),
        _ => c.copy_from_slice(&x.to_le_bytes()),
    }
}

fn encode_int(x: i64, dt: DType, c: &mut [u8]) {
    match dt {
        DType::I64 | DType::U64 => c.copy_from_slice(&x.to_le_bytes()),
        DType::I32 | DType::U32 => c.copy_from_slice(&(x as u32).to_le_bytes()),
        DType::I16 | DType::U16 => c.copy_from_slice(&(x as u16).to_le_bytes()),
        // Two's complement: `x as u8` wraps u8 and i8 alike.
        DType::U8 | DType::I8 => c[0] = x as u8,
        _ => c[0] = (x != 0) as u8,
    }
}

/// An empty value list of the right family for `dt`.
pub fn empty(dt: DType, capacity: usize) -> Vals {
    if dt.is_float() {
        Vals::F(Vec::with_capacity(capacity))
    } else {
        Vals::I(Vec::with_capacity(capacity))
    }
}

impl Vals {
    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            Vals::F(v) => v.len(),
            Vals::I(v) => v.len(),
        }
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value `i` as f64 (ints converted).
    pub fn get_f(&self, i: usize) -> f64 {
        match self {
            Vals::F(v) => v[i],
            Vals::I(v) => v[i] as f64,
        }
    }

    /// A scalar literal as a value of `dt`, repeated `n` times.
    pub fn splat(s: f64, dt: DType, n: usize) -> Vals {
        if dt.is_float() {
            Vals::F(vec![dt.round_float(s); n])
        } else {
            // A u64 scalar above `i64::MAX` saturates as a u64 (a negative
            // one is an i64 bit pattern).
            let i = if dt == DType::U64 && s >= 0.0 {
                scalar::float_to_int(s, DType::U64)
            } else {
                scalar::float_to_int(s, DType::I64)
            };
            Vals::I(vec![dt.wrap_int(i); n])
        }
    }
}

/// Applies a binary function elementwise, rounding/wrapping to `dt`.
pub fn zip(a: &Vals, b: &Vals, dt: DType, f: fn(f64, f64) -> f64, g: fn(i64, i64) -> i64) -> Vals {
    match (a, b) {
        (Vals::F(x), Vals::F(y)) => {
            let it = x.iter().zip(y).map(|(&p, &q)| f(p, q));
            // Rounding chosen once per instruction, not per element.
            Vals::F(match dt {
                DType::F32 => it.map(|v| v as f32 as f64).collect(),
                DType::F64 => it.collect(),
                _ => it.map(|v| dt.round_float(v)).collect(),
            })
        }
        (Vals::I(x), Vals::I(y)) => Vals::I(
            x.iter()
                .zip(y)
                .map(|(&p, &q)| dt.wrap_int(g(p, q)))
                .collect(),
        ),
        // Both operands always share the instruction's dtype.
        _ => a.clone(),
    }
}

/// Applies a unary function elementwise, rounding/wrapping to `dt`.
pub fn map(a: &Vals, dt: DType, f: fn(f64) -> f64, g: fn(i64) -> i64) -> Vals {
    match a {
        Vals::F(x) => {
            let it = x.iter().map(|&p| f(p));
            Vals::F(match dt {
                DType::F32 => it.map(|v| v as f32 as f64).collect(),
                DType::F64 => it.collect(),
                _ => it.map(|v| dt.round_float(v)).collect(),
            })
        }
        Vals::I(x) => Vals::I(x.iter().map(|&p| dt.wrap_int(g(p))).collect()),
    }
}

/// Converts values of dtype `from` to dtype `to` (the reference cast).
pub fn cast(a: &Vals, from: DType, to: DType) -> Vals {
    match a {
        Vals::F(v) if to.is_float() => Vals::F(v.iter().map(|&f| to.round_float(f)).collect()),
        Vals::F(v) => Vals::I(v.iter().map(|&f| scalar::float_to_int(f, to)).collect()),
        Vals::I(v) if to.is_float() => Vals::F(
            v.iter()
                .map(|&i| scalar::int_of_to_float(i, from, to))
                .collect(),
        ),
        Vals::I(v) => Vals::I(v.iter().map(|&i| to.wrap_int(i)).collect()),
    }
}
