//! Helpers shared by tilejit's integration tests: tolerance checks, an
//! independent f64 reference for a few composite ops (written from their
//! textbook definitions, not from tilejit's code), golden files, a seeded
//! generator ([`Rng`]) and random graphs ([`graphs`]).

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use tilejit::prelude::*;

pub mod graphs;

pub use tilejit_testkit::{check_golden_file, golden_mismatch, reference, Rng, TempDir};

/// The report line a child test process printed after `tag` (the test
/// binary re-running itself); fails unless the child succeeded and
/// reported.
pub fn child_report(out: &std::process::Output, tag: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.split_once(tag).map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| panic!("no report from the child:\n{stdout}"))
}

/// Values of an f32 tensor, panicking with the tensor's error if it has one.
pub fn vals(t: &Tensor) -> Vec<f32> {
    match t.to_vec::<f32>() {
        Ok(v) => v,
        Err(e) => panic!("expected f32 values, got error: {e}"),
    }
}

/// A tensor from f32 values, panicking on a bad shape (test inputs are fixed).
pub fn t32(data: &[f32], shape: &[usize]) -> Tensor {
    match Tensor::from_vec(data.to_vec(), shape) {
        Ok(t) => t,
        Err(e) => panic!("bad test tensor: {e}"),
    }
}

/// Asserts `got` is within `tol` (absolute + relative) of `want`; NaN must
/// match NaN and infinities must match exactly.
#[track_caller]
pub fn assert_close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "length differs");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let g = g as f64;
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= tol * (1.0 + w.abs())
        };
        assert!(
            ok,
            "element {i}: got {g}, want {w} (tol {tol})\n got: {got:?}\nwant: {want:?}"
        );
    }
}

/// Checks a table of bad calls, each `(line!(), result, kind, needle)`:
/// every result is an error tensor of `kind` whose message holds `needle`
/// and names `file` at that line (or one of the next two, where the
/// formatter put the call below its `line!()`).
#[track_caller]
pub fn check_error_cases(file: &str, cases: Vec<(u32, Tensor, tilejit::ErrorKind, &str)>) {
    for (line, t, kind, needle) in cases {
        let e = t.error().unwrap_or_else(|| panic!("line {line}: no error"));
        let msg = e.to_string();
        assert_eq!(e.kind(), kind, "line {line}: {msg}");
        assert!(msg.contains(needle), "line {line}: {msg}");
        let at = |l: u32| msg.contains(&format!("{file}:{l}:"));
        assert!(
            at(line) || at(line + 1) || at(line + 2),
            "line {line}: {msg}"
        );
    }
}

/// Widens f32 values.
pub fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Where golden files live.
pub fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden")
}

/// Compares `actual` with `tests/golden/<name>`; `BLESS=1` rewrites the file.
#[track_caller]
pub fn check_golden(name: &str, actual: &str) {
    check_golden_file(&golden_dir().join(name), actual);
}
