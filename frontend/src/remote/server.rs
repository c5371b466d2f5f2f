//! The server side of a remote device (`tilejit serve`): a tonic gRPC
//! service over one local device. Tensors live in sessions; programs are
//! held by content key, shared by every session; heavy work (compiles,
//! launches, copies to the device) runs on tokio's blocking pool so the
//! runtime's threads stay free to answer keepalive pings.

use super::proto::remote_server::{Remote, RemoteServer};
use super::proto::{self, arg};
use super::wire::{self, CHUNK_BYTES, MAX_MESSAGE};
use crate::args::ArgValue;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::{Repr, Tensor};
use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tilejit_ir::{Array, DType, Graph, Lit};
use tilejit_runtime::cancel::{self, CancelToken};
use tilejit_runtime::{Program, Value};
use tokio_stream::Stream;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status, Streaming};

/// How a server runs: its address, device, token and limits.
///
/// ```no_run
/// use tilejit::remote::{ServeOptions, Server};
/// let server = Server::start(ServeOptions {
///     listen: "127.0.0.1:0".into(),
///     token: "secret".into(),
///     ..ServeOptions::default()
/// })?;
/// println!("listening on {}", server.addr());
/// server.wait()?;
/// # Ok::<(), tilejit::Error>(())
/// ```
#[derive(Clone)]
pub struct ServeOptions {
    /// `HOST:PORT`, or `:PORT` for loopback (port 0 picks a free one).
    pub listen: String,
    /// The device the server's tensors live on and its programs run on.
    pub device: Device,
    /// The token every call must carry (`authorization: Bearer TOKEN`).
    /// `Debug` prints it as `<redacted>`.
    pub token: String,
    /// A session silent this long (no call, no heartbeat) is closed and
    /// its tensors freed.
    pub session_timeout: Duration,
    /// The largest tensor one upload or result may have, in bytes.
    pub max_tensor_bytes: u64,
    /// The most bytes of tensors one session may hold.
    pub max_session_bytes: u64,
    /// The most bytes of tensors the server holds over all sessions
    /// (uploads in flight included).
    pub max_total_bytes: u64,
    /// The most sessions open at once, over all clients.
    pub max_sessions: usize,
    /// The longest a request may take: a launch or call still running
    /// then is stopped (between kernels), and tonic drops the request.
    /// Work whose client goes away earlier is stopped then.
    pub request_timeout: Duration,
    /// The most programs held at once (least recently used go first).
    pub max_programs: usize,
    /// The longest program text (its constants included) accepted, in bytes.
    pub max_program_bytes: u64,
    /// The most program text the program cache holds, over all programs
    /// (least recently used go first).
    pub max_program_cache_bytes: u64,
    /// TLS: the server's certificate chain, PEM. With `tls_key_pem` the
    /// server speaks only TLS (clients connect to `https://HOST:PORT`).
    pub tls_cert_pem: Option<Vec<u8>>,
    /// TLS: the certificate's private key, PEM (`Debug` hides it).
    pub tls_key_pem: Option<Vec<u8>>,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            listen: "127.0.0.1:0".into(),
            device: Device::host(),
            token: String::new(),
            session_timeout: Duration::from_secs(30),
            max_tensor_bytes: 4 << 30,
            max_session_bytes: 16 << 30,
            max_total_bytes: 32 << 30,
            max_sessions: 1024,
            request_timeout: Duration::from_secs(30 * 60),
            max_programs: 512,
            max_program_bytes: 1 << 30,
            max_program_cache_bytes: 2 << 30,
            tls_cert_pem: None,
            tls_key_pem: None,
        }
    }
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every field but the token, which a log line must never show.
        f.debug_struct("ServeOptions")
            .field("listen", &self.listen)
            .field("device", &self.device)
            .field("token", &"<redacted>")
            .field("session_timeout", &self.session_timeout)
            .field("max_tensor_bytes", &self.max_tensor_bytes)
            .field("max_session_bytes", &self.max_session_bytes)
            .field("max_total_bytes", &self.max_total_bytes)
            .field("max_sessions", &self.max_sessions)
            .field("request_timeout", &self.request_timeout)
            .field("max_programs", &self.max_programs)
            .field("max_program_bytes", &self.max_program_bytes)
            .field("max_program_cache_bytes", &self.max_program_cache_bytes)
            .field(
                "tls_cert_pem",
                &self
                    .tls_cert_pem
                    .as_ref()
                    .map(|c| format!("<{} bytes>", c.len())),
            )
            .field(
                "tls_key_pem",
                &self.tls_key_pem.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// A running gRPC server; dropping it stops it.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<std::result::Result<(), String>>>,
}

impl Server {
    /// Binds `options.listen` and serves on a thread of its own; returns
    /// once the socket is bound, so [`addr`](Self::addr) is the real port.
    pub fn start(options: ServeOptions) -> Result<Server> {
        let addr = resolve(&options.listen)?;
        if options.token.is_empty() {
            return Err(server_error(&options.listen, "the token is empty"));
        }
        let tls = tls_config(&options)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tilejit-serve")
            .enable_all()
            .build()
            .map_err(|e| server_error(&options.listen, &format!("no async runtime: {e}")))?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(addr))
            .map_err(|e| server_error(&options.listen, &format!("cannot bind {addr}: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| server_error(&options.listen, &e.to_string()))?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let state = Arc::new(State::new(options));
        let thread = std::thread::Builder::new()
            .name("tilejit-serve".into())
            .spawn(move || runtime.block_on(serve(state, listener, stopped, tls)))
            .map_err(|e| server_error(&addr.to_string(), &e.to_string()))?;
        Ok(Server {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it listens on (with the real port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Blocks until the server stops, which it does only on an error: for
    /// a process whose job is serving (dropping the server stops it).
    pub fn wait(mut self) -> Result<()> {
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(Err(e))) => Err(server_error(&self.addr.to_string(), &e)),
            Some(Err(_)) => Err(server_error(&self.addr.to_string(), "the server panicked")),
            _ => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The TLS configuration `options` asks for (checked here, so a bad
/// certificate or key fails `start`, not the serving thread).
fn tls_config(options: &ServeOptions) -> Result<Option<tonic::transport::ServerTlsConfig>> {
    let (cert, key) = match (&options.tls_cert_pem, &options.tls_key_pem) {
        (None, None) => return Ok(None),
        (Some(c), Some(k)) => (c, k),
        _ => {
            return Err(server_error(
                &options.listen,
                "TLS needs both a certificate and its key",
            ))
        }
    };
    let config = tonic::transport::ServerTlsConfig::new()
        .identity(tonic::transport::Identity::from_pem(cert, key));
    tonic::transport::Server::builder()
        .tls_config(config.clone())
        .map_err(|e| {
            server_error(
                &options.listen,
                &format!("bad TLS certificate or key: {}", wire::error_chain(&e)),
            )
        })?;
    Ok(Some(config))
}

fn server_error(addr: &str, message: &str) -> Error {
    Error::Remote {
        server: addr.to_string(),
        op: "serve".into(),
        location: None,
        kind: tilejit_ir::ErrorKind::BadArgument,
        message: message.to_string(),
    }
}

/// `:PORT` is loopback; anything else must name its host.
fn resolve(listen: &str) -> Result<SocketAddr> {
    let text = match listen.strip_prefix(':') {
        Some(port) => format!("127.0.0.1:{port}"),
        None => listen.to_string(),
    };
    text.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            server_error(
                listen,
                "not an address: give HOST:PORT, or :PORT for loopback",
            )
        })
}

async fn serve(
    state: Arc<State>,
    listener: tokio::net::TcpListener,
    stopped: tokio::sync::oneshot::Receiver<()>,
    tls: Option<tonic::transport::ServerTlsConfig>,
) -> std::result::Result<(), String> {
    let reaper = tokio::spawn(reap(Arc::downgrade(&state)));
    let token = format!("Bearer {}", state.options.token);
    let request_timeout = state.options.request_timeout;
    let auth = move |req: Request<()>| -> std::result::Result<Request<()>, Status> {
        let given = req
            .metadata()
            .get("authorization")
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        if constant_time_eq(given, token.as_bytes()) {
            Ok(req)
        } else {
            // No detail: a caller without the token learns nothing.
            log(format_args!(
                "refused a call without the right token from {}",
                peer(&req)
            ));
            Err(Status::unauthenticated("unauthenticated"))
        }
    };
    let service = RemoteServer::new(Service(state))
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = match builder.tls_config(tls) {
            Ok(b) => b,
            Err(e) => {
                reaper.abort();
                return Err(wire::error_chain(&e));
            }
        };
    }
    let served = builder
        // Windows and frames sized for bulk copies: with h2's 64 KiB
        // defaults a 64 MiB upload stalls on window updates.
        .initial_stream_window_size(Some(WINDOW))
        .initial_connection_window_size(Some(2 * WINDOW))
        .max_frame_size(Some(FRAME))
        // Liveness, not size: a silent peer is dropped after ~20 s, and
        // with it any half-finished stream and its buffers.
        .http2_keepalive_interval(Some(Duration::from_secs(10)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        // Every request's deadline (a client's shorter `grpc-timeout`
        // wins). A second past the runs' own deadline, so a run past it
        // says so itself rather than as tonic's bare timeout.
        .timeout(request_timeout + Duration::from_secs(1))
        .add_service(InterceptedService::new(service, auth))
        .serve_with_incoming_shutdown(
            // Nagle off on each accepted socket (the builder's own
            // setting applies only to sockets it accepts itself): small
            // replies must not wait for a delayed ACK (~40 ms).
            tonic::transport::server::TcpIncoming::from(listener)
                .with_nodelay(Some(true))
                .with_keepalive(Some(Duration::from_secs(30))),
            async {
                let _ = stopped.await;
            },
        )
        .await
        .map_err(|e| e.to_string());
    reaper.abort();
    served
}

/// HTTP/2 flow-control window per stream (the connection's is twice it)
/// and the largest frame, on both sides.
pub(crate) const WINDOW: u32 = 8 << 20;
pub(crate) const FRAME: u32 = 1 << 20;

/// A line on stderr under `TILEJIT_LOG=remote`.
fn log(message: std::fmt::Arguments<'_>) {
    if tilejit_ir::config::config().log.remote {
        eprintln!("[tilejit serve] {message}");
    }
}

/// Logs a failed request (under `TILEJIT_LOG=remote`) and passes it on;
/// a launch of a key the server lacks is the protocol's normal first step
/// (the client then sends the program), not a failure.
fn logged<T>(what: &str, r: std::result::Result<T, Status>) -> std::result::Result<T, Status> {
    if let Err(s) = &r {
        if !(what == "launch" && s.code() == tonic::Code::NotFound) {
            log(format_args!(
                "{what} failed: {:?}: {}",
                s.code(),
                s.message()
            ));
        }
    }
    r
}

/// Who sent `req`, for a log line.
fn peer<T>(req: &Request<T>) -> String {
    req.remote_addr()
        .map_or_else(|| "an unknown peer".into(), |a| a.to_string())
}

/// A session handle's number and secret (8 + 16 bytes).
fn split_handle(handle: &[u8]) -> std::result::Result<(u64, &[u8]), Status> {
    if handle.len() != 24 {
        return Err(Status::invalid_argument(
            "a session handle is the 24 bytes the server's open returned",
        ));
    }
    let (number, secret) = handle.split_at(8);
    let number = u64::from_le_bytes(number.try_into().unwrap_or_default());
    Ok((number, secret))
}

/// 128 bits from the OS's generator (`/dev/urandom`).
fn random_secret() -> std::result::Result<[u8; 16], Status> {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Status::internal(format!("no random session secret: {e}")))?;
    Ok(bytes)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Closes sessions silent past the timeout, until the server goes.
async fn reap(state: std::sync::Weak<State>) {
    loop {
        let Some(s) = state.upgrade() else { return };
        let timeout = s.options.session_timeout;
        let dead: Vec<Session> = {
            let mut sessions = s.sessions();
            let ids: Vec<u64> = sessions
                .iter()
                .filter(|(_, v)| v.last_seen.elapsed() > timeout)
                .map(|(k, _)| *k)
                .collect();
            ids.iter().filter_map(|id| sessions.remove(id)).collect()
        };
        s.release(dead.iter().map(|d| d.bytes).sum());
        drop(s);
        for d in &dead {
            log(format_args!(
                "a session expired after {timeout:?} of silence: {} tensors ({} bytes) freed",
                d.tensors.len(),
                d.bytes
            ));
        }
        // Tensors are freed here, outside the lock (a Sim tensor's drop
        // frees device memory).
        let bytes = dead.iter().map(|d| d.bytes).sum();
        drop(dead);
        give_back_memory(bytes);
        tokio::time::sleep((timeout / 4).max(Duration::from_millis(50))).await;
    }
}

struct Session {
    /// 128 bits from the OS's generator: the session's handle is its
    /// number and this, and every call must show both.
    secret: [u8; 16],
    tensors: HashMap<u64, (Tensor, u64)>,
    bytes: u64,
    last_seen: Instant,
}

struct State {
    options: ServeOptions,
    sessions: Mutex<HashMap<u64, Session>>,
    programs: Mutex<Programs>,
    next_id: AtomicU64,
    launches: AtomicU64,
    calls: AtomicU64,
    loads: AtomicU64,
    stopped: AtomicU64,
    /// Bytes of tensors held over all sessions, and of uploads and
    /// results reserved but not yet filed.
    held: AtomicU64,
}

/// Bytes counted in [`State::held`] for an upload or results not yet
/// filed in a session; given back on drop unless filed.
struct Reserved {
    state: Arc<State>,
    bytes: u64,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.state.release(self.bytes);
    }
}

/// Programs by content key, least recently used evicted past the bound.
#[derive(Default)]
struct Programs {
    /// Each program, when it was last used, and its text's length.
    map: HashMap<[u8; 32], (Arc<Program>, u64, u64)>,
    clock: u64,
    /// The text bytes of the programs held.
    bytes: u64,
}

impl State {
    fn new(options: ServeOptions) -> State {
        State {
            options,
            sessions: Mutex::new(HashMap::new()),
            programs: Mutex::new(Programs::default()),
            next_id: AtomicU64::new(1),
            launches: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            loads: AtomicU64::new(0),
            stopped: AtomicU64::new(0),
            held: AtomicU64::new(0),
        }
    }

    /// The session table; a poisoned lock is still a usable table (each
    /// update is one insert or remove).
    fn sessions(&self) -> MutexGuard<'_, HashMap<u64, Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn programs(&self) -> MutexGuard<'_, Programs> {
        self.programs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts `bytes` more against the server-wide budget, or says why not.
    fn reserve(self: &Arc<Self>, bytes: u64) -> std::result::Result<Reserved, Status> {
        let max = self.options.max_total_bytes;
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                h.checked_add(bytes).filter(|n| *n <= max)
            })
            .map_err(|held| {
                Status::resource_exhausted(format!(
                    "the server holds {held} bytes of tensors over all sessions; {bytes} more is over its limit of {max} bytes"
                ))
            })?;
        Ok(Reserved {
            state: self.clone(),
            bytes,
        })
    }

    /// Gives `bytes` back to the server-wide budget (tensors freed).
    fn release(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The session `handle` names, if the handle's secret is its own:
    /// marked alive. Another session's number with the wrong secret is
    /// `PERMISSION_DENIED`; a number the server does not hold (closed,
    /// expired, never opened) is `FAILED_PRECONDITION`.
    fn session<'a>(
        &self,
        sessions: &'a mut HashMap<u64, Session>,
        handle: &[u8],
    ) -> std::result::Result<(u64, &'a mut Session), Status> {
        let (number, secret) = split_handle(handle)?;
        let Some(s) = sessions.get_mut(&number) else {
            return Err(Status::failed_precondition(format!(
                "no session {number}: it was closed, or silent past the server's {:?} timeout",
                self.options.session_timeout
            )));
        };
        if !constant_time_eq(&s.secret, secret) {
            return Err(Status::permission_denied(format!(
                "session {number} is not this client's"
            )));
        }
        s.last_seen = Instant::now();
        Ok((number, s))
    }

    /// Checks `handle` and marks its session alive: its number.
    fn touch(&self, handle: &[u8]) -> std::result::Result<u64, Status> {
        let mut sessions = self.sessions();
        self.session(&mut sessions, handle).map(|(n, _)| n)
    }

    /// Room for `bytes` more in `session`, or why not.
    fn check_room(&self, session: u64, bytes: u64) -> std::result::Result<(), Status> {
        if bytes > self.options.max_tensor_bytes {
            return Err(Status::resource_exhausted(format!(
                "a tensor of {bytes} bytes is over the server's limit of {} bytes",
                self.options.max_tensor_bytes
            )));
        }
        let held = self.sessions().get(&session).map_or(0, |s| s.bytes);
        if held.saturating_add(bytes) > self.options.max_session_bytes {
            return Err(Status::resource_exhausted(format!(
                "the session holds {held} bytes; {bytes} more is over the server's limit of {} bytes per session",
                self.options.max_session_bytes
            )));
        }
        Ok(())
    }

    /// Files `tensors` under fresh ids in `session`: their references.
    /// `reserved` (an upload's bytes, counted before it streamed) goes
    /// toward their size; the rest is reserved here.
    fn keep(
        self: &Arc<Self>,
        session: u64,
        tensors: Vec<Tensor>,
        reserved: Option<Reserved>,
    ) -> std::result::Result<Vec<proto::TensorRef>, Status> {
        let mut typed = Vec::with_capacity(tensors.len());
        for t in tensors {
            let ty = t
                .ty()
                .ok_or_else(|| Status::internal("a result is an error tensor"))?;
            let bytes = (ty.shape.numel() * ty.dtype.size_bytes()) as u64;
            if bytes > self.options.max_tensor_bytes {
                return Err(Status::resource_exhausted(format!(
                    "a result of {bytes} bytes is over the server's limit of {} bytes",
                    self.options.max_tensor_bytes
                )));
            }
            typed.push((t, ty, bytes));
        }
        let total: u64 = typed.iter().map(|(_, _, b)| b).sum();
        let mut reserved = reserved.into_iter().collect::<Vec<_>>();
        let before: u64 = reserved.iter().map(|r| r.bytes).sum();
        if total > before {
            reserved.push(self.reserve(total - before)?);
        }
        let mut sessions = self.sessions();
        let s = sessions
            .get_mut(&session)
            .ok_or_else(|| Status::failed_precondition(format!("session {session} closed")))?;
        // Checked here, under the lock, as well as before an upload:
        // concurrent calls of one session cannot pass the bound together.
        if s.bytes.saturating_add(total) > self.options.max_session_bytes {
            return Err(Status::resource_exhausted(format!(
                "the session holds {} bytes; {total} more is over the server's limit of {} bytes per session",
                s.bytes, self.options.max_session_bytes
            )));
        }
        let mut out = Vec::with_capacity(typed.len());
        for (t, ty, bytes) in typed {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            s.tensors.insert(id, (t, bytes));
            s.bytes += bytes;
            out.push(proto::TensorRef {
                id,
                ty: Some(wire::ty_to_proto(&ty)),
            });
        }
        s.last_seen = Instant::now();
        // Filed: the session's bytes now, given back when freed; any
        // excess of an upload's estimate goes back now.
        let mut filed = 0;
        for r in &mut reserved {
            let take = r.bytes.min(total - filed);
            filed += take;
            r.bytes -= take;
        }
        drop(sessions);
        drop(reserved);
        Ok(out)
    }

    /// Tensor `id` of the session `handle` names (ids are looked up in
    /// the caller's own session only).
    fn tensor(&self, handle: &[u8], id: u64) -> std::result::Result<Tensor, Status> {
        let mut sessions = self.sessions();
        let (session, s) = self.session(&mut sessions, handle)?;
        s.tensors
            .get(&id)
            .map(|(t, _)| t.clone())
            .ok_or_else(|| Status::not_found(format!("session {session} holds no tensor {id}")))
    }

    /// A call's arguments as tensors and scalars (tensors by id or inline).
    fn args(&self, handle: &[u8], args: &[proto::Arg]) -> std::result::Result<Vec<Owned>, Status> {
        args.iter()
            .enumerate()
            .map(|(i, a)| {
                let bad = |m: String| Status::invalid_argument(format!("argument {i}: {m}"));
                Ok(match &a.value {
                    Some(arg::Value::Tensor(id)) => Owned::Tensor(self.tensor(handle, *id)?),
                    Some(arg::Value::Inline(t)) => {
                        Owned::Tensor(Tensor::concrete(wire::from_inline(t).map_err(bad)?))
                    }
                    Some(arg::Value::Float(f)) => {
                        let d = DType::from_name(&f.dtype)
                            .filter(|d| d.is_float())
                            .ok_or_else(|| bad(format!("`{}` is not a float type", f.dtype)))?;
                        Owned::Float(f.value, d)
                    }
                    Some(arg::Value::Int(v)) => Owned::Int(*v),
                    Some(arg::Value::Bool(v)) => Owned::Bool(*v),
                    None => return Err(bad("no value".into())),
                })
            })
            .collect()
    }

    fn program(&self, key: &[u8]) -> Option<Arc<Program>> {
        let mut p = self.programs();
        p.clock += 1;
        let now = p.clock;
        let (program, used, _) = p.map.get_mut(key)?;
        *used = now;
        Some(program.clone())
    }

    /// Holds `program` (of `bytes` of text) under `key`, evicting the
    /// least recently used past the count or byte bound (never the one
    /// just added).
    fn add_program(&self, key: [u8; 32], program: Arc<Program>, bytes: u64) {
        let mut p = self.programs();
        p.clock += 1;
        let now = p.clock;
        if let Some((_, _, old)) = p.map.insert(key, (program, now, bytes)) {
            p.bytes -= old;
        }
        p.bytes += bytes;
        while p.map.len() > 1
            && (p.map.len() > self.options.max_programs.max(1)
                || p.bytes > self.options.max_program_cache_bytes)
        {
            let oldest = p
                .map
                .iter()
                .filter(|(k, _)| **k != key)
                .min_by_key(|(_, (_, u, _))| *u)
                .map(|(k, _)| *k);
            let Some(k) = oldest else { break };
            if let Some((_, _, b)) = p.map.remove(&k) {
                p.bytes -= b;
            }
        }
    }
}

/// An argument the server owns while a call runs.
enum Owned {
    Tensor(Tensor),
    Float(f64, DType),
    Int(i64),
    Bool(bool),
}

impl Owned {
    fn as_arg(&self) -> ArgValue<'_> {
        match self {
            Owned::Tensor(t) => ArgValue::Tensor(t),
            Owned::Float(v, d) => ArgValue::Float(*v, *d),
            Owned::Int(v) => ArgValue::Int(*v),
            Owned::Bool(v) => ArgValue::Bool(*v),
        }
    }
}

/// Runs blocking work off the async threads; a panic in it is an internal
/// error for this call, never the server's end.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::result::Result<T, Status> + Send + 'static,
) -> std::result::Result<T, Status> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(wire::with_kind(
            Status::internal(format!("the server's work panicked: {e}")),
            tilejit_ir::ErrorKind::Panic,
        ))
    })
}

/// Frees below this are left to the allocator (and the pool) as they are.
const GIVE_BACK_FROM: u64 = 1 << 20;

/// After tensors of `bytes` were freed: gives the storage pool's buffers
/// and the C allocator's free pages back to the OS (off the async
/// threads), so a long-running server comes back near its baseline
/// instead of keeping the peak of its biggest tensor. Small frees skip
/// it: the pool's buffers are what make back-to-back launches fast.
fn give_back_memory(bytes: u64) {
    // At most one give-back queued: a burst of frees trims once or twice,
    // not once per free.
    static QUEUED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if bytes < GIVE_BACK_FROM || QUEUED.swap(true, Ordering::AcqRel) {
        return;
    }
    tokio::task::spawn_blocking(|| {
        QUEUED.store(false, Ordering::Release);
        tilejit_ir::pool::pool().empty();
        tilejit_codegen::sys::release_free_memory();
    });
}

/// Cancels its token when dropped: held by a request's future, so the
/// work it started stops once tonic drops the future (the client reset
/// the stream or went away, or the request ran past its deadline).
struct StopOnDrop(CancelToken);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Runs `f` (a launch or call) off the async threads, under the server's
/// request deadline and a token cancelled when the caller's future is
/// dropped: its program runs stop between kernels (host) or within a few
/// thousand instructions (Sim). A stopped run counts in `stopped`.
async fn stoppable<T: Send + 'static>(
    state: &Arc<State>,
    what: &'static str,
    f: impl FnOnce() -> std::result::Result<T, Status> + Send + 'static,
) -> std::result::Result<T, Status> {
    let token = CancelToken::new();
    let guard = StopOnDrop(token.clone());
    let state = state.clone();
    let deadline = state.options.request_timeout;
    let r = blocking(move || {
        cancel::with_cancel(&token, || {
            cancel::with_deadline(deadline, || {
                let r = f();
                if r.is_err() {
                    if let Some(why) = cancel::current().stopped() {
                        state.stopped.fetch_add(1, Ordering::Relaxed);
                        log(format_args!("a {what} stopped: it {why}"));
                        let status = if token.is_cancelled() {
                            Status::cancelled(format!("the {what} {why}: its client went away"))
                        } else {
                            Status::deadline_exceeded(format!(
                                "the {what} {why}: the server's request timeout"
                            ))
                        };
                        return Err(wire::with_kind(status, tilejit_ir::ErrorKind::Cancelled));
                    }
                }
                r
            })
        })
    })
    .await;
    drop(guard);
    r
}

/// Runs `program` on the server's device: host arrays in, host arrays
/// out; or device buffers in place, results left in device memory.
fn launch(
    device: &Device,
    program: &Program,
    inputs: &[Tensor],
    params: &[Lit],
) -> Result<Vec<Tensor>> {
    let run = |source| Error::Run {
        function: program.name().to_string(),
        location: crate::error::Loc::caller(),
        source,
    };
    if device.is_host() {
        let arrays = inputs
            .iter()
            .map(|t| t.array("launch"))
            .collect::<Result<Vec<Array>>>()?;
        let outs = program.run(&arrays, params).map_err(run)?;
        return Ok(outs.into_iter().map(Tensor::concrete).collect());
    }
    let values = inputs
        .iter()
        .map(|t| match &t.repr {
            Repr::Sim(d) => Ok(Value::Device(d.clone())),
            _ => t.array("launch").map(Value::Host),
        })
        .collect::<Result<Vec<_>>>()?;
    let outs = program.run_resident(&values, params).map_err(run)?;
    Ok(crate::device::sim_tensors(outs))
}

/// Checks a client's graph before it is compiled: every value's size is
/// within the server's tensor limit (the verifier checks the rest).
fn check_graph(g: &Graph, max_bytes: u64) -> std::result::Result<(), String> {
    for id in g.ids() {
        let ty = g.ty(id);
        let bytes = ty
            .shape
            .checked_numel()
            .and_then(|n| n.checked_mul(ty.dtype.size_bytes()));
        if bytes.is_none_or(|b| b as u64 > max_bytes) {
            return Err(format!(
                "value {} ({ty}) is over the server's limit of {max_bytes} bytes",
                id.index()
            ));
        }
    }
    Ok(())
}

struct Service(Arc<State>);

/// A client stream's first message (it names the session and what
/// follows), or an error saying `what` came with none.
async fn first_chunk<T>(stream: &mut Streaming<T>, what: &str) -> std::result::Result<T, Status> {
    stream
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument(format!("{what} with no chunk")))
}

type DataStream = Pin<Box<dyn Stream<Item = std::result::Result<proto::DataChunk, Status>> + Send>>;

impl Service {
    async fn upload_inner(
        &self,
        req: Request<Streaming<proto::UploadChunk>>,
    ) -> std::result::Result<Response<proto::TensorRef>, Status> {
        let mut stream = req.into_inner();
        let first = first_chunk(&mut stream, "an upload").await?;
        let session = self.0.touch(&first.session)?;
        let (ty, bytes) =
            wire::ty_from_proto(first.ty.as_ref()).map_err(Status::invalid_argument)?;
        self.0.check_room(session, bytes)?;
        let reserved = self.0.reserve(bytes)?;
        // Decoded as chunks arrive into a buffer that grows with them
        // (never sized from the header alone past 64 MiB), and dropped
        // with this call if the client goes away.
        let mut decoder = wire::Decoder::new(ty, bytes).map_err(Status::resource_exhausted)?;
        let mut chunk = first.data;
        loop {
            decoder
                .push(&chunk)
                .map_err(|e| Status::invalid_argument(format!("an upload sent {e}")))?;
            match stream.message().await? {
                Some(c) => chunk = c.data,
                None => break,
            }
        }
        let array = decoder
            .finish()
            .map_err(|e| Status::invalid_argument(format!("an upload ended after {e}")))?;
        let state = self.0.clone();
        let refs = blocking(move || {
            let t = Tensor::concrete(array)
                .to(&state.options.device)
                .map_err(|e| wire::status_from_error(&e))?;
            state.keep(session, vec![t], Some(reserved))
        })
        .await?;
        refs.into_iter()
            .next()
            .map(Response::new)
            .ok_or_else(|| Status::internal("no reference"))
    }

    async fn load_program_inner(
        &self,
        req: Request<Streaming<proto::ProgramChunk>>,
    ) -> std::result::Result<Response<proto::Empty>, Status> {
        let mut stream = req.into_inner();
        let first = first_chunk(&mut stream, "a program").await?;
        self.0.touch(&first.session)?;
        let key: [u8; 32] = first.key[..]
            .try_into()
            .map_err(|_| Status::invalid_argument("a program key must be 32 bytes"))?;
        let name = first.name;
        let limit = self.0.options.max_program_bytes;
        let mut text = first.text.to_vec();
        loop {
            if text.len() as u64 > limit {
                return Err(Status::resource_exhausted(format!(
                    "a program's text is over the server's limit of {limit} bytes"
                )));
            }
            let Some(c) = stream.message().await? else {
                break;
            };
            text.extend_from_slice(&c.text);
        }
        let state = self.0.clone();
        stoppable(&self.0, "program load", move || {
            let text = String::from_utf8(text)
                .map_err(|_| Status::invalid_argument("a program's text is not UTF-8"))?;
            if wire::content_key(&text) != key {
                return Err(Status::invalid_argument(
                    "the program's key is not the content key of its text",
                ));
            }
            if state.program(&key).is_some() {
                return Ok(());
            }
            let bad = |m: String| {
                wire::with_kind(
                    Status::invalid_argument(format!("program `{name}`: {m}")),
                    tilejit_ir::ErrorKind::BadArgument,
                )
            };
            let graph = tilejit_ir::text::parse(&text).map_err(|e| bad(e.to_string()))?;
            check_graph(&graph, state.options.max_tensor_bytes).map_err(bad)?;
            // A client gone while the text streamed or parsed: no compile.
            if let Some(why) = cancel::current().stopped() {
                return Err(Status::cancelled(format!("program `{name}` {why}")));
            }
            let start = Instant::now();
            let program = Program::compile_named(graph, &name)
                .map_err(|e| wire::status_from_error(&Error::Runtime(e)))?;
            log(format_args!(
                "program `{name}` (key {}) compiled in {:.1} ms",
                key[..6]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>(),
                start.elapsed().as_secs_f64() * 1e3
            ));
            state.loads.fetch_add(1, Ordering::Relaxed);
            state.add_program(key, Arc::new(program), text.len() as u64);
            Ok(())
        })
        .await?;
        Ok(Response::new(proto::Empty {}))
    }

    async fn launch_inner(
        &self,
        req: Request<proto::LaunchRequest>,
    ) -> std::result::Result<Response<proto::Results>, Status> {
        let r = req.into_inner();
        let session = self.0.touch(&r.session)?;
        let program = self
            .0
            .program(&r.key)
            .ok_or_else(|| Status::not_found("no program with this key: load it first"))?;
        let mut inputs = Vec::with_capacity(r.inputs.len());
        for a in self.0.args(&r.session, &r.inputs)? {
            match a {
                Owned::Tensor(t) => inputs.push(t),
                _ => return Err(Status::invalid_argument("a program's inputs are tensors")),
            }
        }
        let params = r
            .params
            .iter()
            .map(wire::lit_from_proto)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(Status::invalid_argument)?;
        let expected = program.traced().input_types();
        let given: Vec<_> = inputs.iter().filter_map(Tensor::ty).collect();
        if given != expected || params.len() != program.traced().param_types().len() {
            return Err(Status::invalid_argument(format!(
                "program `{}` takes inputs {expected:?} and {} params; the launch gave {given:?} and {}",
                program.name(),
                program.traced().param_types().len(),
                params.len()
            )));
        }
        let state = self.0.clone();
        let outputs = stoppable(&self.0, "launch", move || {
            let outs = launch(&state.options.device, &program, &inputs, &params)
                .map_err(|e| wire::status_from_error(&e))?;
            state.launches.fetch_add(1, Ordering::Relaxed);
            state.keep(session, outs, None)
        })
        .await?;
        Ok(Response::new(proto::Results { outputs }))
    }

    async fn call_inner(
        &self,
        req: Request<proto::CallRequest>,
    ) -> std::result::Result<Response<proto::Results>, Status> {
        let r = req.into_inner();
        let session = self.0.touch(&r.session)?;
        let f = crate::registry::get(&r.name).map_err(|e| wire::status_from_error(&e))?;
        let owned = self.0.args(&r.session, &r.args)?;
        let state = self.0.clone();
        let outputs = stoppable(&self.0, "call", move || {
            let args: Vec<ArgValue> = owned.iter().map(Owned::as_arg).collect();
            let outs = f.call(&args).map_err(|e| wire::status_from_error(&e))?;
            drop(owned);
            state.calls.fetch_add(1, Ordering::Relaxed);
            // Results live on the server's device, whatever the function
            // computed them on.
            let outs = outs
                .into_iter()
                .map(|t| t.to(&state.options.device))
                .collect::<Result<Vec<_>>>()
                .map_err(|e| wire::status_from_error(&e))?;
            state.keep(session, outs, None)
        })
        .await?;
        Ok(Response::new(proto::Results { outputs }))
    }
}

#[tonic::async_trait]
impl Remote for Service {
    async fn upload(
        &self,
        req: Request<Streaming<proto::UploadChunk>>,
    ) -> std::result::Result<Response<proto::TensorRef>, Status> {
        logged("upload", self.upload_inner(req).await)
    }

    async fn load_program(
        &self,
        req: Request<Streaming<proto::ProgramChunk>>,
    ) -> std::result::Result<Response<proto::Empty>, Status> {
        logged("load_program", self.load_program_inner(req).await)
    }

    async fn launch(
        &self,
        req: Request<proto::LaunchRequest>,
    ) -> std::result::Result<Response<proto::Results>, Status> {
        logged("launch", self.launch_inner(req).await)
    }

    async fn call(
        &self,
        req: Request<proto::CallRequest>,
    ) -> std::result::Result<Response<proto::Results>, Status> {
        logged("call", self.call_inner(req).await)
    }

    async fn open(
        &self,
        req: Request<proto::OpenRequest>,
    ) -> std::result::Result<Response<proto::OpenReply>, Status> {
        let version = env!("CARGO_PKG_VERSION");
        if req.get_ref().client_version != version {
            return Err(Status::failed_precondition(format!(
                "the client is tilejit {} and the server {version}: programs would not match",
                req.get_ref().client_version
            )));
        }
        let secret = random_secret()?;
        let session = self.0.id();
        let mut sessions = self.0.sessions();
        let max = self.0.options.max_sessions;
        if sessions.len() >= max {
            drop(sessions);
            log(format_args!(
                "refused a session to {}: the server holds its limit of {max}",
                peer(&req)
            ));
            return Err(Status::resource_exhausted(format!(
                "the server holds {max} sessions, its limit: close some, or wait for silent ones to expire"
            )));
        }
        log(format_args!("session {session} opened by {}", peer(&req)));
        sessions.insert(
            session,
            Session {
                secret,
                tensors: HashMap::new(),
                bytes: 0,
                last_seen: Instant::now(),
            },
        );
        drop(sessions);
        let mut handle = Vec::with_capacity(24);
        handle.extend_from_slice(&session.to_le_bytes());
        handle.extend_from_slice(&secret);
        Ok(Response::new(proto::OpenReply {
            session: handle.into(),
            server_version: version.into(),
            device: self.0.options.device.to_string(),
            chunk_bytes: CHUNK_BYTES as u64,
            session_timeout_ms: self.0.options.session_timeout.as_millis() as u64,
        }))
    }

    async fn close(
        &self,
        req: Request<proto::SessionRequest>,
    ) -> std::result::Result<Response<proto::Empty>, Status> {
        let gone = {
            let mut sessions = self.0.sessions();
            let (session, _) = self.0.session(&mut sessions, &req.get_ref().session)?;
            sessions.remove(&session).map(|g| (session, g))
        };
        let bytes = gone.as_ref().map_or(0, |(_, g)| g.bytes);
        self.0.release(bytes);
        if let Some((session, g)) = &gone {
            log(format_args!(
                "session {session} closed: {} tensors ({} bytes) freed",
                g.tensors.len(),
                g.bytes
            ));
        }
        drop(gone);
        give_back_memory(bytes);
        Ok(Response::new(proto::Empty {}))
    }

    async fn ping(
        &self,
        req: Request<proto::SessionRequest>,
    ) -> std::result::Result<Response<proto::Empty>, Status> {
        self.0.touch(&req.get_ref().session)?;
        Ok(Response::new(proto::Empty {}))
    }

    type DownloadStream = DataStream;

    async fn download(
        &self,
        req: Request<proto::TensorRequest>,
    ) -> std::result::Result<Response<DataStream>, Status> {
        let r = req.into_inner();
        let t = self.0.tensor(&r.session, r.id)?;
        let a =
            blocking(move || t.array("download").map_err(|e| wire::status_from_error(&e))).await?;
        // Each chunk encoded as the stream takes it: a download never
        // stages a second copy of the whole tensor.
        let chunks = wire::encode_chunks(a, CHUNK_BYTES).map(|data| {
            data.map(|data| proto::DataChunk { data })
                .map_err(Status::resource_exhausted)
        });
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    async fn free(
        &self,
        req: Request<proto::FreeRequest>,
    ) -> std::result::Result<Response<proto::Empty>, Status> {
        let r = req.into_inner();
        let freed: Vec<(Tensor, u64)> = {
            let mut sessions = self.0.sessions();
            let (_, s) = self.0.session(&mut sessions, &r.session)?;
            let freed: Vec<_> = r.ids.iter().filter_map(|id| s.tensors.remove(id)).collect();
            let bytes = freed.iter().map(|(_, b)| b).sum::<u64>();
            s.bytes -= bytes;
            self.0.release(bytes);
            freed
        };
        let bytes = freed.iter().map(|(_, b)| b).sum();
        drop(freed);
        give_back_memory(bytes);
        Ok(Response::new(proto::Empty {}))
    }

    async fn list(
        &self,
        req: Request<proto::SessionRequest>,
    ) -> std::result::Result<Response<proto::Names>, Status> {
        self.0.touch(&req.get_ref().session)?;
        Ok(Response::new(proto::Names {
            names: crate::registry::list(),
        }))
    }

    async fn stats(
        &self,
        req: Request<proto::SessionRequest>,
    ) -> std::result::Result<Response<proto::ServerStats>, Status> {
        self.0.touch(&req.get_ref().session)?;
        let (sessions, tensors, tensor_bytes) = {
            let s = self.0.sessions();
            (
                s.len() as u64,
                s.values().map(|v| v.tensors.len() as u64).sum(),
                s.values().map(|v| v.bytes).sum(),
            )
        };
        // One lock of the program cache, released before the reply.
        let (programs, program_bytes) = {
            let p = self.0.programs();
            (p.map.len() as u64, p.bytes)
        };
        Ok(Response::new(proto::ServerStats {
            sessions,
            tensors,
            tensor_bytes,
            programs,
            launches: self.0.launches.load(Ordering::Relaxed),
            calls: self.0.calls.load(Ordering::Relaxed),
            program_loads: self.0.loads.load(Ordering::Relaxed),
            stopped: self.0.stopped.load(Ordering::Relaxed),
            program_bytes,
        }))
    }
}

#[cfg(test)]
mod tests {
    //! A client that breaks the protocol on purpose: every bad request is
    //! a clean status, and the server serves on.

    use super::*;
    use crate::remote::proto::remote_client::RemoteClient;
    use prost::bytes::Bytes;
    use tonic::Code;

    type Raw = RemoteClient<tonic::transport::Channel>;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    async fn raw(addr: SocketAddr, token: &str) -> (Raw, String) {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        (RemoteClient::new(channel), format!("Bearer {token}"))
    }

    /// `handle` with its number moved by `by` (its secret kept).
    fn other_number(handle: &Bytes, by: u64) -> Bytes {
        let (n, secret) = split_handle(handle).expect("a handle");
        let mut h = n.wrapping_add(by).to_le_bytes().to_vec();
        h.extend_from_slice(secret);
        h.into()
    }

    async fn open(c: &mut Raw, bearer: &str) -> Bytes {
        c.open(authed(
            bearer,
            proto::OpenRequest {
                client_version: env!("CARGO_PKG_VERSION").into(),
            },
        ))
        .await
        .expect("open")
        .into_inner()
        .session
    }

    async fn upload_bytes(
        c: &mut Raw,
        bearer: &str,
        session: &Bytes,
        n: u64,
    ) -> std::result::Result<u64, Status> {
        let chunk = proto::UploadChunk {
            session: session.clone(),
            ty: Some(proto::TensorType {
                dtype: "u8".into(),
                shape: vec![n],
            }),
            data: Bytes::from(vec![7u8; n as usize]),
        };
        c.upload(authed(bearer, tokio_stream::iter(vec![chunk])))
            .await
            .map(|r| r.into_inner().id)
    }

    /// One client's session and tensors are beyond another's reach, even
    /// knowing their numbers: reads, frees, launches, calls, pings and
    /// closes with a session handle not its own are refused, and the
    /// owner's tensors are untouched.
    #[test]
    fn sessions_are_isolated() {
        let server = Server::start(ServeOptions {
            token: "t".into(),
            ..ServeOptions::default()
        })
        .expect("start");
        crate::remote::register_builtins().expect("builtins");
        rt().block_on(async {
            let (mut a, bearer) = raw(server.addr(), "t").await;
            let (mut b, _) = raw(server.addr(), "t").await;
            let sa = open(&mut a, &bearer).await;
            let sb = open(&mut b, &bearer).await;
            assert_ne!(sa, sb);
            let id = upload_bytes(&mut a, &bearer, &sa, 16)
                .await
                .expect("upload");
            // B guesses A's session: A's number with B's own secret (or
            // any other), or B's own session with A's tensor id.
            let (na, _) = split_handle(&sa).expect("handle");
            let (nb, _) = split_handle(&sb).expect("handle");
            let forged = other_number(&sb, na.wrapping_sub(nb));
            assert_eq!(split_handle(&forged).expect("h").0, na);
            let denied = |e: Status| {
                assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
                assert!(e.message().contains("not this client's"), "{e:?}");
            };
            denied(
                b.download(authed(
                    &bearer,
                    proto::TensorRequest {
                        session: forged.clone(),
                        id,
                    },
                ))
                .await
                .expect_err("download"),
            );
            // B's own session holds no tensor `id`.
            let e = b
                .download(authed(
                    &bearer,
                    proto::TensorRequest {
                        session: sb.clone(),
                        id,
                    },
                ))
                .await
                .expect_err("download");
            assert_eq!(e.code(), Code::NotFound, "{e:?}");
            denied(
                b.free(authed(
                    &bearer,
                    proto::FreeRequest {
                        session: forged.clone(),
                        ids: vec![id],
                    },
                ))
                .await
                .expect_err("free"),
            );
            // Freeing A's id in B's own session frees nothing of A's.
            b.free(authed(
                &bearer,
                proto::FreeRequest {
                    session: sb.clone(),
                    ids: vec![id],
                },
            ))
            .await
            .expect("a free of nothing");
            let tensor_arg = vec![proto::Arg {
                value: Some(arg::Value::Tensor(id)),
            }];
            denied(
                b.launch(authed(
                    &bearer,
                    proto::LaunchRequest {
                        session: forged.clone(),
                        key: Bytes::copy_from_slice(&[9; 32]),
                        inputs: tensor_arg.clone(),
                        params: Vec::new(),
                    },
                ))
                .await
                .expect_err("launch"),
            );
            let e = b
                .call(authed(
                    &bearer,
                    proto::CallRequest {
                        session: sb.clone(),
                        name: "nn.gelu".into(),
                        args: tensor_arg.clone(),
                    },
                ))
                .await
                .expect_err("call on A's tensor");
            assert_eq!(e.code(), Code::NotFound, "{e:?}");
            denied(
                b.call(authed(
                    &bearer,
                    proto::CallRequest {
                        session: forged.clone(),
                        name: "nn.gelu".into(),
                        args: tensor_arg,
                    },
                ))
                .await
                .expect_err("call"),
            );
            denied(
                b.ping(authed(
                    &bearer,
                    proto::SessionRequest {
                        session: forged.clone(),
                    },
                ))
                .await
                .expect_err("ping"),
            );
            denied(
                b.close(authed(
                    &bearer,
                    proto::SessionRequest {
                        session: forged.clone(),
                    },
                ))
                .await
                .expect_err("close"),
            );
            // A handle of the wrong length.
            let e = b
                .ping(authed(
                    &bearer,
                    proto::SessionRequest {
                        session: Bytes::from_static(&[1]),
                    },
                ))
                .await
                .expect_err("short handle");
            assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
            // A's tensor is still there, whole.
            let mut s = a
                .download(authed(
                    &bearer,
                    proto::TensorRequest {
                        session: sa.clone(),
                        id,
                    },
                ))
                .await
                .expect("A's own download")
                .into_inner();
            let mut bytes = Vec::new();
            while let Some(chunk) = s.message().await.expect("chunk") {
                bytes.extend_from_slice(&chunk.data);
            }
            assert_eq!(bytes, [7u8; 16]);
            // A closes its own session; then it is gone for A too.
            a.close(authed(
                &bearer,
                proto::SessionRequest {
                    session: sa.clone(),
                },
            ))
            .await
            .expect("close");
            let e = a
                .ping(authed(
                    &bearer,
                    proto::SessionRequest {
                        session: sa.clone(),
                    },
                ))
                .await
                .expect_err("closed");
            assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
        });
    }

    /// `ServeOptions`' `Debug` shows every setting but the token.
    #[test]
    fn the_token_is_not_in_debug_output() {
        let o = ServeOptions {
            token: "hunter2-secret-token".into(),
            ..ServeOptions::default()
        };
        let text = format!("{o:?} {o:#?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
        assert!(text.contains("max_sessions"), "{text}");
    }

    async fn stats(c: &mut Raw, bearer: &str, session: &Bytes) -> proto::ServerStats {
        c.stats(authed(
            bearer,
            proto::SessionRequest {
                session: session.clone(),
            },
        ))
        .await
        .expect("stats")
        .into_inner()
    }

    /// Server-wide caps: sessions past `max_sessions` are refused (from
    /// any client), and an upload that would take the bytes held over
    /// all sessions past `max_total_bytes` is refused, though its own
    /// session has room; freeing makes room again.
    #[test]
    fn server_wide_caps_hold_over_all_clients() {
        let server = Server::start(ServeOptions {
            token: "t".into(),
            max_sessions: 3,
            max_session_bytes: 1 << 20,
            max_total_bytes: 1 << 20,
            ..ServeOptions::default()
        })
        .expect("start");
        rt().block_on(async {
            let (mut a, bearer) = raw(server.addr(), "t").await;
            let (mut b, _) = raw(server.addr(), "t").await;
            let sa = open(&mut a, &bearer).await;
            let sb = open(&mut b, &bearer).await;
            let _sc = open(&mut b, &bearer).await;
            let e = a
                .open(authed(
                    &bearer,
                    proto::OpenRequest {
                        client_version: env!("CARGO_PKG_VERSION").into(),
                    },
                ))
                .await
                .expect_err("a fourth session");
            assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
            assert!(e.message().contains("3 sessions, its limit"), "{e:?}");
            // 768 KiB in A; 512 KiB more in B fits B's own budget but
            // not the server's.
            let ida = upload_bytes(&mut a, &bearer, &sa, 768 << 10)
                .await
                .expect("A's upload");
            let e = upload_bytes(&mut b, &bearer, &sb, 512 << 10)
                .await
                .expect_err("over the server's budget");
            assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
            assert!(e.message().contains("over all sessions"), "{e:?}");
            assert_eq!(stats(&mut a, &bearer, &sa).await.tensor_bytes, 768 << 10);
            // A frees; B's upload fits now.
            a.free(authed(
                &bearer,
                proto::FreeRequest {
                    session: sa.clone(),
                    ids: vec![ida],
                },
            ))
            .await
            .expect("free");
            upload_bytes(&mut b, &bearer, &sb, 512 << 10)
                .await
                .expect("B's upload");
            // Closing B's session gives its bytes back too.
            b.close(authed(
                &bearer,
                proto::SessionRequest {
                    session: sb.clone(),
                },
            ))
            .await
            .expect("close");
            upload_bytes(&mut a, &bearer, &sa, 1 << 20)
                .await
                .expect("the whole budget");
            // And the session slot: a new session opens.
            open(&mut b, &bearer).await;
        });
    }

    /// The program cache is bounded by bytes of text too: past
    /// `max_program_cache_bytes` the least recently used goes.
    #[test]
    fn the_program_cache_is_bounded_by_bytes() {
        let server = Server::start(ServeOptions {
            token: "t".into(),
            max_program_cache_bytes: 200,
            ..ServeOptions::default()
        })
        .expect("start");
        rt().block_on(async {
            let (mut c, bearer) = raw(server.addr(), "t").await;
            let session = open(&mut c, &bearer).await;
            for n in [4, 5, 6] {
                let text = format!(
                    "graph {{\n  %0 = input 0 : f32[{n}]\n  %1 = add %0, %0 : f32[{n}]\n  return %1\n}}\n"
                );
                assert!(text.len() > 70 && text.len() < 100, "{}", text.len());
                let chunk = proto::ProgramChunk {
                    session: session.clone(),
                    key: Bytes::copy_from_slice(&wire::content_key(&text)),
                    name: "p".into(),
                    text: Bytes::from(text),
                };
                c.load_program(authed(&bearer, tokio_stream::iter(vec![chunk])))
                    .await
                    .expect("load");
            }
            let s = stats(&mut c, &bearer, &session).await;
            assert_eq!(s.programs, 2, "{s:?}");
            assert!(s.program_bytes <= 200, "{s:?}");
        });
    }

    /// A program long enough to run for many seconds on the host: 400
    /// chained 1024x1024 matmuls.
    fn slow_program() -> String {
        let mut text = String::from("graph {\n  %0 = input 0 : f32[1024,1024]\n");
        for i in 1..=400 {
            let prev = if i == 1 { 0 } else { i - 1 };
            text += &format!("  %{i} = matmul %{prev}, %0 : f32[1024,1024]\n");
        }
        text += "  return %400\n}\n";
        text
    }

    /// A launch whose client goes away (its request reset, as a killed
    /// client's is) is stopped between kernels, not run to its end; one
    /// past the server's request timeout is stopped with
    /// `DEADLINE_EXCEEDED`.
    #[test]
    fn a_launch_whose_client_left_is_stopped() {
        let server = Server::start(ServeOptions {
            token: "t".into(),
            request_timeout: Duration::from_secs(3),
            ..ServeOptions::default()
        })
        .expect("start");
        rt().block_on(async {
            let (mut c, bearer) = raw(server.addr(), "t").await;
            let session = open(&mut c, &bearer).await;
            let text = slow_program();
            let key = wire::content_key(&text);
            let chunk = proto::ProgramChunk {
                session: session.clone(),
                key: Bytes::copy_from_slice(&key),
                name: "slow".into(),
                text: Bytes::from(text),
            };
            c.load_program(authed(&bearer, tokio_stream::iter(vec![chunk])))
                .await
                .expect("load");
            let chunks: Vec<_> = wire::chunks(Bytes::from(vec![0u8; 1024 * 1024 * 4]), CHUNK_BYTES)
                .into_iter()
                .enumerate()
                .map(|(i, data)| proto::UploadChunk {
                    session: if i == 0 {
                        session.clone()
                    } else {
                        Bytes::new()
                    },
                    ty: (i == 0).then(|| proto::TensorType {
                        dtype: "f32".into(),
                        shape: vec![1024, 1024],
                    }),
                    data,
                })
                .collect();
            let x = c
                .upload(authed(&bearer, tokio_stream::iter(chunks)))
                .await
                .expect("upload")
                .into_inner()
                .id;
            let launch = proto::LaunchRequest {
                session: session.clone(),
                key: Bytes::copy_from_slice(&key),
                inputs: vec![proto::Arg {
                    value: Some(arg::Value::Tensor(x)),
                }],
                params: Vec::new(),
            };
            // The client gives up after 500 ms: its request future is
            // dropped, which resets the stream.
            let mut c2 = c.clone();
            let r = tokio::time::timeout(
                Duration::from_millis(500),
                c2.launch(authed(&bearer, launch.clone())),
            )
            .await;
            assert!(r.is_err(), "the launch ended in 500 ms: {r:?}");
            let start = Instant::now();
            let mut s = stats(&mut c, &bearer, &session).await;
            while s.stopped == 0 && start.elapsed() < Duration::from_secs(10) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                s = stats(&mut c, &bearer, &session).await;
            }
            assert_eq!((s.stopped, s.launches), (1, 0), "{s:?}");
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{:?}",
                start.elapsed()
            );
            // Past the 3 s request timeout: stopped, and said so.
            let start = Instant::now();
            let e = c
                .launch(authed(&bearer, launch))
                .await
                .expect_err("past the deadline");
            assert!(
                matches!(e.code(), Code::DeadlineExceeded | Code::Cancelled),
                "{e:?}"
            );
            assert!(
                start.elapsed() < Duration::from_secs(8),
                "{:?}",
                start.elapsed()
            );
            let start = Instant::now();
            let mut s = stats(&mut c, &bearer, &session).await;
            while s.stopped < 2 && start.elapsed() < Duration::from_secs(5) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                s = stats(&mut c, &bearer, &session).await;
            }
            assert_eq!((s.stopped, s.launches), (2, 0), "{s:?}");
        });
    }

    fn authed<T>(bearer: &str, msg: T) -> Request<T> {
        let mut r = Request::new(msg);
        r.metadata_mut()
            .insert("authorization", bearer.parse().expect("ascii"));
        r
    }

    /// Dropping a server with a client still connected stops it promptly
    /// (graceful shutdown does not wait for the client to leave), and the
    /// client's next call is a clean error.
    #[test]
    fn a_server_dropped_under_a_client_stops() {
        let server = Server::start(ServeOptions {
            token: "t".into(),
            ..ServeOptions::default()
        })
        .expect("start");
        let remote = Device::remote(&server.addr().to_string(), "t").expect("connect");
        let x = Tensor::ones(&[4], DType::F32).to(&remote).expect("upload");
        let start = Instant::now();
        drop(server);
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        let err = x.to_vec::<f32>().expect_err("the server is gone");
        assert_eq!(err.kind(), tilejit_ir::ErrorKind::Device, "{err}");
    }

    #[test]
    fn protocol_violations_are_clean_statuses() {
        let server = Server::start(ServeOptions {
            token: "t0k".into(),
            max_tensor_bytes: 1 << 20,
            max_session_bytes: 1 << 20,
            ..ServeOptions::default()
        })
        .expect("start");
        rt().block_on(async {
            let (mut c, bearer) = raw(server.addr(), "t0k").await;
            // No token, or the wrong one.
            let e = c.open(proto::OpenRequest::default()).await.expect_err("no token");
            assert_eq!(e.code(), Code::Unauthenticated);
            assert_eq!(e.message(), "unauthenticated");
            let e = c
                .open(authed("Bearer nope", proto::OpenRequest::default()))
                .await
                .expect_err("bad token");
            assert_eq!(e.code(), Code::Unauthenticated);
            // Another version.
            let e = c
                .open(authed(&bearer, proto::OpenRequest { client_version: "0.0.0".into() }))
                .await
                .expect_err("version");
            assert_eq!(e.code(), Code::FailedPrecondition);
            let session = open(&mut c, &bearer).await;
            // An unknown session.
            let e = c
                .ping(authed(&bearer, proto::SessionRequest { session: other_number(&session, 999) }))
                .await
                .expect_err("session");
            assert_eq!(e.code(), Code::FailedPrecondition);
            // Uploads: a bad dtype, too long, too short, over the limit.
            let ty = |dtype: &str, n: u64| {
                Some(proto::TensorType {
                    dtype: dtype.into(),
                    shape: vec![n],
                })
            };
            let up = |ty, data: &'static [u8]| proto::UploadChunk {
                session: session.clone(),
                ty,
                data: Bytes::from_static(data),
            };
            for (chunk, code) in [
                (up(ty("f33", 1), &[0; 4]), Code::InvalidArgument),
                (up(ty("f32", 1), &[0; 8]), Code::InvalidArgument),
                (up(ty("f32", 2), &[0; 4]), Code::InvalidArgument),
                (up(ty("f32", 1 << 20), &[]), Code::ResourceExhausted),
                (up(None, &[]), Code::InvalidArgument),
            ] {
                let e = c
                    .upload(authed(&bearer, tokio_stream::iter(vec![chunk])))
                    .await
                    .expect_err("bad upload");
                assert_eq!(e.code(), code, "{e:?}");
            }
            // Downloads of tensors that are not there.
            let e = c
                .download(authed(&bearer, proto::TensorRequest { session: session.clone(), id: 12345 }))
                .await
                .expect_err("no tensor");
            assert_eq!(e.code(), Code::NotFound);
            // Programs: a key that is not the text's, text that is not a
            // graph, a graph over the size limit, a launch of an unknown key.
            let program = |key: [u8; 32], text: &str| proto::ProgramChunk {
                session: session.clone(),
                key: Bytes::copy_from_slice(&key),
                name: "p".into(),
                text: Bytes::from(text.to_string()),
            };
            let good = "graph {\n  %0 = input 0 : f32[4]\n  %1 = add %0, %0 : f32[4]\n  return %1\n}\n";
            let huge = "graph {\n  %0 = input 0 : f32[1]\n  %1 = broadcast %0 : f32[1000000000]\n  return %1\n}\n";
            for (chunk, code) in [
                (program([7; 32], good), Code::InvalidArgument),
                (program(wire::content_key("graph {"), "graph {"), Code::InvalidArgument),
                (program(wire::content_key(huge), huge), Code::InvalidArgument),
            ] {
                let e = c
                    .load_program(authed(&bearer, tokio_stream::iter(vec![chunk])))
                    .await
                    .expect_err("bad program");
                assert_eq!(e.code(), code, "{e:?}");
            }
            let launch = |key: [u8; 32], inputs: Vec<proto::Arg>| proto::LaunchRequest {
                session: session.clone(),
                key: Bytes::copy_from_slice(&key),
                inputs,
                params: Vec::new(),
            };
            let e = c
                .launch(authed(&bearer, launch([9; 32], Vec::new())))
                .await
                .expect_err("unknown key");
            assert_eq!(e.code(), Code::NotFound);
            // The good program, launched with the wrong inputs, then right.
            let key = wire::content_key(good);
            c.load_program(authed(&bearer, tokio_stream::iter(vec![program(key, good)])))
                .await
                .expect("load");
            let e = c
                .launch(authed(&bearer, launch(key, Vec::new())))
                .await
                .expect_err("no inputs");
            assert_eq!(e.code(), Code::InvalidArgument);
            let x = tilejit_ir::Array::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[4]).expect("x");
            let arg = proto::Arg {
                value: Some(arg::Value::Inline(wire::inline(&x).expect("inline"))),
            };
            let out = c
                .launch(authed(&bearer, launch(key, vec![arg])))
                .await
                .expect("launch")
                .into_inner()
                .outputs;
            let id = out[0].id;
            let mut s = c
                .download(authed(&bearer, proto::TensorRequest { session: session.clone(), id }))
                .await
                .expect("download")
                .into_inner();
            let mut bytes = Vec::new();
            while let Some(chunk) = s.message().await.expect("chunk") {
                bytes.extend_from_slice(&chunk.data);
            }
            let y: Vec<f32> = bytes
                .chunks(4)
                .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                .collect();
            assert_eq!(y, [2.0, 4.0, 6.0, 8.0]);
            // The session holds 16 bytes: a tensor of its whole budget
            // more does not fit.
            let e = c
                .upload(authed(
                    &bearer,
                    tokio_stream::iter(vec![up(ty("u8", 1 << 20), &[])]),
                ))
                .await
                .expect_err("over the session's budget");
            assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
            assert!(e.message().contains("per session"), "{e:?}");
        });
    }
}
