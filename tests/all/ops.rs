//! Per-op tests (eager mode) against hand-checked values, and numpy
//! broadcasting.

use tilejit::prelude::*;
use tilejit_tests::{assert_close, f64s, reference, t32, vals};

#[test]
fn arithmetic_operators_all_forms() {
    let a = t32(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let b = t32(&[10.0, 20.0, 30.0, 40.0], &[2, 2]);
    assert_eq!(vals(&(&a + &b)), vec![11.0, 22.0, 33.0, 44.0]);
    assert_eq!(vals(&(&b - &a)), vec![9.0, 18.0, 27.0, 36.0]);
    assert_eq!(vals(&(&a * &b)), vec![10.0, 40.0, 90.0, 160.0]);
    assert_eq!(vals(&(&b / &a)), vec![10.0, 10.0, 10.0, 10.0]);
    assert_eq!(vals(&(a.clone() + b.clone())), vec![11.0, 22.0, 33.0, 44.0]);
    assert_eq!(vals(&(a.clone() + &b)), vec![11.0, 22.0, 33.0, 44.0]);
    assert_eq!(vals(&(&a + b.clone())), vec![11.0, 22.0, 33.0, 44.0]);
    assert_eq!(vals(&-&a), vec![-1.0, -2.0, -3.0, -4.0]);
    assert_eq!(vals(&-a.clone()), vec![-1.0, -2.0, -3.0, -4.0]);
}

#[test]
fn scalars_on_either_side_infer_unsuffixed() {
    let x = t32(&[1.0, 2.0, 4.0], &[3]);
    assert_eq!(vals(&(&x * 2.0 - 1.0)), vec![1.0, 3.0, 7.0]);
    assert_eq!(vals(&(x.clone() * 2.0 - 1.0)), vec![1.0, 3.0, 7.0]);
    assert_eq!(vals(&(0.5f32 * &x)), vec![0.5, 1.0, 2.0]);
    assert_eq!(vals(&(2.0f64 / &x)), vec![2.0, 1.0, 0.5]);
    let y: Tensor = 1.0 - &x;
    assert_eq!(vals(&y), vec![0.0, -1.0, -3.0]);
    assert_eq!(vals(&((&x + 1e-5).rsqrt())), vals(&(&x + 1e-5f32).rsqrt()));
    assert_eq!(vals(&x.rsub(1.0).abs()), vec![0.0, 1.0, 3.0]);
    assert_eq!(vals(&x.rdiv(8)), vec![8.0, 4.0, 2.0]);
    assert_eq!(vals(&(&x + 1)), vec![2.0, 3.0, 5.0]);
}

#[test]
fn a_scalar_takes_the_tensor_dtype() {
    let x = Tensor::from_vec(vec![1.0f64, 2.0], &[2]).unwrap();
    let y = &x * 0.1f32;
    assert_eq!(y.dtype(), DType::F64);
    // 0.1f32 widened exactly, then multiplied in f64.
    assert_eq!(
        y.to_vec::<f64>().unwrap(),
        vec![0.1f32 as f64, 0.2f32 as f64]
    );
    let i = Tensor::from_vec(vec![1i32, 2, 3], &[3]).unwrap();
    assert_eq!((&i * 3.0).to_vec::<i32>().unwrap(), vec![3, 6, 9]);
    assert_eq!((&i + 2i64).to_vec::<i32>().unwrap(), vec![3, 4, 5]);
    assert_eq!((&i / 2).to_vec::<i32>().unwrap(), vec![0, 1, 1]);
}

#[test]
fn unary_math_matches_hand_values() {
    let x = t32(&[-2.0, -0.5, 0.0, 0.5, 2.0], &[5]);
    let xs = [-2.0f64, -0.5, 0.0, 0.5, 2.0];
    let check = |t: Tensor, f: fn(f64) -> f64| {
        let want: Vec<f64> = xs.iter().map(|&v| f(v)).collect();
        assert_close(&vals(&t), &want, 1e-6);
    };
    check(x.exp(), f64::exp);
    check(x.tanh(), f64::tanh);
    check(x.sigmoid(), |v| 1.0 / (1.0 + (-v).exp()));
    check(x.relu(), |v| v.max(0.0));
    check(x.gelu(), reference::gelu);
    check(x.abs(), f64::abs);
    check(x.square(), |v| v * v);
    check(x.recip(), |v| 1.0 / v);
    check(x.sin(), f64::sin);
    check(x.cos(), f64::cos);
    check(x.erf(), tilejit_ir::scalar::erf);
    check(x.floor(), f64::floor);
    check(x.ceil(), f64::ceil);
    check(x.round(), f64::round_ties_even);
    check(x.sign(), |v| if v == 0.0 { 0.0 } else { v.signum() });
    let p = t32(&[0.25, 1.0, 4.0, 9.0], &[4]);
    assert_eq!(vals(&p.sqrt()), vec![0.5, 1.0, 2.0, 3.0]);
    assert_eq!(vals(&p.rsqrt()), vec![2.0, 1.0, 0.5, 1.0 / 3.0]);
    assert_close(
        &vals(&p.log()),
        &[0.25f64.ln(), 0.0, 4f64.ln(), 9f64.ln()],
        1e-7,
    );
    // gelu at known points: gelu(1) = 0.8411920..., gelu(-1) = -0.158808...
    assert_close(
        &vals(&t32(&[1.0, -1.0], &[2]).gelu()),
        &[0.841192, -0.158808],
        1e-5,
    );
}

#[test]
fn nan_and_inf_propagate_as_ieee() {
    let x = t32(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.0], &[4]);
    let y = &x * 2.0 + 1.0;
    assert_close(
        &vals(&y),
        &[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 3.0],
        0.0,
    );
    assert_close(
        &vals(&x.exp()),
        &[f64::NAN, f64::INFINITY, 0.0, 1f64.exp()],
        1e-7,
    );
    assert_close(&vals(&(&x - &x)), &[f64::NAN, f64::NAN, f64::NAN, 0.0], 0.0);
    assert_close(
        &vals(&t32(&[1.0, -1.0, 0.0], &[3]).rdiv(0.0f32)),
        &[0.0, -0.0, f64::NAN],
        0.0,
    );
    assert_close(
        &vals(&(t32(&[1.0, -1.0], &[2]) / 0.0)),
        &[f64::INFINITY, f64::NEG_INFINITY],
        0.0,
    );
    // maximum/minimum and max-reductions propagate NaN, as numpy does.
    let m = x.maximum(&t32(&[0.0, 0.0, 0.0, 5.0], &[4]));
    assert_close(&vals(&m), &[f64::NAN, f64::INFINITY, 0.0, 5.0], 0.0);
    assert!(vals(&x.max(0, false))[0].is_nan());
    assert!(vals(&x.relu())[0].is_nan());
    assert!(vals(&x.sum_all())[0].is_nan());
}

#[test]
fn comparisons_and_where() {
    let a = t32(&[1.0, 2.0, 3.0, f32::NAN], &[4]);
    let b = t32(&[2.0, 2.0, 2.0, 2.0], &[4]);
    assert_eq!(
        a.lt(&b).to_vec::<bool>().unwrap(),
        vec![true, false, false, false]
    );
    assert_eq!(
        a.gt(&b).to_vec::<bool>().unwrap(),
        vec![false, false, true, false]
    );
    assert_eq!(
        a.le(&b).to_vec::<bool>().unwrap(),
        vec![true, true, false, false]
    );
    assert_eq!(
        a.ge(&b).to_vec::<bool>().unwrap(),
        vec![false, true, true, false]
    );
    assert_eq!(
        a.eq(&b).to_vec::<bool>().unwrap(),
        vec![false, true, false, false]
    );
    assert_eq!(a.lt(&b).dtype(), DType::Bool);
    let w = Tensor::where_cond(&a.lt(&b), &a, &(&b * 10.0));
    assert_close(&vals(&w), &[1.0, 20.0, 20.0, 20.0], 0.0);
    // The condition broadcasts too: a [2,1] condition picks whole rows.
    let c = Tensor::from_vec(vec![true, false], &[2, 1]).unwrap();
    let w = Tensor::where_cond(
        &c,
        &Tensor::ones(&[2, 3], DType::F32),
        &Tensor::zeros(&[3], DType::F32),
    );
    assert_eq!(w.shape(), &[2, 3]);
    assert_eq!(vals(&w), vec![1.0, 1.0, 1.0, 0.0, 0.0, 0.0]);
}

#[test]
fn reductions_over_axes() {
    let x = t32(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    assert_eq!(vals(&x.sum(0, false)), vec![5.0, 7.0, 9.0]);
    assert_eq!(vals(&x.sum(-1, false)), vec![6.0, 15.0]);
    assert_eq!(x.sum(1, true).shape(), &[2, 1]);
    assert_eq!(x.sum(1, false).shape(), &[2]);
    assert_eq!(vals(&x.max(1, false)), vec![3.0, 6.0]);
    assert_eq!(vals(&x.min(0, false)), vec![1.0, 2.0, 3.0]);
    assert_eq!(vals(&x.mean(-1, false)), vec![2.0, 5.0]);
    assert_eq!(vals(&x.mean(0, true)), vec![2.5, 3.5, 4.5]);
    let s = x.sum_all();
    assert_eq!(s.shape(), &[] as &[usize]);
    assert_eq!(s.item::<f32>().unwrap(), 21.0);
    // Integer sums stay integer; integer means are f64, as numpy.
    let i = Tensor::arange(5, DType::I64);
    assert_eq!(i.sum(0, false).to_vec::<i64>().unwrap(), vec![10]);
    assert_eq!(i.mean(0, false).to_vec::<f64>().unwrap(), vec![2.0]);
}

#[test]
fn empty_reductions_follow_numpy() {
    let e = Tensor::zeros(&[3, 0], DType::F32);
    assert_eq!(vals(&e.sum(1, false)), vec![0.0, 0.0, 0.0]);
    assert!(vals(&e.mean(1, false)).iter().all(|v| v.is_nan()));
    assert_eq!(e.sum(0, false).shape(), &[0]);
    assert_eq!(vals(&e.sum_all()), vec![0.0]);
    // max over the non-empty axis is fine: it yields an empty result.
    assert_eq!(e.max(0, false).shape(), &[0]);
}

#[test]
fn matmul_2d_and_batched() {
    let a = t32(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = t32(&[7.0, 8.0, 9.0, 10.0, 11.0, 12.0], &[3, 2]);
    assert_eq!(vals(&a.matmul(&b)), vec![58.0, 64.0, 139.0, 154.0]);
    let a3 = Tensor::randn(&[4, 5, 6], 7);
    let b3 = Tensor::randn(&[4, 6, 3], 8);
    let c = a3.matmul(&b3);
    assert_eq!(c.shape(), &[4, 5, 3]);
    let (av, bv, cv) = (f64s(&vals(&a3)), f64s(&vals(&b3)), vals(&c));
    for batch in 0..4 {
        let want = reference::matmul(
            &av[batch * 30..(batch + 1) * 30],
            &bv[batch * 18..(batch + 1) * 18],
            5,
            6,
            3,
        );
        assert_close(&cv[batch * 15..(batch + 1) * 15], &want, 1e-5);
    }
    // A 2-D right operand broadcasts over the batch.
    let w = Tensor::randn(&[6, 3], 9);
    let c2 = a3.matmul(&w);
    let wv = f64s(&vals(&w));
    let want0 = reference::matmul(&av[..30], &wv, 5, 6, 3);
    assert_close(&vals(&c2)[..15], &want0, 1e-5);
    // Big enough per matrix to use every thread: the batch is split over
    // the threads (an attention's heads), odd batch counts too; f64 too.
    for (batch, dt) in [(5, DType::F32), (2, DType::F32), (3, DType::F64)] {
        let (m, k, n) = (70, 130, 60);
        let a = Tensor::randn(&[batch, m, k], 10).cast(dt);
        let b = Tensor::randn(&[batch, k, n], 11).cast(dt);
        let c = vals(&a.matmul(&b).cast(DType::F32));
        let f = |t: &Tensor| f64s(&vals(&t.cast(DType::F32)));
        let (av, bv) = (f(&a), f(&b));
        for i in 0..batch {
            let want = reference::matmul(
                &av[i * m * k..(i + 1) * m * k],
                &bv[i * k * n..(i + 1) * k * n],
                m,
                k,
                n,
            );
            assert_close(&c[i * m * n..(i + 1) * m * n], &want, 1e-4);
        }
    }
}

#[test]
fn shape_ops() {
    let x = Tensor::arange(6, DType::F32);
    assert_eq!(x.reshape(&[2, 3]).shape(), &[2, 3]);
    let t = x.reshape(&[2, 3]).transpose(0, 1);
    assert_eq!(t.shape(), &[3, 2]);
    assert_eq!(vals(&t), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    assert_eq!(vals(&x.reshape(&[2, 3]).transpose(-1, -2)), vals(&t));
    let p = Tensor::arange(24, DType::F32)
        .reshape(&[2, 3, 4])
        .permute(&[2, 0, 1]);
    assert_eq!(p.shape(), &[4, 2, 3]);
    assert_eq!(vals(&p)[..6], [0.0, 4.0, 8.0, 12.0, 16.0, 20.0]);
    let b = t32(&[1.0, 2.0], &[2, 1]).broadcast_to(&[3, 2, 2]);
    assert_eq!(
        vals(&b),
        vec![1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0]
    );
    assert_eq!(
        Tensor::zeros(&[0, 4], DType::F32)
            .reshape(&[4, 0, 2])
            .shape(),
        &[4, 0, 2]
    );
}

#[test]
fn broadcasting_follows_numpy() {
    let cases: &[(&[usize], &[usize], &[usize])] = &[
        (&[2, 3], &[3], &[2, 3]),
        (&[2, 1], &[1, 3], &[2, 3]),
        (&[4, 1, 3], &[2, 1], &[4, 2, 3]),
        (&[], &[2, 2], &[2, 2]),
        (&[1], &[5], &[5]),
        (&[3, 0], &[3, 1], &[3, 0]),
        (&[1, 1, 1, 1, 1, 1, 1, 2], &[2], &[1, 1, 1, 1, 1, 1, 1, 2]),
    ];
    for &(a, b, want) in cases {
        let x = Tensor::ones(a, DType::F32);
        let y = Tensor::ones(b, DType::F32);
        assert_eq!((&x + &y).shape(), want, "{a:?} + {b:?}");
        assert_eq!((&y * &x).shape(), want, "{b:?} * {a:?}");
    }
    // Values: row vector plus column vector.
    let r = t32(&[1.0, 2.0, 3.0], &[3]);
    let c = t32(&[10.0, 20.0], &[2, 1]);
    assert_eq!(vals(&(&r + &c)), vec![11.0, 12.0, 13.0, 21.0, 22.0, 23.0]);
}

#[test]
fn softmax_and_layer_norm_against_reference() {
    for &(rows, cols) in &[(1usize, 1usize), (3, 50), (4, 783)] {
        let x = Tensor::randn(&[rows, cols], 11) * 3.0;
        let xv = f64s(&vals(&x));
        assert_close(&vals(&x.softmax(-1)), &reference::softmax(&xv, cols), 1e-6);
        let g = Tensor::rand(&[cols], 12);
        let b = Tensor::randn(&[cols], 13);
        let want = reference::layer_norm(&xv, &f64s(&vals(&g)), &f64s(&vals(&b)), cols, 1e-5);
        assert_close(&vals(&x.layer_norm(&g, &b, 1e-5)), &want, 1e-4);
    }
    // Softmax of a large-magnitude row stays finite (max subtraction).
    let big = t32(&[1000.0, 1001.0, 1002.0], &[1, 3]);
    assert_close(
        &vals(&big.softmax(-1)),
        &reference::softmax(&[1000.0, 1001.0, 1002.0], 3),
        1e-6,
    );
}

#[test]
fn casts_between_dtypes() {
    let x = t32(&[1.7, -1.7, 0.0, 1e10, f32::NAN], &[5]);
    assert_eq!(
        x.cast(DType::I32).to_vec::<i32>().unwrap(),
        vec![1, -1, 0, i32::MAX, 0]
    );
    assert_eq!(
        x.cast(DType::Bool).to_vec::<bool>().unwrap(),
        vec![true, true, false, true, true]
    );
    let h = t32(&[1.0, 0.1, 65504.0, 1e6], &[4]).cast(DType::F16);
    let hv = h.to_vec::<half::f16>().unwrap();
    assert_eq!(hv[0], half::f16::from_f32(1.0));
    assert_eq!(hv[1], half::f16::from_f32(0.1));
    assert_eq!(hv[2], half::f16::MAX);
    assert!(hv[3].is_infinite());
    let bf = t32(&[3.0], &[1]).cast(DType::BF16) * 2.0;
    assert_eq!(
        bf.to_vec::<half::bf16>().unwrap(),
        vec![half::bf16::from_f32(6.0)]
    );
    let i = Tensor::from_vec(vec![i64::MAX, -3], &[2]).unwrap();
    assert_eq!(i.cast(DType::I32).to_vec::<i32>().unwrap(), vec![-1, -3]);
    assert_eq!(
        i.cast(DType::F64).to_vec::<f64>().unwrap(),
        vec![i64::MAX as f64, -3.0]
    );
}

#[test]
fn integer_arithmetic_wraps_and_divides_like_rust() {
    let a = Tensor::from_vec(vec![i32::MAX, 7, -7, 5], &[4]).unwrap();
    let b = Tensor::from_vec(vec![1, 2, 2, 0], &[4]).unwrap();
    assert_eq!((&a + &b).to_vec::<i32>().unwrap(), vec![i32::MIN, 9, -5, 5]);
    assert_eq!((&a / &b).to_vec::<i32>().unwrap(), vec![i32::MAX, 3, -3, 0]);
    assert_eq!(a.abs().to_vec::<i32>().unwrap(), vec![i32::MAX, 7, 7, 5]);
}

#[test]
fn constructors() {
    assert_eq!(vals(&Tensor::full(&[2], 2.5, DType::F32)), vec![2.5, 2.5]);
    assert_eq!(
        Tensor::arange(4, DType::I32).to_vec::<i32>().unwrap(),
        vec![0, 1, 2, 3]
    );
    assert_eq!(
        Tensor::ones(&[2, 2], DType::Bool).to_vec::<bool>().unwrap(),
        vec![true; 4]
    );
    let r = Tensor::rand(&[10_000], 42);
    let rv = vals(&r);
    assert!(rv.iter().all(|&v| (0.0..1.0).contains(&v)));
    let mean = rv.iter().map(|&v| v as f64).sum::<f64>() / rv.len() as f64;
    assert!((mean - 0.5).abs() < 0.02, "uniform mean {mean}");
    assert_eq!(vals(&Tensor::rand(&[5], 42)), vals(&Tensor::rand(&[5], 42)));
    assert_ne!(vals(&Tensor::rand(&[5], 42)), vals(&Tensor::rand(&[5], 43)));
    let n = vals(&Tensor::randn(&[20_000], 1));
    let m = n.iter().map(|&v| v as f64).sum::<f64>() / n.len() as f64;
    let var = n.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / n.len() as f64;
    assert!(
        m.abs() < 0.03 && (var - 1.0).abs() < 0.05,
        "normal mean {m} var {var}"
    );
    let s = Tensor::scalar(3.0, DType::F64);
    assert_eq!(s.shape(), &[] as &[usize]);
    assert_eq!(s.item::<f64>().unwrap(), 3.0);
    assert_eq!(Tensor::zeros(&[2, 0, 3], DType::F32).numel(), 0);
}

#[test]
fn tensor_is_clone_send_sync() {
    fn assert_traits<T: Clone + Send + Sync + 'static>() {}
    assert_traits::<Tensor>();
    assert_traits::<tilejit::Error>();
}

#[test]
fn f64_to_f16_and_bf16_round_to_nearest_even() {
    use half::{bf16, f16};
    use tilejit_ir::scalar::{bf16_from_f64, f16_from_f64};
    // Just above a tie (half-rs issue #151: `from_f64` rounds these down).
    let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-22);
    assert_eq!(f16_from_f64(x).to_bits(), 0x3c01);
    // An f32-exact value whose dropped bits are 0x8003: above the tie.
    let y = f32::from_bits(0xbe7e_8003) as f64;
    assert_eq!(bf16_from_f64(y).to_bits(), 0xbe7f);
    // Exact ties go to even.
    assert_eq!(f16_from_f64(1.0 + 2f64.powi(-11)).to_bits(), 0x3c00);
    assert_eq!(f16_from_f64(1.0 + 3.0 * 2f64.powi(-11)).to_bits(), 0x3c02);
    assert_eq!(bf16_from_f64(1.0 + 2f64.powi(-8)).to_bits(), 0x3f80);
    // Overflow, NaN, signed zero, subnormals.
    assert!(bf16_from_f64(1e300).to_f64().is_infinite());
    assert_eq!(f16_from_f64(65520.0).to_bits(), 0x7c00);
    assert_eq!(f16_from_f64(65519.99).to_bits(), 0x7bff);
    assert!(f16_from_f64(f64::NAN).is_nan());
    assert_eq!(bf16_from_f64(-0.0).to_bits(), 0x8000);
    assert_eq!(f16_from_f64(2f64.powi(-25) * 1.0001).to_bits(), 0x0001);
    assert_eq!(f16_from_f64(2f64.powi(-25)).to_bits(), 0x0000);
    // Random values: nothing representable is nearer than the result, and
    // a tie goes to the even neighbour. Differences are exact in f64 (the
    // operands are within a factor of two of each other).
    let mut rng = tilejit_tests::Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..200_000 {
        let s = rng.next();
        let exp = (s >> 52) % 40 + 1003; // about 2^-20 .. 2^19
        let v = f64::from_bits((s & 0x800f_ffff_ffff_ffff) | (exp << 52));
        let check = |r: f64, below: f64, above: f64, even: bool| {
            let d = (v - r).abs();
            assert!(
                d <= (v - below).abs() && d <= (v - above).abs(),
                "{v:e} -> {r:e}"
            );
            if d == (v - below).abs() || d == (v - above).abs() {
                assert!(even, "tie {v:e} -> odd {r:e}");
            }
        };
        let h = f16_from_f64(v);
        let hb = h.to_bits();
        if v.abs() < 65504.0 {
            check(
                h.to_f64(),
                f16::from_bits(hb.wrapping_sub(1)).to_f64(),
                f16::from_bits(hb + 1).to_f64(),
                hb & 1 == 0,
            );
        }
        let b = bf16_from_f64(v);
        let bb = b.to_bits();
        check(
            b.to_f64(),
            bf16::from_bits(bb.wrapping_sub(1)).to_f64(),
            bf16::from_bits(bb + 1).to_f64(),
            bb & 1 == 0,
        );
    }
}

/// `full` (and so `zeros`/`ones`) at sizes on both sides of the 1 MiB line
/// where storage moves to fresh huge-page-advised memory: every element
/// holds the value converted to the dtype, signed zero included, and a
/// zero fill (memory left untouched) reads as zeros.
#[test]
fn full_holds_its_value_at_every_size() {
    use half::{bf16, f16};
    fn check<T: tilejit::Element + PartialEq + std::fmt::Debug>(dtype: DType, value: f64, want: T) {
        for n in [0usize, 1, 3, 783, 300_001] {
            let got = Tensor::full(&[n], value, dtype).to_vec::<T>().unwrap();
            assert_eq!(got.len(), n);
            if let Some(i) = got.iter().position(|x| *x != want) {
                panic!("{dtype} full({value}) x{n}: element {i} is {:?}", got[i]);
            }
        }
    }
    check(DType::F32, 2.5, 2.5f32);
    check(DType::F32, 0.0, 0.0f32);
    check(DType::F64, -1e300, -1e300f64);
    check(DType::F16, 0.1, f16::from_f64(0.1));
    check(DType::BF16, -3.0, bf16::from_f32(-3.0));
    check(DType::I32, -7.0, -7i32);
    check(DType::I64, 0.0, 0i64);
    check(DType::Bool, 1.0, true);
    check(DType::Bool, 0.0, false);
    // -0.0 compares equal to 0.0; its sign bit must survive the fill.
    for n in [3usize, 300_001] {
        let got = Tensor::full(&[n], -0.0, DType::F32)
            .to_vec::<f32>()
            .unwrap();
        assert!(got.iter().all(|x| x.to_bits() == 0x8000_0000), "x{n}");
        assert_eq!(
            Tensor::ones(&[n], DType::I32).to_vec::<i32>().unwrap(),
            vec![1; n]
        );
    }
}

/// SplitMix64, written out again here from its published constants.
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `rand`/`randn` give each element from its (seed, index) alone, so the
/// parallel fill of big tensors (chunked over the pool) must give exactly
/// what one loop over the indices gives, past every chunk boundary.
#[test]
fn random_tensors_depend_only_on_seed_and_index_at_every_size() {
    let unit = |seed: u64, i: u64| (splitmix64(seed ^ splitmix64(i)) >> 40) as f32 / 16777216.0;
    for n in [1usize, 3, 50, 783, 70_000, 200_003] {
        let u = Tensor::rand(&[n], 7).to_vec::<f32>().expect("rand");
        let g = Tensor::randn(&[n], 9).to_vec::<f32>().expect("randn");
        assert_eq!(u.len(), n);
        for i in 0..n {
            let want = unit(7, i as u64);
            assert_eq!(u[i].to_bits(), want.to_bits(), "rand[{i}] of {n}");
            let (u1, u2) = (
                1.0 - unit(9, 2 * i as u64) as f64,
                unit(9, 2 * i as u64 + 1) as f64,
            );
            let want = ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32;
            assert_eq!(g[i].to_bits(), want.to_bits(), "randn[{i}] of {n}");
        }
    }
    // A 2-D shape fills the same flat sequence.
    let a = Tensor::randn(&[300, 700], 9)
        .to_vec::<f32>()
        .expect("randn");
    let b = Tensor::randn(&[210_000], 9).to_vec::<f32>().expect("randn");
    assert_eq!(a, b);
}

#[jit]
fn j_range(x: &Tensor) -> Tensor {
    x + Tensor::range(10.0, 4.0, -3.0, DType::I32)
}

#[test]
fn range_follows_onnx_range_in_every_mode() {
    // Python: [start + i * delta for i in range(max(ceil((limit - start) / delta), 0))]
    for mode in [RunMode::Host, RunMode::Sim, RunMode::Verify] {
        with_mode(mode, || {
            let i32s = |t: Tensor| (t * 1).to_vec::<i32>().unwrap();
            assert_eq!(
                i32s(Tensor::range(0.0, 5.0, 1.0, DType::I32)),
                [0, 1, 2, 3, 4]
            );
            assert_eq!(i32s(Tensor::range(10.0, 4.0, -3.0, DType::I32)), [10, 7]);
            assert_eq!(i32s(Tensor::range(5.0, 5.0, 1.0, DType::I32)), [0i32; 0]);
            assert_eq!(i32s(Tensor::range(5.0, 0.0, 1.0, DType::I32)), [0i32; 0]);
            let r = Tensor::range(-3.0, 3.0, 2.0, DType::I8) * 1;
            assert_eq!(r.to_vec::<i8>().unwrap(), [-3, -1, 1]);
            let r = Tensor::range(1.0, 2.0, 0.25, DType::F32) * 1.0;
            assert_eq!(r.to_vec::<f32>().unwrap(), [1.0, 1.25, 1.5, 1.75]);
            let r = Tensor::range(0.0, 1.0, 0.3, DType::F64) * 1.0;
            assert_eq!(
                r.to_vec::<f64>().unwrap(),
                [0.0, 0.3, 0.6, 0.8999999999999999]
            );
            let x = Tensor::from_vec(vec![1i32, 2], &[2]).unwrap();
            assert_eq!(j_range(&x).unwrap().to_vec::<i32>().unwrap(), [11, 9]);
        });
    }
    for (t, needle) in [
        (
            Tensor::range(0.0, 5.0, 0.0, DType::F32),
            "delta must be nonzero",
        ),
        (Tensor::range(0.0, f64::NAN, 1.0, DType::F32), "finite"),
        (Tensor::range(0.0, 2.0, 0.5, DType::I32), "whole numbers"),
        (Tensor::range(0.0, 300.0, 1.0, DType::Bool), "bool"),
    ] {
        let e = t.error().expect("an error");
        assert_eq!(e.kind(), tilejit::ErrorKind::BadArgument, "{e}");
        assert!(e.to_string().contains(needle), "{e}");
        assert!(e.to_string().contains("ops.rs:"), "names the caller: {e}");
    }
}
