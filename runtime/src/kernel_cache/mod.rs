//! The global kernel cache: compiled kernels keyed by everything their code
//! depends on, so every jit function and every eager op that produces the
//! same kernel shares one compile.
//!
//! One map, LRU and set of counters serve both targets; what differs
//! between them (the identity a key hashes, how to compile, what `details`
//! shows) is a [`Backend`]: [`host`] (Cranelift code, keyed by the kernel's
//! structure, codegen options and CPU features) and [`sim`] (device
//! bytecode, keyed by the whole kernel text and the device config). The
//! map's key is the identity's [`key::ContentKey`] (SHA-256, stable across
//! processes and builds of the same sources); a hit also compares the
//! identity whole, belt and braces. Entries are `Arc`s: a program that holds a kernel keeps it working
//! after the cache evicts or clears it.
//!
//! Below the map lies the on-disk cache ([`disk`]): a miss looks there
//! before compiling and writes what it compiled, so later processes skip
//! the compile: host entries as relinkable machine code, Sim entries as
//! bytecode verified again on load. A snapshot loaded with the `unsafe`
//! `snapshot::load_code` (only that: the safe load compiles its graphs)
//! hands a miss its stored code (`StoredCode`), tried before the disk and
//! used only under the key it was made under; such a load is counted in
//! `snapshot_loads`, not as a compile. Host machine code from either
//! source is linked in one place, `host::link_vouched`, for a [`Vouched`]
//! payload, which only `load_from_disk` and `load_from_snapshot` make.
//!
//! Single flight (`flight.rs`): threads that miss the same kernel while it
//! compiles wait for that compile and share its result, error included.
//! The lock is never held while compiling.

pub(crate) mod disk;
mod host;
pub mod key;
mod sim;
mod table;
#[cfg(test)]
mod tests;

use crate::error::RuntimeError;
use crate::flight::{catching, Flights, Join};
use disk::{DiskCache, Miss};
use key::{ContentKey, KeyParts};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tilejit_codegen::device::DeviceKernel;
use tilejit_codegen::host::KernelCode;
use tilejit_device::Target;

pub(crate) use host::HostBackend;
pub(crate) use sim::SimBackend;

/// Compiled code as programs hold it, with its use counters.
#[derive(Debug)]
pub struct Cached<C> {
    /// The code.
    pub code: C,
    /// Times it ran (the range calls or tasks of one launch count once).
    pub launches: AtomicU64,
    /// Lookups that found it.
    pub hits: AtomicU64,
    /// The cache key, as hex.
    pub key: String,
}

/// A kernel compiled to native code.
pub type CachedKernel = Cached<KernelCode>;

/// A kernel compiled for the simulated device: its core functions.
pub type CachedSimKernel = Cached<Vec<DeviceKernel>>;

/// What differs between the cache's targets.
pub(crate) trait Backend: Sized + 'static {
    /// Everything the code depends on; equal identities may share code.
    type Identity: Clone + PartialEq + Send;
    /// The compiled code.
    type Code: Send + Sync;
    /// The target its entries report.
    const TARGET: Target;
    /// The identity as named key components (the target's and the
    /// build's included).
    fn key_parts(identity: &Self::Identity) -> key::KeyParts;
    /// Bytes of code (machine code or bytecode), for the byte bound.
    fn code_bytes(code: &Self::Code) -> usize;
    /// This target's part of the cache.
    fn part(inner: &mut Inner) -> &mut Part<Self>;
    /// The code as a disk cache payload; `None` keeps it in memory only.
    fn encode(_code: &Self::Code) -> Option<Vec<u8>> {
        None
    }
}

/// Makes code from a disk cache payload stored under a key (which names
/// its `TILEJIT_DUMP` files); an `Err` says why the payload is unusable.
pub(crate) type Loader<'a, C> = &'a dyn Fn(Vouched<'_>, ContentKey) -> Result<Compiled<C>, String>;

/// A payload someone vouches for: read from this user's checked disk
/// cache directory, or a snapshot's code loaded through the `unsafe`
/// `snapshot::load_code`. Only this module and its children can make one
/// (the field is private), in `load_from_disk` and `load_from_snapshot`,
/// so host machine code reaches `host::link_vouched` from nowhere else.
#[derive(Clone, Copy)]
pub(crate) struct Vouched<'a>(&'a [u8]);

/// Code a snapshot stored for a kernel, with the key it was made under.
#[derive(Clone, Copy)]
pub(crate) struct StoredCode<'a> {
    /// The key, as hex ([`Cached::key`]).
    pub(crate) key: &'a str,
    /// The backend's payload (as the disk cache stores it).
    pub(crate) bytes: &'a [u8],
}

impl<'a> StoredCode<'a> {
    /// The payload, if it was made under `key` (the kernel, options, CPU
    /// features, device config and build all as here); else `None`, logged
    /// under `TILEJIT_LOG=cache`, and the kernel is compiled.
    fn bytes_for(
        self,
        key: &ContentKey,
        kernel: &tilejit_ir::kernel::Kernel,
        target: Target,
    ) -> Option<&'a [u8]> {
        if self.key == key.hex() {
            return Some(self.bytes);
        }
        if crate::config::config().log.cache {
            eprintln!(
                "[tilejit] snapshot code for {} on {target} was made under key {} but here it is {}; recompiling",
                kernel.name,
                self.key.get(..16).unwrap_or(self.key),
                key.short()
            );
        }
        None
    }
}

/// What a backend's compile returns besides the code.
pub(crate) struct Compiled<C> {
    pub(crate) code: C,
    /// Domain and buffer types of the kernel compiled.
    pub(crate) signature: String,
    /// Makes the texts `details` shows (on demand, outside the lock).
    pub(crate) details: DetailsFn,
}

/// Makes an entry's [`KernelDetails`].
pub(crate) type DetailsFn = Arc<dyn Fn() -> KernelDetails + Send + Sync>;

/// The entry of `part` whose key shares the most components with
/// `digests`: its key, its kernel's name and the components that differ.
fn nearest<B: Backend>(
    part: &Part<B>,
    digests: &[(&'static str, [u8; 8])],
) -> Option<(ContentKey, String, Vec<&'static str>)> {
    part.entries
        .iter()
        .map(|(k, e)| (*k, e.name.clone(), key::differing(digests, &e.digests)))
        .min_by_key(|(k, _, diff)| (diff.len(), *k))
}

/// `TILEJIT_LOG=cache`: a line for a miss naming the nearest entry and the
/// key components that differ from it.
fn explain_miss<B: Backend>(
    part: &Part<B>,
    kernel: &tilejit_ir::kernel::Kernel,
    key: &ContentKey,
    digests: &[(&'static str, [u8; 8])],
    target: Target,
) {
    let why = match nearest(part, digests) {
        None => "no entry for this target yet".to_string(),
        Some((k, name, diff)) => format!(
            "nearest entry {} (`{name}`) differs in {}",
            k.short(),
            diff.join(", ")
        ),
    };
    eprintln!(
        "[tilejit] kernel cache miss: {} for {target} ({}): {why}",
        kernel.name,
        key.short()
    );
}

/// One entry.
struct Entry<B: Backend> {
    identity: B::Identity,
    /// Each key component's digest, to explain misses.
    digests: Vec<(&'static str, [u8; 8])>,
    code: Arc<Cached<B::Code>>,
    name: String,
    program: String,
    signature: String,
    ops: Vec<&'static str>,
    compile_time: Duration,
    details: DetailsFn,
    last_used: Instant,
}

/// What a leader needs besides the compile: the key and how to load it.
struct Made<'a, C> {
    parts: &'a KeyParts,
    key: ContentKey,
    digests: Vec<(&'static str, [u8; 8])>,
    /// `None`: this backend's entries stay in memory.
    load: Option<Loader<'a, C>>,
    /// Code a snapshot holds for this key, tried first (with `load`).
    snapshot: Option<&'a [u8]>,
}

/// What a lookup of a `B` kernel returns.
type Lookup<B> = Result<Arc<Cached<<B as Backend>::Code>>, RuntimeError>;

/// One target's entries and compiles in flight.
pub(crate) struct Part<B: Backend> {
    entries: HashMap<ContentKey, Entry<B>>,
    flights: Flights<ContentKey, B::Identity, Lookup<B>>,
}

impl<B: Backend> Default for Part<B> {
    fn default() -> Self {
        Part {
            entries: HashMap::new(),
            flights: Flights::default(),
        }
    }
}

impl<B: Backend> Part<B> {
    /// The least recently used entry's key and time.
    fn oldest(&self) -> Option<(ContentKey, Instant)> {
        let (k, e) = self.entries.iter().min_by_key(|(_, e)| e.last_used)?;
        Some((*k, e.last_used))
    }

    /// Removes an entry, returning its code bytes.
    fn remove(&mut self, key: ContentKey) -> Option<usize> {
        self.entries
            .remove(&key)
            .map(|e| B::code_bytes(&e.code.code))
    }

    fn report(&self) -> impl Iterator<Item = KernelEntry> + '_ {
        self.entries.values().map(|e| KernelEntry {
            name: e.name.clone(),
            key: e.code.key.clone(),
            target: B::TARGET,
            program: e.program.clone(),
            signature: e.signature.clone(),
            ops: e.ops.clone(),
            compile_time: e.compile_time,
            code_bytes: B::code_bytes(&e.code.code),
            hits: e.code.hits.load(Ordering::Relaxed),
            launches: e.code.launches.load(Ordering::Relaxed),
            last_used: e.last_used,
        })
    }
}

/// Counters of the whole cache.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelCacheStats {
    /// Lookups that found a compiled kernel.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Kernels compiled.
    pub compiles: u64,
    /// Entries dropped to respect the capacity.
    pub evictions: u64,
    /// Code bytes held now (host machine code and device bytecode).
    pub bytes: usize,
    /// Total time spent compiling.
    pub compile_time: Duration,
    /// Misses the disk cache served.
    pub disk_hits: u64,
    /// Misses the disk cache could not serve (rejected files included).
    pub disk_misses: u64,
    /// Entries written to the disk cache.
    pub disk_writes: u64,
    /// Disk cache files found unusable (truncated, corrupt, another
    /// format or key); each was recompiled and replaced.
    pub disk_rejected: u64,
    /// Kernels linked from a snapshot's code (`JitFunction::load`): not
    /// compiles, and not disk hits.
    pub snapshot_loads: u64,
}

/// One cache entry, as `entries()` reports it.
#[derive(Clone, Debug)]
pub struct KernelEntry {
    /// Readable name (`fused_mul_add_relu`).
    pub name: String,
    /// The cache key, as hex.
    pub key: String,
    /// Where the code runs.
    pub target: Target,
    /// The program whose compile made it: a jit function and signature
    /// (`mlp(f32[8,64])`), or `eager` for an op outside any jit function.
    pub program: String,
    /// The domain and buffer types of the kernel that was compiled first.
    pub signature: String,
    /// The graph ops fused into it.
    pub ops: Vec<&'static str>,
    /// Time to compile.
    pub compile_time: Duration,
    /// Size of the code (machine code, or bytecode).
    pub code_bytes: usize,
    /// Lookups that found it.
    pub hits: u64,
    /// Times it ran.
    pub launches: u64,
    /// When it was last looked up.
    pub last_used: Instant,
}

/// What an entry shows on demand.
#[derive(Clone, Debug)]
pub struct KernelDetails {
    /// The kernel IR text of the kernel first compiled under this key.
    pub kernel_ir: String,
    /// The Cranelift IR (empty for a sim entry).
    pub clif: String,
    /// Cranelift's machine-code listing, or the bytecode's disassembly.
    pub disasm: String,
}

pub(crate) struct Inner {
    host: Part<HostBackend>,
    sim: Part<SimBackend>,
    stats: KernelCacheStats,
    max_entries: usize,
    max_bytes: usize,
}

/// The cache. Get the global one with [`kernel_cache`].
///
/// ```
/// use tilejit_runtime::{kernel_cache, HostProgram};
/// let g = tilejit_ir::text::parse(
///     "graph {\n  %0 = input 0 : f32[64]\n  %1 = exp %0 : f32[64]\n  return %1\n}",
/// )?;
/// let program = HostProgram::compile(&g)?;      // compiles through the cache
/// let cache = kernel_cache();
/// let entry = cache.entries().into_iter().find(|e| e.ops == ["exp"]).expect("cached");
/// assert_eq!((entry.program.as_str(), entry.key.as_str()), ("eager", program.code()[0].key.as_str()));
/// let details = cache.details(&entry.key).expect("held");
/// assert!(details.kernel_ir.contains("exp") && !details.disasm.is_empty());
/// println!("{cache}");                            // a table of every entry
/// # Ok::<(), tilejit_runtime::RuntimeError>(())
/// ```
pub struct KernelCache {
    inner: Mutex<Inner>,
    /// The on-disk cache below the map (`TILEJIT_CACHE_DIR`), if on.
    disk: Option<DiskCache>,
}

/// The process-wide kernel cache, over the disk cache `TILEJIT_CACHE_DIR`
/// names (by default in the user's cache directory).
pub fn kernel_cache() -> &'static KernelCache {
    static C: OnceLock<KernelCache> = OnceLock::new();
    C.get_or_init(|| KernelCache::with_disk(DiskCache::from_config()))
}

impl KernelCache {
    /// A cache without a disk below it.
    #[cfg_attr(not(test), allow(dead_code))]
    fn new() -> KernelCache {
        KernelCache::with_disk(None)
    }

    fn with_disk(disk: Option<DiskCache>) -> KernelCache {
        KernelCache {
            disk,
            inner: Mutex::new(Inner {
                host: Part::default(),
                sim: Part::default(),
                stats: KernelCacheStats::default(),
                max_entries: 4096,
                max_bytes: 256 << 20,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map inconsistent
        // (every update is a single insert/remove), so recover the guard.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The entry for `identity`, compiling it on a miss with `compile`.
    /// Threads that miss the same identity while it compiles wait for that
    /// compile and share its result (one compile, counted once).
    fn get<B: Backend>(
        &self,
        kernel: &tilejit_ir::kernel::Kernel,
        program: &str,
        identity: B::Identity,
        load: Option<Loader<'_, B::Code>>,
        snapshot: Option<StoredCode<'_>>,
        compile: impl FnOnce(&B::Identity, ContentKey) -> Result<Compiled<B::Code>, RuntimeError>,
    ) -> Result<Arc<Cached<B::Code>>, RuntimeError> {
        let parts = B::key_parts(&identity);
        let key = parts.key();
        let mut g = self.lock();
        let part = B::part(&mut g);
        if let Some(e) = part
            .entries
            .get_mut(&key)
            .filter(|e| e.identity == identity)
        {
            e.last_used = Instant::now();
            e.code.hits.fetch_add(1, Ordering::Relaxed);
            let code = e.code.clone();
            g.stats.hits += 1;
            return Ok(code);
        }
        g.stats.misses += 1;
        let digests = parts.digests();
        if crate::config::config().log.cache {
            explain_miss(B::part(&mut g), kernel, &key, &digests, B::TARGET);
        }
        let lead = match B::part(&mut g).flights.join(&key, &identity) {
            Join::Wait(flight) => {
                drop(g);
                return flight.wait();
            }
            Join::Lead(flight) => flight,
        };
        drop(g);
        // Checked by the leader only: a hit or a waiter never uses it.
        let snapshot = snapshot.and_then(|s| s.bytes_for(&key, kernel, B::TARGET));
        let what = || format!("compiling kernel {} for {}", kernel.name, B::TARGET);
        let result = catching(what, || {
            let made = Made {
                parts: &parts,
                key,
                digests,
                load,
                snapshot,
            };
            self.compile::<B>(kernel, program, identity.clone(), made, compile)
        });
        B::part(&mut self.lock()).flights.land(&key, lead, result)
    }

    /// The disk cache's entry for `made`, if it has a usable one; counts
    /// the lookup. A rejected file is logged under `TILEJIT_LOG=cache`.
    fn load_from_disk<C>(
        &self,
        kernel: &tilejit_ir::kernel::Kernel,
        target: Target,
        made: &Made<'_, C>,
    ) -> Option<Compiled<C>> {
        let (disk, load) = (self.disk.as_ref()?, made.load?);
        let got = disk
            .load(&made.key, made.parts)
            .and_then(|bytes| load(Vouched(&bytes), made.key).map_err(Miss::Rejected));
        let mut g = self.lock();
        match got {
            Ok(c) => {
                g.stats.disk_hits += 1;
                Some(c)
            }
            Err(miss) => {
                g.stats.disk_misses += 1;
                if matches!(miss, Miss::Rejected(_)) {
                    g.stats.disk_rejected += 1;
                    if crate::config::config().log.cache {
                        eprintln!(
                            "[tilejit] disk cache entry for {} on {target} ({}) rejected: {miss}; recompiling",
                            kernel.name,
                            made.key.short()
                        );
                    }
                }
                None
            }
        }
    }

    /// The code a snapshot holds for `made`, if it loads; a payload that
    /// does not is logged under `TILEJIT_LOG=cache` (the kernel is then
    /// looked up on disk or compiled, as without a snapshot).
    fn load_from_snapshot<C>(
        &self,
        kernel: &tilejit_ir::kernel::Kernel,
        target: Target,
        made: &Made<'_, C>,
    ) -> Option<Compiled<C>> {
        let (bytes, load) = (made.snapshot?, made.load?);
        match load(Vouched(bytes), made.key) {
            Ok(c) => {
                self.lock().stats.snapshot_loads += 1;
                Some(c)
            }
            Err(why) => {
                if crate::config::config().log.cache {
                    eprintln!(
                        "[tilejit] snapshot code for {} on {target} ({}) rejected: {why}; recompiling",
                        kernel.name,
                        made.key.short()
                    );
                }
                None
            }
        }
    }

    /// Loads from a snapshot or disk, or compiles one kernel, and enters
    /// it under `key` (unless a colliding compile entered the same identity
    /// first: then that code). A compile is written to the disk cache.
    fn compile<B: Backend>(
        &self,
        kernel: &tilejit_ir::kernel::Kernel,
        program: &str,
        identity: B::Identity,
        made: Made<'_, B::Code>,
        compile: impl FnOnce(&B::Identity, ContentKey) -> Result<Compiled<B::Code>, RuntimeError>,
    ) -> Result<Arc<Cached<B::Code>>, RuntimeError> {
        let key = made.key;
        let start = Instant::now();
        let (loaded, from) = match self.load_from_snapshot(kernel, B::TARGET, &made) {
            Some(c) => (Some(c), "loaded from a snapshot"),
            None => (
                self.load_from_disk(kernel, B::TARGET, &made),
                "loaded from disk",
            ),
        };
        let from_disk = loaded.is_some();
        let compiled = match loaded {
            Some(c) => c,
            None => compile(&identity, key)?,
        };
        let compile_time = start.elapsed();
        let bytes = B::code_bytes(&compiled.code);
        if crate::config::config().log.compile {
            eprintln!(
                "[tilejit] {} {} for {} ({}) in {:.3} ms, {bytes} bytes",
                if from_disk { from } else { "compiled" },
                kernel.name,
                B::TARGET,
                key.short(),
                compile_time.as_secs_f64() * 1e3,
            );
        }
        if let (false, Some(disk), Some(_)) = (from_disk, &self.disk, made.load) {
            // Written outside the lock; a failure only costs caching.
            if let Some(payload) = B::encode(&compiled.code) {
                if disk.store(&key, made.parts, &payload) {
                    self.lock().stats.disk_writes += 1;
                }
            }
        }
        let cached = Arc::new(Cached {
            code: compiled.code,
            launches: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            key: key.hex(),
        });
        let mut g = self.lock();
        if !from_disk {
            g.stats.compiles += 1;
            g.stats.compile_time += compile_time;
        }
        let part = B::part(&mut g);
        if let Some(e) = part.entries.get(&key).filter(|e| e.identity == identity) {
            return Ok(e.code.clone());
        }
        let entry = Entry {
            identity,
            digests: made.digests,
            code: cached.clone(),
            name: kernel.name.clone(),
            program: program.to_string(),
            signature: compiled.signature,
            ops: kernel.ops.clone(),
            compile_time,
            details: compiled.details,
            last_used: Instant::now(),
        };
        // A colliding entry that made way takes its code's bytes along.
        let replaced = part
            .entries
            .insert(key, entry)
            .map_or(0, |old| B::code_bytes(&old.code.code));
        g.stats.bytes = g.stats.bytes + bytes - replaced;
        evict(&mut g);
        Ok(cached)
    }

    /// Number of entries (host and sim).
    pub fn len(&self) -> usize {
        let g = self.lock();
        g.host.entries.len() + g.sim.entries.len()
    }

    /// True if there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The counters.
    pub fn stats(&self) -> KernelCacheStats {
        self.lock().stats.clone()
    }

    /// Every entry, most recently used first.
    pub fn entries(&self) -> Vec<KernelEntry> {
        let g = self.lock();
        let mut v: Vec<KernelEntry> = g.host.report().chain(g.sim.report()).collect();
        v.sort_by(|a, b| b.last_used.cmp(&a.last_used).then(a.name.cmp(&b.name)));
        v
    }

    /// Kernel IR, Cranelift IR and disassembly of the entry with this key;
    /// for a sim entry, the bytecode's disassembly of every core function
    /// (and no Cranelift IR).
    pub fn details(&self, key: &str) -> Option<KernelDetails> {
        let g = self.lock();
        let host = g.host.entries.values().find(|e| e.code.key == key);
        let details = match host {
            Some(e) => e.details.clone(),
            None => g
                .sim
                .entries
                .values()
                .find(|e| e.code.key == key)?
                .details
                .clone(),
        };
        // Host listings compile again: outside the lock.
        drop(g);
        Some(details())
    }

    /// Drops every entry (programs keep the kernels they hold).
    pub fn clear(&self) {
        let mut g = self.lock();
        g.host.entries.clear();
        g.sim.entries.clear();
        g.stats.bytes = 0;
    }

    /// Bounds the cache: at most `entries` entries, host and sim together,
    /// and `bytes` bytes of code; evicts
    /// least-recently-used entries at once if over.
    pub fn set_capacity(&self, entries: usize, bytes: usize) {
        let mut g = self.lock();
        g.max_entries = entries;
        g.max_bytes = bytes;
        evict(&mut g);
    }
}

/// Drops least-recently-used entries, of either target, until both bounds
/// hold.
fn evict(g: &mut Inner) {
    loop {
        let len = g.host.entries.len() + g.sim.entries.len();
        let over = len > g.max_entries || (g.stats.bytes > g.max_bytes && len > 0);
        if !over {
            break;
        }
        let freed = match (g.host.oldest(), g.sim.oldest()) {
            (Some((key, h)), Some((_, s))) if h <= s => g.host.remove(key),
            (_, Some((key, _))) => g.sim.remove(key),
            (Some((key, _)), None) => g.host.remove(key),
            (None, None) => break,
        };
        g.stats.bytes -= freed.unwrap_or(0);
        g.stats.evictions += 1;
    }
}
