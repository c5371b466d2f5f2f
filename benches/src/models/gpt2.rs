//! GPT-2 (124M and smaller) from a Hugging Face `GPT2LMHeadModel`
//! checkpoint: token and position embeddings, pre-LN blocks with causal
//! self-attention and a tanh-GELU MLP, a final layer norm, and logits tied
//! to the token embedding. HF's `Conv1D` stores `[in, out]` weights, so
//! each projection is `x.matmul(&w) + b`.
//!
//! The weights are one `#[derive(JitArgs)]` value, loaded once and passed to
//! the jit functions: [`forward()`] (all logits of a prompt), [`prefill()`]
//! (the last position's logits and the KV cache) and [`decode_step()`] (one
//! token at a position, against the cache). The cache has a fixed capacity
//! and the position is a runtime tensor, so every decode step runs one
//! program, traced once.

use std::collections::BTreeMap;
use std::path::Path;
use tilejit::prelude::*;

/// A model's sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Transformer blocks.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Model width.
    pub d: usize,
    /// Longest sequence (position embeddings).
    pub ctx: usize,
    /// Vocabulary size.
    pub vocab: usize,
}

impl Config {
    /// GPT-2 small, 124M parameters (HF `GPT2Config()`).
    pub const GPT2_124M: Config = Config {
        layers: 12,
        heads: 12,
        d: 768,
        ctx: 1024,
        vocab: 50257,
    };
}

/// One block's weights (HF names: `h.{i}.ln_1`, `attn.c_attn`, ...).
#[derive(JitArgs)]
pub struct Block {
    ln1_g: Tensor,
    ln1_b: Tensor,
    /// `[d, 3d]`: q, k and v side by side.
    attn_w: Tensor,
    attn_b: Tensor,
    attn_proj_w: Tensor,
    attn_proj_b: Tensor,
    ln2_g: Tensor,
    ln2_b: Tensor,
    fc_w: Tensor,
    fc_b: Tensor,
    mlp_proj_w: Tensor,
    mlp_proj_b: Tensor,
}

/// The whole model; `heads` is static (part of the programs' signature).
#[derive(JitArgs)]
pub struct Gpt2 {
    wte: Tensor,
    wpe: Tensor,
    blocks: Vec<Block>,
    lnf_g: Tensor,
    lnf_b: Tensor,
    heads: usize,
}

/// The per-block weights' HF names (after `h.{i}.`) and shapes.
fn block_names(d: usize) -> [(&'static str, Vec<usize>); 12] {
    [
        ("ln_1.weight", vec![d]),
        ("ln_1.bias", vec![d]),
        ("attn.c_attn.weight", vec![d, 3 * d]),
        ("attn.c_attn.bias", vec![3 * d]),
        ("attn.c_proj.weight", vec![d, d]),
        ("attn.c_proj.bias", vec![d]),
        ("ln_2.weight", vec![d]),
        ("ln_2.bias", vec![d]),
        ("mlp.c_fc.weight", vec![d, 4 * d]),
        ("mlp.c_fc.bias", vec![4 * d]),
        ("mlp.c_proj.weight", vec![4 * d, d]),
        ("mlp.c_proj.bias", vec![d]),
    ]
}

/// A checkpoint in HF's layout (`transformer.` names) drawn from `seed`
/// as HF initialises GPT-2: weights normal with std 0.02, biases zero,
/// layer norms 1 and 0. Plus small random biases and gains, so that every
/// weight matters in a test.
pub fn random_checkpoint(cfg: Config, seed: u64) -> BTreeMap<String, Tensor> {
    let d = cfg.d;
    let mut names: Vec<(String, Vec<usize>)> = vec![
        ("wte.weight".into(), vec![cfg.vocab, d]),
        ("wpe.weight".into(), vec![cfg.ctx, d]),
    ];
    for l in 0..cfg.layers {
        for (n, s) in block_names(d) {
            names.push((format!("h.{l}.{n}"), s));
        }
    }
    names.push(("ln_f.weight".into(), vec![d]));
    names.push(("ln_f.bias".into(), vec![d]));
    names
        .into_iter()
        .enumerate()
        .map(|(i, (name, shape))| {
            let r = Tensor::randn(&shape, seed.wrapping_add(i as u64));
            let t = if shape.len() == 2 {
                r * 0.02
            } else if name.ends_with(".weight") {
                r * 0.05 + 1.0
            } else {
                r * 0.02
            };
            (format!("transformer.{name}"), t)
        })
        .collect()
}

impl Gpt2 {
    /// The model from a checkpoint in HF's `GPT2LMHeadModel` layout, with
    /// or without the `transformer.` prefix (`lm_head.weight`, tied to
    /// `wte`, and the attention's mask buffers are not read). The sizes
    /// come from the weights' shapes; `heads` must divide the width.
    pub fn from_checkpoint(mut w: BTreeMap<String, Tensor>, heads: usize) -> tilejit::Result<Gpt2> {
        let mut take = |name: &str| {
            w.remove(&format!("transformer.{name}"))
                .or_else(|| w.remove(name))
                .ok_or_else(|| bad(format!("the checkpoint has no tensor `{name}`")))
        };
        let wte = take("wte.weight")?;
        let d = wte.dim(1)?;
        if heads == 0 || d % heads != 0 {
            return Err(bad(format!("{heads} heads do not divide the width {d}")));
        }
        let mut blocks = Vec::new();
        for l in 0.. {
            let mut b = |n: &str| take(&format!("h.{l}.{n}"));
            let Ok(ln1_g) = b("ln_1.weight") else { break };
            blocks.push(Block {
                ln1_g,
                ln1_b: b("ln_1.bias")?,
                attn_w: b("attn.c_attn.weight")?,
                attn_b: b("attn.c_attn.bias")?,
                attn_proj_w: b("attn.c_proj.weight")?,
                attn_proj_b: b("attn.c_proj.bias")?,
                ln2_g: b("ln_2.weight")?,
                ln2_b: b("ln_2.bias")?,
                fc_w: b("mlp.c_fc.weight")?,
                fc_b: b("mlp.c_fc.bias")?,
                mlp_proj_w: b("mlp.c_proj.weight")?,
                mlp_proj_b: b("mlp.c_proj.bias")?,
            });
        }
        let m = Gpt2 {
            wte,
            wpe: take("wpe.weight")?,
            blocks,
            lnf_g: take("ln_f.weight")?,
            lnf_b: take("ln_f.bias")?,
            heads,
        };
        // Shapes checked once here, so a wrong checkpoint fails at load.
        let (vocab, ctx) = (
            m.wte.shape()[0],
            m.wpe.shape().first().copied().unwrap_or(0),
        );
        let whole = [
            ("wte.weight", &m.wte, vec![vocab, d]),
            // At least one position: an empty `wpe` is refused too.
            ("wpe.weight", &m.wpe, vec![ctx.max(1), d]),
            ("ln_f.weight", &m.lnf_g, vec![d]),
            ("ln_f.bias", &m.lnf_b, vec![d]),
        ];
        for (n, t, want) in whole {
            if t.shape() != want.as_slice() {
                return Err(bad(format!("{n} is {:?}, expected {want:?}", t.shape())));
            }
        }
        for (i, b) in m.blocks.iter().enumerate() {
            for ((n, want), t) in block_names(d).iter().zip(b.tensors()) {
                if t.shape() != want.as_slice() {
                    return Err(bad(format!(
                        "h.{i}.{n} is {:?}, expected {want:?}",
                        t.shape()
                    )));
                }
            }
        }
        Ok(m)
    }

    /// [`Gpt2::from_checkpoint`] of a safetensors file.
    pub fn load(path: &Path, heads: usize) -> tilejit::Result<Gpt2> {
        Gpt2::from_checkpoint(tilejit::io::load_safetensors(path)?, heads)
    }

    /// The model's sizes.
    pub fn config(&self) -> Config {
        Config {
            layers: self.blocks.len(),
            heads: self.heads,
            d: self.wte.shape()[1],
            ctx: self.wpe.shape()[0],
            vocab: self.wte.shape()[0],
        }
    }
}

impl Block {
    fn tensors(&self) -> [&Tensor; 12] {
        [
            &self.ln1_g,
            &self.ln1_b,
            &self.attn_w,
            &self.attn_b,
            &self.attn_proj_w,
            &self.attn_proj_b,
            &self.ln2_g,
            &self.ln2_b,
            &self.fc_w,
            &self.fc_b,
            &self.mlp_proj_w,
            &self.mlp_proj_b,
        ]
    }
}

fn bad(message: String) -> tilejit::Error {
    tilejit::Error::File {
        path: "GPT-2 checkpoint".into(),
        message,
    }
}

/// `[t, d]` -> `[heads, t, d / heads]`.
fn split_heads(x: &Tensor, heads: usize) -> Tensor {
    let (t, d) = (x.shape()[0], x.shape()[1]);
    x.reshape(&[t, heads, d / heads]).permute(&[1, 0, 2])
}

/// Layer norm 1 and the q, k, v projections of `x` (`[t, d]`), each
/// `[heads, t, d / heads]`.
fn qkv(x: &Tensor, b: &Block, heads: usize) -> (Tensor, Tensor, Tensor) {
    let d = x.shape()[1];
    let h = x.layer_norm(&b.ln1_g, &b.ln1_b, 1e-5);
    let qkv = h.matmul(&b.attn_w) + &b.attn_b;
    let parts = qkv.split(&[d, d, d], 1);
    (
        split_heads(&parts[0], heads),
        split_heads(&parts[1], heads),
        split_heads(&parts[2], heads),
    )
}

/// `softmax(q k^T / sqrt(dh) + mask) v` with the heads merged back:
/// `[tq, d]`. `mask` (0 where a key is seen, -1e9 where not) broadcasts
/// to `[heads, tq, tk]`.
fn attend(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor) -> Tensor {
    let (heads, tq, dh) = (q.shape()[0], q.shape()[1], q.shape()[2]);
    let scores = q.matmul(&k.transpose(-1, -2)) * (1.0 / (dh as f64).sqrt());
    let a = (scores + mask).softmax(-1).matmul(v);
    a.permute(&[1, 0, 2]).reshape(&[tq, heads * dh])
}

/// The rest of a block after attention: output projection, residual,
/// layer norm 2, MLP, residual.
fn block_out(x: &Tensor, a: &Tensor, b: &Block) -> Tensor {
    let x = x + a.matmul(&b.attn_proj_w) + &b.attn_proj_b;
    let h = x.layer_norm(&b.ln2_g, &b.ln2_b, 1e-5);
    &x + (h.matmul(&b.fc_w) + &b.fc_b).gelu().matmul(&b.mlp_proj_w) + &b.mlp_proj_b
}

/// The causal mask of `t` positions: 0 on and below the diagonal, -1e9
/// above.
fn causal_mask(t: usize) -> Tensor {
    Tensor::ones(&[t, t], DType::F32).triu(1) * -1e9
}

/// Logits tied to the token embedding: `x @ wte^T`, the transpose read
/// in place by the matmul (a view, never a copy of the 154 MB weight).
fn lm_head(x: &Tensor, wte: &Tensor) -> Tensor {
    x.matmul(&wte.transpose(0, 1))
}

/// Every position's next-token logits for `tokens` (i64 `[t]`): `[t, vocab]`.
#[jit]
pub fn forward(m: &Gpt2, tokens: &Tensor) -> Tensor {
    let t = tokens.shape()[0];
    let mut x = m.wte.index_select(0, tokens) + m.wpe.slice(0, 0, t as isize);
    let mask = causal_mask(t);
    for b in &m.blocks {
        let (q, k, v) = qkv(&x, b, m.heads);
        x = block_out(&x, &attend(&q, &k, &v, &mask), b);
    }
    lm_head(&x.layer_norm(&m.lnf_g, &m.lnf_b, 1e-5), &m.wte)
}

/// The prompt pass of cached decoding: the last position's logits
/// (`[1, vocab]`) and the keys and values of every block, each
/// `[layers, heads, cap, d / heads]` with positions `t..cap` zero.
#[jit]
pub fn prefill(m: &Gpt2, tokens: &Tensor, cap: usize) -> (Tensor, Tensor, Tensor) {
    let t = tokens.shape()[0];
    let mut x = m.wte.index_select(0, tokens) + m.wpe.slice(0, 0, t as isize);
    let mask = causal_mask(t);
    let (mut ks, mut vs) = (Vec::new(), Vec::new());
    // Padded to the capacity along positions, with a leading layer axis.
    let pad = |c: &Tensor| {
        let s = c.shape().to_vec();
        c.pad(&[(0, 0), (0, cap.saturating_sub(t)), (0, 0)], 0.0)
            .reshape(&[1, s[0], cap, s[2]])
    };
    for b in &m.blocks {
        let (q, k, v) = qkv(&x, b, m.heads);
        x = block_out(&x, &attend(&q, &k, &v, &mask), b);
        ks.push(pad(&k));
        vs.push(pad(&v));
    }
    let last = x.slice(0, t as isize - 1, t as isize);
    let logits = lm_head(&last.layer_norm(&m.lnf_g, &m.lnf_b, 1e-5), &m.wte);
    let cat = |c: &[Tensor]| Tensor::cat(&c.iter().collect::<Vec<_>>(), 0);
    (logits, cat(&ks), cat(&vs))
}

/// `cache` (`[heads, cap, dh]`) with position `pos` (i64 `[1]`) replaced
/// by `new` (`[heads, 1, dh]`): the position is read when the step runs,
/// so one program serves every position, and a position past the
/// capacity fails the call.
fn cache_update(cache: &Tensor, new: &Tensor, pos: &Tensor) -> Tensor {
    cache.slice_assign(1, &pos.reshape(&[]), new)
}

/// One cached decoding step: `token` (i64 `[1]`) at position `pos` (i64
/// `[1]`, below the cache's capacity) against the caches from
/// [`prefill()`] or the previous step. Returns the logits (`[1, vocab]`) and
/// the caches with this position written. Positions above `pos` are
/// masked out, so one program serves every step.
#[jit]
pub fn decode_step(
    m: &Gpt2,
    token: &Tensor,
    pos: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
) -> (Tensor, Tensor, Tensor) {
    step(m, token, pos, k_cache, v_cache)
}

/// [`decode_step()`] with the greedy choice made in the same program: the
/// next token (i64 `[1]`, the logits' argmax) instead of the logits, so a
/// decoding loop pays no eager call between steps.
#[jit]
pub fn greedy_step(
    m: &Gpt2,
    token: &Tensor,
    pos: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
) -> (Tensor, Tensor, Tensor) {
    let (logits, k, v) = step(m, token, pos, k_cache, v_cache);
    (logits.argmax(-1, false), k, v)
}

/// The body of [`decode_step()`].
fn step(
    m: &Gpt2,
    token: &Tensor,
    pos: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
) -> (Tensor, Tensor, Tensor) {
    let s = k_cache.shape().to_vec();
    let (heads, cap, dh) = (s[1], s[2], s[3]);
    let mut x = m.wte.index_select(0, token) + m.wpe.index_select(0, pos);
    let seen = Tensor::arange(cap, DType::I64).le(pos);
    let mask = Tensor::where_cond(
        &seen,
        &Tensor::zeros(&[cap], DType::F32),
        &Tensor::full(&[cap], -1e9, DType::F32),
    );
    let (mut ks, mut vs) = (Vec::new(), Vec::new());
    for (l, b) in m.blocks.iter().enumerate() {
        let layer = |c: &Tensor| {
            c.slice(0, l as isize, l as isize + 1)
                .reshape(&[heads, cap, dh])
        };
        let (q, k, v) = qkv(&x, b, m.heads);
        let k = cache_update(&layer(k_cache), &k, pos);
        let v = cache_update(&layer(v_cache), &v, pos);
        x = block_out(&x, &attend(&q, &k, &v, &mask), b);
        ks.push(k.reshape(&[1, heads, cap, dh]));
        vs.push(v.reshape(&[1, heads, cap, dh]));
    }
    let logits = lm_head(&x.layer_norm(&m.lnf_g, &m.lnf_b, 1e-5), &m.wte);
    let cat = |c: &[Tensor]| Tensor::cat(&c.iter().collect::<Vec<_>>(), 0);
    (logits, cat(&ks), cat(&vs))
}

/// Greedy decoding with a KV cache: the prompt pass, then one
/// [`greedy_step()`] per token.
pub struct Decoder<'m> {
    model: &'m Gpt2,
    k: Tensor,
    v: Tensor,
    /// The position of the next token fed.
    pos: usize,
    /// The last token produced, fed next.
    last: i64,
}

/// The argmax of a `[1, vocab]` logits row.
fn greedy(logits: &Tensor) -> tilejit::Result<i64> {
    first_token(&logits.argmax(-1, false))
}

/// The one token of an i64 `[1]` argmax.
fn first_token(t: &Tensor) -> tilejit::Result<i64> {
    t.check()?
        .to_vec::<i64>()?
        .first()
        .copied()
        .ok_or_else(|| bad("empty logits".into()))
}

impl<'m> Decoder<'m> {
    /// Runs the prompt pass over `prompt` with room for `cap` positions in
    /// all; [`Decoder::last`] is its greedy token.
    pub fn new(model: &'m Gpt2, prompt: &[i64], cap: usize) -> tilejit::Result<Decoder<'m>> {
        let ctx = model.config().ctx;
        if prompt.is_empty() || cap > ctx || prompt.len() > cap {
            return Err(bad(format!(
                "a prompt of {} tokens and a cache of {cap} positions (the model has {ctx})",
                prompt.len()
            )));
        }
        let ids = Tensor::from_vec(prompt.to_vec(), &[prompt.len()])?;
        let (logits, k, v) = prefill(model, &ids, cap)?;
        Ok(Decoder {
            model,
            k,
            v,
            pos: prompt.len(),
            last: greedy(&logits)?,
        })
    }

    /// The token the prompt pass chose, or the last step's.
    pub fn last(&self) -> i64 {
        self.last
    }

    /// Feeds the last token and returns the next one.
    pub fn step(&mut self) -> tilejit::Result<i64> {
        if self.pos >= self.k.shape()[2] {
            return Err(bad(format!("the cache of {} positions is full", self.pos)));
        }
        let token = Tensor::from_vec(vec![self.last], &[1])?;
        let pos = Tensor::from_vec(vec![self.pos as i64], &[1])?;
        let (next, k, v) = greedy_step(self.model, &token, &pos, &self.k, &self.v)?;
        (self.k, self.v, self.pos) = (k, v, self.pos + 1);
        self.last = first_token(&next)?;
        Ok(self.last)
    }
}

/// Greedy decoding of `n >= 1` tokens after `prompt`: the first from the
/// prompt pass, the others from cached steps.
pub fn generate(m: &Gpt2, prompt: &[i64], n: usize) -> tilejit::Result<Vec<i64>> {
    let mut dec = Decoder::new(m, prompt, prompt.len() + n.saturating_sub(1))?;
    let mut out = vec![dec.last()];
    for _ in 1..n {
        out.push(dec.step()?);
    }
    Ok(out)
}
