//! Det and TensorScatter, built from public ops.
//!
//! Det: Gaussian elimination with partial pivoting, unrolled at trace time
//! over the (static) matrix size: each step picks the row of largest
//! magnitude in the leading column (`argmax`), swaps it to the top (a
//! `gather` and a `where`), keeps its pivot (negated after a swap) and
//! eliminates the column below it; the next step works on the trailing
//! square. The determinant is the product of the pivots. The float16
//! family is computed in f32.
//!
//! TensorScatter: every cache position picks, per batch row, the update
//! row that lands on it (`p - write_index`, modulo the cache length when
//! circular) by a `gather` along the axis, or keeps the past value where
//! none does. Linear-mode write indices must keep the update inside the
//! cache: known ones are checked here, traced ones by a bounds-checked
//! gather (`IndexOutOfRange` at the run).

use super::{attr_i, attr_s, axis, fail, ints_of, one, opt, req, Cx, Kind, Row};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::{DType, ErrorKind};

pub(super) static ROWS: &[Row] = &[
    Row {
        op: "Det",
        attrs: &[],
        check: super::no_check,
        kind: Kind::Node(build_det),
    },
    Row {
        op: "TensorScatter",
        attrs: &["axis", "mode"],
        check: check_scatter,
        kind: Kind::Node(build_scatter),
    },
];

/// The largest matrix Det takes: the elimination is unrolled, one step
/// (about twenty ops) per row.
pub(crate) const MAX_DET: usize = 64;

fn build_det(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let r = x.rank();
    let dt = x.dtype();
    if r < 2 || x.shape()[r - 2] != x.shape()[r - 1] {
        return Err(fail(
            n,
            "X",
            ErrorKind::Shape,
            format!("needs square matrices [.., M, M], not {:?}", x.shape()),
        ));
    }
    if !dt.is_float() {
        return Err(fail(
            n,
            "X",
            ErrorKind::DType,
            format!("needs a float tensor, not {dt}"),
        ));
    }
    let m = x.shape()[r - 1];
    if m > MAX_DET {
        return Err(fail(
            n,
            "X",
            ErrorKind::Unsupported,
            format!("{m}x{m} matrices; Det takes at most {MAX_DET}x{MAX_DET}"),
        ));
    }
    let work = match dt {
        DType::F32 | DType::F64 => dt,
        _ => DType::F32,
    };
    let batch = &x.shape()[..r - 2];
    let nb: usize = batch.iter().product();
    let zero_i = Tensor::zeros(&[], DType::I64);
    let mut a = x.cast(work).reshape(&[nb, m, m]);
    // Each step's pivot (sign-flipped after a swap), multiplied at the
    // end: a running product would fuse every step's read into one kernel.
    let mut factors = Vec::with_capacity(m);
    for k in 0..m {
        let rows = m - k;
        // The pivot row: the largest magnitude in the leading column.
        let lead = a.slice(2, 0, 1).reshape(&[nb, rows]);
        let p = lead.abs().argmax(1, true);
        let at = p.reshape(&[nb, 1, 1]);
        let prow = a.gather(1, &at.broadcast_to(&[nb, 1, rows]));
        let pivot = prow.slice(2, 0, 1).reshape(&[nb, 1]);
        let sign = Tensor::where_cond(
            &p.eq(&zero_i),
            &Tensor::ones(&[], work),
            &Tensor::full(&[], -1.0, work),
        );
        factors.push(&pivot * &sign);
        if rows == 1 {
            break;
        }
        // Rows 1.. with the pivot row's place taken by row 0 (the swap).
        let row0 = a.slice(1, 0, 1);
        let rest = a.slice(1, 1, rows as isize);
        let which = (Tensor::arange(rows - 1, DType::I64) + 1i64).reshape(&[1, rows - 1, 1]);
        let rest = Tensor::where_cond(&which.eq(&at), &row0, &rest);
        // A zero pivot (a singular matrix) already zeroed the determinant;
        // dividing by 1 instead keeps NaN out of the later steps.
        let safe = Tensor::where_cond(
            &pivot.eq(&Tensor::zeros(&[], work)),
            &Tensor::ones(&[], work),
            &pivot,
        );
        let f = rest.slice(2, 0, 1) / safe.reshape(&[nb, 1, 1]);
        a = (rest - f * prow).slice(2, 1, rows as isize);
    }
    let det = match factors.len() {
        0 => Tensor::ones(&[nb], work),
        1 => factors[0].reshape(&[nb]),
        _ => Tensor::cat(&factors.iter().collect::<Vec<_>>(), 1).prod(1, false),
    };
    one(det.reshape(batch).cast(dt))
}

fn circular(n: &Node) -> Result<bool> {
    match attr_s(n, "mode", "linear")? {
        "linear" => Ok(false),
        "circular" => Ok(true),
        m => Err(fail(
            n,
            "mode",
            ErrorKind::Unsupported,
            format!("mode `{m}` is neither `linear` nor `circular`"),
        )),
    }
}

fn check_scatter(n: &Node, _: &Cx) -> Result<()> {
    circular(n)?;
    Ok(())
}

fn both(a: &Tensor, b: &Tensor) -> Tensor {
    (a.cast(DType::I32) * b.cast(DType::I32)).cast(DType::Bool)
}

fn build_scatter(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let past = req(n, ins, 0)?;
    let upd = req(n, ins, 1)?;
    let circular = circular(n)?;
    let r = past.rank();
    let a = axis(n, "axis", attr_i(n, "axis", -2)?, r)?;
    if a == 0 {
        return Err(fail(
            n,
            "axis",
            ErrorKind::BadArgument,
            "the axis cannot be 0 (the batch dimension)",
        ));
    }
    let (ps, us) = (past.shape(), upd.shape());
    let fits = us.len() == r
        && (0..r).all(|i| {
            if i == a {
                us[i] <= ps[i]
            } else {
                us[i] == ps[i]
            }
        });
    if !fits {
        return Err(fail(
            n,
            "update",
            ErrorKind::Shape,
            format!("an update of shape {us:?} for a cache of shape {ps:?} along axis {a}"),
        ));
    }
    if upd.dtype() != past.dtype() {
        return Err(fail(
            n,
            "update",
            ErrorKind::DType,
            format!("{} updates for a {} cache", upd.dtype(), past.dtype()),
        ));
    }
    let (bsz, len, s) = (ps[0], ps[a], us[a]);
    let w = match opt(ins, 2) {
        Some(w) if w.shape() != [bsz] => {
            return Err(fail(
                n,
                "write_indices",
                ErrorKind::Shape,
                format!("shape {:?}, not [{bsz}] (one per batch row)", w.shape()),
            ))
        }
        Some(w) if !w.is_traced() => {
            let v = ints_of(n, "write_indices", w)?;
            if !circular {
                if let Some(bad) = v.iter().find(|&&i| i < 0 || i > (len - s) as i64) {
                    return Err(fail(
                        n,
                        "write_indices",
                        ErrorKind::BadArgument,
                        format!(
                            "write index {bad} puts {s} updates outside a cache of {len} (linear mode)"
                        ),
                    ));
                }
            }
            Tensor::from_vec(v, &[bsz])?
        }
        Some(w) if circular => w.cast(DType::I64),
        // Gathering from 0..=len - s is the identity, or IndexOutOfRange.
        Some(w) => Tensor::arange(len - s + 1, DType::I64).index_select(0, &w.cast(DType::I64)),
        None => Tensor::zeros(&[bsz], DType::I64),
    };
    if s == 0 || past.numel() == 0 {
        return one(past.clone());
    }
    // The update row landing on cache position p of batch row b.
    let p = Tensor::arange(len, DType::I64).reshape(&[1, len]);
    let mut src = p - w.reshape(&[bsz, 1]);
    let zero = Tensor::zeros(&[], DType::I64);
    if circular {
        src = src.remainder(&Tensor::full(&[], len as f64, DType::I64));
    }
    let below_s = src.lt(&Tensor::full(&[], s as f64, DType::I64));
    let valid = match circular {
        true => below_s,
        false => both(&src.ge(&zero), &below_s),
    };
    let src = Tensor::where_cond(&valid, &src, &zero);
    let mut dims = vec![1; r];
    dims[0] = bsz;
    dims[a] = len;
    let idx = src.reshape(&dims).broadcast_to(ps);
    let y = upd.gather(a as isize, &idx);
    one(Tensor::where_cond(&valid.reshape(&dims), &y, past))
}
