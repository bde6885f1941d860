//! From timed op executions to costs: per-op medians and per-op-type lines.
//!
//! A sample's time `t` on device `d` becomes work `t × speed(d)` (FLOP-equivalents, speed =
//! `peak_flops × availability`, the availability the sample was taken at where it was recorded
//! with it — [`OpSample::availability`](super::OpSample::availability) — else the device's
//! now), so it carries over to every device of the same type in proportion to its speed, and
//! to the same device when it is busier or quieter than when it was measured.
//! [`OpCostFitter`] collects, per (op type, device type), the points
//! `(analytic size, median work)` of every timed op — from one graph or from several (the
//! calibration network at two batch sizes) — and fits `work = intercept + slope × size`
//! ([`fit_affine`]): the [`OpTypeCost`]s a calibration stores and [`super::CostModel`] uses for
//! ops nobody timed.

use std::collections::{BTreeMap, HashMap};

use super::measured::OpSample;
use super::{CostModel, MeasurementSummary, Measurements};
use crate::cluster::calibration::fit::fit_affine;
use crate::cluster::model::{OpTypeCost, MIN_AVAILABILITY};
use crate::cluster::{Cluster, DeviceId};
use crate::error::Result;
use crate::graph::{DeviceType, NodeId, OpGraph};

/// The devices samples ran on, looked up in a cluster once per name, and the speed each sample
/// ran at.
pub(super) struct SampleDevices<'a> {
    model: &'a CostModel,
    cluster: &'a Cluster,
    cache: HashMap<&'a str, Option<DeviceId>>,
}

impl<'a> SampleDevices<'a> {
    pub(super) fn new(model: &'a CostModel, cluster: &'a Cluster) -> Self {
        SampleDevices {
            model,
            cluster,
            cache: HashMap::new(),
        }
    }

    /// Sample `s`'s device and the speed it ran at, FLOP/s: the device's peak × the
    /// availability recorded with the sample, else the device's speed now. `None` for a device
    /// the cluster does not have.
    pub(super) fn of(&mut self, s: &'a OpSample) -> Option<(DeviceId, f64)> {
        let cluster = self.cluster;
        let d = (*self.cache.entry(s.device.as_str()).or_insert_with(|| {
            cluster
                .index_of(&s.device)
                .or_else(|| cluster.resolve("(step stats)", &s.device).ok())
        }))?;
        let speed = match s.availability.filter(|a| a.is_finite() && *a > 0.0) {
            Some(then) => cluster.device(d).peak_flops * then.clamp(MIN_AVAILABILITY, 1.0),
            None => self.model.speed(d),
        };
        Some((d, speed))
    }
}

/// Median work (FLOP-equivalents) of each timed (node, device-type index) of `model`'s graph
/// from `attributed` samples (fused kernels already split over the ops they replaced,
/// [`Measurements::attributed`]); counts used and dropped samples into `summary`.
pub(crate) fn node_medians(
    model: &CostModel,
    graph: &OpGraph,
    cluster: &Cluster,
    attributed: &Measurements,
    summary: &mut MeasurementSummary,
) -> HashMap<(NodeId, u32), f64> {
    let mut devices = SampleDevices::new(model, cluster);
    let mut per_node: HashMap<(NodeId, u32), Vec<f64>> = HashMap::new();
    for s in &attributed.samples {
        let (Some((d, speed)), Some(node)) = (devices.of(s), graph.id(&s.node)) else {
            summary.samples_dropped += 1;
            continue;
        };
        if !(s.seconds.is_finite() && s.seconds >= 0.0) {
            summary.samples_dropped += 1;
            continue;
        }
        summary.samples_used += 1;
        per_node
            .entry((node, model.device_type_index(d)))
            .or_default()
            .push(s.seconds * speed);
    }
    per_node
        .into_iter()
        .map(|(key, mut works)| (key, super::measured::median(&mut works)))
        .collect()
}

/// Collects `(size, work)` points per (op type, device type) and fits one line per pair.
#[derive(Clone, Debug, Default)]
pub struct OpCostFitter {
    /// (op type, device type) → (analytic FLOPs + bytes, median work in FLOP-equivalents).
    points: BTreeMap<(String, DeviceType), Vec<(f64, f64)>>,
    summary: MeasurementSummary,
}

impl OpCostFitter {
    /// No points.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the samples `m` of ops of `graph` run on devices of `cluster` (others are dropped):
    /// one point per timed (op, device type), its median work against its analytic size.
    ///
    /// # Errors
    /// As [`CostModel::new`].
    pub fn add(&mut self, graph: &OpGraph, cluster: &Cluster, m: &Measurements) -> Result<()> {
        let model = CostModel::analytic(graph, cluster)?;
        let attributed = m.attributed(graph);
        let medians = node_medians(&model, graph, cluster, &attributed, &mut self.summary);
        self.summary.ops_measured += medians.len();
        self.add_medians(&model, graph, &medians);
        Ok(())
    }

    pub(crate) fn add_medians(
        &mut self,
        model: &CostModel,
        graph: &OpGraph,
        medians: &HashMap<(NodeId, u32), f64>,
    ) {
        for (&(node, t), &work) in medians {
            let w = model.work(node);
            self.points
                .entry((
                    graph.node(node).op.clone(),
                    model.device_type_name(t).clone(),
                ))
                .or_default()
                .push((w.flops + w.bytes, work));
        }
    }

    /// What the samples added so far were used for.
    pub fn summary(&self) -> &MeasurementSummary {
        &self.summary
    }

    /// One line per (op type, device type) with points, ordered by op type then device type.
    pub fn fit(&self) -> Vec<OpTypeCost> {
        self.points
            .iter()
            .filter_map(|((op, device_type), points)| {
                let mut points = points.clone();
                // A stable order, so equal inputs give bit-equal fits.
                points.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
                let f = fit_affine(&points)?;
                Some(OpTypeCost {
                    device_type: device_type.clone(),
                    op: op.clone(),
                    intercept: f.intercept,
                    slope: f.slope,
                    points: f.points,
                })
            })
            .collect()
    }
}
