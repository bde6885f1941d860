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

/// Relative change of a replica's busy window that counts as a move (windows of a quota-limited
/// worker jitter by a few CFS periods, so small changes are noise).
const THRESHOLD: f64 = 0.5;
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

/// Steps after a (re)plan whose windows are not used (a new session's first steps are slow).
const GRACE: usize = 1;
/// Steps whose windows form the baseline.
const BASELINE: usize = 3;

/// Watches each replica's busy window against its own baseline.
#[derive(Default)]
struct Watch {
    seen: usize,
    baseline: Vec<(String, Vec<f64>)>,
    strikes: usize,
}

impl Watch {
    /// Feeds one step's windows (device, ms); returns the moved workers' slowdown factors once a
    /// move has lasted PATIENCE steps.
    fn observe(&mut self, spans: &[(String, f64)]) -> Option<Vec<(String, f64)>> {
        self.seen += 1;
        if self.seen <= GRACE {
            return None;
        }
        if self.seen <= GRACE + BASELINE {
            for (d, ms) in spans {
                match self.baseline.iter_mut().find(|(b, _)| b == d) {
                    Some((_, v)) => v.push(*ms),
                    None => self.baseline.push((d.clone(), vec![*ms])),
                }
            }
            return None;
        }
        let moved: Vec<(String, f64)> = spans
            .iter()
            .filter_map(|(d, ms)| {
                let base = self.baseline.iter().find(|(b, _)| b == d)?.1.clone();
                let base = StepTimes::from_samples(&base)?.median;
                let f = ms / base;
                (!(1.0 / (1.0 + THRESHOLD)..=1.0 + THRESHOLD).contains(&f)).then(|| (d.clone(), f))
            })
            .collect();
        self.strikes = if moved.is_empty() {
            0
        } else {
            self.strikes + 1
        };
        (self.strikes >= PATIENCE).then_some(moved)
    }
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
    // Each replica's busy window right after a (re)plan is its baseline; a window that stays
    // beyond THRESHOLD of it for PATIENCE steps means that worker's capacity moved.
    let mut watch = Watch::default();
    for step in 0..last {
        for d in scenario.drift.iter().filter(|d| d.at_step == step) {
            cluster.set_busy(d.worker, d.busy)?;
        }
        // Both runs trace every step, so tracing costs them alike.
        let (_, ms, stats) = trainer.step(step + 2, true)?;
        times.push(ms);
        let Some(stats) = stats.filter(|_| adaptive) else {
            continue;
        };
        let spans = data_parallel::replica_spans_ms(&current, &stats);
        let Some(factors) = watch.observe(&spans) else {
            continue;
        };
        // Scale the moved workers' calibration by how much slower (or faster) they became.
        for (device, f) in factors {
            if let Some(c) = capacity.iter_mut().find(|c| c.device == device) {
                c.samples_per_sec /= f;
                c.fixed_ms *= f;
            }
        }
        current = plan(setup, &capacity)?;
        let (next, _, _) = data_parallel::prepare(setup.model, &current, setup.devices, config, 1)?;
        next.run_op("init_data")?;
        trainer = next;
        replans.push(step + 1);
        watch = Watch::default();
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
