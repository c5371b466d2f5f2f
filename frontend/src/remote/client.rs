//! The client side of a remote device: one connection and session per
//! [`Device::remote`](crate::Device::remote), driven by a small tokio
//! runtime of the process's own. Calls block the calling thread (on a
//! channel, so they also work from inside someone else's async runtime).
//!
//! Liveness, not size, bounds every wait: HTTP/2 keepalive pings every
//! second fail a call within a few seconds of the server dying or
//! hanging, however long the call or copy legitimately takes.

use super::proto::remote_client::RemoteClient;
use super::proto::{self, arg};
use super::wire::{self, MAX_INLINE, MAX_MESSAGE};
use crate::args::ArgValue;
use crate::tensor::{Repr, Tensor};
use prost::bytes::Bytes;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use tilejit_ir::{Array, Graph, Lit, TensorType};
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status};

type Client = RemoteClient<InterceptedService<Channel, Auth>>;

/// Adds the token to every call.
#[derive(Clone)]
pub(crate) struct Auth(MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

/// The process's runtime for remote calls (two threads, started on the
/// first `Device::remote`).
fn runtime() -> Result<&'static tokio::runtime::Runtime, Status> {
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tilejit-remote")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| Status::internal(format!("no async runtime for remote calls: {e}")))
}

/// Runs `f` on the remote runtime and waits for it.
fn block<T: Send + 'static>(
    f: impl Future<Output = Result<T, Status>> + Send + 'static,
) -> Result<T, Status> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime()?.spawn(async move {
        let _ = tx.send(f.await);
    });
    rx.recv()
        .unwrap_or_else(|_| Err(Status::internal("a remote call's task panicked")))
}

/// Starts `f` on the remote runtime without waiting (frees, closes).
fn detach(f: impl Future<Output = ()> + Send + 'static) {
    if let Ok(rt) = runtime() {
        rt.spawn(f);
    }
}

/// How [`Device::remote_with`](crate::Device::remote_with) reaches its
/// server: TLS, and whether the token may travel in clear.
///
/// ```no_run
/// use tilejit::remote::RemoteOptions;
/// use tilejit::Device;
/// let ca = std::fs::read("server-ca.pem")?;
/// let remote = Device::remote_with(
///     "https://gpu-box.example:7070",
///     "the token",
///     &RemoteOptions { ca_cert_pem: Some(ca), ..RemoteOptions::default() },
/// )?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct RemoteOptions {
    /// PEM certificate of the CA that signed the server's certificate (or
    /// the server's own, self-signed): needed for an `https://` address.
    pub ca_cert_pem: Option<Vec<u8>>,
    /// The name the server's certificate must carry, when it is not the
    /// address's host.
    pub tls_domain: Option<String>,
    /// Send the token over plain HTTP to an address that is not loopback,
    /// where anyone on the path can read it. Off, such an address is
    /// refused before anything is sent.
    pub allow_plaintext: bool,
}

/// `addr` as an endpoint URI and whether it is TLS: `https://HOST:PORT`,
/// or `HOST:PORT` / `http://HOST:PORT` in clear, which only loopback gets
/// unless `allow_plaintext`.
fn endpoint_uri(addr: &str, options: &RemoteOptions) -> Result<(String, bool), Status> {
    if let Some(rest) = addr.strip_prefix("https://") {
        if options.ca_cert_pem.is_none() {
            return Err(Status::invalid_argument(
                "an https:// address needs the server's CA certificate (RemoteOptions::ca_cert_pem)",
            ));
        }
        return Ok((format!("https://{rest}"), true));
    }
    let rest = addr.strip_prefix("http://").unwrap_or(addr);
    if !options.allow_plaintext && !is_loopback(rest) {
        return Err(Status::invalid_argument(format!(
            "refusing to send the token in clear to {rest}, which is not loopback: use an https:// address \
             with the server's CA (RemoteOptions::ca_cert_pem; `tilejit serve --tls-cert --tls-key`), \
             or set RemoteOptions::allow_plaintext"
        )));
    }
    Ok((format!("http://{rest}"), false))
}

/// Whether `host_port` names this machine only (every address it resolves
/// to is loopback). A name that does not resolve is let through: the
/// connection then fails before any call carries the token.
fn is_loopback(host_port: &str) -> bool {
    use std::net::ToSocketAddrs as _;
    match host_port.to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<_> = addrs.collect();
            addrs.iter().all(|a| a.ip().is_loopback())
        }
        Err(_) => true,
    }
}

/// One connection to a server, with its session.
pub(crate) struct Conn {
    /// Unique per connection in this process (a `Device`'s identity).
    pub(crate) id: u64,
    pub(crate) addr: String,
    /// The server's device (`host`, `sim`).
    pub(crate) device: String,
    /// The session's handle: its number and secret, sent with every call
    /// (never printed).
    session: Bytes,
    chunk: usize,
    /// A handle on the channel (cloned per call). Unwind-safe: a panic
    /// cannot leave it half-updated, and tensors and devices must stay
    /// usable across `catch_unwind` as host ones are.
    client: std::panic::AssertUnwindSafe<Client>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Conn({})", self.addr)
    }
}

impl Conn {
    /// Connects, opens a session and starts its heartbeat.
    pub(crate) fn connect(
        addr: &str,
        token: &str,
        options: &RemoteOptions,
    ) -> Result<Arc<Conn>, Status> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let bearer: MetadataValue<_> = format!("Bearer {token}")
            .parse()
            .map_err(|_| Status::invalid_argument("the token must be printable ASCII"))?;
        let (uri, tls) = endpoint_uri(addr, options)?;
        let mut endpoint = Endpoint::from_shared(uri)
            .map_err(|e| Status::invalid_argument(format!("not an address: {e}")))?;
        if tls {
            let mut config = ClientTlsConfig::new();
            if let Some(ca) = &options.ca_cert_pem {
                config = config.ca_certificate(Certificate::from_pem(ca));
            }
            if let Some(domain) = &options.tls_domain {
                config = config.domain_name(domain.clone());
            }
            endpoint = endpoint
                .tls_config(config)
                .map_err(|e| Status::invalid_argument(format!("TLS: {}", wire::error_chain(&e))))?;
        }
        let endpoint = endpoint
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .initial_stream_window_size(super::server::WINDOW)
            .initial_connection_window_size(2 * super::server::WINDOW)
            .max_frame_size(super::server::FRAME)
            .http2_keep_alive_interval(Duration::from_secs(1))
            .keep_alive_timeout(Duration::from_secs(3))
            .keep_alive_while_idle(true);
        let (client, reply) = block(async move {
            let channel = endpoint.connect().await.map_err(|e| {
                Status::unavailable(format!("cannot connect: {}", wire::error_chain(&e)))
            })?;
            let mut client = RemoteClient::with_interceptor(channel, Auth(bearer))
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE);
            let reply = client
                .open(proto::OpenRequest {
                    client_version: env!("CARGO_PKG_VERSION").into(),
                })
                .await?
                .into_inner();
            Ok((client, reply))
        })?;
        let conn = Arc::new(Conn {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            addr: addr.to_string(),
            device: reply.device,
            session: reply.session,
            chunk: (reply.chunk_bytes as usize).clamp(1 << 10, wire::CHUNK_BYTES),
            client: std::panic::AssertUnwindSafe(client),
        });
        let every =
            Duration::from_millis(reply.session_timeout_ms / 3).max(Duration::from_millis(20));
        detach(heartbeat(Arc::downgrade(&conn), every));
        Ok(conn)
    }

    fn session(&self) -> proto::SessionRequest {
        proto::SessionRequest {
            session: self.session.clone(),
        }
    }

    /// The bare round trip: one unary call that does nothing.
    pub(crate) fn ping(&self) -> Result<(), Status> {
        let mut c = self.client.0.clone();
        let req = self.session();
        block(async move { c.ping(req).await.map(|_| ()) })
    }

    /// Copies `a` to the server in chunks (each encoded as the stream
    /// takes it): its reference there.
    pub(crate) fn upload(self: &Arc<Self>, a: &Array) -> Result<Arc<RemoteTensor>, Status> {
        let ty = a.ty();
        let (session, header) = (self.session.clone(), wire::ty_to_proto(&ty));
        let msgs = wire::encode_chunks(a.clone(), self.chunk)
            // A chunk that cannot be encoded (no memory) ends the stream
            // early; the server then reports the upload short.
            .map_while(Result::ok)
            .enumerate()
            .map(move |(i, data)| match i {
                0 => proto::UploadChunk {
                    session: session.clone(),
                    ty: Some(header.clone()),
                    data,
                },
                _ => proto::UploadChunk {
                    data,
                    ..Default::default()
                },
            });
        let mut c = self.client.0.clone();
        let r = block(async move { c.upload(tokio_stream::iter(msgs)).await })?.into_inner();
        tilejit_runtime::count_to_device((ty.shape.numel() * ty.dtype.size_bytes()) as u64);
        Ok(self.held(r.id, ty))
    }

    /// Copies a tensor back, decoding each chunk as it arrives.
    pub(crate) fn download(&self, t: &RemoteTensor) -> Result<Array, Status> {
        let expected = (t.ty.shape.numel() * t.ty.dtype.size_bytes()) as u64;
        let mut decoder = wire::Decoder::new(t.ty, expected).map_err(Status::resource_exhausted)?;
        let mut c = self.client.0.clone();
        let req = proto::TensorRequest {
            session: self.session.clone(),
            id: t.id,
        };
        let a = block(async move {
            let mut stream = c.download(req).await?.into_inner();
            while let Some(chunk) = stream.message().await? {
                decoder
                    .push(&chunk.data)
                    .map_err(|e| Status::data_loss(format!("the server sent {e}")))?;
            }
            decoder
                .finish()
                .map_err(|e| Status::data_loss(format!("the server sent {e}")))
        })?;
        tilejit_runtime::count_to_host(expected);
        Ok(a)
    }

    /// Runs `graph` on the server with `inputs` (remote tensors of this
    /// connection, or small host literals): its results, left there. The
    /// program goes by content key; its text is sent only when the server
    /// does not hold it.
    pub(crate) fn launch(
        self: &Arc<Self>,
        name: &str,
        graph: &Graph,
        key: [u8; 32],
        inputs: &[&Tensor],
        params: &[Lit],
    ) -> Result<Vec<Tensor>, Status> {
        let mut room = wire::INLINE_BUDGET;
        let inputs = inputs
            .iter()
            .map(|t| self.arg_of(t, &mut room))
            .collect::<Result<Vec<_>, _>>()?;
        let req = proto::LaunchRequest {
            session: self.session.clone(),
            key: Bytes::copy_from_slice(&key),
            inputs: inputs.iter().map(|(a, _)| a.clone()).collect(),
            params: params.iter().map(|&l| wire::lit_to_proto(l)).collect(),
        };
        let mut c = self.client.0.clone();
        let first = req.clone();
        match block(async move { c.launch(first).await }) {
            Err(s) if s.code() == Code::NotFound => {
                self.load(name, graph, key)?;
                let mut c = self.client.0.clone();
                let r = block(async move { c.launch(req).await })?;
                self.results(r.into_inner())
            }
            r => self.results(r?.into_inner()),
        }
    }

    /// Sends a program's text in chunks.
    fn load(&self, name: &str, graph: &Graph, key: [u8; 32]) -> Result<(), Status> {
        let text = Bytes::from(graph.to_string());
        let mut chunks = wire::chunks(text, self.chunk).into_iter();
        let first = proto::ProgramChunk {
            session: self.session.clone(),
            key: Bytes::copy_from_slice(&key),
            name: name.to_string(),
            text: chunks.next().unwrap_or_default(),
        };
        let rest = chunks.map(|text| proto::ProgramChunk {
            text,
            ..Default::default()
        });
        let msgs: Vec<_> = std::iter::once(first).chain(rest).collect();
        let mut c = self.client.0.clone();
        block(async move { c.load_program(tokio_stream::iter(msgs)).await }).map(|_| ())
    }

    /// Calls the server's registry function `name`. Host tensors go along
    /// by value when small, else are uploaded for the call (and freed
    /// after it); remote tensors go by reference.
    pub(crate) fn call(
        self: &Arc<Self>,
        name: &str,
        args: &[ArgValue],
    ) -> Result<Vec<Tensor>, Status> {
        let mut keep = Vec::new();
        let mut room = wire::INLINE_BUDGET;
        let mut wire_args = Vec::with_capacity(args.len());
        for (i, a) in args.iter().enumerate() {
            let value = match *a {
                ArgValue::Tensor(t) => {
                    let (arg, held) = self.arg_of(t, &mut room).map_err(|s| {
                        Status::new(s.code(), format!("argument {i}: {}", s.message()))
                    })?;
                    keep.extend(held);
                    arg.value
                }
                ArgValue::Float(v, d) => Some(arg::Value::Float(proto::Float {
                    value: v,
                    dtype: d.name().into(),
                })),
                ArgValue::Int(v) => Some(arg::Value::Int(v)),
                ArgValue::Bool(v) => Some(arg::Value::Bool(v)),
                ArgValue::Mark(_) => {
                    return Err(Status::invalid_argument(format!(
                        "argument {i}: lists and structs cannot be passed to a remote function; pass their tensors"
                    )))
                }
            };
            wire_args.push(proto::Arg { value });
        }
        let req = proto::CallRequest {
            session: self.session.clone(),
            name: name.to_string(),
            args: wire_args,
        };
        let mut c = self.client.0.clone();
        let r = block(async move { c.call(req).await })?;
        drop(keep);
        self.results(r.into_inner())
    }

    /// The registry's names on the server.
    pub(crate) fn list(&self) -> Result<Vec<String>, Status> {
        let mut c = self.client.0.clone();
        let req = self.session();
        block(async move { c.list(req).await }).map(|r| r.into_inner().names)
    }

    pub(crate) fn stats(&self) -> Result<proto::ServerStats, Status> {
        let mut c = self.client.0.clone();
        let req = self.session();
        block(async move { c.stats(req).await }).map(|r| r.into_inner())
    }

    /// An argument on the wire: a tensor of this connection by id, a small
    /// host tensor by value while the request's `room` for values lasts
    /// (so no request outgrows the message bound), else uploaded and held
    /// for the call.
    fn arg_of(
        self: &Arc<Self>,
        t: &Tensor,
        room: &mut usize,
    ) -> Result<(proto::Arg, Option<Arc<RemoteTensor>>), Status> {
        let value = |v| proto::Arg { value: Some(v) };
        match &t.repr {
            Repr::Remote(r) if r.conn.id == self.id => Ok((value(arg::Value::Tensor(r.id)), None)),
            Repr::Remote(r) => Err(Status::invalid_argument(format!(
                "a tensor on the server at {} cannot join a call on {}",
                r.conn.addr, self.addr
            ))),
            Repr::Concrete(a)
                if a.shape().numel() * a.dtype().size_bytes() <= MAX_INLINE.min(*room) =>
            {
                let inline = wire::inline(a).map_err(Status::internal)?;
                *room -= inline.data.len();
                tilejit_runtime::count_to_device(inline.data.len() as u64);
                Ok((value(arg::Value::Inline(inline)), None))
            }
            _ => {
                let a = t
                    .array("remote call")
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                let r = self.upload(&a)?;
                Ok((value(arg::Value::Tensor(r.id)), Some(r)))
            }
        }
    }

    fn results(self: &Arc<Self>, r: proto::Results) -> Result<Vec<Tensor>, Status> {
        r.outputs
            .into_iter()
            .map(|o| {
                let (ty, _) = wire::ty_from_proto(o.ty.as_ref())
                    .map_err(|e| Status::data_loss(format!("the server sent a result with {e}")))?;
                Ok(Tensor {
                    repr: Repr::Remote(self.held(o.id, ty)),
                    weak: false,
                })
            })
            .collect()
    }

    fn held(self: &Arc<Self>, id: u64, ty: TensorType) -> Arc<RemoteTensor> {
        Arc::new(RemoteTensor {
            conn: self.clone(),
            id,
            ty,
        })
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let mut c = self.client.0.clone();
        let req = self.session();
        detach(async move {
            let _ = c.close(req).await;
        });
    }
}

/// Pings while the connection is alive, so the server keeps its session
/// (and tensors) however long the client is idle.
async fn heartbeat(conn: Weak<Conn>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(c) = conn.upgrade() else { return };
        let mut client = c.client.0.clone();
        let req = c.session();
        drop(c);
        let _ = client.ping(req).await;
    }
}

/// A tensor held by a server's session; dropping the last handle frees it
/// there.
pub(crate) struct RemoteTensor {
    pub(crate) conn: Arc<Conn>,
    pub(crate) id: u64,
    pub(crate) ty: TensorType,
}

impl std::fmt::Debug for RemoteTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RemoteTensor({} #{} on {})",
            self.ty, self.id, self.conn.addr
        )
    }
}

impl Drop for RemoteTensor {
    fn drop(&mut self) {
        let mut c = self.conn.client.0.clone();
        let req = proto::FreeRequest {
            session: self.conn.session.clone(),
            ids: vec![self.id],
        };
        detach(async move {
            let _ = c.free(req).await;
        });
    }
}
