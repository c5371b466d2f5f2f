//! Building nodes in order into an environment of named values, for the
//! model's graph and for sub-graphs (`If` branches, `Loop` and `Scan`
//! bodies). A sub-graph runs in a copy of its outer scope's environment,
//! so it reads outer values by name; its own names never leak out.

use super::model::{Attr, Node, SubGraph};
use super::table::{self, Cx, Kind, Row};
use super::value::Value;
use super::{onnx_error, wrap};
use crate::error::Result;
use crate::tensor::Tensor;
use std::collections::HashMap;
use tilejit_ir::ErrorKind;

/// Values by name while tracing: tensors (which the map derefs to), and
/// sequences and empty optionals apart, which only `Kind::Values` rows
/// read.
#[derive(Clone, Default)]
pub(crate) struct Env {
    tensors: HashMap<String, Tensor>,
    others: HashMap<String, Value>,
}

impl Env {
    pub(crate) fn with_capacity(n: usize) -> Env {
        Env {
            tensors: HashMap::with_capacity(n),
            others: HashMap::new(),
        }
    }

    /// The value of a name, whatever it holds.
    pub(crate) fn value(&self, name: &str) -> Option<Value> {
        match self.tensors.get(name) {
            Some(t) => Some(Value::Tensor(t.clone())),
            None => self.others.get(name).cloned(),
        }
    }

    /// A sequence or empty optional under this name (not a tensor).
    pub(crate) fn other(&self, name: &str) -> Option<&Value> {
        self.others.get(name)
    }

    /// Binds a name, shadowing whatever it held.
    pub(crate) fn set(&mut self, name: String, v: Value) {
        match v {
            Value::Tensor(t) => {
                self.others.remove(&name);
                self.tensors.insert(name, t);
            }
            v => {
                self.tensors.remove(&name);
                self.others.insert(name, v);
            }
        }
    }
}

impl std::ops::Deref for Env {
    type Target = HashMap<String, Tensor>;
    fn deref(&self) -> &Self::Target {
        &self.tensors
    }
}

impl std::ops::DerefMut for Env {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tensors
    }
}

/// A value's first error (a failed op inside it), if any.
fn value_error(v: &Value) -> Option<&crate::error::Error> {
    match v {
        Value::Tensor(t) => t.error(),
        Value::Sequence(s) => s.iter().find_map(|t| t.error()),
        Value::None => None,
    }
}

/// Builds each node in order, adding its outputs to `env`.
pub(crate) fn run_nodes<'n>(
    nodes: impl Iterator<Item = (&'n Node, &'static Row)>,
    env: &mut Env,
    opset: i64,
    consts: &HashMap<String, Tensor>,
) -> Result<()> {
    for (node, row) in nodes {
        let cx = Cx {
            opset,
            consts,
            env: Some(env),
        };
        let outs: Vec<Value> = match row.kind {
            Kind::Values(b) => {
                let ins: Vec<Option<Value>> = node
                    .inputs
                    .iter()
                    .map(|i| match i.is_empty() {
                        true => None,
                        false => env.value(i),
                    })
                    .collect();
                b(node, &cx, &ins).map_err(|e| wrap(node, e))?
            }
            _ => {
                let mut ins = Vec::with_capacity(node.inputs.len());
                for i in &node.inputs {
                    if let Some(v) = env.other(i) {
                        return Err(table::fail(
                            node,
                            i,
                            ErrorKind::BadArgument,
                            format!("this input is {}, not a tensor", v.what()),
                        ));
                    }
                    ins.push(match i.is_empty() {
                        true => None,
                        false => env.get(i.as_str()).cloned(),
                    });
                }
                table::build(row, node, &cx, &ins)
                    .map_err(|e| wrap(node, e))?
                    .into_iter()
                    .map(Value::Tensor)
                    .collect()
            }
        };
        let wanted = node.outputs.iter().filter(|o| !o.is_empty()).count();
        if outs.len() < node.outputs.len() && wanted > outs.len() {
            return Err(table::fail(
                node,
                "outputs",
                ErrorKind::Unsupported,
                format!("gives {} outputs, {} asked", outs.len(), node.outputs.len()),
            ));
        }
        for (name, v) in node.outputs.iter().zip(outs) {
            if name.is_empty() {
                continue;
            }
            if let Some(e) = value_error(&v) {
                return Err(wrap(node, e.clone()));
            }
            env.set(name.clone(), v);
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

/// Runs a sub-graph on tensor inputs; its outputs must be tensors.
pub(crate) fn run(n: &Node, g: &SubGraph, cx: &Cx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let ins: Vec<Value> = inputs.iter().cloned().map(Value::Tensor).collect();
    run_values(n, g, cx, &ins)?
        .into_iter()
        .zip(&g.outputs)
        .map(|(v, o)| match v {
            Value::Tensor(t) => Ok(t),
            v => Err(onnx_error(
                &n.name,
                &n.op,
                o,
                ErrorKind::Unsupported,
                format!("this sub-graph output is {}, not a tensor", v.what()),
            )),
        })
        .collect()
}

/// Runs a sub-graph on its inputs (bound to its declared input names, in
/// order) in a copy of the outer scope; returns its outputs in order.
pub(crate) fn run_values(n: &Node, g: &SubGraph, cx: &Cx, inputs: &[Value]) -> Result<Vec<Value>> {
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
        env.set(name.clone(), Value::Tensor(t.clone()));
    }
    for (spec, v) in g.inputs.iter().zip(inputs) {
        env.set(spec.name.clone(), v.clone());
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
            env.value(o).ok_or_else(|| {
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
