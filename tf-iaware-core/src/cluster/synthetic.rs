//! Synthetic clusters: `synthetic:workers=N:…` specs describing many heterogeneous workers by
//! distributions, and the seeded [`Cluster`] they stand for. Pure: nothing is started or read;
//! the cluster exists for the simulator and the planners only.
//!
//! Grammar (fields after `synthetic:` are `key=value`, separated by `:`, in any order; only
//! `workers` is required):
//!
//! | key | value | default |
//! |---|---|---|
//! | `workers` | worker tasks, 1..=[`MAX_WORKERS`] | — |
//! | `ps` | parameter-server tasks, 1..=[`MAX_PS`] | 1 |
//! | `avail` | availability of each worker, a [`Distribution`] within 0–1: `beta(a,b)`, `uniform(lo,hi)`, `const(x)` | `const(1)` |
//! | `cap` | capability of each worker relative to a nominal CPU ([`NOMINAL_CPU_FLOPS`]), a positive [`Distribution`]: `lognormal(mu,sigma)`, `uniform(lo,hi)`, `beta(a,b)`, `const(x)` | `const(1)` |
//! | `net` | each host's link: `BANDWIDTH/LATENCY`, e.g. `10gbit/50us` (units `gbit`, `mbit`, `kbit`, `bit` per second or `gb`, `mb`, `kb`, `b` bytes per second; `s`, `ms`, `us`, `ns`) | `10gbit/50us` |
//! | `rack-net` | the link between hosts of different racks | `net` at half the bandwidth and twice the latency |
//! | `per-host` | workers per host (they share its link), 1..=64 | 1 |
//! | `per-rack` | hosts per rack, 1..=4096 | 32 |
//! | `mem` | memory of each worker: a number with `b`, `k`, `m`, `g` (binary units) | `16g` |
//! | `seed` | seed of the draws | 1 |
//!
//! Workers are `/job:worker/replica:0/task:I/device:CPU:0` on hosts `rR-hH` (rack R, host H);
//! ps tasks `/job:ps/replica:0/task:J/device:CPU:0` on hosts of their own, spread over the
//! racks, at nominal capability and full availability. Every worker has a capacity of its own
//! (no compute pool).

use std::fmt;

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Beta, Distribution as _, LogNormal, Uniform};

use super::device::NOMINAL_CPU_FLOPS;
use super::model::{Cluster, Device, Link, LinkDefaults, MIN_AVAILABILITY};
use crate::error::{Error, Result};
use crate::graph::DeviceType;
use crate::limits::{MAX_PS, MAX_WORKERS};
/// Smallest capability multiplier a draw is clamped to (a worker of zero speed has no
/// meaning).
pub(crate) const MIN_CAPABILITY: f64 = 1e-3;

/// A distribution of a per-worker figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    /// Always `x`.
    Const(f64),
    /// Uniform on `[lo, hi)`.
    Uniform {
        /// Lower end (included).
        lo: f64,
        /// Upper end (excluded).
        hi: f64,
    },
    /// Beta with shapes `a`, `b` (values in 0–1, mean `a / (a + b)`).
    Beta {
        /// First shape (α > 0).
        a: f64,
        /// Second shape (β > 0).
        b: f64,
    },
    /// `exp(N(mu, sigma²))` (positive, median `exp(mu)`).
    LogNormal {
        /// Mean of the underlying normal.
        mu: f64,
        /// Standard deviation of the underlying normal (≥ 0).
        sigma: f64,
    },
}

/// What a field's values must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Support {
    /// Within (0, 1] (availability).
    Fraction,
    /// Positive (capability).
    Positive,
}

impl Distribution {
    /// Parses `name(p1,p2)` (or a bare number, `const`) for a field whose values must be in
    /// `support`; the error text says what is wrong.
    fn parse(text: &str, support: Support) -> std::result::Result<Self, String> {
        let text = text.trim();
        if let Ok(x) = text.parse::<f64>() {
            return Self::check(Distribution::Const(x), support);
        }
        let (name, rest) = text.split_once('(').ok_or_else(|| {
            format!("expected a number or NAME(PARAMS) such as beta(2,2), got `{text}`")
        })?;
        let params = rest
            .strip_suffix(')')
            .ok_or_else(|| format!("`{text}` lacks its closing parenthesis"))?;
        let values: Vec<f64> = params
            .split(',')
            .map(|p| {
                let p = p.trim();
                p.parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite())
                    .ok_or_else(|| format!("parameter `{p}` of {name} is not a finite number"))
            })
            .collect::<std::result::Result<_, _>>()?;
        let arity = |want: usize, names: &str| {
            if values.len() == want {
                Ok(())
            } else {
                Err(format!(
                    "{name} takes {want} parameter{} ({names}), got {}",
                    if want == 1 { "" } else { "s" },
                    values.len()
                ))
            }
        };
        let d = match name.trim() {
            "const" => {
                arity(1, "x")?;
                Distribution::Const(values[0])
            }
            "uniform" => {
                arity(2, "lo, hi")?;
                Distribution::Uniform {
                    lo: values[0],
                    hi: values[1],
                }
            }
            "beta" => {
                arity(2, "a, b")?;
                Distribution::Beta {
                    a: values[0],
                    b: values[1],
                }
            }
            "lognormal" => {
                arity(2, "mu, sigma")?;
                Distribution::LogNormal {
                    mu: values[0],
                    sigma: values[1],
                }
            }
            "normal" => {
                return Err(match support {
                    Support::Fraction => {
                        "normal draws outside 0–1; use beta(a,b) or uniform(lo,hi)".into()
                    }
                    Support::Positive => {
                        "normal can draw values ≤ 0; use lognormal(mu,sigma)".into()
                    }
                })
            }
            other => {
                return Err(format!(
                    "unknown distribution `{other}` (known: const, uniform, beta, lognormal)"
                ))
            }
        };
        Self::check(d, support)
    }

    /// Rejects parameters the distribution does not accept and supports outside the field's.
    fn check(d: Self, support: Support) -> std::result::Result<Self, String> {
        match d {
            Distribution::Const(x) => match support {
                Support::Fraction if !(x > 0.0 && x <= 1.0) => {
                    return Err(format!("{x} is not within (0, 1]"))
                }
                Support::Positive if !(x > 0.0 && x.is_finite()) => {
                    return Err(format!("{x} is not positive"))
                }
                _ => {}
            },
            Distribution::Uniform { lo, hi } => {
                if lo >= hi {
                    return Err(format!("uniform({lo},{hi}) needs lo < hi"));
                }
                match support {
                    Support::Fraction if lo < 0.0 || hi > 1.0 => {
                        return Err(format!("uniform({lo},{hi}) draws outside 0–1"))
                    }
                    Support::Positive if lo < 0.0 => {
                        return Err(format!("uniform({lo},{hi}) can draw negative values"))
                    }
                    _ => {}
                }
            }
            Distribution::Beta { a, b } => {
                if !(a > 0.0 && b > 0.0) {
                    return Err(format!("beta({a},{b}) needs positive shapes a and b"));
                }
            }
            Distribution::LogNormal { mu, sigma } => {
                if support == Support::Fraction {
                    return Err(format!(
                        "lognormal({mu},{sigma}) draws values above 1; use beta(a,b) or uniform(lo,hi)"
                    ));
                }
                if sigma < 0.0 {
                    return Err(format!("lognormal({mu},{sigma}) needs sigma ≥ 0"));
                }
            }
        }
        Ok(d)
    }

    /// One draw.
    fn sample(&self, rng: &mut StdRng) -> f64 {
        match *self {
            Distribution::Const(x) => x,
            Distribution::Uniform { lo, hi } => Uniform::new(lo, hi).sample(rng),
            // Parameters were checked on parsing; a failure here falls back to the mean.
            Distribution::Beta { a, b } => Beta::new(a, b).map_or(a / (a + b), |d| d.sample(rng)),
            Distribution::LogNormal { mu, sigma } => {
                LogNormal::new(mu, sigma).map_or(mu.exp(), |d| d.sample(rng))
            }
        }
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distribution::Const(x) => write!(f, "const({x})"),
            Distribution::Uniform { lo, hi } => write!(f, "uniform({lo},{hi})"),
            Distribution::Beta { a, b } => write!(f, "beta({a},{b})"),
            Distribution::LogNormal { mu, sigma } => write!(f, "lognormal({mu},{sigma})"),
        }
    }
}

/// A link tier: bandwidth and latency of one host's link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NetSpec {
    /// Bandwidth, bytes/s.
    pub bandwidth: f64,
    /// Latency of one transfer, seconds.
    pub latency: f64,
}

impl NetSpec {
    fn parse(text: &str) -> std::result::Result<Self, String> {
        let (bw, lat) = text.split_once('/').ok_or_else(|| {
            format!("expected BANDWIDTH/LATENCY such as 10gbit/50us, got `{text}`")
        })?;
        let bandwidth = with_unit(
            bw,
            &[
                ("gbit", 1e9, 8.0),
                ("mbit", 1e6, 8.0),
                ("kbit", 1e3, 8.0),
                ("bit", 1.0, 8.0),
                ("gb", 1e9, 1.0),
                ("mb", 1e6, 1.0),
                ("kb", 1e3, 1.0),
                ("b", 1.0, 1.0),
            ],
            "bandwidth",
        )?;
        let latency = with_unit(
            lat,
            &[
                ("ms", 1.0, 1e3),
                ("us", 1.0, 1e6),
                ("ns", 1.0, 1e9),
                ("s", 1.0, 1.0),
            ],
            "latency",
        )?;
        if !(bandwidth > 0.0 && bandwidth.is_finite()) {
            return Err(format!("bandwidth `{bw}` must be positive"));
        }
        if !(latency >= 0.0 && latency.is_finite()) {
            return Err(format!("latency `{lat}` must be non-negative"));
        }
        Ok(NetSpec { bandwidth, latency })
    }

    /// The link this tier stands for.
    pub(crate) fn link(&self) -> Link {
        Link::new(self.latency, self.bandwidth)
    }
}

impl fmt::Display for NetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}mbit/{}us",
            self.bandwidth * 8.0 / 1e6,
            self.latency * 1e6
        )
    }
}

/// `text` as a number followed by one of `units` (name, multiplier, divisor — exact integers,
/// so that printed values read back unchanged; longest names first).
fn with_unit(
    text: &str,
    units: &[(&str, f64, f64)],
    what: &str,
) -> std::result::Result<f64, String> {
    let t = text.trim().to_ascii_lowercase();
    for (unit, mult, div) in units {
        if let Some(num) = t.strip_suffix(unit) {
            return num
                .trim()
                .parse::<f64>()
                .map(|v| v * mult / div)
                .map_err(|_| format!("{what} `{text}`: `{num}` is not a number"));
        }
    }
    Err(format!(
        "{what} `{text}` needs a unit: one of {}",
        units.iter().map(|u| u.0).collect::<Vec<_>>().join(", ")
    ))
}

/// A parsed `synthetic:` spec (see the module docs for the grammar).
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticSpec {
    /// Worker tasks.
    pub workers: usize,
    /// Parameter-server tasks.
    pub ps: usize,
    /// Availability of each worker (0–1).
    pub avail: Distribution,
    /// Capability of each worker, as a multiple of `NOMINAL_CPU_FLOPS`.
    pub cap: Distribution,
    /// Each host's link (same rack).
    pub net: NetSpec,
    /// Links between racks.
    pub rack_net: NetSpec,
    /// Workers per host.
    pub per_host: usize,
    /// Hosts per rack.
    pub per_rack: usize,
    /// Memory of each worker, bytes.
    pub memory_bytes: u64,
    /// Seed of the draws.
    pub seed: u64,
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        let net = NetSpec {
            bandwidth: 10e9 / 8.0,
            latency: 50e-6,
        };
        SyntheticSpec {
            workers: 4,
            ps: 1,
            avail: Distribution::Const(1.0),
            cap: Distribution::Const(1.0),
            net,
            rack_net: NetSpec {
                bandwidth: net.bandwidth / 2.0,
                latency: net.latency * 2.0,
            },
            per_host: 1,
            per_rack: 32,
            memory_bytes: 16 << 30,
            seed: 1,
        }
    }
}

/// A synthetic cluster: its devices and which of them are workers and ps tasks.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticCluster {
    /// The spec it was drawn from.
    pub spec: SyntheticSpec,
    /// Workers first (in task order), then ps tasks.
    pub cluster: Cluster,
    /// Worker device names, in task order.
    pub workers: Vec<String>,
    /// ps device names, in task order.
    pub ps: Vec<String>,
}

impl SyntheticSpec {
    /// Parses a spec, with or without its `synthetic:` prefix.
    ///
    /// # Errors
    /// [`Error::SyntheticSpec`] naming the field, the value given and what is wrong with it.
    pub fn parse(spec: &str) -> Result<SyntheticSpec> {
        let body = spec.strip_prefix("synthetic:").unwrap_or(spec);
        let bad = |field: &str, value: &str, reason: String| Error::SyntheticSpec {
            spec: spec.into(),
            field: field.into(),
            value: value.into(),
            reason,
        };
        let count = |field: &str, value: &str, max: usize| -> Result<usize> {
            let n: usize = value
                .parse()
                .map_err(|_| bad(field, value, "not a whole number".into()))?;
            if n == 0 || n > max {
                return Err(bad(field, value, format!("must be 1..={max}")));
            }
            Ok(n)
        };
        let mut s = SyntheticSpec::default();
        let mut workers = None;
        let mut rack_net = None;
        let mut seen: Vec<&str> = Vec::new();
        for part in body.split(':') {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                bad(
                    part,
                    "",
                    "expected key=value (keys: workers, ps, avail, cap, net, rack-net, per-host, \
                     per-rack, mem, seed)"
                        .into(),
                )
            })?;
            if seen.contains(&key) {
                return Err(bad(key, value, "given twice".into()));
            }
            seen.push(key);
            match key {
                "workers" => workers = Some(count(key, value, MAX_WORKERS)?),
                "ps" => s.ps = count(key, value, MAX_PS)?,
                "avail" => {
                    s.avail = Distribution::parse(value, Support::Fraction)
                        .map_err(|r| bad(key, value, r))?
                }
                "cap" => {
                    s.cap = Distribution::parse(value, Support::Positive)
                        .map_err(|r| bad(key, value, r))?
                }
                "net" => s.net = NetSpec::parse(value).map_err(|r| bad(key, value, r))?,
                "rack-net" => {
                    rack_net = Some(NetSpec::parse(value).map_err(|r| bad(key, value, r))?)
                }
                "per-host" => s.per_host = count(key, value, 64)?,
                "per-rack" => s.per_rack = count(key, value, 4096)?,
                "mem" => {
                    let bytes = with_unit(
                        value,
                        &[
                            ("g", 1073741824.0, 1.0),
                            ("m", 1048576.0, 1.0),
                            ("k", 1024.0, 1.0),
                            ("b", 1.0, 1.0),
                        ],
                        "memory",
                    )
                    .map_err(|r| bad(key, value, r))?;
                    if !(1.0..1.8e19).contains(&bytes) {
                        return Err(bad(key, value, "must be at least one byte".into()));
                    }
                    s.memory_bytes = bytes as u64;
                }
                "seed" => {
                    s.seed = value
                        .parse()
                        .map_err(|_| bad(key, value, "not a whole number".into()))?
                }
                other => {
                    return Err(bad(
                        other,
                        value,
                        "unknown key (keys: workers, ps, avail, cap, net, rack-net, per-host, \
                         per-rack, mem, seed)"
                            .into(),
                    ))
                }
            }
        }
        s.workers = workers.ok_or_else(|| {
            bad(
                "workers",
                "",
                "required, e.g. synthetic:workers=1000:ps=16".into(),
            )
        })?;
        s.rack_net = rack_net.unwrap_or(NetSpec {
            bandwidth: s.net.bandwidth / 2.0,
            latency: s.net.latency * 2.0,
        });
        Ok(s)
    }

    /// Bandwidth each worker has to itself, bytes/s: its host's link shared by the host's
    /// workers.
    pub(crate) fn worker_bandwidth(&self) -> f64 {
        self.net.bandwidth / self.per_host as f64
    }

    /// Draws the cluster: for each worker in task order, its capability then its availability
    /// (so one seed gives one cluster, and more workers extend it).
    pub fn build(&self) -> SyntheticCluster {
        let mut rng = StdRng::seed_from_u64(self.seed);
        let racks = (self.workers.div_ceil(self.per_host))
            .div_ceil(self.per_rack)
            .max(1);
        let mut devices = Vec::with_capacity(self.workers + self.ps);
        let mut workers = Vec::with_capacity(self.workers);
        for i in 0..self.workers {
            let host = i / self.per_host;
            let rack = host / self.per_rack;
            let name = format!("/job:worker/replica:0/task:{i}/device:CPU:0");
            let mut d = Device::nominal(
                &name,
                DeviceType::Cpu,
                Some(self.memory_bytes),
                &format!("r{rack}-h{host}"),
            );
            d.peak_flops = NOMINAL_CPU_FLOPS * self.cap.sample(&mut rng).max(MIN_CAPABILITY);
            d.availability = self.avail.sample(&mut rng).clamp(MIN_AVAILABILITY, 1.0);
            d.compute_pool = None;
            d.rack = Some(format!("r{rack}"));
            workers.push(name);
            devices.push(d);
        }
        let mut ps = Vec::with_capacity(self.ps);
        for j in 0..self.ps {
            let name = format!("/job:ps/replica:0/task:{j}/device:CPU:0");
            let rack = j % racks;
            let mut d = Device::nominal(&name, DeviceType::Cpu, None, &format!("r{rack}-ps{j}"));
            d.compute_pool = None;
            d.rack = Some(format!("r{rack}"));
            ps.push(name);
            devices.push(d);
        }
        let mut cluster = Cluster::new(devices);
        cluster.link_defaults = LinkDefaults {
            cross_host: self.net.link(),
            cross_rack: self.rack_net.link(),
            ..LinkDefaults::default()
        };
        SyntheticCluster {
            spec: self.clone(),
            cluster,
            workers,
            ps,
        }
    }
}

impl fmt::Display for SyntheticSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "synthetic:workers={}:ps={}:avail={}:cap={}:net={}:rack-net={}:per-host={}:per-rack={}:mem={}k:seed={}",
            self.workers,
            self.ps,
            self.avail,
            self.cap,
            self.net,
            self.rack_net,
            self.per_host,
            self.per_rack,
            self.memory_bytes / 1024,
            self.seed
        )
    }
}

/// Written as its canonical spec string.
impl serde::Serialize for SyntheticSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Read from a spec string.
impl<'de> serde::Deserialize<'de> for SyntheticSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        SyntheticSpec::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::link::Locality;
    use crate::cluster::model::DeviceId;

    const SPEC: &str =
        "synthetic:workers=1000:ps=16:avail=beta(2,2):cap=lognormal(0,0.5):net=10gbit/50us";

    #[test]
    fn parses_the_issue_example_with_defaults() {
        let s = SyntheticSpec::parse(SPEC).unwrap();
        assert_eq!((s.workers, s.ps, s.seed), (1000, 16, 1));
        assert_eq!(s.avail, Distribution::Beta { a: 2.0, b: 2.0 });
        assert_eq!(
            s.cap,
            Distribution::LogNormal {
                mu: 0.0,
                sigma: 0.5
            }
        );
        assert_eq!(s.net.bandwidth, 1.25e9);
        assert!((s.net.latency - 50e-6).abs() < 1e-15);
        assert_eq!(s.rack_net.bandwidth, 0.625e9);
        // The canonical form parses back to the same spec.
        assert_eq!(SyntheticSpec::parse(&s.to_string()).unwrap(), s);
        let s = SyntheticSpec::parse(
            "workers=8:seed=3:per-host=2:per-rack=2:mem=1g:rack-net=1gb/1ms:avail=0.5",
        )
        .unwrap();
        assert_eq!(s.memory_bytes, 1 << 30);
        assert_eq!(s.rack_net.bandwidth, 1e9);
        assert_eq!(s.avail, Distribution::Const(0.5));
        assert_eq!(s.worker_bandwidth(), 1.25e9 / 2.0);
    }

    #[test]
    fn rejects_bad_fields_naming_them() {
        for (spec, field, needle) in [
            ("synthetic:ps=2", "workers", "required"),
            ("synthetic:workers=0", "workers", "1..="),
            ("synthetic:workers=x", "workers", "whole number"),
            (
                "synthetic:workers=2:avail=lognormal(0,1)",
                "avail",
                "above 1",
            ),
            ("synthetic:workers=2:avail=normal(0.5,0.1)", "avail", "beta"),
            ("synthetic:workers=2:cap=normal(1,0.1)", "cap", "≤ 0"),
            (
                "synthetic:workers=2:avail=beta(0,2)",
                "avail",
                "positive shapes",
            ),
            ("synthetic:workers=2:avail=beta(2)", "avail", "2 parameters"),
            (
                "synthetic:workers=2:avail=uniform(0.5,1.5)",
                "avail",
                "outside 0–1",
            ),
            ("synthetic:workers=2:cap=uniform(2,1)", "cap", "lo < hi"),
            (
                "synthetic:workers=2:cap=gamma(2,1)",
                "cap",
                "unknown distribution",
            ),
            ("synthetic:workers=2:cap=lognormal(0,-1)", "cap", "sigma"),
            (
                "synthetic:workers=2:cap=lognormal(0,x)",
                "cap",
                "not a finite number",
            ),
            ("synthetic:workers=2:avail=1.5", "avail", "(0, 1]"),
            ("synthetic:workers=2:net=10gbit", "net", "BANDWIDTH/LATENCY"),
            (
                "synthetic:workers=2:net=10furlong/1us",
                "net",
                "needs a unit",
            ),
            ("synthetic:workers=2:net=0gbit/1us", "net", "positive"),
            ("synthetic:workers=2:colour=red", "colour", "unknown key"),
            ("synthetic:workers=2:workers=3", "workers", "twice"),
        ] {
            let err = SyntheticSpec::parse(spec).unwrap_err();
            match &err {
                Error::SyntheticSpec { field: f, .. } => assert_eq!(f, field, "{spec}: {err}"),
                other => panic!("{spec}: not a SyntheticSpec error: {other}"),
            }
            assert!(err.to_string().contains(needle), "{spec}: {err}");
        }
    }

    #[test]
    fn a_seed_gives_the_same_cluster_and_another_seed_another() {
        let a = SyntheticSpec::parse(SPEC).unwrap().build();
        let b = SyntheticSpec::parse(SPEC).unwrap().build();
        assert_eq!(a, b);
        let c = SyntheticSpec::parse(&format!("{SPEC}:seed=2"))
            .unwrap()
            .build();
        assert_ne!(a.cluster.devices, c.cluster.devices);
        assert_eq!(a.cluster.devices.len(), 1016);
        assert_eq!((a.workers.len(), a.ps.len()), (1000, 16));
        a.cluster.validate().unwrap();
        // Drawn figures spread as asked: availability in 0–1 with mean ≈ ½, capability
        // median ≈ nominal.
        let w = &a.cluster.devices[..1000];
        let mean_avail = w.iter().map(|d| d.availability).sum::<f64>() / 1000.0;
        assert!((mean_avail - 0.5).abs() < 0.05, "{mean_avail}");
        let mut caps: Vec<f64> = w.iter().map(|d| d.peak_flops / NOMINAL_CPU_FLOPS).collect();
        caps.sort_by(f64::total_cmp);
        assert!((caps[500] - 1.0).abs() < 0.15, "median {}", caps[500]);
        assert!(
            caps[0] < 0.5 && caps[999] > 2.0,
            "{} {}",
            caps[0],
            caps[999]
        );
    }

    #[test]
    fn links_follow_host_and_rack_tiers() {
        let s = SyntheticSpec::parse("synthetic:workers=8:per-host=2:per-rack=2").unwrap();
        let c = s.build().cluster;
        // Workers 0, 1 share host 0; 2, 3 host 1 (rack 0); 4.. are in rack 1.
        assert_eq!(
            c.locality(DeviceId::new(0), DeviceId::new(1)),
            Locality::SameHost
        );
        assert_eq!(
            c.locality(DeviceId::new(0), DeviceId::new(2)),
            Locality::CrossHost
        );
        assert_eq!(
            c.locality(DeviceId::new(0), DeviceId::new(4)),
            Locality::CrossRack
        );
        assert_eq!(
            c.link(DeviceId::new(0), DeviceId::new(2)),
            Some(s.net.link())
        );
        assert_eq!(
            c.link(DeviceId::new(0), DeviceId::new(4)),
            Some(s.rack_net.link())
        );
        let m = c.link_matrix();
        let n = c.devices.len();
        assert_eq!(m[4], s.rack_net.link());
        assert_eq!(m[n + 2], s.net.link());
    }
}
