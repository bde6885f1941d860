//! The parts of `ConfigProto`, `RunOptions` and `RunMetadata` (config.proto) that tf-iaware sets or reads.

use std::collections::BTreeMap;

/// `tensorflow.ConfigProto` (session configuration).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigProto {
    /// Device type → how many devices of that type to create (e.g. `"CPU" → 4`).
    #[prost(btree_map = "string, int32", tag = "1")]
    pub device_count: BTreeMap<String, i32>,
    /// `intra_op_parallelism_threads`: threads within one op (0: as many as cores).
    #[prost(int32, tag = "2")]
    pub intra_op_parallelism_threads: i32,
    /// Only these devices (partial names such as `/job:ps`) take part in the session; tasks
    /// outside them are never contacted — a lost worker outside the filter cannot stall it.
    #[prost(string, repeated, tag = "4")]
    pub device_filters: Vec<String>,
    /// `inter_op_parallelism_threads`: ops run at once (0: as many as cores).
    #[prost(int32, tag = "5")]
    pub inter_op_parallelism_threads: i32,
    /// `allow_soft_placement`: fall back to another device when a kernel is missing.
    #[prost(bool, tag = "7")]
    pub allow_soft_placement: bool,
    /// `log_device_placement`: log where each op runs.
    #[prost(bool, tag = "8")]
    pub log_device_placement: bool,
    /// `use_per_session_threads`: a thread pool per session.
    #[prost(bool, tag = "9")]
    pub use_per_session_threads: bool,
    /// `graph_options`.
    #[prost(message, optional, tag = "10")]
    pub graph_options: Option<GraphOptions>,
    /// Deadline for blocking operations, ms (0: none).
    #[prost(int64, tag = "11")]
    pub operation_timeout_in_ms: i64,
    /// `ClusterDef` for sessions on a distributed master.
    #[prost(message, optional, tag = "14")]
    pub cluster_def: Option<super::ClusterDef>,
    /// `isolate_session_state`: variables are not shared with other sessions.
    #[prost(bool, tag = "15")]
    pub isolate_session_state: bool,
}

/// `tensorflow.GraphOptions`: `place_pruned_graph` and the Grappler rewriter settings.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphOptions {
    /// `place_pruned_graph`: place only the ops a run needs.
    #[prost(bool, tag = "6")]
    pub place_pruned_graph: bool,
    /// `rewrite_options`: the Grappler settings.
    #[prost(message, optional, tag = "10")]
    pub rewrite_options: Option<RewriterConfig>,
}

/// `tensorflow.RewriterConfig` (rewriter_config.proto): the one toggle tf-iaware sets.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RewriterConfig {
    /// `Toggle` of the remapper (op fusion): 0 default, 1 on, 2 off ([`RewriterConfig::OFF`]).
    #[prost(int32, tag = "14")]
    pub remapping: i32,
}

impl RewriterConfig {
    /// `RewriterConfig.Toggle.OFF`.
    pub const OFF: i32 = 2;
}

/// `tensorflow.RunOptions`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RunOptions {
    /// `TraceLevel`: 0 none, 1 software, 2 hardware, 3 full ([`RunOptions::FULL_TRACE`]).
    #[prost(int32, tag = "1")]
    pub trace_level: i32,
    /// Deadline of the whole `Session::run`, ms (0: none).
    #[prost(int64, tag = "2")]
    pub timeout_in_ms: i64,
}

impl RunOptions {
    /// `TraceLevel.FULL_TRACE`.
    pub const FULL_TRACE: i32 = 3;
}

/// `tensorflow.RunMetadata`: step stats (field 1); cost and partition graphs are not read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RunMetadata {
    /// `step_stats`: the traced step.
    #[prost(message, optional, tag = "1")]
    pub step_stats: Option<super::StepStats>,
}
