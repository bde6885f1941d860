//! [`MetricsFeed`]: reads live metrics for a cluster and writes them onto its devices (see
//! [`live`](super::live) for the model and the mapping).
//!
//! * `local`, `local:cpu=N`: an in-process [`Monitor`] (this process's CPU, cgroup, GPUs).
//! * TF_CONFIG clusters: each task's metrics agent, at the address TF_CONFIG's `"metrics"` key
//!   gives for it (`{"metrics": {"worker": ["host:port", …], "ps": […]}}`, task order). A task
//!   without one is read at its host on [`LiveOptions::fallback_port`] (default 9100 — where
//!   `tf-iaware agent` and node_exporter listen by default); several tasks on one host then share
//!   that host's reading. Plain node_exporter / dcgm-exporter pages work too (they need two
//!   scrapes for rates; the first refresh takes them). All agents are read concurrently, each
//!   within [`LiveOptions::timeout`].
//!
//! A task whose agent is unreachable, answers garbage, or serves an old reading gets a
//! [`LiveWarning`] naming it; its devices keep their last known (or nominal) figures and are
//! marked so ([`LiveSource::Stale`] / [`LiveSource::Nominal`] with a warning).

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use super::model::Cluster;
use super::tf_config::{TaskId, TfConfig};
use super::{live, LiveSource};
use crate::cluster::monitor::plausible::implausible_readings;
use crate::cluster::monitor::snapshot::unix_now_ms;
use crate::cluster::monitor::{
    Monitor, MonitorConfig, ScrapeOptions, ScrapeReport, Scraper, Snapshot, Target,
};
use crate::error::Result;

/// Port a task's metrics are read on when TF_CONFIG has no `"metrics"` entry for it.
pub(crate) const FALLBACK_METRICS_PORT: u16 = 9100;

/// How a [`MetricsFeed`] reads.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveOptions {
    /// Read live metrics at all (`false`: every device stays nominal).
    pub enabled: bool,
    /// Deadline per agent page, connect to last byte (default 1 s).
    pub timeout: Duration,
    /// A reading older than this is stale (default 5 s).
    pub max_age: Duration,
    /// How long the first refresh waits for a task's first usable reading (an agent that is
    /// starting refuses at first and has a reading after two samples; an exporter after two
    /// scrapes), default 2.5 s. An agent that stays unreachable costs this once.
    pub first_reading_wait: Duration,
    /// Port tried on a task's host when TF_CONFIG names no agent for it (`None`: no fallback;
    /// default `FALLBACK_METRICS_PORT`).
    pub fallback_port: Option<u16>,
    /// Sampling interval of the in-process sampler (default 250 ms).
    pub local_interval: Duration,
}

impl Default for LiveOptions {
    fn default() -> Self {
        LiveOptions {
            enabled: true,
            timeout: Duration::from_secs(1),
            max_age: Duration::from_secs(5),
            first_reading_wait: Duration::from_millis(2500),
            fallback_port: Some(FALLBACK_METRICS_PORT),
            local_interval: Duration::from_millis(250),
        }
    }
}

/// A task whose live metrics could not be read: its devices keep their last known figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveWarning {
    /// `job:index` of the task (`local` for an in-process cluster).
    pub task: String,
    /// Where it was read from.
    pub endpoint: String,
    /// What went wrong.
    pub reason: String,
}

impl fmt::Display for LiveWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "live metrics of task {} ({}) unavailable: {}; its devices keep their last known figures",
            self.task, self.endpoint, self.reason
        )
    }
}

/// One agent endpoint and the tasks it describes.
#[derive(Debug)]
struct Endpoint {
    address: String,
    tasks: Vec<TaskId>,
    /// From TF_CONFIG's "metrics" key (`false`: the fallback port).
    declared: bool,
}

enum Kind {
    Off,
    Local {
        monitor: Monitor,
        cpu_model: Option<String>,
    },
    Remote {
        scraper: Scraper,
        endpoints: Vec<Endpoint>,
        /// Tasks with no agent to read (no "metrics" entry, no fallback).
        unread: Vec<TaskId>,
        /// A reading older than this is stale.
        max_age: Duration,
    },
}

/// Reads a cluster's live metrics, again on every [`MetricsFeed::refresh`].
pub struct MetricsFeed {
    kind: Kind,
    options: LiveOptions,
    refreshes: u64,
    /// Latest snapshot per task label (`local`, `worker:1`, …).
    latest: BTreeMap<String, Snapshot>,
}

impl fmt::Debug for MetricsFeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Off => "off".to_string(),
            Kind::Local { .. } => "local-sampler".to_string(),
            Kind::Remote { endpoints, .. } => format!(
                "agents [{}]",
                endpoints
                    .iter()
                    .map(|e| e.address.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        f.debug_struct("MetricsFeed")
            .field("kind", &kind)
            .field("refreshes", &self.refreshes)
            .finish()
    }
}

/// `model name` of the first CPU in `/proc/cpuinfo`, if readable.
pub(crate) fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .filter(|m| !m.is_empty())
}

fn label(t: &TaskId) -> String {
    format!("{}:{}", t.job, t.index)
}

/// Host part of `host:port` (`[v6]:port` keeps its brackets).
fn host_of(address: &str) -> &str {
    if address.starts_with('[') {
        if let Some(end) = address.find(']') {
            return &address[..=end];
        }
    }
    address.rsplit_once(':').map_or(address, |(h, _)| h)
}

impl MetricsFeed {
    /// A feed that reads nothing (every device stays nominal).
    pub(crate) fn off() -> Self {
        MetricsFeed {
            kind: Kind::Off,
            options: LiveOptions {
                enabled: false,
                ..LiveOptions::default()
            },
            refreshes: 0,
            latest: BTreeMap::new(),
        }
    }

    /// An in-process sampler of this process (its CPU share, cgroup, GPUs).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a zero interval;
    /// [`Error::MonitorThread`](crate::Error::MonitorThread) if the sampler cannot start.
    pub(crate) fn local(options: &LiveOptions) -> Result<Self> {
        if !options.enabled {
            return Ok(Self::off());
        }
        let monitor = Monitor::start(MonitorConfig {
            interval: options.local_interval,
            source: "local-sampler".into(),
            ..MonitorConfig::default()
        })?;
        Ok(MetricsFeed {
            kind: Kind::Local {
                monitor,
                cpu_model: cpu_model(),
            },
            options: options.clone(),
            refreshes: 0,
            latest: BTreeMap::new(),
        })
    }

    /// A feed of every task's agent in `tf_config` (see the module docs for the fallback).
    ///
    /// # Errors
    /// [`Error::Scrape`](crate::Error::Scrape) for a metrics address that is not
    /// `host:port`; [`Error::MonitorThread`](crate::Error::MonitorThread) if the scraper's
    /// runtime cannot start.
    pub(crate) fn tf_config(tf_config: &TfConfig, options: &LiveOptions) -> Result<Self> {
        if !options.enabled {
            return Ok(Self::off());
        }
        match Self::remote(tf_config, options) {
            // No scraper in this build: the devices stay nominal, as with an agent that does not
            // answer, and the log says why.
            #[cfg(not(feature = "scrape"))]
            Err(e @ crate::Error::NotCompiled { feature, .. })
                if feature == crate::cluster::monitor::scrape::FEATURE =>
            {
                log::warn!("live metrics of TF_CONFIG tasks: {e}");
                Ok(Self::off())
            }
            other => other,
        }
    }

    fn remote(tf_config: &TfConfig, options: &LiveOptions) -> Result<Self> {
        let mut endpoints: Vec<Endpoint> = Vec::new();
        let mut unread = Vec::new();
        for task in tf_config.tasks() {
            let (address, declared) = match tf_config.metrics_address(&task) {
                Some(a) => (a.to_string(), true),
                None => match (options.fallback_port, tf_config.address(&task)) {
                    (Some(port), Some(addr)) => (format!("{}:{port}", host_of(addr)), false),
                    _ => {
                        unread.push(task);
                        continue;
                    }
                },
            };
            match endpoints.iter_mut().find(|e| e.address == address) {
                Some(e) => e.tasks.push(task),
                None => endpoints.push(Endpoint {
                    address,
                    tasks: vec![task],
                    declared,
                }),
            }
        }
        let targets = endpoints.iter().map(|e| Target::new(&e.address)).collect();
        let scraper = Scraper::new(
            targets,
            ScrapeOptions {
                timeout: options.timeout,
                max_age: options.max_age,
                ..ScrapeOptions::default()
            },
        )?;
        Ok(MetricsFeed {
            kind: Kind::Remote {
                scraper,
                endpoints,
                unread,
                max_age: options.max_age,
            },
            options: options.clone(),
            refreshes: 0,
            latest: BTreeMap::new(),
        })
    }

    /// Latest snapshot per task (`local`, or `job:index`), as last refreshed.
    pub fn latest(&self) -> &BTreeMap<String, Snapshot> {
        &self.latest
    }

    /// Reads the metrics now and writes them onto `cluster`'s devices; returns one warning per
    /// task that could not be read (also logged). The first refresh waits up to
    /// [`LiveOptions::first_reading_wait`] for a first usable reading.
    pub fn refresh(&mut self, cluster: &mut Cluster) -> Vec<LiveWarning> {
        let first = self.refreshes == 0;
        self.refreshes += 1;
        let wait = first.then_some(self.options.first_reading_wait);
        let warnings = match &mut self.kind {
            Kind::Off => Vec::new(),
            Kind::Local { monitor, cpu_model } => {
                let s = local_reading(monitor, wait);
                let warnings = apply_local(cluster, &s, cpu_model.as_deref());
                self.latest.insert("local".into(), s);
                warnings
            }
            Kind::Remote {
                scraper,
                endpoints,
                unread,
                max_age,
            } => {
                let reports = scrape_until_ready(scraper, wait);
                let now = unix_now_ms();
                let mut warnings = Vec::new();
                for (e, r) in endpoints.iter().zip(reports) {
                    let problem = endpoint_problem(e, &r, *max_age, now);
                    warnings.extend(apply_endpoint(cluster, e, &r.snapshot, problem, now));
                    for t in &e.tasks {
                        self.latest.insert(label(t), r.snapshot.clone());
                    }
                }
                warnings.extend(unread.iter().map(|t| mark_unread(cluster, t, now)));
                warnings
            }
        };
        for w in &warnings {
            log::warn!("{w}");
        }
        warnings
    }
}

/// The in-process monitor's snapshot; with `wait`, after up to that long for two samples.
fn local_reading(monitor: &Monitor, wait: Option<Duration>) -> Snapshot {
    if let Some(wait) = wait {
        monitor.wait_for_samples(2, wait);
    }
    monitor.snapshot()
}

/// Writes the in-process snapshot `s` onto `cluster`'s devices (the GPUs this process sees); a
/// warning, with the devices marked stale, when the sampler has no reading yet.
fn apply_local(cluster: &mut Cluster, s: &Snapshot, cpu_model: Option<&str>) -> Vec<LiveWarning> {
    let now = unix_now_ms();
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let applied = live::apply_snapshot(
        cluster,
        None,
        s,
        &LiveSource::LocalSampler,
        cpu_model,
        visible.as_deref(),
        now,
    );
    if applied == 0 {
        let w = LiveWarning {
            task: "local".into(),
            endpoint: "local-sampler".into(),
            reason: "the sampler has no reading yet".into(),
        };
        live::mark_stale(cluster, None, &w.to_string(), now);
        vec![w]
    } else {
        Vec::new()
    }
}

/// Every endpoint's report; with `wait`, scraped again until every endpoint has an availability
/// reading or that long has passed.
fn scrape_until_ready(scraper: &mut Scraper, wait: Option<Duration>) -> Vec<ScrapeReport> {
    let first = wait.is_some();
    let deadline = Instant::now() + wait.unwrap_or(Duration::ZERO);
    let mut reports = scraper.scrape();
    // An agent that is still starting (refuses, or has one sample), or an exporter
    // read once, has no availability yet: read again until every endpoint has one
    // or the wait is over.
    while first
        && Instant::now() < deadline
        && reports
            .iter()
            .any(|r| r.error.is_some() || live::cpu_figures(&r.snapshot, None).is_none())
    {
        std::thread::sleep(Duration::from_millis(300));
        reports = scraper.scrape();
    }
    reports
}

/// Why endpoint `e`'s report `r` cannot be used at `now` (unix ms), if it cannot: an error, a
/// stale or implausible reading, or no CPU availability yet.
fn endpoint_problem(e: &Endpoint, r: &ScrapeReport, max_age: Duration, now: u64) -> Option<String> {
    if let Some(err) = &r.error {
        return Some(if e.declared {
            err.to_string()
        } else {
            format!(
                "TF_CONFIG names no \"metrics\" agent for it and the fallback {} failed: {err}",
                e.address
            )
        });
    }
    if r.snapshot.stale {
        return Some(
            r.snapshot
                .stale_reason
                .clone()
                .unwrap_or_else(|| "the reading is stale".into()),
        );
    }
    let max_age_ms = u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX);
    let bad = implausible_readings(&r.snapshot, now, max_age_ms);
    if !bad.is_empty() {
        return Some(format!("reading not used: {}", bad.join("; ")));
    }
    if live::cpu_figures(&r.snapshot, None).is_none() {
        return Some("the agent has no CPU availability reading yet".into());
    }
    None
}

/// Writes endpoint `e`'s snapshot onto the devices of each of its tasks, or, with a `problem`,
/// marks them stale and returns one warning per task.
fn apply_endpoint(
    cluster: &mut Cluster,
    e: &Endpoint,
    snapshot: &Snapshot,
    problem: Option<String>,
    now: u64,
) -> Vec<LiveWarning> {
    let source = LiveSource::Agent(e.address.clone());
    let mut warnings = Vec::new();
    for t in &e.tasks {
        let filter = Some((t.job.as_str(), t.index as u32));
        match &problem {
            Some(reason) => {
                let w = LiveWarning {
                    task: label(t),
                    endpoint: e.address.clone(),
                    reason: reason.clone(),
                };
                live::mark_stale(cluster, filter, &w.to_string(), now);
                warnings.push(w);
            }
            None => {
                live::apply_snapshot(cluster, filter, snapshot, &source, None, None, now);
            }
        }
    }
    warnings
}

/// Marks the devices of task `t`, which has no agent to read, stale; its warning.
fn mark_unread(cluster: &mut Cluster, t: &TaskId, now: u64) -> LiveWarning {
    let w = LiveWarning {
        task: label(t),
        endpoint: "none".into(),
        reason: "TF_CONFIG names no \"metrics\" agent for it and no fallback port is set".into(),
    };
    live::mark_stale(
        cluster,
        Some((t.job.as_str(), t.index as u32)),
        &w.to_string(),
        now,
    );
    w
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::cluster::monitor::snapshot::{CgroupSnapshot, Smoothed};
    use crate::cluster::monitor::{Agent, AgentConfig, MetricsSource};
    use crate::cluster::Device;

    fn serve(source: Arc<dyn MetricsSource>) -> Agent {
        Agent::serve(
            AgentConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                ..Default::default()
            },
            source,
        )
        .unwrap()
    }

    /// A node_exporter-shaped page whose counters advance by one second per request: CPU 0
    /// half busy, CPU 1 idle.
    struct TickingNodeExporter(AtomicU64);

    impl MetricsSource for TickingNodeExporter {
        fn metrics_page(&self) -> String {
            let n = self.0.fetch_add(1, Ordering::SeqCst) as f64;
            format!(
                "# TYPE node_cpu_seconds_total counter\n\
                 node_cpu_seconds_total{{cpu=\"0\",mode=\"idle\"}} {}\n\
                 node_cpu_seconds_total{{cpu=\"0\",mode=\"user\"}} {}\n\
                 node_cpu_seconds_total{{cpu=\"1\",mode=\"idle\"}} {}\n\
                 node_cpu_seconds_total{{cpu=\"1\",mode=\"user\"}} 5\n\
                 # TYPE node_memory_MemAvailable_bytes gauge\n\
                 node_memory_MemAvailable_bytes 4.294967296e+09\n\
                 # TYPE node_memory_MemTotal_bytes gauge\n\
                 node_memory_MemTotal_bytes 8.589934592e+09\n",
                100.0 + 0.5 * n,
                10.0 + 0.5 * n,
                100.0 + n,
            )
        }
    }

    /// What the project's own agent serves for a worker in a 2-core node cgroup of which a
    /// co-tenant takes 1.5 cores.
    fn agent_snapshot() -> Snapshot {
        let mut s = Snapshot::empty("local");
        s.host = "w0".into();
        s.taken_unix_ms = unix_now_ms();
        s.samples = 5;
        s.cpu.logical_cores = 4;
        s.cpu.limit_cores = 0.5;
        s.cpu.available_cores = Some(Smoothed::constant(0.5));
        s.cgroup = Some(CgroupSnapshot {
            version: 1,
            path: "/node/tf".into(),
            cpu_quota_cores: Some(0.5),
            cpu_allotment_cores: Some(2.0),
            ..CgroupSnapshot::default()
        });
        s.memory.available_to_us_bytes = Some(3 << 30);
        s
    }

    #[test]
    fn agent_and_exporter_pages_map_onto_their_tasks_and_a_dead_one_warns() {
        let ours = serve(Arc::new(agent_snapshot()));
        let exporter = serve(Arc::new(TickingNodeExporter(AtomicU64::new(0))));
        let refused = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let text = format!(
            r#"{{"cluster": {{"worker": ["127.0.0.1:1", "127.0.0.1:2"], "ps": ["127.0.0.1:3"]}},
                "metrics": {{"worker": ["{}", "{}"]}}}}"#,
            ours.local_addr(),
            exporter.local_addr()
        );
        let tf = TfConfig::parse(&text, "test").unwrap();
        let dev = |job: &str, task: u32| {
            Device::nominal(
                &format!("/job:{job}/replica:0/task:{task}/device:CPU:0"),
                "CPU",
                None,
                "h",
            )
        };
        let mut cluster = Cluster::new(vec![dev("worker", 0), dev("worker", 1), dev("ps", 0)]);
        let options = LiveOptions {
            // ps:0 has no "metrics" entry: the fallback port on its host refuses.
            fallback_port: Some(refused),
            ..LiveOptions::default()
        };
        let mut feed = MetricsFeed::tf_config(&tf, &options).unwrap();
        let warnings = feed.refresh(&mut cluster);

        // Our agent: 0.5 of a 2-core allotment free → f = ¼.
        let w0 = &cluster.devices[0];
        assert_eq!(
            w0.live.source,
            LiveSource::Agent(ours.local_addr().to_string())
        );
        assert_eq!(w0.live.allotment, Some(2.0));
        assert_eq!(w0.live.free_fraction, Some(0.25));
        // Its own group is capped at a quarter of the allotment, all of it free.
        assert_eq!(w0.live.hard_share, Some(0.25));
        assert!(
            (w0.availability - 0.25).abs() < 1e-12,
            "{}",
            w0.availability
        );
        assert_eq!(w0.live.free_memory_bytes, Some(3 << 30));
        assert!(w0.live.warning.is_none());
        // The exporter: rates from two scrapes; 0.5 of 2 cores busy → 1.5 free.
        let w1 = &cluster.devices[1];
        assert_eq!(
            w1.live.source,
            LiveSource::Agent(exporter.local_addr().to_string())
        );
        assert_eq!(w1.live.free_fraction, Some(0.75), "{:?}", w1.live);
        // Half a core busy of two and no run queue on the page: TensorFlow's two threads share
        // the two cores with it, 2 / (2 + 0.5) of a core each.
        assert!((w1.availability - 0.8).abs() < 1e-12, "{:?}", w1.live);
        assert_eq!(w1.live.free_memory_bytes, Some(4 << 30));
        // The dead fallback: a warning naming the task, nominal figures, marked.
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(warnings[0].task, "ps:0");
        assert!(
            warnings[0].to_string().contains("\"metrics\""),
            "{}",
            warnings[0]
        );
        let ps = &cluster.devices[2];
        assert_eq!(ps.live.source, LiveSource::Nominal);
        assert_eq!(ps.availability, 1.0);
        assert!(ps.live.warning.as_deref().unwrap().contains("ps:0"));

        // The agent goes away: its task keeps its last figures, marked stale.
        let before = cluster.devices[0].availability;
        ours.stop();
        let warnings = feed.refresh(&mut cluster);
        assert!(
            warnings.iter().any(|w| w.task == "worker:0"),
            "{warnings:?}"
        );
        let w0 = &cluster.devices[0];
        assert_eq!(w0.live.source, LiveSource::Stale);
        assert_eq!(w0.availability, before);
        assert!(w0.live.warning.as_deref().unwrap().contains("worker:0"));
        assert_eq!(feed.latest().len(), 3);
    }

    #[test]
    fn dcgm_pages_map_onto_tensorflow_gpus() {
        let dcgm = serve(Arc::new(crate::cluster::monitor::agent::StaticPage(
            include_str!("../../../tf-iaware-core/tests/fixtures/monitor/dcgm_exporter.prom")
                .to_string(),
        )));
        let mut scraper = Scraper::new(
            vec![Target::new(&dcgm.metrics_url())],
            ScrapeOptions::default(),
        )
        .unwrap();
        let s = scraper.scrape().remove(0).snapshot;
        let gpu = |k: u32| {
            Device::nominal(
                &format!("/job:worker/replica:0/task:3/device:GPU:{k}"),
                "GPU",
                Some(80 << 30),
                "h",
            )
        };
        let mut cluster = Cluster::new(vec![gpu(0), gpu(1)]);
        let src = LiveSource::Agent("dcgm".into());
        let n = live::apply_snapshot(
            &mut cluster,
            Some(("worker", 3)),
            &s,
            &src,
            None,
            None,
            unix_now_ms(),
        );
        assert_eq!(n, 2);
        for (k, d) in cluster.devices.iter().enumerate() {
            let g = live::gpu_for_tf_index(k as u32, &s.gpus, None).unwrap();
            assert_eq!(d.live.free_memory_bytes, g.memory_free_bytes);
            assert!(d.live.hardware.as_deref().unwrap().starts_with("gpu:"));
            assert!(d.availability >= 0.5 && d.availability <= 1.0);
        }
    }
}
