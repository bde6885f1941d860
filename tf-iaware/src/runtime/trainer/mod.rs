//! The data-parallel trainer: a user's training graph trained on the user's data over a
//! cluster's workers and ps tasks, with any [`DataParallelStrategy`](crate::parallel::DataParallelStrategy), until a number of updates,
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
pub(crate) mod job;
mod keep;
pub(crate) mod options;
mod progress;
mod recover;
pub(crate) mod report;
mod sync;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crate::cluster::Cluster;
use crate::config::SessionConfig;
use crate::data::Sampler;
use crate::error::{Error, Result};
use crate::parallel::{DataParallelPlan, Updates};
use crate::runtime::adapt::Adapter;
use crate::runtime::data_parallel::plan_ps;
use crate::runtime::train::StepTimes;

use build::{build, Built};
pub use contender::{check_backups, contender, Contender, Feedback, Planning};
use evaluate::Evaluator;
use gate::{Clock, Gate};
// `Job`, `Metric`, `TrainingOptions` and `TrainingReport` are public at the crate root.
pub(crate) use job::Job;
pub use keep::StepProgress;
use keep::{Carried, Keeper};
pub(crate) use options::TrainingOptions;
pub use options::{
    CheckpointOptions, RecoverOptions, DEFAULT_CHECKPOINT_EVERY_S, DEFAULT_KEEP, TARGET_EPOCHS_CAP,
};
use progress::Progress;
pub(crate) use report::TrainingReport;
pub use report::{
    CheckpointWritten, Choice, Evaluation, EventsLost, Readmitted, Recovered, Resumed, SafeCopy,
    TracedStep, WorkerCount, STEP_TIMES_KEPT,
};

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

/// Whether `plan`'s shares are within one sample of each other over every replica.
fn is_even_split(plan: &DataParallelPlan) -> bool {
    let shares = plan.replicas.iter().map(|r| r.batch);
    match (shares.clone().min(), shares.max()) {
        (Some(lo), Some(hi)) => hi - lo <= 1 && plan.replicas.len() > 1,
        _ => false,
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
    options.validate_for(job)?;
    options.check_outputs()?;
    let plan = usable_plan(contender, job)?;
    let adapter = adapter(contender, cluster, options)?;
    let started = Instant::now();
    let evaluator = Evaluator::new(job)?;
    let (mut keeper, latest) = Keeper::open(job, contender.strategy.name(), options)?;
    let tag = format!("{}-{}", contender.strategy.name(), std::process::id());
    let built = build(
        job,
        &plan,
        contender.updates(),
        cluster,
        config,
        &tag,
        options.own_masters.as_ref(),
    )?;
    let init = built.session.op(&job.workload.sidecar.init, "init")?;
    built.session.run(&[], &[init], &[], false)?;
    let mut carried = match &latest {
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
    keeper.planned(carried.updates, &plan, cluster, false);
    let tasks = options
        .recover
        .as_ref()
        .and(contender.replanning.as_ref())
        .and_then(|r| r.tasks.as_ref());
    let mut progress = Progress::new(
        job,
        evaluator.as_ref(),
        options,
        keeper,
        &mut carried,
        tasks,
        started,
    );
    progress.safeguard(&built, carried.updates)?;
    let mut run = Run {
        contender,
        job,
        cluster,
        config: config.clone(),
        ps: contender
            .replanning
            .as_ref()
            .map_or_else(|| plan_ps(&plan), |r| r.planner.ps().to_vec()),
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
        session_steps: 0,
        deadline_retries: 0,
        retried: 0,
        retried_at: 0,
        trace_at: options.steps.filter(|_| options.trace_last),
        traced: None,
    };
    let startup_seconds = started.elapsed().as_secs_f64();
    let first_plan = plan.clone();
    let (plan, chosen) = run.phases(plan, &mut progress)?;
    run.finish(&plan, &mut progress)?;
    Ok(run.report(progress, plan, first_plan, chosen, startup_seconds))
}

/// `contender`'s plan without empty shares, checked against the job: enough workers for the
/// backups, no share larger than the data set.
///
/// # Errors
/// [`Error::InvalidArgument`] for as many backup workers as workers; [`Error::DataShare`].
fn usable_plan(contender: &Contender, job: &Job) -> Result<DataParallelPlan> {
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
    if let Updates::Backup { backups } = contender.updates() {
        check_backups(backups, plan.replicas.len())?;
    }
    if let Some(r) = plan.replicas.iter().find(|r| r.batch > job.train.len()) {
        return Err(Error::DataShare {
            file: job.train.name().into(),
            rows: r.batch,
            len: job.train.len(),
        });
    }
    Ok(plan)
}

/// Live re-planning when `options.adapt` asks for it.
///
/// # Errors
/// [`Error::InvalidArgument`] naming adaptation for a contender without a calibrated
/// synchronous plan; the metrics feed's errors.
fn adapter(
    contender: &Contender,
    cluster: &Cluster,
    options: &TrainingOptions,
) -> Result<Option<Adapter>> {
    match (&options.adapt, &contender.replanning) {
        (None, _) => Ok(None),
        (Some(a), Some(r))
            if matches!(contender.updates(), Updates::Sync | Updates::Adaptive)
                && r.planner.sizes_shares() =>
        {
            Ok(Some(Adapter::start(r, cluster, a)?))
        }
        (Some(_), _) => Err(bad(
            "adaptation",
            format!(
                "live re-planning re-makes synchronous plans that size shares (infra-aware, \
                 infra-aware-async); `{}` shares equally",
                contender.strategy
            ),
        )),
    }
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
    /// Steps the current session has run (its first ones register the graph everywhere).
    session_steps: usize,
    /// Retries of the step in flight after its deadline passed with every task answering.
    deadline_retries: u32,
    /// Every such retry in the run.
    retried: usize,
    /// Updates applied at the last such retry.
    retried_at: u64,
    /// The update whose step is traced ([`TrainingOptions::trace_last`]).
    trace_at: Option<u64>,
    /// That step, once run.
    traced: Option<TracedStep>,
}

impl Run<'_> {
    /// Trains from `plan` until a bound or the target, through recoveries and re-admissions;
    /// returns the plan at the end and what [`Updates::Adaptive`] chose.
    ///
    /// # Errors
    /// A phase's failure that is not recovered from; errors of recovering and re-admitting.
    fn phases(
        &mut self,
        mut plan: DataParallelPlan,
        progress: &mut Progress<'_>,
    ) -> Result<(DataParallelPlan, Option<Choice>)> {
        let (samples, updates) = self.gate.totals();
        if progress.bound_reached(&self.clock, samples, updates) {
            // Resumed from a checkpoint at or past a bound: nothing left to train.
            self.clock.stop();
            return Ok((plan, None));
        }
        let mut chosen = None;
        loop {
            self.current = plan.clone();
            match self.phase(self.contender.updates(), plan, progress) {
                Ok((end, choice)) if !progress.back.is_empty() => {
                    // Ended early: dropped workers answer again.
                    chosen = choice.or(chosen);
                    plan = self.readmit(end, progress)?;
                }
                Ok((end, choice)) => return Ok((end, choice.or(chosen))),
                Err(failure) => {
                    let current = self.current.clone();
                    plan = self.recover(failure, &current, progress)?;
                }
            }
        }
    }

    /// The end of the run: the clock stopped, the last evaluation, the workers' data positions,
    /// the last checkpoint and log point.
    ///
    /// # Errors
    /// Errors of evaluating and of writing the checkpoint or the log.
    fn finish(&mut self, plan: &DataParallelPlan, progress: &mut Progress<'_>) -> Result<()> {
        self.clock.stop();
        let (samples, updates) = self.gate.totals();
        progress.evaluate_final(
            &self.built.session,
            &self.built.state,
            &self.clock,
            samples,
            updates,
        )?;
        if self.contender.updates() != Updates::Sync {
            let samples = self.gate.lock().samples.clone();
            progress.keeper.workers_read(plan, &samples);
        }
        progress.kept(&self.built, self.gate, &self.clock, plan, true)
    }

    /// The report of the run that ended with `plan`.
    fn report(
        &mut self,
        mut progress: Progress<'_>,
        plan: DataParallelPlan,
        first_plan: DataParallelPlan,
        chosen: Option<Choice>,
        startup_seconds: f64,
    ) -> TrainingReport {
        let job = self.job;
        let updates_mode = self.contender.updates();
        let (samples, _) = self.gate.totals();
        let s = self.gate.lock();
        let dropped = match updates_mode {
            Updates::Backup { backups } => {
                let computed: u64 = s.steps.iter().sum();
                let aggregated = (plan.replicas.len() - backups) as u64;
                computed.saturating_sub(s.updates * aggregated)
            }
            _ => 0,
        };
        let train_seconds = self.clock.seconds();
        let keeper = progress.keeper;
        TrainingReport {
            strategy: self.contender.strategy,
            updates_mode,
            own_masters: progress.options.own_masters.is_some()
                && matches!(updates_mode, Updates::Async | Updates::Adaptive),
            metric: job.metric().map(|m| m.name().to_string()),
            reached: progress.reached_at.is_some(),
            time_to_target_s: progress.reached_at,
            epoch_bound: progress.options.epoch_bound(),
            wall_to_target_s: progress.reached_wall_s,
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
            resized: std::mem::take(&mut self.resized),
            chosen,
            first_plan,
            plan,
            startup_seconds,
            event_file: keeper.event_file().map(PathBuf::from),
            events_lost: keeper.events_lost,
            resumed_from: keeper.resumed,
            checkpoints: keeper.written,
            step_ms: StepTimes::from_samples(self.step_ms.make_contiguous()),
            replans: self
                .adapter
                .as_ref()
                .map(|a| a.records().to_vec())
                .unwrap_or_default(),
            metrics_cost_share: self.adapter.as_ref().and_then(Adapter::metrics_cost_share),
            replans_declined: self.adapter.as_ref().map_or(0, Adapter::kept),
            readmissions: std::mem::take(&mut progress.readmitted),
            deadline_retries: self.retried,
            safe_copies: progress
                .safe
                .as_mut()
                .map(|s| std::mem::take(&mut s.copies))
                .unwrap_or_default(),
            recoveries: progress.safe.map(|s| s.recoveries).unwrap_or_default(),
            traced: self.traced.take(),
        }
    }

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
                target: None,
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
        // A target alone bounds the run, at most TARGET_EPOCHS_CAP epochs.
        let alone = TrainingOptions {
            steps: None,
            epochs: None,
            max_seconds: None,
            ..ok.clone()
        };
        assert!(alone.validate().is_ok());
        assert_eq!(alone.epoch_bound(), Some(TARGET_EPOCHS_CAP));
        assert_eq!(ok.epoch_bound(), Some(1.0));
        assert_eq!(
            TrainingOptions {
                epochs: None,
                ..ok.clone()
            }
            .epoch_bound(),
            None
        );
        assert!(check_backups(2, 2)
            .unwrap_err()
            .to_string()
            .contains("backup workers"));
        assert!(check_backups(1, 2).is_ok());
    }
}
