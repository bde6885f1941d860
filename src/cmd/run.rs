//! `tf-iaware run`: place (if asked) and train a GraphDef with synthetic data.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use tf_iaware::parallel::{DataParallelStrategy, Updates};
use tf_iaware::runtime::adapt::AdaptOptions;
use tf_iaware::runtime::data_parallel;
use tf_iaware::runtime::replicated::Workload;
use tf_iaware::runtime::{TrainReport, Trainer};
use tf_iaware::sim::report::{trace, PlacementReport};
use tf_iaware::{Connection, DataParallel, TrainOptions};
use tf_iaware::{Job, TrainingOptions};

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
    /// Which parallelism: `data` replicates the training graph over the workers (variables on
    /// the ps tasks; --strategy replica-setter or infra-aware; --batch is the global batch),
    /// `model` places its ops one by one (the per-op strategies). Default: data for --model,
    /// and for --graph on a cluster with ps tasks when the strategy is replica-setter or
    /// infra-aware; model otherwise.
    #[arg(long, value_parser = ["data", "model"])]
    parallel: Option<String>,
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
    /// Data-parallel: train with the library's trainer on synthetic rows, watching every
    /// worker's live metrics and step windows, and re-plan between steps when a worker's
    /// availability or speed moves (calibrated strategies: infra-aware, infra-aware-async).
    #[arg(long)]
    adapt: bool,
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
    // Before any training: an output path that cannot be written fails now, not after the run.
    common::check_outputs([
        ("--trace", args.trace.as_ref()),
        ("--save-measurements", args.save_measurements.as_ref()),
    ])?;
    if let Some(model) = &args.model {
        if args.parallel.as_deref() == Some("model") {
            bail!("--model trains a zoo model data-parallel; for --parallel model write it with `tf-iaware model {model} --out F.pb` and pass --graph F.pb");
        }
        // Before any cluster is connected to: an unknown model fails at once.
        tf_iaware::models::input_shape(model)?;
        let connection = common::connect(&args.place.cluster)?;
        return run_data_parallel(args, &connection, Workload::from(model));
    }
    let graph = args
        .graph
        .as_ref()
        .context("--graph or --model is required")?;
    let analyzed = common::load_graph(graph)?;
    let sidecar = common::load_sidecar(graph, args.place.meta.as_ref(), &analyzed)?;
    let connection = common::connect(&args.place.cluster)?;
    let data = match args.parallel.as_deref() {
        Some(p) => p == "data",
        None => {
            args.place
                .strategy
                .parse::<DataParallelStrategy>()
                .is_ok_and(|s| s.updates() == Updates::Sync)
                && data_parallel::worker_and_ps_devices(connection.cluster()).is_ok()
        }
    };
    if data {
        let name = graph.display().to_string();
        let workload = Workload::graph(&name, analyzed, sidecar)?;
        return run_data_parallel(args, &connection, workload);
    }
    // A dynamic batch is priced (and run) at the batch the steps feed, not as one sample.
    let plan = args
        .place
        .place(&connection, analyzed, Some(&sidecar), args.batch)?;
    let session = plan.session()?.into_placed_session();
    let trainer = Trainer::new(session, &sidecar, args.batch, args.seed)?;
    let train = trainer.train(
        args.steps,
        args.warmup,
        Some((plan.placement(), &plan.analyzed().op_graph, plan.cluster())),
    )?;
    if let (Some(path), Some(stats)) = (&args.trace, &train.step_stats) {
        common::write_file(path, &trace::chrome_trace(&trace::from_step_stats(stats))?)?;
        log::info!("measured trace written to {}", path.display());
    }
    if let Some(path) = &args.save_measurements {
        // The last timed step's trace and a few more: medians shrug off a hiccup.
        let more = trainer.traced_steps(args.warmup + args.steps, MEASURED_STEPS - 1)?;
        // Under the user's op names, with the availability the run was placed with.
        let mut m = plan.measurements(train.step_stats.iter().chain(&more));
        // The step's own time outside the ops: the timed steps' median against the traced spans.
        if let Some(s) = m.record_step_overhead(train.step_ms.median / 1e3) {
            log::info!("{:.3} ms of each step is outside every op", s * 1e3);
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
    outln!(
        "{}: step {:.1} ms (p10 {:.1}, p90 {:.1}), {:.1} images/s, loss {:.4} → {:.4}",
        report.placement.strategy,
        t.step_ms.median,
        t.step_ms.p10,
        t.step_ms.p90,
        t.images_per_sec,
        t.loss_first,
        t.loss_last
    )?;
    for (d, n) in &t.executed {
        outln!("  {d:<50} {n:>6} ops executed")?;
    }
    Ok(())
}

fn run_data_parallel(args: &Args, connection: &Connection, workload: Workload) -> Result<()> {
    let strategy = args.place.strategy.parse()?;
    let planned = connection.plan_data_parallel_with(
        &workload,
        strategy,
        &tf_iaware::DataParallelOptions {
            global_batch: args.batch,
            // Timed steps of a plan: the plan is made before them, as it always was.
            calibration: tf_iaware::WorkerCalibrationPolicy::Measure,
        },
    )?;
    for r in &planned.plan().replicas {
        log::info!(
            "{}: {} samples on {}",
            planned.plan().strategy,
            r.batch,
            r.device
        );
    }
    if args.adapt {
        return run_adaptive(args, &planned, &workload);
    }
    let report = planned.train(&TrainOptions {
        steps: args.steps,
        warmup: args.warmup,
        seed: args.seed,
        checkpoint_every: args.checkpoint_every,
        max_recoveries: args.max_recoveries,
        trace_last: true,
    })?;
    for rec in &report.recoveries {
        log::warn!(
            "recovered from losing {:?} at update {}: {}",
            rec.lost,
            rec.update,
            match rec.redone {
                0 => "went on from the variables on the ps".to_string(),
                n => format!(
                    "restored the copy of update {}, {n} updates redone",
                    rec.restored_from
                ),
            }
        );
    }
    let train = &report.train;
    if let (Some(path), Some(stats)) = (&args.trace, &train.step_stats) {
        common::write_file(path, &trace::chrome_trace(&trace::from_step_stats(stats))?)?;
        log::info!("measured trace written to {}", path.display());
    }
    if args.json {
        return common::print_json(&report);
    }
    let t = &report.train;
    outln!(
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
    )?;
    if !report.recoveries.is_empty() {
        outln!(
            "  {} recoveries, {} steps run for {} global steps",
            report.recoveries.len(),
            report.steps_run,
            t.losses.len()
        )?;
    }
    Ok(())
}

/// `--adapt`: the library's trainer on synthetic rows, re-planning live when a worker moves.
fn run_adaptive(args: &Args, planned: &DataParallel<'_>, workload: &Workload) -> Result<()> {
    // Enough rows that no share reads one twice in a step.
    let rows = planned.plan().global_batch().max(1) * 16;
    let job = Job::synthetic(workload, rows, args.seed)?;
    let report = planned.fit(
        &job,
        &TrainingOptions {
            steps: Some((args.warmup + args.steps) as u64),
            epochs: None,
            seed: args.seed,
            adapt: Some(AdaptOptions::default()),
            ..TrainingOptions::default()
        },
    )?;
    if args.json {
        return common::print_json(&report);
    }
    let t = report.step_ms.clone().unwrap_or_default();
    outln!(
        "{} adaptive: step {:.1} ms (p10 {:.1}, p90 {:.1}), loss {:.4} → {:.4}, {} re-plans",
        planned.plan().strategy,
        t.median,
        t.p10,
        t.p90,
        report.loss_first.unwrap_or(f32::NAN),
        report.loss_last.unwrap_or(f32::NAN),
        report.replans.len()
    )?;
    for r in &report.replans {
        outln!(
            "  before update {}: {:?} moved {:?}",
            r.before_step,
            r.trigger,
            r.moved
        )?;
    }
    Ok(())
}
