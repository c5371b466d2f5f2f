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
                Repr::Error(e) => return Err((**e).clone()),
            });
        }
        let node = build(&mut state.graph, &ids).map_err(|source| Error::Op {
            op,
            source,
            location,
        })?;
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
    let run = || -> Result<tilejit_ir::Array, IrError> {
        let mut g = Graph::new();
        let mut ids = Vec::with_capacity(operands.len());
        let mut inputs = Vec::with_capacity(operands.len());
        for (i, t) in operands.iter().enumerate() {
            let Repr::Concrete(a) = &t.repr else {
                return Err(IrError::Verify(
                    "eager op got a non-concrete operand".into(),
                ));
            };
            ids.push(g.add(Op::Input {
                index: i as u32,
                ty: a.ty(),
            })?);
            inputs.push(a.clone());
        }
        let node = build(&mut g, &ids)?;
        g.outputs.push(node);
        // Eager ops follow a per-call mode (`with_mode`) or
        // `TILEJIT_RUN_MODE`, so a program run on Sim sees eager results
        // computed the same way as its jit results.
        let mode = crate::mode::scoped()
            .or_else(crate::mode::env_mode)
            .unwrap_or_default();
        let flat = |e: tilejit_runtime::RuntimeError| match e {
            tilejit_runtime::RuntimeError::Ir(e) => e,
            other => IrError::Backend {
                kind: other.kind(),
                message: other.to_string(),
            },
        };
        let mut out = match mode {
            RunMode::Host => tilejit_runtime::run_eager(&g, &inputs).map_err(flat)?,
            RunMode::Reference => tilejit_ir::interp::run(&g, &inputs, &[])?,
            RunMode::Sim => tilejit_runtime::run_eager_sim(&g, &inputs).map_err(flat)?,
            RunMode::Verify => {
                let host = tilejit_runtime::run_eager(&g, &inputs).map_err(flat)?;
                let sim = tilejit_runtime::run_eager_sim(&g, &inputs).map_err(flat)?;
                crate::mode::compare(op, &g, &inputs, &[], &host, &sim).map_err(|e| {
                    IrError::Backend {
                        kind: ErrorKind::Device,
                        message: format!("verify mode: host and sim differ: {e}"),
                    }
                })?;
                host
            }
        };
        out.pop()
            .ok_or_else(|| IrError::Verify("eager op produced no output".into()))
    };
    Tensor::from_ir(run(), op, location)
}
