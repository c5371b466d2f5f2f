//! ONNX rows: casts to and from the narrow types (`narrow.rs`: float8,
//! float4, e8m0, int4/uint4, int2/uint2, emulated on f32, i8 and u8
//! carriers), QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
//! MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv, all matching
//! onnx's reference implementation.
//!
//! Rounding onto a float grid is built from public ops, so it runs traced
//! on every backend: `2^floor(log2|x|)` comes from a binary search over
//! the exponent (exact power-of-two scalings), the grid step of that binade
//! from it, then `round(x / step) * step` (halves to even) and the
//! type's overflow rule (saturation, inf, or NaN).

use super::super::model::{dtype_of, Node};
use super::super::narrow::{FloatFormat, Narrow};
use super::{
    attr_i, attr_s, axis, build_conv, check_conv, fail, live, matmul_nd, one, opt, req, table_of,
    Cx, Kind, Row,
};
use crate::error::Result;
use crate::tensor::Tensor;
use tilejit_ir::{DType, ErrorKind};

/// This area's rows.
pub(super) static ROWS: &[Row] = &[
    Row {
        op: "QuantizeLinear",
        attrs: &[
            "axis",
            "block_size",
            "output_dtype",
            "precision",
            "saturate",
        ],
        check: check_quantize,
        kind: Kind::Node(build_quantize),
    },
    Row {
        op: "DequantizeLinear",
        attrs: &["axis", "block_size", "output_dtype"],
        check: check_dequantize,
        kind: Kind::Node(build_dequantize),
    },
    Row {
        op: "DynamicQuantizeLinear",
        attrs: &[],
        check: |_, _| Ok(()),
        kind: Kind::Node(build_dynamic_quantize),
    },
    Row {
        op: "MatMulInteger",
        attrs: &[],
        check: |_, _| Ok(()),
        kind: Kind::Node(build_matmul_integer),
    },
    Row {
        op: "QLinearMatMul",
        attrs: &[],
        check: |_, _| Ok(()),
        kind: Kind::Node(build_qlinear_matmul),
    },
    Row {
        op: "ConvInteger",
        attrs: &[
            "auto_pad",
            "dilations",
            "group",
            "kernel_shape",
            "pads",
            "strides",
        ],
        check: check_conv,
        kind: Kind::Node(build_conv_integer),
    },
    Row {
        op: "QLinearConv",
        attrs: &[
            "auto_pad",
            "dilations",
            "group",
            "kernel_shape",
            "pads",
            "strides",
        ],
        check: check_conv,
        kind: Kind::Node(build_qlinear_conv),
    },
];

fn f32c(v: f64) -> Tensor {
    Tensor::scalar(v, DType::F32)
}

fn narrow_in(n: &Node, i: usize) -> Option<Narrow> {
    n.narrow_in.get(i).copied().flatten()
}

// ---- Cast and CastLike ----

/// A `Cast`'s `to` and `round_mode` are known types.
pub(super) fn check_cast(n: &Node, _: &Cx) -> Result<()> {
    let to = attr_i(n, "to", 1)? as i32;
    if Narrow::from_code(to).is_none() {
        dtype_of(to).map_err(|m| fail(n, "to", ErrorKind::Unsupported, m))?;
    }
    check_round_mode(n)
}

pub(super) fn check_cast_like(n: &Node, _: &Cx) -> Result<()> {
    check_round_mode(n)
}

fn check_round_mode(n: &Node) -> Result<()> {
    match attr_s(n, "round_mode", "up")? {
        "up" | "down" | "nearest" => Ok(()),
        m => Err(fail(
            n,
            "round_mode",
            ErrorKind::BadArgument,
            format!("`{m}` is not `up`, `down` or `nearest`"),
        )),
    }
}

pub(super) fn build_cast(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let to = attr_i(n, "to", 1)? as i32;
    let target = match Narrow::from_code(to) {
        Some(t) => Target::Narrow(t),
        None => Target::Wide(dtype_of(to).map_err(|m| fail(n, "to", ErrorKind::Unsupported, m))?),
    };
    one(cast_to(n, x, target)?)
}

pub(super) fn build_cast_like(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let (x, like) = (req(n, ins, 0)?, req(n, ins, 1)?);
    let target = match narrow_in(n, 1) {
        Some(t) => Target::Narrow(t),
        None => Target::Wide(like.dtype()),
    };
    one(cast_to(n, x, target)?)
}

enum Target {
    Narrow(Narrow),
    Wide(DType),
}

fn cast_to(n: &Node, x: &Tensor, target: Target) -> Result<Tensor> {
    let saturate = attr_i(n, "saturate", 1)? != 0;
    let mode = attr_s(n, "round_mode", "up")?;
    Ok(match target {
        Target::Wide(d) => x.cast(d),
        Target::Narrow(t) => round_to(x, t, saturate, mode),
    })
}

/// `x` converted to a narrow type, on its carrier, as onnx's reference
/// `Cast` does: floats round to the nearest grid value (halves to even),
/// saturating when asked (and always for E2M1, which has no inf or NaN);
/// E8M0 by `round_mode`; integer types truncate and wrap, as
/// `ml_dtypes`' `astype` does.
pub(crate) fn round_to(x: &Tensor, t: Narrow, saturate: bool, round_mode: &str) -> Tensor {
    if let Some(f) = t.float_format() {
        return round_float(x, f, saturate);
    }
    match t.int_range() {
        Some(_) => wrap_int(x, t),
        None => round_e8m0(x, saturate, round_mode),
    }
}

/// `2^floor(log2 a)` for `a >= 0` (clamped to `2^-127..=2^127`; 1 for NaN),
/// by a binary search over the exponent with exact power-of-two scalings.
fn pow2_floor(a: &Tensor) -> Tensor {
    let steps = [64, 32, 16, 8, 4, 2, 1];
    let mut v = a.clone();
    let mut p = Tensor::full(a.shape(), 1.0, DType::F32);
    for s in steps {
        let c = v.ge(&f32c(2f64.powi(s)));
        v = Tensor::where_cond(&c, &(&v * 2f64.powi(-s)), &v);
        p = Tensor::where_cond(&c, &(&p * 2f64.powi(s)), &p);
    }
    for s in steps {
        let c = v.lt(&f32c(2f64.powi(1 - s)));
        v = Tensor::where_cond(&c, &(&v * 2f64.powi(s)), &v);
        p = Tensor::where_cond(&c, &(&p * 2f64.powi(-s)), &p);
    }
    p
}

fn round_float(x: &Tensor, f: FloatFormat, saturate: bool) -> Tensor {
    let x = x.cast(DType::F32);
    let emin = 1 - f.bias;
    let step = pow2_floor(&x.abs()).maximum(&f32c(2f64.powi(emin))) * 2f64.powi(-(f.mbits as i32));
    let r = (&x / &step).round() * &step;
    let max = f32c(f.max);
    let neg_max = f32c(-f.max);
    let r = match f.overflow {
        Some(o) if !saturate && o.is_infinite() => Tensor::where_cond(
            &r.gt(&max),
            &f32c(f64::INFINITY),
            &Tensor::where_cond(&r.lt(&neg_max), &f32c(f64::NEG_INFINITY), &r),
        ),
        Some(_) if !saturate => Tensor::where_cond(&r.abs().gt(&max), &f32c(f64::NAN), &r),
        _ => Tensor::where_cond(
            &r.gt(&max),
            &max,
            &Tensor::where_cond(&r.lt(&neg_max), &neg_max, &r),
        ),
    };
    if f.fnuz {
        // No negative zero.
        return Tensor::where_cond(&r.eq(&f32c(0.0)), &f32c(0.0), &r);
    }
    if f.overflow.is_none() {
        // E2M1 has no NaN: ml_dtypes (and so onnx) makes it -0.
        return Tensor::where_cond(&r.eq(&r), &r, &f32c(-0.0));
    }
    r
}

/// onnx's `to_float8e8m0`: the exponent of `|x|`, rounded by `mode` on
/// the f32 mantissa (`up`: any fraction; `nearest`: its top bit, ties up;
/// `down`: none); NaN and inf become NaN, as does rounding past `2^127`
/// without saturation.
fn round_e8m0(x: &Tensor, saturate: bool, mode: &str) -> Tensor {
    let a = x.cast(DType::F32).abs();
    let min_normal = 2f64.powi(-126);
    let p = pow2_floor(&a);
    let frac = &(&a / &p) - 1.0;
    let top = p.eq(&f32c(2f64.powi(127)));
    let up_normal = match mode {
        "down" => None,
        "nearest" => Some(frac.ge(&f32c(0.5))),
        _ => Some(frac.gt(&f32c(0.0))),
    };
    let normal = match up_normal {
        None => p.clone(),
        Some(up) => {
            let up = match saturate {
                true => Tensor::where_cond(&top, &Tensor::scalar(0.0, DType::Bool), &up),
                false => up,
            };
            let doubled = Tensor::where_cond(&top, &f32c(f64::NAN), &(&p * 2.0));
            Tensor::where_cond(&up, &doubled, &p)
        }
    };
    // Below 2^-126 the f32 exponent field is 0: 2^-127, or 2^-126 when
    // rounding up a fraction (`nearest`: above one half).
    let sub_frac = &a * 2f64.powi(126);
    let subnormal = match mode {
        "down" => f32c(2f64.powi(-127)),
        m => {
            let up = match m {
                "nearest" => sub_frac.gt(&f32c(0.5)),
                _ => sub_frac.gt(&f32c(0.0)),
            };
            Tensor::where_cond(&up, &f32c(min_normal), &f32c(2f64.powi(-127)))
        }
    };
    let y = Tensor::where_cond(&a.ge(&f32c(min_normal)), &normal, &subnormal);
    Tensor::where_cond(&a.lt(&f32c(f64::INFINITY)), &y, &f32c(f64::NAN))
}

/// Truncation toward zero, then the low bits (two's complement for the
/// signed types); NaN and infinities become 0, as in `ml_dtypes`.
fn wrap_int(x: &Tensor, t: Narrow) -> Tensor {
    let wide = if x.dtype() == DType::I64 {
        DType::I64
    } else {
        DType::I32
    };
    let v = if x.dtype().is_float() {
        let finite = x.abs().lt(&Tensor::scalar(2f64.powi(31), x.dtype()));
        Tensor::where_cond(&finite, x, &Tensor::scalar(0.0, x.dtype())).cast(wide)
    } else {
        x.cast(wide)
    };
    let bits = t.bits() as i32;
    let w = v.bitwise_and(&Tensor::scalar((2f64.powi(bits)) - 1.0, wide));
    let w = match t.int_range() {
        Some((lo, _)) if lo < 0 => {
            let half = Tensor::scalar(2f64.powi(bits - 1), wide);
            Tensor::where_cond(&w.ge(&half), &(&w - 2f64.powi(bits)), &w)
        }
        _ => w,
    };
    w.cast(t.carrier())
}

// ---- QuantizeLinear, DequantizeLinear ----

/// What a quantized value is: an integer range on a carrier, or a float
/// narrow type.
#[derive(Clone, Copy)]
enum QType {
    Int { lo: f64, hi: f64, carrier: DType },
    Float(Narrow),
}

fn qtype_of(n: &Node, what: &str, narrow: Option<Narrow>, dtype: Option<DType>) -> Result<QType> {
    if let Some(t) = narrow {
        return Ok(match t.int_range() {
            Some((lo, hi)) => QType::Int {
                lo: lo as f64,
                hi: hi as f64,
                carrier: t.carrier(),
            },
            None if t == Narrow::E8M0 => {
                return Err(fail(
                    n,
                    what,
                    ErrorKind::Unsupported,
                    "FLOAT8E8M0 is not a quantized type",
                ))
            }
            None => QType::Float(t),
        });
    }
    match dtype {
        Some(DType::U8) | None => Ok(QType::Int {
            lo: 0.0,
            hi: 255.0,
            carrier: DType::U8,
        }),
        Some(DType::I8) => Ok(QType::Int {
            lo: -128.0,
            hi: 127.0,
            carrier: DType::I8,
        }),
        Some(DType::U16) => Ok(QType::Int {
            lo: 0.0,
            hi: 65535.0,
            carrier: DType::U16,
        }),
        Some(DType::I16) => Ok(QType::Int {
            lo: -32768.0,
            hi: 32767.0,
            carrier: DType::I16,
        }),
        Some(d) => Err(fail(
            n,
            what,
            ErrorKind::DType,
            format!(
                "{d:?} is not a quantized type (uint8, int8, uint16, int16, or a 4/2-bit or \
                 float8 type)"
            ),
        )),
    }
}

fn check_quantize(n: &Node, _: &Cx) -> Result<()> {
    let code = attr_i(n, "output_dtype", 0)? as i32;
    if code != 0 && Narrow::from_code(code).is_none() {
        let d = dtype_of(code).map_err(|m| fail(n, "output_dtype", ErrorKind::Unsupported, m))?;
        qtype_of(n, "output_dtype", None, Some(d))?;
    }
    if code == Narrow::E8M0 as i32 {
        qtype_of(n, "output_dtype", Narrow::from_code(code), None)?;
    }
    check_precision(n)?;
    check_block(n)
}

fn check_precision(n: &Node) -> Result<()> {
    let p = attr_i(n, "precision", 0)? as i32;
    if p != 0 {
        let d = dtype_of(p).map_err(|m| fail(n, "precision", ErrorKind::Unsupported, m))?;
        if !d.is_float() {
            return Err(fail(
                n,
                "precision",
                ErrorKind::BadArgument,
                format!("must be a float type, got {d:?}"),
            ));
        }
    }
    Ok(())
}

fn check_block(n: &Node) -> Result<()> {
    if attr_i(n, "block_size", 0)? < 0 {
        return Err(fail(
            n,
            "block_size",
            ErrorKind::BadArgument,
            "must not be negative",
        ));
    }
    Ok(())
}

fn check_dequantize(n: &Node, _: &Cx) -> Result<()> {
    let code = attr_i(n, "output_dtype", 0)? as i32;
    if code != 0 {
        let d = dtype_of(code).map_err(|m| fail(n, "output_dtype", ErrorKind::Unsupported, m))?;
        if !d.is_float() {
            return Err(fail(
                n,
                "output_dtype",
                ErrorKind::BadArgument,
                format!("must be a float type, got {d:?}"),
            ));
        }
    }
    check_block(n)
}

/// A scale or zero point made broadcastable against `shape`, as onnx's
/// `reshape_input`: a scalar or one value per tensor; a vector along
/// `axis`; with `block_size`, a tensor of `shape` whose `axis` has one
/// value per block.
fn per_axis(n: &Node, what: &str, v: &Tensor, shape: &[usize], block: usize) -> Result<Tensor> {
    let v = live(v.clone())?;
    if v.rank() == 0 {
        return Ok(v);
    }
    if v.numel() == 1 {
        return Ok(v.reshape(&[]));
    }
    let ax = axis(n, "axis", attr_i(n, "axis", 1)?, shape.len())?;
    let bad = |m: String| fail(n, what, ErrorKind::Shape, m);
    if shape.is_empty() {
        return Err(bad(format!(
            "shape {:?} for a scalar input: must be one value",
            v.shape()
        )));
    }
    if block == 0 {
        if v.rank() != 1 || v.shape()[0] != shape[ax] {
            return Err(bad(format!(
                "shape {:?}: per-axis values must be a vector of {} (axis {ax} of {shape:?})",
                v.shape(),
                shape[ax]
            )));
        }
        let mut dims = vec![1; shape.len()];
        dims[ax] = shape[ax];
        return Ok(v.reshape(&dims));
    }
    let blocks = shape[ax].div_ceil(block);
    let fits = v.rank() == shape.len()
        && v.shape()
            .iter()
            .zip(shape)
            .enumerate()
            .all(|(d, (&a, &b))| if d == ax { a == blocks } else { a == b });
    if !fits {
        return Err(bad(format!(
            "shape {:?}: blocked values must have shape {shape:?} with {blocks} blocks of {block} along axis {ax}",
            v.shape()
        )));
    }
    let idx = table_of(shape[ax], |i| (i / block) as i64)?;
    let idx = Tensor::from_vec(idx, &[shape[ax]])?;
    Ok(v.index_select(ax as isize, &idx))
}

fn block_size(n: &Node) -> Result<usize> {
    Ok(attr_i(n, "block_size", 0)?.max(0) as usize)
}

/// The zero point has the scale's shape (one value each may be a scalar
/// or a one-element vector).
fn same_shape(n: &Node, scale: &Tensor, zp: Option<&Tensor>) -> Result<()> {
    if let Some(z) = zp {
        if z.shape() != scale.shape() && !(z.numel() == 1 && scale.numel() == 1) {
            return Err(fail(
                n,
                "zero_point",
                ErrorKind::Shape,
                format!(
                    "shape {:?} differs from the scale's {:?}",
                    z.shape(),
                    scale.shape()
                ),
            ));
        }
    }
    Ok(())
}

fn build_quantize(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let (x, scale, zp) = (req(n, ins, 0)?, req(n, ins, 1)?, opt(ins, 2));
    let code = attr_i(n, "output_dtype", 0)? as i32;
    let qt = match zp {
        Some(z) => {
            let qt = qtype_of(n, "y_zero_point", narrow_in(n, 2), Some(z.dtype()))?;
            let declared = Narrow::from_code(code)
                .map(|t| t.carrier())
                .or_else(|| dtype_of(code).ok());
            let zp_narrow = narrow_in(n, 2).map(|t| t as i32);
            let agrees = match Narrow::from_code(code) {
                Some(_) => zp_narrow == Some(code),
                None => zp_narrow.is_none() && declared == Some(z.dtype()),
            };
            if code != 0 && !agrees {
                return Err(fail(
                    n,
                    "output_dtype",
                    ErrorKind::DType,
                    "differs from the zero point's type",
                ));
            }
            qt
        }
        None if code != 0 => qtype_of(
            n,
            "output_dtype",
            Narrow::from_code(code),
            dtype_of(code).ok(),
        )?,
        None => qtype_of(n, "y_zero_point", None, None)?,
    };
    same_shape(n, scale, zp)?;
    let block = block_size(n)?;
    let s = per_axis(n, "y_scale", scale, x.shape(), block)?;
    let precision = attr_i(n, "precision", 0)? as i32;
    let div = if precision != 0 {
        dtype_of(precision).map_err(|m| fail(n, "precision", ErrorKind::Unsupported, m))?
    } else if x.dtype() == scale.dtype() {
        x.dtype()
    } else {
        DType::F32
    };
    let q = &x.cast(div) / &s.cast(div);
    let zp = zp
        .map(|z| per_axis(n, "y_zero_point", z, x.shape(), block))
        .transpose()?;
    let saturate = attr_i(n, "saturate", 1)? != 0;
    one(match qt {
        QType::Int { lo, hi, carrier } => {
            let mut y = q.round().cast(DType::F32);
            if let Some(z) = &zp {
                y = &y + &z.cast(DType::F32);
            }
            // NaN becomes the low end, as the reference's int32 cast does.
            let y = Tensor::where_cond(&y.eq(&y), &y, &f32c(lo));
            let y = Tensor::where_cond(
                &y.lt(&f32c(lo)),
                &f32c(lo),
                &Tensor::where_cond(&y.gt(&f32c(hi)), &f32c(hi), &y),
            );
            y.cast(carrier)
        }
        QType::Float(t) => {
            let q = match (&zp, t) {
                (Some(z), Narrow::E2M1) => &q.cast(DType::F32) + &z.cast(DType::F32),
                _ => q,
            };
            round_to(&q, t, saturate, "up")
        }
    })
}

fn build_dequantize(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let (x, scale, zp) = (req(n, ins, 0)?, req(n, ins, 1)?, opt(ins, 2));
    let xt = narrow_in(n, 0);
    let float_x = xt.is_some_and(|t| t.float_format().is_some() || t == Narrow::E8M0);
    same_shape(n, scale, zp)?;
    let block = block_size(n)?;
    let mut dx = x.cast(DType::F32);
    if let Some(z) = zp.filter(|z| float_x && !z.is_traced()) {
        // A float8 or float4 zero point must be zero (onnx's reference).
        let nonzero = z
            .cast(DType::F32)
            .to_vec::<f32>()
            .map_or(true, |v| v.iter().any(|&v| v != 0.0));
        if nonzero {
            return Err(fail(
                n,
                "x_zero_point",
                ErrorKind::BadArgument,
                "must be zero for a float8 or float4 x",
            ));
        }
    }
    if let Some(z) = zp.filter(|_| !float_x) {
        if z.dtype() != x.dtype()
            || (xt.is_some() && narrow_in(n, 2).is_some_and(|t| Some(t) != xt))
        {
            return Err(fail(
                n,
                "x_zero_point",
                ErrorKind::DType,
                format!(
                    "type {} differs from x's {}",
                    type_name(z.dtype(), narrow_in(n, 2)),
                    type_name(x.dtype(), xt)
                ),
            ));
        }
        let z = per_axis(n, "x_zero_point", z, x.shape(), block)?;
        dx = &dx - &z.cast(DType::F32);
    }
    let s = per_axis(n, "x_scale", scale, x.shape(), block)?;
    let y = &dx * &s.cast(DType::F32);
    let code = attr_i(n, "output_dtype", 0)? as i32;
    let out = match code {
        0 => scale.dtype(),
        c => dtype_of(c).map_err(|m| fail(n, "output_dtype", ErrorKind::Unsupported, m))?,
    };
    one(y.cast(out))
}

fn type_name(d: DType, t: Option<Narrow>) -> String {
    match t {
        Some(t) => t.name().to_string(),
        None => format!("{d:?}"),
    }
}

fn build_dynamic_quantize(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    if x.numel() == 0 {
        return Err(fail(n, "x", ErrorKind::Shape, "is empty"));
    }
    let xf = x.cast(DType::F32);
    let flat = xf.reshape(&[x.numel()]);
    let zero = f32c(0.0);
    let mx = flat.max(0, false).maximum(&zero);
    let mn = flat.min(0, false).minimum(&zero);
    let range = Tensor::where_cond(&mx.eq(&mn), &f32c(1.0), &(&mx - &mn));
    let scale = &range / 255.0;
    let izp = &zero - &(&mn / &scale);
    let zp = izp.maximum(&zero).minimum(&f32c(255.0)).round();
    let y = (&(&xf / &scale).round() + &zp)
        .maximum(&zero)
        .minimum(&f32c(255.0));
    Ok(vec![
        y.cast(DType::U8),
        scale.cast(x.dtype()),
        zp.cast(DType::U8),
    ])
}

// ---- integer matmul and conv ----

/// `x - zero_point` in i32; a 1-D zero point of `rows` values applies per
/// row (axis -2) when `per_row`, else along the last axis.
fn shifted(n: &Node, what: &str, x: &Tensor, zp: Option<&Tensor>, per_row: bool) -> Result<Tensor> {
    check_int(n, what, x)?;
    let xi = x.cast(DType::I32);
    let Some(z) = zp else {
        return Ok(xi);
    };
    check_int(n, &format!("{what}'s zero point"), z)?;
    if z.dtype() != x.dtype() {
        return Err(fail(
            n,
            what,
            ErrorKind::DType,
            format!(
                "zero point of {:?} for values of {:?}",
                z.dtype(),
                x.dtype()
            ),
        ));
    }
    let z = live(z.clone())?.cast(DType::I32);
    let z = if z.numel() == 1 {
        z.reshape(&[])
    } else if per_row && z.rank() == 1 && x.rank() >= 2 {
        z.reshape(&[z.numel(), 1])
    } else {
        z
    };
    Ok(&xi - &z)
}

fn check_int(n: &Node, what: &str, x: &Tensor) -> Result<()> {
    match x.dtype() {
        DType::U8 | DType::I8 => Ok(()),
        d => Err(fail(
            n,
            what,
            ErrorKind::DType,
            format!("must be uint8 or int8, got {d:?}"),
        )),
    }
}

/// An integer matmul, exact: products summed in f64 (exact below 2^53).
fn int_matmul(n: &Node, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    Ok(matmul_nd(n, &a.cast(DType::F64), &b.cast(DType::F64))?.cast(DType::I32))
}

fn build_matmul_integer(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let a = shifted(n, "A", req(n, ins, 0)?, opt(ins, 2), true)?;
    let b = shifted(n, "B", req(n, ins, 1)?, opt(ins, 3), false)?;
    one(int_matmul(n, &a, &b)?)
}

/// `round(acc * (a_scale * b_scale / y_scale) + y_zero_point)` clamped to
/// the output type (`y_zero_point`'s, else `like`'s), as onnx's reference:
/// the scale product in the scales' dtype, the rest in f64.
fn requantize(
    n: &Node,
    acc: &Tensor,
    scale: &Tensor,
    yzp: Option<&Tensor>,
    like: DType,
) -> Result<Tensor> {
    let out = yzp.map_or(like, |z| z.dtype());
    let (lo, hi) = match out {
        DType::I8 => (-128.0, 127.0),
        DType::U8 => (0.0, 255.0),
        d => {
            return Err(fail(
                n,
                "y_zero_point",
                ErrorKind::DType,
                format!("must be uint8 or int8, got {d:?}"),
            ))
        }
    };
    let mut d = &acc.cast(DType::F64) * &scale.cast(DType::F64);
    if let Some(z) = yzp {
        d = &d + &live(z.clone())?.cast(DType::F64);
    }
    let lo_t = Tensor::scalar(lo, DType::F64);
    let hi_t = Tensor::scalar(hi, DType::F64);
    Ok(d.round().maximum(&lo_t).minimum(&hi_t).cast(out))
}

fn scalar_or(n: &Node, what: &str, t: &Tensor, dims: Option<&[usize]>) -> Result<Tensor> {
    let t = live(t.clone())?;
    if t.numel() == 1 {
        return Ok(t.reshape(&[]));
    }
    match dims {
        Some(d) if t.rank() == 1 => Ok(t.reshape(d)),
        _ => Err(fail(
            n,
            what,
            ErrorKind::Shape,
            format!("shape {:?}: must be a scalar or a vector", t.shape()),
        )),
    }
}

fn build_qlinear_matmul(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let a_in = req(n, ins, 0)?;
    let a = shifted(n, "a", a_in, opt(ins, 2), true)?;
    let b = shifted(n, "b", req(n, ins, 3)?, opt(ins, 5), false)?;
    let acc = int_matmul(n, &a, &b)?;
    let a_scale = req(n, ins, 1)?;
    let rows = a_scale.numel();
    let a_scale = scalar_or(n, "a_scale", a_scale, Some(&[rows, 1]))?;
    let b_scale = scalar_or(
        n,
        "b_scale",
        req(n, ins, 4)?,
        Some(&[req(n, ins, 4)?.numel()]),
    )?;
    let y_scale = scalar_or(n, "y_scale", req(n, ins, 6)?, None)?;
    let m = &(&a_scale * &b_scale) / &y_scale;
    one(requantize(n, &acc, &m, opt(ins, 7), a_in.dtype())?)
}

fn build_conv_integer(n: &Node, cx: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let (x, w) = conv_operands(
        n,
        req(n, ins, 0)?,
        opt(ins, 2),
        req(n, ins, 1)?,
        opt(ins, 3),
    )?;
    let y = build_conv(n, cx, &[Some(x), Some(w)])?.remove(0);
    one(y.round().cast(DType::I32))
}

/// The shifted operands of an integer conv, as f64 (exact below 2^53): x
/// less its scalar zero point, w less its scalar or per-output-channel one.
fn conv_operands(
    n: &Node,
    x: &Tensor,
    xzp: Option<&Tensor>,
    w: &Tensor,
    wzp: Option<&Tensor>,
) -> Result<(Tensor, Tensor)> {
    if let Some(z) = xzp.filter(|z| z.numel() != 1) {
        return Err(fail(
            n,
            "x_zero_point",
            ErrorKind::Shape,
            format!("shape {:?}: must be one value", z.shape()),
        ));
    }
    let xs = shifted(n, "x", x, xzp, false)?;
    let wz = match wzp {
        Some(z) if z.numel() != 1 => {
            let out = w.shape().first().copied().unwrap_or(0);
            if z.rank() != 1 || z.numel() != out {
                return Err(fail(
                    n,
                    "w_zero_point",
                    ErrorKind::Shape,
                    format!(
                        "shape {:?}: must be one value or one per output channel ({out})",
                        z.shape()
                    ),
                ));
            }
            let mut dims = vec![1; w.rank()];
            dims[0] = out;
            Some(z.reshape(&dims))
        }
        z => z.cloned(),
    };
    let ws = shifted(n, "w", w, wz.as_ref(), false)?;
    Ok((xs.cast(DType::F64), ws.cast(DType::F64)))
}

fn build_qlinear_conv(n: &Node, cx: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x_in = req(n, ins, 0)?;
    let w_in = req(n, ins, 3)?;
    let (x, w) = conv_operands(n, x_in, opt(ins, 2), w_in, opt(ins, 5))?;
    // A conv that failed (channels, a window past the image) has no axes
    // for the bias and scales below.
    let mut acc = live(build_conv(n, cx, &[Some(x), Some(w)])?.remove(0))?;
    if let Some(b) = opt(ins, 8) {
        let b = live(b.clone())?;
        if b.rank() != 1 || b.numel() != acc.shape().get(1).copied().unwrap_or(0) {
            return Err(fail(
                n,
                "B",
                ErrorKind::Shape,
                format!(
                    "shape {:?}: must be one value per output channel",
                    b.shape()
                ),
            ));
        }
        let mut dims = vec![1; acc.rank()];
        dims[1] = b.numel();
        acc = &acc + &b.cast(DType::F64).reshape(&dims);
    }
    let out_ch = w_in.shape().first().copied().unwrap_or(0);
    let mut per_ch = vec![1; acc.rank()];
    if per_ch.len() > 1 {
        per_ch[1] = out_ch;
    }
    let x_scale = scalar_or(n, "x_scale", req(n, ins, 1)?, None)?;
    let w_scale = scalar_or(n, "w_scale", req(n, ins, 4)?, Some(&per_ch))?;
    let y_scale = scalar_or(n, "y_scale", req(n, ins, 6)?, None)?;
    let m = &(&x_scale * &w_scale) / &y_scale;
    one(requantize(n, &acc, &m, opt(ins, 7), x_in.dtype())?)
}
