//! A job's graph replicated for a plan and its updates, and the session over it.

use tensorflow::{Operation, SessionRunArgs, Tensor};

use super::job::Job;
use super::report::TracedStep;
use crate::cluster::tf_config::{TaskId, TfConfig};
use crate::cluster::Cluster;
use crate::config::SessionConfig;
use crate::data::{Dataset, FeedTensor, InputSpec};
use crate::error::{Error, Result};
use crate::graph::proto::StepStats;
use crate::graph::{DeviceName, OpGraph};
use crate::parallel::replicate::{replica_name, Replication};
use crate::parallel::updates::{add_async_updates, add_backup_accumulators, isolate_resources};
use crate::parallel::{DataParallelPlan, Updates};
use crate::placer::Placement;
use crate::runtime::checkpoint::StateVar;
use crate::runtime::data_parallel::{self, plan_session};
use crate::runtime::replicated::build_with;
use crate::runtime::session::PlacedSession;
use crate::runtime::stats;

/// The targets of one built graph.
pub(super) enum Targets {
    /// Only the synchronous step ([`Built::sync`]).
    Sync,
    Async {
        train: Vec<Operation>,
        loss: Vec<Operation>,
    },
    Backup {
        push: Vec<Operation>,
        local_step: Vec<Operation>,
        train: Operation,
        num_required: Operation,
    },
}

/// A graph replicated for a plan and a session over it.
pub(super) struct Built {
    pub session: PlacedSession,
    /// Replica `k`'s own-master sibling session of `session` (`None`: `session` itself).
    pub masters: Vec<Option<usize>>,
    pub state: Vec<StateVar>,
    /// Replica `k`'s placeholder of every input, with the input's name.
    pub inputs: Vec<Vec<(Operation, String)>>,
    /// The synchronous step's train and loss (in every replicated graph).
    pub sync: (Operation, Operation),
    pub targets: Targets,
    /// Where the replicated graph's ops were placed, and its ops (to check a traced step).
    pub placed: (Placement, OpGraph),
}

impl Built {
    /// Replica `k`'s feeds of rows `rows` of `data` (its share of a step); none, and nothing
    /// read, when its batches live on its worker ([`Job::synthetic`]).
    ///
    /// # Errors
    /// The data set's errors reading the rows; [`Error::DataMissing`] if the batch lacks an
    /// input; as [`FeedTensor::from_host`].
    pub fn feeds(
        &self,
        k: usize,
        data: &dyn Dataset,
        rows: &[usize],
        specs: &[InputSpec],
    ) -> Result<Vec<(Operation, FeedTensor)>> {
        if self.inputs[k].is_empty() {
            return Ok(Vec::new());
        }
        let batch = data.rows(rows, specs)?;
        self.inputs[k]
            .iter()
            .map(|(op, name)| {
                let t = batch.tensors.get(name).ok_or_else(|| Error::DataMissing {
                    file: data.name().into(),
                    input: name.clone(),
                    available: batch.tensors.keys().cloned().collect::<Vec<_>>().join(", "),
                })?;
                Ok((op.clone(), FeedTensor::from_host(name, t)?))
            })
            .collect()
    }
}

impl Built {
    /// Update `update`'s traced step `stats`, checked against where the ops were placed on
    /// `cluster` (the one this graph was built for).
    pub fn traced(&self, update: u64, stats: &StepStats, cluster: &Cluster) -> TracedStep {
        let (placement, graph) = &self.placed;
        TracedStep {
            update,
            executed: stats::executed_counts(stats),
            mismatches: stats::placement_mismatches(
                stats,
                |name| placement.device_of(graph, cluster, name),
                |name| graph.id(name).map(|id| graph.node(id).op.as_str()),
            ),
            stats: stats.clone(),
        }
    }
}

/// Builds `job`'s graph for `plan` with `updates`, and a session over it (`tag` names this
/// run's shared resources).
pub(super) fn build(
    job: &Job,
    plan: &DataParallelPlan,
    updates: Updates,
    cluster: &Cluster,
    config: &SessionConfig,
    tag: &str,
    own_masters: Option<&TfConfig>,
) -> Result<Built> {
    enum Extra {
        Sync,
        Async(crate::parallel::updates::AsyncTargets),
        Backup(crate::parallel::updates::BackupTargets),
    }
    // Asynchronous steps on the workers' own masters: those sessions and the chief's share the
    // ps's variables, so none isolates its state; a container of this run's own keeps them
    // apart from other runs' as isolation would.
    let own_masters = own_masters.filter(|_| matches!(updates, Updates::Async | Updates::Adaptive));
    let container = (own_masters.is_some() && config.isolate_state).then(|| {
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{tag}-{n}")
    });
    let (g, extra) = build_with(&job.workload, plan, cluster, |rep: &mut Replication| {
        let extra = match updates {
            Updates::Sync => Extra::Sync,
            Updates::Async | Updates::Adaptive => Extra::Async(add_async_updates(rep)?),
            Updates::Backup { .. } => Extra::Backup(add_backup_accumulators(rep, tag)?),
        };
        if let Some(c) = &container {
            isolate_resources(&mut rep.graph_def, c)?;
        }
        Ok(extra)
    })?;
    let config = &SessionConfig {
        isolate_state: config.isolate_state && own_masters.is_none(),
        ..config.clone()
    };
    let mut session = plan_session(plan, &g.analyzed, &g.placement, cluster, config)?;
    let mut masters = vec![None; plan.replicas.len()];
    if let Some(tf_config) = own_masters {
        let filters = data_parallel::plan_tasks(plan);
        for (k, r) in plan.replicas.iter().enumerate() {
            let address = own_master(tf_config, &r.device)?;
            masters[k] = Some(session.open_sibling(&SessionConfig {
                target: format!("grpc://{address}"),
                device_filters: filters.clone(),
                ..config.clone()
            })?);
        }
    }
    let ops = |names: &[String], what: &str| -> Result<Vec<Operation>> {
        names.iter().map(|n| session.op(n, what)).collect()
    };
    let targets = match extra {
        Extra::Sync => Targets::Sync,
        Extra::Async(t) => Targets::Async {
            train: ops(&t.train, "asynchronous train")?,
            loss: ops(&t.loss, "replica loss")?,
        },
        Extra::Backup(t) => Targets::Backup {
            push: ops(&t.push, "backup push")?,
            local_step: ops(&t.local_step, "backup local step")?,
            train: session.op(&t.train, "backup train")?,
            num_required: session.op(&t.num_required, "backup num_required")?,
        },
    };
    // Batches that live on the workers are not fed.
    let fed = if job.feeds() {
        job.specs.as_slice()
    } else {
        &[]
    };
    let inputs = (0..g.replication.replicas.len())
        .map(|k| {
            fed.iter()
                .map(|s| {
                    Ok((
                        session.op(&replica_name(k, &s.name), "replica input")?,
                        s.name.clone(),
                    ))
                })
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    let sync = (
        session.op(&g.replication.sidecar.train, "train")?,
        session.op(&g.replication.sidecar.loss, "loss")?,
    );
    Ok(Built {
        sync,
        session,
        masters,
        state: g.replication.state,
        inputs,
        targets,
        placed: (g.placement, g.analyzed.op_graph),
    })
}

/// The address (`host:port`) of the server of the task that runs `device`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the device when it names no task of `tf_config`.
fn own_master<'a>(tf_config: &'a TfConfig, device: &str) -> Result<&'a str> {
    let bad = |reason: String| Error::InvalidArgument {
        what: "own master".into(),
        reason,
    };
    let name = DeviceName::parse(device)?;
    let task = match (name.job, name.task) {
        (Some(job), Some(index)) => TaskId {
            job,
            index: index as usize,
        },
        _ => return Err(bad(format!("device {device} names no job and task"))),
    };
    tf_config.address(&task).ok_or_else(|| {
        bad(format!(
            "task {} of device {device} is not in the TF_CONFIG",
            task.device_prefix()
        ))
    })
}

/// Where and under which deadline [`run`] runs.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Master {
    /// Sibling session of a replica's own master (`None`: the session's own).
    pub sibling: Option<usize>,
    /// Deadline of the run, ms (`None`: the session's).
    pub deadline_ms: Option<i64>,
}

/// Runs `targets` with `feeds` and the scalar feeds `int_feeds`/`int32_feeds`, fetching output 0
/// of `fetch` (a scalar loss) — on the master and under the deadline `on` names.
pub(super) fn run(
    session: &PlacedSession,
    on: Master,
    feeds: &[(Operation, FeedTensor)],
    int_feeds: &[(&Operation, &Tensor<i64>)],
    int32_feeds: &[(&Operation, &Tensor<i32>)],
    targets: &[&Operation],
    fetch: Option<&Operation>,
) -> Result<Option<f32>> {
    let mut args = SessionRunArgs::new();
    for (op, t) in feeds {
        t.add_feed(&mut args, op, 0);
    }
    for (op, t) in int_feeds {
        args.add_feed(op, 0, t);
    }
    for (op, t) in int32_feeds {
        args.add_feed(op, 0, t);
    }
    for op in targets {
        args.add_target(op);
    }
    let token = fetch.map(|op| args.request_fetch(op, 0));
    let describe = targets
        .iter()
        .map(|o| o.name().unwrap_or_default())
        .collect::<Vec<_>>()
        .join(", ");
    let timeout = on.deadline_ms.unwrap_or(session.run_timeout_ms);
    session.run_args_within(on.sibling, &mut args, false, &describe, timeout)?;
    token
        .map(|t| {
            args.fetch::<f32>(t)
                .map(|v| v.first().copied().unwrap_or(f32::NAN))
                .map_err(|e| {
                    crate::tf::status::error(format!("fetching the loss of {describe}"), &e)
                })
        })
        .transpose()
}
