//! Deterministic random tensors: a counter-based generator (SplitMix64 of
//! seed and element index), so a value depends only on (seed, index) and the
//! same call gives the same tensor on every machine and thread count.

use tilejit_ir::{Array, DType, IrError, Shape};

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in [0, 1) with 24 random bits (every f32 of that grid is exact).
fn unit(seed: u64, i: u64) -> f32 {
    (splitmix64(seed ^ splitmix64(i)) >> 40) as f32 / (1u64 << 24) as f32
}

fn make(shape: &[usize], f: impl Fn(u64) -> f32 + Sync) -> Result<Array, IrError> {
    let s = Shape::new(shape)?;
    s.byte_size(DType::F32)?;
    Array::new(s, tilejit_runtime::f32_buffer_from_fn(s.numel(), f)?)
}

/// f32 uniform in [0, 1).
pub(crate) fn uniform(shape: &[usize], seed: u64) -> Result<Array, IrError> {
    make(shape, |i| unit(seed, i))
}

/// f32 standard normal (Box-Muller on two uniforms per element).
pub(crate) fn normal(shape: &[usize], seed: u64) -> Result<Array, IrError> {
    make(shape, |i| {
        let u1 = 1.0 - unit(seed, 2 * i) as f64; // (0, 1]: log is finite
        let u2 = unit(seed, 2 * i + 1) as f64;
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    })
}
