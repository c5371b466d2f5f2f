//! Debug hooks (Icraft XRT's setPreCallBack/setPostCallBack): callbacks
//! around every kernel that the calls inside [`with_hooks`] launch, on the
//! host and on Sim, with the kernel's input and output values.
//!
//! Hooks are scoped to the calling thread: kernels that other threads
//! launch at the same time are not seen. On Sim, a hooked program runs
//! one kernel per launch and copies each kernel's buffers back for the
//! event (counted by [`crate::transfer_stats`]); outside `with_hooks`
//! nothing changes and a call pays one thread-local read and one atomic load.
//! `TILEJIT_LOG=time` prints every kernel's time without any code.

use crate::device::Device;
use crate::tensor::Tensor;
use std::sync::Arc;
use std::time::Duration;
use tilejit_runtime::hooks::{KernelObserver, KernelRun, Place};

type Callback = Arc<dyn Fn(&KernelEvent) + Send + Sync>;

/// Callbacks to run before and after each kernel; see [`with_hooks`].
///
/// ```
/// use tilejit::prelude::*;
/// use tilejit::{with_hooks, Hooks};
/// use std::sync::{Arc, Mutex};
///
/// #[jit]
/// fn softplus(x: &Tensor) -> Tensor {
///     (x.exp() + 1.0).log()
/// }
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let log = seen.clone();
/// let hooks = Hooks::new().after(move |e| {
///     log.lock().unwrap().push(format!("{} #{} on {}", e.name(), e.index(), e.device()));
/// });
/// let x = Tensor::from_vec(vec![0.0f32, 1.0], &[2])?;
/// // On the host (in Verify mode hooks would also see the Sim run).
/// let y = with_mode(RunMode::Host, || with_hooks(&hooks, || softplus(&x)))?;
/// assert_eq!(seen.lock().unwrap().len(), 1); // one fused kernel
/// assert!(seen.lock().unwrap()[0].ends_with("#0 on host"));
/// # Ok::<(), tilejit::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct Hooks {
    before: Vec<Callback>,
    after: Vec<Callback>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Hooks {{ before: {}, after: {} }}",
            self.before.len(),
            self.after.len()
        )
    }
}

impl Hooks {
    /// No callbacks.
    pub fn new() -> Hooks {
        Hooks::default()
    }

    /// Adds a callback run before each kernel (its event has no outputs
    /// and no elapsed time yet).
    pub fn before(mut self, f: impl Fn(&KernelEvent) + Send + Sync + 'static) -> Hooks {
        self.before.push(Arc::new(f));
        self
    }

    /// Adds a callback run after each kernel.
    pub fn after(mut self, f: impl Fn(&KernelEvent) + Send + Sync + 'static) -> Hooks {
        self.after.push(Arc::new(f));
        self
    }
}

/// One kernel run, as a hook sees it.
#[derive(Clone, Debug)]
pub struct KernelEvent {
    program: String,
    name: String,
    index: usize,
    device: Device,
    inputs: Vec<Tensor>,
    outputs: Vec<Tensor>,
    elapsed: Option<Duration>,
}

impl KernelEvent {
    /// The kernel's name (`fused_exp_add_log`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The program it belongs to: the jit function and its signature, or
    /// `eager` for an eager op.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// Its position in its program (kernels run in this order).
    pub fn index(&self) -> usize {
        self.index
    }

    /// Where it runs.
    pub fn device(&self) -> Device {
        self.device.clone()
    }

    /// The values it reads (host copies), in the kernel's order.
    pub fn inputs(&self) -> &[Tensor] {
        &self.inputs
    }

    /// The values it wrote (host copies; empty before it runs). A kernel
    /// that writes one operand of a concatenation shows the whole result
    /// buffer, parts of which later kernels write.
    pub fn outputs(&self) -> &[Tensor] {
        &self.outputs
    }

    /// How long it ran (after only): host wall time, or on Sim the device
    /// time of the simulator's cycle model.
    pub fn elapsed(&self) -> Option<Duration> {
        self.elapsed
    }
}

/// Runs `f` with `hooks` called around every kernel it launches on this
/// thread: jit calls and eager ops, on any device; nested scopes run the
/// outer hooks first.
pub fn with_hooks<R>(hooks: &Hooks, f: impl FnOnce() -> R) -> R {
    tilejit_runtime::hooks::with_observer(Arc::new(hooks.clone()), f)
}

impl Hooks {
    fn event(&self, r: &KernelRun<'_>) -> KernelEvent {
        let tensors = |v: &[tilejit_ir::Array]| v.iter().cloned().map(Tensor::concrete).collect();
        KernelEvent {
            program: r.program.to_string(),
            name: r.name.to_string(),
            index: r.index,
            device: match r.place {
                Place::Host => Device::host(),
                Place::Sim => Device::sim(),
            },
            inputs: tensors(r.inputs),
            outputs: tensors(r.outputs),
            elapsed: r.elapsed,
        }
    }
}

impl KernelObserver for Hooks {
    fn reads_values(&self) -> bool {
        // A hook sees the kernel's tensors; an empty set of hooks copies
        // nothing.
        !self.before.is_empty() || !self.after.is_empty()
    }

    fn before(&self, r: &KernelRun<'_>) {
        if !self.before.is_empty() {
            let e = self.event(r);
            self.before.iter().for_each(|f| f(&e));
        }
    }

    fn after(&self, r: &KernelRun<'_>) {
        if !self.after.is_empty() {
            let e = self.event(r);
            self.after.iter().for_each(|f| f(&e));
        }
    }
}
