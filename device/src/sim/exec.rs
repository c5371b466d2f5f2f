//! The semantics of each opcode: what one instruction does to registers,
//! local memories and GM. Operand positions follow the table's rows. Every
//! data-dependent check (register-given valid regions, GM ranges, division
//! by zero) is made here and reported as a message the caller turns into a
//! fault naming core, program and pc.

use super::cycles::Work;
use super::values::{self, Vals};
use crate::isa::{pitch, Cond, Inst, Opcode, Operand, Space};
use crate::mem::{PagedMemory, Span};
use tilejit_ir::ops::ExactF32;
use tilejit_ir::{scalar, BinaryOp, DType, ReduceOp, UnaryOp};

/// Registers, local memories and the task's view of GM during a run.
pub(crate) struct Ctx<'a> {
    pub regs: [i64; crate::isa::NUM_REGS],
    pub mem: &'a mut [Vec<u8>; 5],
    pub gm: &'a PagedMemory,
    pub spans: &'a [Span],
    pub scalars: &'a [i64],
}

/// What the instruction did to control flow.
pub(crate) enum Flow {
    Next,
    Jump(usize),
    End,
}

/// Why an instruction stopped its core.
#[derive(Debug)]
pub(crate) enum Trap {
    /// A fault, described.
    Fault(String),
    /// A gather index outside its axis: the data's fault, not the
    /// program's.
    Index {
        /// The index read.
        index: i64,
        /// The axis length.
        len: i64,
    },
}

impl From<String> for Trap {
    fn from(m: String) -> Trap {
        Trap::Fault(m)
    }
}

impl From<&str> for Trap {
    fn from(m: &str) -> Trap {
        Trap::Fault(m.to_string())
    }
}

type R<T> = Result<T, String>;

impl Ctx<'_> {
    fn val(&self, inst: &Inst, i: usize) -> i64 {
        match inst.args.get(i) {
            Some(Operand::Reg(r)) => self.regs[*r as usize],
            Some(Operand::Imm(v)) => *v,
            _ => 0,
        }
    }

    /// The valid region (operands 2 and 3 after `shape_at`), checked
    /// against the tile shape.
    fn valid(&self, inst: &Inst, at: usize) -> R<(usize, usize)> {
        let (rows, cols) = inst.shape().unwrap_or((0, 0));
        let vr = self.val(inst, at);
        let vc = self.val(inst, at + 1);
        if vr < 0 || vr as u64 > rows || vc < 0 || vc as u64 > cols {
            return Err(format!(
                "valid region {vr}x{vc} is outside the tile's {rows}x{cols}"
            ));
        }
        Ok((vr as usize, vc as usize))
    }

    fn local(&self, space: Space, addr: usize, len: usize) -> R<&[u8]> {
        self.mem[space.index()]
            .get(addr..addr + len)
            .ok_or_else(|| {
                format!(
                    "{} access 0x{addr:x}+{len} outside the memory",
                    space.name()
                )
            })
    }

    fn local_mut(&mut self, space: Space, addr: usize, len: usize) -> R<&mut [u8]> {
        self.mem[space.index()]
            .get_mut(addr..addr + len)
            .ok_or_else(|| {
                format!(
                    "{} access 0x{addr:x}+{len} outside the memory",
                    space.name()
                )
            })
    }

    /// Reads `vr x vc` elements of a tile with `cols` columns.
    fn read_tile(
        &self,
        space: Space,
        addr: usize,
        dt: DType,
        (vr, vc): (usize, usize),
        cols: usize,
    ) -> R<Vals> {
        let p = pitch(cols as u64, dt) as usize;
        let mut v = values::empty(dt, vr * vc);
        for r in 0..vr {
            values::decode_into(
                self.local(space, addr + r * p, vc * dt.size_bytes())?,
                dt,
                &mut v,
            );
        }
        Ok(v)
    }

    fn write_tile(
        &mut self,
        space: Space,
        addr: usize,
        dt: DType,
        (vr, vc): (usize, usize),
        cols: usize,
        v: &Vals,
    ) -> R<()> {
        let p = pitch(cols as u64, dt) as usize;
        for r in 0..vr {
            let row = self.local_mut(space, addr + r * p, vc * dt.size_bytes())?;
            values::encode_from(v, r * vc, dt, row);
        }
        Ok(())
    }

    /// The GM region a tile access of `vrows x vcols` touches in argument
    /// `g`: operands `offset, stride` (and `cstride` when `strided`, else
    /// rows are contiguous) start at `off_at`. Checks every element lies
    /// inside the argument; returns the first element's byte address and
    /// the row and column strides in bytes.
    fn gm_access(
        &self,
        inst: &Inst,
        g: usize,
        dt: DType,
        off_at: usize,
        strided: bool,
        (vr, vc): (usize, usize),
    ) -> R<(u64, u64, u64)> {
        let span = *self
            .spans
            .get(g)
            .ok_or_else(|| format!("GM argument {g} was not passed"))?;
        let (off, stride) = (self.val(inst, off_at), self.val(inst, off_at + 1));
        let cstride = if strided {
            self.val(inst, off_at + 2)
        } else {
            1
        };
        if off < 0 || stride < 0 || cstride < 0 {
            return Err(format!(
                "negative GM offset {off}, stride {stride} or cstride {cstride}"
            ));
        }
        let size = dt.size_bytes() as u64;
        if vr == 0 || vc == 0 {
            // Nothing is touched, so the offset may point anywhere; callers
            // still form row addresses (of zero bytes), so give them ones
            // inside the argument.
            return Ok((span.addr, 0, 0));
        }
        // One past the last element, in bytes.
        let end = (vr as u64 - 1)
            .checked_mul(stride as u64)
            .and_then(|x| x.checked_add((vc as u64 - 1).checked_mul(cstride as u64)?))
            .and_then(|x| x.checked_add(off as u64 + 1))
            .and_then(|x| x.checked_mul(size));
        if !matches!(end, Some(e) if e <= span.len) {
            let (kind, strides) = if strided {
                ("strided ", format!("strides {stride}/{cstride}"))
            } else {
                ("", format!("stride {stride}"))
            };
            return Err(format!(
                "{kind}GM access to argument {g} (offset {off}, {strides}, {vr}x{vc} {dt}) goes outside its {} bytes",
                span.len
            ));
        }
        // Past the check above these are only used inside the region it
        // proved; a single row never uses the strides, which may then be
        // anything: saturate rather than overflow.
        Ok((
            span.addr.saturating_add((off as u64).saturating_mul(size)),
            (stride as u64).saturating_mul(size),
            (cstride as u64).saturating_mul(size),
        ))
    }
}

/// Executes one instruction.
pub(crate) fn exec(inst: &Inst, cx: &mut Ctx<'_>, w: &mut Work) -> Result<Flow, Trap> {
    use Opcode::*;
    let dt = inst.dtype().unwrap_or(DType::F32);
    match inst.op {
        Nop => {}
        Movi => cx.regs[inst.reg(0)] = inst.imm(1),
        Mov => cx.regs[inst.reg(0)] = cx.regs[inst.reg(1)],
        Add | Sub | Mul | Div | Rem | Min | Max | Shl | Shr => alu(inst, cx)?,
        Ldarg => {
            let i = inst.imm(1);
            cx.regs[inst.reg(0)] = *usize::try_from(i)
                .ok()
                .and_then(|i| cx.scalars.get(i))
                .ok_or_else(|| format!("scalar argument {i} was not passed"))?;
        }
        Jmp => {
            w.taken = true;
            return Ok(Flow::Jump(inst.label(0)));
        }
        Blt | Bge | Beq | Bne => {
            let a = cx.regs[inst.reg(0)];
            let b = cx.val(inst, 1);
            let take = match inst.op {
                Blt => a < b,
                Bge => a >= b,
                Beq => a == b,
                _ => a != b,
            };
            if take {
                w.taken = true;
                return Ok(Flow::Jump(inst.label(2)));
            }
        }
        Setf | Waitf | Barrier => {}
        End => return Ok(Flow::End),
        Ld | Ldl1 => load(inst, cx, w, dt)?,
        Ldl1c => ldl1c(inst, cx, w, dt)?,
        Ldx | Ldl1x => load_strided(inst, cx, w, dt)?,
        Ldg => ldg(inst, cx, w, dt)?,
        Stx => store_strided(inst, cx, w, dt)?,
        St => store(inst, cx, w, dt)?,
        Mvl0a | Mvl0b => {
            let (rows, cols) = inst.shape().unwrap_or((0, 0));
            let n = rows as usize * pitch(cols, dt) as usize;
            let src = cx.local(Space::L1, inst.addr(3), n)?.to_vec();
            let space = if inst.op == Mvl0a {
                Space::L0a
            } else {
                Space::L0b
            };
            cx.local_mut(space, inst.addr(2), n)?.copy_from_slice(&src);
            w.bytes = n as u64;
        }
        Mmad => mmad(inst, cx, w, dt)?,
        Fixp => fixp(inst, cx, w, dt)?,
        Fixpx => fixpx(inst, cx, w, dt)?,
        // Listed one by one so that a new opcode in the table does not
        // compile until it has semantics here.
        Vadd | Vsub | Vmul | Vdiv | Vmax | Vmin | Vpow | Vrem | Vand | Vor | Vxor | Vshl | Vshr
        | Vmov | Vunary | Vadds | Vmuls | Vmaxs | Vmins | Vdup | Vdupr | Vbcast | Vcmp | Vsel
        | Vcast | Vrsum | Vrmax | Vrmin | Vrprod | Vbrow | Vbcol => vector(inst, cx, w, dt)?,
    }
    Ok(Flow::Next)
}

/// The scalar ALU ops (`rd = ra op b`).
fn alu(inst: &Inst, cx: &mut Ctx<'_>) -> Result<(), Trap> {
    use Opcode::*;
    let a = cx.regs[inst.reg(1)];
    let b = cx.val(inst, 2);
    cx.regs[inst.reg(0)] = match inst.op {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        Div | Rem if b == 0 => return Err(format!("scalar {} by zero", inst.op.mnemonic()).into()),
        Div => a.wrapping_div(b),
        Rem => a.wrapping_rem(b),
        Min => a.min(b),
        Max => a.max(b),
        _ if !(0..64).contains(&b) => return Err(format!("shift by {b} (must be 0..64)").into()),
        Shl => a << b,
        _ => a >> b,
    };
    Ok(())
}

/// GM -> UB or L1: the valid region, the rest zero-filled.
fn load(inst: &Inst, cx: &mut Ctx<'_>, w: &mut Work, dt: DType) -> Result<(), Trap> {
    let (rows, cols) = inst.shape().unwrap_or((0, 0));
    let vrc = cx.valid(inst, 2)?;
    let space = if inst.op == Opcode::Ld {
        Space::Ub
    } else {
        Space::L1
    };
    let (base, stride, _) = cx.gm_access(inst, inst.gm(5), dt, 6, false, vrc)?;
    let p = pitch(cols, dt) as usize;
    let dst = inst.addr(4);
    let row_bytes = vrc.1 * dt.size_bytes();
    let gm = cx.gm;
    let tile = cx.local_mut(space, dst, rows as usize * p)?;
    // Valid bytes come from GM; only the padding is zeroed.
    for r in 0..vrc.0 {
        let row = &mut tile[r * p..(r + 1) * p];
        gm.read(base + r as u64 * stride, &mut row[..row_bytes]);
        row[row_bytes..].fill(0);
    }
    tile[vrc.0 * p..].fill(0);
    w.bytes = (vrc.0 * row_bytes) as u64;
    Ok(())
}

/// Load3D: the valid region of an implicit im2col of one channel group of
/// a GM image into L1.
fn ldl1c(inst: &Inst, cx: &mut Ctx<'_>, w: &mut Work, dt: DType) -> Result<(), Trap> {
    let (rows, cols) = inst.shape().unwrap_or((0, 0));
    let (vr, vc) = cx.valid(inst, 2)?;
    let g = inst.gm(5);
    let span = *cx
        .spans
        .get(g)
        .ok_or_else(|| format!("GM argument {g} was not passed"))?;
    let (off, row, col) = (cx.val(inst, 6), cx.val(inst, 7), cx.val(inst, 8));
    let group = cx.val(inst, 9);
    let geom = inst.reg(10);
    let v: [i64; GEOM_REGS] = cx
        .regs
        .get(geom..geom + GEOM_REGS)
        .and_then(|r| r.try_into().ok())
        .ok_or_else(|| {
            format!(
                "ldl1c geometry r{geom}..r{} past the registers",
                geom + GEOM_REGS - 1
            )
        })?;
    let ic = geometry(&v)?;
    let (oh, ow) = ic.window.out(ic.h, ic.w).ok_or_else(|| {
        format!(
            "ldl1c window {:?} does not fit its {} x {} image",
            ic.window, ic.h, ic.w
        )
    })?;
    let u = |x: i64, what: &str| -> R<usize> {
        usize::try_from(x).map_err(|_| format!("ldl1c {what} {x} is negative"))
    };
    let (off, row, col) = (u(off, "offset")?, u(row, "row")?, u(col, "col")?);
    let group = u(group, "group")?;
    let groups = ic.window.groups as usize;
    if group >= groups {
        return Err(format!("ldl1c group {group} of {groups} groups").into());
    }
    let sz = dt.size_bytes();
    // The whole image lies inside the GM argument (so no element
    // read below can leave it), and its sizes fit.
    let image = ic.c.checked_mul(ic.h).and_then(|x| x.checked_mul(ic.w));
    let end = image
        .and_then(|i| i.checked_add(off))
        .and_then(|e| e.checked_mul(sz));
    if end.is_none_or(|e| e as u64 > span.len) {
        return Err(format!(
            "ldl1c image of {} x {} x {} at element {off} goes outside GM argument {g}'s {} bytes",
            ic.c, ic.h, ic.w, span.len
        )
        .into());
    }
    let windows = oh.checked_mul(ow).ok_or("ldl1c window count overflows")?;
    let width = ic.group_channels().saturating_mul(ic.window.size());
    let past = |a: usize, b: usize, n: usize| a.checked_add(b).is_none_or(|e| e > n);
    if vr > 0 && vc > 0 && (past(row, vr, windows) || past(col, vc, width)) {
        return Err(format!(
            "ldl1c rows {row}..{} and columns {col}..{} leave the {windows} x {width} windows",
            row + vr,
            col + vc
        )
        .into());
    }
    let p = pitch(cols, dt) as usize;
    let mut values = vec![0u8; vr * vc * sz];
    for r in 0..vr {
        for c in 0..vc {
            // Inside the image (checked above), or the padding: zero.
            let Some(e) = ic.element(row + r, col + c, group) else {
                continue;
            };
            let at = (off + e) as u64 * sz as u64;
            let dst = (r * vc + c) * sz;
            cx.gm.read(span.addr + at, &mut values[dst..dst + sz]);
        }
    }
    let tile = cx.local_mut(Space::L1, inst.addr(4), rows as usize * p)?;
    tile.fill(0);
    for r in 0..vr {
        tile[r * p..r * p + vc * sz].copy_from_slice(&values[r * vc * sz..(r + 1) * vc * sz]);
    }
    w.bytes = (vr * vc * sz) as u64;
    Ok(())
}

/// Registers in `ldl1c`'s geometry block.
const GEOM_REGS: usize = 14;

/// The image and window of an `ldl1c` geometry block: channels, height,
/// width, kh, kw, strides (rows, columns), padding (top, left, bottom,
/// right), dilations (rows, columns), groups. Every value is range-checked;
/// strides, dilations and the group count are at least 1, and the groups
/// divide the channels.
fn geometry(v: &[i64; GEOM_REGS]) -> R<tilejit_ir::kernel::Im2Col> {
    const NAMES: [&str; GEOM_REGS] = [
        "channels",
        "height",
        "width",
        "kh",
        "kw",
        "row stride",
        "column stride",
        "top padding",
        "left padding",
        "bottom padding",
        "right padding",
        "row dilation",
        "column dilation",
        "groups",
    ];
    let size = |i: usize| -> R<usize> {
        usize::try_from(v[i]).map_err(|_| format!("ldl1c {} {} is negative", NAMES[i], v[i]))
    };
    let small = |i: usize| -> R<u32> {
        let x = u32::try_from(v[i])
            .map_err(|_| format!("ldl1c {} {} is out of range", NAMES[i], v[i]))?;
        // Strides, dilations and groups (registers 5, 6, 11..14).
        if x == 0 && matches!(i, 5 | 6 | 11..) {
            return Err(format!("ldl1c {} is 0", NAMES[i]));
        }
        Ok(x)
    };
    let window = tilejit_ir::Window {
        kh: small(3)?,
        kw: small(4)?,
        stride: (small(5)?, small(6)?),
        pad: [small(7)?, small(8)?, small(9)?, small(10)?],
        dilation: (small(11)?, small(12)?),
        groups: small(13)?,
    };
    let c = size(0)?;
    if !c.is_multiple_of(window.groups as usize) {
        return Err(format!(
            "ldl1c groups {} do not divide the {c} channels",
            window.groups
        ));
    }
    Ok(tilejit_ir::kernel::Im2Col {
        c,
        h: size(1)?,
        w: size(2)?,
        window,
    })
}

/// A strided GM view into UB.
fn load_strided(inst: &Inst, cx: &mut Ctx<'_>, w: &mut Work, dt: DType) -> Result<(), Trap> {
    let (rows, cols) = inst.shape().unwrap_or((0, 0));
    let vrc = cx.valid(inst, 2)?;
    let (base, rs, cs) = cx.gm_access(inst, inst.gm(5), dt, 6, true, vrc)?;
    let p = pitch(cols, dt) as usize;
    let sz = dt.size_bytes();
    let gm = cx.gm;
    let space = if inst.op == Opcode::Ldx {
        Space::Ub
    } else {
        Space::L1
    };
    let tile = cx.local_mut(space, inst.addr(4), rows as usize * p)?;
    tile.fill(0);
    for r in 0..vrc.0 {
        let row = base + r as u64 * rs;
        let addrs = (0..vrc.1 as u64).map(|c| row + c * cs);
        gm.gather(addrs, sz, &mut tile[r * p..r * p + vrc.1 * sz]);
    }
    w.bytes = (vrc.0 * vrc.1 * sz) as u64;
    Ok(())
}

/// A gather load of one row; an index outside `0..len` traps before any read.
fn ldg(inst: &Inst, cx: &mut Ctx<'_>, w: &mut Work, dt: DType) -> Result<(), Trap> {
    let (rows, cols) = inst.shape().unwrap_or((0, 0));
    let (vr, vc) = cx.valid(inst, 2)?;
    if vr > 1 {
        return Err(format!("ldg loads one row, not {vr}").into());
    }
    let g = inst.gm(5);
    let span = *cx
        .spans
        .get(g)
        .ok_or_else(|| format!("GM argument {g} was not passed"))?;
    let (off, cs) = (cx.val(inst, 6), cx.val(inst, 7));
    let it = inst.dtype2().unwrap_or(DType::I64);
    let (istride, gs, len) = (cx.val(inst, 10), cx.val(inst, 11), cx.val(inst, 12));
    if off < 0 || cs < 0 || istride < 0 || gs < 0 {
        return Err(format!(
            "negative ldg offset {off}, cstride {cs}, istride {istride} or gstride {gs}"
        )
        .into());
    }
    let sz = dt.size_bytes();
    let isz = it.size_bytes();
    let mut addrs = Vec::with_capacity(vr * vc);
    for c in 0..vr * vc {
        let at = inst.addr(9) + c * istride as usize * isz;
        let raw = cx.local(Space::Ub, at, isz)?;
        let i = match it {
            DType::I32 => i64::from(i32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]])),
            _ => i64::from_le_bytes(raw[..8].try_into().map_err(|_| "short index")?),
        };
        if !(0..len).contains(&i) {
            return Err(Trap::Index { index: i, len });
        }
        let e = (c as i64)
            .checked_mul(cs)
            .and_then(|x| x.checked_add(i.checked_mul(gs)?))
            .and_then(|x| x.checked_add(off))
            .filter(|&e| (e as u64 + 1) * sz as u64 <= span.len)
            .ok_or_else(|| {
                format!(
                    "ldg element {c} (index {i}) goes outside GM argument {g}'s {} bytes",
                    span.len
                )
            })?;
        addrs.push(span.addr + e as u64 * sz as u64);
    }
    let p = pitch(cols, dt) as usize;
    let gm = cx.gm;
    let tile = cx.local_mut(Space::Ub, inst.addr(4), rows as usize * p)?;
    tile.fill(0);
    gm.gather(addrs.into_iter(), sz, &mut tile[..vr * vc * sz]);
    w.bytes = (vr * vc * sz) as u64;
    Ok(())
}

/// A UB tile to a strided GM view.
fn store_strided(inst: &Inst, cx: &mut Ctx<'_>, w: &mut Work, dt: DType) -> Result<(), Trap> {
    let (_, cols) = inst.shape().unwrap_or((0, 0));
    let vrc = cx.valid(inst, 2)?;
    let (base, rs, cs) = cx.gm_access(inst, inst.gm(4), dt, 5, true, vrc)?;
    let p = pitch(cols, dt) as usize;
    let sz = dt.size_bytes();
    let src = inst.addr(8);
    for r in 0..vrc.0 {
        let row = cx.local(Space::Ub, src + r * p, vrc.1 * sz)?;
        let at = base + r as u64 * rs;
        cx.gm
            .scatter((0..vrc.1 as u64).map(|c| at + c * cs), sz, row)
            .map_err(|e| e.to_string())?;
    }
    w.bytes = (vrc.0 * vrc.1 * sz) as u64;
    Ok(())
}

/// A UB tile's valid region to GM.
fn store(inst: &Inst, cx: &mut Ctx<'_>, w: &mut Work, dt: DType) -> Result<(), Trap> {
    let (_, cols) = inst.shape().unwrap_or((0, 0));
    let vrc = cx.valid(inst, 2)?;
    let (base, stride, _) = cx.gm_access(inst, inst.gm(4), dt, 5, false, vrc)?;
    let p = pitch(cols, dt) as usize;
    let row_bytes = vrc.1 * dt.size_bytes();
    let src = inst.addr(7);
    for r in 0..vrc.0 {
        let row = cx.local(Space::Ub, src + r * p, row_bytes)?;
        cx.gm
            .write(base + r as u64 * stride, row)
            .map_err(|e| e.to_string())?;
    }
    w.bytes = (vrc.0 * row_bytes) as u64;
    Ok(())
}

/// An f32 L0C tile to GM, converted (and relu'd when asked).
fn fixp(inst: &Inst, cx: &mut Ctx<'_>, w: &mut Work, dt: DType) -> Result<(), Trap> {
    let (_, cols) = inst.shape().unwrap_or((0, 0));
    let vrc = cx.valid(inst, 2)?;
    let acc = cx.read_tile(Space::L0c, inst.addr(7), DType::F32, vrc, cols as usize)?;
    let acc = if inst.imm(8) == 1 {
        values::map(&acc, DType::F32, scalar::relu, |x| x)
    } else {
        acc
    };
    let (base, stride, _) = cx.gm_access(inst, inst.gm(4), dt, 5, false, vrc)?;
    let row_bytes = vrc.1 * dt.size_bytes();
    let mut row = vec![0u8; row_bytes];
    for r in 0..vrc.0 {
        values::encode_from(&acc, r * vrc.1, dt, &mut row);
        cx.gm
            .write(base + r as u64 * stride, &row)
            .map_err(|e| e.to_string())?;
    }
    w.bytes = (vrc.0 * row_bytes) as u64;
    Ok(())
}

/// An f32 L0C tile to GM through a row and a column stride, converted
/// (and relu'd when asked).
fn fixpx(inst: &Inst, cx: &mut Ctx<'_>, w: &mut Work, dt: DType) -> Result<(), Trap> {
    let (_, cols) = inst.shape().unwrap_or((0, 0));
    let vrc = cx.valid(inst, 2)?;
    let acc = cx.read_tile(Space::L0c, inst.addr(8), DType::F32, vrc, cols as usize)?;
    let acc = if inst.imm(9) == 1 {
        values::map(&acc, DType::F32, scalar::relu, |x| x)
    } else {
        acc
    };
    let (base, rs, cs) = cx.gm_access(inst, inst.gm(4), dt, 5, true, vrc)?;
    let sz = dt.size_bytes();
    let mut row = vec![0u8; vrc.1 * sz];
    for r in 0..vrc.0 {
        values::encode_from(&acc, r * vrc.1, dt, &mut row);
        let at = base + r as u64 * rs;
        cx.gm
            .scatter((0..vrc.1 as u64).map(|c| at + c * cs), sz, &row)
            .map_err(|e| e.to_string())?;
    }
    w.bytes = (vrc.0 * row.len()) as u64;
    Ok(())
}

fn mmad(inst: &Inst, cx: &mut Ctx<'_>, w: &mut Work, dt: DType) -> R<()> {
    let (m, k, n) = inst.mkn().unwrap_or((0, 0, 0));
    let (m, k, n) = (m as usize, k as usize, n as usize);
    let a = cx.read_tile(Space::L0a, inst.addr(3), dt, (m, k), k)?;
    let b = cx.read_tile(Space::L0b, inst.addr(4), dt, (k, n), n)?;
    let mut c = if inst.imm(5) == 1 {
        match cx.read_tile(Space::L0c, inst.addr(2), DType::F32, (m, n), n)? {
            Vals::F(v) => v,
            Vals::I(_) => vec![0.0; m * n],
        }
    } else {
        vec![0.0; m * n]
    };
    let (Vals::F(a), Vals::F(b)) = (a, b) else {
        return Err("cube operands must be floats".into());
    };
    // Like the cube, one instruction forms each output element's dot
    // product over its K slice without intermediate rounding (f16/bf16/f32
    // products are exact in f64, and so is their sum to within f64's
    // rounding) and adds it to the f32 accumulator in L0C: one rounding per
    // instruction, so a long K loses no more than K/64 roundings.
    let mut dot = vec![0.0f64; n];
    for i in 0..m {
        dot.iter_mut().for_each(|d| *d = 0.0);
        for p in 0..k {
            let x = a[i * k + p];
            for (d, &y) in dot.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                *d += x * y;
            }
        }
        for (s, d) in c[i * n..(i + 1) * n].iter_mut().zip(&dot) {
            *s = (*s + d) as f32 as f64;
        }
    }
    cx.write_tile(Space::L0c, inst.addr(2), DType::F32, (m, n), n, &Vals::F(c))?;
    w.blocks = (m.div_ceil(16) * k.div_ceil(16) * n.div_ceil(16)) as u64;
    w.macs = (m * k * n) as u64;
    Ok(())
}

fn vector(inst: &Inst, cx: &mut Ctx<'_>, w: &mut Work, dt: DType) -> R<()> {
    use Opcode::*;
    // Operand layout: dtype, shape, vrows, vcols, ... except vcast (dtype,
    // from, shape, vrows, vcols, dst, src) and vcmp (cond before dst).
    let (_, cols) = inst.shape().unwrap_or((0, 0));
    let cols = cols as usize;
    let valid_at = if inst.op == Vcast { 3 } else { 2 };
    let vrc = cx.valid(inst, valid_at)?;
    let (vr, vc) = vrc;
    w.bytes = (vr * vc * dt.size_bytes()) as u64;
    if dt == DType::F32 && f32_fast(inst, cx, vrc, cols)? {
        return Ok(());
    }
    let tile = |cx: &Ctx<'_>, i: usize| cx.read_tile(Space::Ub, inst.addr(i), dt, vrc, cols);
    let out: Vals = match inst.op {
        Vadd | Vsub | Vmul | Vdiv | Vmax | Vmin | Vpow | Vrem | Vand | Vor | Vxor | Vshl | Vshr => {
            let (a, b) = (tile(cx, 5)?, tile(cx, 6)?);
            zip_op(binary_op(inst.op)?, &a, &b, dt)?
        }
        Vadds | Vmuls | Vmaxs | Vmins => {
            let a = tile(cx, 5)?;
            let s = Vals::splat(inst.scalar(6), dt, a.len());
            zip_op(binary_op(inst.op)?, &a, &s, dt)?
        }
        Vdup => Vals::splat(inst.scalar(5), dt, vr * vc),
        Vdupr => {
            let bits = cx.regs[inst.reg(5)];
            if dt.is_float() {
                Vals::F(vec![dt.round_float(f64::from_bits(bits as u64)); vr * vc])
            } else {
                Vals::I(vec![dt.wrap_int(bits); vr * vc])
            }
        }
        Vbcast => {
            let v = cx.read_tile(Space::Ub, inst.addr(5), dt, (1, 1), 1)?;
            broadcast(&v, vr, vc, |_, _| 0)
        }
        Vmov => tile(cx, 5)?,
        Vunary => {
            // The op table's reference functions (the verifier checked the
            // dtype against the row).
            let u = unary_op(inst)?;
            let a = tile(cx, 5)?;
            let def = u.def();
            let int = match (u.int_fn(dt), &a) {
                (Some(g), _) => g,
                (None, Vals::F(_)) => |x| x,
                (None, Vals::I(_)) => {
                    return Err(format!("`vunary {}` does not take dtype {dt}", u.name()))
                }
            };
            values::map(&a, dt, def.float, int)
        }
        Vcmp => {
            let mask = compare_tiles(inst.cond(4), dt, &tile(cx, 6)?, &tile(cx, 7)?);
            cx.write_tile(Space::Ub, inst.addr(5), DType::Bool, vrc, cols, &mask)?;
            return Ok(());
        }
        Vsel => {
            let mask = cx.read_tile(Space::Ub, inst.addr(5), DType::Bool, vrc, cols)?;
            select_tiles(&mask, tile(cx, 6)?, tile(cx, 7)?)?
        }
        Vcast => {
            let from = inst.dtype2().unwrap_or(dt);
            let src = cx.read_tile(Space::Ub, inst.addr(6), from, vrc, cols)?;
            w.bytes = (vr * vc * dt.size_bytes().max(from.size_bytes())) as u64;
            let out = values::cast(&src, from, dt);
            cx.write_tile(Space::Ub, inst.addr(5), dt, vrc, cols, &out)?;
            return Ok(());
        }
        Vrsum | Vrmax | Vrmin | Vrprod => {
            let a = tile(cx, 5)?;
            let out = reduce_rows(inst.op, &a, dt, vr, vc);
            // The result is a 1 x vrows tile: `vr` contiguous values.
            cx.write_tile(Space::Ub, inst.addr(4), dt, (1, vr), vr.max(1), &out)?;
            return Ok(());
        }
        Vbrow => {
            let src = cx.read_tile(Space::Ub, inst.addr(5), dt, (1, vr), vr.max(1))?;
            broadcast(&src, vr, vc, |r, _| r)
        }
        Vbcol => {
            let src = cx.read_tile(Space::Ub, inst.addr(5), dt, (1, vc), vc.max(1))?;
            broadcast(&src, vr, vc, |_, c| c)
        }
        _ => {
            return Err(format!(
                "`{}` is not a vector instruction",
                inst.op.mnemonic()
            ))
        }
    };
    cx.write_tile(Space::Ub, inst.addr(4), dt, vrc, cols, &out)
}

/// `a cond b` elementwise, as a bool tile's values.
fn compare_tiles(cond: Cond, dt: DType, a: &Vals, b: &Vals) -> Vals {
    Vals::I(match (a, b) {
        (Vals::F(x), Vals::F(y)) => x
            .iter()
            .zip(y)
            .map(|(&p, &q)| compare(cond, p.partial_cmp(&q)) as i64)
            .collect(),
        (Vals::I(x), Vals::I(y)) => x
            .iter()
            .zip(y)
            .map(|(&p, &q)| compare(cond, Some(scalar::int_cmp(dt, p, q))) as i64)
            .collect(),
        _ => Vec::new(),
    })
}

/// `mask ? a : b` elementwise.
fn select_tiles(mask: &Vals, a: Vals, b: Vals) -> R<Vals> {
    let Vals::I(mask) = mask else {
        return Err("mask is not bool".into());
    };
    Ok(match (a, b) {
        (Vals::F(x), Vals::F(y)) => Vals::F(
            mask.iter()
                .zip(x.iter().zip(&y))
                .map(|(&m, (&p, &q))| if m != 0 { p } else { q })
                .collect(),
        ),
        (Vals::I(x), Vals::I(y)) => Vals::I(
            mask.iter()
                .zip(x.iter().zip(&y))
                .map(|(&m, (&p, &q))| if m != 0 { p } else { q })
                .collect(),
        ),
        (a, _) => a,
    })
}

/// The unary op of a `vunary`.
fn unary_op(inst: &Inst) -> R<UnaryOp> {
    inst.unary(6)
        .ok_or_else(|| "`vunary` without a unary op operand".to_string())
}

/// A binary op of the table on two tiles of `dt`, by its reference
/// functions (the verifier checked the dtype against the row).
fn zip_op(op: BinaryOp, a: &Vals, b: &Vals, dt: DType) -> R<Vals> {
    let def = op.def();
    let float = match (def.float, a) {
        (Some(f), _) => f,
        (None, Vals::I(_)) => |x, _| x,
        (None, Vals::F(_)) => return Err(format!("`{}` does not take dtype {dt}", op.name())),
    };
    Ok(values::zip(a, b, dt, float, op.int_fn(dt)))
}

/// The op table's binary op a vector opcode computes (with a tile or a
/// scalar second operand).
fn binary_op(op: Opcode) -> R<BinaryOp> {
    use Opcode::*;
    Ok(match op {
        Vadd | Vadds => BinaryOp::Add,
        Vsub => BinaryOp::Sub,
        Vmul | Vmuls => BinaryOp::Mul,
        Vdiv => BinaryOp::Div,
        Vmax | Vmaxs => BinaryOp::Max,
        Vmin | Vmins => BinaryOp::Min,
        Vpow => BinaryOp::Pow,
        Vrem => BinaryOp::Rem,
        Vand => BinaryOp::BitAnd,
        Vor => BinaryOp::BitOr,
        Vxor => BinaryOp::BitXor,
        Vshl => BinaryOp::Shl,
        Vshr => BinaryOp::Shr,
        other => return Err(format!("`{}` is not a binary vector op", other.mnemonic())),
    })
}

/// f32 elementwise ops whose native f32 result is the IEEE result the
/// general path computes through f64 (`+ - * /`, NaN-propagating max/min,
/// relu, neg, abs, floor, ceil, round, sign, moves): done row by row on
/// the UB bytes, without widening. Returns false for anything else.
fn f32_fast(inst: &Inst, cx: &mut Ctx<'_>, (vr, vc): (usize, usize), cols: usize) -> R<bool> {
    use Opcode::*;
    fn max_nan(a: f32, b: f32) -> f32 {
        if a.is_nan() || b.is_nan() {
            f32::NAN
        } else {
            a.max(b)
        }
    }
    fn min_nan(a: f32, b: f32) -> f32 {
        if a.is_nan() || b.is_nan() {
            f32::NAN
        } else {
            a.min(b)
        }
    }
    // The scalar of vadds etc. is rounded to f32 first, as the general path does.
    let s = inst.scalar(6) as f32;
    let rows = Rows {
        vr,
        n: vc * 4,
        pitch: pitch(cols as u64, DType::F32) as usize,
    };
    // One monomorphic row loop per op: a call per element through a
    // function pointer would cost more than the op itself.
    match inst.op {
        Vadd => rows.binary(inst, cx, |a, b| a + b)?,
        Vsub => rows.binary(inst, cx, |a, b| a - b)?,
        Vmul => rows.binary(inst, cx, |a, b| a * b)?,
        Vdiv => rows.binary(inst, cx, |a, b| a / b)?,
        Vmax => rows.binary(inst, cx, max_nan)?,
        Vmin => rows.binary(inst, cx, min_nan)?,
        Vadds => rows.unary(inst, cx, |a| a + s)?,
        Vmuls => rows.unary(inst, cx, |a| a * s)?,
        Vmaxs => rows.unary(inst, cx, |a| max_nan(a, s))?,
        Vmins => rows.unary(inst, cx, |a| min_nan(a, s))?,
        Vmov => rows.unary(inst, cx, |a| a)?,
        // Ops whose row names an exact f32 function; each arm calls it
        // with a constant, so each loop is monomorphic.
        Vunary => match unary_op(inst)?.def().exact_f32 {
            Some(ExactF32::Neg) => rows.unary(inst, cx, |a| ExactF32::Neg.apply(a))?,
            Some(ExactF32::Abs) => rows.unary(inst, cx, |a| ExactF32::Abs.apply(a))?,
            Some(ExactF32::Relu) => rows.unary(inst, cx, |a| ExactF32::Relu.apply(a))?,
            Some(ExactF32::Floor) => rows.unary(inst, cx, |a| ExactF32::Floor.apply(a))?,
            Some(ExactF32::Ceil) => rows.unary(inst, cx, |a| ExactF32::Ceil.apply(a))?,
            Some(ExactF32::Round) => rows.unary(inst, cx, |a| ExactF32::Round.apply(a))?,
            Some(ExactF32::Sign) => rows.unary(inst, cx, |a| ExactF32::Sign.apply(a))?,
            None => return Ok(false),
        },
        _ => return Ok(false),
    }
    Ok(true)
}

/// The valid rows of an f32 tile op on UB: `vr` rows of `n` bytes, `pitch`
/// bytes apart; destination at operand 4, sources at 5 (and 6).
struct Rows {
    vr: usize,
    n: usize,
    pitch: usize,
}

impl Rows {
    fn binary(&self, inst: &Inst, cx: &mut Ctx<'_>, f: impl Fn(f32, f32) -> f32) -> R<()> {
        self.apply(inst, cx, [inst.addr(5), inst.addr(6)], f)
    }

    fn unary(&self, inst: &Inst, cx: &mut Ctx<'_>, f: impl Fn(f32) -> f32) -> R<()> {
        let a = inst.addr(5);
        self.apply(inst, cx, [a, a], |x, _| f(x))
    }

    /// `dst = f(a, b)` row by row, straight on UB's bytes. A source at the
    /// destination's address is read in place (each element is read before
    /// it is written); one whose tile overlaps the destination's elsewhere
    /// is copied out whole first, so every source reads the old values, as
    /// in the general path.
    fn apply(
        &self,
        inst: &Inst,
        cx: &mut Ctx<'_>,
        [a, b]: [usize; 2],
        f: impl Fn(f32, f32) -> f32,
    ) -> R<()> {
        let (n, d) = (self.n, inst.addr(4));
        if self.vr == 0 {
            return Ok(());
        }
        let span = (self.vr - 1) * self.pitch + n;
        cx.local_mut(Space::Ub, d, span)?;
        let clash = |x: usize| x != d && x < d + span && d < x + span;
        let copy = |x: usize| -> R<Option<Vec<u8>>> {
            let whole = cx.local(Space::Ub, x, span)?;
            Ok(clash(x).then(|| whole.to_vec()))
        };
        let (copy_a, copy_b) = (copy(a)?, copy(b)?);
        let (lo, rest) = cx.mem[Space::Ub.index()].split_at_mut(d);
        let (dst, hi) = rest.split_at_mut(span);
        let (lo, hi) = (&*lo, &*hi);
        // Where a source's tile lies: the destination itself (None) or
        // bytes disjoint from it.
        fn place<'t>(
            x: usize,
            (d, span): (usize, usize),
            copy: Option<&'t [u8]>,
            (lo, hi): (&'t [u8], &'t [u8]),
        ) -> Option<&'t [u8]> {
            match copy {
                Some(c) => Some(c),
                None if x == d => None,
                None if x < d => Some(&lo[x..x + span]),
                None => Some(&hi[x - d - span..x - d]),
            }
        }
        let (ta, tb) = (
            place(a, (d, span), copy_a.as_deref(), (lo, hi)),
            place(b, (d, span), copy_b.as_deref(), (lo, hi)),
        );
        let rd = |c: &[u8]| f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        for r in 0..self.vr {
            let at = r * self.pitch;
            let out = dst[at..at + n].chunks_exact_mut(4);
            match (ta.map(|t| &t[at..at + n]), tb.map(|t| &t[at..at + n])) {
                (Some(a), Some(b)) => {
                    for ((o, x), y) in out.zip(a.chunks_exact(4)).zip(b.chunks_exact(4)) {
                        o.copy_from_slice(&f(rd(x), rd(y)).to_le_bytes());
                    }
                }
                (Some(a), None) => {
                    for (o, x) in out.zip(a.chunks_exact(4)) {
                        let v = f(rd(x), rd(o));
                        o.copy_from_slice(&v.to_le_bytes());
                    }
                }
                (None, Some(b)) => {
                    for (o, y) in out.zip(b.chunks_exact(4)) {
                        let v = f(rd(o), rd(y));
                        o.copy_from_slice(&v.to_le_bytes());
                    }
                }
                (None, None) => {
                    for o in out {
                        let v = f(rd(o), rd(o));
                        o.copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
        }
        Ok(())
    }
}

fn compare(c: Cond, ord: Option<std::cmp::Ordering>) -> bool {
    use std::cmp::Ordering::*;
    match (c, ord) {
        (Cond::Ne, None) => true,
        (_, None) => false,
        (Cond::Eq, Some(o)) => o == Equal,
        (Cond::Ne, Some(o)) => o != Equal,
        (Cond::Lt, Some(o)) => o == Less,
        (Cond::Le, Some(o)) => o != Greater,
        (Cond::Gt, Some(o)) => o == Greater,
        (Cond::Ge, Some(o)) => o != Less,
    }
}

fn reduce_rows(op: Opcode, a: &Vals, dt: DType, vr: usize, vc: usize) -> Vals {
    match a {
        Vals::F(v) => Vals::F(
            (0..vr)
                .map(|r| {
                    let row = &v[r * vc..(r + 1) * vc];
                    let x = match op {
                        Opcode::Vrsum => row.iter().sum::<f64>(),
                        Opcode::Vrprod => row.iter().product::<f64>(),
                        Opcode::Vrmax => {
                            row.iter().copied().fold(f64::NEG_INFINITY, scalar::max_nan)
                        }
                        Opcode::Vrmin => row.iter().copied().fold(f64::INFINITY, scalar::min_nan),
                        other => unreachable!("{other:?} is not a row reduction"),
                    };
                    dt.round_float(x)
                })
                .collect(),
        ),
        Vals::I(v) => Vals::I(
            (0..vr)
                .map(|r| {
                    let row = &v[r * vc..(r + 1) * vc];
                    let x = match op {
                        Opcode::Vrsum => row.iter().fold(0i64, |s, &x| s.wrapping_add(x)),
                        Opcode::Vrprod => row.iter().fold(1i64, |s, &x| s.wrapping_mul(x)),
                        Opcode::Vrmax => {
                            let (init, f) = ReduceOp::Max.int_for(dt);
                            row.iter().copied().reduce(f).unwrap_or(init)
                        }
                        Opcode::Vrmin => {
                            let (init, f) = ReduceOp::Min.int_for(dt);
                            row.iter().copied().reduce(f).unwrap_or(init)
                        }
                        other => unreachable!("{other:?} is not a row reduction"),
                    };
                    dt.wrap_int(x)
                })
                .collect(),
        ),
    }
}

fn broadcast(src: &Vals, vr: usize, vc: usize, pick: fn(usize, usize) -> usize) -> Vals {
    let idx = (0..vr).flat_map(|r| (0..vc).map(move |c| pick(r, c)));
    match src {
        Vals::F(v) => Vals::F(idx.map(|i| v[i]).collect()),
        Vals::I(v) => Vals::I(idx.map(|i| v[i]).collect()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests assert by unwrapping
mod tests {
    use crate::isa::asm::assemble;
    use crate::{DeviceApi, DeviceConfig, SimDevice};

    /// A stride or offset the verifier cannot see (a register) that is
    /// never used for an access (one row, or nothing valid) runs instead of
    /// overflowing `stride * size` (a panic in debug builds).
    #[test]
    fn huge_unused_strides_and_offsets_do_not_overflow() {
        let text = ".kernel k aiv\n.gm x f32 [8] in\n.gm y f32 [8] out\n\
            movi r1, 9223372036854775807\n\
            ld f32, 1x8, 1, 8, @0x0, x, 0, r1\n\
            ld f32, 1x8, 0, 8, @0x100, x, r1, r1\n\
            st f32, 1x8, 1, 8, y, 0, r1, @0x0\n\
            end\n";
        let dev = SimDevice::new(DeviceConfig::default()).unwrap();
        let p = dev.verify(assemble(text).unwrap()).unwrap();
        let (x, y) = (dev.allocate(32).unwrap(), dev.allocate(32).unwrap());
        let ones: Vec<u8> = (0..8).flat_map(|_| 1f32.to_le_bytes()).collect();
        dev.copy_from_host(&ones, &x, 0).unwrap();
        dev.run(&p, 0, &[&x, &y], &[]).unwrap();
        let mut out = vec![0u8; 32];
        dev.copy_to_host(&y, 0, &mut out).unwrap();
        assert_eq!(out, ones);
    }
}
