//! Live infrastructure monitor: what each machine can give us now.
//!
//! * [`Monitor`] samples this host in the background (`/proc`, the observed process's cgroup,
//!   NVML) and publishes [`Snapshot`]s: per-core and total utilisation, our own and co-tenant
//!   CPU use, the CPU limit in cores, memory, network rates, GPUs, and per device the effective
//!   compute share available to us (0–1) and free memory, each with its age.
//! * [`Agent`] serves a monitor's readings over HTTP as Prometheus metrics
//!   (`GET /metrics`, `GET /healthz`).
//! * [`Scraper`] / [`scrape_many`] read many such endpoints (or plain node_exporter and
//!   dcgm-exporter pages) concurrently, with timeouts, back into [`Snapshot`]s, marking
//!   unreachable or old ones stale.
//!
//! Pure parsing and arithmetic ([`proc`], [`cgroup`], [`derive`](mod@derive), `smoothing`,
//! [`exposition`], [`metrics`]) are [`tf_iaware_core::monitor`]'s, re-exported here; this crate
//! adds the thin I/O around them.

#![warn(missing_docs)]

pub use tf_iaware_core::monitor::*;

pub(crate) mod agent;
mod cgroup_source;
pub mod gpu;
pub mod proc;
pub(crate) mod sampler;
pub(crate) mod scrape;

pub use agent::{Agent, AgentConfig, MetricsSource, StaticPage, DEFAULT_LISTEN};
pub use sampler::{sample_once, Monitor, MonitorConfig};
pub use scrape::{scrape_many, ScrapeOptions, ScrapeReport, Scraper, Target};
