//! `tf-iaware agent`: serve this host's readings as Prometheus metrics (`GET /metrics`,
//! `GET /healthz`) until interrupted.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tf_iaware::cluster::monitor::{Agent, AgentConfig, Monitor, MonitorConfig};

#[derive(clap::Args)]
pub struct AgentArgs {
    /// Address to listen on (loopback unless told otherwise).
    #[arg(long, default_value = tf_iaware::cluster::monitor::DEFAULT_LISTEN)]
    pub listen: String,
    /// Sampling interval, ms (10 ms to 1 hour).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub interval_ms: u64,
    /// Observe this process (its own CPU use and cgroup) instead of the agent itself.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub pid: Option<u32>,
    /// Do not load NVML (no GPU metrics).
    #[arg(long)]
    pub no_gpu: bool,
}

/// Resolves `--listen` (an `IP:PORT` or `HOST:PORT`) to one address.
fn resolve(listen: &str) -> Result<SocketAddr> {
    listen
        .to_socket_addrs()
        .with_context(|| format!("--listen {listen}: expected IP:PORT or HOST:PORT"))?
        .next()
        .with_context(|| format!("--listen {listen}: the name resolves to no address"))
}

pub fn run(args: &AgentArgs) -> Result<()> {
    let listen = resolve(&args.listen)?;
    if !listen.ip().is_loopback() {
        log::warn!("the metrics agent on {listen} is reachable from other machines");
    }
    let monitor = Monitor::start(MonitorConfig {
        interval: Duration::from_millis(args.interval_ms),
        pid: args.pid,
        gpus: !args.no_gpu,
        ..MonitorConfig::default()
    })
    .context("starting the monitor")?;
    if let Some(why) = &monitor.latest().gpus_unavailable {
        log::info!("{why}");
    }
    let agent = Agent::serve(
        AgentConfig {
            listen,
            ..AgentConfig::default()
        },
        Arc::new(monitor),
    )?;
    eprintln!(
        "serving {} (and /healthz); Ctrl-C to stop",
        agent.metrics_url()
    );
    agent.wait();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            resolve("127.0.0.1:9100").unwrap(),
            "127.0.0.1:9100".parse().unwrap()
        );
        assert!(resolve("localhost:0").is_ok());
        assert!(resolve("nonsense").is_err());
    }
}
