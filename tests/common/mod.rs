//! Shared helpers of the end-to-end tests.
#![allow(dead_code)]

pub mod cluster;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The environment variable that turns a test's skip for want of cgroups into a failure: CI sets
/// it to `1` (`.ci/run`), so that a test that needs a writable cgroup controller cannot pass there
/// by skipping.
pub const REQUIRE_CGROUPS: &str = "TF_IAWARE_TEST_REQUIRE_CGROUPS";

/// Says that `test` is skipped because this machine gives it no cgroup to work in (`reason`),
/// or fails it where [`REQUIRE_CGROUPS`] is `1`.
pub fn skip_without_cgroups(test: &str, reason: &str) {
    if std::env::var(REQUIRE_CGROUPS).is_ok_and(|v| v == "1") {
        panic!("{test} needs cgroups ({REQUIRE_CGROUPS}=1): {reason}");
    }
    eprintln!("SKIPPED {test}: {reason}");
}

/// The `tf-iaware` binary built for these tests, with a calibration cache of this test process
/// (tests must neither read nor fill the user's cache; a test may set its own).
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tf-iaware"));
    c.env(
        "TF_IAWARE_CACHE_DIR",
        std::env::temp_dir().join(format!("tf-iaware-test-cache-{}", std::process::id())),
    );
    c
}

/// Runs `tf-iaware args…`, returning the output.
pub fn run(args: &[&str]) -> Output {
    bin()
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("the tf-iaware binary runs")
}

/// Runs and asserts success, returning stdout.
pub fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "tf-iaware {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs and asserts a clean failure (exit 1, no panic), returning stderr.
pub fn fails(args: &[&str]) -> String {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "tf-iaware {args:?} should fail cleanly: {stderr}"
    );
    assert!(
        !stderr.contains("panicked"),
        "tf-iaware {args:?} panicked: {stderr}"
    );
    stderr
}

/// Runs and asserts a usage error (exit 2, as clap gives for a bad flag value), returning
/// stderr.
pub fn fails_usage(args: &[&str]) -> String {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "tf-iaware {args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// Writes zoo model `name` (batch `batch`) into `dir`, returning the GraphDef path.
pub fn model(dir: &Path, name: &str, batch: usize) -> PathBuf {
    let path = dir.join(format!("{name}.pb"));
    ok(&[
        "model",
        name,
        "--batch",
        &batch.to_string(),
        "--out",
        path.to_str().unwrap(),
    ]);
    path
}

/// Path of the `tf-iaware` binary built for these tests (emulated clusters run its `worker`).
pub fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tf-iaware"))
}
