//! Data-parallel plans on a cluster, below the trainer: which tasks are workers and ps
//! ([`worker_and_ps_devices`]), a plan's session with synthetic batches on the workers to time
//! its steps side by side with other plans ([`prepare`], [`train`]), calibrating each worker's
//! throughput through TensorFlow itself ([`calibrate_workers`]), and which tasks still answer.
//! Training a user's job — their data, every strategy, recovery from lost tasks, adaptation — is
//! the one trainer, [`crate::runtime::trainer`].

mod calibrate;
pub(crate) mod probe;

use std::sync::Arc;

use super::replicated::{self as graph_replicated, GraphWorkload, Workload};
use super::session::PlacedSession;
use super::train::{TrainReport, Trainer};
use crate::cluster::Cluster;
use crate::config::SessionConfig;
use crate::error::{Error, Result};
use crate::graph::analyze::analyze_graph;
use crate::graph::{DeviceName, DeviceType};
use crate::parallel::replicate::BatchData;
use crate::parallel::{DataParallelPlan, WorkerCapacity};
use crate::placer::apply;

pub use calibrate::{calibrate_workers, WorkerProbe};

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

/// Times `plan` for `workload` on synthetic batches that live on the workers: `steps` timed
/// steps after `warmup` (a step timer of a fixed plan, as [`prepare`]; no recovery).
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
    let (trainer, placement, graph) = prepare(workload, plan, cluster, config, seed)?;
    trainer.train(steps, warmup, Some((&placement, &graph, cluster)))
}

/// A ready-to-step session of `plan` with synthetic batches on the workers, its placement and
/// graph (for checks): for timing single steps of fixed plans side by side (the benchmark's
/// images/s tables). Training — the user's data, any strategy, recovery — is
/// [`DataParallel::fit`](crate::pipeline::DataParallel::fit).
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
    let built = graph_replicated::build(&graph, plan, cluster)?;
    let session = plan_session(plan, &built.analyzed, &built.placement, cluster, config)?;
    let trainer = Trainer::new(session, &built.replication.sidecar, None, seed)?;
    Ok((trainer, built.placement, built.analyzed.op_graph))
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

/// Each replica's busy window in one traced step of `plan`, ms (replicas without one are left
/// out).
pub(crate) fn replica_spans_ms(
    plan: &DataParallelPlan,
    stats: &crate::graph::proto::StepStats,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parallel::Replica;

    const W0: &str = "/job:worker/replica:0/task:0/device:CPU:0";
    const PS0: &str = "/job:ps/replica:0/task:0/device:CPU:0";
    const PS1: &str = "/job:ps/replica:0/task:1/device:CPU:0";

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
        assert_eq!(plan_ps(&plan), vec![PS0.to_string(), PS1.to_string()]);
        assert_eq!(
            plan_tasks(&plan),
            vec![
                "/job:ps/replica:0/task:0".to_string(),
                "/job:ps/replica:0/task:1".into(),
                "/job:worker/replica:0/task:0".into()
            ]
        );
    }
}
