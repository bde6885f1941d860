//! What an experiment reports while it runs, in order: the caller shows it (the CLI prints
//! lines, a spinner and a progress bar); the results themselves come back as the report.

use tf_iaware::sim::scale::{Planner, StudyRow};
use tf_iaware::TrainingReport;

use crate::report::StrategyResult;

/// One event of a running experiment.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A line about what is happening (the CLI writes it to stderr).
    Note(&'a str),
    /// A long call began (`Some(what)`) or ended (`None`).
    Busy(Option<&'a str>),
    /// Timed steps of the images/s bench: `done` of `total`, `what` running now (warm-up or a
    /// round and strategy). `done == total` when the last step is done.
    Steps {
        /// Steps done, warm-up included.
        done: u64,
        /// Steps to run, warm-up included.
        total: u64,
        /// What is running.
        what: &'a str,
    },
    /// A strategy's round of the images/s bench ended.
    Round(&'a RoundStats),
    /// Every strategy of the images/s bench measured (before any drift experiment runs).
    Measured {
        /// One row per strategy, in the order asked for.
        results: &'a [StrategyResult],
        /// The bound of any plan, ms per step.
        lower_bound_ms: f64,
        /// The bound of a synchronous data-parallel plan, ms per step.
        sync_lower_bound_ms: f64,
    },
    /// A time-to-accuracy run ended.
    Trained {
        /// The round, from 1.
        round: usize,
        /// The run.
        report: &'a TrainingReport,
    },
    /// A row of the scale study, as soon as it is measured.
    StudyRow(&'a StudyRow),
}

/// A strategy's timed steps so far, after one of its rounds.
#[derive(Clone, Debug, PartialEq)]
pub struct RoundStats {
    /// The strategy.
    pub strategy: Planner,
    /// Timed steps so far.
    pub timed_steps: usize,
    /// Mean images per second over those steps.
    pub images_per_sec: f64,
    /// Their standard deviation, images per second.
    pub images_per_sec_std: f64,
    /// The loss of the last step.
    pub last_loss: f32,
}

impl RoundStats {
    /// Standard deviation ÷ mean, in percent.
    pub fn jitter_percent(&self) -> f64 {
        self.images_per_sec_std / self.images_per_sec.max(1e-9) * 100.0
    }
}

/// The caller's handler of events; an error from it ends the experiment with
/// [`crate::Error::Report`].
pub type OnEvent<'h> = dyn FnMut(Event<'_>) -> std::io::Result<()> + 'h;

/// Sends `event` to `on_event`.
pub(crate) fn emit(on_event: &mut OnEvent<'_>, event: Event<'_>) -> crate::Result<()> {
    on_event(event).map_err(crate::Error::Report)
}

/// Sends a [`Event::Note`].
pub(crate) fn note(on_event: &mut OnEvent<'_>, line: &str) -> crate::Result<()> {
    emit(on_event, Event::Note(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_is_the_spread_in_percent_of_the_mean() {
        let stats = RoundStats {
            strategy: "heft".parse().expect("a per-op strategy"),
            timed_steps: 4,
            images_per_sec: 200.0,
            images_per_sec_std: 10.0,
            last_loss: 1.0,
        };
        assert_eq!(stats.jitter_percent(), 5.0);
        let idle = RoundStats {
            images_per_sec: 0.0,
            ..stats
        };
        assert!(idle.jitter_percent().is_finite());
    }

    #[test]
    fn a_failing_handler_is_a_report_error() {
        let mut failing = |_: Event<'_>| Err(std::io::Error::other("stdout is closed"));
        let err = note(&mut failing, "x").expect_err("the handler fails");
        assert!(matches!(err, crate::Error::Report(_)));
        assert_eq!(err.to_string(), "stdout is closed");
    }
}
