//! `npy`: the `.npy` reader; an array it reads must write and read back
//! the same.

use super::{sig, Target};
use tilejit_device::npy::{read, write, NpyArray};
use tilejit_ir::DType;

pub const TARGET: Target = Target {
    name: "npy",
    about: ".npy reader and its write/read round trip",
    seeds,
    run,
    dict: &[
        "'descr'",
        "'fortran_order'",
        "'shape'",
        "<f4",
        "<f8",
        "<f2",
        "<i4",
        "<i8",
        "|b1",
        "<u2",
        ">f4",
        "True",
        "False",
        "()",
        "(0,)",
        "(1,)",
        "(2, 3)",
        "{",
        "}",
        ",",
        ":",
    ],
};

/// Arrays as the code writes them, of every dtype and of ranks 0 to 3,
/// plus version 2 and 3 headers and a header in NumPy's own spacing.
fn seeds() -> Vec<Vec<u8>> {
    let shapes: [&[u64]; 5] = [&[], &[3], &[2, 3], &[0], &[1, 2, 1]];
    let mut out = Vec::new();
    for (i, d) in DType::ALL.into_iter().enumerate() {
        let shape = shapes[i % shapes.len()].to_vec();
        let n: u64 = shape.iter().product();
        let data = (0..n * d.size_bytes() as u64).map(|b| b as u8).collect();
        out.push(write(&NpyArray {
            dtype: d,
            shape,
            data,
        }));
    }
    let v1 = write(&NpyArray {
        dtype: DType::F32,
        shape: vec![2],
        data: vec![0, 0, 128, 63, 0, 0, 0, 64],
    });
    for version in [2u8, 3] {
        let header = &v1[10..];
        let mut v = b"\x93NUMPY".to_vec();
        v.extend_from_slice(&[version, 0]);
        let hlen = (header.len() - 8) as u32;
        v.extend_from_slice(&hlen.to_le_bytes());
        v.extend_from_slice(header);
        out.push(v);
    }
    let h = "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 1), }";
    let mut v = b"\x93NUMPY\x01\x00".to_vec();
    v.extend_from_slice(&((h.len() + 1) as u16).to_le_bytes());
    v.extend_from_slice(h.as_bytes());
    v.push(b'\n');
    v.extend_from_slice(&[
        1, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255,
    ]);
    out.push(v);
    out
}

fn run(input: &[u8]) -> Result<String, String> {
    let a = match read(input) {
        Ok(a) => a,
        Err(e) => return Ok(sig("read", &e)),
    };
    let back = read(&write(&a)).map_err(|e| format!("a written array does not read: {e}"))?;
    if back != a {
        return Err(format!("write -> read changed {:?} {:?}", a.dtype, a.shape));
    }
    Ok(format!("read {} rank {}", a.dtype, a.shape.len()))
}
