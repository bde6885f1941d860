//! `OpDef` (op_def.proto), the parts that name an op's inputs and say whether it is stateful,
//! and the `TensorProto` of a small constant (tensor.proto) for ops tf-iaware adds to graphs.

use super::graph::TensorShapeProto;

/// `tensorflow.OpDef`: an op's signature in TensorFlow's registry.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OpDef {
    /// `name`: op type name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// `input_arg`: the input arguments, in order.
    #[prost(message, repeated, tag = "2")]
    pub input_arg: Vec<ArgDef>,
    /// The op has side effects or state (variables, random numbers, queues, asserts).
    #[prost(bool, tag = "17")]
    pub is_stateful: bool,
}

/// `OpDef.ArgDef`: one input (or output) argument.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ArgDef {
    /// `name`: argument name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Set when the argument is a list of `number_attr` tensors of one type.
    #[prost(string, tag = "5")]
    pub number_attr: String,
    /// Set when the argument is a list of tensors of the types in `type_list_attr`.
    #[prost(string, tag = "6")]
    pub type_list_attr: String,
}

/// `tensorflow.TensorProto` of a numeric constant (the fields of float and integer values).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// `DataType` enum value.
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    /// `tensor_shape`: the shape of the tensor.
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShapeProto>,
    /// Values as raw little-endian bytes (how Python writes most constants).
    #[prost(bytes = "vec", tag = "4")]
    pub tensor_content: Vec<u8>,
    /// `float_val`: float values (when `tensor_content` is empty).
    #[prost(float, repeated, tag = "5")]
    pub float_val: Vec<f32>,
    /// `double_val`: double values.
    #[prost(double, repeated, tag = "6")]
    pub double_val: Vec<f64>,
    /// `int_val`: int32 (and smaller integer) values.
    #[prost(int32, repeated, tag = "7")]
    pub int_val: Vec<i32>,
    /// `int64_val`: int64 values.
    #[prost(int64, repeated, tag = "10")]
    pub int64_val: Vec<i64>,
    /// `half_val`: float16 values as their bit patterns.
    #[prost(int32, repeated, tag = "13")]
    pub half_val: Vec<i32>,
}

/// An `AttrValue` holding a tensor (`value` of a `Const`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorAttr {
    /// `tensor`: the tensor value.
    #[prost(message, optional, tag = "8")]
    pub tensor: Option<TensorProto>,
}
