//! The model-parallel contender of the images/s bench: the zoo model (or `--graph`) at the global batch as one graph, its
//! ops placed over the workers by a per-op strategy (`heft`, `etf`, …) with each worker's speed
//! taken from the data-parallel calibration, trained through the same gRPC cluster.

use tf_iaware::cluster::model::CalibrationProfile;
use tf_iaware::cluster::Cluster;
use tf_iaware::cost::CostModel;
use tf_iaware::graph::analyze::analyze_graph;
use tf_iaware::models;
use tf_iaware::parallel::WorkerCapacity;
use tf_iaware::placer::apply;
use tf_iaware::placer::{OpPlacementStrategy, PlaceOptions};
use tf_iaware::runtime::replicated::Workload;
use tf_iaware::runtime::{calibrate, PlacedSession, SessionConfig, Trainer};
use tf_iaware::sim::report::PlaceWithReport;
use tf_iaware::Result;

/// Tensor sizes timed on each link between workers, bytes: small enough that a shaped link
/// (tens of Mbit/s) is timed in a second or two.
const LINK_BYTES: [u64; 3] = [4 << 10, 64 << 10, 512 << 10];

/// A per-op strategy's placement, ready to step.
pub(crate) struct Prepared {
    pub(crate) trainer: Trainer,
    /// The simulator's step time for the placement, ms.
    pub(crate) predicted_ms: f64,
    /// Ops per device.
    pub(crate) ops_per_device: Vec<(String, usize)>,
}

/// Builds `model` at `batch`, places it with `strategy` over the `workers` of `devices` (ps
/// tasks only hold the data-parallel variables; they get no ops here), with worker speeds
/// scaled to `calibration` ([`calibrate::scale_to_replicas`]) and links between them timed
/// ([`calibrate::calibrate_links`]), and opens a session.
pub(crate) fn prepare(
    strategy: OpPlacementStrategy,
    workload: &Workload,
    batch: usize,
    devices: &Cluster,
    workers: &[String],
    config: &SessionConfig,
    calibration: &[WorkerCapacity],
) -> Result<Prepared> {
    let (analyzed, sidecar) = match workload {
        Workload::Zoo(model) => {
            let built = models::build(model, batch, 7)?;
            (analyze_graph(built.net.graph())?, built.sidecar)
        }
        Workload::Graph(g) => (g.analyzed.clone(), g.sidecar.clone()),
    };
    let mut cluster = Cluster {
        devices: devices
            .devices
            .iter()
            .filter(|d| workers.contains(&d.name))
            .cloned()
            .collect(),
        ..devices.clone()
    };
    // Links between the workers, timed through TensorFlow (a shaped link shows here).
    let mut profile = CalibrationProfile::new(&tf_iaware::runtime::tf::version(), "bench", 0);
    calibrate::calibrate_links(&cluster, config, &LINK_BYTES, &mut profile)?;
    profile.apply(&mut cluster)?;
    let g = &analyzed.op_graph;
    let step = g.ancestors(&[
        g.require(&sidecar.train, "train op")?,
        g.require(&sidecar.loss, "loss op")?,
    ]);
    calibrate::scale_to_replicas(&mut cluster, g, &step, batch, calibration)?;
    let mut cost = CostModel::new(g, &cluster)?;
    cost.restrict_to(g, step)?;
    let (placement, report) = strategy
        .build(&PlaceOptions::default())?
        .place_with_report(&analyzed.op_graph, &cluster, &cost)?;
    let placed = apply::apply(
        &analyzed.graph_def,
        &analyzed.op_graph,
        &cluster,
        &placement,
    )?;
    let session = PlacedSession::new(placed.graph, config)?;
    let trainer = Trainer::new(session, &sidecar, Some(batch), 7)?;
    Ok(Prepared {
        trainer,
        predicted_ms: report.predicted_step_ms,
        ops_per_device: report
            .devices
            .iter()
            .filter(|(_, d)| d.ops > 0)
            .map(|(name, d)| (name.clone(), d.ops))
            .collect(),
    })
}
