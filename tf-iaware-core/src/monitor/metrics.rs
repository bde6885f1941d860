//! [`Snapshot`] ↔ Prometheus metrics. node_exporter and DCGM exporter names where they exist
//! (units converted: bytes → MiB for `DCGM_FI_DEV_FB_*`, NVML mW → W), `tf_iaware_*` for ours.
//! Smoothed gauges carry a `stat` label (`last`, `ewma`, `mean`, `min`, `max`).
//!
//! [`to_exposition`] writes every field of a snapshot, so [`from_exposition`] of our own page
//! gives the same snapshot back (except `source`, `age_ms`, `stale`). A page from a plain
//! node_exporter or dcgm-exporter gives the raw counters and gauges those exporters carry;
//! [`Snapshot`] fields they lack stay empty (the scraper derives rates from two scrapes).

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::monitor::cgroup::parse_cpu_list;
use crate::monitor::exposition::{Exposition, Family, MetricType, Sample};
use crate::monitor::snapshot::{
    CgroupSnapshot, CoreSnapshot, CpuModeSeconds, DeviceAvailability, DeviceKind, GpuSnapshot,
    LoadAverage, NetworkInterface, Smoothed, Snapshot,
};

/// Metric whose presence marks a page as written by tf-iaware.
pub const INFO: &str = "tf_iaware_info";

const MIB: f64 = 1024.0 * 1024.0;
const STATS: [&str; 5] = ["last", "ewma", "mean", "min", "max"];
const CPU_MODES: [&str; 8] = [
    "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal",
];

fn stats(s: &Smoothed) -> [f64; 5] {
    [s.last, s.ewma, s.mean, s.min, s.max]
}

fn push_smoothed(f: &mut Family, labels: &[(&str, &str)], s: &Smoothed) {
    for (stat, v) in STATS.iter().zip(stats(s)) {
        let mut l = labels.to_vec();
        l.push(("stat", stat));
        f.push(&l, v);
    }
}

fn mode_values(s: &CpuModeSeconds) -> [Option<f64>; 8] {
    [
        Some(s.user),
        Some(s.nice),
        Some(s.system),
        Some(s.idle),
        s.iowait,
        s.irq,
        s.softirq,
        s.steal,
    ]
}

/// Builds a page family by family, skipping families without samples.
struct Page(Exposition);

impl Page {
    fn family(&mut self, name: &str, kind: MetricType, help: &str, fill: impl FnOnce(&mut Family)) {
        let mut f = Family::new(name, kind, help);
        fill(&mut f);
        if !f.samples.is_empty() {
            self.0.add(f);
        }
    }

    fn gauge(&mut self, name: &str, help: &str, v: Option<f64>) {
        self.family(name, MetricType::Gauge, help, |f| {
            if let Some(v) = v {
                f.push(&[], v)
            }
        });
    }

    fn counter(&mut self, name: &str, help: &str, v: Option<f64>) {
        self.family(name, MetricType::Counter, help, |f| {
            if let Some(v) = v {
                f.push(&[], v)
            }
        });
    }

    fn smoothed(&mut self, name: &str, help: &str, v: Option<&Smoothed>) {
        self.family(name, MetricType::Gauge, help, |f| {
            if let Some(v) = v {
                push_smoothed(f, &[], v)
            }
        });
    }
}

/// Renders a snapshot as a page in the text format (see [`to_exposition`]).
pub fn render(s: &Snapshot) -> String {
    let mut page = render_without_age(s);
    page.push_str(&render_age(s.age_ms));
    page
}

/// Everything [`render`] writes but the reading's age (which changes with every request while
/// the rest changes once per reading, so a server can cache this part).
pub fn render_without_age(s: &Snapshot) -> String {
    to_exposition_without_age(s).render()
}

/// The `tf_iaware_reading_age_seconds` family for a reading `age_ms` old.
pub fn render_age(age_ms: u64) -> String {
    let mut f = Family::new(
        "tf_iaware_reading_age_seconds",
        MetricType::Gauge,
        "Age of the reading when this page was served, s.",
    );
    f.push(&[], age_ms as f64 / 1000.0);
    let mut page = Exposition::new();
    page.add(f);
    page.render()
}

/// Every field of a snapshot as metric families (the reading's age last).
pub fn to_exposition(s: &Snapshot) -> Exposition {
    let mut page = to_exposition_without_age(s);
    let mut f = Family::new(
        "tf_iaware_reading_age_seconds",
        MetricType::Gauge,
        "Age of the reading when this page was served, s.",
    );
    f.push(&[], s.age_ms as f64 / 1000.0);
    page.add(f);
    page
}

fn cpu_list(cpus: &[u32]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

fn to_exposition_without_age(s: &Snapshot) -> Exposition {
    let mut p = Page(Exposition::new());
    let pid = s.pid.map(|p| p.to_string()).unwrap_or_default();
    p.family(
        INFO,
        MetricType::Gauge,
        "tf-iaware monitor: host and observed process (value 1).",
        |f| {
            f.push(
                &[
                    ("host", &s.host),
                    ("pid", &pid),
                    ("version", env!("CARGO_PKG_VERSION")),
                ],
                1.0,
            )
        },
    );
    p.gauge(
        "tf_iaware_reading_timestamp_seconds",
        "Unix time the reading was taken, s.",
        Some(s.taken_unix_ms as f64 / 1000.0),
    );
    p.counter(
        "tf_iaware_monitor_samples_total",
        "Readings taken by the sampler.",
        Some(s.samples as f64),
    );
    p.gauge(
        "tf_iaware_monitor_interval_seconds",
        "Time between the last two readings, s.",
        s.interval_ms.map(|ms| ms as f64 / 1000.0),
    );
    p.gauge(
        "tf_iaware_monitor_ewma_tau_seconds",
        "Time constant of the EWMA statistics (stat=\"ewma\"), s.",
        Some(s.ewma_tau_s),
    );
    p.gauge(
        "tf_iaware_monitor_window_seconds",
        "Span of the window statistics (stat=\"mean|min|max\"), s.",
        Some(s.window_s),
    );
    p.family(
        "tf_iaware_note_info",
        MetricType::Gauge,
        "Why a reading is missing (value 1).",
        |f| {
            for n in &s.notes {
                f.push(&[("note", n)], 1.0);
            }
        },
    );

    // CPU.
    let cpu = &s.cpu;
    p.family(
        "node_cpu_seconds_total",
        MetricType::Counter,
        "Seconds the CPUs spent in each mode.",
        |f| {
            for c in &cpu.cores {
                let id = c.cpu.to_string();
                for (mode, v) in CPU_MODES.iter().zip(mode_values(&c.seconds)) {
                    if let Some(v) = v {
                        f.push(&[("cpu", &id), ("mode", mode)], v);
                    }
                }
            }
        },
    );
    p.family(
        "node_cpu_guest_seconds_total",
        MetricType::Counter,
        "Seconds the CPUs spent in guests (VMs) for each mode.",
        |f| {
            for c in &cpu.cores {
                let id = c.cpu.to_string();
                if let Some(v) = c.seconds.guest {
                    f.push(&[("cpu", &id), ("mode", "user")], v);
                }
                if let Some(v) = c.seconds.guest_nice {
                    f.push(&[("cpu", &id), ("mode", "nice")], v);
                }
            }
        },
    );
    p.family(
        "tf_iaware_cpu_seconds_total",
        MetricType::Counter,
        "Seconds all CPUs together spent in each mode (the cpu line of /proc/stat).",
        |f| {
            if let Some(sec) = &cpu.seconds {
                for (mode, v) in CPU_MODES.iter().zip(mode_values(sec)) {
                    if let Some(v) = v {
                        f.push(&[("mode", mode)], v);
                    }
                }
                if let Some(v) = sec.guest {
                    f.push(&[("mode", "guest")], v);
                }
                if let Some(v) = sec.guest_nice {
                    f.push(&[("mode", "guest_nice")], v);
                }
            }
        },
    );
    p.gauge(
        "tf_iaware_cpu_logical_cores",
        "Online logical CPUs.",
        Some(f64::from(cpu.logical_cores)),
    );
    p.smoothed(
        "tf_iaware_cpu_utilisation_ratio",
        "Busy share of all CPUs over the last interval, 0-1.",
        cpu.utilisation.as_ref(),
    );
    p.family(
        "tf_iaware_cpu_core_utilisation_ratio",
        MetricType::Gauge,
        "Busy share of one CPU over the last interval, 0-1.",
        |f| {
            for c in &cpu.cores {
                if let Some(u) = &c.utilisation {
                    push_smoothed(f, &[("cpu", &c.cpu.to_string())], u);
                }
            }
        },
    );
    p.family(
        "tf_iaware_cpu_allowed_cores",
        MetricType::Gauge,
        "CPUs the observed process may run on (affinity and cpuset), listed in `cpus`.",
        |f| {
            if let Some(a) = &cpu.allowed_cpus {
                f.push(&[("cpus", &cpu_list(a))], a.len() as f64);
            }
        },
    );
    p.smoothed(
        "tf_iaware_own_cpu_cores",
        "CPU used by the observed process, cores.",
        cpu.own_cores.as_ref(),
    );
    p.counter(
        "tf_iaware_own_cpu_seconds_total",
        "CPU time used by the observed process, s.",
        cpu.own_seconds_total,
    );
    p.smoothed(
        "tf_iaware_cotenant_cpu_cores",
        "CPU used by everything but the observed process, cores.",
        cpu.cotenant_cores.as_ref(),
    );
    p.gauge(
        "tf_iaware_cpu_limit_cores",
        "Most CPU the observed process could use (allowed CPUs, cgroup quotas), cores.",
        Some(cpu.limit_cores),
    );
    p.smoothed(
        "tf_iaware_cpu_available_cores",
        "CPU the observed process could use now (limit less co-tenants' use), cores.",
        cpu.available_cores.as_ref(),
    );
    if let Some(l) = &cpu.load {
        p.gauge("node_load1", "1m load average.", Some(l.one));
        p.gauge("node_load5", "5m load average.", Some(l.five));
        p.gauge("node_load15", "15m load average.", Some(l.fifteen));
    }

    // Memory.
    let m = &s.memory;
    let bytes = |v: Option<u64>| v.map(|b| b as f64);
    p.gauge(
        "node_memory_MemTotal_bytes",
        "Memory information field MemTotal_bytes.",
        bytes(m.total_bytes),
    );
    p.gauge(
        "node_memory_MemAvailable_bytes",
        "Memory information field MemAvailable_bytes.",
        bytes(m.available_bytes),
    );
    p.gauge(
        "node_memory_MemFree_bytes",
        "Memory information field MemFree_bytes.",
        bytes(m.free_bytes),
    );
    p.gauge(
        "tf_iaware_memory_available_bytes",
        "Memory the observed process could still allocate (host and cgroup), bytes.",
        bytes(m.available_to_us_bytes),
    );

    // Cgroup.
    p.family(
        "tf_iaware_cgroup_unavailable_info",
        MetricType::Gauge,
        "Why the cgroup could not be read (value 1).",
        |f| {
            if let Some(r) = &s.cgroup_unavailable {
                f.push(&[("reason", r)], 1.0);
            }
        },
    );
    if let Some(cg) = &s.cgroup {
        p.family(
            "tf_iaware_cgroup_info",
            MetricType::Gauge,
            "cgroup of the observed process: version and path (value 1).",
            |f| {
                f.push(
                    &[("version", &cg.version.to_string()), ("path", &cg.path)],
                    1.0,
                )
            },
        );
        p.gauge(
            "tf_iaware_cgroup_cpu_quota_cores",
            "Tightest CFS quota over the cgroup and its ancestors, cores.",
            cg.cpu_quota_cores,
        );
        p.gauge(
            "tf_iaware_cgroup_cpu_allotment_cores",
            "CPU the enclosing cgroups grant: tightest quota over the ancestors (else the cgroup's own), cores.",
            cg.cpu_allotment_cores,
        );
        p.counter(
            "tf_iaware_cgroup_cpu_usage_seconds_total",
            "CPU time used by the whole cgroup, s.",
            cg.cpu_usage_seconds_total,
        );
        p.smoothed(
            "tf_iaware_cgroup_cpu_usage_cores",
            "CPU used by the whole cgroup, cores.",
            cg.cpu_usage_cores.as_ref(),
        );
        let count = |v: Option<u64>| v.map(|c| c as f64);
        p.counter(
            "tf_iaware_cgroup_periods_total",
            "CFS enforcement periods elapsed.",
            count(cg.periods_total),
        );
        p.counter(
            "tf_iaware_cgroup_throttled_periods_total",
            "CFS periods in which the cgroup was throttled.",
            count(cg.throttled_periods_total),
        );
        p.counter(
            "tf_iaware_cgroup_throttled_seconds_total",
            "Time the cgroup's tasks were throttled, s.",
            cg.throttled_seconds_total,
        );
        p.gauge(
            "tf_iaware_cgroup_memory_limit_bytes",
            "Tightest memory limit over the cgroup and its ancestors, bytes.",
            bytes(cg.memory_limit_bytes),
        );
        p.gauge(
            "tf_iaware_cgroup_memory_usage_bytes",
            "Memory charged to the cgroup, bytes.",
            bytes(cg.memory_usage_bytes),
        );
        p.gauge(
            "tf_iaware_cgroup_memory_working_set_bytes",
            "Cgroup memory usage less inactive file cache, bytes.",
            bytes(cg.memory_working_set_bytes),
        );
    }

    // Network.
    let net = &s.network;
    let per_iface = |p: &mut Page,
                     name: &str,
                     kind,
                     help: &str,
                     get: &dyn Fn(&NetworkInterface) -> Option<f64>| {
        p.family(name, kind, help, |f| {
            for n in net {
                if let Some(v) = get(n) {
                    f.push(&[("device", &n.name)], v);
                }
            }
        })
    };
    per_iface(
        &mut p,
        "node_network_receive_bytes_total",
        MetricType::Counter,
        "Network device statistic receive_bytes.",
        &|n| Some(n.rx_bytes_total as f64),
    );
    per_iface(
        &mut p,
        "node_network_transmit_bytes_total",
        MetricType::Counter,
        "Network device statistic transmit_bytes.",
        &|n| Some(n.tx_bytes_total as f64),
    );
    per_iface(
        &mut p,
        "tf_iaware_network_receive_bytes_per_second",
        MetricType::Gauge,
        "Receive rate over the last interval, bytes/s.",
        &|n| n.rx_bytes_per_sec,
    );
    per_iface(
        &mut p,
        "tf_iaware_network_transmit_bytes_per_second",
        MetricType::Gauge,
        "Transmit rate over the last interval, bytes/s.",
        &|n| n.tx_bytes_per_sec,
    );

    // GPUs.
    p.family(
        "tf_iaware_gpu_unavailable_info",
        MetricType::Gauge,
        "Why there are no GPU metrics (value 1).",
        |f| {
            if let Some(r) = &s.gpus_unavailable {
                f.push(&[("reason", r)], 1.0);
            }
        },
    );
    let gpu_labels: Vec<[(String, String); 6]> = s
        .gpus
        .iter()
        .map(|g| {
            [
                ("gpu".to_string(), g.index.to_string()),
                ("UUID".to_string(), g.uuid.clone()),
                (
                    "pci_bus_id".to_string(),
                    g.pci_bus_id.clone().unwrap_or_default(),
                ),
                (
                    "device".to_string(),
                    g.minor_number
                        .map(|m| format!("nvidia{m}"))
                        .unwrap_or_default(),
                ),
                ("modelName".to_string(), g.name.clone()),
                ("Hostname".to_string(), s.host.clone()),
            ]
        })
        .collect();
    let per_gpu =
        |p: &mut Page, name: &str, help: &str, get: &dyn Fn(&GpuSnapshot) -> Option<f64>| {
            p.family(name, MetricType::Gauge, help, |f| {
                for (g, labels) in s.gpus.iter().zip(&gpu_labels) {
                    if let Some(v) = get(g) {
                        let l: Vec<(&str, &str)> = labels
                            .iter()
                            .map(|(k, v)| (k.as_str(), v.as_str()))
                            .collect();
                        f.push(&l, v);
                    }
                }
            })
        };
    per_gpu(
        &mut p,
        "DCGM_FI_DEV_GPU_UTIL",
        "GPU utilization (in %).",
        &|g| g.utilisation_percent.map(|u| u.last),
    );
    per_gpu(
        &mut p,
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory utilization (in %).",
        &|g| g.memory_utilisation_percent,
    );
    per_gpu(
        &mut p,
        "DCGM_FI_DEV_FB_TOTAL",
        "Framebuffer memory total (in MiB).",
        &|g| g.memory_total_bytes.map(|b| b as f64 / MIB),
    );
    per_gpu(
        &mut p,
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        &|g| g.memory_used_bytes.map(|b| b as f64 / MIB),
    );
    per_gpu(
        &mut p,
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        &|g| g.memory_free_bytes.map(|b| b as f64 / MIB),
    );
    per_gpu(
        &mut p,
        "DCGM_FI_DEV_SM_CLOCK",
        "SM clock frequency (in MHz).",
        &|g| g.sm_clock_mhz,
    );
    per_gpu(
        &mut p,
        "DCGM_FI_DEV_MAX_SM_CLOCK",
        "Maximum SM clock frequency (in MHz).",
        &|g| g.sm_clock_max_mhz,
    );
    per_gpu(
        &mut p,
        "DCGM_FI_DEV_POWER_USAGE",
        "Power draw (in W).",
        &|g| g.power_watts,
    );
    per_gpu(
        &mut p,
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "Power management limit (in W).",
        &|g| g.power_limit_watts,
    );
    per_gpu(
        &mut p,
        "DCGM_FI_DEV_GPU_TEMP",
        "GPU temperature (in C).",
        &|g| g.temperature_celsius,
    );
    let gpu_id = |g: &GpuSnapshot| {
        [
            ("gpu".to_string(), g.index.to_string()),
            ("UUID".to_string(), g.uuid.clone()),
        ]
    };
    p.family(
        "tf_iaware_gpu_utilisation_percent",
        MetricType::Gauge,
        "GPU utilisation (smoothed), percent.",
        |f| {
            for g in &s.gpus {
                if let Some(u) = &g.utilisation_percent {
                    let id = gpu_id(g);
                    push_smoothed(f, &[("gpu", &id[0].1), ("UUID", &id[1].1)], u);
                }
            }
        },
    );
    let per_gpu_ours =
        |p: &mut Page, name: &str, help: &str, get: &dyn Fn(&GpuSnapshot) -> Option<f64>| {
            p.family(name, MetricType::Gauge, help, |f| {
                for g in &s.gpus {
                    if let Some(v) = get(g) {
                        let id = gpu_id(g);
                        f.push(&[("gpu", &id[0].1), ("UUID", &id[1].1)], v);
                    }
                }
            })
        };
    per_gpu_ours(
        &mut p,
        "tf_iaware_gpu_own_utilisation_percent",
        "SM utilisation of the observed process, percent.",
        &|g| g.own_utilisation_percent,
    );
    per_gpu_ours(
        &mut p,
        "tf_iaware_gpu_pcie_transmit_bytes_per_second",
        "PCIe transmit throughput, bytes/s.",
        &|g| g.pcie_tx_bytes_per_sec,
    );
    per_gpu_ours(
        &mut p,
        "tf_iaware_gpu_pcie_receive_bytes_per_second",
        "PCIe receive throughput, bytes/s.",
        &|g| g.pcie_rx_bytes_per_sec,
    );
    per_gpu_ours(
        &mut p,
        "tf_iaware_gpu_compute_processes",
        "Processes with a compute context on the GPU.",
        &|g| g.compute_processes.map(f64::from),
    );
    p.family(
        "tf_iaware_gpu_unsupported_info",
        MetricType::Gauge,
        "A GPU reading the device or driver does not provide (value 1).",
        |f| {
            for g in &s.gpus {
                for u in &g.unsupported {
                    f.push(&[("gpu", &g.index.to_string()), ("what", u)], 1.0);
                }
            }
        },
    );

    // Devices.
    p.family(
        "tf_iaware_device_available_share",
        MetricType::Gauge,
        "Effective compute share of the device available to us, 0-1 of its hardware capacity.",
        |f| {
            for d in &s.devices {
                push_smoothed(f, &[("device", &d.device)], &d.compute_share);
            }
        },
    );
    p.family(
        "tf_iaware_device_capacity",
        MetricType::Gauge,
        "Hardware capacity the share refers to: logical cores for CPU, 1 for a GPU.",
        |f| {
            for d in &s.devices {
                f.push(&[("device", &d.device)], d.capacity);
            }
        },
    );
    p.family(
        "tf_iaware_device_free_memory_bytes",
        MetricType::Gauge,
        "Memory we could still allocate on the device, bytes.",
        |f| {
            for d in &s.devices {
                if let Some(b) = d.free_memory_bytes {
                    f.push(&[("device", &d.device)], b as f64);
                }
            }
        },
    );
    p.0
}

// ----- reading ------------------------------------------------------------------------------

fn bad(s: &Sample, reason: String) -> Error {
    Error::Exposition {
        line: s.line,
        reason: format!("`{}`: {reason}", s.name),
    }
}

/// A non-negative whole number (counts, bytes) from a sample value × `scale`.
fn count(s: &Sample, scale: f64) -> Result<u64> {
    let v = s.value * scale;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(bad(s, format!("{} is not a count", s.value)));
    }
    Ok(v.round() as u64)
}

fn label_u32(s: &Sample, label: &str) -> Result<Option<u32>> {
    match s.label(label) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| bad(s, format!("label {label}=\"{v}\" is not a number"))),
    }
}

/// A smoothed gauge from samples with a `stat` label (or one unlabelled reading).
fn smoothed_of<'a>(samples: impl Iterator<Item = &'a Sample>) -> Option<Smoothed> {
    let mut vals: [Option<f64>; 5] = [None; 5];
    for s in samples {
        let i = match s.label("stat") {
            None => 0,
            Some(stat) => match STATS.iter().position(|x| *x == stat) {
                Some(i) => i,
                None => continue,
            },
        };
        vals[i] = Some(s.value);
    }
    let last = vals[0]?;
    Some(Smoothed {
        last,
        ewma: vals[1].unwrap_or(last),
        mean: vals[2].unwrap_or(last),
        min: vals[3].unwrap_or(last),
        max: vals[4].unwrap_or(last),
    })
}

fn first(page: &Exposition, name: &str) -> Option<f64> {
    page.samples(name).first().map(|s| s.value)
}

fn first_count(page: &Exposition, name: &str, scale: f64) -> Result<Option<u64>> {
    page.samples(name)
        .first()
        .map(|s| count(s, scale))
        .transpose()
}

fn ms(page: &Exposition, name: &str) -> Result<Option<u64>> {
    first_count(page, name, 1000.0)
}

/// A snapshot from a page: ours (every field), or a node_exporter / dcgm-exporter page (what
/// they carry). `source` names the page.
///
/// # Errors
/// [`Error::Exposition`] for a known series whose value or label cannot be what it claims
/// (a negative byte count, a `cpu` label that is not a number, a malformed CPU list).
pub fn from_exposition(page: &Exposition, source: &str) -> Result<Snapshot> {
    let mut s = Snapshot::empty(source);
    if let Some(info) = page.samples(INFO).first() {
        s.host = info.label("host").unwrap_or_default().to_string();
        s.pid = label_u32(info, "pid").or_else(|e| match info.label("pid") {
            Some("") => Ok(None),
            _ => Err(e),
        })?;
    } else if let Some(uname) = page.samples("node_uname_info").first() {
        s.host = uname.label("nodename").unwrap_or_default().to_string();
    }
    s.taken_unix_ms = ms(page, "tf_iaware_reading_timestamp_seconds")?.unwrap_or(0);
    s.age_ms = ms(page, "tf_iaware_reading_age_seconds")?.unwrap_or(0);
    s.samples = first_count(page, "tf_iaware_monitor_samples_total", 1.0)?.unwrap_or(0);
    s.interval_ms = ms(page, "tf_iaware_monitor_interval_seconds")?;
    s.ewma_tau_s = first(page, "tf_iaware_monitor_ewma_tau_seconds").unwrap_or(0.0);
    s.window_s = first(page, "tf_iaware_monitor_window_seconds").unwrap_or(0.0);
    s.notes = page
        .samples("tf_iaware_note_info")
        .iter()
        .filter_map(|x| x.label("note").map(str::to_string))
        .collect();

    // CPU.
    let mut cores: BTreeMap<u32, CoreSnapshot> = BTreeMap::new();
    for x in page.samples("node_cpu_seconds_total") {
        let (Some(cpu), Some(mode)) = (label_u32(x, "cpu")?, x.label("mode")) else {
            continue;
        };
        let c = cores.entry(cpu).or_insert_with(|| CoreSnapshot {
            cpu,
            utilisation: None,
            seconds: CpuModeSeconds::default(),
        });
        set_mode(&mut c.seconds, mode, x.value);
    }
    for x in page.samples("node_cpu_guest_seconds_total") {
        let (Some(cpu), Some(mode)) = (label_u32(x, "cpu")?, x.label("mode")) else {
            continue;
        };
        if let Some(c) = cores.get_mut(&cpu) {
            match mode {
                "user" => c.seconds.guest = Some(x.value),
                "nice" => c.seconds.guest_nice = Some(x.value),
                _ => {}
            }
        }
    }
    let mut per_core_util: BTreeMap<u32, Vec<&Sample>> = BTreeMap::new();
    for x in page.samples("tf_iaware_cpu_core_utilisation_ratio") {
        if let Some(cpu) = label_u32(x, "cpu")? {
            per_core_util.entry(cpu).or_default().push(x);
        }
    }
    for (cpu, samples) in per_core_util {
        if let Some(c) = cores.get_mut(&cpu) {
            c.utilisation = smoothed_of(samples.into_iter());
        }
    }
    let total = page.samples("tf_iaware_cpu_seconds_total");
    s.cpu.seconds = if total.is_empty() {
        (!cores.is_empty()).then(|| sum_modes(cores.values().map(|c| &c.seconds)))
    } else {
        let mut sec = CpuModeSeconds::default();
        for x in total {
            match x.label("mode") {
                Some("guest") => sec.guest = Some(x.value),
                Some("guest_nice") => sec.guest_nice = Some(x.value),
                Some(mode) => set_mode(&mut sec, mode, x.value),
                None => {}
            }
        }
        Some(sec)
    };
    s.cpu.cores = cores.into_values().collect();
    s.cpu.logical_cores = match page.samples("tf_iaware_cpu_logical_cores").first() {
        Some(x) => u32::try_from(count(x, 1.0)?)
            .map_err(|_| bad(x, format!("{} is not a core count", x.value)))?,
        None => s.cpu.cores.len() as u32,
    };
    s.cpu.utilisation = smoothed_of(page.samples("tf_iaware_cpu_utilisation_ratio").iter());
    if let Some(x) = page.samples("tf_iaware_cpu_allowed_cores").first() {
        let list = x.label("cpus").unwrap_or_default();
        s.cpu.allowed_cpus = Some(
            parse_cpu_list(list, std::path::Path::new(&x.name))
                .map_err(|e| bad(x, e.to_string()))?,
        );
    }
    s.cpu.own_cores = smoothed_of(page.samples("tf_iaware_own_cpu_cores").iter());
    s.cpu.own_seconds_total = first(page, "tf_iaware_own_cpu_seconds_total");
    s.cpu.cotenant_cores = smoothed_of(page.samples("tf_iaware_cotenant_cpu_cores").iter());
    s.cpu.limit_cores =
        first(page, "tf_iaware_cpu_limit_cores").unwrap_or(f64::from(s.cpu.logical_cores));
    s.cpu.available_cores = smoothed_of(page.samples("tf_iaware_cpu_available_cores").iter());
    if let (Some(one), Some(five), Some(fifteen)) = (
        first(page, "node_load1"),
        first(page, "node_load5"),
        first(page, "node_load15"),
    ) {
        s.cpu.load = Some(LoadAverage { one, five, fifteen });
    }

    // Memory.
    s.memory.total_bytes = first_count(page, "node_memory_MemTotal_bytes", 1.0)?;
    s.memory.available_bytes = first_count(page, "node_memory_MemAvailable_bytes", 1.0)?;
    s.memory.free_bytes = first_count(page, "node_memory_MemFree_bytes", 1.0)?;
    s.memory.available_to_us_bytes = first_count(page, "tf_iaware_memory_available_bytes", 1.0)?;

    // Cgroup.
    s.cgroup_unavailable = page
        .samples("tf_iaware_cgroup_unavailable_info")
        .first()
        .and_then(|x| x.label("reason").map(str::to_string));
    if let Some(info) = page.samples("tf_iaware_cgroup_info").first() {
        let version = label_u32(info, "version")?.unwrap_or(0);
        s.cgroup = Some(CgroupSnapshot {
            version: u8::try_from(version)
                .map_err(|_| bad(info, format!("cgroup version {version}")))?,
            path: info.label("path").unwrap_or_default().to_string(),
            cpu_quota_cores: first(page, "tf_iaware_cgroup_cpu_quota_cores"),
            cpu_allotment_cores: first(page, "tf_iaware_cgroup_cpu_allotment_cores"),
            cpu_usage_seconds_total: first(page, "tf_iaware_cgroup_cpu_usage_seconds_total"),
            cpu_usage_cores: smoothed_of(page.samples("tf_iaware_cgroup_cpu_usage_cores").iter()),
            periods_total: first_count(page, "tf_iaware_cgroup_periods_total", 1.0)?,
            throttled_periods_total: first_count(
                page,
                "tf_iaware_cgroup_throttled_periods_total",
                1.0,
            )?,
            throttled_seconds_total: first(page, "tf_iaware_cgroup_throttled_seconds_total"),
            memory_limit_bytes: first_count(page, "tf_iaware_cgroup_memory_limit_bytes", 1.0)?,
            memory_usage_bytes: first_count(page, "tf_iaware_cgroup_memory_usage_bytes", 1.0)?,
            memory_working_set_bytes: first_count(
                page,
                "tf_iaware_cgroup_memory_working_set_bytes",
                1.0,
            )?,
        });
    }

    // Network.
    let mut net: BTreeMap<String, NetworkInterface> = BTreeMap::new();
    for (metric, rx) in [
        ("node_network_receive_bytes_total", true),
        ("node_network_transmit_bytes_total", false),
    ] {
        for x in page.samples(metric) {
            let Some(dev) = x.label("device") else {
                continue;
            };
            let v = count(x, 1.0)?;
            let n = net
                .entry(dev.to_string())
                .or_insert_with(|| NetworkInterface {
                    name: dev.to_string(),
                    rx_bytes_total: 0,
                    tx_bytes_total: 0,
                    rx_bytes_per_sec: None,
                    tx_bytes_per_sec: None,
                });
            if rx {
                n.rx_bytes_total = v;
            } else {
                n.tx_bytes_total = v;
            }
        }
    }
    for (metric, rx) in [
        ("tf_iaware_network_receive_bytes_per_second", true),
        ("tf_iaware_network_transmit_bytes_per_second", false),
    ] {
        for x in page.samples(metric) {
            let Some(n) = x.label("device").and_then(|d| net.get_mut(d)) else {
                continue;
            };
            if rx {
                n.rx_bytes_per_sec = Some(x.value);
            } else {
                n.tx_bytes_per_sec = Some(x.value);
            }
        }
    }
    s.network = net.into_values().collect();

    // GPUs.
    s.gpus_unavailable = page
        .samples("tf_iaware_gpu_unavailable_info")
        .first()
        .and_then(|x| x.label("reason").map(str::to_string));
    s.gpus = read_gpus(page)?;

    // Devices.
    let mut order: Vec<String> = Vec::new();
    let mut shares: BTreeMap<String, Vec<&Sample>> = BTreeMap::new();
    for x in page.samples("tf_iaware_device_available_share") {
        let Some(d) = x.label("device") else { continue };
        if !shares.contains_key(d) {
            order.push(d.to_string());
        }
        shares.entry(d.to_string()).or_default().push(x);
    }
    for d in order {
        let Some(share) = shares.remove(&d).and_then(|v| smoothed_of(v.into_iter())) else {
            continue;
        };
        let of = |name: &str| {
            page.samples(name)
                .iter()
                .find(|x| x.label("device") == Some(&d))
        };
        let kind = if d.starts_with("GPU") {
            DeviceKind::Gpu
        } else {
            DeviceKind::Cpu
        };
        s.devices.push(DeviceAvailability {
            capacity: of("tf_iaware_device_capacity").map_or(1.0, |x| x.value),
            free_memory_bytes: of("tf_iaware_device_free_memory_bytes")
                .map(|x| count(x, 1.0))
                .transpose()?,
            device: d,
            kind,
            compute_share: share,
            age_ms: s.age_ms,
        });
    }
    Ok(s)
}

fn set_mode(sec: &mut CpuModeSeconds, mode: &str, v: f64) {
    match mode {
        "user" => sec.user = v,
        "nice" => sec.nice = v,
        "system" => sec.system = v,
        "idle" => sec.idle = v,
        "iowait" => sec.iowait = Some(v),
        "irq" => sec.irq = Some(v),
        "softirq" => sec.softirq = Some(v),
        "steal" => sec.steal = Some(v),
        _ => {}
    }
}

/// Sum of per-CPU mode counters (for pages without an all-CPU line).
pub(crate) fn sum_modes<'a>(it: impl Iterator<Item = &'a CpuModeSeconds>) -> CpuModeSeconds {
    let add = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, None) => a,
        (None, b) => b,
    };
    it.fold(CpuModeSeconds::default(), |a, c| CpuModeSeconds {
        user: a.user + c.user,
        nice: a.nice + c.nice,
        system: a.system + c.system,
        idle: a.idle + c.idle,
        iowait: add(a.iowait, c.iowait),
        irq: add(a.irq, c.irq),
        softirq: add(a.softirq, c.softirq),
        steal: add(a.steal, c.steal),
        guest: add(a.guest, c.guest),
        guest_nice: add(a.guest_nice, c.guest_nice),
    })
}

fn read_gpus(page: &Exposition) -> Result<Vec<GpuSnapshot>> {
    let mut gpus: BTreeMap<u32, GpuSnapshot> = BTreeMap::new();
    let dcgm: [&str; 10] = [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_FB_TOTAL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MAX_SM_CLOCK",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "DCGM_FI_DEV_GPU_TEMP",
    ];
    for name in dcgm {
        for x in page.samples(name) {
            let Some(index) = label_u32(x, "gpu")? else {
                continue;
            };
            let g = gpus.entry(index).or_insert_with(|| GpuSnapshot {
                index,
                ..Default::default()
            });
            if g.uuid.is_empty() {
                g.uuid = x.label("UUID").unwrap_or_default().to_string();
                g.name = x.label("modelName").unwrap_or_default().to_string();
                g.pci_bus_id = x
                    .label("pci_bus_id")
                    .filter(|v| !v.is_empty())
                    .map(str::to_string);
                g.minor_number = x
                    .label("device")
                    .and_then(|d| d.strip_prefix("nvidia"))
                    .and_then(|m| m.parse().ok());
            }
            match name {
                "DCGM_FI_DEV_GPU_UTIL" => g.utilisation_percent = Some(Smoothed::constant(x.value)),
                "DCGM_FI_DEV_MEM_COPY_UTIL" => g.memory_utilisation_percent = Some(x.value),
                "DCGM_FI_DEV_FB_TOTAL" => g.memory_total_bytes = Some(count(x, MIB)?),
                "DCGM_FI_DEV_FB_USED" => g.memory_used_bytes = Some(count(x, MIB)?),
                "DCGM_FI_DEV_FB_FREE" => g.memory_free_bytes = Some(count(x, MIB)?),
                "DCGM_FI_DEV_SM_CLOCK" => g.sm_clock_mhz = Some(x.value),
                "DCGM_FI_DEV_MAX_SM_CLOCK" => g.sm_clock_max_mhz = Some(x.value),
                "DCGM_FI_DEV_POWER_USAGE" => g.power_watts = Some(x.value),
                "DCGM_FI_DEV_POWER_MGMT_LIMIT" => g.power_limit_watts = Some(x.value),
                _ => g.temperature_celsius = Some(x.value),
            }
        }
    }
    let mut util: BTreeMap<u32, Vec<&Sample>> = BTreeMap::new();
    for x in page.samples("tf_iaware_gpu_utilisation_percent") {
        if let Some(i) = label_u32(x, "gpu")? {
            util.entry(i).or_default().push(x);
        }
    }
    for (i, samples) in util {
        if let Some(g) = gpus.get_mut(&i) {
            g.utilisation_percent = smoothed_of(samples.into_iter()).or(g.utilisation_percent);
        }
    }
    for x in page.samples("tf_iaware_gpu_own_utilisation_percent") {
        if let Some(g) = label_u32(x, "gpu")?.and_then(|i| gpus.get_mut(&i)) {
            g.own_utilisation_percent = Some(x.value);
        }
    }
    for x in page.samples("tf_iaware_gpu_pcie_transmit_bytes_per_second") {
        if let Some(g) = label_u32(x, "gpu")?.and_then(|i| gpus.get_mut(&i)) {
            g.pcie_tx_bytes_per_sec = Some(x.value);
        }
    }
    for x in page.samples("tf_iaware_gpu_pcie_receive_bytes_per_second") {
        if let Some(g) = label_u32(x, "gpu")?.and_then(|i| gpus.get_mut(&i)) {
            g.pcie_rx_bytes_per_sec = Some(x.value);
        }
    }
    for x in page.samples("tf_iaware_gpu_compute_processes") {
        if let Some(g) = label_u32(x, "gpu")?.and_then(|i| gpus.get_mut(&i)) {
            let n = count(x, 1.0)?;
            g.compute_processes =
                Some(u32::try_from(n).map_err(|_| bad(x, format!("{n} processes")))?);
        }
    }
    for x in page.samples("tf_iaware_gpu_unsupported_info") {
        if let (Some(g), Some(what)) = (
            label_u32(x, "gpu")?.and_then(|i| gpus.get_mut(&i)),
            x.label("what"),
        ) {
            g.unsupported.push(what.to_string());
        }
    }
    Ok(gpus.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::snapshot::MemorySnapshot;

    fn sm(x: f64) -> Smoothed {
        Smoothed {
            last: x,
            ewma: x * 0.9,
            mean: x * 0.8,
            min: x * 0.5,
            max: x * 1.5,
        }
    }

    /// A snapshot with every field set to an awkward value.
    pub(crate) fn full_snapshot() -> Snapshot {
        let secs = |b: f64| CpuModeSeconds {
            user: b + 0.01,
            nice: b + 0.02,
            system: b + 0.03,
            idle: b + 0.04,
            iowait: Some(b + 0.05),
            irq: Some(0.0),
            softirq: Some(b + 0.07),
            steal: Some(b + 0.08),
            guest: Some(b + 0.09),
            guest_nice: Some(0.1),
        };
        Snapshot {
            source: "local".into(),
            host: "worker \"3\"\\x".into(),
            pid: Some(4242),
            taken_unix_ms: 1_700_000_000_123,
            age_ms: 0,
            interval_ms: Some(1003),
            samples: 77,
            ewma_tau_s: 10.0,
            window_s: 60.0,
            stale: false,
            stale_reason: None,
            cpu: crate::monitor::snapshot::CpuSnapshot {
                logical_cores: 2,
                utilisation: Some(sm(0.3)),
                cores: vec![
                    CoreSnapshot {
                        cpu: 0,
                        utilisation: Some(sm(0.1)),
                        seconds: secs(100.0),
                    },
                    CoreSnapshot {
                        cpu: 3,
                        utilisation: Some(sm(0.7)),
                        seconds: secs(200.0),
                    },
                ],
                seconds: Some(secs(300.5)),
                allowed_cpus: Some(vec![0, 3]),
                own_cores: Some(sm(0.25)),
                own_seconds_total: Some(12.34),
                cotenant_cores: Some(sm(0.35)),
                limit_cores: 1.5,
                available_cores: Some(sm(1.15)),
                load: Some(LoadAverage {
                    one: 0.52,
                    five: 0.58,
                    fifteen: 0.59,
                }),
            },
            memory: MemorySnapshot {
                total_bytes: Some(25_157_943_296),
                available_bytes: Some(22_897_917_952),
                free_bytes: Some(19_183_759_360),
                available_to_us_bytes: Some(1_000_000_001),
            },
            cgroup: Some(CgroupSnapshot {
                version: 1,
                path: "/tf-iaware/worker,1".into(),
                cpu_quota_cores: Some(1.5),
                cpu_allotment_cores: Some(2.0),
                cpu_usage_seconds_total: Some(99.125),
                cpu_usage_cores: Some(sm(1.2)),
                periods_total: Some(1000),
                throttled_periods_total: Some(17),
                throttled_seconds_total: Some(3.25),
                memory_limit_bytes: Some(2_147_483_648),
                memory_usage_bytes: Some(1_147_483_648),
                memory_working_set_bytes: Some(1_047_483_648),
            }),
            cgroup_unavailable: None,
            network: vec![
                NetworkInterface {
                    name: "eth0".into(),
                    rx_bytes_total: 881_312_873,
                    tx_bytes_total: 15_718_346,
                    rx_bytes_per_sec: Some(1234.5),
                    tx_bytes_per_sec: Some(0.0),
                },
                NetworkInterface {
                    name: "lo".into(),
                    rx_bytes_total: 1,
                    tx_bytes_total: 1,
                    rx_bytes_per_sec: None,
                    tx_bytes_per_sec: None,
                },
            ],
            gpus: vec![GpuSnapshot {
                index: 0,
                uuid: "GPU-3a5b7c9d-1e2f-4a6b-8c0d-2e4f6a8b0c1d".into(),
                name: "NVIDIA A100-SXM4-40GB".into(),
                minor_number: Some(0),
                pci_bus_id: Some("00000000:07:00.0".into()),
                utilisation_percent: Some(sm(87.0)),
                memory_utilisation_percent: Some(41.0),
                own_utilisation_percent: Some(62.0),
                memory_total_bytes: Some(42_949_672_960),
                memory_used_bytes: Some(31_675_383_809),
                memory_free_bytes: Some(11_274_289_151),
                sm_clock_mhz: Some(1410.0),
                sm_clock_max_mhz: Some(1410.0),
                power_watts: Some(312.547),
                power_limit_watts: Some(400.0),
                temperature_celsius: Some(61.0),
                pcie_tx_bytes_per_sec: Some(18_874_368.0),
                pcie_rx_bytes_per_sec: Some(1_073_741_824.0),
                compute_processes: Some(2),
                unsupported: vec!["power_limit: Not Supported".into()],
            }],
            gpus_unavailable: None,
            devices: vec![
                DeviceAvailability {
                    device: "CPU:0".into(),
                    kind: DeviceKind::Cpu,
                    capacity: 2.0,
                    compute_share: sm(0.575),
                    free_memory_bytes: Some(1_000_000_001),
                    age_ms: 0,
                },
                DeviceAvailability {
                    device: "GPU:0".into(),
                    kind: DeviceKind::Gpu,
                    capacity: 1.0,
                    compute_share: sm(0.75),
                    free_memory_bytes: Some(11_274_289_151),
                    age_ms: 0,
                },
            ],
            notes: vec!["/proc/net/dev: \"weird\"\nnote".into()],
        }
    }

    #[test]
    fn round_trip_is_exact() {
        let s = full_snapshot();
        let text = render(&s);
        let back = from_exposition(&Exposition::parse(&text).unwrap(), "local").unwrap();
        assert_eq!(back, s, "\n{text}");
    }

    #[test]
    fn render_parts_make_the_page() {
        let mut s = full_snapshot();
        s.age_ms = 1500;
        assert_eq!(render(&s), render_without_age(&s) + &render_age(1500));
        assert_eq!(render(&s), to_exposition(&s).render());
        let back = from_exposition(&Exposition::parse(&render(&s)).unwrap(), "x").unwrap();
        assert_eq!(back.age_ms, 1500);
        assert_eq!(back.devices[0].age_ms, 1500);
    }

    #[test]
    fn round_trip_of_a_sparse_snapshot() {
        let mut s = Snapshot::empty("local");
        s.host = "h".into();
        s.cgroup_unavailable = Some("no cgroup: /proc/self/cgroup: gone".into());
        s.gpus_unavailable = Some("GPU metrics unavailable: libnvidia-ml.so.1 missing".into());
        s.cpu.limit_cores = 0.0;
        let text = render(&s);
        let back = from_exposition(&Exposition::parse(&text).unwrap(), "local").unwrap();
        assert_eq!(back, s, "\n{text}");
    }

    #[test]
    fn page_has_help_type_and_dcgm_units() {
        let text = render(&full_snapshot());
        assert!(text.contains("# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.\n# TYPE node_cpu_seconds_total counter\n"));
        assert!(text.contains("node_cpu_seconds_total{cpu=\"3\",mode=\"user\"} 200.01\n"));
        assert!(text.contains("tf_iaware_cpu_limit_cores 1.5\n"));
        assert!(text.contains("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-3a5b7c9d-1e2f-4a6b-8c0d-2e4f6a8b0c1d\",pci_bus_id=\"00000000:07:00.0\",device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-40GB\""));
        assert!(text.contains("DCGM_FI_DEV_FB_TOTAL{") && text.contains("} 40960\n"));
        assert!(text
            .contains("tf_iaware_device_available_share{device=\"GPU:0\",stat=\"last\"} 0.75\n"));
        assert!(text.contains("tf_iaware_cgroup_throttled_periods_total 17\n"));
        for line in text.lines().filter(|l| l.starts_with("# TYPE")) {
            let name = line.split(' ').nth(2).unwrap();
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "no HELP for {name}"
            );
        }
    }

    #[test]
    fn node_exporter_and_dcgm_pages() {
        let mut page = Exposition::parse(include_str!(
            "../../tests/fixtures/monitor/node_exporter.prom"
        ))
        .unwrap();
        page.merge(
            Exposition::parse(include_str!(
                "../../tests/fixtures/monitor/dcgm_exporter.prom"
            ))
            .unwrap(),
        )
        .unwrap();
        let s = from_exposition(&page, "worker-3").unwrap();
        assert_eq!(s.host, "worker-3");
        assert_eq!(s.cpu.logical_cores, 2);
        assert_eq!(s.cpu.cores[1].seconds.user, 4108.36);
        assert_eq!(s.cpu.cores[1].seconds.steal, Some(11.94));
        let total = s.cpu.seconds.unwrap();
        assert!((total.idle - (183401.55 + 183779.02)).abs() < 1e-6);
        assert_eq!(s.cpu.limit_cores, 2.0);
        assert_eq!(
            s.cpu.utilisation, None,
            "one scrape gives counters, not rates"
        );
        assert_eq!(s.memory.available_bytes, Some(22_897_917_952));
        assert_eq!(s.cpu.load.unwrap().five, 0.58);
        assert_eq!(s.network.len(), 2);
        assert_eq!(s.network[0].rx_bytes_total, 881_312_873);
        assert_eq!(s.gpus.len(), 2);
        let g = &s.gpus[1];
        assert_eq!(g.uuid, "GPU-9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a");
        assert_eq!(g.minor_number, Some(1));
        assert_eq!(g.memory_free_bytes, Some(10752 * 1024 * 1024));
        assert_eq!(g.power_watts, Some(312.547));
        assert_eq!(g.utilisation_percent.unwrap().last, 87.0);
        assert!(s.devices.is_empty());
    }

    #[test]
    fn impossible_values_are_errors() {
        for (text, needle) in [
            ("node_memory_MemTotal_bytes -1\n", "not a count"),
            (
                "node_cpu_seconds_total{cpu=\"x\",mode=\"user\"} 1\n",
                "not a number",
            ),
            ("DCGM_FI_DEV_FB_FREE{gpu=\"0\"} NaN\n", "not a count"),
            (
                "tf_iaware_cpu_allowed_cores{cpus=\"0-x\"} 1\n",
                "CPU number",
            ),
        ] {
            let page = Exposition::parse(text).unwrap();
            let err = from_exposition(&page, "x").unwrap_err().to_string();
            assert!(err.contains(needle) && err.contains("line 1"), "{err}");
        }
    }
}
