//! `tf-iaware-agent`, the metrics agent without TensorFlow: it serves the same `/metrics` page
//! as `tf-iaware agent`, and libtensorflow is never mapped into it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

#[test]
fn the_lean_agent_serves_metrics_without_loading_tensorflow() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tf-iaware-agent"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--no-gpu",
            "--interval-ms",
            "100",
        ])
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .expect("the agent starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("the agent says where it serves")
            .unwrap();
        if let Some(rest) = line.strip_prefix("serving ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_string();
    let mut stream = TcpStream::connect(&address).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut page = String::new();
    stream.read_to_string(&mut page).unwrap();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("node_cpu_seconds_total"), "{page}");
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !maps.contains("libtensorflow"),
        "libtensorflow is mapped into the lean agent"
    );
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    eprintln!("tf-iaware-agent VmRSS {rss_kib} KiB");
    assert!(rss_kib < 64 * 1024, "VmRSS {rss_kib} KiB");
}
