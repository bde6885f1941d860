//! Tests of the availability model: formulas, snapshots and files recorded on a busy host.

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
        // Not counted: the reader and our use are taken off the run queue.
        own_runnable: None,
        pressure_some: None,
        group: None,
    }
}

#[test]
fn availability_keeps_falling_with_cpu_bound_cotenants() {
    // TensorFlow's 2 threads among n CPU-bound co-tenants on 2 cores: 2 / (n + 2), whether it
    // is read idle (here) or busy.
    let shares: Vec<f64> = [0.0, 1.0, 2.0, 4.0, 8.0]
        .iter()
        .map(|n| contention(&host(2.0, *n)).share)
        .collect();
    let expected = [1.0, 2.0 / 3.0, 0.5, 1.0 / 3.0, 0.2];
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
    assert!((contention(&psi).share - 2.0 / 5.0).abs() < 1e-12);
    let bare = ContentionInputs {
        pressure_some: None,
        ..psi
    };
    assert!((contention(&bare).share - 0.5).abs() < 1e-12);
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

/// PSI's "some" counts our own threads' waits: read while we calibrate (TensorFlow's two
/// intra-op threads on 2 busy cores) it is high with nobody else around, and the calibration
/// divided every rate by the availability it implied (0.67 on a quiet host). With the run queue
/// counted, ours taken off, pressure no longer adds a competitor; without it, it still does.
#[test]
fn our_own_cpu_pressure_is_not_a_competitor() {
    let calibrating = ContentionInputs {
        own_cores: 1.9,
        cotenant_cores: Some(0.0),
        runnable_tasks: Some(3.0),
        own_runnable: Some(3.0),
        pressure_some: Some(0.9),
        ..host(2.0, 0.0)
    };
    let c = contention(&calibrating);
    assert_eq!((c.host_competitors, c.share), (0.0, 1.0), "{c:?}");
    // An exporter page without the run queue: pressure is all there is to go by.
    let blind = contention(&ContentionInputs {
        runnable_tasks: None,
        own_runnable: None,
        ..calibrating
    });
    assert!((blind.host_competitors - 0.9).abs() < 1e-12, "{blind:?}");
    assert!(blind.share < 1.0);
}

#[test]
fn our_own_runnable_threads_are_not_competitors() {
    // One `yes` on 2 cores, read while TensorFlow starts its pools: at the sampling instant
    // the run queue holds the co-tenant, the reader and 3 threads of ours, though over the
    // interval we used only 0.3 of a core (issue 26: `devices` read 2.95 competitors).
    let starting = ContentionInputs {
        own_cores: 0.3,
        runnable_tasks: Some(5.0),
        ..host(2.0, 1.0)
    };
    // Not counted, ours are guessed as the reader and our use (1.3), leaving 3.7 to the
    // co-tenants; their use bounds that: 1 core used with 0.7 to spare — 1 + 0.3 × (4 − 1).
    let guessed = contention(&starting);
    assert!(
        (guessed.host_competitors - 1.9).abs() < 1e-12,
        "{guessed:?}"
    );
    let counted = contention(&ContentionInputs {
        own_runnable: Some(4.0),
        ..starting.clone()
    });
    assert_eq!(counted.host_competitors, 1.0, "the yes alone");
    assert!((counted.share - 2.0 / 3.0).abs() < 1e-12, "{counted:?}");
    // An idle process: only the reader is ours; averaged counts stay fractional. (Without
    // the co-tenants' measured use, so the queue alone decides.)
    let idle = ContentionInputs {
        own_cores: 0.0,
        cotenant_cores: None,
        runnable_tasks: Some(9.0),
        own_runnable: Some(1.0),
        ..host(2.0, 8.0)
    };
    assert_eq!(contention(&idle).host_competitors, 8.0);
    let averaged = ContentionInputs {
        runnable_tasks: Some(2.4),
        own_runnable: Some(1.4),
        ..idle.clone()
    };
    assert!((contention(&averaged).host_competitors - 1.0).abs() < 1e-12);
    // More of ours than the queue held (the counts are read a moment apart): none compete;
    // a count that is not a number is no count.
    let over = ContentionInputs {
        own_runnable: Some(12.0),
        ..idle.clone()
    };
    assert_eq!(contention(&over).host_competitors, 0.0);
    let nan = ContentionInputs {
        own_runnable: Some(f64::NAN),
        ..idle
    };
    assert_eq!(contention(&nan).host_competitors, 8.0, "reader + own use");
}

#[test]
fn an_idle_process_is_priced_at_the_threads_tensorflow_will_run() {
    // Read idle (own use 0) or busy (2 cores), TensorFlow runs 2 threads on 2 cores: one
    // co-tenant leaves 2/3 (the old rule, d = own use ≥ 1, said 1 when idle), eight 1/5.
    for own in [0.0, 0.4, 2.0] {
        let read = |n: f64| {
            contention(&ContentionInputs {
                own_cores: own,
                // The co-tenants, the reader and (busy) our runnable threads.
                runnable_tasks: Some(n + 1.0 + own.floor()),
                own_runnable: Some(1.0 + own.floor()),
                ..host(2.0, n)
            })
        };
        let one = read(1.0);
        assert_eq!(one.demand, 2.0, "{own}: {one:?}");
        assert!((one.share - 2.0 / 3.0).abs() < 1e-12, "{own}: {one:?}");
        assert!((read(8.0).share - 0.2).abs() < 1e-12, "{own}");
        assert_eq!(read(0.0).share, 1.0, "{own}");
    }
    // d is the cores it may run on, not the host's: pinned to 1 of 4 CPUs, one thread.
    let pinned = ContentionInputs {
        logical: 4.0,
        machine: 1.0,
        cap: 1.0,
        ..host(4.0, 0.0)
    };
    assert_eq!(contention(&pinned).demand, 1.0);
    // A quota does not shrink it (TensorFlow sizes its pools by visible cores): alone, a
    // process capped at 0.5 of 2 cores loses nothing, busy or not.
    let capped = |own: f64| ContentionInputs {
        cap: 0.5,
        own_cores: own,
        group: Some(QuotaGroup {
            quota_cores: 0.5,
            others_cores: 0.0,
            ..QuotaGroup::default()
        }),
        ..host(2.0, 0.0)
    };
    for own in [0.0, 0.5] {
        let c = contention(&capped(own));
        assert_eq!((c.demand, c.share), (2.0, 1.0), "{own}");
    }
    let host_cotenants = |own: f64, n: f64| {
        contention(&ContentionInputs {
            cotenant_cores: Some(n.min(2.0)),
            runnable_tasks: Some(n + 2.0),
            own_runnable: Some(2.0),
            ..capped(own)
        })
        .share
    };
    // Busy up to its quota or idle, each of its 2 threads runs at 0.25 alone: one host
    // co-tenant does not reach into that (2 / 3 of a core per thread), six do (2 / 8 = 0.25),
    // and from there on the host's share binds.
    for own in [0.0, 0.5] {
        assert_eq!(host_cotenants(own, 1.0), 1.0);
        assert!((host_cotenants(own, 6.0) - 1.0).abs() < 1e-12);
        assert!((host_cotenants(own, 8.0) - (2.0 / 10.0) / 0.25).abs() < 1e-12);
    }
}

#[test]
fn a_cotenant_inside_the_quota_competes_for_the_quota_not_the_machine() {
    // A worker in a 0.3-core cgroup on 2 cores; a CPU-bound process beside it in the same
    // cgroup uses 0.28 of the 0.30 cores (issue 26: the old model said 0.88).
    let group = |own: f64, others: f64, counted: Option<f64>| ContentionInputs {
        logical: 2.0,
        machine: 2.0,
        cap: 0.3,
        own_cores: own,
        cotenant_cores: Some(others),
        // The reader, and the co-tenant while it is not throttled (a throttled group's
        // tasks leave the run queue).
        runnable_tasks: Some(1.0 + others),
        own_runnable: Some(1.0),
        pressure_some: None,
        group: Some(QuotaGroup {
            quota_cores: 0.3,
            others_cores: others,
            pressure_some: None,
            others_runnable: counted,
        }),
    };
    // TensorFlow held to its quota keeps about one thread runnable (2 cores, but a quota
    // under one core); the co-tenant's 0.28 / 0.3 of a thread beside it leaves it about half:
    // 1 / (1 + k).
    let c = contention(&group(0.3, 0.28, None));
    assert_eq!(c.demand, 2.0);
    assert!((c.share - 1.0 / (1.0 + 0.28 / 0.3)).abs() < 1e-12, "{c:?}");
    assert!(c.share > 0.5 && c.share < 0.55, "about half: {c:?}");
    assert_eq!(c.host_competitors, 0.0, "not counted twice");
    assert_eq!(contention(&group(0.3, 0.0, None)).share, 1.0);
    // The cgroup's PSI adds a waiting thread for the share of time it reports.
    let mut p = group(0.3, 0.28, None);
    if let Some(g) = p.group.as_mut() {
        g.pressure_some = Some(0.5);
    }
    assert!(contention(&p).share < c.share);
    // The saturated quota caps the co-tenants' use near 0.3 however many they are: their
    // runnable threads, where counted, say how many share it.
    for k in [1.0, 2.0, 4.0, 8.0] {
        let c = contention(&group(0.0, 0.3, Some(k)));
        assert_eq!(c.group_competitors, k);
        assert!((c.share - 1.0 / (1.0 + k)).abs() < 1e-12, "{k}: {c:?}");
    }
    assert_eq!(
        contention(&group(0.3, 0.28, Some(0.2))).group_competitors,
        0.28 / 0.3,
        "a count below the use does not lower it"
    );
}

#[test]
fn a_quota_is_shared_by_the_runnable_threads_in_it() {
    // Recorded (`benches/results/availability-threads/quota-*`): a worker in a 1-core cgroup
    // on 2 cores, `n` `yes` beside it in the cgroup; ResNet-20's step ran 2.0, 3.2, 4.2 and
    // 7.5 times as long for 1, 2, 4 and 8 — about `1 + n`, as in a 0.3-core group.
    let read = |quota: f64, n: f64| {
        contention(&ContentionInputs {
            logical: 2.0,
            machine: 2.0,
            cap: quota,
            own_cores: 0.0,
            cotenant_cores: Some(quota.min(n)),
            runnable_tasks: Some(1.0 + n.min(2.0)),
            own_runnable: Some(1.0),
            pressure_some: None,
            group: Some(QuotaGroup {
                quota_cores: quota,
                others_cores: quota.min(n),
                pressure_some: None,
                others_runnable: Some(n),
            }),
        })
    };
    for quota in [0.3, 1.0] {
        assert_eq!(read(quota, 0.0).share, 1.0);
        for n in [1.0, 2.0, 4.0, 8.0] {
            let c = read(quota, n);
            assert!(
                (c.share - 1.0 / (1.0 + n)).abs() < 1e-12,
                "{quota} {n}: {c:?}"
            );
            assert_eq!(c.host_competitors, 0.0, "{n}: the cgroup's, not the host's");
        }
    }
    // A quota of 1.5 cores holds 1.5 of our threads: 1.5 / (1.5 + n).
    let c = read(1.5, 1.0);
    assert!((c.share - 1.5 / 2.5).abs() < 1e-12, "{c:?}");
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
    assert_eq!(f.contention.demand, 4.0, "the 4 cores TensorFlow runs on");
    assert!((f.availability - 4.0 / 12.0).abs() < 1e-12, "{f:?}");
    // Our own runnable threads counted with the run queue: 3 of the 9 are ours (2 of
    // TensorFlow's and the reader), so 6 compete, not the 8 "reader + own use" would leave.
    s.cpu.own_runnable_tasks = Some(Smoothed::constant(3.0));
    let f = cpu_figures(&s, None).unwrap();
    assert_eq!(f.contention.host_competitors, 6.0);
    assert!((f.availability - 4.0 / 10.0).abs() < 1e-12, "{f:?}");
    // An older agent's page without the run queue: the measured use only.
    s.cpu.runnable_tasks = None;
    assert!((cpu_figures(&s, None).unwrap().availability - 0.5).abs() < 1e-12);
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
                ProcFile::ProcessTasksBefore => "own_tasks_before",
                ProcFile::ProcessTasks => "own_tasks",
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
        // Counted on both sides of each procs_running: the reader (the recording shell) is
        // ours and runnable, the observed `sleep` is not.
        let own = s.cpu.own_runnable_tasks.unwrap();
        assert_eq!((own.min, own.max), (1.0, 1.0), "host-{n}");
        let runnable = s.cpu.runnable_tasks.unwrap();
        let f = cpu_figures(&s, None).unwrap();
        assert!(f.availability > 0.0 && f.availability <= 1.0, "{f:?}");
        // TensorFlow's 2 threads among those the run queue held on these 2 cores (less the
        // reader; the observed process is an idle `sleep`).
        let fair = (2.0 / (runnable.ewma - 1.0 + 2.0)).min(1.0);
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
fn recorded_cotenant_inside_a_quota_takes_its_share_of_it() {
    let alone = cpu_figures(&recorded("quota-0"), None).unwrap();
    eprintln!("quota-0: {alone:?}");
    let shared_snap = recorded("quota-1");
    let shared = cpu_figures(&shared_snap, None).unwrap();
    let cg = shared_snap.cgroup.as_ref().unwrap();
    assert_eq!(cg.cpu_quota_cores, Some(0.3));
    // The quota is on the process's own cgroup (as a container's or a hand-made one): the
    // machine's cores are the allotment, and the quota's share of them is lost availability.
    assert!((alone.cap - 0.3).abs() < 1e-12, "{alone:?}");
    assert_eq!(alone.allotment, alone.machine);
    let h = 0.3 / alone.allotment;
    assert!(
        alone.availability > 0.9 * h && alone.availability <= h,
        "{alone:?}"
    );
    // The co-tenant used (almost) the whole quota: one competing thread beside the one of
    // TensorFlow's that a quota under a core keeps runnable: about half, 1 / (1 + k).
    eprintln!("quota-1: {shared:?}");
    let k = shared.contention.group_competitors;
    assert!(k > 0.8 && k <= 1.0 + 1e-9, "{shared:?}");
    assert_eq!(shared.contention.demand, 2.0);
    assert!(
        (shared.availability - h / (1.0 + k)).abs() < 1e-9,
        "{shared:?}"
    );
    assert!(
        shared.availability > 0.45 * h && shared.availability < 0.56 * h,
        "{shared:?}"
    );
}

/// The run queue is one instant's count: a co-tenant caught there that the interval's use
/// cannot account for is a transient, not a competitor (a quiet host read 0.67 one time in
/// five, a calibration 0.51, from one short-lived task at the sampling instant).
#[test]
fn a_transient_in_the_run_queue_is_bounded_by_the_cotenants_use() {
    // A quiet host, read idle: a short-lived process runnable at the instant, 0.02 core used.
    let quiet = ContentionInputs {
        own_cores: 0.0,
        cotenant_cores: Some(0.02),
        runnable_tasks: Some(2.0),
        own_runnable: Some(1.0),
        ..host(2.0, 0.0)
    };
    let c = contention(&quiet);
    assert!((c.host_competitors - 0.02).abs() < 1e-12, "{c:?}");
    assert!(c.share > 0.98, "{c:?}");
    // Calibrating (our threads fill both cores): two tasks at the instant, 0.02 core used
    // over the interval — beside our 2 threads, at most 2 × 2 × 0.02 / 1.98.
    let calibrating = ContentionInputs {
        own_cores: 1.98,
        ..quiet.clone()
    };
    let c = contention(&ContentionInputs {
        runnable_tasks: Some(5.0),
        own_runnable: Some(2.0),
        ..calibrating
    });
    assert!((c.host_competitors - 0.08 / 1.98).abs() < 1e-9, "{c:?}");
    // Real co-tenants are kept: one `yes` read idle (a core used, one to spare), and eight
    // beside a running step (1.6 cores of 2 used by them, saturated).
    let one = contention(&ContentionInputs {
        cotenant_cores: Some(1.0),
        ..quiet.clone()
    });
    assert_eq!(one.host_competitors, 1.0);
    let eight = contention(&ContentionInputs {
        own_cores: 0.4,
        cotenant_cores: Some(1.6),
        runnable_tasks: Some(11.0),
        own_runnable: Some(3.0),
        ..host(2.0, 1.6)
    });
    assert_eq!(eight.host_competitors, 8.0, "{eight:?}");
    // The co-tenants' use unknown: the count stands.
    let blind = contention(&ContentionInputs {
        cotenant_cores: None,
        ..quiet
    });
    assert_eq!(blind.host_competitors, 1.0);
}
