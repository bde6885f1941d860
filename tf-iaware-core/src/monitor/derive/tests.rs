use super::*;
use crate::monitor::cgroup::CpuLevel;
use crate::monitor::proc::{CpuTicks, MemInfo, NetCounters, StatCpus};

fn ticks(busy: u64, idle: u64) -> CpuTicks {
    CpuTicks {
        user: busy,
        idle,
        ..Default::default()
    }
}

fn reading(t_s: f64, cores: &[(u64, u64)], own: u64, cg: Option<(f64, f64)>) -> Reading {
    let total = cores
        .iter()
        .fold(CpuTicks::default(), |a, (b, i)| CpuTicks {
            user: a.user + b,
            idle: a.idle + i,
            ..Default::default()
        });
    Reading {
        t_s,
        unix_ms: (t_s * 1000.0) as u64,
        ticks_per_second: 100,
        proc: ProcReading {
            cpus: StatCpus {
                total,
                cores: cores
                    .iter()
                    .enumerate()
                    .map(|(i, (b, idle))| (i as u32, ticks(*b, *idle)))
                    .collect(),
                procs_running: None,
            },
            memory: Ok(MemInfo {
                total_bytes: 8 << 30,
                free_bytes: 2 << 30,
                available_bytes: Some(4 << 30),
            }),
            load: Err("/proc/loadavg: gone".into()),
            net: Ok(vec![NetCounters {
                name: "eth0".into(),
                rx_bytes: (t_s * 1000.0) as u64,
                tx_bytes: 0,
            }]),
            process_ticks: Ok(own),
            // The reader, and one busy thread of ours while we use CPU.
            own_runnable: Ok(1 + u32::from(own > 0)),
            allowed_cpus: Ok(None),
            cpu_pressure: Ok(None),
        },
        cgroup: match cg {
            Some((quota, usage_s)) => Ok(CgroupReading {
                version: 1,
                path: "/job".into(),
                levels: vec![
                    CpuLevel {
                        quota_cores: Some(quota),
                        usage_seconds: Some(usage_s),
                    },
                    CpuLevel::default(),
                ],
                memory_limit_bytes: Some(1 << 30),
                memory_usage_bytes: Some(600 << 20),
                memory_inactive_file_bytes: Some(100 << 20),
                ..Default::default()
            }),
            None => Err("no cgroup".into()),
        },
        gpus: Err("GPU metrics unavailable: test".into()),
    }
}

#[test]
fn first_reading_has_limits_but_no_rates() {
    let mut d = Deriver::new("local", "h", Some(1), 10.0, 60.0);
    let s = d.push(reading(0.0, &[(0, 0), (0, 0)], 0, Some((1.5, 0.0))));
    assert_eq!(s.cpu.utilisation, None);
    assert_eq!(s.cpu.limit_cores, 1.5);
    assert_eq!(s.cpu.available_cores, None);
    assert!(s.devices.is_empty());
    assert_eq!(s.notes, vec!["/proc/loadavg: gone".to_string()]);
    assert_eq!(
        s.gpus_unavailable.as_deref(),
        Some("GPU metrics unavailable: test")
    );
}

#[test]
fn utilisation_own_cotenant_and_availability() {
    let mut d = Deriver::new("local", "h", Some(1), 10.0, 60.0);
    d.push(reading(0.0, &[(0, 0), (0, 0)], 0, None));
    // Over 1 s (100 ticks per core): core 0 fully busy, core 1 half busy; we used 0.5 core.
    let s = d.push(reading(1.0, &[(100, 0), (50, 50)], 50, None));
    assert_eq!(s.cpu.utilisation.unwrap().last, 0.75);
    assert_eq!(s.cpu.cores[1].utilisation.unwrap().last, 0.5);
    assert_eq!(s.cpu.own_cores.unwrap().last, 0.5);
    assert_eq!(s.cpu.own_runnable_tasks.unwrap().last, 2.0);
    assert_eq!(s.cpu.cotenant_cores.unwrap().last, 1.0);
    assert_eq!(s.cpu.limit_cores, 2.0);
    assert_eq!(s.cpu.available_cores.unwrap().last, 1.0);
    let cpu = s.device("CPU:0").unwrap();
    assert_eq!(cpu.compute_share.last, 0.5);
    assert_eq!(cpu.free_memory_bytes, Some(4 << 30));
    assert_eq!(s.network[0].rx_bytes_per_sec, Some(1000.0));
    assert_eq!(s.interval_ms, Some(1000));
}

#[test]
fn quota_bounds_availability_and_memory() {
    let mut d = Deriver::new("local", "h", Some(1), 10.0, 60.0);
    d.push(reading(0.0, &[(0, 0), (0, 0)], 0, Some((1.5, 0.0))));
    // The machine is idle but for us (0.2 core) and a sibling in our cgroup (0.8 core).
    let s = d.push(reading(1.0, &[(60, 40), (40, 60)], 20, Some((1.5, 1.0))));
    let cg = s.cgroup.as_ref().unwrap();
    assert_eq!(cg.cpu_usage_cores.unwrap().last, 1.0);
    assert_eq!(s.cpu.limit_cores, 1.5);
    // Quota 1.5 less the sibling's 0.8 leaves 0.7 for us.
    assert!((s.cpu.available_cores.unwrap().last - 0.7).abs() < 1e-9);
    // Memory: 1 GiB limit − (600 − 100) MiB working set.
    assert_eq!(
        s.memory.available_to_us_bytes,
        Some((1 << 30) - (500 << 20))
    );
}

#[test]
fn a_quota_on_our_own_cgroup_is_lost_availability_of_the_machine() {
    use crate::cluster::live::cpu_figures;
    // Alone in a 0.15-core cgroup of its own (a container's limit, a cgroup made by hand)
    // on an idle 2-core machine.
    let mut d = Deriver::new("local", "h", Some(1), 10.0, 60.0);
    d.push(reading(0.0, &[(0, 0), (0, 0)], 0, Some((0.15, 0.0))));
    let s = d.push(reading(1.0, &[(8, 92), (7, 93)], 15, Some((0.15, 0.15))));
    let cg = s.cgroup.as_ref().unwrap();
    assert_eq!(cg.cpu_quota_cores, Some(0.15));
    assert_eq!(cg.cpu_allotment_cores, None, "no enclosing quota");
    let f = cpu_figures(&s, None).unwrap();
    assert_eq!((f.allotment, f.cap), (2.0, 0.15));
    assert!(
        f.availability <= 0.075 + 1e-12 && f.availability > 0.06,
        "{f:?}"
    );
    // The same quota on an enclosing group (an emulated node, a parent slice): the
    // node is the allotment, and all of it is available.
    let mut d = Deriver::new("local", "h", Some(1), 10.0, 60.0);
    let nested = |t, busy: &[(u64, u64)], own, usage| {
        let mut r = reading(t, busy, own, Some((1.0, usage)));
        if let Ok(cg) = &mut r.cgroup {
            cg.levels[0].quota_cores = None;
            cg.levels[1].quota_cores = Some(0.15);
        }
        r
    };
    d.push(nested(0.0, &[(0, 0), (0, 0)], 0, 0.0));
    let s = d.push(nested(1.0, &[(8, 92), (7, 93)], 15, 0.15));
    let f = cpu_figures(&s, None).unwrap();
    assert_eq!(f.allotment, 0.15);
    assert!(f.availability > 0.9, "{f:?}");
}

#[test]
fn counters_from_an_exporter_become_rates() {
    use crate::monitor::snapshot::{CpuModeSeconds, GpuSnapshot};
    let raw = |t: f64, busy0: f64, busy1: f64, rx: u64| {
        let mut s = Snapshot::empty("node");
        for (cpu, busy) in [(0u32, busy0), (1, busy1)] {
            s.cpu.cores.push(CoreSnapshot {
                cpu,
                utilisation: None,
                seconds: CpuModeSeconds {
                    user: busy,
                    idle: t - busy,
                    ..Default::default()
                },
            });
        }
        s.cpu.seconds = Some(crate::monitor::snapshot::CpuModeSeconds::sum(
            s.cpu.cores.iter().map(|c| &c.seconds),
        ));
        s.cpu.logical_cores = 2;
        s.cpu.limit_cores = 2.0;
        s.memory.available_bytes = Some(1000);
        s.network.push(NetworkInterface {
            name: "eth0".into(),
            rx_bytes_total: rx,
            tx_bytes_total: 0,
            rx_bytes_per_sec: None,
            tx_bytes_per_sec: None,
        });
        s.gpus.push(GpuSnapshot {
            index: 0,
            utilisation_percent: Some(Smoothed::constant(40.0)),
            memory_free_bytes: Some(7),
            ..Default::default()
        });
        s
    };
    let mut d = CounterDeriver::new(10.0, 60.0);
    let first = d.push(0.0, raw(100.0, 10.0, 10.0, 0));
    assert_eq!(first.cpu.utilisation, None);
    assert_eq!(first.device("GPU:0").unwrap().compute_share.last, 0.6);
    // 10 s later: cpu0 was busy 10 s, cpu1 5 s; 2 MB received.
    let s = d.push(10.0, raw(110.0, 20.0, 15.0, 2_000_000));
    assert_eq!(s.cpu.cores[0].utilisation.unwrap().last, 1.0);
    assert_eq!(s.cpu.utilisation.unwrap().last, 0.75);
    assert_eq!(s.cpu.cotenant_cores.unwrap().last, 1.5);
    assert_eq!(s.cpu.available_cores.unwrap().last, 0.5);
    assert_eq!(s.device("CPU:0").unwrap().compute_share.last, 0.25);
    assert_eq!(s.device("CPU:0").unwrap().free_memory_bytes, Some(1000));
    assert_eq!(s.network[0].rx_bytes_per_sec, Some(200_000.0));
    assert_eq!(s.samples, 2);
    assert!(s.cgroup_unavailable.is_some());
}

#[test]
fn available_cores_cases() {
    let idle = [(0, 0.0), (1, 0.0), (2, 0.0), (3, 0.0)];
    assert_eq!(available_cores(&idle, None, 0.0, &[]), (4.0, 4.0));
    assert_eq!(available_cores(&idle, Some(&[1, 2]), 0.0, &[]), (2.0, 2.0));
    assert_eq!(
        available_cores(&idle, None, 0.0, &[(0.5, None)]),
        (0.5, 0.5)
    );
    let busy = [(0, 1.0), (1, 1.0), (2, 0.5), (3, 0.0)];
    // 2.5 cores busy, 1 of them ours: 1.5 taken by co-tenants.
    assert_eq!(available_cores(&busy, None, 1.0, &[]), (4.0, 2.5));
    // Only CPUs 2 and 3 are ours to use, 0.5 busy there (not us).
    assert_eq!(available_cores(&busy, Some(&[2, 3]), 0.0, &[]), (2.0, 1.5));
    // Fully contended: never below 0.
    let full = [(0, 1.0)];
    assert_eq!(available_cores(&full, None, 0.0, &[]), (1.0, 0.0));
}
