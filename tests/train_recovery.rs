//! Training the user's job through lost tasks (`TrainingOptions::recover`): a worker killed
//! mid-run is re-planned around and the run still applies every update it was asked for; a
//! parameter server killed and restarted at its address (its variables gone) is waited for and
//! training goes on from the driver's latest copy of the variables. Real worker processes on
//! 127.0.0.1; the faults land at an update count, never at a time; structure asserted.

#[path = "common/own_job.rs"]
mod own_job;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use own_job::job;
use tf_iaware::cluster::tf_config::TaskId;
use tf_iaware::parallel::{DataParallelStrategy, Updates};
use tf_iaware::runtime::trainer::{OnProgress, RecoverOptions, TrainingOptions, TrainingReport};
use tf_iaware::{Connection, Error};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

const STEPS: u64 = 120;

/// Trains the own job with `strategy` on `cluster` for [`STEPS`] updates; once `fault_at`
/// updates are applied, `fault` runs on this thread (the cluster's processes are this test's).
fn train_through(
    cluster: &mut EmulatedCluster,
    strategy: DataParallelStrategy,
    recover: Option<RecoverOptions>,
    fault_at: u64,
    fault: impl FnOnce(&mut EmulatedCluster) + Send,
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
    let updates = Arc::new(AtomicU64::new(0));
    let seen = updates.clone();
    let options = TrainingOptions {
        steps: Some(STEPS),
        epochs: None,
        max_seconds: Some(600.0),
        seed: 5,
        own_masters: matches!(strategy.updates(), Updates::Async | Updates::Adaptive)
            .then(|| tf_config.clone()),
        recover,
        progress: Some(OnProgress::every_step(move |p| {
            seen.store(p.updates, Ordering::SeqCst);
        })),
        ..TrainingOptions::default()
    };
    // The connection stays on this thread; the fault lands from another once `fault_at`
    // updates are applied (or training ended first).
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let started = Instant::now();
            while updates.load(Ordering::SeqCst) < fault_at
                && !done.load(Ordering::SeqCst)
                && started.elapsed() < Duration::from_secs(300)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            fault(cluster);
            // A task restarted from this thread dies with it (the emulated servers ask for
            // SIGKILL when the thread that started them exits): stay until training ends.
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let report = planned.fit(&job, &options);
        done.store(true, Ordering::SeqCst);
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
            30,
            |c| c.kill_worker(2),
        )
        .unwrap_or_else(|e| panic!("{strategy}: {e}"));
        // Asynchronous workers still in flight at the bound apply their updates too.
        assert!(
            (STEPS..=STEPS + 3).contains(&report.updates),
            "{strategy}: {}",
            report.updates
        );
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
        // It still learns: held-out accuracy above chance (two classes).
        assert!(
            report.final_metric.is_some_and(|a| a > 0.6),
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
        40,
        |c| {
            c.kill_ps(0);
            c.restart_ps(0).unwrap();
        },
    )
    .unwrap();
    assert_eq!(report.updates, STEPS);
    assert_eq!(report.recoveries.len(), 1, "{:?}", report.recoveries);
    let r = &report.recoveries[0];
    assert!(r.lost.iter().any(|d| d.contains("/job:ps")), "{r:?}");
    // The ps's variables were gone: back to the latest copy, at most 10 updates old.
    assert!(r.restored_from <= r.update && r.redone <= 10, "{r:?}");
    assert!(r.restored_from >= 30, "{r:?}");
    assert!(report.final_metric.is_some_and(|a| a > 0.6));
}

#[test]
fn a_hung_worker_is_dropped_once_its_step_passes_the_run_deadline() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5");
    let report = train_through(
        &mut cluster,
        DataParallelStrategy::ReplicaSetter,
        Some(RecoverOptions::default()),
        30,
        // SIGSTOP: its port still completes handshakes, its agent is silent.
        |c| c.stop_worker(1),
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
        10,
        |c| c.kill_worker(1),
    ) {
        Err(Error::TensorFlow { .. }) | Err(Error::TaskDown { .. }) => {}
        other => panic!("{other:?}"),
    }
}
