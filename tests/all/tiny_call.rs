//! The short way through one-kernel programs (`Program::run_one`, what a
//! warm `x + y` takes): which programs have it, that it computes what the
//! reference interpreter does for every dtype and size, and that
//! observers, stop limits, bad inputs, gathers out of range and threads
//! behave as on the general path.

use std::sync::{Arc, Mutex};
use tilejit::prelude::*;
use tilejit::{with_cancel, with_hooks, CancelToken, DType, ErrorKind, Hooks};
use tilejit_ir::Array;
use tilejit_runtime::Program;

#[jit]
fn add(x: &Tensor, y: &Tensor) -> Tensor {
    x + y
}

#[jit]
fn scaled(x: &Tensor, s: f32) -> Tensor {
    x * s
}

#[jit]
fn project(x: &Tensor, w: &Tensor) -> Tensor {
    x.matmul(w).relu()
}

#[jit]
fn pick(x: &Tensor, i: &Tensor) -> Tensor {
    x.index_select(0, i) * 2.0
}

/// The program `f` holds for these inputs (tests share functions and run
/// at once, so not just the latest).
fn program(f: &tilejit::JitFunction, ts: &[&Tensor]) -> Arc<Program> {
    let types: Vec<_> = arrays(ts).iter().map(Array::ty).collect();
    f.handlers()
        .into_iter()
        .find(|h| h.program.host().kernels().inputs == types)
        .unwrap()
        .program
}

fn arrays(ts: &[&Tensor]) -> Vec<Array> {
    ts.iter().map(|t| t.to_array().unwrap()).collect()
}

/// `n` values of `dtype` from a seed, small enough not to overflow i8.
fn values(dtype: DType, shape: &[usize], seed: u64) -> Tensor {
    let t = Tensor::randn(shape, seed) * 20.0;
    t.cast(dtype)
}

#[test]
fn one_kernel_programs_take_the_short_way_and_others_do_not() {
    let (x, y) = (Tensor::randn(&[16], 1), Tensor::randn(&[16], 2));
    add(&x, &y).unwrap();
    let short = |f: &tilejit::JitFunction, ts: &[&Tensor]| {
        let a = arrays(ts);
        let refs: Vec<&Array> = a.iter().collect();
        program(f, ts).run_one(&refs).is_some()
    };
    assert!(short(add::jit(), &[&x, &y]));
    // A param, a matmul, halves, or a kernel big enough to split across
    // threads: the general path.
    scaled(&x, 2.0).unwrap();
    assert!(!short(scaled::jit(), &[&x]));
    let w = Tensor::randn(&[16, 4], 3);
    let x2 = Tensor::randn(&[2, 16], 4);
    project(&x2, &w).unwrap();
    assert!(!short(project::jit(), &[&x2, &w]));
    let h = x.cast(DType::F16);
    add(&h, &h).unwrap();
    assert!(!short(add::jit(), &[&h, &h]));
    let big = Tensor::randn(&[1 << 17], 5);
    add(&big, &big).unwrap();
    assert!(!short(add::jit(), &[&big, &big]));
}

#[test]
fn the_short_way_equals_the_reference_for_every_dtype_and_size() {
    let dtypes = [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::I8,
    ];
    for dtype in dtypes {
        for (a, b) in [
            (vec![0], vec![0]),
            (vec![1], vec![1]),
            (vec![17], vec![17]),
            (vec![3, 1], vec![1, 5]),
            (vec![2, 3, 4], vec![4]),
        ] {
            let (x, y) = (values(dtype, &a, 7), values(dtype, &b, 8));
            let got = add(&x, &y).unwrap();
            let p = program(add::jit(), &[&x, &y]);
            let inputs = arrays(&[&x, &y]);
            let refs: Vec<&Array> = inputs.iter().collect();
            // An empty result launches nothing: the general path.
            let empty = got.to_array().unwrap().shape().numel() == 0;
            assert_eq!(p.run_one(&refs).is_some(), !empty, "{dtype:?} {a:?} {b:?}");
            let want = p.run_reference(&inputs, &[]).unwrap().remove(0);
            assert_eq!(got.to_array().unwrap(), want, "{dtype:?} {a:?} {b:?}");
            // Repeated calls (the short way each time) give the same.
            for _ in 0..3 {
                assert_eq!(add(&x, &y).unwrap().to_array().unwrap(), want);
            }
        }
    }
    // Hand-checked: wrapping u8 arithmetic.
    let x = Tensor::from_vec(vec![200u8, 1, 255], &[3]).unwrap();
    let y = Tensor::from_vec(vec![100u8, 2, 1], &[3]).unwrap();
    assert_eq!(add(&x, &y).unwrap().to_vec::<u8>().unwrap(), [44, 3, 0]);
}

#[test]
fn bad_inputs_to_run_one_are_errors() {
    let (x, y) = (Tensor::randn(&[4], 1), Tensor::randn(&[4], 2));
    add(&x, &y).unwrap();
    let p = program(add::jit(), &[&x, &y]);
    let good = arrays(&[&x, &y]);
    let other = arrays(&[&Tensor::randn(&[2, 2], 3), &y]);
    let cases: [Vec<&Array>; 3] = [
        vec![&good[0]],
        vec![&other[0], &other[1]],
        vec![&good[0], &good[1], &good[1]],
    ];
    for inputs in cases {
        let e = p.run_one(&inputs).unwrap().unwrap_err().to_string();
        assert!(e.contains("expected"), "{e}");
    }
}

#[test]
fn observers_see_the_kernel_and_limits_stop_it() {
    // The short way is the host's (Verify would add the device's kernel).
    let _host = tilejit::mode::scoped_host();
    let (x, y) = (Tensor::randn(&[8], 1), Tensor::randn(&[8], 2));
    let want = add(&x, &y).unwrap().to_vec::<f32>().unwrap();
    let seen = Arc::new(Mutex::new(0));
    let s = seen.clone();
    let hooks = Hooks::new().after(move |_| *s.lock().unwrap() += 1);
    let got = with_hooks(&hooks, || add(&x, &y)).unwrap();
    assert_eq!(got.to_vec::<f32>().unwrap(), want);
    assert_eq!(*seen.lock().unwrap(), 1);
    let token = CancelToken::new();
    token.cancel();
    let e = with_cancel(&token, || add(&x, &y)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
    assert_eq!(add(&x, &y).unwrap().to_vec::<f32>().unwrap(), want);
}

#[test]
fn a_gather_out_of_range_on_the_short_way_names_the_call() {
    let x = Tensor::from_vec((0..12).map(|v| v as f32).collect(), &[3, 4]).unwrap();
    let ok = Tensor::from_vec(vec![2i64, 0], &[2]).unwrap();
    let got = pick(&x, &ok).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(got, [16.0, 18.0, 20.0, 22.0, 0.0, 2.0, 4.0, 6.0]);
    let inputs = arrays(&[&x, &ok]);
    let refs: Vec<&Array> = inputs.iter().collect();
    assert!(program(pick::jit(), &[&x, &ok]).run_one(&refs).is_some());
    let bad = Tensor::from_vec(vec![0i64, 3], &[2]).unwrap();
    let line = line!() + 1;
    let e = pick(&x, &bad).unwrap_err();
    let msg = e.to_string();
    assert_eq!(e.code(), 1, "{msg}");
    assert!(
        msg.contains("out of range") && msg.contains("`pick`"),
        "{msg}"
    );
    assert!(msg.contains(&format!("tiny_call.rs:{line}:")), "{msg}");
}

#[test]
fn repeated_calls_count_every_hit() {
    // Its own function: tests run in parallel.
    #[jit]
    fn sub(x: &Tensor, y: &Tensor) -> Tensor {
        x - y
    }
    let (x, y) = (Tensor::randn(&[5], 1), Tensor::randn(&[5], 2));
    sub(&x, &y).unwrap();
    let before = sub::jit().stats().hits;
    for _ in 0..200 {
        sub(&x, &y).unwrap();
    }
    assert_eq!(sub::jit().stats().hits - before, 200);
    assert_eq!(sub::jit().handlers()[0].hits, 200);
}

#[test]
fn threads_share_tiny_programs_and_trade_their_outputs() {
    let x = Tensor::randn(&[16], 1);
    let y = Tensor::randn(&[16], 2);
    let want = add(&x, &y).unwrap().to_vec::<f32>().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Tensor>();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let tx = tx.clone();
            let (x, y, want) = (&x, &y, &want);
            s.spawn(move || {
                for i in 0..2000 {
                    let z = add(x, y).unwrap();
                    assert_eq!(&z.to_vec::<f32>().unwrap(), want);
                    // Some outputs are dropped on another thread.
                    if i % 3 == 0 {
                        tx.send(z).unwrap();
                    }
                }
            });
        }
        drop(tx);
        for z in rx {
            assert_eq!(z.to_vec::<f32>().unwrap(), want);
        }
    });
}
