//! `Event` and `Summary` (event.proto, summary.proto): the records of a TensorBoard event file.
//! Only what scalar logging needs; the `what` oneof of `Event` is two optional fields here (the
//! same bytes on the wire: at most one of them is set).

/// `tensorflow.Event`: one record of an event file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    /// `wall_time`: seconds since the Unix epoch.
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    /// `step`: the global training step.
    #[prost(int64, tag = "2")]
    pub step: i64,
    /// `file_version` (oneof `what`): `"brain.Event:2"` in the first record of a file.
    #[prost(string, optional, tag = "3")]
    pub file_version: Option<String>,
    /// `summary` (oneof `what`): the values logged at this step.
    #[prost(message, optional, tag = "5")]
    pub summary: Option<Summary>,
}

/// `tensorflow.Summary`: values logged together.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    /// `value`: one entry per tag.
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<SummaryValue>,
}

/// `tensorflow.Summary.Value`; only the `simple_value` (a scalar) of its `value` oneof.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryValue {
    /// `tag`: the series name TensorBoard groups by (`loss`, `worker/w0/share`, …).
    #[prost(string, tag = "1")]
    pub tag: String,
    /// `simple_value` (oneof `value`): a scalar.
    #[prost(float, optional, tag = "2")]
    pub simple_value: Option<f32>,
}
