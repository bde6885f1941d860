//! Training graphs built in Rust with the `tensorflow` crate: a small layer vocabulary
//! ([`builder::Net`]) and the model zoo ([`zoo`]).

pub mod builder;
pub mod replicated;
pub mod zoo;

pub use zoo::{build, input_shape, logits, Model, MODELS};
