//! Inline f32 math as Cranelift IR, for scalars (`F32`) and vectors
//! (`F32X4`) alike: `exp`, `log`, `tanh` (and from them sigmoid and gelu),
//! `sin`, `cos` and `erf` (their accuracy: `Tensor::sin`'s docs and the test
//! `sin_cos_erf_are_accurate_over_a_million_points`; they have no block
//! helpers).
//! No libcalls, only ops that lower on every x86-64 level (FMA when the CPU
//! has it). `native/avx2.rs` repeats each function op for op on eight
//! lanes (the constants below serve both), so the block helpers give the
//! same bits as this code with FMA. Accuracy against f64 rounded to f32,
//! from the test `inline_math_is_accurate_over_a_million_points` (2^20 points each, with
//! FMA): max 1 ulp for exp on [-87, 88], log on [1e-30, 1e30], tanh on
//! [-10, 10]; 2 ulp for sigmoid on [-80, 80] and gelu on [0, 300]; 13 ulp
//! for gelu on [-3, 0), whose exp argument (~x^3) amplifies its own f32
//! rounding (the test allows 2 for exp, 4 for the others, 32 for gelu's
//! negative side; further out that is about one ulp per unit of the
//! argument, up to ~100). exp's subnormal results come from a two-step
//! scale and so keep their gradual underflow, and sigmoid and gelu's
//! negative tails are such an exp, down to 0 (`tests/all/exp_range.rs`
//! sweeps these ops from -120 to 120 against the reference).

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::Endianness;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;

/// Where erf, and sigmoid and gelu on their positive side, stop following
/// `e^y` down: they need `1 + e^y` (erf `1 - e^y P`), which below `y =
/// -20` (`e^y < 2^-25`) rounds to exactly 1 anyway. Going further, `e^y`
/// turns subnormal below -87, and on x86 every subnormal result costs a
/// microcode assist, which made a gelu of large-magnitude data (matmul
/// outputs) far slower than one of unit-scale data. (On their negative
/// side sigmoid and gelu are `e^y` itself, subnormals included:
/// `Math::exp_tail`.)
pub(super) const EXP_FLOOR: f32 = -20.0;

/// exp's upper clamp: past it the result is inf either way.
pub(super) const EXP_CEIL: f32 = 89.0;
/// The floor of a plain `exp`: below it even the gradual underflow is 0.
pub(super) const EXP_LO: f32 = -104.0;
/// 1.5 * 2^23: adding it rounds an f32 of magnitude < 2^22 to an integer,
/// which then sits in the low mantissa bits.
pub(super) const MAGIC: f32 = 12582912.0;
/// `-ln 2` in two parts (Cephes' C1 and C2, negated): the first has few
/// bits, so `n * LN2_HI` is exact for the exponents exp meets.
pub(super) const LN2_HI: f32 = -0.693359375;
/// See [`LN2_HI`].
pub(super) const LN2_LO: f32 = 2.12194440e-4;
/// Cephes `expf` polynomial, highest degree first.
pub(super) const EXP_POLY: [f32; 6] = [
    1.9875691500E-4,
    1.3981999507E-3,
    8.3334519073E-3,
    4.1665795894E-2,
    1.6666665459E-1,
    5.0000001201E-1,
];
/// Cephes `logf` polynomial, highest degree first.
pub(super) const LOG_POLY: [f32; 9] = [
    7.0376836292E-2,
    -1.1514610310E-1,
    1.1676998740E-1,
    -1.2420140846E-1,
    1.4249322787E-1,
    -1.6668057665E-1,
    2.0000714765E-1,
    -2.4999993993E-1,
    3.3333331174E-1,
];
/// Cephes `tanhf` polynomial in x^2 for |x| < [`TANH_SMALL`].
pub(super) const TANH_POLY: [f32; 5] = [
    -5.70498872745E-3,
    2.06390887954E-2,
    -5.37397155531E-2,
    1.33314422036E-1,
    -3.33332819422E-1,
];
/// Below this |x|, tanh uses its polynomial (`1 - 2/(e+1)` cancels there).
pub(super) const TANH_SMALL: f32 = 0.625;
/// gelu's `-2u = x (GELU_C + GELU_CK x^2)`, `GELU_C = -2 sqrt(2/pi)`.
pub(super) const GELU_C: f32 = -2.0 * 0.7978845608;
/// See [`GELU_C`].
pub(super) const GELU_CK: f32 = GELU_C * 0.044715;

/// The largest `|x|` for which [`Math::sin`] and [`Math::cos`] with FMA are
/// within a few ulp (past it, `j = round(|x| 2/pi)` rounds in f32 and `r`
/// leaves `[-pi/4, pi/4]`); the lowering sends larger ones to f64 calls.
pub(crate) const SIN_FAST_MAX: f32 = 131072.0;
/// [`SIN_FAST_MAX`] without FMA, where [`PIO2_SPLIT`]'s products are exact.
pub(crate) const SIN_FAST_MAX_NO_FMA: f32 = 8192.0;
/// `pi/2` in three f32 parts for FMA reduction (`x - j*P1` is exact in one
/// `fma`; the parts sum to `pi/2` within 1e-23).
pub(super) const PIO2_FMA: [f32; 3] = [
    1.5707963705062866,
    -4.371138828673793e-8,
    -1.7151245100058819e-15,
];
/// `pi/2` in five parts for reduction without FMA (Cephes' scheme with
/// more parts): the first four have 11 significant bits, so `j*P` is exact
/// for the quadrant counts `j < 2^13` that `|x| <= 8192` gives, and the
/// subtractions are exact. Measured (`sin_cos_without_fma_are_accurate`):
/// max 2 ulp on [-8192, 8192], 1 ulp at the f32 values nearest the
/// multiples of pi/2 there; Cephes' three parts gave 21 and ~1000.
pub(super) const PIO2_SPLIT: [f32; 5] = [
    1.5703125,
    4.837512969970703e-4,
    7.549533620476723e-8,
    2.5632829192545614e-12,
    6.123234262925839e-17,
];
/// Cephes `sinf` polynomial in `r^2` (`sin r = r + r^3 P(r^2)`, |r| <= pi/4),
/// highest degree first.
pub(super) const SIN_POLY: [f32; 3] = [-1.9515295891E-4, 8.3321608736E-3, -1.6666654611E-1];
/// Cephes `cosf` polynomial in `r^2` (`cos r = 1 - r^2/2 + r^4 P(r^2)`).
pub(super) const COS_POLY: [f32; 3] = [
    2.443315711809948E-5,
    -1.388731625493765E-3,
    4.166664568298827E-2,
];
/// erf on `|x| < 1`: `erf x = x + x P(x^2)`, a least-squares fit of relative
/// error (0.96 ulp with f32 Horner), highest degree first.
pub(super) const ERF_SMALL: [f32; 7] = [
    7.847259257687256e-5,
    -8.008189033716917e-4,
    5.188099108636379e-3,
    -2.6853691786527634e-2,
    1.128358244895935e-1,
    -3.761262595653534e-1,
    1.2837916612625122e-1,
];
/// erf on `1 <= |x| <= ERF_CLAMP`: `erf x = 1 - e^(-x^2) P(x)` (`P` fits
/// `erfcx`, weighted by `e^(-x^2)`), highest degree first.
pub(super) const ERF_TAIL: [f32; 9] = [
    1.0234693763777614e-4,
    -1.8475810065865517e-3,
    1.4909335412085056e-2,
    -7.14135617017746e-2,
    2.2774887084960938e-1,
    -5.151476263999939e-1,
    8.597264289855957e-1,
    -1.0784902572631836,
    9.91995632648468e-1,
];
/// Past this `|x|`, `erfc x < 2^-25` and erf rounds to 1 (the tail
/// polynomial is evaluated at most here).
pub(super) const ERF_CLAMP: f32 = 3.92;

/// Emits f32 math for one lane shape.
pub struct Math<'a, 'b> {
    /// The builder.
    pub b: &'a mut FunctionBuilder<'b>,
    /// `F32` or `F32X4`.
    pub ty: Type,
    /// Whether `fma` is a single instruction on this CPU.
    pub fma: bool,
}

impl Math<'_, '_> {
    fn is_vec(&self) -> bool {
        self.ty.is_vector()
    }
    fn int_ty(&self) -> Type {
        if self.is_vec() {
            types::I32X4
        } else {
            types::I32
        }
    }
    fn flags(&self) -> MemFlagsData {
        MemFlagsData::new().with_endianness(Endianness::Little)
    }
    /// A float constant of this shape.
    pub fn c(&mut self, v: f32) -> Value {
        let s = self.b.ins().f32const(v);
        if self.is_vec() {
            self.b.ins().splat(self.ty, s)
        } else {
            s
        }
    }
    fn ci(&mut self, v: i32) -> Value {
        let s = self.b.ins().iconst(types::I32, v as i64);
        if self.is_vec() {
            self.b.ins().splat(types::I32X4, s)
        } else {
            s
        }
    }
    fn int_bits(&mut self, x: Value) -> Value {
        let t = self.int_ty();
        let f = self.flags();
        self.b.ins().bitcast(t, f, x)
    }
    fn float_bits(&mut self, x: Value) -> Value {
        let t = self.ty;
        let f = self.flags();
        self.b.ins().bitcast(t, f, x)
    }
    /// `a*b + c`, fused when the CPU can.
    pub fn mul_add(&mut self, a: Value, b: Value, c: Value) -> Value {
        if self.fma {
            self.b.ins().fma(a, b, c)
        } else {
            let m = self.b.ins().fmul(a, b);
            self.b.ins().fadd(m, c)
        }
    }
    /// A comparison mask usable by [`Math::select`].
    pub fn cmp(&mut self, cc: FloatCC, a: Value, b: Value) -> Value {
        self.b.ins().fcmp(cc, a, b)
    }
    /// `mask ? a : b` for a mask made by [`Math::cmp`].
    pub fn select(&mut self, mask: Value, a: Value, b: Value) -> Value {
        if self.is_vec() {
            let m = self.float_bits(mask);
            self.b.ins().bitselect(m, a, b)
        } else {
            self.b.ins().select(mask, a, b)
        }
    }
    /// `a < b ? b : a`: one `maxps` on vectors. Not IEEE max: a NaN `b`
    /// is dropped and a NaN `a` kept; callers that must propagate NaN track
    /// it themselves (IEEE `fmax` lowers to eight instructions).
    pub fn pmax(&mut self, a: Value, b: Value) -> Value {
        let m = self.cmp(FloatCC::LessThan, a, b);
        self.select(m, b, a)
    }
    /// `b < a ? b : a`: one `minps` on vectors (written `b < a`, not
    /// `a > b`: Cranelift lowers only this operand order to `minps`). NaN
    /// as in [`Math::pmax`].
    pub fn pmin(&mut self, a: Value, b: Value) -> Value {
        let m = self.cmp(FloatCC::LessThan, b, a);
        self.select(m, b, a)
    }
    fn clamp(&mut self, x: Value, lo: f32, hi: f32) -> Value {
        // NaN fails both comparisons and passes through.
        let lo = self.c(lo);
        let hi = self.c(hi);
        let x = self.pmax(x, lo);
        self.pmin(x, hi)
    }
    fn horner(&mut self, x: Value, coeffs: &[f32]) -> Value {
        let mut acc = self.c(coeffs[0]);
        for &c in &coeffs[1..] {
            let cv = self.c(c);
            acc = self.mul_add(acc, x, cv);
        }
        acc
    }

    /// `e^x`: Cephes' range reduction `x = n ln2 + r` with a two-constant
    /// ln2, a degree-6 polynomial, and `2^n` applied as two exponent-field
    /// scalings so that overflow gives inf and tiny results underflow
    /// gradually. NaN in, NaN out.
    pub fn exp(&mut self, x: Value) -> Value {
        self.exp_from(x, EXP_LO)
    }

    /// `e^max(x, lo)`: for callers that only need `e^x` down to `lo` (see
    /// [`Math::gelu`]); the clamp is the one `exp` does anyway. With `lo >=
    /// -87` every result is normal or overflows, so `2^n` is one exponent
    /// field (five instructions fewer); the price is that `e^x` reaches
    /// inf from x = 88.38 instead of 88.72, which callers of a floored exp
    /// (all of the form `1/(1 + e^x)`) cannot tell apart.
    fn exp_from(&mut self, x: Value, lo: f32) -> Value {
        let xc = self.clamp(x, lo, EXP_CEIL);
        let log2e = self.c(std::f32::consts::LOG2_E);
        let magic = self.c(MAGIC);
        let t = self.mul_add(xc, log2e, magic);
        let n = self.b.ins().fsub(t, magic);
        let c1 = self.c(LN2_HI);
        let c2 = self.c(LN2_LO);
        let r = self.mul_add(n, c1, xc);
        let r = self.mul_add(n, c2, r);
        let p = self.horner(r, &EXP_POLY);
        let r2 = self.b.ins().fmul(r, r);
        let one = self.c(1.0);
        let y = self.mul_add(p, r2, r);
        let y = self.b.ins().fadd(y, one);
        // n as an integer: the low mantissa bits of t (t's bits are
        // those of `magic` plus n).
        let ti = self.int_bits(t);
        // NaN needs no patching: it passes the clamp, so y is NaN already.
        if lo >= -87.0 {
            // n in [-126, 128]: 2^n is a normal float, or inf (field 255).
            // The exponent field n + 127, from t's bits in one subtraction.
            let k = self.ci(0x4B40_0000 - 127);
            let e = self.b.ins().isub(ti, k);
            let e = self.b.ins().ishl_imm_s(e, 23);
            let s = self.float_bits(e);
            return self.b.ins().fmul(y, s);
        }
        let mi = self.int_bits(magic);
        let ni = self.b.ins().isub(ti, mi);
        let bias = self.ci(127);
        // Two halves, so that n = 128 overflows to inf and n < -126 gives
        // a subnormal through the multiply instead of a bad exponent field.
        let n1 = self.b.ins().sshr_imm_s(ni, 1);
        let n2 = self.b.ins().isub(ni, n1);
        let e1 = self.b.ins().iadd(n1, bias);
        let e1 = self.b.ins().ishl_imm_s(e1, 23);
        let e2 = self.b.ins().iadd(n2, bias);
        let e2 = self.b.ins().ishl_imm_s(e2, 23);
        let s1 = self.float_bits(e1);
        let s2 = self.float_bits(e2);
        let y = self.b.ins().fmul(y, s1);
        self.b.ins().fmul(y, s2)
    }

    /// Natural log: Cephes `logf` (mantissa in [sqrt(1/2), sqrt(2)), a
    /// degree-8 polynomial). Subnormals are scaled by 2^23 first; x < 0 gives
    /// NaN, 0 gives -inf, inf gives inf.
    pub fn log(&mut self, x: Value) -> Value {
        let tiny = self.c(f32::MIN_POSITIVE);
        let is_sub = self.cmp(FloatCC::LessThan, x, tiny);
        let scale = self.c(8388608.0); // 2^23
        let xs = self.b.ins().fmul(x, scale);
        let xv = self.select(is_sub, xs, x);
        let bits = self.int_bits(xv);
        let e = self.b.ins().sshr_imm_s(bits, 23);
        let c126 = self.ci(126);
        let e = self.b.ins().isub(e, c126);
        let mask = self.ci(0x007F_FFFF);
        let half = self.ci(0x3F00_0000);
        let mb = self.b.ins().band(bits, mask);
        let mb = self.b.ins().bor(mb, half);
        let m = self.float_bits(mb); // [0.5, 1)
        let e = if self.is_vec() {
            self.b.ins().fcvt_from_sint(self.ty, e)
        } else {
            self.b.ins().fcvt_from_sint(types::F32, e)
        };
        let sub_adj = self.c(23.0);
        let e_sub = self.b.ins().fsub(e, sub_adj);
        let e = self.select(is_sub, e_sub, e);
        let sqrthf = self.c(std::f32::consts::FRAC_1_SQRT_2);
        let small = self.cmp(FloatCC::LessThan, m, sqrthf);
        let one = self.c(1.0);
        let e_m1 = self.b.ins().fsub(e, one);
        let e = self.select(small, e_m1, e);
        let m2 = self.b.ins().fadd(m, m);
        let m = self.select(small, m2, m);
        let m = self.b.ins().fsub(m, one);
        let z = self.b.ins().fmul(m, m);
        let p = self.horner(m, &LOG_POLY);
        let pm = self.b.ins().fmul(p, m);
        let y = self.b.ins().fmul(pm, z);
        let q1 = self.c(-LN2_LO);
        let y = self.mul_add(e, q1, y);
        let mhalf = self.c(-0.5);
        let y = self.mul_add(z, mhalf, y);
        let r = self.b.ins().fadd(m, y);
        let q2 = self.c(-LN2_HI);
        let r = self.mul_add(e, q2, r);
        // Special values.
        let zero = self.c(0.0);
        let inf = self.c(f32::INFINITY);
        let ninf = self.c(f32::NEG_INFINITY);
        let nan = self.c(f32::NAN);
        let is_inf = self.cmp(FloatCC::Equal, x, inf);
        let r = self.select(is_inf, inf, r);
        let is_zero = self.cmp(FloatCC::Equal, x, zero);
        let r = self.select(is_zero, ninf, r);
        let neg = self.cmp(FloatCC::LessThan, x, zero);
        let r = self.select(neg, nan, r);
        let is_nan = self.cmp(FloatCC::Unordered, x, x);
        self.select(is_nan, x, r)
    }

    /// `tanh`: `1 - 2/(e^{2|x|}+1)` with the sign restored for |x| >= 0.625,
    /// Cephes' odd polynomial below (where the first form cancels).
    pub fn tanh(&mut self, x: Value) -> Value {
        let sign_mask = self.ci(i32::MIN);
        let xi = self.int_bits(x);
        let sign = self.b.ins().band(xi, sign_mask);
        let ax = self.b.ins().fabs(x);
        let two = self.c(2.0);
        let one = self.c(1.0);
        let ax2 = self.b.ins().fmul(ax, two);
        // Only `2/(e+1)` is needed: e = inf (from 2|x| = 88.38) gives 0.
        let e = self.exp_from(ax2, 0.0);
        let d = self.b.ins().fadd(e, one);
        let q = self.b.ins().fdiv(two, d);
        let big = self.b.ins().fsub(one, q);
        let z = self.b.ins().fmul(x, x);
        let p = self.horner(z, &TANH_POLY);
        let pz = self.b.ins().fmul(p, z);
        // Both forms on |x|, then x's sign: tanh is odd, and -0 stays -0.
        let small = self.mul_add(pz, ax, ax);
        let lim = self.c(TANH_SMALL);
        let is_small = self.cmp(FloatCC::LessThan, ax, lim);
        let r = self.select(is_small, small, big);
        let ri = self.int_bits(r);
        let ri = self.b.ins().bor(ri, sign);
        self.float_bits(ri)
    }

    /// `sin x` (radians); see [`Math::sin_cos`].
    pub fn sin(&mut self, x: Value) -> Value {
        self.sin_cos(x, false)
    }

    /// `cos x` (radians); see [`Math::sin_cos`].
    pub fn cos(&mut self, x: Value) -> Value {
        self.sin_cos(x, true)
    }

    /// sin or cos: `|x| = j pi/2 + r` with `j` the nearest integer to `|x|
    /// 2/pi` and `r` from a Cody-Waite subtraction of `j` times parts of
    /// pi/2 (three exact-product parts [`PIO2_FMA`] with FMA, five few-bit
    /// parts [`PIO2_SPLIT`] without), then Cephes' polynomials for sin and
    /// cos on `|r| <= pi/4`, chosen and signed by `j mod 4` (and `x`'s sign
    /// for sin, so `sin(-0) = -0`). inf and NaN give NaN.
    fn sin_cos(&mut self, x: Value, cos: bool) -> Value {
        let xi = self.int_bits(x);
        let ax = self.b.ins().fabs(x);
        let two_pi = self.c(std::f32::consts::FRAC_2_PI);
        let t = self.b.ins().fmul(ax, two_pi);
        let j = self.b.ins().nearest(t);
        let parts: &[f32] = if self.fma { &PIO2_FMA } else { &PIO2_SPLIT };
        let nj = self.b.ins().fneg(j);
        let mut r = ax;
        for &p in parts {
            let pc = self.c(p);
            r = self.mul_add(nj, pc, r);
        }
        // j mod 4, exactly in f32 (j/4, its floor and 4 floor(j/4) are
        // exact), then as an integer (NaN -> 0: the result is NaN anyway).
        let quarter = self.c(0.25);
        let q = self.b.ins().fmul(j, quarter);
        let q = self.b.ins().floor(q);
        let m4 = self.c(-4.0);
        let m = self.mul_add(q, m4, j);
        let it = self.int_ty();
        let mut qi = self.b.ins().fcvt_to_sint_sat(it, m);
        if cos {
            // cos x = sin(x + pi/2): one quadrant on.
            let one = self.ci(1);
            qi = self.b.ins().iadd(qi, one);
        }
        let z = self.b.ins().fmul(r, r);
        let ps = self.horner(z, &SIN_POLY);
        let pz = self.b.ins().fmul(ps, z);
        let sin_r = self.mul_add(pz, r, r);
        let pc = self.horner(z, &COS_POLY);
        let zz = self.b.ins().fmul(z, z);
        let y = self.b.ins().fmul(pc, zz);
        let mhalf = self.c(-0.5);
        let y = self.mul_add(z, mhalf, y);
        let one = self.c(1.0);
        let cos_r = self.b.ins().fadd(y, one);
        // Odd quadrants take cos r: an all-ones mask from bit 0 of q.
        let swap = self.b.ins().ishl_imm_s(qi, 31);
        let swap = self.b.ins().sshr_imm_s(swap, 31);
        let sb = self.int_bits(sin_r);
        let cb = self.int_bits(cos_r);
        let pick_c = self.b.ins().band(cb, swap);
        let pick_s = self.b.ins().band_not(sb, swap);
        let v = self.b.ins().bor(pick_c, pick_s);
        // Quadrants 2 and 3 negate: bit 1 of q to the sign bit.
        let two = self.ci(2);
        let neg = self.b.ins().band(qi, two);
        let mut neg = self.b.ins().ishl_imm_s(neg, 30);
        if !cos {
            let sign_mask = self.ci(i32::MIN);
            let xs = self.b.ins().band(xi, sign_mask);
            neg = self.b.ins().bxor(neg, xs);
        }
        let v = self.b.ins().bxor(v, neg);
        self.float_bits(v)
    }

    /// The error function: `x + x P(x^2)` ([`ERF_SMALL`]) for `|x| < 1`,
    /// `1 - e^(-x^2) P(|x|)` ([`ERF_TAIL`], `|x|` clamped to [`ERF_CLAMP`])
    /// above, with `x`'s sign (erf is odd; `erf(-0) = -0`). NaN in, NaN out.
    pub fn erf(&mut self, x: Value) -> Value {
        let sign_mask = self.ci(i32::MIN);
        let xi = self.int_bits(x);
        let sign = self.b.ins().band(xi, sign_mask);
        let ax = self.b.ins().fabs(x);
        let t = self.b.ins().fmul(ax, ax);
        let q = self.horner(t, &ERF_SMALL);
        let small = self.mul_add(ax, q, ax);
        // NaN passes the clamp (and fails `< 1`), so the tail gives NaN.
        let lim = self.c(ERF_CLAMP);
        let xc = self.pmin(ax, lim);
        let p = self.horner(xc, &ERF_TAIL);
        let nt = self.b.ins().fneg(t);
        let e = self.exp_from(nt, EXP_FLOOR);
        let ep = self.b.ins().fmul(e, p);
        let one = self.c(1.0);
        let big = self.b.ins().fsub(one, ep);
        let is_small = self.cmp(FloatCC::LessThan, ax, one);
        let r = self.select(is_small, small, big);
        let ri = self.int_bits(r);
        let ri = self.b.ins().bor(ri, sign);
        self.float_bits(ri)
    }

    /// `1/(1+e^-x)`, as `s = 1/(1+t)` with `t = e^-|x|` (never above 1,
    /// so never inf), and `t s = e^x/(1+e^x)` for `x < 0`: below x = -87.3
    /// that is `t` itself, subnormal down to x = -103.9 as the reference
    /// gives it (`1/(1+e^-x)` alone overflows `e^-x` and gives 0 there).
    /// NaN in, NaN out; -0 gives 0.5.
    pub fn sigmoid(&mut self, x: Value) -> Value {
        let zero = self.c(0.0);
        let neg = self.cmp(FloatCC::LessThan, x, zero);
        let ax = self.b.ins().fabs(x);
        let nax = self.b.ins().fneg(ax);
        let t = self.exp_tail(nax, neg);
        let one = self.c(1.0);
        let d = self.b.ins().fadd(one, t);
        let s = self.b.ins().fdiv(one, d);
        let ts = self.b.ins().fmul(t, s);
        self.select(neg, ts, s)
    }

    /// `e^y` for `y <= 0` (or NaN) where `tail` lanes need it all the way
    /// down (subnormals included) and the others only to [`EXP_FLOOR`]
    /// (they add it to 1). No lane computes a subnormal it does not
    /// return, nor an underflow to 0 (y below [`EXP_LO`] gives 0 by a
    /// select): on x86 each such result costs a microcode assist, which
    /// would slow a sigmoid or gelu of large-magnitude data many times.
    fn exp_tail(&mut self, y: Value, tail: Value) -> Value {
        let lo = self.c(EXP_LO);
        let floor = self.c(EXP_FLOOR);
        let zero = self.c(0.0);
        let gone = self.cmp(FloatCC::LessThan, y, lo);
        let floor = self.select(tail, lo, floor);
        let yc = self.pmax(y, floor);
        let yc = self.select(gone, zero, yc);
        let e = self.exp_from(yc, EXP_LO);
        self.select(gone, zero, e)
    }

    /// `0.5x(1+tanh(0.7978845608(x+0.044715x^3)))`, evaluated as the
    /// identity `x / (1 + e^{-2u})` (u the tanh argument): `1 + tanh(u)`
    /// cancels to 0 for u << 0 in f32, this form keeps the tiny negative tail
    /// and the sign of -0, and costs one exp instead of a tanh. As in
    /// [`Math::sigmoid`], the exp is of `-|2u|` (`w`), and for `-2u > 0`
    /// (x < 0) the result is `q w` with `q = x/(1+w)`, so the negative tail
    /// goes on into subnormals (to x = -10.6) instead of `x/inf = -0`.
    pub fn gelu(&mut self, x: Value) -> Value {
        // -2u = x (c + c 0.044715 x^2), c = -2 sqrt(2/pi).
        let x2 = self.b.ins().fmul(x, x);
        let ck = self.c(GELU_CK);
        let c = self.c(GELU_C);
        let inner = self.mul_add(x2, ck, c);
        let m2u = self.b.ins().fmul(inner, x);
        let zero = self.c(0.0);
        let tail = self.cmp(FloatCC::LessThan, zero, m2u);
        let a = self.b.ins().fabs(m2u);
        let na = self.b.ins().fneg(a);
        let w = self.exp_tail(na, tail);
        let one = self.c(1.0);
        let d = self.b.ins().fadd(one, w);
        let q = self.b.ins().fdiv(x, d);
        let qw = self.b.ins().fmul(q, w);
        self.select(tail, qw, q)
    }
}
