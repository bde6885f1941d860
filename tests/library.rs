//! The library's entry point on TensorFlow's gRPC runtime, with real worker processes on
//! 127.0.0.1: a connection from an emulated cluster (and from its TF_CONFIG file), per-op
//! placement of a graph across tasks, and data-parallel plans and training through the same door.

mod common;

use std::path::Path;

use common::cluster::{connection, serial};
use tf_iaware::runtime::adapt::AdaptOptions;
use tf_iaware::TrainOptions;
use tf_iaware::{Error, Job, Run, Step, TrainingOptions};

#[test]
fn data_parallel_plans_and_training_come_through_the_connection() {
    let _one = serial();
    let connection = connection("workers=1,1");
    assert!(connection.tf_config().is_some());
    assert!(connection.spec().starts_with("emulated:"));

    // A strategy is typed: a name converts through FromStr, which refuses a per-op one.
    let e = "heft"
        .parse::<tf_iaware::parallel::DataParallelStrategy>()
        .expect_err("heft is not a data-parallel strategy");
    assert!(matches!(e, Error::UnknownStrategy { .. }), "{e}");
    assert!(e.to_string().contains("replica-setter"), "{e}");
    assert!(matches!(
        connection.plan_data_parallel("nosuch", "replica-setter".parse().unwrap(), None),
        Err(Error::UnknownModel { .. })
    ));

    let planned = connection
        .plan_data_parallel("mlp", "replica-setter".parse().unwrap(), Some(32))
        .unwrap();
    let shares: Vec<usize> = planned.plan().replicas.iter().map(|r| r.batch).collect();
    assert_eq!(shares, vec![16, 16]);
    let report = planned
        .train(&TrainOptions {
            steps: 3,
            warmup: 1,
            checkpoint_every: 2,
            ..TrainOptions::default()
        })
        .unwrap();
    assert_eq!(report.global_batch, 32);
    assert_eq!(report.train.losses.len(), 4);
    assert!(report.train.loss_last < report.train.loss_first);
    assert!(report.recoveries.is_empty());
    assert!(report.checkpoint_bytes > 0);
    assert_eq!(report.train.mismatches, vec![]);
    // Re-planning around a lost worker keeps the global batch on the one left.
    let (workers, ps) =
        tf_iaware::runtime::data_parallel::worker_and_ps_devices(connection.cluster()).unwrap();
    let after = planned.replan(&workers[..1], &ps).unwrap();
    assert_eq!(after.global_batch(), 32);
    assert_eq!(after.replicas.len(), 1);
}

#[test]
fn checkpoints_need_a_tf_config_cluster() {
    let connection = tf_iaware::connect("local:cpu=2").unwrap();
    // Local devices have no ps tasks: planning is refused before anything runs.
    assert!(connection
        .plan_data_parallel("mlp", "replica-setter".parse().unwrap(), Some(8))
        .is_err());
}

#[test]
fn a_graph_placed_over_tasks_runs_where_it_was_placed() {
    let _one = serial();
    let connection = connection("workers=1,1");
    let dir = tempfile::tempdir().unwrap();
    let path = common::model(dir.path(), "mlp", 16);
    let analyzed = tf_iaware::load_graph(&path).unwrap();
    let step = Step::new().target("train").fetch("loss");
    let plan = connection
        .place_with(
            analyzed,
            &step,
            "round-robin",
            &tf_iaware::PlanOptions::default(),
        )
        .unwrap();
    let tasks: std::collections::BTreeSet<&str> = plan
        .placement()
        .placed()
        .map(|(_, d)| plan.cluster().devices[d].name.as_str())
        .filter_map(|d| d.split("/device:").next())
        .collect();
    assert!(tasks.len() >= 2, "spread over tasks: {tasks:?}");
    let session = plan.session().unwrap();
    session.run(Run::new().target("init")).unwrap();
    let sidecar = tf_iaware::graph::Sidecar::load(&path.with_extension("json")).unwrap();
    let feeds: Vec<(String, tf_iaware::tensorflow::Tensor<f32>)> = sidecar
        .inputs
        .iter()
        .map(|(name, shape)| {
            let dims: Vec<u64> = shape.iter().map(|&d| d.max(1) as u64).collect();
            let mut t = tf_iaware::tensorflow::Tensor::<f32>::new(&dims);
            if sidecar.one_hot.contains(name) {
                let classes = *dims.last().unwrap() as usize;
                for row in t.chunks_mut(classes) {
                    row[0] = 1.0;
                }
            }
            (name.clone(), t)
        })
        .collect();
    let mut run = Run::of(&step).traced();
    for (name, t) in &feeds {
        run = run.feed(name.as_str(), t);
    }
    let mut out = session.run(run).unwrap();
    assert!(out.scalar::<f32>("loss").unwrap().is_finite());
    let check = session.verify(&out).unwrap();
    assert!(check.is_ok(), "{:?}", check.mismatches);
    assert!(check.executed.len() >= 2, "{:?}", check.executed);
}

/// A graph with a dynamic batch (`[-1, …]` inputs, exported from Python) is priced at the batch
/// the plan options give, through the library's entry point: its placeholders are pinned before
/// shape inference, so the plan's graph and its cost carry that many samples.
#[test]
fn a_dynamic_batch_is_priced_through_the_connection() {
    let connection = tf_iaware::connect("local:cpu=2").unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tf1_mlp_sparse.pb");
    // Priced over the training step, as `simulate` does with the graph's sidecar.
    let sidecar = tf_iaware::graph::Sidecar::load(&path.with_extension("json")).unwrap();
    let step = Step::from_sidecar(&sidecar);
    let placed_flops = |batch: Option<usize>| {
        let options = tf_iaware::PlanOptions {
            batch,
            ..Default::default()
        };
        let analyzed = tf_iaware::load_graph(&path).unwrap();
        let plan = connection
            .place_with(analyzed, &step, "single-fastest", &options)
            .unwrap();
        let flops: u64 = plan.report().devices.values().map(|d| d.flops).sum();
        (plan, flops)
    };
    let (_, one) = placed_flops(None);
    let (plan, pinned) = placed_flops(Some(256));
    // The batch-independent updates stay; the rest grows with the batch.
    assert!(
        pinned > 50 * one,
        "{pinned} FLOPs at 256 against {one} at one"
    );
    let input = plan.analyzed().op_graph.id("x").unwrap();
    let shape = plan.analyzed().op_graph.node(input).outputs[0]
        .shape
        .clone();
    assert_eq!(shape.and_then(|s| s.first().copied()), Some(256));
    let bad = tf_iaware::PlanOptions {
        batch: Some(0),
        ..Default::default()
    };
    let err = connection
        .place_with(
            tf_iaware::load_graph(&path).unwrap(),
            &Step::new(),
            "heft",
            &bad,
        )
        .unwrap_err();
    assert!(err.to_string().contains("batch"), "{err}");
}

fn python_workload(name: &str) -> tf_iaware::runtime::replicated::Workload {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let analyzed = tf_iaware::load_graph(&dir.join(format!("{name}.pb"))).unwrap();
    let mut sidecar = tf_iaware::graph::Sidecar::load(&dir.join(format!("{name}.json"))).unwrap();
    // No `one_hot` or `label` key: the labels are found from the cross-entropy.
    sidecar.one_hot.clear();
    sidecar.label = None;
    tf_iaware::runtime::replicated::Workload::graph(name, analyzed, sidecar).unwrap()
}

#[test]
fn a_python_graph_trains_data_parallel_through_the_connection() {
    let _one = serial();
    let connection = connection("workers=1,0.3");
    let planned = connection
        .plan_data_parallel(
            python_workload("tf1_cnn_adam"),
            "replica-setter".parse().unwrap(),
            None,
        )
        .unwrap();
    // The graph's fixed batch (8) is the global batch by default.
    assert_eq!(planned.plan().global_batch(), 8);
    let report = planned
        .train(&TrainOptions {
            steps: 3,
            warmup: 1,
            checkpoint_every: 0,
            ..TrainOptions::default()
        })
        .unwrap();
    assert_eq!(report.model, "tf1_cnn_adam");
    assert!(report
        .train
        .losses
        .iter()
        .all(|l| l.is_finite() && *l > 0.0));
    assert_eq!(report.train.mismatches, vec![]);
    // Variables and their Adam updates ran on the ps; each replica on its worker.
    let ran = tf_iaware::runtime::stats::executed_nodes(report.train.step_stats.as_ref().unwrap());
    let (workers, ps) =
        tf_iaware::runtime::data_parallel::worker_and_ps_devices(connection.cluster()).unwrap();
    assert!(
        ran[&ps[0]].iter().any(|n| n.contains("Adam")),
        "{:?}",
        ran[&ps[0]]
    );
    assert!(ran[&workers[0]].iter().any(|n| n.starts_with("replica_0/")));
    assert!(ran[&workers[1]].iter().any(|n| n.starts_with("replica_1/")));
}

#[test]
fn run_trains_a_python_graph_data_parallel_from_the_command_line() {
    let _one = serial();
    let graph = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tf1_mlp_momentum.pb"
    );
    let out = common::ok(&[
        "run",
        "--graph",
        graph,
        "--cluster",
        "emulated:workers=1,0.5",
        "--strategy",
        "replica-setter",
        "--steps",
        "3",
        "--batch",
        "16",
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["strategy"], "replica-setter");
    assert_eq!(report["global_batch"], 16);
    assert_eq!(report["plan"]["replicas"].as_array().unwrap().len(), 2);
    assert!(report["loss_last"].as_f64().unwrap() < report["loss_first"].as_f64().unwrap());
    // --parallel model places the same graph op by op instead.
    let out = common::ok(&[
        "run",
        "--graph",
        graph,
        "--cluster",
        "local:cpu=2",
        "--strategy",
        "heft",
        "--parallel",
        "model",
        "--steps",
        "2",
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["strategy"], "heft");
    // A zoo model is data-parallel only.
    let e = common::fails(&["run", "--model", "mlp", "--parallel", "model"]);
    assert!(e.contains("--graph"), "{e}");
    // A data-parallel strategy needs ps tasks.
    let e = common::fails(&[
        "run",
        "--graph",
        graph,
        "--cluster",
        "local:cpu=2",
        "--parallel",
        "data",
        "--strategy",
        "replica-setter",
    ]);
    assert!(e.contains("ps"), "{e}");
}

#[test]
fn bench_compares_strategies_on_a_python_graph() {
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let graph = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tf1_mlp_momentum.pb"
    );
    common::ok(&[
        "bench",
        "--graph",
        graph,
        "--scenario",
        "workers=1,0.3",
        "--strategies",
        "replica-setter,infra-aware",
        "--steps",
        "2",
        "--repeats",
        "1",
        "--warmup",
        "1",
        "--batch",
        "24",
        "--json",
        json.to_str().unwrap(),
    ]);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(report["model"]
        .as_str()
        .unwrap()
        .ends_with("tf1_mlp_momentum.pb"));
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        let shares: usize = r["plan"]["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["batch"].as_u64().unwrap() as usize)
            .sum();
        assert_eq!(shares, 24, "{r}");
        assert!(r["loss_last"].as_f64().unwrap().is_finite());
    }
    // A per-op strategy at another batch than the graph's fixed one is refused up front.
    let e = common::fails(&["bench", "--graph", graph, "--strategies", "heft"]);
    assert!(e.contains("fixed batch of 8"), "{e}");
    // So are a zero batch and an unwritable report, before any cluster starts.
    assert!(common::fails(&["bench", "--batch", "0"]).contains("--batch"));
    let e = common::fails(&["bench", "--json", "/nonexistent/dir/bench.json"]);
    assert!(e.contains("/nonexistent/dir/bench.json"), "{e}");
}

#[test]
fn adaptive_training_of_a_python_graph_comes_through_the_connection() {
    let _one = serial();
    let mut connection = connection("workers=1,0.5");
    // Live figures are read on connecting and again on refresh.
    assert!(connection
        .cluster()
        .devices
        .iter()
        .any(|d| d.live.has_reading()));
    assert!(connection.refresh().is_empty(), "every agent answers");
    let options = TrainingOptions {
        steps: Some(5),
        epochs: None,
        adapt: Some(AdaptOptions::default()),
        ..TrainingOptions::default()
    };
    let workload = python_workload("tf1_mlp_momentum");
    let job = Job::synthetic(&workload, 256, 3).unwrap();
    // An uncalibrated plan has nothing to re-plan from: refused, naming adaptation.
    let stock = connection
        .plan_data_parallel(&workload, "replica-setter".parse().unwrap(), Some(16))
        .unwrap();
    match stock.fit(&job, &options) {
        Err(Error::InvalidArgument { what, .. }) => assert_eq!(what, "adaptation"),
        other => panic!("{other:?}"),
    }
    let infra_aware = "infra-aware".parse().unwrap();
    // By default nothing stops the job: no cached calibration, so the plan starts from each
    // worker's nominal figures at its live availability, every worker measured by training.
    tf_iaware::runtime::calibrate::invalidate_workers(
        &workload,
        tf_iaware::data_parallel_planner(&workload, infra_aware, connection.cluster(), Some(16))
            .unwrap()
            .probe()
            .into(),
        connection.cluster(),
        &workers_of(&connection),
        &ps_of(&connection),
    )
    .unwrap();
    let learning = connection
        .plan_data_parallel(&workload, infra_aware, Some(16))
        .unwrap();
    assert!(learning.calibration().is_none());
    assert_eq!(
        learning.plan().replicas.len(),
        2,
        "every worker is measured"
    );
    assert_eq!(learning.plan().global_batch(), 16);
    // A calibration before the first step, when asked for (and cached).
    let planned = connection
        .plan_data_parallel_with(
            &workload,
            infra_aware,
            &tf_iaware::DataParallelOptions {
                global_batch: Some(16),
                calibration: tf_iaware::WorkerCalibrationPolicy::Measure,
            },
        )
        .unwrap();
    // The benchmark plans through the same planner: on the same inputs, the same plan.
    let same =
        tf_iaware::data_parallel_planner(&workload, infra_aware, connection.cluster(), Some(16))
            .unwrap()
            .with_calibration(planned.calibration().unwrap().to_vec());
    assert_eq!(&same, planned.planner());
    assert_eq!(&same.plan(connection.cluster()).unwrap(), planned.plan());
    // Probes of 2, 4 and 8 samples on each worker, then the whole batch of 16 on the fastest
    // (the share it would get alone).
    let calibration = planned.calibration().expect("infra-aware is calibrated");
    assert!(
        calibration
            .iter()
            .all(|c| c.probed_batches.starts_with(&[2, 4, 8])),
        "{calibration:?}"
    );
    assert!(
        calibration.iter().any(|c| c.probed_batches.contains(&16)),
        "{calibration:?}"
    );
    // The cache it wrote (unless co-tenants contended for a worker) is used at once from now
    // on, by default.
    let cached = connection
        .plan_data_parallel(&workload, infra_aware, Some(16))
        .unwrap();
    let in_cache = tf_iaware::runtime::calibrate::cached_workers(
        &workload,
        &workers_of(&connection),
        &ps_of(&connection),
        connection.cluster(),
        same.probe().into(),
    )
    .unwrap();
    assert_eq!(
        cached.calibration(),
        in_cache.as_ref().map(|c| c.capacity.as_slice())
    );
    let report = planned.fit(&job, &options).unwrap();
    assert_eq!(report.updates, 5);
    assert_eq!(report.plan.global_batch(), 16);
    let t = report.step_ms.expect("synchronous steps are timed");
    assert!(
        t.p10 > 0.0 && t.p10 <= t.median && t.median <= t.p90,
        "{t:?}"
    );
    assert!(report.loss_last.is_some_and(|l| l.is_finite() && l > 0.0));
    // Every re-plan keeps the global batch.
    for r in &report.replans {
        assert_eq!(r.shares.iter().map(|s| s.1).sum::<usize>(), 16, "{r:?}");
    }
}

#[test]
fn an_interrupted_run_removes_its_temporary_folder() {
    let _one = serial();
    let mut child = common::bin()
        .args([
            "run",
            "--model",
            "mlp",
            "--cluster",
            "emulated:workers=1,1",
            "--strategy",
            "replica-setter",
            "--steps",
            "100000",
            "--checkpoint-every",
            "0",
        ])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Its emulated cluster's folder names it as the owner.
    let mine = |dir: &std::path::Path| {
        std::fs::read_to_string(dir.join("owner.pid"))
            .is_ok_and(|p| p.trim() == child.id().to_string())
    };
    let find = || {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| mine(p))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let folder = loop {
        if let Some(f) = find() {
            break f;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run never started its cluster"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    // Let it register its processes, then interrupt it.
    std::thread::sleep(std::time::Duration::from_secs(3));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(!folder.exists(), "{} is left behind", folder.display());
}

/// The worker devices of `connection`'s cluster.
fn workers_of(connection: &tf_iaware::Connection) -> Vec<String> {
    tf_iaware::runtime::data_parallel::worker_and_ps_devices(connection.cluster())
        .unwrap()
        .0
}

/// The first ps device of `connection`'s cluster.
fn ps_of(connection: &tf_iaware::Connection) -> String {
    tf_iaware::runtime::data_parallel::worker_and_ps_devices(connection.cluster())
        .unwrap()
        .1[0]
        .clone()
}
