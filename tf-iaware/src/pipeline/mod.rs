//! The library's entry point: connect to a cluster, describe one training step, place a graph
//! with a strategy, and run the placed graph with the handles of the graph you built.
//!
//! ```text
//! connect("local:cpu=4") ─► Connection ─ place(graph, &Step, "heft") ─► Plan ─ session() ─► Session
//!   (devices, calibration,    (analyse → cost model: measured →            (report,       (run any dtype,
//!    live metrics)              calibrated → analytic, restricted to         placement,     your handles,
//!                               the step → strategy → validate → rewrite)    placed graph)  verify)
//! ```
//!
//! See the crate-level example for a whole training loop.

mod builder;
mod connection;
mod data_parallel;
mod handle;
mod plan;
mod session;
mod step;

pub use builder::{CalibrationPolicy, ConnectionBuilder};
pub use connection::{connect, Connection};
pub use data_parallel::{
    data_parallel_planner, DataParallel, DataParallelOptions, DataParallelReport, TrainOptions,
    WorkerCalibrationPolicy, RESIZE_EVERY,
};
pub use handle::{OpHandle, TensorHandle, TensorRef};
pub use plan::{
    load_graph, load_sidecar, GraphSource, Plan, PlanOptions, StrategyChoice, MAX_GRAPH_BYTES,
};
pub use session::{Feed, Fetched, Run, Session, Verification};
pub use step::Step;
