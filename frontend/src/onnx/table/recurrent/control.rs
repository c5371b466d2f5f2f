//! If, Loop and Scan over sub-graphs. A condition known while tracing
//! builds only the taken branch; a traced one builds both and selects
//! elementwise. Loop and Scan unroll: their trip counts must be known
//! while tracing (a constant or a shape), and a Loop's condition must be
//! known at every iteration.

use super::super::{attr_i, attr_ints, axis, charge, fail, opt, req, unroll_limit, unrolled, Cx};
use crate::error::Result;
use crate::onnx::model::Node;
use crate::onnx::subgraph;
use crate::onnx::value::Value;
use crate::tensor::Tensor;
use tilejit_ir::{DType, ErrorKind};

pub(super) fn check_if(n: &Node, cx: &Cx) -> Result<()> {
    subgraph::check(subgraph::graph(n, "then_branch")?, cx)?;
    subgraph::check(subgraph::graph(n, "else_branch")?, cx)
}

/// The value of a known boolean scalar, `None` when traced.
fn known_bool(n: &Node, what: &str, t: &Tensor) -> Result<Option<bool>> {
    if t.is_traced() {
        return Ok(None);
    }
    if t.numel() != 1 {
        return Err(fail(
            n,
            what,
            ErrorKind::Shape,
            format!("must hold one value, has shape {:?}", t.shape()),
        ));
    }
    let v = t.cast(DType::F64).reshape(&[]).item::<f64>()?;
    Ok(Some(v != 0.0))
}

/// The tensor inputs of a values row (a sequence or empty optional among
/// them is `None`, so `req` names it).
fn tensors(ins: &[Option<Value>]) -> Vec<Option<Tensor>> {
    ins.iter()
        .map(|v| match v {
            Some(Value::Tensor(t)) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

fn tensor_values(ts: Vec<Tensor>) -> Vec<Value> {
    ts.into_iter().map(Value::Tensor).collect()
}

pub(super) fn build_if(n: &Node, cx: &Cx, ins: &[Option<Value>]) -> Result<Vec<Value>> {
    let ts = tensors(ins);
    let cond = req(n, &ts, 0)?;
    let (then_g, else_g) = (
        subgraph::graph(n, "then_branch")?,
        subgraph::graph(n, "else_branch")?,
    );
    match known_bool(n, "cond", cond)? {
        Some(true) => return subgraph::run_values(n, then_g, cx, &[]),
        Some(false) => return subgraph::run_values(n, else_g, cx, &[]),
        None => {}
    }
    if cond.numel() != 1 {
        return Err(fail(
            n,
            "cond",
            ErrorKind::Shape,
            format!("must hold one value, has shape {:?}", cond.shape()),
        ));
    }
    let (a, b) = (
        subgraph::run(n, then_g, cx, &[])?,
        subgraph::run(n, else_g, cx, &[])?,
    );
    let c = cond.cast(DType::Bool).reshape(&[]);
    a.iter()
        .zip(&b)
        .enumerate()
        .map(|(i, (x, y))| {
            if x.shape() != y.shape() || x.dtype() != y.dtype() {
                return Err(fail(
                    n,
                    "cond",
                    ErrorKind::Unsupported,
                    format!(
                        "the condition depends on the data and output {i} differs between \
                         the branches ({:?}{:?} vs {:?}{:?}), so one cannot select elementwise",
                        x.dtype(),
                        x.shape(),
                        y.dtype(),
                        y.shape()
                    ),
                ));
            }
            Ok(Tensor::where_cond(&c, x, y))
        })
        .collect::<Result<Vec<_>>>()
        .map(tensor_values)
}

pub(super) fn check_loop(n: &Node, cx: &Cx) -> Result<()> {
    subgraph::check(subgraph::graph(n, "body")?, cx)
}

/// Scan outputs stacked on a new axis 0, or an error naming the output
/// when there are none to stack (a zero-trip loop's shapes are unknown).
fn stack(n: &Node, what: &str, xs: &[Tensor], axis: usize) -> Result<Tensor> {
    if xs.is_empty() {
        return Err(fail(
            n,
            what,
            ErrorKind::Unsupported,
            "a scan output of zero iterations (its element shape is unknown)",
        ));
    }
    let parts: Vec<Tensor> = xs
        .iter()
        .map(|x| {
            let mut s = x.shape().to_vec();
            s.insert(axis.min(s.len()), 1);
            x.reshape(&s)
        })
        .collect();
    let refs: Vec<&Tensor> = parts.iter().collect();
    Ok(match refs.len() {
        1 => parts[0].clone(),
        _ => Tensor::cat(&refs, axis as isize),
    })
}

pub(super) fn build_loop(n: &Node, cx: &Cx, vals: &[Option<Value>]) -> Result<Vec<Value>> {
    let body = subgraph::graph(n, "body")?;
    let ins = &tensors(vals)[..];
    let trips = match opt(ins, 0) {
        Some(m) if m.is_traced() => {
            return Err(fail(
                n,
                "M",
                ErrorKind::Unsupported,
                "the trip count must be known when tracing (a constant or computed from \
                 shapes), but it depends on the data",
            ))
        }
        Some(m) => Some(m.cast(DType::I64).reshape(&[]).item::<i64>()?.max(0)),
        None => None,
    };
    let mut cond = match opt(ins, 1) {
        Some(c) => match known_bool(n, "cond", c)? {
            Some(v) => v,
            None => {
                return Err(fail(
                    n,
                    "cond",
                    ErrorKind::Unsupported,
                    "the loop condition must be known when tracing, but it depends on the data",
                ))
            }
        },
        None => true,
    };
    if trips.is_none() && opt(ins, 1).is_none() {
        return Err(fail(
            n,
            "M",
            ErrorKind::Unsupported,
            "a loop with neither trip count nor condition never ends",
        ));
    }
    let carried = ins.len().saturating_sub(2);
    let mut state: Vec<Value> = (0..carried)
        .map(|i| match vals.get(i + 2).cloned().flatten() {
            Some(v) => Ok(v),
            None => req(n, ins, i + 2).cloned().map(Value::Tensor),
        })
        .collect::<Result<_>>()?;
    let scans = body.outputs.len().saturating_sub(1 + carried);
    let mut scanned: Vec<Vec<Tensor>> = vec![Vec::new(); scans];
    // Unrolling has to end: a condition-only loop stops at a known false.
    // A for-loop (no condition) is refused before its first trip.
    let attr = if trips.is_some() { "M" } else { "cond" };
    if let (Some(m), None) = (trips, opt(ins, 1)) {
        unroll_limit(
            n,
            "M",
            "iterations",
            usize::try_from(m).unwrap_or(usize::MAX),
        )?;
    }
    let mut i = 0i64;
    while cond && trips.is_none_or(|m| i < m) {
        unroll_limit(n, attr, "or more iterations", i as usize + 1)?;
        charge(n, attr, "iterations", 1)?;
        let mut args = vec![
            Value::Tensor(Tensor::from_vec(vec![i], &[])?),
            Value::Tensor(Tensor::from_vec(vec![cond], &[])?),
        ];
        args.extend(state.iter().cloned());
        let outs = subgraph::run_values(n, body, cx, &args)?;
        if outs.len() < 1 + carried {
            return Err(fail(
                n,
                "body",
                ErrorKind::BadArgument,
                format!(
                    "the body gives {} outputs, {} needed",
                    outs.len(),
                    1 + carried
                ),
            ));
        }
        let Value::Tensor(c) = &outs[0] else {
            return Err(fail(
                n,
                "body",
                ErrorKind::BadArgument,
                "the body's condition output is not a tensor",
            ));
        };
        cond = match known_bool(n, "cond", c)? {
            Some(v) => v,
            None if trips.is_some() && opt(ins, 1).is_none() => true,
            None => {
                return Err(fail(
                    n,
                    "body",
                    ErrorKind::Unsupported,
                    "the body's condition output depends on the data",
                ))
            }
        };
        state = outs[1..1 + carried].to_vec();
        for (k, v) in outs[1 + carried..].iter().enumerate() {
            let Value::Tensor(t) = v else {
                return Err(fail(
                    n,
                    "body",
                    ErrorKind::Unsupported,
                    format!("scan output {k} is {}, not a tensor", v.what()),
                ));
            };
            scanned[k].push(t.clone());
        }
        i += 1;
    }
    let mut outs = state;
    for (k, s) in scanned.iter().enumerate() {
        outs.push(Value::Tensor(stack(n, &format!("scan output {k}"), s, 0)?));
    }
    Ok(outs)
}

pub(super) fn check_scan(n: &Node, cx: &Cx) -> Result<()> {
    if cx.opset < 9 {
        return Err(fail(
            n,
            "",
            ErrorKind::Unsupported,
            "Scan before opset 9 (with a batch axis and sequence_lens) is not supported",
        ));
    }
    if attr_i(n, "num_scan_inputs", 0)? < 1 {
        return Err(fail(
            n,
            "num_scan_inputs",
            ErrorKind::BadArgument,
            "must be at least 1",
        ));
    }
    subgraph::check(subgraph::graph(n, "body")?, cx)
}

pub(super) fn build_scan(n: &Node, cx: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let body = subgraph::graph(n, "body")?;
    let m = attr_i(n, "num_scan_inputs", 0)? as usize;
    let all: Vec<Tensor> = (0..ins.len())
        .map(|i| req(n, ins, i).cloned())
        .collect::<Result<_>>()?;
    if m > all.len() {
        return Err(fail(
            n,
            "num_scan_inputs",
            ErrorKind::BadArgument,
            format!("{m} scan inputs of {} inputs", all.len()),
        ));
    }
    let states = all.len() - m;
    if body.outputs.len() < states {
        return Err(fail(
            n,
            "body",
            ErrorKind::BadArgument,
            format!(
                "the body gives {} outputs for {states} state variables",
                body.outputs.len()
            ),
        ));
    }
    let list = |name: &str, len: usize| -> Result<Vec<i64>> {
        let v = attr_ints(n, name)?.unwrap_or_default();
        Ok((0..len).map(|i| v.get(i).copied().unwrap_or(0)).collect())
    };
    let (in_axes, in_dirs) = (
        list("scan_input_axes", m)?,
        list("scan_input_directions", m)?,
    );
    let outs_n = body.outputs.len().saturating_sub(states);
    let (out_axes, out_dirs) = (
        list("scan_output_axes", outs_n)?,
        list("scan_output_directions", outs_n)?,
    );
    let xs = &all[states..];
    let mut len = None;
    let mut in_ax = Vec::with_capacity(m);
    for (x, &a) in xs.iter().zip(&in_axes) {
        let a = axis(n, "scan_input_axes", a, x.rank())?;
        let l = x.shape()[a];
        if len.is_some_and(|k| k != l) {
            return Err(fail(
                n,
                "inputs",
                ErrorKind::Shape,
                "scan inputs differ in length along their scan axes",
            ));
        }
        len = Some(l);
        in_ax.push(a);
    }
    let len = unrolled(n, "scan_input_axes", "steps", len.unwrap_or(0))?;
    let mut state = all[..states].to_vec();
    let mut scanned: Vec<Vec<Tensor>> = vec![Vec::new(); outs_n];
    for t in 0..len {
        let mut args = state.clone();
        for ((x, &a), &d) in xs.iter().zip(&in_ax).zip(&in_dirs) {
            let i = if d != 0 { len - 1 - t } else { t };
            let mut s = x.shape().to_vec();
            s.remove(a);
            args.push(x.slice(a as isize, i as isize, i as isize + 1).reshape(&s));
        }
        let outs = subgraph::run(n, body, cx, &args)?;
        state = outs[..states].to_vec();
        for (k, y) in outs[states..].iter().enumerate() {
            scanned[k].push(y.clone());
        }
    }
    let mut outs = state;
    for (k, mut s) in scanned.into_iter().enumerate() {
        if out_dirs[k] != 0 {
            s.reverse();
        }
        let rank = s.first().map_or(0, |t| t.rank()) + 1;
        let a = axis(n, "scan_output_axes", out_axes[k], rank)?;
        outs.push(stack(n, &format!("scan output {k}"), &s, a)?);
    }
    Ok(outs)
}
