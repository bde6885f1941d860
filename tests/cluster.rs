//! Distributed training on TensorFlow's gRPC runtime with real worker processes on 127.0.0.1:
//! synchronous data parallelism, shares that follow capacity, clean teardown, and clear errors
//! for bad TF_CONFIG. Training through lost tasks is tests/train_recovery.rs (workers) and
//! tests/train_recovery_ps.rs (parameter servers).

mod common;

use common::cluster::{serial, Fixture};
use common::exe;
use tf_iaware::models::replicated;
use tf_iaware::parallel::{self, InfraAwareOptions};
use tf_iaware::runtime::calibrate::WorkerProbe;
use tf_iaware::runtime::data_parallel;
use tf_iaware::runtime::stats::executed_nodes;
use tf_iaware_emulate::{EmulatedCluster, Scenario};

fn alive(pid: u32) -> bool {
    // A zombie counts as gone: it holds no resources but its table entry.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

#[test]
fn two_workers_one_ps_train_synchronously_with_variables_on_the_ps() {
    let _one = serial();
    // Worker 1 gets a quarter of worker 0's CPU (where cgroups are writable).
    let Fixture {
        cluster,
        devices,
        config,
        workers,
        ps,
    } = Fixture::start("workers=0.6,0.15");
    if let Some(why) = &cluster.quota_warning {
        eprintln!("note: {why}");
    }
    assert_eq!((workers.len(), ps.len()), (2, 1));
    let vars = replicated::variables("mlp").unwrap();

    let stock = parallel::replica_setter(&workers, &ps, &vars, 32).unwrap();
    let report = data_parallel::train("mlp", &stock, &devices, &config, 6, 0, 1).unwrap();
    assert!(report.losses.iter().all(|l| l.is_finite()));
    assert!(
        report.loss_last < report.loss_first,
        "a fixed synthetic batch is learned: {:?}",
        report.losses
    );
    assert_eq!(
        report.mismatches,
        vec![],
        "every op ran where it was placed"
    );
    // Variables and their updates ran on the ps; each replica's forward pass on its worker.
    let ran = executed_nodes(report.step_stats.as_ref().unwrap());
    let on_ps = &ran[&ps[0]];
    assert!(
        on_ps.iter().any(|n| n == "SGD/update_dense/kernel"),
        "{on_ps:?}"
    );
    assert!(!ran[&workers[0]].iter().any(|n| n.starts_with("SGD/")));
    assert!(ran[&workers[0]].iter().any(|n| n.starts_with("replica_0/")));
    assert!(ran[&workers[1]].iter().any(|n| n.starts_with("replica_1/")));

    if cluster.quota_warning.is_none() {
        // Probes of 2, 4 and 8 samples, then the fastest worker at the whole batch of 32 (the
        // most any plan gives it, and four times the probe).
        let probe = WorkerProbe {
            batch: 8,
            min_seconds: 0.5,
            global_batch: Some(32),
        };
        let cal =
            data_parallel::calibrate_workers("mlp", &workers, &ps[0], &devices, &config, probe)
                .unwrap();
        assert!(
            cal.iter().all(|c| c.probed_batches.starts_with(&[2, 4, 8])),
            "{cal:?}"
        );
        assert!(
            cal.iter().any(|c| c.probed_batches.contains(&32)),
            "the fastest worker is timed at the whole batch: {cal:?}"
        );
        let ps_cap = vec![(ps[0].clone(), 1.0)];
        let options = InfraAwareOptions {
            min_gain: 0.0,
            min_relative_throughput: 0.0,
            per_replica_overhead_ms: 0.0,
        };
        let plan = parallel::infra_aware(&cal, &ps_cap, &vars, 32, &options).unwrap();
        let share = |w: &str| {
            plan.replicas
                .iter()
                .find(|r| r.device == w)
                .map_or(0, |r| r.batch)
        };
        assert!(
            share(&workers[0]) > share(&workers[1]),
            "the limited worker gets the smaller share: {:?} from {cal:?}",
            plan.replicas
        );
    }
}

#[test]
fn a_tf_config_task_that_is_not_running_is_left_out_or_named() {
    let _one = serial();
    // A `chief` entry every task knows, for a coordinator that never starts.
    let scenario = Scenario::parse("workers=0.5,0.5").unwrap();
    let cluster = EmulatedCluster::start_with(&scenario, &exe(), true).unwrap();
    let chief = cluster.chief().unwrap().to_string();
    let mut doc = cluster.tf_config().clone();
    doc.cluster.insert("chief".into(), vec![chief.clone()]);
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, doc: &tf_iaware::cluster::tf_config::TfConfig| {
        let path = dir.path().join(name);
        let json = serde_json::json!({"cluster": doc.cluster, "metrics": doc.metrics});
        std::fs::write(&path, json.to_string()).unwrap();
        format!("tf-config:{}", path.display())
    };
    // Not needed (neither the master nor a ps): training uses the tasks that answer, with a
    // warning naming the missing one.
    let spec = write("chief.json", &doc);
    let out = common::run(&[
        "run",
        "--model",
        "mlp",
        "--cluster",
        &spec,
        "--strategy",
        "replica-setter",
        "--steps",
        "2",
        "--warmup",
        "0",
        "--batch",
        "16",
        "--checkpoint-every",
        "1",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("chief:0") && stderr.contains(&chief) && stderr.contains("not running"),
        "{stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["losses"].as_array().map(Vec::len), Some(2));
    assert_eq!(report["plan"]["replicas"].as_array().map(Vec::len), Some(2));
    // A ps holds variables: a typed error naming the task and its address.
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = unused.local_addr().unwrap().to_string();
    drop(unused);
    let mut with_ps = cluster.tf_config().clone();
    with_ps.cluster.get_mut("ps").unwrap().push(gone.clone());
    let spec = write("ps.json", &with_ps);
    let err = common::fails(&[
        "run",
        "--model",
        "mlp",
        "--cluster",
        &spec,
        "--steps",
        "2",
        "--batch",
        "16",
    ]);
    assert!(
        err.contains("ps:1") && err.contains(&gone) && err.contains("does not answer"),
        "{err}"
    );
    // So is a master the caller named.
    let master = tf_iaware::cluster::tf_config::TaskId {
        job: "chief".into(),
        index: 0,
    };
    match tf_iaware::cluster::connect_tf_config_at(&doc, &master) {
        Err(tf_iaware::Error::TaskDown { task, address, .. }) => {
            assert_eq!(
                (task.as_str(), address.as_str()),
                ("chief:0", chief.as_str())
            )
        }
        other => panic!("a typed error naming the chief: {:?}", other.map(|_| ())),
    }
}

#[test]
fn teardown_leaves_no_process_or_cgroup() {
    let _one = serial();
    let scenario = tf_iaware_emulate::Scenario::parse("workers=0.3,0.3:busy=0,0.5").unwrap();
    let cluster = tf_iaware_emulate::EmulatedCluster::start(&scenario, &common::exe()).unwrap();
    let pids = cluster.process_ids();
    let groups = cluster.cgroup_paths();
    let dir = cluster.dir().to_path_buf();
    assert_eq!(pids.len(), 4, "ps, two workers and one co-tenant hog");
    assert!(pids.iter().all(|&p| alive(p)));
    if cluster.quota_warning.is_none() {
        assert_eq!(groups.len(), 2);
    }
    drop(cluster);
    for p in pids {
        assert!(!alive(p), "process {p} outlived the cluster");
    }
    for g in groups {
        assert!(!g.exists(), "cgroup {} outlived the cluster", g.display());
    }
    assert!(!dir.exists(), "{} outlived the cluster", dir.display());
}

#[test]
fn bad_tf_config_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("{\"cluster\": {\"worker\": [\"127.0.0.1\"]}}", "no :port"),
        ("{\"cluster\": {\"worker\": [\"127.0.0.1:1\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}", "not a job"),
        ("{\"cluster\": {\"worker\": [\"127.0.0.1:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 4}}", "out of range"),
        ("not json at all", "not JSON"),
    ];
    for (i, (text, needle)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("tf{i}.json"));
        std::fs::write(&path, text).unwrap();
        let p = path.to_str().unwrap();
        let err = common::fails(&["worker", "--tf-config", p]);
        assert!(
            err.contains(needle) && err.contains("TF_CONFIG"),
            "{text}: {err}"
        );
        let err = common::fails(&["devices", "--cluster", &format!("tf-config:{p}")]);
        assert!(err.contains(needle), "{text}: {err}");
    }
    // A task whose port is taken says so.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let path = dir.path().join("taken.json");
    std::fs::write(&path, format!("{{\"cluster\": {{\"worker\": [\"127.0.0.1:{port}\"]}}, \"task\": {{\"type\": \"worker\", \"index\": 0}}}}")).unwrap();
    let err = common::fails(&["worker", "--tf-config", path.to_str().unwrap()]);
    assert!(
        err.contains(&port.to_string()) && err.contains("not free"),
        "{err}"
    );
}
