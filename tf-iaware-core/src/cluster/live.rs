//! How a monitor [`Snapshot`] maps onto a cluster's devices: their availability and
//! [`LiveStatus`]. Pure: no I/O (the feeds that read snapshots are in `tf_iaware::cluster::feed`).
//!
//! **The model.** A device's effective speed is its *capability* × its *availability*:
//!
//! * capability ([`Device::peak_flops`](super::Device::peak_flops), FLOP/s, with its memory
//!   bandwidth and per-op overhead) is what the device does with the resources it is granted —
//!   calibrated, and stored normalised by the availability seen while calibrating;
//! * availability ([`Device::availability`](super::Device::availability), 0–1) is the share of
//!   those resources it can get now, read live.
//!
//! For a CPU device the resources are its task's *allotment* `A` — the cores its process may
//! use by the machine's and its enclosing groups' grant (allowed CPUs, and the quotas of the
//! cgroups *around* its own; see
//! [`CgroupSnapshot::cpu_allotment_cores`](crate::monitor::CgroupSnapshot::cpu_allotment_cores)).
//! Two things take a share of it away:
//!
//! * a **hard cap** on the process itself: its own cgroup's quota `C ≤ A` (a node split between
//!   a workload and its co-tenants) — the process gets at most `h = C / A`, exactly;
//! * **contention** within that cap (`s`, [`contention`]). The kernel's fair scheduler shares
//!   CPUs between *runnable threads*, not between processes, so the model counts them, from
//!   the kernel's own signals:
//!   - on the host: the run queue (`procs_running` of `/proc/stat`, less the reading thread,
//!     our own threads and the co-tenants inside our quota), the co-tenants' measured use, and
//!     CPU pressure (PSI `some avg10`: the share of time some task waited for a CPU — "one
//!     more runnable task than cores" that share of the time), scaled to the `M` CPUs the
//!     process may run on (its cpuset and affinity) — `n` competing threads;
//!   - inside the process's own quota'd cgroup (quota `q`): co-tenants there compete for the
//!     quota, not for the machine — `k` threads, estimated from their use (a thread uses at
//!     most one core, or `q` when the quota is smaller) and the cgroup's own PSI (v2
//!     `cpu.pressure`).
//!
//!   A thread of ours runs at `r = min(1, M / (n + g + d), q / (d + k))` of a core, where `d`
//!   (≥ 1) is the number of threads the process runs (one more op to run when it is idle; its
//!   measured use when it is busy) and `g` the cores the in-cgroup co-tenants use. Without
//!   competitors a thread runs at `min(1, C / d)`; `s = r / min(1, C / d)`, 0…1.
//!
//! `availability = (C / A) × s`.
//!
//! Every signal may be missing (a kernel without PSI, an exporter page without the run queue,
//! an agent of an older version): the model then uses what is left — at worst the co-tenants'
//! measured use, which cannot see past a saturated machine. GPUs keep the share model
//! ([`contended_availability`]): time-slicing shares a busy GPU between contexts, `f` being
//! 1 − the utilisation by other processes. The cost model's own floor
//! ([`MIN_AVAILABILITY`](crate::cluster::model::MIN_AVAILABILITY)) only guards hand-written
//! figures.

use super::model::Cluster;
use super::status::{LiveSource, LiveStatus};
use crate::graph::DeviceType;
use crate::monitor::snapshot::{GpuSnapshot, Snapshot};

/// What the kernel says about CPU contention around one process, as plain numbers: the
/// inputs of [`contention`]. Cores are CPU-seconds per second; task counts may be fractional
/// (averages).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContentionInputs {
    /// Online logical CPUs of the host, `L`.
    pub logical: f64,
    /// CPUs the process may run on (cpuset ∩ affinity), `M ≤ L`.
    pub machine: f64,
    /// The process's own hard cap, cores (`C ≤ M`; `M` without a quota).
    pub cap: f64,
    /// CPU the process itself uses now, cores.
    pub own_cores: f64,
    /// CPU everything but the process uses on the host, cores (`None`: unknown).
    pub cotenant_cores: Option<f64>,
    /// Tasks runnable on the host (`procs_running`, averaged, the reading thread included).
    pub runnable_tasks: Option<f64>,
    /// Host CPU pressure, `some avg10`, 0–1.
    pub pressure_some: Option<f64>,
    /// The process's quota'd cgroup, when it has one that binds (quota below `M`).
    pub group: Option<QuotaGroup>,
}

/// A process's own quota'd cgroup, as [`contention`] sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuotaGroup {
    /// The quota, cores (`q`).
    pub quota_cores: f64,
    /// CPU other tasks of the cgroup use, cores (`g`).
    pub others_cores: f64,
    /// The cgroup's CPU pressure, `some avg10`, 0–1 (v2 `cpu.pressure`; `None` on v1).
    pub pressure_some: Option<f64>,
}

/// What [`contention`] found: the contended share and the counts it comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Contention {
    /// Share of what the cap leaves the process gets, `s`, 0…1 (module docs).
    pub share: f64,
    /// Threads competing with the process on its CPUs outside its cgroup, `n`.
    pub host_competitors: f64,
    /// Threads competing with it for its cgroup's quota, `k`.
    pub group_competitors: f64,
    /// Threads the process runs, `d` (≥ 1).
    pub demand: f64,
}

/// Smallest contended share [`contention`] returns: a thread that waits behind a thousand
/// others still runs sometimes.
pub const MIN_CONTENDED_SHARE: f64 = 1e-3;

/// The contended share of a CPU device from the kernel's contention signals (module docs):
/// the per-thread rate of the process's threads among every runnable thread on its CPUs and in
/// its cgroup, relative to their rate alone. Keeps falling as co-tenants are added: with `n`
/// CPU-bound co-tenants on `M` cores and one thread of ours, `min(1, M / (n + 1))`. Non-finite
/// inputs count as absent; no competitors (or no information) give 1.
pub fn contention(i: &ContentionInputs) -> Contention {
    let finite = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
    let logical = finite(i.logical).max(1.0);
    let machine = finite(i.machine).clamp(1.0, logical.max(1.0));
    let cap = if i.cap.is_finite() && i.cap > 0.0 {
        i.cap.min(machine)
    } else {
        machine
    };
    let own = finite(i.own_cores);
    let demand = own.clamp(1.0, machine);
    // Co-tenants inside our cgroup: threads from their use (one thread uses at most one core,
    // or the quota) plus "one more waiting" for the share of time the group's PSI says so.
    let (quota, group_others, group_k) = match &i.group {
        Some(g) if g.quota_cores.is_finite() && g.quota_cores > 0.0 => {
            let others = finite(g.others_cores).min(g.quota_cores);
            let k = others / g.quota_cores.min(1.0) + g.pressure_some.map_or(0.0, finite).min(1.0);
            (Some(g.quota_cores), others, k)
        }
        _ => (None, 0.0, 0.0),
    };
    // Co-tenants on the host, on our CPUs (spread evenly over the host's).
    let on_ours = machine / logical;
    let busy = i
        .cotenant_cores
        .map(|c| (finite(c) - group_others).max(0.0) * on_ours)
        .unwrap_or(0.0)
        .min(machine);
    let queued = i
        .runnable_tasks
        .filter(|r| r.is_finite())
        .map(|r| (r - 1.0 - own - group_others).max(0.0) * on_ours)
        .unwrap_or(0.0);
    let waiting = busy + i.pressure_some.map_or(0.0, finite).min(1.0);
    let n = busy.max(queued).max(waiting);
    let host_rate = (machine / (n + group_others + demand)).min(1.0);
    let group_rate = quota.map_or(1.0, |q| (q / (demand + group_k)).min(1.0));
    let alone = (cap / demand).min(1.0);
    let share = (host_rate.min(group_rate) / alone).clamp(MIN_CONTENDED_SHARE, 1.0);
    Contention {
        share,
        host_competitors: n,
        group_competitors: group_k,
        demand,
    }
}

/// The availability of a device that is its own machine under time-slicing (a GPU): `max(f,
/// 1 / (2 − f))` of the free share `free_fraction` (0–1) — at least the fair share the device
/// gives one more context beside those that take the rest. Non-finite input counts as 1.
pub fn contended_availability(free_fraction: f64) -> f64 {
    if !free_fraction.is_finite() {
        return 1.0;
    }
    let f = free_fraction.clamp(0.0, 1.0);
    f.max(1.0 / (2.0 - f))
}

/// The CPU figures a snapshot gives one task's CPU devices.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuFigures {
    /// Cores the process may use (allowed CPUs ∧ enclosing quotas), `A`.
    pub allotment: f64,
    /// The process's own hard cap, cores (`C ≤ A`).
    pub cap: f64,
    /// Cores the process may run on (`M`).
    pub machine: f64,
    /// The contended share (`s`) and the thread counts behind it ([`contention`]).
    pub contention: Contention,
    /// Free cores (last interval), 0…C.
    pub free_cores: f64,
    /// `C / A × s` (module docs).
    pub availability: f64,
    /// Free memory for the process, bytes.
    pub free_memory_bytes: Option<u64>,
    /// `cores:N|allot:A` (and `cpu:MODEL|` in front when `cpu_model` is known).
    pub hardware: String,
}

/// CPU figures of `s`, or `None` when it has no availability yet (a first exporter scrape, an
/// agent with a single sample). `cpu_model` is added to the hardware fingerprint when known.
pub fn cpu_figures(s: &Snapshot, cpu_model: Option<&str>) -> Option<CpuFigures> {
    let free = s.cpu.available_cores.as_ref()?.last;
    let logical = f64::from(s.cpu.logical_cores.max(1));
    let allowed = s
        .cpu
        .allowed_cpus
        .as_ref()
        .map_or(logical, |a| (a.len() as f64).clamp(1.0, logical));
    let allotment = s
        .cgroup
        .as_ref()
        .and_then(|c| c.cpu_allotment_cores)
        .map_or(allowed, |q| q.min(allowed))
        .max(s.cpu.limit_cores)
        .max(1e-3);
    let cap = if s.cpu.limit_cores > 0.0 {
        s.cpu.limit_cores.clamp(1e-3, allotment)
    } else {
        allotment
    };
    let free = if free.is_finite() {
        free.clamp(0.0, cap)
    } else {
        cap
    };
    let mut hardware = format!("cores:{}|allot:{allotment:.2}", s.cpu.logical_cores);
    if let Some(m) = cpu_model {
        hardware = format!("cpu:{m}|{hardware}");
    }
    let own = s.cpu.own_cores.map_or(0.0, |o| o.last);
    let cg = s.cgroup.as_ref();
    let group = cg.and_then(|c| {
        let q = c.cpu_quota_cores.filter(|q| *q < allowed)?;
        // The cgroup's own use less ours; unknown: what keeps the cap from being free.
        let others = c
            .cpu_usage_cores
            .map_or(cap - free, |u| (u.last - own).max(0.0));
        Some(QuotaGroup {
            quota_cores: q,
            others_cores: others,
            pressure_some: c.cpu_pressure_some_ratio.map(|p| p.last),
        })
    });
    let cotenant_cores = s.cpu.cotenant_cores.map(|c| c.last).or_else(|| {
        // Without the host's use (a page without it): what keeps the cap from being free,
        // unless a quota group explains it.
        group.is_none().then_some((cap - free) * logical / allowed)
    });
    let contention = contention(&ContentionInputs {
        logical,
        machine: allowed,
        cap,
        own_cores: own,
        cotenant_cores,
        runnable_tasks: s.cpu.runnable_tasks.map(|r| r.ewma),
        pressure_some: s.cpu.pressure_some_ratio.map(|p| p.last),
        group,
    });
    Some(CpuFigures {
        allotment,
        cap,
        machine: allowed,
        contention,
        free_cores: free,
        availability: cap / allotment * contention.share,
        free_memory_bytes: s.memory.available_to_us_bytes,
        hardware,
    })
}

/// The NVML GPU that TensorFlow calls `GPU:tf_index` in a process whose `CUDA_VISIBLE_DEVICES`
/// is `visible` (`None`: unset). TensorFlow numbers the GPUs it can see from 0 in the order
/// CUDA lists them; with `CUDA_DEVICE_ORDER=PCI_BUS_ID` (or identical GPUs) that is PCI bus
/// order, which is NVML's index order. `visible` lists NVML indices or UUIDs (`GPU-…`, a
/// prefix is enough), as CUDA accepts; an entry that matches no GPU ends the list, as in CUDA.
pub fn gpu_for_tf_index<'a>(
    tf_index: u32,
    gpus: &'a [GpuSnapshot],
    visible: Option<&str>,
) -> Option<&'a GpuSnapshot> {
    let mut by_bus: Vec<&GpuSnapshot> = gpus.iter().collect();
    by_bus.sort_by(|a, b| {
        a.pci_bus_id
            .as_deref()
            .unwrap_or("")
            .cmp(b.pci_bus_id.as_deref().unwrap_or(""))
            .then(a.index.cmp(&b.index))
    });
    let Some(visible) = visible.map(str::trim) else {
        return by_bus.get(tf_index as usize).copied();
    };
    let mut seen = Vec::new();
    for entry in visible.split(',').map(str::trim) {
        let hit = if let Ok(i) = entry.parse::<u32>() {
            gpus.iter().find(|g| g.index == i)
        } else if entry.starts_with("GPU-") || entry.starts_with("MIG-") {
            gpus.iter().find(|g| g.uuid.starts_with(entry))
        } else {
            None
        };
        match hit {
            Some(g) => seen.push(g),
            None => break,
        }
    }
    seen.get(tf_index as usize).copied()
}

/// Which devices of a cluster one reading describes: those of one task (`job`, `task`), or all
/// (`None`, an in-process cluster).
pub(crate) type TaskFilter<'a> = Option<(&'a str, u32)>;

fn in_task(name: &str, task: TaskFilter) -> bool {
    let Some((job, index)) = task else {
        return true;
    };
    match crate::graph::DeviceName::parse(name) {
        Ok(n) => n.job.as_deref() == Some(job) && n.task == Some(index),
        Err(_) => false,
    }
}

/// Sets availability, free memory, co-tenant load, age and source on the devices of `task`
/// from snapshot `s`: CPU devices from the CPU reading, `GPU:k` from the NVML GPU that
/// [`gpu_for_tf_index`] maps it to (with `cuda_visible`). Devices the snapshot says nothing
/// about keep their figures. Returns how many devices were updated.
///
/// `now_unix_ms` dates the reading's age (the snapshot's own `age_ms` is added when the
/// snapshot has no time stamp).
pub fn apply_snapshot(
    cluster: &mut Cluster,
    task: TaskFilter,
    s: &Snapshot,
    source: &LiveSource,
    cpu_model: Option<&str>,
    cuda_visible: Option<&str>,
    now_unix_ms: u64,
) -> usize {
    let cpu = cpu_figures(s, cpu_model);
    let taken = if s.taken_unix_ms > 0 {
        s.taken_unix_ms
    } else {
        now_unix_ms.saturating_sub(s.age_ms)
    };
    let age = now_unix_ms.saturating_sub(taken).max(s.age_ms);
    let mut applied = 0;
    for d in cluster
        .devices
        .iter_mut()
        .filter(|d| in_task(&d.name, task))
    {
        let parsed = d.parsed_name().ok();
        let status = LiveStatus {
            source: source.clone(),
            age_ms: Some(age),
            taken_unix_ms: Some(taken),
            ..LiveStatus::default()
        };
        if d.device_type == DeviceType::Cpu {
            let Some(c) = &cpu else { continue };
            d.availability = c.availability;
            d.live = LiveStatus {
                free_memory_bytes: c.free_memory_bytes,
                cotenant_load: Some(c.allotment - c.free_cores),
                allotment: Some(c.allotment),
                free_fraction: Some(c.free_cores / c.allotment),
                hard_share: Some(c.cap / c.allotment),
                contention_share: Some(c.contention.share),
                competing_tasks: Some(
                    c.contention.host_competitors + c.contention.group_competitors,
                ),
                hardware: Some(c.hardware.clone()),
                ..status
            };
            applied += 1;
        } else if d.device_type == DeviceType::Gpu {
            let Some(k) = parsed.as_ref().and_then(|p| p.id) else {
                continue;
            };
            let Some(g) = gpu_for_tf_index(k, &s.gpus, cuda_visible) else {
                continue;
            };
            let share = s
                .device(&format!("GPU:{}", g.index))
                .map(|a| a.compute_share.last)
                .or_else(|| {
                    g.utilisation_percent
                        .map(|u| crate::monitor::gpu::gpu_share(u.last, g.own_utilisation_percent))
                });
            let Some(share) = share.filter(|x| x.is_finite()) else {
                continue;
            };
            let share = share.clamp(0.0, 1.0);
            d.availability = contended_availability(share);
            d.live = LiveStatus {
                free_memory_bytes: g.memory_free_bytes,
                cotenant_load: Some(1.0 - share),
                allotment: Some(1.0),
                free_fraction: Some(share),
                hard_share: Some(1.0),
                contention_share: Some(contended_availability(share)),
                hardware: Some(format!("gpu:{}", g.name)),
                ..status
            };
            applied += 1;
        }
    }
    applied
}

/// Marks the devices of `task` as not current, with `warning` (naming the task): devices that
/// had a reading keep its figures and become [`LiveSource::Stale`], their age counted to
/// `now_unix_ms`; devices that never had one stay [`LiveSource::Nominal`]. Returns how many
/// devices were marked.
pub fn mark_stale(
    cluster: &mut Cluster,
    task: TaskFilter,
    warning: &str,
    now_unix_ms: u64,
) -> usize {
    let mut n = 0;
    for d in cluster
        .devices
        .iter_mut()
        .filter(|d| in_task(&d.name, task))
    {
        if let Some(t) = d.live.taken_unix_ms {
            d.live.source = LiveSource::Stale;
            d.live.age_ms = Some(now_unix_ms.saturating_sub(t));
        }
        d.live.warning = Some(warning.to_string());
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Device;
    use crate::monitor::snapshot::{CgroupSnapshot, DeviceAvailability, DeviceKind, Smoothed};

    fn cluster() -> Cluster {
        let d = |job: &str, task: u32, ty: &str, id: u32| {
            Device::nominal(
                &format!("/job:{job}/replica:0/task:{task}/device:{ty}:{id}"),
                ty,
                None,
                &format!("127.0.0.1:{}", 2222 + task),
            )
        };
        Cluster::new(vec![
            d("worker", 0, "CPU", 0),
            d("worker", 1, "CPU", 0),
            d("worker", 1, "GPU", 0),
            d("worker", 1, "GPU", 1),
            d("ps", 0, "CPU", 0),
        ])
    }

    /// A worker on 4 logical cores in a node cgroup of 2 cores, its own group capped at 1
    /// core, with `free` cores free.
    pub(crate) fn reading(free: f64) -> Snapshot {
        let mut s = Snapshot::empty("w");
        s.taken_unix_ms = 10_000;
        s.cpu.logical_cores = 4;
        s.cpu.limit_cores = 1.0;
        s.cpu.available_cores = Some(Smoothed::constant(free));
        s.cgroup = Some(CgroupSnapshot {
            cpu_quota_cores: Some(1.0),
            cpu_allotment_cores: Some(2.0),
            ..CgroupSnapshot::default()
        });
        s.memory.available_to_us_bytes = Some(1 << 30);
        s
    }

    fn gpu(index: u32, bus: &str, uuid: &str, util: f64, free: u64) -> GpuSnapshot {
        GpuSnapshot {
            index,
            uuid: uuid.into(),
            name: "NVIDIA H100".into(),
            minor_number: Some(index),
            pci_bus_id: Some(bus.into()),
            utilisation_percent: Some(Smoothed::constant(util)),
            memory_utilisation_percent: None,
            own_utilisation_percent: None,
            memory_total_bytes: Some(80 << 30),
            memory_used_bytes: Some((80 << 30) - free),
            memory_free_bytes: Some(free),
            sm_clock_mhz: Some(1980.0),
            sm_clock_max_mhz: Some(1980.0),
            power_watts: None,
            power_limit_watts: None,
            temperature_celsius: None,
            pcie_tx_bytes_per_sec: None,
            pcie_rx_bytes_per_sec: None,
            compute_processes: Some(1),
            unsupported: Vec::new(),
        }
    }

    #[test]
    fn gpu_time_slicing_never_collapses_availability() {
        assert_eq!(contended_availability(1.0), 1.0);
        assert_eq!(contended_availability(0.0), 0.5);
        assert!((contended_availability(0.5) - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(contended_availability(f64::NAN), 1.0);
        assert_eq!(contended_availability(-3.0), 0.5);
        // Monotone in the free share.
        let mut last = 0.0;
        for i in 0..=100 {
            let a = contended_availability(i as f64 / 100.0);
            assert!(a >= last);
            last = a;
        }
    }

    fn host(machine: f64, runnable: f64) -> ContentionInputs {
        ContentionInputs {
            logical: machine,
            machine,
            cap: machine,
            own_cores: 0.0,
            cotenant_cores: Some(runnable.min(machine)),
            // The co-tenants and the reading thread.
            runnable_tasks: Some(runnable + 1.0),
            pressure_some: None,
            group: None,
        }
    }

    #[test]
    fn availability_keeps_falling_with_cpu_bound_cotenants() {
        // One more thread of ours among n CPU-bound co-tenants on 2 cores: min(1, 2 / (n + 1)).
        let shares: Vec<f64> = [0.0, 1.0, 2.0, 4.0, 8.0]
            .iter()
            .map(|n| contention(&host(2.0, *n)).share)
            .collect();
        let expected = [1.0, 1.0, 2.0 / 3.0, 0.4, 2.0 / 9.0];
        for (s, e) in shares.iter().zip(expected) {
            assert!((s - e).abs() < 1e-12, "{shares:?}");
        }
        assert_eq!(contention(&host(2.0, 8.0)).host_competitors, 8.0);
        // A busy process counts its own threads: 2 of ours + 2 co-tenants on 2 cores.
        let busy = ContentionInputs {
            own_cores: 2.0,
            runnable_tasks: Some(5.0),
            ..host(2.0, 2.0)
        };
        assert!((contention(&busy).share - 0.5).abs() < 1e-12);
        // Without the run queue, PSI says some task waited: one more competitor that share of
        // the time; without either, the measured use (which cannot see past saturation).
        let psi = ContentionInputs {
            runnable_tasks: None,
            pressure_some: Some(1.0),
            ..host(2.0, 8.0)
        };
        assert!((contention(&psi).share - 0.5).abs() < 1e-12);
        let bare = ContentionInputs {
            pressure_some: None,
            ..psi
        };
        assert!((contention(&bare).share - 2.0 / 3.0).abs() < 1e-12);
        // A cpuset of 1 of 4 CPUs sees a quarter of the host's queue.
        let pinned = ContentionInputs {
            logical: 4.0,
            machine: 1.0,
            cap: 1.0,
            ..host(4.0, 8.0)
        };
        assert!((contention(&pinned).share - 1.0 / 3.0).abs() < 1e-12);
        // No information, garbage, or an idle machine: 1; never below the floor.
        assert_eq!(contention(&ContentionInputs::default()).share, 1.0);
        let nan = ContentionInputs {
            runnable_tasks: Some(f64::NAN),
            cotenant_cores: Some(f64::INFINITY),
            cap: f64::NAN,
            ..host(2.0, 0.0)
        };
        assert_eq!(contention(&nan).share, 1.0);
        assert_eq!(
            contention(&host(2.0, 1e9)).share,
            MIN_CONTENDED_SHARE,
            "floored"
        );
    }

    #[test]
    fn a_cotenant_inside_the_quota_competes_for_the_quota_not_the_machine() {
        // A worker in a 0.3-core cgroup on 2 cores; a CPU-bound process beside it in the same
        // cgroup uses 0.28 of the 0.30 cores (issue 26: the old model said 0.88).
        let group = |others: f64| ContentionInputs {
            logical: 2.0,
            machine: 2.0,
            cap: 0.3,
            own_cores: 0.0,
            cotenant_cores: Some(others),
            // The reader, and the co-tenant while it is not throttled (a throttled group's
            // tasks leave the run queue).
            runnable_tasks: Some(1.0 + others),
            pressure_some: None,
            group: Some(QuotaGroup {
                quota_cores: 0.3,
                others_cores: others,
                pressure_some: None,
            }),
        };
        let c = contention(&group(0.28));
        assert!(
            (c.share - 0.3 / (1.0 + 0.28 / 0.3) / 0.3).abs() < 1e-12,
            "{c:?}"
        );
        assert!(c.share > 0.45 && c.share < 0.55, "about half: {c:?}");
        assert_eq!(c.host_competitors, 0.0, "not counted twice");
        assert_eq!(contention(&group(0.0)).share, 1.0);
        // The cgroup's PSI adds a waiting thread for the share of time it reports.
        let mut p = group(0.28);
        if let Some(g) = p.group.as_mut() {
            g.pressure_some = Some(0.5);
        }
        assert!(contention(&p).share < c.share);
    }

    #[test]
    fn a_reading_sets_only_its_tasks_cpu_devices() {
        let mut c = cluster();
        let src = LiveSource::Agent("127.0.0.1:9101".into());
        let n = apply_snapshot(
            &mut c,
            Some(("worker", 1)),
            &reading(1.0),
            &src,
            None,
            None,
            10_500,
        );
        assert_eq!(n, 1, "GPUs without readings are left alone");
        let w1 = &c.devices[1];
        // Hard cap: half the node; nothing contends within it.
        assert!((w1.availability - 0.5).abs() < 1e-12, "{}", w1.availability);
        assert_eq!(w1.live.hard_share, Some(0.5));
        assert_eq!(w1.live.contention_free(), Some(1.0));
        assert_eq!(w1.live.source, src);
        assert_eq!(w1.live.age_ms, Some(500));
        assert_eq!(w1.live.allotment, Some(2.0));
        assert_eq!(w1.live.cotenant_load, Some(1.0));
        assert_eq!(w1.live.free_memory_bytes, Some(1 << 30));
        assert_eq!(w1.live.hardware.as_deref(), Some("cores:4|allot:2.00"));
        // Other tasks are untouched.
        assert_eq!(c.devices[0].availability, 1.0);
        assert_eq!(c.devices[0].live.source, LiveSource::Nominal);
        assert_eq!(c.devices[4].live, LiveStatus::default());
        // A snapshot without availability yet changes nothing.
        let mut first = reading(1.0);
        first.cpu.available_cores = None;
        assert_eq!(
            apply_snapshot(&mut c, Some(("worker", 0)), &first, &src, None, None, 0),
            0
        );
        // JSON names the source as a string.
        let j = serde_json::to_value(&c.devices[1]).unwrap();
        assert_eq!(j["live"]["source"], "agent:127.0.0.1:9101");
        let back: Device = serde_json::from_value(j).unwrap();
        assert_eq!(back, c.devices[1]);
    }

    #[test]
    fn stale_readings_keep_last_known_figures_and_are_flagged() {
        let mut c = cluster();
        let src = LiveSource::Agent("a:1".into());
        apply_snapshot(
            &mut c,
            Some(("worker", 1)),
            &reading(0.5),
            &src,
            None,
            None,
            10_000,
        );
        let before = c.devices[1].availability;
        assert!(before < 1.0);
        let n = mark_stale(&mut c, Some(("worker", 1)), "worker:1 unreachable", 25_000);
        assert_eq!(n, 3, "the task's CPU and both GPUs");
        let w1 = &c.devices[1];
        assert_eq!(w1.availability, before, "last known figure kept");
        assert_eq!(w1.live.source, LiveSource::Stale);
        assert_eq!(w1.live.age_ms, Some(15_000));
        assert_eq!(w1.live.warning.as_deref(), Some("worker:1 unreachable"));
        // A task never read stays nominal, flagged.
        mark_stale(&mut c, Some(("worker", 0)), "worker:0 has no agent", 25_000);
        assert_eq!(c.devices[0].live.source, LiveSource::Nominal);
        assert_eq!(c.devices[0].availability, 1.0);
        assert!(c.devices[0].live.warning.is_some());
    }

    #[test]
    fn nvml_readings_map_onto_tensorflow_gpu_numbers() {
        // Recorded from a two-GPU box whose NVML indices are not in PCI order.
        let gpus = vec![
            gpu(0, "00000000:81:00.0", "GPU-bbbb", 10.0, 70 << 30),
            gpu(1, "00000000:01:00.0", "GPU-aaaa", 90.0, 4 << 30),
        ];
        assert_eq!(gpu_for_tf_index(0, &gpus, None).unwrap().uuid, "GPU-aaaa");
        assert_eq!(gpu_for_tf_index(1, &gpus, None).unwrap().uuid, "GPU-bbbb");
        assert!(gpu_for_tf_index(2, &gpus, None).is_none());
        assert_eq!(gpu_for_tf_index(0, &gpus, Some("0")).unwrap().index, 0);
        assert_eq!(gpu_for_tf_index(0, &gpus, Some("GPU-aa")).unwrap().index, 1);
        assert_eq!(gpu_for_tf_index(1, &gpus, Some("1, 0")).unwrap().index, 0);
        assert!(
            gpu_for_tf_index(1, &gpus, Some("1,7,0")).is_none(),
            "CUDA stops at 7"
        );

        let mut c = cluster();
        let mut s = reading(2.0);
        s.gpus = gpus.clone();
        s.devices = vec![DeviceAvailability {
            device: "GPU:1".into(),
            kind: DeviceKind::Gpu,
            capacity: 1.0,
            compute_share: Smoothed::constant(0.1),
            free_memory_bytes: Some(4 << 30),
            age_ms: 0,
        }];
        let src = LiveSource::LocalSampler;
        assert_eq!(
            apply_snapshot(
                &mut c,
                Some(("worker", 1)),
                &s,
                &src,
                Some("Xeon"),
                None,
                10_000
            ),
            3
        );
        // TF GPU:0 is NVML 1 (busy: 90 % by others), GPU:1 is NVML 0 (10 %).
        let g0 = &c.devices[2];
        assert!((g0.availability - contended_availability(0.1)).abs() < 1e-12);
        assert_eq!(g0.live.free_memory_bytes, Some(4 << 30));
        assert_eq!(g0.live.hardware.as_deref(), Some("gpu:NVIDIA H100"));
        let g1 = &c.devices[3];
        assert!(
            (g1.availability - contended_availability(0.9)).abs() < 1e-12,
            "{}",
            g1.availability
        );
        assert_eq!(g1.live.free_memory_bytes, Some(70 << 30));
        assert_eq!(
            c.devices[1].live.hardware.as_deref(),
            Some("cpu:Xeon|cores:4|allot:2.00")
        );
        assert_eq!(c.devices[1].availability, 0.5, "capped at half the node");
    }

    #[test]
    fn contention_without_a_hard_cap_reads_the_run_queue() {
        let mut s = reading(0.0);
        s.cgroup = None;
        s.cpu.limit_cores = 4.0;
        s.cpu.cotenant_cores = Some(Smoothed::constant(4.0));
        s.cpu.runnable_tasks = Some(Smoothed::constant(9.0));
        let f = cpu_figures(&s, None).unwrap();
        assert_eq!((f.allotment, f.cap), (4.0, 4.0));
        assert_eq!(f.contention.host_competitors, 8.0);
        assert!((f.availability - 4.0 / 9.0).abs() < 1e-12, "{f:?}");
        // An older agent's page without the run queue: the measured use only.
        s.cpu.runnable_tasks = None;
        assert!((cpu_figures(&s, None).unwrap().availability - 0.8).abs() < 1e-12);
    }

    /// The snapshot the monitor derives from one recorded case of
    /// `tests/fixtures/monitor/contention` (made by its `record.sh`).
    fn recorded(case: &str) -> Snapshot {
        use crate::monitor::cgroup::locate;
        use crate::monitor::derive::{Deriver, Reading};
        use crate::monitor::proc::{ProcFile, ProcReading};
        use std::path::{Path, PathBuf};
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/monitor/contention")
            .join(case);
        let mountinfo = std::fs::read_to_string(root.join("../mountinfo")).unwrap();
        let mut deriver = Deriver::new("fixture", "h", Some(1), 10.0, 60.0);
        let mut snap = None;
        let mut t0 = None;
        for i in 0.. {
            let dir = root.join(i.to_string());
            if !dir.exists() {
                break;
            }
            let text = |f: &str| std::fs::read_to_string(dir.join(f));
            let t_ns: u64 = text("t_ns").unwrap().trim().parse().unwrap();
            let t0 = *t0.get_or_insert(t_ns);
            let proc = ProcReading::parse(|file| {
                let name = match file {
                    ProcFile::Stat => "proc_stat",
                    ProcFile::Pressure => "pressure_cpu",
                    ProcFile::ProcessStat => "process_stat",
                    ProcFile::ProcessStatus => "process_status",
                    _ => "not-recorded",
                };
                let path = dir.join(name);
                let t = std::fs::read_to_string(&path).map_err(|e| crate::Error::io(&path, e))?;
                Ok((t, path))
            })
            .unwrap();
            let cgroup_text = text("cgroup").unwrap();
            let layout = locate(
                &cgroup_text,
                Path::new("cgroup"),
                &mountinfo,
                Path::new("mountinfo"),
                Path::new("/"),
            )
            .unwrap();
            let cgroup = layout.read(
                |p: &Path| {
                    // The observed cgroup's files were recorded; the root's are absent.
                    let name = p.file_name().unwrap_or_default();
                    let recorded: PathBuf = dir.join(name);
                    let in_group = p
                        .parent()
                        .is_some_and(|d| d.ends_with("tf-iaware-contention-fixture"));
                    Ok(if in_group {
                        std::fs::read_to_string(recorded).ok()
                    } else {
                        None
                    })
                },
                |_| Err("not recorded".into()),
            );
            snap = Some(deriver.push(Reading {
                t_s: (t_ns - t0) as f64 / 1e9,
                unix_ms: t_ns / 1_000_000,
                ticks_per_second: 100,
                proc,
                cgroup: Ok(cgroup),
                gpus: Err("no GPU recorded".into()),
            }));
        }
        snap.unwrap()
    }

    #[test]
    fn recorded_cotenants_lower_availability_as_the_kernel_counts_them() {
        // Recorded on a 2-core host that other builds kept busy too (3–5 runnable tasks
        // besides the co-tenants): the model prices what the kernel counted, whoever it was.
        let mut by_case = Vec::new();
        for n in [0, 1, 2, 4, 8] {
            let s = recorded(&format!("host-{n}"));
            assert!(s.cpu.pressure_some_ratio.is_some(), "PSI recorded");
            let runnable = s.cpu.runnable_tasks.unwrap();
            let f = cpu_figures(&s, None).unwrap();
            assert!(f.availability > 0.0 && f.availability <= 1.0, "{f:?}");
            // One thread of ours among those the run queue held on these 2 cores.
            let fair = (2.0 / (runnable.ewma - 1.0 + 1.0)).min(1.0);
            assert!(f.availability <= fair + 1e-9, "{n}: {f:?} vs {fair}");
            eprintln!(
                "host-{n}: runnable {:.2} psi {:.2} competitors {:.2} availability {:.3}",
                runnable.ewma,
                s.cpu.pressure_some_ratio.map_or(f64::NAN, |p| p.last),
                f.contention.host_competitors,
                f.availability
            );
            by_case.push((n, runnable.ewma, f.availability));
        }
        // More runnable tasks, lower availability.
        let mut sorted = by_case.clone();
        sorted.sort_by(|a, b| a.1.total_cmp(&b.1));
        for w in sorted.windows(2) {
            assert!(w[1].2 <= w[0].2 + 1e-9, "{by_case:?}");
        }
        // Eight co-tenants leave far less than the old ½ floor; none leave the most.
        let eight = by_case[4].2;
        assert!(eight < 0.25, "{by_case:?}");
        assert!(eight < by_case[0].2, "{by_case:?}");
    }

    #[test]
    fn recorded_cotenant_inside_a_quota_halves_it() {
        let alone = cpu_figures(&recorded("quota-0"), None).unwrap();
        let shared_snap = recorded("quota-1");
        let shared = cpu_figures(&shared_snap, None).unwrap();
        let cg = shared_snap.cgroup.as_ref().unwrap();
        assert_eq!(cg.cpu_quota_cores, Some(0.3));
        assert!((alone.cap - 0.3).abs() < 1e-12 && (alone.allotment - 0.3).abs() < 1e-12);
        assert!(alone.availability > 0.9, "{alone:?}");
        // The co-tenant used (almost) the whole quota: one competing thread, about half.
        assert!(shared.contention.group_competitors > 0.8, "{shared:?}");
        assert!(
            shared.availability > 0.4 && shared.availability < 0.6,
            "{shared:?}"
        );
    }
}
