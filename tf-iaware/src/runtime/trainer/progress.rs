//! Where a run is: its evaluations and stopping rule, checkpoints and log ([`Keeper`]), the
//! driver's copies for recovery and the workers to take back ([`Progress`]).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::build::Built;
use super::evaluate::Evaluator;
use super::gate::{Clock, Gate};
use super::job::Metric;
use super::keep::{Carried, Keeper, Snapshot};
use super::report::Readmitted;
use super::report::{Recovered, SafeCopy};
use super::{Evaluation, Job, TrainingOptions};
use crate::cluster::tf_config::TfConfig;
use crate::error::Result;
use crate::parallel::DataParallelPlan;
use crate::runtime::checkpoint::{self, Checkpoint, StateVar};
use crate::runtime::data_parallel::probe::{agents_of, reachable};
use crate::runtime::liveness::healthz;
use crate::runtime::session::PlacedSession;

/// Evaluations and the stopping rule, shared by every mode.
pub(super) struct Progress<'a> {
    pub(super) job: &'a Job,
    pub(super) evaluator: Option<&'a Evaluator>,
    pub(super) options: &'a TrainingOptions,
    pub(super) evaluations: Vec<Evaluation>,
    pub(super) eval_seconds: f64,
    pub(super) next_eval: f64,
    pub(super) reached_at: Option<f64>,
    /// When the trainer started, and the wall seconds from then to the evaluation that first
    /// reached the target (this run's, not a resumed one's).
    pub(super) began: Instant,
    pub(super) reached_wall_s: Option<f64>,
    /// Checkpoints, event log and progress callback.
    pub(super) keeper: Keeper,
    /// Evaluations carried over from the runs a resumed run continues.
    pub(super) carried: usize,
    /// Wall time of the latest synchronous step, ms (`None` in asynchronous phases).
    pub(super) step_ms: Option<f64>,
    /// Live re-plans so far.
    pub(super) replans: usize,
    /// The driver's copies of the variables and the recoveries ([`TrainingOptions::recover`]).
    pub(super) safe: Option<Safekeeping>,
    /// The cluster's tasks, when lost ones may be recovered from and taken back.
    pub(super) tasks: Option<&'a TfConfig>,
    /// Workers recoveries dropped, probed to be taken back.
    pub(super) dropped: Vec<String>,
    /// Dropped workers that answer again, waiting for the phase to end.
    pub(super) back: Vec<String>,
    /// The probe of the dropped workers in flight (off this thread: a hung worker's agent
    /// takes its whole timeout not to answer).
    pub(super) probe: Option<std::thread::JoinHandle<Vec<String>>>,
    /// Workers taken back.
    pub(super) readmitted: Vec<Readmitted>,
}

impl<'a> Progress<'a> {
    /// A run of `job` with `options` that starts where `carried` (a resumed run's checkpoint, or
    /// nothing) left off, writing through `keeper`; `tasks` when lost ones may be recovered from.
    pub(super) fn new(
        job: &'a Job,
        evaluator: Option<&'a Evaluator>,
        options: &'a TrainingOptions,
        keeper: Keeper,
        carried: &mut Carried,
        tasks: Option<&'a TfConfig>,
        began: Instant,
    ) -> Self {
        Progress {
            job,
            evaluator,
            options,
            eval_seconds: 0.0,
            next_eval: carried.train_seconds + options.eval_every_s,
            // Against the target in force, never the one a resumed run's checkpoint was
            // trained to: a higher target trains on, a lower one may be reached already.
            reached_at: first_reaching(&carried.evaluations, job.metric(), options.target),
            began,
            reached_wall_s: None,
            carried: carried.evaluations.len(),
            evaluations: std::mem::take(&mut carried.evaluations),
            keeper,
            step_ms: None,
            replans: 0,
            safe: options
                .recover
                .as_ref()
                .map(|r| Safekeeping::new(r.every_updates)),
            tasks,
            dropped: Vec::new(),
            back: Vec::new(),
            probe: None,
            readmitted: Vec::new(),
        }
    }

    /// Whether an evaluation is due.
    pub(super) fn eval_due(&self, clock: &Clock) -> bool {
        self.evaluator.is_some() && clock.seconds() >= self.next_eval
    }

    /// Whether a bound of the run is reached.
    pub(super) fn bound_reached(&self, clock: &Clock, samples: u64, updates: u64) -> bool {
        let o = self.options;
        let epochs = samples as f64 / self.job.train.len().max(1) as f64;
        o.steps.is_some_and(|s| updates >= s)
            || o.epoch_bound().is_some_and(|e| epochs >= e)
            || o.max_seconds.is_some_and(|t| clock.seconds() >= t)
            || self.reached_at.is_some()
            || o.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// Evaluates `session`'s variables (the clock stopped); returns whether the target is
    /// reached.
    pub(super) fn evaluate(
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
        self.keeper.evaluated(updates, name, metric);
        let reached = match (self.job.metric(), self.options.target) {
            (Some(m), Some(t)) => m.reaches(metric, t),
            _ => false,
        };
        if reached && self.reached_at.is_none() {
            self.reached_at = Some(seconds);
            self.reached_wall_s = Some(self.began.elapsed().as_secs_f64());
        }
        self.next_eval = seconds + self.options.eval_every_s;
        Ok(reached)
    }

    /// Whether a checkpoint is due now.
    pub(super) fn checkpoint_due(&self, gate: &Gate, clock: &Clock) -> bool {
        let (_, updates) = gate.totals();
        self.keeper.checkpoint_due(updates, clock.seconds())
            || self.safe.as_ref().is_some_and(|s| s.due(updates))
    }

    /// After a step: a checkpoint of `built`'s variables when due (or, with `last`, when the
    /// latest is older than the run's end), a log point, the progress callback. The steps must
    /// be paused for a checkpoint.
    pub(super) fn kept(
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
        self.keeper.stepped(&at, last);
        Ok(())
    }

    /// Evaluates unless this run's last evaluation was of these same updates (a resumed run
    /// evaluates its restored variables even when it had nothing left to train).
    pub(super) fn evaluate_final(
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

/// How long a worker's metrics agent has to answer (twice) before the worker counts as hung.
pub(super) const AGENT_TIMEOUT: Duration = Duration::from_secs(2);

/// Seconds between two probes of the dropped workers.
pub(super) const PROBE_EVERY: Duration = Duration::from_secs(1);

/// The state a recovery goes on from: the variables and where each sampler was.
pub(super) struct SafePoint {
    pub(super) checkpoint: Checkpoint,
    pub(super) updates: u64,
    pub(super) sync_taken: u64,
    pub(super) workers: BTreeMap<String, u64>,
}

/// The driver's copies of the training state, and the recoveries so far.
pub(super) struct Safekeeping {
    pub(super) every: u64,
    pub(super) latest: Option<SafePoint>,
    /// Every copy taken.
    pub copies: Vec<SafeCopy>,
    pub recoveries: Vec<Recovered>,
}

impl Safekeeping {
    pub fn new(every: u64) -> Self {
        Safekeeping {
            every,
            latest: None,
            copies: Vec::new(),
            recoveries: Vec::new(),
        }
    }

    /// Whether a copy is due after `updates` updates.
    pub fn due(&self, updates: u64) -> bool {
        self.latest
            .as_ref()
            .is_none_or(|l| updates >= l.updates + self.every)
    }
}

impl Progress<'_> {
    /// Copies `built`'s variables into memory when a copy is due (the steps must be paused).
    pub(super) fn safeguard(&mut self, built: &super::build::Built, updates: u64) -> Result<()> {
        let Some(safe) = &mut self.safe else {
            return Ok(());
        };
        if !safe.due(updates) {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let checkpoint = checkpoint::save(&built.session, &built.state, updates as usize)?;
        safe.copies.push(SafeCopy {
            update: updates,
            seconds: started.elapsed().as_secs_f64(),
            bytes: checkpoint.bytes(),
        });
        safe.latest = Some(SafePoint {
            checkpoint,
            updates,
            sync_taken: self.keeper.position.sync,
            workers: self.keeper.position.workers.clone(),
        });
        Ok(())
    }
}

impl Progress<'_> {
    /// Whether dropped workers answer again (their port and their agent): a probe runs on a
    /// thread of its own, one at a time, each [`PROBE_EVERY`] after the last; those that answer
    /// wait in `back` until the phase ends and the plan takes them.
    pub(super) fn readmit_due(&mut self) -> bool {
        if !self.back.is_empty() {
            return true;
        }
        let Some(tasks) = self.tasks else {
            return false;
        };
        match self.probe.take() {
            Some(probe) if probe.is_finished() => {
                let answered = probe.join().unwrap_or_default();
                self.back = answered
                    .into_iter()
                    .filter(|w| self.dropped.contains(w))
                    .collect();
            }
            Some(probe) => self.probe = Some(probe),
            None if !self.dropped.is_empty() => {
                let (dropped, tasks) = (self.dropped.clone(), tasks.clone());
                // A thread that cannot start leaves the workers dropped; the next call tries again.
                self.probe = std::thread::Builder::new()
                    .name("tf-iaware-readmit".into())
                    .spawn(move || {
                        std::thread::sleep(PROBE_EVERY);
                        let answering = reachable(&dropped, &tasks);
                        let agents = agents_of(&answering, &tasks);
                        answering
                            .into_iter()
                            .filter(|w| agents.get(w).is_none_or(|a| healthz(a, AGENT_TIMEOUT)))
                            .collect()
                    })
                    .ok();
            }
            None => {}
        }
        !self.back.is_empty()
    }
}

/// The training seconds of the first of `evaluations` whose metric reaches `target` (`None`: no
/// target, no metric, or none reaches it).
fn first_reaching(
    evaluations: &[Evaluation],
    metric: Option<&Metric>,
    target: Option<f64>,
) -> Option<f64> {
    let (metric, target) = (metric?, target?);
    evaluations
        .iter()
        .find(|e| metric.reaches(e.metric, target))
        .map(|e| e.seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_run_is_reached_only_against_the_target_in_force() {
        let evaluations: Vec<Evaluation> = [(2.0, 0.80), (4.0, 0.93)]
            .iter()
            .map(|&(seconds, metric)| Evaluation {
                seconds,
                epoch: seconds,
                updates: seconds as u64,
                metric,
            })
            .collect();
        let accuracy = Metric::Accuracy {
            logits: "logits".into(),
            label: "y".into(),
        };
        // Saved for a target of 0.9: a resumed run to 0.95 trains on.
        assert_eq!(
            first_reaching(&evaluations, Some(&accuracy), Some(0.95)),
            None
        );
        assert_eq!(
            first_reaching(&evaluations, Some(&accuracy), Some(0.9)),
            Some(4.0)
        );
        assert_eq!(
            first_reaching(&evaluations, Some(&accuracy), Some(0.5)),
            Some(2.0)
        );
        assert_eq!(first_reaching(&evaluations, Some(&accuracy), None), None);
        assert_eq!(first_reaching(&evaluations, None, Some(0.5)), None);
        let loss = Metric::Scalar {
            tensor: "loss".into(),
            higher_is_better: false,
        };
        assert_eq!(
            first_reaching(&evaluations, Some(&loss), Some(0.85)),
            Some(2.0)
        );
    }
}
