//! Device memory: regions with an allocator ([`region`]) over lazily paged,
//! word-atomic bytes ([`storage`]).

pub mod region;
pub mod storage;

pub use region::{MemChunk, MemRegion, RegionStats, Span, ALIGN};
pub use storage::{GmElem, PagedMemory};
