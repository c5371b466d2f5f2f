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
//! A class is traced once, with stand-in sizes: each symbol gets its own
//! prime above 2^14 ([`probes`]). Because the body never sees data, only
//! sizes, every size the trace records is then a product `c · n_i · n_j ..`
//! that can be read back by factoring over those primes: a reshape to
//! `[n0 * n1]` or `[n0, 64]`, a `full` of `[3 * n0]`. [`GenericGraph`]
//! checks that every size in the traced graph reads back this way and
//! instantiates the graph for real sizes by rebuilding it node by node,
//! so every node's type is inferred (and so checked) again.
//!
//! What cannot be generic makes the class fall back to exact-size traces,
//! with the reason kept: a body that fails at the stand-in sizes (say a
//! reshape to `n0 / 2`), a size that looks like a sum (`n0 + 1`, detected
//! as near a small multiple of a stand-in), a constant tensor whose size
//! came from a symbol. A body that branches on a size sees the stand-in
//! and takes the same branch for every size of the class: dynamic
//! functions must compute the same ops for all sizes.

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
    pub fn probe_signature(&self) -> Result<Signature, IrError> {
        self.signature_with(probes(self.symbols))
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

/// The smallest stand-in size: sizes below it in a traced graph are
/// constants. Above 2^14 so that constants are rarely mistaken, small
/// enough that a rank-4 shape of stand-ins does not overflow.
const PROBE_MIN: usize = 1 << 14;

/// How close to a small multiple of a stand-in a constant may not be: a
/// size the body computed as `n + k` (|k| up to this) or `2n - k`.
const NEAR: usize = 64;

/// The stand-in sizes of `n` symbols: the first `n` primes above
/// 2^14.
pub fn probes(n: usize) -> &'static [usize] {
    static PRIMES: OnceLock<Vec<usize>> = OnceLock::new();
    // 8 arguments of rank 8 at most need 64; a few more cost nothing.
    const MAX: usize = 80;
    let primes = PRIMES.get_or_init(|| {
        let is_prime = |p: usize| {
            (2..)
                .take_while(|d| d * d <= p)
                .all(|d| !p.is_multiple_of(d))
        };
        (PROBE_MIN..).filter(|&p| is_prime(p)).take(MAX).collect()
    });
    &primes[..n.min(MAX)]
}

/// A size in a traced graph, read back over the stand-ins: `coef ·
/// Π n_sym^exp`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SizeExpr {
    coef: usize,
    factors: SmallVec<[(u16, u8); 2]>,
}

impl SizeExpr {
    /// Reads a traced size back; an error says why it cannot be generic.
    fn decompose(d: usize, probes: &[usize]) -> Result<SizeExpr, String> {
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
        for (i, &p) in probes.iter().enumerate() {
            for m in 1..=8usize {
                if coef.abs_diff(m * p) <= NEAR {
                    return Err(format!(
                        "size {d} looks computed from n{i} by more than a product (n{i} = {p} while tracing)"
                    ));
                }
            }
        }
        Ok(SizeExpr { coef, factors })
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

/// A class's traced graph, checked to be generic over its sizes.
#[derive(Debug)]
pub struct GenericGraph {
    traced: Graph,
    symbols: usize,
}

/// The shapes an op carries as attributes.
fn op_shapes(op: &Op) -> SmallVec<[Shape; 1]> {
    match op {
        Op::Input { ty, .. } | Op::Full { ty, .. } | Op::Constant { ty, .. } => {
            SmallVec::from_elem(ty.shape, 1)
        }
        Op::Reshape(_, s) | Op::Broadcast(_, s) => SmallVec::from_elem(*s, 1),
        _ => SmallVec::new(),
    }
}

impl GenericGraph {
    /// Checks a graph traced at `class`'s stand-in sizes; an error says
    /// why the class cannot share one trace.
    pub fn new(class: &ShapeClass, traced: Graph) -> Result<GenericGraph, String> {
        let probes = probes(class.symbols);
        if probes.len() < class.symbols {
            return Err(format!("{} size symbols (at most 80)", class.symbols));
        }
        for id in traced.ids() {
            let node = traced.node(id);
            if let Op::Full { value, .. } = node.op {
                value_expr(value, probes)?;
            }
            for shape in op_shapes(&node.op).iter().chain([node.ty.shape].iter()) {
                for &d in shape.dims() {
                    let e = SizeExpr::decompose(d, probes)?;
                    if matches!(node.op, Op::Constant { .. }) && !e.is_const() {
                        return Err(format!(
                            "constant tensor of shape {shape} made from a size inside the body"
                        ));
                    }
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

    /// The graph for these symbol values, and the values of the params it
    /// adds after the traced ones (one per `full` whose float value is a
    /// size, like `mean`'s divisor, so that value is a launch argument and
    /// the kernels stay size-generic). Every node is rebuilt with its sizes
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
        let probes = probes(self.symbols);
        let eval = |e: &SizeExpr, d: usize| {
            e.eval(sizes)
                .ok_or_else(|| format!("size {d} overflows at sizes {sizes:?}"))
        };
        let map_shape = |s: &Shape| -> Result<Shape, String> {
            let mut dims: SmallVec<[usize; 4]> = SmallVec::new();
            for &d in s.dims() {
                dims.push(eval(&SizeExpr::decompose(d, probes)?, d)?);
            }
            Shape::new(&dims).map_err(|e| e.to_string())
        };
        let map_ty = |t: &TensorType| -> Result<TensorType, String> {
            Ok(TensorType::new(t.dtype, map_shape(&t.shape)?))
        };
        let add = |g: &mut Graph, op: Op, id: NodeId| {
            g.add(op).map_err(|e| format!("node {}: {e}", id.0))
        };
        let mut next_param = self.traced.param_types().len() as u32;
        let mut size_params = Vec::new();
        let mut map: Vec<NodeId> = Vec::with_capacity(self.traced.len());
        let mut g = Graph::new();
        for id in self.traced.ids() {
            let node = self.traced.node(id);
            let new_id = match node.op.map_operands(|x| map[x.index()]) {
                Op::Constant { index, .. } => {
                    let value = self
                        .traced
                        .constant(index)
                        .ok_or_else(|| format!("constant {index} missing"))?;
                    g.add_constant(value.clone())
                }
                Op::Full { value, ty } => {
                    let ty = map_ty(&ty)?;
                    match value_expr(value, probes)? {
                        Some(e) if ty.dtype.is_float() => {
                            let v = eval(&e, e.coef)? as f64;
                            let sign = if matches!(value, Lit::Float(f) if f < 0.0) {
                                -1.0
                            } else {
                                1.0
                            };
                            size_params.push(Lit::from_f64(sign * v, ty.dtype));
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
                        Some(e) => {
                            let v = eval(&e, e.coef)? as i64;
                            let v = if matches!(value, Lit::Int(i) if i < 0) {
                                -v
                            } else {
                                v
                            };
                            add(
                                &mut g,
                                Op::Full {
                                    value: Lit::from_i64(v, ty.dtype),
                                    ty,
                                },
                                id,
                            )?
                        }
                        None => add(&mut g, Op::Full { value, ty }, id)?,
                    }
                }
                op => {
                    let op = match op {
                        Op::Input { index, ty } => Op::Input {
                            index,
                            ty: map_ty(&ty)?,
                        },
                        Op::Reshape(x, s) => Op::Reshape(x, map_shape(&s)?),
                        Op::Broadcast(x, s) => Op::Broadcast(x, map_shape(&s)?),
                        other => other,
                    };
                    add(&mut g, op, id)?
                }
            };
            let want = map_ty(&node.ty)?;
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

/// A `full`'s value read back over the stand-ins: `None` for a constant,
/// `Some(size)` for a value that is a size (up to sign), an error for a
/// value computed from sizes some other way that the instantiation could
/// not redo (`1/n`, `sqrt(n)`, `n²`, `n + 1`).
fn value_expr(value: Lit, probes: &[usize]) -> Result<Option<SizeExpr>, String> {
    let size = |v: f64| -> Result<Option<SizeExpr>, String> {
        // Integral values only: 2^53 keeps the conversion exact.
        if v.fract() != 0.0 || v.abs() >= (1u64 << 53) as f64 {
            return Ok(None);
        }
        let e = SizeExpr::decompose(v.abs() as usize, probes)
            .map_err(|why| format!("value {v}: {why}"))?;
        Ok((!e.is_const()).then_some(e))
    };
    match value {
        Lit::Bool(_) => Ok(None),
        Lit::Int(i) => size(i as f64),
        Lit::Float(f) if !f.is_finite() || f == 0.0 => Ok(None),
        Lit::Float(f) => {
            if let Some(e) = size(f)? {
                return Ok(Some(e));
            }
            // Forms the body may have computed from a size: reject them
            // rather than bake in the stand-in's.
            let a = f.abs();
            for (form, g) in [("1/v", 1.0 / a), ("v²", a * a), ("1/v²", 1.0 / (a * a))] {
                let r = g.round();
                if r >= (PROBE_MIN - NEAR) as f64 && (g - r).abs() <= 1e-5 * g {
                    let read = size(r).map_err(|why| format!("value {f} ({form}): {why}"))?;
                    if read.is_some() {
                        return Err(format!(
                            "value {f} looks computed from sizes ({form} = {r})"
                        ));
                    }
                }
            }
            Ok(None)
        }
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

    #[test]
    fn sums_of_sizes_and_sized_constants_are_not_generic() {
        let (class, _) = ShapeClass::of(&sig(&[&[5]]));
        let p = probes(1)[0];
        let mut g = Graph::new();
        let ty = TensorType::new(DType::F32, Shape::new(&[p + 1]).unwrap());
        let f = g
            .add(Op::Full {
                value: tilejit_ir::Lit::Float(0.0),
                ty,
            })
            .unwrap();
        g.outputs.push(f);
        let why = GenericGraph::new(&class, g).unwrap_err();
        assert!(why.contains("more than a product"), "{why}");

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
    /// whose value is the size; `x * full(1/n0)` is not generic.
    #[test]
    fn a_size_used_as_a_value_becomes_a_param() {
        let (class, _) = ShapeClass::of(&sig(&[&[5]]));
        let p = probes(1)[0];
        let build = |v: f64| {
            let mut g = Graph::new();
            let ty = TensorType::new(DType::F32, Shape::new(&[p]).unwrap());
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
        let generic = GenericGraph::new(&class, build(p as f64)).unwrap();
        let (g, extra) = generic.instantiate(&[7]).unwrap();
        assert_eq!(extra, [Lit::Float(7.0)]);
        assert_eq!(g.param_types(), [DType::F32]);
        assert_eq!(g.ty(g.outputs[0]).shape.dims(), [7]);
        let inv = DType::F32.round_float(1.0 / p as f64);
        let why = GenericGraph::new(&class, build(inv)).unwrap_err();
        assert!(why.contains("computed from sizes"), "{why}");
        assert!(GenericGraph::new(&class, build(3.0)).is_ok());
    }
}
