//! [`Link`]: a one-way channel between two devices, the [`LinkDefaults`] by locality (one
//! process, one host, one rack, apart) and explicit [`LinkSpec`]s.
//!
//! Units: seconds, bytes and bytes/s.

use serde::{Deserialize, Serialize};

use super::device::Device;
use crate::error::{Error, Result};
use crate::graph::DeviceType;

/// A one-way channel between two devices: a transfer of `b` bytes takes
/// `latency + b / bandwidth` seconds when it has the link to itself.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Fixed cost of one transfer, seconds.
    pub latency: f64,
    /// Sustained rate, bytes/s.
    pub bandwidth: f64,
}

impl Link {
    /// A link with `latency` seconds and `bandwidth` bytes/s.
    pub(crate) const fn new(latency: f64, bandwidth: f64) -> Self {
        Link { latency, bandwidth }
    }

    /// Seconds to move `bytes` over this link alone.
    pub fn transfer_time(&self, bytes: u64) -> f64 {
        self.latency + bytes as f64 / self.bandwidth
    }

    pub(super) fn validate(&self, what: &str) -> Result<()> {
        if !(self.latency.is_finite() && self.latency >= 0.0) {
            return Err(Error::InvalidArgument {
                what: format!("{what}: latency"),
                reason: format!("{} is not a non-negative number of seconds", self.latency),
            });
        }
        if !(self.bandwidth.is_finite() && self.bandwidth > 0.0) {
            return Err(Error::InvalidArgument {
                what: format!("{what}: bandwidth"),
                reason: format!("{} is not a positive bytes/s rate", self.bandwidth),
            });
        }
        Ok(())
    }
}

/// How close two devices are; picks the default [`Link`] between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) enum Locality {
    /// The same device: no transfer.
    SameDevice,
    /// Two CPU devices of one TensorFlow process: a memory copy.
    SameProcess,
    /// One TensorFlow process, at least one side an accelerator: a host↔device copy (PCIe).
    SameProcessAccelerator,
    /// Two processes on one machine: gRPC over loopback.
    SameHost,
    /// Two machines: gRPC over the network.
    CrossHost,
    /// Two machines in different racks (both [`Device::rack`]s known and different).
    CrossRack,
}

/// Default links by where two devices are (one process, one host, one rack, apart), used for
/// every device pair without an explicit [`LinkSpec`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkDefaults {
    /// CPU↔CPU in one process (memory copy; ≈ 2 µs, 10 GB/s).
    pub same_process: Link,
    /// CPU↔accelerator or accelerator↔accelerator in one process (PCIe; ≈ 10 µs, 12 GB/s).
    pub same_process_accelerator: Link,
    /// Two processes on one machine (gRPC on loopback; ≈ 50 µs, 2 GB/s).
    pub same_host: Link,
    /// Two machines (gRPC over 10 GbE; ≈ 150 µs, 1.1 GB/s).
    pub cross_host: Link,
    /// Two machines in different racks (by default as [`LinkDefaults::cross_host`]).
    #[serde(default = "default_cross_rack")]
    pub cross_rack: Link,
}

fn default_cross_rack() -> Link {
    LinkDefaults::default().cross_host
}

impl Default for LinkDefaults {
    fn default() -> Self {
        LinkDefaults {
            same_process: Link::new(2e-6, 1e10),
            same_process_accelerator: Link::new(1e-5, 1.2e10),
            same_host: Link::new(5e-5, 2e9),
            cross_host: Link::new(1.5e-4, 1.1e9),
            cross_rack: Link::new(1.5e-4, 1.1e9),
        }
    }
}

impl LinkDefaults {
    /// The default link for `locality` (`None` for [`Locality::SameDevice`]: no transfer).
    pub(crate) fn for_locality(&self, locality: Locality) -> Option<Link> {
        match locality {
            Locality::SameDevice => None,
            Locality::SameProcess => Some(self.same_process),
            Locality::SameProcessAccelerator => Some(self.same_process_accelerator),
            Locality::SameHost => Some(self.same_host),
            Locality::CrossHost => Some(self.cross_host),
            Locality::CrossRack => Some(self.cross_rack),
        }
    }
}

/// An explicit link between two named devices (from calibration or a cluster file); it replaces
/// the locality default for that ordered pair only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkSpec {
    /// Sending device, full name.
    pub from: String,
    /// Receiving device, full name.
    pub to: String,
    /// The link's figures.
    pub link: Link,
}

/// Machine part of a host string: `10.0.0.1:2222` → `10.0.0.1`, `[::1]:2222` → `[::1]`.
pub(super) fn machine(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        if let Some(end) = rest.find(']') {
            return &host[..end + 2];
        }
    }
    match host.rsplit_once(':') {
        Some((m, port)) if !m.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => m,
        _ => host,
    }
}

/// What [`Cluster::locality`] compares of a device: its machine, host string, task, type and
/// rack.
pub(super) struct Place<'a> {
    pub(super) machine: &'a str,
    pub(super) host: &'a str,
    /// (job, replica, task) when the name parses.
    pub(super) task: Option<(Option<String>, Option<u32>, Option<u32>)>,
    pub(super) cpu: bool,
    pub(super) rack: Option<&'a str>,
}

impl<'a> Place<'a> {
    pub(super) fn of(d: &'a Device) -> Self {
        Place {
            machine: machine(&d.host),
            host: &d.host,
            task: d.parsed_name().ok().map(|n| (n.job, n.replica, n.task)),
            cpu: d.device_type == DeviceType::Cpu,
            rack: d.rack.as_deref(),
        }
    }

    /// Locality of two distinct devices. Devices share a process when they share the machine
    /// and their names agree on job, replica and task; they share a machine when their host
    /// strings agree once a `:port` suffix is dropped; machines in two known, different racks
    /// are [`Locality::CrossRack`].
    pub(super) fn locality(&self, other: &Place) -> Locality {
        if self.machine != other.machine {
            return match (self.rack, other.rack) {
                (Some(a), Some(b)) if a != b => Locality::CrossRack,
                _ => Locality::CrossHost,
            };
        }
        let same_task = matches!((&self.task, &other.task), (Some(a), Some(b)) if a == b);
        if !same_task || self.host != other.host {
            return Locality::SameHost;
        }
        if self.cpu && other.cpu {
            Locality::SameProcess
        } else {
            Locality::SameProcessAccelerator
        }
    }
}
