//! ResNet-18 from a torchvision checkpoint (`resnet18().state_dict()`
//! names), for inference: each eval-mode batch norm is folded into the
//! convolution before it when the model loads
//! ([`tilejit::nn::fold_batch_norm`]; `num_batches_tracked` is not read),
//! so a block is convolutions with a bias, ReLUs and the residual add.
//! The stem's 3x3 max pool pads with -inf; the head is a global average
//! pool and a `linear`. The widths come from the checkpoint, so a narrow
//! ResNet-18-shaped net (the tests') runs through the same code.

use std::collections::BTreeMap;
use std::path::Path;
use tilejit::prelude::*;

/// A convolution with its batch norm folded in.
#[derive(JitArgs)]
pub struct ConvBn {
    /// OIHW.
    w: Tensor,
    /// `[out]`.
    b: Tensor,
    stride: usize,
    padding: usize,
}

/// A basic block: two 3x3 convolutions, and a 1x1 one on the shortcut
/// when the shape changes (`down` holds it, or nothing).
#[derive(JitArgs)]
pub struct Basic {
    c1: ConvBn,
    c2: ConvBn,
    down: Vec<ConvBn>,
}

/// The whole net.
#[derive(JitArgs)]
pub struct ResNet18 {
    stem: ConvBn,
    blocks: Vec<Basic>,
    fc_w: Tensor,
    fc_b: Tensor,
}

/// torchvision's batch norm epsilon.
const EPS: f64 = 1e-5;

fn bad(message: String) -> tilejit::Error {
    tilejit::Error::File {
        path: "ResNet-18 checkpoint".into(),
        message,
    }
}

/// A checkpoint in torchvision's layout with base width `width` (64 for
/// ResNet-18) and `classes` outputs, drawn from `seed`: convolutions
/// normal with std `sqrt(2 / fan_out)` (torchvision's init), batch norms
/// with random statistics and affine terms (so folding them matters).
pub fn random_checkpoint(width: usize, classes: usize, seed: u64) -> BTreeMap<String, Tensor> {
    let mut out = BTreeMap::new();
    // Each tensor draws from its own seed: `seed`, `seed + 1`, ...
    let mut n = seed;
    let mut randn = |shape: &[usize]| {
        n = n.wrapping_add(1);
        Tensor::randn(shape, n)
    };
    let mut conv_bn =
        |out: &mut BTreeMap<String, Tensor>, conv: &str, bn: &str, shape: [usize; 4]| {
            let fan_out = (shape[0] * shape[2] * shape[3]) as f64;
            out.insert(
                format!("{conv}.weight"),
                randn(&shape) * (2.0 / fan_out).sqrt(),
            );
            let c = shape[0];
            out.insert(format!("{bn}.weight"), randn(&[c]) * 0.1 + 1.0);
            out.insert(format!("{bn}.bias"), randn(&[c]) * 0.1);
            out.insert(format!("{bn}.running_mean"), randn(&[c]) * 0.1);
            out.insert(format!("{bn}.running_var"), randn(&[c]).abs() * 0.2 + 0.8);
            out.insert(
                format!("{bn}.num_batches_tracked"),
                Tensor::zeros(&[], DType::I64),
            );
        };
    conv_bn(&mut out, "conv1", "bn1", [width, 3, 7, 7]);
    let mut cin = width;
    for stage in 0..4 {
        let c = width << stage;
        for j in 0..2 {
            let p = format!("layer{}.{j}", stage + 1);
            conv_bn(
                &mut out,
                &format!("{p}.conv1"),
                &format!("{p}.bn1"),
                [c, cin, 3, 3],
            );
            conv_bn(
                &mut out,
                &format!("{p}.conv2"),
                &format!("{p}.bn2"),
                [c, c, 3, 3],
            );
            if j == 0 && stage > 0 {
                let (d0, d1) = (format!("{p}.downsample.0"), format!("{p}.downsample.1"));
                conv_bn(&mut out, &d0, &d1, [c, cin, 1, 1]);
            }
            cin = c;
        }
    }
    let fc = Tensor::randn(&[classes, cin], seed.wrapping_sub(1)) * (1.0 / cin as f64).sqrt();
    out.insert("fc.weight".into(), fc);
    out.insert(
        "fc.bias".into(),
        Tensor::randn(&[classes], seed.wrapping_sub(2)) * 0.01,
    );
    out
}

impl ResNet18 {
    /// The net from a torchvision-layout checkpoint, batch norms folded.
    pub fn from_checkpoint(mut w: BTreeMap<String, Tensor>) -> tilejit::Result<ResNet18> {
        let mut take = |name: &str| {
            w.remove(name)
                .ok_or_else(|| bad(format!("the checkpoint has no tensor `{name}`")))
        };
        let mut conv_bn =
            |conv: &str, bn: &str, stride: usize, padding: usize| -> tilejit::Result<ConvBn> {
                let cw = take(&format!("{conv}.weight"))?;
                let [mean, var, g, b] = ["running_mean", "running_var", "weight", "bias"]
                    .map(|n| take(&format!("{bn}.{n}")));
                let (w, b) = tilejit::nn::fold_batch_norm(&cw, None, &mean?, &var?, &g?, &b?, EPS)?;
                Ok(ConvBn {
                    w,
                    b,
                    stride,
                    padding,
                })
            };
        let stem = conv_bn("conv1", "bn1", 2, 3)?;
        let mut blocks = Vec::new();
        for stage in 1..=4 {
            for j in 0..2 {
                let p = format!("layer{stage}.{j}");
                let stride = if j == 0 && stage > 1 { 2 } else { 1 };
                let down = if j == 0 && stage > 1 {
                    vec![conv_bn(
                        &format!("{p}.downsample.0"),
                        &format!("{p}.downsample.1"),
                        stride,
                        0,
                    )?]
                } else {
                    vec![]
                };
                blocks.push(Basic {
                    c1: conv_bn(&format!("{p}.conv1"), &format!("{p}.bn1"), stride, 1)?,
                    c2: conv_bn(&format!("{p}.conv2"), &format!("{p}.bn2"), 1, 1)?,
                    down,
                });
            }
        }
        Ok(ResNet18 {
            stem,
            blocks,
            fc_w: take("fc.weight")?,
            fc_b: take("fc.bias")?,
        })
    }

    /// [`ResNet18::from_checkpoint`] of a safetensors file.
    pub fn load(path: &Path) -> tilejit::Result<ResNet18> {
        ResNet18::from_checkpoint(tilejit::io::load_safetensors(path)?)
    }
}

/// A convolution with its folded bias (the one place that calls
/// `conv2d`, so a fused bias can replace the broadcast add).
fn conv(x: &Tensor, c: &ConvBn) -> Tensor {
    let o = c.w.shape()[0];
    x.conv2d(&c.w, c.stride, c.padding) + c.b.reshape(&[o, 1, 1])
}

/// The stem's 3x3, stride-2 max pool with one row and column of -inf
/// padding on each side (torch's `MaxPool2d(3, 2, 1)`).
fn max_pool_3x3_s2_p1(x: &Tensor) -> Tensor {
    x.max_pool2d_with(Pool2d {
        stride: (2, 2),
        padding: (1, 1),
        ..Pool2d::new((3, 3))
    })
}

/// The class logits (`[n, classes]`) of NCHW images (`[n, 3, h, w]`).
#[jit]
pub fn forward(m: &ResNet18, images: &Tensor) -> Tensor {
    let mut x = max_pool_3x3_s2_p1(&conv(images, &m.stem).relu());
    for b in &m.blocks {
        let h = conv(&conv(&x, &b.c1).relu(), &b.c2);
        let skip = match b.down.first() {
            Some(d) => conv(&x, d),
            None => x.clone(),
        };
        x = (h + skip).relu();
    }
    x.adaptive_avg_pool2d(1, 1)
        .flatten(1, 3)
        .linear(&m.fc_w, Some(&m.fc_b))
}
