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

impl NodeExecStats {
    /// The op type TensorFlow ran, from the `timeline_label` (`"name = Op(a, b)"` → `Op`): the
    /// graph's own type, or a kernel Grappler or oneDNN rewrote it into (`_FusedConv2D`,
    /// `_MklNativeConv2D`, …). `None` when the label is empty or has no op.
    pub fn kernel(&self) -> Option<&str> {
        let (_, rhs) = self.timeline_label.split_once(" = ")?;
        let op = rhs.split(['(', ' ']).next()?.trim();
        (!op.is_empty()).then_some(op)
    }
}

#[cfg(test)]
mod tests {
    use super::NodeExecStats;

    #[test]
    fn kernel_comes_from_the_timeline_label() {
        let label = |l: &str| NodeExecStats {
            timeline_label: l.into(),
            ..Default::default()
        };
        assert_eq!(label("mm = MatMul(x, w)").kernel(), Some("MatMul"));
        assert_eq!(
            label("conv1/Relu = _FusedConv2D(x, w, b)").kernel(),
            Some("_FusedConv2D")
        );
        assert_eq!(label("c = Const()").kernel(), Some("Const"));
        assert_eq!(label("").kernel(), None);
        assert_eq!(label("no op here").kernel(), None);
        assert_eq!(label("x = (a)").kernel(), None);
    }
}
