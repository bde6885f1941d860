//! Reading step stats (`RunMetadata`): what actually ran where.

use std::collections::BTreeMap;

use crate::graph::proto::StepStats;
use crate::graph::DeviceName;

/// The device part of a step-stats device string (drops stream suffixes such as
/// `/device:GPU:0/stream:all`, keeps `/job:…/replica:…/task:…/device:TYPE:ID`).
pub(crate) fn normalize_device(device: &str) -> String {
    let mut parts = Vec::new();
    for part in device.split('/').filter(|p| !p.is_empty()) {
        let key = part.split(':').next().unwrap_or("");
        if matches!(key, "job" | "replica" | "task" | "device") {
            parts.push(part);
        }
        if key == "device" {
            break;
        }
    }
    format!("/{}", parts.join("/"))
}

/// Device → set of node names step stats saw run there. Internal nodes (`_SOURCE`, `_SINK`) are
/// excluded; transfers (`_Send`/`_Recv`) and ops Grappler created are counted.
pub fn executed_nodes(stats: &StepStats) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for dev in &stats.dev_stats {
        let names = out.entry(normalize_device(&dev.device)).or_default();
        for n in &dev.node_stats {
            if n.node_name == "_SOURCE" || n.node_name == "_SINK" || n.node_name.is_empty() {
                continue;
            }
            names.push(n.node_name.clone());
        }
    }
    for names in out.values_mut() {
        names.sort();
        names.dedup();
    }
    out.retain(|_, v| !v.is_empty());
    out
}

/// Device → number of distinct nodes that ran there.
pub(crate) fn executed_counts(stats: &StepStats) -> BTreeMap<String, usize> {
    executed_nodes(stats)
        .into_iter()
        .map(|(d, n)| (d, n.len()))
        .collect()
}

/// A placed op that step stats saw on another device.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Mismatch {
    /// Name of the op.
    pub op: String,
    /// Device it was placed on.
    pub placed: String,
    /// Device step stats saw it run on.
    pub ran: String,
}

/// Every placed op that ran somewhere other than where it was placed (devices compared as
/// parsed names, so `/device:CPU:1` and the full name agree). Nodes Grappler rewrote into
/// another op type (constant folding turns shape arithmetic into `Const`, say) are not the op
/// that was placed and are skipped; `op_type` gives the graph's type of a node name.
pub(crate) fn placement_mismatches<'p, 'a>(
    stats: &StepStats,
    placed: impl Fn(&str) -> Option<&'p str>,
    op_type: impl Fn(&str) -> Option<&'a str>,
) -> Vec<Mismatch> {
    let mut out = Vec::new();
    for dev in &stats.dev_stats {
        let device = normalize_device(&dev.device);
        let ran = DeviceName::parse(&device).unwrap_or_default();
        for n in &dev.node_stats {
            let Some(placed) = placed(&n.node_name) else {
                continue;
            };
            let rewritten = match (n.kernel(), op_type(&n.node_name)) {
                (Some(seen), Some(expected)) => seen != expected,
                _ => false,
            };
            let Ok(want) = DeviceName::parse(placed) else {
                continue;
            };
            if !rewritten
                && !want.matches(&ran)
                && !out.iter().any(|m: &Mismatch| m.op == n.node_name)
            {
                out.push(Mismatch {
                    op: n.node_name.clone(),
                    placed: placed.into(),
                    ran: device.clone(),
                });
            }
        }
    }
    out
}

/// Busy window of every device in one traced step: (first op start, last op end), µs since the
/// epoch. A replica's window is how long its share of the step took it.
pub(crate) fn device_spans(stats: &StepStats) -> BTreeMap<String, (i64, i64)> {
    let mut out: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for dev in &stats.dev_stats {
        for n in &dev.node_stats {
            if n.node_name == "_SOURCE" || n.node_name == "_SINK" || n.all_start_micros == 0 {
                continue;
            }
            let (start, end) = (
                n.all_start_micros,
                n.all_start_micros + n.all_end_rel_micros.max(0),
            );
            let e = out
                .entry(normalize_device(&dev.device))
                .or_insert((start, end));
            e.0 = e.0.min(start);
            e.1 = e.1.max(end);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::proto::{DeviceStepStats, NodeExecStats};

    fn stats() -> StepStats {
        let node = |n: &str| NodeExecStats {
            node_name: n.into(),
            ..Default::default()
        };
        StepStats {
            dev_stats: vec![
                DeviceStepStats {
                    device: "/job:localhost/replica:0/task:0/device:CPU:0".into(),
                    node_stats: vec![node("_SOURCE"), node("a"), node("b"), node("a")],
                },
                DeviceStepStats {
                    device: "/job:localhost/replica:0/task:0/device:GPU:0/stream:all".into(),
                    node_stats: vec![node("c")],
                },
            ],
        }
    }

    #[test]
    fn counts_distinct_nodes_per_device() {
        let counts = executed_counts(&stats());
        assert_eq!(counts["/job:localhost/replica:0/task:0/device:CPU:0"], 2);
        assert_eq!(counts["/job:localhost/replica:0/task:0/device:GPU:0"], 1);
    }

    #[test]
    fn finds_ops_that_ran_elsewhere() {
        let placed = |n: &str| match n {
            "a" => Some("/device:CPU:0"),
            "c" => Some("/job:localhost/replica:0/task:0/device:CPU:1"),
            _ => None,
        };
        let m = placement_mismatches(&stats(), placed, |_| None);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].op, "c");
        // A node rewritten into another op type (label says Const, graph says Prod) is skipped.
        let mut s = stats();
        s.dev_stats[1].node_stats[0].timeline_label = "c = Const()".into();
        assert!(placement_mismatches(&s, placed, |n| (n == "c").then_some("Prod")).is_empty());
    }
}
