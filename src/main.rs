//! `tf-iaware`: infrastructure-aware device placement for TensorFlow — command-line interface.
//! Logs go to stderr; `--json` prints one JSON document on stdout.

#[macro_use]
mod output;
mod cmd;
mod common;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tf-iaware",
    version,
    about = "Infrastructure-aware device placement for TensorFlow"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the devices of a cluster with type, memory, capability and availability.
    Devices(cmd::devices::Args),
    /// Write a zoo model's training GraphDef and its sidecar JSON.
    Model(cmd::model::Args),
    /// Place a GraphDef on a cluster; write the placed GraphDef and a report.
    Place(cmd::place::Args),
    /// Place (if asked) and train a GraphDef with synthetic data; report what ran where.
    Run(cmd::run::Args),
    /// Live metrics of this host: CPU per core, memory, network, cgroup limit, GPUs.
    Monitor(cmd::monitor::MonitorArgs),
    /// Serve this host's metrics in Prometheus format (`GET /metrics`, `GET /healthz`).
    Agent(cmd::agent::AgentArgs),
    /// Compare placement strategies side by side on an emulated heterogeneous cluster.
    Bench(cmd::bench::Args),
    /// Place a GraphDef and predict one step: step time, lower bound, per-device load.
    Simulate(cmd::simulate::Args),
    /// Run one TensorFlow gRPC server (and metrics agent) of a TF_CONFIG cluster.
    Worker(cmd::worker::Args),
    /// Start an emulated cluster for another program, print its TF_CONFIG JSON, hold it until Ctrl-C.
    Emulate(cmd::emulate::Args),
    /// Burn a fixed amount of CPU (the co-tenant of emulated clusters).
    #[command(hide = true)]
    Hog {
        /// CPUs to burn, e.g. 0.3.
        #[arg(long)]
        cores: f64,
    },
}

fn main() {
    // SAFETY: called before any thread starts; SIG_DFL is always a valid disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // TensorFlow's own INFO chatter (CPU feature notes) is noise on a CLI; users can still set it.
    if std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_none() {
        std::env::set_var("TF_CPP_MIN_LOG_LEVEL", "1");
    }
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .target(env_logger::Target::Stderr)
        .init();
    let cli = Cli::parse();
    let emulates = match &cli.command {
        Command::Bench(_) | Command::Emulate(_) => true,
        Command::Devices(a) => a.emulated(),
        Command::Place(a) => a.emulated(),
        Command::Run(a) => a.emulated(),
        Command::Simulate(a) => a.emulated(),
        _ => false,
    };
    if emulates {
        // Ctrl-C tears down the emulated cluster's processes and cgroups.
        tf_iaware_emulate::cleanup_on_signal();
    }
    let result = match &cli.command {
        Command::Devices(a) => cmd::devices::run(a),
        Command::Model(a) => cmd::model::run(a),
        Command::Place(a) => cmd::place::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Worker(a) => cmd::worker::run(a),
        Command::Emulate(a) => cmd::emulate::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Monitor(a) => cmd::monitor::run(a),
        Command::Simulate(a) => cmd::simulate::run(a),
        Command::Agent(a) => cmd::agent::run(a),
        Command::Hog { cores } => tf_iaware_emulate::burn(*cores),
    };
    if let Err(e) = result {
        eprintln!("error: {}", describe(&e));
        std::process::exit(1);
    }
}

/// `e` and its causes, joined by `: `, leaving out a cause whose text the message already
/// holds (library errors print their source, and anyhow would print it a second time).
fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
