//! Run modes through the public API: `#[jit(mode = sim)]`, `with_mode`,
//! `JitFn::with_mode`, Verify comparing Host and Sim, Reference; matmul
//! (AIC tasks + AIV epilogue) and transposes on the device; the verify
//! comparison's tolerance and its failure message.

use tilejit::prelude::*;
use tilejit_ir::Array;
use tilejit_tests::reference;

#[jit(mode = sim)]
fn mm_bias_gelu_sim(a: &Tensor, b: &Tensor, bias: &Tensor) -> Tensor {
    (a.matmul(b) + bias).gelu()
}

#[jit]
fn mm_bias_gelu(a: &Tensor, b: &Tensor, bias: &Tensor) -> Tensor {
    (a.matmul(b) + bias).gelu()
}

#[jit]
fn attention(q: &Tensor, k: &Tensor) -> Tensor {
    q.matmul(&k.transpose(0, 1)).softmax(-1)
}

#[jit]
fn norm(x: &Tensor, g: &Tensor, b: &Tensor) -> Tensor {
    x.layer_norm(g, b, 1e-5)
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|&v| v as f64)
        .collect()
}

#[test]
fn matmul_with_epilogue_runs_on_the_device_at_odd_sizes() {
    for (m, k, n) in [
        (1usize, 1usize, 1usize),
        (3, 5, 7),
        (50, 70, 65),
        (130, 64, 129),
    ] {
        let a = Tensor::randn(&[m, k], 1) * 0.5;
        let b = Tensor::randn(&[k, n], 2) * 0.5;
        let bias = Tensor::randn(&[n], 3);
        let y = mm_bias_gelu_sim(&a, &b, &bias).unwrap();
        let mut want = reference::matmul(&f64s(&a), &f64s(&b), m, k, n);
        let bv = f64s(&bias);
        for (i, w) in want.iter_mut().enumerate() {
            *w = reference::gelu(*w + bv[i % n]);
        }
        tilejit_tests::assert_close(&y.to_vec::<f32>().unwrap(), &want, 1e-5);
    }
    assert_eq!(mm_bias_gelu_sim::jit().effective_mode(), RunMode::Sim);
}

#[test]
fn verify_mode_passes_on_matmul_transpose_softmax_and_layernorm() {
    let q = Tensor::randn(&[37, 64], 4);
    let k = Tensor::randn(&[45, 64], 5);
    let x = Tensor::randn(&[33, 300], 6);
    let (g, b) = (Tensor::randn(&[300], 7), Tensor::randn(&[300], 8));
    with_mode(RunMode::Verify, || {
        let p = attention(&q, &k).unwrap();
        assert_eq!(p.shape(), &[37, 45]);
        let diffs = attention::jit().last_verify().expect("a verify report");
        assert_eq!(diffs.len(), 1);
        // Probabilities near 0 may differ by many ulp at a tiny absolute
        // error; the relative error (against max(|x|, 1)) is what matters.
        assert!(diffs[0].max_rel <= 1e-5, "{diffs:?}");
        norm(&x, &g, &b).unwrap();
        mm_bias_gelu(&q, &k.transpose(0, 1), &Tensor::randn(&[45], 9)).unwrap();
    });
    // The same calls on Sim alone agree with Host closely.
    let host = attention(&q, &k).unwrap().to_vec::<f32>().unwrap();
    let sim = with_mode(RunMode::Sim, || attention(&q, &k).unwrap())
        .to_vec::<f32>()
        .unwrap();
    for (h, s) in host.iter().zip(&sim) {
        assert!((h - s).abs() <= 1e-5 * s.abs().max(1.0), "{h} vs {s}");
    }
}

#[test]
fn jit_fn_with_mode_and_reference() {
    let f = jit_fn!(|a: &Tensor, b: &Tensor| (a * b + 1.0).exp());
    let (a, b) = (Tensor::randn(&[1000], 10), Tensor::randn(&[1000], 11));
    let host = f.call((&a, &b)).unwrap().to_vec::<f32>().unwrap();
    let sim = f
        .with_mode(RunMode::Sim)
        .call((&a, &b))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let reference = f
        .with_mode(RunMode::Reference)
        .call((&a, &b))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    // Sim computes each op exactly as the reference interpreter does.
    assert_eq!(sim, reference);
    for (h, r) in host.iter().zip(&reference) {
        assert!((h - r).abs() <= 4.0 * f32::EPSILON * r.abs(), "{h} vs {r}");
    }
    assert_eq!(RunMode::from_name("VERIFY"), Some(RunMode::Verify));
    assert_eq!(RunMode::from_name("gpu"), None);
}

/// A graph from its text form, for `mode::compare`.
fn graph(text: &str) -> tilejit::internals::ir::Graph {
    tilejit::internals::ir::text::parse(text).unwrap()
}

#[test]
fn verify_reports_the_first_element_past_tolerance() {
    let g = graph("graph {\n  %0 = input 0 : f32[3]\n  %1 = add %0, %0 : f32[3]\n  return %1\n}\n");
    let x = Array::from_vec(vec![0.5f32, 1.0, 1.5], &[3]).unwrap();
    let a = Array::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
    let close = Array::from_vec(vec![1.0f32, 2.0 + 2.0 * f32::EPSILON, 3.0], &[3]).unwrap();
    let far = Array::from_vec(vec![1.0f32, 2.5, 3.0], &[3]).unwrap();
    let inputs = std::slice::from_ref(&x);
    let ok = tilejit::mode::compare(
        "f",
        &g,
        inputs,
        &[],
        std::slice::from_ref(&a),
        std::slice::from_ref(&close),
    )
    .unwrap();
    assert!(ok[0].max_ulp <= 2 && ok[0].max_abs > 0.0, "{ok:?}");
    let err = tilejit::mode::compare(
        "f",
        &g,
        inputs,
        &[],
        std::slice::from_ref(&a),
        std::slice::from_ref(&far),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("`f` in verify mode") && msg.contains("element 1 is 2 on host and 2.5 on sim"),
        "{msg}"
    );
    assert_eq!(err.code(), 5);
    // An add of exact inputs rounds once: 8 ulp apart is a bug.
    let off = Array::from_vec(vec![1.0f32, 2.0 + 16.0 * f32::EPSILON, 3.0], &[3]).unwrap();
    assert!(tilejit::mode::compare("f", &g, inputs, &[], &[a], &[off]).is_err());
    let gi =
        graph("graph {\n  %0 = input 0 : i32[2]\n  %1 = add %0, %0 : i32[2]\n  return %1\n}\n");
    let xi = Array::from_vec(vec![1i32, 1], &[2]).unwrap();
    let ints = Array::from_vec(vec![2i32, 2], &[2]).unwrap();
    let ints2 = Array::from_vec(vec![2i32, 3], &[2]).unwrap();
    assert!(
        tilejit::mode::compare("g", &gi, &[xi], &[], &[ints], &[ints2]).is_err(),
        "integers must match exactly"
    );
}

#[test]
fn verify_tolerance_follows_the_computation_on_unscaled_random_data() {
    // Sums cancel: the result is small while each backend's rounding error
    // grows with Σ|a_i b_i|. These sizes failed 41-100% of seeds under a
    // tolerance relative to the result.
    #[jit]
    fn mm(a: &Tensor, b: &Tensor) -> Tensor {
        a.matmul(b)
    }
    #[jit]
    fn row_stats(x: &Tensor) -> (Tensor, Tensor) {
        (x.sum(-1, true), x.softmax(-1))
    }
    with_mode(RunMode::Verify, || {
        for seed in 0..12u64 {
            let (x, w) = (
                Tensor::randn(&[8, 256], seed),
                Tensor::randn(&[256, 256], 100 + seed),
            );
            mm(&x, &w).unwrap();
            let (x, w) = (
                Tensor::randn(&[8, 1024], 200 + seed),
                Tensor::randn(&[1024, 64], 300 + seed),
            );
            mm(&x, &w).unwrap();
        }
        let x = Tensor::randn(&[16, 4096], 7);
        row_stats(&x).unwrap();
        norm(&x, &Tensor::randn(&[4096], 8), &Tensor::randn(&[4096], 9)).unwrap();
    });
}

#[test]
fn verify_still_catches_one_wrong_element_of_a_matmul() {
    let (m, k, n) = (8usize, 1024usize, 64usize);
    let a = Tensor::randn(&[m, k], 1);
    let b = Tensor::randn(&[k, n], 2);
    let g = graph(&format!(
        "graph {{\n  %0 = input 0 : f32[{m},{k}]\n  %1 = input 1 : f32[{k},{n}]\n  \
         %2 = matmul %0, %1 : f32[{m},{n}]\n  return %2\n}}\n"
    ));
    let inputs = [a.to_array().unwrap(), b.to_array().unwrap()];
    let host = a.matmul(&b).to_array().unwrap();
    let sim = with_mode(RunMode::Sim, || a.matmul(&b)).to_array().unwrap();
    let check = |wrong: Vec<f32>| {
        let wrong = Array::from_vec(wrong, &[m, n]).unwrap();
        tilejit::mode::compare(
            "mm",
            &g,
            &inputs,
            &[],
            std::slice::from_ref(&host),
            &[wrong],
        )
    };
    let diffs = check(sim.as_slice::<f32>().unwrap().to_vec()).expect("the device result passes");
    assert!(diffs[0].max_bound_use <= 1.0, "{diffs:?}");
    let good = host.as_slice::<f32>().unwrap().to_vec();
    let (av, bv) = (f64s(&a), f64s(&b));
    // Element (3, 5) takes its neighbour's value: an indexing bug.
    let mut wrong = good.clone();
    wrong[3 * n + 5] = good[3 * n + 6];
    let msg = check(wrong).unwrap_err().to_string();
    assert!(msg.contains(&format!("element {}", 3 * n + 5)), "{msg}");
    // Element (3, 5) misses its largest term: a loop bound off by one.
    let t = (0..k)
        .max_by(|&p, &q| {
            (av[3 * k + p] * bv[p * n + 5])
                .abs()
                .total_cmp(&(av[3 * k + q] * bv[q * n + 5]).abs())
        })
        .unwrap();
    let mut wrong = good.clone();
    wrong[3 * n + 5] -= (av[3 * k + t] * bv[t * n + 5]) as f32;
    assert!(check(wrong).is_err());
}

#[test]
fn sim_kernels_enter_the_kernel_cache_with_their_bytecode() {
    let f = jit_fn!(|a: &Tensor| (a * 3.0 - 1.0).sigmoid());
    let a = Tensor::randn(&[777], 12);
    // Other tests may clear the global cache at any moment: look right after
    // a call, and retry a few times. Other tests' sigmoid kernels (other
    // dtypes) may be there too; device code is size-generic, so the f32
    // one may have been compiled first for another size.
    let found = (0..5).find_map(|_| {
        f.with_mode(RunMode::Sim).call(&a).unwrap();
        tilejit::kernel_cache()
            .entries()
            .into_iter()
            .filter(|e| e.target == tilejit_runtime::Target::Sim && e.ops.contains(&"sigmoid"))
            .filter_map(|e| tilejit::kernel_cache().details(&e.key))
            .find(|d| d.kernel_ir.contains(": f32"))
    });
    let details = found.expect("a sim entry for the sigmoid kernel");
    assert!(
        details.disasm.contains(".kernel k_")
            && details.disasm.contains("vunary f32")
            && details.disasm.contains(", sigmoid\n"),
        "{}",
        details.disasm
    );
    assert!(details.kernel_ir.contains("sigmoid"));
    assert!(details.clif.is_empty());
    assert!(tilejit::kernel_cache().to_string().contains("sim"));
}

#[test]
fn the_device_launcher_sizes_its_workspace_and_launches_asynchronously() {
    use tilejit_ir::{BinaryOp, Graph, Op, Shape, TensorType, UnaryOp};
    // y = exp(a + b): inputs a, b (f32[100,30]); one kernel; one output.
    let ty = TensorType::new(tilejit_ir::DType::F32, Shape::new(&[100, 30]).unwrap());
    let mut g = Graph::new();
    let a = g.add(Op::Input { index: 0, ty }).unwrap();
    let b = g.add(Op::Input { index: 1, ty }).unwrap();
    let s = g.add(Op::Binary(BinaryOp::Add, a, b)).unwrap();
    let y = g.add(Op::Unary(UnaryOp::Exp, s)).unwrap();
    g.outputs.push(y);
    let p = tilejit_runtime::Program::compile(g).unwrap();
    let sim = p.sim().unwrap();
    let w = sim.workspace();
    assert_eq!(
        (w.input_bytes, w.output_bytes, w.temp_bytes, w.total_bytes),
        (24000, 12000, 0, 36000),
        "{w}"
    );
    assert_eq!(w.buffers.iter().filter(|b| b.role == "input").count(), 2);
    assert!(
        w.to_string().starts_with("device workspace: 36000 bytes"),
        "{w}"
    );
    // Two launches in flight at once, then waited on in reverse order.
    let x1 = Array::from_vec(
        (0..3000).map(|i| i as f32 / 3000.0).collect::<Vec<_>>(),
        &[100, 30],
    )
    .unwrap();
    let x2 = Array::from_vec(
        (0..3000).map(|i| -(i as f32) / 3000.0).collect::<Vec<_>>(),
        &[100, 30],
    )
    .unwrap();
    let first = sim.launch(&[x1.clone(), x1.clone()], &[], false).unwrap();
    let second = sim.launch(&[x2.clone(), x2.clone()], &[], true).unwrap();
    let (out2, report2) = second.wait().unwrap();
    let (out1, report1) = first.wait().unwrap();
    assert!(report2.profile.is_some() && report1.profile.is_none());
    // The profile splits the run's host time: copies in, launch, copies out.
    let prof = report2.profile.as_ref().unwrap();
    let copies = prof.host_copies.expect("the launcher measured its copies");
    assert!(copies.copy_in > std::time::Duration::ZERO);
    assert!(copies.copy_out > std::time::Duration::ZERO);
    assert_eq!(prof.host_time, report2.host_time);
    assert!(
        prof.summary().contains("host time: copy in"),
        "{}",
        prof.summary()
    );
    let trace: serde_json::Value = serde_json::from_str(&prof.chrome_trace()).unwrap();
    let other = &trace["otherData"];
    assert!(other["copy_in_host_ms"].as_f64().unwrap() > 0.0, "{other}");
    assert!(other["launch_host_ms"].as_f64().unwrap() > 0.0, "{other}");
    let want1 = p.run_reference(&[x1.clone(), x1], &[]).unwrap();
    let want2 = p.run_reference(&[x2.clone(), x2], &[]).unwrap();
    assert_eq!(out1, want1);
    assert_eq!(out2, want2);
}

#[test]
fn sim_launches_use_the_chosen_policy() {
    use tilejit_ir::{Graph, Op, Shape, TensorType, UnaryOp};
    use tilejit_runtime::device::Policy;
    let ty = TensorType::new(tilejit_ir::DType::F32, Shape::new(&[5000]).unwrap());
    let mut g = Graph::new();
    let a = g.add(Op::Input { index: 0, ty }).unwrap();
    let y = g.add(Op::Unary(UnaryOp::Tanh, a)).unwrap();
    g.outputs.push(y);
    let p = tilejit_runtime::Program::compile(g).unwrap();
    let x = Array::from_vec(
        (0..5000)
            .map(|i| i as f32 / 500.0 - 5.0)
            .collect::<Vec<_>>(),
        &[5000],
    )
    .unwrap();
    let want = p.run_reference(std::slice::from_ref(&x), &[]).unwrap();
    for policy in [Policy::Fair, Policy::NewestFirst, Policy::Fifo] {
        tilejit_runtime::set_sim_policy(policy);
        assert_eq!(tilejit_runtime::sim_policy(), policy);
        let (out, report) = p.run_sim(std::slice::from_ref(&x), &[], false).unwrap();
        assert_eq!(report.policy, policy);
        assert_eq!(out, want, "{policy:?}");
    }
    assert_eq!(Policy::from_name("NEWEST"), Some(Policy::NewestFirst));
    assert_eq!(Policy::from_name("lifo"), None);
}

#[test]
fn many_threads_run_jit_calls_on_the_device_at_once() {
    let x = Tensor::randn(&[64, 300], 21);
    let (g, b) = (Tensor::randn(&[300], 22), Tensor::randn(&[300], 23));
    let want: Vec<f32> = with_mode(RunMode::Reference, || norm(&x, &g, &b).unwrap())
        .to_vec()
        .unwrap();
    std::thread::scope(|s| {
        for t in 0..8 {
            let (x, g, b, want) = (&x, &g, &b, &want);
            s.spawn(move || {
                for _ in 0..5 {
                    let got: Vec<f32> = with_mode(RunMode::Sim, || norm(x, g, b).unwrap())
                        .to_vec()
                        .unwrap();
                    assert_eq!(&got, want, "thread {t}");
                }
            });
        }
    });
}

/// Runs `f` on a thread and fails (instead of hanging the suite) if it has
/// not returned within `secs` seconds.
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what} did not finish within {secs} s"))
}

/// A zero-batch matmul runs in every mode and dtype and gives an empty
/// result (it faulted on Sim and in Verify: the device launched a tile of
/// an empty product).
#[test]
fn zero_batch_matmuls_run_everywhere() {
    for dtype in DType::ALL.into_iter().filter(|&d| d != DType::Bool) {
        let a = Tensor::zeros(&[0, 2, 3], dtype);
        let b = Tensor::zeros(&[0, 3, 4], dtype);
        for mode in [
            RunMode::Host,
            RunMode::Sim,
            RunMode::Verify,
            RunMode::Reference,
        ] {
            let y = with_mode(mode, || a.matmul(&b));
            let y = y
                .check()
                .unwrap_or_else(|e| panic!("{dtype:?} {mode:?}: {e}"));
            assert_eq!(y.shape(), &[0, 2, 4], "{dtype:?} {mode:?}");
        }
    }
}

/// An empty domain costs nothing: layer_norm over 2^40 rows of no columns
/// (it once looped over every empty row, ~80 minutes on the host) and 2^24
/// of them on Sim (28 s), each within seconds, with empty results; and a
/// sum over rows of no columns still gives its zeros.
#[test]
fn empty_domains_cost_nothing() {
    for (mode, rows) in [(RunMode::Host, 1usize << 40), (RunMode::Sim, 1 << 24)] {
        let shape = within(
            60,
            &format!("layer_norm [{rows}, 0] on {mode:?}"),
            move || {
                let x = Tensor::zeros(&[rows, 0], DType::F32);
                let g = Tensor::ones(&[0], DType::F32);
                let b = Tensor::zeros(&[0], DType::F32);
                // Fused into one kernel (eagerly, the row means alone would
                // need 4 TiB: an out-of-memory error, also quick).
                let f =
                    tilejit::jit_fn!(|x: &Tensor, g: &Tensor, b: &Tensor| x.layer_norm(g, b, 1e-5));
                let y = with_mode(mode, || f.call((&x, &g, &b)));
                let y = y.map_err(|e| e.to_string())?;
                y.check()
                    .map(|y| y.shape().to_vec())
                    .map_err(|e| e.to_string())
            },
        );
        assert_eq!(shape.unwrap(), [rows, 0], "{mode:?}");
    }
    for mode in [RunMode::Host, RunMode::Sim] {
        let s = with_mode(mode, || Tensor::zeros(&[5, 0], DType::F32).sum(-1, false));
        assert_eq!(s.to_vec::<f32>().unwrap(), [0.0; 5], "{mode:?}");
    }
}
