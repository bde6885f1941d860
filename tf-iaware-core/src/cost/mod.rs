//! The cost model placers and the simulator share: how long each op takes on each device, how long
//! a tensor takes between two devices, and how much memory each op holds.
//!
//! [`CostModel::analytic`]: an op's time on device `d` is
//! `max(flops / (peak_flops × availability), bytes / (memory_bandwidth × availability)) + op_overhead`
//! (on CPU devices `op_overhead / availability`: the executor shares the contended cores)
//! (`analytic` counts FLOPs and bytes from shapes); free ops (views, constants, handles, control
//! flow — TensorFlow runs them inline in its executor) cost nothing. [`CostModel::new`] uses the
//! cluster's calibrated per-op-type lines
//! ([`Cluster::op_costs`](crate::cluster::Cluster::op_costs), fitted by [`OpCostFitter`] from a
//! calibration network's step stats) instead wherever an op's type has one.
//! [`CostModel::with_measurements`] fits times from the step stats of real runs of the graph
//! itself and uses them before both. The sources are layers of one lookup ([`CostSource`]:
//! explicit → measured → calibrated → analytic), kept apart from the placement problem, so a
//! placer asks [`CostModel::op_time`] whatever the source. A tensor of `b` bytes cut between
//! devices costs `latency + b / bandwidth` of their [`Link`].
//!
//! ```
//! use tf_iaware_core::cluster::{Cluster, Device};
//! use tf_iaware_core::cost::CostModel;
//! use tf_iaware_core::graph::{DType, OpGraphBuilder};
//!
//! let mut b = OpGraphBuilder::new();
//! let x = b.add("x", "Placeholder").unwrap();
//! b.output(x, DType::FLOAT, Some(vec![64, 256]));
//! let w = b.add("w", "Placeholder").unwrap();
//! b.output(w, DType::FLOAT, Some(vec![256, 128]));
//! let mm = b.add("mm", "MatMul").unwrap();
//! b.connect(x, 0, mm);
//! b.connect(w, 0, mm);
//! b.output(mm, DType::FLOAT, Some(vec![64, 128]));
//! let graph = b.build().unwrap();
//!
//! let mut cpu = Device::nominal("/job:localhost/replica:0/task:0/device:CPU:0", "CPU", None, "localhost");
//! cpu.peak_flops = 1e10;
//! cpu.op_overhead = 0.0;
//! let cluster = Cluster::new(vec![cpu]);
//! let cost = CostModel::new(&graph, &cluster).unwrap();
//! let cpu0 = cluster.device_id(0).unwrap();
//! // 2·64·256·128 FLOPs at 10 GFLOP/s.
//! assert!((cost.op_time(mm, cpu0) - 2.0 * 64.0 * 256.0 * 128.0 / 1e10).abs() < 1e-12);
//! ```

pub(crate) mod analytic;
mod build;
pub(crate) mod dag;
pub(crate) mod fit;
mod fused;
mod gaps;
pub(crate) mod measured;
mod times;

pub(crate) use analytic::OpKind;
pub use analytic::{classify, op_memory, op_work, OpClass, OpWork};
pub(crate) use dag::Dag;
pub use dag::CONTROL;
pub use fit::OpCostFitter;
pub use measured::{Measurements, OpSample};
pub use times::CostSource;

use times::OpTimes;

use crate::cluster::links::{LinkRow, LinkTable};
use crate::cluster::model::Link;
use crate::cluster::DeviceId;
use crate::error::{Error, Result};
use crate::graph::{DeviceType, GroupId, NodeId, OpGraph};

/// Per-device figures in the form the hot loops want.
#[derive(Clone, Debug)]
struct DeviceCost {
    /// 1 / effective FLOP/s.
    inv_flops: f64,
    /// 1 / effective bytes/s.
    inv_mem_bw: f64,
    /// Seconds per op.
    overhead: f64,
    /// Effective FLOP/s (peak × availability).
    speed: f64,
    /// Index into the interned device types.
    dtype: u32,
    /// Ops at once.
    lanes: u32,
    /// Memory capacity, bytes.
    capacity: Option<u64>,
    /// Compute pool index, or `u32::MAX` for a capacity of its own.
    pool: u32,
}

/// What [`CostModel::with_measurements`] made of its samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MeasurementSummary {
    /// Samples of an op of this graph on a device of this cluster.
    pub samples_used: usize,
    /// Samples of an unknown op or device, or with an unusable duration.
    pub samples_dropped: usize,
    /// (op, device type) pairs timed directly.
    pub ops_measured: usize,
    /// (op type, device type) pairs with a size-scaled fit.
    pub types_fitted: usize,
    /// (op, device type) pairs whose time now comes from measurements (direct or fitted).
    pub ops_covered: usize,
    /// Device types whose executor time per op comes from the traced steps' idle time
    /// (`cost::gaps`) instead of the device's calibrated per-op overhead, for measured ops.
    pub traced_overhead_types: usize,
}

/// Op times, transfer times and memory of one graph on one cluster. Indices are the graph's
/// [`NodeId`]s and [`GroupId`]s and the cluster's [`DeviceId`]s.
#[derive(Clone, Debug)]
pub struct CostModel {
    // The placement problem: the DAG, memory, groups, eligibility, devices, links and pools.
    dag: Dag,
    memory: Vec<u64>,
    group_of: Vec<u32>,
    group_memory: Vec<u64>,
    /// Kernel class of each node; `class_ok[class * n_devices + device]`.
    node_class: Vec<u32>,
    class_ok: Vec<bool>,
    /// Kernel class of each group; `gclass_ok[class * n_devices + device]`.
    group_class: Vec<u32>,
    gclass_ok: Vec<bool>,
    devices: Vec<DeviceCost>,
    device_types: Vec<DeviceType>,
    /// Every ordered pair's link, in space linear in devices and explicit links.
    links: LinkTable,
    /// Ops one training step runs (`None`: all); the others cost nothing and have no edges.
    active: Option<Vec<bool>>,
    /// Per compute pool: ops at full speed at once.
    pool_capacity: Vec<f64>,
    /// What each op costs on each device, layer by layer (see [`CostSource`]).
    times: OpTimes,
}

impl CostModel {
    /// Index of device `d`'s type among the model's interned device types.
    pub(crate) fn device_type_index(&self, d: DeviceId) -> u32 {
        self.devices[d].dtype
    }

    /// Interned device type `t`.
    pub(crate) fn device_type_name(&self, t: u32) -> &DeviceType {
        &self.device_types[t as usize]
    }

    /// Restricts the model to the ops of one training step — `active[node]`, e.g.
    /// [`OpGraph::ancestors`] of the train and loss ops — so predictions leave out what a step
    /// does not run (initialisers, savers): the other ops cost nothing and their edges are
    /// dropped. Placers still place them (with their colocation groups).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `active` does not have one entry per node.
    pub fn restrict_to(&mut self, graph: &OpGraph, active: Vec<bool>) -> Result<()> {
        if active.len() != graph.len() || graph.len() != self.times.work.len() {
            return Err(Error::InvalidArgument {
                what: "active ops of a step".into(),
                reason: format!(
                    "need one flag per op ({}), got {}",
                    self.times.work.len(),
                    active.len()
                ),
            });
        }
        self.dag = Dag::new_active(graph, &active)?;
        // Inactive ops become free work everywhere, so the hot `op_time` needs no extra test.
        let (nt, nd) = (self.device_types.len(), self.devices.len());
        for node in (0..active.len()).filter(|&i| !active[i]) {
            self.times.clear(node, nd, nt);
        }
        self.active = Some(active);
        Ok(())
    }

    /// Whether op `node` runs in a step (see [`CostModel::restrict_to`]).
    #[inline]
    pub fn is_active(&self, node: NodeId) -> bool {
        self.active.as_ref().is_none_or(|a| a[node.index()])
    }

    /// What the measured mode made of its samples (all zero for an analytic model).
    pub fn measurement_summary(&self) -> &MeasurementSummary {
        &self.times.summary
    }

    /// The step's own time outside every op, seconds, that measurements recorded (0 without).
    pub fn step_overhead(&self) -> f64 {
        self.times.step_overhead
    }

    /// Sets the time of op `node` on every device explicitly (seconds, one per device in cluster
    /// order; NaN keeps the model's own figure). Explicit times win over measured and analytic
    /// ones. Used for calibrated tables and for textbook scheduling problems.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `node` is out of range, `times` has the wrong length, or a
    /// time is negative or infinite.
    pub fn set_op_times(&mut self, node: NodeId, times: &[f64]) -> Result<()> {
        let (n, nd) = (self.times.work.len(), self.devices.len());
        if node.index() >= n {
            return Err(Error::BadId {
                kind: "node",
                id: node.index(),
                len: n,
            });
        }
        if times.len() != nd {
            return Err(Error::InvalidArgument {
                what: format!("explicit op times for node {node}"),
                reason: format!("need one time per device ({nd}), got {}", times.len()),
            });
        }
        if let Some(t) = times
            .iter()
            .find(|t| !t.is_nan() && (t.is_infinite() || **t < 0.0))
        {
            return Err(Error::InvalidArgument {
                what: format!("explicit op times for node {node}"),
                reason: format!("{t} is not a duration in seconds"),
            });
        }
        let table = self
            .times
            .explicit
            .get_or_insert_with(|| vec![f64::NAN; n * nd]);
        let node = node.index();
        table[node * nd..(node + 1) * nd].copy_from_slice(times);
        Ok(())
    }

    /// The dependency structure.
    pub(crate) fn dag(&self) -> &Dag {
        &self.dag
    }

    /// Number of ops.
    pub(crate) fn num_nodes(&self) -> usize {
        self.times.work.len()
    }

    /// Number of devices.
    pub(crate) fn num_devices(&self) -> usize {
        self.devices.len()
    }

    /// Number of colocation groups.
    pub(crate) fn num_groups(&self) -> usize {
        self.group_memory.len()
    }

    /// Ids of all ops, in graph order.
    pub(crate) fn node_ids(
        &self,
    ) -> impl DoubleEndedIterator<Item = NodeId> + ExactSizeIterator + Clone {
        NodeId::range(self.times.work.len())
    }

    /// Ids of all colocation groups.
    pub(crate) fn group_ids(
        &self,
    ) -> impl DoubleEndedIterator<Item = GroupId> + ExactSizeIterator + Clone {
        GroupId::range(self.group_memory.len())
    }

    /// Ids of all devices, in cluster order.
    pub(crate) fn device_ids(
        &self,
    ) -> impl DoubleEndedIterator<Item = DeviceId> + ExactSizeIterator + Clone {
        DeviceId::range(self.devices.len())
    }

    /// Seconds op `node` takes on device `device`, from the first cost layer that has a figure:
    /// explicit, else measured, else calibrated (work ÷ effective speed + the device's per-op
    /// overhead, which step stats do not include), else analytic (0 for a free op).
    #[inline]
    pub fn op_time(&self, node: NodeId, device: DeviceId) -> f64 {
        self.op_time_source(node, device).0
    }

    /// [`CostModel::op_time`] and the layer that gave it.
    #[inline]
    pub fn op_time_source(&self, node: NodeId, device: DeviceId) -> (f64, CostSource) {
        let (node, device) = (node.index(), device.index());
        self.times.time(
            node,
            device,
            &self.devices[device],
            self.devices.len(),
            self.device_types.len(),
        )
    }

    /// Analytic work of op `node`.
    pub(crate) fn work(&self, node: NodeId) -> &OpWork {
        &self.times.work[node.index()]
    }

    /// Whether op `node` does no work of its own (see [`OpWork::free`]) and has no explicit time.
    pub(crate) fn is_free(&self, node: NodeId) -> bool {
        let node = node.index();
        self.times.work[node].free
            && self.times.explicit.as_ref().is_none_or(|t| {
                let nd = self.devices.len();
                t[node * nd..(node + 1) * nd].iter().all(|v| v.is_nan())
            })
    }

    /// Bytes op `node` holds in device memory (see [`analytic::op_memory`]).
    pub(crate) fn memory(&self, node: NodeId) -> u64 {
        self.memory[node.index()]
    }

    /// Colocation group of `node`.
    pub(crate) fn group_of(&self, node: NodeId) -> GroupId {
        GroupId::new(self.group_of[node.index()] as usize)
    }

    /// Bytes colocation group `group` holds in device memory.
    pub(crate) fn group_memory(&self, group: GroupId) -> u64 {
        self.group_memory[group.index()]
    }

    /// Whether `device` has a kernel for op `node`.
    #[inline]
    pub(crate) fn allowed(&self, node: NodeId, device: DeviceId) -> bool {
        self.class_ok[self.node_class[node.index()] as usize * self.devices.len() + device.index()]
    }

    /// Whether `device` has kernels for every member of colocation group `group`.
    #[inline]
    pub(crate) fn group_allowed(&self, group: GroupId, device: DeviceId) -> bool {
        self.gclass_ok
            [self.group_class[group.index()] as usize * self.devices.len() + device.index()]
    }

    /// For each device (in cluster order, indexed by [`DeviceId`]), whether it has kernels for
    /// every member of `group`.
    #[inline]
    pub(crate) fn group_devices(&self, group: GroupId) -> &[bool] {
        let nd = self.devices.len();
        let c = self.group_class[group.index()] as usize;
        &self.gclass_ok[c * nd..(c + 1) * nd]
    }

    /// Memory capacity of `device`, bytes (`None`: unlimited).
    pub(crate) fn capacity(&self, device: DeviceId) -> Option<u64> {
        self.devices[device].capacity
    }

    /// Compute pool of `device` (see [`Device::compute_pool`](crate::cluster::Device)), as an
    /// index below [`CostModel::num_pools`]; `None` for a device with a capacity of its own.
    #[inline]
    pub(crate) fn pool(&self, device: DeviceId) -> Option<usize> {
        let p = self.devices[device].pool;
        (p != u32::MAX).then_some(p as usize)
    }

    /// Number of compute pools.
    pub(crate) fn num_pools(&self) -> usize {
        self.pool_capacity.len()
    }

    /// Ops compute pool `pool` runs at full speed at once: the largest concurrency of its
    /// members (the cores their process's thread pools run on).
    pub(crate) fn pool_capacity(&self, pool: usize) -> f64 {
        self.pool_capacity[pool]
    }

    /// Ops `device` runs at once.
    pub(crate) fn lanes(&self, device: DeviceId) -> usize {
        self.devices[device].lanes as usize
    }

    /// Effective compute rate of `device`, FLOP/s (peak × availability).
    pub(crate) fn speed(&self, device: DeviceId) -> f64 {
        self.devices[device].speed
    }

    /// The link from `from` to `to` (a zero-latency, infinite-bandwidth link when
    /// `from == to`).
    #[inline]
    pub(crate) fn link(&self, from: DeviceId, to: DeviceId) -> Link {
        self.links.link(from, to)
    }

    /// Seconds to move `bytes` from device `from` to device `to` over an idle link (0 when
    /// `from == to`).
    #[inline]
    pub(crate) fn transfer_time(&self, bytes: u64, from: DeviceId, to: DeviceId) -> f64 {
        let (latency, inv_bandwidth) = self.links.parts(from, to);
        latency + bytes as f64 * inv_bandwidth
    }

    /// The links from device `from` to every receiving device (latency, s, and 1/bandwidth,
    /// s/byte; both 0 to `from` itself), for loops over all receivers
    /// ([`LinkRow::max_arrivals`]).
    #[inline]
    pub(crate) fn links_from(&self, from: DeviceId) -> LinkRow<'_> {
        self.links.row(from)
    }

    /// Mean seconds to move `bytes` between two distinct devices (mean latency + bytes × mean
    /// 1/bandwidth over all ordered pairs); 0 with fewer than two devices.
    pub(crate) fn mean_transfer_time(&self, bytes: u64) -> f64 {
        self.links.mean_latency() + bytes as f64 * self.links.mean_inv_bandwidth()
    }

    /// Mean seconds of op `node` over the devices that have a kernel for it (all devices if none
    /// has).
    pub(crate) fn mean_op_time(&self, node: NodeId) -> f64 {
        let (mut sum, mut k) = (0.0, 0usize);
        for d in self.device_ids() {
            if self.allowed(node, d) {
                sum += self.op_time(node, d);
                k += 1;
            }
        }
        if k == 0 {
            self.device_ids()
                .map(|d| self.op_time(node, d))
                .sum::<f64>()
                / self.devices.len().max(1) as f64
        } else {
            sum / k as f64
        }
    }

    /// Fastest time of op `node` over the devices that have a kernel for it, and that device
    /// (`(INFINITY, None)` when none has).
    pub fn min_op_time(&self, node: NodeId) -> (f64, Option<DeviceId>) {
        let mut best = (f64::INFINITY, None);
        for d in self.device_ids() {
            if self.allowed(node, d) {
                let t = self.op_time(node, d);
                if t < best.0 {
                    best = (t, Some(d));
                }
            }
        }
        best
    }

    /// Bytes held on each device when op `i` runs on `assignment[i]`.
    ///
    /// # Panics
    /// If `assignment` is shorter than the graph or names a device out of range.
    pub fn device_memory(&self, assignment: &[DeviceId]) -> Vec<u64> {
        let mut out = vec![0u64; self.devices.len()];
        for (i, &d) in assignment.iter().enumerate().take(self.times.work.len()) {
            out[d] = out[d].saturating_add(self.memory[i]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::model::OpTypeCost;
    use crate::cluster::{Cluster, Device};
    use crate::graph::{DType, OpGraphBuilder};
    use crate::proto::{DeviceStepStats, NodeExecStats, StepStats};

    const CPU0: &str = "/job:localhost/replica:0/task:0/device:CPU:0";
    const CPU1: &str = "/job:localhost/replica:0/task:0/device:CPU:1";
    const GPU0: &str = "/job:localhost/replica:0/task:0/device:GPU:0";

    fn cluster() -> Cluster {
        let mut c0 = Device::nominal(CPU0, "CPU", Some(1 << 20), "h");
        c0.peak_flops = 1e9;
        c0.memory_bandwidth = 1e9;
        c0.op_overhead = 1e-6;
        let mut c1 = c0.clone();
        c1.name = CPU1.into();
        c1.availability = 0.5;
        let g = Device::nominal(GPU0, "GPU", None, "h");
        Cluster::new(vec![c0, c1, g])
    }

    fn graph() -> OpGraph {
        let mut b = OpGraphBuilder::new();
        let x = b.add("x", "Placeholder").unwrap();
        b.output(x, DType::FLOAT, Some(vec![100, 100]));
        let mm = b.add("mm", "MatMul").unwrap();
        b.connect(x, 0, mm);
        b.connect(x, 0, mm);
        b.output(mm, DType::FLOAT, Some(vec![100, 100]));
        let relu = b.add("relu", "Relu").unwrap();
        b.connect(mm, 0, relu);
        b.output(relu, DType::FLOAT, Some(vec![100, 100]));
        let relu2 = b.add("relu2", "Relu").unwrap();
        b.connect(relu, 0, relu2);
        b.output(relu2, DType::FLOAT, Some(vec![1000, 100]));
        let cpu_only = b.add("cpu_only", "Relu").unwrap();
        b.node_mut(cpu_only).kernel_device_types = vec!["CPU".into()];
        b.build().unwrap()
    }

    #[test]
    fn analytic_times_follow_the_roofline() {
        let g = graph();
        let c = cluster();
        let m = CostModel::new(&g, &c).unwrap();
        // MatMul: 2e6 FLOPs at 1 GFLOP/s = 2 ms; bytes 120 kB at 1 GB/s = 0.12 ms.
        assert!((m.op_time(NodeId::new(1), DeviceId::new(0)) - (2e-3 + 1e-6)).abs() < 1e-12);
        // Half available: twice as long (compute part and the executor's overhead).
        assert!((m.op_time(NodeId::new(1), DeviceId::new(1)) - (4e-3 + 2e-6)).abs() < 1e-12);
        // Relu: 1e4 FLOPs = 10 µs vs 80 kB = 80 µs: memory-bound.
        assert!((m.op_time(NodeId::new(2), DeviceId::new(0)) - (80e-6 + 1e-6)).abs() < 1e-12);
        assert!(m.is_free(NodeId::new(0)) && !m.is_free(NodeId::new(1)));
        assert!(
            m.allowed(NodeId::new(4), DeviceId::new(0))
                && !m.allowed(NodeId::new(4), DeviceId::new(2))
                && m.allowed(NodeId::new(3), DeviceId::new(2))
        );
        assert!(!m.group_allowed(m.group_of(NodeId::new(4)), DeviceId::new(2)));
        assert_eq!(
            m.min_op_time(NodeId::new(1)).1,
            Some(DeviceId::new(2)),
            "the GPU is fastest"
        );
        assert_eq!(m.memory(NodeId::new(1)), 40_000);
        let on = |d: &[usize]| d.iter().map(|&d| DeviceId::new(d)).collect::<Vec<_>>();
        assert_eq!(
            m.device_memory(&on(&[0, 0, 1, 1, 0])),
            vec![40_000, 440_000, 0]
        );
        // Transfers: same process CPU↔CPU default link.
        let l = c.link_defaults.same_process;
        assert_eq!(
            m.transfer_time(1000, DeviceId::new(0), DeviceId::new(1)),
            l.latency + 1000.0 / l.bandwidth
        );
        assert_eq!(
            m.transfer_time(1000, DeviceId::new(1), DeviceId::new(1)),
            0.0
        );
        assert_eq!(m.capacity(DeviceId::new(0)), Some(1 << 20));
    }

    #[test]
    fn default_kernels_run_everywhere() {
        let mut b = OpGraphBuilder::new();
        let noop = b.add("group_deps", "NoOp").unwrap();
        b.node_mut(noop).kernel_device_types = vec!["DEFAULT".into(), "TPU_SYSTEM".into()];
        let tpu = b.add("tpu", "X").unwrap();
        b.node_mut(tpu).kernel_device_types = vec!["TPU_SYSTEM".into()];
        let m = CostModel::new(&b.build().unwrap(), &cluster()).unwrap();
        assert!(m.device_ids().all(|d| m.allowed(noop, d)));
        assert!(m.device_ids().all(|d| !m.allowed(tpu, d)));
        assert_eq!(m.device_ids().len(), 3);
    }

    #[test]
    fn bad_devices_are_named() {
        let mut c = cluster();
        c.devices[1].peak_flops = 0.0;
        let err = CostModel::new(&graph(), &c).unwrap_err().to_string();
        assert!(err.contains("CPU:1") && err.contains("peak_flops"), "{err}");
    }

    #[test]
    fn explicit_times_win() {
        let g = graph();
        let mut m = CostModel::new(&g, &cluster()).unwrap();
        m.set_op_times(NodeId::new(0), &[1.0, 2.0, f64::NAN])
            .unwrap();
        assert_eq!(m.op_time(NodeId::new(0), DeviceId::new(1)), 2.0);
        assert!(m.op_time(NodeId::new(0), DeviceId::new(2)) < 1e-3);
        assert!(!m.is_free(NodeId::new(0)));
        assert!(m.set_op_times(NodeId::new(0), &[1.0]).is_err());
        assert!(m.set_op_times(NodeId::new(0), &[1.0, -1.0, 0.0]).is_err());
    }

    #[test]
    fn measured_times_override_and_scale() {
        let g = graph();
        let c = cluster();
        // No start times: the executor's time between ops is not traced, so the device's per-op
        // overhead stands in for it (`cost::gaps` reads it where starts are known).
        let ns = |name: &str, micros: i64| NodeExecStats {
            node_name: name.into(),
            all_start_micros: 0,
            all_end_rel_micros: micros,
            ..Default::default()
        };
        let stats = StepStats {
            dev_stats: vec![DeviceStepStats {
                device: CPU0.into(),
                node_stats: vec![
                    ns("mm", 500),
                    ns("mm", 700),
                    ns("mm", 600),
                    ns("relu", 50),
                    ns("ghost", 9),
                ],
            }],
        };
        let mut meas = Measurements::new();
        meas.add_step_stats(&stats);
        meas.add("relu", "/job:elsewhere/replica:0/task:0/device:CPU:0", 1.0);
        let m = CostModel::with_measurements(&g, &c, &meas).unwrap();
        let s = m.measurement_summary();
        assert_eq!((s.samples_used, s.samples_dropped), (4, 2));
        assert_eq!(s.ops_measured, 2);
        // Median 600 µs on CPU:0; CPU:1 is half as fast.
        // (Measured times get the device's per-op overhead, 1 µs, which step stats lack.)
        assert!((m.op_time(NodeId::new(1), DeviceId::new(0)) - 601e-6).abs() < 1e-12);
        assert!((m.op_time(NodeId::new(1), DeviceId::new(1)) - 1202e-6).abs() < 1e-12);
        assert!((m.op_time(NodeId::new(2), DeviceId::new(0)) - 51e-6).abs() < 1e-12);
        // relu2 was never timed: the Relu fit (one size → through the origin) scales by size.
        // relu: 1e4 FLOPs + 8e4 bytes; relu2: 1e5 + 4.4e5.
        let expected = 50e-6 * (1e5 + 4.4e5) / (1e4 + 8e4) + 1e-6;
        assert!(
            (m.op_time(NodeId::new(3), DeviceId::new(0)) - expected).abs() < 1e-12,
            "{}",
            m.op_time(NodeId::new(3), DeviceId::new(0))
        );
        // No GPU data: analytic.
        let analytic = CostModel::new(&g, &c).unwrap();
        assert_eq!(
            m.op_time(NodeId::new(1), DeviceId::new(2)),
            analytic.op_time(NodeId::new(1), DeviceId::new(2))
        );
        assert_eq!(
            m.op_time(NodeId::new(0), DeviceId::new(0)),
            analytic.op_time(NodeId::new(0), DeviceId::new(0))
        );
    }

    #[test]
    fn calibrated_op_types_replace_analytics_and_measurements_win() {
        let g = graph();
        let mut c = cluster();
        // Relu on CPU: 1000 FLOP-equivalents + 0.1 per unit of size (FLOPs + bytes).
        c.op_costs.push(OpTypeCost {
            device_type: "CPU".into(),
            op: "Relu".into(),
            intercept: 1000.0,
            slope: 0.1,
            points: 3,
        });
        let m = CostModel::new(&g, &c).unwrap();
        // relu: 1e4 FLOPs + 8e4 bytes → 1000 + 9000 = 1e4 work at 1 GFLOP/s = 10 µs + overhead.
        assert!((m.op_time(NodeId::new(2), DeviceId::new(0)) - (10e-6 + 1e-6)).abs() < 1e-12);
        // Half available: twice the work time.
        assert!((m.op_time(NodeId::new(2), DeviceId::new(1)) - (20e-6 + 2e-6)).abs() < 1e-12);
        // Other types and other device types stay analytic.
        let a = CostModel::analytic(&g, &c).unwrap();
        assert_eq!(
            m.op_time(NodeId::new(1), DeviceId::new(0)),
            a.op_time(NodeId::new(1), DeviceId::new(0))
        );
        assert_eq!(
            m.op_time(NodeId::new(2), DeviceId::new(2)),
            a.op_time(NodeId::new(2), DeviceId::new(2))
        );
        assert!((a.op_time(NodeId::new(2), DeviceId::new(0)) - (80e-6 + 1e-6)).abs() < 1e-12);
        // A measurement of relu wins over the calibrated line; relu2 keeps the line since this
        // graph's own Relu fit only covers… relu2 too (one type): the graph's fit wins there.
        let mut meas = Measurements::new();
        meas.add("relu", CPU0, 40e-6);
        let mm = CostModel::with_measurements(&g, &c, &meas).unwrap();
        assert!((mm.op_time(NodeId::new(2), DeviceId::new(0)) - (40e-6 + 1e-6)).abs() < 1e-12);
        let expected = 40e-6 * (1e5 + 4.4e5) / (1e4 + 8e4);
        assert!((mm.op_time(NodeId::new(3), DeviceId::new(0)) - (expected + 1e-6)).abs() < 1e-12);
        // cpu_only (a Relu without shapes: size 0) takes the graph's line through the origin.
        assert!((mm.op_time(NodeId::new(4), DeviceId::new(0)) - 1e-6).abs() < 1e-12);
        // Each figure names its layer: measured over calibrated over analytic; explicit over
        // them all.
        let source = |m: &CostModel, n: usize, d: usize| {
            m.op_time_source(NodeId::new(n), DeviceId::new(d)).1
        };
        assert_eq!(source(&m, 2, 0), CostSource::Calibrated);
        assert_eq!(source(&m, 2, 2), CostSource::Analytic);
        assert_eq!(source(&a, 2, 0), CostSource::Analytic);
        // The placeholder does no work of its own.
        assert_eq!(source(&mm, 0, 0), CostSource::Free);
        assert_eq!(source(&mm, 2, 0), CostSource::Measured);
        assert_eq!(source(&mm, 3, 0), CostSource::Measured);
        let mut e = mm.clone();
        e.set_op_times(NodeId::new(2), &[5e-6, f64::NAN, f64::NAN])
            .unwrap();
        assert_eq!(source(&e, 2, 0), CostSource::Explicit);
        assert_eq!(e.op_time(NodeId::new(2), DeviceId::new(0)), 5e-6);
        assert_eq!(source(&e, 2, 1), CostSource::Measured);
    }

    #[test]
    fn measured_times_follow_the_load_they_were_taken_under() {
        let g = graph();
        let quiet = cluster();
        let mut busy = cluster();
        busy.devices[0].availability = 0.2;
        // mm ran 600 µs on CPU:0 while it was fully available; relu 50 µs on CPU:1 (half).
        let mut meas = Measurements::new();
        meas.add("mm", CPU0, 600e-6);
        meas.add("relu", CPU1, 50e-6);
        meas.add("relu", "/job:elsewhere/replica:0/task:0/device:CPU:0", 1.0);
        assert_eq!(
            meas.record_availability(&quiet),
            2,
            "not the unknown device"
        );
        assert_eq!(meas.samples[0].availability, Some(1.0));
        assert_eq!(meas.samples[1].availability, Some(0.5));
        assert_eq!(meas.samples[2].availability, None);
        assert_eq!(meas.record_availability(&busy), 0, "recorded once");
        let mm = NodeId::new(1);
        let at_quiet = CostModel::with_measurements(&g, &quiet, &meas).unwrap();
        let at_busy = CostModel::with_measurements(&g, &busy, &meas).unwrap();
        let (t1, t02) = (
            at_quiet.op_time(mm, DeviceId::new(0)),
            at_busy.op_time(mm, DeviceId::new(0)),
        );
        assert!((t1 - 601e-6).abs() < 1e-12, "{t1}");
        // A fifth of the device: five times as long (the per-op overhead stretches too).
        assert!((t02 / t1 - 5.0).abs() < 1e-9, "{t02} vs {t1}");
        // CPU:1 is as busy as when relu was timed there: its own time; on the quiet CPU:0
        // twice as fast.
        let relu = NodeId::new(2);
        assert!((at_busy.op_time(relu, DeviceId::new(1)) - (50e-6 + 2e-6)).abs() < 1e-12);
        assert!((at_busy.op_time(relu, DeviceId::new(0)) - (25e-6 * 5.0 + 5e-6)).abs() < 1e-12);
        // A file of an older version has no availability: the samples are taken as measured
        // at the availability the model is built with (today's behaviour), so the busy
        // machine predicts the quiet time.
        let text = r#"{"samples":[{"node":"mm","device":"/job:localhost/replica:0/task:0/device:CPU:0","seconds":0.0006}]}"#;
        let old: Measurements = serde_json::from_str(text).unwrap();
        assert_eq!(old.samples[0].availability, None);
        let m = CostModel::with_measurements(&g, &busy, &old).unwrap();
        assert!((m.op_time(mm, DeviceId::new(0)) - (600e-6 + 5e-6)).abs() < 1e-12);
        // Written with it, read back with it; without it, as before.
        let json = serde_json::to_string(&meas).unwrap();
        assert!(json.contains("\"availability\":0.5"), "{json}");
        assert_eq!(serde_json::from_str::<Measurements>(&json).unwrap(), meas);
        assert_eq!(serde_json::to_string(&old).unwrap(), text);
    }

    #[test]
    fn the_fitter_turns_timed_ops_into_lines() {
        let g = graph();
        let c = cluster();
        let mut meas = Measurements::new();
        // relu (size 9e4) 10 µs and relu2 (size 5.4e5) 55 µs on CPU:0 (1 GFLOP/s): work 1e4 and
        // 5.5e4 → slope 0.1, intercept 1000.
        meas.add("relu", CPU0, 10e-6);
        meas.add("relu", CPU0, 11e-6);
        meas.add("relu", CPU0, 9e-6);
        meas.add("relu2", CPU1, 110e-6); // half available: work 5.5e4
        meas.add("nobody", CPU0, 1.0);
        let mut fitter = OpCostFitter::new();
        fitter.add(&g, &c, &meas).unwrap();
        let fits = fitter.fit();
        assert_eq!(fits.len(), 1, "{fits:?}");
        let f = &fits[0];
        assert_eq!(
            (f.op.as_str(), f.device_type.as_str(), f.points),
            ("Relu", "CPU", 2)
        );
        assert!(
            (f.slope - 0.1).abs() < 1e-9 && (f.intercept - 1000.0).abs() < 1e-3,
            "{f:?}"
        );
        let s = fitter.summary();
        assert_eq!(
            (s.samples_used, s.samples_dropped, s.ops_measured),
            (4, 1, 2)
        );
    }

    #[test]
    fn a_step_leaves_out_what_its_targets_do_not_need() {
        let g = graph();
        let active = g.ancestors(&[NodeId::new(2)]);
        assert_eq!(active, vec![true, true, true, false, false]);
        let mut m = CostModel::new(&g, &cluster()).unwrap();
        let before = m.op_time(NodeId::new(3), DeviceId::new(0));
        assert!(before > 0.0 && m.dag().preds(NodeId::new(3)).len() == 1);
        m.restrict_to(&g, active).unwrap();
        assert_eq!(m.op_time(NodeId::new(3), DeviceId::new(0)), 0.0);
        assert!(
            m.is_free(NodeId::new(3))
                && !m.is_active(NodeId::new(3))
                && m.is_active(NodeId::new(1))
        );
        assert!(
            m.dag().preds(NodeId::new(3)).is_empty(),
            "no edge into an op the step skips"
        );
        assert!(m.op_time(NodeId::new(1), DeviceId::new(0)) > 0.0);
        assert!(m.restrict_to(&g, vec![true]).is_err());
    }
}
