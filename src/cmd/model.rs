//! `tf-iaware model`: write a zoo model's training GraphDef and sidecar.

use std::path::PathBuf;

use anyhow::{Context, Result};
use tf_iaware::graph::Sidecar;

#[derive(clap::Args)]
pub struct Args {
    /// Model: mlp, lenet, resnet20, mobilenet, inception.
    name: String,
    /// Batch size built into the graph.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Seed of the variable initialisers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output GraphDef; the sidecar goes next to it with extension .json.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: &Args) -> Result<()> {
    let sidecar_out = Sidecar::path_for(&args.out);
    crate::common::check_outputs([
        ("--out", Some(&args.out)),
        ("--out's sidecar", Some(&sidecar_out)),
    ])?;
    let model = tf_iaware::models::build(&args.name, args.batch, args.seed)?;
    let bytes = model
        .net
        .graph()
        .graph_def()
        .context("exporting the GraphDef")?;
    crate::common::write_bytes(&args.out, &bytes)?;
    let sidecar_path = Sidecar::path_for(&args.out);
    model.sidecar.save(&sidecar_path)?;
    log::info!(
        "{}: {} ops, batch {} → {} and {}",
        args.name,
        model.net.graph().operation_iter().count(),
        args.batch,
        args.out.display(),
        sidecar_path.display()
    );
    Ok(())
}
