//! `Tensor::einsum`: Einstein summation, decomposed into sums, permutes,
//! reshapes and batched matmuls (each contraction of two operands is one
//! matmul), so it runs wherever those do.

use crate::apply::apply;
use crate::error::Loc;
use crate::tensor::Tensor;
use tilejit_ir::IrError;

/// A parsed equation: each operand's subscripts and the output's, and the
/// shape each operand is broadcast to first (its `...` dims of size 1
/// widened to the other operands'). The dims under `...` get subscripts
/// of their own, bytes below every letter (`ELLIPSIS`), aligned right.
struct Equation {
    inputs: Vec<Vec<u8>>,
    output: Vec<u8>,
    shapes: Vec<Vec<usize>>,
}

/// The subscript of the first dim under `...`; dim `g` is `ELLIPSIS + g`.
const ELLIPSIS: u8 = 1;
/// The most dims `...` may stand for.
const MAX_ELLIPSIS: usize = 31;

/// One term's subscripts, with where its `...` sits among them.
fn term(s: &str, at: usize) -> Result<(Vec<u8>, Option<usize>), String> {
    let mut out = Vec::new();
    let mut dots = None;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            c if c.is_ascii_alphabetic() => out.push(c as u8),
            c if c.is_whitespace() => {}
            '.' => {
                if !s[i..].starts_with("...") {
                    return Err(format!("a lone `.` at position {}", at + i));
                }
                if dots.is_some() {
                    return Err(format!("a second `...` at position {}", at + i));
                }
                dots = Some(out.len());
                chars.next();
                chars.next();
            }
            c => return Err(format!("unexpected `{c}` at position {}", at + i)),
        }
    }
    Ok((out, dots))
}

/// Parses `eq` for `n` operands of the given shapes: the message names the
/// position (0-based, in bytes) of what is wrong.
fn parse(eq: &str, shapes: &[Vec<usize>]) -> Result<Equation, String> {
    let (lhs, rhs) = match eq.find("->") {
        Some(p) => (&eq[..p], Some((p + 2, &eq[p + 2..]))),
        None => (eq, None),
    };
    let mut terms = Vec::new();
    let mut at = 0;
    for part in lhs.split(',') {
        let (t, dots) = term(part, at)?;
        terms.push((at, t, dots));
        at += part.len() + 1;
    }
    if terms.len() != shapes.len() {
        return Err(format!(
            "the equation has {} operands, {} tensors were given",
            terms.len(),
            shapes.len()
        ));
    }
    // How many dims each operand's `...` stands for, and their sizes,
    // broadcast together (numpy's rules, aligned right).
    let mut under = Vec::new();
    for (j, ((start, t, dots), shape)) in terms.iter().zip(shapes).enumerate() {
        let e = match dots {
            Some(_) if shape.len() >= t.len() => shape.len() - t.len(),
            _ if shape.len() == t.len() => 0,
            _ => {
                return Err(format!(
                    "operand {j} (at position {start}) has {} subscripts for a rank-{} tensor",
                    t.len(),
                    shape.len()
                ))
            }
        };
        under.push(e);
    }
    let ell = under.iter().copied().max().unwrap_or(0);
    if ell > MAX_ELLIPSIS {
        return Err(format!(
            "`...` stands for {ell} dims, more than {MAX_ELLIPSIS}"
        ));
    }
    let mut wide = vec![1usize; ell];
    for (j, ((_, _, dots), shape)) in terms.iter().zip(shapes).enumerate() {
        let Some(p) = *dots else { continue };
        for (k, &d) in shape[p..p + under[j]].iter().enumerate() {
            let g = ell - under[j] + k;
            match (wide[g], d) {
                (w, d) if w == d || d == 1 => {}
                (1, d) => wide[g] = d,
                (w, d) => {
                    return Err(format!(
                        "dim {g} under `...` is {w} in one operand and {d} in operand {j}: they do not broadcast"
                    ))
                }
            }
        }
    }
    let mut inputs = Vec::new();
    let mut targets = Vec::new();
    for (j, ((_, t, dots), shape)) in terms.iter().zip(shapes).enumerate() {
        let (mut l, mut s) = (t.clone(), shape.clone());
        if let Some(p) = *dots {
            let first = ell - under[j];
            let subs: Vec<u8> = (first..ell).map(|g| ELLIPSIS + g as u8).collect();
            l.splice(p..p, subs);
            for g in first..ell {
                s[p + g - first] = wide[g];
            }
        }
        inputs.push(l);
        targets.push(s);
    }
    let mut size = [None::<usize>; 128];
    let mut count = [0usize; 128];
    for (j, (t, shape)) in inputs.iter().zip(&targets).enumerate() {
        for (&c, &d) in t.iter().zip(shape) {
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
    let all_dots: Vec<u8> = (0..ell).map(|g| ELLIPSIS + g as u8).collect();
    let output = match rhs {
        Some((at, s)) => {
            let (mut out, dots) = term(s, at)?;
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
            match dots {
                Some(p) => {
                    out.splice(p..p, all_dots);
                }
                // numpy refuses to drop the dims under `...` silently.
                None if ell > 0 => {
                    return Err(
                        "the operands have `...` dims but the output has no `...`".to_string()
                    )
                }
                None => {}
            }
            out
        }
        // numpy's implicit output: the dims under `...`, then the
        // subscripts seen once, in order.
        None => all_dots
            .into_iter()
            .chain((b'A'..=b'z').filter(|&c| count[c as usize] == 1))
            .collect(),
    };
    Ok(Equation {
        inputs,
        output,
        shapes: targets,
    })
}

/// `t` with each subscript that repeats in `letters` (`ii`) reduced to
/// its diagonal: the two dims moved last, merged, and every `n + 1`-th
/// element taken (a strided slice, no gather).
#[track_caller]
fn diagonals(t: Tensor, letters: Vec<u8>) -> (Tensor, Vec<u8>) {
    let (mut t, mut l) = (t, letters);
    loop {
        let Some((a, b)) =
            (1..l.len()).find_map(|b| l[..b].iter().position(|&c| c == l[b]).map(|a| (a, b)))
        else {
            return (t, l);
        };
        if t.error().is_some() {
            return (t, l);
        }
        let n = t.shape()[a];
        let mut perm: Vec<usize> = (0..l.len()).filter(|&i| i != a && i != b).collect();
        let mut shape: Vec<usize> = perm.iter().map(|&i| t.shape()[i]).collect();
        let mut next: Vec<u8> = perm.iter().map(|&i| l[i]).collect();
        perm.extend([a, b]);
        shape.push(n * n);
        next.push(l[a]);
        let last = shape.len() as isize - 1;
        t = t
            .permute(&perm)
            .reshape(&shape)
            .slice_step(last, 0, (n * n) as isize, n as isize + 1);
        l = next;
    }
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
    /// is a matmul, `"bij->bji"` a permute, `"ii->i"` a diagonal (a
    /// subscript repeated in one operand takes that diagonal first) and
    /// `"...ij,...jk->...ik"` a batched matmul (`...` stands for the dims
    /// not named, aligned right and broadcast as numpy does; an output
    /// must then name `...` too). Without `->` the output is the dims
    /// under `...`, then the subscripts seen once, in alphabetical order
    /// (capitals first). Operands are
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
        // Each operand broadcast over `...` and reduced to its diagonals.
        let prepared: Vec<(Tensor, Vec<u8>)> = operands
            .iter()
            .zip(&eq.inputs)
            .zip(&eq.shapes)
            .map(|((t, l), s)| {
                let t = match t.shape() == s.as_slice() {
                    true => (*t).clone(),
                    false => t.broadcast_to(s),
                };
                diagonals(t, l.clone())
            })
            .collect();
        if let Some((e, _)) = prepared.iter().find(|(t, _)| t.error().is_some()) {
            return e.clone();
        }
        // A step's error (a dtype the sums or matmul refuse) ends it here:
        // its placeholder shape must not reach the subscript arithmetic.
        let mut prepared = prepared.into_iter();
        let Some((first, l0)) = prepared.next() else {
            return fail(format!("einsum `{equation}`: no operands"));
        };
        let mut cur = reduce_to(first, l0, &needed(1));
        for (j, (t, l)) in prepared.enumerate().map(|(j, p)| (j + 1, p)) {
            let keep_b = [cur.1.clone(), needed(j + 1)].concat();
            let b = reduce_to(t, l, &keep_b);
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
