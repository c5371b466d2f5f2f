//! The IR's own `TILEJIT_*` setting, read once into a typed [`Config`],
//! and the pieces every crate's settings module shares: value parsers,
//! the complaint for a value that cannot be read, and reading the
//! process environment once with complaints on stderr.
//!
//! Each crate reads only its own variables, in its own `config` module
//! (`tilejit_codegen::config`, `tilejit_runtime::config`,
//! `tilejit::config`); the `tilejit` library composes them into the one
//! list a user sees. A value that cannot be read is reported once on
//! stderr and the default kept, so a typo never silently changes what
//! runs, nor crashes a program.
//!
//! | variable | values | default | effect |
//! |---|---|---|---|
//! | `TILEJIT_POOL_BYTES` | bytes, or with `K`, `M`, `G` (binary units) | `256M` | bound of the storage pool of dead tensor buffers; `0` disables it |

use std::ffi::OsString;
use std::sync::OnceLock;

/// Every variable [`Config`] reads, with the values it accepts.
pub const VARIABLES: &[(&str, &str)] = &[(
    "TILEJIT_POOL_BYTES",
    "bytes such as 1073741824 or 1G; 0 disables pooling",
)];

/// The storage pool's byte bound unless `TILEJIT_POOL_BYTES` says otherwise:
/// four of the 64 MiB outputs of the hot benchmarks (W1-W3), so a loop's
/// outputs and temporaries still cycle through the pool, while dead
/// buffers of past shapes cannot hold more than a small model's worth.
pub const DEFAULT_POOL_BYTES: usize = 256 << 20;

/// The IR's settings (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `TILEJIT_POOL_BYTES`: the storage pool's byte bound.
    pub pool_bytes: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            pool_bytes: DEFAULT_POOL_BYTES,
        }
    }
}

/// The IR's settings, read from the environment on first use. Values it
/// could not read were reported on stderr then, once.
#[inline]
pub fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| from_env(Config::read))
}

impl Config {
    /// Reads the IR's variables through `var` (the environment, or a
    /// test's map). Returns the settings and one complaint per value it
    /// ignored, naming the variable, the value and what it expected.
    ///
    /// ```
    /// use tilejit_ir::config::Config;
    /// let (c, complaints) = Config::read(|name| match name {
    ///     "TILEJIT_POOL_BYTES" => Some("64M".into()),
    ///     _ => None,
    /// });
    /// assert_eq!(c.pool_bytes, 64 << 20);
    /// assert!(complaints.is_empty());
    /// ```
    pub fn read(var: impl Fn(&str) -> Option<OsString>) -> (Config, Vec<String>) {
        let mut c = Config::default();
        let mut complaints = Vec::new();
        if let Some(v) = text(&var, "TILEJIT_POOL_BYTES") {
            match parse_bytes(&v) {
                Some(b) => c.pool_bytes = b,
                None => complaints.push(ignoring(VARIABLES, "TILEJIT_POOL_BYTES", &v)),
            }
        }
        (c, complaints)
    }
}

/// How [`from_env`] hands a reader the process environment.
pub type EnvVar = fn(&str) -> Option<OsString>;

/// Reads settings from the process environment with `read` (a crate's
/// `Config::read`), reports each complaint once on stderr, and returns
/// them. Each crate's `config()` calls this once.
pub fn from_env<C>(read: impl FnOnce(EnvVar) -> (C, Vec<String>)) -> C {
    let (config, complaints) = read(|name| std::env::var_os(name));
    for c in complaints {
        eprintln!("tilejit: {c}");
    }
    config
}

/// `name`'s value through `var`, as text (lossy for non-UTF-8).
pub fn text(var: &impl Fn(&str) -> Option<OsString>, name: &str) -> Option<String> {
    var(name).map(|v| v.to_string_lossy().into_owned())
}

/// The complaint for `name=value` that could not be read, with what
/// `variables` (a crate's list) says it expects.
pub fn ignoring(variables: &[(&str, &str)], name: &str, value: &str) -> String {
    let expected = variables
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, e)| *e);
    format!("ignoring {name}={value:?} (expected {expected})")
}

/// The parts of a `TILEJIT_LOG` value (a comma list; blanks trimmed,
/// empty parts skipped). Each crate keeps the parts it knows and the
/// `tilejit` library reports those no crate knows.
pub fn log_parts(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|p| !p.is_empty())
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
        assert_eq!(Config::default().pool_bytes, 256 << 20);
    }

    #[test]
    fn the_pool_bound_is_read() {
        assert_eq!(
            read(&[("TILEJIT_POOL_BYTES", "512M")]).0.pool_bytes,
            512 << 20
        );
        assert_eq!(read(&[("TILEJIT_POOL_BYTES", "0")]).0.pool_bytes, 0);
    }

    /// An unreadable value is one complaint naming the variable, the value
    /// and what was expected, and leaves the default.
    #[test]
    fn an_unreadable_value_is_reported_and_ignored() {
        let (c, complaints) = read(&[("TILEJIT_POOL_BYTES", "2T")]);
        assert_eq!(c, Config::default());
        assert_eq!(
            complaints,
            [
                r#"ignoring TILEJIT_POOL_BYTES="2T" (expected bytes such as 1073741824 or 1G; 0 disables pooling)"#
            ]
        );
    }

    #[test]
    fn log_parts_are_trimmed_and_empty_ones_skipped() {
        let parts: Vec<&str> = log_parts(" trace ,, timing,").collect();
        assert_eq!(parts, ["trace", "timing"]);
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
