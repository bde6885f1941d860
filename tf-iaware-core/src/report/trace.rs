//! Chrome trace JSON (`chrome://tracing`, Perfetto) of one step, simulated or measured, in the
//! layout of TensorFlow's timeline: `{"traceEvents": [...]}`, times in µs, one process (pid) per
//! device named by a `process_name` metadata event, and overlapping ops of a device spread over
//! lanes (tid) in which nothing overlaps.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::graph::OpGraph;
use crate::proto::StepStats;
use crate::sim::SimResult;

/// One op (or transfer) execution: the input of [`chrome_trace`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// Device (or stream, or link) it ran on; one trace process each.
    pub device: String,
    /// Op name.
    pub name: String,
    /// Op type.
    pub op: String,
    /// Start, µs.
    pub start_us: f64,
    /// Duration, µs.
    pub dur_us: f64,
}

#[derive(Serialize)]
struct NameArgs<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct SortArgs {
    sort_index: usize,
}

#[derive(Serialize)]
struct OpArgs<'a> {
    name: &'a str,
    op: &'a str,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Event<'a> {
    Meta {
        name: &'static str,
        ph: &'static str,
        pid: usize,
        args: NameArgs<'a>,
    },
    Sort {
        name: &'static str,
        ph: &'static str,
        pid: usize,
        args: SortArgs,
    },
    Complete {
        name: &'a str,
        cat: &'static str,
        ph: &'static str,
        ts: f64,
        dur: f64,
        pid: usize,
        tid: usize,
        args: OpArgs<'a>,
    },
}

#[derive(Serialize)]
struct Trace<'a> {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<Event<'a>>,
}

/// Lane (tid) of each record: per device, in order of start, the first lane whose last op has
/// ended, else a new lane.
pub(crate) fn assign_lanes(records: &[TraceRecord]) -> Vec<usize> {
    let mut by_device: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        by_device.entry(r.device.as_str()).or_default().push(i);
    }
    let mut lane = vec![0usize; records.len()];
    for idx in by_device.values_mut() {
        idx.sort_by(|&a, &b| {
            records[a]
                .start_us
                .total_cmp(&records[b].start_us)
                .then(a.cmp(&b))
        });
        let mut ends: Vec<f64> = Vec::new();
        for &i in idx.iter() {
            let r = &records[i];
            let end = r.start_us + r.dur_us.max(0.0);
            match ends.iter().position(|&e| e <= r.start_us) {
                Some(l) => {
                    ends[l] = end;
                    lane[i] = l;
                }
                None => {
                    lane[i] = ends.len();
                    ends.push(end);
                }
            }
        }
    }
    lane
}

/// The Chrome trace JSON of `records`. Devices get pids in order of first appearance.
///
/// # Errors
/// [`Error::Json`] if serialisation fails.
pub fn chrome_trace(records: &[TraceRecord]) -> Result<String> {
    let lanes = assign_lanes(records);
    let mut pids: HashMap<&str, usize> = HashMap::new();
    let mut events: Vec<Event<'_>> = Vec::with_capacity(records.len() + 16);
    for r in records {
        if !pids.contains_key(r.device.as_str()) {
            let pid = pids.len();
            pids.insert(r.device.as_str(), pid);
            events.push(Event::Meta {
                name: "process_name",
                ph: "M",
                pid,
                args: NameArgs { name: &r.device },
            });
            events.push(Event::Sort {
                name: "process_sort_index",
                ph: "M",
                pid,
                args: SortArgs { sort_index: pid },
            });
        }
    }
    for (r, &tid) in records.iter().zip(&lanes) {
        events.push(Event::Complete {
            name: &r.op,
            cat: "Op",
            ph: "X",
            ts: r.start_us,
            dur: r.dur_us.max(0.0),
            pid: pids[r.device.as_str()],
            tid,
            args: OpArgs {
                name: &r.name,
                op: &r.op,
            },
        });
    }
    serde_json::to_string(&Trace {
        trace_events: events,
    })
    .map_err(|source| Error::Json {
        what: "Chrome trace".into(),
        source,
    })
}

/// Records of a traced step (TensorFlow `RunMetadata.step_stats`): every device and stream is its
/// own process; times are shifted so the step starts at 0 µs.
pub fn from_step_stats(stats: &StepStats) -> Vec<TraceRecord> {
    let micros = |nanos: i64, us: i64| {
        if nanos != 0 {
            nanos as f64 / 1e3
        } else {
            us as f64
        }
    };
    let mut out = Vec::new();
    for dev in &stats.dev_stats {
        for ns in &dev.node_stats {
            let start = micros(ns.all_start_nanos, ns.all_start_micros);
            let dur = if ns.all_start_nanos != 0 || ns.all_end_rel_nanos != 0 {
                ns.all_end_rel_nanos as f64 / 1e3
            } else {
                ns.all_end_rel_micros as f64
            };
            out.push(TraceRecord {
                device: dev.device.clone(),
                name: ns.node_name.clone(),
                op: ns.kernel().unwrap_or(&ns.node_name).to_string(),
                start_us: start,
                dur_us: dur.max(0.0),
            });
        }
    }
    let t0 = out.iter().map(|r| r.start_us).fold(f64::INFINITY, f64::min);
    if t0.is_finite() {
        for r in &mut out {
            r.start_us -= t0;
        }
    }
    out
}

/// Records of a simulated step: ops on their devices (in cluster order), and transfers on a
/// process per link named `FROM → TO` (op `_Transfer`, name `producer:output` or
/// `producer:control`).
///
/// # Panics
/// If `sim` does not come from this graph and cluster.
pub fn from_simulation(graph: &OpGraph, cluster: &Cluster, sim: &SimResult) -> Vec<TraceRecord> {
    let mut order: Vec<usize> = (0..sim.ops.len()).collect();
    order.sort_by(|&a, &b| {
        sim.ops[a]
            .device
            .cmp(&sim.ops[b].device)
            .then(sim.ops[a].start.total_cmp(&sim.ops[b].start))
            .then(a.cmp(&b))
    });
    let mut out: Vec<TraceRecord> = order
        .into_iter()
        .map(|i| {
            let run = &sim.ops[i];
            let node = &graph.nodes()[i];
            TraceRecord {
                device: cluster.devices[run.device].name.clone(),
                name: node.name.clone(),
                op: node.op.clone(),
                start_us: run.start * 1e6,
                dur_us: (run.end - run.start) * 1e6,
            }
        })
        .collect();
    for t in &sim.transfers {
        let output = if t.output == crate::cost::CONTROL {
            "control".to_string()
        } else {
            t.output.to_string()
        };
        out.push(TraceRecord {
            device: format!(
                "{} → {}",
                cluster.devices[t.from].name, cluster.devices[t.to].name
            ),
            name: format!("{}:{output}", graph.node(t.producer).name),
            op: "_Transfer".into(),
            start_us: t.start * 1e6,
            dur_us: (t.end - t.start) * 1e6,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{DeviceStepStats, NodeExecStats};

    fn rec(device: &str, name: &str, start: f64, dur: f64) -> TraceRecord {
        TraceRecord {
            device: device.into(),
            name: name.into(),
            op: "Op".into(),
            start_us: start,
            dur_us: dur,
        }
    }

    #[test]
    fn overlapping_ops_get_separate_lanes() {
        let r = vec![
            rec("a", "x", 0.0, 10.0),
            rec("a", "y", 5.0, 10.0),
            rec("a", "z", 10.0, 2.0),
            rec("b", "w", 0.0, 100.0),
            rec("a", "v", 6.0, 1.0),
        ];
        assert_eq!(assign_lanes(&r), vec![0, 1, 0, 0, 2]);
        let json: serde_json::Value = serde_json::from_str(&chrome_trace(&r).unwrap()).unwrap();
        let events = json["traceEvents"].as_array().unwrap();
        let meta: Vec<_> = events
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| {
                (
                    e["pid"].as_u64().unwrap(),
                    e["args"]["name"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(meta, vec![(0, "a"), (1, "b")]);
        let ops: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(ops.len(), 5);
        assert_eq!(ops[1]["tid"], 1);
        assert_eq!(ops[1]["ts"], 5.0);
        assert_eq!(ops[1]["dur"], 10.0);
        assert_eq!(ops[1]["args"]["name"], "y");
        assert_eq!(ops[3]["pid"], 1);
        // No two ops of one (pid, tid) overlap.
        for a in &ops {
            for b in &ops {
                if a != b && a["pid"] == b["pid"] && a["tid"] == b["tid"] {
                    let (sa, ea) = (
                        a["ts"].as_f64().unwrap(),
                        a["ts"].as_f64().unwrap() + a["dur"].as_f64().unwrap(),
                    );
                    let sb = b["ts"].as_f64().unwrap();
                    assert!(sb >= ea || sb + b["dur"].as_f64().unwrap() <= sa);
                }
            }
        }
    }

    #[test]
    fn step_stats_convert() {
        let stats = StepStats {
            dev_stats: vec![DeviceStepStats {
                device: "/job:localhost/replica:0/task:0/device:CPU:0".into(),
                node_stats: vec![
                    NodeExecStats {
                        node_name: "mm".into(),
                        all_start_micros: 1000,
                        all_end_rel_micros: 40,
                        timeline_label: "mm = MatMul(x, w)".into(),
                        ..Default::default()
                    },
                    NodeExecStats {
                        node_name: "relu".into(),
                        all_start_micros: 1,
                        all_start_nanos: 1_040_500,
                        all_end_rel_nanos: 2_500,
                        ..Default::default()
                    },
                ],
            }],
        };
        let r = from_step_stats(&stats);
        assert_eq!(r[0].op, "MatMul");
        assert_eq!((r[0].start_us, r[0].dur_us), (0.0, 40.0));
        assert_eq!(r[1].op, "relu", "no label: the node name");
        assert!((r[1].start_us - 40.5).abs() < 1e-9 && (r[1].dur_us - 2.5).abs() < 1e-9);
    }
}
