//! Training through lost tasks ([`TrainingOptions::recover`](super::TrainingOptions::recover),
//! TF_CONFIG clusters): the driver keeps a copy of the variables (and of where every sampler
//! is) in memory, refreshed every few updates; when a run fails it probes which tasks still
//! answer (a worker whose port answers but whose metrics agent is silent is hung: stopped or
//! swapped out, found once its step passes the run deadline), waits a while for a lost
//! parameter server to come back, re-plans the strategy over
//! the survivors, builds the new plan's graph and goes on — from the variables as they are on
//! the ps when only workers were lost, else from the latest copy (the updates since are trained
//! again and counted once).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::build::build;
use super::{Progress, Run};
use crate::cluster::tf_config::TfConfig;
use crate::data::Sampler;
use crate::error::{Error, Result};
use crate::parallel::{DataParallelPlan, Updates};
use crate::runtime::checkpoint::{self, Checkpoint};
use crate::runtime::data_parallel::probe::{address_of, agents_of, reachable, wait_for, without};
use crate::runtime::liveness::healthz;

/// How long a worker's metrics agent has to answer (twice) before the worker counts as hung.
const AGENT_TIMEOUT: Duration = Duration::from_secs(2);

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

/// Seconds between two probes of the dropped workers.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// The state a recovery goes on from: the variables and where each sampler was.
struct SafePoint {
    checkpoint: Checkpoint,
    updates: u64,
    sync_taken: u64,
    workers: BTreeMap<String, u64>,
}

/// The driver's copies of the training state, and the recoveries so far.
pub(super) struct Safekeeping {
    every: u64,
    latest: Option<SafePoint>,
    pub recoveries: Vec<Recovered>,
}

impl Safekeeping {
    pub fn new(every: u64) -> Self {
        Safekeeping {
            every,
            latest: None,
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
        let checkpoint = checkpoint::save(&built.session, &built.state, updates as usize)?;
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
        // A worker whose port answers but whose metrics agent does not is hung (stopped,
        // swapped out): its step held the run until its deadline.
        let answering = reachable(&workers, tasks);
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
        let silent_ps = without(&ps, &reachable(&ps, tasks));
        // A parameter server that comes back was restarted: its variables are gone.
        let gone_ps = wait_for(&silent_ps, tasks, options.ps_wait);
        let alive_ps = without(&ps, &gone_ps);
        let mut lost = without(&workers, &alive_workers);
        lost.extend(silent_ps.iter().cloned());
        let (_, update) = self.gate.totals();
        // Every task answers: one restarted before it was probed holds no variables.
        let emptied = if lost.is_empty() {
            self.emptied(&ps)
        } else {
            Vec::new()
        };
        if lost.is_empty() && emptied.is_empty() {
            return Err(failure);
        }
        lost.extend(emptied.iter().cloned());
        // Variables are gone with a ps that went silent or came back empty.
        let ps_state_lost = !silent_ps.is_empty() || !emptied.is_empty();
        log::warn!("lost {lost:?} at update {update}: {failure}");
        if alive_workers.is_empty() || alive_ps.is_empty() {
            return Err(Error::Unrecoverable {
                step: update as usize,
                lost: lost.join(", "),
                reason: format!(
                    "no {} answers",
                    if alive_workers.is_empty() {
                        "worker"
                    } else {
                        "parameter server"
                    }
                ),
            });
        }
        let new = self.replan(&alive_workers, &alive_ps)?;
        self.move_master(&alive_workers, &lost, tasks);
        // Only workers lost: the variables on the ps are whole, read them through the old
        // session (its master may be gone too: then from the latest copy).
        let current = (!ps_state_lost)
            .then(|| checkpoint::save(&self.built.session, &self.built.state, update as usize))
            .and_then(|r| r.ok());
        let next = build(
            self.job,
            &new,
            self.contender.updates(),
            self.cluster,
            &self.config,
            self.tag,
            progress.options.own_masters.as_ref(),
        )?;
        let init = next.session.op(&self.job.workload.sidecar.init, "init")?;
        next.session.run(&[], &[init], &[], false)?;
        let restored_from = match (
            &current,
            progress.safe.as_ref().and_then(|s| s.latest.as_ref()),
        ) {
            (Some(c), _) => {
                checkpoint::restore(&next.session, &next.state, c)?;
                update
            }
            (None, Some(point)) => {
                checkpoint::restore(&next.session, &next.state, &point.checkpoint)?;
                // The samplers go back to where the copy was: the same rows are trained again.
                self.sampler = Sampler::resumed(self.job.train.len(), self.seed, point.sync_taken);
                progress.keeper.position.sync = point.sync_taken;
                progress.keeper.position.workers = point.workers.clone();
                point.updates
            }
            (None, None) => return Err(failure),
        };
        {
            let mut s = self.gate.lock();
            // The failed phase's workers are gone: the next phase starts unpaused.
            (s.stop, s.paused, s.in_flight, s.error) = (false, false, 0, None);
            s.updates = restored_from;
            // A new graph's accumulators start at step 0 (backup workers).
            s.global_step = 0;
            s.tokens.clear();
        }
        self.gate.remap_counts(plan, &new);
        self.built = next;
        self.ps = alive_ps;
        if let Some(adapter) = &mut self.adapter {
            adapter.forget(&lost);
        }
        // Workers dropped are probed from now on, and taken back when they answer.
        for d in lost.iter().filter(|d| workers.contains(d)) {
            if !progress.dropped.contains(d) {
                progress.dropped.push(d.clone());
            }
        }
        progress
            .keeper
            .planned(restored_from, &new, self.cluster, true)?;
        let recovered = Recovered {
            update,
            lost,
            error: failure.to_string(),
            restored_from,
            redone: update - restored_from,
            shares: new
                .replicas
                .iter()
                .map(|r| (r.device.clone(), r.batch))
                .collect(),
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
            shares: new
                .replicas
                .iter()
                .map(|r| (r.device.clone(), r.batch))
                .collect(),
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
        r.plan_over(strategy, workers, ps, self.cluster)
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
