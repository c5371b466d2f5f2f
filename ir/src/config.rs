//! Every `TILEJIT_*` environment variable, read once into a typed [`Config`].
//!
//! Nothing else in tilejit reads the environment: code asks [`config()`].
//! A value that cannot be read is reported once on stderr and the default
//! kept, so a typo never silently changes what runs, nor crashes a program.
//!
//! | variable | values | default | effect |
//! |---|---|---|---|
//! | `TILEJIT_RUN_MODE` | `host`, `sim`, `verify`, `reference` | `host` | where jit calls and eager ops that set no mode themselves run |
//! | `TILEJIT_LOG` | comma list of `compile`, `trace`, `verify`, `timing`, `cache`, `time` | none | one stderr line per kernel compile; per trace, why the call missed; per Verify output its errors; per compile, the time of each pipeline stage; per kernel cache miss, the key components that differ from the nearest entry, and why a snapshot's or disk entry's code was not used; per kernel run, its time |
//! | `TILEJIT_DUMP` | a directory | off | every compile writes its graphs, kernel IR, Cranelift IR, machine code and bytecode there |
//! | `TILEJIT_DUMP_VALUES` | a directory | off | every kernel run writes its outputs there as `.npy` files |
//! | `TILEJIT_NO_FMA` | set or unset | unset | for tests: host code is generated as for a CPU without FMA |
//! | `TILEJIT_PROFILE` | a directory | off | every Sim launch writes a Chrome trace (open in Perfetto) there |
//! | `TILEJIT_SIM_POLICY` | `fifo`, `newest-first`, `fair` | `fifo` | the device scheduler's ready-queue policy for Sim launches |
//! | `TILEJIT_POOL_BYTES` | bytes, or with `K`, `M`, `G` (binary units) | `256M` | bound of the storage pool of dead tensor buffers; `0` disables it |
//! | `TILEJIT_WARMUP` | `0`/`off`/`false`/`no`, `1`/`on`/`true`/`yes` | on | the first tensor of a process has a rayon pool thread compile a small kernel, so the first real compile finds Cranelift warm |
//! | `TILEJIT_CACHE_DIR` | a directory, or `off` | `$XDG_CACHE_HOME/tilejit`, else `~/.cache/tilejit` | where the on-disk kernel cache lives; `off` disables it (so does having neither `XDG_CACHE_HOME` nor `HOME`). It must be absolute, owned by you and not writable by group or others, else the cache is off and stderr says why |
//! | `TILEJIT_CACHE_BYTES` | bytes, or with `K`, `M`, `G` (binary units) | `1G` | bound of the on-disk kernel cache (least recently used files go first); `0` disables it |

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Every variable [`Config`] reads, with the values it accepts.
pub const VARIABLES: [(&str, &str); 11] = [
    ("TILEJIT_RUN_MODE", "host, sim, verify or reference"),
    (
        "TILEJIT_LOG",
        "a comma list of compile, trace, verify, timing, cache, time, remote",
    ),
    ("TILEJIT_DUMP", "a directory"),
    ("TILEJIT_DUMP_VALUES", "a directory"),
    (
        "TILEJIT_NO_FMA",
        "set or unset (tests: code as for a CPU without FMA)",
    ),
    ("TILEJIT_PROFILE", "a directory"),
    ("TILEJIT_SIM_POLICY", "fifo, newest-first or fair"),
    (
        "TILEJIT_POOL_BYTES",
        "bytes such as 1073741824 or 1G; 0 disables pooling",
    ),
    ("TILEJIT_WARMUP", "0 or 1 (also off/on, false/true, no/yes)"),
    ("TILEJIT_CACHE_DIR", "a directory, or off"),
    (
        "TILEJIT_CACHE_BYTES",
        "bytes such as 1073741824 or 1G; 0 disables the disk cache",
    ),
];

/// The on-disk kernel cache's byte bound unless `TILEJIT_CACHE_BYTES`
/// says otherwise.
pub const DEFAULT_CACHE_BYTES: u64 = 1 << 30;

/// The storage pool's byte bound unless `TILEJIT_POOL_BYTES` says otherwise:
/// four of the 64 MiB outputs of the hot benchmarks (W1-W3), so a loop's
/// outputs and temporaries still cycle through the pool, while dead
/// buffers of past shapes cannot hold more than a small model's worth.
pub const DEFAULT_POOL_BYTES: usize = 256 << 20;

/// Where a compiled program runs. A call's mode is, first found: a
/// per-call override (`tilejit::with_mode`), the function's own
/// (`#[jit(mode = sim)]`), `TILEJIT_RUN_MODE`, `Host`.
///
/// ```
/// use tilejit_ir::config::RunMode;
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

/// Which ready task a device manager hands out first.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    /// Oldest ready task first.
    #[default]
    Fifo,
    /// Newest ready task first: a successor runs while its inputs are
    /// still in L2.
    NewestFirst,
    /// FIFO, and no manager fills a core's pending slot while another
    /// manager's cores sit idle.
    Fair,
}

impl Policy {
    /// `fifo`, `newest-first`, `fair`.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::NewestFirst => "newest-first",
            Policy::Fair => "fair",
        }
    }

    /// Parses [`Policy::name`] (also `newest`), case-insensitive.
    pub fn from_name(s: &str) -> Option<Policy> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fifo" => Some(Policy::Fifo),
            "newest-first" | "newest" => Some(Policy::NewestFirst),
            "fair" => Some(Policy::Fair),
            _ => None,
        }
    }
}

/// What `TILEJIT_LOG` turned on.
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
    /// failed request.
    pub remote: bool,
}

impl LogParts {
    /// The names `TILEJIT_LOG` accepts.
    pub const NAMES: [&'static str; 7] = [
        "compile", "trace", "verify", "timing", "cache", "time", "remote",
    ];

    fn set(&mut self, part: &str) -> bool {
        let flag = match part {
            "compile" => &mut self.compile,
            "trace" => &mut self.trace,
            "verify" => &mut self.verify,
            "timing" => &mut self.timing,
            "cache" => &mut self.cache,
            "time" => &mut self.time,
            "remote" => &mut self.remote,
            _ => return false,
        };
        *flag = true;
        true
    }
}

/// Every `TILEJIT_*` setting of this process (see the module docs).
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
        Config {
            run_mode: None,
            log: LogParts::default(),
            dump_dir: None,
            dump_values_dir: None,
            no_fma: false,
            profile_dir: None,
            sim_policy: None,
            pool_bytes: DEFAULT_POOL_BYTES,
            warmup: true,
            cache_dir: None,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

/// The process's configuration, read from the environment on first use.
/// Values it could not read were reported on stderr then, once.
#[inline]
pub fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let (config, complaints) = Config::read(|name| std::env::var_os(name));
        for c in complaints {
            eprintln!("tilejit: {c}");
        }
        config
    })
}

impl Config {
    /// Reads every variable through `var` (the environment, or a test's
    /// map). Returns the configuration and one complaint per value it
    /// ignored, naming the variable, the value and what it expected.
    ///
    /// ```
    /// use tilejit_ir::config::{Config, RunMode};
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
        let mut c = Config::default();
        let mut complaints = Vec::new();
        let text = |name: &str| var(name).map(|v| v.to_string_lossy().into_owned());
        let ignore = |complaints: &mut Vec<String>, name: &str, v: &str| {
            let expected = VARIABLES
                .iter()
                .find(|(n, _)| *n == name)
                .map_or("", |(_, e)| *e);
            complaints.push(format!("ignoring {name}={v:?} (expected {expected})"));
        };
        if let Some(v) = text("TILEJIT_RUN_MODE") {
            c.run_mode = RunMode::from_name(&v);
            if c.run_mode.is_none() {
                ignore(&mut complaints, "TILEJIT_RUN_MODE", &v);
            }
        }
        if let Some(v) = text("TILEJIT_LOG") {
            for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                if !c.log.set(part) {
                    complaints.push(format!(
                        "ignoring {part:?} in TILEJIT_LOG={v:?} (expected a comma list of {})",
                        LogParts::NAMES.join(", ")
                    ));
                }
            }
        }
        c.dump_dir = var("TILEJIT_DUMP").map(PathBuf::from);
        c.dump_values_dir = var("TILEJIT_DUMP_VALUES").map(PathBuf::from);
        c.no_fma = var("TILEJIT_NO_FMA").is_some();
        c.profile_dir = var("TILEJIT_PROFILE").map(PathBuf::from);
        if let Some(v) = text("TILEJIT_SIM_POLICY") {
            c.sim_policy = Policy::from_name(&v);
            if c.sim_policy.is_none() {
                ignore(&mut complaints, "TILEJIT_SIM_POLICY", &v);
            }
        }
        if let Some(v) = text("TILEJIT_POOL_BYTES") {
            match parse_bytes(&v) {
                Some(b) => c.pool_bytes = b,
                None => ignore(&mut complaints, "TILEJIT_POOL_BYTES", &v),
            }
        }
        if let Some(v) = text("TILEJIT_WARMUP") {
            match parse_switch(&v) {
                Some(on) => c.warmup = on,
                None => ignore(&mut complaints, "TILEJIT_WARMUP", &v),
            }
        }
        c.cache_dir = cache_dir(&var);
        if let Some(v) = text("TILEJIT_CACHE_BYTES") {
            match parse_bytes(&v) {
                Some(b) => c.cache_bytes = b as u64,
                None => ignore(&mut complaints, "TILEJIT_CACHE_BYTES", &v),
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

/// A byte count: digits, optionally followed by `K`, `M` or `G` (binary
/// units, upper or lower case); `None` for anything else or an overflow.
pub fn parse_bytes(text: &str) -> Option<usize> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().last()? {
        (i, 'k' | 'K') => (&text[..i], 1usize << 10),
        (i, 'm' | 'M') => (&text[..i], 1 << 20),
        (i, 'g' | 'G') => (&text[..i], 1 << 30),
        _ => (text, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

/// An on/off value: `0`, `off`, `false`, `no` or `1`, `on`, `true`, `yes`
/// (case-insensitive); `None` for anything else.
pub fn parse_switch(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "0" | "off" | "false" | "no" => Some(false),
        "1" | "on" | "true" | "yes" => Some(true),
        _ => None,
    }
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
            ("TILEJIT_RUN_MODE", "Reference"),
            ("TILEJIT_LOG", " trace , timing"),
            ("TILEJIT_DUMP", "/tmp/d"),
            ("TILEJIT_PROFILE", "/tmp/p"),
            ("TILEJIT_SIM_POLICY", "newest"),
            ("TILEJIT_POOL_BYTES", "512M"),
            ("TILEJIT_WARMUP", "off"),
            ("TILEJIT_CACHE_DIR", "/tmp/c"),
            ("TILEJIT_CACHE_BYTES", "64M"),
        ]);
        assert!(complaints.is_empty(), "{complaints:?}");
        let want = Config {
            run_mode: Some(RunMode::Reference),
            log: LogParts {
                trace: true,
                timing: true,
                ..LogParts::default()
            },
            dump_dir: Some("/tmp/d".into()),
            dump_values_dir: None,
            no_fma: false,
            profile_dir: Some("/tmp/p".into()),
            sim_policy: Some(Policy::NewestFirst),
            pool_bytes: 512 << 20,
            warmup: false,
            cache_dir: Some("/tmp/c".into()),
            cache_bytes: 64 << 20,
        };
        assert_eq!(c, want);
    }

    /// Each unreadable value is one complaint naming the variable and the
    /// value, and leaves that setting at its default.
    #[test]
    fn unreadable_values_are_reported_and_ignored() {
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
    fn switches() {
        for off in ["0", "off", "FALSE", " no "] {
            assert_eq!(parse_switch(off), Some(false), "{off:?}");
        }
        for on in ["1", "on", "True", "yes"] {
            assert_eq!(parse_switch(on), Some(true), "{on:?}");
        }
        for bad in ["2", "", "maybe"] {
            assert_eq!(parse_switch(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn every_variable_is_documented_in_the_table() {
        let doc = include_str!("config.rs");
        for (name, _) in VARIABLES {
            assert!(doc.contains(&format!("//! | `{name}`")), "{name}");
        }
    }
}
