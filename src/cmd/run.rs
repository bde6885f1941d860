//! `tf-iaware run`: place (if asked) and train a GraphDef with synthetic data.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use tf_iaware::cost::Measurements;
use tf_iaware::models::replicated;
use tf_iaware::parallel::{self, DataParallelPlan, InfraAwareOptions, WorkerCapacity};
use tf_iaware::report::{trace, PlacementReport};
use tf_iaware::runtime::data_parallel::{Recovery, RecoveryOptions};
use tf_iaware::runtime::{data_parallel, TrainReport, Trainer};

use crate::common;

/// Traced steps whose op timings `--save-measurements` writes.
const MEASURED_STEPS: usize = 5;

#[derive(clap::Args)]
pub struct Args {
    /// GraphDef to train (ops placed by the strategy).
    #[arg(long, required_unless_present = "model", conflicts_with = "model")]
    graph: Option<PathBuf>,
    /// Zoo model to train data-parallel over the cluster's workers and ps tasks (strategies
    /// replica-setter, infra-aware); `--batch` is the global batch.
    #[arg(long)]
    model: Option<String>,
    #[command(flatten)]
    place: common::PlaceFlags,
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
    /// Write the last (traced) step as a Chrome trace (chrome://tracing, Perfetto).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Write the op timings of the last step and four more traced ones as JSON, for
    /// `place`/`simulate`/`run --measurements`.
    #[arg(long, value_name = "M.json")]
    save_measurements: Option<PathBuf>,
    /// With --model: steps between the driver's in-memory checkpoints of the variables (one is
    /// also taken after initialisation). A lost worker is re-planned around; a lost ps is waited
    /// for (up to the operation timeout) or re-planned around, and training goes on from the
    /// latest checkpoint. 0: no checkpoints and no recovery.
    #[arg(long, default_value_t = 5)]
    checkpoint_every: usize,
    /// With --model: recoveries from lost tasks before a failure ends the run.
    #[arg(long, default_value_t = 3)]
    max_recoveries: usize,
}

#[derive(Serialize)]
struct RunReport {
    #[serde(flatten)]
    placement: PlacementReport,
    #[serde(flatten)]
    train: TrainReport,
}

impl Args {
    /// Whether the command starts an emulated cluster (and so needs signal teardown).
    pub fn emulated(&self) -> bool {
        self.place.emulated()
    }
}

pub fn run(args: &Args) -> Result<()> {
    if let Some(model) = &args.model {
        return run_data_parallel(args, model);
    }
    let graph = args
        .graph
        .as_ref()
        .context("--graph or --model is required")?;
    let analyzed = common::load_graph(graph)?;
    let sidecar = common::load_sidecar(graph, args.place.meta.as_ref(), &analyzed)?;
    let connection = common::connect(&args.place.cluster)?;
    let plan = args.place.place(&connection, analyzed, Some(&sidecar))?;
    let session = plan.session()?.into_placed_session();
    let trainer = Trainer::new(session, &sidecar, args.batch, args.seed)?;
    let train = trainer.train(
        args.steps,
        args.warmup,
        Some((plan.placement(), &plan.analyzed().op_graph)),
    )?;
    if let (Some(path), Some(stats)) = (&args.trace, &train.step_stats) {
        common::write_file(path, &trace::chrome_trace(&trace::from_step_stats(stats))?)?;
        log::info!("measured trace written to {}", path.display());
    }
    if let Some(path) = &args.save_measurements {
        // The last timed step's trace and a few more: medians shrug off a hiccup.
        let more = trainer.traced_steps(args.warmup + args.steps, MEASURED_STEPS - 1)?;
        let mut m = Measurements::new();
        for stats in train.step_stats.iter().chain(&more) {
            m.add_step_stats(stats);
        }
        common::write_file(path, &serde_json::to_string(&m)?)?;
        log::info!(
            "{} op timings of {} traced steps written to {}",
            m.len(),
            more.len() + 1,
            path.display()
        );
    }
    if !train.mismatches.is_empty() {
        log::warn!(
            "{} placed ops ran elsewhere, e.g. {:?}",
            train.mismatches.len(),
            train.mismatches[0]
        );
    }
    let report = RunReport {
        placement: plan.report().clone(),
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

#[derive(Serialize)]
struct DataParallelReport {
    strategy: String,
    model: String,
    global_batch: usize,
    plan: DataParallelPlan,
    calibration: Option<Vec<WorkerCapacity>>,
    #[serde(flatten)]
    train: TrainReport,
    /// Lost tasks recovered from (empty without faults or with `--checkpoint-every 0`).
    recoveries: Vec<Recovery>,
    /// Steps run in all, those redone after restoring a checkpoint included.
    steps_run: usize,
    /// Wall time of each checkpoint, ms.
    checkpoint_ms: Vec<f64>,
    /// Size of a checkpoint, bytes.
    checkpoint_bytes: usize,
}

fn run_data_parallel(args: &Args, model: &str) -> Result<()> {
    let connection = common::connect(&args.place.cluster)?;
    let (cluster, config) = (connection.cluster(), connection.session_config());
    let (workers, ps) = data_parallel::worker_and_ps_devices(cluster)?;
    let batch = args.batch.unwrap_or(32 * workers.len());
    let vars = replicated::variables(model)?;
    let (plan, calibration) = match args.place.strategy.as_str() {
        "replica-setter" => (parallel::replica_setter(&workers, &ps, &vars, batch)?, None),
        "infra-aware" => {
            let probe = (batch / workers.len()).clamp(1, 32);
            let cal = data_parallel::calibrate_workers(model, &workers, &ps[0], cluster, config, probe, 1.0)?;
            let ps_cap: Vec<(String, f64)> = ps.iter().map(|p| (p.clone(), 1.0)).collect();
            let plan = parallel::infra_aware(&cal, &ps_cap, &vars, batch, &InfraAwareOptions::default())?;
            (plan, Some(cal))
        }
        other => bail!("data-parallel training (--model) takes --strategy replica-setter or infra-aware, not `{other}`"),
    };
    for r in &plan.replicas {
        log::info!("{}: {} samples on {}", plan.strategy, r.batch, r.device);
    }
    let replan = |alive: &[String], alive_ps: &[String]| match &calibration {
        None => parallel::replica_setter(alive, alive_ps, &vars, batch),
        Some(cal) => {
            let cal: Vec<WorkerCapacity> = cal
                .iter()
                .filter(|c| alive.contains(&c.device))
                .cloned()
                .collect();
            let ps_cap: Vec<(String, f64)> = alive_ps.iter().map(|p| (p.clone(), 1.0)).collect();
            parallel::infra_aware(&cal, &ps_cap, &vars, batch, &InfraAwareOptions::default())
        }
    };
    let (train, recovering) = match (args.checkpoint_every, connection.tf_config()) {
        (0, _) => {
            let train = data_parallel::train(
                model,
                &plan,
                cluster,
                config,
                args.steps,
                args.warmup,
                args.seed,
            )?;
            (train, None)
        }
        (every, Some(tf_config)) => {
            let options = RecoveryOptions {
                max_recoveries: args.max_recoveries,
                checkpoint_every: every,
                ps_wait: Duration::from_millis(config.operation_timeout_ms.max(1_000) as u64),
                trace_last: true,
                seed: args.seed,
            };
            let r = data_parallel::train_recovering(
                model,
                plan.clone(),
                cluster,
                config,
                tf_config,
                args.warmup + args.steps,
                &options,
                replan,
                |_| {},
            )?;
            for rec in &r.recoveries {
                log::warn!(
                    "recovered from losing {:?} ({:?}) at step {}: {}",
                    rec.lost,
                    rec.kind,
                    rec.step,
                    rec.restored_from
                        .map_or("went on from the ps".into(), |c| format!(
                            "restored the checkpoint of step {c}, {} steps redone",
                            rec.redone_steps
                        ))
                );
            }
            (r.train_report(args.warmup, batch), Some(r))
        }
        (_, None) => bail!(
            "recovering from lost tasks needs a TF_CONFIG cluster (tf-config, emulated:…); \
             `{}` is not one — pass --checkpoint-every 0",
            args.place.cluster
        ),
    };
    if let (Some(path), Some(stats)) = (&args.trace, &train.step_stats) {
        common::write_file(path, &trace::chrome_trace(&trace::from_step_stats(stats))?)?;
        log::info!("measured trace written to {}", path.display());
    }
    let (plan, recoveries, steps_run, checkpoint_ms, checkpoint_bytes) = match recovering {
        Some(r) => (
            r.final_plan,
            r.recoveries,
            r.steps_run,
            r.checkpoint_ms,
            r.checkpoint_bytes,
        ),
        None => (plan, Vec::new(), args.warmup + args.steps, Vec::new(), 0),
    };
    let report = DataParallelReport {
        strategy: plan.strategy.clone(),
        model: model.to_string(),
        global_batch: plan.global_batch(),
        plan,
        calibration,
        train,
        recoveries,
        steps_run,
        checkpoint_ms,
        checkpoint_bytes,
    };
    if args.json {
        return common::print_json(&report);
    }
    let t = &report.train;
    println!(
        "{} ({} replicas, global batch {}): step {:.1} ms (p10 {:.1}, p90 {:.1}), {:.1} images/s, loss {:.4} → {:.4}",
        report.strategy,
        report.plan.replicas.len(),
        report.global_batch,
        t.step_ms.median,
        t.step_ms.p10,
        t.step_ms.p90,
        t.images_per_sec,
        t.loss_first,
        t.loss_last
    );
    if !report.recoveries.is_empty() {
        println!(
            "  {} recoveries, {} steps run for {} global steps",
            report.recoveries.len(),
            report.steps_run,
            t.losses.len()
        );
    }
    Ok(())
}
