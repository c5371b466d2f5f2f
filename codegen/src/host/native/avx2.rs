//! The block helpers (`lanes.rs`'s math) on AVX2 + FMA: four 8-lane
//! vectors per step. `x < y ? y : x` is `_mm256_max_ps(y, x)` and
//! `y < x ? y : x` is `_mm256_min_ps(y, x)`: the operand order that keeps
//! `Math::pmax`/`pmin`'s NaN behaviour. Compares give all-ones lanes, which
//! `blendv` selects by.

use super::lanes::simd_math;
use std::arch::x86_64::*;

/// Values per step: four vectors of eight lanes.
const STEP: usize = 32;

/// Four float vectors, worked on in lockstep.
type F = [__m256; 4];
/// Four integer vectors.
type I = [__m256i; 4];
/// Four compare results (all-ones lanes where true).
type M = F;

#[inline(always)]
fn each<T>(f: impl FnMut(usize) -> T) -> [T; 4] {
    std::array::from_fn(f)
}

// One line per operation, so `lanes.rs` reads like `math.rs`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn splat(v: f32) -> F {
    [_mm256_set1_ps(v); 4]
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn splat_i(v: i32) -> I {
    [_mm256_set1_epi32(v); 4]
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn add(a: F, b: F) -> F {
    each(|i| _mm256_add_ps(a[i], b[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn sub(a: F, b: F) -> F {
    each(|i| _mm256_sub_ps(a[i], b[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn mul(a: F, b: F) -> F {
    each(|i| _mm256_mul_ps(a[i], b[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn div(a: F, b: F) -> F {
    each(|i| _mm256_div_ps(a[i], b[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn fma(a: F, b: F, c: F) -> F {
    each(|i| _mm256_fmadd_ps(a[i], b[i], c[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn pmax(a: F, b: F) -> F {
    each(|i| _mm256_max_ps(b[i], a[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn pmin(a: F, b: F) -> F {
    each(|i| _mm256_min_ps(b[i], a[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn lt(a: F, b: F) -> M {
    each(|i| _mm256_cmp_ps::<_CMP_LT_OQ>(a[i], b[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn eq(a: F, b: F) -> M {
    each(|i| _mm256_cmp_ps::<_CMP_EQ_OQ>(a[i], b[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn unordered(a: F, b: F) -> M {
    each(|i| _mm256_cmp_ps::<_CMP_UNORD_Q>(a[i], b[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn select(mask: M, a: F, b: F) -> F {
    each(|i| _mm256_blendv_ps(b[i], a[i], mask[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn bits(a: F) -> I {
    each(|i| _mm256_castps_si256(a[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn float(a: I) -> F {
    each(|i| _mm256_castsi256_ps(a[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn to_float(a: I) -> F {
    each(|i| _mm256_cvtepi32_ps(a[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn iadd(a: I, b: I) -> I {
    each(|i| _mm256_add_epi32(a[i], b[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn isub(a: I, b: I) -> I {
    each(|i| _mm256_sub_epi32(a[i], b[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn iand(a: I, b: I) -> I {
    each(|i| _mm256_and_si256(a[i], b[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn ior(a: I, b: I) -> I {
    each(|i| _mm256_or_si256(a[i], b[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn shl<const K: i32>(a: I) -> I {
    each(|i| _mm256_slli_epi32::<K>(a[i]))
}
#[target_feature(enable = "avx2,fma")]
#[inline]
fn sra<const K: i32>(a: I) -> I {
    each(|i| _mm256_srai_epi32::<K>(a[i]))
}
/// `Math::exp_from`'s two-step scaling: `y * 2^(n >> 1) * 2^(n - (n >> 1))`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn pow2_mul(y: F, _n: F, ni: I) -> F {
    let n1 = sra::<1>(ni);
    let n2 = isub(ni, n1);
    let e1 = shl::<23>(iadd(n1, splat_i(127)));
    let e2 = shl::<23>(iadd(n2, splat_i(127)));
    mul(mul(y, float(e1)), float(e2))
}
/// # Safety
/// `p` must point to STEP readable f32s.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn load(p: *const f32) -> F {
    // SAFETY: the caller vouches for p[0..STEP]: four 32-byte vectors.
    each(|j| unsafe { _mm256_loadu_ps(p.add(8 * j)) })
}
/// # Safety
/// `p` must point to STEP writable f32s.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn store(p: *mut f32, v: F) {
    for (j, v) in v.iter().enumerate() {
        // SAFETY: the caller vouches for p[0..STEP]: four 32-byte vectors.
        unsafe { _mm256_storeu_ps(p.add(8 * j), *v) };
    }
}

/// Sixteen f32 sums: the inline sum's four 4-lane accumulators, lane `l`
/// of accumulator `k` being lane `4k + l` here (two 8-lane vectors).
type A = [__m256; 2];

#[target_feature(enable = "avx2,fma")]
#[inline]
fn zero16() -> A {
    [_mm256_setzero_ps(); 2]
}
/// Adds the first `groups` sixteen-value groups of `v` (two vectors each)
/// to `a`, in order.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn add16(mut a: A, v: F, groups: usize) -> A {
    for g in v.chunks_exact(2).take(groups) {
        a[0] = _mm256_add_ps(a[0], g[0]);
        a[1] = _mm256_add_ps(a[1], g[1]);
    }
    a
}
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn store16(p: *mut f32, a: A) {
    // SAFETY: the caller vouches for p[0..16].
    unsafe {
        _mm256_storeu_ps(p, a[0]);
        _mm256_storeu_ps(p.add(8), a[1]);
    }
}

/// # Safety
/// `src` must point to 16 readable f32s and `dst` to 16 writable ones,
/// 64-byte aligned.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn stream_line(dst: *mut f32, src: *const f32) {
    // SAFETY: the caller vouches for both lines and dst's alignment; the
    // two halves fill one write-combining buffer back to back.
    unsafe {
        _mm256_stream_ps(dst, _mm256_loadu_ps(src));
        _mm256_stream_ps(dst.add(8), _mm256_loadu_ps(src.add(8)));
    }
}

simd_math!(
    features = "avx2,fma",
    exp = tj_exp_x8,
    log = tj_log_x8,
    tanh = tj_tanh_x8,
    sigmoid = tj_sigmoid_x8,
    gelu = tj_gelu_x8,
    div = tj_div_x8,
    max = tj_max_x8,
    min = tj_min_x8,
    stream = tj_stream_x8,
);

/// Folds `src[0..n]` (`n` a multiple of 16) into sixteen lanes the way the
/// inline row max/min does with its four 4-lane accumulators (lane `l` of
/// accumulator `k` is lane `4k + l` here: two 8-lane vectors), every lane
/// seeing its values in the same order through `Math::pmax`/`pmin` from
/// `ident`, and writes them to `dst[0..16]`; a lane that saw a NaN is NaN.
///
/// # Safety
/// `src` must point to `n` initialised f32s and `dst` to 16 writable ones,
/// and the CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn fold16<const MAX: bool>(src: *const f32, dst: *mut f32, n: i64, ident: f32) {
    let n = n.max(0) as usize;
    let mut acc = [_mm256_set1_ps(ident); 2];
    let mut nan = [_mm256_setzero_ps(); 2];
    let mut i = 0;
    while i + 16 <= n {
        for (h, (acc, nan)) in acc.iter_mut().zip(&mut nan).enumerate() {
            // SAFETY: i + 16 <= n: both vectors inside `src`.
            let x = unsafe { _mm256_loadu_ps(src.add(i + 8 * h)) };
            *nan = _mm256_or_ps(*nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x));
            *acc = if MAX {
                _mm256_max_ps(x, *acc)
            } else {
                _mm256_min_ps(x, *acc)
            };
        }
        i += 16;
    }
    for (h, (acc, nan)) in acc.iter().zip(&nan).enumerate() {
        let v = _mm256_blendv_ps(*acc, _mm256_set1_ps(f32::NAN), *nan);
        // SAFETY: the caller vouches for dst[0..16].
        unsafe { _mm256_storeu_ps(dst.add(8 * h), v) };
    }
}
