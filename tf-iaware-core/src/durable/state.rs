//! [`TrainState`]: what the trainer needs besides the variables to continue a run where a
//! checkpoint left it, saved as a small JSON file inside each checkpoint.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Version of the [`TrainState`] JSON layout; a file of a later version is refused.
pub const TRAIN_STATE_FORMAT: u32 = 1;

/// Largest step a saved state may hold (2^40, a thousand times more updates than any run
/// makes): a larger one is refused ([`TrainState::check`]).
pub const MAX_STEP: u64 = 1 << 40;
/// Most samples a saved state may count (2^52: sums of them stay exact in an `f64`).
pub const MAX_SAMPLES: u64 = 1 << 52;
/// Most training seconds a saved state may count (a year).
pub const MAX_TRAIN_SECONDS: f64 = 365.0 * 86_400.0;
/// Largest `train_state.json` read (64 MiB: a week of evaluations every second fits).
pub const MAX_STATE_BYTES: u64 = 64 << 20;

/// The keys of [`TrainState::extra`] the trainer writes, and [`TrainState::check`] checks when
/// present.
pub mod extra {
    /// The data seed (`u64`): positions carry over only under the same seed.
    pub const SEED: &str = "seed";
    /// Samples the synchronous steps' sampler handed out (`u64`, at most `examples_seen`).
    pub const SYNC_SAMPLES: &str = "sync_samples";
    /// Samples each asynchronous worker's sampler handed out (device → `u64`).
    pub const WORKER_SAMPLES: &str = "worker_samples";
    /// The evaluations so far (`seconds`, `epoch`, `updates`, `metric` each).
    pub const EVALUATIONS: &str = "evaluations";
    /// Training seconds at which the target was reached.
    pub const REACHED_AT: &str = "reached_at_s";
    /// Loss of the first step.
    pub const LOSS_FIRST: &str = "loss_first";
    /// The strategy the steps ran under.
    pub const STRATEGY: &str = "strategy";
}

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

/// How far past `train_seconds` an evaluation's time may lie (a resumed clock is rounded to the
/// nanosecond).
const SLACK_S: f64 = 1e-3;

/// A field of a state that [`TrainState::check`] refuses.
fn refuse(path: &Path, field: &str, reason: String) -> Error {
    Error::CheckpointState {
        path: path.to_path_buf(),
        field: field.to_string(),
        reason,
    }
}

/// `Ok` if `v` is finite and within `0..=max` (seconds, an epoch).
fn in_range(path: &Path, field: &str, v: f64, max: f64) -> Result<()> {
    if v.is_finite() && (0.0..=max).contains(&v) {
        Ok(())
    } else {
        Err(refuse(
            path,
            field,
            format!("is {v}, not a number from 0 to {max}"),
        ))
    }
}

/// `Ok` if `v` is at most `max`; `of` says what `max` is.
fn at_most(path: &Path, field: &str, v: u64, max: u64, of: &str) -> Result<()> {
    if v <= max {
        Ok(())
    } else {
        Err(refuse(
            path,
            field,
            format!("is {v}, more than {of} ({max})"),
        ))
    }
}

impl TrainState {
    /// Checks every figure of a state read from disk before a run trusts it: `step` is the
    /// step of the checkpoint it was found in (its folder's name), `path` names the file in
    /// errors. The layout is one this build wrote (`format` 1, so `{}` is refused); the step is
    /// the checkpoint's and at most [`MAX_STEP`]; the counts at most [`MAX_SAMPLES`]; the seconds
    /// finite, non-negative and at most [`MAX_TRAIN_SECONDS`]; the plan's global batch the sum
    /// of its shares; and, where the trainer's [`extra`] keys are present (a state the trainer
    /// wrote), each of the right type and consistent: the epoch and position within the samples
    /// read, every update reading at least one sample (`examples_seen` ≥ `global_step`), each
    /// sampler's position at most the samples read, every evaluation within the run so far.
    ///
    /// # Errors
    /// [`Error::CheckpointState`] naming `path`, the field and what is wrong with it.
    pub fn check(&self, step: u64, path: &Path) -> Result<()> {
        if self.format == 0 {
            return Err(refuse(
                path,
                "format",
                "is missing: not a train state tf-iaware wrote".into(),
            ));
        }
        at_most(
            path,
            "global_step",
            self.global_step,
            MAX_STEP,
            "the most a state may hold",
        )?;
        if self.global_step != step {
            return Err(refuse(
                path,
                "global_step",
                format!(
                    "is {} but the checkpoint is of step {step}",
                    self.global_step
                ),
            ));
        }
        let samples = self.examples_seen;
        at_most(
            path,
            "examples_seen",
            samples,
            MAX_SAMPLES,
            "the most a state may count",
        )?;
        let max = MAX_SAMPLES;
        at_most(path, "epoch", self.epoch, max, "the most a state may count")?;
        at_most(
            path,
            "position",
            self.position,
            max,
            "the most a state may count",
        )?;
        in_range(path, "train_seconds", self.train_seconds, MAX_TRAIN_SECONDS)?;
        in_range(path, "saved_unix_s", self.saved_unix_s, 1e11)?;
        if let Some(plan) = &self.plan {
            let n = plan.shares.len() as u64;
            at_most(
                path,
                "plan.shares",
                n,
                crate::limits::MAX_WORKERS as u64,
                "the most workers",
            )?;
            let sum = plan.shares.iter().try_fold(0u64, |a, s| {
                let max = crate::limits::MAX_BATCH as u64;
                at_most(
                    path,
                    "plan.shares[].examples",
                    s.examples,
                    max,
                    "the largest batch",
                )?;
                Ok::<u64, Error>(a + s.examples)
            })?;
            if !plan.shares.is_empty() && sum != plan.global_batch {
                return Err(refuse(
                    path,
                    "plan.global_batch",
                    format!("is {} but its shares add up to {sum}", plan.global_batch),
                ));
            }
            at_most(
                path,
                "plan.replans",
                plan.replans,
                MAX_STEP,
                "the most a state may hold",
            )?;
        }
        self.check_extra(path)
    }

    /// The trainer's [`extra`] keys of [`TrainState::check`].
    fn check_extra(&self, path: &Path) -> Result<()> {
        let samples = self.examples_seen;
        let field = |k: &str| format!("extra.{k}");
        let count = |k: &str, v: &serde_json::Value| -> Result<u64> {
            let n = v
                .as_u64()
                .ok_or_else(|| refuse(path, &field(k), format!("is {v}, not a count")))?;
            at_most(
                path,
                &field(k),
                n,
                samples,
                "the samples read (examples_seen)",
            )?;
            Ok(n)
        };
        let get = |k: &str| self.extra.get(k);
        if let Some(v) = get(extra::SEED) {
            if !v.is_u64() {
                return Err(refuse(
                    path,
                    &field(extra::SEED),
                    format!("is {v}, not a seed"),
                ));
            }
            // Written by the trainer: the epoch and position are of the samples read, and each
            // update read at least one sample.
            at_most(path, "epoch", self.epoch, samples, "the samples read")?;
            at_most(path, "position", self.position, samples, "the samples read")?;
            if samples < self.global_step {
                return Err(refuse(
                    path,
                    "examples_seen",
                    format!(
                        "is {samples}, fewer than the {} updates (each reads a sample)",
                        self.global_step
                    ),
                ));
            }
        }
        if let Some(v) = get(extra::SYNC_SAMPLES) {
            count(extra::SYNC_SAMPLES, v)?;
        }
        if let Some(v) = get(extra::WORKER_SAMPLES) {
            let map = v.as_object().ok_or_else(|| {
                refuse(
                    path,
                    &field(extra::WORKER_SAMPLES),
                    "is not a map of counts".into(),
                )
            })?;
            for (worker, n) in map {
                count(&format!("{}.{worker}", extra::WORKER_SAMPLES), n)?;
            }
        }
        if let Some(v) = get(extra::REACHED_AT) {
            let x = v.as_f64().unwrap_or(f64::NAN);
            in_range(
                path,
                &field(extra::REACHED_AT),
                x,
                self.train_seconds + SLACK_S,
            )?;
        }
        // A loss is a number, or `null` where it was not finite.
        if let Some(v) = get(extra::LOSS_FIRST).filter(|v| !v.is_null()) {
            if !v.as_f64().is_some_and(f64::is_finite) {
                return Err(refuse(
                    path,
                    &field(extra::LOSS_FIRST),
                    format!("is {v}, not a loss"),
                ));
            }
        }
        if let Some(v) = get(extra::STRATEGY) {
            if !v.is_string() {
                return Err(refuse(
                    path,
                    &field(extra::STRATEGY),
                    format!("is {v}, not a name"),
                ));
            }
        }
        if let Some(v) = get(extra::EVALUATIONS) {
            self.check_evaluations(path, v)?;
        }
        Ok(())
    }

    /// Each evaluation of `extra.evaluations` lies within the run so far.
    fn check_evaluations(&self, path: &Path, v: &serde_json::Value) -> Result<()> {
        let name = format!("extra.{}", extra::EVALUATIONS);
        let list = v
            .as_array()
            .ok_or_else(|| refuse(path, &name, "is not a list".into()))?;
        for (i, e) in list.iter().enumerate() {
            let f = |k: &str| format!("{name}[{i}].{k}");
            let num = |k: &str| {
                e.get(k)
                    .and_then(serde_json::Value::as_f64)
                    .unwrap_or(f64::NAN)
            };
            in_range(
                path,
                &f("seconds"),
                num("seconds"),
                self.train_seconds + SLACK_S,
            )?;
            in_range(path, &f("epoch"), num("epoch"), MAX_SAMPLES as f64)?;
            // Not against `global_step`: a recovery from the driver's copy may have set the
            // updates back below an evaluation's.
            let updates = e.get("updates").and_then(serde_json::Value::as_u64);
            let updates =
                updates.ok_or_else(|| refuse(path, &f("updates"), "is not a count".into()))?;
            at_most(
                path,
                &f("updates"),
                updates,
                MAX_STEP,
                "the most a state may hold",
            )?;
        }
        Ok(())
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

    /// A state as the trainer writes it: step 10, 320 samples, its extra keys.
    fn written() -> TrainState {
        let mut s = TrainState::at_step(10);
        s.examples_seen = 320;
        s.epoch = 3;
        s.position = 20;
        s.train_seconds = 4.5;
        s.saved_unix_s = 1.7e9;
        s.plan = Some(PlanState {
            strategy: "replica-setter".into(),
            global_batch: 32,
            shares: vec![
                WorkerShare {
                    worker: "w0".into(),
                    examples: 16,
                },
                WorkerShare {
                    worker: "w1".into(),
                    examples: 16,
                },
            ],
            replans: 0,
        });
        let json = serde_json::json!({
            "seed": 1,
            "strategy": "replica-setter",
            "sync_samples": 320,
            "worker_samples": {"w0": 0},
            "evaluations": [{"seconds": 4.0, "epoch": 3.2, "updates": 10, "metric": 0.5}],
            "reached_at_s": 4.0,
            "loss_first": 2.3,
        });
        s.extra = serde_json::from_value(json).unwrap();
        s
    }

    /// The field `check` names for `s` at step 10, `None` if it passes.
    fn refused(s: &TrainState) -> Option<String> {
        match s.check(10, Path::new("ck/ckpt-10/train_state.json")) {
            Ok(()) => None,
            Err(Error::CheckpointState { field, path, .. }) => {
                assert_eq!(path, Path::new("ck/ckpt-10/train_state.json"));
                Some(field)
            }
            Err(other) => panic!("another error: {other}"),
        }
    }

    #[test]
    fn a_state_the_trainer_writes_passes_and_a_hand_made_one_too() {
        assert_eq!(refused(&written()), None);
        let back = TrainState::from_json(&written().to_json().unwrap(), "t").unwrap();
        assert_eq!(refused(&back), None);
        // A library user's state: no trainer keys, no samples.
        assert_eq!(refused(&TrainState::at_step(10)), None);
        // A loss that was not finite is written as `null`.
        let mut s = written();
        s.extra
            .insert(extra::LOSS_FIRST.into(), serde_json::Value::Null);
        assert_eq!(refused(&s), None);
    }

    #[test]
    fn every_figure_out_of_range_is_refused_naming_its_field() {
        type Edit = fn(&mut TrainState);
        let cases: Vec<(&str, Edit)> = vec![
            ("format", |s| s.format = 0),
            ("global_step", |s| s.global_step = 0),
            ("global_step", |s| s.global_step = u64::MAX),
            ("examples_seen", |s| s.examples_seen = u64::MAX),
            // Each update reads at least one sample.
            ("examples_seen", |s| {
                s.examples_seen = 5;
                s.epoch = 0;
                s.position = 5;
                s.extra.insert("sync_samples".into(), 5.into());
            }),
            ("epoch", |s| s.epoch = 321),
            ("position", |s| s.position = 1 << 60),
            ("train_seconds", |s| s.train_seconds = 1e300),
            ("train_seconds", |s| s.train_seconds = -1.0),
            ("train_seconds", |s| s.train_seconds = f64::NAN),
            ("train_seconds", |s| s.train_seconds = f64::INFINITY),
            ("saved_unix_s", |s| s.saved_unix_s = -5.0),
            ("plan.global_batch", |s| {
                s.plan.as_mut().unwrap().global_batch = 1 << 40;
            }),
            ("plan.shares[].examples", |s| {
                s.plan.as_mut().unwrap().shares[0].examples = u64::MAX;
            }),
            ("plan.replans", |s| {
                s.plan.as_mut().unwrap().replans = u64::MAX
            }),
            ("extra.sync_samples", |s| {
                s.extra
                    .insert("sync_samples".into(), 1_000_000_000_000_000u64.into());
            }),
            ("extra.sync_samples", |s| {
                s.extra.insert("sync_samples".into(), (-1).into());
            }),
            ("extra.sync_samples", |s| {
                s.extra.insert("sync_samples".into(), "10".into());
            }),
            ("extra.worker_samples.w0", |s| {
                s.extra
                    .insert("worker_samples".into(), serde_json::json!({"w0": 1e18}));
            }),
            ("extra.worker_samples", |s| {
                s.extra.insert("worker_samples".into(), 3.into());
            }),
            ("extra.seed", |s| {
                s.extra.insert("seed".into(), (-3).into());
            }),
            ("extra.strategy", |s| {
                s.extra.insert("strategy".into(), 3.into());
            }),
            ("extra.reached_at_s", |s| {
                s.extra.insert("reached_at_s".into(), 1e9.into());
            }),
            ("extra.loss_first", |s| {
                s.extra.insert("loss_first".into(), "x".into());
            }),
            ("extra.evaluations", |s| {
                s.extra.insert("evaluations".into(), 1.into());
            }),
            ("extra.evaluations[0].seconds", |s| {
                s.extra.insert(
                    "evaluations".into(),
                    serde_json::json!([{"seconds": 1e12, "epoch": 0, "updates": 1}]),
                );
            }),
            ("extra.evaluations[0].updates", |s| {
                s.extra.insert(
                    "evaluations".into(),
                    serde_json::json!([{"seconds": 1, "epoch": 0, "updates": -1}]),
                );
            }),
        ];
        for (field, edit) in cases {
            let mut s = written();
            edit(&mut s);
            assert_eq!(refused(&s).as_deref(), Some(field), "{s:?}");
        }
        // `{}` parses (every field has a default) and is refused.
        let empty = TrainState::from_json("{}", "t").unwrap();
        assert_eq!(refused(&empty).as_deref(), Some("format"));
        let e = written().check(11, Path::new("p")).unwrap_err().to_string();
        assert!(e.contains("is 10 but the checkpoint is of step 11"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn any_json_parses_and_checks_or_is_refused(text in ".{0,300}", step in 0u64..20) {
            if let Ok(s) = TrainState::from_json(&text, "f") {
                let _ = s.check(step, Path::new("f"));
            }
        }
    }
}
