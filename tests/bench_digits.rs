//! `tf-iaware bench --data digits`: bad flags fail before any cluster starts, and a short run on
//! a two-worker emulated cluster writes one DAWNBench-style TSV per contender and round, an SVG
//! of accuracy over time, and a JSON report with a summary per contender.

mod common;

use common::{fails, ok};

#[test]
fn bad_flags_fail_before_a_cluster_starts() {
    let cases: &[(&[&str], &str)] = &[
        (&["--data", "mnist"], "unknown data set"),
        (
            &["--data", "digits", "--target-accuracy", "1.5"],
            "target accuracy",
        ),
        (
            &["--data", "digits", "--target-accuracy", "0"],
            "target accuracy",
        ),
        (
            &["--data", "digits", "--eval-every", "0"],
            "evaluation interval",
        ),
        (
            &["--data", "digits", "--max-train-s=-3"],
            "training time limit",
        ),
        (&["--data", "digits", "--held-out", "1"], "held-out"),
        (
            &["--data", "digits", "--strategies", "heft"],
            "not a data-parallel contender",
        ),
        (
            &["--data", "digits", "--backup-workers", "4"],
            "backup workers",
        ),
        (&["--data", "digits", "--model", "nosuch"], "nosuch"),
        (&["--strategies", "async-ps"], "--data digits"),
        (
            &[
                "--data",
                "digits",
                "--graph",
                "tests/fixtures/tf1_cnn_adam.pb",
            ],
            "has no `logits`",
        ),
        (
            &[
                "--data",
                "digits",
                "--graph",
                "tests/fixtures/tf1_mlp_momentum.pb",
            ],
            "has no `logits`",
        ),
        (
            // A data file of the user's that does not fit the graph: the input and file named.
            &[
                "--data",
                "tests/fixtures/data_cnn_train.npz",
                "--graph",
                "tests/fixtures/tf1_mlp_sparse.pb",
            ],
            "data_cnn_train.npz: input `x`",
        ),
        (
            &["--data", "digits", "--json", "/nonexistent-dir/report.json"],
            "/nonexistent-dir/report.json",
        ),
    ];
    for (extra, expected) in cases {
        let mut args = vec!["bench", "--scenario", "workers=0.5,0.5,0.5,0.5"];
        args.extend_from_slice(extra);
        let stderr = fails(&args);
        assert!(
            stderr.contains(expected),
            "{args:?}: expected `{expected}` in: {stderr}"
        );
        // No cluster started, nothing calibrated.
        assert!(
            !stderr.contains("calibrating"),
            "{args:?} started a cluster: {stderr}"
        );
    }
}

#[test]
fn a_short_run_writes_tsv_svg_and_json_per_contender() {
    let dir = tempfile::tempdir().unwrap();
    let (tsv, svg, json) = (
        dir.path().join("tsv"),
        dir.path().join("accuracy.svg"),
        dir.path().join("report.json"),
    );
    let stdout = ok(&[
        "bench",
        "--data",
        "digits",
        "--scenario",
        "workers=0.5,0.3",
        "--model",
        "mlp",
        "--batch",
        "32",
        "--strategies",
        "replica-setter,async-ps,sync-backup,infra-aware-async",
        "--repeats",
        "1",
        "--target-accuracy",
        "0.6",
        "--eval-every",
        "1",
        "--max-train-s",
        "6",
        "--tsv",
        tsv.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    for name in [
        "replica-setter",
        "async-ps",
        "sync-backup",
        "infra-aware-async",
    ] {
        assert!(stdout.contains(name), "{stdout}");
        let text = std::fs::read_to_string(tsv.join(format!("{name}-round1.tsv"))).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("epoch\tseconds\taccuracy"));
        let rows: Vec<Vec<f64>> = lines
            .map(|l| l.split('\t').map(|v| v.parse().unwrap()).collect())
            .collect();
        assert!(!rows.is_empty(), "{name}: evaluated at least once");
        assert!(rows
            .iter()
            .all(|r| r.len() == 3 && (0.0..=1.0).contains(&r[2])));
        assert!(
            rows.windows(2)
                .all(|w| w[1][1] > w[0][1] && w[1][0] >= w[0][0]),
            "{name}: time and epochs grow: {rows:?}"
        );
    }
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.matches("<polyline").count() == 4);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["summaries"].as_array().unwrap().len(), 4);
    assert_eq!(report["runs"].as_array().unwrap().len(), 4);
    assert_eq!(
        report["train_images"].as_u64().unwrap() + report["held_out_images"].as_u64().unwrap(),
        1797
    );
    for run in report["runs"].as_array().unwrap() {
        // The images read are the steps each worker ran times its batch.
        let workers = run["workers"].as_array().unwrap();
        let read: u64 = workers
            .iter()
            .map(|w| w["steps"].as_u64().unwrap() * w["batch"].as_u64().unwrap())
            .sum();
        assert_eq!(run["samples"].as_u64().unwrap(), read, "{run}");
    }
}
