//! tf-iaware-core: the pure core of tf-iaware — everything that needs neither TensorFlow nor the
//! live machine, so it builds and tests in seconds anywhere.
//!
//! The pipeline, one module per stage: [`graph`] (the plain-data [`OpGraph`](graph::OpGraph), a
//! decoded GraphDef's structure, colocation, device names) → [`cost`] (what each op costs on each
//! device) → [`placer`] (the strategies) → [`sim`] and [`report`] (predicted step times, traces).
//! Beside it: [`cluster`] (devices and their live figures, cluster specs, TF_CONFIG), [`monitor`]
//! (snapshots of a machine, the parsers of its `/proc`, cgroup and NVML readings, the Prometheus
//! page both ways), [`parallel`] (data-parallel plans and the replication of a training graph),
//! [`scale`] (the scale study: the planners on synthetic clusters, by simulation), [`proto`] (the
//! TensorFlow protos as plain structs), [`record`] (TFRecord framing), [`data`] (typed host
//! tensors of a training data set and their checks against a graph's inputs), [`durable`] (checkpoint
//! layout, training state, TensorBoard events) and the one [`Error`] type.
//!
//! The `tf-iaware` crate adds TensorFlow and the OS at the edges: importing a real graph, writing
//! device strings onto it, sessions, the live sources, the agent and the scraper.

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]
// Library code returns typed errors: no unwrap/expect outside tests (clippy.toml allows them there).
#![warn(clippy::unwrap_used, clippy::expect_used)]

pub mod cluster;
pub mod cost;
pub mod data;
pub mod durable;
pub mod error;
pub mod graph;
mod index;
pub mod io;
pub mod limits;
pub mod monitor;
pub mod parallel;
pub mod placer;
pub mod proto;
pub mod record;
pub mod report;
pub mod scale;
pub mod sim;

pub use error::{Error, Result};
