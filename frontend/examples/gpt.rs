//! A small GPT, end to end: weights written to a safetensors file from a
//! seed and read back, token and position embeddings, pre-LN blocks with
//! causal self-attention and an exact-GELU MLP, logits tied to the token
//! embedding, and greedy decoding. The weights are values: one
//! `#[derive(JitArgs)]` struct holding a `Vec` of block structs, passed to
//! one jit function; the blocks are jit functions of their own, called
//! inside it with `?` (and inlined into its trace).
//!
//! ```sh
//! cargo run --release -p tilejit --example gpt           # host
//! TILEJIT_RUN_MODE=sim cargo run --release -p tilejit --example gpt
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use tilejit::prelude::*;

/// Vocabulary size.
pub(crate) const VOCAB: usize = 96;
/// Model width.
pub(crate) const D: usize = 48;
/// Attention heads.
pub(crate) const HEADS: usize = 4;
/// Blocks.
pub(crate) const LAYERS: usize = 2;
/// MLP width.
pub(crate) const FF: usize = 4 * D;
/// Longest sequence (position embeddings).
pub(crate) const CTX: usize = 32;

/// One transformer block's weights.
#[derive(JitArgs)]
pub(crate) struct Block {
    ln1_g: Tensor,
    ln1_b: Tensor,
    wq: Tensor,
    bq: Tensor,
    wk: Tensor,
    bk: Tensor,
    wv: Tensor,
    bv: Tensor,
    wo: Tensor,
    bo: Tensor,
    ln2_g: Tensor,
    ln2_b: Tensor,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

/// The whole model.
#[derive(JitArgs)]
pub(crate) struct Gpt {
    wte: Tensor,
    wpe: Tensor,
    blocks: Vec<Block>,
    lnf_g: Tensor,
    lnf_b: Tensor,
}

impl Block {
    fn to(&self, d: &tilejit::Device) -> tilejit::Result<Block> {
        Ok(Block {
            ln1_g: self.ln1_g.to(d)?,
            ln1_b: self.ln1_b.to(d)?,
            wq: self.wq.to(d)?,
            bq: self.bq.to(d)?,
            wk: self.wk.to(d)?,
            bk: self.bk.to(d)?,
            wv: self.wv.to(d)?,
            bv: self.bv.to(d)?,
            wo: self.wo.to(d)?,
            bo: self.bo.to(d)?,
            ln2_g: self.ln2_g.to(d)?,
            ln2_b: self.ln2_b.to(d)?,
            w1: self.w1.to(d)?,
            b1: self.b1.to(d)?,
            w2: self.w2.to(d)?,
            b2: self.b2.to(d)?,
        })
    }
}

impl Gpt {
    /// The model with every weight on `d` (copied once; calls on it then
    /// run there: the Sim device, or a `tilejit serve` process).
    pub(crate) fn to(&self, d: &tilejit::Device) -> tilejit::Result<Gpt> {
        Ok(Gpt {
            wte: self.wte.to(d)?,
            wpe: self.wpe.to(d)?,
            blocks: self
                .blocks
                .iter()
                .map(|b| b.to(d))
                .collect::<tilejit::Result<_>>()?,
            lnf_g: self.lnf_g.to(d)?,
            lnf_b: self.lnf_b.to(d)?,
        })
    }
}

/// Every weight's name and shape, in file order.
pub(crate) fn weight_shapes() -> Vec<(String, Vec<usize>)> {
    let mut v = vec![
        ("wte".to_string(), vec![VOCAB, D]),
        ("wpe".to_string(), vec![CTX, D]),
    ];
    for l in 0..LAYERS {
        for (name, shape) in [
            ("ln1_g", vec![D]),
            ("ln1_b", vec![D]),
            ("wq", vec![D, D]),
            ("bq", vec![D]),
            ("wk", vec![D, D]),
            ("bk", vec![D]),
            ("wv", vec![D, D]),
            ("bv", vec![D]),
            ("wo", vec![D, D]),
            ("bo", vec![D]),
            ("ln2_g", vec![D]),
            ("ln2_b", vec![D]),
            ("w1", vec![D, FF]),
            ("b1", vec![FF]),
            ("w2", vec![FF, D]),
            ("b2", vec![D]),
        ] {
            v.push((format!("h.{l}.{name}"), shape));
        }
    }
    v.push(("lnf_g".to_string(), vec![D]));
    v.push(("lnf_b".to_string(), vec![D]));
    v
}

/// Writes weights drawn from `seed` to `path`: gains near 1, the rest
/// normal with a GPT-2-like scale.
pub(crate) fn write_weights(path: &Path, seed: u64) -> tilejit::Result<()> {
    let mut tensors = Vec::new();
    for (i, (name, shape)) in weight_shapes().into_iter().enumerate() {
        let r = Tensor::randn(&shape, seed + i as u64);
        let t = if name.ends_with("_g") {
            r * 0.1 + 1.0
        } else if shape.len() == 1 {
            r * 0.02
        } else {
            r * 0.2
        };
        tensors.push((name, t));
    }
    let named: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    tilejit::io::save_safetensors(path, &named)
}

/// Reads the model back from `path`.
pub(crate) fn load(path: &Path) -> tilejit::Result<Gpt> {
    let mut w: BTreeMap<String, Tensor> = tilejit::io::load_safetensors(path)?;
    let mut take = |name: &str| {
        w.remove(name).ok_or_else(|| tilejit::Error::File {
            path: path.to_path_buf(),
            message: format!("no tensor `{name}`"),
        })
    };
    let mut blocks = Vec::new();
    for l in 0..LAYERS {
        let mut b = |n: &str| take(&format!("h.{l}.{n}"));
        blocks.push(Block {
            ln1_g: b("ln1_g")?,
            ln1_b: b("ln1_b")?,
            wq: b("wq")?,
            bq: b("bq")?,
            wk: b("wk")?,
            bk: b("bk")?,
            wv: b("wv")?,
            bv: b("bv")?,
            wo: b("wo")?,
            bo: b("bo")?,
            ln2_g: b("ln2_g")?,
            ln2_b: b("ln2_b")?,
            w1: b("w1")?,
            b1: b("b1")?,
            w2: b("w2")?,
            b2: b("b2")?,
        });
    }
    Ok(Gpt {
        wte: take("wte")?,
        wpe: take("wpe")?,
        blocks,
        lnf_g: take("lnf_g")?,
        lnf_b: take("lnf_b")?,
    })
}

/// Token plus position embeddings of `tokens` (i64, `[t]`).
#[jit]
pub(crate) fn embed(wte: &Tensor, wpe: &Tensor, tokens: &Tensor) -> Tensor {
    let t = tokens.shape()[0] as isize;
    wte.index_select(0, tokens) + wpe.slice(0, 0, t)
}

/// `[t, D]` -> `[HEADS, t, D / HEADS]`.
fn heads(x: &Tensor) -> Tensor {
    let t = x.shape()[0];
    x.reshape(&[t, HEADS, D / HEADS]).permute(&[1, 0, 2])
}

/// Exact GELU: `x * (1 + erf(x / sqrt(2))) / 2`.
fn gelu_exact(x: &Tensor) -> Tensor {
    x * ((x * std::f64::consts::FRAC_1_SQRT_2).erf() + 1.0) * 0.5
}

/// One pre-LN block with causal self-attention.
#[jit]
pub(crate) fn block(x: &Tensor, b: &Block) -> Tensor {
    let t = x.shape()[0];
    let h = x.layer_norm(&b.ln1_g, &b.ln1_b, 1e-5);
    let q = heads(&(h.matmul(&b.wq) + &b.bq));
    let k = heads(&(h.matmul(&b.wk) + &b.bk));
    let v = heads(&(h.matmul(&b.wv) + &b.bv));
    let scores = q.matmul(&k.transpose(-1, -2)) * (1.0 / ((D / HEADS) as f64).sqrt());
    // Position i sees positions <= i: 0 there, -1e9 above the diagonal.
    let hidden = Tensor::ones(&[t, t], DType::F32).triu(1) * -1e9;
    let a = (scores + hidden).softmax(-1).matmul(&v);
    let x = x + a.permute(&[1, 0, 2]).reshape(&[t, D]).matmul(&b.wo) + &b.bo;
    let h = x.layer_norm(&b.ln2_g, &b.ln2_b, 1e-5);
    &x + gelu_exact(&(h.matmul(&b.w1) + &b.b1)).matmul(&b.w2) + &b.b2
}

/// The next-token logits at every position of `tokens` (i64, `[t]`):
/// `[t, VOCAB]`, tied to the token embedding (`layernorm(x) @ wte^T`).
#[jit]
pub(crate) fn forward(m: &Gpt, tokens: &Tensor) -> Tensor {
    let mut x = embed(&m.wte, &m.wpe, tokens)?;
    for b in &m.blocks {
        x = block(&x, b)?;
    }
    x.layer_norm(&m.lnf_g, &m.lnf_b, 1e-5)
        .matmul(&m.wte.transpose(0, 1))
}

/// Greedy decoding: `n` tokens after `prompt`, each the argmax of the last
/// position's logits, computed where the model's weights live (only the
/// token ids go there and one id per step comes back).
pub(crate) fn generate(m: &Gpt, prompt: &[i64], n: usize) -> tilejit::Result<Vec<i64>> {
    let mut tokens = prompt.to_vec();
    let device = m.wte.device();
    for _ in 0..n {
        let ids = Tensor::from_vec(tokens.clone(), &[tokens.len()])?.to(&device)?;
        let l = forward(m, &ids)?;
        let t = tokens.len() as isize;
        let next = l.slice(0, t - 1, t).argmax(-1, false).item::<i64>()?;
        tokens.push(next);
    }
    Ok(tokens[prompt.len()..].to_vec())
}

#[allow(dead_code)] // the test includes this file for its model
fn main() -> tilejit::Result<()> {
    let path = std::env::temp_dir().join(format!("tilejit-gpt-{}.safetensors", std::process::id()));
    write_weights(&path, 2026)?;
    let model = load(&path);
    let _ = std::fs::remove_file(&path);
    let mut model = model?;
    // `cargo run --example gpt --features remote -- --remote ADDR TOKEN`
    // decodes on a `tilejit serve` process instead: the weights are
    // uploaded once.
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, addr, token] = args.as_slice() {
        if flag == "--remote" {
            #[cfg(feature = "remote")]
            {
                model = model.to(&tilejit::Device::remote(addr, token)?)?;
            }
            #[cfg(not(feature = "remote"))]
            {
                let _ = (addr, token, &mut model);
                eprintln!(
                    "--remote needs the remote feature (cargo run --example gpt --features remote)"
                );
                std::process::exit(2);
            }
        }
    }
    println!("on {}", model.wte.device());
    let prompt = [3i64, 14, 15, 92, 65, 35];
    let start = std::time::Instant::now();
    let out = generate(&model, &prompt, 8)?;
    let first = start.elapsed();
    let start = std::time::Instant::now();
    let again = generate(&model, &prompt, 8)?;
    let warm = start.elapsed();
    assert_eq!(out, again, "greedy decoding is deterministic");
    println!("prompt    {prompt:?}");
    println!("generated {out:?}");
    println!(
        "{LAYERS} layers, d={D}, {HEADS} heads, vocab {VOCAB}: first run {:.1} ms (traces and compiles), warm {:.2} ms",
        first.as_secs_f64() * 1e3,
        warm.as_secs_f64() * 1e3
    );
    Ok(())
}
