//! Property tests over random graphs: `simplify` (with the verifier after
//! every pass) never changes what the reference interpreter computes, and
//! every graph's text form round-trips.

use proptest::prelude::*;
use tilejit_ir::passes::simplify;
use tilejit_ir::text::parse;
use tilejit_ir::{interp, Lit};
use tilejit_tests::graphs::{build, dims, inputs};

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn simplify_preserves_results(
        rows in dims(),
        cols in dims(),
        instrs in proptest::collection::vec((any::<u8>(), any::<u16>(), any::<u16>(), any::<u8>()), 1..24),
        seed in any::<u64>(),
        param in prop_oneof![Just(1.0f64), Just(0.0), Just(-2.5)],
    ) {
        let g = build(rows, cols, &instrs);
        let s = simplify(&g, true).map_err(|e| TestCaseError::fail(format!("{e}\n{g}")))?;
        prop_assert!(s.len() <= g.len());
        let args = inputs(rows, cols, seed);
        let before = interp::run(&g, &args, &[Lit::Float(param)]).unwrap();
        let after = interp::run(&s, &args, &[Lit::Float(param)]).unwrap();
        // Debug prints every NaN as NaN and keeps the sign of zero.
        prop_assert_eq!(format!("{:?}", before), format!("{:?}", after), "graph:\n{}\nsimplified:\n{}", g, s);
    }

    #[test]
    fn text_form_round_trips(
        rows in dims(),
        cols in dims(),
        instrs in proptest::collection::vec((any::<u8>(), any::<u16>(), any::<u16>(), any::<u8>()), 1..24),
    ) {
        let g = build(rows, cols, &instrs);
        for graph in [g.clone(), simplify(&g, true).unwrap()] {
            let text = graph.to_string();
            let parsed = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
            prop_assert_eq!(parsed.to_string(), text);
        }
    }
}
