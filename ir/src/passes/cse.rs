//! Common-subexpression elimination by hash-consing: two nodes with the same
//! op (same operands after renaming, same attributes) are one node. Inputs
//! and params never collide because their indices differ. Two constants of
//! at most [`VALUE_KEY_LIMIT`] elements with the same type and bytes are one
//! node too: each traced `slice_assign` or `arange` makes its own small
//! index constant, and merging them lets everything computed from them
//! merge (a decode step's twelve layers shared none of their cache index
//! lines).

use super::rewrite::Rewriter;
use crate::graph::{Graph, NodeId, Op};
use crate::shape::TensorType;
use ahash::AHashMap;

/// Constants up to this many elements are compared by value; larger ones
/// (captured weights) only by identity, so a pass never hashes megabytes.
const VALUE_KEY_LIMIT: usize = 4096;

/// What makes two nodes one.
#[derive(PartialEq, Eq, Hash)]
enum Key {
    /// Any op but a small constant: the op itself.
    Op(Op),
    /// A small constant: its type and little-endian bytes.
    Value(TensorType, Vec<u8>),
}

/// Merges structurally identical nodes.
pub fn cse(g: &Graph) -> Graph {
    let mut rw = Rewriter::new(g);
    let mut seen: AHashMap<Key, NodeId> = AHashMap::new();
    for id in g.ids() {
        let op = rw.mapped_op(id);
        let key = match op {
            Op::Constant { index, ty } => g
                .constant(index)
                .filter(|c| c.ty().shape.numel() <= VALUE_KEY_LIMIT)
                .and_then(|c| c.buffer().to_le_bytes().ok())
                .map(|bytes| Key::Value(ty, bytes)),
            _ => Some(Key::Op(op.clone())),
        };
        let new_id = match key.as_ref().and_then(|k| seen.get(k)) {
            Some(&existing) => existing,
            None => {
                let n = rw.emit(op, g.node(id).ty);
                if let Some(k) = key {
                    seen.insert(k, n);
                }
                n
            }
        };
        rw.bind(new_id);
    }
    rw.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::{Array, Buffer};
    use crate::error::IrError;
    use crate::graph::BinaryOp;
    use crate::shape::Shape;
    use crate::DType;

    fn constant(g: &mut Graph, v: Vec<f32>) -> Result<NodeId, IrError> {
        let shape = Shape::new(&[v.len()])?;
        Ok(g.add_constant(Array::new(shape, Buffer::F32(v))?))
    }

    /// Equal small constants merge, and so do the ops on them; constants
    /// that differ in one bit (`-0.0` against `0.0`) stay apart.
    #[test]
    fn equal_small_constants_merge_by_value() -> Result<(), IrError> {
        let mut g = Graph::new();
        let ty = TensorType::new(DType::F32, Shape::new(&[3])?);
        let x = g.add(Op::Input { index: 0, ty })?;
        let values = [
            [1.0, 2.0, 3.0],
            [1.0, 2.0, 3.0],
            [1.0, -0.0, 3.0],
            [1.0, 0.0, 3.0],
        ];
        for v in values {
            let c = constant(&mut g, v.to_vec())?;
            let sum = g.add(Op::Binary(BinaryOp::Add, x, c))?;
            g.outputs.push(sum);
        }
        let h = cse(&g);
        assert_eq!(h.outputs[0], h.outputs[1]);
        assert_ne!(h.outputs[0], h.outputs[2]);
        assert_ne!(h.outputs[2], h.outputs[3]);
        assert_eq!(h.constants().len(), 3);
        // The merged graph computes what the original did.
        let xv = Array::new(ty.shape, Buffer::F32(vec![0.5, -1.0, 2.0]))?;
        let run = |g: &Graph| crate::interp::run(g, std::slice::from_ref(&xv), &[]);
        assert_eq!(run(&g)?, run(&h)?);
        Ok(())
    }

    /// A constant past the limit is kept apart even when equal.
    #[test]
    fn large_constants_merge_only_by_identity() -> Result<(), IrError> {
        let mut g = Graph::new();
        let n = VALUE_KEY_LIMIT + 1;
        let a = constant(&mut g, (0..n).map(|i| i as f32).collect())?;
        let b = constant(&mut g, (0..n).map(|i| i as f32).collect())?;
        g.outputs = vec![a, b];
        assert_eq!(cse(&g).constants().len(), 2);
        Ok(())
    }
}
