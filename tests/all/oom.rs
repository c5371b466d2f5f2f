//! Allocations that fail part way through a run: each case runs as this
//! test binary again, alone, under an address-space limit (`ulimit -v`),
//! and sizes its tensors from the room left, so that the first big
//! allocation fits and a later one (a conversion, a temporary, a GM page)
//! does not. That one must be an E5 error naming its bytes, where it was
//! the abort `memory allocation of N bytes failed`.

use std::process::Command;
use tilejit::prelude::*;
use tilejit::ErrorKind;

/// Set in the child process, whose cases do nothing without it.
const CHILD: &str = "TILEJIT_OOM_CHILD";

/// The address-space limit of a child, in KiB.
const LIMIT_KIB: u64 = 1 << 20;

/// Runs the ignored test `name` as a child under the limit; it must pass.
fn in_child(name: &str) {
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "ulimit -v {LIMIT_KIB} && exec \"$0\" --exact \"$1\" --ignored --test-threads=1 --nocapture"
    );
    let o = Command::new("sh")
        .args(["-c", &script])
        .arg(exe)
        .arg(name)
        .env(CHILD, "1")
        // No compiler warm-up running beside the case's allocations.
        .env("TILEJIT_WARMUP", "0")
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{name}: {:?}\n{out}\n{err}", o.status);
    assert!(
        out.contains("1 passed"),
        "{name} did not run:\n{out}\n{err}"
    );
}

/// Bytes of address space left under the limit now, once every pool
/// thread has allocated: a thread's first allocation maps its malloc
/// arena (64 MiB or more of address space), and one that came after the
/// measure (a pool thread slow to start on a loaded machine) could take
/// the room meant for the allocation that must fit.
fn room() -> u64 {
    rayon::broadcast(|_| std::hint::black_box(vec![0u8; 64]));
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    (LIMIT_KIB - kib) * 1024
}

#[cfg(target_os = "linux")]
#[test]
fn an_f16_result_that_cannot_be_narrowed_is_e5() {
    in_child("oom::child_f16_result");
}

#[cfg(target_os = "linux")]
#[test]
fn an_integer_matmul_temporary_that_cannot_be_had_is_e5() {
    in_child("oom::child_int_matmul");
}

#[cfg(target_os = "linux")]
#[test]
fn a_gm_page_that_cannot_be_had_is_e5() {
    in_child("oom::child_sim_pages");
}

/// Host: the f32 storage of an f16 result fits, its f16 copy does not.
#[test]
#[ignore = "run by an_f16_result_that_cannot_be_narrowed_is_e5"]
fn child_f16_result() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let _host = tilejit::mode::scoped_host();
    let one = Tensor::ones(&[1], DType::F16);
    // Compiles the kernel and starts the threads first.
    assert_eq!(
        one.broadcast_to(&[4096])
            .to_vec::<half::f16>()
            .unwrap()
            .len(),
        4096
    );
    let n = (room() / 5) as usize; // 4n bytes of f32 fit, 4n + 2n do not
    let e = one.broadcast_to(&[n]).check().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Device, "{e}");
    let want = format!("out of host memory allocating {} bytes", 2 * n);
    assert!(e.to_string().contains(&want), "{e}");
}

/// Host: an i32 matmul's output fits, its i64 temporary does not.
#[test]
#[ignore = "run by an_integer_matmul_temporary_that_cannot_be_had_is_e5"]
fn child_int_matmul() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let _host = tilejit::mode::scoped_host();
    let small = Tensor::ones(&[4, 1], DType::I32).matmul(&Tensor::ones(&[1, 4], DType::I32));
    assert_eq!(small.to_vec::<i32>().unwrap(), [1; 16]);
    let m = 1024;
    let n = (room() / 8 / m as u64) as usize; // 4mn bytes fit, 4mn + 8mn do not
    let (a, b) = (
        Tensor::ones(&[m, 1], DType::I32),
        Tensor::ones(&[1, n], DType::I32),
    );
    let e = a.matmul(&b).check().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Device, "{e}");
    let want = format!("out of host memory allocating {} bytes", 8 * m * n);
    assert!(e.to_string().contains(&want), "{e}");
}

/// Sim: a 4 GiB result fits GM (8 GiB) but not the host memory behind
/// GM's pages.
#[test]
#[ignore = "run by a_gm_page_that_cannot_be_had_is_e5"]
fn child_sim_pages() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let one = Tensor::ones(&[1], DType::F32);
    // Starts the device's threads first: GM's pages are kept once made, so
    // after the failure there is no room left to start them.
    let t = with_mode(RunMode::Sim, || one.broadcast_to(&[3]));
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.0; 3]);
    let t = with_mode(RunMode::Sim, || one.broadcast_to(&[1 << 30]));
    let e = t.check().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Device, "{e}");
    let want = "out of host memory allocating 262144 bytes for simulated memory pages";
    assert!(e.to_string().contains(want), "{e}");
    // The process goes on, and so does the device.
    let t = with_mode(RunMode::Sim, || one.broadcast_to(&[3]));
    assert_eq!(t.to_vec::<f32>().unwrap(), [1.0; 3]);
}
