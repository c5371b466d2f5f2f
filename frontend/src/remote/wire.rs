//! What crosses the wire and how: tensor types, element bytes, scalars,
//! content keys and errors, each converted one way here so the client and
//! the server cannot disagree.

use super::proto;
use crate::error::Error;
use prost::bytes::Bytes;
use sha2::{Digest, Sha256};
use tilejit_ir::{Array, Buffer, DType, ErrorKind, Lit, Shape, TensorType};
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

/// Metadata that carries an error's tilejit code (1-8) across, so a shape
/// error on the server is a shape error on the client.
pub(crate) const KIND_HEADER: &str = "tilejit-error-code";

/// The chunk size for tensor data and program text (1 MiB): large enough
/// that per-message cost vanishes, small enough that no message nears
/// gRPC's limits.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// The largest gRPC message either side accepts: one chunk plus headroom.
/// Everything that can grow (tensor data, program text) is streamed.
pub(crate) const MAX_MESSAGE: usize = CHUNK_BYTES + (64 << 10);

/// The largest tensor sent by value inside a call (a literal).
pub(crate) const MAX_INLINE: usize = 64 << 10;

/// The most bytes of values one request carries in all (the rest of the
/// message bound is headroom for ids, scalars and framing).
pub(crate) const INLINE_BUDGET: usize = CHUNK_BYTES / 2;

pub(crate) fn ty_to_proto(ty: &TensorType) -> proto::TensorType {
    proto::TensorType {
        dtype: ty.dtype.name().to_string(),
        shape: ty.shape.dims().iter().map(|&d| d as u64).collect(),
    }
}

/// A tensor type from the wire, and its size in bytes; an error (for
/// `Status::invalid_argument`) names what is wrong.
pub(crate) fn ty_from_proto(ty: Option<&proto::TensorType>) -> Result<(TensorType, u64), String> {
    let ty = ty.ok_or("no tensor type")?;
    let dtype =
        DType::from_name(&ty.dtype).ok_or_else(|| format!("unknown dtype `{}`", ty.dtype))?;
    let dims = ty
        .shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("dim {d} is too large")))
        .collect::<Result<Vec<_>, _>>()?;
    let shape = Shape::new(&dims).map_err(|e| e.to_string())?;
    let bytes = shape
        .checked_numel()
        .and_then(|n| n.checked_mul(dtype.size_bytes()))
        .and_then(|b| u64::try_from(b).ok())
        .ok_or_else(|| format!("a tensor of shape {dims:?} overflows"))?;
    Ok((TensorType::new(dtype, shape), bytes))
}

/// An array's elements as little-endian bytes (one copy).
pub(crate) fn array_bytes(a: &Array) -> Result<Bytes, String> {
    a.buffer()
        .to_le_bytes()
        .map(Bytes::from)
        .map_err(|e| e.to_string())
}

pub(crate) fn array_from_bytes(ty: &TensorType, bytes: &[u8]) -> Result<Array, String> {
    let buffer = Buffer::from_le_bytes(ty.dtype, bytes).map_err(|e| e.to_string())?;
    Array::new(ty.shape, buffer).map_err(|e| e.to_string())
}

/// An array's bytes in chunks of about `size`, each encoded only when the
/// stream asks for it: a copy never stages the whole tensor. Always at
/// least one chunk (empty for an empty array), so a stream has a first
/// message.
pub(crate) fn encode_chunks(a: Array, size: usize) -> impl Iterator<Item = Result<Bytes, String>> {
    let n = a.buffer().len();
    let per = (size / a.dtype().size_bytes()).max(1);
    let starts = (0..n.max(1)).step_by(per);
    starts.map(move |at| {
        a.buffer()
            .le_bytes_of(at.min(n)..(at + per).min(n))
            .map(Bytes::from)
            .map_err(|e| e.to_string())
    })
}

/// A tensor arriving in chunks of any size, decoded as it comes into its
/// final buffer (elements split across chunks wait in `carry`), never
/// past its declared size.
pub(crate) struct Decoder {
    ty: TensorType,
    expected: u64,
    received: u64,
    buffer: Buffer,
    carry: Vec<u8>,
}

impl Decoder {
    /// Room is reserved for at most 64 MiB up front; beyond that the
    /// buffer grows as bytes actually arrive.
    pub(crate) fn new(ty: TensorType, expected: u64) -> Result<Decoder, String> {
        let elems = (expected.min(64 << 20) as usize) / ty.dtype.size_bytes();
        Ok(Decoder {
            ty,
            expected,
            received: 0,
            buffer: Buffer::with_capacity(ty.dtype, elems).map_err(|e| e.to_string())?,
            carry: Vec::new(),
        })
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.received += bytes.len() as u64;
        if self.received > self.expected {
            return Err(format!(
                "more than the {} bytes of a {} tensor",
                self.expected, self.ty
            ));
        }
        let size = self.ty.dtype.size_bytes();
        let mut rest = bytes;
        if !self.carry.is_empty() {
            let take = (size - self.carry.len()).min(rest.len());
            self.carry.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.carry.len() < size {
                return Ok(());
            }
            self.buffer
                .extend_from_le_bytes(&self.carry)
                .map_err(|e| e.to_string())?;
            self.carry.clear();
        }
        let whole = rest.len() - rest.len() % size;
        self.buffer
            .extend_from_le_bytes(&rest[..whole])
            .map_err(|e| e.to_string())?;
        self.carry.extend_from_slice(&rest[whole..]);
        Ok(())
    }

    pub(crate) fn finish(self) -> Result<Array, String> {
        if self.received != self.expected {
            return Err(format!(
                "{} of the {} bytes of a {} tensor",
                self.received, self.expected, self.ty
            ));
        }
        Array::new(self.ty.shape, self.buffer).map_err(|e| e.to_string())
    }
}

/// `bytes` cut into chunks of at most `size` (one empty chunk for none, so
/// a stream always has a first message).
pub(crate) fn chunks(bytes: Bytes, size: usize) -> Vec<Bytes> {
    if bytes.is_empty() {
        return vec![bytes];
    }
    (0..bytes.len())
        .step_by(size.max(1))
        .map(|at| bytes.slice(at..(at + size).min(bytes.len())))
        .collect()
}

pub(crate) fn inline(a: &Array) -> Result<proto::InlineTensor, String> {
    Ok(proto::InlineTensor {
        ty: Some(ty_to_proto(&a.ty())),
        data: array_bytes(a)?,
    })
}

pub(crate) fn from_inline(t: &proto::InlineTensor) -> Result<Array, String> {
    let (ty, bytes) = ty_from_proto(t.ty.as_ref())?;
    if bytes as usize != t.data.len() || t.data.len() > MAX_INLINE {
        return Err(format!(
            "an inline tensor of type {ty} has {} bytes (expected {bytes}, at most {MAX_INLINE})",
            t.data.len()
        ));
    }
    array_from_bytes(&ty, &t.data)
}

pub(crate) fn lit_to_proto(l: Lit) -> proto::Lit {
    use proto::lit::Value;
    proto::Lit {
        value: Some(match l {
            Lit::Float(v) => Value::Float(v),
            Lit::Int(v) => Value::Int(v),
            Lit::Bool(v) => Value::Bool(v),
        }),
    }
}

pub(crate) fn lit_from_proto(l: &proto::Lit) -> Result<Lit, String> {
    use proto::lit::Value;
    match l.value {
        Some(Value::Float(v)) => Ok(Lit::Float(v)),
        Some(Value::Int(v)) => Ok(Lit::Int(v)),
        Some(Value::Bool(v)) => Ok(Lit::Bool(v)),
        None => Err("a parameter with no value".into()),
    }
}

/// The content key of a program: SHA-256 over the protocol, tilejit's
/// version and the SHA-256 of the graph's text form (which holds its
/// constants). The server recomputes it from the text it receives, so no
/// client can file a program under another's key.
pub(crate) fn content_key(text: &str) -> [u8; 32] {
    key_of_digest(&Sha256::digest(text.as_bytes()).into())
}

/// [`content_key`] from the text's SHA-256.
pub(crate) fn key_of_digest(digest: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"tilejit-remote-v1\0");
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    h.update(b"\0");
    h.update(digest);
    h.finalize().into()
}

/// A tilejit error as a gRPC status: the message is the error's text (it
/// names the op and the server-side line), the code travels in metadata.
pub(crate) fn status_from_error(e: &Error) -> Status {
    let code = match e.kind() {
        ErrorKind::BadArgument | ErrorKind::Shape | ErrorKind::DType => Code::InvalidArgument,
        ErrorKind::Unsupported => Code::Unimplemented,
        ErrorKind::Cancelled => Code::Cancelled,
        ErrorKind::Device | ErrorKind::Internal | ErrorKind::Panic => Code::Internal,
    };
    with_kind(Status::new(code, e.to_string()), e.kind())
}

pub(crate) fn with_kind(mut s: Status, kind: ErrorKind) -> Status {
    s.metadata_mut()
        .insert(KIND_HEADER, MetadataValue::from(kind.code()));
    s
}

/// The tilejit category of a status: the server's code when it sent one,
/// else from the gRPC code (a lost connection is a device error).
pub(crate) fn kind_of(s: &Status) -> ErrorKind {
    let sent = s
        .metadata()
        .get(KIND_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u32>().ok())
        .and_then(kind_from_code);
    sent.unwrap_or(match s.code() {
        Code::InvalidArgument
        | Code::Unauthenticated
        | Code::PermissionDenied
        | Code::NotFound
        | Code::FailedPrecondition
        | Code::OutOfRange => ErrorKind::BadArgument,
        Code::Unimplemented => ErrorKind::Unsupported,
        // A cancel tilejit meant carries its kind; a bare one is the
        // transport's (hyper reports a connection closed mid-call so,
        // depending on timing): a lost server, E5 like the others.
        _ => ErrorKind::Device,
    })
}

fn kind_from_code(code: u32) -> Option<ErrorKind> {
    Some(match code {
        1 => ErrorKind::BadArgument,
        2 => ErrorKind::Shape,
        3 => ErrorKind::DType,
        4 => ErrorKind::Unsupported,
        5 => ErrorKind::Device,
        6 => ErrorKind::Internal,
        7 => ErrorKind::Panic,
        8 => ErrorKind::Cancelled,
        _ => return None,
    })
}

/// An error and its causes, on one line (tonic's transport error says
/// only "transport error"; the cause is what helps).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        text = format!("{text}: {s}");
        cur = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_crosses_bit_exact() {
        for dtype in DType::ALL {
            let lits: Vec<Lit> = (0..7)
                .map(|i| match dtype {
                    DType::Bool => Lit::Bool(i % 2 == 1),
                    d if d.is_float() => Lit::Float(i as f64 * -1.25),
                    _ => Lit::Int(i - 3),
                })
                .collect();
            let a = Array::new(
                Shape::new(&[7]).expect("shape"),
                Buffer::from_lits(dtype, lits.into_iter()).expect("buffer"),
            )
            .expect("array");
            let (ty, n) = ty_from_proto(Some(&ty_to_proto(&a.ty()))).expect("type");
            let bytes = array_bytes(&a).expect("bytes");
            assert_eq!(n as usize, bytes.len());
            let back = array_from_bytes(&ty, &bytes).expect("back");
            assert_eq!(
                back.buffer().to_le_bytes().ok(),
                a.buffer().to_le_bytes().ok()
            );
        }
    }

    #[test]
    fn chunks_cover_the_bytes_in_order() {
        let b = Bytes::from((0..=255u8).cycle().take(1000).collect::<Vec<_>>());
        let c = chunks(b.clone(), 300);
        assert_eq!(
            c.iter().map(Bytes::len).collect::<Vec<_>>(),
            [300, 300, 300, 100]
        );
        assert_eq!(c.concat(), b.to_vec());
        assert_eq!(chunks(Bytes::new(), 300).len(), 1);
    }

    #[test]
    fn chunked_encoding_decodes_at_any_cut() {
        let a = Array::from_vec(
            (0..1001)
                .map(|i| i as f64 * 0.5 - 3.0)
                .collect::<Vec<f64>>(),
            &[7, 143],
        )
        .expect("array");
        let whole = a.buffer().to_le_bytes().expect("bytes");
        for size in [1usize, 5, 8, 13, 4096, 1 << 20] {
            let pieces: Vec<Bytes> = encode_chunks(a.clone(), size)
                .collect::<Result<_, _>>()
                .expect("encode");
            assert_eq!(pieces.concat(), whole, "encoded at {size}");
            // Decoded from cuts that split elements.
            let mut d = Decoder::new(a.ty(), whole.len() as u64).expect("decoder");
            for piece in whole.chunks(size.max(3) - 2) {
                d.push(piece).expect("push");
            }
            let back = d.finish().expect("finish");
            assert_eq!(back.buffer().to_le_bytes().expect("bytes"), whole);
        }
        let mut d = Decoder::new(a.ty(), 16).expect("decoder");
        assert!(d.push(&[0; 17]).is_err());
        let mut d = Decoder::new(a.ty(), 16).expect("decoder");
        d.push(&[0; 12]).expect("push");
        assert!(d.finish().expect_err("short").contains("12 of the 16"));
        let empty = Array::from_vec(Vec::<f32>::new(), &[0]).expect("empty");
        assert_eq!(encode_chunks(empty, 64).count(), 1);
    }

    #[test]
    fn bad_types_are_named() {
        let bad = proto::TensorType {
            dtype: "f33".into(),
            shape: vec![2],
        };
        assert!(ty_from_proto(Some(&bad)).expect_err("f33").contains("f33"));
        let huge = proto::TensorType {
            dtype: "f64".into(),
            shape: vec![u64::MAX / 2, 4],
        };
        assert!(ty_from_proto(Some(&huge)).is_err());
        assert!(ty_from_proto(None).is_err());
    }

    #[test]
    fn error_codes_survive_the_status() {
        for code in 1..=8 {
            let kind = kind_from_code(code).expect("kind");
            let s = with_kind(Status::internal("x"), kind);
            assert_eq!(kind_of(&s), kind);
        }
        // Without the server's kind: the transport's, a lost server (E5),
        // whichever code hyper reports a closed connection with.
        for s in [
            Status::unavailable("gone"),
            Status::cancelled("operation was canceled: connection closed"),
            Status::unknown("transport error"),
        ] {
            assert_eq!(kind_of(&s), ErrorKind::Device, "{s:?}");
        }
        let s = with_kind(Status::cancelled("stopped"), ErrorKind::Cancelled);
        assert_eq!(kind_of(&s), ErrorKind::Cancelled);
    }
}
