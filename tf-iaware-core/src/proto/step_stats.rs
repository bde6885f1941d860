//! `StepStats` (step_stats.proto): what ran where, and when, in one traced step.

/// `tensorflow.StepStats`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StepStats {
    #[prost(message, repeated, tag = "1")]
    pub dev_stats: Vec<DeviceStepStats>,
}

/// `tensorflow.DeviceStepStats`; `device` is a full device name, possibly with a stream suffix.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeviceStepStats {
    #[prost(string, tag = "1")]
    pub device: String,
    #[prost(message, repeated, tag = "2")]
    pub node_stats: Vec<NodeExecStats>,
}

/// `tensorflow.NodeExecStats`; times in µs (absolute start, others relative to it).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeExecStats {
    #[prost(string, tag = "1")]
    pub node_name: String,
    #[prost(int64, tag = "2")]
    pub all_start_micros: i64,
    #[prost(int64, tag = "3")]
    pub op_start_rel_micros: i64,
    #[prost(int64, tag = "4")]
    pub op_end_rel_micros: i64,
    #[prost(int64, tag = "5")]
    pub all_end_rel_micros: i64,
    #[prost(string, tag = "8")]
    pub timeline_label: String,
    #[prost(uint32, tag = "10")]
    pub thread_id: u32,
    #[prost(int64, tag = "13")]
    pub all_start_nanos: i64,
    #[prost(int64, tag = "14")]
    pub op_start_rel_nanos: i64,
    #[prost(int64, tag = "15")]
    pub op_end_rel_nanos: i64,
    #[prost(int64, tag = "16")]
    pub all_end_rel_nanos: i64,
}
