//! `tf-iaware run`: place (if asked) and train a GraphDef with synthetic data.

use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;
use tf_iaware::apply;
use tf_iaware::runtime::{PlacedSession, TrainReport, Trainer};

use crate::cmd::place;
use crate::common;

#[derive(clap::Args)]
pub struct Args {
    /// GraphDef to train.
    #[arg(long)]
    graph: PathBuf,
    /// Sidecar JSON (default: the graph's path with extension .json).
    #[arg(long)]
    meta: Option<PathBuf>,
    /// Cluster spec: local, local:cpu=N, tf-config[:PATH], emulated:SCENARIO.
    #[arg(long, default_value = "local")]
    cluster: String,
    /// Placement strategy (default: keep the graph's devices, TensorFlow decides the rest).
    #[arg(long, default_value = "tf-default")]
    strategy: String,
    /// Timed steps.
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// Untimed warm-up steps before them.
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Batch size for inputs whose leading dimension is -1.
    #[arg(long)]
    batch: Option<usize>,
    /// Seed of the synthetic batch.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct RunReport {
    #[serde(flatten)]
    placement: place::Report,
    #[serde(flatten)]
    train: TrainReport,
}

pub fn run(args: &Args) -> Result<()> {
    let analyzed = common::load_graph(&args.graph)?;
    let sidecar = common::load_sidecar(&args.graph, args.meta.as_ref(), &analyzed)?;
    let (cluster, config) = common::connect(&args.cluster)?;
    let (placement, ms) = common::place(&args.strategy, &analyzed, &cluster)?;
    let placed = apply::apply(
        &analyzed.graph_def,
        &analyzed.op_graph,
        &cluster,
        &placement,
    )?;
    let placement_report = place::report(&analyzed, &placement, ms);
    let session = PlacedSession::new(placed.graph, &config)?;
    let trainer = Trainer::new(session, &sidecar, args.batch, args.seed)?;
    let train = trainer.train(
        args.steps,
        args.warmup,
        Some((&placement, &analyzed.op_graph)),
    )?;
    if !train.mismatches.is_empty() {
        log::warn!(
            "{} placed ops ran elsewhere, e.g. {:?}",
            train.mismatches.len(),
            train.mismatches[0]
        );
    }
    let report = RunReport {
        placement: placement_report,
        train,
    };
    if args.json {
        return common::print_json(&report);
    }
    let t = &report.train;
    println!(
        "{}: step {:.1} ms (p10 {:.1}, p90 {:.1}), {:.1} images/s, loss {:.4} → {:.4}",
        report.placement.strategy,
        t.step_ms.median,
        t.step_ms.p10,
        t.step_ms.p90,
        t.images_per_sec,
        t.loss_first,
        t.loss_last
    );
    for (d, n) in &t.executed {
        println!("  {d:<50} {n:>6} ops executed");
    }
    Ok(())
}
