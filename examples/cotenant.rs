//! The co-tenant experiment of the live-metrics issue, on an emulated two-worker cluster:
//!
//! 1. calibrate the workers (or reuse the cached calibration) and train the infra-aware plan;
//! 2. start a co-tenant inside worker 1's cgroup and time how long until its agent's reading
//!    shows the drop;
//! 3. plan again **from the cached calibration** (rescaled to the live availability) and train;
//! 4. calibrate from scratch in the new state, plan and train: the yardstick.
//!
//! `cargo run --example cotenant -- [MODEL] [BATCH] [BUSY]` (default `lenet 64 0.6`); prints one
//! JSON document.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tf_iaware::cluster::connect_tf_config_live;
use tf_iaware::cluster::{Cluster, LiveOptions};
use tf_iaware::models::replicated;
use tf_iaware::parallel::{self, DataParallelPlan, InfraAwareOptions, WorkerCapacity};
use tf_iaware::runtime::calibrate::{self, CalibrateOptions};
use tf_iaware::runtime::{data_parallel, SessionConfig, StepTimes};
use tf_iaware_emulate::{EmulatedCluster, Scenario};

const STEPS: usize = 8;

fn train(
    model: &str,
    plan: &DataParallelPlan,
    cluster: &Cluster,
    config: &SessionConfig,
) -> Result<f64> {
    let report = data_parallel::train(model, plan, cluster, config, STEPS, 2, 1)?;
    Ok(report.step_ms.median)
}

fn shares(plan: &DataParallelPlan) -> Vec<usize> {
    plan.replicas.iter().map(|r| r.batch).collect()
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model = args.first().map_or("lenet", String::as_str).to_string();
    let batch: usize = args.get(1).map_or(Ok(64), |b| b.parse()).context("BATCH")?;
    let busy: f64 = args.get(2).map_or(Ok(0.6), |b| b.parse()).context("BUSY")?;
    let exe_dir = std::env::current_exe()?;
    let exe = exe_dir
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("tf-iaware"))
        .context("locating the tf-iaware binary next to the example")?;
    let scenario = Scenario::parse("workers=0.5,0.5")?;
    let mut cluster = EmulatedCluster::start(&scenario, &exe)?;
    let live = connect_tf_config_live(
        cluster.tf_config(),
        &cluster.master(),
        &LiveOptions::default(),
    )?;
    let mut feed = live.metrics;
    let mut devices = live.cluster;
    let mut config = live.config;
    config.isolate_state = true;
    let (workers, ps) = data_parallel::worker_and_ps_devices(&devices)?;
    let vars = replicated::variables(&model)?;
    let memory = tf_iaware::runtime::replicated::replica_memory(&model).ok();
    let options = InfraAwareOptions {
        per_replica_overhead_ms: 5.0,
        ..InfraAwareOptions::default()
    };
    let probe = (batch / workers.len()).clamp(3, 12);
    let plan = |cal: &[WorkerCapacity], view: &Cluster| {
        parallel::plan_live(cal, view, &ps, &vars, batch, memory.as_ref(), &options)
    };

    // 1. Calibrated (or cached) plan before the co-tenant.
    let first = calibrate::calibrate_workers_cached(
        &model,
        &workers,
        &ps[0],
        &devices,
        &config,
        calibrate::WorkerProbe {
            batch: probe,
            min_seconds: 1.0,
            global_batch: Some(batch),
        },
        &CalibrateOptions::default(),
    )?;
    let before_plan = plan(&first.capacity, &devices)?;
    let before_ms = train(&model, &before_plan, &devices, &config)?;
    let i1 = devices.index_of(&workers[1]).context("worker 1")?;
    let a_before = devices.devices[i1].availability;

    // 2. The co-tenant starts; poll the live reading until it shows.
    let t0 = Instant::now();
    cluster.set_busy(1, busy)?;
    let mut seen_ms = None;
    while t0.elapsed() < Duration::from_secs(10) {
        feed.refresh(&mut devices);
        if devices.devices[i1].availability < a_before * (1.0 - busy / 2.0) {
            seen_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let a_after = devices.devices[i1].availability;

    // 3. The next plan, from the cache.
    let cached = calibrate::calibrate_workers_cached(
        &model,
        &workers,
        &ps[0],
        &devices,
        &config,
        calibrate::WorkerProbe {
            batch: probe,
            min_seconds: 1.0,
            global_batch: Some(batch),
        },
        &CalibrateOptions::default(),
    )?;
    let cached_plan = plan(&cached.capacity, &devices)?;
    let cached_ms = train(&model, &cached_plan, &devices, &config)?;

    // 4. A fresh calibration in the new state.
    let started = Instant::now();
    let probe = calibrate::WorkerProbe {
        batch: probe,
        min_seconds: 1.0,
        global_batch: Some(batch),
    };
    let fresh_cal =
        data_parallel::calibrate_workers(&model, &workers, &ps[0], &devices, &config, probe)?;
    let fresh_seconds = started.elapsed().as_secs_f64();
    let fresh_plan = plan(&fresh_cal, &devices)?;
    let fresh_ms = train(&model, &fresh_plan, &devices, &config)?;
    // The stock even split in the new state, for scale.
    let stock = parallel::replica_setter(&workers, &ps, &vars, batch)?;
    let stock_ms = train(&model, &stock, &devices, &config)?;

    let out = serde_json::json!({
        "model": model, "global_batch": batch, "cotenant_busy_share": busy,
        "worker1_availability_before": a_before,
        "worker1_availability_after": a_after,
        "drop_seen_after_ms": seen_ms,
        "first_calibration": {"cache_hit": first.cache_hit, "seconds": first.seconds},
        "before": {"shares": shares(&before_plan), "step_ms": before_ms},
        "cached_plan": {"cache_hit": cached.cache_hit, "calibration_seconds": cached.seconds,
                        "shares": shares(&cached_plan), "step_ms": cached_ms},
        "fresh_plan": {"calibration_seconds": fresh_seconds, "shares": shares(&fresh_plan), "step_ms": fresh_ms},
        "stock_even_split_ms": stock_ms,
        "cached_vs_fresh": cached_ms / fresh_ms,
        "median_of": STEPS,
        "note": StepTimes::from_samples(&[before_ms]).map(|_| "medians of timed steps after 2 warm-up steps"),
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
