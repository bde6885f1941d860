//! When a run evaluates, checkpoints, adapts and stops: [`TrainingOptions`].

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::{CheckpointOptions, OnProgress};
#[cfg(doc)]
use super::{Contender, TrainingReport};
use crate::cluster::tf_config::TfConfig;
use crate::error::{Error, Result};
use crate::runtime::adapt::AdaptOptions;

/// When to evaluate and when to stop. At least one of `steps`, `epochs` and `max_seconds` must
/// bound the run; training stops at the first bound reached, or when the held-out metric
/// reaches `target`.
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
    /// workers. Synchronous and backup-worker steps always run through `config.target` (the
    /// chief's session, as in TensorFlow's recipes).
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
    /// calibration ([`Contender::replanning`]; `infra-aware` and the synchronous phase of
    /// `infra-aware-async`) and training switches to it between two steps, the variables
    /// carried over ([`TrainingReport::replans`]).
    pub adapt: Option<AdaptOptions>,
    /// Set from anywhere (a signal handler, a progress callback) to end the run after the step
    /// in flight, as if a bound were reached: the final evaluation and checkpoint follow.
    pub stop: Option<Arc<AtomicBool>>,
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
        }
    }
}

pub(super) fn bad(what: &str, reason: String) -> Error {
    Error::InvalidArgument {
        what: what.into(),
        reason,
    }
}

impl TrainingOptions {
    /// Checks that every option is in range and that something bounds the run.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the option.
    pub fn validate(&self) -> Result<()> {
        if self.steps.is_none() && self.epochs.is_none() && self.max_seconds.is_none() {
            return Err(bad(
                "training length",
                "give steps, epochs or a time limit (a target alone may never be reached)".into(),
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
        Ok(())
    }
}
