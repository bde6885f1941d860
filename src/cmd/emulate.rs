//! `tf-iaware emulate`: starts an emulated cluster for an outside program (Python TensorFlow, a
//! second `tf-iaware`), writes and prints its TF_CONFIG-style cluster JSON, and holds it until
//! SIGINT or SIGTERM, when the library's signal handler kills its processes and removes its
//! cgroups and folder (`tf_iaware_emulate::cleanup_on_signal`, set up in `main`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

#[derive(clap::Args)]
pub struct Args {
    /// Emulated scenario: paper, uniform, busy, mixed, slow-net, drift, or inline
    /// (`workers=1.0,0.5:busy=0,0.6`; an `emulated:` prefix is accepted).
    #[arg(long, default_value = "paper")]
    scenario: String,
    /// Also reserve a free port on 127.0.0.1 for a `chief` task and list it in the cluster (and
    /// in every task's cluster view: TensorFlow's workers must know it), for a coordinator the
    /// outside program runs itself (TF2 `ClusterCoordinator`), which binds that port. A TF1
    /// session on such a cluster sets ConfigProto `device_filters` to `/job:ps` and
    /// `/job:worker`, or its master waits for the chief to answer device discovery.
    #[arg(long)]
    chief: bool,
    /// Write the cluster JSON here as well (atomically: it appears complete or not at all).
    #[arg(long, value_name = "F.json")]
    tf_config_out: Option<PathBuf>,
}

/// The document `emulate` prints: TF_CONFIG's `cluster` (plus `chief` when asked), tf-iaware's
/// `metrics`, and an `emulated` section describing what runs (ignored by TF_CONFIG readers).
fn document(cluster: &EmulatedCluster) -> Result<Value> {
    let config = cluster.tf_config();
    let mut jobs = serde_json::to_value(&config.cluster).context("the cluster's jobs")?;
    if let (Some(address), Some(map)) = (cluster.chief(), jobs.as_object_mut()) {
        map.insert("chief".into(), json!([address]));
    }
    let master = cluster.master();
    let master_address = config.address(&master).unwrap_or_default();
    Ok(json!({
        "cluster": jobs,
        "metrics": config.metrics,
        "rpc_layer": "grpc",
        "emulated": {
            "scenario": cluster.scenario(),
            "master": format!("grpc://{master_address}"),
            "owner_pid": std::process::id(),
            "pids": cluster.process_ids(),
            "cgroups": cluster.cgroup_paths(),
            "dir": cluster.dir(),
            "quota_warning": cluster.quota_warning,
        },
    }))
}

pub fn run(args: &Args) -> Result<()> {
    let text = args
        .scenario
        .strip_prefix("emulated:")
        .unwrap_or(&args.scenario);
    let scenario = Scenario::parse(text)?;
    // Fail before any process starts if the file cannot be written; nothing at the path is
    // touched until the complete document replaces it.
    crate::common::check_outputs([("--tf-config-out", args.tf_config_out.as_ref())])?;
    let exe = std::env::current_exe().context("locating the tf-iaware binary")?;
    eprintln!("scenario {}: {}", scenario.name, scenario.description);
    let cluster = EmulatedCluster::start_with(&scenario, &exe, args.chief)?;
    let doc = document(&cluster)?;
    let text = serde_json::to_string(&doc)?;
    if let Some(path) = &args.tf_config_out {
        tf_iaware::data::io::write_atomic(path, text.as_bytes(), "--tf-config-out")?;
    }
    outln!("{text}")?;
    eprintln!(
        "emulated cluster ready ({} workers, {} ps); Ctrl-C or SIGTERM tears it down",
        scenario.workers.len(),
        scenario.ps
    );
    // The signal thread started by `cleanup_on_signal` ends the process; until then, hold.
    let _cluster = cluster;
    loop {
        std::thread::park();
    }
}
