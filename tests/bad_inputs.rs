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

/// A memory cgroup of `limit` bytes (v1 `memory` controller or the v2 tree), removed on drop.
struct MemoryCgroup {
    dir: std::path::PathBuf,
    version: u8,
}

impl MemoryCgroup {
    /// `Err(reason)` where this machine does not let the test make one.
    fn new(limit: u64) -> Result<MemoryCgroup, String> {
        let v1 = std::path::Path::new("/sys/fs/cgroup/memory");
        let v2 = std::path::Path::new("/sys/fs/cgroup");
        let (root, version) = if v1.join("memory.limit_in_bytes").exists() {
            (v1, 1)
        } else if std::fs::read_to_string(v2.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|x| x == "memory"))
        {
            let _ = std::fs::write(v2.join("cgroup.subtree_control"), "+memory");
            (v2, 2)
        } else {
            return Err("no cgroup memory controller is mounted".into());
        };
        let dir = root.join(format!("tf-iaware-test-mem-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let group = MemoryCgroup { dir, version };
        let file = if version == 1 {
            "memory.limit_in_bytes"
        } else {
            "memory.max"
        };
        std::fs::write(group.dir.join(file), limit.to_string())
            .map_err(|e| format!("{file}: {e}"))?;
        Ok(group)
    }

    /// The most memory the group's processes held at once, bytes (`None` where the kernel
    /// does not say).
    fn peak(&self) -> Option<u64> {
        let file = if self.version == 1 {
            "memory.max_usage_in_bytes"
        } else {
            "memory.peak"
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// The Python MLP's `.npz` whose `x` header claims `rows` rows of 32 float32 values but holds
/// one: a decompression bomb's header without its gigabytes.
fn lying_npz(path: &std::path::Path, rows: u64) {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let opts = zip::write::SimpleFileOptions::default();
    w.start_file("x.npy", opts).unwrap();
    w.write_all(&tf_iaware::data::encode_npy("<f4", &[rows, 32], &[0; 128]))
        .unwrap();
    w.start_file("y.npy", opts).unwrap();
    w.write_all(&tf_iaware::data::encode_npy("<i8", &[1], &[0; 8]))
        .unwrap();
    w.finish().unwrap();
}

#[test]
fn data_memory_is_bounded_by_the_cgroup_limit_not_the_host() {
    // 5 M rows × 128 bytes: 640 MB claimed, beyond half of a 512 MiB cgroup but far within
    // any host this suite runs on.
    let dir = tempfile::tempdir().unwrap();
    let bomb = dir.path().join("bomb.npz");
    lying_npz(&bomb, 5_000_000);
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let args = [
        "train".to_string(),
        "--graph".into(),
        format!("{fixtures}/tf1_mlp_sparse.pb"),
        "--data".into(),
        bomb.display().to_string(),
        "--cluster".into(),
        "emulated:workers=1".into(),
        "--steps".into(),
        "1".into(),
    ];
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    // Outside a limit, on a host with the memory for the claim, the file is found short (a
    // small host refuses the claim itself).
    let e = fails(&words);
    let budget = tf_iaware::data::io::available_memory_bytes().map_or(0, |b| b / 2);
    let (short, refused) = (
        e.contains("truncated"),
        e.contains("memory data may still use"),
    );
    assert!(e.contains("bomb.npz") && (short || refused), "{e}");
    // Far from the claim either way, the budget decides (near it, the child's own reading does).
    if budget > 800_000_000 {
        assert!(short, "{e}");
    } else if budget < 500_000_000 {
        assert!(refused, "{e}");
    }
    let group = match MemoryCgroup::new(512 << 20) {
        Ok(g) => g,
        Err(reason) => {
            common::skip_without_cgroups("the memory cgroup half", &reason);
            return;
        }
    };
    // Inside it, the claim is refused before a byte of it is allocated.
    let procs = group.dir.join("cgroup.procs");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"echo $$ > "$0" && exec "$@""#)
        .arg(&procs)
        .arg(common::exe())
        .args(&words)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(
        e.contains("bomb.npz") && e.contains("640000000 bytes") && e.contains("cgroup"),
        "{e}"
    );
    if let Some(peak) = group.peak() {
        assert!(peak < 512 << 20, "peak {peak} bytes");
    }
}
