//! The device API (TVM's DeviceAPI, Icraft XRT's Device): allocate, free,
//! copy host<->device and device<->device, synchronize, describe. Two
//! devices implement it: [`HostDevice`] (memory on the host, for
//! completeness and tests) and [`SimDevice`] (the simulated accelerator:
//! GM, 24 AIC + 48 AIV cores by default; `run` executes one verified
//! program on one core, `launch` a task graph through the scheduler).

use crate::config::DeviceConfig;
use crate::error::{DeviceError, Result};
use crate::isa::verify::{verify, VerifiedProgram};
use crate::isa::{CoreType, Program};
use crate::mem::{ChunkInfo, GmElem, MemChunk, MemRegion, RegionStats, Span};
use crate::sched::{Launch, LaunchHandle, LaunchOptions, Scheduler};
use crate::sim::{run_core, CoreRun, CoreState, TaskArgs};
use std::sync::{Arc, Mutex, OnceLock};

/// What a device is.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceInfo {
    /// Its name.
    pub name: String,
    /// `host` or `sim`.
    pub kind: &'static str,
    /// Memory bytes in total.
    pub memory_bytes: u64,
    /// Memory bytes free now.
    pub free_bytes: u64,
    /// Cube cores (0 for the host).
    pub aic_cores: u32,
    /// Vector cores (0 for the host).
    pub aiv_cores: u32,
    /// Clock of the cycle model (0 for the host).
    pub clock_hz: f64,
}

/// A buffer in a device's memory; freed when dropped (or by
/// [`DeviceApi::free`]).
#[derive(Debug)]
pub struct DeviceBuffer {
    chunk: MemChunk,
}

impl DeviceBuffer {
    /// Usable size in bytes.
    pub fn len(&self) -> u64 {
        self.chunk.len()
    }

    /// Always false (a buffer holds at least 32 bytes).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Its address range in device memory (for task arguments).
    pub fn span(&self) -> Span {
        self.chunk.span()
    }

    /// Names what owns the buffer (a tensor's type, a program's
    /// constant), shown by memory reports and out-of-memory errors.
    pub fn set_label(&self, label: std::sync::Arc<str>) {
        self.chunk.set_label(label);
    }
}

/// The operations every device offers. All methods are safe to call from
/// many threads at once.
pub trait DeviceApi: Send + Sync {
    /// What the device is, and its free memory now.
    fn describe(&self) -> DeviceInfo;
    /// Allocates `bytes` of device memory, zero-filled, 32-byte aligned.
    fn allocate(&self, bytes: u64) -> Result<DeviceBuffer>;
    /// Frees a buffer now (dropping it does the same).
    fn free(&self, buf: DeviceBuffer) -> Result<()>;
    /// Copies host bytes into `dst` at `offset`.
    fn copy_from_host(&self, src: &[u8], dst: &DeviceBuffer, offset: u64) -> Result<()>;
    /// Copies bytes of `src` at `offset` to the host.
    fn copy_to_host(&self, src: &DeviceBuffer, offset: u64, dst: &mut [u8]) -> Result<()>;
    /// Copies `bytes` from `src` at `src_offset` to `dst` at `dst_offset`.
    fn copy_within(
        &self,
        src: &DeviceBuffer,
        src_offset: u64,
        dst: &DeviceBuffer,
        dst_offset: u64,
        bytes: u64,
    ) -> Result<()>;
    /// Waits for all outstanding work.
    fn synchronize(&self) -> Result<()>;
}

/// Shared by both devices: one region, ownership checks, copies.
#[derive(Debug)]
struct Memory {
    device: String,
    region: MemRegion,
}

impl Memory {
    fn owned<'a>(&self, b: &'a DeviceBuffer) -> Result<&'a MemChunk> {
        if self.region.owns(&b.chunk) {
            Ok(&b.chunk)
        } else {
            Err(DeviceError::WrongDevice {
                owner: b.chunk.region_name().to_string(),
                device: self.device.clone(),
            })
        }
    }

    fn allocate(&self, bytes: u64) -> Result<DeviceBuffer> {
        Ok(DeviceBuffer {
            chunk: self.region.alloc(bytes)?,
        })
    }

    fn free(&self, buf: DeviceBuffer) -> Result<()> {
        self.owned(&buf)?;
        drop(buf);
        Ok(())
    }

    fn copy_from_host(&self, src: &[u8], dst: &DeviceBuffer, offset: u64) -> Result<()> {
        self.owned(dst)?.write(offset, src)
    }

    fn copy_to_host(&self, src: &DeviceBuffer, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.owned(src)?.read(offset, dst)
    }

    fn copy_within(
        &self,
        src: &DeviceBuffer,
        so: u64,
        dst: &DeviceBuffer,
        d_o: u64,
        bytes: u64,
    ) -> Result<()> {
        let (s, d) = (self.owned(src)?, self.owned(dst)?);
        let oob = |what: &str, off: u64, size: u64| DeviceError::OutOfBounds {
            what: what.to_string(),
            offset: off,
            end: off.saturating_add(bytes),
            size,
        };
        if so.checked_add(bytes).is_none_or(|e| e > s.len()) {
            return Err(oob("device copy source", so, s.len()));
        }
        if d_o.checked_add(bytes).is_none_or(|e| e > d.len()) {
            return Err(oob("device copy destination", d_o, d.len()));
        }
        // Staged in blocks; overlapping ranges copy as memmove does.
        let mut tmp = vec![0u8; bytes.min(1 << 20) as usize];
        let step = tmp.len().max(1) as u64;
        let blocks: Vec<u64> = (0..bytes.div_ceil(step)).collect();
        let order: Box<dyn Iterator<Item = &u64>> = if d_o > so && s.offset() == d.offset() {
            Box::new(blocks.iter().rev())
        } else {
            Box::new(blocks.iter())
        };
        for &b in order {
            let at = b * step;
            let n = step.min(bytes - at) as usize;
            s.read(so + at, &mut tmp[..n])?;
            d.write(d_o + at, &tmp[..n])?;
        }
        Ok(())
    }
}

/// The `DeviceApi` methods both devices answer from their `Memory`
/// (`$mem` is the path to it); `describe` and `synchronize` differ.
macro_rules! memory_methods {
    ($($mem:ident).+) => {
        fn allocate(&self, bytes: u64) -> Result<DeviceBuffer> {
            self.$($mem).+.allocate(bytes)
        }
        fn free(&self, buf: DeviceBuffer) -> Result<()> {
            self.$($mem).+.free(buf)
        }
        fn copy_from_host(&self, src: &[u8], dst: &DeviceBuffer, offset: u64) -> Result<()> {
            self.$($mem).+.copy_from_host(src, dst, offset)
        }
        fn copy_to_host(&self, src: &DeviceBuffer, offset: u64, dst: &mut [u8]) -> Result<()> {
            self.$($mem).+.copy_to_host(src, offset, dst)
        }
        fn copy_within(&self, src: &DeviceBuffer, so: u64, dst: &DeviceBuffer, d_o: u64, bytes: u64) -> Result<()> {
            self.$($mem).+.copy_within(src, so, dst, d_o, bytes)
        }
    };
}

/// Memory on the host, behind the device API.
#[derive(Debug)]
pub struct HostDevice {
    mem: Memory,
}

impl HostDevice {
    /// A host device that can hand out up to `bytes` (backed lazily; at
    /// most [`MAX_REGION_BYTES`](crate::mem::region::MAX_REGION_BYTES),
    /// larger sizes are clamped to it).
    pub fn new(bytes: u64) -> HostDevice {
        HostDevice {
            mem: Memory {
                device: "host".into(),
                region: MemRegion::new("host", bytes),
            },
        }
    }

    /// Allocator occupancy.
    pub fn memory_stats(&self) -> RegionStats {
        self.mem.region.stats()
    }
}

impl Default for HostDevice {
    fn default() -> Self {
        HostDevice::new(16 << 30)
    }
}

impl DeviceApi for HostDevice {
    fn describe(&self) -> DeviceInfo {
        let s = self.mem.region.stats();
        DeviceInfo {
            name: "host".into(),
            kind: "host",
            memory_bytes: s.size,
            free_bytes: s.free,
            aic_cores: 0,
            aiv_cores: 0,
            clock_hz: 0.0,
        }
    }
    memory_methods!(mem);
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

/// The simulated accelerator: GM plus AIC and AIV cores, configured by a
/// [`DeviceConfig`]. Cores' local memories are created on first use.
#[derive(Debug)]
pub struct SimDevice {
    inner: Arc<SimInner>,
    /// Control and manager threads, started by the first launch.
    sched: OnceLock<Scheduler>,
}

/// What the device's threads share with it.
#[derive(Debug)]
pub(crate) struct SimInner {
    pub(crate) config: DeviceConfig,
    mem: Memory,
    aic: Vec<OnceLock<Mutex<CoreState>>>,
    aiv: Vec<OnceLock<Mutex<CoreState>>>,
}

impl SimInner {
    /// Core `index` of type `kind` (created on first use).
    pub(crate) fn core(&self, kind: CoreType, index: u32) -> Option<&Mutex<CoreState>> {
        let cores = match kind {
            CoreType::Aic => &self.aic,
            CoreType::Aiv => &self.aiv,
        };
        let slot = cores.get(index as usize)?;
        Some(slot.get_or_init(|| Mutex::new(CoreState::new(kind, index, &self.config))))
    }

    /// GM's bytes.
    pub(crate) fn gm(&self) -> &crate::mem::PagedMemory {
        self.mem.region.memory()
    }

    /// The span of a buffer this device allocated.
    pub(crate) fn span_of(&self, b: &DeviceBuffer) -> Result<Span> {
        self.mem.owned(b).map(MemChunk::span)
    }
}

impl SimDevice {
    /// A device for `config` (validated first).
    pub fn new(config: DeviceConfig) -> Result<SimDevice> {
        config.validate()?;
        let region = MemRegion::new("GM", config.gm_bytes);
        Ok(SimDevice {
            inner: Arc::new(SimInner {
                aic: (0..config.aic_cores).map(|_| OnceLock::new()).collect(),
                aiv: (0..config.aiv_cores).map(|_| OnceLock::new()).collect(),
                mem: Memory {
                    device: config.name.clone(),
                    region,
                },
                config,
            }),
            sched: OnceLock::new(),
        })
    }

    /// Allocates `bytes` of GM and lets `fill` write all of them: a
    /// copy-in that skips zero-filling first (see
    /// [`MemRegion::alloc_for_overwrite`]).
    pub fn allocate_filled<E: From<DeviceError>>(
        &self,
        bytes: u64,
        fill: impl FnOnce(&DeviceBuffer) -> std::result::Result<(), E>,
    ) -> std::result::Result<DeviceBuffer, E> {
        let buf = DeviceBuffer {
            chunk: self.inner.mem.region.alloc_for_overwrite(bytes)?,
        };
        fill(&buf)?;
        Ok(buf)
    }

    /// Allocates `bytes` of GM for a launch that writes all of them (a
    /// kernel's output): no zero-fill, so it holds whatever the region held
    /// before. Debug builds fill it with 0xFF bytes instead (NaN for
    /// floats, -1 for ints), so a kernel that misses an element shows up
    /// in tests rather than reading as a plausible stale value.
    pub fn allocate_for_overwrite(&self, bytes: u64) -> Result<DeviceBuffer> {
        let chunk = self.inner.mem.region.alloc_for_overwrite(bytes)?;
        if cfg!(debug_assertions) {
            // In pieces: a big buffer must not need as much host memory.
            let piece = vec![0xFFu8; 1 << 20];
            let mut at = 0u64;
            while at < bytes {
                let n = (bytes - at).min(piece.len() as u64) as usize;
                chunk.write_elems(at, &piece[..n])?;
                at += n as u64;
            }
        }
        Ok(DeviceBuffer { chunk })
    }

    /// Copies typed host elements into `dst` at byte `offset`: the bulk
    /// form of [`DeviceApi::copy_from_host`], packing elements straight
    /// into GM words, with big copies split over the rayon pool.
    pub fn copy_elems_from_host<T: GmElem>(
        &self,
        src: &[T],
        dst: &DeviceBuffer,
        offset: u64,
    ) -> Result<()> {
        self.inner.mem.owned(dst)?.write_elems(offset, src)
    }

    /// Copies typed elements of `src` at byte `offset` to the host: the
    /// bulk form of [`DeviceApi::copy_to_host`].
    pub fn copy_elems_to_host<T: GmElem>(
        &self,
        src: &DeviceBuffer,
        offset: u64,
        dst: &mut [T],
    ) -> Result<()> {
        self.inner.mem.owned(src)?.read_elems(offset, dst)
    }

    /// Submits a launch to the device's stream and returns at once; the
    /// control thread runs launches in submission order. Wait on the
    /// returned handle for the report.
    pub fn launch(&self, launch: Launch, options: LaunchOptions) -> LaunchHandle {
        self.sched
            .get_or_init(|| Scheduler::start(self.inner.clone()))
            .submit(launch, options)
    }

    /// Waits for every launch submitted so far.
    pub fn synchronize_launches(&self) -> Result<()> {
        match self.sched.get() {
            Some(s) => s.synchronize(),
            None => Ok(()),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.inner.config
    }

    /// GM allocator occupancy.
    pub fn memory_stats(&self) -> RegionStats {
        self.inner.mem.region.stats()
    }

    /// Every live GM chunk, by offset, with its owner's label if it gave
    /// one (XRT's getAllMemChunk).
    pub fn memory_chunks(&self) -> Vec<ChunkInfo> {
        self.inner.mem.region.chunks()
    }

    /// Verifies a program against this device's memories.
    pub fn verify(&self, program: Program) -> Result<VerifiedProgram> {
        verify(program, &self.inner.config)
    }

    /// Runs `prog` on core `index` of its core type with `buffers` as its GM
    /// arguments (in declaration order) and `scalars` as its scalar
    /// arguments. The buffers are borrowed for the whole run, so none can be
    /// freed under it.
    pub fn run(
        &self,
        prog: &VerifiedProgram,
        index: u32,
        buffers: &[&DeviceBuffer],
        scalars: &[i64],
    ) -> Result<CoreRun> {
        let kind = prog.program().core;
        let count = match kind {
            CoreType::Aic => self.inner.aic.len(),
            CoreType::Aiv => self.inner.aiv.len(),
        };
        let core = self
            .inner
            .core(kind, index)
            .ok_or_else(|| DeviceError::BadArguments {
                program: prog.program().name.clone(),
                msg: format!(
                    "core {}_{index} does not exist ({count} of them)",
                    kind.name().to_uppercase(),
                ),
            })?;
        let spans = buffers
            .iter()
            .map(|b| self.inner.span_of(b))
            .collect::<Result<Vec<_>>>()?;
        // A fault leaves the core's memories as they were: still usable.
        let mut core = core.lock().unwrap_or_else(|p| p.into_inner());
        run_core(
            prog,
            &mut core,
            self.inner.mem.region.memory(),
            TaskArgs {
                gm: &spans,
                scalars,
                stop: None,
            },
            &self.inner.config,
        )
    }
}

impl DeviceApi for SimDevice {
    fn describe(&self) -> DeviceInfo {
        let s = self.inner.mem.region.stats();
        DeviceInfo {
            name: self.inner.config.name.clone(),
            kind: "sim",
            memory_bytes: s.size,
            free_bytes: s.free,
            aic_cores: self.inner.config.aic_cores,
            aiv_cores: self.inner.config.aiv_cores,
            clock_hz: self.inner.config.clock_hz,
        }
    }
    memory_methods!(inner.mem);
    fn synchronize(&self) -> Result<()> {
        // Copies complete before they return; launches are asynchronous.
        self.synchronize_launches()
    }
}
