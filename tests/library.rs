//! The library's entry point on TensorFlow's gRPC runtime, with real worker processes on
//! 127.0.0.1: a connection from an emulated cluster (and from its TF_CONFIG file), per-op
//! placement of a graph across tasks, and data-parallel plans and training through the same door.

mod common;

use tf_iaware::emulate::{EmulatedCluster, Scenario};
use tf_iaware::pipeline::{Connection, TrainOptions};
use tf_iaware::{Error, Run, Step};

/// Cluster tests start several TensorFlow processes each: one at a time on a 2-core machine.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn data_parallel_plans_and_training_come_through_the_connection() {
    let _one = serial();
    let scenario = Scenario::parse("workers=1,1").unwrap();
    let connection =
        Connection::from_emulated(EmulatedCluster::start(&scenario, &common::exe()).unwrap())
            .unwrap();
    assert!(connection.tf_config().is_some());
    assert!(connection.spec().starts_with("emulated:"));

    let e = connection
        .plan_data_parallel("mlp", "heft", Some(32))
        .err()
        .expect("heft is not a data-parallel strategy");
    assert!(matches!(e, Error::UnknownStrategy { .. }), "{e}");
    assert!(e.to_string().contains("replica-setter"), "{e}");
    assert!(matches!(
        connection.plan_data_parallel("nosuch", "replica-setter", None),
        Err(Error::UnknownModel { .. })
    ));

    let planned = connection
        .plan_data_parallel("mlp", "replica-setter", Some(32))
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
        .plan_data_parallel("mlp", "replica-setter", Some(8))
        .is_err());
}

#[test]
fn a_graph_placed_over_tasks_runs_where_it_was_placed() {
    let _one = serial();
    let scenario = Scenario::parse("workers=1,1").unwrap();
    let connection =
        Connection::from_emulated(EmulatedCluster::start(&scenario, &common::exe()).unwrap())
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = common::model(dir.path(), "mlp", 16);
    let analyzed = tf_iaware::pipeline::load_graph(&path).unwrap();
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
        .devices
        .values()
        .filter_map(|d| d.split("/device:").next())
        .collect();
    assert!(tasks.len() >= 2, "spread over tasks: {tasks:?}");
    let session = plan.session().unwrap();
    session.run(Run::new().target("init")).unwrap();
    let sidecar = tf_iaware::runtime::Sidecar::load(&path.with_extension("json")).unwrap();
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
