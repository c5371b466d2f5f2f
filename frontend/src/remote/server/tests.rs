//! A client that breaks the protocol on purpose: every bad request is
//! a clean status, and the server serves on.

use super::session::split_handle;
use super::*;
use crate::device::Device;
use crate::remote::proto::remote_client::RemoteClient;
use crate::remote::proto::{self, arg};
use crate::remote::wire::CHUNK_BYTES;
use crate::tensor::Tensor;
use prost::bytes::Bytes;
use std::time::Instant;
use tilejit_ir::{DType, Lit};
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

/// Loads `text` as a program (one chunk).
async fn load_text(
    c: &mut Raw,
    bearer: &str,
    session: &Bytes,
    text: &str,
) -> std::result::Result<[u8; 32], Status> {
    let key = wire::content_key(text);
    let chunk = proto::ProgramChunk {
        session: session.clone(),
        key: Bytes::copy_from_slice(&key),
        name: "p".into(),
        text: Bytes::from(text.to_string()),
    };
    c.load_program(authed(bearer, tokio_stream::iter(vec![chunk])))
        .await
        .map(|_| key)
}

/// A run's buffers count against the server-wide budget (a review found
/// a launch could allocate any number of values each within the tensor
/// limit, and an upload's text none at all): a program whose buffers
/// alone are over it is refused at load; one that fits alone is refused
/// at launch while other tensors hold the budget, and runs once they are
/// freed. A param of the wrong kind (an int for an f32) is refused too.
#[test]
fn a_launch_reserves_its_buffers_and_params_are_checked_by_kind() {
    let server = Server::start(ServeOptions {
        token: "t".into(),
        max_session_bytes: 1 << 20,
        max_total_bytes: 1 << 20,
        ..ServeOptions::default()
    })
    .expect("start");
    // `n` values of f32[65536] (256 KiB each), every one returned, so
    // each is a buffer of its own.
    let chain = |n: usize| {
        let mut t = String::from("graph {\n  %0 = input 0 : f32[1]\n");
        t += "  %1 = broadcast %0 : f32[65536]\n";
        for i in 2..=n {
            t += &format!("  %{i} = add %{}, %1 : f32[65536]\n", i - 1);
        }
        let outs: Vec<String> = (1..=n).map(|i| format!("%{i}")).collect();
        t + &format!("  return {}\n}}\n", outs.join(", "))
    };
    rt().block_on(async {
        let (mut c, bearer) = raw(server.addr(), "t").await;
        let session = open(&mut c, &bearer).await;
        let e = load_text(&mut c, &bearer, &session, &chain(6))
            .await
            .expect_err("1.5 MiB of buffers");
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        assert!(e.message().contains("bytes of buffers per run"), "{e:?}");
        let key = load_text(&mut c, &bearer, &session, &chain(3))
            .await
            .expect("768 KiB of buffers");
        let x = c
            .upload(authed(
                &bearer,
                tokio_stream::iter(vec![proto::UploadChunk {
                    session: session.clone(),
                    ty: Some(proto::TensorType {
                        dtype: "f32".into(),
                        shape: vec![1],
                    }),
                    data: Bytes::from(2f32.to_le_bytes().to_vec()),
                }]),
            ))
            .await
            .expect("x")
            .into_inner()
            .id;
        let launch = |params: Vec<proto::Lit>| proto::LaunchRequest {
            session: session.clone(),
            key: Bytes::copy_from_slice(&key),
            inputs: vec![proto::Arg {
                value: Some(arg::Value::Tensor(x)),
            }],
            params,
        };
        let held = upload_bytes(&mut c, &bearer, &session, 512 << 10)
            .await
            .expect("512 KiB");
        let e = c
            .launch(authed(&bearer, launch(vec![])))
            .await
            .expect_err("768 KiB of buffers beside 512 KiB held");
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        assert!(e.message().contains("over all sessions"), "{e:?}");
        c.free(authed(
            &bearer,
            proto::FreeRequest {
                session: session.clone(),
                ids: vec![held],
            },
        ))
        .await
        .expect("free");
        let outs = c
            .launch(authed(&bearer, launch(vec![])))
            .await
            .expect("the launch fits now")
            .into_inner()
            .outputs;
        assert_eq!(outs.len(), 3);
        // A program taking an f32 param, given an int.
        let text = "graph {\n  %0 = input 0 : f32[1]\n  %1 = param 0 : f32[]\n  %2 = broadcast %1 : f32[1]\n  %3 = add %0, %2 : f32[1]\n  return %3\n}\n";
        let key2 = load_text(&mut c, &bearer, &session, text)
            .await
            .expect("a program with a param");
        let mut bad = launch(vec![wire::lit_to_proto(Lit::Int(5))]);
        bad.key = Bytes::copy_from_slice(&key2);
        let e = c
            .launch(authed(&bearer, bad.clone()))
            .await
            .expect_err("an int for an f32 param");
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        bad.params = vec![wire::lit_to_proto(Lit::Float(0.5))];
        c.launch(authed(&bearer, bad)).await.expect("a float param");
    });
}
