//! The shape signature that keys a jit function's handler cache: per
//! argument, a tensor's dtype and shape, a float parameter's dtype (its value
//! is a runtime parameter and does not retrace), or the value of an integer
//! or bool argument (static: it may change the traced program). A list or
//! struct argument is its leaves, led by a [`Mark`]: the list's length or
//! the struct's structure key.
//!
//! Snapshots store signatures in a stable binary form
//! ([`Signature::encode`], `Signature::decode`); `Display` is for people.

use crate::persist::{Reader, Writer};
use std::fmt;
use tilejit_ir::{DType, Shape, TensorType};

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
    /// The leaf that leads a list or struct argument's leaves.
    Mark(Mark),
}

/// What leads a list or struct argument's leaves, so another length or
/// layout is another signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mark {
    /// A list of this many elements.
    Len(u64),
    /// A struct with this structure key (a hash of its name and its
    /// fields' names and types).
    Struct(u64),
}

impl fmt::Display for ArgSig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgSig::Tensor(t) => write!(f, "{t}"),
            ArgSig::Float(d) => write!(f, "{d} param"),
            ArgSig::Int(v) => write!(f, "int {v}"),
            ArgSig::Bool(v) => write!(f, "bool {v}"),
            ArgSig::Mark(Mark::Len(n)) => write!(f, "len {n}"),
            ArgSig::Mark(Mark::Struct(k)) => write!(f, "struct {:08x}", k >> 32),
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

    /// Lists the arguments where `self` differs from `seen` (the first
    /// four, then how many more):
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
        // A model's weights can differ by the dozen: the first few say it.
        const SHOWN: usize = 4;
        match parts.len() {
            0 => "identical to a seen signature".to_string(),
            n if n <= SHOWN => parts.join("; "),
            n => format!("{}; and {} more", parts[..SHOWN].join("; "), n - SHOWN),
        }
    }
}

/// A dtype's stable byte: its index in [`DType::ALL`].
pub(crate) fn dtype_byte(d: DType) -> u8 {
    DType::ALL.iter().position(|x| *x == d).unwrap_or(0) as u8
}

/// The dtype of a [`dtype_byte`].
pub(crate) fn dtype_of_byte(b: u8) -> Result<DType, String> {
    DType::ALL
        .get(b as usize)
        .copied()
        .ok_or_else(|| format!("bad dtype byte {b}"))
}

/// A tensor type: dtype byte, rank byte, each dim as u64.
pub(crate) fn encode_type(w: &mut Writer, t: TensorType) {
    w.u8(dtype_byte(t.dtype));
    w.u8(t.shape.rank() as u8);
    for &d in t.shape.dims() {
        w.u64(d as u64);
    }
}

/// Reads [`encode_type`].
pub(crate) fn decode_type(r: &mut Reader<'_>) -> Result<TensorType, String> {
    let dtype = dtype_of_byte(r.u8()?)?;
    let rank = r.u8()? as usize;
    let dims = (0..rank)
        .map(|_| r.usize())
        .collect::<Result<Vec<_>, _>>()?;
    let shape = Shape::new(&dims).map_err(|e| e.to_string())?;
    Ok(TensorType::new(dtype, shape))
}

impl Signature {
    /// The stable binary form: a count, then per argument a tag byte (0
    /// tensor, 1 float, 2 int, 3 bool, 4 list length, 5 structure key) and
    /// its value, little endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.count(self.args.len());
        for a in &self.args {
            match *a {
                ArgSig::Tensor(t) => {
                    w.u8(0);
                    encode_type(&mut w, t);
                }
                ArgSig::Float(d) => {
                    w.u8(1);
                    w.u8(dtype_byte(d));
                }
                ArgSig::Int(v) => {
                    w.u8(2);
                    w.u64(v as u64);
                }
                ArgSig::Bool(v) => {
                    w.u8(3);
                    w.u8(v as u8);
                }
                ArgSig::Mark(Mark::Len(n)) => {
                    w.u8(4);
                    w.u64(n);
                }
                ArgSig::Mark(Mark::Struct(k)) => {
                    w.u8(5);
                    w.u64(k);
                }
            }
        }
        w.out
    }

    /// Reads [`Signature::encode`]'s form; any flaw is a message.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Signature, String> {
        let n = r.count(2)?;
        let mut args = Vec::with_capacity(n);
        for _ in 0..n {
            args.push(match r.u8()? {
                0 => ArgSig::Tensor(decode_type(r)?),
                1 => ArgSig::Float(dtype_of_byte(r.u8()?)?),
                2 => ArgSig::Int(r.u64()? as i64),
                3 => match r.u8()? {
                    0 => ArgSig::Bool(false),
                    1 => ArgSig::Bool(true),
                    b => return Err(format!("bad bool byte {b}")),
                },
                4 => ArgSig::Mark(Mark::Len(r.u64()?)),
                5 => ArgSig::Mark(Mark::Struct(r.u64()?)),
                t => return Err(format!("bad argument tag {t}")),
            });
        }
        Ok(Signature { args })
    }
}

impl Signature {
    /// The signature in at most about `max` characters, for a listing
    /// (as JAX abbreviates pytrees): a run of equal leaves reads
    /// `f32[768]×12`, a repeated block of leaves (a struct per layer)
    /// `(struct 1a2b3c4d, f32[768], f32[768,768])×12`; past `max`, the
    /// middle is cut (`…`) and a digest of the whole (`#1a2b3c`) tells
    /// two cut signatures apart. Short signatures print as
    /// [`Display`](fmt::Display) does.
    pub fn abbreviated(&self, max: usize) -> String {
        let leaves: Vec<String> = self.args.iter().map(|a| a.to_string()).collect();
        abbreviate(&leaves, max)
    }
}

/// `(leaves)` in about `max` characters (see [`Signature::abbreviated`]).
pub(crate) fn abbreviate(leaves: &[String], max: usize) -> String {
    let full = format!("({})", leaves.join(", "));
    if full.len() <= max {
        return full;
    }
    let parts = runs(leaves);
    let text = format!("({})", parts.join(", "));
    if text.len() <= max {
        return text;
    }
    // Keep whole parts from both ends, about half the budget each.
    let (mut head, mut tail) = (String::new(), Vec::new());
    let (mut i, mut j) = (0, parts.len());
    let budget = max.saturating_sub(24) / 2;
    while i < j && head.len() + parts[i].len() <= budget {
        head.push_str(&parts[i]);
        head.push_str(", ");
        i += 1;
    }
    let mut tail_len = 0;
    while j > i && tail_len + parts[j - 1].len() <= budget {
        tail_len += parts[j - 1].len() + 2;
        tail.push(parts[j - 1].clone());
        j -= 1;
    }
    tail.reverse();
    // FNV-1a of the whole: stable across runs and platforms.
    let digest = full.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    format!(
        "({head}… {} more …{}{}) #{:06x}",
        j - i,
        if tail.is_empty() { "" } else { ", " },
        tail.join(", "),
        digest >> 40
    )
}

/// `leaves` with each run of a repeated block (of up to 16 leaves)
/// written once with its count.
fn runs(leaves: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < leaves.len() {
        // The block that covers the most leaves from `i`, repeated.
        let mut best = (1, 1);
        for p in 1..=16.min(leaves.len() - i) {
            let block = &leaves[i..i + p];
            let mut k = 1;
            while leaves.get(i + (k + 1) * p - 1).is_some()
                && &leaves[i + k * p..i + (k + 1) * p] == block
            {
                k += 1;
            }
            if k > 1 && p * k > best.0 * best.1 {
                best = (p, k);
            }
        }
        let (p, k) = best;
        let block = leaves[i..i + p].join(", ");
        out.push(match (p, k) {
            (_, 1) => block,
            (1, _) => format!("{block}×{k}"),
            _ => format!("({block})×{k}"),
        });
        i += p * k;
    }
    out
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

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests assert by unwrapping
mod tests {
    use super::*;

    #[test]
    fn a_long_signature_is_abbreviated_and_stays_distinct() {
        let t = |d: &[usize]| ArgSig::Tensor(TensorType::new(DType::F32, Shape::new(d).unwrap()));
        let mut args = vec![t(&[5, 64])];
        for _ in 0..12 {
            args.extend([ArgSig::Mark(Mark::Struct(7 << 32)), t(&[64]), t(&[64, 192])]);
        }
        args.extend([t(&[64]), t(&[64]), t(&[64]), t(&[64])]);
        let sig = Signature { args };
        assert!(sig.to_string().len() > 400);
        assert_eq!(
            sig.abbreviated(200),
            "(f32[5,64], (struct 00000007, f32[64], f32[64,192])×12, f32[64]×4)"
        );
        // Cut to fit; another first dim gives another digest.
        let cut = sig.abbreviated(40);
        assert!(
            cut.len() < 80 && cut.contains('…') && cut.contains('#'),
            "{cut}"
        );
        let mut other = sig.clone();
        other.args[0] = t(&[6, 64]);
        assert_ne!(other.abbreviated(40), cut);
        // Short ones print whole.
        let short = Signature {
            args: vec![t(&[2]), t(&[2])],
        };
        assert_eq!(short.abbreviated(200), "(f32[2], f32[2])");
    }

    #[test]
    fn a_signature_round_trips_through_its_binary_form() {
        let t = TensorType::new(DType::BF16, Shape::new(&[3, 0, 7]).unwrap());
        let sig = Signature {
            args: vec![
                ArgSig::Tensor(t),
                ArgSig::Float(DType::F64),
                ArgSig::Int(-5),
                ArgSig::Bool(true),
                ArgSig::Mark(Mark::Len(3)),
                ArgSig::Mark(Mark::Struct(u64::MAX - 7)),
            ],
        };
        let bytes = sig.encode();
        let mut r = Reader::new(&bytes);
        assert_eq!(Signature::decode(&mut r).unwrap(), sig);
        assert!(r.done());
        for n in 0..bytes.len() {
            assert!(Signature::decode(&mut Reader::new(&bytes[..n])).is_err());
        }
    }
}
