//! Placement across devices (`with_placement`): kernels on the first
//! device that can run them, errors instead of silent fallback, copies
//! only where values cross, the report, and Verify on placed programs.

use tilejit::prelude::*;
use tilejit::{count_transfers, with_placement, Device, Error, Placement, PlacementReport};

/// A sum of many inputs: fused into one kernel with more loads than the
/// device's vector unit has UB slots, so Sim cannot run it.
#[jit]
fn wide_sum(xs: &[Tensor]) -> Tensor {
    let mut acc = xs[0].clone();
    for x in &xs[1..] {
        acc = acc + x;
    }
    acc
}

/// The wide sum (host only), then a matmul and softmax (Sim can).
#[jit]
fn wide_then_project(xs: &[Tensor], w: &Tensor) -> Tensor {
    wide_sum(xs).unwrap().matmul(w).softmax(-1)
}

const WIDE: usize = 40;

fn args(rows: usize, cols: usize) -> (Vec<Tensor>, Tensor) {
    let xs = (0..WIDE)
        .map(|i| Tensor::randn(&[rows, cols], i as u64))
        .collect();
    (xs, Tensor::randn(&[cols, 6], 99))
}

/// The unplaced call on the host, whatever `TILEJIT_RUN_MODE` says (Sim,
/// and so Verify, cannot run the wide sum).
fn on_host(xs: &[Tensor], w: &Tensor) -> Tensor {
    with_mode(RunMode::Host, || wide_then_project(xs, w).unwrap())
}

fn close(a: &Tensor, b: &Tensor) {
    let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "{x} vs {y}");
    }
}

#[test]
fn kernels_go_to_the_first_device_that_can_run_them() {
    let (xs, w) = args(5, 9);
    let want = on_host(&xs, &w);
    let sim_first = Placement::new(&[Device::sim(), Device::host()]).allow_fallback(true);
    // Host mode: Verify would also copy the result back to compare it.
    let (y, copies) = with_mode(RunMode::Host, || {
        count_transfers(|| with_placement(&sim_first, || wide_then_project(&xs, &w).unwrap()))
    });
    assert_eq!(y.device(), Device::sim());
    close(&y, &want);
    let placed = wide_then_project::jit().last_placement().unwrap();
    assert_eq!(placed.len(), 3, "{}", PlacementReport(&placed));
    assert_eq!(placed[0].device, Device::host());
    assert!(
        placed[0].reason.contains("sim cannot run it")
            && placed[0].reason.contains("too many registers"),
        "{}",
        placed[0].reason
    );
    // The matmul and the softmax after it.
    for p in &placed[1..] {
        assert_eq!((&p.device, p.reason.as_str()), (&Device::sim(), ""));
    }
    // What crossed: w and the sum to the device for the matmul (whose
    // product the softmax reads there); the result, made on the first
    // device, stays there.
    let (sum_bytes, w_bytes) = (4 * 5 * 9, 4 * 9 * 6);
    assert_eq!(
        copies.to_device_bytes,
        (sum_bytes + w_bytes) as u64,
        "{copies}"
    );
    assert_eq!(copies.to_host_bytes, 0, "{copies}");
    let table = PlacementReport(&placed).to_string();
    assert!(
        table.contains("device") && table.contains("first choice"),
        "{table}"
    );

    // Host first: everything on the host, no copies.
    let host_first = Placement::new(&[Device::host(), Device::sim()]);
    let (y, copies) =
        count_transfers(|| with_placement(&host_first, || wide_then_project(&xs, &w).unwrap()));
    assert_eq!(copies, Default::default());
    assert_eq!(y.device(), Device::host());
    close(&y, &want);
    let placed = wide_then_project::jit().last_placement().unwrap();
    assert!(placed
        .iter()
        .all(|p| p.device == Device::host() && p.reason.is_empty()));
}

#[test]
fn without_fallback_an_unrunnable_kernel_is_an_error_naming_it() {
    let (xs, w) = args(3, 4);
    let sim_only = Placement::new(&[Device::sim(), Device::host()]);
    let line = line!() + 1;
    let err = with_placement(&sim_only, || wide_then_project(&xs, &w)).unwrap_err();
    assert!(matches!(err, Error::Placement { .. }), "{err:?}");
    assert_eq!(err.code(), 4);
    let msg = err.to_string();
    for part in [
        "kernel `add`",
        "cannot run on sim",
        "too many registers",
        "allows no fallback",
    ] {
        assert!(msg.contains(part), "{part}: {msg}");
    }
    assert!(msg.contains(&format!("placement.rs:{line}")), "{msg}");
    // Fallback on but no other device listed: still an error.
    let only_sim = Placement::new(&[Device::sim()]).allow_fallback(true);
    let msg = with_placement(&only_sim, || wide_sum(&xs))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("sim cannot run it"), "{msg}");
    let none = Placement::new(&[]);
    let msg = with_placement(&none, || wide_sum(&xs))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("lists no device"), "{msg}");
}

#[test]
fn verify_mode_checks_a_placed_program_against_the_host() {
    let (xs, w) = args(7, 5);
    let sim_first = Placement::new(&[Device::sim(), Device::host()]).allow_fallback(true);
    let y = with_mode(RunMode::Verify, || {
        with_placement(&sim_first, || wide_then_project(&xs, &w).unwrap())
    });
    close(&y, &on_host(&xs, &w));
    assert!(wide_then_project::jit().last_verify().is_some());
}

#[test]
fn eager_ops_and_mixed_arguments_under_a_placement() {
    let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
    let b = Tensor::from_vec(vec![0.5f32, 0.5, 0.5], &[3])
        .unwrap()
        .to(&Device::sim())
        .unwrap();
    // Without a placement, mixing devices is an error ...
    assert!((&a + &b).to_vec::<f32>().is_err());
    // ... with one, the operands move to where the op runs.
    let sim_first = Placement::new(&[Device::sim(), Device::host()]);
    let c = with_placement(&sim_first, || &a + &b);
    assert_eq!(c.device(), Device::sim());
    assert_eq!(c.to_vec::<f32>().unwrap(), [1.5, 2.5, 3.5]);
    let host_first = Placement::new(&[Device::host()]);
    let d = with_placement(&host_first, || (&a * &b).exp());
    assert_eq!(d.device(), Device::host());
    assert_eq!(
        d.to_vec::<f32>().unwrap(),
        [0.5f32.exp(), 1f32.exp(), 1.5f32.exp()]
    );
    // Scopes end with their closure, on panic too.
    let r = std::panic::catch_unwind(|| with_placement(&sim_first, || panic!("boom")));
    assert!(r.is_err());
    assert!((&a + &b).to_vec::<f32>().is_err());
}

#[test]
fn placed_calls_from_many_threads() {
    let (xs, w) = args(4, 8);
    let want = on_host(&xs, &w);
    let sim_first = Placement::new(&[Device::sim(), Device::host()]).allow_fallback(true);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..3 {
                    let y = with_placement(&sim_first, || wide_then_project(&xs, &w).unwrap());
                    close(&y, &want);
                }
            });
        }
    });
}
