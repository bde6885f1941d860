//! The images/s benchmark: strategies side by side on an emulated heterogeneous cluster —
//! TensorFlow's stock data-parallel recipe against infra-aware, and per-op placements over the
//! workers — interleaved so machine drift hits all alike; for scenarios with drift, step time
//! over steps with and without adaptation ([`crate::adapt`]).

use std::time::Instant;

use tf_iaware::cluster::Cluster;
use tf_iaware::parallel::{
    self, DataParallelPlan, DataParallelPlanner, DataParallelStrategy, Updates, WorkerCapacity,
};
use tf_iaware::placer::OpPlacementStrategy;
use tf_iaware::runtime::replicated::Workload;
use tf_iaware::runtime::{data_parallel, StepTimes, Trainer};
use tf_iaware::sim::scale::Planner;
use tf_iaware_emulate::EmulatedCluster;

use crate::adapt;
use crate::calibrate::{calibrate, Calibration};
use crate::error::{During, Error, Result};
use crate::event::{emit, note, Event, OnEvent, RoundStats};
use crate::model_parallel;
use crate::options::{BenchOptions, Model};
use crate::report::{mean_std, StrategyResult, ThroughputReport};

/// A strategy ready to step.
struct Contender {
    strategy: Planner,
    plan: Option<DataParallelPlan>,
    ops_per_device: Option<Vec<(String, usize)>>,
    predicted_ms: Option<f64>,
    trainer: Trainer,
    times: Vec<f64>,
    losses: Vec<f32>,
}

/// Whether `strategy` is a synchronous data-parallel strategy (the images/s bench times steps).
fn is_data_parallel(strategy: Planner) -> bool {
    matches!(strategy, Planner::DataParallel(s) if s.updates() == Updates::Sync)
}

/// `Ok` for a strategy the images/s bench can run: data-parallel `replica-setter` or
/// `infra-aware`, or a per-op strategy other than `tf-default`.
///
/// # Errors
/// [`Error::Strategy`] saying what to run instead.
pub(crate) fn check_strategy(strategy: Planner) -> Result<()> {
    let reason = match strategy {
        Planner::DataParallel(
            DataParallelStrategy::ReplicaSetter | DataParallelStrategy::InfraAware,
        ) => return Ok(()),
        Planner::DataParallel(_) => {
            "trains with real data and is measured by time to accuracy: \
             pass --data digits (its report has images/s too)"
        }
        Planner::PerOp(OpPlacementStrategy::TfDefault) => {
            "is not a benchmark strategy: replica-setter is stock TensorFlow's data-parallel recipe"
        }
        Planner::PerOp(_) => return Ok(()),
    };
    Err(Error::Strategy {
        strategy,
        reason: reason.into(),
    })
}

/// The workload of `o`: a zoo model, or the user's graph (a fixed batch other than `o.batch`
/// refused when a model-parallel strategy would run it).
fn workload(o: &BenchOptions) -> Result<Workload> {
    Ok(match &o.model {
        Model::Zoo(model) => {
            tf_iaware::models::input_shape(model)?;
            Workload::from(model)
        }
        Model::Graph { path, meta } => {
            let analyzed = tf_iaware::load_graph(path)?;
            let sidecar = tf_iaware::load_sidecar(path, meta.as_deref(), &analyzed)?;
            let fixed = sidecar.batch_size().filter(|&b| b != o.batch);
            if let (Some(b), Some(s)) =
                (fixed, o.strategies.iter().find(|&&s| !is_data_parallel(s)))
            {
                return Err(Error::Conflict(format!(
                    "{} has a fixed batch of {b}: model-parallel `{s}` runs it at that batch, \
                     not --batch {}; pass --batch {b} or data-parallel strategies only",
                    path.display(),
                    o.batch
                )));
            }
            Workload::graph(&path.display().to_string(), analyzed, sidecar)?
        }
    })
}

/// Steps every contender through its warm-up, then `o.repeats` rounds of timed steps, one
/// contender after the other in each round. Each contender's turn in a round starts with one
/// untimed step, and the order turns and reverses from round to round, so that no contender's
/// times carry what the one before it left behind: measured on `paper`, whichever of two
/// identical placements ran right after `infra-aware` was the slower, by up to 7 % (what
/// lingers was not traced; benches/results/main-job).
fn measure(
    contenders: &mut [Contender],
    o: &BenchOptions,
    on_event: &mut OnEvent<'_>,
) -> Result<()> {
    let per_round = o.steps.div_ceil(o.repeats);
    let total = (contenders.len() * (o.warmup + (1 + per_round) * o.repeats)) as u64;
    let mut done = 0;
    for c in contenders.iter_mut() {
        for i in 0..o.warmup {
            let (loss, _, _) = c
                .trainer
                .step(i, false)
                .during(|| format!("{} (warm-up)", c.strategy))?;
            c.losses.push(loss);
            done += 1;
            emit(
                on_event,
                Event::Steps {
                    done,
                    total,
                    what: "warm-up",
                },
            )?;
        }
    }
    let n = contenders.len();
    for round in 0..o.repeats {
        for k in 0..n {
            let c = &mut contenders[round_order(round, k, n)];
            let what = format!("round {} {}", round + 1, c.strategy);
            // One untimed step, then the timed ones.
            for timed in std::iter::once(false).chain(std::iter::repeat_n(true, per_round)) {
                let (loss, ms, _) = c
                    .trainer
                    .step(c.losses.len(), false)
                    .during(|| format!("{} (round {})", c.strategy, round + 1))?;
                c.losses.push(loss);
                if timed {
                    c.times.push(ms);
                }
                done += 1;
                emit(
                    on_event,
                    Event::Steps {
                        done,
                        total,
                        what: &what,
                    },
                )?;
            }
            let ips: Vec<f64> = c
                .times
                .iter()
                .map(|ms| o.batch as f64 / (ms / 1e3))
                .collect();
            let (mean, std) = mean_std(&ips);
            let stats = RoundStats {
                strategy: c.strategy,
                timed_steps: c.times.len(),
                images_per_sec: mean,
                images_per_sec_std: std,
                last_loss: c.losses.last().copied().unwrap_or(f32::NAN),
            };
            emit(on_event, Event::Round(&stats))?;
        }
    }

    Ok(())
}

/// Runs the images/s bench of `o` (and the drift experiment of a scenario with drift).
pub(crate) fn run(o: &BenchOptions, on_event: &mut OnEvent<'_>) -> Result<ThroughputReport> {
    if o.strategies.is_empty() {
        return Err(Error::Conflict(
            "--steps, --repeats and --strategies must be non-empty".into(),
        ));
    }
    // Before anything starts: a typo should not cost a cluster and a calibration.
    for &s in &o.strategies {
        check_strategy(s)?;
    }
    let workload = workload(o)?;
    let started = Instant::now();
    let scenario = o.scenario.clone();
    note(
        on_event,
        &format!("scenario {}: {}", scenario.name, scenario.description),
    )?;
    let busy = format!("starting the emulated cluster `{}`", scenario.name);
    emit(on_event, Event::Busy(Some(&busy)))?;
    let cluster = EmulatedCluster::start(&scenario, &o.worker_exe);
    let connected = cluster.and_then(|c| c.connect().map(|d| (c, d)));
    emit(on_event, Event::Busy(None))?;
    let (mut cluster, (devices, mut config)) = connected?;
    config.isolate_state = true;
    let (workers, _) = data_parallel::worker_and_ps_devices(&devices)?;
    // The library's own planner, as `plan_data_parallel` makes it: the same probes, options and
    // plans a user gets.
    let planner = |s| tf_iaware::data_parallel_planner(&workload, s, &devices, Some(o.batch));
    let infra_aware = planner(DataParallelStrategy::InfraAware)?;
    let (calibrated, calibration) = calibrate(
        &Calibration {
            workload: &workload,
            devices: &devices,
            config: &config,
            planner: &infra_aware,
            recalibrate: o.recalibrate,
        },
        on_event,
    )?;
    let lower_bound = parallel::lower_bound_ms(o.batch, &calibration);
    let sync_bound = parallel::sync_lower_bound_ms(o.batch, &calibration);

    let mut contenders = Vec::new();
    for &strategy in &o.strategies {
        let busy = format!("preparing {strategy}");
        emit(on_event, Event::Busy(Some(&busy)))?;
        let prepared = match strategy {
            Planner::DataParallel(s) => planner(s).and_then(|p| {
                let p = p.with_calibration(calibrated.capacity.clone());
                prepare_data_parallel(strategy, &workload, &p, (&devices, &config))
            }),
            Planner::PerOp(s) => {
                prepare_per_op(s, o, &workload, &workers, &calibration, (&devices, &config))
            }
        };
        emit(on_event, Event::Busy(None))?;
        let (contender, line) = prepared.during(|| format!("preparing {strategy}"))?;
        note(on_event, &line)?;
        contenders.push(contender);
    }
    measure(&mut contenders, o, on_event)?;
    let results = results(contenders, o, lower_bound, sync_bound)?;
    emit(
        on_event,
        Event::Measured {
            results: &results,
            lower_bound_ms: lower_bound,
            sync_lower_bound_ms: sync_bound,
        },
    )?;

    let adaptation = if scenario.drift.is_empty() {
        None
    } else {
        let setup = adapt::Setup {
            workload: &workload,
            planner: &infra_aware,
        };
        Some(adapt::run(
            &mut cluster,
            &setup,
            &config,
            &scenario,
            on_event,
        )?)
    };
    let report = ThroughputReport {
        quota_warning: cluster.quota_warning.clone(),
        scenario,
        model: workload.name().to_string(),
        global_batch: o.batch,
        steps: o.steps,
        warmup: o.warmup,
        repeats: o.repeats,
        samples: o.samples,
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
    Ok(report)
}

/// The data-parallel `strategy` planned by `planner` (the library's planner, with the bench's
/// calibration) and its trainer initialised, with the line that says how.
fn prepare_data_parallel(
    strategy: Planner,
    workload: &Workload,
    planner: &DataParallelPlanner,
    (devices, config): (&Cluster, &tf_iaware::runtime::SessionConfig),
) -> tf_iaware::Result<(Contender, String)> {
    let plan = planner.plan(devices)?;
    let shares: Vec<String> = plan.replicas.iter().map(|r| r.batch.to_string()).collect();
    let line = format!(
        "{strategy}: {} replicas, shares [{}]",
        plan.replicas.len(),
        shares.join(", ")
    );
    let (trainer, _, _) = data_parallel::prepare(workload, &plan, devices, config, 1)?;
    let contender = Contender {
        strategy,
        predicted_ms: planner.predict_step_ms(&plan, devices),
        plan: Some(plan),
        ops_per_device: None,
        trainer,
        times: Vec::new(),
        losses: Vec::new(),
    };
    contender.trainer.init()?;
    Ok((contender, line))
}

/// The per-op `strategy` placed over the workers and its trainer initialised, with the line that
/// says how.
fn prepare_per_op(
    s: OpPlacementStrategy,
    o: &BenchOptions,
    workload: &Workload,
    workers: &[String],
    calibration: &[WorkerCapacity],
    (devices, config): (&Cluster, &tf_iaware::runtime::SessionConfig),
) -> tf_iaware::Result<(Contender, String)> {
    let p = model_parallel::prepare(s, workload, o.batch, devices, workers, config, calibration)?;
    let ops: Vec<String> = p
        .ops_per_device
        .iter()
        .map(|(d, n)| format!("{d}: {n}"))
        .collect();
    let line = format!(
        "{}: model-parallel, ops per worker [{}]",
        Planner::PerOp(s),
        ops.join(", ")
    );
    let contender = Contender {
        strategy: Planner::PerOp(s),
        plan: None,
        ops_per_device: Some(p.ops_per_device),
        predicted_ms: Some(p.predicted_ms),
        trainer: p.trainer,
        times: Vec::new(),
        losses: Vec::new(),
    };
    contender.trainer.init()?;
    Ok((contender, line))
}

/// One result row per contender, against replica-setter's median step.
fn results(
    contenders: Vec<Contender>,
    o: &BenchOptions,
    lower_bound: f64,
    sync_bound: f64,
) -> Result<Vec<StrategyResult>> {
    let stock = Planner::DataParallel(DataParallelStrategy::ReplicaSetter);
    let stock_ms = contenders
        .iter()
        .find(|c| c.strategy == stock)
        .and_then(|c| StepTimes::from_samples(&c.times))
        .map(|t| t.median);
    let mut results = Vec::new();
    for c in contenders {
        let step = StepTimes::from_samples(&c.times).ok_or(Error::NoTimedSteps {
            strategy: c.strategy,
        })?;
        let ips: Vec<f64> = c
            .times
            .iter()
            .map(|ms| o.batch as f64 / (ms / 1e3))
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
            strategy: c.strategy.to_string(),
            images_per_sec: o.batch as f64 / (step.median / 1e3),
            images_per_sec_std: std,
            time_to_train_s: o.samples as f64 / o.batch as f64 * step.median / 1e3,
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
    Ok(results)
}

/// Which of `n` contenders runs `k`-th in round `round`: each round starts one further on, and
/// every other round goes the other way round, so each contender follows a different one.
fn round_order(round: usize, k: usize, n: usize) -> usize {
    if round % 2 == 0 {
        (round + k) % n
    } else {
        (round + n - k % n) % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str) -> Result<()> {
        check_strategy(name.parse().expect("a known strategy"))
    }

    #[test]
    fn the_images_per_second_strategies() {
        for ok in [
            "replica-setter",
            "infra-aware",
            "heft",
            "etf",
            "round-robin",
        ] {
            assert!(check(ok).is_ok(), "{ok}");
        }
        for refused in ["async-ps", "sync-backup", "infra-aware-async", "tf-default"] {
            assert!(
                matches!(check(refused), Err(Error::Strategy { .. })),
                "{refused}"
            );
        }
    }

    #[test]
    fn only_synchronous_data_parallel_strategies_take_any_batch() {
        let p = |s: &str| s.parse::<Planner>().expect("a known strategy");
        assert!(is_data_parallel(p("replica-setter")));
        assert!(is_data_parallel(p("infra-aware")));
        assert!(!is_data_parallel(p("async-ps")));
        assert!(!is_data_parallel(p("heft")));
    }

    #[test]
    fn contenders_follow_a_different_one_in_the_next_round() {
        let order = |round| {
            (0..4)
                .map(|k| super::round_order(round, k, 4))
                .collect::<Vec<_>>()
        };
        assert_eq!(order(0), [0, 1, 2, 3]);
        assert_eq!(order(1), [1, 0, 3, 2]);
        assert_eq!(order(2), [2, 3, 0, 1]);
        // Every round is a permutation, and no contender follows the same one twice running.
        for r in 0..6 {
            let mut o = order(r);
            o.sort_unstable();
            assert_eq!(o, [0, 1, 2, 3]);
        }
        let before = |o: &[usize], c: usize| o.iter().position(|&x| x == c).map(|i| o[(i + 3) % 4]);
        for c in 0..4 {
            assert_ne!(before(&order(0), c), before(&order(1), c), "contender {c}");
        }
        assert_eq!(super::round_order(3, 0, 1), 0);
    }
}
