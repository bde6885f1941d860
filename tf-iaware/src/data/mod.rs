//! Real labelled images for training to a target accuracy: the 8×8 handwritten digits that a
//! package ships (no download at run time), a fixed held-out split, the mapping of an image into
//! a model's input shape, and the batches each replica is fed.
//!
//! Pure apart from reading the embedded data set: no TensorFlow, no I/O.

mod digits;
mod images;
mod sampler;

pub use digits::{digits, DIGITS_LICENCE, DIGITS_SOURCE};
pub use images::{accuracy, LabelledImages};
pub use sampler::Sampler;

/// Names of the data sets `--data` accepts.
pub const DATA_SETS: &[&str] = &["digits", "synthetic"];
