//! Training to a held-out accuracy on the real digits with every data-parallel contender, on a
//! two-worker emulated cluster (real TensorFlow worker processes on 127.0.0.1): asynchronous
//! workers step at their own pace, backup workers let a step go without the slowest gradient,
//! and accuracy rises above chance. Structure is asserted, never time.

use std::path::Path;

use tf_iaware::graph::analyze::analyze_bytes;
use tf_iaware::models::replicated;
use tf_iaware::parallel;
use tf_iaware::runtime::accuracy::{
    train_to_accuracy, AccuracyModel, AccuracyOptions, AccuracyReport, Contender, Feedback,
    LabelledTask, Mode,
};
use tf_iaware::runtime::data_parallel;
use tf_iaware::runtime::Sidecar;
use tf_iaware_emulate::{EmulatedCluster, Scenario};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tf-iaware"))
}

fn summary(r: &AccuracyReport) -> String {
    format!(
        "{}: {} updates, accuracy {:.3}, workers {:?}, dropped {}",
        r.contender,
        r.updates,
        r.final_accuracy,
        r.workers
            .iter()
            .map(|w| (w.batch, w.steps))
            .collect::<Vec<_>>(),
        r.dropped_gradients
    )
}

#[test]
fn contenders_train_the_digits_above_chance_each_by_its_own_rules() {
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
    let model = AccuracyModel::zoo("mlp", 3).unwrap();
    let task = LabelledTask::digits(&model, 0.2, 1).unwrap();
    assert_eq!(task.train.len() + task.test.len(), 1797);
    // A target nobody reaches: each contender trains for its whole time.
    // Asynchronous steps run through each worker's own server, sharing the ps's variables with
    // the chief's session that initialises and evaluates them: accuracy above chance below
    // shows the workers trained those variables.
    let options = AccuracyOptions {
        target: 1.0,
        eval_every_s: 2.0,
        max_train_s: 8.0,
        seed: 3,
        own_masters: Some(cluster.tf_config().clone()),
    };
    let run_with = |name: &str, mode: Mode, feedback: Option<Feedback>| {
        let contender = Contender {
            name: name.into(),
            plan: equal.clone(),
            mode,
            feedback,
        };
        let r = train_to_accuracy(&contender, &model, &task, &devices, &config, &options).unwrap();
        eprintln!("{}", summary(&r));
        assert!(!r.curve.is_empty(), "evaluated at least once");
        assert!(r.eval_seconds > 0.0);
        assert!(
            r.final_accuracy > 0.3,
            "held-out accuracy above chance (0.1): {}",
            summary(&r)
        );
        r
    };
    let run = |name: &str, mode: Mode| run_with(name, mode, None);

    let sync = run("replica-setter", Mode::Sync);
    // Every synchronous step uses both workers.
    assert!(sync.workers.iter().all(|w| w.steps == sync.updates));

    let asynchronous = run("async-ps", Mode::Async);
    let (fast, slow) = (&asynchronous.workers[0], &asynchronous.workers[1]);
    // Every step of either worker is one update; nobody waits for anybody.
    assert_eq!(fast.steps + slow.steps, asynchronous.updates);
    if limited {
        assert!(
            fast.steps > slow.steps,
            "the faster worker runs more steps: {}",
            summary(&asynchronous)
        );
    }

    let backup = run("sync-backup", Mode::Backup { backups: 1 });
    // Each step aggregated one gradient of two: the chief did not wait for both.
    let computed: u64 = backup.workers.iter().map(|w| w.steps).sum();
    assert!(backup.updates > 0);
    assert!(
        computed >= backup.updates,
        "every update is made of a gradient: {}",
        summary(&backup)
    );
    if limited {
        assert!(
            backup.workers[1].steps < backup.updates,
            "steps went on without the slow worker's gradient: {}",
            summary(&backup)
        );
    }

    // Adaptive on unequal shares: a synchronous and an asynchronous window measured, one
    // chosen (on equal shares it trains synchronously without a probe).
    let adaptive = {
        let mut plan = equal.clone();
        plan.replicas[0].batch = 24;
        plan.replicas[1].batch = 8;
        let contender = Contender {
            name: "infra-aware-async".into(),
            plan,
            mode: Mode::Adaptive,
            feedback: None,
        };
        train_to_accuracy(&contender, &model, &task, &devices, &config, &options).unwrap()
    };
    eprintln!("{}", summary(&adaptive));
    assert!(adaptive.final_accuracy > 0.3, "{}", summary(&adaptive));
    let choice = adaptive.chosen.as_ref().expect("the probe is reported");
    assert!(!choice.even_split, "{choice:?}");
    assert!(choice.sync_images_per_sec > 0.0, "{choice:?}");
    assert!(
        choice.async_images_per_sec.is_some_and(|a| a > 0.0),
        "{choice:?}"
    );

    // LB-BSP feedback: every re-size keeps the global batch.
    let calibration: Vec<_> = workers
        .iter()
        .map(|w| parallel::WorkerCapacity {
            device: w.clone(),
            samples_per_sec: 1000.0,
            fixed_ms: 5.0,
            availability: None,
            max_batch: None,
        })
        .collect();
    let feedback = Feedback {
        every: 2,
        capacity: calibration,
        ps: vec![(ps[0].clone(), 1.0)],
        vars: vars.clone(),
        options: parallel::InfraAwareOptions::default(),
    };
    let lbbsp = run_with("infra-aware", Mode::Sync, Some(feedback));
    for shares in &lbbsp.resized {
        assert_eq!(shares.iter().sum::<usize>(), 32, "{:?}", lbbsp.resized);
    }
    assert_eq!(lbbsp.plan.global_batch(), 32);
    if limited {
        // Calibrated as equals, measured unequal: the shares follow the measurement.
        let share = |k: usize| {
            lbbsp
                .plan
                .replicas
                .iter()
                .find(|r| r.device == workers[k])
                .map_or(0, |r| r.batch)
        };
        assert!(
            share(0) > share(1),
            "{}: {:?}",
            summary(&lbbsp),
            lbbsp.resized
        );
    }

    // A graph exported by Python TensorFlow (two conv + batch-norm blocks, Adam, 16×16×3
    // inputs), its sidecar naming the logits: the digits enlarged ×2 with repeated channels.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let bytes = std::fs::read(dir.join("tf1_cnn_adam.pb")).unwrap();
    let mut sidecar = Sidecar::load(&dir.join("tf1_cnn_adam.json")).unwrap();
    sidecar.logits = Some("logits/BiasAdd".into());
    let analyzed = analyze_bytes(&bytes, "tf1_cnn_adam.pb").unwrap();
    let python = AccuracyModel::graph("tf1_cnn_adam", analyzed, sidecar).unwrap();
    let python_task = LabelledTask::digits(&python, 0.2, 1).unwrap();
    assert_eq!(python_task.train.shape, [16, 16, 3]);
    // Its gradients are built under `control_dependencies(UPDATE_OPS)`: every tower waits for
    // the batch-norm averages replica 0 updates, so towers cannot step on their own.
    let asynchronous = Contender {
        name: "async-ps".into(),
        plan: equal.clone(),
        mode: Mode::Async,
        feedback: None,
    };
    let refused = train_to_accuracy(
        &asynchronous,
        &python,
        &python_task,
        &devices,
        &config,
        &options,
    )
    .expect_err("towers linked through replica 0 cannot run asynchronously");
    assert!(
        refused
            .to_string()
            .contains("train this graph synchronously"),
        "{refused}"
    );
    // Synchronously, on the fast worker (the slow one has a twelfth of its CPU).
    let python_vars = tf_iaware::runtime::replicated::variables(&python.workload.analyzed.op_graph);
    let contender = Contender {
        name: "replica-setter".into(),
        plan: parallel::replica_setter(&workers[..1], &ps, &python_vars, 32).unwrap(),
        mode: Mode::Sync,
        feedback: None,
    };
    let longer = AccuracyOptions {
        max_train_s: 12.0,
        ..options.clone()
    };
    let r = train_to_accuracy(
        &contender,
        &python,
        &python_task,
        &devices,
        &config,
        &longer,
    )
    .unwrap();
    eprintln!("python cnn {}", summary(&r));
    assert!(
        r.final_accuracy > 0.2,
        "the Python graph learns the digits: {}",
        summary(&r)
    );
}
