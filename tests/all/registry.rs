//! The function registry: jit and packed functions by name, duplicates,
//! arity and kind errors, typed handles, many threads.

use tilejit::prelude::*;
use tilejit::{registry, ArgValue, Error};

#[jit]
fn scale_shift(x: &Tensor, k: f32, shift: i64) -> Tensor {
    x * k + shift as f64
}

fn t(v: &[f32]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

#[test]
fn jit_functions_are_called_by_name_with_checked_arguments() {
    registry::register("reg.scale_shift", scale_shift::jit()).unwrap();
    let x = t(&[1.0, -2.0, 0.5]);
    let args = [
        ArgValue::Tensor(&x),
        ArgValue::Float(3.0, DType::F32),
        ArgValue::Int(1),
    ];
    let out = registry::call("reg.scale_shift", &args).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), [4.0, -5.0, 2.5]);
    assert!(registry::list().contains(&"reg.scale_shift".to_string()));

    // Wrong arity, wrong kind: errors naming the function and argument.
    let msg = registry::call("reg.scale_shift", &args[..2])
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("scale_shift") && msg.contains("expected 3 arguments, got 2"),
        "{msg}"
    );
    let wrong = [ArgValue::Tensor(&x), ArgValue::Int(3), ArgValue::Int(1)];
    let msg = registry::call("reg.scale_shift", &wrong)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("argument 1 (`k`)"), "{msg}");
    // A missing name.
    let err = registry::call("reg.nope", &args).unwrap_err();
    assert!(matches!(err, Error::Registry { .. }));
    assert!(err.to_string().contains("`reg.nope`"), "{err}");
}

#[test]
fn a_duplicate_name_names_both_registrations() {
    let first = line!() + 1;
    registry::register("reg.dup", scale_shift::jit()).unwrap();
    let second = line!() + 1;
    let err = registry::register_packed("reg.dup", |_| Ok(Vec::new())).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(&format!("registry.rs:{first}")), "{msg}");
    assert!(msg.contains(&format!("registry.rs:{second}")), "{msg}");
    assert!(msg.contains("defined at"), "{msg}");
    assert_eq!(err.code(), 1);
    assert!(registry::register("", scale_shift::jit()).is_err());
    assert!(registry::unregister("reg.dup"));
    assert!(!registry::unregister("reg.dup"));
}

#[test]
fn packed_functions_check_their_own_arguments() {
    registry::register_packed("reg.sum_all", |args| {
        let mut total: Option<Tensor> = None;
        for (i, a) in args.iter().enumerate() {
            let ArgValue::Tensor(x) = a else {
                return Err(Error::Arguments {
                    function: "reg.sum_all".into(),
                    message: format!("argument {i} must be a tensor"),
                });
            };
            total = Some(match total {
                None => (*x).clone(),
                Some(s) => &s + *x,
            });
        }
        Ok(total.into_iter().collect())
    })
    .unwrap();
    let (a, b) = (t(&[1.0, 2.0]), t(&[10.0, 20.0]));
    let out = registry::call("reg.sum_all", &[ArgValue::Tensor(&a), ArgValue::Tensor(&b)]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), [11.0, 22.0]);
    let msg = registry::call("reg.sum_all", &[ArgValue::Bool(true)])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("argument 0 must be a tensor"), "{msg}");
}

#[test]
fn typed_handles_are_checked_once() {
    registry::register("reg.typed", scale_shift::jit()).unwrap();
    let f = registry::get_typed::<(&Tensor, f32, i64)>("reg.typed").unwrap();
    let x = t(&[2.0]);
    assert_eq!(
        f.call((&x, 0.5, 2)).unwrap()[0].to_vec::<f32>().unwrap(),
        [3.0]
    );
    let err = registry::get_typed::<(&Tensor, i64, i64)>("reg.typed").unwrap_err();
    assert!(err.to_string().contains("Float"), "{err}");
    assert!(registry::get_typed::<(&Tensor,)>("reg.typed").is_err());
    let h = registry::get("reg.typed").unwrap();
    assert_eq!(h.name(), "reg.typed");
}

#[test]
fn a_block_local_jit_function_with_a_local_type_registers() {
    #[derive(tilejit::JitArgs)]
    struct Affine {
        w: Tensor,
        b: Tensor,
    }
    #[jit]
    fn apply(p: &Affine, x: &Tensor) -> Tensor {
        x * &p.w + &p.b
    }
    registry::register("reg.apply", apply::jit()).unwrap();
    let p = Affine {
        w: t(&[2.0, 3.0]),
        b: t(&[1.0, 1.0]),
    };
    let x = t(&[1.0, 2.0]);
    // A struct parameter is its leaves, led by its structure mark.
    let mut args = Vec::new();
    tilejit::JitArgs::push_args(&p, &mut args);
    args.push(ArgValue::Tensor(&x));
    let out = registry::call("reg.apply", &args).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), [3.0, 7.0]);
}

#[test]
fn many_threads_register_and_call() {
    std::thread::scope(|s| {
        for i in 0..8 {
            s.spawn(move || {
                let name = format!("reg.thread{i}");
                registry::register(&name, scale_shift::jit()).unwrap();
                let x = t(&[i as f32]);
                for _ in 0..20 {
                    let args = [
                        ArgValue::Tensor(&x),
                        ArgValue::Float(2.0, DType::F32),
                        ArgValue::Int(0),
                    ];
                    let out = registry::call(&name, &args).unwrap();
                    assert_eq!(out[0].to_vec::<f32>().unwrap(), [2.0 * i as f32]);
                    let _ = registry::list();
                }
            });
        }
    });
    // Racing to register one name: exactly one wins.
    let wins: usize = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|_| s.spawn(|| registry::register("reg.race", scale_shift::jit()).is_ok()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap() as usize).sum()
    });
    assert_eq!(wins, 1);
}
