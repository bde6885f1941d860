//! The live infrastructure monitor's pure half: what a machine can give us now, as plain data
//! ([`Snapshot`]), the parsers of `/proc`, cgroup and NVML readings, the derivations over two
//! readings ([`derive`](mod@derive)), smoothing, and the Prometheus exposition format both ways
//! ([`exposition`], [`metrics`]). The sources that read the live files, the agent and the
//! scraper are `tf_iaware::cluster::monitor`'s.

pub mod cgroup;
pub mod derive;
pub mod exposition;
pub mod gpu;
pub mod metrics;
pub mod plausible;
pub mod proc;
mod series;
pub(crate) mod smoothing;
pub mod snapshot;

pub use exposition::Exposition;
pub use snapshot::{
    CgroupSnapshot, CoreSnapshot, CpuModeSeconds, CpuSnapshot, DeviceAvailability, DeviceKind,
    GpuSnapshot, LoadAverage, MemorySnapshot, NetworkInterface, Smoothed, Snapshot,
};
