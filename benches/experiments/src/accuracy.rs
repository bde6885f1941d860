//! Time to accuracy: every data-parallel contender trains the real digits (or the user's data
//! file) to a target held-out accuracy on one emulated cluster, taking turns round by round;
//! time to accuracy, steps, images/s and final accuracy per contender, and every run's
//! evaluations (for a DAWNBench-style TSV and a chart). The training itself is the library's
//! trainer (`tf_iaware::runtime::trainer`).

use std::time::Instant;

use tf_iaware::cluster::Cluster;
use tf_iaware::data::{digits_split, input_specs};
use tf_iaware::graph::analyze::analyze_graph;
use tf_iaware::parallel::{DataParallelStrategy, Updates};
use tf_iaware::runtime::trainer::{check_backups, contender, train, Planning};
use tf_iaware::runtime::{trainer, SessionConfig};
use tf_iaware::sim::scale::Planner;
use tf_iaware::{Job, TrainingOptions, TrainingReport};
use tf_iaware_emulate::EmulatedCluster;

use crate::calibrate::{calibrate, Calibration};
use crate::error::{During, Error, Result};
use crate::event::{emit, note, Event, OnEvent};
use crate::options::{default_strategies, AsyncMasters, BenchOptions, Data, Model};
use crate::report::{median, AccuracyReport, Summary};

/// The job a time-to-accuracy run trains: a zoo model or a graph of the user's, on the digits
/// or a data file, split into training and held-out rows.
fn job(o: &BenchOptions) -> Result<Job> {
    let (name, analyzed, sidecar) = match &o.model {
        Model::Zoo(model) => {
            let m = tf_iaware::models::build(model, 64, 1)?;
            (model.clone(), analyze_graph(m.net.graph())?, m.sidecar)
        }
        Model::Graph { path, meta } => {
            let analyzed = tf_iaware::load_graph(path)?;
            let sidecar = tf_iaware::load_sidecar(path, meta.as_deref(), &analyzed)?;
            (path.display().to_string(), analyzed, sidecar)
        }
    };
    let specs = input_specs(&analyzed.op_graph, &sidecar)?;
    if sidecar.logits.is_none() {
        return Err(Error::Conflict(format!(
            "{name}: the sidecar has no `logits` (the op whose output 0 is [batch, classes]): \
             held-out accuracy needs it"
        )));
    }
    let (train_rows, held_out) = match &o.data {
        Data::Digits => {
            if let Some(p) = &o.held_out_data {
                return Err(Error::Conflict(format!(
                    "--held-out-data {}: the built-in digits hold their own rows out (--held-out \
                     FRACTION)",
                    p.display()
                )));
            }
            digits_split(&specs, o.held_out, 1)?
        }
        Data::File(path) => {
            if !path.exists() {
                return Err(Error::Data {
                    data: o.data.to_string(),
                    reason: format!(
                        "unknown data set (built in: {}) and no such file",
                        tf_iaware::data::DATA_SETS.join(", ")
                    ),
                });
            }
            let data = tf_iaware::data::open(path, &specs)?;
            match &o.held_out_data {
                Some(held_out) => (data, tf_iaware::data::open(held_out, &specs)?),
                None => tf_iaware::data::split(&data, o.held_out, 1)?,
            }
        }
        Data::Synthetic => {
            return Err(Error::Data {
                data: o.data.to_string(),
                reason: "has no labels to measure accuracy against".into(),
            })
        }
    };
    Ok(Job::new(&name, analyzed, sidecar, Box::new(train_rows))?
        .with_held_out(Box::new(held_out))?)
}

/// The contenders of `o`: every data-parallel strategy (`sync-backup` with `o.backup_workers`)
/// when `o` asks for the default strategies, else `o`'s, each of which must be data-parallel.
pub(crate) fn contenders(o: &BenchOptions) -> Result<Vec<DataParallelStrategy>> {
    if o.strategies == default_strategies() {
        return Ok(DataParallelStrategy::all()
            .map(|s| match s {
                DataParallelStrategy::SyncBackup { .. } => DataParallelStrategy::SyncBackup {
                    backups: o.backup_workers,
                },
                s => s,
            })
            .collect());
    }
    o.strategies
        .iter()
        .map(|&s| match s {
            Planner::DataParallel(d) => Ok(d),
            Planner::PerOp(_) => Err(Error::Strategy {
                strategy: s,
                reason: format!(
                    "is not a data-parallel contender (--data {} trains: {})",
                    o.data,
                    DataParallelStrategy::known()
                ),
            }),
        })
        .collect()
}

/// The contenders, the training options and the job of `o`, checked (before a cluster
/// starts).
fn checked(o: &BenchOptions) -> Result<(Vec<DataParallelStrategy>, TrainingOptions, Job)> {
    let strategies = contenders(o)?;
    if o.repeats == 0 || o.batch == 0 {
        return Err(Error::Conflict(
            "--repeats and --batch must be at least 1".into(),
        ));
    }
    let options = TrainingOptions {
        steps: None,
        epochs: None,
        max_seconds: Some(o.max_train_s),
        target: Some(o.target_accuracy),
        eval_every_s: o.eval_every_s,
        seed: 1,
        ..TrainingOptions::default()
    };
    options.validate()?;
    if !(o.target_accuracy > 0.0 && o.target_accuracy <= 1.0) {
        return Err(Error::InvalidOption {
            option: "--target-accuracy",
            value: o.target_accuracy.to_string(),
            reason: "the target accuracy must be in (0, 1]".into(),
        });
    }
    let scenario = &o.scenario;
    for s in &strategies {
        if let Updates::Backup { backups } = s.updates() {
            check_backups(backups, scenario.workers.len())?;
        }
    }
    let job = job(o)?;
    for s in &strategies {
        job.check_updates(s.updates())
            .during(|| format!("{s} cannot train {}", job.name()))?;
    }

    Ok((strategies, options, job))
}

/// Trains every contender of `o` to `o.target_accuracy`, round by round.
pub(crate) fn run(o: &BenchOptions, on_event: &mut OnEvent<'_>) -> Result<AccuracyReport> {
    // Everything that can be wrong is checked before a cluster starts.
    let (strategies, options, job) = checked(o)?;
    let names: Vec<String> = strategies.iter().map(|s| s.to_string()).collect();
    let scenario = &o.scenario;
    let started = Instant::now();
    note(
        on_event,
        &format!("scenario {}: {}", scenario.name, scenario.description),
    )?;
    let cluster = EmulatedCluster::start(scenario, &o.worker_exe)?;
    let (devices, mut config) = cluster.connect()?;
    config.isolate_state = true;
    // Asynchronous contenders step through each worker's own server, as TF2 does, unless told.
    let options = TrainingOptions {
        own_masters: (o.async_masters == AsyncMasters::Own).then(|| cluster.tf_config().clone()),
        ..options
    };
    let workload = job.workload();
    // The library's own planner, as `plan_data_parallel` makes it.
    let planner = |s| tf_iaware::data_parallel_planner(&workload, s, &devices, Some(o.batch));
    let calibration = Calibration {
        workload: &workload,
        devices: &devices,
        config: &config,
        planner: &planner(DataParallelStrategy::InfraAware)?,
        recalibrate: o.recalibrate,
    };
    let (calibrated, _) = calibrate(&calibration, on_event)?;
    let planning = Planning {
        cluster: &devices,
        resize_every: o.resize_every,
        metrics: None,
        tasks: None,
    };
    let contenders = strategies
        .iter()
        .map(|&s| {
            let p = planner(s)?.with_calibration(calibrated.capacity.clone());
            contender(p, &planning)
        })
        .collect::<tf_iaware::Result<Vec<_>>>()?;
    for c in &contenders {
        let shares: Vec<String> = c
            .plan
            .replicas
            .iter()
            .map(|r| r.batch.to_string())
            .collect();
        note(
            on_event,
            &format!(
                "{}: {:?}, shares [{}]",
                c.strategy,
                c.updates(),
                shares.join(", ")
            ),
        )?;
    }
    let held_out_rows = job.metric().map_or(0, |_| held_out_len(&job));
    note(
        on_event,
        &format!(
            "{}: {} training and {} held-out rows for {}, target {:.0} % held-out accuracy",
            o.data,
            job.train_data().len(),
            held_out_rows,
            job.name(),
            o.target_accuracy * 100.0
        ),
    )?;

    let runs = rounds(
        o,
        &contenders,
        &job,
        (&devices, &config),
        &options,
        on_event,
    )?;
    drop(cluster);

    let (summaries, stock) = summarise(&strategies, &names, &runs);
    Ok(AccuracyReport {
        scenario: scenario.clone(),
        model: job.name().to_string(),
        data: o.data.to_string(),
        data_source: tf_iaware::data::DIGITS_SOURCE,
        data_licence: tf_iaware::data::DIGITS_LICENCE,
        train_images: job.train_data().len(),
        held_out_images: held_out_rows,
        target_accuracy: o.target_accuracy,
        global_batch: o.batch,
        backup_workers: o.backup_workers,
        summaries,
        runs,
        stock,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// Each contender's medians over its rounds and its reductions against `replica-setter` and the
/// best stock contender; and the stock contenders among `strategies`.
fn summarise(
    strategies: &[DataParallelStrategy],
    names: &[String],
    runs: &[TrainingReport],
) -> (Vec<Summary>, Vec<DataParallelStrategy>) {
    let time_of = |name: &str| {
        median(
            runs.iter()
                .filter(|r| r.strategy.to_string() == name)
                .filter_map(|r| r.time_to_target_s)
                .collect(),
        )
    };
    let stock_time = time_of("replica-setter");
    let stock: Vec<DataParallelStrategy> = strategies
        .iter()
        .copied()
        .filter(|s| s.is_stock())
        .collect();
    let best_stock = stock
        .iter()
        .filter_map(|s| time_of(&s.to_string()))
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
    (summaries, stock)
}

/// `o.repeats` rounds of every contender, interleaved: each round starts with the next one.
fn rounds(
    o: &BenchOptions,
    contenders: &[trainer::Contender],
    job: &Job,
    (devices, config): (&Cluster, &SessionConfig),
    options: &TrainingOptions,
    on_event: &mut OnEvent<'_>,
) -> Result<Vec<TrainingReport>> {
    let mut runs: Vec<TrainingReport> = Vec::new();
    for round in 0..o.repeats {
        // Interleaved: each round starts with the next contender.
        for i in 0..contenders.len() {
            let c = &contenders[(i + round) % contenders.len()];
            let r = train(c, job, devices, config, options)
                .during(|| format!("{} (round {})", c.strategy, round + 1))?;
            emit(
                on_event,
                Event::Trained {
                    round: round + 1,
                    report: &r,
                },
            )?;
            runs.push(r);
        }
    }
    Ok(runs)
}

/// Rows of the job's held-out set.
fn held_out_len(job: &Job) -> usize {
    job.held_out_data().map_or(0, |d| d.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use tf_iaware::placer::OpPlacementStrategy;
    use tf_iaware_emulate::Scenario;

    fn options() -> BenchOptions {
        let scenario = Scenario::parse("paper").expect("a built-in scenario");
        let mut o = BenchOptions::new(scenario, PathBuf::from("tf-iaware"));
        o.data = Data::Digits;
        o.backup_workers = 2;
        o
    }

    #[test]
    fn the_default_strategies_become_every_contender() {
        let all = contenders(&options()).expect("contenders");
        assert_eq!(all.len(), DataParallelStrategy::all().count());
        assert!(all.contains(&DataParallelStrategy::SyncBackup { backups: 2 }));
    }

    #[test]
    fn chosen_contenders_must_be_data_parallel() {
        let mut o = options();
        o.strategies = vec![Planner::DataParallel(DataParallelStrategy::AsyncPs)];
        assert_eq!(
            contenders(&o).expect("one contender"),
            [DataParallelStrategy::AsyncPs]
        );
        o.strategies.push(Planner::PerOp(OpPlacementStrategy::Etf));
        match contenders(&o) {
            Err(Error::Strategy { strategy, .. }) => {
                assert_eq!(strategy, Planner::PerOp(OpPlacementStrategy::Etf))
            }
            other => panic!("expected a strategy error, got {other:?}"),
        }
    }
}
