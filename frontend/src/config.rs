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
use std::path::PathBuf;
use std::sync::OnceLock;
use tilejit_ir::config::{from_env, ignoring, log_parts, text};
use tilejit_runtime::device::Policy;

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

/// What `TILEJIT_LOG` turned on, over every crate.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct LogParts {
    /// One line per kernel compile.
    pub compile: bool,
    /// One line per jit trace, saying why the call missed.
    pub trace: bool,
    /// One line per Verify-mode output (max abs/rel error, ulps).
    pub verify: bool,
    /// One line per compile with the time each pipeline stage took.
    pub timing: bool,
    /// One line per kernel cache miss naming the key components that
    /// differ from the nearest entry, and why a disk cache file or a
    /// snapshot's code was not used.
    pub cache: bool,
    /// One line per kernel run with its time (on Sim, its device time).
    pub time: bool,
    /// On a remote device's server: one line per session opened, closed
    /// or expired, per program compiled from a client's text, and per
    /// failed request. Only with the `remote` feature.
    #[cfg(feature = "remote")]
    pub remote: bool,
}

/// Every `TILEJIT_*` setting of this process (see [`variables`]), each
/// read by the crate it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `TILEJIT_RUN_MODE`: the mode of calls that set none themselves.
    pub run_mode: Option<RunMode>,
    /// `TILEJIT_LOG`.
    pub log: LogParts,
    /// `TILEJIT_DUMP`: where compiles write what they compiled.
    pub dump_dir: Option<PathBuf>,
    /// `TILEJIT_DUMP_VALUES`: where kernel runs write their outputs.
    pub dump_values_dir: Option<PathBuf>,
    /// `TILEJIT_NO_FMA`: host code as for a CPU without FMA (tests).
    pub no_fma: bool,
    /// `TILEJIT_PROFILE`: where Sim launches write Chrome traces.
    pub profile_dir: Option<PathBuf>,
    /// `TILEJIT_SIM_POLICY`: the scheduler policy of Sim launches.
    pub sim_policy: Option<Policy>,
    /// `TILEJIT_POOL_BYTES`: the storage pool's byte bound.
    pub pool_bytes: usize,
    /// `TILEJIT_WARMUP`: whether the first tensor starts a compiler warm-up.
    pub warmup: bool,
    /// `TILEJIT_CACHE_DIR`, else `$XDG_CACHE_HOME/tilejit`, else
    /// `$HOME/.cache/tilejit`: the on-disk kernel cache; `None` is off.
    pub cache_dir: Option<PathBuf>,
    /// `TILEJIT_CACHE_BYTES`: the on-disk kernel cache's byte bound (0:
    /// off).
    pub cache_bytes: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config::compose(
            Own::default(),
            &tilejit_ir::config::Config::default(),
            &tilejit_codegen::config::Config::default(),
            &tilejit_runtime::config::Config::default(),
        )
    }
}

/// The library's own settings.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
struct Own {
    run_mode: Option<RunMode>,
    trace: bool,
    verify: bool,
    #[cfg(feature = "remote")]
    remote: bool,
}

impl Own {
    /// Reads the library's variables, and reports each `TILEJIT_LOG` part
    /// that neither it nor the runtime knows.
    fn read(var: &impl Fn(&str) -> Option<OsString>) -> (Own, Vec<String>) {
        let mut own = Own::default();
        let mut complaints = Vec::new();
        if let Some(v) = text(var, "TILEJIT_RUN_MODE") {
            own.run_mode = RunMode::from_name(&v);
            if own.run_mode.is_none() {
                complaints.push(ignoring(OWN, "TILEJIT_RUN_MODE", &v));
            }
        }
        if let Some(v) = text(var, "TILEJIT_LOG") {
            for part in log_parts(&v) {
                let known = match part {
                    "trace" => {
                        own.trace = true;
                        true
                    }
                    "verify" => {
                        own.verify = true;
                        true
                    }
                    #[cfg(feature = "remote")]
                    "remote" => {
                        own.remote = true;
                        true
                    }
                    _ => tilejit_runtime::config::LogParts::NAMES.contains(&part),
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
        (own, complaints)
    }
}

impl Config {
    fn compose(
        own: Own,
        ir: &tilejit_ir::config::Config,
        codegen: &tilejit_codegen::config::Config,
        runtime: &tilejit_runtime::config::Config,
    ) -> Config {
        Config {
            run_mode: own.run_mode,
            log: LogParts {
                compile: runtime.log.compile,
                trace: own.trace,
                verify: own.verify,
                timing: runtime.log.timing,
                cache: runtime.log.cache,
                time: runtime.log.time,
                #[cfg(feature = "remote")]
                remote: own.remote,
            },
            dump_dir: runtime.dump_dir.clone(),
            dump_values_dir: runtime.dump_values_dir.clone(),
            no_fma: codegen.no_fma,
            profile_dir: runtime.profile_dir.clone(),
            sim_policy: runtime.sim_policy,
            pool_bytes: ir.pool_bytes,
            warmup: runtime.warmup,
            cache_dir: runtime.cache_dir.clone(),
            cache_bytes: runtime.cache_bytes,
        }
    }

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
    /// assert!(c.log.compile && !c.log.trace);
    /// assert_eq!(complaints.len(), 1);
    /// assert!(complaints[0].contains("bogus"));
    /// ```
    pub fn read(var: impl Fn(&str) -> Option<OsString>) -> (Config, Vec<String>) {
        let (own, mut complaints) = Own::read(&var);
        let (ir, c) = tilejit_ir::config::Config::read(&var);
        complaints.extend(c);
        let (codegen, c) = tilejit_codegen::config::Config::read(&var);
        complaints.extend(c);
        let (runtime, c) = tilejit_runtime::config::Config::read(&var);
        complaints.extend(c);
        (Config::compose(own, &ir, &codegen, &runtime), complaints)
    }
}

/// The process's configuration, read from the environment on first use
/// (each crate reads its part once; values it could not read were
/// reported on stderr then, once).
#[inline]
pub fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let own = from_env(|var| Own::read(&var));
        Config::compose(
            own,
            tilejit_ir::config::config(),
            tilejit_codegen::config::config(),
            tilejit_runtime::config::config(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
            (c.run_mode, c.pool_bytes, c.cache_bytes),
            (None, 256 << 20, 1 << 30)
        );
        assert!(c.warmup && !c.no_fma);
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
                timing: true,
                ..LogParts::default()
            }
        );
        assert_eq!(c.dump_dir, Some("/tmp/d".into()));
        assert!(c.no_fma);
        assert_eq!(c.sim_policy, Some(Policy::Fair));
        assert_eq!(c.pool_bytes, 512 << 20);
        assert!(!c.warmup);
        assert_eq!(c.cache_dir, Some("/tmp/c".into()));
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
        assert_eq!(all.len(), 11, "{all:?}");
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
