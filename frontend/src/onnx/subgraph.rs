//! Building nodes in order into an environment of named values, for the
//! model's graph and for sub-graphs (`If` branches, `Loop` and `Scan`
//! bodies). A sub-graph runs in a copy of its outer scope's environment,
//! so it reads outer values by name; its own names never leak out.

use super::model::{Attr, Node, SubGraph};
use super::table::{self, Cx, Row};
use super::{onnx_error, wrap};
use crate::error::Result;
use crate::tensor::Tensor;
use std::collections::HashMap;
use tilejit_ir::ErrorKind;

/// Values by name while tracing.
pub(crate) type Env = HashMap<String, Tensor>;

/// Builds each node in order, adding its outputs to `env`.
pub(crate) fn run_nodes<'n>(
    nodes: impl Iterator<Item = (&'n Node, &'static Row)>,
    env: &mut Env,
    opset: i64,
    consts: &HashMap<String, Tensor>,
) -> Result<()> {
    for (node, row) in nodes {
        let ins: Vec<Option<Tensor>> = node
            .inputs
            .iter()
            .map(|i| match i.is_empty() {
                true => None,
                false => env.get(i.as_str()).cloned(),
            })
            .collect();
        let cx = Cx {
            opset,
            consts,
            env: Some(env),
        };
        let outs = table::build(row, node, &cx, &ins).map_err(|e| wrap(node, e))?;
        let wanted = node.outputs.iter().filter(|o| !o.is_empty()).count();
        if outs.len() < node.outputs.len() && wanted > outs.len() {
            return Err(table::fail(
                node,
                "outputs",
                ErrorKind::Unsupported,
                format!("gives {} outputs, {} asked", outs.len(), node.outputs.len()),
            ));
        }
        for (name, t) in node.outputs.iter().zip(outs) {
            if name.is_empty() {
                continue;
            }
            if let Some(e) = t.error() {
                return Err(wrap(node, e.clone()));
            }
            env.insert(name.clone(), t);
        }
    }
    Ok(())
}

/// A node's graph attribute, or an error naming it.
pub(crate) fn graph<'a>(n: &'a Node, name: &str) -> Result<&'a SubGraph> {
    match n.attrs.get(name) {
        Some(Attr::Graph(g)) => Ok(g),
        Some(_) => Err(table::fail(
            n,
            name,
            ErrorKind::BadArgument,
            "must be a graph",
        )),
        None => Err(table::fail(
            n,
            name,
            ErrorKind::BadArgument,
            "this attribute is required",
        )),
    }
}

/// The outer constants plus a sub-graph's initializers and `Constant`s.
fn consts_of(g: &SubGraph, outer: &HashMap<String, Tensor>) -> HashMap<String, Tensor> {
    let mut consts = outer.clone();
    consts.extend(g.initializers.iter().cloned());
    for n in &g.nodes {
        if n.op == "Constant" && n.domain.is_empty() {
            if let (Some(out), Some(Attr::Tensor(t))) = (n.outputs.first(), n.attrs.get("value")) {
                consts.insert(out.clone(), t.clone());
            }
        }
    }
    consts
}

/// Checks every node of a sub-graph at load, as the model's own.
pub(crate) fn check(g: &SubGraph, cx: &Cx) -> Result<()> {
    let consts = consts_of(g, cx.consts);
    let sub = Cx {
        opset: cx.opset,
        consts: &consts,
        env: None,
    };
    for n in &g.nodes {
        table::check(n, &sub)?;
    }
    Ok(())
}

/// Runs a sub-graph on its inputs (bound to its declared input names, in
/// order) in a copy of the outer scope; returns its outputs in order.
pub(crate) fn run(n: &Node, g: &SubGraph, cx: &Cx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Some(outer) = cx.env else {
        return Err(table::fail(
            n,
            "",
            ErrorKind::Internal,
            "a sub-graph run outside a trace",
        ));
    };
    if inputs.len() != g.inputs.len() {
        return Err(table::fail(
            n,
            "inputs",
            ErrorKind::BadArgument,
            format!(
                "its sub-graph takes {} inputs, {} given",
                g.inputs.len(),
                inputs.len()
            ),
        ));
    }
    let mut env = outer.clone();
    for (name, t) in &g.initializers {
        env.insert(name.clone(), t.clone());
    }
    for (spec, t) in g.inputs.iter().zip(inputs) {
        env.insert(spec.name.clone(), t.clone());
    }
    let consts = consts_of(g, cx.consts);
    let sub = Cx {
        opset: cx.opset,
        consts: &consts,
        env: None,
    };
    let rows = g
        .nodes
        .iter()
        .map(|node| table::check(node, &sub).map(|r| (node, r)))
        .collect::<Result<Vec<_>>>()?;
    run_nodes(rows.into_iter(), &mut env, cx.opset, &consts)?;
    g.outputs
        .iter()
        .map(|o| {
            env.get(o.as_str()).cloned().ok_or_else(|| {
                onnx_error(
                    &n.name,
                    &n.op,
                    o,
                    ErrorKind::BadArgument,
                    "this sub-graph output is never computed",
                )
            })
        })
        .collect()
}
