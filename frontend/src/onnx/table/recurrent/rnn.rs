//! RNN, GRU and LSTM, unrolled over the (static) sequence length: the
//! input projection of every step is one matmul up front, then each step
//! is a matmul with the recurrent weights plus elementwise gates. A
//! `sequence_lens` input masks steps past each batch entry's length (the
//! state is held, the output zero), which also makes the reverse direction
//! start at each entry's own last step.

use super::super::{attr_f, attr_i, attr_s, fail, opt, req, unrolled, Cx};
use crate::error::Result;
use crate::onnx::model::{Attr, Node};
use crate::tensor::Tensor;
use tilejit_ir::{DType, ErrorKind};

/// Which cell a node runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    fn of(n: &Node) -> Cell {
        match n.op.as_str() {
            "GRU" => Cell::Gru,
            "LSTM" => Cell::Lstm,
            _ => Cell::Rnn,
        }
    }

    /// Gates per step (rows of W per hidden unit).
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    /// The default activations of one direction.
    fn default_acts(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// The attributes of the three ops.
pub(super) const ATTRS: &[&str] = &[
    "activation_alpha",
    "activation_beta",
    "activations",
    "clip",
    "direction",
    "hidden_size",
    "layout",
    "linear_before_reset",
    "input_forget",
];

/// An activation with its alpha and beta.
#[derive(Clone, Copy)]
struct Act {
    f: ActFn,
    alpha: f64,
    beta: f64,
}

#[derive(Clone, Copy)]
enum ActFn {
    Relu,
    Tanh,
    Sigmoid,
    Affine,
    LeakyRelu,
    ThresholdedRelu,
    ScaledTanh,
    HardSigmoid,
    Elu,
    Softsign,
    Softplus,
}

/// An activation by name, with its default alpha and beta and whether it
/// reads each (only those take values from the alpha and beta lists).
fn act_fn(name: &str) -> Option<(ActFn, Option<f64>, Option<f64>)> {
    use ActFn::*;
    Some(match name.to_ascii_lowercase().as_str() {
        "relu" => (Relu, None, None),
        "tanh" => (Tanh, None, None),
        "sigmoid" => (Sigmoid, None, None),
        "affine" => (Affine, Some(1.0), Some(0.0)),
        "leakyrelu" => (LeakyRelu, Some(0.01), None),
        "thresholdedrelu" => (ThresholdedRelu, Some(1.0), None),
        "scaledtanh" => (ScaledTanh, Some(1.0), Some(1.0)),
        "hardsigmoid" => (HardSigmoid, Some(0.2), Some(0.5)),
        "elu" => (Elu, Some(1.0), None),
        "softsign" => (Softsign, None, None),
        "softplus" => (Softplus, None, None),
        _ => return None,
    })
}

impl Act {
    fn apply(&self, x: &Tensor) -> Tensor {
        let zero = Tensor::full(&[], 0.0, x.dtype());
        let (a, b) = (self.alpha, self.beta);
        match self.f {
            ActFn::Relu => x.relu(),
            ActFn::Tanh => x.tanh(),
            ActFn::Sigmoid => x.sigmoid(),
            ActFn::Affine => x * a + b,
            ActFn::LeakyRelu => Tensor::where_cond(&x.lt(&zero), &(x * a), x),
            ActFn::ThresholdedRelu => {
                Tensor::where_cond(&x.gt(&Tensor::full(&[], a, x.dtype())), x, &zero)
            }
            ActFn::ScaledTanh => (x * b).tanh() * a,
            ActFn::HardSigmoid => {
                (x * a + b)
                    .maximum(&zero)
                    .minimum(&Tensor::full(&[], 1.0, x.dtype()))
            }
            ActFn::Elu => Tensor::where_cond(&x.lt(&zero), &((x.exp() - 1.0) * a), x),
            ActFn::Softsign => x / (x.abs() + 1.0),
            ActFn::Softplus => (x.exp() + 1.0).log(),
        }
    }
}

fn floats(n: &Node, name: &str) -> Result<Vec<f32>> {
    match n.attrs.get(name) {
        None => Ok(Vec::new()),
        Some(Attr::Floats(v)) => Ok(v.clone()),
        Some(_) => Err(fail(
            n,
            name,
            ErrorKind::BadArgument,
            "must be a list of floats",
        )),
    }
}

fn directions(n: &Node) -> Result<usize> {
    match attr_s(n, "direction", "forward")? {
        "forward" | "reverse" => Ok(1),
        "bidirectional" => Ok(2),
        d => Err(fail(
            n,
            "direction",
            ErrorKind::BadArgument,
            format!("`{d}` is not forward, reverse or bidirectional"),
        )),
    }
}

/// The activations of every direction, in order (f, g[, h] per direction).
fn activations(n: &Node, cell: Cell, dirs: usize) -> Result<Vec<Act>> {
    let names: Vec<String> = match n.attrs.get("activations") {
        None => std::iter::repeat_n(cell.default_acts(), dirs)
            .flatten()
            .map(|s| s.to_string())
            .collect(),
        Some(Attr::Strs(v)) => v.clone(),
        Some(_) => {
            return Err(fail(
                n,
                "activations",
                ErrorKind::BadArgument,
                "must be a list of strings",
            ))
        }
    };
    let want = cell.default_acts().len() * dirs;
    if names.len() != want {
        return Err(fail(
            n,
            "activations",
            ErrorKind::BadArgument,
            format!("{} activations given, {want} needed", names.len()),
        ));
    }
    let (alphas, betas) = (
        floats(n, "activation_alpha")?,
        floats(n, "activation_beta")?,
    );
    let (mut ai, mut bi) = (alphas.iter(), betas.iter());
    names
        .iter()
        .map(|name| {
            let (f, da, db) = act_fn(name).ok_or_else(|| {
                fail(
                    n,
                    "activations",
                    ErrorKind::Unsupported,
                    format!("activation `{name}` is not supported"),
                )
            })?;
            // Only activations that read alpha (beta) consume a value.
            let alpha = da.map(|d| ai.next().map_or(d, |&v| v as f64));
            let beta = db.map(|d| bi.next().map_or(d, |&v| v as f64));
            Ok(Act {
                f,
                alpha: alpha.unwrap_or(0.0),
                beta: beta.unwrap_or(0.0),
            })
        })
        .collect()
}

pub(super) fn check(n: &Node, _: &Cx) -> Result<()> {
    let cell = Cell::of(n);
    let dirs = directions(n)?;
    activations(n, cell, dirs)?;
    if !matches!(attr_i(n, "layout", 0)?, 0 | 1) {
        return Err(fail(n, "layout", ErrorKind::BadArgument, "must be 0 or 1"));
    }
    if attr_f(n, "clip", 1.0)? <= 0.0 {
        return Err(fail(n, "clip", ErrorKind::BadArgument, "must be positive"));
    }
    let only = |attr: &str, ok: Cell| -> Result<()> {
        if n.attrs.contains_key(attr) && cell != ok {
            return Err(fail(
                n,
                attr,
                ErrorKind::Unsupported,
                "this attribute is not supported",
            ));
        }
        Ok(())
    };
    only("linear_before_reset", Cell::Gru)?;
    only("input_forget", Cell::Lstm)?;
    if n.outputs.len() > 3 || (cell != Cell::Lstm && n.outputs.len() > 2) {
        return Err(fail(
            n,
            "outputs",
            ErrorKind::BadArgument,
            format!(
                "{} outputs, at most {}",
                n.outputs.len(),
                cell.gates().min(3)
            ),
        ));
    }
    Ok(())
}

/// One direction's weights, sliced from the stacked inputs.
struct Dir {
    /// W^T: [input, gates*hidden].
    wt: Tensor,
    /// R^T: [hidden, gates*hidden].
    rt: Tensor,
    /// GRU's R^T split into its z and r part and its h part.
    rzr: Tensor,
    rh: Tensor,
    /// Wb and Rb: [gates*hidden] each.
    wb: Tensor,
    rb: Tensor,
    /// LSTM peepholes i, o, f: [hidden] each.
    p: Option<[Tensor; 3]>,
    h0: Tensor,
    c0: Tensor,
    acts: Vec<Act>,
    reverse: bool,
}

fn pick(t: &Tensor, d: usize) -> Tensor {
    let s = t.shape()[1..].to_vec();
    t.slice(0, d as isize, d as isize + 1).reshape(&s)
}

fn shape_is(n: &Node, what: &str, t: &Tensor, want: &[usize]) -> Result<()> {
    if t.shape() != want {
        return Err(fail(
            n,
            what,
            ErrorKind::Shape,
            format!("shape {:?}, expected {want:?}", t.shape()),
        ));
    }
    Ok(())
}

pub(super) fn build(n: &Node, _: &Cx, ins: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let cell = Cell::of(n);
    let g = cell.gates();
    let dirs = directions(n)?;
    let acts = activations(n, cell, dirs)?;
    let per = cell.default_acts().len();
    let layout = attr_i(n, "layout", 0)?;
    let clip = n
        .attrs
        .contains_key("clip")
        .then(|| attr_f(n, "clip", 0.0))
        .transpose()?
        .map(|c| c as f64);
    let mut x = req(n, ins, 0)?.clone();
    if x.rank() != 3 {
        return Err(fail(
            n,
            "X",
            ErrorKind::Shape,
            format!("rank {}, expected 3", x.rank()),
        ));
    }
    if layout == 1 {
        x = x.permute(&[1, 0, 2]);
    }
    let (steps, batch, input) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let steps = unrolled(n, "X", "time steps", steps)?;
    let (w, r) = (req(n, ins, 1)?, req(n, ins, 2)?);
    if r.rank() != 3 {
        return Err(fail(n, "R", ErrorKind::Shape, "must be of rank 3"));
    }
    let hidden = r.shape()[2];
    if let Some(h) = n
        .attrs
        .get("hidden_size")
        .map(|_| attr_i(n, "hidden_size", 0))
    {
        if h? != hidden as i64 {
            return Err(fail(
                n,
                "hidden_size",
                ErrorKind::Shape,
                format!("differs from R's hidden size {hidden}"),
            ));
        }
    }
    let dt = x.dtype();
    shape_is(n, "W", w, &[dirs, g * hidden, input])?;
    shape_is(n, "R", r, &[dirs, g * hidden, hidden])?;
    let b = match opt(ins, 3) {
        Some(b) => {
            shape_is(n, "B", b, &[dirs, 2 * g * hidden])?;
            b.clone()
        }
        None => Tensor::zeros(&[dirs, 2 * g * hidden], dt),
    };
    let state = |i: usize, what: &str| -> Result<Tensor> {
        match opt(ins, i) {
            Some(t) => {
                let t = if layout == 1 {
                    t.permute(&[1, 0, 2])
                } else {
                    t.clone()
                };
                shape_is(n, what, &t, &[dirs, batch, hidden])?;
                Ok(t)
            }
            None => Ok(Tensor::zeros(&[dirs, batch, hidden], dt)),
        }
    };
    let h0 = state(5, "initial_h")?;
    let c0 = if cell == Cell::Lstm {
        state(6, "initial_c")?
    } else {
        h0.clone()
    };
    let peep = match opt(ins, 7).filter(|_| cell == Cell::Lstm) {
        Some(p) => {
            shape_is(n, "P", p, &[dirs, 3 * hidden])?;
            Some(p.clone())
        }
        None => None,
    };
    // Per step, which batch entries are still inside their sequence.
    let masks = match opt(ins, 4) {
        Some(lens) => {
            shape_is(n, "sequence_lens", lens, &[batch])?;
            let lens = lens.cast(DType::I64).reshape(&[batch, 1]);
            let masks: Vec<Tensor> = (0..steps)
                .map(|t| Tensor::full(&[], t as f64, DType::I64).lt(&lens))
                .collect();
            Some(masks)
        }
        None => None,
    };
    let reverse = attr_s(n, "direction", "forward")? == "reverse";
    let xs = x.reshape(&[steps * batch, input]);
    let mut ys = Vec::with_capacity(dirs);
    let mut hs = Vec::with_capacity(dirs);
    let mut cs = Vec::with_capacity(dirs);
    for d in 0..dirs {
        let bd = pick(&b, d);
        let gh = g * hidden;
        let dir = Dir {
            wt: pick(w, d).permute(&[1, 0]),
            rt: pick(r, d).permute(&[1, 0]),
            rzr: pick(r, d).slice(0, 0, 2 * hidden as isize).permute(&[1, 0]),
            rh: pick(r, d)
                .slice(0, 2 * hidden as isize, gh as isize)
                .permute(&[1, 0]),
            wb: bd.slice(0, 0, gh as isize),
            rb: bd.slice(0, gh as isize, 2 * gh as isize),
            p: peep.as_ref().map(|p| {
                let p = pick(p, d);
                let part = |k: isize| p.slice(0, k * hidden as isize, (k + 1) * hidden as isize);
                [part(0), part(1), part(2)]
            }),
            h0: pick(&h0, d),
            c0: pick(&c0, d),
            acts: acts[d * per..(d + 1) * per].to_vec(),
            reverse: reverse || d == 1,
        };
        let lbr = attr_i(n, "linear_before_reset", 0)? != 0;
        let forget = attr_i(n, "input_forget", 0)? != 0;
        let (y, h, c) = run_dir(
            cell,
            &dir,
            &xs,
            [steps, batch, hidden],
            clip,
            lbr,
            forget,
            masks.as_deref(),
        );
        ys.push(y);
        hs.push(h);
        cs.push(c);
    }
    let stack = |v: &[Tensor], a: isize| -> Tensor {
        let refs: Vec<&Tensor> = v.iter().collect();
        if refs.len() == 1 {
            refs[0].clone()
        } else {
            Tensor::cat(&refs, a)
        }
    };
    // Y: [steps, dirs, batch, hidden]; Y_h, Y_c: [dirs, batch, hidden].
    let mut y = stack(&ys, 1);
    let mut yh = stack(&hs, 0);
    let mut yc = stack(&cs, 0);
    if layout == 1 {
        y = y.permute(&[2, 0, 1, 3]);
        yh = yh.permute(&[1, 0, 2]);
        yc = yc.permute(&[1, 0, 2]);
    }
    let mut outs = vec![y, yh];
    if cell == Cell::Lstm {
        outs.push(yc);
    }
    Ok(outs)
}

fn clip_to(x: Tensor, clip: Option<f64>) -> Tensor {
    match clip {
        Some(c) => x
            .maximum(&Tensor::full(&[], -c, x.dtype()))
            .minimum(&Tensor::full(&[], c, x.dtype())),
        None => x,
    }
}

/// One direction over every step: (Y [steps, 1, batch, hidden], last H,
/// last C), each of the latter [1, batch, hidden].
#[allow(clippy::too_many_arguments)]
fn run_dir(
    cell: Cell,
    d: &Dir,
    xs: &Tensor,
    [steps, batch, hidden]: [usize; 3],
    clip: Option<f64>,
    linear_before_reset: bool,
    input_forget: bool,
    masks: Option<&[Tensor]>,
) -> (Tensor, Tensor, Tensor) {
    let gh = cell.gates() * hidden;
    // Every step's input projection at once, with both biases for the
    // gates whose recurrent part is not reset (all but GRU's h).
    let xw = (xs.matmul(&d.wt) + &d.wb).reshape(&[steps, batch, gh]);
    let part = |t: &Tensor, k: usize| {
        t.slice(
            t.rank() as isize - 1,
            (k * hidden) as isize,
            ((k + 1) * hidden) as isize,
        )
    };
    let (mut h, mut c) = (d.h0.clone(), d.c0.clone());
    let mut ys: Vec<Option<Tensor>> = vec![None; steps];
    let order: Vec<usize> = match d.reverse {
        true => (0..steps).rev().collect(),
        false => (0..steps).collect(),
    };
    let f = |k: usize, x: Tensor| d.acts[k].apply(&clip_to(x, clip));
    for t in order {
        let xt = xw
            .slice(0, t as isize, t as isize + 1)
            .reshape(&[batch, gh]);
        let (h_new, c_new) = match cell {
            Cell::Rnn => (f(0, xt + h.matmul(&d.rt) + &d.rb), c.clone()),
            Cell::Lstm => {
                let gates = xt + h.matmul(&d.rt) + &d.rb;
                let (gi, go, gf, gc) = (
                    part(&gates, 0),
                    part(&gates, 1),
                    part(&gates, 2),
                    part(&gates, 3),
                );
                let (gi, gf) = match &d.p {
                    Some([pi, _, pf]) => (gi + pi * &c, gf + pf * &c),
                    None => (gi, gf),
                };
                let i = f(0, gi);
                // input_forget couples the gates: f = 1 - i.
                let fg = match input_forget {
                    true => i.rsub(1.0),
                    false => f(0, gf),
                };
                let cc = f(1, gc);
                let c_new = fg * &c + &i * cc;
                let go = match &d.p {
                    Some([_, po, _]) => go + po * &c_new,
                    None => go,
                };
                let o = f(0, go);
                (o * f(2, c_new.clone()), c_new)
            }
            Cell::Gru => {
                let zr = h.matmul(&d.rzr);
                let rb = &d.rb;
                let z = f(0, part(&xt, 0) + part(&zr, 0) + part(rb, 0));
                let r = f(0, part(&xt, 1) + part(&zr, 1) + part(rb, 1));
                let rh = &d.rh;
                let hh = match linear_before_reset {
                    true => part(&xt, 2) + r * (h.matmul(rh) + part(rb, 2)),
                    false => part(&xt, 2) + (r * &h).matmul(rh) + part(rb, 2),
                };
                let hh = f(1, hh);
                (z.rsub(1.0) * hh + z * &h, c.clone())
            }
        };
        let y = match masks {
            Some(m) => {
                let zero = Tensor::zeros(&[], h_new.dtype());
                let y = Tensor::where_cond(&m[t], &h_new, &zero);
                h = Tensor::where_cond(&m[t], &h_new, &h);
                c = Tensor::where_cond(&m[t], &c_new, &c);
                y
            }
            None => {
                h = h_new.clone();
                c = c_new;
                h_new
            }
        };
        ys[t] = Some(y.reshape(&[1, 1, batch, hidden]));
    }
    let ys: Vec<Tensor> = ys.into_iter().flatten().collect();
    let refs: Vec<&Tensor> = ys.iter().collect();
    let y = if refs.len() == 1 {
        refs[0].clone()
    } else {
        Tensor::cat(&refs, 0)
    };
    (
        y,
        h.reshape(&[1, batch, hidden]),
        c.reshape(&[1, batch, hidden]),
    )
}
