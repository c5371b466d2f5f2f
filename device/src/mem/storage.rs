//! `PagedMemory`: the bytes behind a memory region. Pages, and the tables
//! that hold them, are created on first write (untouched memory reads as
//! zero and costs nothing, so the simulator can model terabytes of GM).
//! Each page is its own reader-writer lock over plain bytes, so many
//! simulated cores on many host threads read one page at once, and every
//! copy into or out of a page is one `memcpy` under its lock: safe Rust at
//! memory speed, and the part of a copy inside one page never tears
//! against another copy.
//!
//! A page or table the host cannot allocate is a [`PageAllocError`]
//! naming the bytes (a `DeviceError::HostMemory`, or a fault of the core
//! that wrote), not an abort: GM may be far bigger than the host's memory.
//!
//! Not word-atomic pages (one `AtomicU64` load or store per 8 bytes): a Sim
//! launch spent most of its time in those word loops, which cannot
//! vectorise.

use rayon::prelude::*;
use std::sync::{OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

const PAGE_BYTES: usize = 256 * 1024;
/// Pages per directory entry (1 GiB of memory): the directory is all that
/// exists up front, so even a 16 TiB memory costs ~400 KiB until written.
const DIR_PAGES: usize = 4096;

type Page = RwLock<Box<[u8]>>;
type PageRead<'a> = RwLockReadGuard<'a, Box<[u8]>>;
type PageWrite<'a> = RwLockWriteGuard<'a, Box<[u8]>>;

/// Host memory for a page or page table could not be allocated.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PageAllocError {
    /// The bytes asked of the host.
    pub bytes: usize,
}

impl std::fmt::Display for PageAllocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "out of host memory allocating {} bytes for simulated memory pages",
            self.bytes
        )
    }
}

impl std::error::Error for PageAllocError {}

/// `n` values from `make`, or the error naming their bytes.
fn try_boxed<T>(n: usize, make: impl FnMut() -> T) -> Result<Box<[T]>, PageAllocError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| PageAllocError {
        bytes: n.saturating_mul(std::mem::size_of::<T>()),
    })?;
    v.extend(std::iter::repeat_with(make).take(n));
    Ok(v.into_boxed_slice())
}

/// Lazily paged memory of a fixed size: a directory of lazily made tables
/// of lazily made pages.
pub struct PagedMemory {
    size: u64,
    dir: Vec<OnceLock<Box<[OnceLock<Page>]>>>,
}

impl std::fmt::Debug for PagedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagedMemory")
            .field("size", &self.size)
            .field("pages_touched", &self.pages_touched())
            .finish()
    }
}

impl PagedMemory {
    /// `size` bytes, all zero.
    pub fn new(size: u64) -> PagedMemory {
        let pages = size.div_ceil(PAGE_BYTES as u64) as usize;
        PagedMemory {
            size,
            dir: (0..pages.div_ceil(DIR_PAGES))
                .map(|_| OnceLock::new())
                .collect(),
        }
    }

    /// The size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Pages that have been written (each `PAGE_BYTES` of host memory).
    pub fn pages_touched(&self) -> usize {
        let table = |t: &OnceLock<Box<[OnceLock<Page>]>>| {
            t.get()
                .map_or(0, |t| t.iter().filter(|p| p.get().is_some()).count())
        };
        self.dir.iter().map(table).sum()
    }

    /// Page `index`'s slot, or `None` when no page of its table was ever
    /// written.
    fn slot(&self, index: usize) -> Option<&OnceLock<Page>> {
        let table = self.dir[index / DIR_PAGES].get()?;
        Some(&table[index % DIR_PAGES])
    }

    /// Whether page `index` was ever written.
    fn written(&self, index: usize) -> bool {
        self.slot(index).is_some_and(|p| p.get().is_some())
    }

    /// A page for writing, created (zeroed) on first use. The copies under
    /// the lock cannot panic, so a poisoned lock still guards whole bytes
    /// and is used as it is.
    fn page_mut(&self, index: usize) -> Result<PageWrite<'_>, PageAllocError> {
        // Made before `get_or_init`, which cannot fail; a thread that loses
        // the race drops its copy.
        let slot = &self.dir[index / DIR_PAGES];
        let table = match slot.get() {
            Some(t) => t,
            None => {
                let t = try_boxed(DIR_PAGES, OnceLock::new)?;
                slot.get_or_init(|| t)
            }
        };
        let slot = &table[index % DIR_PAGES];
        let page = match slot.get() {
            Some(p) => p,
            None => {
                let p = RwLock::new(try_boxed(PAGE_BYTES, || 0u8)?);
                slot.get_or_init(|| p)
            }
        };
        Ok(page.write().unwrap_or_else(PoisonError::into_inner))
    }

    /// A page that was written, for writing; `None` for one never written.
    fn written_page_mut(&self, index: usize) -> Option<PageWrite<'_>> {
        let lock = self.slot(index)?.get()?;
        Some(lock.write().unwrap_or_else(PoisonError::into_inner))
    }

    /// A written page for reading, or `None` for one never written.
    fn page(&self, index: usize) -> Option<PageRead<'_>> {
        let lock = self.slot(index)?.get()?;
        Some(lock.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Copies `out.len()` bytes starting at `addr` into `out`. The caller
    /// (the region) has checked the range lies inside the memory.
    pub fn read(&self, addr: u64, out: &mut [u8]) {
        debug_assert!(addr + out.len() as u64 <= self.size);
        for (page, in_page, at, n) in page_spans(addr, out.len()) {
            let dst = &mut out[at..at + n];
            match self.page(page) {
                None => dst.fill(0),
                Some(bytes) => dst.copy_from_slice(&bytes[in_page..in_page + n]),
            }
        }
    }

    /// Copies `data` into memory starting at `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), PageAllocError> {
        debug_assert!(addr + data.len() as u64 <= self.size);
        for (page, in_page, at, n) in page_spans(addr, data.len()) {
            let src = &data[at..at + n];
            // Writing zeros to an untouched page changes nothing.
            if self.written(page) || src.iter().any(|&b| b != 0) {
                self.page_mut(page)?[in_page..in_page + n].copy_from_slice(src);
            }
        }
        Ok(())
    }

    /// Reads `sz`-byte elements from the addresses `addrs` gives into
    /// consecutive `sz`-byte slots of `out` (a strided DMA read), taking
    /// each page's lock once for a run of elements inside it rather than
    /// once per element. The caller has checked every address; `sz == 0`
    /// copies nothing.
    pub fn gather(&self, addrs: impl Iterator<Item = u64>, sz: usize, out: &mut [u8]) {
        let slots = out.chunks_exact_mut(sz.max(1));
        let read = walk(
            addrs.zip(slots),
            sz,
            |p| Ok::<_, std::convert::Infallible>(self.page(p)),
            |held, a, at, dst| {
                match held {
                    None => self.read(a, dst),
                    Some(Some(bytes)) => dst.copy_from_slice(&bytes[at..at + sz]),
                    Some(None) => dst.fill(0),
                }
                Ok(())
            },
        );
        match read {
            Ok(()) => {}
            Err(never) => match never {},
        }
    }

    /// Writes consecutive `sz`-byte elements of `data` to the addresses
    /// `addrs` gives (a strided DMA write), the inverse of
    /// [`gather`](Self::gather).
    pub fn scatter(
        &self,
        addrs: impl Iterator<Item = u64>,
        sz: usize,
        data: &[u8],
    ) -> Result<(), PageAllocError> {
        let elems = data.chunks_exact(sz.max(1));
        walk(
            addrs.zip(elems),
            sz,
            |p| self.page_mut(p),
            |held, a, at, src| match held {
                None => self.write(a, src),
                Some(bytes) => {
                    bytes[at..at + sz].copy_from_slice(src);
                    Ok(())
                }
            },
        )
    }

    /// Writes `data` as its little-endian bytes starting at `addr`: the
    /// typed form of [`write`](Self::write) that encodes elements straight
    /// into the pages (no staging bytes), for bulk host->device copies.
    pub fn write_elems<T: GmElem>(&self, addr: u64, data: &[T]) -> Result<(), PageAllocError> {
        debug_assert!(addr + (data.len() * T::BYTES) as u64 <= self.size);
        if !addr.is_multiple_of(T::BYTES as u64) {
            // An element may straddle two pages.
            let mut bytes = try_boxed(data.len() * T::BYTES, || 0u8)?;
            T::encode(data, &mut bytes);
            return self.write(addr, &bytes);
        }
        // Pages hold whole elements, so every span does.
        for (page, in_page, at, n) in page_spans(addr, data.len() * T::BYTES) {
            let src = &data[at / T::BYTES..(at + n) / T::BYTES];
            if self.written(page) || src.iter().any(|x| x.bits() != 0) {
                T::encode(src, &mut self.page_mut(page)?[in_page..in_page + n]);
            }
        }
        Ok(())
    }

    /// Reads `out.len()` elements from their little-endian bytes at `addr`:
    /// the typed form of [`read`](Self::read).
    pub fn read_elems<T: GmElem>(&self, addr: u64, out: &mut [T]) {
        debug_assert!(addr + (out.len() * T::BYTES) as u64 <= self.size);
        if !addr.is_multiple_of(T::BYTES as u64) {
            // In page-sized pieces, so no staging buffer grows with `out`.
            let per = (PAGE_BYTES / T::BYTES).max(1);
            let mut bytes = vec![0u8; per * T::BYTES];
            for (i, part) in out.chunks_mut(per).enumerate() {
                let b = &mut bytes[..part.len() * T::BYTES];
                self.read(addr + (i * per * T::BYTES) as u64, b);
                T::decode(b, part);
            }
            return;
        }
        for (page, in_page, at, n) in page_spans(addr, out.len() * T::BYTES) {
            let dst = &mut out[at / T::BYTES..(at + n) / T::BYTES];
            match self.page(page) {
                None => dst.fill(T::from_bits(0)),
                Some(bytes) => T::decode(&bytes[in_page..in_page + n], dst),
            }
        }
    }

    /// Sets `len` bytes at `addr` to zero. Untouched pages already are.
    /// Big ranges are zeroed page by page over the rayon pool.
    pub fn zero(&self, addr: u64, len: u64) {
        let zero_span = |(page, in_page, _, n): (usize, usize, usize, usize)| {
            if let Some(mut bytes) = self.written_page_mut(page) {
                bytes[in_page..in_page + n].fill(0);
            }
        };
        let spans = page_spans(addr, len as usize);
        if len >= 16 * PAGE_BYTES as u64 {
            spans.par_bridge().for_each(zero_span);
        } else {
            spans.for_each(zero_span);
        }
    }
}

/// Visits `sz`-byte elements (each an address and its payload) in order,
/// holding one page's guard, from `lock`, across consecutive elements
/// inside that page: `visit(Some(guard), addr, offset in page, payload)`.
/// An element that straddles a page boundary gets `None`, with no guard
/// held. At most one guard is held at a time, so no two threads can wait on
/// each other.
fn walk<G, P, E>(
    elems: impl Iterator<Item = (u64, P)>,
    sz: usize,
    mut lock: impl FnMut(usize) -> Result<G, E>,
    mut visit: impl FnMut(Option<&mut G>, u64, usize, P) -> Result<(), E>,
) -> Result<(), E> {
    if sz == 0 {
        return Ok(());
    }
    let mut held: Option<(usize, G)> = None;
    for (a, payload) in elems {
        let (page, at) = (
            (a / PAGE_BYTES as u64) as usize,
            (a % PAGE_BYTES as u64) as usize,
        );
        if at + sz > PAGE_BYTES {
            held = None;
            visit(None, a, at, payload)?;
            continue;
        }
        if held.as_ref().is_none_or(|(p, _)| *p != page) {
            // Let go of the old page before taking the new one.
            drop(held.take());
            held = Some((page, lock(page)?));
        }
        visit(held.as_mut().map(|(_, g)| g), a, at, payload)?;
    }
    Ok(())
}

/// The `len` bytes at `addr` split at page boundaries, as `(page, offset in
/// the page, offset in the range, bytes)`.
fn page_spans(addr: u64, len: usize) -> impl Iterator<Item = (usize, usize, usize, usize)> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        if at >= len {
            return None;
        }
        let a = addr + at as u64;
        let in_page = (a % PAGE_BYTES as u64) as usize;
        let n = (PAGE_BYTES - in_page).min(len - at);
        let span = ((a / PAGE_BYTES as u64) as usize, in_page, at, n);
        at += n;
        Some(span)
    })
}

/// An element that memory holds as its `BYTES` little-endian bytes (1, 2,
/// 4 or 8, so a whole number of them fills a word).
pub trait GmElem: Copy + Send + Sync {
    /// The element's size in bytes.
    const BYTES: usize;
    /// The bytes as the low bits of a word.
    fn bits(self) -> u64;
    /// The element whose bytes are the low `BYTES` of `bits`.
    fn from_bits(bits: u64) -> Self;
    /// Writes `src` as little-endian bytes into `out`, which holds
    /// exactly `src.len() * BYTES` bytes: the bulk form, one fixed-size
    /// store per element, which the compiler turns into vector moves.
    fn encode(src: &[Self], out: &mut [u8]);
    /// Reads `out.len()` elements from the little-endian bytes in `bytes`,
    /// the inverse of [`encode`](Self::encode).
    fn decode(bytes: &[u8], out: &mut [Self]);
}

macro_rules! gm_elem {
    ($($t:ty: $n:literal, |$x:ident| $to:expr, |$b:ident| $from:expr;)*) => {$(
        impl GmElem for $t {
            const BYTES: usize = $n;
            fn bits(self) -> u64 {
                let $x = self;
                $to
            }
            fn from_bits($b: u64) -> Self {
                $from
            }
            fn encode(src: &[Self], out: &mut [u8]) {
                debug_assert_eq!(out.len(), src.len() * $n);
                let (chunks, _) = out.as_chunks_mut::<$n>();
                for (c, &x) in chunks.iter_mut().zip(src) {
                    c.copy_from_slice(&GmElem::bits(x).to_le_bytes()[..$n]);
                }
            }
            fn decode(bytes: &[u8], out: &mut [Self]) {
                debug_assert_eq!(bytes.len(), out.len() * $n);
                let (chunks, _) = bytes.as_chunks::<$n>();
                for (x, c) in out.iter_mut().zip(chunks) {
                    let mut w = [0u8; 8];
                    w[..$n].copy_from_slice(c);
                    *x = <Self as GmElem>::from_bits(u64::from_le_bytes(w));
                }
            }
        }
    )*};
}

gm_elem! {
    u8: 1, |x| x as u64, |b| b as u8;
    i8: 1, |x| x as u8 as u64, |b| b as u8 as i8;
    bool: 1, |x| x as u64, |b| b as u8 != 0;
    half::f16: 2, |x| x.to_bits() as u64, |b| half::f16::from_bits(b as u16);
    half::bf16: 2, |x| x.to_bits() as u64, |b| half::bf16::from_bits(b as u16);
    i32: 4, |x| x as u32 as u64, |b| b as u32 as i32;
    i16: 2, |x| x as u16 as u64, |b| b as u16 as i16;
    u16: 2, |x| x as u64, |b| b as u16;
    u32: 4, |x| x as u64, |b| b as u32;
    f32: 4, |x| x.to_bits() as u64, |b| f32::from_bits(b as u32);
    i64: 8, |x| x as u64, |b| b as i64;
    u64: 8, |x| x, |b| b;
    f64: 8, |x| x.to_bits(), |b| f64::from_bits(b);
}
