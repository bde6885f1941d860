//! Training through lost tasks ([`TrainingOptions::recover`](super::TrainingOptions::recover),
//! TF_CONFIG clusters): the driver keeps a copy of the variables (and of where every sampler
//! is) in memory, refreshed every few updates; when a run fails it probes which tasks still
//! answer (a worker whose port answers but whose metrics agent is silent is hung: stopped or
//! swapped out, found once its step passes the run deadline), waits a while for a lost
//! parameter server to come back, re-plans the strategy over
//! the survivors, builds the new plan's graph and goes on — from the variables as they are on
//! the ps when only workers were lost, else from the latest copy (the updates since are trained
//! again and counted once).

use std::time::{Duration, Instant};

use super::build::Built;
use super::progress::AGENT_TIMEOUT;
use super::report::shares;
use super::report::{Readmitted, Recovered};
use super::{Progress, RecoverOptions, Run};
use crate::cluster::tf_config::TfConfig;
use crate::data::Sampler;
use crate::error::{Error, Result, TfCode};
use crate::parallel::{DataParallelPlan, Updates};
use crate::runtime::checkpoint::{self, Checkpoint};
use crate::runtime::data_parallel::probe::{address_of, agents_of, reachable, wait_for, without};
use crate::runtime::liveness::healthz;

/// Updates after which a deadline retry no longer counts as "in a row".
const RETRY_RESET_UPDATES: u64 = 10;

/// Which tasks answer after a failure.
struct Probed {
    alive_workers: Vec<String>,
    alive_ps: Vec<String>,
    /// Parameter servers that did not answer at first (their variables are gone, whether they
    /// came back or not).
    silent_ps: Vec<String>,
    /// Workers that do not answer or are hung, and the silent parameter servers.
    lost: Vec<String>,
}

/// Probes `workers` and `ps`: a worker whose port answers but whose metrics agent does not is
/// hung (stopped, swapped out: its step held the run until its deadline); a silent parameter
/// server is waited for up to `ps_wait`.
fn probe(workers: &[String], ps: &[String], tasks: &TfConfig, ps_wait: Duration) -> Probed {
    let answering = reachable(workers, tasks);
    let agents = agents_of(&answering, tasks);
    let hung: Vec<String> = answering
        .iter()
        .filter(|w| {
            agents
                .get(*w)
                .is_some_and(|a| !healthz(a, AGENT_TIMEOUT) && !healthz(a, AGENT_TIMEOUT))
        })
        .cloned()
        .collect();
    let alive_workers = without(&answering, &hung);
    let silent_ps = without(ps, &reachable(ps, tasks));
    // A parameter server that comes back was restarted: its variables are gone.
    let gone_ps = wait_for(&silent_ps, tasks, ps_wait);
    let mut lost = without(workers, &alive_workers);
    lost.extend(silent_ps.iter().cloned());
    Probed {
        alive_workers,
        alive_ps: without(ps, &gone_ps),
        silent_ps,
        lost,
    }
}

/// Whether `e` may come from a lost task (anything TensorFlow or a probe reports; not the data,
/// the options or a diverging loss).
fn maybe_lost_task(e: &Error) -> bool {
    matches!(e, Error::TensorFlow { .. } | Error::TaskDown { .. })
}

impl Run<'_> {
    /// After `failure` of a phase training `plan`: the plan over the tasks that still answer,
    /// its graph built and holding the variables, the counts and samplers where they go on
    /// from. `failure` is returned as is when it is not a lost task, nothing was lost, or the
    /// recoveries ran out.
    ///
    /// # Errors
    /// `failure`; [`Error::Unrecoverable`] when no worker or no parameter server answers;
    /// errors of re-planning, building and restoring.
    pub(super) fn recover(
        &mut self,
        failure: Error,
        plan: &DataParallelPlan,
        progress: &mut Progress<'_>,
    ) -> Result<DataParallelPlan> {
        let (Some(options), Some(tasks)) = (
            progress.options.recover.as_ref(),
            self.contender
                .replanning
                .as_ref()
                .and_then(|r| r.tasks.as_ref()),
        ) else {
            return Err(failure);
        };
        let done = progress.safe.as_ref().map_or(0, |s| s.recoveries.len());
        if !maybe_lost_task(&failure) || done >= options.max_recoveries {
            return Err(failure);
        }
        let started = Instant::now();
        if self.contender.updates() != Updates::Sync {
            // Where each asynchronous worker's sampler got to.
            let samples = self.gate.lock().samples.clone();
            progress.keeper.workers_read(plan, &samples);
        }
        let workers: Vec<String> = plan.replicas.iter().map(|r| r.device.clone()).collect();
        let ps = self.ps.clone();
        let Probed {
            alive_workers,
            alive_ps,
            silent_ps,
            mut lost,
        } = probe(&workers, &ps, tasks, options.ps_wait);
        let (_, update) = self.gate.totals();
        // Every task answers: one restarted before it was probed holds no variables.
        let emptied = if lost.is_empty() {
            self.emptied(&ps)
        } else {
            Vec::new()
        };
        if lost.is_empty() && emptied.is_empty() {
            return self.retry(failure, plan, options);
        }
        lost.extend(emptied.iter().cloned());
        // Variables are gone with a ps that went silent or came back empty.
        let ps_state_lost = !silent_ps.is_empty() || !emptied.is_empty();
        log::warn!("lost {lost:?} at update {update}: {failure}");
        if alive_workers.is_empty() || alive_ps.is_empty() {
            let nobody = if alive_workers.is_empty() {
                "worker"
            } else {
                "parameter server"
            };
            return Err(Error::Unrecoverable {
                step: update as usize,
                lost: lost.join(", "),
                reason: format!("no {nobody} answers"),
            });
        }
        let new = self.replan(&alive_workers, &alive_ps)?;
        self.move_master(&alive_workers, &lost, tasks);
        // Only workers lost: the variables on the ps are whole, read them through the old
        // session (its master may be gone too: then from the latest copy).
        let current = (!ps_state_lost)
            .then(|| checkpoint::save(&self.built.session, &self.built.state, update as usize))
            .and_then(|r| r.ok());
        let next = self.build_for(&new, progress)?;
        let init = next.session.op(&self.job.workload.sidecar.init, "init")?;
        next.session.run(&[], &[init], &[], false)?;
        let Some(restored_from) = self.restore_into(&next, current.as_ref(), update, progress)?
        else {
            return Err(failure);
        };
        self.gate.restart(restored_from);
        self.gate.remap_counts(plan, &new);
        // Closing a session whose tasks are gone blocks until its operation timeout (a minute
        // on a TF_CONFIG cluster): the old one closes on a thread beside training.
        let old = std::mem::replace(&mut self.built, next);
        if let Err(e) = std::thread::Builder::new()
            .name("tf-iaware-close".into())
            .spawn(move || drop(old))
        {
            log::warn!("closing the failed plan's session here (no thread: {e})");
        }
        self.session_steps = 0;
        self.ps = alive_ps;
        self.forget(&lost, &workers, progress);
        progress
            .keeper
            .planned(restored_from, &new, self.cluster, true);
        let recovered = Recovered {
            update,
            lost,
            error: failure.to_string(),
            restored_from,
            redone: update - restored_from,
            shares: shares(&new),
            seconds: started.elapsed().as_secs_f64(),
        };
        log::warn!(
            "recovered: going on from update {} on shares {:?}",
            recovered.restored_from,
            recovered.shares
        );
        if let Some(safe) = &mut progress.safe {
            safe.recoveries.push(recovered);
            // The next copy is of the new graph's variables.
            safe.latest = None;
        }
        progress.safeguard(&self.built, restored_from)?;
        self.clock.start();
        Ok(new)
    }

    /// A step whose paced deadline passed while every task answered (a slow step, not a hung
    /// worker): the same plan again, the steps' deadlines doubled, at most
    /// `hang.max_retries` times in a row; any other failure is returned.
    fn retry(
        &mut self,
        failure: Error,
        plan: &DataParallelPlan,
        options: &RecoverOptions,
    ) -> Result<DataParallelPlan> {
        // Every step of a recovering run has a paced deadline (synchronous, asynchronous and
        // backup workers' alike).
        let (_, updates) = self.gate.totals();
        // Retries count in a row: steps that went through since the last one start the count
        // again (asynchronous workers' steps do not reset it one by one).
        if updates > self.retried_at + RETRY_RESET_UPDATES {
            self.deadline_retries = 0;
        }
        self.retried_at = updates;
        if failure.tf_code() != Some(TfCode::DeadlineExceeded)
            || self.deadline_retries >= options.hang.max_retries
        {
            return Err(failure);
        }
        self.deadline_retries += 1;
        self.retried += 1;
        log::warn!(
            "a step passed its deadline with every task answering: retried with {}× the deadline",
            1u32 << self.deadline_retries.min(16)
        );
        self.gate.restart(self.gate.totals().1);
        self.clock.start();
        Ok(plan.clone())
    }

    /// Leaves `lost` out of live re-planning; the lost `workers` are probed from now on, and
    /// taken back when they answer.
    fn forget(&mut self, lost: &[String], workers: &[String], progress: &mut Progress<'_>) {
        if let Some(adapter) = &mut self.adapter {
            adapter.forget(lost);
        }
        for d in lost.iter().filter(|d| workers.contains(d)) {
            if !progress.dropped.contains(d) {
                progress.dropped.push(d.clone());
            }
        }
    }

    /// Restores `next`'s variables from `current` (read from the ps after update `update`) or
    /// else from the driver's latest copy, the samplers set back with it; returns the update
    /// count training goes on from (`None`: nothing to restore from).
    ///
    /// # Errors
    /// Errors of restoring.
    fn restore_into(
        &mut self,
        next: &Built,
        current: Option<&Checkpoint>,
        update: u64,
        progress: &mut Progress<'_>,
    ) -> Result<Option<u64>> {
        if let Some(c) = current {
            checkpoint::restore(&next.session, &next.state, c)?;
            return Ok(Some(update));
        }
        let Some(point) = progress.safe.as_ref().and_then(|s| s.latest.as_ref()) else {
            return Ok(None);
        };
        checkpoint::restore(&next.session, &next.state, &point.checkpoint)?;
        // The samplers go back to where the copy was: the same rows are trained again.
        self.sampler = Sampler::resumed(self.job.train.len(), self.seed, point.sync_taken);
        progress.keeper.position.sync = point.sync_taken;
        progress.keeper.position.workers = point.workers.clone();
        Ok(Some(point.updates))
    }

    /// Takes the workers in `progress.back` into `plan`: the strategy planned again with them,
    /// the variables moved into the new plan's graph.
    ///
    /// # Errors
    /// Errors of re-planning, building, reading and restoring the variables.
    pub(super) fn readmit(
        &mut self,
        plan: DataParallelPlan,
        progress: &mut Progress<'_>,
    ) -> Result<DataParallelPlan> {
        let started = Instant::now();
        let back = std::mem::take(&mut progress.back);
        progress.dropped.retain(|d| !back.contains(d));
        let mut workers: Vec<String> = plan.replicas.iter().map(|r| r.device.clone()).collect();
        workers.extend(back.iter().cloned());
        let new = self.replan(&workers, &self.ps.clone())?;
        let (_, update) = self.gate.totals();
        if self.contender.updates() != Updates::Sync {
            let samples = self.gate.lock().samples.clone();
            progress.keeper.workers_read(&plan, &samples);
        }
        let new = self.switch(plan, new, update as usize, progress)?;
        let readmitted = Readmitted {
            update,
            workers: back,
            shares: shares(&new),
            seconds: started.elapsed().as_secs_f64(),
        };
        log::info!(
            "took back {:?} at update {update}: shares {:?}",
            readmitted.workers,
            readmitted.shares
        );
        progress.readmitted.push(readmitted);
        if let Some(adapter) = &mut self.adapter {
            adapter.replanned();
        }
        self.clock.start();
        Ok(new)
    }

    /// The parameter servers of `ps` whose variables no longer read through the current
    /// session (restarted: a fresh server holds none).
    fn emptied(&self, ps: &[String]) -> Vec<String> {
        let session = &self.built.session;
        ps.iter()
            .filter(|p| {
                let Some(var) = self
                    .built
                    .state
                    .iter()
                    .find(|v| v.device.as_deref() == Some(p.as_str()))
                else {
                    return false;
                };
                session
                    .op(&var.read, "checkpoint read")
                    .and_then(|read| session.run(&[], &[], &[read], false))
                    .is_err()
            })
            .cloned()
            .collect()
    }

    /// The contender's strategy over `workers` and `ps`.
    fn replan(&self, workers: &[String], ps: &[String]) -> Result<DataParallelPlan> {
        let strategy = self.contender.strategy;
        if let Updates::Backup { backups } = strategy.updates() {
            super::check_backups(backups, workers.len())?;
        }
        let Some(r) = &self.contender.replanning else {
            return Err(super::bad(
                "recovery",
                format!("`{strategy}` has nothing to re-plan from"),
            ));
        };
        r.planner.plan_over(workers, ps, self.cluster)
    }

    /// Moves the session's master to a surviving worker when its own task was lost.
    fn move_master(&mut self, alive: &[String], lost: &[String], tasks: &TfConfig) {
        let gone = lost
            .iter()
            .filter_map(|d| address_of(d, tasks))
            .any(|a| self.config.target.ends_with(a));
        if let (true, Some(address)) = (gone, alive.first().and_then(|d| address_of(d, tasks))) {
            log::warn!("the session's master was lost: now {address}");
            self.config.target = format!("grpc://{address}");
        }
    }
}
