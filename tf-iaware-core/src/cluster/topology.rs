//! [`Cluster`]: the devices of a cluster, the links between them and the per-op-type costs
//! calibrated for them — plain data the placers, the cost model and the simulator read.

use serde::{Deserialize, Serialize};

use super::device::{Device, DeviceId};
use super::link::{Link, LinkDefaults, LinkSpec, Locality, Place};
use crate::error::{Error, Result};
use crate::graph::{DeviceName, DeviceType};

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

/// Six nominal devices for unit tests: two CPUs and a GPU of the local process, two workers on
/// 127.0.0.1 and one on another host.
#[cfg(test)]
pub(crate) fn test_cluster() -> Cluster {
    let dev = |name: &str, ty: &str, host: &str| Device::nominal(name, ty, None, host);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::device::NOMINAL_CPU_MEMORY_BANDWIDTH;
    use crate::cluster::link::machine;

    fn cluster() -> Cluster {
        test_cluster()
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
}
