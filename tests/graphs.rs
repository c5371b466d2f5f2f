//! Random graphs for property tests: [`build`] turns a list of
//! instructions (as proptest generates them) into a well-typed graph over
//! three inputs and a param, and [`inputs`] makes values for them from a seed.
//! The simplify, host-backend, sim-backend and block-math tests share them.

use proptest::prelude::*;
use tilejit_ir::{
    Array, Axes, BinaryOp, CmpOp, DType, Graph, Lit, NodeId, Op, Perm, ReduceOp, Shape, TensorType,
    UnaryOp,
};

const LITS: [f64; 6] = [0.0, -0.0, 1.0, 2.0, 0.5, -3.0];

/// Builds a random well-typed graph from a list of instructions. Instructions
/// that would be ill-typed are skipped, so every list gives a valid graph.
pub fn build(rows: usize, cols: usize, instrs: &[(u8, u16, u16, u8)]) -> Graph {
    build_typed(DType::F32, rows, cols, instrs)
}

/// [`build`] with inputs, param and round trips in type `dt`.
pub fn build_typed(dt: DType, rows: usize, cols: usize, instrs: &[(u8, u16, u16, u8)]) -> Graph {
    let mut g = Graph::new();
    let f32_of = |d: &[usize]| TensorType::new(dt, Shape::new(d).unwrap());
    let mut nodes = vec![
        g.add(Op::Input {
            index: 0,
            ty: f32_of(&[rows, cols]),
        })
        .unwrap(),
        g.add(Op::Input {
            index: 1,
            ty: f32_of(&[cols]),
        })
        .unwrap(),
        g.add(Op::Input {
            index: 2,
            ty: f32_of(&[rows, 1]),
        })
        .unwrap(),
        g.add(Op::Param {
            index: 0,
            dtype: dt,
        })
        .unwrap(),
    ];
    for &(kind, a, b, extra) in instrs {
        let x = nodes[a as usize % nodes.len()];
        let y = nodes[b as usize % nodes.len()];
        let (tx, ty) = (g.ty(x), g.ty(y));
        let bcast = |g: &mut Graph, x: NodeId, y: NodeId| -> Option<(NodeId, NodeId)> {
            let s = Shape::broadcast(&g.ty(x).shape, &g.ty(y).shape).ok()?;
            let bx = if g.ty(x).shape == s {
                x
            } else {
                g.add(Op::Broadcast(x, s)).ok()?
            };
            let by = if g.ty(y).shape == s {
                y
            } else {
                g.add(Op::Broadcast(y, s)).ok()?
            };
            Some((bx, by))
        };
        let made = match kind % 12 {
            // Not pow and mod (the last two), nor floor ... sign (the last
            // four unary ops): steps and NaN edges amplify the last-ulp
            // differences of inexact operands, which the comparisons'
            // tolerances cannot absorb (they have their own tests).
            0 | 1 => bcast(&mut g, x, y).and_then(|(x, y)| {
                g.add(Op::Binary(BinaryOp::ALL[extra as usize % 6], x, y))
                    .ok()
            }),
            2 | 3 => g.add(Op::Unary(UnaryOp::ALL[extra as usize % 15], x)).ok(),
            4 => {
                let value = Lit::Float(LITS[extra as usize % LITS.len()]);
                let c = g.add(Op::Full { value, ty: tx }).ok();
                c.and_then(|c| {
                    g.add(Op::Binary(BinaryOp::ALL[(extra / 8) as usize % 4], x, c))
                        .ok()
                })
            }
            5 if tx.shape.rank() > 0 => {
                let axis = extra as usize % tx.shape.rank();
                let r = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod]
                    [(extra / 8) as usize % 4];
                g.add(Op::Reduce(r, x, Axes::from_axes(&[axis]))).ok()
            }
            6 => bcast(&mut g, x, y).and_then(|(x, y)| {
                let c = g
                    .add(Op::Compare(
                        [CmpOp::Lt, CmpOp::Ge, CmpOp::Eq][extra as usize % 3],
                        x,
                        y,
                    ))
                    .ok()?;
                g.add(Op::Select(c, x, y)).ok()
            }),
            7 => g
                .add(Op::Reshape(x, Shape::new(&[tx.shape.numel()]).unwrap()))
                .ok(),
            8 if tx.shape.rank() == 2 => g.add(Op::Permute(x, Perm::new(&[1, 0]).unwrap())).ok(),
            9 => {
                let op = g.node(y).op.clone(); // an exact duplicate, for CSE
                if matches!(op, Op::Input { .. } | Op::Param { .. }) {
                    None
                } else {
                    g.add(op).ok()
                }
            }
            10 => {
                let d = [DType::F16, DType::F64, DType::I32, DType::Bool][extra as usize % 4];
                g.add(Op::Cast(x, d))
                    .ok()
                    .and_then(|c| g.add(Op::Cast(c, dt)).ok())
            }
            11 if tx.shape.rank() == 2 && ty.shape.rank() == 2 && tx.shape[1] == ty.shape[1] => g
                .add(Op::Permute(y, Perm::new(&[1, 0]).unwrap()))
                .ok()
                .and_then(|yt| g.add(Op::MatMul(x, yt)).ok()),
            _ => None,
        };
        if let Some(n) = made {
            nodes.push(n);
        }
    }
    g.outputs.push(*nodes.last().unwrap());
    g.outputs.push(nodes[nodes.len() / 2]);
    g
}

/// [`inputs`] converted to type `dt` (into an integer dtype as a cast
/// converts: truncated and saturated).
pub fn inputs_typed(dt: DType, rows: usize, cols: usize, seed: u64) -> Vec<Array> {
    inputs(rows, cols, seed)
        .into_iter()
        .map(|a| {
            let v = a.as_slice::<f32>().unwrap();
            let lits = v.iter().map(|&x| Lit::Float(x as f64));
            Array::new(*a.shape(), tilejit_ir::Buffer::from_lits(dt, lits).unwrap()).unwrap()
        })
        .collect()
}

/// Random `[rows, cols]`, `[cols]` and `[rows, 1]` f32 inputs for [`build`]'s
/// graphs, with a NaN, inf or -0 one time in 40.
pub fn inputs(rows: usize, cols: usize, seed: u64) -> Vec<Array> {
    inputs_with(rows, cols, seed, true)
}

/// [`inputs`] with no NaN, inf or -0 when `specials` is false: with one
/// special value in 40, nearly every row longer than a few hundred holds a
/// NaN, and a row reduction over it is NaN whatever the kernel computes.
pub fn inputs_with(rows: usize, cols: usize, seed: u64, specials: bool) -> Vec<Array> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        // Mostly moderate values, sometimes special ones.
        match s % 40 {
            0..=2 if !specials => ((s >> 11) as f64 / (1u64 << 53) as f64) as f32,
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => -0.0,
            _ => ((s >> 11) as f64 / (1u64 << 53) as f64 * 6.0 - 3.0) as f32,
        }
    };
    let mut make = |d: &[usize]| {
        Array::from_vec(
            (0..d.iter().product::<usize>())
                .map(|_| next())
                .collect::<Vec<f32>>(),
            d,
        )
        .unwrap()
    };
    vec![make(&[rows, cols]), make(&[cols]), make(&[rows, 1])]
}

/// Dimensions that exercise 1 (broadcast), odd sizes and a longer row.
pub fn dims() -> impl Strategy<Value = usize> {
    prop_oneof![Just(1usize), Just(3), Just(5), Just(50)]
}
