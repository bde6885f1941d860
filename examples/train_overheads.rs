//! What the trainer's durability and data feeding cost, measured on an emulated cluster with a
//! zoo model (default ResNet-20, global batch 64, `infra-aware` on `paper`), variants taking turns
//! in each round so that a busy machine slows them alike:
//!
//! - `fixed`: one fixed batch of rows, whatever the sampler asks for (the floor of feeding);
//! - `rows`: the user's rows in memory, as an `.npy`/`.npz` file loads (gathered per step from a
//!   seeded per-epoch shuffle) — `rows` vs `fixed` is the cost of feeding real data;
//! - `ckpt-default`: `rows` plus checkpoints at the default interval (60 s) and at the end;
//! - `ckpt-10s`: `rows` plus a checkpoint every 10 s (the per-checkpoint cost, six times as often).
//!
//! The order of the variants turns from round to round. Each run trains for `--seconds` of
//! training time; the figure is samples per second of wall
//! time from the first step to the end (the final checkpoint included), and of training time.
//!
//! `cargo run --release --example train_overheads -- [--scenario paper] [--model resnet20]
//! [--batch 64] [--seconds 75] [--rounds 2] [--strategy infra-aware]`; prints one JSON document.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use serde::Serialize;
use tf_iaware::data::{input_specs, Batch, Columns, Dataset, InMemory, InputSpec, Synthetic};
use tf_iaware::graph::analyze::analyze_graph;
use tf_iaware::runtime::trainer::CheckpointOptions;
use tf_iaware::{Job, TrainingOptions};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

const VARIANTS: [&str; 4] = ["fixed", "rows", "ckpt-default", "ckpt-10s"];

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "paper")]
    scenario: String,
    #[arg(long, default_value = "resnet20")]
    model: String,
    #[arg(long, default_value_t = 64)]
    batch: usize,
    #[arg(long, default_value_t = 75.0)]
    seconds: f64,
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    #[arg(long, default_value = "infra-aware")]
    strategy: String,
    /// Rows of the in-memory data set.
    #[arg(long, default_value_t = 4096)]
    rows: usize,
}

/// One fixed batch for any request of `k` rows (cached per `k`).
struct Fixed {
    full: InMemory,
    cache: Mutex<BTreeMap<usize, Batch>>,
}

impl Dataset for Fixed {
    fn name(&self) -> &str {
        "fixed batch"
    }
    fn len(&self) -> usize {
        self.full.len()
    }
    fn check(&self, specs: &[InputSpec]) -> tf_iaware::Result<()> {
        self.full.check(specs)
    }
    fn rows(&self, indices: &[usize], specs: &[InputSpec]) -> tf_iaware::Result<Batch> {
        let k = indices.len();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let std::collections::btree_map::Entry::Vacant(e) = cache.entry(k) {
            let first: Vec<usize> = (0..k).collect();
            e.insert(self.full.rows(&first, specs)?);
        }
        Ok(cache[&k].clone())
    }
}

#[derive(Serialize)]
struct RunFigures {
    variant: &'static str,
    round: usize,
    updates: u64,
    samples: u64,
    train_seconds: f64,
    wall_seconds: f64,
    images_per_sec_train: f64,
    images_per_sec_wall: f64,
    checkpoints: usize,
    checkpoint_seconds: f64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    // target/<profile>/examples/train_overheads → target/<profile>/tf-iaware
    let here = std::env::current_exe()?;
    let exe = here
        .ancestors()
        .nth(2)
        .map(|d| d.join("tf-iaware"))
        .context("the tf-iaware binary beside the example's folder")?;
    let scenario = Scenario::parse(&args.scenario)?;
    let cluster = EmulatedCluster::start(&scenario, &exe)?;
    let connection = cluster.into_connection()?;

    let m = tf_iaware::models::build(&args.model, args.batch, 1)?;
    let analyzed = analyze_graph(m.net.graph())?;
    let specs = input_specs(&analyzed.op_graph, &m.sidecar)?;
    let synthetic = Synthetic::new(&specs, &m.sidecar.one_hot, args.rows, 7)?;
    let all: Vec<usize> = (0..args.rows).collect();
    let columns = Columns::new("rows in memory", synthetic.rows(&all, &specs)?.tensors)?;
    let rows = InMemory::new(columns);
    let job = |data: Box<dyn Dataset + Sync>| {
        Job::new(
            &args.model,
            analyze_graph(m.net.graph())?,
            m.sidecar.clone(),
            data,
        )
    };
    let fixed_job = job(Box::new(Fixed {
        full: rows.clone(),
        cache: Mutex::new(BTreeMap::new()),
    }))?;
    let rows_job = job(Box::new(rows))?;
    let planned = connection
        .plan_data_parallel(
            rows_job.workload(),
            args.strategy.parse()?,
            Some(args.batch),
        )
        .context("planning")?;
    eprintln!(
        "shares {:?}",
        planned
            .plan()
            .replicas
            .iter()
            .map(|r| r.batch)
            .collect::<Vec<_>>()
    );

    let scratch = tempfile::tempdir()?;
    let mut figures = Vec::new();
    for round in 0..args.rounds {
        // The order turns each round, so no variant always runs first or last.
        let mut order = VARIANTS;
        order.rotate_left(round % VARIANTS.len());
        for variant in order {
            let dir = scratch.path().join(format!("{variant}-{round}"));
            let checkpoints = match variant {
                "ckpt-default" => Some(CheckpointOptions::new(&dir)),
                "ckpt-10s" => Some(CheckpointOptions {
                    every_seconds: Some(10.0),
                    ..CheckpointOptions::new(&dir)
                }),
                _ => None,
            };
            let options = TrainingOptions {
                steps: None,
                epochs: None,
                max_seconds: Some(args.seconds),
                seed: round as u64 + 1,
                checkpoints,
                ..TrainingOptions::default()
            };
            let job = if variant == "fixed" {
                &fixed_job
            } else {
                &rows_job
            };
            let started = Instant::now();
            let r = planned.fit(job, &options)?;
            let wall = started.elapsed().as_secs_f64() - r.startup_seconds - r.eval_seconds;
            let f = RunFigures {
                variant,
                round,
                updates: r.updates,
                samples: r.samples,
                train_seconds: r.train_seconds,
                wall_seconds: wall,
                images_per_sec_train: r.images_per_sec,
                images_per_sec_wall: r.samples as f64 / wall,
                checkpoints: r.checkpoints.len(),
                checkpoint_seconds: r.checkpoints.iter().map(|c| c.seconds).sum(),
            };
            eprintln!(
                "round {round} {variant}: {:.1} images/s (wall), {} checkpoints in {:.2} s",
                f.images_per_sec_wall, f.checkpoints, f.checkpoint_seconds
            );
            figures.push(f);
        }
    }
    println!("{}", serde_json::to_string_pretty(&figures)?);
    Ok(())
}
