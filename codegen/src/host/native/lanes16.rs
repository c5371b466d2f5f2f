//! Sixteen f32 lanes in AVX-512 (one register) or AVX2 (two), for
//! kernels written once over [`Lanes16`] and compiled for each
//! ([`versions`]): Winograd's transforms and the products of kept
//! weights. Only [`isa`] makes the [`Isa`] token that enters them, after
//! asking the CPU. Loads and stores go through slices checked to hold
//! their 16 elements; gathers and scatters assert that every lane is
//! inside its slice. Prefetch hints ([`prefetch`], [`Spread`]) name only
//! elements inside their slices.

use std::arch::x86_64::*;

/// Lanes of a [`Lanes16`].
const L: usize = 16;

/// Proof that this CPU has the features of one of the two versions:
/// only [`isa`] makes one, after asking the CPU.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Isa(Kind);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Avx512,
    Avx2,
}

/// The widest version this CPU runs, if any.
pub(crate) fn isa() -> Option<Isa> {
    let cpu = crate::host::cpu_features();
    match (cpu.avx512f && cpu.fma, cpu.avx2 && cpu.fma) {
        (true, _) => Some(Isa(Kind::Avx512)),
        (false, true) => Some(Isa(Kind::Avx2)),
        _ => None,
    }
}

impl Isa {
    /// Whether this is the AVX-512 version (else AVX2).
    #[inline(always)]
    pub(crate) fn wide(self) -> bool {
        self.0 == Kind::Avx512
    }

    /// Both versions this CPU runs, widest first (for tests).
    #[cfg(test)]
    pub(crate) fn all() -> Vec<Isa> {
        let cpu = crate::host::cpu_features();
        let mut all = Vec::new();
        if cpu.avx512f && cpu.fma {
            all.push(Isa(Kind::Avx512));
        }
        if cpu.avx2 && cpu.fma {
            all.push(Isa(Kind::Avx2));
        }
        all
    }
}

/// Whether element offsets below `span` fit a gather's or scatter's
/// 32-bit indices.
pub(crate) fn gathers_fit(span: usize) -> bool {
    i32::try_from(span).is_ok()
}

/// Asks the CPU to bring `s[at]`'s cache line in, when `at` is inside
/// `s`: a hint with no effect on what the program computes.
#[inline(always)]
pub(crate) fn prefetch(s: &[f32], at: usize) {
    if at < s.len() {
        // SAFETY: the pointer is inside `s`; a prefetch reads nothing
        // the program sees and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(s.as_ptr().add(at).cast()) }
    }
}

/// Prefetches the cache lines of `ahead` into L2, a few per call of
/// [`Spread::step`], spread evenly over `steps` calls: each line once, so
/// the next operand streams from memory under a whole loop of products
/// without crowding L1 or the load ports.
pub(crate) struct Spread<'a> {
    ahead: &'a [f32],
    lines: usize,
    steps: usize,
    credit: usize,
    next: usize,
}

impl<'a> Spread<'a> {
    /// Lines of 16 floats.
    const LINE: usize = 16;

    pub(crate) fn new(ahead: &'a [f32], steps: usize) -> Spread<'a> {
        Spread {
            ahead,
            lines: ahead.len().div_ceil(Self::LINE),
            steps: steps.max(1),
            credit: 0,
            next: 0,
        }
    }

    /// One step's share of the lines.
    #[inline(always)]
    pub(crate) fn step(&mut self) {
        self.credit += self.lines;
        while self.credit >= self.steps {
            self.credit -= self.steps;
            if let Some(x) = self.ahead.get(self.next * Self::LINE) {
                // SAFETY: `x` is an element of `ahead`; a prefetch reads
                // nothing the program sees and never faults.
                unsafe { _mm_prefetch::<_MM_HINT_T1>((x as *const f32).cast()) }
            }
            self.next += 1;
        }
    }
}

/// 16 f32 lanes in registers. Its methods are called only from the
/// `#[target_feature]` functions [`versions`] defines, compiled for the
/// type's features, which are entered only with an [`Isa`] that has them;
/// they inline into those functions.
pub(crate) trait Lanes16: Copy {
    /// Vector registers one value takes (1 for AVX-512, 2 for AVX2): a
    /// register tile sizes its accumulators by it.
    const REGISTERS: usize;
    fn splat(x: f32) -> Self;
    /// `s[at..at + 16]` (bounds-checked).
    fn load(s: &[f32], at: usize) -> Self;
    /// Stores at `s[at..at + 16]` (bounds-checked).
    fn store(self, s: &mut [f32], at: usize);
    fn add(self, b: Self) -> Self;
    fn sub(self, b: Self) -> Self;
    /// `self * b + c`.
    fn fmadd(self, b: Self, c: Self) -> Self;
    /// Lane `l` from `s[first + l * step]`; `16 * step` fits an i32.
    fn gather(s: &[f32], first: usize, step: usize) -> Self;
    /// Lane `l` to `s[first + l * step]`.
    fn scatter(self, s: &mut [f32], first: usize, step: usize);
}

/// The last element lane 15 of a gather or scatter touches, asserted
/// inside a slice of `len` elements.
#[inline(always)]
fn last_lane(first: usize, step: usize, len: usize) -> usize {
    let last = first + (L - 1) * step;
    assert!(last < len, "a checked gather or scatter");
    last
}

/// `[0, 1, .., n - 1]` as i32s, the lane numbers.
const LANE_NUMBERS: [i32; L] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

/// One AVX-512 register.
#[derive(Clone, Copy)]
pub(crate) struct W16(__m512);

// SAFETY (every `unsafe` in this impl): AVX-512F and FMA are enabled
// in the functions these inline into (see `Lanes16`), and pointers
// are read or written only inside slices checked above them.
impl Lanes16 for W16 {
    const REGISTERS: usize = 1;
    #[inline(always)]
    fn splat(x: f32) -> Self {
        W16(unsafe { _mm512_set1_ps(x) })
    }
    #[inline(always)]
    fn load(s: &[f32], at: usize) -> Self {
        let s: &[f32; L] = s[at..at + L].try_into().expect("16 floats");
        W16(unsafe { _mm512_loadu_ps(s.as_ptr()) })
    }
    #[inline(always)]
    fn store(self, s: &mut [f32], at: usize) {
        let s: &mut [f32; L] = (&mut s[at..at + L]).try_into().expect("16 floats");
        unsafe { _mm512_storeu_ps(s.as_mut_ptr(), self.0) }
    }
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        W16(unsafe { _mm512_add_ps(self.0, b.0) })
    }
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        W16(unsafe { _mm512_sub_ps(self.0, b.0) })
    }
    #[inline(always)]
    fn fmadd(self, b: Self, c: Self) -> Self {
        W16(unsafe { _mm512_fmadd_ps(self.0, b.0, c.0) })
    }
    #[inline(always)]
    fn gather(s: &[f32], first: usize, step: usize) -> Self {
        last_lane(first, step, s.len());
        assert!(gathers_fit(L * step), "a gather's 32-bit offsets");
        unsafe {
            let lanes = _mm512_loadu_si512(LANE_NUMBERS.as_ptr().cast());
            let at = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(step as i32));
            W16(_mm512_i32gather_ps::<4>(at, s.as_ptr().add(first).cast()))
        }
    }
    #[inline(always)]
    fn scatter(self, s: &mut [f32], first: usize, step: usize) {
        last_lane(first, step, s.len());
        if !gathers_fit(L * step) {
            let mut block = [0f32; L];
            self.store(&mut block, 0);
            for (l, &y) in block.iter().enumerate() {
                s[first + l * step] = y;
            }
            return;
        }
        unsafe {
            let lanes = _mm512_loadu_si512(LANE_NUMBERS.as_ptr().cast());
            let at = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(step as i32));
            _mm512_i32scatter_ps::<4>(s.as_mut_ptr().add(first).cast(), at, self.0)
        }
    }
}

/// Two AVX2 registers: lanes 0..8 and 8..16.
#[derive(Clone, Copy)]
pub(crate) struct P8(__m256, __m256);

// SAFETY (every `unsafe` in this impl): AVX2 and FMA are enabled in
// the functions these inline into (see `Lanes16`), and pointers are
// read or written only inside slices checked above them.
impl Lanes16 for P8 {
    const REGISTERS: usize = 2;
    #[inline(always)]
    fn splat(x: f32) -> Self {
        let v = unsafe { _mm256_set1_ps(x) };
        P8(v, v)
    }
    #[inline(always)]
    fn load(s: &[f32], at: usize) -> Self {
        let s: &[f32; L] = s[at..at + L].try_into().expect("16 floats");
        unsafe {
            P8(
                _mm256_loadu_ps(s.as_ptr()),
                _mm256_loadu_ps(s.as_ptr().add(8)),
            )
        }
    }
    #[inline(always)]
    fn store(self, s: &mut [f32], at: usize) {
        let s: &mut [f32; L] = (&mut s[at..at + L]).try_into().expect("16 floats");
        unsafe {
            _mm256_storeu_ps(s.as_mut_ptr(), self.0);
            _mm256_storeu_ps(s.as_mut_ptr().add(8), self.1);
        }
    }
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        unsafe { P8(_mm256_add_ps(self.0, b.0), _mm256_add_ps(self.1, b.1)) }
    }
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        unsafe { P8(_mm256_sub_ps(self.0, b.0), _mm256_sub_ps(self.1, b.1)) }
    }
    #[inline(always)]
    fn fmadd(self, b: Self, c: Self) -> Self {
        unsafe {
            P8(
                _mm256_fmadd_ps(self.0, b.0, c.0),
                _mm256_fmadd_ps(self.1, b.1, c.1),
            )
        }
    }
    #[inline(always)]
    fn gather(s: &[f32], first: usize, step: usize) -> Self {
        last_lane(first, step, s.len());
        assert!(gathers_fit(L * step), "a gather's 32-bit offsets");
        unsafe {
            let lanes = _mm256_loadu_si256(LANE_NUMBERS.as_ptr().cast());
            let at = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(step as i32));
            let p = s.as_ptr().add(first);
            P8(
                _mm256_i32gather_ps::<4>(p, at),
                _mm256_i32gather_ps::<4>(p.add(8 * step), at),
            )
        }
    }
    #[inline(always)]
    fn scatter(self, s: &mut [f32], first: usize, step: usize) {
        // AVX2 has no scatter.
        let mut block = [0f32; L];
        self.store(&mut block, 0);
        for (l, &y) in block.iter().enumerate() {
            s[first + l * step] = y;
        }
    }
}

/// Defines the public `$name`, which runs `$body` in the version
/// `isa` names, each compiled with its features.
macro_rules! versions {
    ($name:ident = $body:ident($($arg:ident: $ty:ty),*)) => {
        #[allow(clippy::too_many_arguments)]
        pub(super) fn $name(isa: $crate::host::native::lanes16::Isa, $($arg: $ty),*) {
            #[target_feature(enable = "avx512f,fma")]
            fn wide($($arg: $ty),*) {
                $body::<$crate::host::native::lanes16::W16>($($arg),*)
            }
            #[target_feature(enable = "avx2,fma")]
            fn pair($($arg: $ty),*) {
                $body::<$crate::host::native::lanes16::P8>($($arg),*)
            }
            if isa.wide() {
                // SAFETY: `isa` proves the CPU has AVX-512F and FMA.
                unsafe { wide($($arg),*) }
            } else {
                // SAFETY: `isa` proves the CPU has AVX2 and FMA.
                unsafe { pair($($arg),*) }
            }
        }
    };
}

pub(crate) use versions;
