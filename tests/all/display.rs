//! numpy-style printing.

use tilejit::prelude::*;
use tilejit_tests::t32;

#[test]
fn prints_like_numpy() {
    assert_eq!(t32(&[1.0, 2.5, -3.0], &[3]).to_string(), "[ 1.   2.5 -3. ]");
    assert_eq!(
        t32(&[1.0, 2.0, 3.0, 4.0], &[2, 2]).to_string(),
        "[[1. 2.]\n [3. 4.]]"
    );
    assert_eq!(
        Tensor::arange(8, DType::I32)
            .reshape(&[2, 2, 2])
            .to_string(),
        "[[[0 1]\n  [2 3]]\n\n [[4 5]\n  [6 7]]]"
    );
    assert_eq!(Tensor::scalar(2.0, DType::F32).to_string(), "2.");
    assert_eq!(
        Tensor::from_vec(vec![true, false], &[2])
            .unwrap()
            .to_string(),
        "[ True False]"
    );
    assert_eq!(
        t32(&[f32::NAN, f32::INFINITY], &[2]).to_string(),
        "[nan inf]"
    );
    assert_eq!(Tensor::zeros(&[0], DType::F32).to_string(), "[]");
    assert_eq!(format!("{:?}", t32(&[1.0], &[1])), "Tensor(f32[1], [1.])");
}

#[test]
fn elides_large_tensors() {
    let s = Tensor::arange(2000, DType::I64).to_string();
    assert_eq!(s, "[   0    1    2 ... 1997 1998 1999]");
    let s = Tensor::zeros(&[100, 100], DType::F32).to_string();
    assert_eq!(s.lines().count(), 7, "{s}");
    assert!(s.contains("..."));
}

#[test]
fn error_and_traced_tensors_say_what_they_are() {
    let e = Tensor::ones(&[2], DType::F32).reshape(&[3]);
    assert!(
        e.to_string()
            .starts_with("Tensor(error: shape error [E2] in `reshape`"),
        "{e}"
    );
    let f = jit_fn!(|x: &Tensor| {
        assert_eq!(x.to_string(), "Tensor(traced f32[2], node %0)");
        x * 1.0
    });
    f.call(Tensor::ones(&[2], DType::F32)).unwrap();
}
