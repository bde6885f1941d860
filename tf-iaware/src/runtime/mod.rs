//! Running graphs through the TensorFlow C API: placed sessions with deadlines and step stats
//! (configured by [`SessionConfig`]), the sidecar, and synthetic-data training.

pub mod adapt;
pub mod calibrate;
pub(crate) mod config;
pub(crate) mod checkpoint;
pub mod data_parallel;
pub mod liveness;
pub mod replicated;
pub(crate) mod session;
pub mod stats;
pub mod train;
pub mod tf;
pub mod trainer;

pub use config::SessionConfig;
pub use session::{PlacedSession, RunOutcome};
pub use tf_iaware_core::limits;
pub use train::{StepTimes, TrainReport, Trainer};
