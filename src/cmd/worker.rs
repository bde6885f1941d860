//! `tf-iaware worker`: one TensorFlow gRPC server (and its metrics agent) of a TF_CONFIG cluster.

use std::path::PathBuf;

use std::net::ToSocketAddrs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use anyhow::{bail, Context, Result};
use tf_iaware::cluster::monitor::{Agent, AgentConfig, Monitor, MonitorConfig};
use tf_iaware::cluster::tf_config::{TaskId, TfConfig};

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

/// The termination signals a worker honours.
fn termination_set() -> libc::sigset_t {
    // SAFETY: plain libc signal-set manipulation on a local, zero-initialised set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

/// Set once the server is up, just before the task line is printed: from then on a signal is the main
/// thread's to act on (an orderly shutdown); before, the signal thread ends the process itself.
static UP: AtomicBool = AtomicBool::new(false);

/// Blocks SIGINT and SIGTERM in this thread — and so in every thread started after it,
/// TensorFlow's included — and starts the one thread that waits for them. A signal during
/// start-up (parsing a large TF_CONFIG, creating the TensorFlow server, starting the agent)
/// ends the process at once with exit status 0 and a log line naming the phase; a signal once
/// the server is up is sent on the returned channel.
fn honour_termination_signals() -> mpsc::Receiver<i32> {
    let set = termination_set();
    // SAFETY: `set` is a valid signal set; blocking signals in this thread has no other effect.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || loop {
        let mut sig = 0;
        // SAFETY: `set` is valid and blocked in every thread; sigwait stores the signal.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            continue;
        }
        if UP.load(Ordering::SeqCst) {
            let _ = tx.send(sig);
            return;
        }
        eprintln!("signal {sig} during start-up: exiting before the server is up");
        // Threads of a TensorFlow server under construction may be running: `_exit` skips the
        // C++ static destructors that `exit` would run beneath them (nothing of ours needs
        // flushing; stderr is unbuffered).
        // SAFETY: _exit is async-signal-safe and ends the process.
        unsafe { libc::_exit(0) };
    });
    rx
}

pub fn run(args: &Args) -> Result<()> {
    // First, before the TF_CONFIG is read: a signal at any phase of start-up is honoured.
    let signals = honour_termination_signals();
    log::debug!("worker start-up: reading the TF_CONFIG");
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
    log::info!(
        "starting the TensorFlow server of task {}:{} ({} tasks in the cluster)",
        task.job,
        task.index,
        config.cluster.values().map(Vec::len).sum::<usize>()
    );
    let server = tf_iaware::runtime::tf::Server::start(&def)?;
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
    // Up before the task line is printed: whoever reads that line may signal at once, and the
    // signal must then be the orderly shutdown's, not start-up's.
    UP.store(true, Ordering::SeqCst);
    outln!(
        "task={}:{} target={} metrics={metrics_url}",
        task.job,
        task.index,
        server.target()
    )?;
    let sig = signals.recv().unwrap_or(libc::SIGTERM);
    log::info!("signal {sig}: shutting down {}:{}", task.job, task.index);
    // TensorFlow's gRPC server cannot stop in-process (see `tf::Server`); exiting releases it.
    drop(server);
    if let Some(agent) = agent {
        agent.stop();
    }
    Ok(())
}
