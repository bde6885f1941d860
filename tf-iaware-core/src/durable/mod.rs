//! Durable training as plain data: the trainer's own state saved beside each checkpoint
//! ([`TrainState`]), the layout of a checkpoint directory and TensorFlow's `checkpoint` state file
//! ([`layout`]), when to take the next one ([`CheckpointSchedule`]), and TensorBoard event
//! records ([`events`]). Writing them to disk, and the checkpoint's tensors through
//! TensorFlow's `SaveV2`/`RestoreV2`, is `tf_iaware::durable`'s.

pub mod events;
pub mod layout;
mod schedule;
mod state;

pub use schedule::CheckpointSchedule;
pub use state::{
    extra, PlanState, TrainState, WorkerShare, MAX_SAMPLES, MAX_STATE_BYTES, MAX_STEP,
    MAX_TRAIN_SECONDS, TRAIN_STATE_FORMAT,
};
