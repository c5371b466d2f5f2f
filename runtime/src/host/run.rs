//! The general run loop: arguments checked and slotted, each kernel
//! launched in order (over the rayon pool when big enough), observed by
//! kernel hooks or placed on the Sim device when asked, and the outputs
//! taken as arrays.

use super::read_ahead::ReadAhead;
use super::store::{output_store, recycle, slot_for, take_owned, to_buffer, Slot};
use super::{HostProgram, PARALLEL_MIN};
use crate::error::RuntimeError;
use crate::hooks::{KernelRun, Place};
use crate::kernel_cache::CachedKernel;
use crate::placed::Mixed;
use smallvec::SmallVec;
use std::borrow::Borrow;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tilejit_codegen::host::{BufArg, CheckedArgs, KernelArgs};
use tilejit_codegen::CodegenError;
use tilejit_ir::kernel::{BufKind, Kernel, ProgramOutput};
use tilejit_ir::{interp, Array, Buffer, DType, IrError, Lit};

impl HostProgram {
    /// Runs on concrete inputs (arrays or references to them) and param
    /// values (checked first).
    ///
    /// A program of several parallel kernels, called from outside the
    /// rayon pool, runs on a pool thread: each of its parallel launches
    /// then starts on a running thread instead of waking the pool and
    /// putting the caller to sleep (two thread wake-ups per launch, 20-30
    /// µs each, about 1.5 ms of a GPT-2 decode step's 73 launches). The
    /// caller's cancel limits and kernel observers go with it.
    pub fn run<A: Borrow<Array> + Sync>(
        &self,
        inputs: &[A],
        params: &[Lit],
    ) -> Result<Vec<Array>, RuntimeError> {
        let hooks = crate::hooks::active();
        let limits = crate::cancel::current();
        if self.on_pool && rayon::current_thread_index().is_none() {
            return rayon::scope(|_| {
                let _awake = super::awake::Awake::start();
                crate::cancel::with_limits(limits.clone(), || {
                    self.run_observed(inputs, params, None, hooks, &limits, true)
                })
            });
        }
        self.run_observed(inputs, params, None, hooks, &limits, false)
    }

    /// [`HostProgram::run`] on this thread, with some kernels placed on the
    /// Sim device when `mixed` says so.
    pub(crate) fn run_with<A: Borrow<Array>>(
        &self,
        inputs: &[A],
        params: &[Lit],
        mixed: Option<&mut Mixed<'_>>,
    ) -> Result<Vec<Array>, RuntimeError> {
        let limits = crate::cancel::current();
        self.run_observed(
            inputs,
            params,
            mixed,
            crate::hooks::active(),
            &limits,
            false,
        )
    }

    /// The run loop, with the caller's observers and limits; `spinners`
    /// when this run started the pool's spinners (`awake`), which can then
    /// take a read-ahead while this thread runs serial kernels.
    fn run_observed<A: Borrow<Array>>(
        &self,
        inputs: &[A],
        params: &[Lit],
        mut mixed: Option<&mut Mixed<'_>>,
        hooks: Option<crate::hooks::Observers>,
        limits: &crate::cancel::Limits,
        spinners: bool,
    ) -> Result<Vec<Array>, RuntimeError> {
        let p = &self.prog;
        interp::check_arguments(&p.inputs, p.params.len(), inputs, params)?;
        // On the stack for the usual handful of buffers: a heap vector per
        // call is a measurable share of a small call's dispatch cost.
        // (`new`, not `with_capacity`: that one is built aside and copied in.)
        let mut slots: SmallVec<[Slot<'_>; 8]> = SmallVec::new();
        for b in &p.buffers {
            let array = match b.kind {
                BufKind::Input(i) => inputs
                    .get(i as usize)
                    .ok_or_else(|| IrError::Arguments(format!("missing input {i}")))?
                    .borrow(),
                BufKind::Constant(c) => self
                    .constants
                    .get(c as usize)
                    .ok_or_else(|| IrError::Verify(format!("missing constant {c}")))?,
                BufKind::Temp => {
                    slots.push(Slot::Owned(output_store(b.ty.dtype, b.ty.shape.numel())?));
                    continue;
                }
            };
            // Only halves are converted: the common slot is built without
            // a `Result` (176 bytes with an `IrError`) in between.
            slots.push(match array.buffer() {
                Buffer::F16(_) | Buffer::BF16(_) => slot_for(array)?,
                _ => Slot::Borrowed(array),
            });
        }
        // What may stop this run: usually nothing, and then no check costs.
        let stop_check = || limits.stopped().is_some();
        let stop: Option<&(dyn Fn() -> bool + Sync)> = (!limits.is_none()).then_some(&stop_check);
        // Only this run's own spinners take a read-ahead at once; in a
        // caller's pool nothing might take it until the caller's work ends.
        let reads_ahead = spinners && mixed.is_none();
        let mut ahead: Option<ReadAhead> = None;
        for (i, k) in p.kernels.iter().enumerate() {
            if self.idle[i] {
                continue;
            }
            if reads_ahead {
                if self.parallel[i] {
                    // The launch needs every worker: the read-ahead stops.
                    ahead = None;
                } else if let Some(Slot::Borrowed(w)) = self.ahead[i].map(|b| &slots[b.0 as usize])
                {
                    ahead = Some(ReadAhead::start(w));
                }
            }
            if stop.is_some() {
                limits.check(&format!("kernel `{}`", k.name))?;
            }
            let on_sim = mixed.as_ref().is_some_and(|m| m.on_sim(i));
            let Some(h) = &hooks else {
                match mixed.as_deref_mut() {
                    None => self.run_kernel(i, &mut slots, params, limits, stop)?,
                    Some(m) => m.run_kernel(self, i, &mut slots, params, limits, stop)?,
                }
                continue;
            };
            // Observed: the kernel's values are read on the host (copied
            // only for an observer that reads them).
            let values = h.reads_values();
            if let (Some(m), true) = (mixed.as_deref_mut(), values) {
                m.pull_to_host(self, &k.read_buffers(), &mut slots)?;
            }
            let inputs = match values {
                true => self.slot_arrays(&slots, &k.read_buffers())?,
                false => Vec::new(),
            };
            let mut event = KernelRun {
                program: &self.name,
                run: h.run,
                index: i,
                name: &k.name,
                place: if on_sim { Place::Sim } else { Place::Host },
                inputs: &inputs,
                outputs: &[],
                elapsed: None,
            };
            h.before(&event);
            let start = Instant::now();
            match mixed.as_deref_mut() {
                None => self.run_kernel(i, &mut slots, params, limits, stop)?,
                Some(m) => {
                    m.run_kernel(self, i, &mut slots, params, limits, stop)?;
                    if values {
                        m.pull_to_host(self, &k.stored_buffers(), &mut slots)?;
                    }
                }
            }
            let elapsed = start.elapsed();
            let outputs = match values {
                true => self.slot_arrays(&slots, &k.stored_buffers())?,
                false => Vec::new(),
            };
            event.outputs = &outputs;
            event.elapsed = Some(elapsed);
            h.after(&event);
        }
        drop(ahead);
        if let Some(m) = mixed {
            m.outputs_to_host(self, &mut slots)?;
        }
        // Buffers already turned into arrays, for outputs that repeat one
        // (recorded only when a later output could ask: usually never).
        let mut done: Vec<(usize, Array)> = Vec::new();
        let mut outs = Vec::with_capacity(p.outputs.len());
        for (oi, o) in p.outputs.iter().enumerate() {
            outs.push(match *o {
                ProgramOutput::Param(i, d) => param_output(params, i, d)?,
                ProgramOutput::Buffer(b, ty) => {
                    let bi = b.0 as usize;
                    let seen = done.iter().find(|(b, _)| *b == bi).map(|(_, a)| a.clone());
                    let arr = match (&p.buffers[bi].kind, seen) {
                        (_, Some(a)) => a,
                        (BufKind::Input(i), _) => inputs[*i as usize].borrow().clone(),
                        (BufKind::Constant(c), _) => self.constants[*c as usize].clone(),
                        (BufKind::Temp, None) => {
                            let store = take_owned(&mut slots[bi])?;
                            let decl = p.buffers[bi].ty;
                            let a = Array::new(decl.shape, to_buffer(store, decl.dtype)?)?;
                            if oi + 1 < p.outputs.len() {
                                done.push((bi, a.clone()));
                            }
                            a
                        }
                    };
                    if *arr.shape() == ty.shape {
                        arr
                    } else {
                        arr.reshaped(ty.shape)?
                    }
                }
            });
        }
        // Drained, not moved: moving the SmallVec is a 256-byte memcpy.
        recycle(slots.drain(..));
        Ok(outs)
    }

    /// Runs kernel `i` over `slots`.
    #[inline(always)]
    pub(crate) fn run_kernel(
        &self,
        i: usize,
        slots: &mut [Slot<'_>],
        params: &[Lit],
        limits: &crate::cancel::Limits,
        stop: Option<&(dyn Fn() -> bool + Sync)>,
    ) -> Result<(), RuntimeError> {
        let (k, code, locals) = (&self.prog.kernels[i], &self.code[i], &self.locals[i]);
        let fixed = self.fixed_args[i].as_ref();
        self.run_parts(k, code, locals, fixed, slots, params, limits, stop)
    }

    /// Runs kernel `k` (its code, buffers and checked arguments) over
    /// `slots`. Inlined: as a call of its own it cost W6 about 40
    /// instructions per call (callgrind).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn run_parts(
        &self,
        k: &Kernel,
        code: &CachedKernel,
        locals: &[tilejit_ir::kernel::BufId],
        fixed: Option<&CheckedArgs>,
        slots: &mut [Slot<'_>],
        params: &[Lit],
        limits: &crate::cancel::Limits,
        stop: Option<&(dyn Fn() -> bool + Sync)>,
    ) -> Result<(), RuntimeError> {
        if let Some(mm) = &k.matmul {
            if self.run_row_tiled(k, code, locals, slots, mm, params)?
                || self.run_conv_tiled(k, code, locals, slots, mm, params)?
            {
                return Ok(());
            }
            self.matmul(slots, mm, self.prog.buffers[mm.out.0 as usize].ty.dtype)?;
        }
        let per_call;
        let args = match fixed {
            Some(a) => KernelArgs::Checked(a),
            None => {
                per_call = code.code.layout().args(k, params);
                KernelArgs::Raw(&per_call)
            }
        };
        launch(k, code, locals, slots, args, stop).map_err(|e| kernel_error(e, Some(limits)))
    }

    /// Copies of the buffers `ids` as arrays of their declared types (for
    /// kernel observers and copies to the device).
    pub(crate) fn slot_arrays(
        &self,
        slots: &[Slot<'_>],
        ids: &[tilejit_ir::kernel::BufId],
    ) -> Result<Vec<Array>, RuntimeError> {
        ids.iter()
            .map(|b| {
                let ty = self.prog.buffers[b.0 as usize].ty;
                let data = match &slots[b.0 as usize] {
                    Slot::Borrowed(a) => a.buffer().clone(),
                    Slot::Owned(store) => to_buffer(store.try_clone()?, ty.dtype)?,
                };
                Ok(Array::new(ty.shape, data)?)
            })
            .collect()
    }
}

/// The kernel arguments of `locals`, in that order (storage the program
/// owns writable, arguments read-only).
fn kernel_bufs<'s>(
    slots: &'s mut [Slot<'_>],
    locals: &[tilejit_ir::kernel::BufId],
    bufs: &mut SmallVec<[BufArg<'s>; 8]>,
) {
    // Filled in place: a returned SmallVec is a memcpy per kernel, a
    // measurable share of a tiny call.
    bufs.clear();
    bufs.extend(locals.iter().map(|_| BufArg::empty()));
    for (i, slot) in slots.iter_mut().enumerate() {
        if let Some(at) = locals.iter().position(|b| b.0 as usize == i) {
            bufs[at] = slot.arg();
        }
    }
}

/// A failed launch as the user sees it: a stop says which limit stopped
/// it; a gather's index outside its axis is the data's fault (E1), not
/// the kernel's.
pub(super) fn kernel_error(
    e: RuntimeError,
    limits: Option<&crate::cancel::Limits>,
) -> RuntimeError {
    match e {
        RuntimeError::Codegen(CodegenError::Stopped { kernel }) => {
            match limits.map(|l| l.check(&format!("kernel `{kernel}`"))) {
                Some(Err(stopped)) => stopped,
                _ => RuntimeError::Stopped {
                    what: format!("kernel `{kernel}`"),
                    why: "was stopped".into(),
                },
            }
        }
        RuntimeError::Codegen(CodegenError::IndexOutOfRange { len, .. }) => {
            IrError::IndexOutOfRange {
                op: "gather",
                index: None,
                len: len.max(0) as usize,
            }
            .into()
        }
        e => e,
    }
}

/// Runs one kernel over its whole domain: in chunks over the rayon pool,
/// or on the calling thread when it is small.
fn launch(
    k: &Kernel,
    code: &CachedKernel,
    locals: &[tilejit_ir::kernel::BufId],
    slots: &mut [Slot<'_>],
    args: KernelArgs<'_>,
    stop: Option<&(dyn Fn() -> bool + Sync)>,
) -> Result<(), RuntimeError> {
    let units = k.units();
    code.launches.fetch_add(1, Ordering::Relaxed);
    if units == 0 {
        return Ok(());
    }
    let mut bufs = SmallVec::new();
    kernel_bufs(slots, locals, &mut bufs);
    let work: usize = k.domain.iter().product();
    // Small kernels stay on this thread (and never ask rayon anything).
    let threads = if work < PARALLEL_MIN || units < 2 {
        1
    } else {
        rayon::current_num_threads()
    };
    let chunk = if threads < 2 {
        units
    } else {
        let size = units.div_ceil((threads * 4).min(units));
        if k.is_flat() {
            size.div_ceil(16) * 16
        } else {
            size
        }
    };
    Ok(code.code.launch(&mut bufs, args, units, chunk, stop)?)
}

/// A program output that is one of its params, as a rank-0 array of `d`.
pub(crate) fn param_output(params: &[Lit], i: u32, d: DType) -> Result<Array, IrError> {
    let lit = params.get(i as usize).copied().unwrap_or(Lit::Int(0));
    let lit = match lit {
        Lit::Float(f) => Lit::from_f64(f, d),
        other => Lit::from_i64(other.as_i64(), d),
    };
    Array::full(tilejit_ir::TensorType::scalar(d), lit)
}
