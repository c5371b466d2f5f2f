//! Expression emission: the value of an expression at one point of a
//! row (scalar, or four lanes), its ops, the f32 math (`math.rs`), f64
//! library calls, f16/bf16 rounding and casts.

use super::{scalar_ty, unsupported, Inner, Lowerer, Mode};
use crate::host::layout::reachable_until;
use crate::host::math::Math;
use crate::CodegenError;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, Value};
use std::collections::HashMap;
use tilejit_ir::kernel::{Expr, ExprId};
use tilejit_ir::{BinaryOp, CmpOp, DType, Lit, UnaryOp};

impl<'b> Lowerer<'_, 'b> {
    /// Emits the value of `root` at inner index `j`, with a per-point cache.
    /// `inner` is false for per-row evaluation (scratch is not read there).
    pub(super) fn eval(
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

    pub(super) fn math(&mut self, mode: Mode) -> Math<'_, 'b> {
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
            Expr::Gather {
                load,
                index,
                stride,
                len,
            } => {
                if mode == Mode::Vector {
                    return Err(unsupported(self.k, "a vector gather"));
                }
                let i = arg(index);
                let i = match self.k.expr(index).dtype {
                    DType::I64 => i,
                    _ => self.b.ins().sextend(types::I64, i),
                };
                // Unsigned, so a negative index is out of range too.
                let inside = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, i, len);
                let (read, stop) = (self.b.create_block(), self.b.create_block());
                self.b.ins().brif(inside, read, &[], stop, &[]);
                self.b.switch_to_block(stop);
                self.b.seal_block(stop);
                let status = self.b.ins().iconst(types::I64, len + 1);
                self.b.ins().return_(&[status]);
                self.b.switch_to_block(read);
                self.b.seal_block(read);
                let l = load as usize;
                let p = self.addr(l, j);
                let off = self.b.ins().imul_imm_s(i, stride * self.accesses[l].esize);
                let p = self.b.ins().iadd(p, off);
                self.b.ins().load(scalar_ty(d), Self::flags(), p, 0)
            }
        };
        Ok(match n.expr {
            // Loads read rounded values; casts and literals round themselves.
            Expr::Load(_) | Expr::Gather { .. } | Expr::Cast(_) | Expr::Lit(_) | Expr::Row(_) => v,
            _ => self.round_low(v, d),
        })
    }

    /// `v` rounded to `d` when `d` is f16 or bf16 (scalar values only:
    /// such values never take the vector path).
    pub(super) fn round_low(&mut self, v: Value, d: DType) -> Value {
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
