//! `bench --data digits`: every data-parallel contender trains the real digits to a target
//! held-out accuracy on one emulated cluster, taking turns round by round; time to accuracy,
//! steps, images/s and final accuracy per contender, a DAWNBench-style TSV per run and an SVG of
//! accuracy against training time. The training itself is `tf_iaware::runtime::accuracy`.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use tf_iaware::runtime::accuracy::{
    check_backups, contender, contender_mode, train_to_accuracy, AccuracyModel, AccuracyOptions,
    AccuracyReport, LabelledTask, Planning, CONTENDERS,
};
use tf_iaware::runtime::data_parallel;
use tf_iaware::runtime::replicated::Workload;
use tf_iaware_emulate::{EmulatedCluster, Scenario};

use super::{calibrate, svg, Args, OVERHEAD_MS};

/// The strategies `bench` runs by default, replaced by every contender for `--data digits`.
const DEFAULT_STRATEGIES: &[&str] = &["replica-setter", "infra-aware", "heft"];

/// Stock TensorFlow's contenders (the rest are tf-iaware's).
const STOCK: &[&str] = &["replica-setter", "async-ps", "sync-backup"];

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
    data: &'static str,
    data_source: &'static str,
    data_licence: &'static str,
    train_images: usize,
    held_out_images: usize,
    target_accuracy: f64,
    global_batch: usize,
    backup_workers: usize,
    summaries: Vec<Summary>,
    runs: Vec<AccuracyReport>,
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

pub fn run(args: &Args) -> Result<()> {
    // Everything that can be wrong is checked before a cluster starts.
    let defaults: Vec<String> = DEFAULT_STRATEGIES.iter().map(|s| s.to_string()).collect();
    let names: Vec<String> = if args.strategies == defaults {
        CONTENDERS.iter().map(|s| s.to_string()).collect()
    } else {
        args.strategies.clone()
    };
    for name in &names {
        if !CONTENDERS.contains(&name.as_str()) {
            bail!(
                "--data digits: `{name}` is not a data-parallel contender; choose from {}",
                CONTENDERS.join(", ")
            );
        }
    }
    if args.repeats == 0 || args.batch == 0 {
        bail!("--repeats and --batch must be at least 1");
    }
    let options = AccuracyOptions {
        target: args.target_accuracy,
        eval_every_s: args.eval_every,
        max_train_s: args.max_train_s,
        seed: 1,
        own_masters: None,
    };
    options.validate()?;
    let scenario = Scenario::parse(&args.scenario)?;
    if names.iter().any(|n| n == "sync-backup") {
        check_backups(args.backup_workers, scenario.workers.len())?;
    }
    // A zoo model, or a graph of the user's own whose sidecar names its logits.
    let (model, workload) = match &args.graph {
        None => (
            AccuracyModel::zoo(&args.model, 1)?,
            Workload::from(&args.model),
        ),
        Some(path) => {
            let analyzed = crate::common::load_graph(path)?;
            let sidecar = crate::common::load_sidecar(path, args.meta.as_ref(), &analyzed)?;
            let name = path.display().to_string();
            let workload =
                Workload::graph(&name, crate::common::load_graph(path)?, sidecar.clone())?;
            (AccuracyModel::graph(&name, analyzed, sidecar)?, workload)
        }
    };
    let task = LabelledTask::digits(&model, args.held_out, 1)?;
    for name in &names {
        model
            .check_mode(contender_mode(name))
            .with_context(|| format!("{name} cannot train {}", model.workload.name))?;
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
    let options = AccuracyOptions {
        own_masters: (args.async_masters == super::AsyncMasters::Own)
            .then(|| cluster.tf_config().clone()),
        ..options
    };
    let (workers, ps) = data_parallel::worker_and_ps_devices(&devices)?;
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
        backups: args.backup_workers,
        resize_every: args.resize_every,
    };
    let contenders = names
        .iter()
        .map(|n| contender(n, &planning))
        .collect::<tf_iaware::Result<Vec<_>>>()?;
    for c in &contenders {
        let shares: Vec<String> = c
            .plan
            .replicas
            .iter()
            .map(|r| r.batch.to_string())
            .collect();
        eprintln!("{}: {:?}, shares [{}]", c.name, c.mode, shares.join(", "));
    }
    eprintln!(
        "digits: {} training and {} held-out images for {}, target {:.0} % held-out accuracy",
        task.train.len(),
        task.test.len(),
        model.workload.name,
        args.target_accuracy * 100.0
    );

    let mut runs: Vec<AccuracyReport> = Vec::new();
    for round in 0..args.repeats {
        // Interleaved: each round starts with the next contender.
        for i in 0..contenders.len() {
            let c = &contenders[(i + round) % contenders.len()];
            let r = train_to_accuracy(c, &model, &task, &devices, &config, &options)
                .with_context(|| format!("{} (round {})", c.name, round + 1))?;
            outln!(
                "round {} {:<18} {:>9}  {:>6} updates  {:>7.1} images/sec  accuracy {:.3}  (eval {:.1} s)",
                round + 1,
                r.contender,
                r.time_to_accuracy_s
                    .map_or("not reached".to_string(), |t| format!("{t:.1} s")),
                r.updates,
                r.images_per_sec,
                r.final_accuracy,
                r.eval_seconds
            )?;
            if let Some(dir) = &args.tsv {
                let mut tsv = String::from("epoch\tseconds\taccuracy\n");
                for p in &r.curve {
                    tsv += &format!("{:.3}\t{:.2}\t{:.4}\n", p.epoch, p.seconds, p.accuracy);
                }
                let path = dir.join(format!("{}-round{}.tsv", r.contender, round + 1));
                crate::common::write_file(&path, &tsv)?;
            }
            runs.push(r);
        }
    }
    drop(cluster);

    let time_of = |name: &str| {
        median(
            runs.iter()
                .filter(|r| r.contender == name)
                .filter_map(|r| r.time_to_accuracy_s)
                .collect(),
        )
    };
    let stock_time = time_of("replica-setter");
    let best_stock = STOCK
        .iter()
        .filter(|s| names.iter().any(|n| n == *s))
        .filter_map(|s| time_of(s))
        .min_by(f64::total_cmp);
    let summaries: Vec<Summary> = names
        .iter()
        .map(|name| {
            let mine: Vec<&AccuracyReport> = runs.iter().filter(|r| &r.contender == name).collect();
            let med = |f: fn(&AccuracyReport) -> f64| {
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
                median_final_accuracy: med(|r| r.final_accuracy),
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
        STOCK.join(", "),
        started.elapsed().as_secs_f64()
    );
    if let Some(path) = &args.svg {
        let first: Vec<&AccuracyReport> = names
            .iter()
            .filter_map(|n| runs.iter().find(|r| &r.contender == n))
            .collect();
        crate::common::write_file(
            path,
            &svg::accuracy_chart(
                &first,
                &scenario.name,
                &model.workload.name,
                args.target_accuracy,
            ),
        )?;
    }
    if let Some(path) = &args.json {
        let report = AccuracyBench {
            scenario,
            model: model.workload.name.clone(),
            data: "digits",
            data_source: tf_iaware::data::DIGITS_SOURCE,
            data_licence: tf_iaware::data::DIGITS_LICENCE,
            train_images: task.train.len(),
            held_out_images: task.test.len(),
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
