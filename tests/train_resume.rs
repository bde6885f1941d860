//! `tf-iaware train --checkpoint-dir D --logdir L` killed with SIGKILL mid-run and started again
//! with the same command: it resumes from the newest checkpoint (the step count continues, the
//! JSON says from which step), finishes the job, and its checkpoint restores into a plain
//! session of the user's own graph (exported by Python TensorFlow: Adam slots, int64 labels).
//! Real worker processes on 127.0.0.1 (a cluster the commands reach through its TF_CONFIG).
//! A second run on a folder a first one holds is refused at its start, naming the first's pid.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use tf_iaware::durable::events::{event_files, read_scalars};
use tf_iaware::durable::{read_bundle, read_variables, restore_graph, CheckpointDir};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The newest checkpoint's step in `dir`, if any.
fn newest(dir: &Path) -> Option<u64> {
    if !dir.exists() {
        return None;
    }
    // Read while the run writes (and holds the folder's lock): inspected, not opened to write.
    CheckpointDir::inspect(dir)
        .ok()?
        .list()
        .ok()?
        .first()
        .map(|c| c.step)
}

/// Starts `tf-iaware ARGS` and returns it once it has a checkpoint in `ckpt` (failing if it
/// ends first, or has none within 600 s).
fn start_until_it_checkpoints(args: &[String], ckpt: &Path) -> Child {
    let mut first = common::bin()
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    while newest(ckpt).is_none() {
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first run ended before its first checkpoint"
        );
        assert!(Instant::now() < deadline, "no checkpoint within 600 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    first
}

/// Runs `tf-iaware ARGS` and kills it (SIGKILL: no clean-up of any kind) once it has a
/// checkpoint in `ckpt`; returns the newest checkpoint's step after the kill.
fn kill_once_it_checkpoints(args: &[String], ckpt: &Path) -> u64 {
    let mut first = start_until_it_checkpoints(args, ckpt);
    first.kill().unwrap();
    first.wait().unwrap();
    newest(ckpt).expect("the checkpoint survives the kill")
}

/// The checkpoint at `prefix` restores into the user's own exported graph (the GraphDef at
/// `graph`): every variable (weights, Adam's slots and powers) from the file, equal.
fn restores_into_the_exported_graph(graph: &Path, prefix: &Path) {
    let graph_def = std::fs::read(graph).unwrap();
    let mut model = restore_graph(&graph_def, prefix).unwrap();
    let saved = read_bundle(prefix).unwrap();
    assert!(
        saved.iter().any(|t| t.name.ends_with("/Adam")),
        "{:?}",
        saved.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    let restored = read_variables(&mut model.graph, &model.session).unwrap();
    for t in &restored {
        let from_file = saved.iter().find(|s| s.name == t.name).unwrap();
        assert_eq!(t, from_file, "{}", t.name);
    }
}

#[test]
fn a_killed_run_resumes_with_the_same_command_and_finishes() {
    let scenario = Scenario::parse("workers=0.5,0.5").unwrap();
    let cluster = EmulatedCluster::start(&scenario, &common::exe()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tf_config = dir.path().join("tf_config.json");
    std::fs::write(
        &tf_config,
        serde_json::to_string(cluster.tf_config()).unwrap(),
    )
    .unwrap();
    let (ckpt, logs) = (dir.path().join("ckpt"), dir.path().join("logs"));
    let graph = fixture("tf1_mlp_sparse.pb");
    let cluster_arg = format!("tf-config:{}", tf_config.display());
    let args: Vec<String> = [
        "train",
        "--graph",
        graph.to_str().unwrap(),
        "--data",
        fixture("tf1_mlp_sparse_train.npz").to_str().unwrap(),
        "--held-out",
        fixture("tf1_mlp_sparse_held_out.npz").to_str().unwrap(),
        "--cluster",
        &cluster_arg,
        "--strategy",
        "replica-setter",
        "--batch",
        "64",
        "--steps",
        "1500",
        "--max-seconds",
        "900",
        "--eval-every",
        "2",
        "--checkpoint-dir",
        ckpt.to_str().unwrap(),
        "--checkpoint-steps",
        "25",
        "--logdir",
        logs.to_str().unwrap(),
        "--json",
    ]
    .map(String::from)
    .to_vec();

    // The first run, killed once it has a checkpoint.
    let killed_at = kill_once_it_checkpoints(&args, &ckpt);
    assert!(
        killed_at < 1500,
        "killed before the end: checkpoint {killed_at}"
    );

    // The same command again: it resumes and finishes the job.
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = common::ok(&argv);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let from = v["resumed_from"]["step"].as_u64().expect("resumed_from");
    // The newest whole checkpoint: the one seen after the kill (or the one before it, had
    // the kill torn a newer one).
    assert!(
        from == killed_at || from + 25 == killed_at,
        "resumed from {from}, newest {killed_at}"
    );
    assert_eq!(v["updates"].as_u64(), Some(1500));
    assert_eq!(
        v["checkpoints"]
            .as_array()
            .and_then(|c| c.last())
            .and_then(|c| c["step"].as_u64()),
        Some(1500)
    );
    assert!(v["final_metric"].as_f64().is_some_and(|a| a > 0.2), "{out}");

    // The final checkpoint restores into the user's own exported graph.
    let last = v["checkpoints"].as_array().and_then(|c| c.last()).unwrap();
    restores_into_the_exported_graph(&graph, Path::new(last["prefix"].as_str().unwrap()));

    // Two event files (one per run); the resumed one's steps continue the first's.
    let files = event_files(&logs).unwrap();
    assert_eq!(files.len(), 2, "{files:?}");
    let second: Vec<i64> = read_scalars(&files[1])
        .unwrap()
        .iter()
        .filter(|p| p.tag == "loss")
        .map(|p| p.step)
        .collect();
    assert!(
        second.iter().all(|&s| s as u64 >= from),
        "{second:?} from {from}"
    );
}

#[test]
fn a_second_run_on_the_same_checkpoint_folder_is_refused_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt");
    let args = |steps: &str| -> Vec<String> {
        [
            "train",
            "--graph",
            fixture("tf1_mlp_sparse.pb").to_str().unwrap(),
            "--data",
            fixture("tf1_mlp_sparse_train.npz").to_str().unwrap(),
            "--cluster",
            "emulated:workers=1",
            "--strategy",
            "replica-setter",
            "--batch",
            "8",
            "--steps",
            steps,
            "--max-seconds",
            "300",
            "--checkpoint-dir",
            ckpt.to_str().unwrap(),
            "--checkpoint-steps",
            "5",
        ]
        .map(String::from)
        .to_vec()
    };
    let mut first = start_until_it_checkpoints(&args("10000000"), &ckpt);
    // The second is refused at its start, naming the first's pid; the first's work is intact.
    let second: Vec<String> = args("20");
    let argv: Vec<&str> = second.iter().map(String::as_str).collect();
    let err = common::fails(&argv);
    assert!(
        err.contains(&format!("in use by process {}", first.id())),
        "{err}"
    );
    assert!(first.try_wait().unwrap().is_none(), "the first run goes on");
    first.kill().unwrap();
    first.wait().unwrap();
    // Its lock died with it: the folder resumes.
    let argv: Vec<&str> = second.iter().map(String::as_str).collect();
    let out = common::run(&argv);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
