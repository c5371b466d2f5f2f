//! Signal rows: DFT as matmuls against cos and sin matrices computed while
//! tracing (forward, inverse, one-sided forward and one-sided inverse, as
//! numpy's fft, ifft, rfft and irfft), STFT as framing, windowing and the
//! same DFT, and MelWeightMatrix, whose operands are all known then.

use super::{
    attr_i, axis, fail, floats_of, folded_len, ints_of, live, mem, opt, req, Cx, Kind, Row,
};
use crate::error::Result;
use crate::onnx::model::{dtype_of, Node};
use crate::tensor::Tensor;
use std::f64::consts::PI;
use tilejit_ir::{DType, ErrorKind};

pub(super) static ROWS: &[Row] = &[
    Row {
        op: "DFT",
        attrs: &["axis", "inverse", "onesided"],
        check: check_dft,
        kind: Kind::Node(build_dft),
    },
    Row {
        op: "STFT",
        attrs: &["onesided"],
        check: super::no_check,
        kind: Kind::Node(build_stft),
    },
    Row {
        op: "MelWeightMatrix",
        attrs: &["output_datatype"],
        check: check_mel,
        kind: Kind::Node(build_mel),
    },
];

fn check_dft(n: &Node, cx: &Cx) -> Result<()> {
    if cx.opset >= 20 && n.attrs.contains_key("axis") {
        return Err(fail(
            n,
            "axis",
            ErrorKind::BadArgument,
            "from opset 20 the axis is an input",
        ));
    }
    Ok(())
}

/// The DFT of `(re, im)` along the last axis, length `len` after cutting
/// or zero-padding; `(re, im)` of the result, `im` `None` for irfft. Its
/// cos and sin matrices are `[bins, bins]` tables: past the trace-time
/// limit they are an error naming `what` (the attribute that set `len`).
fn dft_last(
    (n, what): (&Node, &str),
    re: &Tensor,
    im: Option<&Tensor>,
    len: usize,
    inverse: bool,
    onesided: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    // Input bins read: all `len`, or the one-sided half for irfft.
    let bins_in = if inverse && onesided {
        len / 2 + 1
    } else {
        len
    };
    let bins_out = if !inverse && onesided {
        len / 2 + 1
    } else {
        len
    };
    let fit = |x: &Tensor| {
        let l = *x.shape().last().unwrap_or(&0);
        let r = x.rank() as isize;
        match l.cmp(&bins_in) {
            std::cmp::Ordering::Equal => x.clone(),
            std::cmp::Ordering::Greater => x.slice(r - 1, 0, bins_in as isize),
            std::cmp::Ordering::Less => {
                let mut p = vec![(0, 0); x.rank()];
                p[x.rank() - 1] = (0, bins_in - l);
                x.pad(&p, 0.0)
            }
        }
    };
    // A pad past the size limits is an error tensor, without axes.
    let (re, im) = (live(fit(re))?, im.map(fit).map(live).transpose()?);
    // cos and sin of 2 pi k n / len, as [bins_in, bins_out] f64 -> f32.
    let bins = folded_len(n, what, &[bins_in, bins_out])?;
    let mut c = Vec::with_capacity(bins);
    let mut s = Vec::with_capacity(bins);
    let norm = if inverse { 1.0 / len as f64 } else { 1.0 };
    for j in 0..bins_in {
        // irfft counts the bins other than 0 and len/2 twice (Hermitian).
        let twice = inverse && onesided && j != 0 && !(len.is_multiple_of(2) && j == len / 2);
        let w = norm * if twice { 2.0 } else { 1.0 };
        for k in 0..bins_out {
            let a = 2.0 * PI * ((j * k) % len.max(1)) as f64 / len.max(1) as f64;
            c.push((a.cos() * w) as f32);
            s.push((a.sin() * w) as f32);
        }
    }
    let cm = Tensor::from_vec(c, &[bins_in, bins_out]).expect("sizes match");
    let sm = Tensor::from_vec(s, &[bins_in, bins_out]).expect("sizes match");
    let mm = |x: &Tensor, m: &Tensor| {
        let sh = x.shape().to_vec();
        let rows: usize = sh[..sh.len() - 1].iter().product();
        let mut out = sh.clone();
        *out.last_mut().expect("rank >= 1") = bins_out;
        x.reshape(&[rows, bins_in]).matmul(m).reshape(&out)
    };
    // Forward: re' = re c + im s, im' = im c - re s; inverse flips sin.
    let sign = if inverse { -1.0 } else { 1.0 };
    let mut out_re = mm(&re, &cm);
    let mut out_im = mm(&re, &sm) * -sign;
    if let Some(im) = &im {
        out_re = out_re + mm(im, &sm) * sign;
        out_im = out_im + mm(im, &cm);
    }
    Ok(match inverse && onesided {
        true => (out_re, None),
        false => (out_re, Some(out_im)),
    })
}

/// Splits `[..., 1 or 2]` into its real and imaginary parts.
fn complex(n: &Node, x: &Tensor) -> Result<(Tensor, Option<Tensor>)> {
    let r = x.rank();
    let last = x.shape().last().copied().unwrap_or(0);
    if r < 2 || !(last == 1 || last == 2) {
        return Err(fail(
            n,
            "input",
            ErrorKind::Shape,
            format!(
                "must end in a dim of 1 (real) or 2 (complex), got {:?}",
                x.shape()
            ),
        ));
    }
    let sh = &x.shape()[..r - 1];
    let part = |i: isize| x.slice(r as isize - 1, i, i + 1).reshape(sh);
    Ok((part(0), (last == 2).then(|| part(1))))
}

/// Stacks `(re, im)` on a new last axis (`im` `None`: a real result).
fn stack(re: Tensor, im: Option<Tensor>) -> Tensor {
    let mut sh = re.shape().to_vec();
    sh.push(1);
    let re = re.reshape(&sh);
    match im {
        None => re,
        Some(im) => Tensor::cat(&[&re, &im.reshape(&sh)], sh.len() as isize - 1),
    }
}

fn one_int(n: &Node, what: &str, t: &Tensor) -> Result<i64> {
    match ints_of(n, what, t)?[..] {
        [v] => Ok(v),
        ref v => Err(fail(
            n,
            what,
            ErrorKind::Shape,
            format!("must hold one value, has {}", v.len()),
        )),
    }
}

fn positive(n: &Node, what: &str, v: i64) -> Result<usize> {
    usize::try_from(v).ok().filter(|&v| v > 0).ok_or_else(|| {
        fail(
            n,
            what,
            ErrorKind::BadArgument,
            format!("must be positive, got {v}"),
        )
    })
}

fn build_dft(n: &Node, cx: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let inverse = attr_i(n, "inverse", 0)? != 0;
    let onesided = attr_i(n, "onesided", 0)? != 0;
    let (re, im) = complex(n, x)?;
    let a = match (cx.opset >= 20, opt(ins, 2)) {
        (true, Some(t)) => one_int(n, "axis", t)?,
        (true, None) => -2,
        (false, _) => attr_i(n, "axis", 1)?,
    };
    // The axis counts the trailing complex dim; it may not be it.
    let a = axis(n, "axis", a, x.rank())?;
    if a == x.rank() - 1 {
        return Err(fail(
            n,
            "axis",
            ErrorKind::BadArgument,
            "the axis is the real/imaginary one",
        ));
    }
    let l = re.shape()[a];
    let len = match opt(ins, 1) {
        Some(t) => positive(n, "dft_length", one_int(n, "dft_length", t)?)?,
        None if inverse && onesided => positive(n, "dft_length", 2 * (l as i64 - 1))?,
        None => l,
    };
    let last = re.rank() - 1;
    let mut perm: Vec<usize> = (0..re.rank()).filter(|&d| d != a).collect();
    perm.push(a);
    let mut back = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        back[p] = i;
    }
    let to_last = |t: &Tensor| match a == last {
        true => t.clone(),
        false => t.permute(&perm),
    };
    let from_last = |t: Tensor| match a == last {
        true => t,
        false => t.permute(&back),
    };
    let dt = x.dtype();
    let (re, im) = (
        to_last(&re.cast(DType::F32)),
        im.map(|t| to_last(&t.cast(DType::F32))),
    );
    let (yr, yi) = dft_last((n, "dft_length"), &re, im.as_ref(), len, inverse, onesided)?;
    Ok(vec![stack(from_last(yr), yi.map(from_last)).cast(dt)])
}

fn build_stft(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = req(n, ins, 0)?;
    let onesided = attr_i(n, "onesided", 1)? != 0;
    let step = positive(n, "frame_step", one_int(n, "frame_step", req(n, ins, 1)?)?)?;
    let (re, im) = complex(n, x)?;
    if re.rank() != 2 {
        return Err(fail(
            n,
            "signal",
            ErrorKind::Shape,
            format!("must be [batch, length, 1 or 2], got {:?}", x.shape()),
        ));
    }
    let sig_len = re.shape()[1];
    let window = opt(ins, 2);
    let frame = match (opt(ins, 3), window) {
        (Some(t), _) => positive(n, "frame_length", one_int(n, "frame_length", t)?)?,
        (None, Some(w)) => w.numel(),
        (None, None) => sig_len,
    };
    if let Some(w) = window {
        if w.shape() != [frame] {
            return Err(fail(
                n,
                "window",
                ErrorKind::Shape,
                format!("must be [{frame}], got {:?}", w.shape()),
            ));
        }
    }
    if frame > sig_len {
        return Err(fail(
            n,
            "frame_length",
            ErrorKind::BadArgument,
            format!("a frame of {frame} is longer than the signal's {sig_len}"),
        ));
    }
    let frames = super::unrolled(n, "frame_step", "frames", 1 + (sig_len - frame) / step)?;
    let framed = |t: &Tensor| {
        let parts: Vec<Tensor> = (0..frames)
            .map(|f| {
                let s = t.slice(1, (f * step) as isize, (f * step + frame) as isize);
                let mut sh = s.shape().to_vec();
                sh.insert(1, 1);
                s.reshape(&sh)
            })
            .collect();
        let refs: Vec<&Tensor> = parts.iter().collect();
        let y = match refs.len() {
            1 => parts[0].clone(),
            _ => Tensor::cat(&refs, 1),
        };
        match window {
            Some(w) => y * w.cast(DType::F32).reshape(&[1, 1, frame]),
            None => y,
        }
    };
    let dt = x.dtype();
    let re = framed(&re.cast(DType::F32));
    let im = im.map(|t| framed(&t.cast(DType::F32)));
    let (yr, yi) = dft_last(
        (n, "frame_length"),
        &re,
        im.as_ref(),
        frame,
        false,
        onesided,
    )?;
    Ok(vec![stack(yr, yi).cast(dt)])
}

fn check_mel(n: &Node, _: &Cx) -> Result<()> {
    if let Some(super::Attr::Int(code)) = n.attrs.get("output_datatype") {
        dtype_of(*code as i32)
            .map_err(|m| fail(n, "output_datatype", ErrorKind::Unsupported, m))?;
    }
    Ok(())
}

fn build_mel(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let mels = positive(
        n,
        "num_mel_bins",
        one_int(n, "num_mel_bins", req(n, ins, 0)?)?,
    )?;
    let dft_len = positive(n, "dft_length", one_int(n, "dft_length", req(n, ins, 1)?)?)?;
    let rate = positive(
        n,
        "sample_rate",
        one_int(n, "sample_rate", req(n, ins, 2)?)?,
    )?;
    let f1 = |i: usize, what: &str| -> Result<f64> {
        match floats_of(n, what, req(n, ins, i)?)?[..] {
            [v] => Ok(v),
            _ => Err(fail(n, what, ErrorKind::Shape, "must hold one value")),
        }
    };
    let (lo, hi) = (f1(3, "lower_edge_hertz")?, f1(4, "upper_edge_hertz")?);
    let spec_bins = dft_len / 2 + 1;
    folded_len(n, "num_mel_bins", &[spec_bins, mels + 2])?;
    let mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / 10f64.ln();
    let (lo_mel, hi_mel) = (mel(lo), mel(hi));
    let step = (hi_mel - lo_mel) / (mels + 2) as f64;
    let bins: Vec<i64> = (0..mels + 2)
        .map(|i| {
            let m = i as f64 * step + lo_mel;
            let hz = 700.0 * (m / 2595.0 * 10f64.ln()).exp_m1();
            (((dft_len + 1) as f64 * hz) / rate as f64).floor() as i64
        })
        .collect();
    // Within the table limit checked above.
    let mut out = mem(tilejit_ir::fallible::filled(spec_bins * mels, 0.0f64))?;
    let mut set = |j: i64, i: usize, v: f64| -> Result<()> {
        match usize::try_from(j).ok().filter(|&j| j < spec_bins) {
            Some(j) => {
                out[j * mels + i] = v;
                Ok(())
            }
            None => Err(fail(
                n,
                "upper_edge_hertz",
                ErrorKind::BadArgument,
                format!("frequency bin {j} is outside the {spec_bins} spectrogram bins"),
            )),
        }
    };
    for i in 0..mels {
        let (l, c, h) = (bins[i], bins[i + 1], bins[i + 2]);
        if c == l {
            set(c, i, 1.0)?;
        } else {
            for j in l..=c {
                set(j, i, (j - l) as f64 / (c - l) as f64)?;
            }
        }
        if h > c {
            for j in c..h {
                set(j, i, (h - j) as f64 / (h - c) as f64)?;
            }
        }
    }
    let dt = match n.attrs.get("output_datatype") {
        Some(super::Attr::Int(code)) => dtype_of(*code as i32)
            .map_err(|m| fail(n, "output_datatype", ErrorKind::Unsupported, m))?,
        _ => DType::F32,
    };
    Ok(vec![Tensor::from_vec(out, &[spec_bins, mels])?.cast(dt)])
}
