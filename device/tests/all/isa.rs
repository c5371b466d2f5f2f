//! The device ISA's text and binary forms and its verifier: round trips of
//! random programs through encoder/decoder and disassembler/assembler, the
//! generated `ISA.md`, every verifier rejection, and hostile input (random
//! bytes, mutated binaries and texts) that must never crash the decoder,
//! the verifier or the interpreter.

use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use tilejit_device::isa::{asm, binary, doc, ArgDecl, Cond, GmDecl, Kind, Role, TABLE};
use tilejit_device::{
    CoreType, DeviceApi, DeviceConfig, Inst, Opcode, Operand, Pipe, Program, SimDevice,
};
use tilejit_ir::{DType, UnaryOp};

use crate::{check_golden_file, example, example_dir, Rng, EXAMPLES};

/// Any operand value that fits a slot of `kind` (not necessarily valid).
fn random_operand(kind: Kind, r: &mut Rng) -> Operand {
    match kind {
        Kind::Reg => Operand::Reg(r.below(32) as u8),
        Kind::Imm => Operand::Imm(r.next() as i64 >> r.below(64)),
        Kind::Val => {
            if r.below(2) == 0 {
                Operand::Reg(r.below(32) as u8)
            } else {
                Operand::Imm(r.next() as i64 >> r.below(64))
            }
        }
        Kind::Scalar => Operand::Scalar(match r.below(4) {
            0 => r.next(),                                  // any bits, NaN payloads included
            1 => (r.below(2000) as f64 - 1000.0).to_bits(), // small integers
            2 => [f64::INFINITY, f64::NEG_INFINITY, -0.0, f64::NAN][r.below(4) as usize].to_bits(),
            _ => (r.next() as f64 / 3.0e18).to_bits(),
        }),
        Kind::DType => Operand::DType(DType::ALL[r.below(DType::ALL.len() as u64) as usize]),
        Kind::Shape => Operand::Shape(r.next() as u16, r.next() as u16),
        Kind::Mkn => Operand::Mkn(r.next() as u16, r.next() as u16, r.next() as u16),
        Kind::Mem(..) => Operand::Addr(r.next() as u32),
        Kind::Gm => Operand::Gm(r.next() as u8),
        Kind::Label => Operand::Label(r.next() as u32 >> r.below(32)),
        Kind::Pipe => Operand::Pipe(Pipe::ALL[r.below(7) as usize]),
        Kind::Event => Operand::Event(r.next() as u8),
        Kind::Cond => Operand::Cond(Cond::ALL[r.below(6) as usize]),
        Kind::Unary => Operand::Unary(UnaryOp::ALL[r.below(UnaryOp::ALL.len() as u64) as usize]),
    }
}

fn random_program(seed: u64) -> Program {
    let mut r = Rng(seed | 1);
    let gm = (0..r.below(4))
        .map(|i| GmDecl {
            name: format!("buf_{i}"),
            dtype: DType::ALL[r.below(DType::ALL.len() as u64) as usize],
            shape: (0..r.below(4)).map(|_| r.below(100_000)).collect(),
            role: [Role::In, Role::Out, Role::InOut][r.below(3) as usize],
        })
        .collect();
    let args = (0..r.below(3))
        .map(|i| ArgDecl {
            name: format!("a{i}"),
            value: r.next() as i64,
        })
        .collect();
    let code = (0..1 + r.below(40))
        .map(|_| {
            let info = &TABLE[r.below(TABLE.len() as u64) as usize];
            Inst {
                op: info.opcode,
                args: info
                    .operands
                    .iter()
                    .map(|&(_, k)| random_operand(k, &mut r))
                    .collect(),
            }
        })
        .collect();
    let core = if r.below(2) == 0 {
        CoreType::Aic
    } else {
        CoreType::Aiv
    };
    Program {
        name: format!("k{seed:x}"),
        core,
        gm,
        args,
        code,
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        rng_seed: RngSeed::Fixed(0xd15a_5e3b),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// encode -> decode and disassemble -> assemble give back the program.
    #[test]
    fn random_programs_round_trip(seed in any::<u64>()) {
        let p = random_program(seed);
        let bin = binary::encode(&p).unwrap();
        prop_assert_eq!(&binary::decode(&bin).unwrap(), &p);
        let text = asm::disassemble(&p);
        let back = asm::assemble(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&back, &p);
        prop_assert_eq!(binary::encode(&back).unwrap(), bin);
    }

    /// Random bytes never crash the decoder; whatever decodes never crashes
    /// the verifier, and whatever verifies runs to a result or an error.
    #[test]
    fn random_bytes_never_crash(bytes in proptest::collection::vec(any::<u8>(), 0..300), magic in any::<bool>()) {
        let mut bytes = bytes;
        if magic {
            // Give most cases a valid header so the decoder gets deeper.
            let mut head = b"TJBC\x04\x00\x01\x01k".to_vec();
            head.extend_from_slice(&bytes);
            bytes = head;
        }
        decode_verify_run(&bytes);
    }

    /// Mutated example binaries (bytes flipped, cut, inserted).
    #[test]
    fn mutated_binaries_never_crash(which in 0usize..4, edits in proptest::collection::vec((any::<u16>(), any::<u8>(), 0u8..3), 1..6)) {
        let mut bytes = binary::encode(&example(EXAMPLES[which])).unwrap();
        for (at, val, how) in edits {
            let at = at as usize % (bytes.len() + 1);
            match how {
                0 if at < bytes.len() => bytes[at] = val,
                1 => bytes.insert(at, val),
                _ => bytes.truncate(at.max(8)),
            }
        }
        decode_verify_run(&bytes);
    }

    /// Mutated assembly text never crashes the assembler.
    #[test]
    fn mutated_text_never_crashes(which in 0usize..4, edits in proptest::collection::vec((any::<u16>(), any::<char>()), 1..8)) {
        let text = std::fs::read_to_string(example_dir().join(EXAMPLES[which])).unwrap();
        let mut chars: Vec<char> = text.chars().collect();
        for (at, c) in edits {
            let at = at as usize % chars.len();
            chars[at] = c;
        }
        let text: String = chars.into_iter().collect();
        if let Ok(p) = asm::assemble(&text) {
            let _ = tilejit_device::verify(p, &DeviceConfig::default());
        }
    }
}

/// A small device whose watchdog ends runaway programs quickly.
fn fuzz_device() -> SimDevice {
    SimDevice::new(DeviceConfig {
        watchdog_work: 200_000,
        gm_bytes: 1 << 24,
        ..DeviceConfig::default()
    })
    .unwrap()
}

fn decode_verify_run(bytes: &[u8]) {
    let Ok(p) = binary::decode(bytes) else { return };
    let dev = fuzz_device();
    let Ok(v) = dev.verify(p.clone()) else { return };
    // Buffers as declared, capped so fuzzed shapes stay small.
    let bufs: Vec<_> =
        p.gm.iter()
            .map(|g| dev.allocate(g.bytes().unwrap_or(64).min(1 << 16)).unwrap())
            .collect();
    let refs: Vec<_> = bufs.iter().collect();
    let scalars: Vec<i64> = p.args.iter().map(|a| a.value).collect();
    let _ = dev.run(&v, 0, &refs, &scalars);
}

#[test]
fn examples_round_trip_through_binary_and_text() {
    for name in EXAMPLES {
        let p = example(name);
        let bin = binary::encode(&p).unwrap();
        let text = asm::disassemble(&binary::decode(&bin).unwrap());
        assert_eq!(
            binary::encode(&asm::assemble(&text).unwrap()).unwrap(),
            bin,
            "{name}"
        );
        tilejit_device::verify(p, &DeviceConfig::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn isa_md_is_generated_from_the_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ISA.md");
    check_golden_file(&path, &doc::markdown());
    // Every opcode is documented, in byte order.
    let md = doc::markdown();
    for (i, info) in TABLE.iter().enumerate() {
        assert!(
            md.contains(&format!("| {i} | `{}` |", info.mnemonic)),
            "{}",
            info.mnemonic
        );
        assert_eq!(info.opcode as usize, i);
        assert_eq!(Opcode::from_mnemonic(info.mnemonic), Some(info.opcode));
    }
}

fn assemble_err(body: &str) -> String {
    let text = format!(".kernel t aiv\n.gm x f32 [64] in\n{body}\n");
    asm::assemble(&text).unwrap_err().to_string()
}

#[test]
fn assembler_errors_name_the_line_and_operand() {
    assert_eq!(
        assemble_err("    frob r1"),
        "line 3: unknown mnemonic `frob`"
    );
    assert!(assemble_err("    movi r1").contains("`movi` takes 2 operands (rd, imm), got 1"));
    assert!(assemble_err("    movi r99, 1")
        .contains("operand `rd` of `movi`: `r99` is not a register r0..r31"));
    assert!(assemble_err("    jmp nowhere").contains("label `nowhere` is not defined"));
    assert!(assemble_err("    ld f32, 8x8, 8, 8, @0, y, 0, 8")
        .contains("`y` is not a declared GM argument"));
    assert!(assemble_err("    vadd f99, 8x8, 8, 8, @0, @0, @0").contains("`f99` is not a dtype"));
    assert!(assemble_err("a:\na:\n    end").contains("label `a` defined twice"));
    assert!(asm::assemble("    end")
        .unwrap_err()
        .to_string()
        .contains("missing `.kernel"));
    assert!(asm::assemble(".kernel r1 aiv\n end")
        .unwrap_err()
        .to_string()
        .contains("not a valid name"));
    assert!(asm::assemble(".kernel k gpu\n end")
        .unwrap_err()
        .to_string()
        .contains("expected aic or aiv"));
}

/// Verifies `body` as an AIV (or AIC) program with one f32 GM argument and
/// one scalar argument, returning the rejection message.
fn reject(core: &str, body: &str) -> String {
    let text = format!(".kernel t {core}\n.gm x f32 [64] in\n.arg n 4\n{body}\n");
    let p = asm::assemble(&text).unwrap_or_else(|e| panic!("{e}"));
    match tilejit_device::verify(p, &DeviceConfig::default()) {
        Ok(_) => panic!("verifier accepted:\n{body}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn verifier_rejects_each_reason() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "aic",
            "    ld f32, 8x8, 8, 8, @0x0, x, 0, 8\n    end",
            "at pc 0: `ld` does not exist on aic cores",
        ),
        (
            "aiv",
            "    mmad f16, 16x16x16, @0x0, @0x0, @0x0, 0\n    end",
            "`mmad` does not exist on aiv cores",
        ),
        (
            "aiv",
            "    vunary i32, 8x8, 8, 8, @0x0, @0x0, exp\n    end",
            "`vunary exp` does not take dtype i32",
        ),
        (
            "aic",
            "    mmad i32, 16x16x16, @0x0, @0x0, @0x0, 0\n    end",
            "`mmad` does not take dtype i32",
        ),
        (
            "aiv",
            "    vadd bool, 8x8, 8, 8, @0x0, @0x0, @0x0\n    end",
            "`vadd` does not take dtype bool",
        ),
        (
            "aiv",
            "    vadd f32, 16x1024, 16, 1024, @0x20020, @0x0, @0x0\n    end",
            "beyond its 196608 bytes",
        ),
        (
            "aiv",
            "    vadd f32, 8x8, 8, 8, @0x10, @0x0, @0x0\n    end",
            "is not 32-byte aligned",
        ),
        (
            "aic",
            "    mvl0a f16, 256x256, @0x0, @0x0\n    end",
            "L0A bytes 0x0..0x20000, beyond its 65536",
        ),
        (
            "aiv",
            "    vadd f32, 8x8, 9, 8, @0x0, @0x0, @0x0\n    end",
            "`vrows` = 9 exceeds the tile's 8",
        ),
        (
            "aiv",
            "    ld f32, 8x8, 8, 8, @0x0, x, -1, 8\n    end",
            "`offset` = -1 is negative",
        ),
        (
            "aiv",
            "    vadd f32, 0x8, 0, 8, @0x0, @0x0, @0x0\n    end",
            "empty tile shape 0x8",
        ),
        (
            "aiv",
            "    jmp @7\n    end",
            "jumps to 7, outside the program",
        ),
        (
            "aiv",
            "    setf mte2, v, 0\n    end",
            "unbalanced flags: (mte2, v, 0) has 1 more `setf`",
        ),
        (
            "aiv",
            "    waitf mte2, v, 3\n    end",
            "(mte2, v, 3) has 1 more `waitf`",
        ),
        (
            "aiv",
            "    setf mte2, v, 9\n    waitf mte2, v, 9\n    end",
            "event 9 out of range",
        ),
        (
            "aic",
            "    setf m, v, 0\n    waitf m, v, 0\n    end",
            "a aic core has no pipe `v`",
        ),
        (
            "aiv",
            "    setf v, v, 0\n    waitf v, v, 0\n    end",
            "between a pipe and itself",
        ),
        (
            "aiv",
            "    ld f32, 8x8, 8, 8, @0x0, gm3, 0, 8\n    end",
            "GM argument 3 is not declared",
        ),
        (
            "aiv",
            "    ldarg r0, 1\n    end",
            "scalar argument 1 is not declared",
        ),
        (
            "aiv",
            "    div r0, r0, 0\n    end",
            "`div` by the constant 0",
        ),
        ("aiv", "    shl r0, r0, 64\n    end", "shifts must be 0..64"),
        (
            "aic",
            "    mmad f16, 16x16x16, @0x0, @0x0, @0x0, 2\n    end",
            "`acc` must be 0 or 1",
        ),
        (
            "aiv",
            "    movi r0, 1",
            "the last instruction must be `end` or `jmp`",
        ),
    ];
    for (core, body, want) in cases {
        let msg = reject(core, body);
        assert!(
            msg.contains(want),
            "for\n{body}\nexpected `{want}` in: {msg}"
        );
        assert!(msg.starts_with("program `t` rejected"), "{msg}");
    }
}

#[test]
fn verifier_rejects_malformed_instructions_built_in_code() {
    let base = Program {
        name: "t".into(),
        core: CoreType::Aiv,
        gm: vec![],
        args: vec![],
        code: vec![],
    };
    let err = tilejit_device::verify(base.clone(), &DeviceConfig::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("the program is empty"), "{err}");
    let wrong_kind = Program {
        code: vec![
            Inst {
                op: Opcode::Movi,
                args: vec![Operand::Imm(1), Operand::Imm(2)],
            },
            Inst {
                op: Opcode::End,
                args: vec![],
            },
        ],
        ..base.clone()
    };
    let err = tilejit_device::verify(wrong_kind, &DeviceConfig::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("at pc 0: operand `rd` of `movi` must be Reg"),
        "{err}"
    );
    let wrong_count = Program {
        code: vec![Inst {
            op: Opcode::End,
            args: vec![Operand::Imm(0)],
        }],
        ..base.clone()
    };
    let err = tilejit_device::verify(wrong_count, &DeviceConfig::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("`end` takes 0 operands, has 1"), "{err}");
    // The encoder refuses what it cannot represent instead of writing garbage.
    let long_name = Program {
        name: "n".repeat(300),
        code: vec![Inst {
            op: Opcode::End,
            args: vec![],
        }],
        ..base
    };
    assert!(binary::encode(&long_name).is_err());
}

#[test]
fn decoder_errors_say_what_and_where() {
    let good = binary::encode(&example("softmax_rows.s")).unwrap();
    let err = |b: &[u8]| binary::decode(b).unwrap_err().to_string();
    assert!(err(b"ELF\x7f").contains("bad magic"));
    assert!(err(b"TJBC\x09\x00").contains("unsupported version 9"));
    assert!(err(&good[..good.len() - 3]).contains("input ends inside"));
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(err(&trailing).contains("1 trailing bytes"));
    let mut bad_op = good.clone();
    // The first instruction's opcode byte follows the 4-byte count.
    let at = good.len()
        - binary::encode(&Program {
            code: vec![],
            ..example("softmax_rows.s")
        })
        .unwrap()
        .len();
    let first_op = good.len() - at;
    bad_op[first_op] = 250;
    let msg = err(&bad_op);
    assert!(
        msg.contains("pc 0: unknown opcode byte 250")
            && msg.contains(&format!("byte {}", first_op + 1)),
        "{msg}"
    );
}
