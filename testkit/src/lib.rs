//! Test helpers shared by the workspace's test suites (tilejit-tests and
//! tilejit-device's, which cannot depend on each other): a seeded
//! generator, golden files with a `BLESS=1` switch, and f64 references for
//! composite ops written from their textbook definitions.

#![allow(clippy::unwrap_used)] // test support: a failure is a test failure

pub mod onnx;

/// A xorshift generator: random values that a seed reproduces.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)] // not an iterator: it never ends
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Row-major f64 reference implementations of composite ops.
pub mod reference {
    /// `[m,k] x [k,n]`.
    pub fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|t| a[i * k + t] * b[t * n + j]).sum();
            }
        }
        out
    }

    /// Row softmax of `[rows, cols]`.
    pub fn softmax(x: &[f64], cols: usize) -> Vec<f64> {
        x.chunks(cols)
            .flat_map(|row| {
                let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = row.iter().map(|v| (v - m).exp()).collect();
                let s: f64 = e.iter().sum();
                e.into_iter().map(move |v| v / s)
            })
            .collect()
    }

    /// Layer norm over rows of `[rows, cols]` with gamma/beta `[cols]`.
    pub fn layer_norm(x: &[f64], g: &[f64], b: &[f64], cols: usize, eps: f64) -> Vec<f64> {
        x.chunks(cols)
            .flat_map(|row| {
                let mean = row.iter().sum::<f64>() / cols as f64;
                let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / cols as f64;
                let inv = 1.0 / (var + eps).sqrt();
                row.iter()
                    .enumerate()
                    .map(move |(j, v)| (v - mean) * inv * g[j] + b[j])
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// GELU, tanh approximation.
    pub fn gelu(x: f64) -> f64 {
        0.5 * x * (1.0 + (0.7978845608 * (x + 0.044715 * x * x * x)).tanh())
    }
}

/// Compares `actual` with the file at `path`; `BLESS=1` rewrites the file.
#[track_caller]
pub fn check_golden_file(path: &std::path::Path, actual: &str) {
    if let Some(message) = golden_mismatch(path, actual) {
        panic!("{message}");
    }
}

/// What [`check_golden_file`] would panic with, or `None` when `actual`
/// matches the file (or `BLESS=1` has just written it), so a test over a
/// directory can report every mismatching file at once.
pub fn golden_mismatch(path: &std::path::Path, actual: &str) -> Option<String> {
    if std::env::var_os("BLESS").is_some_and(|v| v == "1") {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create golden dir");
        }
        std::fs::write(path, actual).expect("write golden file");
        return None;
    }
    let Ok(expected) = std::fs::read_to_string(path) else {
        return Some(format!(
            "golden file {} is missing; rerun the test with `BLESS=1` to create it",
            path.display()
        ));
    };
    if expected == actual {
        return None;
    }
    let mut diff = String::new();
    for (i, (e, a)) in expected.lines().zip(actual.lines()).enumerate() {
        if e != a {
            diff.push_str(&format!("line {}:\n  - {e}\n  + {a}\n", i + 1));
        }
    }
    let (ne, na) = (expected.lines().count(), actual.lines().count());
    if ne != na {
        diff.push_str(&format!("line count: expected {ne}, actual {na}\n"));
    }
    Some(format!(
        "golden mismatch for {}:\n{diff}\nif the change is intended, rerun the test with `BLESS=1`",
        path.display()
    ))
}

/// A fresh directory under the system temp dir (unique per process, tag
/// and moment), removed on drop, a failing test's too.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    /// Makes one; `tag` names it for whoever finds it left behind.
    pub fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("tilejit-test-{tag}-{}-{nanos}", std::process::id()));
        // Private (0700), whatever the umask: a disk cache directory
        // writable by group or others is refused.
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}
