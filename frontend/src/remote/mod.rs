//! Remote devices over gRPC (TVM's RPC session, on tonic): a
//! `tilejit serve` process hosts one device; [`Device::remote`](crate::Device::remote) connects
//! to it. Tensors moved there with [`Tensor::to`](crate::Tensor::to) stay
//! there between calls; a jit call or eager op on them ships its program
//! by content key (SHA-256 of its graph text; the server compiles a key
//! once) and its results stay remote until read. The server's
//! [`registry`](crate::registry) functions are callable by name with
//! [`Device::call`](crate::Device::call).
//!
//! Control is unary calls; tensor data and program text stream in 1 MiB
//! chunks, so no message grows with a tensor. Every call carries the
//! server's token. HTTP/2 keepalive pings bound every wait by liveness,
//! not size: a dead or hung server fails a call within seconds.
//!
//! ```no_run
//! use tilejit::prelude::*;
//! use tilejit::Device;
//! // `tilejit serve --listen :7070 --token-file token.txt` elsewhere.
//! let remote = Device::remote("127.0.0.1:7070", "the token")?;
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?.to(&remote)?;
//! let y = (&x * &x).exp();                       // runs on the server
//! assert_eq!(y.device(), remote);
//! println!("{:?}", y.to_vec::<f32>()?);           // copies back
//! let z = remote.call("nn.softmax", &[tilejit::ArgValue::Tensor(&y)])?;
//! # Ok::<(), tilejit::Error>(())
//! ```

mod client;
mod pool;
mod server;
mod wire;

#[allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all)]
pub(crate) mod proto {
    tonic::include_proto!("tilejit.remote.v1");
}

pub use client::RemoteOptions;
pub(crate) use client::{Conn, RemoteTensor};
pub use pool::DevicePool;
pub use server::{ServeOptions, Server};

use crate::args::ArgValue;
use crate::error::{Error, Loc, Result};
use crate::tensor::Tensor;

/// What a server holds and has done ([`Device::server_stats`](crate::Device::server_stats)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerStats {
    /// Open sessions (one per connected client device).
    pub sessions: u64,
    /// Tensors held, over all sessions.
    pub tensors: u64,
    /// Their bytes.
    pub tensor_bytes: u64,
    /// Programs held by content key.
    pub programs: u64,
    /// Program launches run.
    pub launches: u64,
    /// Registry calls run.
    pub calls: u64,
    /// Programs compiled from text a client sent.
    pub program_loads: u64,
    /// Launches, calls and program loads stopped before their end: their client went
    /// away, or they ran past the server's deadline.
    pub stopped: u64,
    /// Bytes of program text the program cache holds.
    pub program_bytes: u64,
}

/// The registry functions every `tilejit serve` offers (a server built
/// with [`Server::start`] in a program of your own has whatever that
/// program registers): `nn.softmax(x)` (last axis), `nn.gelu(x)`,
/// `math.matmul(a, b)` and `math.add(a, b)`. Registering twice is
/// harmless.
pub fn register_builtins() -> Result<()> {
    fn one(args: &[ArgValue], name: &str) -> Result<Tensor> {
        match args {
            [ArgValue::Tensor(x)] => Ok((*x).clone()),
            _ => Err(Error::Arguments {
                function: name.into(),
                message: format!("takes one tensor, got {} arguments", args.len()),
            }),
        }
    }
    fn two(args: &[ArgValue], name: &str) -> Result<(Tensor, Tensor)> {
        match args {
            [ArgValue::Tensor(a), ArgValue::Tensor(b)] => Ok(((*a).clone(), (*b).clone())),
            _ => Err(Error::Arguments {
                function: name.into(),
                message: format!("takes two tensors, got {} arguments", args.len()),
            }),
        }
    }
    type Builtin = fn(&[ArgValue]) -> Result<Vec<Tensor>>;
    let builtins: [(&str, Builtin); 4] = [
        ("nn.softmax", |a| {
            Ok(vec![one(a, "nn.softmax")?.softmax(-1).check()?.clone()])
        }),
        ("nn.gelu", |a| {
            Ok(vec![one(a, "nn.gelu")?.gelu().check()?.clone()])
        }),
        ("math.matmul", |a| {
            let (x, y) = two(a, "math.matmul")?;
            Ok(vec![x.matmul(&y).check()?.clone()])
        }),
        ("math.add", |a| {
            let (x, y) = two(a, "math.add")?;
            Ok(vec![(&x + &y).check()?.clone()])
        }),
    ];
    for (name, f) in builtins {
        if crate::registry::get(name).is_err() {
            crate::registry::register_packed(name, f)?;
        }
    }
    Ok(())
}

/// A status from the server as tilejit's error.
pub(crate) fn error(conn_addr: &str, op: String, location: Loc, s: tonic::Status) -> Error {
    let kind = wire::kind_of(&s);
    let message = match s.code() {
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
            if !s.metadata().contains_key(wire::KIND_HEADER) =>
        {
            format!("the server is unreachable or went away ({})", s.message())
        }
        tonic::Code::Unauthenticated => "the server refused the token".to_string(),
        _ => s.message().to_string(),
    };
    Error::Remote {
        server: conn_addr.to_string(),
        op,
        location: Some(location),
        kind,
        message,
    }
}

/// A program's content key (from its cached text digest: a tiny call
/// does not print and hash its graph each time).
pub(crate) fn program_key(p: &tilejit_runtime::Program) -> [u8; 32] {
    wire::key_of_digest(&p.text_digest())
}

/// An eager op's graph's content key.
pub(crate) fn graph_key(g: &tilejit_ir::Graph) -> [u8; 32] {
    wire::content_key(&g.to_string())
}
