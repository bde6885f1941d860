//! Where an op's time comes from: the four cost sources of a [`CostModel`](super::CostModel),
//! kept apart from the placement problem (the DAG, groups, eligibility, memory, links, pools) and
//! layered — a time set by the caller, else this graph's own measured step stats, else the
//! cluster's calibrated per-op-type lines, else the analytic roofline — so a placer asks one
//! [`CostModel::op_time`](super::CostModel::op_time) whatever the source, and
//! [`CostModel::op_time_source`](super::CostModel::op_time_source) says which layer answered.

use serde::Serialize;

use super::analytic::OpWork;
use super::{DeviceCost, MeasurementSummary};

/// The layer that priced an op on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CostSource {
    /// Set by the caller ([`CostModel::set_op_times`](super::CostModel::set_op_times)), seconds.
    Explicit,
    /// Fitted from step stats of this graph's own runs
    /// ([`CostModel::with_measurements`](super::CostModel::with_measurements)): the op's median,
    /// or its op type's line over this graph's measured ops.
    Measured,
    /// The cluster's calibrated line for the op's type on the device's type
    /// ([`Cluster::op_costs`](crate::cluster::Cluster::op_costs)).
    Calibrated,
    /// The roofline over the op's FLOPs and bytes (the `cost::analytic` model).
    Analytic,
    /// An op that does no work of its own (a view, constant or handle) or that the step does not
    /// run: 0 s everywhere.
    Free,
}

/// The cost sources of one graph on one cluster. Work tables hold FLOP-equivalents (seconds ×
/// the device's effective speed), so a figure taken on one device carries over to the others of
/// its type in proportion to their speed; NaN marks "no figure here, ask the next layer".
#[derive(Clone, Debug)]
pub(super) struct OpTimes {
    /// Analytic work of each op.
    pub(super) work: Vec<OpWork>,
    /// `[node * n_types + type]`: work from the cluster's calibrated op-type lines.
    pub(super) calibrated: Option<Vec<f64>>,
    /// `[node * n_types + type]`: work fitted from this graph's step stats.
    pub(super) measured: Option<Vec<f64>>,
    /// `[node * n_types + type]`: the executor's time before each measured op, in work, as
    /// traced ([`super::gaps`]); where present it takes the place of the device's per-op
    /// overhead for that op. `None` when the samples carry no start times.
    pub(super) measured_gaps: Option<Vec<f64>>,
    /// The step's own time outside every op, seconds, from the measurements
    /// ([`Measurements::step_overhead_s`](super::Measurements::step_overhead_s)); 0 without.
    pub(super) step_overhead: f64,
    /// `[node * n_devices + device]`: seconds set by the caller.
    pub(super) explicit: Option<Vec<f64>>,
    /// What the measured layer made of its samples.
    pub(super) summary: MeasurementSummary,
}

impl OpTimes {
    /// Analytic figures only.
    pub(super) fn analytic(work: Vec<OpWork>) -> Self {
        OpTimes {
            work,
            calibrated: None,
            measured: None,
            measured_gaps: None,
            step_overhead: 0.0,
            explicit: None,
            summary: MeasurementSummary::default(),
        }
    }

    /// Seconds of op `node` on device `device` (whose figures are `dev`; `nd` devices, `nt`
    /// device types), and the layer that gave them. A work figure becomes work ÷ effective
    /// speed + the device's per-op overhead, which step stats do not include (for a measured op
    /// with a traced gap, that gap instead).
    #[inline]
    pub(super) fn time(
        &self,
        node: usize,
        device: usize,
        dev: &DeviceCost,
        nd: usize,
        nt: usize,
    ) -> (f64, CostSource) {
        if let Some(table) = &self.explicit {
            let t = table[node * nd + device];
            if !t.is_nan() {
                return (t, CostSource::Explicit);
            }
        }
        let slot = node * nt + dev.dtype as usize;
        for (table, source) in [
            (&self.measured, CostSource::Measured),
            (&self.calibrated, CostSource::Calibrated),
        ] {
            if let Some(table) = table {
                let w = table[slot];
                if !w.is_nan() {
                    let gap = match (&self.measured_gaps, source) {
                        (Some(g), CostSource::Measured) if !g[slot].is_nan() => g[slot] / dev.speed,
                        _ => dev.overhead,
                    };
                    return (w / dev.speed + gap, source);
                }
            }
        }
        let w = &self.work[node];
        if w.free {
            return (0.0, CostSource::Free);
        }
        (
            (w.flops * dev.inv_flops).max(w.bytes * dev.inv_mem_bw) + dev.overhead,
            CostSource::Analytic,
        )
    }

    /// (op, device type) pairs the measured or calibrated layer covers.
    pub(super) fn covered(&self) -> usize {
        let n = self
            .measured
            .as_ref()
            .or(self.calibrated.as_ref())
            .map_or(0, Vec::len);
        (0..n)
            .filter(|&i| {
                [&self.measured, &self.calibrated]
                    .iter()
                    .any(|t| t.as_ref().is_some_and(|t| !t[i].is_nan()))
            })
            .count()
    }

    /// Makes op `node` free everywhere (a step does not run it): no work and no figure in any
    /// layer.
    pub(super) fn clear(&mut self, node: usize, nd: usize, nt: usize) {
        self.work[node] = OpWork {
            free: true,
            ..OpWork::default()
        };
        for t in [&mut self.calibrated, &mut self.measured]
            .into_iter()
            .flatten()
        {
            t[node * nt..(node + 1) * nt].fill(f64::NAN);
        }
        if let Some(t) = &mut self.explicit {
            t[node * nd..(node + 1) * nd].fill(f64::NAN);
        }
    }
}
