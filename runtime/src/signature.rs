//! The shape signature that keys a jit function's handler cache: per
//! argument, a tensor's dtype and shape, a float parameter's dtype (its value
//! is a runtime parameter and does not retrace), or the value of an integer
//! or bool argument (static: it may change the traced program).

use std::fmt;
use tilejit_ir::{DType, TensorType};

/// One argument's part of a signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgSig {
    /// A tensor argument.
    Tensor(TensorType),
    /// A float scalar argument: a runtime parameter of this dtype.
    Float(DType),
    /// An integer argument (static value).
    Int(i64),
    /// A bool argument (static value).
    Bool(bool),
}

impl fmt::Display for ArgSig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgSig::Tensor(t) => write!(f, "{t}"),
            ArgSig::Float(d) => write!(f, "{d} param"),
            ArgSig::Int(v) => write!(f, "int {v}"),
            ArgSig::Bool(v) => write!(f, "bool {v}"),
        }
    }
}

/// The cache key of one traced program.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Signature {
    /// Per argument, in order.
    pub args: Vec<ArgSig>,
}

impl Signature {
    /// How far apart two signatures are (for "nearest seen" miss
    /// explanations): differing arguments, then differing dims.
    pub fn distance(&self, other: &Signature) -> (usize, usize) {
        if self.args.len() != other.args.len() {
            return (usize::MAX, 0);
        }
        let mut args = 0;
        let mut dims = 0;
        for (a, b) in self.args.iter().zip(&other.args) {
            if a != b {
                args += 1;
                dims += match (a, b) {
                    (ArgSig::Tensor(x), ArgSig::Tensor(y)) if x.shape.rank() == y.shape.rank() => x
                        .shape
                        .iter()
                        .zip(y.shape.iter())
                        .filter(|(p, q)| p != q)
                        .count(),
                    _ => 8,
                };
            }
        }
        (args, dims)
    }

    /// Lists the arguments where `self` differs from `seen`:
    /// `"args[0]: f32[8,8] vs nearest seen f32[12,12]"`.
    pub fn explain_against(&self, seen: &Signature) -> String {
        if self.args.len() != seen.args.len() {
            return format!(
                "{} arguments vs {} in the nearest seen signature",
                self.args.len(),
                seen.args.len()
            );
        }
        let parts: Vec<String> = self
            .args
            .iter()
            .zip(&seen.args)
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(i, (a, b))| format!("args[{i}]: {a} vs nearest seen {b}"))
            .collect();
        if parts.is_empty() {
            "identical to a seen signature".to_string()
        } else {
            parts.join("; ")
        }
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{a}")?;
        }
        f.write_str(")")
    }
}
