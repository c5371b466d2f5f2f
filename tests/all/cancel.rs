//! Stopping calls: a cancel token set from another thread, or a deadline,
//! stops a running jit call on Host (between kernels and parallel chunks)
//! and on Sim (running tasks stop); the call fails with code 8, and the
//! same call without limits then runs and gives the right result.

use std::time::Duration;
use tilejit::prelude::*;
use tilejit::{with_cancel, with_deadline, CancelToken, ErrorKind};

/// Twenty matmul + tanh steps: twenty kernels of real work.
#[jit]
fn deep(x: &Tensor, w: &Tensor) -> Tensor {
    let mut y = x.clone();
    for _ in 0..20 {
        y = y.matmul(w).tanh();
    }
    y
}

fn assert_stopped<T: std::fmt::Debug>(r: tilejit::Result<T>, why: &str) {
    let e = r.expect_err("the call should have been stopped");
    assert_eq!((e.kind(), e.code()), (ErrorKind::Cancelled, 8), "{e}");
    assert!(e.to_string().contains(why), "expected `{why}` in: {e}");
}

/// Inputs for `deep` that keep values in range: Host takes ~0.2 s at
/// n = 512 on a 2-core machine, Sim ~0.4 s at n = 256 (debug build), so
/// the limits below stop them with a margin of 20x.
fn inputs(n: usize) -> (Tensor, Tensor) {
    let scale = 1.0 / (n as f64).sqrt();
    (Tensor::randn(&[n, n], 1), Tensor::randn(&[n, n], 2) * scale)
}

#[test]
fn a_deadline_stops_a_running_call_and_the_next_call_runs() {
    for (mode, n, limit) in [
        (RunMode::Host, 512, Duration::from_millis(10)),
        (RunMode::Sim, 256, Duration::from_millis(20)),
    ] {
        let (x, w) = inputs(n);
        // Compiled first, so the deadline falls inside the run itself.
        let want = with_mode(mode, || deep(&x, &w)).unwrap();
        let r = with_mode(mode, || with_deadline(limit, || deep(&x, &w)));
        // Sim hands the time left to the launch as its timeout.
        assert_stopped(
            r,
            if mode == RunMode::Host {
                "ran past its deadline"
            } else {
                "ran past its"
            },
        );
        // Nothing is left half-done: the same call runs again, unlimited.
        let again = with_mode(mode, || deep(&x, &w)).unwrap();
        assert_eq!(
            again.to_vec::<f32>().unwrap(),
            want.to_vec::<f32>().unwrap(),
            "{mode:?}"
        );
    }
}

#[test]
fn a_token_cancelled_from_another_thread_stops_host_and_sim_calls() {
    for (mode, n) in [(RunMode::Host, 512), (RunMode::Sim, 256)] {
        let (x, w) = inputs(n);
        with_mode(mode, || deep(&x, &w)).unwrap();
        let token = CancelToken::new();
        let canceller = {
            let token = token.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                token.cancel();
            })
        };
        let r = with_mode(mode, || with_cancel(&token, || deep(&x, &w)));
        canceller.join().unwrap();
        assert_stopped(r, "was cancelled");
        // A token stays cancelled: calls under it stop before they start,
        // eager ops too; outside it they run.
        assert_stopped(with_cancel(&token, || deep(&x, &w)), "was cancelled");
        assert_stopped(
            with_cancel(&token, || (&x + 1.0).to_vec::<f32>()),
            "was cancelled",
        );
        assert!(with_mode(mode, || deep(&x, &w)).is_ok());
    }
}

#[test]
fn nested_limits_combine_and_end_with_their_scope() {
    let x = Tensor::randn(&[64], 3);
    let outer = CancelToken::new();
    let inner = CancelToken::new();
    with_cancel(&outer, || {
        with_cancel(&inner, || {
            outer.cancel();
            assert_stopped((&x * 2.0).to_vec::<f32>(), "was cancelled");
        });
        with_deadline(Duration::from_secs(3600), || {
            assert_stopped((&x * 2.0).to_vec::<f32>(), "was cancelled");
        });
    });
    // Out of every scope: nothing stops the call, and a huge deadline is
    // no deadline rather than an overflow.
    assert!((&x * 2.0).to_vec::<f32>().is_ok());
    assert!(with_deadline(Duration::MAX, || (&x * 2.0).to_vec::<f32>()).is_ok());
    assert_stopped(
        with_deadline(Duration::ZERO, || (&x * 2.0).to_vec::<f32>()),
        "deadline",
    );
}
