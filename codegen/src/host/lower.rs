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
//! strided inner accesses) runs the scalar emitter only. The emitter of an
//! expression's value at one point lives in `lower/expr.rs`, the reduce
//! stages' loops in `lower/reduce.rs`; vector loops whose values need
//! transcendentals or a division run in blocks through the AVX-512 or AVX2
//! helpers (`lower/block.rs`).

use super::layout::{reachable, reachable_until, storage_bytes, ArgLayout};
use crate::CodegenError;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, ExtFuncData, ExternalName, FuncRef, Function, InstBuilder, MemFlagsData, Signature,
    Type, UserExternalName, Value,
};
use cranelift_frontend::{FunctionBuilder, Variable};
use cranelift_module::FuncId;
use std::collections::HashMap;
use tilejit_ir::kernel::{Expr, ExprId, Kernel, Stage};
use tilejit_ir::ops::UnaryHost;
use tilejit_ir::DType;

mod block;
mod expr;
mod reduce;

/// Vector lanes of the f32 fast path.
const LANES: i64 = 4;

/// Vector accumulators of a reduce loop (its unroll factor). The max/min
/// fold helpers and the sum lanes of the math helpers fill exactly these:
/// `ACCS * LANES` = their 16 lanes.
const ACCS: usize = 4;
const _: () = assert!(ACCS as i64 * LANES == 16, "the fold helpers write 16 lanes");

/// Helper functions the generated code may call: all of them declared in
/// the module up front, each imported into the function only when the
/// lowering first calls it, so a kernel's IR lists only what it calls.
#[derive(Default)]
pub struct Libcalls {
    /// Every declared helper by symbol (`tj_exp`, `tj_pow`, `tj_ipow`,
    /// `tj_round_f16`, a block helper's symbol): its module id and
    /// signature.
    decls: HashMap<&'static str, (FuncId, Signature)>,
    /// Block helpers `fn(src, dst, n, s, pf, sum)`: their symbols by op
    /// name (`exp`, ..., `div`, `max`, `min`, `stream`; empty when the CPU
    /// lacks them or the options turn them off); see `lower/block.rs` and
    /// `native::BlockFn`.
    block_syms: HashMap<&'static str, &'static str>,
    /// The imports made so far, by symbol.
    refs: HashMap<&'static str, FuncRef>,
    /// The imports made so far, in order, to name them in the listing.
    imported: Vec<(FuncRef, &'static str)>,
}

impl Libcalls {
    /// Records `sym`, declared in the module as `fid` with `sig`.
    pub fn declare(&mut self, sym: &'static str, fid: FuncId, sig: Signature) {
        self.decls.insert(sym, (fid, sig));
    }

    /// Records the block helper for `op`, declared as `sym`.
    pub fn declare_block(
        &mut self,
        op: &'static str,
        sym: &'static str,
        fid: FuncId,
        sig: Signature,
    ) {
        self.declare(sym, fid, sig);
        self.block_syms.insert(op, sym);
    }

    /// Whether any block helper is declared.
    pub fn has_blocks(&self) -> bool {
        !self.block_syms.is_empty()
    }

    /// Whether the block helper for `op` is declared.
    pub fn has_block(&self, op: &str) -> bool {
        self.block_syms.contains_key(op)
    }

    /// The helper `sym`, imported into `func` on its first use; `None`
    /// when it is not declared.
    pub fn get(&mut self, func: &mut Function, sym: &str) -> Option<FuncRef> {
        if let Some(&f) = self.refs.get(sym) {
            return Some(f);
        }
        // As `Module::declare_func_in_func` imports a declaration (an
        // `Import` is never colocated).
        let (&sym, (fid, sig)) = self.decls.get_key_value(sym)?;
        let signature = func.import_signature(sig.clone());
        let name = func.declare_imported_user_function(UserExternalName {
            namespace: 0,
            index: fid.as_u32(),
        });
        let f = func.import_function(ExtFuncData {
            name: ExternalName::user(name),
            signature,
            colocated: false,
            patchable: false,
        });
        self.refs.insert(sym, f);
        self.imported.push((f, sym));
        Some(f)
    }

    /// The block helper for `op`, imported into `func` on its first use.
    pub fn block(&mut self, func: &mut Function, op: &str) -> Option<FuncRef> {
        let sym = *self.block_syms.get(op)?;
        self.get(func, sym)
    }

    /// The imports made, in order, with their symbols.
    pub fn imported(&self) -> &[(FuncRef, &'static str)] {
        &self.imported
    }
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

/// Where an access starts (its buffer plus offset) and its outer dims'
/// strides, from which a row loop rebases it.
struct Origin {
    ptr: Value,
    strides: Vec<Value>,
}

#[derive(Copy, Clone)]
enum Inner {
    Zero,
    One,
    /// Every other element (a stride-2 pooling's taps): its vector loads
    /// read two vectors and keep the even lanes.
    Two,
    Runtime(Value),
}

pub struct Lowerer<'a, 'b> {
    pub b: FunctionBuilder<'b>,
    k: &'a Kernel,
    layout: &'a ArgLayout,
    dtype_of_buf: &'a dyn Fn(usize) -> DType,
    fma: bool,
    libs: &'a mut Libcalls,
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
    /// The sixteen accumulator lanes the fold and sum helpers write.
    lanes_slot: Option<cranelift_codegen::ir::StackSlot>,
    /// The stage being emitted (its index in `k.stages`).
    stage: usize,
    /// Whether f32 store stages stream their output (the options ask for
    /// it and the helpers include `stream`; `block.rs`'s `stream_start`).
    stream: bool,
    /// The stack buffer a streaming store stage's block is computed into.
    stream_slot: Option<cranelift_codegen::ir::StackSlot>,
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
        // Signed and unsigned share a register type; unsigned ops pick
        // the unsigned meaning (`DType::is_unsigned`).
        DType::I32 | DType::U32 => types::I32,
        DType::I64 | DType::U64 => types::I64,
        DType::I16 | DType::U16 => types::I16,
        DType::Bool | DType::U8 | DType::I8 => types::I8,
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
        stream: bool,
        libs: &'a mut Libcalls,
    ) -> Lowerer<'a, 'b> {
        let stream = stream && libs.has_block("stream");
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
            lanes_slot: None,
            stage: 0,
            stream,
            stream_slot: None,
        }
    }

    /// The helper `sym`, imported on its first use (see [`Libcalls::get`]).
    fn libcall(&mut self, sym: &str) -> Option<FuncRef> {
        self.libs.get(self.b.func, sym)
    }

    /// The block helper for `op`, imported on its first use.
    fn block_fn(&mut self, op: &str) -> Option<FuncRef> {
        self.libs.block(self.b.func, op)
    }

    /// Flags of a load or store through a buffer, scratch row or block
    /// buffer: it cannot trap (the launch's bounds check), but only its
    /// element's alignment is known (a slice may start at any element), so
    /// it is not flagged aligned: on a CPU without AVX, Cranelift would fold
    /// a flagged vector load into an SSE instruction, which faults on data
    /// not 16-byte aligned.
    fn flags() -> MemFlagsData {
        MemFlagsData::new().with_notrap()
    }

    /// Flags of a load whose address is aligned to its size: the `bufs`
    /// and `args` arrays' 8-byte entries, a 64-byte aligned stack slot.
    fn aligned_flags() -> MemFlagsData {
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
        self.load_buffers(bufs_p);
        let dims = self.load_dims(args_p);
        let param_vals = self.load_params(args_p);
        let zero = self.iconst(0);
        self.params = param_vals.into_iter().map(|v| v.unwrap_or(zero)).collect();
        let origins = self.load_accesses(args_p);
        if self.layout.flat {
            self.run_stages(start, end, true)?;
        } else {
            self.run_rows(start, end, &dims, &origins, zero)?;
        }
        if self.stream_slot.is_some() {
            // Streaming stores are weakly ordered: fence them before the
            // caller's thread reports this range done.
            self.b.ins().fence();
        }
        let ok = self.iconst(0);
        self.b.ins().return_(&[ok]);
        self.b.seal_all_blocks();
        Ok(())
    }

    /// Loads the buffer and scratch-row pointers from the `bufs` array.
    fn load_buffers(&mut self, bufs_p: Value) {
        let nlocal = self.layout.buffers.len();
        for i in 0..nlocal + self.layout.scratch {
            let v = self
                .b
                .ins()
                .load(self.ptr, Self::aligned_flags(), bufs_p, (8 * i) as i32);
            if i < nlocal {
                self.bufs.push(v);
            } else {
                self.scratch.push(v);
            }
        }
    }

    /// Loads the `rank` launch dims from the head of the `args` array.
    fn load_dims(&mut self, args_p: Value) -> Vec<Value> {
        (0..self.layout.rank)
            .map(|d| {
                self.b
                    .ins()
                    .load(self.ptr, Self::aligned_flags(), args_p, (8 * d) as i32)
            })
            .collect()
    }

    /// Loads each param the kernel uses, converted once to the dtype its
    /// expressions use; `None` for a param no expression reads.
    fn load_params(&mut self, args_p: Value) -> Vec<Option<Value>> {
        let mut param_vals = vec![None; self.layout.params];
        for e in &self.k.exprs {
            if let Expr::Param(i) = e.expr {
                let slot = (8 * self.layout.param_slot(i as usize)) as i32;
                let raw = self
                    .b
                    .ins()
                    .load(types::I64, Self::aligned_flags(), args_p, slot);
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
                    // Any nonzero value is true, and a bool is 0 or 1.
                    DType::Bool => self.b.ins().icmp_imm_s(IntCC::NotEqual, raw, 0),
                    d => self.b.ins().ireduce(scalar_ty(d), raw),
                };
                param_vals[i as usize] = Some(v);
            }
        }
        param_vals
    }

    /// Sets up every access (strides, base pointer as a variable rebased
    /// per row) and returns each one's origin and outer strides.
    fn load_accesses(&mut self, args_p: Value) -> Vec<Origin> {
        let ptr = self.ptr;
        let rank = self.layout.rank;
        let all: Vec<tilejit_ir::kernel::Access> = self.k.accesses().cloned().collect();
        let mut origins: Vec<Origin> = Vec::with_capacity(all.len());
        for (a, acc) in all.iter().enumerate() {
            let lb = self.layout.access_buf[a];
            let esize = storage_bytes((self.dtype_of_buf)(lb)) as i64;
            let slot = self.layout.stride_slot(a);
            let strides: Vec<Value> = (0..rank)
                .map(|d| {
                    self.b
                        .ins()
                        .load(ptr, Self::aligned_flags(), args_p, (8 * (slot + d)) as i32)
                })
                .collect();
            let inner = match acc.fixed_inner_stride() {
                Some(0) => Inner::Zero,
                Some(1) => Inner::One,
                Some(2) => Inner::Two,
                _ => Inner::Runtime(strides[rank - 1]),
            };
            // The access's origin: its buffer plus its offset (a slice's
            // window, a concat operand's place).
            let offset = self.b.ins().load(
                ptr,
                Self::aligned_flags(),
                args_p,
                (8 * self.layout.offset_slot(a)) as i32,
            );
            let offset_bytes = self.b.ins().imul_imm_s(offset, esize);
            let origin = self.b.ins().iadd(self.bufs[lb], offset_bytes);
            let base = self.b.declare_var(ptr);
            self.b.def_var(base, origin);
            let row_step = (!self.layout.flat && rank >= 2)
                .then(|| self.b.ins().imul_imm_s(strides[rank - 2], esize));
            self.accesses.push(Access {
                base,
                inner,
                esize,
                row_step,
            });
            origins.push(Origin {
                ptr: origin,
                strides,
            });
        }
        origins
    }

    /// Emits `for r in start..end { rebase every access to row r; stages }`.
    fn run_rows(
        &mut self,
        start: Value,
        end: Value,
        dims: &[Value],
        origins: &[Origin],
        zero: Value,
    ) -> Result<(), CodegenError> {
        let rank = self.layout.rank;
        let row = self.b.declare_var(self.ptr);
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
            for (a, origin) in origins.iter().enumerate() {
                let mut off = zero;
                // `idx` has the rank - 1 outer dims: the zip skips the inner one.
                for (&i, &stride) in idx.iter().zip(&origin.strides) {
                    let t = s.b.ins().imul(i, stride);
                    off = s.b.ins().iadd(off, t);
                }
                let bytes = s.b.ins().imul_imm_s(off, s.accesses[a].esize);
                let base = s.b.ins().iadd(origin.ptr, bytes);
                s.b.def_var(s.accesses[a].base, base);
            }
            s.run_stages(zero, cols, false)
        })
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
                Expr::Cast(_) | Expr::Bitcast(_) => false,
                // Library calls (scalar), as the op table says.
                Expr::Binary(b, ..) if b.def().host.float.is_some() => false,
                Expr::Unary(u, _) if matches!(u.def().host, UnaryHost::Libcall(_)) => false,
                // Rounding to f16/bf16 is a scalar call.
                _ if is_low_precision(n.dtype) && !matches!(n.expr, Expr::Load(_)) => false,
                Expr::Compare(_, a, _) => is_f32ish(k.expr(a).dtype),
                Expr::Select(c, ..) => {
                    is_f32ish(n.dtype) && matches!(k.expr(c).expr, Expr::Compare(..))
                }
                // A stride-2 f32 read loads two vectors and shuffles; any
                // other stride stays scalar (four lane loads and inserts
                // made a transpose 15-40% slower than the scalar loop).
                Expr::Load(l) => match self.accesses[l as usize].inner {
                    Inner::Two => n.dtype == DType::F32,
                    Inner::Runtime(_) => false,
                    _ => is_f32ish(n.dtype),
                },
                // Each lane's address depends on its index.
                Expr::Gather { .. } => false,
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
            Inner::Two => {
                let off = self.b.ins().imul_imm_s(j, 2 * esize);
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
    /// `a`, inner index `j`. A bool is stored as `v != 0`: the buffer may be
    /// a `&mut [bool]`, where any other byte is undefined behaviour, and not
    /// every bool expression (a literal, a bool op) is sure to give 0 or 1.
    fn store(&mut self, a: usize, j: Value, v: Value) {
        let p = self.addr(a, j);
        let v = if (self.dtype_of_buf)(self.layout.access_buf[a]) == DType::Bool {
            self.b.ins().icmp_imm_s(IntCC::NotEqual, v, 0)
        } else {
            v
        };
        self.b.ins().store(Self::flags(), v, p, 0);
    }

    /// Address of element `j` of the scratch row of `slot` (holding `e`).
    fn scratch_addr(&mut self, slot: usize, e: ExprId, j: Value) -> Value {
        let esize = storage_bytes(self.k.expr(e).dtype) as i64;
        let off = self.b.ins().imul_imm_s(j, esize);
        self.b.ins().iadd(self.scratch[slot], off)
    }
}
