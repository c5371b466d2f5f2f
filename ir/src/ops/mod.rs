//! The op table: one row per elementwise op and reduction, from which the
//! op enums ([`UnaryOp`], [`BinaryOp`], [`CmpOp`], [`ReduceOp`]), their
//! `ALL` lists, names and text mnemonics are generated, and which every
//! consumer reads (type inference, the reference interpreter, error
//! bounds, fusion cost, host and device lowering, the simulator, the ISA
//! verifier, `docs/ops.md`). The rows are in `table.rs`.
//!
//! # How a forgotten column or op is caught
//!
//! The enums exist only through [`op_table!`](crate::op_table): a variant
//! is a row, so an op cannot exist without one. A row is a struct
//! literal of its descriptor (`UnaryDef`, ...), so a row that leaves out
//! a column (its interpreter function, bound rule, host lowering, ...)
//! does not compile (`E0063 missing field`):
//!
//! ```compile_fail,E0063
//! tilejit_ir::op_table! {
//!     /// A unary op table missing every column but the name.
//!     enum MyUnary: tilejit_ir::ops::UnaryDef {
//!         /// identity
//!         Id "id" => tilejit_ir::ops::UnaryDef { name: "id" },
//!     }
//! }
//! ```
//!
//! Consumers match on the descriptor's typed columns (`UnaryHost`,
//! `UnaryBound`, ...) exhaustively, never on op names with a wildcard, so
//! a new op reaches only code its row chose.

pub mod doc;
mod libcalls;
mod table;

use crate::dtype::DType;
use crate::graph::Op;

pub use table::{BinaryOp, CmpOp, ReduceOp, UnaryOp};

/// Defines op enums from rows. Each `enum` block becomes a `pub enum` with
/// one variant per row (its doc line is the row's `///` line), and an
/// `impl` with `ALL` (table order), `def()` (the row's descriptor, an
/// exhaustive match), `doc()`, `text()` (the mnemonic of the graph and
/// kernel text forms) and `from_text()`.
#[macro_export]
macro_rules! op_table {
    ($(
        $(#[$em:meta])*
        enum $E:ident : $Def:ty {
            $( #[doc = $doc:literal] $V:ident $text:literal => $row:expr, )*
        }
    )*) => {$(
        $(#[$em])*
        #[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
        pub enum $E { $( #[doc = $doc] $V, )* }

        impl $E {
            /// Every op of this kind, in table order.
            pub const ALL: [$E; [$(stringify!($V)),*].len()] = [$($E::$V),*];

            /// This op's row of the table.
            pub fn def(self) -> &'static $Def {
                match self { $( $E::$V => { const ROW: $Def = $row; &ROW } )* }
            }

            /// The row's one-line doc.
            pub fn doc(self) -> &'static str {
                match self { $( $E::$V => $doc.trim(), )* }
            }

            /// The mnemonic in the graph and kernel text forms.
            pub fn text(self) -> &'static str {
                match self { $( $E::$V => $text, )* }
            }

            /// The op whose mnemonic is `text`.
            pub fn from_text(text: &str) -> Option<$E> {
                Self::ALL.iter().copied().find(|o| o.text() == text)
            }
        }
    )*};
}

/// A Rust function generated host code calls by symbol (`extern "C"`,
/// f64 in and out; f32 kernels promote and round the result).
#[derive(Copy, Clone, Debug)]
pub struct Libcall {
    /// The symbol code is linked against (also the reload allow-list's).
    pub symbol: &'static str,
    /// Its address.
    pub f: extern "C" fn(f64) -> f64,
}

/// A two-operand f64 libcall (see [`Libcall`]).
#[derive(Copy, Clone, Debug)]
pub struct Libcall2 {
    /// The symbol.
    pub symbol: &'static str,
    /// Its address.
    pub f: extern "C" fn(f64, f64) -> f64,
}

/// A two-operand i64 libcall (narrower integers are widened).
#[derive(Copy, Clone, Debug)]
pub struct Libcall2I {
    /// The symbol.
    pub symbol: &'static str,
    /// Its address.
    pub f: extern "C" fn(i64, i64) -> i64,
}

/// Host lowerings written as Cranelift instructions for every dtype the op
/// accepts (codegen's `Lowerer::unary` matches these exhaustively).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // each is its op
pub enum Inline {
    Neg,
    Abs,
    Square,
    Relu,
    Sqrt,
    Rsqrt,
    Recip,
    Floor,
    Ceil,
    Round,
    Sign,
}

/// The f32 routines of codegen's inline math (`Math`, polynomial
/// approximations that also run on four lanes).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // each is its op
pub enum MathFn {
    Exp,
    Log,
    Tanh,
    Sigmoid,
    Gelu,
    Sin,
    Cos,
    Erf,
}

/// f32 functions whose native result is the IEEE result of the op's f64
/// reference rounded to f32 (the simulator runs these on f32 directly).
/// An enum, not a function pointer, so that the simulator's loops stay
/// monomorphic: it matches on it, each arm calling [`ExactF32::apply`]
/// with a constant.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // each is its op
pub enum ExactF32 {
    Neg,
    Abs,
    Relu,
    Floor,
    Ceil,
    Round,
    Sign,
}

impl ExactF32 {
    /// The function.
    #[inline(always)]
    pub fn apply(self, a: f32) -> f32 {
        match self {
            ExactF32::Neg => -a,
            ExactF32::Abs => a.abs(),
            ExactF32::Relu => {
                if a.is_nan() || a > 0.0 {
                    a
                } else {
                    0.0
                }
            }
            ExactF32::Floor => a.floor(),
            ExactF32::Ceil => a.ceil(),
            ExactF32::Round => a.round_ties_even(),
            ExactF32::Sign => {
                if a == 0.0 || a.is_nan() {
                    a + 0.0
                } else {
                    a.signum()
                }
            }
        }
    }
}

/// How the host backend computes a unary op.
#[derive(Copy, Clone, Debug)]
pub enum UnaryHost {
    /// Cranelift instructions, every dtype.
    Inline(Inline),
    /// f32: inline math (vectorised); f64: a call to `f64`.
    Math {
        /// The f32 routine.
        f32: MathFn,
        /// The f64 libcall.
        f64: Libcall,
    },
    /// A call for every float dtype (f32 promoted, the result rounded);
    /// kernels using it stay scalar. Float-only ops only.
    Libcall(Libcall),
}

/// Where a monotone function's change over `[x - E, x + E]` cannot be
/// stated beyond its NaN results.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Domain {
    /// Only NaN endpoints (outside the domain) make it unbounded.
    All,
    /// The interval must be positive (`x - E > 0`).
    Positive,
    /// The interval must not contain 0 (a pole).
    NoPole,
}

/// A unary op's forward error bound (`ir::bound`): `E` is the operand's
/// bound, `u` the dtype's unit roundoff, `v` the result.
#[derive(Copy, Clone, Debug)]
pub enum UnaryBound {
    /// The operand's bound moves with the value: `E` (neg, abs, relu).
    Carried,
    /// `2|x|E + E^2` plus one rounding.
    Square,
    /// Its change over the interval (at most `sqrt(E)` near 0) plus one
    /// rounding.
    Sqrt,
    /// A monotone `f`: its change over `[x - E, x + E]` plus `ulps`
    /// roundings.
    Monotone {
        /// The exact function.
        f: fn(f64) -> f64,
        /// Where the interval must lie.
        domain: Domain,
        /// Roundings allowed.
        ulps: f64,
    },
    /// Slope at most `slope`: `slope·E` plus `ulps` roundings, plus `u|x|`
    /// when the formula `cancels` for large `|x|`.
    Lipschitz {
        /// The largest slope.
        slope: f64,
        /// Roundings allowed.
        ulps: f64,
        /// Adds `u|x|`.
        cancels: bool,
    },
    /// Exact, but a step: `E + 1` for an inexact operand (floor, ceil,
    /// round).
    Step,
    /// Exact, or 2 where the operand's bound spans 0 (sign).
    Sign,
}

/// One unary op's row.
#[derive(Copy, Clone, Debug)]
pub struct UnaryDef {
    /// Reference semantics on floats (f64, rounded to the dtype after).
    pub float: fn(f64) -> f64,
    /// Reference semantics on integers (wrapped to the dtype after);
    /// `None`: floats only. Bool is never accepted.
    pub int: Option<fn(i64) -> i64>,
    /// The f32 function whose native result is the IEEE result of
    /// `float` rounded (the simulator's fast path); `None` for
    /// approximated functions.
    pub exact_f32: Option<ExactF32>,
    /// Verify's error bound.
    pub bound: UnaryBound,
    /// Fusion cost when inlined (transcendentals 12): at 8 or more, a value
    /// shared by several kernels is kept instead of recomputed.
    pub cost: u32,
    /// Host lowering.
    pub host: UnaryHost,
}

/// How the host backend computes a binary op.
#[derive(Copy, Clone, Debug)]
pub struct BinaryHost {
    /// Floats call this (scalar kernels); `None`: inline.
    pub float: Option<Libcall2>,
    /// Integers call this; `None`: inline.
    pub int: Option<Libcall2I>,
}

/// One binary op's row.
#[derive(Copy, Clone, Debug)]
pub struct BinaryDef {
    /// The user-facing name (error messages, frontend).
    pub name: &'static str,
    /// Reference semantics on floats; `None`: integers only (the bitwise
    /// ops), and type inference rejects floats.
    pub float: Option<fn(f64, f64) -> f64>,
    /// Reference semantics on integers (wrapping).
    pub int: fn(i64, i64) -> i64,
    /// Fusion cost when inlined.
    pub cost: u32,
    /// Host lowering.
    pub host: BinaryHost,
}

/// One comparison's row.
#[derive(Copy, Clone, Debug)]
pub struct CmpDef {
    /// Whether the comparison holds for an ordering (`None`: unordered,
    /// a NaN operand).
    pub holds: fn(Option<std::cmp::Ordering>) -> bool,
}

/// One reduction's row.
#[derive(Copy, Clone, Debug)]
pub struct ReduceDef {
    /// The user-facing name.
    pub name: &'static str,
    /// Float identity and combine.
    pub float: (f64, fn(f64, f64) -> f64),
    /// Integer identity and combine (wrapping).
    pub int: (i64, fn(i64, i64) -> i64),
    /// Whether it is defined over an empty axis (it has an identity).
    pub empty_ok: bool,
    /// Whether f16/bf16 partials of a split reduction stay f32 (sums and
    /// products round once, as one reduction would).
    pub widen_partials: bool,
    /// The mnemonic of its windowed form ([`Op::Pool`]), if it pools.
    pub pool: Option<&'static str>,
}

impl UnaryOp {
    /// The user-facing name (also the text mnemonic).
    pub fn name(self) -> &'static str {
        self.text()
    }

    /// Whether the op accepts dtype `d`.
    pub fn accepts(self, d: DType) -> bool {
        d.is_float() || (d.is_int() && self.def().int.is_some())
    }

    /// The reference integer function on integer dtype `d` (`None` where
    /// the row has none): the row's `int`, except that on `u64` (held as
    /// bit patterns) `abs` and `relu` keep the value and `sign` is 0 or 1.
    pub fn int_fn(self, d: DType) -> Option<fn(i64) -> i64> {
        let f = self.def().int?;
        if d != DType::U64 {
            return Some(f);
        }
        Some(match self {
            UnaryOp::Abs | UnaryOp::Relu => |x| x,
            UnaryOp::Sign => |x| (x != 0) as i64,
            _ => f,
        })
    }
}

impl BinaryOp {
    /// The user-facing name (`maximum`; the text mnemonic is `max`).
    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// Whether the op accepts dtype `d` (every numeric dtype, or integers
    /// only for a row without float semantics; never bool).
    pub fn accepts(self, d: DType) -> bool {
        d.is_int() || (d.is_float() && self.def().float.is_some())
    }

    /// The reference integer function on integer dtype `d`: the row's
    /// `int`, except on `u64` (held as bit patterns), whose division,
    /// mod, max/min and shifts read the bits unsigned (a power's exponent
    /// stays signed, as the host's `tj_ipow` reads it: one above
    /// `i64::MAX` gives 0).
    pub fn int_fn(self, d: DType) -> fn(i64, i64) -> i64 {
        if d != DType::U64 {
            return self.def().int;
        }
        match self {
            BinaryOp::Div => crate::scalar::u64_div,
            BinaryOp::Rem => crate::scalar::u64_rem,
            BinaryOp::Max => crate::scalar::u64_max,
            BinaryOp::Min => crate::scalar::u64_min,
            BinaryOp::Shl => crate::scalar::u64_shl,
            BinaryOp::Shr => crate::scalar::u64_shr,
            _ => self.def().int,
        }
    }
}

impl CmpOp {
    /// The user-facing name (also the text mnemonic).
    pub fn name(self) -> &'static str {
        self.text()
    }
}

impl ReduceOp {
    /// The user-facing name (`sum`; the text mnemonic is `reduce_sum`).
    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// The reduction whose windowed form ([`Op::Pool`]) has mnemonic
    /// `text` (`pool_max`).
    pub fn from_pool_text(text: &str) -> Option<ReduceOp> {
        ReduceOp::ALL
            .into_iter()
            .find(|r| r.def().pool == Some(text))
    }

    /// The integer identity and combine on integer dtype `d`: the row's,
    /// except that a `u64` max starts at 0 and a min at `u64::MAX`, and
    /// both compare unsigned.
    pub fn int_for(self, d: DType) -> (i64, fn(i64, i64) -> i64) {
        match (self, d) {
            (ReduceOp::Max, DType::U64) => (0, crate::scalar::u64_max),
            (ReduceOp::Min, DType::U64) => (-1, crate::scalar::u64_min),
            _ => self.def().int,
        }
    }
}

/// What an [`Op`] variant is, for passes that treat whole classes alike.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Input, param, literal, constant: no operands.
    Source,
    /// One result element from the operands' elements at the same index.
    Elementwise,
    /// Reduces axes.
    Reduction,
    /// matmul, conv: sums of products.
    Contraction,
    /// Moves elements (reshape, permute, broadcast, slice, concat, gather).
    Layout,
}

/// A per-variant descriptor of [`Op`].
#[derive(Copy, Clone, Debug)]
pub struct OpInfo {
    /// The text mnemonic.
    pub name: &'static str,
    /// Number of node operands.
    pub arity: usize,
    /// Its class.
    pub kind: OpKind,
    /// Fusion cost when inlined into a kernel expression; `None`: never
    /// inlined (a kernel of its own or a materialised buffer).
    pub inline_cost: Option<u32>,
}

impl Op {
    /// This op's descriptor.
    pub fn info(&self) -> OpInfo {
        use OpKind::*;
        let info = |name, arity, kind, inline_cost| OpInfo {
            name,
            arity,
            kind,
            inline_cost,
        };
        match self {
            Op::Input { .. } => info("input", 0, Source, None),
            Op::Param { .. } => info("param", 0, Source, Some(0)),
            Op::Full { .. } => info("full", 0, Source, Some(0)),
            Op::Constant { .. } => info("const", 0, Source, None),
            Op::Unary(u, _) => info(u.text(), 1, Elementwise, Some(u.def().cost)),
            Op::Binary(b, ..) => info(b.text(), 2, Elementwise, Some(b.def().cost)),
            Op::Compare(c, ..) => info(c.text(), 2, Elementwise, Some(1)),
            Op::Select(..) => info("select", 3, Elementwise, Some(1)),
            Op::Cast(..) => info("cast", 1, Elementwise, Some(1)),
            Op::Bitcast(..) => info("bitcast", 1, Elementwise, Some(1)),
            Op::Reduce(r, ..) => info(r.text(), 1, Reduction, None),
            Op::MatMul(..) => info("matmul", 2, Contraction, None),
            Op::Conv(..) => info("conv", 2, Contraction, None),
            Op::Pool(r, ..) => info(r.def().pool.unwrap_or("pool"), 1, Reduction, None),
            Op::Reshape(..) => info("reshape", 1, Layout, None),
            Op::Permute(..) => info("permute", 1, Layout, Some(0)),
            Op::Broadcast(..) => info("broadcast", 1, Layout, Some(0)),
            Op::Slice(..) => info("slice", 1, Layout, Some(0)),
            Op::Concat(..) => info("cat", 2, Layout, None),
            Op::Gather(..) => info("gather", 2, Layout, Some(1)),
        }
    }
}

/// Every libcall the op table names (unary, binary float and integer), by
/// symbol and address, for codegen's registration and reload allow-list.
pub fn libcalls() -> Vec<(&'static str, *const u8)> {
    let mut out = Vec::new();
    for u in UnaryOp::ALL {
        match u.def().host {
            UnaryHost::Inline(_) => {}
            UnaryHost::Math { f64: c, .. } | UnaryHost::Libcall(c) => {
                out.push((c.symbol, c.f as *const u8))
            }
        }
    }
    for c in BinaryOp::ALL.iter().filter_map(|b| b.def().host.float) {
        out.push((c.symbol, c.f as *const u8));
    }
    for c in BinaryOp::ALL.iter().filter_map(|b| b.def().host.int) {
        out.push((c.symbol, c.f as *const u8));
    }
    out
}

#[cfg(test)]
mod tests;
