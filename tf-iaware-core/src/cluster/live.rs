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
//! * **contention** within that cap: co-tenants running on the same cores or under the same
//!   quota. The monitor reports the cores still free (`free`, 0…C; our own use counts as free),
//!   so co-tenants take `C − free` of what we could use. They do not stop us: the kernel's fair
//!   scheduler shares the `M` cores the process may run on (its allowed CPUs) between everything
//!   that wants them, in proportion to demand. A CPU-bound process that wants its whole cap `C`
//!   against co-tenants wanting `T = M − free` (when they leave it less than `C`) still gets
//!   `M·C / (C + T)` cores. The contended share is therefore
//!   `s = max(free / C, M / (C + M − free))`, at most 1 — 1 when nothing competes, ½ when
//!   co-tenants take every core of a process without a quota (`contended_share`).
//!
//! `availability = (C / A) × s`.
//!
//! A reading of 0 free cores therefore never makes a device look 1000× slower (the old 0.001
//! floor made predictions 40× too slow on a busy machine): only a hard quota, which the
//! process really cannot exceed, takes availability below ½. The cost model's own floor
//! ([`MIN_AVAILABILITY`](crate::cluster::model::MIN_AVAILABILITY)) only guards hand-written figures. For a
//! GPU, `f` is 1 − the utilisation by other processes, and the same formula applies
//! (time-slicing shares a busy GPU between contexts).

use super::model::Cluster;
use super::status::{LiveSource, LiveStatus};
use crate::graph::DeviceType;
use crate::monitor::snapshot::{GpuSnapshot, Snapshot};

/// Share of its cap `cap` a process gets when `free` of it is left by co-tenants, on `machine`
/// cores it may run on (module docs): `max(free / cap, machine / (cap + machine − free))`, in
/// ½…1 — at least the fair share the scheduler gives a process competing with co-tenants that
/// take the rest. Non-finite or non-positive input counts as 1 (no information).
pub(crate) fn contended_share(cap: f64, machine: f64, free: f64) -> f64 {
    if !(cap.is_finite() && machine.is_finite() && free.is_finite()) || cap <= 0.0 {
        return 1.0;
    }
    let machine = machine.max(cap);
    let free = free.clamp(0.0, cap);
    (free / cap)
        .max(machine / (cap + machine - free))
        .clamp(0.5, 1.0)
}

/// `contended_share` of a device that is its own machine (a GPU, or a process without a
/// quota): `max(f, 1 / (2 − f))` of the free share `free_fraction` (0–1).
pub fn contended_availability(free_fraction: f64) -> f64 {
    contended_share(1.0, 1.0, free_fraction)
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
    /// `contended_share` (`s`).
    pub contention: f64,
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
    let contention = contended_share(cap, allowed, free);
    Some(CpuFigures {
        allotment,
        cap,
        machine: allowed,
        contention,
        free_cores: free,
        availability: cap / allotment * contention,
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
                contention_share: Some(c.contention),
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
    fn contention_never_collapses_availability() {
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
    fn contention_without_a_hard_cap_keeps_the_fair_share() {
        let mut s = reading(0.0);
        s.cgroup = None;
        s.cpu.limit_cores = 4.0;
        let f = cpu_figures(&s, None).unwrap();
        assert_eq!((f.allotment, f.cap), (4.0, 4.0));
        assert_eq!(f.availability, 0.5, "everything taken: the fair share");
        s.cpu.available_cores = Some(Smoothed::constant(2.0));
        assert!((cpu_figures(&s, None).unwrap().availability - 2.0 / 3.0).abs() < 1e-12);
        // A small quota on a big machine hardly notices co-tenants that leave it 0.1 of 0.3.
        assert!((contended_share(0.3, 2.0, 0.1) - 2.0 / 2.2).abs() < 1e-12);
        assert_eq!(contended_share(0.3, 2.0, 0.3), 1.0);
        assert_eq!(contended_share(0.0, 2.0, 0.0), 1.0);
    }
}
