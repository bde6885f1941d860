//! Inputs that used to crash or hang the CLI (a panic, a SIGSEGV inside TensorFlow, a read
//! without end) end in one clean `error: …` naming what was wrong.

mod common;

use common::{fails, fails_usage};

#[test]
fn absurd_numbers_and_files_are_clean_errors() {
    let dir = tempfile::tempdir().unwrap();
    let graph = common::model(dir.path(), "mlp", 4);
    let g = graph.to_str().unwrap();
    // More steps than memory could count (was: capacity overflow panic).
    let e = fails(&[
        "run",
        "--graph",
        g,
        "--steps",
        "18446744073709551615",
        "--warmup",
        "0",
    ]);
    assert!(e.contains("steps"), "{e}");
    // A synthetic batch larger than the machine (was: SIGSEGV in TensorFlow's allocation).
    let sidecar = dir.path().join("huge.json");
    let write = |inputs: &str| {
        std::fs::write(
            &sidecar,
            format!(r#"{{"inputs": {inputs}, "init": "init", "train": "train", "loss": "loss"}}"#),
        )
        .unwrap();
    };
    let s = sidecar.to_str().unwrap();
    write(r#"{"x": [16000000, 784], "y": [4, 10]}"#);
    let e = fails(&["run", "--graph", g, "--meta", s, "--steps", "1"]);
    assert!(e.contains("`x`") && e.contains("memory"), "{e}");
    // A dimension whose size overflows (was: SIGABRT, TensorFlow's CHECK on the shape): the
    // graph's own shape refuses it first (mlp's `x` is [?, 784]).
    write(r#"{"x": [4, 9223372036854775807], "y": [4, 10]}"#);
    let e = fails(&["run", "--graph", g, "--meta", s, "--steps", "1"]);
    assert!(e.contains("`x`") && e.contains("784"), "{e}");
    // A batch beyond the bound for a -1 dimension.
    write(r#"{"x": [-1, 784], "y": [-1, 10]}"#);
    let e = fails(&[
        "run",
        "--graph",
        g,
        "--meta",
        s,
        "--batch",
        "100000000",
        "--steps",
        "1",
    ]);
    assert!(e.contains("batch"), "{e}");
    // A loss that is not a scalar (the Python MLP's logits).
    std::fs::write(
        &sidecar,
        r#"{"inputs": {"x": [8, 32], "y": [8, 10]}, "init": "init", "train": "train", "loss": "logits/BiasAdd"}"#,
    )
    .unwrap();
    let python = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tf1_mlp_momentum.pb"
    );
    let e = fails(&["run", "--graph", python, "--meta", s, "--steps", "1"]);
    assert!(e.contains("scalar") && e.contains("logits/BiasAdd"), "{e}");
    // An empty GraphDef (was: placed as 0 ops) and a device that never ends (was: read until
    // memory ran out).
    let empty = dir.path().join("empty.pb");
    std::fs::write(&empty, b"").unwrap();
    let e = fails(&[
        "place",
        "--graph",
        empty.to_str().unwrap(),
        "--cluster",
        "local",
    ]);
    assert!(e.contains("empty"), "{e}");
    // A missing file is named once, its OS error once (was: the OS error printed twice).
    let e = fails(&[
        "place",
        "--graph",
        "/nonexistent/g.pb",
        "--cluster",
        "local",
    ]);
    assert_eq!(e.matches("No such file or directory").count(), 1, "{e}");
    let e = fails(&["place", "--graph", "/dev/zero", "--cluster", "local"]);
    assert!(e.contains("/dev/zero") && e.contains("regular file"), "{e}");
    // An unknown zoo model fails before any cluster is connected to (was: after a 60 s
    // deadline against an unreachable TF_CONFIG cluster).
    let e = fails(&[
        "run",
        "--model",
        "nosuch",
        "--cluster",
        "tf-config:/nonexistent/tf.json",
    ]);
    assert!(e.contains("nosuch"), "{e}");
    // A monitor interval that would never end, and pid 0 (was: hang; accepted).
    let e = fails_usage(&[
        "monitor",
        "--once",
        "--json",
        "--interval-ms",
        "18446744073709551615",
    ]);
    assert!(e.contains("interval-ms"), "{e}");
    let e = fails_usage(&["monitor", "--once", "--pid", "0"]);
    assert!(e.contains("pid"), "{e}");
}
