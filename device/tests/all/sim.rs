//! The simulated core: every vector instruction against scalar reference
//! code written here (native f32/i32 arithmetic, `half` for f16/bf16),
//! GM loads and stores with strides and tails, the cube against a plain
//! matmul, faults that name core/program/pc and leave the device usable,
//! the cycle model's formulas and overlap, and the shipped examples'
//! outputs.

#![allow(clippy::type_complexity)] // tables of (name, reference fn) read best inline

use crate::example;
use half::{bf16, f16};
use tilejit_device::isa::asm;
use tilejit_device::{
    CoreRun, DeviceApi, DeviceBuffer, DeviceConfig, DeviceError, Pipe, SimDevice, VerifiedProgram,
};
use tilejit_ir::DType;

fn device() -> SimDevice {
    SimDevice::new(DeviceConfig::default()).unwrap()
}

fn to_bytes(v: &[f64], dt: DType) -> Vec<u8> {
    let mut out = Vec::new();
    for &x in v {
        match dt {
            DType::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
            DType::F64 => out.extend_from_slice(&x.to_le_bytes()),
            DType::F16 => out.extend_from_slice(&f16::from_f64(x).to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&bf16::from_f64(x).to_le_bytes()),
            DType::I32 => out.extend_from_slice(&(x as i32).to_le_bytes()),
            DType::I64 => out.extend_from_slice(&(x as i64).to_le_bytes()),
            DType::Bool => out.push((x != 0.0) as u8),
            DType::U8 => out.push(x as i64 as u8),
            DType::I8 => out.push(x as i64 as i8 as u8),
            DType::I16 => out.extend_from_slice(&(x as i16).to_le_bytes()),
            DType::U16 => out.extend_from_slice(&(x as u16).to_le_bytes()),
            DType::U32 => out.extend_from_slice(&(x as u32).to_le_bytes()),
            DType::U64 => out.extend_from_slice(&(x as u64).to_le_bytes()),
        }
    }
    out
}

fn from_bytes(b: &[u8], dt: DType) -> Vec<f64> {
    b.chunks_exact(dt.size_bytes())
        .map(|c| match dt {
            DType::F32 => f32::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::F64 => f64::from_le_bytes(c.try_into().unwrap()),
            DType::F16 => f16::from_le_bytes(c.try_into().unwrap()).to_f64(),
            DType::BF16 => bf16::from_le_bytes(c.try_into().unwrap()).to_f64(),
            DType::I32 => i32::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::I64 => i64::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::Bool | DType::U8 => c[0] as f64,
            DType::I8 => c[0] as i8 as f64,
            DType::I16 => i16::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::U16 => u16::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::U32 => u32::from_le_bytes(c.try_into().unwrap()) as f64,
            DType::U64 => u64::from_le_bytes(c.try_into().unwrap()) as f64,
        })
        .collect()
}

/// Runs `text` on core 0 with GM buffers holding `inputs` (dtype, values),
/// returning every buffer's values afterwards and the run's account.
fn run(
    dev: &SimDevice,
    text: &str,
    inputs: &[(DType, Vec<f64>)],
    scalars: &[i64],
) -> Result<(Vec<Vec<f64>>, CoreRun), DeviceError> {
    let p = asm::assemble(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let v = dev.verify(p).unwrap_or_else(|e| panic!("{e}\n{text}"));
    run_verified(dev, &v, inputs, scalars)
}

fn run_verified(
    dev: &SimDevice,
    v: &VerifiedProgram,
    inputs: &[(DType, Vec<f64>)],
    scalars: &[i64],
) -> Result<(Vec<Vec<f64>>, CoreRun), DeviceError> {
    let bufs: Vec<DeviceBuffer> = inputs
        .iter()
        .map(|(dt, vals)| {
            let b = dev.allocate((vals.len() * dt.size_bytes()) as u64).unwrap();
            dev.copy_from_host(&to_bytes(vals, *dt), &b, 0).unwrap();
            b
        })
        .collect();
    let refs: Vec<&DeviceBuffer> = bufs.iter().collect();
    let r = dev.run(v, 0, &refs, scalars)?;
    let outs = inputs
        .iter()
        .zip(&bufs)
        .map(|((dt, vals), b)| {
            let mut bytes = vec![0u8; vals.len() * dt.size_bytes()];
            dev.copy_to_host(b, 0, &mut bytes).unwrap();
            from_bytes(&bytes, *dt)
        })
        .collect();
    Ok((outs, r))
}

const R: usize = 5;
const C: usize = 40;
const VR: usize = 3;
const VC: usize = 37;
const SENTINEL: f64 = 7.0;

/// Values of `dt` in a mixed range (negatives, fractions, zero); ints small.
fn data(dt: DType, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..R * C)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            let x = if dt.is_float() {
                (u * 8.0 - 4.0) * 1.37
            } else {
                ((s % 41) as f64 - 20.0).trunc()
            };
            to_f(dt, x)
        })
        .collect()
}

/// `x` rounded to `dt` the way the test's inputs hold it.
fn to_f(dt: DType, x: f64) -> f64 {
    from_bytes(&to_bytes(&[x], dt), dt)[0]
}

/// Runs one vector instruction (with `{dt}`, `{shape}` placeholders and the
/// tiles A at @0x0, B at @0x8000, M (bool) at @0x18000, D at @0x10000) on a
/// 5x40 tile with a 3x37 valid region given in registers; returns D's
/// valid region as stored to GM, with SENTINEL outside it.
fn vec_op(line: &str, dt: DType, a: &[f64], b: &[f64], mask: &[f64]) -> Vec<f64> {
    let line = line
        .replace("{dt}", dt.name())
        .replace("{shape}", &format!("{R}x{C}"));
    let text = format!(
        ".kernel t aiv\n.gm a {dt} [{R},{C}] in\n.gm b {dt} [{R},{C}] in\n.gm m bool [{R},{C}] in\n.gm o {dt} [{R},{C}] out
    movi r1, {VR}
    movi r2, {VC}
    ld {dt}, {R}x{C}, r1, r2, @0x0, a, 0, {C}
    ld {dt}, {R}x{C}, r1, r2, @0x8000, b, 0, {C}
    ld bool, {R}x{C}, r1, r2, @0x18000, m, 0, {C}
    setf mte2, v, 0
    waitf mte2, v, 0
    {line}
    setf v, mte3, 0
    waitf v, mte3, 0
    st {dt}, {R}x{C}, r1, r2, o, 0, {C}, @0x10000
    end\n"
    );
    let (outs, _) = run(
        &device(),
        &text,
        &[
            (dt, a.to_vec()),
            (dt, b.to_vec()),
            (DType::Bool, mask.to_vec()),
            (dt, vec![SENTINEL; R * C]),
        ],
        &[],
    )
    .unwrap();
    outs[3].clone()
}

/// Checks `got` against `want(i)` inside the valid region and SENTINEL
/// outside; NaN equals NaN; `ulps` > 0 allows that many f32 ulps.
#[track_caller]
fn check(what: &str, got: &[f64], want: impl Fn(usize) -> f64) {
    for r in 0..R {
        for c in 0..C {
            let i = r * C + c;
            let w = if r < VR && c < VC { want(i) } else { SENTINEL };
            let g = got[i];
            assert!(
                g == w || (g.is_nan() && w.is_nan()),
                "{what}: element [{r},{c}] = {g}, expected {w}"
            );
        }
    }
}

/// Element-exact comparison that reports the first difference only.
#[track_caller]
fn assert_same(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) =
        (0..got.len()).find(|&i| !(got[i] == want[i] || (got[i].is_nan() && want[i].is_nan())))
    {
        panic!("{what}: element {i} = {}, expected {}", got[i], want[i]);
    }
}

fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.max(b)
    }
}

fn nan_min(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.min(b)
    }
}

#[test]
fn binary_ops_match_native_f32_arithmetic() {
    let (mut a, b) = (data(DType::F32, 1), data(DType::F32, 2));
    a[3] = f64::NAN;
    a[4] = f64::INFINITY;
    let ops: [(&str, fn(f32, f32) -> f32); 8] = [
        ("vadd", |x, y| x + y),
        ("vsub", |x, y| x - y),
        ("vmul", |x, y| x * y),
        ("vdiv", |x, y| x / y),
        ("vmax", nan_max),
        ("vmin", nan_min),
        // f64 pow rounded once is the reference's f32 pow.
        ("vpow", |x, y| (x as f64).powf(y as f64) as f32),
        // numpy's mod in f32: fmod (exact), into y's sign.
        ("vrem", |x, y| {
            let m = x % y;
            if y == 0.0 {
                m
            } else if m == 0.0 {
                0.0f32.copysign(y)
            } else if (m < 0.0) != (y < 0.0) {
                m + y
            } else {
                m
            }
        }),
    ];
    for (op, f) in ops {
        let got = vec_op(
            &format!("{op} {{dt}}, {{shape}}, r1, r2, @0x10000, @0x0, @0x8000"),
            DType::F32,
            &a,
            &b,
            &[0.0; R * C],
        );
        check(op, &got, |i| f(a[i] as f32, b[i] as f32) as f64);
    }
}

/// Tiles that alias: an op whose destination is one of its sources, or
/// overlaps a source's tile at another address (within a row and across
/// rows), reads every source's old values. f32 takes the native row path,
/// f64 the general one; both must agree with the plain formula.
#[test]
fn ops_on_aliasing_tiles_read_the_old_values() {
    // (A's address, B's address, the destination, the instruction).
    let pitch = 160; // 40 f32 columns; f64 tiles use 0x140
    let cases = [
        (0x0, 0x8000, 0x0, "vsub"),
        (0x8000, 0x0, 0x0, "vsub"),
        (0x0, 0x8000, 0x20, "vsub"),
        (0x20, 0x8000, 0x0, "vsub"),
        (0x0, 0x8000, pitch, "vsub"),
        (pitch, 0x8000, 0x0, "vsub"),
        (0x0, 0x0, 0x20, "vsub"),
        (0x0, 0x8000, 0x20, "vmuls"),
        (0x20, 0x8000, 0x0, "vrelu"),
        (0x0, 0x8000, 0x0, "vneg"),
    ];
    for dt in [DType::F32, DType::F64] {
        let scale = dt.size_bytes() / 4;
        let (a, b) = (data(dt, 21), data(dt, 22));
        for (pa, pb, pd, op) in cases {
            let (pa, pb, pd) = (pa * scale, pb * scale, pd * scale);
            let operands = match op {
                "vsub" => format!("@0x{pd:x}, @0x{pa:x}, @0x{pb:x}"),
                "vmuls" => format!("@0x{pd:x}, @0x{pa:x}, 3"),
                _ => format!("@0x{pd:x}, @0x{pa:x}, {}", &op[1..]),
            };
            let mnemonic = if op.starts_with("vsub") || op == "vmuls" {
                op
            } else {
                "vunary"
            };
            let text = format!(
                ".kernel t aiv\n.gm a {dt} [{R},{C}] in\n.gm b {dt} [{R},{C}] in\n.gm o {dt} [{R},{C}] out
    movi r1, {VR}
    movi r2, {VC}
    ld {dt}, {R}x{C}, r1, r2, @0x{pa:x}, a, 0, {C}
    ld {dt}, {R}x{C}, r1, r2, @0x{pb:x}, b, 0, {C}
    setf mte2, v, 0
    waitf mte2, v, 0
    {mnemonic} {dt}, {R}x{C}, r1, r2, {operands}
    setf v, mte3, 0
    waitf v, mte3, 0
    st {dt}, {R}x{C}, r1, r2, o, 0, {C}, @0x{pd:x}
    end\n",
                dt = dt.name()
            );
            let ins = [
                (dt, a.clone()),
                (dt, b.clone()),
                (dt, vec![SENTINEL; R * C]),
            ];
            let (outs, _) = run(&device(), &text, &ins, &[]).unwrap();
            // When B was loaded over A (same address), A's tile holds B.
            let a_at = |i: usize| if pa == pb { b[i] } else { a[i] };
            let what = format!("{} {op} A@{pa:x} B@{pb:x} D@{pd:x}", dt.name());
            check(&what, &outs[2], |i| match op {
                "vsub" => to_f(dt, a_at(i) - b[i]),
                "vmuls" => to_f(dt, a_at(i) * 3.0),
                "vrelu" => a_at(i).max(0.0),
                _ => -a_at(i),
            });
        }
    }
}

#[test]
fn binary_ops_in_other_dtypes() {
    for dt in [DType::F16, DType::BF16, DType::F64] {
        let (a, b) = (data(dt, 3), data(dt, 4));
        let got = vec_op(
            "vmul {dt}, {shape}, r1, r2, @0x10000, @0x0, @0x8000",
            dt,
            &a,
            &b,
            &[0.0; R * C],
        );
        check(dt.name(), &got, |i| match dt {
            DType::F16 => (f16::from_f64(a[i]) * f16::from_f64(b[i])).to_f64(),
            DType::BF16 => (bf16::from_f64(a[i]) * bf16::from_f64(b[i])).to_f64(),
            _ => a[i] * b[i],
        });
    }
    let (mut a, mut b) = (data(DType::I32, 5), data(DType::I32, 6));
    a[0] = i32::MIN as f64;
    b[0] = -1.0;
    b[1] = 0.0;
    a[2] = i32::MAX as f64;
    b[2] = 2.0;
    let int_ops: [(&str, fn(i32, i32) -> i32); 7] = [
        ("vadd", i32::wrapping_add),
        ("vsub", i32::wrapping_sub),
        ("vmul", i32::wrapping_mul),
        ("vdiv", |x, y| if y == 0 { 0 } else { x.wrapping_div(y) }),
        ("vmax", i32::max),
        // numpy's mod (x % 0 = 0, MIN % -1 = 0).
        ("vrem", |x, y| {
            let r = if y == 0 { 0 } else { x.wrapping_rem(y) };
            if r != 0 && (r < 0) != (y < 0) {
                r + y
            } else {
                r
            }
        }),
        // Wrapping; a negative exponent gives the integer part of 1/x^|y|.
        ("vpow", |x, y| match (x, y) {
            (_, 0..) => x.wrapping_pow(y as u32),
            (1, _) => 1,
            (-1, _) => {
                if y % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        }),
    ];
    for (op, f) in int_ops {
        let got = vec_op(
            &format!("{op} {{dt}}, {{shape}}, r1, r2, @0x10000, @0x0, @0x8000"),
            DType::I32,
            &a,
            &b,
            &[0.0; R * C],
        );
        check(op, &got, |i| f(a[i] as i32, b[i] as i32) as f64);
    }
    let (a, b) = (data(DType::I64, 7), data(DType::I64, 8));
    let got = vec_op(
        "vsub {dt}, {shape}, r1, r2, @0x10000, @0x0, @0x8000",
        DType::I64,
        &a,
        &b,
        &[0.0; R * C],
    );
    check("i64 vsub", &got, |i| (a[i] as i64 - b[i] as i64) as f64);
}

#[test]
fn u8_and_i8_wrap_and_u8_is_unsigned() {
    // u8 values 0..=255 and i8 values -128..=127, from native Rust ops.
    let u: Vec<f64> = (0..R * C).map(|i| ((i * 37 + 11) % 256) as f64).collect();
    let v: Vec<f64> = (0..R * C).map(|i| ((i * 91 + 3) % 256) as f64).collect();
    let u8_ops: [(&str, fn(u8, u8) -> u8); 6] = [
        ("vadd", u8::wrapping_add),
        ("vsub", u8::wrapping_sub),
        ("vmul", u8::wrapping_mul),
        ("vdiv", |x, y| x.checked_div(y).unwrap_or(0)),
        ("vrem", |x, y| x.checked_rem(y).unwrap_or(0)),
        ("vmax", u8::max),
    ];
    for (op, f) in u8_ops {
        let got = vec_op(
            &format!("{op} {{dt}}, {{shape}}, r1, r2, @0x10000, @0x0, @0x8000"),
            DType::U8,
            &u,
            &v,
            &[0.0; R * C],
        );
        check(&format!("u8 {op}"), &got, |i| {
            f(u[i] as u8, v[i] as u8) as f64
        });
    }
    let (s, t): (Vec<f64>, Vec<f64>) = (
        u.iter().map(|&x| x as u8 as i8 as f64).collect(),
        v.iter().map(|&x| x as u8 as i8 as f64).collect(),
    );
    let i8_ops: [(&str, fn(i8, i8) -> i8); 4] = [
        ("vadd", i8::wrapping_add),
        ("vmul", i8::wrapping_mul),
        ("vdiv", |x, y| if y == 0 { 0 } else { x.wrapping_div(y) }),
        ("vmin", i8::min),
    ];
    for (op, f) in i8_ops {
        let got = vec_op(
            &format!("{op} {{dt}}, {{shape}}, r1, r2, @0x10000, @0x0, @0x8000"),
            DType::I8,
            &s,
            &t,
            &[0.0; R * C],
        );
        check(&format!("i8 {op}"), &got, |i| {
            f(s[i] as i8, t[i] as i8) as f64
        });
    }
}

#[test]
fn unary_ops_match_f64_math_rounded_to_the_dtype() {
    let mut a = data(DType::F32, 9);
    a[5] = -0.0;
    a[6] = f64::NAN;
    let ops: [(&str, fn(f64) -> f64); 25] = [
        ("neg", |x| -x),
        ("abs", f64::abs),
        ("square", |x| x * x),
        ("relu", |x| if x.is_nan() || x > 0.0 { x } else { 0.0 }),
        ("exp", f64::exp),
        ("log", f64::ln),
        ("sqrt", f64::sqrt),
        ("rsqrt", |x| 1.0 / x.sqrt()),
        ("recip", |x| 1.0 / x),
        ("tanh", f64::tanh),
        ("sigmoid", |x| 1.0 / (1.0 + (-x).exp())),
        ("gelu", |x| {
            0.5 * x * (1.0 + (0.7978845608 * (x + 0.044715 * x * x * x)).tanh())
        }),
        ("sin", f64::sin),
        ("cos", f64::cos),
        ("erf", tilejit_ir::scalar::erf),
        ("floor", f64::floor),
        ("ceil", f64::ceil),
        ("round", f64::round_ties_even),
        ("atan", f64::atan),
        ("asin", f64::asin),
        ("acos", f64::acos),
        ("asinh", f64::asinh),
        ("acosh", f64::acosh),
        ("atanh", f64::atanh),
        // numpy's sign: -0 gives +0, NaN stays.
        ("sign", |x| {
            if x == 0.0 {
                0.0
            } else if x.is_nan() {
                x
            } else {
                x.signum()
            }
        }),
    ];
    for dt in [DType::F32, DType::F16] {
        let a: Vec<f64> = a.iter().map(|&x| to_f(dt, x)).collect();
        for (op, f) in ops {
            let got = vec_op(
                &format!("vunary {{dt}}, {{shape}}, r1, r2, @0x10000, @0x0, {op}"),
                dt,
                &a,
                &a,
                &[0.0; R * C],
            );
            check(&format!("{op} {dt}"), &got, |i| to_f(dt, f(a[i])));
        }
    }
    let a = data(DType::I32, 10);
    let got = vec_op(
        "vunary {dt}, {shape}, r1, r2, @0x10000, @0x0, abs",
        DType::I32,
        &a,
        &a,
        &[0.0; R * C],
    );
    check("i32 vabs", &got, |i| (a[i] as i32).wrapping_abs() as f64);
}

#[test]
fn tile_scalar_ops_dup_compare_and_select() {
    let (a, b) = (data(DType::F32, 11), data(DType::F32, 12));
    let z = [0.0; R * C];
    let got = vec_op(
        "vadds {dt}, {shape}, r1, r2, @0x10000, @0x0, 0.1",
        DType::F32,
        &a,
        &b,
        &z,
    );
    check("vadds", &got, |i| (a[i] as f32 + 0.1f32) as f64);
    let got = vec_op(
        "vmuls {dt}, {shape}, r1, r2, @0x10000, @0x0, -2.5",
        DType::F32,
        &a,
        &b,
        &z,
    );
    check("vmuls", &got, |i| (a[i] as f32 * -2.5f32) as f64);
    let got = vec_op(
        "vmaxs {dt}, {shape}, r1, r2, @0x10000, @0x0, 0.5",
        DType::F32,
        &a,
        &b,
        &z,
    );
    check("vmaxs", &got, |i| (a[i] as f32).max(0.5) as f64);
    let got = vec_op(
        "vmins {dt}, {shape}, r1, r2, @0x10000, @0x0, 0.5",
        DType::F32,
        &a,
        &b,
        &z,
    );
    check("vmins", &got, |i| (a[i] as f32).min(0.5) as f64);
    let got = vec_op(
        "vdup {dt}, {shape}, r1, r2, @0x10000, -inf",
        DType::F32,
        &a,
        &b,
        &z,
    );
    check("vdup", &got, |_| f64::NEG_INFINITY);
    let bits = 2.5f64.to_bits() as i64;
    let got = vec_op(
        &format!("movi r5, {bits}\n    vdupr {{dt}}, {{shape}}, r1, r2, @0x10000, r5"),
        DType::F16,
        &a,
        &b,
        &z,
    );
    check("vdupr", &got, |_| 2.5);
    let got = vec_op(
        "vbcast {dt}, {shape}, r1, r2, @0x10000, @0x8000",
        DType::F32,
        &a,
        &b,
        &z,
    );
    check("vbcast", &got, |_| b[0]);
    let ai = data(DType::I32, 13);
    let got = vec_op(
        "vadds {dt}, {shape}, r1, r2, @0x10000, @0x0, 3.0",
        DType::I32,
        &ai,
        &ai,
        &z,
    );
    check("i32 vadds", &got, |i| ai[i] + 3.0);

    // Compare into a mask, then select with it: D = (a cond b) ? a : b.
    let (mut a2, b2) = (a.clone(), b.clone());
    a2[7] = f64::NAN;
    a2[8] = b2[8];
    let conds: [(&str, fn(f32, f32) -> bool); 6] = [
        ("eq", |x, y| x == y),
        ("ne", |x, y| x != y),
        ("lt", |x, y| x < y),
        ("le", |x, y| x <= y),
        ("gt", |x, y| x > y),
        ("ge", |x, y| x >= y),
    ];
    for (c, f) in conds {
        let line = format!("vcmp {{dt}}, {{shape}}, r1, r2, {c}, @0x18000, @0x0, @0x8000\n    vsel {{dt}}, {{shape}}, r1, r2, @0x10000, @0x18000, @0x0, @0x8000");
        let got = vec_op(&line, DType::F32, &a2, &b2, &z);
        check(c, &got, |i| {
            if f(a2[i] as f32, b2[i] as f32) {
                a2[i]
            } else {
                b2[i]
            }
        });
    }
    // A mask loaded from GM drives the select directly.
    let mask: Vec<f64> = (0..R * C).map(|i| (i % 3 == 0) as u8 as f64).collect();
    let got = vec_op(
        "vsel {dt}, {shape}, r1, r2, @0x10000, @0x18000, @0x0, @0x8000",
        DType::F32,
        &a,
        &b,
        &mask,
    );
    check("vsel", &got, |i| if i % 3 == 0 { a[i] } else { b[i] });
}

#[test]
fn casts_round_truncate_and_saturate() {
    // f32 -> i32 (truncation toward zero, saturation, NaN -> 0); the source
    // tile sits at B (0x8000) as f32, the result is i32.
    let mut a = data(DType::F32, 14);
    a[0] = 3.0e9;
    a[1] = -3.0e9;
    a[2] = f64::NAN;
    a[3] = -2.7;
    let text = format!(
        ".kernel t aiv\n.gm a f32 [{R},{C}] in\n.gm o i32 [{R},{C}] out
    ld f32, {R}x{C}, {VR}, {VC}, @0x8000, a, 0, {C}
    setf mte2, v, 0
    waitf mte2, v, 0
    vcast i32, f32, {R}x{C}, {VR}, {VC}, @0x10000, @0x8000
    setf v, mte3, 0
    waitf v, mte3, 0
    st i32, {R}x{C}, {VR}, {VC}, o, 0, {C}, @0x10000
    end\n"
    );
    let (outs, _) = run(
        &device(),
        &text,
        &[(DType::F32, a.clone()), (DType::I32, vec![SENTINEL; R * C])],
        &[],
    )
    .unwrap();
    check("f32->i32", &outs[1], |i| (a[i] as f32) as i32 as f64);
    // i32 -> f16 rounds; f16 -> bool is != 0.
    let ai: Vec<f64> = (0..R * C).map(|i| (i as f64 - 100.0) * 37.0).collect();
    let text = text
        .replace("f32 [", "i32 [")
        .replace("i32 [5,40] out", "f16 [5,40] out");
    let text = text
        .replace("ld f32", "ld i32")
        .replace("vcast i32, f32", "vcast f16, i32")
        .replace("st i32", "st f16");
    let (outs, _) = run(
        &device(),
        &text,
        &[
            (DType::I32, ai.clone()),
            (DType::F16, vec![SENTINEL; R * C]),
        ],
        &[],
    )
    .unwrap();
    check("i32->f16", &outs[1], |i| {
        f16::from_f32(ai[i] as f32).to_f64()
    });
}

#[test]
fn row_reductions_and_broadcasts() {
    let mut a = data(DType::F32, 15);
    a[C + 2] = f64::NAN; // row 1's max/min become NaN; its sum too
                         // D = broadcast_rows(reduce(A)) - A's row reduction spread back over the tile.
    for (op, f) in [
        (
            "vrsum",
            (|row: &[f64]| row.iter().sum::<f64>()) as fn(&[f64]) -> f64,
        ),
        ("vrmax", |row: &[f64]| {
            row.iter().fold(f64::NEG_INFINITY, |m, &x| {
                if m.is_nan() || x.is_nan() {
                    f64::NAN
                } else {
                    m.max(x)
                }
            })
        }),
        ("vrmin", |row: &[f64]| {
            row.iter().fold(f64::INFINITY, |m, &x| {
                if m.is_nan() || x.is_nan() {
                    f64::NAN
                } else {
                    m.min(x)
                }
            })
        }),
        // The f64 product, rounded once to f32.
        ("vrprod", |row: &[f64]| row.iter().product::<f64>()),
    ] {
        let line = format!("{op} {{dt}}, {{shape}}, r1, r2, @0x18000, @0x0\n    vbrow {{dt}}, {{shape}}, r1, r2, @0x10000, @0x18000");
        let got = vec_op(&line, DType::F32, &a, &a, &[0.0; R * C]);
        check(op, &got, |i| {
            let r = i / C;
            f(&a[r * C..r * C + VC]) as f32 as f64
        });
    }
    // Column broadcast: D[r][c] = B's first row [c] (a row vector at @0x8000).
    let b = data(DType::F32, 16);
    let got = vec_op(
        "vbcol {dt}, {shape}, r1, r2, @0x10000, @0x8000",
        DType::F32,
        &a,
        &b,
        &[0.0; R * C],
    );
    check("vbcol", &got, |i| b[i % C]);
    let ai = data(DType::I32, 17);
    let got = vec_op("vrsum {dt}, {shape}, r1, r2, @0x18000, @0x0\n    vbrow {dt}, {shape}, r1, r2, @0x10000, @0x18000", DType::I32, &ai, &ai, &[0.0; R * C]);
    check("i32 vrsum", &got, |i| {
        ai[(i / C) * C..(i / C) * C + VC].iter().sum()
    });
    // An i32 product wraps (the data's values are small; scale them up so
    // that the row products leave the i32 range).
    let big: Vec<f64> = ai.iter().map(|x| x * 1000.0 + 7.0).collect();
    let got = vec_op("vrprod {dt}, {shape}, r1, r2, @0x18000, @0x0\n    vbrow {dt}, {shape}, r1, r2, @0x10000, @0x18000", DType::I32, &big, &big, &[0.0; R * C]);
    check("i32 vrprod", &got, |i| {
        let row = &big[(i / C) * C..(i / C) * C + VC];
        row.iter().fold(1i64, |p, &x| p.wrapping_mul(x as i64)) as i32 as f64
    });
}

#[test]
fn loads_and_stores_follow_offsets_strides_and_zero_fill_tails() {
    // Load a 3x5 window at (row 2, col 4) of a 10x16 i32 matrix into an 8x8
    // tile, copy the whole tile (tail included) and store it as 8x8 at
    // offset 100 with stride 9 into a 200-element output.
    let src: Vec<f64> = (0..160).map(|i| i as f64).collect();
    let text = ".kernel t aiv\n.gm s i32 [10,16] in\n.gm o i32 [200] out
    ld i32, 8x8, 3, 5, @0x0, s, 36, 16
    setf mte2, v, 0
    waitf mte2, v, 0
    vmov i32, 8x8, 8, 8, @0x400, @0x0
    setf v, mte3, 0
    waitf v, mte3, 0
    st i32, 8x8, 8, 8, o, 100, 9, @0x400
    end\n";
    let (outs, _) = run(
        &device(),
        text,
        &[(DType::I32, src), (DType::I32, vec![-1.0; 200])],
        &[],
    )
    .unwrap();
    let o = &outs[1];
    for (i, &v) in o.iter().enumerate() {
        let want = if i >= 100 && (i - 100) % 9 < 8 && (i - 100) / 9 < 8 {
            let (r, c) = ((i - 100) / 9, (i - 100) % 9);
            if r < 3 && c < 5 {
                ((2 + r) * 16 + 4 + c) as f64
            } else {
                0.0
            }
        } else {
            -1.0
        };
        assert_eq!(v, want, "o[{i}]");
    }
}

/// A plain matmul with the cube's semantics: exact products, f32 sums
/// starting from `init` (zeros when empty).
fn cube_ref(a: &[f64], b: &[f64], m: usize, k: usize, n: usize, init: &[f64]) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            // One instruction: the K products summed in f64 (in order),
            // added to the f32 accumulator with one rounding.
            let s = init.get(i * n + j).map_or(0f32, |&x| x as f32);
            let dot: f64 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            c[i * n + j] = (s as f64 + dot) as f32 as f64;
        }
    }
    c
}

#[test]
fn cube_matmul_accumulates_in_f32_and_fixpipe_casts_with_relu() {
    let dev = device();
    // Odd sizes: M=33, K=20, N=50 in f16, tiles padded to 48x32 / 32x64.
    let (m, k, n) = (33, 20, 50);
    let a: Vec<f64> = data(DType::F16, 20)
        .into_iter()
        .cycle()
        .take(m * k)
        .collect();
    let b: Vec<f64> = data(DType::F16, 21)
        .into_iter()
        .cycle()
        .take(k * n)
        .collect();
    for (relu, acc_twice) in [(0, false), (1, false), (0, true)] {
        let second = if acc_twice {
            "    mmad f16, 48x32x64, @0x0, @0x0, @0x0, 1\n"
        } else {
            ""
        };
        let text = format!(
            ".kernel t aic\n.gm a f16 [{m},{k}] in\n.gm b f16 [{k},{n}] in\n.gm c f32 [{m},{n}] out
    ldl1 f16, 48x32, {m}, {k}, @0x0, a, 0, {k}
    ldl1 f16, 32x64, {k}, {n}, @0x10000, b, 0, {n}
    setf mte2, mte1, 0
    waitf mte2, mte1, 0
    mvl0a f16, 48x32, @0x0, @0x0
    mvl0b f16, 32x64, @0x0, @0x10000
    setf mte1, m, 0
    waitf mte1, m, 0
    mmad f16, 48x32x64, @0x0, @0x0, @0x0, 0
{second}    setf m, fixp, 0
    waitf m, fixp, 0
    fixp f32, 48x64, {m}, {n}, c, 0, {n}, @0x0, {relu}
    end\n"
        );
        let (outs, _) = run(
            &dev,
            &text,
            &[
                (DType::F16, a.clone()),
                (DType::F16, b.clone()),
                (DType::F32, vec![0.0; m * n]),
            ],
            &[],
        )
        .unwrap();
        let mut want = cube_ref(&a, &b, m, k, n, &[]);
        if acc_twice {
            want = cube_ref(&a, &b, m, k, n, &want);
        }
        if relu == 1 {
            want = want.iter().map(|&x| x.max(0.0)).collect();
        }
        assert_same(&outs[2], &want, &format!("relu={relu} acc={acc_twice}"));
        // And close to the exact f64 product.
        let exact = crate::reference::matmul(&a, &b, m, k, n);
        for (g, e) in outs[2].iter().zip(&exact) {
            let e = if relu == 1 {
                e.max(0.0)
            } else if acc_twice {
                2.0 * e
            } else {
                *e
            };
            assert!((g - e).abs() <= 1e-5 * (1.0 + e.abs()), "{g} vs {e}");
        }
    }
}

#[test]
fn strided_fixpipe_stores_the_tile_transposed_and_faults_past_its_buffer() {
    let dev = device();
    // The product of odd sizes (M=33, K=20, N=50), stored transposed:
    // element (i, j) at j*m + i, with relu.
    let (m, k, n) = (33, 20, 50);
    let a: Vec<f64> = data(DType::F16, 22)
        .into_iter()
        .cycle()
        .take(m * k)
        .collect();
    let b: Vec<f64> = data(DType::F16, 23)
        .into_iter()
        .cycle()
        .take(k * n)
        .collect();
    let body = |len: usize| {
        format!(
            ".kernel t aic\n.gm a f16 [{m},{k}] in\n.gm b f16 [{k},{n}] in\n.gm c f32 [{len}] out
    ldl1 f16, 48x32, {m}, {k}, @0x0, a, 0, {k}
    ldl1 f16, 32x64, {k}, {n}, @0x10000, b, 0, {n}
    setf mte2, mte1, 0
    waitf mte2, mte1, 0
    mvl0a f16, 48x32, @0x0, @0x0
    mvl0b f16, 32x64, @0x0, @0x10000
    setf mte1, m, 0
    waitf mte1, m, 0
    mmad f16, 48x32x64, @0x0, @0x0, @0x0, 0
    setf m, fixp, 0
    waitf m, fixp, 0
    fixpx f32, 48x64, {m}, {n}, c, 0, 1, {m}, @0x0, 1
    end\n"
        )
    };
    let gm = |len: usize| {
        vec![
            (DType::F16, a.clone()),
            (DType::F16, b.clone()),
            (DType::F32, vec![0.0; len]),
        ]
    };
    let (outs, _) = run(&dev, &body(m * n), &gm(m * n), &[]).unwrap();
    let c = cube_ref(&a, &b, m, k, n, &[]);
    let mut want = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            want[j * m + i] = c[i * n + j].max(0.0);
        }
    }
    assert_same(&outs[2], &want, "fixpx");
    // Ten columns short: the last columns' reach leaves the buffer.
    let short = m * (n - 10);
    let Err(e) = run(&dev, &body(short), &gm(short), &[]) else {
        panic!("stored past its buffer without a fault");
    };
    assert!(e.to_string().contains("strided GM access"), "{e}");
}

fn fault_of(text: &str, gm: &[(DType, Vec<f64>)], scalars: &[i64]) -> String {
    // A small watchdog budget keeps the runaway-loop case quick.
    let dev = SimDevice::new(DeviceConfig {
        watchdog_work: 100_000,
        ..DeviceConfig::default()
    })
    .unwrap();
    match run(&dev, text, gm, scalars) {
        Ok(_) => panic!("ran without a fault:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn faults_name_core_program_and_pc() {
    let x = vec![(DType::F32, vec![0.0; 64])];
    let cases: &[(&str, &str)] = &[
        (
            "    movi r1, 60\n    ld f32, 1x8, 1, 8, @0x0, x, r1, 0\n    end",
            "fault on core AIV_0 in program `t` at pc 1: GM access to argument 0 (offset 60, stride 0, 1x8 f32) goes outside its 256 bytes",
        ),
        ("    movi r1, 9\n    vadd f32, 8x8, r1, 8, @0x0, @0x0, @0x0\n    end", "at pc 1: valid region 9x8 is outside the tile's 8x8"),
        ("    div r1, r1, r2\n    end", "at pc 0: scalar div by zero"),
        ("l:\n    jmp l", "at pc 0: watchdog"),
        ("    jmp skip\n    setf mte2, v, 0\nskip:\n    waitf mte2, v, 0\n    end", "at pc 2: waitf (mte2, v, 0) with no flag raised"),
        ("    setf mte2, v, 0\n    jmp out\n    waitf mte2, v, 0\nout:\n    end", "flag (mte2, v, 0) raised 1 time(s) and never waited on"),
        ("    movi r1, -1\n    shl r2, r2, r1\n    end", "at pc 1: shift by -1"),
    ];
    for (body, want) in cases {
        let text = format!(".kernel t aiv\n.gm x f32 [64] inout\n{body}\n");
        let msg = fault_of(&text, &x, &[]);
        assert!(msg.contains(want), "expected `{want}` in: {msg}");
    }
}

/// A load or store whose valid region is empty touches no GM, so its
/// offset may lie anywhere (found by tilejit-fuzz: a zero-column load at
/// an offset past GM tripped the memory's bounds assertion).
#[test]
fn empty_valid_regions_touch_no_gm_wherever_they_point() {
    let far = i64::MAX;
    for (vr, vc) in [(1, 0), (0, 8), (0, 0)] {
        let text = format!(
            ".kernel t aiv\n.gm x f32 [8] inout\n    movi r1, {far}\n\
             ld f32, 1x8, {vr}, {vc}, @0x0, x, r1, 0\n\
             ldx f32, 1x8, {vr}, {vc}, @0x0, x, r1, 0, 0\n\
             setf mte2, mte3, 0\n    waitf mte2, mte3, 0\n\
             st f32, 1x8, {vr}, {vc}, x, r1, 0, @0x0\n\
             stx f32, 1x8, {vr}, {vc}, x, r1, 0, 0, @0x0\n    end\n"
        );
        let x = vec![(DType::F32, vec![2.0; 8])];
        let (outs, _) = run(&device(), &text, &x, &[]).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(outs[0], vec![2.0; 8]);
    }
}

#[test]
fn a_fault_leaves_the_device_usable_and_bad_launches_are_refused() {
    let dev = device();
    let bad = ".kernel t aiv\n.gm x f32 [8] inout\n    movi r1, 9\n    ld f32, 1x8, 1, r1, @0x0, x, 0, 0\n    end\n";
    let good = ".kernel g aiv\n.gm x f32 [8] inout\n    ld f32, 1x8, 1, 8, @0x0, x, 0, 0\n    setf mte2, v, 0\n    waitf mte2, v, 0\n    vadds f32, 1x8, 1, 8, @0x0, @0x0, 1.0\n    setf v, mte3, 0\n    waitf v, mte3, 0\n    st f32, 1x8, 1, 8, x, 0, 0, @0x0\n    end\n";
    let x = vec![(DType::F32, vec![2.0; 8])];
    for _ in 0..3 {
        assert!(matches!(
            run(&dev, bad, &x, &[]),
            Err(DeviceError::Fault { .. })
        ));
        let (outs, _) = run(&dev, good, &x, &[]).unwrap();
        assert_eq!(outs[0], vec![3.0; 8]);
    }
    let v = dev.verify(asm::assemble(good).unwrap()).unwrap();
    let err = dev.run(&v, 0, &[], &[]).unwrap_err().to_string();
    assert!(
        err.contains("0 GM arguments given, the program declares 1"),
        "{err}"
    );
    let buf = dev.allocate(32).unwrap();
    let err = dev.run(&v, 48, &[&buf], &[]).unwrap_err().to_string();
    assert!(err.contains("core AIV_48 does not exist"), "{err}");
    let err = dev.run(&v, 0, &[&buf], &[5]).unwrap_err().to_string();
    assert!(
        err.contains("1 scalar arguments given, the program declares 0"),
        "{err}"
    );
}

#[test]
fn cycle_costs_follow_the_table() {
    let dev = device();
    let c = &dev.config().costs;
    // A lone cube instruction: startup + blocks (x2 for f32).
    for (dt, m, k, n, factor) in [
        ("f16", 64, 64, 64, 1),
        ("f16", 33, 17, 50, 1),
        ("f32", 32, 16, 16, 2),
        ("bf16", 16, 16, 16, 1),
    ] {
        let text =
            format!(".kernel t aic\n    mmad {dt}, {m}x{k}x{n}, @0x0, @0x0, @0x0, 0\n    end\n");
        let (_, r) = run(&dev, &text, &[], &[]).unwrap();
        let blocks = (m as u64).div_ceil(16) * (k as u64).div_ceil(16) * (n as u64).div_ceil(16);
        assert_eq!(
            r.busy_of(Pipe::M),
            c.cube_startup + blocks * factor,
            "{dt} {m}x{k}x{n}"
        );
    }
    // A vector op on a valid region: startup + ceil(bytes/256).
    let text = ".kernel t aiv\n    vunary f32, 8x64, 7, 50, @0x0, @0x0, exp\n    end\n";
    let (_, r) = run(&dev, text, &[], &[]).unwrap();
    assert_eq!(
        r.busy_of(Pipe::V),
        c.vector_startup + (7u64 * 50 * 4).div_ceil(256)
    );
    // Independent pipes overlap; a barrier serialises them.
    let body =
        "    vunary f32, 64x64, 64, 64, @0x0, @0x0, exp\n    ld f32, 64x64, 64, 64, @0x10000, x, 0, 64\n";
    let x = vec![(DType::F32, vec![0.0; 4096])];
    let (_, overlapped) = run(
        &dev,
        &format!(".kernel t aiv\n.gm x f32 [4096] in\n{body}    end\n"),
        &x,
        &[],
    )
    .unwrap();
    let (_, serial) = run(
        &dev,
        &format!(
            ".kernel t aiv\n.gm x f32 [4096] in\n{}    barrier\n{}    end\n",
            &body[..body.find('\n').unwrap() + 1],
            &body[body.find('\n').unwrap() + 1..]
        ),
        &x,
        &[],
    )
    .unwrap();
    let (v, l) = (overlapped.busy_of(Pipe::V), overlapped.busy_of(Pipe::Mte2));
    assert!(overlapped.cycles < v + l, "{overlapped}");
    assert!(serial.cycles >= v + l, "{serial}");
    assert_eq!(
        l,
        c.gm_read_latency + (4096u64 * 4).div_ceil(c.gm_read_bytes_per_cycle)
    );
}

fn vadd_inputs(n: usize) -> Vec<(DType, Vec<f64>)> {
    let x: Vec<f64> = (0..n)
        .map(|i| to_f(DType::F32, (i as f64 * 0.37).sin()))
        .collect();
    let y: Vec<f64> = (0..n)
        .map(|i| to_f(DType::F32, (i as f64 * 0.11).cos() * 3.0))
        .collect();
    vec![
        (DType::F32, x),
        (DType::F32, y),
        (DType::F32, vec![SENTINEL; n]),
    ]
}

#[test]
fn vadd_examples_are_exact_and_double_buffering_hides_copies() {
    let dev = device();
    let db = dev.verify(example("vadd_double_buffered.s")).unwrap();
    let sb = dev.verify(example("vadd_single_buffered.s")).unwrap();
    for n in [1usize, 3, 4096, 5000, 12288, 100_000] {
        let inputs = vadd_inputs(n);
        let (out_db, run_db) = run_verified(&dev, &db, &inputs, &[n as i64]).unwrap();
        let (out_sb, run_sb) = run_verified(&dev, &sb, &inputs, &[n as i64]).unwrap();
        let want: Vec<f64> = (0..n)
            .map(|i| (inputs[0].1[i] as f32 + inputs[1].1[i] as f32) as f64)
            .collect();
        assert_same(&out_db[2], &want, &format!("double buffered, n = {n}"));
        assert_same(&out_sb[2], &want, &format!("single buffered, n = {n}"));
        // Fewer cycles once there are two tiles to overlap.
        if n > 4096 {
            assert!(
                run_db.cycles < run_sb.cycles,
                "n = {n}: {} vs {}",
                run_db.cycles,
                run_sb.cycles
            );
        }
        // Deterministic.
        assert_eq!(
            run_verified(&dev, &db, &inputs, &[n as i64]).unwrap().1,
            run_db
        );
    }
    let inputs = vadd_inputs(100_000);
    let (_, d) = run_verified(&dev, &db, &inputs, &[100_000]).unwrap();
    let (_, s) = run_verified(&dev, &sb, &inputs, &[100_000]).unwrap();
    // With loads dominating, double buffering hides nearly all of V and MTE3.
    assert!(d.cycles < s.cycles * 4 / 5, "{d}\n{s}");
}

#[test]
fn softmax_example_matches_the_reference() {
    let dev = device();
    let v = dev.verify(example("softmax_rows.s")).unwrap();
    for (rows, cols) in [(16usize, 1000usize), (1, 1), (3, 50), (16, 1024), (7, 783)] {
        let x: Vec<f64> = (0..16 * 1024)
            .map(|i| to_f(DType::F32, ((i * 7919) % 1000) as f64 / 100.0 - 5.0))
            .collect();
        let (outs, _) = run_verified(
            &dev,
            &v,
            &[(DType::F32, x.clone()), (DType::F32, vec![0.0; 16 * 1024])],
            &[rows as i64, cols as i64],
        )
        .unwrap();
        let want = crate::reference::softmax(&x[..rows * cols], cols);
        for (i, w) in want.iter().enumerate() {
            let g = outs[1][i];
            assert!(
                (g - w).abs() <= 1e-6 * (1.0 + w.abs()) + 1e-7 * w.abs().max(1e-30),
                "[{rows}x{cols}] y[{i}] = {g}, expected {w}"
            );
        }
    }
}

#[test]
fn matmul_example_matches_the_reference() {
    let dev = device();
    let v = dev.verify(example("matmul_relu_f16.s")).unwrap();
    let a: Vec<f64> = (0..4096)
        .map(|i| to_f(DType::F16, ((i * 31) % 17) as f64 / 8.0 - 1.0))
        .collect();
    let b: Vec<f64> = (0..4096)
        .map(|i| to_f(DType::F16, ((i * 13) % 11) as f64 / 4.0 - 1.2))
        .collect();
    let (outs, r) = run_verified(
        &dev,
        &v,
        &[
            (DType::F16, a.clone()),
            (DType::F16, b.clone()),
            (DType::F32, vec![0.0; 4096]),
        ],
        &[],
    )
    .unwrap();
    let want: Vec<f64> = cube_ref(&a, &b, 64, 64, 64, &[])
        .into_iter()
        .map(|x| x.max(0.0))
        .collect();
    assert_same(&outs[2], &want, "matmul_relu_f16");
    // The cube's 4x4x4 blocks plus the two flags that M takes part in.
    let c = &dev.config().costs;
    assert_eq!(r.busy_of(Pipe::M), c.cube_startup + 64 + 2 * c.flag);
}

#[test]
fn strided_loads_and_stores_transpose() {
    // Load a 3x4 i32 matrix transposed (ldx: row stride 1, column stride 4)
    // into a 4x3 tile, then store it transposed back (stx) elsewhere.
    let src: Vec<f64> = (0..12).map(|i| i as f64).collect();
    let text = ".kernel t aiv\n.gm s i32 [3,4] in\n.gm t i32 [4,3] out\n.gm u i32 [3,4] out
    ldx i32, 4x8, 4, 3, @0x0, s, 0, 1, 4
    setf mte2, mte3, 0
    waitf mte2, mte3, 0
    st i32, 4x8, 4, 3, t, 0, 3, @0x0
    stx i32, 4x8, 4, 3, u, 0, 1, 4, @0x0
    end\n";
    let (outs, _) = run(
        &device(),
        text,
        &[
            (DType::I32, src.clone()),
            (DType::I32, vec![-1.0; 12]),
            (DType::I32, vec![-1.0; 12]),
        ],
        &[],
    )
    .unwrap();
    let want_t: Vec<f64> = (0..12).map(|i| ((i % 3) * 4 + i / 3) as f64).collect();
    assert_eq!(outs[1], want_t, "transposed");
    assert_eq!(outs[2], src, "transposed twice");
    // Out of bounds through a column stride faults.
    let bad =
        ".kernel t aiv\n.gm s i32 [3,4] in\n    ldx i32, 4x8, 4, 3, @0x0, s, 0, 1, 7\n    end\n";
    let msg = fault_of(bad, &[(DType::I32, src)], &[]);
    assert!(
        msg.contains("strided GM access to argument 0") && msg.contains("at pc 0"),
        "{msg}"
    );
}

#[test]
fn ldg_gathers_by_index_and_faults_outside_the_axis() {
    // s = arange(24) as a 4x6 f32 matrix; o[c] = s[idx[c], 2] (offset 2,
    // gstride 6, len 4): a column read at data-dependent rows.
    let s: Vec<f64> = (0..24).map(|i| i as f64).collect();
    let program = |itype: &str, istride: u32| {
        format!(
            ".kernel t aiv\n.gm s f32 [24] in\n.gm ix {itype} [5] in\n.gm o f32 [8] out
    ld {itype}, 1x8, 1, 5, @0x0, ix, 0, 0
    ldg f32, 1x8, 1, 5, @0x100, s, 2, 0, {itype}, @0x0, {istride}, 6, 4
    barrier
    st f32, 1x8, 1, 5, o, 0, 0, @0x100
    end\n"
        )
    };
    let dev = device();
    for itype in [DType::I64, DType::I32] {
        let text = program(&itype.to_string(), 1);
        let ix = vec![3.0, 0.0, 2.0, 1.0, 3.0];
        let (outs, _) = run(
            &dev,
            &text,
            &[
                (DType::F32, s.clone()),
                (itype, ix),
                (DType::F32, vec![-1.0; 8]),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(
            outs[2],
            [20.0, 2.0, 14.0, 8.0, 20.0, -1.0, -1.0, -1.0],
            "{itype}"
        );
    }
    // istride 0: the first index for every column (an index constant
    // along the row).
    let (outs, _) = run(
        &dev,
        &program("i64", 0),
        &[
            (DType::F32, s.clone()),
            (DType::I64, vec![1.0, 9.0, 9.0, 9.0, 9.0]),
            (DType::F32, vec![-1.0; 8]),
        ],
        &[],
    )
    .unwrap();
    assert_eq!(outs[2][..5], [8.0; 5]);
    // Outside 0..4, negative too: a fault naming the index, and the device
    // stays usable.
    for bad in [4.0, -1.0] {
        let err = run(
            &dev,
            &program("i64", 1),
            &[
                (DType::F32, s.clone()),
                (DType::I64, vec![0.0, bad, 1.0, 1.0, 1.0]),
                (DType::F32, vec![-1.0; 8]),
            ],
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(&format!("gather index {bad} is out of range")),
            "{err}"
        );
    }
    // A float index type is rejected before anything runs.
    let text = program("i64", 1).replace("5, @0x100, s, 2, 0, i64", "5, @0x100, s, 2, 0, f32");
    let p = asm::assemble(&text).unwrap();
    assert!(dev.verify(p).is_err());
}

/// An `ldl1c` geometry: image `[c, h, w]`, then the window `kh, kw, sh,
/// sw, top, left, bottom, right, dh, dw, groups`.
#[derive(Clone, Copy, Debug)]
struct Geom {
    c: i64,
    h: i64,
    w: i64,
    win: [i64; 11],
}

impl Geom {
    fn regs(&self) -> [i64; 14] {
        let mut r = [0; 14];
        r[..3].copy_from_slice(&[self.c, self.h, self.w]);
        r[3..].copy_from_slice(&self.win);
        r
    }

    /// Output height and width, by the usual formula.
    fn out(&self) -> (i64, i64) {
        let [kh, kw, sh, sw, t, l, b, r, dh, dw, _] = self.win;
        (
            (self.h + t + b - (kh - 1) * dh - 1) / sh + 1,
            (self.w + l + r - (kw - 1) * dw - 1) / sw + 1,
        )
    }
}

/// A program that loads rows `row..row+rows`, columns `col..col+cols` of
/// the windows of group `group` with `ldl1c` (geometry `geom` in r18..,
/// or at register `at`) into a 16x16 tile and stores it through the cube
/// (times an identity).
fn ldl1c_program(g: &Geom, n: usize, at: usize, rc: [i64; 4], group: i64) -> String {
    let [row, col, rows, cols] = rc;
    let mut text =
        format!(".kernel t aic\n.gm x f32 [{n}] in\n.gm e f32 [16,16] in\n.gm o f32 [16,16] out\n");
    for (i, v) in g.regs().iter().enumerate().filter(|(i, _)| at + i < 32) {
        text += &format!("    movi r{}, {v}\n", at + i);
    }
    text += &format!(
        "    ldl1c f32, 16x16, {rows}, {cols}, @0x0, x, 0, {row}, {col}, {group}, r{at}
    ldl1 f32, 16x16, 16, 16, @0x10000, e, 0, 16
    setf mte2, mte1, 0
    waitf mte2, mte1, 0
    mvl0a f32, 16x16, @0x0, @0x0
    mvl0b f32, 16x16, @0x0, @0x10000
    setf mte1, m, 0
    waitf mte1, m, 0
    mmad f32, 16x16x16, @0x0, @0x0, @0x0, 0
    setf m, fixp, 0
    waitf m, fixp, 0
    fixp f32, 16x16, 16, 16, o, 0, 16, @0x0, 0
    end\n"
    );
    text
}

fn ldl1c_gm(img: &[f64]) -> Vec<(DType, Vec<f64>)> {
    let eye: Vec<f64> = (0..256)
        .map(|i| f64::from(u8::from(i / 16 == i % 16)))
        .collect();
    vec![
        (DType::F32, img.to_vec()),
        (DType::F32, eye),
        (DType::F32, vec![-1.0; 256]),
    ]
}

#[test]
fn ldl1c_loads_an_images_windows_and_faults_outside_them() {
    // Each geometry's tile, expected by the definition (window p at
    // output (p / ow, p % ow), column q over the group's channels, then
    // the window's rows and columns), independently of the simulator.
    let cases: [(Geom, [i64; 4], i64); 6] = [
        // 2x2 windows, stride 1, padding 1: 4x5 windows of 8 values.
        (
            Geom {
                c: 2,
                h: 3,
                w: 4,
                win: [2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1],
            },
            [3, 2, 14, 6],
            0,
        ),
        // Dilated 2x2 taps 2 apart.
        (
            Geom {
                c: 2,
                h: 5,
                w: 6,
                win: [2, 2, 1, 1, 0, 0, 0, 0, 2, 2, 1],
            },
            [0, 0, 12, 8],
            0,
        ),
        // Stride 2 down, 1 across; asymmetric padding.
        (
            Geom {
                c: 1,
                h: 5,
                w: 4,
                win: [3, 2, 2, 1, 1, 0, 2, 1, 1, 1, 1],
            },
            [1, 0, 11, 6],
            0,
        ),
        // Two groups of two channels: group 1 reads channels 2 and 3.
        (
            Geom {
                c: 4,
                h: 3,
                w: 3,
                win: [2, 2, 1, 1, 0, 1, 1, 0, 1, 1, 2],
            },
            [0, 0, 9, 8],
            1,
        ),
        // Depthwise (groups = channels), a mix of everything.
        (
            Geom {
                c: 3,
                h: 6,
                w: 5,
                win: [2, 3, 2, 1, 1, 2, 0, 1, 2, 1, 3],
            },
            [0, 1, 15, 5],
            2,
        ),
        // Depthwise, group 0.
        (
            Geom {
                c: 3,
                h: 6,
                w: 5,
                win: [2, 3, 2, 1, 1, 2, 0, 1, 2, 1, 3],
            },
            [2, 0, 10, 6],
            0,
        ),
    ];
    let dev = device();
    for (g, rc, group) in cases {
        let [row, col, rows, cols] = rc;
        let n = (g.c * g.h * g.w) as usize;
        let img: Vec<f64> = (0..n).map(|i| i as f64 + 1.0).collect();
        let (outs, _) = run(
            &dev,
            &ldl1c_program(&g, n, 18, rc, group),
            &ldl1c_gm(&img),
            &[],
        )
        .unwrap_or_else(|e| panic!("{g:?}: {e}"));
        let [kh, kw, sh, sw, t, l, _, _, dh, dw, groups] = g.win;
        let (oh, ow) = g.out();
        let gc = g.c / groups;
        assert!(row + rows <= oh * ow && col + cols <= gc * kh * kw, "{g:?}");
        let mut want = vec![0.0; 256];
        for r in 0..rows {
            let (y, x) = ((row + r) / ow, (row + r) % ow);
            for cc in 0..cols {
                let q = col + cc;
                let (ci, i, j) = (group * gc + q / (kh * kw), q % (kh * kw) / kw, q % kw);
                let (iy, ix) = (y * sh + i * dh - t, x * sw + j * dw - l);
                if (0..g.h).contains(&iy) && (0..g.w).contains(&ix) {
                    want[(r * 16 + cc) as usize] = img[((ci * g.h + iy) * g.w + ix) as usize];
                }
            }
        }
        assert_eq!(outs[2], want, "{g:?}");
    }
    // A padding-only window reads zeros (hand-checked): a 1x1 image, a
    // 3x3 window with padding 1 has one window whose centre is the pixel.
    let g = Geom {
        c: 1,
        h: 1,
        w: 1,
        win: [3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    };
    let (outs, _) = run(
        &dev,
        &ldl1c_program(&g, 1, 18, [0, 0, 1, 9], 0),
        &ldl1c_gm(&[7.0]),
        &[],
    )
    .unwrap();
    assert_eq!(&outs[2][..9], &[0., 0., 0., 0., 7., 0., 0., 0., 0.]);
}

#[test]
fn ldl1c_traps_on_a_bad_geometry() {
    // Every register of the block is range-checked: a fault with a
    // message, never a panic or a read outside the image.
    let good = Geom {
        c: 4,
        h: 3,
        w: 4,
        win: [2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 2],
    };
    let n = 48;
    let img = ldl1c_gm(&vec![1.0; n]);
    let with = |i: usize, v: i64| {
        let mut g = good;
        let mut r = g.regs();
        r[i] = v;
        (g.c, g.h, g.w) = (r[0], r[1], r[2]);
        g.win.copy_from_slice(&r[3..]);
        g
    };
    let cases: Vec<(Geom, [i64; 4], i64, usize, &str)> = vec![
        (with(0, -4), [0, 0, 4, 4], 0, 18, "channels -4 is negative"),
        (with(1, -1), [0, 0, 4, 4], 0, 18, "height -1 is negative"),
        (with(3, -2), [0, 0, 4, 4], 0, 18, "kh -2 is out of range"),
        (with(5, 0), [0, 0, 4, 4], 0, 18, "row stride is 0"),
        (with(6, 0), [0, 0, 4, 4], 0, 18, "column stride is 0"),
        (
            with(8, -1),
            [0, 0, 4, 4],
            0,
            18,
            "left padding -1 is out of range",
        ),
        (with(11, 0), [0, 0, 4, 4], 0, 18, "row dilation is 0"),
        (with(12, 0), [0, 0, 4, 4], 0, 18, "column dilation is 0"),
        (with(13, 0), [0, 0, 4, 4], 0, 18, "groups is 0"),
        (
            with(13, 3),
            [0, 0, 4, 4],
            0,
            18,
            "groups 3 do not divide the 4 channels",
        ),
        (
            with(3, 1 << 33),
            [0, 0, 4, 4],
            0,
            18,
            "kh 8589934592 is out of range",
        ),
        // A window larger than the padded image.
        (
            with(3, 9),
            [0, 0, 4, 4],
            0,
            18,
            "does not fit its 3 x 4 image",
        ),
        (with(11, 1 << 31), [0, 0, 4, 4], 0, 18, "does not fit"),
        // The image past its GM argument (5 channels of 3x4 > 48).
        (
            with(0, 6),
            [0, 0, 4, 4],
            0,
            18,
            "goes outside GM argument 0",
        ),
        (
            with(2, i64::MAX),
            [0, 0, 4, 4],
            0,
            18,
            "goes outside GM argument 0",
        ),
        // Addressing: a group past the last, rows or columns past the
        // windows (4x5 windows; 2 channels x 4 taps per group).
        (good, [0, 0, 4, 4], 2, 18, "group 2 of 2 groups"),
        (good, [0, 0, 4, 4], -1, 18, "group -1 is negative"),
        (good, [18, 0, 4, 4], 0, 18, "leave the 20 x 8 windows"),
        (good, [0, 5, 4, 4], 0, 18, "leave the 20 x 8 windows"),
        // The block past the last register.
        (
            good,
            [0, 0, 4, 4],
            0,
            20,
            "geometry r20..r33 past the registers",
        ),
    ];
    for (g, rc, group, at, want) in cases {
        let msg = fault_of(&ldl1c_program(&g, n, at, rc, group), &img, &[]);
        assert!(msg.contains(want), "{g:?} {rc:?} {group}: {msg}");
    }
}
