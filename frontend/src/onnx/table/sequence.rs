//! Sequence and optional rows (`Kind::Values`): a sequence is a list of
//! tensors whose length is known while tracing, so SequenceAt, Insert and
//! Erase take positions known then (a constant, a shape, a loop counter);
//! SequenceMap runs its body once per element. An optional holding a value
//! is that value; an empty one is `Value::None`. Identity lives here as it
//! passes any value through; ReverseSequence (a tensor op) too.

use super::{axis, fail, ints_of, no_check, table_of, Cx, Kind, Row};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::onnx::subgraph;
use crate::onnx::value::Value;
use crate::tensor::Tensor;
use tilejit_ir::ErrorKind;

macro_rules! values {
    ($op:literal, [$($a:literal),*], $check:expr, $build:expr) => {
        Row { op: $op, attrs: &[$($a),*], check: $check, kind: Kind::Values($build) }
    };
}

pub(super) static ROWS: &[Row] = &[
    values!("Identity", [], no_check, |n, _, ins| Ok(vec![any(
        n, ins, 0
    )?
    .clone()])),
    values!("SequenceConstruct", [], no_check, |n, _, ins| {
        let ts = (0..ins.len())
            .map(|i| tensor(n, ins, i).cloned())
            .collect::<Result<Vec<_>>>()?;
        Ok(vec![Value::Sequence(ts)])
    }),
    values!("SequenceEmpty", ["dtype"], no_check, |_, _, _| Ok(vec![
        Value::Sequence(vec![])
    ])),
    values!("SequenceLength", [], no_check, |n, _, ins| {
        let len = seq(n, ins, 0)?.len() as i64;
        Ok(vec![Value::Tensor(Tensor::from_vec(vec![len], &[])?)])
    }),
    values!("SequenceAt", [], no_check, |n, _, ins| {
        let s = seq(n, ins, 0)?;
        let i = position(n, ins, 1, s.len(), false)?.ok_or_else(|| {
            fail(
                n,
                "position",
                ErrorKind::BadArgument,
                "this input is required",
            )
        })?;
        Ok(vec![Value::Tensor(s[i].clone())])
    }),
    values!("SequenceInsert", [], no_check, |n, _, ins| {
        let mut s = seq(n, ins, 0)?.to_vec();
        let t = tensor(n, ins, 1)?.clone();
        let i = position(n, ins, 2, s.len(), true)?.unwrap_or(s.len());
        s.insert(i, t);
        Ok(vec![Value::Sequence(s)])
    }),
    values!("SequenceErase", [], no_check, |n, _, ins| {
        let mut s = seq(n, ins, 0)?.to_vec();
        if s.is_empty() {
            return Err(fail(
                n,
                "input_sequence",
                ErrorKind::BadArgument,
                "cannot erase from an empty sequence",
            ));
        }
        let i = position(n, ins, 1, s.len(), false)?.unwrap_or(s.len() - 1);
        s.remove(i);
        Ok(vec![Value::Sequence(s)])
    }),
    values!(
        "ConcatFromSequence",
        ["axis", "new_axis"],
        no_check,
        build_concat
    ),
    values!(
        "SplitToSequence",
        ["axis", "keepdims"],
        no_check,
        build_split
    ),
    values!(
        "SequenceMap",
        ["body"],
        |n, cx| subgraph::check(subgraph::graph(n, "body")?, cx),
        build_map
    ),
    values!("Optional", ["type"], no_check, |_, _, ins| Ok(vec![ins
        .first()
        .cloned()
        .flatten()
        .unwrap_or(Value::None)])),
    values!("OptionalHasElement", [], no_check, |_, _, ins| {
        let has = matches!(
            ins.first(),
            Some(Some(Value::Tensor(_) | Value::Sequence(_)))
        );
        Ok(vec![Value::Tensor(Tensor::from_vec(vec![has], &[])?)])
    }),
    values!("OptionalGetElement", [], no_check, |n, _, ins| {
        match any(n, ins, 0)? {
            Value::None => Err(fail(
                n,
                "input",
                ErrorKind::BadArgument,
                "the optional is empty",
            )),
            v => Ok(vec![v.clone()]),
        }
    }),
    Row {
        op: "ReverseSequence",
        attrs: &["batch_axis", "time_axis"],
        check: no_check,
        kind: Kind::Node(build_reverse_sequence),
    },
];

/// Reverses each batch entry's first `sequence_lens[b]` steps along the
/// time axis: a gather whose index is `len - 1 - t` below the length and
/// `t` from it on (the lengths may be traced).
fn build_reverse_sequence(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = super::req(n, ins, 0)?;
    let lens = super::req(n, ins, 1)?;
    let ba = axis(
        n,
        "batch_axis",
        super::attr_i(n, "batch_axis", 1)?,
        x.rank(),
    )?;
    let ta = axis(n, "time_axis", super::attr_i(n, "time_axis", 0)?, x.rank())?;
    if x.rank() < 2 || ba == ta || ba > 1 || ta > 1 {
        return Err(fail(
            n,
            "time_axis",
            ErrorKind::BadArgument,
            format!(
                "batch and time axes must be 0 and 1 (either way), of rank {} input",
                x.rank()
            ),
        ));
    }
    let (b, t) = (x.shape()[ba], x.shape()[ta]);
    if lens.shape() != [b] {
        return Err(fail(
            n,
            "sequence_lens",
            ErrorKind::Shape,
            format!("must be [{b}], got {:?}", lens.shape()),
        ));
    }
    // [T, B] (time first) grids of t and len.
    let steps = Tensor::from_vec(table_of(t, |i| i as i64)?, &[t, 1])?.broadcast_to(&[t, b]);
    let lens = lens
        .cast(tilejit_ir::DType::I64)
        .reshape(&[1, b])
        .broadcast_to(&[t, b]);
    let flipped = &(&lens - &steps) - &Tensor::from_vec(vec![1i64], &[])?;
    let idx = Tensor::where_cond(&steps.lt(&lens), &flipped, &steps);
    let idx = if ta == 0 { idx } else { idx.transpose(0, 1) };
    let mut sh = idx.shape().to_vec();
    sh.extend(std::iter::repeat_n(1, x.rank() - 2));
    let idx = idx.reshape(&sh).broadcast_to(x.shape());
    Ok(vec![x.gather(ta as isize, &idx)])
}

/// Input `i`, whatever it holds.
fn any<'a>(n: &Node, ins: &'a [Option<Value>], i: usize) -> Result<&'a Value> {
    ins.get(i).and_then(|v| v.as_ref()).ok_or_else(|| {
        fail(
            n,
            &format!("input {i}"),
            ErrorKind::BadArgument,
            "this input is required",
        )
    })
}

/// Input `i` as a tensor.
fn tensor<'a>(n: &Node, ins: &'a [Option<Value>], i: usize) -> Result<&'a Tensor> {
    match any(n, ins, i)? {
        Value::Tensor(t) => Ok(t),
        v => Err(fail(
            n,
            &format!("input {i}"),
            ErrorKind::BadArgument,
            format!("must be a tensor, got {}", v.what()),
        )),
    }
}

/// Input `i` as a sequence.
fn seq<'a>(n: &Node, ins: &'a [Option<Value>], i: usize) -> Result<&'a [Tensor]> {
    match any(n, ins, i)? {
        Value::Sequence(s) => Ok(s),
        v => Err(fail(
            n,
            &format!("input {i}"),
            ErrorKind::BadArgument,
            format!("must be a sequence, got {}", v.what()),
        )),
    }
}

/// A position input (`None` when absent), negative counting from the end:
/// in `-len..len`, or `-len..=len` where `end` allows inserting last.
fn position(
    n: &Node,
    ins: &[Option<Value>],
    i: usize,
    len: usize,
    end: bool,
) -> Result<Option<usize>> {
    if ins.get(i).is_none_or(|v| v.is_none()) {
        return Ok(None);
    }
    let v = ints_of(n, "position", tensor(n, ins, i)?)?;
    let [p] = v[..] else {
        return Err(fail(
            n,
            "position",
            ErrorKind::Shape,
            format!("must hold one value, has {}", v.len()),
        ));
    };
    let l = len as i64;
    let q = if p < 0 { p + l } else { p };
    let hi = if end { l } else { l - 1 };
    if q < 0 || q > hi {
        return Err(fail(
            n,
            "position",
            ErrorKind::BadArgument,
            format!("position {p} is outside a sequence of {len}"),
        ));
    }
    Ok(Some(q as usize))
}

fn build_concat(n: &Node, _: &Cx, ins: &[Option<Value>]) -> Result<Vec<Value>> {
    let s = seq(n, ins, 0)?;
    let new_axis = super::attr_i(n, "new_axis", 0)? != 0;
    let Some(first) = s.first() else {
        return Err(fail(
            n,
            "input_sequence",
            ErrorKind::BadArgument,
            "cannot concatenate an empty sequence",
        ));
    };
    let rank = first.rank() + new_axis as usize;
    let a = axis(n, "axis", super::attr_i(n, "axis", 0)?, rank)?;
    let parts: Vec<Tensor> = s
        .iter()
        .map(|t| match new_axis {
            true => {
                let mut sh = t.shape().to_vec();
                sh.insert(a.min(sh.len()), 1);
                t.reshape(&sh)
            }
            false => t.clone(),
        })
        .collect();
    for t in &parts {
        if t.rank() != rank {
            return Err(fail(
                n,
                "input_sequence",
                ErrorKind::Shape,
                "the sequence's tensors differ in rank",
            ));
        }
    }
    let refs: Vec<&Tensor> = parts.iter().collect();
    Ok(vec![Value::Tensor(match refs.len() {
        1 => parts[0].clone(),
        _ => Tensor::cat(&refs, a as isize),
    })])
}

fn build_split(n: &Node, _: &Cx, ins: &[Option<Value>]) -> Result<Vec<Value>> {
    let x = tensor(n, ins, 0)?;
    let a = axis(n, "axis", super::attr_i(n, "axis", 0)?, x.rank())?;
    let dim = x.shape().get(a).copied().unwrap_or(1);
    let split = match ins.get(1).cloned().flatten() {
        None => None,
        Some(_) => {
            let t = tensor(n, ins, 1)?;
            Some((t.rank(), ints_of(n, "split", t)?))
        }
    };
    let sizes: Vec<usize> = match &split {
        // One tensor per element, each a traced slice.
        None => vec![1; super::unrolled(n, "axis", "pieces", dim)?],
        Some((0, v)) => {
            let len = v.first().copied().unwrap_or(0);
            if len <= 0 {
                return Err(fail(
                    n,
                    "split",
                    ErrorKind::BadArgument,
                    format!("a split length of {len}"),
                ));
            }
            let len = len as usize;
            let whole = dim / len;
            super::unrolled(n, "split", "pieces", whole + usize::from(dim % len > 0))?;
            let mut s = vec![len; whole];
            if dim % len > 0 {
                s.push(dim % len);
            }
            s
        }
        Some((_, v)) => {
            // Summed checked: lengths come from the file and may overflow.
            let total = v.iter().try_fold(0i64, |acc, &l| acc.checked_add(l));
            if v.iter().any(|&l| l < 0) || total != Some(dim as i64) {
                return Err(fail(
                    n,
                    "split",
                    ErrorKind::BadArgument,
                    format!("lengths {v:?} do not sum to the axis's {dim}"),
                ));
            }
            super::unrolled(n, "split", "pieces", v.len())?;
            v.iter().map(|&l| l as usize).collect()
        }
    };
    let squeeze = split.is_none() && super::attr_i(n, "keepdims", 1)? == 0;
    let mut pos = 0;
    let mut out = Vec::with_capacity(sizes.len());
    for l in sizes {
        let mut t = x.slice(a as isize, pos as isize, (pos + l) as isize);
        if squeeze {
            let mut sh = t.shape().to_vec();
            sh.remove(a);
            t = t.reshape(&sh);
        }
        out.push(t);
        pos += l;
    }
    Ok(vec![Value::Sequence(out)])
}

fn build_map(n: &Node, cx: &Cx, ins: &[Option<Value>]) -> Result<Vec<Value>> {
    let body = subgraph::graph(n, "body")?;
    // The body is traced once per element.
    let len = super::unrolled(n, "input_sequence", "elements", seq(n, ins, 0)?.len())?;
    for (i, v) in ins.iter().enumerate() {
        if let Some(Value::Sequence(s)) = v {
            if s.len() != len {
                return Err(fail(
                    n,
                    &format!("input {i}"),
                    ErrorKind::Shape,
                    format!("a sequence of {} where the first has {len}", s.len()),
                ));
            }
        }
    }
    let mut outs: Vec<Vec<Tensor>> = vec![Vec::with_capacity(len); body.outputs.len()];
    for k in 0..len {
        let args = (0..ins.len())
            .map(|i| match any(n, ins, i)? {
                Value::Sequence(s) => Ok(Value::Tensor(s[k].clone())),
                Value::Tensor(t) => Ok(Value::Tensor(t.clone())),
                Value::None => Err(fail(
                    n,
                    &format!("input {i}"),
                    ErrorKind::BadArgument,
                    "an empty optional",
                )),
            })
            .collect::<Result<Vec<_>>>()?;
        for (j, v) in subgraph::run_values(n, body, cx, &args)?
            .into_iter()
            .enumerate()
        {
            match v {
                Value::Tensor(t) => outs[j].push(t),
                v => {
                    return Err(fail(
                        n,
                        "body",
                        ErrorKind::Unsupported,
                        format!("output {j} is {}, not a tensor", v.what()),
                    ))
                }
            }
        }
    }
    Ok(outs.into_iter().map(Value::Sequence).collect())
}
