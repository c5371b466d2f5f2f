//! The graph IR: an append-only arena of nodes in topological order (every
//! operand id is smaller than its user's id), addressed by typed `NodeId`s.
//! Ops are plain enums holding their operands; a node's type is inferred from
//! its op when it is added, so a `Graph` built through [`Graph::add`] is
//! well-typed by construction.

use crate::array::Array;
use crate::dtype::{DType, Lit};
use crate::error::IrError;
use crate::infer::infer;
use crate::shape::{Shape, TensorType};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Index of a node in its graph.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The index as usize.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

pub use crate::ops::{BinaryOp, CmpOp, ReduceOp, UnaryOp};

/// A set of axes as a bitmask (rank is at most 8).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
pub struct Axes(pub u8);

impl Axes {
    /// Whether `axis` is in the set.
    pub fn contains(self, axis: usize) -> bool {
        axis < 8 && self.0 & (1 << axis) != 0
    }
    /// The axes in increasing order.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..8).filter(move |&a| self.contains(a))
    }
    /// A set of the given (already normalised) axes.
    pub fn from_axes(axes: &[usize]) -> Axes {
        Axes(axes.iter().fold(0u8, |m, &a| m | (1 << a)))
    }
}

/// An operation. Operands are node ids; everything else an op needs (target
/// shape, dtype, literal) is held inline, so the result type is a function of
/// the op and its operands' types.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum Op {
    /// Tensor argument number `index` of the graph.
    Input {
        /// Position among the graph's tensor inputs.
        index: u32,
        /// Its type.
        ty: TensorType,
    },
    /// Runtime scalar parameter number `index` (rank 0). Changing its value
    /// does not change the graph.
    Param {
        /// Position among the graph's params.
        index: u32,
        /// Its dtype.
        dtype: DType,
    },
    /// A tensor whose every element is `value`.
    Full {
        /// The value, already converted to `ty.dtype`.
        value: Lit,
        /// Its type.
        ty: TensorType,
    },
    /// Constant number `index` of the graph's constant table.
    Constant {
        /// Index into [`Graph::constants`].
        index: u32,
        /// Its type (equal to the constant's).
        ty: TensorType,
    },
    /// Elementwise unary function.
    Unary(UnaryOp, NodeId),
    /// Elementwise binary function of operands of equal type.
    Binary(BinaryOp, NodeId, NodeId),
    /// Elementwise comparison of operands of equal type, giving `bool`.
    Compare(CmpOp, NodeId, NodeId),
    /// `cond ? on_true : on_false`, elementwise; `cond` is bool, all shapes equal.
    Select(NodeId, NodeId, NodeId),
    /// Reduction over `axes`; reduced dims stay in the result with size 1.
    Reduce(ReduceOp, NodeId, Axes),
    /// `[m,k]x[k,n] -> [m,n]` or `[b,m,k]x[b,k,n] -> [b,m,n]`.
    MatMul(NodeId, NodeId),
    /// Same elements, new shape of equal element count.
    Reshape(NodeId, Shape),
    /// Axes reordered: result dim `i` is operand dim `perm[i]`.
    Permute(NodeId, Perm),
    /// numpy `broadcast_to`.
    Broadcast(NodeId, Shape),
    /// Elementwise dtype conversion.
    Cast(NodeId, DType),
    /// Each element's bits read as another dtype of the same size (a
    /// float's bits as an integer and back: ONNX `BitCast`).
    Bitcast(NodeId, DType),
    /// A window of the operand: result element `i` is operand element
    /// `start + i` in every dim; the result shape (the node's type) is the
    /// second `Shape`. Fused consumers read it as a strided view (no copy).
    Slice(NodeId, Shape, Shape),
    /// The operands joined along `axis`: equal dtypes and ranks, equal dims
    /// but `axis`. Its buffer is written in place by one kernel per operand.
    Concat(NodeId, NodeId, u8),
    /// numpy `take_along_axis(x, index, axis)`: result element `[.., j, ..]`
    /// is `x[.., index[.., j, ..], ..]` (the index replaces the `axis`
    /// coordinate). `index` is i32 or i64 of the result's shape, whose
    /// dims other than `axis` equal the operand's; an index outside
    /// `0..x.shape[axis]` is a run-time error, never a read.
    Gather(NodeId, NodeId, u8),
    /// A 2-D convolution as one GEMM over the image's windows (an implicit
    /// im2col: the windows are addressed, never copied): image `x`
    /// `[n, c, h, w]` and weights `w` `[c/g*kh*kw, o]` (OIHW weights as
    /// `[o, c/g*kh*kw]`, transposed; `g` the window's groups) give
    /// `[n, oh, ow, o]` (NHWC: the permute to NCHW after it, and any
    /// elementwise ops after that, fuse as its kernel's epilogue). Result
    /// `[b, y, x, j]`, read as `[b, p, j]`
    /// with `p = y*ow + x`, is the sum over `q` of
    /// `cols[b, p, q] * w[q, j]`, where row `p = y*ow + x` of `cols` is the
    /// window at output position `(y, x)` over the input channels of
    /// output channel `j`'s group (`j / (o/g)`), channel-major then
    /// row-major, zero outside the image.
    /// Floats only (f32, f16, bf16: the cube's types).
    Conv(NodeId, NodeId, Window),
    /// Pooling: `reduce` (`max`, `min` or `sum`) over each window of an NCHW image
    /// `[n, c, h, w]`, giving `[n, c, oh, ow]`. Taps in the padding are left
    /// out (max pooling's -inf, sum pooling's zero), so every window must
    /// hold an element of the image; the window has one group. Its kernels
    /// read the taps as strided views of the image, one kernel per region
    /// of output positions whose windows leave the image on the same sides.
    Pool(ReduceOp, NodeId, Window),
}

/// A 2-D convolution's window (torch's `conv2d` options, ONNX's `Conv`
/// attributes): `kh x kw` taps spaced by `dilation`, moved by `stride`,
/// over an image zero-padded by `pad`, with the channels split into
/// `groups` (each output channel reads only its group's input channels).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct Window {
    /// Window height (taps).
    pub kh: u32,
    /// Window width (taps).
    pub kw: u32,
    /// Step between windows, `(rows, columns)` (each at least 1).
    pub stride: (u32, u32),
    /// Zeros added `[top, left, bottom, right]` (ONNX's `pads` order).
    pub pad: [u32; 4],
    /// Step between taps, `(rows, columns)` (each at least 1).
    pub dilation: (u32, u32),
    /// Channel groups (at least 1; dividing the in and out channels).
    pub groups: u32,
}

impl Window {
    /// A `kh x kw` window with one stride and one padding both ways, no
    /// dilation, one group.
    pub fn square(kh: u32, kw: u32, stride: u32, pad: u32) -> Window {
        Window {
            kh,
            kw,
            stride: (stride, stride),
            pad: [pad; 4],
            dilation: (1, 1),
            groups: 1,
        }
    }

    /// The fields as the text forms list them: `kh, kw, sh, sw, top,
    /// left, bottom, right, dh, dw, groups`.
    pub fn to_list(&self) -> [u32; 11] {
        let (p, (sh, sw), (dh, dw)) = (self.pad, self.stride, self.dilation);
        [
            self.kh,
            self.kw,
            sh,
            sw,
            p[0],
            p[1],
            p[2],
            p[3],
            dh,
            dw,
            self.groups,
        ]
    }

    /// The text forms' list: the short `kh, kw, stride, pad` for a
    /// [`Window::is_square`] window, else [`Window::to_list`].
    pub fn text_list(&self) -> Vec<u32> {
        if self.is_square() {
            vec![self.kh, self.kw, self.stride.0, self.pad[0]]
        } else {
            self.to_list().to_vec()
        }
    }

    /// The inverse of [`Window::to_list`]; also takes the short form
    /// `kh, kw, stride, pad`. `None` for another length or a value over
    /// `u32`.
    pub fn from_list(v: &[usize]) -> Option<Window> {
        let f = |x: usize| u32::try_from(x).ok();
        match *v {
            [kh, kw, s, p] => Some(Window::square(f(kh)?, f(kw)?, f(s)?, f(p)?)),
            [kh, kw, sh, sw, t, l, b, r, dh, dw, g] => Some(Window {
                kh: f(kh)?,
                kw: f(kw)?,
                stride: (f(sh)?, f(sw)?),
                pad: [f(t)?, f(l)?, f(b)?, f(r)?],
                dilation: (f(dh)?, f(dw)?),
                groups: f(g)?,
            }),
            _ => None,
        }
    }

    /// The output height and width over an `h x w` image, or `None` when
    /// the window is empty, a stride, dilation or the group count 0, or
    /// the (dilated) window does not fit the padded image.
    pub fn out(&self, h: usize, w: usize) -> Option<(usize, usize)> {
        let one = |n: usize, k: u32, s: u32, d: u32, p0: u32, p1: u32| {
            let (k, s, d) = (k as usize, s as usize, d as usize);
            let padded = n.checked_add(p0 as usize)?.checked_add(p1 as usize)?;
            let span = k.checked_sub(1)?.checked_mul(d)?.checked_add(1)?;
            if k == 0 || s == 0 || d == 0 || span > padded {
                return None;
            }
            Some((padded - span) / s + 1)
        };
        if self.groups == 0 {
            return None;
        }
        let p = self.pad;
        Some((
            one(h, self.kh, self.stride.0, self.dilation.0, p[0], p[2])?,
            one(w, self.kw, self.stride.1, self.dilation.1, p[1], p[3])?,
        ))
    }

    /// The window's element count (`kh * kw`).
    pub fn size(&self) -> usize {
        self.kh as usize * self.kw as usize
    }

    /// Whether it is a `square` window (one stride, one padding on every
    /// side, no dilation, one group): the text forms' short list.
    pub fn is_square(&self) -> bool {
        let p = self.pad;
        self.stride.0 == self.stride.1
            && p.iter().all(|&x| x == p[0])
            && self.dilation == (1, 1)
            && self.groups == 1
    }

    /// The image element (row, column) that tap `(i, j)` of the window
    /// at output position `(y, x)` reads, or `None` in the padding.
    pub fn tap(&self, (y, x): (usize, usize), (i, j): (usize, usize)) -> Option<(usize, usize)> {
        let iy = (y * self.stride.0 as usize + i * self.dilation.0 as usize)
            .checked_sub(self.pad[0] as usize)?;
        let ix = (x * self.stride.1 as usize + j * self.dilation.1 as usize)
            .checked_sub(self.pad[1] as usize)?;
        Some((iy, ix))
    }

    /// Along `axis` (0: rows, 1: columns) of an image `n` long, the output
    /// positions split into runs whose windows hold the same taps inside
    /// the image (a tap's position grows with its index, so each window's
    /// inside taps are one range): how pooling skips the padding. `None`
    /// when the window does not fit, some window lies wholly in the
    /// padding, or there would be more than [`MAX_TAP_RUNS`] runs. The
    /// work is per run, not per position: a hostile width of 2^32 took
    /// seconds when each position was visited.
    pub fn tap_runs(&self, axis: usize, n: usize) -> Option<Vec<TapRun>> {
        let (k, s, d, p0, p1) = if axis == 0 {
            (
                self.kh,
                self.stride.0,
                self.dilation.0,
                self.pad[0],
                self.pad[2],
            )
        } else {
            (
                self.kw,
                self.stride.1,
                self.dilation.1,
                self.pad[1],
                self.pad[3],
            )
        };
        let (k, s, d, p0) = (k as usize, s as usize, d as usize, p0 as usize);
        let padded = n.checked_add(p0)?.checked_add(p1 as usize)?;
        let span = k.checked_sub(1)?.checked_mul(d)?.checked_add(1)?;
        if s == 0 || d == 0 || span > padded {
            return None;
        }
        let o = (padded - span) / s + 1;
        // Tap `i` of position `y` reads `y*s + i*d - p0`, inside when in
        // `0..n`: the first inside tap is `ceil((p0 - y*s) / d)` while
        // `y*s < p0`, then 0; the end is `min(k, ceil((n + p0 - y*s) /
        // d))`. Both only fall as `y` grows, so a run lasts until the
        // next position where either would change.
        let room = n + p0;
        let mut runs: Vec<TapRun> = Vec::new();
        let mut y = 0;
        while y < o {
            let at = y.checked_mul(s)?;
            let first = p0.saturating_sub(at).div_ceil(d);
            let end = match room.checked_sub(at) {
                Some(r) if r > 0 => ((r - 1) / d + 1).min(k),
                _ => 0,
            };
            if first >= end || runs.len() == MAX_TAP_RUNS {
                return None;
            }
            // The last position with this `first`: `p0 - y*s > (first -
            // 1) * d` still holds (for `first` 0, every later one).
            let last_first = match first {
                0 => o - 1,
                f => (p0 - (f - 1) * d - 1) / s,
            };
            // The last with this `end`: `ceil((room - y*s) / d) >= end`
            // still holds, that is `y*s <= room - (end - 1) * d - 1`.
            let last_end = (room - (end - 1) * d - 1) / s;
            let last = last_first.min(last_end).min(o - 1);
            runs.push(TapRun {
                start: y,
                len: last - y + 1,
                first,
                end,
            });
            y = last + 1;
        }
        Some(runs)
    }
}

/// The most runs [`Window::tap_runs`] gives along one axis (each pair of
/// runs is a kernel of its own; a window of a few taps makes at most a
/// few runs on each side).
pub const MAX_TAP_RUNS: usize = 64;

/// Output positions `start..start + len` along one axis of a pooling whose
/// windows hold taps `first..end` inside the image ([`Window::tap_runs`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TapRun {
    /// The first output position.
    pub start: usize,
    /// How many positions.
    pub len: usize,
    /// The first tap inside the image.
    pub first: usize,
    /// One past the last tap inside the image.
    pub end: usize,
}

/// A permutation of up to 8 axes.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct Perm {
    axes: [u8; 8],
    len: u8,
}

impl Perm {
    /// A permutation of `0..perm.len()`; fails if it is not one.
    pub fn new(perm: &[usize]) -> Result<Perm, IrError> {
        let bad = || IrError::Permutation {
            perm: perm.to_vec(),
            rank: perm.len(),
        };
        if perm.len() > 8 {
            return Err(bad());
        }
        let mut seen = [false; 8];
        let mut axes = [0u8; 8];
        for (i, &p) in perm.iter().enumerate() {
            if p >= perm.len() || seen[p] {
                return Err(bad());
            }
            seen[p] = true;
            axes[i] = p as u8;
        }
        Ok(Perm {
            axes,
            len: perm.len() as u8,
        })
    }
    /// The permutation as indices.
    pub fn as_vec(&self) -> Vec<usize> {
        self.axes[..self.len as usize]
            .iter()
            .map(|&a| a as usize)
            .collect()
    }
    /// Number of axes.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// True for the permutation of zero axes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// True if it maps every axis to itself.
    pub fn is_identity(&self) -> bool {
        (0..self.len()).all(|i| self.axes[i] as usize == i)
    }
}

impl Op {
    /// The operands, in order.
    pub fn operands(&self) -> Vec<NodeId> {
        match *self {
            Op::Input { .. } | Op::Param { .. } | Op::Full { .. } | Op::Constant { .. } => vec![],
            Op::Unary(_, x) | Op::Reduce(_, x, _) | Op::Reshape(x, _) => vec![x],
            Op::Pool(_, x, _) => vec![x],
            Op::Permute(x, _) | Op::Broadcast(x, _) | Op::Cast(x, _) | Op::Bitcast(x, _) => vec![x],
            Op::Slice(x, ..) => vec![x],
            Op::Binary(_, a, b) | Op::Compare(_, a, b) | Op::MatMul(a, b) => vec![a, b],
            Op::Concat(a, b, _) | Op::Gather(a, b, _) | Op::Conv(a, b, _) => vec![a, b],
            Op::Select(c, a, b) => vec![c, a, b],
        }
    }

    /// The same op with every operand passed through `f`.
    pub fn map_operands(&self, mut f: impl FnMut(NodeId) -> NodeId) -> Op {
        match self.clone() {
            op @ (Op::Input { .. } | Op::Param { .. } | Op::Full { .. } | Op::Constant { .. }) => {
                op
            }
            Op::Unary(u, x) => Op::Unary(u, f(x)),
            Op::Binary(b, x, y) => Op::Binary(b, f(x), f(y)),
            Op::Compare(c, x, y) => Op::Compare(c, f(x), f(y)),
            Op::Select(c, x, y) => Op::Select(f(c), f(x), f(y)),
            Op::Reduce(r, x, a) => Op::Reduce(r, f(x), a),
            Op::MatMul(x, y) => Op::MatMul(f(x), f(y)),
            Op::Reshape(x, s) => Op::Reshape(f(x), s),
            Op::Permute(x, p) => Op::Permute(f(x), p),
            Op::Broadcast(x, s) => Op::Broadcast(f(x), s),
            Op::Cast(x, d) => Op::Cast(f(x), d),
            Op::Bitcast(x, d) => Op::Bitcast(f(x), d),
            Op::Slice(x, start, shape) => Op::Slice(f(x), start, shape),
            Op::Concat(x, y, axis) => Op::Concat(f(x), f(y), axis),
            Op::Gather(x, i, axis) => Op::Gather(f(x), f(i), axis),
            Op::Conv(x, w, win) => Op::Conv(f(x), f(w), win),
            Op::Pool(r, x, win) => Op::Pool(r, f(x), win),
        }
    }

    /// True for ops without operands that produce a known value (`Full`, `Constant`).
    pub fn is_constant(&self) -> bool {
        matches!(self, Op::Full { .. } | Op::Constant { .. })
    }
}

/// One node: its op and its (inferred) result type.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct Node {
    /// The operation.
    pub op: Op,
    /// The result type.
    pub ty: TensorType,
}

/// A dataflow graph of tensor ops with numbered tensor inputs, scalar
/// params, a constant table and an ordered list of outputs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Graph {
    nodes: Vec<Node>,
    /// The graph's results, in order. May repeat a node, may name an input.
    pub outputs: Vec<NodeId>,
    constants: Vec<ConstData>,
}

/// A constant tensor embedded in a graph. Serialised as its literals.
#[derive(Clone, Debug, PartialEq)]
pub struct ConstData(pub Array);

impl Serialize for ConstData {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let b = self.0.buffer();
        let lits: Vec<Lit> = (0..b.len()).map(|i| b.get(i)).collect();
        (self.0.ty(), lits).serialize(s)
    }
}

impl<'de> Deserialize<'de> for ConstData {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ConstData, D::Error> {
        let (ty, lits): (TensorType, Vec<Lit>) = Deserialize::deserialize(d)?;
        let buf = crate::array::Buffer::from_lits(ty.dtype, lits.into_iter())
            .map_err(serde::de::Error::custom)?;
        Array::new(ty.shape, buf)
            .map(ConstData)
            .map_err(serde::de::Error::custom)
    }
}

/// The most nodes a traced graph holds: 2^21 (a few hundred MB of
/// nodes), far past real programs (GPT-2's decode step has ~1,200), so
/// that a trace that unrolls without end (a Python-style loop over a
/// huge dim, nested ONNX loops) fails instead of exhausting memory.
pub const MAX_NODES: usize = 1 << 21;

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Adds a node after inferring (and so checking) its type; an error
    /// once the graph holds [`MAX_NODES`].
    pub fn add(&mut self, op: Op) -> Result<NodeId, IrError> {
        self.add_within(op, MAX_NODES)
    }

    /// [`Graph::add`] with a limit of `max` nodes.
    fn add_within(&mut self, op: Op, max: usize) -> Result<NodeId, IrError> {
        if self.nodes.len() >= max {
            return Err(IrError::GraphTooLarge { max });
        }
        let ty = infer(self, &op)?;
        Ok(self.push_unchecked(Node { op, ty }))
    }

    /// Appends a node without inference. Passes that rebuild a verified graph
    /// use it; the verifier catches misuse.
    pub fn push_unchecked(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        NodeId(self.nodes.len() as u32 - 1)
    }

    /// Adds a constant tensor and a node that reads it.
    pub fn add_constant(&mut self, value: Array) -> NodeId {
        let ty = value.ty();
        if let Some(lit) = value.splat_value() {
            return self.push_unchecked(Node {
                op: Op::Full { value: lit, ty },
                ty,
            });
        }
        self.constants.push(ConstData(value));
        let index = self.constants.len() as u32 - 1;
        self.push_unchecked(Node {
            op: Op::Constant { index, ty },
            ty,
        })
    }

    /// The node with this id. Panics on an id from another graph (a bug).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// The type of a node.
    pub fn ty(&self, id: NodeId) -> TensorType {
        self.nodes[id.index()].ty
    }

    /// All nodes, in id (= topological) order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Node ids in order.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> {
        (0..self.nodes.len() as u32).map(NodeId)
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True if the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The constant table.
    pub fn constants(&self) -> &[ConstData] {
        &self.constants
    }

    /// The value of constant `index`.
    pub fn constant(&self, index: u32) -> Option<&Array> {
        self.constants.get(index as usize).map(|c| &c.0)
    }

    /// Types of the tensor inputs, ordered by input index.
    pub fn input_types(&self) -> Vec<TensorType> {
        let mut v: Vec<(u32, TensorType)> = self
            .nodes
            .iter()
            .filter_map(|n| match n.op {
                Op::Input { index, ty } => Some((index, ty)),
                _ => None,
            })
            .collect();
        v.sort_by_key(|p| p.0);
        v.into_iter().map(|p| p.1).collect()
    }

    /// Dtypes of the scalar params, ordered by param index.
    pub fn param_types(&self) -> Vec<DType> {
        let mut v: Vec<(u32, DType)> = self
            .nodes
            .iter()
            .filter_map(|n| match n.op {
                Op::Param { index, dtype } => Some((index, dtype)),
                _ => None,
            })
            .collect();
        v.sort_by_key(|p| p.0);
        v.into_iter().map(|p| p.1).collect()
    }

    /// Counts nodes per op name, for summaries ("exp x1, add x3").
    pub fn op_names(&self) -> Vec<&'static str> {
        self.nodes
            .iter()
            .map(|n| crate::text::op_name(&n.op))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graph_refuses_nodes_past_its_limit() {
        let ty = TensorType::new(DType::F32, Shape::SCALAR);
        let full = Op::Full {
            value: crate::Lit::Float(1.0),
            ty,
        };
        // The limit itself, small (2^21 nodes would hold ~0.5 GB here).
        let mut g = Graph::new();
        for _ in 0..3 {
            g.add_within(full.clone(), 3).expect("below the limit");
        }
        let e = g.add_within(full, 3).expect_err("one past the limit");
        assert_eq!(e, IrError::GraphTooLarge { max: 3 });
        assert_eq!(e.kind(), crate::ErrorKind::Unsupported);
    }

    /// [`Window::tap_runs`] by its definition: every position visited.
    fn runs_by_position(w: &Window, n: usize) -> Option<Vec<TapRun>> {
        let (k, s, d, p0, p1) = (
            w.kw as usize,
            w.stride.1 as usize,
            w.dilation.1 as usize,
            w.pad[1] as usize,
            w.pad[3] as usize,
        );
        let span = (k - 1) * d + 1;
        if n + p0 + p1 < span {
            return None;
        }
        let o = (n + p0 + p1 - span) / s + 1;
        let mut runs: Vec<TapRun> = Vec::new();
        for y in 0..o {
            let inside = |i: usize| (y * s + i * d).checked_sub(p0).is_some_and(|x| x < n);
            let first = (0..k).find(|&i| inside(i))?;
            let end = (0..k).rfind(|&i| inside(i))? + 1;
            match runs.last_mut() {
                Some(r) if (r.first, r.end) == (first, end) => r.len += 1,
                _ => runs.push(TapRun {
                    start: y,
                    len: 1,
                    first,
                    end,
                }),
            }
        }
        Some(runs)
    }

    /// Runs found by jumping between changes equal runs found position by
    /// position, over small windows, strides, dilations and paddings.
    #[test]
    fn tap_runs_match_the_definition() {
        for k in 1..6u32 {
            for s in 1..4u32 {
                for d in 1..4u32 {
                    for (p0, p1) in [(0, 0), (1, 1), (2, 0), (0, 3), (4, 4), (7, 2)] {
                        for n in 1..24 {
                            let w = Window {
                                kh: 1,
                                kw: k,
                                stride: (1, s),
                                pad: [0, p0, 0, p1],
                                dilation: (1, d),
                                groups: 1,
                            };
                            let got = w.tap_runs(1, n).map(|r| {
                                r.iter()
                                    .map(|r| (r.start, r.len, r.first, r.end))
                                    .collect::<Vec<_>>()
                            });
                            let want = runs_by_position(&w, n).map(|r| {
                                r.iter()
                                    .map(|r| (r.start, r.len, r.first, r.end))
                                    .collect::<Vec<_>>()
                            });
                            assert_eq!(got, want, "k={k} s={s} d={d} pad=({p0},{p1}) n={n}");
                        }
                    }
                }
            }
        }
    }

    /// A width of 2^32 (a hostile file's) is two runs, found at once; a
    /// window that would need more than `MAX_TAP_RUNS` runs is refused.
    #[test]
    fn tap_runs_of_huge_or_many_edge_windows() {
        let w = Window::square(3, 3, 2, 1);
        let runs = w.tap_runs(1, 1 << 32).map(|r| r.len());
        assert_eq!(runs, Some(2));
        let wide = Window::square(200, 200, 1, 150);
        assert!(wide.tap_runs(1, 400).is_none());
    }
}
