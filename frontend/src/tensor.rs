//! `Tensor`: the user's value. A tensor is one of
//! - concrete: a row-major `Array` on the host, shared by `Arc`;
//! - traced: a node of the graph being recorded by a jit trace (shape and
//!   dtype known, values not);
//! - an error: the first error of the computation that produced it.
//!
//! Operator forms (`a + b`) cannot return `Result`, so a failing op yields
//! an error tensor, every later op passes the error through unchanged, and
//! any read (`to_vec`, `item`, a jit call's result) returns it: the message
//! is never lost. `try_*` methods and [`Tensor::check`] return `Result`
//! directly. An error tensor reports shape `[]` and dtype `f32`; use
//! [`Tensor::error`] to tell it apart.

use crate::error::{Error, Loc, Result};
use crate::random;
use crate::trace;
use std::sync::Arc;
use tilejit_ir::{Array, DType, Element, IrError, Lit, NodeId, Shape, TensorType};

/// An n-dimensional array of one dtype. Cheap to clone; `Send + Sync`.
///
/// ```
/// use tilejit::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.0, -4.0], &[2, 2])?;
/// let y = (&x * 2.0).relu().sum(-1, false);        // eager ops: numpy semantics
/// assert_eq!(y.to_vec::<f32>()?, [2.0, 6.0]);
/// // A failing op gives an error tensor; the read returns the error.
/// let bad = &x + &Tensor::zeros(&[3], DType::F32);
/// let message = bad.to_vec::<f32>().unwrap_err().to_string();
/// assert!(message.contains("shapes [2,2] and [3] do not broadcast"), "{message}");
/// # Ok::<(), tilejit::Error>(())
/// ```
#[derive(Clone)]
pub struct Tensor {
    pub(crate) repr: Repr,
    /// A weakly typed scalar (a jit function's float parameter) adopts the
    /// dtype of the tensor it meets, like a Rust literal would (JAX's "weak
    /// types").
    pub(crate) weak: bool,
}

/// A word-sized tag keeps every payload 8-aligned: with a 4-byte tag (a
/// `NodeId` packed beside it) a tensor was copied from offset 4, each
/// 16-byte load straddling two earlier stores, a stall per load (W6).
#[derive(Clone)]
#[repr(u64)]
pub(crate) enum Repr {
    Concrete(Array),
    Traced {
        trace: u64,
        node: NodeId,
        ty: TensorType,
    },
    Error(Arc<Error>),
    /// Concrete, in the simulated device's memory.
    Sim(tilejit_runtime::DeviceArray),
    /// Concrete, held by a remote server's session.
    #[cfg(feature = "remote")]
    Remote(std::sync::Arc<crate::remote::RemoteTensor>),
}

impl Tensor {
    pub(crate) fn concrete(a: Array) -> Tensor {
        // The first tensor starts warming the compiler on a pool thread,
        // so the first jit call or eager op (usually after the program has
        // made its inputs) finds Cranelift warmer; later calls are one
        // atomic load.
        tilejit_runtime::warm_up();
        Tensor {
            repr: Repr::Concrete(a),
            weak: false,
        }
    }

    pub(crate) fn from_error(e: Error) -> Tensor {
        Tensor {
            repr: Repr::Error(Arc::new(e)),
            weak: false,
        }
    }

    pub(crate) fn shared_error(e: &Arc<Error>) -> Tensor {
        Tensor {
            repr: Repr::Error(e.clone()),
            weak: false,
        }
    }

    /// A tensor from an IR result, or the error naming `op` and `loc`.
    pub(crate) fn from_ir(
        r: std::result::Result<Array, IrError>,
        op: &'static str,
        location: Loc,
    ) -> Tensor {
        match r {
            Ok(a) => Tensor::concrete(a),
            Err(source) => Tensor::from_error(Error::Op {
                op,
                source,
                location,
            }),
        }
    }

    /// Makes a tensor from a vector and a shape; the length must equal the
    /// shape's element count.
    #[track_caller]
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        let location = Loc::caller();
        Array::from_vec(data, shape)
            .map(Tensor::concrete)
            .map_err(|source| Error::Op {
                op: "from_vec",
                source,
                location,
            })
    }

    /// A tensor of `shape` filled with `value` converted to `dtype` as a
    /// cast converts it (into an integer dtype: truncated and saturated,
    /// so `300.0` gives 255 in u8, where numpy's `full` raises).
    #[track_caller]
    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Tensor {
        let location = Loc::caller();
        let r = Shape::new(shape).and_then(|s| {
            let n = s.byte_size(dtype).map(|_| s.numel())?;
            let data = tilejit_runtime::filled_buffer(dtype, n, Lit::from_f64(value, dtype))?;
            Array::new(s, data)
        });
        Tensor::from_ir(r, "full", location)
    }

    /// A tensor of zeros.
    #[track_caller]
    pub fn zeros(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::full(shape, 0.0, dtype)
    }

    /// A tensor of ones.
    #[track_caller]
    pub fn ones(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::full(shape, 1.0, dtype)
    }

    /// A rank-0 tensor.
    #[track_caller]
    pub fn scalar(value: f64, dtype: DType) -> Tensor {
        Tensor::full(&[], value, dtype)
    }

    /// `[0, 1, ..., n-1]` as `dtype` (wrapping past an integer dtype's
    /// range, as numpy's: u8 255 is followed by 0).
    #[track_caller]
    pub fn arange(n: usize, dtype: DType) -> Tensor {
        let location = Loc::caller();
        let r = Shape::new(&[n]).and_then(|s| {
            s.byte_size(dtype)?;
            let lits = (0..n).map(|i| Lit::from_i64(i as i64, dtype));
            Array::new(s, tilejit_ir::Buffer::from_lits(dtype, lits)?)
        });
        Tensor::from_ir(r, "arange", location)
    }

    /// `start, start + delta, ...` up to `limit` (exclusive) as `dtype`,
    /// ONNX `Range` and numpy `arange(start, limit, delta)`: the count is
    /// `max(ceil((limit - start) / delta), 0)` and element `i` is
    /// `start + i * delta`, computed in i64 for integer dtypes (wrapping
    /// past the dtype's range, as [`Tensor::arange`]) and
    /// in f64, rounded once, for floats. `delta = 0`, a non-finite bound,
    /// or (integer dtypes) a `start` or `delta` that is not a whole number
    /// in the dtype's range is a `BadArgument` error.
    ///
    /// ```
    /// # use tilejit::{DType, Tensor};
    /// let r = Tensor::range(10.0, 4.0, -3.0, DType::I32);
    /// assert_eq!(r.to_vec::<i32>()?, vec![10, 7]);
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    #[track_caller]
    pub fn range(start: f64, limit: f64, delta: f64, dtype: DType) -> Tensor {
        let location = Loc::caller();
        let bad = |why: String| {
            IrError::Arguments(format!(
                "range({start}, {limit}, {delta}) as {dtype}: {why}"
            ))
        };
        let r = (|| {
            if delta == 0.0 || !(start.is_finite() && limit.is_finite() && delta.is_finite()) {
                return Err(bad("delta must be nonzero and every value finite".into()));
            }
            if dtype == DType::Bool {
                return Err(bad("bool has no range".into()));
            }
            let count = ((limit - start) / delta).ceil().max(0.0);
            if count > u32::MAX as f64 {
                return Err(bad(format!("{count} elements")));
            }
            let n = count as usize;
            let s = Shape::new(&[n])?;
            s.byte_size(dtype)?;
            let lits: Vec<Lit> = if dtype.is_int() {
                let whole = |v: f64| {
                    let i = v as i64;
                    (v.fract() == 0.0 && i as f64 == v && dtype.wrap_int(i) == i).then_some(i)
                };
                let (Some(a), Some(d)) = (whole(start), whole(delta)) else {
                    return Err(bad("start and delta must be whole numbers in range".into()));
                };
                (0..n as i64)
                    .map(|i| Lit::from_i64(a.wrapping_add(i.wrapping_mul(d)), dtype))
                    .collect()
            } else {
                (0..n)
                    .map(|i| Lit::from_f64(start + i as f64 * delta, dtype))
                    .collect()
            };
            Array::new(s, tilejit_ir::Buffer::from_lits(dtype, lits.into_iter())?)
        })();
        Tensor::from_ir(r, "range", location)
    }

    /// f32 values uniform in `[0, 1)`, deterministic for a seed.
    #[track_caller]
    pub fn rand(shape: &[usize], seed: u64) -> Tensor {
        let location = Loc::caller();
        Tensor::from_ir(random::uniform(shape, seed), "rand", location)
    }

    /// f32 values from the standard normal distribution, deterministic for a seed.
    #[track_caller]
    pub fn randn(shape: &[usize], seed: u64) -> Tensor {
        let location = Loc::caller();
        Tensor::from_ir(random::normal(shape, seed), "randn", location)
    }

    /// The type, or `None` for an error tensor.
    pub(crate) fn ty(&self) -> Option<TensorType> {
        match &self.repr {
            Repr::Concrete(a) => Some(a.ty()),
            Repr::Sim(d) => Some(d.ty()),
            #[cfg(feature = "remote")]
            Repr::Remote(r) => Some(r.ty),
            Repr::Traced { ty, .. } => Some(*ty),
            Repr::Error(_) => None,
        }
    }

    /// The shape (`[]` for an error tensor). In a dynamic function's body
    /// reading it costs a check when a shape class is first traced (see
    /// [`JitFunction::make_dynamic`](crate::JitFunction::make_dynamic)).
    #[track_caller]
    pub fn shape(&self) -> &[usize] {
        match &self.repr {
            Repr::Concrete(a) => a.shape().dims(),
            Repr::Sim(d) => d.shape().dims(),
            #[cfg(feature = "remote")]
            Repr::Remote(r) => r.ty.shape.dims(),
            Repr::Traced { ty, trace, .. } => {
                trace::note_size_read(*trace, "shape", ty.shape.dims(), Some(Loc::caller()));
                ty.shape.dims()
            }
            Repr::Error(_) => &[],
        }
    }

    /// The dtype (`f32` for an error tensor).
    pub fn dtype(&self) -> DType {
        self.ty().map_or(DType::F32, |t| t.dtype)
    }

    /// Number of elements (a size read, as [`shape`](Self::shape) is).
    #[track_caller]
    pub fn numel(&self) -> usize {
        if let Repr::Traced { trace, ty, .. } = &self.repr {
            trace::note_size_read(*trace, "numel", ty.shape.dims(), Some(Loc::caller()));
        }
        self.ty().map_or(0, |t| t.shape.numel())
    }

    /// The size of dim `axis` (negative counts from the end). In a dynamic
    /// function's body it reads that one size, so only its symbol becomes
    /// a guard, where [`shape`](Self::shape) reads them all (see
    /// [`JitFunction::make_dynamic`](crate::JitFunction::make_dynamic)).
    ///
    /// ```
    /// # use tilejit::{DType, Tensor};
    /// let x = Tensor::zeros(&[2, 3, 4], DType::F32);
    /// assert_eq!((x.dim(0)?, x.dim(-1)?), (2, 4));
    /// assert!(x.dim(3).is_err());
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    #[track_caller]
    pub fn dim(&self, axis: isize) -> Result<usize> {
        let location = Loc::caller();
        let ty = match (&self.repr, self.ty()) {
            (_, Some(ty)) => ty,
            (Repr::Error(e), _) => return Err((**e).clone()),
            (_, None) => return Err(trace::traced_value_error("dim", location)),
        };
        let a = ty.shape.axis(axis).map_err(|e| Error::Op {
            op: "dim",
            location,
            source: e,
        })?;
        if let Repr::Traced { trace, .. } = &self.repr {
            trace::note_size_read(*trace, "dim", &ty.shape.dims()[a..=a], Some(location));
        }
        Ok(ty.shape[a])
    }

    /// Number of dimensions (`0` for an error tensor; the same at every
    /// size of a shape class, so not a size read).
    pub fn rank(&self) -> usize {
        self.ty().map_or(0, |t| t.shape.rank())
    }

    /// True while this tensor is a symbolic value inside a jit trace.
    pub fn is_traced(&self) -> bool {
        matches!(self.repr, Repr::Traced { .. })
    }

    /// The error this tensor carries, if it is an error tensor.
    pub fn error(&self) -> Option<&Error> {
        match &self.repr {
            Repr::Error(e) => Some(e),
            _ => None,
        }
    }

    /// `Ok(self)` unless this is an error tensor.
    pub fn check(&self) -> Result<&Tensor> {
        match &self.repr {
            Repr::Error(e) => Err((**e).clone()),
            _ => Ok(self),
        }
    }

    /// The concrete array on the host (a device tensor's copied back), or
    /// the error that explains why there is none.
    #[track_caller]
    pub(crate) fn array(&self, op: &'static str) -> Result<Array> {
        let location = Loc::caller();
        match &self.repr {
            Repr::Concrete(a) => Ok(a.clone()),
            Repr::Sim(d) => d.download().map_err(|source| Error::Run {
                function: op.to_string(),
                location,
                source,
            }),
            #[cfg(feature = "remote")]
            Repr::Remote(r) => r
                .conn
                .download(r)
                .map_err(|s| crate::remote::error(&r.conn.addr, op.to_string(), location, s)),
            Repr::Traced { .. } => Err(trace::traced_value_error(op, location)),
            Repr::Error(e) => Err((**e).clone()),
        }
    }

    /// The concrete value as an IR [`Array`] on the host (shares storage,
    /// no copy; a device tensor's elements are copied back).
    #[track_caller]
    pub fn to_array(&self) -> Result<Array> {
        self.array("to_array")
    }

    /// Copies the elements out, row-major. `T` must match the dtype.
    #[track_caller]
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let location = Loc::caller();
        let a = self.array("to_vec")?;
        a.as_slice::<T>()
            .and_then(|s| tilejit_ir::fallible::collect(s.iter().copied()))
            .map_err(|source| Error::Op {
                op: "to_vec",
                source,
                location,
            })
    }

    /// The single element of a one-element tensor.
    #[track_caller]
    pub fn item<T: Element>(&self) -> Result<T> {
        let location = Loc::caller();
        let a = self.array("item")?;
        let s = a.as_slice::<T>().map_err(|source| Error::Op {
            op: "item",
            source,
            location,
        })?;
        match s {
            [x] => Ok(*x),
            _ => Err(Error::Op {
                op: "item",
                source: IrError::Length {
                    shape: Shape::SCALAR,
                    expected: 1,
                    found: s.len(),
                },
                location,
            }),
        }
    }
}

impl trace::Traced for Tensor {
    fn traced_type(&self) -> Option<TensorType> {
        match &self.repr {
            Repr::Traced { ty, .. } => Some(*ty),
            _ => None,
        }
    }
}
