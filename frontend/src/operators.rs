//! `+ - * / %` (`%` is numpy's `mod`: see `Tensor::remainder`) and unary `-` for every mix of `Tensor`, `&Tensor` and Rust
//! scalars. Errors follow the crate rule: the result is an error tensor.
//!
//! Scalars on the right go through one generic impl per operator, so any
//! unsuffixed literal infers. Scalars on the left need one impl per type
//! (Rust's orphan rule forbids a generic one); an unsuffixed literal there
//! works unless a method is called on the result directly:
//! `(1.0f32 - &x).exp()` or `x.rsub(1.0).exp()` instead of `(1.0 - &x).exp()`.

use crate::error::Loc;
use crate::ops::{binary, binary_scalar};
use crate::scalar::Scalar;
use crate::tensor::Tensor;
use std::ops::{Add, Div, Mul, Neg, Rem, Sub};
use tilejit_ir::{BinaryOp, Op, UnaryOp};

macro_rules! tensor_ops {
    ($($trait:ident $method:ident $op:expr;)*) => {$(
        impl $trait<&Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                binary(self, rhs, $op, Loc::caller())
            }
        }
        impl $trait<Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                binary(self, &rhs, $op, Loc::caller())
            }
        }
        impl $trait<&Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                binary(&self, rhs, $op, Loc::caller())
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                binary(&self, &rhs, $op, Loc::caller())
            }
        }
        impl<S: Scalar> $trait<S> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: S) -> Tensor {
                binary_scalar(self, rhs, $op, false, Loc::caller())
            }
        }
        impl<S: Scalar> $trait<S> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: S) -> Tensor {
                binary_scalar(&self, rhs, $op, false, Loc::caller())
            }
        }
        scalar_left!($trait $method $op; f32 f64 i32 i64 u8 i8);
    )*};
}

macro_rules! scalar_left {
    ($trait:ident $method:ident $op:expr; $($t:ty)*) => {$(
        impl $trait<&Tensor> for $t {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                binary_scalar(rhs, self, $op, true, Loc::caller())
            }
        }
        impl $trait<Tensor> for $t {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                binary_scalar(&rhs, self, $op, true, Loc::caller())
            }
        }
    )*};
}

tensor_ops! {
    Add add BinaryOp::Add;
    Sub sub BinaryOp::Sub;
    Mul mul BinaryOp::Mul;
    Div div BinaryOp::Div;
    Rem rem BinaryOp::Rem;
}

impl Neg for &Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        crate::apply::apply("neg", Loc::caller(), &[self], |g, ids| {
            g.add(Op::Unary(UnaryOp::Neg, ids[0]))
        })
    }
}

impl Neg for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        -&self
    }
}
