//! Shape classes: what a dynamic jit function (`#[jit(dynamic)]`) keys its
//! traced graphs on instead of exact sizes.
//!
//! A class keeps of each tensor argument its dtype, its rank, which dims
//! are 0 or 1, and which dims are equal (across all arguments): every other
//! dim is a *size symbol* `n0, n1, ..`, numbered by first appearance. So
//! `(f32[8,16], f32[16])` and `(f32[3,40], f32[40])` are one class,
//! `(f32[n0,n1], f32[n1])`, while `(f32[10], f32[11])` is not the class of
//! `(f32[10], f32[10])`. That is [`ShapeClass::of`], every dim dynamic
//! (`#[jit(dynamic = all)]`). Under automatic dynamic (`#[jit(dynamic)]`),
//! [`ShapeClass::of_dims`] makes symbols only of the dims [`SeenDims`]
//! has seen vary between calls of one [`Structure`]; every other dim is
//! fixed at its value (`f32[n0,768]`).
//!
//! The rule: a dynamic function never returns what an exact trace at the
//! call's sizes would not. A class is traced twice, at two sets of
//! stand-in sizes ([`Standin::A`]: 1031, 2053, ..; [`Standin::B`]: 1549,
//! 2579, ..), and the two graphs are read side by side
//! ([`GenericGraph::new`]):
//!
//! - a number (a dim, a slice bound, a `full`'s value) equal in both is a
//!   constant, whatever it is: a literal 1031 stays 1031;
//! - one that differs is a size, and must read back as a product of
//!   symbols over the stand-ins of trace A (`n0 * n1`), plus an offset of
//!   at most 64 (`n0 + 1`, a cache grown by `cat`), that gives trace B's
//!   value at B's stand-ins; anything else (`n / 2`, `1.0 / n`, a size
//!   inside a constant tensor, a float literal past the integers it holds
//!   exactly, which may have rounded, a different op) makes the class not
//!   generic, and it is traced per size.
//!
//! A body that reads sizes (`shape()`, `numel()`, `Display`) or calls an
//! op that computes on them (a clamp, a split, an index dtype) gets
//! guards, as torch.compile's dynamic shapes do: the symbols it read are
//! *pinned*, traced at the call's own values in both traces, and the
//! class's graph serves only calls with those values
//! ([`GenericGraph::fits`]). Which symbols a read touched is found the
//! same way: a value read that differs between the traces is factored
//! over the stand-ins; one that does not factor pins every symbol. A read
//! on another thread pins every symbol too.
//!
//! Later sizes that fit a graph are instantiated
//! ([`GenericGraph::instantiate`]) without running the body, every node's
//! type inferred again (an op that does not fit the new sizes is an error,
//! and the call is traced exactly).

use crate::error::{ClassProblem, NodeDifference};
use crate::signature::{ArgSig, Signature};
use smallvec::SmallVec;
use std::fmt;
use std::sync::OnceLock;
use tilejit_ir::{Graph, IrError, Lit, NodeId, Op, Shape, TensorType};

/// One dim of a class: fixed (0 or 1) or a size symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClassDim {
    /// A dim equal in every member: 0 or 1 (code differs for them), or,
    /// under automatic dynamic ([`SeenDims`]), a dim never seen to vary.
    Fixed(usize),
    /// Size symbol `n{i}`: dims with one symbol are equal.
    Sym(u16),
}

/// One argument of a class.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ClassArg {
    /// A tensor: dtype and per-dim class.
    Tensor(tilejit_ir::DType, SmallVec<[ClassDim; 4]>),
    /// Anything else, as in a [`Signature`] (float params, static values).
    Other(ArgSig),
}

/// The key of a dynamic function's traced graphs (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShapeClass {
    args: Vec<ClassArg>,
    symbols: usize,
}

impl ShapeClass {
    /// The class of a signature, and the value of each of its symbols:
    /// every dim but 0 and 1 a symbol.
    pub fn of(sig: &Signature) -> (ShapeClass, Vec<usize>) {
        Self::build(sig, |_, _| true)
    }

    /// The class of a signature whose dims marked in `dynamic` (per
    /// argument, per axis; see [`SeenDims::varied`]) are symbols and
    /// every other dim is fixed at its value, and each symbol's value.
    pub fn of_dims(sig: &Signature, dynamic: &[SmallVec<[bool; 4]>]) -> (ShapeClass, Vec<usize>) {
        Self::build(sig, |arg, axis| {
            dynamic
                .get(arg)
                .and_then(|v| v.get(axis))
                .copied()
                .unwrap_or(false)
        })
    }

    /// The class where dim `axis` of argument `arg` is a symbol when
    /// `varies(arg, axis)` and it is not 0 or 1 (always fixed); equal
    /// symbolic dims share a symbol.
    fn build(sig: &Signature, varies: impl Fn(usize, usize) -> bool) -> (ShapeClass, Vec<usize>) {
        let mut sizes: Vec<usize> = Vec::new();
        let args = sig
            .args
            .iter()
            .enumerate()
            .map(|(i, a)| match a {
                ArgSig::Tensor(t) => ClassArg::Tensor(
                    t.dtype,
                    t.shape
                        .dims()
                        .iter()
                        .enumerate()
                        .map(|(axis, &d)| match d {
                            _ if d < 2 || !varies(i, axis) => ClassDim::Fixed(d),
                            _ => ClassDim::Sym(match sizes.iter().position(|&s| s == d) {
                                Some(i) => i as u16,
                                None => {
                                    sizes.push(d);
                                    sizes.len() as u16 - 1
                                }
                            }),
                        })
                        .collect(),
                ),
                other => ClassArg::Other(*other),
            })
            .collect();
        let symbols = sizes.len();
        (ShapeClass { args, symbols }, sizes)
    }

    /// How many size symbols it has.
    pub fn symbols(&self) -> usize {
        self.symbols
    }

    /// The member signature with these symbol values.
    pub fn signature_with(&self, sizes: &[usize]) -> Result<Signature, IrError> {
        let mut args = Vec::with_capacity(self.args.len());
        for a in &self.args {
            args.push(match a {
                ClassArg::Tensor(dtype, dims) => {
                    let dims: SmallVec<[usize; 4]> = dims
                        .iter()
                        .map(|d| match *d {
                            ClassDim::Fixed(v) => v,
                            ClassDim::Sym(i) => sizes[i as usize],
                        })
                        .collect();
                    ArgSig::Tensor(TensorType::new(*dtype, Shape::new(&dims)?))
                }
                ClassArg::Other(s) => *s,
            });
        }
        Ok(Signature { args })
    }

    /// The member signature a class is traced with: each symbol its
    /// stand-in of set `set`, or its pinned value.
    pub fn standin_signature(
        &self,
        set: Standin,
        pinned: &[Option<usize>],
    ) -> Result<Signature, ClassProblem> {
        let sizes = standins(set, self.symbols, pinned)?;
        Ok(self.signature_with(&sizes)?)
    }

    /// The stand-ins of set `set` of the symbols `pinned` leaves free (0
    /// for a pinned one).
    pub fn free_standins(&self, set: Standin, pinned: &[Option<usize>]) -> Vec<usize> {
        standins(set, self.symbols, pinned)
            .map(|s| free_standins(&s, pinned))
            .unwrap_or_default()
    }

    /// The free symbols that size values read in trace A (at `pinned`)
    /// factor into over A's stand-ins: they are pinned before a trace B
    /// is worth making. Pinning too much (a constant dim that happens to
    /// be a stand-in) only costs genericity, never a wrong result.
    pub fn pins_in_reads(&self, pinned: &[Option<usize>], reads_a: &[usize]) -> Vec<u16> {
        let Ok(a) = standins(Standin::A, self.symbols, pinned) else {
            return Vec::new();
        };
        let free = free_standins(&a, pinned);
        let mut pins: Vec<u16> = Vec::new();
        for &r in reads_a {
            for (s, _) in SizeExpr::decompose(r, &free).factors {
                if !pins.contains(&s) {
                    pins.push(s);
                }
            }
        }
        pins
    }

    /// Which further symbols the size reads of the two stand-in traces
    /// pin: `reads_a` and `reads_b` are every size value the body (or a
    /// library op computing on sizes) read, in order, in traces A and B
    /// at `pinned`. A value read equal in both is a constant (or made of
    /// pinned symbols only); one that differs pins the symbols it factors
    /// into over A's stand-ins. `Err` says why every symbol must be pinned.
    pub fn pins_for_reads(
        &self,
        pinned: &[Option<usize>],
        reads_a: &[usize],
        reads_b: &[usize],
    ) -> Result<Vec<u16>, ClassProblem> {
        let a = standins(Standin::A, self.symbols, pinned)?;
        let b = standins(Standin::B, self.symbols, pinned)?;
        let free = free_standins(&a, pinned);
        let mut pins: Vec<u16> = Vec::new();
        for (&ra, &rb) in reads_a.iter().zip(reads_b) {
            let e = SizeExpr::read(ra, rb, &free, &b)
                .ok_or(ClassProblem::ComputedRead { at_a: ra, at_b: rb })?;
            for &(s, _) in &e.factors {
                if !pins.contains(&s) {
                    pins.push(s);
                }
            }
        }
        if pins.is_empty() && reads_a.len() != reads_b.len() {
            return Err(ClassProblem::ReadCount);
        }
        Ok(pins)
    }
}

/// What automatic dynamic (torch.compile's default) keys on: a
/// signature with its tensors' dims left out (dtypes, ranks, every other
/// argument), so calls differing only in sizes share one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Structure(Vec<StructureArg>);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum StructureArg {
    Tensor(tilejit_ir::DType, usize),
    Other(ArgSig),
}

impl Structure {
    /// The structure of `sig`.
    pub fn of(sig: &Signature) -> Structure {
        Structure(
            sig.args
                .iter()
                .map(|a| match a {
                    ArgSig::Tensor(t) => StructureArg::Tensor(t.dtype, t.shape.rank()),
                    other => StructureArg::Other(*other),
                })
                .collect(),
        )
    }
}

/// The dims of one [`Structure`] seen so far under automatic dynamic:
/// the first call's, and which have varied since (per argument, per
/// axis). Only a dim seen with two values becomes a symbol, so weights
/// stay fixed and ops computing on them (`split(&[768, 768, 768])`, a
/// reshape to `[t, 12, 64]`) trace as in an exact trace.
#[derive(Clone, Debug)]
pub struct SeenDims {
    first: Vec<SmallVec<[usize; 4]>>,
    varied: Vec<SmallVec<[bool; 4]>>,
}

impl SeenDims {
    /// The dims of a first call.
    pub fn new(sig: &Signature) -> SeenDims {
        let first: Vec<SmallVec<[usize; 4]>> = sig
            .args
            .iter()
            .map(|a| match a {
                ArgSig::Tensor(t) => t.shape.dims().iter().copied().collect(),
                _ => SmallVec::new(),
            })
            .collect();
        let varied = first
            .iter()
            .map(|d| d.iter().map(|_| false).collect())
            .collect();
        SeenDims { first, varied }
    }

    /// Which dims have varied, counting `sig` (of the same structure) as
    /// seen: those that varied before, and those where `sig` differs from
    /// the first call.
    pub fn varied(&self, sig: &Signature) -> Vec<SmallVec<[bool; 4]>> {
        let mut varied = self.varied.clone();
        for ((a, first), v) in sig.args.iter().zip(&self.first).zip(&mut varied) {
            if let ArgSig::Tensor(t) = a {
                for ((d, f), v) in t.shape.dims().iter().zip(first).zip(v.iter_mut()) {
                    *v |= d != f;
                }
            }
        }
        varied
    }

    /// Records `sig` as seen.
    pub fn note(&mut self, sig: &Signature) {
        self.varied = self.varied(sig);
    }

    /// Whether any dim has varied (counting `sig`).
    pub fn any_varied(&self, sig: &Signature) -> bool {
        self.varied(sig).iter().flatten().any(|&v| v)
    }
}

/// Which set of stand-in sizes a trace uses (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standin {
    /// Symbol `i` is the first prime above `(i + 1) * 1024`.
    A,
    /// Symbol `i` is the first prime above `(i + 1) * 1024 + 512`.
    B,
}

/// The symbol values of a trace at stand-in set `set` with `pinned`
/// symbols at their pinned values.
fn standins(
    set: Standin,
    symbols: usize,
    pinned: &[Option<usize>],
) -> Result<Vec<usize>, ClassProblem> {
    if symbols > MAX_SYMBOLS {
        return Err(ClassProblem::TooManySymbols {
            symbols,
            most: MAX_SYMBOLS,
        });
    }
    if pinned.len() != symbols {
        return Err(ClassProblem::Pins {
            pins: pinned.len(),
            symbols,
        });
    }
    Ok(probes(set, symbols)
        .iter()
        .zip(pinned)
        .map(|(&p, pin)| pin.unwrap_or(p))
        .collect())
}

/// The stand-ins a value may factor over: pinned symbols are 0 (skipped).
fn free_standins(sizes: &[usize], pinned: &[Option<usize>]) -> Vec<usize> {
    sizes
        .iter()
        .zip(pinned)
        .map(|(&s, p)| if p.is_some() { 0 } else { s })
        .collect()
}

impl ShapeClass {
    /// Each argument as text.
    fn arg_texts(&self) -> Vec<String> {
        self.args
            .iter()
            .map(|a| match a {
                ClassArg::Tensor(dtype, dims) => {
                    let dims: Vec<String> = dims
                        .iter()
                        .map(|d| match d {
                            ClassDim::Fixed(v) => v.to_string(),
                            ClassDim::Sym(s) => format!("n{s}"),
                        })
                        .collect();
                    format!("{dtype}[{}]", dims.join(","))
                }
                ClassArg::Other(s) => s.to_string(),
            })
            .collect()
    }

    /// The class in about `max` characters, abbreviated as
    /// [`Signature::abbreviated`] abbreviates.
    pub fn abbreviated(&self, max: usize) -> String {
        crate::signature::abbreviate(&self.arg_texts(), max)
    }
}

impl fmt::Display for ShapeClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({})", self.arg_texts().join(", "))
    }
}

/// The spacing of the stand-in sizes. Far apart, so a size computed by a
/// small offset (`n1 - 2`) never reads back as another symbol; small
/// enough that a tensor a body builds from a stand-in size stays
/// affordable.
const PROBE_STEP: usize = 1 << 10;

/// How many symbols a class may have and still be traced generically.
pub(crate) const MAX_SYMBOLS: usize = 96;

/// The stand-in sizes of `n` symbols (at most 96) in set `set`: for
/// symbol `i`, the first prime above `(i + 1) * 1024` (A: 1031, 2053,
/// 3079, ..) or above `(i + 1) * 1024 + 512` (B: 1549, 2579, ..). No B
/// stand-in is an A one. A tensor whose dims are many distinct late
/// symbols can overflow at these sizes; its class is then traced per
/// size, still correct.
pub fn probes(set: Standin, n: usize) -> &'static [usize] {
    static PRIMES: OnceLock<[Vec<usize>; 2]> = OnceLock::new();
    let primes = PRIMES.get_or_init(|| {
        let is_prime = |p: usize| {
            (2..)
                .take_while(|d| d * d <= p)
                .all(|d| !p.is_multiple_of(d))
        };
        let set = |offset: usize| {
            (1..=MAX_SYMBOLS)
                .filter_map(|i| (i * PROBE_STEP + offset..).find(|&p| is_prime(p)))
                .collect()
        };
        [set(0), set(PROBE_STEP / 2)]
    });
    let set = match set {
        Standin::A => &primes[0],
        Standin::B => &primes[1],
    };
    &set[..n.min(MAX_SYMBOLS)]
}

/// A size in a traced graph, read back over the stand-ins: `coef ·
/// Π n_sym^exp + offset` (a constant when there are no factors). The
/// offset is small ([`MAX_OFFSET`]): a cache grown by `cat` is `n + 1`
/// long, a padded axis `n + 2`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SizeExpr {
    coef: usize,
    factors: SmallVec<[(u16, u8); 2]>,
    offset: i64,
}

/// The largest offset a size is read back with (`n ± k`). Small against
/// the stand-ins' spacing, so a size never reads as another symbol's.
const MAX_OFFSET: i64 = 64;

impl SizeExpr {
    fn constant(v: usize) -> SizeExpr {
        SizeExpr {
            coef: v,
            factors: SmallVec::new(),
            offset: 0,
        }
    }

    /// `d` factored over `probes` (a 0 entry is skipped).
    fn decompose(d: usize, probes: &[usize]) -> SizeExpr {
        let mut coef = d;
        let mut factors = SmallVec::new();
        if d > 1 {
            for (i, &p) in probes.iter().enumerate() {
                if p < 2 {
                    continue;
                }
                let mut e = 0u8;
                while coef.is_multiple_of(p) {
                    coef /= p;
                    e += 1;
                }
                if e > 0 {
                    factors.push((i as u16, e));
                }
            }
        }
        SizeExpr {
            coef,
            factors,
            offset: 0,
        }
    }

    fn is_const(&self) -> bool {
        self.factors.is_empty()
    }

    fn eval(&self, sizes: &[usize]) -> Option<usize> {
        let mut v = self.coef;
        for &(s, e) in &self.factors {
            for _ in 0..e {
                v = v.checked_mul(*sizes.get(s as usize)?)?;
            }
        }
        let v = i64::try_from(v).ok()?.checked_add(self.offset)?;
        usize::try_from(v).ok()
    }

    /// The size read back from `a` (trace A) and `b` (trace B): a
    /// constant when equal, else a product of free symbols, plus a small
    /// offset if need be, that gives `b` at B's sizes (the product alone
    /// first; then the smallest offset that reads).
    fn read(a: usize, b: usize, free_a: &[usize], sizes_b: &[usize]) -> Option<SizeExpr> {
        if a == b {
            return Some(SizeExpr::constant(a));
        }
        let offsets = (0..=MAX_OFFSET).flat_map(|k| [k, -k]).skip(1);
        offsets.into_iter().find_map(|k| {
            let base = usize::try_from(i64::try_from(a).ok()?.checked_sub(k)?).ok()?;
            let mut e = SizeExpr::decompose(base, free_a);
            e.offset = k;
            (!e.is_const() && e.eval(sizes_b) == Some(b)).then_some(e)
        })
    }
}

/// A `full`'s value as a number: integral, finite and exact in f64.
fn integral(value: Lit) -> Option<(usize, bool)> {
    let v = match value {
        Lit::Bool(_) => return None,
        Lit::Int(i) => i as f64,
        Lit::Float(f) => f,
    };
    // Integral values only: 2^53 keeps the conversion exact.
    if !v.is_finite() || v.fract() != 0.0 || v.abs() >= (1u64 << 53) as f64 {
        return None;
    }
    Some((v.abs() as usize, v < 0.0))
}

/// Whether `v`, and every integer below it, is exact in a `dtype`
/// literal: floats hold integers up to 2 to the power of their digits
/// (2^24 in f32), past which a size may have rounded; integers hold any
/// (`size_lit` checks their range).
fn holds_exactly(dtype: tilejit_ir::DType, v: usize) -> bool {
    // Integers up to `1 / u`, the unit roundoff (0 for integer dtypes).
    let u = tilejit_ir::bound::unit_roundoff(dtype);
    u == 0.0 || v <= (1.0 / u) as usize
}

/// A size `v` (negated if `negative`) as a literal of `dtype`, or why it
/// does not fit one.
fn size_lit(v: usize, negative: bool, dtype: tilejit_ir::DType) -> Result<Lit, ClassProblem> {
    if dtype.is_float() {
        let f = v as f64;
        return Ok(Lit::from_f64(if negative { -f } else { f }, dtype));
    }
    // A size that does not fit the dtype is an error at this size, as an
    // exact trace's scalar would be.
    let v = i64::try_from(v).map_err(|_| ClassProblem::ValueTooBig { value: v })?;
    let v = if negative { -v } else { v };
    let lit = Lit::from_i64(v, dtype);
    if lit.as_i64() != v {
        return Err(ClassProblem::ValueDtype { value: v, dtype });
    }
    Ok(lit)
}

/// The sizes an op carries (dims of its type or target shape, slice
/// bounds, a conv window), in a fixed order: what may differ between the
/// two stand-in traces.
fn slots(op: &Op) -> SmallVec<[usize; 8]> {
    let mut v = SmallVec::new();
    match op {
        Op::Input { ty, .. } | Op::Full { ty, .. } | Op::Constant { ty, .. } => {
            v.extend_from_slice(ty.shape.dims())
        }
        Op::Reshape(_, s) | Op::Broadcast(_, s) => v.extend_from_slice(s.dims()),
        Op::Slice(_, start, s) => {
            v.extend_from_slice(start.dims());
            v.extend_from_slice(s.dims());
        }
        Op::Conv(_, _, w) | Op::Pool(_, _, w) => v.extend(w.to_list().map(|x| x as usize)),
        _ => {}
    }
    v
}

/// A conv or pool window from its [`slots`].
fn window(vals: &[usize]) -> Result<tilejit_ir::Window, ClassProblem> {
    if let Some(&v) = vals.iter().find(|&&v| u32::try_from(v).is_err()) {
        return Err(ClassProblem::WindowOverflow { value: v });
    }
    tilejit_ir::Window::from_list(vals).ok_or(ClassProblem::ConvWindow)
}

/// `op` with the sizes [`slots`] lists replaced by `vals`.
fn with_slots(op: &Op, vals: &[usize]) -> Result<Op, ClassProblem> {
    let shape = |dims: &[usize]| Shape::new(dims).map_err(ClassProblem::from);
    Ok(match op.clone() {
        Op::Input { index, ty } => Op::Input {
            index,
            ty: TensorType::new(ty.dtype, shape(vals)?),
        },
        Op::Full { value, ty } => Op::Full {
            value,
            ty: TensorType::new(ty.dtype, shape(vals)?),
        },
        Op::Constant { index, ty } => Op::Constant {
            index,
            ty: TensorType::new(ty.dtype, shape(vals)?),
        },
        Op::Reshape(x, _) => Op::Reshape(x, shape(vals)?),
        Op::Broadcast(x, _) => Op::Broadcast(x, shape(vals)?),
        Op::Slice(x, start, _) => {
            let (a, b) = vals.split_at(start.rank().min(vals.len()));
            Op::Slice(x, shape(a)?, shape(b)?)
        }
        Op::Conv(x, w, _) => Op::Conv(x, w, window(vals)?),
        Op::Pool(r, x, _) => Op::Pool(r, x, window(vals)?),
        other => other,
    })
}

/// `op` with its sizes zeroed and a `full`'s value blanked: two traces'
/// ops must agree on this.
fn sizeless(op: &Op) -> Result<Op, ClassProblem> {
    let zeros: SmallVec<[usize; 8]> = slots(op).iter().map(|_| 0).collect();
    Ok(match with_slots(op, &zeros)? {
        Op::Full { ty, .. } => Op::Full {
            value: Lit::Bool(false),
            ty,
        },
        other => other,
    })
}

/// A `full`'s value that is a size: `|value|` as read back, and its sign.
#[derive(Debug)]
struct SizeValue {
    expr: SizeExpr,
    negative: bool,
}

/// One node of a class's graph with its sizes read back.
#[derive(Debug)]
struct Template {
    /// The op as trace A recorded it.
    op: Op,
    /// Its [`slots`], read back.
    slots: SmallVec<[SizeExpr; 8]>,
    /// A `full` whose value is a size.
    value: Option<SizeValue>,
}

/// A class's graph, read back from two traces at stand-in sizes with
/// `pinned` symbols at the values it serves.
#[derive(Debug)]
pub struct GenericGraph {
    traced: Graph,
    nodes: Vec<Template>,
    pinned: Vec<Option<usize>>,
}

/// A literal's identity: floats by bits, so -0.0 and NaNs compare exactly.
fn lit_bits(l: Lit) -> (u8, u64) {
    match l {
        Lit::Float(f) => (0, f.to_bits()),
        Lit::Int(i) => (1, i as u64),
        Lit::Bool(b) => (2, b as u64),
    }
}

impl GenericGraph {
    /// The class's graph from `a` and `b`, the body traced at stand-in
    /// sets A and B with `pinned` symbols at their values; an error says
    /// why the two cannot be read as one graph over the free symbols (the
    /// class is then traced per size).
    pub fn new(
        class: &ShapeClass,
        pinned: &[Option<usize>],
        a: Graph,
        b: &Graph,
    ) -> Result<GenericGraph, ClassProblem> {
        let sizes_a = standins(Standin::A, class.symbols, pinned)?;
        let sizes_b = standins(Standin::B, class.symbols, pinned)?;
        let free = free_standins(&sizes_a, pinned);
        if a.len() != b.len() || a.outputs != b.outputs || a.param_types() != b.param_types() {
            return Err(ClassProblem::NodeCount {
                at_a: a.len(),
                at_b: b.len(),
            });
        }
        let mut nodes = Vec::with_capacity(a.len());
        for id in a.ids() {
            let (oa, ob) = (&a.node(id).op, &b.node(id).op);
            let differs = |difference| ClassProblem::NodeDiffers {
                node: id.0 as usize,
                op: tilejit_ir::text::op_name(oa),
                difference,
            };
            if sizeless(oa)? != sizeless(ob)? {
                return Err(differs(NodeDifference::Op));
            }
            let (sa, sb) = (slots(oa), slots(ob));
            let slots = sa
                .iter()
                .zip(&sb)
                .map(|(&x, &y)| SizeExpr::read(x, y, &free, &sizes_b))
                .collect::<Option<SmallVec<[SizeExpr; 8]>>>()
                .ok_or_else(|| differs(NodeDifference::Size))?;
            let mut value = None;
            match (oa, ob) {
                (Op::Full { value: va, ty }, Op::Full { value: vb, .. })
                    if lit_bits(*va) != lit_bits(*vb) =>
                {
                    let read = integral(*va).zip(integral(*vb)).and_then(|(x, y)| {
                        let ((v, negative), (w, negative_b)) = (x, y);
                        // A literal that may have rounded its size reads
                        // back as the size plus the rounding (`n + 1`).
                        let exact = |x| holds_exactly(ty.dtype, x);
                        if negative != negative_b || !exact(v) || !exact(w) {
                            return None;
                        }
                        let expr = SizeExpr::read(v, w, &free, &sizes_b)?;
                        let at_b = size_lit(expr.eval(&sizes_b)?, negative, ty.dtype).ok()?;
                        (!expr.is_const() && lit_bits(at_b) == lit_bits(*vb))
                            .then_some(SizeValue { expr, negative })
                    });
                    value = Some(read.ok_or_else(|| differs(NodeDifference::Value))?);
                }
                (Op::Constant { index: ia, .. }, Op::Constant { index: ib, .. }) => {
                    let bytes = |g: &Graph, i: u32| {
                        g.constant(i).and_then(|c| c.buffer().to_le_bytes().ok())
                    };
                    let same = bytes(&a, *ia).is_some_and(|x| Some(x) == bytes(b, *ib));
                    if !same || slots.iter().any(|s| !s.is_const()) {
                        return Err(differs(NodeDifference::Constant));
                    }
                }
                _ => {}
            }
            nodes.push(Template {
                op: oa.clone(),
                slots,
                value,
            });
        }
        Ok(GenericGraph {
            traced: a,
            nodes,
            pinned: pinned.to_vec(),
        })
    }

    /// The graph as traced, at stand-in sizes A.
    pub fn traced(&self) -> &Graph {
        &self.traced
    }

    /// The symbols this graph pins, with their values (`None`: free).
    pub fn pinned(&self) -> &[Option<usize>] {
        &self.pinned
    }

    /// Whether it serves a member with these symbol values: every pinned
    /// symbol has its pinned value.
    pub fn fits(&self, sizes: &[usize]) -> bool {
        sizes.len() == self.pinned.len()
            && self
                .pinned
                .iter()
                .zip(sizes)
                .all(|(p, s)| p.is_none_or(|p| p == *s))
    }

    /// The graph for these symbol values, and the values of the params it
    /// adds after the traced ones (one per float `full` whose value is a
    /// size, like `mean`'s divisor, so that value is a launch argument and
    /// the kernels stay size-generic). Every node is rebuilt with its
    /// sizes evaluated and its type inferred again. An error means these
    /// sizes do not fit (the caller traces them exactly).
    pub fn instantiate(&self, sizes: &[usize]) -> Result<(Graph, Vec<Lit>), ClassProblem> {
        if !self.fits(sizes) {
            return Err(ClassProblem::Unfit {
                sizes: sizes.to_vec(),
                pinned: self.pinned.clone(),
            });
        }
        let add = |g: &mut Graph, op: Op, node: usize| {
            g.add(op)
                .map_err(|source| ClassProblem::Node { node, source })
        };
        let mut next_param = self.traced.param_types().len() as u32;
        let mut size_params = Vec::new();
        let mut map: Vec<NodeId> = Vec::with_capacity(self.nodes.len());
        let mut g = Graph::new();
        for (id, t) in self.nodes.iter().enumerate() {
            let vals = t
                .slots
                .iter()
                .map(|e| e.eval(sizes))
                .collect::<Option<SmallVec<[usize; 8]>>>()
                .ok_or_else(|| ClassProblem::SizeOverflow {
                    node: id,
                    sizes: sizes.to_vec(),
                })?;
            let op = with_slots(&t.op, &vals)?;
            let new_id = match (op, &t.value) {
                (Op::Constant { index, .. }, _) => {
                    let value = self
                        .traced
                        .constant(index)
                        .ok_or(ClassProblem::MissingConstant { index })?;
                    g.add_constant(value.clone())
                }
                (Op::Full { ty, .. }, Some(sv)) => {
                    let v = sv
                        .expr
                        .eval(sizes)
                        .ok_or_else(|| ClassProblem::ValueOverflow {
                            sizes: sizes.to_vec(),
                        })?;
                    let value = size_lit(v, sv.negative, ty.dtype)?;
                    if ty.dtype.is_float() {
                        size_params.push(value);
                        let p = add(
                            &mut g,
                            Op::Param {
                                index: next_param,
                                dtype: ty.dtype,
                            },
                            id,
                        )?;
                        next_param += 1;
                        match ty.shape.rank() {
                            0 => p,
                            _ => add(&mut g, Op::Broadcast(p, ty.shape), id)?,
                        }
                    } else {
                        add(&mut g, Op::Full { value, ty }, id)?
                    }
                }
                (op, _) => add(&mut g, op.map_operands(|x| map[x.index()]), id)?,
            };
            map.push(new_id);
        }
        g.outputs = self.traced.outputs.iter().map(|o| map[o.index()]).collect();
        Ok((g, size_params))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use tilejit_ir::{BinaryOp, DType, ReduceOp};

    fn sig(shapes: &[&[usize]]) -> Signature {
        Signature {
            args: shapes
                .iter()
                .map(|s| ArgSig::Tensor(TensorType::new(DType::F32, Shape::new(s).unwrap())))
                .collect(),
        }
    }

    fn free(n: usize) -> Vec<Option<usize>> {
        vec![None; n]
    }

    #[test]
    fn equal_dims_share_a_symbol_and_ones_stay_fixed() {
        let (a, sa) = ShapeClass::of(&sig(&[&[8, 16], &[16], &[1, 8]]));
        let (b, sb) = ShapeClass::of(&sig(&[&[3, 40], &[40], &[1, 3]]));
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "(f32[n0,n1], f32[n1], f32[1,n0])");
        assert_eq!((sa, sb), (vec![8, 16], vec![3, 40]));
        let (c, _) = ShapeClass::of(&sig(&[&[10], &[11]]));
        let (d, _) = ShapeClass::of(&sig(&[&[10], &[10]]));
        assert_ne!(c, d);
        assert_eq!(c.signature_with(&[10, 11]).unwrap(), sig(&[&[10], &[11]]));
    }

    #[test]
    fn the_two_standin_sets_are_disjoint_primes() {
        let (a, b) = (probes(Standin::A, 96), probes(Standin::B, 96));
        assert_eq!(&a[..3], [1031, 2053, 3079]);
        assert!(b.iter().all(|p| !a.contains(p)));
        assert!(a.iter().zip(b).all(|(x, y)| x < y));
    }

    /// `sum(x.reshape([n0 * n1])) + full([1], 2)` traced at both stand-in
    /// sets, instantiated at real sizes: the same graph as traced there.
    #[test]
    fn a_product_size_instantiates_like_a_direct_trace() {
        let build = |n0: usize, n1: usize| {
            let mut g = Graph::new();
            let ty = TensorType::new(DType::F32, Shape::new(&[n0, n1]).unwrap());
            let x = g.add(Op::Input { index: 0, ty }).unwrap();
            let r = g
                .add(Op::Reshape(x, Shape::new(&[n0 * n1]).unwrap()))
                .unwrap();
            let s = g
                .add(Op::Reduce(ReduceOp::Sum, r, tilejit_ir::Axes(1)))
                .unwrap();
            let t = TensorType::new(DType::F32, g.ty(s).shape);
            let k = g
                .add(Op::Full {
                    value: tilejit_ir::Lit::Float(2.0),
                    ty: t,
                })
                .unwrap();
            let y = g.add(Op::Binary(BinaryOp::Add, s, k)).unwrap();
            g.outputs.push(y);
            g
        };
        let (class, _) = ShapeClass::of(&sig(&[&[5, 7]]));
        let (a, b) = (probes(Standin::A, 2), probes(Standin::B, 2));
        let generic =
            GenericGraph::new(&class, &free(2), build(a[0], a[1]), &build(b[0], b[1])).unwrap();
        for (n0, n1) in [(5, 7), (2, 3), (1000, 3)] {
            let (g, extra) = generic.instantiate(&[n0, n1]).unwrap();
            assert!(extra.is_empty());
            assert_eq!(g.to_string(), build(n0, n1).to_string());
        }
    }

    /// A `full` of shape `[k]`: a literal equal to a stand-in (1031) is the
    /// same in both traces, so it stays a constant; `n + 1` reads back
    /// with an offset; `n + 100` differs but reads as no product of
    /// stand-ins plus a small offset, so the class is not generic.
    #[test]
    fn literals_at_standins_stay_constants_and_sums_of_sizes_are_refused() {
        let (class, _) = ShapeClass::of(&sig(&[&[5]]));
        let (a, b) = (probes(Standin::A, 1)[0], probes(Standin::B, 1)[0]);
        let full = |n: usize, value: f64| {
            let mut g = Graph::new();
            let ty = TensorType::new(DType::F32, Shape::new(&[n]).unwrap());
            let f = g
                .add(Op::Full {
                    value: tilejit_ir::Lit::Float(value),
                    ty,
                })
                .unwrap();
            g.outputs.push(f);
            g
        };
        // Shape [1031] and value 1031 in both traces: constants.
        let generic =
            GenericGraph::new(&class, &free(1), full(a, a as f64), &full(a, a as f64)).unwrap();
        let (g, extra) = generic.instantiate(&[3]).unwrap();
        assert!(extra.is_empty());
        assert_eq!(g.to_string(), full(a, a as f64).to_string());
        // Shape [n + 1] (a cache grown by `cat`): generic.
        let plus_one =
            GenericGraph::new(&class, &free(1), full(a + 1, 0.0), &full(b + 1, 0.0)).unwrap();
        assert_eq!(
            plus_one.instantiate(&[7]).unwrap().0.to_string(),
            full(8, 0.0).to_string()
        );
        // Shape [n + 100]: past the offsets read back, not generic.
        let why = GenericGraph::new(&class, &free(1), full(a + 100, 0.0), &full(b + 100, 0.0))
            .unwrap_err();
        let node = |difference| ClassProblem::NodeDiffers {
            node: 0,
            op: "full",
            difference,
        };
        assert_eq!(why, node(NodeDifference::Size));
        assert_eq!(
            why.to_string(),
            "node 0 (`full`): a size is computed from sizes in a way it cannot follow \
             between stand-in sizes"
        );
        // Value 1/n: not generic.
        let inv = |n: usize| DType::F32.round_float(1.0 / n as f64);
        let why =
            GenericGraph::new(&class, &free(1), full(a, inv(a)), &full(b, inv(b))).unwrap_err();
        assert_eq!(why, node(NodeDifference::Value));
    }

    #[test]
    fn a_constant_sized_by_a_symbol_is_not_generic() {
        let (class, _) = ShapeClass::of(&sig(&[&[5]]));
        let build = |n: usize| {
            let mut g = Graph::new();
            let arr =
                tilejit_ir::Array::from_vec((0..n).map(|i| i as f32).collect::<Vec<f32>>(), &[n])
                    .unwrap();
            let c = g.add_constant(arr);
            g.outputs.push(c);
            g
        };
        let (a, b) = (probes(Standin::A, 1)[0], probes(Standin::B, 1)[0]);
        let why = GenericGraph::new(&class, &free(1), build(a), &build(b)).unwrap_err();
        assert_eq!(
            why,
            ClassProblem::NodeDiffers {
                node: 0,
                op: "const",
                difference: NodeDifference::Constant,
            }
        );
    }

    #[test]
    fn a_broadcast_keeps_its_constant_dim_and_wrong_arity_is_an_error() {
        // broadcast [n0] -> [4, n0].
        let (class, _) = ShapeClass::of(&sig(&[&[16]]));
        let build = |p: usize| {
            let mut g = Graph::new();
            let ty = TensorType::new(DType::F32, Shape::new(&[p]).unwrap());
            let x = g.add(Op::Input { index: 0, ty }).unwrap();
            let b = g
                .add(Op::Broadcast(x, Shape::new(&[4, p]).unwrap()))
                .unwrap();
            g.outputs.push(b);
            g
        };
        let (a, b) = (probes(Standin::A, 1)[0], probes(Standin::B, 1)[0]);
        let generic = GenericGraph::new(&class, &free(1), build(a), &build(b)).unwrap();
        let (g, _) = generic.instantiate(&[9]).unwrap();
        assert_eq!(g.ty(g.outputs[0]).shape.dims(), [4, 9]);
        assert!(generic.instantiate(&[9, 3]).is_err());
    }

    /// `x / full(n0)` (how `mean` divides): the divisor becomes a param
    /// whose value is the size.
    #[test]
    fn a_size_used_as_a_value_becomes_a_param() {
        let (class, _) = ShapeClass::of(&sig(&[&[5]]));
        let build = |n: usize| {
            let mut g = Graph::new();
            let ty = TensorType::new(DType::F32, Shape::new(&[n]).unwrap());
            let x = g.add(Op::Input { index: 0, ty }).unwrap();
            let n = g
                .add(Op::Full {
                    value: Lit::Float(n as f64),
                    ty,
                })
                .unwrap();
            let y = g.add(Op::Binary(BinaryOp::Div, x, n)).unwrap();
            g.outputs.push(y);
            g
        };
        let (a, b) = (probes(Standin::A, 1)[0], probes(Standin::B, 1)[0]);
        let generic = GenericGraph::new(&class, &free(1), build(a), &build(b)).unwrap();
        let (g, extra) = generic.instantiate(&[7]).unwrap();
        assert_eq!(extra, [Lit::Float(7.0)]);
        assert_eq!(g.param_types(), [DType::F32]);
        assert_eq!(g.ty(g.outputs[0]).shape.dims(), [7]);
    }

    /// A read of `n1` pins `n1`, one of `n0 + 1` pins `n0`, one of `n0 + 100`
    /// pins everything; reads
    /// equal in both traces pin nothing.
    #[test]
    fn reads_pin_the_symbols_they_factor_into() {
        let (class, _) = ShapeClass::of(&sig(&[&[5, 7]]));
        let (a, b) = (probes(Standin::A, 2), probes(Standin::B, 2));
        assert_eq!(
            class.pins_for_reads(&free(2), &[3, a[1]], &[3, b[1]]),
            Ok(vec![1])
        );
        assert_eq!(
            class.pins_for_reads(&free(2), &[a[0] * a[1]], &[b[0] * b[1]]),
            Ok(vec![0, 1])
        );
        assert_eq!(
            class.pins_for_reads(&free(2), &[a[0] + 1], &[b[0] + 1]),
            Ok(vec![0])
        );
        assert!(class
            .pins_for_reads(&free(2), &[a[0] + 100], &[b[0] + 100])
            .is_err());
        assert_eq!(class.pins_for_reads(&free(2), &[4, 4], &[4, 4]), Ok(vec![]));
        // With n0 pinned at 5, a read of 5 * n1 pins n1 only.
        let pinned = [Some(5), None];
        assert_eq!(
            class.pins_for_reads(&pinned, &[5 * a[1]], &[5 * b[1]]),
            Ok(vec![1])
        );
        // A graph pinned at n0 = 5 fits only sizes with n0 = 5.
        let build = |n0: usize, n1: usize| {
            let mut g = Graph::new();
            let ty = TensorType::new(DType::F32, Shape::new(&[n0, n1]).unwrap());
            let x = g.add(Op::Input { index: 0, ty }).unwrap();
            g.outputs.push(x);
            g
        };
        let g = GenericGraph::new(&class, &pinned, build(5, a[1]), &build(5, b[1])).unwrap();
        assert!(g.fits(&[5, 9]) && !g.fits(&[6, 9]));
        assert!(g.instantiate(&[6, 9]).is_err());
        assert_eq!(
            g.instantiate(&[5, 9]).unwrap().0.to_string(),
            build(5, 9).to_string()
        );
    }
}
