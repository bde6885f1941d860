//! Synchronous steps over every replica, with LB-BSP re-sizing of the shares when the
//! contender has [`Feedback`], and live re-planning when the run adapts
//! ([`TrainingOptions::adapt`](super::TrainingOptions::adapt)).

use std::collections::BTreeMap;
use std::time::Instant;

use tensorflow::SessionRunArgs;

use super::build::{build, run, Built, Master};
use super::{Feedback, Progress, Run, STEP_TIMES_KEPT};
use crate::error::{Error, Result};
use crate::parallel::noise::{decide_resize, ResizeDecision};
use crate::parallel::replicate::INIT_DATA_OP;
use crate::parallel::DataParallelPlan;
use crate::runtime::adapt::Adapter;
use crate::runtime::checkpoint;
use crate::runtime::data_parallel::replica_spans_ms;
use crate::runtime::liveness::HangDetection;

impl Run<'_> {
    /// Synchronous steps of `plan` until a bound, the target or `until` training seconds;
    /// returns the plan at the end (re-sized or re-planned, also kept in `self.current`, the
    /// shares of each re-size in `self.resized`) and whether the run is over (a bound or the
    /// target, not `until`).
    pub(super) fn sync(
        &mut self,
        mut plan: DataParallelPlan,
        progress: &mut Progress<'_>,
        until: Option<f64>,
    ) -> Result<(DataParallelPlan, bool)> {
        let (job, contender) = (self.job, self.contender);
        let data = job.train.as_ref();
        let mut resizer = Resizer::default();
        let mut step = 0usize;
        loop {
            let mut feeds = Vec::new();
            for (k, r) in plan.replicas.iter().enumerate() {
                let rows = self.sampler.take(r.batch);
                feeds.extend(self.built.feeds(k, data, &rows, &job.specs)?);
            }
            let (train, loss) = (&self.built.sync.0, &self.built.sync.1);
            let feedback = contender
                .feedback
                .as_ref()
                .filter(|f| resizer.due(step, f.every));
            let (_, update) = self.gate.totals();
            let last = self.trace_at == Some(update + 1);
            let traced = last
                || feedback.is_some()
                || self.adapter.as_mut().is_some_and(Adapter::wants_trace);
            let session = &self.built.session;
            let timeout_ms = self
                .step_deadline_ms(progress)
                .map_or(session.run_timeout_ms, |ms| ms.min(session.run_timeout_ms));
            let started = Instant::now();
            let (loss_value, stats) = if traced {
                // A traced step measures every replica's compute time.
                let mut args = SessionRunArgs::new();
                for (op, t) in &feeds {
                    t.add_feed(&mut args, op, 0);
                }
                args.add_target(train);
                let token = args.request_fetch(loss, 0);
                let (_, stats) =
                    session.run_args_within(None, &mut args, true, "traced train", timeout_ms)?;
                let value = args
                    .fetch::<f32>(token)
                    .map_err(|e| crate::tf::status::error("fetching the loss", &e))?
                    .first()
                    .copied()
                    .unwrap_or(f32::NAN);
                (value, stats)
            } else {
                let on = Master {
                    sibling: None,
                    deadline_ms: Some(timeout_ms),
                };
                let value = run(session, on, &feeds, &[], &[], &[train], Some(loss))?;
                (value.unwrap_or(f32::NAN), None)
            };
            let ms = started.elapsed().as_secs_f64() * 1e3;
            self.session_steps += 1;
            self.deadline_retries = 0;
            if !loss_value.is_finite() {
                return Err(Error::NonFiniteLoss {
                    step,
                    loss: loss_value,
                });
            }
            self.gate.loss(loss_value);
            self.gate.account(&plan, true);
            if let (true, Some(stats)) = (last, &stats) {
                self.traced = Some(self.built.traced(update + 1, stats, self.cluster));
            }
            self.timed(ms, progress);
            step += 1;
            // Live re-planning sees every step; LB-BSP's re-size waits for its traced ones.
            let mut next = None;
            if let Some(adapter) = &mut self.adapter {
                next = adapter.after_step(update as usize, ms, stats.as_ref(), &plan)?;
                if next.is_some() {
                    progress.replans += 1;
                    resizer = Resizer::default();
                }
            }
            if let (None, Some(f), Some(stats)) = (&next, feedback, &stats) {
                next = resizer.propose(&plan, stats, f)?;
                if let Some(new) = &next {
                    self.resized
                        .push(new.replicas.iter().map(|r| r.batch).collect());
                    if let Some(adapter) = &mut self.adapter {
                        adapter.replanned();
                    }
                }
            }
            if let Some(new) = next {
                plan = self.switch(plan, new, step, progress)?;
            }
            progress.keeper.position.sync = self.sampler.taken;
            let (samples, updates) = self.gate.totals();
            if progress.eval_due(&self.clock) {
                self.clock.stop();
                progress.evaluate(
                    &self.built.session,
                    &self.built.state,
                    &self.clock,
                    samples,
                    updates,
                )?;
                self.clock.start();
            }
            if progress.bound_reached(&self.clock, samples, updates) {
                self.clock.stop();
                return Ok((plan, true));
            }
            // Not at the end, whose checkpoint follows the last evaluation.
            progress.kept(&self.built, self.gate, &self.clock, &plan, false)?;
            progress.safeguard(&self.built, updates)?;
            if until.is_some_and(|u| self.clock.seconds() >= u) || progress.readmit_due() {
                return Ok((plan, false));
            }
        }
    }
}

impl Run<'_> {
    /// The deadline of the next synchronous step, ms, when the run recovers from lost tasks
    /// (`None`: the session's own): [`paced_deadline_ms`] of the last steps.
    fn step_deadline_ms(&self, progress: &Progress<'_>) -> Option<i64> {
        let hang = &progress.options.recover.as_ref()?.hang;
        let recent: Vec<f64> = self.step_ms.iter().rev().take(5).copied().collect();
        Some(paced_deadline_ms(
            hang,
            &recent,
            self.session_steps,
            self.deadline_retries,
        ))
    }

    /// Keeps a synchronous step's wall time `ms` for the report and the progress callback.
    fn timed(&mut self, ms: f64, progress: &mut Progress<'_>) {
        if self.step_ms.len() == STEP_TIMES_KEPT {
            self.step_ms.pop_front();
        }
        self.step_ms.push_back(ms);
        progress.step_ms = Some(ms);
    }

    /// The graph of `plan` for this run's strategy, placed and in a session of its own.
    ///
    /// # Errors
    /// Errors of replicating, placing and opening the session.
    pub(super) fn build_for(
        &self,
        plan: &DataParallelPlan,
        progress: &Progress<'_>,
    ) -> Result<Built> {
        build(
            self.job,
            plan,
            self.contender.updates(),
            self.cluster,
            &self.config,
            self.tag,
            progress.options.own_masters.as_ref(),
        )
    }

    /// Moves training from `plan` to `new` (re-sized, re-planned or grown) between two steps: the
    /// variables are read from the ps into a checkpoint and restored into a graph with the new
    /// shares (a session of its own); workers the new shares leave out get no replica (an empty
    /// batch's mean loss is NaN).
    pub(super) fn switch(
        &mut self,
        plan: DataParallelPlan,
        new: DataParallelPlan,
        step: usize,
        progress: &mut Progress<'_>,
    ) -> Result<DataParallelPlan> {
        let new = DataParallelPlan {
            replicas: new.replicas.into_iter().filter(|r| r.batch > 0).collect(),
            ..new
        };
        let started = Instant::now();
        let checkpoint = checkpoint::save(&self.built.session, &self.built.state, step)?;
        let next = self.build_for(&new, progress)?;
        checkpoint::restore(&next.session, &next.state, &checkpoint)?;
        // Batches that live on the workers are variables of the new shares' sizes, which no
        // checkpoint holds: draw them.
        let init_data = next.session.op(INIT_DATA_OP, "synthetic data init")?;
        next.session.run(&[], &[init_data], &[], false)?;
        self.gate.remap_counts(&plan, &new);
        {
            // A new graph's accumulators start at step 0 (backup workers).
            let mut s = self.gate.lock();
            s.global_step = 0;
            s.tokens.clear();
        }
        self.built = next;
        self.session_steps = 0;
        self.current = new.clone();
        let (_, updates) = self.gate.totals();
        // The availability logged is the live one the adapter reads, where it reads one.
        let live = self
            .adapter
            .as_ref()
            .map_or(self.cluster, |a| a.live_cluster());
        progress.keeper.planned(updates, &new, live, true);
        if let Some(adapter) = &mut self.adapter {
            adapter.switched(started.elapsed().as_secs_f64() * 1e3);
        }
        Ok(new)
    }
}

/// A step's deadline from the pace of the steps before it, ms: max(floor, factor × the median
/// of `recent` step times), at least `first_runs` for a session's first two steps, doubled per
/// retry (`hang`'s figures).
pub(super) fn paced_deadline_ms(
    hang: &HangDetection,
    recent: &[f64],
    session_steps: usize,
    retries: u32,
) -> i64 {
    let expected = crate::runtime::train::StepTimes::from_samples(recent).map(|t| t.median);
    let mut deadline = hang.deadline(expected, retries);
    if session_steps < 2 {
        deadline = deadline.max(hang.first_runs);
    }
    i64::try_from(deadline.as_millis()).unwrap_or(i64::MAX)
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
        stats: &crate::graph::proto::StepStats,
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
