//! The handler cache of one jit function: signature -> compiled program,
//! with single-flight compilation (PyPTO's `_handler_cache`, JAX's
//! per-signature lock).
//!
//! Invariants:
//! - at most one build runs per signature; callers that arrive while it runs
//!   wait on it and share its result, success or error (except a call on
//!   the building thread itself, which builds apart: see `flight.rs`, and
//!   a caller that has waited [`TRACE_WAIT`] for a build still running the
//!   user's code, which fails with `RuntimeError::TraceWait`);
//! - a failed (or panicking) build leaves no entry behind: the next call
//!   with that signature builds again;
//! - the lock is never held while building, so builds of different
//!   signatures run in parallel and a build may call into other caches;
//! - at most [`HandlerCache::capacity`] ready entries (default
//!   [`DEFAULT_MAX_SIGNATURES`]); past it the least recently used goes,
//!   counted in `stats().evictions`.

use crate::error::RuntimeError;
use crate::flight::{catching, Flights, Join, Leading};
use crate::signature::Signature;
use ahash::AHashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tilejit_codegen::sys::coarse_clock_ns;

/// One cached program with its statistics.
pub struct CacheEntry<V> {
    /// The signature it was built for.
    pub signature: Signature,
    /// The built value.
    pub value: Arc<V>,
    /// How long the build took.
    pub build_time: Duration,
    /// Calls served from the cache (the building call is not a hit).
    pub hits: u64,
    /// When it was last used.
    pub last_used: Instant,
}

struct Ready<V> {
    value: Arc<V>,
    build_time: Duration,
    hits: AtomicU64,
    /// Hits of the fast path ([`HandlerCache::get_last`]), counted under
    /// its lock.
    repeat_hits: AtomicU64,
    /// A [`Stamp`]: an atomic, not a lock, as every hit writes it.
    last_used: AtomicU64,
}

impl<V> Ready<V> {
    /// Counts a hit and stamps the time.
    fn touch(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
        self.last_used.store(Stamp::now(), Ordering::Relaxed);
    }

    /// Counts a hit of the fast path's entry: only ever under the fast
    /// path's lock, so a load and a store, not a locked add (one fewer
    /// locked instruction on every warm call).
    #[inline]
    fn touch_repeat(&self) {
        let n = self.repeat_hits.load(Ordering::Relaxed) + 1;
        self.repeat_hits.store(n, Ordering::Relaxed);
        self.last_used.store(Stamp::now(), Ordering::Relaxed);
    }

    /// All its hits.
    fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed) + self.repeat_hits.load(Ordering::Relaxed)
    }
}

/// Times as nanoseconds after a process-wide origin, read from the coarse
/// monotonic clock (a few ms of resolution, plenty for "last used") because
/// every dispatch takes one and a precise read can cost more than the
/// rest of a warm call.
struct Stamp;

impl Stamp {
    /// The origin: an `Instant` and the coarse clock read together.
    fn origin() -> (Instant, Option<u64>) {
        static ORIGIN: OnceLock<(Instant, Option<u64>)> = OnceLock::new();
        *ORIGIN.get_or_init(|| (Instant::now(), coarse_clock_ns()))
    }

    fn now() -> u64 {
        match Self::origin() {
            (_, Some(c0)) => coarse_clock_ns().map_or(0, |c| c.saturating_sub(c0)),
            (at, None) => at.elapsed().as_nanos() as u64,
        }
    }

    fn instant(stamp: u64) -> Instant {
        Self::origin().0 + Duration::from_nanos(stamp)
    }
}

/// The ready entries and the builds in flight, under one lock.
struct State<V, E> {
    ready: AHashMap<Signature, Arc<Ready<V>>>,
    flights: Flights<Signature, (), Result<Arc<V>, E>>,
}

/// Counters of a cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandlerStats {
    /// Lookups that found a ready entry.
    pub hits: u64,
    /// Lookups that built (or waited for another caller's build).
    pub misses: u64,
    /// Builds that ran.
    pub builds: u64,
    /// Times the owner ran the user's code to trace ([`HandlerCache::note_trace`]):
    /// a build traces once, or not at all when a dynamic function
    /// instantiates a class it traced before.
    pub traces: u64,
    /// Builds that failed.
    pub failures: u64,
    /// Ready entries dropped to respect the bound (least recently used
    /// first; the next call with that signature builds again).
    pub evictions: u64,
}

/// How long a caller waits for another thread's trace of the same
/// signature while that trace is still running the user's code; past it
/// the call fails with [`RuntimeError::TraceWait`] (a body that waits for a
/// thread calling its own signature would otherwise deadlock). Once the
/// trace is compiling, callers wait for as long as that takes.
pub const TRACE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How many ready signatures a handler cache keeps unless told otherwise
/// ([`HandlerCache::set_capacity`]): enough for any program that uses a
/// fixed set of shapes, while a program that feeds a jit function ever
/// new shapes does not grow its memory without bound (JAX's cache did,
/// jax#2072). Past it, the least recently used signature goes; calling
/// it again retraces, and its kernels come back from the kernel cache.
pub const DEFAULT_MAX_SIGNATURES: usize = 256;

/// A signature-keyed single-flight cache.
pub struct HandlerCache<V, E> {
    state: Mutex<State<V, E>>,
    misses: AtomicU64,
    builds: AtomicU64,
    traces: AtomicU64,
    failures: AtomicU64,
    evictions: AtomicU64,
    /// Hits of entries no longer in the map (cleared or evicted).
    cleared_hits: AtomicU64,
    /// The bound on ready entries.
    max_entries: AtomicUsize,
    /// The entry the last hit found, for `get_last`: a repeated call with
    /// the same signature needs neither the signature built nor the map.
    last: Mutex<Option<(Signature, Arc<Ready<V>>)>>,
}

impl<V, E> Default for HandlerCache<V, E> {
    fn default() -> Self {
        HandlerCache {
            state: Mutex::new(State {
                ready: AHashMap::new(),
                flights: Flights::default(),
            }),
            misses: AtomicU64::new(0),
            builds: AtomicU64::new(0),
            traces: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            cleared_hits: AtomicU64::new(0),
            max_entries: AtomicUsize::new(DEFAULT_MAX_SIGNATURES),
            last: Mutex::new(None),
        }
    }
}

impl<V: Send + Sync, E: Clone + From<RuntimeError>> HandlerCache<V, E> {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State<V, E>> {
        // A panic never happens while the lock is held (builds run outside
        // it), so a poisoned lock still guards a consistent map.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns the entry for `key` if it is ready, counting a hit.
    pub fn get(&self, key: &Signature) -> Option<Arc<V>> {
        let st = self.lock();
        let r = st.ready.get(key)?;
        r.touch();
        Some(r.value.clone())
    }

    /// The value of the entry the last lookup hit, if `matches` accepts its
    /// signature, counting a hit: the dispatch fast path for repeated calls
    /// with one signature (no signature to build, no map to search).
    pub fn get_last(&self, matches: impl FnOnce(&Signature) -> bool) -> Option<Arc<V>> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let (sig, r) = last.as_ref()?;
        if !matches(sig) {
            return None;
        }
        r.touch_repeat();
        Some(r.value.clone())
    }

    fn remember(&self, key: &Signature, r: &Arc<Ready<V>>) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if !last.as_ref().is_some_and(|(k, _)| k == key) {
            // A `clear` or eviction between the caller's lookup and now
            // removed it: a removed entry never becomes the fast path's.
            // (`last`, then the map: the order `clear` takes them in.)
            if !self
                .lock()
                .ready
                .get(key)
                .is_some_and(|x| Arc::ptr_eq(x, r))
            {
                return;
            }
            *last = Some((key.clone(), r.clone()));
        }
    }

    /// Returns the value for `key`, building it with `build` on a miss.
    /// Concurrent callers with the same key share one build.
    pub fn get_or_build(
        &self,
        key: &Signature,
        build: impl FnOnce() -> Result<V, E>,
    ) -> Result<Arc<V>, E> {
        let lead = {
            let mut st = self.lock();
            if let Some(r) = st.ready.get(key) {
                r.touch();
                let (value, r) = (r.value.clone(), r.clone());
                drop(st);
                self.remember(key, &r);
                return Ok(value);
            }
            self.misses.fetch_add(1, Ordering::Relaxed);
            match st.flights.join(key, &()) {
                Join::Wait(f) => {
                    drop(st);
                    // A trace runs the user's code, which may itself wait
                    // for this caller (a body that joins a thread calling
                    // the same signature): a trace still running after
                    // TRACE_WAIT is reported instead of waited for forever.
                    return match f.wait_user_code_for(TRACE_WAIT) {
                        Some(r) => r,
                        None => Err(E::from(RuntimeError::TraceWait {
                            signature: key.to_string(),
                            waited: TRACE_WAIT,
                        })),
                    };
                }
                // `None`: a call from inside this thread's own build of
                // `key`, which builds apart (see `flight.rs`).
                Join::Lead(f) => f,
            }
        };
        self.builds.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        let leading = Leading::enter(&lead);
        let result = catching(|| format!("building the program for {key}"), build).map(Arc::new);
        drop(leading);
        let build_time = start.elapsed();
        let mut st = self.lock();
        let mut evicted = Vec::new();
        match &result {
            Ok(v) => {
                let ready = Ready {
                    value: v.clone(),
                    build_time,
                    hits: AtomicU64::new(0),
                    repeat_hits: AtomicU64::new(0),
                    last_used: AtomicU64::new(Stamp::now()),
                };
                st.ready.insert(key.clone(), Arc::new(ready));
                evicted = self.evict(&mut st.ready, Some(key));
            }
            Err(_) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        let result = st.flights.land(key, lead, result);
        drop(st);
        self.forget_last(&evicted);
        result
    }

    /// Enters a value built elsewhere (a program loaded from a snapshot)
    /// as ready under `key`, unless `key` already has one; true if it was
    /// entered. Counts no miss and no build; the bound holds as after a
    /// build.
    pub fn insert(&self, key: Signature, value: V, build_time: Duration) -> bool {
        let mut st = self.lock();
        if st.ready.contains_key(&key) {
            return false;
        }
        let ready = Ready {
            value: Arc::new(value),
            build_time,
            hits: AtomicU64::new(0),
            repeat_hits: AtomicU64::new(0),
            last_used: AtomicU64::new(Stamp::now()),
        };
        st.ready.insert(key.clone(), Arc::new(ready));
        let evicted = self.evict(&mut st.ready, Some(&key));
        drop(st);
        self.forget_last(&evicted);
        true
    }

    /// Bounds the ready entries to `max`, evicting the least recently used
    /// at once if over. A bound of 0 acts as 1: the entry a call has just
    /// built is never the one evicted.
    pub fn set_capacity(&self, max: usize) {
        self.max_entries.store(max, Ordering::Relaxed);
        let evicted = self.evict(&mut self.lock().ready, None);
        self.forget_last(&evicted);
    }

    /// The bound on ready entries.
    pub fn capacity(&self) -> usize {
        self.max_entries.load(Ordering::Relaxed)
    }

    /// Drops least-recently-used ready entries (never `keep`) until at most
    /// the bound are left; returns their signatures.
    fn evict(
        &self,
        ready: &mut AHashMap<Signature, Arc<Ready<V>>>,
        keep: Option<&Signature>,
    ) -> Vec<Signature> {
        let max = self.max_entries.load(Ordering::Relaxed).max(1);
        let mut evicted = Vec::new();
        while ready.len() > max {
            let oldest = ready
                .iter()
                .filter(|(k, _)| Some(*k) != keep)
                .min_by_key(|(_, r)| r.last_used.load(Ordering::Relaxed))
                .map(|(k, _)| k.clone());
            let Some(k) = oldest else { break };
            if let Some(r) = ready.remove(&k) {
                self.cleared_hits.fetch_add(r.hits(), Ordering::Relaxed);
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
            evicted.push(k);
        }
        evicted
    }

    /// Drops the fast path's entry if it was evicted (taken after the map
    /// lock is released: `clear` locks `last` first, then the map).
    fn forget_last(&self, evicted: &[Signature]) {
        if evicted.is_empty() {
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.as_ref().is_some_and(|(k, _)| evicted.contains(k)) {
            *last = None;
        }
    }

    /// Ready entries, sorted by signature text for stable output.
    pub fn entries(&self) -> Vec<CacheEntry<V>> {
        let st = self.lock();
        let mut v: Vec<CacheEntry<V>> = st
            .ready
            .iter()
            .map(|(k, r)| CacheEntry {
                signature: k.clone(),
                value: r.value.clone(),
                build_time: r.build_time,
                hits: r.hits(),
                last_used: Stamp::instant(r.last_used.load(Ordering::Relaxed)),
            })
            .collect();
        v.sort_by_key(|e| e.signature.to_string());
        v
    }

    /// Number of ready entries.
    pub fn len(&self) -> usize {
        self.lock().ready.len()
    }

    /// True if no entry is ready.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counters since creation.
    pub fn stats(&self) -> HandlerStats {
        let live_hits: u64 = self.entries().iter().map(|e| e.hits).sum();
        HandlerStats {
            hits: live_hits + self.cleared_hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            builds: self.builds.load(Ordering::Relaxed),
            traces: self.traces.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }

    /// Counts one run of the user's code to trace (`stats().traces`).
    pub fn note_trace(&self) {
        self.traces.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops every ready entry (programs in use stay alive through their
    /// `Arc`s). Builds in flight finish and insert their result.
    pub fn clear(&self) {
        // `last` first, held while the map is cleared, so no fast-path hit
        // can land on a cleared entry.
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        *last = None;
        let mut st = self.lock();
        let cleared: u64 = st.ready.values().map(|r| r.hits()).sum();
        st.ready.clear();
        self.cleared_hits.fetch_add(cleared, Ordering::Relaxed);
    }

    /// Why `key` would miss: the differing arguments against the nearest
    /// ready signature, or `None` if it would hit.
    pub fn explain_miss(&self, key: &Signature) -> Option<String> {
        let st = self.lock();
        if st.ready.contains_key(key) {
            return None;
        }
        let nearest = st
            .ready
            .keys()
            .min_by_key(|k| (key.distance(k), k.to_string()));
        Some(match nearest {
            Some(seen) => key.explain_against(seen),
            None => "nothing compiled yet".to_string(),
        })
    }
}
