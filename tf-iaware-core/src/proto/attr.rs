//! Encoders for the nodes tf-iaware adds to a GraphDef: a [`NodeDef`] from its name, op, inputs
//! and attributes, and each kind of serialized `AttrValue` those attributes take (a type, an
//! integer, a string, a shape, a constant tensor). One place for the wire details, so that the
//! graph transforms (`parallel::replicate`, `parallel::updates`) read as graph code.

use prost::Message;

use super::graph::Dim;
use super::{AttrValue, NodeDef, TensorAttr, TensorProto, TensorShapeProto};

/// `DT_FLOAT` (types.proto).
pub(crate) const DT_FLOAT: i32 = 1;
/// `DT_DOUBLE`.
pub(crate) const DT_DOUBLE: i32 = 2;
/// `DT_INT32`.
pub(crate) const DT_INT32: i32 = 3;
/// `DT_INT64`.
pub(crate) const DT_INT64: i32 = 9;
/// `DT_BOOL`.
pub(crate) const DT_BOOL: i32 = 10;
/// `DT_HALF`.
pub(crate) const DT_HALF: i32 = 19;

/// A node named `name` running `op` on `input` (`"node:k"`, `"^node"`), with `attrs` (name,
/// serialized `AttrValue`); no device.
pub(crate) fn node(
    name: &str,
    op: &str,
    input: Vec<String>,
    attrs: Vec<(&str, Vec<u8>)>,
) -> NodeDef {
    let mut n = NodeDef {
        name: name.into(),
        op: op.into(),
        input,
        ..NodeDef::default()
    };
    for (k, v) in attrs {
        n.attr.insert(k.into(), v);
    }
    n
}

/// Attribute `name` of `node`, decoded; `None` when absent or not an `AttrValue`.
pub(crate) fn get(node: &NodeDef, name: &str) -> Option<AttrValue> {
    AttrValue::decode(node.attr.get(name)?.as_slice()).ok()
}

/// A `type` attribute (`DT_*` value `t`).
pub(crate) fn dtype(t: i32) -> Vec<u8> {
    AttrValue {
        r#type: Some(t),
        ..AttrValue::default()
    }
    .encode_to_vec()
}

/// An `int` attribute.
pub(crate) fn int(i: i64) -> Vec<u8> {
    AttrValue {
        i: Some(i),
        ..AttrValue::default()
    }
    .encode_to_vec()
}

/// A `string` attribute.
pub(crate) fn string(s: &str) -> Vec<u8> {
    AttrValue {
        s: Some(s.as_bytes().to_vec()),
        ..AttrValue::default()
    }
    .encode_to_vec()
}

/// A `shape` attribute.
pub(crate) fn shape(shape: TensorShapeProto) -> Vec<u8> {
    AttrValue {
        shape: Some(shape),
        ..AttrValue::default()
    }
    .encode_to_vec()
}

/// A shape of known rank with sizes `dims` (`-1` for an unknown size).
pub(crate) fn shape_of(dims: &[i64]) -> TensorShapeProto {
    TensorShapeProto {
        dim: dims
            .iter()
            .map(|&size| Dim {
                size,
                name: String::new(),
            })
            .collect(),
        unknown_rank: false,
    }
}

/// A `tensor` attribute holding `tensor`.
pub(crate) fn tensor(tensor: TensorProto) -> Vec<u8> {
    TensorAttr {
        tensor: Some(tensor),
    }
    .encode_to_vec()
}

/// A `tensor` attribute: an int32 vector of `values` (each truncated to 32 bits).
pub(crate) fn int32_vector(values: &[i64]) -> Vec<u8> {
    tensor(TensorProto {
        dtype: DT_INT32,
        tensor_shape: Some(shape_of(&[values.len() as i64])),
        int_val: values.iter().map(|&v| v as i32).collect(),
        ..TensorProto::default()
    })
}

/// A `tensor` attribute: an int32 scalar (truncated to 32 bits).
pub(crate) fn int32_scalar(v: i64) -> Vec<u8> {
    tensor(TensorProto {
        dtype: DT_INT32,
        tensor_shape: Some(TensorShapeProto::default()),
        int_val: vec![v as i32],
        ..TensorProto::default()
    })
}

/// A `tensor` attribute: an integer scalar of type `dtype` (`DT_INT64`, otherwise `DT_INT32`,
/// truncated to 32 bits).
pub(crate) fn int_scalar(dtype: i32, v: i64) -> Vec<u8> {
    let mut t = TensorProto {
        dtype,
        tensor_shape: Some(TensorShapeProto::default()),
        ..TensorProto::default()
    };
    match dtype {
        DT_INT64 => t.int64_val.push(v),
        _ => t.int_val.push(v as i32),
    }
    tensor(t)
}

/// A `tensor` attribute: a float scalar of type `dtype` (`DT_DOUBLE`, `DT_HALF`, otherwise
/// `DT_FLOAT`'s encoding) holding `v`.
pub(crate) fn float_scalar(dtype: i32, v: f64) -> Vec<u8> {
    let mut t = TensorProto {
        dtype,
        tensor_shape: Some(TensorShapeProto::default()),
        ..TensorProto::default()
    };
    match dtype {
        DT_DOUBLE => t.double_val.push(v),
        DT_HALF => t.half_val.push(i32::from(f32_to_f16_bits(v as f32))),
        _ => t.float_val.push(v as f32),
    }
    tensor(t)
}

/// IEEE 754 binary16 bits of `x`, rounded to nearest; values too small for a normal half are
/// flushed to a signed zero and values too large become infinity (the weights written here are
/// in (0, 1]).
pub(crate) fn f32_to_f16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let mant = bits & 0x7f_ffff;
    if exp <= 0 {
        return sign;
    }
    if exp >= 31 {
        return sign | 0x7c00;
    }
    let rounded = (mant + 0x1000) >> 13;
    sign | (((exp as u32) << 10) + rounded) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_weights_are_binary16() {
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(0.5), 0x3800);
        assert_eq!(f32_to_f16_bits(0.375), 0x3600);
        assert_eq!(f32_to_f16_bits(-2.0), 0xc000);
    }

    #[test]
    fn encoded_attributes_decode_to_what_was_written() {
        let n = node(
            "n",
            "Const",
            vec!["a:1".into(), "^b".into()],
            vec![
                ("T", dtype(DT_INT64)),
                ("k", int(-3)),
                ("s", string("MEAN")),
            ],
        );
        assert_eq!(n.input, ["a:1", "^b"]);
        assert_eq!(get(&n, "T").and_then(|a| a.r#type), Some(DT_INT64));
        assert_eq!(get(&n, "k").and_then(|a| a.i), Some(-3));
        assert_eq!(get(&n, "s").and_then(|a| a.s), Some(b"MEAN".to_vec()));
        assert!(get(&n, "missing").is_none());
        let v = TensorAttr::decode(int32_vector(&[4, -1, 7]).as_slice()).unwrap();
        let t = v.tensor.unwrap();
        assert_eq!(t.int_val, [4, -1, 7]);
        assert_eq!(t.tensor_shape.unwrap().dims(), Some(vec![3]));
        let d = TensorAttr::decode(float_scalar(DT_DOUBLE, 0.25).as_slice()).unwrap();
        assert_eq!(d.tensor.unwrap().double_val, [0.25]);
        let h = TensorAttr::decode(float_scalar(DT_HALF, 0.5).as_slice()).unwrap();
        assert_eq!(h.tensor.unwrap().half_val, [0x3800]);
    }
}
