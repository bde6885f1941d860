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
//!   - on the host: the run queue (`procs_running` of `/proc/stat`, less our own runnable
//!     threads counted on both sides of that read — the reading thread among them; where they
//!     were not counted, the reader and our measured use — and less the co-tenants inside our
//!     quota; one instant's count, so bounded by how many co-tenants the interval's measured
//!     use can account for — a transient task caught at the instant is not a competitor), the
//!     co-tenants' measured use, and — only where the run queue cannot be read
//!     with our own threads taken off — CPU pressure (PSI `some avg10`: the share of time some
//!     task waited for a CPU, "one more runnable task than cores" that share of the time; it
//!     counts our own threads' waits too, so a process reading it while it runs would see
//!     itself as a competitor), scaled to the `M` CPUs the process may run on (its cpuset and
//!     affinity) — `n` competing threads;
//!   - inside the process's own quota'd cgroup (quota `q`): co-tenants there compete for the
//!     quota, not for the machine — `k` threads: the cgroup's runnable threads that are not
//!     ours (its `tasks` / `cgroup.threads`, state `R`, counted as the host's run queue is),
//!     and at least what their use says (a thread uses at most one core, or `q` when the quota
//!     is smaller; a filled quota caps their use whatever their number, so the count is what
//!     sees past it) plus the cgroup's own PSI (v2 `cpu.pressure`).
//!
//!   A thread of ours runs at `r = min(1, M / (n + g + d))` of a core on the host, where `d`
//!   is the number of threads the process runs and `g` the cores the in-cgroup co-tenants
//!   use. TensorFlow sizes its thread pools by the cores it may run on (`M`, not the quota)
//!   and spreads an op's work over them, so `d = max(M, the process's measured use)`: what it
//!   *will* run, also when it is read idle (`devices`, `simulate`, the start of `run`).
//!   Without competitors a thread runs at `min(1, C / d)`. Inside a quota that binds (`d + k
//!   > q`), the group's runnable threads share it by count, and a TensorFlow process held to
//!   its quota keeps about `max(1, q)` threads runnable (`min(d, max(1, q))`; measured: a
//!   step ran `1 + k` times as long beside `k` CPU-bound co-tenants in a 0.3-core and in a
//!   1-core group on 2 cores): the group leaves it `u = t / (t + k)` of what it had, `t` those
//!   threads. `s = min(r / min(1, C / d), u)`, 0…1.
//!
//! `availability = (C / A) × s`. So `n` CPU-bound co-tenants on `M` cores leave `M / (n + M)`
//! (2 cores: 1, ⅔, ½, ⅓, ⅕ for 0, 1, 2, 4, 8 — a step `(n + M) / M` times as long); under a
//! quota of at most one core, `k` CPU-bound co-tenants inside the cgroup leave `1 / (1 + k)`
//! (½ for one beside a process held to 0.3 core), and host co-tenants cost nothing until the
//! machine's share per thread falls below the quota's, `M / (n + g + d) < C / d`. A process
//! whose steps stay below its quota loses more than that: its bursts ran unthrottled on every
//! core and now wait out the throttled periods too (a lenet step in a 1-core group ran 4.1,
//! 5.8, 6.3 and 12.6 times as long beside 1, 2, 4 and 8 co-tenants there); a reading does
//! not tell such a process from one held to its quota.
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
    /// Of `runnable_tasks`, those that are the process's own threads or the reading thread,
    /// counted at the same instants and averaged the same way (`None`: unknown, taken as the
    /// reader plus `own_cores`).
    pub own_runnable: Option<f64>,
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
    /// Runnable threads of the cgroup that are not ours, averaged (`None`: not counted).
    pub others_runnable: Option<f64>,
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
    /// Threads the process runs, `d` (≥ `M`, module docs).
    pub demand: f64,
}

/// Smallest contended share [`contention`] returns: a thread that waits behind a thousand
/// others still runs sometimes.
pub const MIN_CONTENDED_SHARE: f64 = 1e-3;

/// The contended share of a CPU device from the kernel's contention signals (module docs):
/// the per-thread rate of the process's threads among every runnable thread on its CPUs and in
/// its cgroup, relative to their rate alone. Keeps falling as co-tenants are added: with `n`
/// CPU-bound co-tenants on `M` cores and the `M` threads of ours TensorFlow runs there,
/// `M / (n + M)`. Non-finite inputs count as absent; no competitors (or no information) give 1.
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
    // TensorFlow runs its pools on every core it may use, whether or not it is busy now.
    let demand = own.max(machine);
    // Co-tenants inside our cgroup: their runnable threads where counted, else threads from
    // their use (one thread uses at most one core, or the quota, so a saturated quota hides
    // how many there are) plus "one more waiting" for the share of time the group's PSI says so.
    let (quota, group_others, group_k, group_queued) = match &i.group {
        Some(g) if g.quota_cores.is_finite() && g.quota_cores > 0.0 => {
            let others = finite(g.others_cores).min(g.quota_cores);
            let by_use =
                others / g.quota_cores.min(1.0) + g.pressure_some.map_or(0.0, finite).min(1.0);
            let counted = g.others_runnable.map_or(0.0, finite);
            (
                Some(g.quota_cores),
                others,
                by_use.max(counted),
                others.max(counted),
            )
        }
        _ => (None, 0.0, 0.0, 0.0),
    };
    // Co-tenants on the host, on our CPUs (spread evenly over the host's).
    let on_ours = machine / logical;
    let host_cotenants = i
        .cotenant_cores
        .filter(|c| c.is_finite())
        .map(|c| (c.max(0.0) - group_others).max(0.0));
    let busy = host_cotenants.map_or(0.0, |c| c * on_ours).min(machine);
    let bound = host_cotenants.map_or(f64::INFINITY, |c| {
        plausible_queue(logical, c, c + group_others + own, demand)
    });
    // Ours in the run queue: counted at the same instants, else the reader and our use; the
    // co-tenants of our cgroup are there too, and counted apart.
    let ours = i
        .own_runnable
        .filter(|o| o.is_finite())
        .map_or(1.0 + own, |o| o.max(0.0));
    let queued = i
        .runnable_tasks
        .filter(|r| r.is_finite())
        .map(|r| (r - ours - group_queued).max(0.0).min(bound) * on_ours)
        .unwrap_or(0.0);
    // PSI's "some" counts our own threads' waits as well as everyone else's (and lags 10 s):
    // read while we run (calibrating, training) it says we compete with ourselves. It stands in
    // only where the run queue cannot be read with our own threads taken off.
    let precise_queue =
        i.runnable_tasks.is_some_and(f64::is_finite) && i.own_runnable.is_some_and(f64::is_finite);
    let pressure = if precise_queue {
        0.0
    } else {
        i.pressure_some.map_or(0.0, finite).min(1.0)
    };
    let waiting = busy + pressure;
    let n = busy.max(queued).max(waiting);
    let host_rate = (machine / (n + group_others + demand)).min(1.0);
    let alone = (cap / demand).min(1.0);
    // Inside a quota that binds (its threads want more than `q` cores), the group's runnable
    // threads share it by count; a TensorFlow process held to its quota keeps about
    // `max(1, q)` of its threads runnable (measured: the step ran `1 + k` times as long beside
    // `k` CPU-bound co-tenants in a 0.3-core and in a 1-core group).
    let group_share = quota.map_or(1.0, |q| {
        let ours = demand.min(q.max(1.0));
        let binds = (demand + group_k - q).clamp(0.0, 1.0);
        1.0 - binds * group_k / (ours + group_k)
    });
    let share = (host_rate / alone)
        .min(group_share)
        .clamp(MIN_CONTENDED_SHARE, 1.0);
    Contention {
        share,
        host_competitors: n,
        group_competitors: group_k,
        demand,
    }
}

/// How many co-tenant threads on the host (outside our cgroup) their measured use can account
/// for, to bound the run queue's count by. The run queue is one instant's count, the use is
/// the whole interval's: where the host had a core to spare, every runnable co-tenant ran, so
/// no more of them were runnable than the cores they used (a count above that caught a
/// transient — a short-lived process, a kernel thread); where it had none, `k` co-tenants
/// beside our `d` threads got `L k / (k + d)` of the `L` cores, so their use `c` bounds them
/// at `d c / (L − c)` — doubled, for the scheduler's unevenness. In between, the bound moves
/// from one to the other with the spare core. `c`: their use, cores of the `logical`; `used`:
/// everyone's, ours included.
fn plausible_queue(logical: f64, c: f64, used: f64, demand: f64) -> f64 {
    let saturated = (1.0 - (logical - used)).clamp(0.0, 1.0);
    if saturated == 0.0 {
        return c;
    }
    let left = logical - c;
    let by_share = if left > 1e-3 {
        2.0 * demand * c / left
    } else {
        f64::INFINITY
    };
    c + saturated * (by_share - c).max(0.0)
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
            others_runnable: c.others_runnable_tasks.map(|r| r.ewma),
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
        own_runnable: s.cpu.own_runnable_tasks.map(|r| r.ewma),
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
mod tests;
