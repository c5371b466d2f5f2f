//! Shape classes: what a dynamic jit function (`#[jit(dynamic)]`) keys its
//! traced graphs on instead of exact sizes.
//!
//! A class keeps of each tensor argument its dtype, its rank, which dims
//! are 0 or 1, and which dims are equal (across all arguments): every other
//! dim is a *size symbol* `n0, n1, ..`, numbered by first appearance. So
//! `(f32[8,16], f32[16])` and `(f32[3,40], f32[40])` are one class,
//! `(f32[n0,n1], f32[n1])`, while `(f32[10], f32[11])` is not the class of
//! `(f32[10], f32[10])`.
//!
//! A new class is traced at stand-in sizes, each symbol its own prime
//! ([`probes`]: 1031, 2053, 3079, ..). Because the body never sees data,
//! only sizes, every size the library's ops derive from the arguments'
//! shapes reads back by factoring over those primes: a broadcast to
//! `[n0, n1]`, a reshape to `[n0 * n1]`, `mean`'s divisor `n1`. So when
//! the body itself read no size and gave no literal that is a multiple of
//! a stand-in, and no op computed on a size another way (the frontend's
//! trace watch says which), that one trace is the class's graph.
//!
//! Otherwise the class is also traced at the call's own sizes, and
//! [`GenericGraph::check_against`] evaluates the stand-in reading there
//! and requires the exact graph, op for op and bit for bit: what a body
//! computed from sizes in a way factoring cannot see (`n - 1`, `1.0 / n`,
//! `n / 2`, a rounded `numel`, a size inside a constant tensor) differs,
//! and the class is traced per size, with the reason kept. Later sizes of
//! a generic class are instantiated ([`GenericGraph::instantiate`])
//! without running the body, every node's type inferred again.
//!
//! The contract, as for any tracing JIT: a dynamic body must run the same
//! ops for every size. A body that reads sizes is checked at one real size
//! only, so a branch or clamp on a size that both traces take the same way
//! (`n.min(512)` with both sizes above 512) is not seen.

use crate::signature::{ArgSig, Signature};
use smallvec::SmallVec;
use std::fmt;
use std::sync::OnceLock;
use tilejit_ir::{Graph, IrError, Lit, NodeId, Op, Shape, TensorType};

/// One dim of a class: fixed (0 or 1) or a size symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClassDim {
    /// A dim that is 0 or 1 in every member (code differs for them).
    Fixed(u8),
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
    /// The class of a signature, and the value of each of its symbols.
    pub fn of(sig: &Signature) -> (ShapeClass, Vec<usize>) {
        let mut sizes: Vec<usize> = Vec::new();
        let args = sig
            .args
            .iter()
            .map(|a| match a {
                ArgSig::Tensor(t) => ClassArg::Tensor(
                    t.dtype,
                    t.shape
                        .dims()
                        .iter()
                        .map(|&d| match d {
                            0 | 1 => ClassDim::Fixed(d as u8),
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
                            ClassDim::Fixed(v) => v as usize,
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

    /// The member signature a class is traced with: each symbol its own
    /// stand-in prime.
    pub fn probe_signature(&self) -> Result<Signature, String> {
        if self.symbols > MAX_SYMBOLS {
            return Err(format!(
                "{} size symbols (at most {MAX_SYMBOLS})",
                self.symbols
            ));
        }
        self.signature_with(probes(self.symbols))
            .map_err(|e| e.to_string())
    }
}

impl fmt::Display for ShapeClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match a {
                ClassArg::Tensor(dtype, dims) => {
                    write!(f, "{dtype}[")?;
                    for (j, d) in dims.iter().enumerate() {
                        if j > 0 {
                            f.write_str(",")?;
                        }
                        match d {
                            ClassDim::Fixed(v) => write!(f, "{v}")?,
                            ClassDim::Sym(s) => write!(f, "n{s}")?,
                        }
                    }
                    f.write_str("]")?;
                }
                ClassArg::Other(s) => write!(f, "{s}")?,
            }
        }
        f.write_str(")")
    }
}

/// The spacing of the stand-in sizes: symbol `i`'s is the first prime
/// above `(i + 1) * PROBE_STEP`. Stand-ins far apart keep a size computed
/// by a small offset (`n1 - 2`) from reading back as another symbol (with
/// neighbouring primes, `1033 - 2` was `n0`); small enough that a tensor a
/// body builds from a stand-in size stays affordable. Constants that
/// happen to be multiples of a stand-in only cost a check trace or a
/// per-size fallback, never a wrong result.
const PROBE_STEP: usize = 1 << 10;

/// How many symbols a class may have and still be traced generically.
pub(crate) const MAX_SYMBOLS: usize = 96;

/// The stand-in sizes of `n` symbols (at most 96): for symbol `i`, the
/// first prime above `(i + 1) * 1024`, so 1031, 2053, 3079, .. A tensor
/// whose dims are many distinct late symbols can overflow at these sizes
/// (six of them, or four past the 40th symbol); its class is then traced
/// per size, still correct.
pub fn probes(n: usize) -> &'static [usize] {
    static PRIMES: OnceLock<Vec<usize>> = OnceLock::new();
    let primes = PRIMES.get_or_init(|| {
        let is_prime = |p: usize| {
            (2..)
                .take_while(|d| d * d <= p)
                .all(|d| !p.is_multiple_of(d))
        };
        (1..=MAX_SYMBOLS)
            .filter_map(|i| (i * PROBE_STEP..).find(|&p| is_prime(p)))
            .collect()
    });
    &primes[..n.min(MAX_SYMBOLS)]
}

/// Whether the size `d`, met while tracing at the stand-ins of `symbols`
/// symbols, would read back as a size (a multiple of a stand-in) rather
/// than as the constant it is.
pub fn reads_as_size(d: usize, symbols: usize) -> bool {
    !SizeExpr::decompose(d, probes(symbols)).is_const()
}

/// Whether a `full` of `value`, met while tracing at the stand-ins of
/// `symbols` symbols, would read back as a size.
pub fn value_reads_as_size(value: Lit, symbols: usize) -> bool {
    value_expr(value, probes(symbols)).is_some()
}

/// A size in a traced graph, read back over the stand-ins: `coef ·
/// Π n_sym^exp` (a constant when there are no factors).
#[derive(Clone, Debug, PartialEq, Eq)]
struct SizeExpr {
    coef: usize,
    factors: SmallVec<[(u16, u8); 2]>,
}

impl SizeExpr {
    fn decompose(d: usize, probes: &[usize]) -> SizeExpr {
        let mut coef = d;
        let mut factors = SmallVec::new();
        if d > 1 {
            for (i, &p) in probes.iter().enumerate() {
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
        SizeExpr { coef, factors }
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
        Some(v)
    }
}

/// A `full`'s value read back over the stand-ins: `Some(size)` (up to
/// sign) when it is an integral multiple of stand-ins, else `None`.
fn value_expr(value: Lit, probes: &[usize]) -> Option<SizeExpr> {
    let v = match value {
        Lit::Bool(_) => return None,
        Lit::Int(i) => i as f64,
        Lit::Float(f) => f,
    };
    // Integral values only: 2^53 keeps the conversion exact.
    if !v.is_finite() || v.fract() != 0.0 || v.abs() >= (1u64 << 53) as f64 {
        return None;
    }
    let e = SizeExpr::decompose(v.abs() as usize, probes);
    (!e.is_const()).then_some(e)
}

/// A class's traced graph, read back over its stand-in sizes.
#[derive(Debug)]
pub struct GenericGraph {
    traced: Graph,
    symbols: usize,
}

/// What a node of the traced graph becomes at some sizes.
enum Concrete {
    /// The op with every size evaluated.
    Op(Op),
    /// A `full` whose value is a size: this value, of the node's type.
    SizeValue(Lit, TensorType),
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
    /// A graph traced at `class`'s stand-in sizes; an error says why it
    /// cannot serve other sizes. Before use it must pass
    /// [`check_against`](Self::check_against).
    pub fn new(class: &ShapeClass, traced: Graph) -> Result<GenericGraph, String> {
        if class.symbols > MAX_SYMBOLS {
            return Err(format!(
                "{} size symbols (at most {MAX_SYMBOLS})",
                class.symbols
            ));
        }
        let probes = probes(class.symbols);
        for id in traced.ids() {
            let node = traced.node(id);
            if let Op::Constant { ty, .. } = node.op {
                if ty
                    .shape
                    .dims()
                    .iter()
                    .any(|&d| !SizeExpr::decompose(d, probes).is_const())
                {
                    return Err(format!(
                        "constant tensor of shape {} made from a size inside the body",
                        ty.shape
                    ));
                }
            }
        }
        Ok(GenericGraph {
            traced,
            symbols: class.symbols,
        })
    }

    /// The graph as traced, at the stand-in sizes.
    pub fn traced(&self) -> &Graph {
        &self.traced
    }

    fn shape_at(&self, s: &Shape, sizes: &[usize]) -> Result<Shape, String> {
        let probes = probes(self.symbols);
        let mut dims: SmallVec<[usize; 4]> = SmallVec::new();
        for &d in s.dims() {
            dims.push(
                SizeExpr::decompose(d, probes)
                    .eval(sizes)
                    .ok_or_else(|| format!("size {d} overflows at sizes {sizes:?}"))?,
            );
        }
        Shape::new(&dims).map_err(|e| e.to_string())
    }

    fn ty_at(&self, t: &TensorType, sizes: &[usize]) -> Result<TensorType, String> {
        Ok(TensorType::new(t.dtype, self.shape_at(&t.shape, sizes)?))
    }

    /// Node `id` at these sizes.
    fn concrete(&self, id: NodeId, sizes: &[usize]) -> Result<Concrete, String> {
        Ok(Concrete::Op(match self.traced.node(id).op.clone() {
            Op::Input { index, ty } => Op::Input {
                index,
                ty: self.ty_at(&ty, sizes)?,
            },
            Op::Full { value, ty } => {
                let ty = self.ty_at(&ty, sizes)?;
                let Some(e) = value_expr(value, probes(self.symbols)) else {
                    return Ok(Concrete::Op(Op::Full { value, ty }));
                };
                let v = e
                    .eval(sizes)
                    .ok_or_else(|| format!("a size value overflows at sizes {sizes:?}"))?;
                let negative = match value {
                    Lit::Float(f) => f < 0.0,
                    Lit::Int(i) => i < 0,
                    Lit::Bool(_) => false,
                };
                let lit = if ty.dtype.is_float() {
                    Lit::from_f64(if negative { -(v as f64) } else { v as f64 }, ty.dtype)
                } else {
                    // A size that does not fit the dtype is an error at
                    // this size, as an exact trace's scalar would be.
                    let v = i64::try_from(v).map_err(|_| format!("size value {v} overflows"))?;
                    let v = if negative { -v } else { v };
                    let lit = Lit::from_i64(v, ty.dtype);
                    if lit.as_i64() != v {
                        return Err(format!("size value {v} does not fit {}", ty.dtype));
                    }
                    lit
                };
                return Ok(Concrete::SizeValue(lit, ty));
            }
            Op::Constant { index, ty } => Op::Constant {
                index,
                ty: self.ty_at(&ty, sizes)?,
            },
            Op::Reshape(x, s) => Op::Reshape(x, self.shape_at(&s, sizes)?),
            Op::Broadcast(x, s) => Op::Broadcast(x, self.shape_at(&s, sizes)?),
            Op::Slice(x, start, s) => {
                Op::Slice(x, self.shape_at(&start, sizes)?, self.shape_at(&s, sizes)?)
            }
            // A window taken from the weights' shape is a size too.
            Op::Conv(x, w, win) => {
                let f = [win.kh, win.kw, win.stride, win.pad].map(|v| v as usize);
                let at = self.shape_at(&Shape::new(&f).map_err(|e| e.to_string())?, sizes)?;
                let small = |v: usize| {
                    u32::try_from(v).map_err(|_| format!("window size {v} overflows at {sizes:?}"))
                };
                Op::Conv(
                    x,
                    w,
                    tilejit_ir::Window {
                        kh: small(at[0])?,
                        kw: small(at[1])?,
                        stride: small(at[2])?,
                        pad: small(at[3])?,
                    },
                )
            }
            other => other,
        }))
    }

    /// Checks that this trace, evaluated at `sizes`, is exactly `exact`,
    /// the body traced at those sizes: every op, attribute, `full` value
    /// (by bits), constant (by bits) and type. The trace at stand-in sizes
    /// cannot see which of its values came from sizes by arithmetic it
    /// cannot read back (`n - 1`, `1.0 / n`, a rounded `numel`, a size
    /// baked into a constant tensor, a branch on a size); a second trace
    /// at real sizes disagrees with it there, and the class is then traced
    /// per size.
    pub fn check_against(&self, exact: &Graph, sizes: &[usize]) -> Result<(), String> {
        if exact.len() != self.traced.len() || exact.outputs != self.traced.outputs {
            return Err(format!(
                "the body builds {} nodes at stand-in sizes and {} at {sizes:?}",
                self.traced.len(),
                exact.len()
            ));
        }
        for id in self.traced.ids() {
            let e = exact.node(id);
            let differs = || {
                format!(
                    "node {} (`{}`) differs between stand-in sizes and {sizes:?}",
                    id.0,
                    tilejit_ir::text::op_name(&e.op)
                )
            };
            let same = match (self.concrete(id, sizes)?, &e.op) {
                (Concrete::SizeValue(a, ta), Op::Full { value: b, ty: tb })
                | (Concrete::Op(Op::Full { value: a, ty: ta }), Op::Full { value: b, ty: tb }) => {
                    ta == *tb && lit_bits(a) == lit_bits(*b)
                }
                (
                    Concrete::Op(Op::Constant { index: a, ty: ta }),
                    Op::Constant { index: b, ty: tb },
                ) => {
                    let bytes = |g: &Graph, i: u32| {
                        g.constant(i).and_then(|c| c.buffer().to_le_bytes().ok())
                    };
                    ta == *tb && bytes(&self.traced, a).is_some_and(|x| Some(x) == bytes(exact, *b))
                }
                (Concrete::Op(a), b) => a == *b,
                (Concrete::SizeValue(..), _) => false,
            };
            if !same || self.ty_at(&self.traced.node(id).ty, sizes)? != e.ty {
                return Err(differs());
            }
        }
        Ok(())
    }

    /// The graph for these symbol values, and the values of the params it
    /// adds after the traced ones (one per `full` whose value is a size,
    /// like `mean`'s divisor, so that value is a launch argument and the
    /// kernels stay size-generic). Every node is rebuilt with its sizes
    /// evaluated, its type inferred again and checked against the traced
    /// one's. An error means these sizes do not fit the trace (the caller
    /// traces them exactly).
    pub fn instantiate(&self, sizes: &[usize]) -> Result<(Graph, Vec<Lit>), String> {
        if sizes.len() != self.symbols {
            return Err(format!(
                "{} sizes for {} symbols",
                sizes.len(),
                self.symbols
            ));
        }
        let add = |g: &mut Graph, op: Op, id: NodeId| {
            g.add(op).map_err(|e| format!("node {}: {e}", id.0))
        };
        let mut next_param = self.traced.param_types().len() as u32;
        let mut size_params = Vec::new();
        let mut map: Vec<NodeId> = Vec::with_capacity(self.traced.len());
        let mut g = Graph::new();
        for id in self.traced.ids() {
            let node = self.traced.node(id);
            let new_id = match self.concrete(id, sizes)? {
                Concrete::Op(Op::Constant { index, .. }) => {
                    let value = self
                        .traced
                        .constant(index)
                        .ok_or_else(|| format!("constant {index} missing"))?;
                    g.add_constant(value.clone())
                }
                Concrete::SizeValue(value, ty) if ty.dtype.is_float() => {
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
                }
                Concrete::SizeValue(value, ty) => add(&mut g, Op::Full { value, ty }, id)?,
                Concrete::Op(op) => add(&mut g, op.map_operands(|x| map[x.index()]), id)?,
            };
            let want = self.ty_at(&node.ty, sizes)?;
            if g.ty(new_id) != want {
                return Err(format!(
                    "node {} is {} at these sizes, not {want}",
                    id.0,
                    g.ty(new_id)
                ));
            }
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

    /// `sum(x.reshape([n0 * n1])) + full([1], 2)` traced at the stand-ins,
    /// instantiated at real sizes: the same graph as traced there.
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
        let p = probes(2);
        let generic = GenericGraph::new(&class, build(p[0], p[1])).unwrap();
        for (n0, n1) in [(5, 7), (2, 3), (1000, 3)] {
            let (g, extra) = generic.instantiate(&[n0, n1]).unwrap();
            assert!(extra.is_empty());
            assert_eq!(g.to_string(), build(n0, n1).to_string());
        }
    }

    /// Sizes the stand-in trace cannot read back (`n + 1`) pass `new` but
    /// fail the check against a trace at real sizes; constants sized by a
    /// symbol fail at once.
    #[test]
    fn sums_of_sizes_and_sized_constants_are_not_generic() {
        let (class, _) = ShapeClass::of(&sig(&[&[5]]));
        let p = probes(1)[0];
        let full = |n: usize| {
            let mut g = Graph::new();
            let ty = TensorType::new(DType::F32, Shape::new(&[n + 1]).unwrap());
            let f = g
                .add(Op::Full {
                    value: tilejit_ir::Lit::Float(0.0),
                    ty,
                })
                .unwrap();
            g.outputs.push(f);
            g
        };
        let generic = GenericGraph::new(&class, full(p)).unwrap();
        let why = generic.check_against(&full(5), &[5]).unwrap_err();
        assert!(why.contains("differs"), "{why}");

        let mut g = Graph::new();
        let a = tilejit_ir::Array::from_vec((0..p).map(|i| i as f32).collect::<Vec<f32>>(), &[p])
            .unwrap();
        let c = g.add_constant(a);
        g.outputs.push(c);
        let why = GenericGraph::new(&class, g).unwrap_err();
        assert!(why.contains("constant tensor"), "{why}");
    }

    #[test]
    fn a_broadcast_keeps_its_constant_dim_and_wrong_arity_is_an_error() {
        // broadcast [n0] -> [4, n0].
        let (class, _) = ShapeClass::of(&sig(&[&[16]]));
        let p = probes(1)[0];
        let mut g = Graph::new();
        let ty = TensorType::new(DType::F32, Shape::new(&[p]).unwrap());
        let x = g.add(Op::Input { index: 0, ty }).unwrap();
        let b = g
            .add(Op::Broadcast(x, Shape::new(&[4, p]).unwrap()))
            .unwrap();
        g.outputs.push(b);
        let generic = GenericGraph::new(&class, g).unwrap();
        assert_eq!(
            generic.instantiate(&[9]).unwrap().0.ty(b).shape.dims(),
            [4, 9]
        );
        assert!(generic.instantiate(&[9, 3]).is_err());
    }

    /// `x / full(n0)` (how `mean` divides): the divisor becomes a param
    /// whose value is the size.
    #[test]
    fn a_size_used_as_a_value_becomes_a_param() {
        let (class, _) = ShapeClass::of(&sig(&[&[5]]));
        let p = probes(1)[0];
        let build_at = |n: usize, v: f64| {
            let mut g = Graph::new();
            let ty = TensorType::new(DType::F32, Shape::new(&[n]).unwrap());
            let x = g.add(Op::Input { index: 0, ty }).unwrap();
            let n = g
                .add(Op::Full {
                    value: Lit::Float(v),
                    ty,
                })
                .unwrap();
            let y = g.add(Op::Binary(BinaryOp::Div, x, n)).unwrap();
            g.outputs.push(y);
            g
        };
        let build = |v: f64| build_at(p, v);
        let generic = GenericGraph::new(&class, build(p as f64)).unwrap();
        let (g, extra) = generic.instantiate(&[7]).unwrap();
        assert_eq!(extra, [Lit::Float(7.0)]);
        assert_eq!(g.param_types(), [DType::F32]);
        assert_eq!(g.ty(g.outputs[0]).shape.dims(), [7]);
        assert!(generic.check_against(&build_at(7, 7.0), &[7]).is_ok());
        // `x * full(1/n0)` reads back as a constant, which the exact
        // trace contradicts.
        let inv = |n: usize| DType::F32.round_float(1.0 / n as f64);
        let generic = GenericGraph::new(&class, build(inv(p))).unwrap();
        assert!(generic.check_against(&build_at(7, inv(7)), &[7]).is_err());
    }
}
