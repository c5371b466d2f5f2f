//! The global kernel cache: compiled kernels keyed by their structure
//! (canonical kernel IR text), target, codegen options and CPU features, so
//! every jit function and every eager op that produces the same kernel
//! shares one compile. The map's key is a 64-bit hash of those; a hit also
//! compares them whole, so a hash collision is a miss, never another
//! kernel's code. Entries are `Arc`s: a program that holds a kernel
//! keeps it working after the cache evicts or clears it.
//!
//! Bounded by entries and code bytes, evicting least-recently-used entries
//! (counted in `stats().evictions`). Inspectable: `entries()`, `Display` (a
//! table), and per entry the kernel IR, Cranelift IR and disassembly.
//! Kernels compiled for the simulated device are entries too (target
//! `sim`), showing their bytecode's disassembly.
//!
//! Single flight (`flight.rs`): threads that miss the same kernel while it
//! compiles wait for that compile and share its result, error included,
//! so N jit functions or eager calls that need one new kernel at once
//! compile it once. The lock is never held while compiling.

use crate::error::RuntimeError;
use crate::flight::{catching, Flights, Join};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tilejit_codegen::device::DeviceKernel;
use tilejit_codegen::host::{
    compile, cpu_features, listing, CodegenOptions, CpuFeatures, KernelCode,
};
use tilejit_device::{DeviceConfig, Target};
use tilejit_ir::kernel::{BufId, Kernel};
use tilejit_ir::DType;

/// A compiled kernel as programs hold it.
#[derive(Debug)]
pub struct CachedKernel {
    /// The native code.
    pub code: KernelCode,
    /// Times it ran (range calls of one launch count once).
    pub launches: AtomicU64,
    /// Lookups that found it.
    pub hits: AtomicU64,
    /// The cache key, as hex.
    pub key: String,
}

/// Everything a host entry's code depends on. The map is keyed by a 64-bit
/// hash of it; a hit also compares this, so two kernels whose hashes
/// collide can never share code (the later compile replaces the earlier
/// entry instead).
#[derive(Clone, PartialEq, Eq)]
struct HostIdentity {
    structure: String,
    opts: CodegenOptions,
    cpu: CpuFeatures,
}

/// The same for a sim entry: device code bakes sizes in, so the whole
/// kernel text, the buffers' dtypes and the device config.
#[derive(Clone, PartialEq, Eq)]
struct SimIdentity {
    text: String,
    dtypes: Vec<DType>,
    config: String,
}

/// The 64-bit cache key of an identity's parts. `DefaultHasher::new()` has
/// fixed keys, so keys are stable across processes (logs and dumps name
/// kernels by them).
fn key_of(parts: impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

impl HostIdentity {
    /// `k`'s identity under `opts` as they apply to it (its size class:
    /// [`CodegenOptions::for_kernel`]), so the key tells a streaming compile
    /// from an ordinary one.
    fn new(k: &Kernel, dtype_of: &dyn Fn(BufId) -> DType, opts: CodegenOptions) -> Self {
        HostIdentity {
            structure: k.structure_text(dtype_of),
            opts: opts.for_kernel(k),
            cpu: cpu_features(),
        }
    }

    /// The map key: a hash of the identity and the target.
    fn key(&self) -> u64 {
        key_of((&self.structure, Target::Host, self.opts, self.cpu))
    }
}

impl SimIdentity {
    /// The map key: a hash of the identity and the target.
    fn key(&self) -> u64 {
        key_of((&self.text, &self.dtypes, Target::Sim, &self.config))
    }
}

struct Entry {
    identity: HostIdentity,
    kernel: Arc<CachedKernel>,
    name: String,
    signature: String,
    ops: Vec<&'static str>,
    compile_time: Duration,
    /// What was compiled, for `details` (its texts are made on demand:
    /// printing them on every compile would cost a sixth of the compile).
    source: Arc<Source>,
    last_used: Instant,
}

/// A compiled kernel's input: the kernel and its buffers' dtypes.
struct Source {
    kernel: Kernel,
    dtypes: Vec<(BufId, DType)>,
    opts: CodegenOptions,
}

impl Source {
    fn new(k: &Kernel, dtype_of: &dyn Fn(BufId) -> DType, opts: CodegenOptions) -> Source {
        Source {
            kernel: k.clone(),
            dtypes: k
                .local_buffers()
                .into_iter()
                .map(|b| (b, dtype_of(b)))
                .collect(),
            opts,
        }
    }

    fn dtype_of(&self, b: BufId) -> DType {
        self.dtypes
            .iter()
            .find(|(id, _)| *id == b)
            .map_or(DType::F32, |(_, d)| *d)
    }

    /// Kernel IR, Cranelift IR and machine-code listing (compiled again).
    fn details(&self) -> KernelDetails {
        let (clif, disasm) = match listing(&self.kernel, &|b| self.dtype_of(b), self.opts) {
            Ok(l) => (l.clif, l.disasm),
            Err(e) => (format!("; listing failed: {e}"), String::new()),
        };
        KernelDetails {
            kernel_ir: self.kernel.text(),
            clif,
            disasm,
        }
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
    /// Machine-code bytes held now.
    pub bytes: usize,
    /// Total time spent compiling.
    pub compile_time: Duration,
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
    /// The domain and buffer types of the kernel that was compiled first.
    pub signature: String,
    /// The graph ops fused into it.
    pub ops: Vec<&'static str>,
    /// Time to compile.
    pub compile_time: Duration,
    /// Size of the machine code.
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
    /// The Cranelift IR.
    pub clif: String,
    /// Cranelift's machine-code listing.
    pub disasm: String,
}

/// A kernel compiled for the simulated device (its core functions).
struct SimEntry {
    identity: SimIdentity,
    kernels: Arc<Vec<DeviceKernel>>,
    key: String,
    name: String,
    signature: String,
    ops: Vec<&'static str>,
    compile_time: Duration,
    hits: u64,
    last_used: Instant,
}

/// Compiles in flight, each shared by every caller that misses its
/// identity while it runs.
type Compiles<I, T> = Flights<u64, I, Result<T, RuntimeError>>;

struct Inner {
    map: HashMap<u64, Entry>,
    sim: HashMap<u64, SimEntry>,
    host_flights: Compiles<HostIdentity, Arc<CachedKernel>>,
    sim_flights: Compiles<SimIdentity, Arc<Vec<DeviceKernel>>>,
    stats: KernelCacheStats,
    max_entries: usize,
    max_bytes: usize,
}

/// The cache. Get the global one with [`kernel_cache`].
pub struct KernelCache {
    inner: Mutex<Inner>,
}

/// The process-wide kernel cache.
pub fn kernel_cache() -> &'static KernelCache {
    static C: OnceLock<KernelCache> = OnceLock::new();
    C.get_or_init(KernelCache::new)
}

impl KernelCache {
    fn new() -> KernelCache {
        KernelCache {
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                sim: HashMap::new(),
                host_flights: Flights::default(),
                sim_flights: Flights::default(),
                stats: KernelCacheStats::default(),
                max_entries: 4096,
                max_bytes: 256 << 20,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map inconsistent
        // (every update is a single insert/remove), so recover the guard.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The compiled kernel for `k` under `opts`, compiling it on a miss.
    /// Threads that miss the same kernel while it compiles wait for that
    /// compile and share its result (one compile, counted once).
    pub fn get_or_compile(
        &self,
        k: &Kernel,
        dtype_of: &dyn Fn(BufId) -> DType,
        opts: CodegenOptions,
    ) -> Result<Arc<CachedKernel>, RuntimeError> {
        let identity = HostIdentity::new(k, dtype_of, opts);
        let key = identity.key();
        let mut g = self.lock();
        if let Some(e) = g.map.get_mut(&key).filter(|e| e.identity == identity) {
            e.last_used = Instant::now();
            e.kernel.hits.fetch_add(1, Ordering::Relaxed);
            let k = e.kernel.clone();
            g.stats.hits += 1;
            return Ok(k);
        }
        g.stats.misses += 1;
        self.compile_shared(
            g,
            |g| &mut g.host_flights,
            (key, identity),
            || format!("compiling kernel {}", k.name),
            |identity| self.compile_host(k, dtype_of, identity, key),
        )
    }

    /// Compiles `k` and enters it under `key` (unless a colliding
    /// compile entered the same identity first: then that code).
    fn compile_host(
        &self,
        k: &Kernel,
        dtype_of: &dyn Fn(BufId) -> DType,
        identity: HostIdentity,
        key: u64,
    ) -> Result<Arc<CachedKernel>, RuntimeError> {
        let opts = identity.opts;
        let start = Instant::now();
        let code = compile(k, dtype_of, opts).map_err(RuntimeError::Codegen)?;
        let compile_time = start.elapsed();
        if tilejit_ir::config::config().log.compile {
            eprintln!(
                "[tilejit] compiled {} ({:016x}) in {:.3} ms, {} bytes",
                k.name,
                key,
                compile_time.as_secs_f64() * 1e3,
                code.code_bytes
            );
        }
        let source = Arc::new(Source::new(k, dtype_of, opts));
        if crate::dump::enabled() {
            let d = source.details();
            crate::dump::write(
                &crate::dump::kernel_stem(&k.name, &format!("{key:016x}")),
                &[
                    ("kernel", &d.kernel_ir),
                    ("clif", &d.clif),
                    ("disasm", &d.disasm),
                ],
            );
        }
        let cached = Arc::new(CachedKernel {
            code,
            launches: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            key: format!("{key:016x}"),
        });
        let mut g = self.lock();
        g.stats.compiles += 1;
        g.stats.compile_time += compile_time;
        if let Some(e) = g.map.get(&key).filter(|e| e.identity == identity) {
            return Ok(e.kernel.clone());
        }
        g.stats.bytes += cached.code.code_bytes;
        let signature = format!(
            "domain={:?} {}",
            k.domain,
            k.accesses()
                .map(|a| dtype_of(a.buf).to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let replaced = g.map.insert(
            key,
            Entry {
                identity,
                kernel: cached.clone(),
                name: k.name.clone(),
                signature,
                ops: k.ops.clone(),
                compile_time,
                source,
                last_used: Instant::now(),
            },
        );
        // A colliding entry that made way still counts its code's bytes.
        if let Some(old) = replaced {
            g.stats.bytes -= old.kernel.code.code_bytes;
        }
        evict(&mut g);
        Ok(cached)
    }

    /// The bytecode core functions of `k` for the simulated device,
    /// compiling on a miss. Device code bakes sizes and strides in, so the
    /// key is the kernel's whole text (plus target and device config).
    pub fn get_or_compile_sim(
        &self,
        k: &Kernel,
        dtype_of: &dyn Fn(BufId) -> DType,
        cfg: &DeviceConfig,
    ) -> Result<Arc<Vec<DeviceKernel>>, RuntimeError> {
        let identity = SimIdentity {
            text: k.text(),
            dtypes: k.local_buffers().into_iter().map(dtype_of).collect(),
            config: cfg.to_json(),
        };
        let key = identity.key();
        let mut g = self.lock();
        if let Some(e) = g.sim.get_mut(&key).filter(|e| e.identity == identity) {
            e.last_used = Instant::now();
            e.hits += 1;
            let k = e.kernels.clone();
            g.stats.hits += 1;
            return Ok(k);
        }
        g.stats.misses += 1;
        self.compile_shared(
            g,
            |g| &mut g.sim_flights,
            (key, identity),
            || format!("compiling kernel {} for sim", k.name),
            |identity| self.compile_sim(k, dtype_of, cfg, identity, key),
        )
    }

    /// After a counted miss (the lock still held in `g`): waits for the
    /// compile of the same identity in flight, or leads one, running
    /// `compile` outside the lock and handing its result to everyone who
    /// waited for it.
    fn compile_shared<I: Clone + PartialEq, T: Clone>(
        &self,
        mut g: std::sync::MutexGuard<'_, Inner>,
        flights: fn(&mut Inner) -> &mut Compiles<I, T>,
        (key, identity): (u64, I),
        what: impl FnOnce() -> String,
        compile: impl FnOnce(I) -> Result<T, RuntimeError>,
    ) -> Result<T, RuntimeError> {
        let lead = match flights(&mut g).join(&key, &identity) {
            Join::Wait(flight) => {
                drop(g);
                return flight.wait();
            }
            Join::Lead(flight) => flight,
        };
        drop(g);
        let result = catching(what, || compile(identity));
        flights(&mut self.lock()).land(&key, lead, result)
    }

    /// Compiles `k` for the device and enters it under `key` (as
    /// [`compile_host`](Self::compile_host)).
    fn compile_sim(
        &self,
        k: &Kernel,
        dtype_of: &dyn Fn(BufId) -> DType,
        cfg: &DeviceConfig,
        identity: SimIdentity,
        key: u64,
    ) -> Result<Arc<Vec<DeviceKernel>>, RuntimeError> {
        let start = Instant::now();
        let kernels = Arc::new(tilejit_codegen::device::compile(k, dtype_of, cfg)?);
        let compile_time = start.elapsed();
        let asm: Vec<&str> = kernels.iter().map(|d| d.asm.as_str()).collect();
        if crate::dump::enabled() {
            crate::dump::write(
                &crate::dump::kernel_stem(&k.name, &format!("{key:016x}")),
                &[("kernel", &identity.text), ("s", &asm.join("\n"))],
            );
        }
        if tilejit_ir::config::config().log.compile {
            eprintln!(
                "[tilejit] compiled {} for sim ({:016x}) in {:.3} ms, {} core function(s)",
                k.name,
                key,
                compile_time.as_secs_f64() * 1e3,
                kernels.len()
            );
        }
        let mut g = self.lock();
        g.stats.compiles += 1;
        g.stats.compile_time += compile_time;
        if let Some(e) = g.sim.get(&key).filter(|e| e.identity == identity) {
            return Ok(e.kernels.clone());
        }
        let signature = format!("domain={:?}", k.domain);
        g.sim.insert(
            key,
            SimEntry {
                identity,
                kernels: kernels.clone(),
                key: format!("{key:016x}"),
                name: k.name.clone(),
                signature,
                ops: k.ops.clone(),
                compile_time,
                hits: 0,
                last_used: Instant::now(),
            },
        );
        evict(&mut g);
        Ok(kernels)
    }

    /// Number of entries (host and sim).
    pub fn len(&self) -> usize {
        let g = self.lock();
        g.map.len() + g.sim.len()
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
        let mut v: Vec<KernelEntry> = g
            .map
            .values()
            .map(|e| KernelEntry {
                name: e.name.clone(),
                key: e.kernel.key.clone(),
                target: Target::Host,
                signature: e.signature.clone(),
                ops: e.ops.clone(),
                compile_time: e.compile_time,
                code_bytes: e.kernel.code.code_bytes,
                hits: e.kernel.hits.load(Ordering::Relaxed),
                launches: e.kernel.launches.load(Ordering::Relaxed),
                last_used: e.last_used,
            })
            .collect();
        v.extend(g.sim.values().map(|e| {
            KernelEntry {
                name: e.name.clone(),
                key: e.key.clone(),
                target: Target::Sim,
                signature: e.signature.clone(),
                ops: e.ops.clone(),
                compile_time: e.compile_time,
                code_bytes: e
                    .kernels
                    .iter()
                    .map(|k| k.program.program().code.len() * 16)
                    .sum(),
                hits: e.hits,
                launches: 0,
                last_used: e.last_used,
            }
        }));
        v.sort_by(|a, b| b.last_used.cmp(&a.last_used).then(a.name.cmp(&b.name)));
        v
    }

    /// Kernel IR, Cranelift IR and disassembly of the entry with this key;
    /// for a sim entry, the bytecode's disassembly of every core function
    /// (and no Cranelift IR).
    pub fn details(&self, key: &str) -> Option<KernelDetails> {
        let g = self.lock();
        let host = g
            .map
            .values()
            .find(|e| e.kernel.key == key)
            .map(|e| e.source.clone());
        if let Some(source) = host {
            // Compile the listing outside the lock.
            drop(g);
            return Some(source.details());
        }
        g.sim
            .values()
            .find(|e| e.key == key)
            .map(|e| KernelDetails {
                kernel_ir: e.identity.text.clone(),
                clif: String::new(),
                disasm: e
                    .kernels
                    .iter()
                    .map(|k| tilejit_device::isa::asm::disassemble(k.program.program()))
                    .collect::<Vec<_>>()
                    .join("\n"),
            })
    }

    /// Drops every entry (programs keep the kernels they hold).
    pub fn clear(&self) {
        let mut g = self.lock();
        g.map.clear();
        g.sim.clear();
        g.stats.bytes = 0;
    }

    /// Bounds the cache: at most `entries` entries, host and sim together,
    /// and `bytes` bytes of host machine code; evicts least-recently-used
    /// entries at once if over.
    pub fn set_capacity(&self, entries: usize, bytes: usize) {
        let mut g = self.lock();
        g.max_entries = entries;
        g.max_bytes = bytes;
        evict(&mut g);
    }
}

fn evict(g: &mut Inner) {
    // The entry bound counts host and sim entries together (as `len`
    // does); the byte bound counts host code, the only code with bytes.
    loop {
        let over_entries = g.map.len() + g.sim.len() > g.max_entries;
        let over_bytes = g.stats.bytes > g.max_bytes && !g.map.is_empty();
        if !over_entries && !over_bytes {
            break;
        }
        // The least recently used entry of either map; only host entries
        // when only the byte bound is exceeded.
        let host = g.map.iter().min_by_key(|(_, e)| e.last_used);
        let host = host.map(|(&k, e)| (k, e.last_used));
        let sim = g.sim.iter().min_by_key(|(_, e)| e.last_used);
        let sim = sim.filter(|_| over_entries).map(|(&k, e)| (k, e.last_used));
        match (host, sim) {
            (Some((key, h)), Some((_, s))) if h <= s => evict_host(g, key),
            (_, Some((key, _))) => {
                g.sim.remove(&key);
                g.stats.evictions += 1;
            }
            (Some((key, _)), None) => evict_host(g, key),
            (None, None) => break,
        }
    }
}

fn evict_host(g: &mut Inner, key: u64) {
    if let Some(e) = g.map.remove(&key) {
        g.stats.bytes -= e.kernel.code.code_bytes;
        g.stats.evictions += 1;
    }
}

impl fmt::Display for KernelCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries = self.entries();
        let s = self.stats();
        writeln!(
            f,
            "kernel cache: {} entries, {} code bytes; {} hits, {} misses, {} compiles ({:.2} ms), {} evictions",
            entries.len(),
            s.bytes,
            s.hits,
            s.misses,
            s.compiles,
            s.compile_time.as_secs_f64() * 1e3,
            s.evictions
        )?;
        writeln!(
            f,
            "  {:<44} {:<16} {:>6} {:>8} {:>6} {:>9} {:>10}",
            "name", "key", "target", "bytes", "hits", "launches", "compile"
        )?;
        for e in entries {
            writeln!(
                f,
                "  {:<44} {:<16} {:>6} {:>8} {:>6} {:>9} {:>8.3}ms",
                e.name,
                e.key,
                e.target.to_string(),
                e.code_bytes,
                e.hits,
                e.launches,
                e.compile_time.as_secs_f64() * 1e3
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests assert by unwrapping
mod tests {
    use super::*;

    fn kernel(graph: &str) -> (Kernel, Vec<DType>) {
        let g = tilejit_ir::text::parse(graph).unwrap();
        let prog = tilejit_ir::kernel::fuse(&g).unwrap();
        let dtypes = prog.buffers.iter().map(|b| b.ty.dtype).collect();
        (prog.kernels[0].clone(), dtypes)
    }

    /// Two kernels whose 64-bit keys collide never share code: an entry
    /// forged under one kernel's key with another kernel's identity is not
    /// a hit; the compile that follows replaces it, bytes and all.
    #[test]
    fn a_key_collision_is_a_miss_not_someone_elses_code() {
        let cache = KernelCache::new();
        let (a, a_dtypes) =
            kernel("graph {\n  %0 = input 0 : f32[4,9]\n  %1 = tanh %0 : f32[4,9]\n  return %1\n}");
        let (b, b_dtypes) =
            kernel("graph {\n  %0 = input 0 : f32[5]\n  %1 = exp %0 : f32[5]\n  return %1\n}");
        let a_dtype = |id: BufId| a_dtypes[id.0 as usize];
        let b_dtype = |id: BufId| b_dtypes[id.0 as usize];
        let opts = CodegenOptions::default();
        let b_code = cache.get_or_compile(&b, &b_dtype, opts).unwrap();
        // Move b's entry under the key a will look up.
        let a_key = HostIdentity::new(&a, &a_dtype, opts).key();
        {
            let mut g = cache.lock();
            let (_, forged) = g.map.drain().next().unwrap();
            g.map.insert(a_key, forged);
        }
        let a_code = cache.get_or_compile(&a, &a_dtype, opts).unwrap();
        assert!(!Arc::ptr_eq(&a_code, &b_code), "a got b's code");
        assert_eq!(a_code.key, format!("{a_key:016x}"));
        let g = cache.lock();
        assert_eq!((g.stats.compiles, g.stats.hits, g.map.len()), (2, 0, 1));
        assert_eq!(g.stats.bytes, a_code.code.code_bytes);
        drop(g);
        // And a's own entry is a hit from now on.
        let again = cache.get_or_compile(&a, &a_dtype, opts).unwrap();
        assert!(Arc::ptr_eq(&again, &a_code));
    }

    /// An entry compiled for other CPU features is never reused: one
    /// forged to say it was compiled with AVX-512 flipped (its key made
    /// from that identity) is a miss for this CPU, which compiles its own.
    #[test]
    fn an_entry_for_other_cpu_features_is_not_reused() {
        let cache = KernelCache::new();
        let (k, dtypes) =
            kernel("graph {\n  %0 = input 0 : f32[4,9]\n  %1 = tanh %0 : f32[4,9]\n  return %1\n}");
        let dtype_of = |id: BufId| dtypes[id.0 as usize];
        let opts = CodegenOptions::default();
        let first = cache.get_or_compile(&k, &dtype_of, opts).unwrap();
        {
            let mut g = cache.lock();
            let (_, mut e) = g.map.drain().next().unwrap();
            e.identity.cpu.avx512f = !e.identity.cpu.avx512f;
            let other_key = e.identity.key();
            g.map.insert(other_key, e);
        }
        let mine = cache.get_or_compile(&k, &dtype_of, opts).unwrap();
        assert!(!Arc::ptr_eq(&mine, &first), "reused another CPU's code");
        let st = cache.stats();
        assert_eq!((st.compiles, st.hits, cache.len()), (2, 0, 2));
    }

    fn unary(op: &str, n: usize) -> (Kernel, Vec<DType>) {
        kernel(&format!(
            "graph {{\n  %0 = input 0 : f32[{n}]\n  %1 = {op} %0 : f32[{n}]\n  return %1\n}}"
        ))
    }

    /// Eviction takes the least recently used entry first, counts each,
    /// and respects the byte bound as well as the entry bound; a program's
    /// `Arc` outlives its entry.
    #[test]
    fn eviction_is_least_recently_used_and_counted() {
        let cache = KernelCache::new();
        let opts = CodegenOptions::default();
        let (a, da) = unary("exp", 7);
        let (b, db) = unary("tanh", 7);
        let (c, dc) = unary("log", 7);
        let get = |k: &Kernel, d: &Vec<DType>| {
            cache
                .get_or_compile(k, &|id: BufId| d[id.0 as usize], opts)
                .unwrap()
        };
        let held_a = get(&a, &da);
        let _ = get(&b, &db);
        let _ = get(&a, &da); // a is now more recent than b
        cache.set_capacity(1, usize::MAX);
        let names: Vec<String> = cache.entries().into_iter().map(|e| e.name).collect();
        assert_eq!(
            names,
            std::slice::from_ref(&a.name),
            "b, the least recently used, goes"
        );
        assert_eq!(cache.stats().evictions, 1);
        // A byte bound below one kernel's code empties the host map.
        let _ = get(&c, &dc);
        cache.set_capacity(16, held_a.code.code_bytes - 1);
        let st = cache.stats();
        assert_eq!((cache.len(), st.bytes, st.evictions), (0, 0, 3));
        // The evicted entry's code stays with whoever holds it; a lookup
        // compiles it again.
        assert!(held_a.code.code_bytes > 0);
        cache.set_capacity(16, usize::MAX);
        let again = get(&a, &da);
        assert!(!Arc::ptr_eq(&again, &held_a));
        assert_eq!(cache.stats().compiles, 4);
    }

    /// The entry bound counts host and sim entries together, as `len`
    /// does: the least recently used of the two goes first.
    #[test]
    fn the_entry_bound_counts_both_targets() {
        let cache = KernelCache::new();
        let (k, dtypes) = unary("exp", 11);
        let dtype_of = |id: BufId| dtypes[id.0 as usize];
        let cfg = DeviceConfig::default();
        cache.get_or_compile_sim(&k, &dtype_of, &cfg).unwrap();
        cache
            .get_or_compile(&k, &dtype_of, CodegenOptions::default())
            .unwrap();
        cache.set_capacity(1, usize::MAX);
        let left: Vec<Target> = cache.entries().into_iter().map(|e| e.target).collect();
        assert_eq!(
            left,
            [Target::Host],
            "the sim entry was used least recently"
        );
        cache.get_or_compile_sim(&k, &dtype_of, &cfg).unwrap();
        let left: Vec<Target> = cache.entries().into_iter().map(|e| e.target).collect();
        assert_eq!(left, [Target::Sim], "now the host entry was");
        assert_eq!(cache.stats().evictions, 2);
    }

    /// `clear` empties host and sim entries and the byte count; counters
    /// keep counting, and the next lookup compiles again.
    #[test]
    fn clear_empties_both_targets() {
        let cache = KernelCache::new();
        let (k, dtypes) = unary("exp", 9);
        let dtype_of = |id: BufId| dtypes[id.0 as usize];
        cache
            .get_or_compile(&k, &dtype_of, CodegenOptions::default())
            .unwrap();
        cache
            .get_or_compile_sim(&k, &dtype_of, &DeviceConfig::default())
            .unwrap();
        assert_eq!(cache.len(), 2);
        assert!(cache.stats().bytes > 0);
        cache.clear();
        let st = cache.stats();
        assert_eq!((cache.len(), st.bytes, st.compiles), (0, 0, 2));
        cache
            .get_or_compile(&k, &dtype_of, CodegenOptions::default())
            .unwrap();
        assert_eq!((cache.len(), cache.stats().compiles), (1, 3));
    }

    const LAYERNORM: &str = "graph {
  %0 = input 0 : f32[64,96]
  %1 = reduce_sum %0 axes=[1] : f32[64,1]
  %2 = broadcast %1 : f32[64,96]
  %3 = sub %0, %2 : f32[64,96]
  %4 = mul %3, %3 : f32[64,96]
  %5 = reduce_sum %4 axes=[1] : f32[64,1]
  %6 = rsqrt %5 : f32[64,1]
  %7 = broadcast %6 : f32[64,96]
  %8 = mul %3, %7 : f32[64,96]
  return %8
}";

    /// Runs `get` on `threads` threads released at once; what each got.
    fn at_once<T: Send>(threads: usize, get: impl Fn() -> T + Sync) -> Vec<T> {
        let barrier = std::sync::Barrier::new(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        get()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// Threads that miss the same kernel at once share one compile: one
    /// compile counted, every thread holding the same code, each lookup
    /// counted as a hit or a miss. (With each miss compiling, as this
    /// cache once did, the first round compiled twice when this was checked.)
    #[test]
    fn concurrent_misses_compile_once() {
        let (k, dtypes) = kernel(LAYERNORM);
        let dtype_of = |id: BufId| dtypes[id.0 as usize];
        for round in 0..3 {
            let cache = KernelCache::new();
            let opts = CodegenOptions::default();
            let got = at_once(8, || cache.get_or_compile(&k, &dtype_of, opts).unwrap());
            assert!(got.iter().all(|c| Arc::ptr_eq(c, &got[0])), "round {round}");
            let st = cache.stats();
            assert_eq!((st.compiles, st.hits + st.misses), (1, 8), "round {round}");
            assert_eq!(cache.len(), 1);
            assert!(cache.lock().host_flights.is_empty());
        }
    }

    /// The same for the simulated device's compiles.
    #[test]
    fn concurrent_sim_misses_compile_once() {
        let (k, dtypes) = kernel(LAYERNORM);
        let dtype_of = |id: BufId| dtypes[id.0 as usize];
        let cfg = DeviceConfig::default();
        let cache = KernelCache::new();
        let got = at_once(8, || cache.get_or_compile_sim(&k, &dtype_of, &cfg).unwrap());
        assert!(got.iter().all(|c| Arc::ptr_eq(c, &got[0])));
        let st = cache.stats();
        assert_eq!((st.compiles, st.hits + st.misses), (1, 8));
        assert!(cache.lock().sim_flights.is_empty());
    }

    /// Callers waiting on a compile that fails get its error, and the
    /// failure leaves neither an entry nor a flight behind.
    #[test]
    fn waiters_share_a_failed_compile() {
        let (k, dtypes) = kernel(LAYERNORM);
        let dtype_of = |id: BufId| dtypes[id.0 as usize];
        // A device whose local buffers cannot hold one row's tile.
        let cfg = DeviceConfig {
            ub_bytes: 64,
            ..DeviceConfig::default()
        };
        let cache = KernelCache::new();
        let got = at_once(4, || cache.get_or_compile_sim(&k, &dtype_of, &cfg));
        let errors: Vec<String> = got
            .iter()
            .map(|r| r.as_ref().unwrap_err().to_string())
            .collect();
        assert!(errors.iter().all(|e| *e == errors[0]), "{errors:?}");
        assert!(cache.is_empty());
        assert!(cache.lock().sim_flights.is_empty());
    }
}
