//! Resize and Upsample. Shapes are static, so per resized axis the source
//! indices and their weights are constants computed here at trace time
//! (ported from the vectorised ONNX reference, `op_resize.py`); the resize
//! is then an `index_select` per tap times its weights, summed: one
//! elementwise kernel per axis, the same on Host and Sim.

use super::super::{
    attr_f, attr_i, attr_ints, attr_s, axis, fail, floats_of, ints_of, one, opt, req, Cx,
};
use crate::error::Result;
use crate::onnx::model::{Attr, Node};
use crate::tensor::Tensor;
use tilejit_ir::{DType, ErrorKind};

const COORD_MODES: &[&str] = &[
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
];
const NEAREST_MODES: &[&str] = &["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"];

fn one_of(n: &Node, attr: &str, default: &str, allowed: &[&str]) -> Result<()> {
    let v = attr_s(n, attr, default)?;
    if allowed.contains(&v) {
        return Ok(());
    }
    Err(fail(
        n,
        attr,
        ErrorKind::Unsupported,
        format!("`{v}` is not supported (one of {allowed:?} is)"),
    ))
}

pub(in super::super) fn check_resize(n: &Node, cx: &Cx) -> Result<()> {
    let modes: &[&str] = if cx.opset >= 11 {
        &["nearest", "linear", "cubic"]
    } else {
        &["nearest", "linear"]
    };
    one_of(n, "mode", "nearest", modes)?;
    one_of(
        n,
        "coordinate_transformation_mode",
        "half_pixel",
        COORD_MODES,
    )?;
    one_of(n, "nearest_mode", "round_prefer_floor", NEAREST_MODES)?;
    one_of(
        n,
        "keep_aspect_ratio_policy",
        "stretch",
        &["stretch", "not_larger", "not_smaller"],
    )?;
    if attr_i(n, "antialias", 0)? != 0 && attr_s(n, "mode", "nearest")? == "nearest" {
        return Err(fail(
            n,
            "antialias",
            ErrorKind::BadArgument,
            "antialias applies to linear and cubic modes, not nearest",
        ));
    }
    Ok(())
}

pub(in super::super) fn check_upsample(n: &Node, _: &Cx) -> Result<()> {
    one_of(n, "mode", "nearest", &["nearest", "linear", "bilinear"])
}

/// How source coordinates map to taps, read from the attributes.
struct Spec<'a> {
    mode: &'a str,
    coord: &'a str,
    nearest: &'a str,
    cubic_a: f64,
    exclude_outside: bool,
    antialias: bool,
    extrapolation: f64,
    /// Resize-10 and Upsample: asymmetric, nearest rounds down when
    /// upsampling and up when downsampling (onnxruntime's "simple").
    legacy: bool,
}

pub(in super::super) fn build_resize(
    n: &Node,
    cx: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let legacy = cx.opset < 11;
    let spec = Spec {
        mode: attr_s(n, "mode", "nearest")?,
        coord: if legacy {
            "asymmetric"
        } else {
            attr_s(n, "coordinate_transformation_mode", "half_pixel")?
        },
        nearest: attr_s(n, "nearest_mode", "round_prefer_floor")?,
        cubic_a: attr_f(n, "cubic_coeff_a", -0.75)? as f64,
        exclude_outside: attr_i(n, "exclude_outside", 0)? != 0,
        antialias: attr_i(n, "antialias", 0)? != 0,
        extrapolation: attr_f(n, "extrapolation_value", 0.0)? as f64,
        legacy,
    };
    let present = |i: usize| opt(ins, i).filter(|t| t.numel() > 0);
    let (roi, scales, sizes) = if legacy {
        (None, Some(req(n, ins, 1)?), None)
    } else {
        (present(1), present(2), present(3))
    };
    let r = x.rank();
    let axes: Vec<usize> = match attr_ints(n, "axes")? {
        Some(a) => a
            .iter()
            .map(|&a| axis(n, "axes", a, r))
            .collect::<Result<_>>()?,
        None => (0..r).collect(),
    };
    let scales = scales.map(|s| floats_of(n, "scales", s)).transpose()?;
    let sizes = sizes.map(|s| ints_of(n, "sizes", s)).transpose()?;
    let roi = match (spec.coord, roi) {
        ("tf_crop_and_resize", Some(t)) => Some(floats_of(n, "roi", t)?),
        ("tf_crop_and_resize", None) => {
            return Err(fail(
                n,
                "roi",
                ErrorKind::BadArgument,
                "tf_crop_and_resize needs a roi",
            ))
        }
        _ => None,
    };
    let policy = attr_s(n, "keep_aspect_ratio_policy", "stretch")?;
    let plan = plan(n, x.shape(), &axes, scales, sizes, roi, policy)?;
    resize(n, x, &spec, &plan)
}

pub(in super::super) fn build_upsample(
    n: &Node,
    _: &Cx,
    ins: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let scales = match (n.attrs.get("scales"), opt(ins, 1)) {
        (Some(Attr::Floats(f)), _) => f.iter().map(|&v| v as f64).collect(),
        (_, Some(t)) => floats_of(n, "scales", t)?,
        _ => return Err(fail(n, "scales", ErrorKind::BadArgument, "is required")),
    };
    let mode = match attr_s(n, "mode", "nearest")? {
        "nearest" => "nearest",
        _ => "linear",
    };
    let spec = Spec {
        mode,
        coord: "asymmetric",
        nearest: "floor",
        cubic_a: -0.75,
        exclude_outside: false,
        antialias: false,
        extrapolation: 0.0,
        legacy: true,
    };
    let axes: Vec<usize> = (0..x.rank()).collect();
    let plan = plan(n, x.shape(), &axes, Some(scales), None, None, "stretch")?;
    resize(n, x, &spec, &plan)
}

/// Per axis of the input: (scale, output size, roi start and end).
struct AxisPlan {
    scale: f64,
    out: usize,
    roi: (f64, f64),
}

fn plan(
    n: &Node,
    shape: &[usize],
    axes: &[usize],
    scales: Option<Vec<f64>>,
    sizes: Option<Vec<i64>>,
    roi: Option<Vec<f64>>,
    policy: &str,
) -> Result<Vec<AxisPlan>> {
    let r = shape.len();
    let k = axes.len();
    let mut p: Vec<AxisPlan> = shape
        .iter()
        .map(|&d| AxisPlan {
            scale: 1.0,
            out: d,
            roi: (0.0, 1.0),
        })
        .collect();
    if let Some(roi) = roi {
        // roi lists starts then ends, for the given axes or for every axis.
        let (m, at): (usize, Vec<usize>) = if roi.len() == 2 * k {
            (k, axes.to_vec())
        } else if roi.len() == 2 * r {
            (r, (0..r).collect())
        } else {
            return Err(fail(
                n,
                "roi",
                ErrorKind::BadArgument,
                format!("has {} values for {k} axes", roi.len()),
            ));
        };
        for (i, &a) in at.iter().enumerate() {
            p[a].roi = (roi[i], roi[m + i]);
        }
    }
    match (scales, sizes) {
        (Some(s), None) => {
            if s.len() != k || s.iter().any(|&v| v.is_nan() || v <= 0.0) {
                return Err(fail(
                    n,
                    "scales",
                    ErrorKind::BadArgument,
                    format!("needs one positive scale per resized axis ({k}), got {s:?}"),
                ));
            }
            for (&a, &v) in axes.iter().zip(&s) {
                p[a].scale = v;
                p[a].out = (v * shape[a] as f64).floor() as usize;
            }
        }
        (None, Some(s)) => {
            if s.len() != k || s.iter().any(|&v| v < 1) {
                return Err(fail(
                    n,
                    "sizes",
                    ErrorKind::BadArgument,
                    format!("needs one positive size per resized axis ({k}), got {s:?}"),
                ));
            }
            let ratio = |i: usize| s[i] as f64 / shape[axes[i]] as f64;
            let keep = match policy {
                "not_larger" => Some((0..k).map(ratio).fold(f64::INFINITY, f64::min)),
                "not_smaller" => Some((0..k).map(ratio).fold(0.0, f64::max)),
                _ => None,
            };
            for (i, &a) in axes.iter().enumerate() {
                (p[a].scale, p[a].out) = match keep {
                    // Rounds half up, as the spec says.
                    Some(sc) => (sc, (sc * shape[a] as f64 + 0.5) as usize),
                    None => (ratio(i), s[i] as usize),
                };
            }
        }
        _ => {
            return Err(fail(
                n,
                "scales",
                ErrorKind::BadArgument,
                "exactly one of scales and sizes must be given",
            ))
        }
    }
    // The taps are tables built here, one entry per output position: a
    // scale from a hostile file must not make them (or the loop) unbounded.
    if let Some(a) = axes.iter().find(|&&a| p[a].out > MAX_AXIS) {
        return Err(fail(
            n,
            "scales",
            ErrorKind::BadArgument,
            format!(
                "makes axis {a} {} long (from {}); tilejit resizes an axis to at most {MAX_AXIS}",
                p[*a].out, shape[*a]
            ),
        ));
    }
    Ok(p)
}

/// The longest axis a resize makes (its tap tables are this long).
const MAX_AXIS: usize = 1 << 20;

fn resize(n: &Node, x: &Tensor, spec: &Spec, plan: &[AxisPlan]) -> Result<Vec<Tensor>> {
    let float = matches!(
        x.dtype(),
        DType::F32 | DType::F64 | DType::F16 | DType::BF16
    );
    if spec.mode != "nearest" && !float {
        return Err(fail(
            n,
            "mode",
            ErrorKind::Unsupported,
            format!(
                "{} resizing of {:?} tensors is not supported",
                spec.mode,
                x.dtype()
            ),
        ));
    }
    let mut y = x.clone();
    for (a, p) in plan.iter().enumerate() {
        let len = x.shape()[a];
        let identity = (p.scale - 1.0).abs() < 1e-9 && p.out == len && p.roi == (0.0, 1.0);
        if identity || len == 0 {
            continue;
        }
        if spec.antialias && spec.mode != "nearest" && p.scale < 1.0 {
            // Antialiasing widens the window as the scale shrinks: each
            // tap is a traced gather, and its table has `out` rows.
            let reach = if spec.mode == "cubic" { 2.0 } else { 1.0 };
            let k = (2.0 * (reach / p.scale).ceil()) as usize;
            super::super::unrolled(n, "scales", "antialias taps", k)?;
            super::super::folded_len(n, "scales", &[p.out, k])?;
        }
        let taps = taps(spec, len, p);
        y = apply_axis(&y, a, &taps, spec)?;
    }
    one(y)
}

/// One axis's taps: `idx[i]` and `w[i]` list output `i`'s sources and
/// weights (all outputs have as many); `outside[i]`: extrapolated.
struct Taps {
    idx: Vec<Vec<i64>>,
    w: Vec<Vec<f64>>,
    outside: Vec<bool>,
}

fn source_coord(spec: &Spec, len: usize, p: &AxisPlan, y: f64) -> f64 {
    let (inw, outw, outi) = (len as f64, p.scale * len as f64, p.out as f64);
    match spec.coord {
        "align_corners" if outw == 1.0 => 0.0,
        "align_corners" => y * (inw - 1.0) / (outw - 1.0),
        "asymmetric" => y / p.scale,
        "tf_crop_and_resize" => {
            let span = p.roi.1 - p.roi.0;
            let base = if outw == 1.0 {
                span * (inw - 1.0) / 2.0
            } else {
                y * span * (inw - 1.0) / (outw - 1.0)
            };
            base + p.roi.0 * (inw - 1.0)
        }
        "pytorch_half_pixel" if outw == 1.0 => -0.5,
        "half_pixel_symmetric" => {
            let offset = inw / 2.0 * (1.0 - outi / outw);
            offset + (y + 0.5) / p.scale - 0.5
        }
        _ => (y + 0.5) / p.scale - 0.5,
    }
}

fn coeffs(spec: &Spec, ratio: f64, scale: f64) -> Vec<f64> {
    let a = spec.cubic_a;
    match (spec.mode, spec.antialias) {
        ("nearest", _) => {
            let up = match spec.nearest {
                _ if ratio == 1.0 => true,
                "round_prefer_ceil" => ratio >= 0.5,
                "floor" => false,
                "ceil" => true,
                _ => ratio > 0.5,
            };
            vec![f64::from(!up as u8), f64::from(up as u8)]
        }
        ("linear", false) => vec![1.0 - ratio, ratio],
        ("linear", true) => {
            let s = scale.min(1.0);
            let start = (-1.0 / s).floor() as i64 + 1;
            let c: Vec<f64> = (start..start + 2 - 2 * start)
                .map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0))
                .collect();
            normalise(c)
        }
        (_, false) => {
            let (r1, q) = (ratio + 1.0, 1.0 - ratio);
            vec![
                ((a * r1 - 5.0 * a) * r1 + 8.0 * a) * r1 - 4.0 * a,
                ((a + 2.0) * ratio - (a + 3.0)) * ratio * ratio + 1.0,
                ((a + 2.0) * q - (a + 3.0)) * q * q + 1.0,
                ((a * (q + 1.0) - 5.0 * a) * (q + 1.0) + 8.0 * a) * (q + 1.0) - 4.0 * a,
            ]
        }
        (_, true) => {
            let s = scale.min(1.0);
            let start = (-2.0 / s).floor() as i64 + 1;
            let c: Vec<f64> = (start..2 - start)
                .map(|i| {
                    let x = (s * (i as f64 - ratio)).abs();
                    let (x2, x3) = (x * x, x * x * x);
                    if x <= 1.0 {
                        (a + 2.0) * x3 - (a + 3.0) * x2 + 1.0
                    } else if x < 2.0 {
                        a * x3 - 5.0 * a * x2 + 8.0 * a * x - 4.0 * a
                    } else {
                        0.0
                    }
                })
                .collect();
            normalise(c)
        }
    }
}

fn normalise(c: Vec<f64>) -> Vec<f64> {
    let s: f64 = c.iter().sum();
    c.into_iter().map(|v| v / s).collect()
}

fn taps(spec: &Spec, len: usize, p: &AxisPlan) -> Taps {
    let mut t = Taps {
        idx: vec![],
        w: vec![],
        outside: vec![],
    };
    for o in 0..p.out {
        let x = source_coord(spec, len, p, o as f64);
        t.outside
            .push(spec.coord == "tf_crop_and_resize" && (x < 0.0 || x > len as f64 - 1.0));
        if spec.legacy && spec.mode == "nearest" {
            // onnxruntime's "simple" nearest for Resize-10 and Upsample.
            let i = if p.scale < 1.0 { x.ceil() } else { x.floor() };
            t.idx.push(vec![(i as i64).clamp(0, len as i64 - 1)]);
            t.w.push(vec![1.0]);
            continue;
        }
        let ratio = if x == x.floor() { 1.0 } else { x - x.floor() };
        let mut c = coeffs(spec, ratio, p.scale);
        let k = c.len() as i64;
        // The k indices nearest x, ties to the smaller (as the reference).
        let pad = (k + 1) / 2;
        let xp = x + pad as f64;
        let (pp, frac) = (xp.floor() as i64, xp - xp.floor());
        let offset = if k % 2 == 0 {
            if frac == 0.0 {
                -(k / 2)
            } else {
                -(k / 2) + 1
            }
        } else if frac <= 0.5 {
            -((k - 1) / 2)
        } else {
            -((k - 1) / 2) + 1
        };
        let start = pp + offset - pad;
        let raw: Vec<i64> = (start..start + k).collect();
        if spec.exclude_outside {
            for (ci, &i) in c.iter_mut().zip(&raw) {
                if i < 0 || i >= len as i64 {
                    *ci = 0.0;
                }
            }
            let s: f64 = c.iter().sum();
            let s = if s == 0.0 { 1.0 } else { s };
            c.iter_mut().for_each(|v| *v /= s);
        }
        let idx: Vec<i64> = raw.iter().map(|&i| i.clamp(0, len as i64 - 1)).collect();
        if spec.mode == "nearest" {
            let pick = c.iter().position(|&v| v == 1.0).unwrap_or(0);
            t.idx.push(vec![idx[pick]]);
            t.w.push(vec![1.0]);
        } else {
            t.idx.push(idx);
            t.w.push(c);
        }
    }
    t
}

/// Resizes axis `a` of `y`: per tap an `index_select` scaled by its
/// weights (broadcast along the later axes), summed.
fn apply_axis(y: &Tensor, a: usize, t: &Taps, spec: &Spec) -> Result<Tensor> {
    // An earlier axis's error must not reach the shape arithmetic below.
    let y = &super::super::live(y.clone())?;
    let m = t.idx.len();
    let k = t.idx.first().map_or(1, |v| v.len());
    let mut wshape = vec![1; y.rank() - a];
    wshape[0] = m;
    let mut acc: Option<Tensor> = None;
    for j in 0..k {
        let idx = Tensor::from_vec(t.idx.iter().map(|v| v[j]).collect::<Vec<i64>>(), &[m])?;
        let g = y.index_select(a as isize, &idx);
        let term = if spec.mode == "nearest" {
            g
        } else {
            let w: Vec<f64> = t.w.iter().map(|v| v[j]).collect();
            g * Tensor::from_vec(w, &wshape)?.cast(y.dtype())
        };
        acc = Some(match acc {
            None => term,
            Some(s) => s + term,
        });
    }
    let mut out = acc.unwrap_or_else(|| y.clone());
    if t.outside.iter().any(|&o| o) {
        let mask: Vec<bool> = t.outside.clone();
        let mask = Tensor::from_vec(mask, &wshape)?;
        let fill = Tensor::full(&[], spec.extrapolation, y.dtype());
        out = Tensor::where_cond(&mask, &fill, &out);
    }
    Ok(out)
}
