//! What trains: a strategy, its plan, and how it adjusts while training ([`Contender`]).

use crate::cluster::tf_config::TfConfig;
use crate::cluster::Cluster;
use crate::error::Result;
pub use crate::parallel::{check_backups, Feedback};
use crate::parallel::{DataParallelPlan, DataParallelPlanner, DataParallelStrategy, Updates};
use crate::runtime::adapt::{MetricsSource, Replanning};

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

/// Where a [`contender`] is planned and how it trains.
#[derive(Debug)]
pub struct Planning<'a> {
    /// The cluster with its live availability and free memory.
    pub cluster: &'a Cluster,
    /// `infra-aware` traces every this many steps to measure its replicas ([`Feedback`]; 0:
    /// never re-sizes; the planner's [`RESIZE_EVERY`](crate::parallel::RESIZE_EVERY) by
    /// default).
    pub resize_every: usize,
    /// Where live re-planning reads the workers' metrics (`None`: step windows only).
    pub metrics: Option<&'a MetricsSource>,
    /// The cluster's tasks, for recovery from lost ones (`None`: no recovery).
    pub tasks: Option<&'a TfConfig>,
}

/// The contender that `planner` makes ([`DataParallelPlanner::plan`] at the live state of
/// `at.cluster`):
/// - `replica-setter`: stock synchronous, equal shares;
/// - `async-ps`: ParameterServerStrategy — every worker steps on its own on global batch ÷
///   workers;
/// - `sync-backup:K`: SyncReplicasOptimizer with K backup workers, equal shares;
/// - `infra-aware`: synchronous, shares from the workers' figures (a calibration, else nominal
///   capability × availability) at the live availability, re-sized from measured replica times
///   ([`Feedback`], traced every `resize_every` steps);
/// - `infra-aware-async`: each worker's batch sized by the same planner so that every worker's
///   step takes as long and its updates arrive at the same rate (workers too slow to keep up get
///   no share and are left out), trained asynchronously only where that measurably pays,
///   synchronously otherwise.
///
/// # Errors
/// The planner's errors.
pub fn contender(planner: DataParallelPlanner, at: &Planning<'_>) -> Result<Contender> {
    let strategy = planner.strategy();
    let plan = planner.plan(at.cluster)?;
    let feedback = planner.feedback(at.cluster, at.resize_every);
    Ok(Contender {
        strategy,
        plan,
        feedback,
        replanning: Some(Replanning {
            planner,
            metrics: at.metrics.cloned(),
            tasks: at.tasks.cloned(),
        }),
    })
}
