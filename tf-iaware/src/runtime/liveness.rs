//! Hung-task detection for data-parallel training: a per-run deadline derived from the expected
//! step, and liveness from each task's metrics agent.
//!
//! A stopped (`SIGSTOP`) or frozen process still completes TCP handshakes on its gRPC port —
//! the kernel answers them — so a port that accepts says nothing. Its metrics agent runs in the
//! same process (`tf-iaware worker --metrics`), so an agent whose `GET /healthz` goes
//! unanswered is a process that does not run. When a run passes its deadline (from
//! [`HangDetection`]), the tasks whose agent does not answer are hung, and the
//! others are alive — merely slow (a loaded machine), in which case the run is retried with a
//! longer deadline instead of dropping anyone.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

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
    /// Retries of a run whose deadline passed while every task answered, before its error is
    /// returned.
    pub max_retries: u32,
}

impl Default for HangDetection {
    /// Deadline max(4 s, 2.5 × the expected step), so that detection and the re-plan fit in
    /// max(5 s, 3 × the step), and at least 30 s for a session's first runs; 3 retries.
    fn default() -> Self {
        HangDetection {
            predicted_step_ms: None,
            factor: 2.5,
            floor: Duration::from_secs(4),
            first_runs: Duration::from_secs(30),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

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
}
