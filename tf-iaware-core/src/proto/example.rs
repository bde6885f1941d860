//! `Example`, `Features`, `Feature` and its lists (example.proto, feature.proto): the records of
//! `tf.train.Example` that TFRecord data sets hold.

use std::collections::BTreeMap;

/// `tensorflow.BytesList`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BytesList {
    /// `value`.
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub value: Vec<Vec<u8>>,
}

/// `tensorflow.FloatList` (packed on the wire; unpacked is read too).
#[derive(Clone, PartialEq, prost::Message)]
pub struct FloatList {
    /// `value`.
    #[prost(float, repeated, tag = "1")]
    pub value: Vec<f32>,
}

/// `tensorflow.Int64List` (packed on the wire; unpacked is read too).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Int64List {
    /// `value`.
    #[prost(int64, repeated, tag = "1")]
    pub value: Vec<i64>,
}

/// `tensorflow.Feature`: one of the three lists.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Feature {
    /// `kind`: the list (none in an empty feature).
    #[prost(oneof = "FeatureKind", tags = "1, 2, 3")]
    pub kind: Option<FeatureKind>,
}

/// The `kind` oneof of [`Feature`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum FeatureKind {
    /// `bytes_list`.
    #[prost(message, tag = "1")]
    BytesList(BytesList),
    /// `float_list`.
    #[prost(message, tag = "2")]
    FloatList(FloatList),
    /// `int64_list`.
    #[prost(message, tag = "3")]
    Int64List(Int64List),
}

impl FeatureKind {
    /// The list's name as example.proto spells it (`float_list`, …), for messages.
    pub fn name(&self) -> &'static str {
        match self {
            FeatureKind::BytesList(_) => "bytes_list",
            FeatureKind::FloatList(_) => "float_list",
            FeatureKind::Int64List(_) => "int64_list",
        }
    }
}

/// `tensorflow.Features`: feature name → feature.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Features {
    /// `feature`.
    #[prost(btree_map = "string, message", tag = "1")]
    pub feature: BTreeMap<String, Feature>,
}

/// `tensorflow.Example`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Example {
    /// `features`.
    #[prost(message, optional, tag = "1")]
    pub features: Option<Features>,
}
