//! ONNX's narrow element types (float8, float4, e8m0, int4, uint4, int2,
//! uint2), which tilejit has no dtype for: the importer carries each on a
//! wider dtype whose values lie exactly on the narrow type's grid (float8,
//! float4 and e8m0 on f32; int4 and int2 on i8; uint4 and uint2 on u8).
//! This file decodes their stored bytes (one byte per float8 or e8m0
//! element; 4-bit and 2-bit elements packed, lowest bits first) into the
//! carrier, and works out at load which values of a graph are of a narrow
//! type (declared inputs, outputs, `value_info`, initializers, and the
//! outputs of `Cast`, `CastLike`, `QuantizeLinear` and of layout ops on
//! such values), so `CastLike` and `QuantizeLinear` know their target.

use onnx_protobuf::{type_proto, GraphProto, ValueInfoProto};
use std::collections::HashMap;
use tilejit_ir::DType;

/// An ONNX element type tilejit carries on a wider dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Narrow {
    E4M3FN,
    E4M3FNUZ,
    E5M2,
    E5M2FNUZ,
    UInt4,
    Int4,
    E2M1,
    E8M0,
    UInt2,
    Int2,
}

/// The layout of a small float type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FloatFormat {
    /// Exponent and mantissa bits.
    pub ebits: u32,
    pub mbits: u32,
    /// The exponent bias.
    pub bias: i32,
    /// The largest finite value.
    pub max: f64,
    /// What an overflow (a value rounding past `max`) becomes without
    /// saturation: `Some(inf)` or `Some(NaN)`; `None`: the type saturates
    /// always (E2M1 has neither).
    pub overflow: Option<f64>,
    /// FNUZ types: no negative zero, one NaN (`0x80`).
    pub fnuz: bool,
}

impl Narrow {
    /// The type of an ONNX `TensorProto.DataType` code, if narrow.
    pub fn from_code(code: i32) -> Option<Narrow> {
        Some(match code {
            17 => Narrow::E4M3FN,
            18 => Narrow::E4M3FNUZ,
            19 => Narrow::E5M2,
            20 => Narrow::E5M2FNUZ,
            21 => Narrow::UInt4,
            22 => Narrow::Int4,
            23 => Narrow::E2M1,
            24 => Narrow::E8M0,
            25 => Narrow::UInt2,
            26 => Narrow::Int2,
            _ => return None,
        })
    }

    /// ONNX's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Narrow::E4M3FN => "FLOAT8E4M3FN",
            Narrow::E4M3FNUZ => "FLOAT8E4M3FNUZ",
            Narrow::E5M2 => "FLOAT8E5M2",
            Narrow::E5M2FNUZ => "FLOAT8E5M2FNUZ",
            Narrow::UInt4 => "UINT4",
            Narrow::Int4 => "INT4",
            Narrow::E2M1 => "FLOAT4E2M1",
            Narrow::E8M0 => "FLOAT8E8M0",
            Narrow::UInt2 => "UINT2",
            Narrow::Int2 => "INT2",
        }
    }

    /// The dtype it is carried on.
    pub fn carrier(self) -> DType {
        match self {
            Narrow::Int4 | Narrow::Int2 => DType::I8,
            Narrow::UInt4 | Narrow::UInt2 => DType::U8,
            _ => DType::F32,
        }
    }

    /// Bits per element as stored.
    pub fn bits(self) -> usize {
        match self {
            Narrow::UInt4 | Narrow::Int4 | Narrow::E2M1 => 4,
            Narrow::UInt2 | Narrow::Int2 => 2,
            _ => 8,
        }
    }

    /// The value range of an integer type.
    pub fn int_range(self) -> Option<(i64, i64)> {
        Some(match self {
            Narrow::UInt4 => (0, 15),
            Narrow::Int4 => (-8, 7),
            Narrow::UInt2 => (0, 3),
            Narrow::Int2 => (-2, 1),
            _ => return None,
        })
    }

    /// The layout of a float8 or float4 type (not E8M0).
    pub fn float_format(self) -> Option<FloatFormat> {
        let f = |ebits, mbits, bias, max, overflow, fnuz| FloatFormat {
            ebits,
            mbits,
            bias,
            max,
            overflow,
            fnuz,
        };
        Some(match self {
            Narrow::E4M3FN => f(4, 3, 7, 448.0, Some(f64::NAN), false),
            Narrow::E4M3FNUZ => f(4, 3, 8, 240.0, Some(f64::NAN), true),
            Narrow::E5M2 => f(5, 2, 15, 57344.0, Some(f64::INFINITY), false),
            Narrow::E5M2FNUZ => f(5, 2, 16, 57344.0, Some(f64::NAN), true),
            Narrow::E2M1 => f(2, 1, 1, 6.0, None, false),
            _ => return None,
        })
    }

    /// The value of one stored element (its low `bits()` bits), as the
    /// carrier's little-endian bytes would hold it: an f32 for the float
    /// types, the integer for the others.
    pub fn value(self, code: u8) -> f64 {
        if let Some(f) = self.float_format() {
            return float_value(f, code);
        }
        match self {
            Narrow::E8M0 => match code {
                0xFF => f64::NAN,
                e => 2f64.powi(e as i32 - 127),
            },
            Narrow::Int4 => ((code << 4) as i8 >> 4) as f64,
            Narrow::Int2 => ((code << 6) as i8 >> 6) as f64,
            Narrow::UInt4 => (code & 0xF) as f64,
            _ => (code & 0x3) as f64,
        }
    }

    /// How many stored bytes `numel` elements take.
    pub fn stored_bytes(self, numel: usize) -> usize {
        let per = 8 / self.bits();
        numel.div_ceil(per)
    }

    /// Decodes stored bytes (packed for 4-bit and 2-bit types, lowest bits
    /// first) into the carrier's little-endian bytes.
    pub fn decode(self, stored: &[u8], numel: usize) -> Result<Vec<u8>, String> {
        let need = self.stored_bytes(numel);
        if stored.len() != need {
            return Err(format!(
                "{} data holds {} bytes, the shape needs {need}",
                self.name(),
                stored.len()
            ));
        }
        let bits = self.bits();
        let per = 8 / bits;
        let mask = ((1u16 << bits) - 1) as u8;
        let code = |i: usize| (stored[i / per] >> ((i % per) * bits)) & mask;
        Ok(match self.carrier() {
            DType::F32 => (0..numel)
                .flat_map(|i| (self.value(code(i)) as f32).to_le_bytes())
                .collect(),
            DType::I8 => (0..numel)
                .map(|i| self.value(code(i)) as i8 as u8)
                .collect(),
            _ => (0..numel).map(|i| self.value(code(i)) as u8).collect(),
        })
    }
}

/// The value of a float8 or float4 code.
fn float_value(f: FloatFormat, code: u8) -> f64 {
    let width = 1 + f.ebits + f.mbits;
    let code = if width == 8 {
        code
    } else {
        code & ((1u8 << width) - 1)
    };
    let emask = (1u8 << f.ebits) - 1;
    let mmask = (1u8 << f.mbits) - 1;
    let neg = code >> (width - 1) & 1 == 1;
    let e = (code >> f.mbits) & emask;
    let m = code & mmask;
    if f.fnuz && width == 8 && code == 0x80 {
        return f64::NAN;
    }
    match (f.overflow, f.fnuz) {
        // E5M2: IEEE-like specials.
        (Some(o), false) if o.is_infinite() && e == emask => {
            return match m {
                0 if neg => f64::NEG_INFINITY,
                0 => f64::INFINITY,
                _ => f64::NAN,
            }
        }
        // E4M3FN: S.1111.111 is NaN.
        (Some(o), false) if o.is_nan() && e == emask && m == mmask => return f64::NAN,
        _ => {}
    }
    let mag = if e == 0 {
        m as f64 * 2f64.powi(1 - f.bias - f.mbits as i32)
    } else {
        ((1u32 << f.mbits) + m as u32) as f64 * 2f64.powi(e as i32 - f.bias - f.mbits as i32)
    };
    if neg {
        -mag
    } else {
        mag
    }
}

/// The narrow element type a value info declares, if any.
fn declared(v: &ValueInfoProto) -> Option<Narrow> {
    match v.type_.as_ref()?.value.as_ref()? {
        type_proto::Value::TensorType(t) => Narrow::from_code(t.elem_type),
        _ => None,
    }
}

/// Ops whose outputs have their first input's element type.
const SAME_TYPE: &[&str] = &[
    "Identity",
    "Reshape",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Expand",
    "Tile",
    "Slice",
    "Gather",
    "Concat",
    "Split",
];

/// The narrow types of a graph's values, and per node the narrow types of
/// its inputs (`None` where an input is not narrow or not known to be).
pub(crate) fn infer(
    g: &GraphProto,
    nodes: &[super::model::Node],
) -> (HashMap<String, Narrow>, Vec<Vec<Option<Narrow>>>) {
    let mut types: HashMap<String, Narrow> = HashMap::new();
    let declared_values: HashMap<&str, Narrow> = g
        .input
        .iter()
        .chain(&g.output)
        .chain(&g.value_info)
        .filter_map(|v| declared(v).map(|t| (v.name.as_str(), t)))
        .collect();
    for (name, t) in &declared_values {
        types.insert(name.to_string(), *t);
    }
    for t in &g.initializer {
        if let Some(n) = Narrow::from_code(t.data_type) {
            types.insert(t.name.clone(), n);
        }
    }
    let mut per_node = Vec::with_capacity(nodes.len());
    for n in nodes {
        let ins: Vec<Option<Narrow>> = n.inputs.iter().map(|i| types.get(i).copied()).collect();
        let int_attr = |name: &str| match n.attrs.get(name) {
            Some(super::model::Attr::Int(v)) => Some(*v),
            _ => None,
        };
        let out: Option<Narrow> = match n.op.as_str() {
            "Cast" => int_attr("to").and_then(|c| Narrow::from_code(c as i32)),
            "CastLike" => ins.get(1).copied().flatten(),
            "QuantizeLinear" => ins
                .get(2)
                .copied()
                .flatten()
                .or_else(|| int_attr("output_dtype").and_then(|c| Narrow::from_code(c as i32))),
            op if SAME_TYPE.contains(&op) => ins.first().copied().flatten(),
            _ => None,
        };
        for o in n.outputs.iter().filter(|o| !o.is_empty()) {
            match declared_values.get(o.as_str()).copied().or(out) {
                Some(t) => types.insert(o.clone(), t),
                None => types.remove(o),
            };
        }
        per_node.push(ins);
    }
    (types, per_node)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code's value, against ml_dtypes 0.6.0
    /// (`np.arange(256, dtype=np.uint8).view(T).astype(np.float32)`),
    /// checked at a few codes per type.
    #[test]
    fn float_codes_match_ml_dtypes() {
        let cases: &[(Narrow, &[(u8, f64)])] = &[
            (
                Narrow::E4M3FN,
                &[
                    (0x00, 0.0),
                    (0x01, 0.001953125),
                    (0x08, 0.015625),
                    (0x38, 1.0),
                    (0x7E, 448.0),
                    (0xFE, -448.0),
                    (0x80, -0.0),
                    (0x53, 11.0),
                ],
            ),
            (
                Narrow::E4M3FNUZ,
                &[
                    (0x01, 0.0009765625),
                    (0x40, 1.0),
                    (0x7F, 240.0),
                    (0xFF, -240.0),
                ],
            ),
            (
                Narrow::E5M2,
                &[
                    (0x01, 1.52587890625e-05),
                    (0x3C, 1.0),
                    (0x7B, 57344.0),
                    (0x7C, f64::INFINITY),
                    (0xFC, f64::NEG_INFINITY),
                ],
            ),
            (
                Narrow::E5M2FNUZ,
                &[(0x01, 7.62939453125e-06), (0x40, 1.0), (0x7F, 57344.0)],
            ),
            (
                Narrow::E2M1,
                &[
                    (0x1, 0.5),
                    (0x2, 1.0),
                    (0x3, 1.5),
                    (0x5, 3.0),
                    (0x7, 6.0),
                    (0xC, -2.0),
                    (0x8, -0.0),
                ],
            ),
            (
                Narrow::E8M0,
                &[
                    (0, 5.877471754111438e-39),
                    (127, 1.0),
                    (130, 8.0),
                    (254, 1.7014118346046923e38),
                ],
            ),
        ];
        for (t, codes) in cases {
            for &(c, want) in codes.iter() {
                let got = t.value(c);
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{t:?} {c:#x}: {got} vs {want}"
                );
            }
        }
        for t in [
            Narrow::E4M3FN,
            Narrow::E5M2FNUZ,
            Narrow::E4M3FNUZ,
            Narrow::E8M0,
        ] {
            let nan = match t {
                Narrow::E4M3FN => 0x7F,
                Narrow::E8M0 => 0xFF,
                _ => 0x80,
            };
            assert!(t.value(nan).is_nan(), "{t:?}");
        }
        assert!(Narrow::E5M2.value(0x7D).is_nan());
    }

    /// Packed data, as `onnx.numpy_helper.from_array` packs it (low bits
    /// first; an odd count leaves the last high nibble unused).
    #[test]
    fn packed_decode() {
        // int4 [-8, 7, -1, 0, 3] -> bytes 0x78 0x0F 0x03.
        let b = Narrow::Int4
            .decode(&[0x78, 0x0F, 0x03], 5)
            .expect("decodes");
        assert_eq!(b, [(-8i8) as u8, 7, 0xFF, 0, 3]);
        let b = Narrow::UInt4.decode(&[0xF1], 2).expect("decodes");
        assert_eq!(b, [1, 15]);
        // int2 [-2, -1, 0, 1, 1] -> 0b01_00_11_10, 0b01.
        let b = Narrow::Int2
            .decode(&[0b0100_1110, 0b01], 5)
            .expect("decodes");
        assert_eq!(b, [(-2i8) as u8, 0xFF, 0, 1, 1]);
        let b = Narrow::UInt2.decode(&[0b1110_0100], 4).expect("decodes");
        assert_eq!(b, [0, 1, 2, 3]);
        let b = Narrow::E2M1.decode(&[0x7A], 2).expect("decodes");
        let f: Vec<f32> = b
            .chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(f, [-1.0, 6.0]);
        assert!(Narrow::Int4.decode(&[0x78], 5).is_err());
        assert!(Narrow::E4M3FN.decode(&[1, 2], 3).is_err());
    }
}
