//! The caching allocator for tensor storage (PyTorch's caching allocator,
//! simplified): when the last [`Array`](crate::Array) holding a buffer is
//! dropped, the buffer goes back to a global pool keyed by (dtype, length)
//! instead of to the system; a backend that needs storage of that type
//! takes it back without asking the OS. Why: every call allocates its
//! outputs, and a fresh big buffer page-faults in more slowly than the
//! kernel that fills it.
//!
//! A taken buffer holds stale values: only code that overwrites every
//! element may take one. In debug builds taken buffers are poisoned (NaN,
//! `MIN`, `true`), so a kernel that leaves an element unwritten fails the
//! tests instead of returning stale data.

use crate::array::Buffer;
use crate::dtype::DType;
use half::{bf16, f16};
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Buffers smaller than this are left to the system allocator, which is
/// fast for them.
pub const MIN_POOLED_BYTES: usize = 4096;

/// What the pool holds and has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Takes served from the pool.
    pub hits: u64,
    /// Takes that found nothing.
    pub misses: u64,
    /// Buffers dropped because the pool was full (oldest first).
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

/// The global storage pool; see [`pool`].
pub struct BufferPool {
    state: Mutex<State>,
}

/// The process-wide pool. Its byte bound is `TILEJIT_POOL_BYTES`
/// ([`crate::config`]; 2 GiB by default, 0 disables pooling).
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

    /// A buffer of exactly `len` elements of `dtype` that was given back
    /// earlier, if the pool has one. Its contents are stale (poisoned in
    /// debug builds): the caller must overwrite every element.
    pub fn take(&self, dtype: DType, len: usize) -> Option<Buffer> {
        if len * dtype.size_bytes() < MIN_POOLED_BYTES {
            return None;
        }
        let mut st = self.lock();
        let found = st.free.get_mut(&(dtype, len)).and_then(Vec::pop);
        match found {
            Some(b) => {
                st.stats.hits += 1;
                st.stats.bytes -= b.allocated_bytes();
                st.stats.buffers -= 1;
                drop(st);
                let mut b = b;
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
        // Which buffers pool is decided by length, as in `take`; the bound
        // counts what they hold.
        if buf.len() * buf.dtype().size_bytes() < MIN_POOLED_BYTES {
            return;
        }
        let bytes = buf.allocated_bytes();
        let mut st = self.lock();
        if bytes > st.stats.capacity {
            return;
        }
        let mut evicted = Vec::new();
        while st.stats.bytes + bytes > st.stats.capacity {
            let Some(key) = st.order.pop_front() else {
                break;
            };
            if let Some(b) = st
                .free
                .get_mut(&key)
                .and_then(|v| (!v.is_empty()).then(|| v.remove(0)))
            {
                st.stats.bytes -= b.allocated_bytes();
                st.stats.buffers -= 1;
                st.stats.evictions += 1;
                evicted.push(b);
            }
        }
        let key = (buf.dtype(), buf.len());
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

    /// Drops every held buffer.
    pub fn clear(&self) {
        let old = {
            let mut st = self.lock();
            st.order.clear();
            st.stats.bytes = 0;
            st.stats.buffers = 0;
            std::mem::take(&mut st.free)
        };
        drop(old);
    }

    /// Sets the byte bound (0 disables pooling) and trims to it.
    pub fn set_capacity(&self, bytes: usize) {
        self.lock().stats.capacity = bytes;
        if bytes == 0 {
            self.clear();
        }
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
    }
}
