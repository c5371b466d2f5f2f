//! The on-disk kernel cache: one self-checking file per entry, so a later
//! process (or a concurrent one) skips compiles this one did.
//!
//! Files live in `<dir>/v<FORMAT_VERSION>/<key hex>.tjk`, `<dir>` from
//! `TILEJIT_CACHE_DIR` (see `crate::config`). A file is, little
//! endian:
//!
//! ```text
//! "TJKC" u32:format-version
//! u32:n_parts { u32:len name u32:len value }   the key's components, as text
//! u64:len payload                              the backend's encoding
//! [u8; 32] SHA-256 of every byte before it
//! ```
//!
//! Publishing writes a uniquely named temp file in the same directory,
//! fsyncs it and renames it over the final name, so a reader sees a whole
//! entry or none, and racing writers of one key leave one of their (equal)
//! files. Reading checks the length, magic, version, checksum and that
//! every key component equals the expected one; any failure is a
//! [`Miss`] with a reason, never an error: the caller compiles and
//! replaces the file. Every I/O error is swallowed the same way, so a
//! read-only or full disk only costs caching. The directory is bounded in
//! bytes: after a process's first write and every 64th, the least
//! recently used files (by mtime, which a hit touches) go until it fits.
//!
//! The cache is trusted like any code directory: whoever can write it can
//! make this process run their machine code (device programs are still
//! verified). So it is created private to the user (mode 0700), and, as
//! ssh treats `~/.ssh`, used only if [`check_dir`] accepts it and its
//! versioned subfolder: an absolute path (a relative one would name
//! another directory in every working directory), a directory owned by
//! this user and writable by neither group nor others. Otherwise the
//! process says why once on stderr and runs with the disk cache off.

use super::key::{ContentKey, KeyParts};
use crate::persist::Reader;
use sha2::{Digest, Sha256};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// File magic.
const MAGIC: &[u8; 4] = b"TJKC";
/// Bumped when the file layout or a payload encoding changes; it names the
/// subfolder too, so builds of different formats never read each other.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Temp files older than this were left by a crashed writer.
const STALE_TEMP: Duration = Duration::from_secs(3600);
const EXT: &str = "tjk";
/// A process trims the directory at its first write and every this many
/// after: a scan stats every file, too slow to repeat per write of a
/// cache of thousands, and the bound may overshoot by only this many.
const TRIM_EVERY: u64 = 64;

/// Why a lookup found no usable entry.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Miss {
    /// No file (or it could not be opened).
    Absent,
    /// A file that cannot be used; it will be replaced.
    Rejected(String),
}

impl fmt::Display for Miss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Miss::Absent => f.write_str("no file"),
            Miss::Rejected(why) => f.write_str(why),
        }
    }
}

/// One cache directory.
#[derive(Debug)]
pub(crate) struct DiskCache {
    /// The versioned subfolder holding the files.
    dir: PathBuf,
    max_bytes: u64,
    /// Writes by this process, to pace `trim`.
    writes: AtomicU64,
    trim_every: u64,
    /// The root given (`dir`'s parent), checked with `dir`.
    root: PathBuf,
    /// Both directories passed [`check_dir`] (checked until they exist).
    trusted: AtomicBool,
    /// One failed [`check_dir`]: the cache is off for the process.
    refused: AtomicBool,
}

/// Why `dir` must not hold machine code this process will run, or `Ok`
/// (also when it does not exist yet: this process creates it private).
/// Like ssh's checks of `~/.ssh`: an absolute path, a directory, owned by
/// the effective user, not writable by group or others.
pub(crate) fn check_dir(dir: &Path) -> Result<(), String> {
    if !dir.is_absolute() {
        return Err(format!(
            "`{}` is a relative path (it would name another directory in every working directory); give an absolute one",
            dir.display()
        ));
    }
    let meta = match fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("`{}` cannot be read: {e}", dir.display())),
    };
    if !meta.is_dir() {
        return Err(format!("`{}` is not a directory", dir.display()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let me = tilejit_codegen::sys::effective_uid();
        if meta.uid() != me {
            return Err(format!(
                "`{}` is owned by uid {}, not by this user (uid {me}): its owner could choose the machine code this process runs",
                dir.display(),
                meta.uid()
            ));
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o022 != 0 {
            return Err(format!(
                "`{}` has mode {mode:04o}: writable by {}, who could then choose the machine code this process runs (`chmod go-w` it)",
                dir.display(),
                if mode & 0o002 != 0 { "anyone" } else { "its group" }
            ));
        }
        // As ssh's StrictModes: a directory above it that another user
        // owns, or may write without the sticky bit (as /tmp has), lets
        // them rename it away and put their own in its place.
        for above in dir.ancestors().skip(1) {
            let Ok(m) = fs::metadata(above) else {
                continue;
            };
            let mode = m.mode() & 0o7777;
            let owner_ok = m.uid() == me || m.uid() == 0;
            let shared = mode & 0o022 != 0 && mode & 0o1000 == 0;
            if !owner_ok || shared {
                return Err(format!(
                    "`{}` lies under `{}` (uid {}, mode {mode:04o}), which {} could replace with a directory of their own (`chmod go-w` it, or move the cache)",
                    dir.display(),
                    above.display(),
                    m.uid(),
                    if owner_ok { "another user" } else { "its owner" }
                ));
            }
        }
    }
    Ok(())
}

impl DiskCache {
    /// The cache `TILEJIT_CACHE_DIR` (or its default) names, bounded by
    /// `TILEJIT_CACHE_BYTES`, if on and [`check_dir`] accepts it (else a
    /// line on stderr says why it is off).
    pub(crate) fn from_config() -> Option<DiskCache> {
        let c = crate::config::config();
        let root = c.cache_dir.clone()?;
        if c.cache_bytes == 0 {
            return None;
        }
        let disk = DiskCache::at(&root, c.cache_bytes);
        // Says why on stderr if refused; a directory that does not exist
        // yet is no refusal (it is checked again once made).
        disk.trusted();
        (!disk.refused.load(Ordering::Relaxed)).then_some(disk)
    }

    /// Whether the directories passed [`check_dir`] and exist; a failed
    /// check turns the cache off for good, said once on stderr.
    fn trusted(&self) -> bool {
        if self.trusted.load(Ordering::Acquire) {
            return true;
        }
        if self.refused.load(Ordering::Relaxed) {
            return false;
        }
        match check_dir(&self.root).and_then(|()| check_dir(&self.dir)) {
            Ok(()) if self.dir.is_dir() => {
                self.trusted.store(true, Ordering::Release);
                true
            }
            Ok(()) => false,
            Err(why) => {
                if !self.refused.swap(true, Ordering::Relaxed) {
                    eprintln!("[tilejit] disk cache off: {why}");
                }
                false
            }
        }
    }

    /// Whether the cache refused its directory.
    #[cfg(test)]
    pub(crate) fn is_refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }

    /// A cache under `root`, bounded to `max_bytes`.
    pub(crate) fn at(root: &Path, max_bytes: u64) -> DiskCache {
        DiskCache {
            dir: root.join(format!("v{FORMAT_VERSION}")),
            max_bytes,
            writes: AtomicU64::new(0),
            trim_every: TRIM_EVERY,
            root: root.to_path_buf(),
            trusted: AtomicBool::new(false),
            refused: AtomicBool::new(false),
        }
    }

    /// Whether the directory holds any entry (of any build): then the
    /// process's kernels will likely load rather than compile.
    pub(crate) fn has_entries(&self) -> bool {
        std::fs::read_dir(&self.dir).is_ok_and(|mut d| {
            d.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == EXT)))
        })
    }

    /// The file of `key`.
    pub(crate) fn path(&self, key: &ContentKey) -> PathBuf {
        self.dir.join(format!("{}.{EXT}", key.hex()))
    }

    /// The payload stored under `key`, if its file is whole and was
    /// written for exactly `parts`. A hit marks the file recently used.
    pub(crate) fn load(&self, key: &ContentKey, parts: &KeyParts) -> Result<Vec<u8>, Miss> {
        if !self.trusted() {
            return Err(Miss::Absent);
        }
        let path = self.path(key);
        let bytes = tilejit_ir::fallible::read_file(&path).map_err(|_| Miss::Absent)?;
        let payload = parse(&bytes, parts).map_err(Miss::Rejected)?;
        // Best effort: a failed touch only makes eviction less exact.
        if let Ok(f) = fs::File::options().append(true).open(&path) {
            let _ = f.set_modified(SystemTime::now());
        }
        Ok(payload.to_vec())
    }

    /// Publishes `payload` under `key` atomically, then (at times) trims
    /// the directory to its bound. False if anything failed (nothing is left
    /// half written either way).
    pub(crate) fn store(&self, key: &ContentKey, parts: &KeyParts, payload: &[u8]) -> bool {
        let bytes = encode(parts, payload);
        if bytes.len() as u64 > self.max_bytes || self.publish(key, &bytes).is_err() {
            return false;
        }
        if self
            .writes
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(self.trim_every)
        {
            self.trim();
        }
        true
    }

    fn publish(&self, key: &ContentKey, bytes: &[u8]) -> std::io::Result<()> {
        if self.refused.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("the cache directory was refused"));
        }
        create_private_dir(&self.dir)?;
        if !self.trusted() {
            return Err(std::io::Error::other("the cache directory was refused"));
        }
        crate::persist::publish(&self.path(key), bytes)
    }

    /// Deletes least recently used entries until the directory fits its
    /// bound, and temp files a crashed writer left behind.
    fn trim(&self) {
        let Ok(dir) = fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        let mut files = Vec::new();
        for e in dir.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            let mtime = meta.modified().unwrap_or(now);
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.contains(".tmp.") {
                if now.duration_since(mtime).is_ok_and(|age| age > STALE_TEMP) {
                    let _ = fs::remove_file(e.path());
                }
            } else if name.ends_with(EXT) && meta.is_file() {
                files.push((mtime, meta.len(), e.path()));
            }
        }
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, path) in files {
            if total <= self.max_bytes {
                break;
            }
            // Another process may have removed it already: either way it
            // no longer counts.
            let _ = fs::remove_file(path);
            total -= len;
        }
    }
}

/// The directory, readable only by its owner where permissions exist.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// A whole file's bytes.
fn encode(parts: &KeyParts, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 256);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(parts.parts().len() as u32).to_le_bytes());
    for (name, value) in parts.parts() {
        for s in [name.as_bytes(), value.as_bytes()] {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s);
        }
    }
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

/// The payload of a file's bytes, or why they are unusable for `parts`.
fn parse<'a>(bytes: &'a [u8], parts: &KeyParts) -> Result<&'a [u8], String> {
    if bytes.len() < 8 + 32 {
        return Err(format!("truncated ({} bytes)", bytes.len()));
    }
    if &bytes[..4] != MAGIC {
        return Err("not a tilejit cache file (bad magic)".into());
    }
    let version = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    if version != FORMAT_VERSION {
        return Err(format!(
            "format version {version} (this build reads {FORMAT_VERSION})"
        ));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(body).as_slice() != sum {
        return Err("checksum mismatch (truncated or corrupt)".into());
    }
    let mut r = Reader::new(body);
    r.pos = 8;
    let n = r.u32()? as usize;
    if n != parts.parts().len() {
        return Err(format!(
            "{n} key components (expected {})",
            parts.parts().len()
        ));
    }
    for (name, value) in parts.parts() {
        let len = r.u32()? as usize;
        let got_name = r.take(len)?;
        let len = r.u32()? as usize;
        let got_value = r.take(len)?;
        if got_name != name.as_bytes() || got_value != value.as_bytes() {
            return Err(format!("key component `{name}` differs"));
        }
    }
    let len = r.u64()?;
    let payload = r.take(usize::try_from(len).map_err(|_| "payload too long")?)?;
    if r.pos != body.len() {
        return Err("trailing bytes after the payload".into());
    }
    Ok(payload)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests assert by unwrapping
pub(crate) mod tests {
    use super::*;

    pub(crate) fn temp_root(tag: &str) -> PathBuf {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        std::env::temp_dir().join(format!("tilejit-disk-{tag}-{}-{nanos}", std::process::id()))
    }

    fn parts(kernel: &str) -> KeyParts {
        KeyParts::new("sim").with("kernel", kernel.to_string())
    }

    /// What the compiler warm-up asks before it starts: only a stored
    /// entry counts, not a missing directory or a temp file.
    #[test]
    fn has_entries_sees_only_stored_entries() {
        let root = temp_root("entries");
        let disk = DiskCache::at(&root, crate::config::DEFAULT_CACHE_BYTES);
        assert!(!disk.has_entries(), "no directory yet");
        fs::create_dir_all(&disk.dir).unwrap();
        fs::write(disk.dir.join("left.tmp"), b"x").unwrap();
        assert!(!disk.has_entries(), "a temp file is no entry");
        let p = parts("k");
        assert!(disk.store(&p.key(), &p, b"payload"));
        assert!(disk.has_entries());
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn a_stored_entry_loads_back_and_anything_else_is_a_miss() {
        let root = temp_root("roundtrip");
        let disk = DiskCache::at(&root, crate::config::DEFAULT_CACHE_BYTES);
        let p = parts("k1");
        let key = p.key();
        assert_eq!(disk.load(&key, &p), Err(Miss::Absent));
        assert!(disk.store(&key, &p, b"payload"));
        assert_eq!(disk.load(&key, &p).as_deref(), Ok(&b"payload"[..]));
        // No temp file is left behind.
        let names: Vec<_> = fs::read_dir(&disk.dir).unwrap().flatten().collect();
        assert_eq!(names.len(), 1);

        let good = fs::read(disk.path(&key)).unwrap();
        let reject = |bytes: &[u8], why: &str| {
            fs::write(disk.path(&key), bytes).unwrap();
            match disk.load(&key, &p) {
                Err(Miss::Rejected(r)) => assert!(r.contains(why), "{r} (wanted {why})"),
                other => panic!("{other:?} (wanted {why})"),
            }
        };
        reject(&good[..good.len() - 1], "checksum");
        reject(&good[..5], "truncated");
        reject(b"garbage garbage garbage garbage garbage garbage", "magic");
        let mut flipped = good.clone();
        flipped[good.len() / 2] ^= 1;
        reject(&flipped, "checksum");
        let mut version = good.clone();
        version[4] = 9;
        reject(&version, "format version 9");
        // A file stored under this key for other components (a collision,
        // or a renamed file) is refused.
        let other = parts("k2");
        fs::write(disk.path(&key), encode(&other, b"payload")).unwrap();
        assert!(matches!(disk.load(&key, &p), Err(Miss::Rejected(r)) if r.contains("`kernel`")));
        let _ = fs::remove_dir_all(root);
    }

    #[test]
    fn the_directory_keeps_to_its_bound_dropping_least_recently_used() {
        let root = temp_root("bound");
        let payload = vec![7u8; 1000];
        let one = encode(&parts("k0"), &payload).len() as u64;
        // Room for three entries.
        let mut disk = DiskCache::at(&root, 3 * one + one / 2);
        disk.trim_every = 1;
        let keys: Vec<_> = (0..4).map(|i| parts(&format!("k{i}"))).collect();
        let old = SystemTime::now() - Duration::from_secs(100);
        for (i, p) in keys[..3].iter().enumerate() {
            assert!(disk.store(&p.key(), p, &payload));
            let f = fs::File::options()
                .append(true)
                .open(disk.path(&p.key()))
                .unwrap();
            f.set_modified(old + Duration::from_secs(i as u64)).unwrap();
        }
        // A hit makes k0 the most recently used: k1 is the oldest now.
        assert!(disk.load(&keys[0].key(), &keys[0]).is_ok());
        assert!(disk.store(&keys[3].key(), &keys[3], &payload));
        let present: Vec<bool> = keys.iter().map(|p| disk.path(&p.key()).exists()).collect();
        assert_eq!(present, [true, false, true, true]);
        let _ = fs::remove_dir_all(root);
    }

    /// As ssh checks `~/.ssh`: a relative path, a directory writable by
    /// its group or by anyone, or one owned by another user is refused
    /// with the reason, and the cache then neither reads nor writes it
    /// (even entries a trusted process stored there before).
    #[cfg(unix)]
    #[test]
    fn an_untrusted_directory_is_refused_with_its_reason() {
        use std::os::unix::fs::PermissionsExt;
        let why = |p: &Path| check_dir(p).unwrap_err();
        assert!(why(Path::new("rel/cache")).contains("relative path"));
        assert!(why(Path::new("cache")).contains("absolute"));
        let root = temp_root("modes");
        assert_eq!(check_dir(&root), Ok(()), "absent: created private");
        let disk = DiskCache::at(&root, crate::config::DEFAULT_CACHE_BYTES);
        let p = parts("k");
        assert!(disk.store(&p.key(), &p, b"payload"));
        assert_eq!(
            fs::metadata(&root).unwrap().permissions().mode() & 0o777,
            0o700
        );
        for (mode, who) in [(0o770, "its group"), (0o757, "anyone"), (0o777, "anyone")] {
            fs::set_permissions(&root, fs::Permissions::from_mode(mode)).unwrap();
            let r = why(&root);
            assert!(r.contains(&format!("{mode:04o}")) && r.contains(who), "{r}");
            // A fresh process's cache (checked once) refuses it.
            let disk = DiskCache::at(&root, crate::config::DEFAULT_CACHE_BYTES);
            assert_eq!(disk.load(&p.key(), &p), Err(Miss::Absent));
            assert!(disk.is_refused());
            assert!(!disk.store(&p.key(), &p, b"other"));
        }
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        let disk = DiskCache::at(&root, crate::config::DEFAULT_CACHE_BYTES);
        assert_eq!(disk.load(&p.key(), &p).as_deref(), Ok(&b"payload"[..]));
        // Owned by someone else: root's `/` for anyone else; for root, a
        // directory given to another uid.
        let me = tilejit_codegen::sys::effective_uid();
        let foreign = if me == 0 {
            let d = root.join("foreign");
            fs::create_dir(&d).unwrap();
            std::os::unix::fs::chown(&d, Some(4321), None).unwrap();
            d
        } else {
            PathBuf::from("/")
        };
        let r = why(&foreign);
        assert!(
            r.contains("owned by uid") && r.contains("not by this user"),
            "{r}"
        );
        // A private directory under a shared, writable one is refused; the
        // sticky bit (as /tmp's) makes the shared one safe.
        fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
        let shared = root.join("shared");
        let inner = shared.join("cache");
        fs::create_dir_all(&inner).unwrap();
        fs::set_permissions(&inner, fs::Permissions::from_mode(0o700)).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
        let r = why(&inner);
        assert!(r.contains("lies under") && r.contains("0777"), "{r}");
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(check_dir(&inner), Ok(()));
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn an_unwritable_directory_only_costs_caching() {
        let root = temp_root("unwritable");
        // A file where the directory should be: every create fails.
        fs::write(&root, b"not a directory").unwrap();
        let disk = DiskCache::at(&root, crate::config::DEFAULT_CACHE_BYTES);
        let p = parts("k");
        assert!(!disk.store(&p.key(), &p, b"x"));
        assert_eq!(disk.load(&p.key(), &p), Err(Miss::Absent));
        let _ = fs::remove_file(root);
    }
}
