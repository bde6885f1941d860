//! Measured op times: samples collected from the step stats of real runs
//! ([`Measurements::add_step_stats`]), fitted by [`super::CostModel::with_measurements`].

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::proto::StepStats;

/// One timed execution of an op.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpSample {
    /// Op (node) name.
    pub node: String,
    /// Device it ran on: a full TensorFlow device name (stream suffixes are dropped).
    pub device: String,
    /// How long it ran, seconds.
    pub seconds: f64,
    /// The kernel TensorFlow ran for it, from the step stats' timeline label (`Conv2D`, or a
    /// rewrite such as `_FusedConv2D`); `None` when unknown or once attributed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// The fused node whose time this sample is a part of (`conv1/Relu` for `conv1/Conv2D`), when
    /// TensorFlow fused this op with others ([`Measurements::attributed`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fused_into: Option<String>,
    /// The device's availability (0–1) when the op ran ([`Measurements::record_availability`]):
    /// the cost model turns the time into work at that share of the device, so a file recorded
    /// on a quiet machine predicts longer times on a busy one. `None` (files of older versions):
    /// the device's availability when the model is built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability: Option<f64>,
    /// Which traced step the sample came from (0, 1, … in the order the steps were added), and
    /// when in it the op started, seconds after the step's first op: with the graph, the time
    /// the executor took between an op's inputs being ready and the op starting
    /// (the `cost::gaps` module). `None` (files of older versions, [`Measurements::add`]): unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
    /// See [`OpSample::step`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_s: Option<f64>,
}

/// Timed op executions from real runs; feed them to
/// [`CostModel::with_measurements`](super::CostModel::with_measurements).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Measurements {
    /// The samples, in the order they were added.
    pub samples: Vec<OpSample>,
    /// The step's own time outside every op, seconds: the session's round trip (through the
    /// gRPC master and workers on a TF_CONFIG cluster), feeds and fetches
    /// ([`Measurements::record_step_overhead`]); the simulator adds it to each step it
    /// predicts. `None`: not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_overhead_s: Option<f64>,
}

/// The device part of a step-stats device string: `…/device:GPU:0/stream:all` → `…/device:GPU:0`;
/// `None` for a memcpy stream (its entries are transfers, not ops).
pub(crate) fn base_device(device: &str) -> Option<&str> {
    let Some(at) = device.find("/device:") else {
        return Some(device);
    };
    let rest = &device[at + "/device:".len()..];
    match rest.find('/') {
        Some(slash) => {
            let suffix = &rest[slash + 1..];
            if suffix.contains("memcpy") {
                None
            } else {
                Some(&device[..at + "/device:".len() + slash])
            }
        }
        None => Some(device),
    }
}

/// The largest measurements file [`Measurements::load`] reads, bytes.
pub(crate) const MAX_FILE_BYTES: u64 = 256 << 20;

impl Measurements {
    /// No samples.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a measurements file (`tf-iaware run --save-measurements`, or
    /// `serde_json::to_string` of a [`Measurements`]).
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be read; [`Error::InvalidArgument`] for a file over
    /// `MAX_FILE_BYTES`; [`Error::Json`] naming the file if it is not a measurements document.
    pub fn load(path: &Path) -> Result<Self> {
        let text = crate::io::read_capped(path, MAX_FILE_BYTES, "measurements file")?;
        serde_json::from_str(&text).map_err(|source| Error::Json {
            what: format!("parsing measurements {}", path.display()),
            source,
        })
    }

    /// Adds one sample.
    pub fn add(&mut self, node: &str, device: &str, seconds: f64) {
        self.samples.push(OpSample {
            node: node.into(),
            device: device.into(),
            seconds,
            kernel: None,
            fused_into: None,
            availability: None,
            step: None,
            start_s: None,
        });
    }

    /// Records on every sample that has none the availability its device has in `cluster`
    /// (read live while the samples were taken, as `run --save-measurements` does with the
    /// cluster it ran on); samples of devices `cluster` does not have keep none. Returns how
    /// many samples got one.
    pub fn record_availability(&mut self, cluster: &Cluster) -> usize {
        let mut recorded = 0;
        for s in self.samples.iter_mut().filter(|s| s.availability.is_none()) {
            let device = cluster
                .index_of(&s.device)
                .or_else(|| cluster.resolve("(step stats)", &s.device).ok());
            if let Some(d) = device {
                let a = cluster.device(d).availability;
                if a.is_finite() && a > 0.0 {
                    s.availability = Some(a.min(1.0));
                    recorded += 1;
                }
            }
        }
        recorded
    }

    /// Records the step's own time outside every op (`step_overhead_s`): the median untraced
    /// step of the same placement, `untraced_step_s` seconds, less the median span of the traced
    /// steps held here (first op's start to last op's end, over every device), and 0 where the
    /// traced span is the longer (tracing slows the ops it times, so this errs low). Returns it;
    /// `None` (and nothing recorded) without samples that carry a step and start, or for a
    /// duration that is not positive.
    pub fn record_step_overhead(&mut self, untraced_step_s: f64) -> Option<f64> {
        if !(untraced_step_s.is_finite() && untraced_step_s > 0.0) {
            return None;
        }
        let mut spans: HashMap<u32, (f64, f64)> = HashMap::new();
        for s in &self.samples {
            let (Some(step), Some(start)) = (s.step, s.start_s) else {
                continue;
            };
            let end = start + s.seconds;
            if !(start.is_finite() && end.is_finite()) {
                continue;
            }
            let e = spans.entry(step).or_insert((start, end));
            e.0 = e.0.min(start);
            e.1 = e.1.max(end);
        }
        let mut spans: Vec<f64> = spans.values().map(|(a, b)| b - a).collect();
        if spans.is_empty() {
            return None;
        }
        let span = median(&mut spans);
        let overhead = (untraced_step_s - span).max(0.0);
        self.step_overhead_s = Some(overhead);
        Some(overhead)
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Adds every op execution of one traced step: its duration is `all_end_rel` (nanoseconds
    /// when TensorFlow filled them, else microseconds). An op that shows both on a device and on
    /// one of its streams (GPU: the launch and the kernel) gives one sample, the longer of the
    /// two; a node that ran several times (loops) gives one sample per run. Memcpy streams,
    /// `_SOURCE` and entries with a negative duration are skipped. Each sample keeps the kernel
    /// TensorFlow ran (see [`Measurements::attributed`]), the step's number and when the op
    /// started in it. Returns the number of samples added.
    pub fn add_step_stats(&mut self, stats: &StepStats) -> usize {
        // (node, base device) → (runs seen on the device itself, runs seen on a stream), each
        // run (seconds, start in seconds since the epoch).
        type Runs<'a> = (Vec<(f64, i64)>, Vec<(f64, i64)>, Option<&'a str>);
        let step = self
            .samples
            .iter()
            .filter_map(|s| s.step)
            .max()
            .map_or(0, |last| last.saturating_add(1));
        // Starts in integer nanoseconds since the epoch: as f64 seconds they would keep only
        // about a quarter of a microsecond.
        let mut first_start = i64::MAX;
        let mut runs: HashMap<(&str, &str), Runs> = HashMap::new();
        let mut order: Vec<(&str, &str)> = Vec::new();
        for dev in &stats.dev_stats {
            let Some(device) = base_device(&dev.device) else {
                continue;
            };
            let on_stream = dev.device.len() > device.len();
            for ns in &dev.node_stats {
                if ns.node_name.is_empty() || ns.node_name == "_SOURCE" {
                    continue;
                }
                let (seconds, start) = if ns.all_start_nanos != 0 || ns.all_end_rel_nanos != 0 {
                    (ns.all_end_rel_nanos as f64 * 1e-9, ns.all_start_nanos)
                } else {
                    (
                        ns.all_end_rel_micros as f64 * 1e-6,
                        ns.all_start_micros.saturating_mul(1000),
                    )
                };
                if !(seconds.is_finite() && seconds >= 0.0) {
                    continue;
                }
                if start > 0 {
                    first_start = first_start.min(start);
                }
                let key = (ns.node_name.as_str(), device);
                let entry = runs.entry(key).or_insert_with(|| {
                    order.push(key);
                    (Vec::new(), Vec::new(), None)
                });
                if entry.2.is_none() {
                    entry.2 = ns.kernel();
                }
                if on_stream {
                    entry.1.push((seconds, start));
                } else {
                    entry.0.push((seconds, start));
                }
            }
        }
        let before = self.samples.len();
        for key in order {
            let (base, stream, kernel) = &runs[&key];
            for k in 0..base.len().max(stream.len()) {
                // The launch on the device starts first; the longer of the two counts.
                let (t, start) = match (base.get(k), stream.get(k)) {
                    (Some(&(a, sa)), Some(&(b, _))) => (a.max(b), sa),
                    (Some(&a), None) | (None, Some(&a)) => a,
                    (None, None) => continue,
                };
                let start_s = (start > 0 && first_start < i64::MAX)
                    .then(|| (start - first_start) as f64 * 1e-9);
                self.samples.push(OpSample {
                    node: key.0.into(),
                    device: key.1.into(),
                    seconds: t,
                    kernel: kernel.map(str::to_string),
                    fused_into: None,
                    availability: None,
                    step: start_s.map(|_| step),
                    start_s,
                });
            }
        }
        self.samples.len() - before
    }
}

/// The median of `values` (the mean of the two middle ones for an even count), sorting them;
/// NaN when there are none.
pub(super) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let k = values.len();
    match k {
        0 => f64::NAN,
        _ if k % 2 == 1 => values[k / 2],
        _ => 0.5 * (values[k / 2 - 1] + values[k / 2]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{DeviceStepStats, NodeExecStats};

    fn ns(name: &str, micros: i64) -> NodeExecStats {
        NodeExecStats {
            node_name: name.into(),
            all_start_micros: 100,
            all_end_rel_micros: micros,
            ..Default::default()
        }
    }

    #[test]
    fn base_device_strips_streams() {
        let d = "/job:localhost/replica:0/task:0/device:GPU:0";
        assert_eq!(base_device(&format!("{d}/stream:all")), Some(d));
        assert_eq!(base_device(d), Some(d));
        assert_eq!(base_device(&format!("{d}/memcpy")), None);
        assert_eq!(base_device("/cpu:0"), Some("/cpu:0"));
    }

    #[test]
    fn step_stats_become_samples() {
        let cpu = "/job:localhost/replica:0/task:0/device:CPU:0";
        let gpu = "/job:localhost/replica:0/task:0/device:GPU:0";
        let stats = StepStats {
            dev_stats: vec![
                DeviceStepStats {
                    device: cpu.into(),
                    node_stats: vec![ns("_SOURCE", 1), ns("a", 30), ns("b", -4), ns("a", 50)],
                },
                DeviceStepStats {
                    device: gpu.into(),
                    node_stats: vec![ns("k", 5)],
                },
                DeviceStepStats {
                    device: format!("{gpu}/stream:all"),
                    node_stats: vec![ns("k", 80)],
                },
                DeviceStepStats {
                    device: format!("{gpu}/memcpy"),
                    node_stats: vec![ns("copy", 80)],
                },
            ],
        };
        let mut m = Measurements::new();
        assert_eq!(m.add_step_stats(&stats), 3);
        assert_eq!(m.samples[0].node, "a");
        assert!((m.samples[0].seconds - 30e-6).abs() < 1e-15);
        assert!(
            (m.samples[1].seconds - 50e-6).abs() < 1e-15,
            "a loop's second run"
        );
        assert_eq!(m.samples[2].node, "k");
        assert_eq!(m.samples[2].device, gpu);
        assert!(
            (m.samples[2].seconds - 80e-6).abs() < 1e-15,
            "the kernel, not the launch"
        );
    }

    #[test]
    fn samples_know_their_step_and_start_to_the_nanosecond() {
        let cpu = "/job:localhost/replica:0/task:0/device:CPU:0";
        // Epoch nanoseconds, where an f64 of seconds would round to a quarter of a µs.
        let at = |name: &str, start_ns: i64, dur_ns: i64| NodeExecStats {
            node_name: name.into(),
            all_start_nanos: 1_796_543_193_439_000_000 + start_ns,
            all_end_rel_nanos: dur_ns,
            ..Default::default()
        };
        let step = |a: i64| StepStats {
            dev_stats: vec![DeviceStepStats {
                device: cpu.into(),
                node_stats: vec![at("b", a + 1_130, 500), at("a", a, 1_000)],
            }],
        };
        let mut m = Measurements::new();
        m.add_step_stats(&step(0));
        m.add_step_stats(&step(5_000_000));
        let got: Vec<(&str, Option<u32>, Option<f64>)> = m
            .samples
            .iter()
            .map(|s| (s.node.as_str(), s.step, s.start_s))
            .collect();
        assert_eq!(
            got,
            vec![
                ("b", Some(0), Some(1.13e-6)),
                ("a", Some(0), Some(0.0)),
                ("b", Some(1), Some(1.13e-6)),
                ("a", Some(1), Some(0.0)),
            ]
        );
        // Without start times (older TensorFlow, hand-made stats): neither.
        let mut old = Measurements::new();
        old.add_step_stats(&StepStats {
            dev_stats: vec![DeviceStepStats {
                device: cpu.into(),
                node_stats: vec![NodeExecStats {
                    node_name: "a".into(),
                    all_end_rel_micros: 3,
                    ..Default::default()
                }],
            }],
        });
        assert_eq!((old.samples[0].step, old.samples[0].start_s), (None, None));
    }

    #[test]
    fn the_step_overhead_is_the_untraced_step_beyond_the_traced_span() {
        let cpu = "/job:localhost/replica:0/task:0/device:CPU:0";
        let sample = |step: u32, start_us: f64, dur_us: f64| OpSample {
            node: "a".into(),
            device: cpu.into(),
            seconds: dur_us * 1e-6,
            kernel: None,
            fused_into: None,
            availability: None,
            step: Some(step),
            start_s: Some(start_us * 1e-6),
        };
        // Spans of 2.0, 2.2 and 3.0 ms (median 2.2); untraced steps of 3.0 ms.
        let mut m = Measurements {
            samples: vec![
                sample(0, 0.0, 1000.0),
                sample(0, 1500.0, 500.0),
                sample(1, 0.0, 2200.0),
                sample(2, 100.0, 3000.0),
            ],
            ..Default::default()
        };
        let got = m.record_step_overhead(3.0e-3).unwrap();
        assert!((got - 0.8e-3).abs() < 1e-12, "{got}");
        assert_eq!(m.step_overhead_s, Some(got));
        // Traced steps longer than the untraced: 0, not negative.
        assert_eq!(m.record_step_overhead(1.0e-3), Some(0.0));
        // Nothing to measure against, or a duration that is not one: nothing recorded.
        assert_eq!(m.record_step_overhead(f64::NAN), None);
        assert_eq!(m.record_step_overhead(-1.0), None);
        let mut old = Measurements::new();
        old.add("a", cpu, 1e-3);
        assert_eq!(old.record_step_overhead(3.0e-3), None);
        assert_eq!(old.step_overhead_s, None);
    }
}
