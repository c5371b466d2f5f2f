//! `DeviceConfig`: every number of the simulated device in one struct, with
//! Ascend-910B-like defaults (design.md §4). It loads from and saves to JSON
//! so a user can model another chip; `validate` rejects configs the
//! simulator cannot honour (zero rates, zero-sized memories).

use crate::error::{DeviceError, Result};
use serde::{Deserialize, Serialize};

/// The cost of each class of instruction, as data. Formulas (see `ISA.md`):
/// - scalar: `scalar`; taken branch: `branch`;
/// - vector: `vector_startup + ceil(bytes / vector_bytes_per_cycle)`;
/// - transfers: `latency + ceil(bytes / bytes_per_cycle)` per route;
/// - cube: `cube_startup + ceil(m/16)*ceil(k/16)*ceil(n/16) * factor`
///   (`factor` = 1 for f16/bf16, `cube_f32_factor` for f32).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostTable {
    /// Cycles of a scalar ALU instruction.
    pub scalar: u64,
    /// Cycles of a taken branch.
    pub branch: u64,
    /// Cycles to set or wait on a flag (added to the pipe).
    pub flag: u64,
    /// Fixed cycles of every vector instruction.
    pub vector_startup: u64,
    /// Bytes the vector unit processes per cycle.
    pub vector_bytes_per_cycle: u64,
    /// Latency of a GM read (MTE2).
    pub gm_read_latency: u64,
    /// Bytes per cycle per core for GM reads (MTE2: GM->UB, GM->L1).
    pub gm_read_bytes_per_cycle: u64,
    /// Latency of a GM write (MTE3: UB->GM).
    pub gm_write_latency: u64,
    /// Bytes per cycle per core for UB->GM writes.
    pub gm_write_bytes_per_cycle: u64,
    /// Latency of an L1->L0 move (MTE1).
    pub l1_to_l0_latency: u64,
    /// Bytes per cycle for L1->L0A.
    pub l1_to_l0a_bytes_per_cycle: u64,
    /// Bytes per cycle for L1->L0B.
    pub l1_to_l0b_bytes_per_cycle: u64,
    /// Fixed cycles of a cube instruction.
    pub cube_startup: u64,
    /// Multiplier of the cube's cycles for f32 operands (half rate = 2).
    pub cube_f32_factor: u64,
    /// Latency of a fixpipe store (L0C->GM).
    pub fixpipe_latency: u64,
    /// Bytes per cycle of a fixpipe store (counted in output bytes).
    pub fixpipe_bytes_per_cycle: u64,
}

impl Default for CostTable {
    fn default() -> Self {
        CostTable {
            scalar: 1,
            branch: 2,
            flag: 1,
            vector_startup: 8,
            vector_bytes_per_cycle: 256,
            gm_read_latency: 200,
            gm_read_bytes_per_cycle: 32,
            gm_write_latency: 100,
            gm_write_bytes_per_cycle: 64,
            l1_to_l0_latency: 20,
            l1_to_l0a_bytes_per_cycle: 512,
            l1_to_l0b_bytes_per_cycle: 256,
            cube_startup: 10,
            cube_f32_factor: 2,
            fixpipe_latency: 50,
            fixpipe_bytes_per_cycle: 64,
        }
    }
}

/// The largest cost, latency or rate a config may set (2^20).
pub const MAX_COST: u64 = 1 << 20;

/// The whole device model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// A name for messages and traces.
    pub name: String,
    /// Cube cores (AIC).
    pub aic_cores: u32,
    /// Vector cores (AIV).
    pub aiv_cores: u32,
    /// Clock of the cycle model, Hz.
    pub clock_hz: f64,
    /// Global memory the simulator models, bytes (backed lazily: only
    /// touched pages use host memory).
    pub gm_bytes: u64,
    /// Unified buffer per AIV core, bytes.
    pub ub_bytes: u32,
    /// L1 buffer per AIC core, bytes.
    pub l1_bytes: u32,
    /// L0A per AIC core, bytes.
    pub l0a_bytes: u32,
    /// L0B per AIC core, bytes.
    pub l0b_bytes: u32,
    /// L0C per AIC core, bytes.
    pub l0c_bytes: u32,
    /// Work one core may do in one run before the watchdog faults it, in
    /// elementary steps: 16 per instruction, plus one per 4 bytes moved or
    /// processed, plus one per cube multiply-add (about equal host costs).
    /// The default, 4e9, lets one task do a 64x64 output tile with K up to
    /// ~15,000 x 64 and still turns a hung or runaway program into an
    /// error within seconds of host time in release builds (a scalar loop
    /// faults after 250M instructions, ~4 s), never a hang. At most
    /// [`MAX_WATCHDOG_WORK`]; a launch's timeout stops a run sooner.
    pub watchdog_work: u64,
    /// Most scheduler manager threads a launch uses (PyPTO's AICPU
    /// schedulers: `ceil(blocks / 8)`, capped by this and by the host's
    /// cores).
    pub max_managers: u32,
    /// Virtual cycles between a task becoming ready and a core starting it
    /// (the manager's register write and the core's pickup).
    pub dispatch_cycles: u64,
    /// Instruction costs.
    pub costs: CostTable,
}

/// The largest `watchdog_work`: 10^12 steps, about 15 minutes of one core
/// in a release build (launch timeouts stop runs sooner).
pub const MAX_WATCHDOG_WORK: u64 = 1_000_000_000_000;

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            name: "sim-910b".to_string(),
            aic_cores: 24,
            aiv_cores: 48,
            clock_hz: 1.85e9,
            gm_bytes: 8 << 30,
            ub_bytes: 192 << 10,
            l1_bytes: 512 << 10,
            l0a_bytes: 64 << 10,
            l0b_bytes: 64 << 10,
            l0c_bytes: 128 << 10,
            watchdog_work: 4_000_000_000,
            max_managers: 3,
            dispatch_cycles: 200,
            costs: CostTable::default(),
        }
    }
}

impl DeviceConfig {
    /// Parses a config from JSON (every field required, unknown fields
    /// rejected) and validates it.
    pub fn from_json(text: &str) -> Result<DeviceConfig> {
        let cfg: DeviceConfig =
            serde_json::from_str(text).map_err(|e| DeviceError::Config(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The config as pretty JSON.
    pub fn to_json(&self) -> String {
        // A struct of numbers and a string always serialises.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Blocks of the chip: one block is one AIC and two AIV.
    pub fn blocks(&self) -> u32 {
        self.aic_cores.min(self.aiv_cores / 2)
    }

    /// Rejects values the simulator cannot honour.
    pub fn validate(&self) -> Result<()> {
        let c = &self.costs;
        let rates = [
            ("vector_bytes_per_cycle", c.vector_bytes_per_cycle),
            ("gm_read_bytes_per_cycle", c.gm_read_bytes_per_cycle),
            ("gm_write_bytes_per_cycle", c.gm_write_bytes_per_cycle),
            ("l1_to_l0a_bytes_per_cycle", c.l1_to_l0a_bytes_per_cycle),
            ("l1_to_l0b_bytes_per_cycle", c.l1_to_l0b_bytes_per_cycle),
            ("fixpipe_bytes_per_cycle", c.fixpipe_bytes_per_cycle),
            ("cube_f32_factor", c.cube_f32_factor),
        ];
        for (name, v) in rates.iter().copied() {
            if v == 0 {
                return Err(DeviceError::Config(format!("costs.{name} must be > 0")));
            }
        }
        // Every cost bounded, so the cycle model's sums cannot overflow (a
        // run is bounded by the watchdog's work budget).
        let costs = [
            ("scalar", c.scalar),
            ("branch", c.branch),
            ("flag", c.flag),
            ("vector_startup", c.vector_startup),
            ("gm_read_latency", c.gm_read_latency),
            ("gm_write_latency", c.gm_write_latency),
            ("l1_to_l0_latency", c.l1_to_l0_latency),
            ("cube_startup", c.cube_startup),
            ("fixpipe_latency", c.fixpipe_latency),
            ("cube_f32_factor", c.cube_f32_factor),
        ]
        .into_iter()
        .chain(rates)
        .chain([("dispatch_cycles", self.dispatch_cycles)]);
        for (name, v) in costs {
            if v > MAX_COST {
                return Err(DeviceError::Config(format!(
                    "{name} = {v}: at most {MAX_COST} cycles (or bytes per cycle)"
                )));
            }
        }
        let mems = [
            ("ub_bytes", self.ub_bytes),
            ("l1_bytes", self.l1_bytes),
            ("l0a_bytes", self.l0a_bytes),
            ("l0b_bytes", self.l0b_bytes),
            ("l0c_bytes", self.l0c_bytes),
        ];
        for (name, v) in mems {
            if v == 0 || v % 32 != 0 || v > (64 << 20) {
                return Err(DeviceError::Config(format!(
                    "{name} = {v}: must be a non-zero multiple of 32 bytes, at most 64 MiB"
                )));
            }
        }
        if self.aic_cores == 0 && self.aiv_cores == 0 {
            return Err(DeviceError::Config("the device has no cores".into()));
        }
        if self.aic_cores > 4096 || self.aiv_cores > 4096 {
            return Err(DeviceError::Config(
                "at most 4096 cores of each type".into(),
            ));
        }
        if !(self.clock_hz.is_finite() && self.clock_hz > 0.0) {
            return Err(DeviceError::Config(format!(
                "clock_hz = {}: must be a positive number",
                self.clock_hz
            )));
        }
        if self.gm_bytes < 4096 || self.gm_bytes > (1 << 44) {
            return Err(DeviceError::Config(format!(
                "gm_bytes = {}: must be between 4 KiB and 16 TiB",
                self.gm_bytes
            )));
        }
        if self.max_managers == 0 || self.max_managers > 64 {
            return Err(DeviceError::Config(format!(
                "max_managers = {}: must be 1..=64",
                self.max_managers
            )));
        }
        if self.watchdog_work == 0 || self.watchdog_work > MAX_WATCHDOG_WORK {
            return Err(DeviceError::Config(format!(
                "watchdog_work = {}: must be 1..={MAX_WATCHDOG_WORK}",
                self.watchdog_work
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests assert by unwrapping
mod tests {
    use super::{DeviceConfig, MAX_COST};

    /// A cost past the bound is refused, naming the field (huge costs once
    /// overflowed the cycle model's sums: a panic in debug builds, garbage
    /// device times in release ones); the default config passes.
    #[test]
    fn huge_costs_are_refused() {
        DeviceConfig::default().validate().unwrap();
        let mut c = DeviceConfig::default();
        c.costs.gm_read_latency = u64::MAX;
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("gm_read_latency") && e.contains(&MAX_COST.to_string()),
            "{e}"
        );
        let c = DeviceConfig {
            dispatch_cycles: MAX_COST + 1,
            ..DeviceConfig::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("dispatch_cycles"));
        let mut c = DeviceConfig::default();
        c.costs.scalar = MAX_COST;
        c.validate().unwrap();
    }

    /// A config read back from its own JSON is the same config, floats
    /// included (found by tilejit-fuzz: serde_json's default float parser
    /// is not exact, so this clock came back one ulp off, and the sim
    /// kernel cache keys on the config's JSON).
    #[test]
    fn json_round_trips_exactly() {
        let text = DeviceConfig::default()
            .to_json()
            .replace("1850000000.0", "18589934592850000000.0");
        let c = DeviceConfig::from_json(&text).unwrap();
        assert_eq!(c.clock_hz, 18589934592850000000.0);
        assert_eq!(DeviceConfig::from_json(&c.to_json()).unwrap(), c);
    }
}
