//! The drift experiment: the same infra-aware start, then a worker turns busy mid-run; one run
//! keeps its plan, the other watches each replica's measured throughput (step stats of every
//! step) and re-plans when a worker moves beyond a threshold for several steps. A fresh plan made
//! after the change is the yardstick.

use anyhow::Result;
use serde::Serialize;
use tf_iaware::cluster::Cluster;
use tf_iaware::emulate::{EmulatedCluster, Scenario};
use tf_iaware::parallel::{self, DataParallelPlan, InfraAwareOptions, VarInfo, WorkerCapacity};
use tf_iaware::runtime::{data_parallel, SessionConfig, StepTimes};

use super::OVERHEAD_MS;

/// Relative change of a worker's throughput that counts as a move.
const THRESHOLD: f64 = 0.3;
/// Consecutive steps a move must last before re-planning.
const PATIENCE: usize = 2;
/// Steps run after the last drift event.
const AFTER: usize = 8;

/// What the drift experiment needs of the benchmark.
pub struct Setup<'a> {
    pub devices: &'a Cluster,
    pub model: &'a str,
    pub workers: &'a [String],
    pub ps: &'a [String],
    pub vars: &'a [VarInfo],
    pub batch: usize,
}

#[derive(Serialize)]
pub struct AdaptationReport {
    /// First step that runs after the change.
    pub drift_step: usize,
    /// Step time of every step, ms, without adaptation.
    pub static_ms: Vec<f64>,
    /// Step time of every step, ms, with adaptation.
    pub adaptive_ms: Vec<f64>,
    /// Steps before which the adaptive run switched plans.
    pub replans: Vec<usize>,
    /// Median step of a plan made from scratch after the change, ms.
    pub fresh_plan_ms: f64,
    /// Steps after the change until the adaptive run is within 25 % of the fresh plan (and
    /// stays there); `None` if it never is.
    pub recovered_after_steps: Option<usize>,
    /// Median of the static run's steps after the change ÷ the fresh plan's.
    pub static_slowdown: f64,
}

fn options() -> InfraAwareOptions {
    InfraAwareOptions {
        per_replica_overhead_ms: OVERHEAD_MS,
        ..Default::default()
    }
}

fn plan(setup: &Setup, capacity: &[WorkerCapacity]) -> Result<DataParallelPlan> {
    let ps_cap: Vec<(String, f64)> = setup.ps.iter().map(|p| (p.clone(), 1.0)).collect();
    Ok(parallel::infra_aware(
        capacity,
        &ps_cap,
        setup.vars,
        setup.batch,
        &options(),
    )?)
}

fn calibrate(setup: &Setup, config: &SessionConfig) -> Result<Vec<WorkerCapacity>> {
    let probe = (setup.batch / setup.workers.len()).clamp(3, 12);
    Ok(data_parallel::calibrate_workers(
        setup.model,
        setup.workers,
        &setup.ps[0],
        setup.devices,
        config,
        probe,
        1.0,
    )?)
}

/// One run over the drift; re-plans when `adaptive`.
fn run_once(
    cluster: &mut EmulatedCluster,
    setup: &Setup,
    config: &SessionConfig,
    scenario: &Scenario,
    adaptive: bool,
) -> Result<(Vec<f64>, Vec<usize>)> {
    for (k, w) in scenario.workers.iter().enumerate() {
        cluster.set_busy(k, w.busy)?;
    }
    let mut capacity = calibrate(setup, config)?;
    let mut current = plan(setup, &capacity)?;
    let (mut trainer, _, _) =
        data_parallel::prepare(setup.model, &current, setup.devices, config, 1)?;
    trainer.init()?;
    trainer.step(0, false)?;
    trainer.step(1, false)?;
    let last = scenario.drift.iter().map(|d| d.at_step).max().unwrap_or(0) + AFTER;
    let mut times = Vec::with_capacity(last);
    let mut replans = Vec::new();
    let mut strikes = 0usize;
    for step in 0..last {
        for d in scenario.drift.iter().filter(|d| d.at_step == step) {
            cluster.set_busy(d.worker, d.busy)?;
        }
        let (_, ms, stats) = trainer.step(step + 2, adaptive)?;
        times.push(ms);
        let Some(stats) = stats.filter(|_| adaptive) else {
            continue;
        };
        let observed = data_parallel::observed_throughput(&current, &stats);
        let moved = observed.iter().any(|o| {
            capacity
                .iter()
                .find(|c| c.device == o.device)
                .is_some_and(|c| {
                    let ratio = o.samples_per_sec / c.samples_per_sec;
                    !(1.0 - THRESHOLD..=1.0 + THRESHOLD).contains(&ratio)
                })
        });
        strikes = if moved { strikes + 1 } else { 0 };
        if strikes >= PATIENCE {
            // Believe the measurements for the workers in use; keep the rest as they were.
            for o in observed {
                if let Some(c) = capacity.iter_mut().find(|c| c.device == o.device) {
                    c.samples_per_sec = o.samples_per_sec;
                }
            }
            current = plan(setup, &capacity)?;
            let (next, _, _) =
                data_parallel::prepare(setup.model, &current, setup.devices, config, 1)?;
            next.run_op("init_data")?;
            trainer = next;
            replans.push(step + 1);
            strikes = 0;
        }
    }
    Ok((times, replans))
}

pub fn run(
    cluster: &mut EmulatedCluster,
    setup: &Setup,
    config: &SessionConfig,
    scenario: &Scenario,
) -> Result<AdaptationReport> {
    // Variables must outlive a re-plan: sessions share the ps's state here.
    let config = SessionConfig {
        isolate_state: false,
        ..config.clone()
    };
    eprintln!("drift: run without adaptation…");
    let (static_ms, _) = run_once(cluster, setup, &config, scenario, false)?;
    eprintln!("drift: run with adaptation…");
    let (adaptive_ms, replans) = run_once(cluster, setup, &config, scenario, true)?;
    eprintln!("drift: fresh plan after the change…");
    let capacity = calibrate(setup, &config)?;
    let fresh = plan(setup, &capacity)?;
    let report = data_parallel::train(setup.model, &fresh, setup.devices, &config, 3, 1, 1)?;
    let fresh_plan_ms = report.step_ms.median;
    let drift_step = scenario.drift.iter().map(|d| d.at_step).min().unwrap_or(0);
    let within = |ms: f64| ms <= 1.25 * fresh_plan_ms;
    let recovered_after_steps = (drift_step..adaptive_ms.len())
        .find(|&s| adaptive_ms[s..].iter().all(|&ms| within(ms)))
        .map(|s| s - drift_step + 1);
    let after_static = StepTimes::from_samples(&static_ms[drift_step.min(static_ms.len())..])
        .map_or(0.0, |t| t.median);
    let out = AdaptationReport {
        drift_step,
        static_slowdown: after_static / fresh_plan_ms,
        static_ms,
        adaptive_ms,
        replans,
        fresh_plan_ms,
        recovered_after_steps,
    };
    println!();
    println!(
        "drift at step {}: fresh plan {:.1} ms/step",
        out.drift_step, out.fresh_plan_ms
    );
    println!(
        "  without adaptation: {:.1} ms/step after the change ({:.2}× the fresh plan)",
        after_static, out.static_slowdown
    );
    match out.recovered_after_steps {
        Some(n) => println!("  with adaptation: re-planned before step(s) {:?}; within 25 % of the fresh plan after {n} step(s)", out.replans),
        None => println!("  with adaptation: re-planned before step(s) {:?}; never within 25 % of the fresh plan", out.replans),
    }
    Ok(out)
}
