//! `StepStats` (step_stats.proto): what ran where, and when, in one traced step.

/// `tensorflow.StepStats`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StepStats {
    /// `dev_stats`: the stats of each device.
    #[prost(message, repeated, tag = "1")]
    pub dev_stats: Vec<DeviceStepStats>,
}

/// `tensorflow.DeviceStepStats`; `device` is a full device name, possibly with a stream suffix.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeviceStepStats {
    /// `device`: full device name (possibly with a stream suffix).
    #[prost(string, tag = "1")]
    pub device: String,
    /// `node_stats`: the ops that ran on the device.
    #[prost(message, repeated, tag = "2")]
    pub node_stats: Vec<NodeExecStats>,
}

/// `tensorflow.NodeExecStats`; times in µs (absolute start, others relative to it).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeExecStats {
    /// `node_name`: name of the op.
    #[prost(string, tag = "1")]
    pub node_name: String,
    /// `all_start_micros`: start, µs since the epoch.
    #[prost(int64, tag = "2")]
    pub all_start_micros: i64,
    /// `op_start_rel_micros`: start of the kernel, µs after `all_start_micros`.
    #[prost(int64, tag = "3")]
    pub op_start_rel_micros: i64,
    /// `op_end_rel_micros`: end of the kernel, µs after `all_start_micros`.
    #[prost(int64, tag = "4")]
    pub op_end_rel_micros: i64,
    /// `all_end_rel_micros`: end, outputs included, µs after `all_start_micros`.
    #[prost(int64, tag = "5")]
    pub all_end_rel_micros: i64,
    /// `timeline_label`: label for traces (`name = Op(inputs)`).
    #[prost(string, tag = "8")]
    pub timeline_label: String,
    /// `thread_id`: thread that ran the op.
    #[prost(uint32, tag = "10")]
    pub thread_id: u32,
    /// `all_start_nanos`: start, ns since the epoch.
    #[prost(int64, tag = "13")]
    pub all_start_nanos: i64,
    /// `op_start_rel_nanos`: start of the kernel, ns after `all_start_nanos`.
    #[prost(int64, tag = "14")]
    pub op_start_rel_nanos: i64,
    /// `op_end_rel_nanos`: end of the kernel, ns after `all_start_nanos`.
    #[prost(int64, tag = "15")]
    pub op_end_rel_nanos: i64,
    /// `all_end_rel_nanos`: end, outputs included, ns after `all_start_nanos`.
    #[prost(int64, tag = "16")]
    pub all_end_rel_nanos: i64,
}
