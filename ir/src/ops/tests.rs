//! Invariants of the op table that its types cannot state.

use super::*;

#[test]
fn mnemonics_are_unique_and_parse_back() {
    let mut seen = std::collections::HashSet::new();
    for u in UnaryOp::ALL {
        assert!(seen.insert(u.text()), "duplicate {}", u.text());
        assert_eq!(UnaryOp::from_text(u.text()), Some(u));
    }
    for b in BinaryOp::ALL {
        assert!(seen.insert(b.text()), "duplicate {}", b.text());
        assert_eq!(BinaryOp::from_text(b.text()), Some(b));
    }
    for c in CmpOp::ALL {
        assert!(seen.insert(c.text()), "duplicate {}", c.text());
        assert_eq!(CmpOp::from_text(c.text()), Some(c));
    }
    for r in ReduceOp::ALL {
        assert!(seen.insert(r.text()), "duplicate {}", r.text());
        assert_eq!(ReduceOp::from_text(r.text()), Some(r));
    }
    assert_eq!(UnaryOp::from_text("nope"), None);
}

#[test]
fn all_lists_every_variant_in_discriminant_order() {
    for (i, u) in UnaryOp::ALL.into_iter().enumerate() {
        assert_eq!(u as usize, i);
    }
    for (i, b) in BinaryOp::ALL.into_iter().enumerate() {
        assert_eq!(b as usize, i);
    }
    assert_eq!(BinaryOp::Max.name(), "maximum");
    assert_eq!(BinaryOp::Max.text(), "max");
    assert_eq!(ReduceOp::Sum.name(), "sum");
    assert_eq!(ReduceOp::Sum.text(), "reduce_sum");
    assert_eq!(UnaryOp::Neg.doc(), "`-x`");
}

#[test]
fn libcall_ops_are_float_only() {
    // Host code lowers integers inline only.
    for u in UnaryOp::ALL {
        if !matches!(u.def().host, UnaryHost::Inline(_)) {
            assert!(u.def().int.is_none(), "{}", u.name());
        }
    }
}

#[test]
fn exact_f32_functions_are_the_reference_rounded() {
    let xs = [
        -0.0f32,
        0.0,
        0.5,
        1.5,
        2.5,
        -2.5,
        -1.0,
        3.7,
        -1e30,
        1e-40,
        f32::INFINITY,
        f32::NAN,
    ];
    for u in UnaryOp::ALL {
        let Some(f) = u.def().exact_f32 else { continue };
        for x in xs {
            let want = (u.def().float)(x as f64) as f32;
            let got = f.apply(x);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{} {x}: {got} vs {want}",
                u.name()
            );
        }
    }
}

#[test]
fn libcalls_are_listed_once_with_their_symbols() {
    let l = libcalls();
    let names: std::collections::HashSet<_> = l.iter().map(|(s, _)| *s).collect();
    assert_eq!(names.len(), l.len());
    for s in ["tj_exp", "tj_pow", "tj_mod", "tj_ipow"] {
        assert!(names.contains(s), "{s}");
    }
}

#[test]
fn op_info_arity_matches_operands() {
    use crate::graph::{Axes, NodeId};
    let x = NodeId(0);
    let ops = [
        Op::Unary(UnaryOp::Exp, x),
        Op::Binary(BinaryOp::Add, x, x),
        Op::Compare(CmpOp::Lt, x, x),
        Op::Select(x, x, x),
        Op::Reduce(ReduceOp::Sum, x, Axes(1)),
        Op::MatMul(x, x),
    ];
    for op in ops {
        assert_eq!(op.info().arity, op.operands().len(), "{}", op.info().name);
    }
    assert_eq!(
        Op::Reduce(ReduceOp::Max, x, Axes(1)).info().name,
        "reduce_max"
    );
    assert_eq!(
        Op::Reduce(ReduceOp::Max, x, Axes(1)).info().kind,
        OpKind::Reduction
    );
}

/// `docs/ops.md`'s generated section is the table's; `BLESS=1` rewrites it.
#[test]
fn ops_md_is_generated_from_the_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ops.md");
    let file = std::fs::read_to_string(&path).expect("docs/ops.md");
    let want = doc::markdown();
    let (head, tail) = match (file.find(doc::BEGIN), file.find(doc::END)) {
        (Some(b), Some(e)) => (&file[..b], &file[e + doc::END.len()..]),
        _ => (file.as_str(), "\n"),
    };
    let tail = tail.strip_prefix('\n').unwrap_or(tail);
    let expected = format!("{head}{want}{tail}");
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &expected).expect("write docs/ops.md");
        return;
    }
    assert!(
        file == expected,
        "docs/ops.md's op table is stale; rerun with BLESS=1"
    );
}

#[test]
fn the_generated_section_lists_every_op() {
    let md = doc::markdown();
    for u in UnaryOp::ALL {
        assert!(md.contains(&format!("| `{}` |", u.name())), "{}", u.name());
    }
    assert!(md.contains("| `maximum` | `max` | inline | 1 |"));
    assert!(md.contains("| `pow` | `pow` | `tj_pow` floats, `tj_ipow` integers | 12 |"));
    assert!(md.contains("| `max` | `reduce_max` | an error |"));
}

/// The inverse trig rows against values known by hand (`atan(1) = pi/4`,
/// `asin(0.5) = pi/6`, `acos(0.5) = pi/3`, `acosh(1) = 0`, `atanh(0.5) =
/// ln(3)/2`) and numpy's domain edges (NaN outside, `±inf` at `atanh(±1)`).
#[test]
fn inverse_trig_rows_give_the_known_values() {
    use std::f64::consts::PI;
    let f = |u: UnaryOp, x: f64| (u.def().float)(x);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-15 * b.abs().max(1.0);
    assert!(close(f(UnaryOp::Atan, 1.0), PI / 4.0));
    assert!(close(f(UnaryOp::Atan, f64::INFINITY), PI / 2.0));
    assert!(close(f(UnaryOp::Asin, 0.5), PI / 6.0));
    assert!(close(f(UnaryOp::Acos, 0.5), PI / 3.0));
    assert!(close(f(UnaryOp::Acos, -1.0), PI));
    assert!(close(f(UnaryOp::Asinh, 1.0), 0.881373587019543));
    assert_eq!(f(UnaryOp::Acosh, 1.0), 0.0);
    assert!(close(f(UnaryOp::Atanh, 0.5), 0.5493061443340549));
    assert_eq!(f(UnaryOp::Atanh, 1.0), f64::INFINITY);
    assert_eq!(f(UnaryOp::Atanh, -1.0), f64::NEG_INFINITY);
    for (u, x) in [
        (UnaryOp::Asin, 1.5),
        (UnaryOp::Acos, -2.0),
        (UnaryOp::Acosh, 0.5),
        (UnaryOp::Atanh, 2.0),
    ] {
        assert!(f(u, x).is_nan(), "{} {x}", u.name());
    }
    // Float-only libcalls, costed as transcendentals.
    for u in [UnaryOp::Atan, UnaryOp::Acosh] {
        assert!(!u.accepts(crate::DType::I32) && u.accepts(crate::DType::F16));
        assert!(matches!(u.def().host, UnaryHost::Libcall(_)));
        assert_eq!(u.def().cost, 12);
    }
}
