//! Kernel -> one Cranelift function `fn(bufs, args, start, end)`.
//!
//! Shape of the generated code (see `layout.rs` for the arguments):
//! - a flat kernel runs its single store stage over elements `start..end`;
//! - otherwise, for each row in `start..end`, the row index is split into
//!   outer indices (by the runtime dims), each access gets its row base
//!   pointer, and the stages run in order: a reduce stage folds over the
//!   inner dim into a per-row value (four vector accumulators), a store stage
//!   writes over the inner dim, a per-row store writes one value.
//!
//! Inner loops are guarded, bottom-tested and unrolled: a main loop over
//! `F32X4` vectors (when every value the stage needs is f32 and every
//! access is contiguous or broadcast along the inner dim), then a scalar
//! tail built by the same emitter. Everything else (f64, ints, bools, casts,
//! strided inner accesses) runs the scalar emitter only. The reduce
//! stages' loops live in `lower/reduce.rs`; vector loops whose values need
//! transcendentals or a division run in blocks through the AVX-512 or AVX2 helpers
//! (`lower/block.rs`).

use super::layout::{reachable, reachable_until, storage_bytes, ArgLayout};
use super::math::Math;
use crate::CodegenError;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, FuncRef, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::{FunctionBuilder, Variable};
use std::collections::HashMap;
use tilejit_ir::kernel::{Expr, ExprId, Kernel, Stage};
use tilejit_ir::{BinaryOp, CmpOp, DType, Lit, UnaryOp};

mod block;
mod reduce;

/// Vector lanes of the f32 fast path.
const LANES: i64 = 4;

/// Helper functions the generated code may call.
pub struct Libcalls {
    /// `f64 -> f64` functions by name (`exp`, `log`, `tanh`).
    pub f64_fns: HashMap<&'static str, FuncRef>,
    /// `f32 -> f32` rounding to f16 / bf16.
    pub round_f16: FuncRef,
    /// See `round_f16`.
    pub round_bf16: FuncRef,
    /// Block helpers `fn(src, dst, n, s, pf)` by op name (`exp`, ...,
    /// `div`, `max`, `min`; empty when the CPU lacks them or the options
    /// turn them off); see `lower/block.rs` and `native::BlockFn`.
    pub block_fns: HashMap<&'static str, FuncRef>,
}

/// Scalar (`lanes == 1`) or vector emission of one point of the domain.
#[derive(Copy, Clone, PartialEq)]
enum Mode {
    Scalar,
    Vector,
}

struct Access {
    /// Base pointer of the buffer (row base inside a row loop).
    base: Variable,
    /// Inner stride in elements: constant 0/1, else the runtime value.
    inner: Inner,
    /// Element size.
    esize: i64,
    /// Bytes from this row's base to the next row's (the innermost outer
    /// dim's stride) in a row loop, for prefetching.
    row_step: Option<Value>,
}

#[derive(Copy, Clone)]
enum Inner {
    Zero,
    One,
    Runtime(Value),
}

pub struct Lowerer<'a, 'b> {
    pub b: FunctionBuilder<'b>,
    k: &'a Kernel,
    layout: &'a ArgLayout,
    dtype_of_buf: &'a dyn Fn(usize) -> DType,
    fma: bool,
    libs: Libcalls,
    ptr: Type,
    bufs: Vec<Value>,
    scratch: Vec<Value>,
    params: Vec<Value>,
    accesses: Vec<Access>,
    rows: Vec<Option<Variable>>,
    /// Per expression: a scratch value whose row an earlier stage stored
    /// (only scratch values are ever marked).
    filled: Vec<bool>,
    /// The block `block.rs` is emitting, with the values its helpers have
    /// computed so far.
    block: Option<block::Block>,
    /// Stack buffers of `MATH_BLOCK` f32s, reused by every blocked loop.
    block_slots: Vec<cranelift_codegen::ir::StackSlot>,
    /// The stage being emitted (its index in `k.stages`).
    stage: usize,
}

fn unsupported(k: &Kernel, what: impl Into<String>) -> CodegenError {
    CodegenError::Unsupported {
        kernel: k.name.clone(),
        what: what.into(),
    }
}

/// The Cranelift type a value of `dtype` is computed in (scalar mode).
fn scalar_ty(d: DType) -> Type {
    match d {
        DType::F32 | DType::F16 | DType::BF16 => types::F32,
        DType::F64 => types::F64,
        DType::I32 => types::I32,
        DType::I64 => types::I64,
        DType::Bool => types::I8,
    }
}

fn is_f32ish(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

/// f16 and bf16 values live in f32 but round to their own type after
/// every op, as the reference interpreter (and numpy) round them.
fn is_low_precision(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16)
}

impl<'a, 'b> Lowerer<'a, 'b> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        b: FunctionBuilder<'b>,
        k: &'a Kernel,
        layout: &'a ArgLayout,
        dtype_of_buf: &'a dyn Fn(usize) -> DType,
        fma: bool,
        libs: Libcalls,
    ) -> Lowerer<'a, 'b> {
        Lowerer {
            b,
            k,
            layout,
            dtype_of_buf,
            fma,
            libs,
            ptr: types::I64,
            bufs: Vec::new(),
            scratch: Vec::new(),
            params: Vec::new(),
            accesses: Vec::new(),
            rows: vec![None; k.stages.len()],
            filled: vec![false; k.exprs.len()],
            block: None,
            block_slots: Vec::new(),
            stage: 0,
        }
    }

    fn flags() -> MemFlagsData {
        MemFlagsData::trusted()
    }

    fn iconst(&mut self, v: i64) -> Value {
        self.b.ins().iconst(self.ptr, v)
    }

    /// Emits the whole function body.
    pub fn lower(mut self) -> Result<(), CodegenError> {
        let entry = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.b.switch_to_block(entry);
        let p = self.b.block_params(entry).to_vec();
        let (bufs_p, args_p, start, end) = (p[0], p[1], p[2], p[3]);
        let ptr = self.ptr;
        let nlocal = self.layout.buffers.len();
        for i in 0..nlocal + self.layout.scratch {
            let v = self
                .b
                .ins()
                .load(ptr, Self::flags(), bufs_p, (8 * i) as i32);
            if i < nlocal {
                self.bufs.push(v);
            } else {
                self.scratch.push(v);
            }
        }
        let rank = self.layout.rank;
        let dims: Vec<Value> = (0..rank)
            .map(|d| {
                self.b
                    .ins()
                    .load(ptr, Self::flags(), args_p, (8 * d) as i32)
            })
            .collect();
        // Params, converted once to the dtype their expressions use.
        let mut param_vals = vec![None; self.layout.params];
        for e in &self.k.exprs {
            if let Expr::Param(i) = e.expr {
                let slot = (8 * self.layout.param_slot(i as usize)) as i32;
                let raw = self.b.ins().load(types::I64, Self::flags(), args_p, slot);
                let v = match e.dtype {
                    d if d.is_float() => {
                        let f = self.b.ins().bitcast(types::F64, MemFlagsData::new(), raw);
                        if d == DType::F64 {
                            f
                        } else {
                            self.b.ins().fdemote(types::F32, f)
                        }
                    }
                    DType::I64 => raw,
                    d => self.b.ins().ireduce(scalar_ty(d), raw),
                };
                param_vals[i as usize] = Some(v);
            }
        }
        let zero = self.iconst(0);
        self.params = param_vals.into_iter().map(|v| v.unwrap_or(zero)).collect();
        // Accesses: strides, base pointers (as variables, rebased per row).
        let all: Vec<tilejit_ir::kernel::Access> = self.k.accesses().cloned().collect();
        let mut outer_strides: Vec<Vec<Value>> = Vec::new();
        for (a, acc) in all.iter().enumerate() {
            let lb = self.layout.access_buf[a];
            let esize = storage_bytes((self.dtype_of_buf)(lb)) as i64;
            let slot = self.layout.stride_slot(a);
            let strides: Vec<Value> = (0..rank)
                .map(|d| {
                    self.b
                        .ins()
                        .load(ptr, Self::flags(), args_p, (8 * (slot + d)) as i32)
                })
                .collect();
            let inner = match acc.inner_stride() {
                0 => Inner::Zero,
                1 => Inner::One,
                _ => Inner::Runtime(strides[rank - 1]),
            };
            let base = self.b.declare_var(ptr);
            let v = self.bufs[lb];
            self.b.def_var(base, v);
            let row_step = (!self.layout.flat && rank >= 2)
                .then(|| self.b.ins().imul_imm_s(strides[rank - 2], esize));
            self.accesses.push(Access {
                base,
                inner,
                esize,
                row_step,
            });
            outer_strides.push(strides);
        }
        if self.layout.flat {
            self.run_stages(start, end, true)?;
        } else {
            // for r in start..end { rebase; stages }
            let row = self.b.declare_var(ptr);
            self.b.def_var(row, start);
            let cols = dims[rank - 1];
            self.counted_loop(row, end, 1, &mut |s, r| {
                // Outer indices, innermost first.
                let mut rem = r;
                let mut idx = vec![zero; rank - 1];
                for d in (0..rank - 1).rev() {
                    if d == 0 {
                        idx[d] = rem;
                    } else {
                        idx[d] = s.b.ins().urem(rem, dims[d]);
                        rem = s.b.ins().udiv(rem, dims[d]);
                    }
                }
                for (a, strides) in outer_strides.iter().enumerate() {
                    let mut off = zero;
                    for d in 0..rank - 1 {
                        let t = s.b.ins().imul(idx[d], strides[d]);
                        off = s.b.ins().iadd(off, t);
                    }
                    let bytes = s.b.ins().imul_imm_s(off, s.accesses[a].esize);
                    let lb = s.layout.access_buf[a];
                    let base = s.b.ins().iadd(s.bufs[lb], bytes);
                    s.b.def_var(s.accesses[a].base, base);
                }
                s.run_stages(zero, cols, false)
            })?;
        }
        self.b.ins().return_(&[]);
        self.b.seal_all_blocks();
        Ok(())
    }

    /// Runs every stage for one row (or the flat range `j0..j1`).
    fn run_stages(&mut self, j0: Value, j1: Value, flat: bool) -> Result<(), CodegenError> {
        self.filled.iter_mut().for_each(|f| *f = false);
        let nloads = self.k.loads.len();
        let mut store_i = nloads;
        for (si, stage) in self.k.stages.clone().iter().enumerate() {
            self.stage = si;
            match stage {
                Stage::Reduce { op, value } => {
                    let v = self.reduce_loop(*op, *value, j0, j1)?;
                    let v = self.round_low(v, self.k.expr(*value).dtype);
                    let var = self.b.declare_var(scalar_ty(self.k.expr(*value).dtype));
                    self.b.def_var(var, v);
                    self.rows[si] = Some(var);
                    self.mark_filled(*value);
                }
                Stage::Store { access, value } => {
                    if !flat && access.inner_stride() == 0 {
                        let zero = self.iconst(0);
                        let mut cache = HashMap::new();
                        let v = self.eval(*value, zero, Mode::Scalar, &mut cache, false)?;
                        self.store(store_i, zero, v);
                    } else {
                        self.store_loop(store_i, *value, j0, j1)?;
                        self.mark_filled(*value);
                    }
                    store_i += 1;
                }
            }
        }
        Ok(())
    }

    fn mark_filled(&mut self, value: ExprId) {
        for e in reachable(self.k, value) {
            if self.k.scratch.contains(&e) {
                self.filled[e.0 as usize] = true;
            }
        }
    }

    /// Whether every value `value` needs can run on `F32X4`.
    fn vectorizable(&self, value: ExprId, store: Option<usize>) -> bool {
        let k = self.k;
        if let Some(a) = store {
            let lb = self.layout.access_buf[a];
            if !matches!(self.accesses[a].inner, Inner::One) || !is_f32ish((self.dtype_of_buf)(lb))
            {
                return false;
            }
        }
        reachable(k, value).into_iter().all(|e| {
            let n = k.expr(e);
            match n.expr {
                Expr::Cast(_) => false,
                // Rounding to f16/bf16 is a scalar call.
                _ if is_low_precision(n.dtype) && !matches!(n.expr, Expr::Load(_)) => false,
                Expr::Compare(_, a, _) => is_f32ish(k.expr(a).dtype),
                Expr::Select(c, ..) => {
                    is_f32ish(n.dtype) && matches!(k.expr(c).expr, Expr::Compare(..))
                }
                Expr::Load(l) => {
                    is_f32ish(n.dtype)
                        && !matches!(self.accesses[l as usize].inner, Inner::Runtime(_))
                }
                _ => is_f32ish(n.dtype),
            }
        })
    }

    /// Emits `for j in j0..j1` as an unrolled vector loop (when `vector`)
    /// followed by a scalar tail; `body(j, mode)` emits one step.
    fn inner_loop(
        &mut self,
        j0: Value,
        j1: Value,
        vector: bool,
        unroll: i64,
        body: &mut dyn FnMut(&mut Self, Value, Mode) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        let j = self.b.declare_var(self.ptr);
        self.b.def_var(j, j0);
        if vector {
            let step = LANES * unroll;
            let n = self.b.ins().isub(j1, j0);
            let n = self.b.ins().band_imm_s(n, !(step - 1));
            let vend = self.b.ins().iadd(j0, n);
            self.counted_loop(j, vend, step, &mut |s, jv| {
                for u in 0..unroll {
                    let ju = s.b.ins().iadd_imm_s(jv, u * LANES);
                    body(s, ju, Mode::Vector)?;
                }
                Ok(())
            })?;
        }
        self.counted_loop(j, j1, 1, &mut |s, jv| body(s, jv, Mode::Scalar))
    }

    /// `while var < end { body(var); var += step }`, guarded once and then
    /// tested at the bottom (one branch per iteration, which also lets
    /// Cranelift hoist loop-invariant constants). `var` holds the start.
    fn counted_loop(
        &mut self,
        var: Variable,
        end: Value,
        step: i64,
        body: &mut dyn FnMut(&mut Self, Value) -> Result<(), CodegenError>,
    ) -> Result<(), CodegenError> {
        let body_b = self.b.create_block();
        let exit = self.b.create_block();
        let start = self.b.use_var(var);
        let c = self.b.ins().icmp(IntCC::SignedLessThan, start, end);
        self.b.ins().brif(c, body_b, &[], exit, &[]);
        self.b.switch_to_block(body_b);
        let v = self.b.use_var(var);
        body(self, v)?;
        let next = self.b.ins().iadd_imm_s(v, step);
        self.b.def_var(var, next);
        let c = self.b.ins().icmp(IntCC::SignedLessThan, next, end);
        self.b.ins().brif(c, body_b, &[], exit, &[]);
        self.b.switch_to_block(exit);
        Ok(())
    }

    fn store_loop(
        &mut self,
        a: usize,
        value: ExprId,
        j0: Value,
        j1: Value,
    ) -> Result<(), CodegenError> {
        let vector = self.vectorizable(value, Some(a));
        self.blocked_loop(value, Some(a), j0, j1, vector, 4, &mut |s, j, mode| {
            let mut cache = HashMap::new();
            let v = s.eval(value, j, mode, &mut cache, true)?;
            s.store(a, j, v);
            Ok(())
        })
    }

    /// Address of access `a` at inner index `j`.
    fn addr(&mut self, a: usize, j: Value) -> Value {
        let base = self.b.use_var(self.accesses[a].base);
        let esize = self.accesses[a].esize;
        match self.accesses[a].inner {
            Inner::Zero => base,
            Inner::One => {
                let off = self.b.ins().imul_imm_s(j, esize);
                self.b.ins().iadd(base, off)
            }
            Inner::Runtime(s) => {
                let e = self.b.ins().imul(j, s);
                let off = self.b.ins().imul_imm_s(e, esize);
                self.b.ins().iadd(base, off)
            }
        }
    }

    /// Stores `v` (a scalar, an i8 0/1 for bools, or an `F32X4`) at access
    /// `a`, inner index `j`.
    fn store(&mut self, a: usize, j: Value, v: Value) {
        let p = self.addr(a, j);
        self.b.ins().store(Self::flags(), v, p, 0);
    }

    /// Address of element `j` of the scratch row of `slot` (holding `e`).
    fn scratch_addr(&mut self, slot: usize, e: ExprId, j: Value) -> Value {
        let esize = storage_bytes(self.k.expr(e).dtype) as i64;
        let off = self.b.ins().imul_imm_s(j, esize);
        self.b.ins().iadd(self.scratch[slot], off)
    }

    /// Emits the value of `root` at inner index `j`, with a per-point cache.
    /// `inner` is false for per-row evaluation (scratch is not read there).
    fn eval(
        &mut self,
        root: ExprId,
        j: Value,
        mode: Mode,
        cache: &mut HashMap<ExprId, Value>,
        inner: bool,
    ) -> Result<Value, CodegenError> {
        // A value already in scratch (or in a block buffer) is loaded, so
        // what it was computed from is not emitted again (loads the
        // optimiser may not drop).
        let from_scratch =
            |e: ExprId| inner && (self.filled[e.0 as usize] || self.block_value(e).is_some());
        for e in reachable_until(self.k, root, from_scratch) {
            if cache.contains_key(&e) {
                continue;
            }
            let slot = self
                .k
                .scratch
                .iter()
                .position(|&s| s == e)
                .filter(|_| inner);
            let v = match slot {
                Some(slot) if self.filled[e.0 as usize] => {
                    let p = self.scratch_addr(slot, e, j);
                    let ty = match mode {
                        Mode::Scalar => scalar_ty(self.k.expr(e).dtype),
                        Mode::Vector => types::F32X4,
                    };
                    self.b.ins().load(ty, Self::flags(), p, 0)
                }
                _ => {
                    // A helper already wrote a scratch value's row.
                    let (v, stored) = match self.block_value(e).filter(|_| inner) {
                        Some(base) => (self.load_block_value(base, j, mode), true),
                        None => (self.emit_one(e, j, mode, cache)?, false),
                    };
                    if let Some(slot) = slot.filter(|_| !stored) {
                        let p = self.scratch_addr(slot, e, j);
                        self.b.ins().store(Self::flags(), v, p, 0);
                    }
                    v
                }
            };
            cache.insert(e, v);
        }
        Ok(cache[&root])
    }

    fn splat_if(&mut self, v: Value, mode: Mode) -> Value {
        if mode == Mode::Vector {
            self.b.ins().splat(types::F32X4, v)
        } else {
            v
        }
    }

    fn math(&mut self, mode: Mode) -> Math<'_, 'b> {
        let ty = if mode == Mode::Vector {
            types::F32X4
        } else {
            types::F32
        };
        Math {
            b: &mut self.b,
            ty,
            fma: self.fma,
        }
    }

    fn emit_one(
        &mut self,
        e: ExprId,
        j: Value,
        mode: Mode,
        cache: &HashMap<ExprId, Value>,
    ) -> Result<Value, CodegenError> {
        let n = *self.k.expr(e);
        let d = n.dtype;
        let arg = |x: ExprId| cache[&x];
        let v = match n.expr {
            Expr::Load(l) => {
                let l = l as usize;
                let p = self.addr(l, j);
                let ty = scalar_ty(d);
                match (mode, self.accesses[l].inner) {
                    (Mode::Vector, Inner::Zero) => {
                        let s = self.b.ins().load(ty, Self::flags(), p, 0);
                        self.b.ins().splat(types::F32X4, s)
                    }
                    (Mode::Vector, _) => self.b.ins().load(types::F32X4, Self::flags(), p, 0),
                    (Mode::Scalar, _) => self.b.ins().load(ty, Self::flags(), p, 0),
                }
            }
            Expr::Param(i) => {
                let v = self.params[i as usize];
                self.splat_if(v, mode)
            }
            Expr::Lit(l) => {
                let v = self.lit(l, d);
                self.splat_if(v, mode)
            }
            Expr::Row(s) => {
                let var = self.rows[s as usize]
                    .ok_or_else(|| unsupported(self.k, "a row value used before its stage"))?;
                let v = self.b.use_var(var);
                self.splat_if(v, mode)
            }
            Expr::Unary(u, x) => self.unary(u, d, arg(x), mode)?,
            Expr::Binary(bop, x, y) => self.binary(bop, d, arg(x), arg(y), mode)?,
            Expr::Compare(c, x, y) => {
                let od = self.k.expr(x).dtype;
                if od.is_float() {
                    let cc = match c {
                        CmpOp::Lt => FloatCC::LessThan,
                        CmpOp::Gt => FloatCC::GreaterThan,
                        CmpOp::Le => FloatCC::LessThanOrEqual,
                        CmpOp::Ge => FloatCC::GreaterThanOrEqual,
                        CmpOp::Eq => FloatCC::Equal,
                    };
                    self.b.ins().fcmp(cc, arg(x), arg(y))
                } else {
                    let cc = match c {
                        CmpOp::Lt => IntCC::SignedLessThan,
                        CmpOp::Gt => IntCC::SignedGreaterThan,
                        CmpOp::Le => IntCC::SignedLessThanOrEqual,
                        CmpOp::Ge => IntCC::SignedGreaterThanOrEqual,
                        CmpOp::Eq => IntCC::Equal,
                    };
                    self.b.ins().icmp(cc, arg(x), arg(y))
                }
            }
            Expr::Select(c, x, y) => {
                if mode == Mode::Vector {
                    let mut m = self.math(mode);
                    m.select(arg(c), arg(x), arg(y))
                } else {
                    self.b.ins().select(arg(c), arg(x), arg(y))
                }
            }
            Expr::Cast(x) => self.cast(arg(x), self.k.expr(x).dtype, d)?,
        };
        Ok(match n.expr {
            // Loads read rounded values; casts and literals round themselves.
            Expr::Load(_) | Expr::Cast(_) | Expr::Lit(_) | Expr::Row(_) => v,
            _ => self.round_low(v, d),
        })
    }

    /// `v` rounded to `d` when `d` is f16 or bf16 (scalar values only:
    /// such values never take the vector path).
    fn round_low(&mut self, v: Value, d: DType) -> Value {
        let f = match d {
            DType::F16 => self.libs.round_f16,
            DType::BF16 => self.libs.round_bf16,
            _ => return v,
        };
        let call = self.b.ins().call(f, &[v]);
        self.b.inst_results(call)[0]
    }

    fn lit(&mut self, l: Lit, d: DType) -> Value {
        match scalar_ty(d) {
            // f16/bf16 literals hold their own type's value.
            types::F32 => self.b.ins().f32const(d.round_float(l.as_f64()) as f32),
            types::F64 => self.b.ins().f64const(l.as_f64()),
            ty => self.b.ins().iconst(ty, l.as_i64()),
        }
    }

    fn f64_call(&mut self, name: &str, x: Value) -> Result<Value, CodegenError> {
        let f = *self
            .libs
            .f64_fns
            .get(name)
            .ok_or_else(|| unsupported(self.k, format!("f64 {name}")))?;
        let call = self.b.ins().call(f, &[x]);
        Ok(self.b.inst_results(call)[0])
    }

    fn unary(&mut self, u: UnaryOp, d: DType, x: Value, mode: Mode) -> Result<Value, CodegenError> {
        if !d.is_float() {
            let ty = scalar_ty(d);
            return Ok(match u {
                UnaryOp::Neg => self.b.ins().ineg(x),
                UnaryOp::Abs => self.b.ins().iabs(x),
                UnaryOp::Square => self.b.ins().imul(x, x),
                UnaryOp::Relu => {
                    let z = self.b.ins().iconst(ty, 0);
                    self.b.ins().smax(x, z)
                }
                other => return Err(unsupported(self.k, format!("{other:?} on {d}"))),
            });
        }
        let f64m = d == DType::F64;
        let one = |s: &mut Self| -> Value {
            let v = if f64m {
                s.b.ins().f64const(1.0)
            } else {
                s.b.ins().f32const(1.0)
            };
            s.splat_if(v, mode)
        };
        Ok(match u {
            UnaryOp::Neg => self.b.ins().fneg(x),
            UnaryOp::Abs => self.b.ins().fabs(x),
            UnaryOp::Square => self.b.ins().fmul(x, x),
            UnaryOp::Sqrt => self.b.ins().sqrt(x),
            UnaryOp::Rsqrt => {
                let s = self.b.ins().sqrt(x);
                let o = one(self);
                self.b.ins().fdiv(o, s)
            }
            UnaryOp::Recip => {
                let o = one(self);
                self.b.ins().fdiv(o, x)
            }
            UnaryOp::Relu => {
                // NaN or x > 0 keeps x, else +0 (the interpreter's rule).
                let z = if f64m {
                    self.b.ins().f64const(0.0)
                } else {
                    self.b.ins().f32const(0.0)
                };
                let z = self.splat_if(z, mode);
                let m = self.b.ins().fcmp(FloatCC::UnorderedOrGreaterThan, x, z);
                if mode == Mode::Vector {
                    let mut mm = self.math(mode);
                    mm.select(m, x, z)
                } else {
                    self.b.ins().select(m, x, z)
                }
            }
            UnaryOp::Exp | UnaryOp::Log | UnaryOp::Tanh | UnaryOp::Sigmoid | UnaryOp::Gelu
                if f64m =>
            {
                self.f64_unary(u, x)?
            }
            UnaryOp::Exp => self.math(mode).exp(x),
            UnaryOp::Log => self.math(mode).log(x),
            UnaryOp::Tanh => self.math(mode).tanh(x),
            UnaryOp::Sigmoid => self.math(mode).sigmoid(x),
            UnaryOp::Gelu => self.math(mode).gelu(x),
        })
    }

    /// f64 transcendentals call Rust's libm (f64 is not the fast path).
    fn f64_unary(&mut self, u: UnaryOp, x: Value) -> Result<Value, CodegenError> {
        Ok(match u {
            UnaryOp::Exp => self.f64_call("exp", x)?,
            UnaryOp::Log => self.f64_call("log", x)?,
            UnaryOp::Tanh => self.f64_call("tanh", x)?,
            UnaryOp::Sigmoid => self.f64_call("sigmoid", x)?,
            UnaryOp::Gelu => self.f64_call("gelu", x)?,
            other => return Err(unsupported(self.k, format!("f64 {other:?}"))),
        })
    }

    fn binary(
        &mut self,
        op: BinaryOp,
        d: DType,
        x: Value,
        y: Value,
        mode: Mode,
    ) -> Result<Value, CodegenError> {
        if mode == Mode::Vector && matches!(op, BinaryOp::Max | BinaryOp::Min) {
            // maxps/minps with NaN patched in from `x + y`: four
            // instructions where IEEE fmax/fmin lower to eight.
            let sum = self.b.ins().fadd(x, y);
            let mut m = self.math(mode);
            let r = if op == BinaryOp::Max {
                m.pmax(x, y)
            } else {
                m.pmin(x, y)
            };
            let nan = m.cmp(FloatCC::Unordered, x, y);
            return Ok(m.select(nan, sum, r));
        }
        let b = &mut self.b;
        if d.is_float() {
            return Ok(match op {
                BinaryOp::Add => b.ins().fadd(x, y),
                BinaryOp::Sub => b.ins().fsub(x, y),
                BinaryOp::Mul => b.ins().fmul(x, y),
                BinaryOp::Div => b.ins().fdiv(x, y),
                BinaryOp::Max => b.ins().fmax(x, y),
                BinaryOp::Min => b.ins().fmin(x, y),
            });
        }
        if d == DType::Bool {
            return Err(unsupported(self.k, format!("{op:?} on bool")));
        }
        let ty = scalar_ty(d);
        Ok(match op {
            BinaryOp::Add => b.ins().iadd(x, y),
            BinaryOp::Sub => b.ins().isub(x, y),
            BinaryOp::Mul => b.ins().imul(x, y),
            BinaryOp::Max => b.ins().smax(x, y),
            BinaryOp::Min => b.ins().smin(x, y),
            BinaryOp::Div => {
                // Truncating, x/0 == 0, MIN/-1 wraps: never trap.
                let zero = b.ins().iconst(ty, 0);
                let one = b.ins().iconst(ty, 1);
                let is0 = b.ins().icmp_imm_s(IntCC::Equal, y, 0);
                let ism1 = b.ins().icmp_imm_s(IntCC::Equal, y, -1);
                let bad = b.ins().bor(is0, ism1);
                let safe = b.ins().select(bad, one, y);
                let q = b.ins().sdiv(x, safe);
                let neg = b.ins().ineg(x);
                let q = b.ins().select(ism1, neg, q);
                b.ins().select(is0, zero, q)
            }
        })
    }

    fn cast(&mut self, x: Value, from: DType, to: DType) -> Result<Value, CodegenError> {
        let b = &mut self.b;
        let (ft, tt) = (scalar_ty(from), scalar_ty(to));
        let v = match (from, to) {
            _ if from == to => x,
            (_, DType::Bool) => {
                if from.is_float() {
                    let z = if ft == types::F64 {
                        b.ins().f64const(0.0)
                    } else {
                        b.ins().f32const(0.0)
                    };
                    b.ins().fcmp(FloatCC::NotEqual, x, z)
                } else {
                    b.ins().icmp_imm_s(IntCC::NotEqual, x, 0)
                }
            }
            (DType::Bool, t) if t.is_float() => {
                let w = b.ins().uextend(types::I32, x);
                b.ins().fcvt_from_sint(tt, w)
            }
            (DType::Bool, _) => b.ins().uextend(tt, x),
            (f, DType::F16 | DType::BF16) if f == DType::F64 || !f.is_float() => {
                // One rounding from the exact value (through f32 would round
                // twice, and i32 -> f32 already rounds above 2^24).
                let w = if f == DType::F64 {
                    x
                } else {
                    b.ins().fcvt_from_sint(types::F64, x)
                };
                let name = if to == DType::F16 {
                    "round_f16"
                } else {
                    "round_bf16"
                };
                let r = self.f64_call(name, w)?;
                self.b.ins().fdemote(types::F32, r)
            }
            (f, t) if f.is_float() && t.is_float() => {
                let v = match (ft, tt) {
                    (types::F32, types::F64) => b.ins().fpromote(types::F64, x),
                    (types::F64, types::F32) => b.ins().fdemote(types::F32, x),
                    _ => x,
                };
                let round = match t {
                    DType::F16 => Some(self.libs.round_f16),
                    DType::BF16 => Some(self.libs.round_bf16),
                    _ => None,
                };
                match round {
                    Some(f) => {
                        let call = self.b.ins().call(f, &[v]);
                        self.b.inst_results(call)[0]
                    }
                    None => v,
                }
            }
            (f, _) if f.is_float() => b.ins().fcvt_to_sint_sat(tt, x),
            (_, t) if t.is_float() => b.ins().fcvt_from_sint(tt, x),
            _ => {
                if ft.bits() < tt.bits() {
                    b.ins().sextend(tt, x)
                } else {
                    b.ins().ireduce(tt, x)
                }
            }
        };
        Ok(v)
    }
}
