//! `tf-iaware worker` honours SIGTERM and SIGINT at every phase: during start-up (here while
//! TensorFlow creates the server of a 100,000-task TF_CONFIG, which takes seconds) it ends at
//! once, cleanly, without bringing the server up; once serving, it shuts down in order.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A TF_CONFIG of `n` worker tasks whose task 0 serves on `port` of 127.0.0.1.
fn tf_config(n: usize, port: u16) -> String {
    let mut workers = vec![format!("\"127.0.0.1:{port}\"")];
    workers.extend(
        (1..n).map(|i| format!("\"10.{}.{}.{}:2222\"", i >> 16 & 255, i >> 8 & 255, i & 255)),
    );
    format!(
        r#"{{"cluster": {{"worker": [{}]}}, "task": {{"type": "worker", "index": 0}}}}"#,
        workers.join(", ")
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts a worker on `config`, waits for the stderr line containing `phase`, sends `signal`
/// and returns (exit status, stdout, stderr, seconds from the signal to the exit).
fn signal_at(
    config: &str,
    phase: &str,
    signal: i32,
) -> (std::process::ExitStatus, String, String, f64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tf.json");
    std::fs::write(&path, config).unwrap();
    let mut child = common::bin()
        .args(["worker", "--tf-config", path.to_str().unwrap()])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The phase is a line of stderr, or of stdout for `stdout:…`.
    let (on_stdout, phase) = match phase.strip_prefix("stdout:") {
        Some(p) => (true, p),
        None => (false, phase),
    };
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = if on_stdout {
            stdout.read_line(&mut line)
        } else {
            stderr.read_line(&mut line)
        }
        .unwrap();
        assert!(n > 0, "the worker ended before `{phase}`:\n{seen}");
        seen.push_str(&line);
        if line.contains(phase) {
            break;
        }
    }
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    let signalled = Instant::now();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    // A bound against hanging the suite, not a timing assertion: a worker that ignores the
    // signal is killed and the test fails on its status below.
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if signalled.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let secs = signalled.elapsed().as_secs_f64();
    seen.push_str(&err.join().unwrap());
    (status, out.join().unwrap(), seen, secs)
}

#[test]
fn a_signal_during_start_up_ends_the_worker_before_its_server_is_up() {
    let config = tf_config(100_000, free_port());
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let (status, stdout, stderr, secs) =
            signal_at(&config, "starting the TensorFlow server", signal);
        eprintln!("signal {signal} during server creation: exited {status:?} {secs:.3} s later");
        assert_eq!(status.signal(), None, "killed by a signal:\n{stderr}");
        assert_eq!(status.code(), Some(0), "{stderr}");
        // The server never came up: the signal was acted on during start-up, not queued until
        // the server was serving (as when signals were only awaited after start-up).
        assert!(
            !stdout.contains("task="),
            "the server came up: {stdout}\n{stderr}"
        );
        assert!(stderr.contains("during start-up"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn a_signal_once_serving_shuts_the_worker_down_in_order() {
    let config = tf_config(1, free_port());
    let (status, _, stderr, secs) = signal_at(&config, "stdout:task=worker:0", libc::SIGTERM);
    eprintln!("SIGTERM while serving: exited {status:?} {secs:.3} s later");
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("shutting down worker:0"), "{stderr}");
}
