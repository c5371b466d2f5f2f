//! `tilejit::debug`: intermediates of jit calls and eager ops (op names,
//! the user's lines, values against hand values and the interpreter),
//! `first_nonfinite`, `step_to` at several stops, the debug program's own
//! cache, the normal program untouched, on Host, Sim, Verify and
//! Reference, on many threads, and a panic leaving no scope behind.

use tilejit::debug::{self, first_nonfinite, intermediates, step_to, Intermediate};
use tilejit::prelude::*;
use tilejit::ErrorKind;
use tilejit_tests::t32;

const MODES: [RunMode; 4] = [
    RunMode::Host,
    RunMode::Sim,
    RunMode::Verify,
    RunMode::Reference,
];

// The line of `d.log()` below, four lines down.
const LOG_LINE: u32 = line!() + 4;
#[jit]
fn log_mul(x: &Tensor, y: &Tensor) -> Tensor {
    let d = x - 1.0;
    let l = d.log();
    l * y
}
const SUB_LINE: u32 = LOG_LINE - 1;
const MUL_LINE: u32 = LOG_LINE + 1;

/// The same body, for tests that count its compiles (no other test calls it).
#[jit]
fn log_mul_counted(x: &Tensor, y: &Tensor) -> Tensor {
    (x - 1.0).log() * y
}

fn at(line: u32) -> String {
    format!("{}:{line}:", file!())
}

fn f32s(v: &Intermediate) -> Vec<f32> {
    v.value.to_vec::<f32>().unwrap()
}

/// Equal as bits, NaN equal to NaN.
fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// Distance in f32 ulps (NaN to NaN 0, else NaN to anything huge).
fn ulps(a: f32, b: f32) -> u64 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0
        } else {
            u64::MAX
        };
    }
    let key = |x: f32| {
        let b = x.to_bits() as i32;
        (if b < 0 { i32::MIN - b } else { b }) as i64
    };
    key(a).abs_diff(key(b))
}

/// `log(x - 1) * y` by hand, per step, in f64 rounded to f32.
fn hand(x: &[f32], y: &[f32]) -> [Vec<f32>; 3] {
    let sub: Vec<f32> = x.iter().map(|&v| v - 1.0).collect();
    let log: Vec<f32> = sub.iter().map(|&v| (v as f64).ln() as f32).collect();
    let mul: Vec<f32> = log.iter().zip(y).map(|(&l, &w)| l * w).collect();
    [sub, log, mul]
}

#[test]
fn first_nonfinite_names_log_and_its_line_in_every_mode() {
    let (xv, yv) = (
        vec![2.0f32, 0.5, 3.0, 1.0, 9.0],
        vec![1.0f32, 2.0, 3.0, 4.0, -1.0],
    );
    let (x, y) = (t32(&xv, &[5]), t32(&yv, &[5]));
    let want = hand(&xv, &yv);
    let (oracle, _) = with_mode(RunMode::Reference, || intermediates(|| log_mul(&x, &y)));
    let oracle = oracle.unwrap().to_vec::<f32>().unwrap();
    for mode in MODES {
        let (z, values) = with_mode(mode, || intermediates(|| log_mul(&x, &y)));
        let z = z.unwrap().to_vec::<f32>().unwrap();
        assert!(same(&z, &oracle), "{mode:?}: {z:?} vs {oracle:?}");
        let ops: Vec<&str> = values.iter().map(|v| v.op.as_str()).collect();
        assert_eq!(ops, ["sub", "log", "mul"], "{mode:?}");
        for (i, (v, line)) in values
            .iter()
            .zip([SUB_LINE, LOG_LINE, MUL_LINE])
            .enumerate()
        {
            assert_eq!(v.index, i);
            assert!(v.location.starts_with(&at(line)), "{mode:?}: {v}");
            assert_eq!(v.function.as_deref(), Some("log_mul"));
            assert_eq!(v.value.shape(), &[5]);
        }
        // Hand values: exact for sub and mul, log within an ulp or two.
        assert!(same(&f32s(&values[0]), &want[0]), "{mode:?}");
        for (&got, &w) in f32s(&values[1]).iter().zip(&want[1]) {
            assert!(ulps(got, w) <= 2, "{mode:?}: log {got} vs {w}");
        }
        assert!(same(&f32s(&values[2]), &z), "{mode:?}");
        let bad = first_nonfinite(&values).expect("a NaN was made");
        assert_eq!(bad.op, "log");
        assert_eq!(bad.index, 1);
        assert!(bad.location.starts_with(&at(LOG_LINE)), "{bad}");
        assert_eq!(bad.nonfinite_count(), 2, "log(-0.5) = NaN, log(0) = -inf");
        let line = bad.to_string();
        assert!(line.starts_with("#1 log f32[5] at "), "{line}");
        assert!(line.ends_with("in `log_mul`: 2 non-finite"), "{line}");
    }
}

#[test]
fn values_equal_the_reference_interpreter() {
    let x = Tensor::randn(&[37, 3], 1) + 1.0;
    let y = Tensor::randn(&[37, 3], 2);
    let (_, oracle) = with_mode(RunMode::Reference, || intermediates(|| log_mul(&x, &y)));
    for mode in [RunMode::Host, RunMode::Sim] {
        let (_, values) = with_mode(mode, || intermediates(|| log_mul(&x, &y)));
        assert_eq!(values.len(), oracle.len());
        for (v, o) in values.iter().zip(&oracle) {
            assert_eq!(
                (v.op.as_str(), v.location.as_str()),
                (o.op.as_str(), o.location.as_str())
            );
            let (a, b) = (f32s(v), f32s(o));
            for (&p, &q) in a.iter().zip(&b) {
                assert!(ulps(p, q) <= 2, "{mode:?} {v}: {p} vs {q}");
            }
        }
    }
}

#[test]
fn eager_ops_are_recorded_with_their_lines() {
    let x = t32(&[2.0, 0.5, 1.0], &[3]);
    for mode in [RunMode::Host, RunMode::Sim] {
        let (r, values) = with_mode(mode, || {
            intermediates(|| {
                let d = &x - 1.0;
                let l = d.log();
                (l.exp(), line!() - 1)
            })
        });
        let (r, log_line) = r;
        let ops: Vec<&str> = values.iter().map(|v| v.op.as_str()).collect();
        assert_eq!(ops, ["sub", "log", "exp"], "{mode:?}");
        assert!(values.iter().all(|v| v.function.is_none()));
        assert_eq!(f32s(&values[0]), [1.0, -0.5, 0.0]);
        assert_eq!(f32s(&values[1])[0], 0.0);
        let bad = first_nonfinite(&values).unwrap();
        assert_eq!((bad.op.as_str(), bad.index), ("log", 1));
        assert!(bad.location.starts_with(&at(log_line)), "{bad}");
        assert!(values[0].location.starts_with(&at(log_line - 1)));
        // exp(log 1) = 1; exp(NaN) NaN; exp(-inf) = 0.
        let r = r.to_vec::<f32>().unwrap();
        assert_eq!(r[0], 1.0);
        assert!(r[1].is_nan());
        assert_eq!(r[2], 0.0);
        assert!(same(&f32s(&values[2]), &r));
    }
}

#[test]
fn a_composite_op_records_each_node_on_its_line() {
    let x = Tensor::randn(&[4, 6], 3);
    let (s, values) = intermediates(|| x.softmax(-1));
    let line = line!() - 1;
    assert!(values.len() > 2, "{values:?}");
    assert!(values.iter().all(|v| v.location.starts_with(&at(line))));
    assert!(values.iter().any(|v| v.op == "exp"));
    assert!(first_nonfinite(&values).is_none());
    // The last value is the result.
    assert!(same(
        &f32s(values.last().unwrap()),
        &s.to_vec::<f32>().unwrap()
    ));
}

#[test]
fn jit_and_eager_values_share_one_order() {
    let (xv, yv) = (vec![1.5f32, 0.25], vec![2.0f32, 2.0]);
    let (x, y) = (t32(&xv, &[2]), t32(&yv, &[2]));
    let (z, values) = intermediates(|| {
        let e = x.exp();
        let z = log_mul(&e, &y).unwrap();
        z.abs()
    });
    let ops: Vec<&str> = values.iter().map(|v| v.op.as_str()).collect();
    assert_eq!(ops, ["exp", "sub", "log", "mul", "abs"]);
    let idx: Vec<usize> = values.iter().map(|v| v.index).collect();
    assert_eq!(idx, [0, 1, 2, 3, 4]);
    assert_eq!(values[0].function, None);
    assert_eq!(values[2].function.as_deref(), Some("log_mul"));
    assert!(first_nonfinite(&values).is_none());
    assert!(same(&f32s(&values[4]), &z.to_vec::<f32>().unwrap()));
}

#[test]
fn step_to_stops_after_n_ops() {
    let (xv, yv) = (vec![2.0f32, 0.5, 3.0], vec![1.0f32, 2.0, 3.0]);
    let (x, y) = (t32(&xv, &[3]), t32(&yv, &[3]));
    for mode in [RunMode::Host, RunMode::Sim] {
        let (_, all) = with_mode(mode, || intermediates(|| log_mul(&x, &y)));
        for n in [0usize, 1, 2, 3, 4, 100] {
            let mut result = None;
            let values = with_mode(mode, || step_to(n, || result = Some(log_mul(&x, &y))));
            assert_eq!(values.len(), n.min(3), "{mode:?} step_to({n})");
            for (v, a) in values.iter().zip(&all) {
                assert_eq!((v.op.as_str(), v.index), (a.op.as_str(), a.index));
                assert!(same(&f32s(v), &f32s(a)), "{mode:?} {v}");
            }
            match result.unwrap() {
                Ok(z) => {
                    assert!(n >= 3, "step_to({n}) ran the whole call");
                    assert!(same(&z.to_vec::<f32>().unwrap(), &f32s(&all[2])));
                }
                Err(e) => {
                    assert!(n < 3);
                    assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
                    let msg = e.to_string();
                    assert!(msg.contains(&format!("step_to` after {n} op(s)")), "{msg}");
                    assert!(msg.contains("log_mul"), "{msg}");
                }
            }
        }
    }
}

#[test]
fn step_to_stops_eager_ops_and_names_them() {
    let x = t32(&[1.0, 4.0, 9.0], &[3]);
    for n in [0usize, 1, 2, 3] {
        let mut outs = Vec::new();
        let mut lines = [0; 3];
        let values = step_to(n, || {
            let a = x.sqrt();
            let b = &a + 1.0;
            let c = -&b;
            lines = [line!() - 3, line!() - 2, line!() - 1];
            outs = vec![a, b, c];
        });
        assert_eq!(values.len(), n);
        let want = [
            vec![1.0f32, 2.0, 3.0],
            vec![2.0, 3.0, 4.0],
            vec![-2.0, -3.0, -4.0],
        ];
        for (i, t) in outs.iter().enumerate() {
            if i < n {
                assert_eq!(t.to_vec::<f32>().unwrap(), want[i]);
                assert_eq!(f32s(&values[i]), want[i]);
            } else {
                let e = t.check().unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Cancelled);
                // The first op past the stop names itself and its line;
                // later ones pass its error on.
                let msg = e.to_string();
                assert!(msg.contains("did not run"), "{msg}");
                let first = ["sqrt", "add", "neg"][n];
                assert!(
                    msg.contains(&format!("`{first}` at {}", at(lines[n]))),
                    "{msg}"
                );
            }
        }
    }
}

#[test]
fn step_to_inside_a_jit_call_after_eager_ops() {
    let (x, y) = (t32(&[0.5, 2.0], &[2]), t32(&[1.0, 1.0], &[2]));
    let mut result = None;
    let values = step_to(3, || {
        let e = x.exp(); // op 0
        result = Some(log_mul(&e, &y)); // ops 1 (sub) and 2 (log): stops inside
    });
    let ops: Vec<&str> = values.iter().map(|v| v.op.as_str()).collect();
    assert_eq!(ops, ["exp", "sub", "log"]);
    let e = result.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cancelled);
    // exp(0.5) - 1, ln of that.
    let want = ((0.5f64).exp() as f32 - 1.0) as f64;
    assert!((f32s(&values[2])[0] as f64 - want.ln()).abs() < 1e-6);
}

#[test]
fn a_second_call_in_a_scope_traces_and_compiles_nothing() {
    let (x, y) = (t32(&[2.0, 0.5, 3.0], &[3]), t32(&[1.0, 2.0, 3.0], &[3]));
    let f = log_mul_counted::jit();
    // The normal program first.
    let z = log_mul_counted(&x, &y).unwrap().to_vec::<f32>().unwrap();
    let normal = f.stats();
    let handlers = f.handlers();
    assert_eq!(handlers.len(), 1);
    let kernels = handlers[0].program.host().kernels().kernels.len();
    assert_eq!(kernels, 1, "sub, log and mul fuse into one kernel");
    assert_eq!(f.debug_stats(), debug::DebugStats::default());

    let (_, first) = intermediates(|| log_mul_counted(&x, &y));
    assert_eq!(
        f.debug_stats(),
        debug::DebugStats {
            traces: 1,
            compiles: 1
        }
    );
    let (_, second) = intermediates(|| log_mul_counted(&x, &y));
    assert_eq!(
        f.debug_stats(),
        debug::DebugStats {
            traces: 1,
            compiles: 1
        }
    );
    assert_eq!(first.len(), 3);
    for (a, b) in first.iter().zip(&second) {
        assert!(same(&f32s(a), &f32s(b)));
    }
    // A step_to stop inside the call is one more program, once.
    step_to(1, || log_mul_counted(&x, &y).ok());
    step_to(1, || log_mul_counted(&x, &y).ok());
    assert_eq!(
        f.debug_stats(),
        debug::DebugStats {
            traces: 1,
            compiles: 2
        }
    );
    // Another signature is another trace.
    intermediates(|| log_mul_counted(&t32(&[2.0], &[1]), &t32(&[1.0], &[1])).ok());
    assert_eq!(
        f.debug_stats(),
        debug::DebugStats {
            traces: 2,
            compiles: 3
        }
    );

    // The normal program is untouched: no new trace or build, same kernels,
    // same results.
    let again = log_mul_counted(&x, &y).unwrap().to_vec::<f32>().unwrap();
    assert!(same(&again, &z));
    let after = f.stats();
    assert_eq!(
        (after.traces, after.builds, after.misses),
        (normal.traces, normal.builds, normal.misses)
    );
    assert_eq!(after.hits, normal.hits + 1);
    let handlers = f.handlers();
    assert_eq!(handlers.len(), 1);
    assert_eq!(handlers[0].program.host().kernels().kernels.len(), kernels);
}

#[jit]
fn inner_step(x: &Tensor) -> Tensor {
    x.sqrt()
}
const INNER_LINE: u32 = line!() - 2;

#[jit]
fn outer_step(x: &Tensor) -> Tensor {
    let s = inner_step(x)?;
    s * 2.0
}
const OUTER_MUL_LINE: u32 = line!() - 2;

#[test]
fn an_inlined_call_keeps_its_own_lines() {
    let x = t32(&[4.0, -1.0], &[2]);
    let (z, values) = intermediates(|| outer_step(&x));
    let z = z.unwrap().to_vec::<f32>().unwrap();
    assert_eq!(z[0], 4.0);
    let ops: Vec<&str> = values.iter().map(|v| v.op.as_str()).collect();
    assert_eq!(ops, ["sqrt", "mul"]);
    assert!(
        values[0].location.starts_with(&at(INNER_LINE)),
        "{}",
        values[0]
    );
    assert!(
        values[1].location.starts_with(&at(OUTER_MUL_LINE)),
        "{}",
        values[1]
    );
    assert_eq!(values[0].function.as_deref(), Some("outer_step"));
    let bad = first_nonfinite(&values).unwrap();
    assert_eq!(bad.op, "sqrt", "sqrt(-1) is where the NaN comes from");
}

#[test]
fn folded_nodes_and_repeated_outputs_still_have_values() {
    // `x * 1.0` folds to `x`; `a + 0` and the CSE'd twin fold or merge;
    // the result is itself a computed node (listed as an output twice).
    let f = tilejit::jit_fn!(|x: &Tensor| {
        let one = x * 1.0;
        let a = x.exp();
        let b = x.exp();
        (&one + &a) + &b
    });
    let xv = [0.0f32, 1.0, -2.0];
    let x = t32(&xv, &[3]);
    for mode in [RunMode::Host, RunMode::Sim] {
        let (z, values) = with_mode(mode, || intermediates(|| f.call(&x)));
        let z = z.unwrap().to_vec::<f32>().unwrap();
        let ops: Vec<&str> = values.iter().map(|v| v.op.as_str()).collect();
        assert_eq!(ops, ["mul", "exp", "exp", "add", "add"], "{mode:?}");
        assert_eq!(f32s(&values[0]), xv, "x * 1 is x");
        assert!(same(&f32s(&values[1]), &f32s(&values[2])));
        assert!(same(&f32s(&values[4]), &z));
        for (i, &v) in xv.iter().enumerate() {
            let e = (v as f64).exp() as f32;
            assert!((f32s(&values[1])[i] - e).abs() <= 2.0 * f32::EPSILON * e);
        }
    }
}

#[test]
fn sizes_and_dtypes() {
    // Size 0 and 1, odd and large; f64, i32 and bool values.
    for n in [0usize, 1, 7, 100_003] {
        let xv: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
        let yv = vec![1.0f32; n];
        let (x, y) = (t32(&xv, &[n]), t32(&yv, &[n]));
        let want = hand(&xv, &yv);
        let (z, values) = intermediates(|| log_mul(&x, &y));
        assert_eq!(z.unwrap().shape(), &[n]);
        assert_eq!(values.len(), 3);
        assert!(same(&f32s(&values[0]), &want[0]), "n = {n}");
        for (&got, &w) in f32s(&values[2]).iter().zip(&want[2]) {
            assert!(ulps(got, w) <= 2, "n = {n}: {got} vs {w}");
        }
        // x = 0 gives log(-1) = NaN, x = 1 gives -inf: from n = 1 on.
        assert_eq!(
            first_nonfinite(&values).map(|v| v.op.as_str()),
            (n > 0).then_some("log")
        );
    }
    let x = Tensor::from_vec(vec![1.0f64, -1.0], &[2]).unwrap();
    let (_, values) = intermediates(|| x.sqrt());
    assert_eq!(values[0].value.dtype(), DType::F64);
    assert!(values[0].value.to_vec::<f64>().unwrap()[1].is_nan());
    let i = Tensor::from_vec(vec![3i32, -4], &[2]).unwrap();
    let (_, values) = intermediates(|| {
        let a = &i * 2;
        a.lt(&i)
    });
    let ops: Vec<&str> = values.iter().map(|v| v.op.as_str()).collect();
    assert_eq!(ops, ["mul", "lt"]);
    assert_eq!(values[0].value.to_vec::<i32>().unwrap(), [6, -8]);
    assert_eq!(values[1].value.to_vec::<bool>().unwrap(), [false, true]);
    assert!(
        first_nonfinite(&values).is_none(),
        "integers and bools are never non-finite"
    );
}

#[test]
fn nested_scopes_record_in_both() {
    let x = t32(&[1.0, 4.0], &[2]);
    let ((inner, inner_values), outer_values) = intermediates(|| {
        let a = x.sqrt();
        intermediates(|| -(&a + 1.0))
    });
    assert_eq!(inner.to_vec::<f32>().unwrap(), [-2.0, -3.0]);
    let ops = |v: &[Intermediate]| {
        v.iter()
            .map(|v| (v.op.clone(), v.index))
            .collect::<Vec<_>>()
    };
    assert_eq!(ops(&inner_values), [("add".into(), 0), ("neg".into(), 1)]);
    assert_eq!(
        ops(&outer_values),
        [("sqrt".into(), 0), ("add".into(), 1), ("neg".into(), 2)]
    );
    // An outer stop holds inside an inner scope too.
    let mut inner = Vec::new();
    let outer = step_to(2, || {
        let a = x.sqrt();
        inner = intermediates(|| {
            let b = &a + 1.0;
            -&b
        })
        .1;
    });
    assert_eq!(outer.len(), 2);
    assert_eq!(inner.len(), 1);
}

#[test]
fn a_panic_leaves_no_scope_behind() {
    let x = t32(&[2.0, 3.0], &[2]);
    let y = t32(&[1.0, 1.0], &[2]);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        intermediates(|| {
            let _ = x.exp();
            panic!("boom");
        })
    }));
    assert!(caught.is_err());
    // No scope: eager ops and jit calls take their normal paths.
    let f = log_mul::jit();
    let before = f.debug_stats();
    let (_, after_panic) = intermediates(|| x.exp());
    assert_eq!(after_panic.len(), 1, "a fresh scope sees only its own op");
    log_mul(&x, &y).unwrap();
    assert_eq!(f.debug_stats(), before);
    // A panic in a jit body inside a scope is the call's error; the scope goes on.
    let g = tilejit::jit_fn!(|x: &Tensor| -> Tensor {
        if x.numel() > 0 {
            panic!("body panics");
        }
        x.exp()
    });
    let (r, values) = intermediates(|| {
        let e = g.call(&x).unwrap_err();
        (e, -&x)
    });
    assert_eq!(r.0.kind(), ErrorKind::Panic);
    assert_eq!(values.len(), 1);
    assert_eq!(values[0].op, "neg");
}

#[test]
fn threads_each_have_their_own_scope() {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                s.spawn(move || {
                    let mode = if t % 2 == 0 {
                        RunMode::Host
                    } else {
                        RunMode::Sim
                    };
                    for round in 0..5 {
                        let v = (t * 10 + round) as f32;
                        let x = t32(&[v + 2.0, 0.5], &[2]);
                        let y = t32(&[1.0, 1.0], &[2]);
                        if round % 2 == 0 {
                            let (z, values) = with_mode(mode, || intermediates(|| log_mul(&x, &y)));
                            let z = z.unwrap().to_vec::<f32>().unwrap();
                            assert_eq!(values.len(), 3);
                            assert_eq!(f32s(&values[0])[0], v + 1.0);
                            assert!(same(&f32s(&values[2]), &z));
                            assert_eq!(first_nonfinite(&values).unwrap().op, "log");
                            let n = 1 + (t + round) % 3;
                            let stopped = with_mode(mode, || step_to(n, || log_mul(&x, &y).ok()));
                            assert_eq!(stopped.len(), n);
                        } else {
                            // A normal call beside the scoped ones.
                            let z = log_mul(&x, &y).unwrap().to_vec::<f32>().unwrap();
                            assert!((z[0] - (v + 1.0).ln()).abs() < 1e-5);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}

#[test]
fn a_body_run_eagerly_or_jitted_gives_the_same_values() {
    fn body(x: &Tensor, w: &Tensor) -> Tensor {
        let h = x.matmul(w);
        let s = h.softmax(-1);
        (s * 2.0 - 1.0).log()
    }
    let f = tilejit::jit_fn!(|x: &Tensor, w: &Tensor| body(x, w));
    let x = Tensor::randn(&[5, 3], 11);
    let w = Tensor::randn(&[3, 4], 12);
    for mode in [RunMode::Host, RunMode::Sim] {
        let (a, eager) = with_mode(mode, || intermediates(|| body(&x, &w)));
        let (b, jitted) = with_mode(mode, || intermediates(|| f.call((&x, &w))));
        let ops = |v: &[Intermediate]| {
            v.iter()
                .map(|v| (v.op.clone(), v.location.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(ops(&eager), ops(&jitted), "{mode:?}");
        assert!(eager.iter().any(|v| v.op == "matmul"));
        // log(2s - 1) is NaN where softmax gave less than 1/2.
        assert_eq!(first_nonfinite(&eager).unwrap().op, "log");
        assert_eq!(first_nonfinite(&jitted).unwrap().op, "log");
        for (e, j) in eager.iter().zip(&jitted) {
            for (&p, &q) in f32s(e).iter().zip(&f32s(j)) {
                assert!(
                    ulps(p, q) <= 8 || (p - q).abs() < 1e-6,
                    "{mode:?} {e}: {p} vs {q}"
                );
            }
        }
        assert_eq!(a.shape(), b.unwrap().shape());
    }
}

#[test]
fn device_tensors_are_debugged_where_they_live() {
    let sim = tilejit::Device::sim();
    let (xv, yv) = (vec![2.0f32, 0.5, 3.0], vec![1.0f32, 2.0, 3.0]);
    let (x, y) = (t32(&xv, &[3]), t32(&yv, &[3]));
    let (_, host) = intermediates(|| log_mul(&x, &y));
    let (xd, yd) = (x.to(&sim).unwrap(), y.to(&sim).unwrap());
    let (z, values) = intermediates(|| {
        let z = log_mul(&xd, &yd).unwrap();
        (z.exp(), line!())
    });
    let (z, exp_line) = z;
    assert_eq!(z.device(), sim);
    let ops: Vec<&str> = values.iter().map(|v| v.op.as_str()).collect();
    assert_eq!(ops, ["sub", "log", "mul", "exp"]);
    assert!(values.iter().all(|v| v.value.device() == sim));
    for (d, h) in values.iter().zip(&host) {
        assert!(same(&f32s(d), &f32s(h)), "{d}");
    }
    assert_eq!(first_nonfinite(&values).unwrap().op, "log");
    assert!(values[3].location.starts_with(&at(exp_line)));
    assert!(same(&f32s(&values[3]), &z.to_vec::<f32>().unwrap()));
    // A stop inside the call on device data.
    let first = step_to(1, || log_mul(&xd, &yd).ok());
    assert_eq!(first.len(), 1);
    assert_eq!(f32s(&first[0]), [1.0, -0.5, 2.0]);
}

#[test]
fn placed_calls_are_debugged_under_their_placement() {
    let placement = tilejit::Placement::new(&[tilejit::Device::sim(), tilejit::Device::host()]);
    let (x, y) = (t32(&[2.0, 0.5, 3.0], &[3]), t32(&[1.0, 2.0, 3.0], &[3]));
    let (_, host) = intermediates(|| log_mul(&x, &y));
    let (z, values) = tilejit::with_placement(&placement, || {
        intermediates(|| {
            let z = log_mul(&x, &y).unwrap();
            z.abs()
        })
    });
    let ops: Vec<&str> = values.iter().map(|v| v.op.as_str()).collect();
    assert_eq!(ops, ["sub", "log", "mul", "abs"]);
    for (p, h) in values.iter().zip(&host) {
        assert!(same(&f32s(p), &f32s(h)), "{p}");
    }
    assert_eq!(first_nonfinite(&values).unwrap().op, "log");
    assert!(same(&f32s(&values[3]), &z.to_vec::<f32>().unwrap()));
}
