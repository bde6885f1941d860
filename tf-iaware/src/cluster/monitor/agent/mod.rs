//! [`Agent`]: an embeddable HTTP server for a monitor's readings.
//!
//! `GET /metrics` answers the Prometheus text format (`text/plain; version=0.0.4`),
//! `GET /healthz` answers `ok`, other paths 404 and other methods 405. It binds 127.0.0.1
//! unless told otherwise and runs on its own thread with a single-threaded tokio runtime, so
//! any program (the CLI, a TensorFlow worker) can start and stop one.
//!
//! Slow or oversized requests cannot stall it: every connection is a task, not a thread;
//! request headers must arrive within [`AgentConfig::header_read_timeout`] and fit in
//! [`AgentConfig::max_header_bytes`] (else 431 and close); a connection lives at most
//! [`AgentConfig::connection_lifetime`]. At [`AgentConfig::max_connections`] a new connection
//! makes room by closing the oldest one that has not sent a request yet (a slow client holding
//! connections open cannot starve the others); when every open connection has sent one, the new
//! connection is closed at once.
//!
//! Needs the `agent` feature (on by default: tokio and hyper); without it [`Agent::serve`]
//! returns [`Error::NotCompiled`](crate::Error::NotCompiled) naming the feature.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::monitor::metrics;
use crate::cluster::monitor::sampler::Monitor;
use crate::cluster::monitor::snapshot::Snapshot;
use crate::error::Result;

// The server behind [`Agent`]: the real one, or a stand-in that refuses to start. Both have the
// same private shape (`Server::serve`, `local_addr`, `stop`, `wait`), so the public API below is
// written and documented once for both builds.
#[cfg(not(feature = "agent"))]
mod disabled;
#[cfg(feature = "agent")]
mod http;
#[cfg(not(feature = "agent"))]
use disabled as backend;
#[cfg(feature = "agent")]
use http as backend;

/// A running metrics server. Stopped by [`Agent::stop`] or when dropped.
#[derive(Debug)]
pub struct Agent(backend::Server);

impl Agent {
    /// Binds `config.listen` and serves `source` on a background thread.
    ///
    /// # Errors
    /// [`Error::Agent`](crate::Error::Agent) if the address cannot be bound (in use, not local,
    /// no permission) or a limit is zero; [`Error::MonitorThread`](crate::Error::MonitorThread)
    /// if the runtime or thread cannot be started; in a build without the `agent` feature,
    /// always [`Error::NotCompiled`](crate::Error::NotCompiled) naming the feature and the
    /// address.
    pub fn serve(config: AgentConfig, source: Arc<dyn MetricsSource>) -> Result<Agent> {
        backend::Server::serve(config, source).map(Agent)
    }

    /// The address actually bound (with the port chosen when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.0.local_addr()
    }

    /// `http://ADDR/metrics`.
    pub fn metrics_url(&self) -> String {
        format!("http://{}/metrics", self.local_addr())
    }

    /// Stops accepting, closes every connection and waits for the server thread.
    pub fn stop(self) {
        self.0.stop()
    }

    /// Blocks until the agent stops (it only stops when asked, so: for as long as the program
    /// runs).
    pub fn wait(self) {
        self.0.wait()
    }
}

/// Something that can produce the metrics page to serve.
pub trait MetricsSource: Send + Sync + 'static {
    /// The page to serve now, in the Prometheus text format.
    fn metrics_page(&self) -> String;
}

impl MetricsSource for Monitor {
    fn metrics_page(&self) -> String {
        Monitor::metrics_page(self)
    }
}

/// Serves one fixed snapshot (its `age_ms` as stored).
impl MetricsSource for Snapshot {
    fn metrics_page(&self) -> String {
        metrics::render(self)
    }
}

/// A fixed page, served as is (tests, benchmarks, relays).
#[derive(Clone, Debug)]
pub struct StaticPage(pub String);

impl MetricsSource for StaticPage {
    fn metrics_page(&self) -> String {
        self.0.clone()
    }
}

/// How an [`Agent`] listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentConfig {
    /// Address to listen on (default `127.0.0.1:9100`; port 0 picks a free port).
    pub listen: SocketAddr,
    /// Most connections open at once (default 256); at the cap, the oldest connection that has
    /// sent no request yet is closed to make room, else the new one is.
    pub max_connections: usize,
    /// Time a client has to send a request's headers, including between keep-alive
    /// requests (default 5 s).
    pub header_read_timeout: Duration,
    /// Longest a connection may stay open (default 60 s).
    pub connection_lifetime: Duration,
    /// Largest request head (request line and headers) accepted, bytes (default 8 KiB).
    pub max_header_bytes: usize,
}

/// Default agent address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9100";

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9100)),
            max_connections: 256,
            header_read_timeout: Duration::from_secs(5),
            connection_lifetime: Duration::from_secs(60),
            max_header_bytes: 8 * 1024,
        }
    }
}
