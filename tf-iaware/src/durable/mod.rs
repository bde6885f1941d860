//! Durable training: nothing a run earns is lost.
//!
//! - [`CheckpointDir`]: checkpoints in TensorFlow's V2 format (`SaveV2`/`RestoreV2` in a small
//!   local session on the driver), written atomically to the driver's own disk, the last K kept,
//!   the newest whole one found again after a crash (a torn one is skipped with a warning), each
//!   with the trainer's [`TrainState`] beside it. The directory is untrusted input: no link in it
//!   is followed, only tf-iaware's own regular files are deleted, reads are capped, saved states
//!   range-checked, and a writer holds its lock (a second run on it is refused).
//! - [`restore_graph`] / [`restore_into`]: a checkpoint into a plain session of the user's
//!   original single-tower graph (the trained model out), refusing one that does not fit
//!   ([`Error::CheckpointMismatch`](crate::Error::CheckpointMismatch) names the variable).
//! - [`write_bundle`] / [`read_bundle`]: one checkpoint's files, for any named tensors.
//! - [`events`]: TensorBoard event files (`events.out.tfevents.*`), written and read back.
//!
//! ```
//! use tf_iaware::durable::{CheckpointDir, HostTensor, NamedTensor, TrainState};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let checkpoints = CheckpointDir::open(dir.path(), 3)?;
//! let w = NamedTensor::new("dense/kernel", HostTensor::float(&[2, 2], &[1.0, 2.0, 3.0, 4.0])?);
//! checkpoints.save(&TrainState::at_step(100), &[w.clone()])?;
//! let latest = checkpoints.load_latest()?.expect("a checkpoint");
//! assert_eq!(latest.state.global_step, 100);
//! assert_eq!(latest.tensors, vec![w]);
//! # Ok(()) }
//! ```

mod bundle;
mod dir;
pub mod events;
mod folder;
mod graph;
mod lock;
mod tensor;

pub use crate::tf::checkpoint_reader::CheckpointEntry;
pub use bundle::{list_bundle, read_bundle, read_entries, write_bundle, BundleWriter};
pub use dir::{CheckpointDir, CheckpointInfo, LoadedCheckpoint};
pub use graph::{
    check_fits, graph_variables, read_variables, restore_graph, restore_into, GraphVariable,
    RestoredModel,
};
pub use tensor::{from_saved, to_saved, HostTensor, NamedTensor};
pub use tf_iaware_core::durable::{layout, CheckpointSchedule, PlanState, TrainState, WorkerShare};
