//! Dead-code elimination: keeps the nodes the outputs depend on, plus every
//! `Input` and `Param` (they are the graph's calling convention).

use super::rewrite::Rewriter;
use crate::graph::{Graph, NodeId, Op};

/// Removes nodes no output needs.
pub fn dce(g: &Graph) -> Graph {
    let mut live = vec![false; g.len()];
    for &o in &g.outputs {
        live[o.index()] = true;
    }
    // Reverse scan: users come after operands, so one pass marks everything.
    for id in g.ids().collect::<Vec<_>>().into_iter().rev() {
        let op = &g.node(id).op;
        if matches!(op, Op::Input { .. } | Op::Param { .. }) {
            live[id.index()] = true;
        }
        if live[id.index()] {
            for operand in op.operands() {
                live[operand.index()] = true;
            }
        }
    }
    let mut rw = Rewriter::new(g);
    for id in g.ids() {
        let new_id = if live[id.index()] {
            let op = rw.mapped_op(id);
            rw.emit(op, g.node(id).ty)
        } else {
            NodeId(u32::MAX) // never read: no live node refers to it
        };
        rw.bind(new_id);
    }
    rw.finish()
}
