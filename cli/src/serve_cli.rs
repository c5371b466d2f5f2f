//! `tilejit serve`: hosts one device for remote clients over gRPC
//! ([`tilejit::remote`]). Its first stdout line is `listening on ADDR`
//! (with the real port when given `:0`); without `--token-file` a fresh
//! random token is made and printed on the second line, `token TOKEN`.

use crate::device_cli::CliError;
use crate::outln;
use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::time::Duration;
use tilejit::remote::{ServeOptions, Server};
use tilejit::Device;

/// `tilejit serve`'s options.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// `HOST:PORT` to listen on, or `:PORT` for loopback (`:0` picks a
    /// free port). Only loopback unless a host is named.
    #[arg(long, default_value = ":0")]
    listen: String,
    /// The device the server's tensors live on.
    #[arg(long, value_enum, default_value = "host")]
    device: DeviceArg,
    /// A file holding the token clients must send (whitespace around it
    /// is ignored). Without it, a random token is made and printed.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Seconds a silent session (no call, no heartbeat) lives before its
    /// tensors are freed.
    #[arg(long, default_value_t = 30)]
    session_timeout: u64,
    /// The most sessions open at once, over all clients.
    #[arg(long, default_value_t = 1024)]
    max_sessions: usize,
    /// The most bytes of tensors held over all sessions.
    #[arg(long, default_value_t = 32 << 30)]
    max_total_bytes: u64,
    /// The most bytes of tensors one session may hold.
    #[arg(long, default_value_t = 16 << 30)]
    max_session_bytes: u64,
    /// Seconds a request may take; a launch or call still running then is
    /// stopped. Work whose client goes away is stopped at once.
    #[arg(long, default_value_t = 1800)]
    request_timeout: u64,
    /// A PEM file with the server's TLS certificate chain: with
    /// `--tls-key`, the server speaks only TLS, and clients connect to
    /// `https://HOST:PORT` with the CA that signed it.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// A PEM file with the certificate's private key.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Stop when standard input closes (so a parent that dies takes the
    /// server with it).
    #[arg(long)]
    exit_with_stdin: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum DeviceArg {
    Host,
    Sim,
}

fn fail(msg: String) -> CliError {
    CliError { code: 1, msg }
}

/// Runs `tilejit serve` until it is killed (or stdin closes).
pub fn serve_cmd(a: &ServeArgs) -> Result<(), CliError> {
    let (token, made) = match &a.token_file {
        Some(path) => {
            let text = tilejit_ir::fallible::read_file(path)
                .and_then(|b| String::from_utf8(b).map_err(std::io::Error::other))
                .map_err(|e| {
                    fail(format!(
                        "cannot read the token file {}: {e}",
                        path.display()
                    ))
                })?;
            let token = text.trim().to_string();
            if token.is_empty() {
                return Err(fail(format!("the token file {} is empty", path.display())));
            }
            (token, false)
        }
        None => (random_token()?, true),
    };
    let read = |path: &PathBuf, what: &str| {
        tilejit_ir::fallible::read_file(path).map_err(|e| {
            fail(format!(
                "cannot read the TLS {what} {}: {e}",
                path.display()
            ))
        })
    };
    let tls_cert_pem = a
        .tls_cert
        .as_ref()
        .map(|p| read(p, "certificate"))
        .transpose()?;
    let tls_key_pem = a.tls_key.as_ref().map(|p| read(p, "key")).transpose()?;
    tilejit::remote::register_builtins().map_err(|e| fail(e.to_string()))?;
    let server = Server::start(ServeOptions {
        listen: a.listen.clone(),
        device: match a.device {
            DeviceArg::Host => Device::host(),
            DeviceArg::Sim => Device::sim(),
        },
        token: token.clone(),
        session_timeout: Duration::from_secs(a.session_timeout.max(1)),
        max_sessions: a.max_sessions.max(1),
        max_total_bytes: a.max_total_bytes,
        max_session_bytes: a.max_session_bytes,
        request_timeout: Duration::from_secs(a.request_timeout.max(1)),
        tls_cert_pem,
        tls_key_pem,
        ..ServeOptions::default()
    })
    .map_err(|e| fail(e.to_string()))?;
    outln!("listening on {}", server.addr());
    if !server.addr().ip().is_loopback() && a.tls_cert.is_none() {
        eprintln!(
            "warning: serving on {} without TLS: the token and every tensor cross the network \
             in clear (give --tls-cert and --tls-key)",
            server.addr()
        );
    }
    if made {
        outln!("token {token}");
    }
    let _ = std::io::stdout().flush();
    if a.exit_with_stdin {
        std::thread::spawn(|| {
            let mut sink = [0u8; 256];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            std::process::exit(0);
        });
    }
    server.wait().map_err(|e| fail(e.to_string()))
}

/// 128 random bits from the system's generator, as hex.
fn random_token() -> Result<String, CliError> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| {
            fail(format!(
                "cannot make a token (no /dev/urandom: {e}); pass --token-file"
            ))
        })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
