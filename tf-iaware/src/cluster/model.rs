//! [`Cluster`] and [`Device`]: plain data the placers and the cost model read.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::graph::DeviceName;

/// One device a graph can be placed on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// Full TensorFlow name, e.g. `/job:localhost/replica:0/task:0/device:CPU:1`.
    pub name: String,
    /// `CPU`, `GPU`, …
    pub device_type: String,
    /// Memory the device can use for tensors, bytes (`None`: unknown, treated as unlimited).
    pub memory_bytes: Option<u64>,
    /// Host or task this device lives in (devices that share it exchange tensors in memory).
    pub host: String,
    /// Peak compute rate, FLOP/s (from calibration, or a nominal default).
    pub peak_flops: f64,
    /// Share of the device available to us now, 0–1 (from the monitor; 1 when unknown).
    pub availability: f64,
}

impl Device {
    /// A device with nominal capability (1 GFLOP/s per CPU device) and full availability.
    pub fn nominal(name: &str, device_type: &str, memory_bytes: Option<u64>, host: &str) -> Self {
        Device {
            name: name.into(),
            device_type: device_type.into(),
            memory_bytes,
            host: host.into(),
            peak_flops: 1e9,
            availability: 1.0,
        }
    }

    /// Parsed name.
    pub fn parsed_name(&self) -> Result<DeviceName> {
        DeviceName::parse(&self.name)
    }
}

/// The devices of a cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    pub devices: Vec<Device>,
}

impl Cluster {
    /// A cluster of `devices`.
    pub fn new(devices: Vec<Device>) -> Self {
        Cluster { devices }
    }

    /// Comma-separated device names, for error messages.
    pub fn device_list(&self) -> String {
        self.devices
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Index of the one device that `spec` (a full or partial device string) names.
    ///
    /// # Errors
    /// [`Error::MalformedDevice`] if `spec` does not parse; [`Error::UnknownDevice`] (naming
    /// `op`) if no device, or more than one, matches.
    pub fn resolve(&self, op: &str, spec: &str) -> Result<usize> {
        let wanted = DeviceName::parse(spec)?;
        let mut hits = Vec::new();
        for (i, d) in self.devices.iter().enumerate() {
            if wanted.matches(&d.parsed_name()?) {
                hits.push(i);
            }
        }
        match hits.as_slice() {
            [one] => Ok(*one),
            _ => Err(Error::UnknownDevice {
                op: op.into(),
                device: spec.into(),
                known: self.device_list(),
            }),
        }
    }
}
