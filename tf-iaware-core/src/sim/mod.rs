//! Discrete-event simulation of one training step of a placed graph, and its lower bound.
//!
//! The model:
//! - every device runs up to [`Device::concurrency`](crate::cluster::Device) ops at once, each for
//!   [`CostModel::op_time`]; ops that are ready wait in a per-device queue served first come, first
//!   served (ties: topological position);
//! - devices of one compute pool ([`Device::compute_pool`](crate::cluster::Device): the CPU
//!   devices of one process) share its capacity (its members' largest concurrency, in ops at
//!   full speed): the ops running on them at once progress at an equal share of it, each at
//!   most at full speed;
//! - an op is ready when each of its inputs has arrived on its device and each control
//!   predecessor has finished (and, across devices, its control token has arrived);
//! - a tensor consumed on another device is sent once per (tensor, receiving device) as soon as its
//!   producer finishes: after the link's latency it streams over the link, and transfers that share
//!   a link (same ordered device pair) share its bandwidth equally (processor sharing);
//! - the step ends when the last op or transfer ends.
//!
//! [`lower_bound`] is `max(critical path with every op on its fastest device and free
//! communication, total work / total effective capacity)`; no placement can beat it.

pub mod data_parallel;
mod engine;
pub mod synthetic;

pub use engine::simulate;

use crate::cluster::DeviceId;
use crate::cost::CostModel;
use crate::graph::NodeId;

/// When and where one op ran.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpRun {
    /// Device.
    pub device: DeviceId,
    /// Start, seconds from the beginning of the step.
    pub start: f64,
    /// End, seconds from the beginning of the step.
    pub end: f64,
}

impl Default for OpRun {
    /// Device 0, from 0 to 0 s.
    fn default() -> Self {
        OpRun {
            device: DeviceId::new(0),
            start: 0.0,
            end: 0.0,
        }
    }
}

/// One tensor (or control token) moved between devices.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransferRun {
    /// Producing op.
    pub producer: NodeId,
    /// Output index, or [`CONTROL`](crate::cost::CONTROL) for a control token.
    pub output: u32,
    /// Sending device.
    pub from: DeviceId,
    /// Receiving device.
    pub to: DeviceId,
    /// Bytes moved.
    pub bytes: u64,
    /// When the producer finished (the transfer was issued), seconds.
    pub start: f64,
    /// When the tensor arrived, seconds.
    pub end: f64,
}

/// What one simulated step did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimResult {
    /// Predicted step time, seconds.
    pub step_time: f64,
    /// Summed op time per device (indexed by [`DeviceId`]), seconds (can exceed `step_time` on a
    /// device with concurrency).
    pub busy: Vec<f64>,
    /// Bytes moved between devices.
    pub bytes_moved: u64,
    /// Per op (indexed by node id): device, start and end.
    pub ops: Vec<OpRun>,
    /// Every transfer, in the order they were issued.
    pub transfers: Vec<TransferRun>,
}

/// The lower bound on the step time of any placement, seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LowerBound {
    /// Longest dependency chain with each op at its fastest and free communication, seconds.
    pub critical_path: f64,
    /// Total work spread perfectly over every device's effective capacity, seconds.
    pub work: f64,
}

impl LowerBound {
    /// `max(critical_path, work)`, seconds.
    pub(crate) fn value(&self) -> f64 {
        self.critical_path.max(self.work)
    }
}

/// A lower bound on the step time of every placement of the cost model's graph.
///
/// `work` is `Σ_ops min_d (speed_d · t(op, d)) / capacity` with `speed_d` the effective FLOP/s and
/// `capacity` the sum of `speed_d · concurrency_d` over devices with a capacity of their own plus,
/// per compute pool, its fastest member's speed: for ops whose times scale with device speed this
/// is exactly total work over total capacity, and it stays a valid bound when they do not (a
/// weighted average of the loads). Devices without a kernel for an op are ignored for it.
pub fn lower_bound(cost: &CostModel) -> LowerBound {
    let n = cost.num_nodes();
    let nd = cost.num_devices();
    if n == 0 || nd == 0 {
        return LowerBound::default();
    }
    let dag = cost.dag();
    let mut finish = vec![0.0f64; n];
    let mut critical = 0.0f64;
    let mut weighted = 0.0f64;
    // A device of its own adds speed × lanes; a compute pool adds its fastest member's speed ×
    // its capacity once, however many devices share it.
    let mut pool_speed = vec![0.0f64; cost.num_pools()];
    let mut capacity = 0.0f64;
    for d in cost.device_ids() {
        match cost.pool(d) {
            Some(p) => pool_speed[p] = pool_speed[p].max(cost.speed(d)),
            None => capacity += cost.speed(d) * cost.lanes(d) as f64,
        }
    }
    capacity += pool_speed
        .iter()
        .enumerate()
        .map(|(p, s)| s * cost.pool_capacity(p))
        .sum::<f64>();
    for &i in dag.topo() {
        let mut fastest = f64::INFINITY;
        let mut least_work = f64::INFINITY;
        for d in cost.device_ids() {
            if cost.allowed(i, d) {
                let t = cost.op_time(i, d);
                fastest = fastest.min(t);
                least_work = least_work.min(t * cost.speed(d));
            }
        }
        if !fastest.is_finite() {
            // No device has a kernel: no placement exists; count the op at its fastest anyway.
            for d in cost.device_ids() {
                let t = cost.op_time(i, d);
                fastest = fastest.min(t);
                least_work = least_work.min(t * cost.speed(d));
            }
        }
        let start = dag
            .preds(i)
            .iter()
            .map(|e| finish[e.node.index()])
            .fold(0.0, f64::max);
        finish[i] = start + fastest;
        critical = critical.max(finish[i]);
        weighted += least_work;
    }
    // Sums taken in another order than the simulator's may round either way: keep the bound
    // 1e-9 (relative) below, so no simulated time falls under it by rounding.
    const ROUNDING: f64 = 1.0 - 1e-9;
    LowerBound {
        critical_path: critical * ROUNDING,
        work: weighted / capacity * ROUNDING,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cluster::model::{Link, LinkDefaults};
    use crate::cluster::{Cluster, Device};
    use crate::cost::CONTROL;
    use crate::graph::{DType, OpGraph, OpGraphBuilder};

    /// Devices CPU:0..n of one process; every link has `latency` s and `bandwidth` bytes/s.
    /// Device ids from their numbers (any number: ids of a larger cluster too).
    pub(crate) fn ids(devices: &[usize]) -> Vec<DeviceId> {
        devices.iter().map(|&d| DeviceId::new(d)).collect()
    }

    pub(crate) fn cluster(n: usize, latency: f64, bandwidth: f64) -> Cluster {
        let mut c = Cluster::new(
            (0..n)
                .map(|i| {
                    let mut d = Device::nominal(
                        &format!("/job:localhost/replica:0/task:0/device:CPU:{i}"),
                        "CPU",
                        None,
                        "localhost",
                    );
                    d.op_overhead = 0.0;
                    d.compute_pool = None;
                    d
                })
                .collect(),
        );
        let l = Link::new(latency, bandwidth);
        c.link_defaults = LinkDefaults {
            same_process: l,
            same_process_accelerator: l,
            same_host: l,
            cross_host: l,
            cross_rack: l,
        };
        c
    }

    /// A graph of `n` ops named `t0..`, edges `(from, to, bytes)` (one output per edge).
    pub(crate) fn graph(n: usize, edges: &[(usize, usize, i64)]) -> OpGraph {
        let mut b = OpGraphBuilder::new();
        for i in 0..n {
            b.add(&format!("t{i}"), "Task").unwrap();
        }
        for &(from, to, bytes) in edges {
            let (from, to) = (NodeId::new(from), NodeId::new(to));
            let k = b.node_mut(from).outputs.len();
            b.output(from, DType::UINT8, Some(vec![bytes]));
            b.connect(from, k, to);
        }
        b.build().unwrap()
    }

    pub(crate) fn model<T: AsRef<[f64]>>(g: &OpGraph, c: &Cluster, times: &[T]) -> CostModel {
        let mut m = CostModel::new(g, c).unwrap();
        for (i, t) in times.iter().enumerate() {
            m.set_op_times(NodeId::new(i), t.as_ref()).unwrap();
        }
        m
    }

    #[test]
    fn a_measured_step_overhead_is_added_to_every_simulated_step() {
        // t0 → t1, 1 ms each, on one device: 2 ms of ops, and 0.5 ms of the step outside them.
        let g = graph(2, &[(0, 1, 0)]);
        let c = cluster(1, 0.0, 1e9);
        let mut m = crate::cost::Measurements::new();
        m.add("t0", "/job:localhost/replica:0/task:0/device:CPU:0", 1e-3);
        m.step_overhead_s = Some(0.5e-3);
        let cost = CostModel::with_measurements(&g, &c, &m).unwrap();
        assert_eq!(cost.step_overhead(), 0.5e-3);
        let mut cost = cost;
        cost.set_op_times(NodeId::new(0), &[1e-3]).unwrap();
        cost.set_op_times(NodeId::new(1), &[1e-3]).unwrap();
        let r = simulate(&cost, &ids(&[0, 0])).unwrap();
        assert!((r.step_time - 2.5e-3).abs() < 1e-12, "{r:?}");
        assert!(
            (r.ops[1].end - 2e-3).abs() < 1e-12,
            "ops keep their own times"
        );
    }

    #[test]
    fn two_chains_on_two_devices_run_in_parallel() {
        // a0 → a1 → a2 and b0 → b1 → b2, 1 s each.
        let g = graph(6, &[(0, 1, 10), (1, 2, 10), (3, 4, 10), (4, 5, 10)]);
        let c = cluster(2, 0.5, 100.0);
        let m = model(&g, &c, &[&[1.0, 1.0]; 6]);
        let r = simulate(&m, &ids(&[0, 0, 0, 1, 1, 1])).unwrap();
        assert_eq!(r.step_time, 3.0);
        assert_eq!(r.busy, vec![3.0, 3.0]);
        assert_eq!(r.bytes_moved, 0);
        // Interleaved: every edge crosses (0.5 + 0.1 s each).
        let r = simulate(&m, &ids(&[0, 1, 0, 1, 0, 1])).unwrap();
        assert!((r.step_time - 4.2).abs() < 1e-12, "{}", r.step_time);
        assert_eq!(r.bytes_moved, 40);
        assert_eq!(r.transfers.len(), 4);
        // All on one device: 6 s.
        assert_eq!(simulate(&m, &ids(&[0; 6])).unwrap().step_time, 6.0);
    }

    #[test]
    fn hand_computed_schedule_with_queueing_and_fanout() {
        // t0 (2 s) feeds t1 (1 s), t2 (3 s) and t3 (1 s); t1, t2 on dev 1 share one transfer of
        // t0's output; t4 joins t2 and t3.
        let mut b = OpGraphBuilder::new();
        let t: Vec<NodeId> = (0..5)
            .map(|i| b.add(&format!("t{i}"), "Task").unwrap())
            .collect();
        b.output(t[0], DType::UINT8, Some(vec![100]));
        b.output(t[2], DType::UINT8, Some(vec![50]));
        b.output(t[3], DType::UINT8, Some(vec![10]));
        for c in [1, 2, 3] {
            b.connect(t[0], 0, t[c]);
        }
        b.connect(t[2], 0, t[4]);
        b.connect(t[3], 0, t[4]);
        b.control(t[1], t[4]);
        let g = b.build().unwrap();
        let c = cluster(2, 0.25, 100.0);
        let m = model(
            &g,
            &c,
            &[
                &[2.0, 2.0],
                &[1.0, 1.0],
                &[3.0, 3.0],
                &[1.0, 1.0],
                &[0.5, 0.5],
            ],
        );
        let r = simulate(&m, &ids(&[0, 1, 1, 0, 0])).unwrap();
        // t0: 0–2 on dev 0. One transfer to dev 1: 2 + 0.25 + 1 = 3.25.
        // t3: 2–3 on dev 0. Dev 1 gets t1 and t2 at 3.25: FIFO by topological position →
        // t1 3.25–4.25, t2 4.25–7.25. t2 → dev 0: 7.25 + 0.25 + 0.5 = 8. Control t1 → t4:
        // 4.25 + 0.25 = 4.5. t4: 8–8.5.
        let ops: Vec<(f64, f64)> = r.ops.iter().map(|o| (o.start, o.end)).collect();
        assert_eq!(
            ops,
            vec![
                (0.0, 2.0),
                (3.25, 4.25),
                (4.25, 7.25),
                (2.0, 3.0),
                (8.0, 8.5)
            ]
        );
        assert_eq!(r.step_time, 8.5);
        assert_eq!(r.transfers.len(), 3);
        assert_eq!(r.bytes_moved, 150);
        assert_eq!(r.busy, vec![3.5, 4.0]);
        let control = r.transfers.iter().find(|t| t.output == CONTROL).unwrap();
        assert_eq!((control.start, control.end, control.bytes), (4.25, 4.5, 0));
    }

    #[test]
    fn transfers_on_one_link_share_its_bandwidth() {
        // t0 and t1 (1 s each, dev 0 with concurrency 2) each send 100 B to t2 on dev 1.
        let g = graph(3, &[(0, 2, 100), (1, 2, 100)]);
        let mut c = cluster(2, 0.0, 100.0);
        c.devices[0].concurrency = 2;
        let m = model(&g, &c, &[&[1.0, 1.0], &[1.0, 1.0], &[1.0, 1.0]]);
        let r = simulate(&m, &ids(&[0, 0, 1])).unwrap();
        // Both start at 1, share 100 B/s: both arrive at 3 (not 2). t2: 3–4.
        assert_eq!(r.ops[0].end, 1.0);
        assert_eq!(r.ops[1].end, 1.0, "two lanes");
        assert_eq!(
            r.transfers.iter().map(|t| t.end).collect::<Vec<_>>(),
            vec![3.0, 3.0]
        );
        assert_eq!(r.step_time, 4.0);
        // Unequal sizes: 100 B and 300 B share until the first is done (2 s, both at 50 B/s),
        // then 200 B remain alone at 100 B/s: 2 s more.
        let g = graph(3, &[(0, 2, 100), (1, 2, 300)]);
        let m = model(&g, &c, &[&[1.0, 1.0], &[1.0, 1.0], &[1.0, 1.0]]);
        let r = simulate(&m, &ids(&[0, 0, 1])).unwrap();
        let ends: Vec<f64> = r.transfers.iter().map(|t| t.end).collect();
        assert_eq!(ends, vec![3.0, 5.0]);
        assert_eq!(r.step_time, 6.0);
    }

    #[test]
    fn devices_of_one_pool_share_its_capacity() {
        // Two independent ops (2 s and 1 s alone) on two devices of one pool: both run at half
        // speed until the short one ends at 2 s; the long one has 1 s left, alone: ends at 3 s.
        let g = graph(3, &[]);
        let mut c = cluster(3, 0.0, 1.0);
        c.devices[0].compute_pool = Some("host".into());
        c.devices[1].compute_pool = Some("host".into());
        let m = model(&g, &c, &[[2.0, 2.0, 2.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]);
        let r = simulate(&m, &ids(&[0, 1, 2])).unwrap();
        let ends: Vec<f64> = r.ops.iter().map(|o| o.end).collect();
        assert_eq!(ends, vec![3.0, 2.0, 1.0]);
        assert_eq!(r.step_time, 3.0);
        assert_eq!(
            r.busy,
            vec![2.0, 1.0, 1.0],
            "busy counts work at full speed"
        );
        // The bound: capacity is one pool + one device.
        let lb = lower_bound(&m);
        assert!((lb.work - 4.0 / 2.0).abs() < 1e-8, "{lb:?}");
    }

    #[test]
    fn a_pool_of_two_cores_runs_two_ops_at_full_speed() {
        // Three independent 1 s ops on one device with two lanes in a pool of two cores: two run
        // at full speed (end at 1 s), the third after them (2 s). With a second device in the
        // pool and two more ops, four ops share two cores: each at half speed.
        let g = graph(3, &[]);
        let mut c = cluster(2, 0.0, 1.0);
        for d in &mut c.devices {
            d.compute_pool = Some("host".into());
            d.concurrency = 2;
        }
        let m = model(&g, &c, &[[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]);
        assert_eq!(m.pool_capacity(0), 2.0);
        let r = simulate(&m, &ids(&[0, 0, 0])).unwrap();
        let ends: Vec<f64> = r.ops.iter().map(|o| o.end).collect();
        assert_eq!(ends, vec![1.0, 1.0, 2.0]);
        let g = graph(4, &[]);
        let m = model(&g, &c, &[[1.0, 1.0]; 4]);
        let r = simulate(&m, &ids(&[0, 0, 1, 1])).unwrap();
        assert!(r.ops.iter().all(|o| (o.end - 2.0).abs() < 1e-9), "{r:?}");
        // The bound: one pool of two cores.
        let lb = lower_bound(&m);
        assert!((lb.work - 2.0).abs() < 1e-6, "{lb:?}");
    }

    #[test]
    fn bad_assignments_are_errors() {
        let g = graph(2, &[(0, 1, 1)]);
        let c = cluster(2, 0.0, 1.0);
        let m = CostModel::new(&g, &c).unwrap();
        assert!(simulate(&m, &ids(&[0])).is_err());
        let err = simulate(&m, &ids(&[0, 7])).unwrap_err().to_string();
        assert!(err.contains("op 1") && err.contains("device 7"), "{err}");
    }

    #[test]
    fn lower_bound_is_critical_path_or_work() {
        // Chain of 3 × 1 s and 3 independent 1 s ops on 2 devices of equal speed.
        let g = graph(6, &[(0, 1, 1), (1, 2, 1)]);
        let c = cluster(2, 0.0, 1.0);
        let m = model(&g, &c, &[&[1.0, 1.0]; 6]);
        let lb = lower_bound(&m);
        assert!((lb.critical_path - 3.0).abs() < 1e-8, "{lb:?}");
        assert!((lb.work - 3.0).abs() < 1e-8, "{lb:?}");
        assert!(lb.value() <= 3.0, "never above the optimum");
        // Device 1 three times faster (1 s per op against 3 s): the chain takes 3 × 1 s at best.
        let mut c = cluster(2, 0.0, 1.0);
        c.devices[1].peak_flops *= 3.0;
        let m = model(&g, &c, &[&[3.0, 1.0]; 6]);
        let lb = lower_bound(&m);
        assert!((lb.critical_path - 3.0).abs() < 1e-8);
        // Work: 6 ops × (speed 3s · 1 s) / (s + 3s) = 4.5 s.
        assert!((lb.work - 4.5).abs() < 1e-8, "{}", lb.work);
        assert!((lb.value() - 4.5).abs() < 1e-8);
        // The simulated optimum respects it.
        let best = simulate(&m, &ids(&[1, 1, 1, 0, 1, 1])).unwrap().step_time;
        assert!(best >= lb.value(), "{best}");
    }
}
