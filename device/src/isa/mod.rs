//! The AIC/AIV bytecode ISA: programs of tile-level instructions, one
//! program per core function. [`table`] defines every opcode; this module
//! holds the plain data types the table speaks in ([`Inst`], [`Operand`],
//! [`Kind`], pipes, memory spaces) and [`Program`], a verified-or-not list
//! of instructions with the declarations of its GM and scalar arguments.
//!
//! Tile layout: a tile of shape `rows x cols` and dtype `d` lives in a local
//! memory at a 32-byte aligned address, row-major, each row padded to a
//! multiple of 32 bytes ([`pitch`]). Instructions act on the *valid region*
//! (`vrows x vcols`, given as registers or immediates, at most the shape),
//! so one program serves full and tail tiles.

pub mod asm;
pub mod binary;
pub mod doc;
pub mod emit;
pub mod table;
pub mod verify;

pub use table::{CostClass, OpInfo, Opcode, TABLE};
use tilejit_ir::{DType, UnaryOp};

/// Scalar registers per core (`r0`..`r31`), each an `i64`.
pub const NUM_REGS: usize = 32;
/// Flag event ids per (src, dst) pipe pair.
pub const NUM_EVENTS: u8 = 8;

/// An execution unit of a core; each runs its instructions in order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pipe {
    /// The scalar unit: issues every instruction, runs scalar ones.
    S,
    /// AIC: L1 -> L0A/L0B.
    Mte1,
    /// GM -> UB (AIV) or GM -> L1 (AIC).
    Mte2,
    /// AIV: UB -> GM.
    Mte3,
    /// AIV: the vector unit.
    V,
    /// AIC: the cube unit.
    M,
    /// AIC: L0C -> GM.
    Fixp,
}

impl Pipe {
    /// Every pipe, in encoding order.
    pub const ALL: [Pipe; 7] = [
        Pipe::S,
        Pipe::Mte1,
        Pipe::Mte2,
        Pipe::Mte3,
        Pipe::V,
        Pipe::M,
        Pipe::Fixp,
    ];

    /// The name in assembly and reports.
    pub fn name(self) -> &'static str {
        match self {
            Pipe::S => "s",
            Pipe::Mte1 => "mte1",
            Pipe::Mte2 => "mte2",
            Pipe::Mte3 => "mte3",
            Pipe::V => "v",
            Pipe::M => "m",
            Pipe::Fixp => "fixp",
        }
    }

    /// Index into per-pipe arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// True when a core of type `core` has this pipe.
    pub fn exists_on(self, core: CoreType) -> bool {
        match core {
            CoreType::Aiv => matches!(self, Pipe::S | Pipe::Mte2 | Pipe::V | Pipe::Mte3),
            CoreType::Aic => !matches!(self, Pipe::V | Pipe::Mte3),
        }
    }
}

/// The two kinds of core.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum CoreType {
    /// Cube core.
    Aic,
    /// Vector core.
    Aiv,
}

impl CoreType {
    /// `aic` / `aiv`.
    pub fn name(self) -> &'static str {
        match self {
            CoreType::Aic => "aic",
            CoreType::Aiv => "aiv",
        }
    }

    /// Parses `aic` / `aiv`.
    pub fn from_name(s: &str) -> Option<CoreType> {
        match s {
            "aic" => Some(CoreType::Aic),
            "aiv" => Some(CoreType::Aiv),
            _ => None,
        }
    }
}

/// Which core types have an opcode.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Cores {
    /// Both.
    Both,
    /// Cube cores only.
    Aic,
    /// Vector cores only.
    Aiv,
}

impl Cores {
    /// True when `core` has it.
    pub fn has(self, core: CoreType) -> bool {
        match self {
            Cores::Both => true,
            Cores::Aic => core == CoreType::Aic,
            Cores::Aiv => core == CoreType::Aiv,
        }
    }
}

/// Where an instruction executes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PipeSel {
    /// Always this pipe.
    Fixed(Pipe),
    /// The pipe named by operand `i` (flags).
    Operand(usize),
    /// Every pipe (barrier).
    All,
}

/// A core-local memory.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Space {
    /// AIV unified buffer.
    Ub,
    /// AIC L1 buffer.
    L1,
    /// AIC left-matrix buffer.
    L0a,
    /// AIC right-matrix buffer.
    L0b,
    /// AIC accumulator buffer (f32).
    L0c,
}

impl Space {
    /// Every space.
    pub const ALL: [Space; 5] = [Space::Ub, Space::L1, Space::L0a, Space::L0b, Space::L0c];

    /// The name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Space::Ub => "UB",
            Space::L1 => "L1",
            Space::L0a => "L0A",
            Space::L0b => "L0B",
            Space::L0c => "L0C",
        }
    }

    /// Index into per-space arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The bytes a memory operand covers, as a function of the instruction's
/// dtype(s) and shape: see [`Inst::footprint`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Foot {
    /// `rows x cols` of the first dtype.
    Tile,
    /// `rows x cols` of the second dtype (a cast's source).
    Tile2,
    /// `rows x cols` of bool.
    Mask,
    /// `rows` values of the dtype, contiguous (a `1 x rows` tile).
    RowVec,
    /// `cols` values of the dtype, contiguous (a `1 x cols` tile).
    ColVec,
    /// `rows x cols` of f32 (an accumulator tile).
    Acc,
    /// One element (a 32-byte slot).
    Elem,
    /// `m x k` of the dtype.
    MatA,
    /// `k x n` of the dtype.
    MatB,
    /// `m x n` of f32.
    MatC,
}

/// Comparison of `vcmp`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Cond {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl Cond {
    /// Every condition, in encoding order.
    pub const ALL: [Cond; 6] = [Cond::Eq, Cond::Ne, Cond::Lt, Cond::Le, Cond::Gt, Cond::Ge];

    /// The name in assembly.
    pub fn name(self) -> &'static str {
        match self {
            Cond::Eq => "eq",
            Cond::Ne => "ne",
            Cond::Lt => "lt",
            Cond::Le => "le",
            Cond::Gt => "gt",
            Cond::Ge => "ge",
        }
    }
}

/// The kind of an operand slot in the table.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A register `r0`..`r31`.
    Reg,
    /// An integer immediate.
    Imm,
    /// A register or an integer immediate.
    Val,
    /// A floating-point literal (tile-scalar ops).
    Scalar,
    /// An element type.
    DType,
    /// A tile shape `rows x cols`.
    Shape,
    /// A matmul shape `m x k x n`.
    Mkn,
    /// A byte address in a local memory, covering a footprint.
    Mem(Space, Foot),
    /// One of the task's GM arguments.
    Gm,
    /// An instruction index (a label in assembly).
    Label,
    /// A pipe.
    Pipe,
    /// A flag event id.
    Event,
    /// A comparison.
    Cond,
    /// A unary op of the op table (`tilejit_ir::UnaryOp`).
    Unary,
}

/// An operand value.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// A register index.
    Reg(u8),
    /// An integer.
    Imm(i64),
    /// A float, kept as its bits so equality is exact.
    Scalar(u64),
    /// An element type.
    DType(DType),
    /// Tile shape.
    Shape(u16, u16),
    /// Matmul shape.
    Mkn(u16, u16, u16),
    /// A local byte address.
    Addr(u32),
    /// A GM argument index.
    Gm(u8),
    /// An instruction index.
    Label(u32),
    /// A pipe.
    Pipe(Pipe),
    /// An event id.
    Event(u8),
    /// A comparison.
    Cond(Cond),
    /// A unary op.
    Unary(UnaryOp),
}

impl Operand {
    /// True when this value fits a slot of kind `k`.
    pub fn fits(&self, k: Kind) -> bool {
        matches!(
            (self, k),
            (Operand::Reg(_), Kind::Reg | Kind::Val)
                | (Operand::Imm(_), Kind::Imm | Kind::Val)
                | (Operand::Scalar(_), Kind::Scalar)
                | (Operand::DType(_), Kind::DType)
                | (Operand::Shape(..), Kind::Shape)
                | (Operand::Mkn(..), Kind::Mkn)
                | (Operand::Addr(_), Kind::Mem(..))
                | (Operand::Gm(_), Kind::Gm)
                | (Operand::Label(_), Kind::Label)
                | (Operand::Pipe(_), Kind::Pipe)
                | (Operand::Event(_), Kind::Event)
                | (Operand::Cond(_), Kind::Cond)
                | (Operand::Unary(_), Kind::Unary)
        )
    }
}

/// One instruction: an opcode and its operands in table order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Inst {
    /// What it does.
    pub op: Opcode,
    /// Its operands, one per table slot.
    pub args: Vec<Operand>,
}

/// Row padding: bytes per tile row of `cols` elements of `dtype`.
pub fn pitch(cols: u64, dtype: DType) -> u64 {
    (cols * dtype.size_bytes() as u64).next_multiple_of(32)
}

impl Inst {
    /// The table row.
    pub fn info(&self) -> &'static OpInfo {
        self.op.info()
    }

    /// The first dtype operand (the instruction's dtype), if any.
    pub fn dtype(&self) -> Option<DType> {
        self.args.iter().find_map(|a| match a {
            Operand::DType(d) => Some(*d),
            _ => None,
        })
    }

    /// The second dtype operand (a cast's source), if any.
    pub fn dtype2(&self) -> Option<DType> {
        self.args
            .iter()
            .filter_map(|a| match a {
                Operand::DType(d) => Some(*d),
                _ => None,
            })
            .nth(1)
    }

    /// The tile shape operand, if any.
    pub fn shape(&self) -> Option<(u64, u64)> {
        self.args.iter().find_map(|a| match a {
            Operand::Shape(r, c) => Some((*r as u64, *c as u64)),
            _ => None,
        })
    }

    /// The matmul shape operand, if any.
    pub fn mkn(&self) -> Option<(u64, u64, u64)> {
        self.args.iter().find_map(|a| match a {
            Operand::Mkn(m, k, n) => Some((*m as u64, *k as u64, *n as u64)),
            _ => None,
        })
    }

    /// Bytes covered by a memory operand with footprint `foot`.
    pub fn footprint(&self, foot: Foot) -> u64 {
        let dt = self.dtype().unwrap_or(DType::F32);
        let (rows, cols) = self.shape().unwrap_or((0, 0));
        let (m, k, n) = self.mkn().unwrap_or((0, 0, 0));
        match foot {
            Foot::Tile => rows * pitch(cols, dt),
            Foot::Tile2 => rows * pitch(cols, self.dtype2().unwrap_or(dt)),
            Foot::Mask => rows * pitch(cols, DType::Bool),
            Foot::RowVec => pitch(rows, dt),
            Foot::ColVec => pitch(cols, dt),
            Foot::Acc => rows * pitch(cols, DType::F32),
            Foot::Elem => pitch(1, dt),
            Foot::MatA => m * pitch(k, dt),
            Foot::MatB => k * pitch(n, dt),
            Foot::MatC => m * pitch(n, DType::F32),
        }
    }

    /// Register operand `i` (0 if the slot holds something else, which a
    /// verified program never has).
    pub fn reg(&self, i: usize) -> usize {
        match self.args.get(i) {
            Some(Operand::Reg(r)) => *r as usize,
            _ => 0,
        }
    }

    /// Integer immediate operand `i`.
    pub fn imm(&self, i: usize) -> i64 {
        match self.args.get(i) {
            Some(Operand::Imm(v)) => *v,
            _ => 0,
        }
    }

    /// Local address operand `i`.
    pub fn addr(&self, i: usize) -> usize {
        match self.args.get(i) {
            Some(Operand::Addr(a)) => *a as usize,
            _ => 0,
        }
    }

    /// Float literal operand `i`.
    pub fn scalar(&self, i: usize) -> f64 {
        match self.args.get(i) {
            Some(Operand::Scalar(bits)) => f64::from_bits(*bits),
            _ => 0.0,
        }
    }

    /// GM argument operand `i`.
    pub fn gm(&self, i: usize) -> usize {
        match self.args.get(i) {
            Some(Operand::Gm(g)) => *g as usize,
            _ => 0,
        }
    }

    /// Label operand `i`.
    pub fn label(&self, i: usize) -> usize {
        match self.args.get(i) {
            Some(Operand::Label(l)) => *l as usize,
            _ => 0,
        }
    }

    /// Pipe operand `i`.
    pub fn pipe(&self, i: usize) -> Pipe {
        match self.args.get(i) {
            Some(Operand::Pipe(p)) => *p,
            _ => Pipe::S,
        }
    }

    /// Event operand `i`.
    pub fn event(&self, i: usize) -> u8 {
        match self.args.get(i) {
            Some(Operand::Event(e)) => *e,
            _ => 0,
        }
    }

    /// Condition operand `i`.
    pub fn cond(&self, i: usize) -> Cond {
        match self.args.get(i) {
            Some(Operand::Cond(c)) => *c,
            _ => Cond::Eq,
        }
    }

    /// Unary-op operand `i` (`None` if the slot holds something else,
    /// which the verifier rules out).
    pub fn unary(&self, i: usize) -> Option<UnaryOp> {
        match self.args.get(i) {
            Some(Operand::Unary(u)) => Some(*u),
            _ => None,
        }
    }

    /// The pipe this instruction is queued on (`None` for a barrier).
    pub fn pipe_of(&self) -> Option<Pipe> {
        match self.info().pipe {
            PipeSel::Fixed(p) => Some(p),
            PipeSel::Operand(i) => Some(self.pipe(i)),
            PipeSel::All => None,
        }
    }
}

/// Whether a GM argument is read, written or both (for tools; the
/// simulator does not enforce it).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Read only.
    In,
    /// Written.
    Out,
    /// Read and written.
    InOut,
}

impl Role {
    /// `in` / `out` / `inout`.
    pub fn name(self) -> &'static str {
        match self {
            Role::In => "in",
            Role::Out => "out",
            Role::InOut => "inout",
        }
    }
}

/// A GM argument a program expects: `.gm NAME DTYPE DIMS ROLE`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GmDecl {
    /// Its name (an identifier).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape (for tools that make buffers for it).
    pub shape: Vec<u64>,
    /// Read, written or both.
    pub role: Role,
}

impl GmDecl {
    /// Elements in the declared shape (`None` on overflow).
    pub fn numel(&self) -> Option<u64> {
        self.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))
    }

    /// Bytes of the declared shape (`None` on overflow).
    pub fn bytes(&self) -> Option<u64> {
        self.numel()?.checked_mul(self.dtype.size_bytes() as u64)
    }
}

/// A scalar argument a program expects, with the value tools use when none
/// is given: `.arg NAME VALUE`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ArgDecl {
    /// Its name.
    pub name: String,
    /// Default value.
    pub value: i64,
}

/// A core program: what one core function is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Program {
    /// Its name (messages, traces).
    pub name: String,
    /// The core type it runs on.
    pub core: CoreType,
    /// GM arguments, by index.
    pub gm: Vec<GmDecl>,
    /// Scalar arguments, by index.
    pub args: Vec<ArgDecl>,
    /// The instructions; execution starts at 0.
    pub code: Vec<Inst>,
}

/// True for names the text form accepts for kernels, GM and scalar
/// arguments and labels: an identifier of at most 64 bytes that is not a
/// register name (`r7`) or a raw GM index (`gm3`).
pub fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok
        && s.len() <= 64
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !is_reg_name(s)
        && !s
            .strip_prefix("gm")
            .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
}

fn is_reg_name(s: &str) -> bool {
    s.strip_prefix('r')
        .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
}
