//! Fusion: graph -> [`KernelProgram`].
//!
//! Every node is either *materialised* (it owns a buffer: inputs, constants,
//! graph outputs, what matmul operands read, and whatever the rules below
//! force) or *inlined* into the kernels that read it. Each materialised node
//! becomes one kernel whose expression is built by walking its operands:
//! - elementwise ops become expression nodes; broadcasts, transposes and
//!   reshapes that only add or drop size-1 dims become index maps (strides);
//! - a reduction over one axis becomes a `Reduce` stage when the kernel's
//!   inner dimension can be its axis (so row softmax and layernorm are one
//!   kernel each); otherwise it is materialised;
//! - a matmul whose only user is inlined here becomes the kernel's matmul and
//!   the rest of the expression its epilogue; its operands are read in
//!   place through one affine view each (a transposed weight, an attention
//!   head split, a slice, a batch broadcast), never copied per call;
//! - a slice is a window: its start moves the reading access's offset;
//! - a concat is always materialised, as one buffer written by one kernel
//!   per operand (each with its producer fused in) at that operand's
//!   offset; a concat whose only user is a concat along the same axis is
//!   flattened into it. An operand that needs a buffer for other readers
//!   anyway (a KV cache's updated layer, which attention reads) is written
//!   in place into its window when that window is contiguous, and its
//!   readers read it there: the concat copies nothing for it.
//!
//! Inlining recomputes a value in each kernel that reads it, which is free
//! for cheap ops. An expensive value (exp, tanh, ...) with several users is
//! never computed twice: if all its users are in one kernel it is kept in a
//! per-row scratch buffer, otherwise it is materialised. A value of more
//! than a few ops broadcast to a domain many times its size (a
//! `slice_assign` take line over a KV cache) is materialised too, not
//! recomputed at every element of the larger domain. (XLA learned that
//! duplicating the producer of both a max-reduction and `exp(x - max)` can
//! give `x > max` and so inf/NaN.)
//!
//! No kernel inlines more than [`MAX_KERNEL_NODES`] nodes: past that its
//! operands get buffers, so an unrolled loop becomes many small kernels
//! (identical ones compile once) instead of one that Cranelift takes
//! seconds over.
//!
//! Decisions that are only known while building a kernel ("this reduction
//! cannot fuse here") mark the node materialised and restart the scan from
//! it; the set of materialised nodes only grows, so this terminates.

use super::{
    Access, BufDecl, BufId, BufKind, Expr, ExprId, ExprNode, Kernel, KernelProgram, MatMul,
    MatView, ProgramOutput, Stage,
};
use crate::error::IrError;
use crate::graph::{Graph, NodeId, Op};
use crate::ops::OpKind;
use crate::shape::{Shape, TensorType, MAX_RANK};
use crate::DType;
use std::collections::HashMap;

/// An index map: for each dim of a node's shape, the domain dim that indexes
/// it (or `None` where the node's dim has size 1: index 0), plus a start
/// offset in that dim (from slices between the kernel's root and the node).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
struct Map {
    dims: [Option<u8>; MAX_RANK],
    start: [usize; MAX_RANK],
}

impl Map {
    const NONE: Map = Map {
        dims: [None; MAX_RANK],
        start: [0; MAX_RANK],
    };
}

impl std::ops::Index<usize> for Map {
    type Output = Option<u8>;
    fn index(&self, d: usize) -> &Option<u8> {
        &self.dims[d]
    }
}

impl std::ops::IndexMut<usize> for Map {
    fn index_mut(&mut self, d: usize) -> &mut Option<u8> {
        &mut self.dims[d]
    }
}

/// Where a concat operand's kernel stores: its place in the joined buffer.
#[derive(Copy, Clone)]
struct Target {
    buf: BufId,
    shape: Shape,
    axis: usize,
    start: usize,
}

/// Values whose inlined cost reaches this are not recomputed per user.
const EXPENSIVE: u32 = 8;
/// A value broadcast to at least [`BROADCAST_RATIO`] times its elements is
/// materialised once its inlined cost reaches this.
const BROADCAST_RECOMPUTE: u32 = 6;
/// See [`BROADCAST_RECOMPUTE`].
const BROADCAST_RATIO: usize = 64;
/// The longest row a scratch buffer may hold (elements).
const MAX_SCRATCH_COLS: usize = 1 << 16;
/// The most graph nodes one kernel inlines (counted as a tree, so a value
/// read twice counts twice). Past it the operands get buffers: an unrolled
/// ONNX Loop of 4097 elementwise steps was one kernel that took Cranelift
/// 19.5 s to compile, and kernel size has no other bound.
pub const MAX_KERNEL_NODES: u32 = 256;

/// Why building a kernel stopped.
enum Stop {
    /// This node must get a buffer first; restart from it.
    Materialize(NodeId),
    /// A real error.
    Ir(IrError),
}

impl From<IrError> for Stop {
    fn from(e: IrError) -> Stop {
        Stop::Ir(e)
    }
}

/// One result element from the operands' elements at the same index.
fn elementwise(op: &Op) -> bool {
    op.info().kind == OpKind::Elementwise
}

/// Fuses a verified graph into kernels.
pub fn fuse(graph: &Graph) -> Result<KernelProgram, IrError> {
    let g = split_multi_axis_reductions(graph)?;
    let mut f = Fuser::new(&g);
    f.run()?;
    f.finish()
}

/// Rewrites each reduction over several axes as a chain of one-axis
/// reductions (innermost axis first), which is what kernels implement.
fn split_multi_axis_reductions(g: &Graph) -> Result<Graph, IrError> {
    let mut out = Graph::new();
    let mut map: Vec<NodeId> = Vec::with_capacity(g.len());
    for id in g.ids() {
        let op = g.node(id).op.map_operands(|x| map[x.index()]);
        let new = match op {
            // Reducing over no axes (`sum_all` of a scalar) is the identity.
            Op::Reduce(_, x, axes) if axes.iter().count() == 0 && out.ty(x) == g.ty(id) => x,
            Op::Reduce(r, x, axes) if axes.iter().count() > 1 => {
                // An f16/bf16 sum or product rounds once, as one reduction
                // would: its partials stay f32 (max and min lose nothing).
                let low = out.ty(x).dtype;
                let widen = r.def().widen_partials && matches!(low, DType::F16 | DType::BF16);
                let mut cur = if widen {
                    out.add(Op::Cast(x, DType::F32))?
                } else {
                    x
                };
                for a in axes.iter().collect::<Vec<_>>().into_iter().rev() {
                    cur = out.add(Op::Reduce(r, cur, crate::graph::Axes::from_axes(&[a])))?;
                }
                if widen {
                    cur = out.add(Op::Cast(cur, low))?;
                }
                cur
            }
            Op::Constant { index, .. } => {
                let value = g
                    .constant(index)
                    .ok_or_else(|| IrError::Verify(format!("missing constant {index}")))?;
                out.add_constant(value.clone())
            }
            op => out.add(op)?,
        };
        map.push(new);
    }
    out.outputs = g.outputs.iter().map(|o| map[o.index()]).collect();
    Ok(out)
}

/// The strides under which `to` views the same elements as `from` with
/// `strides`, or `None` if no single affine view does (a reshape that
/// merges dims a transpose separated). The rule of torch's `view`: `to`'s
/// dims must split or merge runs of `from`'s dims that are contiguous
/// with each other.
fn reshape_strides(from: &[usize], strides: &[i64], to: &[usize]) -> Option<Vec<i64>> {
    let numel: usize = from.iter().product();
    let plain = |to: &[usize]| {
        let mut s = vec![1i64; to.len()];
        for d in (0..to.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * to[d + 1] as i64;
        }
        s
    };
    if numel == 0 || from.is_empty() {
        // Nothing, or one element, is read: any strides do.
        return Some(plain(to));
    }
    let mut out = vec![0i64; to.len()];
    let mut view_d = to.len() as isize - 1;
    let mut base = *strides.last()?;
    let (mut tensor_numel, mut view_numel) = (1usize, 1usize);
    for d in (0..from.len()).rev() {
        tensor_numel *= from[d];
        let chunk_ends =
            d == 0 || (from[d - 1] != 1 && strides[d - 1] != tensor_numel as i64 * base);
        if chunk_ends {
            while view_d >= 0 && (view_numel < tensor_numel || to[view_d as usize] == 1) {
                out[view_d as usize] = view_numel as i64 * base;
                view_numel *= to[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if d > 0 {
                base = strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(out)
}

fn contiguous_strides(shape: &Shape) -> Vec<i64> {
    let s = shape.strides();
    (0..shape.rank()).map(|d| s[d] as i64).collect()
}

fn identity_map(rank: usize) -> Map {
    let mut m = Map::NONE;
    for (d, slot) in m.dims.iter_mut().enumerate().take(rank) {
        *slot = Some(d as u8);
    }
    m
}

/// True for ops that can be inlined into a kernel's expression.
fn is_inlinable(op: &Op) -> bool {
    op.info().inline_cost.is_some()
}

/// For a reshape that only inserts or removes size-1 dims: for each result
/// dim, the operand dim it is (or `None` for an inserted 1).
fn unit_reshape(from: &Shape, to: &Shape) -> Option<Vec<Option<usize>>> {
    let src: Vec<usize> = (0..from.rank()).filter(|&d| from[d] != 1).collect();
    let dst: Vec<usize> = (0..to.rank()).filter(|&d| to[d] != 1).collect();
    if src.len() != dst.len() || src.iter().zip(&dst).any(|(&a, &b)| from[a] != to[b]) {
        return None;
    }
    let mut out = vec![None; to.rank()];
    for (&a, &b) in src.iter().zip(&dst) {
        out[b] = Some(a);
    }
    Some(out)
}

/// The view a convolution reads its `[k, n]` weights through, given
/// their view of a buffer: `Some(None)` for the buffer itself,
/// `Some(Some(transpose))` for an `[n, k]` buffer read transposed (the
/// only strided form the device's `ldl1c` path loads), `None` for any
/// other view (the weights are then materialised).
fn conv_weight_view(shape: &[usize], strides: &[i64], offset: i64) -> Option<Option<MatView>> {
    let &[k, n] = shape else {
        return None;
    };
    let (k, n) = (k as i64, n as i64);
    // A size-1 dim's stride is never used.
    let same = |s: i64, want: i64, len: i64| len == 1 || s == want;
    if offset != 0 {
        return None;
    }
    if same(strides[0], n, k) && same(strides[1], 1, n) {
        return Some(None);
    }
    if same(strides[0], 1, k) && same(strides[1], k, n) {
        return Some(Some(MatView::conv_weights_transposed(k as usize)));
    }
    None
}

struct Fuser<'g> {
    g: &'g Graph,
    users: Vec<Vec<NodeId>>,
    is_output: Vec<bool>,
    materialized: Vec<bool>,
    /// Expensive values with several users.
    shared_expensive: Vec<bool>,
    buffer_of: Vec<Option<BufId>>,
    /// Where in its buffer a node's values start (elements): 0, or its
    /// window's start for a node written in place into a concat's buffer.
    base_offset: Vec<i64>,
    /// The buffer of a concat, made before its own kernels when an
    /// operand is written into it in place first.
    concat_buf: HashMap<NodeId, BufId>,
    /// Operands written in place: the concat and the start along its axis.
    in_place: HashMap<NodeId, (NodeId, usize)>,
    buffers: Vec<BufDecl>,
    kernels: Vec<(NodeId, Kernel)>,
}

/// The state of one kernel under construction.
struct KernelBuilder {
    domain: Vec<usize>,
    loads: Vec<Access>,
    exprs: Vec<ExprNode>,
    stages: Vec<Stage>,
    matmul: Option<MatMul>,
    memo: HashMap<(NodeId, Map), ExprId>,
    expr_memo: HashMap<ExprNode, ExprId>,
}

impl KernelBuilder {
    /// An empty kernel over `domain`.
    fn new(domain: Vec<usize>) -> KernelBuilder {
        KernelBuilder {
            domain,
            loads: Vec::new(),
            exprs: Vec::new(),
            stages: Vec::new(),
            matmul: None,
            memo: HashMap::new(),
            expr_memo: HashMap::new(),
        }
    }

    fn push(&mut self, expr: Expr, dtype: crate::dtype::DType) -> ExprId {
        // Hash-consing: loads and row values are pure functions of the
        // index, so identical nodes may always be shared.
        let node = ExprNode { expr, dtype };
        if let Some(&id) = self.expr_memo.get(&node) {
            return id;
        }
        self.exprs.push(node);
        let id = ExprId(self.exprs.len() as u32 - 1);
        self.expr_memo.insert(node, id);
        id
    }

    fn load(&mut self, access: Access, dtype: crate::dtype::DType) -> ExprId {
        let i = self.access_slot(access);
        self.push(Expr::Load(i), dtype)
    }

    /// The number of a load access, added if new.
    fn access_slot(&mut self, access: Access) -> u32 {
        let i = match self.loads.iter().position(|a| *a == access) {
            Some(i) => i,
            None => {
                self.loads.push(access);
                self.loads.len() - 1
            }
        };
        i as u32
    }
}

impl<'g> Fuser<'g> {
    fn new(g: &'g Graph) -> Fuser<'g> {
        let n = g.len();
        let mut users = vec![Vec::new(); n];
        for id in g.ids() {
            for x in g.node(id).op.operands() {
                users[x.index()].push(id);
            }
        }
        let mut is_output = vec![false; n];
        for &o in &g.outputs {
            is_output[o.index()] = true;
        }
        Fuser {
            g,
            users,
            is_output,
            materialized: vec![false; n],
            shared_expensive: vec![false; n],
            buffer_of: vec![None; n],
            base_offset: vec![0; n],
            concat_buf: HashMap::new(),
            in_place: HashMap::new(),
            buffers: Vec::new(),
            kernels: Vec::new(),
        }
    }

    /// The node a chain of reshapes starts from.
    fn view_source(&self, mut n: NodeId) -> NodeId {
        while let Op::Reshape(x, _) = self.g.node(n).op {
            n = x;
        }
        n
    }

    /// The node under a chain of views (reshapes, broadcasts, permutes,
    /// slices) that computes their values: given a buffer, every view
    /// above it reads it in place, so a computed gather index is
    /// materialised at its own size, never at a broadcast's.
    fn view_producer(&self, mut n: NodeId) -> NodeId {
        while !self.materialized[n.index()] {
            match self.g.node(n).op {
                Op::Reshape(x, _) | Op::Broadcast(x, _) | Op::Permute(x, _) | Op::Slice(x, ..) => {
                    n = x
                }
                _ => break,
            }
        }
        n
    }

    /// The NCHW permute that is conv `n`'s only user: materialised in
    /// the conv's place, its kernel writes the product `[batch, n, oh,
    /// ow]` (`MatMul::nchw`), so readers load it contiguously. The conv's
    /// own NHWC buffer, read channel-major by the next kernel (ResNet's
    /// downsample, whose reader already holds a product), took that
    /// epilogue 0.1-0.3 ms at batch 1.
    fn nchw_permute(&self, n: NodeId) -> Option<NodeId> {
        let g = self.g;
        let (Op::Conv(..), [p]) = (&g.node(n).op, self.users[n.index()].as_slice()) else {
            return None;
        };
        let nchw = matches!(g.node(*p).op, Op::Permute(x, perm) if x == n && perm.as_vec() == [0, 3, 1, 2]);
        nchw.then_some(*p)
    }

    fn is_source(&self, n: NodeId) -> bool {
        matches!(self.g.node(n).op, Op::Input { .. } | Op::Constant { .. })
    }

    fn new_buffer(&mut self, ty: TensorType, kind: BufKind) -> BufId {
        self.buffers.push(BufDecl { ty, kind });
        BufId(self.buffers.len() as u32 - 1)
    }

    /// Marks the nodes whose materialisation is known before building.
    fn plan(&mut self) {
        let g = self.g;
        for id in g.ids() {
            match g.node(id).op {
                Op::Input { index, ty } => {
                    self.buffer_of[id.index()] = Some(self.new_buffer(ty, BufKind::Input(index)));
                }
                Op::Constant { index, ty } => {
                    self.buffer_of[id.index()] =
                        Some(self.new_buffer(ty, BufKind::Constant(index)));
                }
                _ => {}
            }
        }
        // Outputs own buffers (a param output as such needs none; a
        // reshaped param gets a fill kernel).
        for &o in &g.outputs {
            let s = self.view_source(o);
            if !matches!(g.node(o).op, Op::Param { .. }) {
                self.materialized[s.index()] = true;
            }
        }
        // Users impose materialisation on operands: a matmul reads each
        // operand in place from a buffer through one affine view (what is
        // under a transpose, head split, slice or broadcast is materialised,
        // not the view); a conv reads whole buffers; a general reshape
        // reinterprets a contiguous buffer.
        for id in g.ids() {
            match g.node(id).op {
                Op::MatMul(a, b) => {
                    for x in [a, b] {
                        self.plan_operand_view(x);
                    }
                    self.plan_product(id);
                }
                Op::Conv(a, b, _) => {
                    let s = self.view_source(a);
                    self.materialized[s.index()] = true;
                    self.plan_conv_weights(b);
                    self.plan_product(id);
                }
                Op::Concat(..) if !self.absorbed(id) => self.materialized[id.index()] = true,
                // A pooling reads its image's windows from a buffer and
                // writes its own (one kernel per region).
                Op::Pool(_, x, _) => {
                    let s = self.view_source(x);
                    self.materialized[s.index()] = true;
                    self.materialized[id.index()] = true;
                }
                // Gathers read their data at computed addresses: from a buffer.
                Op::Gather(x, ..) => {
                    let s = self.view_source(x);
                    self.materialized[s.index()] = true;
                }
                Op::Reshape(x, to) => {
                    let mappable = unit_reshape(&g.ty(x).shape, &to).is_some();
                    if !mappable || self.materialized[id.index()] {
                        let s = self.view_source(x);
                        self.materialized[s.index()] = true;
                    }
                }
                _ => {}
            }
        }
        let cost = self.inline_costs();
        // A computed value broadcast to a domain many times its size (a
        // `slice_assign` take line over a KV cache) is computed once into
        // a buffer rather than again at every element of the larger
        // domain, unless it is a few ops, or a row value: elementwise on a
        // reduction with no broadcast between (a layer norm's scale), which
        // its kernel computes once per row as a reduce stage anyway.
        let mut row_value = vec![false; g.len()];
        for id in g.ids() {
            let op = &g.node(id).op;
            row_value[id.index()] = !self.materialized[id.index()]
                && (matches!(op, Op::Reduce(..))
                    || elementwise(op) && op.operands().iter().any(|x| row_value[x.index()]));
        }
        for id in g.ids() {
            let Op::Broadcast(x, to) = g.node(id).op else {
                continue;
            };
            if elementwise(&g.node(x).op)
                && !row_value[x.index()]
                && cost[x.index()] >= BROADCAST_RECOMPUTE
                && to.numel() >= BROADCAST_RATIO * g.ty(x).shape.numel()
            {
                self.materialized[x.index()] = true;
            }
        }
        // Costs again, now that those values are buffers: a value computed
        // from a take line that many kernels read (the twelve layers of a
        // decode step share one) is then cheap to inline in each.
        self.inline_costs();
        self.bound_kernel_size();
    }

    /// The cost of each value as it would be inlined; marks the values of
    /// several users too expensive to recompute in each.
    fn inline_costs(&mut self) -> Vec<u32> {
        let g = self.g;
        self.shared_expensive.fill(false);
        let mut cost = vec![0u32; g.len()];
        for id in g.ids() {
            let op = &g.node(id).op;
            // An inlined matmul is its kernel's whole GEMM: a value built
            // on one is never recomputed by each kernel that reads it.
            if matches!(op, Op::MatMul(..) | Op::Conv(..)) && !self.materialized[id.index()] {
                cost[id.index()] = EXPENSIVE;
                continue;
            }
            let Some(own) = op.info().inline_cost else {
                continue;
            };
            let inner: u32 = op
                .operands()
                .iter()
                .filter(|x| !self.materialized[x.index()] && !self.shared_expensive[x.index()])
                .map(|x| cost[x.index()])
                .sum();
            cost[id.index()] = own.saturating_add(inner);
            if cost[id.index()] >= EXPENSIVE && self.users[id.index()].len() > 1 {
                self.shared_expensive[id.index()] = true;
            }
        }
        cost
    }

    /// Gives operands buffers wherever a node would inline more than
    /// [`MAX_KERNEL_NODES`] nodes, so every kernel stays that small: the
    /// operands are materialised under their views (a broadcast's source,
    /// never the broadcast), and the node starts a new count.
    fn bound_kernel_size(&mut self) {
        let g = self.g;
        let mut size = vec![0u32; g.len()];
        for id in g.ids() {
            let op = &g.node(id).op;
            let own = match op {
                Op::Input { .. } | Op::Constant { .. } | Op::Param { .. } | Op::Full { .. } => {
                    continue
                }
                // Views are index maps: no code of their own.
                Op::Reshape(..) | Op::Broadcast(..) | Op::Permute(..) | Op::Slice(..) => 0,
                _ => 1,
            };
            let inlined = |f: &Self, x: &NodeId| !f.materialized[x.index()];
            // A kernel's own matmul or conv is one node: its operands are
            // buffers.
            let inner: u32 = if matches!(op, Op::MatMul(..) | Op::Conv(..)) {
                0
            } else {
                op.operands()
                    .iter()
                    .filter(|x| inlined(self, x))
                    .fold(0u32, |a, x| a.saturating_add(size[x.index()]))
            };
            size[id.index()] = inner.saturating_add(own);
            if inner < MAX_KERNEL_NODES {
                continue;
            }
            for x in op.operands() {
                if !inlined(self, &x) || size[x.index()] == 0 {
                    continue;
                }
                let p = self.view_producer(x);
                let p = self.view_source(p);
                if !self.is_source(p) {
                    self.materialized[p.index()] = true;
                }
                // The views between read the new buffer in place.
                let mut n = x;
                while n != p {
                    size[n.index()] = 0;
                    n = g.node(n).op.operands()[0];
                }
                size[p.index()] = 0;
            }
            size[id.index()] = own;
        }
    }

    fn run(&mut self) -> Result<(), IrError> {
        self.plan();
        let g = self.g;
        let mut i = 0usize;
        while i < g.len() {
            let id = NodeId(i as u32);
            if !self.materialized[i] || self.buffer_of[i].is_some() || self.is_source(id) {
                i += 1;
                continue;
            }
            let built = match g.node(id).op {
                Op::Concat(..) => self.build_concat(id),
                Op::Pool(..) => self.build_pool(id),
                _ => self.build_placed(id),
            };
            match built {
                Ok(kernels) => {
                    self.kernels.extend(kernels.into_iter().map(|k| (id, k)));
                    i += 1;
                }
                Err(Stop::Materialize(n)) => {
                    // A reshape's buffer is its source's (readers look a
                    // view up through `view_source`), so that is what gets
                    // one; marking the reshape itself would give it a
                    // buffer no reader finds, and the next ask would fail.
                    let n = self.view_source(n);
                    let n = self
                        .nchw_permute(n)
                        .filter(|p| !self.materialized[p.index()])
                        .unwrap_or(n);
                    if self.materialized[n.index()] {
                        return Err(IrError::Verify(format!(
                            "fusion: {n} asked to be materialised twice"
                        )));
                    }
                    self.materialized[n.index()] = true;
                    i = n.index();
                }
                Err(Stop::Ir(e)) => return Err(e),
            }
        }
        // Reshape views of materialised nodes share their buffer.
        for id in g.ids() {
            if self.buffer_of[id.index()].is_none() {
                let s = self.view_source(id);
                if s != id {
                    self.buffer_of[id.index()] = self.buffer_of[s.index()];
                    self.base_offset[id.index()] = self.base_offset[s.index()];
                }
            }
        }
        Ok(())
    }

    /// Finds a reduction whose result has the root's shape, reachable
    /// through inlined elementwise ops: the root's kernel then iterates over
    /// that reduction's operand and stores one value per row.
    fn anchor_reduction(&self, root: NodeId) -> Option<(NodeId, usize)> {
        let shape = self.g.ty(root).shape;
        let mut work = vec![root];
        let mut seen = vec![false; self.g.len()];
        while let Some(n) = work.pop() {
            if seen[n.index()] {
                continue;
            }
            seen[n.index()] = true;
            let op = &self.g.node(n).op;
            if let Op::Reduce(_, _, axes) = op {
                if self.g.ty(n).shape == shape && (n == root || !self.materialized[n.index()]) {
                    return axes.iter().next().map(|a| (n, a));
                }
                continue;
            }
            if n != root && (self.materialized[n.index()] || self.is_source(n)) {
                continue;
            }
            if elementwise(op) {
                work.extend(op.operands());
            }
        }
        None
    }

    /// A concat whose only user is a concat along the same axis: its
    /// operands are written straight into that one's buffer.
    fn absorbed(&self, n: NodeId) -> bool {
        let Op::Concat(_, _, axis) = self.g.node(n).op else {
            return false;
        };
        let users = &self.users[n.index()];
        !self.is_output[n.index()]
            && users.len() == 1
            && matches!(self.g.node(users[0]).op, Op::Concat(_, _, a) if a == axis)
    }

    /// A matmul or conv is materialised unless its only user inlines it.
    fn plan_product(&mut self, id: NodeId) {
        let users = &self.users[id.index()];
        let single_inlinable_user = users.len() == 1
            && !self.is_output[id.index()]
            && is_inlinable(&self.g.node(users[0]).op);
        if !single_inlinable_user {
            self.materialized[id.index()] = true;
        }
    }

    /// Marks what matmul operand `x` will read in place: the buffer under
    /// its views, or (where a reshape is not affine) the view below it.
    fn plan_operand_view(&mut self, x: NodeId) {
        // Each failure marks a new node, under which the walk then stops.
        for _ in 0..self.g.len() + 1 {
            let has_buf = |n: NodeId| self.materialized[n.index()] || self.is_source(n);
            let n = match self.operand_view(x, &has_buf) {
                Ok(_) => return,
                Err(n) => self.view_source(n),
            };
            if self.materialized[n.index()] {
                return;
            }
            self.materialized[n.index()] = true;
        }
    }

    /// A convolution's weights `w` (`[k, n]`) are read in place when they
    /// are a buffer or its transpose (OIHW weights as `[o, k]`, permuted:
    /// no copy per call); anything else is materialised as `w` itself.
    fn plan_conv_weights(&mut self, w: NodeId) {
        let has_buf = |n: NodeId| self.materialized[n.index()] || self.is_source(n);
        if let Ok((_, shape, strides, offset)) = self.operand_view(w, &has_buf) {
            if conv_weight_view(&shape, &strides, offset).is_some() {
                return;
            }
        }
        let s = self.view_source(w);
        let w = if self.is_source(s) || self.materialized[s.index()] {
            w
        } else {
            s
        };
        self.materialized[w.index()] = true;
    }

    /// The buffer node matmul operand `x` reads and the view it reads it
    /// through (shape, strides, offset in elements), following permutes,
    /// slices, broadcasts and affine reshapes down from `x` to the first
    /// node whose buffer exists (`has_buf`). `Err(n)`: node `n` must be
    /// materialised first (a computed value without a buffer, or a
    /// reshape that is no affine view of what is under it).
    #[allow(clippy::type_complexity)]
    fn operand_view(
        &self,
        x: NodeId,
        has_buf: &dyn Fn(NodeId) -> bool,
    ) -> Result<(NodeId, Vec<usize>, Vec<i64>, i64), NodeId> {
        let g = self.g;
        let mut chain = Vec::new();
        let mut n = x;
        let base = loop {
            let s = self.view_source(n);
            if has_buf(s) {
                break s;
            }
            match g.node(n).op {
                Op::Permute(y, _) | Op::Slice(y, ..) | Op::Broadcast(y, _) | Op::Reshape(y, _) => {
                    chain.push(n);
                    n = y;
                }
                _ => return Err(n),
            }
        };
        // A reshape of a buffer reads it contiguously in its own shape.
        let top = g.ty(n).shape;
        let mut shape: Vec<usize> = (0..top.rank()).map(|d| top[d]).collect();
        let mut strides = contiguous_strides(&top);
        let mut offset = 0i64;
        for &v in chain.iter().rev() {
            let to = g.ty(v).shape;
            let to: Vec<usize> = (0..to.rank()).map(|d| to[d]).collect();
            match g.node(v).op {
                Op::Permute(_, perm) => {
                    strides = perm.as_vec().iter().map(|&p| strides[p]).collect();
                }
                Op::Slice(_, start, _) => {
                    offset += (0..start.rank())
                        .map(|d| start[d] as i64 * strides[d])
                        .sum::<i64>();
                }
                Op::Broadcast(..) => {
                    let pad = to.len() - shape.len();
                    let mut st = vec![0i64; pad];
                    for d in 0..shape.len() {
                        let stretched = shape[d] == 1 && to[pad + d] != 1;
                        st.push(if stretched { 0 } else { strides[d] });
                    }
                    strides = st;
                }
                Op::Reshape(..) => {
                    strides = reshape_strides(&shape, &strides, &to).ok_or(v)?;
                }
                _ => return Err(v),
            }
            shape = to;
        }
        Ok((base, shape, strides, offset))
    }

    /// Builds the kernel of `root` (or, with a target, the kernel that
    /// writes concat operand `root` into its place); on failure no buffer
    /// it made survives.
    fn build_kernel(
        &mut self,
        root: NodeId,
        target: Option<Target>,
        window: Option<(BufId, i64)>,
    ) -> Result<Kernel, Stop> {
        let nbuf = self.buffers.len();
        let r = self.try_build_kernel(root, target, window);
        if r.is_err() {
            self.buffers.truncate(nbuf);
        }
        r
    }

    /// Builds `root`'s kernel: into its window of a concat's buffer where
    /// [`Fuser::window_in_concat`] finds one (the concat then copies
    /// nothing for it, and `root`'s readers read that window), else into
    /// a buffer of its own.
    fn build_placed(&mut self, root: NodeId) -> Result<Vec<Kernel>, Stop> {
        let Some((c, start, offset)) = self.window_in_concat(root) else {
            return self.build_kernel(root, None, None).map(|k| vec![k]);
        };
        let buf = match self.concat_buf.get(&c) {
            Some(&b) => b,
            None => {
                let b = self.new_buffer(self.g.ty(c), BufKind::Temp);
                self.concat_buf.insert(c, b);
                b
            }
        };
        let nbuf = self.buffers.len();
        let kernel = self.build_kernel(root, None, Some((buf, offset)))?;
        if kernel.matmul.is_some() {
            // A product's epilogue keeps to a buffer of its own: a store
            // at an offset would take it off `run_row_tiled`'s path.
            self.buffers.truncate(nbuf);
            self.buffer_of[root.index()] = None;
            return self.build_kernel(root, None, None).map(|k| vec![k]);
        }
        self.base_offset[root.index()] = offset;
        self.in_place.insert(root, (c, start));
        Ok(vec![kernel])
    }

    /// The concat whose buffer materialised `n` can live in, with `n`'s
    /// start along its axis and its first element there: `n` reaches one
    /// of the concat's parts through reshapes alone, the part's window is
    /// contiguous (every dim before the axis is 1), and no reader needs a
    /// buffer of its own (an output, a convolution's image). A KV cache's
    /// updated layers, read by attention and returned concatenated, are
    /// then written once.
    fn window_in_concat(&self, n: NodeId) -> Option<(NodeId, usize, i64)> {
        let g = self.g;
        match g.node(n).op {
            Op::Input { .. }
            | Op::Constant { .. }
            | Op::Param { .. }
            | Op::Concat(..)
            | Op::Pool(..)
            | Op::MatMul(..)
            | Op::Conv(..) => return None,
            Op::Permute(c, _) if self.nchw_permute(c) == Some(n) => return None,
            _ => {}
        }
        let mut part = None;
        let mut work = vec![n];
        while let Some(x) = work.pop() {
            if self.is_output[x.index()] {
                return None;
            }
            for &u in &self.users[x.index()] {
                match g.node(u).op {
                    Op::Reshape(..) | Op::Permute(..) | Op::Broadcast(..) | Op::Slice(..) => {
                        work.push(u)
                    }
                    Op::Conv(..) => return None,
                    Op::Concat(..) if part.is_none() && self.view_source(x) == n => {
                        part = Some((u, x))
                    }
                    _ => {}
                }
            }
        }
        let (mut c, p) = part?;
        while self.absorbed(c) && !self.materialized[c.index()] {
            c = self.users[c.index()][0];
        }
        let Op::Concat(_, _, axis) = g.node(c).op else {
            return None;
        };
        if !self.materialized[c.index()] || self.buffer_of[c.index()].is_some() {
            return None;
        }
        let shape = g.ty(c).shape;
        let axis = axis as usize;
        if (0..axis).any(|d| shape[d] != 1) || g.ty(n).shape.numel() == 0 {
            return None;
        }
        let (_, start) = self.concat_parts(c).into_iter().find(|&(q, _)| q == p)?;
        let inner: usize = (axis + 1..shape.rank()).map(|d| shape[d]).product();
        Some((c, start, (start * inner) as i64))
    }

    /// The parts of concat `root` (absorbed concats flattened) with each
    /// one's start along its axis.
    fn concat_parts(&self, root: NodeId) -> Vec<(NodeId, usize)> {
        let g = self.g;
        let Op::Concat(_, _, axis) = g.node(root).op else {
            return Vec::new();
        };
        let mut parts = Vec::new();
        let mut work = vec![root];
        let mut start = 0;
        while let Some(n) = work.pop() {
            match g.node(n).op {
                Op::Concat(a, b, _)
                    if n == root || (self.absorbed(n) && !self.materialized[n.index()]) =>
                {
                    work.push(b);
                    work.push(a);
                }
                _ => {
                    parts.push((n, start));
                    start += g.ty(n).shape[axis as usize];
                }
            }
        }
        parts
    }

    /// The kernels of a concat: one per operand (absorbed concats
    /// flattened), each storing into its window of one joined buffer.
    fn build_concat(&mut self, root: NodeId) -> Result<Vec<Kernel>, Stop> {
        let g = self.g;
        let ty = g.ty(root);
        let Op::Concat(_, _, axis) = g.node(root).op else {
            return Err(Stop::Ir(IrError::Verify(format!(
                "fusion: {root} is not a concat"
            ))));
        };
        let nbuf = self.buffers.len();
        let buf = match self.concat_buf.get(&root) {
            Some(&b) => b,
            None => self.new_buffer(ty, BufKind::Temp),
        };
        let parts = self.concat_parts(root);
        let mut kernels = Vec::with_capacity(parts.len());
        for (p, start) in parts {
            let pty = g.ty(p);
            // An operand written in place already wrote its window.
            let written = self.in_place.get(&self.view_source(p)) == Some(&(root, start));
            if pty.shape.numel() > 0 && !written {
                let target = Target {
                    buf,
                    shape: ty.shape,
                    axis: axis as usize,
                    start,
                };
                match self.try_build_kernel(p, Some(target), None) {
                    Ok(k) => kernels.push(k),
                    Err(e) => {
                        self.buffers.truncate(nbuf);
                        return Err(e);
                    }
                }
            }
        }
        self.buffer_of[root.index()] = Some(buf);
        Ok(kernels)
    }

    /// The kernels of a pooling: one per region of output positions
    /// whose windows hold the same taps inside the image
    /// ([`crate::Window::tap_runs`] of the rows by those of the columns),
    /// each combining those taps, read as strided views of the image, and
    /// storing into its window of the output. The padding is never read
    /// or written.
    fn build_pool(&mut self, root: NodeId) -> Result<Vec<Kernel>, Stop> {
        let g = self.g;
        let ty = g.ty(root);
        let bad = |what: &str| Stop::Ir(IrError::Verify(format!("fusion: pool {root}: {what}")));
        let Op::Pool(r, x, win) = g.node(root).op else {
            return Err(bad("not a pool"));
        };
        let combine = match r {
            crate::ReduceOp::Max => crate::BinaryOp::Max,
            crate::ReduceOp::Min => crate::BinaryOp::Min,
            crate::ReduceOp::Sum => crate::BinaryOp::Add,
            crate::ReduceOp::Prod => return Err(bad("prod does not pool")),
        };
        let s = self.view_source(x);
        let src = self.buffer_of[s.index()].ok_or(Stop::Materialize(s))?;
        let base = self.base_offset[s.index()];
        let xs = g.ty(x).shape;
        let (n, c, h, w) = (xs[0], xs[1], xs[2], xs[3]);
        let (oh, ow) = (ty.shape[2], ty.shape[3]);
        let (rows, cols) = win
            .tap_runs(0, h)
            .zip(win.tap_runs(1, w))
            .ok_or_else(|| bad("a window wholly in the padding"))?;
        let (sh, sw) = (win.stride.0 as usize, win.stride.1 as usize);
        let (dh, dw) = (win.dilation.0 as usize, win.dilation.1 as usize);
        let (pt, pl) = (win.pad[0] as usize, win.pad[1] as usize);
        let out = self.new_buffer(ty, BufKind::Temp);
        self.buffer_of[root.index()] = Some(out);
        if ty.shape.numel() == 0 {
            return Ok(Vec::new());
        }
        let mut kernels = Vec::with_capacity(rows.len() * cols.len());
        for ry in &rows {
            for rx in &cols {
                let domain = vec![n, c, ry.len, rx.len];
                // Size-1 dims step nowhere (as `access` writes them).
                let strides = |st: [usize; 4]| -> Vec<i64> {
                    (0..4)
                        .map(|d| if domain[d] == 1 { 0 } else { st[d] as i64 })
                        .collect()
                };
                let mut kb = KernelBuilder::new(domain.clone());
                let mut acc = None;
                for i in ry.first..ry.end {
                    for j in rx.first..rx.end {
                        // Inside the image for every position of the run.
                        let y0 = ry.start * sh + i * dh - pt;
                        let x0 = rx.start * sw + j * dw - pl;
                        let access = Access {
                            buf: src,
                            strides: strides([c * h * w, h * w, sh * w, sw]),
                            offset: base + (y0 * w + x0) as i64,
                        };
                        let tap = kb.load(access, ty.dtype);
                        acc = Some(match acc {
                            None => tap,
                            Some(a) => kb.push(Expr::Binary(combine, a, tap), ty.dtype),
                        });
                    }
                }
                let value = acc.ok_or_else(|| bad("a window without taps"))?;
                let access = Access {
                    buf: out,
                    strides: strides([c * oh * ow, oh * ow, ow, 1]),
                    offset: (ry.start * ow + rx.start) as i64,
                };
                kb.stages.push(Stage::Store { access, value });
                let ops = vec![crate::text::op_name(&g.node(root).op)];
                let mut kernel = Kernel {
                    name: kernel_name(&ops, ty),
                    domain: kb.domain,
                    loads: kb.loads,
                    exprs: kb.exprs,
                    scratch: Vec::new(),
                    stages: kb.stages,
                    matmul: None,
                    ops,
                };
                collapse_domain(&mut kernel);
                kernels.push(kernel);
            }
        }
        Ok(kernels)
    }

    /// `window`: the buffer and first element `root` is written at
    /// instead of a buffer of its own.
    fn try_build_kernel(
        &mut self,
        root: NodeId,
        target: Option<Target>,
        window: Option<(BufId, i64)>,
    ) -> Result<Kernel, Stop> {
        let g = self.g;
        let ty = g.ty(root);
        // A concat operand that has its own buffer is copied: a leaf.
        let copied = target.is_some() && self.buffer_of[self.view_source(root).index()].is_some();
        if target.is_some() && !copied && self.shared_expensive[root.index()] {
            return Err(Stop::Materialize(root));
        }
        let anchor = if copied {
            None
        } else {
            self.anchor_reduction(root)
        };
        let (domain, root_map) = self.kernel_domain(root, anchor);
        let mut kb = KernelBuilder::new(domain);
        let out = match (target, window) {
            (Some(t), _) => t.buf,
            (None, Some((b, _))) => b,
            (None, None) => self.new_buffer(ty, BufKind::Temp),
        };
        match (target, &g.node(root).op) {
            (None, &Op::MatMul(a, b)) => kb.matmul = Some(self.matmul_spec(a, b, out)?),
            (None, &Op::Conv(x, w, win)) => kb.matmul = Some(self.conv_spec(x, w, win, out)?),
            (None, &Op::Permute(c, _)) if self.nchw_permute(c) == Some(root) => {
                let Op::Conv(x, w, win) = g.node(c).op else {
                    unreachable!("nchw_permute found a conv")
                };
                kb.matmul = Some(MatMul {
                    nchw: true,
                    ..self.conv_spec(x, w, win, out)?
                });
            }
            (None, _) => {
                let value = self.build_expr(&mut kb, root, root_map, true)?;
                let mut access = self.access(&kb, out, &ty.shape, &root_map);
                access.offset += window.map_or(0, |w| w.1);
                kb.stages.push(Stage::Store { access, value });
            }
            (Some(t), _) => {
                let value = self.build_expr(&mut kb, root, root_map, !copied)?;
                let mut map = root_map;
                map.start[t.axis] += t.start;
                let access = self.access(&kb, out, &t.shape, &map);
                kb.stages.push(Stage::Store { access, value });
            }
        }
        let inlined: ahash::AHashSet<NodeId> = kb.memo.keys().map(|k| k.0).collect();
        let scratch = self.scratch_rows(&kb, root, &inlined)?;
        if target.is_none() {
            self.buffer_of[root.index()] = Some(out);
        }
        let ops = self.fused_ops(&kb, root, &inlined, target.is_some());
        let mut kernel = Kernel {
            name: kernel_name(&ops, ty),
            domain: kb.domain,
            loads: kb.loads,
            exprs: kb.exprs,
            scratch,
            stages: kb.stages,
            matmul: kb.matmul,
            ops,
        };
        collapse_domain(&mut kernel);
        Ok(kernel)
    }

    /// The kernel's domain for `root` and the map from `root`'s dims to it:
    /// an anchoring reduction's source dims with the reduced axis last, else
    /// `root`'s own dims.
    fn kernel_domain(&self, root: NodeId, anchor: Option<(NodeId, usize)>) -> (Vec<usize>, Map) {
        let g = self.g;
        let ty = g.ty(root);
        match anchor {
            Some((red, axis)) => {
                let Op::Reduce(_, x, _) = g.node(red).op else {
                    unreachable!("anchor is a reduction")
                };
                let src = g.ty(x).shape;
                let mut domain = Vec::with_capacity(src.rank());
                let mut map = Map::NONE;
                for d in (0..src.rank()).filter(|&d| d != axis) {
                    map[d] = Some(domain.len() as u8);
                    domain.push(src[d]);
                }
                domain.push(src[axis]);
                (domain, map)
            }
            None if ty.shape.rank() == 0 => (vec![1], Map::NONE),
            None => (ty.shape.dims().to_vec(), identity_map(ty.shape.rank())),
        }
    }

    /// The scratch rows for the shared expensive values inlined into this
    /// kernel; `Stop::Materialize` for one that must get its own buffer
    /// (a user elsewhere, several maps, or a row too long for scratch).
    fn scratch_rows(
        &self,
        kb: &KernelBuilder,
        root: NodeId,
        inlined: &ahash::AHashSet<NodeId>,
    ) -> Result<Vec<ExprId>, Stop> {
        let mut scratch = Vec::new();
        let mut shared: Vec<NodeId> = inlined
            .iter()
            .copied()
            .filter(|n| {
                self.shared_expensive[n.index()] && *n != root && !self.materialized[n.index()]
            })
            .collect();
        shared.sort();
        for n in shared {
            let all_here = self.users[n.index()]
                .iter()
                .all(|u| *u == root || inlined.contains(u));
            let ids: Vec<ExprId> = kb
                .memo
                .iter()
                .filter(|(k, _)| k.0 == n)
                .map(|(_, &e)| e)
                .collect();
            let has_reduce = kb.stages.iter().any(|s| matches!(s, Stage::Reduce { .. }));
            let cols = *kb.domain.last().unwrap_or(&1);
            if !all_here || ids.len() != 1 || (has_reduce && cols > MAX_SCRATCH_COLS) {
                return Err(Stop::Materialize(n));
            }
            if has_reduce {
                scratch.push(ids[0]);
            }
        }
        Ok(scratch)
    }

    /// The names of the graph ops fused into this kernel, in graph order,
    /// without the views and sources that compute nothing.
    fn fused_ops(
        &self,
        kb: &KernelBuilder,
        root: NodeId,
        inlined: &ahash::AHashSet<NodeId>,
        concat: bool,
    ) -> Vec<&'static str> {
        let g = self.g;
        let mut ops: Vec<(NodeId, &'static str)> = inlined
            .iter()
            .filter(|n| self.buffer_of[n.index()].is_none() || **n == root)
            .map(|&n| (n, crate::text::op_name(&g.node(n).op)))
            .filter(|(_, name)| {
                !matches!(
                    *name,
                    "broadcast"
                        | "permute"
                        | "reshape"
                        | "slice"
                        | "param"
                        | "full"
                        | "input"
                        | "const"
                )
            })
            .collect();
        if kb.matmul.is_some() && !ops.iter().any(|o| o.1 == "matmul" || o.1 == "conv") {
            let mm = kb.matmul.as_ref().is_some_and(|m| m.im2col.is_some());
            ops.push((root, if mm { "conv" } else { "matmul" }));
        }
        if concat {
            ops.push((root, "cat"));
        }
        ops.sort();
        ops.into_iter().map(|o| o.1).collect()
    }

    /// A convolution as a matmul whose `a` is the image read as windows.
    fn conv_spec(
        &self,
        x: NodeId,
        w: NodeId,
        window: crate::graph::Window,
        out: BufId,
    ) -> Result<MatMul, Stop> {
        // `window_in_concat` never places a convolution's operand.
        let whole = |s: NodeId| match self.in_place.contains_key(&s) {
            true => Err(Stop::Ir(IrError::Verify(format!(
                "fusion: convolution operand {s} is a window of a buffer"
            )))),
            false => Ok(()),
        };
        let buf = |x: NodeId| {
            let s = self.view_source(x);
            whole(s)?;
            self.buffer_of[s.index()].ok_or(Stop::Materialize(s))
        };
        let (sx, sw) = (self.g.ty(x).shape, self.g.ty(w).shape);
        let has_buf = |n: NodeId| self.buffer_of[n.index()].is_some();
        let (b, b_view) = match self.operand_view(w, &has_buf) {
            Ok((base, shape, strides, offset)) => {
                whole(base)?;
                let view =
                    conv_weight_view(&shape, &strides, offset).ok_or(Stop::Materialize(w))?;
                let b = self.buffer_of[base.index()].ok_or(Stop::Materialize(base))?;
                (b, view)
            }
            Err(n) => return Err(Stop::Materialize(n)),
        };
        Ok(MatMul {
            a: buf(x)?,
            b,
            out,
            batch: sx[0],
            a_view: None,
            b_view,
            m: window.out(sx[2], sx[3]).map_or(0, |(oh, ow)| oh * ow),
            k: sw[0],
            n: sw[1],
            im2col: Some(crate::kernel::Im2Col {
                c: sx[1],
                h: sx[2],
                w: sx[3],
                window,
            }),
            nchw: false,
        })
    }

    fn matmul_spec(&self, a: NodeId, b: NodeId, out: BufId) -> Result<MatMul, Stop> {
        let (ta, tb) = (self.g.ty(a).shape, self.g.ty(b).shape);
        let (batch, m, k, n) = if ta.rank() == 3 {
            (ta[0], ta[1], ta[2], tb[2])
        } else {
            (1, ta[0], ta[1], tb[1])
        };
        let (a, a_view) = self.matmul_operand(a, m, k)?;
        let (b, b_view) = self.matmul_operand(b, k, n)?;
        Ok(MatMul {
            a,
            b,
            out,
            a_view,
            b_view,
            batch,
            m,
            k,
            n,
            im2col: None,
            nchw: false,
        })
    }

    /// The buffer of a `rows x cols` matmul operand and the view it is
    /// read through (`None`: contiguous).
    fn matmul_operand(
        &self,
        x: NodeId,
        rows: usize,
        cols: usize,
    ) -> Result<(BufId, Option<MatView>), Stop> {
        let has_buf = |n: NodeId| self.buffer_of[n.index()].is_some();
        let (base, shape, mut strides, offset) =
            self.operand_view(x, &has_buf).map_err(Stop::Materialize)?;
        let buf = self.buffer_of[base.index()].ok_or(Stop::Materialize(base))?;
        let offset = offset + self.base_offset[base.index()];
        // A size-1 dim's stride is never used: the contiguous one keeps
        // the plain case plain.
        let plain = contiguous_strides(&Shape::new(&shape).map_err(Stop::Ir)?);
        for d in 0..shape.len() {
            if shape[d] == 1 {
                strides[d] = plain[d];
            }
        }
        let strides = match strides[..] {
            [s0, s1] => [(rows * cols) as i64, s0, s1],
            [bs, s0, s1] => [bs, s0, s1],
            _ => {
                return Err(Stop::Ir(IrError::Verify(format!(
                    "fusion: matmul operand {x} of rank {}",
                    shape.len()
                ))))
            }
        };
        let view = MatView { offset, strides };
        let batch_is_one = shape.len() == 2 || shape[0] == 1;
        let mut plain = MatView::contiguous(rows, cols);
        if batch_is_one {
            plain.strides[0] = strides[0];
        }
        // `None` means the whole buffer, contiguous: a view at offset 0
        // of a larger buffer (a slice's first part, the first window of a
        // concat's buffer) keeps its view.
        let whole =
            self.buffers[buf.0 as usize].ty.shape.checked_numel() == Some(shape.iter().product());
        Ok((buf, (view != plain || !whole).then_some(view)))
    }

    /// The access of buffer `buf` (holding a tensor of `shape`) under `map`.
    fn access(&self, kb: &KernelBuilder, buf: BufId, shape: &Shape, map: &Map) -> Access {
        let cs = contiguous_strides(shape);
        let mut strides = vec![0i64; kb.domain.len()];
        let mut offset = 0i64;
        for d in 0..shape.rank() {
            if let (Some(k), true) = (map[d], shape[d] != 1) {
                strides[k as usize] += cs[d];
            }
            offset += map.start[d] as i64 * cs[d];
        }
        Access {
            buf,
            strides,
            offset,
        }
    }

    /// The maps of a node's operands, or `Materialize` if it cannot inline.
    fn operand_maps(
        &self,
        kb: &KernelBuilder,
        n: NodeId,
        map: &Map,
    ) -> Result<Vec<(NodeId, Map)>, Stop> {
        let g = self.g;
        let op = &g.node(n).op;
        Ok(match *op {
            Op::Unary(_, x) | Op::Cast(x, _) | Op::Bitcast(x, _) => vec![(x, *map)],
            Op::Binary(_, a, b) | Op::Compare(_, a, b) => vec![(a, *map), (b, *map)],
            Op::Select(c, a, b) => vec![(c, *map), (a, *map), (b, *map)],
            Op::Broadcast(x, to) => {
                let src = g.ty(x).shape;
                let off = to.rank() - src.rank();
                let mut m = Map::NONE;
                for d in 0..src.rank() {
                    // A broadcast dim reads index 0 whatever the window.
                    if src[d] != 1 {
                        m[d] = map[off + d];
                        m.start[d] = map.start[off + d];
                    }
                }
                vec![(x, m)]
            }
            Op::Permute(x, perm) => {
                let mut m = Map::NONE;
                for (i, &p) in perm.as_vec().iter().enumerate() {
                    m[p] = map[i];
                    m.start[p] = map.start[i];
                }
                vec![(x, m)]
            }
            // The data operand is read from its buffer, not built.
            Op::Gather(_, index, _) => vec![(index, *map)],
            Op::Slice(x, start, _) => {
                let mut m = *map;
                for d in 0..start.rank() {
                    m.start[d] += start[d];
                }
                vec![(x, m)]
            }
            Op::Reshape(x, to) => {
                let from = g.ty(x).shape;
                let dims = unit_reshape(&from, &to).ok_or(Stop::Materialize(x))?;
                let mut m = Map::NONE;
                for (b, a) in dims.iter().enumerate() {
                    if let Some(a) = a {
                        m[*a] = map[b];
                        m.start[*a] = map.start[b];
                    }
                }
                vec![(x, m)]
            }
            Op::Reduce(_, x, axes) => {
                let axis = axes.iter().next().unwrap_or(0);
                let src = g.ty(x).shape;
                let last = kb.domain.len() - 1;
                let fits = kb.domain[last] == src[axis]
                    && (0..src.rank()).all(|d| d == axis || map[d] != Some(last as u8))
                    && map[axis].is_none_or(|k| kb.domain[k as usize] == 1);
                if !fits {
                    return Err(Stop::Materialize(n));
                }
                let mut m = *map;
                m[axis] = Some(last as u8);
                vec![(x, m)]
            }
            _ => vec![],
        })
    }

    /// Builds the expression of node `root` under `map` with an explicit
    /// stack (graphs can be deep; nothing recurses over them).
    fn build_expr(
        &mut self,
        kb: &mut KernelBuilder,
        root: NodeId,
        map: Map,
        defining: bool,
    ) -> Result<ExprId, Stop> {
        let mut stack = vec![(root, map, false)];
        while let Some((n, m, expanded)) = stack.pop() {
            if kb.memo.contains_key(&(n, m)) {
                continue;
            }
            // The node this kernel defines is computed, never loaded.
            if let Some(e) = self.build_leaf(kb, n, m, defining && n == root)? {
                kb.memo.insert((n, m), e);
                continue;
            }
            let deps = self.operand_maps(kb, n, &m)?;
            if !expanded {
                stack.push((n, m, true));
                for d in deps.iter().rev() {
                    if !kb.memo.contains_key(d) {
                        stack.push((d.0, d.1, false));
                    }
                }
                continue;
            }
            let e: Vec<ExprId> = deps.iter().map(|d| kb.memo[d]).collect();
            let id = self.build_op(kb, n, m, &e)?;
            kb.memo.insert((n, m), id);
        }
        kb.memo
            .get(&(root, map))
            .copied()
            .ok_or_else(|| Stop::Ir(IrError::Verify("fusion: root not built".into())))
    }

    /// The expression of `n` under `m` if it is a leaf: a buffer load, a
    /// param, a literal or a fusable product; `None` for an op to compute.
    fn build_leaf(
        &mut self,
        kb: &mut KernelBuilder,
        n: NodeId,
        m: Map,
        defined: bool,
    ) -> Result<Option<ExprId>, Stop> {
        let node = self.g.node(n);
        if !defined && self.buffer_of[self.view_source(n).index()].is_some() {
            let s = self.view_source(n);
            let buf = self.buffer_of[s.index()].ok_or(Stop::Materialize(s))?;
            let mut access = self.access(kb, buf, &node.ty.shape, &m);
            access.offset += self.base_offset[s.index()];
            return Ok(Some(kb.load(access, node.ty.dtype)));
        }
        Ok(match node.op {
            Op::Param { index, dtype } => Some(kb.push(Expr::Param(index), dtype)),
            Op::Full { value, ty } => Some(kb.push(Expr::Lit(value), ty.dtype)),
            Op::MatMul(..) | Op::Conv(..) => Some(self.product_leaf(kb, n, m)?),
            Op::Input { .. } | Op::Constant { .. } => {
                return Err(Stop::Ir(IrError::Verify(format!(
                    "fusion: source {n} has no buffer"
                ))))
            }
            _ if !defined && self.materialized[n.index()] => {
                return Err(Stop::Materialize(n));
            }
            _ => None,
        })
    }

    /// A matmul or conv `n` fused as this kernel's product: computed whole
    /// into a new buffer first, then loaded under `m`.
    fn product_leaf(&mut self, kb: &mut KernelBuilder, n: NodeId, m: Map) -> Result<ExprId, Stop> {
        let node = self.g.node(n);
        // The product is computed whole first, so the stages may read it
        // in any order of its dims (a permute after a matmul costs no
        // copy), but they must read all of it, once per element.
        let shape = node.ty.shape;
        let mut seen = 0u16;
        let permuted = kb.domain.len() == shape.rank()
            && (0..shape.rank()).all(|d| {
                m.start[d] == 0
                    && m[d].is_some_and(|k| {
                        let fresh = seen & (1 << k) == 0;
                        seen |= 1 << k;
                        fresh && kb.domain[k as usize] == shape[d]
                    })
            });
        if kb.matmul.is_some() || !permuted || self.materialized[n.index()] {
            return Err(Stop::Materialize(n));
        }
        // A conv's NHWC product read channel-major (the NCHW permute every
        // `conv2d` ends with) is written `[batch, n, oh, ow]` instead, so
        // the epilogue reads it contiguously (`MatMul::nchw`).
        let nchw = matches!(node.op, Op::Conv(..))
            && matches!((m[1], m[2], m[3]), (Some(y), Some(x), Some(c)) if c < y && c < x);
        let (ty, m) = if nchw {
            let mut ty = node.ty;
            ty.shape = Shape::new(&[shape[0], shape[3], shape[1], shape[2]]).map_err(Stop::Ir)?;
            let mut pm = m;
            pm.dims[..4].copy_from_slice(&[m[0], m[3], m[1], m[2]]);
            (ty, pm)
        } else {
            (node.ty, m)
        };
        let prod = self.new_buffer(ty, BufKind::Temp);
        kb.matmul = Some(match node.op {
            Op::Conv(x, w, win) => MatMul {
                nchw,
                ..self.conv_spec(x, w, win, prod)?
            },
            Op::MatMul(a, b) => self.matmul_spec(a, b, prod)?,
            _ => unreachable!("only called for a matmul or conv"),
        });
        let access = self.access(kb, prod, &ty.shape, &m);
        Ok(kb.load(access, node.ty.dtype))
    }

    /// The expression computing op `n` under `m` from its operands' `e`.
    fn build_op(
        &mut self,
        kb: &mut KernelBuilder,
        n: NodeId,
        m: Map,
        e: &[ExprId],
    ) -> Result<ExprId, Stop> {
        let node = self.g.node(n);
        let dt = node.ty.dtype;
        Ok(match node.op {
            Op::Unary(u, _) => kb.push(Expr::Unary(u, e[0]), dt),
            Op::Binary(b, ..) => kb.push(Expr::Binary(b, e[0], e[1]), dt),
            Op::Compare(c, ..) => kb.push(Expr::Compare(c, e[0], e[1]), dt),
            Op::Select(..) => kb.push(Expr::Select(e[0], e[1], e[2]), dt),
            Op::Cast(..) => kb.push(Expr::Cast(e[0]), dt),
            Op::Bitcast(..) => kb.push(Expr::Bitcast(e[0]), dt),
            Op::Broadcast(..) | Op::Permute(..) | Op::Reshape(..) | Op::Slice(..) => e[0],
            Op::Reduce(r, ..) => {
                kb.stages.push(Stage::Reduce { op: r, value: e[0] });
                kb.push(Expr::Row(kb.stages.len() as u32 - 1), dt)
            }
            Op::Gather(x, index, axis) => {
                // Device code reads the indices from memory: they must
                // be a load here, not a computed value.
                if !matches!(kb.exprs[e[0].0 as usize].expr, Expr::Load(_)) {
                    return Err(Stop::Materialize(self.view_producer(index)));
                }
                self.gather_expr(kb, m, x, axis as usize, e[0], dt)?
            }
            _ => {
                return Err(Stop::Ir(IrError::Verify(format!(
                    "fusion: unexpected op at {n}"
                ))))
            }
        })
    }

    /// A gather from `x` along `axis` under `m`, at the loaded indices
    /// `index`: `x` is read through its buffer with `axis` left to them.
    fn gather_expr(
        &mut self,
        kb: &mut KernelBuilder,
        m: Map,
        x: NodeId,
        axis: usize,
        index: ExprId,
        dt: DType,
    ) -> Result<ExprId, Stop> {
        let s = self.view_source(x);
        let buf = self.buffer_of[s.index()].ok_or(Stop::Materialize(s))?;
        let shape = self.g.ty(x).shape;
        let mut mx = m;
        mx.dims[axis] = None;
        mx.start[axis] = 0;
        let mut access = self.access(kb, buf, &shape, &mx);
        access.offset += self.base_offset[s.index()];
        let load = kb.access_slot(access);
        let stride = contiguous_strides(&shape)[axis];
        let len = shape[axis] as i64;
        Ok(kb.push(
            Expr::Gather {
                load,
                index,
                stride,
                len,
            },
            dt,
        ))
    }

    fn finish(self) -> Result<KernelProgram, IrError> {
        let g = self.g;
        let outputs = g
            .outputs
            .iter()
            .map(
                |&o| match (g.node(o).op.clone(), self.buffer_of[o.index()]) {
                    (Op::Param { index, dtype }, _) => Ok(ProgramOutput::Param(index, dtype)),
                    (_, Some(b)) => Ok(ProgramOutput::Buffer(b, g.ty(o))),
                    (_, None) => Err(IrError::Verify(format!("fusion: output {o} has no buffer"))),
                },
            )
            .collect::<Result<_, _>>()?;
        Ok(KernelProgram {
            buffers: self.buffers,
            kernels: self.kernels.into_iter().map(|k| k.1).collect(),
            outputs,
            params: g.param_types(),
            inputs: g.input_types(),
        })
    }
}

/// `fused_mul_add_relu`, or the op's own name for a single op.
fn kernel_name(ops: &[&'static str], ty: TensorType) -> String {
    let mut names: Vec<&str> = Vec::new();
    for &o in ops {
        if names.last() != Some(&o) {
            names.push(o);
        }
    }
    match names.len() {
        0 => format!("fill_{}", ty.dtype),
        1 => names[0].to_string(),
        n if n <= 6 => format!("fused_{}", names.join("_")),
        n => format!("fused_{}_and_{}_more", names[..5].join("_"), n - 5),
    }
}

/// Drops size-1 dims and merges adjacent dims that every access walks
/// contiguously, so most elementwise kernels become one flat loop. The inner
/// dim of a kernel with reductions is never merged away.
fn collapse_domain(k: &mut Kernel) {
    let keep_inner = k.has_reduce();
    let mut accesses: Vec<&mut Access> = k.loads.iter_mut().collect();
    for s in k.stages.iter_mut() {
        if let Stage::Store { access, .. } = s {
            accesses.push(access);
        }
    }
    let mut domain = k.domain.clone();
    // Drop size-1 dims (strides there are irrelevant).
    let mut d = 0;
    while d < domain.len() {
        let is_inner = d + 1 == domain.len();
        if domain[d] == 1 && domain.len() > 1 && !(keep_inner && is_inner) {
            domain.remove(d);
            for a in accesses.iter_mut() {
                a.strides.remove(d);
            }
        } else {
            d += 1;
        }
    }
    // Merge dim d into d+1 when every access is contiguous across them.
    let mut d = domain.len().saturating_sub(1);
    while d > 0 {
        let (outer, inner) = (d - 1, d);
        let inner_is_reduce_axis = keep_inner && inner + 1 == domain.len();
        let mergeable = !inner_is_reduce_axis
            && accesses
                .iter()
                .all(|a| a.strides[outer] == a.strides[inner] * domain[inner] as i64);
        if mergeable {
            domain[inner] *= domain[outer];
            domain.remove(outer);
            for a in accesses.iter_mut() {
                a.strides.remove(outer);
            }
        }
        d -= 1;
    }
    k.domain = domain;
}
