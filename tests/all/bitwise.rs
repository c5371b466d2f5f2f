//! Bitwise ops and shifts (`bitwise_and/or/xor/not`, `shl`, `shr`) on every
//! integer dtype and bool, on Host, Sim and Verify, eager and under
//! `#[jit]`, against values computed with Python's unbounded integers
//! wrapped to the dtype (numpy's `bitwise_*`, `left_shift`, `right_shift`,
//! whose out-of-range counts are read unsigned: 0, or the sign fill):
//!
//! ```python
//! def wrap(v, bits, signed):
//!     v &= (1 << bits) - 1
//!     return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v
//! def shl(a, b, bits, signed):
//!     b &= (1 << bits) - 1
//!     return 0 if b >= bits else wrap(a << b, bits, signed)
//! def shr(a, b, bits, signed):
//!     b &= (1 << bits) - 1
//!     return (-1 if a < 0 else 0) if b >= bits else a >> b
//! ```
//!
//! The sweeps of `host_backend.rs` and `sim_backend.rs` compare the same
//! rows with the reference interpreter at many sizes.

use tilejit::prelude::*;
use tilejit::ErrorKind;

const MODES: [RunMode; 3] = [RunMode::Host, RunMode::Sim, RunMode::Verify];

#[jit]
fn j_bits(a: &Tensor, b: &Tensor) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) {
    (
        a.bitwise_and(b),
        a.bitwise_or(b),
        a.bitwise_xor(b),
        a.bitwise_not(),
        a.shl(b),
        a.shr(b),
    )
}

/// The six results in `j_bits`'s order, eager.
fn eager(a: &Tensor, b: &Tensor) -> [Tensor; 6] {
    [
        a.bitwise_and(b),
        a.bitwise_or(b),
        a.bitwise_xor(b),
        a.bitwise_not(),
        a.shl(b),
        a.shr(b),
    ]
}

const NAMES: [&str; 6] = ["and", "or", "xor", "not", "shl", "shr"];

fn check<T>(a: Vec<T>, b: Vec<T>, want: [[i128; 10]; 6])
where
    T: tilejit::Element + Copy + Into<i128> + std::fmt::Debug,
{
    let (ta, tb) = (
        Tensor::from_vec(a, &[10]).unwrap(),
        Tensor::from_vec(b, &[10]).unwrap(),
    );
    let dt = ta.dtype();
    let vals = |t: &Tensor| -> Vec<i128> {
        t.to_vec::<T>()
            .unwrap_or_else(|e| panic!("{dt}: {e}"))
            .into_iter()
            .map(Into::into)
            .collect()
    };
    for mode in MODES {
        let got = with_mode(mode, || eager(&ta, &tb));
        for (i, t) in got.iter().enumerate() {
            assert_eq!(vals(t), want[i], "{} {dt} eager {mode:?}", NAMES[i]);
        }
        let j = with_mode(mode, || j_bits(&ta, &tb)).unwrap();
        let got = [j.0, j.1, j.2, j.3, j.4, j.5];
        for (i, t) in got.iter().enumerate() {
            assert_eq!(vals(t), want[i], "{} {dt} jit {mode:?}", NAMES[i]);
        }
    }
}

#[test]
fn bitwise_ops_and_shifts_match_python_on_every_integer_dtype() {
    check::<i32>(
        vec![5, -5, 12, -1, i32::MAX, i32::MIN, 6, -8, 1, 3],
        vec![3, 3, -3, 7, 1, 31, 32, 2, -1, 40],
        [
            [1, 3, 12, 7, 1, 0, 0, 0, 1, 0],
            [7, -5, -3, -1, 2147483647, -2147483617, 38, -6, -1, 43],
            [6, -8, -15, -8, 2147483646, -2147483617, 38, -6, -2, 43],
            [-6, 4, -13, 0, -2147483648, 2147483647, -7, 7, -2, -4],
            [40, -40, 0, -128, -2, 0, 0, -32, 0, 0],
            [0, -1, 0, -1, 1073741823, -1, 0, -2, 0, 0],
        ],
    );
    check::<u8>(
        vec![5, 250, 12, 255, 128, 1, 6, 200, 1, 3],
        vec![3, 3, 253, 7, 1, 7, 8, 2, 255, 40],
        [
            [1, 2, 12, 7, 0, 1, 0, 0, 1, 0],
            [7, 251, 253, 255, 129, 7, 14, 202, 255, 43],
            [6, 249, 241, 248, 129, 6, 14, 202, 254, 43],
            [250, 5, 243, 0, 127, 254, 249, 55, 254, 252],
            // Logical shifts: 250 >> 3 = 31, 128 >> 1 = 64.
            [40, 208, 0, 128, 0, 128, 0, 32, 0, 0],
            [0, 31, 0, 1, 64, 0, 0, 50, 0, 0],
        ],
    );
    check::<i8>(
        vec![5, -5, 12, -1, 127, -128, 6, -8, 1, 3],
        vec![3, 3, -3, 7, 1, 7, 8, 2, -1, 40],
        [
            [1, 3, 12, 7, 1, 0, 0, 0, 1, 0],
            [7, -5, -3, -1, 127, -121, 14, -6, -1, 43],
            [6, -8, -15, -8, 126, -121, 14, -6, -2, 43],
            [-6, 4, -13, 0, -128, 127, -7, 7, -2, -4],
            [40, -40, 0, -128, -2, 0, 0, -32, 0, 0],
            [0, -1, 0, -1, 63, -1, 0, -2, 0, 0],
        ],
    );
    check::<i64>(
        vec![5, -5, 12, -1, i64::MAX, i64::MIN, 6, -8, 1, 3],
        vec![3, 3, -3, 7, 1, 63, 64, 2, -1, 100],
        [
            [1, 3, 12, 7, 1, 0, 0, 0, 1, 0],
            [
                7,
                -5,
                -3,
                -1,
                i64::MAX as i128,
                -9223372036854775745,
                70,
                -6,
                -1,
                103,
            ],
            [
                6,
                -8,
                -15,
                -8,
                9223372036854775806,
                -9223372036854775745,
                70,
                -6,
                -2,
                103,
            ],
            [
                -6,
                4,
                -13,
                0,
                i64::MIN as i128,
                i64::MAX as i128,
                -7,
                7,
                -2,
                -4,
            ],
            [40, -40, 0, -128, -2, 0, 0, -32, 0, 0],
            [0, -1, 0, -1, 4611686018427387903, -1, 0, -2, 0, 0],
        ],
    );
}

#[test]
fn bitwise_ops_on_bool_are_logical_and_shifts_broadcast() {
    let p = Tensor::from_vec(vec![true, true, false, false], &[4]).unwrap();
    let q = Tensor::from_vec(vec![true, false, true, false], &[4]).unwrap();
    let x = Tensor::from_vec(vec![1u8, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
    let c = Tensor::from_vec(vec![1u8, 2, 3], &[3]).unwrap();
    for mode in MODES {
        let b = |t: Tensor| t.to_vec::<bool>().unwrap();
        assert_eq!(
            b(with_mode(mode, || p.bitwise_and(&q))),
            [true, false, false, false]
        );
        assert_eq!(
            b(with_mode(mode, || p.bitwise_or(&q))),
            [true, true, true, false]
        );
        assert_eq!(
            b(with_mode(mode, || p.bitwise_xor(&q))),
            [false, true, true, false]
        );
        assert_eq!(
            b(with_mode(mode, || p.bitwise_not())),
            [false, false, true, true]
        );
        // A count per column, broadcast over rows.
        let s = with_mode(mode, || x.shl(&c)).to_vec::<u8>().unwrap();
        assert_eq!(s, [2, 8, 24, 8, 20, 48], "{mode:?}");
        let s = with_mode(mode, || x.shr(&c)).to_vec::<u8>().unwrap();
        assert_eq!(s, [0, 0, 0, 2, 1, 0], "{mode:?}");
    }
}

#[test]
fn bitwise_ops_on_floats_are_dtype_errors_naming_the_op_and_line() {
    let f = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let cases = [
        (f.bitwise_and(&f), "bitwise_and", line!()),
        (f.bitwise_or(&f), "bitwise_or", line!()),
        (f.bitwise_xor(&f), "bitwise_xor", line!()),
        (f.bitwise_not(), "bitwise_not", line!()),
        (f.shl(&f), "shl", line!()),
        (f.shr(&f), "shr", line!()),
    ];
    for (t, op, line) in cases {
        let e = t
            .error()
            .unwrap_or_else(|| panic!("{op}: expected an error"));
        let msg = e.to_string();
        assert_eq!(e.kind(), ErrorKind::DType, "{msg}");
        assert!(msg.contains(&format!("`{op}`")), "{msg}");
        assert!(msg.contains("integer"), "{msg}");
        assert!(msg.contains(&format!("bitwise.rs:{line}:")), "{msg}");
    }
}
