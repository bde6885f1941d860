//! Running synchronous data-parallel training on a cluster: calibrating each worker's throughput
//! through TensorFlow itself, and training a [`DataParallelPlan`].

use std::collections::BTreeMap;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::checkpoint::{self, Checkpoint, StateVar};
use super::liveness::{HangDetection, Watchdog};
use super::replicated::{self as graph_replicated, GraphWorkload, Workload};
use super::session::PlacedSession;
use super::stats::Mismatch;
use super::train::{StepTimes, TrainReport, Trainer};
use crate::apply;
use crate::cluster::tf_config::{TaskId, TfConfig};
use crate::cluster::Cluster;
use crate::config::SessionConfig;
use crate::error::{Error, Result, TfCode};
use crate::graph::analyze::analyze_graph;
use crate::graph::{DeviceName, DeviceType};
use crate::parallel::replicate::BatchData;
use crate::parallel::{noise, DataParallelPlan, Replica, WorkerCapacity};
use crate::proto::StepStats;

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
        if name.device_type != Some(DeviceType::Cpu) || name.id != Some(0) {
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
    workload: impl Into<Workload>,
    plan: &DataParallelPlan,
    cluster: &Cluster,
    config: &SessionConfig,
    steps: usize,
    warmup: usize,
    seed: u64,
) -> Result<TrainReport> {
    let trainer = prepare(workload, plan, cluster, config, seed)?;
    trainer
        .0
        .train(steps, warmup, Some((&trainer.1, &trainer.2)))
}

/// A ready-to-step trainer for `plan`, with its placement and graph (for checks).
///
/// # Errors
/// As [`train`].
pub fn prepare(
    workload: impl Into<Workload>,
    plan: &DataParallelPlan,
    cluster: &Cluster,
    config: &SessionConfig,
    seed: u64,
) -> Result<(Trainer, crate::placer::Placement, crate::graph::OpGraph)> {
    let p = prepare_run(workload, plan, cluster, config, seed)?;
    Ok((p.trainer, p.placement, p.op_graph))
}

/// A session over `plan`'s graph, ready to step, checkpoint and restore.
pub(crate) struct Prepared {
    pub trainer: Trainer,
    pub placement: crate::placer::Placement,
    pub op_graph: crate::graph::OpGraph,
    /// The training state a checkpoint holds (variables and optimiser slots).
    pub state: Vec<StateVar>,
}

/// As [`prepare`], with the training state's variables.
///
/// # Errors
/// As [`train`].
pub(crate) fn prepare_run(
    workload: impl Into<Workload>,
    plan: &DataParallelPlan,
    cluster: &Cluster,
    config: &SessionConfig,
    seed: u64,
) -> Result<Prepared> {
    // A zoo model is one user of the generic replication: its single-tower training graph at
    // the global batch, replicated like any graph, each replica's batch on its worker.
    let graph = match workload.into() {
        Workload::Zoo(name) => {
            let model = crate::models::zoo::build(&name, plan.global_batch().max(1), seed)?;
            let analyzed = analyze_graph(model.net.graph())?;
            Arc::new(GraphWorkload {
                name,
                analyzed,
                sidecar: model.sidecar,
                data: BatchData::Synthetic { seed: seed as i64 },
            })
        }
        Workload::Graph(g) => g,
    };
    let built = graph_replicated::build(&graph, plan)?;
    let (analyzed, placement, sidecar, state) = (
        built.analyzed,
        built.placement,
        built.replication.sidecar,
        built.replication.state,
    );
    let session = plan_session(plan, &analyzed, &placement, cluster, config)?;
    let trainer = Trainer::new(session, &sidecar, None, seed)?;
    Ok(Prepared {
        trainer,
        placement,
        op_graph: analyzed.op_graph,
        state,
    })
}

/// A session over a replicated graph placed for `plan` (device strings applied), restricted
/// to the tasks the plan uses: a lost worker outside it cannot stall the session.
///
/// # Errors
/// The errors of [`apply::apply`] and [`PlacedSession::new`].
pub(crate) fn plan_session(
    plan: &DataParallelPlan,
    analyzed: &crate::graph::analyze::Analyzed,
    placement: &crate::placer::Placement,
    cluster: &Cluster,
    config: &SessionConfig,
) -> Result<PlacedSession> {
    let placed = apply::apply(&analyzed.graph_def, &analyzed.op_graph, cluster, placement)?;
    let config = SessionConfig {
        device_filters: plan_tasks(plan),
        ..config.clone()
    };
    PlacedSession::new(placed.graph, &config)
}

/// Every task `plan` uses (its replicas', variables' and global step's), sorted: the device
/// filters of its sessions.
pub(crate) fn plan_tasks(plan: &DataParallelPlan) -> Vec<String> {
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
    tasks
}

/// Calibrates each worker through TensorFlow itself: trains model `name` on it alone (variables
/// on `ps`) with `probe_batch / 4`, `probe_batch / 2` and `probe_batch` samples — two warm-up
/// steps, then at least three timed steps and `min_seconds` of steps at each, the median
/// counting — and fits a fixed per-step cost and a marginal throughput
/// ([`WorkerCapacity::fit`]).
///
/// Only one worker steps at a time, so they do not disturb each other, but their probes are
/// **interleaved**: one step of each (worker, batch) in turn, round after round, so a change of
/// load on a shared machine (a build starting halfway through) falls on every worker alike
/// instead of on whichever was being probed. Workers whose probe steps cannot be told apart
/// in the noise measured among them get one figure ([`noise::fit_probes`]).
///
/// # Errors
/// As [`train`].
pub fn calibrate_workers(
    workload: impl Into<Workload>,
    workers: &[String],
    ps: &str,
    cluster: &Cluster,
    config: &SessionConfig,
    probe_batch: usize,
    min_seconds: f64,
) -> Result<Vec<WorkerCapacity>> {
    let workload = workload.into();
    let vars = workload.variables()?;
    let sizes = [
        (probe_batch / 4).max(1),
        (probe_batch / 2).max(2),
        probe_batch.max(3),
    ];
    /// One (worker, batch) probe: its session, the step times so far (ms) and their sum (s).
    struct Slot {
        worker: usize,
        batch: usize,
        trainer: Trainer,
        times: Vec<f64>,
        busy_s: f64,
    }
    let mut slots = Vec::with_capacity(workers.len() * sizes.len());
    for (worker, w) in workers.iter().enumerate() {
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
            let (trainer, _, _) = prepare(&workload, &plan, cluster, config, 1)?;
            trainer.init()?;
            trainer.time_step()?;
            trainer.time_step()?;
            slots.push(Slot {
                worker,
                batch,
                trainer,
                times: Vec::new(),
                busy_s: 0.0,
            });
        }
    }
    let done = |s: &Slot| s.times.len() >= 3 && (s.busy_s >= min_seconds || s.times.len() >= 50);
    while !slots.iter().all(done) {
        for slot in slots.iter_mut().filter(|s| !done(s)) {
            let ms = slot.trainer.time_step()?;
            slot.times.push(ms);
            slot.busy_s += ms / 1e3;
        }
    }
    let probes: Vec<noise::Probe> = workers
        .iter()
        .enumerate()
        .map(|(i, w)| noise::Probe {
            device: w.clone(),
            step_ms: slots
                .iter()
                .filter(|s| s.worker == i)
                .map(|s| (s.batch, s.times.clone()))
                .collect(),
        })
        .collect();
    let fit = noise::fit_probes(&probes);
    log::info!(
        "calibration: step-time noise {} ; workers pooled as equal: {:?}",
        fit.spread
            .map_or("unknown".to_string(), |s| format!("{:.0} %", s * 100.0)),
        fit.pooled
    );
    let mut out = fit.capacity;
    for capacity in &mut out {
        // The figures hold at the availability the worker had while it was timed.
        capacity.availability = cluster
            .index_of(&capacity.device)
            .map(|i| cluster.devices[i].availability);
        log::info!(
            "calibration: {}: {:.1} samples/s + {:.0} ms per step",
            capacity.device,
            capacity.samples_per_sec,
            capacity.fixed_ms
        );
    }
    Ok(out)
}

/// Each replica's busy window in one traced step of `plan`, ms (replicas without one are left
/// out).
pub(crate) fn replica_spans_ms(
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
    crate::parallel::noise::plan_step_ms(plan, capacity, per_replica_overhead_ms)
}

/// `host:port` of the task `device` names, from `tf_config`.
fn address_of<'a>(device: &str, tf_config: &'a TfConfig) -> Option<&'a str> {
    let name = DeviceName::parse(device).ok()?;
    tf_config.address(&TaskId {
        job: name.job?,
        index: name.task? as usize,
    })
}

/// Whether something accepts TCP connections at `address` (`host:port`) within 500 ms.
fn answers(address: &str) -> bool {
    address
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok())
}

/// Devices (of `plan`'s replicas, its ps, or any list) whose task still accepts connections.
pub(crate) fn reachable(devices: &[String], tf_config: &TfConfig) -> Vec<String> {
    devices
        .iter()
        .filter(|d| address_of(d, tf_config).is_some_and(answers))
        .cloned()
        .collect()
}

/// Waits up to `wait` (polling every 250 ms) for the tasks of `devices` to accept connections
/// again — a cluster manager restarting lost tasks at their address; returns those that did not.
fn wait_for(devices: &[String], tf_config: &TfConfig, wait: Duration) -> Vec<String> {
    let deadline = Instant::now() + wait;
    loop {
        let back = reachable(devices, tf_config);
        if back.len() == devices.len() || Instant::now() >= deadline {
            return without(devices, &back);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `all` without the entries of `gone`, in order.
fn without(all: &[String], gone: &[String]) -> Vec<String> {
    all.iter().filter(|d| !gone.contains(d)).cloned().collect()
}

/// The ps devices `plan` uses: every variable's device and the global device, sorted, distinct.
pub(crate) fn plan_ps(plan: &DataParallelPlan) -> Vec<String> {
    let mut ps: Vec<String> = plan
        .variable_devices
        .values()
        .chain(std::iter::once(&plan.global_device))
        .cloned()
        .collect();
    ps.sort();
    ps.dedup();
    ps
}

/// What a recovery had to replace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultKind {
    /// Workers were lost; the variables on the ps survived and training went on from them.
    Worker,
    /// A ps — and the variables it held — was lost; training went on from the latest checkpoint.
    Ps,
    /// Workers hung: a run passed its deadline while their agents stayed silent (a stopped or
    /// frozen process still accepts TCP). They were dropped as lost ones are; the variables on
    /// the ps survived.
    Hung,
}

/// A run whose deadline passed while every worker's agent answered: slow, not hung, so it was
/// run again with a doubled deadline and nobody was dropped.
#[derive(Clone, Debug, Serialize)]
pub struct DeadlineRetry {
    /// Global step whose attempt (or the initialisation or checkpoint before it) was retried.
    pub step: usize,
    /// The deadline that passed, ms.
    pub deadline_ms: f64,
}

/// A recovery: before which step, what was lost, the plan that replaced the old one, and how
/// training resumed.
#[derive(Clone, Debug, Serialize)]
pub struct Recovery {
    /// Global step whose attempt (or the initialisation or checkpoint before it) failed.
    pub step: usize,
    /// What was lost (a worker, a ps task, …).
    pub kind: FaultKind,
    /// Devices of the lost tasks: workers that no longer answer, ps tasks that stopped
    /// answering or whose variables are gone (restarted).
    pub lost: Vec<String>,
    /// The failing run's error.
    pub error: String,
    /// The plan that replaced the old one.
    pub plan: DataParallelPlan,
    /// Session target after the recovery (`grpc://host:port`; another task when the master was
    /// lost for good).
    pub target: String,
    /// Step of the checkpoint restored (ps faults).
    pub restored_from: Option<usize>,
    /// Steps trained since that checkpoint, which were trained again.
    pub redone_steps: usize,
    /// Losses of the redone steps as first trained (the redone ones are in the report's losses).
    pub discarded_losses: Vec<f32>,
    /// How long the failing run took to return its error, ms.
    pub detect_ms: f64,
    /// From the error to the new session holding its state again (data re-initialised or the
    /// checkpoint restored), ms; `None` if training failed before that.
    pub recover_ms: Option<f64>,
}

/// Result of [`train_recovering`].
#[derive(Clone, Debug, Serialize)]
pub struct RecoveringReport {
    /// Loss of every global step (`steps` of them); a step redone after a restore counts once,
    /// as last trained.
    pub losses: Vec<f32>,
    /// Wall time of every global step, ms, as `losses`.
    pub step_ms: Vec<f64>,
    /// Every recovery, in order.
    pub recoveries: Vec<Recovery>,
    /// Runs retried after their deadline passed with every worker alive.
    pub deadline_retries: Vec<DeadlineRetry>,
    /// The plan in use when training ended.
    pub final_plan: DataParallelPlan,
    /// Steps run in all, redone ones included.
    pub steps_run: usize,
    /// Wall time of every checkpoint taken, ms.
    pub checkpoint_ms: Vec<f64>,
    /// Size of a checkpoint (variables and optimiser slots), bytes.
    pub checkpoint_bytes: usize,
    /// Device → ops step stats saw run there in the last step ([`RecoveryOptions::trace_last`]).
    pub executed: BTreeMap<String, usize>,
    /// Placed ops of the last step that ran elsewhere (should be empty).
    pub mismatches: Vec<Mismatch>,
    /// Step stats of the last step, when traced.
    #[serde(skip)]
    pub step_stats: Option<StepStats>,
    /// The latest checkpoint the driver kept.
    #[serde(skip)]
    pub checkpoint: Option<Checkpoint>,
}

impl RecoveringReport {
    /// The run as a [`TrainReport`] of `global_batch`-sample steps whose first `warmup` are
    /// not timed; a traced last step ([`RecoveryOptions::trace_last`]) is not timed either
    /// unless it is the only timed one.
    pub(crate) fn train_report(&self, warmup: usize, global_batch: usize) -> TrainReport {
        let mut times: Vec<f64> = self.step_ms.iter().skip(warmup).copied().collect();
        if self.step_stats.is_some() && times.len() > 1 {
            times.pop();
        }
        let step_ms = StepTimes::from_samples(&times).unwrap_or(StepTimes {
            median: 0.0,
            p10: 0.0,
            p90: 0.0,
        });
        TrainReport {
            steps: self.losses.len().saturating_sub(warmup),
            warmup: warmup.min(self.losses.len()),
            images_per_sec: if step_ms.median > 0.0 {
                global_batch as f64 / (step_ms.median / 1e3)
            } else {
                0.0
            },
            step_ms,
            step_ms_all: times,
            loss_first: self.losses.first().copied().unwrap_or(f32::NAN),
            loss_last: self.losses.last().copied().unwrap_or(f32::NAN),
            losses: self.losses.clone(),
            executed: self.executed.clone(),
            mismatches: self.mismatches.clone(),
            step_stats: self.step_stats.clone(),
        }
    }
}

/// How [`train_recovering`] checkpoints and recovers.
#[derive(Clone, Debug, PartialEq)]
pub struct RecoveryOptions {
    /// Recoveries allowed before a failure is returned as is.
    pub max_recoveries: usize,
    /// Steps between checkpoints (at least 1); one is also taken right after initialisation.
    pub checkpoint_every: usize,
    /// How long to wait for a ps that stopped answering to answer again at its address (a
    /// cluster manager restarting it) before its variables are re-planned onto the other ps.
    pub ps_wait: Duration,
    /// Trace the last step (FULL_TRACE) for [`RecoveringReport::executed`].
    pub trace_last: bool,
    /// Seed of the initialisers and synthetic batches (as [`train`]'s `seed`).
    pub seed: u64,
    /// Hung-worker detection: a deadline per run from the expected step, and liveness from
    /// the workers' metrics agents (TF_CONFIG `"metrics"`); `None`: every run has the
    /// session's own deadline and a hung worker stalls training until it passes.
    pub hang: Option<HangDetection>,
}

impl Default for RecoveryOptions {
    /// 3 recoveries, a checkpoint every 5 steps, 30 s for a lost ps to come back, no trace,
    /// seed 1, hung-worker detection as [`HangDetection::default`].
    fn default() -> Self {
        RecoveryOptions {
            max_recoveries: 3,
            checkpoint_every: 5,
            ps_wait: Duration::from_secs(30),
            trace_last: false,
            seed: 1,
            hang: Some(HangDetection::default()),
        }
    }
}

/// What a failure left behind, as [`train_recovering`] found it.
#[derive(Clone, Debug, Default, PartialEq)]
struct Damage {
    /// Workers of the plan that no longer answer (hung ones included).
    lost_workers: Vec<String>,
    /// Workers of the plan whose agents went silent while a run passed its deadline.
    hung: Vec<String>,
    /// Ps tasks of the plan that did not answer again within the wait.
    gone_ps: Vec<String>,
    /// Ps tasks that stopped answering and came back (without their variables).
    restarted_ps: Vec<String>,
    /// Devices whose variables hold no value in a new session (a ps restarted before the
    /// failure was looked at).
    emptied: Vec<String>,
    /// Whether the new plan puts some variable on another ps than the old one did.
    moved: bool,
    /// Sessions keep their variables to themselves (`isolate_session_state`): a new session
    /// never sees the old one's, so it always needs the checkpoint.
    isolated: bool,
}

impl Damage {
    /// Every lost device, distinct, in order: workers, then ps.
    fn lost(&self) -> Vec<String> {
        let mut lost: Vec<String> = Vec::new();
        for d in self
            .lost_workers
            .iter()
            .chain(&self.gone_ps)
            .chain(&self.restarted_ps)
            .chain(&self.emptied)
        {
            if !lost.contains(d) {
                lost.push(d.clone());
            }
        }
        lost
    }
}

/// What a new session runs before training goes on, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Resume {
    /// Only the new replicas' synthetic batches (`init_data`): the variables survived.
    InitData,
    /// `init`, then the latest checkpoint.
    Restore,
    /// `init` (nothing trained yet), then a first checkpoint.
    Init,
}

/// The kind of fault and how to resume, or `None` when nothing was lost (a failure that is not
/// a fault to recover from). When the variables are gone (a ps fault, or isolated sessions)
/// training resumes from the checkpoint; before the first, it starts over.
fn decide(damage: &Damage, has_checkpoint: bool) -> Option<(FaultKind, Resume)> {
    let ps_fault = !damage.gone_ps.is_empty()
        || !damage.restarted_ps.is_empty()
        || !damage.emptied.is_empty()
        || damage.moved;
    let kind = if ps_fault {
        FaultKind::Ps
    } else if !damage.hung.is_empty() {
        FaultKind::Hung
    } else if !damage.lost_workers.is_empty() {
        FaultKind::Worker
    } else {
        return None;
    };
    let resume = if !has_checkpoint {
        Resume::Init
    } else if ps_fault || damage.isolated {
        Resume::Restore
    } else {
        Resume::InitData
    };
    Some((kind, resume))
}

/// The session target after a recovery: `current` while its task answers (an empty,
/// in-process target is kept), else the first of `candidates` (`host:port`) that answers, as
/// `grpc://host:port`; `None` when none does.
fn choose_target(
    current: &str,
    candidates: &[String],
    answers: impl Fn(&str) -> bool,
) -> Option<String> {
    if current.is_empty() || answers(current.strip_prefix("grpc://").unwrap_or(current)) {
        return Some(current.to_string());
    }
    candidates
        .iter()
        .find(|a| answers(a))
        .map(|a| format!("grpc://{a}"))
}

/// A recovery ready to resume: the new plan, its session and what happened.
struct Assessed {
    plan: DataParallelPlan,
    run: Prepared,
    target: String,
    damage: Damage,
    kind: FaultKind,
    resume: Resume,
}

/// After a failed run: finds what was lost (waiting up to `options.ps_wait` for ps tasks that
/// stopped answering), re-plans when tasks are gone, opens a session on a target that answers
/// and, with a checkpoint to fall back on, probes which variables survived. `None` when nothing
/// was lost.
#[allow(clippy::too_many_arguments)]
fn assess(
    workload: &Workload,
    current: &DataParallelPlan,
    cluster: &Cluster,
    config: &SessionConfig,
    tf_config: &TfConfig,
    all_ps: &[String],
    previous: &[StateVar],
    options: &RecoveryOptions,
    has_checkpoint: bool,
    step: usize,
    hung: &[String],
    replan: &mut impl FnMut(&[String], &[String]) -> Result<DataParallelPlan>,
) -> Result<Option<Assessed>> {
    let workers: Vec<String> = current.replicas.iter().map(|r| r.device.clone()).collect();
    // A hung worker still accepts TCP: it is lost although its port answers.
    let alive_workers = reachable(&without(&workers, hung), tf_config);
    let used_ps = plan_ps(current);
    let down = without(&used_ps, &reachable(&used_ps, tf_config));
    let gone_ps = if down.is_empty() {
        Vec::new()
    } else {
        log::warn!(
            "step {step}: ps {down:?} stopped answering; waiting up to {:?} for it to come back",
            options.ps_wait
        );
        wait_for(&down, tf_config, options.ps_wait)
    };
    let mut damage = Damage {
        lost_workers: without(&workers, &alive_workers),
        hung: hung.to_vec(),
        restarted_ps: without(&down, &gone_ps),
        gone_ps,
        ..Damage::default()
    };
    let alive_ps = reachable(&without(all_ps, &damage.gone_ps), tf_config);
    if alive_workers.is_empty() {
        return Err(Error::Unrecoverable {
            step,
            lost: damage.lost().join(", "),
            reason: "no worker of the plan answers".into(),
        });
    }
    if alive_ps.is_empty() {
        return Err(Error::Unrecoverable {
            step,
            lost: damage.lost().join(", "),
            reason: format!(
                "no ps answers (waited {:?} for the lost ones to come back)",
                options.ps_wait
            ),
        });
    }
    let plan = if damage.lost_workers.is_empty() && damage.gone_ps.is_empty() {
        current.clone()
    } else {
        replan(&alive_workers, &alive_ps)?
    };
    damage.moved = plan.variable_devices != current.variable_devices;
    let candidates: Vec<String> = std::iter::once(plan.global_device.clone())
        .chain(plan_ps(&plan))
        .chain(plan.replicas.iter().map(|r| r.device.clone()))
        .filter_map(|d| address_of(&d, tf_config).map(String::from))
        .collect();
    let hung_addresses: Vec<&str> = hung
        .iter()
        .filter_map(|d| address_of(d, tf_config))
        .collect();
    let alive = |a: &str| !hung_addresses.contains(&a) && answers(a);
    let target =
        choose_target(&config.target, &candidates, alive).ok_or_else(|| Error::Unrecoverable {
            step,
            lost: damage.lost().join(", "),
            reason: format!(
                "neither the session master ({}) nor any task of the new plan answers",
                config.target
            ),
        })?;
    if target != config.target {
        log::warn!(
            "step {step}: the session master {} is lost; {target} masters from now on",
            config.target
        );
    }
    let session_config = SessionConfig {
        target: target.clone(),
        ..config.clone()
    };
    let run = prepare_run(workload, &plan, cluster, &session_config, options.seed)?;
    damage.isolated = config.isolate_state;
    // With isolated sessions every variable is new to this one: the probe cannot tell.
    if has_checkpoint && !damage.isolated {
        // A variable that stayed on its device and holds no value there was lost with it
        // (variables that moved are new where they went: `moved` covers them).
        let flags = checkpoint::initialized(run.trainer.session(), &run.state)?;
        for (v, ok) in run.state.iter().zip(flags) {
            let stayed = previous
                .iter()
                .any(|p| p.name == v.name && p.device == v.device);
            let device = v.device.clone().unwrap_or_else(|| "(unplaced)".into());
            if !ok && stayed && !damage.emptied.contains(&device) {
                damage.emptied.push(device);
            }
        }
    }
    let Some((kind, resume)) = decide(&damage, has_checkpoint) else {
        return Ok(None);
    };
    Ok(Some(Assessed {
        plan,
        run,
        target,
        damage,
        kind,
        resume,
    }))
}

/// Worker device → `host:port` of its task's metrics agent (TF_CONFIG `"metrics"`), for the
/// workers that have one.
fn agents_of(workers: &[String], tf_config: &TfConfig) -> BTreeMap<String, String> {
    workers
        .iter()
        .filter_map(|d| {
            let name = DeviceName::parse(d).ok()?;
            let task = TaskId {
                job: name.job?,
                index: name.task? as usize,
            };
            Some((d.clone(), tf_config.metrics_address(&task)?.to_string()))
        })
        .collect()
}

/// The deadline of the next run: `hang`'s, from the median of the last five measured steps,
/// after `retries` retries, at least [`HangDetection::first_runs`] for one of a session's
/// `first` runs; never beyond the session's own run deadline (`run_timeout_ms`, 0: none).
fn run_deadline(
    hang: &HangDetection,
    step_ms: &[f64],
    retries: u32,
    first: bool,
    run_timeout_ms: i64,
) -> Duration {
    let recent = &step_ms[step_ms.len().saturating_sub(5)..];
    let expected = StepTimes::from_samples(recent).map(|s| s.median);
    let mut d = hang.deadline(expected, retries);
    if first {
        d = d.max(hang.first_runs);
    }
    match u64::try_from(run_timeout_ms) {
        Ok(ms) if ms > 0 => d.min(Duration::from_millis(ms)),
        _ => d,
    }
}

/// Whether `e` is a run that passed its deadline (TensorFlow's DEADLINE_EXCEEDED).
fn passed_deadline(e: &Error) -> bool {
    e.tf_code() == Some(TfCode::DeadlineExceeded)
}

/// Sessions of a failed plan being closed beside training (closing a session whose tasks are
/// gone blocks until the operation timeout). Dropping this waits for them a little, then leaves
/// the rest to finish on their own: training never waits out a dead task's deadline.
struct Closing(Vec<std::thread::JoinHandle<()>>);

/// How long the end of [`train_recovering`] waits for old sessions to close.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

impl Drop for Closing {
    fn drop(&mut self) {
        let deadline = Instant::now() + CLOSE_GRACE;
        while self.0.iter().any(|c| !c.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for c in self.0.drain(..) {
            if !c.is_finished() {
                log::debug!("an old session is still closing (bounded by its operation timeout)");
                continue;
            }
            if c.join().is_err() {
                log::warn!("closing the session of a failed plan panicked");
            }
        }
    }
}

/// Takes a checkpoint of `run`'s state after `step` steps, timing it into `report`.
fn save_checkpoint(
    run: &Prepared,
    step: usize,
    report: &mut RecoveringReport,
) -> Result<Checkpoint> {
    let started = Instant::now();
    let c = checkpoint::save(run.trainer.session(), &run.state, step)?;
    report
        .checkpoint_ms
        .push(started.elapsed().as_secs_f64() * 1e3);
    report.checkpoint_bytes = c.bytes();
    Ok(c)
}

/// Trains `steps` steps of `plan`, surviving lost workers and lost parameter servers.
///
/// The driver keeps a checkpoint in memory: every variable and optimiser slot, fetched from the
/// ps right after initialisation and every `options.checkpoint_every` steps. When
/// initialisation, a step or a checkpoint fails (an unreachable task fails it within the
/// session's operation timeout, a hung one at the run deadline), it looks at what was lost:
///
/// - a ps task that stops answering is waited for, up to `options.ps_wait` (a cluster manager
///   restarts lost tasks at their address); a ps that does not come back has its variables
///   re-planned onto the answering ps;
/// - workers that no longer answer are dropped: `replan(alive workers, alive ps)` makes the
///   new plan;
/// - the session master moves to a task of the new plan if its own task is gone;
/// - a new session probes which variables still hold values. If a ps was lost or restarted
///   (its variables are gone, or they moved), training resumes from the checkpoint: `init`,
///   then `restore`, and the steps since the checkpoint are trained again (their first losses
///   are kept in the [`Recovery`]). If only workers were lost, it goes on from the variables
///   on the ps (only the new replicas' synthetic batches are initialised). With
///   `config.isolate_state` a new session never sees the old one's variables, so every
///   recovery restores the checkpoint, and a ps restarted unseen (it answers again before the
///   failure is looked at) cannot be told from other failures.
///
/// At most `options.max_recoveries` recoveries; a failure with nothing lost is returned as is.
/// `before_step` runs before every step attempt (drift or fault injection, progress).
///
/// # Errors
/// [`Error::InvalidArgument`] for `checkpoint_every == 0`; the failing run's error when
/// nothing was lost or recoveries ran out; [`Error::Unrecoverable`] when no worker or no ps
/// answers; errors of `replan` and of opening the new session.
#[allow(clippy::too_many_arguments)]
pub fn train_recovering(
    workload: impl Into<Workload>,
    plan: DataParallelPlan,
    cluster: &Cluster,
    config: &SessionConfig,
    tf_config: &TfConfig,
    steps: usize,
    options: &RecoveryOptions,
    mut replan: impl FnMut(&[String], &[String]) -> Result<DataParallelPlan>,
    mut before_step: impl FnMut(usize),
) -> Result<RecoveringReport> {
    if options.checkpoint_every == 0 {
        return Err(Error::InvalidArgument {
            what: "checkpoint interval".into(),
            reason: "must be at least 1 step".into(),
        });
    }
    let (all_workers, all_ps) = worker_and_ps_devices(cluster)?;
    let mut config = config.clone();
    let workload = workload.into();
    let mut run = prepare_run(&workload, &plan, cluster, &config, options.seed)?;
    let mut current = plan;
    let mut report = RecoveringReport {
        losses: Vec::new(),
        step_ms: Vec::new(),
        recoveries: Vec::new(),
        deadline_retries: Vec::new(),
        final_plan: current.clone(),
        steps_run: 0,
        checkpoint_ms: Vec::new(),
        checkpoint_bytes: 0,
        executed: BTreeMap::new(),
        mismatches: Vec::new(),
        step_stats: None,
        checkpoint: None,
    };
    let mut latest: Option<Checkpoint> = None;
    // What the session must run before stepping; `None`: it is ready.
    let mut resume = Some(Resume::Init);
    // When the recovery in progress began (its error), until the session holds its state.
    let mut recovering: Option<Instant> = None;
    let mut closing = Closing(Vec::new());
    // Hung-worker detection: every worker's agent is probed in the background, and each run
    // gets a deadline from the expected step.
    let watchdog = options
        .hang
        .as_ref()
        .map(|h| Watchdog::start(agents_of(&all_workers, tf_config), h));
    // Retries of the current run after a deadline passed with every worker alive.
    let mut retries: u32 = 0;
    // Steps the current session has run (its first runs register the graph everywhere).
    let mut session_steps = 0usize;
    let mut step = 0;
    while step < steps {
        let first = resume.is_some() || session_steps == 0;
        let deadline = options
            .hang
            .as_ref()
            .map(|h| run_deadline(h, &report.step_ms, retries, first, config.run_timeout_ms));
        if let Some(d) = deadline {
            run.trainer
                .set_run_timeout_ms(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        }
        let mut started = Instant::now();
        let attempt = match (resume, &latest) {
            (Some(Resume::InitData), _) => run.trainer.run_op("init_data"),
            (Some(Resume::Restore), Some(c)) => run
                .trainer
                .init()
                .and_then(|()| checkpoint::restore(run.trainer.session(), &run.state, c)),
            (Some(_), _) => run.trainer.init().and_then(|()| {
                latest = Some(save_checkpoint(&run, step, &mut report)?);
                Ok(())
            }),
            (None, _) => {
                before_step(step);
                // Fault injection and progress are not part of the run that detects a fault.
                started = Instant::now();
                let trace = options.trace_last && step + 1 == steps;
                run.trainer.step(step, trace).and_then(|(loss, ms, stats)| {
                    report.losses.push(loss);
                    report.step_ms.push(ms);
                    report.steps_run += 1;
                    session_steps += 1;
                    if stats.is_some() {
                        report.step_stats = stats;
                    }
                    step += 1;
                    if step % options.checkpoint_every == 0 && step < steps {
                        latest = Some(save_checkpoint(&run, step, &mut report)?);
                    }
                    Ok(())
                })
            }
        };
        let e = match attempt {
            Ok(()) => {
                retries = 0;
                if resume.take().is_some() {
                    if let (Some(since), Some(r)) =
                        (recovering.take(), report.recoveries.last_mut())
                    {
                        r.recover_ms = Some(since.elapsed().as_secs_f64() * 1e3);
                    }
                }
                continue;
            }
            Err(e) => e,
        };
        let detect_ms = started.elapsed().as_secs_f64() * 1e3;
        let failed_at = Instant::now();
        if !matches!(e, Error::TensorFlow { .. }) {
            return Err(e);
        }
        // A run that passed its deadline: hung workers (agents silent) are lost; with every
        // worker alive the run was only slow, and is retried with a longer deadline.
        let mut hung = Vec::new();
        if let (Some(h), Some(dog), Some(d)) = (&options.hang, &watchdog, deadline) {
            if passed_deadline(&e) {
                let workers: Vec<String> =
                    current.replicas.iter().map(|r| r.device.clone()).collect();
                hung = dog.silent(&workers);
                // Slow, not faulty, when nobody is hung and every task of the plan (and the
                // session master) still accepts connections; a lost task is recovered below.
                let tasks: Vec<String> = workers.iter().cloned().chain(plan_ps(&current)).collect();
                let master = config
                    .target
                    .strip_prefix("grpc://")
                    .unwrap_or(&config.target);
                let all_there = reachable(&tasks, tf_config).len() == tasks.len()
                    && (master.is_empty() || answers(master));
                if hung.is_empty() && all_there {
                    if retries >= h.max_retries {
                        return Err(e);
                    }
                    retries += 1;
                    log::warn!(
                        "step {step}: the run passed its {d:?} deadline but every worker's agent \
                         answers: retrying it with {:?}",
                        run_deadline(h, &report.step_ms, retries, first, config.run_timeout_ms)
                    );
                    report.deadline_retries.push(DeadlineRetry {
                        step,
                        deadline_ms: d.as_secs_f64() * 1e3,
                    });
                    continue;
                }
                log::warn!(
                    "step {step}: the run passed its {d:?} deadline and the agents of {hung:?} \
                     do not answer: hung"
                );
            }
        }
        if report.recoveries.len() >= options.max_recoveries {
            return Err(e);
        }
        let assessed = assess(
            &workload,
            &current,
            cluster,
            &config,
            tf_config,
            &all_ps,
            &run.state,
            options,
            latest.is_some(),
            step,
            &hung,
            &mut replan,
        )?;
        let Some(a) = assessed else {
            return Err(e);
        };
        let lost = a.damage.lost();
        log::warn!(
            "step {step} failed ({e}); lost {lost:?} ({:?} fault); resuming by {:?} on {}",
            a.kind,
            a.resume,
            a.target
        );
        // A restore still pending (its run failed) is not undone by a later worker fault.
        let next = resume.map_or(a.resume, |pending| pending.max(a.resume));
        let mut recovery = Recovery {
            step,
            kind: a.kind,
            lost,
            error: e.to_string(),
            plan: a.plan.clone(),
            target: a.target.clone(),
            restored_from: None,
            redone_steps: 0,
            discarded_losses: Vec::new(),
            detect_ms,
            recover_ms: None,
        };
        if let (Resume::Restore, Some(c)) = (next, &latest) {
            recovery.restored_from = Some(c.step);
            recovery.redone_steps = step - c.step;
            recovery.discarded_losses = report.losses.split_off(c.step);
            report.step_ms.truncate(c.step);
            step = c.step;
        }
        report.recoveries.push(recovery);
        current = a.plan;
        let old = std::mem::replace(&mut run, a.run);
        session_steps = 0;
        // Closing a session that spans a lost task blocks until the operation timeout: close it
        // beside training, so the new plan's steps start right away.
        closing.0.push(std::thread::spawn(move || drop(old)));
        config.target = a.target;
        resume = Some(next);
        recovering = Some(failed_at);
    }
    if let Some(stats) = &report.step_stats {
        report.executed = super::stats::executed_counts(stats);
        report.mismatches = super::stats::placement_mismatches(stats, &run.placement, |n| {
            run.op_graph
                .id(n)
                .map(|id| run.op_graph.node(id).op.as_str())
        });
    }
    report.final_plan = current;
    report.checkpoint = latest;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    const W0: &str = "/job:worker/replica:0/task:0/device:CPU:0";
    const PS0: &str = "/job:ps/replica:0/task:0/device:CPU:0";
    const PS1: &str = "/job:ps/replica:0/task:1/device:CPU:0";

    fn s(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn nothing_lost_is_not_a_fault() {
        assert_eq!(decide(&Damage::default(), true), None);
        assert_eq!(decide(&Damage::default(), false), None);
    }

    #[test]
    fn a_lost_worker_keeps_the_ps_state_and_a_lost_ps_restores_the_checkpoint() {
        let worker = Damage {
            lost_workers: s(&[W0]),
            ..Damage::default()
        };
        assert_eq!(
            decide(&worker, true),
            Some((FaultKind::Worker, Resume::InitData))
        );
        // Stopped answering and came back, never came back, restarted unseen (variables
        // empty in a new session), or variables moved to another ps: all lose the state.
        for ps in [
            Damage {
                restarted_ps: s(&[PS0]),
                ..Damage::default()
            },
            Damage {
                gone_ps: s(&[PS1]),
                ..Damage::default()
            },
            Damage {
                emptied: s(&[PS0]),
                ..Damage::default()
            },
            Damage {
                moved: true,
                ..Damage::default()
            },
            Damage {
                lost_workers: s(&[W0]),
                emptied: s(&[PS0]),
                ..Damage::default()
            },
        ] {
            assert_eq!(
                decide(&ps, true),
                Some((FaultKind::Ps, Resume::Restore)),
                "{ps:?}"
            );
            // Before the first checkpoint there is nothing to restore: start over.
            assert_eq!(
                decide(&ps, false),
                Some((FaultKind::Ps, Resume::Init)),
                "{ps:?}"
            );
        }
        assert_eq!(
            decide(&worker, false),
            Some((FaultKind::Worker, Resume::Init))
        );
    }

    #[test]
    fn a_pending_restore_outranks_a_later_worker_fault() {
        assert_eq!(Resume::Restore.max(Resume::InitData), Resume::Restore);
        assert_eq!(Resume::Init.max(Resume::Restore), Resume::Init);
    }

    #[test]
    fn lost_devices_are_listed_once() {
        let d = Damage {
            lost_workers: s(&[W0]),
            restarted_ps: s(&[PS0]),
            emptied: s(&[PS0, PS1]),
            ..Damage::default()
        };
        assert_eq!(d.lost(), s(&[W0, PS0, PS1]));
    }

    #[test]
    fn the_master_moves_only_when_it_no_longer_answers() {
        let up = |alive: &'static [&'static str]| move |a: &str| alive.contains(&a);
        let candidates = s(&["10.0.0.2:2222", "10.0.0.3:2222"]);
        assert_eq!(
            choose_target("grpc://10.0.0.1:2222", &candidates, up(&["10.0.0.1:2222"])),
            Some("grpc://10.0.0.1:2222".into())
        );
        assert_eq!(
            choose_target("grpc://10.0.0.1:2222", &candidates, up(&["10.0.0.3:2222"])),
            Some("grpc://10.0.0.3:2222".into())
        );
        assert_eq!(
            choose_target("grpc://10.0.0.1:2222", &candidates, up(&[])),
            None
        );
        assert_eq!(choose_target("", &candidates, up(&[])), Some(String::new()));
    }

    #[test]
    fn a_recovering_run_reports_like_a_plain_one() {
        let plan = DataParallelPlan {
            strategy: "test".into(),
            replicas: vec![],
            variable_devices: BTreeMap::new(),
            global_device: PS0.into(),
            predicted_step_ms: None,
        };
        let mut r = RecoveringReport {
            losses: vec![2.0, 1.9, 1.8, 1.7, 1.6],
            step_ms: vec![900.0, 100.0, 120.0, 110.0, 400.0],
            recoveries: vec![],
            deadline_retries: vec![],
            final_plan: plan,
            steps_run: 5,
            checkpoint_ms: vec![],
            checkpoint_bytes: 0,
            executed: BTreeMap::new(),
            mismatches: vec![],
            step_stats: Some(StepStats::default()),
            checkpoint: None,
        };
        // Warm-up and the traced last step are not timed.
        let t = r.train_report(1, 32);
        assert_eq!((t.steps, t.warmup), (4, 1));
        assert_eq!(t.step_ms_all, vec![100.0, 120.0, 110.0]);
        assert_eq!(t.step_ms.median, 110.0);
        assert!((t.images_per_sec - 32.0 / 0.110).abs() < 1e-6);
        assert_eq!((t.loss_first, t.loss_last), (2.0, 1.6));
        r.step_stats = None;
        assert_eq!(r.train_report(4, 32).step_ms_all, vec![400.0]);
    }

    #[test]
    fn plan_ps_lists_variable_and_global_devices_once() {
        let plan = DataParallelPlan {
            strategy: "test".into(),
            replicas: vec![Replica {
                device: W0.into(),
                batch: 4,
            }],
            variable_devices: [("a", PS1), ("b", PS0), ("c", PS1)]
                .into_iter()
                .map(|(v, d)| (v.to_string(), d.to_string()))
                .collect(),
            global_device: PS0.into(),
            predicted_step_ms: None,
        };
        assert_eq!(plan_ps(&plan), s(&[PS0, PS1]));
    }
}
