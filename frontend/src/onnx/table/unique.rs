//! ONNX's Unique: the distinct elements (or, with `axis`, the distinct
//! slices along it), sorted or in first-seen order, with each one's first
//! index, every element's position among them, and their counts. How
//! many there are is a function of the values, so the row reads them
//! concrete (at trace time when known, else eagerly at a graph break,
//! `segments.rs`), as numpy's `unique` does.

use super::reduce::known;
use super::{attr_i, axis, fail, req, Cx, Kind, Row};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::tensor::Tensor;
use std::cmp::Ordering;
use tilejit_ir::{DType, ErrorKind};

pub(super) static ROWS: &[Row] = &[Row {
    op: "Unique",
    attrs: &["axis", "sorted"],
    check,
    kind: Kind::Node(build),
}];

fn check(n: &Node, _: &Cx) -> Result<()> {
    match attr_i(n, "sorted", 1)? {
        0 | 1 => Ok(()),
        v => Err(fail(
            n,
            "sorted",
            ErrorKind::BadArgument,
            format!("must be 0 or 1, not {v}"),
        )),
    }
}

/// numpy's order: NaN after every number.
fn order(a: f64, b: f64) -> Ordering {
    a.partial_cmp(&b)
        .unwrap_or_else(|| a.is_nan().cmp(&b.is_nan()))
}

fn build(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let values = known(n, "X", x)?;
    // Without an axis, the elements of the flattened tensor; with one,
    // the slices along it (each in row-major order of the other dims).
    let (x, ax) = match n.attrs.contains_key("axis") {
        true => (x.clone(), axis(n, "axis", attr_i(n, "axis", 0)?, x.rank())?),
        false => (x.reshape(&[x.numel()]), 0),
    };
    let shape = x.shape().to_vec();
    let len = shape[ax];
    if values.is_empty() && len > 0 {
        // Slices of no elements are all equal: one group, first at 0, that
        // every slice maps to (the dims, which an empty tensor does not
        // bound, size nothing but that map).
        let idx = Tensor::from_vec(vec![0i64], &[1])?;
        return Ok(vec![
            x.index_select(ax as isize, &idx),
            idx,
            Tensor::zeros(&[len], DType::I64),
            Tensor::from_vec(vec![len as i64], &[1])?,
        ]);
    }
    // Not empty: the dims multiply to the elements held.
    let inner: usize = shape[ax + 1..].iter().product();
    let outer: usize = shape[..ax].iter().product();
    let slice = |i: usize| -> Vec<f64> {
        (0..outer)
            .flat_map(|o| {
                let base = (o * len + i) * inner;
                values[base..base + inner].iter().copied()
            })
            .collect()
    };
    let slices: Vec<Vec<f64>> = (0..len).map(slice).collect();
    let cmp = |a: &usize, b: &usize| -> Ordering {
        slices[*a]
            .iter()
            .zip(&slices[*b])
            .map(|(p, q)| order(*p, *q))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    };
    // Stable: among equal slices the first stays first, so its index is
    // the first occurrence.
    let mut by_value: Vec<usize> = (0..len).collect();
    by_value.sort_by(cmp);
    let mut firsts: Vec<usize> = Vec::new();
    let mut group_of = vec![0usize; len];
    let mut counts: Vec<i64> = Vec::new();
    for &i in &by_value {
        match firsts.last() {
            Some(f) if cmp(f, &i).is_eq() => *counts.last_mut().unwrap_or(&mut 0) += 1,
            _ => {
                firsts.push(i);
                counts.push(1);
            }
        }
        group_of[i] = firsts.len() - 1;
    }
    if attr_i(n, "sorted", 1)? == 0 {
        // First-seen order: renumber the groups by their first index.
        let mut by_first: Vec<usize> = (0..firsts.len()).collect();
        by_first.sort_by_key(|&g| firsts[g]);
        let mut rank = vec![0usize; firsts.len()];
        for (r, &g) in by_first.iter().enumerate() {
            rank[g] = r;
        }
        firsts = by_first.iter().map(|&g| firsts[g]).collect();
        counts = by_first.iter().map(|&g| counts[g]).collect();
        for g in group_of.iter_mut() {
            *g = rank[*g];
        }
    }
    let k = firsts.len();
    let indices: Vec<i64> = firsts.iter().map(|&i| i as i64).collect();
    let idx = Tensor::from_vec(indices.clone(), &[k])?;
    let y = x.index_select(ax as isize, &idx);
    let inverse: Vec<i64> = group_of.iter().map(|&g| g as i64).collect();
    Ok(vec![
        y,
        idx,
        Tensor::from_vec(inverse, &[len])?,
        Tensor::from_vec(counts, &[k])?,
    ])
}
