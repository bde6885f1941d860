//! Building a [`CostModel`]: per-device figures, kernel classes of nodes and groups, analytic
//! work, then the calibrated and measured layers of op times.

use std::collections::HashMap;

use super::times::OpTimes;
use super::{analytic, fit, gaps, DeviceCost, MeasurementSummary, Measurements, OpKind, OpWork};
use super::{CostModel, Dag};
use crate::cluster::links::LinkTable;
use crate::cluster::model::{OpTypeCost, MIN_AVAILABILITY};
use crate::cluster::Cluster;
use crate::error::Result;
use crate::graph::{DeviceType, OpGraph};

fn intern<K: std::hash::Hash + Eq>(map: &mut HashMap<K, u32>, key: K) -> u32 {
    let next = map.len() as u32;
    *map.entry(key).or_insert(next)
}

impl CostModel {
    /// The cost model of `graph` on `cluster`: analytic, except for ops whose type has a
    /// calibrated cost on a device type ([`Cluster::op_costs`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming a device or link whose figures are unusable (see
    /// `Cluster::validate`); [`Error::InvalidGraph`](crate::Error::InvalidGraph) for a cycle.
    pub fn new(graph: &OpGraph, cluster: &Cluster) -> Result<Self> {
        let mut model = CostModel::analytic(graph, cluster)?;
        if !cluster.op_costs.is_empty() {
            let mut table = vec![f64::NAN; graph.len() * model.device_types.len()];
            model.fill_from_fits(graph, &mut table, &cluster.op_costs);
            if table.iter().any(|v| !v.is_nan()) {
                model.times.calibrated = Some(table);
            }
        }
        Ok(model)
    }

    /// The analytic model alone: `cluster`'s calibrated op-type costs are not used.
    ///
    /// # Errors
    /// As [`CostModel::new`].
    pub fn analytic(graph: &OpGraph, cluster: &Cluster) -> Result<Self> {
        cluster.validate()?;
        let dag = Dag::new(graph)?;
        let devices = DeviceFigures::of(cluster);
        let nodes = NodeClasses::of(graph, &devices.device_types);
        let (work, memory) = node_work(graph);
        let groups = GroupClasses::of(graph, &memory, &nodes, devices.device_types.len());
        // From per device type to per device, so hot loops index by device directly.
        let nt = devices.device_types.len();
        let per_device = |by_type: &[bool]| -> Vec<bool> {
            by_type
                .chunks(nt.max(1))
                .flat_map(|row| devices.costs.iter().map(move |d| row[d.dtype as usize]))
                .collect()
        };
        let class_ok = per_device(&nodes.class_ok);
        let gclass_ok = per_device(&groups.class_ok);
        Ok(CostModel {
            dag,
            memory,
            group_of: groups.group_of,
            group_memory: groups.memory,
            node_class: nodes.node_class,
            class_ok,
            group_class: groups.group_class,
            gclass_ok,
            devices: devices.costs,
            device_types: devices.device_types,
            links: LinkTable::new(cluster),
            active: None,
            pool_capacity: devices.pool_capacity,
            times: OpTimes::analytic(work),
        })
    }

    /// The cost model of `graph` on `cluster` with op times fitted from `measurements`
    /// (samples of ops of this graph on devices of this cluster; others are dropped).
    ///
    /// A sample's time `t` on device `d` is normalised to work `t × peak_flops(d) ×
    /// availability`, the availability `d` had when the sample was taken
    /// ([`OpSample::availability`](super::OpSample::availability); samples without one: its
    /// availability in `cluster`), so it carries over to other devices of the same type in
    /// proportion to their speed, and to `d` itself under more or less load than it was
    /// measured under. For each (op, device type): the median of its own samples if it has any; else
    /// a least-squares line `work = a + b × size` (size = analytic FLOPs + bytes) fitted over the
    /// measured ops of the same op type and device type; else the analytic time.
    ///
    /// # Errors
    /// As [`CostModel::new`].
    pub fn with_measurements(
        graph: &OpGraph,
        cluster: &Cluster,
        measurements: &Measurements,
    ) -> Result<Self> {
        let mut model = CostModel::new(graph, cluster)?;
        model.fit_measurements(graph, cluster, measurements);
        Ok(model)
    }

    fn fit_measurements(&mut self, graph: &OpGraph, cluster: &Cluster, m: &Measurements) {
        self.times.step_overhead = m
            .step_overhead_s
            .filter(|s| s.is_finite() && *s >= 0.0)
            .unwrap_or(0.0);
        // Fused kernels split over the ops they replaced, once for every use below.
        let m = &m.attributed(graph);
        let mut summary = MeasurementSummary::default();
        let medians = fit::node_medians(self, graph, cluster, m, &mut summary);
        summary.ops_measured = medians.len();
        if medians.is_empty() {
            self.times.summary = summary;
            return;
        }
        let nt = self.device_types.len();
        let mut table = vec![f64::NAN; graph.len() * nt];
        for (&(node, t), &work) in &medians {
            table[node.index() * nt + t as usize] = work;
        }
        // Ops without samples of their own: this graph's per-type lines (the calibrated layer
        // below answers for the rest).
        let mut fitter = fit::OpCostFitter::new();
        fitter.add_medians(self, graph, &medians);
        let fits = fitter.fit();
        summary.types_fitted = fits.len();
        self.fill_from_fits(graph, &mut table, &fits);
        let per_op = gaps::per_op_gap(self, graph, cluster, m);
        summary.traced_overhead_types = per_op.len();
        self.times.measured_gaps =
            (!per_op.is_empty()).then(|| Self::gap_table(graph, m, &table, nt, &per_op));
        self.times.measured = Some(table);
        summary.ops_covered = self.times.covered();
        self.times.summary = summary;
    }

    /// The executor's time before each measured op (`table`'s non-NaN slots), in work: its
    /// device type's traced figure per kernel (`per_op`), 0 for an op fused into another's
    /// kernel (`attributed`'s parts: one dispatch ran them all), NaN (the device's per-op
    /// overhead) where the type has none.
    fn gap_table(
        graph: &OpGraph,
        attributed: &Measurements,
        table: &[f64],
        nt: usize,
        per_op: &HashMap<u32, f64>,
    ) -> Vec<f64> {
        let absorbed: std::collections::HashSet<crate::graph::NodeId> = attributed
            .samples
            .iter()
            .filter(|s| s.fused_into.as_deref().is_some_and(|f| f != s.node))
            .filter_map(|s| graph.id(&s.node))
            .collect();
        let mut gaps = vec![f64::NAN; table.len()];
        for node in graph.node_ids() {
            for t in 0..nt {
                let slot = node.index() * nt + t;
                if table[slot].is_nan() {
                    continue;
                }
                if let Some(&g) = per_op.get(&(t as u32)) {
                    gaps[slot] = if absorbed.contains(&node) { 0.0 } else { g };
                }
            }
        }
        gaps
    }

    /// Fills the NaN slots of `table` (`[node * n_types + type]`, work) of ops whose (op type,
    /// device type) has a line in `fits`.
    fn fill_from_fits(&self, graph: &OpGraph, table: &mut [f64], fits: &[OpTypeCost]) {
        let nt = self.device_types.len();
        let mut by_op: HashMap<&str, Vec<(usize, &OpTypeCost)>> = HashMap::new();
        for f in fits {
            if let Some(t) = self.device_types.iter().position(|d| *d == f.device_type) {
                by_op.entry(f.op.as_str()).or_default().push((t, f));
            }
        }
        if by_op.is_empty() {
            return;
        }
        for (node, n) in graph.nodes().iter().enumerate() {
            let Some(lines) = by_op.get(n.op.as_str()) else {
                continue;
            };
            let w = &self.times.work[node];
            for &(t, f) in lines {
                let slot = &mut table[node * nt + t];
                if slot.is_nan() {
                    *slot = f.eval(w.flops + w.bytes);
                }
            }
        }
    }
}

/// Per-device figures, the interned device types and compute pools of a cluster.
struct DeviceFigures {
    costs: Vec<DeviceCost>,
    /// Interned device types, by [`DeviceCost::dtype`].
    device_types: Vec<DeviceType>,
    /// Per compute pool: ops at full speed at once.
    pool_capacity: Vec<f64>,
}

impl DeviceFigures {
    fn of(cluster: &Cluster) -> Self {
        let mut type_index: HashMap<DeviceType, u32> = HashMap::new();
        let mut pool_index: HashMap<&str, u32> = HashMap::new();
        let mut costs = Vec::with_capacity(cluster.devices.len());
        for d in &cluster.devices {
            let t = intern(&mut type_index, d.device_type.clone());
            let a = d.availability.max(MIN_AVAILABILITY);
            // A CPU device's per-op overhead is executor work on the same contended cores, so it
            // stretches with availability too; an accelerator's launch cost does not.
            let overhead = if d.device_type == DeviceType::Cpu {
                d.op_overhead / a
            } else {
                d.op_overhead
            };
            costs.push(DeviceCost {
                inv_flops: 1.0 / (d.peak_flops * a),
                inv_mem_bw: 1.0 / (d.memory_bandwidth * a),
                overhead,
                speed: d.peak_flops * a,
                dtype: t,
                lanes: d.concurrency,
                capacity: d.memory_bytes,
                pool: match &d.compute_pool {
                    Some(p) => intern(&mut pool_index, p.as_str()),
                    None => u32::MAX,
                },
            });
        }
        let mut pool_capacity = vec![1.0f64; pool_index.len()];
        for d in &costs {
            if d.pool != u32::MAX {
                let c = &mut pool_capacity[d.pool as usize];
                *c = c.max(d.lanes as f64);
            }
        }
        let mut device_types = vec![DeviceType::Cpu; type_index.len()];
        for (ty, &i) in &type_index {
            device_types[i as usize] = ty.clone();
        }
        DeviceFigures {
            costs,
            device_types,
            pool_capacity,
        }
    }
}

/// Kernel classes of nodes: which device types may run them.
struct NodeClasses {
    /// Kernel class of each node.
    node_class: Vec<u32>,
    /// `class_ok[class * n_types + type]`.
    class_ok: Vec<bool>,
}

impl NodeClasses {
    fn of(graph: &OpGraph, device_types: &[DeviceType]) -> Self {
        let mut classes: HashMap<Vec<DeviceType>, u32> = HashMap::new();
        let mut class_ok: Vec<bool> = Vec::new();
        let mut node_class = Vec::with_capacity(graph.len());
        for node in graph.nodes() {
            if node.kernel_device_types.is_empty() {
                // The common case: no restriction (class of the empty list), no allocation.
                if let Some(&c) = classes.get(&Vec::new()) {
                    node_class.push(c);
                    continue;
                }
            }
            let mut key: Vec<DeviceType> = node.kernel_device_types.clone();
            key.sort();
            key.dedup();
            let before = classes.len();
            let c = intern(&mut classes, key.clone());
            if classes.len() > before {
                // The graph's own rule (`DEFAULT` kernels run everywhere, …).
                class_ok.extend(device_types.iter().map(|t| node.has_kernel_for(t)));
            }
            node_class.push(c);
        }
        NodeClasses {
            node_class,
            class_ok,
        }
    }
}

/// Analytic work and memory (bytes) of every node.
fn node_work(graph: &OpGraph) -> (Vec<OpWork>, Vec<u64>) {
    let n = graph.len();
    let mut kinds: HashMap<&str, OpKind> = HashMap::new();
    let mut work: Vec<OpWork> = Vec::with_capacity(n);
    let mut memory: Vec<u64> = Vec::with_capacity(n);
    for (i, node) in graph.enumerate() {
        let kind = *kinds
            .entry(node.op.as_str())
            .or_insert_with(|| OpKind::of(&node.op));
        work.push(analytic::work_of_kind(graph, i, kind));
        memory.push(analytic::memory_of_kind(graph, i, kind));
    }
    (work, memory)
}

/// Colocation groups: each node's group, each group's memory and kernel class (the device
/// types every member may run on).
struct GroupClasses {
    group_of: Vec<u32>,
    /// Bytes.
    memory: Vec<u64>,
    group_class: Vec<u32>,
    /// `class_ok[class * n_types + type]`.
    class_ok: Vec<bool>,
}

impl GroupClasses {
    fn of(graph: &OpGraph, memory: &[u64], nodes: &NodeClasses, nt: usize) -> Self {
        let groups = graph.groups();
        let mut group_of = vec![0u32; graph.len()];
        let mut group_memory = Vec::with_capacity(groups.len());
        let mut gclasses: HashMap<Vec<bool>, u32> = HashMap::new();
        let mut gclass_ok: Vec<bool> = Vec::new();
        let mut group_class = Vec::with_capacity(groups.len());
        for (g, group) in groups.iter().enumerate() {
            let mut ok = vec![true; nt];
            let mut mem = 0u64;
            for &m in &group.members {
                group_of[m.index()] = g as u32;
                mem = mem.saturating_add(memory[m.index()]);
                let c = nodes.node_class[m.index()] as usize;
                for (t, slot) in ok.iter_mut().enumerate() {
                    *slot &= nodes.class_ok[c * nt + t];
                }
            }
            group_memory.push(mem);
            let before = gclasses.len();
            let c = intern(&mut gclasses, ok.clone());
            if gclasses.len() > before {
                gclass_ok.extend_from_slice(&ok);
            }
            group_class.push(c);
        }
        GroupClasses {
            group_of,
            memory: group_memory,
            group_class,
            class_ok: gclass_ok,
        }
    }
}
