//! The cache as a table (`Display`): one line of totals, then one row per
//! entry, most recently used first. Long kernel and program names are cut
//! to their column with `…`, so rows stay aligned.

use super::KernelCache;
use std::fmt;

/// `s` in at most `width` characters: cut with `…` when longer.
fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

impl fmt::Display for KernelCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries = self.entries();
        let s = self.stats();
        writeln!(
            f,
            "kernel cache: {} entries, {} code bytes; {} hits, {} misses, {} compiles ({:.2} ms), {} evictions",
            entries.len(),
            s.bytes,
            s.hits,
            s.misses,
            s.compiles,
            s.compile_time.as_secs_f64() * 1e3,
            s.evictions
        )?;
        writeln!(
            f,
            "  disk: {} hits, {} misses ({} rejected), {} writes; {} loaded from snapshots",
            s.disk_hits, s.disk_misses, s.disk_rejected, s.disk_writes, s.snapshot_loads
        )?;
        writeln!(
            f,
            "  {:<36} {:<28} {:<16} {:>6} {:>8} {:>6} {:>9} {:>10}",
            "name", "first compiled for", "key", "target", "bytes", "hits", "launches", "compile"
        )?;
        for e in entries {
            writeln!(
                f,
                "  {:<36} {:<28} {:<16} {:>6} {:>8} {:>6} {:>9} {:>8.3}ms",
                fit(&e.name, 36),
                fit(&e.program, 28),
                &e.key[..e.key.len().min(16)],
                e.target.to_string(),
                e.code_bytes,
                e.hits,
                e.launches,
                e.compile_time.as_secs_f64() * 1e3
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_names_are_cut_to_their_column() {
        use super::fit;
        assert_eq!(fit("fused_exp", 36), "fused_exp");
        let long = "fused_reduce_sum_div_sub_mul_reduce_sum_and_5_more";
        let cut = fit(long, 36);
        assert_eq!(cut.chars().count(), 36);
        assert!(cut.ends_with('…') && long.starts_with(cut.trim_end_matches('…')));
    }
}
