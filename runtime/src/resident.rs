//! Arrays that live in the simulated device's GM ([`DeviceArray`]) and the
//! process-wide count of bytes copied between host and device
//! ([`transfer_stats`]).
//!
//! A device array owns its GM buffer through an `Arc`, so the buffer is
//! freed when the last array (or launch) holding it drops; its label (the
//! array's type) names it in memory reports and out-of-memory errors.
//! Every copy between host and GM, including the copies of a Sim run on
//! host arrays, goes through [`count_to_device`] / [`count_to_host`], so
//! the counters show every byte that crossed.

use crate::error::RuntimeError;
use crate::sim::sim_device;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tilejit_device::DeviceBuffer;
use tilejit_ir::{Array, Buffer, DType, Shape, TensorType};

static TO_DEVICE: AtomicU64 = AtomicU64::new(0);
static TO_HOST: AtomicU64 = AtomicU64::new(0);

/// Bytes copied between host and device since the process started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// Bytes copied from host memory into device memory.
    pub to_device_bytes: u64,
    /// Bytes copied from device memory back to the host.
    pub to_host_bytes: u64,
}

/// The copies made between two readings, `later - earlier`. Saturating:
/// each count is at least zero, so operands swapped (or readings of two
/// different scopes) give zero for a count that went down rather than a
/// panic or a wrapped, huge count.
impl std::ops::Sub for TransferStats {
    type Output = TransferStats;
    fn sub(self, before: TransferStats) -> TransferStats {
        TransferStats {
            to_device_bytes: self.to_device_bytes.saturating_sub(before.to_device_bytes),
            to_host_bytes: self.to_host_bytes.saturating_sub(before.to_host_bytes),
        }
    }
}

impl std::fmt::Display for TransferStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes to device, {} bytes to host",
            self.to_device_bytes, self.to_host_bytes
        )
    }
}

/// The process-wide transfer counters now.
pub fn transfer_stats() -> TransferStats {
    TransferStats {
        to_device_bytes: TO_DEVICE.load(Ordering::Relaxed),
        to_host_bytes: TO_HOST.load(Ordering::Relaxed),
    }
}

thread_local! {
    /// Copies made on this thread inside [`count_transfers`].
    static SCOPED: std::cell::Cell<Option<TransferStats>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` and returns, with its result, the copies it made on this
/// thread (the process-wide counters also see other threads' copies).
pub fn count_transfers<R>(f: impl FnOnce() -> R) -> (R, TransferStats) {
    let outer = SCOPED.with(|s| s.replace(Some(TransferStats::default())));
    let r = f();
    let mine = SCOPED.with(|s| s.replace(outer)).unwrap_or_default();
    // An enclosing scope counts what this one saw too.
    if outer.is_some() {
        SCOPED.with(|s| {
            s.set(s.get().map(|o| TransferStats {
                to_device_bytes: o.to_device_bytes + mine.to_device_bytes,
                to_host_bytes: o.to_host_bytes + mine.to_host_bytes,
            }))
        });
    }
    (r, mine)
}

/// Counts `bytes` copied from the host to a device: every host-to-GM
/// copy, and a remote device's uploads (`tilejit::remote`).
pub fn count_to_device(bytes: u64) {
    count(&TO_DEVICE, bytes, |t| &mut t.to_device_bytes);
}

/// Counts `bytes` copied from a device back to the host.
pub fn count_to_host(bytes: u64) {
    count(&TO_HOST, bytes, |t| &mut t.to_host_bytes);
}

/// Adds `bytes` to a process-wide counter and, inside [`count_transfers`],
/// to the same field of this thread's count.
fn count(total: &AtomicU64, bytes: u64, field: fn(&mut TransferStats) -> &mut u64) {
    total.fetch_add(bytes, Ordering::Relaxed);
    SCOPED.with(|s| {
        if let Some(mut t) = s.get() {
            *field(&mut t) += bytes;
            s.set(Some(t));
        }
    });
}

/// An array in the simulated device's GM. Cheap to clone (shares the
/// buffer); immutable once made, like a host [`Array`].
#[derive(Clone, Debug)]
pub struct DeviceArray {
    buf: Arc<DeviceBuffer>,
    ty: TensorType,
}

impl DeviceArray {
    /// Wraps a buffer a launch wrote (`ty`'s elements at offset 0),
    /// labelling it with `ty` for memory reports.
    pub(crate) fn from_buffer(buf: Arc<DeviceBuffer>, ty: TensorType) -> DeviceArray {
        buf.set_label(format!("{ty} tensor").into());
        DeviceArray { buf, ty }
    }

    /// Copies a host array into fresh GM (counted in [`transfer_stats`]).
    pub fn upload(a: &Array) -> Result<DeviceArray, RuntimeError> {
        let buf = upload_buffer(a.buffer())?;
        Ok(DeviceArray::from_buffer(Arc::new(buf), a.ty()))
    }

    /// Copies the elements back into a host array (counted in
    /// [`transfer_stats`]).
    pub fn download(&self) -> Result<Array, RuntimeError> {
        let data = download_buffer(&self.buf, self.ty.shape.numel(), self.ty.dtype)?;
        Ok(Array::new(self.ty.shape, data)?)
    }

    /// Its type.
    pub fn ty(&self) -> TensorType {
        self.ty
    }

    /// Its shape.
    pub fn shape(&self) -> &Shape {
        &self.ty.shape
    }

    /// The same elements under another shape of equal element count (no
    /// copy).
    pub fn reshaped(&self, shape: Shape) -> Result<DeviceArray, RuntimeError> {
        if shape.numel() != self.ty.shape.numel() {
            return Err(tilejit_ir::IrError::Reshape {
                from: self.ty.shape,
                to: shape,
            }
            .into());
        }
        Ok(DeviceArray {
            buf: self.buf.clone(),
            ty: TensorType::new(self.ty.dtype, shape),
        })
    }

    /// The GM buffer (shared with launches that read it).
    pub(crate) fn buffer(&self) -> &Arc<DeviceBuffer> {
        &self.buf
    }
}

/// Copies a host buffer's elements into fresh GM, counted.
pub(crate) fn upload_buffer(a: &Buffer) -> Result<DeviceBuffer, RuntimeError> {
    let dev = sim_device();
    let bytes = (a.len() * a.dtype().size_bytes()) as u64;
    let buf = dev.allocate_filled(bytes, |dst| -> Result<(), RuntimeError> {
        match a {
            Buffer::F32(v) => dev.copy_elems_from_host(v, dst, 0),
            Buffer::F64(v) => dev.copy_elems_from_host(v, dst, 0),
            Buffer::F16(v) => dev.copy_elems_from_host(v, dst, 0),
            Buffer::BF16(v) => dev.copy_elems_from_host(v, dst, 0),
            Buffer::I32(v) => dev.copy_elems_from_host(v, dst, 0),
            Buffer::I64(v) => dev.copy_elems_from_host(v, dst, 0),
            Buffer::Bool(v) => dev.copy_elems_from_host(v, dst, 0),
            Buffer::U8(v) => dev.copy_elems_from_host(v, dst, 0),
            Buffer::I8(v) => dev.copy_elems_from_host(v, dst, 0),
            Buffer::I16(v) => dev.copy_elems_from_host(v, dst, 0),
            Buffer::U16(v) => dev.copy_elems_from_host(v, dst, 0),
            Buffer::U32(v) => dev.copy_elems_from_host(v, dst, 0),
            Buffer::U64(v) => dev.copy_elems_from_host(v, dst, 0),
        }?;
        Ok(())
    })?;
    count_to_device(bytes);
    Ok(buf)
}

/// Copies `n` elements of `dt` out of a device buffer into a buffer from
/// the caching pool (or a fresh one), counted.
pub(crate) fn download_buffer(
    src: &DeviceBuffer,
    n: usize,
    dt: DType,
) -> Result<Buffer, RuntimeError> {
    let dev = sim_device();
    let mut out = crate::alloc::output_buffer(dt, n)?;
    match &mut out {
        Buffer::F32(v) => dev.copy_elems_to_host(src, 0, v),
        Buffer::F64(v) => dev.copy_elems_to_host(src, 0, v),
        Buffer::F16(v) => dev.copy_elems_to_host(src, 0, v),
        Buffer::BF16(v) => dev.copy_elems_to_host(src, 0, v),
        Buffer::I32(v) => dev.copy_elems_to_host(src, 0, v),
        Buffer::I64(v) => dev.copy_elems_to_host(src, 0, v),
        Buffer::Bool(v) => dev.copy_elems_to_host(src, 0, v),
        Buffer::U8(v) => dev.copy_elems_to_host(src, 0, v),
        Buffer::I8(v) => dev.copy_elems_to_host(src, 0, v),
        Buffer::I16(v) => dev.copy_elems_to_host(src, 0, v),
        Buffer::U16(v) => dev.copy_elems_to_host(src, 0, v),
        Buffer::U32(v) => dev.copy_elems_to_host(src, 0, v),
        Buffer::U64(v) => dev.copy_elems_to_host(src, 0, v),
    }?;
    count_to_host((n * dt.size_bytes()) as u64);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::TransferStats;

    #[test]
    fn transfer_stats_subtract_saturates() {
        let earlier = TransferStats {
            to_device_bytes: 100,
            to_host_bytes: 40,
        };
        let later = TransferStats {
            to_device_bytes: 160,
            to_host_bytes: 30,
        };
        // One count went up by 60, the other down by 10: the fall is zero.
        assert_eq!(
            later - earlier,
            TransferStats {
                to_device_bytes: 60,
                to_host_bytes: 0,
            }
        );
        // Swapped operands: the count that went up floors at zero.
        assert_eq!(
            earlier - later,
            TransferStats {
                to_device_bytes: 0,
                to_host_bytes: 10,
            }
        );
    }
}
