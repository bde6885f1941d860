//! From raw readings to a [`Snapshot`]: deltas between two readings (utilisation, rates),
//! what is available to the observed process, per-device shares, smoothing. Pure: no I/O.

use crate::monitor::cgroup::CgroupReading;
use crate::monitor::gpu::{gpu_share, map_reading, NvmlDeviceReading};
use crate::monitor::proc::{counter_rate, utilisation, ProcReading};
use crate::monitor::smoothing::SmootherBank;
use crate::monitor::snapshot::{
    CgroupSnapshot, CoreSnapshot, CpuSnapshot, DeviceAvailability, DeviceKind, GpuSnapshot,
    MemorySnapshot, NetworkInterface, Smoothed, Snapshot,
};

/// Everything read at one instant.
#[derive(Clone, Debug)]
pub struct Reading {
    /// Monotonic time of the reading, seconds (any origin, the same for all readings).
    pub t_s: f64,
    /// Unix time of the reading, ms.
    pub unix_ms: u64,
    /// USER_HZ of the kernel.
    pub ticks_per_second: u64,
    /// `/proc`.
    pub proc: ProcReading,
    /// The observed process's cgroup, or why it could not be read.
    pub cgroup: std::result::Result<CgroupReading, String>,
    /// GPUs, or `GPU metrics unavailable: <reason>`.
    pub gpus: std::result::Result<Vec<NvmlDeviceReading>, String>,
}

/// What the process may use of the CPUs, cores: `(limit, available)`.
///
/// * `core_utilisation`: (CPU number, busy share 0–1) of every online CPU over the interval;
/// * `allowed`: CPUs the process may run on (`None`: all);
/// * `own_cores`: the process's own use over the interval;
/// * `quota_levels`: (quota, use by the whole cgroup at that level) for each cgroup level that
///   has a quota, both in cores; an unknown use counts as the process's own use only.
///
/// `limit` = min(allowed CPUs, quotas); `available` = min(allowed CPUs − co-tenant use on them,
/// each quota − others' use under it), clamped to 0…limit. The process's own use counts as
/// available to it.
pub(crate) fn available_cores(
    core_utilisation: &[(u32, f64)],
    allowed: Option<&[u32]>,
    own_cores: f64,
    quota_levels: &[(f64, Option<f64>)],
) -> (f64, f64) {
    let on_allowed = |cpu: u32| allowed.is_none_or(|a| a.contains(&cpu));
    let allowed_online: Vec<f64> = core_utilisation
        .iter()
        .filter(|(cpu, _)| on_allowed(*cpu))
        .map(|(_, u)| *u)
        .collect();
    let n_allowed = if allowed_online.is_empty() {
        core_utilisation.len() as f64
    } else {
        allowed_online.len() as f64
    };
    let busy_allowed: f64 = allowed_online.iter().sum();
    let own = own_cores.max(0.0);
    let hw_free = n_allowed - (busy_allowed - own).max(0.0);
    let mut limit = n_allowed;
    let mut free = hw_free;
    for &(quota, usage) in quota_levels {
        limit = limit.min(quota);
        let others = (usage.unwrap_or(own) - own).max(0.0);
        free = free.min(quota - others);
    }
    (limit, free.clamp(0.0, limit.max(0.0)))
}

/// Turns successive [`Reading`]s into [`Snapshot`]s, keeping the previous reading and the
/// smoothing state.
#[derive(Debug)]
pub struct Deriver {
    source: String,
    host: String,
    pid: Option<u32>,
    bank: SmootherBank,
    prev: Option<Reading>,
    samples: u64,
}

impl Deriver {
    /// A deriver for readings of `host` taken by `source`, observing process `pid`, smoothing
    /// with EWMA time constant `tau_s` and window `window_s` (seconds).
    pub fn new(source: &str, host: &str, pid: Option<u32>, tau_s: f64, window_s: f64) -> Self {
        Deriver {
            source: source.to_string(),
            host: host.to_string(),
            pid,
            bank: SmootherBank::new(tau_s, window_s),
            prev: None,
            samples: 0,
        }
    }

    /// Adds a reading and returns the snapshot it completes.
    pub fn push(&mut self, cur: Reading) -> Snapshot {
        self.samples += 1;
        self.bank.begin_round();
        let snap = self.derive(&cur);
        self.bank.end_round();
        self.prev = Some(cur);
        snap
    }

    fn derive(&mut self, cur: &Reading) -> Snapshot {
        let round = Round::new(cur, self.prev.as_ref());
        let mut notes = Vec::new();
        let bank = &mut self.bank;
        let (cpu, cgroup, cgroup_unavailable) = cpu_snapshot(bank, &round, &mut notes);
        let memory = memory_snapshot(cur, cgroup.as_ref(), &mut notes);
        let network = network_interfaces(&round, &mut notes);
        let (gpus, gpus_unavailable) = gpu_snapshots(bank, &round, self.pid);
        let devices = device_shares(bank, round.t, &cpu, &memory, &gpus);
        Snapshot {
            source: self.source.clone(),
            host: self.host.clone(),
            pid: self.pid,
            taken_unix_ms: cur.unix_ms,
            age_ms: 0,
            interval_ms: round.dt.map(|d| (d * 1000.0).round() as u64),
            samples: self.samples,
            ewma_tau_s: bank.tau_s(),
            window_s: bank.window_s(),
            stale: false,
            stale_reason: None,
            cpu,
            memory,
            cgroup,
            cgroup_unavailable,
            network,
            gpus,
            gpus_unavailable,
            devices,
            notes,
        }
    }
}

/// One reading and the one before it: what every part of a snapshot is derived from.
struct Round<'a> {
    cur: &'a Reading,
    prev: Option<&'a Reading>,
    /// Time of `cur`, seconds.
    t: f64,
    /// Seconds since `prev`, when positive.
    dt: Option<f64>,
    /// USER_HZ of `cur`, at least 1.
    tps: u64,
}

impl<'a> Round<'a> {
    fn new(cur: &'a Reading, prev: Option<&'a Reading>) -> Self {
        Round {
            cur,
            prev,
            t: cur.t_s,
            dt: prev.map(|p| cur.t_s - p.t_s).filter(|dt| *dt > 0.0),
            tps: cur.ticks_per_second.max(1),
        }
    }
}

/// The value of a reading that may have failed; a failure's reason goes into `notes`.
fn noted<T: Clone>(read: &std::result::Result<T, String>, notes: &mut Vec<String>) -> Option<T> {
    match read {
        Ok(v) => Some(v.clone()),
        Err(e) => {
            notes.push(e.clone());
            None
        }
    }
}

/// Every online CPU's snapshot, and (CPU, busy share 0–1) of those whose utilisation is known.
fn core_snapshots(
    bank: &mut SmootherBank,
    round: &Round<'_>,
) -> (Vec<CoreSnapshot>, Vec<(u32, f64)>) {
    let (cur, tps) = (round.cur, round.tps);
    let mut cores = Vec::with_capacity(cur.proc.cpus.cores.len());
    let mut core_util = Vec::with_capacity(cur.proc.cpus.cores.len());
    for (cpu, ticks) in &cur.proc.cpus.cores {
        let seconds = ticks.to_seconds(tps);
        let u = round
            .prev
            .and_then(|p| p.proc.cpus.cores.iter().find(|(c, _)| c == cpu))
            .and_then(|(_, pt)| utilisation(&pt.to_seconds(tps), &seconds));
        if let Some(u) = u {
            core_util.push((*cpu, u));
        }
        cores.push(CoreSnapshot {
            cpu: *cpu,
            utilisation: bank.update(&format!("cpu{cpu}"), round.t, u),
            seconds,
        });
    }
    (cores, core_util)
}

/// (quota, use by the whole cgroup at that level) of every cgroup level with a quota, cores.
type QuotaLevels = Vec<(f64, Option<f64>)>;

/// The cgroup's snapshot (or why it is unavailable) and its [`QuotaLevels`].
fn cgroup_snapshot(
    bank: &mut SmootherBank,
    round: &Round<'_>,
    notes: &mut Vec<String>,
) -> (Option<CgroupSnapshot>, Option<String>, QuotaLevels) {
    let cg = match &round.cur.cgroup {
        Ok(cg) => cg,
        Err(e) => return (None, Some(e.clone()), Vec::new()),
    };
    notes.extend(cg.notes.iter().cloned());
    let prev_cg = round
        .prev
        .and_then(|p| p.cgroup.as_ref().ok())
        .filter(|p| p.path == cg.path && p.levels.len() == cg.levels.len());
    let level_rate = |i: usize| -> Option<f64> {
        let c = cg.levels.get(i)?.usage_seconds?;
        let p = prev_cg?.levels.get(i)?.usage_seconds?;
        counter_rate(p, c, round.dt?)
    };
    let quota_levels: QuotaLevels = cg
        .levels
        .iter()
        .enumerate()
        .filter_map(|(i, l)| Some((l.quota_cores?, level_rate(i))))
        .collect();
    let usage = level_rate(0);
    let t = round.t;
    let snap = CgroupSnapshot {
        version: cg.version,
        path: cg.path.clone(),
        cpu_quota_cores: cg.quota_cores(),
        cpu_allotment_cores: cg
            .levels
            .iter()
            .skip(1)
            .filter_map(|l| l.quota_cores)
            .reduce(f64::min),
        cpu_usage_seconds_total: cg.usage_seconds(),
        cpu_usage_cores: bank.update("cgroup_cpu", t, usage),
        periods_total: cg.periods,
        throttled_periods_total: cg.throttled_periods,
        throttled_seconds_total: cg.throttled_seconds,
        cpu_pressure_some_ratio: bank.update(
            "cgroup_cpu_pressure",
            t,
            cg.cpu_pressure.map(|p| p.some_avg10),
        ),
        others_runnable_tasks: bank.update(
            "cgroup_others_runnable",
            t,
            cg.others_runnable.map(f64::from),
        ),
        memory_limit_bytes: cg.memory_limit_bytes,
        memory_usage_bytes: cg.memory_usage_bytes,
        memory_working_set_bytes: cg.memory_working_set_bytes(),
    };
    (Some(snap), None, quota_levels)
}

/// The CPUs' snapshot, with the cgroup's (or why it is unavailable): the cgroup's quotas bound
/// what is available on the CPUs.
fn cpu_snapshot(
    bank: &mut SmootherBank,
    round: &Round<'_>,
    notes: &mut Vec<String>,
) -> (CpuSnapshot, Option<CgroupSnapshot>, Option<String>) {
    let (cur, prev, t, tps) = (round.cur, round.prev, round.t, round.tps);
    let total_s = cur.proc.cpus.total.to_seconds(tps);
    let total_util =
        prev.and_then(|p| utilisation(&p.proc.cpus.total.to_seconds(p.ticks_per_second), &total_s));
    let (cores, core_util) = core_snapshots(bank, round);
    let logical = cores.len() as u32;
    let allowed = noted(&cur.proc.allowed_cpus, notes).flatten().map(|a| {
        a.into_iter()
            .filter(|c| cores.iter().any(|o| o.cpu == *c))
            .collect::<Vec<u32>>()
    });
    let own_ticks = noted(&cur.proc.process_ticks, notes);
    let own_cores = match (prev.map(|p| &p.proc.process_ticks), own_ticks, round.dt) {
        (Some(Ok(p)), Some(c), Some(dt)) => {
            counter_rate(*p as f64 / tps as f64, c as f64 / tps as f64, dt)
        }
        _ => None,
    };
    let busy_total = total_util.map(|u| u * f64::from(logical));
    let cotenant = busy_total.map(|b| (b - own_cores.unwrap_or(0.0)).max(0.0));
    let (cgroup, cgroup_unavailable, quota_levels) = cgroup_snapshot(bank, round, notes);
    let (limit, available) = available_cores(
        &core_util,
        allowed.as_deref(),
        own_cores.unwrap_or(0.0),
        &quota_levels,
    );
    let limit = if core_util.is_empty() {
        // Before utilisation is known the limit still is: allowed CPUs and quotas.
        let n = allowed
            .as_ref()
            .map_or(logical as usize, |a| a.len().max(1).min(logical as usize))
            as f64;
        quota_levels.iter().fold(n, |l, (q, _)| l.min(*q))
    } else {
        limit
    };
    let available = total_util.map(|_| available);
    let cpu = CpuSnapshot {
        logical_cores: logical,
        utilisation: bank.update("cpu", t, total_util),
        cores,
        seconds: Some(total_s),
        allowed_cpus: allowed,
        own_cores: bank.update("own_cpu", t, own_cores),
        own_seconds_total: own_ticks.map(|t| t as f64 / tps as f64),
        cotenant_cores: bank.update("cotenant_cpu", t, cotenant),
        limit_cores: limit,
        available_cores: bank.update("available_cpu", t, available),
        load: noted(&cur.proc.load, notes),
        runnable_tasks: bank.update("runnable", t, cur.proc.cpus.procs_running.map(f64::from)),
        own_runnable_tasks: bank.update(
            "own_runnable",
            t,
            noted(&cur.proc.own_runnable, notes).map(f64::from),
        ),
        pressure_some_ratio: bank.update(
            "cpu_pressure",
            t,
            noted(&cur.proc.cpu_pressure, notes)
                .flatten()
                .map(|p| p.some_avg10),
        ),
    };
    (cpu, cgroup, cgroup_unavailable)
}

/// Host memory, and what of it the observed process may use under its cgroup's limit.
fn memory_snapshot(
    cur: &Reading,
    cgroup: Option<&CgroupSnapshot>,
    notes: &mut Vec<String>,
) -> MemorySnapshot {
    let Some(m) = noted(&cur.proc.memory, notes) else {
        return MemorySnapshot::default();
    };
    let host_avail = m.available_bytes.unwrap_or(m.free_bytes);
    let cg_avail = cgroup.and_then(|c| {
        Some(
            c.memory_limit_bytes?
                .saturating_sub(c.memory_working_set_bytes.unwrap_or(0)),
        )
    });
    MemorySnapshot {
        total_bytes: Some(m.total_bytes),
        available_bytes: m.available_bytes,
        free_bytes: Some(m.free_bytes),
        available_to_us_bytes: Some(cg_avail.map_or(host_avail, |c| c.min(host_avail))),
    }
}

/// Every network interface's counters and rates.
fn network_interfaces(round: &Round<'_>, notes: &mut Vec<String>) -> Vec<NetworkInterface> {
    let ifaces = match &round.cur.proc.net {
        Ok(ifaces) => ifaces,
        Err(e) => {
            notes.push(e.clone());
            return Vec::new();
        }
    };
    ifaces
        .iter()
        .map(|n| {
            let p = round
                .prev
                .and_then(|p| p.proc.net.as_ref().ok())
                .and_then(|v| v.iter().find(|x| x.name == n.name));
            let rate = |pv: Option<u64>, cv: u64| counter_rate(pv? as f64, cv as f64, round.dt?);
            NetworkInterface {
                name: n.name.clone(),
                rx_bytes_total: n.rx_bytes,
                tx_bytes_total: n.tx_bytes,
                rx_bytes_per_sec: rate(p.map(|p| p.rx_bytes), n.rx_bytes),
                tx_bytes_per_sec: rate(p.map(|p| p.tx_bytes), n.tx_bytes),
            }
        })
        .collect()
}

/// Every GPU's snapshot with smoothed utilisation, or why GPU metrics are unavailable.
fn gpu_snapshots(
    bank: &mut SmootherBank,
    round: &Round<'_>,
    pid: Option<u32>,
) -> (Vec<GpuSnapshot>, Option<String>) {
    match &round.cur.gpus {
        Ok(readings) => {
            let gpus: Vec<_> = readings
                .iter()
                .map(|r| {
                    let mut g = map_reading(r, pid);
                    g.utilisation_percent = bank.update(
                        &format!("gpu{}", g.index),
                        round.t,
                        g.utilisation_percent.map(|u| u.last),
                    );
                    g
                })
                .collect();
            (gpus, None)
        }
        Err(e) => (Vec::new(), Some(e.clone())),
    }
}

/// What share of each device (the CPUs as one, every GPU) is available, smoothed; a device
/// whose share is not known yet is left out.
fn device_shares(
    bank: &mut SmootherBank,
    t: f64,
    cpu: &CpuSnapshot,
    memory: &MemorySnapshot,
    gpus: &[GpuSnapshot],
) -> Vec<DeviceAvailability> {
    let mut devices = Vec::new();
    if let Some(avail) = cpu.available_cores {
        let capacity = f64::from(cpu.logical_cores.max(1));
        if let Some(share) = bank.update("share:CPU:0", t, Some(avail.last / capacity)) {
            devices.push(DeviceAvailability {
                device: "CPU:0".into(),
                kind: DeviceKind::Cpu,
                capacity,
                compute_share: share,
                free_memory_bytes: memory.available_to_us_bytes,
                age_ms: 0,
            });
        }
    }
    for g in gpus {
        let share = g
            .utilisation_percent
            .map(|u| gpu_share(u.last, g.own_utilisation_percent));
        let name = format!("GPU:{}", g.index);
        if let Some(share) = bank.update(&format!("share:{name}"), t, share) {
            devices.push(DeviceAvailability {
                device: name,
                kind: DeviceKind::Gpu,
                capacity: 1.0,
                compute_share: share,
                free_memory_bytes: g.memory_free_bytes,
                age_ms: 0,
            });
        }
    }
    devices
}

/// Completes snapshots read from an exporter that only publishes counters and raw gauges
/// (node_exporter, dcgm-exporter): utilisation and rates from two successive scrapes,
/// availability (nobody there is "us", so all use is co-tenant use), smoothing, devices.
#[derive(Debug)]
pub struct CounterDeriver {
    bank: SmootherBank,
    prev: Option<(f64, Snapshot)>,
    samples: u64,
}

impl CounterDeriver {
    /// A deriver smoothing with EWMA time constant `tau_s` and window `window_s` (seconds).
    pub fn new(tau_s: f64, window_s: f64) -> Self {
        CounterDeriver {
            bank: SmootherBank::new(tau_s, window_s),
            prev: None,
            samples: 0,
        }
    }

    /// Adds a raw snapshot scraped at `t_s` (monotonic seconds) and returns it completed.
    pub fn push(&mut self, t_s: f64, raw: Snapshot) -> Snapshot {
        self.samples += 1;
        self.bank.begin_round();
        let mut s = raw.clone();
        let prev = self.prev.as_ref().filter(|(t0, _)| t_s > *t0);
        let dt = prev.map(|(t0, _)| t_s - t0);
        let bank = &mut self.bank;
        let mut core_util = Vec::new();
        for c in &mut s.cpu.cores {
            let u = prev
                .and_then(|(_, p)| p.cpu.cores.iter().find(|pc| pc.cpu == c.cpu))
                .and_then(|pc| utilisation(&pc.seconds, &c.seconds));
            if let Some(u) = u {
                core_util.push((c.cpu, u));
            }
            c.utilisation = bank.update(&format!("cpu{}", c.cpu), t_s, u);
        }
        let total = match (
            prev.and_then(|(_, p)| p.cpu.seconds.as_ref()),
            &s.cpu.seconds,
        ) {
            (Some(a), Some(b)) => utilisation(a, b),
            _ => None,
        };
        s.cpu.utilisation = bank.update("cpu", t_s, total);
        let busy = total.map(|u| u * f64::from(s.cpu.logical_cores));
        s.cpu.cotenant_cores = bank.update("cotenant_cpu", t_s, busy);
        let (limit, available) = available_cores(&core_util, None, 0.0, &[]);
        if !core_util.is_empty() {
            s.cpu.limit_cores = limit;
        }
        s.cpu.available_cores = bank.update("available_cpu", t_s, total.map(|_| available));
        for n in &mut s.network {
            let p = prev.and_then(|(_, p)| p.network.iter().find(|x| x.name == n.name));
            let rate = |pv: Option<u64>, cv: u64| counter_rate(pv? as f64, cv as f64, dt?);
            n.rx_bytes_per_sec = rate(p.map(|p| p.rx_bytes_total), n.rx_bytes_total);
            n.tx_bytes_per_sec = rate(p.map(|p| p.tx_bytes_total), n.tx_bytes_total);
        }
        if s.memory.available_to_us_bytes.is_none() {
            s.memory.available_to_us_bytes = s.memory.available_bytes.or(s.memory.free_bytes);
        }
        for g in &mut s.gpus {
            g.utilisation_percent = bank.update(
                &format!("gpu{}", g.index),
                t_s,
                g.utilisation_percent.map(|u| u.last),
            );
        }
        s.devices.clear();
        if let Some(avail) = s.cpu.available_cores {
            let capacity = f64::from(s.cpu.logical_cores.max(1));
            if let Some(share) = bank.update("share:CPU:0", t_s, Some(avail.last / capacity)) {
                s.devices.push(DeviceAvailability {
                    device: "CPU:0".into(),
                    kind: DeviceKind::Cpu,
                    capacity,
                    compute_share: share,
                    free_memory_bytes: s.memory.available_to_us_bytes,
                    age_ms: s.age_ms,
                });
            }
        }
        for g in &s.gpus {
            let name = format!("GPU:{}", g.index);
            let share = g.utilisation_percent.map(|u| gpu_share(u.last, None));
            if let Some(share) = bank.update(&format!("share:{name}"), t_s, share) {
                s.devices.push(DeviceAvailability {
                    device: name,
                    kind: DeviceKind::Gpu,
                    capacity: 1.0,
                    compute_share: share,
                    free_memory_bytes: g.memory_free_bytes,
                    age_ms: s.age_ms,
                });
            }
        }
        s.interval_ms = dt.map(|d| (d * 1000.0).round() as u64);
        s.samples = self.samples;
        s.ewma_tau_s = bank.tau_s();
        s.window_s = bank.window_s();
        if s.cgroup.is_none() && s.cgroup_unavailable.is_none() {
            s.cgroup_unavailable = Some("the endpoint publishes no cgroup readings".into());
        }
        if s.gpus.is_empty() && s.gpus_unavailable.is_none() {
            s.gpus_unavailable =
                Some("GPU metrics unavailable: the endpoint publishes none".into());
        }
        self.bank.end_round();
        self.prev = Some((t_s, raw));
        s
    }
}

/// `Smoothed::last` of an optional gauge.
pub fn last(s: Option<Smoothed>) -> Option<f64> {
    s.map(|s| s.last)
}

#[cfg(test)]
mod tests;
