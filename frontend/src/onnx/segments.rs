//! Graph breaks: the two-phase run for shapes that depend on data. Some
//! operands must be concrete while tracing: a Reshape's `shape`, a
//! Range's bounds, NonZero's input. When such an operand is computed from
//! traced data (not from constants, shapes or value-keyed inputs), the
//! graph is cut before the node: each piece is traced and compiled as its
//! own jit function, and between two pieces the values cross as concrete
//! tensors. At the cut, the node either
//! - runs eagerly on the concrete values, when its output's shape is its
//!   operand's value (NonZero, Compress, Unique, NonMaxSuppression): its
//!   outputs enter the next piece as ordinary traced inputs, so a new
//!   count retraces only the pieces after it, keyed on that shape; or
//! - starts the next piece, whose operands it needs become value-keyed
//!   inputs there (`statics.rs`): small values (a shape, a bound) whose
//!   every new value is one new program.
//!
//! [`plan`] finds the cuts at load with a forward pass that marks which
//! values are concrete while tracing: constants, value-keyed inputs,
//! `Shape`/`Size` outputs, and outputs of nodes whose inputs are all
//! concrete (those fold as they are traced).

use super::model::{Attr, Node, SubGraph};
use super::statics::{self, Reason};
use super::{IoSpec, ValueKind};
use std::collections::HashSet;
use std::ops::Range;

/// One traced piece of the graph, and the node run eagerly after it.
#[derive(Debug)]
pub(crate) struct Segment {
    /// The nodes traced in this piece, by index.
    pub nodes: Range<usize>,
    /// The values it reads that graph inputs or earlier pieces define, in
    /// the order its jit function takes them.
    pub inputs: Vec<String>,
    /// Per input, why it is value-keyed (`None`: traced).
    pub statics: Vec<Option<Reason>>,
    /// The values it defines that later pieces or the graph outputs read.
    pub outputs: Vec<String>,
    /// A node whose output shape is its operands' values, run eagerly on
    /// the concrete values after this piece.
    pub eager: Option<usize>,
    /// Per input, what it holds (sequences and optionals only when the
    /// graph is one piece).
    pub input_kinds: Vec<ValueKind>,
    /// Per output, what it holds.
    pub output_kinds: Vec<ValueKind>,
}

/// Ops whose output shape is a function of their operands' values: over
/// traced data they run eagerly between pieces, rather than making a
/// data tensor value-keyed (one program per value).
pub(crate) fn data_shaped(op: &str) -> bool {
    matches!(op, "NonZero" | "Compress" | "Unique" | "NonMaxSuppression")
}

/// Every value name a node reads: its inputs, and the outer-scope names
/// its sub-graphs read (they run in a copy of the outer scope).
pub(crate) fn reads(n: &Node) -> Vec<String> {
    let mut out: Vec<String> = n.inputs.iter().filter(|i| !i.is_empty()).cloned().collect();
    for a in n.attrs.values() {
        if let Attr::Graph(g) = a {
            out.extend(free_names(g));
        }
    }
    out
}

/// The names a sub-graph reads but does not define.
fn free_names(g: &SubGraph) -> Vec<String> {
    let mut defined: HashSet<&str> = g.inputs.iter().map(|s| s.name.as_str()).collect();
    defined.extend(g.initializers.iter().map(|(n, _)| n.as_str()));
    let mut free = Vec::new();
    for n in &g.nodes {
        for r in reads(n) {
            if !defined.contains(r.as_str()) && !free.contains(&r) {
                free.push(r);
            }
        }
        defined.extend(n.outputs.iter().map(String::as_str));
    }
    free
}

/// The whole graph as one piece, with the graph's inputs (value-keyed
/// as `graph_statics` says) and outputs.
pub(crate) fn whole(
    count: usize,
    inputs: &[IoSpec],
    graph_statics: &[Option<Reason>],
    outputs: &[IoSpec],
) -> Segment {
    Segment {
        nodes: 0..count,
        inputs: inputs.iter().map(|s| s.name.clone()).collect(),
        statics: graph_statics.to_vec(),
        outputs: outputs.iter().map(|s| s.name.clone()).collect(),
        eager: None,
        input_kinds: inputs.iter().map(|s| s.kind).collect(),
        output_kinds: outputs.iter().map(|s| s.kind).collect(),
    }
}

/// Cuts the graph where an operand the trace must know is computed from
/// traced data; [`whole`] when there is no cut. The pieces carry tensors
/// only: a graph with sequence or optional values is not cut (a value it
/// reads from traced data is an error naming the node, as at trace time).
pub(crate) fn plan(
    nodes: &[Node],
    inputs: &[IoSpec],
    graph_statics: &[Option<Reason>],
    consts: &HashSet<&str>,
    output_specs: &[IoSpec],
) -> Vec<Segment> {
    let values = |specs: &[IoSpec]| specs.iter().any(|s| s.kind != ValueKind::Tensor);
    let sequence_ops = nodes
        .iter()
        .any(|n| n.op.contains("Sequence") || n.op.starts_with("Optional"));
    if values(inputs) || values(output_specs) || sequence_ops {
        return vec![whole(nodes.len(), inputs, graph_statics, output_specs)];
    }
    let outputs: Vec<String> = output_specs.iter().map(|s| s.name.clone()).collect();
    let mut concrete: HashSet<String> = consts.iter().map(|s| s.to_string()).collect();
    for (s, why) in inputs.iter().zip(graph_statics) {
        if why.is_some() {
            concrete.insert(s.name.clone());
        }
    }
    // (start of the piece, index of the cut node, whether it runs eagerly)
    let mut cuts: Vec<(usize, bool)> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let needs_values: &[usize] = match n.domain.is_empty() {
            true => statics::static_operands(&n.op),
            false => &[],
        };
        let traced_operands: Vec<&String> = needs_values
            .iter()
            .filter_map(|&k| n.inputs.get(k).filter(|v| !v.is_empty()))
            .filter(|v| !concrete.contains(v.as_str()))
            .collect();
        if !traced_operands.is_empty() {
            let eager = data_shaped(&n.op);
            cuts.push((i, eager));
            if !eager {
                // The next piece takes these as value-keyed inputs.
                for v in traced_operands.into_iter().cloned().collect::<Vec<_>>() {
                    concrete.insert(v);
                }
            }
        }
        let eager_cut = cuts.last() == Some(&(i, true));
        let folds = match n.op.as_str() {
            "Shape" | "Size" => true,
            _ if eager_cut => false,
            // A sub-graph over known values folds too: `reads` covers the
            // outer names its body reads.
            _ => reads(n).iter().all(|r| concrete.contains(r.as_str())),
        };
        if folds {
            concrete.extend(n.outputs.iter().filter(|o| !o.is_empty()).cloned());
        }
    }
    if cuts.is_empty() {
        return vec![whole(nodes.len(), inputs, graph_statics, output_specs)];
    }
    // Node ranges: a piece ends at each cut; an eager cut node sits between
    // two pieces, any other starts the next one.
    let mut ranges: Vec<(Range<usize>, Option<usize>)> = Vec::new();
    let mut start = 0;
    for &(i, eager) in &cuts {
        match eager {
            true => {
                ranges.push((start..i, Some(i)));
                start = i + 1;
            }
            false if i > start => {
                ranges.push((start..i, None));
                start = i;
            }
            false => {}
        }
    }
    if start < nodes.len() {
        ranges.push((start..nodes.len(), None));
    }
    // Which values each piece reads from outside itself, and which of its
    // own values anything after it reads (later nodes, eager nodes, graph
    // outputs).
    let mut segments = Vec::with_capacity(ranges.len());
    let mut defined_before: HashSet<String> = inputs.iter().map(|s| s.name.clone()).collect();
    for (k, (range, eager)) in ranges.iter().enumerate() {
        let mut ins: Vec<String> = Vec::new();
        let mut own: HashSet<&str> = HashSet::new();
        for n in &nodes[range.clone()] {
            for r in reads(n) {
                if defined_before.contains(&r) && !own.contains(r.as_str()) && !ins.contains(&r) {
                    ins.push(r);
                }
            }
            own.extend(
                n.outputs
                    .iter()
                    .filter(|o| !o.is_empty())
                    .map(String::as_str),
            );
        }
        let later: HashSet<String> = ranges[k..]
            .iter()
            .enumerate()
            .flat_map(|(j, (r, e))| {
                // This piece's own nodes are not "later"; its eager node is.
                let body = if j == 0 {
                    &nodes[0..0]
                } else {
                    &nodes[r.clone()]
                };
                body.iter().chain(e.map(|e| &nodes[e])).flat_map(reads)
            })
            .chain(outputs.iter().cloned())
            .collect();
        let outs: Vec<String> = nodes[range.clone()]
            .iter()
            .flat_map(|n| n.outputs.iter())
            .filter(|o| !o.is_empty() && later.contains(o.as_str()))
            .cloned()
            .collect();
        let specs: Vec<IoSpec> = ins
            .iter()
            .map(|name| IoSpec {
                name: name.clone(),
                dtype: None,
                dims: None,
                kind: ValueKind::Tensor,
            })
            .collect();
        let seg_statics = statics::find(&nodes[range.clone()], &specs);
        defined_before.extend(outs.iter().cloned());
        if let Some(e) = eager {
            defined_before.extend(nodes[*e].outputs.iter().filter(|o| !o.is_empty()).cloned());
        }
        segments.push(Segment {
            nodes: range.clone(),
            input_kinds: vec![ValueKind::Tensor; ins.len()],
            output_kinds: vec![ValueKind::Tensor; outs.len()],
            inputs: ins,
            statics: seg_statics,
            outputs: outs,
            eager: *eager,
        });
    }
    segments
}
