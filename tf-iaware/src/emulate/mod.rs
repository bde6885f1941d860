//! Emulated heterogeneous clusters on one machine: scenarios, CPU-quota cgroups, co-tenant hogs,
//! shaped links, and the processes of a TF_CONFIG cluster on 127.0.0.1.

pub mod cgroup;
pub mod cluster;
pub mod hog;
pub mod proxy;
pub mod scenario;

pub use cluster::{cleanup_on_signal, EmulatedCluster};
pub use scenario::{DriftEvent, LinkSpec, Scenario, WorkerSpec, SCENARIOS};
