//! The verifier. It checks every invariant a pass may rely on:
//! - operands refer to earlier nodes (the arena is in topological order);
//! - each node's stored type equals the type inference gives for its op;
//! - `Input` indices are 0..n with no gaps or repeats, and likewise `Param`;
//! - `Constant` nodes name an existing constant of the same type;
//! - outputs name existing nodes.
//!
//! A failure on a graph that a pass produced is always a tilejit bug.

use crate::error::IrError;
use crate::graph::{Graph, Op};
use crate::infer::infer;

/// Checks `g`; the error lists every violation found.
pub fn verify(g: &Graph) -> Result<(), IrError> {
    let mut problems = Vec::new();
    let mut inputs = Vec::new();
    let mut params = Vec::new();
    for id in g.ids() {
        let node = g.node(id);
        if let Some(bad) = node.op.operands().into_iter().find(|o| *o >= id) {
            problems.push(format!("{id}: operand {bad} is not defined before its use"));
            continue;
        }
        match infer(g, &node.op) {
            Ok(ty) if ty == node.ty => {}
            Ok(ty) => problems.push(format!(
                "{id}: stored type {} but the op gives {ty}",
                node.ty
            )),
            Err(e) => problems.push(format!("{id}: {e}")),
        }
        match node.op {
            Op::Input { index, .. } => inputs.push(index),
            Op::Param { index, .. } => params.push(index),
            _ => {}
        }
    }
    for (what, mut idx) in [("input", inputs), ("param", params)] {
        idx.sort_unstable();
        if idx.iter().enumerate().any(|(i, &x)| x as usize != i) {
            problems.push(format!("{what} indices {idx:?} are not 0..{}", idx.len()));
        }
    }
    for o in &g.outputs {
        if o.index() >= g.len() {
            problems.push(format!("output {o} does not exist"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(IrError::Verify(problems.join("; ")))
    }
}
