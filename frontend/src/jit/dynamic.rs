//! Dynamic functions: which dims are dynamic (automatic: those seen to
//! vary; or all), shape classes learnt from two traces at stand-in
//! sizes, looked up for a call's sizes and instantiated, or the reason a
//! class is traced per size.

use super::{Body, JitFunction};
use crate::args::ArgValue;
use crate::error::{Error, PerSize, Result};
use crate::trace;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tilejit_ir::{Graph, Lit};
use tilejit_runtime::{GenericGraph, SeenDims, ShapeClass, Signature, Standin, Structure};

/// What a function knows of one shape class: its graphs, each serving
/// the sizes that fit its pinned symbols, or why it is traced per size.
#[derive(Default)]
pub(super) struct ClassEntry {
    graphs: Vec<Arc<GenericGraph>>,
    per_size: Option<PerSize>,
}

/// Shape classes a function remembers (cleared when full: a class costs
/// two traces to relearn).
const MAX_CLASSES: usize = 256;

/// Graphs a class keeps for different values of its pinned symbols; past
/// this the class is traced per size.
const MAX_PINNINGS: usize = 64;

/// Where a dynamic call's graph comes from.
pub(super) enum ClassLookup {
    /// A graph of the class fits these sizes.
    Fits(Arc<GenericGraph>),
    /// The class is traced per size.
    PerSize,
    /// None fits: learn one, pinning at least these symbols.
    Learn(Vec<Option<usize>>),
}

/// [`JitFunction::dynamic`]'s value under automatic dynamic.
pub(super) const AUTOMATIC: u8 = 1;
/// [`JitFunction::dynamic`]'s value when every dim is dynamic.
pub(super) const ALL: u8 = 2;

impl JitFunction {
    /// Makes the function dynamic the way torch.compile is by default
    /// ("automatic dynamic"; `#[jit(dynamic)]` sets it at definition). The
    /// first call of a signature is traced exactly. A later call whose
    /// signature differs only in sizes (same dtypes, ranks and other
    /// arguments) makes exactly the dims seen to vary (per argument leaf
    /// and axis) size symbols, and keys its trace on that
    /// [`ShapeClass`]: dims that never varied (weights) stay fixed, so ops
    /// computing on them (`split(&[768, 768, 768])`, a reshape to
    /// `[t, 12, 64]`) trace as they do exactly. Sizes 0 and 1 stay
    /// specialised; equal varying dims share a symbol.
    ///
    /// A call with unseen sizes of a seen class does not trace: the
    /// class's trace is instantiated at the new sizes and compiled, and
    /// its kernels come from the kernel cache. A new class is traced
    /// twice, at two sets of stand-in sizes, and the two graphs read side
    /// by side: what differs is a size (see [`ShapeClass`]). A dynamic
    /// function never returns what an exact trace would not: sizes the
    /// body reads (`shape()`, `numel()`) or an op computes on (`slice`
    /// from the end, `split`, `conv2d`, ..) are guards, their symbols
    /// pinned to the call's values, so the graph serves only sizes that
    /// agree on them. What cannot be generic is traced per size, and
    /// `TILEJIT_LOG=trace` and [`shape_classes`](Self::shape_classes) say
    /// why. A frozen dynamic function still compiles new sizes of the
    /// classes it knows. [`make_dynamic_all`](Self::make_dynamic_all)
    /// makes every dim a symbol from the first call instead.
    ///
    /// ```
    /// use tilejit::prelude::*;
    ///
    /// #[jit(dynamic, mode = host)]
    /// fn bias_relu(x: &Tensor, b: &Tensor) -> Tensor { (x + b).relu() }
    ///
    /// let b = Tensor::ones(&[16], DType::F32);
    /// for n in [8, 12, 24, 40] {
    ///     bias_relu(&Tensor::ones(&[n, 16], DType::F32), &b)?;
    /// }
    /// let f = bias_relu::jit();
    /// // An exact trace, then two for the class (at stand-in sizes: the
    /// // body reads none); later sizes never.
    /// assert_eq!((f.stats().traces, f.stats().builds), (3, 4));
    /// // Only the dim that varied is a symbol.
    /// assert_eq!(f.shape_classes()[0].0.to_string(), "(f32[n0,16], f32[16])");
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    ///
    /// `dynamic` takes no value but `all`:
    ///
    /// ```compile_fail
    /// use tilejit::prelude::*;
    /// #[jit(dynamic = true)]
    /// fn f(x: &Tensor) -> Tensor { x + 1.0 }
    /// ```
    pub fn make_dynamic(&self) {
        self.dynamic.store(AUTOMATIC, Ordering::Relaxed);
    }

    /// Makes every dim of every tensor argument a size symbol from the
    /// first call (`#[jit(dynamic = all)]`), as torch's `dynamic=True`:
    /// a new class is traced at stand-in sizes at once, with no exact
    /// trace first; every dim other than 0 and 1 is a symbol, and equal
    /// dims share one. Weights' dims are symbols too, so an op that
    /// computes on them pins them (a guard), or traces per size.
    ///
    /// ```
    /// use tilejit::prelude::*;
    ///
    /// #[jit(dynamic = all, mode = host)]
    /// fn bias_relu(x: &Tensor, b: &Tensor) -> Tensor { (x + b).relu() }
    ///
    /// for n in [8, 16, 24] {
    ///     bias_relu(&Tensor::ones(&[4, n], DType::F32), &Tensor::ones(&[n], DType::F32))?;
    /// }
    /// let f = bias_relu::jit();
    /// assert_eq!((f.stats().traces, f.stats().builds), (2, 3));
    /// assert_eq!(f.shape_classes()[0].0.to_string(), "(f32[n0,n1], f32[n1])");
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    pub fn make_dynamic_all(&self) {
        self.dynamic.store(ALL, Ordering::Relaxed);
    }

    /// Keys traces on exact sizes again (the default), undoing
    /// [`make_dynamic`](Self::make_dynamic): the classes learnt are kept
    /// but no longer used.
    pub fn make_exact(&self) {
        self.dynamic.store(0, Ordering::Relaxed);
    }

    /// Whether the function is dynamic ([`make_dynamic`](Self::make_dynamic)
    /// or [`make_dynamic_all`](Self::make_dynamic_all)).
    pub fn is_dynamic(&self) -> bool {
        self.dynamic.load(Ordering::Relaxed) != 0
    }

    /// The shape class a dynamic function keys `sig` on, with its symbols'
    /// values; `None` when `sig` is traced exactly (automatic dynamic
    /// before any of its dims varied). With `note`, `sig` is recorded as
    /// seen.
    pub(super) fn class_of(&self, sig: &Signature, note: bool) -> Option<(ShapeClass, Vec<usize>)> {
        match self.dynamic.load(Ordering::Relaxed) {
            0 => return None,
            ALL => return Some(ShapeClass::of(sig)),
            _ => {}
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let structure = Structure::of(sig);
        let Some(dims) = seen.get_mut(&structure) else {
            if note {
                if seen.len() >= MAX_CLASSES {
                    seen.clear();
                }
                seen.insert(structure, SeenDims::new(sig));
            }
            return None;
        };
        let varied = dims.varied(sig);
        if note {
            dims.note(sig);
        }
        varied
            .iter()
            .flatten()
            .any(|&v| v)
            .then(|| ShapeClass::of_dims(sig, &varied))
    }

    /// The shape classes a dynamic function has traced, each with `Ok` if
    /// its trace serves all its sizes or the reason it is traced per size.
    pub fn shape_classes(&self) -> Vec<(ShapeClass, std::result::Result<(), PerSize>)> {
        let classes = self.classes.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<_> = classes
            .iter()
            .map(|(c, e)| {
                (
                    c.clone(),
                    match &e.per_size {
                        Some(why) => Err(why.clone()),
                        None => Ok(()),
                    },
                )
            })
            .collect();
        out.sort_by_key(|(c, _)| c.to_string());
        out
    }

    /// A dynamic function's graph for `sig`, with the values of the params
    /// it added for sizes: a graph of its class that fits `sig`'s sizes,
    /// instantiated, when there is one or one can be learnt
    /// ([`learn_class`](Self::learn_class)); else an exact trace (why is
    /// logged under `TILEJIT_LOG=trace`).
    pub(super) fn dynamic_graph(
        &self,
        sig: &Signature,
        args: &[ArgValue],
        body: &Body,
    ) -> Result<(Graph, Vec<Lit>)> {
        let Some((class, sizes)) = self.class_of(sig, true) else {
            return Ok((self.trace(sig, args, body)?, Vec::new()));
        };
        let log = crate::config::config().log.trace;
        let say = |what: &str| {
            if log {
                eprintln!("[tilejit] `{}`: {}: {what}", self.name, super::short(sig));
            }
        };
        // Frozen: whatever would trace below is an error instead (the
        // class may have been dropped since `before_miss` looked).
        let no_trace = || -> Result<()> {
            match self.is_frozen() {
                true => Err(Error::Frozen {
                    function: self.name.clone(),
                    signature: super::short(sig),
                    nearest: format!("class {class} has no generic trace for these sizes"),
                }),
                false => Ok(()),
            }
        };
        let graph = match self.lookup_class(&class, &sizes) {
            ClassLookup::Fits(g) => {
                // No user code runs for this build: callers waiting on it
                // wait for the compile, not `TRACE_WAIT`.
                tilejit_runtime::user_code_done();
                Some(g)
            }
            ClassLookup::PerSize => None,
            ClassLookup::Learn(pinned) => {
                no_trace()?;
                let learnt = match self.learn_class(&class, &sizes, pinned, args, body) {
                    Ok(g) => Ok(g),
                    // A class whose exact trace fails too is not kept: the
                    // next call of it traces again, as an exact function's.
                    Err(why) => Err((why, self.trace(sig, args, body)?)),
                };
                let mut classes = self.classes.lock().unwrap_or_else(|p| p.into_inner());
                if classes.len() >= MAX_CLASSES && !classes.contains_key(&class) {
                    classes.clear();
                }
                let entry = classes.entry(class.clone()).or_default();
                match learnt {
                    Ok(g) => {
                        let g = Arc::new(g);
                        say(&format!("class {class} traced{}", pins_note(g.pinned())));
                        if entry.graphs.len() >= MAX_PINNINGS {
                            entry.per_size = Some(PerSize::Pinnings { most: MAX_PINNINGS });
                        } else {
                            entry.graphs.push(g.clone());
                        }
                        Some(g)
                    }
                    Err((why, exact)) => {
                        say(&format!("class {class} is traced per size: {why}"));
                        entry.per_size.get_or_insert(why);
                        return Ok((exact, Vec::new()));
                    }
                }
            }
        };
        if let Some(g) = graph {
            match g.instantiate(&sizes) {
                Ok(instance) => {
                    say(&format!("a size of class {class}: instantiated"));
                    return Ok(instance);
                }
                Err(why) => say(&format!(
                    "traced exactly: sizes do not fit the class: {why}"
                )),
            }
        }
        no_trace()?;
        Ok((self.trace(sig, args, body)?, Vec::new()))
    }

    /// Which graph of `class` serves these sizes, if any.
    pub(super) fn lookup_class(&self, class: &ShapeClass, sizes: &[usize]) -> ClassLookup {
        let classes = self.classes.lock().unwrap_or_else(|p| p.into_inner());
        let Some(entry) = classes.get(class) else {
            return ClassLookup::Learn(vec![None; class.symbols()]);
        };
        if let Some(g) = entry.graphs.iter().find(|g| g.fits(sizes)) {
            return ClassLookup::Fits(g.clone());
        }
        if entry.per_size.is_some() {
            return ClassLookup::PerSize;
        }
        // The symbols other sizes had to pin are read at these too: start
        // with them pinned at these sizes' values.
        let mut pinned = vec![None; class.symbols()];
        for g in &entry.graphs {
            for ((p, g), &s) in pinned.iter_mut().zip(g.pinned()).zip(sizes) {
                if g.is_some() {
                    *p = Some(s);
                }
            }
        }
        ClassLookup::Learn(pinned)
    }

    /// Learns `class`'s graph for `sizes`: traces at stand-in sets A and B
    /// with `pinned` symbols at their values, pins the symbols behind any
    /// size the traces read ([`ShapeClass::pins_for_reads`]) and traces
    /// again, until the reads pin nothing new; then the two traces must
    /// read as one graph ([`GenericGraph::new`]). `Err` says why the class
    /// is traced per size (every symbol read, or a size computed in a way
    /// the reading cannot follow).
    fn learn_class(
        &self,
        class: &ShapeClass,
        sizes: &[usize],
        mut pinned: Vec<Option<usize>>,
        args: &[ArgValue],
        body: &Body,
    ) -> std::result::Result<GenericGraph, PerSize> {
        let watched = |set: Standin, pinned: &[Option<usize>]| {
            let sig = class.standin_signature(set, pinned)?;
            // Trace A is abandoned at a read that pins a symbol (it is
            // redone with the pin); trace B runs whole.
            let doom_on = match set {
                Standin::A => class.free_standins(set, pinned),
                Standin::B => Vec::new(),
            };
            let watch = trace::ProbeGuard::start(doom_on);
            let traced = self.trace(&sig, args, body);
            Ok::<_, PerSize>((traced, watch.finish()))
        };
        loop {
            if !class_has_free_symbol(&pinned) {
                return Err(match class.symbols() {
                    0 => PerSize::NoSymbols,
                    _ => PerSize::ReadsEverySize,
                });
            }
            let (a, reads_a) = watched(Standin::A, &pinned)?;
            if reads_a.unseen {
                return Err(PerSize::OffThreadRead);
            }
            // Sizes read that are plainly symbols are pinned at once.
            let plain = class.pins_in_reads(&pinned, &reads_a.values);
            if !plain.is_empty() {
                for s in plain {
                    pinned[s as usize] = Some(sizes[s as usize]);
                }
                continue;
            }
            let (b, reads_b) = watched(Standin::B, &pinned)?;
            if reads_b.unseen {
                return Err(PerSize::OffThreadRead);
            }
            let new = class
                .pins_for_reads(&pinned, &reads_a.values, &reads_b.values)
                .map_err(|problem| PerSize::Read {
                    problem,
                    first_read: reads_a.why.clone().unwrap_or_default(),
                })?;
            if !new.is_empty() {
                for s in new {
                    pinned[s as usize] = Some(sizes[s as usize]);
                }
                continue;
            }
            let a = a.map_err(|e| PerSize::Standin(Box::new(e)))?;
            let b = b.map_err(|e| PerSize::Standin(Box::new(e)))?;
            return Ok(GenericGraph::new(class, &pinned, a, &b)?);
        }
    }

    /// Each shape class known, as text, with its state (generic, generic
    /// but for the symbols the body reads, or traced per size and why),
    /// sorted: for the function's `Display`.
    pub(super) fn class_states(&self) -> Vec<(String, String)> {
        let mut classes: Vec<(String, String)> = {
            let classes = self.classes.lock().unwrap_or_else(|p| p.into_inner());
            classes
                .iter()
                .map(|(class, e)| {
                    // Which symbols the graphs pin (the guards), and how
                    // many values of them were seen.
                    let pinned: Vec<String> = e
                        .graphs
                        .first()
                        .map(|g| g.pinned())
                        .unwrap_or_default()
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| p.is_some())
                        .map(|(i, _)| format!("n{i}"))
                        .collect();
                    let state = match (&e.per_size, pinned.is_empty()) {
                        (Some(why), _) => format!("traced per size ({why})"),
                        (None, true) => "generic".to_string(),
                        (None, false) => format!(
                            "generic but for {} (read by the body; {} value(s) seen)",
                            pinned.join(", "),
                            e.graphs.len()
                        ),
                    };
                    (class.abbreviated(super::SIGNATURE_CHARS), state)
                })
                .collect()
        };
        classes.sort();
        classes
    }
}

/// Whether some symbol is still free (not pinned).
fn class_has_free_symbol(pinned: &[Option<usize>]) -> bool {
    pinned.iter().any(Option::is_none)
}

/// `", pinned n1 = 5"` for a graph's pinned symbols (for the log).
fn pins_note(pinned: &[Option<usize>]) -> String {
    let pins: Vec<String> = pinned
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.map(|v| format!("n{i} = {v}")))
        .collect();
    match pins.is_empty() {
        true => ": later sizes need no trace".into(),
        false => format!(
            ", pinned {}: later sizes with those need no trace",
            pins.join(", ")
        ),
    }
}
