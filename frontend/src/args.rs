//! How values cross a jit boundary: [`JitArg`] and [`JitArgs`] turn a
//! caller's arguments into [`ArgValue`]s (what [`crate::registry`] calls
//! take too), [`JitOutput`] is what a jit function may return, and
//! [`ParamSpec`]s describe a function's parameters
//! ([`JitFunction::params`](crate::JitFunction::params)).
//!
//! The rest is plumbing for the macros' expansions, hidden from the docs
//! and reached through `tilejit::__private`: `TraceValue` (what a body
//! receives while traced), `FromTrace`/`FromLeaves`/`Leaves` (rebuilding
//! parameters from it), `StaticFloat` and `Outputs` (a call's outputs as
//! they are taken). They may change in any release.

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use tilejit_ir::DType;
pub use tilejit_runtime::Mark;

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
    /// A list or struct of these (`&[Tensor]`, `Vec<Tensor>`, a
    /// `#[derive(JitArgs)]` struct): several leaves, see [`JitArgs`].
    Tree,
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
    /// The leaf that leads a list's or struct's leaves (static).
    Mark(Mark),
}

impl ArgValue<'_> {
    /// The kind of this argument.
    pub fn kind(&self) -> ArgKind {
        match self {
            ArgValue::Tensor(_) => ArgKind::Tensor,
            ArgValue::Float(..) => ArgKind::Float,
            ArgValue::Int(_) => ArgKind::Int,
            ArgValue::Bool(_) => ArgKind::Bool,
            ArgValue::Mark(_) => ArgKind::Tree,
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
#[doc(hidden)]
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
#[doc(hidden)]
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

/// What a jit function may return: a `Tensor`, a tuple of up to 16, a
/// `Vec<Tensor>`, a `(Tensor, Vec<Tensor>)`, or a struct that
/// `#[derive(JitArgs)]` whose fields are tensors and such structs.
pub trait JitOutput: Sized {
    /// Flattens into tensors.
    fn into_tensors(self) -> Vec<Tensor>;
    /// Rebuilds from the program's outputs.
    #[doc(hidden)]
    fn from_tensors(v: Outputs) -> Result<Self>;
    /// Appends this value's tensors to `out` (a field of a returned struct).
    #[doc(hidden)]
    fn push_tensors(self, out: &mut Vec<Tensor>) {
        out.extend(self.into_tensors())
    }
    /// Takes this value from the front of `v` (a field of a returned
    /// struct); only tensors and derived structs can be fields.
    #[doc(hidden)]
    fn take_from(v: &mut Outputs) -> Result<Self> {
        let _ = v;
        Err(kind_error(
            "a tensor or a derived struct as a returned field",
        ))
    }
}

/// A call's output tensors in order. A run's arrays become tensors as they
/// are taken, with no `Vec` of tensors in between (a warm call of a tiny
/// function is a few hundred nanoseconds; an allocation is a tenth of it).
#[doc(hidden)]
pub struct Outputs(OutputsInner);

enum OutputsInner {
    /// A one-output program's result, with no `Vec` around it.
    One(Option<tilejit_ir::Array>),
    Arrays(std::vec::IntoIter<tilejit_ir::Array>),
    Tensors(std::vec::IntoIter<Tensor>),
}

impl Outputs {
    pub(crate) fn from_arrays(v: Vec<tilejit_ir::Array>) -> Outputs {
        Outputs(OutputsInner::Arrays(v.into_iter()))
    }

    pub(crate) fn one(a: tilejit_ir::Array) -> Outputs {
        Outputs(OutputsInner::One(Some(a)))
    }

    pub(crate) fn from_tensor_vec(v: Vec<Tensor>) -> Outputs {
        Outputs(OutputsInner::Tensors(v.into_iter()))
    }
}

impl Outputs {
    /// An error unless every output was taken (a returned struct's check).
    pub fn finish(mut self) -> Result<()> {
        match self.next() {
            None => Ok(()),
            Some(_) => Err(kind_error("no more outputs")),
        }
    }
}

impl Iterator for Outputs {
    type Item = Tensor;
    fn next(&mut self) -> Option<Tensor> {
        match &mut self.0 {
            OutputsInner::One(a) => a.take().map(Tensor::concrete),
            OutputsInner::Arrays(it) => it.next().map(Tensor::concrete),
            OutputsInner::Tensors(it) => it.next(),
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.0 {
            OutputsInner::One(a) => (a.is_some() as usize, Some(a.is_some() as usize)),
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
    fn push_tensors(self, out: &mut Vec<Tensor>) {
        out.push(self)
    }
    fn take_from(v: &mut Outputs) -> Result<Self> {
        v.next().ok_or_else(|| kind_error("another output"))
    }
}

/// A list of tensors, as many as the body returned (a program always
/// returns that many): a KV cache's per-layer tensors, say.
impl JitOutput for Vec<Tensor> {
    fn into_tensors(self) -> Vec<Tensor> {
        self
    }
    fn from_tensors(v: Outputs) -> Result<Self> {
        Ok(v.collect())
    }
    fn push_tensors(self, out: &mut Vec<Tensor>) {
        out.extend(self)
    }
}

/// A tensor, then a list of tensors: every output after the first.
impl JitOutput for (Tensor, Vec<Tensor>) {
    fn into_tensors(self) -> Vec<Tensor> {
        let mut out = Vec::with_capacity(1 + self.1.len());
        out.push(self.0);
        out.extend(self.1);
        out
    }
    fn from_tensors(mut v: Outputs) -> Result<Self> {
        let first = v.next().ok_or_else(|| kind_error("at least one output"))?;
        Ok((first, v.collect()))
    }
}

/// A value made of jit arguments (JAX's pytrees): it crosses the jit
/// boundary as its leaves, in order. Tuples of up to 16 (for
/// [`JitFn::call`](crate::JitFn::call)), tensors, floats, integers, bools,
/// `Vec`s and slices of these, and structs that `#[derive(JitArgs)]`.
///
/// A list is its length (a [`Mark`] leaf, so another length is another
/// signature) then its elements. A derived struct is a structure key (a
/// [`Mark`] hashing its name and its fields' names and types, so two
/// structs with the same leaves never share a program) then its fields in
/// order.
///
/// `#[derive(JitArgs)]` (this name, from `tilejit` or its prelude) makes a
/// struct with named fields one: its fields may be `Tensor`s, `Vec`s of
/// them, integers and `bool`s (static values that key the cache), `f32` or
/// `f64` (static too, keyed by their bits, since the body reads them as
/// Rust floats: for a runtime scalar use a rank-0 `Tensor` field), and
/// other derived structs. A struct whose fields are all tensors or such
/// structs may also be returned ([`JitOutput`]).
///
/// ```
/// use tilejit::prelude::*;
///
/// #[derive(JitArgs)]
/// struct Layer { w: Tensor, b: Tensor }
///
/// #[derive(JitArgs)]
/// struct Mlp { layers: Vec<Layer>, leak: f32 }
///
/// #[jit]
/// fn mlp(x: &Tensor, m: &Mlp) -> Tensor {
///     let mut h = x.clone();
///     for l in &m.layers {
///         let z = h.matmul(&l.w) + &l.b;
///         h = z.maximum(&(&z * m.leak));
///     }
///     h
/// }
///
/// let layer = |v: f64| Layer {
///     w: Tensor::full(&[2, 2], v, DType::F32),
///     b: Tensor::ones(&[2], DType::F32),
/// };
/// let x = Tensor::ones(&[1, 2], DType::F32);
/// let m = Mlp { layers: vec![layer(1.0), layer(-1.0)], leak: 0.5 };
/// // [1,1] -> [3,3] -> [-5,-5] -> leaky: [-2.5,-2.5]
/// assert_eq!(mlp(&x, &m)?.to_vec::<f32>()?, [-2.5, -2.5]);
/// // Another number of layers is another signature, never a wrong program.
/// let m1 = Mlp { layers: vec![layer(1.0)], leak: 0.5 };
/// assert_eq!(mlp(&x, &m1)?.to_vec::<f32>()?, [3.0, 3.0]);
/// assert_eq!(mlp::jit().stats().traces, 2);
/// # Ok::<(), tilejit::Error>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a jit argument",
    note = "jit arguments are tensors, floats, integers, bools, `Vec`s and slices of these, \
            and structs that `#[derive(tilejit::JitArgs)]`"
)]
pub trait JitArgs {
    /// Appends this value's leaves to `out`.
    fn push_args<'a>(&'a self, out: &mut Vec<ArgValue<'a>>);
    /// The leaves in order.
    fn args(&self) -> Vec<ArgValue<'_>> {
        let mut out = Vec::new();
        self.push_args(&mut out);
        out
    }
}

/// Rebuilds a [`JitArgs`] value from the leaves a jit body receives (each
/// tensor traced, each float a rank-0 weak tensor); `#[derive(JitArgs)]`
/// implements it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be rebuilt in a jit body",
    note = "jit parameters are tensors, floats, integers, bools, `&[Tensor]`, `Vec<Tensor>` \
            and structs that `#[derive(tilejit::JitArgs)]`"
)]
#[doc(hidden)]
pub trait FromLeaves: Sized {
    /// Takes this value's leaves from the front of `leaves`.
    fn from_leaves(leaves: &mut Leaves<'_>) -> Result<Self>;
}

/// The leaves a jit body receives, taken in order by [`FromLeaves`].
#[doc(hidden)]
pub struct Leaves<'a> {
    it: std::slice::Iter<'a, TraceValue>,
}

impl<'a> Leaves<'a> {
    /// The leaves of a whole call.
    pub fn new(values: &'a [TraceValue]) -> Self {
        Leaves { it: values.iter() }
    }

    /// The next leaf.
    #[allow(clippy::should_implement_trait)] // a Result, not an Option
    pub fn next(&mut self) -> Result<&'a TraceValue> {
        self.it.next().ok_or_else(|| kind_error("another leaf"))
    }

    /// The next leaf as a static integer (or a list's length, or a
    /// structure key).
    pub fn int(&mut self) -> Result<i64> {
        match self.next()? {
            TraceValue::Int(i) => Ok(*i),
            _ => Err(kind_error("an integer")),
        }
    }

    /// Checks the next leaf is the structure key `key` of `name`.
    pub fn expect_key(&mut self, key: u64, name: &str) -> Result<()> {
        match self.int()? as u64 == key {
            true => Ok(()),
            false => Err(kind_error(&format!("the structure key of `{name}`"))),
        }
    }

    /// An error unless every leaf was taken.
    pub fn finish(mut self) -> Result<()> {
        match self.it.next() {
            None => Ok(()),
            Some(_) => Err(kind_error("no more leaves")),
        }
    }
}

impl<T: JitArgs + ?Sized> JitArgs for &T {
    fn push_args<'a>(&'a self, out: &mut Vec<ArgValue<'a>>) {
        (**self).push_args(out)
    }
}

impl<T: JitArgs> JitArgs for [T] {
    fn push_args<'a>(&'a self, out: &mut Vec<ArgValue<'a>>) {
        out.push(ArgValue::Mark(Mark::Len(self.len() as u64)));
        for x in self {
            x.push_args(out);
        }
    }
}

impl<T: JitArgs> JitArgs for Vec<T> {
    fn push_args<'a>(&'a self, out: &mut Vec<ArgValue<'a>>) {
        self.as_slice().push_args(out)
    }
}

impl<T: FromLeaves> FromLeaves for Vec<T> {
    fn from_leaves(leaves: &mut Leaves<'_>) -> Result<Self> {
        let n = leaves.int()?;
        (0..n).map(|_| T::from_leaves(leaves)).collect()
    }
}

impl JitArgs for Tensor {
    fn push_args<'a>(&'a self, out: &mut Vec<ArgValue<'a>>) {
        out.push(ArgValue::Tensor(self))
    }
}

impl FromLeaves for Tensor {
    fn from_leaves(leaves: &mut Leaves<'_>) -> Result<Self> {
        Tensor::from_trace(leaves.next()?)
    }
}

macro_rules! leaf_args {
    ($($t:ty)*) => {$(
        impl JitArgs for $t {
            fn push_args<'a>(&'a self, out: &mut Vec<ArgValue<'a>>) {
                out.push(self.to_arg())
            }
        }
    )*};
}
leaf_args!(f32 f64 bool i8 i16 i32 i64 u8 u16 u32 u64 usize isize);

macro_rules! leaf_from {
    ($($t:ty)*) => {$(
        impl FromLeaves for $t {
            fn from_leaves(leaves: &mut Leaves<'_>) -> Result<Self> {
                <$t>::from_trace(leaves.next()?)
            }
        }
    )*};
}
leaf_from!(bool i8 i16 i32 i64 u8 u16 u32 u64 usize isize);

/// The elements of a list that must hold exactly `N`, as an array to
/// destructure, or an error naming the caller's line (in a jit body, `?`
/// makes it the call's error, where indexing a short list would panic):
/// `let [b1, b2] = tilejit::args::exactly(&m.biases)?;`.
///
/// ```
/// use tilejit::prelude::*;
///
/// #[jit]
/// fn pair_sum(xs: &[Tensor]) -> Tensor {
///     let [a, b] = tilejit::args::exactly(xs)?;
///     a + b
/// }
///
/// let one = Tensor::ones(&[2], DType::F32);
/// assert_eq!(pair_sum(&[one.clone(), one.clone()])?.to_vec::<f32>()?, [2.0, 2.0]);
/// let e = pair_sum(&[one]).unwrap_err().to_string();
/// assert!(e.contains("a list of 1 where 2 are needed"), "{e}");
/// # Ok::<(), tilejit::Error>(())
/// ```
#[track_caller]
pub fn exactly<const N: usize, T>(xs: &[T]) -> Result<&[T; N]> {
    let location = crate::error::Loc::caller();
    xs.try_into().map_err(|_| Error::Op {
        op: "exactly",
        source: tilejit_ir::IrError::Arguments(format!(
            "a list of {} where {N} are needed",
            xs.len()
        )),
        location,
    })
}

/// A float field of a `#[derive(JitArgs)]` struct: a static value (its bits
/// are an integer leaf), since the body reads it as a Rust float. For a
/// runtime scalar, use a rank-0 `Tensor` field.
#[doc(hidden)]
pub trait StaticFloat: Sized {
    /// Appends the value's bits as an integer leaf.
    fn push_static(&self, out: &mut Vec<ArgValue<'_>>);
    /// Takes the value back from its integer leaf.
    fn from_static(leaves: &mut Leaves<'_>) -> Result<Self>;
}

impl StaticFloat for f32 {
    fn push_static(&self, out: &mut Vec<ArgValue<'_>>) {
        out.push(ArgValue::Int(self.to_bits() as i64))
    }
    fn from_static(leaves: &mut Leaves<'_>) -> Result<Self> {
        Ok(f32::from_bits(leaves.int()? as u32))
    }
}

impl StaticFloat for f64 {
    fn push_static(&self, out: &mut Vec<ArgValue<'_>>) {
        out.push(ArgValue::Int(self.to_bits() as i64))
    }
    fn from_static(leaves: &mut Leaves<'_>) -> Result<Self> {
        Ok(f64::from_bits(leaves.int()? as u64))
    }
}

impl JitArgs for () {
    fn push_args<'a>(&'a self, _: &mut Vec<ArgValue<'a>>) {}
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
        impl<$($T: JitArgs),*> JitArgs for ($($T,)*) {
            fn push_args<'a>(&'a self, out: &mut Vec<ArgValue<'a>>) {
                $(self.$i.push_args(out);)*
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
