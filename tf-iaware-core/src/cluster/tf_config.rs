//! TF_CONFIG, parsed as TensorFlow's `TFConfigClusterResolver` reads it:
//! `{"cluster": {"worker": ["host:port", …], "ps": […], "chief": […]}, "task": {"type": "worker",
//! "index": 0}, "rpc_layer": "grpc"}`. Unknown keys are ignored, except tf-iaware's own optional
//! `"metrics": {"worker": ["host:port", …], …}` — where each task's metrics agent listens.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::limits::MAX_TASKS;
use crate::proto::{ClusterDef, JobDef};

/// One task of a cluster: job name and index.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TaskId {
    /// Job name (`worker`, `ps`, `chief`, …).
    pub job: String,
    /// Index of the task within its job.
    pub index: usize,
}

impl TaskId {
    /// `/job:JOB/replica:0/task:INDEX`.
    pub fn device_prefix(&self) -> String {
        format!("/job:{}/replica:0/task:{}", self.job, self.index)
    }
}

/// A parsed TF_CONFIG.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TfConfig {
    /// Job name → task addresses (`host:port`), in task order.
    pub cluster: BTreeMap<String, Vec<String>>,
    /// This process's task, when the document names one.
    pub task: Option<TaskId>,
    /// `grpc` (the only protocol TensorFlow's distributed runtime serves here).
    pub rpc_layer: String,
    /// Job name → metrics agent addresses (tf-iaware extension; may be absent or partial).
    pub metrics: BTreeMap<String, Vec<String>>,
}

impl TfConfig {
    /// Parses TF_CONFIG JSON text; `origin` names where it came from, for errors.
    ///
    /// # Errors
    /// [`Error::TfConfig`] naming the origin and exactly what is wrong.
    pub fn parse(text: &str, origin: &str) -> Result<TfConfig> {
        let bad = |reason: String| Error::TfConfig {
            origin: origin.into(),
            reason,
        };
        let doc: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let obj = doc
            .as_object()
            .ok_or_else(|| bad("must be a JSON object".into()))?;
        let cluster = jobs(
            obj.get("cluster")
                .ok_or_else(|| bad("has no \"cluster\"".into()))?,
            "cluster",
        )
        .map_err(bad)?;
        if cluster.is_empty() {
            return Err(bad("\"cluster\" has no jobs".into()));
        }
        let total: usize = cluster.values().map(Vec::len).sum();
        if total > MAX_TASKS {
            return Err(bad(format!(
                "lists {total} tasks; at most {MAX_TASKS} are accepted"
            )));
        }
        // Addresses checked, then compared in canonical form: one endpoint spelled two ways
        // (`localhost:2222` and `127.0.0.1:2222`, `:02222` and `:2222`) is still one endpoint.
        let mut seen: BTreeMap<String, (&str, &str, usize)> = BTreeMap::new();
        for (job, addrs) in &cluster {
            if addrs.is_empty() {
                return Err(bad(format!("job \"{job}\" has no tasks")));
            }
            for (i, a) in addrs.iter().enumerate() {
                let canonical =
                    check_address(a).map_err(|r| bad(format!("cluster.{job}: `{a}` {r}")))?;
                if let Some((first, other, j)) = seen.insert(canonical, (a.as_str(), job, i)) {
                    let same = if first == a {
                        String::new()
                    } else {
                        format!(" (`{first}` and `{a}` are the same endpoint)")
                    };
                    return Err(bad(format!(
                        "address `{a}` is given to two tasks, {other}:{j} and {job}:{i}{same}"
                    )));
                }
            }
        }
        let task = match obj.get("task") {
            None | Some(Value::Null) => None,
            Some(t) => {
                let ty = t
                    .get("type")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("task.type must be a string".into()))?;
                let index = match t.get("index") {
                    None => 0,
                    Some(i) => i
                        .as_u64()
                        .ok_or_else(|| bad("task.index must be a non-negative integer".into()))?
                        as usize,
                };
                let tasks = cluster.get(ty).ok_or_else(|| {
                    bad(format!(
                        "task.type \"{ty}\" is not a job of the cluster ({})",
                        keys(&cluster)
                    ))
                })?;
                if index >= tasks.len() {
                    return Err(bad(format!(
                        "task.index {index} is out of range: job \"{ty}\" has {} task(s)",
                        tasks.len()
                    )));
                }
                Some(TaskId {
                    job: ty.into(),
                    index,
                })
            }
        };
        let rpc_layer = match obj.get("rpc_layer") {
            None | Some(Value::Null) => "grpc".to_string(),
            Some(Value::String(s)) if s == "grpc" || s.is_empty() => "grpc".to_string(),
            Some(other) => {
                return Err(bad(format!(
                    "rpc_layer {other} is not supported (only \"grpc\")"
                )))
            }
        };
        let metrics = match obj.get("metrics") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(m) => {
                let m = jobs(m, "metrics").map_err(bad)?;
                for (job, addrs) in &m {
                    let n = cluster.get(job).map_or(0, Vec::len);
                    if addrs.len() > n {
                        return Err(bad(format!(
                            "metrics.{job} lists {} addresses for {n} task(s)",
                            addrs.len()
                        )));
                    }
                    for a in addrs {
                        check_address(a).map_err(|r| bad(format!("metrics.{job}: `{a}` {r}")))?;
                    }
                }
                m
            }
        };
        Ok(TfConfig {
            cluster,
            task,
            rpc_layer,
            metrics,
        })
    }

    /// Reads TF_CONFIG from the environment.
    ///
    /// # Errors
    /// [`Error::TfConfig`] if it is unset or invalid.
    pub fn from_env() -> Result<TfConfig> {
        let text = std::env::var("TF_CONFIG").map_err(|_| Error::TfConfig {
            origin: "environment".into(),
            reason: "TF_CONFIG is not set".into(),
        })?;
        Self::parse(&text, "TF_CONFIG environment variable")
    }

    /// Reads a TF_CONFIG JSON file.
    ///
    /// # Errors
    /// [`Error::Io`] if unreadable; [`Error::InvalidArgument`] for a file over
    /// `MAX_FILE_BYTES`; [`Error::TfConfig`] if invalid.
    pub fn from_file(path: &Path) -> Result<TfConfig> {
        let text = crate::io::read_capped(path, MAX_FILE_BYTES, "TF_CONFIG file")?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Every task, jobs in name order.
    pub fn tasks(&self) -> Vec<TaskId> {
        self.cluster
            .iter()
            .flat_map(|(job, addrs)| {
                (0..addrs.len()).map(move |index| TaskId {
                    job: job.clone(),
                    index,
                })
            })
            .collect()
    }

    /// Address of `task`.
    pub fn address(&self, task: &TaskId) -> Option<&str> {
        self.cluster
            .get(&task.job)?
            .get(task.index)
            .map(String::as_str)
    }

    /// Metrics agent address of `task`, when TF_CONFIG names one.
    pub fn metrics_address(&self, task: &TaskId) -> Option<&str> {
        self.metrics
            .get(&task.job)?
            .get(task.index)
            .map(String::as_str)
    }

    /// The task a client session should talk to: the chief if there is one, else worker 0,
    /// else the first task.
    pub fn master(&self) -> TaskId {
        for job in ["chief", "master", "worker"] {
            if self.cluster.contains_key(job) {
                return TaskId {
                    job: job.into(),
                    index: 0,
                };
            }
        }
        self.tasks().into_iter().next().unwrap_or(TaskId {
            job: "worker".into(),
            index: 0,
        })
    }

    /// `ClusterDef` for a `ServerDef` or a session `ConfigProto`.
    pub(crate) fn cluster_def(&self) -> ClusterDef {
        ClusterDef {
            job: self
                .cluster
                .iter()
                .map(|(name, addrs)| JobDef {
                    name: name.clone(),
                    tasks: addrs
                        .iter()
                        .enumerate()
                        .map(|(i, a)| (i as i32, a.clone()))
                        .collect(),
                })
                .collect(),
        }
    }
}

fn keys(m: &BTreeMap<String, Vec<String>>) -> String {
    m.keys().cloned().collect::<Vec<_>>().join(", ")
}

/// `{"job": ["addr", …]}` (TensorFlow also accepts `{"job": {"0": "addr"}}`, a sparse map).
fn jobs(v: &Value, what: &str) -> std::result::Result<BTreeMap<String, Vec<String>>, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| format!("\"{what}\" must be an object of job → addresses"))?;
    let mut out = BTreeMap::new();
    for (job, tasks) in obj {
        if !crate::graph::is_job_name(job) {
            return Err(format!(
                "{what}: job name `{}`: {} (TensorFlow's device-name grammar)",
                job.escape_default(),
                crate::graph::JOB_NAME_RULE
            ));
        }
        let addrs: Vec<String> = match tasks {
            Value::Array(a) => a
                .iter()
                .map(|t| {
                    t.as_str()
                        .map(String::from)
                        .ok_or_else(|| format!("{what}.{job}: every address must be a string"))
                })
                .collect::<std::result::Result<_, _>>()?,
            Value::Object(m) => {
                let mut indexed: Vec<(usize, String)> = Vec::new();
                for (k, t) in m {
                    let i = k
                        .parse::<usize>()
                        .map_err(|_| format!("{what}.{job}: task key `{k}` is not an index"))?;
                    let a = t
                        .as_str()
                        .ok_or_else(|| format!("{what}.{job}.{k} must be a string"))?;
                    indexed.push((i, a.to_string()));
                }
                indexed.sort();
                if indexed.iter().enumerate().any(|(pos, (i, _))| pos != *i) {
                    return Err(format!(
                        "{what}.{job}: task indices must be 0..n without gaps"
                    ));
                }
                indexed.into_iter().map(|(_, a)| a).collect()
            }
            _ => {
                return Err(format!(
                    "{what}.{job} must be a list of \"host:port\" strings"
                ))
            }
        };
        out.insert(job.clone(), addrs);
    }
    Ok(out)
}

/// The largest TF_CONFIG file [`TfConfig::from_file`] reads, bytes.
pub(crate) const MAX_FILE_BYTES: u64 = 16 << 20;

/// Checks a `host:port` address and returns it in canonical form, for finding one endpoint
/// spelled twice: the port as a plain number, IP addresses as the standard library prints them,
/// host names in lower case, and every loopback spelling (`localhost`, `127.x.y.z`, `[::1]`) as
/// one name — TensorFlow's server listens on every interface of its machine, so two tasks there
/// with one port collide.
fn check_address(a: &str) -> std::result::Result<String, String> {
    let (host, port) = a.rsplit_once(':').ok_or("has no :port")?;
    if host.is_empty() {
        return Err("has no host".into());
    }
    let not_host = || {
        format!(
            "has host `{}`, not a host name (dot-separated labels of ASCII letters, digits, '-' \
             and '_', not starting or ending with '-'), an IPv4 address or a bracketed IPv6 \
             address",
            host.escape_default()
        )
    };
    let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => {
            let ip: std::net::Ipv6Addr = v6.parse().map_err(|_| not_host())?;
            if ip.is_loopback() {
                LOOPBACK.to_string()
            } else {
                format!("[{ip}]")
            }
        }
        None => {
            let labels: Vec<&str> = host.split('.').collect();
            let label_ok = |l: &&str| {
                !l.is_empty()
                    && l.len() <= 63
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            };
            if host.len() > 253 || !labels.iter().all(label_ok) {
                return Err(not_host());
            }
            if labels.iter().all(|l| l.chars().all(|c| c.is_ascii_digit())) {
                // All digits: only a dotted-quad IPv4 address (not `1.2.3`, not `010.0.0.1`).
                let ip: std::net::Ipv4Addr = host.parse().map_err(|_| not_host())?;
                if ip.is_loopback() {
                    LOOPBACK.to_string()
                } else {
                    ip.to_string()
                }
            } else {
                let lower = host.to_ascii_lowercase();
                if lower == "localhost" {
                    LOOPBACK.to_string()
                } else {
                    lower
                }
            }
        }
    };
    // Digits only: `u16::from_str` alone takes `+2222`.
    let digits = port.trim_start_matches('0');
    let number =
        (!port.is_empty() && port.chars().all(|c| c.is_ascii_digit()) && digits.len() <= 5)
            .then(|| {
                digits
                    .parse::<u16>()
                    .ok()
                    .or((digits.is_empty()).then_some(0))
            })
            .flatten();
    match number {
        Some(p) if p > 0 => Ok(format!("{host}:{p}")),
        _ => Err(format!(
            "has port `{}`, not a number in 1..=65535",
            port.escape_default()
        )),
    }
}

/// The canonical host of every loopback address ([`check_address`]).
const LOOPBACK: &str = "loopback";

impl TfConfig {
    /// The `ServerDef` that starts `task`'s gRPC server.
    ///
    /// # Errors
    /// [`Error::TfConfig`] if `task` is not in the cluster.
    pub fn server_def(&self, task: &TaskId) -> Result<crate::proto::ServerDef> {
        let address = self.address(task).ok_or_else(|| Error::TfConfig {
            origin: "server".into(),
            reason: format!("task {}:{} is not in the cluster", task.job, task.index),
        })?;
        let port = check_address(address)
            .ok()
            .and_then(|c| c.rsplit_once(':').and_then(|(_, p)| p.parse::<i32>().ok()))
            .unwrap_or(0);
        Ok(crate::proto::ServerDef {
            cluster: Some(self.cluster_def()),
            job_name: task.job.clone(),
            task_index: task.index as i32,
            default_session_config: None,
            protocol: "grpc".into(),
            port,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_ports_and_task_counts_are_checked() {
        let with = |workers: &str| {
            TfConfig::parse(
                &format!(r#"{{"cluster": {{"worker": [{workers}]}}}}"#),
                "test",
            )
        };
        assert!(with(r#""127.0.0.1:2222", "host-b.example:2223", "[::1]:2224""#).is_ok());
        for (bad, says) in [
            (r#""127.0.0.1:0""#, "1..=65535"),
            (r#""127.0.0.1:2222", "127.0.0.1:2222""#, "two tasks"),
            ("\"bad\\u0000host:2222\"", "not a host name"),
            (r#""höst:2222""#, "not a host name"),
            (r#""[]:2222""#, "not a host name"),
            (r#""[1::2::3]:2222""#, "not a host name"),
            (r#""..:2222""#, "not a host name"),
            (r#""-x:2222""#, "not a host name"),
            (r#""10.0.300.1:2222""#, "not a host name"),
            (r#""127.0.0.1:-2222""#, "1..=65535"),
            (r#""127.0.0.1:+2222""#, "1..=65535"),
            (r#""127.0.0.1:0x8ae""#, "1..=65535"),
            (r#""127.0.0.1:2222", "127.0.0.1:002222""#, "same endpoint"),
            (r#""LocalHost:2222", "127.0.0.1:2222""#, "same endpoint"),
            (r#""[::1]:2222", "127.0.0.2:2222""#, "same endpoint"),
            (r#""Host-A:2222", "host-a:2222""#, "same endpoint"),
        ] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        // A huge cluster is refused quickly, naming the bound.
        let many: Vec<String> = (0..MAX_TASKS + 1)
            .map(|i| format!("\"10.{}.{}.{}:2222\"", i >> 16, (i >> 8) & 255, i & 255))
            .collect();
        let started = std::time::Instant::now();
        let e = with(&many.join(",")).unwrap_err().to_string();
        assert!(e.contains(&MAX_TASKS.to_string()), "{e}");
        eprintln!("refused {} tasks in {:?}", MAX_TASKS + 1, started.elapsed());
    }

    const GOOD: &str = r#"{"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"], "ps": ["127.0.0.1:2224"]},
        "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc", "environment": "cloud",
        "metrics": {"worker": ["127.0.0.1:9101", "127.0.0.1:9102"]}}"#;

    #[test]
    fn parses_like_tensorflow() {
        let c = TfConfig::parse(GOOD, "test").unwrap();
        assert_eq!(
            c.task,
            Some(TaskId {
                job: "worker".into(),
                index: 1
            })
        );
        assert_eq!(c.tasks().len(), 3);
        assert_eq!(
            c.master(),
            TaskId {
                job: "worker".into(),
                index: 0
            }
        );
        assert_eq!(
            c.metrics_address(&TaskId {
                job: "worker".into(),
                index: 1
            }),
            Some("127.0.0.1:9102")
        );
        assert_eq!(
            c.metrics_address(&TaskId {
                job: "ps".into(),
                index: 0
            }),
            None
        );
        let def = c.cluster_def();
        assert_eq!(def.job.len(), 2);
        assert_eq!(def.job[0].name, "ps");
        let sparse =
            TfConfig::parse(r#"{"cluster": {"worker": {"1": "h:2", "0": "h:1"}}}"#, "t").unwrap();
        assert_eq!(sparse.cluster["worker"], vec!["h:1", "h:2"]);
        assert_eq!(sparse.task, None);
    }

    #[test]
    fn job_names_follow_tensorflows_device_name_grammar() {
        for job in ["my-job", "9lives", "_w", "wörker", "a b"] {
            let text = format!(r#"{{"cluster": {{"{job}": ["127.0.0.1:2222"]}}}}"#);
            let e = TfConfig::parse(&text, "test").unwrap_err().to_string();
            assert!(e.contains("job name") && e.contains("letter"), "{job}: {e}");
        }
        let ok = TfConfig::parse(r#"{"cluster": {"Worker_2": ["h:1"], "ps": ["h:2"]}}"#, "t");
        assert!(ok.is_ok(), "{ok:?}");
        // Distinct endpoints stay distinct: other hosts, other ports, other loopback ports.
        let ok = TfConfig::parse(
            r#"{"cluster": {"worker": ["localhost:1", "127.0.0.1:2", "[::1]:3", "10.0.0.1:1"]}}"#,
            "t",
        )
        .unwrap();
        let def = ok
            .server_def(&TaskId {
                job: "worker".into(),
                index: 0,
            })
            .unwrap();
        assert_eq!(def.port, 1);
    }

    #[test]
    fn rejects_what_tensorflow_would_and_says_why() {
        for (text, needle) in [
            ("not json", "not JSON"),
            ("[]", "JSON object"),
            (r#"{"task": {"type": "worker"}}"#, "no \"cluster\""),
            (r#"{"cluster": {}}"#, "no jobs"),
            (r#"{"cluster": {"worker": []}}"#, "no tasks"),
            (r#"{"cluster": {"worker": ["localhost"]}}"#, "no :port"),
            (r#"{"cluster": {"worker": ["h:99999"]}}"#, "99999"),
            (r#"{"cluster": {"worker": [1]}}"#, "string"),
            (
                r#"{"cluster": {"worker": ["h:1"]}, "task": {"type": "ps", "index": 0}}"#,
                "not a job",
            ),
            (
                r#"{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 3}}"#,
                "out of range",
            ),
            (
                r#"{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": -1}}"#,
                "non-negative",
            ),
            (
                r#"{"cluster": {"worker": ["h:1"]}, "rpc_layer": "grpc+verbs"}"#,
                "not supported",
            ),
            (
                r#"{"cluster": {"worker": {"0": "h:1", "2": "h:2"}}}"#,
                "without gaps",
            ),
            (
                r#"{"cluster": {"worker": ["h:1"]}, "metrics": {"worker": ["m:1", "m:2"]}}"#,
                "2 addresses",
            ),
        ] {
            let err = TfConfig::parse(text, "test").unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
