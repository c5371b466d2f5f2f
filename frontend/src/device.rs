//! `Device`: where a tensor's elements live and where calls on it run
//! (TVM's `Device`, Icraft XRT's Device): the host, the process's
//! simulated accelerator (`sim`), or a `tilejit serve` process reached
//! over gRPC (`Device::remote`, see `tilejit::remote`; the `remote`
//! feature).
//!
//! A tensor moves with [`Tensor::to`]. A jit call or eager op whose tensor
//! arguments all live on the Sim device launches there and returns Sim
//! tensors, so chained calls never copy through the host; arguments on
//! different devices are an [`Error::Devices`].
//! Reading values (`to_vec`, `item`, Display) of a device tensor copies
//! them back. [`transfer_stats`] counts every byte that crossed.

use crate::error::{Error, Loc, Result};
#[cfg(feature = "remote")]
use crate::remote::Conn;
use crate::tensor::{Repr, Tensor};
use std::fmt;
#[cfg(feature = "remote")]
use std::sync::Arc;
use tilejit_runtime::{DeviceArray, RuntimeError};

pub use tilejit_runtime::{count_transfers, transfer_stats, TransferStats};

/// A place tensors live and kernels run.
///
/// ```
/// use tilejit::prelude::*;
/// use tilejit::Device;
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?.to(&Device::sim())?;
/// let y = (&x * &x).exp();                  // both ops run on the Sim device
/// assert_eq!(y.device(), Device::sim());
/// assert_eq!(y.to_vec::<f32>()?, [1f32.exp(), 4f32.exp(), 9f32.exp()]); // copies back
/// # Ok::<(), tilejit::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Host,
    Sim,
    #[cfg(feature = "remote")]
    Remote(RemoteRef),
}

/// A connection to a server; two devices are equal when they share one.
#[cfg(feature = "remote")]
#[derive(Clone, Debug)]
struct RemoteRef(Arc<Conn>);

#[cfg(feature = "remote")]
impl PartialEq for RemoteRef {
    fn eq(&self, other: &RemoteRef) -> bool {
        self.0.id == other.0.id
    }
}

#[cfg(feature = "remote")]
impl Eq for RemoteRef {}

#[cfg(feature = "remote")]
impl std::hash::Hash for RemoteRef {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.id.hash(state);
    }
}

impl Device {
    /// The host: native kernels on this process's CPU.
    pub fn host() -> Device {
        Device { kind: Kind::Host }
    }

    /// The process's simulated accelerator (its GM holds the tensors).
    pub fn sim() -> Device {
        Device { kind: Kind::Sim }
    }

    /// A `tilejit serve` process at `addr` (`HOST:PORT`), reached over
    /// gRPC with `token`: connects, opens a session (its tensors live
    /// until this device and every tensor on it are dropped) and checks
    /// that both sides run the same tilejit. Each call of `remote` is a
    /// device of its own (its own connection and session); clone it to
    /// share one.
    ///
    /// `addr` is `HOST:PORT` (or `http://HOST:PORT`), in clear, which is
    /// refused unless the host is loopback; [`remote_with`](Self::remote_with)
    /// connects over TLS (`https://HOST:PORT`) or allows clear text.
    ///
    /// Needs the `remote` feature.
    #[cfg(feature = "remote")]
    #[track_caller]
    pub fn remote(addr: &str, token: &str) -> Result<Device> {
        Device::remote_with(addr, token, &crate::remote::RemoteOptions::default())
    }

    /// [`remote`](Self::remote) with TLS or clear-text options: an
    /// `https://HOST:PORT` address is checked against
    /// `options.ca_cert_pem` (a server started with `tilejit serve
    /// --tls-cert --tls-key`). Needs the `remote` feature.
    #[cfg(feature = "remote")]
    #[track_caller]
    pub fn remote_with(
        addr: &str,
        token: &str,
        options: &crate::remote::RemoteOptions,
    ) -> Result<Device> {
        let location = Loc::caller();
        let conn = Conn::connect(addr, token, options)
            .map_err(|s| crate::remote::error(addr, "connect".into(), location, s))?;
        Ok(Device {
            kind: Kind::Remote(RemoteRef(conn)),
        })
    }

    /// True for the host.
    pub fn is_host(&self) -> bool {
        self.kind == Kind::Host
    }

    /// True for the process's simulated device.
    pub fn is_sim(&self) -> bool {
        self.kind == Kind::Sim
    }

    /// The connection of a remote device.
    #[cfg(feature = "remote")]
    pub(crate) fn conn(&self) -> Option<&Arc<Conn>> {
        match &self.kind {
            Kind::Remote(r) => Some(&r.0),
            _ => None,
        }
    }

    /// What a remote device's server holds and has done (`None` for the
    /// host and Sim). Needs the `remote` feature.
    #[cfg(feature = "remote")]
    #[track_caller]
    pub fn server_stats(&self) -> Result<Option<crate::remote::ServerStats>> {
        let location = Loc::caller();
        let Kind::Remote(r) = &self.kind else {
            return Ok(None);
        };
        let s =
            r.0.stats()
                .map_err(|s| crate::remote::error(&r.0.addr, "stats".into(), location, s))?;
        Ok(Some(crate::remote::ServerStats {
            sessions: s.sessions,
            tensors: s.tensors,
            tensor_bytes: s.tensor_bytes,
            programs: s.programs,
            launches: s.launches,
            calls: s.calls,
            program_loads: s.program_loads,
            stopped: s.stopped,
            program_bytes: s.program_bytes,
        }))
    }

    /// One round trip to a remote device's server that does no work (the
    /// baseline a remote call's latency compares with); nothing for the
    /// host and Sim.
    #[track_caller]
    pub fn ping(&self) -> Result<()> {
        #[cfg(feature = "remote")]
        let location = Loc::caller();
        match &self.kind {
            #[cfg(feature = "remote")]
            Kind::Remote(r) => {
                r.0.ping()
                    .map_err(|s| crate::remote::error(&r.0.addr, "ping".into(), location, s))
            }
            _ => Ok(()),
        }
    }

    /// The device's live memory: for Sim, every GM chunk with its owner
    /// (a tensor's type, a program's constant) and the totals; for the
    /// host, the caching pool's occupancy (host tensors are plain heap
    /// memory, not tracked chunk by chunk).
    pub fn memory_report(&self) -> MemoryReport {
        match &self.kind {
            #[cfg(feature = "remote")]
            Kind::Remote(_) => MemoryReport {
                device: self.clone(),
                size: None,
                used: self
                    .server_stats()
                    .ok()
                    .flatten()
                    .map_or(0, |s| s.tensor_bytes),
                largest_free: None,
                chunks: Vec::new(),
            },
            Kind::Host => {
                let pool = tilejit_ir::pool::pool().stats();
                MemoryReport {
                    device: self.clone(),
                    size: None,
                    used: pool.bytes as u64,
                    largest_free: None,
                    chunks: Vec::new(),
                }
            }
            Kind::Sim => {
                let dev = tilejit_runtime::sim_device();
                let st = dev.memory_stats();
                let chunks = dev
                    .memory_chunks()
                    .into_iter()
                    .map(|c| Chunk {
                        offset: c.offset,
                        bytes: c.len,
                        owner: c.label.map(|l| l.to_string()),
                    })
                    .collect();
                MemoryReport {
                    device: self.clone(),
                    size: Some(st.size),
                    used: st.used,
                    largest_free: Some(st.largest_free),
                    chunks,
                }
            }
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Host => f.write_str("host"),
            Kind::Sim => f.write_str("sim"),
            #[cfg(feature = "remote")]
            Kind::Remote(r) => write!(f, "remote({}, {})", r.0.addr, r.0.device),
        }
    }
}

/// One live chunk of device memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Its first byte in the device's memory.
    pub offset: u64,
    /// Its bytes (rounded up to the allocator's 32-byte alignment).
    pub bytes: u64,
    /// What holds it: `f32[2,3] tensor`, `constant of f(..)`; `None` for
    /// a launch's scratch.
    pub owner: Option<String>,
}

/// What [`Device::memory_report`] returns; `Display` prints a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryReport {
    /// The device.
    pub device: Device,
    /// Its memory in bytes (`None` for the host).
    pub size: Option<u64>,
    /// Bytes in live chunks (for the host: bytes the caching pool holds).
    pub used: u64,
    /// The largest free block (`None` for the host).
    pub largest_free: Option<u64>,
    /// The live chunks, by offset.
    pub chunks: Vec<Chunk>,
}

impl MemoryReport {
    /// Live chunks owned by tensors (not constants or scratch).
    pub fn tensor_chunks(&self) -> impl Iterator<Item = &Chunk> {
        self.chunks
            .iter()
            .filter(|c| c.owner.as_deref().is_some_and(|o| o.ends_with(" tensor")))
    }
}

impl fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.size, self.largest_free) {
            (Some(size), Some(largest)) => writeln!(
                f,
                "{}: {} live chunks, {} of {} bytes used, largest free block {} bytes",
                self.device,
                self.chunks.len(),
                self.used,
                size,
                largest
            )?,
            _ => writeln!(
                f,
                "{}: {} bytes held by the caching pool (host tensors are not tracked by chunk)",
                self.device, self.used
            )?,
        }
        if !self.chunks.is_empty() {
            writeln!(f, "  {:>14} {:>12}  owner", "offset", "bytes")?;
        }
        for c in &self.chunks {
            writeln!(
                f,
                "  {:>14} {:>12}  {}",
                c.offset,
                c.bytes,
                c.owner.as_deref().unwrap_or("(launch scratch)")
            )?;
        }
        Ok(())
    }
}

impl Tensor {
    /// The device this tensor's elements live on (the host for traced and
    /// error tensors).
    pub fn device(&self) -> Device {
        match &self.repr {
            Repr::Sim(_) => Device::sim(),
            #[cfg(feature = "remote")]
            Repr::Remote(r) => Device {
                kind: Kind::Remote(RemoteRef(r.conn.clone())),
            },
            _ => Device::host(),
        }
    }

    /// This tensor on `device`: the same tensor if it is there already,
    /// else a copy (counted by [`transfer_stats`]). Inside a jit body a
    /// traced tensor cannot move: move the arguments before the call.
    #[track_caller]
    pub fn to(&self, device: &Device) -> Result<Tensor> {
        let location = Loc::caller();
        let moved = |r: std::result::Result<Repr, RuntimeError>| {
            r.map(|repr| Tensor {
                repr,
                weak: self.weak,
            })
            .map_err(|source| Error::Run {
                function: format!("to({device})"),
                location,
                source,
            })
        };
        #[cfg(feature = "remote")]
        let remote = |conn: &Arc<Conn>, s| {
            crate::remote::error(&conn.addr, format!("to({device})"), location, s)
        };
        match (&self.repr, &device.kind) {
            (Repr::Error(e), _) => Err((**e).clone()),
            (Repr::Traced { .. }, _) => Err(crate::trace::traced_value_error("to", location)),
            (Repr::Concrete(_), Kind::Host) | (Repr::Sim(_), Kind::Sim) => Ok(self.clone()),
            #[cfg(feature = "remote")]
            (Repr::Remote(r), Kind::Remote(to)) if r.conn.id == to.0.id => Ok(self.clone()),
            (Repr::Concrete(a), Kind::Sim) => moved(DeviceArray::upload(a).map(Repr::Sim)),
            (Repr::Sim(d), Kind::Host) => moved(d.download().map(Repr::Concrete)),
            #[cfg(feature = "remote")]
            (Repr::Concrete(a), Kind::Remote(to)) => Ok(Tensor {
                repr: Repr::Remote(to.0.upload(a).map_err(|s| remote(&to.0, s))?),
                weak: self.weak,
            }),
            // Through the host: from a Sim device, a remote one, or
            // between two servers.
            #[cfg(feature = "remote")]
            (Repr::Sim(_) | Repr::Remote(_), _) => {
                let host = Tensor {
                    repr: Repr::Concrete(self.array("to")?),
                    weak: self.weak,
                };
                host.to(device)
            }
        }
    }
}

/// Checks that the tensors of one call or op live on one device: that
/// device, or [`Error::Devices`] naming each argument's. Rank-0 host
/// tensors (literals such as `x * 2.0`) go with any device.
pub(crate) fn common_device<'a>(
    op: &str,
    location: Loc,
    tensors: impl Iterator<Item = (String, &'a Tensor)> + Clone,
) -> Result<Device> {
    let mut found: Option<Device> = None;
    let mut mixed = false;
    for (_, t) in tensors.clone() {
        if is_literal(t) {
            continue;
        }
        let d = t.device();
        match &found {
            None => found = Some(d),
            Some(f) if *f != d => mixed = true,
            Some(_) => {}
        }
    }
    if mixed {
        return Err(Error::Devices {
            op: op.to_string(),
            location,
            arguments: tensors
                .map(|(name, t)| (name, t.device().to_string()))
                .collect(),
        });
    }
    Ok(found.unwrap_or_else(Device::host))
}

/// A host scalar that may join a device call (copied in with it).
fn is_literal(t: &Tensor) -> bool {
    matches!(&t.repr, Repr::Concrete(a) if a.shape().rank() == 0)
}

/// The device form of an eager or jit result list.
pub(crate) fn sim_tensors(outs: Vec<DeviceArray>) -> Vec<Tensor> {
    outs.into_iter()
        .map(|d| Tensor {
            repr: Repr::Sim(d),
            weak: false,
        })
        .collect()
}
