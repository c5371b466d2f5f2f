//! Expression emission: the value of an expression at one point of a
//! row (scalar, or four lanes), its ops, the f32 math (`math.rs`), f64
//! library calls, f16/bf16 rounding and casts.

use super::{scalar_ty, unsupported, Inner, Lowerer, Mode};
use crate::host::layout::reachable_until;
use crate::host::math::{Math, SIN_FAST_MAX, SIN_FAST_MAX_NO_FMA};
use crate::CodegenError;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, BlockArg, ConstantData, Endianness, InstBuilder, MemFlagsData, Value,
};
use std::collections::HashMap;
use tilejit_ir::kernel::{Expr, ExprId};
use tilejit_ir::ops::{Inline, MathFn, UnaryHost};
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

    /// Lanes 0 and 2 of `lo`, then 1 and 3 of `hi`: one `shufps`.
    fn even_lanes(&mut self, lo: Value, hi: Value) -> Value {
        let bytes: Vec<u8> = [0u8, 2, 5, 7]
            .iter()
            .flat_map(|&l| (0..4).map(move |i| l * 4 + i))
            .collect();
        let mask = self.b.func.dfg.immediates.push(ConstantData::from(bytes));
        let f = MemFlagsData::new().with_endianness(Endianness::Little);
        let a = self.b.ins().bitcast(types::I8X16, f, lo);
        let b = self.b.ins().bitcast(types::I8X16, f, hi);
        let s = self.b.ins().shuffle(a, b, mask);
        self.b.ins().bitcast(types::F32X4, f, s)
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
                    (Mode::Vector, Inner::Two) => {
                        // A stride-2 read (a pooling's taps): elements 0..4
                        // and 3..7, lanes 0, 2 of one and 1, 3 of the other
                        // (one `shufps`), never past the last element read.
                        let lo = self.b.ins().load(types::F32X4, Self::flags(), p, 0);
                        let hi = self.b.ins().load(types::F32X4, Self::flags(), p, 12);
                        self.even_lanes(lo, hi)
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
                } else if od.is_unsigned() {
                    // u8 lives in an `I8` register (u64 in `I64`): 200 must
                    // stay above 100.
                    let cc = match c {
                        CmpOp::Lt => IntCC::UnsignedLessThan,
                        CmpOp::Gt => IntCC::UnsignedGreaterThan,
                        CmpOp::Le => IntCC::UnsignedLessThanOrEqual,
                        CmpOp::Ge => IntCC::UnsignedGreaterThanOrEqual,
                        CmpOp::Eq => IntCC::Equal,
                    };
                    self.b.ins().icmp(cc, arg(x), arg(y))
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
            // Scalar only (`vectorizable` refuses it): the same bits as `d`.
            Expr::Bitcast(x) => {
                if mode == Mode::Vector {
                    return Err(unsupported(self.k, "a vector bitcast"));
                }
                self.b.ins().bitcast(
                    scalar_ty(d),
                    cranelift_codegen::ir::MemFlagsData::new(),
                    arg(x),
                )
            }
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
        let sym = match d {
            DType::F16 => "tj_round_f16",
            DType::BF16 => "tj_round_bf16",
            _ => return v,
        };
        let f = self
            .libcall(sym)
            .expect("the f16/bf16 rounding helpers are always declared");
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
        let f = self
            .libcall(name)
            .ok_or_else(|| unsupported(self.k, format!("f64 {name}")))?;
        let call = self.b.ins().call(f, &[x]);
        Ok(self.b.inst_results(call)[0])
    }

    /// A unary op, lowered as its table row says.
    fn unary(&mut self, u: UnaryOp, d: DType, x: Value, mode: Mode) -> Result<Value, CodegenError> {
        match u.def().host {
            UnaryHost::Inline(op) => self.inline_unary(op, d, x, mode),
            UnaryHost::Math { f64, .. } if d == DType::F64 => self.f64_call(f64.symbol, x),
            UnaryHost::Math { f32, f64 } if d.is_float() => self.math_fn(f32, f64.symbol, x, mode),
            UnaryHost::Libcall(c) if d.is_float() => self.libcall_unary(c.symbol, d, x),
            UnaryHost::Math { .. } | UnaryHost::Libcall(_) => {
                Err(unsupported(self.k, format!("{} on {d}", u.name())))
            }
        }
    }

    /// A float-only libcall on a scalar of dtype `d`: f32 operands are
    /// promoted, and the f64 result rounds once to f16/bf16 (the later
    /// rounding of the f32 it is demoted to is then exact).
    fn libcall_unary(&mut self, symbol: &str, d: DType, x: Value) -> Result<Value, CodegenError> {
        if d == DType::F64 {
            return self.f64_call(symbol, x);
        }
        let w = self.b.ins().fpromote(types::F64, x);
        let r = self.f64_call(symbol, w)?;
        let r = self.round_low_f64(r, d)?;
        Ok(self.b.ins().fdemote(types::F32, r))
    }

    /// An f64 rounded once to f16 or bf16 when `d` is one (through f32
    /// would round twice); any other `d` leaves it as it is.
    fn round_low_f64(&mut self, r: Value, d: DType) -> Result<Value, CodegenError> {
        match d {
            DType::F16 => self.f64_call("tj_round_f16_f64", r),
            DType::BF16 => self.f64_call("tj_round_bf16_f64", r),
            _ => Ok(r),
        }
    }

    /// An f32 inline math routine (scalar or four lanes); `f64` is the
    /// row's f64 libcall, which sin and cos fall back to far from zero.
    fn math_fn(
        &mut self,
        f: MathFn,
        f64: &str,
        x: Value,
        mode: Mode,
    ) -> Result<Value, CodegenError> {
        Ok(match f {
            MathFn::Exp => self.math(mode).exp(x),
            MathFn::Log => self.math(mode).log(x),
            MathFn::Tanh => self.math(mode).tanh(x),
            MathFn::Sigmoid => self.math(mode).sigmoid(x),
            MathFn::Gelu => self.math(mode).gelu(x),
            MathFn::Sin => self.sin_cos(true, f64, x, mode)?,
            MathFn::Cos => self.sin_cos(false, f64, x, mode)?,
            MathFn::Erf => self.math(mode).erf(x),
        })
    }

    fn inline_unary(
        &mut self,
        u: Inline,
        d: DType,
        x: Value,
        mode: Mode,
    ) -> Result<Value, CodegenError> {
        if d.is_unsigned() {
            // No value is negative: abs and relu keep it, sign is 0 or 1;
            // neg and square wrap as on any integer.
            let ty = scalar_ty(d);
            return Ok(match u {
                Inline::Neg => self.b.ins().ineg(x),
                Inline::Square => self.b.ins().imul(x, x),
                Inline::Abs | Inline::Relu | Inline::Floor | Inline::Ceil | Inline::Round => x,
                Inline::Sign => {
                    let nz = self.b.ins().icmp_imm_u(IntCC::NotEqual, x, 0);
                    let one = self.b.ins().iconst(ty, 1);
                    let z = self.b.ins().iconst(ty, 0);
                    self.b.ins().select(nz, one, z)
                }
                Inline::Sqrt | Inline::Rsqrt | Inline::Recip => {
                    return Err(unsupported(self.k, format!("{u:?} on {d}")))
                }
            });
        }
        if !d.is_float() {
            let ty = scalar_ty(d);
            return Ok(match u {
                Inline::Neg => self.b.ins().ineg(x),
                Inline::Abs => self.b.ins().iabs(x),
                Inline::Square => self.b.ins().imul(x, x),
                Inline::Relu => {
                    let z = self.b.ins().iconst(ty, 0);
                    self.b.ins().smax(x, z)
                }
                Inline::Floor | Inline::Ceil | Inline::Round => x,
                Inline::Sign => {
                    let z = self.b.ins().iconst(ty, 0);
                    let one = self.b.ins().iconst(ty, 1);
                    let m1 = self.b.ins().iconst(ty, -1);
                    let pos = self.b.ins().icmp(IntCC::SignedGreaterThan, x, z);
                    let neg = self.b.ins().icmp(IntCC::SignedLessThan, x, z);
                    let r = self.b.ins().select(pos, one, z);
                    self.b.ins().select(neg, m1, r)
                }
                Inline::Sqrt | Inline::Rsqrt | Inline::Recip => {
                    return Err(unsupported(self.k, format!("{u:?} on {d}")))
                }
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
            Inline::Neg => self.b.ins().fneg(x),
            Inline::Abs => self.b.ins().fabs(x),
            Inline::Square => self.b.ins().fmul(x, x),
            Inline::Sqrt => self.b.ins().sqrt(x),
            Inline::Rsqrt => {
                let s = self.b.ins().sqrt(x);
                let o = one(self);
                self.b.ins().fdiv(o, s)
            }
            Inline::Recip => {
                let o = one(self);
                self.b.ins().fdiv(o, x)
            }
            Inline::Relu => {
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
            Inline::Floor => self.b.ins().floor(x),
            Inline::Ceil => self.b.ins().ceil(x),
            // Ties to even (roundss/roundps mode 0).
            Inline::Round => self.b.ins().nearest(x),
            Inline::Sign => {
                // NaN fails every test and stays; -0 == 0 gives +0.
                let c = |s: &mut Self, v: f64| -> Value {
                    let v = if f64m {
                        s.b.ins().f64const(v)
                    } else {
                        s.b.ins().f32const(v as f32)
                    };
                    s.splat_if(v, mode)
                };
                let (z, o, m1) = (c(self, 0.0), c(self, 1.0), c(self, -1.0));
                let sel = |s: &mut Self, m: Value, a: Value, b: Value| -> Value {
                    if mode == Mode::Vector {
                        s.math(mode).select(m, a, b)
                    } else {
                        s.b.ins().select(m, a, b)
                    }
                };
                let pos = self.b.ins().fcmp(FloatCC::GreaterThan, x, z);
                let r = sel(self, pos, o, x);
                let neg = self.b.ins().fcmp(FloatCC::LessThan, x, z);
                let r = sel(self, neg, m1, r);
                let zero = self.b.ins().fcmp(FloatCC::Equal, x, z);
                sel(self, zero, z, r)
            }
        })
    }

    /// f32 sin or cos: [`Math::sin`] / [`Math::cos`], and where a lane's
    /// `|x|` is past the range that reduction is accurate for
    /// ([`SIN_FAST_MAX`], or [`SIN_FAST_MAX_NO_FMA`]; rare in practice), a
    /// branch to f64 `sin`/`cos` calls for the whole point (all four lanes).
    fn sin_cos(
        &mut self,
        sin: bool,
        name: &str,
        x: Value,
        mode: Mode,
    ) -> Result<Value, CodegenError> {
        let fast = if sin {
            self.math(mode).sin(x)
        } else {
            self.math(mode).cos(x)
        };
        let f = self
            .libcall(name)
            .ok_or_else(|| unsupported(self.k, format!("f64 {name}")))?;
        let lim = if self.fma {
            SIN_FAST_MAX
        } else {
            SIN_FAST_MAX_NO_FMA
        };
        let lim = self.b.ins().f32const(lim);
        let lim = self.splat_if(lim, mode);
        let ax = self.b.ins().fabs(x);
        // NaN is not big: the fast path gives NaN. inf is (libm: NaN).
        let big = self.b.ins().fcmp(FloatCC::GreaterThan, ax, lim);
        let any = if mode == Mode::Vector {
            self.b.ins().vany_true(big)
        } else {
            big
        };
        let ty = if mode == Mode::Vector {
            types::F32X4
        } else {
            types::F32
        };
        let slow = self.b.create_block();
        let done = self.b.create_block();
        let r = self.b.append_block_param(done, ty);
        self.b
            .ins()
            .brif(any, slow, &[], done, &[BlockArg::Value(fast)]);
        self.b.switch_to_block(slow);
        let call = |b: &mut cranelift_frontend::FunctionBuilder<'_>, v: Value| -> Value {
            let w = b.ins().fpromote(types::F64, v);
            let c = b.ins().call(f, &[w]);
            let r = b.inst_results(c)[0];
            b.ins().fdemote(types::F32, r)
        };
        let exact = if mode == Mode::Vector {
            let mut acc = x;
            for lane in 0..4u8 {
                let v = self.b.ins().extractlane(x, lane);
                let e = call(&mut self.b, v);
                acc = self.b.ins().insertlane(acc, e, lane);
            }
            acc
        } else {
            call(&mut self.b, x)
        };
        self.b.ins().jump(done, &[BlockArg::Value(exact)]);
        self.b.switch_to_block(done);
        Ok(r)
    }

    /// A two-operand libcall (a row's `BinaryHost` `Libcall2`/`Libcall2I`) on
    /// scalars of type `ty`, widened to the call's type `wide` (integers
    /// zero-extended if `unsigned`) and back.
    fn call2(
        &mut self,
        name: &str,
        ty: types::Type,
        wide: types::Type,
        unsigned: bool,
        x: Value,
        y: Value,
    ) -> Result<Value, CodegenError> {
        let f = self
            .libcall(name)
            .ok_or_else(|| unsupported(self.k, format!("libcall {name}")))?;
        let widen = |b: &mut cranelift_frontend::FunctionBuilder<'_>, v: Value| match (ty, wide) {
            _ if ty == wide => v,
            (types::F32, _) => b.ins().fpromote(wide, v),
            _ if unsigned => b.ins().uextend(wide, v),
            _ => b.ins().sextend(wide, v),
        };
        let (a, c) = (widen(&mut self.b, x), widen(&mut self.b, y));
        let call = self.b.ins().call(f, &[a, c]);
        let r = self.b.inst_results(call)[0];
        Ok(match (ty, wide) {
            _ if ty == wide => r,
            (types::F32, _) => self.b.ins().fdemote(ty, r),
            _ => self.b.ins().ireduce(ty, r),
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
        // Library calls, on scalars only (`vectorizable` keeps these kernels
        // scalar): f64 pow and numpy's mod, exact in f64 for f32 operands.
        let host = op.def().host;
        match (host.float, host.int) {
            (Some(c), _) if d.is_float() => {
                return self.call2(c.symbol, scalar_ty(d), types::F64, false, x, y);
            }
            (_, Some(c)) if d.is_int() => {
                let u = d.is_unsigned();
                return self.call2(c.symbol, scalar_ty(d), types::I64, u, x, y);
            }
            _ => {}
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
                BinaryOp::Pow | BinaryOp::Rem => {
                    return Err(unsupported(self.k, format!("{op:?} inline")));
                }
                // Type inference rejects floats for these.
                BinaryOp::BitAnd
                | BinaryOp::BitOr
                | BinaryOp::BitXor
                | BinaryOp::Shl
                | BinaryOp::Shr => return Err(unsupported(self.k, format!("{op:?} on floats"))),
            });
        }
        if d == DType::Bool {
            return Err(unsupported(self.k, format!("{op:?} on bool")));
        }
        let ty = scalar_ty(d);
        // Cranelift's shifts take the count modulo the width; the table's
        // shift out every bit for a count (read unsigned) of at least it.
        let bits = i64::from(ty.bits());
        match op {
            BinaryOp::BitAnd => return Ok(b.ins().band(x, y)),
            BinaryOp::BitOr => return Ok(b.ins().bor(x, y)),
            BinaryOp::BitXor => return Ok(b.ins().bxor(x, y)),
            BinaryOp::Shl => {
                let big = b
                    .ins()
                    .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, y, bits);
                let zero = b.ins().iconst(ty, 0);
                let r = b.ins().ishl(x, y);
                return Ok(b.ins().select(big, zero, r));
            }
            BinaryOp::Shr if d.is_unsigned() => {
                let big = b
                    .ins()
                    .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, y, bits);
                let zero = b.ins().iconst(ty, 0);
                let r = b.ins().ushr(x, y);
                return Ok(b.ins().select(big, zero, r));
            }
            BinaryOp::Shr => {
                let big = b
                    .ins()
                    .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, y, bits);
                let last = b.ins().iconst(ty, bits - 1);
                let n = b.ins().select(big, last, y);
                return Ok(b.ins().sshr(x, n));
            }
            _ => {}
        }
        if d.is_unsigned() {
            return Ok(match op {
                BinaryOp::Add => b.ins().iadd(x, y),
                BinaryOp::Sub => b.ins().isub(x, y),
                BinaryOp::Mul => b.ins().imul(x, y),
                BinaryOp::Max => b.ins().umax(x, y),
                BinaryOp::Min => b.ins().umin(x, y),
                BinaryOp::Div | BinaryOp::Rem => {
                    // Unsigned: floor is truncation and `x / 0 == x % 0 ==
                    // 0` (dividing by 1 instead, which never traps).
                    let zero = b.ins().iconst(ty, 0);
                    let one = b.ins().iconst(ty, 1);
                    let is0 = b.ins().icmp_imm_u(IntCC::Equal, y, 0);
                    let safe = b.ins().select(is0, one, y);
                    let r = if op == BinaryOp::Div {
                        b.ins().udiv(x, safe)
                    } else {
                        b.ins().urem(x, safe)
                    };
                    b.ins().select(is0, zero, r)
                }
                BinaryOp::Pow => return Err(unsupported(self.k, "Pow inline")),
                BinaryOp::BitAnd
                | BinaryOp::BitOr
                | BinaryOp::BitXor
                | BinaryOp::Shl
                | BinaryOp::Shr => unreachable!("lowered above"),
            });
        }
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
            BinaryOp::Rem => {
                // numpy's mod: x % 0 == 0 and MIN % -1 == 0 (both divide by
                // 1 instead, which never traps), then into y's sign.
                let one = b.ins().iconst(ty, 1);
                let is0 = b.ins().icmp_imm_s(IntCC::Equal, y, 0);
                let ism1 = b.ins().icmp_imm_s(IntCC::Equal, y, -1);
                let bad = b.ins().bor(is0, ism1);
                let safe = b.ins().select(bad, one, y);
                let r = b.ins().srem(x, safe);
                let s = b.ins().bxor(r, y);
                let differ = b.ins().icmp_imm_s(IntCC::SignedLessThan, s, 0);
                let nz = b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
                let adj = b.ins().band(differ, nz);
                let ry = b.ins().iadd(r, y);
                b.ins().select(adj, ry, r)
            }
            BinaryOp::Pow => return Err(unsupported(self.k, "Pow inline")),
            BinaryOp::BitAnd
            | BinaryOp::BitOr
            | BinaryOp::BitXor
            | BinaryOp::Shl
            | BinaryOp::Shr => {
                unreachable!("lowered above")
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
            // bool, u8 and i8 are all `I8` (a cast between same-width
            // integers keeps the bits).
            (DType::Bool, _) if tt == ft => x,
            (DType::Bool, _) => b.ins().uextend(tt, x),
            (f, DType::F16 | DType::BF16) if f == DType::F64 || !f.is_float() => {
                // One rounding from the exact value (through f32 would round
                // twice, and i32 -> f32 already rounds above 2^24).
                let w = if f == DType::F64 {
                    x
                } else if f == DType::U64 {
                    b.ins().fcvt_from_uint(types::F64, x)
                } else {
                    let i = widen_int(b, x, f, types::I64);
                    b.ins().fcvt_from_sint(types::F64, i)
                };
                let r = self.round_low_f64(w, to)?;
                self.b.ins().fdemote(types::F32, r)
            }
            (f, t) if f.is_float() && t.is_float() => {
                let v = match (ft, tt) {
                    (types::F32, types::F64) => b.ins().fpromote(types::F64, x),
                    (types::F64, types::F32) => b.ins().fdemote(types::F32, x),
                    _ => x,
                };
                self.round_low(v, t)
            }
            (f, DType::U8 | DType::I8 | DType::U16 | DType::I16) if f.is_float() => {
                // Saturate in i32 (NaN -> 0), then clamp to the 8- or
                // 16-bit range: `as u8` / `as i8` / `as u16` / `as i16`.
                let (lo, hi) = match to {
                    DType::U8 => (0, u8::MAX as i64),
                    DType::I8 => (i8::MIN as i64, i8::MAX as i64),
                    DType::U16 => (0, u16::MAX as i64),
                    _ => (i16::MIN as i64, i16::MAX as i64),
                };
                let w = b.ins().fcvt_to_sint_sat(types::I32, x);
                let lo = b.ins().iconst(types::I32, lo);
                let hi = b.ins().iconst(types::I32, hi);
                let w = b.ins().smax(w, lo);
                let w = b.ins().smin(w, hi);
                b.ins().ireduce(tt, w)
            }
            // u32 and u64: `as` saturates at 0 and the max, NaN -> 0.
            (f, t) if f.is_float() && t.is_unsigned() => b.ins().fcvt_to_uint_sat(tt, x),
            (f, _) if f.is_float() => b.ins().fcvt_to_sint_sat(tt, x),
            (DType::U32, t) if t.is_float() => b.ins().fcvt_from_uint(tt, x),
            (DType::U64, t) if t.is_float() => {
                // Through f64, as the interpreter rounds (once for f64).
                let w = b.ins().fcvt_from_uint(types::F64, x);
                if tt == types::F64 {
                    w
                } else {
                    b.ins().fdemote(tt, w)
                }
            }
            (f, t) if t.is_float() => {
                // 8- and 16-bit through i32 (zero- or sign-extended, exact).
                let w = if ft.bits() < 32 {
                    widen_int(b, x, f, types::I32)
                } else {
                    x
                };
                b.ins().fcvt_from_sint(tt, w)
            }
            (f, _) => {
                if ft.bits() < tt.bits() {
                    widen_int(b, x, f, tt)
                } else if ft.bits() > tt.bits() {
                    b.ins().ireduce(tt, x)
                } else {
                    // u8 <-> i8, u32 <-> i32, ...: the same bits.
                    x
                }
            }
        };
        Ok(v)
    }
}

/// Integer `x` of dtype `d` extended to `to` (at least as wide): zero-
/// extended for unsigned dtypes, sign-extended otherwise.
fn widen_int(
    b: &mut cranelift_frontend::FunctionBuilder<'_>,
    x: Value,
    d: DType,
    to: types::Type,
) -> Value {
    let ty = scalar_ty(d);
    if ty == to {
        x
    } else if d.is_unsigned() {
        b.ins().uextend(to, x)
    } else {
        b.ins().sextend(to, x)
    }
}
