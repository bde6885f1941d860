//! What a placement is predicted to do: the [`PlacementReport`] every `place`/`simulate` output
//! carries (the report fields of docs/src/reference/file-formats.md), and Chrome traces of simulated and measured steps ([`trace`]).

pub mod trace;

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, DeviceId};
use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::graph::{NodeId, OpGraph};
use crate::placer::{resolve, Placement, Strategy};
use crate::sim::{lower_bound, simulate, LowerBound, SimResult};

/// Placing with a report, for every [`Strategy`].
pub trait PlaceWithReport {
    /// [`Strategy::place_with_cost`], timed, plus the [`PlacementReport`] of the result
    /// (simulated with `cost`; ops the placement leaves to TensorFlow are simulated where
    /// TensorFlow's placer would put them).
    ///
    /// # Errors
    /// As [`Strategy::place`], and `PlacementReport::new`'s errors.
    fn place_with_report(
        &self,
        graph: &OpGraph,
        cluster: &Cluster,
        cost: &CostModel,
    ) -> Result<(Placement, PlacementReport)>;
}

impl<S: Strategy + ?Sized> PlaceWithReport for S {
    fn place_with_report(
        &self,
        graph: &OpGraph,
        cluster: &Cluster,
        cost: &CostModel,
    ) -> Result<(Placement, PlacementReport)> {
        let start = Instant::now();
        let placement = self.place_with_cost(graph, cluster, cost)?;
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let report = PlacementReport::new(self.name(), ms, graph, cluster, cost, &placement)?;
        Ok((placement, report))
    }
}

/// Predicted load of one device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceLoad {
    /// Ops placed on the device.
    pub ops: usize,
    /// Floating-point operations of those ops (analytic).
    pub flops: u64,
    /// Bytes those ops read and write (analytic memory traffic).
    pub bytes: u64,
    /// Bytes held in the device's memory: variables, optimiser slots, activations.
    pub memory_bytes: u64,
    /// The device's memory capacity, bytes (`None`: unknown).
    pub memory_capacity_bytes: Option<u64>,
    /// Simulated time the device spends running ops in one step, milliseconds.
    pub busy_ms: f64,
    /// Bytes the device receives from other devices in one simulated step.
    pub recv_bytes: u64,
}

/// A placement and its predicted behaviour (the report fields of docs/src/reference/file-formats.md and a few more).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlacementReport {
    /// Strategy that placed the graph.
    pub strategy: String,
    /// Time the strategy took, milliseconds.
    pub placement_ms: f64,
    /// Per device (full name), every device of the cluster.
    pub devices: BTreeMap<String, DeviceLoad>,
    /// Simulated step time, milliseconds.
    pub predicted_step_ms: f64,
    /// Lower bound on the step time of any placement, milliseconds.
    pub lower_bound_ms: f64,
    /// The critical-path part of the bound, milliseconds.
    pub critical_path_ms: f64,
    /// The total-work part of the bound, milliseconds.
    pub work_bound_ms: f64,
    /// Bytes moved between devices in one simulated step.
    pub transfer_bytes: u64,
    /// Transfers between devices in one simulated step.
    pub transfers: usize,
    /// Ops in the graph.
    pub ops: usize,
    /// Colocation groups in the graph.
    pub colocation_groups: usize,
}

/// A placement resolved to devices, simulated and bounded.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// Device of every op (ops without a device where TensorFlow would put them).
    pub assignment: Vec<DeviceId>,
    /// The simulated step.
    pub sim: SimResult,
    /// The lower bound of the graph on the cluster.
    pub bound: LowerBound,
}

/// Resolves `placement` on `cluster` (see [`resolve::assignment`]), simulates one step with
/// `cost` and computes the lower bound.
///
/// # Errors
/// [`Error::InvalidArgument`] if `cost` was built for another graph or cluster; the errors of
/// [`resolve::assignment`].
pub fn evaluate(
    graph: &OpGraph,
    cluster: &Cluster,
    cost: &CostModel,
    placement: &Placement,
) -> Result<Evaluation> {
    if cost.num_nodes() != graph.len() || cost.num_devices() != cluster.devices.len() {
        return Err(Error::InvalidArgument {
            what: "cost model".into(),
            reason: format!(
                "built for {} ops on {} devices, but the graph has {} ops and the cluster {} devices",
                cost.num_nodes(),
                cost.num_devices(),
                graph.len(),
                cluster.devices.len()
            ),
        });
    }
    let assignment = resolve::assignment(graph, cluster, placement)?;
    let sim = simulate(cost, &assignment)?;
    Ok(Evaluation {
        assignment,
        sim,
        bound: lower_bound(cost),
    })
}

impl PlacementReport {
    /// Evaluates `placement` (see [`evaluate`]) and reports it.
    ///
    /// # Errors
    /// As [`evaluate`].
    pub(crate) fn new(
        strategy: &str,
        placement_ms: f64,
        graph: &OpGraph,
        cluster: &Cluster,
        cost: &CostModel,
        placement: &Placement,
    ) -> Result<Self> {
        let ev = evaluate(graph, cluster, cost, placement)?;
        Ok(Self::from_evaluation(
            strategy,
            placement_ms,
            graph,
            cluster,
            cost,
            &ev,
        ))
    }

    /// The report of an [`Evaluation`].
    ///
    /// # Panics
    /// If `ev` does not come from this graph, cluster and cost model.
    pub(crate) fn from_evaluation(
        strategy: &str,
        placement_ms: f64,
        graph: &OpGraph,
        cluster: &Cluster,
        cost: &CostModel,
        ev: &Evaluation,
    ) -> Self {
        let mut loads: Vec<DeviceLoad> = cluster
            .devices
            .iter()
            .zip(&ev.sim.busy)
            .map(|(d, &busy)| DeviceLoad {
                memory_capacity_bytes: d.memory_bytes,
                busy_ms: busy * 1e3,
                ..DeviceLoad::default()
            })
            .collect();
        for (i, &d) in NodeId::range(ev.assignment.len()).zip(&ev.assignment) {
            let w = cost.work(i);
            let load = &mut loads[d];
            load.ops += 1;
            load.flops = load.flops.saturating_add(w.flops as u64);
            load.bytes = load.bytes.saturating_add(w.bytes as u64);
            load.memory_bytes = load.memory_bytes.saturating_add(cost.memory(i));
        }
        for t in &ev.sim.transfers {
            loads[t.to].recv_bytes += t.bytes;
        }
        PlacementReport {
            strategy: strategy.into(),
            placement_ms,
            devices: cluster
                .devices
                .iter()
                .map(|d| d.name.clone())
                .zip(loads)
                .collect(),
            predicted_step_ms: ev.sim.step_time * 1e3,
            lower_bound_ms: ev.bound.value() * 1e3,
            critical_path_ms: ev.bound.critical_path * 1e3,
            work_bound_ms: ev.bound.work * 1e3,
            transfer_bytes: ev.sim.bytes_moved,
            transfers: ev.sim.transfers.len(),
            ops: graph.len(),
            colocation_groups: graph.groups().len(),
        }
    }

    /// The report as pretty JSON.
    ///
    /// # Errors
    /// [`Error::Json`] if serialisation fails.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).map_err(|source| Error::Json {
            what: format!("placement report of {}", self.strategy),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placer::by_name;
    use crate::sim::tests::{cluster, graph, model};

    #[test]
    fn report_has_the_design_fields_and_adds_up() {
        // t0 → t1 (100 B) with t1 forced onto the other device by an explicit placement.
        let g = graph(3, &[(0, 1, 100), (1, 2, 50)]);
        let c = cluster(2, 0.5, 100.0);
        let m = model(&g, &c, &[[1.0, 1.0], [2.0, 2.0], [1.0, 1.0]]);
        let names = [("t0", 0), ("t1", 1), ("t2", 1)].map(|(op, d)| (op, &c.devices[d].name));
        let p = Placement::from_names("hand", &g, &c, names).unwrap();
        let r = PlacementReport::new("hand", 0.25, &g, &c, &m, &p).unwrap();
        // 1 s, transfer 0.5 + 1 s, 2 s, 1 s.
        assert_eq!(r.predicted_step_ms, 5500.0);
        assert!((r.lower_bound_ms - 4000.0).abs() < 1e-5);
        assert_eq!((r.transfer_bytes, r.transfers), (100, 1));
        let d1 = &r.devices[&c.devices[1].name];
        assert_eq!((d1.ops, d1.busy_ms, d1.recv_bytes), (2, 3000.0, 100));
        assert_eq!(d1.memory_bytes, 50, "t1's output; t2 has none");
        let json: serde_json::Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
        for key in [
            "strategy",
            "placement_ms",
            "devices",
            "predicted_step_ms",
            "lower_bound_ms",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
        let dev = &json["devices"][&c.devices[0].name];
        for key in ["ops", "flops", "bytes", "memory_bytes"] {
            assert!(dev.get(key).is_some(), "{key}");
        }
        assert_eq!(json["strategy"], "hand");

        // A strategy's own report, and the trace of its simulation.
        let (p, r) = by_name("heft")
            .unwrap()
            .place_with_report(&g, &c, &m)
            .unwrap();
        assert_eq!(r.strategy, "heft");
        assert_eq!(r.predicted_step_ms, 4000.0, "all on one device");
        let ev = evaluate(&g, &c, &m, &p).unwrap();
        let records = trace::from_simulation(&g, &c, &ev.sim);
        assert_eq!(records.len(), 3);
        assert_eq!(records[2].start_us, 3e6);
        let split = evaluate(&g, &c, &m, &split_placement(&g, &c)).unwrap();
        let records = trace::from_simulation(&g, &c, &split.sim);
        let link = records.iter().find(|r| r.op == "_Transfer").unwrap();
        assert_eq!(link.name, "t0:0");
        assert!(link.device.contains(" → "));
        assert_eq!((link.start_us, link.dur_us), (1e6, 1.5e6));
        assert!(trace::chrome_trace(&records)
            .unwrap()
            .starts_with("{\"traceEvents\":["));
    }

    #[test]
    fn a_cost_model_of_another_graph_is_refused() {
        let g = graph(3, &[]);
        let other = graph(2, &[]);
        let c = cluster(2, 0.0, 1.0);
        let m = CostModel::new(&other, &c).unwrap();
        let err = evaluate(&g, &c, &m, &Placement::new("x", &g)).unwrap_err();
        assert!(err.to_string().contains("2 ops"), "{err}");
    }

    fn split_placement(g: &OpGraph, c: &Cluster) -> Placement {
        let names = [("t0", 0), ("t1", 1), ("t2", 1)].map(|(op, d)| (op, &c.devices[d].name));
        Placement::from_names("split", g, c, names).unwrap()
    }
}
