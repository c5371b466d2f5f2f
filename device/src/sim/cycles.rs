//! The cycle model: per-pipe in-order timelines of one core. The scalar
//! unit issues every instruction in program order (its clock is pipe `S`);
//! an instruction for another pipe starts when it has been issued and its
//! pipe is free, so pipes overlap except where `setf`/`waitf` and `barrier`
//! order them: double buffering shows in the totals. Costs come from the
//! table's cost class and the numbers in [`CostTable`]; everything is
//! integer arithmetic, so runs are deterministic.

use crate::config::CostTable;
use crate::isa::{CostClass, Inst, Pipe, NUM_EVENTS};

/// What an executed instruction did, for costing it.
#[derive(Copy, Clone, Debug, Default)]
pub struct Work {
    /// Bytes moved or processed.
    pub bytes: u64,
    /// 16x16x16 cube blocks.
    pub blocks: u64,
    /// Cube multiply-adds.
    pub macs: u64,
    /// A branch was taken.
    pub taken: bool,
}

impl Work {
    /// Elementary steps for the watchdog: the interpreter's host time is
    /// roughly linear in it, so a step budget bounds wall time.
    pub fn steps(&self) -> u64 {
        (16 + self.bytes / 4).saturating_add(self.macs)
    }
}

/// Cycles of one instruction of class `class` that did `w`.
pub fn cost(class: CostClass, w: &Work, c: &CostTable, f32_cube: bool) -> u64 {
    let per = |bytes: u64, rate: u64| bytes.div_ceil(rate.max(1));
    match class {
        CostClass::Scalar | CostClass::Barrier => c.scalar,
        CostClass::Branch => {
            if w.taken {
                c.branch
            } else {
                c.scalar
            }
        }
        CostClass::Flag => c.flag,
        CostClass::Vector => c
            .vector_startup
            .saturating_add(per(w.bytes, c.vector_bytes_per_cycle)),
        CostClass::GmRead => c
            .gm_read_latency
            .saturating_add(per(w.bytes, c.gm_read_bytes_per_cycle)),
        CostClass::GmWrite => c
            .gm_write_latency
            .saturating_add(per(w.bytes, c.gm_write_bytes_per_cycle)),
        CostClass::L1ToL0a => c
            .l1_to_l0_latency
            .saturating_add(per(w.bytes, c.l1_to_l0a_bytes_per_cycle)),
        CostClass::L1ToL0b => c
            .l1_to_l0_latency
            .saturating_add(per(w.bytes, c.l1_to_l0b_bytes_per_cycle)),
        CostClass::Cube => c
            .cube_startup
            .saturating_add(
                w.blocks
                    .saturating_mul(if f32_cube { c.cube_f32_factor } else { 1 }),
            ),
        CostClass::Fixpipe => c
            .fixpipe_latency
            .saturating_add(per(w.bytes, c.fixpipe_bytes_per_cycle)),
    }
}

/// One core's pipes over one run.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// When each pipe is next free (pipe `S` is the issue clock).
    free: [u64; 7],
    busy: [u64; 7],
    /// Flags raised and not yet waited on, as (flag index, raise time) in
    /// raise order; a wait takes its flag's oldest. Few are pending at a
    /// time, so a scan beats a table of queues built for every task.
    raised: Vec<(usize, u64)>,
}

fn flag_index(src: Pipe, dst: Pipe, ev: u8) -> usize {
    (src.index() * 7 + dst.index()) * NUM_EVENTS as usize + ev as usize
}

impl Timeline {
    /// Accounts one instruction of `cycles` cycles. Returns an error message
    /// when a `waitf` finds no raised flag: in an in-order issue model that
    /// wait could never end.
    pub fn account(&mut self, inst: &Inst, cycles: u64, c: &CostTable) -> Result<(), String> {
        let s = Pipe::S.index();
        match inst.op {
            crate::isa::Opcode::Setf => {
                let src = inst.pipe(0).index();
                let issue = self.issue(c);
                let t = self.free[src].max(issue).saturating_add(cycles);
                self.free[src] = t;
                self.busy[src] = self.busy[src].saturating_add(cycles);
                let flag = flag_index(inst.pipe(0), inst.pipe(1), inst.event(2));
                self.raised.push((flag, t));
            }
            crate::isa::Opcode::Waitf => {
                let (sp, dp, ev) = (inst.pipe(0), inst.pipe(1), inst.event(2));
                let flag = flag_index(sp, dp, ev);
                let oldest = self.raised.iter().position(|&(f, _)| f == flag);
                let Some(t_set) = oldest.map(|i| self.raised.remove(i).1) else {
                    return Err(format!(
                        "waitf ({}, {}, {ev}) with no flag raised by an earlier setf: it would wait forever",
                        sp.name(),
                        dp.name()
                    ));
                };
                let issue = self.issue(c);
                let d = dp.index();
                self.free[d] = self.free[d].max(issue).max(t_set).saturating_add(cycles);
                self.busy[d] = self.busy[d].saturating_add(cycles);
            }
            crate::isa::Opcode::Barrier => {
                let t = self
                    .free
                    .iter()
                    .copied()
                    .max()
                    .unwrap_or(0)
                    .saturating_add(cycles);
                self.free = [t; 7];
                self.busy[s] = self.busy[s].saturating_add(cycles);
            }
            _ => match inst.pipe_of() {
                Some(Pipe::S) | None => {
                    self.free[s] = self.free[s].saturating_add(cycles);
                    self.busy[s] = self.busy[s].saturating_add(cycles);
                }
                Some(p) => {
                    let issue = self.issue(c);
                    let i = p.index();
                    self.free[i] = self.free[i].max(issue).saturating_add(cycles);
                    self.busy[i] = self.busy[i].saturating_add(cycles);
                }
            },
        }
        Ok(())
    }

    /// The scalar unit spends one scalar cycle dispatching to another pipe.
    fn issue(&mut self, c: &CostTable) -> u64 {
        let s = Pipe::S.index();
        self.free[s] = self.free[s].saturating_add(c.scalar);
        self.busy[s] = self.busy[s].saturating_add(c.scalar);
        self.free[Pipe::S.index()]
    }

    /// Cycles until every pipe has drained.
    pub fn total(&self) -> u64 {
        self.free.iter().copied().max().unwrap_or(0)
    }

    /// Busy cycles per pipe, indexed by [`Pipe::index`].
    pub fn busy(&self) -> [u64; 7] {
        self.busy
    }

    /// Flags raised and never waited on, as `(src, dst, event, count)`.
    pub fn dangling_flags(&self) -> Vec<(Pipe, Pipe, u8, usize)> {
        let mut out = Vec::new();
        for s in Pipe::ALL {
            for d in Pipe::ALL {
                for e in 0..NUM_EVENTS {
                    let flag = flag_index(s, d, e);
                    let n = self.raised.iter().filter(|&&(f, _)| f == flag).count();
                    if n > 0 {
                        out.push((s, d, e, n));
                    }
                }
            }
        }
        out
    }
}
