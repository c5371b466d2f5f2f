//! Det, TensorScatter and GatherND with batch dims: small models built
//! here, against values worked out by hand (each case says how), on every
//! backend; bad indices and attributes are errors naming the node.

use crate::onnx::{onnx_err, MODES};
use tilejit::onnx;
use tilejit::{with_mode, ErrorKind, Tensor};
use tilejit_testkit::onnx::{self as b, D};

fn one_node(
    op: &str,
    opset: i64,
    inputs: &[(&str, i32, &[usize])],
    attrs: Vec<b::proto::AttributeProto>,
    inits: Vec<b::proto::TensorProto>,
) -> Vec<u8> {
    let mut all: Vec<String> = inputs.iter().map(|i| i.0.to_string()).collect();
    for t in &inits {
        if !all.contains(&t.name) {
            all.push(t.name.clone());
        }
    }
    let all: Vec<&str> = all.iter().map(|s| s.as_str()).collect();
    let values = inputs
        .iter()
        .map(|(n, e, dims)| {
            let d: Vec<D> = dims.iter().map(|&x| D::N(x as i64)).collect();
            b::value(n, *e, &d)
        })
        .collect();
    let elem = inputs.first().map_or(b::FLOAT, |i| i.1);
    b::encode(&b::model(
        opset,
        vec![b::node(op, "n", &all, &["y"], attrs)],
        values,
        vec![b::value("y", elem, &[])],
        inits,
    ))
}

fn run(bytes: &[u8], inputs: &[(&str, &Tensor)]) -> Vec<tilejit::Result<Tensor>> {
    let model = onnx::from_bytes(bytes).unwrap();
    MODES
        .iter()
        .map(|&mode| with_mode(mode, || model.run(inputs)).map(|o| o.into_iter().next().unwrap().1))
        .collect()
}

fn f32s(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

/// Determinants by cofactor expansion (or a permutation's sign times its
/// entries): [[2,-1,0],[-1,2,-1],[0,-1,2]] is 2*3 - 1*2 = 4; the
/// anti-diagonal permutation is one swap, -1; [[1,2,3],[4,5,6],[7,8,10]]
/// is 1*2 - 2*(-2) + 3*(-3) = -3; [[1,2],[2,4]] is singular, 0; the 4x4
/// with entries 2, 3, 4, 5 off the diagonal in pairs is two swaps, +120
/// (each needs a pivot from below: a zero leads its column).
#[test]
fn det_matches_cofactor_expansion() {
    let cases: Vec<(Vec<f32>, Vec<usize>, Vec<f32>)> = vec![
        (vec![0., 1., 2., 3.], vec![2, 2], vec![-2.]),
        (
            vec![2., -1., 0., -1., 2., -1., 0., -1., 2.],
            vec![3, 3],
            vec![4.],
        ),
        (
            vec![
                0., 0., 1., 0., 1., 0., 1., 0., 0., //
                1., 2., 3., 4., 5., 6., 7., 8., 10.,
            ],
            vec![2, 3, 3],
            vec![-1., -3.],
        ),
        (vec![1., 2., 2., 4.], vec![1, 1, 2, 2], vec![0.]),
        (
            vec![
                0., 2., 0., 0., 3., 0., 0., 0., 0., 0., 0., 4., 0., 0., 5., 0.,
            ],
            vec![4, 4],
            vec![120.],
        ),
        (vec![-7.5], vec![1, 1], vec![-7.5]),
    ];
    // The 16x16 [-1, 2, -1] tridiagonal matrix has determinant n + 1 = 17
    // (expand along the first row: d(n) = 2 d(n-1) - d(n-2)); with its
    // rows reversed (120 swaps, even) still 17, each pivot now found below.
    let n: usize = 16;
    let tri: Vec<f32> = (0..n * n)
        .map(|e| match (e / n).abs_diff(e % n) {
            0 => 2.0,
            1 => -1.0,
            _ => 0.0,
        })
        .collect();
    let flipped: Vec<f32> = (0..n)
        .rev()
        .flat_map(|r| tri[r * n..][..n].to_vec())
        .collect();
    let cases = cases.into_iter().chain([
        (tri, vec![n, n], vec![17.0]),
        (flipped, vec![n, n], vec![17.0]),
    ]);
    for (data, shape, want) in cases {
        let bytes = one_node("Det", 11, &[("x", b::FLOAT, &shape)], vec![], vec![]);
        let x = f32s(&data, &shape);
        for got in run(&bytes, &[("x", &x)]) {
            let got = got.unwrap();
            assert_eq!(got.shape(), &shape[..shape.len() - 2]);
            let got = got.to_vec::<f32>().unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                    "{shape:?}: {g} vs {w}"
                );
            }
        }
    }
    // Beyond 64x64, and non-square, are errors naming the node.
    for shape in [vec![65, 65], vec![2, 3]] {
        let bytes = one_node("Det", 11, &[("x", b::FLOAT, &shape)], vec![], vec![]);
        let x = Tensor::zeros(&shape, tilejit::DType::F32);
        let model = onnx::from_bytes(&bytes).unwrap();
        let e = model.run(&[("x", &x)]).expect_err("an error");
        let (node, op, attr, _) = onnx_err(&e);
        assert_eq!((node, op, attr), ("n", "Det", "X"), "{e}");
    }
}

/// The cache is [2, 3, 2] of -1 (batch 2, 3 positions of 2), the update
/// rows 1..8 in order ([2, 2, 2]). Linear, write indices [1, 0]: batch 0
/// takes its rows at positions 1 and 2, batch 1 at 0 and 1. Circular,
/// [2, 4] (and [-1, 1]): batch 0 at 2 then 0 (wrapping), batch 1 at 1, 2.
#[test]
fn tensor_scatter_writes_where_the_spec_loop_does() {
    let past = Tensor::full(&[2, 3, 2], -1.0, tilejit::DType::F32);
    let upd = f32s(&[1., 2., 3., 4., 5., 6., 7., 8.], &[2, 2, 2]);
    let ins: &[(&str, i32, &[usize])] = &[
        ("past", b::FLOAT, &[2, 3, 2]),
        ("upd", b::FLOAT, &[2, 2, 2]),
        ("w", b::INT64, &[2]),
    ];
    let linear = one_node("TensorScatter", 24, ins, vec![], vec![]);
    let circular = one_node(
        "TensorScatter",
        24,
        ins,
        vec![b::string("mode", "circular")],
        vec![],
    );
    let cases: Vec<(&[u8], [i64; 2], [f32; 12])> = vec![
        (
            &linear,
            [1, 0],
            [-1., -1., 1., 2., 3., 4., 5., 6., 7., 8., -1., -1.],
        ),
        (
            &circular,
            [2, 4],
            [3., 4., -1., -1., 1., 2., -1., -1., 5., 6., 7., 8.],
        ),
        (
            &circular,
            [-1, 1],
            [3., 4., -1., -1., 1., 2., -1., -1., 5., 6., 7., 8.],
        ),
    ];
    for (bytes, w, want) in cases {
        let w = Tensor::from_vec(w.to_vec(), &[2]).unwrap();
        for got in run(bytes, &[("past", &past), ("upd", &upd), ("w", &w)]) {
            assert_eq!(got.unwrap().to_vec::<f32>().unwrap(), want, "{w:?}");
        }
    }
    // No write indices: both batches write at 0.
    let bytes = one_node("TensorScatter", 24, &ins[..2], vec![], vec![]);
    for got in run(&bytes, &[("past", &past), ("upd", &upd)]) {
        assert_eq!(
            got.unwrap().to_vec::<f32>().unwrap(),
            [1., 2., 3., 4., -1., -1., 5., 6., 7., 8., -1., -1.]
        );
    }
    // Axis 2 of a [1, 2, 3] cache of 0, one update column [9, 8] at 1.
    let bytes = one_node(
        "TensorScatter",
        24,
        &[
            ("past", b::FLOAT, &[1, 2, 3]),
            ("upd", b::FLOAT, &[1, 2, 1]),
            ("w", b::INT64, &[1]),
        ],
        vec![b::int("axis", 2)],
        vec![],
    );
    let zeros = Tensor::zeros(&[1, 2, 3], tilejit::DType::F32);
    let col = f32s(&[9., 8.], &[1, 2, 1]);
    let w = Tensor::from_vec(vec![1i64], &[1]).unwrap();
    for got in run(&bytes, &[("past", &zeros), ("upd", &col), ("w", &w)]) {
        assert_eq!(
            got.unwrap().to_vec::<f32>().unwrap(),
            [0., 9., 0., 0., 8., 0.]
        );
    }
    // Linear writes past the end: a traced index fails the run, a known
    // one the build, naming the node.
    let w = Tensor::from_vec(vec![2i64, 0], &[2]).unwrap();
    for got in run(&linear, &[("past", &past), ("upd", &upd), ("w", &w)]) {
        let e = got.expect_err("an out-of-range write");
        assert_eq!(e.kind(), ErrorKind::BadArgument, "{e}");
    }
    let known = one_node(
        "TensorScatter",
        24,
        &ins[..2],
        vec![],
        vec![b::i64s("w", &[2], &[0, -1])],
    );
    let e = onnx::from_bytes(&known)
        .unwrap()
        .run(&[("past", &past), ("upd", &upd)])
        .expect_err("a negative write index");
    assert_eq!(
        onnx_err(&e),
        (
            "n",
            "TensorScatter",
            "write_indices",
            ErrorKind::BadArgument
        ),
        "{e}"
    );
    // A mode it does not know is refused at load; axis 0 at the build.
    let bad = one_node(
        "TensorScatter",
        24,
        ins,
        vec![b::string("mode", "ring")],
        vec![],
    );
    let e = onnx::from_bytes(&bad).err().expect("a bad mode");
    assert_eq!(
        onnx_err(&e),
        ("n", "TensorScatter", "mode", ErrorKind::Unsupported),
        "{e}"
    );
    let bad = one_node("TensorScatter", 24, ins, vec![b::int("axis", 0)], vec![]);
    let w = Tensor::from_vec(vec![0i64, 0], &[2]).unwrap();
    let e = onnx::from_bytes(&bad)
        .unwrap()
        .run(&[("past", &past), ("upd", &upd), ("w", &w)])
        .expect_err("axis 0");
    assert_eq!(onnx_err(&e).2, "axis", "{e}");
}

/// data = arange(8) as [2, 2, 2]. batch_dims 1, indices [[1], [0]]:
/// data[0][1] = [2, 3] and data[1][0] = [4, 5]; indices [[[0, 1]],
/// [[1, -1]]]: data[0][0][1] = 1 and data[1][1][1] = 7.
#[test]
fn gather_nd_with_batch_dims_matches_hand_values() {
    let x = Tensor::from_vec((0..8).map(|v| v as f32).collect(), &[2, 2, 2]).unwrap();
    let attrs = || vec![b::int("batch_dims", 1)];
    // (indices, their shape, the output's shape, its values)
    type Case = (Vec<i64>, Vec<usize>, Vec<usize>, Vec<f32>);
    let cases: Vec<Case> = vec![
        (vec![1, 0], vec![2, 1], vec![2, 2], vec![2., 3., 4., 5.]),
        (vec![0, 1, 1, -1], vec![2, 1, 2], vec![2, 1], vec![1., 7.]),
    ];
    for (idx, ishape, oshape, want) in cases {
        let traced = one_node(
            "GatherND",
            13,
            &[("x", b::FLOAT, &[2, 2, 2]), ("i", b::INT64, &ishape)],
            attrs(),
            vec![],
        );
        let dims: Vec<i64> = ishape.iter().map(|&d| d as i64).collect();
        let known = one_node(
            "GatherND",
            13,
            &[("x", b::FLOAT, &[2, 2, 2])],
            attrs(),
            vec![b::i64s("i", &dims, &idx)],
        );
        let i = Tensor::from_vec(idx.clone(), &ishape).unwrap();
        let outs = run(&traced, &[("x", &x), ("i", &i)])
            .into_iter()
            .chain(run(&known, &[("x", &x)]));
        for got in outs {
            let got = got.unwrap();
            assert_eq!(got.shape(), oshape.as_slice());
            assert_eq!(got.to_vec::<f32>().unwrap(), want);
        }
    }
    // An index outside its axis is an error, even where the flattened
    // position would land inside the data ([0, 2] of a [2, 2] slice).
    let traced = one_node(
        "GatherND",
        13,
        &[("x", b::FLOAT, &[2, 2, 2]), ("i", b::INT64, &[1, 2])],
        vec![],
        vec![],
    );
    for bad in [[0i64, 2], [0, -3]] {
        let i = Tensor::from_vec(bad.to_vec(), &[1, 2]).unwrap();
        for got in run(&traced, &[("x", &x), ("i", &i)]) {
            let e = got.expect_err("an out-of-range index");
            assert_eq!(e.kind(), ErrorKind::BadArgument, "{e}");
        }
    }
    let known = one_node(
        "GatherND",
        13,
        &[("x", b::FLOAT, &[2, 2, 2])],
        vec![],
        vec![b::i64s("i", &[1, 2], &[0, 2])],
    );
    let e = onnx::from_bytes(&known)
        .unwrap()
        .run(&[("x", &x)])
        .expect_err("an out-of-range index");
    assert_eq!(
        onnx_err(&e),
        ("n", "GatherND", "indices", ErrorKind::BadArgument),
        "{e}"
    );
    // batch_dims must leave an index axis; negative is refused at load.
    let deep = one_node(
        "GatherND",
        13,
        &[("x", b::FLOAT, &[2, 2, 2]), ("i", b::INT64, &[2, 1])],
        vec![b::int("batch_dims", 2)],
        vec![],
    );
    let i = Tensor::from_vec(vec![0i64, 0], &[2, 1]).unwrap();
    let e = onnx::from_bytes(&deep)
        .unwrap()
        .run(&[("x", &x), ("i", &i)])
        .expect_err("batch_dims too deep");
    assert_eq!(onnx_err(&e).2, "batch_dims", "{e}");
    let neg = one_node(
        "GatherND",
        13,
        &[("x", b::FLOAT, &[2, 2, 2]), ("i", b::INT64, &[2, 1])],
        vec![b::int("batch_dims", -1)],
        vec![],
    );
    let e = onnx::from_bytes(&neg).err().expect("negative batch_dims");
    assert_eq!(
        onnx_err(&e),
        ("n", "GatherND", "batch_dims", ErrorKind::BadArgument),
        "{e}"
    );
}
