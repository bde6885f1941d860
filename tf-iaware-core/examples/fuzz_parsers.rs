//! Stable-Rust fuzzing of every parser of user input, for CI (`.ci/run`) where cargo-fuzz's
//! nightly toolchain is absent: a bounded random-input harness that mutates seeds taken from the
//! project's fixtures (GraphDefs, Prometheus pages, sidecars, TF_CONFIGs, the bad-input table)
//! and built-in ones, runs each parser on every input under `catch_unwind`, and fails on any
//! panic (the input is saved) or on an input that takes longer than a second.
//!
//! ```text
//! cargo run --release -p tf-iaware-core --example fuzz_parsers -- [--seconds S] [--execs N] [--seed X] [PARSER…]
//! ```
//!
//! Each parser runs until `--execs` inputs (default 1,000,000) or `--seconds` (default 60) have
//! gone by, whichever comes first; the report gives executions, seconds and crashes per parser.
//! The parsers: `graphdef` (decode, function-library check, structure, topological order),
//! `cluster-spec` (with the display/parse round trip), `device-name`, `tf-config`, `synthetic`,
//! `exposition` (with the render/parse round trip, the snapshot mapping and the plausibility
//! checks), `sidecar`, `measurements`, and what a checkpoint folder holds: `train-state` (the
//! trainer's `train_state.json`, parsed and range-checked), `checkpoint-state` (TensorFlow's
//! `checkpoint` file, with the write/parse round trip) and `index-footer` (a V2 index's footer).

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tf_iaware_core::cluster::tf_config::TfConfig;
use tf_iaware_core::cluster::{ClusterSpec, SyntheticSpec};
use tf_iaware_core::cost::Measurements;
use tf_iaware_core::durable::layout::{check_index_footer, CheckpointState, INDEX_FOOTER_LEN};
use tf_iaware_core::durable::TrainState;
use tf_iaware_core::graph::graph_def::{decode_graph_def, structure};
use tf_iaware_core::graph::library::library_bytes;
use tf_iaware_core::graph::{DeviceName, Sidecar};
use tf_iaware_core::monitor::exposition::Exposition;
use tf_iaware_core::monitor::{metrics, plausible};
use tf_iaware_core::proto::{GraphDef, NodeDef};

/// A parser under test: it gets the bytes and must return, never panic.
type Target = fn(&[u8]);

/// An input slower than this is reported as a hang.
const SLOW: Duration = Duration::from_secs(1);
/// Inputs grow no longer than this (bytes), so a run spends its time parsing, not copying.
const MAX_INPUT: usize = 64 * 1024;

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

fn graphdef(data: &[u8]) {
    if let Ok(def) = decode_graph_def(data, "fuzz input") {
        if let Ok(g) = structure(&def) {
            let _ = g.topo_order();
        }
    }
}

fn cluster_spec(data: &[u8]) {
    if let Some(t) = text(data) {
        if let Ok(spec) = ClusterSpec::parse(t) {
            let again = ClusterSpec::parse(&spec.to_string()).ok();
            assert_eq!(again.as_ref(), Some(&spec), "{t:?} does not round-trip");
        }
    }
}

fn device_name(data: &[u8]) {
    if let Some(t) = text(data) {
        if let Ok(d) = DeviceName::parse(t) {
            let _ = d.to_string();
        }
    }
}

fn tf_config(data: &[u8]) {
    if let Some(t) = text(data) {
        if let Ok(c) = TfConfig::parse(t, "fuzz input") {
            for task in c.tasks() {
                let _ = c.server_def(&task);
            }
        }
    }
}

fn synthetic(data: &[u8]) {
    if let Some(t) = text(data) {
        let _ = SyntheticSpec::parse(t);
    }
}

fn exposition(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let Ok(page) = Exposition::parse(t) else {
        return;
    };
    if let Ok(snap) = metrics::from_exposition(&page, "fuzz") {
        let _ = plausible::implausible_readings(&snap, 1_800_000_000_000, 5_000);
    }
    let rendered = page.render();
    if let Ok(again) = Exposition::parse(&rendered) {
        assert_eq!(
            page.families().len(),
            again.families().len(),
            "a rendered page parses to other families"
        );
    }
}

fn sidecar(data: &[u8]) {
    if let Some(t) = text(data) {
        let _ = Sidecar::parse(t, Path::new("fuzz.json"));
    }
}

fn measurements(data: &[u8]) {
    if let Ok(m) = serde_json::from_slice::<Measurements>(data) {
        let _ = serde_json::to_string(&m);
    }
}

fn train_state(data: &[u8]) {
    let Some(t) = text(data) else { return };
    if let Ok(state) = TrainState::from_json(t, "fuzz input") {
        for step in [state.global_step, 10] {
            let _ = state.check(step, Path::new("fuzz input"));
        }
    }
    // Any JSON value as each of the trainer's keys of a state that is otherwise whole.
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(t) {
        let seed = state_seed();
        let Ok(mut state) = TrainState::from_json(std::str::from_utf8(&seed).unwrap_or(""), "s")
        else {
            return;
        };
        for key in [
            "seed",
            "sync_samples",
            "worker_samples",
            "evaluations",
            "reached_at_s",
        ] {
            state.extra.insert(key.into(), value.clone());
            let _ = state.check(10, Path::new("fuzz input"));
        }
    }
}

fn checkpoint_state(data: &[u8]) {
    if let Some(t) = text(data) {
        if let Ok(state) = CheckpointState::parse(t, "fuzz input") {
            let again = CheckpointState::parse(&state.to_text(), "fuzz input").ok();
            assert_eq!(again.as_ref(), Some(&state), "{t:?} does not round-trip");
        }
    }
}

fn index_footer(data: &[u8]) {
    // The whole input as an index file: its length and its last bytes.
    let tail = &data[data.len().saturating_sub(INDEX_FOOTER_LEN)..];
    let _ = check_index_footer(data.len() as u64, tail);
    // As a footer of a large file.
    let _ = check_index_footer(1 << 40, data);
}

/// A train state as the trainer writes it.
fn state_seed() -> Vec<u8> {
    let text = r#"{"format": 1, "global_step": 10, "epoch": 0, "position": 80,
        "examples_seen": 80, "train_seconds": 0.3, "saved_unix_s": 1.7e9,
        "plan": {"strategy": "replica-setter", "global_batch": 8,
                 "shares": [{"worker": "/job:worker/task:0", "examples": 8}], "replans": 0},
        "extra": {"evaluations": [{"seconds": 0.2, "epoch": 0.05, "updates": 6, "metric": 0.4}],
                  "loss_first": 2.4, "seed": 1, "strategy": "replica-setter",
                  "sync_samples": 80, "worker_samples": {"w": 3}, "reached_at_s": 0.25}}"#;
    text.as_bytes().to_vec()
}

/// A table footer with block handles (0, 20) and (25, 30), after `body` bytes.
fn footer_seed(body: usize) -> Vec<u8> {
    let mut f = vec![0u8; body];
    f.extend_from_slice(&[0, 20, 25, 30]);
    f.resize(body + 40, 0);
    f.extend_from_slice(&0xdb47_7524_8b80_fb57_u64.to_le_bytes());
    f
}

/// Every `*.EXT` file under `dir` (one level), as bytes.
fn files(dir: &Path, ext: &str) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    paths.sort();
    paths.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// Windows of consecutive lines of `page` (small seeds parse fast and mutate well).
fn line_windows(page: &[u8], width: usize) -> Vec<Vec<u8>> {
    let lines: Vec<&[u8]> = page.split(|&b| b == b'\n').collect();
    lines
        .chunks(width)
        .map(|c| {
            let mut v = c.join(&b'\n');
            v.push(b'\n');
            v
        })
        .collect()
}

/// The bad-input table's TF_CONFIG, sidecar and measurements documents (file column contents
/// that look like JSON).
fn table_json(root: &Path) -> Vec<Vec<u8>> {
    let Ok(table) = std::fs::read_to_string(root.join("tests/fixtures/bad_inputs.tsv")) else {
        return Vec::new();
    };
    table
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split('\t').nth(3))
        .flat_map(|files| files.split(" ;; "))
        .filter_map(|f| f.split_once('=').map(|(_, c)| c))
        .filter(|c| c.starts_with('{') || c.starts_with('['))
        .map(|c| c.as_bytes().to_vec())
        .collect()
}

fn node(name: &str, op: &str, inputs: &[&str], device: &str) -> NodeDef {
    NodeDef {
        name: name.into(),
        op: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        device: device.into(),
        attr: BTreeMap::new(),
        experimental_debug_info: None,
        experimental_type: None,
    }
}

fn graph_seeds(root: &Path) -> Vec<Vec<u8>> {
    let mut seeds = files(&root.join("tests/fixtures"), "pb");
    // Subsets of the fixtures' nodes: small graphs with real attributes.
    let mut parts = Vec::new();
    for bytes in &seeds {
        if let Ok(def) = GraphDef::decode(bytes.as_slice()) {
            for chunk in def.node.chunks(6) {
                let sub = GraphDef {
                    node: chunk.to_vec(),
                    ..GraphDef::default()
                };
                parts.push(sub.encode_to_vec());
            }
        }
    }
    seeds.extend(parts);
    let small = GraphDef {
        node: vec![
            node("x", "Placeholder", &[], ""),
            node(
                "w",
                "VariableV2",
                &[],
                "/job:worker/replica:0/task:0/device:CPU:0",
            ),
            node("m", "MatMul", &["x", "w:0"], "/device:CPU:0"),
            node("r", "Relu", &["m", "^w"], ""),
        ],
        library: Some(library_bytes(&[
            ("f", &[("g", &[]), ("While", &["c", "b"])]),
            ("g", &[("Relu", &[])]),
            ("c", &[("Less", &[])]),
            ("b", &[("f", &[])]),
        ])),
        ..GraphDef::default()
    };
    seeds.push(small.encode_to_vec());
    seeds
}

fn seeds_for(name: &str, root: &Path) -> Vec<Vec<u8>> {
    let core = root.join("tf-iaware-core");
    let strings = |s: &[&str]| s.iter().map(|x| x.as_bytes().to_vec()).collect::<Vec<_>>();
    match name {
        "graphdef" => graph_seeds(root),
        "cluster-spec" => strings(&[
            "local",
            "local:cpu=4",
            "tf-config",
            "tf-config:/tmp/tf.json",
            "emulated:workers=1.0,0.5:busy=0,0.6:net=1@10/5ms",
            "synthetic:workers=1000:ps=16:avail=beta(2,2):cap=lognormal(0,0.5):net=10gbit/50us",
        ]),
        "device-name" => strings(&[
            "/job:worker/replica:0/task:3/device:CPU:0",
            "/device:GPU:*",
            "/cpu:0",
            "/job:ps/task:1",
            "",
        ]),
        "synthetic" => strings(&[
            "workers=1000:ps=16:avail=beta(2,2):cap=lognormal(0,0.5):net=10gbit/50us",
            "workers=8:avail=uniform(0.2,1):seed=7",
            "workers=4:ps=2:cap=1,2,3,4",
        ]),
        "tf-config" => {
            let mut s = strings(&[
                r#"{"cluster": {"worker": ["127.0.0.1:2222", "localhost:2223"], "ps": ["[::1]:2224"]}, "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc", "metrics": {"worker": ["127.0.0.1:9100"]}}"#,
                r#"{"cluster": {"chief": {"0": "host-a.example:1"}, "worker": {"1": "h:3", "0": "h:2"}}}"#,
            ]);
            s.extend(table_json(root));
            s
        }
        "exposition" => {
            let mut s = Vec::new();
            for page in files(&core.join("tests/fixtures/monitor"), "prom") {
                s.extend(line_windows(&page, 12));
                s.push(page);
            }
            s
        }
        "sidecar" => {
            let mut s = files(&root.join("tests/fixtures"), "json");
            s.extend(table_json(root));
            s
        }
        "measurements" => {
            let mut s = strings(&[
                r#"{"ops": {"MatMul": {"count": 3, "ms": [0.5, 0.6, 0.4]}}}"#,
                "{}",
            ]);
            s.extend(table_json(root));
            s
        }
        "train-state" => {
            let mut s = strings(&["{}", r#"{"format": 1, "global_step": 3}"#]);
            s.push(state_seed());
            s
        }
        "checkpoint-state" => strings(&[
            "model_checkpoint_path: \"ckpt-20/model.ckpt\"\n\
             all_model_checkpoint_paths: \"ckpt-10/model.ckpt\"\n\
             all_model_checkpoint_paths: \"ckpt-20/model.ckpt\"\n",
            "model_checkpoint_path: \"model.ckpt-20\"\nall_model_checkpoint_timestamps: 1.5\n",
            "# c\nmodel_checkpoint_path: \"a\\\"b\\\\c\\n\"\n",
        ]),
        "index-footer" => vec![footer_seed(60), footer_seed(0), vec![0; 48]],
        other => panic!("no seeds for {other}"),
    }
}

/// Tokens worth inserting: structure of the formats and boundary numbers.
const DICT: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"\"",
    b"=",
    b"@",
    b"/",
    b"\n",
    b" ",
    b"#",
    b"{}",
    b"[]",
    b"null",
    b"-1",
    b"0",
    b"1e308",
    b"NaN",
    b"+Inf",
    b"-0",
    b"18446744073709551615",
    b"9223372036854775808",
    b"\\u0000",
    "\u{f6}".as_bytes(),
    b"localhost",
    b"127.0.0.1",
    b"[::1]",
    b":65536",
    b"job:",
    b"task:",
    b"device:",
    b"cpu=",
    b"workers=",
    b"\"cluster\"",
    b"\"task\"",
    b"\"inputs\"",
    b"# TYPE x gauge\n",
    b"# HELP x h\n",
    b"{a=\"b\"}",
    b"stat=\"last\"",
    b"\x0a\xff\xff\xff\xff\x0f",
];

fn mutate(rng: &mut StdRng, seeds: &[Vec<u8>], input: &mut Vec<u8>) {
    let n = rng.gen_range(1..=6);
    for _ in 0..n {
        let len = input.len();
        match rng.gen_range(0..10) {
            0 if len > 0 => {
                let i = rng.gen_range(0..len);
                input[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.gen_range(0..len);
                input[i] = rng.gen();
            }
            2 => {
                let i = rng.gen_range(0..=len);
                let k = rng.gen_range(1..=8);
                let bytes: Vec<u8> = (0..k).map(|_| rng.gen()).collect();
                input.splice(i..i, bytes);
            }
            3 if len > 0 => {
                let a = rng.gen_range(0..len);
                let b = (a + rng.gen_range(1..=64)).min(len);
                input.drain(a..b);
            }
            4 if len > 0 => {
                let a = rng.gen_range(0..len);
                let b = (a + rng.gen_range(1..=64)).min(len);
                let piece = input[a..b].to_vec();
                let at = rng.gen_range(0..=len);
                input.splice(at..at, piece);
            }
            5 => {
                let tok = DICT[rng.gen_range(0..DICT.len())];
                let i = rng.gen_range(0..=len);
                input.splice(i..i, tok.iter().copied());
            }
            6 if len > 0 => input.truncate(rng.gen_range(0..len)),
            7 => {
                // Splice a piece of another seed.
                let other = &seeds[rng.gen_range(0..seeds.len())];
                if !other.is_empty() {
                    let a = rng.gen_range(0..other.len());
                    let b = (a + rng.gen_range(1..=256)).min(other.len());
                    let i = rng.gen_range(0..=len);
                    input.splice(i..i, other[a..b].iter().copied());
                }
            }
            8 if len > 0 => {
                // A digit run replaced by a boundary number.
                let i = rng.gen_range(0..len);
                if input[i].is_ascii_digit() {
                    let mut j = i;
                    while j < input.len() && input[j].is_ascii_digit() {
                        j += 1;
                    }
                    let num = [
                        "0",
                        "-1",
                        "65536",
                        "4294967296",
                        "1e400",
                        "99999999999999999999",
                    ][rng.gen_range(0..6)];
                    input.splice(i..j, num.bytes());
                }
            }
            _ => {
                // A varint-looking byte run (protobuf lengths and tags).
                let i = rng.gen_range(0..=len);
                let v: u64 = rng.gen::<u64>() >> rng.gen_range(0..64);
                let mut bytes = Vec::new();
                let mut x = v;
                while x >= 0x80 {
                    bytes.push((x as u8) | 0x80);
                    x >>= 7;
                }
                bytes.push(x as u8);
                input.splice(i..i, bytes);
            }
        }
    }
    input.truncate(MAX_INPUT);
}

struct Outcome {
    execs: u64,
    seconds: f64,
    crashes: u64,
    slow: u64,
}

/// What every parser's run shares: its budget and where problems go.
struct Budget {
    seconds: Duration,
    max_execs: u64,
    out_dir: PathBuf,
    last_panic: Arc<Mutex<String>>,
}

fn fuzz(name: &str, target: Target, seeds: &[Vec<u8>], seed: u64, run: &Budget) -> Outcome {
    let (budget, max_execs, out_dir, last_panic) =
        (run.seconds, run.max_execs, &run.out_dir, &run.last_panic);
    let mut rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();
    let (mut execs, mut crashes, mut slow) = (0u64, 0u64, 0u64);
    let mut input = Vec::new();
    // The seeds themselves first, then mutations.
    let mut pending = seeds.to_vec();
    while execs < max_execs && (execs % 256 != 0 || started.elapsed() < budget) {
        input.clear();
        match pending.pop() {
            Some(s) => input.extend_from_slice(&s),
            None => {
                input.extend_from_slice(&seeds[rng.gen_range(0..seeds.len())]);
                mutate(&mut rng, seeds, &mut input);
            }
        }
        let t = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| target(&input)));
        let took = t.elapsed();
        execs += 1;
        let problem = if result.is_err() {
            crashes += 1;
            Some(format!(
                "panic: {}",
                last_panic.lock().map(|m| m.clone()).unwrap_or_default()
            ))
        } else if took > SLOW {
            slow += 1;
            Some(format!("slow: {took:?}"))
        } else {
            None
        };
        if let Some(p) = problem {
            let _ = std::fs::create_dir_all(out_dir);
            let file = out_dir.join(format!("{name}-{execs}.bin"));
            let _ = std::fs::write(&file, &input);
            eprintln!("{name}: {p} (input saved to {})", file.display());
        }
    }
    Outcome {
        execs,
        seconds: started.elapsed().as_secs_f64(),
        crashes,
        slow,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut seconds, mut max_execs, mut seed) = (60.0_f64, 1_000_000_u64, 0x5eed_u64);
    let mut only = Vec::new();
    while let Some(a) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .unwrap_or_else(|| panic!("{flag} needs a value"))
        };
        match a.as_str() {
            "--seconds" => seconds = value("--seconds").parse().expect("--seconds S"),
            "--execs" => max_execs = value("--execs").parse().expect("--execs N"),
            "--seed" => seed = value("--seed").parse().expect("--seed N"),
            other => only.push(other.to_string()),
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf();
    let out_dir = root.join("target/fuzz-stable");
    // Panics are expected to be caught and counted: keep their message, print nothing.
    let last_panic = Arc::new(Mutex::new(String::new()));
    {
        let last = last_panic.clone();
        std::panic::set_hook(Box::new(move |info| {
            if let Ok(mut m) = last.lock() {
                *m = info.to_string();
            }
        }));
    }
    let budget = Budget {
        seconds: Duration::from_secs_f64(seconds),
        max_execs,
        out_dir: out_dir.clone(),
        last_panic,
    };
    let targets: [(&str, Target); 11] = [
        ("graphdef", graphdef),
        ("cluster-spec", cluster_spec),
        ("device-name", device_name),
        ("tf-config", tf_config),
        ("synthetic", synthetic),
        ("exposition", exposition),
        ("sidecar", sidecar),
        ("measurements", measurements),
        ("train-state", train_state),
        ("checkpoint-state", checkpoint_state),
        ("index-footer", index_footer),
    ];
    let mut failed = false;
    println!(
        "{:<16} {:>10} {:>8} {:>12} {:>7} {:>5} {:>6}",
        "parser", "execs", "seconds", "execs/s", "seeds", "slow", "panics"
    );
    for (i, (name, target)) in targets.iter().enumerate() {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let seeds = seeds_for(name, &root);
        assert!(!seeds.is_empty(), "{name}: no seeds");
        let o = fuzz(name, *target, &seeds, seed.wrapping_add(i as u64), &budget);
        println!(
            "{:<16} {:>10} {:>8.1} {:>12.0} {:>7} {:>5} {:>6}",
            name,
            o.execs,
            o.seconds,
            o.execs as f64 / o.seconds.max(1e-9),
            seeds.len(),
            o.slow,
            o.crashes
        );
        failed |= o.crashes > 0 || o.slow > 0;
    }
    if failed {
        eprintln!("fuzz: failures (inputs in {})", out_dir.display());
        std::process::exit(1);
    }
}
