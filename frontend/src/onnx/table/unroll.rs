//! How far the importer unrolls. Loop, Scan, the RNNs, TopK and a dozen
//! more nodes trace one or more ops per step, and the step count comes
//! from the file: an attribute, or a dim an `Expand` makes 2^40 long
//! without allocating anything. So each node's count is capped
//! ([`MAX_UNROLLED`]), and, since nested nodes multiply their counts,
//! every step a trace unrolls is charged to one budget for the whole trace
//! ([`MAX_TRACE_STEPS`]). Either limit is an E4 naming the node and the
//! attribute, raised before the steps it refuses are traced.

use super::fail;
use crate::error::Result;
use crate::onnx::model::Node;
use std::cell::Cell;
use tilejit_ir::ErrorKind;

/// The most steps one node unrolls: 2^16, past what real graphs unroll.
pub(crate) const MAX_UNROLLED: usize = 1 << 16;

/// The most steps one trace's nodes unroll together, nested ones counted
/// once per time their parent runs them: 2^18. At a few ops a step that is
/// about what a traced graph holds (`tilejit_ir::graph::MAX_NODES`), and
/// it stops nested loops of cheap bodies, which add few nodes, too.
pub(crate) const MAX_TRACE_STEPS: usize = 1 << 18;

thread_local! {
    /// Steps the trace in progress on this thread has unrolled.
    static STEPS: Cell<usize> = const { Cell::new(0) };
}

/// Runs `f`, a trace of a model's nodes, with a fresh step budget (the
/// caller's, if any, restored after, unwinding included).
pub(crate) fn with_step_budget<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            STEPS.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(STEPS.with(|s| s.replace(0)));
    f()
}

/// `count` (`what`, set by `attr`), or an error when it passes
/// [`MAX_UNROLLED`]; charges nothing.
pub(crate) fn unroll_limit(n: &Node, attr: &str, what: &str, count: usize) -> Result<usize> {
    if count > MAX_UNROLLED {
        return Err(fail(
            n,
            attr,
            ErrorKind::Unsupported,
            format!("{count} {what} to unroll; tilejit unrolls at most {MAX_UNROLLED}"),
        ));
    }
    Ok(count)
}

/// Charges `count` steps of `what` to the trace's budget: an error once
/// the trace has unrolled more than [`MAX_TRACE_STEPS`].
pub(crate) fn charge(n: &Node, attr: &str, what: &str, count: usize) -> Result<()> {
    let total = STEPS.with(|s| {
        let t = s.get().saturating_add(count);
        s.set(t);
        t
    });
    if total > MAX_TRACE_STEPS {
        return Err(fail(
            n,
            attr,
            ErrorKind::Unsupported,
            format!(
                "{count} more {what} take the trace past {MAX_TRACE_STEPS} unrolled steps in all \
                 (loops nested in loops?)"
            ),
        ));
    }
    Ok(())
}

/// [`unroll_limit`], then [`charge`]: a node about to trace `count` steps.
pub(crate) fn unrolled(n: &Node, attr: &str, what: &str, count: usize) -> Result<usize> {
    unroll_limit(n, attr, what, count)?;
    charge(n, attr, what, count)?;
    Ok(count)
}
