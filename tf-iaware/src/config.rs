//! Session configuration: the `ConfigProto` tf-iaware chooses.

use tensorflow::SessionOptions;

use crate::error::Result;
use crate::graph::proto::{ConfigProto, GraphOptions, RewriterConfig};
use crate::graph::DeviceType;

/// How a session is created.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionConfig {
    /// Session target: empty for in-process, `grpc://host:port` for a distributed master.
    pub target: String,
    /// Number of CPU devices to create in-process (`local:cpu=N`); `None`: TensorFlow's default (1).
    pub cpu_devices: Option<usize>,
    /// Threads per op (0: TensorFlow decides).
    pub intra_op_threads: i32,
    /// Threads running independent ops (0: TensorFlow decides). Explicit thread counts give an
    /// in-process session pools of its own (`use_per_session_threads`): TensorFlow otherwise
    /// sizes one process-wide pool by the first session and ignores later sessions' counts. A
    /// distributed session (a `target`) runs ops on its workers' own pools, and TensorFlow refuses
    /// per-session pools there, so the counts do not apply to it.
    pub inter_op_threads: i32,
    /// Let TensorFlow move ops it cannot place. Off by default so a wrong placement fails loudly.
    pub soft_placement: bool,
    /// Deadline of every blocking operation, ms (0: none).
    pub operation_timeout_ms: i64,
    /// Keep every op exactly where it was placed: turns off Grappler's remapper, whose fusions
    /// (MatMul+BiasAdd, Conv2D+BiasAdd+Relu, …) run the fused op on one neighbour's device.
    /// On by default so step stats prove a placement; applies to every strategy alike.
    pub exact_placement: bool,
    /// Keep this session's variables to itself (ConfigProto `isolate_session_state`), so several
    /// sessions on one cluster — strategies benchmarked side by side — do not share state.
    pub isolate_state: bool,
    /// Deadline of every `Session::run`, ms (RunOptions `timeout_in_ms`): nothing hangs forever.
    pub run_timeout_ms: i64,
    /// Restrict the session to these devices or tasks (ConfigProto `device_filters`); empty: all.
    pub device_filters: Vec<String>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            target: String::new(),
            cpu_devices: None,
            intra_op_threads: 0,
            inter_op_threads: 0,
            soft_placement: false,
            operation_timeout_ms: 0,
            exact_placement: true,
            isolate_state: false,
            run_timeout_ms: 600_000,
            device_filters: Vec::new(),
        }
    }
}

impl SessionConfig {
    /// In-process session with `n` CPU devices.
    pub fn local_cpus(n: usize) -> Self {
        SessionConfig {
            cpu_devices: Some(n),
            ..Default::default()
        }
    }

    /// The `ConfigProto` this configuration stands for.
    pub(crate) fn config_proto(&self) -> ConfigProto {
        let mut c = ConfigProto {
            intra_op_parallelism_threads: self.intra_op_threads,
            inter_op_parallelism_threads: self.inter_op_threads,
            allow_soft_placement: self.soft_placement,
            operation_timeout_in_ms: self.operation_timeout_ms,
            isolate_session_state: self.isolate_state,
            use_per_session_threads: self.target.is_empty()
                && (self.inter_op_threads > 0 || self.intra_op_threads > 0),
            device_filters: self.device_filters.clone(),
            ..Default::default()
        };
        if self.exact_placement {
            c.graph_options = Some(GraphOptions {
                rewrite_options: Some(RewriterConfig {
                    remapping: RewriterConfig::OFF,
                }),
                ..Default::default()
            });
        }
        if let Some(n) = self.cpu_devices {
            c.device_count.insert(DeviceType::Cpu.to_string(), n as i32);
        }
        c
    }

    /// `SessionOptions` carrying the serialized `ConfigProto` and the target.
    ///
    /// # Errors
    /// [`Error::TensorFlow`](crate::Error::TensorFlow) if TensorFlow rejects the config or the target.
    pub fn session_options(&self) -> Result<SessionOptions> {
        use prost::Message;
        let mut opts = SessionOptions::new();
        opts.set_config(&self.config_proto().encode_to_vec())
            .map_err(|e| crate::tf::status::error("SessionOptions::set_config", &e))?;
        if !self.target.is_empty() {
            opts.set_target(&self.target)
                .map_err(|e| crate::tf::status::error("SessionOptions::set_target", &e))?;
        }
        Ok(opts)
    }
}
