//! Placement across devices (Icraft XRT's backend priority, done
//! honestly): a priority list of devices; each kernel of the calls inside
//! [`with_placement`] runs on the first device that can run it. With
//! fallback off (the default), a kernel the first device cannot run is an
//! error naming the kernel and why, never a silent move to the host
//! (ONNX Runtime's silent CPU fallback is its users' top complaint).
//!
//! Values cross between devices only where a kernel on one reads what a
//! kernel on the other wrote (counted by [`crate::transfer_stats`]);
//! tensor arguments may live on any device, and results are returned on
//! the placement's first device. [`crate::JitFunction::last_placement`]
//! says where each kernel of the last placed call ran, and why.

use crate::device::Device;
use crate::error::{Error, Loc, Result};
use std::cell::RefCell;
use std::fmt;
use tilejit_runtime::Program;

/// A priority list of devices; see the module docs.
///
/// ```
/// use tilejit::prelude::*;
/// use tilejit::{with_placement, Device, Placement, PlacementReport};
///
/// #[jit]
/// fn scaled(x: &Tensor) -> Tensor {
///     (x * 3.0).exp()
/// }
///
/// let x = Tensor::from_vec(vec![0.0f32, 1.0], &[2])?;
/// let placement = Placement::new(&[Device::sim(), Device::host()]).allow_fallback(true);
/// let y = with_placement(&placement, || scaled(&x))?;
/// assert_eq!(y.device(), Device::sim());
/// let placed = scaled::jit().last_placement().unwrap();
/// assert_eq!(placed[0].device, Device::sim());
/// println!("{}", PlacementReport(&placed));
/// # Ok::<(), tilejit::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    devices: Vec<Device>,
    fallback: bool,
}

impl Placement {
    /// Devices in order of preference (fallback off).
    pub fn new(devices: &[Device]) -> Placement {
        Placement {
            devices: devices.to_vec(),
            fallback: false,
        }
    }

    /// Whether a kernel the first device cannot run may go to the next
    /// one that can (default false: it is an error).
    pub fn allow_fallback(mut self, allow: bool) -> Placement {
        self.fallback = allow;
        self
    }

    /// The devices, in order of preference.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Whether fallback is allowed.
    pub fn fallback(&self) -> bool {
        self.fallback
    }

    /// Where the results of a placed call live: the first device.
    pub(crate) fn home(&self) -> Device {
        self.devices.first().cloned().unwrap_or_else(Device::host)
    }
}

thread_local! {
    static SCOPED: RefCell<Option<Placement>> = const { RefCell::new(None) };
    /// Whether `SCOPED` is set: the one read a call pays without placement.
    static ANY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with every jit call and eager op it makes on this thread
/// placed by `placement` (an inner scope replaces an outer one).
pub fn with_placement<R>(placement: &Placement, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Placement>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            ANY.with(|a| a.set(outer.is_some()));
            SCOPED.with(|s| *s.borrow_mut() = outer);
        }
    }
    let outer = SCOPED.with(|s| s.borrow_mut().replace(placement.clone()));
    ANY.with(|a| a.set(true));
    let _restore = Restore(outer);
    f()
}

/// The placement in force on this thread, if any.
#[inline]
pub(crate) fn current() -> Option<Placement> {
    if !ANY.with(|a| a.get()) {
        return None;
    }
    SCOPED.with(|s| s.borrow().clone())
}

/// Where one kernel of a placed call ran.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelPlacement {
    /// The kernel's name.
    pub kernel: String,
    /// The device it ran on.
    pub device: Device,
    /// Why not on the first device (empty when it got its first choice).
    pub reason: String,
}

/// Displays placed kernels as a table.
pub struct PlacementReport<'a>(pub &'a [KernelPlacement]);

impl fmt::Display for PlacementReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self
            .0
            .iter()
            .map(|k| k.kernel.len())
            .max()
            .unwrap_or(6)
            .max(6);
        writeln!(
            f,
            "{:>3}  {:<width$}  {:<6}  reason",
            "#", "kernel", "device"
        )?;
        for (i, k) in self.0.iter().enumerate() {
            let reason = if k.reason.is_empty() {
                "first choice"
            } else {
                &k.reason
            };
            writeln!(
                f,
                "{i:>3}  {:<width$}  {:<6}  {reason}",
                k.kernel,
                k.device.to_string()
            )?;
        }
        Ok(())
    }
}

/// Places each kernel of `program`: per kernel, whether it runs on Sim,
/// and the report. An error if a kernel's first device cannot run it and
/// fallback is off, or no listed device can.
pub(crate) fn plan(
    placement: &Placement,
    program: &Program,
    function: &str,
    location: Loc,
) -> Result<(Vec<bool>, Vec<KernelPlacement>)> {
    let kernels = &program.host().kernels().kernels;
    let wants_sim = placement.devices.iter().any(|d| *d == Device::sim());
    let support = match wants_sim {
        true => program.sim_support().map_err(|source| Error::Run {
            function: function.to_string(),
            location,
            source,
        })?,
        false => vec![None; kernels.len()],
    };
    let mut on_sim = Vec::with_capacity(kernels.len());
    let mut report = Vec::with_capacity(kernels.len());
    for (k, why_not_sim) in kernels.iter().zip(&support) {
        let mut reasons: Vec<String> = Vec::new();
        let mut chosen = None;
        for (rank, d) in placement.devices.iter().enumerate() {
            let why = if *d == Device::sim() {
                why_not_sim.clone()
            } else if cfg!(feature = "remote") && !d.is_host() {
                Some(
                    "a remote device runs whole calls, not single kernels of a placed call \
                     (move the tensors there with `Tensor::to`, or spread calls with \
                     `remote::DevicePool`)"
                        .to_string(),
                )
            } else {
                None
            };
            match why {
                None => {
                    chosen = Some(d.clone());
                    break;
                }
                Some(why) if rank == 0 && !placement.fallback => {
                    return Err(Error::Placement {
                        function: function.to_string(),
                        location,
                        kernel: k.name.clone(),
                        device: d.to_string(),
                        reason: format!("{why}; the placement allows no fallback"),
                    })
                }
                Some(why) => reasons.push(format!("{d} cannot run it: {why}")),
            }
        }
        let Some(device) = chosen else {
            return Err(Error::Placement {
                function: function.to_string(),
                location,
                kernel: k.name.clone(),
                device: placement.home().to_string(),
                reason: match reasons.is_empty() {
                    true => "the placement lists no device".into(),
                    false => reasons.join("; "),
                },
            });
        };
        on_sim.push(device == Device::sim());
        report.push(KernelPlacement {
            kernel: k.name.clone(),
            device,
            reason: reasons.join("; "),
        });
    }
    Ok((on_sim, report))
}
