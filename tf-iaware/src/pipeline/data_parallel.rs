//! Data-parallel training through the same door: plan a model's replicas over a connected
//! cluster's workers and ps tasks with any [`DataParallelStrategy`]
//! ([`Connection::plan_data_parallel`]), then train the user's job on the user's data
//! ([`DataParallel::fit`]: every strategy, held-out evaluation, stop at steps, epochs, seconds or
//! a target), or time synthetic steps of a synchronous plan, recovering from lost tasks
//! ([`DataParallel::train`]). The model is any training graph with its sidecar
//! ([`Workload::graph`], replicated by [`parallel::replicate`](crate::parallel::replicate)) or a zoo model by name.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::limits::MAX_STEPS;
use crate::parallel::{
    DataParallelPlan, DataParallelPlanner, DataParallelStrategy, Updates, WorkerCapacity,
};
use crate::runtime::adapt::{MetricsSource, Replanning};
use crate::runtime::calibrate::{self, CalibrateOptions};
use crate::runtime::data_parallel;
use crate::runtime::replicated::Workload;
use crate::runtime::trainer::{
    self, Contender, Job, OnProgress, RecoverOptions, Recovered, TracedStep, TrainingOptions,
    TrainingReport,
};
use crate::runtime::TrainReport;

use super::connection::Connection;

pub use crate::parallel::RESIZE_EVERY;

/// A data-parallel plan of a model on a connected cluster, ready to train.
pub struct DataParallel<'c> {
    connection: &'c Connection,
    workload: Workload,
    plan: DataParallelPlan,
    planner: DataParallelPlanner,
}

impl std::fmt::Debug for DataParallel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataParallel")
            .field("connection", &self.connection.spec())
            .field("strategy", &self.planner.strategy())
            .field("workload", &self.workload)
            .field("global_batch", &self.planner.global_batch())
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

/// How [`DataParallel::train`] trains.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainOptions {
    /// Timed steps (at least 1).
    pub steps: usize,
    /// Untimed warm-up steps before them.
    pub warmup: usize,
    /// Seed of the synthetic batches and of initialisation.
    pub seed: u64,
    /// Steps between the driver's in-memory checkpoints (one is also taken after init). A lost
    /// worker is re-planned around; a lost ps is waited for (up to the operation timeout) or
    /// re-planned around, and training goes on from the latest checkpoint. 0: no checkpoints
    /// and no recovery (the only choice on a cluster without TF_CONFIG).
    pub checkpoint_every: usize,
    /// Recoveries from lost tasks before a failure ends the run.
    pub max_recoveries: usize,
    /// Trace the last step (step stats: what ran where).
    pub trace_last: bool,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            steps: 10,
            warmup: 2,
            seed: 7,
            checkpoint_every: 5,
            max_recoveries: 3,
            trace_last: true,
        }
    }
}

/// What a data-parallel run did.
#[derive(Clone, Debug, Serialize)]
pub struct DataParallelReport {
    /// Strategy of the plan.
    pub strategy: String,
    /// Model trained: the zoo model's name, or the graph's.
    pub model: String,
    /// Samples per global step, over all replicas.
    pub global_batch: usize,
    /// The plan trained last (after any re-plan around a lost task).
    pub plan: DataParallelPlan,
    /// Measured worker throughputs the plan was made from (`infra-aware`).
    pub calibration: Option<Vec<WorkerCapacity>>,
    /// The training run of the last plan (step times, losses).
    #[serde(flatten)]
    pub train: TrainReport,
    /// Lost tasks recovered from (empty without faults or without checkpoints).
    pub recoveries: Vec<Recovered>,
    /// Steps run in all, those redone after restoring a checkpoint included.
    pub steps_run: usize,
    /// Wall time of each in-memory checkpoint of the variables, ms.
    pub checkpoint_ms: Vec<f64>,
    /// Size of a checkpoint, bytes.
    pub checkpoint_bytes: usize,
    /// The trainer's own report of the run.
    #[serde(skip)]
    pub fit: TrainingReport,
}

/// How [`Connection::plan_data_parallel_with`] learns what each worker can do, for the
/// strategies that size shares (`infra-aware`, `infra-aware-async`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WorkerCalibrationPolicy {
    /// A cached calibration whose fingerprint matches is used at once; without one, training
    /// starts at once from each worker's nominal capability × live availability, and the
    /// workers' throughput is learnt from the training steps themselves (LB-BSP feedback,
    /// re-sizing the shares when the gain clears the noise). No stop before training.
    #[default]
    Learn,
    /// A cached calibration, else every worker is calibrated through TensorFlow before the
    /// first step (and the result cached).
    Measure,
    /// Every worker is calibrated before the first step, the cache ignored and rewritten.
    Remeasure,
}

/// How [`Connection::plan_data_parallel_with`] plans.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataParallelOptions {
    /// Samples per synchronous step over every replica (`None`: the graph's fixed batch,
    /// else 32 per worker).
    pub global_batch: Option<usize>,
    /// How the workers' capability is learnt.
    pub calibration: WorkerCalibrationPolicy,
}

impl Connection {
    /// Plans `workload` (a graph with its sidecar, [`Workload::graph`] or [`Job::workload`], or
    /// a zoo model's name) data-parallel over this cluster's workers, variables on its ps tasks,
    /// with `strategy` (`"infra-aware".parse()?` converts a name): TensorFlow's recipes give
    /// every worker an equal share; the infra-aware ones size shares by each worker's capability
    /// at its live availability — from a cached calibration when one matches, else learnt from
    /// the training steps ([`WorkerCalibrationPolicy::Learn`]). `global_batch` defaults to the graph's
    /// fixed batch, else 32 per worker. The plan comes from the one
    /// [`DataParallelPlanner`](crate::parallel::DataParallelPlanner).
    ///
    /// # Errors
    /// As [`Connection::plan_data_parallel_with`].
    pub fn plan_data_parallel(
        &self,
        workload: impl Into<Workload>,
        strategy: DataParallelStrategy,
        global_batch: Option<usize>,
    ) -> Result<DataParallel<'_>> {
        self.plan_data_parallel_with(
            workload,
            strategy,
            &DataParallelOptions {
                global_batch,
                ..DataParallelOptions::default()
            },
        )
    }

    /// [`Connection::plan_data_parallel`] with its options: the global batch and how the
    /// workers' capability is learnt ([`WorkerCalibrationPolicy`]).
    ///
    /// # Errors
    /// [`Error::UnknownModel`]; the replication errors of [`parallel::replicate`](crate::parallel::replicate)
    /// ([`Error::Replication`] naming the op); [`Error::InvalidArgument`] for a cluster without
    /// workers or ps tasks, a zero batch or as many backup workers as workers;
    /// [`Error::TensorFlow`] if calibration runs fail.
    pub fn plan_data_parallel_with(
        &self,
        workload: impl Into<Workload>,
        strategy: DataParallelStrategy,
        options: &DataParallelOptions,
    ) -> Result<DataParallel<'_>> {
        let workload = workload.into();
        let mut planner =
            data_parallel_planner(&workload, strategy, self.cluster(), options.global_batch)?;
        if planner.sizes_shares() {
            if let Some(cal) = self.worker_calibration(&workload, &planner, options.calibration)? {
                planner = planner.with_calibration(cal);
            }
        }
        let plan = planner.plan(self.cluster())?;
        Ok(DataParallel {
            connection: self,
            workload,
            plan,
            planner,
        })
    }

    /// The workers' calibration under `policy`: the cache's when fresh, a new one where the
    /// policy measures, else `None` (learnt while training).
    fn worker_calibration(
        &self,
        workload: &Workload,
        planner: &DataParallelPlanner,
        policy: WorkerCalibrationPolicy,
    ) -> Result<Option<Vec<WorkerCapacity>>> {
        let (workers, ps) = (planner.workers(), &planner.ps()[0]);
        let probe = calibrate::WorkerProbe::from(planner.probe());
        if policy == WorkerCalibrationPolicy::Remeasure {
            calibrate::invalidate_workers(workload, probe, self.cluster(), workers, ps)?;
        }
        if policy == WorkerCalibrationPolicy::Learn {
            let cached = calibrate::cached_workers(workload, workers, ps, self.cluster(), probe)?;
            return Ok(cached.map(|c| {
                log::info!("worker calibration: cache hit ({})", c.path.display());
                c.capacity
            }));
        }
        let cal = calibrate::calibrate_workers_cached(
            workload,
            workers,
            ps,
            self.cluster(),
            self.session_config(),
            probe,
            &CalibrateOptions::default(),
        )?;
        if cal.cache_hit {
            log::info!("worker calibration: cache hit ({})", cal.path.display());
        }
        Ok(Some(cal.capacity))
    }
}

/// The one planner of `workload` with `strategy` over `cluster`'s workers and ps tasks, as
/// [`Connection::plan_data_parallel`] makes it before any calibration: its variables, a
/// replica's memory (shares capped by free memory), and `global_batch` (`None`: the graph's
/// fixed batch, else 32 per worker). The benchmark plans through it too.
///
/// # Errors
/// [`Error::UnknownModel`]; the replication errors of
/// [`parallel::replicate`](crate::parallel::replicate); [`Error::InvalidArgument`] for a
/// cluster without workers or ps tasks, a zero batch or as many backup workers as workers.
pub fn data_parallel_planner(
    workload: &Workload,
    strategy: DataParallelStrategy,
    cluster: &crate::cluster::Cluster,
    global_batch: Option<usize>,
) -> Result<DataParallelPlanner> {
    let vars = workload.variables()?;
    let (workers, ps) = data_parallel::worker_and_ps_devices(cluster)?;
    let batch = global_batch
        .or_else(|| match workload {
            Workload::Graph(g) => g.sidecar.batch_size(),
            Workload::Zoo(_) => None,
        })
        .unwrap_or(32 * workers.len());
    let memory = workload
        .replica_memory()
        .map_err(|e| log::warn!("replica memory of {} unknown: {e}", workload.name()))
        .ok();
    Ok(DataParallelPlanner::new(strategy, &workers, &ps, &vars, batch)?.with_memory(memory))
}

impl DataParallel<'_> {
    /// The strategy.
    pub fn strategy(&self) -> DataParallelStrategy {
        self.planner.strategy()
    }

    /// Trains `job` (the user's graph and data; the same graph this plan was made for) with
    /// this plan's strategy until a bound of `options` or the held-out target: each worker reads
    /// its own rows, asynchronous and backup-worker strategies follow TensorFlow's semantics, and
    /// `infra-aware` re-sizes its shares from measured replica times while it trains. With
    /// [`TrainingOptions::adapt`], a calibrated plan is also made again, between two steps, when
    /// a worker's live availability or step time moves (the cluster's agents, or this host's
    /// sampler, read in the background).
    ///
    /// # Errors
    /// As [`trainer::train`]: options out of range, adaptation of an uncalibrated plan, data that does not fit the graph (naming the
    /// input and file), a share larger than the data set, TensorFlow failures naming the run.
    pub fn fit(&self, job: &Job, options: &TrainingOptions) -> Result<TrainingReport> {
        let c = self.connection;
        // Asynchronous steps through each worker's own server unless the options say where.
        let own;
        let options = match (&options.own_masters, c.tf_config()) {
            (None, Some(tf_config))
                if matches!(
                    self.planner.strategy().updates(),
                    Updates::Async | Updates::Adaptive
                ) =>
            {
                own = TrainingOptions {
                    own_masters: Some(tf_config.clone()),
                    ..options.clone()
                };
                &own
            }
            _ => options,
        };
        let contender = Contender {
            strategy: self.planner.strategy(),
            plan: self.plan.clone(),
            feedback: self.planner.feedback(c.cluster(), RESIZE_EVERY),
            replanning: Some(Replanning {
                planner: self.planner.clone(),
                metrics: Some(match c.tf_config() {
                    Some(t) => MetricsSource::TfConfig(t.clone()),
                    None => MetricsSource::Local,
                }),
                tasks: c.tf_config().cloned(),
            }),
        };
        trainer::train(&contender, job, c.cluster(), c.session_config(), options)
    }

    /// The plan: each replica's worker and share, each variable's ps.
    pub fn plan(&self) -> &DataParallelPlan {
        &self.plan
    }

    /// The planner the plan came from (the same one the trainer re-sizes and re-plans with).
    pub fn planner(&self) -> &DataParallelPlanner {
        &self.planner
    }

    /// The measured worker throughputs the plan was made from (`None`: equal shares, or nominal
    /// figures learnt while training).
    pub fn calibration(&self) -> Option<&[WorkerCapacity]> {
        self.planner.calibration()
    }

    /// The plan for the workers and ps tasks still alive: the same strategy over them (shares
    /// from the same figures).
    ///
    /// # Errors
    /// The planner's errors ([`DataParallelPlanner::plan_over`]).
    pub fn replan(&self, alive: &[String], alive_ps: &[String]) -> Result<DataParallelPlan> {
        self.planner
            .plan_over(alive, alive_ps, self.connection.cluster())
    }

    /// Times synchronous steps of the plan on synthetic batches that live on the workers
    /// ([`Job::synthetic`]), through the same trainer as [`DataParallel::fit`]: `warmup` untimed
    /// steps, then `steps` timed ones, the last traced when `trace_last` asks. With
    /// `checkpoint_every > 0` (TF_CONFIG clusters) the run recovers from lost tasks
    /// ([`TrainingOptions::recover`]): a lost worker is re-planned around, a lost ps waited
    /// for or re-planned around, and training goes on from the driver's latest copy of the
    /// variables, each global step counted once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an asynchronous strategy (its steps have no common time:
    /// train it with [`DataParallel::fit`]), checkpoints on a cluster without TF_CONFIG, or
    /// steps out of range; as [`DataParallel::fit`].
    pub fn train(&self, options: &TrainOptions) -> Result<DataParallelReport> {
        let c = self.connection;
        if self.strategy().updates() != Updates::Sync {
            return Err(Error::InvalidArgument {
                what: format!("strategy `{}`", self.strategy()),
                reason: "timed synthetic steps are synchronous; train it with DataParallel::fit \
                         (Job::synthetic gives synthetic batches)"
                    .into(),
            });
        }
        let total = options.warmup + options.steps;
        if options.steps == 0 || total > MAX_STEPS {
            return Err(Error::InvalidArgument {
                what: "steps".into(),
                reason: format!(
                    "{} timed and {} warm-up steps: timed steps must be 1 to {MAX_STEPS} in all",
                    options.steps, options.warmup
                ),
            });
        }
        let recover = match options.checkpoint_every {
            0 => None,
            every => {
                c.tf_config().ok_or_else(|| Error::InvalidArgument {
                    what: "checkpoint interval".into(),
                    reason: format!(
                        "recovering from lost tasks needs a TF_CONFIG cluster (tf-config, \
                         emulated:…); `{}` is not one — use 0 (no checkpoints)",
                        c.spec()
                    ),
                })?;
                Some(RecoverOptions {
                    max_recoveries: options.max_recoveries,
                    every_updates: every as u64,
                    ps_wait: Duration::from_millis(
                        c.session_config().operation_timeout_ms.max(1_000) as u64,
                    ),
                    ..RecoverOptions::default()
                })
            }
        };
        // Enough rows that no share reads one twice in a step.
        let global_batch = self.planner.global_batch();
        let job = Job::synthetic(&self.workload, global_batch.max(1) * 16, options.seed)?;
        let steps = Arc::new(Mutex::new(StepLog::default()));
        let log = steps.clone();
        let fitted = self.fit(
            &job,
            &TrainingOptions {
                steps: Some(total as u64),
                epochs: None,
                seed: options.seed,
                progress: Some(OnProgress::every_step(move |p| {
                    let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                    log.run += 1;
                    log.by_update
                        .insert(p.updates, (p.step_ms.unwrap_or(f64::NAN), p.loss));
                })),
                recover,
                trace_last: options.trace_last,
                ..TrainingOptions::default()
            },
        )?;
        let log = std::mem::take(&mut *steps.lock().unwrap_or_else(|e| e.into_inner()));
        Ok(DataParallelReport {
            strategy: self.plan.strategy.clone(),
            model: self.workload.name().to_string(),
            global_batch,
            calibration: self.calibration().map(<[_]>::to_vec),
            train: log.train_report(options.warmup, global_batch, fitted.traced.clone()),
            steps_run: log.run,
            checkpoint_ms: fitted.safe_copies.iter().map(|c| c.seconds * 1e3).collect(),
            checkpoint_bytes: fitted.safe_copies.last().map_or(0, |c| c.bytes),
            recoveries: fitted.recoveries.clone(),
            plan: fitted.plan.clone(),
            fit: fitted,
        })
    }
}

/// What every synchronous step of [`DataParallel::train`] did, as its progress callback saw it.
#[derive(Debug, Default)]
struct StepLog {
    /// Steps run, those trained again after a recovery included.
    run: usize,
    /// Each update's (wall time, ms; loss), the latest run of it.
    by_update: BTreeMap<u64, (f64, Option<f32>)>,
}

impl StepLog {
    /// The timed steps' report: the steps after `warmup`, the traced last step's time left out
    /// (tracing slows it) unless it is the only timed one.
    fn train_report(
        &self,
        warmup: usize,
        global_batch: usize,
        traced: Option<TracedStep>,
    ) -> TrainReport {
        let timed: Vec<(u64, f64)> = self
            .by_update
            .range(warmup as u64 + 1..)
            .map(|(&u, &(ms, _))| (u, ms))
            .filter(|(_, ms)| ms.is_finite())
            .collect();
        let untraced = |&(u, _): &(u64, f64)| traced.as_ref().is_none_or(|t| t.update != u);
        let times: Vec<f64> = match timed.iter().filter(|s| untraced(s)).count() {
            0 => timed.iter().map(|&(_, ms)| ms).collect(),
            _ => timed
                .iter()
                .filter(|s| untraced(s))
                .map(|&(_, ms)| ms)
                .collect(),
        };
        let losses = self
            .by_update
            .values()
            .map(|(_, l)| l.unwrap_or(f32::NAN))
            .collect();
        let report = TrainReport::of_steps(warmup, global_batch, times, losses);
        match traced {
            Some(t) => TrainReport {
                executed: t.executed,
                mismatches: t.mismatches,
                step_stats: Some(t.stats),
                ..report
            },
            None => report,
        }
    }
}

/// Jobs from files: the graph, its sidecar and data files as a user has them on disk.
impl Job {
    /// The GraphDef at `graph` (its sidecar `meta`, else the `.json` beside it) trained on the
    /// data file `data` (`.npy`, `.npz`, TFRecord files of `tf.train.Example`, or a folder of
    /// them; see [`crate::data::open`]).
    ///
    /// # Errors
    /// As [`crate::pipeline::load_graph`], [`crate::pipeline::load_sidecar`],
    /// [`crate::data::open`] and [`Job::new`].
    pub fn load(
        graph: &std::path::Path,
        meta: Option<&std::path::Path>,
        data: &std::path::Path,
    ) -> Result<Job> {
        let analyzed = super::plan::load_graph(graph)?;
        let sidecar = super::plan::load_sidecar(graph, meta, &analyzed)?;
        let specs = crate::data::input_specs(&analyzed.op_graph, &sidecar)?;
        let train = crate::data::open(data, &specs)?;
        Job::new(
            &graph.display().to_string(),
            analyzed,
            sidecar,
            Box::new(train),
        )
    }

    /// [`Job::with_held_out`] of the data file `path` (as [`Job::load`] reads).
    ///
    /// # Errors
    /// As [`crate::data::open`] and [`Job::with_held_out`].
    pub fn with_held_out_file(self, path: &std::path::Path) -> Result<Job> {
        let data = crate::data::open(path, self.inputs())?;
        self.with_held_out(Box::new(data))
    }
}
