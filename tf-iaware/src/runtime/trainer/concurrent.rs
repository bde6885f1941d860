//! Asynchronous and backup-worker training: one thread per worker, the coordinator evaluating
//! and checking the bounds (and, with backup workers, acting as the chief that aggregates).

use std::time::Duration;

use tensorflow::Tensor;

use super::build::{run, Built, Master, Targets};
use super::gate::Gate;
use super::sync::paced_deadline_ms;
use super::{Progress, Run};
use crate::data::{Dataset, InputSpec, Sampler};
use crate::error::{Error, Result};
use crate::parallel::{DataParallelPlan, Updates};
use crate::runtime::liveness::HangDetection;

impl Run<'_> {
    /// Workers stepping on their own shares of `plan` until a bound, the target or `until`
    /// training seconds; returns whether the run is over.
    pub(super) fn concurrent(
        &mut self,
        plan: &DataParallelPlan,
        seed: u64,
        progress: &mut Progress<'_>,
        until: Option<f64>,
    ) -> Result<bool> {
        let workers = plan.replicas.len();
        let gate = self.gate;
        // Workers step on threads of their own: no one step's wall time to report.
        progress.step_ms = None;
        if let Updates::Backup { backups } = self.contender.updates() {
            // SyncReplicasOptimizer's initial tokens: one per gradient a step aggregates.
            let mut s = gate.lock();
            if s.global_step == 0 && s.tokens.is_empty() {
                s.tokens.extend(std::iter::repeat_n(0, workers - backups));
            }
        }
        let (built, data, specs) = (&self.built, self.job.train.as_ref(), &self.job.specs[..]);
        let read = gate.lock().samples.clone();
        let starts = progress.keeper.phase_started(plan, &read);
        let updates = self.contender.updates();
        let pace = progress
            .options
            .recover
            .as_ref()
            .map(|r| (&r.hang, self.deadline_retries));
        let clock = &mut self.clock;
        let result = std::thread::scope(|scope| -> Result<bool> {
            for (k, replica) in plan.replicas.iter().enumerate() {
                let worker = Worker {
                    k,
                    share: replica.batch,
                    built,
                    data,
                    specs,
                    seed: seed.wrapping_add(1 + k as u64),
                    start: starts[k],
                    gate,
                    pace,
                };
                scope.spawn(move || {
                    if let Err(e) = worker.run() {
                        gate.fail(e);
                    }
                });
            }
            let outcome = coordinate(updates, plan, built, gate, clock, progress, until);
            gate.stop();
            outcome
        });
        self.clock.stop();
        let mut s = gate.lock();
        if let Some(e) = s.error.take() {
            return Err(e);
        }
        // Ready for another phase.
        s.stop = false;
        result
    }
}

/// One worker thread.
struct Worker<'a> {
    k: usize,
    share: usize,
    built: &'a Built,
    data: &'a (dyn Dataset + Sync),
    specs: &'a [InputSpec],
    seed: u64,
    /// Samples this worker's stream handed out before (a resumed run's).
    start: u64,
    gate: &'a Gate,
    /// Deadlines of its steps from their pace, and retries so far (a recovering run).
    pace: Option<(&'a HangDetection, u32)>,
}

impl Worker<'_> {
    /// A step on its own share whenever it is free (asynchronous), or one gradient per global
    /// step (backup workers).
    fn run(&self) -> Result<()> {
        let (k, built, gate) = (self.k, self.built, self.gate);
        let mut sampler = Sampler::resumed(self.data.len(), self.seed, self.start);
        let backup = matches!(built.targets, Targets::Backup { .. });
        // A backup worker's first gradient is of step 0; each later one needs a token.
        let mut first = true;
        // Wall times of its last steps, ms, and how many it ran.
        let (mut recent, mut stepped) = (std::collections::VecDeque::new(), 0usize);
        loop {
            // The batch is read before the step is admitted: input preparation overlaps.
            let rows = sampler.take(self.share);
            let feeds = built.feeds(k, self.data, &rows, self.specs)?;
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
            let deadline_ms = self.pace.map(|(hang, retries)| {
                paced_deadline_ms(hang, recent.make_contiguous(), stepped, retries)
            });
            let started = std::time::Instant::now();
            let outcome = match &built.targets {
                Targets::Async { train, loss } => run(
                    &built.session,
                    Master {
                        sibling: built.masters[k],
                        deadline_ms,
                    },
                    &feeds,
                    &[],
                    &[],
                    &[&train[k]],
                    Some(&loss[k]),
                )
                .and_then(|l| match l {
                    Some(l) if !l.is_finite() => Err(Error::NonFiniteLoss { step: k, loss: l }),
                    l => Ok(l),
                }),
                Targets::Backup {
                    push, local_step, ..
                } => Tensor::<i64>::new(&[])
                    .with_values(&[step])
                    .map_err(|e| crate::tf::status::error("local step", &e))
                    .and_then(|tag| {
                        run(
                            &built.session,
                            Master {
                                sibling: None,
                                deadline_ms,
                            },
                            &feeds,
                            &[(&local_step[k], &tag)],
                            &[],
                            &[&push[k]],
                            None,
                        )
                    }),
                Targets::Sync => Ok(None),
            };
            if outcome.is_ok() {
                if recent.len() == 5 {
                    recent.pop_front();
                }
                recent.push_back(started.elapsed().as_secs_f64() * 1e3);
                stepped += 1;
            }
            let mut s = gate.lock();
            s.in_flight -= 1;
            match outcome {
                Ok(loss) => {
                    s.steps[k] += 1;
                    s.samples[k] += self.share as u64;
                    if let Targets::Async { .. } = built.targets {
                        s.updates += 1;
                    }
                    if let Some(l) = loss {
                        s.loss_first.get_or_insert(l);
                        s.loss_last = Some(l);
                    }
                }
                Err(e) => {
                    drop(s);
                    gate.changed.notify_all();
                    return Err(e);
                }
            }
            drop(s);
            gate.changed.notify_all();
        }
    }
}

/// The coordinator: evaluates on schedule and checks the bounds; with backup workers, runs the
/// chief's aggregating steps.
fn coordinate(
    updates: Updates,
    plan: &DataParallelPlan,
    built: &Built,
    gate: &Gate,
    clock: &mut super::gate::Clock,
    progress: &mut Progress<'_>,
    until: Option<f64>,
) -> Result<bool> {
    let workers = plan.replicas.len();
    let chief = match (&built.targets, updates) {
        (
            Targets::Backup {
                train,
                num_required,
                ..
            },
            Updates::Backup { backups },
        ) => {
            let n = (workers - backups) as i32;
            let t = Tensor::<i32>::new(&[])
                .with_values(&[n])
                .map_err(|e| crate::tf::status::error("num_required", &e))?;
            Some((train, num_required, t))
        }
        _ => None,
    };
    loop {
        if gate.lock().stop {
            return Ok(true);
        }
        let (samples, done) = gate.totals();
        if progress.bound_reached(clock, samples, done) {
            return Ok(true);
        }
        if until.is_some_and(|u| clock.seconds() >= u) || progress.readmit_due() {
            return Ok(false);
        }
        match &chief {
            Some((train, num_required, n)) => {
                run(
                    &built.session,
                    Master::default(),
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
        let (samples, done) = gate.totals();
        if progress.bound_reached(clock, samples, done) {
            // The end's checkpoint follows the last evaluation.
        } else if progress.checkpoint_due(gate, clock) {
            gate.pause();
            let samples = gate.lock().samples.clone();
            progress.keeper.workers_read(plan, &samples);
            let kept = progress
                .kept(built, gate, clock, plan, false)
                .and_then(|()| {
                    let (_, updates) = gate.totals();
                    progress.safeguard(built, updates)
                });
            gate.resume();
            kept?;
        } else {
            progress.kept(built, gate, clock, plan, false)?;
        }
        if progress.eval_due(clock) {
            gate.pause();
            clock.stop();
            let (samples, updates) = gate.totals();
            let evaluated =
                progress.evaluate(&built.session, &built.state, clock, samples, updates);
            clock.start();
            gate.resume();
            evaluated?;
        }
    }
}
