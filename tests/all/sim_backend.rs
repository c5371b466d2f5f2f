//! The simulated device as a backend, against the oracle: random fused
//! graphs, every elementwise op at odd sizes and dtypes, row softmax and
//! layernorm, params, through `Program::run_sim` (kernels compiled to AIV
//! bytecode, launched as tile tasks through the scheduler). Kernels the
//! device code generator does not handle yet (matmul, transposes) must
//! fail with a clear `unsupported` error, never a wrong answer.

use crate::host_backend::{as_f64, ramp, ty, unary_graph, unary_ops};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use std::sync::atomic::{AtomicUsize, Ordering};
use tilejit_ir::{
    Array, Axes, BinaryOp, DType as D, Graph, Lit, NodeId, Op, ReduceOp, Shape, UnaryOp,
};
use tilejit_runtime::{Program, RuntimeError};
use tilejit_tests::graphs::{build_typed, dims, inputs_typed, inputs_with};

/// Sim vs reference: every output element equal (NaN matches NaN). The
/// device computes each op in the node's dtype with the interpreter's
/// rounding, so results are exact, not merely close (matmuls excepted:
/// the cube rounds once per instruction into an f32 accumulator).
fn check_sim(g: Graph, args: &[Array], params: &[Lit]) -> Result<bool, String> {
    let text = g.to_string();
    let p = Program::compile(g).map_err(|e| format!("{e}\n{text}"))?;
    let (sim, report) = match p.run_sim(args, params, false) {
        Ok(r) => r,
        Err(RuntimeError::Codegen(e @ tilejit_codegen::CodegenError::SimUnsupported { .. })) => {
            assert!(
                e.to_string()
                    .contains("not supported on the simulated device yet"),
                "{e}"
            );
            return Ok(false);
        }
        Err(e) => return Err(format!("{e}\n{text}")),
    };
    let reference = p.run_reference(args, params).map_err(|e| e.to_string())?;
    // The cube accumulates in f32 (the reference in f64): matmuls are close,
    // everything else exact.
    let has_matmul = p
        .host()
        .kernels()
        .kernels
        .iter()
        .any(|k| k.matmul.is_some());
    for (s, r) in sim.iter().zip(&reference) {
        // f16/bf16 results of an f32-accumulated product may round to the
        // neighbouring value of the reference's.
        let tol = match (has_matmul, s.dtype()) {
            (false, _) => 0.0,
            (true, D::F16 | D::BF16) => 4e-3,
            (true, _) => 1e-5,
        };
        if s.ty() != r.ty() {
            return Err(format!("type {} vs {}", s.ty(), r.ty()));
        }
        let (sv, rv) = (as_f64(s), as_f64(r));
        for (i, (&a, &b)) in sv.iter().zip(&rv).enumerate() {
            if !(a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= tol * b.abs().max(1.0)) {
                return Err(format!(
                    "element {i}: sim {a} vs reference {b}\n{text}\n{}",
                    p.host().kernels()
                ));
            }
        }
    }
    if report.tasks == 0 && !p.host().kernels().kernels.is_empty() {
        return Err("no tasks ran".into());
    }
    Ok(true)
}

/// Random fused graphs (the host backend's generator), a fixed seed: the
/// device must run every one and match the reference (an `unsupported`
/// kernel is counted, and fails the test).
#[test]
fn sim_matches_reference_on_random_graphs() {
    random_graphs_on_sim(D::F32, 150, 100, 0x5177_0001);
}

/// The same in f16, bf16 and f64: the device computes each op in its dtype.
#[test]
fn sim_matches_reference_on_random_low_and_double_precision_graphs() {
    for (dt, seed) in [
        (D::F16, 0x5177_0f16),
        (D::BF16, 0x5177_0bf1),
        (D::F64, 0x5177_0f64),
    ] {
        random_graphs_on_sim(dt, 40, 25, seed);
    }
}

/// The same in u8 and i8: wrapping arithmetic, unsigned u8 compares and
/// max/min, casts through f16, f64, i32 and bool and back.
#[test]
fn sim_matches_reference_on_random_small_int_graphs() {
    for (dt, seed) in [(D::U8, 0x5177_0008), (D::I8, 0x5177_0018)] {
        random_graphs_on_sim(dt, 40, 25, seed);
    }
}

fn random_graphs_on_sim(dt: D, cases: u32, min_ran: usize, seed: u64) {
    let config = ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let ran = AtomicUsize::new(0);
    let skipped = AtomicUsize::new(0);
    let strategy = (
        dims(),
        dims(),
        proptest::collection::vec(
            (any::<u8>(), any::<u16>(), any::<u16>(), any::<u8>()),
            1..20,
        ),
        any::<u64>(),
        prop_oneof![Just(1.0f64), Just(0.0), Just(-2.5)],
    );
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&strategy, |(rows, cols, instrs, seed, param)| {
        let g = build_typed(dt, rows, cols, &instrs);
        let args = inputs_typed(dt, rows, cols, seed);
        // The param as a literal of its dtype (an integer for u8/i8).
        match check_sim(g, &args, &[Lit::from_f64(param, dt)]) {
            Ok(true) => ran.fetch_add(1, Ordering::Relaxed),
            Ok(false) => skipped.fetch_add(1, Ordering::Relaxed),
            Err(e) => return Err(TestCaseError::fail(e)),
        };
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (ran, skipped) = (ran.into_inner(), skipped.into_inner());
    assert!(
        ran >= min_ran,
        "only {ran} random {dt} graphs ran on the device ({skipped} unsupported)"
    );
}

#[test]
fn every_elementwise_op_at_odd_sizes_and_dtypes() {
    for n in [1usize, 3, 50, 783, 4096, 10_007] {
        for d in [
            D::F32,
            D::F64,
            D::F16,
            D::BF16,
            D::I32,
            D::I64,
            D::U8,
            D::I8,
        ] {
            for u in unary_ops(d) {
                assert!(
                    check_sim(unary_graph(u, d, n), &[ramp(n, d, 0)], &[]).unwrap(),
                    "{u:?} {d} {n}"
                );
            }
            for b in tilejit_ir::BinaryOp::ALL
                .into_iter()
                .filter(|b| b.accepts(d))
            {
                let mut g = Graph::new();
                let x = g
                    .add(Op::Input {
                        index: 0,
                        ty: ty(d, &[n]),
                    })
                    .unwrap();
                let y = g
                    .add(Op::Input {
                        index: 1,
                        ty: ty(d, &[n]),
                    })
                    .unwrap();
                let z = g.add(Op::Binary(b, x, y)).unwrap();
                g.outputs.push(z);
                assert!(
                    check_sim(g, &[ramp(n, d, 0), ramp(n, d, 17)], &[]).unwrap(),
                    "{b:?} {d} {n}"
                );
            }
        }
    }
}

/// Row softmax `exp(x - max) / sum` and layernorm over [rows, cols].
#[test]
fn softmax_and_layernorm_rows() {
    for (rows, cols) in [(1usize, 1usize), (3, 50), (7, 783), (64, 1024), (5, 4096)] {
        let x = rows_input(rows, cols);
        let (mut g, y, _) = softmax_graph(rows, cols);
        g.outputs.push(y);
        assert!(
            check_sim(g, std::slice::from_ref(&x), &[]).unwrap(),
            "softmax {rows}x{cols}"
        );

        // Layernorm with a param epsilon: (x - mean) * rsqrt(var + eps).
        let axes = Axes::from_axes(&[1]);
        let mut g = Graph::new();
        let xi = g
            .add(Op::Input {
                index: 0,
                ty: ty(D::F32, &[rows, cols]),
            })
            .unwrap();
        let eps = g
            .add(Op::Param {
                index: 0,
                dtype: D::F32,
            })
            .unwrap();
        let n = g
            .add(Op::Full {
                value: Lit::Float(cols as f64),
                ty: ty(D::F32, &[rows, 1]),
            })
            .unwrap();
        let sum = g.add(Op::Reduce(ReduceOp::Sum, xi, axes)).unwrap();
        let mean = g.add(Op::Binary(BinaryOp::Div, sum, n)).unwrap();
        let mb = g
            .add(Op::Broadcast(mean, Shape::new(&[rows, cols]).unwrap()))
            .unwrap();
        let xc = g.add(Op::Binary(BinaryOp::Sub, xi, mb)).unwrap();
        let sq = g.add(Op::Binary(BinaryOp::Mul, xc, xc)).unwrap();
        let ss = g.add(Op::Reduce(ReduceOp::Sum, sq, axes)).unwrap();
        let var = g.add(Op::Binary(BinaryOp::Div, ss, n)).unwrap();
        let epsb = g
            .add(Op::Broadcast(eps, Shape::new(&[rows, 1]).unwrap()))
            .unwrap();
        let ve = g.add(Op::Binary(BinaryOp::Add, var, epsb)).unwrap();
        let r = g.add(Op::Unary(UnaryOp::Rsqrt, ve)).unwrap();
        let rb = g
            .add(Op::Broadcast(r, Shape::new(&[rows, cols]).unwrap()))
            .unwrap();
        let y = g.add(Op::Binary(BinaryOp::Mul, xc, rb)).unwrap();
        g.outputs.push(y);
        assert!(
            check_sim(g, std::slice::from_ref(&x), &[Lit::Float(1e-5)]).unwrap(),
            "layernorm {rows}x{cols}"
        );
    }
}

/// Rows longer than UB holds, and fewer than 8 of them: each stage's
/// column range split across tasks, partial reductions per chunk in GM,
/// combine tasks per row. Sums round per chunk, so these compare with a
/// tolerance; max/min are exact.
/// `rows x cols` f32 values in [-5, 5).
fn rows_input(rows: usize, cols: usize) -> Array {
    let v: Vec<f32> = (0..rows * cols)
        .map(|i| (((i * 7919) % 1000) as f32) / 100.0 - 5.0)
        .collect();
    Array::from_vec(v, &[rows, cols]).unwrap()
}

/// Row softmax `exp(x - max) / sum` of input 0 (node 0): the graph, the
/// result node and the row-max node (no outputs pushed yet).
fn softmax_graph(rows: usize, cols: usize) -> (Graph, NodeId, NodeId) {
    let mut g = Graph::new();
    let full = Shape::new(&[rows, cols]).unwrap();
    let xi = g
        .add(Op::Input {
            index: 0,
            ty: ty(D::F32, &[rows, cols]),
        })
        .unwrap();
    let axes = Axes::from_axes(&[1]);
    let m = g.add(Op::Reduce(ReduceOp::Max, xi, axes)).unwrap();
    let mb = g.add(Op::Broadcast(m, full)).unwrap();
    let d = g.add(Op::Binary(BinaryOp::Sub, xi, mb)).unwrap();
    let e = g.add(Op::Unary(UnaryOp::Exp, d)).unwrap();
    let s = g.add(Op::Reduce(ReduceOp::Sum, e, axes)).unwrap();
    let sb = g.add(Op::Broadcast(s, full)).unwrap();
    let y = g.add(Op::Binary(BinaryOp::Div, e, sb)).unwrap();
    (g, y, m)
}

#[test]
fn rows_longer_than_ub_run_in_chunks() {
    for (rows, cols) in [(1usize, 200_003usize), (3, 70_000)] {
        let x = rows_input(rows, cols);
        let axes = Axes::from_axes(&[1]);
        // Softmax over the long rows, its row max, and the row min.
        let (mut g, y, m) = softmax_graph(rows, cols);
        let xi = NodeId(0);
        let mx = g.add(Op::Reduce(ReduceOp::Min, xi, axes)).unwrap();
        g.outputs.push(y);
        g.outputs.push(m);
        g.outputs.push(mx);
        let p = Program::compile(g).unwrap();
        let (sim, _) = p.run_sim(std::slice::from_ref(&x), &[], false).unwrap();
        let reference = p.run_reference(std::slice::from_ref(&x), &[]).unwrap();
        assert_eq!(as_f64(&sim[1]), as_f64(&reference[1]), "row max is exact");
        assert_eq!(as_f64(&sim[2]), as_f64(&reference[2]), "row min is exact");
        for (a, b) in as_f64(&sim[0]).iter().zip(as_f64(&reference[0])) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs() + 1e-12,
                "softmax {rows}x{cols}: {a} vs {b}"
            );
        }
        // A few long rows are split across tasks: per stage a function over
        // column ranges, per reduction a combine function; the workspace
        // holds the partials.
        let sp = p.sim().unwrap();
        let names: Vec<&str> = sp.kernels().iter().map(|k| k.name.as_str()).collect();
        assert!(
            names.iter().any(|n| n.ends_with("/combine0"))
                && names.iter().any(|n| n.ends_with("/stage1")),
            "{names:?}"
        );
        assert!(
            sp.workspace().buffers.iter().any(|b| b.role == "workspace"),
            "{}",
            sp.workspace()
        );
        let (_, report) = p.run_sim(std::slice::from_ref(&x), &[], true).unwrap();
        let profile = report.profile.unwrap();
        let cores: std::collections::HashSet<u32> =
            profile.records.iter().map(|r| r.core_index).collect();
        assert!(
            cores.len() >= 8,
            "one long row should spread over cores: {cores:?}"
        );
    }
}

/// Matmuls in dtypes the cube does not take run on the vector cores and
/// match the reference exactly; f32/f16 on the cube match closely.
#[test]
fn matmul_in_every_dtype() {
    for (bt, m, k, n) in [
        (1usize, 1usize, 1usize, 1usize),
        (1, 3, 5, 7),
        (2, 17, 9, 33),
        (1, 40, 70, 2100),
    ] {
        for d in [D::F64, D::I32, D::I64, D::F32, D::F16] {
            let (sa, sb) = if bt == 1 {
                (vec![m, k], vec![k, n])
            } else {
                (vec![bt, m, k], vec![bt, k, n])
            };
            let mut g = Graph::new();
            let a = g
                .add(Op::Input {
                    index: 0,
                    ty: ty(d, &sa),
                })
                .unwrap();
            let b = g
                .add(Op::Input {
                    index: 1,
                    ty: ty(d, &sb),
                })
                .unwrap();
            let c = g.add(Op::MatMul(a, b)).unwrap();
            g.outputs.push(c);
            let x = ramp(bt * m * k, d, 3)
                .reshaped(Shape::new(&sa).unwrap())
                .unwrap();
            let y = ramp(bt * k * n, d, 11)
                .reshaped(Shape::new(&sb).unwrap())
                .unwrap();
            assert!(check_sim(g, &[x, y], &[]).unwrap(), "{d} {bt}x{m}x{k}x{n}");
        }
    }
}

/// Whole-tile kernels are double buffered: two sets of UB slots, so MTE2
/// loads the next tile while V computes this one and MTE3 stores the last.
/// On one core the run takes clearly less than its pipes' busy time added
/// up (a single-buffered loop with a barrier per tile takes at least the
/// sum), and computes the right values.
#[test]
fn flat_and_row_kernels_overlap_copies_with_compute() {
    use tilejit_runtime::device::{DeviceApi, Pipe};
    for shape in [&[50_000usize][..], &[64, 300]] {
        let t = ty(D::F32, shape);
        let mut g = Graph::new();
        let x = g.add(Op::Input { index: 0, ty: t }).unwrap();
        let w = g.add(Op::Input { index: 1, ty: t }).unwrap();
        let m = g.add(Op::Binary(BinaryOp::Mul, x, w)).unwrap();
        let y = g.add(Op::Unary(UnaryOp::Exp, m)).unwrap();
        g.outputs.push(y);
        let p = Program::compile(g).unwrap();
        let sp = p.sim().unwrap();
        let kern = &sp.kernels()[0];
        assert!(kern.asm.contains("setf mte3, mte2, 1"), "{}", kern.asm);
        let n: usize = shape.iter().product();
        let dev = tilejit_runtime::sim_device();
        let xs: Vec<f32> = (0..n).map(|i| (i % 97) as f32 / 50.0 - 1.0).collect();
        let ws: Vec<f32> = (0..n).map(|i| (i % 13) as f32 / 7.0).collect();
        let bufs: Vec<_> = (0..3)
            .map(|_| dev.allocate(4 * n as u64).unwrap())
            .collect();
        dev.copy_elems_from_host(&xs, &bufs[0], 0).unwrap();
        dev.copy_elems_from_host(&ws, &bufs[1], 0).unwrap();
        let refs: Vec<_> = bufs.iter().collect();
        let scalars = sp.task_scalars(0, 0, sp.units(0), &[]);
        let run = dev.run(&kern.program, 0, &refs, &scalars).unwrap();
        let mut out = vec![0f32; n];
        dev.copy_elems_to_host(&bufs[2], 0, &mut out).unwrap();
        let want = p
            .run_reference(
                &[
                    Array::from_vec(xs, shape).unwrap(),
                    Array::from_vec(ws, shape).unwrap(),
                ],
                &[],
            )
            .unwrap();
        let got: Vec<f64> = out.iter().map(|&v| v as f64).collect();
        assert_eq!(got, as_f64(&want[0]), "{shape:?}");
        let sum = run.busy_of(Pipe::Mte2) + run.busy_of(Pipe::V) + run.busy_of(Pipe::Mte3);
        assert!(
            (run.cycles as f64) < 0.85 * sum as f64,
            "{shape:?}: {} cycles for {sum} busy pipe cycles",
            run.cycles
        );
    }
}

/// Random graphs over rows longer than UB (20,000 and 70,001 columns) and
/// few of them: chunked rows and reductions split into partial + combine
/// tasks, under random stage mixes (matmuls left out: their K would be the
/// row length).
#[test]
fn sim_matches_reference_on_random_graphs_with_long_rows() {
    let config = ProptestConfig {
        cases: 60,
        rng_seed: RngSeed::Fixed(0x1096_0001),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let strategy = (
        prop_oneof![Just(1usize), Just(3), Just(9)],
        prop_oneof![Just(20000usize), Just(70001)],
        proptest::collection::vec(
            (any::<u8>(), any::<u16>(), any::<u16>(), any::<u8>()),
            1..14,
        ),
        any::<u64>(),
    );
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let ran = AtomicUsize::new(0);
    let result = runner.run(&strategy, |(rows, cols, instrs, seed)| {
        let instrs: Vec<_> = instrs.into_iter().filter(|i| i.0 % 12 != 11).collect();
        let g = build_typed(D::F32, rows, cols, &instrs);
        // Half the cases without NaN/inf (see the host backend's test).
        let args = inputs_with(rows, cols, seed, seed % 2 == 0);
        match check_sim(g, &args, &[Lit::Float(1.0)]) {
            Ok(true) => {
                ran.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => {}
            Err(e) => return Err(TestCaseError::fail(e)),
        };
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let ran = ran.into_inner();
    assert!(ran >= 50, "only {ran} long-row graphs ran on the device");
}

/// Sim entries of the kernel cache count their launches (they once always
/// showed 0) and name the jit function and signature that compiled them.
#[test]
fn sim_cache_entries_count_launches_and_name_their_program() {
    use tilejit::prelude::*;
    let f = tilejit::jit_fn!(|x: &Tensor| (x * 3.0).tanh() - 0.25);
    let x = Tensor::randn(&[77], 5);
    for _ in 0..3 {
        with_mode(RunMode::Sim, || f.call(&x)).unwrap();
    }
    let name = f.handlers()[0].program.name().to_string();
    assert!(name.ends_with("(f32[77])"), "{name}");
    let entries = tilejit::kernel_cache().entries();
    let mine: Vec<_> = entries
        .iter()
        .filter(|e| e.target == tilejit_runtime::Target::Sim && e.program == name)
        .collect();
    assert!(!mine.is_empty(), "no sim entry for {name}: {entries:?}");
    assert!(mine.iter().all(|e| e.launches >= 3), "{mine:?}");
}
