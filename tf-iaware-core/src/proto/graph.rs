//! `GraphDef`, `NodeDef` and the parts of `AttrValue` that analysis reads.

use std::collections::BTreeMap;

/// `tensorflow.GraphDef` (graph.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphDef {
    /// `node`: the ops of the graph.
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeDef>,
    /// `FunctionDefLibrary`, carried opaquely.
    #[prost(bytes = "vec", optional, tag = "2")]
    pub library: Option<Vec<u8>>,
    /// Deprecated single version number.
    #[prost(int32, tag = "3")]
    pub version: i32,
    /// `VersionDef`, carried opaquely.
    #[prost(bytes = "vec", optional, tag = "4")]
    pub versions: Option<Vec<u8>>,
    /// `GraphDebugInfo`, carried opaquely.
    #[prost(bytes = "vec", optional, tag = "5")]
    pub debug_info: Option<Vec<u8>>,
}

/// `tensorflow.NodeDef` (node_def.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeDef {
    /// `name`: unique name of the node.
    #[prost(string, tag = "1")]
    pub name: String,
    /// `op`: op type (`MatMul`, …).
    #[prost(string, tag = "2")]
    pub op: String,
    /// `"node:out"`, `"node"` (output 0) or `"^node"` (control input).
    #[prost(string, repeated, tag = "3")]
    pub input: Vec<String>,
    /// Requested device string; the only field a placement edits.
    #[prost(string, tag = "4")]
    pub device: String,
    /// Attribute name → serialized `AttrValue`, carried opaquely (decode with [`AttrValue`]).
    #[prost(btree_map = "string, bytes", tag = "5")]
    pub attr: BTreeMap<String, Vec<u8>>,
    /// `NodeDef.ExperimentalDebugInfo`, carried opaquely.
    #[prost(bytes = "vec", optional, tag = "6")]
    pub experimental_debug_info: Option<Vec<u8>>,
    /// `FullTypeDef`, carried opaquely.
    #[prost(bytes = "vec", optional, tag = "7")]
    pub experimental_type: Option<Vec<u8>>,
}

/// `tensorflow.AttrValue` (attr_value.proto), the variants analysis needs; others are skipped.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttrValue {
    /// `list`: a list value.
    #[prost(message, optional, tag = "1")]
    pub list: Option<ListValue>,
    /// `s`: a string (bytes).
    #[prost(bytes = "vec", optional, tag = "2")]
    pub s: Option<Vec<u8>>,
    /// `i`: an integer.
    #[prost(int64, optional, tag = "3")]
    pub i: Option<i64>,
    /// `f`: a float.
    #[prost(float, optional, tag = "4")]
    pub f: Option<f32>,
    /// `b`: a boolean.
    #[prost(bool, optional, tag = "5")]
    pub b: Option<bool>,
    /// `DataType` enum value.
    #[prost(int32, optional, tag = "6")]
    pub r#type: Option<i32>,
    /// `shape`: a shape.
    #[prost(message, optional, tag = "7")]
    pub shape: Option<TensorShapeProto>,
}

/// `AttrValue.ListValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListValue {
    /// `s`: strings (bytes).
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub s: Vec<Vec<u8>>,
    /// `i`: integers.
    #[prost(int64, repeated, tag = "3")]
    pub i: Vec<i64>,
    /// `f`: floats.
    #[prost(float, repeated, tag = "4")]
    pub f: Vec<f32>,
    /// `b`: booleans.
    #[prost(bool, repeated, tag = "5")]
    pub b: Vec<bool>,
    /// `type`: `DataType` enum values.
    #[prost(int32, repeated, tag = "6")]
    pub r#type: Vec<i32>,
    /// `shape`: shapes.
    #[prost(message, repeated, tag = "7")]
    pub shape: Vec<TensorShapeProto>,
}

/// `tensorflow.TensorShapeProto` (tensor_shape.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    /// `dim`: the dimensions, outermost first.
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
    /// `unknown_rank`: the rank is unknown (`dim` is then empty).
    #[prost(bool, tag = "3")]
    pub unknown_rank: bool,
}

/// `TensorShapeProto.Dim`; `size == -1` is unknown.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dim {
    /// `size`: the size of the dimension (`-1` unknown).
    #[prost(int64, tag = "1")]
    pub size: i64,
    /// `name`: optional name of the dimension.
    #[prost(string, tag = "2")]
    pub name: String,
}

impl TensorShapeProto {
    /// Dimensions, or `None` for unknown rank (unknown sizes are `-1`).
    pub(crate) fn dims(&self) -> Option<Vec<i64>> {
        (!self.unknown_rank).then(|| self.dim.iter().map(|d| d.size).collect())
    }
}
