//! The server side of a remote device (`tilejit serve`): a tonic gRPC
//! service over one local device. Tensors live in sessions; programs are
//! held by content key, shared by every session; heavy work (compiles,
//! launches, copies to the device) runs on tokio's blocking pool so the
//! runtime's threads stay free to answer keepalive pings.
//!
//! This file starts and stops the server (options, TLS, the listener, the
//! token check); `session` keeps the sessions and programs, `limits`
//! the caps, deadlines and cancellation, `service` maps each request.

mod limits;
mod service;
mod session;
#[cfg(test)]
mod tests;

use super::proto::remote_server::RemoteServer;
use super::wire::{self, MAX_MESSAGE};
use crate::device::Device;
use crate::error::{Error, Result};
use service::Service;
use session::{constant_time_eq, reap, State};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Status};

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
    if crate::config::config().log.remote {
        eprintln!("[tilejit serve] {message}");
    }
}

/// Who sent `req`, for a log line.
fn peer<T>(req: &Request<T>) -> String {
    req.remote_addr()
        .map_or_else(|| "an unknown peer".into(), |a| a.to_string())
}
