//! GPT-2 124M: the logits of a prompt and greedy decoding with a KV cache,
//! from a Hugging Face `GPT2LMHeadModel` safetensors file, or from random
//! weights (seeded) when none is given, so it runs out of the box. Token
//! ids in and out (no tokenizer).
//!
//! ```sh
//! cargo run --release -p tilejit-benches --example gpt2 -- [model.safetensors] [steps]
//! ```

use std::time::Instant;
use tilejit::prelude::*;
use tilejit_benches::models::gpt2::{self, Config, Gpt2};

fn main() -> tilejit::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let t = Instant::now();
    let model = match args.first() {
        Some(path) => Gpt2::load(path.as_ref(), 12)?,
        None => {
            println!("no checkpoint given: random GPT-2 124M weights (seed 0)");
            Gpt2::from_checkpoint(gpt2::random_checkpoint(Config::GPT2_124M, 0), 12)?
        }
    };
    let cfg = model.config();
    println!(
        "{} layers, {} heads, d={}, vocab {}: loaded in {:.2} s",
        cfg.layers,
        cfg.heads,
        cfg.d,
        cfg.vocab,
        t.elapsed().as_secs_f64()
    );
    let steps: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(32);
    // "Hello, my dog is cute" in GPT-2's tokenizer.
    let prompt = [15496i64, 11, 616, 3290, 318, 13779];

    let ids = Tensor::from_vec(prompt.to_vec(), &[prompt.len()])?;
    let t = Instant::now();
    let logits = gpt2::forward(&model, &ids)?;
    println!(
        "prefill: logits {:?} in {:.3} s (traces and compiles)",
        logits.shape(),
        t.elapsed().as_secs_f64()
    );

    // The first run's prompt pass also packs the weights in panels: the
    // weight cache keeps them from their second sighting on (the prefill
    // above was the first), and the warm run finds them.
    for run in ["first", "warm"] {
        let t = Instant::now();
        let mut dec = gpt2::Decoder::new(&model, &prompt, prompt.len() + steps)?;
        let prompt_s = t.elapsed().as_secs_f64();
        let mut out = vec![dec.last()];
        let t = Instant::now();
        for _ in 0..steps {
            out.push(dec.step()?);
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "{run} run: prompt pass {prompt_s:.3} s, {steps} cached steps {s:.3} s ({:.1} tokens/s)",
            steps as f64 / s
        );
        println!("  generated {out:?}");
    }
    Ok(())
}
