//! `DevicePool`: independent calls spread over several devices (remote
//! servers, or any mix), each call to the device with the fewest calls in
//! flight, ties taken in turn.

use crate::device::Device;
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A dispatcher over devices for independent work.
///
/// ```no_run
/// use tilejit::prelude::*;
/// use tilejit::{remote::DevicePool, Device};
/// let pool = DevicePool::new(vec![
///     Device::remote("10.0.0.1:7070", "token")?,
///     Device::remote("10.0.0.2:7070", "token")?,
/// ])?;
/// let y = pool.run(|d| {
///     let x = Tensor::rand(&[256, 256], 1).to(d)?;
///     x.matmul(&x).to_vec::<f32>()
/// })?;
/// # Ok::<(), tilejit::Error>(())
/// ```
#[derive(Debug)]
pub struct DevicePool {
    devices: Vec<Slot>,
    turn: AtomicU64,
}

#[derive(Debug)]
struct Slot {
    device: Device,
    busy: AtomicUsize,
    jobs: AtomicU64,
}

impl DevicePool {
    /// A pool over `devices` (at least one).
    pub fn new(devices: Vec<Device>) -> Result<DevicePool> {
        if devices.is_empty() {
            return Err(Error::Arguments {
                function: "DevicePool::new".into(),
                message: "the pool needs at least one device".into(),
            });
        }
        Ok(DevicePool {
            devices: devices
                .into_iter()
                .map(|device| Slot {
                    device,
                    busy: AtomicUsize::new(0),
                    jobs: AtomicU64::new(0),
                })
                .collect(),
            turn: AtomicU64::new(0),
        })
    }

    /// Runs `job` with the least busy device (ties in turn): `job` moves
    /// its inputs there, calls, and reads what it needs back.
    pub fn run<T>(&self, job: impl FnOnce(&Device) -> Result<T>) -> Result<T> {
        let n = self.devices.len();
        let start = (self.turn.fetch_add(1, Ordering::Relaxed) % n as u64) as usize;
        let slot = (0..n)
            .map(|i| &self.devices[(start + i) % n])
            .min_by_key(|s| s.busy.load(Ordering::Relaxed))
            .unwrap_or(&self.devices[start]);
        slot.busy.fetch_add(1, Ordering::Relaxed);
        slot.jobs.fetch_add(1, Ordering::Relaxed);
        struct Done<'a>(&'a AtomicUsize);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let _done = Done(&slot.busy);
        job(&slot.device)
    }

    /// The devices, in the order given.
    pub fn devices(&self) -> Vec<Device> {
        self.devices.iter().map(|s| s.device.clone()).collect()
    }

    /// Jobs each device was given so far, in the order given.
    pub fn jobs(&self) -> Vec<u64> {
        self.devices
            .iter()
            .map(|s| s.jobs.load(Ordering::Relaxed))
            .collect()
    }
}
