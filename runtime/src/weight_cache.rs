//! Weights prepared once and kept, keyed by the storage they came from:
//! a host 3x3 convolution's weights Winograd-transformed, a matmul's
//! right operand or a late-layer convolution's weights packed in panels,
//! found here by every later call with
//! the same argument or constant (as onnxruntime prepacks a session's
//! initializers once). Weights are kept from their second sighting on:
//! the first call with a storage only notes it, so an operand seen once
//! (an activation that an eager matmul takes as an argument, weights that
//! change every step) costs no transform and no memory. An array's
//! storage is never written after it is made, so its identity names its
//! values; each entry holds a weak handle to it ([`StorageRef`]), so
//! while the entry exists no other storage can take that address, and an
//! entry whose storage is gone is dropped at the next miss or first
//! sighting (or every 64th lookup). Bounded in bytes
//! (`TILEJIT_WEIGHT_CACHE_BYTES`), least recently used first.
//!
//! ```
//! let cache = tilejit_runtime::weight_cache();
//! let before = cache.stats();
//! cache.clear();
//! assert_eq!(cache.stats().bytes, 0);
//! assert!(cache.stats().hits >= before.hits);
//! ```

use crate::error::RuntimeError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use tilejit_codegen::host::{GemmView, PackedPanels, WinogradForm, WinogradWeights};
use tilejit_ir::{Array, StorageRef};

/// The kept prepared weights (see the module docs); safe to use from
/// any thread.
pub struct WeightCache {
    inner: Mutex<Inner>,
}

/// Counters of the weight cache.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WeightCacheStats {
    /// Lookups that found their weights prepared.
    pub hits: u64,
    /// Lookups that prepared them (the storage's second sighting).
    pub misses: u64,
    /// First sightings of a storage: noted, nothing made.
    pub first_sightings: u64,
    /// Entries dropped for the bound.
    pub evictions: u64,
    /// Entries dropped because their storage was freed.
    pub freed: u64,
    /// Entries held now.
    pub entries: usize,
    /// Bytes of prepared weights held now.
    pub bytes: usize,
}

/// What an entry was made from: the storage, how the weights were read
/// from it (offset, rows, columns, row and column strides) and what was
/// made (Winograd weights of so many input channels in a form, or
/// panels: `None`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct Key {
    addr: usize,
    view: [usize; 5],
    winograd: Option<(usize, WinogradForm)>,
}

/// What an entry holds.
#[derive(Clone)]
enum Kept {
    Winograd(Arc<WinogradWeights>),
    Panels(Arc<PackedPanels>),
}

impl Kept {
    fn bytes(&self) -> usize {
        match self {
            Kept::Winograd(w) => w.bytes(),
            Kept::Panels(p) => p.bytes(),
        }
    }
}

struct Entry {
    owner: StorageRef,
    weights: Kept,
    used: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Key, Entry>,
    /// Keys seen once, with their storage (at most [`SEEN`]).
    seen: HashMap<Key, StorageRef>,
    stats: WeightCacheStats,
    tick: u64,
}

/// The most first sightings remembered: past it those of freed storage
/// go, and if that is not enough, all of them (a storage then needs two
/// more sightings).
const SEEN: usize = 4096;

/// The process's weight cache.
pub fn weight_cache() -> &'static WeightCache {
    static CACHE: OnceLock<WeightCache> = OnceLock::new();
    CACHE.get_or_init(WeightCache::new)
}

impl WeightCache {
    fn new() -> WeightCache {
        WeightCache {
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The counters now.
    pub fn stats(&self) -> WeightCacheStats {
        let inner = self.lock();
        WeightCacheStats {
            entries: inner.entries.len(),
            ..inner.stats.clone()
        }
    }

    /// Drops every entry and sighting (the counters stay).
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.entries.clear();
        inner.seen.clear();
        inner.stats.bytes = 0;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // An entry is inserted whole under the lock: a panic elsewhere
        // leaves the map consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The Winograd weights of `w`'s elements read through `wv` for `c`
    /// input channels in `form` ([`WinogradWeights::kept`]):
    /// found, or transformed (outside the lock) and kept within `bound`
    /// bytes. None on the storage's first sighting, and when `bound` is 0.
    pub(crate) fn winograd(
        &self,
        w: &Array,
        wv: GemmView,
        c: usize,
        form: WinogradForm,
        bound: usize,
    ) -> Result<Option<Arc<WinogradWeights>>, RuntimeError> {
        let made = self.get_or_make(w, wv, Some((c, form)), bound, |values| {
            Ok(Kept::Winograd(Arc::new(WinogradWeights::kept(
                values, wv, c, form,
            )?)))
        })?;
        Ok(made.and_then(|k| match k {
            Kept::Winograd(u) => Some(u),
            Kept::Panels(_) => None,
        }))
    }

    /// `w`'s elements read through `wv` (`[k, n]`) packed in panels for
    /// `matmul_f32_panels`: found, or packed and kept within `bound`
    /// bytes. None on the storage's first sighting, and when `bound` is
    /// 0.
    pub(crate) fn panels(
        &self,
        w: &Array,
        wv: GemmView,
        bound: usize,
    ) -> Result<Option<Arc<PackedPanels>>, RuntimeError> {
        let made = self.get_or_make(w, wv, None, bound, |values| {
            Ok(Kept::Panels(Arc::new(PackedPanels::new(values, wv)?)))
        })?;
        Ok(made.and_then(|k| match k {
            Kept::Panels(p) => Some(p),
            Kept::Winograd(_) => None,
        }))
    }

    /// The entry for `w`, `wv` and `winograd`: found, or on the
    /// storage's second sighting made by `make` from `w`'s values outside
    /// the lock and kept within `bound`.
    fn get_or_make(
        &self,
        w: &Array,
        wv: GemmView,
        winograd: Option<(usize, WinogradForm)>,
        bound: usize,
        make: impl FnOnce(&[f32]) -> Result<Kept, RuntimeError>,
    ) -> Result<Option<Kept>, RuntimeError> {
        if bound == 0 {
            return Ok(None);
        }
        let key = Key {
            addr: w.storage_addr(),
            view: [wv.offset, wv.rows, wv.cols, wv.row_stride, wv.col_stride],
            winograd,
        };
        {
            let mut inner = self.lock();
            inner.tick += 1;
            let tick = inner.tick;
            // Now and then on hits too, so freed weights' transforms go
            // even when nothing new is kept.
            if tick.is_multiple_of(64) {
                inner.drop_freed();
            }
            if let Some(e) = inner.entries.get_mut(&key).filter(|e| e.owner.names(w)) {
                e.used = tick;
                let weights = e.weights.clone();
                inner.stats.hits += 1;
                return Ok(Some(weights));
            }
            let again = inner.seen.remove(&key).is_some_and(|s| s.names(w));
            if !again {
                inner.drop_freed();
                if inner.seen.len() >= SEEN {
                    inner.seen.retain(|_, s| s.is_alive());
                    if inner.seen.len() >= SEEN {
                        inner.seen.clear();
                    }
                }
                inner.seen.insert(key, w.storage_ref());
                inner.stats.first_sightings += 1;
                return Ok(None);
            }
            inner.stats.misses += 1;
        }
        let weights = make(w.as_slice::<f32>()?)?;
        let size = weights.bytes();
        let mut inner = self.lock();
        inner.drop_freed();
        if size > bound {
            return Ok(Some(weights));
        }
        while inner.stats.bytes + size > bound {
            if !inner.evict_one() {
                break;
            }
        }
        let tick = inner.tick;
        let entry = Entry {
            owner: w.storage_ref(),
            weights: weights.clone(),
            used: tick,
        };
        if let Some(old) = inner.entries.insert(key, entry) {
            inner.stats.bytes -= old.weights.bytes();
        }
        inner.stats.bytes += size;
        Ok(Some(weights))
    }
}

impl Inner {
    /// Drops the entries whose storage is gone.
    fn drop_freed(&mut self) {
        let before = self.entries.len();
        let mut bytes = 0;
        self.entries.retain(|_, e| {
            let alive = e.owner.is_alive();
            if !alive {
                bytes += e.weights.bytes();
            }
            alive
        });
        self.stats.freed += (before - self.entries.len()) as u64;
        self.stats.bytes -= bytes;
    }

    /// Drops the least recently used entry; false when there is none.
    fn evict_one(&mut self) -> bool {
        let Some(key) = self
            .entries
            .iter()
            .min_by_key(|(_, e)| e.used)
            .map(|(k, _)| *k)
        else {
            return false;
        };
        if let Some(e) = self.entries.remove(&key) {
            self.stats.bytes -= e.weights.bytes();
            self.stats.evictions += 1;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilejit_codegen::host::{WinogradLayout, WinogradTile};
    const F4: WinogradForm = WinogradForm {
        tile: WinogradTile::F4x4,
        layout: WinogradLayout::Panels,
    };

    /// OIHW 3x3 weights of `o` outputs and `c` channels, and their view.
    fn weights(o: usize, c: usize, seed: usize) -> (Array, GemmView) {
        let v: Vec<f32> = (0..o * c * 9)
            .map(|i| ((i * 7 + seed) % 11) as f32 - 5.0)
            .collect();
        let view = GemmView::row_major(o, c * 9);
        (Array::from_vec(v, &[o, c, 3, 3]).expect("weights"), view)
    }

    /// The weights kept for `w`: a first sighting makes nothing, the
    /// second makes them.
    fn kept(cache: &WeightCache, w: &Array, v: GemmView, c: usize) -> Arc<WinogradWeights> {
        if let Some(u) = cache.winograd(w, v, c, F4, 1 << 30).expect("ok") {
            return u;
        }
        let u = cache.winograd(w, v, c, F4, 1 << 30).expect("ok");
        u.expect("kept on the second sighting")
    }

    /// A storage's first sighting makes nothing; the second transforms
    /// and keeps; later lookups of the same storage and view are hits (the
    /// same transform), a reshaped clone sharing the storage too; another
    /// view or other storage with equal values is another entry; an entry
    /// goes once its storage is freed, and a bound of 0 keeps nothing.
    #[test]
    fn entries_are_found_by_storage_and_view_and_go_with_it() {
        let cache = WeightCache::new();
        let (w, view) = weights(16, 16, 1);
        let bound = 1 << 30;
        assert!(cache
            .winograd(&w, view, 16, F4, bound)
            .expect("ok")
            .is_none());
        let first = kept(&cache, &w, view, 16);
        let again = kept(&cache, &w, view, 16);
        assert!(Arc::ptr_eq(&first, &again));
        let reshaped = w.reshaped(tilejit_ir::Shape::new(&[16, 144]).expect("shape"));
        let same = kept(&cache, &reshaped.expect("reshape"), view, 16);
        assert!(Arc::ptr_eq(&first, &same));
        let stats = cache.stats();
        assert_eq!(
            (
                stats.first_sightings,
                stats.misses,
                stats.hits,
                stats.entries
            ),
            (1, 1, 2, 1)
        );
        assert_eq!(stats.bytes, first.bytes());
        assert_eq!(first.bytes(), 36 * 16 * 16 * 4);
        // The first 8 channels through a narrower view: another entry.
        let half = GemmView { cols: 72, ..view };
        let other = kept(&cache, &w, half, 8);
        assert_eq!(other.bytes(), first.bytes() / 2);
        // Another form of the same weights: another entry, of its own
        // tile, layout and size.
        let f2 = WinogradForm {
            tile: WinogradTile::F2x2,
            layout: WinogradLayout::Strips,
        };
        assert!(cache
            .winograd(&w, view, 16, f2, bound)
            .expect("ok")
            .is_none());
        let small = cache.winograd(&w, view, 16, f2, bound).expect("ok");
        let small = small.expect("kept on the second sighting");
        assert_eq!(
            (small.tile(), small.layout(), small.bytes()),
            (f2.tile, Some(f2.layout), 16 * 16 * 16 * 4)
        );
        assert_eq!(kept(&cache, &w, view, 16).tile(), F4.tile);
        drop(small);
        let (copy, _) = weights(16, 16, 1);
        let copied = kept(&cache, &copy, view, 16);
        assert!(!Arc::ptr_eq(&first, &copied));
        assert_eq!(copied.values(), first.values());
        assert_eq!(cache.stats().entries, 4);
        drop((w, copy, first, again, same, copied, other));
        let (w2, view2) = weights(32, 16, 2);
        kept(&cache, &w2, view2, 16);
        let stats = cache.stats();
        assert_eq!((stats.entries, stats.freed), (1, 4), "{stats:?}");
        assert_eq!(stats.bytes, 36 * 16 * 32 * 4);
        assert!(cache.winograd(&w2, view2, 16, F4, 0).expect("ok").is_none());
        cache.clear();
        assert_eq!((cache.stats().entries, cache.stats().bytes), (0, 0));
    }

    /// Storage seen once makes nothing, however many such there are.
    #[test]
    fn first_sightings_make_nothing() {
        let cache = WeightCache::new();
        for seed in 0..4 {
            let (w, view) = weights(16, 16, seed);
            assert!(cache
                .winograd(&w, view, 16, F4, 1 << 30)
                .expect("ok")
                .is_none());
        }
        let stats = cache.stats();
        assert_eq!(
            (stats.first_sightings, stats.misses, stats.entries),
            (4, 0, 0)
        );
    }

    /// Within the bound the least recently used entry goes first; weights
    /// bigger than the bound are transformed but not kept.
    #[test]
    fn the_bound_drops_the_least_recently_used() {
        let cache = WeightCache::new();
        let each = 36 * 16 * 16 * 4;
        let ws: Vec<(Array, GemmView)> = (0..3).map(|i| weights(16, 16, i)).collect();
        let bound = 2 * each;
        let look = |(w, v): &(Array, GemmView), bound| {
            let first = cache.winograd(w, *v, 16, F4, bound).expect("ok");
            first.or_else(|| cache.winograd(w, *v, 16, F4, bound).expect("ok"))
        };
        for w in &ws[..2] {
            look(w, bound);
        }
        // Touch the first: the second is then the least recently used.
        look(&ws[0], bound);
        look(&ws[2], bound);
        let stats = cache.stats();
        assert_eq!((stats.entries, stats.evictions, stats.bytes), (2, 1, bound));
        let hits = stats.hits;
        look(&ws[0], bound);
        assert_eq!(cache.stats().hits, hits + 1, "the first stayed");
        look(&ws[1], bound);
        assert_eq!(cache.stats().hits, hits + 1, "the second went");
        let big = weights(32, 16, 7);
        let made = look(&big, each);
        assert!(made.is_some_and(|u| u.bytes() == 2 * each));
        assert!(cache.stats().bytes <= bound);
    }

    /// Many threads asking for the same and different weights at once all
    /// get transforms equal to a fresh one.
    #[test]
    fn lookups_from_many_threads_agree() {
        let cache = WeightCache::new();
        let ws: Vec<(Array, GemmView)> = (0..3).map(|i| weights(16, 16, i)).collect();
        let fresh: Vec<Vec<f32>> = ws
            .iter()
            .map(|(w, v)| {
                let u = WinogradWeights::kept(w.as_slice().expect("f32"), *v, 16, F4);
                u.expect("fits").values().to_vec()
            })
            .collect();
        std::thread::scope(|s| {
            for t in 0..6 {
                let (cache, ws, fresh) = (&cache, &ws, &fresh);
                s.spawn(move || {
                    for i in 0..20 {
                        let (w, v) = &ws[(t + i) % 3];
                        assert_eq!(panels_of(cache, w, *v), fresh[(t + i) % 3]);
                    }
                });
            }
        });
        assert_eq!(cache.stats().entries, 3);
    }

    fn panels_of(cache: &WeightCache, w: &Array, v: GemmView) -> Vec<f32> {
        kept(cache, w, v, 16).values().to_vec()
    }
}
