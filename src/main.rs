//! `tf-iaware`: infrastructure-aware device placement for TensorFlow — command-line interface.
//! Logs go to stderr; `--json` prints one JSON document on stdout.
//!
//! Quiet by default: the commands' own messages, warnings and errors. `-v` adds the library's
//! INFO lines and TensorFlow's warnings, `-vv` DEBUG lines and TensorFlow's INFO logging;
//! `RUST_LOG` and `TF_CPP_MIN_LOG_LEVEL`, when set, win over both (docs/src/reference/env-vars.md).

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
    /// More output on stderr: `-v` the library's INFO lines and TensorFlow's warnings, `-vv`
    /// DEBUG lines and TensorFlow's own INFO logging. `RUST_LOG` overrides it.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
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
    /// Train a GraphDef on your data (.npy, .npz, TFRecord) with a data-parallel strategy.
    Train(cmd::train::Args),
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
    /// Wait until process OWNER closes standard input (it ended or was killed), then remove
    /// what its emulated clusters left: processes in its cgroups, the cgroups, its folders.
    #[command(hide = true)]
    Reap {
        /// The pid of the process that started the emulated clusters.
        #[arg(long)]
        owner: u32,
    },
}

fn main() {
    // SAFETY: called before any thread starts; SIG_DFL is always a valid disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Parsing touches no TensorFlow: the log levels are set before libtensorflow first logs.
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let emulates = match &cli.command {
        Command::Bench(_) | Command::Emulate(_) => true,
        Command::Devices(a) => a.emulated(),
        Command::Place(a) => a.emulated(),
        Command::Run(a) => a.emulated(),
        Command::Train(a) => a.emulated(),
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
        Command::Train(a) => cmd::train::run(a),
        Command::Worker(a) => cmd::worker::run(a),
        Command::Emulate(a) => cmd::emulate::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Monitor(a) => cmd::monitor::run(a),
        Command::Simulate(a) => cmd::simulate::run(a),
        Command::Agent(a) => cmd::agent::run(a),
        Command::Hog { cores } => tf_iaware_emulate::burn(*cores),
        Command::Reap { owner } => tf_iaware_emulate::reap(*owner),
    };
    if let Err(e) = result {
        noteln!("error: {}", describe(&e));
        std::process::exit(1);
    }
}

/// The log filter for `verbose` (how many `-v`), unless `RUST_LOG` is set; and
/// TensorFlow's own log level (`TF_CPP_MIN_LOG_LEVEL`, read by libtensorflow and inherited by
/// the worker processes this CLI starts), unless the user set it.
fn init_logging(verbose: u8) {
    let rust_log = std::env::var("RUST_LOG").ok();
    // The commands' own INFO lines (files written, calibration stored) are what a user asked
    // for; the library's are details behind -v. The binary's modules log as `tf_iaware::cmd::…`.
    let filter = match verbose {
        0 => "warn,tf_iaware::cmd=info,tf_iaware::common=info",
        1 => "info",
        _ => "debug",
    };
    if std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_none() {
        // TensorFlow's levels: 0 all, 1 no INFO, 2 no WARNING, 3 no ERROR.
        let level = match (verbose, rust_log.as_deref()) {
            (0, Some(r)) if r.contains("debug") || r.contains("trace") => "0",
            (0, Some(r)) if r.contains("info") => "1",
            (0, _) => "2",
            (1, _) => "1",
            _ => "0",
        };
        // At the top of main, before any thread starts; inherited by the workers we start.
        std::env::set_var("TF_CPP_MIN_LOG_LEVEL", level);
        set_absl_min_log_level(level);
    }
    env_logger::Builder::new()
        .parse_filters(rust_log.as_deref().unwrap_or(filter))
        .target(env_logger::Target::Stderr)
        .init();
}

/// Sets the level of libtensorflow's absl logging, which read `TF_CPP_MIN_LOG_LEVEL` when the
/// library loaded, before `main` (its gRPC session warnings go there; TensorFlow's own `LOG`
/// reads the variable later). `level` is TensorFlow's and absl's severity alike: 0 INFO,
/// 1 WARNING, 2 ERROR, 3 FATAL. The symbol is absl's in libtensorflow 2.21; where it is missing
/// (another absl release), nothing changes but a few start-up warnings on stderr.
fn set_absl_min_log_level(level: &str) {
    const SET_MIN_LOG_LEVEL: &[u8] =
        b"_ZN4absl12lts_2025081414SetMinLogLevelENS0_18LogSeverityAtLeastE\0";
    let Ok(level) = level.parse::<libc::c_int>() else {
        return;
    };
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the libraries already loaded.
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, SET_MIN_LOG_LEVEL.as_ptr().cast()) };
    if symbol.is_null() {
        return;
    }
    // SAFETY: the symbol is `void absl::SetMinLogLevel(absl::LogSeverityAtLeast)`, whose one
    // argument is an enum with an `int` underlying type: the x86-64 SysV ABI passes it as a C
    // `int`. It stores the level in an atomic; no thread runs yet.
    let set: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(symbol) };
    set(level);
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
