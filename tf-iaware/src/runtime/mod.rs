//! Running graphs through the TensorFlow C API: placed sessions with deadlines and step stats
//! (configured by [`SessionConfig`]), the sidecar, and synthetic-data training.

pub mod adapt;
pub mod calibrate;
pub(crate) mod checkpoint;
pub mod data_parallel;
pub mod liveness;
pub mod replicated;
pub(crate) mod session;
pub mod stats;
pub(crate) mod train;
pub mod trainer;

pub use crate::config::SessionConfig;
pub use session::{PlacedSession, RunOutcome};
pub use tf_iaware_core::limits;
pub use train::{StepTimes, TrainReport, Trainer};

/// Safe wrappers over the C API calls the `tensorflow` crate does not wrap: the linked
/// libtensorflow's version and location, its kernel registry, TensorFlow's gRPC server for a
/// task of a cluster, a checkpoint's index.
pub mod tf {
    pub use crate::tf::{
        kernel_device_types, kernel_device_types_for, library_location, list_checkpoint, version,
        Server,
    };
}
