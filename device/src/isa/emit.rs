//! A typed program builder: code generators push instructions as method
//! calls instead of writing assembly text. [`table`](super::table)
//! generates one [`ProgramBuilder`] method per opcode (named by its
//! mnemonic, operands in table order), so the builder, the assembler and
//! the encoder cannot disagree about an instruction's operands.
//!
//! Each operand kind has one Rust type: [`Reg`] for registers, [`Int`]
//! (any Rust integer) for immediates, [`Val`] for register-or-immediate,
//! `f64` for float literals, [`DType`], [`Shape`], [`Mkn`], [`Addr`] for
//! local addresses, [`Gm`] (from [`ProgramBuilder::gm`]) for GM arguments,
//! [`Label`] (from [`ProgramBuilder::label`], placed by
//! [`ProgramBuilder::bind`]) for jump targets, [`Pipe`], [`EventId`] and
//! [`Cond`]. Values that do not fit the encoding (an immediate beyond
//! `i64`, a shape beyond `u16`, an address beyond `u32`) and labels that
//! are never bound or bound twice are reported by
//! [`ProgramBuilder::finish`], naming the instruction.
//!
//! ```
//! use tilejit_device::isa::emit::{ProgramBuilder, Reg};
//! use tilejit_device::isa::{asm, CoreType};
//!
//! const R0: Reg = Reg::fixed(0);
//! let mut b = ProgramBuilder::new("count", CoreType::Aiv);
//! let top = b.label();
//! b.movi(R0, 0);
//! b.bind(top);
//! b.add(R0, R0, 1).blt(R0, 10, top).end();
//! let built = b.finish().expect("a well-formed program");
//! let text = ".kernel count aiv\n    movi r0, 0\nl:\n    add r0, r0, 1\n    blt r0, 10, l\n    end\n";
//! assert_eq!(built, asm::assemble(text).expect("valid text"));
//! ```

use super::{
    is_ident, ArgDecl, Cond, CoreType, GmDecl, Inst, Kind, Opcode, Operand, Pipe, Program, Role,
    NUM_REGS,
};
use crate::error::{DeviceError, Result};
use tilejit_ir::{DType, UnaryOp};

/// A scalar register `r0`..`r31`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reg(u8);

impl Reg {
    /// Register `index`, if there is one.
    pub const fn new(index: usize) -> Option<Reg> {
        if index < NUM_REGS {
            Some(Reg(index as u8))
        } else {
            None
        }
    }

    /// Register `index`, for constants (`const R2: Reg = Reg::fixed(2)`),
    /// where an index past `r31` fails to compile.
    ///
    /// # Panics
    ///
    /// When `index` is not a register (at compile time in a constant).
    pub const fn fixed(index: u8) -> Reg {
        assert!((index as usize) < NUM_REGS, "no such register");
        Reg(index)
    }

    /// Its index.
    pub const fn index(self) -> u8 {
        self.0
    }
}

/// An integer immediate: any Rust integer converts to it losslessly; the
/// builder reports one that does not fit `i64`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Int(i128);

macro_rules! int_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Int {
            fn from(v: $t) -> Int {
                Int(v as i128)
            }
        }
        impl From<$t> for Val {
            fn from(v: $t) -> Val {
                Val::Int(Int::from(v))
            }
        }
    )*};
}
int_from!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

/// A register or an integer immediate (the table's `Val` kind).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Val {
    /// A register's value.
    Reg(Reg),
    /// A constant.
    Int(Int),
}

impl From<Reg> for Val {
    fn from(r: Reg) -> Val {
        Val::Reg(r)
    }
}

impl From<Int> for Val {
    fn from(v: Int) -> Val {
        Val::Int(v)
    }
}

/// A byte address in a core-local memory (which one is the operand's
/// slot's); the builder reports one beyond `u32`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Addr(u64);

impl Addr {
    /// Address `bytes`.
    pub const fn new(bytes: u64) -> Addr {
        Addr(bytes)
    }
}

impl From<usize> for Addr {
    fn from(bytes: usize) -> Addr {
        Addr(bytes as u64)
    }
}

impl From<u32> for Addr {
    fn from(bytes: u32) -> Addr {
        Addr(bytes.into())
    }
}

/// A tile shape `rows x cols`; the builder reports dimensions beyond
/// `u16`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    rows: u64,
    cols: u64,
}

impl Shape {
    /// `rows x cols`.
    pub const fn new(rows: usize, cols: usize) -> Shape {
        Shape {
            rows: rows as u64,
            cols: cols as u64,
        }
    }
}

/// A matmul shape `m x k x n`; the builder reports dimensions beyond
/// `u16`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Mkn {
    m: u64,
    k: u64,
    n: u64,
}

impl Mkn {
    /// `m x k x n`.
    pub const fn new(m: usize, k: usize, n: usize) -> Mkn {
        Mkn {
            m: m as u64,
            k: k as u64,
            n: n as u64,
        }
    }
}

/// A flag event id (the verifier checks it is below
/// [`NUM_EVENTS`](super::NUM_EVENTS)).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventId(u8);

impl From<u8> for EventId {
    fn from(e: u8) -> EventId {
        EventId(e)
    }
}

/// A GM argument declared with [`ProgramBuilder::gm`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Gm(u8);

impl Gm {
    /// Its index among the program's GM arguments.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A scalar argument declared with [`ProgramBuilder::arg`]; `ldarg` takes
/// it as its index.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Arg(u8);

impl From<Arg> for Int {
    fn from(a: Arg) -> Int {
        Int(a.0.into())
    }
}

/// A jump target made by [`ProgramBuilder::label`]; it names the
/// instruction pushed after [`ProgramBuilder::bind`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Label(u32);

/// Turns a typed operand into an [`Operand`], or says why it does not fit
/// the encoding. The generated builder methods call it.
pub(super) trait ToOperand {
    fn to_operand(self) -> std::result::Result<Operand, String>;
}

impl ToOperand for Reg {
    fn to_operand(self) -> std::result::Result<Operand, String> {
        Ok(Operand::Reg(self.0))
    }
}

impl ToOperand for Int {
    fn to_operand(self) -> std::result::Result<Operand, String> {
        i64::try_from(self.0)
            .map(Operand::Imm)
            .map_err(|_| format!("{} does not fit an i64", self.0))
    }
}

impl ToOperand for Val {
    fn to_operand(self) -> std::result::Result<Operand, String> {
        match self {
            Val::Reg(r) => r.to_operand(),
            Val::Int(v) => v.to_operand(),
        }
    }
}

impl ToOperand for f64 {
    fn to_operand(self) -> std::result::Result<Operand, String> {
        Ok(Operand::Scalar(self.to_bits()))
    }
}

impl ToOperand for DType {
    fn to_operand(self) -> std::result::Result<Operand, String> {
        Ok(Operand::DType(self))
    }
}

fn dim(d: u64) -> std::result::Result<u16, String> {
    u16::try_from(d).map_err(|_| format!("dimension {d} does not fit a u16"))
}

impl ToOperand for Shape {
    fn to_operand(self) -> std::result::Result<Operand, String> {
        Ok(Operand::Shape(dim(self.rows)?, dim(self.cols)?))
    }
}

impl ToOperand for Mkn {
    fn to_operand(self) -> std::result::Result<Operand, String> {
        Ok(Operand::Mkn(dim(self.m)?, dim(self.k)?, dim(self.n)?))
    }
}

impl ToOperand for Addr {
    fn to_operand(self) -> std::result::Result<Operand, String> {
        u32::try_from(self.0)
            .map(Operand::Addr)
            .map_err(|_| format!("address 0x{:x} does not fit a u32", self.0))
    }
}

impl ToOperand for Gm {
    fn to_operand(self) -> std::result::Result<Operand, String> {
        Ok(Operand::Gm(self.0))
    }
}

impl ToOperand for Label {
    /// The label's id; [`ProgramBuilder::finish`] replaces it with the pc
    /// it is bound to.
    fn to_operand(self) -> std::result::Result<Operand, String> {
        Ok(Operand::Label(self.0))
    }
}

impl ToOperand for Pipe {
    fn to_operand(self) -> std::result::Result<Operand, String> {
        Ok(Operand::Pipe(self))
    }
}

impl ToOperand for EventId {
    fn to_operand(self) -> std::result::Result<Operand, String> {
        Ok(Operand::Event(self.0))
    }
}

impl ToOperand for Cond {
    fn to_operand(self) -> std::result::Result<Operand, String> {
        Ok(Operand::Cond(self))
    }
}

impl ToOperand for UnaryOp {
    fn to_operand(self) -> std::result::Result<Operand, String> {
        Ok(Operand::Unary(self))
    }
}

/// Builds a [`Program`]: declarations ([`gm`](Self::gm),
/// [`arg`](Self::arg)), labels ([`label`](Self::label),
/// [`bind`](Self::bind)) and one method per opcode, then
/// [`finish`](Self::finish). What the text form would reject at assembly
/// time is collected and reported by `finish`; what the verifier checks
/// (operand ranges, memory bounds, flags) it still checks.
#[derive(Clone, Debug)]
pub struct ProgramBuilder {
    program: Program,
    /// Per label: the pc it is bound to.
    labels: Vec<Option<u32>>,
    /// Everything wrong so far, in order.
    errors: Vec<String>,
}

impl ProgramBuilder {
    /// An empty program `name` (`.kernel NAME CORE`) for `core`.
    pub fn new(name: impl Into<String>, core: CoreType) -> ProgramBuilder {
        ProgramBuilder {
            program: Program {
                name: name.into(),
                core,
                gm: Vec::new(),
                args: Vec::new(),
                code: Vec::new(),
            },
            labels: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// Declares the next GM argument (`.gm NAME DTYPE [DIMS] ROLE`).
    pub fn gm(&mut self, name: &str, dtype: DType, shape: &[u64], role: Role) -> Gm {
        let index = self.program.gm.len();
        if !is_ident(name) {
            self.fail(format!("`{name}` is not a valid GM argument name"));
        } else if self.program.gm.iter().any(|g| g.name == name) {
            self.fail(format!("GM argument `{name}` declared twice"));
        }
        if index > u8::MAX as usize {
            self.fail("more than 256 GM arguments".into());
        }
        self.program.gm.push(GmDecl {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            role,
        });
        Gm(index as u8)
    }

    /// The GM argument declared `index`-th, if there is one.
    pub fn gm_at(&self, index: usize) -> Option<Gm> {
        (index < self.program.gm.len()).then_some(Gm(index as u8))
    }

    /// Declares the next scalar argument with its default value (`.arg
    /// NAME VALUE`).
    pub fn arg(&mut self, name: &str, value: i64) -> Arg {
        let index = self.program.args.len();
        if !is_ident(name) {
            self.fail(format!("`{name}` is not a valid scalar argument name"));
        } else if self.program.args.iter().any(|a| a.name == name) {
            self.fail(format!("scalar argument `{name}` declared twice"));
        }
        if index > u8::MAX as usize {
            self.fail("more than 256 scalar arguments".into());
        }
        self.program.args.push(ArgDecl {
            name: name.to_string(),
            value,
        });
        Arg(index as u8)
    }

    /// A new label, to be bound exactly once.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() as u32 - 1)
    }

    /// Binds `label` to the next instruction pushed.
    pub fn bind(&mut self, label: Label) {
        let pc = self.pc() as u32;
        match self.labels.get_mut(label.0 as usize) {
            Some(slot @ None) => *slot = Some(pc),
            Some(Some(first)) => {
                let first = *first;
                self.fail(format!(
                    "label {} bound twice (pc {first} and pc {pc})",
                    label.0
                ));
            }
            None => self.fail(format!("label {} is not from this builder", label.0)),
        }
    }

    /// The index the next instruction will have.
    pub fn pc(&self) -> usize {
        self.program.code.len()
    }

    /// Appends an instruction whose operands were converted by the
    /// generated methods; operands that did not convert are recorded.
    pub(super) fn push(
        &mut self,
        op: Opcode,
        args: Vec<std::result::Result<Operand, String>>,
    ) -> &mut Self {
        let pc = self.pc();
        let mut operands = Vec::with_capacity(args.len());
        for (i, arg) in args.into_iter().enumerate() {
            match arg {
                Ok(a) => operands.push(a),
                Err(msg) => {
                    let name = op.info().operands.get(i).map_or("?", |o| o.0);
                    self.fail(format!(
                        "pc {pc}: operand `{name}` of `{}`: {msg}",
                        op.mnemonic()
                    ));
                    operands.push(Operand::Imm(0));
                }
            }
        }
        self.program.code.push(Inst { op, args: operands });
        self
    }

    fn fail(&mut self, msg: String) {
        self.errors.push(msg);
    }

    /// The program, with every label operand resolved to its pc; an error
    /// names the first thing that was wrong (an operand that does not fit,
    /// a label used or made but never bound, one bound twice, a bad
    /// declaration).
    pub fn finish(mut self) -> Result<Program> {
        let unbound: Vec<u32> = (0..self.labels.len() as u32)
            .filter(|&l| self.labels[l as usize].is_none())
            .collect();
        for l in unbound {
            self.fail(format!("label {l} is never bound"));
        }
        let labels = &self.labels;
        let mut bad_label = None;
        for (pc, inst) in self.program.code.iter_mut().enumerate() {
            let info = inst.op.info();
            for (&(_, kind), arg) in info.operands.iter().zip(inst.args.iter_mut()) {
                if let (Kind::Label, Operand::Label(id)) = (kind, *arg) {
                    match labels.get(id as usize).copied().flatten() {
                        Some(target) => *arg = Operand::Label(target),
                        None => bad_label = bad_label.or(Some((pc, id))),
                    }
                }
            }
        }
        if let Some((pc, id)) = bad_label {
            self.errors
                .push(format!("pc {pc}: label {id} is not bound in this program"));
        }
        match self.errors.first() {
            None => Ok(self.program),
            Some(first) => Err(DeviceError::Build {
                program: self.program.name,
                msg: if self.errors.len() > 1 {
                    format!("{first} (and {} more)", self.errors.len() - 1)
                } else {
                    first.clone()
                },
            }),
        }
    }
}

#[cfg(test)]
mod tests;
