//! Code generation's own `TILEJIT_*` setting, read once into a typed
//! [`Config`] (the parsers and the stderr report are
//! [`tilejit_ir::config`]'s).
//!
//! | variable | values | default | effect |
//! |---|---|---|---|
//! | `TILEJIT_NO_FMA` | set or unset | unset | for tests: host code is generated as for a CPU without FMA |

use std::ffi::OsString;
use std::sync::OnceLock;

/// Every variable [`Config`] reads, with the values it accepts.
pub const VARIABLES: &[(&str, &str)] = &[(
    "TILEJIT_NO_FMA",
    "set or unset (tests: code as for a CPU without FMA)",
)];

/// Code generation's settings (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// `TILEJIT_NO_FMA`: host code as for a CPU without FMA (tests).
    pub no_fma: bool,
}

/// Code generation's settings, read from the environment on first use.
#[inline]
pub fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| tilejit_ir::config::from_env(Config::read))
}

impl Config {
    /// Reads code generation's variables through `var` (the environment,
    /// or a test's map): the settings, and one complaint per value it
    /// ignored (none: a set `TILEJIT_NO_FMA` is on whatever its value).
    ///
    /// ```
    /// use tilejit_codegen::config::Config;
    /// let (c, _) = Config::read(|name| (name == "TILEJIT_NO_FMA").then(|| "1".into()));
    /// assert!(c.no_fma);
    /// assert!(!Config::read(|_| None).0.no_fma);
    /// ```
    pub fn read(var: impl Fn(&str) -> Option<OsString>) -> (Config, Vec<String>) {
        let c = Config {
            no_fma: var("TILEJIT_NO_FMA").is_some(),
        };
        (c, Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_is_documented_in_the_table() {
        let doc = include_str!("config.rs");
        for (name, _) in VARIABLES {
            assert!(doc.contains(&format!("//! | `{name}`")), "{name}");
        }
    }
}
