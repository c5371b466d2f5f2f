//! `MemRegion` and `MemChunk` (Icraft XRT's MemRegion/MemChunk): a region is
//! a range of device memory with a best-fit free-list allocator (32-byte
//! alignment, neighbours coalesce on free); a chunk is one allocation,
//! freed when dropped. The safe API cannot double-free or touch a freed
//! chunk: a chunk owns its range and every access goes through it.

use super::storage::{GmElem, PagedMemory};
use crate::error::{DeviceError, Result};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Bulk typed copies split into pieces of this many bytes, one per rayon
/// task (big enough that a task's cost dwarfs handing it out). A copy of
/// one piece or less runs on the calling thread: handing it to the pool
/// would cost more than the copy.
const PARALLEL_COPY_BYTES: usize = 1 << 20;

/// Every allocation's offset and size are multiples of this.
pub const ALIGN: u64 = 32;

/// Occupancy of a region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionStats {
    /// Total bytes.
    pub size: u64,
    /// Bytes in live chunks (after alignment).
    pub used: u64,
    /// Bytes free.
    pub free: u64,
    /// The largest free block.
    pub largest_free: u64,
    /// Live chunks.
    pub chunks: usize,
    /// Free blocks (1 when nothing is fragmented).
    pub free_blocks: usize,
}

#[derive(Debug)]
struct FreeList {
    /// offset -> length of each free block; never two adjacent blocks.
    free: BTreeMap<u64, u64>,
    /// offset -> each live chunk, for [`MemRegion::chunks`] (XRT's
    /// getAllMemChunk) and out-of-memory messages.
    live: BTreeMap<u64, LiveChunk>,
    used: u64,
    chunks: usize,
}

#[derive(Debug)]
struct LiveChunk {
    len: u64,
    requested: u64,
    label: Option<Arc<str>>,
}

/// One live chunk of a region, as [`MemRegion::chunks`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkInfo {
    /// First byte in the region.
    pub offset: u64,
    /// Usable bytes (the request rounded up to 32).
    pub len: u64,
    /// The bytes asked for.
    pub requested: u64,
    /// What owns it, if its owner said ([`MemChunk::set_label`]): a
    /// tensor's type, a program's constant.
    pub label: Option<Arc<str>>,
}

#[derive(Debug)]
struct RegionInner {
    name: String,
    state: Mutex<FreeList>,
    memory: PagedMemory,
}

/// A region of device memory with its allocator. Cloning shares the region.
#[derive(Clone, Debug)]
pub struct MemRegion {
    inner: Arc<RegionInner>,
}

/// One live allocation. Dropping it returns its bytes to the region.
#[derive(Debug)]
pub struct MemChunk {
    region: Arc<RegionInner>,
    offset: u64,
    len: u64,
    requested: u64,
}

/// A plain description of a chunk's bytes (address and length in the
/// region), for handing to a simulated core. It carries no ownership: the
/// code that builds a task keeps the chunks alive while the task runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// First byte in the region.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
}

/// The largest region: 16 TiB (also the bound on a Sim device's GM).
pub const MAX_REGION_BYTES: u64 = 1 << 44;

impl MemRegion {
    /// A region of `size` bytes named `name` (for messages).
    pub fn new(name: &str, size: u64) -> MemRegion {
        // The page directory grows with the size (lazily backed pages, but
        // one slot per 1 GiB): clamp so even `u64::MAX` builds in kilobytes.
        let size = size.min(MAX_REGION_BYTES);
        let size = size - size % ALIGN;
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        MemRegion {
            inner: Arc::new(RegionInner {
                name: name.to_string(),
                state: Mutex::new(FreeList {
                    free,
                    live: BTreeMap::new(),
                    used: 0,
                    chunks: 0,
                }),
                memory: PagedMemory::new(size),
            }),
        }
    }

    /// The region's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The bytes behind the region, for the simulator's cores.
    pub fn memory(&self) -> &PagedMemory {
        &self.inner.memory
    }

    /// Allocates `bytes` (rounded up to 32; zero becomes 32), zero-filled.
    pub fn alloc(&self, bytes: u64) -> Result<MemChunk> {
        let chunk = self.alloc_raw(bytes)?;
        self.inner.memory.zero(chunk.offset, chunk.len);
        Ok(chunk)
    }

    /// Allocates `bytes` for a caller that overwrites all of them at once
    /// (a copy-in): only the alignment padding past `bytes` is zeroed, so
    /// the bytes it fails to write hold what the region held before.
    pub fn alloc_for_overwrite(&self, bytes: u64) -> Result<MemChunk> {
        let chunk = self.alloc_raw(bytes)?;
        let data = bytes.min(chunk.len);
        self.inner
            .memory
            .zero(chunk.offset + data, chunk.len - data);
        Ok(chunk)
    }

    fn alloc_raw(&self, bytes: u64) -> Result<MemChunk> {
        let len = bytes
            .max(1)
            .checked_next_multiple_of(ALIGN)
            .ok_or_else(|| self.oom(bytes))?;
        let mut st = self.inner.lock();
        // Best fit: the smallest free block that holds `len` keeps big
        // blocks whole for big requests.
        let best = st
            .free
            .iter()
            .filter(|&(_, &l)| l >= len)
            .min_by_key(|&(&o, &l)| (l, o))
            .map(|(&o, &l)| (o, l));
        let Some((offset, block)) = best else {
            drop(st);
            return Err(self.oom(bytes));
        };
        st.free.remove(&offset);
        if block > len {
            st.free.insert(offset + len, block - len);
        }
        st.used += len;
        st.chunks += 1;
        st.live.insert(
            offset,
            LiveChunk {
                len,
                requested: bytes,
                label: None,
            },
        );
        drop(st);
        Ok(MemChunk {
            region: self.inner.clone(),
            offset,
            len,
            requested: bytes,
        })
    }

    fn oom(&self, requested: u64) -> DeviceError {
        let s = self.stats();
        // The biggest live chunks say what holds the memory.
        let mut live = self.chunks();
        live.sort_by_key(|c| (std::cmp::Reverse(c.len), c.offset));
        let largest_live = live
            .iter()
            .take(3)
            .map(|c| match &c.label {
                Some(l) => format!("{} bytes at {} ({l})", c.len, c.offset),
                None => format!("{} bytes at {}", c.len, c.offset),
            })
            .collect();
        DeviceError::OutOfMemory {
            region: self.inner.name.clone(),
            requested,
            free: s.free,
            largest_free: s.largest_free,
            largest_live,
        }
    }

    /// Every live chunk, by offset.
    pub fn chunks(&self) -> Vec<ChunkInfo> {
        let st = self.inner.lock();
        st.live
            .iter()
            .map(|(&offset, c)| ChunkInfo {
                offset,
                len: c.len,
                requested: c.requested,
                label: c.label.clone(),
            })
            .collect()
    }

    /// Occupancy now.
    pub fn stats(&self) -> RegionStats {
        let st = self.inner.lock();
        let size = self.inner.memory.size();
        RegionStats {
            size,
            used: st.used,
            free: size - st.used,
            largest_free: st.free.values().copied().max().unwrap_or(0),
            chunks: st.chunks,
            free_blocks: st.free.len(),
        }
    }

    /// True when `chunk` was allocated from this region.
    pub fn owns(&self, chunk: &MemChunk) -> bool {
        Arc::ptr_eq(&self.inner, &chunk.region)
    }
}

impl RegionInner {
    fn lock(&self) -> MutexGuard<'_, FreeList> {
        // The free list is consistent after every statement that can panic
        // (none can), so a poisoned lock still holds a valid list.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl MemChunk {
    /// Offset of the chunk in its region.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Usable size (the request rounded up to 32 bytes).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: a chunk holds at least 32 bytes.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The size that was asked for.
    pub fn requested(&self) -> u64 {
        self.requested
    }

    /// The chunk's address range.
    pub fn span(&self) -> Span {
        Span {
            addr: self.offset,
            len: self.len,
        }
    }

    /// Names what owns the chunk, for [`MemRegion::chunks`] and
    /// out-of-memory messages.
    pub fn set_label(&self, label: Arc<str>) {
        let mut st = self.region.lock();
        if let Some(c) = st.live.get_mut(&self.offset) {
            c.label = Some(label);
        }
    }

    /// The name of the region it came from.
    pub fn region_name(&self) -> &str {
        &self.region.name
    }

    fn check(&self, what: &str, offset: u64, len: usize) -> Result<()> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(DeviceError::OutOfBounds {
                what: what.to_string(),
                offset,
                end: offset.saturating_add(len as u64),
                size: self.len,
            }),
        }
    }

    /// Copies bytes out of the chunk, starting `offset` bytes in.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check("read", offset, out.len())?;
        self.region.memory.read(self.offset + offset, out);
        Ok(())
    }

    /// Copies elements out of the chunk, starting `offset` bytes in (the
    /// typed bulk form of [`read`](Self::read); big copies are split over
    /// the rayon pool).
    pub fn read_elems<T: GmElem>(&self, offset: u64, out: &mut [T]) -> Result<()> {
        self.check("read", offset, out.len().saturating_mul(T::BYTES))?;
        let base = self.offset + offset;
        let memory = &self.region.memory;
        if out.len() * T::BYTES <= PARALLEL_COPY_BYTES {
            memory.read_elems(base, out);
            return Ok(());
        }
        out.par_chunks_mut(PARALLEL_COPY_BYTES / T::BYTES)
            .enumerate()
            .for_each(|(i, c)| {
                memory.read_elems(base + (i * PARALLEL_COPY_BYTES) as u64, c);
            });
        Ok(())
    }

    /// Copies elements into the chunk, starting `offset` bytes in (the
    /// typed bulk form of [`write`](Self::write)).
    pub fn write_elems<T: GmElem>(&self, offset: u64, data: &[T]) -> Result<()> {
        self.check("write", offset, data.len().saturating_mul(T::BYTES))?;
        let base = self.offset + offset;
        let memory = &self.region.memory;
        if data.len() * T::BYTES <= PARALLEL_COPY_BYTES {
            return Ok(memory.write_elems(base, data)?);
        }
        data.par_chunks(PARALLEL_COPY_BYTES / T::BYTES)
            .enumerate()
            .try_for_each(|(i, c)| {
                memory.write_elems(base + (i * PARALLEL_COPY_BYTES) as u64, c)
            })?;
        Ok(())
    }

    /// Copies bytes into the chunk, starting `offset` bytes in.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check("write", offset, data.len())?;
        Ok(self.region.memory.write(self.offset + offset, data)?)
    }
}

impl Drop for MemChunk {
    fn drop(&mut self) {
        let mut st = self.region.lock();
        let (mut offset, mut len) = (self.offset, self.len);
        // Coalesce with the free block just before and just after.
        if let Some((&prev, &plen)) = st.free.range(..offset).next_back() {
            if prev + plen == offset {
                st.free.remove(&prev);
                offset = prev;
                len += plen;
            }
        }
        if let Some(&next_len) = st.free.get(&(offset + len)) {
            st.free.remove(&(offset + len));
            len += next_len;
        }
        st.free.insert(offset, len);
        st.live.remove(&self.offset);
        st.used -= self.len;
        st.chunks -= 1;
    }
}
