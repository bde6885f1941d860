//! From a [`ClusterSpec`] to the devices it offers, with their live figures, and the session
//! configuration that reaches them.

use super::feed::{LiveOptions, LiveWarning, MetricsFeed};
use super::local;
use super::model::Cluster;
use super::tf_config::{TaskId, TfConfig};
use super::ClusterSpec;
use crate::config::SessionConfig;
use crate::error::{Error, Result};
use crate::graph::DeviceType;

/// A connected cluster: its devices with live figures, how to open sessions on it, and the feed
/// that keeps reading its metrics ([`MetricsFeed::refresh`]).
#[derive(Debug)]
pub struct LiveConnection {
    /// The devices; availability, free memory and co-tenant load set from the first reading.
    pub cluster: Cluster,
    /// How to open sessions on the cluster.
    pub config: SessionConfig,
    /// The live metrics of its tasks.
    pub metrics: MetricsFeed,
    /// Tasks whose metrics could not be read on connecting (their devices are marked).
    pub warnings: Vec<LiveWarning>,
    /// Tasks of TF_CONFIG that were not running on connecting (neither the master nor a ps):
    /// left out of the cluster and of every session (`device_filters`).
    pub not_running: Vec<TaskId>,
}

/// Devices of the cluster `spec` names, with live availability, free memory and co-tenant load
/// from one reading of its metrics (see [`connect_live`], which also keeps the feed).
///
/// # Errors
/// As [`connect_live`].
pub fn connect(spec: &ClusterSpec) -> Result<(Cluster, SessionConfig)> {
    let c = connect_live(spec, &LiveOptions::default())?;
    Ok((c.cluster, c.config))
}

/// Devices of the cluster `spec` names, read live: `local`/`local:cpu=N` through an in-process
/// sampler, `tf-config…` through each task's metrics agent (TF_CONFIG's `"metrics"` key, see
/// `feed`); `synthetic:…` is drawn from its spec (no metrics, sessions on it
/// cannot reach its devices). Unreachable agents are warnings, not errors.
///
/// # Errors
/// [`Error::ClusterSpec`] for cluster kinds this build cannot reach; [`Error::TensorFlow`] if
/// TensorFlow cannot list the devices; [`Error::TfConfig`] for a bad TF_CONFIG.
pub fn connect_live(spec: &ClusterSpec, options: &LiveOptions) -> Result<LiveConnection> {
    let config = match spec {
        ClusterSpec::Local => SessionConfig::default(),
        ClusterSpec::LocalCpu(n) => SessionConfig::local_cpus(*n),
        ClusterSpec::TfConfig(path) => {
            let tf_config = match path {
                Some(p) => TfConfig::from_file(p)?,
                None => TfConfig::from_env()?,
            };
            let master = answering_master(&tf_config);
            return connect_tf_config_live(&tf_config, &master, options);
        }
        ClusterSpec::Synthetic(text) => {
            let drawn = super::SyntheticSpec::parse(text)?.build();
            return Ok(LiveConnection {
                cluster: drawn.cluster,
                config: SessionConfig::default(),
                metrics: MetricsFeed::off(),
                warnings: Vec::new(),
                not_running: Vec::new(),
            });
        }
        ClusterSpec::Emulated(_) => {
            return Err(Error::ClusterSpec {
                spec: spec.to_string(),
                reason: "emulated clusters are started with `tf-iaware bench`/`tf_iaware_emulate`, not connected to".into(),
            })
        }
    };
    let mut cluster = local::discover(&config)?;
    let mut metrics = MetricsFeed::local(options)?;
    let warnings = metrics.refresh(&mut cluster);
    Ok(LiveConnection {
        cluster,
        config,
        metrics,
        warnings,
        not_running: Vec::new(),
    })
}

/// Connects to the master task of a TF_CONFIG cluster and lists every device of every task.
/// Devices of one task share its address as `host`; memory of CPU devices is not capped.
///
/// # Errors
/// [`Error::TensorFlow`] if the master cannot be reached or listed.
pub fn connect_tf_config(tf_config: &TfConfig) -> Result<(Cluster, SessionConfig)> {
    connect_tf_config_at(tf_config, &answering_master(tf_config))
}

/// How long one try at a task's gRPC port may take.
const TASK_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1_500);

/// Tries at a task's gRPC port before the task counts as not running: a loaded machine can
/// leave one connection unanswered (a full accept backlog), a stopped process does not refuse.
const TASK_PROBE_TRIES: u32 = 3;

/// Whether something accepts TCP connections at `address` (`host:port`): a refused
/// connection at once, else up to [`TASK_PROBE_TRIES`] tries of [`TASK_PROBE_TIMEOUT`].
fn task_answers(address: &str) -> bool {
    use std::net::ToSocketAddrs;
    let Some(addr) = address.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
        return false;
    };
    for _ in 0..TASK_PROBE_TRIES {
        match std::net::TcpStream::connect_timeout(&addr, TASK_PROBE_TIMEOUT) {
            Ok(_) => return true,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return false,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
        }
    }
    false
}

/// The task a client session should talk to: [`TfConfig::master`] if it answers, else the
/// first task that does in the same order of preference (chief, master, workers, then the
/// rest) — a `chief` entry for a coordinator that is not up does not stop the others being
/// used. [`TfConfig::master`] when none answers (connecting then names it).
pub(crate) fn answering_master(tf_config: &TfConfig) -> TaskId {
    let preferred = tf_config.master();
    let rank = |t: &TaskId| match t.job.as_str() {
        "chief" => 0,
        "master" => 1,
        "worker" => 2,
        "ps" => 4,
        _ => 3,
    };
    let mut tasks = tf_config.tasks();
    tasks.sort_by_key(|t| (t != &preferred, rank(t), t.index));
    tasks
        .into_iter()
        .find(|t| tf_config.address(t).is_some_and(task_answers))
        .unwrap_or(preferred)
}

/// The tasks of `tf_config` that are not running (their gRPC port does not accept connections),
/// probed at once; an error for one the cluster cannot do without — `master`, or a ps (it holds
/// variables).
///
/// # Errors
/// [`Error::TaskDown`] naming the task and its address.
pub(crate) fn tasks_not_running(
    tf_config: &TfConfig,
    master: &TaskId,
) -> Result<Vec<(TaskId, String)>> {
    let tasks: Vec<(TaskId, String)> = tf_config
        .tasks()
        .into_iter()
        .filter_map(|t| Some((t.clone(), tf_config.address(&t)?.to_string())))
        .collect();
    let answers: Vec<bool> = std::thread::scope(|scope| {
        let probes: Vec<_> = tasks
            .iter()
            .map(|(_, a)| scope.spawn(move || task_answers(a)))
            .collect();
        probes
            .into_iter()
            .map(|p| p.join().unwrap_or(false))
            .collect()
    });
    let down: Vec<(TaskId, String)> = tasks
        .into_iter()
        .zip(answers)
        .filter(|(_, ok)| !ok)
        .map(|(t, _)| t)
        .collect();
    for (task, address) in &down {
        let reason = if task == master {
            "it is the session master; start it, or connect through another task"
        } else if task.job == "ps" {
            "a ps holds variables; start it, or leave it out of TF_CONFIG"
        } else {
            continue;
        };
        return Err(Error::TaskDown {
            task: format!("{}:{}", task.job, task.index),
            address: address.clone(),
            reason: reason.into(),
        });
    }
    Ok(down)
}

/// As [`connect_tf_config`], with sessions mastered by `master` (e.g. an unthrottled ps task,
/// so the master's work is not charged to a worker's CPU quota). Devices carry one reading of
/// their task's live metrics.
///
/// # Errors
/// [`Error::TfConfig`] if `master` is not a task of the cluster; [`Error::TensorFlow`] if it
/// cannot be reached.
pub fn connect_tf_config_at(
    tf_config: &TfConfig,
    master: &TaskId,
) -> Result<(Cluster, SessionConfig)> {
    let c = connect_tf_config_live(tf_config, master, &LiveOptions::default())?;
    Ok((c.cluster, c.config))
}

/// As [`connect_tf_config_at`], keeping the metrics feed.
///
/// # Errors
/// As [`connect_tf_config_at`]; [`Error::Scrape`] for a metrics address that is not
/// `host:port`.
pub fn connect_tf_config_live(
    tf_config: &TfConfig,
    master: &TaskId,
    options: &LiveOptions,
) -> Result<LiveConnection> {
    let address = tf_config.address(master).ok_or_else(|| Error::TfConfig {
        origin: "connect".into(),
        reason: format!(
            "master task {}:{} is not in the cluster",
            master.job, master.index
        ),
    })?;
    let down = tasks_not_running(tf_config, master)?;
    // Tasks that are not running are left out of every session: the master would otherwise
    // wait for them (listing devices, creating sessions) until its timeout.
    let device_filters = if down.is_empty() {
        Vec::new()
    } else {
        for (task, address) in &down {
            log::warn!(
                "task {}:{} at {address} is not running: training uses the tasks that answer",
                task.job,
                task.index
            );
        }
        tf_config
            .tasks()
            .into_iter()
            .filter(|t| !down.iter().any(|(d, _)| d == t))
            .map(|t| t.device_prefix())
            .collect()
    };
    let config = SessionConfig {
        target: format!("grpc://{address}"),
        operation_timeout_ms: 60_000,
        run_timeout_ms: 120_000,
        device_filters,
        ..SessionConfig::default()
    };
    let mut cluster = local::discover(&config)?;
    for d in &mut cluster.devices {
        if let Ok(name) = d.parsed_name() {
            if let (Some(job), Some(task)) = (name.job, name.task) {
                let id = TaskId {
                    job,
                    index: task as usize,
                };
                d.host = tf_config.address(&id).unwrap_or("unknown").to_string();
                if d.device_type == DeviceType::Cpu {
                    // Each task is its own process: its CPU devices share its cores, not the
                    // driver's; how many ops it runs at once is not known from here.
                    d.compute_pool = Some(d.host.clone());
                    d.concurrency = 1;
                }
            }
        }
    }
    let mut metrics = MetricsFeed::tf_config(tf_config, options)?;
    let warnings = metrics.refresh(&mut cluster);
    Ok(LiveConnection {
        cluster,
        config,
        metrics,
        warnings,
        not_running: down.into_iter().map(|(t, _)| t).collect(),
    })
}
