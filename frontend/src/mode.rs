//! Run modes: where a jit call's compiled program runs.
//!
//! - [`RunMode::Host`] (default): native kernels on the host.
//! - [`RunMode::Sim`]: the kernels compiled to bytecode and launched as
//!   tile tasks on the simulated accelerator (inputs copied to its GM, the
//!   outputs copied back).
//! - [`RunMode::Verify`]: both, every output compared; a difference past
//!   the dtype's tolerance fails the call with the worst element's errors.
//! - [`RunMode::Reference`]: the reference interpreter.
//!
//! The mode of a call is, first found: a per-call override
//! ([`with_mode`] around the call, or [`crate::JitFn::with_mode`]); the
//! function's own mode (`#[jit(mode = sim)]`, [`crate::JitFunction::set_mode`]);
//! the environment variable `TILEJIT_RUN_MODE=host|sim|verify|reference`;
//! `Host`.

use crate::error::{Error, Result};
use std::cell::Cell;
use tilejit_ir::{Array, DType};

pub use tilejit_ir::config::RunMode;

/// A non-zero byte for each mode (0 stands for "unset" where stored).
pub(crate) fn mode_to_byte(m: RunMode) -> u8 {
    m as u8 + 1
}

/// The mode [`mode_to_byte`] gave, or `None` for 0.
pub(crate) fn mode_from_byte(b: u8) -> Option<RunMode> {
    RunMode::ALL.into_iter().find(|&m| mode_to_byte(m) == b)
}

thread_local! {
    static SCOPED: Cell<Option<RunMode>> = const { Cell::new(None) };
}

/// Runs `f` with every jit call it makes on this thread in `mode`
/// (overriding functions' own modes and the environment).
///
/// ```
/// use tilejit::prelude::*;
/// let f = jit_fn!(|x: &Tensor| (x * 0.5).tanh());
/// let x = Tensor::randn(&[1000], 7);
/// let on_device = with_mode(RunMode::Sim, || f.call(&x))?;        // bytecode on the simulator
/// let checked = with_mode(RunMode::Verify, || f.call(&x))?;       // host and sim, compared
/// let oracle = with_mode(RunMode::Reference, || f.call(&x))?;     // the interpreter
/// assert_eq!(on_device.to_vec::<f32>()?, oracle.to_vec::<f32>()?);
/// assert_eq!(checked.shape(), &[1000]);
/// # Ok::<(), tilejit::Error>(())
/// ```
pub fn with_mode<R>(mode: RunMode, f: impl FnOnce() -> R) -> R {
    let _scope = Scope::enter(mode);
    f()
}

/// Runs this thread's jit calls and eager ops on the host until the
/// returned guard drops, whatever `TILEJIT_RUN_MODE` says (for code that is
/// about the host backend itself, such as its tests).
pub fn scoped_host() -> impl Drop {
    Scope::enter(RunMode::Host)
}

/// A per-call mode for as long as it lives (restores the previous one on
/// drop, also when unwinding).
pub(crate) struct Scope(Option<RunMode>);

impl Scope {
    pub(crate) fn enter(mode: RunMode) -> Scope {
        Scope(SCOPED.with(|s| s.replace(Some(mode))))
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        SCOPED.with(|s| s.set(self.0));
    }
}

/// The per-call override in effect on this thread, if any.
pub(crate) fn scoped() -> Option<RunMode> {
    SCOPED.with(Cell::get)
}

/// `TILEJIT_RUN_MODE`, if set to a mode.
pub(crate) fn env_mode() -> Option<RunMode> {
    tilejit_ir::config::config().run_mode
}

/// How far Host and Sim may differ, per dtype: relative error (to
/// max(1, |sim|)) or distance in units in the last place, whichever is
/// looser; integers and bools must be equal.
fn tolerance(d: DType) -> (f64, u64) {
    match d {
        DType::F64 => (1e-12, 64),
        DType::F32 => (1e-5, 64),
        DType::F16 | DType::BF16 => (1e-2, 4),
        _ => (0.0, 0),
    }
}

/// Distance in ulps between two values of a float dtype (NaN == NaN).
fn ulps(a: f64, b: f64, d: DType) -> u64 {
    if a.is_nan() && b.is_nan() {
        return 0;
    }
    if a.is_nan() || b.is_nan() {
        return u64::MAX;
    }
    // Map floats to integers that order like them (two's complement trick).
    fn key32(x: f32) -> i64 {
        let b = x.to_bits() as i32;
        (if b < 0 { i32::MIN - b } else { b }) as i64
    }
    fn key64(x: f64) -> i128 {
        let b = x.to_bits() as i64;
        (if b < 0 { i64::MIN - b } else { b }) as i128
    }
    match d {
        DType::F64 => key64(a).abs_diff(key64(b)).min(u64::MAX as u128) as u64,
        DType::F16 => {
            let k = |x: f64| key32(tilejit_ir::scalar::f16_from_f64(x).to_f32()) >> 13;
            k(a).abs_diff(k(b))
        }
        DType::BF16 => {
            let k = |x: f64| key32(tilejit_ir::scalar::bf16_from_f64(x).to_f32()) >> 16;
            k(a).abs_diff(k(b))
        }
        _ => key32(a as f32).abs_diff(key32(b as f32)),
    }
}

/// The worst difference between one Host and one Sim output.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputDiff {
    /// Output index.
    pub output: usize,
    /// Largest absolute error.
    pub max_abs: f64,
    /// Largest relative error (to max(1, |sim|)).
    pub max_rel: f64,
    /// Largest distance in ulps.
    pub max_ulp: u64,
    /// Where the first out-of-tolerance element is, with both values.
    pub worst: Option<(usize, f64, f64)>,
}

/// Compares Host and Sim outputs (what `RunMode::Verify` does); `Err`
/// names the first output past tolerance with its worst element.
pub fn compare(function: &str, host: &[Array], sim: &[Array]) -> Result<Vec<OutputDiff>> {
    let mut diffs = Vec::new();
    for (i, (h, s)) in host.iter().zip(sim).enumerate() {
        let fail = |msg: String| Error::Verify {
            function: function.to_string(),
            message: msg,
        };
        if h.ty() != s.ty() {
            return Err(fail(format!(
                "output {i}: host gives {}, sim gives {}",
                h.ty(),
                s.ty()
            )));
        }
        let (rel_tol, ulp_tol) = tolerance(h.dtype());
        let (hb, sb) = (h.buffer(), s.buffer());
        let mut d = OutputDiff {
            output: i,
            max_abs: 0.0,
            max_rel: 0.0,
            max_ulp: 0,
            worst: None,
        };
        for j in 0..hb.len() {
            let (x, y) = (hb.get(j).as_f64(), sb.get(j).as_f64());
            if x == y || (x.is_nan() && y.is_nan()) {
                continue;
            }
            let abs = (x - y).abs();
            let rel = abs / y.abs().max(1.0);
            let u = if h.dtype().is_float() {
                ulps(x, y, h.dtype())
            } else {
                u64::MAX
            };
            d.max_abs = d
                .max_abs
                .max(if abs.is_nan() { f64::INFINITY } else { abs });
            d.max_rel = d
                .max_rel
                .max(if rel.is_nan() { f64::INFINITY } else { rel });
            d.max_ulp = d.max_ulp.max(u);
            if !(rel <= rel_tol || u <= ulp_tol) && d.worst.is_none() {
                d.worst = Some((j, x, y));
            }
        }
        if let Some((j, x, y)) = d.worst {
            return Err(fail(format!(
                "output {i} ({}): element {j} is {x} on host and {y} on sim; max abs error {:e}, max rel error {:e}, \
                 max {} ulp (tolerance: rel {rel_tol:e} or {ulp_tol} ulp)",
                h.ty(),
                d.max_abs,
                d.max_rel,
                d.max_ulp
            )));
        }
        diffs.push(d);
    }
    Ok(diffs)
}

/// `TILEJIT_LOG=verify`: one line per Verify-mode call with its measured
/// differences.
pub(crate) fn log_verify(function: &str, diffs: &[OutputDiff]) {
    if tilejit_ir::config::config().log.verify {
        for d in diffs {
            eprintln!(
                "[tilejit] verify `{function}` output {}: max abs {:e}, max rel {:e}, max {} ulp",
                d.output, d.max_abs, d.max_rel, d.max_ulp
            );
        }
    }
}
