//! Reading and writing NumPy `.npy` files (format versions 1-3, C order,
//! little endian) as raw bytes plus dtype and shape: how the CLI feeds a
//! simulated core's GM arguments and saves its outputs. Every malformed
//! file is an error naming what was wrong; nothing here panics or trusts a
//! length it has not checked.

use tilejit_ir::DType;

/// An array as bytes: dtype, shape, little-endian C-order data.
#[derive(Clone, Debug, PartialEq)]
pub struct NpyArray {
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// `numel * dtype.size_bytes()` bytes.
    pub data: Vec<u8>,
}

const MAGIC: &[u8] = b"\x93NUMPY";

fn descr(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::F16 => "<f2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::Bool => "|b1",
        DType::U8 => "|u1",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::BF16 => return None,
    })
}

/// Serialises an array (bf16 is written as its raw bits with descr `<u2`,
/// since NumPy has no bf16; so is u16, which [`read`] gives back as bf16).
pub fn write(a: &NpyArray) -> Vec<u8> {
    let d = descr(a.dtype).unwrap_or("<u2");
    let dims: Vec<String> = a.shape.iter().map(u64::to_string).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {shape}, }}");
    // Pad so that magic + version + length + header + '\n' is a multiple of 64.
    let total = MAGIC.len() + 2 + 2 + header.len() + 1;
    header.push_str(&" ".repeat(total.next_multiple_of(64) - total));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + a.data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&a.data);
    out
}

/// Parses a `.npy` file.
pub fn read(bytes: &[u8]) -> Result<NpyArray, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not a .npy file (bad magic)".into());
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err("truncated header".into());
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let header = bytes
        .get(start..start.saturating_add(len))
        .ok_or("header runs past the end of the file")?;
    let header = std::str::from_utf8(header).map_err(|_| "header is not text")?;
    let d = field(header, "descr")?;
    let d = d.trim_matches(|c| c == '\'' || c == '"');
    let dtype = match d {
        "<f4" => DType::F32,
        "<f8" => DType::F64,
        "<f2" => DType::F16,
        "<i4" => DType::I32,
        "<i8" => DType::I64,
        "|b1" => DType::Bool,
        "|u1" => DType::U8,
        "|i1" => DType::I8,
        "<i2" => DType::I16,
        "<u4" => DType::U32,
        "<u8" => DType::U64,
        // tilejit's bf16 bits (u16 is written as `<u2` too, and reads
        // back as bf16: a caller that wants u16 reinterprets the bytes).
        "<u2" => DType::BF16,
        other => {
            return Err(format!(
                "unsupported dtype descr `{other}` \
                 (f4 f8 f2 i4 i8 b1 u1 i1 i2 u2 u4 u8, little endian)"
            ))
        }
    };
    if field(header, "fortran_order")? != "False" {
        return Err("Fortran-order arrays are not supported".into());
    }
    let shape_text = field(header, "shape")?;
    let inner = shape_text
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("bad shape `{shape_text}`"))?;
    let shape: Vec<u64> = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>().map_err(|_| format!("bad dimension `{s}`")))
        .collect::<Result<_, _>>()?;
    if shape.len() > 8 {
        return Err(format!("rank {} > 8", shape.len()));
    }
    let numel = shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .ok_or("shape overflows")?;
    let want = numel
        .checked_mul(dtype.size_bytes() as u64)
        .ok_or("shape overflows")?;
    let data = &bytes[start + len..];
    if data.len() as u64 != want {
        return Err(format!(
            "shape {shape:?} of {dtype} needs {want} data bytes, the file has {}",
            data.len()
        ));
    }
    Ok(NpyArray {
        dtype,
        shape,
        data: data.to_vec(),
    })
}

/// The text of `'key': VALUE` in a header dict (VALUE up to the next
/// top-level comma or closing brace).
fn field<'a>(header: &'a str, key: &str) -> Result<&'a str, String> {
    let pat = format!("'{key}':");
    let at = header
        .find(&pat)
        .ok_or_else(|| format!("header has no `{key}`"))?
        + pat.len();
    let rest = header[at..].trim_start();
    let mut depth = 0i32;
    for (i, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' | '}' if depth == 0 => return Ok(rest[..i].trim()),
            _ => {}
        }
    }
    Err(format!("header's `{key}` is not terminated"))
}
