//! What the recovery tests (tests/train_recovery.rs: lost workers; tests/train_recovery_ps.rs:
//! lost parameter servers) share: faults that land at an update count, a run of the user's job
//! through them on an emulated cluster with every step's loss, and the checks on what a
//! recovery redid. The test file declares `mod own_job` (tests/common/own_job.rs) beside this.
#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tf_iaware::cluster::tf_config::TaskId;
use tf_iaware::data::{HostTensor, InMemory};
use tf_iaware::graph::Sidecar;
use tf_iaware::parallel::{DataParallelStrategy, Updates};
use tf_iaware::runtime::trainer::{CheckpointOptions, OnProgress, RecoverOptions, Recovered};
use tf_iaware::Connection;
use tf_iaware::{Job, TrainingOptions, TrainingReport};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

use super::own_job;

pub const STEPS: u64 = 120;

/// A fault injected into a run: once `at` updates are applied, `land` runs on the cluster.
pub struct Fault {
    at: u64,
    /// The trainer waits after update `at` until the fault has landed (between two steps,
    /// before that update's copy of the variables); without, training goes on meanwhile and
    /// the fault lands in whatever runs then (a step, a copy of the variables).
    hold: bool,
    land: Box<dyn FnOnce(&mut EmulatedCluster) + Send>,
}

/// `land` once `update` updates are applied, the trainer waiting after that update until it has.
pub fn at(update: u64, land: impl FnOnce(&mut EmulatedCluster) + Send + 'static) -> Fault {
    Fault {
        at: update,
        hold: true,
        land: Box::new(land),
    }
}

/// `land` once `update` updates are applied, while training goes on.
pub fn while_training(
    update: u64,
    land: impl FnOnce(&mut EmulatedCluster) + Send + 'static,
) -> Fault {
    Fault {
        at: update,
        hold: false,
        land: Box::new(land),
    }
}

/// What a test trains: `job`, planned with `strategy` at global batch `batch`, for `steps`
/// updates.
pub struct Training {
    pub job: Job,
    pub strategy: DataParallelStrategy,
    pub batch: usize,
    pub steps: u64,
    pub recover: Option<RecoverOptions>,
    pub checkpoints: Option<CheckpointOptions>,
}

impl Training {
    /// The own job (tests/common/own_job.rs) at a global batch of 32.
    pub fn own(
        strategy: DataParallelStrategy,
        recover: Option<RecoverOptions>,
        steps: u64,
    ) -> Self {
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
pub struct Trained {
    pub report: TrainingReport,
    pub losses: Vec<(u64, f32)>,
}

impl Trained {
    /// Losses of update `u`, in the order trained (the first, then any redone after a
    /// recovery).
    pub fn losses_of(&self, u: u64) -> Vec<f32> {
        self.losses
            .iter()
            .filter(|(at, _)| *at == u)
            .map(|&(_, l)| l)
            .collect()
    }

    /// Asserts that the loss went down: the mean of the last five steps' losses is below the
    /// first five's (one step's batch is noisy).
    pub fn assert_learns(&self) {
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
    pub fn assert_redone_from_the_copy(&self, r: &Recovered) {
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
pub fn train_job(
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
pub fn train_through(
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

pub fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn start(scenario: &str) -> EmulatedCluster {
    let exe = Path::new(env!("CARGO_BIN_EXE_tf-iaware"));
    EmulatedCluster::start(&Scenario::parse(scenario).unwrap(), exe).unwrap()
}

/// The device of `job` task `index` in `plan`'s replicas or parameter servers.
pub fn device_of(report: &TrainingReport, job: &str, index: usize) -> String {
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
pub fn agent_answers(cluster: &EmulatedCluster, k: usize) -> bool {
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
pub fn python_job() -> Job {
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
