//! Running graphs through the TensorFlow C API: session configuration, placed sessions with
//! deadlines and step stats, the sidecar, and synthetic-data training.

pub mod accuracy;
pub mod adapt;
pub mod calibrate;
pub mod checkpoint;
pub mod config;
pub mod data_parallel;
pub mod liveness;
pub mod replicated;
pub mod session;
pub mod stats;
pub mod train;

pub use config::SessionConfig;
pub use session::{PlacedSession, RunOutcome};
pub use tf_iaware_core::graph::sidecar::{self, Sidecar};
pub use train::{StepTimes, TrainReport, Trainer};
