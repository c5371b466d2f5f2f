//! Device memory: regions with an allocator ([`region`]) over lazily paged
//! bytes, each page behind its own reader-writer lock ([`storage`]).

pub mod region;
pub mod storage;

pub use region::{ChunkInfo, MemChunk, MemRegion, RegionStats, Span, ALIGN};
pub use storage::{GmElem, PageAllocError, PagedMemory};
