//! Emitting one tile's instructions: loads (MTE2), the expression DAG and
//! stages on the vector unit, stores (MTE3), with UB slots assigned by
//! liveness.

use super::vector::Event;
use super::{float_text, unsupported};
use crate::CodegenError;
use std::fmt::Write;
use tilejit_ir::kernel::{Access, BufId, Expr, ExprId, Kernel, Stage};
use tilejit_ir::{BinaryOp, CmpOp, Lit, ReduceOp, UnaryOp};

/// What emitting one tile's instructions needs to know.
pub(super) struct TileCx<'a> {
    pub(super) k: &'a Kernel,
    pub(super) flat: bool,
    pub(super) long: bool,
    pub(super) shape: String,
    pub(super) vcv: &'static str,
    pub(super) slot_bytes: usize,
    pub(super) elem_base: usize,
    /// Where this buffer set starts in UB (the second set of a double-
    /// buffered kernel sits after the first).
    pub(super) ub_base: usize,
    pub(super) buffers: &'a [BufId],
    pub(super) access_list: &'a [&'a Access],
    /// Split long rows: per stage, the GM argument its chunk partials go
    /// to (register r26 holds the partial's index).
    pub(super) partials: Vec<Option<String>>,
}

impl TileCx<'_> {
    pub(super) fn base_reg(&self, a: usize) -> usize {
        5 + a
    }

    pub(super) fn param_reg(&self, p: usize) -> usize {
        5 + self.access_list.len() + p
    }

    pub(super) fn elem_addr(&self, i: usize) -> usize {
        self.ub_base + self.elem_base + i * 32
    }

    fn gm_of(&self, b: BufId) -> usize {
        self.buffers.iter().position(|&x| x == b).unwrap_or(0)
    }

    /// The GM element offset operand of access `a` at this tile, with the
    /// instructions (into `pre`) that compute it into `scratch`.
    fn offset(&self, a: usize, inner: i64, scratch: &str, pre: &mut String) -> String {
        let base = format!("r{}", self.base_reg(a));
        match (self.flat, self.long, inner) {
            (true, _, 0) => "0".into(),
            (true, _, 1) => "r0".into(),
            (true, _, s) => {
                let _ = writeln!(pre, "    mul {scratch}, r0, {s}");
                scratch.into()
            }
            (false, false, _) | (false, true, 0) => base,
            (false, true, 1) => {
                let _ = writeln!(pre, "    add {scratch}, {base}, r28");
                scratch.into()
            }
            (false, true, s) => {
                let _ = writeln!(
                    pre,
                    "    mul {scratch}, r28, {s}\n    add {scratch}, {scratch}, {base}"
                );
                scratch.into()
            }
        }
    }

    /// One tile's loads, vector ops and stores for `events`.
    pub(super) fn emit(
        &self,
        events: &[Event],
        last_use: &[usize],
        slots: usize,
    ) -> Result<(String, String, String), CodegenError> {
        let k = self.k;
        let (shape, vcv) = (&self.shape, self.vcv);
        let is_load = |e: ExprId| matches!(k.expr(e).expr, Expr::Load(_));
        let mut slot_of: Vec<Option<usize>> = vec![None; k.exprs.len()];
        let mut free: Vec<usize> = (0..slots).rev().collect();
        let mut expiring: Vec<(usize, usize)> = Vec::new(); // (last use, slot)
        let slot_addr = |sl: usize| self.ub_base + sl * self.slot_bytes;
        let (mut loads, mut v_ops, mut stores) = (String::new(), String::new(), String::new());
        let assign = |e: ExprId,
                      i: usize,
                      free: &mut Vec<usize>,
                      expiring: &mut Vec<(usize, usize)>|
         -> Option<usize> {
            let sl = free.pop()?;
            expiring.push((last_use[e.0 as usize].max(i), sl));
            Some(sl)
        };
        // Loads first: their slots are assigned up front so they can be
        // issued together at the start of the tile.
        for ev in events {
            if let Event::Eval(e) = *ev {
                if is_load(e) {
                    let sl = assign(e, 0, &mut free, &mut expiring)
                        .ok_or_else(|| unsupported(k, "more loads than UB slots"))?;
                    slot_of[e.0 as usize] = Some(sl);
                }
            }
        }
        for (i, ev) in events.iter().enumerate() {
            expiring.retain(|&(end, sl)| {
                if end < i {
                    free.push(sl);
                    false
                } else {
                    true
                }
            });
            match *ev {
                Event::Eval(e) => {
                    let node = k.expr(e);
                    let dt = node.dtype;
                    let sl = match slot_of[e.0 as usize] {
                        Some(sl) => sl,
                        None => {
                            let sl = assign(e, i, &mut free, &mut expiring)
                                .ok_or_else(|| unsupported(k, "an expression DAG wider than UB"))?;
                            slot_of[e.0 as usize] = Some(sl);
                            sl
                        }
                    };
                    let dst = slot_addr(sl);
                    let hdr = format!("{dt}, {shape}, 1, {vcv}, @0x{dst:x}");
                    let src = |x: ExprId| slot_addr(slot_of[x.0 as usize].unwrap_or(0));
                    match node.expr {
                        Expr::Load(l) => {
                            let acc = &k.loads[l as usize];
                            let gm = self.gm_of(acc.buf);
                            let inner = acc.inner_stride();
                            let off = self.offset(l as usize, inner, "r3", &mut loads);
                            // Loads read only the valid columns (none in a
                            // zero-column row), whatever width V computes.
                            let hdr = format!("{dt}, {shape}, 1, r2, @0x{dst:x}");
                            if inner == 1 {
                                let _ =
                                    writeln!(loads, "    ld {hdr}, b{gm}_{}, {off}, 0", acc.buf.0);
                            } else if inner != 0 {
                                // A transposed or strided view: element-strided load.
                                let _ = writeln!(
                                    loads,
                                    "    ldx {hdr}, b{gm}_{}, {off}, 0, {inner}",
                                    acc.buf.0
                                );
                            } else {
                                let ea = self.elem_addr(l as usize);
                                let _ = writeln!(
                                    loads,
                                    "    ld {dt}, 1x1, 1, 1, @0x{ea:x}, b{gm}_{}, {off}, 0",
                                    acc.buf.0
                                );
                                let _ = writeln!(v_ops, "    vbcast {hdr}, @0x{ea:x}");
                            }
                        }
                        Expr::Param(p) => {
                            let _ =
                                writeln!(v_ops, "    vdupr {hdr}, r{}", self.param_reg(p as usize));
                        }
                        Expr::Lit(l) => {
                            let v = match l {
                                Lit::Float(f) => f,
                                other => other.as_f64(),
                            };
                            let _ = writeln!(v_ops, "    vdup {hdr}, {}", float_text(v));
                        }
                        Expr::Unary(u, a) => {
                            let _ = writeln!(v_ops, "    {} {hdr}, @0x{:x}", unary_op(u), src(a));
                        }
                        Expr::Binary(b, x, y) => {
                            let _ = writeln!(
                                v_ops,
                                "    {} {hdr}, @0x{:x}, @0x{:x}",
                                binary_op(b),
                                src(x),
                                src(y)
                            );
                        }
                        Expr::Compare(c, x, y) => {
                            let cond = match c {
                                CmpOp::Lt => "lt",
                                CmpOp::Gt => "gt",
                                CmpOp::Le => "le",
                                CmpOp::Ge => "ge",
                                CmpOp::Eq => "eq",
                            };
                            let xdt = k.expr(x).dtype;
                            let _ = writeln!(v_ops, "    vcmp {xdt}, {shape}, 1, {vcv}, {cond}, @0x{dst:x}, @0x{:x}, @0x{:x}", src(x), src(y));
                        }
                        Expr::Select(c, x, y) => {
                            let _ = writeln!(
                                v_ops,
                                "    vsel {hdr}, @0x{:x}, @0x{:x}, @0x{:x}",
                                src(c),
                                src(x),
                                src(y)
                            );
                        }
                        Expr::Cast(x) => {
                            let from = k.expr(x).dtype;
                            let _ = writeln!(
                                v_ops,
                                "    vcast {dt}, {from}, {shape}, 1, {vcv}, @0x{dst:x}, @0x{:x}",
                                src(x)
                            );
                        }
                        Expr::Row(st) => {
                            let _ = writeln!(
                                v_ops,
                                "    vbrow {hdr}, @0x{:x}",
                                self.elem_addr(k.loads.len() + st as usize)
                            );
                        }
                    }
                }
                Event::Stage(si) => {
                    match &k.stages[si] {
                        Stage::Reduce { op, value } => {
                            let dt = k.expr(*value).dtype;
                            // The row reduction, and the binary op that folds
                            // two partials of it.
                            let (rop, combine) = match op {
                                ReduceOp::Sum => ("vrsum", "vadd"),
                                ReduceOp::Max => ("vrmax", "vmax"),
                                ReduceOp::Min => ("vrmin", "vmin"),
                            };
                            let sl = slot_addr(slot_of[value.0 as usize].unwrap_or(0));
                            let acc = self.elem_addr(k.loads.len() + si);
                            if let Some(Some(gm)) = self.partials.get(si) {
                                // Split rows: this chunk's partial goes to GM for the
                                // combine task.
                                let tmp = self.elem_addr(k.loads.len() + k.stages.len());
                                let _ = writeln!(
                                    v_ops,
                                    "    {rop} {dt}, {shape}, 1, r2, @0x{tmp:x}, @0x{sl:x}"
                                );
                                let _ = writeln!(
                                    stores,
                                    "    st {dt}, 1x1, 1, 1, {gm}, r26, 0, @0x{tmp:x}"
                                );
                            } else if self.long {
                                // This chunk's partial, folded into the row's accumulator.
                                let tmp = self.elem_addr(k.loads.len() + k.stages.len());
                                let _ = writeln!(
                                    v_ops,
                                    "    {rop} {dt}, {shape}, 1, r2, @0x{tmp:x}, @0x{sl:x}"
                                );
                                let _ = writeln!(v_ops, "    {combine} {dt}, 1x1, 1, 1, @0x{acc:x}, @0x{acc:x}, @0x{tmp:x}");
                            } else {
                                let _ = writeln!(
                                    v_ops,
                                    "    {rop} {dt}, {shape}, 1, r2, @0x{acc:x}, @0x{sl:x}"
                                );
                            }
                        }
                        Stage::Store { access, value } => {
                            let dt = k.expr(*value).dtype;
                            let sl = slot_addr(slot_of[value.0 as usize].unwrap_or(0));
                            let gm = self.gm_of(access.buf);
                            let a = self
                                .access_list
                                .iter()
                                .position(|x| std::ptr::eq(*x, access))
                                .unwrap_or(0);
                            let inner = access.inner_stride();
                            let off = self.offset(a, inner, "r4", &mut stores);
                            if inner == 0 || inner == 1 {
                                let vc = if inner == 1 { "r2" } else { "1" };
                                let _ = writeln!(
                                    stores,
                                    "    st {dt}, {shape}, 1, {vc}, b{gm}_{}, {off}, 0, @0x{sl:x}",
                                    access.buf.0
                                );
                            } else {
                                // A transposed or strided destination.
                                let _ = writeln!(
                                    stores,
                                    "    stx {dt}, {shape}, 1, r2, b{gm}_{}, {off}, 0, {inner}, @0x{sl:x}",
                                    access.buf.0
                                );
                            }
                        }
                    }
                }
            }
        }
        Ok((loads, v_ops, stores))
    }
}

fn unary_op(u: UnaryOp) -> &'static str {
    match u {
        UnaryOp::Neg => "vneg",
        UnaryOp::Abs => "vabs",
        UnaryOp::Square => "vsquare",
        UnaryOp::Relu => "vrelu",
        UnaryOp::Exp => "vexp",
        UnaryOp::Log => "vlog",
        UnaryOp::Sqrt => "vsqrt",
        UnaryOp::Rsqrt => "vrsqrt",
        UnaryOp::Recip => "vrecip",
        UnaryOp::Tanh => "vtanh",
        UnaryOp::Sigmoid => "vsigmoid",
        UnaryOp::Gelu => "vgelu",
    }
}

fn binary_op(b: BinaryOp) -> &'static str {
    match b {
        BinaryOp::Add => "vadd",
        BinaryOp::Sub => "vsub",
        BinaryOp::Mul => "vmul",
        BinaryOp::Div => "vdiv",
        BinaryOp::Max => "vmax",
        BinaryOp::Min => "vmin",
    }
}
