//! The text form: an assembler ([`assemble`]) and a disassembler
//! ([`disassemble`]), both driven by the table's operand kinds. The
//! disassembler's output assembles back to the identical program (and so
//! the identical binary), for every program the decoder accepts.
//!
//! ```text
//! ; comment (also `//`)
//! .kernel vadd aiv                 ; name and core type
//! .gm x f32 [4096] in              ; GM arguments in index order
//! .arg n 4096                      ; scalar arguments with default values
//! loop:                            ; a label
//!     ld f32, 8x64, r1, 64, @0, x, r2, 64
//! ```
//!
//! Operands: `r7` register; `42`, `-1`, `0x20` integer; `1.5`, `-inf`,
//! `bits:0x7ff8000000000001` float; `f32` dtype; `8x64` shape; `64x32x16`
//! matmul shape; `@0x1000` local address; a GM argument's name (or `gm3`);
//! a label (or `@12`, an absolute instruction index); `mte2` pipe; `3`
//! event; `lt` condition.

use super::{
    is_ident, ArgDecl, Cond, CoreType, GmDecl, Inst, Kind, Opcode, Operand, Pipe, Program, Role,
};
use crate::error::{DeviceError, Result};
use std::collections::HashMap;
use std::fmt::Write;
use tilejit_ir::{DType, UnaryOp};

/// Assembles a text program. Errors name the line.
pub fn assemble(text: &str) -> Result<Program> {
    let mut header = Header::default();
    let mut labels: HashMap<String, u32> = HashMap::new();
    // (line, mnemonic, operand texts); operands parse once labels are known.
    let mut pending: Vec<(usize, Opcode, Vec<String>)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let err = |msg: String| DeviceError::Asm { line, msg };
        let s = strip_comment(raw);
        if s.is_empty() {
            continue;
        }
        if let Some(d) = s.strip_prefix('.') {
            header.directive(d).map_err(err)?;
            continue;
        }
        let s = define_labels(s, &mut labels, pending.len() as u32).map_err(err)?;
        if s.is_empty() {
            continue;
        }
        let (mn, rest) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
        let op =
            Opcode::from_mnemonic(mn).ok_or_else(|| err(format!("unknown mnemonic `{mn}`")))?;
        let ops: Vec<String> = if rest.trim().is_empty() {
            Vec::new()
        } else {
            rest.split(',').map(|o| o.trim().to_string()).collect()
        };
        pending.push((line, op, ops));
    }
    let name = header.name.ok_or(DeviceError::Asm {
        line: 1,
        msg: "missing `.kernel NAME aic|aiv` line".into(),
    })?;
    let core = header.core.unwrap_or(CoreType::Aiv);
    let gm = header.gm;
    let mut code = Vec::with_capacity(pending.len());
    for (line, op, ops) in pending {
        let err = |msg: String| DeviceError::Asm { line, msg };
        code.push(parse_inst(op, &ops, &gm, &labels).map_err(err)?);
    }
    Ok(Program {
        name,
        core,
        gm,
        args: header.args,
        code,
    })
}

/// What a program's directives declare, as they are read.
#[derive(Default)]
struct Header {
    name: Option<String>,
    core: Option<CoreType>,
    gm: Vec<GmDecl>,
    args: Vec<ArgDecl>,
}

impl Header {
    /// Applies one directive, `d` being its text after the `.`.
    fn directive(&mut self, d: &str) -> std::result::Result<(), String> {
        let words: Vec<&str> = d.split_whitespace().collect();
        match words.as_slice() {
            ["kernel", n, c] => {
                if self.name.is_some() {
                    return Err("a second `.kernel` line".into());
                }
                check_ident(n)?;
                self.name = Some(n.to_string());
                self.core = Some(
                    CoreType::from_name(c)
                        .ok_or_else(|| format!("core type `{c}`: expected aic or aiv"))?,
                );
            }
            ["gm", n, dt, dims, role] => {
                check_ident(n)?;
                if self.gm.iter().any(|g| g.name == *n) {
                    return Err(format!("GM argument `{n}` declared twice"));
                }
                let dtype = DType::from_name(dt).ok_or_else(|| format!("unknown dtype `{dt}`"))?;
                let shape = parse_dims(dims)?;
                let role = match *role {
                    "in" => Role::In,
                    "out" => Role::Out,
                    "inout" => Role::InOut,
                    r => return Err(format!("role `{r}`: expected in, out or inout")),
                };
                self.gm.push(GmDecl {
                    name: n.to_string(),
                    dtype,
                    shape,
                    role,
                });
            }
            ["arg", n, v] => {
                check_ident(n)?;
                if self.args.iter().any(|a| a.name == *n) {
                    return Err(format!("scalar argument `{n}` declared twice"));
                }
                let value = parse_int(v).ok_or_else(|| format!("`{v}` is not an integer"))?;
                self.args.push(ArgDecl {
                    name: n.to_string(),
                    value,
                });
            }
            _ => {
                return Err(format!(
                    "unknown directive `.{d}` (expected `.kernel NAME aic|aiv`, `.gm NAME DTYPE [DIMS] in|out|inout` or `.arg NAME VALUE`)"
                ))
            }
        }
        Ok(())
    }
}

/// A line without its `;` or `//` comment, trimmed.
fn strip_comment(raw: &str) -> &str {
    let mut s = raw;
    if let Some(p) = s.find(';') {
        s = &s[..p];
    }
    if let Some(p) = s.find("//") {
        s = &s[..p];
    }
    s.trim()
}

/// Defines the `label:` prefixes of a line at instruction index `at`;
/// returns the rest of the line.
fn define_labels<'t>(
    mut s: &'t str,
    labels: &mut HashMap<String, u32>,
    at: u32,
) -> std::result::Result<&'t str, String> {
    while let Some(colon) = s.find(':') {
        let label = s[..colon].trim();
        if !is_ident(label) {
            break;
        }
        if labels.insert(label.to_string(), at).is_some() {
            return Err(format!("label `{label}` defined twice"));
        }
        s = s[colon + 1..].trim();
    }
    Ok(s)
}

/// Parses the operand texts of one `op` instruction, now that every
/// label is known.
fn parse_inst(
    op: Opcode,
    ops: &[String],
    gm: &[GmDecl],
    labels: &HashMap<String, u32>,
) -> std::result::Result<Inst, String> {
    let info = op.info();
    if ops.len() != info.operands.len() {
        let names: Vec<&str> = info.operands.iter().map(|o| o.0).collect();
        return Err(format!(
            "`{}` takes {} operands ({}), got {}",
            info.mnemonic,
            names.len(),
            names.join(", "),
            ops.len()
        ));
    }
    let mut parsed = Vec::with_capacity(ops.len());
    for (&(oname, kind), text) in info.operands.iter().zip(ops) {
        let arg = parse_operand(kind, text, gm, labels)
            .map_err(|m| format!("operand `{oname}` of `{}`: {m}", info.mnemonic))?;
        parsed.push(arg);
    }
    Ok(Inst { op, args: parsed })
}

fn check_ident(n: &str) -> std::result::Result<(), String> {
    if is_ident(n) {
        Ok(())
    } else {
        Err(format!(
            "`{n}` is not a valid name (letters, digits, `_`; not r<N> or gm<N>; at most 64 bytes)"
        ))
    }
}

fn parse_dims(s: &str) -> std::result::Result<Vec<u64>, String> {
    let inner = s
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .ok_or_else(|| format!("dims `{s}`: expected [D0,D1,...]"))?;
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    let dims: Vec<u64> = inner
        .split(',')
        .map(|d| {
            d.trim()
                .parse::<u64>()
                .map_err(|_| format!("dimension `{d}` is not a size"))
        })
        .collect::<std::result::Result<_, _>>()?;
    if dims.len() > 8 {
        return Err("rank > 8".into());
    }
    Ok(dims)
}

fn parse_int(s: &str) -> Option<i64> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let v: i128 = if let Some(h) = body.strip_prefix("0x") {
        i128::from(u64::from_str_radix(h, 16).ok()?)
    } else {
        i128::from(body.parse::<u64>().ok()?)
    };
    let v = if neg { -v } else { v };
    // Hex spellings of the upper half wrap (0xffffffffffffffff is -1).
    if v > i64::MAX as i128 && !neg && body.starts_with("0x") {
        return Some(v as u64 as i64);
    }
    i64::try_from(v).ok()
}

fn parse_u32(s: &str) -> Option<u32> {
    let v = parse_int(s)?;
    u32::try_from(v).ok()
}

fn parse_reg(s: &str) -> Option<u8> {
    let d = s.strip_prefix('r')?;
    if d.is_empty() || !d.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let r: usize = d.parse().ok()?;
    (r < super::NUM_REGS).then_some(r as u8)
}

fn parse_operand(
    kind: Kind,
    t: &str,
    gm: &[GmDecl],
    labels: &HashMap<String, u32>,
) -> std::result::Result<Operand, String> {
    let bad = |what: &str| format!("`{t}` is not {what}");
    Ok(match kind {
        Kind::Reg => Operand::Reg(parse_reg(t).ok_or_else(|| bad("a register r0..r31"))?),
        Kind::Imm => Operand::Imm(parse_int(t).ok_or_else(|| bad("an integer"))?),
        Kind::Val => match parse_reg(t) {
            Some(r) => Operand::Reg(r),
            None => Operand::Imm(parse_int(t).ok_or_else(|| bad("a register or an integer"))?),
        },
        Kind::Scalar => {
            let v = if let Some(h) = t.strip_prefix("bits:0x") {
                u64::from_str_radix(h, 16).map_err(|_| bad("a float"))?
            } else {
                let f: f64 = t.parse().map_err(|_| bad("a float"))?;
                f.to_bits()
            };
            Operand::Scalar(v)
        }
        Kind::DType => Operand::DType(DType::from_name(t).ok_or_else(|| bad("a dtype"))?),
        Kind::Shape => {
            let p: Vec<&str> = t.split('x').collect();
            match p.as_slice() {
                [r, c] => Operand::Shape(
                    dim16(r).ok_or_else(|| bad("a shape RxC"))?,
                    dim16(c).ok_or_else(|| bad("a shape RxC"))?,
                ),
                _ => return Err(bad("a shape RxC")),
            }
        }
        Kind::Mkn => {
            let p: Vec<Option<u16>> = t.split('x').map(dim16).collect();
            match p.as_slice() {
                [Some(m), Some(k), Some(n)] => Operand::Mkn(*m, *k, *n),
                _ => return Err(bad("a matmul shape MxKxN")),
            }
        }
        Kind::Mem(..) => Operand::Addr(
            t.strip_prefix('@')
                .and_then(parse_u32)
                .ok_or_else(|| bad("a local address @N"))?,
        ),
        Kind::Gm => {
            if let Some(i) = gm.iter().position(|g| g.name == t) {
                Operand::Gm(i as u8)
            } else if let Some(i) = t.strip_prefix("gm").and_then(|d| d.parse::<u8>().ok()) {
                Operand::Gm(i)
            } else {
                return Err(format!("`{t}` is not a declared GM argument"));
            }
        }
        Kind::Label => {
            if let Some(pc) = labels.get(t) {
                Operand::Label(*pc)
            } else if let Some(pc) = t.strip_prefix('@').and_then(parse_u32) {
                Operand::Label(pc)
            } else {
                return Err(format!("label `{t}` is not defined"));
            }
        }
        Kind::Pipe => Operand::Pipe(
            *Pipe::ALL
                .iter()
                .find(|p| p.name() == t)
                .ok_or_else(|| bad("a pipe (s, mte1, mte2, mte3, v, m, fixp)"))?,
        ),
        Kind::Event => Operand::Event(t.parse::<u8>().map_err(|_| bad("an event id"))?),
        Kind::Cond => Operand::Cond(
            *Cond::ALL
                .iter()
                .find(|c| c.name() == t)
                .ok_or_else(|| bad("a condition (eq, ne, lt, le, gt, ge)"))?,
        ),
        Kind::Unary => {
            Operand::Unary(UnaryOp::from_text(t).ok_or_else(|| bad("a unary op (docs/ops.md)"))?)
        }
    })
}

fn dim16(s: &str) -> Option<u16> {
    s.parse::<u16>().ok()
}

/// Prints a program as text that [`assemble`] reads back to the same program.
pub fn disassemble(p: &Program) -> String {
    let mut out = String::new();
    let _ = writeln!(out, ".kernel {} {}", p.name, p.core.name());
    for g in &p.gm {
        let dims: Vec<String> = g.shape.iter().map(u64::to_string).collect();
        let _ = writeln!(
            out,
            ".gm {} {} [{}] {}",
            g.name,
            g.dtype,
            dims.join(","),
            g.role.name()
        );
    }
    for a in &p.args {
        let _ = writeln!(out, ".arg {} {}", a.name, a.value);
    }
    let n = p.code.len();
    let mut targets = vec![false; n + 1];
    for inst in &p.code {
        for (&(_, kind), arg) in inst.info().operands.iter().zip(&inst.args) {
            if let (Kind::Label, Operand::Label(t)) = (kind, arg) {
                if (*t as usize) <= n {
                    targets[*t as usize] = true;
                }
            }
        }
    }
    for (pc, inst) in p.code.iter().enumerate() {
        if targets[pc] {
            let _ = writeln!(out, "L{pc}:");
        }
        let _ = writeln!(out, "    {}", format_inst(inst, p, n));
    }
    if targets[n] {
        let _ = writeln!(out, "L{n}:");
    }
    out
}

/// One instruction as text (labels as `L<pc>`, GM arguments by name).
pub fn format_inst(inst: &Inst, p: &Program, n: usize) -> String {
    let mut s = inst.op.mnemonic().to_string();
    for (i, arg) in inst.args.iter().enumerate() {
        s.push_str(if i == 0 { " " } else { ", " });
        s.push_str(&format_operand(arg, p, n));
    }
    s
}

fn format_operand(arg: &Operand, p: &Program, n: usize) -> String {
    match *arg {
        Operand::Reg(r) => format!("r{r}"),
        Operand::Imm(v) => v.to_string(),
        Operand::Scalar(bits) => {
            let f = f64::from_bits(bits);
            let text = format!("{f:?}");
            if !f.is_nan() && text.parse::<f64>().map(f64::to_bits) == Ok(bits) {
                text
            } else {
                format!("bits:0x{bits:016x}")
            }
        }
        Operand::DType(d) => d.name().to_string(),
        Operand::Shape(r, c) => format!("{r}x{c}"),
        Operand::Mkn(m, k, n) => format!("{m}x{k}x{n}"),
        Operand::Addr(a) => format!("@0x{a:x}"),
        Operand::Gm(g) => match p.gm.get(g as usize) {
            Some(d) => d.name.clone(),
            None => format!("gm{g}"),
        },
        Operand::Label(t) if (t as usize) <= n => format!("L{t}"),
        Operand::Label(t) => format!("@{t}"),
        Operand::Pipe(pp) => pp.name().to_string(),
        Operand::Event(e) => e.to_string(),
        Operand::Cond(c) => c.name().to_string(),
        Operand::Unary(u) => u.name().to_string(),
    }
}
