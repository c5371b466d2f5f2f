//! Matrix-vector products: matmuls of at most [`MAX_ROWS`] rows (a
//! decode step's `x @ W`, a tied lm_head's `x @ wte^T`), which `gemm`
//! runs at about half the memory bandwidth. Each weight element is read
//! once, the output columns split over the pool threads; the loops are
//! plain bounds-checked Rust over fixed-size lane arrays, which the
//! compiler vectorises inside the `#[target_feature]` entry points (the
//! only unsafe here is calling those on a CPU that has the features).
//!
//! Two layouts of `b` (`k x n`) qualify: unit column stride (`W [k, n]`
//! row-major: output rows accumulate scaled rows of `W`, in a fixed order
//! (see [`rows`]), over pieces of [`ROW_PIECE`] rows whose partial sums
//! are then added in order, so each piece streams a contiguous block of
//! `W` and the pieces run on the threads) and unit row stride (`W^T` of a
//! row-major `[n, k]`: one dot product per output over a contiguous row,
//! summed in 16 lanes then pairwise). Every sum is independent of the
//! thread count.

use super::MatView;
use rayon::prelude::*;

/// The most rows (`m`) a product may have to take this path: each
/// output row costs a pass over the cached column block, and `gemm`'s
/// packed kernels win once rows reuse each weight element enough.
pub(super) const MAX_ROWS: usize = 4;

/// Lanes of an accumulator (a 64-byte line of f32).
const LANES: usize = 16;

/// Output elements per block of the row-major form (`m` rows of a block
/// of columns): the block stays in L1 while the weight's rows stream
/// past, and at `m = 1` a block is a whole row of a decode step's `W`, so
/// a piece reads one contiguous run of it.
const BLOCK: usize = 4096;

/// Rows of `b` per piece of the row-major form, set by `k` alone (never
/// by the thread count, so neither are the sums): a contiguous run of `W`
/// that one thread streams, into partial sums of its own. GPT-2's
/// `k = 768` makes 4 pieces, `k = 3072` 16.
const ROW_PIECE: usize = 192;

/// The element types the path computes in (f32 and f64).
pub(super) trait Elem: Copy + Send + Sync + 'static {
    /// Zero.
    const ZERO: Self;
    /// `self * b + c`, rounded once.
    fn fma(self, b: Self, c: Self) -> Self;
    /// `self + b`.
    fn add(self, b: Self) -> Self;
    /// The dot products of each of `M` rows of `xs` (`M x k`, `k` the
    /// column's length) with column `c`, as [`dot1`] sums them, on the
    /// vector width `isa`.
    #[inline(always)]
    fn dots<const M: usize>(isa: Isa, xs: &[Self], c: &[Self]) -> [Self; M] {
        let _ = isa;
        dots(xs, c)
    }
}

impl Elem for f32 {
    const ZERO: f32 = 0.0;
    // The compiler leaves `dot1`'s lanes scalar for f32: written out.
    #[inline(always)]
    fn dots<const M: usize>(isa: Isa, xs: &[f32], c: &[f32]) -> [f32; M] {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: an `Isa` is only made by `isa()`, from the CPU's
        // features, so the instructions each version uses exist.
        unsafe {
            match isa {
                Isa::Avx512 => x86::dots_avx512(xs, c),
                Isa::Avx2 => x86::dots_avx2(xs, c),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = isa;
            dots(xs, c)
        }
    }
    #[inline(always)]
    fn fma(self, b: f32, c: f32) -> f32 {
        self.mul_add(b, c)
    }
    #[inline(always)]
    fn add(self, b: f32) -> f32 {
        self + b
    }
}

impl Elem for f64 {
    const ZERO: f64 = 0.0;
    #[inline(always)]
    fn fma(self, b: f64, c: f64) -> f64 {
        self.mul_add(b, c)
    }
    #[inline(always)]
    fn add(self, b: f64) -> f64 {
        self + b
    }
}

/// How `b` is laid out, if the path applies.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Form {
    /// Unit column stride: row `p` of `b` is contiguous.
    Rows,
    /// Unit row stride: column `j` of `b` is contiguous.
    Cols,
}

/// The vector width the entry points are compiled for (made only by
/// [`isa`], from the CPU's features).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Isa {
    Avx2,
    Avx512,
}

fn isa() -> Option<Isa> {
    #[cfg(target_arch = "x86_64")]
    {
        let f = crate::host::cpu_features();
        if f.avx512f && f.fma {
            return Some(Isa::Avx512);
        }
        if f.avx2 && f.fma {
            return Some(Isa::Avx2);
        }
    }
    None
}

/// Computes `out[b] = a[b] @ bm[b]` (`dims = [batch, m, k, n]`, `out`
/// contiguous) when the product is small in `m` and `b` has a unit stride
/// and this CPU has FMA; returns false, having done nothing, otherwise.
/// The caller has checked the views with `check_views` and that `m`, `n`
/// and `k` are not 0; every access is still bounds-checked here.
pub(super) fn try_gemv<T: Elem>(
    (a, av): (&[T], MatView),
    (bm, bv): (&[T], MatView),
    out: &mut [T],
    [batch, m, k, n]: [usize; 4],
    threads: usize,
) -> bool {
    if m > MAX_ROWS {
        return false;
    }
    let [_, brs, bcs] = bv.strides;
    let form = if bcs == 1 || n == 1 {
        Form::Rows
    } else if brs == 1 || k == 1 {
        Form::Cols
    } else {
        return false;
    };
    let Some(isa) = isa() else {
        return false;
    };
    let job = Job {
        a,
        av,
        bm,
        bv,
        m,
        k,
        n,
        form,
        isa,
    };
    if batch >= threads && threads > 1 {
        out.par_chunks_mut(m * n)
            .enumerate()
            .for_each(|(i, o)| job.matrix(i, o, 1));
    } else {
        for (i, o) in out.chunks_mut(m * n).enumerate() {
            job.matrix(i, o, threads);
        }
    }
    true
}

/// One product's operands and shape.
struct Job<'a, T> {
    a: &'a [T],
    av: MatView,
    bm: &'a [T],
    bv: MatView,
    m: usize,
    k: usize,
    n: usize,
    form: Form,
    isa: Isa,
}

impl<T: Elem> Job<'_, T> {
    /// Matrix `i` of the batch into `o` (`m x n`), its columns split
    /// over up to `threads` threads.
    fn matrix(&self, i: usize, o: &mut [T], threads: usize) {
        let (m, k, n) = (self.m, self.k, self.n);
        // `a`'s rows gathered contiguous: m x k elements, small.
        let at = |v: MatView, r: usize, c: usize| {
            let [bs, rs, cs] = v.strides;
            (v.offset + i as i64 * bs + r as i64 * rs + c as i64 * cs) as usize
        };
        let xs: Vec<T> = (0..m)
            .flat_map(|r| (0..k).map(move |c| (r, c)))
            .map(|(r, c)| self.a[at(self.av, r, c)])
            .collect();
        let base = self.bv.offset + i as i64 * self.bv.strides[0];
        if self.form == Form::Rows {
            self.row_pieces(&xs, base, o, threads);
            return;
        }
        // Pieces of whole lane groups, a few per thread, so a thread slowed
        // by other load does not hold the rest up.
        let pieces = if threads == 1 { 1 } else { 2 * threads };
        let width = n.div_ceil(pieces).next_multiple_of(LANES).max(LANES);
        let run = |j0: usize, part: &mut [T], w: usize| {
            let piece = Piece {
                xs: &xs,
                w: self.bm,
                base,
                strides: [self.bv.strides[1], self.bv.strides[2]],
                m,
                k,
                rows: 0..k,
                j0,
                width: w,
                isa: self.isa,
            };
            run_piece(self.isa, self.form, &piece, part);
        };
        if m == 1 {
            if threads > 1 {
                o.par_chunks_mut(width)
                    .enumerate()
                    .for_each(|(c, part)| run(c * width, part, part.len()));
            } else {
                run(0, o, n);
            }
            return;
        }
        // Several rows: each piece fills an m x width block of its own,
        // then the blocks are laid into the rows.
        let starts: Vec<usize> = (0..n).step_by(width).collect();
        let block = |&j0: &usize| {
            let w = width.min(n - j0);
            let mut part = vec![T::ZERO; m * w];
            run(j0, &mut part, w);
            (j0, w, part)
        };
        let blocks: Vec<(usize, usize, Vec<T>)> = if threads > 1 {
            starts.par_iter().map(block).collect()
        } else {
            starts.iter().map(block).collect()
        };
        for (j0, w, part) in blocks {
            for (r, src) in part.chunks(w).enumerate() {
                o[r * n + j0..r * n + j0 + w].copy_from_slice(src);
            }
        }
    }
}

impl<T: Elem> Job<'_, T> {
    /// The row-major form of matrix `i` (`xs` its `a` rows, `base` its
    /// `b`'s element `(0, 0)`) into `o` (`m x n`): pieces of
    /// [`ROW_PIECE`] rows, each over a block of columns (one block unless
    /// there are more threads than row pieces), each summed into a partial
    /// of its own; then each output is its pieces' partials added in
    /// order of rows.
    fn row_pieces(&self, xs: &[T], base: i64, o: &mut [T], threads: usize) {
        let (m, k, n) = (self.m, self.k, self.n);
        let per = k.div_ceil(k.div_ceil(ROW_PIECE)).next_multiple_of(4).max(4);
        let row_pieces = k.div_ceil(per);
        let col_pieces = threads.div_ceil(row_pieces).max(1);
        let width = n.div_ceil(col_pieces).next_multiple_of(LANES).max(LANES);
        let piece = |r: usize, j0: usize| Piece {
            xs,
            w: self.bm,
            base,
            strides: [self.bv.strides[1], self.bv.strides[2]],
            m,
            k,
            rows: r * per..((r + 1) * per).min(k),
            j0,
            width: width.min(n - j0),
            isa: self.isa,
        };
        if row_pieces == 1 && width >= n {
            run_piece(self.isa, Form::Rows, &piece(0, 0), o);
            return;
        }
        let tasks: Vec<(usize, usize)> = (0..n)
            .step_by(width)
            .flat_map(|j0| (0..row_pieces).map(move |r| (r, j0)))
            .collect();
        let part = |&(r, j0): &(usize, usize)| {
            let p = piece(r, j0);
            let mut out = vec![T::ZERO; m * p.width];
            run_piece(self.isa, Form::Rows, &p, &mut out);
            out
        };
        let parts: Vec<Vec<T>> = if threads > 1 {
            tasks.par_iter().map(part).collect()
        } else {
            tasks.iter().map(part).collect()
        };
        for (&(r, j0), part) in tasks.iter().zip(&parts) {
            let w = width.min(n - j0);
            for (row, src) in part.chunks(w).enumerate() {
                let dst = &mut o[row * n + j0..row * n + j0 + w];
                if r == 0 {
                    dst.copy_from_slice(src);
                } else {
                    dst.iter_mut().zip(src).for_each(|(d, &s)| *d = d.add(s));
                }
            }
        }
    }
}

/// The columns `j0..j0 + width` of one product (and, in the row-major
/// form, the rows `rows` of `b`).
struct Piece<'a, T> {
    /// `a`'s rows, `m x k` contiguous.
    xs: &'a [T],
    /// `b`'s storage.
    w: &'a [T],
    /// `b`'s element `(0, 0)` for this matrix of the batch.
    base: i64,
    /// `b`'s row and column strides.
    strides: [i64; 2],
    m: usize,
    /// `a`'s row length (`xs`'s row stride).
    k: usize,
    /// The rows of `b` a row-major piece sums over (the column form sums
    /// all `k`).
    rows: std::ops::Range<usize>,
    j0: usize,
    width: usize,
    isa: Isa,
}

impl<T> Piece<'_, T> {
    /// Index of `b`'s element `(p, j)` (inside `w` by the caller's view
    /// check; the slicing that uses it checks again).
    #[inline(always)]
    fn at(&self, p: usize, j: usize) -> usize {
        (self.base + p as i64 * self.strides[0] + j as i64 * self.strides[1]) as usize
    }
}

fn run_piece<T: Elem>(isa: Isa, form: Form, p: &Piece<'_, T>, out: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `isa()` chose the width from the CPU's features (AVX2
        // and FMA, or AVX-512F and FMA), so the instructions these
        // functions are compiled with exist; their bodies are safe code.
        unsafe {
            match (isa, form) {
                (Isa::Avx2, Form::Rows) => rows_avx2(p, out),
                (Isa::Avx2, Form::Cols) => cols_avx2(p, out),
                (Isa::Avx512, Form::Rows) => rows_avx512(p, out),
                (Isa::Avx512, Form::Cols) => cols_avx512(p, out),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    match form {
        Form::Rows => rows(p, out),
        Form::Cols => cols(p, out),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn rows_avx2<T: Elem>(p: &Piece<'_, T>, out: &mut [T]) {
    rows(p, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn cols_avx2<T: Elem>(p: &Piece<'_, T>, out: &mut [T]) {
    cols(p, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn rows_avx512<T: Elem>(p: &Piece<'_, T>, out: &mut [T]) {
    rows(p, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn cols_avx512<T: Elem>(p: &Piece<'_, T>, out: &mut [T]) {
    cols(p, out)
}

/// Unit column stride: `out[r][j] = sum_p xs[r][p] * b[p][j0 + j]` over
/// the piece's rows `p`. Each pass over the block adds four rows a
/// quarter of the piece apart (`p`, `p + q`, `p + 2q`, `p + 3q`, for `p`
/// in order), so the weight is read as four long sequential streams: four
/// adjacent rows, at GPT-2's 768 columns, are four streams of 3 KB each,
/// which read 19-25 GB/s against 27-31 for the quarters (`gemv` bench,
/// alternated in one window). The rows past the quarters come last, in
/// order. The order depends on the piece alone, never on the threads.
#[inline(always)]
fn rows<T: Elem>(pc: &Piece<'_, T>, out: &mut [T]) {
    let (m, k, width) = (pc.m, pc.k, pc.width);
    let (first, end) = (pc.rows.start, pc.rows.end);
    out[..m * width].fill(T::ZERO);
    let block = (BLOCK / m).next_multiple_of(LANES);
    let q = (end - first) / 4;
    for jb in (0..width).step_by(block) {
        let bw = block.min(width - jb);
        let row = |p: usize| {
            let s = pc.at(p, pc.j0 + jb);
            &pc.w[s..s + bw]
        };
        for p in first..first + q {
            let (w0, w1, w2, w3) = (row(p), row(p + q), row(p + 2 * q), row(p + 3 * q));
            for r in 0..m {
                let x = |d: usize| pc.xs[r * k + p + d * q];
                let (x0, x1, x2, x3) = (x(0), x(1), x(2), x(3));
                let o = &mut out[r * width + jb..r * width + jb + bw];
                for ((((o, &a), &b), &c), &d) in o.iter_mut().zip(w0).zip(w1).zip(w2).zip(w3) {
                    *o = d.fma(x3, c.fma(x2, b.fma(x1, a.fma(x0, *o))));
                }
            }
        }
        for p in first + 4 * q..end {
            let w0 = row(p);
            for r in 0..m {
                let x0 = pc.xs[r * k + p];
                let o = &mut out[r * width + jb..r * width + jb + bw];
                for (o, &a) in o.iter_mut().zip(w0) {
                    *o = a.fma(x0, *o);
                }
            }
        }
    }
}

/// Unit row stride: `out[r][j] = dot(xs[r], column j0 + j of b)`, a
/// column at a time for every row, so the columns are read in order as
/// one stream: a tied lm_head read four interleaved columns at a time
/// took 9-26% longer (cold 768x50257, alternated in one process).
#[inline(always)]
fn cols<T: Elem>(pc: &Piece<'_, T>, out: &mut [T]) {
    match pc.m {
        1 => cols_of::<T, 1>(pc, out),
        2 => cols_of::<T, 2>(pc, out),
        3 => cols_of::<T, 3>(pc, out),
        _ => cols_of::<T, 4>(pc, out),
    }
}

/// [`cols`] for `M` rows (`pc.m == M`, at most [`MAX_ROWS`]).
#[inline(always)]
fn cols_of<T: Elem, const M: usize>(pc: &Piece<'_, T>, out: &mut [T]) {
    let (k, width) = (pc.k, pc.width);
    let xs = &pc.xs[..M * k];
    for j in 0..width {
        let s = pc.at(0, pc.j0 + j);
        let d = T::dots::<M>(pc.isa, xs, &pc.w[s..s + k]);
        for (r, d) in d.into_iter().enumerate() {
            out[r * width + j] = d;
        }
    }
}

/// [`dot1`] of each of the `M` rows of `xs` with `c`.
#[inline(always)]
fn dots<T: Elem, const M: usize>(xs: &[T], c: &[T]) -> [T; M] {
    let k = c.len();
    std::array::from_fn(|r| dot1(&xs[r * k..(r + 1) * k], c))
}

/// The dot product of `x` with a column of its length: 16 lanes, each
/// summing its elements of the whole lane groups in order, then the tail
/// in order, then the lanes pairwise and the tail last.
#[inline(always)]
fn dot1<T: Elem>(x: &[T], c: &[T]) -> T {
    let (xv, xt) = x.as_chunks::<LANES>();
    let (cv, ct) = c.as_chunks::<LANES>();
    let mut acc = [T::ZERO; LANES];
    for (x, c) in xv.iter().zip(cv) {
        for l in 0..LANES {
            acc[l] = c[l].fma(x[l], acc[l]);
        }
    }
    finish(acc, xt, ct)
}

#[inline(always)]
fn finish<T: Elem>(mut lanes: [T; LANES], xt: &[T], ct: &[T]) -> T {
    let mut tail = T::ZERO;
    for (&x, &w) in xt.iter().zip(ct) {
        tail = w.fma(x, tail);
    }
    let mut half = LANES / 2;
    while half > 0 {
        for l in 0..half {
            lanes[l] = lanes[l].add(lanes[l + half]);
        }
        half /= 2;
    }
    lanes[0].add(tail)
}

/// [`dots`] for f32 in AVX-512 and AVX2 intrinsics, the same sums in the
/// same order (one 16-lane accumulator per row: one register, or two),
/// each line of the column loaded once for all rows.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{finish, LANES};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f,fma")]
    pub(super) fn dots_avx512<const M: usize>(xs: &[f32], c: &[f32]) -> [f32; M] {
        let k = c.len();
        let rows: [_; M] = std::array::from_fn(|r| xs[r * k..(r + 1) * k].as_chunks::<LANES>());
        let (cv, ct) = c.as_chunks::<LANES>();
        let mut acc = [_mm512_setzero_ps(); M];
        // SAFETY (loads): each pointer is a `&[f32; 16]`'s, 64 readable bytes.
        let ld = |v: &[f32; LANES]| unsafe { _mm512_loadu_ps(v.as_ptr()) };
        for (i, cl) in cv.iter().enumerate() {
            let cl = ld(cl);
            for (a, (xv, _)) in acc.iter_mut().zip(&rows) {
                *a = _mm512_fmadd_ps(cl, ld(&xv[i]), *a);
            }
        }
        std::array::from_fn(|r| {
            let mut lanes = [0f32; LANES];
            // SAFETY: `lanes` is 64 writable bytes.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc[r]) };
            finish(lanes, rows[r].1, ct)
        })
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn dots_avx2<const M: usize>(xs: &[f32], c: &[f32]) -> [f32; M] {
        let k = c.len();
        let rows: [_; M] = std::array::from_fn(|r| xs[r * k..(r + 1) * k].as_chunks::<LANES>());
        let (cv, ct) = c.as_chunks::<LANES>();
        // Indexed [row][half].
        let mut acc = [[_mm256_setzero_ps(); 2]; M];
        // SAFETY (loads): each pointer is inside a `&[f32; 16]`, with 32
        // readable bytes from it.
        let ld = |v: &[f32; LANES], h: usize| unsafe { _mm256_loadu_ps(v[8 * h..].as_ptr()) };
        for (i, cl) in cv.iter().enumerate() {
            let (c0, c1) = (ld(cl, 0), ld(cl, 1));
            for (a, (xv, _)) in acc.iter_mut().zip(&rows) {
                a[0] = _mm256_fmadd_ps(c0, ld(&xv[i], 0), a[0]);
                a[1] = _mm256_fmadd_ps(c1, ld(&xv[i], 1), a[1]);
            }
        }
        std::array::from_fn(|r| {
            let mut lanes = [0f32; LANES];
            // SAFETY: `lanes` is 64 writable bytes, two 32-byte halves.
            unsafe {
                _mm256_storeu_ps(lanes.as_mut_ptr(), acc[r][0]);
                _mm256_storeu_ps(lanes[8..].as_mut_ptr(), acc[r][1]);
            }
            finish(lanes, rows[r].1, ct)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every vector width this CPU has, each layout, f32 and f64, against
    /// the product summed by its definition in f64: `x` is `m x k`, `b`
    /// is stored `[k, n]` (rows) or `[n, k]` (columns).
    #[test]
    fn each_width_and_layout_matches_the_definition() {
        #[cfg(target_arch = "x86_64")]
        let widths: Vec<Isa> = {
            let f = crate::host::cpu_features();
            [(Isa::Avx2, f.avx2), (Isa::Avx512, f.avx512f)]
                .into_iter()
                .filter(|&(_, has)| has && f.fma)
                .map(|(i, _)| i)
                .collect()
        };
        #[cfg(not(target_arch = "x86_64"))]
        let widths: Vec<Isa> = Vec::new();
        let value = |i: usize| ((i * 37 + 11) % 23) as f64 / 8.0 - 1.4;
        for isa in widths {
            for form in [Form::Rows, Form::Cols] {
                for (m, k, n) in [(1, 1, 1), (1, 17, 5), (3, 64, 33), (4, 35, 21), (2, 3, 70)] {
                    let xs: Vec<f64> = (0..m * k).map(value).collect();
                    let w: Vec<f64> = (0..k * n).map(|i| value(i + 5)).collect();
                    type At = fn(usize, usize, usize, usize) -> usize;
                    let (strides, at): ([i64; 2], At) = match form {
                        Form::Rows => ([n as i64, 1], |p: usize, j: usize, _k: usize, n: usize| {
                            p * n + j
                        }),
                        Form::Cols => ([1, k as i64], |p: usize, j: usize, k: usize, _n: usize| {
                            j * k + p
                        }),
                    };
                    let want: Vec<f64> = (0..m * n)
                        .map(|i| {
                            (0..k)
                                .map(|p| xs[i / n * k + p] * w[at(p, i % n, k, n)])
                                .sum()
                        })
                        .collect();
                    let x32: Vec<f32> = xs.iter().map(|&v| v as f32).collect();
                    let w32: Vec<f32> = w.iter().map(|&v| v as f32).collect();
                    let mut o32 = vec![f32::NAN; m * n];
                    let p32 = Piece {
                        xs: &x32,
                        w: &w32,
                        base: 0,
                        strides,
                        m,
                        k,
                        rows: 0..k,
                        j0: 0,
                        width: n,
                        isa,
                    };
                    run_piece(isa, form, &p32, &mut o32);
                    if form == Form::Cols {
                        // The intrinsics sum as the lane arrays do, bit for bit.
                        for (i, &got) in o32.iter().enumerate() {
                            let (r, j) = (i / n, i % n);
                            let want = dot1(&x32[r * k..(r + 1) * k], &w32[j * k..(j + 1) * k]);
                            assert_eq!(got.to_bits(), want.to_bits(), "{isa:?} m={m} k={k} n={n}");
                        }
                    }
                    let mut o64 = vec![f64::NAN; m * n];
                    let p64 = Piece {
                        xs: &xs,
                        w: &w,
                        base: 0,
                        strides,
                        m,
                        k,
                        rows: 0..k,
                        j0: 0,
                        width: n,
                        isa,
                    };
                    run_piece(isa, form, &p64, &mut o64);
                    for (i, want) in want.iter().enumerate() {
                        let what = format!("{isa:?} {form:?} m={m} k={k} n={n} [{i}]");
                        assert!(
                            (o32[i] as f64 - want).abs() < 1e-5 * (1.0 + want.abs()),
                            "{what}: {}",
                            o32[i]
                        );
                        assert!(
                            (o64[i] - want).abs() < 1e-12 * (1.0 + want.abs()),
                            "{what}: {}",
                            o64[i]
                        );
                    }
                }
            }
        }
    }

    /// Products through `try_gemv` with `b` row-major, its rows split into
    /// several pieces (k past `ROW_PIECE`, with tails of 1-3 rows) and its
    /// columns into blocks: the same bits on every thread count, and the
    /// product summed by its definition in f64.
    #[test]
    fn row_pieces_sum_alike_on_any_thread_count() {
        if isa().is_none() {
            return;
        }
        let value = |i: usize| ((i * 29 + 7) % 31) as f64 / 16.0 - 0.9;
        for (m, k, n) in [
            (1, 770, 37),
            (4, 193, 300),
            (2, 400, 1),
            (3, 5, 64),
            (1, 3072, 20),
        ] {
            let xs: Vec<f32> = (0..m * k).map(|i| value(i) as f32).collect();
            let w: Vec<f32> = (0..k * n).map(|i| value(i + 3) as f32).collect();
            let want: Vec<f64> = (0..m * n)
                .map(|i| {
                    (0..k)
                        .map(|p| xs[i / n * k + p] as f64 * w[p * n + i % n] as f64)
                        .sum()
                })
                .collect();
            let mut first: Option<Vec<f32>> = None;
            for threads in [1, 2, 3, 8] {
                let mut out = vec![f32::NAN; m * n];
                assert!(try_gemv(
                    (&xs, MatView::contiguous(m, k)),
                    (&w, MatView::contiguous(k, n)),
                    &mut out,
                    [1, m, k, n],
                    threads,
                ));
                for (i, want) in want.iter().enumerate() {
                    assert!(
                        (out[i] as f64 - want).abs() < 1e-4 * (1.0 + want.abs()),
                        "m={m} k={k} n={n} threads={threads} [{i}]: {} vs {want}",
                        out[i]
                    );
                }
                match &first {
                    None => first = Some(out),
                    Some(f) => assert!(
                        f.iter().zip(&out).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "m={m} k={k} n={n}: {threads} threads changed the sums"
                    ),
                }
            }
        }
    }
}
