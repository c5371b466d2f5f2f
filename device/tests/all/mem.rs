//! The device's memory and API: the region allocator (alignment,
//! coalescing, fragmentation, out-of-memory messages, many threads), the
//! `DeviceApi` copies on both devices, the typed bulk copies, bad buffers,
//! and `DeviceConfig`'s JSON form.

use std::sync::Arc;
use tilejit_device::mem::MemRegion;
use tilejit_device::{DeviceApi, DeviceConfig, DeviceError, HostDevice, SimDevice};

#[test]
fn allocations_are_aligned_zeroed_and_freed_on_drop() {
    let r = MemRegion::new("test", 4096);
    let a = r.alloc(1).unwrap();
    let b = r.alloc(33).unwrap();
    assert_eq!((a.offset() % 32, b.offset() % 32), (0, 0));
    assert_eq!((a.len(), b.len()), (32, 64));
    let mut buf = [1u8; 64];
    b.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&x| x == 0), "fresh chunks read as zero");
    b.write(0, &[7; 64]).unwrap();
    drop(b);
    // The same bytes handed out again are zeroed again.
    let c = r.alloc(64).unwrap();
    c.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&x| x == 0));
    assert_eq!(r.stats().chunks, 2);
    drop((a, c));
    let s = r.stats();
    assert_eq!(
        (s.used, s.free, s.chunks, s.free_blocks, s.largest_free),
        (0, 4096, 0, 1, 4096)
    );
}

#[test]
fn freed_neighbours_coalesce_into_one_block() {
    let r = MemRegion::new("test", 32 * 10);
    let chunks: Vec<_> = (0..10).map(|_| r.alloc(32).unwrap()).collect();
    assert!(r.alloc(32).is_err(), "region is full");
    let mut chunks: Vec<Option<_>> = chunks.into_iter().map(Some).collect();
    // Free 1, 3, 2: the three must merge into one 96-byte block.
    for i in [1, 3, 2] {
        chunks[i] = None;
    }
    let s = r.stats();
    assert_eq!((s.free_blocks, s.largest_free), (1, 96));
    let big = r.alloc(96).unwrap();
    assert_eq!(big.offset(), 32);
    drop(big);
    chunks.clear();
    assert_eq!(r.stats().free_blocks, 1);
}

#[test]
fn fragmentation_gives_an_out_of_memory_error_that_states_the_numbers() {
    let r = MemRegion::new("GM", 32 * 8);
    let chunks: Vec<_> = (0..8).map(|_| r.alloc(32).unwrap()).collect();
    // Free every other chunk: 128 bytes free, but no two adjacent.
    let kept: Vec<_> = chunks
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, c)| c)
        .collect();
    let err = r.alloc(64).unwrap_err();
    assert_eq!(
        err,
        DeviceError::OutOfMemory {
            region: "GM".into(),
            requested: 64,
            free: 128,
            largest_free: 32,
            largest_live: vec![
                "32 bytes at 0".into(),
                "32 bytes at 64".into(),
                "32 bytes at 128".into()
            ],
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("requested 64 bytes")
            && msg.contains("128 bytes free")
            && msg.contains("largest free block 32"),
        "{msg}"
    );
    drop(kept);
    assert!(r.alloc(256).is_ok());
}

#[test]
fn huge_requests_fail_cleanly() {
    let r = MemRegion::new("GM", 1 << 20);
    assert!(matches!(
        r.alloc(u64::MAX),
        Err(DeviceError::OutOfMemory { .. })
    ));
    assert!(matches!(
        r.alloc(u64::MAX - 3),
        Err(DeviceError::OutOfMemory { .. })
    ));
    assert!(matches!(
        r.alloc((1 << 20) + 1),
        Err(DeviceError::OutOfMemory { .. })
    ));
}

#[test]
fn chunk_access_outside_its_bytes_is_an_error() {
    let r = MemRegion::new("test", 1024);
    let c = r.alloc(64).unwrap();
    assert!(matches!(
        c.write(60, &[0; 8]),
        Err(DeviceError::OutOfBounds {
            offset: 60,
            end: 68,
            size: 64,
            ..
        })
    ));
    assert!(c.read(u64::MAX, &mut [0; 2]).is_err());
}

/// Thousands of random allocations and frees from several threads; every
/// thread writes a pattern into its chunks and checks it is still there
/// before freeing (so two live chunks never overlap), and at the end the
/// region is one free block again.
#[test]
fn random_alloc_free_from_many_threads() {
    let r = MemRegion::new("GM", 1 << 20);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut rng = t * 7919 + 1;
                let mut next = move || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                let mut live = Vec::new();
                let mut ooms = 0;
                for i in 0..3000u64 {
                    if live.len() < 40 && next() % 3 != 0 {
                        let size = 1 + next() % 4000;
                        match r.alloc(size) {
                            Ok(c) => {
                                let tag = (t * 100_000 + i) as u32;
                                let pat: Vec<u8> =
                                    (0..size).map(|j| (tag as u64 + j) as u8).collect();
                                c.write(0, &pat).unwrap();
                                live.push((c, pat));
                            }
                            Err(DeviceError::OutOfMemory { .. }) => ooms += 1,
                            Err(e) => panic!("{e}"),
                        }
                    } else if !live.is_empty() {
                        let k = (next() as usize) % live.len();
                        let (c, pat) = live.swap_remove(k);
                        let mut got = vec![0u8; pat.len()];
                        c.read(0, &mut got).unwrap();
                        assert_eq!(got, pat, "a live chunk was overwritten");
                    }
                }
                ooms
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = r.stats();
    assert_eq!(
        (s.used, s.chunks, s.free_blocks, s.largest_free),
        (0, 0, 1, 1 << 20)
    );
}

fn check_api(dev: &dyn DeviceApi) {
    let a = dev.allocate(1000).unwrap();
    let b = dev.allocate(1000).unwrap();
    let data: Vec<u8> = (0..1000).map(|i| (i * 7) as u8).collect();
    dev.copy_from_host(&data, &a, 0).unwrap();
    dev.copy_within(&a, 100, &b, 10, 500).unwrap();
    let mut out = vec![0u8; 500];
    dev.copy_to_host(&b, 10, &mut out).unwrap();
    assert_eq!(out, data[100..600]);
    // Overlapping copy inside one buffer behaves as memmove.
    dev.copy_within(&a, 0, &a, 1, 900).unwrap();
    let mut moved = vec![0u8; 901];
    dev.copy_to_host(&a, 0, &mut moved).unwrap();
    assert_eq!(moved[1..], data[..900]);
    assert!(matches!(
        dev.copy_from_host(&data, &a, 100),
        Err(DeviceError::OutOfBounds { .. })
    ));
    assert!(dev.copy_within(&a, 0, &b, 600, 500).is_err());
    assert!(dev.copy_to_host(&b, 1000, &mut out).is_err());
    dev.synchronize().unwrap();
    let before = dev.describe().free_bytes;
    dev.free(a).unwrap();
    assert_eq!(dev.describe().free_bytes, before + 1024);
}

#[test]
fn device_api_on_host_and_sim() {
    let host = HostDevice::new(1 << 20);
    check_api(&host);
    let sim = SimDevice::new(DeviceConfig::default()).unwrap();
    check_api(&sim);
    let info = sim.describe();
    assert_eq!((info.kind, info.aic_cores, info.aiv_cores), ("sim", 24, 48));
    // A buffer of one device is refused by another.
    let foreign = host.allocate(64).unwrap();
    let err = sim.copy_from_host(&[1, 2], &foreign, 0).unwrap_err();
    assert!(matches!(err, DeviceError::WrongDevice { .. }), "{err}");
    assert!(sim.free(foreign).is_err());
}

/// A host device of `u64::MAX` bytes once aborted the process building a
/// page directory of 256 GiB; it is clamped to 16 TiB, lazily backed.
#[test]
fn a_host_device_of_any_size_builds_and_bounds_its_allocations() {
    let host = HostDevice::new(u64::MAX);
    assert_eq!(host.describe().memory_bytes, 1 << 44);
    let err = host.allocate(1 << 45).unwrap_err();
    assert!(matches!(err, DeviceError::OutOfMemory { .. }), "{err}");
    let b = host.allocate(4096).unwrap();
    host.copy_from_host(&[7; 16], &b, 0).unwrap();
    let mut back = [0u8; 16];
    host.copy_to_host(&b, 0, &mut back).unwrap();
    assert_eq!(back, [7; 16]);
}

#[test]
fn sim_device_is_shared_across_threads() {
    let sim = Arc::new(SimDevice::new(DeviceConfig::default()).unwrap());
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let sim = sim.clone();
            std::thread::spawn(move || {
                for i in 0..200usize {
                    let buf = sim.allocate(64 + i as u64).unwrap();
                    let data = vec![t ^ i as u8; 64 + i];
                    sim.copy_from_host(&data, &buf, 0).unwrap();
                    let mut back = vec![0; 64 + i];
                    sim.copy_to_host(&buf, 0, &mut back).unwrap();
                    assert_eq!(back, data);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(sim.memory_stats().chunks, 0);
}

/// Eight threads write interleaved 3-byte runs into one 1 MiB buffer (so
/// runs share words and straddle page boundaries) while two more read it
/// whole: every thread's bytes survive the others' writes, and a reader
/// sees each byte either unwritten or holding its run's value, never a
/// byte of another run.
#[test]
fn interleaved_writes_from_many_threads_keep_each_others_bytes() {
    const LEN: usize = 1 << 20;
    const RUN: usize = 3;
    let sim = Arc::new(SimDevice::new(DeviceConfig::default()).unwrap());
    let buf = Arc::new(sim.allocate(LEN as u64).unwrap());
    let runs = LEN / RUN;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (sim, buf, done) = (sim.clone(), buf.clone(), done.clone());
            std::thread::spawn(move || {
                let mut back = vec![0u8; LEN];
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    sim.copy_to_host(&buf, 0, &mut back).unwrap();
                    for (k, run) in back[..runs * RUN].chunks_exact(RUN).enumerate() {
                        let v = (k % 251) as u8 + 1;
                        assert!(run.iter().all(|&b| b == 0 || b == v), "run {k}: {run:?}");
                    }
                }
            })
        })
        .collect();
    let writers: Vec<_> = (0..8usize)
        .map(|t| {
            let (sim, buf) = (sim.clone(), buf.clone());
            std::thread::spawn(move || {
                for k in (t..runs).step_by(8) {
                    let v = (k % 251) as u8 + 1;
                    sim.copy_from_host(&[v; RUN], &buf, (k * RUN) as u64)
                        .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    let mut back = vec![0u8; LEN];
    sim.copy_to_host(&buf, 0, &mut back).unwrap();
    for (k, run) in back[..runs * RUN].chunks_exact(RUN).enumerate() {
        assert_eq!(run, [(k % 251) as u8 + 1; RUN], "run {k}");
    }
    assert_eq!(&back[runs * RUN..], &[0u8; LEN % RUN][..]);
}

#[test]
fn config_round_trips_through_json_and_rejects_bad_values() {
    let cfg = DeviceConfig::default();
    assert_eq!(
        (cfg.aic_cores, cfg.aiv_cores, cfg.ub_bytes, cfg.l1_bytes),
        (24, 48, 192 << 10, 512 << 10)
    );
    assert_eq!(
        (cfg.l0a_bytes, cfg.l0b_bytes, cfg.l0c_bytes),
        (64 << 10, 64 << 10, 128 << 10)
    );
    let back = DeviceConfig::from_json(&cfg.to_json()).unwrap();
    assert_eq!(back, cfg);
    let mut other = cfg.clone();
    other.aiv_cores = 8;
    other.costs.vector_bytes_per_cycle = 128;
    assert_eq!(DeviceConfig::from_json(&other.to_json()).unwrap(), other);

    let bad = cfg.to_json().replace(
        "\"vector_bytes_per_cycle\": 256",
        "\"vector_bytes_per_cycle\": 0",
    );
    let err = DeviceConfig::from_json(&bad).unwrap_err().to_string();
    assert!(err.contains("vector_bytes_per_cycle"), "{err}");
    let bad = cfg
        .to_json()
        .replace("\"ub_bytes\": 196608", "\"ub_bytes\": 100");
    assert!(DeviceConfig::from_json(&bad)
        .unwrap_err()
        .to_string()
        .contains("ub_bytes"));
    let unknown = cfg.to_json().replacen('{', "{\"warp_size\": 32,", 1);
    assert!(DeviceConfig::from_json(&unknown)
        .unwrap_err()
        .to_string()
        .contains("warp_size"));
    assert!(DeviceConfig::from_json("{").is_err());
    assert!(SimDevice::new(DeviceConfig {
        clock_hz: f64::NAN,
        ..DeviceConfig::default()
    })
    .is_err());
}

#[test]
fn filled_and_overwrite_allocations_zero_only_the_padding() {
    let sim = SimDevice::new(DeviceConfig::default()).unwrap();
    // Dirty a region, free it, then reuse it for a filled allocation.
    let dirty = sim.allocate(64).unwrap();
    sim.copy_from_host(&[0xAB; 64], &dirty, 0).unwrap();
    drop(dirty);
    let buf = sim
        .allocate_filled(40, |b| sim.copy_from_host(&[7u8; 40], b, 0))
        .unwrap();
    let mut back = [0u8; 64];
    sim.copy_to_host(&buf, 0, &mut back).unwrap();
    assert_eq!(&back[..40], &[7u8; 40][..]);
    assert_eq!(&back[40..], &[0u8; 24][..], "alignment padding is zeroed");
    // A failing fill gives its error and frees the buffer.
    let before = sim.memory_stats().chunks;
    let err = sim
        .allocate_filled(32, |_| {
            Err::<(), _>(DeviceError::Config("fill failed".into()))
        })
        .unwrap_err();
    assert_eq!(err, DeviceError::Config("fill failed".into()));
    assert_eq!(sim.memory_stats().chunks, before);
    // A buffer for overwriting is not zeroed; debug builds (as tests run)
    // poison its bytes so that an element a kernel misses is visible.
    let out = sim.allocate_for_overwrite(40).unwrap();
    sim.copy_to_host(&out, 0, &mut back).unwrap();
    if cfg!(debug_assertions) {
        assert_eq!(&back[..40], &[0xFFu8; 40][..]);
    }
    assert_eq!(&back[40..], &[0u8; 24][..], "alignment padding is zeroed");
}

/// The typed bulk copies against the byte copies: every element type, at
/// aligned and unaligned offsets, lengths with partial last words, across
/// page boundaries and split over threads; a partial word keeps the bytes
/// of its neighbours.
#[test]
fn typed_copies_match_byte_copies() {
    use half::{bf16, f16};
    use tilejit_device::GmElem;

    fn check<T: GmElem + PartialEq + std::fmt::Debug>(
        sim: &SimDevice,
        make: impl Fn(usize) -> T,
        le: impl Fn(T) -> Vec<u8>,
    ) {
        // 300K elements of 8 bytes cross several 256K pages and split into
        // several parallel pieces.
        for len in [0usize, 1, 3, 7, 50, 783, 300_001] {
            for offset in [0u64, 8, 3, 32] {
                let data: Vec<T> = (0..len).map(&make).collect();
                let bytes = len * T::BYTES + offset as usize + 16;
                let buf = sim.allocate(bytes as u64).unwrap();
                sim.copy_from_host(&vec![0xA5u8; bytes], &buf, 0).unwrap();
                sim.copy_elems_from_host(&data, &buf, offset).unwrap();
                let mut raw = vec![0u8; bytes];
                sim.copy_to_host(&buf, 0, &mut raw).unwrap();
                let mut want = vec![0xA5u8; bytes];
                let le_bytes: Vec<u8> = data.iter().flat_map(|&x| le(x)).collect();
                want[offset as usize..offset as usize + le_bytes.len()].copy_from_slice(&le_bytes);
                assert!(raw == want, "{} x{len} at {offset}: bytes differ", T::BYTES);
                let mut back: Vec<T> = (0..len).map(|i| make(i + 1)).collect();
                sim.copy_elems_to_host(&buf, offset, &mut back).unwrap();
                assert!(back == data, "{} x{len} at {offset}: read back", T::BYTES);
            }
        }
    }
    let sim = SimDevice::new(DeviceConfig::default()).unwrap();
    check(
        &sim,
        |i| (i as f32) * -1.5 + 0.25,
        |x: f32| x.to_le_bytes().to_vec(),
    );
    check(
        &sim,
        |i| (i as f64).sqrt() - 7.0,
        |x: f64| x.to_le_bytes().to_vec(),
    );
    check(
        &sim,
        |i| (i as i32).wrapping_mul(-7919),
        |x: i32| x.to_le_bytes().to_vec(),
    );
    check(
        &sim,
        |i| (i as i64) << 40 | 0x55,
        |x: i64| x.to_le_bytes().to_vec(),
    );
    check(
        &sim,
        |i| f16::from_f32(i as f32 * 0.5),
        |x: f16| x.to_le_bytes().to_vec(),
    );
    check(
        &sim,
        |i| bf16::from_f32(i as f32 - 9.0),
        |x: bf16| x.to_le_bytes().to_vec(),
    );
    check(&sim, |i| i % 3 == 0, |x: bool| vec![x as u8]);
    check(&sim, |i| (i * 31) as u8, |x: u8| vec![x]);

    // Copies check their range and the buffer's owner.
    let buf = sim.allocate(64).unwrap();
    let err = sim.copy_elems_from_host(&[0f32; 17], &buf, 0).unwrap_err();
    assert!(matches!(err, DeviceError::OutOfBounds { .. }), "{err}");
    let err = sim
        .copy_elems_to_host(&buf, 60, &mut [0f64; 1])
        .unwrap_err();
    assert!(matches!(err, DeviceError::OutOfBounds { .. }), "{err}");
    let other = SimDevice::new(DeviceConfig::default()).unwrap();
    assert!(other.copy_elems_from_host(&[1f32], &buf, 0).is_err());
}

/// Strided gathers and scatters (the `ldx`/`stx` DMA) against one plain
/// read or write per element: strides that cross pages, an element that
/// straddles a page boundary, a page never written (reads as zeros).
#[test]
fn gather_and_scatter_match_element_copies() {
    use tilejit_device::mem::PagedMemory;
    const PAGE: u64 = 256 * 1024;
    let mem = PagedMemory::new(4 * PAGE);
    let pattern: Vec<u8> = (0..PAGE as usize).map(|i| (i * 7 + 1) as u8).collect();
    mem.write(0, &pattern).unwrap();
    mem.write(2 * PAGE, &pattern).unwrap();
    for (start, stride, sz) in [
        (0u64, 4099u64, 4usize),
        (PAGE - 2, 1, 4),
        (PAGE - 20, 8, 8),
        (3, 40_000, 2),
    ] {
        let n = ((3 * PAGE - start) / stride).min(300) as usize;
        let addrs = || (0..n as u64).map(move |i| start + i * stride);
        let mut got = vec![0xEEu8; n * sz];
        mem.gather(addrs(), sz, &mut got);
        let mut want = vec![0u8; n * sz];
        for (a, w) in addrs().zip(want.chunks_exact_mut(sz)) {
            mem.read(a, w);
        }
        assert_eq!(got, want, "gather from {start} by {stride} x{sz}");

        let data: Vec<u8> = (0..n * sz).map(|i| (i * 13 + 5) as u8).collect();
        let (a_mem, b_mem) = (PagedMemory::new(4 * PAGE), PagedMemory::new(4 * PAGE));
        a_mem.write(PAGE, &pattern).unwrap();
        b_mem.write(PAGE, &pattern).unwrap();
        a_mem.scatter(addrs(), sz, &data).unwrap();
        for (a, d) in addrs().zip(data.chunks_exact(sz)) {
            b_mem.write(a, d).unwrap();
        }
        let (mut a_all, mut b_all) = (vec![0u8; 4 * PAGE as usize], vec![0u8; 4 * PAGE as usize]);
        a_mem.read(0, &mut a_all);
        b_mem.read(0, &mut b_all);
        assert!(a_all == b_all, "scatter from {start} by {stride} x{sz}");
    }
}

/// The largest memory a config allows (16 TiB) is cheap to make and to
/// use sparsely: only written pages (and their table) take host memory.
#[test]
fn a_huge_sparse_memory_holds_what_is_written() {
    use tilejit_device::mem::PagedMemory;
    let size = 16u64 << 40;
    let mem = PagedMemory::new(size);
    assert_eq!(mem.pages_touched(), 0);
    mem.write(size - 8, &7u64.to_le_bytes()).unwrap();
    mem.write(5 << 30, &[1, 2, 3]).unwrap();
    mem.write(9 << 30, &[0; 64]).unwrap(); // zeros to an untouched page: nothing made
    let mut back = [0u8; 8];
    mem.read(size - 8, &mut back);
    assert_eq!(u64::from_le_bytes(back), 7);
    let mut back = [9u8; 5];
    mem.read((5 << 30) - 1, &mut back);
    assert_eq!(back, [0, 1, 2, 3, 0]);
    mem.read(12 << 30, &mut back);
    assert_eq!(back, [0; 5]);
    assert_eq!(mem.pages_touched(), 2);
}

#[test]
fn live_chunks_are_listed_with_their_labels_and_leave_when_dropped() {
    let r = MemRegion::new("GM", 1024);
    let a = r.alloc(40).unwrap();
    let b = r.alloc(100).unwrap();
    b.set_label("f32[25] tensor".into());
    let listed = r.chunks();
    assert_eq!(listed.len(), 2);
    assert_eq!(
        (listed[0].offset, listed[0].len, listed[0].requested),
        (0, 64, 40)
    );
    assert_eq!(listed[0].label, None);
    assert_eq!(
        (listed[1].offset, listed[1].len, listed[1].requested),
        (64, 128, 100)
    );
    assert_eq!(listed[1].label.as_deref(), Some("f32[25] tensor"));
    // An allocation that cannot fit names the biggest live chunk and its owner.
    let msg = r.alloc(2048).unwrap_err().to_string();
    assert!(
        msg.contains("largest live chunks: 128 bytes at 64 (f32[25] tensor), 64 bytes at 0"),
        "{msg}"
    );
    drop(b);
    assert_eq!(r.chunks().len(), 1);
    drop(a);
    assert!(r.chunks().is_empty());
}
