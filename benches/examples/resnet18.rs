//! ResNet-18 inference from a torchvision safetensors file (batch norms
//! folded into the convolutions at load), or from random weights (seeded)
//! when none is given. Images come from an `.npy` file (`[n, 3, h, w]`
//! f32, normalised as torchvision expects) or are random.
//!
//! ```sh
//! cargo run --release -p tilejit-benches --example resnet18 -- [model.safetensors [images.npy]]
//! ```

use std::time::Instant;
use tilejit::prelude::*;
use tilejit_benches::models::resnet18::{self, ResNet18};

fn main() -> tilejit::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model = match args.first() {
        Some(path) => ResNet18::load(path.as_ref())?,
        None => {
            println!("no checkpoint given: random ResNet-18 weights (seed 0)");
            ResNet18::from_checkpoint(resnet18::random_checkpoint(64, 1000, 0))?
        }
    };
    let images = match args.get(1) {
        Some(path) => tilejit::io::read_npy(path)?,
        None => Tensor::randn(&[4, 3, 224, 224], 1),
    };
    // The first call traces and compiles; the second also keeps the
    // convolutions' Winograd-transformed weights (`tilejit::weight_cache`),
    // which later calls find.
    for run in ["first", "second", "warm"] {
        let t = Instant::now();
        let logits = resnet18::forward(&model, &images)?;
        let s = t.elapsed().as_secs_f64();
        println!(
            "{run} call: {} images in {s:.3} s ({:.1} images/s)",
            images.shape()[0],
            images.shape()[0] as f64 / s
        );
        if run == "warm" {
            let classes = logits.argmax(-1, false).to_vec::<i64>()?;
            println!("  top classes {classes:?}");
        }
    }
    Ok(())
}
