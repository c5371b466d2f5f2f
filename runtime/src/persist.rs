//! Bytes in and out of files, shared by the on-disk kernel cache
//! (`kernel_cache/disk.rs`) and snapshots (`snapshot.rs`): a
//! bounds-checked little-endian [`Reader`] whose every failure is a
//! message (never a panic), the matching [`Writer`], and [`publish`],
//! which replaces a file atomically.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bounds-checked little-endian reads; every failure is a message.
pub(crate) struct Reader<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, pos: 0 }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| format!("truncated at byte {}", self.pos))?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, String> {
        let mut b = [0; 2];
        b.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(b))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        let mut b = [0; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, String> {
        let mut b = [0; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    /// A u64 length or size that must fit `usize`.
    pub(crate) fn usize(&mut self) -> Result<usize, String> {
        let v = self.u64()?;
        usize::try_from(v).map_err(|_| format!("{v} does not fit usize"))
    }

    /// A u64 length, then that many bytes.
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.usize()?;
        self.take(n)
    }

    /// [`Reader::bytes`] as UTF-8 text.
    pub(crate) fn str(&mut self) -> Result<&'a str, String> {
        let at = self.pos;
        std::str::from_utf8(self.bytes()?).map_err(|_| format!("text at byte {at} is not UTF-8"))
    }

    /// A count of items at least `min_size` bytes each, checked against
    /// the bytes left so garbage cannot make us allocate much.
    pub(crate) fn count(&mut self, min_size: usize) -> Result<usize, String> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_size.max(1)) > self.bytes.len() - self.pos {
            return Err(format!("count {n} at byte {} exceeds the file", self.pos));
        }
        Ok(n)
    }

    pub(crate) fn done(&self) -> bool {
        self.pos == self.bytes.len()
    }
}

/// Little-endian writes, [`Reader`]'s counterpart.
#[derive(Default)]
pub(crate) struct Writer {
    pub(crate) out: Vec<u8>,
}

impl Writer {
    pub(crate) fn u8(&mut self, v: u8) {
        self.out.push(v);
    }

    pub(crate) fn u16(&mut self, v: u16) {
        self.out.extend(v.to_le_bytes());
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.out.extend(v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.out.extend(v.to_le_bytes());
    }

    /// A count for [`Reader::count`] (u32).
    pub(crate) fn count(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }

    /// A u64 length, then the bytes ([`Reader::bytes`]).
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.out.extend_from_slice(b);
    }

    /// [`Writer::bytes`] of text.
    pub(crate) fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
}

/// Replaces `path` with `bytes` atomically: writes a uniquely named temp
/// file (`<name>.tmp.<pid>.<seq>`) in the same directory, fsyncs it and
/// renames it over `path`, so a reader sees the old file or the whole new
/// one, never half of it. The temp file is removed on failure.
pub(crate) fn publish(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // Unique per process and call, and `create_new`: two writers never
    // share a temp file.
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(
        "{name}.tmp.{}.{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut f = fs::File::options()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests assert by unwrapping
mod tests {
    use super::*;

    #[test]
    fn what_the_writer_writes_the_reader_reads_and_short_input_is_an_error() {
        let mut w = Writer::default();
        w.u8(7);
        w.u16(0xbeef);
        w.u32(123_456);
        w.str("héllo");
        w.count(2);
        let bytes = w.out;
        let mut r = Reader::new(&bytes);
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.u16().unwrap(), 0xbeef);
        assert_eq!(r.u32().unwrap(), 123_456);
        assert_eq!(r.str().unwrap(), "héllo");
        assert!(r.count(100).unwrap_err().contains("exceeds"));
        // Every prefix short of the count cuts a read.
        for n in 0..bytes.len() - 4 {
            let mut r = Reader::new(&bytes[..n]);
            let all = (|| -> Result<(), String> {
                r.u8()?;
                r.u16()?;
                r.u32()?;
                r.str()?;
                Ok(())
            })();
            assert!(all.is_err(), "prefix {n}");
        }
    }
}
