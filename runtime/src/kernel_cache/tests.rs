//! Unit tests of the kernel cache: collisions, CPU identity, eviction,
//! clear, single-flight compiles under real threads, and size-generic Sim
//! entries.
#![allow(clippy::unwrap_used)] // tests assert by unwrapping

use super::host::HostIdentity;
use super::*;
use tilejit_codegen::host::CodegenOptions;
use tilejit_device::DeviceConfig;
use tilejit_ir::kernel::{BufId, Kernel};
use tilejit_ir::DType;

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
    let b_code = cache.get_or_compile(&b, &b_dtype, opts, "test").unwrap();
    // Move b's entry under the key a will look up.
    let a_key = HostBackend::key_parts(&HostIdentity::new(&a, &a_dtype, opts)).key();
    {
        let mut g = cache.lock();
        let (_, forged) = g.host.entries.drain().next().unwrap();
        g.host.entries.insert(a_key, forged);
    }
    let a_code = cache.get_or_compile(&a, &a_dtype, opts, "test").unwrap();
    assert!(!Arc::ptr_eq(&a_code, &b_code), "a got b's code");
    assert_eq!(a_code.key, a_key.hex());
    let g = cache.lock();
    assert_eq!(
        (g.stats.compiles, g.stats.hits, g.host.entries.len()),
        (2, 0, 1)
    );
    assert_eq!(g.stats.bytes, a_code.code.code_bytes);
    drop(g);
    // And a's own entry is a hit from now on.
    let again = cache.get_or_compile(&a, &a_dtype, opts, "test").unwrap();
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
    let first = cache.get_or_compile(&k, &dtype_of, opts, "test").unwrap();
    {
        let mut g = cache.lock();
        let (_, mut e) = g.host.entries.drain().next().unwrap();
        e.identity.isa = "x86_64 (another CPU)";
        let parts = HostBackend::key_parts(&e.identity);
        e.digests = parts.digests();
        g.host.entries.insert(parts.key(), e);
    }
    // `TILEJIT_LOG=cache` would name the CPU as the one difference.
    {
        let g = cache.lock();
        let mine = HostBackend::key_parts(&HostIdentity::new(&k, &dtype_of, opts));
        let (_, name, diff) = super::nearest(&g.host, &mine.digests()).unwrap();
        assert_eq!((name.as_str(), diff), (k.name.as_str(), vec!["cpu"]));
    }
    let mine = cache.get_or_compile(&k, &dtype_of, opts, "test").unwrap();
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
            .get_or_compile(k, &|id: BufId| d[id.0 as usize], opts, "test")
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
    // A byte bound below one kernel's code empties the cache.
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
    cache
        .get_or_compile_sim(&k, &dtype_of, &cfg, "test")
        .unwrap();
    cache
        .get_or_compile(&k, &dtype_of, CodegenOptions::default(), "test")
        .unwrap();
    cache.set_capacity(1, usize::MAX);
    let left: Vec<Target> = cache.entries().into_iter().map(|e| e.target).collect();
    assert_eq!(
        left,
        [Target::Host],
        "the sim entry was used least recently"
    );
    cache
        .get_or_compile_sim(&k, &dtype_of, &cfg, "test")
        .unwrap();
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
        .get_or_compile(&k, &dtype_of, CodegenOptions::default(), "test")
        .unwrap();
    cache
        .get_or_compile_sim(&k, &dtype_of, &DeviceConfig::default(), "test")
        .unwrap();
    assert_eq!(cache.len(), 2);
    assert!(cache.stats().bytes > 0);
    cache.clear();
    let st = cache.stats();
    assert_eq!((cache.len(), st.bytes, st.compiles), (0, 0, 2));
    cache
        .get_or_compile(&k, &dtype_of, CodegenOptions::default(), "test")
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
        let got = at_once(8, || {
            cache.get_or_compile(&k, &dtype_of, opts, "test").unwrap()
        });
        assert!(got.iter().all(|c| Arc::ptr_eq(c, &got[0])), "round {round}");
        let st = cache.stats();
        assert_eq!((st.compiles, st.hits + st.misses), (1, 8), "round {round}");
        assert_eq!(cache.len(), 1);
        assert!(cache.lock().host.flights.is_empty());
    }
}

/// The same for the simulated device's compiles.
#[test]
fn concurrent_sim_misses_compile_once() {
    let (k, dtypes) = kernel(LAYERNORM);
    let dtype_of = |id: BufId| dtypes[id.0 as usize];
    let cfg = DeviceConfig::default();
    let cache = KernelCache::new();
    let got = at_once(8, || {
        cache
            .get_or_compile_sim(&k, &dtype_of, &cfg, "test")
            .unwrap()
    });
    assert!(got.iter().all(|c| Arc::ptr_eq(c, &got[0])));
    let st = cache.stats();
    assert_eq!((st.compiles, st.hits + st.misses), (1, 8));
    assert!(cache.lock().sim.flights.is_empty());
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
    let got = at_once(4, || cache.get_or_compile_sim(&k, &dtype_of, &cfg, "test"));
    let errors: Vec<String> = got
        .iter()
        .map(|r| r.as_ref().unwrap_err().to_string())
        .collect();
    assert!(errors.iter().all(|e| *e == errors[0]), "{errors:?}");
    assert!(cache.is_empty());
    assert!(cache.lock().sim.flights.is_empty());
}

/// A row sum over `[rows, cols]`.
fn row_sum(rows: usize, cols: usize) -> (Kernel, Vec<DType>) {
    kernel(&format!(
        "graph {{\n  %0 = input 0 : f32[{rows},{cols}]\n  \
         %1 = reduce_sum %0 axes=[1] : f32[{rows},1]\n  return %1\n}}"
    ))
}

/// Sim code is size-generic: a kernel compiles once for every size of its
/// structure and plan class, and once more for each other class.
#[test]
fn sim_kernels_compile_once_per_structure_and_class() {
    let cfg = DeviceConfig::default();
    let cache = KernelCache::new();
    let get = |(k, dtypes): (Kernel, Vec<DType>)| {
        let dtype_of = |id: BufId| dtypes[id.0 as usize];
        cache
            .get_or_compile_sim(&k, &dtype_of, &cfg, "test")
            .unwrap()
    };
    let flat: Vec<_> = [3, 4096, 5000, 70_001]
        .into_iter()
        .map(|n| get(unary("exp", n)))
        .collect();
    assert!(flat.iter().all(|c| Arc::ptr_eq(c, &flat[0])));
    assert_eq!(cache.stats().compiles, 1);
    // Whole rows, then a few rows longer than UB (split): two classes.
    for (r, c) in [(3, 100), (5, 3000), (2, 70_000), (3, 90_000)] {
        get(row_sum(r, c));
    }
    assert_eq!(cache.stats().compiles, 3);
}

/// A split kernel's payload (workspace extents, units, local buffer
/// numbers) survives the disk encoding.
#[test]
fn sim_payloads_round_trip_units_and_extents() {
    let (k, dtypes) = row_sum(2, 70_000);
    let dtype_of = |id: BufId| dtypes[id.0 as usize];
    let cfg = DeviceConfig::default();
    let code = tilejit_codegen::device::compile(&k, &dtype_of, &cfg).unwrap();
    assert!(code.iter().any(|d| !d.extra.is_empty()), "a split kernel");
    let bytes = super::sim::encode(&code).unwrap();
    let back = super::sim::decode(&bytes, &cfg).unwrap();
    assert_eq!(back.len(), code.len());
    for (a, b) in code.iter().zip(&back) {
        assert_eq!(
            (&a.name, a.units, a.tile_units, &a.buffers),
            (&b.name, b.units, b.tile_units, &b.buffers)
        );
        assert_eq!(a.program.program(), b.program.program());
        assert_eq!(*a.extra, *b.extra);
    }
}

use super::disk::tests::temp_root;

/// Kernels that call `tj_pow`, `tj_mod` and `tj_ipow` (and every other
/// libcall) reload from the disk cache in a later process (a second
/// cache over the same directory): no compile, no rejected file. The
/// relinker once knew only the one-operand libcalls and refused these
/// as "unknown symbol", so they were compiled again in every process.
#[test]
fn libcall_kernels_reload_from_disk_with_no_compile() {
    let root = temp_root("libcalls");
    let graphs = [
        "graph {\n  %0 = input 0 : f32[7]\n  %1 = input 1 : f32[7]\n  %2 = pow %0, %1 : f32[7]\n  return %2\n}",
        "graph {\n  %0 = input 0 : f32[7]\n  %1 = input 1 : f32[7]\n  %2 = rem %0, %1 : f32[7]\n  return %2\n}",
        "graph {\n  %0 = input 0 : i64[7]\n  %1 = input 1 : i64[7]\n  %2 = pow %0, %1 : i64[7]\n  return %2\n}",
        "graph {\n  %0 = input 0 : f64[7]\n  %1 = exp %0 : f64[7]\n  return %1\n}",
        "graph {\n  %0 = input 0 : f32[7]\n  %1 = atan %0 : f32[7]\n  return %1\n}",
    ];
    let opts = CodegenOptions::default();
    let run = |cache: &KernelCache| {
        for g in graphs {
            let (k, dtypes) = kernel(g);
            let dtype_of = |id: BufId| dtypes[id.0 as usize];
            cache.get_or_compile(&k, &dtype_of, opts, "test").unwrap();
        }
        cache.stats()
    };
    let disk = || {
        Some(disk::DiskCache::at(
            &root,
            crate::config::DEFAULT_CACHE_BYTES,
        ))
    };
    let first = run(&KernelCache::with_disk(disk()));
    assert_eq!((first.compiles, first.disk_writes), (5, 5), "{first:?}");
    let second = run(&KernelCache::with_disk(disk()));
    assert_eq!(
        (second.compiles, second.disk_hits, second.disk_rejected),
        (0, 5, 0),
        "{second:?}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A host key's CPU component, and a snapshot's manifest, name the
/// whole ISA Cranelift targets: the triple and every ISA flag with its
/// value (about 15 on x86-64: `has_avx512vl`, `has_bmi2`, ...), not just
/// four features, so code from a machine with a flag this one lacks is
/// never reused here (a cache shared between machines cannot SIGILL).
#[test]
fn the_cpu_key_covers_every_isa_flag() {
    let isa = cranelift_native::builder()
        .unwrap()
        .finish(cranelift_codegen::settings::Flags::new(
            cranelift_codegen::settings::builder(),
        ))
        .unwrap();
    let flags: Vec<String> = isa.isa_flags().iter().map(|f| f.to_string()).collect();
    assert!(flags.len() >= 4, "{flags:?}");
    let (k, dtypes) = unary("exp", 8);
    let dtype_of = |id: BufId| dtypes[id.0 as usize];
    let parts =
        HostBackend::key_parts(&HostIdentity::new(&k, &dtype_of, CodegenOptions::default()));
    let cpu = &parts.parts().iter().find(|(n, _)| *n == "cpu").unwrap().1;
    let manifest = crate::snapshot::Manifest::parse(&format!(
        "tilejit snapshot\nformat: 2\ntilejit: x\ncranelift: y\ncpu: {}\ndevice-config: z\nfunction: f\nbody: b\nsignatures: 0\n",
        tilejit_codegen::host::isa_text()
    ))
    .unwrap();
    for f in &flags {
        assert!(
            cpu.split(' ').any(|w| w == f),
            "{f} missing from the key's `{cpu}`"
        );
        assert!(
            manifest.cpu.split(' ').any(|w| w == f),
            "{f} missing from the manifest"
        );
    }
    assert!(cpu.contains(&isa.triple().to_string()), "{cpu}");
}
