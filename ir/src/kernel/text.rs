//! The text form of the kernel IR: `Display` prints a [`KernelProgram`] and
//! [`parse_program`] reads it back to an equal program. Golden tests,
//! `TILEJIT_DUMP` and the kernel cache inspector use it.
//!
//! ```text
//! kernels {
//!   buffer b0 = input 0 : f32[4,8]
//!   buffer b1 = temp : f32[4,1]
//!   params [f32]
//!   kernel reduce_sum domain=[4,8] ops=[reduce_sum] {
//!     load b0 strides=[8,1]
//!     %0 = load 0 : f32
//!     stage reduce_sum %0
//!     %1 = row 0 : f32
//!     stage store b1 strides=[1,0] = %1
//!   }
//!   return b1 as f32[4,1]
//! }
//! ```
//! Expression lines and stage lines interleave in arena order; a `row N`
//! expression names reduce stage N. `scratch %N` marks a scratch value and
//! `matmul bA x bB -> bC batch=.. m=.. k=.. n=..` a kernel's matmul (then
//! `a_view=[offset,bs,rs,cs]` / `b_view=..` for an operand read in place).

use super::{
    Access, BufDecl, BufId, BufKind, Expr, ExprId, ExprNode, Kernel, KernelProgram, MatMul,
    MatView, ProgramOutput, Stage,
};
use crate::dtype::DType;
use crate::error::IrError;
use crate::graph::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::shape::{Shape, TensorType};
use crate::text::{lit_text, parse_lit_text};
use std::fmt::{self, Write};

fn list<T: fmt::Display>(items: &[T]) -> String {
    let v: Vec<String> = items.iter().map(|x| x.to_string()).collect();
    format!("[{}]", v.join(","))
}

fn expr_text(k: &Kernel, e: &ExprNode) -> String {
    let r = |id: ExprId| format!("%{}", id.0);
    match e.expr {
        Expr::Load(i) => format!("load {i}"),
        Expr::Param(i) => format!("param {i}"),
        Expr::Lit(l) => format!("lit {}", lit_text(l, e.dtype)),
        Expr::Unary(u, a) => format!("{} {}", u.text(), r(a)),
        Expr::Binary(b, x, y) => format!("{} {}, {}", b.text(), r(x), r(y)),
        Expr::Compare(c, x, y) => format!("{} {}, {}", c.text(), r(x), r(y)),
        Expr::Select(c, x, y) => format!("select {}, {}, {}", r(c), r(x), r(y)),
        Expr::Cast(a) => format!("cast {} from {}", r(a), k.expr(a).dtype),
        Expr::Bitcast(a) => format!("bitcast {} from {}", r(a), k.expr(a).dtype),
        Expr::Row(s) => format!("row {s}"),
        Expr::Gather {
            load,
            index,
            stride,
            len,
        } => format!("gather {load}, {}, {stride}, {len}", r(index)),
    }
}

impl Kernel {
    /// Writes this kernel's block (used by the program's `Display` and by
    /// the kernel cache inspector).
    pub fn write_text(&self, f: &mut impl Write, indent: &str) -> fmt::Result {
        writeln!(
            f,
            "{indent}kernel {} domain={} ops=[{}] {{",
            self.name,
            list(&self.domain),
            self.ops.join(",")
        )?;
        if let Some(m) = &self.matmul {
            write!(
                f,
                "{indent}  matmul b{} x b{} -> b{} batch={} m={} k={} n={}",
                m.a.0, m.b.0, m.out.0, m.batch, m.m, m.k, m.n
            )?;
            if let Some(ic) = &m.im2col {
                let mut v = vec![ic.c, ic.h, ic.w];
                v.extend(ic.window.text_list().into_iter().map(|x| x as usize));
                write!(f, " im2col={}", list(&v))?;
            }
            for (name, v) in [("a_view", m.a_view), ("b_view", m.b_view)] {
                if let Some(v) = v {
                    let [bs, rs, cs] = v.strides;
                    write!(f, " {name}={}", list(&[v.offset, bs, rs, cs]))?;
                }
            }
            if m.nchw {
                write!(f, " nchw")?;
            }
            writeln!(f)?;
        }
        for l in &self.loads {
            writeln!(
                f,
                "{indent}  load b{} strides={}{}",
                l.buf.0,
                list(&l.strides),
                offset_text(l)
            )?;
        }
        // Stages are printed right after the last expression they need, so
        // the text reads in execution order.
        // Positions never decrease, so parsing sees the stages in order.
        let mut stage_at: Vec<Vec<&Stage>> = vec![Vec::new(); self.exprs.len() + 1];
        let mut pos = 0;
        for s in &self.stages {
            let v = match s {
                Stage::Reduce { value, .. } | Stage::Store { value, .. } => value.0 as usize,
            };
            pos = v.max(pos).min(self.exprs.len());
            stage_at[pos].push(s);
        }
        for (i, e) in self.exprs.iter().enumerate() {
            writeln!(f, "{indent}  %{i} = {} : {}", expr_text(self, e), e.dtype)?;
            if self.scratch.contains(&ExprId(i as u32)) {
                writeln!(f, "{indent}  scratch %{i}")?;
            }
            for s in &stage_at[i] {
                match s {
                    Stage::Reduce { op, value } => {
                        writeln!(f, "{indent}  stage {} %{}", op.text(), value.0)?
                    }
                    Stage::Store { access, value } => writeln!(
                        f,
                        "{indent}  stage store b{} strides={}{} = %{}",
                        access.buf.0,
                        list(&access.strides),
                        offset_text(access),
                        value.0
                    )?,
                }
            }
        }
        writeln!(f, "{indent}}}")
    }

    /// The kernel's text block on its own.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = self.write_text(&mut s, "");
        s
    }
}

impl fmt::Display for KernelProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "kernels {{")?;
        for (i, b) in self.buffers.iter().enumerate() {
            let kind = match b.kind {
                BufKind::Input(n) => format!("input {n}"),
                BufKind::Constant(n) => format!("const {n}"),
                BufKind::Temp => "temp".to_string(),
            };
            writeln!(f, "  buffer b{i} = {kind} : {}", b.ty)?;
        }
        writeln!(f, "  inputs {}", list(&self.inputs))?;
        writeln!(f, "  params {}", list(&self.params))?;
        for k in &self.kernels {
            k.write_text(f, "  ")?;
        }
        let outs: Vec<String> = self
            .outputs
            .iter()
            .map(|o| match o {
                ProgramOutput::Buffer(b, ty) => format!("b{} as {ty}", b.0),
                ProgramOutput::Param(i, d) => format!("param {i} as {d}"),
            })
            .collect();
        writeln!(f, "  return {}", outs.join(", "))?;
        writeln!(f, "}}")
    }
}

struct P {
    line: usize,
}

impl P {
    fn err(&self, m: impl Into<String>) -> IrError {
        IrError::Parse {
            line: self.line,
            message: m.into(),
        }
    }
    fn buf(&self, t: &str) -> Result<BufId, IrError> {
        t.trim()
            .strip_prefix('b')
            .and_then(|n| n.parse().ok())
            .map(BufId)
            .ok_or_else(|| self.err(format!("expected a buffer `bN`, found `{t}`")))
    }
    fn expr(&self, t: &str, len: usize) -> Result<ExprId, IrError> {
        let id = t
            .trim()
            .strip_prefix('%')
            .and_then(|n| n.parse::<u32>().ok())
            .ok_or_else(|| self.err(format!("expected `%N`, found `{t}`")))?;
        if id as usize >= len {
            return Err(self.err(format!("%{id} is used before it is defined")));
        }
        Ok(ExprId(id))
    }
    fn num<T: std::str::FromStr>(&self, t: &str) -> Result<T, IrError> {
        t.trim()
            .parse()
            .map_err(|_| self.err(format!("bad number `{t}`")))
    }
    fn list<T: std::str::FromStr>(&self, t: &str) -> Result<Vec<T>, IrError> {
        let inner = t
            .trim()
            .strip_prefix('[')
            .and_then(|x| x.strip_suffix(']'))
            .ok_or_else(|| self.err(format!("expected `[...]`, found `{t}`")))?;
        inner
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| self.num(s))
            .collect()
    }
    fn ty(&self, t: &str) -> Result<TensorType, IrError> {
        let t = t.trim();
        let open = t
            .find('[')
            .ok_or_else(|| self.err(format!("bad type `{t}`")))?;
        let dtype = self.dtype(&t[..open])?;
        let dims: Vec<usize> = self.list(&t[open..])?;
        let shape = Shape::new(&dims).map_err(|e| self.err(e.to_string()))?;
        Ok(TensorType::new(dtype, shape))
    }
    fn dtype(&self, t: &str) -> Result<DType, IrError> {
        DType::from_name(t.trim()).ok_or_else(|| self.err(format!("unknown dtype `{t}`")))
    }
    /// `bN` and `strides=[..]`, with ` offset=N` after it if not zero.
    fn access(&self, b: &str, rest: &str) -> Result<Access, IrError> {
        let (strides, offset) = match rest.trim().split_once(' ') {
            Some((s, o)) => (s, self.num::<i64>(self.attr(o, "offset")?)?),
            None => (rest, 0),
        };
        Ok(Access {
            buf: self.buf(b)?,
            strides: self.list(self.attr(strides, "strides")?)?,
            offset,
        })
    }

    fn attr<'a>(&self, t: &'a str, key: &str) -> Result<&'a str, IrError> {
        t.trim()
            .strip_prefix(key)
            .and_then(|x| x.strip_prefix('='))
            .ok_or_else(|| self.err(format!("expected `{key}=...`, found `{t}`")))
    }
}

/// ` offset=N`, or nothing for offset 0.
fn offset_text(a: &Access) -> String {
    match a.offset {
        0 => String::new(),
        o => format!(" offset={o}"),
    }
}

/// Parses the text form back into a program.
pub fn parse_program(text: &str) -> Result<KernelProgram, IrError> {
    let mut p = P { line: 0 };
    let mut prog = KernelProgram::default();
    let mut cur: Option<Kernel> = None;
    for (i, raw) in text.lines().enumerate() {
        p.line = i + 1;
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() || line == "kernels {" {
            continue;
        }
        if let Some(k) = cur.as_mut() {
            if line == "}" {
                prog.kernels.extend(cur.take());
                continue;
            }
            parse_kernel_line(&p, k, line)?;
            continue;
        }
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "}" => {}
            "buffer" => {
                let (lhs, ty) = rest
                    .split_once(" : ")
                    .ok_or_else(|| p.err("expected `buffer bN = kind : type`"))?;
                let (name, kind) = lhs.split_once('=').ok_or_else(|| p.err("missing `=`"))?;
                if p.buf(name)?.0 as usize != prog.buffers.len() {
                    return Err(p.err("buffers must be numbered in order"));
                }
                let kind = kind.trim();
                let kind = if kind == "temp" {
                    BufKind::Temp
                } else if let Some(n) = kind.strip_prefix("input ") {
                    BufKind::Input(p.num(n)?)
                } else if let Some(n) = kind.strip_prefix("const ") {
                    BufKind::Constant(p.num(n)?)
                } else {
                    return Err(p.err(format!("unknown buffer kind `{kind}`")));
                };
                prog.buffers.push(BufDecl {
                    ty: p.ty(ty)?,
                    kind,
                });
            }
            "inputs" => {
                let inner = strip_brackets(&p, rest)?;
                prog.inputs = split_types(inner)
                    .iter()
                    .map(|t| p.ty(t))
                    .collect::<Result<_, _>>()?;
            }
            "params" => {
                let inner = strip_brackets(&p, rest)?;
                prog.params = inner
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(|s| p.dtype(s))
                    .collect::<Result<_, _>>()?;
            }
            "kernel" => {
                let mut parts = rest.split_whitespace();
                let name = parts.next().ok_or_else(|| p.err("kernel needs a name"))?;
                let domain: Vec<usize> = p.list(p.attr(parts.next().unwrap_or(""), "domain")?)?;
                if domain.is_empty() {
                    return Err(p.err("a kernel's domain has rank >= 1"));
                }
                let ops_text = p.attr(parts.next().unwrap_or(""), "ops")?;
                let ops = strip_brackets(&p, ops_text)?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| intern_op(s).ok_or_else(|| p.err(format!("unknown op `{s}`"))))
                    .collect::<Result<_, _>>()?;
                cur = Some(Kernel {
                    name: name.to_string(),
                    domain,
                    loads: Vec::new(),
                    exprs: Vec::new(),
                    scratch: Vec::new(),
                    stages: Vec::new(),
                    matmul: None,
                    ops,
                });
            }
            "return" => {
                for item in split_types(rest) {
                    let (lhs, ty) = item
                        .split_once(" as ")
                        .ok_or_else(|| p.err("expected `bN as type`"))?;
                    let lhs = lhs.trim();
                    prog.outputs
                        .push(if let Some(n) = lhs.strip_prefix("param ") {
                            ProgramOutput::Param(p.num(n)?, p.dtype(ty)?)
                        } else {
                            ProgramOutput::Buffer(p.buf(lhs)?, p.ty(ty)?)
                        });
                }
            }
            other => return Err(p.err(format!("unexpected `{other}`"))),
        }
    }
    if cur.is_some() {
        return Err(p.err("unterminated kernel"));
    }
    super::verify::verify_program(&prog)?;
    Ok(prog)
}

fn strip_brackets<'a>(p: &P, s: &'a str) -> Result<&'a str, IrError> {
    s.trim()
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .ok_or_else(|| p.err(format!("expected `[...]`, found `{s}`")))
}

/// Splits `f32[4,8], f32[8]` at the commas outside brackets.
fn split_types(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out.into_iter().map(|s| s.trim().to_string()).collect()
}

/// The `&'static str` op name for a parsed one.
fn intern_op(s: &str) -> Option<&'static str> {
    const OTHER: [&str; 7] = ["matmul", "select", "cast", "param", "cat", "gather", "conv"];
    if let Some(u) = UnaryOp::from_text(s) {
        return Some(u.text());
    }
    if let Some(b) = BinaryOp::from_text(s) {
        return Some(b.text());
    }
    if let Some(c) = CmpOp::from_text(s) {
        return Some(c.text());
    }
    if let Some(r) = ReduceOp::from_text(s) {
        return Some(r.text());
    }
    if let Some(pool) = ReduceOp::from_pool_text(s).and_then(|r| r.def().pool) {
        return Some(pool);
    }
    OTHER.iter().copied().find(|&o| o == s)
}

fn parse_kernel_line(p: &P, k: &mut Kernel, line: &str) -> Result<(), IrError> {
    let n = k.exprs.len();
    if let Some(rest) = line.strip_prefix("matmul ") {
        k.matmul = Some(parse_matmul(p, rest)?);
    } else if let Some(rest) = line.strip_prefix("load ") {
        let (b, s) = rest
            .split_once(' ')
            .ok_or_else(|| p.err("expected `load bN strides=[..]`"))?;
        k.loads.push(p.access(b, s)?);
    } else if let Some(rest) = line.strip_prefix("scratch ") {
        let e = p.expr(rest, n)?;
        // Printed once each, in expression order: anything else would not
        // print back to the same text (and scratch order is the layout).
        if k.scratch.last().is_some_and(|&last| last >= e) {
            return Err(p.err(format!(
                "scratch %{} repeats or comes out of order (scratch values are listed once each, in expression order)",
                e.0
            )));
        }
        k.scratch.push(e);
    } else if let Some(rest) = line.strip_prefix("stage ") {
        k.stages.push(parse_stage(p, rest, n)?);
    } else {
        k.exprs.push(parse_expr_line(p, line, n)?);
    }
    Ok(())
}

/// `bA x bB -> bC batch=.. m=.. k=.. n=.. [im2col=[..]] [a_view=[..]]
/// [b_view=[..]] [nchw]` (after `matmul `).
fn parse_matmul(p: &P, rest: &str) -> Result<MatMul, IrError> {
    const USAGE: &str = "expected `matmul bA x bB -> bC batch=.. m=.. k=.. n=.. \
        [im2col=[c,h,w,kh,kw,stride,pad|..]] [a_view=[offset,bs,rs,cs]] [b_view=[..]] [nchw]`";
    let t: Vec<&str> = rest.split_whitespace().collect();
    if t.len() < 9 || t[1] != "x" || t[3] != "->" {
        return Err(p.err(USAGE));
    }
    let (mut im2col, mut a_view, mut b_view, mut nchw) = (None, None, None, false);
    for a in &t[9..] {
        if *a == "nchw" && !nchw {
            nchw = true;
        } else if a.starts_with("im2col=") && im2col.is_none() {
            im2col = Some(parse_im2col(p, p.attr(a, "im2col")?)?);
        } else if a.starts_with("a_view=") && a_view.is_none() {
            a_view = Some(parse_view(p, p.attr(a, "a_view")?)?);
        } else if a.starts_with("b_view=") && b_view.is_none() {
            b_view = Some(parse_view(p, p.attr(a, "b_view")?)?);
        } else {
            return Err(p.err(USAGE));
        }
    }
    Ok(MatMul {
        a: p.buf(t[0])?,
        b: p.buf(t[2])?,
        out: p.buf(t[4])?,
        a_view,
        b_view,
        batch: p.num(p.attr(t[5], "batch")?)?,
        m: p.num(p.attr(t[6], "m")?)?,
        k: p.num(p.attr(t[7], "k")?)?,
        n: p.num(p.attr(t[8], "n")?)?,
        im2col,
        nchw,
    })
}

/// `[offset,bs,rs,cs]`: a matmul operand's view.
fn parse_view(p: &P, text: &str) -> Result<MatView, IrError> {
    match p.list::<i64>(text)?[..] {
        [offset, bs, rs, cs] => Ok(MatView {
            offset,
            strides: [bs, rs, cs],
        }),
        _ => Err(p.err("expected `[offset,batch_stride,row_stride,col_stride]`")),
    }
}

/// `[c,h,w,kh,kw,stride,pad]` (a square window) or
/// `[c,h,w,kh,kw,sh,sw,top,left,bottom,right,dh,dw,groups]`: an implicit
/// im2col's image and window.
fn parse_im2col(p: &P, text: &str) -> Result<crate::kernel::Im2Col, IrError> {
    let v: Vec<usize> = text
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|x| p.num(x.trim()))
        .collect::<Result<_, _>>()?;
    let window = v.get(3..).and_then(crate::graph::Window::from_list);
    match (&v[..], window) {
        (&[c, h, w, ..], Some(window)) => Ok(crate::kernel::Im2Col { c, h, w, window }),
        _ => Err(p.err(
            "expected `im2col=[c,h,w,kh,kw,stride,pad]` or \
             `[c,h,w,kh,kw,sh,sw,top,left,bottom,right,dh,dw,groups]`",
        )),
    }
}

/// `store bN strides=[..] = %N` or `reduce_op %N` (after `stage `).
fn parse_stage(p: &P, rest: &str, n: usize) -> Result<Stage, IrError> {
    if let Some(st) = rest.strip_prefix("store ") {
        let (lhs, v) = st
            .split_once(" = ")
            .ok_or_else(|| p.err("expected `stage store bN strides=[..] = %N`"))?;
        let (b, s) = lhs
            .split_once(' ')
            .ok_or_else(|| p.err("missing strides"))?;
        Ok(Stage::Store {
            access: p.access(b, s)?,
            value: p.expr(v, n)?,
        })
    } else {
        let (op, v) = rest
            .split_once(' ')
            .ok_or_else(|| p.err("expected `stage reduce_op %N`"))?;
        let op = ReduceOp::from_text(op).ok_or_else(|| p.err(format!("unknown stage `{op}`")))?;
        Ok(Stage::Reduce {
            op,
            value: p.expr(v, n)?,
        })
    }
}

/// `%N = body : dtype`, the next expression (`n` of them so far).
fn parse_expr_line(p: &P, line: &str, n: usize) -> Result<ExprNode, IrError> {
    // `%N = body : dtype`
    let (lhs, rhs) = line
        .split_once(" = ")
        .ok_or_else(|| p.err(format!("cannot read `{line}`")))?;
    if lhs.trim() != format!("%{n}") {
        return Err(p.err(format!("expected `%{n} = ...`, found `{lhs}`")));
    }
    let (body, dt) = rhs
        .rsplit_once(" : ")
        .ok_or_else(|| p.err("missing ` : dtype`"))?;
    let dtype = p.dtype(dt)?;
    let (op, args) = body.split_once(' ').unwrap_or((body, ""));
    let ops: Vec<&str> = args.split(',').map(str::trim).collect();
    let e = |i: usize| p.expr(ops.get(i).copied().unwrap_or(""), n);
    let expr = match op {
        "load" => Expr::Load(p.num(args)?),
        "param" => Expr::Param(p.num(args)?),
        "row" => Expr::Row(p.num(args)?),
        "lit" => Expr::Lit(
            parse_lit_text(args, dtype)
                .ok_or_else(|| p.err(format!("bad {dtype} literal `{args}`")))?,
        ),
        "select" => Expr::Select(e(0)?, e(1)?, e(2)?),
        "gather" => {
            let num = |i: usize| p.num::<i64>(ops.get(i).copied().unwrap_or(""));
            Expr::Gather {
                load: p.num(ops.first().copied().unwrap_or(""))?,
                index: e(1)?,
                stride: num(2)?,
                len: num(3)?,
            }
        }
        "cast" => {
            let (a, _) = args
                .split_once(" from ")
                .ok_or_else(|| p.err("expected `cast %N from dtype`"))?;
            Expr::Cast(p.expr(a, n)?)
        }
        "bitcast" => {
            let (a, _) = args
                .split_once(" from ")
                .ok_or_else(|| p.err("expected `bitcast %N from dtype`"))?;
            Expr::Bitcast(p.expr(a, n)?)
        }
        other => {
            if let Some(u) = UnaryOp::from_text(other) {
                Expr::Unary(u, e(0)?)
            } else if let Some(b) = BinaryOp::from_text(other) {
                Expr::Binary(b, e(0)?, e(1)?)
            } else if let Some(c) = CmpOp::from_text(other) {
                Expr::Compare(c, e(0)?, e(1)?)
            } else {
                return Err(p.err(format!("unknown expression `{other}`")));
            }
        }
    };
    Ok(ExprNode { expr, dtype })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::parse_program;
    use crate::kernel::fuse;

    /// Every line kind: buffers of each kind, params, a matmul, loads,
    /// literals, a cast, a compare and select, reduce stages with a scratch
    /// value and `row` reads, a store, and both kinds of output.
    const PROGRAM: &str = "\
kernels {
  buffer b0 = input 0 : f32[4,8]
  buffer b1 = const 0 : f16[8]
  buffer b2 = temp : f32[4,8]
  buffer b3 = temp : f32[4,1]
  buffer b4 = input 1 : f32[8,8]
  buffer b5 = temp : f32[4,8]
  inputs [f32[4,8],f32[8,8]]
  params [f32,i32]
  kernel fused_reduce_max_sub_exp_reduce_sum domain=[4,8] ops=[reduce_max,sub,exp,reduce_sum] {
    load b0 strides=[8,1]
    load b1 strides=[0,1]
    %0 = load 0 : f32
    stage reduce_max %0
    %1 = row 0 : f32
    %2 = sub %0, %1 : f32
    %3 = exp %2 : f32
    scratch %3
    %4 = load 1 : f16
    %5 = cast %4 from f16 : f32
    %6 = param 0 : f32
    %7 = lt %5, %6 : bool
    %8 = lit 0.0 : f32
    %9 = select %7, %3, %8 : f32
    stage reduce_sum %9
    %10 = row 1 : f32
    stage store b3 strides=[1,0] = %10
  }
  kernel matmul domain=[4,8] ops=[matmul] {
    matmul b0 x b4 -> b5 batch=1 m=4 k=8 n=8
    load b5 strides=[8,1]
    %0 = load 0 : f32
    stage store b2 strides=[8,1] = %0
  }
  return b3 as f32[4,1], b2 as f32[4,8], param 1 as i32
}
";

    #[test]
    fn every_line_kind_prints_back_as_written() {
        let p = parse_program(PROGRAM).unwrap();
        crate::kernel::verify_program(&p).unwrap();
        assert_eq!(p.to_string(), PROGRAM);
        assert_eq!(parse_program(&p.to_string()).unwrap(), p);
        assert_eq!(p.kernels.len(), 2);
        assert_eq!(p.kernels[0].scratch.len(), 1);
        assert!(p.kernels[1].matmul.is_some());
    }

    #[test]
    fn a_fused_program_round_trips() {
        let g = crate::text::parse(
            "graph {
  %0 = input 0 : f32[4,8]
  %1 = input 1 : f32[8]
  %2 = broadcast %1 : f32[4,8]
  %3 = mul %0, %2 : f32[4,8]
  %4 = reduce_sum %3 axes=[1] : f32[4,1]
  return %4, %3
}",
        )
        .unwrap();
        let p = fuse(&g).unwrap();
        let text = p.to_string();
        let back = parse_program(&text).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.to_string(), text);
    }

    /// Matmul operands under a transpose, a head split (reshape then
    /// permute), a slice and a batch broadcast fuse into views of the
    /// buffers under them (no copy kernel), print and parse back; a view
    /// past its buffer is refused, and a reshape that is no affine view
    /// still materialises what is under it.
    #[test]
    fn matmul_operand_views_fuse_round_trip_and_verify() {
        let g = crate::text::parse(
            "graph {
  %0 = input 0 : f32[2,64]
  %1 = input 1 : f32[512,64]
  %2 = permute %1 perm=[1,0] : f32[64,512]
  %3 = matmul %0, %2 : f32[2,512]
  %4 = input 2 : f32[6,12]
  %5 = reshape %4 : f32[6,3,4]
  %6 = permute %5 perm=[1,0,2] : f32[3,6,4]
  %7 = input 3 : f32[4,9]
  %8 = slice %7 start=[0,2] : f32[4,5]
  %9 = broadcast %8 : f32[3,4,5]
  %10 = matmul %6, %9 : f32[3,6,5]
  return %3, %10
}",
        )
        .unwrap();
        let p = fuse(&g).unwrap();
        crate::kernel::verify_program(&p).unwrap();
        let text = p.to_string();
        assert_eq!(p.kernels.len(), 2, "{text}");
        assert!(text.contains("b_view=[0,32768,1,64]"), "{text}");
        assert!(text.contains("a_view=[0,4,12,1]"), "{text}");
        assert!(text.contains("b_view=[2,0,9,1]"), "{text}");
        let back = parse_program(&text).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.to_string(), text);
        // One element too far: the slice's window moved past the end.
        let bad = text.replace("b_view=[2,0,9,1]", "b_view=[5,0,9,1]");
        let e = parse_program(&bad).unwrap_err();
        assert!(e.to_string().contains("matmul sizes do not match"), "{e}");
        assert!(parse_program(&text.replace("b_view=[2,0,9,1]", "b_view=[2,0,9]")).is_err());
        // Merging dims a transpose separated is no affine view: the
        // transpose is materialised (two kernels for one matmul).
        let g = crate::text::parse(
            "graph {
  %0 = input 0 : f32[4,6]
  %1 = permute %0 perm=[1,0] : f32[6,4]
  %2 = reshape %1 : f32[3,8]
  %3 = input 1 : f32[8,2]
  %4 = matmul %2, %3 : f32[3,2]
  return %4
}",
        )
        .unwrap();
        let p = fuse(&g).unwrap();
        assert_eq!(p.kernels.len(), 2, "{p}");
        assert!(p.kernels[1]
            .matmul
            .as_ref()
            .is_some_and(|m| m.a_view.is_none()));
    }

    /// A convolution: its graph op and its kernel's implicit-im2col
    /// matmul print and parse back; sizes that do not fit the image are
    /// refused.
    #[test]
    fn a_convolution_round_trips_at_both_levels() {
        let src = "graph {
  %0 = input 0 : f32[2,3,7,9]
  %1 = input 1 : f32[27,4]
  %2 = conv %0, %1 window=[3, 3, 2, 1] : f32[2,4,5,4]
  %3 = relu %2 : f32[2,4,5,4]
  return %3
}
";
        let g = crate::text::parse(src).unwrap();
        assert_eq!(g.to_string(), src);
        let p = fuse(&g).unwrap();
        crate::kernel::verify_program(&p).unwrap();
        let text = p.to_string();
        assert!(text.contains("im2col=[3,7,9,3,3,2,1]"), "{text}");
        let back = parse_program(&text).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.to_string(), text);
        // The window's rows (oh * ow = 4 * 5) must be the matmul's m.
        let bad = text.replace("m=20", "m=21");
        let e = parse_program(&bad).unwrap_err().to_string();
        assert!(e.contains("matmul sizes do not match"), "{e}");
        // Graph-level type errors: the weights, the window, the dtype.
        for (op, want) in [
            ("conv %0, %1 window=[3, 2, 2, 1]", "must be [3*3*2, out]"),
            ("conv %0, %1 window=[3, 3, 0, 1]", "does not fit"),
            ("conv %0, %1 window=[9, 3, 1, 0]", "does not fit"),
        ] {
            let text = src.replace("conv %0, %1 window=[3, 3, 2, 1]", op);
            let e = crate::text::parse(&text).unwrap_err().to_string();
            assert!(e.contains(want), "{op}: {e}");
        }
        // OIHW weights `[4, 27]` transposed are read in place (the one
        // view a convolution takes); another view is refused.
        let transposed = src.replace(
            "%1 = input 1 : f32[27,4]",
            "%9 = input 1 : f32[4,27]\n  %1 = permute %9 perm=[1, 0] : f32[27,4]",
        );
        let p = fuse(&crate::text::parse(&transposed).unwrap()).unwrap();
        let text = p.to_string();
        assert!(text.contains("b_view=[0,0,1,27]"), "{text}");
        assert_eq!(p.kernels.len(), 1, "{text}");
        assert_eq!(parse_program(&text).unwrap(), p);
        let e = parse_program(&text.replace("b_view=[0,0,1,27]", "b_view=[0,0,1,26]"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no operand view but its weights transposed"),
            "{e}"
        );
        let ints = src.replace("f32", "i32");
        let e = crate::text::parse(&ints).unwrap_err().to_string();
        assert!(e.contains("f32, f16 or bf16"), "{e}");
        // A general window (per-axis stride, asymmetric padding, dilation,
        // two groups of 2 channels) prints all 11 fields at both levels:
        // rows (7 + 1 + 2 - 5) / 2 + 1 = 3, columns 9 - 3 + 1 = 7.
        let general = "graph {
  %0 = input 0 : f32[2,4,7,9]
  %1 = input 1 : f32[18,4]
  %2 = conv %0, %1 window=[3, 3, 2, 1, 1, 0, 2, 0, 2, 1, 2] : f32[2,3,7,4]
  return %2
}
";
        let g = crate::text::parse(general).unwrap();
        assert_eq!(g.to_string(), general);
        let p = fuse(&g).unwrap();
        crate::kernel::verify_program(&p).unwrap();
        let text = p.to_string();
        assert!(
            text.contains("im2col=[4,7,9,3,3,2,1,1,0,2,0,2,1,2]"),
            "{text}"
        );
        assert_eq!(parse_program(&text).unwrap(), p);
        for (op, want) in [
            (
                "window=[3, 3, 2, 1, 1, 0, 2, 0, 2, 1, 3]",
                "do not split into 3 groups",
            ),
            ("window=[3, 3, 2, 1, 1, 0, 2, 0, 0, 1, 2]", "does not fit"),
            ("window=[3, 3, 2, 1, 1, 0]", "expected `window="),
        ] {
            let text = general.replace("window=[3, 3, 2, 1, 1, 0, 2, 0, 2, 1, 2]", op);
            let e = crate::text::parse(&text).unwrap_err().to_string();
            assert!(e.contains(want), "{op}: {e}");
        }
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        let cases = [
            ("kernels {\n  buffer b1 = temp : f32[2]\n}", 2, "in order"),
            (
                "kernels {\n  buffer b0 = wat : f32[2]\n}",
                2,
                "unknown buffer kind",
            ),
            (
                "kernels {\n  buffer b0 = temp : f32[2]\n  kernel k domain=[] ops=[] {\n  }\n}",
                3,
                "rank >= 1",
            ),
            (
                "kernels {\n  kernel k domain=[2] ops=[frob] {\n  }\n}",
                2,
                "unknown op `frob`",
            ),
            (
                "kernels {\n  kernel k domain=[2] ops=[] {\n    %0 = load 0 : f32\n",
                3,
                "unterminated kernel",
            ),
        ];
        for (text, line, what) in cases {
            let e = parse_program(text).unwrap_err().to_string();
            assert!(
                e.contains(&format!("line {line}")) && e.contains(what),
                "{text:?}: {e}"
            );
        }
    }

    /// Inputs tilejit-fuzz found panicking, each now an error: sizes from
    /// text whose product overflows.
    #[test]
    fn fuzz_findings_are_errors() {
        let matmul = "\
kernels {
  buffer b0 = input 0 : f32[8,16]
  buffer b1 = input 1 : f32[16,4]
  buffer b2 = temp : f32[8,4]
  inputs [f32[8,16],f32[16,4]]
  params []
  kernel matmul domain=[8,4] ops=[matmul] {
    matmul b0 x b1 -> b2 batch=1 m=8 k=16 n=9223372036854775808
  }
  return b2 as f32[8,4]
}
";
        let e = parse_program(matmul).unwrap_err().to_string();
        assert!(e.contains("matmul sizes do not match"), "{e}");
        // A window count that overflows, and an input the program lacks.
        let conv = "\
kernels {
  buffer b0 = input 0 : f32[1,1,1,1]
  buffer b1 = input 1 : f32[1,1]
  buffer b2 = temp : f32[1,1]
  inputs [f32[1,1,1,1],f32[1,1]]
  params []
  kernel matmul domain=[1] ops=[conv] {
    matmul b0 x b1 -> b2 batch=1 m=1 k=1 n=1 im2col=[1,8589934592,8589934592,1,1,1,0]
  }
  return b2 as f32[1,1]
}
";
        let e = parse_program(conv).unwrap_err().to_string();
        assert!(e.contains("matmul sizes do not match"), "{e}");
        let missing = conv
            .replace(
                "im2col=[1,8589934592,8589934592,1,1,1,0]",
                "im2col=[1,1,1,1,1,1,0]",
            )
            .replace("buffer b1 = input 1", "buffer b1 = input 5");
        let e = parse_program(&missing).unwrap_err().to_string();
        assert!(e.contains("b1 is input 5"), "{e}");
    }
}
