//! The reduce stages' inner loops: identities, the fold of one step, f32
//! sums in blocks added in f64, and vector accumulators (max/min as one
//! `maxps`/`minps` per vector with NaN lanes collected on the side, or
//! filled by a fold helper when the row is already in memory; an f32 sum's
//! accumulators filled by the helper that computed its value, as it went).

use super::{scalar_ty, Lowerer, Mode, ACCS, LANES};
use crate::host::native::MATH_BLOCK;
use crate::CodegenError;
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::Variable;
use std::collections::HashMap;
use tilejit_ir::kernel::ExprId;
use tilejit_ir::{DType, ReduceOp};

/// Elements per block of a blocked f32 sum (a multiple of the unrolled
/// vector step), which is also the block its helper math runs in.
const SUM_BLOCK: i64 = MATH_BLOCK as i64;

impl Lowerer<'_, '_> {
    fn reduce_identity(&mut self, op: ReduceOp, d: DType) -> Value {
        let ty = scalar_ty(d);
        if d.is_float() {
            let v = match op {
                ReduceOp::Sum => 0.0,
                ReduceOp::Max => f64::NEG_INFINITY,
                ReduceOp::Min => f64::INFINITY,
                ReduceOp::Prod => 1.0,
            };
            if ty == types::F64 {
                self.b.ins().f64const(v)
            } else {
                self.b.ins().f32const(v as f32)
            }
        } else {
            let v = match (op, d) {
                (ReduceOp::Sum, _) => 0,
                (ReduceOp::Prod, _) => 1,
                (ReduceOp::Max, DType::I32) => i32::MIN as i64,
                (ReduceOp::Min, DType::I32) => i32::MAX as i64,
                (ReduceOp::Max, DType::I8) => i8::MIN as i64,
                (ReduceOp::Min, DType::I8) => i8::MAX as i64,
                (ReduceOp::Max, DType::I16) => i16::MIN as i64,
                (ReduceOp::Min, DType::I16) => i16::MAX as i64,
                (ReduceOp::Max, d) if d.is_unsigned() => 0,
                (ReduceOp::Min, DType::U8) => u8::MAX as i64,
                (ReduceOp::Min, DType::U16) => u16::MAX as i64,
                (ReduceOp::Min, DType::U32) => u32::MAX as i64,
                // u64::MAX's bits.
                (ReduceOp::Min, DType::U64) => -1,
                (ReduceOp::Max, _) => i64::MIN,
                (ReduceOp::Min, _) => i64::MAX,
            };
            self.b.ins().iconst(ty, v)
        }
    }

    /// Folds `b` into `a`, both of dtype `d` (any f32-ish dtype for
    /// vector lanes); an unsigned max/min is unsigned.
    fn combine(&mut self, op: ReduceOp, d: DType, a: Value, b: Value) -> Value {
        let float = d.is_float();
        match (op, float) {
            (ReduceOp::Max, false) if d.is_unsigned() => self.b.ins().umax(a, b),
            (ReduceOp::Min, false) if d.is_unsigned() => self.b.ins().umin(a, b),
            (ReduceOp::Sum, true) => self.b.ins().fadd(a, b),
            (ReduceOp::Max, true) => self.b.ins().fmax(a, b),
            (ReduceOp::Min, true) => self.b.ins().fmin(a, b),
            (ReduceOp::Prod, true) => self.b.ins().fmul(a, b),
            (ReduceOp::Sum, false) => self.b.ins().iadd(a, b),
            (ReduceOp::Max, false) => self.b.ins().smax(a, b),
            (ReduceOp::Min, false) => self.b.ins().smin(a, b),
            (ReduceOp::Prod, false) => self.b.ins().imul(a, b),
        }
    }

    /// Reduces `value` over `j0..j1`. An f32 (or f16/bf16) sum runs in
    /// blocks of [`SUM_BLOCK`] elements whose totals add up in f64, so its
    /// rounding error grows with the block length, not the row length (one
    /// long f32 accumulator drifts far from the exact sum on long rows).
    /// An f32 product multiplies in f64 and rounds once, as the reference
    /// and Sim do (blocks would not help: a product's roundings are
    /// relative, whatever the grouping; f32 accumulators were 3.0e-5
    /// relative off over 100,003 factors near 1, numpy's f32 `prod` 2.9e-5).
    pub(super) fn reduce_loop(
        &mut self,
        op: ReduceOp,
        value: ExprId,
        j0: Value,
        j1: Value,
    ) -> Result<Value, CodegenError> {
        let d = self.k.expr(value).dtype;
        if op == ReduceOp::Prod && scalar_ty(d) == types::F32 {
            return self.f64_product(value, j0, j1);
        }
        if op != ReduceOp::Sum || scalar_ty(d) != types::F32 {
            return self.reduce_block(op, value, j0, j1);
        }
        // Helper math runs per sum block, before the block's accumulators
        // exist: live across the helper calls, they would sit in stack
        // slots for the whole loop (calls clobber every vector register).
        let ops = self.block_ops(value, self.vectorizable(value, None));
        let zero = self.b.ins().f64const(0.0);
        let outer = self.b.declare_var(types::F64);
        self.b.def_var(outer, zero);
        let jb = self.b.declare_var(self.ptr);
        self.b.def_var(jb, j0);
        self.counted_loop(jb, j1, SUM_BLOCK, &mut |s, start| {
            let end = s.b.ins().iadd_imm_s(start, SUM_BLOCK);
            let end = s.b.ins().smin(end, j1);
            if !ops.is_empty() {
                s.helper_phase(&ops, value, None, true, start, end)?;
            }
            let part = s.reduce_block(op, value, start, end);
            s.block = None;
            let part = part?;
            let part = s.b.ins().fpromote(types::F64, part);
            let cur = s.b.use_var(outer);
            let sum = s.b.ins().fadd(cur, part);
            s.b.def_var(outer, sum);
            Ok(())
        })?;
        let total = self.b.use_var(outer);
        Ok(self.b.ins().fdemote(types::F32, total))
    }

    /// The product of the f32 `value` over `j0..j1`, in one scalar f64
    /// accumulator (every f32 factor is exact in f64; the result rounds
    /// once to f32). In element order, as the reference multiplies.
    fn f64_product(&mut self, value: ExprId, j0: Value, j1: Value) -> Result<Value, CodegenError> {
        let one = self.b.ins().f64const(1.0);
        let acc = self.b.declare_var(types::F64);
        self.b.def_var(acc, one);
        self.inner_loop(j0, j1, false, 1, &mut |s, j, mode| {
            let mut cache = HashMap::new();
            let v = s.eval(value, j, mode, &mut cache, true)?;
            let v = s.b.ins().fpromote(types::F64, v);
            let cur = s.b.use_var(acc);
            let next = s.b.ins().fmul(cur, v);
            s.b.def_var(acc, next);
            Ok(())
        })?;
        let total = self.b.use_var(acc);
        Ok(self.b.ins().fdemote(types::F32, total))
    }

    /// Reduces `value` over `j0..j1` with vector accumulators.
    fn reduce_block(
        &mut self,
        op: ReduceOp,
        value: ExprId,
        j0: Value,
        j1: Value,
    ) -> Result<Value, CodegenError> {
        let d = self.k.expr(value).dtype;
        let float = d.is_float();
        let vector = self.vectorizable(value, None);
        let ident = self.reduce_identity(op, d);
        let acc = self.b.declare_var(scalar_ty(d));
        self.b.def_var(acc, ident);
        let vaccs: Vec<Variable> = if vector {
            let vi = self.b.ins().splat(types::F32X4, ident);
            (0..ACCS)
                .map(|_| {
                    let v = self.b.declare_var(types::F32X4);
                    self.b.def_var(v, vi);
                    v
                })
                .collect()
        } else {
            Vec::new()
        };
        // Vector max/min folds with one maxps/minps (the operand order
        // Cranelift matches) and collects NaN lanes in a mask on the side:
        // IEEE fmax/fmin with NaN propagation lower to eight instructions.
        // One NaN mask per accumulator: a single mask would chain four
        // dependent `por`s through every unrolled iteration.
        let max_min = matches!(op, ReduceOp::Max | ReduceOp::Min);
        let nans: Option<Vec<Variable>> = (vector && float && max_min).then(|| {
            let zero = self.b.ins().iconst(types::I32, 0);
            let z = self.b.ins().splat(types::I32X4, zero);
            (0..ACCS)
                .map(|_| {
                    let v = self.b.declare_var(types::I32X4);
                    self.b.def_var(v, z);
                    v
                })
                .collect()
        });
        // A max/min of a row already in memory folds through a helper
        // that fills the four accumulators exactly as the vector loop
        // would, 8 or 16 lanes per instruction instead of 4; the scalar
        // tail stays.
        let fold = match (&nans, scalar_ty(d)) {
            (Some(_), types::F32) => self.fold_helper(op, value, j0, j1, ident)?,
            // An f32 sum whose value a helper just computed and added up.
            (None, types::F32) if vector && op == ReduceOp::Sum => self.block_sum_lanes(j0, j1),
            _ => None,
        };
        let mut u = 0usize;
        let mut body = |s: &mut Self, j: Value, mode: Mode| {
            let mut cache = HashMap::new();
            let v = s.eval(value, j, mode, &mut cache, true)?;
            let slot = u % ACCS;
            let var = if mode == Mode::Vector {
                u += 1;
                vaccs[slot]
            } else {
                acc
            };
            let cur = s.b.use_var(var);
            let n = match (mode, &nans) {
                (Mode::Vector, Some(nans)) => {
                    let is_nan = s.b.ins().fcmp(FloatCC::Unordered, v, v);
                    let seen = s.b.use_var(nans[slot]);
                    let seen = s.b.ins().bor(seen, is_nan);
                    s.b.def_var(nans[slot], seen);
                    let mut m = s.math(mode);
                    if op == ReduceOp::Max {
                        m.pmax(cur, v)
                    } else {
                        m.pmin(cur, v)
                    }
                }
                _ => s.combine(op, d, cur, v),
            };
            s.b.def_var(var, n);
            Ok(())
        };
        match fold {
            Some((tail, lanes)) => {
                for (k, &acc) in vaccs.iter().enumerate() {
                    let v = self.b.ins().load(
                        types::F32X4,
                        Self::aligned_flags(),
                        lanes,
                        16 * k as i32,
                    );
                    self.b.def_var(acc, v);
                    // The helper leaves NaN in the lanes that saw one.
                    if let Some(nans) = &nans {
                        let is_nan = self.b.ins().fcmp(FloatCC::Unordered, v, v);
                        self.b.def_var(nans[k], is_nan);
                    }
                }
                self.inner_loop(tail, j1, false, 1, &mut body)?;
            }
            None => self.blocked_loop(value, None, j0, j1, vector, ACCS as i64, &mut body)?,
        }
        let mut total = self.b.use_var(acc);
        if let Some(nans) = nans {
            let mut seen = self.b.use_var(nans[0]);
            for var in &nans[1..] {
                let m = self.b.use_var(*var);
                seen = self.b.ins().bor(seen, m);
            }
            let any = self.b.ins().vany_true(seen);
            let nan = self.b.ins().f32const(f32::NAN);
            total = self.b.ins().select(any, nan, total);
        }
        if vector {
            let mut v = self.b.use_var(vaccs[0]);
            for var in &vaccs[1..] {
                let w = self.b.use_var(*var);
                v = self.combine(op, DType::F32, v, w);
            }
            for lane in 0..LANES as u8 {
                let x = self.b.ins().extractlane(v, lane);
                total = self.combine(op, DType::F32, total, x);
            }
        }
        Ok(total)
    }
}
