//! [`TrainState`]: what the trainer needs besides the variables to continue a run where a
//! checkpoint left it, saved as a small JSON file inside each checkpoint.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Version of the [`TrainState`] JSON layout; a file of a later version is refused.
pub const TRAIN_STATE_FORMAT: u32 = 1;

/// The trainer's state at a checkpoint: step, position in the data and the plan it ran under.
/// The variables (weights and optimiser slots) are in the checkpoint's tensors, not here.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainState {
    /// Layout version ([`TRAIN_STATE_FORMAT`]).
    pub format: u32,
    /// Global training steps completed when the checkpoint was taken.
    pub global_step: u64,
    /// Passes over the training data completed (0 during the first).
    pub epoch: u64,
    /// Examples of the current epoch already consumed (where the data resumes).
    pub position: u64,
    /// Examples consumed since the run began, all epochs.
    pub examples_seen: u64,
    /// Seconds spent training so far, over every run that led to this checkpoint (restarts not
    /// counted).
    pub train_seconds: f64,
    /// When the checkpoint was written, seconds since the Unix epoch.
    pub saved_unix_s: f64,
    /// The plan the steps ran under (`None`: a single-device run).
    pub plan: Option<PlanState>,
    /// Anything else the trainer keeps (a data seed, a learning-rate schedule's state), by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// The data-parallel plan of the steps before a checkpoint. A resumed run re-plans for the
/// cluster it finds; this says what the previous one ran.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanState {
    /// Strategy name (`proportional`, `uniform`, …).
    pub strategy: String,
    /// Global batch, examples per step.
    pub global_batch: u64,
    /// Each worker's share of the global batch.
    pub shares: Vec<WorkerShare>,
    /// Re-plans made so far (a worker lost, or its availability changed).
    pub replans: u64,
}

/// One worker's share of the global batch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerShare {
    /// The worker (`/job:worker/task:1`, or a name the trainer uses).
    pub worker: String,
    /// Examples of each global batch it computes.
    pub examples: u64,
}

impl TrainState {
    /// A state after `global_step` steps, in the current layout, everything else zero.
    pub fn at_step(global_step: u64) -> Self {
        TrainState {
            format: TRAIN_STATE_FORMAT,
            global_step,
            ..TrainState::default()
        }
    }

    /// The state as pretty JSON.
    ///
    /// # Errors
    /// [`Error::Json`] if a value of `extra` cannot be written (never for plain JSON values).
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).map_err(|source| Error::Json {
            what: "train state".into(),
            source,
        })
    }

    /// Reads a state written by [`TrainState::to_json`]; `what` names the file in errors.
    ///
    /// # Errors
    /// [`Error::Json`] if the text is not a train state; [`Error::InvalidArgument`] if it was
    /// written in a later layout than this build reads.
    pub fn from_json(text: &str, what: &str) -> Result<Self> {
        let state: TrainState = serde_json::from_str(text).map_err(|source| Error::Json {
            what: what.to_string(),
            source,
        })?;
        if state.format > TRAIN_STATE_FORMAT {
            return Err(Error::InvalidArgument {
                what: what.to_string(),
                reason: format!(
                    "train state format {} is newer than this build reads ({TRAIN_STATE_FORMAT})",
                    state.format
                ),
            });
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_train_state_round_trips_through_json() {
        let mut s = TrainState::at_step(1200);
        s.epoch = 3;
        s.position = 640;
        s.plan = Some(PlanState {
            strategy: "proportional".into(),
            global_batch: 64,
            shares: vec![
                WorkerShare {
                    worker: "/job:worker/task:0".into(),
                    examples: 40,
                },
                WorkerShare {
                    worker: "/job:worker/task:1".into(),
                    examples: 24,
                },
            ],
            replans: 1,
        });
        s.extra.insert("seed".into(), serde_json::json!(7));
        let back = TrainState::from_json(&s.to_json().unwrap(), "t").unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn a_later_layout_or_broken_json_is_refused_naming_the_file() {
        let err = TrainState::from_json(r#"{"format": 99}"#, "d/state.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("d/state.json") && err.contains("99"), "{err}");
        let err = TrainState::from_json("{", "d/state.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("d/state.json"), "{err}");
    }
}
