//! `tf-iaware place`: place a GraphDef on a cluster, write the placed GraphDef and a report.

use std::path::PathBuf;

use anyhow::Result;
use tf_iaware::sim::report::PlacementReport;

use crate::common;

#[derive(clap::Args)]
pub struct Args {
    /// GraphDef to place.
    #[arg(long)]
    graph: PathBuf,
    #[command(flatten)]
    place: common::PlaceFlags,
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

impl Args {
    /// Whether the command starts an emulated cluster (and so needs signal teardown).
    pub fn emulated(&self) -> bool {
        self.place.emulated()
    }
}

pub fn run(args: &Args) -> Result<()> {
    common::check_outputs([
        ("--out", args.out.as_ref()),
        ("--report", args.report.as_ref()),
    ])?;
    let p = args.place.load_and_place(&args.graph, None)?;
    let report = p.plan.report();
    if let Some(out) = &args.out {
        common::write_bytes(out, &p.plan.placed_bytes())?;
        log::info!("placed GraphDef written to {}", out.display());
    }
    if let Some(path) = &args.report {
        common::write_file(path, &(report.to_json()? + "\n"))?;
    }
    if args.json {
        return common::print_json(report);
    }
    print_report(report)
}

/// The report as a table: strategy, prediction, per-device load.
pub fn print_report(report: &PlacementReport) -> Result<()> {
    outln!(
        "{}: {} ops in {} colocation groups placed in {:.2} ms; predicted step {:.2} ms, lower bound {:.2} ms",
        report.strategy, report.ops, report.colocation_groups, report.placement_ms, report.predicted_step_ms, report.lower_bound_ms
    )?;
    outln!(
        "{:<48} {:>7} {:>12} {:>12} {:>12} {:>9}",
        "device",
        "ops",
        "MFLOP",
        "MB out",
        "MB memory",
        "busy ms"
    )?;
    for (d, l) in &report.devices {
        outln!(
            "{d:<48} {:>7} {:>12.1} {:>12.2} {:>12.2} {:>9.2}",
            l.ops,
            l.flops as f64 / 1e6,
            l.bytes as f64 / 1e6,
            l.memory_bytes as f64 / 1e6,
            l.busy_ms
        )?;
    }
    Ok(())
}
