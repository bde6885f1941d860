//! What the experiments return: plain data, serialised as the CLI's `--json` documents.

use serde::Serialize;
use tf_iaware::parallel::{DataParallelPlan, DataParallelStrategy, WorkerCapacity};
use tf_iaware::runtime::adapt::{ReplanRecord, Trigger};
use tf_iaware::runtime::trainer::Evaluation;
use tf_iaware::runtime::StepTimes;
use tf_iaware::sim::scale::StudyRow;
use tf_iaware::TrainingReport;
use tf_iaware_emulate::Scenario;

/// What [`crate::run`] measured: images/s or time to accuracy, by the options' data.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum BenchReport {
    /// Synthetic data: step time and images/s per strategy.
    Throughput(ThroughputReport),
    /// Real data: time to a held-out accuracy per contender.
    Accuracy(AccuracyReport),
}

/// One strategy's measured run.
#[derive(Debug, Serialize)]
pub struct StrategyResult {
    /// The strategy's name.
    pub strategy: String,
    /// The data-parallel plan (data-parallel strategies).
    pub plan: Option<DataParallelPlan>,
    /// Ops per worker (model-parallel strategies).
    pub ops_per_device: Option<Vec<(String, usize)>>,
    /// Step time statistics, ms.
    pub step_ms: StepTimes,
    /// Every timed step, ms.
    pub step_ms_all: Vec<f64>,
    /// Images per second at the median step time.
    pub images_per_sec: f64,
    /// Standard deviation of the per-step images per second.
    pub images_per_sec_std: f64,
    /// Seconds to train `samples` samples at the median step time.
    pub time_to_train_s: f64,
    /// 1 − step / stock step (positive: faster than stock).
    pub reduction_vs_stock: Option<f64>,
    /// The bound this strategy is measured against, ms: the synchronous data-parallel bound
    /// for a data-parallel plan, the plain bound for a model-parallel placement.
    pub lower_bound_ms: f64,
    /// Median step ÷ the bound.
    pub ratio_to_lower_bound: f64,
    /// The planner's predicted step time, ms.
    pub predicted_step_ms: Option<f64>,
    /// |predicted − measured| / measured.
    pub prediction_error: Option<f64>,
    /// Loss of the first step (warm-up included).
    pub loss_first: f32,
    /// Loss of the last step.
    pub loss_last: f32,
}

/// The images/s benchmark.
#[derive(Debug, Serialize)]
pub struct ThroughputReport {
    /// The emulated cluster.
    pub scenario: Scenario,
    /// The model's name (a zoo name or the `--graph` path).
    pub model: String,
    /// Global batch per step, samples.
    pub global_batch: usize,
    /// Timed steps per strategy.
    pub steps: usize,
    /// Warm-up steps per strategy.
    pub warmup: usize,
    /// Rounds.
    pub repeats: usize,
    /// Samples of the "time to train" column.
    pub samples: usize,
    /// Each worker's capacity at its availability when the bench started.
    pub calibration: Vec<WorkerCapacity>,
    /// Whether the worker calibration came from the cache.
    pub calibration_cache_hit: bool,
    /// Seconds spent calibrating (or reading the cache).
    pub calibration_seconds: f64,
    /// Bound of any plan: the batch over the summed throughput, or the cheapest fixed cost, ms.
    pub lower_bound_ms: f64,
    /// Bound of a synchronous data-parallel plan: each used worker's fixed cost counted
    /// ([`tf_iaware::parallel::sync_lower_bound_ms`]), ms.
    pub sync_lower_bound_ms: f64,
    /// One row per strategy.
    pub results: Vec<StrategyResult>,
    /// The drift experiment, for a scenario with drift.
    pub adaptation: Option<AdaptationReport>,
    /// The emulated cluster's warning when it could not cap CPU quotas.
    pub quota_warning: Option<String>,
    /// Seconds the whole bench took.
    pub wall_s: f64,
}

/// The drift experiment: a run that keeps its plan against one that adapts.
#[derive(Debug, Serialize)]
pub struct AdaptationReport {
    /// First step that runs after the change.
    pub drift_step: usize,
    /// Step time of every step, ms, without adaptation.
    pub static_ms: Vec<f64>,
    /// Step time of every step, ms, with adaptation.
    pub adaptive_ms: Vec<f64>,
    /// Steps before which the adaptive run switched plans.
    pub replans: Vec<usize>,
    /// Each switch: trigger, detection latency, steps until recovered (library record).
    pub replan_records: Vec<ReplanRecord>,
    /// Steps from the change to the first re-plan (1: re-planned right after the first
    /// step that ran with the change).
    pub replanned_after_steps: Option<usize>,
    /// Trigger of the first re-plan after the change.
    pub first_trigger: Option<Trigger>,
    /// Median step of a plan made from scratch after the change, ms.
    pub fresh_plan_ms: f64,
    /// Steps after the change until the adaptive run is within 15 % of the fresh plan (and
    /// stays there); `None` if it never is.
    pub recovered_after_steps: Option<usize>,
    /// Median of the static run's steps after the change ÷ the fresh plan's.
    pub static_slowdown: f64,
    /// Share of the adaptive run's wall time its metrics reader spent reading.
    pub metrics_cost_share: Option<f64>,
}

impl AdaptationReport {
    /// Median step time of the static run after the change, ms (0 when it has none).
    pub fn static_after_ms(&self) -> f64 {
        StepTimes::from_samples(&self.static_ms[self.drift_step.min(self.static_ms.len())..])
            .map_or(0.0, |t| t.median)
    }
}

/// One contender over all rounds of a time-to-accuracy run.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// The contender's name.
    pub contender: String,
    /// Rounds that reached the target.
    pub reached: usize,
    /// Rounds run.
    pub rounds: usize,
    /// Median time to accuracy over the rounds that reached it, s.
    pub median_time_to_accuracy_s: Option<f64>,
    /// Median updates applied per round.
    pub median_updates: f64,
    /// Median samples trained per round.
    pub median_samples: f64,
    /// Median images per second.
    pub median_images_per_sec: f64,
    /// Median last held-out accuracy, 0–1.
    pub median_final_accuracy: f64,
    /// 1 − time / replica-setter's time (positive: faster).
    pub reduction_vs_replica_setter: Option<f64>,
    /// 1 − time / the best stock contender's time.
    pub reduction_vs_best_stock: Option<f64>,
}

/// The time-to-accuracy benchmark.
#[derive(Debug, Serialize)]
pub struct AccuracyReport {
    /// The emulated cluster.
    pub scenario: Scenario,
    /// The model's name.
    pub model: String,
    /// The data: `digits` or a path.
    pub data: String,
    /// Where the built-in digits come from.
    pub data_source: &'static str,
    /// The digits' licence.
    pub data_licence: &'static str,
    /// Training rows.
    pub train_images: usize,
    /// Held-out rows.
    pub held_out_images: usize,
    /// Held-out accuracy trained to, 0–1.
    pub target_accuracy: f64,
    /// Global batch, samples.
    pub global_batch: usize,
    /// Backup workers of `sync-backup`.
    pub backup_workers: usize,
    /// One row per contender.
    pub summaries: Vec<Summary>,
    /// Every run, round by round.
    pub runs: Vec<TrainingReport>,
    /// The stock contenders among those run (the "vs best" column's yardstick).
    #[serde(skip)]
    pub stock: Vec<DataParallelStrategy>,
    /// Seconds the whole bench took.
    #[serde(skip)]
    pub wall_s: f64,
}

impl AccuracyReport {
    /// Each contender's first run, in the contenders' order.
    pub fn first_runs(&self) -> Vec<&TrainingReport> {
        self.summaries
            .iter()
            .filter_map(|s| {
                self.runs
                    .iter()
                    .find(|r| r.strategy.to_string() == s.contender)
            })
            .collect()
    }
}

/// `epoch  seconds  accuracy` of every evaluation of a run ([`TrainingReport::evaluations`]),
/// tab-separated with a header (DAWNBench style).
pub fn evaluations_tsv(evaluations: &[Evaluation]) -> String {
    let mut tsv = String::from("epoch\tseconds\taccuracy\n");
    for p in evaluations {
        tsv += &format!("{:.3}\t{:.2}\t{:.4}\n", p.epoch, p.seconds, p.metric);
    }
    tsv
}

/// The file name of `run`'s TSV in round `round` (from 1).
pub fn evaluations_tsv_name(run: &TrainingReport, round: usize) -> String {
    format!("{}-round{round}.tsv", run.strategy)
}

/// The planners compared on one synthetic cluster by simulation.
#[derive(Debug, Serialize)]
pub struct SimulatedReport {
    /// The synthetic cluster's spec.
    pub cluster: String,
    /// The data-parallel model.
    pub model: String,
    /// Ops of the per-op strategies' graph.
    pub ops: usize,
    /// One row per planner.
    pub rows: Vec<StudyRow>,
    /// Workers of the cluster.
    #[serde(skip)]
    pub workers: usize,
    /// Ps tasks of the cluster.
    #[serde(skip)]
    pub ps: usize,
    /// Global batch of the data-parallel planners, samples.
    #[serde(skip)]
    pub global_batch: usize,
}

/// The median of `xs` (`None` when empty).
pub(crate) fn median(mut xs: Vec<f64>) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    })
}

/// Mean and standard deviation.
pub(crate) fn mean_std(xs: &[f64]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_tsv_line_per_evaluation() {
        let at = |seconds, epoch, metric| Evaluation {
            seconds,
            epoch,
            updates: 3,
            metric,
        };
        let tsv = evaluations_tsv(&[at(0.5, 0.25, 0.4), at(1.25, 0.5, 0.91234)]);
        assert_eq!(
            tsv,
            "epoch\tseconds\taccuracy\n0.250\t0.50\t0.4000\n0.500\t1.25\t0.9123\n"
        );
        assert_eq!(evaluations_tsv(&[]), "epoch\tseconds\taccuracy\n");
    }

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    #[test]
    fn mean_std_of_constant_and_spread() {
        assert_eq!(mean_std(&[2.0, 2.0]), (2.0, 0.0));
        let (m, s) = mean_std(&[1.0, 3.0]);
        assert_eq!((m, s), (2.0, 1.0));
        assert_eq!(mean_std(&[]), (0.0, 0.0));
    }
}
