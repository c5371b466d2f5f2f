//! The kernel IR: what one compiled function computes. A [`KernelProgram`] is
//! the fused form of a graph: a table of buffers (graph inputs, constants,
//! intermediates) and a list of kernels that run in order, each reading and
//! writing whole buffers.
//!
//! A [`Kernel`] iterates over a **domain** (a shape). Its last dimension is
//! the *inner* one; the others are the *rows*. Every buffer it touches is an
//! [`Access`]: a buffer plus one stride per domain dimension (0 where the
//! value is broadcast, permuted strides for a transposition), so broadcasts
//! and transposes cost nothing. The arithmetic is an expression DAG
//! ([`ExprNode`] in an arena addressed by [`ExprId`], operands before users).
//! A kernel runs its [`Stage`]s in order for each row:
//! - `Reduce` folds an expression over the inner dimension into one value per
//!   row, which later expressions read with [`Expr::Row`];
//! - `Store` writes an expression through an access. A store whose inner
//!   stride is 0 writes one value per row (its expression must not vary along
//!   the inner dimension).
//!
//! Expressions listed in `scratch` are expensive values that several stages
//! use: the first stage that needs one computes it and keeps it in a per-row
//! scratch buffer; later stages read it back, so it is never computed twice.
//! A kernel may also start with a matrix multiply ([`MatMul`]) whose result
//! buffer the stages read as an ordinary load: the fused epilogue.
//!
//! Sizes and strides are concrete here (so the text form is readable), but
//! code generation keys only on the structure ([`Kernel::structure_text`]):
//! sizes and strides other than 0 and 1 are runtime arguments, so a new
//! shape of the same program reuses the compiled kernel.

mod fuse;
mod text;
mod verify;

pub use fuse::{fuse, MAX_KERNEL_NODES};
pub use text::parse_program;
pub use verify::verify_program;

use crate::dtype::{DType, Lit};
use crate::graph::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::shape::TensorType;

/// Index of a buffer in [`KernelProgram::buffers`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct BufId(pub u32);

/// Index of an expression in [`Kernel::exprs`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct ExprId(pub u32);

/// Where a buffer's storage comes from.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum BufKind {
    /// Tensor argument `n` of the program.
    Input(u32),
    /// Constant `n` of the source graph.
    Constant(u32),
    /// Allocated per run, written by a kernel.
    Temp,
}

/// A buffer: a contiguous row-major tensor.
#[derive(Copy, Clone, PartialEq, Debug)]
pub struct BufDecl {
    /// Its type.
    pub ty: TensorType,
    /// Where it comes from.
    pub kind: BufKind,
}

/// A buffer seen through one stride per domain dimension (in elements),
/// starting `offset` elements in (a slice's window, a concat operand's
/// place in the joined buffer).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Access {
    /// The buffer.
    pub buf: BufId,
    /// Element stride per domain dimension.
    pub strides: Vec<i64>,
    /// Elements from the buffer's start to domain index zero (a runtime
    /// argument, like the strides).
    pub offset: i64,
}

impl Access {
    /// The stride along the inner (last) domain dimension.
    pub fn inner_stride(&self) -> i64 {
        self.strides.last().copied().unwrap_or(0)
    }

    /// The inner stride host code is compiled for (0, 1 or 2: the code
    /// uses it, not the argument), or `None` when the code reads it from
    /// its arguments; the host kernel cache keys on it.
    pub fn fixed_inner_stride(&self) -> Option<i64> {
        Some(self.inner_stride()).filter(|s| (0..=2).contains(s))
    }
}

/// One expression node.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Expr {
    /// The element of `loads[i]` at the current domain index.
    Load(u32),
    /// Program parameter `i` (a runtime scalar), converted to this node's dtype.
    Param(u32),
    /// A literal of this node's dtype.
    Lit(Lit),
    /// Elementwise unary function.
    Unary(UnaryOp, ExprId),
    /// Elementwise binary function.
    Binary(BinaryOp, ExprId, ExprId),
    /// Comparison giving bool.
    Compare(CmpOp, ExprId, ExprId),
    /// `c ? a : b`.
    Select(ExprId, ExprId, ExprId),
    /// Conversion from the operand's dtype to this node's dtype.
    Cast(ExprId),
    /// The operand's bits read as this node's dtype (of the same size).
    Bitcast(ExprId),
    /// The value reduce stage `i` computed for the current row.
    Row(u32),
    /// A data-dependent read: the element of `loads[load]` at the current
    /// domain index, moved `index * stride` elements (the gathered axis's
    /// stride; the access's own stride along that axis is 0). `index` is an
    /// i32/i64 expression; one outside `0..len` stops the kernel with an
    /// error before anything is read.
    Gather {
        /// The access gathered from.
        load: u32,
        /// The index along the gathered axis.
        index: ExprId,
        /// Elements between consecutive indices.
        stride: i64,
        /// The gathered axis's length.
        len: i64,
    },
}

impl Expr {
    /// The operands.
    pub fn operands(&self) -> Vec<ExprId> {
        match *self {
            Expr::Load(_) | Expr::Param(_) | Expr::Lit(_) | Expr::Row(_) => vec![],
            Expr::Unary(_, a)
            | Expr::Cast(a)
            | Expr::Bitcast(a)
            | Expr::Gather { index: a, .. } => {
                vec![a]
            }
            Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => vec![a, b],
            Expr::Select(c, a, b) => vec![c, a, b],
        }
    }
}

/// An expression with its dtype.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct ExprNode {
    /// What it computes.
    pub expr: Expr,
    /// Its dtype.
    pub dtype: DType,
}

/// A step of a kernel, run for every row.
#[derive(Clone, PartialEq, Debug)]
pub enum Stage {
    /// Folds `value` over the inner dimension into a per-row value.
    Reduce {
        /// The fold.
        op: ReduceOp,
        /// What is folded.
        value: ExprId,
    },
    /// Writes `value` through `access`.
    Store {
        /// Where.
        access: Access,
        /// What.
        value: ExprId,
    },
}

/// A (batched) matrix multiply `out[b] = a[b] @ b[b]` that runs before the
/// kernel's stages; the stages read `out` as an ordinary load.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MatMul {
    /// Left operand, `[batch, m, k]` (or `[m, k]`) read through
    /// [`a_view`](Self::a_view); with [`im2col`](Self::im2col), the
    /// `[batch, c, h, w]` image whose windows are the rows.
    pub a: BufId,
    /// Right operand, `[batch, k, n]` (or `[k, n]`) read through
    /// [`b_view`](Self::b_view); with `im2col`, `[k, n]`, shared by every
    /// batch.
    pub b: BufId,
    /// How `a` is read in place (a transpose, a head split, a slice, a
    /// batch broadcast); `None` for the contiguous `[batch, m, k]`.
    pub a_view: Option<MatView>,
    /// How `b` is read in place; `None` for the contiguous `[batch, k, n]`.
    pub b_view: Option<MatView>,
    /// The product, contiguous `[batch, m, n]`.
    pub out: BufId,
    /// Batch count (1 for 2-D).
    pub batch: usize,
    /// Rows of `a`.
    pub m: usize,
    /// Inner dimension.
    pub k: usize,
    /// Columns of `b`.
    pub n: usize,
    /// `a` read as its windows, never copied (a convolution, [`Op::Conv`]):
    /// row `p` of image `b` is the window at output position `p`.
    ///
    /// [`Op::Conv`]: crate::Op::Conv
    pub im2col: Option<Im2Col>,
    /// The product is written `[batch, n, m]` (a convolution's NCHW:
    /// channels, then output pixels) instead of `[batch, m, n]`; only with
    /// [`im2col`](Self::im2col). Fusion sets it when the kernel reads the
    /// product channel-major, so its epilogue reads it contiguously.
    pub nchw: bool,
}

impl MatMul {
    /// The view `a` is read through (its contiguous layout when
    /// [`a_view`](Self::a_view) is `None`).
    pub fn view_a(&self) -> MatView {
        self.a_view
            .unwrap_or_else(|| MatView::contiguous(self.m, self.k))
    }

    /// The view `b` is read through.
    pub fn view_b(&self) -> MatView {
        self.b_view
            .unwrap_or_else(|| MatView::contiguous(self.k, self.n))
    }
}

/// A matmul operand read in place: element `(i, r, c)` (batch, row,
/// column) is buffer element `offset + i*strides[0] + r*strides[1] +
/// c*strides[2]`. Strides may be 0 (a broadcast) or negative.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct MatView {
    /// Elements from the buffer's start to element `(0, 0, 0)`.
    pub offset: i64,
    /// Batch, row and column strides in elements.
    pub strides: [i64; 3],
}

impl MatView {
    /// The row-major contiguous `[batch, rows, cols]` layout.
    pub fn contiguous(rows: usize, cols: usize) -> MatView {
        MatView {
            offset: 0,
            strides: [(rows * cols) as i64, cols as i64, 1],
        }
    }

    /// A convolution's `[k, n]` weights read from an `[n, k]` buffer (OIHW
    /// weights as `[o, c*kh*kw]`), transposed in place and shared by every
    /// image (batch stride 0): the one view a convolution's `b` takes.
    pub fn conv_weights_transposed(k: usize) -> MatView {
        MatView {
            offset: 0,
            strides: [0, 1, k as i64],
        }
    }

    /// The lowest and highest element read for `[batch, rows, cols]`, or
    /// `None` when nothing is read (a zero dim). Computed in `i128` so no
    /// size from text can overflow.
    pub fn reach(&self, dims: [usize; 3]) -> Option<(i128, i128)> {
        if dims.contains(&0) {
            return None;
        }
        let (mut lo, mut hi) = (self.offset as i128, self.offset as i128);
        for (d, s) in dims.iter().zip(self.strides) {
            let span = (*d as i128 - 1) * s as i128;
            lo += span.min(0);
            hi += span.max(0);
        }
        Some((lo, hi))
    }

    /// True if every element read for `[batch, rows, cols]` is inside a
    /// buffer of `len` elements.
    pub fn fits(&self, dims: [usize; 3], len: usize) -> bool {
        self.reach(dims)
            .is_none_or(|(lo, hi)| lo >= 0 && hi < len as i128)
    }
}

/// The image behind an implicit im2col operand: `[c, h, w]` per batch and
/// the window (`m = oh * ow`, `k = c * kh * kw`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Im2Col {
    /// Channels.
    pub c: usize,
    /// Image height.
    pub h: usize,
    /// Image width.
    pub w: usize,
    /// The window.
    pub window: crate::graph::Window,
}

impl Im2Col {
    /// The output width (windows per row of the image).
    pub fn ow(&self) -> usize {
        self.window.out(self.h, self.w).map_or(0, |(_, ow)| ow)
    }

    /// The input channels of one group (`c / groups`).
    pub fn group_channels(&self) -> usize {
        self.c / (self.window.groups as usize).max(1)
    }

    /// The GM element (relative to the image's start) that element `q` of
    /// window `p` reads for an output channel of group `group`, or `None`
    /// for a zero of the padding.
    pub fn element(&self, p: usize, q: usize, group: usize) -> Option<usize> {
        let win = &self.window;
        let (kh, kw) = (win.kh as usize, win.kw as usize);
        let ow = self.ow().max(1);
        let (ci, r) = (q / (kh * kw), q % (kh * kw));
        let ci = group * self.group_channels() + ci;
        let (iy, ix) = win.tap((p / ow, p % ow), (r / kw, r % kw))?;
        (iy < self.h && ix < self.w).then_some((ci * self.h + iy) * self.w + ix)
    }
}

/// One kernel.
#[derive(Clone, PartialEq, Debug)]
pub struct Kernel {
    /// A readable name, such as `fused_mul_add_relu`.
    pub name: String,
    /// The iteration domain; rank >= 1.
    pub domain: Vec<usize>,
    /// Buffer reads.
    pub loads: Vec<Access>,
    /// The expression arena, operands before users.
    pub exprs: Vec<ExprNode>,
    /// Expressions computed once per row and kept in scratch memory.
    pub scratch: Vec<ExprId>,
    /// The steps, in order.
    pub stages: Vec<Stage>,
    /// A matrix multiply that runs first, if any.
    pub matmul: Option<MatMul>,
    /// Names of the graph ops fused into this kernel, in graph order.
    pub ops: Vec<&'static str>,
}

impl Kernel {
    /// The expression with this id.
    pub fn expr(&self, id: ExprId) -> &ExprNode {
        &self.exprs[id.0 as usize]
    }

    /// The number of rows: the product of all domain dims but the last.
    pub fn rows(&self) -> usize {
        self.domain[..self.domain.len() - 1].iter().product()
    }

    /// The length of the inner dimension.
    pub fn cols(&self) -> usize {
        *self.domain.last().unwrap_or(&1)
    }

    /// True if the kernel has reduce stages.
    pub fn has_reduce(&self) -> bool {
        self.stages
            .iter()
            .any(|s| matches!(s, Stage::Reduce { .. }))
    }

    /// True if a launch splits the flat element range (a rank-1 domain with
    /// no reductions); otherwise launches split rows.
    pub fn is_flat(&self) -> bool {
        self.domain.len() == 1 && !self.has_reduce()
    }

    /// The number of launch units: elements for a flat kernel, rows otherwise.
    pub fn units(&self) -> usize {
        if self.is_flat() {
            self.domain[0]
        } else {
            self.rows()
        }
    }

    /// All accesses, loads first, then stores in stage order.
    pub fn accesses(&self) -> impl Iterator<Item = &Access> {
        self.loads
            .iter()
            .chain(self.stages.iter().filter_map(|s| match s {
                Stage::Store { access, .. } => Some(access),
                Stage::Reduce { .. } => None,
            }))
    }

    /// How far past its own reach access `l` may read through gathers:
    /// the largest `(len - 1) * stride` of a [`Expr::Gather`] on it (0 if
    /// none), for bounds checks.
    pub fn gather_reach(&self, l: usize) -> i64 {
        self.exprs
            .iter()
            .filter_map(|e| match e.expr {
                Expr::Gather {
                    load, stride, len, ..
                } if load as usize == l => Some(len.saturating_sub(1).saturating_mul(stride)),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// True if an expression reads data-dependent addresses.
    pub fn has_gather(&self) -> bool {
        self.exprs
            .iter()
            .any(|e| matches!(e.expr, Expr::Gather { .. }))
    }

    /// The buffers the kernel touches, each once, in order of first use:
    /// matmul operands and result, then loads, then stores. Code generation
    /// numbers buffers this way, and so does [`Kernel::structure_text`].
    pub fn local_buffers(&self) -> Vec<BufId> {
        let mut order: Vec<BufId> = Vec::new();
        let mm = self.matmul.iter().flat_map(|m| [m.a, m.b, m.out]);
        for b in mm.chain(self.accesses().map(|a| a.buf)) {
            if !order.contains(&b) {
                order.push(b);
            }
        }
        order
    }

    /// The buffers the kernel writes (its matmul's product, then its
    /// stores), each once.
    pub fn stored_buffers(&self) -> Vec<BufId> {
        let mut out: Vec<BufId> = self.matmul.iter().map(|m| m.out).collect();
        for s in &self.stages {
            if let Stage::Store { access, .. } = s {
                if !out.contains(&access.buf) {
                    out.push(access.buf);
                }
            }
        }
        out
    }

    /// The buffers the kernel only reads (its matmul's operands and its
    /// loads, not a buffer it writes), each once.
    pub fn read_buffers(&self) -> Vec<BufId> {
        let written = self.stored_buffers();
        self.local_buffers()
            .into_iter()
            .filter(|b| !written.contains(b))
            .collect()
    }

    /// Everything that changes the generated host code, as canonical text
    /// (the host kernel cache's key): rank, expression DAG, dtypes, stages,
    /// scratch, buffers by local number ([`Kernel::local_buffers`]) with
    /// their dtypes, and for each access only the class of its inner
    /// stride (`0`, `1`, `2` or `s`): outer strides and sizes do not change
    /// the code.
    pub fn structure_text(&self, buf_dtype: &dyn Fn(BufId) -> DType) -> String {
        self.structure(buf_dtype, true)
    }

    /// [`Kernel::structure_text`] for the device code, which reads a
    /// stride of 2 as any other (classes `0`, `1` and `s`): the Sim
    /// kernel cache's key.
    pub fn device_structure_text(&self, buf_dtype: &dyn Fn(BufId) -> DType) -> String {
        self.structure(buf_dtype, false)
    }

    fn structure(&self, buf_dtype: &dyn Fn(BufId) -> DType, two: bool) -> String {
        use std::fmt::Write;
        let order = self.local_buffers();
        let local = |b: BufId| order.iter().position(|&x| x == b).unwrap_or(usize::MAX);
        let class = |a: &Access| match a.fixed_inner_stride() {
            Some(0) => '0',
            Some(1) => '1',
            Some(2) if two => '2',
            _ => 's',
        };
        let mut out = String::new();
        let _ = write!(out, "rank {};", self.domain.len());
        if let Some(mm) = &self.matmul {
            let (a, b, o) = (local(mm.a), local(mm.b), local(mm.out));
            let _ = write!(out, "mm {a} {b} {o} {};", buf_dtype(mm.out));
            // Device code loads an operand row-wise or element-wise by its
            // column stride, and takes no negative stride (`n`); offsets
            // and other strides are arguments.
            let cls = |v: MatView| match v.strides {
                s if s.iter().any(|&x| x < 0) || v.offset < 0 => 'n',
                [_, _, 1] => '1',
                _ => 's',
            };
            if mm.a_view.is_some() || mm.b_view.is_some() {
                let _ = write!(out, "mmv {} {};", cls(mm.view_a()), cls(mm.view_b()));
            }
            // The window's shape is code; the image's size is not.
            if let Some(ic) = &mm.im2col {
                let _ = write!(out, "im2col {:?};", ic.window.to_list());
            }
            if mm.nchw {
                out.push_str("nchw;");
            }
        }
        for l in &self.loads {
            let _ = write!(
                out,
                "ld {} {} {};",
                local(l.buf),
                buf_dtype(l.buf),
                class(l)
            );
        }
        for e in &self.exprs {
            // Float literals by bits: NaN payloads and -0.0 are distinct code.
            let _ = match e.expr {
                Expr::Lit(Lit::Float(f)) => write!(out, "lit {:x} {};", f.to_bits(), e.dtype),
                other => write!(out, "{other:?} {};", e.dtype),
            };
        }
        for s in &self.scratch {
            let _ = write!(out, "scr {};", s.0);
        }
        for s in &self.stages {
            let _ = match s {
                Stage::Reduce { op, value } => write!(out, "red {op:?} {};", value.0),
                Stage::Store { access, value } => write!(
                    out,
                    "st {} {} {} {};",
                    local(access.buf),
                    buf_dtype(access.buf),
                    class(access),
                    value.0
                ),
            };
        }
        out
    }
}

/// A graph output: a buffer seen under a shape of equal element count (a
/// reshape of a kernel's result costs nothing), or a program parameter.
#[derive(Copy, Clone, PartialEq, Debug)]
pub enum ProgramOutput {
    /// A buffer, reinterpreted as `ty` (same dtype, same element count).
    Buffer(BufId, TensorType),
    /// A parameter, as a rank-0 tensor of this dtype.
    Param(u32, DType),
}

/// The fused form of a graph.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct KernelProgram {
    /// Every buffer.
    pub buffers: Vec<BufDecl>,
    /// Kernels, in execution order.
    pub kernels: Vec<Kernel>,
    /// The graph's outputs.
    pub outputs: Vec<ProgramOutput>,
    /// Parameter dtypes, by index.
    pub params: Vec<DType>,
    /// Tensor input types, by index.
    pub inputs: Vec<TensorType>,
}

impl KernelProgram {
    /// The declaration of a buffer.
    pub fn buffer(&self, b: BufId) -> &BufDecl {
        &self.buffers[b.0 as usize]
    }
}
