//! The rows of the op table: one per op, in the order of each enum's
//! `ALL` (append new ops at the end of their block: the device encodes a
//! unary or binary op as its index in `ALL`).

use super::libcalls::*;
use super::{
    BinaryDef, BinaryHost, CmpDef, Domain, ExactF32, Inline, Libcall, Libcall2, Libcall2I, MathFn,
    ReduceDef, UnaryBound, UnaryDef, UnaryHost,
};
use crate::bound::{GELU_LIPSCHITZ, GELU_ULPS, TRANSCENDENTAL_ULPS as T};
use crate::scalar;
use std::cmp::Ordering::{self, Equal, Greater, Less};

/// A float-only op computed by the inline f32 math and an f64 libcall.
const fn math(f32: MathFn, symbol: &'static str, f: extern "C" fn(f64) -> f64) -> UnaryHost {
    UnaryHost::Math {
        f32,
        f64: Libcall { symbol, f },
    }
}

/// A float-only op computed by a libcall on every float dtype.
const fn libcall(symbol: &'static str, f: extern "C" fn(f64) -> f64) -> UnaryHost {
    UnaryHost::Libcall(Libcall { symbol, f })
}

/// A monotone bound with `T` roundings.
const fn monotone(f: fn(f64) -> f64, domain: Domain) -> UnaryBound {
    UnaryBound::Monotone { f, domain, ulps: T }
}

const INLINE: BinaryHost = BinaryHost {
    float: None,
    int: None,
};

fn identity(x: i64) -> i64 {
    x
}

crate::op_table! {
    /// Elementwise functions of one operand.
    enum UnaryOp: UnaryDef {
        /// `-x`
        Neg "neg" => UnaryDef {
            float: |x| -x, int: Some(i64::wrapping_neg), exact_f32: Some(ExactF32::Neg),
            bound: UnaryBound::Carried, cost: 1, host: UnaryHost::Inline(Inline::Neg),
        },
        /// `|x|`
        Abs "abs" => UnaryDef {
            float: f64::abs, int: Some(i64::wrapping_abs), exact_f32: Some(ExactF32::Abs),
            bound: UnaryBound::Carried, cost: 1, host: UnaryHost::Inline(Inline::Abs),
        },
        /// `x*x`
        Square "square" => UnaryDef {
            float: |x| x * x, int: Some(|x| x.wrapping_mul(x)), exact_f32: None,
            bound: UnaryBound::Square, cost: 1, host: UnaryHost::Inline(Inline::Square),
        },
        /// `max(x, 0)`, NaN-propagating
        Relu "relu" => UnaryDef {
            float: scalar::relu, int: Some(|x| x.max(0)),
            exact_f32: Some(ExactF32::Relu),
            bound: UnaryBound::Carried, cost: 1, host: UnaryHost::Inline(Inline::Relu),
        },
        /// `e^x`
        Exp "exp" => UnaryDef {
            float: f64::exp, int: None, exact_f32: None, bound: monotone(f64::exp, Domain::All),
            cost: 12, host: math(MathFn::Exp, "tj_exp", tj_exp),
        },
        /// natural log
        Log "log" => UnaryDef {
            float: f64::ln, int: None, exact_f32: None, bound: monotone(f64::ln, Domain::Positive),
            cost: 12, host: math(MathFn::Log, "tj_log", tj_log),
        },
        /// square root
        Sqrt "sqrt" => UnaryDef {
            float: f64::sqrt, int: None, exact_f32: None, bound: UnaryBound::Sqrt,
            cost: 4, host: UnaryHost::Inline(Inline::Sqrt),
        },
        /// `1/sqrt(x)`
        Rsqrt "rsqrt" => UnaryDef {
            float: |x| 1.0 / x.sqrt(), int: None, exact_f32: None,
            bound: monotone(|x| 1.0 / x.sqrt(), Domain::Positive),
            cost: 4, host: UnaryHost::Inline(Inline::Rsqrt),
        },
        /// `1/x`
        Recip "recip" => UnaryDef {
            float: |x| 1.0 / x, int: None, exact_f32: None,
            bound: monotone(|x| 1.0 / x, Domain::NoPole),
            cost: 4, host: UnaryHost::Inline(Inline::Recip),
        },
        /// hyperbolic tangent
        Tanh "tanh" => UnaryDef {
            float: f64::tanh, int: None, exact_f32: None, bound: monotone(f64::tanh, Domain::All),
            cost: 12, host: math(MathFn::Tanh, "tj_tanh", tj_tanh),
        },
        /// `1/(1+e^-x)`
        Sigmoid "sigmoid" => UnaryDef {
            float: scalar::sigmoid, int: None, exact_f32: None,
            bound: monotone(scalar::sigmoid, Domain::All),
            cost: 12, host: math(MathFn::Sigmoid, "tj_sigmoid", tj_sigmoid),
        },
        /// tanh approximation `0.5x(1+tanh(0.7978845608(x+0.044715x^3)))`
        Gelu "gelu" => UnaryDef {
            float: scalar::gelu, int: None, exact_f32: None,
            // `0.5x(1 + tanh(..))` cancels for x << 0: an error of about u|x|.
            bound: UnaryBound::Lipschitz { slope: GELU_LIPSCHITZ, ulps: GELU_ULPS, cancels: true },
            cost: 16, host: math(MathFn::Gelu, "tj_gelu", tj_gelu),
        },
        /// sine (radians)
        Sin "sin" => UnaryDef {
            float: f64::sin, int: None, exact_f32: None,
            bound: UnaryBound::Lipschitz { slope: 1.0, ulps: T, cancels: false },
            cost: 12, host: math(MathFn::Sin, "tj_sin", tj_sin),
        },
        /// cosine (radians)
        Cos "cos" => UnaryDef {
            float: f64::cos, int: None, exact_f32: None,
            bound: UnaryBound::Lipschitz { slope: 1.0, ulps: T, cancels: false },
            cost: 12, host: math(MathFn::Cos, "tj_cos", tj_cos),
        },
        /// the error function `2/sqrt(pi) * integral_0^x e^(-t^2) dt`
        Erf "erf" => UnaryDef {
            float: scalar::erf, int: None, exact_f32: None,
            bound: monotone(scalar::erf, Domain::All),
            cost: 12, host: math(MathFn::Erf, "tj_erf", tj_erf),
        },
        /// largest integer `<= x` (integers: the identity)
        Floor "floor" => UnaryDef {
            float: f64::floor, int: Some(identity), exact_f32: Some(ExactF32::Floor),
            bound: UnaryBound::Step, cost: 1, host: UnaryHost::Inline(Inline::Floor),
        },
        /// smallest integer `>= x` (integers: the identity)
        Ceil "ceil" => UnaryDef {
            float: f64::ceil, int: Some(identity), exact_f32: Some(ExactF32::Ceil),
            bound: UnaryBound::Step, cost: 1, host: UnaryHost::Inline(Inline::Ceil),
        },
        /// nearest integer, halves to even (integers: the identity)
        Round "round" => UnaryDef {
            float: f64::round_ties_even, int: Some(identity), exact_f32: Some(ExactF32::Round),
            bound: UnaryBound::Step, cost: 1, host: UnaryHost::Inline(Inline::Round),
        },
        /// `-1`, `0` or `1` by the sign of `x` (`sign(-0.0) = 0.0`, NaN stays NaN)
        Sign "sign" => UnaryDef {
            float: scalar::sign, int: Some(i64::signum), exact_f32: Some(ExactF32::Sign),
            bound: UnaryBound::Sign, cost: 1, host: UnaryHost::Inline(Inline::Sign),
        },
        /// arctangent (radians)
        Atan "atan" => UnaryDef {
            float: f64::atan, int: None, exact_f32: None, bound: monotone(f64::atan, Domain::All),
            cost: 12, host: libcall("tj_atan", tj_atan),
        },
        /// arcsine (radians; NaN outside `[-1, 1]`)
        Asin "asin" => UnaryDef {
            float: f64::asin, int: None, exact_f32: None, bound: monotone(f64::asin, Domain::All),
            cost: 12, host: libcall("tj_asin", tj_asin),
        },
        /// arccosine (radians; NaN outside `[-1, 1]`)
        Acos "acos" => UnaryDef {
            float: f64::acos, int: None, exact_f32: None, bound: monotone(f64::acos, Domain::All),
            cost: 12, host: libcall("tj_acos", tj_acos),
        },
        /// inverse hyperbolic sine
        Asinh "asinh" => UnaryDef {
            float: f64::asinh, int: None, exact_f32: None, bound: monotone(f64::asinh, Domain::All),
            cost: 12, host: libcall("tj_asinh", tj_asinh),
        },
        /// inverse hyperbolic cosine (NaN below 1)
        Acosh "acosh" => UnaryDef {
            float: f64::acosh, int: None, exact_f32: None, bound: monotone(f64::acosh, Domain::All),
            cost: 12, host: libcall("tj_acosh", tj_acosh),
        },
        /// inverse hyperbolic tangent (`±inf` at `±1`, NaN beyond)
        Atanh "atanh" => UnaryDef {
            float: f64::atanh, int: None, exact_f32: None, bound: monotone(f64::atanh, Domain::All),
            cost: 12, host: libcall("tj_atanh", tj_atanh),
        },
    }

    /// Elementwise functions of two operands of equal type.
    enum BinaryOp: BinaryDef {
        /// `a+b`
        Add "add" => BinaryDef {
            name: "add", float: Some(|a, b| a + b), int: i64::wrapping_add, cost: 1, host: INLINE,
        },
        /// `a-b`
        Sub "sub" => BinaryDef {
            name: "sub", float: Some(|a, b| a - b), int: i64::wrapping_sub, cost: 1, host: INLINE,
        },
        /// `a*b`
        Mul "mul" => BinaryDef {
            name: "mul", float: Some(|a, b| a * b), int: i64::wrapping_mul, cost: 1, host: INLINE,
        },
        /// `a/b` (integers: truncating, x/0 = 0)
        Div "div" => BinaryDef {
            name: "div", float: Some(|a, b| a / b), int: scalar::int_div, cost: 4, host: INLINE,
        },
        /// elementwise maximum, NaN-propagating
        Max "max" => BinaryDef {
            name: "maximum", float: Some(scalar::max_nan), int: i64::max, cost: 1, host: INLINE,
        },
        /// elementwise minimum, NaN-propagating
        Min "min" => BinaryDef {
            name: "minimum", float: Some(scalar::min_nan), int: i64::min, cost: 1, host: INLINE,
        },
        /// `a^b` (floats: IEEE `pow`; integers: wrapping, `a^b = 0` for `b < 0` unless `a` is 1 or -1)
        Pow "pow" => BinaryDef {
            name: "pow", float: Some(f64::powf), int: scalar::int_pow, cost: 12,
            host: BinaryHost {
                float: Some(Libcall2 { symbol: "tj_pow", f: tj_pow }),
                int: Some(Libcall2I { symbol: "tj_ipow", f: tj_ipow }),
            },
        },
        /// `a mod b` with the divisor's sign (numpy's `mod`; integers: `x mod 0 = 0`; floats: `x mod 0 = NaN`)
        Rem "rem" => BinaryDef {
            name: "rem", float: Some(scalar::float_mod), int: scalar::int_mod, cost: 4,
            host: BinaryHost { float: Some(Libcall2 { symbol: "tj_mod", f: tj_mod }), int: None },
        },
        /// bitwise and (integers only)
        BitAnd "and" => BinaryDef {
            name: "bitwise_and", float: None, int: |a, b| a & b, cost: 1, host: INLINE,
        },
        /// bitwise or (integers only)
        BitOr "or" => BinaryDef {
            name: "bitwise_or", float: None, int: |a, b| a | b, cost: 1, host: INLINE,
        },
        /// bitwise exclusive or (integers only)
        BitXor "xor" => BinaryDef {
            name: "bitwise_xor", float: None, int: |a, b| a ^ b, cost: 1, host: INLINE,
        },
        /// `a << b` (integers only; 0 when `b` is negative or at least the bit width)
        Shl "shl" => BinaryDef {
            name: "shl", float: None, int: scalar::int_shl, cost: 1, host: INLINE,
        },
        /// `a >> b`, logical on unsigned and arithmetic on signed dtypes (integers only; `b` negative or at least the bit width gives 0, or -1 for a negative `a`)
        Shr "shr" => BinaryDef {
            name: "shr", float: None, int: scalar::int_shr, cost: 1, host: INLINE,
        },
    }

    /// Elementwise comparisons; the result is `bool`.
    enum CmpOp: CmpDef {
        /// `a<b`
        Lt "lt" => CmpDef { holds: |o| o == Some(Less) },
        /// `a>b`
        Gt "gt" => CmpDef { holds: |o| o == Some(Greater) },
        /// `a<=b`
        Le "le" => CmpDef { holds: |o| matches!(o, Some(Less | Equal)) },
        /// `a>=b`
        Ge "ge" => CmpDef { holds: |o| matches!(o, Some(Greater | Equal)) },
        /// `a==b`
        Eq "eq" => CmpDef { holds: |o: Option<Ordering>| o == Some(Equal) },
    }

    /// Reductions over a set of axes.
    enum ReduceOp: ReduceDef {
        /// sum (0 over an empty axis)
        Sum "reduce_sum" => ReduceDef {
            name: "sum", float: (0.0, |a, b| a + b), int: (0, i64::wrapping_add),
            empty_ok: true, widen_partials: true, pool: Some("pool_sum"),
        },
        /// maximum, NaN-propagating (undefined over an empty axis)
        Max "reduce_max" => ReduceDef {
            name: "max", float: (f64::NEG_INFINITY, scalar::max_nan), int: (i64::MIN, i64::max),
            empty_ok: false, widen_partials: false, pool: Some("pool_max"),
        },
        /// minimum, NaN-propagating (undefined over an empty axis)
        Min "reduce_min" => ReduceDef {
            name: "min", float: (f64::INFINITY, scalar::min_nan), int: (i64::MAX, i64::min),
            empty_ok: false, widen_partials: false, pool: Some("pool_min"),
        },
        /// product (1 over an empty axis; integers wrap)
        Prod "reduce_prod" => ReduceDef {
            name: "prod", float: (1.0, |a, b| a * b), int: (1, i64::wrapping_mul),
            empty_ok: true, widen_partials: true, pool: None,
        },
    }
}
