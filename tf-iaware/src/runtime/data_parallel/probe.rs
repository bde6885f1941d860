//! Which tasks still answer: TCP probes of their gRPC ports (a process that died closes its
//! port) and the addresses of their metrics agents (a stopped process still completes TCP
//! handshakes, but its agent goes silent: `runtime::liveness`).

use std::collections::BTreeMap;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::cluster::tf_config::{TaskId, TfConfig};
use crate::graph::DeviceName;

/// `host:port` of the task `device` names, from `tf_config`.
pub(crate) fn address_of<'a>(device: &str, tf_config: &'a TfConfig) -> Option<&'a str> {
    let name = DeviceName::parse(device).ok()?;
    tf_config.address(&TaskId {
        job: name.job?,
        index: name.task? as usize,
    })
}

/// Whether something accepts TCP connections at `address` (`host:port`) within 500 ms.
pub(crate) fn answers(address: &str) -> bool {
    address
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok())
}

/// Devices (of `plan`'s replicas, its ps, or any list) whose task still accepts connections.
pub(crate) fn reachable(devices: &[String], tf_config: &TfConfig) -> Vec<String> {
    devices
        .iter()
        .filter(|d| address_of(d, tf_config).is_some_and(answers))
        .cloned()
        .collect()
}

/// Waits up to `wait` (polling every 250 ms) for the tasks of `devices` to accept connections
/// again — a cluster manager restarting lost tasks at their address; returns those that did not.
pub(crate) fn wait_for(devices: &[String], tf_config: &TfConfig, wait: Duration) -> Vec<String> {
    let deadline = Instant::now() + wait;
    loop {
        let back = reachable(devices, tf_config);
        if back.len() == devices.len() || Instant::now() >= deadline {
            return without(devices, &back);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `all` without the entries of `gone`, in order.
pub(crate) fn without(all: &[String], gone: &[String]) -> Vec<String> {
    all.iter().filter(|d| !gone.contains(d)).cloned().collect()
}

/// Worker device → `host:port` of its task's metrics agent (TF_CONFIG `"metrics"`), for the
/// workers that have one.
pub(crate) fn agents_of(workers: &[String], tf_config: &TfConfig) -> BTreeMap<String, String> {
    workers
        .iter()
        .filter_map(|d| {
            let name = DeviceName::parse(d).ok()?;
            let task = TaskId {
                job: name.job?,
                index: name.task? as usize,
            };
            Some((d.clone(), tf_config.metrics_address(&task)?.to_string()))
        })
        .collect()
}
