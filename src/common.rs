//! What several subcommands share: loading a graph and its sidecar, connecting to a cluster,
//! choosing a strategy, printing JSON.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;
use tf_iaware::cluster::{self, Cluster, ClusterSpec};
use tf_iaware::graph::analyze::{analyze_bytes, Analyzed};
use tf_iaware::placer::{self, Placement};
use tf_iaware::runtime::{SessionConfig, Sidecar};

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

/// Parses `--cluster` and lists its devices.
pub fn connect(spec: &str) -> Result<(Cluster, SessionConfig)> {
    let spec = ClusterSpec::parse(spec)?;
    Ok(cluster::connect(&spec)?)
}

/// Runs strategy `name`; returns the placement and how long placing took, ms.
pub fn place(name: &str, analyzed: &Analyzed, cluster: &Cluster) -> Result<(Placement, f64)> {
    let strategy = placer::by_name(name)?;
    let start = Instant::now();
    let placement = strategy.place(&analyzed.op_graph, cluster)?;
    Ok((placement, start.elapsed().as_secs_f64() * 1e3))
}

/// Prints `value` as one pretty JSON document on stdout.
pub fn print_json(value: &impl Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
