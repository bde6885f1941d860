//! TensorFlow servers we start listen only on their task's own address, never on every
//! interface: a `tf-iaware worker` whose TF_CONFIG names 127.0.0.1, and every process of an
//! emulated cluster (`train --cluster emulated:paper` starts the same ones), read back from the
//! kernel (`/proc/net/tcp`, `/proc/net/tcp6` and each process's sockets).

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;

use procfs::net::TcpState;
use procfs::process::{FDTarget, Process};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

/// The local addresses process `pid` listens on (TCP, IPv4 and IPv6).
fn listeners(pid: u32) -> Vec<SocketAddr> {
    let inodes: BTreeSet<u64> = Process::new(pid as i32)
        .unwrap()
        .fd()
        .unwrap()
        .flatten()
        .filter_map(|fd| match fd.target {
            FDTarget::Socket(inode) => Some(inode),
            _ => None,
        })
        .collect();
    let mut found = Vec::new();
    for table in [procfs::net::tcp(), procfs::net::tcp6()] {
        let Ok(entries) = table else { continue };
        for e in entries {
            if e.state == TcpState::Listen && inodes.contains(&e.inode) {
                found.push(e.local_address);
            }
        }
    }
    found
}

/// 127.0.0.1, as an IPv4 socket or an IPv6 one bound to the mapped address.
fn is_loopback_v4(a: &SocketAddr) -> bool {
    match a {
        SocketAddr::V4(v4) => v4.ip().is_loopback(),
        SocketAddr::V6(v6) => v6.ip().to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_worker_listens_only_on_its_task_address() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tf.json");
    let config = format!(r#"{{"cluster": {{"worker": ["127.0.0.1:{port}"]}}}}"#);
    std::fs::write(&path, config).unwrap();
    let mut child = common::bin()
        .args(["worker", "--tf-config", path.to_str().unwrap()])
        .args(["--job", "worker", "--task", "0"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let found = listeners(child.id());
    let reaches_v6_loopback = TcpStream::connect(("::1", port)).is_ok();
    let reaches_v4_loopback = TcpStream::connect(("127.0.0.1", port)).is_ok();
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.starts_with("task=worker:0"), "{line}");
    eprintln!("worker on 127.0.0.1:{port} listens on {found:?}");
    assert!(
        found.iter().all(|a| !a.ip().is_unspecified()),
        "a wildcard listener: {found:?}"
    );
    assert_eq!(
        found.iter().filter(|a| a.port() == port).count(),
        1,
        "{found:?}"
    );
    assert!(found.iter().all(is_loopback_v4), "{found:?}");
    assert!(
        reaches_v4_loopback,
        "the task's own address does not answer"
    );
    // Before, the server's dual-stack `[::]` socket took ::1 as well.
    assert!(
        !reaches_v6_loopback,
        "::1 reaches a server bound to 127.0.0.1"
    );
}

#[test]
fn no_process_of_an_emulated_cluster_listens_on_every_interface() {
    let scenario = Scenario::parse("paper").unwrap();
    let cluster = EmulatedCluster::start(&scenario, &common::exe()).unwrap();
    let pids = cluster.process_ids();
    let mut servers = 0;
    for &pid in &pids {
        let found = listeners(pid);
        eprintln!("pid {pid} listens on {found:?}");
        assert!(
            found.iter().all(|a| !a.ip().is_unspecified()),
            "pid {pid}: a wildcard listener: {found:?}"
        );
        assert!(found.iter().all(is_loopback_v4), "pid {pid}: {found:?}");
        servers += usize::from(!found.is_empty());
    }
    // Four workers and a ps serve (gRPC and metrics); the two co-tenant hogs listen on nothing.
    assert_eq!(servers, 5, "{pids:?}");
}
