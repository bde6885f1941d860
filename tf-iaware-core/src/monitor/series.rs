//! The series table: every metric family of a [`Snapshot`] page declared once — name, type,
//! help text, unit conversion, labels and where the value lives in the snapshot — and the two
//! directions it drives: [`Series::write`] appends a family's samples to a page and
//! [`Series::read`] sets the snapshot fields from the same family of a parsed page.
//!
//! A row belongs to one entity ([`Of`]): the snapshot itself, its cgroup, or a family over a
//! collection (cores, network interfaces, GPUs, devices) whose members are told apart by a key
//! label (`cpu`, `device`, `gpu`). [`SERIES`] lists the rows in page order; reading walks it in
//! the same order, so a row may rely on the rows above it (a core's guest time on its mode
//! counters, the CPU limit's default on the core count).
//!
//! Reading rules: a series of the snapshot or its cgroup takes its family's first sample (all of
//! them for smoothed gauges, CPU modes and notes); a series over a collection takes every
//! sample with a key label in page order, a later sample of one member overwriting an earlier
//! one. Only rows marked [`Each::Adds`] bring members a page has not named before.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::monitor::cgroup::parse_cpu_list;
use crate::monitor::exposition::{Exposition, Family, MetricType, Sample};
use crate::monitor::snapshot::{
    CgroupSnapshot, CoreSnapshot, CpuModeSeconds, DeviceAvailability, DeviceKind, GpuSnapshot,
    LoadAverage, NetworkInterface, Smoothed, Snapshot,
};
use Each::{Adds, Fills};
use Field::{Count, Custom, Modes, Number, Small, Stats, Text, Texts};
use Of::{Cgroup, Cores, Devices, Gpus, Host, HostOr, Interfaces};

/// Metric whose presence marks a page as written by tf-iaware.
pub const INFO: &str = "tf_iaware_info";

/// Bytes per MiB (DCGM exporter reports framebuffer memory in MiB).
const MIB: f64 = 1024.0 * 1024.0;
/// Milliseconds per second (the snapshot keeps times in ms, the page in s).
const MS: f64 = 1000.0;
/// Field units per page unit when both are the same (bytes, counts).
const SAME: f64 = 1.0;
/// Label of a smoothed gauge's statistic, and its values in the order written.
const STAT: &str = "stat";
const STATS: [&str; 5] = ["last", "ewma", "mean", "min", "max"];
/// Label of a CPU time counter's mode.
const MODE: &str = "mode";

// ----- rows -----------------------------------------------------------------------------------

/// One metric family of the page.
pub(crate) struct Series {
    /// Metric name.
    pub name: &'static str,
    /// Type (`# TYPE`).
    pub kind: MetricType,
    /// Docstring (`# HELP`), ending with the unit of the values on the page.
    pub help: &'static str,
    /// The entity the family describes and its field there.
    pub of: Of,
}

/// The entity a [`Series`] describes, and the [`Field`] of it that the family carries.
pub(crate) enum Of {
    /// The snapshot itself.
    Host(Field<Snapshot>),
    /// The snapshot itself; when the page lacks the family, the function sets the field's
    /// default (which may depend on rows above, e.g. the core count on the per-core rows).
    HostOr(Field<Snapshot>, fn(&mut Snapshot)),
    /// The cgroup: written, and read, only when the snapshot has one.
    Cgroup(Field<CgroupSnapshot>),
    /// Every core (key label `cpu`).
    Cores(Each, Field<CoreSnapshot>),
    /// Every network interface (key label `device`).
    Interfaces(Each, Field<NetworkInterface>),
    /// Every GPU (key label `gpu`), with the labels written after the key.
    Gpus(Each, GpuLabels, Field<GpuSnapshot>),
    /// Every device's availability (key label `device`).
    Devices(Each, Field<DeviceAvailability>),
}

/// Whether a series over a collection may bring members the page has not named before.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Each {
    /// A sample for a new key adds a member (the series every exporter of the entity has).
    Adds,
    /// Samples for keys no earlier row brought are ignored.
    Fills,
}

/// Labels of a GPU's samples.
#[derive(Clone, Copy)]
pub(crate) enum GpuLabels {
    /// dcgm-exporter's: `gpu`, `UUID`, `pci_bus_id`, `device` (`nvidiaN`), `modelName`,
    /// `Hostname`.
    Dcgm,
    /// `gpu` and `UUID`.
    Id,
    /// `gpu` only.
    Index,
}

/// Where a value of type `T` lives in entity `E`: `get` it (`None`: not known, so no sample),
/// `set` it from the page.
pub(crate) struct At<E, T> {
    get: fn(&E) -> Option<T>,
    set: fn(&mut E, T),
}

/// [`At`] a field of the entity: `at!(cpu.limit_cores)` for a field that is always there,
/// `at!(opt memory.total_bytes)` for an `Option`.
macro_rules! at {
    (opt $($f:ident).+) => {
        At { get: |e| e.$($f).+, set: |e, v| e.$($f).+ = Some(v) }
    };
    ($($f:ident).+) => {
        At { get: |e| Some(e.$($f).+), set: |e, v| e.$($f).+ = v }
    };
}

/// A field of entity `E` and how it appears on the page. Values are in the unit of the field
/// unless a conversion is named.
pub(crate) enum Field<E> {
    /// A number, as is.
    Number(At<E, f64>),
    /// A whole number of field units (bytes, ms, a count) written as `value / per`, `per` being
    /// field units per page unit ([`MS`] for ms → s, [`MIB`] for bytes → MiB, [`SAME`]). Read
    /// back rounded; a negative, non-finite or too large value is an error.
    Count(f64, At<E, u64>),
    /// A `u32` count (cores, processes), written as is; the text names it in errors.
    Small(&'static str, At<E, u32>),
    /// A smoothed gauge: one sample per statistic, labelled `stat` (`last`, `ewma`, `mean`,
    /// `min`, `max`). Read back needs `last`; a missing statistic equals it (a plain gauge of
    /// another exporter reads as a constant).
    Stats(At<E, Smoothed>),
    /// CPU time per mode, s: one sample per mode of the table that has a value, labelled
    /// `mode`. The setter gives the counters to fill (creating them if need be).
    Modes(
        &'static [Mode],
        fn(&E) -> Option<&CpuModeSeconds>,
        fn(&mut E) -> &mut CpuModeSeconds,
    ),
    /// A text (a reason) carried in the label named first, value 1.
    Text(&'static str, fn(&E) -> Option<&str>, fn(&mut E, String)),
    /// Texts carried in the label named first, one sample of value 1 each.
    Texts(
        &'static str,
        fn(&E) -> &[String],
        fn(&mut E) -> &mut Vec<String>,
    ),
    /// Written and read by hand (info series with several labels). Read gets the family's
    /// samples (never none).
    Custom(fn(&E, &mut Family), fn(&mut E, &[Sample]) -> Result<()>),
}

/// A CPU mode: its `mode` label and its counter in [`CpuModeSeconds`], s.
pub(crate) struct Mode(
    &'static str,
    fn(&CpuModeSeconds) -> Option<f64>,
    fn(&mut CpuModeSeconds, f64),
);

/// The modes of `/proc/stat` in its order; the first eight are node_exporter's
/// `node_cpu_seconds_total` modes, the last two (part of `user` and `nice`) its guest ones.
static MODES: [Mode; 10] = [
    Mode("user", |c| Some(c.user), |c, v| c.user = v),
    Mode("nice", |c| Some(c.nice), |c, v| c.nice = v),
    Mode("system", |c| Some(c.system), |c, v| c.system = v),
    Mode("idle", |c| Some(c.idle), |c, v| c.idle = v),
    Mode("iowait", |c| c.iowait, |c, v| c.iowait = Some(v)),
    Mode("irq", |c| c.irq, |c, v| c.irq = Some(v)),
    Mode("softirq", |c| c.softirq, |c, v| c.softirq = Some(v)),
    Mode("steal", |c| c.steal, |c, v| c.steal = Some(v)),
    Mode("guest", |c| c.guest, |c, v| c.guest = Some(v)),
    Mode(
        "guest_nice",
        |c| c.guest_nice,
        |c, v| c.guest_nice = Some(v),
    ),
];

/// node_exporter's modes of `node_cpu_seconds_total`.
static KERNEL_MODES: &[Mode] = MODES.split_at(8).0;

/// node_exporter's `node_cpu_guest_seconds_total` modes: guest time at normal and low priority.
static GUEST_MODES: [Mode; 2] = [
    Mode("user", |c| c.guest, |c, v| c.guest = Some(v)),
    Mode("nice", |c| c.guest_nice, |c, v| c.guest_nice = Some(v)),
];

const fn gauge(name: &'static str, help: &'static str, of: Of) -> Series {
    Series {
        name,
        kind: MetricType::Gauge,
        help,
        of,
    }
}

const fn counter(name: &'static str, help: &'static str, of: Of) -> Series {
    Series {
        name,
        kind: MetricType::Counter,
        help,
        of,
    }
}

// ----- the table ----------------------------------------------------------------------------

/// Every family of a page but the reading's age, in page order.
pub(crate) static SERIES: &[Series] = &[
    // Read only (we write no sample): node_exporter's host name, used when there is no INFO.
    gauge(
        "node_uname_info",
        "Labeled system information as provided by the uname system call.",
        Host(Custom(|_, _| {}, read_uname)),
    ),
    gauge(
        INFO,
        "tf-iaware monitor: host and observed process (value 1).",
        Host(Custom(write_info, read_info)),
    ),
    gauge(
        "tf_iaware_reading_timestamp_seconds",
        "Unix time the reading was taken, s.",
        Host(Count(MS, at!(taken_unix_ms))),
    ),
    counter(
        "tf_iaware_monitor_samples_total",
        "Readings taken by the sampler.",
        Host(Count(SAME, at!(samples))),
    ),
    gauge(
        "tf_iaware_monitor_interval_seconds",
        "Time between the last two readings, s.",
        Host(Count(MS, at!(opt interval_ms))),
    ),
    gauge(
        "tf_iaware_monitor_ewma_tau_seconds",
        "Time constant of the EWMA statistics (stat=\"ewma\"), s.",
        Host(Number(at!(ewma_tau_s))),
    ),
    gauge(
        "tf_iaware_monitor_window_seconds",
        "Span of the window statistics (stat=\"mean|min|max\"), s.",
        Host(Number(at!(window_s))),
    ),
    gauge(
        "tf_iaware_note_info",
        "Why a reading is missing (value 1).",
        Host(Texts("note", |s| &s.notes, |s| &mut s.notes)),
    ),
    // CPU.
    counter(
        "node_cpu_seconds_total",
        "Seconds the CPUs spent in each mode.",
        Cores(Adds, Modes(KERNEL_MODES, |c| Some(&c.seconds), |c| &mut c.seconds)),
    ),
    counter(
        "node_cpu_guest_seconds_total",
        "Seconds the CPUs spent in guests (VMs) for each mode.",
        Cores(Fills, Modes(&GUEST_MODES, |c| Some(&c.seconds), |c| &mut c.seconds)),
    ),
    counter(
        "tf_iaware_cpu_seconds_total",
        "Seconds all CPUs together spent in each mode (the cpu line of /proc/stat).",
        HostOr(
            Modes(
                &MODES,
                |s| s.cpu.seconds.as_ref(),
                |s| s.cpu.seconds.get_or_insert_with(Default::default),
            ),
            // A node_exporter page: the sum over its cores.
            |s| {
                s.cpu.seconds = (!s.cpu.cores.is_empty())
                    .then(|| CpuModeSeconds::sum(s.cpu.cores.iter().map(|c| &c.seconds)))
            },
        ),
    ),
    gauge(
        "tf_iaware_cpu_logical_cores",
        "Online logical CPUs.",
        HostOr(Small("a core count", at!(cpu.logical_cores)), |s| {
            s.cpu.logical_cores = s.cpu.cores.len() as u32
        }),
    ),
    gauge(
        "tf_iaware_cpu_utilisation_ratio",
        "Busy share of all CPUs over the last interval, 0-1.",
        Host(Stats(at!(opt cpu.utilisation))),
    ),
    gauge(
        "tf_iaware_cpu_core_utilisation_ratio",
        "Busy share of one CPU over the last interval, 0-1.",
        Cores(Fills, Stats(at!(opt utilisation))),
    ),
    gauge(
        "tf_iaware_cpu_allowed_cores",
        "CPUs the observed process may run on (affinity and cpuset), listed in `cpus`.",
        Host(Custom(write_allowed_cpus, read_allowed_cpus)),
    ),
    gauge(
        "tf_iaware_own_cpu_cores",
        "CPU used by the observed process, cores.",
        Host(Stats(at!(opt cpu.own_cores))),
    ),
    counter(
        "tf_iaware_own_cpu_seconds_total",
        "CPU time used by the observed process, s.",
        Host(Number(at!(opt cpu.own_seconds_total))),
    ),
    gauge(
        "tf_iaware_cotenant_cpu_cores",
        "CPU used by everything but the observed process, cores.",
        Host(Stats(at!(opt cpu.cotenant_cores))),
    ),
    gauge(
        "tf_iaware_cpu_limit_cores",
        "Most CPU the observed process could use (allowed CPUs, cgroup quotas), cores.",
        // A node_exporter page: the whole machine.
        HostOr(Number(at!(cpu.limit_cores)), |s| {
            s.cpu.limit_cores = f64::from(s.cpu.logical_cores)
        }),
    ),
    gauge(
        "tf_iaware_cpu_available_cores",
        "CPU the observed process could use now (limit less co-tenants' use), cores.",
        Host(Stats(at!(opt cpu.available_cores))),
    ),
    gauge(
        "tf_iaware_runnable_tasks",
        "Tasks runnable on the host, on a CPU or waiting for one (procs_running), count.",
        Host(Stats(at!(opt cpu.runnable_tasks))),
    ),
    gauge(
        "tf_iaware_cpu_pressure_some_ratio",
        "Share of time some runnable task waited for a CPU (PSI some avg10), 0-1.",
        Host(Stats(at!(opt cpu.pressure_some_ratio))),
    ),
    // A load average needs all three: the 1m row starts it, the others fill it, and any of
    // them missing drops it.
    gauge(
        "node_load1",
        "1m load average.",
        HostOr(
            Number(At {
                get: |s| s.cpu.load.map(|l| l.one),
                set: |s, one| {
                    let (five, fifteen) = (0.0, 0.0);
                    s.cpu.load = Some(LoadAverage { one, five, fifteen })
                },
            }),
            |s| s.cpu.load = None,
        ),
    ),
    gauge(
        "node_load5",
        "5m load average.",
        HostOr(
            Number(At {
                get: |s| s.cpu.load.map(|l| l.five),
                set: |s, v| s.cpu.load.iter_mut().for_each(|l| l.five = v),
            }),
            |s| s.cpu.load = None,
        ),
    ),
    gauge(
        "node_load15",
        "15m load average.",
        HostOr(
            Number(At {
                get: |s| s.cpu.load.map(|l| l.fifteen),
                set: |s, v| s.cpu.load.iter_mut().for_each(|l| l.fifteen = v),
            }),
            |s| s.cpu.load = None,
        ),
    ),
    // Memory.
    gauge(
        "node_memory_MemTotal_bytes",
        "Memory information field MemTotal_bytes.",
        Host(Count(SAME, at!(opt memory.total_bytes))),
    ),
    gauge(
        "node_memory_MemAvailable_bytes",
        "Memory information field MemAvailable_bytes.",
        Host(Count(SAME, at!(opt memory.available_bytes))),
    ),
    gauge(
        "node_memory_MemFree_bytes",
        "Memory information field MemFree_bytes.",
        Host(Count(SAME, at!(opt memory.free_bytes))),
    ),
    gauge(
        "tf_iaware_memory_available_bytes",
        "Memory the observed process could still allocate (host and cgroup), bytes.",
        Host(Count(SAME, at!(opt memory.available_to_us_bytes))),
    ),
    // Cgroup.
    gauge(
        "tf_iaware_cgroup_unavailable_info",
        "Why the cgroup could not be read (value 1).",
        Host(Text(
            "reason",
            |s| s.cgroup_unavailable.as_deref(),
            |s, r| s.cgroup_unavailable = Some(r),
        )),
    ),
    gauge(
        "tf_iaware_cgroup_info",
        "cgroup of the observed process: version and path (value 1).",
        Host(Custom(write_cgroup_info, read_cgroup_info)),
    ),
    gauge(
        "tf_iaware_cgroup_cpu_quota_cores",
        "Tightest CFS quota over the cgroup and its ancestors, cores.",
        Cgroup(Number(at!(opt cpu_quota_cores))),
    ),
    gauge(
        "tf_iaware_cgroup_cpu_allotment_cores",
        "CPU the enclosing cgroups grant: tightest quota over the ancestors (else the cgroup's own), cores.",
        Cgroup(Number(at!(opt cpu_allotment_cores))),
    ),
    counter(
        "tf_iaware_cgroup_cpu_usage_seconds_total",
        "CPU time used by the whole cgroup, s.",
        Cgroup(Number(at!(opt cpu_usage_seconds_total))),
    ),
    gauge(
        "tf_iaware_cgroup_cpu_usage_cores",
        "CPU used by the whole cgroup, cores.",
        Cgroup(Stats(at!(opt cpu_usage_cores))),
    ),
    counter(
        "tf_iaware_cgroup_periods_total",
        "CFS enforcement periods elapsed.",
        Cgroup(Count(SAME, at!(opt periods_total))),
    ),
    counter(
        "tf_iaware_cgroup_throttled_periods_total",
        "CFS periods in which the cgroup was throttled.",
        Cgroup(Count(SAME, at!(opt throttled_periods_total))),
    ),
    counter(
        "tf_iaware_cgroup_throttled_seconds_total",
        "Time the cgroup's tasks were throttled, s.",
        Cgroup(Number(at!(opt throttled_seconds_total))),
    ),
    gauge(
        "tf_iaware_cgroup_cpu_pressure_some_ratio",
        "Share of time some task of the cgroup waited for a CPU (cpu.pressure some avg10), 0-1.",
        Cgroup(Stats(at!(opt cpu_pressure_some_ratio))),
    ),
    gauge(
        "tf_iaware_cgroup_memory_limit_bytes",
        "Tightest memory limit over the cgroup and its ancestors, bytes.",
        Cgroup(Count(SAME, at!(opt memory_limit_bytes))),
    ),
    gauge(
        "tf_iaware_cgroup_memory_usage_bytes",
        "Memory charged to the cgroup, bytes.",
        Cgroup(Count(SAME, at!(opt memory_usage_bytes))),
    ),
    gauge(
        "tf_iaware_cgroup_memory_working_set_bytes",
        "Cgroup memory usage less inactive file cache, bytes.",
        Cgroup(Count(SAME, at!(opt memory_working_set_bytes))),
    ),
    // Network.
    counter(
        "node_network_receive_bytes_total",
        "Network device statistic receive_bytes.",
        Interfaces(Adds, Count(SAME, at!(rx_bytes_total))),
    ),
    counter(
        "node_network_transmit_bytes_total",
        "Network device statistic transmit_bytes.",
        Interfaces(Adds, Count(SAME, at!(tx_bytes_total))),
    ),
    gauge(
        "tf_iaware_network_receive_bytes_per_second",
        "Receive rate over the last interval, bytes/s.",
        Interfaces(Fills, Number(at!(opt rx_bytes_per_sec))),
    ),
    gauge(
        "tf_iaware_network_transmit_bytes_per_second",
        "Transmit rate over the last interval, bytes/s.",
        Interfaces(Fills, Number(at!(opt tx_bytes_per_sec))),
    ),
    // GPUs: dcgm-exporter's series and labels, then ours.
    gauge(
        "tf_iaware_gpu_unavailable_info",
        "Why there are no GPU metrics (value 1).",
        Host(Text(
            "reason",
            |s| s.gpus_unavailable.as_deref(),
            |s, r| s.gpus_unavailable = Some(r),
        )),
    ),
    gauge(
        "DCGM_FI_DEV_GPU_UTIL",
        "GPU utilization (in %).",
        Gpus(
            Adds,
            GpuLabels::Dcgm,
            Number(At {
                get: |g| g.utilisation_percent.map(|u| u.last),
                set: |g, v| g.utilisation_percent = Some(Smoothed::constant(v)),
            }),
        ),
    ),
    gauge(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory utilization (in %).",
        Gpus(Adds, GpuLabels::Dcgm, Number(at!(opt memory_utilisation_percent))),
    ),
    gauge(
        "DCGM_FI_DEV_FB_TOTAL",
        "Framebuffer memory total (in MiB).",
        Gpus(Adds, GpuLabels::Dcgm, Count(MIB, at!(opt memory_total_bytes))),
    ),
    gauge(
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        Gpus(Adds, GpuLabels::Dcgm, Count(MIB, at!(opt memory_used_bytes))),
    ),
    gauge(
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        Gpus(Adds, GpuLabels::Dcgm, Count(MIB, at!(opt memory_free_bytes))),
    ),
    gauge(
        "DCGM_FI_DEV_SM_CLOCK",
        "SM clock frequency (in MHz).",
        Gpus(Adds, GpuLabels::Dcgm, Number(at!(opt sm_clock_mhz))),
    ),
    gauge(
        "DCGM_FI_DEV_MAX_SM_CLOCK",
        "Maximum SM clock frequency (in MHz).",
        Gpus(Adds, GpuLabels::Dcgm, Number(at!(opt sm_clock_max_mhz))),
    ),
    gauge(
        "DCGM_FI_DEV_POWER_USAGE",
        "Power draw (in W).",
        Gpus(Adds, GpuLabels::Dcgm, Number(at!(opt power_watts))),
    ),
    gauge(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "Power management limit (in W).",
        Gpus(Adds, GpuLabels::Dcgm, Number(at!(opt power_limit_watts))),
    ),
    gauge(
        "DCGM_FI_DEV_GPU_TEMP",
        "GPU temperature (in C).",
        Gpus(Adds, GpuLabels::Dcgm, Number(at!(opt temperature_celsius))),
    ),
    gauge(
        "tf_iaware_gpu_utilisation_percent",
        "GPU utilisation (smoothed), percent.",
        Gpus(Fills, GpuLabels::Id, Stats(at!(opt utilisation_percent))),
    ),
    gauge(
        "tf_iaware_gpu_own_utilisation_percent",
        "SM utilisation of the observed process, percent.",
        Gpus(Fills, GpuLabels::Id, Number(at!(opt own_utilisation_percent))),
    ),
    gauge(
        "tf_iaware_gpu_pcie_transmit_bytes_per_second",
        "PCIe transmit throughput, bytes/s.",
        Gpus(Fills, GpuLabels::Id, Number(at!(opt pcie_tx_bytes_per_sec))),
    ),
    gauge(
        "tf_iaware_gpu_pcie_receive_bytes_per_second",
        "PCIe receive throughput, bytes/s.",
        Gpus(Fills, GpuLabels::Id, Number(at!(opt pcie_rx_bytes_per_sec))),
    ),
    gauge(
        "tf_iaware_gpu_compute_processes",
        "Processes with a compute context on the GPU.",
        Gpus(
            Fills,
            GpuLabels::Id,
            Small("a process count", at!(opt compute_processes)),
        ),
    ),
    gauge(
        "tf_iaware_gpu_unsupported_info",
        "A GPU reading the device or driver does not provide (value 1).",
        Gpus(
            Fills,
            GpuLabels::Index,
            Texts("what", |g| &g.unsupported, |g| &mut g.unsupported),
        ),
    ),
    // Devices.
    gauge(
        "tf_iaware_device_available_share",
        "Effective compute share of the device available to us, 0-1 of its hardware capacity.",
        Devices(Adds, Stats(at!(compute_share))),
    ),
    gauge(
        "tf_iaware_device_capacity",
        "Hardware capacity the share refers to: logical cores for CPU, 1 for a GPU.",
        Devices(Fills, Number(at!(capacity))),
    ),
    gauge(
        "tf_iaware_device_free_memory_bytes",
        "Memory we could still allocate on the device, bytes.",
        Devices(Fills, Count(SAME, at!(opt free_memory_bytes))),
    ),
];

/// The reading's age, written after everything else (it changes with every request, the rest
/// once per reading) and read last (it is every device's age too).
pub(crate) static AGE: Series = gauge(
    "tf_iaware_reading_age_seconds",
    "Age of the reading when this page was served, s.",
    Host(Count(
        MS,
        At {
            get: |s| Some(s.age_ms),
            set: Snapshot::set_age_ms,
        },
    )),
);

// ----- hand-written series ------------------------------------------------------------------

fn read_uname(s: &mut Snapshot, xs: &[Sample]) -> Result<()> {
    if let Some(x) = xs.first() {
        s.host = x.label("nodename").unwrap_or_default().to_string();
    }
    Ok(())
}

fn write_info(s: &Snapshot, f: &mut Family) {
    let pid = s.pid.map(|p| p.to_string()).unwrap_or_default();
    f.push(
        &[
            ("host", &s.host),
            ("pid", &pid),
            ("version", env!("CARGO_PKG_VERSION")),
        ],
        1.0,
    );
}

fn read_info(s: &mut Snapshot, xs: &[Sample]) -> Result<()> {
    if let Some(info) = xs.first() {
        s.host = info.label("host").unwrap_or_default().to_string();
        s.pid = label_u32(info, "pid").or_else(|e| match info.label("pid") {
            Some("") => Ok(None),
            _ => Err(e),
        })?;
    }
    Ok(())
}

fn write_allowed_cpus(s: &Snapshot, f: &mut Family) {
    if let Some(a) = &s.cpu.allowed_cpus {
        f.push(&[("cpus", &cpu_list(a))], a.len() as f64);
    }
}

fn read_allowed_cpus(s: &mut Snapshot, xs: &[Sample]) -> Result<()> {
    if let Some(x) = xs.first() {
        let list = x.label("cpus").unwrap_or_default();
        s.cpu.allowed_cpus = Some(
            parse_cpu_list(list, std::path::Path::new(&x.name))
                .map_err(|e| bad(x, e.to_string()))?,
        );
    }
    Ok(())
}

/// `0-2,5,7-9` for CPUs 0, 1, 2, 5, 7, 8, 9 (sorted, as `parse_cpu_list` gives them).
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

fn write_cgroup_info(s: &Snapshot, f: &mut Family) {
    if let Some(cg) = &s.cgroup {
        f.push(
            &[("version", &cg.version.to_string()), ("path", &cg.path)],
            1.0,
        );
    }
}

/// The cgroup is known when its info series is there; the [`Of::Cgroup`] rows below fill it.
fn read_cgroup_info(s: &mut Snapshot, xs: &[Sample]) -> Result<()> {
    if let Some(info) = xs.first() {
        let version = label_u32(info, "version")?.unwrap_or(0);
        s.cgroup = Some(CgroupSnapshot {
            version: u8::try_from(version)
                .map_err(|_| bad(info, format!("cgroup version {version}")))?,
            path: info.label("path").unwrap_or_default().to_string(),
            ..CgroupSnapshot::default()
        });
    }
    Ok(())
}

// ----- collections --------------------------------------------------------------------------

type Labels<'a> = Vec<(&'static str, Cow<'a, str>)>;

/// A key label's value: a number (`cpu`, `gpu`) or a name (`device`).
trait Key: Ord + Clone + Sized {
    fn of(x: &Sample, label: &str) -> Result<Option<Self>>;
}

impl Key for u32 {
    fn of(x: &Sample, label: &str) -> Result<Option<Self>> {
        label_u32(x, label)
    }
}

impl Key for String {
    fn of(x: &Sample, label: &str) -> Result<Option<Self>> {
        Ok(x.label(label).map(str::to_string))
    }
}

/// A member of a collection the page describes series by series.
trait Member: Sized {
    /// The key label.
    const KEY: &'static str;
    /// Whether members are kept in key order (else in the order the page first names them).
    const SORTED: bool;
    type Key: Key;
    /// What a row says about the labels to write after the key.
    type Style: Copy;

    fn key(&self) -> &Self::Key;
    /// A member known by its key only.
    fn new(key: Self::Key) -> Self;
    /// The key label and what `style` adds.
    fn labels<'a>(&'a self, style: Self::Style, s: &'a Snapshot) -> Labels<'a>;
    /// Takes what a sample of an [`Each::Adds`] row says about the member beyond its key.
    fn identify(&mut self, _x: &Sample) {}
}

impl Member for CoreSnapshot {
    const KEY: &'static str = "cpu";
    const SORTED: bool = true;
    type Key = u32;
    type Style = ();

    fn key(&self) -> &u32 {
        &self.cpu
    }
    fn new(cpu: u32) -> Self {
        CoreSnapshot {
            cpu,
            utilisation: None,
            seconds: CpuModeSeconds::default(),
        }
    }
    fn labels<'a>(&'a self, (): (), _: &'a Snapshot) -> Labels<'a> {
        vec![(Self::KEY, self.cpu.to_string().into())]
    }
}

impl Member for NetworkInterface {
    const KEY: &'static str = "device";
    const SORTED: bool = true;
    type Key = String;
    type Style = ();

    fn key(&self) -> &String {
        &self.name
    }
    fn new(name: String) -> Self {
        NetworkInterface {
            name,
            rx_bytes_total: 0,
            tx_bytes_total: 0,
            rx_bytes_per_sec: None,
            tx_bytes_per_sec: None,
        }
    }
    fn labels<'a>(&'a self, (): (), _: &'a Snapshot) -> Labels<'a> {
        vec![(Self::KEY, self.name.as_str().into())]
    }
}

impl Member for GpuSnapshot {
    const KEY: &'static str = "gpu";
    const SORTED: bool = true;
    type Key = u32;
    type Style = GpuLabels;

    fn key(&self) -> &u32 {
        &self.index
    }
    fn new(index: u32) -> Self {
        GpuSnapshot {
            index,
            ..GpuSnapshot::default()
        }
    }
    fn labels<'a>(&'a self, style: GpuLabels, s: &'a Snapshot) -> Labels<'a> {
        let mut l = vec![(Self::KEY, self.index.to_string().into())];
        match style {
            GpuLabels::Index => {}
            GpuLabels::Id => l.push(("UUID", self.uuid.as_str().into())),
            GpuLabels::Dcgm => l.extend([
                ("UUID", self.uuid.as_str().into()),
                (
                    "pci_bus_id",
                    self.pci_bus_id.as_deref().unwrap_or("").into(),
                ),
                (
                    "device",
                    self.minor_number
                        .map(|m| format!("nvidia{m}"))
                        .unwrap_or_default()
                        .into(),
                ),
                ("modelName", self.name.as_str().into()),
                ("Hostname", s.host.as_str().into()),
            ]),
        }
        l
    }
    /// dcgm-exporter's identity labels, from the first sample that has a `UUID`.
    fn identify(&mut self, x: &Sample) {
        if self.uuid.is_empty() {
            self.uuid = x.label("UUID").unwrap_or_default().to_string();
            self.name = x.label("modelName").unwrap_or_default().to_string();
            self.pci_bus_id = x
                .label("pci_bus_id")
                .filter(|v| !v.is_empty())
                .map(str::to_string);
            self.minor_number = x
                .label("device")
                .and_then(|d| d.strip_prefix("nvidia"))
                .and_then(|m| m.parse().ok());
        }
    }
}

impl Member for DeviceAvailability {
    const KEY: &'static str = "device";
    const SORTED: bool = false;
    type Key = String;
    type Style = ();

    fn key(&self) -> &String {
        &self.device
    }
    /// Capacity 1 until the page says otherwise; age 0 until the reading's age is read.
    fn new(device: String) -> Self {
        DeviceAvailability {
            kind: if device.starts_with("GPU") {
                DeviceKind::Gpu
            } else {
                DeviceKind::Cpu
            },
            device,
            capacity: 1.0,
            compute_share: Smoothed::constant(0.0),
            free_memory_bytes: None,
            age_ms: 0,
        }
    }
    fn labels<'a>(&'a self, (): (), _: &'a Snapshot) -> Labels<'a> {
        vec![(Self::KEY, self.device.as_str().into())]
    }
}

/// The members of a collection while one row is read, found by key in O(log n).
struct Index<'a, M: Member> {
    members: &'a mut Vec<M>,
    at: BTreeMap<M::Key, usize>,
    each: Each,
    added: bool,
}

impl<'a, M: Member> Index<'a, M> {
    fn new(members: &'a mut Vec<M>, each: Each) -> Self {
        let at = (members.iter().enumerate())
            .map(|(i, m)| (m.key().clone(), i))
            .collect();
        Index {
            members,
            at,
            each,
            added: false,
        }
    }

    /// The member with `key`: found, added (if the row [`Each::Adds`]), or none.
    fn get(&mut self, key: M::Key) -> Option<&mut M> {
        let i = match self.at.get(&key) {
            Some(&i) => i,
            None if self.each == Adds => {
                let i = self.members.len();
                self.at.insert(key.clone(), i);
                self.members.push(M::new(key));
                self.added = true;
                i
            }
            None => return None,
        };
        self.members.get_mut(i)
    }

    /// Puts members added by the row in their place: key order, or the order of arrival.
    fn finish(self) {
        if self.added && M::SORTED {
            self.members.sort_by(|a, b| a.key().cmp(b.key()));
        }
    }
}

// ----- writing and reading ------------------------------------------------------------------

impl Series {
    /// Appends the family's samples for `s` to `f` (none where the snapshot has no value).
    pub(crate) fn write(&self, s: &Snapshot, f: &mut Family) {
        match &self.of {
            Host(field) | HostOr(field, _) => field.write(s, &[], f),
            Cgroup(field) => {
                if let Some(cg) = &s.cgroup {
                    field.write(cg, &[], f);
                }
            }
            Cores(_, field) => write_members(field, (), &s.cpu.cores, s, f),
            Interfaces(_, field) => write_members(field, (), &s.network, s, f),
            Gpus(_, style, field) => write_members(field, *style, &s.gpus, s, f),
            Devices(_, field) => write_members(field, (), &s.devices, s, f),
        }
    }

    /// Sets the fields of `s` that the family says something about.
    ///
    /// # Errors
    /// [`Error::Exposition`] naming the series and the line of a sample whose value or label
    /// cannot be what the series claims (a negative byte count, a `cpu` label that is not a
    /// number, a malformed CPU list).
    pub(crate) fn read(&self, page: &Exposition, s: &mut Snapshot) -> Result<()> {
        let samples = page.samples(self.name);
        match &self.of {
            Host(field) if !samples.is_empty() => field.read(s, samples)?,
            Host(_) => {}
            HostOr(field, _) if !samples.is_empty() => field.read(s, samples)?,
            HostOr(_, absent) => absent(s),
            Cgroup(field) => {
                if let (false, Some(cg)) = (samples.is_empty(), &mut s.cgroup) {
                    field.read(cg, samples)?;
                }
            }
            Cores(each, field) => read_members(field, *each, &mut s.cpu.cores, samples)?,
            Interfaces(each, field) => read_members(field, *each, &mut s.network, samples)?,
            Gpus(each, _, field) => read_members(field, *each, &mut s.gpus, samples)?,
            Devices(each, field) => read_members(field, *each, &mut s.devices, samples)?,
        }
        Ok(())
    }
}

/// Appends the samples of every member to `f`, in the members' order.
fn write_members<M: Member>(
    field: &Field<M>,
    style: M::Style,
    members: &[M],
    s: &Snapshot,
    f: &mut Family,
) {
    for m in members {
        let labels = m.labels(style, s);
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_ref())).collect();
        field.write(m, &labels, f);
    }
}

/// Sets the field of the members that `samples` name (adding members if `each` allows).
fn read_members<M: Member>(
    field: &Field<M>,
    each: Each,
    members: &mut Vec<M>,
    samples: &[Sample],
) -> Result<()> {
    let mut index = Index::new(members, each);
    if let Stats(at) = field {
        // The statistics of one member come in several samples: gather them by key first.
        let mut groups: Vec<(M::Key, Vec<&Sample>)> = Vec::new();
        let mut group_of: BTreeMap<M::Key, usize> = BTreeMap::new();
        for x in samples {
            let Some(key) = M::Key::of(x, M::KEY)? else {
                continue;
            };
            match group_of.get(&key) {
                Some(&g) => groups[g].1.push(x),
                None => {
                    group_of.insert(key.clone(), groups.len());
                    groups.push((key, vec![x]));
                }
            }
        }
        for (key, group) in groups {
            if let Some(v) = smoothed_of(group.into_iter()) {
                if let Some(m) = index.get(key) {
                    (at.set)(m, v);
                }
            }
        }
    } else {
        for x in samples {
            let Some(key) = M::Key::of(x, M::KEY)? else {
                continue;
            };
            if !field.applies(x) {
                continue;
            }
            let Some(m) = index.get(key) else {
                continue;
            };
            if each == Adds {
                m.identify(x);
            }
            field.read_sample(m, x)?;
        }
    }
    index.finish();
    Ok(())
}

impl<E> Field<E> {
    /// Appends the samples of `e`, labelled `labels` and then the field's own label, to `f`.
    fn write(&self, e: &E, labels: &[(&str, &str)], f: &mut Family) {
        let push = |f: &mut Family, own: Option<(&str, &str)>, v: Option<f64>| {
            if let Some(v) = v {
                let mut l = labels.to_vec();
                l.extend(own);
                f.push(&l, v);
            }
        };
        match self {
            Number(at) => push(f, None, (at.get)(e)),
            Count(per, at) => push(f, None, (at.get)(e).map(|v| v as f64 / per)),
            Small(_, at) => push(f, None, (at.get)(e).map(f64::from)),
            Stats(at) => {
                if let Some(v) = (at.get)(e) {
                    for (stat, v) in STATS.iter().zip([v.last, v.ewma, v.mean, v.min, v.max]) {
                        push(f, Some((STAT, stat)), Some(v));
                    }
                }
            }
            Modes(modes, get, _) => {
                if let Some(sec) = get(e) {
                    for Mode(mode, get, _) in *modes {
                        push(f, Some((MODE, mode)), get(sec));
                    }
                }
            }
            Text(label, get, _) => {
                if let Some(t) = get(e) {
                    push(f, Some((label, t)), Some(1.0));
                }
            }
            Texts(label, get, _) => {
                for t in get(e) {
                    push(f, Some((label, t)), Some(1.0));
                }
            }
            Custom(write, _) => write(e, f),
        }
    }

    /// Whether `x` has the label the field reads (its mode, its text).
    fn applies(&self, x: &Sample) -> bool {
        match self {
            Modes(..) => x.label(MODE).is_some(),
            Text(label, ..) | Texts(label, ..) => x.label(label).is_some(),
            _ => true,
        }
    }

    /// Sets the field of `e` from the family's `samples` (at least one): the first, or all of
    /// them where the field has several samples.
    fn read(&self, e: &mut E, samples: &[Sample]) -> Result<()> {
        match self {
            Stats(at) => {
                if let Some(v) = smoothed_of(samples.iter()) {
                    (at.set)(e, v);
                }
            }
            Modes(_, _, seconds) => {
                seconds(e);
                for x in samples {
                    self.read_sample(e, x)?;
                }
            }
            Texts(..) => {
                for x in samples {
                    self.read_sample(e, x)?;
                }
            }
            Custom(_, read) => read(e, samples)?,
            _ => {
                if let Some(x) = samples.first() {
                    self.read_sample(e, x)?;
                }
            }
        }
        Ok(())
    }

    /// Sets the field of `e` from one sample.
    fn read_sample(&self, e: &mut E, x: &Sample) -> Result<()> {
        match self {
            Number(at) => (at.set)(e, x.value),
            Count(per, at) => (at.set)(e, count(x, *per)?),
            Small(what, at) => {
                let n = u32::try_from(count(x, SAME)?)
                    .map_err(|_| bad(x, format!("{} is not {what}", x.value)))?;
                (at.set)(e, n);
            }
            Stats(at) => {
                if let Some(v) = smoothed_of(std::iter::once(x)) {
                    (at.set)(e, v);
                }
            }
            Modes(modes, _, seconds) => {
                let mode = x.label(MODE);
                if let Some(Mode(_, _, set)) = modes.iter().find(|m| Some(m.0) == mode) {
                    set(seconds(e), x.value);
                }
            }
            Text(label, _, set) => {
                if let Some(t) = x.label(label) {
                    set(e, t.to_string());
                }
            }
            Texts(label, _, texts) => {
                if let Some(t) = x.label(label) {
                    texts(e).push(t.to_string());
                }
            }
            Custom(_, read) => read(e, std::slice::from_ref(x))?,
        }
        Ok(())
    }
}

// ----- values -------------------------------------------------------------------------------

/// An error about sample `x`: its line, and the series named in the reason.
fn bad(x: &Sample, reason: String) -> Error {
    Error::Exposition {
        line: x.line,
        reason: format!("`{}`: {reason}", x.name),
    }
}

/// A non-negative whole number (counts, bytes) from a sample value × `scale`.
fn count(x: &Sample, scale: f64) -> Result<u64> {
    let v = x.value * scale;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(bad(x, format!("{} is not a count", x.value)));
    }
    Ok(v.round() as u64)
}

fn label_u32(x: &Sample, label: &str) -> Result<Option<u32>> {
    match x.label(label) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| bad(x, format!("label {label}=\"{v}\" is not a number"))),
    }
}

/// A smoothed gauge from samples with a `stat` label (or one unlabelled reading).
fn smoothed_of<'a>(samples: impl Iterator<Item = &'a Sample>) -> Option<Smoothed> {
    let mut vals: [Option<f64>; 5] = [None; 5];
    for x in samples {
        let i = match x.label(STAT) {
            None => 0,
            Some(stat) => match STATS.iter().position(|s| *s == stat) {
                Some(i) => i,
                None => continue,
            },
        };
        vals[i] = Some(x.value);
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
