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

use super::live::{self, LiveSource};
use super::model::Cluster;
use super::tf_config::{TaskId, TfConfig};
use crate::error::Result;
use crate::monitor::snapshot::unix_now_ms;
use crate::monitor::{Monitor, MonitorConfig, ScrapeOptions, Scraper, Snapshot, Target};

/// Port a task's metrics are read on when TF_CONFIG has no `"metrics"` entry for it.
pub const FALLBACK_METRICS_PORT: u16 = 9100;

/// How a [`MetricsFeed`] reads.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveOptions {
    /// Read live metrics at all (`false`: every device stays nominal).
    pub enabled: bool,
    /// Deadline per agent page, connect to last byte (default 1 s).
    pub timeout: Duration,
    /// A reading older than this is stale (default 5 s).
    pub max_age: Duration,
    /// How long the first refresh waits for a task's first usable reading (an agent that just
    /// started has one after two samples; an exporter after two scrapes), default 2.5 s.
    pub first_reading_wait: Duration,
    /// Port tried on a task's host when TF_CONFIG names no agent for it (`None`: no fallback;
    /// default [`FALLBACK_METRICS_PORT`]).
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
pub fn cpu_model() -> Option<String> {
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
    pub fn off() -> Self {
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
    pub fn local(options: &LiveOptions) -> Result<Self> {
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
    pub fn tf_config(tf_config: &TfConfig, options: &LiveOptions) -> Result<Self> {
        if !options.enabled {
            return Ok(Self::off());
        }
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
        let wait = self.options.first_reading_wait;
        let warnings = match &mut self.kind {
            Kind::Off => Vec::new(),
            Kind::Local { monitor, cpu_model } => {
                if first {
                    monitor.wait_for_samples(2, wait);
                }
                let s = monitor.snapshot();
                let now = unix_now_ms();
                let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
                let applied = live::apply_snapshot(
                    cluster,
                    None,
                    &s,
                    &LiveSource::LocalSampler,
                    cpu_model.as_deref(),
                    visible.as_deref(),
                    now,
                );
                self.latest.insert("local".into(), s);
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
            Kind::Remote {
                scraper,
                endpoints,
                unread,
            } => {
                let deadline = Instant::now() + if first { wait } else { Duration::ZERO };
                let mut reports = scraper.scrape();
                // An agent that has just started, or an exporter read once, has no availability
                // yet: read again until every endpoint has one or the wait is over.
                while first
                    && Instant::now() < deadline
                    && reports.iter().any(|r| {
                        r.error.is_none()
                            && !r.snapshot.stale
                            && live::cpu_figures(&r.snapshot, None).is_none()
                    })
                {
                    std::thread::sleep(Duration::from_millis(300));
                    reports = scraper.scrape();
                }
                let now = unix_now_ms();
                let mut warnings = Vec::new();
                for (e, r) in endpoints.iter().zip(reports) {
                    let source = LiveSource::Agent(e.address.clone());
                    let problem = if let Some(err) = &r.error {
                        Some(if e.declared {
                            err.to_string()
                        } else {
                            format!(
                                "TF_CONFIG names no \"metrics\" agent for it and the fallback {} failed: {err}",
                                e.address
                            )
                        })
                    } else if r.snapshot.stale {
                        Some(
                            r.snapshot
                                .stale_reason
                                .clone()
                                .unwrap_or_else(|| "the reading is stale".into()),
                        )
                    } else if live::cpu_figures(&r.snapshot, None).is_none() {
                        Some("the agent has no CPU availability reading yet".into())
                    } else {
                        None
                    };
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
                                live::apply_snapshot(
                                    cluster,
                                    filter,
                                    &r.snapshot,
                                    &source,
                                    None,
                                    None,
                                    now,
                                );
                            }
                        }
                        self.latest.insert(label(t), r.snapshot.clone());
                    }
                }
                for t in unread.iter() {
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
                    warnings.push(w);
                }
                warnings
            }
        };
        for w in &warnings {
            log::warn!("{w}");
        }
        warnings
    }
}
