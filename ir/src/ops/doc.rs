//! The op table as Markdown: the generated section of `docs/ops.md`
//! (a test compares the file with it; `BLESS=1` rewrites it).

use super::{BinaryOp, CmpOp, ReduceOp, UnaryHost, UnaryOp};
use std::fmt::Write;

/// The line that opens the generated section of `docs/ops.md`.
pub const BEGIN: &str =
    "<!-- generated from ir/src/ops/table.rs; rewrite: BLESS=1 cargo test -p tilejit-ir ops_md -->";
/// The line that closes it.
pub const END: &str = "<!-- end of generated section -->";

/// The generated section, from [`BEGIN`] to [`END`] inclusive.
pub fn markdown() -> String {
    let mut s = String::new();
    s.push_str(BEGIN);
    s.push_str("\n\n## The op table\n\n");
    s.push_str(
        "One row per op in `ir/src/ops/table.rs` defines its name, dtypes, reference \
         semantics,\nerror bound, fusion cost and lowerings (see `docs/adding-an-op.md`).\n\n",
    );
    s.push_str(
        "### Unary\n\n| op | dtypes | host | fusion cost | meaning |\n|---|---|---|---|---|\n",
    );
    for u in UnaryOp::ALL {
        let d = u.def();
        let dtypes = if d.int.is_some() { "numeric" } else { "floats" };
        let host = match d.host {
            UnaryHost::Inline(_) => "inline".to_string(),
            UnaryHost::Math { f64, .. } => format!("inline f32, `{}` f64", f64.symbol),
            UnaryHost::Libcall(c) => format!("`{}`", c.symbol),
        };
        let _ = writeln!(
            s,
            "| `{}` | {dtypes} | {host} | {} | {} |",
            u.name(),
            d.cost,
            cell(u.doc())
        );
    }
    s.push_str("\n### Binary\n\nOperands of one dtype, not bool; the bitwise ops and shifts take integers only.\n\n| op | text | host | fusion cost | meaning |\n|---|---|---|---|---|\n");
    for b in BinaryOp::ALL {
        let d = b.def();
        let mut host: Vec<String> = Vec::new();
        if let Some(c) = d.host.float {
            host.push(format!("`{}` floats", c.symbol));
        }
        if let Some(c) = d.host.int {
            host.push(format!("`{}` integers", c.symbol));
        }
        let host = if host.is_empty() {
            "inline".to_string()
        } else {
            host.join(", ")
        };
        let _ = writeln!(
            s,
            "| `{}` | `{}` | {host} | {} | {} |",
            b.name(),
            b.text(),
            d.cost,
            cell(b.doc())
        );
    }
    s.push_str("\n### Comparisons\n\nOperands of one dtype; the result is bool.\n\n| op | meaning |\n|---|---|\n");
    for c in CmpOp::ALL {
        let _ = writeln!(s, "| `{}` | {} |", c.name(), cell(c.doc()));
    }
    s.push_str("\n### Reductions\n\nNot bool.\n\n| op | text | empty axis | meaning |\n|---|---|---|---|\n");
    for r in ReduceOp::ALL {
        let d = r.def();
        let empty = if d.empty_ok {
            format!("`{}`", d.float.0)
        } else {
            "an error".to_string()
        };
        let _ = writeln!(
            s,
            "| `{}` | `{}` | {empty} | {} |",
            r.name(),
            r.text(),
            cell(r.doc())
        );
    }
    s.push('\n');
    s.push_str(END);
    s.push('\n');
    s
}

/// A table cell: `|` would end it.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}
