//! [`Snapshot`] ↔ Prometheus metrics. node_exporter and DCGM exporter names where they exist
//! (units converted: bytes → MiB for `DCGM_FI_DEV_FB_*`, ms → s; the snapshot has NVML's mW as
//! W already), `tf_iaware_*` for ours. Smoothed gauges carry a `stat` label (`last`, `ewma`,
//! `mean`, `min`, `max`).
//!
//! [`to_exposition`] writes every field of a snapshot, so [`from_exposition`] of our own page
//! gives the same snapshot back (except `source`, `age_ms`, `stale`). A page from a plain
//! node_exporter or dcgm-exporter gives the raw counters and gauges those exporters carry;
//! [`Snapshot`] fields they lack stay empty (the scraper derives rates from two scrapes).
//!
//! Both directions are driven by one table of series (the private `series` module): each
//! family's name, type, help text, unit conversion, labels and snapshot field are declared there
//! once.

use crate::error::Result;
use crate::monitor::exposition::{Exposition, Family};
use crate::monitor::series::{Series, AGE, SERIES};
use crate::monitor::snapshot::Snapshot;

pub use crate::monitor::series::INFO;

/// Renders a snapshot as a page in the text format (see [`to_exposition`]).
pub fn render(s: &Snapshot) -> String {
    let mut page = render_without_age(s);
    page.push_str(&render_age(s.age_ms));
    page
}

/// Everything [`render`] writes but the reading's age (which changes with every request while
/// the rest changes once per reading, so a server can cache this part).
pub fn render_without_age(s: &Snapshot) -> String {
    to_exposition_without_age(s).render()
}

/// The `tf_iaware_reading_age_seconds` family (s) for a reading `age_ms` (ms) old.
pub fn render_age(age_ms: u64) -> String {
    let mut s = Snapshot::empty("");
    s.age_ms = age_ms;
    let mut page = Exposition::new();
    add(&mut page, &AGE, &s);
    page.render()
}

/// Every field of a snapshot as metric families (the reading's age last).
pub fn to_exposition(s: &Snapshot) -> Exposition {
    let mut page = to_exposition_without_age(s);
    add(&mut page, &AGE, s);
    page
}

fn to_exposition_without_age(s: &Snapshot) -> Exposition {
    let mut page = Exposition::new();
    for series in SERIES {
        add(&mut page, series, s);
    }
    page
}

/// Adds the family of `series` for `s` to `page`, unless it has no samples.
fn add(page: &mut Exposition, series: &Series, s: &Snapshot) {
    let mut f = Family::new(series.name, series.kind, series.help);
    series.write(s, &mut f);
    if !f.samples.is_empty() {
        page.add(f);
    }
}

/// A snapshot from a page: ours (every field), or a node_exporter / dcgm-exporter page (what
/// they carry). `source` names the page.
///
/// # Errors
/// [`Error::Exposition`](crate::error::Error::Exposition) for a known series whose value or
/// label cannot be what it claims (a negative byte count, a `cpu` label that is not a number, a
/// malformed CPU list); the reason names the series and the error the line.
pub fn from_exposition(page: &Exposition, source: &str) -> Result<Snapshot> {
    let mut s = Snapshot::empty(source);
    for series in SERIES.iter().chain([&AGE]) {
        series.read(page, &mut s)?;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::snapshot::CpuModeSeconds;
    use crate::monitor::snapshot::{
        CgroupSnapshot, CoreSnapshot, CpuSnapshot, DeviceAvailability, DeviceKind, GpuSnapshot,
        LoadAverage, MemorySnapshot, NetworkInterface, Smoothed,
    };

    fn sm(x: f64) -> Smoothed {
        Smoothed {
            last: x,
            ewma: x * 0.9,
            mean: x * 0.8,
            min: x * 0.5,
            max: x * 1.5,
        }
    }

    /// A snapshot with every field set to an awkward value.
    pub(crate) fn full_snapshot() -> Snapshot {
        Snapshot {
            source: "local".into(),
            host: "worker \"3\"\\x".into(),
            pid: Some(4242),
            taken_unix_ms: 1_700_000_000_123,
            age_ms: 0,
            interval_ms: Some(1003),
            samples: 77,
            ewma_tau_s: 10.0,
            window_s: 60.0,
            stale: false,
            stale_reason: None,
            cpu: full_cpu(),
            memory: MemorySnapshot {
                total_bytes: Some(25_157_943_296),
                available_bytes: Some(22_897_917_952),
                free_bytes: Some(19_183_759_360),
                available_to_us_bytes: Some(1_000_000_001),
            },
            cgroup: Some(full_cgroup()),
            cgroup_unavailable: None,
            network: full_network(),
            gpus: vec![full_gpu()],
            gpus_unavailable: None,
            devices: full_devices(),
            notes: vec!["/proc/net/dev: \"weird\"\nnote".into()],
        }
    }

    /// [`full_snapshot`]'s CPUs.
    fn full_cpu() -> CpuSnapshot {
        let secs = |b: f64| CpuModeSeconds {
            user: b + 0.01,
            nice: b + 0.02,
            system: b + 0.03,
            idle: b + 0.04,
            iowait: Some(b + 0.05),
            irq: Some(0.0),
            softirq: Some(b + 0.07),
            steal: Some(b + 0.08),
            guest: Some(b + 0.09),
            guest_nice: Some(0.1),
        };
        CpuSnapshot {
            logical_cores: 2,
            utilisation: Some(sm(0.3)),
            cores: vec![
                CoreSnapshot {
                    cpu: 0,
                    utilisation: Some(sm(0.1)),
                    seconds: secs(100.0),
                },
                CoreSnapshot {
                    cpu: 3,
                    utilisation: Some(sm(0.7)),
                    seconds: secs(200.0),
                },
            ],
            seconds: Some(secs(300.5)),
            allowed_cpus: Some(vec![0, 3]),
            own_cores: Some(sm(0.25)),
            own_seconds_total: Some(12.34),
            cotenant_cores: Some(sm(0.35)),
            limit_cores: 1.5,
            available_cores: Some(sm(1.15)),
            load: Some(LoadAverage {
                one: 0.52,
                five: 0.58,
                fifteen: 0.59,
            }),
            runnable_tasks: Some(sm(3.5)),
            own_runnable_tasks: Some(sm(1.5)),
            pressure_some_ratio: Some(sm(0.25)),
        }
    }

    /// [`full_snapshot`]'s cgroup.
    fn full_cgroup() -> CgroupSnapshot {
        CgroupSnapshot {
            version: 1,
            path: "/tf-iaware/worker,1".into(),
            cpu_quota_cores: Some(1.5),
            cpu_allotment_cores: Some(2.0),
            cpu_usage_seconds_total: Some(99.125),
            cpu_usage_cores: Some(sm(1.2)),
            periods_total: Some(1000),
            throttled_periods_total: Some(17),
            throttled_seconds_total: Some(3.25),
            cpu_pressure_some_ratio: Some(sm(0.125)),
            others_runnable_tasks: Some(sm(2.5)),
            memory_limit_bytes: Some(2_147_483_648),
            memory_usage_bytes: Some(1_147_483_648),
            memory_working_set_bytes: Some(1_047_483_648),
        }
    }

    /// [`full_snapshot`]'s network interfaces.
    fn full_network() -> Vec<NetworkInterface> {
        vec![
            NetworkInterface {
                name: "eth0".into(),
                rx_bytes_total: 881_312_873,
                tx_bytes_total: 15_718_346,
                rx_bytes_per_sec: Some(1234.5),
                tx_bytes_per_sec: Some(0.0),
            },
            NetworkInterface {
                name: "lo".into(),
                rx_bytes_total: 1,
                tx_bytes_total: 1,
                rx_bytes_per_sec: None,
                tx_bytes_per_sec: None,
            },
        ]
    }

    /// [`full_snapshot`]'s GPU.
    fn full_gpu() -> GpuSnapshot {
        GpuSnapshot {
            index: 0,
            uuid: "GPU-3a5b7c9d-1e2f-4a6b-8c0d-2e4f6a8b0c1d".into(),
            name: "NVIDIA A100-SXM4-40GB".into(),
            minor_number: Some(0),
            pci_bus_id: Some("00000000:07:00.0".into()),
            utilisation_percent: Some(sm(87.0)),
            memory_utilisation_percent: Some(41.0),
            own_utilisation_percent: Some(62.0),
            memory_total_bytes: Some(42_949_672_960),
            memory_used_bytes: Some(31_675_383_809),
            memory_free_bytes: Some(11_274_289_151),
            sm_clock_mhz: Some(1410.0),
            sm_clock_max_mhz: Some(1410.0),
            power_watts: Some(312.547),
            power_limit_watts: Some(400.0),
            temperature_celsius: Some(61.0),
            pcie_tx_bytes_per_sec: Some(18_874_368.0),
            pcie_rx_bytes_per_sec: Some(1_073_741_824.0),
            compute_processes: Some(2),
            unsupported: vec!["power_limit: Not Supported".into()],
        }
    }

    /// [`full_snapshot`]'s devices.
    fn full_devices() -> Vec<DeviceAvailability> {
        vec![
            DeviceAvailability {
                device: "CPU:0".into(),
                kind: DeviceKind::Cpu,
                capacity: 2.0,
                compute_share: sm(0.575),
                free_memory_bytes: Some(1_000_000_001),
                age_ms: 0,
            },
            DeviceAvailability {
                device: "GPU:0".into(),
                kind: DeviceKind::Gpu,
                capacity: 1.0,
                compute_share: sm(0.75),
                free_memory_bytes: Some(11_274_289_151),
                age_ms: 0,
            },
        ]
    }

    /// [`full_snapshot`] with about half of its optional readings missing, to take the branches
    /// that neither a full nor an empty snapshot takes.
    fn patchy_snapshot() -> Snapshot {
        let mut s = full_snapshot();
        s.pid = None;
        s.interval_ms = None;
        s.cpu.cores[0].utilisation = None;
        let c1 = &mut s.cpu.cores[1].seconds;
        (c1.iowait, c1.steal, c1.guest) = (None, None, None);
        if let Some(total) = &mut s.cpu.seconds {
            (total.irq, total.guest_nice) = (None, None);
        }
        s.cpu.allowed_cpus = Some(vec![0, 1, 2, 5, 7, 8, 9]);
        s.cpu.own_cores = None;
        s.cpu.own_seconds_total = None;
        s.cpu.load = None;
        s.cpu.pressure_some_ratio = None;
        s.memory.free_bytes = None;
        s.cgroup = Some(CgroupSnapshot {
            version: 2,
            path: "/".into(),
            cpu_allotment_cores: Some(0.5),
            throttled_seconds_total: Some(0.0),
            memory_working_set_bytes: Some(4096),
            ..Default::default()
        });
        s.cgroup_unavailable = Some("memory controller: not mounted".into());
        s.network[0].tx_bytes_per_sec = None;
        s.gpus.push(GpuSnapshot {
            index: 2,
            uuid: "GPU-2".into(),
            name: "Tesla T4".into(),
            memory_free_bytes: Some(3 * 1024 * 1024),
            temperature_celsius: Some(-1.5),
            unsupported: vec!["pcie: Not Supported".into(), "clocks: Unknown".into()],
            ..Default::default()
        });
        s.devices[1].free_memory_bytes = None;
        s.notes.push("/proc/loadavg: gone".into());
        s
    }

    /// No readings, and why: no cgroup, no GPUs.
    fn sparse_snapshot() -> Snapshot {
        let mut s = Snapshot::empty("local");
        s.host = "h".into();
        s.cgroup_unavailable = Some("no cgroup: /proc/self/cgroup: gone".into());
        s.gpus_unavailable = Some("GPU metrics unavailable: libnvidia-ml.so.1 missing".into());
        s
    }

    /// Pages the writer must keep producing byte for byte (the version label is a placeholder).
    /// After a deliberate change to the page, `TF_IAWARE_BLESS=1 cargo test -p tf-iaware --lib
    /// monitor::metrics` rewrites the fixtures; review their diff.
    #[test]
    fn pages_match_their_fixtures() {
        let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
        let mut full = full_snapshot();
        full.set_age_ms(1500);
        for (s, name, expected) in [
            (
                full,
                "full_snapshot.prom",
                include_str!("../../tests/fixtures/monitor/full_snapshot.prom"),
            ),
            (
                patchy_snapshot(),
                "patchy_snapshot.prom",
                include_str!("../../tests/fixtures/monitor/patchy_snapshot.prom"),
            ),
            (
                sparse_snapshot(),
                "sparse_snapshot.prom",
                include_str!("../../tests/fixtures/monitor/sparse_snapshot.prom"),
            ),
        ] {
            let page = render(&s).replace(&version, "version=\"@VERSION@\"");
            if std::env::var_os("TF_IAWARE_BLESS").is_some() {
                let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/fixtures/monitor")
                    .join(name);
                std::fs::write(&path, &page).unwrap();
                continue;
            }
            if page != expected {
                let line = page
                    .lines()
                    .zip(expected.lines())
                    .position(|(a, b)| a != b)
                    .map_or(page.lines().count().min(expected.lines().count()), |i| i);
                panic!(
                    "{name}: the page differs from line {}:\n  got:      {:?}\n  expected: {:?}",
                    line + 1,
                    page.lines().nth(line),
                    expected.lines().nth(line),
                );
            }
        }
    }

    #[test]
    fn round_trip_of_a_patchy_snapshot() {
        let s = patchy_snapshot();
        let text = render(&s);
        let back = from_exposition(&Exposition::parse(&text).unwrap(), "local").unwrap();
        assert_eq!(back, s, "\n{text}");
    }

    /// The table and the fixtures cover each other: every series but one is on a fixture page,
    /// and that one (read, never written) is on the node_exporter page.
    #[test]
    fn the_table_and_the_fixture_pages_cover_each_other() {
        let mut page = to_exposition(&full_snapshot());
        for s in [patchy_snapshot(), sparse_snapshot()] {
            for f in to_exposition(&s).families() {
                if page.family(&f.name).is_none() {
                    page.add(f.clone());
                }
            }
        }
        let mut names: Vec<&str> = SERIES.iter().chain([&AGE]).map(|r| r.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            SERIES.len() + 1,
            "a name is in the table twice"
        );
        let unwritten: Vec<&str> = SERIES
            .iter()
            .map(|r| r.name)
            .filter(|name| page.family(name).is_none())
            .collect();
        assert_eq!(unwritten.len(), 1, "{unwritten:?}");
        let node = Exposition::parse(include_str!(
            "../../tests/fixtures/monitor/node_exporter.prom"
        ))
        .unwrap();
        assert!(node.family(unwritten[0]).is_some(), "{unwritten:?}");
        for f in page.families() {
            assert!(
                names.contains(&f.name.as_str()),
                "{} is not in the table",
                f.name
            );
        }
    }

    #[test]
    fn an_older_agents_page_without_the_thread_counts_still_parses() {
        // An agent of a version before `tf_iaware_own_runnable_tasks` and
        // `tf_iaware_cgroup_others_runnable_tasks`: the same page less them.
        let s = full_snapshot();
        let newer = [
            "tf_iaware_own_runnable_tasks",
            "tf_iaware_cgroup_others_runnable_tasks",
        ];
        let old: String = render(&s)
            .lines()
            .filter(|l| !newer.iter().any(|n| l.contains(n)))
            .map(|l| format!("{l}\n"))
            .collect();
        let back = from_exposition(&Exposition::parse(&old).unwrap(), "local").unwrap();
        assert_eq!(back.cpu.own_runnable_tasks, None);
        let expected = Snapshot {
            cpu: CpuSnapshot {
                own_runnable_tasks: None,
                ..s.cpu.clone()
            },
            cgroup: s.cgroup.clone().map(|c| CgroupSnapshot {
                others_runnable_tasks: None,
                ..c
            }),
            ..s
        };
        assert_eq!(back, expected);
        // And a JSON snapshot of that version.
        let mut json = serde_json::to_value(&expected).unwrap();
        json["cpu"]
            .as_object_mut()
            .unwrap()
            .remove("own_runnable_tasks");
        json["cgroup"]
            .as_object_mut()
            .unwrap()
            .remove("others_runnable_tasks");
        let back: Snapshot = serde_json::from_value(json).unwrap();
        assert_eq!(back, expected);
    }

    #[test]
    fn round_trip_is_exact() {
        let s = full_snapshot();
        let text = render(&s);
        let back = from_exposition(&Exposition::parse(&text).unwrap(), "local").unwrap();
        assert_eq!(back, s, "\n{text}");
    }

    #[test]
    fn render_parts_make_the_page() {
        let mut s = full_snapshot();
        s.age_ms = 1500;
        assert_eq!(render(&s), render_without_age(&s) + &render_age(1500));
        assert_eq!(render(&s), to_exposition(&s).render());
        let back = from_exposition(&Exposition::parse(&render(&s)).unwrap(), "x").unwrap();
        assert_eq!(back.age_ms, 1500);
        assert_eq!(back.devices[0].age_ms, 1500);
    }

    #[test]
    fn round_trip_of_a_sparse_snapshot() {
        let mut s = Snapshot::empty("local");
        s.host = "h".into();
        s.cgroup_unavailable = Some("no cgroup: /proc/self/cgroup: gone".into());
        s.gpus_unavailable = Some("GPU metrics unavailable: libnvidia-ml.so.1 missing".into());
        s.cpu.limit_cores = 0.0;
        let text = render(&s);
        let back = from_exposition(&Exposition::parse(&text).unwrap(), "local").unwrap();
        assert_eq!(back, s, "\n{text}");
    }

    #[test]
    fn page_has_help_type_and_dcgm_units() {
        let text = render(&full_snapshot());
        assert!(text.contains("# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.\n# TYPE node_cpu_seconds_total counter\n"));
        assert!(text.contains("node_cpu_seconds_total{cpu=\"3\",mode=\"user\"} 200.01\n"));
        assert!(text.contains("tf_iaware_cpu_limit_cores 1.5\n"));
        assert!(text.contains("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-3a5b7c9d-1e2f-4a6b-8c0d-2e4f6a8b0c1d\",pci_bus_id=\"00000000:07:00.0\",device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-40GB\""));
        assert!(text.contains("DCGM_FI_DEV_FB_TOTAL{") && text.contains("} 40960\n"));
        assert!(text
            .contains("tf_iaware_device_available_share{device=\"GPU:0\",stat=\"last\"} 0.75\n"));
        assert!(text.contains("tf_iaware_cgroup_throttled_periods_total 17\n"));
        for line in text.lines().filter(|l| l.starts_with("# TYPE")) {
            let name = line.split(' ').nth(2).unwrap();
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "no HELP for {name}"
            );
        }
    }

    #[test]
    fn node_exporter_and_dcgm_pages() {
        let mut page = Exposition::parse(include_str!(
            "../../tests/fixtures/monitor/node_exporter.prom"
        ))
        .unwrap();
        page.merge(
            Exposition::parse(include_str!(
                "../../tests/fixtures/monitor/dcgm_exporter.prom"
            ))
            .unwrap(),
        )
        .unwrap();
        let s = from_exposition(&page, "worker-3").unwrap();
        assert_eq!(s.host, "worker-3");
        assert_eq!(s.cpu.logical_cores, 2);
        assert_eq!(s.cpu.cores[1].seconds.user, 4108.36);
        assert_eq!(s.cpu.cores[1].seconds.steal, Some(11.94));
        let total = s.cpu.seconds.unwrap();
        assert!((total.idle - (183401.55 + 183779.02)).abs() < 1e-6);
        assert_eq!(s.cpu.limit_cores, 2.0);
        assert_eq!(
            s.cpu.utilisation, None,
            "one scrape gives counters, not rates"
        );
        assert_eq!(s.memory.available_bytes, Some(22_897_917_952));
        assert_eq!(s.cpu.load.unwrap().five, 0.58);
        assert_eq!(s.network.len(), 2);
        assert_eq!(s.network[0].rx_bytes_total, 881_312_873);
        assert_eq!(s.gpus.len(), 2);
        let g = &s.gpus[1];
        assert_eq!(g.uuid, "GPU-9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a");
        assert_eq!(g.minor_number, Some(1));
        assert_eq!(g.memory_free_bytes, Some(10752 * 1024 * 1024));
        assert_eq!(g.power_watts, Some(312.547));
        assert_eq!(g.utilisation_percent.unwrap().last, 87.0);
        assert!(s.devices.is_empty());
    }

    /// Cores, interfaces and GPUs come out in key order, devices in the order the page names
    /// them, however the page orders its samples.
    #[test]
    fn members_come_out_in_key_order_and_devices_in_page_order() {
        let mut text = String::new();
        for i in (0..3000).rev() {
            text.push_str(&format!(
                "node_cpu_seconds_total{{cpu=\"{i}\",mode=\"idle\"}} {i}\n"
            ));
        }
        for dev in ["lo", "eth1", "eth0"] {
            text.push_str(&format!(
                "node_network_receive_bytes_total{{device=\"{dev}\"}} 1\n"
            ));
        }
        for gpu in [3, 1, 2] {
            text.push_str(&format!("DCGM_FI_DEV_GPU_TEMP{{gpu=\"{gpu}\"}} 40\n"));
        }
        for dev in ["GPU:1", "CPU:0", "GPU:0"] {
            text.push_str(&format!(
                "tf_iaware_device_available_share{{device=\"{dev}\"}} 1\n"
            ));
        }
        let s = from_exposition(&Exposition::parse(&text).unwrap(), "x").unwrap();
        assert_eq!(s.cpu.cores.len(), 3000);
        assert!(s
            .cpu
            .cores
            .iter()
            .enumerate()
            .all(|(i, c)| c.cpu == i as u32 && c.seconds.idle == i as f64));
        assert_eq!(s.cpu.logical_cores, 3000);
        let names: Vec<&str> = s.network.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["eth0", "eth1", "lo"]);
        let gpus: Vec<u32> = s.gpus.iter().map(|g| g.index).collect();
        assert_eq!(gpus, [1, 2, 3]);
        let devices: Vec<&str> = s.devices.iter().map(|d| d.device.as_str()).collect();
        assert_eq!(devices, ["GPU:1", "CPU:0", "GPU:0"]);
        assert_eq!(s.devices[1].kind, DeviceKind::Cpu);
        assert_eq!(s.devices[1].capacity, 1.0);
    }

    #[test]
    fn impossible_values_are_errors() {
        for (text, needle) in [
            ("node_memory_MemTotal_bytes -1\n", "not a count"),
            (
                "node_cpu_seconds_total{cpu=\"x\",mode=\"user\"} 1\n",
                "not a number",
            ),
            ("DCGM_FI_DEV_FB_FREE{gpu=\"0\"} NaN\n", "not a count"),
            (
                "tf_iaware_cpu_allowed_cores{cpus=\"0-x\"} 1\n",
                "CPU number",
            ),
        ] {
            let page = Exposition::parse(text).unwrap();
            let err = from_exposition(&page, "x").unwrap_err().to_string();
            assert!(err.contains(needle) && err.contains("line 1"), "{err}");
        }
    }
}
