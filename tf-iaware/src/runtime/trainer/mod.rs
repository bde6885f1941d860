//! The data-parallel trainer: a user's training graph trained on the user's data over a
//! cluster's workers and ps tasks, with any [`DataParallelStrategy`], until a number of updates,
//! epochs or seconds, or a held-out metric's target.
//!
//! How the replicas' gradients reach the variables ([`Updates`]):
//! - `Sync`: one in-graph synchronous step over every replica (`replica-setter`'s equal shares
//!   or `infra-aware`'s calibrated ones), optionally re-sizing the shares from measured replica
//!   times every few steps ([`Feedback`], LB-BSP's idea);
//! - `Async`: ParameterServerStrategy/ClusterCoordinator semantics — every worker steps on its
//!   own share as fast as it can, at most one step in flight, its gradient applied on the ps as
//!   it arrives, no barrier (`async-ps` with equal shares);
//! - `Backup`: SyncReplicasOptimizer semantics — each step aggregates the first N−k gradients
//!   of that step in `ConditionalAccumulator`s on the ps and drops the rest; workers take tokens
//!   from one shared queue as TensorFlow's do (N − k at the start, N after each step), so a fast
//!   worker may contribute several gradients to one step;
//! - `Adaptive` (`infra-aware-async`): the infra-aware shares, trained asynchronously only if a
//!   short asynchronous window reads clearly more samples per second than a synchronous one (on
//!   balanced workers a barrier costs little and fresh gradients win).
//!
//! Every worker reads its own rows of the training set: each replica takes its share of a step
//! from a seeded, per-epoch reshuffle (`Dataset.shuffle(n).repeat()`). The held-out metric is
//! measured every [`TrainingOptions::eval_every_s`] seconds of training and at the end: the
//! workers are paused, the variables read from the ps and evaluated in a local session; the
//! pause is excluded from the training clock and reported.

mod build;
mod concurrent;
mod contender;
mod evaluate;
mod gate;
mod job;
mod keep;
mod options;
mod recover;
mod sync;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::cluster::tf_config::TfConfig;
use crate::cluster::Cluster;
use crate::config::SessionConfig;
use crate::data::Sampler;
use crate::error::{Error, Result};
use crate::parallel::{DataParallelPlan, DataParallelStrategy, Shares, Updates};
use crate::runtime::adapt::{Adapter, ReplanRecord};
use crate::runtime::checkpoint::{self, StateVar};
use crate::runtime::data_parallel::plan_ps;
use crate::runtime::session::PlacedSession;
use crate::runtime::train::StepTimes;

use build::{build, Built};
pub use contender::{check_backups, contender, Contender, Feedback, Planning};
use evaluate::Evaluator;
use gate::{Clock, Gate};
pub use job::{Job, Metric};
use keep::{Carried, Keeper, Snapshot};
pub use keep::{CheckpointWritten, Resumed, StepProgress};
pub use options::{
    CheckpointOptions, RecoverOptions, TrainingOptions, DEFAULT_CHECKPOINT_EVERY_S, DEFAULT_KEEP,
};
use recover::Safekeeping;
pub use recover::{Readmitted, Recovered};

/// A progress callback ([`TrainingOptions::progress`]): called with the run's figures from the
/// thread that coordinates the steps (keep it quick: the steps wait for it).
#[derive(Clone)]
pub struct OnProgress {
    f: Arc<dyn Fn(&StepProgress) + Send + Sync>,
    every_step: bool,
}

impl OnProgress {
    /// Calls `f` with the progress a few times a second.
    pub fn new(f: impl Fn(&StepProgress) + Send + Sync + 'static) -> Self {
        OnProgress {
            f: Arc::new(f),
            every_step: false,
        }
    }

    /// Calls `f` after every step the coordinating thread runs (every synchronous update; a
    /// few times a second for asynchronous workers, which step on threads of their own): for
    /// per-step figures ([`StepProgress::step_ms`]) or acting at a given update.
    pub fn every_step(f: impl Fn(&StepProgress) + Send + Sync + 'static) -> Self {
        OnProgress {
            f: Arc::new(f),
            every_step: true,
        }
    }

    /// Whether it is called after every step.
    pub(crate) fn is_every_step(&self) -> bool {
        self.every_step
    }

    pub(crate) fn call(&self, p: &StepProgress) {
        (self.f)(p);
    }
}

impl std::fmt::Debug for OnProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnProgress")
            .field("every_step", &self.every_step)
            .finish_non_exhaustive()
    }
}

/// An [`Error::InvalidArgument`] naming `what`.
fn bad(what: &str, reason: String) -> Error {
    Error::InvalidArgument {
        what: what.into(),
        reason,
    }
}

/// Training seconds of each probe window of [`Updates::Adaptive`].
pub(crate) const PROBE_S: f64 = 1.5;
/// Samples per second asynchronous training must read, relative to synchronous, to be chosen.
pub(crate) const ASYNC_GAIN: f64 = 1.25;

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

/// Whether `plan`'s shares are within one sample of each other over every replica.
fn is_even_split(plan: &DataParallelPlan) -> bool {
    let shares = plan.replicas.iter().map(|r| r.batch);
    match (shares.clone().min(), shares.max()) {
        (Some(lo), Some(hi)) => hi - lo <= 1 && plan.replicas.len() > 1,
        _ => false,
    }
}

/// What [`train`] did.
#[derive(Clone, Debug, Serialize)]
pub struct TrainingReport {
    /// The strategy.
    pub strategy: DataParallelStrategy,
    /// How its workers combined their gradients.
    pub updates_mode: Updates,
    /// The held-out metric's name (`accuracy`, a tensor), if evaluated.
    pub metric: Option<String>,
    /// Whether the target was reached.
    pub reached: bool,
    /// Training seconds until the first evaluation at or beyond the target.
    pub time_to_target_s: Option<f64>,
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
    /// Wall time of the synchronous steps, ms (traced ones included; the last
    /// [`STEP_TIMES_KEPT`] steps), `None` without synchronous steps.
    pub step_ms: Option<StepTimes>,
    /// Every live re-plan ([`TrainingOptions::adapt`]).
    pub replans: Vec<ReplanRecord>,
    /// CPU share of one core the background metrics reader used ([`TrainingOptions::adapt`]).
    pub metrics_cost_share: Option<f64>,
    /// Every recovery from lost tasks ([`TrainingOptions::recover`]).
    pub recoveries: Vec<Recovered>,
    /// Workers recoveries dropped and took back once they answered again.
    pub readmissions: Vec<Readmitted>,
}

/// Synchronous step times [`TrainingReport::step_ms`] is computed from (the latest).
pub const STEP_TIMES_KEPT: usize = 1 << 16;

/// Evaluations and the stopping rule, shared by every mode.
struct Progress<'a> {
    job: &'a Job,
    evaluator: Option<&'a Evaluator>,
    options: &'a TrainingOptions,
    evaluations: Vec<Evaluation>,
    eval_seconds: f64,
    next_eval: f64,
    reached_at: Option<f64>,
    /// Checkpoints, event log and progress callback.
    keeper: Keeper,
    /// Evaluations carried over from the runs a resumed run continues.
    carried: usize,
    /// Wall time of the latest synchronous step, ms (`None` in asynchronous phases).
    step_ms: Option<f64>,
    /// Live re-plans so far.
    replans: usize,
    /// The driver's copies of the variables and the recoveries ([`TrainingOptions::recover`]).
    safe: Option<Safekeeping>,
    /// The cluster's tasks, when lost ones may be recovered from and taken back.
    tasks: Option<&'a TfConfig>,
    /// Workers recoveries dropped, probed to be taken back.
    dropped: Vec<String>,
    /// Dropped workers that answer again, waiting for the phase to end.
    back: Vec<String>,
    /// The probe of the dropped workers in flight (off this thread: a hung worker's agent
    /// takes its whole timeout not to answer).
    probe: Option<std::thread::JoinHandle<Vec<String>>>,
    /// Workers taken back.
    readmitted: Vec<Readmitted>,
}

impl Progress<'_> {
    /// Whether an evaluation is due.
    fn eval_due(&self, clock: &Clock) -> bool {
        self.evaluator.is_some() && clock.seconds() >= self.next_eval
    }

    /// Whether a bound of the run is reached.
    fn bound_reached(&self, clock: &Clock, samples: u64, updates: u64) -> bool {
        let o = self.options;
        let epochs = samples as f64 / self.job.train.len().max(1) as f64;
        o.steps.is_some_and(|s| updates >= s)
            || o.epochs.is_some_and(|e| epochs >= e)
            || o.max_seconds.is_some_and(|t| clock.seconds() >= t)
            || self.reached_at.is_some()
            || o.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// Evaluates `session`'s variables (the clock stopped); returns whether the target is
    /// reached.
    fn evaluate(
        &mut self,
        session: &PlacedSession,
        state: &[StateVar],
        clock: &Clock,
        samples: u64,
        updates: u64,
    ) -> Result<bool> {
        let Some(evaluator) = self.evaluator else {
            return Ok(false);
        };
        let started = Instant::now();
        let checkpoint = checkpoint::save(session, state, updates as usize)?;
        let metric = evaluator.evaluate(self.job, &checkpoint)?;
        self.eval_seconds += started.elapsed().as_secs_f64();
        let seconds = clock.seconds();
        self.evaluations.push(Evaluation {
            seconds,
            epoch: samples as f64 / self.job.train.len().max(1) as f64,
            updates,
            metric,
        });
        let name = self.job.metric().map_or("metric", |m| m.name());
        log::info!("{seconds:.1} s, {updates} updates: held-out {name} {metric:.4}");
        self.keeper.evaluated(updates, name, metric)?;
        let reached = match (self.job.metric(), self.options.target) {
            (Some(m), Some(t)) => m.reaches(metric, t),
            _ => false,
        };
        if reached && self.reached_at.is_none() {
            self.reached_at = Some(seconds);
        }
        self.next_eval = seconds + self.options.eval_every_s;
        Ok(reached)
    }

    /// Whether a checkpoint is due now.
    fn checkpoint_due(&self, gate: &Gate, clock: &Clock) -> bool {
        let (_, updates) = gate.totals();
        self.keeper.checkpoint_due(updates, clock.seconds())
            || self.safe.as_ref().is_some_and(|s| s.due(updates))
    }

    /// After a step: a checkpoint of `built`'s variables when due (or, with `last`, when the
    /// latest is older than the run's end), a log point, the progress callback. The steps must
    /// be paused for a checkpoint.
    fn kept(
        &mut self,
        built: &Built,
        gate: &Gate,
        clock: &Clock,
        plan: &DataParallelPlan,
        last: bool,
    ) -> Result<()> {
        let (samples, updates) = gate.totals();
        let (loss_first, loss_last) = {
            let s = gate.lock();
            (s.loss_first, s.loss_last)
        };
        let at = Snapshot {
            updates,
            samples,
            seconds: clock.seconds(),
            plan,
            evaluations: &self.evaluations,
            reached_at: self.reached_at,
            loss_first,
            loss_last,
            step_ms: self.step_ms,
            replans: self.replans,
        };
        let due = self.keeper.checkpoint_due(updates, at.seconds);
        if due || last && self.keeper.behind(updates) {
            self.keeper.save(built, &at)?;
        }
        self.keeper.stepped(&at, last)
    }

    /// Evaluates unless this run's last evaluation was of these same updates (a resumed run
    /// evaluates its restored variables even when it had nothing left to train).
    fn evaluate_final(
        &mut self,
        session: &PlacedSession,
        state: &[StateVar],
        clock: &Clock,
        samples: u64,
        updates: u64,
    ) -> Result<()> {
        if self.evaluations.len() > self.carried
            && self
                .evaluations
                .last()
                .is_some_and(|e| e.updates == updates)
        {
            return Ok(());
        }
        self.evaluate(session, state, clock, samples, updates)
            .map(|_| ())
    }
}

/// Trains `job` as `contender` on `cluster` (a session configured by `config`) until a bound of
/// `options` or the target.
///
/// # Errors
/// [`Error::InvalidArgument`] for options out of range or as many backup workers as workers;
/// the data set's errors (naming the input and file); anything building, placing or running
/// can return ([`Error::TensorFlow`] naming the run that failed); [`Error::NonFiniteLoss`] if
/// training diverges.
pub fn train(
    contender: &Contender,
    job: &Job,
    cluster: &Cluster,
    config: &SessionConfig,
    options: &TrainingOptions,
) -> Result<TrainingReport> {
    options.validate()?;
    let updates_mode = contender.updates();
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
    if let Updates::Backup { backups } = updates_mode {
        check_backups(backups, plan.replicas.len())?;
    }
    let adapter = match (&options.adapt, &contender.replanning) {
        (None, _) => None,
        (Some(a), Some(r))
            if matches!(updates_mode, Updates::Sync | Updates::Adaptive)
                && contender.strategy.shares() == Shares::Calibrated
                && !r.calibration.is_empty() =>
        {
            Some(Adapter::start(r, cluster, a)?)
        }
        (Some(_), _) => {
            return Err(bad(
                "adaptation",
                format!(
                    "live re-planning re-makes calibrated synchronous plans (infra-aware, \
                     infra-aware-async); `{}` has none",
                    contender.strategy
                ),
            ))
        }
    };
    if let Some(r) = plan.replicas.iter().find(|r| r.batch > job.train.len()) {
        return Err(Error::DataShare {
            file: job.train.name().into(),
            rows: r.batch,
            len: job.train.len(),
        });
    }
    let started = Instant::now();
    let evaluator = Evaluator::new(job)?;
    let (mut keeper, latest) = Keeper::open(job, contender.strategy.name(), options)?;
    let tag = format!("{}-{}", contender.strategy.name(), std::process::id());
    let built = build(
        job,
        &plan,
        updates_mode,
        cluster,
        config,
        &tag,
        options.own_masters.as_ref(),
    )?;
    let init = built.session.op(&job.workload.sidecar.init, "init")?;
    built.session.run(&[], &[init], &[], false)?;
    let carried = match &latest {
        Some(loaded) => keeper.restore(loaded, &built, started)?,
        None => Carried::default(),
    };
    let gate = Gate::new(plan.replicas.len());
    {
        let mut s = gate.lock();
        s.updates = carried.updates;
        s.carried_samples = carried.samples;
        s.loss_first = carried.loss_first;
    }
    keeper.planned(carried.updates, &plan, cluster, false)?;
    let mut progress = Progress {
        job,
        evaluator: evaluator.as_ref(),
        options,
        eval_seconds: 0.0,
        next_eval: carried.train_seconds + options.eval_every_s,
        reached_at: carried.reached_at,
        carried: carried.evaluations.len(),
        evaluations: carried.evaluations,
        keeper,
        step_ms: None,
        replans: 0,
        safe: None,
        tasks: options
            .recover
            .as_ref()
            .and(contender.replanning.as_ref())
            .and_then(|r| r.tasks.as_ref()),
        dropped: Vec::new(),
        back: Vec::new(),
        probe: None,
        readmitted: Vec::new(),
    };
    if options.recover.is_some() {
        progress.safe = Some(Safekeeping::new(
            options.recover.as_ref().map_or(1, |r| r.every_updates),
        ));
        progress.safeguard(&built, carried.updates)?;
    }
    let mut run = Run {
        contender,
        job,
        cluster,
        config: config.clone(),
        ps: contender
            .replanning
            .as_ref()
            .map_or_else(|| plan_ps(&plan), |r| r.ps.clone()),
        current: plan.clone(),
        resized: Vec::new(),
        tag: &tag,
        gate: &gate,
        clock: Clock::resumed(carried.train_seconds),
        sampler: Sampler::resumed(job.train.len(), options.seed, carried.position.sync),
        built,
        seed: options.seed,
        adapter,
        step_ms: std::collections::VecDeque::new(),
    };
    let startup_seconds = started.elapsed().as_secs_f64();
    let first_plan = plan.clone();
    let mut chosen = None;
    let (samples, updates) = gate.totals();
    let mut plan = plan;
    if progress.bound_reached(&run.clock, samples, updates) {
        // Resumed from a checkpoint at or past a bound: nothing left to train.
        run.clock.stop();
    } else {
        loop {
            run.current = plan.clone();
            match run.phase(updates_mode, plan, &mut progress) {
                Ok((end, choice)) if !progress.back.is_empty() => {
                    // Ended early: dropped workers answer again.
                    chosen = choice.or(chosen);
                    plan = run.readmit(end, &mut progress)?;
                }
                Ok((end, choice)) => {
                    plan = end;
                    chosen = choice;
                    break;
                }
                Err(failure) => {
                    let current = run.current.clone();
                    plan = run.recover(failure, &current, &mut progress)?;
                }
            }
        }
    }
    let resized = std::mem::take(&mut run.resized);
    run.clock.stop();
    let (samples, updates) = gate.totals();
    progress.evaluate_final(
        &run.built.session,
        &run.built.state,
        &run.clock,
        samples,
        updates,
    )?;
    if updates_mode != Updates::Sync {
        let samples = gate.lock().samples.clone();
        progress.keeper.workers_read(&plan, &samples);
    }
    progress.kept(&run.built, &gate, &run.clock, &plan, true)?;
    let keeper = progress.keeper;
    let s = gate.lock();
    let dropped = match updates_mode {
        Updates::Backup { backups } => {
            let computed: u64 = s.steps.iter().sum();
            let aggregated = (plan.replicas.len() - backups) as u64;
            computed.saturating_sub(s.updates * aggregated)
        }
        _ => 0,
    };
    let train_seconds = run.clock.seconds();
    Ok(TrainingReport {
        strategy: contender.strategy,
        updates_mode,
        metric: job.metric().map(|m| m.name().to_string()),
        reached: progress.reached_at.is_some(),
        time_to_target_s: progress.reached_at,
        train_seconds,
        eval_seconds: progress.eval_seconds,
        updates: s.updates,
        samples,
        epochs: samples as f64 / job.train.len().max(1) as f64,
        images_per_sec: samples as f64 / train_seconds.max(1e-9),
        loss_first: s.loss_first,
        loss_last: s.loss_last,
        final_metric: progress.evaluations.last().map(|e| e.metric),
        evaluations: progress.evaluations,
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
            // Workers a re-plan left out, with what they did before.
            .chain(
                s.retired
                    .iter()
                    .map(|(device, &(steps, samples))| WorkerCount {
                        device: device.clone(),
                        batch: 0,
                        steps,
                        samples,
                    }),
            )
            .collect(),
        dropped_gradients: dropped,
        resized,
        chosen,
        first_plan,
        plan,
        startup_seconds,
        event_file: keeper.event_file().map(PathBuf::from),
        resumed_from: keeper.resumed,
        checkpoints: keeper.written,
        step_ms: StepTimes::from_samples(run.step_ms.make_contiguous()),
        replans: run
            .adapter
            .as_ref()
            .map(|a| a.records().to_vec())
            .unwrap_or_default(),
        metrics_cost_share: run.adapter.as_ref().and_then(Adapter::metrics_cost_share),
        readmissions: std::mem::take(&mut progress.readmitted),
        recoveries: progress.safe.map(|s| s.recoveries).unwrap_or_default(),
    })
}

/// One training run's context, shared by its phases.
struct Run<'a> {
    contender: &'a Contender,
    job: &'a Job,
    cluster: &'a Cluster,
    /// Sessions' configuration (its master moves when a recovery loses its task).
    config: SessionConfig,
    /// The parameter servers in use.
    ps: Vec<String>,
    /// The plan training now.
    current: DataParallelPlan,
    /// The shares after each LB-BSP re-size.
    resized: Vec<Vec<usize>>,
    tag: &'a str,
    gate: &'a Gate,
    clock: Clock,
    /// The synchronous steps' sampler (one stream over every synchronous phase).
    sampler: Sampler,
    built: Built,
    seed: u64,
    /// Live re-planning between synchronous steps.
    adapter: Option<Adapter>,
    /// Wall times of the latest synchronous steps, ms (at most [`STEP_TIMES_KEPT`]).
    step_ms: std::collections::VecDeque<f64>,
}

impl Run<'_> {
    /// Trains `plan` in `mode` until a bound or the target; returns the plan at the end and,
    /// for [`Updates::Adaptive`], its choice.
    fn phase(
        &mut self,
        mode: Updates,
        plan: DataParallelPlan,
        progress: &mut Progress<'_>,
    ) -> Result<(DataParallelPlan, Option<Choice>)> {
        Ok(match mode {
            Updates::Sync => (self.sync(plan, progress, None)?.0, None),
            Updates::Async | Updates::Backup { .. } => {
                self.concurrent(&plan, self.seed, progress, None)?;
                (plan, None)
            }
            Updates::Adaptive => {
                let (plan, choice) = self.adaptive(plan, progress)?;
                (plan, Some(choice))
            }
        })
    }

    /// `infra-aware-async`: a synchronous and an asynchronous probe window, then the faster
    /// by at least [`ASYNC_GAIN`]; equal shares train synchronously without probing.
    fn adaptive(
        &mut self,
        plan: DataParallelPlan,
        progress: &mut Progress<'_>,
    ) -> Result<(DataParallelPlan, Choice)> {
        let window = |run: &Run<'_>| (run.clock.seconds(), run.gate.totals().0);
        let rate =
            |(t0, n0): (f64, u64), (t1, n1): (f64, u64)| (n1 - n0) as f64 / (t1 - t0).max(1e-9);
        // Equal shares: the planner could not tell the workers apart (or found no gain in
        // telling them apart), so there is no straggler for asynchrony to hide and its stale
        // gradients only cost — synchronous training throughout, no probe.
        let even = is_even_split(&plan);
        let start = window(self);
        let until = (!even).then_some(start.0 + PROBE_S);
        let (plan, mut done) = self.sync(plan, progress, until)?;
        let middle = window(self);
        let sync_rate = rate(start, middle);
        let mut async_rate = None;
        if !done && !even {
            self.clock.start();
            let until = Some(middle.0 + PROBE_S);
            done = self.concurrent(&plan, self.seed, progress, until)?;
            async_rate = Some(rate(middle, window(self)));
        }
        let go_async = async_rate.is_some_and(|a| a >= ASYNC_GAIN * sync_rate);
        let choice = Choice {
            sync_images_per_sec: sync_rate,
            async_images_per_sec: async_rate,
            asynchronous: go_async,
            even_split: even,
        };
        log::info!("{}: {:?}", self.contender.strategy, choice);
        if !done {
            self.clock.start();
            if go_async {
                self.concurrent(&plan, self.seed ^ 0x5eed, progress, None)?;
            } else {
                self.sync(plan.clone(), progress, None)?;
            }
        }
        Ok((plan, choice))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parallel::Replica;
    use std::collections::BTreeMap;

    fn plan(shares: &[usize]) -> DataParallelPlan {
        DataParallelPlan {
            strategy: "s".into(),
            replicas: shares
                .iter()
                .enumerate()
                .map(|(k, &batch)| Replica {
                    device: format!("/job:worker/task:{k}"),
                    batch,
                })
                .collect(),
            variable_devices: BTreeMap::new(),
            global_device: "/job:ps/task:0".into(),
            predicted_step_ms: None,
        }
    }

    #[test]
    fn only_shares_within_one_sample_are_an_even_split() {
        assert!(is_even_split(&plan(&[16, 16, 16, 16])));
        assert!(is_even_split(&plan(&[22, 21, 21])));
        assert!(!is_even_split(&plan(&[24, 8])));
        assert!(!is_even_split(&plan(&[17, 15])));
        // One replica has nobody to wait for: nothing to decide, not "even".
        assert!(!is_even_split(&plan(&[64])));
    }

    #[test]
    fn options_out_of_range_are_refused() {
        let ok = TrainingOptions {
            target: Some(0.9),
            max_seconds: Some(60.0),
            ..TrainingOptions::default()
        };
        assert!(ok.validate().is_ok());
        for bad in [
            TrainingOptions {
                steps: None,
                epochs: None,
                max_seconds: None,
                ..ok.clone()
            },
            TrainingOptions {
                steps: Some(0),
                ..ok.clone()
            },
            TrainingOptions {
                epochs: Some(f64::NAN),
                ..ok.clone()
            },
            TrainingOptions {
                target: Some(f64::NAN),
                ..ok.clone()
            },
            TrainingOptions {
                eval_every_s: 0.0,
                ..ok.clone()
            },
            TrainingOptions {
                max_seconds: Some(-1.0),
                ..ok.clone()
            },
            TrainingOptions {
                max_seconds: Some(f64::INFINITY),
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert!(check_backups(2, 2)
            .unwrap_err()
            .to_string()
            .contains("backup workers"));
        assert!(check_backups(1, 2).is_ok());
    }
}
