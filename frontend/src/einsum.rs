//! `Tensor::einsum`: Einstein summation, decomposed into sums, permutes,
//! reshapes and batched matmuls (each contraction of two operands is one
//! matmul), so it runs wherever those do.

use crate::apply::apply;
use crate::error::Loc;
use crate::tensor::Tensor;
use tilejit_ir::IrError;

/// A parsed equation: each operand's subscripts and the output's.
struct Equation {
    inputs: Vec<Vec<u8>>,
    output: Vec<u8>,
}

/// Parses `eq` for `n` operands of the given shapes: the message names the
/// position (0-based, in bytes) of what is wrong.
fn parse(eq: &str, shapes: &[Vec<usize>]) -> Result<Equation, String> {
    let (lhs, rhs) = match eq.find("->") {
        Some(p) => (&eq[..p], Some((p + 2, &eq[p + 2..]))),
        None => (eq, None),
    };
    let term = |s: &str, at: usize| -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        for (i, c) in s.char_indices() {
            match c {
                c if c.is_ascii_alphabetic() => out.push(c as u8),
                c if c.is_whitespace() => {}
                '.' => {
                    return Err(format!(
                        "ellipsis at position {} is not supported; name every dim",
                        at + i
                    ))
                }
                c => return Err(format!("unexpected `{c}` at position {}", at + i)),
            }
        }
        Ok(out)
    };
    let mut inputs = Vec::new();
    let mut at = 0;
    for part in lhs.split(',') {
        inputs.push((at, term(part, at)?));
        at += part.len() + 1;
    }
    if inputs.len() != shapes.len() {
        return Err(format!(
            "the equation has {} operands, {} tensors were given",
            inputs.len(),
            shapes.len()
        ));
    }
    let mut size = [None::<usize>; 128];
    let mut count = [0usize; 128];
    for (j, ((start, t), shape)) in inputs.iter().zip(shapes).enumerate() {
        if t.len() != shape.len() {
            return Err(format!(
                "operand {j} (at position {start}) has {} subscripts for a rank-{} tensor",
                t.len(),
                shape.len()
            ));
        }
        for (k, (&c, &d)) in t.iter().zip(shape).enumerate() {
            if t[..k].contains(&c) {
                return Err(format!(
                    "subscript `{}` repeats in operand {j} (at position {start}): diagonals are not supported",
                    c as char
                ));
            }
            match size[c as usize] {
                Some(s) if s != d => {
                    return Err(format!(
                        "subscript `{}` is {s} in one operand and {d} in operand {j}",
                        c as char
                    ))
                }
                _ => size[c as usize] = Some(d),
            }
            count[c as usize] += 1;
        }
    }
    let output = match rhs {
        Some((at, s)) => {
            let out = term(s, at)?;
            for (k, &c) in out.iter().enumerate() {
                if out[..k].contains(&c) || count[c as usize] == 0 {
                    let why = if count[c as usize] == 0 {
                        "is in no operand"
                    } else {
                        "repeats"
                    };
                    let pos = at + s.find(c as char).unwrap_or(0);
                    return Err(format!(
                        "output subscript `{}` at position {pos} {why}",
                        c as char
                    ));
                }
            }
            out
        }
        // numpy's implicit output: the subscripts seen once, in order.
        None => (b'A'..=b'z').filter(|&c| count[c as usize] == 1).collect(),
    };
    Ok(Equation {
        inputs: inputs.into_iter().map(|(_, t)| t).collect(),
        output,
    })
}

/// Sums out the subscripts of `t` that are not in `keep`.
#[track_caller]
fn reduce_to(t: Tensor, letters: Vec<u8>, keep: &[u8]) -> (Tensor, Vec<u8>) {
    let mut t = t;
    let mut kept = Vec::new();
    for (k, &c) in letters.iter().enumerate().rev() {
        if keep.contains(&c) {
            kept.push(c);
        } else {
            t = t.sum(k as isize, false);
        }
    }
    kept.reverse();
    (t, kept)
}

/// `t` with its subscripts in the order `to` (a permutation of `from`).
#[track_caller]
fn arrange(t: &Tensor, from: &[u8], to: &[u8]) -> Tensor {
    let perm: Vec<usize> = to
        .iter()
        .map(|c| from.iter().position(|f| f == c).unwrap_or(0))
        .collect();
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        t.clone()
    } else {
        t.permute(&perm)
    }
}

/// `a` and `b` contracted over their shared subscripts not in `keep`, as
/// one batched matmul `[batch, m, k] @ [batch, k, n]`.
#[track_caller]
fn contract(a: (Tensor, Vec<u8>), b: (Tensor, Vec<u8>), keep: &[u8]) -> (Tensor, Vec<u8>) {
    let ((ta, la), (tb, lb)) = (a, b);
    let dim = |t: &Tensor, l: &[u8], c: u8| t.shape()[l.iter().position(|&x| x == c).unwrap_or(0)];
    let batch: Vec<u8> = la
        .iter()
        .copied()
        .filter(|c| lb.contains(c) && keep.contains(c))
        .collect();
    let sum: Vec<u8> = la
        .iter()
        .copied()
        .filter(|c| lb.contains(c) && !keep.contains(c))
        .collect();
    let free_a: Vec<u8> = la.iter().copied().filter(|c| !lb.contains(c)).collect();
    let free_b: Vec<u8> = lb.iter().copied().filter(|c| !la.contains(c)).collect();
    let prod =
        |t: &Tensor, l: &[u8], cs: &[u8]| cs.iter().map(|&c| dim(t, l, c)).product::<usize>();
    let (nb, m, k, n) = (
        prod(&ta, &la, &batch),
        prod(&ta, &la, &free_a),
        prod(&ta, &la, &sum),
        prod(&tb, &lb, &free_b),
    );
    let order_a = [&batch[..], &free_a, &sum].concat();
    let order_b = [&batch[..], &sum, &free_b].concat();
    let x = arrange(&ta, &la, &order_a).reshape(&[nb, m, k]);
    let y = arrange(&tb, &lb, &order_b).reshape(&[nb, k, n]);
    let dims: Vec<usize> = batch
        .iter()
        .chain(&free_a)
        .map(|&c| dim(&ta, &la, c))
        .chain(free_b.iter().map(|&c| dim(&tb, &lb, c)))
        .collect();
    let out = x.matmul(&y).reshape(&dims);
    (out, [&batch[..], &free_a, &free_b].concat())
}

impl Tensor {
    /// Einstein summation (numpy `einsum`, ONNX `Einsum`): `"ij,jk->ik"`
    /// is a matmul, `"bij->bji"` a permute, `"ii"`-style diagonals and
    /// `...` are not supported. Without `->` the output is the subscripts
    /// seen once, in alphabetical order (capitals first). Operands are
    /// contracted left to right, each pair as one batched matmul over
    /// their shared subscripts, after summing out any subscript no later
    /// operand or the output uses. A bad equation is a `BadArgument`
    /// error naming the position in it.
    ///
    /// ```
    /// # use tilejit::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let b = Tensor::from_vec(vec![5.0f32, 6.0], &[2])?;
    /// assert_eq!(Tensor::einsum("ij,j->i", &[&a, &b]).to_vec::<f32>()?, vec![17.0, 39.0]);
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    #[track_caller]
    pub fn einsum(equation: &str, operands: &[&Tensor]) -> Tensor {
        let location = Loc::caller();
        let fail = |msg: String| {
            apply("einsum", location, operands, |_, _| {
                Err(IrError::Arguments(msg))
            })
        };
        if let Some(e) = operands.iter().find(|t| t.error().is_some()) {
            return (*e).clone();
        }
        let shapes: Vec<Vec<usize>> = operands.iter().map(|t| t.shape().to_vec()).collect();
        let eq = match parse(equation, &shapes) {
            Ok(eq) => eq,
            Err(msg) => return fail(format!("einsum `{equation}`: {msg}")),
        };
        if let Some(t) = operands.iter().find(|t| t.dtype() != operands[0].dtype()) {
            return fail(format!(
                "einsum operands have dtypes {} and {}",
                operands[0].dtype(),
                t.dtype()
            ));
        }
        // Subscripts needed after operand j: the output's and later operands'.
        let needed = |j: usize| -> Vec<u8> {
            let mut v = eq.output.clone();
            for t in &eq.inputs[j..] {
                v.extend(t);
            }
            v
        };
        // A step's error (a dtype the sums or matmul refuse) ends it here:
        // its placeholder shape must not reach the subscript arithmetic.
        let mut cur = reduce_to(operands[0].clone(), eq.inputs[0].clone(), &needed(1));
        for (j, (t, l)) in operands.iter().zip(&eq.inputs).enumerate().skip(1) {
            let keep_b = [cur.1.clone(), needed(j + 1)].concat();
            let b = reduce_to((*t).clone(), l.clone(), &keep_b);
            if let Some(e) = [&cur.0, &b.0].into_iter().find(|t| t.error().is_some()) {
                return e.clone();
            }
            cur = contract(cur, b, &needed(j + 1));
        }
        if cur.0.error().is_some() {
            return cur.0;
        }
        let (t, letters) = reduce_to(cur.0, cur.1, &eq.output);
        arrange(&t, &letters, &eq.output)
    }
}
