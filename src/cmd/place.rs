//! `tf-iaware place`: place a GraphDef on a cluster, write the placed GraphDef and a report.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::Serialize;
use tf_iaware::apply;
use tf_iaware::graph::analyze::Analyzed;
use tf_iaware::placer::Placement;

use crate::common;

#[derive(clap::Args)]
pub struct Args {
    /// GraphDef to place.
    #[arg(long)]
    graph: PathBuf,
    /// Cluster spec: local, local:cpu=N, tf-config[:PATH], emulated:SCENARIO.
    #[arg(long, default_value = "local")]
    cluster: String,
    /// Placement strategy.
    #[arg(long, default_value = "tf-default")]
    strategy: String,
    /// Where to write the placed GraphDef.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Where to write the JSON report.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Per-device load of a placement.
#[derive(Serialize, Default)]
pub struct DeviceLoad {
    pub ops: usize,
    /// Bytes of the output tensors of the ops placed there.
    pub bytes: u64,
}

/// The placement report (DESIGN.md §5 fields).
#[derive(Serialize)]
pub struct Report {
    pub strategy: String,
    pub placement_ms: f64,
    pub devices: BTreeMap<String, DeviceLoad>,
    pub ops: usize,
    pub colocation_groups: usize,
}

/// Summarises `placement` per device.
pub fn report(analyzed: &Analyzed, placement: &Placement, placement_ms: f64) -> Report {
    let mut devices: BTreeMap<String, DeviceLoad> = BTreeMap::new();
    for node in analyzed.op_graph.nodes() {
        let device = placement
            .device_of(&node.name)
            .unwrap_or("(tensorflow decides)");
        let load = devices.entry(device.to_string()).or_default();
        load.ops += 1;
        load.bytes += node.outputs.iter().filter_map(|t| t.bytes()).sum::<u64>();
    }
    Report {
        strategy: placement.strategy.clone(),
        placement_ms,
        devices,
        ops: analyzed.op_graph.len(),
        colocation_groups: analyzed.op_graph.groups().len(),
    }
}

impl Args {
    /// Whether the command starts an emulated cluster (and so needs signal teardown).
    pub fn emulated(&self) -> bool {
        self.cluster.starts_with("emulated:")
    }
}

pub fn run(args: &Args) -> Result<()> {
    let analyzed = common::load_graph(&args.graph)?;
    let connected = common::connect(&args.cluster)?;
    let cluster = &connected.cluster;
    let (placement, ms) = common::place(&args.strategy, &analyzed, cluster)?;
    let placed = apply::apply(&analyzed.graph_def, &analyzed.op_graph, cluster, &placement)?;
    if let Some(out) = &args.out {
        std::fs::write(out, placed.to_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
        log::info!("placed GraphDef written to {}", out.display());
    }
    let report = report(&analyzed, &placement, ms);
    if let Some(path) = &args.report {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        common::print_json(&report)?;
    } else {
        println!(
            "strategy {} placed {} ops in {:.2} ms",
            report.strategy, report.ops, report.placement_ms
        );
        for (d, l) in &report.devices {
            println!("  {d:<50} {:>6} ops {:>12} bytes", l.ops, l.bytes);
        }
    }
    Ok(())
}
