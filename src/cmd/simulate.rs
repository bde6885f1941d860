//! `tf-iaware simulate`: place a GraphDef and predict one training step — step time, lower bound,
//! per-device load — without running it.

use std::path::PathBuf;

use anyhow::Result;
use tf_iaware::sim::report::{evaluate, trace};

use crate::cmd::place::print_report;
use crate::common;

#[derive(clap::Args)]
pub struct Args {
    /// GraphDef to place and simulate.
    #[arg(long)]
    graph: PathBuf,
    #[command(flatten)]
    place: common::PlaceFlags,
    /// Price this many samples per step where the graph's inputs have a dynamic batch (leading
    /// dimension -1); without it an unknown dimension counts as 1.
    #[arg(long, value_parser = common::count::<1, { tf_iaware::runtime::limits::MAX_BATCH }>)]
    batch: Option<usize>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Write the simulated step as a Chrome trace.
    #[arg(long)]
    trace: Option<PathBuf>,
}

impl Args {
    /// Whether the command starts an emulated cluster (and so needs signal teardown).
    pub fn emulated(&self) -> bool {
        self.place.emulated()
    }
}

pub fn run(args: &Args) -> Result<()> {
    common::check_outputs([("--trace", args.trace.as_ref())])?;
    let p = args.place.load_and_place(&args.graph, args.batch)?;
    let (graph, cluster, report) = (
        &p.plan.analyzed().op_graph,
        p.connection.cluster(),
        p.plan.report(),
    );
    if let Some(path) = &args.trace {
        let ev = evaluate(graph, cluster, p.plan.cost(), p.plan.placement())?;
        let records = trace::from_simulation(graph, cluster, &ev.sim);
        common::write_file(path, &trace::chrome_trace(&records)?)?;
        log::info!("simulated trace written to {}", path.display());
    }
    if args.json {
        return common::print_json(report);
    }
    print_report(report)
}
