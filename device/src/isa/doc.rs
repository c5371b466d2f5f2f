//! Renders the ISA reference (`device/ISA.md`) from the table, so the
//! document cannot drift from the encoder, assembler and interpreter. A
//! golden test compares the file with [`markdown`] (`BLESS=1` rewrites it).

use super::{Cores, CostClass, Foot, Kind, PipeSel, Space, TABLE};
use std::fmt::Write;

const INTRO: &str = include_str!("isa_intro.md");

fn kind_text(k: Kind) -> String {
    match k {
        Kind::Reg => "reg".into(),
        Kind::Imm => "imm".into(),
        Kind::Val => "reg|imm".into(),
        Kind::Scalar => "float".into(),
        Kind::DType => "dtype".into(),
        Kind::Shape => "RxC".into(),
        Kind::Mkn => "MxKxN".into(),
        Kind::Mem(space, foot) => {
            let f = match foot {
                Foot::Tile => "tile",
                Foot::Tile2 => "tile of `from`",
                Foot::Mask => "bool tile",
                Foot::RowVec => "rows vector",
                Foot::ColVec => "cols vector",
                Foot::Acc => "f32 tile",
                Foot::Elem => "element",
                Foot::MatA => "MxK",
                Foot::MatB => "KxN",
                Foot::MatC => "f32 MxN",
            };
            format!("{} {f}", space_name(space))
        }
        Kind::Gm => "gm".into(),
        Kind::Label => "label".into(),
        Kind::Pipe => "pipe".into(),
        Kind::Event => "event".into(),
        Kind::Cond => "cond".into(),
        Kind::Unary => "unary op".into(),
    }
}

fn space_name(s: Space) -> &'static str {
    s.name()
}

fn cost_text(c: CostClass) -> &'static str {
    match c {
        CostClass::Scalar => "scalar",
        CostClass::Branch => "branch if taken, else scalar",
        CostClass::Flag => "flag",
        CostClass::Barrier => "scalar, after every pipe drains",
        CostClass::Vector => "vector_startup + ceil(bytes/vector_bytes_per_cycle)",
        CostClass::GmRead => "gm_read_latency + ceil(bytes/gm_read_bytes_per_cycle)",
        CostClass::GmWrite => "gm_write_latency + ceil(bytes/gm_write_bytes_per_cycle)",
        CostClass::L1ToL0a => "l1_to_l0_latency + ceil(bytes/l1_to_l0a_bytes_per_cycle)",
        CostClass::L1ToL0b => "l1_to_l0_latency + ceil(bytes/l1_to_l0b_bytes_per_cycle)",
        CostClass::Cube => {
            "cube_startup + ceil(m/16)*ceil(k/16)*ceil(n/16) (x cube_f32_factor for f32)"
        }
        CostClass::Fixpipe => "fixpipe_latency + ceil(bytes/fixpipe_bytes_per_cycle)",
    }
}

/// The ISA reference as Markdown.
pub fn markdown() -> String {
    let mut out = String::from(INTRO);
    out.push_str("\n## Opcodes\n\n");
    out.push_str("| byte | mnemonic | operands | pipe | cores | cycles | meaning |\n");
    out.push_str("|---|---|---|---|---|---|---|\n");
    for (i, info) in TABLE.iter().enumerate() {
        let ops: Vec<String> = info
            .operands
            .iter()
            .map(|(n, k)| format!("{n}:{}", kind_text(*k)))
            .collect();
        let pipe = match info.pipe {
            PipeSel::Fixed(p) => p.name().to_string(),
            PipeSel::Operand(i) => format!("operand {}", info.operands[i].0),
            PipeSel::All => "all".to_string(),
        };
        let cores = match info.cores {
            Cores::Both => "aic, aiv",
            Cores::Aic => "aic",
            Cores::Aiv => "aiv",
        };
        let _ = writeln!(
            out,
            "| {i} | `{}` | {} | {pipe} | {cores} | {} | {} |",
            info.mnemonic,
            ops.join(", "),
            cost_text(info.cost),
            info.doc
        );
    }
    let c = crate::config::CostTable::default();
    let _ = write!(
        out,
        "\n## Default costs (`DeviceConfig::default().costs`)\n\n```json\n{}\n```\n",
        serde_json::to_string_pretty(&c).unwrap_or_default()
    );
    out
}
