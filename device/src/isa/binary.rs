//! The binary encoding of a program, driven by the table: each operand is
//! written by its slot's kind, so the encoder and decoder cannot disagree
//! with the assembler. Layout (little endian):
//!
//! ```text
//! "TJBC" u16:version u8:core str:name
//! u8:n_gm   { str:name u8:dtype u8:rank u64*rank:dims u8:role }
//! u8:n_args { str:name i64:value }
//! u32:n_inst { u8:opcode operands... }
//! str = u8:len bytes (UTF-8)
//! operands: Reg u8 | Imm i64 | Val (u8:0 Reg u8 | u8:1 Imm i64) | Scalar u64 bits
//!           | DType u8 | Shape u16 u16 | Mkn u16 u16 u16 | Mem u32 | Gm u8
//!           | Label u32 | Pipe u8 | Event u8 | Cond u8 | Unary u8
//! ```
//!
//! A unary op is encoded as its index in `UnaryOp::ALL`: the op table
//! only appends, so codes never move (as dtype codes).
//!
//! ```text
//! ```
//!
//! The decoder never panics and never allocates more than its input
//! justifies: every count is checked against the bytes that remain.

use super::{ArgDecl, Cond, CoreType, GmDecl, Inst, Kind, Opcode, Operand, Pipe, Program, Role};
use crate::error::{DeviceError, Result};
use tilejit_ir::{DType, UnaryOp};

/// File magic.
pub const MAGIC: &[u8; 4] = b"TJBC";
/// Encoding version (2: opcodes renumbered by the math rows `vpow` ...
/// `vsign`; 3: by `ldl1c`; 4: the per-op unary rows replaced by `vunary`;
/// 5: by `ldl1x`; 6: by the bitwise rows `vand` ... `vshr`; 7: `ldl1c`
/// takes a group and reads the whole window, a 14-register geometry).
pub const VERSION: u16 = 7;
const MAX_RANK: usize = 8;

/// Encodes a program. Fails only if a name, count or operand cannot be
/// represented (names over 255 bytes, more than 255 arguments, an operand
/// that does not fit its slot).
pub fn encode(p: &Program) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(16 + p.code.len() * 16);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.push(match p.core {
        CoreType::Aic => 0,
        CoreType::Aiv => 1,
    });
    put_str(&mut out, &p.name)?;
    out.push(count_u8(p.gm.len(), "GM arguments")?);
    for g in &p.gm {
        put_str(&mut out, &g.name)?;
        out.push(dtype_byte(g.dtype));
        if g.shape.len() > MAX_RANK {
            return Err(enc_err(format!("GM argument `{}` has rank > 8", g.name)));
        }
        out.push(g.shape.len() as u8);
        for d in &g.shape {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.push(g.role as u8);
    }
    out.push(count_u8(p.args.len(), "scalar arguments")?);
    for a in &p.args {
        put_str(&mut out, &a.name)?;
        out.extend_from_slice(&a.value.to_le_bytes());
    }
    let n = u32::try_from(p.code.len()).map_err(|_| enc_err("too many instructions".into()))?;
    out.extend_from_slice(&n.to_le_bytes());
    for (pc, inst) in p.code.iter().enumerate() {
        encode_inst(&mut out, inst).map_err(|m| enc_err(format!("pc {pc}: {m}")))?;
    }
    Ok(out)
}

fn enc_err(msg: String) -> DeviceError {
    DeviceError::Decode {
        offset: 0,
        msg: format!("cannot encode: {msg}"),
    }
}

fn count_u8(n: usize, what: &str) -> Result<u8> {
    u8::try_from(n).map_err(|_| enc_err(format!("more than 255 {what}")))
}

fn put_str(out: &mut Vec<u8>, s: &str) -> Result<()> {
    out.push(count_u8(s.len(), "bytes in a name")?);
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn dtype_byte(d: DType) -> u8 {
    DType::ALL.iter().position(|&x| x == d).unwrap_or(0) as u8
}

fn encode_inst(out: &mut Vec<u8>, inst: &Inst) -> std::result::Result<(), String> {
    let info = inst.info();
    if inst.args.len() != info.operands.len() {
        return Err(format!(
            "`{}` takes {} operands, has {}",
            info.mnemonic,
            info.operands.len(),
            inst.args.len()
        ));
    }
    out.push(inst.op as u8);
    for (&(name, kind), arg) in info.operands.iter().zip(&inst.args) {
        if !arg.fits(kind) {
            return Err(format!(
                "operand `{name}` of `{}` is {arg:?}",
                info.mnemonic
            ));
        }
        match *arg {
            Operand::Reg(r) => {
                if kind == Kind::Val {
                    out.push(0);
                }
                out.push(r);
            }
            Operand::Imm(v) => {
                if kind == Kind::Val {
                    out.push(1);
                }
                out.extend_from_slice(&v.to_le_bytes());
            }
            Operand::Scalar(bits) => out.extend_from_slice(&bits.to_le_bytes()),
            Operand::DType(d) => out.push(dtype_byte(d)),
            Operand::Shape(r, c) => {
                out.extend_from_slice(&r.to_le_bytes());
                out.extend_from_slice(&c.to_le_bytes());
            }
            Operand::Mkn(m, k, n) => {
                for v in [m, k, n] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            Operand::Addr(a) | Operand::Label(a) => out.extend_from_slice(&a.to_le_bytes()),
            Operand::Gm(g) => out.push(g),
            Operand::Pipe(p) => out.push(p as u8),
            Operand::Event(e) => out.push(e),
            Operand::Cond(c) => out.push(c as u8),
            Operand::Unary(u) => out.push(u as u8),
        }
    }
    Ok(())
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, msg: impl Into<String>) -> DeviceError {
        DeviceError::Decode {
            offset: self.pos,
            msg: msg.into(),
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.bytes.len() - self.pos < n {
            return Err(self.err(format!("input ends inside {what}")));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn str(&mut self, what: &str) -> Result<String> {
        let n = self.u8(what)? as usize;
        let at = self.pos;
        let b = self.take(n, what)?;
        let s = std::str::from_utf8(b).map_err(|_| DeviceError::Decode {
            offset: at,
            msg: format!("{what} is not UTF-8"),
        })?;
        if !super::is_ident(s) {
            return Err(DeviceError::Decode {
                offset: at,
                msg: format!("{what} `{}` is not an identifier", s.escape_debug()),
            });
        }
        Ok(s.to_string())
    }

    fn dtype(&mut self) -> Result<DType> {
        let b = self.u8("a dtype")?;
        DType::ALL
            .get(b as usize)
            .copied()
            .ok_or_else(|| self.err(format!("bad dtype byte {b}")))
    }
}

/// Decodes a program. Any input gives a program or an error, never a panic;
/// the result still has to pass [`super::verify::verify`] before it runs.
pub fn decode(bytes: &[u8]) -> Result<Program> {
    let mut r = Reader { bytes, pos: 0 };
    if r.take(4, "the magic")? != MAGIC {
        return Err(DeviceError::Decode {
            offset: 0,
            msg: "not a tilejit bytecode file (bad magic)".into(),
        });
    }
    let version = r.u16("the version")?;
    if version != VERSION {
        return Err(r.err(format!(
            "unsupported version {version} (this build reads {VERSION})"
        )));
    }
    let core = match r.u8("the core type")? {
        0 => CoreType::Aic,
        1 => CoreType::Aiv,
        b => return Err(r.err(format!("bad core type byte {b}"))),
    };
    let name = r.str("the program name")?;
    let n_gm = r.u8("the GM argument count")?;
    let mut gm = Vec::with_capacity(n_gm as usize);
    for _ in 0..n_gm {
        let name = r.str("a GM argument name")?;
        // The assembler refuses a name declared twice, so the decoder does
        // too: the disassembly of what decodes must assemble back.
        if gm.iter().any(|g: &GmDecl| g.name == name) {
            return Err(r.err(format!("GM argument `{name}` declared twice")));
        }
        let dtype = r.dtype()?;
        let rank = r.u8("a rank")? as usize;
        if rank > MAX_RANK {
            return Err(r.err(format!("rank {rank} > {MAX_RANK}")));
        }
        let mut shape = Vec::with_capacity(rank);
        for _ in 0..rank {
            shape.push(r.u64("a dimension")?);
        }
        let role = match r.u8("a role")? {
            0 => Role::In,
            1 => Role::Out,
            2 => Role::InOut,
            b => return Err(r.err(format!("bad role byte {b}"))),
        };
        gm.push(GmDecl {
            name,
            dtype,
            shape,
            role,
        });
    }
    let n_args = r.u8("the scalar argument count")?;
    let mut args = Vec::with_capacity(n_args as usize);
    for _ in 0..n_args {
        let name = r.str("a scalar argument name")?;
        if args.iter().any(|a: &ArgDecl| a.name == name) {
            return Err(r.err(format!("scalar argument `{name}` declared twice")));
        }
        let value = r.u64("a scalar argument value")? as i64;
        args.push(ArgDecl { name, value });
    }
    let n = r.u32("the instruction count")? as usize;
    // Each instruction takes at least one byte: a count beyond the input is a lie.
    if n > bytes.len() - r.pos {
        return Err(r.err(format!(
            "{n} instructions cannot fit in {} bytes",
            bytes.len() - r.pos
        )));
    }
    let mut code = Vec::with_capacity(n);
    for pc in 0..n {
        code.push(decode_inst(&mut r).map_err(|e| match e {
            DeviceError::Decode { offset, msg } => DeviceError::Decode {
                offset,
                msg: format!("pc {pc}: {msg}"),
            },
            e => e,
        })?);
    }
    if r.pos != bytes.len() {
        return Err(r.err(format!(
            "{} trailing bytes after the last instruction",
            bytes.len() - r.pos
        )));
    }
    Ok(Program {
        name,
        core,
        gm,
        args,
        code,
    })
}

fn decode_inst(r: &mut Reader<'_>) -> Result<Inst> {
    let b = r.u8("an opcode")?;
    let op = Opcode::from_byte(b).ok_or_else(|| r.err(format!("unknown opcode byte {b}")))?;
    let info = op.info();
    let mut args = Vec::with_capacity(info.operands.len());
    for &(name, kind) in info.operands {
        let what = format!("operand `{name}` of `{}`", info.mnemonic);
        let arg = match kind {
            Kind::Reg => Operand::Reg(reg(r, &what)?),
            Kind::Imm => Operand::Imm(r.u64(&what)? as i64),
            Kind::Val => match r.u8(&what)? {
                0 => Operand::Reg(reg(r, &what)?),
                1 => Operand::Imm(r.u64(&what)? as i64),
                t => return Err(r.err(format!("{what}: bad register/immediate tag {t}"))),
            },
            Kind::Scalar => Operand::Scalar(r.u64(&what)?),
            Kind::DType => Operand::DType(r.dtype()?),
            Kind::Shape => Operand::Shape(r.u16(&what)?, r.u16(&what)?),
            Kind::Mkn => Operand::Mkn(r.u16(&what)?, r.u16(&what)?, r.u16(&what)?),
            Kind::Mem(..) => Operand::Addr(r.u32(&what)?),
            Kind::Gm => Operand::Gm(r.u8(&what)?),
            Kind::Label => Operand::Label(r.u32(&what)?),
            Kind::Pipe => {
                let b = r.u8(&what)?;
                Operand::Pipe(
                    *Pipe::ALL
                        .get(b as usize)
                        .ok_or_else(|| r.err(format!("{what}: bad pipe byte {b}")))?,
                )
            }
            Kind::Event => Operand::Event(r.u8(&what)?),
            Kind::Cond => {
                let b = r.u8(&what)?;
                Operand::Cond(
                    *Cond::ALL
                        .get(b as usize)
                        .ok_or_else(|| r.err(format!("{what}: bad condition byte {b}")))?,
                )
            }
            Kind::Unary => {
                let b = r.u8(&what)?;
                Operand::Unary(
                    *UnaryOp::ALL
                        .get(b as usize)
                        .ok_or_else(|| r.err(format!("{what}: bad unary op byte {b}")))?,
                )
            }
        };
        args.push(arg);
    }
    Ok(Inst { op, args })
}

fn reg(r: &mut Reader<'_>, what: &str) -> Result<u8> {
    let b = r.u8(what)?;
    if b as usize >= super::NUM_REGS {
        return Err(r.err(format!("{what}: register r{b} does not exist (r0..r31)")));
    }
    Ok(b)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests assert by unwrapping
mod tests {
    use super::{decode, encode};
    use crate::isa::asm::{assemble, disassemble};

    /// A binary that declares a GM or scalar argument name twice does not
    /// decode: it once decoded to a program whose disassembly the
    /// assembler refused ("declared twice"), breaking the round trip.
    #[test]
    fn a_name_declared_twice_does_not_decode() {
        let text =
            ".kernel k aiv\n.gm xa f32 [8] in\n.gm xb f32 [8] out\n.arg na 1\n.arg nb 2\n    end\n";
        let good = encode(&assemble(text).unwrap()).unwrap();
        let p = decode(&good).unwrap();
        assert_eq!(assemble(&disassemble(&p)).unwrap(), p);
        // Same-length names, so renaming keeps every offset.
        for (from, to, what) in [
            (b"xb", b"xa", "GM argument `xa`"),
            (b"nb", b"na", "scalar argument `na`"),
        ] {
            let at = good.windows(2).rposition(|w| w == from).unwrap();
            let mut bad = good.clone();
            bad[at..at + 2].copy_from_slice(to);
            let e = decode(&bad).unwrap_err().to_string();
            assert!(e.contains(what) && e.contains("declared twice"), "{e}");
        }
    }
}
