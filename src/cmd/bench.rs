//! `tf-iaware bench`: flags → [`tf_iaware_bench`] options, its events shown as they come (notes
//! and a spinner on stderr, a progress bar, result lines on stdout), and the returned report
//! printed as tables and written as JSON, SVG and TSV files.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use tf_iaware::runtime::limits;
use tf_iaware::sim::scale::{Planner, StudyRow};
use tf_iaware::TrainingReport;
use tf_iaware_bench::{
    AccuracyReport, AdaptationReport, BenchOptions, BenchReport, Data, Event, Model, RoundStats,
    SimOptions, StrategyResult,
};
use tf_iaware_emulate::Scenario;

use crate::common::count;

#[derive(clap::Args)]
pub struct Args {
    /// Emulated scenario: paper, uniform, busy, mixed, slow-net, drift, or inline
    /// (`workers=1.0,0.5:busy=0,0.6`, see docs/src/guide/emulated-clusters.md).
    #[arg(long, default_value = "paper")]
    scenario: String,
    /// Zoo model trained data-parallel.
    #[arg(long, default_value = "resnet20")]
    model: String,
    /// A training GraphDef of your own instead of the zoo model (e.g. exported by Python
    /// TensorFlow), replicated data-parallel as `run --graph --parallel data` does; its sidecar
    /// is `--meta`, else the `.json` next to it.
    #[arg(long, value_name = "F.pb")]
    graph: Option<PathBuf>,
    /// Sidecar of `--graph`.
    #[arg(long, value_name = "F.json", requires = "graph")]
    meta: Option<PathBuf>,
    /// Strategies, comma-separated: data-parallel replica-setter (stock TensorFlow) and
    /// infra-aware; model-parallel per-op strategies (heft, etf, single-fastest, round-robin, …)
    /// over the workers.
    #[arg(
        long,
        default_value = "replica-setter,infra-aware,heft",
        value_delimiter = ',',
        value_parser = planner
    )]
    strategies: Vec<Planner>,
    /// Timed steps per strategy (split over the repeats).
    #[arg(long, default_value_t = 8)]
    steps: usize,
    /// Untimed warm-up steps per strategy.
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Rounds the strategies take turns in.
    #[arg(long, default_value_t = 2, value_parser = count::<0, { limits::MAX_REPEATS }>)]
    repeats: usize,
    /// Global batch per step.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Samples for the "time to train" column (default: one CIFAR-10 epoch).
    #[arg(long, default_value_t = 50_000, value_parser = count::<0, { limits::MAX_SAMPLES }>)]
    samples: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an SVG chart here.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Drop the cached worker calibration and measure again.
    #[arg(long)]
    recalibrate: bool,
    /// Training data: `synthetic` (a fixed random batch per worker: images/s of the model),
    /// `digits` (the real 8×8 handwritten digits, trained until `--target-accuracy` on a
    /// held-out split: time to accuracy per contender), or a data file of your own (`.npy`,
    /// `.npz`, TFRecord, or a folder of them) for `--graph`, split by `--held-out`.
    #[arg(long, default_value = "synthetic")]
    data: String,
    /// Held-out accuracy each contender trains to (`--data digits`), 0–1.
    #[arg(long, default_value_t = 0.9)]
    target_accuracy: f64,
    /// Seconds of training between evaluations (`--data digits`).
    #[arg(long, default_value_t = 2.0)]
    eval_every: f64,
    /// Seconds of training after which a contender gives up (`--data digits`).
    #[arg(long, default_value_t = 300.0)]
    max_train_s: f64,
    /// Share of each digit held out for evaluation (`--data digits`), or of the `--data` file's
    /// rows when no `--held-out-data` is given.
    #[arg(long, default_value_t = 0.2)]
    held_out: f64,
    /// A held-out data file of the user's own (same formats as `--data`): evaluated on instead of
    /// rows split off the training file, which is then trained on whole.
    #[arg(long, conflicts_with = "held_out")]
    held_out_data: Option<PathBuf>,
    /// Backup workers of `sync-backup`: each step aggregates N − k gradients.
    #[arg(long, default_value_t = 1, value_parser = count::<0, { limits::MAX_WORKERS }>)]
    backup_workers: usize,
    /// `infra-aware` traces every this many steps to measure each replica (the interval
    /// doubling while the shares are kept), and re-sizes its shares when, given the noise of
    /// three measurements per replica, the lower 95 % bound of the predicted gain is at least
    /// 10 % (0: never).
    #[arg(long, default_value_t = 4, value_parser = count::<0, { limits::MAX_STEPS }>)]
    resize_every: usize,
    /// Where asynchronous contenders' steps are mastered: `own` — each worker's own server, as
    /// TF2's ParameterServerStrategy — or `shared` — every step through the session target
    /// (ps 0), as TF1 asynchronous replication with one master.
    #[arg(long, value_enum, default_value_t = AsyncMasters::Own)]
    async_masters: AsyncMasters,
    /// Folder for one `epoch  seconds  accuracy` TSV per contender and round (`--data digits`).
    #[arg(long, value_name = "DIR")]
    tsv: Option<PathBuf>,
    #[command(flatten)]
    sim: SimFlags,
}

/// Flags of the simulated modes.
#[derive(clap::Args)]
pub struct SimFlags {
    /// Plan and simulate only, on the synthetic cluster `--sim-cluster`: the data-parallel
    /// planners (replica-setter, infra-aware, sync-backup with --backup-workers, async-ps,
    /// infra-aware-async) and the per-op strategies of --strategies, no TensorFlow session, no
    /// workers.
    #[arg(long, conflicts_with = "scale_study")]
    pub simulate: bool,
    /// The scale study by simulation: data-parallel planners over --study-workers, per-op
    /// strategies over --study-ops (on 64 devices) and over --study-workers devices (10k ops);
    /// --json writes one row per (planner, size), --svg the cost growth on log axes.
    #[arg(long)]
    pub scale_study: bool,
    /// Synthetic cluster of --simulate (and the distributions and links of --scale-study).
    #[arg(
        long,
        value_name = "SPEC",
        default_value = "synthetic:workers=1000:ps=16:avail=beta(2,2):cap=lognormal(0,0.5):net=10gbit/50us"
    )]
    pub sim_cluster: String,
    /// Ops of the synthetic layered DAG the per-op strategies place (--simulate).
    #[arg(long, default_value_t = 10_000, value_parser = count::<1, { limits::MAX_OPS }>)]
    pub ops: usize,
    /// Global batch per worker of the data-parallel planners (--simulate, --scale-study).
    #[arg(long, default_value_t = 32, value_parser = count::<1, { limits::MAX_BATCH }>)]
    pub batch_per_worker: usize,
    /// Worker counts of --scale-study.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "4,16,64,256,1000",
        value_parser = count::<1, { limits::MAX_WORKERS }>
    )]
    pub study_workers: Vec<usize>,
    /// Op counts of --scale-study.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000,3000,10000,30000,100000",
        value_parser = count::<1, { limits::MAX_OPS }>
    )]
    pub study_ops: Vec<usize>,
}

impl SimFlags {
    /// Whether a simulated mode was asked for.
    pub fn active(&self) -> bool {
        self.simulate || self.scale_study
    }
}

/// Where asynchronous steps are mastered (`--async-masters`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum AsyncMasters {
    /// Each worker's own server.
    Own,
    /// The session target, for every worker.
    Shared,
}

/// A clap value parser for `--strategies`: a data-parallel or per-op strategy's name.
fn planner(s: &str) -> std::result::Result<Planner, String> {
    s.parse().map_err(|e: tf_iaware::Error| e.to_string())
}

impl Args {
    /// The flags as the experiment's options.
    fn options(&self) -> Result<BenchOptions> {
        let scenario = Scenario::parse(&self.scenario)?;
        let exe = std::env::current_exe().context("locating the tf-iaware binary")?;
        let mut o = BenchOptions::new(scenario, exe);
        o.model = match &self.graph {
            None => Model::Zoo(self.model.clone()),
            Some(path) => Model::Graph {
                path: path.clone(),
                meta: self.meta.clone(),
            },
        };
        o.strategies = self.strategies.clone();
        o.steps = self.steps;
        o.warmup = self.warmup;
        o.repeats = self.repeats;
        o.batch = self.batch;
        o.samples = self.samples;
        o.recalibrate = self.recalibrate;
        o.data = Data::parse(&self.data);
        o.target_accuracy = self.target_accuracy;
        o.eval_every_s = self.eval_every;
        o.max_train_s = self.max_train_s;
        o.held_out = self.held_out;
        o.held_out_data = self.held_out_data.clone();
        o.backup_workers = self.backup_workers;
        o.resize_every = self.resize_every;
        o.async_masters = match self.async_masters {
            AsyncMasters::Own => tf_iaware_bench::AsyncMasters::Own,
            AsyncMasters::Shared => tf_iaware_bench::AsyncMasters::Shared,
        };
        Ok(o)
    }
}

pub fn run(args: &Args) -> Result<()> {
    // Before anything runs: an unwritable report path should not cost a whole bench.
    crate::common::check_outputs([("--json", args.json.as_ref()), ("--svg", args.svg.as_ref())])?;
    // A folder nothing would be written to is a mistake said now, not after the run.
    if let (Some(dir), true) = (
        &args.tsv,
        args.sim.active() || Data::parse(&args.data) == Data::Synthetic,
    ) {
        anyhow::bail!(
            "--tsv {}: only a bench that trains to accuracy (--data digits or a data file) \
             writes evaluations; this one would write none",
            dir.display()
        );
    }
    if args.sim.active() {
        return simulated(args);
    }
    let options = args.options()?;
    // The numbers first, as the experiment would: before the TSV folder is made.
    options.check()?;
    if let Some(dir) = &args.tsv {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--tsv: creating {}", dir.display()))?;
        tf_iaware::data::io::check_output_path(&dir.join("run.tsv"), "--tsv")?;
    }
    let mut shown = Shown::default();
    let report = tf_iaware_bench::run(&options, &mut |e| {
        shown
            .show(e, args)
            .map_err(|e| std::io::Error::other(format!("{e:#}")))
    });
    drop(shown);
    let report = report?;
    match &report {
        BenchReport::Throughput(r) => {
            if let Some(a) = &r.adaptation {
                print_drift(a)?;
            }
            if let Some(path) = &args.json {
                let json = serde_json::to_string_pretty(&report)? + "\n";
                crate::common::write_file(path, &json)?;
            }
            if let Some(path) = &args.svg {
                crate::common::write_file(path, &report.svg())?;
            }
            eprintln!("bench finished in {:.0} s", r.wall_s);
        }
        BenchReport::Accuracy(r) => {
            print_summaries(r)?;
            if let Some(path) = &args.svg {
                crate::common::write_file(path, &report.svg())?;
            }
            if let Some(path) = &args.json {
                crate::common::write_file(path, &serde_json::to_string_pretty(&report)?)?;
            }
        }
    }
    Ok(())
}

/// What the CLI shows of a running bench: a spinner, a progress bar.
#[derive(Default)]
struct Shown {
    spinner: Option<ProgressBar>,
    bar: Option<ProgressBar>,
}

impl Drop for Shown {
    fn drop(&mut self) {
        for b in [self.spinner.take(), self.bar.take()].into_iter().flatten() {
            b.finish_and_clear();
        }
    }
}

impl Shown {
    fn show(&mut self, e: Event<'_>, args: &Args) -> Result<()> {
        match e {
            Event::Note(line) => eprintln!("{line}"),
            Event::Busy(Some(what)) => self.spinner = Some(spinner(what)),
            Event::Busy(None) => {
                if let Some(s) = self.spinner.take() {
                    s.finish_and_clear();
                }
            }
            Event::Steps { done, total, what } => {
                let bar = self.bar.get_or_insert_with(|| progress(total));
                bar.set_message(what.to_string());
                bar.set_position(done);
            }
            Event::Round(stats) => {
                let line = round_line(stats);
                match &self.bar {
                    Some(bar) => bar.suspend(|| outln!("{line}"))?,
                    None => outln!("{line}")?,
                }
            }
            Event::Measured {
                results,
                lower_bound_ms,
                sync_lower_bound_ms,
            } => {
                if let Some(bar) = self.bar.take() {
                    bar.finish_and_clear();
                }
                print_table(results, args, lower_bound_ms, sync_lower_bound_ms)?;
            }
            Event::Trained { round, report } => {
                outln!("{}", trained_line(round, report))?;
                if let Some(dir) = &args.tsv {
                    let path = dir.join(tf_iaware_bench::evaluations_tsv_name(report, round));
                    crate::common::write_file(
                        &path,
                        &tf_iaware_bench::evaluations_tsv(&report.evaluations),
                    )?;
                }
            }
            Event::StudyRow(r) => outln!("{}", study_line(r))?,
            _ => {}
        }
        Ok(())
    }
}

fn progress(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg:<28} [{bar:30}] {pos}/{len} steps, eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar
}

/// A spinner on stderr while a long call runs; hidden when stderr is not a terminal.
fn spinner(msg: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(msg.to_string());
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

fn round_line(s: &RoundStats) -> String {
    format!(
        "{:<16} {:>3}\timages/sec: {:.1} +/- {:.1} (jitter = {:.1})\t{:.3}",
        s.strategy.to_string(),
        s.timed_steps,
        s.images_per_sec,
        s.images_per_sec_std,
        s.jitter_percent(),
        s.last_loss
    )
}

fn print_table(
    results: &[StrategyResult],
    args: &Args,
    lower_bound: f64,
    sync_bound: f64,
) -> Result<()> {
    outln!()?;
    outln!(
        "{:<16} {:>10} {:>10} {:>14} {:>12} {:>9} {:>11} {:>7}",
        "strategy",
        "step ms",
        "images/s",
        "time to train",
        "vs stock",
        "÷ bound",
        "predicted",
        "error"
    )?;
    for r in results {
        let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:+.1} %", -v * 100.0));
        outln!(
            "{:<16} {:>10.1} {:>10.1} {:>12.0} s {:>12} {:>9.2} {:>9} {:>7}",
            r.strategy,
            r.step_ms.median,
            r.images_per_sec,
            r.time_to_train_s,
            pct(r.reduction_vs_stock),
            r.ratio_to_lower_bound,
            r.predicted_step_ms
                .map_or("-".into(), |p| format!("{p:.1} ms")),
            r.prediction_error
                .map_or("-".into(), |e| format!("{:.1} %", e * 100.0)),
        )?;
    }
    outln!(
        "lower bound, data-parallel plans: {sync_bound:.1} ms/step (the best synchronous split of global batch {} \
         over the calibrated workers, each used worker's fixed cost counted, shares not rounded, no synchronisation); \
         model-parallel: {lower_bound:.1} ms/step (the batch over the summed calibrated throughput of all workers, \
         or the cheapest fixed cost if larger); time to train = {} samples",
        args.batch, args.samples
    )?;
    Ok(())
}

fn print_drift(a: &AdaptationReport) -> Result<()> {
    outln!()?;
    outln!(
        "drift at step {}: fresh plan {:.1} ms/step",
        a.drift_step,
        a.fresh_plan_ms
    )?;
    outln!(
        "  without adaptation: {:.1} ms/step after the change ({:.2}× the fresh plan)",
        a.static_after_ms(),
        a.static_slowdown
    )?;
    for r in &a.replan_records {
        outln!(
            "  re-plan before step {} ({:?}, first seen at step {}, detected in {:.0} ms): shares {:?}",
            r.before_step,
            r.trigger,
            r.first_signal_step,
            r.detection_latency_ms,
            r.shares.iter().map(|s| s.1).collect::<Vec<_>>()
        )?;
    }
    match a.recovered_after_steps {
        Some(n) => outln!("  with adaptation: re-planned before step(s) {:?}; within 15 % of the fresh plan after {n} step(s)", a.replans)?,
        None => outln!("  with adaptation: re-planned before step(s) {:?}; never within 15 % of the fresh plan", a.replans)?,
    }
    if let Some(c) = a.metrics_cost_share {
        outln!(
            "  metrics reading: {:.2} % of the adaptive run's wall time",
            c * 100.0
        )?;
    }
    Ok(())
}

fn trained_line(round: usize, r: &TrainingReport) -> String {
    format!(
        "round {} {:<18} {:>9}  {:>6} updates  {:>7.1} images/sec  accuracy {:.3}  (eval {:.1} s)",
        round,
        r.strategy.to_string(),
        r.time_to_target_s
            .map_or("not reached".to_string(), |t| format!("{t:.1} s")),
        r.updates,
        r.images_per_sec,
        r.final_metric.unwrap_or(0.0),
        r.eval_seconds
    )
}

fn print_summaries(r: &AccuracyReport) -> Result<()> {
    outln!(
        "\n{:<18} {:>8} {:>10} {:>9} {:>10} {:>9} {:>9} {:>9}",
        "contender",
        "reached",
        "time (s)",
        "updates",
        "images/s",
        "accuracy",
        "vs stock",
        "vs best"
    )?;
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:+.0} %", -v * 100.0));
    for s in &r.summaries {
        outln!(
            "{:<18} {:>8} {:>10} {:>9.0} {:>10.1} {:>9.3} {:>9} {:>9}",
            s.contender,
            format!("{}/{}", s.reached, s.rounds),
            s.median_time_to_accuracy_s
                .map_or("-".to_string(), |t| format!("{t:.1}")),
            s.median_updates,
            s.median_images_per_sec,
            s.median_final_accuracy,
            pct(s.reduction_vs_replica_setter),
            pct(s.reduction_vs_best_stock),
        )?;
    }
    let stock: Vec<String> = r.stock.iter().map(|s| s.to_string()).collect();
    eprintln!(
        "(time: median training seconds to {:.0} % held-out accuracy, evaluations excluded; \
         vs stock/best: change in time against replica-setter and the best of {}; whole bench {:.0} s)",
        r.target_accuracy * 100.0,
        stock.join(", "),
        r.wall_s
    );
    Ok(())
}

/// `--simulate` and `--scale-study`.
fn simulated(args: &Args) -> Result<()> {
    let flags = &args.sim;
    let cluster = tf_iaware_bench::synthetic_cluster(&flags.sim_cluster)?;
    if flags.batch_per_worker == 0 || flags.ops == 0 {
        bail!("--batch-per-worker and --ops must be at least 1");
    }
    if args.model != "resnet20" || args.graph.is_some() {
        bail!("the simulated modes model ResNet-20 only (leave --model and --graph out)");
    }
    let options = SimOptions {
        cluster,
        strategies: args.strategies.clone(),
        ops: flags.ops,
        batch_per_worker: flags.batch_per_worker,
        repeats: args.repeats,
        backups: args.backup_workers,
    };
    if flags.scale_study {
        outln!("{}", study_header())?;
        let study = tf_iaware_bench::scale_study(
            &options,
            &flags.study_workers,
            &flags.study_ops,
            &mut |e| match e {
                Event::StudyRow(r) => {
                    outln!("{}", study_line(r)).map_err(|e| std::io::Error::other(format!("{e:#}")))
                }
                _ => Ok(()),
            },
        )?;
        outln!()?;
        for g in &study.growth {
            outln!(
                "{:<16} plan time ∝ {}^{:.2} ({} points)",
                g.planner,
                g.sweep,
                g.exponent,
                g.points
            )?;
        }
        if let Some(path) = &args.json {
            crate::common::write_file(path, &(serde_json::to_string_pretty(&study)? + "\n"))?;
        }
        if let Some(path) = &args.svg {
            crate::common::write_file(
                path,
                &tf_iaware_bench::svg::growth_chart(&study.rows, &study.growth),
            )?;
        }
        return Ok(());
    }
    let report = tf_iaware_bench::simulate(&options)?;
    eprintln!(
        "{}: {} workers, {} ps; global batch {}; per-op strategies on a {}-op layered DAG",
        report.cluster, report.workers, report.ps, report.global_batch, report.ops
    );
    outln!("{}", study_header())?;
    for r in &report.rows {
        outln!("{}", study_line(r))?;
    }
    if let Some(path) = &args.json {
        crate::common::write_file(path, &(serde_json::to_string_pretty(&report)? + "\n"))?;
    }
    Ok(())
}

/// Column heads; `step ms` of an asynchronous plan (mode `async`) is the time the cluster takes
/// to process one global batch of samples, and `images/s` the samples whose gradients are
/// applied per second (throughput, not time to accuracy: asynchronous gradients are stale).
fn study_header() -> String {
    format!(
        "{:<18} {:<8} {:<6} {:>7} {:>8} {:>10} {:>12} {:>12} {:>7} {:>10} {:>13}",
        "planner",
        "sweep",
        "mode",
        "workers",
        "ops",
        "plan ms",
        "step ms",
        "bound ms",
        "ratio",
        "images/s",
        "workers used"
    )
}

fn study_line(r: &StudyRow) -> String {
    format!(
        "{:<18} {:<8} {:<6} {:>7} {:>8} {:>10.2} {:>12.2} {:>12.2} {:>7.3} {:>10} {:>6} ({:>3.0} %)",
        r.planner,
        r.sweep,
        r.mode.as_deref().unwrap_or("-"),
        r.workers,
        r.ops.map_or("-".to_string(), |o| o.to_string()),
        r.plan_ms,
        r.predicted_step_ms,
        r.lower_bound_ms,
        r.ratio_to_lower_bound,
        r.images_per_sec
            .map_or("-".to_string(), |v| format!("{v:.0}")),
        r.workers_used,
        r.share_used * 100.0
    )
}
