//! The `tf-iaware` CLI end to end: the documented quick start, and clean failures on bad input.

mod common;

use common::{fails, fails_usage, ok};

#[test]
fn resnet20_trains_on_four_cpu_devices_with_finite_losses() {
    let dir = tempfile::tempdir().unwrap();
    let graph = common::model(dir.path(), "resnet20", 8);
    let out = ok(&[
        "run",
        "--graph",
        graph.to_str().unwrap(),
        "--cluster",
        "local:cpu=4",
        "--strategy",
        "round-robin",
        "--steps",
        "3",
        "--warmup",
        "0",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("--json prints one JSON document");
    for key in [
        "strategy",
        "placement_ms",
        "devices",
        "step_ms",
        "images_per_sec",
        "loss_first",
        "loss_last",
        "executed",
    ] {
        assert!(v.get(key).is_some(), "report lacks `{key}`: {out}");
    }
    let losses = v["losses"].as_array().unwrap();
    assert_eq!(losses.len(), 3);
    assert!(
        losses
            .iter()
            .all(|l| l.as_f64().is_some_and(f64::is_finite)),
        "{losses:?}"
    );
    let executed = v["executed"].as_object().unwrap();
    assert_eq!(executed.len(), 4, "{executed:?}");
    for d in 0..4 {
        let key = format!("/job:localhost/replica:0/task:0/device:CPU:{d}");
        assert!(executed[&key].as_u64().unwrap() > 0, "nothing ran on {key}");
    }
}

#[test]
fn place_writes_a_placed_graph_and_a_report() {
    let dir = tempfile::tempdir().unwrap();
    let graph = common::model(dir.path(), "lenet", 4);
    let placed = dir.path().join("placed.pb");
    let report = dir.path().join("report.json");
    ok(&[
        "place",
        "--graph",
        graph.to_str().unwrap(),
        "--cluster",
        "local:cpu=3",
        "--strategy",
        "round-robin",
        "--out",
        placed.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["devices"].as_object().unwrap().len(), 3);
    // The placed graph is itself a valid input, and its devices are what the report says.
    let again = ok(&[
        "place",
        "--graph",
        placed.to_str().unwrap(),
        "--cluster",
        "local:cpu=3",
        "--json",
    ]);
    let a: serde_json::Value = serde_json::from_str(&again).unwrap();
    assert_eq!(a["strategy"], "tf-default");
}

#[test]
fn devices_lists_local_cpus_as_json() {
    let out = ok(&["devices", "--cluster", "local:cpu=3", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["devices"].as_array().unwrap().len(), 3);
    assert!(v["tensorflow"].as_str().unwrap().starts_with("2.21"));
}

#[test]
fn bad_inputs_fail_cleanly_and_name_the_culprit() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.pb");
    std::fs::write(&garbage, b"\x0a\xff\xff\xff\xff this is not a GraphDef").unwrap();
    let g = garbage.to_str().unwrap();
    assert!(fails(&["place", "--graph", g, "--cluster", "local"]).contains("GraphDef"));

    let graph = common::model(dir.path(), "mlp", 4);
    let bytes = std::fs::read(&graph).unwrap();
    let truncated = dir.path().join("truncated.pb");
    std::fs::write(&truncated, &bytes[..bytes.len() / 3]).unwrap();
    fails(&[
        "place",
        "--graph",
        truncated.to_str().unwrap(),
        "--cluster",
        "local",
    ]);

    let gp = graph.to_str().unwrap();
    assert!(fails(&["place", "--graph", gp, "--cluster", "local:cpu=0"]).contains("cpu=0"));
    assert!(fails(&["place", "--graph", gp, "--cluster", "moon:base"]).contains("moon:base"));
    // An unknown strategy is a usage error naming itself and the known ones.
    let e = fails_usage(&[
        "place",
        "--graph",
        gp,
        "--cluster",
        "local",
        "--strategy",
        "psychic",
    ]);
    assert!(e.contains("psychic") && e.contains("heft"), "{e}");
    assert!(fails(&[
        "place",
        "--graph",
        "/nonexistent/graph.pb",
        "--cluster",
        "local"
    ])
    .contains("/nonexistent/graph.pb"));
    assert!(fails(&[
        "model",
        "alexnet",
        "--out",
        dir.path().join("a.pb").to_str().unwrap()
    ])
    .contains("alexnet"));

    let sidecar = dir.path().join("bad.json");
    std::fs::write(&sidecar, r#"{"inputs": {"x": [4, 784], "y": [4, 10]}, "init": "init", "train": "no_such_op", "loss": "loss"}"#).unwrap();
    let err = fails(&[
        "run",
        "--graph",
        gp,
        "--meta",
        sidecar.to_str().unwrap(),
        "--steps",
        "1",
    ]);
    assert!(err.contains("no_such_op") && err.contains("train"), "{err}");
    std::fs::write(&sidecar, "{not json").unwrap();
    assert!(
        fails(&["run", "--graph", gp, "--meta", sidecar.to_str().unwrap()]).contains("bad.json")
    );
}

/// `tf-iaware ARGS` with its calibration cache in `cache`, succeeding; its JSON output. The
/// load check that refuses to cache a calibration on a busy machine is off: these tests are
/// about calibrating, storing and reusing (tests/live_metrics.rs covers the refusal).
fn calibrating(cache: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = common::bin()
        .args(args)
        .env("TF_IAWARE_CACHE_DIR", cache)
        .env("TF_IAWARE_CALIBRATION_MIN_FREE", "0")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
}

#[test]
fn calibration_is_measured_stored_and_reused() {
    let cache = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| calibrating(cache.path(), args);
    let nominal = run(&["devices", "--cluster", "local:cpu=2", "--json"]);
    let calibrated = run(&[
        "devices",
        "--cluster",
        "local:cpu=2",
        "--calibrate",
        "--json",
    ]);
    let flops = |v: &serde_json::Value| v["devices"][0]["peak_flops"].as_f64().unwrap();
    assert!(flops(&calibrated) > 0.0);
    assert_ne!(
        flops(&calibrated),
        flops(&nominal),
        "the micro-benchmark replaced the nominal figure"
    );
    let stored: Vec<_> = std::fs::read_dir(cache.path().join("calibration"))
        .unwrap()
        .collect();
    assert_eq!(stored.len(), 1, "one profile per host and cluster");
    // A later command on the same cluster reuses the stored profile.
    let again = run(&["devices", "--cluster", "local:cpu=2", "--json"]);
    assert_eq!(flops(&again), flops(&calibrated));
    // The profile holds per-op-type cost lines from the calibration network's step stats.
    let profile: serde_json::Value =
        serde_json::from_slice(&std::fs::read(stored[0].as_ref().unwrap().path()).unwrap())
            .unwrap();
    let lines = profile["op_costs"].as_array().unwrap();
    for op in [
        "Conv2D",
        "Conv2DBackpropFilter",
        "FusedBatchNormGradV3",
        "MatMul",
    ] {
        assert!(
            lines.iter().any(|l| l["op"] == op
                && l["device_type"] == "CPU"
                && l["slope"].as_f64().unwrap() > 0.0),
            "no cost line for {op}: {lines:?}"
        );
    }
}

/// `simulate --graph GRAPH --cluster local:cpu=2 --strategy STRATEGY --json EXTRA…`'s report.
fn simulate_json(graph: &str, strategy: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "simulate",
        "--graph",
        graph,
        "--cluster",
        "local:cpu=2",
        "--strategy",
        strategy,
        "--json",
    ];
    args.extend_from_slice(extra);
    serde_json::from_str(&common::ok(&args)).unwrap()
}

/// A graph exported with a dynamic batch (`[-1, …]` inputs) is priced at the batch given, not
/// as one sample: `simulate --batch` and `run --batch` pin it before shape inference.
#[test]
fn a_dynamic_batch_is_priced_at_the_batch_given() {
    let g = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tf1_mlp_sparse.pb"
    );
    // The FLOPs placed (not the predicted time, which follows this machine's load).
    let flops = |v: &serde_json::Value| -> f64 {
        v["devices"]
            .as_object()
            .unwrap()
            .values()
            .map(|d| d["flops"].as_f64().unwrap())
            .sum()
    };
    let simulated = |extra: &[&str]| flops(&simulate_json(g, "single-fastest", extra));
    let one = simulated(&[]);
    let pinned = simulated(&["--batch", "512"]);
    assert!(
        pinned > 100.0 * one,
        "512 samples priced as more than 100 of one: {pinned} vs {one} FLOPs"
    );
    assert!(common::fails_usage(&["simulate", "--graph", g, "--batch", "0"]).contains("batch"));
    // `run` prices (and feeds) the same pinned graph.
    let out = common::ok(&[
        "run",
        "--graph",
        g,
        "--cluster",
        "local:cpu=2",
        "--strategy",
        "single-fastest",
        "--batch",
        "512",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--json",
    ]);
    assert_eq!(flops(&serde_json::from_str(&out).unwrap()), pinned);
    // A split margin outside 0–1 is refused, naming it.
    let err = common::fails(&[
        "simulate",
        "--graph",
        g,
        "--strategy",
        "heft",
        "--min-split-gain",
        "1",
    ]);
    assert!(err.contains("min split gain"), "{err}");
}

/// A distributed cluster is calibrated through its workers' own thread pools: the calibration
/// network's one-op-at-a-time session config must not ask TensorFlow for per-session pools,
/// which a distributed session refuses ("does not support session thread pool options").
#[test]
fn a_distributed_cluster_is_calibrated() {
    let cache = tempfile::tempdir().unwrap();
    let v = calibrating(
        cache.path(),
        &[
            "devices",
            "--cluster",
            "emulated:workers=1",
            "--calibrate",
            "--json",
        ],
    );
    let seen = v["calibration"]["seen"].as_array().unwrap();
    assert!(
        seen.iter()
            .any(|s| s[0].as_str().unwrap().starts_with("/job:worker/")),
        "the worker was calibrated: {seen:?}"
    );
    assert!(v["calibration"]["cached"].is_string(), "{v}");
}

#[test]
fn measured_op_times_feed_the_cost_model() {
    let dir = tempfile::tempdir().unwrap();
    let graph = common::model(dir.path(), "lenet", 4);
    let g = graph.to_str().unwrap();
    let m = dir.path().join("m.json");
    ok(&[
        "run",
        "--graph",
        g,
        "--cluster",
        "local:cpu=2",
        "--strategy",
        "round-robin",
        "--steps",
        "2",
        "--save-measurements",
        m.to_str().unwrap(),
    ]);
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&m).unwrap()).unwrap();
    let samples = saved["samples"].as_array().unwrap();
    assert!(
        samples.iter().any(|s| s["node"] == "conv1/Conv2D"),
        "the traced steps' ops are saved: {}",
        samples.len()
    );
    // Each with the availability its device was read at, to scale by a later reading.
    for s in samples {
        let a = s["availability"].as_f64();
        assert!(a.is_some_and(|a| a > 0.0 && a <= 1.0), "{s}");
    }
    let predict = |extra: &[&str]| {
        simulate_json(g, "heft", extra)["predicted_step_ms"]
            .as_f64()
            .unwrap()
    };
    let measured = predict(&["--measurements", m.to_str().unwrap()]);
    assert!(measured > 0.0 && measured.is_finite());
    assert_ne!(
        measured,
        predict(&[]),
        "measured times change the prediction"
    );
    // Timings of another graph: nothing to use is an error naming the file.
    let other = dir.path().join("other.json");
    std::fs::write(
        &other,
        r#"{"samples":[{"node":"nope","device":"/job:localhost/replica:0/task:0/device:CPU:0","seconds":0.001}]}"#,
    )
    .unwrap();
    let err = fails(&[
        "simulate",
        "--graph",
        g,
        "--measurements",
        other.to_str().unwrap(),
    ]);
    assert!(err.contains("other.json"), "{err}");
    let err = fails(&["simulate", "--graph", g, "--measurements", g]);
    assert!(err.contains("lenet.pb"), "{err}");
}

#[test]
fn bench_runs_data_parallel_and_model_parallel_strategies_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let svg = dir.path().join("bench.svg");
    let out = ok(&[
        "bench",
        "--scenario",
        "workers=0.5,0.25",
        "--model",
        "mlp",
        "--batch",
        "8",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--repeats",
        "1",
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.contains("images/sec:"),
        "tf_cnn_benchmarks-style lines: {out}"
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let results = v["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["replica-setter", "infra-aware", "heft"]);
    for r in results {
        let ms = r["step_ms"]["median"].as_f64().unwrap();
        assert!(ms.is_finite() && ms > 0.0, "{r}");
        let mean = r["step_ms"]["mean"].as_f64().unwrap();
        assert!(mean.is_finite() && mean > 0.0, "{r}");
        assert!(r["predicted_step_ms"].as_f64().is_some(), "{r}");
    }
    // Data-parallel strategies carry a plan over the global batch; heft its ops per worker.
    let batch: u64 = results[1]["plan"]["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["batch"].as_u64().unwrap())
        .sum();
    assert_eq!(batch, 8);
    assert!(results[2]["plan"].is_null());
    assert!(!results[2]["ops_per_device"].as_array().unwrap().is_empty());
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    // An unknown strategy names itself and the known ones.
    let err = fails_usage(&["bench", "--strategies", "replica-setter,fastest"]);
    assert!(
        err.contains("fastest") && err.contains("round-robin"),
        "{err}"
    );
}
