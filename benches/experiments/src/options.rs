//! What a benchmark run is asked to do (the CLI's `bench` flags, typed), checked before any
//! cluster starts: an absurd option should cost an error, not a cluster, a calibration and a run
//! that never ends.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;
use tf_iaware::parallel::DataParallelStrategy;
use tf_iaware::placer::OpPlacementStrategy;
use tf_iaware::runtime::limits::{MAX_BATCH, MAX_STEPS};
use tf_iaware::sim::scale::Planner;
use tf_iaware_emulate::Scenario;

use crate::error::{Error, Result};

/// The model trained.
#[derive(Clone, Debug, PartialEq)]
pub enum Model {
    /// A zoo model by name (`resnet20`, `mlp`, …).
    Zoo(String),
    /// A training GraphDef of the user's own, replicated data-parallel.
    Graph {
        /// The GraphDef.
        path: PathBuf,
        /// Its sidecar; `None`: the `.json` next to it.
        meta: Option<PathBuf>,
    },
}

/// The training data.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// A fixed random batch per worker: images/s of the model.
    Synthetic,
    /// The built-in 8×8 handwritten digits, trained to a held-out accuracy.
    Digits,
    /// A data file of the user's own (`.npy`, `.npz`, TFRecord, or a folder of them).
    File(PathBuf),
}

impl Data {
    /// `synthetic`, `digits`, else a path.
    pub fn parse(text: &str) -> Data {
        match text {
            "synthetic" => Data::Synthetic,
            "digits" => Data::Digits,
            path => Data::File(PathBuf::from(path)),
        }
    }
}

impl fmt::Display for Data {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Data::Synthetic => f.write_str("synthetic"),
            Data::Digits => f.write_str("digits"),
            Data::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Where asynchronous contenders' steps are mastered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum AsyncMasters {
    /// Each worker's own server, as TF2's ParameterServerStrategy.
    #[default]
    Own,
    /// Every step through the session target (ps 0), as TF1 asynchronous replication.
    Shared,
}

/// The strategies a run takes by default: `replica-setter`, `infra-aware` (data-parallel) and
/// `heft` (per op). A time-to-accuracy run given exactly these runs every data-parallel
/// contender instead.
pub fn default_strategies() -> Vec<Planner> {
    vec![
        Planner::DataParallel(DataParallelStrategy::ReplicaSetter),
        Planner::DataParallel(DataParallelStrategy::InfraAware),
        Planner::PerOp(OpPlacementStrategy::Heft),
    ]
}

/// A benchmark on an emulated cluster (the `bench` command's flags, typed).
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// The emulated cluster.
    pub scenario: Scenario,
    /// The model trained.
    pub model: Model,
    /// Strategies: data-parallel ones and per-op ones over the workers.
    pub strategies: Vec<Planner>,
    /// Timed steps per strategy (split over the repeats).
    pub steps: usize,
    /// Untimed warm-up steps per strategy.
    pub warmup: usize,
    /// Rounds the strategies take turns in.
    pub repeats: usize,
    /// Global batch per step, samples.
    pub batch: usize,
    /// Samples of the "time to train" column.
    pub samples: usize,
    /// Drop the cached worker calibration and measure again.
    pub recalibrate: bool,
    /// Training data; anything but [`Data::Synthetic`] measures time to accuracy.
    pub data: Data,
    /// Held-out accuracy each contender trains to, 0–1.
    pub target_accuracy: f64,
    /// Seconds of training between evaluations.
    pub eval_every_s: f64,
    /// Seconds of training after which a contender gives up.
    pub max_train_s: f64,
    /// Share of the rows held out for evaluation, 0–1 (when no `held_out_data`).
    pub held_out: f64,
    /// A held-out data file of the user's own.
    pub held_out_data: Option<PathBuf>,
    /// Backup workers of `sync-backup` among the default contenders.
    pub backup_workers: usize,
    /// LB-BSP re-sizing interval of `infra-aware`, steps (0: never).
    pub resize_every: usize,
    /// Where asynchronous contenders' steps are mastered.
    pub async_masters: AsyncMasters,
    /// The `tf-iaware` binary whose `worker` subcommand the emulated cluster runs.
    pub worker_exe: PathBuf,
}

impl BenchOptions {
    /// The defaults of `tf-iaware bench` on `scenario`, with workers from `worker_exe`.
    pub fn new(scenario: Scenario, worker_exe: PathBuf) -> BenchOptions {
        BenchOptions {
            scenario,
            model: Model::Zoo("resnet20".into()),
            strategies: default_strategies(),
            steps: 8,
            warmup: 2,
            repeats: 2,
            batch: 64,
            samples: 50_000,
            recalibrate: false,
            data: Data::Synthetic,
            target_accuracy: 0.9,
            eval_every_s: 2.0,
            max_train_s: 300.0,
            held_out: 0.2,
            held_out_data: None,
            backup_workers: 1,
            resize_every: 4,
            async_masters: AsyncMasters::Own,
            worker_exe,
        }
    }

    /// Checks the numbers against their documented ranges.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] naming the option (as the CLI's flag).
    pub fn check(&self) -> Result<()> {
        let invalid = |option, value: usize, reason: String| {
            Err(Error::InvalidOption {
                option,
                value: value.to_string(),
                reason,
            })
        };
        if !(1..=MAX_STEPS).contains(&self.steps) {
            return invalid("--steps", self.steps, format!("must be 1 to {MAX_STEPS}"));
        }
        if self.warmup > MAX_STEPS {
            return invalid(
                "--warmup",
                self.warmup,
                format!("warm-up steps must be at most {MAX_STEPS}"),
            );
        }
        if !(1..=self.steps).contains(&self.repeats) {
            return invalid(
                "--repeats",
                self.repeats,
                format!(
                    "must be 1 to --steps ({}), each round timing at least one step",
                    self.steps
                ),
            );
        }
        if !(1..=MAX_BATCH).contains(&self.batch) {
            return invalid(
                "--batch",
                self.batch,
                format!("the global batch must be 1 to {MAX_BATCH}"),
            );
        }
        if self.samples == 0 {
            return invalid(
                "--samples",
                0,
                "the \"time to train\" column needs at least 1 sample".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> BenchOptions {
        let scenario = Scenario::parse("paper").expect("a built-in scenario");
        BenchOptions::new(scenario, PathBuf::from("tf-iaware"))
    }

    fn option_of(o: &BenchOptions) -> Option<&'static str> {
        match o.check() {
            Err(Error::InvalidOption { option, .. }) => Some(option),
            _ => None,
        }
    }

    #[test]
    fn defaults_pass() {
        assert!(options().check().is_ok());
    }

    #[test]
    fn each_bad_number_names_its_option() {
        type Break = fn(&mut BenchOptions);
        let cases: [(&str, Break); 6] = [
            ("--steps", |o| o.steps = 0),
            ("--steps", |o| o.steps = MAX_STEPS + 1),
            ("--warmup", |o| o.warmup = MAX_STEPS + 1),
            ("--repeats", |o| o.repeats = o.steps + 1),
            ("--batch", |o| o.batch = 0),
            ("--samples", |o| o.samples = 0),
        ];
        for (option, break_it) in cases {
            let mut o = options();
            break_it(&mut o);
            assert_eq!(option_of(&o), Some(option));
        }
    }

    #[test]
    fn repeats_may_equal_steps() {
        let mut o = options();
        o.steps = 3;
        o.repeats = 3;
        assert!(o.check().is_ok());
    }

    #[test]
    fn data_names_round_trip() {
        for text in ["synthetic", "digits", "/tmp/x.npy"] {
            assert_eq!(Data::parse(text).to_string(), text);
        }
        assert_eq!(Data::parse("x.npz"), Data::File("x.npz".into()));
    }

    #[test]
    fn default_strategies_are_the_cli_default() {
        let names: Vec<String> = default_strategies().iter().map(|s| s.to_string()).collect();
        assert_eq!(names, ["replica-setter", "infra-aware", "heft"]);
    }
}
