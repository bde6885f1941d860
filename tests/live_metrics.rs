//! Live metrics drive the cluster model end to end, with real worker processes, cgroups and
//! agents on 127.0.0.1: a co-tenant in one worker's cgroup lowers that worker's availability in
//! `devices --json` and its share in the next plan; a dead agent is a warning naming the task
//! and the plan still forms; a calibration under heavy load does not poison the cache.
//! Assertions are on structure and on bounds the cgroup quotas guarantee, never on timings.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::cluster::serial;
use serde_json::Value;
use tf_iaware::cluster::tf_config::TfConfig;
use tf_iaware::cluster::{self, DeviceType, LiveConnection, LiveOptions, LiveSource};
use tf_iaware::models::replicated;
use tf_iaware::parallel::DataParallelStrategy;
use tf_iaware::parallel::{self, InfraAwareOptions, WorkerCapacity};
use tf_iaware::runtime::adapt::{AdaptOptions, MetricsSource, Replanning, Trigger};
use tf_iaware::runtime::data_parallel;
use tf_iaware::runtime::trainer::{self, Contender, OnProgress};
use tf_iaware::{Job, TrainingOptions, TrainingReport};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tf-iaware"))
}

/// `devices --cluster tf-config:PATH --json`.
fn devices_json(tf_config: &Path) -> Value {
    let spec = format!("tf-config:{}", tf_config.display());
    let out = common::ok(&["devices", "--cluster", &spec, "--json"]);
    serde_json::from_str(&out).unwrap()
}

fn device<'a>(listing: &'a Value, prefix: &str) -> &'a Value {
    listing["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| {
            let n = d["name"].as_str().unwrap();
            n.starts_with(prefix) && n.ends_with("CPU:0")
        })
        .unwrap_or_else(|| panic!("no CPU:0 of {prefix} in {listing}"))
}

/// Whether other runnable threads on this host already hold a worker's CPU device below half
/// of its quota (`live.contention_share < 0.5` in a `devices --json` listing): then a smaller
/// quota hardly changes what the worker gets (`cluster::live`), and the tests that shrink one
/// worker's quota have nothing to see. They say so and stop, as they do without cgroups.
fn saturated_host(listing: &Value) -> bool {
    let held: Vec<&Value> = listing["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| {
            d["name"]
                .as_str()
                .is_some_and(|n| n.contains("/job:worker/"))
                && d["live"]["contention_share"]
                    .as_f64()
                    .is_some_and(|s| s < 0.5)
        })
        .collect();
    if held.is_empty() {
        return false;
    }
    eprintln!(
        "skipped: the host's other runnable threads hold {} worker(s) below half their quota \
         (contention share {:?}); a smaller quota would hardly show",
        held.len(),
        held.iter()
            .map(|d| d["live"]["contention_share"].as_f64())
            .collect::<Vec<_>>()
    );
    true
}

/// Equal calibrated figures for `workers`, measured at full availability.
fn equal(workers: &[String]) -> Vec<WorkerCapacity> {
    workers
        .iter()
        .map(|w| WorkerCapacity {
            fixed_ms: 20.0,
            availability: Some(1.0),
            ..WorkerCapacity::rate(w, 100.0)
        })
        .collect()
}

#[test]
fn a_cotenant_in_one_workers_cgroup_lowers_its_availability_and_its_share() {
    let _g = serial();
    let scenario = Scenario::parse("workers=0.5,0.5").unwrap();
    let mut cluster = EmulatedCluster::start(&scenario, exe()).unwrap();
    if cluster.cgroup_paths().is_empty() {
        common::skip_without_cgroups(
            "co-tenants in a worker's cgroup",
            "no writable cgroup cpu controller, co-tenants cannot be confined",
        );
        return;
    }
    let tf_path = cluster.dir().join("tf_config.json");
    // Before: both workers read live from their agents.
    let before = devices_json(&tf_path);
    for w in [
        "/job:worker/replica:0/task:0",
        "/job:worker/replica:0/task:1",
    ] {
        let d = device(&before, w);
        assert!(
            d["live"]["source"]
                .as_str()
                .unwrap()
                .starts_with("agent:127.0.0.1:"),
            "{d}"
        );
        assert!(d["live"]["age_ms"].as_u64().is_some(), "{d}");
        assert_eq!(d["live"]["allotment"].as_f64(), Some(0.5), "{d}");
    }
    assert_eq!(before["warnings"], serde_json::json!([]));
    if saturated_host(&before) {
        return;
    }

    // A co-tenant takes 80 % of worker 1's node quota.
    cluster.set_busy(1, 0.8).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let after = devices_json(&tf_path);
    let w1 = device(&after, "/job:worker/replica:0/task:1");
    let free = w1["live"]["free_fraction"].as_f64().unwrap();
    let a1 = w1["availability"].as_f64().unwrap();
    // The quota split leaves TensorFlow at most 20 % of the node, whatever else runs: a hard
    // cap, so availability is at most that share.
    assert!(free <= 0.2 + 0.02, "{w1}");
    assert!(
        (w1["live"]["hard_share"].as_f64().unwrap() - 0.2).abs() < 0.02,
        "{w1}"
    );
    assert!(a1 <= 0.2 + 0.02 && a1 > 0.0, "{w1}");
    assert!(
        w1["live"]["cotenant_load"].as_f64().unwrap() >= 0.5 * 0.75,
        "{w1}"
    );

    // The library sees the same through `connect`, and the next plan follows it.
    let (devices, _) = cluster.connect().unwrap();
    let (workers, ps) = data_parallel::worker_and_ps_devices(&devices).unwrap();
    let a = |w: &str| devices.devices[devices.index_of(w).unwrap()].availability;
    let (a0, a1) = (a(&workers[0]), a(&workers[1]));
    // Worker 0 has its whole node (less what the host's other runnable threads take of it).
    assert!(a1 <= 0.22 && a0 > a1, "{a0} {a1}");
    let vars = replicated::variables("mlp").unwrap();
    let plan = parallel::plan_live(
        &equal(&workers),
        &devices,
        &ps,
        &vars,
        64,
        None,
        &InfraAwareOptions::default(),
    )
    .unwrap();
    let share = |w: &str| {
        plan.replicas
            .iter()
            .find(|r| r.device == w)
            .map_or(0, |r| r.batch)
    };
    assert_eq!(plan.global_batch(), 64);
    eprintln!(
        "availability {a0:.2} / {a1:.2} → shares {} / {}",
        share(&workers[0]),
        share(&workers[1])
    );
    assert!(share(&workers[1]) < share(&workers[0]), "{plan:?}");
}

#[test]
fn a_dead_agent_is_a_warning_naming_the_task_and_the_plan_still_forms() {
    let _g = serial();
    let scenario = Scenario::parse("workers=0.5,0.5").unwrap();
    let cluster = EmulatedCluster::start(&scenario, exe()).unwrap();
    // The same cluster, but worker 1's agent address is a port nothing listens on.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let text = std::fs::read_to_string(cluster.dir().join("tf_config.json")).unwrap();
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    doc["metrics"]["worker"][1] = Value::String(dead.to_string());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tf_config.json");
    std::fs::write(&path, doc.to_string()).unwrap();

    let listing = devices_json(&path);
    let warnings = listing["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = warnings[0].as_str().unwrap();
    assert!(
        w.contains("worker:1") && w.contains(&dead.to_string()),
        "{w}"
    );
    let w1 = device(&listing, "/job:worker/replica:0/task:1");
    assert_eq!(w1["live"]["source"], "nominal", "{w1}");
    assert!(w1["live"]["warning"].as_str().unwrap().contains("worker:1"));
    assert_eq!(w1["availability"].as_f64(), Some(1.0));
    let w0 = device(&listing, "/job:worker/replica:0/task:0");
    assert!(w0["live"]["source"].as_str().unwrap().starts_with("agent:"));

    // A library user gets the same from `connect_live`, and can still plan.
    let tf = TfConfig::from_file(&path).unwrap();
    let c = cluster::connect_tf_config_live(&tf, &tf.master(), &LiveOptions::default()).unwrap();
    assert!(
        c.warnings.iter().any(|w| w.task == "worker:1"),
        "{:?}",
        c.warnings
    );
    let (workers, ps) = data_parallel::worker_and_ps_devices(&c.cluster).unwrap();
    let i1 = c.cluster.index_of(&workers[1]).unwrap();
    assert_eq!(c.cluster.devices[i1].live.source, LiveSource::Nominal);
    let vars = replicated::variables("mlp").unwrap();
    let plan = parallel::plan_live(
        &equal(&workers),
        &c.cluster,
        &ps,
        &vars,
        32,
        None,
        &InfraAwareOptions::default(),
    )
    .unwrap();
    assert_eq!(plan.global_batch(), 32);
}

#[test]
fn a_calibration_under_heavy_load_does_not_poison_the_cache() {
    let _g = serial();
    let cache = tempfile::tempdir().unwrap();
    let mut hog = std::process::Command::new(exe())
        .args(["hog", "--cores", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let out = common::bin()
        .args(["devices", "--cluster", "local", "--calibrate", "--json"])
        .env("TF_IAWARE_CACHE_DIR", cache.path())
        .env_remove("TF_IAWARE_CALIBRATION_MIN_FREE")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let _ = hog.kill();
    let _ = hog.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = &v["devices"][0];
    assert_eq!(d["live"]["source"], "local-sampler", "{d}");
    assert!(d["live"]["free_fraction"].as_f64().unwrap() < 0.75, "{d}");
    // Two hogs on this host's CPUs: availability falls with the threads the kernel counts, as
    // the fair scheduler shares the cores, but never to the old 0.001 floor.
    let a = d["availability"].as_f64().unwrap();
    let competing = d["live"]["competing_tasks"].as_f64().unwrap();
    assert!(competing >= 1.0, "the hogs are counted: {d}");
    assert!(a < 1.0 && a > 0.01, "{d}");
    assert_eq!(
        v["calibration"]["cached"],
        Value::Null,
        "{}",
        v["calibration"]
    );
    assert!(v["calibration"]["warning"]
        .as_str()
        .unwrap()
        .contains("co-tenant load"));
    let stored = std::fs::read_dir(cache.path().join("calibration"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(stored, 0, "nothing cached");
    // And the next command does not pick up anything from it.
    let again = common::bin()
        .args(["devices", "--cluster", "local", "--json"])
        .env("TF_IAWARE_CACHE_DIR", cache.path())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["calibration_cache"]["hit"], false);
}

#[test]
fn nvml_gpus_map_onto_tensorflow_gpu_devices_where_nvml_exists() {
    let _g = serial();
    if let Err(why) = tf_iaware::cluster::monitor::gpu::nvml() {
        eprintln!(
            "skipped: {why} (the mapping is unit-tested on recorded readings in cluster::live)"
        );
        return;
    }
    let c = cluster::connect_live(&cluster::ClusterSpec::Local, &LiveOptions::default()).unwrap();
    let gpus: Vec<_> = c
        .cluster
        .devices
        .iter()
        .filter(|d| d.device_type == DeviceType::Gpu)
        .collect();
    if gpus.is_empty() {
        eprintln!(
            "skipped: NVML sees GPUs but this libtensorflow creates no GPU devices (CPU build)"
        );
        return;
    }
    for g in gpus {
        assert_eq!(g.live.source, LiveSource::LocalSampler, "{g:?}");
        assert!(g.live.free_memory_bytes.is_some(), "{g:?}");
        assert!(
            g.live.hardware.as_deref().unwrap_or("").starts_with("gpu:"),
            "{g:?}"
        );
        assert!((0.0..=1.0).contains(&g.availability));
    }
}

#[test]
fn adaptive_training_replans_when_a_hog_lands_in_a_workers_cgroup() {
    let _g = serial();
    let scenario = Scenario::parse("workers=0.5,0.5").unwrap();
    let mut cluster = EmulatedCluster::start(&scenario, exe()).unwrap();
    if cluster.cgroup_paths().is_empty() {
        common::skip_without_cgroups(
            "co-tenants in a worker's cgroup",
            "no writable cgroup cpu controller, co-tenants cannot be confined",
        );
        return;
    }
    let c = cluster::connect_tf_config_live(
        cluster.tf_config(),
        &cluster.master(),
        &LiveOptions::default(),
    )
    .unwrap();
    let listing = serde_json::json!({ "devices": c.cluster.devices });
    if saturated_host(&listing) {
        return;
    }
    let (workers, ps) = data_parallel::worker_and_ps_devices(&c.cluster).unwrap();
    let contender = replanning_contender(&c, cluster.tf_config(), &workers, &ps);
    let (report, landed) = train_while_a_hog_lands_in_worker_1(&mut cluster, &c, &contender);
    // Worker 1 moves down by more than the drift threshold. How far depends on what else the
    // host runs: on a quiet host to about its new hard share (0.2); on a busy one less, because
    // other runnable threads already held it below its old quota (`cluster::live`).
    let hit = report.replans.iter().find(|r| {
        r.trigger == Trigger::Metrics && r.moved.iter().any(|(w, f)| w == &workers[1] && *f < 0.85)
    });
    let r = hit.unwrap_or_else(|| {
        panic!(
            "no metrics re-plan for worker 1: {:?} ({} declined, {} updates, hog after {landed})",
            report.replans, report.replans_declined, report.updates
        )
    });
    let share = |w: &str| {
        report
            .plan
            .replicas
            .iter()
            .find(|r| r.device == w)
            .map_or(0, |r| r.batch)
    };
    assert!(share(&workers[1]) < share(&workers[0]), "{:?}", report.plan);
    assert!(
        r.before_step as u64 >= landed && r.first_signal_step >= 2,
        "{r:?}, hog landed after update {landed}"
    );
    assert!(r.detection_latency_ms >= 0.0);
    assert!(report.updates > r.before_step as u64, "{}", report.updates);
    assert!(report.loss_last.is_some_and(f32::is_finite));
}

/// Infra-aware on equal calibrated shares of `workers`, re-planned live from the metrics agents
/// of `tf_config`.
fn replanning_contender(
    c: &LiveConnection,
    tf_config: &TfConfig,
    workers: &[String],
    ps: &[String],
) -> Contender {
    let vars = replicated::variables("mlp").unwrap();
    let planner = parallel::DataParallelPlanner::new(
        DataParallelStrategy::InfraAware,
        workers,
        ps,
        &vars,
        32,
    )
    .unwrap()
    .with_calibration(equal(workers));
    let first = planner.plan(&c.cluster).unwrap();
    let replanning = Replanning {
        planner,
        metrics: Some(MetricsSource::TfConfig(tf_config.clone())),
        tasks: None,
    };
    Contender {
        strategy: DataParallelStrategy::InfraAware,
        plan: first,
        feedback: None,
        replanning: Some(replanning),
    }
}

/// Trains `contender` (adapting on metrics only) while this thread lands a hog in worker 1's
/// cgroup once two steps ran, and ends the run a few steps after a re-plan came (or 30 s
/// passed). Returns the report and the update after which the hog landed.
fn train_while_a_hog_lands_in_worker_1(
    cluster: &mut EmulatedCluster,
    c: &LiveConnection,
    contender: &Contender,
) -> (TrainingReport, u64) {
    let adapt = AdaptOptions {
        // Metrics only: the hog must be seen by the agents, not by step times.
        step_threshold: f64::INFINITY,
        trace_steps: false,
        ..AdaptOptions::default()
    };
    // The trainer reports its updates and re-plans after every step; this thread lands the
    // hog once two steps ran and ends the run once a re-plan came (or 30 s passed).
    let (updates, replans) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicUsize::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let (u, r) = (updates.clone(), replans.clone());
    let options = TrainingOptions {
        steps: None,
        epochs: None,
        max_seconds: Some(60.0),
        adapt: Some(adapt),
        stop: Some(stop.clone()),
        progress: Some(OnProgress::every_step(move |p| {
            u.store(p.updates, Ordering::SeqCst);
            r.store(p.replans, Ordering::SeqCst);
        })),
        ..TrainingOptions::default()
    };
    let job = Job::synthetic(&"mlp".into(), 512, 1).unwrap();
    std::thread::scope(|scope| {
        let training =
            scope.spawn(|| trainer::train(contender, &job, &c.cluster, &c.config, &options));
        let wait = |what: &dyn Fn() -> bool, limit: Duration| {
            let started = std::time::Instant::now();
            while !what() && started.elapsed() < limit && !training.is_finished() {
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        wait(
            &|| updates.load(Ordering::SeqCst) >= 2,
            Duration::from_secs(30),
        );
        cluster.set_busy(1, 0.8).unwrap();
        let landed = updates.load(Ordering::SeqCst);
        wait(
            &|| replans.load(Ordering::SeqCst) > 0,
            Duration::from_secs(30),
        );
        // A few more steps on the new plan: training goes on from the same variables.
        let replanned = updates.load(Ordering::SeqCst);
        wait(
            &|| updates.load(Ordering::SeqCst) >= replanned + 2,
            Duration::from_secs(10),
        );
        stop.store(true, Ordering::SeqCst);
        (training.join().unwrap().unwrap(), landed)
    })
}
