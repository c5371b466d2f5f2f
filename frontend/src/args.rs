//! How values cross a jit boundary: [`JitArg`] turns a caller's argument
//! into an [`ArgValue`]; [`FromTrace`] turns a [`TraceValue`] into the
//! parameter the body sees; [`JitOutput`] converts results. The `#[jit]` and
//! `jit_fn!` macros generate calls to these; users rarely name them.

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use tilejit_ir::DType;

/// What kind of value a jit parameter takes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// A tensor (`&Tensor` or `Tensor`): its dtype and shape are part of the signature.
    Tensor,
    /// An `f32`/`f64`: a runtime parameter; changing it does not retrace.
    Float,
    /// An integer: static, its value is part of the signature.
    Int,
    /// A bool: static, its value is part of the signature.
    Bool,
}

/// A declared parameter of a jit function.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ParamSpec {
    /// The parameter's name in the source.
    pub name: &'static str,
    /// Its kind.
    pub kind: ArgKind,
}

/// One argument of a jit call.
#[derive(Clone, Copy)]
pub enum ArgValue<'a> {
    /// A tensor.
    Tensor(&'a Tensor),
    /// A float runtime parameter and its Rust type.
    Float(f64, DType),
    /// A static integer.
    Int(i64),
    /// A static bool.
    Bool(bool),
}

impl ArgValue<'_> {
    /// The kind of this argument.
    pub fn kind(&self) -> ArgKind {
        match self {
            ArgValue::Tensor(_) => ArgKind::Tensor,
            ArgValue::Float(..) => ArgKind::Float,
            ArgValue::Int(_) => ArgKind::Int,
            ArgValue::Bool(_) => ArgKind::Bool,
        }
    }
}

/// A Rust value that can be passed to a jit function.
pub trait JitArg {
    /// This value as a jit argument.
    fn to_arg(&self) -> ArgValue<'_>;
}

impl JitArg for Tensor {
    fn to_arg(&self) -> ArgValue<'_> {
        ArgValue::Tensor(self)
    }
}
impl JitArg for &Tensor {
    fn to_arg(&self) -> ArgValue<'_> {
        ArgValue::Tensor(self)
    }
}
impl JitArg for f32 {
    fn to_arg(&self) -> ArgValue<'_> {
        ArgValue::Float(*self as f64, DType::F32)
    }
}
impl JitArg for f64 {
    fn to_arg(&self) -> ArgValue<'_> {
        ArgValue::Float(*self, DType::F64)
    }
}
impl JitArg for bool {
    fn to_arg(&self) -> ArgValue<'_> {
        ArgValue::Bool(*self)
    }
}
macro_rules! int_arg {
    ($($t:ty)*) => {$(
        impl JitArg for $t {
            fn to_arg(&self) -> ArgValue<'_> {
                // Values beyond i64 wrap; they still key distinct entries
                // except for pairs 2^64 apart, which no shape can reach.
                ArgValue::Int(*self as i64)
            }
        }
        impl<'a> FromTrace<'a> for $t {
            fn from_trace(v: &'a TraceValue) -> Result<Self> {
                match v {
                    TraceValue::Int(i) => Ok(*i as $t),
                    _ => Err(kind_error("an integer")),
                }
            }
        }
    )*};
}
int_arg!(i8 i16 i32 i64 u8 u16 u32 u64 usize isize);

/// A value handed to a jit body while it is traced (or inlined): tensors
/// (float parameters arrive as weakly typed rank-0 tensors) and static values.
#[derive(Clone)]
pub enum TraceValue {
    /// A tensor (traced, or concrete when inlined with concrete arguments).
    Tensor(Tensor),
    /// A static integer.
    Int(i64),
    /// A static bool.
    Bool(bool),
}

fn kind_error(want: &str) -> Error {
    Error::Arguments {
        function: "jit body".into(),
        message: format!("expected {want} (internal mismatch)"),
    }
}

/// Converts a [`TraceValue`] into a body parameter.
pub trait FromTrace<'a>: Sized {
    /// The conversion.
    fn from_trace(v: &'a TraceValue) -> Result<Self>;
}

impl<'a> FromTrace<'a> for &'a Tensor {
    fn from_trace(v: &'a TraceValue) -> Result<Self> {
        match v {
            TraceValue::Tensor(t) => Ok(t),
            _ => Err(kind_error("a tensor")),
        }
    }
}
impl<'a> FromTrace<'a> for Tensor {
    fn from_trace(v: &'a TraceValue) -> Result<Self> {
        <&Tensor>::from_trace(v).cloned()
    }
}
impl<'a> FromTrace<'a> for bool {
    fn from_trace(v: &'a TraceValue) -> Result<Self> {
        match v {
            TraceValue::Bool(b) => Ok(*b),
            _ => Err(kind_error("a bool")),
        }
    }
}

/// What a jit function may return: a `Tensor` or a tuple of up to 16.
pub trait JitOutput: Sized {
    /// Flattens into tensors.
    fn into_tensors(self) -> Vec<Tensor>;
    /// Rebuilds from the program's outputs.
    fn from_tensors(v: Outputs) -> Result<Self>;
}

/// A call's output tensors in order. A run's arrays become tensors as they
/// are taken, with no `Vec` of tensors in between (a warm call of a tiny
/// function is a few hundred nanoseconds; an allocation is a tenth of it).
pub struct Outputs(OutputsInner);

enum OutputsInner {
    Arrays(std::vec::IntoIter<tilejit_ir::Array>),
    Tensors(std::vec::IntoIter<Tensor>),
}

impl Outputs {
    pub(crate) fn from_arrays(v: Vec<tilejit_ir::Array>) -> Outputs {
        Outputs(OutputsInner::Arrays(v.into_iter()))
    }

    pub(crate) fn from_tensor_vec(v: Vec<Tensor>) -> Outputs {
        Outputs(OutputsInner::Tensors(v.into_iter()))
    }
}

impl Iterator for Outputs {
    type Item = Tensor;
    fn next(&mut self) -> Option<Tensor> {
        match &mut self.0 {
            OutputsInner::Arrays(it) => it.next().map(Tensor::concrete),
            OutputsInner::Tensors(it) => it.next(),
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.0 {
            OutputsInner::Arrays(it) => it.size_hint(),
            OutputsInner::Tensors(it) => it.size_hint(),
        }
    }
}

impl ExactSizeIterator for Outputs {}

impl JitOutput for Tensor {
    fn into_tensors(self) -> Vec<Tensor> {
        vec![self]
    }
    fn from_tensors(mut v: Outputs) -> Result<Self> {
        v.next().ok_or_else(|| kind_error("one output"))
    }
}

/// A tuple of jit arguments (up to 16), for [`JitFn::call`](crate::JitFn::call).
pub trait JitArgs {
    /// The arguments in order.
    fn args(&self) -> Vec<ArgValue<'_>>;
}

impl JitArgs for &Tensor {
    fn args(&self) -> Vec<ArgValue<'_>> {
        vec![ArgValue::Tensor(self)]
    }
}

impl JitArgs for () {
    fn args(&self) -> Vec<ArgValue<'_>> {
        vec![]
    }
}

macro_rules! tuples {
    ($($n:literal: $($T:ident $i:tt)*;)*) => {$(
        impl JitOutput for ($(tuples!(@t $T),)*) {
            fn into_tensors(self) -> Vec<Tensor> {
                vec![$(self.$i),*]
            }
            fn from_tensors(v: Outputs) -> Result<Self> {
                if v.len() != $n {
                    return Err(kind_error(concat!($n, " outputs")));
                }
                let mut it = v;
                Ok(($({ let _ = $i; it.next().ok_or_else(|| kind_error("an output"))? },)*))
            }
        }
        impl<$($T: JitArg),*> JitArgs for ($($T,)*) {
            fn args(&self) -> Vec<ArgValue<'_>> {
                vec![$(self.$i.to_arg()),*]
            }
        }
    )*};
    (@t $T:ident) => { Tensor };
}

tuples! {
    1: A 0;
    2: A 0 B 1;
    3: A 0 B 1 C 2;
    4: A 0 B 1 C 2 D 3;
    5: A 0 B 1 C 2 D 3 E 4;
    6: A 0 B 1 C 2 D 3 E 4 F 5;
    7: A 0 B 1 C 2 D 3 E 4 F 5 G 6;
    8: A 0 B 1 C 2 D 3 E 4 F 5 G 6 H 7;
    9: A 0 B 1 C 2 D 3 E 4 F 5 G 6 H 7 I 8;
    10: A 0 B 1 C 2 D 3 E 4 F 5 G 6 H 7 I 8 J 9;
    11: A 0 B 1 C 2 D 3 E 4 F 5 G 6 H 7 I 8 J 9 K 10;
    12: A 0 B 1 C 2 D 3 E 4 F 5 G 6 H 7 I 8 J 9 K 10 L 11;
    13: A 0 B 1 C 2 D 3 E 4 F 5 G 6 H 7 I 8 J 9 K 10 L 11 M 12;
    14: A 0 B 1 C 2 D 3 E 4 F 5 G 6 H 7 I 8 J 9 K 10 L 11 M 12 N 13;
    15: A 0 B 1 C 2 D 3 E 4 F 5 G 6 H 7 I 8 J 9 K 10 L 11 M 12 N 13 O 14;
    16: A 0 B 1 C 2 D 3 E 4 F 5 G 6 H 7 I 8 J 9 K 10 L 11 M 12 N 13 O 14 P 15;
}
