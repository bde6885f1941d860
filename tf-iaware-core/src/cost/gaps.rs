//! The executor's own time between ops, as traced. Step stats time each op from its start to
//! the end of its outputs, so what the executor spends between ops — taking the next op off
//! the ready queue, handing it to a pool thread — is in none of them. On a quiet 2-core host it
//! was 0.18 ms of lenet's 1.8 ms step (105 ops) while the calibration's per-op overhead had come
//! out at 0, so measured predictions of small graphs ran 10–35 % short.
//!
//! It shows as **idle time**: stretches of a traced step in which a device runs no op at all.
//! Each stretch before an op counts unless that op's latest timed producer ran on another
//! device (the device was waiting for a transfer, which the simulator prices itself); the sum,
//! in work, over the kernels the device ran (a fused kernel's parts count once) is that step's
//! executor time per op, and the median over steps and devices of a type is the type's. A
//! waiting op that another op on the device held back is not counted: the device was busy,
//! and the simulator's lanes queue it. Why not each op's own
//! wait for its inputs: TensorFlow runs cheap ops inline on the thread that readied them, after
//! what that thread is running, so an op can wait hundreds of µs for its thread while the
//! other thread works; the simulator's lanes do not reproduce that order, and adding such waits
//! to every op priced lenet's step 30–80 % long.

use std::collections::{HashMap, HashSet};

use super::fit::SampleDevices;
use super::measured::Measurements;
use super::CostModel;
use crate::cluster::{Cluster, DeviceId};
use crate::graph::{NodeId, OpGraph};

/// One timed run: device, start and end (seconds after the step's first op), speed then
/// (FLOP/s: the device's peak × its availability when the sample was taken), and whether it
/// is a kernel of its own (not a part of another op's fused kernel).
#[derive(Clone, Copy, Debug)]
struct Run {
    device: DeviceId,
    start: f64,
    end: f64,
    speed: f64,
    kernel: bool,
}

/// Per device type (its index in `model`): the executor's time per kernel, in work (seconds ×
/// the device's speed when it ran, as [`fit::node_medians`](super::fit::node_medians) holds op
/// times), over every traced step of the `attributed` samples (fused kernels split over the ops
/// they replaced, [`Measurements::attributed`]: the parts follow each other, so a fused
/// kernel's consumers see it end where it did; see the module documentation). Device types
/// without samples that carry a step and start time (older files) are absent.
pub(crate) fn per_op_gap(
    model: &CostModel,
    graph: &OpGraph,
    cluster: &Cluster,
    attributed: &Measurements,
) -> HashMap<u32, f64> {
    let mut steps: HashMap<u32, HashMap<NodeId, Vec<Run>>> = HashMap::new();
    let mut devices = SampleDevices::new(model, cluster);
    for s in &attributed.samples {
        let (Some(step), Some(start)) = (s.step, s.start_s) else {
            continue;
        };
        let (Some((d, speed)), Some(node)) = (devices.of(s), graph.id(&s.node)) else {
            continue;
        };
        if !(start.is_finite() && s.seconds.is_finite() && start >= 0.0 && s.seconds >= 0.0) {
            continue;
        }
        steps
            .entry(step)
            .or_default()
            .entry(node)
            .or_default()
            .push(Run {
                device: d,
                start,
                end: start + s.seconds,
                speed,
                kernel: s.fused_into.as_deref().is_none_or(|f| f == s.node),
            });
    }
    // Per device type: idle work per kernel of each (step, device).
    let mut per_step: HashMap<u32, Vec<f64>> = HashMap::new();
    for runs in steps.values() {
        let mut by_device: HashMap<DeviceId, Vec<(NodeId, Run)>> = HashMap::new();
        for (&node, node_runs) in runs {
            for &r in node_runs {
                by_device.entry(r.device).or_default().push((node, r));
            }
        }
        for (device, mut on) in by_device {
            on.sort_by(|a, b| a.1.start.total_cmp(&b.1.start));
            let kernels = on.iter().filter(|(_, r)| r.kernel).count();
            let mut idle = 0.0;
            let mut busy_until = f64::NEG_INFINITY;
            for &(node, r) in &on {
                if r.start > busy_until
                    && busy_until.is_finite()
                    && waited_on_this_device(graph, runs, node, &r)
                {
                    idle += (r.start - busy_until) * r.speed;
                }
                busy_until = busy_until.max(r.end);
            }
            if kernels > 0 {
                per_step
                    .entry(model.device_type_index(device))
                    .or_default()
                    .push(idle / kernels as f64);
            }
        }
    }
    // The median over steps: one step that hiccuped (a page fault, a co-tenant's burst) does
    // not set every op's overhead.
    per_step
        .into_iter()
        .map(|(t, mut v)| (t, super::measured::median(&mut v)))
        .collect()
}

/// Whether `run` of `node` had its latest timed producer (producers without a sample are
/// looked through) on its own device, or none: then the idle stretch before it is the
/// executor's, not a wait for another device.
fn waited_on_this_device(
    graph: &OpGraph,
    runs: &HashMap<NodeId, Vec<Run>>,
    node: NodeId,
    run: &Run,
) -> bool {
    let mut ready: Option<Run> = None;
    let mut seen: HashSet<NodeId> = HashSet::new();
    let mut stack = graph.producers(node);
    while let Some(p) = stack.pop() {
        if !seen.insert(p) {
            continue;
        }
        match runs.get(&p) {
            Some(timed) => {
                let latest = timed
                    .iter()
                    .filter(|r| r.end <= run.start + 1e-9)
                    .max_by(|a, b| a.end.total_cmp(&b.end));
                if let Some(r) = latest {
                    if ready.is_none_or(|best| r.end > best.end) {
                        ready = Some(*r);
                    }
                }
            }
            None => stack.extend(graph.producers(p)),
        }
    }
    ready.is_none_or(|r| r.device == run.device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Device;
    use crate::cost::measured::OpSample;
    use crate::graph::{DType, OpGraphBuilder};

    const CPU: &str = "/job:localhost/replica:0/task:0/device:CPU:0";
    const CPU1: &str = "/job:localhost/replica:0/task:0/device:CPU:1";

    /// a → b → c, a → d; `v` (a constant, never timed) → c.
    fn graph() -> OpGraph {
        let mut b = OpGraphBuilder::new();
        let a = b.add("a", "Placeholder").unwrap();
        b.output(a, DType::FLOAT, Some(vec![10]));
        let v = b.add("v", "Const").unwrap();
        b.output(v, DType::FLOAT, Some(vec![10]));
        let bb = b.add("b", "Relu").unwrap();
        b.connect(a, 0, bb);
        b.output(bb, DType::FLOAT, Some(vec![10]));
        let c = b.add("c", "Add").unwrap();
        b.connect(bb, 0, c);
        b.connect(v, 0, c);
        b.output(c, DType::FLOAT, Some(vec![10]));
        let d = b.add("d", "Relu").unwrap();
        b.connect(a, 0, d);
        b.output(d, DType::FLOAT, Some(vec![10]));
        b.build().unwrap()
    }

    fn cluster(lanes: u32) -> Cluster {
        let dev = |name: &str| {
            let mut d = Device::nominal(name, "CPU", None, "h");
            d.peak_flops = 1e9;
            d.concurrency = lanes;
            d
        };
        Cluster::new(vec![dev(CPU), dev(CPU1)])
    }

    fn sample(node: &str, device: &str, step: u32, start_us: f64, dur_us: f64) -> OpSample {
        OpSample {
            node: node.into(),
            device: device.into(),
            seconds: dur_us * 1e-6,
            kernel: None,
            fused_into: None,
            availability: Some(1.0),
            step: Some(step),
            start_s: Some(start_us * 1e-6),
        }
    }

    /// The executor's time per kernel on the CPU type, µs (peak 1 GFLOP/s, availability 1).
    fn per_op_us(g: &OpGraph, c: &Cluster, samples: Vec<OpSample>) -> Option<f64> {
        let model = CostModel::new(g, c).unwrap();
        let m = Measurements {
            samples,
            ..Default::default()
        };
        per_op_gap(&model, g, c, &m).get(&0).map(|w| w / 1e9 * 1e6)
    }

    #[test]
    fn idle_stretches_of_a_device_are_shared_over_its_kernels() {
        let (g, c) = (graph(), cluster(2));
        // Step 0: a 0–10 µs, d 11–15, b 17–20 (idle 10–11 and 15–17), c 23–30 (idle 20–23;
        // its constant input is never timed). Step 1: the same with b 1 µs later.
        let step = |k: u32, b: f64| {
            vec![
                sample("a", CPU, k, 0.0, 10.0),
                sample("d", CPU, k, 11.0, 4.0),
                sample("b", CPU, k, b, 3.0),
                sample("c", CPU, k, b + 6.0, 7.0),
            ]
        };
        let mut s = step(0, 17.0);
        s.extend(step(1, 18.0));
        // Idle 1 + 2 + 3 µs, then 1 + 3 + 3, over four kernels each: the median of 1.5 and
        // 1.75 µs.
        let us = per_op_us(&g, &c, s.clone()).unwrap();
        assert!((us - 1.625).abs() < 1e-6, "{us}");
        // A third step that hiccuped (40 µs idle before c) moves the median, not the mean.
        let mut hiccup = step(2, 17.0);
        hiccup[3].start_s = Some(63e-6);
        s.extend(hiccup);
        let us = per_op_us(&g, &c, s).unwrap();
        assert!((us - 1.75).abs() < 1e-6, "{us}");
    }

    #[test]
    fn waits_for_another_device_and_overlapping_ops_are_not_idle() {
        let g = graph();
        // c waited for b, which ran on the other device: that stretch is a transfer's.
        let cross = vec![
            sample("a", CPU, 0, 0.0, 10.0),
            sample("b", CPU1, 0, 12.0, 8.0),
            sample("c", CPU, 0, 40.0, 7.0),
        ];
        assert_eq!(per_op_us(&g, &cluster(2), cross), Some(0.0));
        // d overlaps a and b follows d directly: no idle stretch at all.
        let busy = vec![
            sample("a", CPU, 0, 0.0, 10.0),
            sample("d", CPU, 0, 5.0, 20.0),
            sample("b", CPU, 0, 25.0, 5.0),
        ];
        assert_eq!(per_op_us(&g, &cluster(2), busy), Some(0.0));
    }

    #[test]
    fn a_fused_kernel_counts_once_and_samples_without_a_start_give_nothing() {
        let (g, c) = (graph(), cluster(2));
        // b and c ran as one kernel named c (its parts tile 12–30 µs); 2 µs idle before it.
        let mut fused = sample("c", CPU, 0, 12.0, 18.0);
        fused.kernel = Some("_FusedReluAdd".into());
        let parts = Measurements {
            samples: vec![sample("a", CPU, 0, 0.0, 10.0), fused],
            ..Default::default()
        }
        .attributed(&g);
        let kernels = parts
            .samples
            .iter()
            .filter(|s| s.fused_into.as_deref().is_none_or(|f| f == s.node))
            .count();
        let us = per_op_us(&g, &c, parts.samples.clone()).unwrap();
        assert!(
            (us - 2.0 / kernels as f64).abs() < 1e-6,
            "{us} over {kernels}"
        );
        let mut m = Measurements::new();
        m.add("a", CPU, 1e-5);
        m.add("b", CPU, 1e-5);
        let model = CostModel::new(&g, &c).unwrap();
        assert!(per_op_gap(&model, &g, &c, &m).is_empty());
    }

    #[test]
    fn measured_ops_pay_the_traced_executor_time_instead_of_the_calibrated_overhead() {
        let g = graph();
        let mut c = cluster(2);
        for d in &mut c.devices {
            d.op_overhead = 5e-6;
        }
        // 2 µs idle before b, over four kernels: 0.5 µs per op.
        let samples = vec![
            sample("a", CPU, 0, 0.0, 10.0),
            sample("b", CPU, 0, 12.0, 8.0),
            sample("c", CPU, 0, 20.0, 10.0),
            sample("d", CPU, 0, 30.0, 4.0),
        ];
        let m = Measurements {
            samples,
            ..Default::default()
        };
        let model = CostModel::with_measurements(&g, &c, &m).unwrap();
        assert_eq!(model.measurement_summary().traced_overhead_types, 1);
        let b = g.id("b").unwrap();
        let t = model.op_time(b, DeviceId::new(0));
        assert!((t - 8.5e-6).abs() < 1e-12, "{t}");
        // Without start times the calibrated 5 µs stand in.
        let mut old = Measurements::new();
        old.add("b", CPU, 8e-6);
        let model = CostModel::with_measurements(&g, &c, &old).unwrap();
        assert_eq!(model.measurement_summary().traced_overhead_types, 0);
        let t = model.op_time(b, DeviceId::new(0));
        assert!((t - 13e-6).abs() < 1e-12, "{t}");
    }
}
