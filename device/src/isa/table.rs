//! The one table that defines the ISA. Every opcode has one row: mnemonic,
//! the pipe it runs on, the core types that have it, its cost class, its
//! operands (name and kind) and a doc line. The binary encoder and decoder
//! (`binary.rs`), the assembler and disassembler (`asm.rs`), the typed
//! builder's methods (`emit.rs`, generated here: mnemonics and operand
//! names are identifiers for that), the verifier's operand checks
//! (`verify.rs`), the cycle model (`sim/cycles.rs`) and `ISA.md`
//! (`doc.rs`) are all driven by this table; only the semantics of each
//! opcode (`sim/exec.rs`) are written per opcode.

use super::emit::{Addr, EventId, Gm, Int, Label, Mkn, ProgramBuilder, Reg, Shape, ToOperand, Val};
use super::{Cond, Cores, Foot, Kind, PipeSel, Space};
use crate::isa::Pipe;
use tilejit_ir::{DType, UnaryOp};

/// How an instruction's cycles are computed (formulas in `ISA.md`; numbers
/// in [`crate::CostTable`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CostClass {
    /// `scalar`.
    Scalar,
    /// `branch` when taken, `scalar` otherwise.
    Branch,
    /// `flag` on the pipe that executes it.
    Flag,
    /// Waits for every pipe; `scalar`.
    Barrier,
    /// `vector_startup + ceil(bytes / vector_bytes_per_cycle)`.
    Vector,
    /// `gm_read_latency + ceil(bytes / gm_read_bytes_per_cycle)`.
    GmRead,
    /// `gm_write_latency + ceil(bytes / gm_write_bytes_per_cycle)`.
    GmWrite,
    /// `l1_to_l0_latency + ceil(bytes / l1_to_l0a_bytes_per_cycle)`.
    L1ToL0a,
    /// `l1_to_l0_latency + ceil(bytes / l1_to_l0b_bytes_per_cycle)`.
    L1ToL0b,
    /// `cube_startup + ceil(m/16)*ceil(k/16)*ceil(n/16)*factor`.
    Cube,
    /// `fixpipe_latency + ceil(bytes / fixpipe_bytes_per_cycle)`.
    Fixpipe,
}

/// One row of the table.
#[derive(Copy, Clone, Debug)]
pub struct OpInfo {
    /// The opcode this row defines.
    pub opcode: Opcode,
    /// Assembly mnemonic.
    pub mnemonic: &'static str,
    /// Where it executes.
    pub pipe: PipeSel,
    /// Core types that have it.
    pub cores: Cores,
    /// How its cycles are computed.
    pub cost: CostClass,
    /// Operands in order: name (for docs and messages) and kind.
    pub operands: &'static [(&'static str, Kind)],
    /// One line of documentation.
    pub doc: &'static str,
}

macro_rules! isa_table {
    ($( $name:ident $mn:ident $pipe:expr, $cores:ident, $cost:ident,
        [$($on:ident : $ok:ident),* $(,)?], $doc:literal; )*) => {
        /// An opcode; its discriminant is its row in [`TABLE`] and its byte
        /// in the binary encoding.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        // The rows' docs index with brackets (`dst[r]`), which are not links.
        #[allow(rustdoc::broken_intra_doc_links)]
        pub enum Opcode { $( #[doc = $doc] $name, )* }

        /// The ISA, one row per opcode, in opcode order.
        pub const TABLE: &[OpInfo] = &[ $( OpInfo {
            opcode: Opcode::$name,
            mnemonic: stringify!($mn),
            pipe: $pipe,
            cores: Cores::$cores,
            cost: CostClass::$cost,
            operands: &[$((stringify!($on), $ok)),*],
            doc: $doc,
        }, )* ];

        /// One method per opcode, named by its mnemonic, taking its operands
        /// in table order with one Rust type per operand kind.
        // Rows take up to 10 operands; the methods mirror them one to one.
        #[allow(clippy::too_many_arguments, rustdoc::broken_intra_doc_links)]
        impl ProgramBuilder {
            $(
                #[doc = concat!("`", stringify!($mn), "`: ", $doc)]
                pub fn $mn(&mut self $(, $on: kind_param!($ok))*) -> &mut Self {
                    let args = vec![$( ToOperand::to_operand(Into::<kind_arg!($ok)>::into($on)) ),*];
                    self.push(Opcode::$name, args)
                }
            )*
        }
    };
}

/// The Rust type a builder method takes for an operand of a table kind.
macro_rules! kind_param {
    (REG) => { Reg };
    (IMM) => { impl Into<Int> };
    (VAL) => { impl Into<Val> };
    (SCALAR) => { f64 };
    (DT) => { DType };
    (SHAPE) => { Shape };
    (MKN) => { Mkn };
    (GM) => { Gm };
    (LABEL) => { Label };
    (PIPE) => { Pipe };
    (EV) => { impl Into<EventId> };
    (COND) => { Cond };
    (UNOP) => { UnaryOp };
    (UB) => { Addr };
    (UB2) => { Addr };
    (UB_MASK) => { Addr };
    (UB_ROW) => { Addr };
    (UB_COL) => { Addr };
    (UB_ELEM) => { Addr };
    (L1) => { Addr };
    (L0A) => { Addr };
    (L0B) => { Addr };
    (L0C) => { Addr };
    (MAT_A) => { Addr };
    (MAT_B) => { Addr };
    (MAT_C) => { Addr };
}

/// The type [`kind_param`]'s parameter converts to before it becomes an
/// [`Operand`](super::Operand).
macro_rules! kind_arg {
    (IMM) => {
        Int
    };
    (VAL) => {
        Val
    };
    (EV) => {
        EventId
    };
    ($other:ident) => {
        kind_param!($other)
    };
}

use Kind::Unary as UNOP;
use Kind::{Cond as COND, DType as DT, Event as EV, Gm as GM, Imm as IMM, Label as LABEL};
use Kind::{Mkn as MKN, Pipe as PIPE, Reg as REG, Scalar as SCALAR, Shape as SHAPE, Val as VAL};

const UB: Kind = Kind::Mem(Space::Ub, Foot::Tile);
const UB2: Kind = Kind::Mem(Space::Ub, Foot::Tile2);
const UB_MASK: Kind = Kind::Mem(Space::Ub, Foot::Mask);
const UB_ROW: Kind = Kind::Mem(Space::Ub, Foot::RowVec);
const UB_COL: Kind = Kind::Mem(Space::Ub, Foot::ColVec);
const UB_ELEM: Kind = Kind::Mem(Space::Ub, Foot::Elem);
const L1: Kind = Kind::Mem(Space::L1, Foot::Tile);
const L0A: Kind = Kind::Mem(Space::L0a, Foot::Tile);
const L0B: Kind = Kind::Mem(Space::L0b, Foot::Tile);
const L0C: Kind = Kind::Mem(Space::L0c, Foot::Acc);
const MAT_A: Kind = Kind::Mem(Space::L0a, Foot::MatA);
const MAT_B: Kind = Kind::Mem(Space::L0b, Foot::MatB);
const MAT_C: Kind = Kind::Mem(Space::L0c, Foot::MatC);

const S: PipeSel = PipeSel::Fixed(Pipe::S);
const MTE1: PipeSel = PipeSel::Fixed(Pipe::Mte1);
const MTE2: PipeSel = PipeSel::Fixed(Pipe::Mte2);
const MTE3: PipeSel = PipeSel::Fixed(Pipe::Mte3);
const V: PipeSel = PipeSel::Fixed(Pipe::V);
const M: PipeSel = PipeSel::Fixed(Pipe::M);
const FIXP: PipeSel = PipeSel::Fixed(Pipe::Fixp);

isa_table! {
    // ---- scalar unit and control (both core types) ----
    Nop nop S, Both, Scalar, [], "No operation.";
    Movi movi S, Both, Scalar, [rd: REG, imm: IMM], "rd = imm.";
    Mov mov S, Both, Scalar, [rd: REG, rs: REG], "rd = rs.";
    Add add S, Both, Scalar, [rd: REG, ra: REG, b: VAL], "rd = ra + b (wrapping).";
    Sub sub S, Both, Scalar, [rd: REG, ra: REG, b: VAL], "rd = ra - b (wrapping).";
    Mul mul S, Both, Scalar, [rd: REG, ra: REG, b: VAL], "rd = ra * b (wrapping).";
    Div div S, Both, Scalar, [rd: REG, ra: REG, b: VAL], "rd = ra / b, truncating; b = 0 faults.";
    Rem rem S, Both, Scalar, [rd: REG, ra: REG, b: VAL], "rd = ra % b (sign of ra); b = 0 faults.";
    Min min S, Both, Scalar, [rd: REG, ra: REG, b: VAL], "rd = min(ra, b).";
    Max max S, Both, Scalar, [rd: REG, ra: REG, b: VAL], "rd = max(ra, b).";
    Shl shl S, Both, Scalar, [rd: REG, ra: REG, b: VAL], "rd = ra << b; b outside 0..64 faults.";
    Shr shr S, Both, Scalar, [rd: REG, ra: REG, b: VAL], "rd = ra >> b (arithmetic); b outside 0..64 faults.";
    Ldarg ldarg S, Both, Scalar, [rd: REG, index: IMM], "rd = the task's scalar argument `index`.";
    Jmp jmp S, Both, Branch, [target: LABEL], "Jump to target.";
    Blt blt S, Both, Branch, [ra: REG, b: VAL, target: LABEL], "Jump to target if ra < b.";
    Bge bge S, Both, Branch, [ra: REG, b: VAL, target: LABEL], "Jump to target if ra >= b.";
    Beq beq S, Both, Branch, [ra: REG, b: VAL, target: LABEL], "Jump to target if ra == b.";
    Bne bne S, Both, Branch, [ra: REG, b: VAL, target: LABEL], "Jump to target if ra != b.";
    Setf setf PipeSel::Operand(0), Both, Flag, [src: PIPE, dst: PIPE, event: EV],
        "Queued on `src`: once every earlier `src` instruction is done, raise flag (src, dst, event).";
    Waitf waitf PipeSel::Operand(1), Both, Flag, [src: PIPE, dst: PIPE, event: EV],
        "Queued on `dst`: `dst` stalls until flag (src, dst, event) is raised, then lowers it.";
    Barrier barrier PipeSel::All, Both, Barrier, [],
        "Every pipe waits until all earlier instructions on every pipe are done.";
    End end S, Both, Scalar, [], "Stop issuing; the run ends when every pipe has drained.";

    // ---- AIV: GM <-> UB transfers ----
    Ld ld MTE2, Aiv, GmRead,
        [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, src: GM, offset: VAL, stride: VAL],
        "Load the valid vrows x vcols region from GM (element `offset`, row stride `stride` elements) into a UB tile; the rest of the tile is zero-filled.";
    Ldx ldx MTE2, Aiv, GmRead,
        [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, src: GM, offset: VAL, stride: VAL, cstride: VAL],
        "Strided load: element (r, c) of the valid region comes from GM element offset + r*stride + c*cstride (a transposed or strided view); the rest of the tile is zero-filled.";
    Stx stx MTE3, Aiv, GmWrite,
        [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: GM, offset: VAL, stride: VAL, cstride: VAL, src: UB],
        "Strided store: element (r, c) of the valid region goes to GM element offset + r*stride + c*cstride.";
    Ldg ldg MTE2, Aiv, GmRead,
        [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, src: GM, offset: VAL, cstride: VAL, itype: DT, idx: UB_ELEM, istride: VAL, gstride: VAL, len: VAL],
        "Gather load of one row (vrows = 1): element c of the valid region comes from GM element offset + c*cstride + i*gstride, where i = idx[c*istride] (an `itype` integer in UB); an i outside 0..len faults before anything is read; the rest of the tile is zero-filled.";
    St st MTE3, Aiv, GmWrite,
        [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: GM, offset: VAL, stride: VAL, src: UB],
        "Store the valid vrows x vcols region of a UB tile to GM (element `offset`, row stride `stride`).";

    // ---- AIV: vector unit, elementwise on the valid region ----
    Vadd vadd V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, b: UB], "dst = a + b.";
    Vsub vsub V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, b: UB], "dst = a - b.";
    Vmul vmul V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, b: UB], "dst = a * b.";
    Vdiv vdiv V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, b: UB], "dst = a / b (integers: truncating, x / 0 = 0).";
    Vmax vmax V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, b: UB], "dst = max(a, b), NaN-propagating.";
    Vmin vmin V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, b: UB], "dst = min(a, b), NaN-propagating.";
    Vpow vpow V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, b: UB], "dst = a ^ b (floats: IEEE pow; integers: wrapping, 0 for b < 0 unless a is 1 or -1).";
    Vrem vrem V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, b: UB], "dst = a mod b with b's sign (integers: x mod 0 = 0; floats: x mod 0 = NaN).";
    Vand vand V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, b: UB], "dst = a & b (integers only).";
    Vor vor V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, b: UB], "dst = a | b (integers only).";
    Vxor vxor V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, b: UB], "dst = a ^ b (integers only).";
    Vshl vshl V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, b: UB], "dst = a << b (integers only; 0 for b negative or at least the bit width).";
    Vshr vshr V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, b: UB], "dst = a >> b, logical on unsigned and arithmetic on signed dtypes (integers only; b negative or at least the bit width leaves the sign fill).";
    Vmov vmov V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB], "dst = a.";
    Vunary vunary V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, op: UNOP], "dst = op(a) for a unary op of the op table (docs/ops.md) that takes the dtype; computed as the reference interpreter does.";
    Vadds vadds V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, s: SCALAR], "dst = a + s.";
    Vmuls vmuls V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, s: SCALAR], "dst = a * s.";
    Vmaxs vmaxs V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, s: SCALAR], "dst = max(a, s), NaN-propagating.";
    Vmins vmins V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, a: UB, s: SCALAR], "dst = min(a, s), NaN-propagating.";
    Vdup vdup V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, s: SCALAR], "dst = s everywhere in the valid region.";
    Vdupr vdupr V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, rs: REG], "dst = the value in rs everywhere in the valid region (floats: rs holds f64 bits, rounded to dtype; integers: wrapped).";
    Vbcast vbcast V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, src: UB_ELEM], "dst = src's first element everywhere in the valid region.";
    Vcmp vcmp V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, cond: COND, dst: UB_MASK, a: UB, b: UB], "dst (bool tile) = a cond b.";
    Vsel vsel V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, mask: UB_MASK, a: UB, b: UB], "dst = mask ? a : b.";
    Vcast vcast V, Aiv, Vector, [dtype: DT, from: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, src: UB2], "dst = src converted from `from` to `dtype` (round to nearest; float -> int truncates and saturates).";
    Vrsum vrsum V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB_ROW, src: UB], "dst[r] = sum of row r's valid columns (accumulated exactly, rounded once).";
    Vrmax vrmax V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB_ROW, src: UB], "dst[r] = max of row r's valid columns, NaN-propagating.";
    Vrmin vrmin V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB_ROW, src: UB], "dst[r] = min of row r's valid columns, NaN-propagating.";
    Vrprod vrprod V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB_ROW, src: UB], "dst[r] = product of row r's valid columns (1 if none; floats multiplied in f64, rounded once; integers wrap).";
    Vbrow vbrow V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, src: UB_ROW], "dst[r][c] = src[r] (broadcast one value per row along the row).";
    Vbcol vbcol V, Aiv, Vector, [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: UB, src: UB_COL], "dst[r][c] = src[c] (broadcast a row vector down the rows).";

    // ---- AIC: GM -> L1 -> L0A/L0B -> cube -> L0C -> GM ----
    Ldl1 ldl1 MTE2, Aic, GmRead,
        [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: L1, src: GM, offset: VAL, stride: VAL],
        "Load the valid region from GM into an L1 tile; the rest of the tile is zero-filled.";
    Ldl1x ldl1x MTE2, Aic, GmRead,
        [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: L1, src: GM, offset: VAL, stride: VAL, cstride: VAL],
        "Strided load into L1: element (r, c) of the valid region comes from GM element offset + r*stride + c*cstride (a transposed matmul operand read in place); the rest of the tile is zero-filled.";
    Ldl1c ldl1c MTE2, Aic, GmRead,
        [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: L1, src: GM, offset: VAL, row: VAL, col: VAL, group: VAL, geom: REG],
        "Load3D (implicit im2col): element (r, c) of the valid region is element q = col + c of window p = row + r of channel group `group` of the [ch, h, w] image at GM element `offset`, zero where the window leaves the image; registers geom..geom+13 hold ch, h, w, kh, kw, stride (rows, columns), padding (top, left, bottom, right), dilation (rows, columns), groups (window p at output (p / ow, p % ow), q over the group's ch / groups channels, channel-major then row-major); the rest of the tile is zero-filled.";
    Mvl0a mvl0a MTE1, Aic, L1ToL0a, [dtype: DT, shape: SHAPE, dst: L0A, src: L1], "Copy a whole L1 tile to L0A (left matrix).";
    Mvl0b mvl0b MTE1, Aic, L1ToL0b, [dtype: DT, shape: SHAPE, dst: L0B, src: L1], "Copy a whole L1 tile to L0B (right matrix).";
    Mmad mmad M, Aic, Cube, [dtype: DT, mkn: MKN, c: MAT_C, a: MAT_A, b: MAT_B, acc: IMM],
        "c[m,n] (f32) = (acc ? c : 0) + a[m,k] @ b[k,n]; each step is a multiply-add rounded to f32.";
    Fixp fixp FIXP, Aic, Fixpipe,
        [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: GM, offset: VAL, stride: VAL, src: L0C, relu: IMM],
        "Store the valid region of an f32 L0C tile to GM converted to `dtype`, with relu when relu = 1.";
    Fixpx fixpx FIXP, Aic, Fixpipe,
        [dtype: DT, shape: SHAPE, vrows: VAL, vcols: VAL, dst: GM, offset: VAL, stride: VAL, cstride: VAL, src: L0C, relu: IMM],
        "Strided store of the valid region of an f32 L0C tile: element (r, c) to GM element offset + r*stride + c*cstride (a product written transposed, a convolution's NCHW), converted to `dtype`, with relu when relu = 1.";
}

impl Opcode {
    /// This opcode's row in the table.
    pub fn info(self) -> &'static OpInfo {
        &TABLE[self as usize]
    }

    /// The opcode encoded as `byte`, if any.
    pub fn from_byte(byte: u8) -> Option<Opcode> {
        TABLE.get(byte as usize).map(|i| i.opcode)
    }

    /// The opcode whose mnemonic is `m`, if any.
    pub fn from_mnemonic(m: &str) -> Option<Opcode> {
        TABLE.iter().find(|i| i.mnemonic == m).map(|i| i.opcode)
    }

    /// The assembly mnemonic.
    pub fn mnemonic(self) -> &'static str {
        self.info().mnemonic
    }
}
