//! The ops built on `e^x` across the whole f32 range they reach, from -120
//! to 120: results that underflow to subnormals, overflow to inf or
//! saturate at ±1 must match the reference interpreter on every backend
//! (issue 35: host sigmoid gave 0 below x = -88.7 where the reference and
//! Sim give subnormals, and Verify mode failed the call).

use tilejit::prelude::*;

type Op = fn(&Tensor) -> Tensor;

/// An op, the most ulps its result may differ from the reference at `x`,
/// and the factor its own result applies to a subnormal intermediate
/// (whose rounding is absolute: one step of 2^-149 there is 1e-5 relative
/// at 1e-40, and silu's `x *` scales that step by |x|).
struct Case {
    name: &'static str,
    op: Op,
    ulps: fn(f32) -> i64,
    subnormal_scale: fn(f32) -> f32,
}

/// gelu's exp argument `-2u = x(c + c k x^2)` rounds in f32, and the
/// result's relative error is `|2u|` times that: one ulp per unit of `|2u|`
/// (the figure `inline_math_is_accurate_over_a_million_points` states on
/// [-3, 0) is this bound's start).
fn gelu_ulps(x: f32) -> i64 {
    let x = x as f64;
    let m2u = x * (-2.0 * 0.7978845608) * (1.0 + 0.044715 * x * x);
    32 + 2 * m2u.abs().min(1e9) as i64
}

/// The ops, with the ulps the host_backend accuracy tests state for the
/// underlying ops.
fn cases() -> Vec<Case> {
    let none: fn(f32) -> f32 = |_| 0.0;
    vec![
        Case {
            name: "exp",
            op: |x| x.exp(),
            ulps: |_| 2,
            subnormal_scale: none,
        },
        Case {
            name: "sigmoid",
            op: |x| x.sigmoid(),
            ulps: |_| 4,
            subnormal_scale: none,
        },
        Case {
            name: "tanh",
            op: |x| x.tanh(),
            ulps: |_| 4,
            subnormal_scale: none,
        },
        Case {
            name: "gelu",
            op: |x| x.gelu(),
            ulps: gelu_ulps,
            subnormal_scale: none,
        },
        Case {
            name: "erf",
            op: |x| x.erf(),
            ulps: |_| 4,
            subnormal_scale: none,
        },
        // silu and softplus as users write them.
        Case {
            name: "silu",
            op: |x| x * x.sigmoid(),
            ulps: |_| 4,
            subnormal_scale: |x| x.abs(),
        },
        Case {
            name: "softplus",
            op: |x| (x.exp() + 1.0).log(),
            ulps: |_| 4,
            subnormal_scale: none,
        },
        Case {
            name: "softmax",
            // Each x against 0: `e^x / (e^x + 1)` through max and sum.
            op: |x| {
                let n = x.numel();
                let zero = (x * 0.0).reshape(&[n, 1]);
                let pair = Tensor::cat(&[&x.reshape(&[n, 1]), &zero], 1);
                pair.softmax(-1).slice(1, 0, 1).reshape(&[n])
            },
            ulps: |_| 4,
            subnormal_scale: none,
        },
    ]
}

/// f32 in an order where adjacent values differ by 1 (±0 both 0).
fn ord(v: f32) -> i64 {
    let b = v.to_bits() as i32 as i64;
    if b < 0 {
        -(b & 0x7fff_ffff)
    } else {
        b
    }
}

/// -120..120 in steps of 1/64, plus the points where exp's result turns
/// subnormal, reaches 0 or inf, and a few subnormal and huge inputs.
fn points() -> Vec<f32> {
    let mut xs: Vec<f32> = (-120 * 64..=120 * 64).map(|i| i as f32 / 64.0).collect();
    for x in [
        -87.33654, -87.33655, -88.72283, -88.72284, -103.27893, -103.97208, -103.97209, -104.0,
        -149.0, 88.72283, 88.72284, 89.0, 1e-40, -1e-40, 1e-45, -1e-45, 1e30, -1e30,
    ] {
        xs.push(x);
    }
    xs
}

#[test]
fn exp_based_ops_match_the_reference_from_minus_120_to_120() {
    let xs = points();
    let x = Tensor::from_vec(xs.clone(), &[xs.len()]).unwrap();
    let mut failures = Vec::new();
    for Case {
        name,
        op,
        ulps,
        subnormal_scale,
    } in cases()
    {
        let f = jit_fn!(move |x: &Tensor| op(x));
        let want = f.with_mode(RunMode::Reference).call((&x,)).unwrap();
        let want = want.to_vec::<f32>().unwrap();
        for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
            let got = match f.with_mode(mode).call((&x,)) {
                Ok(t) => t.to_vec::<f32>().unwrap(),
                Err(e) => {
                    failures.push(format!("{name} {mode:?}: {e}"));
                    continue;
                }
            };
            let mut bad = 0;
            for ((&x, &g), &w) in xs.iter().zip(&got).zip(&want) {
                let d = if g.is_nan() && w.is_nan() {
                    0
                } else {
                    (ord(g) - ord(w)).abs()
                };
                let step = 4.0 * subnormal_scale(x) * f32::from_bits(1);
                if d > ulps(x) && (g - w).abs() > step {
                    bad += 1;
                    if bad <= 3 {
                        failures.push(format!(
                            "{name} {mode:?}: {d} ulp at x = {x:e}: {g:e}, reference {w:e}"
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
