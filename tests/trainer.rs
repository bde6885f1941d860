//! The data-parallel trainer as a user calls it through the library: a graph of their own
//! (built with the `tensorflow` crate: int64 labels, fed placeholders) and rows of their own in
//! memory, planned and trained over an emulated two-worker cluster (real worker processes on
//! 127.0.0.1) with every data-parallel strategy, evaluated on held-out rows. Structure and
//! above-chance accuracy are asserted, never time.

#[path = "common/own_job.rs"]
mod own_job;

use std::path::Path;

use own_job::{graph, job};
use tf_iaware::data::{HostTensor, InMemory};
use tf_iaware::parallel::{DataParallelStrategy, Updates};
use tf_iaware::{Job, TrainingOptions};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

#[test]
fn every_strategy_trains_a_users_graph_on_the_users_rows() {
    let exe = Path::new(env!("CARGO_BIN_EXE_tf-iaware"));
    let scenario = Scenario::parse("workers=0.6,0.3").unwrap();
    let cluster = EmulatedCluster::start(&scenario, exe).unwrap();
    let tf_config = cluster.tf_config().clone();
    let connection = cluster.into_connection().unwrap();
    let (job, _) = job();
    assert_eq!(job.metric().map(|m| m.name()), Some("accuracy"));
    for strategy in DataParallelStrategy::all() {
        job.check_updates(strategy.updates()).unwrap();
        let planned = connection
            .plan_data_parallel(job.workload(), strategy, Some(32))
            .unwrap();
        eprintln!(
            "{strategy}: shares {:?}",
            planned
                .plan()
                .replicas
                .iter()
                .map(|r| r.batch)
                .collect::<Vec<_>>()
        );
        let options = TrainingOptions {
            // A number of updates, not of seconds: a busy machine takes longer, not less far.
            steps: Some(200),
            max_seconds: Some(300.0),
            epochs: None,
            eval_every_s: 3.0,
            seed: 5,
            own_masters: matches!(strategy.updates(), Updates::Async | Updates::Adaptive)
                .then(|| tf_config.clone()),
            ..TrainingOptions::default()
        };
        let r = planned.fit(&job, &options).unwrap();
        eprintln!(
            "{strategy}: {} updates, accuracy {:?}, workers {:?}",
            r.updates,
            r.final_metric,
            r.workers
                .iter()
                .map(|w| (w.batch, w.steps))
                .collect::<Vec<_>>()
        );
        assert_eq!(r.strategy, strategy);
        assert!(r.updates > 0 && !r.evaluations.is_empty(), "{strategy}");
        // Four classes: chance is 0.25.
        assert!(
            r.final_metric.is_some_and(|a| a > 0.4),
            "{strategy} learns the task: {:?}",
            r.final_metric
        );
        // Every worker with a share read its own rows.
        let read: u64 = r.workers.iter().map(|w| w.samples).sum();
        assert_eq!(read, r.samples, "{strategy}");
        // Backup workers push gradients without fetching a loss.
        if !matches!(strategy.updates(), Updates::Backup { .. }) {
            assert!(r.loss_last.is_some_and(f32::is_finite), "{strategy}");
        }
    }
}

#[test]
fn data_that_does_not_fit_the_graph_is_refused_before_tensorflow_sees_it() {
    let (analyzed, sidecar) = graph();
    // Labels as float: the graph takes int64.
    let wrong = InMemory::from_tensors(
        "wrong.npz",
        [
            (
                "x",
                HostTensor::new(vec![4, 16], vec![0.0f32; 64].into()).unwrap(),
            ),
            (
                "labels",
                HostTensor::new(vec![4], vec![0.0f32; 4].into()).unwrap(),
            ),
        ],
    )
    .unwrap();
    let err = Job::new("own model", analyzed, sidecar, Box::new(wrong)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("labels") && msg.contains("wrong.npz"), "{msg}");
    // A strategy name with a typo lists the known ones.
    let typo = "replica-seter".parse::<DataParallelStrategy>().unwrap_err();
    assert!(typo.to_string().contains("replica-setter"), "{typo}");
}
