//! The builder against the assembler: the same program written both ways is
//! the same `Program`; every opcode has a method; labels and operands that
//! cannot be encoded are errors from `finish`.

use super::*;
use crate::isa::asm::{assemble, disassemble};
use crate::isa::TABLE;
use std::collections::HashSet;

const R0: Reg = Reg::fixed(0);
const R1: Reg = Reg::fixed(1);
const R2: Reg = Reg::fixed(2);
const R3: Reg = Reg::fixed(3);

fn built(b: ProgramBuilder) -> Program {
    b.finish().expect("the builder accepts the program")
}

fn assembled(text: &str) -> Program {
    assemble(text).expect("the text assembles")
}

#[test]
fn equals_the_assembled_text() {
    let text = "\
.kernel vadd aiv
.gm x f32 [4096] in
.gm y f32 [4096] out
.arg lo 0
.arg hi 4096
    ldarg r0, 0
    ldarg r1, 1
loop:
    bge r0, r1, done
    sub r2, r1, r0
    min r2, r2, 64
    ld f32, 1x64, 1, r2, @0x0, x, r0, 0
    setf mte2, v, 0
    waitf mte2, v, 0
    vadds f32, 1x64, 1, r2, @0x100, @0x0, -1.5
    vdup f32, 1x64, 1, r2, @0x200, bits:0x7ff8000000000001
    vcmp f32, 1x64, 1, r2, lt, @0x300, @0x0, @0x100
    setf v, mte3, 0
    waitf v, mte3, 0
    st f32, 1x64, 1, r2, y, r0, 0, @0x100
    barrier
    add r0, r0, 64
    jmp loop
done:
    end
";
    let mut b = ProgramBuilder::new("vadd", CoreType::Aiv);
    let x = b.gm("x", DType::F32, &[4096], Role::In);
    let y = b.gm("y", DType::F32, &[4096], Role::Out);
    let lo = b.arg("lo", 0);
    let hi = b.arg("hi", 4096);
    let (top, done) = (b.label(), b.label());
    let sh = Shape::new(1, 64);
    b.ldarg(R0, lo).ldarg(R1, hi);
    b.bind(top);
    b.bge(R0, R1, done).sub(R2, R1, R0).min(R2, R2, 64);
    b.ld(DType::F32, sh, 1, R2, Addr::new(0), x, R0, 0);
    b.setf(Pipe::Mte2, Pipe::V, 0).waitf(Pipe::Mte2, Pipe::V, 0);
    b.vadds(DType::F32, sh, 1, R2, Addr::new(0x100), Addr::new(0), -1.5);
    let nan = f64::from_bits(0x7ff8_0000_0000_0001);
    b.vdup(DType::F32, sh, 1, R2, Addr::new(0x200), nan);
    let (m, a1, a2) = (Addr::new(0x300), Addr::new(0), Addr::new(0x100));
    b.vcmp(DType::F32, sh, 1, R2, Cond::Lt, m, a1, a2);
    b.setf(Pipe::V, Pipe::Mte3, 0).waitf(Pipe::V, Pipe::Mte3, 0);
    b.st(DType::F32, sh, 1, R2, y, R0, 0, Addr::new(0x100));
    b.barrier().add(R0, R0, 64).jmp(top);
    b.bind(done);
    b.end();
    let p = built(b);
    assert_eq!(p, assembled(text));
    assert_eq!(assembled(&disassemble(&p)), p);
}

/// Calls every generated method once. A new opcode in the table fails
/// `every_opcode_has_a_method` until it is added here.
fn one_of_each(b: &mut ProgramBuilder, l: Label, g: Gm) {
    use DType::{F16, F32};
    let (sh, t) = (Shape::new(2, 8), Addr::new(0));
    let (u, v, w) = (Addr::new(0x40), Addr::new(0x80), Addr::new(0xc0));
    b.nop()
        .movi(R0, -3)
        .mov(R1, R0)
        .add(R1, R1, 2)
        .sub(R1, R1, R0);
    b.mul(R1, R1, 3)
        .div(R1, R1, 2)
        .rem(R1, R1, R0)
        .min(R1, R1, 9);
    b.max(R1, R1, R0)
        .shl(R1, R1, 1)
        .shr(R1, R1, R0)
        .ldarg(R2, 0);
    b.jmp(l)
        .blt(R0, R1, l)
        .bge(R0, 4, l)
        .beq(R0, R1, l)
        .bne(R0, R1, l);
    b.setf(Pipe::S, Pipe::V, 1)
        .waitf(Pipe::S, Pipe::V, 1)
        .barrier();
    b.ld(F32, sh, 2, R1, t, g, R0, 8);
    b.ldx(F32, sh, 2, 8, t, g, 0, R3, 2);
    b.ldg(F32, sh, 1, 8, t, g, R0, 1, DType::I64, u, 1, 8, R1);
    b.stx(F32, sh, R2, 8, g, 0, 8, 1, t);
    b.st(F32, sh, 2, 8, g, R0, 8, t);
    b.vadd(F32, sh, 2, 8, u, t, v).vsub(F32, sh, 2, 8, u, t, v);
    b.vmul(F32, sh, 2, 8, u, t, v).vdiv(F32, sh, 2, 8, u, t, v);
    b.vmax(F32, sh, 2, 8, u, t, v).vmin(F32, sh, 2, 8, u, t, v);
    b.vpow(F32, sh, 2, 8, u, t, v).vrem(F32, sh, 2, 8, u, t, v);
    b.vand(DType::I32, sh, 2, 8, u, t, v)
        .vor(DType::I32, sh, 2, 8, u, t, v);
    b.vxor(DType::I32, sh, 2, 8, u, t, v)
        .vshl(DType::I32, sh, 2, 8, u, t, v);
    b.vshr(DType::I32, sh, 2, 8, u, t, v);
    b.vmov(F32, sh, 2, 8, u, t);
    for op in tilejit_ir::UnaryOp::ALL {
        b.vunary(F32, sh, 2, 8, u, t, op);
    }
    b.vadds(F32, sh, 2, 8, u, t, 1.0)
        .vmuls(F32, sh, 2, 8, u, t, 2.0);
    b.vmaxs(F32, sh, 2, 8, u, t, 0.5)
        .vmins(F32, sh, 2, 8, u, t, f64::INFINITY);
    b.vdup(F32, sh, 2, 8, u, -0.0).vdupr(F32, sh, 2, 8, u, R1);
    b.vbcast(F32, sh, 2, 8, u, t);
    b.vcmp(F32, sh, 2, 8, Cond::Ge, w, t, v);
    b.vsel(F32, sh, 2, 8, u, w, t, v);
    b.vcast(F16, F32, sh, 2, 8, u, t);
    b.vrsum(F32, sh, 2, 8, u, t).vrmax(F32, sh, 2, 8, u, t);
    b.vrmin(F32, sh, 2, 8, u, t).vbrow(F32, sh, 2, 8, u, t);
    b.vrprod(F32, sh, 2, 8, u, t).vbcol(F32, sh, 2, 8, u, t);
    b.ldl1(F16, sh, 2, 8, t, g, 0, 8);
    b.ldl1x(F16, sh, 2, 8, t, g, 0, R3, 2);
    b.ldl1c(F16, sh, 2, 8, t, g, 0, R1, 8, 0, R2);
    b.mvl0a(F16, sh, t, t).mvl0b(F16, sh, t, t);
    b.mmad(F16, Mkn::new(16, 16, 16), t, t, t, 1);
    b.fixp(F16, sh, 2, 8, g, 0, 8, t, 0);
    b.fixpx(F16, sh, 2, 8, g, 0, 1, 8, t, 0);
    b.end();
}

#[test]
fn every_opcode_has_a_method() {
    let mut b = ProgramBuilder::new("all", CoreType::Aiv);
    let g = b.gm("x", DType::F32, &[64], Role::InOut);
    b.arg("lo", 0);
    let l = b.label();
    b.bind(l);
    one_of_each(&mut b, l, g);
    let p = built(b);
    let seen: HashSet<Opcode> = p.code.iter().map(|i| i.op).collect();
    let missing: Vec<&str> = TABLE
        .iter()
        .filter(|i| !seen.contains(&i.opcode))
        .map(|i| i.mnemonic)
        .collect();
    assert!(missing.is_empty(), "no builder call for {missing:?}");
    // Each method's operands are the table's, in order (the text form
    // parses them by kind).
    for inst in &p.code {
        for (&(name, kind), arg) in inst.info().operands.iter().zip(&inst.args) {
            assert!(arg.fits(kind), "{} {name}: {arg:?}", inst.op.mnemonic());
        }
    }
    assert_eq!(assembled(&disassemble(&p)), p);
}

fn build_err(f: impl FnOnce(&mut ProgramBuilder)) -> String {
    let mut b = ProgramBuilder::new("bad", CoreType::Aiv);
    f(&mut b);
    match b.finish() {
        Ok(p) => panic!("expected an error, built {p:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn unbound_label_is_an_error() {
    let e = build_err(|b| {
        let l = b.label();
        b.jmp(l);
    });
    assert!(e.contains("label 0 is never bound"), "{e}");
    // Made but not used: still an error (a generator lost track of it).
    let e = build_err(|b| {
        b.label();
        b.end();
    });
    assert!(e.contains("never bound"), "{e}");
}

#[test]
fn doubly_bound_label_is_an_error() {
    let e = build_err(|b| {
        let l = b.label();
        b.bind(l);
        b.nop();
        b.bind(l);
        b.jmp(l);
    });
    assert!(e.contains("bound twice (pc 0 and pc 1)"), "{e}");
}

#[test]
fn label_from_another_builder_is_an_error() {
    let mut other = ProgramBuilder::new("other", CoreType::Aiv);
    let (_, foreign) = (other.label(), other.label());
    let e = build_err(|b| {
        b.jmp(foreign);
    });
    assert!(e.contains("label 1 is not bound in this program"), "{e}");
}

#[test]
fn unencodable_operands_are_errors() {
    let e = build_err(|b| {
        b.movi(R0, u64::MAX).end();
    });
    assert!(e.contains("pc 0: operand `imm` of `movi`"), "{e}");
    let e = build_err(|b| {
        let sh = Shape::new(1, 70_000);
        b.vdup(DType::F32, sh, 1, 1, Addr::new(0), 0.0).end();
    });
    assert!(e.contains("operand `shape` of `vdup`"), "{e}");
    let e = build_err(|b| {
        b.vdup(DType::F32, Shape::new(1, 8), 1, 1, Addr::new(1 << 40), 0.0);
    });
    assert!(e.contains("operand `dst` of `vdup`: address"), "{e}");
}

#[test]
fn bad_declarations_are_errors() {
    let e = build_err(|b| {
        b.gm("x", DType::F32, &[], Role::In);
        b.gm("x", DType::F32, &[], Role::In);
    });
    assert!(e.contains("declared twice"), "{e}");
    let e = build_err(|b| {
        b.arg("r3", 0);
    });
    assert!(e.contains("not a valid scalar argument name"), "{e}");
}

#[test]
fn registers() {
    assert_eq!(Reg::new(31), Some(Reg::fixed(31)));
    assert_eq!(Reg::new(32), None);
    assert_eq!(R3.index(), 3);
}
