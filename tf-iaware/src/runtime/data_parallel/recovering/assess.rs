//! Looking at a failure: which tasks were lost (hung, gone, restarted), the plan and session
//! that replace the old ones, and which variables survived in the new session.

use super::{ms, Assessed, Assessment, Driver};
use crate::config::SessionConfig;
use crate::error::{Error, Result};
use crate::parallel::DataParallelPlan;
use crate::runtime::checkpoint::{self, StateVar};
use crate::runtime::data_parallel::probe::{address_of, answers, reachable, wait_for, without};
use crate::runtime::data_parallel::recovery::{choose_target, decide, Damage};
use crate::runtime::data_parallel::{plan_ps, prepare_run};

impl<P, B> Driver<'_, '_, P, B>
where
    P: FnMut(&[String], &[String]) -> Result<DataParallelPlan>,
    B: FnMut(usize),
{
    /// After a failed run: finds what was lost (waiting up to `options.ps_wait` for ps tasks
    /// that stopped answering), re-plans when tasks are gone, opens a session on a target that
    /// answers and, with a checkpoint to fall back on, probes which variables survived (under
    /// a short deadline, longer after `probe_retries` retries).
    pub(super) fn assess(
        &mut self,
        hung: &[String],
        previous: &[StateVar],
        probe_retries: u32,
    ) -> Result<Assessment> {
        let (tf_config, step) = (self.job.tf_config, self.step);
        let workers = Self::workers(&self.current);
        // A hung worker still accepts TCP: it is lost although its port answers.
        let alive_workers = reachable(&without(&workers, hung), tf_config);
        let used_ps = plan_ps(&self.current);
        let down = without(&used_ps, &reachable(&used_ps, tf_config));
        let gone_ps = if down.is_empty() {
            Vec::new()
        } else {
            log::warn!(
                "step {step}: ps {down:?} stopped answering; waiting up to {:?} for it to come \
                 back",
                self.options().ps_wait
            );
            wait_for(&down, tf_config, self.options().ps_wait)
        };
        let mut damage = Damage {
            lost_workers: without(&workers, &alive_workers),
            hung: hung.to_vec(),
            restarted_ps: without(&down, &gone_ps),
            gone_ps,
            isolated: self.config.isolate_state,
            ..Damage::default()
        };
        let alive_ps = reachable(&without(&self.all_ps, &damage.gone_ps), tf_config);
        let unrecoverable = |damage: &Damage, reason: String| Error::Unrecoverable {
            step,
            lost: damage.lost().join(", "),
            reason,
        };
        if alive_workers.is_empty() {
            return Err(unrecoverable(
                &damage,
                "no worker of the plan answers".into(),
            ));
        }
        if alive_ps.is_empty() {
            return Err(unrecoverable(
                &damage,
                format!(
                    "no ps answers (waited {:?} for the lost ones to come back)",
                    self.options().ps_wait
                ),
            ));
        }
        let plan = if damage.lost_workers.is_empty() && damage.gone_ps.is_empty() {
            self.current.clone()
        } else {
            (self.replan)(&alive_workers, &alive_ps)?
        };
        damage.moved = plan.variable_devices != self.current.variable_devices;
        let target = self.target_for(&plan, hung).ok_or_else(|| {
            unrecoverable(
                &damage,
                format!(
                    "neither the session master ({}) nor any task of the new plan answers",
                    self.config.target
                ),
            )
        })?;
        let session_config = SessionConfig {
            target: target.clone(),
            ..self.config.clone()
        };
        let run = prepare_run(
            &self.job.workload,
            &plan,
            self.job.cluster,
            &session_config,
            self.options().seed,
        )?;
        // The failed session is closed now, beside training, before the new one's first run
        // creates it on the master: its steps are cancelled on every task.
        let old = std::mem::replace(&mut self.run, run);
        self.closing.close(old);
        // With isolated sessions every variable is new to this one: the probe cannot tell.
        if self.latest.is_some() && !damage.isolated {
            if let Some(h) = &self.options().hang {
                let expected = self.report.checkpoint_ms.last().copied();
                let deadline = ms(h.deadline(expected, probe_retries));
                self.run.trainer.set_run_timeout_ms(deadline);
            }
            match checkpoint::initialized(self.run.trainer.session(), &self.run.state) {
                Ok(flags) => damage.emptied = emptied(&self.run.state, &flags, previous),
                Err(e) => return Ok(Assessment::ProbeFailed(e)),
            }
        }
        let Some(action) = decide(&damage, self.latest.is_some()) else {
            return Ok(Assessment::Nothing);
        };
        Ok(Assessment::Ready(Box::new(Assessed {
            plan,
            target,
            damage,
            action,
        })))
    }

    /// The session target for `plan`: the master while it answers (and is not hung), else a
    /// task of the plan that does.
    pub(super) fn target_for(&self, plan: &DataParallelPlan, hung: &[String]) -> Option<String> {
        let tf_config = self.tf_config();
        let candidates: Vec<String> = std::iter::once(plan.global_device.clone())
            .chain(plan_ps(plan))
            .chain(Self::workers(plan))
            .filter_map(|d| address_of(&d, tf_config).map(String::from))
            .collect();
        let hung_addresses: Vec<&str> = hung
            .iter()
            .filter_map(|d| address_of(d, tf_config))
            .collect();
        let alive = |a: &str| !hung_addresses.contains(&a) && answers(a);
        let target = choose_target(&self.config.target, &candidates, alive)?;
        if target != self.config.target {
            log::warn!(
                "step {}: the session master {} is lost; {target} masters from now on",
                self.step,
                self.config.target
            );
        }
        Some(target)
    }
}

/// Devices whose variables hold no value in a new session (`flags` of `state`, from
/// [`checkpoint::initialized`]) although they stayed where `previous` had them: a ps that
/// restarted. Variables that moved are new where they went (`Damage::moved` covers them).
fn emptied(state: &[StateVar], flags: &[bool], previous: &[StateVar]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (v, ok) in state.iter().zip(flags) {
        let stayed = previous
            .iter()
            .any(|p| p.name == v.name && p.device == v.device);
        let device = v.device.clone().unwrap_or_else(|| "(unplaced)".into());
        if !ok && stayed && !out.contains(&device) {
            out.push(device);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PS0: &str = "/job:ps/replica:0/task:0/device:CPU:0";
    const PS1: &str = "/job:ps/replica:0/task:1/device:CPU:0";

    fn var(name: &str, device: &str) -> StateVar {
        StateVar {
            name: name.into(),
            shape: vec![1],
            read: format!("{name}/read"),
            device: Some(device.into()),
        }
    }

    #[test]
    fn only_variables_that_stayed_and_lost_their_value_empty_a_device() {
        let previous = [var("a", PS0), var("b", PS0), var("c", PS0)];
        // `c` moved to ps 1: uninitialised there, but that is the move, not a lost ps.
        let state = [var("a", PS0), var("b", PS0), var("c", PS1)];
        assert_eq!(
            emptied(&state, &[true, true, false], &previous),
            Vec::<String>::new()
        );
        assert_eq!(
            emptied(&state, &[false, false, false], &previous),
            vec![PS0.to_string()]
        );
    }
}
