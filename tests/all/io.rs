//! `tilejit::io`: `.npy` and safetensors files, read back against bytes
//! written here by hand from each format's specification (not by the code
//! under test), every dtype round-tripped, and every bad file a clean
//! `Error::File` naming it.

use tilejit::io;
use tilejit::prelude::*;
use tilejit_tests::TempDir;

/// A version-1 `.npy` file as the NumPy format spec lays it out: magic,
/// version, header length, a dict padded with spaces to a multiple of 64
/// and ending in a newline, then the data.
fn npy_bytes(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

/// A safetensors file as its spec lays it out: u64 header length, JSON
/// header of name -> dtype, shape, data offsets, then the data.
fn safetensors_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

fn file_error(e: &tilejit::Error, path: &std::path::Path, what: &str) {
    match e {
        tilejit::Error::File { path: p, message } => {
            assert_eq!(p, path);
            let (m, w) = (message.to_lowercase(), what.to_lowercase());
            assert!(m.contains(&w), "{message:?} lacks {what:?}");
        }
        other => panic!("not a file error: {other}"),
    }
    assert_eq!(e.kind(), tilejit::ErrorKind::BadArgument);
}

#[test]
fn npy_files_written_by_hand_read_back() {
    let dir = TempDir::new("npy-hand");
    let p = dir.join("a.npy");
    let data: Vec<u8> = [1.5f32, -2.0, 0.25, 8.0, -0.0, 3.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    std::fs::write(&p, npy_bytes("<f4", "(2, 3)", &data)).unwrap();
    let t = io::read_npy(&p).unwrap();
    assert_eq!(t.shape(), [2, 3]);
    assert_eq!(t.dtype(), DType::F32);
    assert_eq!(
        t.to_vec::<f32>().unwrap(),
        [1.5, -2.0, 0.25, 8.0, -0.0, 3.0]
    );

    std::fs::write(&p, npy_bytes("<i8", "()", &(-7i64).to_le_bytes())).unwrap();
    let t = io::read_npy(&p).unwrap();
    assert_eq!((t.shape(), t.to_vec::<i64>().unwrap()), (&[][..], vec![-7]));

    std::fs::write(&p, npy_bytes("|b1", "(3,)", &[1, 0, 1])).unwrap();
    assert_eq!(
        io::read_npy(&p).unwrap().to_vec::<bool>().unwrap(),
        [true, false, true]
    );
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).to_vec::<f64>().unwrap()
}

#[test]
fn every_dtype_round_trips_through_npy_and_safetensors() {
    let dir = TempDir::new("roundtrip");
    let base = Tensor::from_vec(vec![0.5f32, -1.25, 3.0, 0.0, -0.0, 7.75], &[2, 3]).unwrap();
    let dtypes = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];
    let mut named = Vec::new();
    for (i, d) in dtypes.into_iter().enumerate() {
        let t = base.cast(d);
        let p = dir.join(format!("{d}.npy"));
        io::write_npy(&p, &t).unwrap();
        let back = io::read_npy(&p).unwrap();
        assert_eq!((back.dtype(), back.shape()), (d, &[2usize, 3][..]));
        assert_eq!(f64s(&back), f64s(&t), "{d}");
        named.push((format!("t{i}_{d}"), t));
    }
    // Empty and rank-0 tensors too.
    named.push(("empty".into(), Tensor::zeros(&[0, 4], DType::F32)));
    named.push(("scalar".into(), Tensor::scalar(2.5, DType::F64)));
    let p = dir.join("all.safetensors");
    let refs: Vec<(&str, &Tensor)> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
    io::save_safetensors(&p, &refs).unwrap();
    let back = io::load_safetensors(&p).unwrap();
    assert_eq!(back.len(), named.len());
    for (n, t) in &named {
        let b = &back[n];
        assert_eq!((b.dtype(), b.shape()), (t.dtype(), t.shape()), "{n}");
        assert_eq!(f64s(b), f64s(t), "{n}");
    }
}

#[test]
fn a_safetensors_file_written_by_hand_loads() {
    let dir = TempDir::new("st-hand");
    let p = dir.join("w.safetensors");
    let mut data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    data.extend(5i64.to_le_bytes());
    let header = r#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"n":{"dtype":"I64","shape":[1],"data_offsets":[16,24]}}"#;
    std::fs::write(&p, safetensors_bytes(header, &data)).unwrap();
    let m = io::load_safetensors(&p).unwrap();
    assert_eq!(m.keys().collect::<Vec<_>>(), ["n", "w"]);
    assert_eq!(m["w"].shape(), [2, 2]);
    assert_eq!(m["w"].to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(m["n"].to_vec::<i64>().unwrap(), [5]);
    // And a loaded weight computes like any tensor.
    let y = m["w"].matmul(&m["w"]).to_vec::<f32>().unwrap();
    assert_eq!(y, [7.0, 10.0, 15.0, 22.0]);
}

#[test]
fn bad_files_are_errors_naming_the_file() {
    let dir = TempDir::new("bad");
    let missing = dir.join("missing.npy");
    file_error(
        &io::read_npy(&missing).unwrap_err(),
        &missing,
        "No such file",
    );
    file_error(
        &io::load_safetensors(&missing).unwrap_err(),
        &missing,
        "No such file",
    );
    let d = dir.join("sub");
    std::fs::create_dir_all(&d).unwrap();
    file_error(&io::read_npy(&d).unwrap_err(), &d, "directory");

    let p = dir.join("x.npy");
    for (bytes, what) in [
        (Vec::new(), "bad magic"),
        (b"not numpy at all".to_vec(), "bad magic"),
        (npy_bytes("<f4", "(4,)", &[0; 8]), "bytes"),
        (npy_bytes("<c8", "(1,)", &[0; 8]), "unsupported dtype"),
        (npy_bytes("|b1", "(2,)", &[1, 7]), "not 0 or 1"),
        (
            npy_bytes("<f4", "(1, 2, 3, 4, 5, 6, 7, 8, 9)", &[]),
            "rank 9",
        ),
    ] {
        std::fs::write(&p, &bytes).unwrap();
        file_error(&io::read_npy(&p).unwrap_err(), &p, what);
    }

    let p = dir.join("x.safetensors");
    // f8: a safetensors dtype tilejit lacks (the integers it has).
    let f8_header = r#"{"q":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}"#;
    let good = safetensors_bytes(
        r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
        &[0; 8],
    );
    for (bytes, what) in [
        (Vec::new(), "Header"),
        (good[..good.len() - 3].to_vec(), "Metadata"),
        (safetensors_bytes("{not json", &[]), "Header"),
        (safetensors_bytes(f8_header, &[1, 2]), "F8_E4M3"),
        ((u64::MAX).to_le_bytes().to_vec(), "Header"),
    ] {
        std::fs::write(&p, &bytes).unwrap();
        file_error(&io::load_safetensors(&p).unwrap_err(), &p, what);
    }

    let t = Tensor::ones(&[2], DType::F32);
    let e = io::save_safetensors(&p, &[("a", &t), ("a", &t)]).unwrap_err();
    file_error(&e, &p, "given twice");
    let nowhere = dir.join("no/such/dir/w.npy");
    file_error(
        &io::write_npy(&nowhere, &t).unwrap_err(),
        &nowhere,
        "No such file",
    );
    // A failed write leaves no temporary file behind.
    let left: Vec<_> = std::fs::read_dir(&*dir).unwrap().collect();
    assert!(left.len() <= 3, "{left:?}");
}

/// Writers racing on one path: every reader sees one whole file.
#[test]
fn concurrent_writers_never_leave_half_a_file() {
    let dir = TempDir::new("race");
    let p = dir.join("w.safetensors");
    std::thread::scope(|s| {
        for i in 0..4usize {
            let p = p.clone();
            s.spawn(move || {
                let t = Tensor::full(&[1000 + i], i as f64, DType::F32);
                for _ in 0..10 {
                    io::save_safetensors(&p, &[("w", &t)]).unwrap();
                    let w = &io::load_safetensors(&p).unwrap()["w"];
                    let v = w.to_vec::<f32>().unwrap();
                    assert_eq!(v.len(), 1000 + v[0] as usize);
                    assert!(v.iter().all(|&x| x == v[0]));
                }
            });
        }
    });
}
