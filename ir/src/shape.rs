//! Shapes (rank 0..=8, stored inline so they are `Copy` and never allocate),
//! numpy broadcasting, axis normalisation, and `TensorType` = dtype + shape.

use crate::dtype::DType;
use crate::error::IrError;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::ops::Deref;

/// The largest rank a tensor may have.
pub const MAX_RANK: usize = 8;

/// A row-major shape of rank 0..=[`MAX_RANK`]. Dimensions may be zero.
/// Dimensions past the rank are always zero, so equality, hashing and
/// order over the used dimensions agree with those over the whole array.
#[derive(Copy, Clone, PartialOrd, Ord)]
pub struct Shape {
    dims: [usize; MAX_RANK],
    rank: u8,
}

// By hand, over the used dimensions only: every dispatch compares argument
// shapes, and the derived form compares all eight through a memcmp call.
impl PartialEq for Shape {
    fn eq(&self, other: &Shape) -> bool {
        self.rank == other.rank && self.dims().iter().zip(other.dims()).all(|(a, b)| a == b)
    }
}

impl Eq for Shape {}

impl std::hash::Hash for Shape {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.rank.hash(h);
        for d in self.dims() {
            d.hash(h);
        }
    }
}

/// The product of `dims` (sizes a file or a caller gives), or `None` on
/// overflow.
pub fn checked_product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl Shape {
    /// The rank-0 shape of a scalar.
    pub const SCALAR: Shape = Shape {
        dims: [0; MAX_RANK],
        rank: 0,
    };

    /// Makes a shape; fails if the rank exceeds [`MAX_RANK`].
    pub fn new(dims: &[usize]) -> Result<Shape, IrError> {
        if dims.len() > MAX_RANK {
            return Err(IrError::RankTooLarge { rank: dims.len() });
        }
        let mut s = Shape::SCALAR;
        s.dims[..dims.len()].copy_from_slice(dims);
        s.rank = dims.len() as u8;
        Ok(s)
    }

    /// The dimensions.
    pub fn dims(&self) -> &[usize] {
        &self.dims[..self.rank as usize]
    }

    /// The rank (number of dimensions).
    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    /// Number of elements; saturates at `usize::MAX` (see [`Shape::checked_numel`]).
    pub fn numel(&self) -> usize {
        self.checked_numel().unwrap_or(usize::MAX)
    }

    /// Number of elements, or `None` on overflow.
    pub fn checked_numel(&self) -> Option<usize> {
        checked_product(self.dims())
    }

    /// Row-major strides in elements.
    pub fn strides(&self) -> [usize; MAX_RANK] {
        let mut strides = [0usize; MAX_RANK];
        let mut acc = 1usize;
        for i in (0..self.rank()).rev() {
            strides[i] = acc;
            acc = acc.saturating_mul(self.dims[i]);
        }
        strides
    }

    /// The same shape with dimension `axis` replaced by `size`.
    pub fn with_dim(&self, axis: usize, size: usize) -> Shape {
        debug_assert!(
            axis < self.rank(),
            "axis {axis} of a rank-{} shape",
            self.rank()
        );
        let mut s = *self;
        s.dims[axis] = size;
        s
    }

    /// Normalises a possibly negative axis (`-1` is the last) against this rank.
    pub fn axis(&self, axis: isize) -> Result<usize, IrError> {
        let rank = self.rank() as isize;
        let a = if axis < 0 { axis + rank } else { axis };
        if a < 0 || a >= rank {
            return Err(IrError::Axis {
                axis,
                rank: self.rank(),
            });
        }
        Ok(a as usize)
    }

    /// numpy broadcasting: align at the right; each pair of dims must be equal
    /// or one of them 1.
    pub fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, IrError> {
        let rank = a.rank().max(b.rank());
        let mut out = [0usize; MAX_RANK];
        for (i, o) in out.iter_mut().enumerate().take(rank) {
            let da = dim_from_right(a, rank - 1 - i);
            let db = dim_from_right(b, rank - 1 - i);
            *o = match (da, db) {
                (x, y) if x == y => x,
                (1, y) => y,
                (x, 1) => x,
                _ => return Err(IrError::Broadcast { lhs: *a, rhs: *b }),
            };
        }
        Shape::new(&out[..rank])
    }

    /// True if this shape broadcasts to `target` (numpy's `broadcast_to` rule).
    pub fn broadcasts_to(&self, target: &Shape) -> bool {
        if self.rank() > target.rank() {
            return false;
        }
        let off = target.rank() - self.rank();
        self.dims()
            .iter()
            .enumerate()
            .all(|(i, &d)| d == 1 || d == target.dims[off + i])
    }

    /// Byte size of a tensor of this shape and dtype, or an error when the
    /// product of its nonzero dims times the element size exceeds
    /// `isize::MAX`, whether or not a zero dim empties it (numpy's rule):
    /// so every size, stride and offset of a valid shape fits in an i64,
    /// which kernels index with.
    pub fn byte_size(&self, dtype: DType) -> Result<usize, IrError> {
        let mut span = Some(dtype.size_bytes());
        let mut empty = false;
        for &d in self.dims() {
            match d {
                0 => empty = true,
                d => span = span.and_then(|b| b.checked_mul(d)),
            }
        }
        match span {
            Some(b) if b <= isize::MAX as usize => Ok(if empty { 0 } else { b }),
            _ => Err(IrError::TooLarge {
                shape: *self,
                dtype,
            }),
        }
    }
}

fn dim_from_right(s: &Shape, from_right: usize) -> usize {
    if from_right < s.rank() {
        s.dims[s.rank() - 1 - from_right]
    } else {
        1
    }
}

impl Deref for Shape {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        self.dims()
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.dims().iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Shape {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.dims().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Shape, D::Error> {
        let v = Vec::<usize>::deserialize(d)?;
        Shape::new(&v).map_err(serde::de::Error::custom)
    }
}

/// The static type of a tensor value: its dtype and shape.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Shape,
}

impl TensorType {
    /// Makes a tensor type.
    pub fn new(dtype: DType, shape: Shape) -> TensorType {
        TensorType { dtype, shape }
    }

    /// A rank-0 type.
    pub fn scalar(dtype: DType) -> TensorType {
        TensorType {
            dtype,
            shape: Shape::SCALAR,
        }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn s(d: &[usize]) -> Shape {
        Shape::new(d).unwrap()
    }

    #[test]
    fn broadcast_aligns_at_the_right_and_stretches_ones() {
        assert_eq!(Shape::broadcast(&s(&[4, 8]), &s(&[8])).unwrap(), s(&[4, 8]));
        assert_eq!(
            Shape::broadcast(&s(&[4, 1]), &s(&[1, 8])).unwrap(),
            s(&[4, 8])
        );
        assert_eq!(
            Shape::broadcast(&s(&[2, 1, 3]), &s(&[5, 1])).unwrap(),
            s(&[2, 5, 3])
        );
        assert_eq!(Shape::broadcast(&Shape::SCALAR, &s(&[3])).unwrap(), s(&[3]));
        // A zero-size dim broadcasts against 1, not against another size.
        assert_eq!(
            Shape::broadcast(&s(&[0, 1]), &s(&[1, 5])).unwrap(),
            s(&[0, 5])
        );
        assert!(Shape::broadcast(&s(&[0]), &s(&[2])).is_err());
    }

    #[test]
    fn broadcast_error_names_both_shapes() {
        let e = Shape::broadcast(&s(&[4, 3]), &s(&[4])).unwrap_err();
        assert!(matches!(e, IrError::Broadcast { .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("[4,3]") && text.contains("[4]"), "{text}");
    }

    #[test]
    fn broadcasts_to_is_one_directional() {
        assert!(s(&[8]).broadcasts_to(&s(&[4, 8])));
        assert!(s(&[4, 1]).broadcasts_to(&s(&[4, 8])));
        assert!(Shape::SCALAR.broadcasts_to(&s(&[2, 2])));
        assert!(!s(&[4, 8]).broadcasts_to(&s(&[8])));
        assert!(!s(&[1, 8]).broadcasts_to(&s(&[4, 1])));
    }

    #[test]
    fn axes_strides_and_sizes() {
        let x = s(&[2, 3, 4]);
        assert_eq!(x.axis(-1).unwrap(), 2);
        assert_eq!(x.axis(0).unwrap(), 0);
        assert!(x.axis(3).is_err() && x.axis(-4).is_err());
        assert_eq!(&x.strides()[..3], &[12, 4, 1]);
        assert_eq!(x.numel(), 24);
        assert_eq!(x.with_dim(1, 7), s(&[2, 7, 4]));
        assert_eq!(x.byte_size(DType::F16).unwrap(), 48);
        assert_eq!(Shape::SCALAR.numel(), 1);
        assert_eq!(s(&[usize::MAX, 2]).checked_numel(), None);
        assert!(s(&[usize::MAX / 2, 2]).byte_size(DType::F32).is_err());
        // A zero dim does not excuse the others (numpy's rule).
        assert!(s(&[usize::MAX, 0]).byte_size(DType::U8).is_err());
        assert!(s(&[0, 1 << 62, 2]).byte_size(DType::U8).is_err());
        assert_eq!(
            s(&[isize::MAX as usize / 4, 0])
                .byte_size(DType::F32)
                .unwrap(),
            0
        );
        assert!(s(&[isize::MAX as usize / 4 + 1, 0])
            .byte_size(DType::F32)
            .is_err());
        assert!(Shape::new(&[1; MAX_RANK + 1]).is_err());
    }

    #[test]
    fn equality_counts_rank_and_text_is_compact() {
        assert_ne!(s(&[4]), s(&[4, 1]));
        assert_ne!(Shape::SCALAR, s(&[1]));
        assert_eq!(s(&[4, 8]).to_string(), "[4,8]");
        assert_eq!(Shape::SCALAR.to_string(), "[]");
        let t = TensorType::new(DType::BF16, s(&[3]));
        assert_eq!(t.to_string(), "bf16[3]");
    }
}
