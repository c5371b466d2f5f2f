//! The tonic service: each gRPC request checked against its session and
//! the server's limits, mapped onto the session tables, the program
//! cache and the local device, and logged when it fails.

use super::limits::{blocking, check_graph, give_back_memory, stoppable, working_bytes};
use super::session::{random_secret, Owned, Session, State};
use super::{log, peer};
use crate::args::ArgValue;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::remote::proto::{self, remote_server::Remote};
use crate::remote::wire::{self, CHUNK_BYTES};
use crate::tensor::{Repr, Tensor};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tilejit_ir::{Array, Lit};
use tilejit_runtime::cancel;
use tilejit_runtime::{Program, Value};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

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

pub(super) struct Service(pub(super) Arc<State>);

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
        // The text counts against the server-wide budget while it streams
        // and parses: many loads at once cannot hold more than it.
        let mut held = self.0.reserve(first.text.len() as u64)?;
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
            held.grow(c.text.len() as u64)?;
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
            // A program no launch could run within the budget is refused
            // now, not at each launch.
            let working = working_bytes(&program);
            let max = state.options.max_total_bytes;
            if working > max {
                return Err(wire::with_kind(
                    Status::resource_exhausted(format!(
                        "program `{name}` needs {working} bytes of buffers per run; the server's limit over all sessions is {max} bytes"
                    )),
                    tilejit_ir::ErrorKind::Device,
                ));
            }
            drop(held);
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
        // Each param of the kind its type takes: an int's bits read as a
        // float (or back) would be a silently wrong launch.
        let kinds = params
            .iter()
            .zip(program.traced().param_types())
            .all(|(p, t)| matches!(p, Lit::Float(_)) == t.is_float());
        if given != expected || params.len() != program.traced().param_types().len() || !kinds {
            return Err(Status::invalid_argument(format!(
                "program `{}` takes inputs {expected:?} and {} params; the launch gave {given:?} and {}",
                program.name(),
                program.traced().param_types().len(),
                params.len()
            )));
        }
        // The run's buffers count against the server-wide budget while it
        // runs; the results it keeps are counted again when filed.
        let working = self.0.reserve(working_bytes(&program))?;
        let state = self.0.clone();
        let outputs = stoppable(&self.0, "launch", move || {
            let outs = launch(&state.options.device, &program, &inputs, &params)
                .map_err(|e| wire::status_from_error(&e))?;
            drop(working);
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
