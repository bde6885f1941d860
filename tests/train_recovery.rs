//! Training the user's job through lost tasks (`TrainingOptions::recover`): a worker killed
//! mid-run is re-planned around and the run still applies every update it was asked for; a
//! parameter server killed and restarted at its address (its variables gone) is waited for and
//! training goes on from the driver's latest copy of the variables. Real worker processes on
//! 127.0.0.1; the faults land at an update count, never at a time; structure asserted.

#[path = "common/own_job.rs"]
mod own_job;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use own_job::job;
use tf_iaware::cluster::tf_config::TaskId;
use tf_iaware::parallel::{DataParallelStrategy, Updates};
use tf_iaware::runtime::trainer::{OnProgress, RecoverOptions, TrainingOptions, TrainingReport};
use tf_iaware::{Connection, Error};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

const STEPS: u64 = 120;

/// A fault: once this many updates are applied, this runs on the cluster, the trainer waiting
/// after that update until it has.
type Fault = (u64, Box<dyn FnOnce(&mut EmulatedCluster) + Send>);

/// Trains the own job with `strategy` on `cluster` for `steps` updates, `faults` landing at
/// their update counts (the cluster's processes are this test's).
fn train_through(
    cluster: &mut EmulatedCluster,
    strategy: DataParallelStrategy,
    recover: Option<RecoverOptions>,
    steps: u64,
    faults: Vec<Fault>,
) -> tf_iaware::Result<TrainingReport> {
    let tf_config = cluster.tf_config().clone();
    let master = TaskId {
        job: "ps".into(),
        index: 0,
    };
    let mut connection =
        Connection::from_running("emulated:test", tf_config.clone(), &master, Box::new(()))
            .unwrap();
    // A lost task fails a run within seconds, not at the default deadlines.
    let config = connection.session_config_mut();
    config.operation_timeout_ms = 3_000;
    config.run_timeout_ms = 20_000;
    let (job, _) = job();
    let planned = connection
        .plan_data_parallel(job.workload(), &strategy.to_string(), Some(32))
        .unwrap();
    // (updates applied, faults landed); the trainer's callback holds the steps at a fault's
    // update until it has landed.
    let shared = Arc::new((Mutex::new((0u64, 0usize)), Condvar::new()));
    let at: Vec<u64> = faults.iter().map(|f| f.0).collect();
    let seen = shared.clone();
    let options = TrainingOptions {
        steps: Some(steps),
        epochs: None,
        max_seconds: Some(600.0),
        seed: 5,
        own_masters: matches!(strategy.updates(), Updates::Async | Updates::Adaptive)
            .then(|| tf_config.clone()),
        recover,
        progress: Some(OnProgress::every_step(move |p| {
            let (lock, cv) = &*seen;
            let mut s = lock.lock().unwrap();
            s.0 = p.updates;
            cv.notify_all();
            let deadline = Instant::now() + Duration::from_secs(120);
            while at.get(s.1).is_some_and(|&u| p.updates >= u) && Instant::now() < deadline {
                s = cv.wait_timeout(s, Duration::from_millis(100)).unwrap().0;
            }
        })),
        ..TrainingOptions::default()
    };
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let (lock, cv) = &*shared;
            for (update, fault) in faults {
                let mut s = lock.lock().unwrap();
                while s.0 < update && !done.load(Ordering::SeqCst) {
                    s = cv.wait_timeout(s, Duration::from_millis(100)).unwrap().0;
                }
                drop(s);
                fault(cluster);
                lock.lock().unwrap().1 += 1;
                cv.notify_all();
            }
            // A task restarted from this thread dies with it (the emulated servers ask for
            // SIGKILL when the thread that started them exits): stay until training ends.
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        // The connection stays on this thread.
        let report = planned.fit(&job, &options);
        done.store(true, Ordering::SeqCst);
        // Reported, not asserted (timings): the notebook's trainer-recovery page quotes them.
        if let Ok(r) = &report {
            for x in &r.recoveries {
                eprintln!(
                    "{strategy}: recovered at update {} from losing {:?} in {:.2} s, from update {} ({} redone)",
                    x.update, x.lost, x.seconds, x.restored_from, x.redone
                );
            }
            for x in &r.readmissions {
                eprintln!(
                    "{strategy}: took back {:?} at update {} in {:.2} s",
                    x.workers, x.update, x.seconds
                );
            }
            eprintln!(
                "{strategy}: {} updates in {:.1} s of training, {} deadline retries",
                r.updates, r.train_seconds, r.deadline_retries
            );
        }
        shared.1.notify_all();
        report
    })
}

/// Cluster tests start several TensorFlow processes each: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn start(scenario: &str) -> EmulatedCluster {
    let exe = Path::new(env!("CARGO_BIN_EXE_tf-iaware"));
    EmulatedCluster::start(&Scenario::parse(scenario).unwrap(), exe).unwrap()
}

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
            vec![(30, Box::new(|c: &mut EmulatedCluster| c.kill_worker(2)))],
        )
        .unwrap_or_else(|e| panic!("{strategy}: {e}"));
        // Synchronous: exactly the updates asked for. Asynchronous workers step on their own
        // between two checks of the bound: at least as many.
        if strategy.updates() == Updates::Sync {
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
        assert!(
            r.lost
                .iter()
                .any(|d| d.contains("/job:worker/replica:0/task:2")),
            "{strategy}: {r:?}"
        );
        assert!(r.update >= 30, "{strategy}: {r:?}");
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
        assert!(report.loss_last.is_some_and(f32::is_finite), "{strategy}");
        // It still learns: held-out accuracy above chance (four classes: 0.25), as tests/trainer.rs.
        assert!(
            report.final_metric.is_some_and(|a| a > 0.4),
            "{strategy}: {:?}",
            report.final_metric
        );
    }
}

#[test]
fn a_restarted_ps_is_waited_for_and_training_goes_on_from_the_drivers_copy() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5");
    let report = train_through(
        &mut cluster,
        DataParallelStrategy::ReplicaSetter,
        Some(RecoverOptions {
            every_updates: 10,
            ps_wait: Duration::from_secs(60),
            ..RecoverOptions::default()
        }),
        STEPS,
        vec![(
            40,
            Box::new(|c: &mut EmulatedCluster| {
                c.kill_ps(0);
                c.restart_ps(0).unwrap();
            }),
        )],
    )
    .unwrap();
    assert_eq!(report.updates, STEPS);
    assert_eq!(report.recoveries.len(), 1, "{:?}", report.recoveries);
    let r = &report.recoveries[0];
    assert!(r.lost.iter().any(|d| d.contains("/job:ps")), "{r:?}");
    // The ps's variables were gone: back to the latest copy, at most 10 updates old.
    assert!(r.restored_from <= r.update && r.redone <= 10, "{r:?}");
    assert!(r.restored_from >= 30, "{r:?}");
    assert!(report.final_metric.is_some_and(|a| a > 0.4));
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
        vec![(30, Box::new(|c: &mut EmulatedCluster| c.stop_worker(1)))],
    );
    cluster.continue_worker(1);
    let report = report.unwrap();
    assert_eq!(report.updates, STEPS);
    assert_eq!(report.recoveries.len(), 1, "{:?}", report.recoveries);
    let r = &report.recoveries[0];
    assert!(
        r.lost
            .iter()
            .any(|d| d.contains("/job:worker/replica:0/task:1")),
        "{r:?}"
    );
    assert_eq!(report.plan.replicas.len(), 1, "{:?}", report.plan);
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
        vec![(10, Box::new(|c: &mut EmulatedCluster| c.kill_worker(1)))],
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
            (30, Box::new(|c: &mut EmulatedCluster| c.kill_worker(2))),
            // A cluster manager restarts it at its address.
            (
                60,
                Box::new(|c: &mut EmulatedCluster| c.restart_worker(2).unwrap()),
            ),
            // The trainer held twice after the restart (a probe that was in flight ends during
            // the first hold, the next one runs during the second): the probe beside training
            // finds the worker back before the remaining updates are done, however fast this
            // machine steps.
            (
                61,
                Box::new(|_: &mut EmulatedCluster| std::thread::sleep(Duration::from_secs(3))),
            ),
            (
                62,
                Box::new(|_: &mut EmulatedCluster| std::thread::sleep(Duration::from_secs(3))),
            ),
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
