//! A process-wide registry of named functions, callable through one
//! type-erased signature (TVM's PackedFunc registry): `#[jit]` functions
//! and plain Rust functions over argument lists.
//!
//! ```
//! use tilejit::prelude::*;
//! use tilejit::{registry, ArgValue};
//!
//! #[jit]
//! fn axpy(a: f32, x: &Tensor, y: &Tensor) -> Tensor {
//!     x * a + y
//! }
//!
//! registry::register("doc.axpy", axpy::jit())?;
//! let (x, y) = (Tensor::ones(&[3], DType::F32), Tensor::arange(3, DType::F32));
//! let out = registry::call("doc.axpy", &[ArgValue::Float(2.0, DType::F32), ArgValue::Tensor(&x), ArgValue::Tensor(&y)])?;
//! assert_eq!(out[0].to_vec::<f32>()?, [2.0, 3.0, 4.0]);
//!
//! // Looked up and checked once, then called with typed arguments.
//! let axpy_fn = registry::get_typed::<(f32, &Tensor, &Tensor)>("doc.axpy")?;
//! let out = axpy_fn.call((0.5, &x, &y))?;
//! assert_eq!(out[0].to_vec::<f32>()?, [0.5, 1.5, 2.5]);
//! # Ok::<(), tilejit::Error>(())
//! ```
//!
//! Names are unique: registering one twice is an error naming both
//! registrations. The registry is safe to use from many threads.

use crate::args::{ArgKind, ArgValue, JitArgs};
use crate::device::Device;
use crate::error::{Error, Loc, Result};
use crate::jit::JitFunction;
use crate::tensor::Tensor;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock, RwLock};

/// A plain Rust function over an argument list.
pub type PackedFn = dyn Fn(&[ArgValue]) -> Result<Vec<Tensor>> + Send + Sync;

/// What a name calls.
#[derive(Clone)]
enum Callee {
    Jit(&'static JitFunction),
    Packed(Arc<PackedFn>),
}

#[derive(Clone)]
struct Entry {
    callee: Callee,
    /// Where it was registered (and, for a jit function, defined).
    origin: String,
}

fn table() -> &'static RwLock<BTreeMap<String, Entry>> {
    static TABLE: OnceLock<RwLock<BTreeMap<String, Entry>>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

fn insert(name: &str, callee: Callee, origin: String) -> Result<()> {
    if name.is_empty() {
        return Err(Error::Registry {
            name: name.into(),
            message: "a registered name cannot be empty".into(),
        });
    }
    // A poisoned lock still holds a consistent map (inserts cannot panic
    // half-way).
    let mut t = table().write().unwrap_or_else(|p| p.into_inner());
    if let Some(old) = t.get(name) {
        return Err(Error::Registry {
            name: name.into(),
            message: format!(
                "already registered ({}); this registration: {origin}",
                old.origin
            ),
        });
    }
    t.insert(name.to_string(), Entry { callee, origin });
    Ok(())
}

/// Registers a `#[jit]` function (`f::jit()`) under `name`.
#[track_caller]
pub fn register(name: &str, f: &'static JitFunction) -> Result<()> {
    let origin = format!(
        "`{}` defined at {}, registered at {}",
        f.name(),
        f.location(),
        Loc::caller()
    );
    insert(name, Callee::Jit(f), origin)
}

/// Registers a plain Rust function over an argument list under `name`.
/// It checks its own arguments.
#[track_caller]
pub fn register_packed(
    name: &str,
    f: impl Fn(&[ArgValue]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
) -> Result<()> {
    let origin = format!("a packed function registered at {}", Loc::caller());
    insert(name, Callee::Packed(Arc::new(f)), origin)
}

/// Removes `name`; true if it was registered.
pub fn unregister(name: &str) -> bool {
    let mut t = table().write().unwrap_or_else(|p| p.into_inner());
    t.remove(name).is_some()
}

/// Every registered name, sorted.
pub fn list() -> Vec<String> {
    let t = table().read().unwrap_or_else(|p| p.into_inner());
    t.keys().cloned().collect()
}

fn lookup(name: &str) -> Result<Entry> {
    let t = table().read().unwrap_or_else(|p| p.into_inner());
    t.get(name).cloned().ok_or_else(|| Error::Registry {
        name: name.into(),
        message: format!("no function of that name is registered ({} are)", t.len()),
    })
}

/// Calls the function registered as `name`. A jit function checks the
/// arguments' number and kinds (an error naming the function and the
/// argument); a packed function checks its own.
#[track_caller]
pub fn call(name: &str, args: &[ArgValue]) -> Result<Vec<Tensor>> {
    lookup(name)?.call(args)
}

/// Registry calls on a device: here, or on a remote device's server.
impl Device {
    /// Calls the registry function `name` on this device: on a remote
    /// device, the server's registry (tensor arguments there go by
    /// reference, host ones by value; results stay on the server); on the
    /// host or Sim, this process's registry with tensor arguments moved
    /// here first.
    #[track_caller]
    pub fn call(&self, name: &str, args: &[ArgValue]) -> Result<Vec<Tensor>> {
        #[cfg(feature = "remote")]
        if let Some(conn) = self.conn() {
            let location = Loc::caller();
            return conn.call(name, args).map_err(|s| {
                crate::remote::error(&conn.addr, format!("call `{name}`"), location, s)
            });
        }
        let moved = args
            .iter()
            .map(|a| match a {
                ArgValue::Tensor(t) => t.to(self).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        let args: Vec<ArgValue> = args
            .iter()
            .zip(&moved)
            .map(|(a, m)| m.as_ref().map_or(*a, ArgValue::Tensor))
            .collect();
        call(name, &args)
    }

    /// The registry's names where [`call`](Self::call) looks them up.
    #[track_caller]
    pub fn functions(&self) -> Result<Vec<String>> {
        #[cfg(feature = "remote")]
        if let Some(conn) = self.conn() {
            let location = Loc::caller();
            return conn
                .list()
                .map_err(|s| crate::remote::error(&conn.addr, "list".into(), location, s));
        }
        Ok(list())
    }
}

impl Entry {
    #[track_caller]
    fn call(&self, args: &[ArgValue]) -> Result<Vec<Tensor>> {
        match &self.callee {
            Callee::Jit(f) => f.call_packed(args),
            Callee::Packed(f) => f(args),
        }
    }
}

/// A registered function, looked up once.
#[derive(Clone)]
pub struct Function {
    name: String,
    entry: Entry,
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Function({}: {})", self.name, self.entry.origin)
    }
}

/// Looks `name` up once, for a caller that calls it often.
pub fn get(name: &str) -> Result<Function> {
    Ok(Function {
        name: name.to_string(),
        entry: lookup(name)?,
    })
}

impl Function {
    /// Its registered name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Calls it on an argument list.
    #[track_caller]
    pub fn call(&self, args: &[ArgValue]) -> Result<Vec<Tensor>> {
        self.entry.call(args)
    }
}

/// A registered function whose parameter kinds were checked against `A`
/// once, at [`get_typed`]; calls take `A` directly.
pub struct Typed<A> {
    function: Function,
    _args: PhantomData<fn(A)>,
}

impl<A> std::fmt::Debug for Typed<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Typed({:?})", self.function)
    }
}

impl<A: JitArgs + ArgTypes> Typed<A> {
    /// Calls it.
    #[track_caller]
    pub fn call(&self, args: A) -> Result<Vec<Tensor>> {
        self.function.call(&args.args())
    }

    /// Its registered name.
    pub fn name(&self) -> &str {
        &self.function.name
    }
}

/// Looks `name` up and checks, once, that a jit function registered
/// there takes arguments of the kinds `A` holds (a packed function
/// declares none, so it is checked at each call by itself).
pub fn get_typed<A: JitArgs + ArgTypes>(name: &str) -> Result<Typed<A>> {
    let function = get(name)?;
    if let Callee::Jit(f) = &function.entry.callee {
        let want: Vec<ArgKind> = f.params().iter().map(|p| p.kind).collect();
        let got = A::kinds();
        if want != got {
            return Err(Error::Registry {
                name: name.into(),
                message: format!(
                    "`{}` takes {want:?}, the typed handle asks for {got:?}",
                    f.name()
                ),
            });
        }
    }
    Ok(Typed {
        function,
        _args: PhantomData,
    })
}

/// The parameter kinds of an argument tuple, known from its type.
pub trait ArgTypes {
    /// One kind per parameter.
    fn kinds() -> Vec<ArgKind>;
}

/// The parameter kind of one argument type.
pub trait ArgType {
    /// Its kind.
    const KIND: ArgKind;
}

macro_rules! arg_type {
    ($kind:ident: $($t:ty)*) => {$(
        impl ArgType for $t {
            const KIND: ArgKind = ArgKind::$kind;
        }
    )*};
}
arg_type!(Tensor: Tensor &Tensor);
arg_type!(Float: f32 f64);
arg_type!(Int: i8 i16 i32 i64 u8 u16 u32 u64 usize isize);
arg_type!(Bool: bool);
arg_type!(Tree: Vec<Tensor> &[Tensor]);

macro_rules! arg_types {
    ($($T:ident)*) => {
        impl<$($T: ArgType),*> ArgTypes for ($($T,)*) {
            fn kinds() -> Vec<ArgKind> {
                vec![$($T::KIND),*]
            }
        }
    };
}
arg_types!();
arg_types!(A);
arg_types!(A B);
arg_types!(A B C);
arg_types!(A B C D);
arg_types!(A B C D E);
arg_types!(A B C D E F);
arg_types!(A B C D E F G);
arg_types!(A B C D E F G H);
