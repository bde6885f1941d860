//! The drift experiment: the same infra-aware start, then a worker turns busy mid-run; one run
//! keeps its plan, the other adapts through the library's trainer
//! ([`TrainingOptions::adapt`]: live metrics of every worker and per-replica step windows;
//! re-plans between steps). A fresh plan made after
//! the change is the yardstick.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use tf_iaware::cluster::connect_tf_config_live;
use tf_iaware::cluster::{Cluster, LiveOptions};
use tf_iaware::parallel::{DataParallelPlan, DataParallelPlanner, WorkerCapacity};

use tf_iaware::runtime::adapt::{AdaptOptions, MetricsSource, ReplanRecord, Replanning};
use tf_iaware::runtime::calibrate::WorkerProbe;
use tf_iaware::runtime::replicated::Workload;
use tf_iaware::runtime::trainer::{self, Contender, OnProgress, StepProgress};
use tf_iaware::runtime::{data_parallel, SessionConfig, StepTimes};
use tf_iaware::{parallel::DataParallelStrategy, Job, TrainingOptions, TrainingReport};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

use crate::error::{Error, Result};
use crate::event::{note, OnEvent};
use crate::report::AdaptationReport;

/// Steps run after the last drift event.
const AFTER: usize = 8;
/// "Recovered": within this share of the fresh plan's step time.
const WITHIN: f64 = 0.15;

/// What the drift experiment needs of the benchmark.
pub(crate) struct Setup<'a> {
    pub workload: &'a Workload,
    /// The library's `infra-aware` planner of the job (workers, ps, variables, batch, memory).
    pub planner: &'a DataParallelPlanner,
}

impl Setup<'_> {
    /// The planner with the workers' `capacity`.
    fn planner(&self, capacity: &[WorkerCapacity]) -> DataParallelPlanner {
        self.planner.clone().with_calibration(capacity.to_vec())
    }

    /// Samples per step.
    fn batch(&self) -> usize {
        self.planner.global_batch()
    }
}

fn plan(setup: &Setup, capacity: &[WorkerCapacity], live: &Cluster) -> Result<DataParallelPlan> {
    Ok(setup.planner(capacity).plan(live)?)
}

fn calibrate(setup: &Setup, live: &Cluster, config: &SessionConfig) -> Result<Vec<WorkerCapacity>> {
    let p = setup.planner;
    Ok(data_parallel::calibrate_workers(
        setup.workload,
        p.workers(),
        &p.ps()[0],
        live,
        config,
        WorkerProbe::from(p.probe()),
    )?)
}

/// One run's step times and re-plans.
struct RunTrace {
    times: Vec<f64>,
    records: Vec<ReplanRecord>,
    cost: Option<f64>,
}

/// Warm-up steps before the experiment's own (a new session's first steps are slow).
const WARMUP: usize = 2;

/// Trains `contender` on synthetic rows for `WARMUP + steps` steps through the library's
/// trainer, with `adapt`; before experiment step `s` runs, `before(s)` is called on this
/// thread (the steps wait for it). Returns each experiment step's wall time and the report.
fn train_steps(
    setup: &Setup,
    contender: &Contender,
    live: &Cluster,
    config: &SessionConfig,
    steps: usize,
    adapt: AdaptOptions,
    mut before: impl FnMut(usize) -> Result<()>,
) -> Result<(Vec<f64>, TrainingReport)> {
    let job = Job::synthetic(setup.workload, setup.batch().max(1) * 16, 1)?;
    let times = Arc::new(Mutex::new(Vec::new()));
    // A rendezvous: after each step the trainer hands its update count over and waits until
    // `before` has run for the next one.
    let (updates_tx, updates_rx) = mpsc::sync_channel::<u64>(0);
    let (ack_tx, ack_rx) = mpsc::sync_channel::<()>(0);
    let ack_rx = Mutex::new(ack_rx);
    let kept = times.clone();
    let progress = OnProgress::every_step(move |p: &StepProgress| {
        if let Some(ms) = p.step_ms {
            kept.lock().unwrap_or_else(|e| e.into_inner()).push(ms);
        }
        if updates_tx.send(p.updates).is_ok() {
            let _ = ack_rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
        }
    });
    let stop = Arc::new(AtomicBool::new(false));
    let options = TrainingOptions {
        steps: Some((WARMUP + steps) as u64),
        epochs: None,
        adapt: Some(adapt),
        progress: Some(progress),
        stop: Some(stop.clone()),
        ..TrainingOptions::default()
    };
    let job = &job;
    let report = std::thread::scope(|scope| -> Result<TrainingReport> {
        // The options (and the callback's sender) go with the thread: when training ends, for
        // whatever reason, the loop below ends too.
        let training = scope.spawn(move || trainer::train(contender, job, live, config, &options));
        let (updates_rx, ack_tx) = (updates_rx, ack_tx);
        let mut failed = None;
        while let Ok(updates) = updates_rx.recv() {
            let step = (updates as usize)
                .checked_sub(WARMUP)
                .filter(|&s| s < steps);
            if let Some(Err(e)) = step.map(&mut before) {
                // Stop training after the step in flight; stop waiting for acknowledgements.
                stop.store(true, Ordering::Relaxed);
                failed = Some(e);
                break;
            }
            if ack_tx.send(()).is_err() {
                break;
            }
        }
        drop((updates_rx, ack_tx));
        let trained = match training.join() {
            Ok(r) => r,
            Err(_) => return Err(Error::TrainingPanicked),
        };
        match failed {
            Some(e) => Err(e),
            None => Ok(trained?),
        }
    })?;
    let mut times = times.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let times = times.split_off(WARMUP.min(times.len()));
    Ok((times, report))
}

/// The contender of `plan`: infra-aware without LB-BSP's re-sizing (only live re-planning
/// moves its shares here), re-planned from `capacity`, reading metrics when `metrics`.
fn contender_of(
    setup: &Setup,
    plan: DataParallelPlan,
    capacity: Vec<WorkerCapacity>,
    metrics: Option<MetricsSource>,
) -> Contender {
    Contender {
        strategy: DataParallelStrategy::InfraAware,
        plan,
        feedback: None,
        replanning: Some(Replanning {
            planner: setup.planner(&capacity),
            metrics,
            tasks: None,
        }),
    }
}

/// One run over the drift; adapts when `adaptive`.
fn run_once(
    cluster: &mut EmulatedCluster,
    setup: &Setup,
    config: &SessionConfig,
    scenario: &Scenario,
    adaptive: bool,
) -> Result<RunTrace> {
    for (k, w) in scenario.workers.iter().enumerate() {
        cluster.set_busy(k, w.busy)?;
    }
    // The agents sample every 500 ms: let two readings of the reset load come in, so the
    // calibration is normalised by the availability it really runs at.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // The workers as they are now: calibrated at their live availability.
    let live = connect_tf_config_live(
        cluster.tf_config(),
        &cluster.master(),
        &LiveOptions::default(),
    )?;
    let capacity = calibrate(setup, &live.cluster, config)?;
    let first = plan(setup, &capacity, &live.cluster)?;
    let adapt = if adaptive {
        AdaptOptions::default()
    } else {
        // Traced like the adaptive run, so tracing costs both alike; never moves.
        AdaptOptions {
            availability_threshold: f64::INFINITY,
            step_threshold: f64::INFINITY,
            ..AdaptOptions::default()
        }
    };
    let metrics = adaptive.then(|| MetricsSource::TfConfig(cluster.tf_config().clone()));
    let contender = contender_of(setup, first, capacity, metrics);
    let last = scenario.drift.iter().map(|d| d.at_step).max().unwrap_or(0) + AFTER;
    let (times, report) = train_steps(
        setup,
        &contender,
        &live.cluster,
        config,
        last,
        adapt,
        |step| {
            for d in scenario.drift.iter().filter(|d| d.at_step == step) {
                cluster.set_busy(d.worker, d.busy)?;
            }
            Ok(())
        },
    )?;
    let records = report
        .replans
        .iter()
        .cloned()
        .map(|mut r| {
            // Report steps in this experiment's numbering (the warm-up steps come first).
            r.before_step = r.before_step.saturating_sub(WARMUP);
            r.first_signal_step = r.first_signal_step.saturating_sub(WARMUP);
            r
        })
        .collect();
    Ok(RunTrace {
        times,
        records,
        cost: report.metrics_cost_share,
    })
}

/// Runs the drift experiment of `scenario` on `cluster`: without adaptation, with it, and a
/// fresh plan after the change as the yardstick.
pub(crate) fn run(
    cluster: &mut EmulatedCluster,
    setup: &Setup,
    config: &SessionConfig,
    scenario: &Scenario,
    on_event: &mut OnEvent<'_>,
) -> Result<AdaptationReport> {
    // Variables must outlive a re-plan: sessions share the ps's state here.
    let config = SessionConfig {
        isolate_state: false,
        ..config.clone()
    };
    note(on_event, "drift: run without adaptation…")?;
    let static_run = run_once(cluster, setup, &config, scenario, false)?;
    note(on_event, "drift: run with adaptation…")?;
    let adaptive_run = run_once(cluster, setup, &config, scenario, true)?;
    let (static_ms, adaptive_ms) = (static_run.times, adaptive_run.times);
    note(on_event, "drift: fresh plan after the change…")?;
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let live = connect_tf_config_live(
        cluster.tf_config(),
        &cluster.master(),
        &LiveOptions::default(),
    )?;
    let capacity = calibrate(setup, &live.cluster, &config)?;
    let fresh = plan(setup, &capacity, &live.cluster)?;
    // Traced like both runs, so tracing costs the yardstick alike; never moves.
    let still = AdaptOptions {
        availability_threshold: f64::INFINITY,
        step_threshold: f64::INFINITY,
        ..AdaptOptions::default()
    };
    let contender = contender_of(setup, fresh, capacity, None);
    let (fresh_times, _) =
        train_steps(setup, &contender, &live.cluster, &config, 5, still, |_| {
            Ok(())
        })?;
    let fresh_plan_ms = StepTimes::from_samples(&fresh_times).map_or(f64::NAN, |t| t.median);
    let drift_step = scenario.drift.iter().map(|d| d.at_step).min().unwrap_or(0);
    let within = |ms: f64| ms <= (1.0 + WITHIN) * fresh_plan_ms;
    let replans: Vec<usize> = adaptive_run.records.iter().map(|r| r.before_step).collect();
    let first = adaptive_run
        .records
        .iter()
        .find(|r| r.before_step > drift_step);
    let recovered_after_steps = (drift_step..adaptive_ms.len())
        .find(|&s| adaptive_ms[s..].iter().all(|&ms| within(ms)))
        .map(|s| s - drift_step + 1);
    let mut out = AdaptationReport {
        drift_step,
        static_slowdown: 0.0,
        static_ms,
        adaptive_ms,
        replanned_after_steps: first.map(|r| r.before_step - drift_step),
        first_trigger: first.map(|r| r.trigger),
        replans,
        replan_records: adaptive_run.records.clone(),
        fresh_plan_ms,
        recovered_after_steps,
        metrics_cost_share: adaptive_run.cost,
    };
    out.static_slowdown = out.static_after_ms() / fresh_plan_ms;
    Ok(out)
}
