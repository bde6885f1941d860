//! When a run evaluates, checkpoints, adapts, recovers and stops: [`TrainingOptions`],
//! [`CheckpointOptions`], [`RecoverOptions`].

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use super::job::{Job, Metric};
use super::{bad, OnProgress};
use crate::cluster::tf_config::TfConfig;
use crate::error::{Error, Result};
use crate::runtime::adapt::AdaptOptions;
use crate::runtime::liveness::HangDetection;

/// Epochs a run bounded by its target alone trains at most ([`TrainingOptions::epoch_bound`]):
/// a target that is never reached ends the run there, below the target.
pub const TARGET_EPOCHS_CAP: f64 = 100.0;

/// When to evaluate and when to stop. At least one of `steps`, `epochs`, `max_seconds` and
/// `target` must bound the run; training stops at the first bound reached, or when the held-out
/// metric reaches `target` (a target alone trains at most [`TARGET_EPOCHS_CAP`] epochs).
#[derive(Clone, Debug)]
pub struct TrainingOptions {
    /// Stop after this many updates of the variables.
    pub steps: Option<u64>,
    /// Stop after this many passes over the training set (samples read ÷ rows).
    pub epochs: Option<f64>,
    /// Stop after this many seconds of training (evaluations excluded).
    pub max_seconds: Option<f64>,
    /// Stop when the held-out metric reaches this value (from below for accuracy, from above
    /// for a loss).
    pub target: Option<f64>,
    /// Seconds of training between evaluations (there is always one at the end).
    pub eval_every_s: f64,
    /// Seeds each worker's shuffle.
    pub seed: u64,
    /// Where asynchronous steps are mastered. `Some(tf_config)`: each worker's steps run through
    /// its own server (its address in `tf_config`), as TF2's `ParameterServerStrategy` has each
    /// worker run its own step function, inside the worker's CPU budget; the sessions share the
    /// ps's variables (a session-isolating `config` is kept by putting this run's resources in a
    /// container of their own). `None`: every step through `config.target`, one master for all
    /// workers — except through the door: [`DataParallel::fit`](crate::DataParallel::fit) fills
    /// it from the connection's TF_CONFIG when it is `None` and the strategy is asynchronous, as
    /// `train` does. Synchronous and backup-worker steps always run through `config.target`
    /// (the chief's session, as in TensorFlow's recipes).
    pub own_masters: Option<TfConfig>,
    /// Checkpoints of the training state in TensorFlow's format (`None`: none). A directory that
    /// already holds checkpoints resumes the run from the newest whole one: its updates, variables,
    /// data position, training clock and evaluations carry on, so `steps`, `epochs` and
    /// `max_seconds` bound the whole job, not this process's part of it.
    pub checkpoints: Option<CheckpointOptions>,
    /// A TensorBoard log directory (`None`: no event file): loss, images/s, the held-out metric,
    /// each worker's share and availability, and re-plans, by update.
    pub logdir: Option<PathBuf>,
    /// Called with the progress a few times a second, or after every step
    /// ([`OnProgress::every_step`]) (`None`: nothing is called).
    pub progress: Option<OnProgress>,
    /// Live re-planning between synchronous steps (`None`: none): the workers' live metrics
    /// are read in the background and the replicas' step windows watched, and when a worker's
    /// availability or speed moves beyond these thresholds the plan is made again from the
    /// calibration ([`Contender::replanning`](super::Contender::replanning); `infra-aware` and the synchronous phase of
    /// `infra-aware-async`) and training switches to it between two steps, the variables
    /// carried over ([`TrainingReport::replans`](super::TrainingReport::replans)).
    pub adapt: Option<AdaptOptions>,
    /// Set from anywhere (a signal handler, a progress callback) to end the run after the step
    /// in flight, as if a bound were reached: the final evaluation and checkpoint follow.
    pub stop: Option<Arc<AtomicBool>>,
    /// Training through lost workers and parameter servers on a TF_CONFIG cluster (`None`: a
    /// lost task ends the run with TensorFlow's error): the strategy is re-planned over the
    /// tasks that still answer and training goes on ([`TrainingReport::recoveries`](super::TrainingReport::recoveries)).
    pub recover: Option<RecoverOptions>,
    /// Trace the run's last update when [`TrainingOptions::steps`] bounds it and it is a
    /// synchronous step (FULL_TRACE: what ran where, [`TrainingReport::traced`](super::TrainingReport::traced)).
    pub trace_last: bool,
}

impl Default for TrainingOptions {
    fn default() -> Self {
        TrainingOptions {
            steps: None,
            epochs: Some(1.0),
            max_seconds: None,
            target: None,
            eval_every_s: 5.0,
            seed: 1,
            own_masters: None,
            checkpoints: None,
            logdir: None,
            progress: None,
            adapt: None,
            stop: None,
            recover: None,
            trace_last: false,
        }
    }
}

impl TrainingOptions {
    /// Checks that every option is in range and that something bounds the run.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the option.
    pub fn validate(&self) -> Result<()> {
        if self.steps.is_none()
            && self.epochs.is_none()
            && self.max_seconds.is_none()
            && self.target.is_none()
        {
            return Err(bad(
                "training length",
                "give steps, epochs, a time limit or a target".into(),
            ));
        }
        if self.steps == Some(0) || self.steps.is_some_and(|s| s > 1 << 40) {
            return Err(bad("steps", "must be in 1..=2^40".into()));
        }
        if let Some(e) = self.epochs {
            if !(e > 0.0 && e <= 1e6) {
                return Err(bad("epochs", format!("{e} is not in (0, 1e6]")));
            }
        }
        if let Some(t) = self.max_seconds {
            if !(t > 0.0 && t <= 7.0 * 86_400.0) {
                return Err(bad(
                    "training time limit",
                    format!("{t} s is not in (0, one week]"),
                ));
            }
        }
        if let Some(t) = self.target {
            if !t.is_finite() {
                return Err(bad("target", format!("{t} is not a finite number")));
            }
        }
        if !(self.eval_every_s > 0.0 && self.eval_every_s <= 86_400.0) {
            return Err(bad(
                "evaluation interval",
                format!("{} s is not in (0, one day]", self.eval_every_s),
            ));
        }
        if let Some(c) = &self.checkpoints {
            c.validate()?;
        }
        if let Some(r) = &self.recover {
            r.validate()?;
        }
        Ok(())
    }

    /// Checks that the checkpoint folder and the log folder can be used, before any work starts
    /// (a training run that ends on a file where its folder should be loses its work): each is
    /// an existing folder that takes new files, or can be created under one. Nothing is created.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the folder and what is in its place (a regular file, a
    /// FIFO, a device), or the folder that takes no new files.
    pub fn check_outputs(&self) -> Result<()> {
        if let Some(c) = &self.checkpoints {
            crate::data::io::check_output_dir(&c.dir, "checkpoint folder")?;
        }
        if let Some(dir) = &self.logdir {
            crate::data::io::check_output_dir(dir, "log folder")?;
        }
        Ok(())
    }

    /// The epochs that bound the run: `epochs`, or [`TARGET_EPOCHS_CAP`] when the target
    /// alone bounds it (no steps, epochs or time limit), else `None`.
    pub fn epoch_bound(&self) -> Option<f64> {
        let target_alone =
            self.target.is_some() && self.steps.is_none() && self.max_seconds.is_none();
        self.epochs.or(target_alone.then_some(TARGET_EPOCHS_CAP))
    }

    /// [`TrainingOptions::validate`], and the target against what `job` measures: a held-out
    /// accuracy target must be in (0, 1], a loss target (reached from above) above 0, and a
    /// target needs a held-out set to be measured on — else it could never be reached.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the option.
    pub fn validate_for(&self, job: &Job) -> Result<()> {
        self.validate()?;
        let Some(t) = self.target else {
            return Ok(());
        };
        match job.metric() {
            None => Err(bad(
                "target",
                format!("{t} cannot be reached: the job has no held-out set to measure it on"),
            )),
            Some(Metric::Accuracy { .. }) if !(t > 0.0 && t <= 1.0) => Err(bad(
                "target",
                format!("a held-out accuracy of {t} is not in (0, 1]"),
            )),
            Some(Metric::Scalar {
                tensor,
                higher_is_better: false,
            }) if t <= 0.0 => Err(bad(
                "target",
                format!("a held-out {tensor} of {t} (reached from above) is not above 0"),
            )),
            _ => Ok(()),
        }
    }
}

/// Seconds of training between checkpoints unless told otherwise (TensorFlow's
/// `MonitoredTrainingSession` takes 600; a crash should cost a minute, and a checkpoint of a
/// model of a few million parameters takes well under a second).
pub const DEFAULT_CHECKPOINT_EVERY_S: f64 = 60.0;
/// Checkpoints kept unless told otherwise (`tf.train.Saver`'s `max_to_keep`).
pub const DEFAULT_KEEP: usize = 5;
/// Where and how often a run writes its checkpoints.
#[derive(Clone, Debug)]
pub struct CheckpointOptions {
    /// The checkpoint directory, on the driver's own disk (created if missing). A run started
    /// with a directory that holds checkpoints resumes from the newest whole one.
    pub dir: PathBuf,
    /// Updates between checkpoints (`None`: not by updates).
    pub every_steps: Option<u64>,
    /// Training seconds between checkpoints (`None`: not by time). Whichever of the two is due
    /// first takes the checkpoint; there is always one at the end.
    pub every_seconds: Option<f64>,
    /// Checkpoints kept: older ones are deleted (at least 1).
    pub keep: usize,
}

impl CheckpointOptions {
    /// Checkpoints in `dir` every [`DEFAULT_CHECKPOINT_EVERY_S`] seconds, the last
    /// [`DEFAULT_KEEP`] kept.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        CheckpointOptions {
            dir: dir.into(),
            every_steps: None,
            every_seconds: Some(DEFAULT_CHECKPOINT_EVERY_S),
            keep: DEFAULT_KEEP,
        }
    }

    /// Checks the interval and the number kept.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the option.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str, reason: String| Error::InvalidArgument {
            what: what.into(),
            reason,
        };
        if self.every_steps == Some(0) || self.every_steps.is_some_and(|s| s > 1 << 40) {
            return Err(bad(
                "checkpoint interval",
                "must be 1..=2^40 updates".into(),
            ));
        }
        if let Some(s) = self.every_seconds {
            if !(s > 0.0 && s <= 7.0 * 86_400.0) {
                return Err(bad(
                    "checkpoint interval",
                    format!("{s} s is not in (0, one week]"),
                ));
            }
        }
        if !(1..=1_000_000).contains(&self.keep) {
            return Err(bad(
                "checkpoints kept",
                format!("{} is not in 1..=1000000", self.keep),
            ));
        }
        Ok(())
    }
}

/// How a run survives lost tasks.
#[derive(Clone, Debug, PartialEq)]
pub struct RecoverOptions {
    /// Recoveries before a failure ends the run (default 3).
    pub max_recoveries: usize,
    /// Updates between the driver's in-memory copies of the variables (default 50): at most
    /// this many updates are trained again after a parameter server is lost.
    pub every_updates: u64,
    /// How long a parameter server that stopped answering is waited for (a cluster manager
    /// restarting it at its address) before its variables are re-planned onto the others
    /// (default 10 s).
    pub ps_wait: Duration,
    /// Deadlines of synchronous steps, so that a hung worker (stopped, swapped out: its port
    /// answers, its agent does not) is found within a few steps' time rather than at the
    /// session's run deadline: max(`floor`, `factor` × the median of the last steps), at least
    /// `first_runs` for a session's first steps, doubled for each retry of a step whose
    /// deadline passed while every task answered (at most `max_retries`; the session's own
    /// deadline caps it).
    pub hang: HangDetection,
}

impl Default for RecoverOptions {
    fn default() -> Self {
        RecoverOptions {
            max_recoveries: 3,
            every_updates: 50,
            ps_wait: Duration::from_secs(10),
            hang: HangDetection::default(),
        }
    }
}

impl RecoverOptions {
    /// Checks the options.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the option.
    pub fn validate(&self) -> Result<()> {
        if self.every_updates == 0 || self.every_updates > 1 << 40 {
            return Err(bad(
                "recovery interval",
                format!("{} updates is not in 1..=2^40", self.every_updates),
            ));
        }
        if self.ps_wait > Duration::from_secs(3_600) {
            return Err(bad(
                "parameter-server wait",
                format!("{:?} is more than an hour", self.ps_wait),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_options_out_of_range_are_refused() {
        let ok = CheckpointOptions::new("/tmp/x");
        assert!(ok.validate().is_ok());
        for bad in [
            CheckpointOptions {
                every_steps: Some(0),
                ..ok.clone()
            },
            CheckpointOptions {
                every_seconds: Some(f64::NAN),
                ..ok.clone()
            },
            CheckpointOptions {
                every_seconds: Some(-1.0),
                ..ok.clone()
            },
            CheckpointOptions {
                keep: 0,
                ..ok.clone()
            },
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains("checkpoint"), "{e}");
        }
    }

    #[test]
    fn recovery_options_out_of_range_are_refused() {
        assert!(RecoverOptions::default().validate().is_ok());
        for (bad, named) in [
            (
                RecoverOptions {
                    every_updates: 0,
                    ..RecoverOptions::default()
                },
                "recovery interval",
            ),
            (
                RecoverOptions {
                    ps_wait: Duration::from_secs(7_200),
                    ..RecoverOptions::default()
                },
                "parameter-server wait",
            ),
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains(named), "{e}");
            // And through the training options.
            let options = TrainingOptions {
                recover: Some(bad),
                ..TrainingOptions::default()
            };
            assert!(options.validate().is_err());
        }
    }
}
