//! [`Cluster`], [`Device`] and [`Link`]: plain data the placers, the cost model and the simulator
//! read; plus the calibration [`CalibrationProfile`] and the pure least-squares fits
//! (`fit_link`, `fit_compute`) that turn timed micro-benchmarks into its figures.
//!
//! Units: seconds, bytes, bytes/s and FLOP/s throughout.

use serde::{Deserialize, Serialize};

use super::status::LiveStatus;
use crate::error::{Error, Result};
use crate::graph::{DeviceName, DeviceType};

crate::index::index_type!(
    /// Index of a device in [`Cluster::devices`]; serialised as its number. Made by
    /// [`Cluster::device_id`] (which checks a user's number), [`Cluster::device_ids`],
    /// [`Cluster::index_of`] and [`Cluster::resolve`].
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
    /// deciding whether two devices share a machine (see [`LinkDefaults`]).
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
    /// [`LinkDefaults::cross_rack`] link.
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

    fn validate(&self, what: &str) -> Result<()> {
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

/// The devices of a cluster and the links between them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    /// The devices, in a stable order (indices elsewhere refer to it).
    pub devices: Vec<Device>,
    /// Explicit links for some ordered device pairs; every other pair uses [`Cluster::link_defaults`].
    #[serde(default)]
    pub links: Vec<LinkSpec>,
    /// Links by locality for pairs without an explicit [`LinkSpec`].
    #[serde(default)]
    pub link_defaults: LinkDefaults,
    /// Per-op-type costs calibrated through TensorFlow; they replace the analytic estimate of
    /// every op of that type on devices of that type (see [`OpTypeCost`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub op_costs: Vec<OpTypeCost>,
}

/// The cost of one op type on one device type, fitted from timed runs:
/// `work = intercept + slope × size`, where `size` is the op's analytic FLOPs + bytes and `work`
/// is in FLOP-equivalents (seconds × the effective FLOP/s of the device that ran it). An op of
/// this type then takes `work / (peak_flops × availability)` seconds on a device of this type, so
/// the line carries over between devices of one type in proportion to their speed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpTypeCost {
    /// Device type (`CPU`, `GPU`).
    pub device_type: DeviceType,
    /// Op type (`Conv2DBackpropFilter`, …).
    pub op: String,
    /// Work of an op of size 0 (dispatch and fixed costs), FLOP-equivalents.
    pub intercept: f64,
    /// Work per unit of size (FLOP or byte), FLOP-equivalents.
    pub slope: f64,
    /// Distinct ops (node, device type) the line was fitted over.
    #[serde(default)]
    pub points: usize,
}

impl OpTypeCost {
    /// Work of an op of `size` (analytic FLOPs + bytes), FLOP-equivalents.
    pub(crate) fn eval(&self, size: f64) -> f64 {
        (self.intercept + self.slope * size).max(0.0)
    }
}

/// Machine part of a host string: `10.0.0.1:2222` → `10.0.0.1`, `[::1]:2222` → `[::1]`.
fn machine(host: &str) -> &str {
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

impl Cluster {
    /// A cluster of `devices` with default links.
    pub fn new(devices: Vec<Device>) -> Self {
        Cluster {
            devices,
            links: Vec::new(),
            link_defaults: LinkDefaults::default(),
            op_costs: Vec::new(),
        }
    }

    /// Comma-separated device names, for error messages.
    pub fn device_list(&self) -> String {
        self.devices
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The id of the device at position `index` of [`Cluster::devices`].
    ///
    /// # Errors
    /// [`Error::BadId`] naming `index` when the cluster has no device there.
    pub fn device_id(&self, index: usize) -> Result<DeviceId> {
        if index < self.devices.len() {
            Ok(DeviceId::new(index))
        } else {
            Err(Error::BadId {
                kind: "device",
                id: index,
                len: self.devices.len(),
            })
        }
    }

    /// Ids of all devices, in cluster order.
    pub fn device_ids(
        &self,
    ) -> impl DoubleEndedIterator<Item = DeviceId> + ExactSizeIterator + Clone {
        DeviceId::range(self.devices.len())
    }

    /// The device with id `id`.
    ///
    /// # Panics
    /// If `id` is from a larger cluster (ids of this cluster, from [`Cluster::device_id`],
    /// [`Cluster::device_ids`], [`Cluster::index_of`] or [`Cluster::resolve`], are in range).
    pub fn device(&self, id: DeviceId) -> &Device {
        &self.devices[id]
    }

    /// Id of the device called exactly `name`.
    pub fn index_of(&self, name: &str) -> Option<DeviceId> {
        self.devices
            .iter()
            .position(|d| d.name == name)
            .map(DeviceId::new)
    }

    /// Id of the one device that `spec` (a full or partial device string) names.
    ///
    /// # Errors
    /// [`Error::MalformedDevice`] if `spec` does not parse; [`Error::UnknownDevice`] (naming
    /// `op`) if no device, or more than one, matches.
    pub fn resolve(&self, op: &str, spec: &str) -> Result<DeviceId> {
        let wanted = DeviceName::parse(spec)?;
        let mut hits = Vec::new();
        for (i, d) in self.device_ids().zip(&self.devices) {
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

    /// How close devices `a` and `b` are. Devices share a process when they share the
    /// machine and their names agree on job, replica and task; they share a machine when their
    /// [`Device::host`] strings agree once a `:port` suffix is dropped.
    ///
    /// # Panics
    /// If `a` or `b` is from a larger cluster.
    pub(crate) fn locality(&self, a: DeviceId, b: DeviceId) -> Locality {
        if a == b {
            return Locality::SameDevice;
        }
        Place::of(&self.devices[a]).locality(&Place::of(&self.devices[b]))
    }

    /// The link from device `a` to device `b`: an explicit [`LinkSpec`] if there is
    /// one, else the [`LinkDefaults`] entry for where they are. `None` when `a == b` (no
    /// transfer).
    ///
    /// Looks through [`Cluster::links`]; the cost model keeps every pair's link in a table
    /// linear in devices and explicit links (`cluster::links::LinkTable`) for many queries.
    ///
    /// # Panics
    /// If `a` or `b` is from a larger cluster.
    pub fn link(&self, a: DeviceId, b: DeviceId) -> Option<Link> {
        if a == b {
            return None;
        }
        let (na, nb) = (&self.devices[a].name, &self.devices[b].name);
        self.links
            .iter()
            .rev()
            .find(|l| &l.from == na && &l.to == nb)
            .map(|l| l.link)
            .or_else(|| self.link_defaults.for_locality(self.locality(a, b)))
    }

    /// Links between every ordered pair, row-major (`[a * n + b]` is the link from `a` to `b`);
    /// the diagonal holds a zero-latency, infinite-bandwidth link (no transfer). Quadratic in
    /// devices: the reference the tests check `LinkTable` against, not for planning.
    #[cfg(test)]
    pub(crate) fn link_matrix(&self) -> Vec<Link> {
        let n = self.devices.len();
        let index: std::collections::HashMap<&str, usize> = self
            .devices
            .iter()
            .enumerate()
            .map(|(i, d)| (d.name.as_str(), i))
            .collect();
        // Each device's name parsed once (not once per pair: thousands of devices make
        // millions of pairs).
        let places: Vec<Place> = self.devices.iter().map(Place::of).collect();
        let mut m = Vec::with_capacity(n * n);
        for (a, pa) in places.iter().enumerate() {
            for (b, pb) in places.iter().enumerate() {
                let locality = if a == b {
                    Locality::SameDevice
                } else {
                    pa.locality(pb)
                };
                m.push(match self.link_defaults.for_locality(locality) {
                    Some(l) => l,
                    None => Link::new(0.0, f64::INFINITY),
                });
            }
        }
        for spec in &self.links {
            if let (Some(&a), Some(&b)) =
                (index.get(spec.from.as_str()), index.get(spec.to.as_str()))
            {
                if a != b {
                    m[a * n + b] = spec.link;
                }
            }
        }
        m
    }

    /// Sets the link from device `from` to device `to` (full names), replacing any earlier one.
    ///
    /// # Errors
    /// [`Error::UnknownDevice`] if either name is not a device of this cluster;
    /// [`Error::InvalidArgument`] for a negative latency or a non-positive bandwidth.
    pub(crate) fn set_link(&mut self, from: &str, to: &str, link: Link) -> Result<()> {
        for name in [from, to] {
            if self.index_of(name).is_none() {
                return Err(Error::UnknownDevice {
                    op: "(link)".into(),
                    device: name.into(),
                    known: self.device_list(),
                });
            }
        }
        link.validate(&format!("link {from} → {to}"))?;
        self.links.retain(|l| !(l.from == from && l.to == to));
        self.links.push(LinkSpec {
            from: from.into(),
            to: to.into(),
            link,
        });
        Ok(())
    }

    /// Checks every device and link figure (see [`Device::validate`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the device or link that is wrong.
    pub(crate) fn validate(&self) -> Result<()> {
        for d in &self.devices {
            d.validate()?;
        }
        for l in &self.links {
            l.link.validate(&format!("link {} → {}", l.from, l.to))?;
        }
        let ld = &self.link_defaults;
        ld.same_process.validate("default same-process link")?;
        ld.same_process_accelerator
            .validate("default same-process accelerator link")?;
        ld.same_host.validate("default same-host link")?;
        ld.cross_host.validate("default cross-host link")?;
        ld.cross_rack.validate("default cross-rack link")?;
        Ok(())
    }
}

// ----- Calibration ------------------------------------------------------------------------------

/// A straight line `y = intercept + slope · x` fitted by least squares, constrained to
/// `intercept ≥ 0` and `slope ≥ 0`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct AffineFit {
    /// Value at `x = 0` (units of `y`).
    pub intercept: f64,
    /// Increase of `y` per unit of `x`.
    pub slope: f64,
    /// Root-mean-square residual (units of `y`).
    pub rms_residual: f64,
    /// Number of points fitted.
    pub points: usize,
}

/// Least-squares fit of `y = a + b·x` with `a ≥ 0`, `b ≥ 0` over `points` `(x, y)`.
///
/// When the unconstrained fit has `a < 0` the line is refitted through the origin; when it has
/// `b < 0`, `y` is taken as constant (its mean). One distinct `x` gives a line through the origin
/// and the mean point (`a = 0`), or a constant when that `x` is 0.
///
/// Returns `None` for no points or any non-finite value.
pub(crate) fn fit_affine(points: &[(f64, f64)]) -> Option<AffineFit> {
    if points.is_empty()
        || points
            .iter()
            .any(|&(x, y)| !x.is_finite() || !y.is_finite())
    {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let through_origin = || {
        let sxx0: f64 = points.iter().map(|p| p.0 * p.0).sum();
        if sxx0 > 0.0 {
            let b = points.iter().map(|p| p.0 * p.1).sum::<f64>() / sxx0;
            (0.0, b.max(0.0))
        } else {
            (my.max(0.0), 0.0)
        }
    };
    let (a, b) = if sxx <= f64::EPSILON * mx.abs().max(1.0) * n {
        // One distinct x.
        through_origin()
    } else {
        let b = sxy / sxx;
        let a = my - b * mx;
        if b < 0.0 {
            (my.max(0.0), 0.0)
        } else if a < 0.0 {
            through_origin()
        } else {
            (a, b)
        }
    };
    let rss: f64 = points
        .iter()
        .map(|&(x, y)| {
            let r = y - (a + b * x);
            r * r
        })
        .sum();
    Some(AffineFit {
        intercept: a,
        slope: b,
        rms_residual: (rss / n).sqrt(),
        points: points.len(),
    })
}

fn distinct_sizes(xs: impl Iterator<Item = f64>) -> usize {
    let mut v: Vec<f64> = xs.collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    v.len()
}

/// A [`Link`] fitted from timed transfers.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkFit {
    /// Fitted latency (s) and bandwidth (bytes/s).
    pub link: Link,
    /// Root-mean-square residual of the fit, seconds.
    pub rms_residual: f64,
    /// Number of samples fitted.
    pub samples: usize,
}

/// Fits `seconds = latency + bytes / bandwidth` to timed transfers `(bytes, seconds)` by least
/// squares (latency ≥ 0).
///
/// `subject` names the link in errors (e.g. `"CPU:0 → CPU:1"`).
///
/// # Errors
/// [`Error::Calibration`] with fewer than two distinct sizes, a non-finite or negative time, or
/// times that do not grow with size (use larger tensors).
pub(crate) fn fit_link(subject: &str, samples: &[(u64, f64)]) -> Result<LinkFit> {
    let bad = |reason: String| Error::Calibration {
        subject: subject.into(),
        reason,
    };
    if let Some(&(b, s)) = samples.iter().find(|p| !(p.1.is_finite() && p.1 >= 0.0)) {
        return Err(bad(format!(
            "transfer of {b} bytes timed at {s} s, which is not a duration"
        )));
    }
    let distinct = distinct_sizes(samples.iter().map(|p| p.0 as f64));
    if distinct < 2 {
        return Err(bad(format!(
            "need transfers of at least two distinct sizes to separate latency from bandwidth, got {distinct}"
        )));
    }
    let points: Vec<(f64, f64)> = samples.iter().map(|&(b, s)| (b as f64, s)).collect();
    let fit = fit_affine(&points).ok_or_else(|| bad("samples are not finite".into()))?;
    if fit.slope <= 0.0 {
        return Err(bad(
            "transfer time does not grow with size; time larger tensors so bandwidth shows".into(),
        ));
    }
    Ok(LinkFit {
        link: Link::new(fit.intercept, 1.0 / fit.slope),
        rms_residual: fit.rms_residual,
        samples: samples.len(),
    })
}

/// A device's compute rate fitted from timed micro-benchmarks.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputeFit {
    /// Sustained rate, FLOP/s.
    pub peak_flops: f64,
    /// Fixed cost per op, seconds.
    pub overhead: f64,
    /// Root-mean-square residual, seconds.
    pub rms_residual: f64,
    /// Number of samples fitted.
    pub samples: usize,
}

/// Fits `seconds = overhead + flops / peak_flops` to timed ops of known work `(flops, seconds)`
/// (MatMul/Conv2D micro-benchmarks) by least squares (overhead ≥ 0). With a single size the
/// overhead is taken as 0.
///
/// `subject` names the device in errors.
///
/// # Errors
/// [`Error::Calibration`] with no samples, a non-finite or non-positive FLOP count or time, or
/// times that do not grow with work.
pub(crate) fn fit_compute(subject: &str, samples: &[(f64, f64)]) -> Result<ComputeFit> {
    let bad = |reason: String| Error::Calibration {
        subject: subject.into(),
        reason,
    };
    if samples.is_empty() {
        return Err(bad("no timed ops".into()));
    }
    if let Some(&(f, s)) = samples
        .iter()
        .find(|p| !(p.0.is_finite() && p.0 > 0.0 && p.1.is_finite() && p.1 > 0.0))
    {
        return Err(bad(format!(
            "op of {f} FLOPs timed at {s} s: both must be positive"
        )));
    }
    let fit = fit_affine(samples).ok_or_else(|| bad("samples are not finite".into()))?;
    if fit.slope <= 0.0 {
        return Err(bad(
            "time does not grow with FLOPs; time larger ops so the compute rate shows".into(),
        ));
    }
    Ok(ComputeFit {
        peak_flops: 1.0 / fit.slope,
        overhead: fit.intercept,
        rms_residual: fit.rms_residual,
        samples: samples.len(),
    })
}

/// Calibrated figures of one device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceCalibration {
    /// Full device name.
    pub name: String,
    /// Sustained compute rate, FLOP/s (`None`: keep the device's).
    #[serde(default)]
    pub peak_flops: Option<f64>,
    /// Fixed per-op cost, seconds (`None`: keep the device's).
    #[serde(default)]
    pub op_overhead: Option<f64>,
    /// Memory bandwidth, bytes/s (`None`: keep the device's).
    #[serde(default)]
    pub memory_bandwidth: Option<f64>,
    /// Availability the monitor reported while the device was calibrated, 0–1; the figures
    /// above are already divided by it (capability). `None`: an old profile, not normalised.
    #[serde(default)]
    pub availability: Option<f64>,
    /// Free share of the device's allotment while calibrating, 0–1 (`None`: not read).
    #[serde(default)]
    pub free_fraction: Option<f64>,
    /// Hardware fingerprint of the device when calibrated (see
    /// [`LiveStatus::hardware`]); the profile is not reused where it differs.
    #[serde(default)]
    pub hardware: Option<String>,
}

/// Calibrated figures of one ordered device pair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkCalibration {
    /// Sending device, full name.
    pub from: String,
    /// Receiving device, full name.
    pub to: String,
    /// Fitted latency (s) and bandwidth (bytes/s).
    pub link: Link,
    /// Root-mean-square residual of the fit, seconds.
    #[serde(default)]
    pub rms_residual: f64,
    /// Number of timed transfers fitted.
    #[serde(default)]
    pub samples: usize,
}

/// Availability below which a device counts as this share, so that a hand-written 0 does not
/// make a device look thousands of times slower. Live readings only go below ½ for a hard
/// quota the process cannot exceed; contention is floored at the fair share a contended
/// device still gets (½, see [`cluster::live`](crate::cluster::live)).
pub const MIN_AVAILABILITY: f64 = 0.01;

/// Capability from a rate `measured` (FLOP/s, bytes/s, …) at availability `availability`
/// (0–1, floored at [`MIN_AVAILABILITY`]): `measured /
/// availability`, what the device does with its whole allotment.
pub fn capability(measured: f64, availability: f64) -> f64 {
    measured / availability.clamp(MIN_AVAILABILITY, 1.0)
}

/// Version of the [`CalibrationProfile`] format: 2 stores capabilities normalised by the
/// availability seen while calibrating, with hardware fingerprints. Older profiles are stale.
pub const PROFILE_FORMAT: u32 = 2;

/// A cached calibration (JSON): per-device capabilities (compute rates normalised by the
/// availability seen while calibrating) and per-link latency/bandwidth measured through
/// TensorFlow, stamped with the TensorFlow version, host, hardware and time they were taken.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalibrationProfile {
    /// Format version ([`PROFILE_FORMAT`]; 0 for profiles written before it existed).
    #[serde(default)]
    pub format: u32,
    /// Whether co-tenants took a large share of some device while calibrating (such a profile
    /// is reported but not cached).
    #[serde(default)]
    pub under_load: bool,
    /// TensorFlow version that ran the micro-benchmarks (e.g. `2.21.0`).
    pub tf_version: String,
    /// Host name the calibration ran on.
    pub host: String,
    /// When it was taken, seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// Per-device figures.
    #[serde(default)]
    pub devices: Vec<DeviceCalibration>,
    /// Per-link figures.
    #[serde(default)]
    pub links: Vec<LinkCalibration>,
    /// Per-op-type costs (see [`OpTypeCost`]).
    #[serde(default)]
    pub op_costs: Vec<OpTypeCost>,
}

impl CalibrationProfile {
    /// An empty profile.
    pub fn new(tf_version: &str, host: &str, created_unix_s: u64) -> Self {
        CalibrationProfile {
            format: PROFILE_FORMAT,
            under_load: false,
            tf_version: tf_version.into(),
            host: host.into(),
            created_unix_s,
            devices: Vec::new(),
            links: Vec::new(),
            op_costs: Vec::new(),
        }
    }

    /// Fits and records device `name` from timed ops `(flops, seconds)` (see `fit_compute`),
    /// replacing an earlier entry.
    ///
    /// # Errors
    /// [`Error::Calibration`] from the fit.
    pub fn add_device_samples(&mut self, name: &str, samples: &[(f64, f64)]) -> Result<ComputeFit> {
        let fit = fit_compute(name, samples)?;
        let entry = self.device_entry(name);
        entry.peak_flops = Some(fit.peak_flops);
        entry.op_overhead = Some(fit.overhead);
        Ok(fit)
    }

    /// Fits and records the memory bandwidth of device `name` from timed memory-bound ops
    /// `(bytes moved, seconds)` — copies or element-wise ops of several sizes — as
    /// `seconds = overhead + bytes / bandwidth` (see `fit_link`; the overhead is not kept).
    ///
    /// # Errors
    /// [`Error::Calibration`] from the fit.
    pub fn add_memory_samples(&mut self, name: &str, samples: &[(u64, f64)]) -> Result<LinkFit> {
        let fit = fit_link(&format!("memory of {name}"), samples)?;
        self.device_entry(name).memory_bandwidth = Some(fit.link.bandwidth);
        Ok(fit)
    }

    fn device_entry(&mut self, name: &str) -> &mut DeviceCalibration {
        let i = match self.devices.iter().position(|d| d.name == name) {
            Some(i) => i,
            None => {
                self.devices.push(DeviceCalibration {
                    name: name.into(),
                    peak_flops: None,
                    op_overhead: None,
                    memory_bandwidth: None,
                    availability: None,
                    free_fraction: None,
                    hardware: None,
                });
                self.devices.len() - 1
            }
        };
        &mut self.devices[i]
    }

    /// Fits and records the link `from → to` from timed transfers `(bytes, seconds)` (see
    /// `fit_link`), replacing an earlier entry.
    ///
    /// # Errors
    /// [`Error::Calibration`] from the fit.
    pub fn add_link_samples(
        &mut self,
        from: &str,
        to: &str,
        samples: &[(u64, f64)],
    ) -> Result<LinkFit> {
        let fit = fit_link(&format!("link {from} → {to}"), samples)?;
        self.links.retain(|l| !(l.from == from && l.to == to));
        self.links.push(LinkCalibration {
            from: from.into(),
            to: to.into(),
            link: fit.link,
            rms_residual: fit.rms_residual,
            samples: fit.samples,
        });
        Ok(fit)
    }

    /// Whether the profile should be measured again: older than `max_age_s` at `now_unix_s`,
    /// from another TensorFlow version or another host, stamped in the future, or of an older
    /// format (capabilities not normalised by availability).
    pub fn is_stale(&self, now_unix_s: u64, max_age_s: u64, tf_version: &str, host: &str) -> bool {
        self.format < PROFILE_FORMAT
            || self.tf_version != tf_version
            || self.host != host
            || now_unix_s < self.created_unix_s
            || now_unix_s - self.created_unix_s > max_age_s
    }

    /// Devices of `cluster` whose hardware fingerprint is known both now and in the profile and
    /// differs (the profile does not describe them any more), as `name: was → now`.
    pub fn hardware_changes(&self, cluster: &Cluster) -> Vec<String> {
        self.devices
            .iter()
            .filter_map(|d| {
                let was = d.hardware.as_deref()?;
                let now = cluster.devices[cluster.index_of(&d.name)?]
                    .live
                    .hardware
                    .as_deref()?;
                (was != now).then(|| format!("{}: {was} → {now}", d.name))
            })
            .collect()
    }

    /// Writes the profile's figures into `cluster` for every device and link it names that the
    /// cluster has, and its per-op-type costs (replacing the cluster's for the same op and device
    /// type); returns how many device, link and op-type entries were applied.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a figure that is not usable (non-positive rate, …).
    pub fn apply(&self, cluster: &mut Cluster) -> Result<usize> {
        let mut applied = 0;
        for d in &self.devices {
            let Some(i) = cluster.index_of(&d.name) else {
                continue;
            };
            let mut dev = cluster.devices[i].clone();
            if let Some(f) = d.peak_flops {
                dev.peak_flops = f;
            }
            if let Some(o) = d.op_overhead {
                dev.op_overhead = o;
            }
            if let Some(b) = d.memory_bandwidth {
                dev.memory_bandwidth = b;
            }
            dev.validate()?;
            cluster.devices[i] = dev;
            applied += 1;
        }
        for l in &self.links {
            if cluster.index_of(&l.from).is_some() && cluster.index_of(&l.to).is_some() {
                cluster.set_link(&l.from, &l.to, l.link)?;
                applied += 1;
            }
        }
        for c in &self.op_costs {
            if !(c.intercept.is_finite() && c.slope.is_finite())
                || c.intercept < 0.0
                || c.slope < 0.0
            {
                return Err(Error::InvalidArgument {
                    what: format!("calibrated cost of {} on {}", c.op, c.device_type),
                    reason: format!(
                        "intercept {} and slope {} must be finite and non-negative",
                        c.intercept, c.slope
                    ),
                });
            }
            cluster
                .op_costs
                .retain(|o| !(o.op == c.op && o.device_type == c.device_type));
            cluster.op_costs.push(c.clone());
            applied += 1;
        }
        Ok(applied)
    }

    /// The profile as pretty JSON.
    ///
    /// # Errors
    /// [`Error::Json`] if serialisation fails (a non-finite figure).
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).map_err(|source| Error::Json {
            what: "calibration profile".into(),
            source,
        })
    }

    /// Parses a profile from JSON; `origin` (a path) names it in errors.
    ///
    /// # Errors
    /// [`Error::Json`] naming `origin`.
    pub fn from_json(text: &str, origin: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|source| Error::Json {
            what: format!("calibration profile {origin}"),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(name: &str, ty: &str, host: &str) -> Device {
        Device::nominal(name, ty, None, host)
    }

    fn cluster() -> Cluster {
        Cluster::new(vec![
            dev(
                "/job:localhost/replica:0/task:0/device:CPU:0",
                "CPU",
                "localhost",
            ),
            dev(
                "/job:localhost/replica:0/task:0/device:CPU:1",
                "CPU",
                "localhost",
            ),
            dev(
                "/job:localhost/replica:0/task:0/device:GPU:0",
                "GPU",
                "localhost",
            ),
            dev(
                "/job:worker/replica:0/task:1/device:CPU:0",
                "CPU",
                "127.0.0.1:2223",
            ),
            dev(
                "/job:worker/replica:0/task:2/device:CPU:0",
                "CPU",
                "127.0.0.1:2224",
            ),
            dev(
                "/job:worker/replica:0/task:3/device:CPU:0",
                "CPU",
                "10.0.0.7:2222",
            ),
        ])
    }

    #[test]
    fn locality_follows_process_and_machine() {
        let c = cluster();
        assert_eq!(
            c.locality(DeviceId::new(0), DeviceId::new(0)),
            Locality::SameDevice
        );
        assert_eq!(
            c.locality(DeviceId::new(0), DeviceId::new(1)),
            Locality::SameProcess
        );
        assert_eq!(
            c.locality(DeviceId::new(0), DeviceId::new(2)),
            Locality::SameProcessAccelerator
        );
        assert_eq!(
            c.locality(DeviceId::new(3), DeviceId::new(4)),
            Locality::SameHost
        );
        assert_eq!(
            c.locality(DeviceId::new(3), DeviceId::new(5)),
            Locality::CrossHost
        );
        assert_eq!(
            c.locality(DeviceId::new(0), DeviceId::new(3)),
            Locality::CrossHost,
            "localhost ≠ 127.0.0.1 textually"
        );
        assert_eq!(machine("[::1]:80"), "[::1]");
        assert_eq!(machine("host"), "host");
    }

    #[test]
    fn links_default_by_locality_and_explicit_ones_win() {
        let mut c = cluster();
        let d = LinkDefaults::default();
        assert_eq!(
            c.link(DeviceId::new(0), DeviceId::new(1)),
            Some(d.same_process)
        );
        assert_eq!(
            c.link(DeviceId::new(3), DeviceId::new(4)),
            Some(d.same_host)
        );
        assert_eq!(
            c.link(DeviceId::new(4), DeviceId::new(5)),
            Some(d.cross_host)
        );
        assert_eq!(c.link(DeviceId::new(2), DeviceId::new(2)), None);
        let from = c.devices[3].name.clone();
        let to = c.devices[4].name.clone();
        c.set_link(&from, &to, Link::new(1e-3, 1e6)).unwrap();
        assert_eq!(
            c.link(DeviceId::new(3), DeviceId::new(4)),
            Some(Link::new(1e-3, 1e6))
        );
        assert_eq!(
            c.link(DeviceId::new(4), DeviceId::new(3)),
            Some(d.same_host),
            "links are one-way"
        );
        let m = c.link_matrix();
        let n = c.devices.len();
        assert_eq!(m[3 * n + 4], Link::new(1e-3, 1e6));
        assert_eq!(m[4 * n + 3], d.same_host);
        assert_eq!(m[0].transfer_time(1 << 30), 0.0);
        assert!(c
            .set_link(
                "/job:x/replica:0/task:0/device:CPU:0",
                &to,
                Link::new(0.0, 1.0)
            )
            .is_err());
        assert!(c.set_link(&from, &to, Link::new(0.0, 0.0)).is_err());
    }

    #[test]
    fn old_json_without_new_fields_still_reads() {
        let json = r#"{"devices":[{"name":"/job:a/replica:0/task:0/device:CPU:0","device_type":"CPU",
            "memory_bytes":null,"host":"h","peak_flops":1e9,"availability":0.5}]}"#;
        let c: Cluster = serde_json::from_str(json).unwrap();
        assert_eq!(c.devices[0].device_type, DeviceType::Cpu);
        // Device types are written back as TensorFlow writes them, and read the same again.
        let text = serde_json::to_string(&c).unwrap();
        assert!(text.contains(r#""device_type":"CPU""#), "{text}");
        let back: Cluster = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
        assert_eq!(c.devices[0].concurrency, 1);
        assert_eq!(c.devices[0].memory_bandwidth, NOMINAL_CPU_MEMORY_BANDWIDTH);
        assert_eq!(c.link_defaults, LinkDefaults::default());
        c.validate().unwrap();
        let mut bad = c.clone();
        bad.devices[0].availability = 1.5;
        let err = bad.validate().unwrap_err().to_string();
        assert!(
            err.contains("availability") && err.contains("CPU:0"),
            "{err}"
        );
    }

    #[test]
    fn capability_normalisation_round_trips_through_a_profile() {
        // Measured 1e10 FLOP/s while co-tenants left the device 0.4 of itself.
        let mut c = cluster();
        let name = c.devices[0].name.clone();
        c.devices[0].availability = 0.4;
        c.devices[0].live.hardware = Some("cpu:X|cores:2|allot:2.00".into());
        let mut p = CalibrationProfile::new("2.21.0", "box", 1_000);
        p.add_device_samples(&name, &[(1e9, 0.1), (2e9, 0.2)])
            .unwrap();
        let d = &mut p.devices[0];
        d.peak_flops = d.peak_flops.map(|f| capability(f, 0.4));
        d.availability = Some(0.4);
        d.hardware = c.devices[0].live.hardware.clone();
        assert!((p.devices[0].peak_flops.unwrap() - 2.5e10).abs() < 1.0);
        let back = CalibrationProfile::from_json(&p.to_json().unwrap(), "p.json").unwrap();
        assert_eq!(back.devices[0].availability, Some(0.4));
        assert_eq!(back.format, PROFILE_FORMAT);
        // Applied at the same availability: the measured rate again.
        back.apply(&mut c).unwrap();
        assert!((c.devices[0].effective_flops() - 1e10).abs() < 1.0);
        // The co-tenant left: the capability, not the loaded figure.
        c.devices[0].availability = 1.0;
        assert!((c.devices[0].effective_flops() - 2.5e10).abs() < 1.0);
        assert!(back.hardware_changes(&c).is_empty());
        c.devices[0].live.hardware = Some("cpu:X|cores:4|allot:4.00".into());
        assert_eq!(back.hardware_changes(&c).len(), 1);
        // Profiles of the old format (figures not normalised) are stale.
        let mut old = back.clone();
        old.format = 0;
        assert!(old.is_stale(1_500, 3_600, "2.21.0", "box"));
        assert!(!back.is_stale(1_500, 3_600, "2.21.0", "box"));
        // A zero availability does not make an infinite capability.
        assert!(capability(1e9, 0.0).is_finite());
    }

    #[test]
    fn fit_link_recovers_latency_and_bandwidth() {
        // 100 µs + bytes / 1 GB/s, with ±1 % alternating noise.
        let samples: Vec<(u64, f64)> = [1u64 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 26]
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                let t = 1e-4 + b as f64 / 1e9;
                (b, t * if i % 2 == 0 { 1.01 } else { 0.99 })
            })
            .collect();
        let fit = fit_link("a → b", &samples).unwrap();
        assert!((fit.link.bandwidth / 1e9 - 1.0).abs() < 0.03, "{fit:?}");
        assert!(
            fit.link.latency >= 0.0 && fit.link.latency < 1e-3,
            "{fit:?}"
        );
        let exact: Vec<(u64, f64)> = [1000u64, 2000, 4000]
            .iter()
            .map(|&b| (b, 2e-5 + b as f64 / 5e8))
            .collect();
        let fit = fit_link("a → b", &exact).unwrap();
        assert!((fit.link.latency - 2e-5).abs() < 1e-12);
        assert!((fit.link.bandwidth - 5e8).abs() / 5e8 < 1e-9);
        assert!(fit.rms_residual < 1e-15);
    }

    #[test]
    fn fit_link_rejects_unusable_samples() {
        let one_size = fit_link("x → y", &[(100, 1e-3), (100, 2e-3)]).unwrap_err();
        assert!(matches!(one_size, Error::Calibration { ref subject, .. } if subject == "x → y"));
        let flat = fit_link("x → y", &[(100, 1e-3), (200, 1e-3)]).unwrap_err();
        assert!(flat.to_string().contains("does not grow"), "{flat}");
        assert!(fit_link("x → y", &[(100, f64::NAN), (200, 1e-3)]).is_err());
    }

    #[test]
    fn fit_affine_respects_constraints() {
        // Negative intercept → through the origin.
        let f = fit_affine(&[(1.0, 0.5), (2.0, 2.0), (3.0, 3.5)]).unwrap();
        assert_eq!(f.intercept, 0.0);
        assert!(f.slope > 0.0);
        // Negative slope → constant mean.
        let f = fit_affine(&[(1.0, 3.0), (2.0, 1.0)]).unwrap();
        assert_eq!((f.intercept, f.slope), (2.0, 0.0));
        // One distinct x → through origin and mean point.
        let f = fit_affine(&[(2.0, 1.0), (2.0, 3.0)]).unwrap();
        assert_eq!((f.intercept, f.slope), (0.0, 1.0));
        assert!(fit_affine(&[]).is_none());
    }

    #[test]
    fn profile_fits_applies_and_goes_stale() {
        let mut c = cluster();
        let mut p = CalibrationProfile::new("2.21.0", "box", 1_000);
        let name = c.devices[0].name.clone();
        let fit = p
            .add_device_samples(&name, &[(1e9, 1e-3 + 0.02), (4e9, 1e-3 + 0.08)])
            .unwrap();
        assert!((fit.peak_flops - 5e10).abs() / 5e10 < 1e-9);
        assert!((fit.overhead - 1e-3).abs() < 1e-12);
        p.add_memory_samples(&name, &[(1 << 20, 1e-4), (1 << 22, 4e-4 - 3e-5)])
            .unwrap();
        assert!(p.devices[0].memory_bandwidth.unwrap() > 1e9);
        assert_eq!(p.devices.len(), 1, "one entry per device");
        let (a, b) = (c.devices[3].name.clone(), c.devices[4].name.clone());
        p.add_link_samples(&a, &b, &[(1000, 1e-4 + 1e-6), (2000, 1e-4 + 2e-6)])
            .unwrap();
        p.devices.push(DeviceCalibration {
            name: "/job:gone/replica:0/task:0/device:CPU:0".into(),
            peak_flops: Some(1.0),
            op_overhead: None,
            memory_bandwidth: None,
            availability: None,
            free_fraction: None,
            hardware: None,
        });
        let json = p.to_json().unwrap();
        let back = CalibrationProfile::from_json(&json, "p.json").unwrap();
        // serde_json's float parsing may differ from the written value in the last bit.
        assert_eq!(back.devices.len(), 2);
        assert_eq!(
            (back.links[0].from.as_str(), back.links[0].samples),
            (a.as_str(), 2)
        );
        assert!((back.links[0].link.bandwidth - p.links[0].link.bandwidth).abs() < 1.0);
        assert_eq!(back.apply(&mut c).unwrap(), 2);
        assert!((c.devices[0].peak_flops - 5e10).abs() / 5e10 < 1e-9);
        let l = c.link(DeviceId::new(3), DeviceId::new(4)).unwrap();
        assert!((l.bandwidth - 1e9).abs() / 1e9 < 1e-6 && (l.latency - 1e-4).abs() < 1e-9);

        assert!(!p.is_stale(1_500, 3_600, "2.21.0", "box"));
        assert!(p.is_stale(5_000, 3_600, "2.21.0", "box"));
        assert!(p.is_stale(1_500, 3_600, "2.20.0", "box"));
        assert!(p.is_stale(1_500, 3_600, "2.21.0", "other"));
        assert!(p.is_stale(10, 3_600, "2.21.0", "box"));
        let err = CalibrationProfile::from_json("{", "p.json").unwrap_err();
        assert!(err.to_string().contains("p.json"), "{err}");

        // Op-type lines: upper-cased, replacing the cluster's line for the same op and type.
        let line = |ty: &str, slope: f64| OpTypeCost {
            device_type: ty.into(),
            op: "Conv2D".into(),
            intercept: 10.0,
            slope,
            points: 4,
        };
        let mut p = CalibrationProfile::new("2.21.0", "box", 1_000);
        p.op_costs = vec![line("cpu", 2.0)];
        c.op_costs = vec![line("CPU", 1.0)];
        assert_eq!(p.apply(&mut c).unwrap(), 1);
        assert_eq!(c.op_costs, vec![line("CPU", 2.0)]);
        assert_eq!(c.op_costs[0].device_type, DeviceType::Cpu);
        let json = p.to_json().unwrap();
        assert!(json.contains(r#""device_type": "CPU""#), "{json}");
        assert_eq!(c.op_costs[0].eval(5.0), 20.0);
        p.op_costs = vec![line("CPU", -1.0)];
        let err = p.apply(&mut c).unwrap_err().to_string();
        assert!(err.contains("Conv2D") && err.contains("-1"), "{err}");
    }
}
