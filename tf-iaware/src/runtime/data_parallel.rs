//! Running synchronous data-parallel training on a cluster: calibrating each worker's throughput
//! through TensorFlow itself, and training a [`DataParallelPlan`].

use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::config::SessionConfig;
use super::session::PlacedSession;
use super::train::{TrainReport, Trainer};
use crate::apply;
use crate::cluster::tf_config::{TaskId, TfConfig};
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::graph::analyze::analyze_graph;
use crate::graph::DeviceName;
use crate::models::replicated;
use crate::parallel::{DataParallelPlan, Replica, WorkerCapacity};

/// Worker and ps devices of a cluster: the first CPU of every task of job `worker` (or `chief`)
/// and of job `ps`, in task order.
///
/// # Errors
/// [`Error::Infeasible`] if the cluster has no workers or no ps.
pub fn worker_and_ps_devices(cluster: &Cluster) -> Result<(Vec<String>, Vec<String>)> {
    let mut workers = Vec::new();
    let mut ps = Vec::new();
    for d in &cluster.devices {
        let Ok(name) = d.parsed_name() else { continue };
        if name.device_type.as_deref() != Some("CPU") || name.id != Some(0) {
            continue;
        }
        match name.job.as_deref() {
            Some("worker") | Some("chief") => {
                workers.push((name.job.clone(), name.task, d.name.clone()))
            }
            Some("ps") => ps.push((name.job.clone(), name.task, d.name.clone())),
            _ => {}
        }
    }
    workers.sort();
    ps.sort();
    if workers.is_empty() || ps.is_empty() {
        return Err(Error::Infeasible {
            group: "(cluster)".into(),
            reason: format!(
                "data-parallel training needs worker and ps tasks; devices: {}",
                cluster.device_list()
            ),
        });
    }
    Ok((
        workers.into_iter().map(|w| w.2).collect(),
        ps.into_iter().map(|p| p.2).collect(),
    ))
}

/// `/job:J/replica:R/task:T` of a device name, if it names a task.
fn task_of(device: &str) -> Option<String> {
    let d = DeviceName::parse(device).ok()?;
    Some(format!(
        "/job:{}/replica:{}/task:{}",
        d.job?,
        d.replica.unwrap_or(0),
        d.task?
    ))
}

/// Builds, places and trains `plan` for model `name`: `steps` timed steps after `warmup`.
///
/// # Errors
/// Anything building, placing or running can return; [`Error::TensorFlow`] when a step fails
/// or passes its deadline (a lost worker, say).
pub fn train(
    name: &str,
    plan: &DataParallelPlan,
    cluster: &Cluster,
    config: &SessionConfig,
    steps: usize,
    warmup: usize,
    seed: u64,
) -> Result<TrainReport> {
    let trainer = prepare(name, plan, cluster, config, seed)?;
    trainer
        .0
        .train(steps, warmup, Some((&trainer.1, &trainer.2)))
}

/// A ready-to-step trainer for `plan`, with its placement and graph (for checks).
///
/// # Errors
/// As [`train`].
pub fn prepare(
    name: &str,
    plan: &DataParallelPlan,
    cluster: &Cluster,
    config: &SessionConfig,
    seed: u64,
) -> Result<(Trainer, crate::placer::Placement, crate::graph::OpGraph)> {
    let built = replicated::build(name, plan, seed)?;
    let analyzed = analyze_graph(built.net.graph())?;
    let placed = apply::apply(
        &analyzed.graph_def,
        &analyzed.op_graph,
        cluster,
        &built.placement,
    )?;
    // Only the tasks the plan uses take part: a lost worker outside it cannot stall the session.
    let mut tasks: Vec<String> = plan
        .replicas
        .iter()
        .map(|r| r.device.as_str())
        .chain(plan.variable_devices.values().map(String::as_str))
        .chain(std::iter::once(plan.global_device.as_str()))
        .filter_map(task_of)
        .collect();
    tasks.sort();
    tasks.dedup();
    let config = SessionConfig {
        device_filters: tasks,
        ..config.clone()
    };
    let session = PlacedSession::new(placed.graph, &config)?;
    let trainer = Trainer::new(session, &built.sidecar, None, seed)?;
    Ok((trainer, built.placement, analyzed.op_graph))
}

/// Calibrates each worker through TensorFlow itself: trains model `name` on it alone (variables
/// on `ps`) with `probe_batch / 4`, `probe_batch / 2` and `probe_batch` samples — two warm-up
/// steps, then at least three timed steps and `min_seconds` each, the median counting — and fits
/// a fixed per-step cost and a marginal throughput ([`WorkerCapacity::fit`]). Workers are calibrated one
/// after another so they do not disturb each other.
///
/// # Errors
/// As [`train`].
pub fn calibrate_workers(
    name: &str,
    workers: &[String],
    ps: &str,
    cluster: &Cluster,
    config: &SessionConfig,
    probe_batch: usize,
    min_seconds: f64,
) -> Result<Vec<WorkerCapacity>> {
    let vars = replicated::variables(name)?;
    let sizes = [
        (probe_batch / 4).max(1),
        (probe_batch / 2).max(2),
        probe_batch.max(3),
    ];
    let mut out = Vec::with_capacity(workers.len());
    for w in workers {
        let mut points = Vec::with_capacity(sizes.len());
        for batch in sizes {
            let plan = DataParallelPlan {
                strategy: "calibration".into(),
                replicas: vec![Replica {
                    device: w.clone(),
                    batch,
                }],
                variable_devices: vars
                    .iter()
                    .map(|v| (v.name.clone(), ps.to_string()))
                    .collect(),
                global_device: ps.to_string(),
                predicted_step_ms: None,
            };
            let (trainer, _, _) = prepare(name, &plan, cluster, config, 1)?;
            trainer.init()?;
            trainer.step(0, false)?;
            trainer.step(1, false)?;
            let start = Instant::now();
            let mut times = Vec::new();
            while times.len() < 3
                || (start.elapsed().as_secs_f64() < min_seconds && times.len() < 50)
            {
                let (_, ms, _) = trainer.step(times.len() + 2, false)?;
                times.push(ms);
            }
            times.sort_by(f64::total_cmp);
            points.push((batch, times[times.len() / 2]));
        }
        let capacity = WorkerCapacity::fit(w, &points);
        log::info!(
            "calibration: {w}: {:?} → {:.1} samples/s + {:.0} ms per step",
            points,
            capacity.samples_per_sec,
            capacity.fixed_ms
        );
        out.push(capacity);
    }
    Ok(out)
}

/// Each replica's busy window in one traced step of `plan`, ms (replicas without one are left
/// out).
pub fn replica_spans_ms(
    plan: &DataParallelPlan,
    stats: &crate::proto::StepStats,
) -> Vec<(String, f64)> {
    let spans = super::stats::device_spans(stats);
    plan.replicas
        .iter()
        .filter_map(|r| {
            let (start, end) = spans.get(&r.device)?;
            (end > start).then(|| (r.device.clone(), (end - start) as f64 / 1e3))
        })
        .collect()
}

/// Predicted step time of `plan`, ms, from calibrated workers: the slowest replica's
/// [`WorkerCapacity::step_ms`], plus `per_replica_overhead_ms` per replica (synchronisation).
/// Replicas on workers missing from `capacity` make the prediction `None`.
pub fn predict_step_ms(
    plan: &DataParallelPlan,
    capacity: &[WorkerCapacity],
    per_replica_overhead_ms: f64,
) -> Option<f64> {
    let mut worst: f64 = 0.0;
    for r in &plan.replicas {
        let c = capacity.iter().find(|c| c.device == r.device)?;
        worst = worst.max(c.step_ms(r.batch));
    }
    Some(worst + plan.replicas.len() as f64 * per_replica_overhead_ms)
}

/// Workers (devices of `plan`'s replicas or any list) whose task still accepts connections.
pub fn reachable(devices: &[String], tf_config: &TfConfig) -> Vec<String> {
    devices
        .iter()
        .filter(|d| {
            let Ok(name) = DeviceName::parse(d) else {
                return false;
            };
            let (Some(job), Some(task)) = (name.job, name.task) else {
                return false;
            };
            let Some(address) = tf_config.address(&TaskId {
                job,
                index: task as usize,
            }) else {
                return false;
            };
            address
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok())
        })
        .cloned()
        .collect()
}

/// A recovery: before which step, which workers were lost, and the plan that replaced theirs.
#[derive(Clone, Debug, Serialize)]
pub struct Recovery {
    pub step: usize,
    pub lost: Vec<String>,
    pub error: String,
    pub plan: DataParallelPlan,
}

/// Result of [`train_recovering`].
#[derive(Clone, Debug, Serialize)]
pub struct RecoveringReport {
    pub losses: Vec<f32>,
    pub step_ms: Vec<f64>,
    pub recoveries: Vec<Recovery>,
    pub final_plan: DataParallelPlan,
}

/// Trains `steps` steps of `plan`, surviving lost workers: when initialisation or a step fails
/// (an unreachable task fails it within the session's operation timeout, a hung one at the run
/// deadline) and some replica's task no longer answers, `replan` gets the reachable workers, a
/// new session continues from the variables on the ps (only the new replicas' synthetic batches
/// are initialised) and the step is retried — at most `max_recoveries` times. `before_step` runs
/// before every step attempt (drift or fault injection, progress). A failure with every worker
/// reachable is returned as is.
///
/// # Errors
/// The failing run's error when no worker was lost or recoveries ran out; errors of `replan`.
#[allow(clippy::too_many_arguments)]
pub fn train_recovering(
    name: &str,
    plan: DataParallelPlan,
    cluster: &Cluster,
    config: &SessionConfig,
    tf_config: &TfConfig,
    steps: usize,
    max_recoveries: usize,
    mut replan: impl FnMut(&[String]) -> Result<DataParallelPlan>,
    mut before_step: impl FnMut(usize),
) -> Result<RecoveringReport> {
    let (mut trainer, _, _) = prepare(name, &plan, cluster, config, 1)?;
    let mut current = plan;
    let mut report = RecoveringReport {
        losses: Vec::new(),
        step_ms: Vec::new(),
        recoveries: Vec::new(),
        final_plan: current.clone(),
    };
    // What the next session must initialise: everything at first, then only the new batches.
    let mut pending_init = Some("init");
    let mut step = 0;
    while step < steps {
        let attempt = match pending_init {
            Some(op) => trainer.run_op(op).map(|_| None),
            None => {
                before_step(step);
                trainer.step(step, false).map(Some)
            }
        };
        match attempt {
            Ok(None) => pending_init = None,
            Ok(Some((loss, ms, _))) => {
                report.losses.push(loss);
                report.step_ms.push(ms);
                step += 1;
            }
            Err(e) => {
                let used: Vec<String> = current.replicas.iter().map(|r| r.device.clone()).collect();
                let alive = reachable(&used, tf_config);
                if alive.len() == used.len()
                    || alive.is_empty()
                    || report.recoveries.len() >= max_recoveries
                {
                    return Err(e);
                }
                let lost: Vec<String> = used.into_iter().filter(|d| !alive.contains(d)).collect();
                log::warn!("step {step} failed ({e}); lost {lost:?}; re-planning on {alive:?}");
                current = replan(&alive)?;
                trainer = prepare(name, &current, cluster, config, 1)?.0;
                if pending_init.is_none() {
                    pending_init = Some("init_data");
                }
                report.recoveries.push(Recovery {
                    step,
                    lost,
                    error: e.to_string(),
                    plan: current.clone(),
                });
            }
        }
    }
    report.final_plan = current;
    Ok(report)
}
