//! The Rust functions host code calls for ops it does not compute inline
//! (named by the op table's `Libcall` columns). `extern "C"` so generated
//! code can call them; each is its op's reference semantics in f64.

use crate::scalar;

pub(super) extern "C" fn tj_exp(x: f64) -> f64 {
    x.exp()
}
pub(super) extern "C" fn tj_log(x: f64) -> f64 {
    x.ln()
}
pub(super) extern "C" fn tj_tanh(x: f64) -> f64 {
    x.tanh()
}
pub(super) extern "C" fn tj_sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}
pub(super) extern "C" fn tj_gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.7978845608 * (x + 0.044715 * x * x * x)).tanh())
}
pub(super) extern "C" fn tj_sin(x: f64) -> f64 {
    x.sin()
}
pub(super) extern "C" fn tj_cos(x: f64) -> f64 {
    x.cos()
}
pub(super) extern "C" fn tj_erf(x: f64) -> f64 {
    scalar::erf(x)
}
pub(super) extern "C" fn tj_pow(x: f64, y: f64) -> f64 {
    x.powf(y)
}
pub(super) extern "C" fn tj_mod(x: f64, y: f64) -> f64 {
    scalar::float_mod(x, y)
}
pub(super) extern "C" fn tj_ipow(x: i64, y: i64) -> i64 {
    scalar::int_pow(x, y)
}
pub(super) extern "C" fn tj_atan(x: f64) -> f64 {
    x.atan()
}
pub(super) extern "C" fn tj_asin(x: f64) -> f64 {
    x.asin()
}
pub(super) extern "C" fn tj_acos(x: f64) -> f64 {
    x.acos()
}
pub(super) extern "C" fn tj_asinh(x: f64) -> f64 {
    x.asinh()
}
pub(super) extern "C" fn tj_acosh(x: f64) -> f64 {
    x.acosh()
}
pub(super) extern "C" fn tj_atanh(x: f64) -> f64 {
    x.atanh()
}
