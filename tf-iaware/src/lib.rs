//! tf-iaware: infrastructure-aware device placement for TensorFlow.
//!
//! The pipeline, one module per stage: [`graph`] (OpGraph, colocation, analysis of a real
//! TensorFlow graph) → [`cluster`] (devices) → [`placer`] (strategies) → [`apply`] (device strings
//! written onto a GraphDef) → [`runtime`] (sessions through the C API, step stats).
//! Pure stages take plain data; TensorFlow and the OS sit at the edges.

pub mod apply;
pub mod cluster;
pub mod cost;
pub mod emulate;
pub mod error;
pub mod graph;
pub mod models;
pub mod monitor;
pub mod parallel;
pub mod placer;
pub mod proto;
pub mod report;
pub mod runtime;
pub mod sim;
pub mod tf;

pub use error::{Error, Result};
