//! Training the user's job through lost tasks (`TrainingOptions::recover`): a worker killed
//! mid-run, killed during a step or right at a safe point, or stopped (SIGSTOP) is re-planned
//! around and the run still applies every update it was asked for, and a stopped worker that
//! continues is taken back; a parameter server killed and restarted at its address (its
//! variables gone) is waited for, and one that does not come back has its variables and the
//! global ops moved to the other ps — training goes on from the driver's latest copy of the
//! variables (a Python-exported graph's optimizer slots included); a step past its deadline
//! while every task answers is retried, not dropped. Real worker processes on 127.0.0.1; the
//! faults land at an update count, never at a time; structure asserted.

#[path = "common/own_job.rs"]
mod own_job;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tf_iaware::cluster::tf_config::TaskId;
use tf_iaware::data::{HostTensor, InMemory};
use tf_iaware::graph::Sidecar;
use tf_iaware::parallel::{DataParallelStrategy, Updates};
use tf_iaware::runtime::liveness::HangDetection;
use tf_iaware::runtime::trainer::{CheckpointOptions, OnProgress, RecoverOptions, Recovered};
use tf_iaware::{Connection, Error};
use tf_iaware::{Job, TrainingOptions, TrainingReport};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

const STEPS: u64 = 120;

/// A fault injected into a run: once `at` updates are applied, `land` runs on the cluster.
struct Fault {
    at: u64,
    /// The trainer waits after update `at` until the fault has landed (between two steps,
    /// before that update's copy of the variables); without, training goes on meanwhile and
    /// the fault lands in whatever runs then (a step, a copy of the variables).
    hold: bool,
    land: Box<dyn FnOnce(&mut EmulatedCluster) + Send>,
}

/// `land` once `update` updates are applied, the trainer waiting after that update until it has.
fn at(update: u64, land: impl FnOnce(&mut EmulatedCluster) + Send + 'static) -> Fault {
    Fault {
        at: update,
        hold: true,
        land: Box::new(land),
    }
}

/// `land` once `update` updates are applied, while training goes on.
fn while_training(update: u64, land: impl FnOnce(&mut EmulatedCluster) + Send + 'static) -> Fault {
    Fault {
        at: update,
        hold: false,
        land: Box::new(land),
    }
}

/// What a test trains: `job`, planned with `strategy` at global batch `batch`, for `steps`
/// updates.
struct Training {
    job: Job,
    strategy: DataParallelStrategy,
    batch: usize,
    steps: u64,
    recover: Option<RecoverOptions>,
    checkpoints: Option<CheckpointOptions>,
}

impl Training {
    /// The own job (tests/common/own_job.rs) at a global batch of 32.
    fn own(strategy: DataParallelStrategy, recover: Option<RecoverOptions>, steps: u64) -> Self {
        Training {
            job: own_job::job().0,
            strategy,
            batch: 32,
            steps,
            recover,
            checkpoints: None,
        }
    }
}

/// A run's report and the loss of every step the progress callback saw, with the updates
/// applied after it (an update trained again after a recovery appears twice).
struct Trained {
    report: TrainingReport,
    losses: Vec<(u64, f32)>,
}

impl Trained {
    /// Losses of update `u`, in the order trained (the first, then any redone after a
    /// recovery).
    fn losses_of(&self, u: u64) -> Vec<f32> {
        self.losses
            .iter()
            .filter(|(at, _)| *at == u)
            .map(|&(_, l)| l)
            .collect()
    }

    /// Asserts that the loss went down: the mean of the last five steps' losses is below the
    /// first five's (one step's batch is noisy).
    fn assert_learns(&self) {
        let mean = |l: &[(u64, f32)]| l.iter().map(|(_, l)| l).sum::<f32>() / l.len() as f32;
        let n = self.losses.len();
        assert!(n >= 10, "{:?}", self.losses);
        assert!(
            mean(&self.losses[n - 5..]) < mean(&self.losses[..5]),
            "{:?}",
            self.losses
        );
    }

    /// Asserts that every update `r` trained again went on from the copy it restored: its loss
    /// redone is the one first trained there, far closer to it than to the first step's loss
    /// (from freshly initialised variables).
    fn assert_redone_from_the_copy(&self, r: &Recovered) {
        let initial = self.losses_of(1)[0];
        for u in r.restored_from + 1..=r.update {
            let l = self.losses_of(u);
            assert_eq!(l.len(), 2, "update {u} trained twice: {:?}", self.losses);
            let (first, again) = (l[0], l[1]);
            eprintln!("update {u}: loss {first}, redone {again} (first step {initial})");
            assert!(
                (again - first).abs() * 10.0 < (initial - first).abs(),
                "update {u} redone from the copy: {again} vs first {first}, initial {initial}"
            );
        }
    }
}

/// Where the faults stand: updates applied (as the callback last saw them), faults landed,
/// every step's loss.
#[derive(Default)]
struct Landing {
    updates: u64,
    landed: usize,
    losses: Vec<(u64, f32)>,
}

/// Trains `training` on `cluster`, `faults` landing at their update counts in order (the
/// cluster's processes are this test's).
fn train_job(
    cluster: &mut EmulatedCluster,
    training: &Training,
    faults: Vec<Fault>,
) -> tf_iaware::Result<Trained> {
    let strategy = training.strategy;
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
    let job = &training.job;
    let planned = connection
        .plan_data_parallel(job.workload(), strategy, Some(training.batch))
        .unwrap();
    // The trainer's callback holds the steps at a holding fault's update until it has landed.
    let shared = Arc::new((Mutex::new(Landing::default()), Condvar::new()));
    let holds: Vec<(u64, bool)> = faults.iter().map(|f| (f.at, f.hold)).collect();
    let seen = shared.clone();
    let options = TrainingOptions {
        steps: Some(training.steps),
        epochs: None,
        max_seconds: Some(600.0),
        seed: 5,
        own_masters: matches!(strategy.updates(), Updates::Async | Updates::Adaptive)
            .then(|| tf_config.clone()),
        recover: training.recover.clone(),
        checkpoints: training.checkpoints.clone(),
        // The last synchronous update is traced: what ran where after the faults.
        trace_last: true,
        progress: Some(OnProgress::every_step(move |p| {
            let (lock, cv) = &*seen;
            let mut s = lock.lock().unwrap();
            s.updates = p.updates;
            if let Some(loss) = p.loss {
                s.losses.push((p.updates, loss));
            }
            cv.notify_all();
            let deadline = Instant::now() + Duration::from_secs(120);
            while holds[s.landed.min(holds.len())..]
                .iter()
                .any(|&(u, hold)| hold && p.updates >= u)
                && Instant::now() < deadline
            {
                s = cv.wait_timeout(s, Duration::from_millis(100)).unwrap().0;
            }
        })),
        ..TrainingOptions::default()
    };
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let (lock, cv) = &*shared;
            for fault in faults {
                let mut s = lock.lock().unwrap();
                while s.updates < fault.at && !done.load(Ordering::SeqCst) {
                    s = cv.wait_timeout(s, Duration::from_millis(100)).unwrap().0;
                }
                drop(s);
                (fault.land)(cluster);
                lock.lock().unwrap().landed += 1;
                cv.notify_all();
            }
        });
        // The connection stays on this thread.
        let report = planned.fit(job, &options);
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
        let losses = std::mem::take(&mut shared.0.lock().unwrap_or_else(|p| p.into_inner()).losses);
        report.map(|report| Trained { report, losses })
    })
}

/// Trains the own job with `strategy` on `cluster` for `steps` updates, `faults` landing at
/// their update counts.
fn train_through(
    cluster: &mut EmulatedCluster,
    strategy: DataParallelStrategy,
    recover: Option<RecoverOptions>,
    steps: u64,
    faults: Vec<Fault>,
) -> tf_iaware::Result<TrainingReport> {
    train_job(cluster, &Training::own(strategy, recover, steps), faults).map(|t| t.report)
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

/// The device of `job` task `index` in `plan`'s replicas or parameter servers.
fn device_of(report: &TrainingReport, job: &str, index: usize) -> String {
    let task = format!("/job:{job}/replica:0/task:{index}/");
    let plan = &report.first_plan;
    plan.replicas
        .iter()
        .map(|r| &r.device)
        .chain(plan.variable_devices.values())
        .chain(std::iter::once(&plan.global_device))
        .find(|d| d.starts_with(&task))
        .unwrap_or_else(|| panic!("{task} in {plan:?}"))
        .clone()
}

/// The metrics agent of worker `k` answers `GET /healthz` with 200 within 1 s.
fn agent_answers(cluster: &EmulatedCluster, k: usize) -> bool {
    use std::io::{Read, Write};
    let task = TaskId {
        job: "worker".into(),
        index: k,
    };
    let Some(address) = cluster.tf_config().metrics_address(&task) else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect(address) else {
        return false;
    };
    let timeout = Some(Duration::from_secs(1));
    let _ = (s.set_read_timeout(timeout), s.set_write_timeout(timeout));
    let mut head = [0u8; 12];
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .is_ok()
        && s.read_exact(&mut head).is_ok()
        && head.ends_with(b" 200")
}

/// The Python-exported MLP with momentum (tests/fixtures/tf1_mlp_momentum.pb: 32 features, 10
/// one-hot classes; the plan replaces its fixed batch of 8) on 512 rows of a learnable task:
/// features uniform in [-1, 1), the class the largest of the first ten.
fn python_job() -> Job {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let analyzed = tf_iaware::load_graph(&dir.join("tf1_mlp_momentum.pb")).unwrap();
    let sidecar = Sidecar::load(&dir.join("tf1_mlp_momentum.json")).unwrap();
    let (n, features, classes) = (512usize, 32usize, 10usize);
    let (x, labels) = own_job::learnable(n, features, classes, 1);
    let mut y = vec![0f32; n * classes];
    for (row, &label) in labels.iter().enumerate() {
        y[row * classes + label] = 1.0;
    }
    let rows = InMemory::from_tensors(
        "train",
        [
            (
                "x",
                HostTensor::new(vec![n as u64, features as u64], x.into()).unwrap(),
            ),
            (
                "y",
                HostTensor::new(vec![n as u64, classes as u64], y.into()).unwrap(),
            ),
        ],
    )
    .unwrap();
    Job::new("tf1_mlp_momentum", analyzed, sidecar, Box::new(rows)).unwrap()
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
fn a_restarted_ps_is_waited_for_and_training_goes_on_from_the_drivers_copy() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5");
    let training = Training::own(
        DataParallelStrategy::ReplicaSetter,
        Some(RecoverOptions {
            every_updates: 10,
            ps_wait: Duration::from_secs(60),
            ..RecoverOptions::default()
        }),
        STEPS,
    );
    let trained = train_job(
        &mut cluster,
        &training,
        // The ps (it also masters the session) dies and a cluster manager restarts it at its
        // address, without the variables it held.
        vec![at(40, |c| {
            c.kill_ps(0);
            c.restart_ps(0).unwrap();
        })],
    )
    .unwrap();
    let report = &trained.report;
    assert_eq!(report.updates, STEPS, "every update applied once");
    assert_eq!(report.recoveries.len(), 1, "{:?}", report.recoveries);
    let r = &report.recoveries[0];
    assert_eq!(r.lost, vec![device_of(report, "ps", 0)], "{r:?}");
    assert_eq!(r.update, 40, "{r:?}");
    // The ps's variables were gone: back to the latest copy, at most 10 updates old.
    assert!(r.restored_from <= r.update && r.redone <= 10, "{r:?}");
    assert!(r.restored_from >= 30, "{r:?}");
    trained.assert_redone_from_the_copy(r);
    assert_eq!(report.plan.global_batch(), 32);
    trained.assert_learns();
    assert!(report.final_metric.is_some_and(|a| a > 0.4));
    // The last update ran on the restarted ps and the workers, where it was placed.
    let traced = report.traced.as_ref().expect("the last update is traced");
    assert_eq!(traced.update, STEPS);
    assert_eq!(traced.mismatches, vec![]);
    let ps0 = device_of(report, "ps", 0);
    assert!(traced.executed.contains_key(&ps0), "{:?}", traced.executed);
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
fn the_variables_and_global_ops_move_to_the_other_ps_when_the_master_ps_does_not_come_back() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5:ps=2");
    let training = Training::own(
        DataParallelStrategy::ReplicaSetter,
        Some(RecoverOptions {
            every_updates: 2,
            // Not restarted: given up on after 2 s.
            ps_wait: Duration::from_secs(2),
            ..RecoverOptions::default()
        }),
        20,
    );
    // ps 0 holds variables and the global ops, and masters the session.
    let trained = train_job(&mut cluster, &training, vec![at(3, |c| c.kill_ps(0))]).unwrap();
    let report = &trained.report;
    let (ps0, ps1) = (device_of(report, "ps", 0), device_of(report, "ps", 1));
    assert_eq!(report.first_plan.global_device, ps0);
    assert!(
        report
            .first_plan
            .variable_devices
            .values()
            .any(|d| *d == ps1),
        "variables on both: {:?}",
        report.first_plan.variable_devices
    );
    assert_eq!(report.updates, 20, "every update applied once");
    assert_eq!(report.recoveries.len(), 1, "{:?}", report.recoveries);
    let r = &report.recoveries[0];
    assert_eq!(r.lost, vec![ps0.clone()], "{r:?}");
    // Copies after updates 0, 2, 4, …: the one after update 2 restored, update 3 trained again.
    assert_eq!((r.update, r.restored_from, r.redone), (3, 2, 1), "{r:?}");
    trained.assert_redone_from_the_copy(r);
    assert!(
        report.plan.variable_devices.values().all(|d| *d == ps1),
        "every variable moved to the surviving ps: {:?}",
        report.plan.variable_devices
    );
    assert_eq!(report.plan.global_device, ps1, "the global ops too");
    assert_eq!(report.plan.replicas.len(), 2, "both workers train on");
    assert_eq!(report.plan.global_batch(), 32);
    assert!(report.loss_last.is_some_and(f32::is_finite));
}

#[test]
fn a_python_graph_keeps_every_variable_and_slot_through_a_ps_loss() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5");
    let dir = tempfile::tempdir().unwrap();
    let steps = 40;
    let training = Training {
        job: python_job(),
        strategy: DataParallelStrategy::ReplicaSetter,
        batch: 16,
        steps,
        recover: Some(RecoverOptions {
            every_updates: 2,
            ps_wait: Duration::from_secs(30),
            ..RecoverOptions::default()
        }),
        // Only the checkpoint at the end.
        checkpoints: Some(CheckpointOptions {
            every_steps: None,
            every_seconds: None,
            ..CheckpointOptions::new(dir.path())
        }),
    };
    let trained = train_job(
        &mut cluster,
        &training,
        vec![at(4, |c| {
            c.kill_ps(0);
            c.restart_ps(0).unwrap();
        })],
    )
    .unwrap();
    let report = &trained.report;
    assert_eq!(report.updates, steps, "every update applied once");
    assert_eq!(report.recoveries.len(), 1, "{:?}", report.recoveries);
    let r = &report.recoveries[0];
    assert_eq!(r.lost, vec![device_of(report, "ps", 0)], "{r:?}");
    // The fault landed before update 4's copy: back to the copy after update 2, updates 3 and
    // 4 trained again.
    assert_eq!((r.update, r.restored_from, r.redone), (4, 2, 2), "{r:?}");
    // Update 4's loss is that of the variables after update 3, which momentum moved by its
    // slots' values at update 2: equal to the first time only if the slots came back too.
    trained.assert_redone_from_the_copy(r);
    assert!(
        trained
            .losses
            .iter()
            .all(|(_, l)| l.is_finite() && *l > 0.0),
        "one-hot labels: {:?}",
        trained.losses
    );
    trained.assert_learns();
    // The checkpoint of the recovered run: the two weights and two biases and their four
    // momentum slots, all float32.
    let last = report.checkpoints.last().expect("a checkpoint at the end");
    assert_eq!(last.step, steps);
    let saved = tf_iaware::durable::read_bundle(&last.prefix).unwrap();
    let names: Vec<&str> = saved.iter().map(|t| t.name.as_str()).collect();
    let (variables, slots): (Vec<_>, Vec<_>) = saved
        .iter()
        .filter(|t| t.tensor.as_f32().is_some())
        .partition(|t| !t.name.ends_with("/Momentum"));
    assert_eq!((variables.len(), slots.len()), (4, 4), "{names:?}");
    for v in &variables {
        let slot = slots
            .iter()
            .find(|s| s.name == format!("{}/Momentum", v.name))
            .unwrap_or_else(|| panic!("{}'s slot in {names:?}", v.name));
        assert_eq!(slot.tensor.dims(), v.tensor.dims(), "{}", v.name);
    }
    let floats: usize = variables
        .iter()
        .map(|t| t.tensor.as_f32().map_or(0, <[f32]>::len))
        .sum();
    assert_eq!(floats, 32 * 64 + 64 + 64 * 10 + 10, "{names:?}");
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
