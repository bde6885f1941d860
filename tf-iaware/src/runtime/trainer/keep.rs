//! What a training run keeps and shows: checkpoints in TensorFlow's V2 format on the driver's
//! own disk (a run given the same directory again resumes from the newest whole one), TensorBoard
//! scalars in a log directory, and the progress a caller watches while it trains.
//!
//! The log is a side output: a write that fails (a full disk) is a warning, once, and the run goes
//! on; its checkpoints and report come as without it ([`EventsLost`] counts what was not
//! written).
//!
//! The checkpoint holds every variable and optimiser slot of the job (under the names of the
//! user's single-tower graph, so it restores into that graph in Rust or Python), integer
//! global-step variables set to the updates applied, and a [`TrainState`] with the update count,
//! the data position of each sampler, the training seconds, the evaluations so far and the plan.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use tensorflow::{DataType, Tensor};

use super::build::Built;
use super::job::Job;
use super::report::{CheckpointWritten, Evaluation, EventsLost, Resumed};
use super::OnProgress;
use crate::cluster::Cluster;
use crate::durable::events::EventWriter;
use crate::durable::{
    from_saved, graph_variables, CheckpointDir, CheckpointSchedule, HostTensor, LoadedCheckpoint,
    NamedTensor, PlanState, TrainState, WorkerShare,
};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::parallel::DataParallelPlan;
use crate::runtime::checkpoint;
use tf_iaware_core::durable::events::tags;

/// Seconds of training between two points of the TensorBoard scalars.
const LOG_EVERY_S: f64 = 1.0;
/// Seconds between two calls of the progress callback.
const PROGRESS_EVERY_S: f64 = 0.25;

/// Where the training so far is at, as a progress callback sees it.
#[derive(Clone, Debug, Serialize)]
pub struct StepProgress {
    /// Updates applied to the variables (over every run resumed from).
    pub updates: u64,
    /// Training samples read.
    pub samples: u64,
    /// `samples` over the training rows.
    pub epochs: f64,
    /// Training seconds (evaluations excluded).
    pub train_seconds: f64,
    /// Loss of the latest step that fetched one.
    pub loss: Option<f32>,
    /// Samples per second since the previous call.
    pub images_per_sec: f64,
    /// The latest held-out metric.
    pub metric: Option<f64>,
    /// Wall time of the latest synchronous step, ms (`None` while workers step
    /// asynchronously).
    pub step_ms: Option<f64>,
    /// Live re-plans so far ([`TrainingOptions::adapt`](super::TrainingOptions::adapt)).
    pub replans: usize,
}

/// Each sampler's position in the training data (samples it has handed out).
#[derive(Clone, Debug, Default)]
pub(super) struct DataPosition {
    /// The synchronous steps' sampler.
    pub sync: u64,
    /// Each worker's own sampler (asynchronous and backup-worker steps), by device.
    pub workers: BTreeMap<String, u64>,
}

/// The `extra` keys of a [`TrainState`] the trainer writes (checked by [`TrainState::check`]
/// when it is read back).
mod key {
    pub use tf_iaware_core::durable::extra::{
        EVALUATIONS, LOSS_FIRST, REACHED_AT, SEED, STRATEGY, SYNC_SAMPLES as SYNC_TAKEN,
        WORKER_SAMPLES as WORKER_TAKEN,
    };
}

/// What a resumed run takes over from its checkpoint.
#[derive(Debug, Default)]
pub(super) struct Carried {
    pub updates: u64,
    pub samples: u64,
    pub train_seconds: f64,
    pub evaluations: Vec<Evaluation>,
    pub loss_first: Option<f32>,
    /// Data positions, when the seed is the one they were drawn with.
    pub position: DataPosition,
}

/// A run's checkpoints, event log and progress callback.
pub(super) struct Keeper {
    dir: Option<CheckpointDir>,
    schedule: CheckpointSchedule,
    events: Option<EventWriter>,
    /// The event-file writes that failed, if any did.
    pub events_lost: Option<EventsLost>,
    progress: Option<OnProgress>,
    /// Integer scalar variables named like a global step: saved as the updates applied (the
    /// replicated graph keeps only float state).
    step_vars: Vec<StepVar>,
    rows: usize,
    seed: u64,
    strategy: String,
    pub written: Vec<CheckpointWritten>,
    pub resumed: Option<Resumed>,
    /// Where each sampler is now.
    pub position: DataPosition,
    /// Each asynchronous worker's position when its phase started, and what it had read by
    /// then (its count in the gate), by device.
    phase: BTreeMap<String, (u64, u64)>,
    pub replans: u64,
    last_log: (f64, u64),
    last_progress: (f64, u64),
    metric: Option<f64>,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keeper")
            .field("dir", &self.dir.as_ref().map(|d| d.path().to_path_buf()))
            .field(
                "events",
                &self.events.as_ref().map(|e| e.path().to_path_buf()),
            )
            .field("written", &self.written.len())
            .finish()
    }
}

/// An integer global-step variable: its name and dtype.
type StepVar = (String, DataType);

/// Names of integer scalar variables the checkpoint saves as the update count, and of the
/// variables it cannot hold.
fn split_variables(job: &Job) -> Result<(Vec<StepVar>, Vec<String>)> {
    let mut steps = Vec::new();
    let mut left_out = Vec::new();
    for v in graph_variables(&job.workload.analyzed.import(&job.workload.name)?)? {
        let scalar = v.dims.as_ref().is_some_and(|d| d.is_empty());
        match v.dtype {
            DataType::Float => {}
            DataType::Int64 | DataType::Int32 if scalar && v.name.contains("global_step") => {
                steps.push((v.name, v.dtype));
            }
            _ => left_out.push(v.name),
        }
    }
    Ok((steps, left_out))
}

fn json<T: Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

impl Keeper {
    /// Opens the checkpoint directory (locked for the whole run) and the log directory of
    /// `options` (either may be absent) and reads the newest usable checkpoint, if any.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for checkpoint options out of range; [`Error::CheckpointLocked`]
    /// naming the process when another run holds the checkpoint directory; [`Error::Io`] naming
    /// a directory that cannot be created or read; [`Error::NoUsableCheckpoint`] when the
    /// directory holds checkpoints but none is whole with a state in range (nothing is restored
    /// or changed then: a run never silently starts again from step 0).
    pub fn open(
        job: &Job,
        strategy: &str,
        options: &super::TrainingOptions,
    ) -> Result<(Keeper, Option<LoadedCheckpoint>)> {
        let (step_vars, left_out) = split_variables(job)?;
        let (dir, schedule, latest) = match &options.checkpoints {
            Some(c) => {
                c.validate()?;
                let dir = CheckpointDir::open(&c.dir, c.keep)?;
                let latest = dir.load_latest()?;
                let schedule = CheckpointSchedule::new(
                    c.every_steps,
                    c.every_seconds,
                    latest.as_ref().map_or(0, |l| l.state.global_step),
                    latest.as_ref().map_or(0.0, |l| l.state.train_seconds),
                );
                (Some(dir), schedule, latest)
            }
            None => (None, CheckpointSchedule::new(None, None, 0, 0.0), None),
        };
        if dir.is_some() && !left_out.is_empty() {
            log::warn!(
                "checkpoints leave out {} (only float variables and integer global steps are \
                 kept)",
                left_out.join(", ")
            );
        }
        // The folder and file are made now (a wrong path is an error before training); writes
        // that fail later, the first included, are warnings.
        let events = options
            .logdir
            .as_deref()
            .map(EventWriter::open)
            .transpose()?;
        let mut keeper = Keeper {
            dir,
            schedule,
            events,
            events_lost: None,
            progress: options.progress.clone(),
            step_vars,
            rows: job.train.len().max(1),
            seed: options.seed,
            strategy: strategy.to_string(),
            written: Vec::new(),
            resumed: None,
            phase: BTreeMap::new(),
            position: DataPosition::default(),
            replans: 0,
            last_log: (0.0, 0),
            last_progress: (0.0, 0),
            metric: None,
        };
        keeper.log(0, EventWriter::start);
        Ok((keeper, latest))
    }

    /// Restores `loaded` into `built` (after its initialisation) and returns what the run
    /// carries over: counts, clock, evaluations and data positions (its state was range-checked
    /// when it was read, [`TrainState::check`]).
    ///
    /// # Errors
    /// [`Error::Checkpoint`] naming a variable of the graph the checkpoint lacks or holds with
    /// another shape (nothing is restored then); TensorFlow's failure of the restoring run.
    pub fn restore(
        &mut self,
        loaded: &LoadedCheckpoint,
        built: &Built,
        started: Instant,
    ) -> Result<Carried> {
        let state = &loaded.state;
        checkpoint::restore(&built.session, &built.state, &loaded.memory_checkpoint())?;
        let extra = &state.extra;
        let get = |k: &str| extra.get(k).cloned();
        let same_seed = get(key::SEED).and_then(|v| v.as_u64()) == Some(self.seed);
        let position = if same_seed {
            DataPosition {
                sync: get(key::SYNC_TAKEN).and_then(|v| v.as_u64()).unwrap_or(0),
                workers: get(key::WORKER_TAKEN)
                    .and_then(|v| serde_json::from_value(v).ok())
                    .unwrap_or_default(),
            }
        } else {
            log::info!("another seed than the checkpoint's: the data is reshuffled");
            DataPosition::default()
        };
        self.position = position.clone();
        let carried = Carried {
            updates: state.global_step,
            samples: state.examples_seen,
            train_seconds: state.train_seconds,
            evaluations: get(key::EVALUATIONS)
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default(),
            loss_first: get(key::LOSS_FIRST)
                .and_then(|v| v.as_f64())
                .map(|l| l as f32),
            position,
        };
        self.replans = state.plan.as_ref().map_or(0, |p| p.replans);
        self.metric = carried.evaluations.last().map(|e| e.metric);
        self.last_log = (carried.train_seconds, carried.samples);
        self.last_progress = self.last_log;
        let previous = get(key::STRATEGY).and_then(|v| v.as_str().map(str::to_string));
        log::info!(
            "resuming from step {} ({}){}",
            state.global_step,
            loaded.info.prefix.display(),
            previous
                .filter(|p| *p != self.strategy)
                .map_or(String::new(), |p| format!(", trained as {p} before"))
        );
        self.resumed = Some(Resumed {
            step: state.global_step,
            prefix: loaded.info.prefix.clone(),
            train_seconds: state.train_seconds,
            samples: state.examples_seen,
            restore_seconds: started.elapsed().as_secs_f64(),
            skipped: loaded
                .skipped
                .iter()
                .map(|(p, why)| format!("{}: {why}", p.display()))
                .collect(),
        });
        Ok(carried)
    }

    /// An asynchronous phase of `plan` starts: each worker's sampler at its position now,
    /// returned in replica order; `samples[k]` is what replica `k` has read so far.
    pub fn phase_started(&mut self, plan: &DataParallelPlan, samples: &[u64]) -> Vec<u64> {
        self.phase.clear();
        plan.replicas
            .iter()
            .enumerate()
            .map(|(k, r)| {
                let start = self.position.workers.get(&r.device).copied().unwrap_or(0);
                let read = samples.get(k).copied().unwrap_or(0);
                self.phase.insert(r.device.clone(), (start, read));
                start
            })
            .collect()
    }

    /// Each worker sampler's position: where its phase started plus what replica `k` of
    /// `plan` has read since (`samples[k]` now, less its count then).
    pub fn workers_read(&mut self, plan: &DataParallelPlan, samples: &[u64]) {
        for (r, n) in plan.replicas.iter().zip(samples) {
            let (start, read) = self.phase.get(&r.device).copied().unwrap_or((0, 0));
            self.position
                .workers
                .insert(r.device.clone(), start + n.saturating_sub(read));
        }
    }

    /// Whether a checkpoint is due after `updates` updates, `seconds` into training.
    pub fn checkpoint_due(&self, updates: u64, seconds: f64) -> bool {
        self.dir.is_some() && self.schedule.due(updates, seconds)
    }

    /// Whether the run's last checkpoint is older than `updates`.
    pub fn behind(&self, updates: u64) -> bool {
        self.dir.is_some() && self.schedule.last_step() < updates
    }

    /// Takes a checkpoint of `built`'s variables after `updates` updates (the steps must be
    /// paused).
    ///
    /// # Errors
    /// TensorFlow's failure fetching the variables; [`Error::Io`] naming the file that could not
    /// be written (the previous checkpoints stay whole).
    pub fn save(&mut self, built: &Built, at: &Snapshot<'_>) -> Result<()> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let started = Instant::now();
        let fetched = checkpoint::save(&built.session, &built.state, at.updates as usize)?;
        let mut tensors = from_saved(&fetched.tensors)?;
        for (name, dtype) in &self.step_vars {
            let t = match dtype {
                DataType::Int32 => HostTensor::from(
                    Tensor::<i32>::new(&[])
                        .with_values(&[i32::try_from(at.updates).unwrap_or(i32::MAX)])
                        .map_err(|e| crate::tf::status::error("global step", &e))?,
                ),
                _ => HostTensor::from(
                    Tensor::<i64>::new(&[])
                        .with_values(&[i64::try_from(at.updates).unwrap_or(i64::MAX)])
                        .map_err(|e| crate::tf::status::error("global step", &e))?,
                ),
            };
            tensors.push(NamedTensor::new(name.clone(), t));
        }
        let state = self.state(at);
        let info = dir.save(&state, &tensors)?;
        self.schedule.taken(at.updates, at.seconds);
        let seconds = started.elapsed().as_secs_f64();
        log::debug!(
            "checkpoint of step {} in {seconds:.3} s: {}",
            at.updates,
            info.prefix.display()
        );
        self.written.push(CheckpointWritten {
            step: at.updates,
            prefix: info.prefix,
            seconds,
        });
        Ok(())
    }

    fn state(&self, at: &Snapshot<'_>) -> TrainState {
        let mut state = TrainState::at_step(at.updates);
        state.epoch = at.samples / self.rows as u64;
        state.position = at.samples % self.rows as u64;
        state.examples_seen = at.samples;
        state.train_seconds = at.seconds;
        state.saved_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        state.plan = Some(PlanState {
            strategy: self.strategy.clone(),
            global_batch: at.plan.replicas.iter().map(|r| r.batch as u64).sum(),
            shares: at
                .plan
                .replicas
                .iter()
                .map(|r| WorkerShare {
                    worker: r.device.clone(),
                    examples: r.batch as u64,
                })
                .collect(),
            replans: self.replans,
        });
        let extra = &mut state.extra;
        extra.insert(key::SEED.into(), json(&self.seed));
        extra.insert(key::STRATEGY.into(), json(&self.strategy));
        extra.insert(key::SYNC_TAKEN.into(), json(&self.position.sync));
        extra.insert(key::WORKER_TAKEN.into(), json(&self.position.workers));
        extra.insert(key::EVALUATIONS.into(), json(&at.evaluations));
        if let Some(r) = at.reached_at {
            extra.insert(key::REACHED_AT.into(), json(&r));
        }
        if let Some(l) = at.loss_first {
            extra.insert(key::LOSS_FIRST.into(), json(&l));
        }
        state
    }

    /// Logs a step's figures (at most every [`LOG_EVERY_S`] of training, and at the `last` step
    /// of a run, so a run shorter than that has its points too) and calls the progress callback
    /// (at most every [`PROGRESS_EVERY_S`]). A failed write of the log is a warning.
    pub fn stepped(&mut self, at: &Snapshot<'_>, last: bool) {
        let rate = |(t0, n0): (f64, u64)| {
            let dt = at.seconds - t0;
            if dt > 0.0 {
                at.samples.saturating_sub(n0) as f64 / dt
            } else {
                0.0
            }
        };
        let due =
            at.seconds - self.last_log.0 >= LOG_EVERY_S || last && at.samples > self.last_log.1;
        if self.events.is_some() && due {
            let images = rate(self.last_log) as f32;
            let mut scalars = vec![(tags::IMAGES_PER_SEC, images)];
            if let Some(l) = at.loss_last {
                scalars.push((tags::LOSS, l));
            }
            self.write(at.updates, &scalars);
            self.last_log = (at.seconds, at.samples);
        }
        if let Some(f) = &self.progress {
            if f.is_every_step() || at.seconds - self.last_progress.0 >= PROGRESS_EVERY_S {
                f.call(&StepProgress {
                    updates: at.updates,
                    samples: at.samples,
                    epochs: at.samples as f64 / self.rows as f64,
                    train_seconds: at.seconds,
                    loss: at.loss_last,
                    images_per_sec: rate(self.last_progress),
                    metric: self.metric,
                    step_ms: at.step_ms,
                    replans: at.replans,
                });
                self.last_progress = (at.seconds, at.samples);
            }
        }
    }

    /// Logs an evaluation (a failed write is a warning).
    pub fn evaluated(&mut self, updates: u64, metric_name: &str, value: f64) {
        self.metric = Some(value);
        let tag = if metric_name == "accuracy" {
            tags::HELD_OUT.to_string()
        } else {
            format!(
                "held_out/{}",
                tf_iaware_core::durable::events::name_part(metric_name)
            )
        };
        self.write(updates, &[(&tag, value as f32)]);
    }

    /// Logs `plan`'s shares and each worker's availability in `cluster`; `replanned` counts a
    /// re-plan. A failed write is a warning.
    pub fn planned(
        &mut self,
        updates: u64,
        plan: &DataParallelPlan,
        cluster: &Cluster,
        replanned: bool,
    ) {
        if replanned {
            self.replans += 1;
        }
        if self.events.is_none() {
            return;
        }
        let mut named: Vec<(String, f32)> = vec![(tags::REPLANS.into(), self.replans as f32)];
        for r in &plan.replicas {
            named.push((tags::worker_share(&r.device), r.batch as f32));
            if let Some(id) = cluster.index_of(&r.device) {
                named.push((
                    tags::worker_availability(&r.device),
                    cluster.device(id).availability as f32,
                ));
            }
        }
        let scalars: Vec<(&str, f32)> = named.iter().map(|(t, v)| (t.as_str(), *v)).collect();
        self.write(updates, &scalars);
    }

    fn write(&mut self, updates: u64, scalars: &[(&str, f32)]) {
        let step = i64::try_from(updates).unwrap_or(i64::MAX);
        self.log(updates, |w| w.scalars(step, scalars));
    }

    /// Runs `write` on the event file, if the run logs; a failure is counted, and a warning the
    /// first time: the log is a side output, and training goes on without the point.
    fn log(&mut self, updates: u64, write: impl FnOnce(&mut EventWriter) -> Result<()>) {
        let Some(w) = &mut self.events else {
            return;
        };
        let Err(e) = write(w) else {
            return;
        };
        match &mut self.events_lost {
            Some(lost) => lost.writes += 1,
            None => {
                log::warn!(
                    "TensorBoard log: {e}; training goes on, and the log takes points again once \
                     it can be written (the report counts the points lost)"
                );
                self.events_lost = Some(EventsLost {
                    writes: 1,
                    first_update: updates,
                    error: e.to_string(),
                });
            }
        }
    }

    /// The event file, if the run logs.
    pub fn event_file(&self) -> Option<&Path> {
        self.events.as_ref().map(|e| e.path())
    }
}

/// The run's figures at one moment, for a checkpoint or a log point.
pub(super) struct Snapshot<'a> {
    pub updates: u64,
    pub samples: u64,
    pub seconds: f64,
    pub plan: &'a DataParallelPlan,
    pub evaluations: &'a [Evaluation],
    pub reached_at: Option<f64>,
    pub loss_first: Option<f32>,
    pub loss_last: Option<f32>,
    /// Wall time of the latest synchronous step, ms.
    pub step_ms: Option<f64>,
    /// Live re-plans so far.
    pub replans: usize,
}
