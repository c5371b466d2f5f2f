//! TopK, OneHot and EyeLike. TopK picks k times the arg-extreme along
//! the axis (the first of equal values, so ties go to the lower index)
//! and masks it out: exact (integers of every width too), and cheap for
//! the small k models use.

use super::super::{attr_i, axis, dtype_of, fail, ints_of, req, table_of, unrolled, Cx};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::{DType, ErrorKind};

pub(super) fn check_topk(n: &Node, _: &Cx) -> Result<()> {
    if n.attrs.contains_key("k") {
        // Opset 1's k attribute: read by the build, any value ok here.
        attr_i(n, "k", 0)?;
    }
    Ok(())
}

pub(super) fn build_topk(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let k = match n.attrs.contains_key("k") {
        true => attr_i(n, "k", 0)?,
        false => *ints_of(n, "K", req(n, ins, 1)?)?
            .first()
            .ok_or_else(|| fail(n, "K", ErrorKind::Shape, "K holds no value"))?,
    };
    let a = axis(n, "axis", attr_i(n, "axis", -1)?, x.rank())?;
    let len = x.shape()[a];
    if k < 0 || k as usize > len {
        return Err(fail(
            n,
            "K",
            ErrorKind::BadArgument,
            format!("k = {k} is outside 0..={len}"),
        ));
    }
    // One round per kept element, each over the whole axis.
    let k = unrolled(n, "K", "rounds (one per kept element)", k as usize)?;
    let largest = attr_i(n, "largest", 1)? != 0;
    let mut shape = vec![1; x.rank()];
    shape[a] = len;
    let pos = Tensor::arange(len, DType::I64).reshape(&shape);
    let (mut vals, mut idxs) = (Vec::new(), Vec::new());
    if x.dtype().is_int() {
        // Integers have no value that never wins (the dtype's least one
        // may be in the data, and argmax would pick a masked copy of it
        // again): each round takes the extreme of the unpicked values,
        // then the first unpicked position that holds it. Exact at any
        // width, u64 above i64::MAX included.
        let dt = x.dtype();
        let (worst, reduce): (f64, fn(&Tensor, isize) -> Tensor) = match largest {
            // `full` saturates these to the dtype's least and greatest.
            true => (f64::NEG_INFINITY, |t, a| t.max(a, true)),
            false => (f64::INFINITY, |t, a| t.min(a, true)),
        };
        let worst = Tensor::full(&[], worst, dt);
        let (yes, no) = (
            Tensor::full(&[], 1.0, DType::Bool),
            Tensor::full(&[], 0.0, DType::Bool),
        );
        let mut picked = Tensor::zeros(x.shape(), DType::Bool);
        for _ in 0..k {
            let m = reduce(&Tensor::where_cond(&picked, &worst, x), a as isize);
            let cand = Tensor::where_cond(&picked, &no, &x.eq(&m));
            let i = cand.argmax(a as isize, true).cast(DType::I64);
            vals.push(x.gather(a as isize, &i));
            picked = Tensor::where_cond(&pos.eq(&i), &yes, &picked);
            idxs.push(i);
        }
    } else {
        // Picked values are replaced by one that never wins again.
        let never = match largest {
            true => f64::NEG_INFINITY,
            false => f64::INFINITY,
        };
        let never = Tensor::full(&[], never, x.dtype());
        let mut rest = x.clone();
        for _ in 0..k {
            let i = match largest {
                true => rest.argmax(a as isize, true),
                false => rest.argmin(a as isize, true),
            };
            let i = i.cast(DType::I64);
            vals.push(x.gather(a as isize, &i));
            rest = Tensor::where_cond(&pos.eq(&i), &never, &rest);
            idxs.push(i);
        }
    }
    let cat = |v: &[Tensor], dt: DType| -> Tensor {
        let refs: Vec<&Tensor> = v.iter().collect();
        match refs.len() {
            0 => {
                let mut s = x.shape().to_vec();
                s[a] = 0;
                Tensor::zeros(&s, dt)
            }
            1 => v[0].clone(),
            _ => Tensor::cat(&refs, a as isize),
        }
    };
    Ok(vec![cat(&vals, x.dtype()), cat(&idxs, DType::I64)])
}

pub(super) fn build_one_hot(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let idx = req(n, ins, 0)?;
    let depth = ints_of(n, "depth", &req(n, ins, 1)?.cast(DType::I64))?;
    let depth = match depth.as_slice() {
        [d] if *d > 0 => *d as usize,
        _ => {
            return Err(fail(
                n,
                "depth",
                ErrorKind::BadArgument,
                "must be one positive value",
            ))
        }
    };
    let values = req(n, ins, 2)?;
    if values.numel() != 2 {
        return Err(fail(n, "values", ErrorKind::Shape, "must hold [off, on]"));
    }
    let r = idx.rank() + 1;
    let a = axis(n, "axis", attr_i(n, "axis", -1)?, r)?;
    let values = values.reshape(&[2]);
    let (off, on) = (values.slice(0, 0, 1), values.slice(0, 1, 2));
    let (off, on) = (off.reshape(&[]), on.reshape(&[]));
    let d = depth as i64;
    // Negative indices count from the end; others out of range hit nothing.
    let i = idx.cast(DType::I64);
    let i = Tensor::where_cond(&i.lt(&Tensor::zeros(&[], DType::I64)), &(&i + d), &i);
    let mut s = idx.shape().to_vec();
    s.insert(a, 1);
    let mut ps = vec![1; r];
    ps[a] = depth;
    let pos = Tensor::arange(depth, DType::I64).reshape(&ps);
    Ok(vec![Tensor::where_cond(&i.reshape(&s).eq(&pos), &on, &off)])
}

pub(super) fn check_eye_like(n: &Node, _: &Cx) -> Result<()> {
    if n.attrs.contains_key("dtype") {
        dtype_of(attr_i(n, "dtype", 1)? as i32)
            .map_err(|m| fail(n, "dtype", ErrorKind::Unsupported, m))?;
    }
    Ok(())
}

pub(super) fn build_eye_like(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    if x.rank() != 2 {
        return Err(fail(
            n,
            "input",
            ErrorKind::Shape,
            format!("rank {}, EyeLike takes a matrix", x.rank()),
        ));
    }
    let dt = match n.attrs.contains_key("dtype") {
        true => dtype_of(attr_i(n, "dtype", 1)? as i32)
            .map_err(|m| fail(n, "dtype", ErrorKind::Unsupported, m))?,
        false => x.dtype(),
    };
    let k = attr_i(n, "k", 0)?;
    let (rows, cols) = (x.shape()[0], x.shape()[1]);
    let v = table_of(rows * cols, |p| {
        ((p % cols) as i64 - (p / cols) as i64 == k) as u8 as f64
    })?;
    Ok(vec![Tensor::from_vec(v, &[rows, cols])?.cast(dt)])
}
