//! The text form of the graph IR: `Display` prints it and [`parse`] reads it
//! back, so `print(parse(print(g))) == print(g)`. Golden tests and
//! `TILEJIT_DUMP` use it. Grammar (one node per line, `#` starts a comment):
//!
//! ```text
//! graph {
//!   %0 = input 0 : f32[8,1024]
//!   %1 = param 0 : f32[]
//!   %2 = full 1e-5 : f32[8,1]
//!   %3 = const [1.0, 2.0] : f32[2]
//!   %4 = reduce_sum %0 axes=[1] : f32[8,1]
//!   %5 = permute %0 perm=[1,0] : f32[1024,8]
//!   %6 = add %4, %2 : f32[8,1]
//!   return %6, %5
//! }
//! ```
//! `reshape`, `broadcast` and `cast` take their target from the result type.

use crate::array::{Array, Buffer};
use crate::dtype::{DType, Lit};
use crate::error::IrError;
use crate::graph::{Axes, BinaryOp, CmpOp, Graph, NodeId, Op, Perm, ReduceOp, UnaryOp};
use crate::shape::{Shape, TensorType};
use std::collections::HashMap;
use std::fmt::{self, Write};

/// Parses a literal of `dtype` as [`lit_text`] prints it.
pub(crate) fn parse_lit_text(tok: &str, dtype: DType) -> Option<Lit> {
    let tok = tok.trim();
    let lit = match dtype {
        DType::Bool => Lit::Bool(tok.parse::<bool>().ok()?),
        DType::U64 => Lit::Int(tok.parse::<u64>().ok()? as i64),
        d if d.is_int() => Lit::Int(tok.parse::<i64>().ok()?),
        d => Lit::Float(d.round_float(tok.parse::<f64>().ok()?)),
    };
    lit.fits(dtype).then_some(lit)
}

/// The op's mnemonic in the text form.
pub fn op_name(op: &Op) -> &'static str {
    op.info().name
}

fn write_list<T: fmt::Display>(
    f: &mut impl Write,
    items: impl IntoIterator<Item = T>,
) -> fmt::Result {
    f.write_char('[')?;
    for (i, x) in items.into_iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{x}")?;
    }
    f.write_char(']')
}

/// A literal in the shortest form that parses back to the same value of
/// `dtype` (`1e-5` for an f32, not its f64 expansion; a u64 unsigned).
pub fn lit_text(lit: Lit, dtype: DType) -> String {
    match (lit, dtype) {
        (Lit::Float(v), DType::F32 | DType::F16 | DType::BF16) => format!("{:?}", v as f32),
        (Lit::Int(v), DType::U64) => (v as u64).to_string(),
        (other, _) => other.to_string(),
    }
}

fn write_constant(f: &mut impl Write, a: &Array) -> fmt::Result {
    let b = a.buffer();
    write_list(f, (0..b.len()).map(|i| lit_text(b.get(i), a.dtype())))
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "graph {{")?;
        for id in self.ids() {
            let node = self.node(id);
            write!(f, "  {id} = {}", op_name(&node.op))?;
            match &node.op {
                Op::Input { index, .. } | Op::Param { index, .. } => write!(f, " {index}")?,
                Op::Full { value, ty } => write!(f, " {}", lit_text(*value, ty.dtype))?,
                Op::Constant { index, .. } => match self.constant(*index) {
                    Some(c) => {
                        f.write_char(' ')?;
                        write_constant(f, c)?;
                    }
                    None => write!(f, " <missing constant {index}>")?,
                },
                op => {
                    for (i, o) in op.operands().iter().enumerate() {
                        write!(f, "{}{o}", if i == 0 { " " } else { ", " })?;
                    }
                    match op {
                        Op::Reduce(_, _, axes) => {
                            f.write_str(" axes=")?;
                            write_list(f, axes.iter())?;
                        }
                        Op::Permute(_, perm) => {
                            f.write_str(" perm=")?;
                            write_list(f, perm.as_vec())?;
                        }
                        Op::Slice(_, start, _) => {
                            f.write_str(" start=")?;
                            write_list(f, start.dims())?;
                        }
                        Op::Concat(_, _, axis) | Op::Gather(_, _, axis) => {
                            write!(f, " axis={axis}")?
                        }
                        Op::Conv(_, _, w) | Op::Pool(_, _, w) => {
                            f.write_str(" window=")?;
                            write_list(f, w.text_list())?;
                        }
                        _ => {}
                    }
                }
            }
            writeln!(f, " : {}", node.ty)?;
        }
        f.write_str("  return")?;
        for (i, o) in self.outputs.iter().enumerate() {
            write!(f, "{}{o}", if i == 0 { " " } else { ", " })?;
        }
        writeln!(f)?;
        writeln!(f, "}}")
    }
}

/// Parses the text form. Node labels need not be dense; the result is
/// renumbered in order. Every node is type-checked and its inferred type must
/// equal the type written after `:`.
pub fn parse(text: &str) -> Result<Graph, IrError> {
    let mut p = Parser {
        g: Graph::new(),
        labels: HashMap::new(),
        line: 0,
    };
    let mut state = 0; // 0: before `graph {`, 1: in body, 2: after `return`, 3: after `}`
    for (i, raw) in text.lines().enumerate() {
        p.line = i + 1;
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        match state {
            0 if line == "graph {" => state = 1,
            0 => return Err(p.err("expected `graph {`")),
            1 if line.starts_with("return") => {
                p.parse_return(&line["return".len()..])?;
                state = 2;
            }
            1 => p.parse_node(line)?,
            2 if line == "}" => state = 3,
            2 => return Err(p.err("expected `}` after return")),
            _ => return Err(p.err("text after the closing `}`")),
        }
    }
    if state != 3 {
        p.line += 1;
        return Err(p.err("unexpected end of input: a graph ends with `return ...` and `}`"));
    }
    // Reject here what the verifier would: text is user input, and a graph
    // that parses must be safe to run (input indices 0..n, types as
    // inferred, ...).
    crate::verify::verify(&p.g).map_err(|e| IrError::Parse {
        line: p.line,
        message: format!("the graph does not verify: {e}"),
    })?;
    Ok(p.g)
}

struct Parser {
    g: Graph,
    labels: HashMap<String, NodeId>,
    line: usize,
}

impl Parser {
    fn err(&self, message: impl Into<String>) -> IrError {
        IrError::Parse {
            line: self.line,
            message: message.into(),
        }
    }

    fn node_ref(&self, tok: &str) -> Result<NodeId, IrError> {
        let tok = tok.trim();
        self.labels
            .get(tok)
            .copied()
            .ok_or_else(|| self.err(format!("unknown node `{tok}`")))
    }

    fn parse_return(&mut self, rest: &str) -> Result<(), IrError> {
        for tok in rest.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let id = self.node_ref(tok)?;
            self.g.outputs.push(id);
        }
        Ok(())
    }

    fn parse_type(&self, s: &str) -> Result<TensorType, IrError> {
        let s = s.trim();
        let open = s
            .find('[')
            .ok_or_else(|| self.err(format!("bad type `{s}`")))?;
        let dtype = DType::from_name(&s[..open])
            .ok_or_else(|| self.err(format!("unknown dtype `{}`", &s[..open])))?;
        let dims = self.parse_usize_list(&s[open..])?;
        let shape = Shape::new(&dims).map_err(|e| self.err(e.to_string()))?;
        Ok(TensorType::new(dtype, shape))
    }

    fn parse_usize_list(&self, s: &str) -> Result<Vec<usize>, IrError> {
        let inner = s.trim().strip_prefix('[').and_then(|x| x.strip_suffix(']'));
        let inner = inner.ok_or_else(|| self.err(format!("expected `[...]`, found `{s}`")))?;
        inner
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| {
                t.parse::<usize>()
                    .map_err(|_| self.err(format!("bad number `{t}`")))
            })
            .collect()
    }

    fn parse_lit(&self, tok: &str, dtype: DType) -> Result<Lit, IrError> {
        let tok = tok.trim();
        let bad = || self.err(format!("bad {dtype} literal `{tok}`"));
        let lit = match dtype {
            DType::Bool => Lit::Bool(tok.parse::<bool>().map_err(|_| bad())?),
            DType::U64 => Lit::Int(tok.parse::<u64>().map_err(|_| bad())? as i64),
            d if d.is_int() => Lit::Int(tok.parse::<i64>().map_err(|_| bad())?),
            d => Lit::Float(d.round_float(tok.parse::<f64>().map_err(|_| bad())?)),
        };
        if !lit.fits(dtype) {
            return Err(self.err(format!("literal `{tok}` is not a {dtype} value")));
        }
        Ok(lit)
    }

    fn parse_node(&mut self, line: &str) -> Result<(), IrError> {
        let (label, rhs) = line
            .split_once('=')
            .ok_or_else(|| self.err("expected `%N = op ... : type`"))?;
        let label = label.trim();
        if !label.starts_with('%') || self.labels.contains_key(label) {
            return Err(self.err(format!("bad or duplicate node label `{label}`")));
        }
        let (body, ty) = rhs
            .rsplit_once(" : ")
            .ok_or_else(|| self.err("missing ` : type`"))?;
        let ty = self.parse_type(ty)?;
        let body = body.trim();
        let (name, args) = body.split_once(' ').unwrap_or((body, ""));
        let args = args.trim();
        let op = self.parse_op(name, args, ty)?;
        let id = if let Op::Constant { .. } = op {
            let data = self.parse_constant(args, ty)?;
            self.g.add_constant(data)
        } else {
            self.g.add(op).map_err(|e| self.err(e.to_string()))?
        };
        let got = self.g.ty(id);
        if got != ty {
            return Err(self.err(format!("declared type {ty} but the op gives {got}")));
        }
        self.labels.insert(label.to_string(), id);
        Ok(())
    }

    fn parse_constant(&self, args: &str, ty: TensorType) -> Result<Array, IrError> {
        let inner = args.strip_prefix('[').and_then(|x| x.strip_suffix(']'));
        let inner = inner.ok_or_else(|| self.err("const expects `[v, ...]`"))?;
        let lits = inner
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| self.parse_lit(t, ty.dtype))
            .collect::<Result<Vec<_>, _>>()?;
        Array::new(ty.shape, Buffer::from_lits(ty.dtype, lits.into_iter())?)
            .map_err(|e| self.err(e.to_string()))
    }

    /// Splits `"%1, %2 axes=[0]"` into operand ids and the attribute text.
    fn operands(&self, args: &str, want: usize) -> Result<(Vec<NodeId>, String), IrError> {
        let (ops, attr) = match args.find(|c: char| c.is_ascii_alphabetic()) {
            Some(i) => (&args[..i], args[i..].to_string()),
            None => (args, String::new()),
        };
        let ids = ops
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| self.node_ref(t))
            .collect::<Result<Vec<_>, _>>()?;
        if ids.len() != want {
            return Err(self.err(format!("expected {want} operands, found {}", ids.len())));
        }
        Ok((ids, attr))
    }

    fn attr_list(&self, attr: &str, key: &str) -> Result<Vec<usize>, IrError> {
        let v = attr
            .trim()
            .strip_prefix(key)
            .and_then(|x| x.strip_prefix('='));
        self.parse_usize_list(v.ok_or_else(|| self.err(format!("expected `{key}=[...]`")))?)
    }

    /// A conv or pool's `window=[..]` attribute.
    fn window(&self, attr: &str) -> Result<crate::graph::Window, IrError> {
        let v = self.attr_list(attr, "window")?;
        crate::graph::Window::from_list(&v).ok_or_else(|| {
            self.err(
                "expected `window=[kh, kw, sh, sw, top, left, bottom, right, dh, dw, \
                 groups]` (or `[kh, kw, stride, pad]`), each under 2^32",
            )
        })
    }

    fn parse_op(&self, name: &str, args: &str, ty: TensorType) -> Result<Op, IrError> {
        let index = || {
            args.parse::<u32>()
                .map_err(|_| self.err(format!("`{name}` expects an index")))
        };
        if let Some(u) = UnaryOp::from_text(name) {
            return Ok(Op::Unary(u, self.operands(args, 1)?.0[0]));
        }
        if let Some(b) = BinaryOp::from_text(name) {
            let (o, _) = self.operands(args, 2)?;
            return Ok(Op::Binary(b, o[0], o[1]));
        }
        if let Some(c) = CmpOp::from_text(name) {
            let (o, _) = self.operands(args, 2)?;
            return Ok(Op::Compare(c, o[0], o[1]));
        }
        if let Some(r) = ReduceOp::from_text(name) {
            let (o, attr) = self.operands(args, 1)?;
            let axes = self.attr_list(&attr, "axes")?;
            if axes.iter().any(|&a| a >= 8) {
                return Err(self.err("axis out of range"));
            }
            return Ok(Op::Reduce(r, o[0], Axes::from_axes(&axes)));
        }
        if let Some(r) = ReduceOp::from_pool_text(name) {
            let (o, attr) = self.operands(args, 1)?;
            return Ok(Op::Pool(r, o[0], self.window(&attr)?));
        }
        Ok(match name {
            "input" => Op::Input {
                index: index()?,
                ty,
            },
            "param" => Op::Param {
                index: index()?,
                dtype: ty.dtype,
            },
            "full" => Op::Full {
                value: self.parse_lit(args, ty.dtype)?,
                ty,
            },
            "const" => Op::Constant { index: 0, ty },
            "select" => {
                let (o, _) = self.operands(args, 3)?;
                Op::Select(o[0], o[1], o[2])
            }
            "matmul" => {
                let (o, _) = self.operands(args, 2)?;
                Op::MatMul(o[0], o[1])
            }
            "reshape" => Op::Reshape(self.operands(args, 1)?.0[0], ty.shape),
            "broadcast" => Op::Broadcast(self.operands(args, 1)?.0[0], ty.shape),
            "cast" => Op::Cast(self.operands(args, 1)?.0[0], ty.dtype),
            "bitcast" => Op::Bitcast(self.operands(args, 1)?.0[0], ty.dtype),
            "permute" => {
                let (o, attr) = self.operands(args, 1)?;
                let perm = Perm::new(&self.attr_list(&attr, "perm")?)
                    .map_err(|e| self.err(e.to_string()))?;
                Op::Permute(o[0], perm)
            }
            "slice" => {
                let (o, attr) = self.operands(args, 1)?;
                let start = Shape::new(&self.attr_list(&attr, "start")?)
                    .map_err(|e| self.err(e.to_string()))?;
                Op::Slice(o[0], start, ty.shape)
            }
            "cat" | "gather" => {
                let (o, attr) = self.operands(args, 2)?;
                let axis = attr
                    .trim()
                    .strip_prefix("axis=")
                    .and_then(|a| a.parse::<u8>().ok())
                    .filter(|&a| (a as usize) < crate::shape::MAX_RANK)
                    .ok_or_else(|| self.err("expected `axis=N`"))?;
                if name == "cat" {
                    Op::Concat(o[0], o[1], axis)
                } else {
                    Op::Gather(o[0], o[1], axis)
                }
            }
            "conv" => {
                let (o, attr) = self.operands(args, 2)?;
                Op::Conv(o[0], o[1], self.window(&attr)?)
            }
            other => return Err(self.err(format!("unknown op `{other}`"))),
        })
    }
}
