//! The crate's one error type.

use tf_iaware::sim::scale::Planner;

/// What went wrong in an experiment, naming what failed.
///
/// The emulated clusters (`tf_iaware_emulate`) report [`tf_iaware::Error`] too, so
/// [`Error::Library`] and [`Error::During`] carry both the library's and the cluster's failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // --- options, checked before any cluster starts ---
    /// An option outside its range, named as the CLI's flag (`--steps`, `--batch`, …).
    #[error("{option} {value}: {reason}")]
    InvalidOption {
        /// The option, as the CLI's flag.
        option: &'static str,
        /// The value given.
        value: String,
        /// What it must be.
        reason: String,
    },
    /// A strategy this kind of run cannot measure.
    #[error("`{strategy}` {reason}")]
    Strategy {
        /// The strategy.
        strategy: Planner,
        /// Why, and what to do instead.
        reason: String,
    },
    /// Options that contradict each other, or a model the run cannot take.
    #[error("{0}")]
    Conflict(String),
    /// Training data that cannot be used (`--data`, `--held-out-data`).
    #[error("--data {data}: {reason}")]
    Data {
        /// The data set's name or path.
        data: String,
        /// What is wrong.
        reason: String,
    },

    // --- running ---
    /// The library or an emulated cluster failed (boxed: the library's error is large).
    #[error(transparent)]
    Library(Box<tf_iaware::Error>),
    /// The library or an emulated cluster failed during `what` (a contender and round, a
    /// phase of the drift experiment).
    #[error("{what}: {source}")]
    During {
        /// What was running.
        what: String,
        /// The failure.
        #[source]
        source: Box<tf_iaware::Error>,
    },
    /// The thread that trained a drift run panicked.
    #[error("the training thread of the drift experiment panicked")]
    TrainingPanicked,
    /// A strategy ran no timed step.
    #[error("{strategy}: no timed steps")]
    NoTimedSteps {
        /// The strategy.
        strategy: Planner,
    },
    /// The caller's event handler failed (e.g. writing a progress line to a closed stdout).
    #[error("{0}")]
    Report(#[source] std::io::Error),
}

impl From<tf_iaware::Error> for Error {
    fn from(e: tf_iaware::Error) -> Error {
        Error::Library(Box::new(e))
    }
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds what was running to a library error.
pub(crate) trait During<T> {
    /// The error as [`Error::During`] `what`.
    fn during(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> During<T> for std::result::Result<T, tf_iaware::Error> {
    fn during(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::During {
            what: what(),
            source: Box::new(source),
        })
    }
}
