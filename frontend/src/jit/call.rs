//! A jit call's way through the function: the arguments' signature, the
//! handler-cache lookup, a miss traced and compiled (or inlined into an
//! enclosing trace), and the run dispatched to the host, a placement or
//! the device the arguments live on.

use super::dynamic::ClassLookup;
use super::{Body, JitFunction, PackedBody};
use crate::args::{ArgKind, ArgValue, Outputs, TraceValue};
use crate::error::{Error, Loc, Result};
use crate::mode::RunMode;
use crate::placement::Placement;
use crate::tensor::{Repr, Tensor};
use crate::trace::{self, TraceGuard};
use smallvec::SmallVec;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use tilejit_ir::{Array, Graph, Lit, Op};
use tilejit_runtime::{panic_message, ArgSig, Mark, Program, Signature};

impl JitFunction {
    pub(super) fn check_args(&self, args: &[ArgValue]) -> Result<()> {
        let bad = |message: String| Error::Arguments {
            function: self.name.clone(),
            message,
        };
        // A list or struct parameter is several leaves, as many as its
        // value has: the macro flattens them, and its lengths and
        // structure keys are leaves of the signature.
        if self.params.iter().any(|p| p.kind == ArgKind::Tree) {
            return Ok(());
        }
        if args.len() != self.params.len() {
            return Err(bad(format!(
                "expected {} arguments, got {}",
                self.params.len(),
                args.len()
            )));
        }
        for (i, (p, a)) in self.params.iter().zip(args).enumerate() {
            if p.kind != a.kind() {
                return Err(bad(format!(
                    "argument {i} (`{}`) expects {:?}, got {:?}",
                    p.name,
                    p.kind,
                    a.kind()
                )));
            }
        }
        Ok(())
    }

    /// The signature of a call's arguments.
    #[track_caller]
    pub fn signature(&self, args: &[ArgValue]) -> Result<Signature> {
        let location = Loc::caller();
        self.check_args(args)?;
        let mut sig = Vec::with_capacity(args.len());
        for a in args {
            sig.push(match *a {
                ArgValue::Tensor(t) => match &t.repr {
                    Repr::Concrete(arr) => ArgSig::Tensor(arr.ty()),
                    Repr::Sim(d) => ArgSig::Tensor(d.ty()),
                    #[cfg(feature = "remote")]
                    Repr::Remote(r) => ArgSig::Tensor(r.ty),
                    Repr::Error(e) => return Err((**e).clone()),
                    Repr::Traced { .. } => {
                        return Err(Error::ForeignTrace {
                            op: "jit call",
                            location,
                        })
                    }
                },
                ArgValue::Float(_, d) => ArgSig::Float(d),
                ArgValue::Int(v) => ArgSig::Int(v),
                ArgValue::Bool(v) => ArgSig::Bool(v),
                ArgValue::Mark(m) => ArgSig::Mark(m),
            });
        }
        Ok(Signature { args: sig })
    }

    /// Gives the function its body, so [`JitFunction::call_packed`] (and
    /// the registry) can call it by argument list; `#[jit]` does this.
    #[doc(hidden)]
    pub fn set_body(&mut self, body: PackedBody) {
        self.body = Some(body);
    }

    /// Calls the function on an argument list (checked against its
    /// parameters), returning its outputs as tensors: how the registry
    /// calls a jit function by name.
    #[track_caller]
    pub fn call_packed(&self, args: &[ArgValue]) -> Result<Vec<Tensor>> {
        let Some(body) = self.body else {
            return Err(Error::Arguments {
                function: self.name.clone(),
                message: "it has no body to call by argument list (only `#[jit]` functions do)"
                    .into(),
            });
        };
        self.call(args, &body).map(|outs| outs.collect())
    }

    /// Calls the function: cache lookup, trace + compile on a miss, run.
    #[track_caller]
    #[doc(hidden)]
    pub fn call(&self, args: &[ArgValue], body: &Body) -> Result<Outputs> {
        if trace::active() {
            return self.inline(args, body);
        }
        if crate::debug::active() {
            return self.call_debug(args, body, Loc::caller());
        }
        // Fast path: the same signature as the last hit, checked against the
        // arguments without building a signature.
        let program = match self.cache.get_last(|sig| signature_matches(sig, args)) {
            Some(p) => p,
            None => {
                let sig = self.signature(args)?;
                if self.frozen.load(Ordering::Relaxed) || crate::config::config().log.trace {
                    self.before_miss(&sig)?;
                }
                self.cache
                    .get_or_build(&sig, || self.trace_and_compile(&sig, args, body))?
            }
        };
        let mode = self.effective_mode();
        // The short way for a one-kernel program on host tensors (W6).
        if mode == RunMode::Host && crate::placement::current().is_none() {
            if let Some(Some(out)) = with_host_inputs(args, |a| program.run_one(a)) {
                return match out {
                    Ok(a) => Ok(Outputs::one(a)),
                    Err(e) => Err(self.run_error(Loc::caller(), *e)),
                };
            }
        }
        // References, not clones: an `Array` is 88 bytes and an atomic
        // count, a share of a tiny call's cost (W6).
        let mut inputs: SmallVec<[&Array; 4]> = SmallVec::new();
        let mut params: SmallVec<[Lit; 4]> = SmallVec::new();
        let mut on_device = false;
        for a in args {
            match *a {
                ArgValue::Tensor(t) => match &t.repr {
                    Repr::Concrete(arr) => inputs.push(arr),
                    _ => on_device = true,
                },
                ArgValue::Float(v, d) => params.push(Lit::from_f64(v, d)),
                ArgValue::Int(_) | ArgValue::Bool(_) | ArgValue::Mark(_) => {}
            }
        }
        params.extend_from_slice(program.size_params());
        // `#[track_caller]` does not reach into closures: take it here (a
        // pointer copy); the error itself is only built when a run fails.
        let location = Loc::caller();
        let ran = |e: tilejit_runtime::RuntimeError| self.run_error(location, e);
        if let Some(placement) = crate::placement::current() {
            return self.call_placed(&program, args, &params, &placement, mode, location);
        }
        if on_device {
            return self.call_on_device(&program, args, &params, location);
        }
        if mode == RunMode::Host {
            let outs = program.run(&inputs, &params).map_err(ran)?;
            return Ok(Outputs::from_arrays(outs));
        }
        let inputs: SmallVec<[Array; 4]> = inputs.into_iter().cloned().collect();
        let outs = self.run_in(mode, &program, &inputs, &params, location, true)?;
        Ok(Outputs::from_arrays(outs))
    }

    /// A run of this function failing at the user's `location`. A gather
    /// index out of range names the op the body called when only one of
    /// its ops gathers (`index_select` is a gather in the graph).
    pub(super) fn run_error(
        &self,
        location: Loc,
        mut source: tilejit_runtime::RuntimeError,
    ) -> Error {
        if let tilejit_runtime::RuntimeError::Ir(tilejit_ir::IrError::IndexOutOfRange {
            op, ..
        }) = &mut source
        {
            if let [only] = self.gather_ops.lock().unwrap_or_else(|p| p.into_inner())[..] {
                *op = only;
            }
        }
        Error::Run {
            function: self.name.clone(),
            location,
            source,
        }
    }

    /// Runs `program` in `mode`; in Verify mode the measured differences
    /// become [`last_verify`](Self::last_verify) when `keep_verify`.
    pub(super) fn run_in(
        &self,
        mode: RunMode,
        program: &Program,
        inputs: &[Array],
        params: &[Lit],
        location: Loc,
        keep_verify: bool,
    ) -> Result<Vec<Array>> {
        let ran = |e: tilejit_runtime::RuntimeError| self.run_error(location, e);
        Ok(match mode {
            RunMode::Host => program.run(inputs, params).map_err(ran)?,
            RunMode::Reference => program.run_reference(inputs, params).map_err(ran)?,
            RunMode::Sim => program.run_sim(inputs, params, false).map_err(ran)?.0,
            RunMode::Verify => {
                let host = program.run(inputs, params).map_err(ran)?;
                let (sim, _) = program.run_sim(inputs, params, false).map_err(ran)?;
                let diffs = crate::mode::compare(
                    &self.name,
                    program.optimized(),
                    inputs,
                    params,
                    &host,
                    &sim,
                )?;
                crate::mode::log_verify(&self.name, &diffs);
                if keep_verify {
                    *self.last_verify.lock().unwrap_or_else(|p| p.into_inner()) = Some(diffs);
                }
                host
            }
        })
    }

    /// A call under a placement: each kernel on the first device that can
    /// run it, values copied between devices where they cross, results on
    /// the placement's first device. Verify mode compares the placed run
    /// with the host's.
    pub(super) fn call_placed(
        &self,
        program: &Program,
        args: &[ArgValue],
        params: &[Lit],
        placement: &Placement,
        mode: RunMode,
        location: Loc,
    ) -> Result<Outputs> {
        let ran = |source| self.run_error(location, source);
        let mut inputs = Vec::new();
        for a in args {
            if let ArgValue::Tensor(t) = *a {
                inputs.push(t.array("jit call")?);
            }
        }
        if mode == RunMode::Reference {
            let outs = program.run_reference(&inputs, params).map_err(ran)?;
            return Ok(Outputs::from_arrays(outs));
        }
        let (on_sim, report) = crate::placement::plan(placement, program, &self.name, location)?;
        let home = placement.home();
        let outs = program
            .run_placed(&inputs, params, &on_sim, home == crate::Device::sim())
            .map_err(ran)?;
        if mode == RunMode::Verify {
            let placed = outs
                .iter()
                .map(tilejit_runtime::Value::to_host)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(ran)?;
            let host = program.run(&inputs, params).map_err(ran)?;
            let diffs = crate::mode::compare(
                &self.name,
                program.optimized(),
                &inputs,
                params,
                &host,
                &placed,
            )?;
            crate::mode::log_verify(&self.name, &diffs);
            *self.last_verify.lock().unwrap_or_else(|p| p.into_inner()) = Some(diffs);
        }
        *self
            .last_placement
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(report);
        let tensors = outs
            .into_iter()
            .map(|v| match v {
                tilejit_runtime::Value::Host(a) => Tensor::concrete(a).to(&home),
                tilejit_runtime::Value::Device(d) => {
                    Ok(crate::device::sim_tensors(vec![d]).remove(0))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Outputs::from_tensor_vec(tensors))
    }

    /// A call with tensor arguments in device memory: they must all be on
    /// one device (rank-0 host tensors may join), where the program runs
    /// and its results stay.
    fn call_on_device(
        &self,
        program: &Program,
        args: &[ArgValue],
        params: &[Lit],
        location: Loc,
    ) -> Result<Outputs> {
        self.run_on_device(program, args, params, location)
            .map(Outputs::from_tensor_vec)
    }

    /// Runs `program` where its device arguments live (see
    /// [`call_on_device`](Self::call_on_device)): its outputs, on that device.
    pub(super) fn run_on_device(
        &self,
        program: &Program,
        args: &[ArgValue],
        params: &[Lit],
        location: Loc,
    ) -> Result<Vec<Tensor>> {
        let tensors = args.iter().enumerate().filter_map(|(i, a)| match *a {
            ArgValue::Tensor(t) => {
                let name = self
                    .params
                    .get(i)
                    .map_or_else(|| format!("argument {i}"), |p| format!("`{}`", p.name));
                Some((name, t))
            }
            _ => None,
        });
        #[cfg_attr(not(feature = "remote"), allow(unused_variables))]
        let device = crate::device::common_device(&self.name, location, tensors.clone())?;
        #[cfg(feature = "remote")]
        if let Some(conn) = device.conn() {
            let inputs: Vec<&Tensor> = tensors.map(|(_, t)| t).collect();
            return conn
                .launch(
                    program.name(),
                    program.traced(),
                    crate::remote::program_key(program),
                    &inputs,
                    params,
                )
                .map_err(|s| crate::remote::error(&conn.addr, self.name.clone(), location, s));
        }
        let inputs = tensors
            .map(|(_, t)| match &t.repr {
                Repr::Sim(d) => Ok(tilejit_runtime::Value::Device(d.clone())),
                Repr::Concrete(a) => Ok(tilejit_runtime::Value::Host(a.clone())),
                // The signature lets only concrete tensors through.
                _ => Err(Error::ForeignTrace {
                    op: "jit call",
                    location,
                }),
            })
            .collect::<Result<Vec<_>>>()?;
        let outs = program
            .run_resident(&inputs, params)
            .map_err(|source| self.run_error(location, source))?;
        Ok(crate::device::sim_tensors(outs))
    }

    /// For a call about to look `sig` up: if it has no ready program, an
    /// error when frozen, and a line under `TILEJIT_LOG=trace` saying why
    /// it traces. (Off the fast path: only when either is on.)
    fn before_miss(&self, sig: &Signature) -> Result<()> {
        let Some(why) = self.cache.explain_miss(sig) else {
            return Ok(());
        };
        // New sizes of a class with a generic trace need no trace: frozen
        // or not, they compile (from cached kernels).
        if let Some((class, sizes)) = self.class_of(sig, false) {
            if let ClassLookup::Fits(_) = self.lookup_class(&class, &sizes) {
                return Ok(());
            }
        }
        if self.frozen.load(Ordering::Relaxed) {
            return Err(Error::Frozen {
                function: self.name.clone(),
                signature: super::short(sig),
                nearest: why,
            });
        }
        eprintln!(
            "[tilejit] tracing `{}` for {}: {why}",
            self.name,
            super::short(sig)
        );
        Ok(())
    }

    /// Called inside another trace: run the body on the caller's values.
    fn inline(&self, args: &[ArgValue], body: &Body) -> Result<Outputs> {
        self.check_args(args)?;
        let values: Vec<TraceValue> = args
            .iter()
            .map(|a| match *a {
                ArgValue::Tensor(t) => TraceValue::Tensor(t.clone()),
                ArgValue::Float(v, d) => {
                    let mut t = Tensor::scalar(v, d);
                    t.weak = true;
                    TraceValue::Tensor(t)
                }
                ArgValue::Int(v) => TraceValue::Int(v),
                ArgValue::Bool(v) => TraceValue::Bool(v),
                ArgValue::Mark(m) => mark_value(m),
            })
            .collect();
        body(&values).map(Outputs::from_tensor_vec)
    }

    fn trace_and_compile(
        &self,
        sig: &Signature,
        args: &[ArgValue],
        body: &Body,
    ) -> Result<Program> {
        // The first trace in a process starts warming the compiler on an
        // idle core, so the compile after the trace runs warmer.
        tilejit_runtime::warm_up();
        let (graph, size_params) = match self.is_dynamic() {
            true => self.dynamic_graph(sig, args, body)?,
            false => (self.trace(sig, args, body)?, Vec::new()),
        };
        Program::compile_named(graph, &format!("{}{}", self.name, super::short(sig)))
            .map(|p| p.with_size_params(size_params))
            .map_err(|e| Error::Trace {
                function: self.name.clone(),
                signature: super::short(sig),
                source: Box::new(Error::Runtime(e)),
            })
    }

    /// Runs the body on traced arguments of `sig`'s types: the graph it
    /// records, with its outputs.
    pub(super) fn trace(&self, sig: &Signature, args: &[ArgValue], body: &Body) -> Result<Graph> {
        self.cache.note_trace();
        self.trace_with(sig, args, body, false).map(|(g, _)| g)
    }

    /// [`trace`](Self::trace), counting nothing; with `locations`, also
    /// each node's source line.
    pub(super) fn trace_with(
        &self,
        sig: &Signature,
        args: &[ArgValue],
        body: &Body,
        locations: bool,
    ) -> Result<(Graph, Option<Vec<Loc>>)> {
        let wrap = |source: Error| Error::Trace {
            function: self.name.clone(),
            signature: super::short(sig),
            source: Box::new(source),
        };
        let (id, guard) = TraceGuard::start(locations);
        let values = trace::with(|state| -> Result<Vec<TraceValue>> {
            let state = state.ok_or_else(|| {
                wrap(Error::ForeignTrace {
                    op: "trace start",
                    location: Loc::caller(),
                })
            })?;
            self.trace_inputs(&mut state.graph, id, sig, args)
                .map_err(wrap)
        })?;
        let result = catch_unwind(AssertUnwindSafe(|| body(&values)));
        drop(values);
        let state = guard.finish();
        if let Some(st) = &state {
            let mut ops = self.gather_ops.lock().unwrap_or_else(|p| p.into_inner());
            for op in &st.gathers {
                if !ops.contains(op) {
                    ops.push(op);
                }
            }
        }
        // The user's code is done: callers waiting for this build now wait
        // for the compile, however long it takes.
        tilejit_runtime::user_code_done();
        let outputs = match result {
            Err(payload) => {
                return Err(Error::Panic {
                    function: self.name.clone(),
                    signature: super::short(sig),
                    message: panic_message(payload.as_ref()),
                })
            }
            Ok(Err(e)) => return Err(wrap(e)),
            Ok(Ok(outputs)) => outputs,
        };
        let mut state = state.ok_or_else(|| {
            wrap(Error::ForeignTrace {
                op: "trace end",
                location: Loc::caller(),
            })
        })?;
        if let Some(e) = state.first_error.take() {
            return Err(wrap(e));
        }
        for t in &outputs {
            let node = output_node(&mut state.graph, id, t).map_err(wrap)?;
            state.graph.outputs.push(node);
        }
        Ok((state.graph, state.locs))
    }

    /// The trace values of a call's arguments in trace `id`: an
    /// `Op::Input` per tensor and an `Op::Param` per float added to
    /// `graph`, static values as they are.
    fn trace_inputs(
        &self,
        graph: &mut Graph,
        id: u64,
        sig: &Signature,
        args: &[ArgValue],
    ) -> Result<Vec<TraceValue>> {
        let (mut n_inputs, mut n_params) = (0u32, 0u32);
        let mut values = Vec::with_capacity(args.len());
        for (a, s) in args.iter().zip(&sig.args) {
            values.push(match (*a, *s) {
                (ArgValue::Tensor(_), ArgSig::Tensor(ty)) => {
                    let node = graph
                        .add(Op::Input {
                            index: n_inputs,
                            ty,
                        })
                        .map_err(|e| Error::Runtime(e.into()))?;
                    n_inputs += 1;
                    TraceValue::Tensor(Tensor {
                        repr: Repr::Traced {
                            trace: id,
                            node,
                            ty,
                        },
                        weak: false,
                    })
                }
                (ArgValue::Float(_, dtype), _) => {
                    let node = graph
                        .add(Op::Param {
                            index: n_params,
                            dtype,
                        })
                        .map_err(|e| Error::Runtime(e.into()))?;
                    n_params += 1;
                    let ty = graph.ty(node);
                    TraceValue::Tensor(Tensor {
                        repr: Repr::Traced {
                            trace: id,
                            node,
                            ty,
                        },
                        weak: true,
                    })
                }
                (ArgValue::Int(v), _) => TraceValue::Int(v),
                (ArgValue::Bool(v), _) => TraceValue::Bool(v),
                (ArgValue::Mark(m), _) => mark_value(m),
                (ArgValue::Tensor(_), _) => {
                    return Err(Error::Arguments {
                        function: self.name.clone(),
                        message: "signature mismatch".into(),
                    })
                }
            });
        }
        Ok(values)
    }
}

/// A list's length or a struct's key as the body reads it (an integer).
fn mark_value(m: Mark) -> TraceValue {
    match m {
        Mark::Len(n) => TraceValue::Int(n as i64),
        Mark::Struct(k) => TraceValue::Int(k as i64),
    }
}

/// Calls `f` on the host arrays of `args` when every argument is a host
/// tensor or a trace-time constant (no float params), at most eight of
/// them; `None` otherwise. On the stack: no vector for a tiny call.
#[inline]
fn with_host_inputs<'a, R>(args: &[ArgValue<'a>], f: impl FnOnce(&[&'a Array]) -> R) -> Option<R> {
    const MOST: usize = 8;
    fn concrete<'a>(a: &ArgValue<'a>) -> Option<Option<&'a Array>> {
        match *a {
            ArgValue::Tensor(t) => match &t.repr {
                Repr::Concrete(arr) => Some(Some(arr)),
                _ => None,
            },
            ArgValue::Float(..) => None,
            ArgValue::Int(_) | ArgValue::Bool(_) | ArgValue::Mark(_) => Some(None),
        }
    }
    let Some(first) = args.iter().find_map(|a| concrete(a).flatten()) else {
        // No tensor at all, or the first tensor is not on the host.
        return args
            .iter()
            .all(|a| matches!(concrete(a), Some(None)))
            .then(|| f(&[]));
    };
    let mut arrays = [first; MOST];
    let mut n = 0;
    for a in args {
        if let Some(arr) = concrete(a)? {
            *arrays.get_mut(n)? = arr;
            n += 1;
        }
    }
    Some(f(&arrays[..n]))
}

/// True when `args` have exactly the signature `sig` (concrete tensors of
/// its types, the same static values, floats of its dtypes).
fn signature_matches(sig: &Signature, args: &[ArgValue]) -> bool {
    sig.args.len() == args.len()
        && sig.args.iter().zip(args).all(|(s, a)| match (s, a) {
            // Host tensors only: device calls (milliseconds) take the
            // slower lookup, which keeps this check as small as W6 needs.
            (ArgSig::Tensor(t), ArgValue::Tensor(x)) => {
                matches!(&x.repr, Repr::Concrete(arr) if arr.has_type(t))
            }
            (ArgSig::Float(d), ArgValue::Float(_, e)) => d == e,
            (ArgSig::Int(v), ArgValue::Int(w)) => v == w,
            (ArgSig::Bool(v), ArgValue::Bool(w)) => v == w,
            (ArgSig::Mark(m), ArgValue::Mark(n)) => m == n,
            _ => false,
        })
}

/// The node of trace `id` that a body's returned tensor is: its own node,
/// or a constant for a concrete (or device) tensor.
fn output_node(graph: &mut Graph, id: u64, t: &Tensor) -> Result<tilejit_ir::NodeId> {
    Ok(match &t.repr {
        Repr::Traced { trace, node, .. } if *trace == id => *node,
        Repr::Traced { .. } => {
            return Err(Error::ForeignTrace {
                op: "return",
                location: Loc::caller(),
            })
        }
        Repr::Concrete(a) => graph.add_constant(a.clone()),
        Repr::Sim(_) => graph.add_constant(t.array("return")?),
        #[cfg(feature = "remote")]
        Repr::Remote(_) => graph.add_constant(t.array("return")?),
        Repr::Error(e) => return Err((**e).clone()),
    })
}
