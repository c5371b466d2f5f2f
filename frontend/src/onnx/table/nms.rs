//! ONNX's NonMaxSuppression: per batch and class, boxes in falling score
//! order, each kept unless its IoU with one already kept exceeds the
//! threshold. How many survive is a function of the values, so the row
//! reads them concrete: at trace time when they are constants, else at a
//! graph break (`segments.rs`), where it runs eagerly. Arithmetic is in
//! f32, as onnx's reference does it, so borderline IoUs decide alike.

use super::reduce::known;
use super::{attr_i, fail, opt, req, Cx, Kind, Row};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use tilejit_ir::ErrorKind;

pub(super) static ROWS: &[Row] = &[Row {
    op: "NonMaxSuppression",
    attrs: &["center_point_box"],
    check,
    kind: Kind::Node(build),
}];

fn check(n: &Node, _: &Cx) -> Result<()> {
    match attr_i(n, "center_point_box", 0)? {
        0 | 1 => Ok(()),
        v => Err(fail(
            n,
            "center_point_box",
            ErrorKind::Unsupported,
            format!("must be 0 or 1, not {v}"),
        )),
    }
}

/// One scalar operand's value, if the input is given and not empty.
fn scalar(n: &Node, ins: &[Option<Tensor>], i: usize, what: &str) -> Result<Option<f64>> {
    match opt(ins, i) {
        None => Ok(None),
        Some(t) => Ok(known(n, what, t)?.first().copied()),
    }
}

/// A box's `(y_min, x_min, y_max, x_max)` in f32, from either layout.
fn corners(b: &[f32], center: bool) -> (f32, f32, f32, f32) {
    let sort = |a: f32, b: f32| if a >= b { (b, a) } else { (a, b) };
    if center {
        let (w, h) = (b[2] / 2.0, b[3] / 2.0);
        (b[1] - h, b[0] - w, b[1] + h, b[0] + w)
    } else {
        let (y0, y1) = sort(b[0], b[2]);
        let (x0, x1) = sort(b[1], b[3]);
        (y0, x0, y1, x1)
    }
}

/// Whether two boxes overlap by more than `iou` (onnx's `suppress_by_iou`).
fn suppresses(a: &[f32], b: &[f32], center: bool, iou: f32) -> bool {
    let (ay0, ax0, ay1, ax1) = corners(a, center);
    let (by0, bx0, by1, bx1) = corners(b, center);
    let (ix0, ix1) = (ax0.max(bx0), ax1.min(bx1));
    let (iy0, iy1) = (ay0.max(by0), ay1.min(by1));
    if ix1 <= ix0 || iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    let area_a = (ax1 - ax0) * (ay1 - ay0);
    let area_b = (bx1 - bx0) * (by1 - by0);
    let union = area_a + area_b - inter;
    if inter <= 0.0 || area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > iou
}

fn build(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let (boxes_t, scores_t) = (req(n, ins, 0)?, req(n, ins, 1)?);
    let (bs, ss) = (boxes_t.shape(), scores_t.shape());
    if bs.len() != 3 || bs[2] != 4 || ss.len() != 3 || ss[0] != bs[0] || ss[2] != bs[1] {
        return Err(fail(
            n,
            "boxes",
            ErrorKind::Shape,
            format!(
                "boxes must be [batches, boxes, 4] and scores [batches, classes, boxes]; got \
                 {bs:?} and {ss:?}"
            ),
        ));
    }
    let boxes: Vec<f32> = known(n, "boxes", boxes_t)?
        .iter()
        .map(|&v| v as f32)
        .collect();
    let scores: Vec<f32> = known(n, "scores", scores_t)?
        .iter()
        .map(|&v| v as f32)
        .collect();
    let max_out = scalar(n, ins, 2, "max_output_boxes_per_class")?
        .unwrap_or(0.0)
        .max(0.0) as usize;
    let iou = scalar(n, ins, 3, "iou_threshold")?.unwrap_or(0.0) as f32;
    let score_min = scalar(n, ins, 4, "score_threshold")?.map(|v| v as f32);
    let center = attr_i(n, "center_point_box", 0)? == 1;
    let (batches, classes, count) = (bs[0], ss[1], bs[1]);
    // No boxes: nothing to pick, however many (declared) batches and
    // classes there are to loop over.
    let batches = if count == 0 { 0 } else { batches };
    let mut picked: Vec<i64> = Vec::new();
    for batch in 0..batches {
        let bx = &boxes[batch * count * 4..(batch + 1) * count * 4];
        let the_box = |i: usize| &bx[i * 4..i * 4 + 4];
        for class in 0..classes {
            let sc = &scores[(batch * classes + class) * count..][..count];
            let mut order: Vec<usize> = (0..count)
                .filter(|&i| score_min.is_none_or(|m| sc[i] > m))
                .collect();
            // Highest score first; on a tie, the lower index (onnx pops
            // the largest of a sort where a higher index is smaller).
            order.sort_by(|&a, &b| sc[b].total_cmp(&sc[a]).then(a.cmp(&b)));
            let mut kept: Vec<usize> = Vec::new();
            for i in order {
                if kept.len() >= max_out {
                    break;
                }
                if !kept
                    .iter()
                    .any(|&k| suppresses(the_box(i), the_box(k), center, iou))
                {
                    kept.push(i);
                    picked.extend([batch as i64, class as i64, i as i64]);
                }
            }
        }
    }
    let rows = picked.len() / 3;
    Ok(vec![Tensor::from_vec(picked, &[rows, 3])?])
}
