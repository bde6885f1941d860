//! What a fault is and what to do about it — pure: the damage a failure left, the decision
//! it leads to, the deadline of a run, and what the report keeps of each recovery.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, TfCode};
use crate::parallel::DataParallelPlan;
use crate::proto::StepStats;
use crate::runtime::checkpoint::Checkpoint;
use crate::runtime::liveness::HangDetection;
use crate::runtime::stats::Mismatch;
use crate::runtime::train::{StepTimes, TrainReport};

/// What a recovery had to replace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultKind {
    /// Workers were lost; the variables on the ps survived and training went on from them.
    Worker,
    /// A ps — and the variables it held — was lost; training went on from the latest checkpoint.
    Ps,
    /// Workers hung: a run passed its deadline while their agents stayed silent (a stopped or
    /// frozen process still accepts TCP). They were dropped as lost ones are; the variables on
    /// the ps survived.
    Hung,
}

/// A run whose deadline passed while every worker's agent answered: slow, not hung, so it was
/// run again with a doubled deadline and nobody was dropped.
#[derive(Clone, Debug, Serialize)]
pub struct DeadlineRetry {
    /// Global step whose attempt (or the initialisation or checkpoint before it) was retried.
    pub step: usize,
    /// The deadline that passed, ms.
    pub deadline_ms: f64,
}

/// A recovery: before which step, what was lost, the plan that replaced the old one, and how
/// training resumed.
#[derive(Clone, Debug, Serialize)]
pub struct Recovery {
    /// Global step whose attempt (or the initialisation or checkpoint before it) failed.
    pub step: usize,
    /// What was lost (a worker, a ps task, …).
    pub kind: FaultKind,
    /// Devices of the lost tasks: workers that no longer answer, ps tasks that stopped
    /// answering or whose variables are gone (restarted).
    pub lost: Vec<String>,
    /// The failing run's error.
    pub error: String,
    /// The plan that replaced the old one.
    pub plan: DataParallelPlan,
    /// Session target after the recovery (`grpc://host:port`; another task when the master was
    /// lost for good).
    pub target: String,
    /// Step of the checkpoint restored (ps faults).
    pub restored_from: Option<usize>,
    /// Steps trained since that checkpoint, which were trained again.
    pub redone_steps: usize,
    /// Losses of the redone steps as first trained (the redone ones are in the report's losses).
    pub discarded_losses: Vec<f32>,
    /// How long the failing run took to return its error, ms.
    pub detect_ms: f64,
    /// From the error to the new session holding its state again (data re-initialised or the
    /// checkpoint restored), ms; `None` if training failed before that.
    pub recover_ms: Option<f64>,
}

/// Workers dropped earlier (lost or hung) that answered again and were taken back into the
/// plan.
#[derive(Clone, Debug, Serialize)]
pub struct Readmission {
    /// Global step before which they were taken back.
    pub step: usize,
    /// Devices of the workers taken back.
    pub workers: Vec<String>,
    /// The plan that took them back.
    pub plan: DataParallelPlan,
    /// From noticing them answer to the new session holding its state, ms; `None` if training
    /// failed before that.
    pub readmit_ms: Option<f64>,
}

/// Result of [`train_recovering`](super::train_recovering)(super::train_recovering).
#[derive(Clone, Debug, Serialize)]
pub struct RecoveringReport {
    /// Loss of every global step (`steps` of them); a step redone after a restore counts once,
    /// as last trained.
    pub losses: Vec<f32>,
    /// Wall time of every global step, ms, as `losses`.
    pub step_ms: Vec<f64>,
    /// Every recovery, in order.
    pub recoveries: Vec<Recovery>,
    /// Runs retried after their deadline passed with every worker alive.
    pub deadline_retries: Vec<DeadlineRetry>,
    /// Dropped workers taken back when they answered again, in order.
    pub readmissions: Vec<Readmission>,
    /// The plan in use when training ended.
    pub final_plan: DataParallelPlan,
    /// Steps run in all, redone ones included.
    pub steps_run: usize,
    /// Wall time of every checkpoint taken, ms.
    pub checkpoint_ms: Vec<f64>,
    /// Size of a checkpoint (variables and optimiser slots), bytes.
    pub checkpoint_bytes: usize,
    /// Device → ops step stats saw run there in the last step ([`RecoveryOptions::trace_last`]).
    pub executed: BTreeMap<String, usize>,
    /// Placed ops of the last step that ran elsewhere (should be empty).
    pub mismatches: Vec<Mismatch>,
    /// Step stats of the last step, when traced.
    #[serde(skip)]
    pub step_stats: Option<StepStats>,
    /// The latest checkpoint the driver kept.
    #[serde(skip)]
    pub checkpoint: Option<Checkpoint>,
}

impl RecoveringReport {
    /// An empty report of a run that starts on `plan`.
    pub(crate) fn new(plan: DataParallelPlan) -> Self {
        RecoveringReport {
            losses: Vec::new(),
            step_ms: Vec::new(),
            recoveries: Vec::new(),
            deadline_retries: Vec::new(),
            readmissions: Vec::new(),
            final_plan: plan,
            steps_run: 0,
            checkpoint_ms: Vec::new(),
            checkpoint_bytes: 0,
            executed: BTreeMap::new(),
            mismatches: Vec::new(),
            step_stats: None,
            checkpoint: None,
        }
    }

    /// The run as a [`TrainReport`] of `global_batch`-sample steps whose first `warmup` are
    /// not timed; a traced last step ([`RecoveryOptions::trace_last`]) is not timed either
    /// unless it is the only timed one.
    pub(crate) fn train_report(&self, warmup: usize, global_batch: usize) -> TrainReport {
        let mut times: Vec<f64> = self.step_ms.iter().skip(warmup).copied().collect();
        if self.step_stats.is_some() && times.len() > 1 {
            times.pop();
        }
        let step_ms = StepTimes::from_samples(&times).unwrap_or(StepTimes {
            median: 0.0,
            p10: 0.0,
            p90: 0.0,
        });
        TrainReport {
            steps: self.losses.len().saturating_sub(warmup),
            warmup: warmup.min(self.losses.len()),
            images_per_sec: if step_ms.median > 0.0 {
                global_batch as f64 / (step_ms.median / 1e3)
            } else {
                0.0
            },
            step_ms,
            step_ms_all: times,
            loss_first: self.losses.first().copied().unwrap_or(f32::NAN),
            loss_last: self.losses.last().copied().unwrap_or(f32::NAN),
            losses: self.losses.clone(),
            executed: self.executed.clone(),
            mismatches: self.mismatches.clone(),
            step_stats: self.step_stats.clone(),
        }
    }
}

/// How [`train_recovering`](super::train_recovering) checkpoints and recovers.
#[derive(Clone, Debug, PartialEq)]
pub struct RecoveryOptions {
    /// Recoveries allowed before a failure is returned as is.
    pub max_recoveries: usize,
    /// Steps between checkpoints (at least 1); one is also taken right after initialisation.
    pub checkpoint_every: usize,
    /// How long to wait for a ps that stopped answering to answer again at its address (a
    /// cluster manager restarting it) before its variables are re-planned onto the other ps.
    pub ps_wait: Duration,
    /// Trace the last step (FULL_TRACE) for [`RecoveringReport::executed`].
    pub trace_last: bool,
    /// Seed of the initialisers and synthetic batches (as [`train`](super::train)'s `seed`).
    pub seed: u64,
    /// Hung-worker detection: a deadline per run from the expected step, and liveness from
    /// the workers' metrics agents (TF_CONFIG `"metrics"`); `None`: every run has the
    /// session's own deadline and a hung worker stalls training until it passes.
    pub hang: Option<HangDetection>,
    /// Take dropped workers back into the plan when they answer again (their agent, or for a
    /// worker without one its gRPC port); they are probed between steps.
    pub readmit: bool,
}

impl Default for RecoveryOptions {
    /// 3 recoveries, a checkpoint every 5 steps, 30 s for a lost ps to come back, no trace,
    /// seed 1, hung-worker detection as [`HangDetection::default`], dropped workers taken back.
    fn default() -> Self {
        RecoveryOptions {
            max_recoveries: 3,
            checkpoint_every: 5,
            ps_wait: Duration::from_secs(30),
            trace_last: false,
            seed: 1,
            hang: Some(HangDetection::default()),
            readmit: true,
        }
    }
}

/// What a failure left behind, as [`train_recovering`](super::train_recovering) found it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Damage {
    /// Workers of the plan that no longer answer (hung ones included).
    pub(crate) lost_workers: Vec<String>,
    /// Workers of the plan whose agents went silent while a run passed its deadline.
    pub(crate) hung: Vec<String>,
    /// Ps tasks of the plan that did not answer again within the wait.
    pub(crate) gone_ps: Vec<String>,
    /// Ps tasks that stopped answering and came back (without their variables).
    pub(crate) restarted_ps: Vec<String>,
    /// Devices whose variables hold no value in a new session (a ps restarted before the
    /// failure was looked at).
    pub(crate) emptied: Vec<String>,
    /// Whether the new plan puts some variable on another ps than the old one did.
    pub(crate) moved: bool,
    /// Sessions keep their variables to themselves (`isolate_session_state`): a new session
    /// never sees the old one's, so it always needs the checkpoint.
    pub(crate) isolated: bool,
}

impl Damage {
    /// Every lost device, distinct, in order: workers, then ps.
    pub(crate) fn lost(&self) -> Vec<String> {
        let mut lost: Vec<String> = Vec::new();
        for d in self
            .lost_workers
            .iter()
            .chain(&self.gone_ps)
            .chain(&self.restarted_ps)
            .chain(&self.emptied)
        {
            if !lost.contains(d) {
                lost.push(d.clone());
            }
        }
        lost
    }
}

/// What a new session runs before training goes on, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Resume {
    /// Only the new replicas' synthetic batches (`init_data`): the variables survived.
    InitData,
    /// `init`, then the latest checkpoint.
    Restore,
    /// `init` (nothing trained yet), then a first checkpoint.
    Init,
}

/// What to do about a fault: what kind it was and how the new session resumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Action {
    /// The kind of fault, for the report.
    pub(crate) kind: FaultKind,
    /// What the new session runs before training goes on.
    pub(crate) resume: Resume,
}

/// What to do about `damage`, or `None` when nothing was lost (a failure that is not a fault
/// to recover from). When the variables are gone (a ps fault, or isolated sessions) training
/// resumes from the checkpoint; before the first, it starts over.
pub(crate) fn decide(damage: &Damage, has_checkpoint: bool) -> Option<Action> {
    let ps_fault = !damage.gone_ps.is_empty()
        || !damage.restarted_ps.is_empty()
        || !damage.emptied.is_empty()
        || damage.moved;
    let kind = if ps_fault {
        FaultKind::Ps
    } else if !damage.hung.is_empty() {
        FaultKind::Hung
    } else if !damage.lost_workers.is_empty() {
        FaultKind::Worker
    } else {
        return None;
    };
    let resume = if !has_checkpoint {
        Resume::Init
    } else if ps_fault || damage.isolated {
        Resume::Restore
    } else {
        Resume::InitData
    };
    Some(Action { kind, resume })
}

/// How a session that takes dropped workers back resumes: the variables on the ps are intact,
/// so only the replicas' batches are initialised — unless sessions keep their state to
/// themselves (`isolated`), then from the checkpoint; before the first checkpoint, from the
/// start.
pub(crate) fn readmit_resume(isolated: bool, has_checkpoint: bool) -> Resume {
    if !has_checkpoint {
        Resume::Init
    } else if isolated {
        Resume::Restore
    } else {
        Resume::InitData
    }
}

/// The session target after a recovery: `current` while its task answers (an empty,
/// in-process target is kept), else the first of `candidates` (`host:port`) that answers, as
/// `grpc://host:port`; `None` when none does.
pub(crate) fn choose_target(
    current: &str,
    candidates: &[String],
    answers: impl Fn(&str) -> bool,
) -> Option<String> {
    if current.is_empty() || answers(current.strip_prefix("grpc://").unwrap_or(current)) {
        return Some(current.to_string());
    }
    candidates
        .iter()
        .find(|a| answers(a))
        .map(|a| format!("grpc://{a}"))
}

/// The deadline of the next run: `hang`'s, from the median of the last five measured steps,
/// after `retries` retries, at least [`HangDetection::first_runs`] for one of a session's
/// `first` runs; never beyond the session's own run deadline (`run_timeout_ms`, 0: none).
pub(crate) fn run_deadline(
    hang: &HangDetection,
    step_ms: &[f64],
    retries: u32,
    first: bool,
    run_timeout_ms: i64,
) -> Duration {
    let recent = &step_ms[step_ms.len().saturating_sub(5)..];
    let expected = StepTimes::from_samples(recent).map(|s| s.median);
    let mut d = hang.deadline(expected, retries);
    if first {
        d = d.max(hang.first_runs);
    }
    match u64::try_from(run_timeout_ms) {
        Ok(ms) if ms > 0 => d.min(Duration::from_millis(ms)),
        _ => d,
    }
}

/// Whether `e` is a run that passed its deadline (TensorFlow's DEADLINE_EXCEEDED).
pub(crate) fn passed_deadline(e: &Error) -> bool {
    e.tf_code() == Some(TfCode::DeadlineExceeded)
}

#[cfg(test)]
mod tests {
    use super::*;

    const W0: &str = "/job:worker/replica:0/task:0/device:CPU:0";
    const PS0: &str = "/job:ps/replica:0/task:0/device:CPU:0";
    const PS1: &str = "/job:ps/replica:0/task:1/device:CPU:0";

    fn s(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn nothing_lost_is_not_a_fault() {
        assert_eq!(decide(&Damage::default(), true), None);
        assert_eq!(decide(&Damage::default(), false), None);
    }

    #[test]
    fn a_lost_worker_keeps_the_ps_state_and_a_lost_ps_restores_the_checkpoint() {
        let worker = Damage {
            lost_workers: s(&[W0]),
            ..Damage::default()
        };
        assert_eq!(
            decide(&worker, true),
            Some(Action {
                kind: FaultKind::Worker,
                resume: Resume::InitData
            })
        );
        // Stopped answering and came back, never came back, restarted unseen (variables
        // empty in a new session), or variables moved to another ps: all lose the state.
        for ps in [
            Damage {
                restarted_ps: s(&[PS0]),
                ..Damage::default()
            },
            Damage {
                gone_ps: s(&[PS1]),
                ..Damage::default()
            },
            Damage {
                emptied: s(&[PS0]),
                ..Damage::default()
            },
            Damage {
                moved: true,
                ..Damage::default()
            },
            Damage {
                lost_workers: s(&[W0]),
                emptied: s(&[PS0]),
                ..Damage::default()
            },
        ] {
            assert_eq!(
                decide(&ps, true),
                Some(Action {
                    kind: FaultKind::Ps,
                    resume: Resume::Restore
                }),
                "{ps:?}"
            );
            // Before the first checkpoint there is nothing to restore: start over.
            assert_eq!(
                decide(&ps, false),
                Some(Action {
                    kind: FaultKind::Ps,
                    resume: Resume::Init
                }),
                "{ps:?}"
            );
        }
        assert_eq!(
            decide(&worker, false),
            Some(Action {
                kind: FaultKind::Worker,
                resume: Resume::Init
            })
        );
    }

    #[test]
    fn a_pending_restore_outranks_a_later_worker_fault() {
        assert_eq!(Resume::Restore.max(Resume::InitData), Resume::Restore);
        assert_eq!(Resume::Init.max(Resume::Restore), Resume::Init);
    }

    #[test]
    fn lost_devices_are_listed_once() {
        let d = Damage {
            lost_workers: s(&[W0]),
            restarted_ps: s(&[PS0]),
            emptied: s(&[PS0, PS1]),
            ..Damage::default()
        };
        assert_eq!(d.lost(), s(&[W0, PS0, PS1]));
    }

    #[test]
    fn the_master_moves_only_when_it_no_longer_answers() {
        let up = |alive: &'static [&'static str]| move |a: &str| alive.contains(&a);
        let candidates = s(&["10.0.0.2:2222", "10.0.0.3:2222"]);
        assert_eq!(
            choose_target("grpc://10.0.0.1:2222", &candidates, up(&["10.0.0.1:2222"])),
            Some("grpc://10.0.0.1:2222".into())
        );
        assert_eq!(
            choose_target("grpc://10.0.0.1:2222", &candidates, up(&["10.0.0.3:2222"])),
            Some("grpc://10.0.0.3:2222".into())
        );
        assert_eq!(
            choose_target("grpc://10.0.0.1:2222", &candidates, up(&[])),
            None
        );
        assert_eq!(choose_target("", &candidates, up(&[])), Some(String::new()));
    }

    #[test]
    fn a_recovering_run_reports_like_a_plain_one() {
        let plan = DataParallelPlan {
            strategy: "test".into(),
            replicas: vec![],
            variable_devices: BTreeMap::new(),
            global_device: PS0.into(),
            predicted_step_ms: None,
        };
        let mut r = RecoveringReport {
            losses: vec![2.0, 1.9, 1.8, 1.7, 1.6],
            step_ms: vec![900.0, 100.0, 120.0, 110.0, 400.0],
            recoveries: vec![],
            deadline_retries: vec![],
            readmissions: vec![],
            final_plan: plan,
            steps_run: 5,
            checkpoint_ms: vec![],
            checkpoint_bytes: 0,
            executed: BTreeMap::new(),
            mismatches: vec![],
            step_stats: Some(StepStats::default()),
            checkpoint: None,
        };
        // Warm-up and the traced last step are not timed.
        let t = r.train_report(1, 32);
        assert_eq!((t.steps, t.warmup), (4, 1));
        assert_eq!(t.step_ms_all, vec![100.0, 120.0, 110.0]);
        assert_eq!(t.step_ms.median, 110.0);
        assert!((t.images_per_sec - 32.0 / 0.110).abs() < 1e-6);
        assert_eq!((t.loss_first, t.loss_last), (2.0, 1.6));
        r.step_stats = None;
        assert_eq!(r.train_report(4, 32).step_ms_all, vec![400.0]);
    }

    #[test]
    fn a_readmitted_worker_needs_the_checkpoint_only_when_sessions_are_isolated() {
        assert_eq!(readmit_resume(false, true), Resume::InitData);
        assert_eq!(readmit_resume(true, true), Resume::Restore);
        assert_eq!(readmit_resume(false, false), Resume::Init);
    }

    #[test]
    fn only_deadline_exceeded_is_a_passed_deadline() {
        let e = |code| Error::tf("Session::run(x)", code, "Deadline Exceeded");
        assert!(passed_deadline(&e(TfCode::DeadlineExceeded)));
        // The code decides, not the words of the message.
        assert!(!passed_deadline(&e(TfCode::Unavailable)));
        assert!(!passed_deadline(&Error::InvalidArgument {
            what: "deadline".into(),
            reason: "DeadlineExceeded".into()
        }));
    }

    #[test]
    fn a_run_deadline_never_passes_the_sessions_own() {
        let h = HangDetection::default();
        assert_eq!(run_deadline(&h, &[], 0, false, 0), h.floor);
        assert_eq!(run_deadline(&h, &[], 0, true, 0), h.first_runs);
        assert_eq!(
            run_deadline(&h, &[], 0, true, 10_000),
            Duration::from_secs(10)
        );
    }
}
