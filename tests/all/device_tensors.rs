//! Tensors resident on the Sim device: `Tensor::to`, jit calls and eager
//! ops that run where their data is and return device tensors, chained
//! with no copies (counted), mixed-device errors, and device memory freed
//! when the last tensor drops (the memory report).

use tilejit::prelude::*;
use tilejit::{count_transfers, Device, Error};

#[jit]
fn shift_exp(x: &Tensor, b: &Tensor) -> Tensor {
    (x - b).exp()
}

#[jit]
fn row_norm(x: &Tensor) -> Tensor {
    let s = x.sum(-1, true);
    x / &s
}

/// The same two calls on host tensors, in Reference mode: the oracle.
fn chain_reference(x: &Tensor, b: &Tensor) -> Vec<f32> {
    with_mode(RunMode::Reference, || {
        row_norm(&shift_exp(x, b).unwrap()).unwrap()
    })
    .to_vec::<f32>()
    .unwrap()
}

fn inputs(rows: usize, cols: usize, seed: u64) -> (Tensor, Tensor) {
    let x = Tensor::randn(&[rows, cols], seed);
    let b = Tensor::rand(&[cols], seed + 1);
    (x, b)
}

#[test]
fn chained_jit_calls_on_device_tensors_copy_nothing_between_calls() {
    for (rows, cols) in [(1, 1), (3, 17), (64, 130)] {
        let (x, b) = inputs(rows, cols, 7);
        let want = chain_reference(&x, &b);
        let sim = Device::sim();
        let ((xd, bd), moved_in) = count_transfers(|| (x.to(&sim).unwrap(), b.to(&sim).unwrap()));
        assert_eq!(moved_in.to_device_bytes, 4 * (rows * cols + cols) as u64);
        assert_eq!(moved_in.to_host_bytes, 0);
        // First calls trace and compile; the counted calls after them run
        // on the device with no copy either way.
        let _ = row_norm(&shift_exp(&xd, &bd).unwrap()).unwrap();
        let (y, chained) = count_transfers(|| {
            let e = shift_exp(&xd, &bd).unwrap();
            assert_eq!(e.device(), sim);
            row_norm(&e).unwrap()
        });
        assert_eq!(chained, Default::default(), "{rows}x{cols}: {chained}");
        assert_eq!(y.device(), sim);
        assert_eq!(y.shape(), [rows, cols]);
        // Sim results equal the reference interpreter's bit for bit.
        let (got, read) = count_transfers(|| y.to_vec::<f32>().unwrap());
        assert_eq!(read.to_host_bytes, 4 * (rows * cols) as u64);
        assert_eq!(got, want, "{rows}x{cols}");
        // And the host computes them within a few ulp.
        let host = row_norm(&shift_exp(&x, &b).unwrap()).unwrap();
        assert_eq!(host.device(), Device::host());
        for (h, r) in host.to_vec::<f32>().unwrap().iter().zip(&want) {
            assert!(
                (h - r).abs() <= 4.0 * f32::EPSILON * r.abs().max(1e-30),
                "{h} vs {r}"
            );
        }
    }
}

#[test]
fn eager_ops_on_device_tensors_run_there_and_take_literals() {
    let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.5, 0.0], &[2, 2]).unwrap();
    let xd = x.to(&Device::sim()).unwrap();
    let (y, copies) = count_transfers(|| ((&xd * 2.0) + &xd).relu().sum(-1, false));
    assert_eq!(y.device(), Device::sim());
    // The literal is a rank-0 host tensor copied in with the op: 4 bytes.
    assert_eq!(copies.to_host_bytes, 0);
    assert!(copies.to_device_bytes <= 8, "{copies}");
    assert_eq!(y.to_vec::<f32>().unwrap(), [3.0, 10.5]);
    let not_one = y.item::<f32>().unwrap_err().to_string();
    assert!(not_one.contains("`item`"), "{not_one}");
    let back = y.to(&Device::host()).unwrap();
    assert_eq!(back.device(), Device::host());
    assert_eq!(back.to_vec::<f32>().unwrap(), [3.0, 10.5]);
    assert_eq!(format!("{y}"), format!("{back}"));
    assert!(format!("{y:?}").contains("sim f32[2]"), "{y:?}");
}

#[test]
fn every_dtype_round_trips_bit_exact() {
    let sim = Device::sim();
    for n in [0usize, 1, 33, 1000] {
        let f = Tensor::randn(&[n], n as u64);
        for dtype in DType::ALL {
            let t = f.cast(dtype);
            let back = t.to(&sim).unwrap().to(&Device::host()).unwrap();
            assert_eq!(back.dtype(), dtype);
            assert_eq!(back.shape(), [n]);
            let (a, b) = (t.to_array().unwrap(), back.to_array().unwrap());
            assert_eq!(a.buffer(), b.buffer(), "{dtype} [{n}]");
        }
    }
}

#[test]
fn mixed_devices_are_an_error_naming_each_argument() {
    let (x, b) = inputs(2, 3, 1);
    let xd = x.to(&Device::sim()).unwrap();
    let line = line!() + 1;
    let err = shift_exp(&xd, &b).unwrap_err();
    assert_eq!(err.code(), 1);
    let msg = err.to_string();
    assert!(msg.contains("`x` on sim, `b` on host"), "{msg}");
    assert!(msg.contains(&format!("device_tensors.rs:{line}")), "{msg}");
    assert!(matches!(err, Error::Devices { .. }));
    // Eager ops too, with the op's name and line.
    let line = line!() + 1;
    let e = &xd + &x;
    let msg = e.to_vec::<f32>().unwrap_err().to_string();
    assert!(msg.contains("operand 0 on sim, operand 1 on host"), "{msg}");
    assert!(msg.contains(&format!("device_tensors.rs:{line}")), "{msg}");
}

#[test]
fn traced_tensors_cannot_move_and_error_tensors_keep_their_error() {
    #[jit]
    fn moves(x: &Tensor) -> Tensor {
        x.to(&Device::sim()).unwrap_or_else(|_| x.clone())
    }
    // Like reading its values, moving a traced tensor fails the call,
    // even when the body carries on.
    let x = Tensor::ones(&[2], DType::F32);
    let msg = moves(&x).unwrap_err().to_string();
    assert!(
        msg.contains("`to` at") && msg.contains("traced tensor"),
        "{msg}"
    );
    let bad = &x + &Tensor::ones(&[3], DType::F32);
    let err = bad.to(&Device::sim()).unwrap_err();
    assert!(err.to_string().contains("do not broadcast"), "{err}");
}

/// Live Sim chunks owned by tensors of type `ty` (a type no other test
/// uses, so parallel tests do not disturb the count).
fn live_tensor_chunks(ty: &str) -> usize {
    let owner = format!("{ty} tensor");
    Device::sim()
        .memory_report()
        .chunks
        .iter()
        .filter(|c| c.owner.as_deref() == Some(owner.as_str()))
        .count()
}

#[test]
fn device_memory_is_freed_when_the_last_tensor_drops() {
    let x = Tensor::rand(&[5, 7, 11], 3);
    let xd = x.to(&Device::sim()).unwrap();
    assert_eq!(live_tensor_chunks("f32[5,7,11]"), 1);
    let y = (&xd + &xd).exp();
    let view = y.reshape(&[385]);
    assert_eq!(live_tensor_chunks("f32[5,7,11]"), 2);
    let report = Device::sim().memory_report();
    let shown = report.to_string();
    assert!(shown.contains("f32[5,7,11] tensor"), "{shown}");
    assert!(shown.starts_with("sim: "), "{shown}");
    drop(xd);
    drop(y);
    // The reshape's result holds its own buffer or shares y's; either way
    // everything is gone once it drops too.
    drop(view);
    assert_eq!(live_tensor_chunks("f32[5,7,11]"), 0);
    assert_eq!(live_tensor_chunks("f32[385]"), 0);
    assert!(Device::host()
        .memory_report()
        .to_string()
        .starts_with("host: "));
}

#[test]
fn many_threads_chain_calls_on_the_device() {
    let (x, b) = inputs(9, 31, 11);
    let want = chain_reference(&x, &b);
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| {
                let (xd, bd) = (x.to(&Device::sim()).unwrap(), b.to(&Device::sim()).unwrap());
                for _ in 0..5 {
                    let (y, copies) =
                        count_transfers(|| row_norm(&shift_exp(&xd, &bd).unwrap()).unwrap());
                    assert_eq!(copies, Default::default());
                    assert_eq!(y.to_vec::<f32>().unwrap(), want);
                }
            });
        }
    });
}
