//! Launch profiles: per-task records from the managers, written as a
//! Chrome trace (Perfetto and `chrome://tracing` open it) with one lane per
//! AIC/AIV core in virtual device time (tasks named by kernel/tile), one
//! lane per manager thread in host time, dependency arrows and a
//! ready-task counter; and a summary (device time, per-core utilisation,
//! per-pipe busy share, time waiting for the scheduler vs for
//! dependencies).

use crate::isa::{CoreType, Pipe};
use serde_json::{json, Value};
use std::fmt::Write;
use std::time::Duration;

/// What one task did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRecord {
    /// Task index.
    pub task: u32,
    /// Core type it ran on.
    pub core: CoreType,
    /// Core index within its type.
    pub core_index: u32,
    /// Virtual cycle its last predecessor finished.
    pub ready: u64,
    /// Virtual cycle it started.
    pub start: u64,
    /// Virtual cycle it ended.
    pub end: u64,
    /// The manager that ran it.
    pub manager: usize,
    /// Host time (since the launch's init) the manager picked it up.
    pub host_start: Duration,
    /// Host time it finished.
    pub host_end: Duration,
    /// Busy cycles per pipe.
    pub busy: [u64; 7],
}

/// A launch's profile.
#[derive(Clone, Debug)]
pub struct Profile {
    /// The launch's name.
    pub name: String,
    /// Core tasks, in no particular order (hubs take no time and have none).
    pub records: Vec<TaskRecord>,
    /// Every task's name.
    pub task_names: Vec<String>,
    /// Every task's successors.
    pub successors: Vec<Vec<u32>>,
    /// Manager threads.
    pub managers: usize,
    /// AIC lanes.
    pub aic_cores: u32,
    /// AIV lanes.
    pub aiv_cores: u32,
    /// Clock of the virtual time base.
    pub clock_hz: f64,
    /// Busy cycles per pipe, all cores.
    pub pipe_busy: [u64; 7],
    /// Virtual device time of the launch.
    pub device_cycles: u64,
    /// Host time of the launch: the control thread's init to the last
    /// task's end.
    pub host_time: Duration,
    /// Host time spent copying the run's data in and out around the
    /// launch, when the launcher measured it.
    pub host_copies: Option<HostCopies>,
}

/// Host time of the copies around a launch (host -> GM before, GM -> host
/// after): with the launch's own host time, where a Sim run's time went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCopies {
    /// Allocating GM and copying the inputs (and constants) in.
    pub copy_in: Duration,
    /// Copying the outputs back.
    pub copy_out: Duration,
}

/// Dependency arrows beyond this many are left out (the trace stays small).
const MAX_FLOWS: usize = 20_000;

impl Profile {
    fn tid(&self, core: CoreType, index: u32) -> u32 {
        match core {
            CoreType::Aic => index,
            CoreType::Aiv => self.aic_cores + index,
        }
    }

    fn us(&self, cycles: u64) -> f64 {
        cycles as f64 / self.clock_hz * 1e6
    }

    /// The Chrome trace JSON. Process 0 is the device (lanes `AIC_<i>`,
    /// `AIV_<i>`, virtual time); process 1 the scheduler (lanes
    /// `manager_<k>`, host time).
    pub fn chrome_trace(&self) -> String {
        let mut ev: Vec<Value> = Vec::new();
        ev.push(json!({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": format!("device ({})", self.name)}}));
        ev.push(json!({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "scheduler (host time)"}}));
        for i in 0..self.aic_cores {
            ev.push(json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": self.tid(CoreType::Aic, i), "args": {"name": format!("AIC_{i}")}}));
        }
        for i in 0..self.aiv_cores {
            ev.push(json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": self.tid(CoreType::Aiv, i), "args": {"name": format!("AIV_{i}")}}));
        }
        for m in 0..self.managers {
            ev.push(json!({"ph": "M", "name": "thread_name", "pid": 1, "tid": m, "args": {"name": format!("manager_{m}")}}));
        }
        let mut by_task: Vec<Option<&TaskRecord>> = vec![None; self.task_names.len()];
        for r in &self.records {
            if let Some(slot) = by_task.get_mut(r.task as usize) {
                *slot = Some(r);
            }
            let name = self
                .task_names
                .get(r.task as usize)
                .cloned()
                .unwrap_or_default();
            ev.push(json!({
                "ph": "X", "pid": 0, "tid": self.tid(r.core, r.core_index), "name": name,
                "ts": self.us(r.start), "dur": self.us(r.end - r.start),
                "args": {"task": r.task, "ready_cycle": r.ready, "start_cycle": r.start, "end_cycle": r.end}
            }));
            ev.push(json!({
                "ph": "X", "pid": 1, "tid": r.manager, "name": format!("run {name}"),
                "ts": r.host_start.as_secs_f64() * 1e6,
                "dur": (r.host_end.saturating_sub(r.host_start)).as_secs_f64() * 1e6,
            }));
        }
        let mut flows = 0usize;
        'edges: for r in &self.records {
            for &s in self
                .successors
                .get(r.task as usize)
                .map(Vec::as_slice)
                .unwrap_or(&[])
            {
                let Some(Some(to)) = by_task.get(s as usize) else {
                    continue;
                };
                if flows >= MAX_FLOWS {
                    break 'edges;
                }
                flows += 1;
                ev.push(json!({"ph": "s", "id": flows, "pid": 0, "tid": self.tid(r.core, r.core_index), "ts": self.us(r.end), "name": "dep", "cat": "dep"}));
                ev.push(json!({"ph": "f", "bp": "e", "id": flows, "pid": 0, "tid": self.tid(to.core, to.core_index), "ts": self.us(to.start), "name": "dep", "cat": "dep"}));
            }
        }
        // Ready-but-not-started tasks over virtual time.
        let mut changes: Vec<(u64, i64)> = Vec::with_capacity(self.records.len() * 2);
        for r in &self.records {
            changes.push((r.ready, 1));
            changes.push((r.start, -1));
        }
        changes.sort_unstable();
        let step = (changes.len() / 10_000).max(1);
        let mut level = 0i64;
        for (i, (t, d)) in changes.iter().enumerate() {
            level += d;
            if i % step == 0 || i + 1 == changes.len() {
                ev.push(json!({"ph": "C", "pid": 0, "name": "ready tasks", "ts": self.us(*t), "args": {"ready": level}}));
            }
        }
        // Host-side totals ride along as trace metadata (Perfetto shows
        // them under the trace's info).
        let mut other = json!({"launch_host_ms": self.host_time.as_secs_f64() * 1e3});
        if let Some(c) = self.host_copies {
            other["copy_in_host_ms"] = json!(c.copy_in.as_secs_f64() * 1e3);
            other["copy_out_host_ms"] = json!(c.copy_out.as_secs_f64() * 1e3);
        }
        json!({"traceEvents": ev, "displayTimeUnit": "ns", "otherData": other}).to_string()
    }

    /// Device time, per-core utilisation, per-pipe busy share, and how long
    /// cores' tasks waited for the scheduler and for their dependencies.
    pub fn summary(&self) -> String {
        let total = self.device_cycles.max(1);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "launch `{}`: {} tasks, device time {:.3} us ({} cycles), {} managers",
            self.name,
            self.task_names.len(),
            self.us(self.device_cycles),
            self.device_cycles,
            self.managers
        );
        let lanes = (self.aic_cores + self.aiv_cores) as usize;
        let mut busy = vec![0u64; lanes];
        let mut wait_sched = 0u64;
        let mut wait_dep = 0u64;
        let mut recs: Vec<&TaskRecord> = self.records.iter().collect();
        recs.sort_by_key(|r| (self.tid(r.core, r.core_index), r.start));
        let mut prev_end: Vec<u64> = vec![0; lanes];
        for r in recs {
            let l = self.tid(r.core, r.core_index) as usize;
            busy[l] += r.end - r.start;
            // Waiting for dependencies: the core was free before the task
            // was ready; for the scheduler: from ready (or core free) to start.
            let free = prev_end[l];
            wait_dep += r.ready.saturating_sub(free);
            wait_sched += r.start.saturating_sub(r.ready.max(free));
            prev_end[l] = r.end;
        }
        let used = busy.iter().filter(|&&b| b > 0).count();
        let util: f64 =
            busy.iter().map(|&b| b as f64 / total as f64).sum::<f64>() / lanes.max(1) as f64;
        let _ = writeln!(
            s,
            "cores used: {used} of {lanes}; mean utilisation {:.1}%",
            util * 100.0
        );
        for (i, b) in busy.iter().enumerate().filter(|(_, &b)| b > 0).take(8) {
            let name = if (i as u32) < self.aic_cores {
                format!("AIC_{i}")
            } else {
                format!("AIV_{}", i as u32 - self.aic_cores)
            };
            let _ = writeln!(
                s,
                "  {name:<7} busy {:5.1}%",
                100.0 * *b as f64 / total as f64
            );
        }
        let pipe_total: u64 = self.pipe_busy.iter().sum::<u64>().max(1);
        let shares: Vec<String> = Pipe::ALL
            .iter()
            .filter(|p| self.pipe_busy[p.index()] > 0)
            .map(|p| {
                format!(
                    "{} {:.1}%",
                    p.name(),
                    100.0 * self.pipe_busy[p.index()] as f64 / pipe_total as f64
                )
            })
            .collect();
        let _ = writeln!(s, "pipe busy share: {}", shares.join(", "));
        let _ = writeln!(
            s,
            "core wait: {wait_sched} cycles for the scheduler, {wait_dep} cycles for dependencies"
        );
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        match self.host_copies {
            Some(c) => {
                let _ = writeln!(
                    s,
                    "host time: copy in {:.3} ms, launch {:.3} ms, copy out {:.3} ms",
                    ms(c.copy_in),
                    ms(self.host_time),
                    ms(c.copy_out)
                );
            }
            None => {
                let _ = writeln!(s, "host time: launch {:.3} ms", ms(self.host_time));
            }
        }
        s
    }
}
