//! Neural-network layers with torch's weight layouts, written as
//! compositions of tensor ops (so they fuse like any other ops):
//! [`Tensor::linear`] (`nn.Linear`'s `[out, in]` weight),
//! [`Tensor::batch_norm`] (eval-mode BN over NCHW channels),
//! [`fold_batch_norm`] (an eval-mode BN folded into the convolution before
//! it, once at load), [`Tensor::adaptive_avg_pool2d`]. Layer norm is
//! [`Tensor::layer_norm`]. Each checks its operands' shapes first, so a
//! wrong weight fails with the layer's name and the caller's line.

use crate::apply::apply;
use crate::error::{Error, Loc, Result};
use crate::tensor::Tensor;
use tilejit_ir::{IrError, Shape};

/// The error tensor of `op` on `operands` (recorded in the active trace,
/// as any op's error is).
fn fail(
    op: &'static str,
    location: Loc,
    operands: &[&Tensor],
    shape: Shape,
    reason: String,
) -> Tensor {
    apply(op, location, operands, move |_, _| {
        Err(IrError::Window { op, shape, reason })
    })
}

/// Checks that `v` (if given and not an error) is a vector of `n`
/// elements; `Err` names it.
fn vector(name: &str, v: Option<&Tensor>, n: usize) -> std::result::Result<(), String> {
    match v.and_then(Tensor::ty) {
        Some(t) if t.shape.dims() != [n] => Err(format!("{name} {} must be [{n}]", t.shape)),
        _ => Ok(()),
    }
}

/// `v` (`[c]`) shaped to broadcast over axis 1 of a rank-`rank` tensor:
/// `[c, 1, ..]` with `rank - 2` ones.
#[track_caller]
fn per_channel(v: &Tensor, c: usize, rank: usize) -> Tensor {
    let mut dims = vec![c];
    dims.resize(rank.saturating_sub(1), 1);
    v.reshape(&dims)
}

impl Tensor {
    /// torch's `nn.Linear`: `self @ weight^T + bias`, with `weight`
    /// `[out, in]` (torch's layout; a GPT-2 `Conv1D` stores `[in, out]`:
    /// that one is `self.matmul(&w) + b`) and `bias` `[out]`. `self` is
    /// `[.., in]` of rank 2 or 3.
    ///
    /// ```
    /// # use tilejit::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[1, 2])?;
    /// let w = Tensor::from_vec(vec![1.0f32, 0.0, 1.0, 1.0, 0.0, -1.0], &[3, 2])?;
    /// let b = Tensor::from_vec(vec![0.5f32, 0.0, 0.0], &[3])?;
    /// assert_eq!(x.linear(&w, Some(&b)).to_vec::<f32>()?, vec![1.5, 3.0, -2.0]);
    /// assert!(x.linear(&b, None).check().is_err()); // a weight of rank 1
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    #[track_caller]
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Tensor {
        let location = Loc::caller();
        if let (Some(x), Some(w)) = (self.ty(), weight.ty()) {
            let (xs, ws) = (x.shape, w.shape);
            let bad = if ws.rank() != 2 {
                Err(format!("weight {ws} must be [out, in] (rank 2)"))
            } else if !matches!(xs.rank(), 2 | 3) || xs[xs.rank() - 1] != ws[1] {
                Err(format!(
                    "the input must be [.., {}] of rank 2 or 3 (weight {ws} is [out, in])",
                    ws[1]
                ))
            } else {
                vector("bias", bias, ws[0])
            };
            if let Err(reason) = bad {
                return fail("linear", location, &[self, weight], xs, reason);
            }
        }
        let y = self.matmul(&weight.transpose(0, 1));
        match bias {
            Some(b) => y + b,
            None => y,
        }
    }

    /// Eval-mode batch normalisation over axis 1 (the channels of NCHW, or
    /// the features of `[n, c]`): `(x - mean) / sqrt(var + eps) * weight +
    /// bias`, each `[c]` (torch's `running_mean`, `running_var`, `weight`,
    /// `bias`; `None` weight is 1, `None` bias 0).
    ///
    /// ```
    /// # use tilejit::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 3.0, 10.0, 20.0], &[1, 2, 2, 1])?;
    /// let mean = Tensor::from_vec(vec![2.0f32, 10.0], &[2])?;
    /// let var = Tensor::from_vec(vec![1.0f32, 100.0], &[2])?;
    /// let y = x.batch_norm(&mean, &var, None, None, 0.0);
    /// assert_eq!(y.to_vec::<f32>()?, vec![-1.0, 1.0, 0.0, 1.0]);
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    #[track_caller]
    pub fn batch_norm(
        &self,
        mean: &Tensor,
        var: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Tensor {
        let location = Loc::caller();
        let Some(x) = self.ty() else {
            return self.clone();
        };
        let s = x.shape;
        let bad = if s.rank() < 2 {
            Err("expects [n, c, ..] (rank 2 or more)".to_string())
        } else {
            let c = s[1];
            vector("running mean", Some(mean), c)
                .and(vector("running var", Some(var), c))
                .and(vector("weight", weight, c))
                .and(vector("bias", bias, c))
        };
        if let Err(reason) = bad {
            return fail("batch_norm", location, &[self, mean, var], s, reason);
        }
        let (c, rank) = (s[1], s.rank());
        let mut scale = (var + eps).rsqrt();
        if let Some(w) = weight {
            scale = scale * w;
        }
        let mut y = (self - per_channel(mean, c, rank)) * per_channel(&scale, c, rank);
        if let Some(b) = bias {
            y = y + per_channel(b, c, rank);
        }
        y
    }

    /// torch's `adaptive_avg_pool2d` of an NCHW image to `out_h x out_w`:
    /// output row `i` averages input rows `floor(i * h / out_h)` to
    /// `ceil((i + 1) * h / out_h)` (exclusive), and likewise for columns.
    /// `(1, 1)` is the global average pool that ends a ResNet.
    ///
    /// ```
    /// # use tilejit::Tensor;
    /// let x = Tensor::from_vec((0..6).map(|v| v as f32).collect(), &[1, 1, 2, 3])?;
    /// assert_eq!(x.adaptive_avg_pool2d(1, 1).to_vec::<f32>()?, vec![2.5]);
    /// // Columns [0, 2) and [1, 3): windows overlap when 3 does not divide by 2.
    /// assert_eq!(x.adaptive_avg_pool2d(1, 2).to_vec::<f32>()?, vec![2.0, 3.0]);
    /// # Ok::<(), tilejit::Error>(())
    /// ```
    #[track_caller]
    pub fn adaptive_avg_pool2d(&self, out_h: usize, out_w: usize) -> Tensor {
        let location = Loc::caller();
        let Some(x) = self.ty() else {
            return self.clone();
        };
        let s = x.shape;
        let bad = if s.rank() != 4 {
            Some("expects an NCHW image (rank 4)".to_string())
        } else if out_h == 0 || out_w == 0 || s[2] == 0 || s[3] == 0 {
            Some(format!(
                "an output of {out_h}x{out_w} from a {}x{} image: both must be non-empty",
                s[2], s[3]
            ))
        } else if !x.dtype.is_float() {
            Some(format!(
                "average pooling is for floats, not {}; cast first",
                x.dtype
            ))
        } else {
            None
        };
        if let Some(reason) = bad {
            return fail("adaptive_avg_pool2d", location, &[self], s, reason);
        }
        let (n, c, h, w) = (s[0], s[1], s[2], s[3]);
        if (out_h, out_w) == (1, 1) {
            return self.flatten(2, 3).mean(-1, false).reshape(&[n, c, 1, 1]);
        }
        // Separable: a window's mean is the mean over its columns of the
        // means over its rows.
        let rows = adaptive_axis(self, 2, h, out_h);
        adaptive_axis(&rows, 3, w, out_w)
    }
}

/// Means over torch's adaptive windows along `axis` (of length `len`),
/// `out` of them, joined along that axis.
#[track_caller]
fn adaptive_axis(x: &Tensor, axis: isize, len: usize, out: usize) -> Tensor {
    if len == out {
        return x.clone();
    }
    let parts: Vec<Tensor> = (0..out)
        .map(|i| {
            let (start, end) = (i * len / out, ((i + 1) * len).div_ceil(out));
            x.slice(axis, start as isize, end as isize).mean(axis, true)
        })
        .collect();
    let refs: Vec<&Tensor> = parts.iter().collect();
    Tensor::cat(&refs, axis)
}

/// An eval-mode batch norm folded into the convolution before it, done
/// once when loading a model: returns the convolution's new `(weight,
/// bias)` such that `conv(x, w') + b'` equals `batch_norm(conv(x, w) + b)`
/// with torch's `running_mean`, `running_var`, `weight` (gamma) and `bias`
/// (beta) of `[out]` each: `w' = w * s` per output channel and `b' = (b -
/// mean) * s + beta`, where `s = gamma / sqrt(var + eps)`. `conv_bias`
/// `None` is zero. `conv_weight` is `[out, ..]` (OIHW).
///
/// ```
/// # use tilejit::Tensor;
/// let w = Tensor::from_vec(vec![1.0f32, 2.0], &[2, 1, 1, 1])?;
/// let [mean, var, gamma, beta] = [[1.0f32, 0.0], [4.0, 1.0], [2.0, 1.0], [0.0, 0.5]]
///     .map(|v| Tensor::from_vec(v.to_vec(), &[2]).unwrap());
/// let (w2, b2) = tilejit::nn::fold_batch_norm(&w, None, &mean, &var, &gamma, &beta, 0.0)?;
/// assert_eq!(w2.to_vec::<f32>()?, vec![1.0, 2.0]); // w * gamma / sqrt(var)
/// assert_eq!(b2.to_vec::<f32>()?, vec![-1.0, 0.5]); // -mean * gamma / sqrt(var) + beta
/// # Ok::<(), tilejit::Error>(())
/// ```
#[track_caller]
pub fn fold_batch_norm(
    conv_weight: &Tensor,
    conv_bias: Option<&Tensor>,
    mean: &Tensor,
    var: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let location = Loc::caller();
    conv_weight.check()?;
    let s = conv_weight.shape();
    let bad = match s.first() {
        None => Err("the convolution's weight must be [out, ..] (rank 1 or more)".to_string()),
        Some(&o) => vector("conv bias", conv_bias, o)
            .and(vector("running mean", Some(mean), o))
            .and(vector("running var", Some(var), o))
            .and(vector("weight", Some(gamma), o))
            .and(vector("bias", Some(beta), o)),
    };
    if let Err(reason) = bad {
        let shape = Shape::new(s).unwrap_or(Shape::SCALAR);
        return Err(Error::Op {
            op: "fold_batch_norm",
            source: IrError::Window {
                op: "fold_batch_norm",
                shape,
                reason,
            },
            location,
        });
    }
    let scale = (var + eps).rsqrt() * gamma;
    let mut dims = vec![1usize; s.len()];
    dims[0] = s[0];
    let w = (conv_weight * scale.reshape(&dims)).into_result()?;
    let b = match conv_bias {
        Some(b) => b - mean,
        None => -mean,
    };
    let b = (b * &scale + beta).into_result()?;
    Ok((w, b))
}
