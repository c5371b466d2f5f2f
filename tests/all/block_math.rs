//! The 8- and 16-lane math helpers (`CodegenOptions::block_math`) against
//! the inline math they replace: same bits on every input, alone and inside
//! fused kernels of every shape (blocks, tails, reductions, row scratch),
//! for each width this CPU has.
//! Accuracy itself is held by `host_backend`'s ulp sweeps, which run
//! whichever path the default options pick on this CPU.

use crate::host_backend::unary_graph;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use tilejit_codegen::host::{block_math, BlockMath, CodegenOptions, StreamStores};
use tilejit_ir::{Array, DType as D, Graph, Lit, UnaryOp};
use tilejit_runtime::HostProgram;
use tilejit_tests::graphs::{build, inputs_with};
use tilejit_tests::Rng;

fn opts(block_math: BlockMath) -> CodegenOptions {
    CodegenOptions {
        block_math,
        ..CodegenOptions::default()
    }
}

/// The helper widths this CPU has, with their symbols' suffix (without
/// any, every path is the inline code and these tests check nothing).
fn widths() -> Vec<(BlockMath, &'static str)> {
    let have: Vec<_> = [(BlockMath::Avx2, "_x8"), (BlockMath::Avx512, "_x16")]
        .into_iter()
        .filter(|&(w, _)| block_math(w).is_ok())
        .collect();
    if have.is_empty() {
        eprintln!("neither AVX2+FMA nor AVX-512F on this CPU: all math is inline");
    }
    have
}

/// Runs `g` compiled inline and with each helper width, with its stores
/// streamed as sizes decide (at these sizes: not) and always
/// (`StreamStores::Always`: every vector f32 store stage through the
/// stream helper); the outputs' bits must agree (any NaN matches any NaN:
/// payloads are not part of the contract).
fn same_bits(g: &Graph, args: &[Array], params: &[Lit]) -> Result<(), String> {
    let run = |opts: CodegenOptions| {
        HostProgram::compile_with(g, opts)
            .and_then(|p| p.run(args, params))
            .map_err(|e| e.to_string())
    };
    let inline = run(opts(BlockMath::Off))?;
    for (width, _) in widths() {
        for stream in [StreamStores::Large, StreamStores::Always] {
            let fast = run(CodegenOptions {
                stream_stores: stream,
                ..opts(width)
            })?;
            for (o, (a, b)) in fast.iter().zip(&inline).enumerate() {
                let (a, b) = (a.buffer(), b.buffer());
                for i in 0..a.len() {
                    let (x, y) = (a.get(i).as_f64(), b.get(i).as_f64());
                    if !(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())) {
                        return Err(format!(
                            "output {o}[{i}]: {width:?} helpers ({stream:?}) {x:e}, inline {y:e}"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Asking for a width this CPU lacks is an error that names it, not a
/// silent fallback: the option is part of the kernel cache's key.
#[test]
fn an_absent_helper_width_is_a_clear_error() {
    let g = unary_graph(UnaryOp::Exp, D::F32, 8);
    for w in [BlockMath::Avx2, BlockMath::Avx512] {
        match HostProgram::compile_with(&g, opts(w)) {
            Ok(_) => assert!(block_math(w).is_ok()),
            Err(e) => {
                assert!(block_math(w).is_err());
                assert!(e.to_string().contains("this CPU lacks"), "{e}");
            }
        }
    }
    assert!(block_math(BlockMath::Off).unwrap().is_none());
}

#[test]
fn simd_helpers_match_inline_math_bit_for_bit() {
    let specials = [
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        f32::MIN_POSITIVE,
        1e-45,
        -1e-45,
        f32::MAX,
        f32::MIN,
        88.38,
        88.72,
        89.0,
        -87.3,
        -103.9,
        -104.0,
        -20.0,
        0.625,
        -0.625,
    ];
    let mut rng = Rng(0x5eed_b10c);
    for (u, lo, hi) in [
        (UnaryOp::Exp, -110.0, 95.0),
        (UnaryOp::Log, 0.0, 1e38),
        (UnaryOp::Log, 0.0, 4.0),
        (UnaryOp::Tanh, -12.0, 12.0),
        (UnaryOp::Sigmoid, -100.0, 100.0),
        (UnaryOp::Gelu, -12.0, 12.0),
        (UnaryOp::Gelu, -5.0, 400.0),
    ] {
        // A ramp, random bit patterns (every exponent, NaN payloads,
        // subnormals) and the edges; a length that is no multiple of the
        // block, the unroll or the lane count.
        const RAMP: usize = 1 << 18;
        let mut xs: Vec<f32> = (0..RAMP)
            .map(|i| (lo + (hi - lo) * i as f64 / RAMP as f64) as f32)
            .collect();
        xs.extend((0..1 << 16).map(|_| f32::from_bits(rng.next() as u32)));
        xs.extend(specials);
        let n = xs.len();
        let g = unary_graph(u, D::F32, n);
        let x = Array::from_vec(xs, &[n]).unwrap();
        same_bits(&g, &[x], &[]).unwrap_or_else(|e| panic!("{u:?} on [{lo}, {hi}]: {e}"));
    }
}

/// Division by a row-uniform value goes through the helpers too:
/// every class of dividend (random bits included) over every class of
/// divisor, zeros, infinities, NaN and subnormals among them.
#[test]
fn division_by_a_scalar_matches_inline_bit_for_bit() {
    let mut rng = Rng(0x0d1f_1de5);
    let n = (1 << 16) + 13;
    let mut xs: Vec<f32> = (0..n).map(|_| f32::from_bits(rng.next() as u32)).collect();
    xs.extend([0.0, -0.0, 1.0, f32::INFINITY, f32::NAN, 1e-45, f32::MAX]);
    let n = xs.len();
    let text = format!(
        "graph {{
  %0 = input 0 : f32[{n}]
  %1 = param 0 : f32[]
  %2 = broadcast %1 : f32[{n}]
  %3 = div %0, %2 : f32[{n}]
  return %3
}}"
    );
    let g = tilejit_ir::text::parse(&text).unwrap();
    let x = Array::from_vec(xs, &[n]).unwrap();
    for d in [
        3.0,
        -7.5e-3,
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NAN,
        1e-40,
        3e38,
    ] {
        same_bits(&g, std::slice::from_ref(&x), &[Lit::Float(d)])
            .unwrap_or_else(|e| panic!("x / {d}: {e}"));
    }
}

/// Kernels built to reach every corner of the blocked loops: more helper
/// ops than block buffers (the rest stay inline), a helper value kept in
/// row scratch (softmax), a blocked f32 sum, and helper ops feeding each
/// other, on rows of 1 to 2051 elements (around the 1024-element block).
#[test]
fn blocked_loops_match_inline_on_fixed_kernels() {
    let graphs = [
        // Six helper ops in one kernel, chained and side by side.
        "graph {
  %0 = input 0 : f32[R,C]
  %1 = sigmoid %0 : f32[R,C]
  %2 = exp %1 : f32[R,C]
  %3 = tanh %2 : f32[R,C]
  %4 = gelu %3 : f32[R,C]
  %5 = log %4 : f32[R,C]
  %6 = exp %0 : f32[R,C]
  %7 = add %5, %6 : f32[R,C]
  return %7
}",
        // Row softmax: exp's value goes to row scratch in the sum's loop.
        "graph {
  %0 = input 0 : f32[R,C]
  %1 = reduce_max %0 axes=[1] : f32[R,1]
  %2 = broadcast %1 : f32[R,C]
  %3 = sub %0, %2 : f32[R,C]
  %4 = exp %3 : f32[R,C]
  %5 = reduce_sum %4 axes=[1] : f32[R,1]
  %6 = broadcast %5 : f32[R,C]
  %7 = div %4, %6 : f32[R,C]
  return %7
}",
        // Helper operands read straight from the input: a literal plus x,
        // x minus a param, x plus a row value; and a literal minus x, which
        // is not of that form.
        "graph {
  %0 = input 0 : f32[R,C]
  %1 = full 0.75 : f32[R,C]
  %2 = add %1, %0 : f32[R,C]
  %3 = tanh %2 : f32[R,C]
  %4 = param 0 : f32[]
  %5 = broadcast %4 : f32[R,C]
  %6 = sub %0, %5 : f32[R,C]
  %7 = sigmoid %6 : f32[R,C]
  %8 = reduce_min %0 axes=[1] : f32[R,1]
  %9 = broadcast %8 : f32[R,C]
  %10 = add %0, %9 : f32[R,C]
  %11 = log %10 : f32[R,C]
  %12 = sub %1, %0 : f32[R,C]
  %13 = gelu %12 : f32[R,C]
  %14 = add %3, %7 : f32[R,C]
  %15 = add %11, %13 : f32[R,C]
  %16 = add %14, %15 : f32[R,C]
  return %16
}",
        // Row-uniform values that are not leaves: a divisor `max + 2` and a
        // bias `sum / C` (layernorm's mean), evaluated once per block.
        "graph {
  %0 = input 0 : f32[R,C]
  %1 = reduce_max %0 axes=[1] : f32[R,1]
  %2 = full 2.0 : f32[R,1]
  %3 = add %1, %2 : f32[R,1]
  %4 = broadcast %3 : f32[R,C]
  %5 = div %0, %4 : f32[R,C]
  %6 = reduce_sum %0 axes=[1] : f32[R,1]
  %7 = div %6, %2 : f32[R,1]
  %8 = broadcast %7 : f32[R,C]
  %9 = sub %0, %8 : f32[R,C]
  %10 = exp %9 : f32[R,C]
  %11 = add %5, %10 : f32[R,C]
  return %11
}",
        // A blocked sum and a max of helper values, and the values too.
        "graph {
  %0 = input 0 : f32[R,C]
  %1 = tanh %0 : f32[R,C]
  %2 = reduce_sum %1 axes=[1] : f32[R,1]
  %3 = gelu %0 : f32[R,C]
  %4 = reduce_max %3 axes=[1] : f32[R,1]
  %5 = add %2, %4 : f32[R,1]
  %6 = broadcast %5 : f32[R,C]
  %7 = mul %1, %6 : f32[R,C]
  return %7, %5
}",
    ];
    for text in graphs {
        for (rows, cols) in [(3, 1), (2, 255), (2, 1023), (2, 1024), (3, 1025), (2, 2051)] {
            let text = text
                .replace("R,", &format!("{rows},"))
                .replace(",C]", &format!(",{cols}]"));
            let g = tilejit_ir::text::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            let params = if text.contains("param") {
                vec![Lit::Float(-1.25)]
            } else {
                Vec::new()
            };
            for specials in [false, true] {
                let args = inputs_with(rows, cols, 7, specials);
                same_bits(&g, &args[..1], &params).unwrap_or_else(|e| panic!("{e}\n{text}"));
            }
        }
    }
}

/// The max/min fold helpers fill the inline loop's four accumulators lane
/// for lane. Which of two equal values a lane keeps could show only in a
/// zero's sign (the final IEEE `fmax`/`fmin` combine puts -0 below +0, so
/// today it does not), and a lane that saw a NaN must give NaN: rows of
/// mostly signed zeros, with NaN, infinities and ones among them, on
/// lengths around the 16-element step.
#[test]
fn max_and_min_folds_match_inline_on_signed_zeros() {
    let mut rng = Rng(0x2e80_51ed);
    for cols in [1, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 100, 1023, 1029] {
        let rows = 24;
        let text = format!(
            "graph {{
  %0 = input 0 : f32[{rows},{cols}]
  %1 = reduce_max %0 axes=[1] : f32[{rows},1]
  %2 = reduce_min %0 axes=[1] : f32[{rows},1]
  return %1, %2
}}"
        );
        let g = tilejit_ir::text::parse(&text).unwrap();
        for _ in 0..8 {
            let xs: Vec<f32> = (0..rows * cols)
                .map(|_| match rng.next() % 64 {
                    0 => f32::NAN,
                    1 => f32::INFINITY,
                    2 => f32::NEG_INFINITY,
                    3 => -1.0,
                    4 => 1.0,
                    r if r % 2 == 0 => 0.0,
                    _ => -0.0,
                })
                .collect();
            let x = Array::from_vec(xs, &[rows, cols]).unwrap();
            same_bits(&g, &[x], &[]).unwrap_or_else(|e| panic!("{cols} columns: {e}"));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        rng_seed: RngSeed::Fixed(0xb10c_4a7b),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random fused graphs (elementwise chains, reductions, softmax-like
    /// scratch rows) on row lengths around the block size: whole blocks,
    /// short last blocks, rows shorter than one vector.
    #[test]
    fn blocked_loops_match_inline_on_random_graphs(
        rows in prop_oneof![Just(1usize), Just(3), Just(50)],
        cols in prop_oneof![Just(1usize), Just(3), Just(50), Just(255), Just(783), Just(1024), Just(1025), Just(4099)],
        instrs in proptest::collection::vec((any::<u8>(), any::<u16>(), any::<u16>(), any::<u8>()), 1..24),
        seed in any::<u64>(),
        specials in any::<bool>(),
        param in prop_oneof![Just(1.0f64), Just(-2.5)],
    ) {
        let g = build(rows, cols, &instrs);
        let args = inputs_with(rows, cols, seed, specials);
        same_bits(&g, &args, &[Lit::Float(param)]).map_err(TestCaseError::fail)?;
    }
}

/// A lone gelu: one pass, one helper.
const GELU: &str = "graph {
  %0 = input 0 : f32[4,64]
  %1 = gelu %0 : f32[4,64]
  return %1
}";

/// A golden graph's text (`tests/golden/<name>.simplified.graph`).
fn golden(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/golden/{name}.simplified.graph",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// The helpers a one-kernel graph's code calls, one entry per call site
/// sorted by symbol, each with the definition of its last argument (the
/// prefetch distance), read from the Cranelift IR, whose listing names
/// each import (`fn9 = u0:10 sig9 ; tj_exp_x8`).
fn helper_calls(text: &str, width: BlockMath) -> Vec<(String, String)> {
    calls(text, opts(width))
}

/// [`helper_calls`] with any options.
fn calls(text: &str, opts: CodegenOptions) -> Vec<(String, String)> {
    let g = tilejit_ir::text::parse(text).unwrap();
    let prog = tilejit_ir::kernel::fuse(&g).unwrap();
    assert_eq!(prog.kernels.len(), 1, "{text}");
    let dtype_of = |b: tilejit_ir::kernel::BufId| prog.buffers[b.0 as usize].ty.dtype;
    let l = tilejit_codegen::host::listing(&prog.kernels[0], &dtype_of, opts).unwrap();
    let defined = |prefix: String| {
        l.clif
            .lines()
            .find_map(|d| d.trim().strip_prefix(&prefix).map(str::to_string))
            .unwrap_or_else(|| "?".into())
    };
    let mut calls = l
        .clif
        .lines()
        .filter_map(|c| {
            // `call fn9(v1, .., v5)  ; v5 = 0`: the comment names constants.
            let c = c.split("  ;").next()?;
            let (f, args) = c.split("call ").nth(1)?.split_once('(')?;
            let symbol = defined(format!("{f} = "));
            let symbol = symbol.split(" ; ").nth(1).unwrap_or("?").to_string();
            let last = args.trim_end_matches(')').rsplit(", ").next()?.to_string();
            Some((symbol, defined(format!("{last} = "))))
        })
        .collect::<Vec<_>>();
    calls.sort();
    calls
}

/// A helper prefetches the next row only where it re-reads a row an
/// earlier stage brought in: softmax's exp(x - max) after the max pass
/// does (it makes softmax faster; like the helper choice below, only
/// the code shows it), a lone gelu (one pass, a stream the hardware
/// prefetcher follows) does not.
#[test]
fn helpers_prefetch_the_next_row_only_on_a_second_pass() {
    let softmax = golden("softmax");
    // The prefetch distance of every call of `symbol`, and how many calls.
    let distances = |text: &str, w, symbol: String| {
        let all: Vec<String> = helper_calls(text, w)
            .into_iter()
            .filter(|(s, _)| *s == symbol)
            .map(|(_, d)| d)
            .collect();
        assert!(!all.is_empty(), "no call of {symbol}");
        all
    };
    for (w, x) in widths() {
        for exp in distances(&softmax, w, format!("tj_exp{x}")) {
            assert!(!exp.starts_with("iconst"), "exp's prefetch distance: {exp}");
        }
        for div in distances(&softmax, w, format!("tj_div{x}")) {
            assert!(div.starts_with("iconst.i64 0"), "div reads scratch: {div}");
        }
        for g in distances(GELU, w, format!("tj_gelu{x}")) {
            assert!(g.starts_with("iconst.i64 0"), "gelu: {g}");
        }
    }
}

/// Which ops go to helpers: only values that vary along the row. A row
/// value divided by a literal (layernorm's mean) is one hoisted scalar op;
/// through a helper it would be computed per element (that slip once made
/// layernorm several times slower with identical results, so only the code shows
/// it: read here from the calls in the Cranelift IR, whose imports the
/// listing names).
#[test]
fn helpers_serve_only_values_that_vary_along_the_row() {
    // The math helpers (stores may stream too: tested below).
    let calls = |text: &str, width| {
        helper_calls(text, width)
            .into_iter()
            .map(|(symbol, _)| symbol)
            .filter(|s| !s.starts_with("tj_stream"))
            .collect::<Vec<_>>()
    };
    let (layernorm, softmax) = (golden("layernorm"), golden("softmax"));
    for (w, x) in widths() {
        assert!(
            calls(&layernorm, w).is_empty(),
            "layernorm: no exp, no varying division"
        );
        assert_eq!(
            calls(&softmax, w),
            [
                format!("tj_div{x}"),
                format!("tj_exp{x}"),
                format!("tj_max{x}")
            ],
            "max(x), exp(x - max), e / sum"
        );
        assert_eq!(calls(GELU, w), [format!("tj_gelu{x}")]);
    }
}

/// Where stores stream: a store stage of contiguous f32s, written by a
/// helper (gelu, softmax's division) or by the stage's own loop (W1's
/// `max(x*w + b, 0)`), gets one call of the stream helper when the options
/// as they apply to the kernel say so (`Large`: not at these sizes); a
/// per-row store (a row sum) never does, nor does code without helpers.
/// (The bits the streaming path gives are held by `same_bits` above.)
#[test]
fn f32_store_stages_stream_when_the_options_say_so() {
    let bias_relu = "graph {
  %0 = input 0 : f32[4,64]
  %1 = input 1 : f32[4,64]
  %2 = input 2 : f32[4,64]
  %3 = mul %0, %1 : f32[4,64]
  %4 = add %3, %2 : f32[4,64]
  %5 = relu %4 : f32[4,64]
  return %5
}";
    let row_sum = "graph {
  %0 = input 0 : f32[4,64]
  %1 = reduce_sum %0 axes=[1] : f32[4,1]
  return %1
}";
    let streams = |text: &str, o: CodegenOptions, x: &str| {
        calls(text, o)
            .iter()
            .filter(|(s, _)| *s == format!("tj_stream{x}"))
            .count()
    };
    for (w, x) in widths() {
        let with = |stream| CodegenOptions {
            stream_stores: stream,
            ..opts(w)
        };
        for text in [GELU, bias_relu, &golden("softmax")] {
            assert_eq!(streams(text, with(StreamStores::Always), x), 1, "{text}");
            assert_eq!(streams(text, with(StreamStores::Large), x), 0, "{text}");
            assert_eq!(streams(text, with(StreamStores::Off), x), 0, "{text}");
        }
        assert_eq!(streams(row_sum, with(StreamStores::Always), x), 0);
    }
    for text in [GELU, bias_relu] {
        let inline = CodegenOptions {
            stream_stores: StreamStores::Always,
            ..opts(BlockMath::Off)
        };
        assert!(calls(text, inline).is_empty(), "{text}");
    }
}

/// `StreamStores::Large` applies to a kernel as `Always` only when its
/// domain holds more f32s than the last-level cache, else as `Off`; the
/// other choices apply as they are.
#[test]
fn large_stream_stores_apply_by_the_kernels_size() {
    let min = tilejit_codegen::host::stream_min_bytes();
    for (numel, large) in [(16, false), (min / 4, false), (min / 4 + 1, true)] {
        let text = format!(
            "graph {{\n  %0 = input 0 : f32[{numel}]\n  %1 = exp %0 : f32[{numel}]\n  return %1\n}}"
        );
        let g = tilejit_ir::text::parse(&text).unwrap();
        let prog = tilejit_ir::kernel::fuse(&g).unwrap();
        let k = &prog.kernels[0];
        let applied = |stream| {
            CodegenOptions {
                stream_stores: stream,
                ..CodegenOptions::default()
            }
            .for_kernel(k)
            .stream_stores
        };
        let want = if large {
            StreamStores::Always
        } else {
            StreamStores::Off
        };
        assert_eq!(applied(StreamStores::Large), want, "{numel}");
        assert_eq!(applied(StreamStores::Always), StreamStores::Always);
        assert_eq!(applied(StreamStores::Off), StreamStores::Off);
    }
}
