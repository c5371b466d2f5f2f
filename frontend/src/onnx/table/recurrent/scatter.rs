//! ScatterElements, Scatter and ScatterND as exact compositions: each
//! target position compares itself against every index (a one-hot mask),
//! then the masked updates are reduced (sum, product, max or min) and
//! merged with the data. No index ever addresses memory, so nothing can
//! be written out of place; indices are checked: known ones here, naming
//! the node, traced ones by a bounds-checked gather (`IndexOutOfRange`).
//! With `reduction = none`, duplicate indices (undefined in ONNX; torch and
//! onnxruntime keep the last write) sum their updates.
//! The masks cost positions × indices, fine for the small scatters
//! models use; a real scatter op would be the way for big ones.

use super::super::{attr_i, attr_s, axis, fail, ints_of, live, req, Cx};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::{DType, ErrorKind};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

fn reduction(n: &Node) -> Result<Reduction> {
    Ok(match attr_s(n, "reduction", "none")? {
        "none" => Reduction::None,
        "add" => Reduction::Add,
        "mul" => Reduction::Mul,
        "max" => Reduction::Max,
        "min" => Reduction::Min,
        r => {
            return Err(fail(
                n,
                "reduction",
                ErrorKind::Unsupported,
                format!("reduction `{r}` is not none, add, mul, max or min"),
            ))
        }
    })
}

pub(super) fn check(n: &Node, _: &Cx) -> Result<()> {
    reduction(n).map(|_| ())
}

/// Indices counted from the end made positive, and checked to lie in
/// `0..len`: a known index here, a traced one by a checked gather.
fn checked(n: &Node, idx: &Tensor, len: usize) -> Result<Tensor> {
    let l = len as i64;
    if !idx.is_traced() {
        let v = ints_of(n, "indices", idx)?;
        if let Some(bad) = v.iter().find(|&&i| i < -l || i >= l) {
            return Err(fail(
                n,
                "indices",
                ErrorKind::BadArgument,
                format!("index {bad} is outside -{len}..{len}"),
            ));
        }
        let v: Vec<i64> = v.iter().map(|&i| if i < 0 { i + l } else { i }).collect();
        return Tensor::from_vec(v, idx.shape());
    }
    let i = idx.cast(DType::I64);
    let i = Tensor::where_cond(&i.lt(&Tensor::zeros(&[], DType::I64)), &(&i + l), &i);
    // Gathering the index from 0..len is the identity, or IndexOutOfRange.
    let flat = i.reshape(&[i.numel()]);
    Ok(Tensor::arange(len, DType::I64)
        .index_select(0, &flat)
        .reshape(idx.shape()))
}

/// The extreme value of a dtype, the identity of max (`low`) or min.
fn extreme(dtype: DType, low: bool) -> f64 {
    let v = match dtype {
        DType::I64 => i64::MAX as f64,
        DType::I32 => i32::MAX as f64,
        DType::I8 => i8::MAX as f64,
        DType::I16 => i16::MAX as f64,
        DType::U8 => return if low { 0.0 } else { u8::MAX as f64 },
        DType::U16 => return if low { 0.0 } else { u16::MAX as f64 },
        DType::U32 => return if low { 0.0 } else { u32::MAX as f64 },
        // Rounds up to 2^64, which a cast to u64 saturates to u64::MAX.
        DType::U64 => return if low { 0.0 } else { u64::MAX as f64 },
        DType::Bool => return if low { 0.0 } else { 1.0 },
        _ => f64::INFINITY,
    };
    match (low, dtype) {
        (true, DType::I64) => i64::MIN as f64,
        (true, DType::I32) => i32::MIN as f64,
        (true, DType::I8) => i8::MIN as f64,
        (true, DType::I16) => i16::MIN as f64,
        (true, _) => -v,
        (false, _) => v,
    }
}

/// Data `d` [B, L, R], a mask `m` [B, L, Q] (position l takes update q),
/// updates `u` [B, Q, R]: the scattered data.
fn masked(d: &Tensor, m: &Tensor, u: &Tensor, red: Reduction) -> Tensor {
    let (b, l, r) = (d.shape()[0], d.shape()[1], d.shape()[2]);
    let q = u.shape()[1];
    let m4 = m.reshape(&[b, l, q, 1]);
    let u4 = u.reshape(&[b, 1, q, r]);
    let dt = d.dtype();
    let fill = |v: f64| Tensor::where_cond(&m4, &u4, &Tensor::full(&[], v, dt));
    let hit = m
        .cast(DType::I32)
        .max(2, true)
        .cast(DType::Bool)
        .reshape(&[b, l, 1]);
    let sum = |t: Tensor| t.sum(2, false);
    match red {
        // Without a reduction an index should appear once: the sum is it.
        Reduction::None => Tensor::where_cond(&hit, &sum(fill(0.0)), d),
        Reduction::Add => d + sum(fill(0.0)),
        Reduction::Mul => d * fill(1.0).prod(2, false),
        Reduction::Max => {
            let top = fill(extreme(dt, true)).max(2, false);
            Tensor::where_cond(&hit, &d.maximum(&top), d)
        }
        Reduction::Min => {
            let low = fill(extreme(dt, false)).min(2, false);
            Tensor::where_cond(&hit, &d.minimum(&low), d)
        }
    }
}

/// ScatterElements (and the deprecated Scatter).
pub(super) fn build_elements(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let (d, idx, u) = (req(n, ins, 0)?, req(n, ins, 1)?, req(n, ins, 2)?);
    let red = reduction(n)?;
    let r = d.rank();
    if idx.rank() != r || u.shape() != idx.shape() {
        return Err(fail(
            n,
            "indices",
            ErrorKind::Shape,
            format!(
                "indices {:?} and updates {:?} must have one shape, of data's rank {r}",
                idx.shape(),
                u.shape()
            ),
        ));
    }
    let a = axis(n, "axis", attr_i(n, "axis", 0)?, r)?;
    if (0..r).any(|i| i != a && idx.shape()[i] > d.shape()[i]) {
        return Err(fail(
            n,
            "indices",
            ErrorKind::Shape,
            format!(
                "indices {:?} are larger than data {:?} off the axis",
                idx.shape(),
                d.shape()
            ),
        ));
    }
    let len = d.shape()[a];
    let idx = checked(n, idx, len)?;
    // The axis last, then indices and updates padded to data's other dims
    // (index -1 matches nothing).
    let mut perm: Vec<usize> = (0..r).filter(|&i| i != a).collect();
    perm.push(a);
    let (dp, ip, up) = (d.permute(&perm), idx.permute(&perm), u.permute(&perm));
    let mut pads: Vec<(usize, usize)> = (0..r - 1)
        .map(|i| (0, dp.shape()[i] - ip.shape()[i]))
        .collect();
    pads.push((0, 0));
    let (ip, up) = match pads.iter().any(|p| p.1 > 0) {
        true => (ip.pad(&pads, -1.0), up.pad(&pads, 0.0)),
        false => (ip, up),
    };
    // A pad past the size limits is an error tensor, without axes.
    let (ip, up) = (live(ip)?, live(up)?);
    let k = ip.shape()[r - 1];
    let b: usize = dp.shape()[..r - 1].iter().product();
    let m = ip
        .reshape(&[b, 1, k])
        .eq(&Tensor::arange(len, DType::I64).reshape(&[1, len, 1]));
    let y = masked(
        &dp.reshape(&[b, len, 1]),
        &m,
        &up.reshape(&[b, k, 1]).cast(d.dtype()),
        red,
    );
    let mut inv = vec![0; r];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    Ok(vec![y.reshape(dp.shape()).permute(&inv)])
}

/// ScatterND: the leading `k` dims of data flattened, each index tuple a
/// linear position there.
pub(super) fn build_nd(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let (d, idx, u) = (req(n, ins, 0)?, req(n, ins, 1)?, req(n, ins, 2)?);
    let red = reduction(n)?;
    let k = idx.shape().last().copied().unwrap_or(0);
    if idx.rank() == 0 || k == 0 || k > d.rank() {
        return Err(fail(
            n,
            "indices",
            ErrorKind::Shape,
            format!("indices {:?} for data of rank {}", idx.shape(), d.rank()),
        ));
    }
    let outer = &idx.shape()[..idx.rank() - 1];
    let rest = &d.shape()[k..];
    let want: Vec<usize> = [outer, rest].concat();
    if u.shape() != want.as_slice() {
        return Err(fail(
            n,
            "updates",
            ErrorKind::Shape,
            format!("shape {:?}, expected {want:?}", u.shape()),
        ));
    }
    let q: usize = outer.iter().product();
    let r: usize = rest.iter().product();
    let lead = &d.shape()[..k];
    let l: usize = lead.iter().product();
    let idx = idx.reshape(&[q, k]);
    let mut linear = Tensor::zeros(&[q, 1], DType::I64);
    let mut stride = 1i64;
    for i in (0..k).rev() {
        let col = checked(n, &idx.slice(1, i as isize, i as isize + 1), lead[i])?;
        linear = linear + col * stride;
        stride *= lead[i] as i64;
    }
    let m = linear
        .reshape(&[1, 1, q])
        .eq(&Tensor::arange(l, DType::I64).reshape(&[1, l, 1]));
    let y = masked(
        &d.reshape(&[1, l, r]),
        &m,
        &u.reshape(&[1, q, r]).cast(d.dtype()),
        red,
    );
    Ok(vec![y.reshape(d.shape())])
}
