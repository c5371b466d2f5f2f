//! `PagedMemory`: the bytes behind a memory region. Pages are created on
//! first write (untouched memory reads as zero and costs nothing, so the
//! simulator can model gigabytes of GM), and every word is an atomic, so
//! many simulated cores on many host threads can read and write disjoint
//! (or even overlapping) ranges at once without locks and without `unsafe`.

use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const PAGE_WORDS: usize = 32 * 1024;
const PAGE_BYTES: u64 = (PAGE_WORDS * 8) as u64;

/// Lazily paged, word-atomic memory of a fixed size.
pub struct PagedMemory {
    size: u64,
    pages: Vec<OnceLock<Box<[AtomicU64]>>>,
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
        let n = size.div_ceil(PAGE_BYTES) as usize;
        PagedMemory {
            size,
            pages: (0..n).map(|_| OnceLock::new()).collect(),
        }
    }

    /// The size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Pages that have been written (each `PAGE_BYTES` of host memory).
    pub fn pages_touched(&self) -> usize {
        self.pages.iter().filter(|p| p.get().is_some()).count()
    }

    fn page(&self, index: usize) -> &[AtomicU64] {
        self.pages[index].get_or_init(|| (0..PAGE_WORDS).map(|_| AtomicU64::new(0)).collect())
    }

    /// Copies `out.len()` bytes starting at `addr` into `out`. The caller
    /// (the region) has checked the range lies inside the memory.
    pub fn read(&self, addr: u64, out: &mut [u8]) {
        debug_assert!(addr + out.len() as u64 <= self.size);
        for (page, in_page, at, n) in page_spans(addr, out.len()) {
            let dst = &mut out[at..at + n];
            match self.pages[page].get() {
                None => dst.fill(0),
                Some(words) => read_words(words, in_page, dst),
            }
        }
    }

    /// Copies `data` into memory starting at `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) {
        debug_assert!(addr + data.len() as u64 <= self.size);
        for (page, in_page, at, n) in page_spans(addr, data.len()) {
            let src = &data[at..at + n];
            // Writing zeros to an untouched page changes nothing.
            if self.pages[page].get().is_some() || src.iter().any(|&b| b != 0) {
                write_words(self.page(page), in_page, src);
            }
        }
    }

    /// Writes `data` as its little-endian bytes starting at `addr`: the
    /// typed form of [`write`](Self::write) that packs elements straight
    /// into memory words (no staging bytes), for bulk host->device copies.
    pub fn write_elems<T: GmElem>(&self, addr: u64, data: &[T]) {
        debug_assert!(addr + (data.len() * T::BYTES) as u64 <= self.size);
        if !addr.is_multiple_of(8) {
            let bytes: Vec<u8> = data.iter().flat_map(|x| x.le_bytes()).collect();
            return self.write(addr, &bytes);
        }
        // From a word boundary, every span holds whole elements.
        for (page, in_page, at, n) in page_spans(addr, data.len() * T::BYTES) {
            let src = &data[at / T::BYTES..(at + n) / T::BYTES];
            if self.pages[page].get().is_some() || src.iter().any(|x| x.bits() != 0) {
                pack_words(&self.page(page)[in_page / 8..], src);
            }
        }
    }

    /// Reads `out.len()` elements from their little-endian bytes at `addr`:
    /// the typed form of [`read`](Self::read).
    pub fn read_elems<T: GmElem>(&self, addr: u64, out: &mut [T]) {
        debug_assert!(addr + (out.len() * T::BYTES) as u64 <= self.size);
        if !addr.is_multiple_of(8) {
            let mut bytes = vec![0u8; out.len() * T::BYTES];
            self.read(addr, &mut bytes);
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(T::BYTES)) {
                let mut w = [0u8; 8];
                w[..T::BYTES].copy_from_slice(b);
                *o = T::from_bits(u64::from_le_bytes(w));
            }
            return;
        }
        for (page, in_page, at, n) in page_spans(addr, out.len() * T::BYTES) {
            let dst = &mut out[at / T::BYTES..(at + n) / T::BYTES];
            match self.pages[page].get() {
                None => dst.fill(T::from_bits(0)),
                Some(words) => unpack_words(&words[in_page / 8..], dst),
            }
        }
    }

    /// Sets `len` bytes at `addr` to zero. Untouched pages already are.
    /// Big ranges are zeroed page by page over the rayon pool.
    pub fn zero(&self, addr: u64, len: u64) {
        let zero_span = |(page, in_page, _, n): (usize, usize, usize, usize)| {
            if let Some(words) = self.pages[page].get() {
                if in_page % 8 == 0 && n % 8 == 0 {
                    for w in &words[in_page / 8..(in_page + n) / 8] {
                        w.store(0, Ordering::Relaxed);
                    }
                } else {
                    write_words(words, in_page, &vec![0u8; n]);
                }
            }
        };
        let spans = page_spans(addr, len as usize);
        if len >= 16 * PAGE_BYTES {
            spans.par_bridge().for_each(zero_span);
        } else {
            spans.for_each(zero_span);
        }
    }
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
        let in_page = (a % PAGE_BYTES) as usize;
        let n = (PAGE_BYTES as usize - in_page).min(len - at);
        let span = ((a / PAGE_BYTES) as usize, in_page, at, n);
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
    /// The little-endian bytes.
    fn le_bytes(self) -> impl Iterator<Item = u8> {
        self.bits().to_le_bytes().into_iter().take(Self::BYTES)
    }
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
        }
    )*};
}

gm_elem! {
    u8: 1, |x| x as u64, |b| b as u8;
    bool: 1, |x| x as u64, |b| b as u8 != 0;
    half::f16: 2, |x| x.to_bits() as u64, |b| half::f16::from_bits(b as u16);
    half::bf16: 2, |x| x.to_bits() as u64, |b| half::bf16::from_bits(b as u16);
    i32: 4, |x| x as u32 as u64, |b| b as u32 as i32;
    f32: 4, |x| x.to_bits() as u64, |b| f32::from_bits(b as u32);
    i64: 8, |x| x as u64, |b| b as i64;
    f64: 8, |x| x.to_bits(), |b| f64::from_bits(b);
}

/// Packs `src` into `words` from the first word on; a partial last word
/// keeps its other bytes.
fn pack_words<T: GmElem>(words: &[AtomicU64], src: &[T]) {
    let per = 8 / T::BYTES;
    let shift = |i: usize| (8 * T::BYTES * i) as u32;
    let whole = src.chunks_exact(per);
    let tail = whole.remainder();
    for (w, c) in words.iter().zip(whole) {
        let mut v = 0u64;
        for (i, x) in c.iter().enumerate() {
            v |= x.bits() << shift(i);
        }
        w.store(v, Ordering::Relaxed);
    }
    if !tail.is_empty() {
        let (mut v, mut mask) = (0u64, 0u64);
        for (i, x) in tail.iter().enumerate() {
            v |= x.bits() << shift(i);
            mask |= (u64::MAX >> (64 - 8 * T::BYTES)) << shift(i);
        }
        let _ = words[src.len() / per].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            Some((old & !mask) | v)
        });
    }
}

/// Unpacks `out.len()` elements from `words`, the inverse of `pack_words`.
fn unpack_words<T: GmElem>(words: &[AtomicU64], out: &mut [T]) {
    let per = 8 / T::BYTES;
    let shift = |i: usize| (8 * T::BYTES * i) as u32;
    let last_word = out.len() / per;
    let mut whole = out.chunks_exact_mut(per);
    for (w, c) in words.iter().zip(&mut whole) {
        let v = w.load(Ordering::Relaxed);
        for (i, x) in c.iter_mut().enumerate() {
            *x = T::from_bits(v >> shift(i));
        }
    }
    let tail = whole.into_remainder();
    if !tail.is_empty() {
        let v = words[last_word].load(Ordering::Relaxed);
        for (i, x) in tail.iter_mut().enumerate() {
            *x = T::from_bits(v >> shift(i));
        }
    }
}

/// Bytes `start..start + out.len()` of a page: a partial head word, whole
/// words in a tight loop, a partial tail word.
fn read_words(page: &[AtomicU64], start: usize, out: &mut [u8]) {
    let mut byte = start;
    let mut i = 0;
    // Head: up to the next word boundary.
    while i < out.len() && !byte.is_multiple_of(8) {
        let word = page[byte / 8].load(Ordering::Relaxed).to_le_bytes();
        let off = byte % 8;
        let n = (8 - off).min(out.len() - i);
        out[i..i + n].copy_from_slice(&word[off..off + n]);
        i += n;
        byte += n;
    }
    let whole = (out.len() - i) / 8;
    for (w, c) in page[byte / 8..byte / 8 + whole]
        .iter()
        .zip(out[i..i + whole * 8].chunks_exact_mut(8))
    {
        c.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    i += whole * 8;
    byte += whole * 8;
    if i < out.len() {
        let word = page[byte / 8].load(Ordering::Relaxed).to_le_bytes();
        let n = out.len() - i;
        out[i..].copy_from_slice(&word[..n]);
    }
}

fn write_words(page: &[AtomicU64], start: usize, data: &[u8]) {
    let mut byte = start;
    let mut i = 0;
    let partial = |slot: &AtomicU64, off: usize, bytes: &[u8]| {
        let mut w = [0u8; 8];
        w[off..off + bytes.len()].copy_from_slice(bytes);
        let val = u64::from_le_bytes(w);
        let mask = if bytes.len() * 8 >= 64 {
            u64::MAX
        } else {
            ((1u64 << (bytes.len() * 8)) - 1) << (off * 8)
        };
        // Only this write's bytes change; a neighbour's concurrent write
        // to the other bytes of the word is kept.
        let _ = slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            Some((old & !mask) | (val & mask))
        });
    };
    while i < data.len() && !byte.is_multiple_of(8) {
        let off = byte % 8;
        let n = (8 - off).min(data.len() - i);
        partial(&page[byte / 8], off, &data[i..i + n]);
        i += n;
        byte += n;
    }
    let whole = (data.len() - i) / 8;
    for (w, c) in page[byte / 8..byte / 8 + whole]
        .iter()
        .zip(data[i..i + whole * 8].chunks_exact(8))
    {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        w.store(u64::from_le_bytes(b), Ordering::Relaxed);
    }
    i += whole * 8;
    byte += whole * 8;
    if i < data.len() {
        partial(&page[byte / 8], 0, &data[i..]);
    }
}
