//! Training the user's job through lost workers (`TrainingOptions::recover`): a worker killed
//! mid-run, killed during a step or right at a safe point, or stopped (SIGSTOP) is re-planned
//! around and the run still applies every update it was asked for, and a stopped worker that
//! continues, or a killed one restarted, is taken back; a step past its deadline while every
//! task answers is retried, not dropped. Lost parameter servers are tests/train_recovery_ps.rs.
//! Real worker processes on 127.0.0.1; the faults land at an update count, never at a time;
//! structure asserted.

#[path = "common/own_job.rs"]
mod own_job;
#[path = "common/recovery.rs"]
mod recovery;

use std::time::{Duration, Instant};

use recovery::{
    agent_answers, at, device_of, python_job, serial, start, train_job, train_through,
    while_training, Training, STEPS,
};
use tf_iaware::parallel::{DataParallelStrategy, Updates};
use tf_iaware::runtime::liveness::HangDetection;
use tf_iaware::runtime::trainer::RecoverOptions;
use tf_iaware::Error;

#[test]
fn a_lost_worker_is_re_planned_around_and_every_update_is_applied() {
    let _one = serial();
    for strategy in [
        DataParallelStrategy::ReplicaSetter,
        DataParallelStrategy::AsyncPs,
    ] {
        let mut cluster = start("workers=0.5,0.5,0.5");
        let report = train_through(
            &mut cluster,
            strategy,
            Some(RecoverOptions::default()),
            STEPS,
            vec![at(30, |c| c.kill_worker(2))],
        )
        .unwrap_or_else(|e| panic!("{strategy}: {e}"));
        let sync = strategy.updates() == Updates::Sync;
        // Synchronous: exactly the updates asked for. Asynchronous workers step on their own
        // between two checks of the bound: at least as many.
        if sync {
            assert_eq!(report.updates, STEPS, "{strategy}");
        } else {
            assert!(report.updates >= STEPS, "{strategy}: {}", report.updates);
        }
        assert_eq!(
            report.recoveries.len(),
            1,
            "{strategy}: {:?}",
            report.recoveries
        );
        let r = &report.recoveries[0];
        assert_eq!(
            r.lost,
            vec![device_of(&report, "worker", 2)],
            "{strategy}: {r:?}"
        );
        // The kill landed while the trainer waited after update 30: the next synchronous
        // step failed (asynchronous workers may have stepped further).
        if sync {
            assert_eq!(r.update, 30, "{strategy}: {r:?}");
        } else {
            assert!(r.update >= 30, "{strategy}: {r:?}");
        }
        // Only a worker was lost: training went on from the variables on the ps.
        assert_eq!(r.redone, 0, "{strategy}: {r:?}");
        assert_eq!(
            report.plan.replicas.len(),
            2,
            "{strategy}: {:?}",
            report.plan
        );
        assert!(report
            .plan
            .replicas
            .iter()
            .all(|p| !p.device.contains("task:2")));
        assert_eq!(
            report.plan.global_batch(),
            32,
            "{strategy}: the global batch is kept"
        );
        assert!(report.loss_last.is_some_and(f32::is_finite), "{strategy}");
        assert!(
            report
                .loss_first
                .zip(report.loss_last)
                .is_some_and(|(first, last)| last < first),
            "{strategy}: training went on from the ps state: {:?} → {:?}",
            report.loss_first,
            report.loss_last
        );
        // It still learns: held-out accuracy above chance (four classes: 0.25), as tests/trainer.rs.
        assert!(
            report.final_metric.is_some_and(|a| a > 0.4),
            "{strategy}: {:?}",
            report.final_metric
        );
    }
}

#[test]
fn a_hung_worker_is_dropped_once_its_step_passes_the_run_deadline() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5");
    let report = train_through(
        &mut cluster,
        DataParallelStrategy::ReplicaSetter,
        Some(RecoverOptions::default()),
        STEPS,
        // SIGSTOP: its port still completes handshakes, its agent is silent.
        vec![at(30, |c| c.stop_worker(1))],
    );
    cluster.continue_worker(1);
    let report = report.unwrap();
    assert_eq!(report.updates, STEPS, "no update lost or applied twice");
    assert_eq!(report.recoveries.len(), 1, "{:?}", report.recoveries);
    let r = &report.recoveries[0];
    assert_eq!(r.lost, vec![device_of(&report, "worker", 1)], "{r:?}");
    // Stopped while the trainer waited after update 30: the next step hung.
    assert_eq!(r.update, 30, "{r:?}");
    // The variables on the ps survived: nothing redone.
    assert_eq!(r.redone, 0, "{r:?}");
    assert_eq!(report.plan.replicas.len(), 1, "{:?}", report.plan);
    assert!(!report.plan.replicas[0].device.contains("task:1"));
    assert_eq!(report.plan.global_batch(), 32, "the global batch is kept");
    assert!(report.loss_last.is_some_and(f32::is_finite));
}

#[test]
fn without_recovery_a_lost_worker_ends_the_run_with_tensorflows_error() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5");
    match train_through(
        &mut cluster,
        DataParallelStrategy::ReplicaSetter,
        None,
        STEPS,
        vec![at(10, |c| c.kill_worker(1))],
    ) {
        Err(Error::TensorFlow { .. }) | Err(Error::TaskDown { .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_lost_worker_that_comes_back_is_taken_back() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5,0.5");
    let report = train_through(
        &mut cluster,
        DataParallelStrategy::ReplicaSetter,
        Some(RecoverOptions::default()),
        300,
        vec![
            at(30, |c| c.kill_worker(2)),
            // A cluster manager restarts it at its address.
            at(60, |c| c.restart_worker(2).unwrap()),
            // The trainer held twice after the restart (a probe that was in flight ends during
            // the first hold, the next one runs during the second): the probe beside training
            // finds the worker back before the remaining updates are done, however fast this
            // machine steps.
            at(61, |_| std::thread::sleep(Duration::from_secs(3))),
            at(62, |_| std::thread::sleep(Duration::from_secs(3))),
        ],
    )
    .unwrap();
    assert_eq!(report.updates, 300);
    assert_eq!(report.recoveries.len(), 1, "{:?}", report.recoveries);
    assert_eq!(report.readmissions.len(), 1, "{:?}", report.readmissions);
    let back = &report.readmissions[0];
    assert!(back.update >= 60, "{back:?}");
    assert!(back.workers[0].contains("task:2"), "{back:?}");
    assert_eq!(back.shares.len(), 3, "{back:?}");
    assert_eq!(report.plan.replicas.len(), 3, "{:?}", report.plan);
    assert!(report.final_metric.is_some_and(|a| a > 0.4));
}

#[test]
fn a_stopped_worker_that_continues_is_taken_back_into_the_plan() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5,0.5");
    let report = train_through(
        &mut cluster,
        DataParallelStrategy::ReplicaSetter,
        Some(RecoverOptions::default()),
        STEPS,
        vec![
            // SIGSTOP: its port still completes handshakes, its agent is silent; the next step
            // hangs and the worker is dropped.
            at(30, |c| c.stop_worker(2)),
            // The first update without it: it runs again (SIGCONT), and the fault lands once
            // its agent answers.
            at(31, |c| {
                c.continue_worker(2);
                let waited = Instant::now();
                while !agent_answers(c, 2) && waited.elapsed() < Duration::from_secs(60) {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }),
            // As in `a_lost_worker_that_comes_back_is_taken_back`: the probe beside training
            // finds it back while the trainer holds, however fast this machine steps.
            at(32, |_| std::thread::sleep(Duration::from_secs(3))),
            at(33, |_| std::thread::sleep(Duration::from_secs(3))),
        ],
    );
    cluster.continue_worker(2);
    let report = report.unwrap();
    let stopped = device_of(&report, "worker", 2);
    assert_eq!(report.updates, STEPS, "every update applied once");
    assert_eq!(report.recoveries.len(), 1, "{:?}", report.recoveries);
    let hung = &report.recoveries[0];
    assert_eq!(hung.update, 30, "{hung:?}");
    assert_eq!(hung.lost, vec![stopped.clone()], "{hung:?}");
    assert_eq!(hung.shares.len(), 2, "dropped while stopped: {hung:?}");
    assert_eq!(hung.redone, 0, "nothing redone: the ps kept the variables");
    assert_eq!(report.readmissions.len(), 1, "{:?}", report.readmissions);
    let back = &report.readmissions[0];
    assert_eq!(back.workers, vec![stopped.clone()], "{back:?}");
    assert!(back.update >= 31, "not before it answered: {back:?}");
    assert_eq!(back.shares.len(), 3, "{back:?}");
    assert_eq!(report.plan.replicas.len(), 3, "worker 2 trains again");
    assert!(report.plan.replicas.iter().any(|r| r.device == stopped));
    assert_eq!(report.plan.global_batch(), 32);
    assert!(report.loss_last.is_some_and(f32::is_finite));
}

#[test]
fn a_worker_killed_during_a_step_or_right_at_a_safe_point_is_recovered_from() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5,0.5");
    let steps = 30;
    // A copy of the variables after every update.
    let every_updates = 1;
    let report = train_through(
        &mut cluster,
        DataParallelStrategy::ReplicaSetter,
        Some(RecoverOptions {
            every_updates,
            ..RecoverOptions::default()
        }),
        steps,
        vec![
            // Lands in update 4's copy of the variables or a step after it, whichever runs
            // then: training must go on.
            while_training(4, |c| c.kill_worker(1)),
            // Lands right before update 10's copy.
            at(10, |c| c.kill_worker(2)),
        ],
    )
    .unwrap();
    let (one, two) = (
        device_of(&report, "worker", 1),
        device_of(&report, "worker", 2),
    );
    assert_eq!(report.updates, steps, "no update lost or applied twice");
    // One recovery each (both in one, had a loaded machine delayed the first kill until the
    // trainer held after update 10).
    let lost: Vec<&String> = report.recoveries.iter().flat_map(|r| &r.lost).collect();
    assert_eq!(lost.len(), 2, "{:?}", report.recoveries);
    assert!(lost.contains(&&one) && lost.contains(&&two), "{lost:?}");
    for r in &report.recoveries {
        assert!(
            r.redone <= every_updates,
            "at most the copies' interval is redone: {r:?}"
        );
    }
    let find = |d: &String| {
        report
            .recoveries
            .iter()
            .find(|r| r.lost.contains(d))
            .unwrap()
    };
    assert!(find(&one).update >= 4, "{:?}", report.recoveries);
    assert_eq!(find(&two).update, 10, "{:?}", report.recoveries);
    assert_eq!(report.plan.replicas.len(), 1, "{:?}", report.plan);
    assert!(report.plan.replicas[0].device.contains("task:0"));
    assert_eq!(report.plan.global_batch(), 32, "the global batch is kept");
    assert!(report.loss_last.is_some_and(f32::is_finite));
}

#[test]
fn a_step_past_its_deadline_with_every_worker_alive_is_retried_not_dropped() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5");
    // Deadlines far below any step (a loaded machine, seen from the driver): every first try
    // of a step after the session's first two passes its deadline while both agents answer.
    let hang = HangDetection {
        floor: Duration::from_millis(2),
        factor: 0.0,
        max_retries: 16,
        ..HangDetection::default()
    };
    let steps = 8;
    let report = train_through(
        &mut cluster,
        DataParallelStrategy::ReplicaSetter,
        Some(RecoverOptions {
            hang,
            ..RecoverOptions::default()
        }),
        steps,
        vec![],
    )
    .unwrap();
    assert!(report.deadline_retries > 0, "some step passed its deadline");
    assert!(
        report.recoveries.is_empty(),
        "nobody was dropped: {:?}",
        report.recoveries
    );
    assert!(report.readmissions.is_empty(), "{:?}", report.readmissions);
    assert_eq!(report.updates, steps);
    assert_eq!(report.plan.replicas.len(), 2, "{:?}", report.plan);
    assert!(report.loss_last.is_some_and(f32::is_finite));
}

#[test]
fn a_python_graph_is_re_planned_around_a_lost_worker() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5,0.5");
    let steps = 40;
    let training = Training {
        job: python_job(),
        strategy: DataParallelStrategy::ReplicaSetter,
        batch: 24,
        steps,
        recover: Some(RecoverOptions::default()),
        checkpoints: None,
    };
    let trained = train_job(&mut cluster, &training, vec![at(3, |c| c.kill_worker(2))]).unwrap();
    let report = &trained.report;
    assert_eq!(report.updates, steps, "every update applied once");
    assert_eq!(report.recoveries.len(), 1, "{:?}", report.recoveries);
    let r = &report.recoveries[0];
    assert_eq!(r.lost, vec![device_of(report, "worker", 2)], "{r:?}");
    // Training went on from the variables on the ps.
    assert_eq!((r.update, r.restored_from, r.redone), (3, 3, 0), "{r:?}");
    // The two workers left share the global batch.
    assert_eq!(report.plan.replicas.len(), 2, "{:?}", report.plan);
    assert!(report
        .plan
        .replicas
        .iter()
        .all(|p| !p.device.contains("task:2")));
    assert_eq!(report.plan.global_batch(), 24);
    trained.assert_learns();
}
