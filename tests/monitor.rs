//! End-to-end tests of the live monitor: real readings respond to real load, a CPU quota set on
//! a real cgroup comes out in cores, agents serve what scrapers read back, NVML where present.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tf_iaware::cluster::monitor::{
    gpu, scrape_many, Agent, AgentConfig, Monitor, MonitorConfig, ScrapeOptions, Scraper, Snapshot,
    Target,
};

/// A child process killed (and reaped) when dropped, even when a test panics.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process that spins on one CPU until killed.
fn busy_process() -> ChildGuard {
    ChildGuard(
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .spawn()
            .expect("sh runs"),
    )
}

/// CPU time of process `pid` so far, s.
fn process_cpu_seconds(pid: u32) -> f64 {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).expect("the child's stat");
    let ticks =
        tf_iaware::cluster::monitor::proc::parse_process_ticks(&text, Path::new(&path)).unwrap();
    ticks as f64 / tf_iaware::cluster::monitor::proc::ticks_per_second() as f64
}

fn fast_monitor(pid: Option<u32>) -> Monitor {
    Monitor::start(MonitorConfig {
        interval: Duration::from_millis(200),
        ewma_tau: Duration::from_secs(1),
        window: Duration::from_secs(2),
        pid,
        gpus: false,
        ..Default::default()
    })
    .expect("the monitor starts")
}

/// Waits for readings covering `span` and returns the latest snapshot.
fn after(monitor: &Monitor, span: Duration) -> Snapshot {
    let n = monitor.samples() + (span.as_millis() / monitor.interval().as_millis()) as u64 + 1;
    assert!(
        monitor.wait_for_samples(n, span * 5),
        "the sampler keeps sampling"
    );
    monitor.snapshot()
}

#[test]
fn busy_threads_raise_own_use_and_utilisation() {
    let monitor = fast_monitor(None);
    let idle = after(&monitor, Duration::from_millis(1000));
    let idle_own = idle.cpu.own_cores.unwrap().mean;

    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    let me = std::process::id();
    let (cpu0, t0) = (process_cpu_seconds(me), Instant::now());
    let loaded = after(&monitor, Duration::from_millis(1400));
    // What the busy threads really got (a loaded machine may give them little).
    let got = (process_cpu_seconds(me) - cpu0) / t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let own = loaded.cpu.own_cores.unwrap();
    let util = loaded.cpu.utilisation.unwrap();
    eprintln!(
        "own {idle_own:.2} → {:.2} cores (window mean), utilisation {:.2}, co-tenants {:.2}",
        own.mean,
        util.mean,
        loaded.cpu.cotenant_cores.unwrap().mean
    );
    eprintln!("the busy threads got {got:.2} cores");
    // The monitor's window (2 s) also covers a little of the idle time before: half of what the
    // threads got is the least it can show.
    assert!(
        own.mean >= idle_own.min(own.mean) + 0.5 * got - 0.1,
        "own use {:.2} follows what the process got ({got:.2} cores)",
        own.mean
    );
    // Our own use is part of the machine's: utilisation covers at least it.
    let cores = f64::from(loaded.cpu.logical_cores);
    assert!(
        util.mean * cores >= own.mean * 0.8,
        "{} vs {}",
        util.mean * cores,
        own.mean
    );
    let cpu = loaded.device("CPU:0").expect("a CPU device");
    assert!((0.0..=1.0).contains(&cpu.compute_share.last));
}

#[test]
fn busy_processes_are_cotenant_load() {
    let monitor = fast_monitor(None);
    let _warm = after(&monitor, Duration::from_millis(400));
    let children = [busy_process(), busy_process()];
    // Let them start spinning, then measure their use over the monitor's window.
    std::thread::sleep(Duration::from_millis(300));
    let before: f64 = children.iter().map(|c| process_cpu_seconds(c.0.id())).sum();
    let t0 = Instant::now();
    let s = after(&monitor, Duration::from_millis(1600));
    let children_cores = (children
        .iter()
        .map(|c| process_cpu_seconds(c.0.id()))
        .sum::<f64>()
        - before)
        / t0.elapsed().as_secs_f64();
    let cotenant = s.cpu.cotenant_cores.unwrap();
    let available = s.cpu.available_cores.unwrap();
    eprintln!(
        "children use {children_cores:.2} cores; co-tenant load {:.2} (mean {:.2}); available {:.2} of {:.2}",
        cotenant.last, cotenant.mean, available.mean, s.cpu.limit_cores
    );
    assert!(
        cotenant.mean >= children_cores * 0.7,
        "co-tenant load ({:.2}) includes the busy children ({children_cores:.2})",
        cotenant.mean
    );
    assert!(available.mean <= s.cpu.limit_cores - children_cores * 0.7 + 0.2);
}

/// A cgroup made for a test, removed (its processes moved back to the root first) when dropped.
struct CgroupGuard {
    dir: PathBuf,
    root: PathBuf,
}

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        if let Ok(pids) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in pids.lines() {
                let _ = std::fs::write(self.root.join("cgroup.procs"), pid);
            }
        }
        for _ in 0..50 {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        eprintln!("could not remove test cgroup {}", self.dir.display());
    }
}

/// Creates a cgroup with a CPU quota of `quota_us`/`period_us` on the v1 cpu controller or the
/// v2 tree; `Err(reason)` where this machine does not allow it.
fn quota_cgroup(name: &str, quota_us: u64, period_us: u64) -> Result<(CgroupGuard, u8), String> {
    let v1 = PathBuf::from("/sys/fs/cgroup/cpu");
    let v2 = PathBuf::from("/sys/fs/cgroup");
    let (root, version) = if v1.join("cpu.cfs_quota_us").exists() {
        (v1, 1)
    } else if std::fs::read_to_string(v2.join("cgroup.controllers"))
        .map(|c| c.split_whitespace().any(|x| x == "cpu"))
        .unwrap_or(false)
    {
        (v2, 2)
    } else {
        return Err("neither a cgroup v1 cpu controller nor a v2 tree with cpu is mounted".into());
    };
    let dir = root.join(name);
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let guard = CgroupGuard {
        dir: dir.clone(),
        root: root.clone(),
    };
    let write = |file: &str, value: String| {
        std::fs::write(dir.join(file), &value)
            .map_err(|e| format!("cannot write {value} to {}/{file}: {e}", dir.display()))
    };
    if version == 1 {
        write("cpu.cfs_period_us", period_us.to_string())?;
        write("cpu.cfs_quota_us", quota_us.to_string())?;
    } else {
        let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu");
        write("cpu.max", format!("{quota_us} {period_us}"))?;
    }
    Ok((guard, version))
}

/// [`quota_cgroup`] with a 100 ms period, or `None` after printing why `test` is skipped (no
/// cgroup the test may create on this machine).
fn quota_cgroup_or_skip(test: &str, name: &str, quota_us: u64) -> Option<(CgroupGuard, u8)> {
    quota_cgroup(name, quota_us, 100_000)
        .map_err(|reason| common::skip_without_cgroups(test, &reason))
        .ok()
}

/// A cgroup name no other test run uses: `prefix`, this process's id and the clock's nanoseconds.
fn unique_cgroup_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{prefix}-{}-{nanos}", std::process::id())
}

#[test]
fn cgroup_quota_is_reported_in_cores() {
    let name = unique_cgroup_name("tf-iaware-test");
    let Some((cgroup, version)) =
        quota_cgroup_or_skip("cgroup_quota_is_reported_in_cores", &name, 50_000)
    else {
        return;
    };
    let child = busy_process();
    let pid = child.0.id();
    if let Err(e) = std::fs::write(cgroup.dir.join("cgroup.procs"), pid.to_string()) {
        common::skip_without_cgroups(
            "cgroup_quota_is_reported_in_cores",
            &format!("cannot move {pid} into the cgroup: {e}"),
        );
        return;
    }
    let monitor = fast_monitor(Some(pid));
    let (cpu0, t0) = (process_cpu_seconds(pid), Instant::now());
    let s = after(&monitor, Duration::from_millis(1200));
    let got = (process_cpu_seconds(pid) - cpu0) / t0.elapsed().as_secs_f64();
    let cg = s.cgroup.as_ref().expect("the child's cgroup is read");
    eprintln!(
        "cgroup v{} {}: quota {:?} cores, limit {} cores, throttled {:?}/{:?} periods, own {:.2} cores, notes {:?}",
        cg.version,
        cg.path,
        cg.cpu_quota_cores,
        s.cpu.limit_cores,
        cg.throttled_periods_total,
        cg.periods_total,
        s.cpu.own_cores.unwrap().mean,
        s.notes
    );
    assert_eq!(cg.version, version);
    assert_eq!(cg.path, format!("/{name}"));
    assert_eq!(cg.cpu_quota_cores, Some(0.5));
    assert_eq!(s.cpu.limit_cores, 0.5);
    assert_eq!(s.pid, Some(pid));
    let available = s.cpu.available_cores.unwrap();
    assert!(available.last <= 0.5 + 1e-9, "{available:?}");
    // Usage of the whole cgroup is known (cpuacct, cpu.stat, or its processes summed).
    assert!(cg.cpu_usage_cores.is_some(), "{:?}", s.notes);
    // The child spins: the quota holds it back — when the machine gives it the whole quota.
    // A child that got less than its quota in every period (0.41 of 0.5 cores on a loaded
    // machine, seen in a full test run) is never throttled.
    if got >= 0.49 {
        assert!(cg.throttled_periods_total.unwrap_or(0) > 0, "{cg:?}");
    } else {
        eprintln!("the child got only {got:.2} cores: too busy a machine to see throttling");
    }
    assert!(
        s.cpu.own_cores.unwrap().mean < 0.7,
        "the quota caps the child near 0.5 cores"
    );
    // The agent publishes the same limit.
    let page = monitor.metrics_page();
    assert!(page.contains("\ntf_iaware_cpu_limit_cores 0.5\n"), "{page}");
    assert!(page.contains("\ntf_iaware_cgroup_cpu_quota_cores 0.5\n"));
    drop(monitor);
    drop(child);
    drop(cgroup);
    assert!(!Path::new("/sys/fs/cgroup/cpu").join(&name).exists());
    assert!(!Path::new("/sys/fs/cgroup").join(&name).exists());
}

#[test]
fn the_runnable_cotenants_in_a_quota_are_counted_and_ours_are_not() {
    let name = unique_cgroup_name("tf-iaware-test-cotenants");
    let Some((cgroup, _)) = quota_cgroup_or_skip(
        "the_runnable_cotenants_in_a_quota_are_counted",
        &name,
        150_000,
    ) else {
        return;
    };
    // The observed process spins too: its own runnable thread is not a co-tenant.
    let children: Vec<ChildGuard> = (0..3).map(|_| busy_process()).collect();
    for c in &children {
        let pid = c.0.id();
        if let Err(e) = std::fs::write(cgroup.dir.join("cgroup.procs"), pid.to_string()) {
            common::skip_without_cgroups(
                "the_runnable_cotenants_in_a_quota_are_counted",
                &format!("cannot move {pid}: {e}"),
            );
            return;
        }
    }
    let monitor = fast_monitor(Some(children[0].0.id()));
    let s = after(&monitor, Duration::from_millis(1200));
    let cg = s.cgroup.as_ref().expect("the child's cgroup is read");
    let others = cg
        .others_runnable_tasks
        .unwrap_or_else(|| panic!("counted: {:?}", s.notes));
    eprintln!("co-tenants runnable: {others:?}");
    // Two spinning co-tenants are runnable at every read, running, waiting or throttled
    // (a throttled task keeps state R); the observed one is never counted.
    assert_eq!((others.min, others.max), (2.0, 2.0), "{others:?}");
    let page = monitor.metrics_page();
    assert!(
        page.contains("\ntf_iaware_cgroup_others_runnable_tasks{stat=\"last\"} 2\n"),
        "{page}"
    );
    drop(monitor);
    drop(children);
    drop(cgroup);
}

#[test]
fn serve_then_scrape_returns_the_same_values() {
    // A long interval: no new reading between serving and comparing.
    let monitor = Arc::new(
        Monitor::start(MonitorConfig {
            interval: Duration::from_secs(600),
            gpus: true,
            ..Default::default()
        })
        .unwrap(),
    );
    let agent = Agent::serve(
        AgentConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Default::default()
        },
        Arc::clone(&monitor) as Arc<dyn tf_iaware::cluster::monitor::MetricsSource>,
    )
    .unwrap();
    let reports = scrape_many(
        &[Target::new(&agent.local_addr().to_string())],
        &ScrapeOptions::default(),
    )
    .unwrap();
    let report = &reports[0];
    assert!(report.error.is_none(), "{:?}", report.error);
    let mut scraped = report.snapshot.clone();
    let local = (*monitor.latest()).clone();
    assert!(!scraped.stale);
    assert!(scraped.age_ms < 5_000);
    scraped.source = local.source.clone();
    scraped.set_age_ms(local.age_ms);
    assert_eq!(scraped, local);
    assert!(!local.cpu.cores.is_empty() && local.cpu.utilisation.is_some());
    assert!(local.gpus.is_empty() == local.gpus_unavailable.is_some());
}

#[test]
fn scraper_marks_a_vanished_agent_stale_and_keeps_others() {
    let monitor = Arc::new(fast_monitor(None));
    let serve = || {
        Agent::serve(
            AgentConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                ..Default::default()
            },
            Arc::clone(&monitor) as Arc<dyn tf_iaware::cluster::monitor::MetricsSource>,
        )
        .unwrap()
    };
    let (a, b) = (serve(), serve());
    let mut scraper = Scraper::new(
        vec![
            Target::new(&a.metrics_url()),
            Target::new(&b.local_addr().to_string()),
        ],
        ScrapeOptions::default(),
    )
    .unwrap();
    let first = scraper.scrape();
    assert!(first.iter().all(|r| r.error.is_none() && !r.snapshot.stale));
    b.stop();
    let second = scraper.scrape();
    assert!(!second[0].snapshot.stale);
    assert!(
        second[1].snapshot.stale,
        "{:?}",
        second[1].snapshot.stale_reason
    );
    assert_eq!(
        second[1].snapshot.host, first[1].snapshot.host,
        "last good reading kept"
    );
}

#[test]
fn nvml_for_real_where_present() {
    let nvml = match gpu::nvml() {
        Ok(n) => n,
        Err(reason) => {
            eprintln!("SKIPPED nvml_for_real_where_present: {reason}");
            return;
        }
    };
    let count = nvml.device_count().unwrap_or(0);
    let mut source = gpu::GpuSource::new();
    let readings = source.read();
    if count == 0 {
        assert!(readings.is_err());
        eprintln!("SKIPPED nvml_for_real_where_present: NVML loads but lists no GPUs");
        return;
    }
    let readings = readings.expect("GPUs are read");
    assert_eq!(readings.len() as u32, count);
    for r in &readings {
        let g = gpu::map_reading(r, Some(std::process::id()));
        eprintln!("{g:?}");
        assert!(
            g.uuid.starts_with("GPU-") || g.uuid.starts_with("MIG-"),
            "{}",
            g.uuid
        );
        assert!(!g.name.is_empty());
        assert!(g.memory_total_bytes.unwrap_or(0) > 0);
        assert!(g
            .utilisation_percent
            .is_none_or(|u| (0.0..=100.0).contains(&u.last)));
    }
    let monitor = Monitor::start(MonitorConfig {
        interval: Duration::from_millis(200),
        ..Default::default()
    })
    .unwrap();
    let s = monitor.snapshot();
    assert_eq!(s.gpus.len() as u32, count);
    assert!(s.device("GPU:0").is_some());
    assert!(monitor
        .metrics_page()
        .contains("DCGM_FI_DEV_FB_FREE{gpu=\"0\""));
}

/// Runs the CLI.
fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tf-iaware"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("the tf-iaware binary runs")
}

#[test]
fn cli_monitor_once_json() {
    let out = cli(&["monitor", "--once", "--json", "--interval-ms", "300"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Snapshot = serde_json::from_slice(&out.stdout).expect("one snapshot as JSON");
    assert!(!s.cpu.cores.is_empty());
    assert!(s.cpu.cores.iter().all(|c| c.utilisation.is_some()));
    assert!(s.memory.total_bytes.is_some());
    assert!(!s.network.is_empty());
    assert!(s.cpu.limit_cores > 0.0);
    assert!(s.cgroup.is_some() || s.cgroup_unavailable.is_some());
    assert!(s.gpus.is_empty() == s.gpus_unavailable.is_some());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["gpus"].is_array());
}

#[test]
fn cli_agent_serves_what_the_scraper_reads() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let listen = format!("127.0.0.1:{port}");
    let mut child = ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_tf-iaware"))
            .args(["agent", "--listen", &listen, "--interval-ms", "200"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the tf-iaware binary runs"),
    );
    // Wait for the "serving" line (or an early exit).
    let stderr = child.0.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains("serving") => break,
            Some(Ok(l)) => seen.push(l),
            _ => panic!("the agent exited: {}", seen.join("\n")),
        }
    }
    let reports = scrape_many(&[Target::new(&listen)], &ScrapeOptions::default()).unwrap();
    assert!(reports[0].error.is_none(), "{:?}", reports[0].error);
    let s = &reports[0].snapshot;
    assert_eq!(s.pid, Some(child.0.id()));
    assert!(s.cpu.utilisation.is_some());
    assert!(s.device("CPU:0").is_some());
}
