//! The experiments of tf-iaware: emulated-cluster benchmarks of placement and data-parallel
//! strategies (images/s, with the drift-adaptation experiment on scenarios with drift),
//! time to accuracy on real data, and simulated scale studies.
//!
//! The `tf-iaware bench` command is a thin caller: it turns its flags into [`BenchOptions`]
//! (or [`SimOptions`]), calls [`run`] (or [`simulate`], [`scale_study`]) and prints the
//! returned report. Progress comes as [`Event`]s, in order, to a handler the caller gives;
//! nothing here prints. The library (`tf-iaware`) carries none of this: experiments are callers
//! of its planners and its one trainer, like any user.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use tf_iaware_bench::{run, BenchOptions, BenchReport, Event, Model};
//! use tf_iaware_emulate::Scenario;
//!
//! // The `tf-iaware` binary runs the emulated cluster's workers.
//! let mut options = BenchOptions::new(Scenario::parse("paper")?, "target/debug/tf-iaware".into());
//! options.model = Model::Zoo("mlp".into());
//! let report = run(&options, &mut |e| {
//!     if let Event::Note(line) = e {
//!         eprintln!("{line}");
//!     }
//!     Ok(())
//! })?;
//! if let BenchReport::Throughput(r) = &report {
//!     for s in &r.results {
//!         println!("{}: {:.1} images/s", s.strategy, s.images_per_sec);
//!     }
//! }
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs, unreachable_pub)]

mod accuracy;
mod adapt;
mod calibrate;
mod error;
mod event;
mod model_parallel;
mod options;
mod report;
mod simulated;
pub mod svg;
mod throughput;

pub use error::{Error, Result};
pub use event::{Event, OnEvent, RoundStats};
pub use options::{default_strategies, AsyncMasters, BenchOptions, Data, Model};
pub use report::{
    evaluations_tsv, evaluations_tsv_name, AccuracyReport, AdaptationReport, BenchReport,
    SimulatedReport, StrategyResult, Summary, ThroughputReport,
};
pub use simulated::{scale_study, simulate, synthetic_cluster, SimOptions};
pub use tf_iaware::sim::scale::Study;

/// Runs the benchmark `options` asks for on an emulated cluster: images/s per strategy on
/// synthetic data (and, on a scenario with drift, the drift experiment), or time to a held-out
/// accuracy per data-parallel contender on real data. Every option is checked before the
/// cluster starts; progress goes to `on_event` as it happens.
///
/// # Errors
/// [`Error::InvalidOption`], [`Error::Strategy`], [`Error::Conflict`] or [`Error::Data`] before
/// anything starts; [`Error::Library`] or [`Error::During`] (naming the contender and round) when
/// the cluster, a calibration or a training step fails; [`Error::Report`] when `on_event` fails.
pub fn run(options: &BenchOptions, on_event: &mut OnEvent<'_>) -> Result<BenchReport> {
    options.check()?;
    match options.data {
        Data::Synthetic => throughput::run(options, on_event).map(BenchReport::Throughput),
        Data::Digits | Data::File(_) => accuracy::run(options, on_event).map(BenchReport::Accuracy),
    }
}

impl BenchReport {
    /// The report's chart: step time per strategy, step time over the drift (a scenario with
    /// drift), or held-out accuracy over training time.
    pub fn svg(&self) -> String {
        match self {
            BenchReport::Throughput(r) => match &r.adaptation {
                Some(a) => svg::drift_chart(a, &r.scenario.name),
                None => svg::strategy_chart(&r.results, &r.scenario.name, &r.model),
            },
            BenchReport::Accuracy(r) => svg::accuracy_chart(
                &r.first_runs(),
                &r.scenario.name,
                &r.model,
                r.target_accuracy,
            ),
        }
    }
}
