//! The short way through a one-kernel program: planned once at compile
//! time ([`Tiny::plan`]) and run on the calling thread with inputs lent
//! straight from the arrays and one fresh output, skipping the general
//! loop's slots and output list.

use super::run::kernel_error;
use super::store::{buffer_arg, store_arg, try_output_store};
use super::{HostProgram, PARALLEL_MIN};
use crate::error::RuntimeError;
use crate::kernel_cache::CachedKernel;
use smallvec::SmallVec;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tilejit_codegen::host::{storage_bytes, BufArg, CheckedArgs};
use tilejit_ir::kernel::{BufKind, KernelProgram, ProgramOutput};
use tilejit_ir::{interp, Array, DType, IrError};

/// How a one-kernel program runs without the general loop: on the calling
/// thread, its arguments checked once at compile time, inputs lent straight
/// from the arrays, one fresh output. Why: a warm `x + y` on 16 elements
/// (W6) spent most of its time in the general path's slots, output list
/// and per-kernel branches, not in the kernel.
#[derive(Debug)]
pub(super) struct Tiny {
    /// Per kernel-local buffer, the input it is (`None`: the output).
    locals: SmallVec<[Option<u32>; 4]>,
    /// Where the output sits among the locals.
    out_at: usize,
    /// The kernel's launch units, and the output's element count.
    units: usize,
    numel: usize,
    /// The output buffer's dtype.
    out_dtype: DType,
    /// The shape the program returns it as (a reshape is free).
    ret: tilejit_ir::Shape,
}

impl Tiny {
    /// The plan for `prog`, if it is one small kernel that reads only
    /// inputs (no halves, which convert) and writes the one output.
    pub(super) fn plan(
        prog: &KernelProgram,
        code: &[Arc<CachedKernel>],
        fixed_args: &[Option<CheckedArgs>],
        idle: &[bool],
    ) -> Option<Tiny> {
        let ([k], [code], [Some(_)], [false]) = (&prog.kernels[..], code, fixed_args, idle) else {
            return None;
        };
        let [ProgramOutput::Buffer(out, ret)] = prog.outputs[..] else {
            return None;
        };
        let half = |d: DType| matches!(d, DType::F16 | DType::BF16);
        let decl = prog.buffer(out);
        let small = k.domain.iter().product::<usize>() < PARALLEL_MIN;
        if k.matmul.is_some()
            || code.code.layout().scratch != 0
            || !prog.params.is_empty()
            || !small
            || !matches!(decl.kind, BufKind::Temp)
            || half(decl.ty.dtype)
            || prog.inputs.iter().any(|t| half(t.dtype))
        {
            return None;
        }
        let mut locals = SmallVec::new();
        let mut out_at = None;
        for b in k.local_buffers() {
            match prog.buffer(b).kind {
                BufKind::Input(i) if (i as usize) < prog.inputs.len() => locals.push(Some(i)),
                BufKind::Temp if b == out => {
                    out_at = Some(locals.len());
                    locals.push(None);
                }
                _ => return None,
            }
        }
        Some(Tiny {
            locals,
            out_at: out_at?,
            units: k.units(),
            numel: decl.ty.shape.numel(),
            out_dtype: decl.ty.dtype,
            ret: ret.shape,
        })
    }
}

impl HostProgram {
    /// Runs a program of one small kernel and one output on concrete
    /// inputs (it takes no params) the short way: `None` when the program
    /// is not such a one, or when kernel observers or stop limits are
    /// active (they need the general path), else what
    /// [`HostProgram::run`] would return, as one array.
    #[inline]
    pub fn run_one(&self, inputs: &[&Array]) -> Option<Result<Array, Box<RuntimeError>>> {
        let t = self.tiny.as_ref()?;
        if crate::hooks::any() || crate::cancel::any() {
            return None;
        }
        Some(self.run_tiny(t, inputs))
    }

    /// The short way (see [`run_one`](Self::run_one)). Its rare errors are
    /// boxed and built out of line: a `Result` with a 176-byte error inline
    /// was copied whole (`memcpy`) between calls on every success.
    fn run_tiny(&self, t: &Tiny, inputs: &[&Array]) -> Result<Array, Box<RuntimeError>> {
        let want = &self.prog.inputs;
        if inputs.len() != want.len() || !inputs.iter().zip(want).all(|(a, w)| a.has_type(w)) {
            if let Err(e) = interp::check_arguments(want, 0, inputs, &[]) {
                return Err(Box::new(e.into()));
            }
        }
        let code = &self.code[0];
        let Some(fixed) = self.fixed_args[0].as_ref() else {
            return Err(tiny_error(IrError::Verify(
                "a tiny plan without checked args".into(),
            )));
        };
        let Some(mut out) = try_output_store(t.out_dtype, t.numel) else {
            return Err(tiny_error(IrError::OutOfMemory {
                bytes: t.numel.saturating_mul(storage_bytes(t.out_dtype)),
            }));
        };
        {
            let mut bufs: SmallVec<[BufArg<'_>; 8]> = SmallVec::new();
            for l in &t.locals {
                bufs.push(match l {
                    // `Tiny::plan` kept indices below the program's input
                    // count, which `inputs` was checked to have above.
                    Some(i) => buffer_arg(inputs[*i as usize].buffer()),
                    None => BufArg::empty(),
                });
            }
            bufs[t.out_at] = store_arg(&mut out);
            code.launches.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = code.code.call_checked(&mut bufs, fixed, 0, t.units) {
                return Err(Box::new(kernel_error(e.into(), None)));
            }
        }
        // `Tiny::plan` takes no halves: the storage is the output's buffer.
        match Array::from_exact(t.ret, out.into_buffer()) {
            Ok(a) => Ok(a),
            Err(e) => Err(tiny_error(*e)),
        }
    }
}

/// A short-path error, boxed (cold: built only when a call fails).
#[cold]
fn tiny_error(e: IrError) -> Box<RuntimeError> {
    Box::new(e.into())
}
