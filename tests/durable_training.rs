//! Durable training through the library: a run writes TensorFlow-format checkpoints and a
//! TensorBoard log; the checkpoint restores into a plain session of the user's own single-tower
//! graph; a second run given the same directory resumes (update count, evaluations, clock) under
//! another strategy; a third with nothing left to train evaluates the restored variables to the
//! same held-out accuracy. Real worker processes on 127.0.0.1; structure asserted, never time.

#[path = "common/own_job.rs"]
mod own_job;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use own_job::job;
use tf_iaware::durable::events::{event_files, read_scalars};
use tf_iaware::durable::{
    read_bundle, read_variables, restore_graph, CheckpointDir, HostTensor as DurableTensor,
    NamedTensor, TrainState,
};
use tf_iaware::parallel::{DataParallelStrategy, Updates};
use tf_iaware::runtime::trainer::{CheckpointOptions, OnProgress};
use tf_iaware::TrainingOptions;
use tf_iaware_emulate::{EmulatedCluster, Scenario};

#[test]
fn a_run_checkpoints_logs_and_resumes_and_its_model_loads_into_the_users_graph() {
    let exe = Path::new(env!("CARGO_BIN_EXE_tf-iaware"));
    let scenario = Scenario::parse("workers=0.6,0.3").unwrap();
    let cluster = EmulatedCluster::start(&scenario, exe).unwrap();
    let tf_config = cluster.tf_config().clone();
    let connection = cluster.into_connection().unwrap();
    let (job, graph_def) = job();
    let dir = tempfile::tempdir().unwrap();
    let (ckpt, logdir) = (dir.path().join("ckpt"), dir.path().join("logs"));
    let options = |steps: u64, strategy: DataParallelStrategy| TrainingOptions {
        // Updates, not seconds: a busy machine takes longer, not less far.
        steps: Some(steps),
        epochs: None,
        max_seconds: Some(300.0),
        eval_every_s: 1.0,
        seed: 3,
        own_masters: matches!(strategy.updates(), Updates::Async | Updates::Adaptive)
            .then(|| tf_config.clone()),
        checkpoints: Some(CheckpointOptions {
            every_steps: Some(20),
            every_seconds: None,
            keep: 2,
            ..CheckpointOptions::new(&ckpt)
        }),
        logdir: Some(logdir.clone()),
        ..TrainingOptions::default()
    };
    let fit = |strategy: DataParallelStrategy, options: &TrainingOptions| {
        connection
            .plan_data_parallel(job.workload(), strategy, Some(32))
            .unwrap()
            .fit(&job, options)
            .unwrap()
    };

    // A first run: 60 updates, a checkpoint every 20, the last two kept.
    let calls = Arc::new(AtomicU64::new(0));
    let seen = calls.clone();
    let first = fit(
        DataParallelStrategy::ReplicaSetter,
        &TrainingOptions {
            progress: Some(OnProgress::new(move |p| {
                assert!(p.updates <= 60 && p.epochs >= 0.0);
                seen.fetch_add(1, Ordering::Relaxed);
            })),
            ..options(60, DataParallelStrategy::ReplicaSetter)
        },
    );
    assert_eq!(first.updates, 60);
    assert!(first.resumed_from.is_none());
    let steps: Vec<u64> = first.checkpoints.iter().map(|c| c.step).collect();
    assert_eq!(steps, [20, 40, 60]);
    let on_disk: Vec<u64> = CheckpointDir::open(&ckpt, 2)
        .unwrap()
        .list()
        .unwrap()
        .iter()
        .map(|c| c.step)
        .collect();
    assert_eq!(on_disk, [60, 40], "the last two kept, newest first");
    assert!(calls.load(Ordering::Relaxed) > 0 || first.train_seconds < 0.25);

    let prefix = &first.checkpoints[2].prefix;
    restores_into_the_users_graph(&graph_def, prefix);

    // The same directory again, another strategy, 40 more updates: it carries on from 60.
    let second = fit(
        DataParallelStrategy::AsyncPs,
        &options(100, DataParallelStrategy::AsyncPs),
    );
    let from = second.resumed_from.as_ref().expect("resumed");
    assert_eq!(from.step, 60);
    assert_eq!(&from.prefix, prefix);
    assert!(second.updates >= 100, "{}", second.updates);
    assert!(second.train_seconds >= from.train_seconds);
    // The first run's evaluations are part of the job's history.
    assert!(second.evaluations.len() > first.evaluations.len());
    assert!(second.evaluations[0].updates <= 60);
    assert_eq!(
        second.checkpoints.last().map(|c| c.step),
        Some(second.updates)
    );

    // Nothing left to train: the restored variables alone give the same held-out accuracy.
    let third = fit(
        DataParallelStrategy::ReplicaSetter,
        &options(100, DataParallelStrategy::ReplicaSetter),
    );
    assert_eq!(
        third.resumed_from.as_ref().map(|r| r.step),
        Some(second.updates)
    );
    assert_eq!(third.updates, second.updates);
    assert!(
        third.checkpoints.is_empty(),
        "no new state, no new checkpoint"
    );
    assert_eq!(third.final_metric, second.final_metric);

    one_event_file_per_run(&logdir);
}

/// The checkpoint at `prefix` restores into a plain session of the user's own graph, every
/// variable from the file, under the user's names.
fn restores_into_the_users_graph(graph_def: &[u8], prefix: &Path) {
    let saved = read_bundle(prefix).unwrap();
    let mut restored = restore_graph(graph_def, prefix).unwrap();
    let names: BTreeSet<String> = saved.iter().map(|t| t.name.clone()).collect();
    assert_eq!(
        names,
        BTreeSet::from(["hidden/b", "hidden/w", "logits/b", "logits/w"].map(String::from))
    );
    assert_eq!(
        read_variables(&mut restored.graph, &restored.session).unwrap(),
        saved
    );
}

/// One event file per run (three), with the trainer's tags at update steps: the first run's at
/// steps 0 to 60, the resumed run's from 60.
fn one_event_file_per_run(logdir: &Path) {
    let files = event_files(logdir).unwrap();
    assert_eq!(files.len(), 3, "{files:?}");
    let points = read_scalars(&files[0]).unwrap();
    let tags: BTreeSet<&str> = points.iter().map(|p| p.tag.as_str()).collect();
    for tag in [
        "held_out/accuracy",
        "loss",
        "plan/replans",
        "throughput/images_per_sec",
    ] {
        assert!(tags.contains(tag), "{tag} in {tags:?}");
    }
    assert!(tags.iter().any(|t| t.starts_with("share/")), "{tags:?}");
    assert!(points.iter().all(|p| (0..=60).contains(&p.step)));
    let resumed: Vec<i64> = read_scalars(&files[1])
        .unwrap()
        .iter()
        .map(|p| p.step)
        .collect();
    assert!(resumed.iter().all(|&s| s >= 60), "{resumed:?}");
}

#[test]
fn a_checkpoint_of_another_graph_is_refused_naming_the_variable() {
    let exe = Path::new(env!("CARGO_BIN_EXE_tf-iaware"));
    let scenario = Scenario::parse("workers=0.5").unwrap();
    let cluster = EmulatedCluster::start(&scenario, exe).unwrap();
    let connection = cluster.into_connection().unwrap();
    let (job, _) = job();
    let dir = tempfile::tempdir().unwrap();
    // A checkpoint of every variable, `hidden/w` with another shape.
    let tensor = |name: &str, dims: &[u64]| {
        let n = dims.iter().product::<u64>() as usize;
        NamedTensor::new(name, DurableTensor::float(dims, &vec![0.0; n]).unwrap())
    };
    let tensors = [
        tensor("hidden/b", &[32]),
        tensor("hidden/w", &[16, 8]),
        tensor("logits/b", &[4]),
        tensor("logits/w", &[32, 4]),
    ];
    CheckpointDir::open(dir.path(), 1)
        .unwrap()
        .save(&TrainState::at_step(7), &tensors)
        .unwrap();
    let options = TrainingOptions {
        steps: Some(5),
        epochs: None,
        checkpoints: Some(CheckpointOptions::new(dir.path())),
        ..TrainingOptions::default()
    };
    let e = connection
        .plan_data_parallel(job.workload(), "replica-setter".parse().unwrap(), Some(32))
        .unwrap()
        .fit(&job, &options)
        .unwrap_err()
        .to_string();
    assert!(e.contains("hidden/w") && e.contains("shape"), "{e}");
}

/// Points the open file descriptor of `path` at `/dev/full`: from now on every write to it fails
/// with ENOSPC, as on a full disk (the writer's own file handle, not a stand-in).
fn fill_disk_under(path: &Path) {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut swapped = 0;
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        if std::fs::read_link(entry.path()).is_ok_and(|target| target == path) {
            let fd: i32 = entry.file_name().to_str().unwrap().parse().unwrap();
            // SAFETY: dup2(2) onto a descriptor of this process that names `path`.
            assert!(unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&full), fd) } >= 0);
            swapped += 1;
        }
    }
    assert_eq!(swapped, 1, "one descriptor of {}", path.display());
}

#[test]
fn a_log_that_cannot_be_written_warns_and_training_goes_on_to_its_report_and_checkpoint() {
    let exe = Path::new(env!("CARGO_BIN_EXE_tf-iaware"));
    let scenario = Scenario::parse("workers=0.5").unwrap();
    let connection = EmulatedCluster::start(&scenario, exe)
        .unwrap()
        .into_connection()
        .unwrap();
    let (job, _) = job();
    let dir = tempfile::tempdir().unwrap();
    let (ckpt, logdir) = (dir.path().join("ckpt"), dir.path().join("logs"));
    let filled = Arc::new(AtomicU64::new(0));
    let (at, seen) = (filled.clone(), logdir.clone());
    let options = TrainingOptions {
        steps: Some(60),
        epochs: None,
        max_seconds: Some(300.0),
        eval_every_s: 0.2,
        checkpoints: Some(CheckpointOptions::new(&ckpt)),
        logdir: Some(logdir.clone()),
        // At update 20 the disk under the log fills up.
        progress: Some(OnProgress::every_step(move |p| {
            if p.updates >= 20 && at.load(Ordering::SeqCst) == 0 {
                fill_disk_under(&event_files(&seen).unwrap()[0]);
                at.store(p.updates, Ordering::SeqCst);
            }
        })),
        ..TrainingOptions::default()
    };
    let report = connection
        .plan_data_parallel(job.workload(), "replica-setter".parse().unwrap(), Some(32))
        .unwrap()
        .fit(&job, &options)
        .expect("a log that cannot be written does not end training");
    let filled = filled.load(Ordering::SeqCst);
    assert!(filled >= 20, "the disk filled at update {filled}");
    assert_eq!(report.updates, 60);
    assert!(report.final_metric.is_some());
    // The final checkpoint, on another disk, is written.
    assert_eq!(report.checkpoints.last().map(|c| c.step), Some(60));
    // The report says what the log lost; the file keeps whole records, all from before.
    let lost = report.events_lost.as_ref().expect("events_lost");
    assert!(lost.writes >= 1 && lost.first_update >= filled, "{lost:?}");
    assert!(lost.error.contains("No space left"), "{lost:?}");
    let file = report.event_file.as_ref().unwrap();
    let points = read_scalars(file).unwrap();
    assert!(!points.is_empty());
    assert!(points.iter().all(|p| p.step as u64 <= filled), "{points:?}");
}

#[test]
fn held_out_accuracy_reads_the_logits_the_metric_names() {
    // A sidecar without `logits`: the default metric would be the loss; the user names the
    // logits in `with_metric`, and evaluations must fetch those (they fetched the sidecar's,
    // an empty name, and failed).
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let dir = tempfile::tempdir().unwrap();
    let meta = dir.path().join("no_logits.json");
    std::fs::write(
        &meta,
        r#"{"inputs": {"x": [-1, 32], "y": [-1]}, "init": "init", "train": "train", "loss": "loss"}"#,
    )
    .unwrap();
    let job = tf_iaware::Job::load(
        &fixtures.join("tf1_mlp_sparse.pb"),
        Some(&meta),
        &fixtures.join("tf1_mlp_sparse_train.npz"),
    )
    .unwrap()
    .with_held_out_file(&fixtures.join("tf1_mlp_sparse_held_out.npz"))
    .unwrap();
    assert_eq!(job.metric().map(|m| m.name()), Some("loss"));
    let job = job
        .with_metric(tf_iaware::Metric::Accuracy {
            logits: "scores".into(),
            label: "y".into(),
        })
        .unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_tf-iaware"));
    let cluster = EmulatedCluster::start(&Scenario::parse("workers=1").unwrap(), exe).unwrap();
    let connection = cluster.into_connection().unwrap();
    // Four updates of `strategy` through the door, `own_masters` left to it.
    let fit = |strategy: DataParallelStrategy| {
        connection
            .plan_data_parallel(job.workload(), strategy, Some(8))
            .unwrap()
            .fit(
                &job,
                &TrainingOptions {
                    steps: Some(4),
                    ..TrainingOptions::default()
                },
            )
            .unwrap()
    };
    let report = fit(DataParallelStrategy::ReplicaSetter);
    let last = report.evaluations.last().expect("a final evaluation");
    assert!((0.0..=1.0).contains(&last.metric), "{last:?}");
    assert_eq!(report.metric.as_deref(), Some("accuracy"));
    assert!(!report.own_masters, "synchronous steps have one master");
    // Asynchronous steps through the door run on each worker's own server without being told
    // (`own_masters` left `None`), as `train` runs them.
    let report = fit(DataParallelStrategy::AsyncPs);
    assert!(report.own_masters);
    // Asynchronous workers finish the steps they started: at least the bound.
    assert!(report.updates >= 4, "{}", report.updates);
}
