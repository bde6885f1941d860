//! Data-parallel training on real data until a held-out accuracy is reached, DAWNBench-style,
//! with the contenders a TensorFlow user would pick:
//!
//! - [`Mode::Sync`]: one in-graph synchronous step over every replica (`replica-setter`'s equal
//!   shares or `infra-aware`'s calibrated ones), optionally re-sizing the shares from measured
//!   replica times every few steps ([`Feedback`], LB-BSP's idea);
//! - [`Mode::Async`]: ParameterServerStrategy/ClusterCoordinator semantics — every worker steps
//!   on its own share as fast as it can, at most one step in flight, its gradient applied on the
//!   ps as it arrives, no barrier (`async-ps` with equal shares, `infra-aware-async` with shares
//!   sized so that every worker's updates arrive at the same rate);
//! - [`Mode::Backup`]: SyncReplicasOptimizer semantics — each step aggregates the first N−k
//!   gradients of that step in `ConditionalAccumulator`s on the ps and drops the rest; workers
//!   take tokens from one shared queue as TensorFlow's do (N − k at the start, N after each
//!   step), so a fast worker may contribute several gradients to one step.
//! - [`Mode::Adaptive`] (`infra-aware-async`): the infra-aware shares, trained asynchronously
//!   only if a short asynchronous window reads clearly more images per second than a
//!   synchronous one (on balanced workers a barrier costs little and fresh gradients win).
//!
//! Held-out accuracy is measured every [`AccuracyOptions::eval_every_s`] seconds of training: the
//! workers are paused, the variables read from the ps and evaluated in a local session; the
//! pause is excluded from the training clock and reported.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tensorflow::{Operation, SessionRunArgs, Tensor};

use super::checkpoint::{self, Checkpoint, StateVar};
use super::data_parallel::{self, plan_session, replica_spans_ms};
use super::replicated::{build_with, GraphWorkload};
use super::session::PlacedSession;
use crate::cluster::tf_config::{TaskId, TfConfig};
use crate::cluster::Cluster;
use crate::config::SessionConfig;
use crate::data::{accuracy, LabelledImages, Sampler};
use crate::error::{Error, Result};
use crate::graph::analyze::{analyze_bytes, analyze_graph};
use crate::graph::DeviceName;
use crate::parallel::noise::{decide_resize, ResizeDecision};
use crate::parallel::replicate::{replica_name, replicate, BatchData, Replication};
use crate::parallel::updates::{add_async_updates, add_backup_accumulators, isolate_resources};
use crate::parallel::{DataParallelPlan, InfraAwareOptions, Replica, VarInfo, WorkerCapacity};

/// How the replicas' gradients reach the variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// One synchronous step over every replica, gradients combined in-graph.
    Sync,
    /// Every worker steps and updates on its own.
    Async,
    /// Each step takes the first N − `backups` gradients.
    Backup {
        /// Gradients each step does without.
        backups: usize,
    },
    /// Measures a synchronous and an asynchronous window of `PROBE_S` seconds each and goes
    /// on asynchronously only if that read at least `ASYNC_GAIN` times the images per second:
    /// stale gradients make an asynchronous sample worth less, so asynchrony must pay for it.
    /// A plan of equal shares (workers the planner did not tell apart) trains synchronously
    /// without probing: there is no straggler for asynchrony to hide.
    Adaptive,
}

/// Training seconds of each probe window of [`Mode::Adaptive`].
pub(crate) const PROBE_S: f64 = 1.5;
/// Images per second asynchronous training must read, relative to synchronous, to be chosen.
pub(crate) const ASYNC_GAIN: f64 = 1.25;

/// LB-BSP-style re-sizing of a synchronous plan's shares from measured replica times.
#[derive(Clone, Debug)]
pub struct Feedback {
    /// Every `every`-th step is traced to measure the replicas (the interval doubling, up to
    /// eight times, while decisions keep the shares); after three measurements of
    /// each the shares are re-sized when the lower confidence bound of the predicted gain,
    /// given the noise of those measurements, is at least `options.min_gain`
    /// ([`decide_resize`]).
    pub every: usize,
    /// The calibration the plan was made from (fixed per-step costs, workers left out).
    pub capacity: Vec<WorkerCapacity>,
    /// Parameter servers and their relative speed, as for [`infra_aware`](crate::parallel::infra_aware).
    pub ps: Vec<(String, f64)>,
    /// The variables.
    pub vars: Vec<VarInfo>,
    /// The planner's options.
    pub options: InfraAwareOptions,
}

/// One contender: a plan and how it trains.
#[derive(Clone, Debug)]
pub struct Contender {
    /// Name in reports (`async-ps`, `sync-backup`, …).
    pub name: String,
    /// Workers, their shares (in `Async` and `Backup`, each worker's per-step batch) and ps.
    pub plan: DataParallelPlan,
    /// How workers combine their gradients.
    pub mode: Mode,
    /// Re-sizing of the shares (`Sync` only).
    pub feedback: Option<Feedback>,
}

/// A model trained to an accuracy: a single-tower training graph whose sidecar names its
/// logits (replicated per plan like any data-parallel workload), a zoo model or a user's own.
pub struct AccuracyModel {
    /// The graph, its sidecar and its name, its batch fed per step.
    pub workload: GraphWorkload,
}

impl AccuracyModel {
    /// Zoo model `name`, initial values drawn with `seed`.
    ///
    /// # Errors
    /// [`Error::UnknownModel`]; the errors of building it.
    pub fn zoo(name: &str, seed: u64) -> Result<AccuracyModel> {
        let m = crate::models::zoo::build(name, 64, seed)?;
        AccuracyModel::graph(name, analyze_graph(m.net.graph())?, m.sidecar)
    }

    /// A training graph of the user's own; its sidecar must name the `logits` and mark the label
    /// input one-hot.
    ///
    /// # Errors
    /// [`Error::Sidecar`] if the sidecar has no `logits`, no one-hot label input, or not
    /// exactly one image input.
    pub fn graph(
        name: &str,
        analyzed: crate::graph::analyze::Analyzed,
        sidecar: super::Sidecar,
    ) -> Result<AccuracyModel> {
        let missing = |reason: &str| Error::Sidecar {
            path: name.into(),
            reason: reason.into(),
        };
        if sidecar.logits.is_none() {
            return Err(missing(
                "has no `logits` (the op whose output 0 is [batch, classes]): held-out accuracy \
                 needs it",
            ));
        }
        label_input(&sidecar)?;
        if sidecar.inputs.len() != 2 {
            return Err(missing(
                "needs exactly two inputs, the images and the one-hot labels",
            ));
        }
        Ok(AccuracyModel {
            workload: GraphWorkload {
                name: name.into(),
                analyzed,
                sidecar,
                data: BatchData::Feed,
            },
        })
    }

    /// Checks, without TensorFlow, that the model's graph can be trained in `mode`: replicated
    /// over two replicas and rewritten for it (asynchronous and backup-worker updates need towers
    /// that do not depend on each other).
    ///
    /// # Errors
    /// [`Error::Replication`] naming the op that prevents it.
    pub fn check_mode(&self, mode: Mode) -> Result<()> {
        let device = |k: usize| format!("/job:worker/replica:0/task:{k}/device:CPU:0");
        let plan = DataParallelPlan {
            strategy: "check".into(),
            replicas: (0..2)
                .map(|k| Replica {
                    device: device(k),
                    batch: 1,
                })
                .collect(),
            variable_devices: BTreeMap::new(),
            global_device: device(0),
            predicted_step_ms: None,
        };
        let w = &self.workload;
        let mut rep = replicate(
            &w.analyzed.graph_def,
            &w.analyzed.signatures,
            &w.sidecar,
            &plan,
            BatchData::Feed,
        )?;
        match mode {
            Mode::Sync => Ok(()),
            Mode::Async | Mode::Adaptive => add_async_updates(&mut rep).map(|_| ()),
            Mode::Backup { .. } => add_backup_accumulators(&mut rep, "check").map(|_| ()),
        }
    }

    /// Shape of one input image (the image input's shape without its batch dimension) and the
    /// number of classes (the label input's last dimension).
    ///
    /// # Errors
    /// [`Error::Sidecar`] if the sidecar lacks the inputs.
    pub fn input_shape(&self) -> Result<(Vec<i64>, usize)> {
        let sidecar = &self.workload.sidecar;
        let image = &sidecar.inputs[&image_input(sidecar)?];
        let label = &sidecar.inputs[&label_input(sidecar)?];
        Ok((
            image.iter().skip(1).copied().collect(),
            label.last().copied().unwrap_or(0).max(0) as usize,
        ))
    }
}

/// Real labelled images mapped into a model's input, split into training and held-out images.
#[derive(Clone, Debug)]
pub struct LabelledTask {
    /// The images trained on.
    pub train: LabelledImages,
    /// The held-out images accuracy is measured on.
    pub test: LabelledImages,
}

impl LabelledTask {
    /// The 8×8 digits ([`crate::data::digits`]) for `model`, `held_out` of each class held out
    /// (split drawn with `seed`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the model does not have ten classes, the images do not fit
    /// its input or the split is empty on a side.
    pub fn digits(model: &AccuracyModel, held_out: f64, seed: u64) -> Result<LabelledTask> {
        let (shape, classes) = model.input_shape()?;
        let all = crate::data::digits();
        if classes != all.classes {
            return Err(Error::InvalidArgument {
                what: format!("model `{}`", model.workload.name),
                reason: format!("has {classes} classes; the digits have {}", all.classes),
            });
        }
        let (train, test) = all.split(held_out, seed)?;
        Ok(LabelledTask {
            train: train.fit_to(&shape)?,
            test: test.fit_to(&shape)?,
        })
    }
}

/// When to evaluate and when to stop.
#[derive(Clone, Debug)]
pub struct AccuracyOptions {
    /// Held-out accuracy to reach, 0–1.
    pub target: f64,
    /// Seconds of training between evaluations.
    pub eval_every_s: f64,
    /// Give up after this many seconds of training.
    pub max_train_s: f64,
    /// Seeds the model's initial values and each worker's shuffle.
    pub seed: u64,
    /// Where asynchronous steps are mastered. `Some(tf_config)`: each worker's steps run through
    /// its own server (its address in `tf_config`), as TF2's `ParameterServerStrategy` has each
    /// worker run its own step function, inside the worker's CPU budget; the sessions share the
    /// ps's variables (a session-isolating `config` is kept by putting this run's resources in a
    /// container of their own, [`isolate_resources`]). `None`: every step through
    /// `config.target`, one master for all workers. Synchronous and backup-worker steps always
    /// run through `config.target` (the chief's session, as in TensorFlow's recipes).
    pub own_masters: Option<TfConfig>,
}

/// One evaluation.
#[derive(Clone, Debug, Serialize)]
pub struct AccuracyPoint {
    /// Training seconds so far (evaluations excluded).
    pub seconds: f64,
    /// Training images read so far ÷ training-set size.
    pub epoch: f64,
    /// Updates applied to the variables so far.
    pub updates: u64,
    /// Held-out accuracy, 0–1.
    pub accuracy: f64,
}

/// What one worker did.
#[derive(Clone, Debug, Serialize)]
pub struct WorkerCount {
    /// Worker device.
    pub device: String,
    /// Its share (per-step batch) at the end.
    pub batch: usize,
    /// Steps it ran (gradients it computed).
    pub steps: u64,
    /// Images it read.
    pub samples: u64,
}

/// The probe of [`Mode::Adaptive`].
#[derive(Clone, Debug, Serialize)]
pub struct Choice {
    /// Images per second of the synchronous window.
    pub sync_images_per_sec: f64,
    /// Of the asynchronous window (`None`: the target was reached before it, or no probe ran,
    /// see `even_split`).
    pub async_images_per_sec: Option<f64>,
    /// Whether training went on asynchronously.
    pub asynchronous: bool,
    /// The shares were the even split (shares within one sample of each other): no probe,
    /// synchronous training throughout.
    pub even_split: bool,
}

/// Whether `plan`'s shares are within one sample of each other over every replica.
fn is_even_split(plan: &DataParallelPlan) -> bool {
    let shares = plan.replicas.iter().map(|r| r.batch);
    match (shares.clone().min(), shares.max()) {
        (Some(lo), Some(hi)) => hi - lo <= 1 && plan.replicas.len() > 1,
        _ => false,
    }
}

/// The result of [`train_to_accuracy`].
#[derive(Clone, Debug, Serialize)]
pub struct AccuracyReport {
    /// Name of the contender.
    pub contender: String,
    /// How its workers combined their gradients.
    pub mode: Mode,
    /// Whether the target was reached before [`AccuracyOptions::max_train_s`].
    pub reached: bool,
    /// Training seconds until the first evaluation at or above the target.
    pub time_to_accuracy_s: Option<f64>,
    /// Training seconds in all.
    pub train_seconds: f64,
    /// Seconds spent evaluating (excluded from `train_seconds`).
    pub eval_seconds: f64,
    /// Updates applied to the variables.
    pub updates: u64,
    /// Training images read (gradients of dropped backup steps included).
    pub samples: u64,
    /// `samples` over the training images.
    pub epochs: f64,
    /// `samples / train_seconds`.
    pub images_per_sec: f64,
    /// Held-out accuracy at the end, 0–1.
    pub final_accuracy: f64,
    /// Held-out accuracy at each evaluation.
    pub curve: Vec<AccuracyPoint>,
    /// What each worker did.
    pub workers: Vec<WorkerCount>,
    /// Gradients computed but left out of every step (`Backup`): at most the gradients
    /// computed less N − k per update (a step takes all that arrived before it, N − k or more).
    pub dropped_gradients: u64,
    /// The shares after each re-size (`Feedback`).
    pub resized: Vec<Vec<usize>>,
    /// What [`Mode::Adaptive`] measured and chose.
    pub chosen: Option<Choice>,
    /// The plan at the end.
    pub plan: DataParallelPlan,
}

/// Names of the contenders [`contender`] makes: TensorFlow's stock recipes first.
pub const CONTENDERS: &[&str] = &[
    "replica-setter",
    "async-ps",
    "sync-backup",
    "infra-aware",
    "infra-aware-async",
];

/// How contender `name` (one of [`CONTENDERS`]) trains (backup workers: one, for the check).
pub fn contender_mode(name: &str) -> Mode {
    match name {
        "async-ps" => Mode::Async,
        "sync-backup" => Mode::Backup { backups: 1 },
        "infra-aware-async" => Mode::Adaptive,
        _ => Mode::Sync,
    }
}

/// What [`contender`] plans from.
pub struct Planning<'a> {
    /// Worker devices (first CPU of each worker task).
    pub workers: &'a [String],
    /// Parameter-server devices.
    pub ps: &'a [String],
    /// The variables to place on the ps tasks.
    pub vars: &'a [VarInfo],
    /// Samples per synchronous step; the asynchronous contenders' per-worker batches sum to it.
    pub global_batch: usize,
    /// Calibrated workers (for `infra-aware` and `infra-aware-async`).
    pub calibration: &'a [WorkerCapacity],
    /// The cluster with its live availability and free memory.
    pub cluster: &'a Cluster,
    /// Replica memory, capping shares by free memory.
    pub memory: Option<&'a crate::parallel::ReplicaMemory>,
    /// Synchronisation cost per replica assumed by the planner, ms.
    pub per_replica_overhead_ms: f64,
    /// Backup workers of `sync-backup` (k: each step aggregates N − k gradients).
    pub backups: usize,
    /// `infra-aware` traces every this many steps to measure its replicas ([`Feedback`]; 0:
    /// never re-sizes).
    pub resize_every: usize,
}

/// The contender called `name` (one of [`CONTENDERS`]):
/// - `replica-setter`: stock synchronous, equal shares;
/// - `async-ps`: ParameterServerStrategy — every worker steps on its own on global batch ÷
///   workers;
/// - `sync-backup`: SyncReplicasOptimizer with `backups` backup workers, equal shares;
/// - `infra-aware`: synchronous, shares from the calibration at the live availability, re-sized
///   from measured replica times ([`Feedback`], traced every `resize_every` steps);
/// - `infra-aware-async`: each worker's batch sized by the same planner so that every worker's
///   step takes as long and its updates arrive at the same rate (staleness stays about N − 1;
///   workers too slow to keep up get no share and are left out), trained asynchronously only
///   where that measurably pays ([`Mode::Adaptive`]), synchronously otherwise.
///
/// # Errors
/// [`Error::UnknownStrategy`] listing the contenders; the planners' errors.
pub fn contender(name: &str, p: &Planning<'_>) -> Result<Contender> {
    let options = InfraAwareOptions {
        per_replica_overhead_ms: p.per_replica_overhead_ms,
        ..InfraAwareOptions::default()
    };
    let equal = || crate::parallel::replica_setter(p.workers, p.ps, p.vars, p.global_batch);
    let aware = || {
        crate::parallel::plan_live(
            p.calibration,
            p.cluster,
            p.ps,
            p.vars,
            p.global_batch,
            p.memory,
            &options,
        )
    };
    let (plan, mode, feedback) = match name {
        "replica-setter" => (equal()?, Mode::Sync, None),
        "async-ps" => (equal()?, Mode::Async, None),
        "sync-backup" => (equal()?, Mode::Backup { backups: p.backups }, None),
        "infra-aware" => (
            aware()?,
            Mode::Sync,
            (p.resize_every > 0).then(|| Feedback {
                every: p.resize_every,
                capacity: crate::parallel::live_capacities(p.calibration, p.cluster, p.memory),
                ps: crate::parallel::ps_capacities(p.ps, p.cluster),
                vars: p.vars.to_vec(),
                options: options.clone(),
            }),
        ),
        "infra-aware-async" => (aware()?, Mode::Adaptive, None),
        other => {
            return Err(Error::UnknownStrategy {
                name: other.into(),
                known: CONTENDERS.join(", "),
            })
        }
    };
    let mut plan = plan;
    plan.strategy = name.into();
    Ok(Contender {
        name: name.into(),
        plan,
        mode,
        feedback,
    })
}

/// The evaluation of variables on held-out images, in a local session.
pub(crate) struct Evaluator {
    session: PlacedSession,
    state: Vec<StateVar>,
    x: Operation,
    logits: Operation,
    images: Tensor<f32>,
    labels: Vec<u8>,
    classes: usize,
}

/// The in-process CPU.
const LOCAL_CPU: &str = "/job:localhost/replica:0/task:0/device:CPU:0";

impl Evaluator {
    /// An evaluator of `model` on `test`.
    ///
    /// # Errors
    /// The errors of replicating and importing the model.
    pub(crate) fn new(model: &AccuracyModel, test: &LabelledImages) -> Result<Evaluator> {
        let (analyzed, sidecar) = (&model.workload.analyzed, &model.workload.sidecar);
        // One replica over the whole held-out set: the same checkpoint ops as training has.
        let plan = DataParallelPlan {
            strategy: "evaluation".into(),
            replicas: vec![Replica {
                device: LOCAL_CPU.into(),
                batch: test.len(),
            }],
            variable_devices: BTreeMap::new(),
            global_device: LOCAL_CPU.into(),
            predicted_step_ms: None,
        };
        let rep = replicate(
            &analyzed.graph_def,
            &analyzed.signatures,
            sidecar,
            &plan,
            BatchData::Feed,
        )?;
        let bytes = prost::Message::encode_to_vec(&rep.graph_def);
        let graph = analyze_bytes(&bytes, "the evaluation graph")?.graph;
        let session = PlacedSession::new(graph, &SessionConfig::default())?;
        let init = session.op(&rep.sidecar.init, "evaluation init")?;
        session.run(&[], &[init], &[], false)?;
        let x = session.op(&replica_name(0, &image_input(sidecar)?), "evaluation")?;
        let logits = rep.sidecar.logits.as_deref().unwrap_or_default();
        let logits = session.op(logits, "sidecar `logits`")?;
        // The replica's placeholder shape, its batch the held-out set (as training feeds it).
        let dims: Vec<u64> = rep.sidecar.inputs[&replica_name(0, &image_input(sidecar)?)]
            .iter()
            .map(|&d| d.max(0) as u64)
            .collect();
        let images = Tensor::<f32>::new(&dims)
            .with_values(&test.pixels)
            .map_err(|e| Error::tf("the held-out images", e))?;
        Ok(Evaluator {
            session,
            state: rep.state,
            x,
            logits,
            images,
            labels: test.labels.clone(),
            classes: test.classes,
        })
    }

    /// Held-out accuracy of the variables in `checkpoint`.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] if it does not fit the model; [`Error::TensorFlow`] if a run fails.
    pub fn accuracy(&self, checkpoint: &Checkpoint) -> Result<f64> {
        checkpoint::restore(&self.session, &self.state, checkpoint)?;
        let out = self.session.run(
            &[(self.x.clone(), &self.images)],
            &[],
            std::slice::from_ref(&self.logits),
            false,
        )?;
        let logits = out.fetched.first().map(|t| &t[..]).unwrap_or(&[]);
        Ok(accuracy(logits, &self.labels, self.classes))
    }
}

/// The sidecar input that is not one-hot (the images).
fn image_input(sidecar: &super::Sidecar) -> Result<String> {
    sidecar
        .inputs
        .keys()
        .find(|k| !sidecar.one_hot.contains(k))
        .cloned()
        .ok_or_else(|| Error::Sidecar {
            path: "(zoo model)".into(),
            reason: "no image input".into(),
        })
}

/// The label input (one-hot).
fn label_input(sidecar: &super::Sidecar) -> Result<String> {
    sidecar
        .one_hot
        .first()
        .cloned()
        .ok_or_else(|| Error::Sidecar {
            path: "(zoo model)".into(),
            reason: "no one-hot label input".into(),
        })
}

/// The targets of one built graph.
enum Targets {
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
struct Built {
    session: PlacedSession,
    /// Replica `k`'s own-master sibling session of `session` (`None`: `session` itself).
    masters: Vec<Option<usize>>,
    state: Vec<StateVar>,
    /// Replica `k`'s (image, label) placeholders.
    inputs: Vec<(Operation, Operation)>,
    /// Replica `k`'s (image dims, label dims).
    dims: Vec<(Vec<u64>, Vec<u64>)>,
    /// The synchronous step's train and loss (in every replicated graph).
    sync: (Operation, Operation),
    targets: Targets,
}

fn build(
    workload: &GraphWorkload,
    plan: &DataParallelPlan,
    mode: Mode,
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
    let own_masters = own_masters.filter(|_| matches!(mode, Mode::Async | Mode::Adaptive));
    let container = (own_masters.is_some() && config.isolate_state).then(|| {
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{tag}-{n}")
    });
    let (g, extra) = build_with(workload, plan, |rep: &mut Replication| {
        let extra = match mode {
            Mode::Sync => Extra::Sync,
            Mode::Async | Mode::Adaptive => Extra::Async(add_async_updates(rep)?),
            Mode::Backup { .. } => Extra::Backup(add_backup_accumulators(rep, tag)?),
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
    let (image, label) = (
        image_input(&workload.sidecar)?,
        label_input(&workload.sidecar)?,
    );
    let mut inputs = Vec::new();
    let mut dims = Vec::new();
    for (k, _) in g.replication.replicas.iter().enumerate() {
        let (xi, yi) = (replica_name(k, &image), replica_name(k, &label));
        inputs.push((
            session.op(&xi, "replica input")?,
            session.op(&yi, "replica input")?,
        ));
        let shape = |name: &str| -> Vec<u64> {
            g.replication.sidecar.inputs[name]
                .iter()
                .map(|&d| d.max(0) as u64)
                .collect()
        };
        dims.push((shape(&xi), shape(&yi)));
    }
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
        dims,
        targets,
    })
}

/// The address (`host:port`) of the server of the task that runs `device`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the device when it names no task of `tf_config`.
fn own_master<'a>(tf_config: &'a TfConfig, device: &str) -> Result<&'a str> {
    let name = DeviceName::parse(device)?;
    let task = match (name.job, name.task) {
        (Some(job), Some(index)) => TaskId {
            job,
            index: index as usize,
        },
        _ => {
            return Err(bad(
                "own master",
                format!("device {device} names no job and task"),
            ))
        }
    };
    tf_config.address(&task).ok_or_else(|| {
        bad(
            "own master",
            format!(
                "task {} of device {device} is not in the TF_CONFIG",
                task.device_prefix()
            ),
        )
    })
}

/// Replica `k`'s batch of `indices` as (images, labels).
fn batch(
    data: &LabelledImages,
    dims: &(Vec<u64>, Vec<u64>),
    indices: &[usize],
) -> Result<(Tensor<f32>, Tensor<f32>)> {
    let mut x = Tensor::<f32>::new(&dims.0);
    let mut y = Tensor::<f32>::new(&dims.1);
    data.fill(indices, &mut x, &mut y)?;
    Ok((x, y))
}

/// Runs `targets` with float and int feeds, fetching output 0 of `fetch` (a scalar loss).
fn run(
    session: &PlacedSession,
    on: Option<usize>,
    feeds: &[(&Operation, &Tensor<f32>)],
    int_feeds: &[(&Operation, &Tensor<i64>)],
    int32_feeds: &[(&Operation, &Tensor<i32>)],
    targets: &[&Operation],
    fetch: Option<&Operation>,
) -> Result<Option<f32>> {
    let mut args = SessionRunArgs::new();
    for (op, t) in feeds {
        args.add_feed(op, 0, t);
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
    session.run_args_on(on, &mut args, false, &describe)?;
    token
        .map(|t| {
            args.fetch::<f32>(t)
                .map(|v| v.first().copied().unwrap_or(f32::NAN))
                .map_err(|e| Error::tf(format!("fetching the loss of {describe}"), e))
        })
        .transpose()
}

/// Shared state of the worker threads and the coordinator.
#[derive(Default)]
struct GateState {
    paused: bool,
    stop: bool,
    in_flight: usize,
    /// Steps the chief has completed (`Backup`).
    global_step: i64,
    /// SyncReplicasOptimizer's token queue (`Backup`): a worker takes one, tagged with the
    /// global step, before each gradient after its first; the chief adds one per worker after
    /// each step, so a fast worker may compute several gradients of one step.
    tokens: std::collections::VecDeque<i64>,
    error: Option<Error>,
    steps: Vec<u64>,
    samples: Vec<u64>,
    /// Images read by workers a re-size left out.
    retired_samples: u64,
    updates: u64,
}

struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

impl Gate {
    fn new(workers: usize) -> Gate {
        Gate {
            state: Mutex::new(GateState {
                steps: vec![0; workers],
                samples: vec![0; workers],
                ..GateState::default()
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until no step is in flight, with new steps held back.
    fn pause(&self) {
        let mut s = self.lock();
        s.paused = true;
        while s.in_flight > 0 {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn resume(&self) {
        self.lock().paused = false;
        self.changed.notify_all();
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.changed.notify_all();
    }

    fn fail(&self, e: Error) {
        let mut s = self.lock();
        s.error.get_or_insert(e);
        s.stop = true;
        drop(s);
        self.changed.notify_all();
    }
}

/// The training clock: runs between `start` and `stop`, evaluations excluded.
struct Clock {
    total: Duration,
    since: Option<Instant>,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            total: Duration::ZERO,
            since: Some(Instant::now()),
        }
    }
    fn seconds(&self) -> f64 {
        (self.total + self.since.map_or(Duration::ZERO, |s| s.elapsed())).as_secs_f64()
    }
    fn stop(&mut self) {
        if let Some(s) = self.since.take() {
            self.total += s.elapsed();
        }
    }
    fn start(&mut self) {
        self.since.get_or_insert_with(Instant::now);
    }
}

/// Evaluations and the stopping rule, shared by every mode.
struct Progress<'a> {
    evaluator: &'a Evaluator,
    options: &'a AccuracyOptions,
    train_len: usize,
    curve: Vec<AccuracyPoint>,
    eval_seconds: f64,
    next_eval: f64,
    reached_at: Option<f64>,
}

impl Progress<'_> {
    fn due(&self, clock: &Clock) -> bool {
        clock.seconds() >= self.next_eval
    }

    /// Evaluates `session`'s variables; returns whether to stop.
    fn evaluate(
        &mut self,
        session: &PlacedSession,
        state: &[StateVar],
        clock: &Clock,
        samples: u64,
        updates: u64,
    ) -> Result<bool> {
        let started = Instant::now();
        let checkpoint = checkpoint::save(session, state, updates as usize)?;
        let accuracy = self.evaluator.accuracy(&checkpoint)?;
        self.eval_seconds += started.elapsed().as_secs_f64();
        let seconds = clock.seconds();
        self.curve.push(AccuracyPoint {
            seconds,
            epoch: samples as f64 / self.train_len.max(1) as f64,
            updates,
            accuracy,
        });
        log::info!("{seconds:.1} s, {updates} updates: held-out accuracy {accuracy:.3}");
        if accuracy >= self.options.target && self.reached_at.is_none() {
            self.reached_at = Some(seconds);
        }
        self.next_eval = seconds + self.options.eval_every_s;
        Ok(self.reached_at.is_some() || seconds >= self.options.max_train_s)
    }
}

fn bad(what: &str, reason: String) -> Error {
    Error::InvalidArgument {
        what: what.into(),
        reason,
    }
}

impl AccuracyOptions {
    /// Checks that every option is in range.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the option.
    pub fn validate(&self) -> Result<()> {
        if !(self.target > 0.0 && self.target <= 1.0) {
            return Err(bad(
                "target accuracy",
                format!("{} is not in (0, 1]", self.target),
            ));
        }
        if !(self.eval_every_s > 0.0 && self.eval_every_s <= 3600.0) {
            return Err(bad(
                "evaluation interval",
                format!("{} s is not in (0, 3600]", self.eval_every_s),
            ));
        }
        if !(self.max_train_s > 0.0 && self.max_train_s <= 7.0 * 86_400.0) {
            return Err(bad(
                "training time limit",
                format!("{} s is not in (0, one week]", self.max_train_s),
            ));
        }
        Ok(())
    }
}

/// Checks that `backups` backup workers of `workers` leave a gradient to aggregate.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the backup workers.
pub fn check_backups(backups: usize, workers: usize) -> Result<()> {
    if backups >= workers {
        return Err(bad(
            "backup workers",
            format!("{backups} of {workers} workers: at least one gradient must be aggregated"),
        ));
    }
    Ok(())
}

fn check_options(options: &AccuracyOptions, contender: &Contender) -> Result<()> {
    options.validate()?;
    if let Mode::Backup { backups } = contender.mode {
        let workers = contender
            .plan
            .replicas
            .iter()
            .filter(|r| r.batch > 0)
            .count();
        check_backups(backups, workers)?;
    }
    Ok(())
}

/// Trains `contender` on `task` on `cluster` until the held-out accuracy reaches
/// `options.target` or `options.max_train_s` pass.
///
/// # Errors
/// [`Error::InvalidArgument`] for options out of range or as many backup workers as workers;
/// anything building, placing or running can return ([`Error::TensorFlow`] naming the run that
/// failed); [`Error::NonFiniteLoss`] if training diverges.
pub fn train_to_accuracy(
    contender: &Contender,
    model: &AccuracyModel,
    task: &LabelledTask,
    cluster: &Cluster,
    config: &SessionConfig,
    options: &AccuracyOptions,
) -> Result<AccuracyReport> {
    check_options(options, contender)?;
    let plan = DataParallelPlan {
        replicas: contender
            .plan
            .replicas
            .iter()
            .filter(|r| r.batch > 0)
            .cloned()
            .collect(),
        ..contender.plan.clone()
    };
    let workload = &model.workload;
    let evaluator = Evaluator::new(model, &task.test)?;
    let tag = format!("{}-{}", contender.name, std::process::id());
    let built = build(
        workload,
        &plan,
        contender.mode,
        cluster,
        config,
        &tag,
        options.own_masters.as_ref(),
    )?;
    let init = built.session.op(&workload.sidecar.init, "init")?;
    built.session.run(&[], &[init], &[], false)?;
    let mut progress = Progress {
        evaluator: &evaluator,
        options,
        train_len: task.train.len(),
        curve: Vec::new(),
        eval_seconds: 0.0,
        next_eval: options.eval_every_s,
        reached_at: None,
    };
    let gate = Gate::new(plan.replicas.len());
    let mut clock = Clock::new();
    let mut built = built;
    let mut chosen = None;
    let sync = |plan, built: &mut Built, clock: &mut Clock, progress: &mut Progress<'_>, until| {
        train_sync(
            contender, workload, plan, built, task, cluster, config, &tag, &gate, clock, progress,
            until,
        )
    };
    let concurrent = |plan: &DataParallelPlan,
                      built: &Built,
                      seed,
                      clock: &mut Clock,
                      progress: &mut Progress<'_>,
                      until| {
        train_concurrent(
            contender, plan, built, task, seed, &gate, clock, progress, until,
        )
    };
    let (plan, resized) = match contender.mode {
        Mode::Sync => {
            let (plan, resized, _) = sync(plan, &mut built, &mut clock, &mut progress, None)?;
            (plan, resized)
        }
        Mode::Async | Mode::Backup { .. } => {
            concurrent(&plan, &built, options.seed, &mut clock, &mut progress, None)?;
            (plan, Vec::new())
        }
        Mode::Adaptive => {
            let window = |clock: &Clock| (clock.seconds(), totals(&gate).0);
            let rate =
                |(t0, n0): (f64, u64), (t1, n1): (f64, u64)| (n1 - n0) as f64 / (t1 - t0).max(1e-9);
            // Equal shares: the planner could not tell the workers apart (or found no gain in
            // telling them apart), so there is no straggler for asynchrony to hide and its
            // stale gradients only cost — synchronous training throughout, no probe.
            let even = is_even_split(&plan);
            let start = window(&clock);
            let until = (!even).then_some(start.0 + PROBE_S);
            let (plan, _, mut done) = sync(plan, &mut built, &mut clock, &mut progress, until)?;
            let middle = window(&clock);
            let sync_rate = rate(start, middle);
            let mut async_rate = None;
            if !done && !even {
                clock.start();
                let until = Some(middle.0 + PROBE_S);
                done = concurrent(
                    &plan,
                    &built,
                    options.seed,
                    &mut clock,
                    &mut progress,
                    until,
                )?;
                async_rate = Some(rate(middle, window(&clock)));
            }
            let go_async = async_rate.is_some_and(|a| a >= ASYNC_GAIN * sync_rate);
            chosen = Some(Choice {
                sync_images_per_sec: sync_rate,
                async_images_per_sec: async_rate,
                asynchronous: go_async,
                even_split: even,
            });
            log::info!("{}: {:?}", contender.name, chosen);
            if !done {
                clock.start();
                if go_async {
                    concurrent(
                        &plan,
                        &built,
                        options.seed ^ 0x5eed,
                        &mut clock,
                        &mut progress,
                        None,
                    )?;
                } else {
                    sync(plan.clone(), &mut built, &mut clock, &mut progress, None)?;
                }
            }
            (plan, Vec::new())
        }
    };
    let s = gate.lock();
    let samples: u64 = s.samples.iter().sum::<u64>() + s.retired_samples;
    let dropped = match contender.mode {
        Mode::Backup { backups } => {
            let computed: u64 = s.steps.iter().sum();
            let aggregated = (plan.replicas.len() - backups) as u64;
            computed.saturating_sub(s.updates * aggregated)
        }
        _ => 0,
    };
    let train_seconds = clock.seconds();
    Ok(AccuracyReport {
        contender: contender.name.clone(),
        mode: contender.mode,
        reached: progress.reached_at.is_some(),
        time_to_accuracy_s: progress.reached_at,
        train_seconds,
        eval_seconds: progress.eval_seconds,
        updates: s.updates,
        samples,
        epochs: samples as f64 / task.train.len().max(1) as f64,
        images_per_sec: samples as f64 / train_seconds.max(1e-9),
        final_accuracy: progress.curve.last().map_or(0.0, |p| p.accuracy),
        curve: progress.curve,
        workers: plan
            .replicas
            .iter()
            .enumerate()
            .map(|(k, r)| WorkerCount {
                device: r.device.clone(),
                batch: r.batch,
                steps: s.steps.get(k).copied().unwrap_or(0),
                samples: s.samples.get(k).copied().unwrap_or(0),
            })
            .collect(),
        dropped_gradients: dropped,
        resized,
        chosen,
        plan,
    })
}

/// Synchronous steps (with LB-BSP re-sizing when the contender has [`Feedback`]).
#[allow(clippy::too_many_arguments)]
fn train_sync(
    contender: &Contender,
    workload: &GraphWorkload,
    mut plan: DataParallelPlan,
    built: &mut Built,
    task: &LabelledTask,
    cluster: &Cluster,
    config: &SessionConfig,
    tag: &str,
    gate: &Gate,
    clock: &mut Clock,
    progress: &mut Progress<'_>,
    until: Option<f64>,
) -> Result<(DataParallelPlan, Vec<Vec<usize>>, bool)> {
    let mut sampler = Sampler::new(
        task.train.len(),
        progress
            .options
            .seed
            .wrapping_add(clock.seconds().to_bits()),
    );
    let mut resized = Vec::new();
    let mut resizer = Resizer::default();
    let mut step = 0usize;
    loop {
        let tensors = plan
            .replicas
            .iter()
            .zip(&built.dims)
            .map(|(r, d)| batch(&task.train, d, &sampler.take(r.batch)))
            .collect::<Result<Vec<_>>>()?;
        let feeds: Vec<(&Operation, &Tensor<f32>)> = built
            .inputs
            .iter()
            .zip(&tensors)
            .flat_map(|((xo, yo), (x, y))| [(xo, x), (yo, y)])
            .collect();
        let (train, loss) = (&built.sync.0, &built.sync.1);
        let feedback = contender
            .feedback
            .as_ref()
            .filter(|f| resizer.due(step, f.every));
        let (loss_value, stats) = if feedback.is_some() {
            // A traced step measures every replica's compute time.
            let mut args = SessionRunArgs::new();
            for (op, t) in &feeds {
                args.add_feed(op, 0, t);
            }
            args.add_target(train);
            let token = args.request_fetch(loss, 0);
            let (_, stats) = built.session.run_args(&mut args, true, "traced train")?;
            let value = args
                .fetch::<f32>(token)
                .map_err(|e| Error::tf("fetching the loss", e))?
                .first()
                .copied()
                .unwrap_or(f32::NAN);
            (value, stats)
        } else {
            let value = run(&built.session, None, &feeds, &[], &[], &[train], Some(loss))?;
            (value.unwrap_or(f32::NAN), None)
        };
        if !loss_value.is_finite() {
            return Err(Error::NonFiniteLoss {
                step,
                loss: loss_value,
            });
        }
        account(gate, &plan, true);
        step += 1;
        if let (Some(f), Some(stats)) = (feedback, stats) {
            if let Some(new) = resizer.propose(&plan, &stats, f)? {
                // The variables move to a graph with the new shares (a session of its own).
                let checkpoint = checkpoint::save(&built.session, &built.state, step)?;
                let next = build(workload, &new, Mode::Sync, cluster, config, tag, None)?;
                checkpoint::restore(&next.session, &next.state, &checkpoint)?;
                remap_counts(gate, &plan, &new);
                resized.push(new.replicas.iter().map(|r| r.batch).collect());
                *built = next;
                plan = new;
            }
        }
        if progress.due(clock) {
            clock.stop();
            let (samples, updates) = totals(gate);
            let stop = progress.evaluate(&built.session, &built.state, clock, samples, updates)?;
            clock.start();
            if stop {
                clock.stop();
                return Ok((plan, resized, true));
            }
        }
        if until.is_some_and(|u| clock.seconds() >= u) {
            return Ok((plan, resized, false));
        }
    }
}

/// Carries each worker's counts from `old`'s replica order to `new`'s (workers left out keep
/// theirs out of the report).
fn remap_counts(gate: &Gate, old: &DataParallelPlan, new: &DataParallelPlan) {
    let mut s = gate.lock();
    let count = |d: &str, of: &[u64]| {
        old.replicas
            .iter()
            .position(|r| r.device == d)
            .and_then(|k| of.get(k).copied())
            .unwrap_or(0)
    };
    let steps = new
        .replicas
        .iter()
        .map(|r| count(&r.device, &s.steps))
        .collect();
    let samples: Vec<u64> = new
        .replicas
        .iter()
        .map(|r| count(&r.device, &s.samples))
        .collect();
    // Images read by workers the new plan leaves out still count.
    let before: u64 = s.samples.iter().sum();
    s.retired_samples += before.saturating_sub(samples.iter().sum());
    s.steps = steps;
    s.samples = samples;
}

/// Counts one synchronous step of every replica of `plan`.
fn account(gate: &Gate, plan: &DataParallelPlan, update: bool) {
    let mut s = gate.lock();
    for (k, r) in plan.replicas.iter().enumerate() {
        if k < s.steps.len() {
            s.steps[k] += 1;
            s.samples[k] += r.batch as u64;
        }
    }
    if update {
        s.updates += 1;
    }
}

fn totals(gate: &Gate) -> (u64, u64) {
    let s = gate.lock();
    (s.samples.iter().sum::<u64>() + s.retired_samples, s.updates)
}

/// LB-BSP's feedback, robust to measurement noise: each replica's throughput from its compute
/// time in traced steps (its calibrated fixed cost taken off), the last few measurements per
/// worker (a window of [`Resizer::KEEP`], grown while undecided, below), and the decision of
/// [`decide_resize`]: workers that the measured
/// noise cannot tell apart are pooled to equal figures, and new shares are taken only when the
/// lower confidence bound of their predicted gain reaches the guard (`min_gain`, 10 %) — a
/// re-size costs a checkpoint and a new session, and noise alone must not pay for one.
///
/// A traced step costs more than a plain one (every worker's step stats travel to the client:
/// on `uniform`, tracing one step in four read 11 % fewer images/s than the same shares
/// untraced, in one run of 2026-12-01). So the interval between traced steps starts at `Feedback::every` and doubles,
/// up to [`Resizer::MAX_STRETCH`] times, each time a decision keeps the shares — measurements
/// that keep confirming the shares are taken less often — and returns to `every` after a
/// re-size, whose new shares are measured afresh.
///
/// A decision that keeps the shares only because the noise hides a predicted gain above the
/// guard is **undecided**, not a confirmation: the interval stays and the window grows by
/// [`Resizer::KEEP`] measurements (up to [`Resizer::MAX_WINDOW`]), so the next decision's
/// standard errors are smaller — a true straggler measured on a very noisy machine is still
/// found, a few traced steps later.
#[derive(Default)]
struct Resizer {
    history: BTreeMap<String, Vec<f64>>,
    /// Measurements per worker a decision takes (0: not started, then [`Resizer::KEEP`]).
    window: usize,
    /// Steps between traced steps now, as a multiple of `Feedback::every` (0: not started).
    stretch: usize,
    /// Step index of the next traced step.
    next: usize,
    /// The base interval and the step traced last.
    every: usize,
    last: usize,
}

impl Resizer {
    /// Measurements per worker of a first decision, and what an undecided one adds.
    const KEEP: usize = 3;
    /// Most measurements per worker a decision takes.
    const MAX_WINDOW: usize = 12;
    /// Most the interval between traced steps grows, × `Feedback::every`.
    const MAX_STRETCH: usize = 8;

    /// Whether step `step` (0-based) is traced, for a base interval of `every` steps (0:
    /// never).
    fn due(&mut self, step: usize, every: usize) -> bool {
        if every == 0 {
            return false;
        }
        if self.stretch == 0 {
            self.stretch = 1;
            self.next = every - 1;
        }
        if step < self.next {
            return false;
        }
        self.every = every;
        self.last = step;
        self.next = step + every * self.stretch;
        true
    }

    /// After a decision on the step traced last: keep → the interval doubles (up to
    /// [`Resizer::MAX_STRETCH`]); undecided (no re-size, but a predicted gain of at least
    /// `min_gain`) → the interval stays and the window grows; re-size → back to one `every`
    /// and the first window.
    fn decided(&mut self, decision: &ResizeDecision, min_gain: f64) {
        if decision.resize.is_some() {
            self.stretch = 1;
            self.window = Self::KEEP;
        } else if decision.predicted_gain >= min_gain {
            self.window = (self.window + Self::KEEP).min(Self::MAX_WINDOW);
        } else {
            self.stretch = (self.stretch * 2).clamp(1, Self::MAX_STRETCH);
        }
        self.next = self.last + self.every * self.stretch;
    }

    fn propose(
        &mut self,
        plan: &DataParallelPlan,
        stats: &crate::proto::StepStats,
        feedback: &Feedback,
    ) -> Result<Option<DataParallelPlan>> {
        self.window = self.window.max(Self::KEEP);
        for (device, ms) in replica_spans_ms(plan, stats) {
            let (Some(r), Some(c)) = (
                plan.replicas.iter().find(|r| r.device == device),
                feedback.capacity.iter().find(|c| c.device == device),
            ) else {
                continue;
            };
            let rate = r.batch as f64 / ((ms - c.fixed_ms).max(1.0) / 1e3);
            let h = self.history.entry(device).or_default();
            h.push(rate);
            if h.len() > self.window {
                h.remove(0);
            }
        }
        // Only on a full window of measurements of every replica in use.
        let full = plan.replicas.iter().all(|r| {
            self.history
                .get(&r.device)
                .is_some_and(|h| h.len() >= self.window)
        });
        if !full {
            return Ok(None);
        }
        let decision = decide_resize(
            plan,
            &self.history,
            &feedback.capacity,
            &feedback.ps,
            &feedback.vars,
            &feedback.options,
        )?;
        log::info!(
            "LB-BSP: noise {:.0} %, predicted gain {:.0} % (lower bound {:.0} %): {}",
            decision.spread.unwrap_or(0.0) * 100.0,
            decision.predicted_gain * 100.0,
            decision.gain_lower_bound * 100.0,
            if decision.resize.is_some() {
                "re-sizing"
            } else {
                "keeping the shares"
            }
        );
        if decision.resize.is_some() {
            // The new shares are measured afresh.
            self.history.clear();
        }
        self.decided(&decision, feedback.options.min_gain);
        Ok(decision.resize)
    }
}

/// Asynchronous or backup-worker training: one thread per worker, the coordinator evaluating
/// (and, for `Backup`, acting as the chief that aggregates).
#[allow(clippy::too_many_arguments)]
fn train_concurrent(
    contender: &Contender,
    plan: &DataParallelPlan,
    built: &Built,
    task: &LabelledTask,
    seed: u64,
    gate: &Gate,
    clock: &mut Clock,
    progress: &mut Progress<'_>,
    until: Option<f64>,
) -> Result<bool> {
    let workers = plan.replicas.len();
    if let Mode::Backup { backups } = contender.mode {
        // SyncReplicasOptimizer's initial tokens: one per gradient a step aggregates.
        let mut s = gate.lock();
        if s.global_step == 0 && s.tokens.is_empty() {
            s.tokens.extend(std::iter::repeat_n(0, workers - backups));
        }
    }
    let result = std::thread::scope(|scope| -> Result<bool> {
        for (k, replica) in plan.replicas.iter().enumerate() {
            let worker_seed = seed.wrapping_add(1 + k as u64);
            scope.spawn(move || {
                if let Err(e) = worker_loop(k, replica.batch, built, task, worker_seed, gate) {
                    gate.fail(e);
                }
            });
        }
        let outcome = coordinate(contender, workers, built, gate, clock, progress, until);
        gate.stop();
        outcome
    });
    clock.stop();
    let mut s = gate.lock();
    if let Some(e) = s.error.take() {
        return Err(e);
    }
    // Ready for another phase.
    s.stop = false;
    result
}

/// Worker `k`'s loop: a step on its own share whenever it is free (`Async`), or one gradient
/// per global step (`Backup`).
fn worker_loop(
    k: usize,
    share: usize,
    built: &Built,
    task: &LabelledTask,
    seed: u64,
    gate: &Gate,
) -> Result<()> {
    let mut sampler = Sampler::new(task.train.len(), seed);
    let backup = matches!(built.targets, Targets::Backup { .. });
    // A backup worker's first gradient is of step 0; each later one needs a token.
    let mut first = true;
    loop {
        // The batch is read before the step is admitted: input preparation overlaps.
        let (x, y) = batch(&task.train, &built.dims[k], &sampler.take(share))?;
        let step = {
            let mut s = gate.lock();
            loop {
                let blocked = s.paused || backup && !first && s.tokens.is_empty();
                if s.stop || !blocked {
                    break;
                }
                s = gate.changed.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            if s.stop {
                return Ok(());
            }
            s.in_flight += 1;
            match (backup, first) {
                (true, false) => s.tokens.pop_front().unwrap_or(s.global_step),
                _ => s.global_step,
            }
        };
        first = false;
        let (xo, yo) = &built.inputs[k];
        let feeds = [(xo, &x), (yo, &y)];
        let outcome = match &built.targets {
            Targets::Async { train, loss } => run(
                &built.session,
                built.masters[k],
                &feeds,
                &[],
                &[],
                &[&train[k]],
                Some(&loss[k]),
            )
            .map(|l| {
                l.filter(|l| !l.is_finite())
                    .map_or(Ok(()), |l| Err(Error::NonFiniteLoss { step: k, loss: l }))
            }),
            Targets::Backup {
                push, local_step, ..
            } => {
                let tag = Tensor::<i64>::new(&[])
                    .with_values(&[step])
                    .map_err(|e| Error::tf("local step", e))?;
                run(
                    &built.session,
                    None,
                    &feeds,
                    &[(&local_step[k], &tag)],
                    &[],
                    &[&push[k]],
                    None,
                )
                .map(|_| Ok(()))
            }
            Targets::Sync => Ok(Ok(())),
        };
        let mut s = gate.lock();
        s.in_flight -= 1;
        match outcome {
            Ok(Ok(())) => {
                s.steps[k] += 1;
                s.samples[k] += share as u64;
                if let Targets::Async { .. } = built.targets {
                    s.updates += 1;
                }
            }
            Ok(Err(e)) | Err(e) => {
                drop(s);
                gate.changed.notify_all();
                return Err(e);
            }
        }
        drop(s);
        gate.changed.notify_all();
    }
}

/// The coordinator: evaluates on schedule; for `Backup`, runs the chief's aggregating steps.
fn coordinate(
    contender: &Contender,
    workers: usize,
    built: &Built,
    gate: &Gate,
    clock: &mut Clock,
    progress: &mut Progress<'_>,
    until: Option<f64>,
) -> Result<bool> {
    let chief = match (&built.targets, contender.mode) {
        (
            Targets::Backup {
                train,
                num_required,
                ..
            },
            Mode::Backup { backups },
        ) => {
            let n = (workers - backups) as i32;
            let t = Tensor::<i32>::new(&[])
                .with_values(&[n])
                .map_err(|e| Error::tf("num_required", e))?;
            Some((train, num_required, t))
        }
        _ => None,
    };
    loop {
        if gate.lock().stop {
            return Ok(true);
        }
        if until.is_some_and(|u| clock.seconds() >= u) {
            return Ok(false);
        }
        match &chief {
            Some((train, num_required, n)) => {
                run(
                    &built.session,
                    None,
                    &[],
                    &[],
                    &[(num_required, n)],
                    &[train],
                    None,
                )?;
                let mut s = gate.lock();
                s.global_step += 1;
                s.updates += 1;
                let step = s.global_step;
                s.tokens.extend(std::iter::repeat_n(step, workers));
                drop(s);
                gate.changed.notify_all();
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
        if progress.due(clock) {
            gate.pause();
            clock.stop();
            let (samples, updates) = totals(gate);
            let stop = progress.evaluate(&built.session, &built.state, clock, samples, updates);
            clock.start();
            gate.resume();
            if stop? {
                return Ok(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contender(mode: Mode) -> Contender {
        Contender {
            name: "c".into(),
            plan: DataParallelPlan {
                strategy: "s".into(),
                replicas: vec![
                    Replica {
                        device: "/job:worker/task:0".into(),
                        batch: 8,
                    },
                    Replica {
                        device: "/job:worker/task:1".into(),
                        batch: 8,
                    },
                ],
                variable_devices: BTreeMap::new(),
                global_device: "/job:ps/task:0".into(),
                predicted_step_ms: None,
            },
            mode,
            feedback: None,
        }
    }

    #[test]
    fn only_shares_within_one_sample_are_an_even_split() {
        let with = |shares: &[usize]| {
            let mut p = contender(Mode::Adaptive).plan;
            p.replicas = shares
                .iter()
                .enumerate()
                .map(|(k, &batch)| Replica {
                    device: format!("/job:worker/task:{k}"),
                    batch,
                })
                .collect();
            is_even_split(&p)
        };
        assert!(with(&[16, 16, 16, 16]));
        assert!(with(&[22, 21, 21]));
        assert!(!with(&[24, 8]));
        assert!(!with(&[17, 15]));
        // One replica has nobody to wait for: nothing to decide, not "even".
        assert!(!with(&[64]));
    }

    /// A decision with the given predicted gain, re-sizing or not.
    fn decision(predicted_gain: f64, resize: bool) -> ResizeDecision {
        ResizeDecision {
            spread: Some(0.3),
            estimates: Vec::new(),
            predicted_gain,
            gain_lower_bound: predicted_gain - 0.5,
            resize: resize.then(|| DataParallelPlan {
                strategy: "infra-aware".into(),
                replicas: Vec::new(),
                variable_devices: BTreeMap::new(),
                global_device: String::new(),
                predicted_step_ms: None,
            }),
        }
    }

    #[test]
    fn traced_steps_thin_out_while_decisions_keep_the_shares() {
        let mut r = Resizer::default();
        let traced = |r: &mut Resizer, steps: std::ops::Range<usize>| -> Vec<usize> {
            steps.filter(|&s| r.due(s, 4)).collect()
        };
        let (keep, resize) = (decision(0.02, false), decision(0.4, true));
        // Every fourth step until a decision.
        assert_eq!(traced(&mut r, 0..12), vec![3, 7, 11]);
        r.decided(&keep, 0.1); // kept: 8 steps to the next
        assert_eq!(traced(&mut r, 12..20), vec![19]);
        r.decided(&keep, 0.1); // kept again: 16
        assert_eq!(traced(&mut r, 20..36), vec![35]);
        r.decided(&resize, 0.1); // re-sized: back to 4
        assert_eq!(traced(&mut r, 36..44), vec![39, 43]);
        for _ in 0..10 {
            r.decided(&keep, 0.1);
        }
        assert_eq!(r.stretch, Resizer::MAX_STRETCH);
        // Never traced without feedback.
        assert!(!Resizer::default().due(3, 0));
    }

    #[test]
    fn an_undecided_keep_traces_on_and_widens_the_window() {
        let mut r = Resizer {
            window: Resizer::KEEP,
            ..Resizer::default()
        };
        assert_eq!((0..12).filter(|&s| r.due(s, 4)).count(), 3);
        // A 30 % gain predicted, hidden by the noise: not a confirmation.
        let undecided = decision(0.3, false);
        r.decided(&undecided, 0.1);
        assert_eq!(r.stretch, 1, "the interval stays");
        assert_eq!(r.window, 2 * Resizer::KEEP);
        assert_eq!(
            (12..24).filter(|&s| r.due(s, 4)).collect::<Vec<_>>(),
            vec![15, 19, 23]
        );
        for _ in 0..10 {
            r.decided(&undecided, 0.1);
        }
        assert_eq!(r.window, Resizer::MAX_WINDOW);
        // A re-size starts over with the first window.
        r.decided(&decision(0.3, true), 0.1);
        assert_eq!((r.window, r.stretch), (Resizer::KEEP, 1));
    }

    #[test]
    fn options_out_of_range_are_refused() {
        let ok = AccuracyOptions {
            target: 0.9,
            eval_every_s: 1.0,
            max_train_s: 60.0,
            seed: 1,
            own_masters: None,
        };
        assert!(check_options(&ok, &contender(Mode::Sync)).is_ok());
        for bad in [
            AccuracyOptions {
                target: 0.0,
                ..ok.clone()
            },
            AccuracyOptions {
                target: 1.5,
                ..ok.clone()
            },
            AccuracyOptions {
                target: f64::NAN,
                ..ok.clone()
            },
            AccuracyOptions {
                eval_every_s: 0.0,
                ..ok.clone()
            },
            AccuracyOptions {
                max_train_s: -1.0,
                ..ok.clone()
            },
            AccuracyOptions {
                max_train_s: f64::INFINITY,
                ..ok.clone()
            },
        ] {
            assert!(
                check_options(&bad, &contender(Mode::Sync)).is_err(),
                "{bad:?}"
            );
        }
        let all_backup = check_options(&ok, &contender(Mode::Backup { backups: 2 }));
        assert!(all_backup
            .unwrap_err()
            .to_string()
            .contains("backup workers"));
        assert!(check_options(&ok, &contender(Mode::Backup { backups: 1 })).is_ok());
    }
}
