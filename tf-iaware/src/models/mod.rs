//! Training graphs built in Rust with the `tensorflow` crate: a small layer vocabulary
//! ([`builder::Net`]) and the model zoo ([`zoo`]).

pub mod builder;
pub mod zoo;

pub use zoo::{build, Model, MODELS};
