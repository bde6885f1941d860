//! The table itself: every row of [`SERIES`] and [`AGE`], and the hand-written series that no
//! [`Field`](super::Field) describes (host and process info, allowed CPUs, cgroup info).

use super::Each::{Adds, Fills};
use super::Field::{Count, Custom, Modes, Number, Small, Stats, Text, Texts};
use super::Of::{Cgroup, Cores, Devices, Gpus, Host, HostOr, Interfaces};
use super::{
    bad, counter, gauge, label_u32, At, GpuLabels, Series, GUEST_MODES, INFO, KERNEL_MODES, MIB,
    MODES, MS, SAME,
};
use crate::error::Result;
use crate::monitor::cgroup::parse_cpu_list;
use crate::monitor::exposition::{Family, Sample};
use crate::monitor::snapshot::{CgroupSnapshot, CpuModeSeconds, LoadAverage, Smoothed, Snapshot};

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
        "tf_iaware_own_runnable_tasks",
        "Of the runnable tasks, the observed process's threads and the reader, count.",
        Host(Stats(at!(opt cpu.own_runnable_tasks))),
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
        "tf_iaware_cgroup_others_runnable_tasks",
        "Runnable threads of the quota'd cgroup that are not the observed process's, averaged.",
        Cgroup(Stats(at!(opt others_runnable_tasks))),
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
