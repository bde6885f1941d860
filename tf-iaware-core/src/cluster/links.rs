//! The links between every ordered pair of a cluster's devices in space linear in devices and
//! explicit links: [`LinkTable`].
//!
//! Without an explicit [`LinkSpec`](super::model::LinkSpec), the link between two devices is the
//! [`LinkDefaults`](super::model::LinkDefaults) entry of their [`Locality`], and their locality
//! follows from a few coordinates of each device alone — its machine, its rack, its process and
//! whether it is a CPU — so the table keeps those coordinates (four words per device), the six
//! tier links, the devices of each machine, and the explicit links sorted by sender. A dense
//! `devices × devices` table (what the cost model kept before: 32 bytes per ordered pair, 32 MiB
//! at 1,001 devices) gives the same figures, bit for bit; the test below compares the two.
//!
//! **A throttled task answers late.** A transfer between two processes is gRPC work on both
//! ends' CPUs: a task whose process gets `c < 1` cores now (availability × allotment) serialises,
//! sends and receives `1 / c` times slower. A default (locality) link between processes is
//! therefore stretched by the larger [`answer_factor`] of its two ends; a calibrated (explicit)
//! link keeps its figures, which were measured at the throttle. The means used for ranking
//! (`mean_latency`, `mean_inv_bandwidth`) are of the unstretched links.
//!
//! **A task held to a fraction of a core waits out its quota.** A CFS quota below one core runs
//! the process `c P` of every period `P` and stops it for the rest; a task that runs ops of the
//! step spends its quota on them, and a tensor sent to it or asked of it then waits for the next
//! period. Every link between processes with such a task at an end — calibrated links too: the
//! calibration times transfers while the task idles, unthrottled — adds the larger
//! [`throttle_wait`] of its ends to its latency (measured on `paper`: a `heft` split that put
//! 150 ops on a 0.3-core worker ran 451 ms a step where 222 were predicted without it).

mod build;

use std::collections::HashMap;

use build::{by_machine, explicit_links, Coordinates};

use super::link::Locality;
use super::model::{Cluster, Device, Link, MIN_AVAILABILITY};
use super::{DeviceId, DeviceType};

/// No rack (unknown).
const NO_RACK: u32 = u32::MAX;

/// The tiers of [`Locality`], as indices into the tier tables.
const TIERS: [Locality; 6] = [
    Locality::SameDevice,
    Locality::SameProcess,
    Locality::SameProcessAccelerator,
    Locality::SameHost,
    Locality::CrossHost,
    Locality::CrossRack,
];

#[inline]
const fn tier_index(l: Locality) -> usize {
    match l {
        Locality::SameDevice => 0,
        Locality::SameProcess => 1,
        Locality::SameProcessAccelerator => 2,
        Locality::SameHost => 3,
        Locality::CrossHost => 4,
        Locality::CrossRack => 5,
    }
}

/// How many times slower than a process with a full core the task of device `d` answers a
/// transfer: `1 / c` for a CPU device whose process gets `c` = availability × allotment (cores;
/// the allotment taken as one core when unknown) below one core, floored at
/// [`MIN_AVAILABILITY`]; 1 for other devices and for CPU devices with a core or more.
pub(crate) fn answer_factor(d: &Device) -> f64 {
    if d.device_type != DeviceType::Cpu {
        return 1.0;
    }
    let cores = d.availability * d.live.allotment.unwrap_or(1.0);
    if cores.is_finite() {
        1.0 / cores.clamp(MIN_AVAILABILITY, 1.0)
    } else {
        1.0
    }
}

/// Length of a CFS quota period, seconds: the kernel's default (`cpu.cfs_period_us` 100,000).
pub(crate) const CFS_PERIOD_S: f64 = 0.1;

/// How long a transfer to or from the task of device `d` waits, on average, for that task's
/// quota to let it run, seconds: `P (1 − c) / 2` — half the throttled part of a period `P`
/// ([`CFS_PERIOD_S`]) — for a CPU device whose allotment is a quota below one core and whose
/// process gets `c` = availability × allotment of a core; 0 for other devices.
pub(crate) fn throttle_wait(d: &Device) -> f64 {
    let Some(allotment) = d.live.allotment.filter(|a| *a < 1.0) else {
        return 0.0;
    };
    if d.device_type != DeviceType::Cpu {
        return 0.0;
    }
    let cores = d.availability * allotment;
    if cores.is_finite() {
        CFS_PERIOD_S * (1.0 - cores.clamp(0.0, 1.0)) / 2.0
    } else {
        0.0
    }
}

/// Tiers between two processes (gRPC): stretched by [`answer_factor`].
#[inline]
const fn between_processes(tier: usize) -> bool {
    tier >= 3
}

/// An explicit link from one device, by receiver.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Explicit {
    /// Receiving device.
    to: u32,
    /// Latency, s.
    latency: f64,
    /// 1 / bandwidth, s/byte.
    inv_bandwidth: f64,
    /// The link as given.
    link: Link,
}

/// Every link of a cluster: per-device locality coordinates, one link per [`Locality`] tier and
/// the explicit per-pair links, `O(devices + explicit links)` in memory.
///
/// Latencies are seconds, inverse bandwidths seconds per byte; both are 0 from a device to
/// itself (no transfer).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LinkTable {
    /// Machine of each device (interned).
    machine: Vec<u32>,
    /// Rack of each device (interned; [`NO_RACK`] when unknown).
    rack: Vec<u32>,
    /// The same as floats (−1 when unknown), for the receivers loop of
    /// [`LinkRow::max_arrivals`]: compared lane by lane with the arrival times, it vectorises.
    rack_key: Vec<f64>,
    /// Process of each device (interned host string and job/replica/task; a device whose name
    /// does not parse has a process of its own).
    process: Vec<u32>,
    /// Whether each device is a CPU.
    cpu: Vec<bool>,
    /// Devices of machine `m`: `machine_devices[machine_start[m]..machine_start[m + 1]]`,
    /// ascending.
    machine_start: Vec<u32>,
    machine_devices: Vec<u32>,
    /// Link, latency and inverse bandwidth of each tier (by `tier_index`); the
    /// [`Locality::SameDevice`] tier is a zero-latency, infinite-bandwidth link.
    tier_link: [Link; 6],
    tier_latency: [f64; 6],
    tier_inv_bandwidth: [f64; 6],
    /// Explicit links from device `d`: `explicit[explicit_start[d]..explicit_start[d + 1]]`,
    /// by ascending receiver, one per ordered pair (the last [`Cluster::links`] entry wins).
    explicit_start: Vec<u32>,
    explicit: Vec<Explicit>,
    /// Mean latency (s) and mean inverse bandwidth (s/byte) over all ordered pairs of distinct
    /// devices (0 with fewer than two devices).
    mean_latency: f64,
    mean_inv_bandwidth: f64,
    /// [`answer_factor`] of each device (≥ 1).
    answer: Vec<f64>,
    /// [`throttle_wait`] of each device, seconds.
    wait: Vec<f64>,
}

/// `n × (n − 1)`: ordered pairs of distinct members of a set of `n`.
fn ordered_pairs(n: u64) -> u64 {
    n * n.saturating_sub(1)
}

impl LinkTable {
    /// The links of `cluster`: by locality, except where [`Cluster::links`] names the pair
    /// (explicit links that name an unknown device, or a device and itself, are ignored).
    /// `O(devices + explicit links)` time and memory (hashing each device's machine, rack and
    /// process once).
    pub(crate) fn new(cluster: &Cluster) -> Self {
        let coords = Coordinates::of(cluster);
        let (machine_start, machine_devices) = by_machine(&coords.machine, coords.n_machines);
        let defaults = &cluster.link_defaults;
        let tier_link = TIERS.map(|t| {
            defaults
                .for_locality(t)
                .unwrap_or(Link::new(0.0, f64::INFINITY))
        });
        let tier_latency = tier_link.map(|l| l.latency);
        let tier_inv_bandwidth = tier_link.map(|l| 1.0 / l.bandwidth);
        let (explicit_start, explicit) = explicit_links(cluster);
        let rack_key = coords
            .rack
            .iter()
            .map(|&r| if r == NO_RACK { -1.0 } else { f64::from(r) })
            .collect();
        let mut table = LinkTable {
            machine: coords.machine,
            rack: coords.rack,
            rack_key,
            process: coords.process,
            cpu: coords.cpu,
            machine_start,
            machine_devices,
            tier_link,
            tier_latency,
            tier_inv_bandwidth,
            explicit_start,
            explicit,
            mean_latency: 0.0,
            mean_inv_bandwidth: 0.0,
            answer: cluster.devices.iter().map(answer_factor).collect(),
            wait: cluster.devices.iter().map(throttle_wait).collect(),
        };
        table.set_means(coords.n_processes);
        table
    }

    /// Mean latency and inverse bandwidth over all ordered pairs of distinct devices, from the
    /// number of pairs in each tier (counted by group sizes) corrected by the explicit links.
    fn set_means(&mut self, n_processes: usize) {
        let n = self.machine.len() as u64;
        let total = ordered_pairs(n);
        if total == 0 {
            return;
        }
        let mut per_process = vec![(0u64, 0u64); n_processes];
        for (&p, &c) in self.process.iter().zip(&self.cpu) {
            let e = &mut per_process[p as usize];
            e.0 += 1;
            e.1 += u64::from(c);
        }
        let same_process: u64 = per_process.iter().map(|e| ordered_pairs(e.0)).sum();
        let cpu_pairs: u64 = per_process.iter().map(|e| ordered_pairs(e.1)).sum();
        let same_machine: u64 = self
            .machine_start
            .windows(2)
            .map(|w| ordered_pairs(u64::from(w[1] - w[0])))
            .sum();
        // Ordered pairs in two known, different racks, less those on one machine.
        let mut per_rack: HashMap<u32, u64> = HashMap::new();
        let mut per_machine_rack: HashMap<(u32, u32), u64> = HashMap::new();
        let mut per_machine_known: HashMap<u32, u64> = HashMap::new();
        let mut known = 0u64;
        for (&m, &r) in self.machine.iter().zip(&self.rack) {
            if r != NO_RACK {
                known += 1;
                *per_rack.entry(r).or_default() += 1;
                *per_machine_rack.entry((m, r)).or_default() += 1;
                *per_machine_known.entry(m).or_default() += 1;
            }
        }
        let square = |k: u64| k * k;
        let racks_apart = square(known) - per_rack.values().map(|&k| square(k)).sum::<u64>();
        let apart_on_one_machine = per_machine_known.values().map(|&k| square(k)).sum::<u64>()
            - per_machine_rack.values().map(|&k| square(k)).sum::<u64>();
        let cross_rack = racks_apart - apart_on_one_machine;
        let mut count = [0u64; 6];
        count[tier_index(Locality::SameProcess)] = cpu_pairs;
        count[tier_index(Locality::SameProcessAccelerator)] = same_process - cpu_pairs;
        count[tier_index(Locality::SameHost)] = same_machine - same_process;
        count[tier_index(Locality::CrossRack)] = cross_rack;
        count[tier_index(Locality::CrossHost)] = total - same_machine - cross_rack;
        let (mut latency, mut inv_bandwidth) = (0.0f64, 0.0f64);
        for ((&k, &l), &i) in count
            .iter()
            .zip(&self.tier_latency)
            .zip(&self.tier_inv_bandwidth)
        {
            latency += k as f64 * l;
            inv_bandwidth += k as f64 * i;
        }
        for from in 0..self.machine.len() {
            for e in self.explicit_of(from) {
                let t = self.tier(from, e.to as usize);
                latency += e.latency - self.tier_latency[t];
                inv_bandwidth += e.inv_bandwidth - self.tier_inv_bandwidth[t];
            }
        }
        self.mean_latency = latency / total as f64;
        self.mean_inv_bandwidth = inv_bandwidth / total as f64;
    }

    /// Number of devices.
    pub(crate) fn len(&self) -> usize {
        self.machine.len()
    }

    #[inline]
    fn explicit_of(&self, from: usize) -> &[Explicit] {
        &self.explicit[self.explicit_start[from] as usize..self.explicit_start[from + 1] as usize]
    }

    /// Tier (`tier_index`) of the pair `a → b` by locality alone.
    #[inline]
    fn tier(&self, a: usize, b: usize) -> usize {
        if a == b {
            0
        } else if self.machine[a] != self.machine[b] {
            let (ra, rb) = (self.rack[a], self.rack[b]);
            if ra != NO_RACK && rb != NO_RACK && ra != rb {
                5
            } else {
                4
            }
        } else if self.process[a] != self.process[b] {
            3
        } else if self.cpu[a] && self.cpu[b] {
            1
        } else {
            2
        }
    }

    /// The explicit link `from → to`, if the cluster names one.
    #[inline]
    fn explicit_link(&self, from: usize, to: usize) -> Option<&Explicit> {
        let row = self.explicit_of(from);
        if row.is_empty() {
            return None;
        }
        row.binary_search_by_key(&(to as u32), |e| e.to)
            .ok()
            .map(|k| &row[k])
    }

    /// The link from `from` to `to` (a zero-latency, infinite-bandwidth link when they are the
    /// same device).
    #[inline]
    pub(crate) fn link(&self, from: DeviceId, to: DeviceId) -> Link {
        let (a, b) = (from.index(), to.index());
        let wait = self.wait_between(a, b);
        match self.explicit_link(a, b) {
            Some(e) => Link::new(e.link.latency + wait, e.link.bandwidth),
            None => {
                let t = self.tier(a, b);
                let l = self.tier_link[t];
                let f = self.stretch(t, a, b);
                Link::new(l.latency * f + wait, l.bandwidth / f)
            }
        }
    }

    /// What a transfer `a → b` waits for a quota-bound end, seconds: the larger
    /// [`throttle_wait`] of its ends between processes, 0 within one.
    #[inline]
    fn wait_between(&self, a: usize, b: usize) -> f64 {
        if self.process[a] != self.process[b] {
            self.wait[a].max(self.wait[b])
        } else {
            0.0
        }
    }

    /// How much a default link of tier `tier` from `a` to `b` is stretched: the larger
    /// [`answer_factor`] of its ends between processes, 1 within one.
    #[inline]
    fn stretch(&self, tier: usize, a: usize, b: usize) -> f64 {
        if between_processes(tier) {
            self.answer[a].max(self.answer[b])
        } else {
            1.0
        }
    }

    /// Latency (s) and inverse bandwidth (s/byte) of the link `from → to`; both 0 when
    /// `from == to`.
    #[inline]
    pub(crate) fn parts(&self, from: DeviceId, to: DeviceId) -> (f64, f64) {
        let (a, b) = (from.index(), to.index());
        let wait = self.wait_between(a, b);
        match self.explicit_link(a, b) {
            Some(e) => (e.latency + wait, e.inv_bandwidth),
            None => {
                let t = self.tier(a, b);
                let f = self.stretch(t, a, b);
                (
                    self.tier_latency[t] * f + wait,
                    self.tier_inv_bandwidth[t] * f,
                )
            }
        }
    }

    /// The links from device `from` to every device.
    #[inline]
    pub(crate) fn row(&self, from: DeviceId) -> LinkRow<'_> {
        LinkRow {
            table: self,
            from: from.index(),
        }
    }

    /// Mean latency, s, over all ordered pairs of distinct devices (0 with fewer than two).
    pub(crate) fn mean_latency(&self) -> f64 {
        self.mean_latency
    }

    /// Mean inverse bandwidth, s/byte, over all ordered pairs of distinct devices (0 with fewer
    /// than two).
    pub(crate) fn mean_inv_bandwidth(&self) -> f64 {
        self.mean_inv_bandwidth
    }

    /// Heap bytes the table holds (for the memory figures of the benches and tests).
    #[cfg(test)]
    pub(crate) fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.machine.capacity() * size_of::<u32>()
            + self.rack.capacity() * size_of::<u32>()
            + self.rack_key.capacity() * size_of::<f64>()
            + self.process.capacity() * size_of::<u32>()
            + self.cpu.capacity()
            + self.machine_start.capacity() * size_of::<u32>()
            + self.machine_devices.capacity() * size_of::<u32>()
            + self.explicit_start.capacity() * size_of::<u32>()
            + self.explicit.capacity() * size_of::<Explicit>()
            + self.answer.capacity() * size_of::<f64>()
            + self.wait.capacity() * size_of::<f64>()
    }
}

/// The links from one device to every device of a [`LinkTable`] (see [`LinkTable::row`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkRow<'a> {
    table: &'a LinkTable,
    from: usize,
}

impl LinkRow<'_> {
    /// For every receiving device `d`: `out[d] = max(out[d], ready + latency(d) + bytes ×
    /// inverse_bandwidth(d))` — when a tensor of `bytes` bytes ready at `ready` seconds would be
    /// on each device. `O(devices)`, in one pass over the receivers (the devices of other
    /// machines by their rack alone; those of the sender's machine and the explicit links one
    /// by one).
    ///
    /// # Panics
    /// If `out` does not have one slot per device.
    #[inline]
    pub(crate) fn max_arrivals(&self, ready: f64, bytes: f64, out: &mut [f64]) {
        let t = self.table;
        let n = t.len();
        assert_eq!(out.len(), n, "one arrival slot per device");
        let a = self.from;
        let ra = t.rack_key[a];
        // Tier links (latency, s; 1/bandwidth, s/byte), stretched below by the slower end.
        let part = |k: usize| (t.tier_latency[k], t.tier_inv_bandwidth[k]);
        let host = part(tier_index(Locality::CrossHost));
        let rack = if ra < 0.0 {
            host
        } else {
            part(tier_index(Locality::CrossRack))
        };
        let (fa, wa) = (t.answer[a], t.wait[a]);
        // Devices of other machines, `lo..hi`, with no explicit link from `a`: across racks
        // when both racks are known and differ.
        let others = |out: &mut [f64], lo: usize, hi: usize| {
            for (((o, &r), &fr), &wr) in out[lo..hi]
                .iter_mut()
                .zip(&t.rack_key[lo..hi])
                .zip(&t.answer[lo..hi])
                .zip(&t.wait[lo..hi])
            {
                let (l, i) = if r == ra || r < 0.0 { host } else { rack };
                let f = fa.max(fr);
                *o = o.max(ready + l * f + wa.max(wr) + bytes * i * f);
            }
        };
        // The exceptions, by ascending receiver: the sender's machine (itself included) and its
        // explicit links.
        let m = t.machine[a] as usize;
        let same = &t.machine_devices[t.machine_start[m] as usize..t.machine_start[m + 1] as usize];
        let explicit = t.explicit_of(a);
        if explicit.is_empty() && same.len() == 1 {
            // The common case at scale: alone on its machine, no explicit links.
            others(out, 0, a);
            out[a] = out[a].max(ready + t.tier_latency[0] + bytes * t.tier_inv_bandwidth[0]);
            others(out, a + 1, n);
            return;
        }
        let (mut i, mut j, mut pos) = (0usize, 0usize, 0usize);
        loop {
            let s = same.get(i).map_or(usize::MAX, |&d| d as usize);
            let e = explicit.get(j).map_or(usize::MAX, |e| e.to as usize);
            let k = s.min(e);
            if k == usize::MAX {
                break;
            }
            others(out, pos, k);
            let (lat, inv) = if e == k {
                (explicit[j].latency, explicit[j].inv_bandwidth)
            } else {
                let tier = t.tier(a, k);
                let f = t.stretch(tier, a, k);
                (t.tier_latency[tier] * f, t.tier_inv_bandwidth[tier] * f)
            };
            out[k] = out[k].max(ready + lat + t.wait_between(a, k) + bytes * inv);
            i += usize::from(s == k);
            j += usize::from(e == k);
            pos = k + 1;
        }
        others(out, pos, n);
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::cluster::model::{Device, LinkDefaults};
    use crate::cluster::SyntheticSpec;

    fn random_link(rng: &mut StdRng) -> Link {
        Link::new(rng.gen_range(0.0..1e-3), rng.gen_range(1e6..1e11))
    }

    /// A cluster of `n` devices over a few machines, processes, racks (some unknown) and types,
    /// some names that do not parse and some hosts with ports, random default links and
    /// `explicit` random explicit links (repeated pairs, self links and unknown names among
    /// them).
    fn random_cluster(rng: &mut StdRng, n: usize, explicit: usize) -> Cluster {
        let machines = rng.gen_range(1..=n.max(1));
        let mut devices = Vec::with_capacity(n);
        for i in 0..n {
            let m = rng.gen_range(0..machines);
            let task = rng.gen_range(0..3);
            let ty = if rng.gen_bool(0.3) { "GPU" } else { "CPU" };
            let name = if rng.gen_bool(0.05) {
                format!("not a device name {i}")
            } else {
                format!("/job:w/replica:0/task:{task}/device:{ty}:{i}")
            };
            let host = match rng.gen_range(0..3) {
                0 => format!("m{m}"),
                1 => format!("m{m}:{}", 2000 + task),
                _ => format!("m{m}:2222"),
            };
            let mut d = Device::nominal(&name, ty, None, &host);
            d.rack = match rng.gen_range(0..4) {
                0 => None,
                r => Some(format!("r{}", (m + r) % 3)),
            };
            devices.push(d);
        }
        let mut c = Cluster::new(devices);
        c.link_defaults = LinkDefaults {
            same_process: random_link(rng),
            same_process_accelerator: random_link(rng),
            same_host: random_link(rng),
            cross_host: random_link(rng),
            cross_rack: random_link(rng),
        };
        for _ in 0..explicit {
            let name = |rng: &mut StdRng| {
                if rng.gen_bool(0.05) {
                    "/job:nobody/replica:0/task:0/device:CPU:0".to_string()
                } else {
                    c.devices[rng.gen_range(0..n)].name.clone()
                }
            };
            let (from, to) = (name(rng), name(rng));
            c.links.push(crate::cluster::model::LinkSpec {
                from,
                to,
                link: random_link(rng),
            });
        }
        c
    }

    /// Compensated (Neumaier) running sum: the exact sum to about one rounding.
    #[derive(Default)]
    struct Sum {
        sum: f64,
        carry: f64,
    }

    impl Sum {
        fn add(&mut self, x: f64) {
            let t = self.sum + x;
            self.carry += if self.sum.abs() >= x.abs() {
                (self.sum - t) + x
            } else {
                (x - t) + self.sum
            };
            self.sum = t;
        }

        fn value(&self) -> f64 {
            self.sum + self.carry
        }
    }

    /// The dense reference: every pair's link, latency and inverse bandwidth (bit for bit), and
    /// the means over pairs (to 1 part in 10¹²: the table counts pairs per tier, the reference
    /// sums pair by pair, compensated).
    fn check_against_dense(c: &Cluster) {
        let n = c.devices.len();
        let dense = c.link_matrix();
        let table = LinkTable::new(c);
        assert_eq!(table.len(), n);
        let (mut lat, mut inv, mut pairs) = (Sum::default(), Sum::default(), 0usize);
        let mut out = vec![0.0; n];
        let mut expected = vec![0.0f64; n];
        for a in c.device_ids() {
            let row = table.row(a);
            for b in c.device_ids() {
                let l = dense[a.index() * n + b.index()];
                assert_eq!(table.link(a, b), l, "link {a} → {b}");
                let (la, ia) = table.parts(a, b);
                assert_eq!(la.to_bits(), l.latency.to_bits(), "latency {a} → {b}");
                assert_eq!(
                    ia.to_bits(),
                    (1.0 / l.bandwidth).to_bits(),
                    "1/bandwidth {a} → {b}"
                );
                if a != b {
                    lat.add(l.latency);
                    inv.add(1.0 / l.bandwidth);
                    pairs += 1;
                }
            }
            // Arrivals of two tensors in a row, against the dense loop.
            for (ready, bytes) in [(0.5, 1e6), (0.75, 10.0)] {
                row.max_arrivals(ready, bytes, &mut out);
                for (b, e) in expected.iter_mut().enumerate() {
                    let l = dense[a.index() * n + b];
                    *e = (*e).max(ready + l.latency + bytes * (1.0 / l.bandwidth));
                }
                assert_eq!(out, expected, "arrivals from {a}");
            }
            out.fill(0.0);
            expected.fill(0.0);
        }
        if pairs > 0 {
            let (ml, mi) = (lat.value() / pairs as f64, inv.value() / pairs as f64);
            assert!(
                (table.mean_latency() - ml).abs() <= 1e-12 * ml,
                "{} vs {ml}",
                table.mean_latency()
            );
            assert!(
                (table.mean_inv_bandwidth() - mi).abs() <= 1e-12 * mi,
                "{} vs {mi}",
                table.mean_inv_bandwidth()
            );
        } else {
            assert_eq!(
                (table.mean_latency(), table.mean_inv_bandwidth()),
                (0.0, 0.0)
            );
        }
    }

    #[test]
    fn the_table_gives_the_dense_figures_on_random_clusters() {
        let mut rng = StdRng::seed_from_u64(15);
        for _ in 0..60 {
            let n = rng.gen_range(0..40);
            let explicit = if n == 0 { 0 } else { rng.gen_range(0..3 * n) };
            check_against_dense(&random_cluster(&mut rng, n, explicit));
        }
    }

    #[test]
    fn the_table_gives_the_dense_figures_on_synthetic_clusters_with_explicit_links() {
        let spec = SyntheticSpec::parse(
            "synthetic:workers=300:ps=5:per-host=4:per-rack=8:net=10gbit/50us:rack-net=1gbit/1ms",
        )
        .unwrap();
        let mut c = spec.build().cluster;
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..200 {
            let a = rng.gen_range(0..c.devices.len());
            let b = rng.gen_range(0..c.devices.len());
            let (from, to) = (c.devices[a].name.clone(), c.devices[b].name.clone());
            if a != b {
                c.set_link(&from, &to, random_link(&mut rng)).unwrap();
            }
        }
        check_against_dense(&c);
    }

    #[test]
    fn memory_is_linear_in_devices() {
        let bytes = |workers: usize| {
            let spec = SyntheticSpec::parse(&format!("synthetic:workers={workers}:ps=4")).unwrap();
            LinkTable::new(&spec.build().cluster).heap_bytes() as f64 / (workers + 4) as f64
        };
        // Bytes per device stay the same from 100 to 10,000 devices (a dense table's would grow
        // a hundredfold: 32 bytes per ordered pair).
        let (small, large) = (bytes(100), bytes(10_000));
        assert!(large <= small * 1.2, "{small} → {large} bytes per device");
        assert!(large < 64.0, "{large} bytes per device");
    }

    #[test]
    fn a_throttled_task_answers_transfers_late() {
        let dev = |task: u32, i: u32| {
            Device::nominal(
                &format!("/job:worker/replica:0/task:{task}/device:CPU:{i}"),
                "CPU",
                None,
                &format!("127.0.0.1:{}", 2222 + task),
            )
        };
        // Task 1 is a 0.075-core worker: a 0.3-core allotment of which it gets a quarter.
        let mut slow = dev(1, 0);
        slow.availability = 0.25;
        slow.live.allotment = Some(0.3);
        let mut c = Cluster::new(vec![dev(0, 0), dev(0, 1), slow, dev(2, 0)]);
        assert_eq!(answer_factor(&c.devices[0]), 1.0);
        assert!((answer_factor(&c.devices[2]) - 1.0 / 0.075).abs() < 1e-9);
        c.links.push(crate::cluster::model::LinkSpec {
            from: c.devices[3].name.clone(),
            to: c.devices[2].name.clone(),
            link: Link::new(2e-3, 1e8),
        });
        let t = LinkTable::new(&c);
        let id = DeviceId::new;
        let base = c.link_defaults.same_host;
        // To and from the throttled task: stretched by 1 / 0.075, both ways, and waiting out
        // its quota for half the 92.5 ms of each 100 ms period it does not run.
        let wait = 0.1 * (1.0 - 0.075) / 2.0;
        assert!((throttle_wait(&c.devices[2]) - wait).abs() < 1e-15);
        assert_eq!(throttle_wait(&c.devices[0]), 0.0);
        for (a, b) in [(0, 2), (2, 0), (2, 3)] {
            let (l, i) = t.parts(id(a), id(b));
            assert!((l - base.latency / 0.075 - wait).abs() < 1e-12, "{a}→{b}");
            assert!((i - 1.0 / base.bandwidth / 0.075).abs() < 1e-18);
            assert!((t.link(id(a), id(b)).latency - l).abs() < 1e-15);
        }
        // Between two full tasks, within a process, and over a calibrated link: as they are.
        assert_eq!(t.parts(id(0), id(3)).0, base.latency);
        assert_eq!(
            t.parts(id(0), id(1)).0,
            c.link_defaults.same_process.latency
        );
        // A calibrated link keeps its figures, measured while the task idled: plus the wait.
        assert!((t.parts(id(3), id(2)).0 - (2e-3 + wait)).abs() < 1e-15);
        assert_eq!(
            t.parts(id(3), id(2)).1,
            1e-8,
            "measured at the throttle already"
        );
        // Within the throttled task's process nothing waits (one process, one quota).
        let mut same = c.clone();
        same.devices[1] = same.devices[2].clone();
        same.devices[1].name = "/job:worker/replica:0/task:1/device:CPU:1".into();
        let s = LinkTable::new(&same);
        assert_eq!(
            s.parts(id(1), id(2)).0,
            same.link_defaults.same_process.latency
        );
        // The receivers loop agrees with the pairs.
        for a in 0..4 {
            let mut out = vec![0.0; 4];
            t.row(id(a)).max_arrivals(1.0, 1e6, &mut out);
            for (b, o) in out.iter().enumerate() {
                let (l, i) = t.parts(id(a), id(b));
                assert!((o - (1.0 + l + 1e6 * i)).abs() < 1e-12, "{a}→{b}");
            }
        }
    }
}
