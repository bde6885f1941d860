//! What trains: a strategy, its plan, and how it adjusts while training ([`Contender`]).

use super::bad;
use crate::cluster::tf_config::TfConfig;
use crate::cluster::Cluster;
use crate::error::Result;
use crate::parallel::{
    DataParallelPlan, DataParallelStrategy, InfraAwareOptions, Shares, Updates, VarInfo,
    WorkerCapacity,
};
use crate::runtime::adapt::{MetricsSource, Replanning};

/// LB-BSP-style re-sizing of a synchronous plan's shares from measured replica times.
#[derive(Clone, Debug)]
pub struct Feedback {
    /// Every `every`-th step is traced to measure the replicas (the interval doubling, up to
    /// eight times, while decisions keep the shares); after three measurements of each the
    /// shares are re-sized when the lower confidence bound of the predicted gain, given the noise
    /// of those measurements, is at least `options.min_gain`
    /// ([`decide_resize`](crate::parallel::noise::decide_resize)).
    pub every: usize,
    /// The calibration the plan was made from (fixed per-step costs, workers left out).
    pub capacity: Vec<WorkerCapacity>,
    /// Parameter servers and their relative speed, as for
    /// [`infra_aware`](crate::parallel::infra_aware).
    pub ps: Vec<(String, f64)>,
    /// The variables.
    pub vars: Vec<VarInfo>,
    /// The planner's options.
    pub options: InfraAwareOptions,
}

/// One contender: a strategy, its plan and how it trains.
#[derive(Clone, Debug)]
pub struct Contender {
    /// The strategy.
    pub strategy: DataParallelStrategy,
    /// Workers, their shares (asynchronous and backup: each worker's per-step batch) and ps.
    pub plan: DataParallelPlan,
    /// Re-sizing of the shares (synchronous only).
    pub feedback: Option<Feedback>,
    /// What the plan is made again from when a worker moves (live re-planning,
    /// [`TrainingOptions::adapt`](super::TrainingOptions::adapt); calibrated plans only) or a
    /// task is lost ([`TrainingOptions::recover`](super::TrainingOptions::recover)).
    pub replanning: Option<Replanning>,
}

impl Contender {
    /// How its gradients reach the variables.
    pub fn updates(&self) -> Updates {
        self.strategy.updates()
    }
}

/// What [`contender`] plans from.
#[derive(Debug)]
pub struct Planning<'a> {
    /// Worker devices (first CPU of each worker task).
    pub workers: &'a [String],
    /// Parameter-server devices.
    pub ps: &'a [String],
    /// The variables to place on the ps tasks.
    pub vars: &'a [VarInfo],
    /// Samples per synchronous step; the asynchronous contenders' per-worker batches sum to it.
    pub global_batch: usize,
    /// Calibrated workers (for the infra-aware strategies).
    pub calibration: &'a [WorkerCapacity],
    /// The cluster with its live availability and free memory.
    pub cluster: &'a Cluster,
    /// Replica memory, capping shares by free memory.
    pub memory: Option<&'a crate::parallel::ReplicaMemory>,
    /// Synchronisation cost per replica assumed by the planner, ms.
    pub per_replica_overhead_ms: f64,
    /// `infra-aware` traces every this many steps to measure its replicas ([`Feedback`]; 0:
    /// never re-sizes).
    pub resize_every: usize,
    /// Where live re-planning reads the workers' metrics (`None`: step windows only).
    pub metrics: Option<&'a MetricsSource>,
    /// The cluster's tasks, for recovery from lost ones (`None`: no recovery).
    pub tasks: Option<&'a TfConfig>,
}

/// The contender of `strategy`:
/// - `replica-setter`: stock synchronous, equal shares;
/// - `async-ps`: ParameterServerStrategy — every worker steps on its own on global batch ÷
///   workers;
/// - `sync-backup:K`: SyncReplicasOptimizer with K backup workers, equal shares;
/// - `infra-aware`: synchronous, shares from the calibration at the live availability,
///   re-sized from measured replica times ([`Feedback`], traced every `resize_every` steps);
/// - `infra-aware-async`: each worker's batch sized by the same planner so that every worker's
///   step takes as long and its updates arrive at the same rate (workers too slow to keep up get
///   no share and are left out), trained asynchronously only where that measurably pays,
///   synchronously otherwise.
///
/// # Errors
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for as many backup workers as workers, or a calibrated strategy
/// without a calibration; the planners' errors.
pub fn contender(strategy: DataParallelStrategy, p: &Planning<'_>) -> Result<Contender> {
    let options = InfraAwareOptions {
        per_replica_overhead_ms: p.per_replica_overhead_ms,
        ..InfraAwareOptions::default()
    };
    if let Updates::Backup { backups } = strategy.updates() {
        check_backups(backups, p.workers.len())?;
    }
    let mut plan = match strategy.shares() {
        Shares::Equal => crate::parallel::replica_setter(p.workers, p.ps, p.vars, p.global_batch)?,
        Shares::Calibrated => {
            if p.calibration.is_empty() {
                return Err(bad(
                    "calibration",
                    format!(
                        "`{strategy}` sizes shares from a calibration of the workers; none given"
                    ),
                ));
            }
            crate::parallel::plan_live(
                p.calibration,
                p.cluster,
                p.ps,
                p.vars,
                p.global_batch,
                p.memory,
                &options,
            )?
        }
    };
    plan.strategy = strategy.to_string();
    let feedback =
        (strategy == DataParallelStrategy::InfraAware && p.resize_every > 0).then(|| Feedback {
            every: p.resize_every,
            capacity: crate::parallel::live_capacities(p.calibration, p.cluster, p.memory),
            ps: crate::parallel::ps_capacities(p.ps, p.cluster),
            vars: p.vars.to_vec(),
            options: options.clone(),
        });
    let replanning = Some(Replanning {
        calibration: p.calibration.to_vec(),
        ps: p.ps.to_vec(),
        vars: p.vars.to_vec(),
        global_batch: p.global_batch,
        memory: p.memory.copied(),
        options: options.clone(),
        metrics: p.metrics.cloned(),
        tasks: p.tasks.cloned(),
    });
    Ok(Contender {
        strategy,
        plan,
        feedback,
        replanning,
    })
}

/// Checks that `backups` backup workers of `workers` leave a gradient to aggregate.
///
/// # Errors
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming the backup workers.
pub fn check_backups(backups: usize, workers: usize) -> Result<()> {
    if backups >= workers {
        return Err(bad(
            "backup workers",
            format!("{backups} of {workers} workers: at least one gradient must be aggregated"),
        ));
    }
    Ok(())
}
