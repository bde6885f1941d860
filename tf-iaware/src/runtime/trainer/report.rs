//! What a run reports: [`TrainingReport`], its evaluations, workers and choices.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::{train, Feedback, TrainingOptions};
use crate::graph::proto::StepStats;
use crate::parallel::{DataParallelPlan, DataParallelStrategy, Updates};
use crate::runtime::adapt::ReplanRecord;
use crate::runtime::stats::Mismatch;
use crate::runtime::train::StepTimes;

/// One evaluation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Evaluation {
    /// Training seconds so far (evaluations excluded).
    pub seconds: f64,
    /// Training samples read so far ÷ training-set rows.
    pub epoch: f64,
    /// Updates applied to the variables so far.
    pub updates: u64,
    /// The held-out metric.
    pub metric: f64,
}

/// What one worker did in this run (a resumed run counts from its restart; the report's totals
/// carry the earlier runs' over).
#[derive(Clone, Debug, Serialize)]
pub struct WorkerCount {
    /// Worker device.
    pub device: String,
    /// Its share (per-step batch) at the end (0: a re-plan left it out).
    pub batch: usize,
    /// Steps it ran (gradients it computed).
    pub steps: u64,
    /// Samples it read.
    pub samples: u64,
}

/// The probe of [`Updates::Adaptive`].
#[derive(Clone, Debug, Serialize)]
pub struct Choice {
    /// Samples per second of the synchronous window.
    pub sync_images_per_sec: f64,
    /// Of the asynchronous window (`None`: the run ended before it, or no probe ran, see
    /// `even_split`).
    pub async_images_per_sec: Option<f64>,
    /// Whether training went on asynchronously.
    pub asynchronous: bool,
    /// The shares were the even split (within one sample of each other): no probe,
    /// synchronous training throughout.
    pub even_split: bool,
}

/// What [`train`] did.
#[derive(Clone, Debug, Serialize)]
pub struct TrainingReport {
    /// The strategy.
    pub strategy: DataParallelStrategy,
    /// How its workers combined their gradients.
    pub updates_mode: Updates,
    /// Whether asynchronous steps ran through each worker's own server
    /// ([`TrainingOptions::own_masters`](super::TrainingOptions::own_masters)), as TF2's
    /// `ParameterServerStrategy` runs them, rather than through one master; `false` for
    /// synchronous updates.
    pub own_masters: bool,
    /// The held-out metric's name (`accuracy`, a tensor), if evaluated.
    pub metric: Option<String>,
    /// Whether the target was reached.
    pub reached: bool,
    /// Training seconds until the first evaluation at or beyond the target.
    pub time_to_target_s: Option<f64>,
    /// The epochs that bounded the run ([`TrainingOptions::epoch_bound`](super::TrainingOptions::epoch_bound)):
    /// with a target alone, the cap it stops at when the target is not reached.
    pub epoch_bound: Option<f64>,
    /// Wall seconds from the start of training (building the sessions and any restore
    /// included) to the evaluation that reached the target, evaluations included (`None`: not
    /// reached in this run). A command adds its own setup (`train`'s `wall_to_target_s` counts
    /// from the command's start).
    pub wall_to_target_s: Option<f64>,
    /// Training seconds in all.
    pub train_seconds: f64,
    /// Seconds spent evaluating (excluded from `train_seconds`).
    pub eval_seconds: f64,
    /// Updates applied to the variables.
    pub updates: u64,
    /// Training samples read (gradients of dropped backup steps included).
    pub samples: u64,
    /// `samples` over the training rows.
    pub epochs: f64,
    /// `samples / train_seconds`.
    pub images_per_sec: f64,
    /// Loss of the first step (`None` with backup workers, whose steps push gradients without
    /// fetching a loss).
    pub loss_first: Option<f32>,
    /// Loss of the last step (as `loss_first`).
    pub loss_last: Option<f32>,
    /// The held-out metric at the end.
    pub final_metric: Option<f64>,
    /// Every evaluation.
    pub evaluations: Vec<Evaluation>,
    /// What each worker did.
    pub workers: Vec<WorkerCount>,
    /// Gradients computed but left out of every step (backup workers).
    pub dropped_gradients: u64,
    /// The shares after each re-size ([`Feedback`]).
    pub resized: Vec<Vec<usize>>,
    /// What [`Updates::Adaptive`] measured and chose.
    pub chosen: Option<Choice>,
    /// The plan it started with.
    pub first_plan: DataParallelPlan,
    /// The plan at the end.
    pub plan: DataParallelPlan,
    /// Seconds from the call to the first step: building and placing the graph, initialising
    /// the variables and, when resuming, restoring them.
    pub startup_seconds: f64,
    /// The checkpoint the run resumed from, if it did.
    pub resumed_from: Option<Resumed>,
    /// The checkpoints it wrote.
    pub checkpoints: Vec<CheckpointWritten>,
    /// Its TensorBoard event file, if it logged.
    pub event_file: Option<PathBuf>,
    /// The writes of that file that failed (a full disk), if any did: training went on without
    /// those points.
    pub events_lost: Option<EventsLost>,
    /// Wall time of the synchronous steps, ms (traced ones included; the last
    /// [`STEP_TIMES_KEPT`] steps), `None` without synchronous steps.
    pub step_ms: Option<StepTimes>,
    /// Every live re-plan ([`TrainingOptions::adapt`]).
    pub replans: Vec<ReplanRecord>,
    /// Moves live re-planning saw and kept the plan for: their predicted gain did not clear
    /// the guard, the measured noise or the cost of a switch
    /// ([`AdaptOptions::min_gain`](crate::runtime::adapt::AdaptOptions::min_gain)).
    pub replans_declined: usize,
    /// CPU share of one core the background metrics reader used ([`TrainingOptions::adapt`]).
    pub metrics_cost_share: Option<f64>,
    /// Every recovery from lost tasks ([`TrainingOptions::recover`]).
    pub recoveries: Vec<Recovered>,
    /// Workers recoveries dropped and took back once they answered again.
    pub readmissions: Vec<Readmitted>,
    /// Synchronous steps retried because their deadline passed while every task answered
    /// ([`RecoverOptions::hang`](super::RecoverOptions::hang)).
    pub deadline_retries: usize,
    /// The driver's in-memory copies of the variables a recovering run took
    /// ([`RecoverOptions::every_updates`](super::RecoverOptions::every_updates)).
    pub safe_copies: Vec<SafeCopy>,
    /// The traced last update ([`TrainingOptions::trace_last`](super::TrainingOptions::trace_last)).
    pub traced: Option<TracedStep>,
}

/// Writes of a run's TensorBoard log that failed: the log is a side output, so the run went on
/// without those points (and wrote later ones once it could again).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventsLost {
    /// Writes that failed (each a log point: a step's figures, an evaluation, a plan).
    pub writes: u64,
    /// Updates applied when the first one failed.
    pub first_update: u64,
    /// Why the first one failed (the file and the OS error).
    pub error: String,
}

/// One in-memory copy of the training state (what a lost ps's variables come back from).
#[derive(Clone, Debug, Serialize)]
pub struct SafeCopy {
    /// Updates applied when it was taken.
    pub update: u64,
    /// Seconds it took (fetching every variable from the ps).
    pub seconds: f64,
    /// Its size, bytes.
    pub bytes: usize,
}

/// A traced synchronous step: what ran where.
#[derive(Clone, Debug, Serialize)]
pub struct TracedStep {
    /// The update it applied (1 for the first).
    pub update: u64,
    /// Ops executed per device.
    pub executed: BTreeMap<String, usize>,
    /// Ops that ran somewhere other than where the plan placed them.
    pub mismatches: Vec<Mismatch>,
    /// TensorFlow's step stats (for a timeline, [`crate::sim::report::trace`]).
    #[serde(skip)]
    pub stats: StepStats,
}

/// Synchronous step times [`TrainingReport::step_ms`] is computed from (the latest).
pub const STEP_TIMES_KEPT: usize = 1 << 16;

/// A checkpoint the run wrote.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointWritten {
    /// Updates applied when it was taken.
    pub step: u64,
    /// Its V2 prefix (what `RestoreV2`, `tf.train.load_checkpoint` and `Saver.restore` take).
    pub prefix: PathBuf,
    /// Seconds taking it cost (fetching the variables and writing the files).
    pub seconds: f64,
}

/// Where a resumed run started from.
#[derive(Clone, Debug, Serialize)]
pub struct Resumed {
    /// The checkpoint's update count: the run continued from it.
    pub step: u64,
    /// Its V2 prefix.
    pub prefix: PathBuf,
    /// Training seconds of the runs before it.
    pub train_seconds: f64,
    /// Samples those runs read.
    pub samples: u64,
    /// Seconds reading the checkpoint and restoring the variables took.
    pub restore_seconds: f64,
    /// Newer checkpoints that were torn and skipped (their directories, with why).
    pub skipped: Vec<String>,
}

/// One recovery from lost tasks.
#[derive(Clone, Debug, Serialize)]
pub struct Recovered {
    /// Updates applied when the failure came.
    pub update: u64,
    /// Devices of the tasks that no longer answered (or answered again after a restart, their
    /// variables gone).
    pub lost: Vec<String>,
    /// The failure, as TensorFlow or the driver reported it.
    pub error: String,
    /// The update count training went on from.
    pub restored_from: u64,
    /// Updates lost and trained again (`update - restored_from`).
    pub redone: u64,
    /// The new plan's shares, (worker, samples).
    pub shares: Vec<(String, usize)>,
    /// Seconds from the failure to the new plan's session holding the variables.
    pub seconds: f64,
}

/// Workers taken back after they answered again.
#[derive(Clone, Debug, Serialize)]
pub struct Readmitted {
    /// Updates applied when they were taken back.
    pub update: u64,
    /// Their devices.
    pub workers: Vec<String>,
    /// The new plan's shares, (worker, samples).
    pub shares: Vec<(String, usize)>,
    /// Seconds the switch took (re-planning, building, moving the variables).
    pub seconds: f64,
}

/// `plan`'s shares, (worker, samples), as the report lists them.
pub(super) fn shares(plan: &DataParallelPlan) -> Vec<(String, usize)> {
    plan.replicas
        .iter()
        .map(|r| (r.device.clone(), r.batch))
        .collect()
}
