//! [`Device`]: one device a graph can be placed on — its capability (compute rate, memory
//! bandwidth, per-op overhead), its live availability and where it lives — and [`DeviceId`].
//!
//! Units: seconds, bytes, bytes/s and FLOP/s throughout.

use serde::{Deserialize, Serialize};

use super::status::LiveStatus;
use crate::error::{Error, Result};
use crate::graph::{DeviceName, DeviceType};

crate::index::index_type!(
    /// Index of a device in [`Cluster::devices`](crate::cluster::Cluster::devices); serialised as its number. Made by
    /// [`Cluster::device_id`](crate::cluster::Cluster::device_id) (which checks a user's number), [`Cluster::device_ids`](crate::cluster::Cluster::device_ids),
    /// [`Cluster::index_of`](crate::cluster::Cluster::index_of) and [`Cluster::resolve`](crate::cluster::Cluster::resolve).
    DeviceId
);

/// Nominal sustained rate of a CPU device, FLOP/s (a few AVX2 cores on SGEMM), used until a
/// calibration replaces it.
pub(crate) const NOMINAL_CPU_FLOPS: f64 = 2e10;
/// Nominal sustained rate of a GPU device, FLOP/s.
pub(crate) const NOMINAL_GPU_FLOPS: f64 = 1e13;
/// Nominal memory bandwidth of a CPU device, bytes/s.
pub(crate) const NOMINAL_CPU_MEMORY_BANDWIDTH: f64 = 1e10;
/// Nominal memory bandwidth of a GPU device, bytes/s.
pub(crate) const NOMINAL_GPU_MEMORY_BANDWIDTH: f64 = 5e11;
/// Nominal fixed cost of running one op on a CPU device (executor dispatch), seconds.
pub(crate) const NOMINAL_CPU_OP_OVERHEAD: f64 = 5e-6;
/// Nominal fixed cost of running one op on a GPU device (kernel launch), seconds.
pub(crate) const NOMINAL_GPU_OP_OVERHEAD: f64 = 1e-5;

fn default_memory_bandwidth() -> f64 {
    NOMINAL_CPU_MEMORY_BANDWIDTH
}
fn default_op_overhead() -> f64 {
    NOMINAL_CPU_OP_OVERHEAD
}
fn default_concurrency() -> u32 {
    1
}

/// One device a graph can be placed on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// Full TensorFlow name, e.g. `/job:localhost/replica:0/task:0/device:CPU:1`.
    pub name: String,
    /// `CPU`, `GPU`, …
    pub device_type: DeviceType,
    /// Memory the device can use for tensors, bytes (`None`: unknown, treated as unlimited).
    pub memory_bytes: Option<u64>,
    /// Machine this device lives on: a host name or address; a `:port` suffix is ignored when
    /// deciding whether two devices share a machine (see `LinkDefaults`).
    pub host: String,
    /// Capability: sustained compute rate with the device's whole allotment, FLOP/s (from a
    /// calibration normalised by the availability seen while calibrating, or a nominal default).
    pub peak_flops: f64,
    /// Share of the device's resources available to us now, 0–1 (from the monitor, see
    /// [`live`](super::live); 1 when unknown). Effective speed = `peak_flops × availability`.
    pub availability: f64,
    /// Memory bandwidth, bytes/s (from calibration, or a nominal default).
    #[serde(default = "default_memory_bandwidth")]
    pub memory_bandwidth: f64,
    /// Fixed cost of running any op on this device (dispatch, kernel launch), seconds.
    #[serde(default = "default_op_overhead")]
    pub op_overhead: f64,
    /// How many ops the device runs at once, each at the full rate (TensorFlow's inter-op
    /// parallelism as the simulator models it); at least 1.
    #[serde(default = "default_concurrency")]
    pub concurrency: u32,
    /// Devices that name the same pool share one compute capacity — as many ops at full speed
    /// as the largest `concurrency` among them: ops running at once on any of them split it
    /// equally, each at most at full speed (the CPU devices of one TensorFlow process share its
    /// thread pools and the machine's cores). `None`: the device has a capacity of its own.
    #[serde(default)]
    pub compute_pool: Option<String>,
    /// Where [`Device::availability`] and the free memory come from, how old they are, and
    /// why they are not current (see [`live`](super::live)).
    #[serde(default)]
    pub live: LiveStatus,
    /// Rack of the machine (`None`: unknown); two machines in different racks use the
    /// `LinkDefaults::cross_rack` link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
}

impl Device {
    /// A device with nominal capability for its type (see the `NOMINAL_*` constants), full
    /// availability and concurrency 1. A CPU device joins the compute pool of its `host` (CPU
    /// devices of one process share its cores); other devices have their own capacity.
    pub fn nominal(
        name: &str,
        device_type: impl Into<DeviceType>,
        memory_bytes: Option<u64>,
        host: &str,
    ) -> Self {
        let device_type = device_type.into();
        let gpu = device_type == DeviceType::Gpu;
        let cpu = device_type == DeviceType::Cpu;
        Device {
            name: name.into(),
            device_type,
            memory_bytes,
            host: host.into(),
            peak_flops: if gpu {
                NOMINAL_GPU_FLOPS
            } else {
                NOMINAL_CPU_FLOPS
            },
            availability: 1.0,
            memory_bandwidth: if gpu {
                NOMINAL_GPU_MEMORY_BANDWIDTH
            } else {
                NOMINAL_CPU_MEMORY_BANDWIDTH
            },
            op_overhead: if gpu {
                NOMINAL_GPU_OP_OVERHEAD
            } else {
                NOMINAL_CPU_OP_OVERHEAD
            },
            concurrency: 1,
            compute_pool: cpu.then(|| host.to_string()),
            live: LiveStatus::default(),
            rack: None,
        }
    }

    /// Parsed name.
    pub fn parsed_name(&self) -> Result<DeviceName> {
        DeviceName::parse(&self.name)
    }

    /// Effective compute rate now, FLOP/s: `peak_flops × availability`.
    pub(crate) fn effective_flops(&self) -> f64 {
        self.peak_flops * self.availability
    }

    /// Checks that the figures are usable by the cost model (finite, positive rates,
    /// availability in 0–1).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the device and the field.
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |field: &str, value: f64, want: &str| Error::InvalidArgument {
            what: format!("device `{}` field `{field}`", self.name),
            reason: format!("{value} is not {want}"),
        };
        if !(self.peak_flops.is_finite() && self.peak_flops > 0.0) {
            return Err(bad("peak_flops", self.peak_flops, "a positive FLOP/s rate"));
        }
        if !(self.memory_bandwidth.is_finite() && self.memory_bandwidth > 0.0) {
            return Err(bad(
                "memory_bandwidth",
                self.memory_bandwidth,
                "a positive bytes/s rate",
            ));
        }
        if !(0.0..=1.0).contains(&self.availability) {
            return Err(bad("availability", self.availability, "within 0–1"));
        }
        if !(self.op_overhead.is_finite() && self.op_overhead >= 0.0) {
            return Err(bad(
                "op_overhead",
                self.op_overhead,
                "a non-negative number of seconds",
            ));
        }
        if self.concurrency == 0 {
            return Err(bad("concurrency", 0.0, "at least 1"));
        }
        Ok(())
    }
}
