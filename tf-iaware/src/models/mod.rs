//! Training graphs built in Rust with the `tensorflow` crate: a small layer vocabulary
//! ([`builder::Net`]), the model zoo ([`build`], [`MODELS`]) and the network calibration times op by op
//! (`calibration`).

pub mod builder;
pub(crate) mod calibration;
pub mod replicated;
pub(crate) mod zoo;

pub use zoo::{build, input_shape, logits, Model, MODELS};
