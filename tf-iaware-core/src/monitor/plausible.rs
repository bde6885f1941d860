//! Range checks of a scraped reading before it moves a plan: a page from another process (an
//! agent of another version, an exporter, a replayed or forged page) may carry numbers that
//! parse but mean nothing — a NaN or negative availability, a share above 1, a host of 0 cores,
//! a time stamp in the future or a page served again long after it was taken. The live figures
//! would clamp such numbers into something plausible and use them without a word; instead
//! [`implausible_readings`] names each one (series and value), and the reading is not used.

use super::snapshot::{Smoothed, Snapshot};

/// How far a page's own time stamp may lie ahead of this machine's clock, or behind it beyond the
/// scraper's staleness limit, before the page is refused: hosts' clocks differ a little.
pub const CLOCK_SKEW_MS: u64 = 30_000;

fn stats(s: &Smoothed) -> [(&'static str, f64); 5] {
    [
        ("last", s.last),
        ("ewma", s.ewma),
        ("mean", s.mean),
        ("min", s.min),
        ("max", s.max),
    ]
}

/// The readings of `s` outside their ranges, one text per reading naming its series (the
/// metric of the page) and its value; empty when every reading is plausible. `now_unix_ms` is
/// this machine's clock; a page whose time stamp is more than [`CLOCK_SKEW_MS`] ahead of it, or
/// older than `max_age_ms` plus that, is refused.
pub fn implausible_readings(s: &Snapshot, now_unix_ms: u64, max_age_ms: u64) -> Vec<String> {
    let mut out = Vec::new();
    cpu_readings(s, &mut out);
    share_readings(s, &mut out);
    gpu_readings(s, &mut out);
    timestamp_reading(s, now_unix_ms, max_age_ms, &mut out);
    out
}

/// The CPU figures of `s` out of range: available and limit cores, the cgroup's allotment,
/// runnable tasks (all, and our own).
fn cpu_readings(s: &Snapshot, out: &mut Vec<String>) {
    let cores = f64::from(s.cpu.logical_cores);
    if let Some(avail) = &s.cpu.available_cores {
        if s.cpu.logical_cores == 0 {
            out.push(
                "tf_iaware_cpu_logical_cores reads 0: a host has at least one core".to_string(),
            );
        }
        for (stat, v) in stats(avail) {
            if !v.is_finite() || v < 0.0 || (cores > 0.0 && v > cores * 1.01 + 0.01) {
                out.push(format!(
                    "tf_iaware_cpu_available_cores{{stat=\"{stat}\"}} reads {v}: not within 0 to \
                     the host's {cores} cores"
                ));
                break;
            }
        }
    }
    if !s.cpu.limit_cores.is_finite() || s.cpu.limit_cores < 0.0 {
        out.push(format!(
            "tf_iaware_cpu_limit_cores reads {}: not a number of cores ≥ 0",
            s.cpu.limit_cores
        ));
    }
    if let Some(a) = s.cgroup.as_ref().and_then(|c| c.cpu_allotment_cores) {
        if !a.is_finite() || a <= 0.0 {
            out.push(format!(
                "tf_iaware_cgroup_cpu_allotment_cores reads {a}: not a number of cores > 0"
            ));
        }
    }
    let others = s.cgroup.as_ref().and_then(|c| c.others_runnable_tasks);
    let counts = [
        ("tf_iaware_runnable_tasks", &s.cpu.runnable_tasks),
        ("tf_iaware_own_runnable_tasks", &s.cpu.own_runnable_tasks),
        ("tf_iaware_cgroup_others_runnable_tasks", &others),
    ];
    for (series, count) in counts {
        if let Some((stat, v)) = count
            .as_ref()
            .map(stats)
            .unwrap_or_default()
            .into_iter()
            .find(|(_, v)| !v.is_finite() || *v < 0.0)
        {
            out.push(format!(
                "{series}{{stat=\"{stat}\"}} reads {v}: not a count of tasks ≥ 0"
            ));
        }
    }
}

/// The shares of `s` outside 0 to 1: CPU pressures, devices' available shares.
fn share_readings(s: &Snapshot, out: &mut Vec<String>) {
    let pressures = [
        (
            "tf_iaware_cpu_pressure_some_ratio",
            s.cpu.pressure_some_ratio,
        ),
        (
            "tf_iaware_cgroup_cpu_pressure_some_ratio",
            s.cgroup.as_ref().and_then(|c| c.cpu_pressure_some_ratio),
        ),
    ];
    for (series, p) in pressures {
        if let Some((stat, v)) = p
            .as_ref()
            .map(stats)
            .unwrap_or_default()
            .into_iter()
            .find(|(_, v)| !(0.0..=1.0).contains(v))
        {
            out.push(format!(
                "{series}{{stat=\"{stat}\"}} reads {v}: not a share within 0 to 1"
            ));
        }
    }
    for d in &s.devices {
        if let Some((stat, v)) = stats(&d.compute_share)
            .into_iter()
            .find(|(_, v)| !(0.0..=1.0).contains(v))
        {
            out.push(format!(
                "tf_iaware_device_available_share{{device=\"{}\",stat=\"{stat}\"}} reads {v}: \
                 not a share within 0 to 1",
                d.device
            ));
        }
    }
}

/// The GPU utilisations of `s` outside 0 to 100 %.
fn gpu_readings(s: &Snapshot, out: &mut Vec<String>) {
    for g in &s.gpus {
        let util = g
            .utilisation_percent
            .as_ref()
            .map(stats)
            .unwrap_or_default();
        let own = g.own_utilisation_percent.map(|v| ("own", v));
        if let Some((stat, v)) = util
            .into_iter()
            .chain(own)
            .find(|(_, v)| !(0.0..=100.0).contains(v))
        {
            out.push(format!(
                "tf_iaware_gpu_utilisation_percent{{gpu=\"{}\",stat=\"{stat}\"}} reads {v}: \
                 not a percentage within 0 to 100",
                g.index
            ));
        }
    }
}

/// The time stamp of `s` when it lies in the future of `now_unix_ms` or is older than
/// `max_age_ms`, each beyond [`CLOCK_SKEW_MS`].
fn timestamp_reading(s: &Snapshot, now_unix_ms: u64, max_age_ms: u64, out: &mut Vec<String>) {
    if s.taken_unix_ms > 0 {
        let taken = s.taken_unix_ms;
        if taken > now_unix_ms.saturating_add(CLOCK_SKEW_MS) {
            out.push(format!(
                "tf_iaware_reading_timestamp_seconds reads {:.3}: {:.0} s in the future of this \
                 machine's clock",
                taken as f64 / 1e3,
                (taken - now_unix_ms) as f64 / 1e3
            ));
        } else {
            let age = now_unix_ms.saturating_sub(taken);
            if age > max_age_ms.saturating_add(CLOCK_SKEW_MS) {
                out.push(format!(
                    "tf_iaware_reading_timestamp_seconds reads {:.3}: the page was taken {:.0} s \
                     ago (a page served again, or a stalled agent)",
                    taken as f64 / 1e3,
                    age as f64 / 1e3
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::snapshot::{CgroupSnapshot, DeviceAvailability, DeviceKind};

    const NOW: u64 = 1_800_000_000_000;

    fn good() -> Snapshot {
        let mut s = Snapshot::empty("agent");
        s.taken_unix_ms = NOW - 500;
        s.cpu.logical_cores = 4;
        s.cpu.limit_cores = 2.0;
        s.cpu.available_cores = Some(Smoothed::constant(1.5));
        s.cgroup = Some(CgroupSnapshot {
            cpu_allotment_cores: Some(2.0),
            ..CgroupSnapshot::default()
        });
        s.devices.push(DeviceAvailability {
            device: "CPU:0".into(),
            kind: DeviceKind::Cpu,
            capacity: 2.0,
            compute_share: Smoothed::constant(0.75),
            free_memory_bytes: None,
            age_ms: 0,
        });
        s
    }

    #[test]
    fn plausible_readings_pass() {
        assert!(implausible_readings(&good(), NOW, 5_000).is_empty());
    }

    #[test]
    fn each_absurd_reading_is_named_with_its_series_and_value() {
        type Spoil = fn(&mut Snapshot);
        let cases: [(Spoil, &str); 11] = [
            (
                |s| s.cpu.runnable_tasks = Some(Smoothed::constant(-1.0)),
                "tf_iaware_runnable_tasks{stat=\"last\"} reads -1",
            ),
            (
                |s| s.cpu.own_runnable_tasks = Some(Smoothed::constant(f64::INFINITY)),
                "tf_iaware_own_runnable_tasks{stat=\"last\"} reads inf",
            ),
            (
                |s| {
                    if let Some(c) = s.cgroup.as_mut() {
                        c.cpu_pressure_some_ratio = Some(Smoothed::constant(f64::NAN));
                    }
                },
                "tf_iaware_cgroup_cpu_pressure_some_ratio",
            ),
            (
                |s| s.cpu.available_cores = Some(Smoothed::constant(f64::NAN)),
                "tf_iaware_cpu_available_cores",
            ),
            (
                |s| s.cpu.available_cores = Some(Smoothed::constant(-0.5)),
                "reads -0.5",
            ),
            (
                |s| s.cpu.logical_cores = 0,
                "tf_iaware_cpu_logical_cores reads 0",
            ),
            (
                |s| s.devices[0].compute_share = Smoothed::constant(2.5),
                "tf_iaware_device_available_share{device=\"CPU:0\"",
            ),
            (
                |s| {
                    if let Some(c) = s.cgroup.as_mut() {
                        c.cpu_allotment_cores = Some(0.0);
                    }
                },
                "tf_iaware_cgroup_cpu_allotment_cores reads 0",
            ),
            (
                |s| s.cpu.limit_cores = f64::INFINITY,
                "tf_iaware_cpu_limit_cores",
            ),
            (|s| s.taken_unix_ms = 99_999_999_999_999, "in the future"),
            (|s| s.taken_unix_ms = NOW - 98_000, "98 s ago"),
        ];
        for (spoil, says) in cases {
            let mut s = good();
            spoil(&mut s);
            let found = implausible_readings(&s, NOW, 5_000);
            assert!(found.iter().any(|f| f.contains(says)), "{says}: {found:?}");
        }
    }
}
