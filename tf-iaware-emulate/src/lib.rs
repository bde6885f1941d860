//! Emulated heterogeneous clusters on one machine: scenarios, CPU-quota cgroups, co-tenant hogs,
//! shaped links, and the processes of a TF_CONFIG cluster on 127.0.0.1 (each a `tf-iaware
//! worker`, so a cluster is started from the path of that binary).
//!
//! A tool of the CLI (`tf-iaware bench`, `tf-iaware emulate`), the tests and the benchmarks,
//! beside the library rather than in it: [`EmulatedCluster::into_connection`] hands a running
//! cluster to the library's entry point as any other TF_CONFIG cluster.

#![warn(missing_docs, unreachable_pub)]

mod cgroup;
mod cluster;
mod hog;
mod proxy;
mod reaper;
mod scenario;

pub use cluster::{cleanup_on_signal, EmulatedCluster};
pub use hog::burn;
pub use reaper::reap;
pub use scenario::{DriftEvent, LinkSpec, Scenario, WorkerSpec, SCENARIOS};
