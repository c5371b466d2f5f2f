//! Running one program with its kernels on two devices (placement): each
//! kernel runs on the host or on the Sim device as its plan says, and a
//! value is copied between them only when a kernel on the other side
//! reads it.
//!
//! The host run loop (`HostProgram::run_with`) drives it: it owns the
//! host storage of every buffer (`Slot`s), and [`Mixed`] keeps, per
//! buffer, its GM copy and which side holds the latest data. Each copy
//! goes through the counted `resident` functions.

use crate::error::RuntimeError;
use crate::host::{recycle, HostProgram, Slot, Store};
use crate::sim::{sim_device, SimProgram};
use std::sync::Arc;
use tilejit_device::{DeviceApi, DeviceBuffer};
use tilejit_ir::kernel::{BufId, BufKind, ProgramOutput};
use tilejit_ir::Lit;

/// Where a buffer's latest data is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Side {
    /// Not written yet.
    Nowhere,
    Host,
    Sim,
    /// Both copies are current.
    Both,
}

/// The device half of a placed run.
pub(crate) struct Mixed<'p> {
    sim: &'p SimProgram,
    on_sim: &'p [bool],
    dev: Vec<Option<Arc<DeviceBuffer>>>,
    side: Vec<Side>,
    /// Leave outputs whose latest data is in GM there (`kept`) instead
    /// of copying them back.
    keep_on_device: bool,
    /// Those outputs' buffers, by buffer index.
    pub(crate) kept: Vec<(usize, Arc<DeviceBuffer>)>,
}

impl<'p> Mixed<'p> {
    /// A run of `sim`'s program with kernel `i` on Sim where `on_sim[i]`;
    /// `keep_on_device` leaves outputs made there in GM.
    pub(crate) fn new(sim: &'p SimProgram, on_sim: &'p [bool], keep_on_device: bool) -> Mixed<'p> {
        let side = sim
            .program()
            .buffers
            .iter()
            .map(|b| match b.kind {
                BufKind::Input(_) | BufKind::Constant(_) => Side::Host,
                BufKind::Temp => Side::Nowhere,
            })
            .collect::<Vec<_>>();
        Mixed {
            sim,
            on_sim,
            dev: vec![None; side.len()],
            side,
            keep_on_device,
            kept: Vec::new(),
        }
    }

    /// Whether kernel `i` runs on Sim.
    pub(crate) fn on_sim(&self, i: usize) -> bool {
        self.on_sim.get(i).copied().unwrap_or(false)
    }

    /// Runs kernel `i` where it is placed, first copying what it reads
    /// (and, for a buffer it writes in part, what it does not overwrite)
    /// to that side.
    pub(crate) fn run_kernel(
        &mut self,
        host: &HostProgram,
        i: usize,
        slots: &mut [Slot<'_>],
        params: &[Lit],
        limits: &crate::cancel::Limits,
        stop: Option<&(dyn Fn() -> bool + Sync)>,
    ) -> Result<(), RuntimeError> {
        let k = &self.sim.program().kernels[i];
        let (reads, writes) = (k.read_buffers(), k.stored_buffers());
        if !self.on_sim(i) {
            self.pull_to_host(host, &reads, slots)?;
            self.pull_to_host(host, &writes, slots)?;
            host.run_kernel(i, slots, params, limits, stop)?;
            for w in writes {
                self.side[w.0 as usize] = Side::Host;
            }
            return Ok(());
        }
        for &b in reads.iter().chain(&writes) {
            self.push_to_dev(host, b, slots)?;
        }
        // Buffers this kernel does not touch still need a GM argument.
        let dev = sim_device();
        let spare = Arc::new(dev.allocate(1)?);
        let bufs: Vec<Arc<DeviceBuffer>> = self
            .dev
            .iter()
            .map(|d| d.clone().unwrap_or_else(|| spare.clone()))
            .collect();
        self.sim.run_kernel(i, &bufs, params)?;
        for w in writes {
            self.side[w.0 as usize] = Side::Sim;
        }
        Ok(())
    }

    /// Copies the buffers `ids` whose latest data is in GM back into
    /// their host slots.
    pub(crate) fn pull_to_host(
        &mut self,
        host: &HostProgram,
        ids: &[BufId],
        slots: &mut [Slot<'_>],
    ) -> Result<(), RuntimeError> {
        for &b in ids {
            let bi = b.0 as usize;
            if self.side[bi] != Side::Sim {
                continue;
            }
            let (Some(buf), ty) = (&self.dev[bi], host.kernels().buffers[bi].ty) else {
                continue;
            };
            let data = crate::resident::download_buffer(buf, ty.shape.numel(), ty.dtype)?;
            let old = std::mem::replace(&mut slots[bi], Slot::Owned(Store::from_buffer(data)?));
            recycle([old]);
            self.side[bi] = Side::Both;
        }
        Ok(())
    }

    /// Gives buffer `b` a current GM copy (or, unwritten, GM to be
    /// written).
    fn push_to_dev(
        &mut self,
        host: &HostProgram,
        b: BufId,
        slots: &[Slot<'_>],
    ) -> Result<(), RuntimeError> {
        let bi = b.0 as usize;
        match self.side[bi] {
            Side::Sim | Side::Both => {}
            Side::Host => {
                let a = host.slot_arrays(slots, &[b])?.remove(0);
                let buf = crate::resident::upload_buffer(a.buffer())?;
                self.dev[bi] = Some(Arc::new(buf));
                self.side[bi] = Side::Both;
            }
            Side::Nowhere => {
                if self.dev[bi].is_none() {
                    let ty = host.kernels().buffers[bi].ty;
                    let bytes = (ty.shape.numel() * ty.dtype.size_bytes()) as u64;
                    self.dev[bi] = Some(Arc::new(sim_device().allocate_for_overwrite(bytes)?));
                }
            }
        }
        Ok(())
    }

    /// Copies every program output whose latest data is in GM back to
    /// the host, or, keeping them on the device, records its buffer.
    pub(crate) fn outputs_to_host(
        &mut self,
        host: &HostProgram,
        slots: &mut [Slot<'_>],
    ) -> Result<(), RuntimeError> {
        let outs: Vec<BufId> = host
            .kernels()
            .outputs
            .iter()
            .filter_map(|o| match *o {
                ProgramOutput::Buffer(b, _) => Some(b),
                ProgramOutput::Param(..) => None,
            })
            .collect();
        if self.keep_on_device {
            for b in outs {
                let bi = b.0 as usize;
                if let (Side::Sim | Side::Both, Some(buf)) = (self.side[bi], &self.dev[bi]) {
                    self.kept.push((bi, buf.clone()));
                }
            }
            return Ok(());
        }
        self.pull_to_host(host, &outs, slots)
    }
}
