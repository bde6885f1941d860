//! What several subcommands share: loading a graph and its sidecar, connecting to a cluster,
//! choosing a strategy, printing JSON.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use tf_iaware::cluster::tf_config::TfConfig;
use tf_iaware::cluster::{self, Cluster, ClusterSpec};
use tf_iaware::cost::{CostModel, Measurements};
use tf_iaware::emulate::{EmulatedCluster, Scenario};
use tf_iaware::graph::analyze::{analyze_bytes, Analyzed};
use tf_iaware::placer::{self, Placement};
use tf_iaware::report::PlacementReport;
use tf_iaware::runtime::{calibrate, SessionConfig, Sidecar};

/// Uses the cached calibration profile of `cluster` when a fresh one exists (`devices --calibrate`).
fn apply_calibration(cluster: &mut Cluster) -> Result<()> {
    if calibrate::apply_cached(cluster)? {
        log::debug!(
            "using the calibration in {}",
            calibrate::profile_path(cluster).display()
        );
    }
    Ok(())
}

/// Reads and analyses a GraphDef file.
pub fn load_graph(path: &Path) -> Result<Analyzed> {
    let bytes =
        std::fs::read(path).with_context(|| format!("reading GraphDef {}", path.display()))?;
    Ok(analyze_bytes(&bytes, &path.display().to_string())?)
}

/// Reads the sidecar (`--meta`, else next to the graph) and checks it against the graph.
pub fn load_sidecar(
    graph_path: &Path,
    meta: Option<&PathBuf>,
    analyzed: &Analyzed,
) -> Result<Sidecar> {
    let path = meta
        .cloned()
        .unwrap_or_else(|| Sidecar::path_for(graph_path));
    let sidecar = Sidecar::load(&path)?;
    sidecar.check_against(&analyzed.op_graph, &path)?;
    Ok(sidecar)
}

/// A connected cluster: its devices, how to open sessions, and — for `emulated:…` — the local
/// processes, which live as long as this value.
pub struct Connected {
    pub cluster: Cluster,
    pub config: SessionConfig,
    /// The cluster's TF_CONFIG (task addresses), for `tf-config…` and `emulated:…` clusters.
    pub tf_config: Option<TfConfig>,
    /// Held only so the emulated processes live until the command ends (dropped: torn down).
    #[allow(dead_code)]
    pub emulated: Option<EmulatedCluster>,
}

/// Parses `--cluster`, starts an emulated cluster if asked, and lists the devices.
pub fn connect(spec: &str) -> Result<Connected> {
    let spec = ClusterSpec::parse(spec)?;
    if let ClusterSpec::Emulated(text) = &spec {
        let scenario = Scenario::parse(text)?;
        let exe = std::env::current_exe().context("locating the tf-iaware binary")?;
        let emulated = EmulatedCluster::start(&scenario, &exe)?;
        let (mut cluster, config) = emulated.connect()?;
        apply_calibration(&mut cluster)?;
        return Ok(Connected {
            cluster,
            config,
            tf_config: Some(emulated.tf_config().clone()),
            emulated: Some(emulated),
        });
    }
    let (mut cluster, config) = cluster::connect(&spec)?;
    apply_calibration(&mut cluster)?;
    let tf_config = match &spec {
        ClusterSpec::TfConfig(Some(path)) => Some(TfConfig::from_file(path)?),
        ClusterSpec::TfConfig(None) => Some(TfConfig::from_env()?),
        _ => None,
    };
    Ok(Connected {
        cluster,
        config,
        tf_config,
        emulated: None,
    })
}

/// The flags of every command that places a GraphDef.
#[derive(clap::Args)]
pub struct PlaceFlags {
    /// Cluster spec: local, local:cpu=N, tf-config[:PATH], emulated:SCENARIO.
    #[arg(long, default_value = "local")]
    pub cluster: String,
    /// Placement strategy (tf-default keeps the graph's devices and lets TensorFlow decide the
    /// rest).
    #[arg(long, default_value = "tf-default")]
    pub strategy: String,
    /// Sidecar JSON (default: the graph's path with extension .json, if it exists): how to
    /// train the graph; predictions cover the step it trains (its `train` and `loss` ops and what
    /// they need), not initialisers.
    #[arg(long, value_name = "F.json")]
    pub meta: Option<PathBuf>,
    /// Op timings of earlier runs of this graph (`run --save-measurements`); the cost model uses
    /// them before the calibration and the analytic estimates. Repeatable.
    #[arg(long = "measurements", value_name = "M.json")]
    pub measurements: Vec<PathBuf>,
}

/// A graph file placed on a connected cluster: what `place` and `simulate` work from.
pub struct PlacedGraph {
    pub analyzed: Analyzed,
    pub connected: Connected,
    pub placement: Placement,
    pub report: PlacementReport,
    pub cost: CostModel,
}

impl PlaceFlags {
    /// Loads the GraphDef at `graph`, connects to `--cluster` and places the graph (predictions
    /// cover the step of its sidecar, if it has one).
    pub fn load_and_place(&self, graph: &Path) -> Result<PlacedGraph> {
        let analyzed = load_graph(graph)?;
        let connected = connect(&self.cluster)?;
        let sidecar = self.step_sidecar(graph, &analyzed)?;
        let (placement, report, cost) =
            self.place(&analyzed, &connected.cluster, sidecar.as_ref())?;
        Ok(PlacedGraph {
            analyzed,
            connected,
            placement,
            report,
            cost,
        })
    }

    /// Whether the command starts an emulated cluster (and so needs signal teardown).
    pub fn emulated(&self) -> bool {
        self.cluster.starts_with("emulated:")
    }

    /// The sidecar of the graph at `graph_path` for predictions: `--meta`, else the file next
    /// to the graph if there is one, else `None` (predictions then cover every op).
    pub fn step_sidecar(&self, graph_path: &Path, analyzed: &Analyzed) -> Result<Option<Sidecar>> {
        let default = Sidecar::path_for(graph_path);
        if self.meta.is_none() && !default.exists() {
            return Ok(None);
        }
        load_sidecar(graph_path, self.meta.as_ref(), analyzed).map(Some)
    }

    /// The cost model of `analyzed` on `cluster`: measured where `--measurements` has data,
    /// else calibrated, else analytic; restricted to the step `sidecar` trains when given.
    pub fn cost_model(
        &self,
        analyzed: &Analyzed,
        cluster: &Cluster,
        sidecar: Option<&Sidecar>,
    ) -> Result<CostModel> {
        let mut cost = self.unrestricted_cost_model(analyzed, cluster)?;
        if let Some(s) = sidecar {
            let g = &analyzed.op_graph;
            let targets = [
                g.require(&s.train, "sidecar `train`")?,
                g.require(&s.loss, "sidecar `loss`")?,
            ];
            cost.restrict_to(g, g.ancestors(&targets))?;
        }
        Ok(cost)
    }

    fn unrestricted_cost_model(&self, analyzed: &Analyzed, cluster: &Cluster) -> Result<CostModel> {
        if self.measurements.is_empty() {
            return Ok(CostModel::new(&analyzed.op_graph, cluster)?);
        }
        let mut all = Measurements::new();
        for path in &self.measurements {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading measurements {}", path.display()))?;
            let m: Measurements = serde_json::from_str(&text)
                .with_context(|| format!("parsing measurements {}", path.display()))?;
            all.samples.extend(m.samples);
        }
        let cost = CostModel::with_measurements(&analyzed.op_graph, cluster, &all)?;
        let s = cost.measurement_summary();
        log::info!(
            "measurements: {} samples used ({} dropped: other ops or devices), {} ops timed, {} op types fitted",
            s.samples_used,
            s.samples_dropped,
            s.ops_measured,
            s.types_fitted
        );
        if s.samples_used == 0 {
            anyhow::bail!(
                "none of the {} samples in {} names an op of this graph on a device of this cluster",
                all.len(),
                self.measurements
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(cost)
    }

    /// Runs the strategy with the cost model of [`PlaceFlags::cost_model`]; returns the
    /// placement, its report (DESIGN.md §5 fields: per-device load, predicted step, lower bound)
    /// and the cost model.
    pub fn place(
        &self,
        analyzed: &Analyzed,
        cluster: &Cluster,
        sidecar: Option<&Sidecar>,
    ) -> Result<(Placement, PlacementReport, CostModel)> {
        let strategy = placer::by_name(&self.strategy)?;
        let cost = self.cost_model(analyzed, cluster, sidecar)?;
        let (placement, report) = strategy.place_with_report(&analyzed.op_graph, cluster, &cost)?;
        Ok((placement, report, cost))
    }
}

/// Writes `json` to `path`, naming the file on failure.
pub fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Prints `value` as one pretty JSON document on stdout.
pub fn print_json(value: &impl Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
