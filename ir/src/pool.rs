//! The caching allocator for tensor storage (PyTorch's caching allocator,
//! simplified): when the last [`Array`](crate::Array) holding a buffer is
//! dropped, the buffer goes back to a global pool instead of to the system;
//! a backend that needs storage of that type takes it back without asking
//! the OS. Why: every call allocates its outputs, and a fresh big buffer
//! page-faults in more slowly than the kernel that fills it.
//!
//! Buffers are kept by dtype and size class, not exact length, so a
//! program run over many nearby shapes (eager ops, growing batches) reuses
//! a few buffers instead of keeping one per shape. As PyTorch's
//! `roundup_power2_divisions`, a class is a quarter-power of two below
//! 8 MiB (at most 25% slack) and whole 2 MiB regions above it (the huge
//! pages fresh big buffers are padded to anyway, [`class_len`]). Fresh
//! storage is allocated at its class's length and its vector truncated to
//! the length asked for; a taken buffer's length is set within its
//! capacity, so nothing is copied (growing it writes only the elements
//! between the two lengths). The byte bound evicts the oldest buffers
//! first; [`BufferPool::empty`] and [`BufferPool::trim`] give buffers back
//! to the system on demand.
//!
//! A taken buffer holds stale values: only code that overwrites every
//! element may take one. In debug builds taken buffers are poisoned (NaN,
//! `MIN`, `true`, `0xa5...` for unsigned), so a kernel that leaves an element unwritten fails the
//! tests instead of returning stale data.

use crate::array::Buffer;
use crate::dtype::DType;
use half::{bf16, f16};
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Buffers smaller than this are left to the system allocator, which is
/// fast for them.
pub const MIN_POOLED_BYTES: usize = 4096;

/// Past this, classes are whole 2 MiB regions.
const LARGE_FROM: usize = 8 << 20;
/// A transparent huge page.
const REGION: usize = 2 << 20;
/// What glibc puts before a big allocation in its mapping; a large class
/// leaves room for it, so the class fills whole regions
/// (`tilejit_codegen::sys::huge_page_len` pads fresh buffers the same way).
const HEADER: usize = 32;

/// The smallest size class holding `bytes`, or `None` past `usize`.
fn class_up(bytes: usize) -> Option<usize> {
    if bytes > LARGE_FROM {
        let padded = bytes
            .checked_add(HEADER)?
            .checked_next_multiple_of(REGION)?;
        return Some(padded - HEADER);
    }
    let step = (prev_power_of_two(bytes) / 4).max(1);
    Some(bytes.next_multiple_of(step))
}

/// The largest size class that `cap` bytes of storage hold.
fn class_down(cap: usize) -> usize {
    if cap.saturating_add(HEADER) >= LARGE_FROM + REGION {
        return (cap + HEADER) / REGION * REGION - HEADER;
    }
    let step = (prev_power_of_two(cap) / 4).max(1);
    cap / step * step
}

fn prev_power_of_two(x: usize) -> usize {
    if x == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - x.leading_zeros())
    }
}

/// The length to allocate for `n` elements of `dtype` so that the storage
/// fills its size class and can later serve any length of that class: `n`
/// itself where the buffer would be too small to pool (or the size
/// overflows).
pub fn class_len(dtype: DType, n: usize) -> usize {
    let size = dtype.size_bytes();
    match n.checked_mul(size) {
        Some(bytes) if bytes >= MIN_POOLED_BYTES => class_up(bytes).map_or(n, |c| c / size),
        _ => n,
    }
}

/// What the pool holds and has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Takes served from the pool.
    pub hits: u64,
    /// Hits whose buffer had been used for another length (a nearby shape
    /// of the same size class).
    pub resized_hits: u64,
    /// Takes that found nothing.
    pub misses: u64,
    /// Buffers dropped because the pool was full (oldest first) or was
    /// trimmed.
    pub evictions: u64,
    /// Bytes held now.
    pub bytes: usize,
    /// Buffers held now.
    pub buffers: usize,
    /// The byte bound.
    pub capacity: usize,
}

#[derive(Default)]
struct State {
    free: HashMap<(DType, usize), Vec<Buffer>>,
    /// Keys in the order their buffers were given, for evicting the oldest.
    order: VecDeque<(DType, usize)>,
    stats: PoolStats,
}

impl State {
    /// Removes the oldest buffers until at most `bytes` are held, returning
    /// them (for the caller to free outside the lock).
    fn evict_to(&mut self, bytes: usize) -> Vec<Buffer> {
        let mut evicted = Vec::new();
        while self.stats.bytes > bytes {
            let Some(key) = self.order.pop_front() else {
                break;
            };
            if let Some(b) = self
                .free
                .get_mut(&key)
                .and_then(|v| (!v.is_empty()).then(|| v.remove(0)))
            {
                self.stats.bytes -= b.allocated_bytes();
                self.stats.buffers -= 1;
                self.stats.evictions += 1;
                evicted.push(b);
            }
        }
        evicted
    }
}

/// The global storage pool; see [`pool`].
pub struct BufferPool {
    state: Mutex<State>,
}

/// The process-wide pool. Its byte bound is `TILEJIT_POOL_BYTES`
/// ([`crate::config`]; 256 MiB by default, 0 disables pooling).
pub fn pool() -> &'static BufferPool {
    static POOL: OnceLock<BufferPool> = OnceLock::new();
    POOL.get_or_init(|| BufferPool::new(crate::config::config().pool_bytes))
}

impl BufferPool {
    /// A pool of its own with a byte bound (the global one is [`pool`]).
    pub fn new(capacity: usize) -> BufferPool {
        BufferPool {
            state: Mutex::new(State {
                stats: PoolStats {
                    capacity,
                    ..PoolStats::default()
                },
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update leaves the state consistent, so a poisoned lock is usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A buffer of `len` elements of `dtype` that was given back earlier,
    /// if the pool has one of `len`'s size class. Its contents are stale
    /// (poisoned in debug builds): the caller must overwrite every element.
    pub fn take(&self, dtype: DType, len: usize) -> Option<Buffer> {
        let bytes = len.checked_mul(dtype.size_bytes())?;
        if bytes < MIN_POOLED_BYTES {
            return None;
        }
        let class = class_up(bytes)?;
        let mut st = self.lock();
        let found = st.free.get_mut(&(dtype, class)).and_then(Vec::pop);
        match found {
            Some(mut b) => {
                st.stats.hits += 1;
                if b.len() != len {
                    st.stats.resized_hits += 1;
                }
                st.stats.bytes -= b.allocated_bytes();
                st.stats.buffers -= 1;
                drop(st);
                set_len(&mut b, len);
                if cfg!(debug_assertions) {
                    poison(&mut b);
                }
                Some(b)
            }
            None => {
                st.stats.misses += 1;
                None
            }
        }
    }

    /// Keeps `buf` for a later [`take`](Self::take), evicting the oldest
    /// buffers if the pool would exceed its bound.
    pub fn give(&self, buf: Buffer) {
        // Kept under the largest class its capacity holds, so whatever
        // takes it fits; the bound counts all it holds.
        let bytes = buf.allocated_bytes();
        if bytes < MIN_POOLED_BYTES {
            return;
        }
        let key = (buf.dtype(), class_down(bytes));
        let mut st = self.lock();
        if bytes > st.stats.capacity {
            return;
        }
        let limit = st.stats.capacity - bytes;
        let evicted = st.evict_to(limit);
        st.free.entry(key).or_default().push(buf);
        st.order.push_back(key);
        st.stats.bytes += bytes;
        st.stats.buffers += 1;
        // Compact the order queue when it holds many stale keys.
        if st.order.len() > 4 * st.stats.buffers + 64 {
            let State { free, order, .. } = &mut *st;
            let mut seen: HashMap<(DType, usize), usize> = HashMap::new();
            order.retain(|k| {
                let n = seen.entry(*k).or_default();
                *n += 1;
                *n <= free.get(k).map_or(0, Vec::len)
            });
        }
        drop(st);
        // Freed outside the lock: returning big blocks to the OS takes time.
        drop(evicted);
    }

    /// Counters and occupancy now.
    pub fn stats(&self) -> PoolStats {
        self.lock().stats
    }

    /// Gives every held buffer back to the system (PyTorch's
    /// `empty_cache`); counters other than occupancy are kept.
    pub fn empty(&self) {
        self.trim(0);
    }

    /// Drops every held buffer; the same as [`empty`](Self::empty).
    pub fn clear(&self) {
        self.empty();
    }

    /// Gives the oldest held buffers back to the system until the pool
    /// holds at most `bytes`.
    pub fn trim(&self, bytes: usize) {
        let evicted = {
            let mut st = self.lock();
            let evicted = st.evict_to(bytes);
            if st.stats.buffers == 0 {
                st.free.clear();
                st.order.clear();
            }
            evicted
        };
        // Freed outside the lock: returning big blocks to the OS takes time.
        drop(evicted);
    }

    /// Sets the byte bound (0 disables pooling) and trims to it.
    pub fn set_capacity(&self, bytes: usize) {
        self.lock().stats.capacity = bytes;
        self.trim(bytes);
    }
}

/// Small buffers each thread keeps for itself (glibc's per-thread cache,
/// one level up): a tiny call's output is allocated and freed on every
/// call, and `malloc` plus `free` were a tenth of W6's instructions. Apart
/// from the shared pool: at most 8 buffers under 4 KiB per thread, freed
/// with the thread; [`BufferPool::empty`] and `set_capacity` do not reach
/// them, and `TILEJIT_POOL_BYTES=0` turns them off with the pool.
const SMALL_KEPT: usize = 8;

struct SmallCache {
    /// Whether pooling is on (`TILEJIT_POOL_BYTES` is not 0), read once.
    on: bool,
    held: Vec<Buffer>,
}

thread_local! {
    static SMALL: std::cell::RefCell<SmallCache> = std::cell::RefCell::new(SmallCache {
        on: crate::config::config().pool_bytes > 0,
        held: Vec::with_capacity(SMALL_KEPT),
    });
}

/// A buffer of `len` elements of `dtype` (under [`MIN_POOLED_BYTES`]) that
/// this thread gave back with [`give_small`], if it kept one that fits
/// without much slack. Its contents are stale (poisoned in debug builds):
/// the caller must overwrite every element.
#[inline]
pub fn take_small(dtype: DType, len: usize) -> Option<Buffer> {
    let fits = |b: &Buffer| {
        let cap = b.capacity();
        b.dtype() == dtype && cap >= len && cap <= len + len / 4 + 16
    };
    let mut b = SMALL
        .try_with(|c| {
            let mut c = c.borrow_mut();
            let at = c.held.iter().rposition(fits)?;
            Some(c.held.swap_remove(at))
        })
        .ok()
        .flatten()?;
    // Usually it held `len` already: then nothing is written (a write
    // through `&mut` before the buffer is moved on stalled its reload).
    if b.len() != len {
        set_len(&mut b, len);
    }
    if cfg!(debug_assertions) {
        poison(&mut b);
    }
    Some(b)
}

/// Keeps a small buffer (under [`MIN_POOLED_BYTES`], not empty) for this
/// thread's next [`take_small`], if it keeps fewer than a few; any other
/// buffer is freed.
#[inline]
pub fn give_small(buf: Buffer) {
    let bytes = buf.allocated_bytes();
    // Halves are never asked for: the host computes them as f32.
    if bytes == 0 || bytes >= MIN_POOLED_BYTES || matches!(buf, Buffer::F16(_) | Buffer::BF16(_)) {
        return;
    }
    // During thread teardown the cache may be gone: then `buf` is freed.
    let _ = SMALL.try_with(move |c| {
        let mut c = c.borrow_mut();
        if !c.on {
            return;
        }
        // Full: the oldest goes, so a run of odd sizes cannot clog it.
        if c.held.len() == SMALL_KEPT {
            c.held.remove(0);
        }
        c.held.push(buf);
    });
}

/// Sets `b`'s length to `len` within its capacity (a class's buffer may
/// have served another length): truncating is free, and growing writes
/// only the elements between the two lengths.
fn set_len(b: &mut Buffer, len: usize) {
    fn to<T: Clone>(v: &mut Vec<T>, len: usize, fill: T) {
        if len <= v.len() {
            v.truncate(len);
        } else {
            v.resize(len, fill);
        }
    }
    match b {
        Buffer::F32(v) => to(v, len, 0.0),
        Buffer::F64(v) => to(v, len, 0.0),
        Buffer::F16(v) => to(v, len, f16::ZERO),
        Buffer::BF16(v) => to(v, len, bf16::ZERO),
        Buffer::I32(v) => to(v, len, 0),
        Buffer::I64(v) => to(v, len, 0),
        Buffer::Bool(v) => to(v, len, false),
        Buffer::U8(v) => to(v, len, 0),
        Buffer::I8(v) => to(v, len, 0),
        Buffer::I16(v) => to(v, len, 0),
        Buffer::U16(v) => to(v, len, 0),
        Buffer::U32(v) => to(v, len, 0),
        Buffer::U64(v) => to(v, len, 0),
    }
}

/// Values no correct kernel leaves behind unnoticed.
fn poison(b: &mut Buffer) {
    match b {
        Buffer::F32(v) => v.fill(f32::NAN),
        Buffer::F64(v) => v.fill(f64::NAN),
        Buffer::F16(v) => v.fill(f16::NAN),
        Buffer::BF16(v) => v.fill(bf16::NAN),
        Buffer::I32(v) => v.fill(i32::MIN),
        Buffer::I64(v) => v.fill(i64::MIN),
        Buffer::Bool(v) => v.fill(true),
        Buffer::U8(v) => v.fill(0xa5),
        Buffer::I8(v) => v.fill(i8::MIN),
        Buffer::I16(v) => v.fill(i16::MIN),
        Buffer::U16(v) => v.fill(0xa5a5),
        Buffer::U32(v) => v.fill(0xa5a5_a5a5),
        Buffer::U64(v) => v.fill(0xa5a5_a5a5_a5a5_a5a5),
    }
}
