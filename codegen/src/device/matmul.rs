//! Matmul kernels: AIC tasks over output tiles for the cube's dtypes, and
//! a row-by-row vector-core form for f64 and integers. Batch, m, k, n
//! and each operand's view (offset and strides: a transposed or sliced
//! operand is read in place) are size arguments ([`SizeArgs::mm`]): the
//! code is the same for every shape. A convolution (`compile_conv`) reads
//! its left operand as the windows of an image with `ldl1c`: the image's
//! size is a size argument, the window (strides, padding, dilation,
//! groups) is code, and each output tile is one channel group's.

use super::{finish, internal, sanitize, unsupported, DeviceKernel, SizeArgs, Units};
use crate::CodegenError;
use std::sync::Arc;
use tilejit_device::isa::emit::{Addr, Gm, Label, Mkn, ProgramBuilder, Shape};
use tilejit_device::isa::{pitch, Pipe, Role};
use tilejit_device::{CoreType, DeviceConfig};
use tilejit_ir::kernel::{BufId, Im2Col, Kernel, MatMul, MatView};
use tilejit_ir::DType;

/// The cube's tile: `TM x TK` by `TK x TN` per multiply-accumulate.
pub(super) const TM: usize = 64;
const TK: usize = 64;
pub(super) const TN: usize = 64;

/// The registers of an AIC matmul task.
mod cube {
    use tilejit_device::isa::emit::Reg;

    /// The output tile index.
    pub(super) const TILE: Reg = Reg::fixed(0);
    /// One past the task's last tile.
    pub(super) const END: Reg = Reg::fixed(1);
    /// The tile's batch, m-tile and n-tile.
    pub(super) const BATCH: Reg = Reg::fixed(2);
    pub(super) const MT: Reg = Reg::fixed(3);
    pub(super) const NT: Reg = Reg::fixed(4);
    /// Valid rows and columns of the output tile.
    pub(super) const VROWS: Reg = Reg::fixed(5);
    pub(super) const VCOLS: Reg = Reg::fixed(6);
    /// The K step, and its valid K.
    pub(super) const KSTEP: Reg = Reg::fixed(7);
    pub(super) const VK: Reg = Reg::fixed(8);
    /// GM element offsets of the A panel, the B panel and the C tile.
    pub(super) const OFF_A: Reg = Reg::fixed(9);
    pub(super) const OFF_B: Reg = Reg::fixed(10);
    pub(super) const OFF_C: Reg = Reg::fixed(11);
    /// Scratch.
    pub(super) const T: Reg = Reg::fixed(12);
    /// The sizes m, k, n (size arguments).
    pub(super) const M: Reg = Reg::fixed(13);
    pub(super) const K: Reg = Reg::fixed(14);
    pub(super) const N: Reg = Reg::fixed(15);
    /// Output tiles along m and n (at least 1: legal divisors), K steps.
    pub(super) const MTILES: Reg = Reg::fixed(16);
    pub(super) const NTILES: Reg = Reg::fixed(17);
    pub(super) const KSTEPS: Reg = Reg::fixed(18);
    /// Element strides: a batch of C, A and B; a 64-row panel of C
    /// (`TM * n`), of A (`TM * k`); a K step of B (`TK * n`). The A and B
    /// ones come from the operand views.
    pub(super) const C_BATCH: Reg = Reg::fixed(19);
    pub(super) const A_BATCH: Reg = Reg::fixed(20);
    pub(super) const B_BATCH: Reg = Reg::fixed(21);
    pub(super) const C_PANEL: Reg = Reg::fixed(22);
    pub(super) const A_PANEL: Reg = Reg::fixed(23);
    pub(super) const B_STEP: Reg = Reg::fixed(24);
    /// The operand views: element offsets, row and column strides of A
    /// and B (their batch strides are `A_BATCH` and `B_BATCH`).
    pub(super) const A_OFF0: Reg = Reg::fixed(25);
    pub(super) const A_RS: Reg = Reg::fixed(26);
    pub(super) const A_CS: Reg = Reg::fixed(27);
    pub(super) const B_OFF0: Reg = Reg::fixed(28);
    pub(super) const B_RS: Reg = Reg::fixed(29);
    pub(super) const B_CS: Reg = Reg::fixed(30);
}

/// Loads a cube task's sizes and the strides and counts derived from them
/// (once per task).
fn emit_cube_sizes(b: &mut ProgramBuilder, sizes: &SizeArgs) {
    use cube::{A_BATCH, A_CS, A_OFF0, A_PANEL, A_RS, B_BATCH, B_CS, B_OFF0, B_RS, B_STEP};
    use cube::{C_BATCH, C_PANEL, K, KSTEPS, M, MTILES, N, NTILES};
    b.ldarg(M, sizes.mm(1))
        .ldarg(K, sizes.mm(2))
        .ldarg(N, sizes.mm(3));
    // An empty output (m or n = 0) has no tiles and so no tasks; the
    // divisors only have to be legal. With k = 0 the one K step multiplies
    // zero-filled panels, so the product is zeros.
    b.add(MTILES, M, TM - 1)
        .div(MTILES, MTILES, TM)
        .max(MTILES, MTILES, 1);
    b.add(NTILES, N, TN - 1)
        .div(NTILES, NTILES, TN)
        .max(NTILES, NTILES, 1);
    b.add(KSTEPS, K, TK - 1).div(KSTEPS, KSTEPS, TK);
    b.mul(C_BATCH, M, N).mul(C_PANEL, N, TM as i64);
    // Operands are read in place through their views: a 64-row panel of
    // A is `TM` row strides on, a K step of B `TK` row strides.
    b.ldarg(A_OFF0, sizes.mm(4))
        .ldarg(A_BATCH, sizes.mm(5))
        .ldarg(A_RS, sizes.mm(6))
        .ldarg(A_CS, sizes.mm(7));
    b.ldarg(B_OFF0, sizes.mm(8))
        .ldarg(B_BATCH, sizes.mm(9))
        .ldarg(B_RS, sizes.mm(10))
        .ldarg(B_CS, sizes.mm(11));
    b.mul(A_PANEL, A_RS, TM as i64).mul(B_STEP, B_RS, TK as i64);
}

/// `-v`, for the `mul r, r, -TILE` that starts `min(TILE, dim - i*TILE)`.
fn neg(v: usize) -> i64 {
    -(v as i64)
}

/// A matmul as AIC tasks over output tiles: each tile loads A and B panels
/// into L1 per K step, moves them to L0A/L0B, multiplies into L0C (the
/// first K step overwrites, later ones accumulate) and the fixpipe writes
/// the tile to the product buffer. Loads zero-fill past the matrix edge, so
/// K, M and N tails need no special code.
pub(super) fn compile_matmul(
    k: &Kernel,
    mm: &MatMul,
    buf_dtype: &dyn Fn(BufId) -> DType,
    cfg: &DeviceConfig,
) -> Result<DeviceKernel, CodegenError> {
    use cube::{END, KSTEP, KSTEPS, N, OFF_C, TILE, VCOLS, VROWS};
    let dt = buf_dtype(mm.a);
    if !matches!(dt, DType::F32 | DType::F16 | DType::BF16) || buf_dtype(mm.b) != dt {
        return Err(unsupported(
            k,
            format!("a {dt} matmul (the cube takes f32, f16, bf16)"),
        ));
    }
    negative_views(k, mm)?;
    if let Some(ic) = &mm.im2col {
        return compile_conv(k, mm, ic, dt, buf_dtype(mm.out), cfg);
    }
    let out_dt = buf_dtype(mm.out);
    let sizes = SizeArgs::new(k);
    let mut b = ProgramBuilder::new(format!("mm_{}", sanitize(&k.name)), CoreType::Aic);
    let (ga, gb) = (b.gm("a", dt, &[], Role::In), b.gm("b", dt, &[], Role::In));
    let gc = b.gm("c", out_dt, &[], Role::Out);
    let (lo, hi) = sizes.declare(&mut b);
    let (top, done, kloop, kdone) = (b.label(), b.label(), b.label(), b.label());
    b.ldarg(TILE, lo).ldarg(END, hi);
    emit_cube_sizes(&mut b, &sizes);
    b.bind(top);
    b.bge(TILE, END, done);
    emit_tile_coords(&mut b);
    let cx = KStep {
        dt,
        a: ga,
        b: gb,
        strided: [mm.view_a(), mm.view_b()].map(|v| v.strides[2] != 1),
    };
    b.movi(KSTEP, 0);
    cx.emit(&mut b, 0);
    b.bind(kloop);
    b.bge(KSTEP, KSTEPS, kdone);
    cx.emit(&mut b, 1);
    b.jmp(kloop);
    b.bind(kdone);
    b.setf(Pipe::M, Pipe::Fixp, 0).waitf(Pipe::M, Pipe::Fixp, 0);
    let out = Shape::new(TM, TN);
    b.fixp(out_dt, out, VROWS, VCOLS, gc, OFF_C, N, Addr::new(0), 0);
    end_tile_loop(k, b, cfg, mm, top, done)
}

/// GM loads take no negative offset or stride: an operand view with one
/// (never made by fusion; `structure_text` keys it apart) is refused.
fn negative_views(k: &Kernel, mm: &MatMul) -> Result<(), CodegenError> {
    for v in [mm.view_a(), mm.view_b()] {
        if v.offset < 0 || v.strides.iter().any(|&s| s < 0) {
            return Err(unsupported(
                k,
                format!(
                    "a matmul operand view with negative strides {:?}",
                    v.strides
                ),
            ));
        }
    }
    Ok(())
}

/// The output tile's batch, m-tile and n-tile, its valid rows and
/// columns, and the GM offset of its first element.
fn emit_tile_coords(b: &mut ProgramBuilder) {
    use cube::{BATCH, C_BATCH, C_PANEL, M, MT, MTILES, N, NT, NTILES, OFF_C, T, TILE};
    use cube::{VCOLS, VROWS};
    b.rem(NT, TILE, NTILES).div(T, TILE, NTILES);
    b.rem(MT, T, MTILES).div(BATCH, T, MTILES);
    b.mul(VROWS, MT, neg(TM))
        .add(VROWS, VROWS, M)
        .min(VROWS, VROWS, TM);
    b.mul(VCOLS, NT, neg(TN))
        .add(VCOLS, VCOLS, N)
        .min(VCOLS, VCOLS, TN);
    b.mul(OFF_C, BATCH, C_BATCH)
        .mul(T, MT, C_PANEL)
        .add(OFF_C, OFF_C, T);
    b.mul(T, NT, TN).add(OFF_C, OFF_C, T);
}

/// One K step of an output tile.
struct KStep {
    dt: DType,
    a: Gm,
    b: Gm,
    /// A's and B's column strides are not 1: their panels are gathered
    /// element by element (`ldl1x`), not row by row (`ldl1`).
    strided: [bool; 2],
}

impl KStep {
    /// Loads the step's A and B panels, moves them to L0A/L0B and
    /// multiplies into L0C (accumulating when `acc` is 1).
    fn emit(&self, b: &mut ProgramBuilder, acc: u8) {
        use cube::{A_BATCH, A_CS, A_OFF0, A_PANEL, A_RS, BATCH, B_BATCH, B_CS, B_OFF0, B_RS};
        use cube::{B_STEP, K, KSTEP, MT, NT, OFF_A, OFF_B, T, VCOLS, VK, VROWS};
        let dt = self.dt;
        let (a_l1, b_l1, zero) = (Addr::new(0), self.b_addr(), Addr::new(0));
        // Valid K of this step: min(TK, k - KSTEP*TK).
        b.mul(VK, KSTEP, neg(TK)).add(VK, VK, K).min(VK, VK, TK);
        // Element (BATCH, MT*TM, KSTEP*TK) of A's view and
        // (BATCH, KSTEP*TK, NT*TN) of B's.
        b.mul(OFF_A, BATCH, A_BATCH)
            .add(OFF_A, OFF_A, A_OFF0)
            .mul(T, MT, A_PANEL)
            .add(OFF_A, OFF_A, T);
        b.mul(T, KSTEP, TK).mul(T, T, A_CS).add(OFF_A, OFF_A, T);
        b.mul(OFF_B, BATCH, B_BATCH)
            .add(OFF_B, OFF_B, B_OFF0)
            .mul(T, KSTEP, B_STEP)
            .add(OFF_B, OFF_B, T);
        b.mul(T, NT, TN).mul(T, T, B_CS).add(OFF_B, OFF_B, T);
        let (sa, sb) = (Shape::new(TM, TK), Shape::new(TK, TN));
        if self.strided[0] {
            b.ldl1x(dt, sa, VROWS, VK, a_l1, self.a, OFF_A, A_RS, A_CS);
        } else {
            b.ldl1(dt, sa, VROWS, VK, a_l1, self.a, OFF_A, A_RS);
        }
        if self.strided[1] {
            b.ldl1x(dt, sb, VK, VCOLS, b_l1, self.b, OFF_B, B_RS, B_CS);
        } else {
            b.ldl1(dt, sb, VK, VCOLS, b_l1, self.b, OFF_B, B_RS);
        }
        b.setf(Pipe::Mte2, Pipe::Mte1, 0)
            .waitf(Pipe::Mte2, Pipe::Mte1, 0);
        b.mvl0a(dt, sa, zero, a_l1).mvl0b(dt, sb, zero, b_l1);
        b.setf(Pipe::Mte1, Pipe::M, 0).waitf(Pipe::Mte1, Pipe::M, 0);
        b.mmad(dt, Mkn::new(TM, TK, TN), zero, zero, zero, acc);
        // The next step's loads reuse L1 and L0: wait for the cube.
        b.barrier().add(KSTEP, KSTEP, 1);
    }

    /// Where the B panel sits in L1 (after the A panel).
    fn b_addr(&self) -> Addr {
        Addr::new(TM as u64 * pitch(TK as u64, self.dt))
    }
}

/// The registers of an AIC convolution task: the tile loop's (as a
/// matmul's, `cube`), then the `ldl1c` geometry block.
mod conv {
    use tilejit_device::isa::emit::Reg;

    pub(super) use super::cube::{
        BATCH, END, K, KSTEP, M, MT, N, NT, OFF_A, OFF_B, OFF_C, T, TILE, VCOLS, VK, VROWS,
    };
    /// The K step's first window column (`KSTEP * TK`).
    pub(super) const COL: Reg = Reg::fixed(16);
    /// The tile's channel group.
    pub(super) const G: Reg = Reg::fixed(17);
    /// The geometry block `ldl1c` reads, 14 registers from here:
    /// channels, height, width (size arguments), then the window: kh, kw,
    /// row and column strides, top, left, bottom and right padding, row
    /// and column dilations, groups.
    pub(super) const GEOM: Reg = Reg::fixed(18);
    /// Registers `GEOM + 1` and `GEOM + 2`: the image's height and width.
    pub(super) const GEOM_H: Reg = Reg::fixed(19);
    pub(super) const GEOM_W: Reg = Reg::fixed(20);
    /// The rest of the block, `GEOM + 3 ..= GEOM + 13`.
    pub(super) const WINDOW: [Reg; 11] = [
        Reg::fixed(21),
        Reg::fixed(22),
        Reg::fixed(23),
        Reg::fixed(24),
        Reg::fixed(25),
        Reg::fixed(26),
        Reg::fixed(27),
        Reg::fixed(28),
        Reg::fixed(29),
        Reg::fixed(30),
        Reg::fixed(31),
    ];
}

/// A convolution (`MatMul::im2col`) as AIC tasks over its output tiles,
/// `groups` independent GEMMs per image: a tile is one image's, one
/// channel group's (so it never straddles groups), `TM` output pixels by
/// `TN` of the group's `n / groups` output channels. Per K step `ldl1c`
/// loads the A panel straight from the image (the group's channels, the
/// whole window: strides, padding, dilation), B is the group's columns
/// of the weights (`[k, n]`, or `[n, k]` read transposed), and the
/// fixpipe writes the tile to the product, `[batch, m, n]` or (`nchw`)
/// `[batch, n, m]`.
fn compile_conv(
    k: &Kernel,
    mm: &MatMul,
    ic: &Im2Col,
    dt: DType,
    out_dt: DType,
    cfg: &DeviceConfig,
) -> Result<DeviceKernel, CodegenError> {
    use conv::{END, GEOM, GEOM_H, GEOM_W, K, KSTEP, M, N, OFF_C, T, TILE, VCOLS, VROWS, WINDOW};
    let win = ic.window;
    let groups = win.groups as usize;
    if groups == 0 || !ic.c.is_multiple_of(groups) || !mm.n.is_multiple_of(groups) {
        return Err(internal(
            k,
            format!(
                "a convolution of {} groups over {} channels into {}",
                groups, ic.c, mm.n
            ),
        ));
    }
    let transposed = match mm.b_view {
        None => false,
        Some(v) if v == MatView::conv_weights_transposed(mm.k) => true,
        Some(v) => return Err(internal(k, format!("convolution weights read as {v:?}"))),
    };
    let sizes = SizeArgs::new(k);
    let mut b = ProgramBuilder::new(format!("mm_{}", sanitize(&k.name)), CoreType::Aic);
    let (ga, gb) = (b.gm("a", dt, &[], Role::In), b.gm("b", dt, &[], Role::In));
    let gc = b.gm("c", out_dt, &[], Role::Out);
    let (lo, hi) = sizes.declare(&mut b);
    let (top, done, kloop, kdone) = (b.label(), b.label(), b.label(), b.label());
    b.ldarg(TILE, lo).ldarg(END, hi);
    b.ldarg(M, sizes.mm(1))
        .ldarg(K, sizes.mm(2))
        .ldarg(N, sizes.mm(3));
    // The image's size is a size argument; the window is code.
    b.ldarg(GEOM, sizes.mm(4))
        .ldarg(GEOM_H, sizes.mm(5))
        .ldarg(GEOM_W, sizes.mm(6));
    let [kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, g] = win.to_list();
    for (r, v) in WINDOW
        .into_iter()
        .zip([kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, g])
    {
        b.movi(r, i64::from(v));
    }
    b.bind(top);
    b.bge(TILE, END, done);
    emit_conv_tile(&mut b, groups as i64, mm.nchw);
    let step = ConvStep {
        dt,
        a: ga,
        b: gb,
        transposed,
    };
    b.movi(KSTEP, 0);
    step.emit(&mut b, 0);
    // Later steps while KSTEP * TK < k (the first runs even for k = 0: it
    // multiplies zero-filled panels, so the product is zeros).
    b.bind(kloop);
    b.mul(T, KSTEP, TK as i64).bge(T, K, kdone);
    step.emit(&mut b, 1);
    b.jmp(kloop);
    b.bind(kdone);
    b.setf(Pipe::M, Pipe::Fixp, 0).waitf(Pipe::M, Pipe::Fixp, 0);
    let out = Shape::new(TM, TN);
    if mm.nchw {
        // The tile goes down a column per pixel row (stride 1) and across
        // `m` per channel column.
        b.movi(T, 1);
        b.fixpx(out_dt, out, VROWS, VCOLS, gc, OFF_C, T, M, Addr::new(0), 0);
    } else {
        b.fixp(out_dt, out, VROWS, VCOLS, gc, OFF_C, N, Addr::new(0), 0);
    }
    end_tile_loop(k, b, cfg, mm, top, done)
}

/// A convolution tile's coordinates from `TILE` (n-tile within the group
/// fastest, then m-tile, group, image): its valid rows and columns, `NT`
/// turned into the tile's first output channel (`G * n/groups + NT *
/// TN`), `OFF_A` the image's first element and `OFF_C` the tile's first
/// element in the product.
fn emit_conv_tile(b: &mut ProgramBuilder, groups: i64, nchw: bool) {
    use conv::{BATCH, G, GEOM, GEOM_H, GEOM_W, M, MT, N, NT, OFF_A, OFF_C, T, TILE};
    use conv::{VCOLS, VROWS};
    // n/groups, its tiles (at least 1: a legal divisor), then m's.
    b.div(VCOLS, N, groups)
        .add(T, VCOLS, TN as i64 - 1)
        .div(T, T, TN as i64)
        .max(T, T, 1);
    b.rem(NT, TILE, T).div(OFF_C, TILE, T);
    b.add(T, M, TM as i64 - 1).div(T, T, TM as i64).max(T, T, 1);
    b.rem(MT, OFF_C, T).div(OFF_C, OFF_C, T);
    b.rem(G, OFF_C, groups).div(BATCH, OFF_C, groups);
    b.mul(VROWS, MT, neg(TM))
        .add(VROWS, VROWS, M)
        .min(VROWS, VROWS, TM);
    // VCOLS holds n/groups.
    b.mul(NT, NT, TN as i64)
        .sub(VCOLS, VCOLS, NT)
        .min(VCOLS, VCOLS, TN);
    b.div(T, N, groups).mul(T, T, G).add(NT, NT, T);
    b.mul(OFF_A, BATCH, GEOM)
        .mul(OFF_A, OFF_A, GEOM_H)
        .mul(OFF_A, OFF_A, GEOM_W);
    b.mul(OFF_C, BATCH, M).mul(OFF_C, OFF_C, N);
    if nchw {
        // Element (BATCH, NT, MT*TM) of `[batch, n, m]`.
        b.mul(T, NT, M).add(OFF_C, OFF_C, T);
        b.mul(T, MT, TM as i64).add(OFF_C, OFF_C, T);
    } else {
        // Element (BATCH, MT*TM, NT) of `[batch, m, n]`.
        b.mul(T, MT, TM as i64).mul(T, T, N).add(OFF_C, OFF_C, T);
        b.add(OFF_C, OFF_C, NT);
    }
}

/// One K step of a convolution tile.
struct ConvStep {
    dt: DType,
    a: Gm,
    b: Gm,
    /// The weights are an `[n, k]` buffer read transposed (OIHW in
    /// place: row stride 1, column stride k).
    transposed: bool,
}

impl ConvStep {
    /// Loads the step's A panel (windows `MT*TM..`, columns `KSTEP*TK..`
    /// of group `G` of the image) and the group's B panel, and multiplies
    /// into L0C (accumulating when `acc` is 1).
    fn emit(&self, b: &mut ProgramBuilder, acc: u8) {
        use conv::{COL, G, GEOM, K, KSTEP, MT, N, NT, OFF_A, OFF_B, T, VCOLS, VK, VROWS};
        let dt = self.dt;
        let (a_l1, zero) = (Addr::new(0), Addr::new(0));
        let b_l1 = Addr::new(TM as u64 * pitch(TK as u64, dt));
        // Valid K of this step: min(TK, k - KSTEP*TK).
        b.mul(COL, KSTEP, TK as i64)
            .sub(VK, K, COL)
            .min(VK, VK, TK as i64);
        let (sa, sb) = (Shape::new(TM, TK), Shape::new(TK, TN));
        b.mul(T, MT, TM as i64);
        b.ldl1c(dt, sa, VROWS, VK, a_l1, self.a, OFF_A, T, COL, G, GEOM);
        if self.transposed {
            // Element (KSTEP*TK, NT) of `[k, n]` is COL + NT*k of `[n, k]`.
            b.mul(OFF_B, NT, K).add(OFF_B, OFF_B, COL);
            b.movi(T, 1);
            b.ldl1x(dt, sb, VK, VCOLS, b_l1, self.b, OFF_B, T, K);
        } else {
            b.mul(OFF_B, COL, N).add(OFF_B, OFF_B, NT);
            b.ldl1(dt, sb, VK, VCOLS, b_l1, self.b, OFF_B, N);
        }
        b.setf(Pipe::Mte2, Pipe::Mte1, 0)
            .waitf(Pipe::Mte2, Pipe::Mte1, 0);
        b.mvl0a(dt, sa, zero, a_l1).mvl0b(dt, sb, zero, b_l1);
        b.setf(Pipe::Mte1, Pipe::M, 0).waitf(Pipe::Mte1, Pipe::M, 0);
        b.mmad(dt, Mkn::new(TM, TK, TN), zero, zero, zero, acc);
        // The next step's loads reuse L1 and L0: wait for the cube.
        b.barrier().add(KSTEP, KSTEP, 1);
    }
}

/// The registers of a vector-core matmul task.
mod rows {
    use tilejit_device::isa::emit::Reg;

    /// The output row over batch * m.
    pub(super) const ROW: Reg = Reg::fixed(0);
    /// One past the task's last row.
    pub(super) const END: Reg = Reg::fixed(1);
    /// The row's batch and row within it.
    pub(super) const BATCH: Reg = Reg::fixed(2);
    pub(super) const I: Reg = Reg::fixed(3);
    /// The A row's GM offset.
    pub(super) const A_ROW: Reg = Reg::fixed(4);
    /// Scratch.
    pub(super) const T5: Reg = Reg::fixed(5);
    /// B's batch offset; C's row offset.
    pub(super) const B_BATCH: Reg = Reg::fixed(6);
    pub(super) const C_ROW: Reg = Reg::fixed(7);
    /// The column chunk and its valid columns.
    pub(super) const COL: Reg = Reg::fixed(8);
    pub(super) const VCOLS: Reg = Reg::fixed(9);
    /// The K index.
    pub(super) const P: Reg = Reg::fixed(10);
    /// GM offsets of `a[i, p]`, of B's row chunk and of C's chunk.
    pub(super) const A_OFF: Reg = Reg::fixed(11);
    pub(super) const B_OFF: Reg = Reg::fixed(12);
    pub(super) const C_OFF: Reg = Reg::fixed(13);
    /// The sizes m (at least 1: a legal divisor), k and n.
    pub(super) const M1: Reg = Reg::fixed(14);
    pub(super) const K: Reg = Reg::fixed(15);
    pub(super) const N: Reg = Reg::fixed(16);
    /// Batch strides of A's and B's views.
    pub(super) const A_BATCH: Reg = Reg::fixed(17);
    pub(super) const B_BATCH_STRIDE: Reg = Reg::fixed(18);
    /// The rest of the views: offsets, row and column strides.
    pub(super) const A_OFF0: Reg = Reg::fixed(19);
    pub(super) const A_RS: Reg = Reg::fixed(20);
    pub(super) const A_CS: Reg = Reg::fixed(21);
    pub(super) const B_OFF0: Reg = Reg::fixed(22);
    pub(super) const B_RS: Reg = Reg::fixed(23);
    pub(super) const B_CS: Reg = Reg::fixed(24);
}

/// A matmul in a dtype the cube does not take (f64, i32, i64) on the
/// vector cores: each task computes whole output rows, a chunk of columns
/// at a time, as `sum_p a[i,p] * b[p, cols]` (a scalar broadcast, a
/// multiply and an add per step, in the dtype: the reference's order and
/// rounding, so results are exact).
pub(super) fn compile_matmul_vector(
    k: &Kernel,
    mm: &MatMul,
    buf_dtype: &dyn Fn(BufId) -> DType,
    cfg: &DeviceConfig,
) -> Result<DeviceKernel, CodegenError> {
    use rows::{A_BATCH, BATCH, B_BATCH, B_BATCH_STRIDE, COL, C_ROW, END, I, K, M1, N, ROW, T5};
    let dt = buf_dtype(mm.a);
    if mm.im2col.is_some() {
        return Err(unsupported(k, format!("a {dt} convolution (the cube's)")));
    }
    if !(dt == DType::F64 || dt.is_int()) || buf_dtype(mm.b) != dt || buf_dtype(mm.out) != dt {
        return Err(unsupported(k, format!("a {dt} matmul")));
    }
    negative_views(k, mm)?;
    let w = row_chunk(cfg);
    let sizes = SizeArgs::new(k);
    let mut b = ProgramBuilder::new(format!("mmv_{}", sanitize(&k.name)), CoreType::Aiv);
    let gms = [
        b.gm("a", dt, &[], Role::In),
        b.gm("b", dt, &[], Role::In),
        b.gm("c", dt, &[], Role::Out),
    ];
    let (lo, hi) = sizes.declare(&mut b);
    let (top, done, nloop, ndone) = (b.label(), b.label(), b.label(), b.label());
    b.ldarg(ROW, lo).ldarg(END, hi);
    b.ldarg(M1, sizes.mm(1))
        .ldarg(K, sizes.mm(2))
        .ldarg(N, sizes.mm(3));
    // Operands are read in place through their views.
    use rows::{A_OFF0, A_RS, B_OFF0};
    b.ldarg(A_OFF0, sizes.mm(4))
        .ldarg(A_BATCH, sizes.mm(5))
        .ldarg(A_RS, sizes.mm(6))
        .ldarg(rows::A_CS, sizes.mm(7));
    b.ldarg(B_OFF0, sizes.mm(8))
        .ldarg(B_BATCH_STRIDE, sizes.mm(9))
        .ldarg(rows::B_RS, sizes.mm(10))
        .ldarg(rows::B_CS, sizes.mm(11));
    // With m = 0 there are no tasks; the divisor only has to be legal.
    b.max(M1, M1, 1);
    b.bind(top);
    b.bge(ROW, END, done);
    b.div(BATCH, ROW, M1).rem(I, ROW, M1);
    b.mul(rows::A_ROW, BATCH, A_BATCH).mul(T5, I, A_RS);
    b.add(rows::A_ROW, rows::A_ROW, T5)
        .add(rows::A_ROW, rows::A_ROW, A_OFF0);
    b.mul(B_BATCH, BATCH, B_BATCH_STRIDE)
        .add(B_BATCH, B_BATCH, B_OFF0)
        .mul(C_ROW, ROW, N)
        .movi(COL, 0);
    b.bind(nloop);
    b.bge(COL, N, ndone);
    let b_strided = mm.view_b().strides[2] != 1;
    emit_row_chunk(&mut b, dt, w, gms, b_strided);
    b.jmp(nloop);
    b.bind(ndone);
    b.add(ROW, ROW, 1).jmp(top);
    b.bind(done);
    b.end();
    assemble(k, b, cfg, mm, CoreType::Aiv, Units::MatRows)
}

/// The widest power-of-two column chunk (at least 8, at most 2048) whose
/// three tiles (accumulator, B row, product) and one element slot fit UB.
fn row_chunk(cfg: &DeviceConfig) -> usize {
    let ub = cfg.ub_bytes as usize;
    let mut w = 2048usize;
    while w > 8 && 3 * (w * 8).next_multiple_of(32) + 32 > ub {
        w /= 2;
    }
    w
}

/// One column chunk of an output row: accumulate `a[i,p] * b[p, chunk]`
/// over p, store it, move to the next chunk.
/// B's row is gathered element by element (`ldx`) when `b_strided`.
fn emit_row_chunk(
    b: &mut ProgramBuilder,
    dt: DType,
    w: usize,
    [ga, gb, gc]: [Gm; 3],
    b_strided: bool,
) {
    use rows::{A_CS, A_OFF, A_ROW, B_BATCH, B_CS, B_OFF, B_RS, COL, C_OFF, C_ROW, K, N, P};
    use rows::{T5, VCOLS};
    let tile = (w * dt.size_bytes()).next_multiple_of(32);
    let [acc, brow, prod, elem] = [0, tile, 2 * tile, 3 * tile].map(Addr::from);
    let (sh, one) = (Shape::new(1, w), Shape::new(1, 1));
    let (kloop, kdone) = (b.label(), b.label());
    b.sub(VCOLS, N, COL).min(VCOLS, VCOLS, w);
    b.vdup(dt, sh, 1, VCOLS, acc, 0.0).movi(P, 0);
    b.bind(kloop);
    // a[i, p] and b[p, COL..] through the views.
    b.bge(P, K, kdone)
        .mul(A_OFF, P, A_CS)
        .add(A_OFF, A_OFF, A_ROW);
    b.ld(dt, one, 1, 1, elem, ga, A_OFF, 0);
    b.mul(B_OFF, P, B_RS)
        .add(B_OFF, B_OFF, B_BATCH)
        .mul(T5, COL, B_CS)
        .add(B_OFF, B_OFF, T5);
    if b_strided {
        b.ldx(dt, sh, 1, VCOLS, brow, gb, B_OFF, 0, B_CS);
    } else {
        b.ld(dt, sh, 1, VCOLS, brow, gb, B_OFF, 0);
    }
    b.setf(Pipe::Mte2, Pipe::V, 0).waitf(Pipe::Mte2, Pipe::V, 0);
    b.vbcast(dt, sh, 1, VCOLS, prod, elem);
    b.vmul(dt, sh, 1, VCOLS, prod, prod, brow);
    b.vadd(dt, sh, 1, VCOLS, acc, acc, prod);
    b.barrier().add(P, P, 1).jmp(kloop);
    b.bind(kdone);
    b.add(C_OFF, C_ROW, COL);
    b.setf(Pipe::V, Pipe::Mte3, 0).waitf(Pipe::V, Pipe::Mte3, 0);
    b.st(dt, sh, 1, VCOLS, gc, C_OFF, 0, acc);
    b.barrier().add(COL, COL, w);
}

/// Closes a cube kernel's loop over output tiles (`top` starts a tile,
/// `done` follows the last) and assembles it.
fn end_tile_loop(
    k: &Kernel,
    mut b: ProgramBuilder,
    cfg: &DeviceConfig,
    mm: &MatMul,
    top: Label,
    done: Label,
) -> Result<DeviceKernel, CodegenError> {
    use cube::TILE;
    b.barrier().add(TILE, TILE, 1).jmp(top);
    b.bind(done);
    b.end();
    assemble(k, b, cfg, mm, CoreType::Aic, Units::CubeTiles)
}

/// Assembles a matmul kernel, reading A and B and writing the product.
fn assemble(
    k: &Kernel,
    b: ProgramBuilder,
    cfg: &DeviceConfig,
    mm: &MatMul,
    core: CoreType,
    units: Units,
) -> Result<DeviceKernel, CodegenError> {
    let (program, asm) = finish(k, b, cfg)?;
    Ok(DeviceKernel {
        name: format!("{}/matmul", k.name),
        core,
        program,
        asm,
        buffers: vec![mm.a, mm.b, mm.out],
        units,
        tile_units: 1,
        extra: Arc::new(Vec::new()),
    })
}
