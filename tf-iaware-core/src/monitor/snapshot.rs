//! [`Snapshot`]: one reading of a machine as plain data. The local sampler and the scraper both
//! produce it, the agent serves it, and the cluster and cost model read it.
//!
//! Units are in the field names or their docs: `_bytes`, `_cores` (CPU-seconds per second),
//! `_ms`, `_percent` (0–100, as NVML and DCGM report it), `_ratio`/`utilisation`/`share` (0–1).
//! A value that could not be read is `None`; the reason is in [`Snapshot::notes`] (or in
//! [`Snapshot::cgroup_unavailable`] / [`Snapshot::gpus_unavailable`] for whole sources).

use serde::{Deserialize, Serialize};

/// A gauge as last read plus its smoothed forms, all in the unit of the gauge.
///
/// `ewma` is an exponentially weighted moving average with time constant
/// [`Snapshot::ewma_tau_s`]; `mean`, `min` and `max` cover the last [`Snapshot::window_s`]
/// seconds of readings (including the last one).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Smoothed {
    /// Value of the most recent reading.
    pub last: f64,
    /// Exponentially weighted moving average.
    pub ewma: f64,
    /// Mean over the window.
    pub mean: f64,
    /// Minimum over the window.
    pub min: f64,
    /// Maximum over the window.
    pub max: f64,
}

impl Smoothed {
    /// A gauge seen once: every statistic equals `value`.
    pub fn constant(value: f64) -> Self {
        Smoothed {
            last: value,
            ewma: value,
            mean: value,
            min: value,
            max: value,
        }
    }
}

/// CPU time spent in each mode since boot, seconds (from `/proc/stat`, node_exporter's
/// `node_cpu_seconds_total{mode}`). `guest` and `guest_nice` are already included in `user`
/// and `nice`; they are reported for completeness and never added to a total.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuModeSeconds {
    /// User mode, seconds (includes `guest`).
    pub user: f64,
    /// User mode at low priority, seconds (includes `guest_nice`).
    pub nice: f64,
    /// Kernel mode, seconds.
    pub system: f64,
    /// Idle, seconds.
    pub idle: f64,
    /// Waiting for I/O, seconds (Linux ≥ 2.5.41).
    pub iowait: Option<f64>,
    /// Servicing interrupts, seconds (Linux ≥ 2.6.0).
    pub irq: Option<f64>,
    /// Servicing softirqs, seconds (Linux ≥ 2.6.0).
    pub softirq: Option<f64>,
    /// Stolen by the hypervisor, seconds (Linux ≥ 2.6.11).
    pub steal: Option<f64>,
    /// Running a guest's virtual CPU, seconds (part of `user`; Linux ≥ 2.6.24).
    pub guest: Option<f64>,
    /// Running a niced guest's virtual CPU, seconds (part of `nice`; Linux ≥ 2.6.33).
    pub guest_nice: Option<f64>,
}

impl CpuModeSeconds {
    /// All accounted time, seconds (guest time is not added twice).
    pub(crate) fn total(&self) -> f64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait.unwrap_or(0.0)
            + self.irq.unwrap_or(0.0)
            + self.softirq.unwrap_or(0.0)
            + self.steal.unwrap_or(0.0)
    }

    /// Time not idle and not waiting for I/O, seconds.
    pub(crate) fn busy(&self) -> f64 {
        self.total() - self.idle - self.iowait.unwrap_or(0.0)
    }
}

/// One logical CPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CoreSnapshot {
    /// Kernel CPU number (`cpuN` in `/proc/stat`, `cpu` label of node_exporter).
    pub cpu: u32,
    /// Busy share of this CPU over the last interval, 0–1 (`None` before two readings).
    pub utilisation: Option<Smoothed>,
    /// Counters since boot.
    pub seconds: CpuModeSeconds,
}

/// Load averages (runnable plus uninterruptible tasks), as in `/proc/loadavg`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadAverage {
    /// 1-minute load average.
    pub one: f64,
    /// 5-minute load average.
    pub five: f64,
    /// 15-minute load average.
    pub fifteen: f64,
}

/// CPUs of the machine and our share of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuSnapshot {
    /// Online logical CPUs of the machine.
    pub logical_cores: u32,
    /// Busy share of all logical CPUs over the last interval, 0–1.
    pub utilisation: Option<Smoothed>,
    /// Per logical CPU, in kernel order.
    pub cores: Vec<CoreSnapshot>,
    /// Counters summed over all CPUs since boot (the `cpu` line of `/proc/stat`).
    pub seconds: Option<CpuModeSeconds>,
    /// CPUs the observed process may run on (affinity ∩ cpuset; `None`: unknown, all).
    pub allowed_cpus: Option<Vec<u32>>,
    /// CPU used by the observed process (our own use), cores.
    pub own_cores: Option<Smoothed>,
    /// CPU time used by the observed process since it started, seconds.
    pub own_seconds_total: Option<f64>,
    /// CPU used by everything else on the machine (busy − own), cores.
    pub cotenant_cores: Option<Smoothed>,
    /// Most CPU the observed process could use: min(allowed CPUs, cgroup quota), cores.
    pub limit_cores: f64,
    /// CPU the observed process could use now (its own current use included): the limit less
    /// what co-tenants take from the allowed CPUs and from the cgroup quotas, cores
    /// (0 ≤ x ≤ limit).
    pub available_cores: Option<Smoothed>,
    /// Load averages.
    pub load: Option<LoadAverage>,
    /// Tasks runnable on the host — on a CPU or waiting for one — at each reading
    /// (`procs_running` of `/proc/stat`, the reading thread included), count.
    #[serde(default)]
    pub runnable_tasks: Option<Smoothed>,
    /// Of [`CpuSnapshot::runnable_tasks`], those that are the observed process's own threads or
    /// the reading thread, counted at the same readings (state `R` in
    /// `/proc/<pid>/task/*/stat`), count; `None` from an agent of an older version.
    #[serde(default)]
    pub own_runnable_tasks: Option<Smoothed>,
    /// Host CPU pressure: share of time some runnable task waited for a CPU
    /// (`/proc/pressure/cpu`, `some avg10`), 0–1; `None` where the kernel has no PSI.
    #[serde(default)]
    pub pressure_some_ratio: Option<Smoothed>,
}

/// Host memory (`/proc/meminfo`) and what of it the observed process may still use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemorySnapshot {
    /// `MemTotal`, bytes.
    pub total_bytes: Option<u64>,
    /// `MemAvailable` (what can be allocated without swapping), bytes.
    pub available_bytes: Option<u64>,
    /// `MemFree`, bytes.
    pub free_bytes: Option<u64>,
    /// min(`MemAvailable`, cgroup limit − cgroup working set), bytes.
    pub available_to_us_bytes: Option<u64>,
}

/// The control group of the observed process (CPU and memory controllers).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupSnapshot {
    /// 1 or 2: the cgroup version of the CPU controller.
    pub version: u8,
    /// Path of the process's CPU cgroup, relative to its hierarchy (`/` is the root).
    pub path: String,
    /// Tightest CFS quota over the cgroup and its ancestors (`cpu.cfs_quota_us /
    /// cpu.cfs_period_us`, or `cpu.max`), cores; `None`: no quota.
    pub cpu_quota_cores: Option<f64>,
    /// CPU the process's enclosing groups grant it, cores: the tightest quota over the
    /// cgroup's ancestors (`None`: no ancestor has one). A quota on the process's own cgroup —
    /// a container's or a pod's limit, a systemd unit's `CPUQuota=`, a cgroup made by hand —
    /// is not part of it: it shows as lost availability of the machine's cores (its share of
    /// them), so that capability × availability is what the quota leaves, wherever it was set.
    #[serde(default)]
    pub cpu_allotment_cores: Option<f64>,
    /// CPU time used by the whole cgroup since it was created, seconds.
    pub cpu_usage_seconds_total: Option<f64>,
    /// CPU used by the whole cgroup over the last interval, cores.
    pub cpu_usage_cores: Option<Smoothed>,
    /// Enforcement periods that have elapsed (`nr_periods`).
    pub periods_total: Option<u64>,
    /// Periods in which the cgroup was throttled (`nr_throttled`).
    pub throttled_periods_total: Option<u64>,
    /// Time the cgroup's tasks were throttled, seconds.
    pub throttled_seconds_total: Option<f64>,
    /// CPU pressure of the cgroup: share of time some of its tasks waited for a CPU (v2
    /// `cpu.pressure`, `some avg10`), 0–1; `None` on cgroup v1 or without PSI.
    #[serde(default)]
    pub cpu_pressure_some_ratio: Option<Smoothed>,
    /// Threads of the cgroup other than the observed process's that are runnable, averaged:
    /// the co-tenants competing for its quota (counted only where there is a quota; `None`:
    /// not counted).
    #[serde(default)]
    pub others_runnable_tasks: Option<Smoothed>,
    /// Tightest memory limit over the cgroup and its ancestors, bytes; `None`: unlimited.
    pub memory_limit_bytes: Option<u64>,
    /// Memory charged to the cgroup (`memory.usage_in_bytes` / `memory.current`), bytes.
    pub memory_usage_bytes: Option<u64>,
    /// Usage less inactive file cache (what the kernel cannot easily reclaim), bytes.
    pub memory_working_set_bytes: Option<u64>,
}

/// One network interface (`/proc/net/dev`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetworkInterface {
    /// Interface name (`device` label of node_exporter).
    pub name: String,
    /// Bytes received since the interface came up.
    pub rx_bytes_total: u64,
    /// Bytes transmitted since the interface came up.
    pub tx_bytes_total: u64,
    /// Receive rate over the last interval, bytes/s.
    pub rx_bytes_per_sec: Option<f64>,
    /// Transmit rate over the last interval, bytes/s.
    pub tx_bytes_per_sec: Option<f64>,
}

/// One NVIDIA GPU (NVML, or DCGM exporter names when scraped).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSnapshot {
    /// NVML index (`gpu` label of dcgm-exporter; not necessarily the CUDA index).
    pub index: u32,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Product name, e.g. `NVIDIA A100-SXM4-40GB`.
    pub name: String,
    /// `/dev/nvidiaN` minor number (`device="nvidiaN"` label of dcgm-exporter).
    pub minor_number: Option<u32>,
    /// PCI bus id, e.g. `00000000:07:00.0`.
    pub pci_bus_id: Option<String>,
    /// Time a kernel was running over the driver's sample period, percent.
    pub utilisation_percent: Option<Smoothed>,
    /// Time device memory was read or written over the sample period, percent.
    pub memory_utilisation_percent: Option<f64>,
    /// SM utilisation of the observed process, percent (from per-process samples).
    pub own_utilisation_percent: Option<f64>,
    /// Framebuffer memory installed, bytes.
    pub memory_total_bytes: Option<u64>,
    /// Framebuffer memory allocated, bytes.
    pub memory_used_bytes: Option<u64>,
    /// Framebuffer memory unallocated, bytes.
    pub memory_free_bytes: Option<u64>,
    /// Current SM clock, MHz.
    pub sm_clock_mhz: Option<f64>,
    /// Highest SM clock, MHz.
    pub sm_clock_max_mhz: Option<f64>,
    /// Power draw, W (NVML reports mW).
    pub power_watts: Option<f64>,
    /// Enforced power limit, W.
    pub power_limit_watts: Option<f64>,
    /// Core temperature, °C.
    pub temperature_celsius: Option<f64>,
    /// PCIe transmit throughput, bytes/s (NVML reports KiB/s).
    pub pcie_tx_bytes_per_sec: Option<f64>,
    /// PCIe receive throughput, bytes/s.
    pub pcie_rx_bytes_per_sec: Option<f64>,
    /// Processes with a compute context on the GPU.
    pub compute_processes: Option<u32>,
    /// Readings the device or driver did not provide, as `field: reason`.
    pub unsupported: Vec<String>,
}

/// Kind of a [`DeviceAvailability`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// The host CPUs (one TensorFlow `CPU:0` device).
    Cpu,
    /// An NVIDIA GPU.
    Gpu,
}

/// What the cost model needs per device: the share of it we can use now and its free memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceAvailability {
    /// `CPU:0` or `GPU:<NVML index>` (type and index of a TensorFlow device name).
    pub device: String,
    /// CPU or GPU.
    pub kind: DeviceKind,
    /// Hardware capacity the share refers to: logical cores for the CPU, 1 for a GPU.
    pub capacity: f64,
    /// Effective compute share available to us, 0–1, of the device's hardware capacity
    /// (CPU: available cores / logical cores; GPU: 1 − utilisation by others).
    pub compute_share: Smoothed,
    /// Memory we could still allocate on the device, bytes.
    pub free_memory_bytes: Option<u64>,
    /// Age of the reading behind these figures, ms (same as [`Snapshot::age_ms`]).
    pub age_ms: u64,
}

/// One reading of a machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Where it comes from: `local`, or the scraped target's name.
    pub source: String,
    /// Host name of the machine described.
    pub host: String,
    /// Process whose own CPU use and cgroup are reported (`None`: not known, e.g. a
    /// node_exporter page).
    pub pid: Option<u32>,
    /// Unix time the reading was taken, ms.
    pub taken_unix_ms: u64,
    /// How old the reading was when this snapshot was handed out, ms.
    pub age_ms: u64,
    /// Time between the last two readings (the span rates and utilisation cover), ms.
    pub interval_ms: Option<u64>,
    /// Readings taken by the sampler so far.
    pub samples: u64,
    /// Time constant of the EWMAs in [`Smoothed`], s.
    pub ewma_tau_s: f64,
    /// Span of the window statistics in [`Smoothed`], s.
    pub window_s: f64,
    /// True when the reading is not current (endpoint failed, or reading too old).
    pub stale: bool,
    /// Why it is stale.
    pub stale_reason: Option<String>,
    /// CPUs.
    pub cpu: CpuSnapshot,
    /// Memory.
    pub memory: MemorySnapshot,
    /// The observed process's cgroup (`None`: see [`Snapshot::cgroup_unavailable`]).
    pub cgroup: Option<CgroupSnapshot>,
    /// Why there is no cgroup reading.
    pub cgroup_unavailable: Option<String>,
    /// Network interfaces, by name.
    pub network: Vec<NetworkInterface>,
    /// GPUs, by NVML index (empty: see [`Snapshot::gpus_unavailable`]).
    pub gpus: Vec<GpuSnapshot>,
    /// `GPU metrics unavailable: <reason>` when GPUs could not be read.
    pub gpus_unavailable: Option<String>,
    /// Per device (`CPU:0` first, then GPUs): compute share and free memory.
    pub devices: Vec<DeviceAvailability>,
    /// Why individual readings are missing (`/proc/loadavg: …`).
    pub notes: Vec<String>,
}

impl Snapshot {
    /// A snapshot with no readings from `source` (used for endpoints never reached).
    pub fn empty(source: &str) -> Self {
        Snapshot {
            source: source.to_string(),
            host: String::new(),
            pid: None,
            taken_unix_ms: 0,
            age_ms: 0,
            interval_ms: None,
            samples: 0,
            ewma_tau_s: 0.0,
            window_s: 0.0,
            stale: false,
            stale_reason: None,
            cpu: CpuSnapshot::default(),
            memory: MemorySnapshot::default(),
            cgroup: None,
            cgroup_unavailable: None,
            network: Vec::new(),
            gpus: Vec::new(),
            gpus_unavailable: None,
            devices: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// The availability entry of `device` (`CPU:0`, `GPU:1`, …), if any.
    pub fn device(&self, device: &str) -> Option<&DeviceAvailability> {
        self.devices.iter().find(|d| d.device == device)
    }

    /// Sets [`Snapshot::age_ms`] and every device's `age_ms` to `age_ms`.
    pub fn set_age_ms(&mut self, age_ms: u64) {
        self.age_ms = age_ms;
        for d in &mut self.devices {
            d.age_ms = age_ms;
        }
    }

    /// Marks the snapshot stale, with `reason`.
    pub fn mark_stale(&mut self, reason: impl Into<String>) {
        self.stale = true;
        self.stale_reason = Some(reason.into());
    }
}

/// Unix time now, ms (0 if the clock is before 1970).
pub fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl CpuModeSeconds {
    /// Sum of per-CPU mode counters, s (for pages without an all-CPU line).
    pub(crate) fn sum<'a>(it: impl Iterator<Item = &'a CpuModeSeconds>) -> CpuModeSeconds {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_totals_do_not_count_guest_twice() {
        let s = CpuModeSeconds {
            user: 10.0,
            nice: 1.0,
            system: 2.0,
            idle: 80.0,
            iowait: Some(3.0),
            irq: Some(0.5),
            softirq: Some(0.5),
            steal: Some(1.0),
            guest: Some(4.0),
            guest_nice: Some(0.5),
        };
        assert_eq!(s.total(), 98.0);
        assert_eq!(s.busy(), 15.0);
    }

    #[test]
    fn empty_snapshot_serialises_with_gpus_array() {
        let mut s = Snapshot::empty("local");
        s.gpus_unavailable = Some("GPU metrics unavailable: no driver".into());
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["gpus"], serde_json::json!([]));
        let back: Snapshot = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
    }
}
