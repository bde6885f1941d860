//! What several subcommands share: loading a graph and its sidecar, connecting to a cluster,
//! choosing a strategy, printing JSON.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use tf_iaware::cluster::tf_config::TfConfig;
use tf_iaware::cluster::{self, Cluster, ClusterSpec};
use tf_iaware::cost::CostModel;
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

/// Runs strategy `name` with the analytic cost model of `analyzed` on `cluster`; returns the
/// placement and its report (DESIGN.md §5 fields: per-device load, predicted step, lower bound).
pub fn place(
    name: &str,
    analyzed: &Analyzed,
    cluster: &Cluster,
) -> Result<(Placement, PlacementReport)> {
    let strategy = placer::by_name(name)?;
    let cost = CostModel::new(&analyzed.op_graph, cluster)?;
    Ok(strategy.place_with_report(&analyzed.op_graph, cluster, &cost)?)
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
