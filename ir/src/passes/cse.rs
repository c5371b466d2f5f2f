//! Common-subexpression elimination by hash-consing: two nodes with the same
//! op (same operands after renaming, same attributes) are one node. Inputs
//! and params never collide because their indices differ.

use super::rewrite::Rewriter;
use crate::graph::{Graph, NodeId, Op};
use ahash::AHashMap;

/// Merges structurally identical nodes.
pub fn cse(g: &Graph) -> Graph {
    let mut rw = Rewriter::new(g);
    let mut seen: AHashMap<Op, NodeId> = AHashMap::new();
    for id in g.ids() {
        let op = rw.mapped_op(id);
        // Constants are compared by table index, which differs per constant;
        // they are merged by value in `fold_constants` when small.
        let new_id = match seen.get(&op) {
            Some(&existing) if !matches!(op, Op::Constant { .. }) => existing,
            _ => {
                let n = rw.emit(op.clone(), g.node(id).ty);
                seen.insert(op, n);
                n
            }
        };
        rw.bind(new_id);
    }
    rw.finish()
}
