//! Printing tensors the way numpy does: nested brackets, one column width,
//! floats without trailing zeros (`1.`, `0.5`), and `...` elision past 1000
//! elements (the first and last 3 entries of each long axis).

use crate::tensor::{Repr, Tensor};
use std::fmt;
use tilejit_ir::{Array, DType, Lit, Shape};

const THRESHOLD: usize = 1000;
const EDGE: usize = 3;

fn format_float(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let a = v.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        return format!("{v:.4e}");
    }
    let s = format!("{v:.8}");
    let s = s.trim_end_matches('0');
    s.to_string() // keeps the trailing '.' of integral values, like numpy: "1."
}

fn format_lit(l: Lit, dtype: DType) -> String {
    match l {
        Lit::Float(v) => format_float(v),
        // A u64 literal holds its bits (see `DType::U64`).
        Lit::Int(v) if dtype == DType::U64 => (v as u64).to_string(),
        Lit::Int(v) => v.to_string(),
        Lit::Bool(b) => if b { "True" } else { "False" }.into(),
    }
}

/// Indices shown along an axis of size `n` (None marks the `...`).
fn shown(n: usize, elide: bool) -> Vec<Option<usize>> {
    if elide && n > 2 * EDGE {
        (0..EDGE)
            .map(Some)
            .chain([None])
            .chain((n - EDGE..n).map(Some))
            .collect()
    } else {
        (0..n).map(Some).collect()
    }
}

fn write_array(f: &mut fmt::Formatter<'_>, a: &Array) -> fmt::Result {
    let shape: Shape = *a.shape();
    let elide = shape.numel() > THRESHOLD;
    let strides = shape.strides();
    let b = a.buffer();
    let mut flats = Vec::new();
    collect(&shape, &strides, 0, 0, elide, &mut |flat| flats.push(flat));
    let texts: Vec<String> = flats
        .iter()
        .map(|&i| format_lit(b.get(i), b.dtype()))
        .collect();
    // numpy aligns decimal points: pad the integer part on the left and the
    // fraction on the right, so `[1., 2.5, -3.]` prints `[ 1.   2.5 -3. ]`.
    let split = |s: &str| match s.find('.') {
        Some(p) if !s.contains('e') => (s[..p].len(), s.len() - p),
        _ => (s.len(), 0),
    };
    let (left, right) = texts
        .iter()
        .map(|s| split(s))
        .fold((0, 0), |(l, r), (a, b)| (l.max(a), r.max(b)));
    let cells: Vec<String> = texts
        .iter()
        .map(|s| {
            let (l, r) = split(s);
            format!("{}{s}{}", " ".repeat(left - l), " ".repeat(right - r))
        })
        .collect();
    let width = cells.iter().map(String::len).max().unwrap_or(0);
    let mut it = flats.into_iter().zip(cells);
    write_level(f, &shape, &strides, 0, 0, elide, width, &mut it)
}

fn collect(
    shape: &Shape,
    strides: &[usize],
    dim: usize,
    base: usize,
    elide: bool,
    out: &mut impl FnMut(usize),
) {
    if dim == shape.rank() {
        out(base);
        return;
    }
    for i in shown(shape[dim], elide).into_iter().flatten() {
        collect(shape, strides, dim + 1, base + i * strides[dim], elide, out);
    }
}

#[allow(clippy::too_many_arguments)]
fn write_level(
    f: &mut fmt::Formatter<'_>,
    shape: &Shape,
    strides: &[usize],
    dim: usize,
    base: usize,
    elide: bool,
    width: usize,
    cells: &mut impl Iterator<Item = (usize, String)>,
) -> fmt::Result {
    if dim == shape.rank() {
        let (_, s) = cells.next().unwrap_or((base, String::new()));
        return write!(f, "{s:>width$}");
    }
    f.write_str("[")?;
    let last = dim + 1 == shape.rank();
    for (k, i) in shown(shape[dim], elide).into_iter().enumerate() {
        if k > 0 {
            if last {
                f.write_str(" ")?;
            } else {
                // One newline per level below, and indentation to this depth.
                f.write_str(&"\n".repeat(shape.rank() - dim - 1))?;
                f.write_str(&" ".repeat(dim + 1))?;
            }
        }
        match i {
            Some(i) => write_level(
                f,
                shape,
                strides,
                dim + 1,
                base + i * strides[dim],
                elide,
                width,
                cells,
            )?,
            None => f.write_str("...")?,
        }
    }
    f.write_str("]")
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            Repr::Concrete(a) => write_array(f, a),
            Repr::Sim(d) => match d.download() {
                Ok(a) => write_array(f, &a),
                Err(e) => write!(f, "Tensor(sim {}, unreadable: {e})", d.ty()),
            },
            #[cfg(feature = "remote")]
            Repr::Remote(r) => match r.conn.download(r) {
                Ok(a) => write_array(f, &a),
                Err(e) => write!(f, "Tensor(remote {}, unreadable: {})", r.ty, e.message()),
            },
            Repr::Traced { ty, node, trace } => {
                crate::trace::note_size_read(*trace, "Display", ty.shape.dims(), None);
                write!(f, "Tensor(traced {ty}, node {node})")
            }
            Repr::Error(e) => write!(f, "Tensor(error: {e})"),
        }
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            Repr::Concrete(a) => write!(f, "Tensor({}, {})", a.ty(), self),
            Repr::Sim(d) => write!(f, "Tensor(sim {}, {})", d.ty(), self),
            #[cfg(feature = "remote")]
            Repr::Remote(r) => write!(f, "Tensor({} {}, {})", self.device(), r.ty, self),
            _ => fmt::Display::fmt(self, f),
        }
    }
}
