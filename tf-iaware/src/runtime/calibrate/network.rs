//! Op types and executor overhead: the calibration network trained op by op on one device.

use crate::cluster::Cluster;
use crate::config::SessionConfig;
use crate::cost::{Measurements, OpCostFitter};
use crate::error::Result;
use crate::graph::analyze::analyze_graph;
use crate::models::calibration;
use crate::placer::apply;
use crate::placer::Placement;
use crate::runtime::session::PlacedSession;
use crate::runtime::train::Trainer;

/// Untimed, wall-timed and traced training steps of the calibration network per batch size.
const NET_STEPS: (usize, usize, usize) = (2, 5, 3);

/// One timed run of the calibration network on one device.
pub(super) struct NetworkRun {
    pub(super) device: String,
    graph: crate::graph::OpGraph,
    /// Ops of the training step.
    step: Vec<bool>,
    /// Median wall time of an untraced step, seconds.
    wall: f64,
}

impl NetworkRun {
    /// The per-op overhead (seconds) with which the simulator, using `cluster`'s figures and
    /// op-type costs, predicts this run's measured step time (0 if it already predicts more).
    pub(super) fn overhead_to_match(&self, cluster: &Cluster) -> Result<f64> {
        let Some(d) = cluster.index_of(&self.device) else {
            return Ok(0.0);
        };
        let simulated = |overhead: f64| -> Result<f64> {
            let mut c = cluster.clone();
            c.devices[d].op_overhead = overhead;
            // The network ran one op at a time.
            c.devices[d].concurrency = 1;
            let mut cost = crate::cost::CostModel::new(&self.graph, &c)?;
            cost.restrict_to(&self.graph, self.step.clone())?;
            Ok(crate::sim::simulate(&cost, &vec![d; self.graph.len()])?.step_time)
        };
        if simulated(0.0)? >= self.wall {
            return Ok(0.0);
        }
        // The step grows with the overhead: bisect between 0 and the whole step per op.
        let (mut lo, mut hi) = (0.0, self.wall);
        for _ in 0..40 {
            let mid = 0.5 * (lo + hi);
            if simulated(mid)? < self.wall {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(0.5 * (lo + hi))
    }
}

/// Trains the calibration network at `batch` with every op on `device` and feeds its traced
/// steps to `fitter`; returns the run for the overhead fit.
pub(super) fn time_network(
    cluster: &Cluster,
    config: &SessionConfig,
    device: &str,
    batch: usize,
    fitter: &mut OpCostFitter,
) -> Result<NetworkRun> {
    let model = calibration::build(batch, 11)?;
    let analyzed = analyze_graph(model.net.graph())?;
    let graph = &analyzed.op_graph;
    let placement = Placement::from_names(
        "calibration",
        graph,
        cluster,
        graph.nodes().iter().map(|n| (&n.name, device)),
    )?;
    let placed = apply::apply(&analyzed.graph_def, &analyzed.op_graph, cluster, &placement)?;
    // One op at a time, so each op's time is its own, not shared with a concurrent one.
    let sequential = SessionConfig {
        inter_op_threads: 1,
        ..config.clone()
    };
    let trainer = Trainer::new(
        PlacedSession::new(placed.graph, &sequential)?,
        &model.sidecar,
        Some(batch),
        11,
    )?;
    trainer.init()?;
    let (warmup, timed, traced) = NET_STEPS;
    for _ in 0..warmup {
        trainer.time_step()?;
    }
    let mut walls: Vec<f64> = (0..timed)
        .map(|_| trainer.time_step().map(|ms| ms * 1e-3))
        .collect::<Result<_>>()?;
    walls.sort_by(f64::total_cmp);
    let mut m = Measurements::new();
    for stats in trainer.traced_steps(warmup + timed, traced)? {
        m.add_step_stats(&stats);
    }
    // Normalised by the availability the calibration runs at (its capabilities are divided by
    // the same reading).
    m.record_availability(cluster);
    fitter.add(&analyzed.op_graph, cluster, &m)?;
    let g = &analyzed.op_graph;
    let step = g.ancestors(&[
        g.require(&model.sidecar.train, "calibration network")?,
        g.require(&model.sidecar.loss, "calibration network")?,
    ]);
    log::debug!(
        "calibration: {device} batch {batch}: {} op samples, step {:.2} ms",
        m.len(),
        walls[timed / 2] * 1e3
    );
    Ok(NetworkRun {
        device: device.into(),
        step,
        wall: walls[timed / 2],
        graph: analyzed.op_graph,
    })
}
