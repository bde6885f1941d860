//! The driver's loop of a data-parallel run that survives lost and hung tasks: it steps and
//! checkpoints; when a run fails — a step, a checkpoint fetch, an initialisation, a restore or
//! a new session's probe alike — it finds what was lost, re-plans on the survivors and resumes;
//! and it takes dropped workers back when they answer again.

mod assess;

use std::time::{Duration, Instant};

use super::probe::{address_of, agents_of, answers, reachable, without};
use super::recovery::{
    passed_deadline, readmit_resume, run_deadline, Action, Damage, DeadlineRetry, Readmission,
    RecoveringReport, Recovery, RecoveryOptions, Resume,
};
use super::{plan_ps, prepare_run, worker_and_ps_devices, Prepared};
use crate::cluster::tf_config::TfConfig;
use crate::cluster::Cluster;
use crate::config::SessionConfig;
use crate::error::{Error, Result};
use crate::parallel::DataParallelPlan;
use crate::runtime::checkpoint::{self, Checkpoint};
use crate::runtime::liveness::Watchdog;
use crate::runtime::replicated::Workload;

/// A data-parallel job that survives lost and hung tasks: what it trains, on which cluster
/// (TF_CONFIG, for the tasks' addresses and agents), and how it checkpoints and recovers.
/// Trained by [`train_recovering`].
pub struct Recovering<'a> {
    /// What is trained (a zoo model, a graph).
    pub workload: Workload,
    /// The cluster's devices.
    pub cluster: &'a Cluster,
    /// How sessions on it are opened (target, timeouts).
    pub config: &'a SessionConfig,
    /// The cluster's tasks: their gRPC and metrics agent addresses.
    pub tf_config: &'a TfConfig,
    /// Checkpoints, recoveries, hung-worker detection, re-admission.
    pub options: RecoveryOptions,
}

impl std::fmt::Debug for Recovering<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recovering")
            .field("workload", &self.workload.name())
            .field("target", &self.config.target)
            .field("tasks", &self.tf_config.tasks().len())
            .field("options", &self.options)
            .finish()
    }
}

/// Trains `steps` steps of `plan`, surviving lost workers, lost parameter servers and hung
/// workers, and taking dropped workers back when they answer again.
///
/// The driver keeps a checkpoint in memory: every variable and optimiser slot, fetched from the
/// ps right after initialisation and every `options.checkpoint_every` steps. When any run of
/// the driver fails — initialisation, a step, a checkpoint fetch, a restore, or the probe of a
/// new session — (an unreachable task fails it within the session's operation timeout, a hung
/// one at the run deadline), it looks at what was lost:
///
/// - a ps task that stops answering is waited for, up to `options.ps_wait` (a cluster manager
///   restarts lost tasks at their address); a ps that does not come back has its variables
///   re-planned onto the answering ps;
/// - workers that no longer answer are dropped: `replan(alive workers, alive ps)` makes the
///   new plan;
/// - the session master moves to a task of the new plan if its own task is gone;
/// - a new session probes which variables still hold values, under a short deadline; a probe
///   that fails is one more failure, looked at the same way. If a ps was lost or restarted
///   (its variables are gone, or they moved), training resumes from the checkpoint: `init`,
///   then `restore`, and the steps since the checkpoint are trained again (their first losses
///   are kept in the [`Recovery`]). If only workers were lost, it goes on from the variables
///   on the ps (only the new replicas' synthetic batches are initialised). A checkpoint whose
///   fetch failed is not kept: the previous one stays. With `config.isolate_state` a new
///   session never sees the old one's variables, so every recovery restores the checkpoint,
///   and a ps restarted unseen (it answers again before the failure is looked at) cannot be
///   told from other failures.
///
/// Dropped workers keep being probed (their agents by the watchdog, their gRPC ports at most
/// once a second); with `options.readmit`, one that answers again is taken back before the
/// next step: `replan(workers with it, alive ps)` and a new session that goes on from the
/// variables on the ps ([`RecoveringReport::readmissions`]).
///
/// At most `options.max_recoveries` recoveries; a failure with nothing lost is returned as is.
/// `before_step` runs before every step attempt (drift or fault injection, progress).
///
/// # Errors
/// [`Error::InvalidArgument`] for `checkpoint_every == 0`; the failing run's error when
/// nothing was lost or recoveries ran out; [`Error::Unrecoverable`] when no worker or no ps
/// answers; errors of `replan` and of opening the new session.
pub fn train_recovering(
    job: &Recovering<'_>,
    plan: DataParallelPlan,
    steps: usize,
    replan: impl FnMut(&[String], &[String]) -> Result<DataParallelPlan>,
    before_step: impl FnMut(usize),
) -> Result<RecoveringReport> {
    if job.options.checkpoint_every == 0 {
        return Err(Error::InvalidArgument {
            what: "checkpoint interval".into(),
            reason: "must be at least 1 step".into(),
        });
    }
    let mut driver = Driver::start(job, plan, replan, before_step)?;
    while driver.step < steps {
        driver.readmit();
        let first = driver.resume.is_some() || driver.session_steps == 0;
        let deadline = driver.deadline(first);
        let mut started = Instant::now();
        match driver.attempt(steps, &mut started) {
            Ok(()) => driver.succeeded(),
            Err(e) => {
                let detect_ms = started.elapsed().as_secs_f64() * 1e3;
                driver.failed(e, deadline, first, detect_ms)?;
            }
        }
    }
    Ok(driver.finish())
}

/// Which of the driver's pending resumes is in progress, to time it into the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    /// A recovery (the last of [`RecoveringReport::recoveries`]).
    Recovery,
    /// A re-admission (the last of [`RecoveringReport::readmissions`]).
    Readmission,
}

/// The state of one [`train_recovering`] run.
struct Driver<'j, 'a, P, B> {
    job: &'j Recovering<'a>,
    replan: P,
    before_step: B,
    all_ps: Vec<String>,
    /// The session configuration now (its target moves when the master is lost).
    config: SessionConfig,
    run: Prepared,
    current: DataParallelPlan,
    report: RecoveringReport,
    latest: Option<Checkpoint>,
    /// What the session must run before stepping; `None`: it is ready.
    resume: Option<Resume>,
    /// When the recovery or re-admission in progress began, until the session holds its state.
    pending: Option<(Instant, Pending)>,
    closing: Closing,
    /// Hung-worker detection: every worker's agent probed in the background.
    watchdog: Option<Watchdog>,
    /// Retries of the current run after a deadline passed with every worker alive.
    retries: u32,
    /// Steps the current session has run (its first runs register the graph everywhere).
    session_steps: usize,
    step: usize,
    /// Workers dropped from the plan (lost or hung), and when.
    dropped: Vec<(String, Instant)>,
    /// When dropped workers' gRPC ports were last probed.
    ports_probed: Option<Instant>,
}

/// The outcome of looking at a failure ([`Driver::assess`]).
enum Assessment {
    /// Nothing was lost: the failure is not a fault to recover from.
    Nothing,
    /// A new plan and session, ready to resume.
    Ready(Box<Assessed>),
    /// The new session's probe failed: one more failure to look at.
    ProbeFailed(Error),
}

/// A recovery ready to resume: the new plan (its session is the driver's now) and what
/// happened.
struct Assessed {
    plan: DataParallelPlan,
    target: String,
    damage: Damage,
    action: Action,
}

/// Milliseconds of `d` for a session's run deadline.
fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl<'j, 'a, P, B> Driver<'j, 'a, P, B>
where
    P: FnMut(&[String], &[String]) -> Result<DataParallelPlan>,
    B: FnMut(usize),
{
    fn start(
        job: &'j Recovering<'a>,
        plan: DataParallelPlan,
        replan: P,
        before_step: B,
    ) -> Result<Self> {
        let (all_workers, all_ps) = worker_and_ps_devices(job.cluster)?;
        let run = prepare_run(
            &job.workload,
            &plan,
            job.cluster,
            job.config,
            job.options.seed,
        )?;
        let watchdog = job
            .options
            .hang
            .as_ref()
            .map(|h| Watchdog::start(agents_of(&all_workers, job.tf_config), h));
        Ok(Driver {
            job,
            replan,
            before_step,
            all_ps,
            config: job.config.clone(),
            run,
            report: RecoveringReport::new(plan.clone()),
            current: plan,
            latest: None,
            resume: Some(Resume::Init),
            pending: None,
            closing: Closing(Vec::new()),
            watchdog,
            retries: 0,
            session_steps: 0,
            step: 0,
            dropped: Vec::new(),
            ports_probed: None,
        })
    }

    fn options(&self) -> &RecoveryOptions {
        &self.job.options
    }

    fn tf_config(&self) -> &TfConfig {
        self.job.tf_config
    }

    /// The deadline of the next run (set on the session), when hung workers are detected.
    fn deadline(&mut self, first: bool) -> Option<Duration> {
        let d = self.options().hang.as_ref().map(|h| {
            run_deadline(
                h,
                &self.report.step_ms,
                self.retries,
                first,
                self.config.run_timeout_ms,
            )
        })?;
        self.run.trainer.set_run_timeout_ms(ms(d));
        Some(d)
    }

    /// One run: what the session must run before stepping, or the next step (and the
    /// checkpoint after it). `started` is reset after `before_step`.
    fn attempt(&mut self, steps: usize, started: &mut Instant) -> Result<()> {
        match (self.resume, &self.latest) {
            (Some(Resume::InitData), _) => self.run.trainer.run_op("init_data"),
            (Some(Resume::Restore), Some(c)) => {
                self.run.trainer.init()?;
                checkpoint::restore(self.run.trainer.session(), &self.run.state, c)
            }
            (Some(_), _) => {
                self.run.trainer.init()?;
                self.latest = Some(self.save()?);
                Ok(())
            }
            (None, _) => {
                (self.before_step)(self.step);
                // Fault injection and progress are not part of the run that detects a fault.
                *started = Instant::now();
                let trace = self.options().trace_last && self.step + 1 == steps;
                let (loss, ms, stats) = self.run.trainer.step(self.step, trace)?;
                self.report.losses.push(loss);
                self.report.step_ms.push(ms);
                self.report.steps_run += 1;
                self.session_steps += 1;
                if stats.is_some() {
                    self.report.step_stats = stats;
                }
                self.step += 1;
                if self.step % self.options().checkpoint_every == 0 && self.step < steps {
                    // A fetch that fails keeps the previous checkpoint: `latest` is replaced
                    // only by a complete one.
                    self.latest = Some(self.save()?);
                }
                Ok(())
            }
        }
    }

    /// Takes a checkpoint of the session's state after `self.step` steps, timing it.
    fn save(&mut self) -> Result<Checkpoint> {
        let started = Instant::now();
        let c = checkpoint::save(self.run.trainer.session(), &self.run.state, self.step)?;
        self.report
            .checkpoint_ms
            .push(started.elapsed().as_secs_f64() * 1e3);
        self.report.checkpoint_bytes = c.bytes();
        Ok(c)
    }

    /// After a run that succeeded: a pending resume is done.
    fn succeeded(&mut self) {
        self.retries = 0;
        if self.resume.take().is_none() {
            return;
        }
        let Some((since, what)) = self.pending.take() else {
            return;
        };
        let took = Some(since.elapsed().as_secs_f64() * 1e3);
        match what {
            Pending::Recovery => {
                if let Some(r) = self.report.recoveries.last_mut() {
                    r.recover_ms = took;
                }
            }
            Pending::Readmission => {
                if let Some(r) = self.report.readmissions.last_mut() {
                    r.readmit_ms = took;
                }
            }
        }
    }

    /// The plan's workers.
    fn workers(plan: &DataParallelPlan) -> Vec<String> {
        plan.replicas.iter().map(|r| r.device.clone()).collect()
    }

    /// After a run that passed its `deadline`: the workers of `plan` whose agents are silent
    /// (hung), or `None` when nobody is and every task of the plan (and the session master)
    /// still answers — the run was only slow.
    fn hung_or_slow(&self, plan: &DataParallelPlan) -> Option<Vec<String>> {
        let dog = self.watchdog.as_ref()?;
        let workers = Self::workers(plan);
        // A silent agent whose process also closed its port is lost, not hung: the lost are
        // found by `assess` either way, and reported as such.
        let silent = dog.silent(&workers);
        let hung = reachable(&silent, self.tf_config());
        let tasks: Vec<String> = workers.iter().cloned().chain(plan_ps(plan)).collect();
        let master = self
            .config
            .target
            .strip_prefix("grpc://")
            .unwrap_or(&self.config.target);
        let all_there = reachable(&tasks, self.tf_config()).len() == tasks.len()
            && (master.is_empty() || answers(master));
        (!silent.is_empty() || !all_there).then_some(hung)
    }

    /// After a run that failed with `e`: retries a run that was only slow, recovers from a
    /// fault, or returns the error when it is not one or recoveries ran out.
    fn failed(
        &mut self,
        e: Error,
        deadline: Option<Duration>,
        first: bool,
        detect_ms: f64,
    ) -> Result<()> {
        let failed_at = Instant::now();
        if !matches!(e, Error::TensorFlow { .. }) {
            return Err(e);
        }
        // A run that passed its deadline: hung workers (agents silent) are lost; with every
        // worker alive the run was only slow, and is retried with a longer deadline.
        let mut hung = Vec::new();
        if let (Some(h), Some(d)) = (self.options().hang.clone(), deadline) {
            if passed_deadline(&e) && self.watchdog.is_some() {
                match self.hung_or_slow(&self.current) {
                    None => {
                        if self.retries >= h.max_retries {
                            return Err(e);
                        }
                        self.retries += 1;
                        log::warn!(
                            "step {}: the run passed its {d:?} deadline but every worker's \
                             agent answers: retrying it with {:?}",
                            self.step,
                            run_deadline(
                                &h,
                                &self.report.step_ms,
                                self.retries,
                                first,
                                self.config.run_timeout_ms
                            )
                        );
                        self.report.deadline_retries.push(DeadlineRetry {
                            step: self.step,
                            deadline_ms: d.as_secs_f64() * 1e3,
                        });
                        return Ok(());
                    }
                    Some(silent) => {
                        log::warn!(
                            "step {}: the run passed its {d:?} deadline and the agents of \
                             {silent:?} do not answer: hung",
                            self.step
                        );
                        hung = silent;
                    }
                }
            }
        }
        if self.report.recoveries.len() >= self.options().max_recoveries {
            return Err(e);
        }
        let Some(a) = self.assess_until_probed(hung)? else {
            return Err(e);
        };
        self.recover(*a, &e, detect_ms, failed_at);
        Ok(())
    }

    /// [`Driver::assess`] until the new session's probe passes: a probe that fails is looked
    /// at like any failed run (hung agents join the lost, a slow probe is retried with a
    /// doubled deadline). `None` when nothing was lost.
    fn assess_until_probed(&mut self, mut hung: Vec<String>) -> Result<Option<Box<Assessed>>> {
        let max_retries = self.options().hang.as_ref().map_or(0, |h| h.max_retries);
        let mut retries = 0;
        // Tasks that answer (workers not hung, every ps), to tell a probe that failed because
        // more were lost from one that was only slow.
        let answering = |d: &Self, hung: &[String]| {
            let tasks: Vec<String> = without(&Self::workers(&d.current), hung)
                .into_iter()
                .chain(d.all_ps.iter().cloned())
                .collect();
            reachable(&tasks, d.tf_config()).len()
        };
        // The state as the failed plan placed it, to tell variables a restarted ps lost.
        let previous = self.run.state.clone();
        loop {
            let before = answering(self, &hung);
            let error = match self.assess(&hung, &previous, retries)? {
                Assessment::Nothing => return Ok(None),
                Assessment::Ready(a) => return Ok(Some(a)),
                Assessment::ProbeFailed(error) => error,
            };
            if !matches!(error, Error::TensorFlow { .. }) {
                return Err(error);
            }
            let silent = if passed_deadline(&error) {
                self.hung_or_slow(&self.current).unwrap_or_default()
            } else {
                Vec::new()
            };
            let lost_more =
                silent.iter().any(|d| !hung.contains(d)) || answering(self, &hung) < before;
            log::warn!(
                "step {}: the new session's probe failed ({error}); {}",
                self.step,
                if lost_more {
                    "more tasks are lost"
                } else {
                    "every task answers: trying again"
                }
            );
            if !lost_more {
                if retries >= max_retries {
                    return Err(error);
                }
                retries += 1;
            }
            for d in silent {
                if !hung.contains(&d) {
                    hung.push(d);
                }
            }
        }
    }

    /// Moves to the assessed plan and session after the run that failed with `e`.
    fn recover(&mut self, a: Assessed, e: &Error, detect_ms: f64, failed_at: Instant) {
        let lost = a.damage.lost();
        log::warn!(
            "step {} failed ({e}); lost {lost:?} ({:?} fault); resuming by {:?} on {}",
            self.step,
            a.action.kind,
            a.action.resume,
            a.target
        );
        let now = Instant::now();
        for w in &a.damage.lost_workers {
            if !self.dropped.iter().any(|(d, _)| d == w) {
                self.dropped.push((w.clone(), now));
            }
        }
        // A restore still pending (its run failed) is not undone by a later worker fault.
        let next = self
            .resume
            .map_or(a.action.resume, |pending| pending.max(a.action.resume));
        let mut recovery = Recovery {
            step: self.step,
            kind: a.action.kind,
            lost,
            error: e.to_string(),
            plan: a.plan.clone(),
            target: a.target.clone(),
            restored_from: None,
            redone_steps: 0,
            discarded_losses: Vec::new(),
            detect_ms,
            recover_ms: None,
        };
        if next == Resume::Restore {
            if let Some((from, redone, discarded)) = self.rewind() {
                recovery.restored_from = Some(from);
                recovery.redone_steps = redone;
                recovery.discarded_losses = discarded;
            }
        }
        self.report.recoveries.push(recovery);
        self.switched(a.plan, next);
        self.config.target = a.target;
        self.pending = Some((failed_at, Pending::Recovery));
    }

    /// Goes back to the latest checkpoint: (its step, steps to train again, their losses).
    fn rewind(&mut self) -> Option<(usize, usize, Vec<f32>)> {
        let c = self.latest.as_ref()?.step;
        let redone = self.step - c;
        let discarded = self.report.losses.split_off(c);
        self.report.step_ms.truncate(c);
        self.step = c;
        Some((c, redone, discarded))
    }

    /// Trains on `plan` with session `run` from now on, after `resume`.
    fn switch(&mut self, plan: DataParallelPlan, run: Prepared, resume: Resume) {
        let old = std::mem::replace(&mut self.run, run);
        self.closing.close(old);
        self.switched(plan, resume);
    }

    /// Trains on `plan` with the session the driver holds now, after `resume`.
    fn switched(&mut self, plan: DataParallelPlan, resume: Resume) {
        self.current = plan;
        self.session_steps = 0;
        self.retries = 0;
        self.resume = Some(resume);
    }

    /// Dropped workers that answer again: their agent answered since they were dropped (for a
    /// worker without one, its gRPC port, probed at most once a second) and their port accepts.
    fn answering_again(&mut self) -> Vec<String> {
        let tf_config = self.job.tf_config;
        let probe_ports = self
            .ports_probed
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        let mut back = Vec::new();
        for (d, since) in &self.dropped {
            let ok = match self.watchdog.as_ref().and_then(|w| w.last_answer(d)) {
                Some(t) => t > *since,
                None => probe_ports,
            };
            if ok && address_of(d, tf_config).is_some_and(answers) {
                back.push(d.clone());
            }
        }
        if probe_ports {
            self.ports_probed = Some(Instant::now());
        }
        back
    }

    /// Takes dropped workers that answer again back into the plan: re-plans with them and
    /// opens a session that goes on from the variables on the ps (the checkpoint when they
    /// move, or sessions are isolated).
    ///
    /// A re-plan or session that fails here does not end training: the workers are given up
    /// (no longer probed) with a warning, and training goes on without them.
    fn readmit(&mut self) {
        if !self.options().readmit || self.dropped.is_empty() || self.resume.is_some() {
            return;
        }
        let back = self.answering_again();
        if back.is_empty() {
            return;
        }
        if let Err(e) = self.take_back(&back) {
            log::warn!(
                "step {}: {back:?} answer again but cannot be taken back ({e}); training goes \
                 on without them",
                self.step
            );
            self.dropped.retain(|(d, _)| !back.contains(d));
        }
    }

    /// Re-plans with `back` and moves to a session of the new plan.
    fn take_back(&mut self, back: &[String]) -> Result<()> {
        let noticed = Instant::now();
        let mut workers = Self::workers(&self.current);
        workers.extend(back.iter().cloned());
        let alive_ps = reachable(&self.all_ps, self.tf_config());
        let plan = (self.replan)(&workers, &alive_ps)?;
        let run = prepare_run(
            &self.job.workload,
            &plan,
            self.job.cluster,
            &self.config,
            self.options().seed,
        )?;
        let moved = plan.variable_devices != self.current.variable_devices;
        let mut resume = readmit_resume(self.config.isolate_state, self.latest.is_some());
        if moved && self.latest.is_some() {
            resume = Resume::Restore;
        }
        log::warn!(
            "step {}: {back:?} answer again: taken back into the plan ({} replicas), resuming \
             by {resume:?}",
            self.step,
            plan.replicas.len()
        );
        if resume == Resume::Restore {
            self.rewind();
        }
        self.dropped.retain(|(d, _)| !back.contains(d));
        self.report.readmissions.push(Readmission {
            step: self.step,
            workers: back.to_vec(),
            plan: plan.clone(),
            readmit_ms: None,
        });
        self.switch(plan, run, resume);
        self.pending = Some((noticed, Pending::Readmission));
        Ok(())
    }

    /// The report, with what the traced last step ran where.
    fn finish(self) -> RecoveringReport {
        let mut report = self.report;
        if let Some(stats) = &report.step_stats {
            let run = &self.run;
            report.executed = crate::runtime::stats::executed_counts(stats);
            let placed = |n: &str| run.placement.device_of(&run.op_graph, self.job.cluster, n);
            report.mismatches = crate::runtime::stats::placement_mismatches(stats, placed, |n| {
                run.op_graph
                    .id(n)
                    .map(|id| run.op_graph.node(id).op.as_str())
            });
        }
        report.final_plan = self.current;
        report.checkpoint = self.latest;
        report
    }
}

/// Sessions of a failed plan being closed beside training (closing a session whose tasks are
/// gone blocks until the operation timeout). Dropping this waits for them a little, then leaves
/// the rest to finish on their own: training never waits out a dead task's deadline.
struct Closing(Vec<std::thread::JoinHandle<()>>);

/// How long the end of [`train_recovering`] waits for old sessions to close.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

impl Closing {
    /// Closes `run`'s session on a thread beside training.
    fn close(&mut self, run: Prepared) {
        self.0.push(std::thread::spawn(move || drop(run)));
    }
}

impl Drop for Closing {
    fn drop(&mut self) {
        let deadline = Instant::now() + CLOSE_GRACE;
        while self.0.iter().any(|c| !c.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for c in self.0.drain(..) {
            if !c.is_finished() {
                log::debug!("an old session is still closing (bounded by its operation timeout)");
                continue;
            }
            if c.join().is_err() {
                log::warn!("closing the session of a failed plan panicked");
            }
        }
    }
}
