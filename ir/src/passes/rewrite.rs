//! `Rewriter`: the shared skeleton of the forward-scan passes. It copies
//! nodes into a fresh graph while keeping a map from old ids to new ones.

use crate::graph::{Graph, Node, NodeId, Op};

pub(crate) struct Rewriter<'a> {
    pub old: &'a Graph,
    pub new: Graph,
    map: Vec<NodeId>,
}

impl<'a> Rewriter<'a> {
    pub fn new(old: &'a Graph) -> Rewriter<'a> {
        Rewriter {
            old,
            new: Graph::new(),
            map: Vec::with_capacity(old.len()),
        }
    }

    /// The op of old node `id` with operands renamed into the new graph.
    pub fn mapped_op(&self, id: NodeId) -> Op {
        self.old.node(id).op.map_operands(|o| self.map[o.index()])
    }

    /// Records that old node `id` is `new_id` in the new graph (call once per
    /// old node, in order).
    pub fn bind(&mut self, new_id: NodeId) {
        self.map.push(new_id);
    }

    /// Copies a node (with a mapped op) into the new graph. Constants are
    /// re-added so the new graph owns its constant table.
    pub fn emit(&mut self, op: Op, ty: crate::shape::TensorType) -> NodeId {
        if let Op::Constant { index, .. } = op {
            if let Some(c) = self.old.constant(index) {
                return self.new.add_constant(c.clone());
            }
        }
        self.new.push_unchecked(Node { op, ty })
    }

    pub fn finish(mut self) -> Graph {
        self.new.outputs = self
            .old
            .outputs
            .iter()
            .map(|o| self.map[o.index()])
            .collect();
        self.new
    }
}
