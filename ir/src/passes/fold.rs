//! Constant folding and exact algebraic identities.
//!
//! Folding evaluates an op whose operands are all known values with the
//! reference interpreter itself, so a folded graph computes bit-for-bit what
//! the unfolded one would. Elementwise ops on `Full` operands fold at any
//! size (one element is computed); other ops on constants fold only when the
//! result is small, so folding never bloats a graph.
//!
//! Identities are applied only where they are exact in IEEE arithmetic,
//! including for NaN, infinities and signed zeros: `x*1`, `x/1`, `x-(+0)`,
//! `x+(-0)` (and `x+0`, `x-0` on integers), `--x`, and no-op
//! reshape/broadcast/permute/cast. `x+(+0)` is not an identity (`-0+0 = +0`).

use super::rewrite::Rewriter;
use crate::array::Array;
use crate::dtype::Lit;
use crate::error::IrError;
use crate::graph::{BinaryOp, Graph, NodeId, Op, UnaryOp};
use crate::interp;
use crate::shape::{Shape, TensorType};

/// Results up to this many elements may be folded into a constant table entry.
const FOLD_LIMIT: usize = 4096;

/// Folds constant subgraphs and applies exact identities.
pub fn fold_constants(g: &Graph) -> Result<Graph, IrError> {
    let mut rw = Rewriter::new(g);
    for id in g.ids() {
        let ty = g.node(id).ty;
        let op = rw.mapped_op(id);
        // Merge reshape chains first, so `reshape(reshape(x))` back to x's
        // own shape is then seen as the identity it is.
        let op = merged_reshape(&rw.new, &op).unwrap_or(op);
        let new_id = if let Some(same) = identity(&rw.new, &op, ty) {
            same
        } else if let Some(value) = fold(&rw.new, &op, ty)? {
            rw.new.add_constant(value)
        } else {
            rw.emit(op, ty)
        };
        rw.bind(new_id);
    }
    Ok(rw.finish())
}

fn full_value(g: &Graph, id: NodeId) -> Option<Lit> {
    match g.node(id).op {
        Op::Full { value, .. } => Some(value),
        _ => None,
    }
}

fn is_value(g: &Graph, id: NodeId, want: f64, sign_negative: bool) -> bool {
    match full_value(g, id) {
        Some(Lit::Float(v)) => v == want && v.is_sign_negative() == sign_negative,
        Some(Lit::Int(v)) => v as f64 == want,
        _ => false,
    }
}

/// If `op` computes exactly its operand, that operand.
fn identity(g: &Graph, op: &Op, ty: TensorType) -> Option<NodeId> {
    let same_ty = |x: NodeId| (g.ty(x) == ty).then_some(x);
    let int = ty.dtype.is_int();
    match *op {
        Op::Reshape(x, _) | Op::Broadcast(x, _) | Op::Cast(x, _) => same_ty(x),
        Op::Permute(x, p) if p.is_identity() => Some(x),
        Op::Slice(x, ..) => same_ty(x),
        Op::Unary(UnaryOp::Neg, x) => match g.node(x).op {
            Op::Unary(UnaryOp::Neg, y) => Some(y),
            _ => None,
        },
        Op::Binary(BinaryOp::Mul, a, b) if is_value(g, b, 1.0, false) => Some(a),
        Op::Binary(BinaryOp::Mul, a, b) if is_value(g, a, 1.0, false) => Some(b),
        Op::Binary(BinaryOp::Div, a, b) if is_value(g, b, 1.0, false) => Some(a),
        Op::Binary(BinaryOp::Sub, a, b) if is_value(g, b, 0.0, false) => Some(a),
        Op::Binary(BinaryOp::Add, a, b) if is_value(g, b, 0.0, !int) => Some(a),
        Op::Binary(BinaryOp::Add, a, b) if is_value(g, a, 0.0, !int) => Some(b),
        _ => None,
    }
}

/// `reshape(reshape(x))` is one reshape.
fn merged_reshape(g: &Graph, op: &Op) -> Option<Op> {
    match *op {
        Op::Reshape(x, s) => match g.node(x).op {
            Op::Reshape(y, _) => Some(Op::Reshape(y, s)),
            _ => None,
        },
        _ => None,
    }
}

fn known_value(g: &Graph, id: NodeId) -> Option<Array> {
    match g.node(id).op {
        Op::Full { value, ty } if ty.shape.numel() <= FOLD_LIMIT => Array::full(ty, value).ok(),
        Op::Constant { index, .. } => g.constant(index).cloned(),
        _ => None,
    }
}

/// Evaluates `op` if all its operands are known and the result is worth folding.
fn fold(g: &Graph, op: &Op, ty: TensorType) -> Result<Option<Array>, IrError> {
    let operands = op.operands();
    if operands.is_empty() {
        return Ok(None);
    }
    // Elementwise and data-movement ops of splats are splats: compute one element.
    if let Some(values) = operands
        .iter()
        .map(|&o| full_value(g, o))
        .collect::<Option<Vec<_>>>()
    {
        let one = match *op {
            Op::Reshape(..) | Op::Broadcast(..) | Op::Permute(..) | Op::Slice(..) => {
                Some(values[0])
            }
            Op::Unary(..)
            | Op::Binary(..)
            | Op::Compare(..)
            | Op::Select(..)
            | Op::Cast(..)
            | Op::Bitcast(..) => {
                let mut mini = Graph::new();
                let ids = operands
                    .iter()
                    .zip(&values)
                    .map(|(&o, &v)| {
                        let t = TensorType::scalar(g.ty(o).dtype);
                        mini.add(Op::Full { value: v, ty: t })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let mut k = 0;
                let scalar_op = op.map_operands(|_| {
                    k += 1;
                    ids[k - 1]
                });
                let out = mini.add(scalar_op)?;
                mini.outputs.push(out);
                Some(interp::run(&mini, &[], &[])?[0].buffer().get(0))
            }
            _ => None,
        };
        if let Some(value) = one {
            return Ok(Some(Array::full(ty, value)?));
        }
    }
    if ty.shape.numel() > FOLD_LIMIT {
        return Ok(None);
    }
    let Some(arrays) = operands
        .iter()
        .map(|&o| known_value(g, o))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    let mut mini = Graph::new();
    let ids: Vec<NodeId> = arrays.into_iter().map(|a| mini.add_constant(a)).collect();
    let mut k = 0;
    let op2 = op.map_operands(|_| {
        k += 1;
        ids[k - 1]
    });
    let out = mini.add(op2)?;
    mini.outputs.push(out);
    let mut result = interp::run(&mini, &[], &[])?;
    Ok(result
        .pop()
        .filter(|a| a.shape() == &ty.shape || ty.shape == Shape::SCALAR))
}
