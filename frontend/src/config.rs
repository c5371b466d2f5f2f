//! Every `TILEJIT_*` setting a program using tilejit sees, in one place.
//!
//! Each crate reads its own variables once (`tilejit_ir::config`,
//! `tilejit_codegen::config`, `tilejit_runtime::config`); this module
//! reads the library's own (the run mode, its parts of `TILEJIT_LOG`) and
//! composes all of them into [`Config`] ([`config()`]) and one list,
//! [`variables`]. A value that cannot be read is reported once on stderr
//! and the default kept; a `TILEJIT_LOG` part no crate knows is reported
//! here.
//!
//! | variable | values | default | effect |
//! |---|---|---|---|
//! | `TILEJIT_RUN_MODE` | `host`, `sim`, `verify`, `reference` | `host` | where jit calls and eager ops that set no mode themselves run |
//! | `TILEJIT_LOG` | the parts `trace`, `verify`, and with the `remote` feature `remote` (the runtime's: `compile`, `timing`, `cache`, `time`) | none | per trace, why the call missed; per Verify output its errors; on a server, its sessions, compiles and failed requests |
//!
//! The other variables, and what each does, are in the README's table.

use std::ffi::OsString;
use std::sync::OnceLock;
use tilejit_ir::config::{from_env, ignoring, log_parts, text};

/// Where a compiled program runs. A call's mode is, first found: a
/// per-call override (`tilejit::with_mode`), the function's own
/// (`#[jit(mode = sim)]`), `TILEJIT_RUN_MODE`, `Host`.
///
/// ```
/// use tilejit::RunMode;
/// assert_eq!(RunMode::from_name(" Verify "), Some(RunMode::Verify));
/// assert_eq!(RunMode::Sim.to_string(), "sim");
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum RunMode {
    /// Native host code (the default).
    #[default]
    Host,
    /// The simulated accelerator.
    Sim,
    /// Host and Sim, outputs compared.
    Verify,
    /// The reference interpreter.
    Reference,
}

impl RunMode {
    /// Every mode, in declaration order.
    pub const ALL: [RunMode; 4] = [
        RunMode::Host,
        RunMode::Sim,
        RunMode::Verify,
        RunMode::Reference,
    ];

    /// `host`, `sim`, `verify`, `reference`.
    pub fn name(self) -> &'static str {
        match self {
            RunMode::Host => "host",
            RunMode::Sim => "sim",
            RunMode::Verify => "verify",
            RunMode::Reference => "reference",
        }
    }

    /// Parses [`RunMode::name`] (case-insensitive, surrounding blanks ignored).
    pub fn from_name(s: &str) -> Option<RunMode> {
        RunMode::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s.trim()))
    }
}

impl std::fmt::Display for RunMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The library's own variables, with the values they accept (the
/// `TILEJIT_LOG` entry names every crate's parts: it is the one users see).
const OWN: &[(&str, &str)] = &[
    ("TILEJIT_RUN_MODE", "host, sim, verify or reference"),
    #[cfg(not(feature = "remote"))]
    (
        "TILEJIT_LOG",
        "a comma list of compile, trace, verify, timing, cache, time",
    ),
    #[cfg(feature = "remote")]
    (
        "TILEJIT_LOG",
        "a comma list of compile, trace, verify, timing, cache, time, remote",
    ),
];

/// Every `TILEJIT_*` variable tilejit reads, with the values it accepts:
/// the library's own, then the runtime's, code generation's and the
/// IR's.
///
/// ```
/// let names: Vec<&str> = tilejit::config::variables().iter().map(|v| v.0).collect();
/// assert_eq!(names[..2], ["TILEJIT_RUN_MODE", "TILEJIT_LOG"]);
/// assert!(names.contains(&"TILEJIT_POOL_BYTES") && names.contains(&"TILEJIT_NO_FMA"));
/// ```
pub fn variables() -> Vec<(&'static str, &'static str)> {
    let mut all: Vec<(&'static str, &'static str)> = Vec::new();
    let lists = [
        OWN,
        tilejit_runtime::config::VARIABLES,
        tilejit_codegen::config::VARIABLES,
        tilejit_ir::config::VARIABLES,
    ];
    for v in lists.into_iter().flatten() {
        // `TILEJIT_LOG` is shared: the first (the library's) entry names
        // every part.
        if !all.iter().any(|(n, _)| *n == v.0) {
            all.push(*v);
        }
    }
    all
}

/// The `TILEJIT_LOG` parts the library reads (the runtime's are
/// [`tilejit_runtime::config::LogParts`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct LogParts {
    /// One line per jit trace, saying why the call missed.
    pub trace: bool,
    /// One line per Verify-mode output (max abs/rel error, ulps).
    pub verify: bool,
    /// On a remote device's server: one line per session opened, closed
    /// or expired, per program compiled from a client's text, and per
    /// failed request. Only with the `remote` feature.
    #[cfg(feature = "remote")]
    pub remote: bool,
}

/// Every `TILEJIT_*` setting of this process (see [`variables`]): the
/// library's own, and each lower crate's as that crate read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// `TILEJIT_RUN_MODE`: the mode of calls that set none themselves.
    pub run_mode: Option<RunMode>,
    /// The library's `TILEJIT_LOG` parts.
    pub log: LogParts,
    /// The IR's settings (`TILEJIT_POOL_BYTES`).
    pub ir: tilejit_ir::config::Config,
    /// Code generation's settings (`TILEJIT_NO_FMA`).
    pub codegen: tilejit_codegen::config::Config,
    /// The runtime's settings: dumps, profiles, the Sim policy, warm-up,
    /// the disk cache and its `TILEJIT_LOG` parts.
    pub runtime: tilejit_runtime::config::Config,
}

/// Reads the library's own variables into `c`, and reports each
/// `TILEJIT_LOG` part that neither it nor the runtime knows.
fn read_own(c: &mut Config, var: &impl Fn(&str) -> Option<OsString>) -> Vec<String> {
    let mut complaints = Vec::new();
    if let Some(v) = text(var, "TILEJIT_RUN_MODE") {
        c.run_mode = RunMode::from_name(&v);
        if c.run_mode.is_none() {
            complaints.push(ignoring(OWN, "TILEJIT_RUN_MODE", &v));
        }
    }
    if let Some(v) = text(var, "TILEJIT_LOG") {
        for part in log_parts(&v) {
            let known = match part {
                "trace" => {
                    c.log.trace = true;
                    true
                }
                "verify" => {
                    c.log.verify = true;
                    true
                }
                #[cfg(feature = "remote")]
                "remote" => {
                    c.log.remote = true;
                    true
                }
                _ => tilejit_runtime::config::LogParts::default().set(part),
            };
            if !known {
                let expected = OWN.iter().find(|(n, _)| *n == "TILEJIT_LOG");
                let expected = expected.map_or("", |(_, e)| *e);
                complaints.push(format!(
                    "ignoring {part:?} in TILEJIT_LOG={v:?} (expected {expected})"
                ));
            }
        }
    }
    complaints
}

impl Config {
    /// Reads every variable through `var` (the environment, or a test's
    /// map), each crate its own. Returns the configuration and one
    /// complaint per value it ignored, naming the variable, the value and
    /// what it expected.
    ///
    /// ```
    /// use tilejit::{Config, RunMode};
    /// let (c, complaints) = Config::read(|name| match name {
    ///     "TILEJIT_RUN_MODE" => Some("sim".into()),
    ///     "TILEJIT_LOG" => Some("compile,bogus".into()),
    ///     _ => None,
    /// });
    /// assert_eq!(c.run_mode, Some(RunMode::Sim));
    /// assert!(c.runtime.log.compile && !c.log.trace);
    /// assert_eq!(complaints.len(), 1);
    /// assert!(complaints[0].contains("bogus"));
    /// ```
    pub fn read(var: impl Fn(&str) -> Option<OsString>) -> (Config, Vec<String>) {
        let mut c = Config::default();
        let mut complaints = read_own(&mut c, &var);
        let (ir, more) = tilejit_ir::config::Config::read(&var);
        complaints.extend(more);
        let (codegen, more) = tilejit_codegen::config::Config::read(&var);
        complaints.extend(more);
        let (runtime, more) = tilejit_runtime::config::Config::read(&var);
        complaints.extend(more);
        (
            Config {
                ir,
                codegen,
                runtime,
                ..c
            },
            complaints,
        )
    }
}

/// The process's configuration, read from the environment on first use
/// (each crate reads its part once; values it could not read were
/// reported on stderr then, once).
#[inline]
pub fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let own = from_env(|var| {
            let mut c = Config::default();
            let complaints = read_own(&mut c, &var);
            (c, complaints)
        });
        Config {
            ir: tilejit_ir::config::config().clone(),
            codegen: tilejit_codegen::config::config().clone(),
            runtime: tilejit_runtime::config::config().clone(),
            ..own
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilejit_runtime::device::Policy;

    fn read(vars: &[(&str, &str)]) -> (Config, Vec<String>) {
        Config::read(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn an_empty_environment_gives_the_defaults() {
        let (c, complaints) = read(&[]);
        assert!(complaints.is_empty(), "{complaints:?}");
        assert_eq!(c, Config::default());
        assert_eq!(
            (c.run_mode, c.ir.pool_bytes, c.runtime.cache_bytes),
            (None, 256 << 20, 1 << 30)
        );
        assert!(c.runtime.warmup && !c.codegen.no_fma);
    }

    /// Each crate's variables land in the one configuration.
    #[test]
    fn every_crates_variables_are_read() {
        let (c, complaints) = read(&[
            ("TILEJIT_RUN_MODE", "Reference"),
            ("TILEJIT_LOG", " trace , timing"),
            ("TILEJIT_DUMP", "/tmp/d"),
            ("TILEJIT_NO_FMA", "1"),
            ("TILEJIT_SIM_POLICY", "fair"),
            ("TILEJIT_POOL_BYTES", "512M"),
            ("TILEJIT_WARMUP", "off"),
            ("TILEJIT_CACHE_DIR", "/tmp/c"),
        ]);
        assert!(complaints.is_empty(), "{complaints:?}");
        assert_eq!(c.run_mode, Some(RunMode::Reference));
        assert_eq!(
            c.log,
            LogParts {
                trace: true,
                ..LogParts::default()
            }
        );
        assert_eq!(
            c.runtime.log,
            tilejit_runtime::config::LogParts {
                timing: true,
                ..Default::default()
            }
        );
        assert_eq!(c.runtime.dump_dir, Some("/tmp/d".into()));
        assert!(c.codegen.no_fma);
        assert_eq!(c.runtime.sim_policy, Some(Policy::Fair));
        assert_eq!(c.ir.pool_bytes, 512 << 20);
        assert!(!c.runtime.warmup);
        assert_eq!(c.runtime.cache_dir, Some("/tmp/c".into()));
    }

    /// One complaint per unreadable value, whichever crate reads it, and
    /// one per `TILEJIT_LOG` part no crate knows.
    #[test]
    fn unreadable_values_are_reported_once_each() {
        let bad = [
            ("TILEJIT_RUN_MODE", "hots"),
            ("TILEJIT_LOG", "compiles"),
            ("TILEJIT_SIM_POLICY", "lifo"),
            ("TILEJIT_POOL_BYTES", "2T"),
            ("TILEJIT_WARMUP", "maybe"),
            ("TILEJIT_CACHE_BYTES", "lots"),
        ];
        let (c, complaints) = read(&bad);
        assert_eq!(c, Config::default());
        assert_eq!(complaints.len(), bad.len(), "{complaints:?}");
        for (name, value) in bad {
            assert!(
                complaints
                    .iter()
                    .any(|c| c.contains(name) && c.contains(value)),
                "{name}={value}: {complaints:?}"
            );
        }
        assert_eq!(
            complaints[1],
            if cfg!(feature = "remote") {
                r#"ignoring "compiles" in TILEJIT_LOG="compiles" (expected a comma list of compile, trace, verify, timing, cache, time, remote)"#
            } else {
                r#"ignoring "compiles" in TILEJIT_LOG="compiles" (expected a comma list of compile, trace, verify, timing, cache, time)"#
            }
        );
    }

    /// `remote` is a log part only where there is a server to log.
    #[test]
    fn the_remote_log_part_comes_with_the_feature() {
        let (_, complaints) = read(&[("TILEJIT_LOG", "remote,time")]);
        assert_eq!(
            complaints.is_empty(),
            cfg!(feature = "remote"),
            "{complaints:?}"
        );
    }

    #[test]
    fn every_variable_is_listed_once_and_in_the_readme() {
        let readme = include_str!("../../README.md");
        let all = variables();
        assert_eq!(all.len(), 13, "{all:?}");
        for (i, (name, _)) in all.iter().enumerate() {
            assert!(all[..i].iter().all(|(n, _)| n != name), "{name} twice");
            assert!(readme.contains(&format!("| `{name}` |")), "{name}");
        }
    }

    #[test]
    fn the_librarys_variables_are_documented_in_the_table() {
        let doc = include_str!("config.rs");
        for (name, _) in OWN {
            assert!(doc.contains(&format!("//! | `{name}`")), "{name}");
        }
    }
}
