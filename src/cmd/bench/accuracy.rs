//! `bench --data digits|PATH`: every data-parallel contender trains the real digits (or the
//! user's data file) to a target held-out accuracy on one emulated cluster, taking turns round
//! by round; time to accuracy, steps, images/s and final accuracy per contender, a
//! DAWNBench-style TSV per run and an SVG of accuracy against training time. The training itself
//! is the library's trainer (`tf_iaware::runtime::trainer`).

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use tf_iaware::data::{digits_split, input_specs};
use tf_iaware::graph::analyze::analyze_graph;
use tf_iaware::parallel::DataParallelStrategy;
use tf_iaware::runtime::data_parallel;
use tf_iaware::runtime::trainer::{
    check_backups, contender, train, Job, Planning, TrainingOptions, TrainingReport,
};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

use super::{calibrate, svg, Args, OVERHEAD_MS};

/// The strategies `bench` runs by default, replaced by every contender for `--data digits`.
const DEFAULT_STRATEGIES: &[&str] = &["replica-setter", "infra-aware", "heft"];

/// One contender over all rounds.
#[derive(Serialize)]
struct Summary {
    contender: String,
    /// Rounds that reached the target.
    reached: usize,
    rounds: usize,
    /// Median time to accuracy over the rounds that reached it, s.
    median_time_to_accuracy_s: Option<f64>,
    median_updates: f64,
    median_samples: f64,
    median_images_per_sec: f64,
    median_final_accuracy: f64,
    /// 1 − time / replica-setter's time (positive: faster).
    reduction_vs_replica_setter: Option<f64>,
    /// 1 − time / the best stock contender's time.
    reduction_vs_best_stock: Option<f64>,
}

#[derive(Serialize)]
struct AccuracyBench {
    scenario: Scenario,
    model: String,
    data: String,
    data_source: &'static str,
    data_licence: &'static str,
    train_images: usize,
    held_out_images: usize,
    target_accuracy: f64,
    global_batch: usize,
    backup_workers: usize,
    summaries: Vec<Summary>,
    runs: Vec<TrainingReport>,
}

fn median(mut xs: Vec<f64>) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    })
}

/// The job `bench` trains: a zoo model or `--graph`, on the digits or `--data PATH`, split into
/// training and held-out rows.
fn job(args: &Args) -> Result<Job> {
    let (name, analyzed, sidecar) = match &args.graph {
        None => {
            let m = tf_iaware::models::zoo::build(&args.model, 64, 1)?;
            (args.model.clone(), analyze_graph(m.net.graph())?, m.sidecar)
        }
        Some(path) => {
            let analyzed = crate::common::load_graph(path)?;
            let sidecar = crate::common::load_sidecar(path, args.meta.as_ref(), &analyzed)?;
            (path.display().to_string(), analyzed, sidecar)
        }
    };
    let specs = input_specs(&analyzed.op_graph, &sidecar)?;
    if sidecar.logits.is_none() {
        bail!(
            "{name}: the sidecar has no `logits` (the op whose output 0 is [batch, classes]): \
             held-out accuracy needs it"
        );
    }
    let (train_rows, held_out) = if args.data == "digits" {
        if let Some(p) = &args.held_out_data {
            bail!(
                "--held-out-data {}: the built-in digits hold their own rows out (--held-out \
                 FRACTION)",
                p.display()
            );
        }
        digits_split(&specs, args.held_out, 1)?
    } else {
        let path = Path::new(&args.data);
        if !path.exists() {
            bail!(
                "--data {}: unknown data set (built in: {}) and no such file",
                args.data,
                tf_iaware::data::DATA_SETS.join(", ")
            );
        }
        let data = tf_iaware::data::open(path, &specs)?;
        match &args.held_out_data {
            Some(held_out) => (data, tf_iaware::data::open(held_out, &specs)?),
            None => tf_iaware::data::split(&data, args.held_out, 1)?,
        }
    };
    Ok(Job::new(&name, analyzed, sidecar, Box::new(train_rows))?
        .with_held_out(Box::new(held_out))?)
}

pub fn run(args: &Args) -> Result<()> {
    // Everything that can be wrong is checked before a cluster starts.
    let defaults: Vec<String> = DEFAULT_STRATEGIES.iter().map(|s| s.to_string()).collect();
    let strategies: Vec<DataParallelStrategy> = if args.strategies == defaults {
        DataParallelStrategy::all()
            .map(|s| match s {
                DataParallelStrategy::SyncBackup { .. } => DataParallelStrategy::SyncBackup {
                    backups: args.backup_workers,
                },
                s => s,
            })
            .collect()
    } else {
        args.strategies
            .iter()
            .map(|n| {
                n.parse::<DataParallelStrategy>().with_context(|| {
                    format!(
                        "--data {}: `{n}` is not a data-parallel contender",
                        args.data
                    )
                })
            })
            .collect::<Result<_>>()?
    };
    let names: Vec<String> = strategies.iter().map(|s| s.to_string()).collect();
    if args.repeats == 0 || args.batch == 0 {
        bail!("--repeats and --batch must be at least 1");
    }
    let options = TrainingOptions {
        steps: None,
        epochs: None,
        max_seconds: Some(args.max_train_s),
        target: Some(args.target_accuracy),
        eval_every_s: args.eval_every,
        seed: 1,
        ..TrainingOptions::default()
    };
    options.validate()?;
    if !(args.target_accuracy > 0.0 && args.target_accuracy <= 1.0) {
        bail!("target accuracy {} is not in (0, 1]", args.target_accuracy);
    }
    let scenario = Scenario::parse(&args.scenario)?;
    for s in &strategies {
        if let tf_iaware::parallel::Updates::Backup { backups } = s.updates() {
            check_backups(backups, scenario.workers.len())?;
        }
    }
    let job = job(args)?;
    for s in &strategies {
        job.check_updates(s.updates())
            .with_context(|| format!("{s} cannot train {}", job.name()))?;
    }
    if let Some(dir) = &args.tsv {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        tf_iaware::io::check_output_path(&dir.join("run.tsv"), "--tsv")?;
    }

    let started = Instant::now();
    let exe = std::env::current_exe().context("locating the tf-iaware binary")?;
    eprintln!("scenario {}: {}", scenario.name, scenario.description);
    let cluster = EmulatedCluster::start(&scenario, &exe)?;
    let (devices, mut config) = cluster.connect()?;
    config.isolate_state = true;
    // Asynchronous contenders step through each worker's own server, as TF2 does, unless told.
    let options = TrainingOptions {
        own_masters: (args.async_masters == super::AsyncMasters::Own)
            .then(|| cluster.tf_config().clone()),
        ..options
    };
    let (workers, ps) = data_parallel::worker_and_ps_devices(&devices)?;
    let workload = job.workload();
    let vars = workload.variables()?;
    let (_, calibration) = calibrate(args, &workload, &devices, &config, &workers, &ps)?;
    let memory = workload.replica_memory().ok();
    let planning = Planning {
        workers: &workers,
        ps: &ps,
        vars: &vars,
        global_batch: args.batch,
        calibration: &calibration,
        cluster: &devices,
        memory: memory.as_ref(),
        per_replica_overhead_ms: OVERHEAD_MS,
        resize_every: args.resize_every,
        metrics: None,
        tasks: None,
    };
    let contenders = strategies
        .iter()
        .map(|&s| contender(s, &planning))
        .collect::<tf_iaware::Result<Vec<_>>>()?;
    for c in &contenders {
        let shares: Vec<String> = c
            .plan
            .replicas
            .iter()
            .map(|r| r.batch.to_string())
            .collect();
        eprintln!(
            "{}: {:?}, shares [{}]",
            c.strategy,
            c.updates(),
            shares.join(", ")
        );
    }
    let held_out_rows = job.metric().map_or(0, |_| held_out_len(&job));
    eprintln!(
        "{}: {} training and {} held-out rows for {}, target {:.0} % held-out accuracy",
        args.data,
        job.train_data().len(),
        held_out_rows,
        job.name(),
        args.target_accuracy * 100.0
    );

    let mut runs: Vec<TrainingReport> = Vec::new();
    for round in 0..args.repeats {
        // Interleaved: each round starts with the next contender.
        for i in 0..contenders.len() {
            let c = &contenders[(i + round) % contenders.len()];
            let r = train(c, &job, &devices, &config, &options)
                .with_context(|| format!("{} (round {})", c.strategy, round + 1))?;
            outln!(
                "round {} {:<18} {:>9}  {:>6} updates  {:>7.1} images/sec  accuracy {:.3}  (eval {:.1} s)",
                round + 1,
                r.strategy.to_string(),
                r.time_to_target_s
                    .map_or("not reached".to_string(), |t| format!("{t:.1} s")),
                r.updates,
                r.images_per_sec,
                r.final_metric.unwrap_or(0.0),
                r.eval_seconds
            )?;
            if let Some(dir) = &args.tsv {
                let mut tsv = String::from("epoch\tseconds\taccuracy\n");
                for p in &r.evaluations {
                    tsv += &format!("{:.3}\t{:.2}\t{:.4}\n", p.epoch, p.seconds, p.metric);
                }
                let path = dir.join(format!("{}-round{}.tsv", r.strategy, round + 1));
                crate::common::write_file(&path, &tsv)?;
            }
            runs.push(r);
        }
    }
    drop(cluster);

    let time_of = |name: &str| {
        median(
            runs.iter()
                .filter(|r| r.strategy.to_string() == name)
                .filter_map(|r| r.time_to_target_s)
                .collect(),
        )
    };
    let stock_time = time_of("replica-setter");
    let stock: Vec<String> = strategies
        .iter()
        .filter(|s| s.is_stock())
        .map(|s| s.to_string())
        .collect();
    let best_stock = stock
        .iter()
        .filter_map(|s| time_of(s))
        .min_by(f64::total_cmp);
    let summaries: Vec<Summary> = names
        .iter()
        .map(|name| {
            let mine: Vec<&TrainingReport> = runs
                .iter()
                .filter(|r| &r.strategy.to_string() == name)
                .collect();
            let med = |f: fn(&TrainingReport) -> f64| {
                median(mine.iter().map(|r| f(r)).collect()).unwrap_or(0.0)
            };
            let time = time_of(name);
            Summary {
                contender: name.clone(),
                reached: mine.iter().filter(|r| r.reached).count(),
                rounds: mine.len(),
                median_time_to_accuracy_s: time,
                median_updates: med(|r| r.updates as f64),
                median_samples: med(|r| r.samples as f64),
                median_images_per_sec: med(|r| r.images_per_sec),
                median_final_accuracy: med(|r| r.final_metric.unwrap_or(0.0)),
                reduction_vs_replica_setter: time.zip(stock_time).map(|(t, s)| 1.0 - t / s),
                reduction_vs_best_stock: time.zip(best_stock).map(|(t, s)| 1.0 - t / s),
            }
        })
        .collect();
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
    for s in &summaries {
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
    eprintln!(
        "(time: median training seconds to {:.0} % held-out accuracy, evaluations excluded; \
         vs stock/best: change in time against replica-setter and the best of {}; whole bench {:.0} s)",
        args.target_accuracy * 100.0,
        stock.join(", "),
        started.elapsed().as_secs_f64()
    );
    if let Some(path) = &args.svg {
        let first: Vec<&TrainingReport> = names
            .iter()
            .filter_map(|n| runs.iter().find(|r| &r.strategy.to_string() == n))
            .collect();
        crate::common::write_file(
            path,
            &svg::accuracy_chart(&first, &scenario.name, job.name(), args.target_accuracy),
        )?;
    }
    if let Some(path) = &args.json {
        let report = AccuracyBench {
            scenario,
            model: job.name().to_string(),
            data: args.data.clone(),
            data_source: tf_iaware::data::DIGITS_SOURCE,
            data_licence: tf_iaware::data::DIGITS_LICENCE,
            train_images: job.train_data().len(),
            held_out_images: held_out_rows,
            target_accuracy: args.target_accuracy,
            global_batch: args.batch,
            backup_workers: args.backup_workers,
            summaries,
            runs,
        };
        crate::common::write_file(path, &serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

/// Rows of the job's held-out set.
fn held_out_len(job: &Job) -> usize {
    job.held_out_data().map_or(0, |d| d.len())
}
