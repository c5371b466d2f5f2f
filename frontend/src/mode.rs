//! Run modes: where a jit call's compiled program runs.
//!
//! - [`RunMode::Host`] (default): native kernels on the host.
//! - [`RunMode::Sim`]: the kernels compiled to bytecode and launched as
//!   tile tasks on the simulated accelerator (inputs copied to its GM, the
//!   outputs copied back).
//! - [`RunMode::Verify`]: both, every output compared; a difference past
//!   what two correct results may differ by ([`compare`]) fails the call
//!   with the first such element.
//! - [`RunMode::Reference`]: the reference interpreter.
//!
//! The mode of a call is, first found: a per-call override
//! ([`with_mode`] around the call, or [`crate::JitFn::with_mode`]); the
//! function's own mode (`#[jit(mode = sim)]`, [`crate::JitFunction::set_mode`]);
//! the environment variable `TILEJIT_RUN_MODE=host|sim|verify|reference`;
//! `Host`.

use crate::error::{Error, Result};
use std::cell::Cell;
use tilejit_ir::{Array, DType, Graph, Lit};

pub use crate::config::RunMode;

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
    crate::config::config().run_mode
}

/// Host and Sim results this many ulps apart always pass: rounding
/// differences that no bound tracks (subnormals flushed, an FMA).
pub const FLOOR_ULPS: u64 = 4;

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
    /// The largest share of its tolerance (twice the element's error bound)
    /// an element more than [`FLOOR_ULPS`] apart used: at most 1 when the
    /// call passed; 0 when no element needed its bound.
    pub max_bound_use: f64,
    /// Where the first out-of-tolerance element is, with both values.
    pub worst: Option<(usize, f64, f64)>,
}

/// Compares Host and Sim outputs of `graph` run on `inputs` and `params`
/// (what `RunMode::Verify` does); `Err` names the first element past its
/// tolerance.
///
/// The rule: two elements pass if they are equal, both NaN, at most
/// [`FLOOR_ULPS`] apart, or apart by at most twice the element's forward
/// error bound ([`tilejit_ir::bound`]: for sums and matmuls the
/// accumulation length times `Σ|terms|` times the unit roundoff, a few
/// roundings per elementwise op, carried through the graph), since each
/// correct backend lies within the bound of the exact result. Where the
/// bound is infinite (a division by a value its own error could make
/// zero) the element is not checked. Bounds are computed (one reference
/// interpreter run) only when some element is past the floor.
pub fn compare(
    function: &str,
    graph: &Graph,
    inputs: &[Array],
    params: &[Lit],
    host: &[Array],
    sim: &[Array],
) -> Result<Vec<OutputDiff>> {
    let fail = |msg: String| Error::Verify {
        function: function.to_string(),
        message: msg,
    };
    if host.len() != sim.len() {
        return Err(fail(format!(
            "host gives {} outputs, sim {}",
            host.len(),
            sim.len()
        )));
    }
    for (i, (h, s)) in host.iter().zip(sim).enumerate() {
        if h.ty() != s.ty() {
            return Err(fail(format!(
                "output {i}: host gives {}, sim gives {}",
                h.ty(),
                s.ty()
            )));
        }
    }
    let mut diffs: Vec<OutputDiff> = host
        .iter()
        .zip(sim)
        .enumerate()
        .map(|(i, (h, s))| measure(i, h, s))
        .collect();
    if diffs.iter().all(|d| d.worst.is_none()) {
        return Ok(diffs);
    }
    let bounds = tilejit_ir::bound::error_bounds(graph, inputs, params)
        .map_err(|e| fail(format!("computing the error bounds: {e}")))?;
    if bounds.len() != host.len() {
        return Err(fail(format!(
            "the graph has {} outputs, the backends gave {}",
            bounds.len(),
            host.len()
        )));
    }
    for (d, ((h, s), e)) in diffs.iter_mut().zip(host.iter().zip(sim).zip(&bounds)) {
        if d.worst.is_some() {
            check_bounds(d, h, s, e).map_err(fail)?;
        }
    }
    Ok(diffs)
}

/// The differences of one output pair; `worst` is the first element past
/// [`FLOOR_ULPS`] (or unequal, for integers and bools).
fn measure(i: usize, h: &Array, s: &Array) -> OutputDiff {
    let (hb, sb) = (h.buffer(), s.buffer());
    let mut d = OutputDiff {
        output: i,
        max_abs: 0.0,
        max_rel: 0.0,
        max_ulp: 0,
        max_bound_use: 0.0,
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
        if u > FLOOR_ULPS && d.worst.is_none() {
            d.worst = Some((j, x, y));
        }
    }
    d
}

/// Checks every element of an output pair past the floor against twice
/// its error bound `e`; clears `d.worst` when all pass.
fn check_bounds(
    d: &mut OutputDiff,
    h: &Array,
    s: &Array,
    e: &[f64],
) -> std::result::Result<(), String> {
    let (hb, sb) = (h.buffer(), s.buffer());
    if e.len() != hb.len() {
        return Err(format!(
            "output {}: {} error bounds for {} elements",
            d.output,
            e.len(),
            hb.len()
        ));
    }
    for (j, &bound) in e.iter().enumerate() {
        let (x, y) = (hb.get(j).as_f64(), sb.get(j).as_f64());
        if x == y || (x.is_nan() && y.is_nan()) {
            continue;
        }
        if h.dtype().is_float() && ulps(x, y, h.dtype()) <= FLOOR_ULPS {
            continue;
        }
        let tol = 2.0 * bound;
        if !tol.is_finite() {
            continue;
        }
        let diff = (x - y).abs();
        let used = diff / tol;
        d.max_bound_use = d
            .max_bound_use
            .max(if used.is_nan() { f64::INFINITY } else { used });
        if diff.is_nan() || diff > tol {
            return Err(format!(
                "output {} ({}): element {j} is {x} on host and {y} on sim, {diff:e} apart ({} ulp); \
                 two correct results are at most {tol:e} apart there (twice its error bound) \
                 or {FLOOR_ULPS} ulp; max abs error {:e}, max {} ulp",
                d.output,
                h.ty(),
                if h.dtype().is_float() { ulps(x, y, h.dtype()) } else { 0 },
                d.max_abs,
                d.max_ulp
            ));
        }
    }
    d.worst = None;
    Ok(())
}

/// `TILEJIT_LOG=verify`: one line per Verify-mode call with its measured
/// differences.
pub(crate) fn log_verify(function: &str, diffs: &[OutputDiff]) {
    if crate::config::config().log.verify {
        for d in diffs {
            eprintln!(
                "[tilejit] verify `{function}` output {}: max abs {:e}, max rel {:e}, max {} ulp, \
                 {:.3} of the error bound used",
                d.output, d.max_abs, d.max_rel, d.max_ulp, d.max_bound_use
            );
        }
    }
}
