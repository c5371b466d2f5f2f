//! The caching allocator for tensor storage: buffers come back when the
//! last array holding them is dropped, a program's next run reuses them
//! (poisoned in debug builds, so a kernel that skipped an element would
//! show), and the byte bound evicts oldest first. The pool is global and
//! other tests run beside these, so counters are compared as increases.

use tilejit::prelude::*;
use tilejit_ir::pool::{pool, BufferPool};
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
    let n = 12_345; // a length no other test allocates
    let arr = Array::new(
        tilejit_ir::Shape::new(&[n]).unwrap(),
        Buffer::I64(vec![5; n]),
    )
    .unwrap();
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
    let p = BufferPool::new(3 * 8192 + 12);
    for i in 0..3 {
        p.give(Buffer::F32(vec![i as f32; 2048 + i]));
    }
    assert_eq!((p.stats().buffers, p.stats().evictions), (3, 0));
    p.give(Buffer::F32(vec![9.0; 2047])); // over the bound: the oldest goes
    let s = p.stats();
    assert_eq!((s.buffers, s.evictions), (3, 1));
    assert!(s.bytes <= s.capacity);
    assert!(p.take(DType::F32, 2048).is_none(), "oldest evicted");
    assert!(p.take(DType::F32, 2049).is_some());
    assert!(p.take(DType::F32, 2047).is_some());
    p.give(Buffer::F32(vec![0.0; 1 << 20])); // bigger than the whole bound: not kept
    assert_eq!(p.stats().buffers, 1);
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
                            let b = p.take(DType::F32, len);
                            b.unwrap_or_else(|| Buffer::F32(vec![0.0; len]))
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
