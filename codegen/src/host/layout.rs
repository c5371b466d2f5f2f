//! How a kernel's arguments are laid out, and the bounds check that makes a
//! call safe. The native signature is `fn(bufs, args, start, end)`:
//! - `bufs[i]`: base pointer of local buffer `i` (`Kernel::local_buffers`:
//!   in order of first use: matmul operands, loads, stores), then one pointer per
//!   scratch value (a row of 8-byte slots);
//! - `args`: the domain dims, then `rank` strides (in elements) per access
//!   (loads, then stores), then one offset (in elements) per access, then
//!   one 8-byte slot per param (f64 bits for a float param, the integer for
//!   an int or bool one).
//!
//! Sizes and strides are runtime values, so one compiled kernel serves every
//! shape with the same structure.

use tilejit_ir::kernel::{BufId, Expr, Kernel, Stage};
use tilejit_ir::{DType, Lit};

/// Bytes one element of `dtype` takes in a kernel's memory. f16 and bf16
/// are computed and stored as f32 (the runtime converts at the program's
/// boundary).
pub fn storage_bytes(dtype: DType) -> usize {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 | DType::I32 | DType::U32 => 4,
        DType::F64 | DType::I64 | DType::U64 => 8,
        DType::I16 | DType::U16 => 2,
        DType::Bool | DType::U8 | DType::I8 => 1,
    }
}

/// The dtype whose storage holds `dtype`'s values in a kernel's memory:
/// f16 and bf16 are held as f32, u64 as the 64-bit integer storage that
/// `u64` already names (`KernelElem` for `u64` is `I64`'s), the rest as
/// themselves (see [`storage_bytes`]). A [`BufArg`](super::BufArg) lent
/// for a buffer of `dtype` must have this
/// [`BufArg::dtype`](super::BufArg::dtype).
pub fn storage_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        DType::U64 => DType::I64,
        d => d,
    }
}

/// The argument layout of one kernel.
#[derive(Clone, Debug)]
pub struct ArgLayout {
    /// Domain rank.
    pub rank: usize,
    /// Program buffers in local order.
    pub buffers: Vec<BufId>,
    /// The dtype the code reads and writes each local buffer as.
    pub dtypes: Vec<DType>,
    /// Element size of each local buffer.
    pub elem_bytes: Vec<usize>,
    /// Whether each local buffer is written.
    pub written: Vec<bool>,
    /// Local buffer of each access (loads, then stores).
    pub access_buf: Vec<usize>,
    /// Number of loads (the first accesses).
    pub loads: usize,
    /// Whether an access is made at inner index 0 of a per-row stage (and so
    /// even when the inner dimension is empty).
    pub access_per_row: Vec<bool>,
    /// Number of scratch rows.
    pub scratch: usize,
    /// Number of params.
    pub params: usize,
    /// Whether launch units are elements (flat) rather than rows.
    pub flat: bool,
    /// Matmul operand and result local buffers, if any (the runtime fills
    /// the result before the stages run).
    pub matmul: Option<[usize; 3]>,
    /// Per access, how many elements past its strided reach a gather on it
    /// may read ([`Kernel::gather_reach`]; the code checks each index).
    pub gather_reach: Vec<u64>,
    /// Per access, the inner stride its code assumes
    /// (`Access::fixed_inner_stride`). A call whose arguments say
    /// otherwise is refused: the bounds check would measure another reach
    /// than the code makes.
    pub inner: Vec<Option<i64>>,
}

impl ArgLayout {
    /// The layout of `k`.
    pub fn of(k: &Kernel, dtype_of: &dyn Fn(BufId) -> DType) -> ArgLayout {
        let buffers = k.local_buffers();
        let local = |b: BufId| buffers.iter().position(|&x| x == b).unwrap_or(0);
        let matmul = k
            .matmul
            .as_ref()
            .map(|m| [local(m.a), local(m.b), local(m.out)]);
        let access_buf: Vec<usize> = k.accesses().map(|a| local(a.buf)).collect();
        let mut written = vec![false; buffers.len()];
        let nloads = k.loads.len();
        for &b in &access_buf[nloads..] {
            written[b] = true;
        }
        if let Some([_, _, out]) = matmul {
            written[out] = true;
        }
        // Loads reachable from per-row store values.
        let flat = k.is_flat();
        let mut access_per_row = vec![false; access_buf.len()];
        let mut store_i = nloads;
        for s in &k.stages {
            if let Stage::Store { access, value } = s {
                if !flat && access.inner_stride() == 0 {
                    access_per_row[store_i] = true;
                    for e in reachable(k, *value) {
                        if let Expr::Load(l) | Expr::Gather { load: l, .. } = k.expr(e).expr {
                            access_per_row[l as usize] = true;
                        }
                    }
                }
                store_i += 1;
            }
        }
        let dtypes: Vec<DType> = buffers.iter().map(|&b| dtype_of(b)).collect();
        ArgLayout {
            rank: k.domain.len(),
            elem_bytes: dtypes.iter().map(|&d| storage_bytes(d)).collect(),
            dtypes,
            buffers,
            written,
            access_buf,
            loads: nloads,
            access_per_row,
            scratch: k.scratch.len(),
            params: k
                .exprs
                .iter()
                .filter_map(|e| match e.expr {
                    Expr::Param(i) => Some(i as usize + 1),
                    _ => None,
                })
                .max()
                .unwrap_or(0),
            flat,
            matmul,
            inner: k.accesses().map(|a| a.fixed_inner_stride()).collect(),
            gather_reach: (0..k.accesses().count())
                .map(|a| {
                    if a < nloads {
                        k.gather_reach(a).max(0) as u64
                    } else {
                        0
                    }
                })
                .collect(),
        }
    }

    /// Index of the first stride of access `a` in `args`.
    pub fn stride_slot(&self, a: usize) -> usize {
        self.rank + a * self.rank
    }

    /// Index of access `a`'s offset in `args`.
    pub fn offset_slot(&self, a: usize) -> usize {
        self.rank + self.access_buf.len() * self.rank + a
    }

    /// Index of param `p` in `args`.
    pub fn param_slot(&self, p: usize) -> usize {
        self.rank + self.access_buf.len() * (self.rank + 1) + p
    }

    /// The `args` array for a kernel instance: its domain, its accesses'
    /// strides and the param values.
    pub fn args(&self, k: &Kernel, params: &[Lit]) -> Vec<i64> {
        let mut v: Vec<i64> = k.domain.iter().map(|&d| d as i64).collect();
        for a in k.accesses() {
            v.extend_from_slice(&a.strides);
        }
        v.extend(k.accesses().map(|a| a.offset));
        for i in 0..self.params {
            v.push(match params.get(i) {
                Some(Lit::Float(f)) => f.to_bits() as i64,
                Some(other) => other.as_i64(),
                None => 0,
            });
        }
        v
    }

    /// Checks that a call over units `start..end` stays inside every buffer
    /// and that every buffer is what the code takes it for: its element
    /// type ([`storage_dtype`]), aligned to its elements, writable where
    /// the kernel writes it. `bufs` ends with the scratch rows.
    pub fn check(
        &self,
        bufs: &[super::BufArg<'_>],
        args: &[i64],
        start: usize,
        end: usize,
    ) -> Result<(), String> {
        let n = self.buffers.len();
        self.check_counts(bufs.len(), n + self.scratch, args.len())?;
        match self.check_main(&bufs[..n], args, start, end)? {
            Some(cols) => self.check_scratch(&bufs[n..], cols),
            None => Ok(()),
        }
    }

    /// [`Self::check`] of the kernel's own buffers (`bufs` without scratch;
    /// the caller compared the counts): the row length when the range is
    /// not empty.
    pub(crate) fn check_main(
        &self,
        bufs: &[super::BufArg<'_>],
        args: &[i64],
        start: usize,
        end: usize,
    ) -> Result<Option<usize>, String> {
        if start >= end {
            return Ok(None);
        }
        let dom = self.domain(args)?;
        if end > dom.units {
            return Err(format!("range {start}..{end} exceeds {} units", dom.units));
        }
        for (lb, b) in bufs.iter().enumerate() {
            if self.written[lb] && !b.writable() {
                return Err(format!("buffer {lb} is written but not writable"));
            }
            self.check_type(lb, b)?;
        }
        for a in 0..self.access_buf.len() {
            if let Some(max) = self.max_offset(a, args, &dom, end)? {
                let lb = self.access_buf[a];
                let elems = (bufs[lb].bytes() / self.elem_bytes[lb]) as u128;
                if max >= elems {
                    return Err(format!(
                        "access {a} reaches element {max} of a buffer of {elems}"
                    ));
                }
            }
        }
        Ok(Some(dom.cols))
    }

    /// Checks that buffer `lb` holds the element type its code reads and
    /// writes, at an address aligned to it ([`super::BufArg::empty`] fits
    /// any: it has no elements to misread).
    #[inline]
    fn check_type(&self, lb: usize, b: &super::BufArg<'_>) -> Result<(), String> {
        let Some(have) = b.dtype() else {
            return Ok(());
        };
        let want = storage_dtype(self.dtypes[lb]);
        if have != want {
            return Err(format!(
                "buffer {lb} holds {have} where the kernel's code uses {want}"
            ));
        }
        // Element sizes are powers of two.
        let size = self.elem_bytes[lb];
        if b.addr() & (size - 1) != 0 {
            return Err(format!(
                "buffer {lb} is not aligned to its {size}-byte elements"
            ));
        }
        Ok(())
    }

    /// Checks the scratch rows of a call whose rows are `cols` long: each
    /// writable, of 8-byte elements every bit pattern of which is a value
    /// (`u64`, `i64`, `f64`), aligned, and a row long.
    fn check_scratch(&self, bufs: &[super::BufArg<'_>], cols: usize) -> Result<(), String> {
        for (s, b) in bufs.iter().enumerate() {
            let typed = matches!(b.dtype(), Some(DType::I64 | DType::F64)) && b.addr() % 8 == 0;
            if !b.writable() || b.bytes() < cols.saturating_mul(8) || !(typed || b.bytes() == 0) {
                return Err(format!(
                    "scratch {s} must be a writable row of {cols} u64, i64 or f64 slots"
                ));
            }
        }
        Ok(())
    }

    /// Checks `args` once for every launch range, giving the bytes each
    /// buffer needs; calls with them then only compare buffer sizes. Only
    /// [`KernelCode::check_args`](super::KernelCode::check_args) calls it,
    /// tagging the result with its code, so the result is never used with
    /// another kernel's code.
    pub(crate) fn check_args(&self, args: Vec<i64>, code: u64) -> Result<CheckedArgs, String> {
        self.check_counts(
            self.buffers.len() + self.scratch,
            self.buffers.len() + self.scratch,
            args.len(),
        )?;
        let dom = self.domain(&args)?;
        let mut need = vec![0u128; self.buffers.len()];
        if dom.units > 0 {
            for a in 0..self.access_buf.len() {
                if let Some(max) = self.max_offset(a, &args, &dom, dom.units)? {
                    let lb = self.access_buf[a];
                    let bytes = (max + 1) * self.elem_bytes[lb] as u128;
                    need[lb] = need[lb].max(bytes);
                }
            }
        }
        let need = need
            .into_iter()
            .zip(&self.written)
            .map(|(bytes, &written)| Need {
                // No buffer holds `usize::MAX` bytes: a bigger need fails.
                bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
                written,
            })
            .collect();
        Ok(CheckedArgs {
            args,
            code,
            units: dom.units,
            cols: dom.cols,
            need,
        })
    }

    /// Checks buffers against arguments [`Self::check_args`] accepted for
    /// this layout's code (the caller compared the tag), for a call over
    /// `start..end`: one pass over the buffers. `bufs` ends with the
    /// scratch rows.
    #[inline]
    pub(crate) fn check_checked(
        &self,
        bufs: &[super::BufArg<'_>],
        checked: &CheckedArgs,
        start: usize,
        end: usize,
    ) -> Result<(), String> {
        let n = checked.need.len();
        if bufs.len() != n + self.scratch {
            return Err(format!(
                "{} buffers given, {} expected",
                bufs.len(),
                n + self.scratch
            ));
        }
        match self.check_checked_main(&bufs[..n], checked, start, end)? {
            Some(cols) if self.scratch > 0 => self.check_scratch(&bufs[n..], cols),
            _ => Ok(()),
        }
    }

    /// [`Self::check_checked`] of the kernel's own buffers (`bufs` without
    /// scratch, as many as `checked` needs: the caller counted them): the
    /// row length when the range is not empty.
    #[inline]
    pub(crate) fn check_checked_main(
        &self,
        bufs: &[super::BufArg<'_>],
        checked: &CheckedArgs,
        start: usize,
        end: usize,
    ) -> Result<Option<usize>, String> {
        if start >= end {
            return Ok(None);
        }
        if end > checked.units {
            return Err(format!(
                "range {start}..{end} exceeds {} units",
                checked.units
            ));
        }
        for (lb, (b, n)) in bufs.iter().zip(&checked.need).enumerate() {
            self.check_type(lb, b)?;
            if b.bytes() < n.bytes || (n.written && !b.writable()) {
                return Err(if b.bytes() < n.bytes {
                    format!(
                        "buffer {lb} has {} bytes where the kernel reaches {}",
                        b.bytes(),
                        n.bytes
                    )
                } else {
                    format!("buffer {lb} is written but not writable")
                });
            }
        }
        Ok(Some(checked.cols))
    }

    /// Compares the numbers of buffers and args with what the layout takes
    /// (`nbuf`: its buffers, with or without the scratch rows).
    pub(crate) fn check_counts(&self, bufs: usize, nbuf: usize, args: usize) -> Result<(), String> {
        if bufs != nbuf {
            return Err(format!("{bufs} buffers given, {nbuf} expected"));
        }
        let nargs = self.param_slot(self.params);
        if args != nargs {
            return Err(format!("{args} args given, {nargs} expected"));
        }
        Ok(())
    }

    /// The inner dimension (row length) `args` describes.
    pub fn cols(&self, args: &[i64]) -> Result<usize, String> {
        let n = self.buffers.len() + self.scratch;
        self.check_counts(n, n, args.len())?;
        Ok(self.domain(args)?.cols)
    }

    /// Whether calls over disjoint ranges of units can run at once: no
    /// element one unit writes is read or written by another unit. Holds
    /// when each written buffer has one store, any load of it uses the
    /// store's strides (and gathers nothing, and has an inner stride below
    /// 2: a vector load of stride 2 reads the lanes between its elements
    /// too), and the store maps (unit, column) to distinct
    /// elements (sorted by stride, each dimension's stride passes the
    /// extent of the smaller ones, the numpy no-overlap test).
    pub fn writes_disjoint_units(&self, args: &[i64]) -> bool {
        if args.len() != self.param_slot(self.params) {
            return false;
        }
        let Ok(dom) = self.domain(args) else {
            return false;
        };
        let nloads = self.loads;
        let strides = |a: usize| &args[self.stride_slot(a)..self.stride_slot(a) + self.rank];
        for st in nloads..self.access_buf.len() {
            let buf = self.access_buf[st];
            let others =
                (0..self.access_buf.len()).filter(|&a| a != st && self.access_buf[a] == buf);
            for a in others {
                let offset = |a: usize| args[self.offset_slot(a)];
                // A gather on it reads past its unit's own elements, and
                // so does a vector load of inner stride 2 or more (two
                // overlapping runs whose odd lanes may be another unit's).
                if a >= nloads
                    || strides(a) != strides(st)
                    || offset(a) != offset(st)
                    || self.gather_reach[a] > 0
                    || strides(a).last().is_some_and(|&s| s >= 2)
                {
                    return false;
                }
            }
            // (extent, stride) of every dimension that separates elements
            // (rank <= 8, so on the stack).
            let mut dims = [(0u128, 0u128); 8];
            let mut used = 0;
            let mut push = |n: usize, s: i64| {
                if n > 1 {
                    dims[used] = (n as u128, s as u128);
                    used += 1;
                }
            };
            let s = strides(st);
            if self.flat {
                push(dom.units, s[0]);
            } else {
                for (&n, &st) in dom.dims.iter().zip(s).take(self.rank - 1) {
                    push(n, st);
                }
                // Columns of one row are written by the row's own call.
                if s[self.rank - 1] != 0 {
                    push(dom.cols, s[self.rank - 1]);
                }
            }
            let dims = &mut dims[..used];
            dims.sort_unstable_by_key(|&(_, s)| s);
            let mut reach: u128 = 0;
            for &(n, s) in dims.iter() {
                if s <= reach {
                    return false;
                }
                reach += (n - 1) * s;
            }
        }
        true
    }

    /// The domain `args` describes.
    fn domain(&self, args: &[i64]) -> Result<Domain, String> {
        // Rank is at most 8 (the IR's limit): the dims live on the stack.
        let mut dims = [0usize; 8];
        let used = dims
            .get_mut(..self.rank)
            .filter(|d| !d.is_empty())
            .ok_or_else(|| format!("rank {} is not in 1..=8", self.rank))?;
        for (d, &a) in used.iter_mut().zip(&args[..self.rank]) {
            *d = usize::try_from(a).map_err(|_| format!("negative dim {a}"))?;
        }
        let used = &*used;
        let numel = used
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or("domain size overflows")?;
        let cols = used[self.rank - 1];
        let rows = used[..self.rank - 1]
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or("domain size overflows")?;
        let units = if self.flat { numel } else { rows };
        Ok(Domain { dims, cols, units })
    }

    /// The largest element offset access `a` reaches in a launch over units
    /// `..end` (`end >= 1`), or `None` when it is never made.
    fn max_offset(
        &self,
        a: usize,
        args: &[i64],
        dom: &Domain,
        end: usize,
    ) -> Result<Option<u128>, String> {
        let strides = &args[self.stride_slot(a)..self.stride_slot(a) + self.rank];
        if strides.iter().any(|&s| s < 0) {
            return Err(format!("access {a} has a negative stride"));
        }
        let inner = strides[self.rank - 1];
        if let Some(fixed) = self.inner.get(a).copied().flatten().filter(|&f| f != inner) {
            return Err(format!(
                "access {a} has inner stride {inner}; its code was compiled for {fixed}"
            ));
        }
        let offset = args[self.offset_slot(a)];
        let offset =
            u128::try_from(offset).map_err(|_| format!("access {a} has a negative offset"))?;
        if self.flat {
            let reach = offset + u128::from(self.gather_reach[a]);
            return Ok(Some(reach + (end as u128 - 1) * strides[0] as u128));
        }
        let mut m: u128 = offset + u128::from(self.gather_reach[a]);
        for (&dim, &stride) in dom.dims.iter().zip(strides).take(self.rank - 1) {
            m += dim.saturating_sub(1) as u128 * stride as u128;
        }
        let inner = strides[self.rank - 1] as u128;
        if dom.cols == 0 {
            if !self.access_per_row[a] {
                return Ok(None); // only touched inside an empty inner loop
            }
        } else {
            m += (dom.cols as u128 - 1) * inner;
        }
        Ok(Some(m))
    }
}

/// A kernel domain read from `args`.
struct Domain {
    dims: [usize; 8],
    cols: usize,
    units: usize,
}

/// An `args` array [`KernelCode::check_args`](super::KernelCode::check_args)
/// accepted, with the bytes each buffer must hold for any launch range.
/// Only that check makes one, for one kernel's code, so a call with it
/// cannot skip the bounds check.
#[derive(Clone, Debug)]
pub struct CheckedArgs {
    args: Vec<i64>,
    /// The code it was checked for ([`super::KernelCode`]'s id).
    pub(crate) code: u64,
    units: usize,
    cols: usize,
    need: Vec<Need>,
}

/// What one local buffer must be for every launch range.
#[derive(Clone, Copy, Debug)]
struct Need {
    /// Bytes the kernel may reach.
    bytes: usize,
    /// Whether the kernel writes it.
    written: bool,
}

impl CheckedArgs {
    /// The arguments.
    pub fn args(&self) -> &[i64] {
        &self.args
    }

    /// How many buffers (without scratch rows) a call with them takes.
    pub(crate) fn buffer_count(&self) -> usize {
        self.need.len()
    }
}

/// Expressions `root` depends on, itself included.
pub fn reachable(k: &Kernel, root: tilejit_ir::kernel::ExprId) -> Vec<tilejit_ir::kernel::ExprId> {
    reachable_until(k, root, |_| false)
}

/// Expressions `root` depends on, itself included, in id order, without
/// looking through the ones `known` accepts (their operands are not needed
/// unless another path reaches them).
pub fn reachable_until(
    k: &Kernel,
    root: tilejit_ir::kernel::ExprId,
    known: impl Fn(tilejit_ir::kernel::ExprId) -> bool,
) -> Vec<tilejit_ir::kernel::ExprId> {
    let mut seen = vec![false; k.exprs.len()];
    let mut work = vec![root];
    let mut out = Vec::new();
    while let Some(e) = work.pop() {
        if std::mem::replace(&mut seen[e.0 as usize], true) {
            continue;
        }
        out.push(e);
        if !known(e) {
            work.extend(k.expr(e).expr.operands());
        }
    }
    out.sort();
    out
}
