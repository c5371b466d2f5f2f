//! Products whose right operand is kept weights: `B` (`[k, n]`) packed
//! once into panels of 16 columns, `[n / 16][k][16]` (the last panel
//! zero-padded), which a register-tiled kernel reads straight, six rows of
//! `A` by one panel at a time (their sums in 12 AVX2 or 6 AVX-512
//! registers). `gemm` packs both operands on every call; with the weights
//! packed once (a cache keyed by their storage keeps them) only `A` is
//! packed per call, in blocks of six rows (`[k, 6]`), through any strides
//! (a linear layer's tokens are rows of unit stride), or gathered from a
//! convolution's image through offsets ([`Lhs::Windows`], `windows.rs`).
//! The output is written through lines of unit stride, its rows or its
//! columns. Panels are taken in groups that fit the L2 cache, each group
//! against every block of rows; threads split the panels when the weights
//! outweigh `A`, else the rows.

use super::GemmView;
use crate::CodegenError;
use rayon::prelude::*;
use std::ops::Range;

/// Columns per panel: one [`Lanes16`](super::lanes16::Lanes16).
const L: usize = 16;

/// Rows of `A` per register tile.
const MR: usize = 6;

/// Bytes of panels worked on together against each block of rows (an
/// L2's share, with room for the rows).
const GROUP_BYTES: usize = 256 << 10;

/// Weights `[k, n]` packed in panels of 16 columns (see the module doc).
#[derive(Debug)]
pub struct PackedPanels {
    k: usize,
    n: usize,
    v: Vec<f32>,
}

impl PackedPanels {
    /// Packs `b` read through `bv` (`k` rows by `n` columns, any
    /// strides). An error when the view does not fit `b`.
    pub fn new(b: &[f32], bv: GemmView) -> Result<PackedPanels, CodegenError> {
        let (k, n) = (bv.rows, bv.cols);
        let len = n.div_ceil(L).checked_mul(k).and_then(|x| x.checked_mul(L));
        let (true, Some(len)) = (bv.end().is_some_and(|e| e <= b.len()), len) else {
            return Err(bad(format!(
                "weights {bv:?} do not fit their {} elements",
                b.len()
            )));
        };
        // Zeros (the last panel's padding stays so), on huge pages: kept
        // weights stream from memory on every call, and on 4 KiB pages
        // each 4 KiB of them is a TLB miss.
        let mut v =
            super::sys::zeroed_vec::<f32>(len).ok_or_else(|| CodegenError::OutOfMemory {
                kernel: "matmul".into(),
                what: "packed weights",
                bytes: len.saturating_mul(4),
            })?;
        if len > 0 {
            v.par_chunks_mut(k * L).enumerate().for_each(|(j, panel)| {
                let cols = j * L..(j * L + L).min(n);
                for (q, row) in panel.chunks_exact_mut(L).enumerate() {
                    for (x, c) in row.iter_mut().zip(cols.clone()) {
                        *x = b[bv.offset + q * bv.row_stride + c * bv.col_stride];
                    }
                }
            });
        }
        Ok(PackedPanels { k, n, v })
    }

    /// Rows and columns of the weights.
    pub fn shape(&self) -> (usize, usize) {
        (self.k, self.n)
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.v.len() * 4
    }
}

fn bad(message: String) -> CodegenError {
    CodegenError::Launch {
        kernel: "matmul".into(),
        message,
    }
}

/// A task's part of the output: its rows `first..` by its columns
/// `col0..`, as lines of unit stride: the output's rows (`by_row`,
/// element `(i, j)` at `lines[i - first][j - col0]`) or its columns
/// (element `(i, j)` at `lines[j - col0][i - first]`).
pub(super) struct Out<'o> {
    pub lines: Vec<&'o mut [f32]>,
    pub by_row: bool,
    pub first: usize,
    pub col0: usize,
}

impl Out<'_> {
    /// Writes row `i`'s values `v` of columns `j0..j0 + v.len()`.
    #[inline(always)]
    pub fn put(&mut self, i: usize, j0: usize, v: &[f32]) {
        if self.by_row {
            self.lines[i - self.first][j0 - self.col0..][..v.len()].copy_from_slice(v);
        } else {
            for (l, x) in v.iter().enumerate() {
                self.lines[j0 + l - self.col0][i - self.first] = *x;
            }
        }
    }
}

/// A task: its rows, its columns and its lines of the output.
type Piece<'o> = (Range<usize>, Range<usize>, Vec<&'o mut [f32]>);

/// The left operand of a product with packed weights: a matrix, or a
/// convolution's window rows read in place from its image (an implicit
/// im2col, which is never built).
#[derive(Clone, Copy, Debug)]
pub enum Lhs<'a> {
    /// The matrix `.1` (any strides) over `.0`.
    Matrix(&'a [f32], GemmView),
    /// Element `(i, q)` is `x[rows[i] + cols[q]]`: an output pixel's
    /// offset in the (padded) image plus a window tap's.
    Windows {
        /// The image.
        x: &'a [f32],
        /// Per row (output pixel): its window's first element.
        rows: &'a [usize],
        /// Per column (tap): its offset from a window's first element.
        cols: &'a [usize],
    },
}

impl Lhs<'_> {
    /// Rows and columns.
    fn shape(&self) -> (usize, usize) {
        match self {
            Lhs::Matrix(_, v) => (v.rows, v.cols),
            Lhs::Windows { rows, cols, .. } => (rows.len(), cols.len()),
        }
    }

    /// Whether every element is inside its slice.
    fn fits(&self) -> bool {
        match self {
            Lhs::Matrix(a, v) => v.end().is_some_and(|e| e <= a.len()),
            Lhs::Windows { x, rows, cols } => {
                let (r, c) = (rows.iter().max(), cols.iter().max());
                match (r, c) {
                    (Some(r), Some(c)) => r.checked_add(*c).is_some_and(|e| e < x.len()),
                    _ => true,
                }
            }
        }
    }

    /// Element `(i, q)`.
    #[inline(always)]
    fn at(&self, i: usize, q: usize) -> f32 {
        match self {
            Lhs::Matrix(a, v) => a[v.offset + i * v.row_stride + q * v.col_stride],
            Lhs::Windows { x, rows, cols } => x[rows[i] + cols[q]],
        }
    }
}

/// `out = a @ b` for `a` (`av`: `m` rows by `k` columns, any strides) and
/// packed `b`, into
/// `out` through `ov` (`m` by `n`, rows or columns of unit stride, which
/// it overwrites), split over up to `threads` threads: by panels when
/// the weights outweigh `A`, else by blocks of rows. An error when a view does not
/// fit its slice or the shapes disagree.
pub fn matmul_f32_panels(
    (a, av): (&[f32], GemmView),
    b: &PackedPanels,
    out: (&mut [f32], GemmView),
    threads: usize,
) -> Result<(), CodegenError> {
    matmul_f32_panels_from(Lhs::Matrix(a, av), b, out, threads)
}

/// [`matmul_f32_panels`] for a left operand of either kind ([`Lhs`]).
pub fn matmul_f32_panels_from(
    a: Lhs<'_>,
    b: &PackedPanels,
    (out, ov): (&mut [f32], GemmView),
    threads: usize,
) -> Result<(), CodegenError> {
    let ((m, ak), k, n) = (a.shape(), b.k, b.n);
    let fits = |v: &GemmView, len: usize| v.end().is_some_and(|e| e <= len);
    let by_row = ov.col_stride == 1 && (m < 2 || ov.row_stride >= n);
    let by_col = ov.row_stride == 1 && (n < 2 || ov.col_stride >= m);
    if ak != k
        || ov.rows != m
        || ov.cols != n
        || !a.fits()
        || !fits(&ov, out.len())
        || !(by_row || by_col)
    {
        let a = match a {
            Lhs::Matrix(x, av) => format!("{av:?} ({} elements)", x.len()),
            Lhs::Windows { x, .. } => format!("[{m}, {ak}] windows of {} elements", x.len()),
        };
        return Err(bad(format!(
            "{a} @ packed [{k}, {n}] -> {ov:?} ({} elements) do not fit",
            out.len()
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    // The output's lines of unit stride, in order.
    let (count, len, step) = match by_row {
        true => (m, n, ov.row_stride),
        false => (n, m, ov.col_stride),
    };
    let mut lines = super::view_lines(out, ov.offset, count, len, step);
    if k == 0 {
        lines.iter_mut().for_each(|l| l.fill(0.0));
        return Ok(());
    }
    let panels = n.div_ceil(L);
    let threads = threads.max(1);
    // By rows when the weights are no bigger than `A` (each thread then
    // reads all the panels), else by panels (each packs all of `A`):
    // both need enough to go round.
    let by_rows = (m >= MR * threads && panels * L <= m) || panels < threads;
    let (row_parts, panel_parts) = if by_rows {
        (threads.min(m.div_ceil(MR)), 1)
    } else {
        (1, threads.min(panels))
    };
    let rows_per = m.div_ceil(row_parts).div_ceil(MR) * MR;
    let panels_per = panels.div_ceil(panel_parts);
    let row_ranges: Vec<Range<usize>> = (0..m)
        .step_by(rows_per)
        .map(|r| r..(r + rows_per).min(m))
        .collect();
    let col_ranges: Vec<Range<usize>> = (0..panels)
        .step_by(panels_per)
        .map(|p| p * L..((p + panels_per) * L).min(n))
        .collect();
    let mut tasks: Vec<Piece<'_>> = row_ranges
        .iter()
        .flat_map(|r| {
            col_ranges
                .iter()
                .map(move |c| (r.clone(), c.clone(), Vec::new()))
        })
        .collect();
    // Each line's pieces go to the tasks that cover them.
    let (along, across) = match by_row {
        true => (&row_ranges, &col_ranges),
        false => (&col_ranges, &row_ranges),
    };
    for (x, line) in lines.into_iter().enumerate() {
        let owner = along.iter().position(|r| r.contains(&x)).unwrap_or(0);
        let mut rest = line;
        for (y, piece) in across.iter().enumerate() {
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(piece.len());
            let t = match by_row {
                true => owner * col_ranges.len() + y,
                false => y * col_ranges.len() + owner,
            };
            tasks[t].2.push(mine);
            rest = tail;
        }
    }
    let one = |(rows, cols, lines): Piece<'_>| {
        let mut out = Out {
            lines,
            by_row,
            first: rows.start,
            col0: cols.start,
        };
        let ps = cols.start / L..cols.end.div_ceil(L);
        products_v(a, &b.v, k, n, rows, ps, &mut out);
    };
    match tasks.len() {
        1 => tasks.into_iter().for_each(one),
        _ => tasks.into_par_iter().for_each(one),
    }
    Ok(())
}

thread_local! {
    /// `A`, packed per block of six rows: `[blocks, k, 6]`.
    static PACKED_A: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Rows `rows` by panels `panels` of the product into `out`, in AVX-512
/// or AVX2 where the CPU has them. `A` is first packed in blocks of six
/// rows, `[k, 6]` each: the kernel then reads one run per block (for `A`
/// as columns, every panel would otherwise fetch each column's six values
/// from another cache line, or page, again; for `A` as rows, the six row
/// pointers and their bounds checks cost registers the sums need).
#[allow(clippy::too_many_arguments)]
fn products_v(
    a: Lhs<'_>,
    b: &[f32],
    k: usize,
    n: usize,
    rows: Range<usize>,
    panels: Range<usize>,
    out: &mut Out<'_>,
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = super::lanes16::isa() {
        // Rows packed a chunk at a time, each chunk sized to stay in L2
        // while every panel passes it when the panels are few enough to
        // stay there too; else all at once, each panel then passing them
        // all.
        let few = panels.len() * k * L * 4 <= GROUP_BYTES;
        let chunk = match few {
            true => (GROUP_BYTES / (k * MR * 4).max(1)).max(1) * MR,
            false => rows.len().div_ceil(MR) * MR,
        };
        return PACKED_A.with(|cell| {
            // This thread's buffer, or a fresh one should it be in use.
            let mut own = Vec::new();
            let mut held = cell.try_borrow_mut();
            let packed = match held.as_deref_mut() {
                Ok(v) => v,
                Err(_) => &mut own,
            };
            let most = chunk.min(rows.len().div_ceil(MR) * MR) * k;
            if packed.len() < most {
                packed.resize(most, 0.0);
            }
            for c0 in rows.clone().step_by(chunk.max(1)) {
                let part = c0..(c0 + chunk).min(rows.end);
                let blocks = part.len().div_ceil(MR);
                let blocks_of = packed.chunks_exact_mut(k * MR).take(blocks);
                for (bi, block) in blocks_of.enumerate() {
                    let i0 = part.start + bi * MR;
                    let r = (part.end - i0).min(MR);
                    let (a, av) = match a {
                        Lhs::Matrix(a, av) => (a, av),
                        Lhs::Windows { x, rows, cols } => {
                            // Each tap's values for the block's pixels: a
                            // run of six when the pixels are neighbours in
                            // the image (one output row at stride 1, or
                            // an image stored by column phases).
                            let rows = &rows[i0..i0 + r];
                            let first = rows[0];
                            if r == MR && rows.iter().enumerate().all(|(t, &at)| at == first + t) {
                                for (dst, &c) in block.chunks_exact_mut(MR).zip(cols) {
                                    dst.copy_from_slice(&x[first + c..first + c + MR]);
                                }
                                continue;
                            }
                            for (dst, &c) in block.chunks_exact_mut(MR).zip(cols) {
                                for (d, &at) in dst.iter_mut().zip(rows) {
                                    *d = x[at + c];
                                }
                                dst[r..].fill(0.0);
                            }
                            continue;
                        }
                    };
                    let first = av.offset + i0 * av.row_stride;
                    if av.row_stride == 1 {
                        for (q, dst) in block.chunks_exact_mut(MR).enumerate() {
                            let at = first + q * av.col_stride;
                            for (d, x) in dst.iter_mut().zip(&a[at..at + r]) {
                                *d = *x;
                            }
                            dst[r..].fill(0.0);
                        }
                    } else {
                        // Rows (of any column stride), read side by side.
                        let reach = (k - 1) * av.col_stride + 1;
                        let rows: Vec<&[f32]> = (0..r)
                            .map(|x| &a[first + x * av.row_stride..][..reach])
                            .collect();
                        for (q, dst) in block.chunks_exact_mut(MR).enumerate() {
                            for (d, row) in dst.iter_mut().zip(&rows) {
                                *d = row[q * av.col_stride];
                            }
                            dst[r..].fill(0.0);
                        }
                    }
                }
                let src = (&packed[..blocks * k * MR], part.start);
                x86::products(isa, src, b, k, n, part, panels.clone(), out);
            }
        });
    }
    products(a, b, k, n, rows, panels, out)
}

/// [`products_v`] over lane arrays, one row at a time, summing in the
/// same order with the same fused multiply-adds.
#[allow(clippy::too_many_arguments)]
pub(super) fn products(
    a: Lhs<'_>,
    b: &[f32],
    k: usize,
    n: usize,
    rows: Range<usize>,
    panels: Range<usize>,
    out: &mut Out<'_>,
) {
    for j in panels {
        let panel = &b[j * k * L..(j + 1) * k * L];
        for i in rows.clone() {
            let mut acc = [0.0f32; L];
            for (q, bq) in panel.chunks_exact(L).enumerate() {
                let x = a.at(i, q);
                for (acc, b) in acc.iter_mut().zip(bq) {
                    *acc = x.mul_add(*b, *acc);
                }
            }
            out.put(i, j * L, &acc[..(n - j * L).min(L)]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::lanes16::{versions, Lanes16, Spread};
    use super::{Out, Range, GROUP_BYTES, L, MR};

    /// Rows of `A` packed in blocks of six (`[blocks, k, 6]`) from row
    /// `.1` on.
    type Source<'a> = (&'a [f32], usize);

    /// `super::products`, six rows by one panel at a time, the panels in
    /// groups that stay in L2 while every block of rows passes them.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn products_with<V: Lanes16>(
        src: Source<'_>,
        b: &[f32],
        k: usize,
        n: usize,
        rows: Range<usize>,
        panels: Range<usize>,
        out: &mut Out<'_>,
    ) {
        let group = (GROUP_BYTES / (k * L * 4).max(1)).max(1);
        let blocks = rows.len().div_ceil(MR).max(1);
        for g0 in panels.clone().step_by(group) {
            let gs = g0..(g0 + group).min(panels.end);
            // The next group, prefetched a piece per tile: its stream
            // from memory then runs under this group's products, where
            // the first block of rows would wait on it and the rest
            // leave memory idle.
            let next = &b[gs.end * k * L..(gs.end + group).min(panels.end) * k * L];
            let piece = next.len().div_ceil(blocks * gs.len());
            let mut pieces = next.chunks(piece.max(1));
            let mut i = rows.start;
            while i < rows.end {
                let r = (rows.end - i).min(MR);
                for j in gs.clone() {
                    let panel = &b[j * k * L..(j + 1) * k * L];
                    let ahead = pieces.next().unwrap_or_default();
                    let at = (i, j, n);
                    match r {
                        1 => tile::<V, 1>(src, (panel, ahead), k, at, out),
                        2 => tile::<V, 2>(src, (panel, ahead), k, at, out),
                        3 => tile::<V, 3>(src, (panel, ahead), k, at, out),
                        4 => tile::<V, 4>(src, (panel, ahead), k, at, out),
                        5 => tile::<V, 5>(src, (panel, ahead), k, at, out),
                        _ => tile::<V, 6>(src, (panel, ahead), k, at, out),
                    }
                }
                i += r;
            }
        }
    }

    /// Rows `i0..i0 + R` by panel `j` (`[k, 16]`), prefetching `ahead`
    /// over the sum.
    #[inline(always)]
    fn tile<V: Lanes16, const R: usize>(
        src: Source<'_>,
        (panel, ahead): (&[f32], &[f32]),
        k: usize,
        (i0, j, n): (usize, usize, usize),
        out: &mut Out<'_>,
    ) {
        let panel = &panel[..k * L];
        let mut acc = [V::splat(0.0); R];
        let (a, first) = src;
        let block = (i0 - first) / MR * k * MR;
        let block = &a[block..block + k * MR];
        let mut ahead = Spread::new(ahead, k);
        for (col, b) in block.chunks_exact(MR).zip(panel.chunks_exact(L)) {
            ahead.step();
            let b = V::load(b, 0);
            for (acc, x) in acc.iter_mut().zip(col) {
                *acc = V::splat(*x).fmadd(b, *acc);
            }
        }
        let valid = (n - j * L).min(L);
        for (r, acc) in acc.into_iter().enumerate() {
            if out.by_row && valid == L {
                acc.store(out.lines[i0 + r - out.first], j * L - out.col0);
                continue;
            }
            let mut lanes = [0.0f32; L];
            acc.store(&mut lanes, 0);
            out.put(i0 + r, j * L, &lanes[..valid]);
        }
    }

    versions!(products = products_with(
        src: Source<'_>,
        b: &[f32],
        k: usize,
        n: usize,
        rows: Range<usize>,
        panels: Range<usize>,
        out: &mut Out<'_>
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(i: usize, s: usize) -> f32 {
        ((i * 37 + s * 11) % 29) as f32 / 14.0 - 1.0
    }

    /// Products of every layout against an f64 sum: `A` as rows, as
    /// columns and through other strides; the output as rows and as
    /// columns; shapes with partial panels and row blocks; on one to
    /// three threads. The vector kernel and the lane arrays agree bit
    /// for bit.
    #[test]
    fn every_layout_matches_the_definition() {
        for (m, k, n) in [
            (1, 1, 1),
            (7, 5, 16),
            (13, 33, 40),
            (64, 147, 64),
            (3, 20, 50),
            (5, 0, 17),
        ] {
            let bt: Vec<f32> = (0..k * n + 3).map(|i| value(i, 2)).collect();
            // B read transposed from an [n, k] buffer, as OIHW weights are.
            let bv = GemmView {
                offset: 3,
                rows: k,
                cols: n,
                row_stride: 1,
                col_stride: k,
            };
            let b = PackedPanels::new(&bt, bv).expect("fits");
            assert_eq!(b.shape(), (k, n));
            let a: Vec<f32> = (0..2 * m * k + 5).map(|i| value(i, 1)).collect();
            let a_views = [
                (k, 1),     // rows
                (1, m + 1), // columns (a gap between them)
                (2 * k, 2), // neither
            ];
            for (ars, acs) in a_views {
                let av = GemmView {
                    offset: 1,
                    rows: m,
                    cols: k,
                    row_stride: ars,
                    col_stride: acs,
                };
                let want: Vec<f64> = (0..m * n)
                    .map(|x| {
                        let (i, j) = (x / n, x % n);
                        (0..k)
                            .map(|q| {
                                let aa = a[1 + i * ars + q * acs] as f64;
                                aa * bt[3 + q + j * k] as f64
                            })
                            .sum()
                    })
                    .collect();
                for (ors, ocs) in [(n + 2, 1), (1, m + 1)] {
                    let ov = GemmView {
                        offset: 2,
                        rows: m,
                        cols: n,
                        row_stride: ors,
                        col_stride: ocs,
                    };
                    let len = ov.end().expect("fits");
                    let mut first: Option<Vec<f32>> = None;
                    for threads in [1, 2, 3] {
                        let mut out = vec![f32::NAN; len + 1];
                        matmul_f32_panels((&a, av), &b, (&mut out, ov), threads).expect("fits");
                        for (x, w) in want.iter().enumerate() {
                            let got = out[2 + x / n * ors + x % n * ocs] as f64;
                            assert!(
                                (got - w).abs() <= 1e-5 * (1.0 + w.abs()),
                                "{m}x{k}x{n} A {ars},{acs} out {ors},{ocs} {threads}: {got} vs {w}"
                            );
                        }
                        let written = out.iter().filter(|x| !x.is_nan()).count();
                        assert_eq!(written, m * n, "only the view is written");
                        match &first {
                            None => first = Some(out),
                            Some(f) => assert!(
                                f.iter().zip(&out).all(|(x, y)| x.to_bits() == y.to_bits()),
                                "threads change no bit"
                            ),
                        }
                    }
                    // The lane arrays, one task over everything.
                    let mut lanes = vec![f32::NAN; len + 1];
                    let f = first.expect("a run");
                    let (count, llen, step) = match ocs {
                        1 => (m, n, ors),
                        _ => (n, m, ocs),
                    };
                    let lines = super::super::view_lines(&mut lanes, 2, count, llen, step);
                    let mut o = Out {
                        lines,
                        by_row: ocs == 1,
                        first: 0,
                        col0: 0,
                    };
                    products(
                        Lhs::Matrix(&a, av),
                        &b.v,
                        k,
                        n,
                        0..m,
                        0..n.div_ceil(L),
                        &mut o,
                    );
                    assert!(
                        f.iter()
                            .zip(&lanes)
                            .all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{m}x{k}x{n}: the vector kernel and the lane arrays differ"
                    );
                }
            }
        }
    }

    #[test]
    fn views_that_do_not_fit_are_errors() {
        let w = vec![1.0f32; 12];
        let bv = GemmView::row_major(3, 4);
        assert!(PackedPanels::new(&w[1..], bv).is_err());
        let b = PackedPanels::new(&w, bv).expect("fits");
        let a = vec![1.0f32; 6];
        let av = GemmView::row_major(2, 3);
        let ov = GemmView::row_major(2, 4);
        let mut out = vec![0.0f32; 8];
        assert!(matmul_f32_panels((&a, av), &b, (&mut out, ov), 1).is_ok());
        assert_eq!(out, vec![3.0; 8]);
        assert!(matmul_f32_panels((&a[1..], av), &b, (&mut out, ov), 1).is_err());
        assert!(matmul_f32_panels((&a, av), &b, (&mut out[1..], ov), 1).is_err());
        let wide = GemmView { cols: 4, ..av };
        assert!(matmul_f32_panels((&a, wide), &b, (&mut out, ov), 1).is_err());
        let overlapping = GemmView {
            row_stride: 2,
            ..ov
        };
        assert!(matmul_f32_panels((&a, av), &b, (&mut out, overlapping), 1).is_err());
        // Windows: element (i, q) is x[rows[i] + cols[q]]; one past the
        // end is an error, not a read.
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let windows = |rows, cols| Lhs::Windows { x: &x, rows, cols };
        let f = matmul_f32_panels_from(windows(&[0, 2], &[0, 1, 2]), &b, (&mut out, ov), 1);
        assert!(f.is_ok());
        assert_eq!(&out[..4], &[6.0; 4]);
        assert_eq!(&out[4..], &[12.0; 4]);
        let past = windows(&[0, 3], &[0, 1, 2]);
        assert!(matmul_f32_panels_from(past, &b, (&mut out, ov), 1).is_err());
        let narrow = windows(&[0, 2], &[0, 1]);
        assert!(matmul_f32_panels_from(narrow, &b, (&mut out, ov), 1).is_err());
    }
}
