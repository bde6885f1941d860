//! tf-iaware: infrastructure-aware device placement for TensorFlow.
//!
//! The pipeline, one module per stage: [`graph`] (OpGraph, colocation, analysis of a real
//! TensorFlow graph) → [`cluster`] (devices, live metrics) → [`cost`] → [`placer`] (strategies,
//! and [`placer::apply`]: device strings written onto a GraphDef) or [`parallel`] (data-parallel
//! plans) → [`sim`] (predictions) → [`runtime`] (sessions through the C API, the trainer); with
//! [`data`] (the user's data sets), [`durable`] (checkpoints and event files) and [`models`].
//! Pure stages take plain data; TensorFlow and the OS sit at the edges.
//!
//! # Place and train your own graph
//!
//! The entry point (at the crate root) takes a graph you built with the
//! `tensorflow` crate (re-exported as [`tensorflow`], so one dependency is enough) or a GraphDef
//! exported from Python: [`connect`] to a cluster spec, describe one training [`Step`], place the
//! graph with a strategy ([`Connection::place`] → [`Plan`], with its predicted step time and
//! per-device load), open a [`Session`] that takes your own `Operation`/`Output` handles (any
//! dtype, any output index), and [`Session::verify`] where every op ran.
//!
//! ```
//! # mod model { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/own_model/model.rs")); }
//! use tf_iaware::{Run, Step};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let m = model::build()?; // your graph: x (float), labels (int64), init, train, loss
//! let (xs, ys) = model::batch(1);
//!
//! let cluster = tf_iaware::connect("local:cpu=2")?;
//! let step = Step::new().target(&m.train).fetch(&m.loss);
//! let plan = cluster.place(&*m.scope.graph(), &step, "heft")?;
//! assert!(plan.report().predicted_step_ms >= plan.report().lower_bound_ms);
//! let session = plan.session()?;
//! session.run(Run::new().target(&m.init))?;
//! let feeds = || Run::of(&step).feed(&m.x, &xs).feed(&m.labels, &ys);
//! let first = session.run(feeds())?.scalar::<f32>(&m.loss)?;
//! for _ in 0..20 {
//!     session.run(feeds())?;
//! }
//! let last = session.run(feeds())?.scalar::<f32>(&m.loss)?;
//! assert!(last < first, "loss {first} -> {last}");
//! assert!(session.verify(&session.run(feeds().traced())?)?.is_ok());
//! # Ok(()) }
//! ```

// Every public type is `Debug` (a manual impl where it holds TensorFlow handles).
#![warn(missing_docs, missing_debug_implementations)]
// Library code returns typed errors: no unwrap/expect outside tests (clippy.toml allows them there).
#![warn(clippy::unwrap_used, clippy::expect_used)]

// Ten public modules, in the order of the pipeline; every public item has one path (the entry
// point, `pipeline`'s, lives at the root only).
pub mod cluster;
pub mod graph;
pub mod cost {
    //! Per-op costs on each device (FLOPs, bytes, measured times) and transfer costs
    //! ([`tf_iaware_core::cost`]).
    pub use tf_iaware_core::cost::*;
}
pub mod placer;
pub mod parallel {
    //! Data-parallel plans: strategies, shares, variable layout and graph replication
    //! ([`tf_iaware_core::parallel`]).
    pub use tf_iaware_core::parallel::*;
}
pub mod data;
pub mod durable;
pub mod models;
pub mod runtime;
pub mod sim;

mod config;
mod pipeline;
mod tf;

pub(crate) use tf_iaware_core::limits;

/// The crate's errors, with TensorFlow's status code kept ([`TfCode`]).
pub(crate) use tf_iaware_core::error;

/// The `tensorflow` crate tf-iaware is built on, for building graphs without a second
/// dependency (and so without a second version of it).
pub use tensorflow;

pub use error::{Error, RecordPart, Result, TfCode};
pub use pipeline::*;
pub use runtime::trainer::job::{Job, Metric};
pub use runtime::trainer::options::TrainingOptions;
pub use runtime::trainer::report::TrainingReport;
