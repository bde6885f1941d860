//! `tf-iaware bench`: strategies side by side on an emulated heterogeneous cluster — TensorFlow's
//! stock data-parallel recipe against infra-aware — interleaved so machine drift hits all alike;
//! for scenarios with drift, step time over steps with and without adaptation.

mod accuracy;
mod adapt;
mod bounds;
mod model_parallel;
mod simulated;
mod svg;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tf_iaware::limits;
use tf_iaware::parallel::{
    self, DataParallelPlan, InfraAwareOptions, ReplicaMemory, VarInfo, WorkerCapacity,
};
use tf_iaware::runtime::calibrate::{self, CalibrateOptions};
use tf_iaware::runtime::replicated::Workload;
use tf_iaware::runtime::{data_parallel, StepTimes, Trainer};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

use crate::common::count;

/// Per-replica synchronisation cost assumed by predictions, ms.
const OVERHEAD_MS: f64 = 5.0;

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
        value_parser = crate::common::strategy_name
    )]
    strategies: Vec<String>,
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
    held_out_data: Option<std::path::PathBuf>,
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
    sim: simulated::SimFlags,
}

/// One strategy's measured run.
#[derive(Serialize)]
pub struct StrategyResult {
    pub strategy: String,
    /// The data-parallel plan (data-parallel strategies).
    pub plan: Option<DataParallelPlan>,
    /// Ops per worker (model-parallel strategies).
    pub ops_per_device: Option<Vec<(String, usize)>>,
    pub step_ms: StepTimes,
    pub step_ms_all: Vec<f64>,
    pub images_per_sec: f64,
    pub images_per_sec_std: f64,
    /// Seconds to train `samples` samples at the median step time.
    pub time_to_train_s: f64,
    /// 1 − step / stock step (positive: faster than stock).
    pub reduction_vs_stock: Option<f64>,
    /// The bound this strategy is measured against, ms: the synchronous data-parallel bound
    /// for a data-parallel plan, the plain bound for a model-parallel placement.
    pub lower_bound_ms: f64,
    pub ratio_to_lower_bound: f64,
    pub predicted_step_ms: Option<f64>,
    /// |predicted − measured| / measured.
    pub prediction_error: Option<f64>,
    pub loss_first: f32,
    pub loss_last: f32,
}

#[derive(Serialize)]
struct BenchReport {
    scenario: Scenario,
    model: String,
    global_batch: usize,
    steps: usize,
    warmup: usize,
    repeats: usize,
    samples: usize,
    calibration: Vec<WorkerCapacity>,
    /// Whether the worker calibration came from the cache.
    calibration_cache_hit: bool,
    /// Seconds spent calibrating (or reading the cache).
    calibration_seconds: f64,
    /// Bound of any plan: the batch over the summed throughput, or the cheapest fixed cost.
    lower_bound_ms: f64,
    /// Bound of a synchronous data-parallel plan: each used worker's fixed cost counted
    /// ([`parallel::sync_lower_bound_ms`]).
    sync_lower_bound_ms: f64,
    results: Vec<StrategyResult>,
    adaptation: Option<adapt::AdaptationReport>,
    quota_warning: Option<String>,
    wall_s: f64,
}

/// A strategy ready to step.
struct Contender {
    name: String,
    plan: Option<DataParallelPlan>,
    ops_per_device: Option<Vec<(String, usize)>>,
    predicted_ms: Option<f64>,
    trainer: Trainer,
    times: Vec<f64>,
    losses: Vec<f32>,
}

/// The data-parallel plan of strategy `name`, or `None` for a per-op strategy.
/// What the infra-aware plan reads: the cluster's live figures and a replica's memory.
struct Live<'a> {
    cluster: &'a tf_iaware::cluster::Cluster,
    memory: Option<&'a ReplicaMemory>,
}

fn plan_for(
    name: &str,
    workers: &[String],
    ps: &[String],
    vars: &[VarInfo],
    batch: usize,
    calibration: &[WorkerCapacity],
    live: &Live,
) -> Result<Option<DataParallelPlan>> {
    Ok(match name {
        "replica-setter" => Some(parallel::replica_setter(workers, ps, vars, batch)?),
        "infra-aware" => {
            let options = InfraAwareOptions {
                per_replica_overhead_ms: OVERHEAD_MS,
                ..Default::default()
            };
            // Calibrated figures at each worker's availability now, shares capped by memory.
            Some(parallel::plan_live(
                calibration,
                live.cluster,
                ps,
                vars,
                batch,
                live.memory,
                &options,
            )?)
        }
        other => {
            check_strategy(other)?;
            None
        }
    })
}

/// Whether `name` is a synchronous data-parallel strategy (the images/s bench times steps).
fn is_data_parallel(name: &str) -> bool {
    name.parse::<tf_iaware::parallel::DataParallelStrategy>()
        .is_ok_and(|s| s.updates() == tf_iaware::parallel::Updates::Sync)
}

/// `Ok` for a strategy `bench` can run: data-parallel `replica-setter` or `infra-aware`, or a
/// per-op strategy other than `tf-default`.
fn check_strategy(name: &str) -> Result<()> {
    match name {
        "replica-setter" | "infra-aware" => Ok(()),
        "async-ps" | "sync-backup" | "infra-aware-async" => bail!(
            "`{name}` trains with real data and is measured by time to accuracy: \
             pass --data digits (its report has images/s too)"
        ),
        "tf-default" => bail!(
            "`tf-default` is not a benchmark strategy: replica-setter is stock TensorFlow's \
             data-parallel recipe"
        ),
        other => {
            // Unknown names fail here with the list of strategies.
            tf_iaware::placer::by_name(other)?;
            Ok(())
        }
    }
}

fn progress(len: u64, msg: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg:<28} [{bar:30}] {pos}/{len} steps, eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(msg.to_string());
    bar
}

/// A spinner on stderr while a long call runs; hidden when stderr is not a terminal, cleared
/// when dropped (also on an early return), so the lines printed after it stand alone.
pub(crate) struct Spinner(ProgressBar);

impl Spinner {
    pub(crate) fn new(msg: String) -> Spinner {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message(msg);
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        Spinner(bar)
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// Mean and standard deviation.
fn mean_std(xs: &[f64]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Calibrates the workers (or reads the per-user cache) and returns the calibration and the
/// capacities at each worker's availability now.
fn calibrate(
    args: &Args,
    workload: &Workload,
    devices: &tf_iaware::cluster::Cluster,
    config: &tf_iaware::runtime::SessionConfig,
    workers: &[String],
    ps: &[String],
) -> Result<(calibrate::WorkerCalibration, Vec<WorkerCapacity>)> {
    let probe = (args.batch / workers.len()).clamp(3, 12);
    eprintln!(
        "calibrating {} workers with {probe}-sample steps of {}…",
        workers.len(),
        workload.name()
    );
    if args.recalibrate {
        calibrate::invalidate_workers(workload, probe, devices, workers, &ps[0])?;
    }
    let spinner = Spinner::new(format!("calibrating {}", workload.name()));
    let calibrated = calibrate::calibrate_workers_cached(
        workload,
        workers,
        &ps[0],
        devices,
        config,
        calibrate::WorkerProbe {
            batch: probe,
            min_seconds: 1.0,
        },
        &CalibrateOptions::default(),
    )?;
    drop(spinner);
    if calibrated.cache_hit {
        eprintln!(
            "calibration: cache hit ({}, {:.2} s): capabilities reused, rescaled to the live availability",
            calibrated.path.display(),
            calibrated.seconds
        );
    } else {
        eprintln!(
            "calibration: measured in {:.1} s{}",
            calibrated.seconds,
            calibrated
                .note
                .as_deref()
                .map_or(String::new(), |n| format!(" ({n})"))
        );
    }
    // At each worker's availability now (a cached calibration may have seen another).
    let calibration = parallel::live_capacities(&calibrated.capacity, devices, None);
    for c in &calibration {
        eprintln!(
            "  {:<45} {:>8.1} images/sec + {:.0} ms per step (availability {:.2})",
            c.device,
            c.samples_per_sec,
            c.fixed_ms,
            c.availability.unwrap_or(1.0)
        );
    }
    Ok((calibrated, calibration))
}

pub fn run(args: &Args) -> Result<()> {
    // Before anything runs: an unwritable report path should not cost a whole bench.
    crate::common::check_outputs([("--json", args.json.as_ref()), ("--svg", args.svg.as_ref())])?;
    if args.sim.active() {
        return simulated::run(args, &args.sim);
    }
    bounds::check(args)?;
    match args.data.as_str() {
        "synthetic" => {}
        _ => return accuracy::run(args),
    }
    if args.steps == 0 || args.repeats == 0 || args.strategies.is_empty() {
        bail!("--steps, --repeats and --strategies must be non-empty");
    }
    // Before anything starts: a typo should not cost a cluster and a calibration.
    for name in &args.strategies {
        check_strategy(name)?;
    }
    if args.batch == 0 {
        bail!("--batch must be at least 1");
    }
    let workload = match &args.graph {
        None => {
            tf_iaware::models::zoo::input_shape(&args.model)?;
            Workload::from(&args.model)
        }
        Some(path) => {
            let analyzed = crate::common::load_graph(path)?;
            let sidecar = crate::common::load_sidecar(path, args.meta.as_ref(), &analyzed)?;
            let fixed = sidecar.batch_size().filter(|&b| b != args.batch);
            if let (Some(b), Some(s)) =
                (fixed, args.strategies.iter().find(|s| !is_data_parallel(s)))
            {
                bail!(
                    "{} has a fixed batch of {b}: model-parallel `{s}` runs it at that batch, \
                     not --batch {}; pass --batch {b} or data-parallel strategies only",
                    path.display(),
                    args.batch
                );
            }
            Workload::graph(&path.display().to_string(), analyzed, sidecar)?
        }
    };
    let started = Instant::now();
    let scenario = Scenario::parse(&args.scenario)?;
    let exe = std::env::current_exe().context("locating the tf-iaware binary")?;
    eprintln!("scenario {}: {}", scenario.name, scenario.description);
    let spinner = Spinner::new(format!("starting the emulated cluster `{}`", scenario.name));
    let mut cluster = EmulatedCluster::start(&scenario, &exe)?;
    let (devices, mut config) = cluster.connect()?;
    drop(spinner);
    config.isolate_state = true;
    let (workers, ps) = data_parallel::worker_and_ps_devices(&devices)?;
    let vars = workload.variables()?;
    let (calibrated, calibration) = calibrate(args, &workload, &devices, &config, &workers, &ps)?;
    let lower_bound = parallel::lower_bound_ms(args.batch, &calibration);
    let sync_bound = parallel::sync_lower_bound_ms(args.batch, &calibration);

    let memory = workload
        .replica_memory()
        .map_err(|e| log::warn!("replica memory of {} unknown: {e}", workload.name()))
        .ok();
    let live = Live {
        cluster: &devices,
        memory: memory.as_ref(),
    };
    let mut contenders = Vec::new();
    for name in &args.strategies {
        let spinner = Spinner::new(format!("preparing {name}"));
        let line;
        let contender = match plan_for(name, &workers, &ps, &vars, args.batch, &calibration, &live)?
        {
            Some(plan) => {
                let shares: Vec<String> =
                    plan.replicas.iter().map(|r| r.batch.to_string()).collect();
                line = format!(
                    "{name}: {} replicas, shares [{}]",
                    plan.replicas.len(),
                    shares.join(", ")
                );
                let (trainer, _, _) =
                    data_parallel::prepare(&workload, &plan, &devices, &config, 1)?;
                Contender {
                    name: name.clone(),
                    predicted_ms: data_parallel::predict_step_ms(&plan, &calibration, OVERHEAD_MS),
                    plan: Some(plan),
                    ops_per_device: None,
                    trainer,
                    times: Vec::new(),
                    losses: Vec::new(),
                }
            }
            None => {
                let p = model_parallel::prepare(
                    name,
                    &workload,
                    args.batch,
                    &devices,
                    &workers,
                    &config,
                    &calibration,
                )?;
                let ops: Vec<String> = p
                    .ops_per_device
                    .iter()
                    .map(|(d, n)| format!("{d}: {n}"))
                    .collect();
                line = format!(
                    "{name}: model-parallel, ops per worker [{}]",
                    ops.join(", ")
                );
                Contender {
                    name: name.clone(),
                    plan: None,
                    ops_per_device: Some(p.ops_per_device),
                    predicted_ms: Some(p.predicted_ms),
                    trainer: p.trainer,
                    times: Vec::new(),
                    losses: Vec::new(),
                }
            }
        };
        contender.trainer.init()?;
        drop(spinner);
        eprintln!("{line}");
        contenders.push(contender);
    }
    let per_round = args.steps.div_ceil(args.repeats);
    let total = (contenders.len() * (args.warmup + per_round * args.repeats)) as u64;
    let bar = progress(total, "warm-up");
    for c in &mut contenders {
        for i in 0..args.warmup {
            let (loss, _, _) = c.trainer.step(i, false)?;
            c.losses.push(loss);
            bar.inc(1);
        }
    }
    for round in 0..args.repeats {
        for c in &mut contenders {
            bar.set_message(format!("round {} {}", round + 1, c.name));
            for _ in 0..per_round {
                let (loss, ms, _) = c.trainer.step(c.losses.len(), false)?;
                c.losses.push(loss);
                c.times.push(ms);
                bar.inc(1);
            }
            let ips: Vec<f64> = c
                .times
                .iter()
                .map(|ms| args.batch as f64 / (ms / 1e3))
                .collect();
            let (mean, std) = mean_std(&ips);
            let line = format!(
                "{:<16} {:>3}\timages/sec: {:.1} +/- {:.1} (jitter = {:.1})\t{:.3}",
                c.name,
                c.times.len(),
                mean,
                std,
                std / mean.max(1e-9) * 100.0,
                c.losses.last().copied().unwrap_or(f32::NAN)
            );
            bar.suspend(|| outln!("{line}"))?;
        }
    }
    bar.finish_and_clear();

    let stock_ms = contenders
        .iter()
        .find(|c| c.name == "replica-setter")
        .and_then(|c| StepTimes::from_samples(&c.times))
        .map(|t| t.median);
    let mut results = Vec::new();
    for c in contenders {
        let step = StepTimes::from_samples(&c.times).context("no timed steps")?;
        let ips: Vec<f64> = c
            .times
            .iter()
            .map(|ms| args.batch as f64 / (ms / 1e3))
            .collect();
        let (_, std) = mean_std(&ips);
        let predicted = c.predicted_ms;
        // A data-parallel plan against the best synchronous split (each used worker's fixed
        // cost counted); a model-parallel placement against the plain bound.
        let bound = if c.plan.is_some() {
            sync_bound
        } else {
            lower_bound
        };
        results.push(StrategyResult {
            strategy: c.name.clone(),
            images_per_sec: args.batch as f64 / (step.median / 1e3),
            images_per_sec_std: std,
            time_to_train_s: args.samples as f64 / args.batch as f64 * step.median / 1e3,
            reduction_vs_stock: stock_ms.map(|s| 1.0 - step.median / s),
            lower_bound_ms: bound,
            ratio_to_lower_bound: step.median / bound,
            prediction_error: predicted.map(|p| (p - step.median).abs() / step.median),
            predicted_step_ms: predicted,
            loss_first: c.losses.first().copied().unwrap_or(f32::NAN),
            loss_last: c.losses.last().copied().unwrap_or(f32::NAN),
            step_ms_all: c.times,
            plan: c.plan,
            ops_per_device: c.ops_per_device,
            step_ms: step,
        });
    }
    print_table(&results, args, lower_bound, sync_bound)?;

    let adaptation = if scenario.drift.is_empty() {
        None
    } else {
        let setup = adapt::Setup {
            workload: &workload,
            workers: &workers,
            ps: &ps,
            vars: &vars,
            batch: args.batch,
            memory: memory.as_ref(),
        };
        Some(adapt::run(&mut cluster, &setup, &config, &scenario)?)
    };
    let report = BenchReport {
        quota_warning: cluster.quota_warning.clone(),
        scenario,
        model: workload.name().to_string(),
        global_batch: args.batch,
        steps: args.steps,
        warmup: args.warmup,
        repeats: args.repeats,
        samples: args.samples,
        calibration,
        calibration_cache_hit: calibrated.cache_hit,
        calibration_seconds: calibrated.seconds,
        lower_bound_ms: lower_bound,
        sync_lower_bound_ms: sync_bound,
        results,
        adaptation,
        wall_s: started.elapsed().as_secs_f64(),
    };
    drop(cluster);
    if let Some(path) = &args.json {
        crate::common::write_file(path, &(serde_json::to_string_pretty(&report)? + "\n"))?;
    }
    if let Some(path) = &args.svg {
        let chart = match &report.adaptation {
            Some(a) => svg::drift_chart(a, &report.scenario.name),
            None => svg::strategy_chart(&report.results, &report.scenario.name, &report.model),
        };
        crate::common::write_file(path, &chart)?;
    }
    eprintln!("bench finished in {:.0} s", report.wall_s);
    Ok(())
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

/// Where asynchronous steps are mastered (`--async-masters`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum AsyncMasters {
    /// Each worker's own server.
    Own,
    /// The session target, for every worker.
    Shared,
}
