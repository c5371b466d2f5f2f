//! `tilejit_codegen::sys`: every OS call tilejit makes: fresh zeroed
//! buffers backed by transparent huge pages ([`zeroed_vec`]), and the
//! coarse clock, the effective user id and giving free memory back
//! (`malloc_trim`). A child of the one unsafe module, so `unsafe` stays
//! there.
//!
//! A fresh buffer's pages fault in where a kernel first writes them, in
//! parallel, and the OS zeroes each as it maps it. On 4 KiB pages a fresh
//! 32 MiB output costs 8K faults, more than the kernel that fills it, so
//! buffers from 1 MiB up are advised onto 2 MiB pages (`MADV_HUGEPAGE`).
//! Only whole 2 MiB regions can be huge pages, though, and glibc puts a big
//! allocation 16 bytes past the start of its own mapping, whose first page
//! it has already written (the chunk header): so the first region, and
//! the partial last one, still faulted page by page, all in the first
//! worker's rows.
//!
//! From 16 MiB up (where the padding is at most an eighth of the buffer)
//! the allocation is therefore padded to 32 bytes short of whole 2 MiB
//! regions ([`huge_page_len`]). glibc then maps exactly that many regions,
//! Linux places such a mapping on a 2 MiB boundary, and the buffer starts
//! 16 bytes past it. The whole mapping is advised, and its first region,
//! where the header page already sits on a 4 KiB page, is collapsed into a
//! huge page at once (`MADV_COLLAPSE`), so a fresh big output faults in a
//! few huge pages instead of hundreds of small ones. Streaming kernels do
//! not mind that every big buffer then starts at the same offset in its
//! 2 MiB page. Where the layout is not the one expected (another
//! allocator, an old kernel), only the aligned interior is advised, as
//! before; advice never changes what memory holds.

/// A transparent huge page.
const HUGE: usize = 2 << 20;

/// Buffers from this size up are padded to whole huge pages: the padding,
/// at most one page, is then at most an eighth of the buffer.
const PAD_FROM: usize = 16 << 20;

/// Buffers from this size up are advised onto huge pages.
const ADVISE_FROM: usize = 1 << 20;

/// Where glibc puts a big (`mmap`ed) allocation: past two size words at the
/// start of its mapping. The mapping for `len` bytes is `len + 8` rounded
/// up to 16, plus 8, rounded up to 4 KiB.
const CHUNK_HEADER: usize = 16;

/// Element types whose all-zero bit pattern is a valid value (zero,
/// `false`), so fresh zeroed memory holds initialised elements.
///
/// # Safety
/// Implement only for such types.
pub unsafe trait ZeroBits: Copy {}

// SAFETY: all-zero bits are 0, 0.0 or false for each of these.
unsafe impl ZeroBits for f32 {}
// SAFETY: as above.
unsafe impl ZeroBits for f64 {}
// SAFETY: as above.
unsafe impl ZeroBits for i32 {}
// SAFETY: as above.
unsafe impl ZeroBits for i64 {}
// SAFETY: as above.
unsafe impl ZeroBits for bool {}
// SAFETY: as above.
unsafe impl ZeroBits for u8 {}
// SAFETY: as above.
unsafe impl ZeroBits for i8 {}
// SAFETY: as above.
unsafe impl ZeroBits for i16 {}
// SAFETY: as above.
unsafe impl ZeroBits for u16 {}
// SAFETY: as above.
unsafe impl ZeroBits for u32 {}
// SAFETY: as above.
unsafe impl ZeroBits for u64 {}
// SAFETY: as above.
unsafe impl ZeroBits for half::f16 {}
// SAFETY: as above.
unsafe impl ZeroBits for half::bf16 {}

/// How many elements of `elem_bytes` bytes to allocate so that `n` of them
/// can lie on huge pages from the first: `n`, or from 16 MiB up
/// (on Linux with glibc) enough that glibc maps a whole number of 2 MiB
/// regions (the allocation is 32 bytes short of them).
pub fn huge_page_len(n: usize, elem_bytes: usize) -> usize {
    let bytes = n.saturating_mul(elem_bytes);
    if !cfg!(all(target_os = "linux", target_env = "gnu")) || elem_bytes == 0 || bytes < PAD_FROM {
        return n;
    }
    let regions = bytes
        .checked_add(2 * CHUNK_HEADER)
        .and_then(|b| b.checked_next_multiple_of(HUGE));
    match regions {
        // Element sizes (1 to 8) divide the padded size, a multiple of 16.
        Some(region_bytes) => (region_bytes - 2 * CHUNK_HEADER) / elem_bytes,
        None => n,
    }
}

/// `n` zero elements in fresh memory, or `None` when the allocator cannot
/// give them (an impossible size is an error for the caller, not an
/// abort). The memory comes zeroed from the allocator (`calloc`: the OS
/// maps zero pages lazily, so the page faults happen where a kernel first
/// writes, in parallel, rather than in a serial memset here); from 1 MiB up
/// it is advised onto huge pages, and from 16 MiB up padded so that all of
/// it can be (see the module doc). The vector's capacity holds the padding.
pub fn zeroed_vec<T: ZeroBits>(n: usize) -> Option<Vec<T>> {
    /// Below this many bytes, zeroing by hand beats calloc.
    const SMALL_ZEROED: usize = 4096;
    let cap = huge_page_len(n, std::mem::size_of::<T>());
    let layout = std::alloc::Layout::array::<T>(cap).ok()?;
    if layout.size() == 0 {
        return Some(Vec::new());
    }
    // Small blocks: malloc and a memset. glibc's calloc bypasses its
    // per-thread cache, so a calloc'd block freed later sends frees down
    // the slow path: ~500 instructions of a tiny call's ~3000 (W6).
    let ptr = if layout.size() < SMALL_ZEROED {
        // SAFETY: the layout's size is not zero. (`black_box`: LLVM would
        // fuse the malloc and memset back into a calloc.)
        let p = std::hint::black_box(unsafe { std::alloc::alloc(layout) });
        if !p.is_null() {
            // SAFETY: `p` holds `layout.size()` writable bytes.
            unsafe { std::ptr::write_bytes(p, 0, layout.size()) };
        }
        p
    } else {
        // SAFETY: the layout's size is not zero.
        unsafe { std::alloc::alloc_zeroed(layout) }
    }
    .cast::<T>();
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `ptr` comes from the global allocator with
    // `Layout::array::<T>(cap)`, the layout a `Vec<T>` of capacity `cap`
    // frees with; its first `n <= cap` elements are zero bits, a valid `T`
    // (`ZeroBits`).
    let mut v = unsafe { Vec::from_raw_parts(ptr, n, cap) };
    advise_huge_pages(&mut v);
    Some(v)
}

/// Advises `v`'s allocation (its whole capacity) onto huge pages; see the
/// module doc. A no-op below `ADVISE_FROM` bytes or where the OS does not
/// support it.
#[cfg(target_os = "linux")]
fn advise_huge_pages<T>(v: &mut Vec<T>) {
    let start = v.as_mut_ptr() as usize;
    let end = start + v.capacity() * std::mem::size_of::<T>();
    if end - start < ADVISE_FROM {
        return;
    }
    let advise = |a: usize, b: usize, advice: libc::c_int| {
        // SAFETY: madvise with MADV_HUGEPAGE or MADV_COLLAPSE changes only
        // how the kernel backs the pages of [a, b), never what they hold
        // (a collapse copies them), so it cannot affect any Rust value,
        // ours or not. A failure (an old kernel, THP disabled, no huge page
        // free) leaves the memory as it was.
        unsafe { libc::madvise(a as *mut libc::c_void, b - a, advice) };
    };
    let first = start & !(HUGE - 1);
    if start - first == CHUNK_HEADER && end - start >= PAD_FROM {
        // The padded layout: the mapping is [first, end rounded up to a
        // region), its first region holds glibc's header page already.
        let last = end.next_multiple_of(HUGE);
        advise(first, last, libc::MADV_HUGEPAGE);
        advise(first, first + HUGE, MADV_COLLAPSE);
    } else {
        let (a, b) = (start.next_multiple_of(HUGE), end & !(HUGE - 1));
        if b > a {
            advise(a, b, libc::MADV_HUGEPAGE);
        }
    }
}

/// `MADV_COLLAPSE` (Linux 6.1): collapse a range into huge pages now.
#[cfg(target_os = "linux")]
const MADV_COLLAPSE: libc::c_int = 25;

/// Elsewhere there is nothing to advise.
#[cfg(not(target_os = "linux"))]
fn advise_huge_pages<T>(_v: &mut Vec<T>) {}

/// The monotonic clock at the kernel's tick resolution (a few ms), in
/// nanoseconds: what `Instant::now` reads, without its timer read, which
/// costs more than a whole warm jit dispatch under some hypervisors. For
/// "last used" stamps on hot paths. `None` where there is no such clock.
#[cfg(target_os = "linux")]
pub fn coarse_clock_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration;
    // clock_gettime writes nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// See the Linux version.
#[cfg(not(target_os = "linux"))]
pub fn coarse_clock_ns() -> Option<u64> {
    None
}

/// The process's effective user id: who must own the disk cache
/// directory (`tilejit_runtime`'s `disk::check_dir`).
#[cfg(unix)]
pub fn effective_uid() -> u32 {
    // SAFETY: `geteuid` takes no arguments, cannot fail and touches no
    // memory of ours.
    unsafe { libc::geteuid() }
}

/// Gives the C allocator's free memory back to the OS: glibc keeps the
/// pages of freed blocks below its mmap threshold in its arenas (one per
/// thread that allocated, at most 8 per core), so a long-running server
/// that streamed a big tensor through many 1 MiB chunks stays that much
/// bigger after freeing it. `malloc_trim(0)` releases whole free pages of
/// every arena. True if memory was given back; false where the allocator
/// is not glibc's (nothing to do).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory() -> bool {
    // SAFETY: malloc_trim takes no pointers; it only returns unused pages
    // of glibc's own heaps to the OS, under glibc's arena locks.
    unsafe { libc::malloc_trim(0) != 0 }
}

/// See the glibc version.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() -> bool {
    false
}
