//! The kernel IR verifier: every id in range, operands before users, dtypes
//! consistent, accesses of the domain's rank, `row N` naming an earlier
//! reduce stage. Fusion output and parsed text both pass through it in tests.

use super::{Expr, Kernel, KernelProgram, MatMul, ProgramOutput, Stage};
use crate::dtype::DType;
use crate::error::IrError;

fn bad(k: &Kernel, msg: String) -> IrError {
    IrError::Verify(format!("kernel `{}`: {msg}", k.name))
}

/// Checks a whole program.
pub fn verify_program(p: &KernelProgram) -> Result<(), IrError> {
    let nbuf = p.buffers.len() as u32;
    // An input buffer is one of the program's inputs, of its type.
    for (i, b) in p.buffers.iter().enumerate() {
        if let super::BufKind::Input(n) = b.kind {
            if p.inputs.get(n as usize) != Some(&b.ty) {
                return Err(IrError::Verify(format!(
                    "buffer b{i} is input {n} as {}, which the program's inputs do not have",
                    b.ty
                )));
            }
        }
    }
    for k in &p.kernels {
        verify_kernel(p, k, nbuf)?;
    }
    for o in &p.outputs {
        match *o {
            ProgramOutput::Buffer(b, ty) => {
                let decl = p.buffers.get(b.0 as usize).ok_or_else(|| {
                    IrError::Verify(format!("output names missing buffer b{}", b.0))
                })?;
                if decl.ty.dtype != ty.dtype || decl.ty.shape.numel() != ty.shape.numel() {
                    return Err(IrError::Verify(format!(
                        "output b{} as {ty} does not match {}",
                        b.0, decl.ty
                    )));
                }
            }
            ProgramOutput::Param(i, _) => {
                if i as usize >= p.params.len() {
                    return Err(IrError::Verify(format!("output names missing param {i}")));
                }
            }
        }
    }
    Ok(())
}

fn verify_kernel(p: &KernelProgram, k: &Kernel, nbuf: u32) -> Result<(), IrError> {
    if k.domain.is_empty() {
        return Err(bad(k, "empty domain".into()));
    }
    verify_accesses(p, k, nbuf)?;
    if let Some(m) = &k.matmul {
        verify_matmul(p, k, m, nbuf)?;
    }
    verify_exprs(p, k)?;
    verify_stages(p, k)
}

/// Checks every access names a buffer, has the domain's rank and stays
/// inside its buffer.
fn verify_accesses(p: &KernelProgram, k: &Kernel, nbuf: u32) -> Result<(), IrError> {
    let rank = k.domain.len();
    for (ai, a) in k.accesses().enumerate() {
        if a.buf.0 >= nbuf {
            return Err(bad(k, format!("access to missing buffer b{}", a.buf.0)));
        }
        if a.strides.len() != rank {
            return Err(bad(
                k,
                format!(
                    "access of b{} has {} strides for rank {rank}",
                    a.buf.0,
                    a.strides.len()
                ),
            ));
        }
        // The elements the access reaches must lie in its buffer (text can
        // say anything; fusion must never produce this).
        if !k.domain.contains(&0) {
            let gathered = if ai < k.loads.len() {
                k.gather_reach(ai)
            } else {
                0
            };
            let reach = k.domain.iter().zip(&a.strides).try_fold(
                i128::from(a.offset) + i128::from(gathered),
                |acc, (&d, &s)| (s >= 0).then(|| acc + (d as i128 - 1) * i128::from(s)),
            );
            let len = p.buffer(a.buf).ty.shape.numel() as i128;
            if a.offset < 0 || reach.is_none_or(|r| r >= len) {
                return Err(bad(
                    k,
                    format!(
                        "access of b{} with offset {} and strides {:?} leaves its {len} elements",
                        a.buf.0, a.offset, a.strides
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Checks a matmul names existing buffers whose sizes match its shape and
/// whose views stay inside them.
fn verify_matmul(p: &KernelProgram, k: &Kernel, m: &MatMul, nbuf: u32) -> Result<(), IrError> {
    for b in [m.a, m.b, m.out] {
        if b.0 >= nbuf {
            return Err(bad(k, format!("matmul names missing buffer b{}", b.0)));
        }
    }
    // Sizes come from text, so their products may overflow.
    let fits = |b: super::BufId, x: usize, y: usize| {
        let want = m.batch.checked_mul(x).and_then(|n| n.checked_mul(y));
        want.is_some() && p.buffer(b).ty.shape.checked_numel() == want
    };
    // A view's whole reach must lie inside its buffer.
    let view_fits = |b: super::BufId, v: Option<super::MatView>, x: usize, y: usize| match v {
        None => fits(b, x, y),
        Some(v) => p
            .buffer(b)
            .ty
            .shape
            .checked_numel()
            .is_some_and(|len| v.fits([m.batch, x, y], len)),
    };
    if m.im2col.is_some()
        && (m.a_view.is_some()
            || m.b_view
                .is_some_and(|v| v != super::MatView::conv_weights_transposed(m.k)))
    {
        return Err(bad(
            k,
            "a convolution's matmul reads no operand view but its weights transposed \
             (b_view=[0,0,1,k])"
                .into(),
        ));
    }
    if m.nchw && m.im2col.is_none() {
        return Err(bad(
            k,
            "only a convolution's matmul writes its product `nchw`".into(),
        ));
    }
    let operands_fit = match &m.im2col {
        None => view_fits(m.a, m.a_view, m.m, m.k) && view_fits(m.b, m.b_view, m.k, m.n),
        // The image is `[batch, c, h, w]`, the weights one `[k, n]`,
        // and the window's rows and columns are `m` and `k`.
        Some(ic) => {
            let windows = ic
                .window
                .out(ic.h, ic.w)
                .and_then(|(oh, ow)| oh.checked_mul(ow));
            let g = ic.window.groups as usize;
            let cols = (g > 0 && ic.c.is_multiple_of(g) && m.n.is_multiple_of(g))
                .then(|| (ic.c / g).checked_mul(ic.window.size()))
                .flatten();
            let image = ic.c.checked_mul(ic.h).and_then(|x| x.checked_mul(ic.w));
            windows == Some(m.m)
                && cols == Some(m.k)
                && image.is_some_and(|i| fits(m.a, i, 1))
                && m.k.checked_mul(m.n) == p.buffer(m.b).ty.shape.checked_numel()
        }
    };
    if !(operands_fit && fits(m.out, m.m, m.n)) {
        let shape = |b: super::BufId| format!("{:?}", p.buffer(b).ty.shape);
        return Err(bad(
            k,
            format!(
                "matmul sizes do not match its buffers: batch {} m {} k {} n {}, \
                 a {} (view {:?}), b {} (view {:?}), out {}",
                m.batch,
                m.m,
                m.k,
                m.n,
                shape(m.a),
                m.a_view,
                shape(m.b),
                m.b_view,
                shape(m.out)
            ),
        ));
    }
    Ok(())
}

/// Checks every expression comes after its operands and is well typed.
fn verify_exprs(p: &KernelProgram, k: &Kernel) -> Result<(), IrError> {
    let dt = |i: super::ExprId| k.exprs[i.0 as usize].dtype;
    for (i, e) in k.exprs.iter().enumerate() {
        for o in e.expr.operands() {
            if o.0 as usize >= i {
                return Err(bad(k, format!("%{i} uses %{} before it is defined", o.0)));
            }
        }
        let ok = match e.expr {
            Expr::Load(l) => k
                .loads
                .get(l as usize)
                .is_some_and(|a| p.buffer(a.buf).ty.dtype == e.dtype),
            Expr::Param(n) => (n as usize) < p.params.len(),
            Expr::Lit(l) => l.fits(e.dtype),
            Expr::Unary(_, a) => dt(a) == e.dtype,
            Expr::Binary(_, a, b) => dt(a) == e.dtype && dt(b) == e.dtype,
            Expr::Compare(_, a, b) => dt(a) == dt(b) && e.dtype == DType::Bool,
            Expr::Select(c, a, b) => dt(c) == DType::Bool && dt(a) == e.dtype && dt(b) == e.dtype,
            Expr::Cast(_) => true,
            Expr::Bitcast(a) => crate::interp::bitcast_pair(dt(a), e.dtype),
            Expr::Gather {
                load,
                index,
                stride,
                len,
            } => {
                k.loads
                    .get(load as usize)
                    .is_some_and(|a| p.buffer(a.buf).ty.dtype == e.dtype)
                    && matches!(dt(index), DType::I32 | DType::I64)
                    && stride >= 0
                    && len >= 0
            }
            Expr::Row(s) => {
                matches!(k.stages.get(s as usize), Some(Stage::Reduce { value, .. })
                    if k.exprs.get(value.0 as usize).is_some_and(|v| v.dtype == e.dtype))
            }
        };
        if !ok {
            return Err(bad(k, format!("%{i} is ill-typed or out of range")));
        }
    }
    Ok(())
}

/// Checks stages and scratch rows name existing expressions and stores
/// match their buffer's dtype.
fn verify_stages(p: &KernelProgram, k: &Kernel) -> Result<(), IrError> {
    let dt = |i: super::ExprId| k.exprs[i.0 as usize].dtype;
    for s in &k.stages {
        let v = match s {
            Stage::Reduce { value, .. } | Stage::Store { value, .. } => *value,
        };
        if v.0 as usize >= k.exprs.len() {
            return Err(bad(k, format!("stage uses missing %{}", v.0)));
        }
        if let Stage::Store { access, value } = s {
            if p.buffer(access.buf).ty.dtype != dt(*value) {
                return Err(bad(
                    k,
                    format!("store of a {} into b{}", dt(*value), access.buf.0),
                ));
            }
        }
    }
    for s in &k.scratch {
        if s.0 as usize >= k.exprs.len() {
            return Err(bad(k, format!("scratch names missing %{}", s.0)));
        }
    }
    Ok(())
}
