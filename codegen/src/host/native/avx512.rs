//! The block helpers (`lanes.rs`'s math) on AVX-512F: four 16-lane
//! vectors per step. `x < y ? y : x` is `_mm512_max_ps(y, x)` and
//! `y < x ? y : x` is `_mm512_min_ps(y, x)` (the same NaN rule as the
//! 8-lane forms). Compares give mask registers, which `mask_blend` selects
//! by.

use super::lanes::simd_math;
use std::arch::x86_64::*;

/// Values per step: four vectors of sixteen lanes.
const STEP: usize = 64;

/// Four float vectors, worked on in lockstep.
type F = [__m512; 4];
/// Four integer vectors.
type I = [__m512i; 4];
/// Four compare results (one bit per lane).
type M = [__mmask16; 4];

#[inline(always)]
fn each<T>(f: impl FnMut(usize) -> T) -> [T; 4] {
    std::array::from_fn(f)
}

// One line per operation, so `lanes.rs` reads like `math.rs`.
#[target_feature(enable = "avx512f")]
#[inline]
fn splat(v: f32) -> F {
    [_mm512_set1_ps(v); 4]
}
#[target_feature(enable = "avx512f")]
#[inline]
fn splat_i(v: i32) -> I {
    [_mm512_set1_epi32(v); 4]
}
#[target_feature(enable = "avx512f")]
#[inline]
fn add(a: F, b: F) -> F {
    each(|i| _mm512_add_ps(a[i], b[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn sub(a: F, b: F) -> F {
    each(|i| _mm512_sub_ps(a[i], b[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn mul(a: F, b: F) -> F {
    each(|i| _mm512_mul_ps(a[i], b[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn div(a: F, b: F) -> F {
    each(|i| _mm512_div_ps(a[i], b[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn fma(a: F, b: F, c: F) -> F {
    each(|i| _mm512_fmadd_ps(a[i], b[i], c[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn pmax(a: F, b: F) -> F {
    each(|i| _mm512_max_ps(b[i], a[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn pmin(a: F, b: F) -> F {
    each(|i| _mm512_min_ps(b[i], a[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn lt(a: F, b: F) -> M {
    each(|i| _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a[i], b[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn eq(a: F, b: F) -> M {
    each(|i| _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(a[i], b[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn unordered(a: F, b: F) -> M {
    each(|i| _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a[i], b[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn select(mask: M, a: F, b: F) -> F {
    each(|i| _mm512_mask_blend_ps(mask[i], b[i], a[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn bits(a: F) -> I {
    each(|i| _mm512_castps_si512(a[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn float(a: I) -> F {
    each(|i| _mm512_castsi512_ps(a[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn to_float(a: I) -> F {
    each(|i| _mm512_cvtepi32_ps(a[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn isub(a: I, b: I) -> I {
    each(|i| _mm512_sub_epi32(a[i], b[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn iand(a: I, b: I) -> I {
    each(|i| _mm512_and_si512(a[i], b[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn ior(a: I, b: I) -> I {
    each(|i| _mm512_or_si512(a[i], b[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn shl<const K: u32>(a: I) -> I {
    each(|i| _mm512_slli_epi32::<K>(a[i]))
}
#[target_feature(enable = "avx512f")]
#[inline]
fn sra<const K: u32>(a: I) -> I {
    each(|i| _mm512_srai_epi32::<K>(a[i]))
}
/// `y * 2^n` in one `vscalefps`, rounded once: the same bits as
/// `Math::exp_from`'s two steps (`y * 2^(n >> 1)` is exact for its `y` and
/// `n`, so only the second multiply rounds), in one instruction instead of
/// nine.
#[target_feature(enable = "avx512f")]
#[inline]
fn pow2_mul(y: F, n: F, _ni: I) -> F {
    each(|i| _mm512_scalef_ps(y[i], n[i]))
}
/// # Safety
/// `p` must point to STEP readable f32s.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load(p: *const f32) -> F {
    // SAFETY: the caller vouches for p[0..STEP]: four 64-byte vectors.
    each(|j| unsafe { _mm512_loadu_ps(p.add(16 * j)) })
}
/// # Safety
/// `p` must point to STEP writable f32s.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn store(p: *mut f32, v: F) {
    for (j, v) in v.iter().enumerate() {
        // SAFETY: the caller vouches for p[0..STEP]: four 64-byte vectors.
        unsafe { _mm512_storeu_ps(p.add(16 * j), *v) };
    }
}

/// Sixteen f32 sums: the inline sum's four 4-lane accumulators, lane `l`
/// of accumulator `k` being lane `4k + l` here.
type A = __m512;

#[target_feature(enable = "avx512f")]
#[inline]
fn zero16() -> A {
    _mm512_setzero_ps()
}
/// Adds the first `groups` sixteen-value groups of `v` to `a`, in order.
#[target_feature(enable = "avx512f")]
#[inline]
fn add16(mut a: A, v: F, groups: usize) -> A {
    for x in v.iter().take(groups) {
        a = _mm512_add_ps(a, *x);
    }
    a
}
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn store16(p: *mut f32, a: A) {
    // SAFETY: the caller vouches for p[0..16].
    unsafe { _mm512_storeu_ps(p, a) };
}

/// # Safety
/// `src` must point to 16 readable f32s and `dst` to 16 writable ones,
/// 64-byte aligned.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn stream_line(dst: *mut f32, src: *const f32) {
    // SAFETY: the caller vouches for both lines and dst's alignment.
    unsafe { _mm512_stream_ps(dst, _mm512_loadu_ps(src)) };
}

simd_math!(
    features = "avx512f",
    exp = tj_exp_x16,
    log = tj_log_x16,
    tanh = tj_tanh_x16,
    sigmoid = tj_sigmoid_x16,
    gelu = tj_gelu_x16,
    div = tj_div_x16,
    max = tj_max_x16,
    min = tj_min_x16,
    stream = tj_stream_x16,
);

/// Folds `src[0..n]` (`n` a multiple of 16) into sixteen lanes the way the
/// inline row max/min does with its four 4-lane accumulators (lane `l` of
/// accumulator `k` is lane `4k + l` here), every lane seeing its values in
/// the same order through `Math::pmax`/`pmin` from `ident`, and writes them
/// to `dst[0..16]`; a lane that saw a NaN is NaN.
///
/// # Safety
/// `src` must point to `n` initialised f32s and `dst` to 16 writable ones,
/// and the CPU must have AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn fold16<const MAX: bool>(src: *const f32, dst: *mut f32, n: i64, ident: f32) {
    let n = n.max(0) as usize;
    let mut acc = _mm512_set1_ps(ident);
    let mut nan: __mmask16 = 0;
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n: one vector inside `src`.
        let x = unsafe { _mm512_loadu_ps(src.add(i)) };
        nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        acc = if MAX {
            _mm512_max_ps(x, acc)
        } else {
            _mm512_min_ps(x, acc)
        };
        i += 16;
    }
    let acc = _mm512_mask_blend_ps(nan, acc, _mm512_set1_ps(f32::NAN));
    // SAFETY: the caller vouches for dst[0..16].
    unsafe { _mm512_storeu_ps(dst, acc) };
}
