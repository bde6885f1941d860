//! Training to a held-out accuracy on the real digits with every data-parallel contender, on a
//! two-worker emulated cluster (real TensorFlow worker processes on 127.0.0.1): asynchronous
//! workers step at their own pace, backup workers let a step go without the slowest gradient,
//! and accuracy rises above chance. Structure is asserted, never time.

use std::path::Path;

use tf_iaware::cluster::Cluster;
use tf_iaware::data::{digits_split, input_specs};
use tf_iaware::graph::analyze::{analyze_bytes, analyze_graph, Analyzed};
use tf_iaware::graph::Sidecar;
use tf_iaware::models::replicated;
use tf_iaware::parallel::{self, DataParallelPlan, DataParallelStrategy as S, VarInfo};
use tf_iaware::runtime::data_parallel;
use tf_iaware::runtime::trainer::{train, Contender, Feedback};
use tf_iaware::runtime::SessionConfig;
use tf_iaware::{Job, TrainingOptions, TrainingReport};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tf-iaware"))
}

/// The digits, 20 % held out, as a job of `analyzed` (its images and labels fitted to the graph's
/// inputs).
fn digits_job(name: &str, analyzed: Analyzed, sidecar: Sidecar) -> Job {
    let specs = input_specs(&analyzed.op_graph, &sidecar).unwrap();
    let (train_rows, held_out) = digits_split(&specs, 0.2, 1).unwrap();
    Job::new(name, analyzed, sidecar, Box::new(train_rows))
        .unwrap()
        .with_held_out(Box::new(held_out))
        .unwrap()
}

fn accuracy(r: &TrainingReport) -> f64 {
    r.final_metric.unwrap_or(0.0)
}

fn summary(r: &TrainingReport) -> String {
    format!(
        "{}: {} updates, accuracy {:.3}, workers {:?}, dropped {}",
        r.strategy,
        r.updates,
        accuracy(r),
        r.workers
            .iter()
            .map(|w| (w.batch, w.steps))
            .collect::<Vec<_>>(),
        r.dropped_gradients
    )
}

/// What every contender shares: a two-worker emulated cluster (worker 1 gets a twelfth of
/// worker 0's CPU where cgroups are writable), the MLP job on the digits, an equal-share plan and
/// training options that run each contender for its whole time.
struct Setup {
    /// Whether CPU quotas hold (cgroups writable): only then is worker 1 the slow one.
    limited: bool,
    devices: Cluster,
    config: SessionConfig,
    workers: Vec<String>,
    ps: Vec<String>,
    vars: Vec<VarInfo>,
    equal: DataParallelPlan,
    job: Job,
    options: TrainingOptions,
    /// Last: the cluster's processes end after everything that uses them.
    _cluster: EmulatedCluster,
}

impl Setup {
    fn start() -> Setup {
        // Worker 1 gets a twelfth of worker 0's CPU (where cgroups are writable).
        let scenario = Scenario::parse("workers=0.6,0.05").unwrap();
        let cluster = EmulatedCluster::start(&scenario, exe()).unwrap();
        let limited = cluster.quota_warning.is_none();
        if let Some(why) = &cluster.quota_warning {
            eprintln!("note: {why}");
        }
        let (devices, mut config) = cluster.connect().unwrap();
        config.isolate_state = true;
        let (workers, ps) = data_parallel::worker_and_ps_devices(&devices).unwrap();
        let vars = replicated::variables("mlp").unwrap();
        let equal = parallel::replica_setter(&workers, &ps, &vars, 32).unwrap();
        let m = tf_iaware::models::build("mlp", 64, 3).unwrap();
        let job = digits_job("mlp", analyze_graph(m.net.graph()).unwrap(), m.sidecar);
        assert_eq!(
            job.train_data().len() + job.held_out_data().map_or(0, |d| d.len()),
            1797
        );
        // A target nobody reaches: each contender trains for its whole time.
        // Asynchronous steps run through each worker's own server, sharing the ps's variables with
        // the chief's session that initialises and evaluates them: accuracy above chance below
        // shows the workers trained those variables.
        let options = TrainingOptions {
            target: Some(1.0),
            eval_every_s: 2.0,
            max_seconds: Some(8.0),
            epochs: None,
            steps: None,
            seed: 3,
            own_masters: Some(cluster.tf_config().clone()),
            ..TrainingOptions::default()
        };
        Setup {
            limited,
            devices,
            config,
            workers,
            ps,
            vars,
            equal,
            job,
            options,
            _cluster: cluster,
        }
    }

    /// `strategy` on the MLP job with the equal plan: evaluated, above chance.
    fn run_with(&self, strategy: S, feedback: Option<Feedback>) -> TrainingReport {
        let contender = Contender {
            strategy,
            plan: self.equal.clone(),
            feedback,
            replanning: None,
        };
        let r = train(
            &contender,
            &self.job,
            &self.devices,
            &self.config,
            &self.options,
        )
        .unwrap();
        eprintln!("{}", summary(&r));
        assert!(!r.evaluations.is_empty(), "evaluated at least once");
        assert!(r.eval_seconds > 0.0);
        assert!(
            accuracy(&r) > 0.3,
            "held-out accuracy above chance (0.1): {}",
            summary(&r)
        );
        r
    }

    fn run(&self, strategy: S) -> TrainingReport {
        self.run_with(strategy, None)
    }
}

/// A worker's steps by device (a worker that finished no step in the time, as the 0.05-core
/// one can on a loaded host, has none).
fn steps_of(r: &TrainingReport, device: &str) -> u64 {
    r.workers
        .iter()
        .find(|w| w.device == device)
        .map_or(0, |w| w.steps)
}

#[test]
fn contenders_train_the_digits_above_chance_each_by_its_own_rules() {
    // One cluster for every contender: they train one after another, each on the whole host.
    let s = Setup::start();
    synchronous_steps_use_both_workers(&s);
    asynchronous_workers_step_at_their_own_pace(&s);
    backup_workers_let_a_step_go_without_the_slowest(&s);
    adaptive_measures_both_windows_and_chooses(&s);
    lbbsp_feedback_keeps_the_global_batch(&s);
    a_python_graph_trains_asynchronously_and_synchronously(&s);
}

fn synchronous_steps_use_both_workers(s: &Setup) {
    let sync = s.run(S::ReplicaSetter);
    // Every synchronous step uses both workers.
    assert!(sync.workers.iter().all(|w| w.steps == sync.updates));
}

fn asynchronous_workers_step_at_their_own_pace(s: &Setup) {
    let asynchronous = s.run(S::AsyncPs);
    let (fast, slow) = (
        steps_of(&asynchronous, &s.workers[0]),
        steps_of(&asynchronous, &s.workers[1]),
    );
    // Every step of either worker is one update; nobody waits for anybody.
    assert_eq!(fast + slow, asynchronous.updates);
    if s.limited {
        assert!(
            fast > slow,
            "the faster worker runs more steps: {}",
            summary(&asynchronous)
        );
    }
}

fn backup_workers_let_a_step_go_without_the_slowest(s: &Setup) {
    let backup = s.run(S::SyncBackup { backups: 1 });
    // Each step aggregated one gradient of two: the chief did not wait for both.
    let computed: u64 = backup.workers.iter().map(|w| w.steps).sum();
    assert!(backup.updates > 0);
    assert!(
        computed >= backup.updates,
        "every update is made of a gradient: {}",
        summary(&backup)
    );
    if s.limited {
        assert!(
            steps_of(&backup, &s.workers[1]) < backup.updates,
            "steps went on without the slow worker's gradient: {}",
            summary(&backup)
        );
    }
}

fn adaptive_measures_both_windows_and_chooses(s: &Setup) {
    // Adaptive on unequal shares: a synchronous and an asynchronous window measured, one
    // chosen (on equal shares it trains synchronously without a probe).
    let adaptive = {
        let mut plan = s.equal.clone();
        plan.replicas[0].batch = 24;
        plan.replicas[1].batch = 8;
        let contender = Contender {
            strategy: S::InfraAwareAsync,
            plan,
            feedback: None,
            replanning: None,
        };
        train(&contender, &s.job, &s.devices, &s.config, &s.options).unwrap()
    };
    eprintln!("{}", summary(&adaptive));
    assert!(accuracy(&adaptive) > 0.3, "{}", summary(&adaptive));
    let choice = adaptive.chosen.as_ref().expect("the probe is reported");
    assert!(!choice.even_split, "{choice:?}");
    assert!(choice.sync_images_per_sec > 0.0, "{choice:?}");
    assert!(
        choice.async_images_per_sec.is_some_and(|a| a > 0.0),
        "{choice:?}"
    );
}

fn lbbsp_feedback_keeps_the_global_batch(s: &Setup) {
    // LB-BSP feedback: every re-size keeps the global batch.
    let calibration: Vec<_> = s
        .workers
        .iter()
        .map(|w| parallel::WorkerCapacity {
            device: w.clone(),
            samples_per_sec: 1000.0,
            fixed_ms: 5.0,
            ..Default::default()
        })
        .collect();
    let feedback = Feedback {
        every: 2,
        capacity: calibration,
        ps: vec![(s.ps[0].clone(), 1.0)],
        vars: s.vars.clone(),
        options: parallel::InfraAwareOptions::default(),
    };
    let lbbsp = s.run_with(S::InfraAware, Some(feedback));
    for shares in &lbbsp.resized {
        assert_eq!(shares.iter().sum::<usize>(), 32, "{:?}", lbbsp.resized);
    }
    assert_eq!(lbbsp.plan.global_batch(), 32);
    if s.limited {
        // Calibrated as equals, measured unequal: the shares follow the measurement.
        let share = |k: usize| {
            lbbsp
                .plan
                .replicas
                .iter()
                .find(|r| r.device == s.workers[k])
                .map_or(0, |r| r.batch)
        };
        assert!(
            share(0) > share(1),
            "{}: {:?}",
            summary(&lbbsp),
            lbbsp.resized
        );
    }
}

fn a_python_graph_trains_asynchronously_and_synchronously(s: &Setup) {
    // A graph exported by Python TensorFlow (two conv + batch-norm blocks, Adam, 16×16×3
    // inputs), its sidecar naming the logits: the digits enlarged ×2 with repeated channels.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let bytes = std::fs::read(dir.join("tf1_cnn_adam.pb")).unwrap();
    let mut sidecar = Sidecar::load(&dir.join("tf1_cnn_adam.json")).unwrap();
    sidecar.logits = Some("logits/BiasAdd".into());
    let analyzed = analyze_bytes(&bytes, "tf1_cnn_adam.pb").unwrap();
    let python = digits_job("tf1_cnn_adam", analyzed, sidecar);
    assert!(python.inputs().iter().any(|i| i.row_shape() == [16, 16, 3]));
    // TF1's `minimize` groups each op's gradients with `tf.tuple` (`group_deps`) and the
    // batch-norm averages run once per step: replicated per tower, the graph trains
    // asynchronously too.
    let asynchronous = Contender {
        strategy: S::AsyncPs,
        plan: s.equal.clone(),
        feedback: None,
        replanning: None,
    };
    let r = train(&asynchronous, &python, &s.devices, &s.config, &s.options).unwrap();
    eprintln!("python cnn {}", summary(&r));
    assert!(
        r.updates > 0 && !r.evaluations.is_empty(),
        "{}",
        summary(&r)
    );
    let stepped: u64 = r.workers.iter().map(|w| w.steps).sum();
    assert_eq!(stepped, r.updates, "every asynchronous step is one update");
    // Synchronously, on the fast worker (the slow one has a twelfth of its CPU).
    let python_vars = python.workload().variables().unwrap();
    let contender = Contender {
        strategy: S::ReplicaSetter,
        plan: parallel::replica_setter(&s.workers[..1], &s.ps, &python_vars, 32).unwrap(),
        feedback: None,
        replanning: None,
    };
    let longer = TrainingOptions {
        max_seconds: Some(12.0),
        ..s.options.clone()
    };
    let r = train(&contender, &python, &s.devices, &s.config, &longer).unwrap();
    eprintln!("python cnn {}", summary(&r));
    assert!(
        accuracy(&r) > 0.2,
        "the Python graph learns the digits: {}",
        summary(&r)
    );
}
