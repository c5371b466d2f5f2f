//! The checks [`compile`](super::compile) runs on a kernel before it
//! generates code for it. A `Kernel` is plain public data and `dtype_of` a
//! caller's function, so neither is trusted: the code's access sizes come
//! from the expressions' dtypes and the bounds check's from the buffers',
//! and they must agree, or a call would read or write past the storage it
//! checked. The rules are the kernel IR verifier's
//! (`tilejit_ir::kernel::verify_program`) without the program: every id in
//! range, operands before users, each expression's dtype what its operands
//! and its buffer give, accesses of the domain's rank, gathers that only
//! move forward.

use crate::CodegenError;
use tilejit_ir::kernel::{Expr, ExprId, Kernel, Stage};
use tilejit_ir::DType;

/// The most params a kernel may read.
const MAX_PARAMS: u32 = 1 << 16;

/// Checks `k` against `dtypes`, the dtype of each of its local buffers
/// ([`Kernel::local_buffers`] order): a kernel that fails is
/// [`CodegenError::Invalid`], never code.
pub(crate) fn verify(k: &Kernel, dtypes: &[DType]) -> Result<(), CodegenError> {
    check(k, dtypes).map_err(|what| CodegenError::Invalid {
        kernel: k.name.clone(),
        what,
    })
}

fn check(k: &Kernel, dtypes: &[DType]) -> Result<(), String> {
    let rank = k.domain.len();
    if !(1..=8).contains(&rank) {
        return Err(format!("a domain of rank {rank} (1 to 8 allowed)"));
    }
    let buffers = k.local_buffers();
    if buffers.len() != dtypes.len() {
        return Err(format!(
            "{} buffer dtypes for {} buffers",
            dtypes.len(),
            buffers.len()
        ));
    }
    let buf_dtype = |b| buffers.iter().position(|&x| x == b).map(|i| dtypes[i]);
    for (i, a) in k.accesses().enumerate() {
        if a.strides.len() != rank {
            return Err(format!(
                "access {i} has {} strides for rank {rank}",
                a.strides.len()
            ));
        }
    }
    let n = k.exprs.len();
    let dt = |e: ExprId| k.exprs[e.0 as usize].dtype;
    let load_dtype = |l: u32| k.loads.get(l as usize).and_then(|a| buf_dtype(a.buf));
    for (i, e) in k.exprs.iter().enumerate() {
        for o in e.expr.operands() {
            if o.0 as usize >= i {
                return Err(format!("%{i} uses %{} before it is defined", o.0));
            }
        }
        let d = e.dtype;
        let ok = match e.expr {
            Expr::Load(l) => load_dtype(l) == Some(d),
            // Each param up to the highest has an args slot (and a value
            // in the lowering): no absurd counts.
            Expr::Param(p) => p < MAX_PARAMS,
            Expr::Lit(l) => l.fits(d),
            Expr::Unary(_, a) => dt(a) == d,
            Expr::Binary(_, a, b) => dt(a) == d && dt(b) == d,
            Expr::Compare(_, a, b) => dt(a) == dt(b) && d == DType::Bool,
            Expr::Select(c, a, b) => dt(c) == DType::Bool && dt(a) == d && dt(b) == d,
            Expr::Bitcast(a) => {
                matches!(
                    (dt(a), d),
                    (DType::F32, DType::I32 | DType::U32)
                        | (DType::I32 | DType::U32, DType::F32)
                        | (DType::F64, DType::I64 | DType::U64)
                        | (DType::I64 | DType::U64, DType::F64)
                )
            }
            Expr::Cast(_) => true,
            Expr::Row(s) => matches!(
                k.stages.get(s as usize),
                Some(Stage::Reduce { value, .. }) if value.0 as usize >= n || dt(*value) == d
            ),
            Expr::Gather {
                load,
                index,
                stride,
                len,
            } => {
                load_dtype(load) == Some(d)
                    && matches!(dt(index), DType::I32 | DType::I64)
                    && stride >= 0
                    && len >= 0
                    // The code moves `index * stride` elements of up to 8
                    // bytes: that constant must not overflow.
                    && stride <= i64::MAX / 8
            }
        };
        if !ok {
            return Err(format!(
                "%{i} ({:?} as {d}) is ill-typed or out of range",
                e.expr
            ));
        }
    }
    for (i, s) in k.stages.iter().enumerate() {
        let value = match s {
            Stage::Reduce { value, .. } | Stage::Store { value, .. } => *value,
        };
        if value.0 as usize >= n {
            return Err(format!("stage {i} uses missing %{}", value.0));
        }
        if let Stage::Store { access, .. } = s {
            let have = buf_dtype(access.buf);
            if have != Some(dt(value)) {
                return Err(format!(
                    "stage {i} stores a {} into a buffer of {}",
                    dt(value),
                    have.map_or("?".into(), |d| d.to_string())
                ));
            }
        }
    }
    for s in &k.scratch {
        if s.0 as usize >= n {
            return Err(format!("scratch names missing %{}", s.0));
        }
    }
    Ok(())
}
