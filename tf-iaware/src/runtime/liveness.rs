//! Hung-task detection for data-parallel training: a per-run deadline derived from the expected
//! step, and liveness from each task's metrics agent.
//!
//! A stopped (`SIGSTOP`) or frozen process still completes TCP handshakes on its gRPC port —
//! the kernel answers them — so a port that accepts says nothing. Its metrics agent runs in the
//! same process (`tf-iaware worker --metrics`), so an agent whose `GET /healthz` goes
//! unanswered is a process that does not run. A `Watchdog` probes every agent in the
//! background; when a run passes its deadline, the tasks whose agent has been silent for
//! [`HangDetection::silence`] are hung, and the others are alive — merely slow (a loaded
//! machine), in which case the run is retried with a longer deadline instead of dropping
//! anyone.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How hung tasks are detected (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct HangDetection {
    /// Expected step time, ms, e.g. the plan's prediction; `None`: the median of the steps
    /// measured so far in this run (until one is measured, only [`HangDetection::floor`]).
    pub predicted_step_ms: Option<f64>,
    /// Deadline of a run = max(`floor`, `factor` × the expected step), doubled for each retry
    /// of the same run.
    pub factor: f64,
    /// Shortest deadline of a run.
    pub floor: Duration,
    /// Floor of the deadline of a session's first runs — initialisation or restore, and its
    /// first step, which registers the graph on every task (seconds on a loaded machine).
    pub first_runs: Duration,
    /// A task whose agent has not answered for this long when a deadline passes is hung.
    pub silence: Duration,
    /// Between two probes of one agent.
    pub probe_every: Duration,
    /// Wait for one `/healthz` answer.
    pub probe_timeout: Duration,
    /// Retries of a run whose deadline passed while every task answered, before its error is
    /// returned.
    pub max_retries: u32,
}

impl Default for HangDetection {
    /// Deadline max(4 s, 2.5 × the expected step), so that detection and the re-plan fit in
    /// max(5 s, 3 × the step), and at least 30 s for a session's first runs; hung after 3 s
    /// of silence; a probe every 500 ms with a 1 s timeout; 3 retries.
    fn default() -> Self {
        HangDetection {
            predicted_step_ms: None,
            factor: 2.5,
            floor: Duration::from_secs(4),
            first_runs: Duration::from_secs(30),
            silence: Duration::from_secs(3),
            probe_every: Duration::from_millis(500),
            probe_timeout: Duration::from_secs(1),
            max_retries: 3,
        }
    }
}

impl HangDetection {
    /// The deadline of a run after `retries` retries, given the expected step (ms) if known.
    pub(crate) fn deadline(&self, expected_ms: Option<f64>, retries: u32) -> Duration {
        let expected = self
            .predicted_step_ms
            .into_iter()
            .chain(expected_ms)
            .filter(|m| m.is_finite() && *m > 0.0)
            .fold(0.0_f64, f64::max);
        let base = self.floor.max(Duration::from_secs_f64(
            (self.factor * expected / 1e3).min(86_400.0),
        ));
        base.saturating_mul(1 << retries.min(16))
    }
}

/// Whether the agent at `address` (`host:port`) answers `GET /healthz` with 200 within
/// `timeout` (connect, write and read each bounded).
pub(crate) fn healthz(address: &str, timeout: Duration) -> bool {
    let Some(addr) = address.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
        return false;
    };
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, timeout) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok()
        && (head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"))
}

/// Device → (its agent's address, when it last answered).
type Seen = Arc<Mutex<BTreeMap<String, (String, Option<Instant>)>>>;

/// Probes agents in the background and remembers when each last answered.
pub(crate) struct Watchdog {
    seen: Seen,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    silence: Duration,
}

impl Watchdog {
    /// Starts probing `agents` (device → `host:port` of its task's agent) as `options` says.
    pub(crate) fn start(agents: BTreeMap<String, String>, options: &HangDetection) -> Watchdog {
        let seen = Arc::new(Mutex::new(
            agents
                .into_iter()
                .map(|(d, a)| (d, (a, None)))
                .collect::<BTreeMap<_, _>>(),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        let (every, timeout) = (options.probe_every, options.probe_timeout);
        let thread = std::thread::Builder::new()
            .name("tf-iaware-watchdog".into())
            .spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let targets: Vec<(String, String)> = match s.lock() {
                        Ok(m) => m.iter().map(|(d, (a, _))| (d.clone(), a.clone())).collect(),
                        Err(_) => return,
                    };
                    // One thread per agent: a silent one costs its timeout, not everyone's.
                    let answers: Vec<(String, bool)> = std::thread::scope(|scope| {
                        let probes: Vec<_> = targets
                            .iter()
                            .map(|(d, a)| scope.spawn(move || (d.clone(), healthz(a, timeout))))
                            .collect();
                        probes.into_iter().filter_map(|p| p.join().ok()).collect()
                    });
                    if let Ok(mut m) = s.lock() {
                        for (d, ok) in answers {
                            if let (true, Some(entry)) = (ok, m.get_mut(&d)) {
                                entry.1 = Some(Instant::now());
                            }
                        }
                    }
                    std::thread::sleep(every.saturating_sub(started.elapsed()));
                }
            })
            .ok();
        Watchdog {
            seen,
            stop,
            thread,
            silence: options.silence,
        }
    }

    /// When the agent of `device` last answered; `None` for a device without an agent or
    /// whose agent never answered.
    pub(crate) fn last_answer(&self, device: &str) -> Option<Instant> {
        self.seen.lock().ok()?.get(device)?.1
    }

    /// Of `devices`, those whose agent answered once and has been silent for the silence
    /// period since. A device without an agent, or whose agent never answered, is never
    /// called hung (nothing tells it from a slow one).
    pub(crate) fn silent(&self, devices: &[String]) -> Vec<String> {
        let Ok(m) = self.seen.lock() else {
            return Vec::new();
        };
        devices
            .iter()
            .filter(|d| {
                m.get(*d)
                    .and_then(|(_, last)| *last)
                    .is_some_and(|t| t.elapsed() >= self.silence)
            })
            .cloned()
            .collect()
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_follows_the_expected_step_above_the_floor_and_doubles_per_retry() {
        let h = HangDetection::default();
        assert_eq!(h.deadline(None, 0), Duration::from_secs(4));
        assert_eq!(h.deadline(Some(100.0), 0), Duration::from_secs(4));
        assert_eq!(h.deadline(Some(4_000.0), 0), Duration::from_secs(10));
        assert_eq!(h.deadline(Some(4_000.0), 2), Duration::from_secs(40));
        assert_eq!(h.deadline(Some(f64::NAN), 1), Duration::from_secs(8));
        let p = HangDetection {
            predicted_step_ms: Some(2_000.0),
            ..HangDetection::default()
        };
        assert_eq!(p.deadline(Some(1_000.0), 0), Duration::from_secs(5));
        assert!(p.deadline(Some(1e300), 1000) > Duration::from_secs(86_400));
    }

    #[test]
    fn a_listener_that_never_answers_is_not_healthy_and_a_closed_port_neither() {
        // Accepts (the kernel completes the handshake) but never answers: a stopped process.
        let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = mute.local_addr().unwrap().to_string();
        let started = Instant::now();
        assert!(!healthz(&addr, Duration::from_millis(200)));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "bounded by the timeout"
        );
        drop(mute);
        assert!(!healthz(&addr, Duration::from_millis(200)));
        assert!(!healthz("not an address", Duration::from_millis(200)));
    }

    #[test]
    fn the_watchdog_calls_silent_only_an_agent_that_answered_and_then_stopped() {
        let answering = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = answering.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        answering.set_nonblocking(true).unwrap();
        let server = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match answering.accept() {
                    Ok((mut c, _)) => {
                        let _ = c.set_nonblocking(false);
                        let mut buf = [0u8; 256];
                        let _ = c.read(&mut buf);
                        let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        let options = HangDetection {
            silence: Duration::from_millis(300),
            probe_every: Duration::from_millis(50),
            probe_timeout: Duration::from_millis(100),
            ..HangDetection::default()
        };
        let agents: BTreeMap<String, String> = [
            ("w0".to_string(), addr),
            ("w1".to_string(), "127.0.0.1:1".to_string()),
        ]
        .into();
        let dog = Watchdog::start(agents, &options);
        let both = ["w0".to_string(), "w1".to_string(), "w2".to_string()];
        // Wait (bounded) until w0 answered once.
        let deadline = Instant::now() + Duration::from_secs(20);
        while dog.seen.lock().unwrap()["w0"].1.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(dog.silent(&both), Vec::<String>::new(), "w1 never answered");
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
        // Once w0's agent is gone for longer than the silence, w0 is silent.
        let deadline = Instant::now() + Duration::from_secs(20);
        while dog.silent(&both).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(dog.silent(&both), vec!["w0".to_string()]);
    }
}
