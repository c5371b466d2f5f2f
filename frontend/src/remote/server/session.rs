//! Sessions and the program cache: each session's handle (a number and a
//! 128-bit secret, compared in constant time), its tensor table and
//! bytes, expiry of silent sessions, and programs by content key, least
//! recently used evicted.

use super::limits::{give_back_memory, Reserved};
use super::log;
use super::ServeOptions;
use crate::args::ArgValue;
use crate::remote::proto::{self, arg};
use crate::remote::wire;
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tilejit_ir::DType;
use tilejit_runtime::Program;
use tonic::Status;

/// A session handle's number and secret (8 + 16 bytes).
pub(super) fn split_handle(handle: &[u8]) -> std::result::Result<(u64, &[u8]), Status> {
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
pub(super) fn random_secret() -> std::result::Result<[u8; 16], Status> {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Status::internal(format!("no random session secret: {e}")))?;
    Ok(bytes)
}

pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Closes sessions silent past the timeout, until the server goes.
pub(super) async fn reap(state: std::sync::Weak<State>) {
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

pub(super) struct Session {
    /// 128 bits from the OS's generator: the session's handle is its
    /// number and this, and every call must show both.
    pub(super) secret: [u8; 16],
    pub(super) tensors: HashMap<u64, (Tensor, u64)>,
    pub(super) bytes: u64,
    pub(super) last_seen: Instant,
}

pub(super) struct State {
    pub(super) options: ServeOptions,
    pub(super) sessions: Mutex<HashMap<u64, Session>>,
    pub(super) programs: Mutex<Programs>,
    pub(super) next_id: AtomicU64,
    pub(super) launches: AtomicU64,
    pub(super) calls: AtomicU64,
    pub(super) loads: AtomicU64,
    pub(super) stopped: AtomicU64,
    /// Bytes of tensors held over all sessions, and of uploads and
    /// results reserved but not yet filed.
    pub(super) held: AtomicU64,
}

/// Programs by content key, least recently used evicted past the bound.
#[derive(Default)]
pub(super) struct Programs {
    /// Each program, when it was last used, and its text's length.
    pub(super) map: HashMap<[u8; 32], (Arc<Program>, u64, u64)>,
    pub(super) clock: u64,
    /// The text bytes of the programs held.
    pub(super) bytes: u64,
}

impl State {
    pub(super) fn new(options: ServeOptions) -> State {
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
    pub(super) fn sessions(&self) -> MutexGuard<'_, HashMap<u64, Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn programs(&self) -> MutexGuard<'_, Programs> {
        self.programs.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The session `handle` names, if the handle's secret is its own:
    /// marked alive. Another session's number with the wrong secret is
    /// `PERMISSION_DENIED`; a number the server does not hold (closed,
    /// expired, never opened) is `FAILED_PRECONDITION`.
    pub(super) fn session<'a>(
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
    pub(super) fn touch(&self, handle: &[u8]) -> std::result::Result<u64, Status> {
        let mut sessions = self.sessions();
        self.session(&mut sessions, handle).map(|(n, _)| n)
    }

    /// Files `tensors` under fresh ids in `session`: their references.
    /// `reserved` (an upload's bytes, counted before it streamed) goes
    /// toward their size; the rest is reserved here.
    pub(super) fn keep(
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
    pub(super) fn tensor(&self, handle: &[u8], id: u64) -> std::result::Result<Tensor, Status> {
        let mut sessions = self.sessions();
        let (session, s) = self.session(&mut sessions, handle)?;
        s.tensors
            .get(&id)
            .map(|(t, _)| t.clone())
            .ok_or_else(|| Status::not_found(format!("session {session} holds no tensor {id}")))
    }

    /// A call's arguments as tensors and scalars (tensors by id or inline).
    pub(super) fn args(
        &self,
        handle: &[u8],
        args: &[proto::Arg],
    ) -> std::result::Result<Vec<Owned>, Status> {
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

    pub(super) fn program(&self, key: &[u8]) -> Option<Arc<Program>> {
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
    pub(super) fn add_program(&self, key: [u8; 32], program: Arc<Program>, bytes: u64) {
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
pub(super) enum Owned {
    Tensor(Tensor),
    Float(f64, DType),
    Int(i64),
    Bool(bool),
}

impl Owned {
    pub(super) fn as_arg(&self) -> ArgValue<'_> {
        match self {
            Owned::Tensor(t) => ArgValue::Tensor(t),
            Owned::Float(v, d) => ArgValue::Float(*v, *d),
            Owned::Int(v) => ArgValue::Int(*v),
            Owned::Bool(v) => ArgValue::Bool(*v),
        }
    }
}
