//! `tf-iaware worker`: one TensorFlow gRPC server (and its metrics agent) of a TF_CONFIG cluster.

use std::path::PathBuf;

use std::net::ToSocketAddrs;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use tf_iaware::cluster::tf_config::{TaskId, TfConfig};
use tf_iaware::monitor::{Agent, AgentConfig, Monitor, MonitorConfig};

#[derive(clap::Args)]
pub struct Args {
    /// TF_CONFIG JSON file (default: the TF_CONFIG environment variable).
    #[arg(long)]
    tf_config: Option<PathBuf>,
    /// Job of this task (default: TF_CONFIG's task.type).
    #[arg(long)]
    job: Option<String>,
    /// Index of this task (default: TF_CONFIG's task.index).
    #[arg(long)]
    task: Option<usize>,
    /// Port to serve on, when peers reach this task through another address (a proxy);
    /// default: the port of the task's address in TF_CONFIG.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    port: Option<u16>,
    /// Address of the embedded metrics agent (default: TF_CONFIG's "metrics" entry for this
    /// task, else none).
    #[arg(long)]
    metrics: Option<String>,
}

/// Blocks SIGINT and SIGTERM in this thread (and threads it starts later) and waits for one.
fn wait_for_termination() -> i32 {
    // SAFETY: plain libc signal-set manipulation on a local set; sigwait returns the signal.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let mut sig = 0;
        libc::sigwait(&set, &mut sig);
        sig
    }
}

pub fn run(args: &Args) -> Result<()> {
    let config = match &args.tf_config {
        Some(path) => TfConfig::from_file(path)?,
        None => TfConfig::from_env()?,
    };
    let task = match (&args.job, args.task, &config.task) {
        (Some(job), index, _) => TaskId {
            job: job.clone(),
            index: index.unwrap_or(0),
        },
        (None, Some(index), Some(t)) => TaskId {
            job: t.job.clone(),
            index,
        },
        (None, None, Some(t)) => t.clone(),
        (None, _, None) => bail!("no task: TF_CONFIG has no \"task\"; pass --job and --task"),
    };
    let mut def = config.server_def(&task)?;
    if let Some(port) = args.port {
        def.port = i32::from(port);
    }
    let address = config.address(&task).unwrap_or_default().to_string();
    // TensorFlow reports a taken port only vaguely; check it first and name it.
    std::net::TcpListener::bind(("0.0.0.0", def.port as u16)).with_context(|| {
        format!(
            "port {} of task {}:{} ({address}) is not free",
            def.port, task.job, task.index
        )
    })?;
    // Signals must be blocked before TensorFlow starts its threads, so they inherit the mask.
    // SAFETY: as in wait_for_termination.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let server = tf_iaware::tf::Server::start(&def)?;
    // The embedded metrics agent: this host's readings, with this process's own CPU and cgroup.
    let metrics = args
        .metrics
        .clone()
        .or_else(|| config.metrics_address(&task).map(String::from));
    let agent = match &metrics {
        Some(address) => {
            let listen = address
                .to_socket_addrs()
                .with_context(|| format!("--metrics {address}: expected HOST:PORT"))?
                .next()
                .with_context(|| format!("--metrics {address}: resolves to no address"))?;
            // Sampled twice a second, so a co-tenant shows within a second and a re-plan can
            // follow it within a step or two.
            let monitor = Monitor::start(MonitorConfig {
                gpus: false,
                interval: std::time::Duration::from_millis(500),
                ..MonitorConfig::default()
            })?;
            Some(Agent::serve(
                AgentConfig {
                    listen,
                    ..AgentConfig::default()
                },
                Arc::new(monitor),
            )?)
        }
        None => None,
    };
    let metrics_url = agent
        .as_ref()
        .map_or_else(|| "none".to_string(), Agent::metrics_url);
    println!(
        "task={}:{} target={} metrics={metrics_url}",
        task.job,
        task.index,
        server.target()
    );
    let sig = wait_for_termination();
    log::info!("signal {sig}: shutting down {}:{}", task.job, task.index);
    // TensorFlow's gRPC server cannot stop in-process (see `tf::Server`); exiting releases it.
    drop(server);
    if let Some(agent) = agent {
        agent.stop();
    }
    Ok(())
}
