//! `tf-iaware train`: a graph exported by Python TensorFlow (dynamic batch, int64 labels into the
//! sparse cross-entropy) trained on `.npz` files over an emulated cluster (real worker processes
//! on 127.0.0.1), with a synchronous and an asynchronous strategy; `run` feeds the same graph's
//! int64 input; data that does not fit is refused naming the input and the file.

mod common;

use std::path::{Path, PathBuf};

use common::{fails, ok};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn train_fits_a_python_graph_to_npz_files_with_any_strategy() {
    let (graph, data, held_out) = (
        fixture("tf1_mlp_sparse.pb"),
        fixture("tf1_mlp_sparse_train.npz"),
        fixture("tf1_mlp_sparse_held_out.npz"),
    );
    // TF1's `minimize` gates each op's gradients with a `tuple` (`group_deps`): replicated per
    // tower, asynchronous and backup-worker training take the graph too.
    for strategy in ["replica-setter", "async-ps", "sync-backup"] {
        let out = ok(&[
            "train",
            "--graph",
            s(&graph),
            "--data",
            s(&data),
            "--held-out",
            s(&held_out),
            "--cluster",
            "emulated:workers=0.5,0.5",
            "--strategy",
            strategy,
            "--batch",
            "64",
            // Updates, not seconds: a busy machine takes longer, not less far.
            "--steps",
            "150",
            "--max-seconds",
            "300",
            "--eval-every",
            "2",
            "--json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["strategy"], strategy);
        assert_eq!(v["metric"], "accuracy");
        let evaluations = v["evaluations"].as_array().unwrap();
        assert!(!evaluations.is_empty(), "{out}");
        let accuracy = v["final_metric"].as_f64().unwrap();
        // Ten classes: chance is 0.1.
        assert!(accuracy > 0.2, "{strategy} learns the task: {accuracy}");
        let workers = v["workers"].as_array().unwrap();
        assert_eq!(workers.len(), 2);
        let samples: u64 = workers.iter().map(|w| w["samples"].as_u64().unwrap()).sum();
        assert_eq!(samples, v["samples"].as_u64().unwrap());
        assert!(v["updates"].as_u64().unwrap() > 0);
    }
}

#[test]
fn run_feeds_the_graphs_own_types_and_train_refuses_data_that_does_not_fit() {
    let graph = fixture("tf1_mlp_sparse.pb");
    // Synthetic feeds of the int64 labels (a float batch would be refused by TensorFlow).
    ok(&[
        "run",
        "--graph",
        s(&graph),
        "--cluster",
        "local:cpu=2",
        "--strategy",
        "heft",
        "--batch",
        "8",
        "--steps",
        "2",
    ]);
    // Data-parallel synthetic batches take the graph's types too: int64 classes on each worker.
    let out = ok(&[
        "run",
        "--graph",
        s(&graph),
        "--parallel",
        "data",
        "--cluster",
        "emulated:workers=0.5,0.5",
        "--strategy",
        "replica-setter",
        "--batch",
        "16",
        "--steps",
        "2",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["loss_last"].as_f64().is_some_and(f64::is_finite), "{out}");
    // The CNN's images fed to the MLP: the input and the file are named.
    let wrong = fixture("data_cnn_train.npz");
    let err = fails(&[
        "train",
        "--graph",
        s(&graph),
        "--data",
        s(&wrong),
        "--cluster",
        "emulated:workers=0.5,0.5",
        "--strategy",
        "replica-setter",
    ]);
    assert!(
        err.contains("data_cnn_train.npz") && err.contains("`x`"),
        "{err}"
    );
    // A strategy typo: clap's usage error lists the strategies.
    let typo = common::run(&[
        "train",
        "--graph",
        s(&graph),
        "--data",
        s(&fixture("tf1_mlp_sparse_train.npz")),
        "--strategy",
        "infra-awar",
    ]);
    let err = String::from_utf8_lossy(&typo.stderr);
    assert!(
        !typo.status.success() && err.contains("infra-aware-async"),
        "{err}"
    );
}

#[test]
fn train_adapts_a_calibrated_plan_and_refuses_to_adapt_equal_shares() {
    let (graph, data, held_out) = (
        fixture("tf1_mlp_sparse.pb"),
        fixture("tf1_mlp_sparse_train.npz"),
        fixture("tf1_mlp_sparse_held_out.npz"),
    );
    let args = |strategy: &'static str| {
        vec![
            "train".to_string(),
            "--graph".into(),
            s(&graph).into(),
            "--data".into(),
            s(&data).into(),
            "--held-out".into(),
            s(&held_out).into(),
            "--cluster".into(),
            "emulated:workers=0.5,0.5".into(),
            "--strategy".into(),
            strategy.into(),
            "--batch".into(),
            "64".into(),
            "--steps".into(),
            "120".into(),
            "--adapt".into(),
            "--json".into(),
        ]
    };
    let adaptive = args("infra-aware");
    let out = ok(&adaptive.iter().map(String::as_str).collect::<Vec<_>>());
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["updates"], 120, "{out}");
    // Re-plans happen when the machine moves, so their number is not asserted; each keeps the
    // global batch.
    for r in v["replans"].as_array().unwrap() {
        let shares: u64 = r["shares"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s[1].as_u64().unwrap())
            .sum();
        assert_eq!(shares, 64, "{r}");
    }
    let step = &v["step_ms"];
    assert!(step["median"].as_f64().unwrap() > 0.0, "{step}");
    assert!(v["final_metric"].as_f64().unwrap() > 0.2, "{out}");
    // Equal shares have no calibration to re-plan from: refused, naming adaptation.
    let stock = args("async-ps");
    let err = fails(&stock.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(err.contains("adaptation"), "{err}");
}

#[test]
fn train_with_stderr_on_a_full_disk_still_reports_and_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let (ckpt, logs) = (dir.path().join("ckpt"), dir.path().join("logs"));
    // Every line for people (the plan, progress, notes, warnings) fails with ENOSPC.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = common::bin()
        .args(["train", "--graph"])
        .arg(fixture("tf1_mlp_sparse.pb"))
        .arg("--data")
        .arg(fixture("tf1_mlp_sparse_train.npz"))
        .args([
            "--cluster",
            "emulated:workers=0.5",
            "--strategy",
            "replica-setter",
        ])
        .args([
            "--batch",
            "64",
            "--steps",
            "60",
            "--max-seconds",
            "300",
            "--json",
        ])
        .arg("--checkpoint-dir")
        .arg(&ckpt)
        .arg("--logdir")
        .arg(&logs)
        .env("RUST_LOG", "info")
        .stderr(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}", out.status);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["updates"], 60);
    assert_eq!(
        v["checkpoints"].as_array().unwrap().last().unwrap()["step"],
        60
    );
    assert!(ckpt.join("checkpoint").is_file());
    assert!(v["events_lost"].is_null(), "{}", v["events_lost"]);
}

#[test]
fn a_target_alone_trains_until_it_is_reached_or_its_epoch_cap() {
    let out = ok(&[
        "train",
        "--graph",
        s(&fixture("tf1_mlp_sparse.pb")),
        "--data",
        s(&fixture("tf1_mlp_sparse_train.npz")),
        "--held-out",
        s(&fixture("tf1_mlp_sparse_held_out.npz")),
        "--cluster",
        "emulated:workers=1",
        "--strategy",
        "replica-setter",
        "--batch",
        "64",
        "--target-accuracy",
        "0.3",
        "--eval-every",
        "0.5",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // No steps, epochs or time limit: the target bounds the run, capped at 100 epochs (not the
    // one epoch of a run given no bound at all).
    assert_eq!(v["epoch_bound"], 100.0, "{out}");
    let (reached, epochs) = (
        v["reached"].as_bool().unwrap(),
        v["epochs"].as_f64().unwrap(),
    );
    assert!(
        reached || epochs >= 100.0,
        "stopped below the target: {out}"
    );
    if reached {
        assert!(v["final_metric"].as_f64().unwrap() >= 0.3, "{out}");
    }
}

#[test]
fn a_resumed_run_with_a_higher_target_trains_on() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let (graph, data, held_out) = (
        fixture("tf1_mlp_sparse.pb"),
        fixture("tf1_mlp_sparse_train.npz"),
        fixture("tf1_mlp_sparse_held_out.npz"),
    );
    let run = |target: &str, steps: &str| -> serde_json::Value {
        let out = ok(&[
            "train",
            "--graph",
            s(&graph),
            "--data",
            s(&data),
            "--held-out",
            s(&held_out),
            "--cluster",
            "emulated:workers=1",
            "--strategy",
            "replica-setter",
            "--batch",
            "64",
            "--steps",
            steps,
            "--eval-every",
            "0.2",
            "--target-accuracy",
            target,
            "--checkpoint-dir",
            s(&ck),
            "--json",
        ]);
        serde_json::from_str(&out).unwrap()
    };
    let first = run("0.3", "2000");
    assert_eq!(first["reached"], true, "{first}");
    let best = first["final_metric"].as_f64().unwrap();
    // A target above every saved evaluation: the saved reach was for 0.3, not for this one.
    let higher = (best + 1.0) / 2.0;
    let before = first["updates"].as_u64().unwrap();
    let second = run(&higher.to_string(), &(before + 20).to_string());
    let updates = second["updates"].as_u64().unwrap();
    assert!(updates > before, "trained nothing: {second}");
    let reached = second["reached"].as_bool().unwrap();
    let last = second["final_metric"].as_f64().unwrap();
    assert_eq!(
        reached,
        last >= higher,
        "reached {reached} at {last} < {higher}"
    );
}
