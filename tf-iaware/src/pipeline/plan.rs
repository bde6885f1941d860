//! [`Plan`]: a graph placed on a connected cluster — the placement, its report, the cost model
//! that priced it and the placed GraphDef — and the choices that made it ([`PlanOptions`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use prost::Message;
use tensorflow::Graph;

use crate::cluster::Cluster;
use crate::cost::{CostModel, Measurements};
use crate::error::{Error, Result};
use crate::graph::analyze::{analyze_bytes, analyze_graph, Analyzed};
use crate::graph::proto::{GraphDef, StepStats};
use crate::graph::OpGraph;
use crate::graph::Sidecar;
use crate::placer::apply;
use crate::placer::{self, OpPlacementStrategy, PlaceOptions, Placement, Strategy};
use crate::runtime::{PlacedSession, SessionConfig};
use crate::sim::report::{PlaceWithReport, PlacementReport};

use super::connection::Connection;
use super::session::Session;
use super::step::Step;

/// The largest GraphDef file [`load_graph`] reads: protobuf's own 2 GiB message limit.
pub const MAX_GRAPH_BYTES: u64 = 2 << 30;

/// Reads and analyses a GraphDef file (e.g. exported by Python TensorFlow with
/// `tf.io.write_graph(…, as_text=False)`).
///
/// # Errors
/// [`Error::Io`] if the file cannot be read; [`Error::InvalidArgument`] for a file over
/// [`MAX_GRAPH_BYTES`]; the errors of
/// [`analyze_bytes`](crate::graph::analyze::analyze_bytes).
pub fn load_graph(path: &Path) -> Result<Analyzed> {
    let bytes = crate::data::io::read_bytes_capped(path, MAX_GRAPH_BYTES, "GraphDef")?;
    analyze_bytes(&bytes, &path.display().to_string())
}

/// Reads the sidecar of the graph at `graph_path` (`meta`, else the `.json` next to it), checks
/// it against `analyzed`, and marks the inputs that feed a cross-entropy's labels one-hot
/// ([`Sidecar::infer_one_hot`]).
///
/// # Errors
/// [`Error::Sidecar`] for a missing or malformed file; [`Error::UnknownOp`] for ops the graph
/// lacks.
pub fn load_sidecar(
    graph_path: &Path,
    meta: Option<&Path>,
    analyzed: &Analyzed,
) -> Result<Sidecar> {
    let path = meta.map_or_else(|| Sidecar::path_for(graph_path), Path::to_path_buf);
    let mut sidecar = Sidecar::load(&path)?;
    sidecar.check_against(&analyzed.op_graph, &path)?;
    for name in sidecar.infer_one_hot(&analyzed.op_graph, &analyzed.signatures) {
        log::info!("sidecar input `{name}` feeds a cross-entropy's labels: synthetic one-hot rows");
    }
    Ok(sidecar)
}

/// A graph to place: a `tensorflow::Graph` built in Rust, serialized GraphDef bytes, or a graph
/// already analysed ([`load_graph`]).
pub trait GraphSource {
    /// The graph, analysed.
    ///
    /// # Errors
    /// The errors of [`analyze_bytes`](crate::graph::analyze::analyze_bytes).
    fn analyze(self) -> Result<Analyzed>;
}

impl GraphSource for &Graph {
    fn analyze(self) -> Result<Analyzed> {
        analyze_graph(self)
    }
}

impl GraphSource for &[u8] {
    fn analyze(self) -> Result<Analyzed> {
        analyze_bytes(self, "GraphDef bytes")
    }
}

impl GraphSource for &Vec<u8> {
    fn analyze(self) -> Result<Analyzed> {
        analyze_bytes(self, "GraphDef bytes")
    }
}

impl GraphSource for Analyzed {
    fn analyze(self) -> Result<Analyzed> {
        Ok(self)
    }
}

/// A strategy by name (`"heft"`, `"infra-aware"`, … — [`OpPlacementStrategy`]'s table), as an
/// [`OpPlacementStrategy`], or as a value.
pub trait StrategyChoice {
    /// The strategy, built with `options`.
    ///
    /// # Errors
    /// [`Error::UnknownStrategy`] listing the known names.
    fn strategy(self, options: &PlaceOptions) -> Result<Box<dyn Strategy>>;
}

impl StrategyChoice for &str {
    fn strategy(self, options: &PlaceOptions) -> Result<Box<dyn Strategy>> {
        placer::by_name_with(self, options)
    }
}

impl StrategyChoice for &String {
    fn strategy(self, options: &PlaceOptions) -> Result<Box<dyn Strategy>> {
        placer::by_name_with(self, options)
    }
}

impl StrategyChoice for OpPlacementStrategy {
    fn strategy(self, options: &PlaceOptions) -> Result<Box<dyn Strategy>> {
        self.build(options)
    }
}

impl StrategyChoice for Box<dyn Strategy> {
    fn strategy(self, _: &PlaceOptions) -> Result<Box<dyn Strategy>> {
        Ok(self)
    }
}

/// How [`Connection::place_with`] prices and places.
///
/// Cost sources, first that knows an op wins: `measurements` (op times from earlier traced
/// runs of this graph) → the cluster's calibration (cached per host by `devices --calibrate`) →
/// analytic estimates (FLOPs and bytes over nominal device speeds).
#[derive(Clone, Debug, Default)]
pub struct PlanOptions {
    /// Op timings of earlier runs (see [`Measurements::add_step_stats`] and
    /// [`Measurements::load`]); empty: none.
    pub measurements: Measurements,
    /// Where `measurements` came from, for messages (file names).
    pub measurements_origin: Vec<PathBuf>,
    /// Knobs of the strategies that have any (seed, infra-aware threshold, split margin).
    pub place: PlaceOptions,
    /// Samples per step to price where the graph's inputs have a dynamic batch (placeholders of
    /// shape `[-1, …]`, pinned before shape inference: [`Analyzed::with_batch`]); `None`: an
    /// unknown dimension counts as 1, a prediction for one sample.
    pub batch: Option<usize>,
}

impl PlanOptions {
    /// Options whose measurements are read from `paths` (`run --save-measurements` files).
    ///
    /// # Errors
    /// As [`Measurements::load`].
    pub fn with_measurement_files(paths: &[PathBuf]) -> Result<Self> {
        let mut measurements = Measurements::new();
        for path in paths {
            measurements
                .samples
                .extend(Measurements::load(path)?.samples);
        }
        Ok(PlanOptions {
            measurements,
            measurements_origin: paths.to_vec(),
            place: PlaceOptions::default(),
            batch: None,
        })
    }
}

/// A graph placed on a cluster: what to run, where, and what it is predicted to cost.
pub struct Plan {
    analyzed: Analyzed,
    step: Step,
    /// The devices the placement's ids index (the connection's when it placed).
    cluster: Arc<Cluster>,
    placement: Placement,
    report: PlacementReport,
    cost: CostModel,
    placed: GraphDef,
    config: SessionConfig,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("analyzed", &self.analyzed)
            .field("step", &self.step)
            .field("report", &self.report)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Places `graph` for `step` with `strategy` and default [`PlanOptions`].
    ///
    /// ```no_run
    /// # fn demo(graph: &tensorflow::Graph, train: &tensorflow::Operation,
    /// #         loss: &tensorflow::Output) -> tf_iaware::Result<()> {
    /// let cluster = tf_iaware::connect("local:cpu=4")?;
    /// let step = tf_iaware::Step::new().target(train).fetch(loss);
    /// let plan = cluster.place(graph, &step, "heft")?;
    /// println!("predicted {:.1} ms", plan.report().predicted_step_ms);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Connection::place_with`].
    pub fn place(
        &self,
        graph: impl GraphSource,
        step: &Step,
        strategy: impl StrategyChoice,
    ) -> Result<Plan> {
        self.place_with(graph, step, strategy, &PlanOptions::default())
    }

    /// Analyses `graph`, prices it on this cluster (costs as [`PlanOptions`] says; predictions
    /// restricted to the ops `step` runs), places it with `strategy`, validates the placement
    /// and writes the device strings onto a copy of its GraphDef.
    ///
    /// # Errors
    /// The graph's analysis errors; [`Error::UnknownStrategy`]; [`Error::UnknownOp`] or
    /// [`Error::Handle`] for a step handle the graph lacks; [`Error::InvalidArgument`] if
    /// `options` has measurements but none names an op of this graph on a device of this
    /// cluster; the strategy's errors ([`Error::Infeasible`] …); the placement validation errors
    /// of [`resolve::check`](crate::placer::resolve::check).
    pub fn place_with(
        &self,
        graph: impl GraphSource,
        step: &Step,
        strategy: impl StrategyChoice,
        options: &PlanOptions,
    ) -> Result<Plan> {
        let strategy = strategy.strategy(&options.place)?;
        let analyzed = match options.batch {
            Some(batch) => graph.analyze()?.with_batch(batch)?,
            None => graph.analyze()?,
        };
        let cost = cost_model(&analyzed.op_graph, self.cluster(), step, options)?;
        let (placement, report) =
            strategy.place_with_report(&analyzed.op_graph, self.cluster(), &cost)?;
        let placed = apply::rewrite(
            &analyzed.graph_def,
            &analyzed.op_graph,
            self.cluster(),
            &placement,
        )?;
        Ok(Plan {
            analyzed,
            step: step.clone(),
            cluster: Arc::new(self.cluster().clone()),
            placement,
            report,
            cost,
            placed,
            config: self.session_config().clone(),
        })
    }
}

/// The cost model of `graph` on `cluster` from the sources `options` names (measured →
/// calibrated → analytic), restricted to the ops `step` runs.
///
/// # Errors
/// As [`Connection::place_with`].
pub(crate) fn cost_model(
    graph: &OpGraph,
    cluster: &Cluster,
    step: &Step,
    options: &PlanOptions,
) -> Result<CostModel> {
    let active = step.active_ops(graph)?;
    let mut cost = if options.measurements.is_empty() {
        CostModel::new(graph, cluster)?
    } else {
        let cost = CostModel::with_measurements(graph, cluster, &options.measurements)?;
        let s = cost.measurement_summary();
        log::info!(
            "measurements: {} samples used ({} dropped: other ops or devices), {} ops timed, {} op types fitted",
            s.samples_used,
            s.samples_dropped,
            s.ops_measured,
            s.types_fitted
        );
        if s.samples_used == 0 {
            let origin: Vec<String> = options
                .measurements_origin
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            return Err(Error::InvalidArgument {
                what: "measurements".into(),
                reason: format!(
                    "none of the {} samples{} names an op of this graph on a device of this cluster",
                    options.measurements.len(),
                    if origin.is_empty() {
                        String::new()
                    } else {
                        format!(" in {}", origin.join(", "))
                    }
                ),
            });
        }
        cost
    };
    if !step.is_empty() {
        cost.restrict_to(graph, active)?;
    }
    Ok(cost)
}

impl Plan {
    /// What the strategy predicts: step time, lower bound, per-device load (report fields: docs/src/reference/file-formats.md).
    pub fn report(&self) -> &PlacementReport {
        &self.report
    }

    /// The device of every op, as the strategy chose (ids of [`Plan::analyzed`]'s op graph and
    /// of [`Plan::cluster`]).
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Full device name of op `name`, if the strategy placed it.
    pub fn device_of(&self, name: &str) -> Option<&str> {
        self.placement
            .device_of(&self.analyzed.op_graph, &self.cluster, name)
    }

    /// The cluster the plan was made for (its devices as they were when it was placed).
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The cost model that priced the plan (to simulate other placements with it).
    pub fn cost(&self) -> &CostModel {
        &self.cost
    }

    /// The step the plan was made for.
    pub fn step(&self) -> &Step {
        &self.step
    }

    /// The original graph, analysed (its GraphDef and OpGraph).
    pub fn analyzed(&self) -> &Analyzed {
        &self.analyzed
    }

    /// The op timings of traced steps of this plan's session ([`Run::traced`](super::Run::traced)
    /// step stats, or the trainer's), ready to save and to price later plans with
    /// ([`PlanOptions::measurements`]; `run --save-measurements` writes them): under the
    /// graph's own op names (a fused kernel's time split over the ops it replaced) and with
    /// each device's availability as the plan read it, so a later plan on a busier or quieter
    /// machine scales them by its own reading. Give the result the median of the untraced steps
    /// too ([`Measurements::record_step_overhead`](crate::cost::Measurements::record_step_overhead),
    /// as `run --save-measurements` does) so that predictions count the step's own time outside
    /// the ops (a TF_CONFIG session's round trip).
    pub fn measurements<'a>(&self, steps: impl IntoIterator<Item = &'a StepStats>) -> Measurements {
        let mut m = Measurements::new();
        for stats in steps {
            m.add_step_stats(stats);
        }
        let mut m = m.attributed(&self.analyzed.op_graph);
        m.record_availability(&self.cluster);
        m
    }

    /// The placed GraphDef, serialized (to write to a file or import elsewhere).
    pub fn placed_bytes(&self) -> Vec<u8> {
        self.placed.encode_to_vec()
    }

    /// Opens a session over the placed graph on the plan's cluster. It accepts handles of the
    /// original graph and can verify where ops ran.
    ///
    /// # Errors
    /// [`Error::TensorFlow`] if TensorFlow rejects the placed graph or cannot create the session
    /// (an unreachable master, say).
    pub fn session(&self) -> Result<Session> {
        let graph = apply::import(&self.placed, &self.placement.strategy)?;
        let inner = PlacedSession::new(graph, &self.config)?;
        Ok(Session::new(
            inner,
            self.placement.clone(),
            &self.analyzed.op_graph,
            Arc::clone(&self.cluster),
        ))
    }
}
