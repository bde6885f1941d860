//! `tf-iaware train`: train a user's GraphDef on the user's data over a cluster with any
//! data-parallel strategy, until steps, epochs, seconds or a held-out target.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tf_iaware::parallel::DataParallelStrategy;
use tf_iaware::runtime::adapt::AdaptOptions;
use tf_iaware::runtime::trainer::{
    CheckpointOptions, OnProgress, RecoverOptions, StepProgress, DEFAULT_CHECKPOINT_EVERY_S,
    DEFAULT_KEEP, TARGET_EPOCHS_CAP,
};
use tf_iaware::{
    DataParallelOptions, Job, TrainingOptions, TrainingReport, WorkerCalibrationPolicy,
};

use crate::common;

#[derive(clap::Args)]
pub struct Args {
    /// The single-tower training GraphDef (TF1-style: placeholders, a train op, a loss).
    #[arg(long)]
    graph: PathBuf,
    /// Its sidecar (default: the `.json` next to the graph).
    #[arg(long)]
    meta: Option<PathBuf>,
    /// Training data: `.npy` (one input), `.npz` (one array per input name), TFRecord files of
    /// `tf.train.Example` (feature name = input name) or a folder of them.
    #[arg(long)]
    data: PathBuf,
    /// Held-out data (same formats), evaluated every `--eval-every` seconds and at the end.
    #[arg(long)]
    held_out: Option<PathBuf>,
    /// Cluster: `tf-config[:PATH]`, `emulated:SCENARIO` (started and stopped around the run).
    #[arg(long, default_value = "tf-config")]
    cluster: String,
    /// Data-parallel strategy.
    #[arg(long, default_value = "infra-aware", value_parser = parse_strategy,
          long_help = strategy_help())]
    strategy: DataParallelStrategy,
    /// Samples per step over all workers (default: the graph's fixed batch, else 32 per worker).
    #[arg(long)]
    batch: Option<usize>,
    /// How infra-aware strategies learn each worker's capability: `learn` (a matching cached
    /// calibration at once, else start training at once and learn from the training steps),
    /// `measure` (a cached calibration, else calibrate every worker before the first step) or
    /// `remeasure` (calibrate afresh).
    #[arg(long, value_enum, default_value_t = Calibrate::Learn)]
    calibrate: Calibrate,
    /// Stop after this many updates of the variables.
    #[arg(long)]
    steps: Option<u64>,
    /// Stop after this many passes over the training data (default 1 when nothing else bounds
    /// the run).
    #[arg(long)]
    epochs: Option<f64>,
    /// Stop after this many seconds of training (evaluations excluded).
    #[arg(long)]
    max_seconds: Option<f64>,
    /// Stop when the held-out accuracy (or the held-out loss, for a graph without `logits`)
    /// reaches this value.
    #[arg(long, requires = "held_out")]
    target_accuracy: Option<f64>,
    /// Seconds of training between evaluations of the held-out data.
    #[arg(long, default_value_t = 5.0)]
    eval_every: f64,
    /// Seed of each worker's shuffle.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write checkpoints (TensorFlow's V2 format, the user's variable names) to this directory
    /// on this machine; started again with the same directory, the run resumes from the newest
    /// whole checkpoint (its updates, variables, data position and clock).
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// Updates between checkpoints.
    #[arg(long, requires = "checkpoint_dir")]
    checkpoint_steps: Option<u64>,
    /// Training seconds between checkpoints (default 60 unless --checkpoint-steps is given).
    #[arg(long, requires = "checkpoint_dir")]
    checkpoint_secs: Option<f64>,
    /// Checkpoints kept (older ones are deleted).
    #[arg(long, default_value_t = DEFAULT_KEEP, requires = "checkpoint_dir")]
    keep_checkpoints: usize,
    /// Write TensorBoard event files (loss, images/s, held-out metric, shares, availability,
    /// re-plans) to this directory.
    #[arg(long)]
    logdir: Option<PathBuf>,
    /// On a TF_CONFIG cluster, recoveries from lost workers and parameter servers before a
    /// failure ends the run (the strategy is re-planned over the tasks that still answer and
    /// training goes on; 0: a lost task ends the run).
    #[arg(long, default_value_t = 3)]
    max_recoveries: usize,
    /// Re-plan live: watch every worker's metrics and step times and, when one gets busier or
    /// freer, make the plan again from the calibration between two steps (infra-aware,
    /// infra-aware-async).
    #[arg(long)]
    adapt: bool,
    /// Print the report as one JSON document on stdout.
    #[arg(long)]
    json: bool,
}

/// `--calibrate`: [`WorkerCalibrationPolicy`] on the command line.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Calibrate {
    Learn,
    Measure,
    Remeasure,
}

impl From<Calibrate> for WorkerCalibrationPolicy {
    fn from(c: Calibrate) -> Self {
        match c {
            Calibrate::Learn => WorkerCalibrationPolicy::Learn,
            Calibrate::Measure => WorkerCalibrationPolicy::Measure,
            Calibrate::Remeasure => WorkerCalibrationPolicy::Remeasure,
        }
    }
}

fn parse_strategy(s: &str) -> std::result::Result<DataParallelStrategy, String> {
    s.parse().map_err(|e: tf_iaware::Error| e.to_string())
}

fn strategy_help() -> String {
    format!("Data-parallel strategy:\n{}", DataParallelStrategy::help())
}

impl Args {
    /// Whether `--cluster` starts an emulated cluster.
    pub fn emulated(&self) -> bool {
        self.cluster.starts_with("emulated:")
    }

    /// Whether steps, epochs or seconds bound the run (else one epoch, or a target alone).
    fn bounded(&self) -> bool {
        self.steps.is_some() || self.epochs.is_some() || self.max_seconds.is_some()
    }
}

/// The report `--json` prints.
#[derive(Serialize)]
struct TrainCommandReport<'a> {
    graph: String,
    data: String,
    held_out: Option<String>,
    cluster: &'a str,
    global_batch: usize,
    /// Seconds from the command's start to the trainer's: loading the job, connecting to the
    /// cluster (starting it, if emulated) and planning. With the report's `startup_seconds`, what
    /// a restart costs before the first step.
    setup_seconds: f64,
    /// Wall seconds from the command's start to the evaluation that reached the target: setup,
    /// the trainer's start-up, training and evaluations — the time a user waits.
    wall_to_target_from_start_s: Option<f64>,
    #[serde(flatten)]
    report: &'a TrainingReport,
}

pub fn run(args: &Args) -> Result<()> {
    let began = Instant::now();
    // Everything about the job is checked before a cluster starts.
    let mut job = Job::load(&args.graph, args.meta.as_deref(), &args.data)?;
    if let Some(path) = &args.held_out {
        job = job.with_held_out_file(path)?;
    }
    job.check_updates(args.strategy.updates())
        .with_context(|| format!("{} cannot train {}", args.strategy, job.name()))?;
    let watch = Watch::new(args.steps);
    let options = training_options(args, &watch);
    options.validate()?;
    options.check_outputs()?;
    // What is left to check is the target against the job's metric.
    options.validate_for(&job).context("--target-accuracy")?;
    if let (false, Some(t)) = (args.bounded(), options.target) {
        noteln!("training until the held-out target {t}, at most {TARGET_EPOCHS_CAP} epochs");
    }
    let connection = common::connect(&args.cluster)?;
    // Asynchronous steps run through each worker's own server, as TF2's ParameterServerStrategy:
    // the door (`DataParallel::fit`) fills `own_masters` from the connection.
    let planned = connection.plan_data_parallel_with(
        job.workload(),
        args.strategy,
        &DataParallelOptions {
            global_batch: args.batch,
            calibration: args.calibrate.into(),
        },
    )?;
    let shares: Vec<String> = planned
        .plan()
        .replicas
        .iter()
        .map(|r| r.batch.to_string())
        .collect();
    noteln!(
        "{} on {}: shares [{}], {} training rows{}",
        args.strategy,
        args.cluster,
        shares.join(", "),
        job.train_data().len(),
        args.held_out
            .as_ref()
            .map_or(String::new(), |p| format!(", held out {}", p.display()))
    );
    let setup_seconds = began.elapsed().as_secs_f64();
    let report = planned.fit(&job, &options);
    watch.finish();
    let report = report?;
    note_resume_and_checkpoints(&report);
    if args.json {
        return common::print_json(&TrainCommandReport {
            graph: args.graph.display().to_string(),
            data: args.data.display().to_string(),
            held_out: args.held_out.as_ref().map(|p| p.display().to_string()),
            cluster: &args.cluster,
            global_batch: planned.plan().replicas.iter().map(|r| r.batch).sum(),
            setup_seconds,
            wall_to_target_from_start_s: report.wall_to_target_s.map(|w| setup_seconds + w),
            report: &report,
        });
    }
    print_report(args, &report)
}

/// The trainer's options from the flags, progress shown through `watch`; `own_masters` is left
/// to the connection.
fn training_options(args: &Args, watch: &std::sync::Arc<Watch>) -> TrainingOptions {
    let checkpoints = args.checkpoint_dir.as_ref().map(|dir| CheckpointOptions {
        every_steps: args.checkpoint_steps,
        every_seconds: args.checkpoint_secs.or(args
            .checkpoint_steps
            .is_none()
            .then_some(DEFAULT_CHECKPOINT_EVERY_S)),
        keep: args.keep_checkpoints,
        ..CheckpointOptions::new(dir)
    });
    TrainingOptions {
        steps: args.steps,
        // A target alone trains until it is reached (at most TARGET_EPOCHS_CAP epochs).
        epochs: args
            .epochs
            .or((!args.bounded() && args.target_accuracy.is_none()).then_some(1.0)),
        max_seconds: args.max_seconds,
        target: args.target_accuracy,
        eval_every_s: args.eval_every,
        seed: args.seed,
        own_masters: None,
        checkpoints,
        logdir: args.logdir.clone(),
        progress: Some(watch.callback()),
        adapt: args.adapt.then(AdaptOptions::default),
        stop: None,
        recover: (args.max_recoveries > 0).then(|| RecoverOptions {
            max_recoveries: args.max_recoveries,
            ..RecoverOptions::default()
        }),
        trace_last: false,
    }
}

/// On stderr: where the run resumed from, and the checkpoints it wrote.
fn note_resume_and_checkpoints(report: &TrainingReport) {
    if let Some(r) = &report.resumed_from {
        noteln!(
            "resumed from step {} ({}), {:.1} s of training before, restored in {:.2} s",
            r.step,
            r.prefix.display(),
            r.train_seconds,
            r.restore_seconds
        );
    }
    if let Some(c) = report.checkpoints.last() {
        noteln!(
            "{} checkpoint(s) written, the last of step {}: {}",
            report.checkpoints.len(),
            c.step,
            c.prefix.display()
        );
    }
}

/// The report as text on stdout: the evaluations, a summary line and one line per worker.
fn print_report(args: &Args, report: &TrainingReport) -> Result<()> {
    for e in &report.evaluations {
        outln!(
            "{:>8.1} s  epoch {:>6.2}  {:>7} updates  held-out {} {:.4}",
            e.seconds,
            e.epoch,
            e.updates,
            report.metric.as_deref().unwrap_or("metric"),
            e.metric
        )?;
    }
    outln!(
        "{}: {} updates, {:.2} epochs, {:.1} samples/s, loss {} → {}{}",
        report.strategy,
        report.updates,
        report.epochs,
        report.images_per_sec,
        report.loss_first.map_or("-".into(), |l| format!("{l:.4}")),
        report.loss_last.map_or("-".into(), |l| format!("{l:.4}")),
        match (args.target_accuracy, report.time_to_target_s) {
            (Some(t), Some(s)) => format!(", target {t} reached after {s:.1} s"),
            (Some(t), None) => match report.epoch_bound {
                Some(e) if !args.bounded() =>
                    format!(", target {t} not reached within the cap of {e} epochs"),
                _ => format!(", target {t} not reached"),
            },
            _ => String::new(),
        }
    )?;
    for w in &report.workers {
        outln!(
            "  {}: share {}, {} steps, {} samples",
            w.device,
            w.batch,
            w.steps,
            w.samples
        )?;
    }
    Ok(())
}

/// The run's progress on stderr: a bar (step, loss, images/s, held-out metric, ETA) on a
/// terminal, a plain line every [`Watch::LINE_EVERY`] otherwise.
struct Watch {
    bar: Option<ProgressBar>,
    last_line: Mutex<Option<Instant>>,
    /// Whether a progress line could not be written.
    unwritten: AtomicBool,
}

impl Watch {
    const LINE_EVERY: Duration = Duration::from_secs(10);

    fn new(steps: Option<u64>) -> std::sync::Arc<Watch> {
        let bar = std::io::stderr().is_terminal().then(|| {
            let (bar, template) = match steps {
                Some(n) => (
                    ProgressBar::new(n),
                    "[{bar:25}] {pos}/{len} updates {msg} eta {eta}",
                ),
                None => (ProgressBar::new_spinner(), "{spinner} {pos} updates {msg}"),
            };
            bar.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar
        });
        std::sync::Arc::new(Watch {
            bar,
            last_line: Mutex::new(None),
            unwritten: AtomicBool::new(false),
        })
    }

    fn callback(self: &std::sync::Arc<Self>) -> OnProgress {
        let watch = self.clone();
        OnProgress::new(move |p| watch.show(p))
    }

    fn describe(p: &StepProgress) -> String {
        let mut s = format!("epoch {:.2}, {:.0} samples/s", p.epochs, p.images_per_sec);
        if let Some(l) = p.loss {
            s += &format!(", loss {l:.4}");
        }
        if let Some(m) = p.metric {
            s += &format!(", held-out {m:.4}");
        }
        s
    }

    fn show(&self, p: &StepProgress) {
        if let Some(bar) = &self.bar {
            bar.set_position(p.updates);
            bar.set_message(Self::describe(p));
            return;
        }
        let mut last = self.last_line.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none_or(|t| t.elapsed() >= Self::LINE_EVERY) {
            *last = Some(Instant::now());
            let written = noteln!(
                "{:.1} s: {} updates, {}",
                p.train_seconds,
                p.updates,
                Self::describe(p)
            );
            // Progress is for people; a stderr that fails (full, closed) loses the lines, not
            // the run. Said once, through the log (which drops what it cannot write too).
            if !written && !self.unwritten.swap(true, Ordering::Relaxed) {
                log::warn!("progress lines cannot be written to stderr; training goes on");
            }
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
