//! `tilejit snapshot info FILE`: prints a snapshot's manifest (what
//! `JitFunction::save` wrote: format, build, CPU, function, signatures)
//! and whether this build and machine can link its code. A file that is
//! not a whole snapshot exits with 1 and says what is wrong.

use crate::device_cli::CliError;
use crate::outln;
use std::path::PathBuf;
use tilejit_runtime::snapshot::{read_manifest, Manifest};

/// `tilejit snapshot`'s commands.
#[derive(clap::Subcommand)]
pub enum SnapshotCommand {
    /// Print a snapshot's manifest and whether this build can link its code.
    #[command(after_help = "Example:\n  tilejit snapshot info model.tjsnap")]
    Info {
        /// The snapshot file.
        file: PathBuf,
    },
}

/// Runs a `tilejit snapshot` command.
pub fn snapshot_cmd(cmd: &SnapshotCommand) -> Result<(), CliError> {
    match cmd {
        SnapshotCommand::Info { file } => {
            let m = read_manifest(file).map_err(|e| CliError {
                code: 1,
                msg: e.to_string(),
            })?;
            outln!("{}", info_text(&m).trim_end());
            Ok(())
        }
    }
}

/// The manifest, then a line on whether its code links here.
fn info_text(m: &Manifest) -> String {
    let mut s = m.to_string();
    match m.host_mismatch() {
        None => s.push_str(
            "host code: links on this build and machine (through the unsafe `load_code` only; `load` compiles the stored graphs)\n",
        ),
        Some(why) => s.push_str(&format!(
            "host code: recompiled from the stored graphs on load ({why})\n"
        )),
    }
    if let Some(why) = m.sim_mismatch() {
        s.push_str(&format!("sim code: compiled on first use ({why})\n"));
    }
    s
}
