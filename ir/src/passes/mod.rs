//! Graph passes. Each pass rebuilds the graph in one forward scan (nodes are
//! in topological order, so no recursion is ever needed) and [`simplify`] is
//! the whole pipeline as one straight function of named passes.

mod cse;
mod dce;
mod fold;
mod rewrite;

pub use cse::cse;
pub use dce::dce;
pub use fold::fold_constants;

use crate::error::IrError;
use crate::graph::Graph;
use crate::verify::verify;

/// Runs the simplification pipeline. With `check`, the verifier runs after
/// every pass (tests and debug builds turn it on) so a broken pass is caught
/// at the pass, not three passes later.
pub fn simplify(g: &Graph, check: bool) -> Result<Graph, IrError> {
    let step = |g: Graph, pass: &str| -> Result<Graph, IrError> {
        if check {
            verify(&g).map_err(|e| IrError::Verify(format!("after {pass}: {e}")))?;
        }
        Ok(g)
    };
    // Fold first: it turns constant subtrees and identities (x*1, reshape to
    // the same shape) into plain references, which exposes more sharing.
    let g = step(fold_constants(g)?, "fold_constants")?;
    // Then merge identical nodes, so later consumers see one value.
    let g = step(cse(&g), "cse")?;
    // Last, drop what no output needs (folding and CSE orphan nodes).
    let g = step(dce(&g), "dce")?;
    Ok(g)
}
