//! `math.rs`'s f32 functions eight lanes at a time (AVX2 + FMA), for
//! generated code to call on a block of values: Cranelift emits only
//! 128-bit vectors, and these functions are compute-bound (a gelu is ~25
//! vector instructions per four values inline).
//!
//! Each function performs the same IEEE operations in the same order as the
//! inline version built with FMA (`Math` with `fma: true`), so both give
//! bit-identical results; the test `simd_helpers_match_inline_math_bit_for_bit`
//! holds them to that. `x < y ? y : x` is `_mm256_max_ps(y, x)` and
//! `y < x ? y : x` is `_mm256_min_ps(y, x)`: the operand order that keeps
//! `Math::pmax`/`pmin`'s NaN behaviour.

use super::super::math::{
    EXP_CEIL, EXP_FLOOR, EXP_LO, EXP_POLY, GELU_C, GELU_CK, LN2_HI, LN2_LO, LOG_POLY, MAGIC,
    TANH_POLY, TANH_SMALL,
};
use std::arch::x86_64::*;

#[target_feature(enable = "avx2,fma")]
#[inline]
fn c(v: f32) -> __m256 {
    _mm256_set1_ps(v)
}

#[target_feature(enable = "avx2,fma")]
#[inline]
fn ci(v: i32) -> __m256i {
    _mm256_set1_epi32(v)
}

#[target_feature(enable = "avx2,fma")]
#[inline]
fn horner(x: __m256, coeffs: &[f32]) -> __m256 {
    let mut acc = c(coeffs[0]);
    for &k in &coeffs[1..] {
        acc = _mm256_fmadd_ps(acc, x, c(k));
    }
    acc
}

/// `mask ? a : b` for a compare mask.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn select(mask: __m256, a: __m256, b: __m256) -> __m256 {
    _mm256_blendv_ps(b, a, mask)
}

/// `Math::exp_from`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn exp_from(x: __m256, lo: f32) -> __m256 {
    let xc = _mm256_max_ps(c(lo), x);
    let xc = _mm256_min_ps(c(EXP_CEIL), xc);
    let magic = c(MAGIC);
    let t = _mm256_fmadd_ps(xc, c(std::f32::consts::LOG2_E), magic);
    let n = _mm256_sub_ps(t, magic);
    let r = _mm256_fmadd_ps(n, c(LN2_HI), xc);
    let r = _mm256_fmadd_ps(n, c(LN2_LO), r);
    let p = horner(r, &EXP_POLY);
    let r2 = _mm256_mul_ps(r, r);
    let y = _mm256_fmadd_ps(p, r2, r);
    let y = _mm256_add_ps(y, c(1.0));
    let ti = _mm256_castps_si256(t);
    if lo >= -87.0 {
        let e = _mm256_sub_epi32(ti, ci(0x4B40_0000 - 127));
        let e = _mm256_slli_epi32::<23>(e);
        return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    }
    let ni = _mm256_sub_epi32(ti, _mm256_castps_si256(magic));
    let n1 = _mm256_srai_epi32::<1>(ni);
    let n2 = _mm256_sub_epi32(ni, n1);
    let e1 = _mm256_slli_epi32::<23>(_mm256_add_epi32(n1, ci(127)));
    let e2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(n2, ci(127)));
    let y = _mm256_mul_ps(y, _mm256_castsi256_ps(e1));
    _mm256_mul_ps(y, _mm256_castsi256_ps(e2))
}

/// `Math::exp`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn exp(x: __m256) -> __m256 {
    exp_from(x, EXP_LO)
}

/// `Math::log`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn log(x: __m256) -> __m256 {
    let is_sub = _mm256_cmp_ps::<_CMP_LT_OQ>(x, c(f32::MIN_POSITIVE));
    let xs = _mm256_mul_ps(x, c(8388608.0));
    let xv = select(is_sub, xs, x);
    let bits = _mm256_castps_si256(xv);
    let e = _mm256_srai_epi32::<23>(bits);
    let e = _mm256_sub_epi32(e, ci(126));
    let mb = _mm256_and_si256(bits, ci(0x007F_FFFF));
    let mb = _mm256_or_si256(mb, ci(0x3F00_0000));
    let m = _mm256_castsi256_ps(mb);
    let e = _mm256_cvtepi32_ps(e);
    let e_sub = _mm256_sub_ps(e, c(23.0));
    let e = select(is_sub, e_sub, e);
    let small = _mm256_cmp_ps::<_CMP_LT_OQ>(m, c(std::f32::consts::FRAC_1_SQRT_2));
    let one = c(1.0);
    let e = select(small, _mm256_sub_ps(e, one), e);
    let m = select(small, _mm256_add_ps(m, m), m);
    let m = _mm256_sub_ps(m, one);
    let z = _mm256_mul_ps(m, m);
    let p = horner(m, &LOG_POLY);
    let y = _mm256_mul_ps(_mm256_mul_ps(p, m), z);
    let y = _mm256_fmadd_ps(e, c(-LN2_LO), y);
    let y = _mm256_fmadd_ps(z, c(-0.5), y);
    let r = _mm256_add_ps(m, y);
    let r = _mm256_fmadd_ps(e, c(-LN2_HI), r);
    let zero = c(0.0);
    let inf = c(f32::INFINITY);
    let r = select(_mm256_cmp_ps::<_CMP_EQ_OQ>(x, inf), inf, r);
    let r = select(
        _mm256_cmp_ps::<_CMP_EQ_OQ>(x, zero),
        c(f32::NEG_INFINITY),
        r,
    );
    let r = select(_mm256_cmp_ps::<_CMP_LT_OQ>(x, zero), c(f32::NAN), r);
    select(_mm256_cmp_ps::<_CMP_UNORD_Q>(x, x), x, r)
}

/// `Math::tanh`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn tanh(x: __m256) -> __m256 {
    let sign = _mm256_and_si256(_mm256_castps_si256(x), ci(i32::MIN));
    let ax = _mm256_and_ps(x, _mm256_castsi256_ps(ci(i32::MAX)));
    let two = c(2.0);
    let one = c(1.0);
    let e = exp_from(_mm256_mul_ps(ax, two), 0.0);
    let q = _mm256_div_ps(two, _mm256_add_ps(e, one));
    let big = _mm256_sub_ps(one, q);
    let z = _mm256_mul_ps(x, x);
    let pz = _mm256_mul_ps(horner(z, &TANH_POLY), z);
    let small = _mm256_fmadd_ps(pz, ax, ax);
    let is_small = _mm256_cmp_ps::<_CMP_LT_OQ>(ax, c(TANH_SMALL));
    let r = select(is_small, small, big);
    _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(r), sign))
}

/// `Math::sigmoid`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn sigmoid(x: __m256) -> __m256 {
    let nx = _mm256_xor_ps(x, c(-0.0));
    let e = exp_from(nx, EXP_FLOOR);
    let one = c(1.0);
    _mm256_div_ps(one, _mm256_add_ps(one, e))
}

/// `Math::gelu`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn gelu(x: __m256) -> __m256 {
    let x2 = _mm256_mul_ps(x, x);
    let inner = _mm256_fmadd_ps(x2, c(GELU_CK), c(GELU_C));
    let e = exp_from(_mm256_mul_ps(inner, x), EXP_FLOOR);
    _mm256_div_ps(x, _mm256_add_ps(c(1.0), e))
}

/// Loads eight f32s as two 16-byte halves: generated code stores its block
/// buffers 16 bytes at a time, and a 32-byte load spanning two stores still
/// in the store buffer cannot be forwarded from them (it waits for both to
/// reach the cache).
///
/// # Safety
/// `p` must point to eight readable f32s.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn load(p: *const f32) -> __m256 {
    // SAFETY: the caller vouches for p[0..8].
    unsafe { _mm256_loadu2_m128(p.add(4), p) }
}

/// Defines `extern "C" fn $name(p, n)` applying `$f` to `p[0..n]` in place.
macro_rules! block_fn {
    ($name:ident, $f:ident) => {
        /// Applies the function in place to `n` f32s at `p`.
        ///
        /// # Safety
        /// `p` must point to `n` initialised, writable, unaliased f32s (or
        /// `n <= 0`), and the CPU must have AVX2 and FMA.
        #[target_feature(enable = "avx2,fma")]
        pub unsafe extern "C" fn $name(p: *mut f32, n: i64) {
            let n = n.max(0) as usize;
            let mut i = 0;
            // Two vectors per step: the function is one long dependency
            // chain, and two independent ones keep both FMA pipes busy.
            while i + 32 <= n {
                // SAFETY: i + 32 <= n, so all four vectors lie inside `p[..n]`.
                unsafe {
                    let a = load(p.add(i));
                    let b = load(p.add(i + 8));
                    let c = load(p.add(i + 16));
                    let d = load(p.add(i + 24));
                    _mm256_storeu_ps(p.add(i), $f(a));
                    _mm256_storeu_ps(p.add(i + 8), $f(b));
                    _mm256_storeu_ps(p.add(i + 16), $f(c));
                    _mm256_storeu_ps(p.add(i + 24), $f(d));
                }
                i += 32;
            }
            while i < n {
                let k = (n - i).min(8);
                let mut lane = [0f32; 8];
                // SAFETY: k <= n - i elements from `p + i` are inside
                // `p[..n]`; `lane` holds 8 and does not overlap `p`.
                unsafe {
                    std::ptr::copy_nonoverlapping(p.add(i), lane.as_mut_ptr(), k);
                    let v = $f(_mm256_loadu_ps(lane.as_ptr()));
                    _mm256_storeu_ps(lane.as_mut_ptr(), v);
                    std::ptr::copy_nonoverlapping(lane.as_ptr(), p.add(i), k);
                }
                i += k;
            }
        }
    };
}

block_fn!(tj_exp_x8, exp);
block_fn!(tj_log_x8, log);
block_fn!(tj_tanh_x8, tanh);
block_fn!(tj_sigmoid_x8, sigmoid);
block_fn!(tj_gelu_x8, gelu);
