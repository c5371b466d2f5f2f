//! `math.rs`'s f32 functions, and division by a scalar, written once over
//! whatever vector one-liners the invoking module defines ([`simd_math`],
//! which also exports the module's row max/min folds):
//! `avx2` expands it over four 8-lane vectors, `avx512` over four 16-lane
//! ones. Generated code calls the resulting `extern "C"` functions on a
//! block of values: Cranelift emits only 128-bit vectors, and these
//! functions are compute-bound (a gelu is ~25 vector instructions per four
//! values inline; `vdivps` does eight or sixteen lanes at the four-lane
//! rate).
//!
//! Each function performs the same IEEE operations in the same order as the
//! inline version built with FMA (`Math` with `fma: true`), so every width
//! gives bit-identical results; the test
//! `simd_helpers_match_inline_math_bit_for_bit` holds each to that.
//!
//! Every step applies to four independent vectors before the next step
//! starts. Each function is one long dependency chain (~50 cycles for exp),
//! and with the chains interleaved in program order the out-of-order
//! scheduler holds ready work from four of them instead of waiting on one
//! (fewer cycles than four vectors computed one after the other; two, six
//! or eight in lockstep did no better than four).
//!
//! What the invoking module provides: the types `F` (four float vectors),
//! `I` (four integer vectors) and `M` (four compare masks), the constant
//! `STEP` (values per step), and one-line `#[inline]` functions with its
//! target features: `splat`, `splat_i`, `add`, `sub`, `mul`, `div`, `fma`
//! (`a*b + c`, one rounding), `pmax`/`pmin` (`Math::pmax`/`pmin`: `a < b ?
//! b : a` and `b < a ? b : a`, NaN behaviour included), `lt`, `eq`,
//! `unordered` (ordered compares as `Math::cmp`, giving `M`), `select`
//! (`mask ? a : b`), `bits`/`float` (reinterpret), `to_float` (i32 -> f32),
//! `isub`, `iand`, `ior`, `shl::<K>`, `sra::<K>`,
//! `pow2_mul(y, n, ni)` (`y * 2^n` for the integer `n`, given as a float
//! and as an int, in [-150, 128]: `Math::exp_from`'s two multiplies by
//! `2^(n >> 1)` and `2^(n - (n >> 1))`, each exact but the last, or any
//! instruction that rounds `y * 2^n` once as they do), the
//! unsafe `load`/`store` of one step, the row max/min fold
//! `fold16::<MAX>(src, dst, n, ident)`, and the sixteen sum lanes `A` with
//! `zero16`, `add16(a, v, groups)` (adds `v`'s first `groups` groups of 16
//! in order) and the unsafe `store16` (16 lanes are one vector or two, so
//! each module writes these), and the unsafe `stream_line(dst, src)`,
//! which copies one 64-byte line of f32s to a line-aligned `dst` with
//! non-temporal stores.

/// Expands to the math functions and the eight exported helpers
/// (`fn(src, dst, n, s, pf, sum)`, see `BlockFn`) named by the arguments,
/// compiled for the target features `$feat`.
macro_rules! simd_math {
    (
        features = $feat:literal,
        exp = $exp:ident,
        log = $log:ident,
        tanh = $tanh:ident,
        sigmoid = $sigmoid:ident,
        gelu = $gelu:ident,
        div = $div:ident,
        max = $max:ident,
        min = $min:ident,
        stream = $stream:ident $(,)?
    ) => {
        use $crate::host::math::{
            EXP_CEIL, EXP_FLOOR, EXP_LO, EXP_POLY, GELU_C, GELU_CK, LN2_HI, LN2_LO, LOG_POLY,
            MAGIC, TANH_POLY, TANH_SMALL,
        };

        #[target_feature(enable = $feat)]
        #[inline]
        fn horner(x: F, coeffs: &[f32]) -> F {
            let mut acc = splat(coeffs[0]);
            for &k in &coeffs[1..] {
                acc = fma(acc, x, splat(k));
            }
            acc
        }

        /// `Math::exp_from`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn exp_from(x: F, lo: f32) -> F {
            let xc = pmin(pmax(x, splat(lo)), splat(EXP_CEIL));
            let magic = splat(MAGIC);
            let t = fma(xc, splat(std::f32::consts::LOG2_E), magic);
            let n = sub(t, magic);
            let r = fma(n, splat(LN2_HI), xc);
            let r = fma(n, splat(LN2_LO), r);
            let p = horner(r, &EXP_POLY);
            let r2 = mul(r, r);
            let y = add(fma(p, r2, r), splat(1.0));
            let ti = bits(t);
            if lo >= -87.0 {
                let e = shl::<23>(isub(ti, splat_i(0x4B40_0000 - 127)));
                return mul(y, float(e));
            }
            // y * 2^n in two exact steps (or one that rounds the same way):
            // 2^n alone would not be normal for the subnormal results.
            pow2_mul(y, n, isub(ti, bits(magic)))
        }

        /// `Math::exp`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn exp(x: F) -> F {
            exp_from(x, EXP_LO)
        }

        /// `Math::log`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn log(x: F) -> F {
            let is_sub = lt(x, splat(f32::MIN_POSITIVE));
            let xv = select(is_sub, mul(x, splat(8388608.0)), x);
            let b = bits(xv);
            let e = isub(sra::<23>(b), splat_i(126));
            let m = float(ior(iand(b, splat_i(0x007F_FFFF)), splat_i(0x3F00_0000)));
            let e = to_float(e);
            let e = select(is_sub, sub(e, splat(23.0)), e);
            let small = lt(m, splat(std::f32::consts::FRAC_1_SQRT_2));
            let one = splat(1.0);
            let e = select(small, sub(e, one), e);
            let m = select(small, add(m, m), m);
            let m = sub(m, one);
            let z = mul(m, m);
            let p = horner(m, &LOG_POLY);
            let y = mul(mul(p, m), z);
            let y = fma(e, splat(-LN2_LO), y);
            let y = fma(z, splat(-0.5), y);
            let r = fma(e, splat(-LN2_HI), add(m, y));
            let zero = splat(0.0);
            let inf = splat(f32::INFINITY);
            let r = select(eq(x, inf), inf, r);
            let r = select(eq(x, zero), splat(f32::NEG_INFINITY), r);
            let r = select(lt(x, zero), splat(f32::NAN), r);
            select(unordered(x, x), x, r)
        }

        /// `Math::tanh`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn tanh(x: F) -> F {
            let sign = iand(bits(x), splat_i(i32::MIN));
            let ax = float(iand(bits(x), splat_i(i32::MAX)));
            let two = splat(2.0);
            let one = splat(1.0);
            let e = exp_from(mul(ax, two), 0.0);
            let big = sub(one, div(two, add(e, one)));
            let z = mul(x, x);
            let pz = mul(horner(z, &TANH_POLY), z);
            let small = fma(pz, ax, ax);
            let r = select(lt(ax, splat(TANH_SMALL)), small, big);
            float(ior(bits(r), sign))
        }

        /// `Math::exp_tail`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn exp_tail(y: F, tail: M) -> F {
            let gone = lt(y, splat(EXP_LO));
            let floor = select(tail, splat(EXP_LO), splat(EXP_FLOOR));
            let yc = select(gone, splat(0.0), pmax(y, floor));
            select(gone, splat(0.0), exp_from(yc, EXP_LO))
        }

        /// `Math::sigmoid`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn sigmoid(x: F) -> F {
            let neg = lt(x, splat(0.0));
            let nax = float(ior(bits(x), splat_i(i32::MIN)));
            let t = exp_tail(nax, neg);
            let one = splat(1.0);
            let s = div(one, add(one, t));
            select(neg, mul(t, s), s)
        }

        /// `Math::gelu`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn gelu(x: F) -> F {
            let inner = fma(mul(x, x), splat(GELU_CK), splat(GELU_C));
            let m2u = mul(inner, x);
            let tail = lt(splat(0.0), m2u);
            let w = exp_tail(float(ior(bits(m2u), splat_i(i32::MIN))), tail);
            let q = div(x, add(splat(1.0), w));
            select(tail, mul(q, w), q)
        }

        /// Writes `f(src[i], s)` to `dst[i]` for `i < n`, one step at a time;
        /// with `pf != 0`, also prefetches (into L2) the bytes `pf` past
        /// each step it reads. With `SUM`, also writes to `sum[0..16]` the
        /// sixteen lane sums of the results, from +0.0, that the inline f32
        /// sum's vector loop would hold over `0..n & !15` (lane `l` adding
        /// results `16m + l` in order of `m`): the values are at hand here,
        /// where the adds hide behind the math, instead of in a second pass.
        ///
        /// # Safety
        /// `src` must point to `n` initialised f32s and `dst` to `n`
        /// writable ones (or `n <= 0`), either the same or not overlapping;
        /// with `SUM`, `sum` must point to 16 writable f32s.
        /// `pf` may point anywhere: a prefetch is a hint that never faults.
        #[target_feature(enable = $feat)]
        #[inline]
        unsafe fn map_block<const SUM: bool>(
            src: *const f32,
            dst: *mut f32,
            n: i64,
            s: f32,
            pf: i64,
            sum: *mut f32,
            f: impl Fn(F, F) -> F,
        ) {
            let n = n.max(0) as usize;
            let s = splat(s);
            let mut acc = zero16();
            let mut i = 0;
            while i + STEP <= n {
                if pf != 0 {
                    let ahead = src.wrapping_add(i).cast::<i8>().wrapping_offset(pf as isize);
                    for line in (0..STEP * 4).step_by(64) {
                        // A hint only: no access, no fault, any address.
                        _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(line));
                    }
                }
                // SAFETY: i + STEP <= n: the step lies in both buffers, and
                // all of it is read before any of it is written.
                let r = f(unsafe { load(src.add(i)) }, s);
                if SUM {
                    acc = add16(acc, r, STEP / 16);
                }
                // SAFETY: as above.
                unsafe { store(dst.add(i), r) };
                i += STEP;
            }
            if i < n {
                // A short last step runs on a padded copy; the padding
                // lanes are computed and dropped (ones: an ordinary value).
                let k = n - i;
                let mut pad = [1f32; STEP];
                // SAFETY: k = n - i elements from `i` are inside both
                // buffers; `pad` holds STEP > k and overlaps neither.
                unsafe { std::ptr::copy_nonoverlapping(src.add(i), pad.as_mut_ptr(), k) };
                // SAFETY: `pad` holds STEP values.
                let r = f(unsafe { load(pad.as_ptr()) }, s);
                if SUM {
                    // Whole groups only: the inline loop's scalar tail
                    // takes the last k % 16.
                    acc = add16(acc, r, k / 16);
                }
                // SAFETY: as above.
                unsafe {
                    store(pad.as_mut_ptr(), r);
                    std::ptr::copy_nonoverlapping(pad.as_ptr(), dst.add(i), k);
                }
            }
            if SUM {
                // SAFETY: the caller vouches for sum[0..16].
                unsafe { store16(sum, acc) };
            }
        }

        /// This module's helpers as `(op, symbol, address)`, for
        /// `block_math` (the symbol is the function's own name).
        pub(super) const HELPERS: [(&str, &str, super::HelperFn); 9] = [
            ("exp", stringify!($exp), $exp),
            ("log", stringify!($log), $log),
            ("tanh", stringify!($tanh), $tanh),
            ("sigmoid", stringify!($sigmoid), $sigmoid),
            ("gelu", stringify!($gelu), $gelu),
            ("div", stringify!($div), $div),
            ("max", stringify!($max), $max),
            ("min", stringify!($min), $min),
            ("stream", stringify!($stream), $stream),
        ];

        /// Copies `src[0..n]` to `dst[0..n]`, writing the whole 64-byte
        /// lines of `dst` with non-temporal stores (past the caches, with no
        /// read of the old line first) and its partial first and last lines
        /// with ordinary ones. (`s`, `pf` and `sum` are not used.)
        ///
        /// Non-temporal stores are weakly ordered: the caller fences before
        /// another thread may read `dst` (generated code does once, at the
        /// end of its call; a fence here, per block, cost more than
        /// streaming saves).
        ///
        /// # Safety
        /// `src` must point to `n` initialised f32s and `dst` to `n`
        /// writable ones (or `n <= 0`), not overlapping,
        #[doc = concat!("and the CPU must have ", $feat, ".")]
        #[target_feature(enable = $feat)]
        pub unsafe extern "C" fn $stream(src: *const f32, dst: *mut f32, n: i64, _s: f32, _pf: i64, _sum: *mut f32) {
            let n = n.max(0) as usize;
            // f32s before dst's first line boundary; all of them when dst
            // is not 4-aligned (launches refuse such f32 buffers, but a
            // misaligned non-temporal store would fault), so no line is
            // streamed then.
            let head = if (dst as usize) % 4 == 0 {
                ((dst as usize).wrapping_neg() % 64 / 4).min(n)
            } else {
                n
            };
            let lines_end = head + (n - head) / 16 * 16;
            // SAFETY: 0..head, head..lines_end and lines_end..n lie inside
            // both buffers, which do not overlap; each `dst.add(i)` in the
            // loop is line-aligned (head brought it there, steps are 64 B).
            unsafe {
                std::ptr::copy_nonoverlapping(src, dst, head);
                let mut i = head;
                while i < lines_end {
                    stream_line(dst.add(i), src.add(i));
                    i += 16;
                }
                std::ptr::copy_nonoverlapping(src.add(lines_end), dst.add(lines_end), n - lines_end);
            }
        }

        simd_math!(@fold $feat, $max, "max", true);
        simd_math!(@fold $feat, $min, "min", false);
        simd_math!(@export $feat, $exp, "`exp(src[i] + s)`", |x, b| exp(add(x, b)));
        simd_math!(@export $feat, $log, "`log(src[i] + s)`", |x, b| log(add(x, b)));
        simd_math!(@export $feat, $tanh, "`tanh(src[i] + s)`", |x, b| tanh(add(x, b)));
        simd_math!(@export $feat, $sigmoid, "`sigmoid(src[i] + s)`", |x, b| sigmoid(add(x, b)));
        simd_math!(@export $feat, $gelu, "`gelu(src[i] + s)`", |x, b| gelu(add(x, b)));
        // IEEE division, as the inline `fdiv`.
        simd_math!(@export $feat, $div, "`src[i] / s`", |x, d| div(x, d));
    };
    (@fold $feat:literal, $name:ident, $what:literal, $max:literal) => {
        #[doc = concat!("Writes the row ", $what, " fold of `src[0..n]` to `dst[0..16]` (`fold16`; `pf` is not used).")]
        ///
        /// # Safety
        /// As `fold16`.
        #[target_feature(enable = $feat)]
        pub unsafe extern "C" fn $name(src: *const f32, dst: *mut f32, n: i64, ident: f32, _pf: i64, _sum: *mut f32) {
            // SAFETY: the caller vouches for both buffers.
            unsafe { fold16::<$max>(src, dst, n, ident) }
        }
    };
    (@export $feat:literal, $name:ident, $what:literal, $f:expr) => {
        #[doc = concat!("Writes ", $what, " to `dst[i]` for `i < n`, prefetching `pf` bytes ahead of what it reads when `pf != 0`, and the sixteen lane sums of its whole groups of 16 to `sum[0..16]` when `sum` is not null (`map_block`).")]
        ///
        /// # Safety
        /// `src` must point to `n` initialised f32s and `dst` to `n`
        /// writable ones (or `n <= 0`), either the same or not overlapping,
        /// `sum` to 16 writable f32s or be null,
        #[doc = concat!("and the CPU must have ", $feat, ".")]
        #[target_feature(enable = $feat)]
        pub unsafe extern "C" fn $name(src: *const f32, dst: *mut f32, n: i64, s: f32, pf: i64, sum: *mut f32) {
            // SAFETY: the caller vouches for the buffers.
            unsafe {
                if sum.is_null() {
                    map_block::<false>(src, dst, n, s, pf, sum, $f)
                } else {
                    map_block::<true>(src, dst, n, s, pf, sum, $f)
                }
            }
        }
    };
}

pub(super) use simd_math;
