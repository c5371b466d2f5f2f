//! Content keys: SHA-256 over a canonical encoding of everything a
//! kernel's code depends on, as named components (the kernel's text, the
//! target, codegen options, CPU features or device config, the Cranelift
//! version and tilejit's build id). Unlike `std`'s hashers, the digest is
//! the same in every process and every Rust release, so it can name
//! files; and a miss can say which component differed from the nearest
//! entry (`TILEJIT_LOG=cache`).

use sha2::{Digest, Sha256};
use std::fmt;

/// Bumped when the encoding below changes.
const KEY_FORMAT: &str = "tilejit-kernel-key-1";

/// tilejit's version plus a digest of its code generators' sources
/// (`build.rs`).
pub const BUILD_ID: &str = env!("TILEJIT_BUILD_ID");

/// A kernel's content key: 32 bytes of SHA-256.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentKey([u8; 32]);

impl ContentKey {
    /// All 64 hex digits.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The first 16 hex digits, for file names and log lines.
    pub fn short(&self) -> String {
        self.hex()[..16].to_string()
    }
}

impl fmt::Debug for ContentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentKey({})", self.short())
    }
}

/// The named components of a key, in a fixed order.
#[derive(Clone, Debug)]
pub(crate) struct KeyParts {
    parts: Vec<(&'static str, String)>,
}

impl KeyParts {
    /// The components every key has: the key format, the target, tilejit's
    /// build and the Cranelift version.
    pub(crate) fn new(target: &str) -> KeyParts {
        KeyParts {
            parts: vec![
                ("format", KEY_FORMAT.to_string()),
                ("target", target.to_string()),
                ("tilejit", BUILD_ID.to_string()),
                ("cranelift", tilejit_codegen::CRANELIFT_VERSION.to_string()),
            ],
        }
    }

    /// Adds a component.
    pub(crate) fn with(mut self, name: &'static str, value: impl Into<String>) -> KeyParts {
        self.parts.push((name, value.into()));
        self
    }

    /// The components, in order.
    pub(crate) fn parts(&self) -> &[(&'static str, String)] {
        &self.parts
    }

    /// The key: SHA-256 over each component as (name length, name, value
    /// length, value), lengths as little-endian u64, so no two lists of
    /// components encode alike.
    pub(crate) fn key(&self) -> ContentKey {
        let mut h = Sha256::new();
        for (name, value) in &self.parts {
            h.update((name.len() as u64).to_le_bytes());
            h.update(name.as_bytes());
            h.update((value.len() as u64).to_le_bytes());
            h.update(value.as_bytes());
        }
        ContentKey(h.finalize().into())
    }

    /// Each component's own digest (8 bytes of SHA-256), to tell which
    /// components two keys differ in.
    pub(crate) fn digests(&self) -> Vec<(&'static str, [u8; 8])> {
        self.parts
            .iter()
            .map(|(name, value)| {
                let d = Sha256::digest(value.as_bytes());
                let mut short = [0u8; 8];
                short.copy_from_slice(&d[..8]);
                (*name, short)
            })
            .collect()
    }
}

/// The components in which `a` and `b` differ (one named only in either
/// counts as differing).
pub(crate) fn differing(
    a: &[(&'static str, [u8; 8])],
    b: &[(&'static str, [u8; 8])],
) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = a
        .iter()
        .filter(|(n, d)| !b.iter().any(|(m, e)| m == n && e == d))
        .map(|(n, _)| *n)
        .collect();
    for (n, _) in b {
        if !a.iter().any(|(m, _)| m == n) {
            out.push(n);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key of fixed components is fixed: a regression here means every
    /// cache file written by earlier builds stops matching.
    #[test]
    fn the_encoding_is_sha256_of_length_prefixed_components() {
        let parts = KeyParts {
            parts: vec![("a", "xy".into()), ("b", String::new())],
        };
        // SHA-256 of the 36 bytes 01 00.. 'a' 02 00.. 'xy' 01 00.. 'b' 00..,
        // from Python's hashlib.
        assert_eq!(
            parts.key().hex(),
            "3a89638b449df6c31c76c7229f47cc29f64cd7e45ff08bf1bc267279801e4220"
        );
        // Moving a byte between components changes the key.
        let moved = KeyParts {
            parts: vec![("a", "x".into()), ("b", "y".into())],
        };
        assert_ne!(parts.key(), moved.key());
    }

    #[test]
    fn differing_names_the_components_that_changed() {
        let a = KeyParts::new("host")
            .with("kernel", "k1")
            .with("cpu", "avx2");
        let b = KeyParts::new("host")
            .with("kernel", "k1")
            .with("cpu", "sse2");
        assert_eq!(differing(&a.digests(), &b.digests()), vec!["cpu"]);
        assert!(differing(&a.digests(), &a.digests()).is_empty());
    }
}
