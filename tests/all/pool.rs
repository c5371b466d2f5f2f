//! The caching allocator for tensor storage: buffers come back when the
//! last array holding them is dropped, a program's next run reuses them
//! (poisoned in debug builds, so a kernel that skipped an element would
//! show), nearby lengths share a size class, and the byte bound evicts
//! oldest first. The pool is global and
//! other tests run beside these, so counters are compared as increases.

use tilejit::prelude::*;
use tilejit_ir::pool::{class_len, pool, BufferPool};
use tilejit_ir::{Array, Buffer, DType};

#[jit]
fn bias_relu_pool(x: &Tensor, b: &Tensor) -> Tensor {
    (x + b).relu()
}

#[test]
fn repeated_calls_reuse_output_storage_and_stay_correct() {
    // A shape no other test uses, so these buffers are ours.
    let (rows, cols) = (333, 97);
    let x = Tensor::randn(&[rows, cols], 41);
    let b = Tensor::randn(&[cols], 42);
    let want: Vec<f32> = {
        let (xv, bv) = (x.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        (0..rows * cols)
            .map(|i| (xv[i] + bv[i % cols]).max(0.0))
            .collect()
    };
    // The host backend's storage is what this test is about.
    let _host = tilejit::mode::scoped_host();
    let before = pool().stats();
    for _ in 0..5 {
        let y = bias_relu_pool(&x, &b).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), want);
        // `y` drops here and its storage returns to the pool.
    }
    let after = pool().stats();
    assert!(after.hits >= before.hits + 4, "{before:?} -> {after:?}");
}

#[test]
fn take_give_and_the_byte_bound() {
    let p: &BufferPool = pool();
    // 40 MB of i64: a size class no other test allocates (with classes,
    // nearby lengths share buffers, so a small length could be served by
    // another test's storage). Allocated as the runtime does, filling its
    // size class.
    let n = 5_000_003;
    let mut v = vec![5; class_len(DType::I64, n)];
    v.truncate(n);
    let arr = Array::new(tilejit_ir::Shape::new(&[n]).unwrap(), Buffer::I64(v)).unwrap();
    let clone = arr.clone();
    drop(arr);
    assert!(p.take(DType::I64, n).is_none(), "still held by a clone");
    drop(clone);
    let b = p.take(DType::I64, n).expect("the dropped array's storage");
    assert_eq!(b.len(), n);
    if cfg!(debug_assertions) {
        assert_eq!(
            b,
            Buffer::I64(vec![i64::MIN; n]),
            "reused storage is poisoned in debug builds"
        );
    }
    // Small buffers are not pooled.
    p.give(Buffer::F32(vec![0.0; 10]));
    assert!(p.take(DType::F32, 10).is_none());
}

#[test]
fn the_byte_bound_evicts_oldest_first() {
    // Three size classes: 8, 10 and 12 KiB of f32s.
    let lens = [2048, 2560, 3072];
    let p = BufferPool::new(30 * 1024 + 12);
    for (i, len) in lens.into_iter().enumerate() {
        p.give(Buffer::F32(vec![i as f32; len]));
    }
    assert_eq!((p.stats().buffers, p.stats().evictions), (3, 0));
    p.give(Buffer::F32(vec![9.0; 2048])); // over the bound: the oldest goes
    let s = p.stats();
    assert_eq!((s.buffers, s.evictions), (3, 1));
    assert!(s.bytes <= s.capacity);
    assert!(p.take(DType::F32, 2048).is_some(), "the newest 8 KiB one");
    assert!(p.take(DType::F32, 2048).is_none(), "oldest evicted");
    assert!(p.take(DType::F32, 3072).is_some());
    p.give(Buffer::F32(vec![0.0; 2048]));
    p.give(Buffer::F32(vec![0.0; 1 << 20])); // bigger than the whole bound: not kept
    assert_eq!(p.stats().buffers, 2);
    p.clear();
    assert_eq!((p.stats().buffers, p.stats().bytes), (0, 0));
    p.set_capacity(0);
    p.give(Buffer::F32(vec![0.0; 2048]));
    assert_eq!(p.stats().buffers, 0, "capacity 0 disables pooling");
}

/// Fresh storage (`zeroed_vec`): zero, exactly `n` long, and from 16 MiB up
/// padded to 32 bytes short of whole 2 MiB regions (so glibc maps whole
/// regions and the OS can back all of it with huge pages), never more
/// than one region past what was asked for.
#[test]
fn fresh_storage_is_zero_and_padded_to_huge_pages_from_16_mib() {
    use tilejit_codegen::sys::{huge_page_len, zeroed_vec};
    const REGION: usize = 2 << 20;
    let glibc = cfg!(all(target_os = "linux", target_env = "gnu"));
    for (n, elem) in [(0, 4), (1, 4), (1000, 8), ((16 << 20) / 4 - 1, 4)] {
        assert_eq!(huge_page_len(n, elem), n, "{n} x {elem} B is not padded");
    }
    for (n, elem) in [
        ((16 << 20) / 4, 4),
        (8192 * 1024, 4),
        (3_000_001, 8),
        (33 << 20, 1),
    ] {
        let len = huge_page_len(n, elem);
        if !glibc {
            assert_eq!(len, n);
            continue;
        }
        assert!(
            len >= n && (len - n) * elem < REGION,
            "{n} x {elem} B -> {len}"
        );
        assert_eq!((len * elem + 32) % REGION, 0, "{n} x {elem} B -> {len}");
    }
    // W4's 32 MiB: every element readable and writable, zero at first.
    let n = 8192 * 1024;
    let mut v: Vec<f32> = zeroed_vec(n).unwrap();
    assert_eq!(v.len(), n);
    assert_eq!(v.capacity(), huge_page_len(n, 4));
    assert!(v.iter().all(|&x| x.to_bits() == 0));
    for (i, x) in v.iter_mut().enumerate() {
        *x = i as f32;
    }
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as f32));
    // A pool counts the padding it holds.
    let own = BufferPool::new(1 << 30);
    own.give(Buffer::F32(v));
    assert_eq!(own.stats().bytes, huge_page_len(n, 4) * 4);
    let b: Vec<bool> = zeroed_vec(5).unwrap();
    assert_eq!(b, [false; 5]);
    let h: Vec<half::bf16> = zeroed_vec(3 << 20).unwrap();
    assert!(h.iter().all(|x| x.to_bits() == 0));
    // An impossible size is `None`, not an abort.
    assert!(zeroed_vec::<f64>(usize::MAX / 4).is_none());
}

/// Many threads taking and giving buffers of a few sizes on one pool: the
/// bound holds after every give, every take is counted once as a hit or a
/// miss, and what the pool says it holds is what can be taken back out.
#[test]
fn threads_share_one_pool_and_its_counts_stay_exact() {
    let lens = [2048usize, 3000, 4096]; // f32s: 8, ~12 and 16 KiB
    let capacity = 5 * 12 * 1024; // less than the threads hold between them
    let p = BufferPool::new(capacity);
    let (threads, rounds) = (8usize, 300usize);
    let start = std::sync::Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (p, start) = (&p, &start);
            s.spawn(move || {
                start.wait();
                for i in 0..rounds {
                    // One buffer of each size held at once, given back in
                    // an order that varies by thread and round.
                    let mut held: Vec<Buffer> = lens
                        .iter()
                        .map(|&len| {
                            // Fresh storage fills its size class, as the
                            // runtime allocates it.
                            let b = p.take(DType::F32, len);
                            b.unwrap_or_else(|| {
                                let mut v = vec![0.0; class_len(DType::F32, len)];
                                v.truncate(len);
                                Buffer::F32(v)
                            })
                        })
                        .collect();
                    for (b, &len) in held.iter_mut().zip(&lens) {
                        assert_eq!(b.len(), len, "thread {t} round {i}");
                        if let Buffer::F32(v) = b {
                            v.fill((t * rounds + i) as f32);
                        }
                    }
                    held.rotate_left((t + i) % lens.len());
                    for b in held {
                        p.give(b);
                        assert!(p.stats().bytes <= capacity, "thread {t} round {i}");
                    }
                }
            });
        }
    });
    let st = p.stats();
    assert_eq!(st.hits + st.misses, (threads * rounds * lens.len()) as u64);
    assert!(st.hits > 0, "{st:?}");
    let (mut bytes, mut buffers) = (0, 0);
    for len in lens {
        while let Some(b) = p.take(DType::F32, len) {
            bytes += b.allocated_bytes();
            buffers += 1;
        }
    }
    assert_eq!((bytes, buffers), (st.bytes, st.buffers));
    let after = p.stats();
    assert_eq!((after.bytes, after.buffers), (0, 0));
}

/// `TILEJIT_POOL_BYTES` accepts bytes or K/M/G (binary) and nothing else:
/// a value it cannot read keeps the default (and is reported) rather than
/// silently becoming some other bound.
#[test]
fn pool_bytes_parse_plain_and_suffixed_counts_only() {
    use tilejit_ir::config::parse_bytes;
    let ok = [
        ("0", 0),
        ("1048576", 1 << 20),
        ("64K", 64 << 10),
        (" 512m ", 512 << 20),
        ("2G", 2 << 30),
    ];
    for (text, want) in ok {
        assert_eq!(parse_bytes(text), Some(want), "{text:?}");
    }
    for bad in [
        "",
        "G",
        "1.5G",
        "-1",
        "1GB",
        "1 G",
        "0x10",
        "99999999999999999999G",
    ] {
        assert_eq!(parse_bytes(bad), None, "{bad:?}");
    }
}

/// Size classes: every length fits its class, with at most a quarter of
/// slack below 8 MiB and less than one 2 MiB region above; a buffer
/// allocated at its class's length serves every length of that class, and
/// one of any other capacity serves only lengths it holds.
#[test]
fn size_classes_hold_their_lengths_and_serve_each_other() {
    let p = BufferPool::new(1 << 30);
    let mut lens: Vec<usize> = (1024..3000).step_by(7).collect();
    lens.extend((0..24).map(|i| (1usize << (12 + i / 2)) + i * 4099));
    lens.extend([(2 << 20) - 8, 2 << 20, (2 << 20) + 1, 5 << 20, 9 << 20]);
    for len in lens {
        let class = class_len(DType::F32, len);
        assert!(class >= len, "{len}");
        let (bytes, slack) = (len * 4, (class - len) * 4);
        if bytes < 8 << 20 {
            assert!(slack * 4 <= bytes, "{len} -> {class}");
        } else {
            assert!(slack < 2 << 20, "{len} -> {class}");
        }
        let mut v = vec![0.0f32; class];
        v.truncate(len);
        p.give(Buffer::F32(v));
        // The largest and the smallest length of the class both take it.
        let b = p
            .take(DType::F32, class)
            .unwrap_or_else(|| panic!("{len} -> {class}: {:?}", p.stats()));
        assert_eq!(b.len(), class);
        p.give(b);
        let smallest = (1..=len)
            .rev()
            .take_while(|&n| class_len(DType::F32, n) == class)
            .last();
        let b = p
            .take(DType::F32, smallest.unwrap())
            .expect("its smallest length");
        assert_eq!(b.len(), smallest.unwrap());
        assert_eq!(p.take(DType::F32, class + 1), None, "{len}: nothing bigger");
    }
    assert_eq!(p.stats().buffers, 0);
    // A buffer not allocated at a class boundary serves the classes below.
    p.give(Buffer::I64(vec![1; 3000]));
    assert_eq!(p.take(DType::I64, 3000), None);
    assert_eq!(p.take(DType::I64, 2500).map(|b| b.len()), Some(2500));
}

/// 10^4 results of distinct lengths, each dropped before the next (an
/// eager loop over growing inputs): keyed by size class, the pool holds a
/// handful of buffers and serves nearly every take, where keyed by exact
/// length it kept one buffer per shape (404 MiB at 10^4 shapes).
#[test]
fn ten_thousand_distinct_lengths_reuse_a_few_buffers() {
    let p = BufferPool::new(1 << 30);
    let mut held = Vec::new();
    for i in 0..10_000usize {
        let len = 10_000 + 3 * i; // 40 to 160 KB of f32s
        let b = p.take(DType::F32, len).unwrap_or_else(|| {
            let mut v = vec![0.0; class_len(DType::F32, len)];
            v.truncate(len);
            Buffer::F32(v)
        });
        assert_eq!(b.len(), len);
        // The previous result dies as the next one is made.
        held.push(b);
        if held.len() > 1 {
            p.give(held.remove(0));
        }
    }
    let s = p.stats();
    // Two buffers alternate per class, and stay behind when lengths move
    // to the next of its nine classes.
    assert!(s.misses <= 24, "{s:?}");
    assert!(s.resized_hits + 24 >= 10_000, "{s:?}");
    assert!(s.buffers <= 20 && s.bytes <= 4 << 20, "{s:?}");
}

/// The same through eager ops on the global pool: random inputs and
/// results of 1000 distinct lengths all reuse each other's storage (random
/// tensors, written whole, take from the pool too: made fresh, they only
/// ever fed it). Other tests share the pool, so only increases count.
#[test]
fn distinct_eager_shapes_reuse_nearby_buffers() {
    let _host = tilejit::mode::scoped_host();
    let before = tilejit::storage_pool().stats();
    let n = 1000u64;
    for i in 0..n as usize {
        let len = 50_000 + 13 * i; // 200 to 250 KB
        let x = Tensor::randn(&[len], i as u64);
        let y = x.relu();
        assert_eq!(y.shape(), [len]);
    }
    let after = tilejit::storage_pool().stats();
    let resized = after.resized_hits - before.resized_hits;
    assert!(resized + 20 >= 2 * n, "{before:?} -> {after:?}");
    assert!(after.bytes <= after.capacity);
}

/// A pool empties and trims; `tilejit::storage_pool()` is the global one.
#[test]
fn the_storage_pool_empties_and_trims() {
    let p = BufferPool::new(1 << 30);
    // Lengths at class boundaries: 40, 64 and 160 KiB of f64s.
    for len in [5120usize, 8192, 20_480] {
        p.give(Buffer::F64(vec![0.0; len]));
    }
    p.trim(200_000);
    let s = p.stats();
    assert_eq!((s.buffers, s.evictions), (1, 2), "the oldest go first");
    assert!(p.take(DType::F64, 20_000).is_some());
    p.give(Buffer::F64(vec![0.0; 5120]));
    p.empty();
    assert_eq!((p.stats().buffers, p.stats().bytes), (0, 0));
    // The global one (not emptied here: other tests count its hits).
    let g = tilejit::storage_pool();
    assert_eq!(g.stats().capacity, tilejit::config().ir.pool_bytes);
    assert!(g.stats().bytes <= g.stats().capacity);
}

#[test]
fn small_buffers_are_kept_per_thread_and_come_back_fitting() {
    use tilejit_ir::pool::{give_small, take_small};
    // On a fresh thread, so no other test's buffers are in its cache.
    std::thread::spawn(|| {
        assert!(take_small(DType::F32, 10).is_none());
        give_small(Buffer::F32(vec![1.0; 10]));
        give_small(Buffer::I32(vec![7; 100]));
        // Another dtype, or a length the kept one does not fit, or one it
        // would fit with too much slack: nothing.
        assert!(take_small(DType::F64, 10).is_none());
        assert!(take_small(DType::F32, 11).is_none());
        assert!(take_small(DType::I32, 8).is_none());
        let b = take_small(DType::F32, 8).unwrap();
        assert_eq!((b.dtype(), b.len()), (DType::F32, 8));
        assert!(take_small(DType::F32, 8).is_none(), "taken once");
        let b = take_small(DType::I32, 90).unwrap();
        assert_eq!((b.dtype(), b.len()), (DType::I32, 90));
        // Pooled sizes and empty buffers are not kept; a few at most are.
        give_small(Buffer::F32(vec![0.0; 4096]));
        give_small(Buffer::F32(Vec::new()));
        assert!(take_small(DType::F32, 4096).is_none());
        for _ in 0..20 {
            give_small(Buffer::U8(vec![1; 64]));
        }
        let kept = std::iter::from_fn(|| take_small(DType::U8, 64)).count();
        assert_eq!(kept, 8, "the newest eight");
        // Halves are never taken (the host computes them as f32): not kept.
        give_small(Buffer::F16(vec![half::f16::ZERO; 16]));
        assert!(take_small(DType::F16, 16).is_none());
    })
    .join()
    .unwrap();
    // Another thread's buffers are not this one's.
    std::thread::spawn(|| give_small(Buffer::I64(vec![3; 33])))
        .join()
        .unwrap();
    std::thread::spawn(|| assert!(take_small(DType::I64, 33).is_none()))
        .join()
        .unwrap();
}
