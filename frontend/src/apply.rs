//! The one place an op on tensors happens. [`apply`] receives the operands
//! and a `build` closure that adds the op's nodes to a graph; then
//! - if an operand is an error tensor, the result is that error;
//! - if an operand is traced, `build` runs on the active trace's graph
//!   (concrete operands become constants of the trace);
//! - otherwise (eager mode) `build` runs on a fresh graph whose inputs are
//!   the operands, and the graph is fused, compiled (through the kernel
//!   cache) and run at once.
//!
//! So eager and traced ops share every line of shape and dtype logic.

use crate::error::{Error, Loc};
use crate::mode::RunMode;
use crate::tensor::{Repr, Tensor};
use crate::trace;
use tilejit_ir::{ErrorKind, Graph, IrError, NodeId, Op};

/// Applies an op; see the module docs.
pub(crate) fn apply(
    op: &'static str,
    location: Loc,
    operands: &[&Tensor],
    build: impl FnOnce(&mut Graph, &[NodeId]) -> Result<NodeId, IrError>,
) -> Tensor {
    let weak = !operands.is_empty() && operands.iter().all(|t| t.weak);
    for t in operands {
        if let Repr::Error(e) = &t.repr {
            return Tensor::shared_error(e);
        }
    }
    let traced = operands.iter().any(|t| t.is_traced());
    let mut out = if traced {
        apply_traced(op, location, operands, build)
    } else {
        apply_eager(op, location, operands, build)
    };
    if !matches!(out.repr, Repr::Error(_)) {
        out.weak = weak;
    }
    out
}

fn apply_traced(
    op: &'static str,
    location: Loc,
    operands: &[&Tensor],
    build: impl FnOnce(&mut Graph, &[NodeId]) -> Result<NodeId, IrError>,
) -> Tensor {
    if trace::doomed() {
        return Tensor::from_error(Error::Runtime(tilejit_runtime::RuntimeError::Stopped {
            what: format!("`{op}` in a stand-in trace"),
            why: "was skipped: a size read before it is pinned, so the body is traced again".into(),
        }));
    }
    let result = trace::with(|state| {
        let Some(state) = state else {
            return Err(Error::ForeignTrace { op, location });
        };
        let mut ids = Vec::with_capacity(operands.len());
        for t in operands {
            ids.push(match &t.repr {
                Repr::Traced { trace, node, .. } if *trace == state.id => *node,
                Repr::Traced { .. } => return Err(Error::ForeignTrace { op, location }),
                Repr::Concrete(a) => state.graph.add_constant(a.clone()),
                // A device tensor a body captured becomes a constant of the
                // program: its values are read once, now.
                Repr::Sim(_) => state.graph.add_constant(t.array(op)?),
                #[cfg(feature = "remote")]
                Repr::Remote(_) => state.graph.add_constant(t.array(op)?),
                Repr::Error(e) => return Err((**e).clone()),
            });
        }
        let before = state.graph.len();
        let node = build(&mut state.graph, &ids).map_err(|source| Error::Op {
            op,
            source,
            location,
        })?;
        let added = before..state.graph.len();
        if !state.gathers.contains(&op)
            && added
                .into_iter()
                .any(|i| matches!(state.graph.node(NodeId(i as u32)).op, Op::Gather(..)))
        {
            state.gathers.push(op);
        }
        if let Some(locs) = &mut state.locs {
            // Every node this op added (and any added since the last op,
            // such as its operands' constants) is this line's.
            locs.resize(state.graph.len(), location);
        }
        Ok(Tensor {
            repr: Repr::Traced {
                trace: state.id,
                node,
                ty: state.graph.ty(node),
            },
            weak: false,
        })
    });
    result.unwrap_or_else(|e| {
        trace::record_error(&e);
        Tensor::from_error(e)
    })
}

fn apply_eager(
    op: &'static str,
    location: Loc,
    operands: &[&Tensor],
    build: impl FnOnce(&mut Graph, &[NodeId]) -> Result<NodeId, IrError>,
) -> Tensor {
    let failed = |source| op_error(op, location, source);
    let g = match eager_graph(operands, build) {
        Ok(g) => g,
        Err(source) => return failed(source),
    };
    if let Some(placement) = crate::placement::current() {
        return apply_placed(op, location, operands, &g, &placement);
    }
    let named = operands
        .iter()
        .enumerate()
        .map(|(i, t)| (format!("operand {i}"), *t));
    match crate::device::common_device(op, location, named) {
        Err(e) => Tensor::from_error(e),
        Ok(d) if d.is_host() => run_host(op, location, operands, &g).unwrap_or_else(failed),
        #[cfg(feature = "remote")]
        Ok(d) if !d.is_sim() => run_remote(op, location, &d, operands, &g),
        Ok(_) => run_sim(location, operands, &g).unwrap_or_else(|e| failed(flat(e))),
    }
}

/// An eager op under a placement: on the first listed device that can run
/// it (the next only if fallback is on), its operands moved there, its
/// result on the placement's first device.
fn apply_placed(
    op: &'static str,
    location: Loc,
    operands: &[&Tensor],
    g: &Graph,
    placement: &crate::Placement,
) -> Tensor {
    let failed = |source| op_error(op, location, source);
    let mut why_not = Vec::new();
    for (rank, d) in placement.devices().iter().enumerate() {
        let moved: Result<Vec<Tensor>, crate::Error> = operands.iter().map(|t| t.to(d)).collect();
        let moved = match moved {
            Ok(m) => m,
            Err(e) => return Tensor::from_error(e),
        };
        let refs: Vec<&Tensor> = moved.iter().collect();
        #[cfg(feature = "remote")]
        if !d.is_host() && !d.is_sim() {
            let t = run_remote(op, location, d, &refs, g);
            return t.to(&placement.home()).unwrap_or_else(Tensor::from_error);
        }
        let result = match d.is_host() {
            true => run_host(op, location, &refs, g),
            false => match run_sim(location, &refs, g) {
                Ok(t) => Ok(t),
                Err(tilejit_runtime::RuntimeError::Codegen(
                    e @ tilejit_runtime::CodegenError::SimUnsupported { .. },
                )) => {
                    if rank == 0 && !placement.fallback() {
                        return Tensor::from_error(crate::Error::Placement {
                            function: op.to_string(),
                            location,
                            kernel: op.to_string(),
                            device: d.to_string(),
                            reason: format!("{e}; the placement allows no fallback"),
                        });
                    }
                    why_not.push(format!("{d} cannot run it: {e}"));
                    continue;
                }
                Err(e) => Err(flat(e)),
            },
        };
        return match result {
            Ok(t) => t.to(&placement.home()).unwrap_or_else(Tensor::from_error),
            Err(source) => failed(source),
        };
    }
    Tensor::from_error(crate::Error::Placement {
        function: op.to_string(),
        location,
        kernel: op.to_string(),
        device: placement.home().to_string(),
        reason: match why_not.is_empty() {
            true => "the placement lists no device".into(),
            false => why_not.join("; "),
        },
    })
}

/// The error tensor of `op` failing at `location`.
fn op_error(op: &'static str, location: Loc, mut source: IrError) -> Tensor {
    // An eager op's graph is this one op, so an index out of range is its
    // own, whatever graph op it is made of (`index_select` is a gather).
    if let IrError::IndexOutOfRange { op: inner, .. } = &mut source {
        *inner = op;
    }
    Tensor::from_error(crate::Error::Op {
        op,
        source,
        location,
    })
}

/// The one-op graph over `operands`' types, as inputs.
fn eager_graph(
    operands: &[&Tensor],
    build: impl FnOnce(&mut Graph, &[NodeId]) -> Result<NodeId, IrError>,
) -> Result<Graph, IrError> {
    let mut g = Graph::new();
    let mut ids = Vec::with_capacity(operands.len());
    for (i, t) in operands.iter().enumerate() {
        let ty = t
            .ty()
            .ok_or_else(|| IrError::Verify("eager op got an error operand".into()))?;
        ids.push(g.add(Op::Input {
            index: i as u32,
            ty,
        })?);
    }
    let node = build(&mut g, &ids)?;
    g.outputs.push(node);
    Ok(g)
}

/// A runtime error as the IR error an op reports.
fn flat(e: tilejit_runtime::RuntimeError) -> IrError {
    match e {
        tilejit_runtime::RuntimeError::Ir(e) => e,
        other => IrError::Backend {
            kind: other.kind(),
            message: other.to_string(),
        },
    }
}

/// True when an eager op runs inside a `tilejit::debug` scope, where every
/// value is kept (not while tracing: an eager op in a jit body makes a
/// constant of the trace).
fn debugging() -> bool {
    crate::debug::active() && !trace::active()
}

/// An eager op on host operands, in the scoped run mode.
fn run_host(
    op: &'static str,
    location: Loc,
    operands: &[&Tensor],
    g: &Graph,
) -> Result<Tensor, IrError> {
    let mut inputs = Vec::with_capacity(operands.len());
    for t in operands {
        let Repr::Concrete(a) = &t.repr else {
            return Err(IrError::Verify(
                "eager op got a non-concrete operand".into(),
            ));
        };
        inputs.push(a.clone());
    }
    if debugging() {
        return crate::debug::run_eager(location, g.clone(), |g| {
            Ok(run_graph(op, g, &inputs)?
                .into_iter()
                .map(Tensor::concrete)
                .collect())
        });
    }
    run_graph(op, g, &inputs)?
        .pop()
        .map(Tensor::concrete)
        .ok_or_else(|| IrError::Verify("eager op produced no output".into()))
}

/// Runs an eager op's graph in this thread's mode: a per-call mode
/// (`with_mode`) or `TILEJIT_RUN_MODE`, so a program run on Sim sees eager
/// results computed the same way as its jit results.
fn run_graph(
    op: &'static str,
    g: &Graph,
    inputs: &[tilejit_ir::Array],
) -> Result<Vec<tilejit_ir::Array>, IrError> {
    let mode = crate::mode::scoped()
        .or_else(crate::mode::env_mode)
        .unwrap_or_default();
    Ok(match mode {
        RunMode::Host => tilejit_runtime::run_eager(g, inputs).map_err(flat)?,
        RunMode::Reference => tilejit_ir::interp::run(g, inputs, &[])?,
        RunMode::Sim => tilejit_runtime::run_eager_sim(g, inputs).map_err(flat)?,
        RunMode::Verify => {
            let host = tilejit_runtime::run_eager(g, inputs).map_err(flat)?;
            let sim = tilejit_runtime::run_eager_sim(g, inputs).map_err(flat)?;
            crate::mode::compare(op, g, inputs, &[], &host, &sim).map_err(|e| {
                IrError::Backend {
                    kind: ErrorKind::Device,
                    message: format!("verify mode: host and sim differ: {e}"),
                }
            })?;
            host
        }
    })
}

/// An eager op on a remote device's tensors: its one-op graph goes by
/// content key (sent once per server), its result stays there.
#[cfg(feature = "remote")]
fn run_remote(
    op: &'static str,
    location: Loc,
    device: &crate::Device,
    operands: &[&Tensor],
    g: &Graph,
) -> Tensor {
    let Some(conn) = device.conn() else {
        return Tensor::from_error(crate::Error::Devices {
            op: op.to_string(),
            location,
            arguments: Vec::new(),
        });
    };
    let ran = conn
        .launch(op, g, crate::remote::graph_key(g), operands, &[])
        .map_err(|s| crate::remote::error(&conn.addr, op.to_string(), location, s));
    match ran.map(|mut outs| outs.pop()) {
        Ok(Some(t)) => t,
        Ok(None) => op_error(
            op,
            location,
            IrError::Verify("eager op produced no output".into()),
        ),
        Err(e) => Tensor::from_error(e),
    }
}

/// An eager op on operands in the Sim device's memory: it runs there and
/// its result stays there, whatever the run mode (the data's place
/// decides).
fn run_sim(
    location: Loc,
    operands: &[&Tensor],
    g: &Graph,
) -> Result<Tensor, tilejit_runtime::RuntimeError> {
    let mut inputs = Vec::with_capacity(operands.len());
    for t in operands {
        inputs.push(match &t.repr {
            Repr::Sim(d) => tilejit_runtime::Value::Device(d.clone()),
            Repr::Concrete(a) => tilejit_runtime::Value::Host(a.clone()),
            _ => return Err(IrError::Verify("eager op got a non-concrete operand".into()).into()),
        });
    }
    let run = |g: &Graph| -> Result<Vec<Tensor>, tilejit_runtime::RuntimeError> {
        let out = tilejit_runtime::run_eager_resident(g, &inputs)?;
        Ok(crate::device::sim_tensors(out))
    };
    if debugging() {
        return crate::debug::run_eager(location, g.clone(), run);
    }
    run(g)?
        .pop()
        .ok_or_else(|| IrError::Verify("eager op produced no output".into()).into())
}
