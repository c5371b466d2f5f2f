//! The runtime's own `TILEJIT_*` settings, read once into a typed
//! [`Config`]: dumps, profiles, the Sim scheduler policy, the compiler
//! warm-up, the on-disk kernel cache, and its parts of `TILEJIT_LOG`.
//! The parsers and the stderr report are [`tilejit_ir::config`]'s.
//!
//! | variable | values | default | effect |
//! |---|---|---|---|
//! | `TILEJIT_LOG` | the parts `compile`, `timing`, `cache`, `time` (others belong to the `tilejit` library) | none | one stderr line per kernel compile; per compile, the time of each pipeline stage; per kernel cache miss, the key components that differ from the nearest entry, and why a snapshot's or disk entry's code was not used; per kernel run, its time |
//! | `TILEJIT_DUMP` | a directory | off | every compile writes its graphs, kernel IR, Cranelift IR, machine code and bytecode there |
//! | `TILEJIT_DUMP_VALUES` | a directory | off | every kernel run writes its outputs there as `.npy` files |
//! | `TILEJIT_PROFILE` | a directory | off | every Sim launch writes a Chrome trace (open in Perfetto) there |
//! | `TILEJIT_SIM_POLICY` | `fifo`, `newest-first`, `fair` | `fifo` | the device scheduler's ready-queue policy for Sim launches |
//! | `TILEJIT_WARMUP` | `0`/`off`/`false`/`no`, `1`/`on`/`true`/`yes` | on | the first tensor of a process has a rayon pool thread compile a small kernel, so the first real compile finds Cranelift warm |
//! | `TILEJIT_WINOGRAD` | `0`/`off`/`false`/`no`, `1`/`on`/`true`/`yes` | on | host 3x3 convolutions at stride 1 over blocks of 16 channels run as Winograd F(4x4, 3x3): every image size when the weights are kept (F(2x2, 3x3) where F(4x4)'s weights would stream from memory for few tiles), else big enough images (or batches of smaller ones); fewer multiplies, with rounding errors of a few 1e-6 of the output's scale instead of ~1e-7; off runs them as direct products |
//! | `TILEJIT_WEIGHT_CACHE_BYTES` | bytes, or with `K`, `M`, `G` (binary units) | `1G` | bound of the weights kept prepared (least recently used go first): host 3x3 convolutions' Winograd-transformed weights, and matmuls' right operands and late-layer convolutions' weights packed in panels, when they are a call's argument or a constant, made on a storage's second sighting and found on later ones, so every image size takes Winograd; `0` keeps none: Winograd weights are transformed per call, images of fewer than 49 tiles then run as direct products, and matmuls and other convolutions run on `gemm` |
//! | `TILEJIT_CACHE_DIR` | a directory, or `off` | `$XDG_CACHE_HOME/tilejit`, else `~/.cache/tilejit` | where the on-disk kernel cache lives; `off` disables it (so does having neither `XDG_CACHE_HOME` nor `HOME`). It must be absolute, owned by you and not writable by group or others, else the cache is off and stderr says why |
//! | `TILEJIT_CACHE_BYTES` | bytes, or with `K`, `M`, `G` (binary units) | `1G` | bound of the on-disk kernel cache (least recently used files go first); `0` disables it |

use crate::device::Policy;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;
use tilejit_ir::config::{from_env, ignoring, log_parts, parse_bytes, parse_switch, text};

/// Every variable [`Config`] reads, with the values it accepts
/// (`TILEJIT_LOG` with the runtime's parts only).
pub const VARIABLES: &[(&str, &str)] = &[
    (
        "TILEJIT_LOG",
        "a comma list of compile, timing, cache, time",
    ),
    ("TILEJIT_DUMP", "a directory"),
    ("TILEJIT_DUMP_VALUES", "a directory"),
    ("TILEJIT_PROFILE", "a directory"),
    ("TILEJIT_SIM_POLICY", "fifo, newest-first or fair"),
    ("TILEJIT_WARMUP", "0 or 1 (also off/on, false/true, no/yes)"),
    (
        "TILEJIT_WINOGRAD",
        "0 or 1 (also off/on, false/true, no/yes)",
    ),
    (
        "TILEJIT_WEIGHT_CACHE_BYTES",
        "bytes such as 1073741824 or 1G; 0 keeps no prepared weights",
    ),
    ("TILEJIT_CACHE_DIR", "a directory, or off"),
    (
        "TILEJIT_CACHE_BYTES",
        "bytes such as 1073741824 or 1G; 0 disables the disk cache",
    ),
];

/// The on-disk kernel cache's byte bound unless `TILEJIT_CACHE_BYTES`
/// says otherwise.
pub const DEFAULT_CACHE_BYTES: u64 = 1 << 30;

/// The parts of `TILEJIT_LOG` the runtime acts on.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct LogParts {
    /// One line per kernel compile.
    pub compile: bool,
    /// One line per compile with the time each pipeline stage took.
    pub timing: bool,
    /// One line per kernel cache miss naming the key components that
    /// differ from the nearest entry, and why a disk cache file or a
    /// snapshot's code was not used.
    pub cache: bool,
    /// One line per kernel run with its time (on Sim, its device time).
    pub time: bool,
}

impl LogParts {
    /// Turns `part` on if it is the runtime's; false if it is not.
    pub fn set(&mut self, part: &str) -> bool {
        let flag = match part {
            "compile" => &mut self.compile,
            "timing" => &mut self.timing,
            "cache" => &mut self.cache,
            "time" => &mut self.time,
            _ => return false,
        };
        *flag = true;
        true
    }
}

/// The kept prepared weights' byte bound unless
/// `TILEJIT_WEIGHT_CACHE_BYTES` says otherwise.
pub const DEFAULT_WEIGHT_CACHE_BYTES: usize = 1 << 30;

/// The runtime's settings (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `TILEJIT_LOG`: the runtime's parts of it.
    pub log: LogParts,
    /// `TILEJIT_DUMP`: where compiles write what they compiled.
    pub dump_dir: Option<PathBuf>,
    /// `TILEJIT_DUMP_VALUES`: where kernel runs write their outputs.
    pub dump_values_dir: Option<PathBuf>,
    /// `TILEJIT_PROFILE`: where Sim launches write Chrome traces.
    pub profile_dir: Option<PathBuf>,
    /// `TILEJIT_SIM_POLICY`: the scheduler policy of Sim launches.
    pub sim_policy: Option<Policy>,
    /// `TILEJIT_WARMUP`: whether the first tensor starts a compiler warm-up.
    pub warmup: bool,
    /// `TILEJIT_WINOGRAD`: whether host 3x3 convolutions that fit run as
    /// Winograd (F(4x4, 3x3), or F(2x2, 3x3) for some kept weights).
    pub winograd: bool,
    /// `TILEJIT_WEIGHT_CACHE_BYTES`: the kept prepared weights' byte
    /// bound (0: none kept).
    pub weight_cache_bytes: usize,
    /// `TILEJIT_CACHE_DIR`, else `$XDG_CACHE_HOME/tilejit`, else
    /// `$HOME/.cache/tilejit`: the on-disk kernel cache; `None` is off.
    pub cache_dir: Option<PathBuf>,
    /// `TILEJIT_CACHE_BYTES`: the on-disk kernel cache's byte bound (0:
    /// off).
    pub cache_bytes: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            log: LogParts::default(),
            dump_dir: None,
            dump_values_dir: None,
            profile_dir: None,
            sim_policy: None,
            warmup: true,
            winograd: true,
            weight_cache_bytes: DEFAULT_WEIGHT_CACHE_BYTES,
            cache_dir: None,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

/// The runtime's settings, read from the environment on first use.
/// Values it could not read were reported on stderr then, once.
#[inline]
pub fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| from_env(Config::read))
}

impl Config {
    /// Reads the runtime's variables through `var` (the environment, or a
    /// test's map). Returns the settings and one complaint per value it
    /// ignored, naming the variable, the value and what it expected.
    /// `TILEJIT_LOG` parts that are not the runtime's are skipped here:
    /// the `tilejit` library reports those no crate knows.
    ///
    /// ```
    /// use tilejit_runtime::config::Config;
    /// use tilejit_runtime::device::Policy;
    /// let (c, complaints) = Config::read(|name| match name {
    ///     "TILEJIT_SIM_POLICY" => Some("newest".into()),
    ///     "TILEJIT_LOG" => Some("timing,trace".into()),
    ///     "TILEJIT_CACHE_BYTES" => Some("lots".into()),
    ///     _ => None,
    /// });
    /// assert_eq!(c.sim_policy, Some(Policy::NewestFirst));
    /// assert!(c.log.timing && !c.log.compile);
    /// assert_eq!(complaints.len(), 1);
    /// assert!(complaints[0].contains("TILEJIT_CACHE_BYTES"));
    /// ```
    pub fn read(var: impl Fn(&str) -> Option<OsString>) -> (Config, Vec<String>) {
        let mut c = Config::default();
        let mut complaints = Vec::new();
        let mut ignore = |name: &str, v: &str| complaints.push(ignoring(VARIABLES, name, v));
        if let Some(v) = text(&var, "TILEJIT_LOG") {
            for part in log_parts(&v) {
                c.log.set(part);
            }
        }
        c.dump_dir = var("TILEJIT_DUMP").map(PathBuf::from);
        c.dump_values_dir = var("TILEJIT_DUMP_VALUES").map(PathBuf::from);
        c.profile_dir = var("TILEJIT_PROFILE").map(PathBuf::from);
        if let Some(v) = text(&var, "TILEJIT_SIM_POLICY") {
            c.sim_policy = Policy::from_name(&v);
            if c.sim_policy.is_none() {
                ignore("TILEJIT_SIM_POLICY", &v);
            }
        }
        if let Some(v) = text(&var, "TILEJIT_WARMUP") {
            match parse_switch(&v) {
                Some(on) => c.warmup = on,
                None => ignore("TILEJIT_WARMUP", &v),
            }
        }
        if let Some(v) = text(&var, "TILEJIT_WINOGRAD") {
            match parse_switch(&v) {
                Some(on) => c.winograd = on,
                None => ignore("TILEJIT_WINOGRAD", &v),
            }
        }
        if let Some(v) = text(&var, "TILEJIT_WEIGHT_CACHE_BYTES") {
            match parse_bytes(&v) {
                Some(b) => c.weight_cache_bytes = b,
                None => ignore("TILEJIT_WEIGHT_CACHE_BYTES", &v),
            }
        }
        c.cache_dir = cache_dir(&var);
        if let Some(v) = text(&var, "TILEJIT_CACHE_BYTES") {
            match parse_bytes(&v) {
                Some(b) => c.cache_bytes = b as u64,
                None => ignore("TILEJIT_CACHE_BYTES", &v),
            }
        }
        (c, complaints)
    }
}

/// The disk cache's directory: `TILEJIT_CACHE_DIR` (`off` disables it),
/// else `$XDG_CACHE_HOME/tilejit` (the XDG spec ignores a relative one),
/// else `$HOME/.cache/tilejit`, else none.
fn cache_dir(var: &impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set("TILEJIT_CACHE_DIR") {
        let off = dir
            .to_str()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("off"));
        return (!off).then_some(dir);
    }
    if let Some(xdg) = set("XDG_CACHE_HOME").filter(|p| p.is_absolute()) {
        return Some(xdg.join("tilejit"));
    }
    set("HOME").map(|home| home.join(".cache").join("tilejit"))
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
        assert_eq!(read(&[]), (Config::default(), vec![]));
    }

    #[test]
    fn every_variable_is_read() {
        let (c, complaints) = read(&[
            ("TILEJIT_LOG", " trace , timing,time"),
            ("TILEJIT_DUMP", "/tmp/d"),
            ("TILEJIT_PROFILE", "/tmp/p"),
            ("TILEJIT_SIM_POLICY", "newest"),
            ("TILEJIT_WARMUP", "off"),
            ("TILEJIT_WINOGRAD", "no"),
            ("TILEJIT_WEIGHT_CACHE_BYTES", "2M"),
            ("TILEJIT_CACHE_DIR", "/tmp/c"),
            ("TILEJIT_CACHE_BYTES", "64M"),
        ]);
        assert!(complaints.is_empty(), "{complaints:?}");
        let want = Config {
            log: LogParts {
                timing: true,
                time: true,
                ..LogParts::default()
            },
            dump_dir: Some("/tmp/d".into()),
            dump_values_dir: None,
            profile_dir: Some("/tmp/p".into()),
            sim_policy: Some(Policy::NewestFirst),
            warmup: false,
            winograd: false,
            weight_cache_bytes: 2 << 20,
            cache_dir: Some("/tmp/c".into()),
            cache_bytes: 64 << 20,
        };
        assert_eq!(c, want);
    }

    /// Each unreadable value is one complaint naming the variable and the
    /// value, and leaves that setting at its default. A `TILEJIT_LOG` part
    /// the runtime does not know is not its to report.
    #[test]
    fn unreadable_values_are_reported_and_ignored() {
        let bad = [
            ("TILEJIT_SIM_POLICY", "lifo"),
            ("TILEJIT_WARMUP", "maybe"),
            ("TILEJIT_CACHE_BYTES", "lots"),
        ];
        let (c, complaints) = read(&[bad[0], bad[1], bad[2], ("TILEJIT_LOG", "compiles")]);
        assert_eq!(c, Config::default());
        assert_eq!(complaints.len(), bad.len(), "{complaints:?}");
        for ((name, value), complaint) in bad.iter().zip(&complaints) {
            assert!(complaint.contains(name), "{complaint}");
            assert!(complaint.contains(value), "{complaint}");
        }
    }

    #[test]
    fn the_cache_dir_falls_back_to_xdg_then_home_and_can_be_off() {
        let dir = |vars: &[(&str, &str)]| read(vars).0.cache_dir;
        let home = ("HOME", "/home/u");
        assert_eq!(dir(&[home]), Some("/home/u/.cache/tilejit".into()));
        let xdg = ("XDG_CACHE_HOME", "/x");
        assert_eq!(dir(&[home, xdg]), Some("/x/tilejit".into()));
        // A relative XDG_CACHE_HOME is invalid by the spec: ignored.
        assert_eq!(
            dir(&[home, ("XDG_CACHE_HOME", "rel")]),
            Some("/home/u/.cache/tilejit".into())
        );
        assert_eq!(
            dir(&[home, xdg, ("TILEJIT_CACHE_DIR", "/c")]),
            Some("/c".into())
        );
        assert_eq!(dir(&[home, xdg, ("TILEJIT_CACHE_DIR", "OFF")]), None);
        assert_eq!(dir(&[]), None);
    }

    #[test]
    fn every_variable_is_documented_in_the_table() {
        let doc = include_str!("config.rs");
        for (name, _) in VARIABLES {
            assert!(doc.contains(&format!("//! | `{name}`")), "{name}");
        }
    }
}
