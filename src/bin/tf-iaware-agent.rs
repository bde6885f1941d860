//! `tf-iaware-agent`: the metrics agent alone (what `tf-iaware agent` serves), in a binary that
//! never loads libtensorflow. It references no TensorFlow symbol, so the linker's `--as-needed`
//! leaves libtensorflow out of its dynamic dependencies: a co-tenant of the training jobs it
//! reports on should not cost them the ~300 MB that loading TensorFlow takes.

#[path = "../cmd/agent.rs"]
mod agent;

use clap::Parser;

/// Serve this host's readings as Prometheus metrics (`GET /metrics`, `GET /healthz`).
#[derive(Parser)]
#[command(name = "tf-iaware-agent", version)]
struct Cli {
    #[command(flatten)]
    args: agent::AgentArgs,
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    if let Err(e) = agent::run(&cli.args) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
