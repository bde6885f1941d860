//! [`CalibrationProfile`]: cached calibrations — per-device capabilities (normalised by the
//! availability seen while calibrating), per-link figures and per-op-type costs — their
//! persistence as JSON and how they are applied to a [`Cluster`].

use serde::{Deserialize, Serialize};

use super::fit::{fit_compute, fit_link, ComputeFit, LinkFit};
use crate::cluster::link::Link;
use crate::cluster::topology::{Cluster, OpTypeCost};
use crate::error::{Error, Result};

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
    /// [`LiveStatus::hardware`](crate::cluster::LiveStatus::hardware)); the profile is not reused where it differs.
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
/// make a device look thousands of times slower. Live CPU readings fall with the threads the
/// kernel counts and stop at [`MIN_CONTENDED_SHARE`](crate::cluster::live::MIN_CONTENDED_SHARE)
/// of what a hard quota leaves (see [`cluster::live`](crate::cluster::live)).
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
        let subject = format!("memory of {name}");
        let fit = fit_link(&subject, samples)?;
        if fit.latency_dominated {
            // A flat line says nothing of a memory bandwidth: keep the device's.
            return Err(Error::Calibration {
                subject,
                reason: "time does not grow with bytes moved; time larger copies so the \
                         bandwidth shows"
                    .into(),
            });
        }
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
    use crate::cluster::device::DeviceId;
    use crate::graph::DeviceType;

    fn cluster() -> Cluster {
        crate::cluster::topology::test_cluster()
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
