//! The crate's safe API, called as any safe caller may: a lying `dtype_of`,
//! a relabelled kernel, buffers of the wrong type or alignment, and bad
//! launches are errors, never accesses outside the storage lent or invalid
//! values written into it.

#![allow(clippy::unwrap_used)] // tests assert by unwrapping

use tilejit_codegen::host::{
    compile, listing, matmul_view_f32, matmul_view_f64, BufArg, CodegenOptions, KernelArgs,
    KernelCode, StreamStores,
};
use tilejit_codegen::CodegenError;
use tilejit_ir::kernel::{
    fuse, Access, BufId, Expr, ExprId, ExprNode, Kernel, KernelProgram, MatView, Stage,
};
use tilejit_ir::{BinaryOp, CmpOp, DType, Graph, Op, Shape, TensorType};

/// `y = x + z` over `d[n]`, fused into one flat kernel.
fn add_program(d: DType, n: usize) -> KernelProgram {
    let mut g = Graph::new();
    let ty = TensorType::new(d, Shape::new(&[n]).unwrap());
    let x = g.add(Op::Input { index: 0, ty }).unwrap();
    let z = g.add(Op::Input { index: 1, ty }).unwrap();
    let y = g.add(Op::Binary(BinaryOp::Add, x, z)).unwrap();
    g.outputs.push(y);
    let p = fuse(&g).unwrap();
    assert_eq!(p.kernels.len(), 1, "{p:?}");
    p
}

/// `y = x < z` over `f32[n]`: a kernel that writes bools.
fn less_program(n: usize) -> KernelProgram {
    let mut g = Graph::new();
    let ty = TensorType::new(DType::F32, Shape::new(&[n]).unwrap());
    let x = g.add(Op::Input { index: 0, ty }).unwrap();
    let z = g.add(Op::Input { index: 1, ty }).unwrap();
    let y = g.add(Op::Compare(CmpOp::Lt, x, z)).unwrap();
    g.outputs.push(y);
    fuse(&g).unwrap()
}

fn compile_honest(p: &KernelProgram, opts: CodegenOptions) -> KernelCode {
    let dtype_of = |b: BufId| p.buffers[b.0 as usize].ty.dtype;
    compile(&p.kernels[0], &dtype_of, opts).unwrap()
}

/// The output's local number and the two inputs' (in layout order).
fn roles(code: &KernelCode) -> (usize, [usize; 2]) {
    let w = &code.layout().written;
    let out = w.iter().position(|&w| w).unwrap();
    let ins: Vec<usize> = (0..w.len()).filter(|&i| i != out).collect();
    (out, [ins[0], ins[1]])
}

fn launch_err(r: Result<(), CodegenError>, what: &str) {
    let m = r.unwrap_err().to_string();
    assert!(m.contains(what), "{m} (wanted {what})");
}

#[test]
fn a_lying_dtype_of_is_an_error() {
    let p = add_program(DType::F64, 16);
    let k = &p.kernels[0];
    // f64 expressions over buffers said to be u8: the code would access 8
    // bytes where the bounds check counted one.
    let e = compile(k, &|_: BufId| DType::U8, CodegenOptions::default()).unwrap_err();
    assert!(matches!(e, CodegenError::Invalid { .. }), "{e}");
    // Only the output lies.
    let out = k.stored_buffers()[0];
    let dtype_of = |b: BufId| if b == out { DType::U8 } else { DType::F64 };
    let e = compile(k, &dtype_of, CodegenOptions::default()).unwrap_err();
    assert!(e.to_string().contains("stores a f64"), "{e}");
    // A `dtype_of` that answers differently each time it is asked cannot
    // make the checks and the code disagree: it is asked once per buffer.
    let calls = std::cell::Cell::new(0);
    let fickle = |_: BufId| {
        calls.set(calls.get() + 1);
        if calls.get() > 3 {
            DType::U8
        } else {
            DType::F64
        }
    };
    let code = compile(k, &fickle, CodegenOptions::default()).unwrap();
    assert_eq!(calls.get(), 3);
    assert_eq!(code.layout().elem_bytes, [8, 8, 8]);
    assert!(listing(k, &|_: BufId| DType::U8, CodegenOptions::default()).is_err());
}

#[test]
fn a_relabelled_kernel_is_an_error() {
    let p = add_program(DType::F32, 16);
    let dtype_of = |b: BufId| p.buffers[b.0 as usize].ty.dtype;
    compile(&p.kernels[0], &dtype_of, CodegenOptions::default()).unwrap();
    // Any one expression relabelled contradicts its buffer, operands or
    // users.
    for i in 0..p.kernels[0].exprs.len() {
        for d in [DType::F64, DType::U8, DType::Bool, DType::I64] {
            let mut k = p.kernels[0].clone();
            k.exprs[i].dtype = d;
            let e = compile(&k, &dtype_of, CodegenOptions::default()).unwrap_err();
            assert!(
                matches!(e, CodegenError::Invalid { .. }),
                "%{i} as {d}: {e}"
            );
        }
    }
    // Every expression relabelled alike still contradicts the buffers.
    let mut k = p.kernels[0].clone();
    for e in &mut k.exprs {
        e.dtype = DType::F64;
    }
    assert!(compile(&k, &dtype_of, CodegenOptions::default()).is_err());
    // Ids out of range are errors too, not panics.
    let mut k = p.kernels[0].clone();
    k.exprs.push(ExprNode {
        expr: Expr::Load(9),
        dtype: DType::F32,
    });
    assert!(compile(&k, &dtype_of, CodegenOptions::default()).is_err());
    let mut k = p.kernels[0].clone();
    k.domain.clear();
    assert!(compile(&k, &dtype_of, CodegenOptions::default()).is_err());
    // A param number that would need 2^32 args slots.
    let mut k = p.kernels[0].clone();
    k.exprs.push(ExprNode {
        expr: Expr::Param(u32::MAX),
        dtype: DType::F32,
    });
    assert!(compile(&k, &dtype_of, CodegenOptions::default()).is_err());
}

#[test]
fn buffers_of_another_type_are_refused() {
    for d in [DType::U8, DType::F32] {
        let p = add_program(d, 16);
        let code = compile_honest(&p, CodegenOptions::default());
        let k = &p.kernels[0];
        let args = code.layout().args(k, &[]);
        let checked = code.check_args(args.clone()).unwrap();
        let (out, [a, b]) = roles(&code);
        let (x8, x32) = (vec![107u8; 16], vec![107f32; 16]);
        let mut bools = vec![false; 16];
        let mut f64s = vec![0f64; 16];
        let input = || match d {
            DType::U8 => BufArg::read(&x8[..]),
            _ => BufArg::read(&x32[..]),
        };
        // A bool output: the kernel would leave bytes like 214 in bools.
        let mut bufs: Vec<BufArg<'_>> = (0..3).map(|_| BufArg::empty()).collect();
        bufs[a] = input();
        bufs[b] = input();
        bufs[out] = BufArg::write(&mut bools);
        launch_err(code.call(&mut bufs, &args, 0, 16), "holds bool");
        launch_err(code.call_checked(&mut bufs, &checked, 0, 16), "holds bool");
        launch_err(
            code.launch(&mut bufs, KernelArgs::Raw(&args), 16, 4, None),
            "holds bool",
        );
        drop(bufs);
        assert!(bools.iter().all(|&b| !b));
        // An output of wider elements than the code's.
        let mut bufs: Vec<BufArg<'_>> = (0..3).map(|_| BufArg::empty()).collect();
        bufs[a] = input();
        bufs[b] = input();
        bufs[out] = BufArg::write(&mut f64s);
        launch_err(
            code.launch(&mut bufs, KernelArgs::Checked(&checked), 16, 4, None),
            "holds f64",
        );
        drop(bufs);
        assert!(f64s.iter().all(|&v| v == 0.0));
    }
    // A bool input read as u8 is refused as well (bytes it carries into
    // an output are not checked).
    let p = add_program(DType::U8, 4);
    let code = compile_honest(&p, CodegenOptions::default());
    let args = code.layout().args(&p.kernels[0], &[]);
    let (out, [a, b]) = roles(&code);
    let (x, y) = ([true; 4], [1u8; 4]);
    let mut o = [0u8; 4];
    let mut bufs: Vec<BufArg<'_>> = (0..3).map(|_| BufArg::empty()).collect();
    bufs[a] = BufArg::read(&x);
    bufs[b] = BufArg::read(&y);
    bufs[out] = BufArg::write(&mut o);
    launch_err(code.call(&mut bufs, &args, 0, 4), "holds bool");
}

#[test]
fn bool_outputs_hold_only_true_and_false() {
    // The comparison kernel takes bool outputs.
    let p = less_program(8);
    let code = compile_honest(&p, CodegenOptions::default());
    let args = code.layout().args(&p.kernels[0], &[]);
    let (out, [a, b]) = roles(&code);
    let x: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let z = [3.5f32; 8];
    let mut o = [true; 8];
    let mut bufs: Vec<BufArg<'_>> = (0..3).map(|_| BufArg::empty()).collect();
    bufs[a] = BufArg::read(&x);
    bufs[b] = BufArg::read(&z);
    bufs[out] = BufArg::write(&mut o);
    code.call(&mut bufs, &args, 0, 8).unwrap();
    drop(bufs);
    // Which input is x depends on the layout; either way 0/1 bytes.
    assert!(o.iter().all(|&v| v as u8 <= 1), "{o:?}");
    assert_eq!(o.iter().filter(|&&v| v).count(), 4);
    // A bool param of any value is stored as 0 or 1.
    let k = Kernel {
        name: "param_bool".into(),
        domain: vec![4],
        loads: vec![],
        exprs: vec![ExprNode {
            expr: Expr::Param(0),
            dtype: DType::Bool,
        }],
        scratch: vec![],
        stages: vec![Stage::Store {
            access: Access {
                buf: BufId(0),
                strides: vec![1],
                offset: 0,
            },
            value: ExprId(0),
        }],
        matmul: None,
        ops: vec![],
    };
    let code = compile(&k, &|_: BufId| DType::Bool, CodegenOptions::default()).unwrap();
    let mut args = code.layout().args(&k, &[]);
    *args.last_mut().unwrap() = 107;
    let mut o = [false; 4];
    code.call(&mut [BufArg::write(&mut o)], &args, 0, 4)
        .unwrap();
    assert!(o.iter().all(|&v| v as u8 == 1), "{:?}", o.map(|v| v as u8));
}

#[test]
fn misaligned_buffers_are_refused() {
    let opts = CodegenOptions {
        stream_stores: StreamStores::Always,
        ..CodegenOptions::default()
    };
    let n = 4096;
    let p = add_program(DType::F32, n);
    for code in [
        compile_honest(&p, opts),
        compile_honest(&p, CodegenOptions::default()),
    ] {
        let args = code.layout().args(&p.kernels[0], &[]);
        let (out, [a, b]) = roles(&code);
        let x = vec![1.5f32; n];
        // A byte window one byte off: f32s at odd addresses.
        let mut bytes = vec![0u8; 4 * n + 1];
        let mut bufs: Vec<BufArg<'_>> = (0..3).map(|_| BufArg::empty()).collect();
        bufs[a] = BufArg::read(&x);
        bufs[b] = BufArg::read(&x);
        bufs[out] = BufArg::write(&mut bytes[1..]);
        launch_err(code.call(&mut bufs, &args, 0, n), "holds u8");
        launch_err(
            code.launch(&mut bufs, KernelArgs::Raw(&args), n, 256, None),
            "holds u8",
        );
        drop(bufs);
        assert!(bytes.iter().all(|&v| v == 0));
        // An f32 buffer split off its element boundaries.
        let mut whole = vec![0f32; n + 2];
        let pieces = BufArg::write(&mut whole).split(4 * n + 2);
        let mut bufs: Vec<BufArg<'_>> = (0..3).map(|_| BufArg::empty()).collect();
        bufs[a] = BufArg::read(&x);
        bufs[b] = BufArg::read(&x);
        let mut pieces = pieces.into_iter();
        let _first = pieces.next().unwrap();
        let second = pieces.next().unwrap();
        bufs[out] = second;
        launch_err(code.call(&mut bufs, &args, 0, 2), "not aligned");
        drop(bufs);
        // A window at element offset 1 (4-byte but not 16- or 64-byte
        // aligned) is an f32 slice like any other and runs, streaming or not.
        let mut o = vec![0f32; n + 1];
        let mut bufs: Vec<BufArg<'_>> = (0..3).map(|_| BufArg::empty()).collect();
        bufs[a] = BufArg::read(&x[..]);
        bufs[b] = BufArg::read(&x[..]);
        bufs[out] = BufArg::write(&mut o[1..]);
        code.launch(&mut bufs, KernelArgs::Raw(&args), n, 1024, None)
            .unwrap();
        drop(bufs);
        assert_eq!(o[0], 0.0);
        assert!(o[1..].iter().all(|&v| v == 3.0));
        // Inputs at element offset 1 too.
        let xs = vec![1.5f32; n + 1];
        let mut bufs: Vec<BufArg<'_>> = (0..3).map(|_| BufArg::empty()).collect();
        bufs[a] = BufArg::read(&xs[1..]);
        bufs[b] = BufArg::read(&xs[1..]);
        bufs[out] = BufArg::write(&mut o[..n]);
        code.call(&mut bufs, &args, 0, n).unwrap();
    }
}

/// Vector loads and stores through the kernel's buffers are not flagged
/// aligned: only element alignment is known, and on a CPU without AVX a
/// flagged one becomes an SSE instruction that faults on a slice at
/// element offset 1.
#[test]
fn buffer_accesses_are_not_flagged_aligned() {
    let p = add_program(DType::F32, 4096);
    let dtype_of = |b: BufId| p.buffers[b.0 as usize].ty.dtype;
    for stream_stores in [StreamStores::Off, StreamStores::Always] {
        let opts = CodegenOptions {
            stream_stores,
            ..CodegenOptions::default()
        };
        let clif = listing(&p.kernels[0], &dtype_of, opts).unwrap().clif;
        let vector: Vec<&str> = clif
            .lines()
            .filter(|l| l.contains("f32x4") && (l.contains("load") || l.contains("store")))
            .collect();
        assert!(!vector.is_empty(), "{clif}");
        for l in vector {
            assert!(!l.contains("aligned"), "{l}\n{clif}");
        }
    }
}

#[test]
fn bad_launches_are_errors_before_anything_runs() {
    let n = 64;
    let p = add_program(DType::F32, n);
    let code = compile_honest(&p, CodegenOptions::default());
    let other = compile_honest(&p, CodegenOptions::default());
    let k = &p.kernels[0];
    let args = code.layout().args(k, &[]);
    let theirs = other.check_args(args.clone()).unwrap();
    let (out, [a, b]) = roles(&code);
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut o = vec![7f32; n];
    let mut short = vec![7f32; n - 1];
    {
        let mut bufs: Vec<BufArg<'_>> = (0..3).map(|_| BufArg::empty()).collect();
        bufs[a] = BufArg::read(&x);
        bufs[b] = BufArg::read(&x);
        bufs[out] = BufArg::write(&mut o);
        // Another kernel's checked arguments, one chunk or several.
        for chunk in [n, 8] {
            launch_err(
                code.launch(&mut bufs, KernelArgs::Checked(&theirs), n, chunk, None),
                "another kernel",
            );
        }
        // No args at all.
        for chunk in [n, 8] {
            launch_err(
                code.launch(&mut bufs, KernelArgs::Raw(&[]), n, chunk, None),
                "args given",
            );
        }
        // More units than the domain has, up to absurd counts: refused
        // before a chunk list or anything else is allocated.
        for units in [n + 1, 1 << 40, 1 << 62, usize::MAX] {
            for chunk in [1, 8, 1 << 20] {
                launch_err(
                    code.launch(&mut bufs, KernelArgs::Raw(&args), units, chunk, None),
                    "exceeds",
                );
            }
        }
        // Too few or too many buffers.
        launch_err(
            code.launch(&mut bufs[..2], KernelArgs::Raw(&args), n, 8, None),
            "buffers given",
        );
    }
    assert!(o.iter().all(|&v| v == 7.0), "nothing ran");
    // An input's inner stride other than the 1 its code was compiled
    // for: with 0 the bounds check would count one element of `x`
    // where the code reads 64 (a one-element buffer would pass).
    let one = [1f32];
    for stride in [0, 2, 3] {
        let mut lying = args.clone();
        lying[code.layout().stride_slot(0)] = stride;
        let mut bufs: Vec<BufArg<'_>> = (0..3).map(|_| BufArg::empty()).collect();
        bufs[a] = BufArg::read(&one);
        bufs[b] = BufArg::read(&one);
        bufs[out] = BufArg::write(&mut o);
        launch_err(
            code.launch(&mut bufs, KernelArgs::Raw(&lying), n, 8, None),
            "compiled for 1",
        );
        assert!(code.check_args(lying).is_err(), "stride {stride}");
    }
    assert!(o.iter().all(|&v| v == 7.0), "nothing ran");
    // An output one element short: no chunk runs, not even those inside it.
    let checked = code.check_args(args.clone()).unwrap();
    for args in [KernelArgs::Raw(&args), KernelArgs::Checked(&checked)] {
        let mut bufs: Vec<BufArg<'_>> = (0..3).map(|_| BufArg::empty()).collect();
        bufs[a] = BufArg::read(&x);
        bufs[b] = BufArg::read(&x);
        bufs[out] = BufArg::write(&mut short);
        for chunk in [1, 8, n] {
            let e = code
                .launch(&mut bufs, args, n, chunk, None)
                .unwrap_err()
                .to_string();
            assert!(e.contains("reaches"), "{e}");
        }
        drop(bufs);
        assert!(short.iter().all(|&v| v == 7.0), "nothing ran");
    }
    // The right launch runs, in chunks.
    let mut bufs: Vec<BufArg<'_>> = (0..3).map(|_| BufArg::empty()).collect();
    bufs[a] = BufArg::read(&x);
    bufs[b] = BufArg::read(&x);
    bufs[out] = BufArg::write(&mut o);
    code.launch(&mut bufs, KernelArgs::Checked(&checked), n, 8, None)
        .unwrap();
    drop(bufs);
    assert!(o.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32));
}

/// `[2, 3] @ [3, 2]` operands in 8-element slices and their plain views.
fn views() -> ([f32; 8], [f32; 8], MatView, MatView) {
    let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0, 0.0];
    let b = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0];
    (a, b, MatView::contiguous(2, 3), MatView::contiguous(3, 2))
}

#[test]
fn strided_matmul_views_read_in_place() {
    let (a, b, av, _) = views();
    // b read transposed: b^T of the [2, 3] matrix [1 0 0; 1 1 1].
    let bt = MatView {
        offset: 0,
        strides: [6, 1, 3],
    };
    let mut out = [0.0f32; 4];
    matmul_view_f32((&a, av), (&b, bt), &mut out, [1, 2, 3, 2], 1).unwrap();
    assert_eq!(out, [1.0, 6.0, 4.0, 15.0]);
    // Negative strides (b's rows backwards from row 1) and a batch of two
    // sharing `a` (stride 0).
    let back = MatView {
        offset: 3,
        strides: [0, -3, 1],
    };
    let (a2, b2) = (MatView::contiguous(1, 2), back);
    let mut out = [0.0f64; 6];
    let (a64, b64) = (a.map(f64::from), b.map(f64::from));
    let a0 = MatView {
        strides: [0, 2, 1],
        ..a2
    };
    matmul_view_f64((&a64, a0), (&b64, b2), &mut out, [2, 1, 2, 3], 1).unwrap();
    // [1 2] @ [[1 1 1], [1 0 0]] = [3 1 1], twice.
    assert_eq!(out, [3.0, 1.0, 1.0, 3.0, 1.0, 1.0]);
}

#[test]
fn strided_matmul_views_outside_their_slices_are_refused() {
    let (a, b, av, bv) = views();
    let bad = [
        // One element past the end, before the start, a stride too long,
        // a negative stride from the start, a batch past the end.
        ("a", MatView { offset: 3, ..av }, bv, [1, 2, 3, 2]),
        ("a", MatView { offset: -1, ..av }, bv, [1, 2, 3, 2]),
        (
            "b",
            av,
            MatView {
                strides: [6, 3, 2],
                ..bv
            },
            [1, 2, 3, 2],
        ),
        (
            "b",
            av,
            MatView {
                strides: [6, -2, 1],
                ..bv
            },
            [1, 2, 3, 2],
        ),
        (
            "a",
            av,
            MatView {
                strides: [0, 2, 1],
                ..bv
            },
            [2, 2, 3, 2],
        ),
        (
            "b",
            av,
            MatView {
                offset: i64::MAX,
                ..bv
            },
            [1, 2, 3, 2],
        ),
        (
            "a",
            MatView {
                strides: [i64::MAX, i64::MAX, 1],
                ..av
            },
            bv,
            [1, 2, 3, 2],
        ),
    ];
    for (what, av, bv, dims) in bad {
        let n = dims[0] * dims[1] * dims[3];
        let mut out = vec![7.0f32; n];
        let e = matmul_view_f32((&a, av), (&b, bv), &mut out, dims, 1).unwrap_err();
        assert!(
            matches!(&e, CodegenError::Launch { message, .. } if message.contains(&format!("operand {what}"))),
            "{what} {av:?} {bv:?}: {e}"
        );
        assert!(out.iter().all(|&v| v == 7.0), "nothing is written");
    }
    // An output of the wrong size.
    let mut out = [0.0f32; 3];
    assert!(matmul_view_f32((&a, av), (&b, bv), &mut out, [1, 2, 3, 2], 1).is_err());
    // An operand with a zero dim reads nothing, so any view of it is
    // fine; k = 0 gives zeros.
    let far = MatView {
        offset: 1 << 40,
        strides: [1, 1, 1],
    };
    let mut out = [5.0f32; 4];
    matmul_view_f32((&a, far), (&b, far), &mut out, [1, 2, 0, 2], 1).unwrap();
    assert_eq!(out, [0.0; 4]);
    matmul_view_f32((&a, far), (&b, bv), &mut [], [1, 0, 3, 2], 1).unwrap();
}

/// A column-split product (one block of output columns per thread) of
/// odd sizes, `a` read transposed and the output a column block of a
/// wider matrix, against an f64 loop; a view past its slice is refused
/// and writes nothing.
#[test]
fn column_split_matmul_matches_a_loop_and_refuses_bad_views() {
    use tilejit_codegen::host::{matmul_f32_strided_col_split, GemmView};
    let (m, k, n) = (3, 5, 11);
    let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.91).cos()).collect();
    // `a` is stored `[k, m]` and read transposed; `out` is columns 2.. of
    // an `[m, n + 3]` matrix.
    let av = GemmView {
        offset: 0,
        rows: m,
        cols: k,
        row_stride: 1,
        col_stride: m,
    };
    let bv = GemmView {
        offset: 0,
        rows: k,
        cols: n,
        row_stride: n,
        col_stride: 1,
    };
    let ov = GemmView {
        offset: 2,
        rows: m,
        cols: n,
        row_stride: n + 3,
        col_stride: 1,
    };
    for threads in [1, 2, 3] {
        let mut out = vec![-7.0f32; m * (n + 3)];
        matmul_f32_strided_col_split((&a, av), (&b, bv), (&mut out, ov), threads).unwrap();
        for i in 0..m {
            for j in 0..n + 3 {
                let got = out[i * (n + 3) + j];
                if !(2..n + 2).contains(&j) {
                    assert_eq!(got, -7.0, "untouched ({i}, {j})");
                    continue;
                }
                let want: f64 = (0..k)
                    .map(|q| f64::from(a[q * m + i]) * f64::from(b[q * n + j - 2]))
                    .sum();
                assert!(
                    (f64::from(got) - want).abs() < 1e-5,
                    "({i}, {j}): {got} vs {want}"
                );
            }
        }
    }
    // One element short of the output view: refused, nothing written.
    let mut out = vec![-7.0f32; m * (n + 3) - 2];
    let e = matmul_f32_strided_col_split((&a, av), (&b, bv), (&mut out, ov), 2);
    assert!(e.is_err());
    assert!(out.iter().all(|&v| v == -7.0));
}
