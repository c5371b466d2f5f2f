//! Calls inside a `tilejit::debug` scope: each signature traced once with
//! every computed node's source line, a debug program per stop point that
//! also outputs those nodes, and the values recorded in the scope.

use super::{Body, JitFunction};
use crate::args::{ArgValue, Outputs};
use crate::debug::DebugStats;
use crate::error::{Error, Loc, Result};
use crate::tensor::{Repr, Tensor};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use tilejit_ir::{Array, Graph, Lit};
use tilejit_runtime::{HandlerCache, Program, Signature};

/// A function's debug traces (per signature) and how many debug programs
/// it compiled.
#[derive(Default)]
pub(super) struct DebugCache {
    pub(super) traces: HandlerCache<DebugTrace, Error>,
    pub(super) compiles: std::sync::atomic::AtomicU64,
}

/// A signature's trace made for `tilejit::debug`, with each computed
/// node's op and line, and its debug programs by how many computed nodes
/// they materialise (all of them, with the real outputs first, or a
/// `step_to` prefix).
pub(super) struct DebugTrace {
    graph: Graph,
    computed: Vec<tilejit_ir::NodeId>,
    locs: Vec<String>,
    programs: Mutex<HashMap<usize, DebugProgram>>,
}

/// One debug program, built once (its cell is filled outside the map's lock).
type DebugProgram = Arc<OnceLock<std::result::Result<Arc<Program>, Error>>>;

/// Debug programs a trace keeps (cleared when full).
const MAX_DEBUG_PROGRAMS: usize = 64;

impl JitFunction {
    /// What [`DebugStats`] the calls inside `tilejit::debug` scopes have
    /// cost this function so far (its [`stats`](Self::stats) count only
    /// normal calls).
    pub fn debug_stats(&self) -> DebugStats {
        self.debug
            .get()
            .map_or(DebugStats::default(), |d| DebugStats {
                traces: d.traces.stats().traces,
                compiles: d.compiles.load(Ordering::Relaxed),
            })
    }

    /// A call inside a `tilejit::debug` scope: the signature's debug trace
    /// (traced once, with each node's line), its debug program for as many
    /// computed nodes as the scope lets run, compiled once, run in the
    /// call's mode; each computed value is recorded in the scope.
    pub(super) fn call_debug(
        &self,
        args: &[ArgValue],
        body: &Body,
        location: Loc,
    ) -> Result<Outputs> {
        let sig = self.signature(args)?;
        let cache = self.debug.get_or_init(DebugCache::default);
        let entry = cache
            .traces
            .get_or_build(&sig, || self.debug_trace(&sig, args, body))?;
        let all = entry.computed.len();
        let take = crate::debug::budget().map_or(all, |b| b.min(all));
        let stopped = take < all;
        let stop_error = || Error::Run {
            function: self.name.clone(),
            location,
            source: tilejit_runtime::RuntimeError::Stopped {
                what: format!("`{}`", self.name),
                why: format!(
                    "was {}; its ops past the stop did not run",
                    crate::debug::stopped_message()
                ),
            },
        };
        if stopped && take == 0 {
            return Err(stop_error());
        }
        let cell = {
            let mut programs = entry.programs.lock().unwrap_or_else(|p| p.into_inner());
            if programs.len() >= MAX_DEBUG_PROGRAMS && !programs.contains_key(&take) {
                programs.clear();
            }
            programs.entry(take).or_default().clone()
        };
        let program = cell
            .get_or_init(|| {
                let mut graph = entry.graph.clone();
                if stopped {
                    graph.outputs.clear();
                }
                graph.outputs.extend_from_slice(&entry.computed[..take]);
                cache.compiles.fetch_add(1, Ordering::Relaxed);
                Program::compile_named(
                    graph,
                    &format!("{}{} debug {take}/{all}", self.name, super::short(&sig)),
                )
                .map(Arc::new)
                .map_err(|e| Error::Trace {
                    function: self.name.clone(),
                    signature: super::short(&sig),
                    source: Box::new(Error::Runtime(e)),
                })
            })
            .clone()?;
        let mut inputs: Vec<Array> = Vec::new();
        let mut params: Vec<Lit> = Vec::new();
        let mut on_device = false;
        for a in args {
            match *a {
                ArgValue::Tensor(t) => match &t.repr {
                    Repr::Concrete(arr) => inputs.push(arr.clone()),
                    _ => on_device = true,
                },
                ArgValue::Float(v, d) => params.push(Lit::from_f64(v, d)),
                ArgValue::Int(_) | ArgValue::Bool(_) | ArgValue::Mark(_) => {}
            }
        }
        // Under a placement the debug program is placed like any other;
        // with device arguments it runs where they live, and its values
        // stay there too (reading one copies it back).
        let mut outs: Vec<Tensor> = if let Some(placement) = crate::placement::current() {
            let mode = self.effective_mode();
            self.call_placed(&program, args, &params, &placement, mode, location)?
                .collect()
        } else if on_device {
            self.run_on_device(&program, args, &params, location)?
        } else {
            self.run_in(
                self.effective_mode(),
                &program,
                &inputs,
                &params,
                location,
                false,
            )?
            .into_iter()
            .map(Tensor::concrete)
            .collect()
        };
        let real = if stopped {
            0
        } else {
            entry.graph.outputs.len()
        };
        for (i, value) in outs.drain(real..).enumerate() {
            let id = entry.computed[i];
            crate::debug::record(
                tilejit_ir::text::op_name(&entry.graph.node(id).op),
                &entry.locs[i],
                value,
                Some(&self.name),
            );
        }
        if stopped {
            return Err(stop_error());
        }
        Ok(Outputs::from_tensor_vec(outs))
    }

    /// Traces `sig` for a debug scope, with each node's line.
    fn debug_trace(&self, sig: &Signature, args: &[ArgValue], body: &Body) -> Result<DebugTrace> {
        tilejit_runtime::warm_up();
        let debug = self.debug.get_or_init(DebugCache::default);
        debug.traces.note_trace();
        let (graph, locs) = self.trace_with(sig, args, body, true)?;
        let locs = locs.unwrap_or_default();
        let computed = crate::debug::computed_nodes(&graph);
        let locs = computed
            .iter()
            .map(|id| {
                locs.get(id.index())
                    .map_or_else(|| self.location.clone(), ToString::to_string)
            })
            .collect();
        Ok(DebugTrace {
            graph,
            computed,
            locs,
            programs: Mutex::new(HashMap::new()),
        })
    }
}
