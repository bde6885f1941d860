//! `GraphDef`, `NodeDef` and the parts of `AttrValue` that analysis reads.

use std::collections::BTreeMap;

/// `tensorflow.GraphDef` (graph.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphDef {
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
    #[prost(string, tag = "1")]
    pub name: String,
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
    #[prost(message, optional, tag = "1")]
    pub list: Option<ListValue>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub s: Option<Vec<u8>>,
    #[prost(int64, optional, tag = "3")]
    pub i: Option<i64>,
    #[prost(float, optional, tag = "4")]
    pub f: Option<f32>,
    #[prost(bool, optional, tag = "5")]
    pub b: Option<bool>,
    /// `DataType` enum value.
    #[prost(int32, optional, tag = "6")]
    pub r#type: Option<i32>,
    #[prost(message, optional, tag = "7")]
    pub shape: Option<TensorShapeProto>,
}

/// `AttrValue.ListValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListValue {
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub s: Vec<Vec<u8>>,
    #[prost(int64, repeated, tag = "3")]
    pub i: Vec<i64>,
    #[prost(float, repeated, tag = "4")]
    pub f: Vec<f32>,
    #[prost(bool, repeated, tag = "5")]
    pub b: Vec<bool>,
    #[prost(int32, repeated, tag = "6")]
    pub r#type: Vec<i32>,
    #[prost(message, repeated, tag = "7")]
    pub shape: Vec<TensorShapeProto>,
}

/// `tensorflow.TensorShapeProto` (tensor_shape.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
    #[prost(bool, tag = "3")]
    pub unknown_rank: bool,
}

/// `TensorShapeProto.Dim`; `size == -1` is unknown.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dim {
    #[prost(int64, tag = "1")]
    pub size: i64,
    #[prost(string, tag = "2")]
    pub name: String,
}

impl TensorShapeProto {
    /// Dimensions, or `None` for unknown rank (unknown sizes are `-1`).
    pub(crate) fn dims(&self) -> Option<Vec<i64>> {
        (!self.unknown_rank).then(|| self.dim.iter().map(|d| d.size).collect())
    }
}
